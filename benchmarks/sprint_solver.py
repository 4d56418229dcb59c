"""The sprint fit's Levenberg–Marquardt (``jaxbio.sprint._solve.least_squares``) against
``optimistix.least_squares(..., optimistix.LevenbergMarquardt(...))`` on the same problem, timed in
the same run.

    python benchmarks/sprint_solver.py              # embedded races + 1,000 synthetic races
    python benchmarks/sprint_solver.py --n 200      # smaller synthetic batch
    python benchmarks/sprint_solver.py --skip-batch # only the CLI's case

Both solvers run inside the same jitted core: ``B`` races × ``S`` starts as one flat ``vmap``,
residuals ``jaxbio.sprint.fitting._residuals`` (split-time errors / rounding noise, 80 Tsit5 steps),
the lowest-cost start kept per race. Rows:

(a) the CLI's case: the embedded races padded to a batch of 8 (as ``splits_from_races`` pads
    them), 4 default starts each, compiled with ``fit.QUICK_COMPILE`` (the options ``fit_splits``
    uses for batches of ≤ ``QUICK_COMPILE_MAX_BATCH`` races);
(b) ``--n`` synthetic races (as ``benchmarks/sprint.py`` builds them), 1 start each, XLA defaults.

``compile`` is lowering + XLA compilation of the jitted core (``jit(...).lower(...).compile()``);
``run`` the median of ``--repeats`` calls of the compiled core. ``cost`` columns: ½χ² of the best
start per race; ``max |Δcost|`` compares the two solvers race by race. CPU, float64.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optimistix as optx  # noqa: E402

import _machine  # noqa: E402  (benchmarks/_machine.py)

import jaxbio.sprint as sprint  # noqa: E402
from jaxbio.sprint._solve import batched_best_of_starts  # noqa: E402
from jaxbio.sprint.model import FREE  # noqa: E402

from jaxbio.sprint import fitting as sfit  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sprint as sprint_benchmark  # noqa: E402  (benchmarks/sprint.py: the synthetic races)

D10 = sprint_benchmark.D10


def synthetic(n, seed=0):
    """``n`` races simulated by the sprinter (``benchmarks/sprint.py``'s), as one ``Splits`` batch."""
    _, rt, wind, times = sprint_benchmark.synthetic(n, seed)
    return sprint.Splits.from_arrays([D10] * n, list(times), rt, wind)


def _residual_fn(splits, names):
    L, k = splits.distances.shape[-1], len(names)
    res = functools.partial(sfit._residuals, names=names, n_steps=sfit.N_STEPS)
    template = sfit.residual_template(L, k, sfit.N_STEPS, jnp.zeros(()).dtype)
    return res, template


def core_jaxbio(model, splits, starts, mu, sqrt_prec, *, names, max_steps):
    """The fit's own solver: ``batched_best_of_starts`` (hand-written LM), as ``fit._fit_core_impl``."""
    res, template = _residual_fn(splits, names)
    theta, r, J, aux, ok, steps = batched_best_of_starts(
        lambda th, a: res(th, (model,) + a), starts, (splits, mu, sqrt_prec), max_steps=max_steps, template=template
    )
    return theta, 0.5 * jnp.sum(r * r, axis=-1), ok, steps


def core_optimistix(model, splits, starts, mu, sqrt_prec, *, names, max_steps):
    """The same B·S solves as one flat vmap of ``optimistix.least_squares`` with
    ``LevenbergMarquardt(rtol=1e-8, atol=1e-10)`` (the hand-written loop's tolerances)."""
    res, _ = _residual_fn(splits, names)
    B, S = starts.shape[:2]
    solver = optx.LevenbergMarquardt(rtol=1e-8, atol=1e-10)

    def one(theta0, a):
        sol = optx.least_squares(
            lambda th, a: res(th, (model,) + a), solver, theta0, a, has_aux=True, max_steps=max_steps, throw=False
        )
        r, _ = res(sol.value, (model,) + a)
        cost = 0.5 * jnp.sum(r * r)
        return (
            sol.value,
            jnp.where(jnp.isfinite(cost), cost, jnp.inf),
            sol.result == optx.RESULTS.successful,
            sol.stats["num_steps"],
        )

    flat_args = jax.tree_util.tree_map(lambda a: jnp.repeat(a, S, axis=0), (splits, mu, sqrt_prec))
    theta, cost, ok, steps = jax.vmap(one)(starts.reshape((B * S,) + starts.shape[2:]), flat_args)
    theta, cost, ok, steps = (a.reshape((B, S) + a.shape[1:]) for a in (theta, cost, ok, steps))
    i = jnp.argmin(cost, axis=1)
    take = lambda a: jnp.take_along_axis(a, i.reshape((B,) + (1,) * (a.ndim - 1)), axis=1)[:, 0]  # noqa: E731
    return take(theta), take(cost), take(ok), take(steps)


def measure(core, quick, args, *, names, max_steps, repeats):
    opts = sfit.QUICK_COMPILE if quick else None
    fn = jax.jit(functools.partial(core, names=names, max_steps=max_steps), compiler_options=opts)
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    t_compile = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(*args))
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        runs.append(time.perf_counter() - t0)
    return t_compile, float(np.median(runs)), [np.asarray(a) for a in out]


