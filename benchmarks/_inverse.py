"""Inverse-dynamics helpers of the benchmarks that need no Pinocchio (`inverse_dynamics.py` and
`gpu.py` share them): the models by name (``wholebody_hinges``: the shipped whole body with its ball
and free joints as hinge chains, `tests._models.hinge_chains`), random states, the batched call,
its trace and compile times, and the float32 measurement at full matmul precision."""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxbio as jb
from jaxbio.model import model_path
from tests._models import hinge_chains
from _machine import best_time

GPU_BATCH = 1_000_000
GPU_ERROR_STATES = 10_000


def shipped_dict(name: str) -> dict:
    if name.endswith("_hinges"):
        return hinge_chains(shipped_dict(name.removesuffix("_hinges")))
    return json.loads(model_path(name).read_text())


def load(name: str, dtype=jnp.float64):
    return jb.SegmentTree.from_dict(shipped_dict(name), dtype=dtype)


def random_states(tree, batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``q`` ``(batch, nq)`` (angles and slides in [−1, 1], uniformly random unit quaternions for
    ball and free joints, free translations in [−1, 1] m) and ``qd``, ``qdd`` ``(batch, nv)``,
    float64 in jaxbio's order."""
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1.0, 1.0, (batch, tree.nq))
    quat = tree.joint_layout.quat_q  # (nb, 4) q columns of each quaternion
    if len(quat):
        g = rng.normal(size=(batch,) + quat.shape)
        q[:, quat] = g / np.linalg.norm(g, axis=-1, keepdims=True)
    qd = rng.uniform(-2.0, 2.0, (batch, tree.nv))
    qdd = rng.uniform(-5.0, 5.0, (batch, tree.nv))
    return q, qd, qdd


def batched_inverse_dynamics():
    """``jit(vmap(inverse_dynamics))`` over states, the tree shared."""
    return jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))


def compile_times(fn, *args) -> tuple[float, float]:
    """``(trace s, lower + compile s)`` of a fresh ``jax.jit`` function for these arguments."""
    t0 = time.perf_counter()
    traced = fn.trace(*args)
    t1 = time.perf_counter()
    traced.lower().compile()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def float32_inverse_dynamics(name: str = "wholebody_hinges", batch: int = GPU_BATCH) -> dict:
    """float32 at full matmul precision: ns per state at ``batch`` and the error against float64."""
    tree64 = load(name)
    tree32 = tree64.astype(jnp.float32)
    q, qd, qdd = random_states(tree64, batch, seed=3)
    x32 = [jax.device_put(jnp.asarray(x, jnp.float32)) for x in (q, qd, qdd)]
    with jax.default_matmul_precision("highest"):
        fn = batched_inverse_dynamics()
        trace_s, compile_s = compile_times(fn, tree32, *x32)
        tau32 = np.asarray(jax.block_until_ready(fn(tree32, *x32)))
        per_call = best_time(lambda: jax.block_until_ready(fn(tree32, *x32)))
    m = min(GPU_ERROR_STATES, batch)
    # float64 reference from the float32-rounded inputs, so only the arithmetic differs
    x64 = [np.asarray(x[:m], np.float64) for x in x32]
    tau64 = np.asarray(batched_inverse_dynamics()(tree32.astype(jnp.float64), *x64))
    err = np.linalg.norm(tau32[:m] - tau64, axis=1) / np.maximum(np.linalg.norm(tau64, axis=1), 1.0)
    return {
        "model": name,
        "batch": batch,
        "dtype": "float32",
        "matmul_precision": "highest",
        "trace_s": trace_s,
        "compile_s": compile_s,
        "ns_per_state": 1e9 * per_call / batch,
        "error_states": m,
        "max_rel_error_vs_float64": float(err.max()),
        "median_rel_error_vs_float64": float(np.median(err)),
    }
