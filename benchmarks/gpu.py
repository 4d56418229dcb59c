"""The benchmark table on a GPU, with MuJoCo MJX as the peer, in one run.

    python benchmarks/gpu.py                    # inverse dynamics at 10⁶ states, 10⁵ trajectories
    python benchmarks/gpu.py --quick            # 10⁴ states, 10³ trajectories (a CPU can run it)
    python benchmarks/gpu.py --json out.json

Needs ``mujoco`` and ``mujoco-mjx`` besides the test extras (no Pinocchio: MJX is the peer here).

1. **Inverse dynamics**, for arm7, the whole body (free pelvis, ball joints) and the whole body as
   28 hinges: jaxbio's ``jit(vmap(jb.inverse_dynamics))`` against MJX's ``jit(vmap(mjx.inverse))``
   on the same model (`jb.io.to_mjcf`) and the same states (`jb.io.to_mujoco_state`), in float32
   with full-precision matrix products (``jax.default_matmul_precision("highest")``: no TF32), in
   float32 at JAX's default precision (TF32 on NVIDIA GPUs) and in float64: ns per state, compile
   time, MJX / jaxbio. Errors against jaxbio's float64 on the float32-rounded inputs:
   ``max ‖Δτ‖ / max(‖τ‖, 1)`` over the first 10⁴ states, for both; in the float64 row, MJX
   against jaxbio (the same model: round-off only).
2. **Simulation**: the double pendulum of Watanabe & Duarte, 20 s, rtol = atol = 1e-8, float64 —
   ``jit(vmap(jb.simulate))`` of the segment-tree `HamiltonianSystem` and the closed form
   ``dp.simulate_batch`` at ``--sim-batch`` trajectories, against scipy's ``solve_ivp(DOP853)``
   loop on this machine's CPU (per trajectory, same run; `hamiltonian.py`'s rows), with the max
   energy error over the batch; then arm7 and the whole body at ``--model-batch`` trajectories
   against ``solve_ivp`` on the per-state jitted field, run on the CPU.

Every row goes into the common table (``out["rows"]``, `_machine.row`); the machine line names the
GPU. Without a GPU it runs on the CPU (say ``--quick``), which is how it is tested.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)  # the float64 rows and references; float32 is explicit

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import jaxbio as jb  # noqa: E402
import hamiltonian as ham  # noqa: E402  (benchmarks/hamiltonian.py: the simulation rows)
from _inverse import batched_inverse_dynamics, compile_times, load, random_states  # noqa: E402
from _machine import best_time, finish, machine, row  # noqa: E402

MODELS = ("arm7", "wholebody", "wholebody_hinges")
ERROR_STATES = 10_000
PRECISIONS = {
    "float32, full-precision matmuls": (jnp.float32, "highest"),
    "float32, default matmul precision": (jnp.float32, None),
    "float64": (jnp.float64, None),
}


def device_name() -> str:
    d = jax.devices()[0]
    return f"{d.platform}: {getattr(d, 'device_kind', d)} ×{len(jax.devices())}"


def cast(x, dtype):
    """Every floating leaf of ``x`` as ``dtype`` (MJX's model and data, jaxbio's tree)."""

    def one(v):
        if isinstance(v, (jax.Array, np.ndarray)) and jnp.issubdtype(v.dtype, jnp.floating):
            return jnp.asarray(v, dtype)
        return v

    return jax.tree_util.tree_map(one, x)


def mjx_inverse(tree):
    """``jit(vmap(...))`` of MJX's inverse dynamics of `to_mjcf(tree)` over ``(qpos, qvel, qacc)``,
    and a function that casts MJX's model to a dtype."""
    import mujoco
    from mujoco import mjx

    model = mjx.put_model(mujoco.MjModel.from_xml_string(jb.io.to_mjcf(tree)))
    data = mjx.make_data(model)

    def make(dtype):
        m, d = cast(model, dtype), cast(data, dtype)
        return jax.jit(
            jax.vmap(lambda qpos, qvel, qacc: mjx.inverse(m, d.replace(qpos=qpos, qvel=qvel, qacc=qacc)).qfrc_inverse)
        )

    return make


def timed(fn, *args):
    """Trace, compile and steady-state seconds per call of a fresh ``jit`` function, and its output."""
    trace_s, compile_s = compile_times(fn, *args)
    out = jax.block_until_ready(fn(*args))
    return trace_s, compile_s, best_time(lambda: jax.block_until_ready(fn(*args))), out


def rel_error(tau, ref):
    m = ref.shape[0]
    tau = np.asarray(tau[:m], np.float64)
    return float(np.max(np.linalg.norm(tau - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1.0)))


