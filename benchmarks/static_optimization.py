"""Speed of jaxbio's static optimisation against scipy's SLSQP, frame by frame, on the same problems.

    python benchmarks/static_optimization.py            # gait10dof18musc, 10⁴ frames, scipy on 200
    python benchmarks/static_optimization.py --quick    # 10³ frames, scipy on 50
    python benchmarks/static_optimization.py --set arm26 --p 3

The problem: a swing-like motion of the planar ``gait10dof18musc`` model (18 muscles, 10 DOF,
reserve actuators of 1000 N·m on ``pelvis_tx``, ``pelvis_ty``, ``pelvis`` and ``torso``, whose
coordinates no muscle crosses), ``objective="activation"`` (rigid-tendon Hill force–length–velocity),
``p = 2`` by default. The per-frame data (τ by inverse dynamics, moment arms, ``F̂``, ``P``) are
computed once by jaxbio and shared; only the optimisation is timed.

- jaxbio: the compiled ``jit(vmap)`` batch that `static_optimization_motion` uses, over all frames,
  with ``solver="interior_point"``, ``solver="active_set"`` (the primal–dual active-set method with
  the interior point as fallback for the frames it does not verify; the default for p = 2) and
  (for p = 2, if installed) ``solver="qpax"``; float64 on the
  default backend; compile time reported separately, steady state best of 3.
- scipy: ``scipy.optimize.minimize(method="SLSQP")`` with analytic gradients and constraint Jacobian
  (rows scaled like jaxbio's), ``ftol=1e-12``, OpenBLAS on one thread (``OPENBLAS_NUM_THREADS=1``
  unless set), one call per frame in a Python loop, **timed on a
  subset of frames (``--scipy-frames``, default 200) and extrapolated per frame**: the table reports
  µs per frame for both, and the ratio scipy / jaxbio (above 1: jaxbio faster).

It also reports the largest force disagreement (N) between jaxbio and SLSQP on that subset, and the
largest moment residual of jaxbio over all frames. Absolute times on a shared machine mean little.
"""

from __future__ import annotations

import argparse
import os
import time

# SLSQP on one thread (the script's choice): its small dense algebra goes through OpenBLAS, whose
# worker threads, on a shared 2-core machine under load, gave the same 200 frames a median of
# 0.9 ms per frame in one run and 68-72 ms in the next two; on one thread, 0.67-0.79 ms
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize  # noqa: E402

from jaxbio.estimation import _static_optimization as so  # noqa: E402  (private helpers shared with the tests)
from jaxbio.muscles import sets  # noqa: E402
from _machine import finish, machine, row  # noqa: E402  (benchmarks/_machine.py)

RESERVES = {
    "gait10dof18musc": {"pelvis_tx": 1000.0, "pelvis_ty": 1000.0, "pelvis": 1000.0, "torso": 1000.0},
    "arm26": {"r_humerus": 10.0},
}


def motion(name: str, T: int):
    """``(q, qd, qdd)`` ``(T, n)``: one cycle of a smooth swing-like motion, sampled at ``T`` frames."""
    if name == "arm26":
        w, amp, off, phase = 2 * np.pi * 0.5, np.array([0.4, 0.6]), np.array([0.4, 1.2]), np.array([0.0, 0.5])
    else:
        w = 2 * np.pi * 0.8
        amp = np.array([0.0, 0.0, 0.03, 0.24, 0.3, 0.09, 0.24, 0.3, 0.09, 0.03])
        off = np.array([0.0, 0.9, 0.0, 0.1, -0.6, 0.0, 0.1, -0.6, 0.0, 0.0])
        phase = np.array([0, 0, 0, 0, -0.5 * np.pi, 0.3, np.pi, 0.5 * np.pi, np.pi + 0.3, 0])
    t = np.linspace(0.0, 2 * np.pi / w, T)[:, None]
    arg = w * t + phase
    return (
        jnp.asarray(off + amp * np.sin(arg)),
        jnp.asarray(amp * w * np.cos(arg)),
        jnp.asarray(-amp * w**2 * np.sin(arg)),
    )


