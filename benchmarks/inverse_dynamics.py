"""Speed of jaxbio's batched inverse dynamics against Pinocchio, in one run.

    python benchmarks/inverse_dynamics.py                 # batches 1, 1e3, 1e5 (a few minutes)
    python benchmarks/inverse_dynamics.py --quick         # batches 1, 1e3, 1e4
    python benchmarks/inverse_dynamics.py --json out.json # also dump every number

For the shipped ``arm7`` (7 DOF) and ``wholebody`` (a free pelvis and ball joints: 13 segments,
nq 34, nv 28) models, and ``wholebody_hinges`` (the same body with its ball and free joints as chains
of hinges: 28 one-DOF segments, the tree the whole body had before it had ball joints), float64 on
CPU, it times
``jax.jit(jax.vmap(jb.inverse_dynamics))`` at each batch size (trace time and lower+compile time
reported separately; steady-state time best of k after a warm-up call, with
``jax.block_until_ready``) and, over the same states, Pinocchio's

- ``pin.rnea`` called in a Python loop (one thread; timed on ``min(B, 20000)`` states, per state);
- ``pin.rneaInParallel`` on 2 threads (C++ batch; Fortran-ordered ``(nv, B)`` arrays).

It also times the same ``vmap`` split over two CPU devices with ``jb.batch`` (`jax.shard_map`, one
chunk of the batch per core; this script asks XLA for 2 host devices before importing jax, which a
library never does): the single-device figure uses about one core, like the ``pin.rnea`` loop, while
``rneaInParallel`` uses two. Its "compile" column is the first call (trace, compile and one run).

The ratios are Pinocchio time / jaxbio time per state: above 1 means jaxbio is faster. Before
timing, the script checks that jaxbio and Pinocchio give the same ``tau`` (float64) and prints the
largest difference. It also reports the trace and compile time for a random 100-segment chain.

On a GPU (``jax.default_backend() == "gpu"``) it adds float32 timing at batch 1e6, with
matrix/rotation products at full precision (``jax.default_matmul_precision("highest")``, i.e. no
TF32), in ns per state, and the error of float32 against float64 on a subset of the states.

Absolute times on a shared machine mean little; compare the ratios measured in the same run.
Pinocchio is a test dependency (``pip install pin``); this is not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jaxbio as jb  # noqa: E402
from tests import pinocchio_ref as ref  # noqa: E402
from tests.pinocchio_ref import build_pinocchio_model  # noqa: E402
from _machine import REPEATS, best_time, cpu, finish, load_average, row  # noqa: E402  (benchmarks/_machine.py)
from _inverse import (
    GPU_BATCH,
    batched_inverse_dynamics,
    compile_times,
    float32_inverse_dynamics,
    load,
    random_states,
    shipped_dict,
)

# wholebody_hinges: the shipped wholebody (free pelvis, ball joints) with its ball and free joints as
# chains of hinges and massless links (tests/_models.hinge_chains): 28 one-DOF segments, the tree of the
# whole body before it had ball joints (then with 0.1 g dummy links), for the before/after comparison
MODELS = ("arm7", "wholebody", "wholebody_hinges")
FULL_BATCHES = (1, 1_000, 100_000)
QUICK_BATCHES = (1, 1_000, 10_000)
LOOP_STATES = 20_000  # pin.rnea Python loop: timed on at most this many states
PIN_THREADS = 2
CHECK_STATES = 16  # states compared one by one with pin.rnea
CHAIN_SEGMENTS = 100
CHAIN_BATCH = 1_000


# ---------------------------------------------------------------------------------------------------
# Timing helpers
# ---------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------
# States, in jaxbio order and in Pinocchio order
# ---------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------
# jaxbio
# ---------------------------------------------------------------------------------------------------


def two_device_inverse_dynamics():
    """`jb.batch` of inverse dynamics over the first two CPU devices (batch split in halves; the
    tree broadcast), and the input sharding it splits to, or ``(None, None)`` when fewer than two
    CPU devices exist or the backend is not the CPU."""
    devices = jax.devices()
    if jax.default_backend() != "cpu" or len(devices) < 2:
        return None, None
    fn = jb.batch(jb.inverse_dynamics, in_axes=(None, 0, 0, 0), devices=devices[:2])
    mesh = jax.sharding.Mesh(np.array(devices[:2]), (jb.batching.AXIS,))
    return fn, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(jb.batching.AXIS))


def time_two_devices(tree, q, qd, qdd) -> dict | None:
    """µs per state and first-call time (trace + compile + one run) of `two_device_inverse_dynamics`
    (even batches ≥ 2), the states placed on the two devices beforehand as for the one-device row."""
    fn, sharding = two_device_inverse_dynamics()
    if fn is None or q.shape[0] < 2 or q.shape[0] % 2:
        return None
    args = [jax.device_put(jnp.asarray(x), sharding) for x in (q, qd, qdd)]
    t0 = time.perf_counter()
    tau = jax.block_until_ready(fn(tree, *args))
    compile_s = time.perf_counter() - t0
    per_call = best_time(lambda: jax.block_until_ready(fn(tree, *args)))
    return {"compile_s": compile_s, "us_per_state": 1e6 * per_call / q.shape[0], "tau": np.asarray(tau)}


def time_jax(tree, q, qd, qdd) -> dict:
    """Compile (fresh jit) and steady-state time of batched inverse dynamics on these states."""
    args = (tree, *(jax.device_put(jnp.asarray(x)) for x in (q, qd, qdd)))
    fn = batched_inverse_dynamics()
    trace_s, compile_s = compile_times(fn, *args)
    tau = jax.block_until_ready(fn(*args))  # warm-up (and the jit call path's own cache)
    per_call = best_time(lambda: jax.block_until_ready(fn(*args)))
    return {
        "trace_s": trace_s,
        "compile_s": compile_s,
        "s_per_call": per_call,
        "us_per_state": 1e6 * per_call / q.shape[0],
        "tau": np.asarray(tau),
    }


# ---------------------------------------------------------------------------------------------------
# Pinocchio
# ---------------------------------------------------------------------------------------------------


def time_pin_loop(model, qp, vp, ap) -> float:
    """µs per state of ``pin.rnea`` in a Python loop over ``min(B, LOOP_STATES)`` states."""
    data = model.createData()
    m = min(qp.shape[0], LOOP_STATES)
    rows = [(qp[i], vp[i], ap[i]) for i in range(m)]

    def loop():
        for q, v, a in rows:
            pin.rnea(model, data, q, v, a)

    loop()
    return 1e6 * best_time(loop) / m


def time_pin_parallel(model, qp, vp, ap, threads: int = PIN_THREADS) -> tuple[float, np.ndarray]:
    """µs per state of ``pin.rneaInParallel`` on ``threads`` threads, and its ``(B, nv)`` result."""
    pool = pin.ModelPool(model, threads)
    q, v, a = (np.asfortranarray(x.T) for x in (qp, vp, ap))  # (nv, B), column = state
    tau = np.zeros((model.nv, qp.shape[0]), order="F")

    def call():
        pin.rneaInParallel(threads, pool, q, v, a, tau)

    call()
    per_call = best_time(call)
    return 1e6 * per_call / qp.shape[0], tau.T.copy()


# ---------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------


def chain_dict(n: int = CHAIN_SEGMENTS, seed: int = 100) -> dict:
    """Random ``n``-segment serial chain: random revolute (80 %) / prismatic axes, origins and
    orientations, positive masses, SPD inertias that obey the triangle inequality (principal
    moments from positive second moments, rotated)."""
    rng = np.random.default_rng(seed)

    def unit(k):
        v = rng.normal(size=k)
        return v / np.linalg.norm(v)

    segments = []
    for i in range(n):
        mass = float(rng.uniform(0.5, 3.0))
        second = mass * rng.uniform(0.002, 0.03, size=3)  # ∫x², ∫y², ∫z² about the COM
        principal = np.array([second[1] + second[2], second[0] + second[2], second[0] + second[1]])
        rot = ref.quaternion_to_matrix(unit(4))
        inertia = rot @ np.diag(principal) @ rot.T
        segments.append(
            {
                "name": f"link{i}",
                "parent": None if i == 0 else f"link{i - 1}",
                "joint": {
                    "type": "revolute" if rng.random() < 0.8 else "prismatic",
                    "axis": unit(3).tolist(),
                    "origin": rng.uniform(-0.1, 0.1, size=3).tolist(),
                    "orientation": unit(4).tolist(),
                },
                "mass": mass,
                "com": rng.uniform(-0.05, 0.05, size=3).tolist(),
                "inertia": (0.5 * (inertia + inertia.T)).tolist(),
            }
        )
    return {
        "format": "jaxbio-model",
        "version": 1,
        "name": f"chain{n}",
        "gravity": [0.0, 0.0, -9.81],
        "segments": segments,
    }


def check_against_pinocchio(tree, model, q, qd, qdd) -> tuple[float, float]:
    """``(max |tau_jaxbio - tau_pin|, max |tau_pin|)`` (N·m or N) over the first ``CHECK_STATES``
    states, Pinocchio called one state at a time through the test reference (its own order
    conversion)."""
    m = min(CHECK_STATES, q.shape[0])
    fn = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))
    tau_jax = np.asarray(fn(tree, q[:m], qd[:m], qdd[:m]))
    tau_pin = np.stack([ref.pin_inverse_dynamics(model, q[i], qd[i], qdd[i]) for i in range(m)])
    return float(np.max(np.abs(tau_jax - tau_pin))), float(np.max(np.abs(tau_pin)))


# ---------------------------------------------------------------------------------------------------
# Benchmarks
# ---------------------------------------------------------------------------------------------------


def bench_model(name: str, batches) -> dict:
    d = shipped_dict(name)
    tree = load(name)
    model = build_pinocchio_model(d)
    q, qd, qdd = random_states(tree, max(batches), seed=1)
    check_err, tau_scale = check_against_pinocchio(tree, model, q, qd, qdd)
    rows = []
    for batch in batches:
        qb, qdb, qddb = q[:batch], qd[:batch], qdd[:batch]
        jx = time_jax(tree, qb, qdb, qddb)
        two = time_two_devices(tree, qb, qdb, qddb)
        qp, vp, ap = ref.q_to_pin(model, qb), ref.v_to_pin(model, qdb), ref.v_to_pin(model, qddb)
        loop_us = time_pin_loop(model, qp, vp, ap)
        par_us, tau_par = time_pin_parallel(model, qp, vp, ap)
        batch_err = float(np.max(np.abs(jx["tau"] - ref.v_from_pin(model, tau_par))))
        rows.append(
            {
                "batch": batch,
                "jax_us_per_state": jx["us_per_state"],
                "jax_states_per_s": 1e6 / jx["us_per_state"],
                "jax_trace_s": jx["trace_s"],
                "jax_compile_s": jx["compile_s"],
                "pin_loop_us_per_state": loop_us,
                "pin_parallel_us_per_state": par_us,
                "ratio_vs_loop": loop_us / jx["us_per_state"],
                "ratio_vs_parallel": par_us / jx["us_per_state"],
                "max_abs_diff_vs_parallel": batch_err,
                "jax_2dev_us_per_state": None if two is None else two["us_per_state"],
                "jax_2dev_compile_s": None if two is None else two["compile_s"],
                "ratio_2dev_vs_loop": None if two is None else loop_us / two["us_per_state"],
                "ratio_2dev_vs_parallel": None if two is None else par_us / two["us_per_state"],
                "max_abs_diff_2dev_vs_1dev": None if two is None else float(np.max(np.abs(two["tau"] - jx["tau"]))),
            }
        )
    return {
        "model": name,
        "dof": tree.nv,
        "nq": tree.nq,
        "segments": tree.n_segments,
        "max_abs_diff_vs_rnea": check_err,
        "max_abs_tau": tau_scale,
        "rows": rows,
    }


def bench_chain(batch: int = CHAIN_BATCH) -> dict:
    d = chain_dict()
    tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    model = build_pinocchio_model(d)
    q, qd, qdd = random_states(tree, batch, seed=2)
    jx = time_jax(tree, q, qd, qdd)
    loop_us = time_pin_loop(model, ref.q_to_pin(model, q), ref.v_to_pin(model, qd), ref.v_to_pin(model, qdd))
    check_err, tau_scale = check_against_pinocchio(tree, model, q, qd, qdd)
    return {
        "segments": tree.nq,
        "batch": batch,
        "trace_s": jx["trace_s"],
        "compile_s": jx["compile_s"],
        "jax_us_per_state": jx["us_per_state"],
        "pin_loop_us_per_state": loop_us,
        "max_abs_diff_vs_rnea": check_err,
        "max_abs_tau": tau_scale,
    }


# ---------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------


def common_rows(models: list) -> list[dict]:
    """The common table's rows (`_machine.row`): one device against the ``pin.rnea`` loop, and
    `jb.batch` on two devices against ``rneaInParallel`` on two threads."""
    rows = []
    for m in models:
        for r in m["rows"]:
            rows.append(
                row(
                    "inverse dynamics, jit(vmap)",
                    m["model"],
                    r["batch"],
                    1e-6 * r["jax_us_per_state"],
                    compile_s=r["jax_compile_s"],
                    peer="pin.rnea loop",
                    peer_seconds=1e-6 * r["pin_loop_us_per_state"],
                )
            )
            if r["jax_2dev_us_per_state"] is not None:
                rows.append(
                    row(
                        "inverse dynamics, jb.batch on 2 CPU devices",
                        m["model"],
                        r["batch"],
                        1e-6 * r["jax_2dev_us_per_state"],
                        compile_s=r["jax_2dev_compile_s"],
                        peer=f"pin.rneaInParallel ({PIN_THREADS} threads)",
                        peer_seconds=1e-6 * r["pin_parallel_us_per_state"],
                    )
                )
    return rows


def print_model_table(result: dict) -> None:
    print(f"\n{result['model']} ({result['segments']} segments, nq {result['nq']}, nv {result['dof']}), float64, CPU")
    print(
        f"  check: max |tau_jaxbio - tau_pin.rnea| over {CHECK_STATES} states = "
        f"{result['max_abs_diff_vs_rnea']:.2e} (max |tau| {result['max_abs_tau']:.3g})"
    )
    header = (
        f"  {'batch':>7} | {'jaxbio µs/state':>15} | {'states/s':>10} | {'trace s':>7} | "
        f"{'compile s':>9} | {'pin.rnea loop µs/state':>22} | {'rneaInParallel(2) µs/state':>26} | "
        f"{'ratio vs loop':>13} | {'ratio vs parallel':>17} | {'max |Δtau| vs par.':>18}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for r in result["rows"]:
        print(
            f"  {r['batch']:>7} | {r['jax_us_per_state']:>15.4g} | {r['jax_states_per_s']:>10.3g} | "
            f"{r['jax_trace_s']:>7.3f} | {r['jax_compile_s']:>9.3f} | {r['pin_loop_us_per_state']:>22.4g} | "
            f"{r['pin_parallel_us_per_state']:>26.4g} | {r['ratio_vs_loop']:>13.3g} | "
            f"{r['ratio_vs_parallel']:>17.3g} | {r['max_abs_diff_vs_parallel']:>18.2e}"
        )
    rows = [r for r in result["rows"] if r["jax_2dev_us_per_state"] is not None]
    if rows:
        print("  the same vmap on 2 CPU devices (jb.batch: jax.shard_map, batch split in halves):")
        for r in rows:
            print(
                f"  {r['batch']:>7} | {r['jax_2dev_us_per_state']:>15.4g} | compile {r['jax_2dev_compile_s']:.3f} s | "
                f"ratio vs loop {r['ratio_2dev_vs_loop']:.3g} | ratio vs parallel {r['ratio_2dev_vs_parallel']:.3g} | "
                f"max |Δtau| vs 1 device {r['max_abs_diff_2dev_vs_1dev']:.1e}"
            )


def environment() -> dict:
    name, flags = cpu()
    return {
        "cpu": name,
        "isa_flags": flags,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "pinocchio": pin.__version__,
        "numpy": np.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "machine": platform.platform(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="batches 1, 1e3, 1e4 instead of 1, 1e3, 1e5")
    parser.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    parser.add_argument("--gpu-batch", type=int, default=GPU_BATCH, help="batch of the GPU section (1e6)")
    parser.add_argument(
        "--force-gpu-section",
        action="store_true",
        help="run the float32 section even without a GPU (to exercise the code)",
    )
    args = parser.parse_args(argv)

    batches = QUICK_BATCHES if args.quick else FULL_BATCHES
    out = {
        "environment": environment(),
        "load_start": load_average(),
        "batches": list(batches),
        "settings": {"repeats": REPEATS, "loop_states": LOOP_STATES, "pin_threads": PIN_THREADS},
    }
    env = out["environment"]
    print(
        f"jaxbio inverse dynamics benchmark — jax {env['jax']} ({env['backend']}), Pinocchio "
        f"{env['pinocchio']}, {env['cpu_count']} CPUs ({env['cpu']}; {env['isa_flags']}), {env['machine']}"
    )
    print(f"load at start: {out['load_start']['uptime']}")
    print(
        f"time per state: best of {REPEATS}; pin.rnea loop on min(B, {LOOP_STATES}) states; "
        f"rneaInParallel on {PIN_THREADS} threads.\nratio = Pinocchio time / jaxbio time "
        "(> 1: jaxbio faster). Compile = lower + compile of a fresh jit, trace timed apart."
    )

    out["models"] = []
    for name in MODELS:
        result = bench_model(name, batches)
        out["models"].append(result)
        print_model_table(result)

    chain = bench_chain()
    out["chain"] = chain
    print(
        f"\n{chain['segments']}-segment chain (random axes, revolute/prismatic), float64, batch "
        f"{chain['batch']}: trace {chain['trace_s']:.3f} s, lower+compile {chain['compile_s']:.3f} s; "
        f"max |tau_jaxbio - tau_pin.rnea| over {CHECK_STATES} states = {chain['max_abs_diff_vs_rnea']:.2e} (max |tau| {chain['max_abs_tau']:.3g})"
        f"\n  (for scale: jaxbio {chain['jax_us_per_state']:.4g} µs/state, pin.rnea loop "
        f"{chain['pin_loop_us_per_state']:.4g} µs/state at this batch)"
    )

    if jax.default_backend() == "gpu" or args.force_gpu_section:
        gpu = float32_inverse_dynamics(batch=args.gpu_batch)
        out["gpu"] = gpu
        print(
            f"\n{jax.default_backend().upper()} float32 (matmul precision 'highest'), {gpu['model']}, batch "
            f"{gpu['batch']}: {gpu['ns_per_state']:.3g} ns/state, trace {gpu['trace_s']:.3f} s, "
            f"lower+compile {gpu['compile_s']:.3f} s; relative error ||Δtau||/max(||tau||, 1) vs "
            f"float64 over {gpu['error_states']} states: max {gpu['max_rel_error_vs_float64']:.2e}, "
            f"median {gpu['median_rel_error_vs_float64']:.2e}"
        )
    else:
        out["gpu"] = None
        print("\nGPU float32 section: no GPU: skipped")

    out["rows"] = common_rows(out["models"])
    finish(out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