def row(label, splits, starts, quick, *, max_steps, repeats, n_real=None):
    model = sprint.Sprinter()
    B, k = splits.distances.shape[0], len(FREE)
    args = (model, splits, jnp.asarray(starts), jnp.zeros((B, k)), jnp.zeros((B, k, k)))
    kw = dict(names=FREE, max_steps=max_steps, repeats=repeats)
    c1, r1, (th1, cost1, ok1, st1) = measure(core_jaxbio, quick, args, **kw)
    c2, r2, (th2, cost2, ok2, st2) = measure(core_optimistix, quick, args, **kw)
    n = B if n_real is None else n_real
    cost1, cost2, th1, th2 = cost1[:n], cost2[:n], th1[:n], th2[:n]
    print(
        f"\n{label}: {n} races × {starts.shape[1]} starts (batch {B}), "
        f"{'QUICK_COMPILE' if quick else 'XLA defaults'}, max_steps {max_steps}"
    )
    print(
        f"  {'solver':34s} {'compile s':>10s} {'run s':>9s} {'converged':>10s} {'steps median':>13s} "
        f"{'cost median':>12s}"
    )
    for name, c, r, ok, st, cost in (
        ("jaxbio _solve.least_squares", c1, r1, ok1, st1, cost1),
        ("optimistix LevenbergMarquardt", c2, r2, ok2, st2, cost2),
    ):
        print(
            f"  {name:34s} {c:10.2f} {r:9.3f} {ok[:n].mean() * 100:9.1f}% {np.median(st[:n]):13.0f} "
            f"{np.median(cost):12.4f}"
        )
    print(f"  ratio optimistix / jaxbio: compile {c2 / c1:.2f}×, run {r2 / r1:.2f}×")
    ROWS.append(
        _machine.row(
            f"sprint LM solver, {starts.shape[1]} start(s)",
            label.split(" ", 1)[1],
            n,
            r1 / n,
            unit="race",
            compile_s=c1,
            peer="optimistix LevenbergMarquardt, same batch",
            peer_seconds=r2 / n,
        )
    )
    d = np.abs(cost1 - cost2)
    rel = d / np.maximum(1.0, np.abs(cost1))
    print(
        f"  cost agreement: max |Δcost| {d.max():.2e} (max relative {rel.max():.2e}); "
        f"optimistix lower on {np.sum(cost2 < cost1 - 1e-9)}, jaxbio lower on {np.sum(cost1 < cost2 - 1e-9)}; "
        f"max |Δθ| {np.abs(th1 - th2).max():.2e}"
    )


ROWS: list[dict] = []  # the common table's rows (`_machine.row`), one per batch


def machine():
    return _machine.machine(optimistix=getattr(optx, "__version__", "?")) + ", float64"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="synthetic races in batch (b) (default 1000)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each compiled core (median)")
    ap.add_argument("--max-steps", type=int, default=60, help="solver steps per start (fit_splits' default 60)")
    ap.add_argument("--skip-batch", action="store_true", help="only row (a)")
    ap.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    a = ap.parse_args(argv)
    print("jaxbio sprint solver benchmark —", machine())
    print("command: python benchmarks/sprint_solver.py " + " ".join(sys.argv[1:] if argv is None else argv))

    races = sprint.embedded_races()
    splits = sfit.splits_from_races(races)
    starts = np.broadcast_to(sfit.default_starts(sprint.Sprinter()), (splits.distances.shape[0], 4, len(FREE)))
    row(
        "(a) embedded races (the CLI's case)",
        splits,
        starts,
        True,
        max_steps=a.max_steps,
        repeats=a.repeats,
        n_real=len(races),
    )
    if not a.skip_batch:
        splits = synthetic(a.n)
        starts = np.broadcast_to(sfit.default_starts(sprint.Sprinter())[:1], (a.n, 1, len(FREE)))
        row(f"(b) {a.n} synthetic races", splits, starts, False, max_steps=a.max_steps, repeats=a.repeats)
    _machine.finish({"machine": machine(), "rows": ROWS}, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