def inverse_dynamics_rows(name: str, batch: int) -> tuple[list[dict], dict]:
    tree64 = load(name)
    states64 = random_states(tree64, batch, seed=3)
    # float32 rows: the float32-rounded states; their reference is jaxbio's float64 on the same
    # rounded numbers, so that only the arithmetic differs
    states32 = tuple(np.asarray(x, np.float32).astype(np.float64) for x in states64)
    mj_state = jax.jit(jax.vmap(lambda q, v, a: jb.io.to_mujoco_state(tree64, q, v, a)))
    from_mj = jax.jit(jax.vmap(lambda q, f: jb.io.from_mujoco_force(tree64, q, f)))
    m = min(ERROR_STATES, batch)
    refs = {
        dt: np.asarray(batched_inverse_dynamics()(tree64, *(jnp.asarray(x[:m]) for x in states)))
        for dt, states in ((jnp.float32, states32), (jnp.float64, states64))
    }
    mjx_make = mjx_inverse(tree64)
    rows, out = [], {"model": name, "nq": tree64.nq, "nv": tree64.nv, "batch": batch, "runs": []}
    for label, (dtype, precision) in PRECISIONS.items():
        states, ref = (states32 if dtype == jnp.float32 else states64), refs[dtype]
        args = [jax.device_put(jnp.asarray(x, dtype)) for x in states]
        mj_args = [jnp.asarray(x, dtype) for x in mj_state(*(jnp.asarray(x) for x in states))]
        with jax.default_matmul_precision(precision):
            t_jb = timed(batched_inverse_dynamics(), tree64.astype(dtype), *args)
            t_mj = timed(mjx_make(dtype), *mj_args)
        tau_mj = np.asarray(from_mj(jnp.asarray(states[0][:m]), jnp.asarray(t_mj[3][:m], jnp.float64)))
        run = {
            "precision": label,
            "jaxbio_ns_per_state": 1e9 * t_jb[2] / batch,
            "jaxbio_trace_s": t_jb[0],
            "jaxbio_compile_s": t_jb[1],
            "mjx_ns_per_state": 1e9 * t_mj[2] / batch,
            "mjx_trace_s": t_mj[0],
            "mjx_compile_s": t_mj[1],
            "jaxbio_rel_error": rel_error(np.asarray(t_jb[3]), ref),
            "mjx_rel_error": rel_error(tau_mj, ref),
        }
        out["runs"].append(run)
        what = "MJX against jaxbio" if dtype == jnp.float64 else "error"
        print(
            f"  {name:17s} {label:34s} jaxbio {run['jaxbio_ns_per_state']:9.3g} ns/state (compile "
            f"{t_jb[1]:5.2f} s, error {run['jaxbio_rel_error']:.1e}) | MJX {run['mjx_ns_per_state']:9.3g} "
            f"ns/state (compile {t_mj[1]:5.2f} s, {what} {run['mjx_rel_error']:.1e}) | MJX / jaxbio "
            f"{run['mjx_ns_per_state'] / run['jaxbio_ns_per_state']:6.2f}",
            flush=True,
        )
        note = (
            f"MJX against jaxbio {run['mjx_rel_error']:.1e}"
            if dtype == jnp.float64
            else f"error vs float64 {run['jaxbio_rel_error']:.1e} (MJX {run['mjx_rel_error']:.1e})"
        )
        rows.append(
            row(
                f"inverse dynamics, jit(vmap), {label}",
                name,
                batch,
                t_jb[2] / batch,
                compile_s=t_jb[1],
                peer=f"mjx.inverse, jit(vmap), {label}",
                peer_seconds=t_mj[2] / batch,
                note=note,
            )
        )
    return rows, out