def slsqp(R, tau, fhat, passive, strength, p):
    """One frame by SLSQP: ``min Σ xᵖ + Σ y²`` s.t. ``rᵀ(x F̂ + P) + S y = τ``, ``0 ≤ x ≤ 1``."""
    m, n = R.shape
    A = np.hstack([R.T * fhat, np.diag(strength)])
    b = tau - R.T @ passive
    scale = np.maximum(np.abs(A).max(axis=1), 1e-300)
    A, b = A / scale[:, None], b / scale

    def f(v):
        return np.sum(np.abs(v[:m]) ** p) + np.sum(v[m:] ** 2)

    def g(v):
        return np.concatenate([p * np.sign(v[:m]) * np.abs(v[:m]) ** (p - 1), 2 * v[m:]])

    x0 = np.r_[np.full(m, 0.1), np.zeros(n)]
    res = scipy.optimize.minimize(
        f,
        x0,
        jac=g,
        method="SLSQP",
        bounds=[(0, 1)] * m + [(None, None)] * n,
        constraints=[{"type": "eq", "fun": lambda v: A @ v - b, "jac": lambda v: A}],
        options={"ftol": 1e-12, "maxiter": 500},
    )
    return res.x[:m] * fhat + passive, res.success


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10³ frames, scipy on 50")
    ap.add_argument("--set", default="gait10dof18musc", choices=sets.muscle_sets())
    ap.add_argument("--frames", type=int, default=None, help="frames for jaxbio (default 10⁴, quick 10³)")
    ap.add_argument("--scipy-frames", type=int, default=None, help="frames timed with scipy (default 200, quick 50)")
    ap.add_argument("--p", type=float, default=2.0)
    ap.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = ap.parse_args()
    T = args.frames or (1000 if args.quick else 10_000)
    S = args.scipy_frames or (50 if args.quick else 200)

    print(
        f"# static optimisation, {args.set}, p = {args.p:g}, {T} frames; backend {jax.default_backend()}, "
        f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}"
    )
    tree, paths, params = sets.load_muscle_set(args.set, dtype=jnp.float64)
    q, qd, qdd = motion(args.set, T)
    muscle = so._as_hill(params)
    strength = np.zeros(tree.nq)
    for k, v in RESERVES[args.set].items():
        strength[tree.names.index(k)] = v
    t0 = time.perf_counter()
    R, tau, fhat, passive = jax.block_until_ready(
        so._motion_problem(tree, paths, muscle, q, qd, qdd, None, None, "activation")
    )
    print(
        f"per-frame data (inverse dynamics, moment arms, F̂, P), first call incl. compile: "
        f"{time.perf_counter() - t0:.2f} s"
    )
    reserve = jnp.broadcast_to(jnp.asarray(strength), (T, tree.nq))
    p = jnp.asarray(args.p)

    solvers = ["interior_point", "active_set"]
    if args.p == 2:
        try:
            import qpax  # noqa: F401

            solvers.append("qpax")
        except ImportError:
            print("(qpax not installed: skipped)")
    results = {}
    rows = []
    for solver in solvers:
        solve = so._frames_solver(solver, 1e5, 1e-9, 60, 1e-6)
        t0 = time.perf_counter()
        compiled = jax.jit(solve).lower(R, tau, fhat, passive, reserve, p, None).compile()
        compile_s = time.perf_counter() - t0
        out = compiled(R, tau, fhat, passive, reserve, p, None)
        run = best_of(lambda: compiled(R, tau, fhat, passive, reserve, p, None).forces)
        results[solver] = out
        rows.append((f"jaxbio {solver}", run / T * 1e6, compile_s, out))

    # scipy on a subset, spread over the motion
    idx = np.linspace(0, T - 1, S).astype(int)
    Rn, tn, fn, pn = (np.asarray(a)[idx] for a in (R, tau, fhat, passive))
    ref, per_frame = [], []
    for k in range(S):
        t0 = time.perf_counter()
        ref.append(slsqp(Rn[k], tn[k], fn[k], pn[k], strength, args.p))
        per_frame.append(time.perf_counter() - t0)
    scipy_us = float(np.mean(per_frame)) * 1e6
    f_ref = np.array([r[0] for r in ref])
    ok = np.array([r[1] for r in ref])

    print(
        f"\n{'method':28s} {'µs/frame':>12s} {'scipy/jaxbio':>13s} {'compile s':>10s} "
        f"{'max |ΔF| N':>11s} {'max resid N·m':>14s} {'feasible':>9s} {'iters':>9s}"
    )
    print(
        f"{'scipy SLSQP (' + str(S) + ' frames)':28s} {scipy_us:12.1f} {1.0:13.2f} {'-':>10s} {'-':>11s} "
        f"{'-':>14s} {'-':>9s} {'-':>9s}"
    )
    for name, us, compile_s, out in rows:
        dF = np.abs(np.asarray(out.forces)[idx][ok] - f_ref[ok]).max()
        resid = np.abs(np.asarray(out.residual)).max()
        print(
            f"{name:28s} {us:12.2f} {scipy_us / us:13.1f} {compile_s:10.2f} {dF:11.2e} {resid:14.2e} "
            f"{float(np.mean(np.asarray(out.feasible))):9.1%} {float(np.mean(np.asarray(out.iterations))):4.1f}/{int(np.max(np.asarray(out.iterations))):<4d}"
        )
    ip = results["interior_point"]
    for name, out in results.items():
        if name != "interior_point":
            print(
                f"{name} vs interior_point, all {T} frames: max |ΔF| "
                f"{np.abs(np.asarray(out.forces) - np.asarray(ip.forces)).max():.1e} N, same feasible flags: "
                f"{bool(np.all(np.asarray(out.feasible) == np.asarray(ip.feasible)))}"
            )
    print(
        f"\nSLSQP per frame: mean {scipy_us:.0f} µs (used above), median {np.median(per_frame) * 1e6:.0f} µs, "
        f"max {np.max(per_frame) * 1e6:.0f} µs (a few slow frames dominate the mean); iters: mean/max per frame "
        f"(active_set: active-set steps, plus interior-point iterations on the frames it hands over)"
    )
    print(
        f"scipy timed on {S} of {T} frames and extrapolated per frame; SLSQP reported success on "
        f"{ok.sum()}/{S} (ΔF over those). jaxbio converged on "
        + ", ".join(f"{k}: {float(np.mean(np.asarray(v.converged))):.1%}" for k, v in results.items())
        + f" of the frames. load {os.getloadavg()[0]:.2f}"
    )
    finish(
        {
            "machine": machine(),
            "rows": [
                row(
                    f"static optimisation ({name.removeprefix('jaxbio ')}, p = {args.p:g})",
                    args.set,
                    T,
                    us * 1e-6,
                    unit="frame",
                    compile_s=compile_s,
                    peer=f"scipy SLSQP frame by frame ({S} frames, mean)",
                    peer_seconds=scipy_us * 1e-6,
                    note=f"max |ΔF| vs SLSQP {np.abs(np.asarray(out.forces)[idx][ok] - f_ref[ok]).max():.1e} N",
                )
                for name, us, compile_s, out in rows
            ],
        },
        args.json,
    )


if __name__ == "__main__":
    main()
