"""The training loop a JAX user writes first, on `jb.simulate`'s defaults (issue #49 item 2).

    JAXBIO_JAX_CACHE=0 python benchmarks/learning_defaults.py

benchmarks/learning.py's case (an `equinox.nn.MLP` torque drive, double pendulum and arm7, a
batch of 32 under `jax.vmap`, 2 s, float32, 21 states saved, loss the mean of ``q²``) with
nothing but ``ts`` given to `jb.simulate` (default tolerances, ``throw=True``): the jitted
forward pass and value-and-gradient, best of 7, and their first calls (each cold:
`jax.clear_caches` before it).
"""

import os
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _machine  # noqa: E402
import learning as L  # noqa: E402

import jaxbio as jb  # noqa: E402

print(_machine.machine())


def best(fn, arg, repeats: int = 7) -> float:
    """Best wall seconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(arg))
        times.append(time.perf_counter() - start)
    return min(times)


def first(fn, arg) -> float:
    """Wall seconds of a cold first call (trace, compile, one run)."""
    jax.clear_caches()
    start = time.perf_counter()
    jax.block_until_ready(fn(arg))
    return time.perf_counter() - start


for model in ("double_pendulum", "arm7"):
    tree = jb.load_model(model, dtype=jnp.float32).tree
    n = tree.nv
    mlp = eqx.nn.MLP(2 * n, n, 32, 2, activation=jnp.tanh, key=jax.random.key(0), dtype=jnp.float32)
    q0 = 0.5 * jax.random.normal(jax.random.key(1), (L.BATCH, n), jnp.float32)
    ts = jnp.linspace(0.0, L.DURATION, L.SAVED, dtype=jnp.float32)

    def one(mlp, q0, tree=tree, n=n, ts=ts):
        damping = jb.hamiltonian.LinearDamping(jnp.full(n, 0.1, jnp.float32))
        system = jb.HamiltonianSystem(tree, L.MLPDrive(mlp), damping)
        return jb.simulate(system, system.initial_state(q0), 0.0, L.DURATION, ts=ts).q

    def loss(mlp, q0=q0, one=one):
        return jnp.mean(jax.vmap(one, (None, 0))(mlp, q0) ** 2)

    value_grad, forward = eqx.filter_jit(eqx.filter_value_and_grad(loss)), eqx.filter_jit(loss)
    c_vg, c_fwd = first(value_grad, mlp), first(forward, mlp)
    t_fwd, t_vg = best(forward, mlp), best(value_grad, mlp)
    print(
        f"{model}: forward {1e3 * t_fwd:.1f} ms, value+grad {1e3 * t_vg:.1f} ms ({t_vg / t_fwd:.2f}x); "
        f"first calls: forward {c_fwd:.1f} s, value+grad {c_vg:.1f} s ({c_vg / c_fwd:.2f}x)",
        flush=True,
    )