def simulation_rows(batch: int, scipy_trajectories: int) -> tuple[list[dict], dict]:
    th, om = ham.initial_states(batch)
    t_sp, ref, sp_steps = ham.time_scipy(th, om, scipy_trajectories)
    print(
        f"  scipy solve_ivp DOP853 loop (NumPy closed form, CPU), {scipy_trajectories} trajectories: "
        f"{1e3 * t_sp:.1f} ms / trajectory, {sp_steps:.0f} steps",
        flush=True,
    )
    rows, out = [], {"batch": batch, "scipy_ms": 1e3 * t_sp, "runs": []}
    for label, fn in (
        ("segment tree, jit(vmap(simulate))", ham.tree_solver()),
        ("closed form dp.simulate_batch", ham.fast_solver()),
    ):
        compile_s, per, (th1, om1, steps) = ham.time_jax(fn, jnp.asarray(th), jnp.asarray(om))
        de = ham.energy_error(th, om, th1, om1)
        run = {
            "path": label,
            "compile_s": compile_s,
            "ms_per_trajectory": 1e3 * per,
            "ratio": t_sp / per,
            "mean_steps": float(np.mean(steps)),
            "max_energy_error": de,
        }
        out["runs"].append(run)
        print(
            f"  double pendulum {label:36s} batch {batch}: compile {compile_s:5.1f} s, {1e3 * per:9.4f} ms / "
            f"trajectory, {t_sp / per:8.1f}× solve_ivp, {np.mean(steps):6.0f} steps, max |ΔE| {de:.1e} J",
            flush=True,
        )
        rows.append(
            row(
                f"simulate 20 s, {label}",
                "double_pendulum",
                batch,
                per,
                unit="trajectory",
                compile_s=compile_s,
                peer="solve_ivp DOP853 loop, closed form (NumPy, CPU)",
                peer_seconds=t_sp,
                note=f"max |ΔE| {de:.1e} J",
            )
        )
    return rows, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10⁴ states, 10³ and 10² trajectories")
    ap.add_argument("--batch", type=int, default=None, help="inverse-dynamics states (10⁶; quick 10⁴)")
    ap.add_argument(
        "--sim-batch", type=int, default=None, help="double-pendulum trajectories (10⁵; quick 10³; 0: none)"
    )
    ap.add_argument("--model-batch", type=int, default=None, help="arm7 / whole-body trajectories (10⁴; quick 10²)")
    ap.add_argument("--scipy-trajectories", type=int, default=5, help="solve_ivp trajectories, double pendulum")
    ap.add_argument("--scipy-model-trajectories", type=int, default=2, help="solve_ivp trajectories, other models")
    ap.add_argument("--models", default=",".join(MODELS), help="inverse-dynamics models ('' for none)")
    ap.add_argument("--sim-models", default="arm7,wholebody", help="models simulated against solve_ivp ('' for none)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    batch = args.batch or (10_000 if args.quick else 1_000_000)
    sim_batch = (1_000 if args.quick else 100_000) if args.sim_batch is None else args.sim_batch  # 0: skip
    model_batch = args.model_batch or (100 if args.quick else 10_000)

    import mujoco

    out = {"machine": machine(mujoco=mujoco.__version__), "device": device_name(), "rows": [], "failed": []}
    print(out["machine"])
    print(f"device: {out['device']}", flush=True)

    def section(key, title, fn, *a):
        print(f"\n{title}", flush=True)
        t0 = time.perf_counter()
        try:
            rows, out[key] = fn(*a)
            out["rows"] += rows
            if args.json:  # what a lent machine measured survives a later section's time-out
                Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
        except Exception:  # a failing section must not lose the others' numbers on a lent machine
            traceback.print_exc()
            out["failed"].append(title)
        finally:
            print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)

    for name in filter(None, args.models.split(",")):
        section(
            f"inverse_dynamics_{name}", f"inverse dynamics, {name}, batch {batch}", inverse_dynamics_rows, name, batch
        )
    if sim_batch > 0:
        section(
            "simulation",
            f"double pendulum, 20 s, rtol = atol = {ham.TOL}, float64, batch {sim_batch}",
            simulation_rows,
            sim_batch,
            args.scipy_trajectories,
        )

    def simulated(name):
        ((n, b, c, per, ratio),) = ham.models_vs_scipy(
            (name,), batch=model_batch, k=args.scipy_model_trajectories, peer_device=jax.devices("cpu")[0]
        )
        return (
            [
                row(
                    "simulate 20 s, jit(vmap(simulate))",
                    n,
                    b,
                    per,
                    unit="trajectory",
                    compile_s=c,
                    peer="solve_ivp DOP853 on the per-state jitted field (CPU)",
                    peer_seconds=per * ratio,
                )
            ],
            {"batch": b, "compile_s": c, "s_per_trajectory": per, "ratio": ratio},
        )

    for name in filter(None, args.sim_models.split(",")):
        section(f"simulation_{name}", f"{name}: 20 s, float64, batch {model_batch}, against solve_ivp", simulated, name)

    print(f"\n{out['machine']}\ndevice: {out['device']}\n")
    for r in out["rows"]:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3g}×"
        print(
            f"{r['operation']:62s} {r['model']:17s} {r['batch']:>8d} {r['seconds']:10.3g} s/{r['unit']:10s} "
            f"compile {r['compile_s'] or 0:6.2f} s  {ratio:>9s}  {r['note']}"
        )
    if out["failed"]:
        print(f"\nfailed sections: {out['failed']}")
    finish(out, args.json)
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
