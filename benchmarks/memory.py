"""Memory per trial of a batched simulation with gradients, and a 10³-trial gradient run for real.

    python benchmarks/memory.py                  # double pendulum and arm7, float32/64, N = 10, 100, 1000
    python benchmarks/memory.py --quick          # double pendulum, float64, N = 10, 100; real run of 100
    python benchmarks/memory.py --json out.json

The program: ``jax.jit(jax.grad(loss))`` with ``loss(q0) = Σ_trials |q(T)|² + mean_t H(t)`` over
``jax.vmap`` of `jb.simulate` from rest at ``q0`` ``(N, nq)`` (the gradient with respect to every
trial's initial configuration), ``T`` = 20 s, three ways of integrating and differentiating:

- ``adaptive``: Tsit5 with a PID controller (rtol = atol = 1e-6; final state only), the default
  adjoint `diffrax.RecursiveCheckpointAdjoint` (``checkpoints=None``: O(√max_steps) checkpoints of
  the solver state, max_steps = 100,000);
- ``steps``: ``simulate(..., stepsize_controller=jb.FixedGrid(2000))`` (fixed grid of 10 ms, every point saved), reverse mode
  through the `lax.scan` of steps: every stage's intermediates are stored;
- ``steps+checkpoint``: the same with ``checkpoint=True`` (`jax.checkpoint` of each step: the state
  per grid point is stored, the stages recomputed).

Memory is XLA's own account of the compiled program (``.lower(...).compile().memory_analysis()``:
temporaries + arguments + outputs), at a few batch sizes N, with the least-squares fit
``bytes = a + b·N`` (``b``: bytes per trial). Then the gradient of 20 s over ``--real-trials``
(default 1,000) trials runs for real in a subprocess (a fresh process, so its peak resident set
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` is its own), reporting peak RSS, run time and
whether every gradient entry is finite. The machine has 24 GB; a configuration whose predicted
bytes exceed ``--limit-gb`` (default 20) is not run for real (said so in the table).

``jax_enable_x64`` is this script's choice (the library never sets it); float32 models are built
with ``load_model(name, dtype=float32)`` and float32 states (dtype follows the inputs).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import finish, load_average, machine  # noqa: E402  (benchmarks/_machine.py)

import jaxbio as jb  # noqa: E402

DURATION = 20.0
STEPS = 2000
TOL = 1e-6
MODES = ("adaptive", "steps", "steps+checkpoint")
DTYPES = {"float32": jnp.float32, "float64": jnp.float64}


def gradient_function(model, dtype: str, mode: str, duration: float = DURATION, steps: int = STEPS):
    """``(jit(grad(loss)), nq)``: the batched gradient of the module doc for ``model`` (a shipped
    model's name, or a model dict for `jb.SegmentTree.from_dict`)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    dt = DTYPES[dtype]
    tree = jb.SegmentTree.from_dict(model, dtype=dt) if isinstance(model, dict) else jb.load_model(model, dtype=dt).tree
    system = jb.HamiltonianSystem(tree)

    def one(q):
        y0 = system.initial_state(q, jnp.zeros(tree.nv, q.dtype))
        if mode == "adaptive":
            tr = jb.simulate(system, y0, 0.0, duration, rtol=TOL, atol=TOL)
        else:
            tr = jb.simulate(
                system,
                y0,
                0.0,
                duration,
                stepsize_controller=jb.FixedGrid(steps, checkpoint=mode == "steps+checkpoint"),
            )
        return jnp.sum(tr.q[-1] ** 2) + jnp.mean(tr.energy)

    return jax.jit(jax.grad(lambda q0: jnp.sum(jax.vmap(one)(q0)))), tree.nq


def initial_configurations(n: int, nq: int, dtype: str, seed: int = 0):
    """``(n, nq)`` angles uniform in ±0.5 rad, in ``dtype``."""
    return jnp.asarray(np.random.default_rng(seed).uniform(-0.5, 0.5, (n, nq)), DTYPES[dtype])


def compiled_bytes(name, dtype: str, mode: str, n: int, **kw) -> dict:
    """XLA's memory account of the compiled gradient for ``n`` trials (bytes) and the compile time
    (``name``, ``kw``: as `gradient_function`'s)."""
    fn, nq = gradient_function(name, dtype, mode, **kw)
    t0 = time.perf_counter()
    m = fn.lower(initial_configurations(n, nq, dtype)).compile().memory_analysis()
    compile_s = time.perf_counter() - t0
    parts = {"temp": m.temp_size_in_bytes, "argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes}
    label = name if isinstance(name, str) else "model dict"
    return {
        "model": label,
        "dtype": dtype,
        "mode": mode,
        "trials": n,
        "bytes": int(sum(parts.values())),
        **{f"{k}_bytes": int(v) for k, v in parts.items()},
        "compile_s": compile_s,
    }


def fit_per_trial(trials, nbytes) -> tuple[float, float]:
    """Least-squares ``bytes = a + b·N``: ``(a, b)`` (bytes, bytes per trial)."""
    b, a = np.polyfit(np.asarray(trials, float), np.asarray(nbytes, float), 1)
    return float(a), float(b)


def run_gradient(name, dtype: str, mode: str, n: int, **kw) -> dict:
    """Run the gradient for ``n`` trials in this process: run time (compile included), peak RSS
    (bytes, ru_maxrss of this process) and whether the gradient is finite."""
    fn, nq = gradient_function(name, dtype, mode, **kw)
    q0 = initial_configurations(n, nq, dtype)
    t0 = time.perf_counter()
    compiled = fn.lower(q0).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    g = np.asarray(jax.block_until_ready(compiled(q0)))
    run_s = time.perf_counter() - t0
    return {
        "model": name if isinstance(name, str) else "model dict",
        "dtype": dtype,
        "mode": mode,
        "trials": n,
        "compile_s": compile_s,
        "run_s": run_s,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "finite": bool(np.all(np.isfinite(g))),
        "grad_norm": float(np.linalg.norm(g)),
    }


def run_in_subprocess(name: str, dtype: str, mode: str, n: int, timeout: float = 1800) -> dict:
    """`run_gradient` in a fresh Python process (its own peak RSS); a failure is reported, not raised."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run-one", name, dtype, mode, str(n)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "dtype": dtype, "mode": mode, "trials": n, "error": f"timeout after {timeout:.0f} s"}
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"model": name, "dtype": dtype, "mode": mode, "trials": n, "error": f"exit {p.returncode}: {tail[:200]}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _mb(x) -> str:
    return f"{x / 2**20:10.1f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="double pendulum, float64, N = 10, 100; real run of 100")
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--dtypes", nargs="+", default=None, choices=tuple(DTYPES))
    ap.add_argument("--modes", nargs="+", default=None, choices=MODES)
    ap.add_argument("--trials", type=int, nargs="+", default=None, help="batch sizes of the memory account")
    ap.add_argument("--real-trials", type=int, default=None, help="trials of the real run (default 1000, quick 100)")
    ap.add_argument("--limit-gb", type=float, default=20.0, help="skip real runs predicted above this (GiB)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--run-one", nargs=4, metavar=("MODEL", "DTYPE", "MODE", "N"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.run_one:
        name, dtype, mode, n = a.run_one
        print(json.dumps(run_gradient(name, dtype, mode, int(n))))
        return
    models = a.models or (["double_pendulum"] if a.quick else ["double_pendulum", "arm7"])
    dtypes = a.dtypes or (["float64"] if a.quick else ["float64", "float32"])
    modes = a.modes or list(MODES)
    trials = a.trials or ([10, 100] if a.quick else [10, 100, 1000])
    real = a.real_trials or (100 if a.quick else 1000)
    out = {
        "machine": machine(),
        "load_start": load_average(),
        "duration_s": DURATION,
        "steps": STEPS,
        "rtol": TOL,
        "compiled": [],
        "fits": [],
        "real": [],
    }
    print(out["machine"])
    print(f"load at start: {out['load_start']['uptime']}")
    print(
        f"\njit(grad(Σ loss over vmap(simulate))), {DURATION:.0f} s; XLA memory_analysis (temp + argument + output), MiB"
    )
    print(
        f"{'model':16s} {'dtype':8s} {'mode':17s} "
        + " ".join(f"{'N=' + str(n):>10s}" for n in trials)
        + f" {'MiB/trial':>10s} {'fixed MiB':>10s} {'at 10³ GiB':>10s} {'compile s':>10s}"
    )
    for name in models:
        for dtype in dtypes:
            for mode in modes:
                rows = [compiled_bytes(name, dtype, mode, n) for n in trials]
                out["compiled"] += rows
                a0, b = fit_per_trial(trials, [r["bytes"] for r in rows])
                fit = {
                    "model": name,
                    "dtype": dtype,
                    "mode": mode,
                    "fixed_bytes": a0,
                    "bytes_per_trial": b,
                    "predicted_bytes_1000": a0 + 1000 * b,
                }
                out["fits"].append(fit)
                print(
                    f"{name:16s} {dtype:8s} {mode:17s} "
                    + " ".join(_mb(r["bytes"]) for r in rows)
                    + f" {b / 2**20:10.3f} {_mb(a0)} {fit['predicted_bytes_1000'] / 2**30:10.2f} "
                    f"{max(r['compile_s'] for r in rows):10.1f}",
                    flush=True,
                )
    print(f"\nreal runs, {real} trials, one fresh process each (peak RSS of that process):")
    for fit in out["fits"]:
        predicted = fit["fixed_bytes"] + real * fit["bytes_per_trial"]
        key = (fit["model"], fit["dtype"], fit["mode"])
        if predicted > a.limit_gb * 2**30:
            row = {
                "model": key[0],
                "dtype": key[1],
                "mode": key[2],
                "trials": real,
                "skipped": f"predicted {predicted / 2**30:.1f} GiB > {a.limit_gb:g} GiB",
            }
            print(f"  {' '.join(key):45s} skipped: {row['skipped']}", flush=True)
        else:
            row = run_in_subprocess(*key, real)
            row["predicted_bytes"] = predicted
            if "error" in row:
                print(f"  {' '.join(key):45s} failed: {row['error']}", flush=True)
            else:
                print(
                    f"  {' '.join(key):45s} peak RSS {row['peak_rss_bytes'] / 2**30:6.2f} GiB (XLA predicted "
                    f"{predicted / 2**30:6.2f} GiB), compile {row['compile_s']:6.1f} s, run {row['run_s']:7.1f} s, "
                    f"gradient finite: {row['finite']}",
                    flush=True,
                )
        out["real"].append(row)
    finish(out, a.json)


if __name__ == "__main__":
    main()
