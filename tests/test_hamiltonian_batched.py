"""Under `jax.vmap` the Hamiltonian vector field's tree terms (``q̇ = (M + J)⁻¹ p`` and ``∂H/∂q``)
come from one batch-last kernel, `jaxbio.dynamics.batch_last.hamiltonian_flow_batch` (composite
rigid bodies, gravity from the composites, a batch-last Cholesky, the momentum passes).

References: the per-state route (`jaxbio.hamiltonian.velocities` by LAPACK Cholesky on the
segment-Jacobian mass matrix, `dH_dq` by autodiff of the kinetic energy or two recursions, gravity
by the wrench recursion), one state at a time with `jax.lax.map` (no vmap, so no kernel), and
``jax.grad`` of `hamiltonian` through its Cholesky factorisation; float64.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import hamiltonian as ham
from jaxbio.dynamics.batch_last import hamiltonian_flow_batch

BATCH = 300  # two chunks on CPU, the second overlapping the first


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1.0))


def states(tree, batch, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    q = jax.vmap(lambda k: jb.configuration.random(tree, k, angle=2.0, distance=1.0))(keys)
    return q, jnp.asarray(np.random.default_rng(seed).uniform(-3, 3, (batch, tree.nv)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["double_pendulum", "arm7", "wholebody"])
def test_kernel_equals_the_per_state_route(name):
    """The kernel (both layouts, two chunks, with a drive's added inertia) against the per-state
    route state by state; on hinge trees also against ``jax.grad(H)`` through the Cholesky
    factorisation."""
    tree = jb.load_model(name, dtype=jnp.float64).tree
    q, p = states(tree, BATCH, seed=1)
    added = jnp.asarray(np.random.default_rng(2).uniform(0.0, 0.5, (BATCH, tree.nv)))
    want_qd, want_g = jax.jit(lambda *s: jax.lax.map(lambda x: ham._plain_tree_terms(tree, *x), s))(q, p, added)
    for layout in ("cpu", "accelerator"):
        qd, g = jax.jit(lambda *s: hamiltonian_flow_batch(tree, *s, layout=layout))(q, p, added)
        assert rel(qd, want_qd) < 1e-12 and rel(g, want_g) < 1e-11, layout
    if tree.is_axial:
        H = jax.grad(lambda a, b: ham.hamiltonian(tree, a, b), argnums=(0, 1))
        dq, dp = jax.jit(jax.vmap(H))(q[:20], p[:20])
        qd, g = jax.jit(lambda a, b: hamiltonian_flow_batch(tree, a, b, jnp.zeros_like(b)))(q[:20], p[:20])
        assert rel(qd, dp) < 1e-11 and rel(g, dq) < 1e-10


@pytest.mark.parametrize(
    "name",
    [
        "double_pendulum",
        pytest.param("arm7", marks=pytest.mark.slow),
        pytest.param("wholebody", marks=pytest.mark.slow),
    ],
)
def test_vmapped_vector_field_equals_single_states(name):
    """`HamiltonianSystem.vector_field` under vmap (the kernel) against `jax.lax.map` of it (the
    per-state route), with a drive, damping and a rotor's added inertia. (The kernel's two chunks
    and both layouts: `test_kernel_equals_the_per_state_route`, slow.)"""
    tree = jb.load_model(name, dtype=jnp.float64).tree
    rng = np.random.default_rng(3)
    drive = ham.SumDrive(ham.ConstantDrive(jnp.asarray(rng.normal(size=tree.nv))), _Rotor(jnp.full(tree.nv, 0.1)))
    system = jb.HamiltonianSystem(tree, drive=drive, dissipation=ham.LinearDamping(0.5))
    q, qd = states(tree, 6, seed=4)
    y = jax.vmap(system.initial_state)(q, qd)
    got = jax.jit(jax.vmap(lambda s: system.vector_field(0.2, s)))(y)
    want = jax.jit(lambda ys: jax.lax.map(lambda s: system.vector_field(0.2, s), ys))(y)
    for key in want:
        assert rel(got[key], want[key]) < 1e-11, key


class _Rotor(ham.Drive):
    """No force, only a diagonal added inertia (a motor's rotor)."""

    inertia: jax.Array

    def __call__(self, t, q, qd, f, a=None):
        return jnp.zeros_like(qd)

    def added_inertia(self, n, dtype=None):
        return self.inertia.astype(dtype)


def _double_pendulum_system():
    return jb.HamiltonianSystem(jb.load_model("double_pendulum", dtype=jnp.float64))


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_batched_simulate_equals_single_solves():
    """`jax.vmap` of `jb.simulate` (kernel) against the same solves one at a time (per-state)."""
    system = _double_pendulum_system()
    q0 = jnp.asarray([[0.5, -0.3], [1.2, 0.4]])
    qd0 = jnp.asarray([[0.0, 1.0], [-2.0, 0.5]])

    def one(a, b):
        return jb.simulate(system, system.initial_state(a, b), 0.0, 1.0, ts=jnp.linspace(0.0, 1.0, 3)).q

    got = jax.jit(jax.vmap(one))(q0, qd0)
    want = jax.jit(lambda a, b: jax.lax.map(lambda x: one(*x), (a, b)))(q0, qd0)
    assert rel(got, want) < 1e-8


@pytest.mark.slow
def test_gradient_through_batched_simulate():
    """``jax.grad`` through `jax.vmap` of `jb.simulate` (the kernel routes derivatives to the
    per-state code) against the gradient of the same solves one at a time, and against central
    differences of the batched solve."""
    system = _double_pendulum_system()
    q0 = jnp.asarray([[0.5, -0.3], [1.2, 0.4]])
    qd0 = jnp.asarray([[0.0, 1.0], [-2.0, 0.5]])

    def final(masses, a, b):
        s = jb.HamiltonianSystem(eqx.tree_at(lambda t: t.masses, system.tree, masses))
        return jb.simulate(s, s.initial_state(a, b), 0.0, 1.0).q[-1]

    masses = system.tree.masses
    batched = jax.jit(lambda m: jnp.sum(jnp.sin(jax.vmap(lambda a, b: final(m, a, b))(q0, qd0))))
    single = jax.jit(lambda m: jnp.sum(jnp.sin(jax.lax.map(lambda x: final(m, *x), (q0, qd0)))))
    g, g_ref = jax.jit(jax.grad(batched))(masses), jax.jit(jax.grad(single))(masses)
    assert rel(g, g_ref) < 1e-7
    h = 1e-5
    for i in range(len(masses)):
        e = jnp.zeros_like(masses).at[i].set(h)
        fd = (batched(masses + e) - batched(masses - e)) / (2 * h)
        assert abs(float(g[i] - fd)) < 1e-5 * max(1.0, abs(float(fd)))
