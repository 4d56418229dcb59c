"""Sprint fits: one race (compile and run timed separately) and a batch of synthetic races fitted in
one vmapped call, with scipy's least_squares on the Tibshirani (1997) model timed in the same run.

    python benchmarks/sprint.py            # 1,000 synthetic races
    python benchmarks/sprint.py --n 200    # smaller

Large batches run the Levenberg–Marquardt solves through ``LANES`` lanes with refills
(``jaxbio.sprint._solve.lm_lanes``); ``--compare-lanes`` also times the per-race model choice
the earlier way (one vmapped loop per call: every solve runs as many iterations as the slowest)
in the same run and checks that both give the same choices and parameters.

``--against REV`` (e.g. ``41cb379``, the last commit with the sprint's private simulator, issue
#16) times the same work in this tree and in a git worktree of ``REV``, in fresh processes
alternated ``--pairs`` times: the cold ``fit(embedded_races())`` (CPU and wall, import excluded),
and the first and second calls of ``fit`` on 1,000 races (the embedded ones repeated). Run it
pinned (``taskset -c 0``) for steady CPU times, and unpinned as a user would.

It also times what a user waits for (issue #21's targets: under 10 s and under 60 s): ``jaxbio
sprint`` on every embedded race, cold, from the shell (a fresh process, no compilation cache:
``JAXBIO_JAX_CACHE=0``; median of ``--cold-runs``), and the first call of the 1,000-race fit
(compile + run).

The synthetic races are simulated by the sprinter model itself (free parameters drawn around the
defaults: log-normal, 5 % spread; reaction time 0.12–0.18 s; wind −1…+1.5 m/s), 10 m splits
rounded to 0.01 s like real data, then fitted from the default starts; the recovery error is
reported. CPU, float64.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxbio.sprint as sprint  # noqa: E402
from jaxbio.sprint.baselines import fit_baseline  # noqa: E402
from jaxbio.sprint.fitting import default_starts, fit_splits  # noqa: E402
from jaxbio.sprint.model import DEFAULTS, FREE  # noqa: E402
from _machine import finish, machine, row  # noqa: E402  (benchmarks/_machine.py)

D10 = np.arange(10.0, 101.0, 10.0)


def synthetic(n, seed=0):
    rng = np.random.default_rng(seed)
    base = sprint.Sprinter()
    truth = np.log([DEFAULTS[k] for k in FREE])[None] + rng.normal(0.0, 0.05, (n, len(FREE)))
    rt = rng.uniform(0.12, 0.18, n)
    wind = rng.uniform(-1.0, 1.5, n)
    times = jax.jit(jax.vmap(lambda th, r, w: sprint.split_times(base.with_log(FREE, th), D10, r, w, 14.0)))(
        jnp.asarray(truth), jnp.asarray(rt), jnp.asarray(wind)
    )
    times = np.round(np.asarray(times), 2)
    return truth, rt, wind, times


def scipy_tibshirani(rt, times):
    from scipy.optimize import brentq, least_squares

    def x_of(th, s):
        f, c, k = np.exp(th)
        A = f / k + c / k**2
        return A * (s - (1 - np.exp(-k * s)) / k) - c * s**2 / (2 * k)

    def time_at(th, d):
        s_hi = 30.0
        if x_of(th, s_hi) < d:  # never reaches d before 30 s: keep the residual large and smooth
            return s_hi + (d - x_of(th, s_hi))
        return brentq(lambda s: x_of(th, s) - d, 1e-9, s_hi)

    out = []
    for r, t in zip(rt, times):
        res = least_squares(
            lambda th: np.array([r + time_at(th, d) for d in D10]) - t, np.log([9.0, 0.05, 0.8]), xtol=1e-10, ftol=1e-10
        )
        out.append(np.sqrt(np.mean(res.fun**2)))
    return np.array(out)


def cold_cli(runs: int) -> float:
    """Median wall time [s] of ``python -m jaxbio.sprint --no-progress`` in fresh processes with no
    compilation cache (what a user's first ``jaxbio sprint`` costs, start-up included)."""
    env = dict(os.environ, JAXBIO_JAX_CACHE="0")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "jaxbio.sprint", "--no-progress"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


#: what ``--against`` runs in each tree, in a fresh process (``fit`` moved from
#: ``jaxbio.sprint.fit`` to ``jaxbio.sprint.fitting`` after the private simulator was removed)
_AGAINST_CHILD = """
import json, resource, sys, time
import jax
jax.config.update("jax_enable_x64", True)  # as the CLI (API.md: it fits in float64)
def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
import numpy as np
from jaxbio.sprint.data import embedded_races
try:
    from jaxbio.sprint.fitting import fit
except ImportError:
    from jaxbio.sprint.fit import fit
races = embedded_races()
out = {}
for key, batch in (("cold", races), ("first_1000", races * (1000 // len(races))), ("second_1000", None)):
    batch = races * (1000 // len(races)) if batch is None else batch
    c0, t0 = cpu(), time.perf_counter()
    np.asarray(fit(batch).theta)
    out[key] = (cpu() - c0, time.perf_counter() - t0)
print(json.dumps(out))
"""


def against(rev: str, pairs: int) -> list:
    """Alternated fresh-process timings of ``_AGAINST_CHILD`` in this tree and at ``rev``: a
    list of ``(name, {key: (cpu s, wall s)})`` per run."""
    import json
    import tempfile

    root = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    ).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="jaxbio-against-")
    subprocess.run(["git", "worktree", "add", "--detach", tmp, rev], cwd=root, check=True, capture_output=True)
    try:
        env = dict(os.environ, JAXBIO_JAX_CACHE="0")
        runs = []
        for _ in range(pairs):
            for name, tree in ((rev, tmp), ("this tree", root)):
                done = subprocess.run(
                    [sys.executable, "-c", _AGAINST_CHILD],
                    env=dict(env, PYTHONPATH=tree),
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=tree,
                )
                runs.append((name, json.loads(done.stdout.strip().splitlines()[-1])))
                print(
                    f"  {name:>10}: "
                    + ", ".join(f"{k} {c:.2f} s CPU ({w:.2f} wall)" for k, (c, w) in runs[-1][1].items()),
                    flush=True,
                )
        return runs
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tmp], cwd=root, check=False, capture_output=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="synthetic races in the batch (default 1000)")
    ap.add_argument("--starts", type=int, default=1, help="LM starts per race in the batch (default 1: the defaults)")
    ap.add_argument("--scipy-races", type=int, default=None, help="races for scipy (default all)")
    ap.add_argument("--cold-runs", type=int, default=3, help="cold `jaxbio sprint` runs (median; 0: skip)")
    ap.add_argument(
        "--compare-lanes",
        action="store_true",
        help="also time fit_selected with lanes=False (one vmapped loop per call, the earlier way)",
    )
    ap.add_argument("--against", metavar="REV", help="only time fit() cold and on 1,000 races here and at git REV")
    ap.add_argument("--pairs", type=int, default=3, help="alternated runs per tree with --against (default 3)")
    ap.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    a = ap.parse_args(argv)
    print(
        f"jaxbio sprint benchmark — jax {jax.__version__}, {jax.devices()[0].platform}, float64, "
        f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}"
    )
    if a.against:
        runs = against(a.against, a.pairs)
        for key in runs[0][1]:
            cpu = {name: [r[key][0] for n, r in runs if n == name] for name in (a.against, "this tree")}
            mean = {name: float(np.median(v)) for name, v in cpu.items()}
            print(
                f"{key}: median CPU {a.against} {mean[a.against]:.2f} s, this tree {mean['this tree']:.2f} s "
                f"(×{mean['this tree'] / mean[a.against]:.2f})"
            )
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        return

    rows = []
    if a.cold_runs > 0:
        t_cold = cold_cli(a.cold_runs)
        n_races = len(sprint.embedded_names())
        print(
            f"\njaxbio sprint, {n_races} embedded races, cold from the shell (no compilation cache), median of "
            f"{a.cold_runs}: {t_cold:6.2f} s  (target < 10 s)"
        )
        rows.append(
            row(
                "`jaxbio sprint` cold, whole command",
                f"{n_races} embedded races",
                1,
                t_cold,
                unit="run",
                note="fresh process, JAXBIO_JAX_CACHE=0; target < 10 s",
            )
        )

    # --- one race: compile and run separately
    race = sprint.load_race("bolt_2009")
    one = sprint.Splits.from_arrays([race.distances], [race.times], [race.reaction_time], [race.wind])
    t0 = time.perf_counter()
    res = fit_splits(one)
    t_first = time.perf_counter() - t0
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        fit_splits(one)
        runs.append(time.perf_counter() - t0)
    t_run = float(np.median(runs))
    print(
        f"\none race (bolt_2009_berlin_wc_final, 10 splits, 4 starts): compile {t_first - t_run:6.2f} s, "
        f"run {t_run * 1e3:7.1f} ms  (RMSE {res.rmse[0]:.4f} s, converged {bool(res.converged[0])})"
    )

    # --- a batch of synthetic races in one vmapped call
    truth, rt, wind, times = synthetic(a.n)
    splits = sprint.Splits.from_arrays([D10] * a.n, list(times), rt, wind)
    starts = default_starts(sprint.Sprinter())[: a.starts]
    t0 = time.perf_counter()
    res = fit_splits(splits, starts=starts, n_grid=0)
    t_batch_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = fit_splits(splits, starts=starts, n_grid=0)
    t_batch = time.perf_counter() - t0
    old_rows = []
    if a.compare_lanes:  # the same fit as one vmapped loop (the earlier way), first call
        t0 = time.perf_counter()
        res_old = fit_splits(splits, starts=starts, n_grid=0, lanes=False)
        t_batch_old = time.perf_counter() - t0
        print(
            f"\n{a.n} races without lanes (one vmapped loop), first call {t_batch_old:6.2f} s; "
            f"max |Δθ| against lanes {np.max(np.abs(res_old.theta - res.theta)):.1e}"
        )
        old_rows.append(
            row(
                f"sprint fit, {a.n} races, first call, without lanes",
                "synthetic races",
                a.n,
                t_batch_old,
                unit="call",
                note="fit_splits(lanes=False): the earlier one vmapped loop",
            )
        )
    rel = np.abs(res.values / np.exp(truth) - 1.0)
    z = np.abs(res.theta - truth) / np.sqrt(np.diagonal(res.cov_log, axis1=1, axis2=2))
    print(f"\n{a.n} synthetic races (10 splits, rounded to 0.01 s), one vmapped call, {a.starts} starts each:")
    print(
        f"  first call (compile + run) {t_batch_first:6.2f} s, run {t_batch:6.2f} s "
        f"({t_batch / a.n * 1e3:.2f} ms per race); converged {res.converged.mean() * 100:.1f} %"
    )
    print(f"  LM iterations: median {np.median(res.steps):.0f}, max {res.steps.max()}")
    print(
        f"  split-time RMSE: median {np.median(res.rmse):.4f} s, max {res.rmse.max():.4f} s "
        f"(rounding alone: {sprint.SIGMA_ROUND:.4f} s)"
    )
    print("  recovery |fitted/true − 1|      median    95th pct    max     within 2 Laplace std")
    for j, n in enumerate(FREE):
        print(
            f"    {n:8s}                     {np.median(rel[:, j]) * 100:6.2f} %  {np.percentile(rel[:, j], 95) * 100:6.2f} %"
            f"  {rel[:, j].max() * 100:6.2f} %   {np.mean(z[:, j] < 2) * 100:5.1f} %"
        )

    # --- Tibshirani: vmapped jaxbio vs scipy least_squares, same races
    t0 = time.perf_counter()
    tib = fit_baseline("tibshirani", splits)
    t_tib_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    tib = fit_baseline("tibshirani", splits)
    t_tib = time.perf_counter() - t0
    m = a.n if a.scipy_races is None else min(a.n, a.scipy_races)
    t0 = time.perf_counter()
    rmse_scipy = scipy_tibshirani(rt[:m], times[:m])
    t_scipy = time.perf_counter() - t0
    print("\nTibshirani (1997) on the same races:")
    print(
        f"  jaxbio vmapped LM, {a.n} races: first call {t_tib_first:6.2f} s, run {t_tib:6.3f} s; "
        f"converged {tib.converged.mean() * 100:.1f} %"
    )
    print(
        f"  scipy least_squares (trf, brentq inversion), {m} races one by one: {t_scipy:6.2f} s "
        f"({t_scipy / m * 1e3:.1f} ms per race)"
    )
    print(f"  RMSE agreement jaxbio − scipy: max |Δ| {np.max(np.abs(tib.rmse[:m] - rmse_scipy)):.1e} s")
    print(
        f"  sprinter vs Tibshirani RMSE on these races: median {np.median(res.rmse):.4f} vs {np.median(tib.rmse):.4f} s"
    )
    peer = "scipy least_squares, Tibshirani, one race at a time"
    print(f"\n{a.n} races cold (first call: compile + run): {t_batch_first:6.2f} s  (target for 1,000: < 60 s)")

    # --- what `jaxbio sprint` runs: the per-race model choice (base fit, candidates, escalation)
    from jaxbio.sprint.data import Race
    from jaxbio.sprint.selection import fit_selected

    races = [
        Race(f"synthetic{i}", D10, times[i], float(rt[i]), float(wind[i]), {}, "synthetic", np.arange(len(D10)))
        for i in range(a.n)
    ]
    t0 = time.perf_counter()
    sel = fit_selected(races, baselines=[fit_baseline(k, splits).rmse for k in ("fhk", "tibshirani")])
    t_sel = time.perf_counter() - t0
    freed = sum(bool(s["freed"]) for s in sel.selection)
    beats = sum(s["beats_baselines"] is not False for s in sel.selection)
    print(
        f"{a.n} races with the per-race model choice (fit_selected, as jaxbio sprint; baselines included), "
        f"first call: {t_sel:6.2f} s; freed something in {freed}, at or below both baselines in {beats}"
    )
    if a.compare_lanes:  # the earlier way: each fit one vmapped while loop over races × starts
        t0 = time.perf_counter()
        old = fit_selected(races, baselines=[fit_baseline(k, splits).rmse for k in ("fhk", "tibshirani")], lanes=False)
        t_old = time.perf_counter() - t0
        same = all(s["freed"] == o["freed"] for s, o in zip(sel.selection, old.selection))
        d = np.nanmax(np.abs(sel.theta - old.theta))
        print(
            f"  the same without lanes (one vmapped loop per call), first call: {t_old:6.2f} s "
            f"({t_old / t_sel:.1f}× the lanes'); same choice in every race: {same}, max |Δθ| {d:.1e}"
        )
        old_rows.append(
            row(
                f"sprint fit with model choice, {a.n} races, first call, without lanes",
                "synthetic races",
                a.n,
                t_old,
                unit="call",
                note="fit_selected(lanes=False): the earlier one vmapped loop",
            )
        )
    finish(
        {
            "machine": machine(),
            "rows": rows
            + [
                row(
                    f"sprint fit, {a.n} races, first call (compile + run)",
                    "synthetic races",
                    a.n,
                    t_batch_first,
                    unit="call",
                    note="target for 1,000 races < 60 s",
                ),
                row(
                    f"sprint fit with model choice, {a.n} races, first call",
                    "synthetic races",
                    a.n,
                    t_sel,
                    unit="call",
                    note="fit_selected with both baselines, as jaxbio sprint; target for 1,000 races < 60 s",
                ),
                *old_rows,
                row("sprint fit, 4 starts", "bolt_2009", 1, t_run, unit="race", compile_s=t_first - t_run),
                row(
                    f"sprint fit, {a.starts} start(s)",
                    "synthetic races",
                    a.n,
                    t_batch / a.n,
                    unit="race",
                    compile_s=t_batch_first - t_batch,
                    peer=peer,
                    peer_seconds=t_scipy / m,
                ),
                row(
                    "Tibshirani fit (vmapped LM)",
                    "synthetic races",
                    a.n,
                    t_tib / a.n,
                    unit="race",
                    compile_s=t_tib_first - t_tib,
                    peer=peer,
                    peer_seconds=t_scipy / m,
                ),
            ],
        },
        a.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
