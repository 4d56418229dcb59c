"""Closed forms of a one-segment tree (`jaxbio.dynamics.one_segment`) against the general routes:
the segment-Jacobian mass matrix, the wrench recursion's gravity vector, the COM-based potential
and autodiff of the kinetic energy, on random hinges and sliders with arbitrary placements."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.dynamics import one_segment as _one_segment
from jaxbio.dynamics.energy import _plain_gradient, segment_coms
from jaxbio.dynamics._mass_matrix import _jacobian_mass_matrix
from jaxbio.dynamics._rnea import _tau
from tests._models import random_model_dict


def _one(seed, joint):
    d = random_model_dict(np.random.default_rng(seed), 1)
    d["segments"][0]["joint"]["type"] = joint
    return jb.SegmentTree.from_dict(d, dtype=jnp.float64)


@pytest.mark.parametrize("joint", ["revolute", "prismatic"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_forms_equal_general_routes(joint, seed):
    tree = _one(seed, joint)
    assert _one_segment.applies(tree)
    rng = np.random.default_rng(10 + seed)

    @jax.jit
    def routes(q, qd):  # (closed form, general route) pairs, compiled once for the four states
        z = jnp.zeros(1)
        return [
            (jb.mass_matrix(tree, q), _jacobian_mass_matrix(tree, q)),
            (jb.gravity_forces(tree, q), _tau(tree, q, z, z)),
            (jb.potential_energy(tree, q), -jnp.sum(tree.masses * (segment_coms(tree, q) @ tree.gravity))),
            (jb.dynamics.kinetic_energy_gradient(tree, q, qd), _plain_gradient(tree, q, qd)),
            # T = ½ M q̇² with the kinetic energy computed from the segment motion
            (0.5 * jb.mass_matrix(tree, q)[0, 0] * qd[0] ** 2, jb.kinetic_energy(tree, q, qd)),
        ]

    tolerances = ((1e-13, 1e-14), (1e-12, 1e-12), (1e-13, 1e-13), (1e-7, 1e-12), (1e-12, 0.0))  # (rtol, atol)
    for q, qd in zip(rng.uniform(-3, 3, (4, 1)), rng.uniform(-2, 2, (4, 1))):
        for (got, want), (rtol, atol) in zip(routes(jnp.asarray(q), jnp.asarray(qd)), tolerances):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_closed_forms_under_vmap_and_grad():
    tree = _one(3, "revolute")
    qs = jnp.linspace(-2.0, 2.0, 7)[:, None]
    g = jax.vmap(jb.gravity_forces, in_axes=(None, 0))(tree, qs)
    dV = jax.vmap(jax.grad(lambda q: jb.potential_energy(tree, q)))(qs)
    np.testing.assert_allclose(g, dV, rtol=1e-12, atol=1e-12)  # g = ∂V/∂q
    # the inverse-dynamics identity across routes: M q̈ + g = τ for a hinge at rest
    q, qdd = jnp.array([0.4]), jnp.array([1.3])
    tau = jb.inverse_dynamics(tree, q, jnp.zeros(1), qdd)
    np.testing.assert_allclose(jb.mass_matrix(tree, q) @ qdd + jb.gravity_forces(tree, q), tau, rtol=1e-12)


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
@pytest.mark.parametrize("joint", ["revolute", "prismatic"])
def test_closed_forms_take_raw_axes_and_placements(joint):
    """The slider's forms skip the normalisation (`_gravity_along`): a hand-scaled axis and
    placement quaternion, or a zero placement (the identity), give the unit tree's general-route
    numbers; a NaN axis gives NaN, never a plausible number."""
    unit = _one(4, joint)
    q = jnp.array([0.7])
    want = (
        _jacobian_mass_matrix(unit, q),
        _tau(unit, q, jnp.zeros(1), jnp.zeros(1)),
        -jnp.sum(unit.masses * (segment_coms(unit, q) @ unit.gravity)),
    )
    scaled = eqx.tree_at(lambda t: (t.axes, t.orientations), unit, (1.7 * unit.axes, 0.6 * unit.orientations))
    for tree in (unit, scaled):
        got = (jb.mass_matrix(tree, q), jb.gravity_forces(tree, q), jb.potential_energy(tree, q))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    zero = eqx.tree_at(lambda t: t.orientations, unit, jnp.zeros_like(unit.orientations))
    ident = eqx.tree_at(lambda t: t.orientations, unit, jnp.array([[1.0, 0.0, 0.0, 0.0]]))
    for f in (jb.gravity_forces, jb.potential_energy):
        np.testing.assert_allclose(f(zero, q), _one_segment_general(f, ident, q), rtol=1e-12, atol=1e-12)
    bad = eqx.tree_at(lambda t: t.axes, unit, unit.axes.at[0, 0].set(jnp.nan))
    assert not np.isfinite(_one_segment.gravity_forces(bad, q)).any()
    assert not np.isfinite(_one_segment.mass_matrix(bad, q)).any()


def _one_segment_general(f, tree, q):
    if f is jb.gravity_forces:
        return _tau(tree, q, jnp.zeros(1), jnp.zeros(1))
    return -jnp.sum(tree.masses * (segment_coms(tree, q) @ tree.gravity))


@pytest.mark.slow  # 6–10 s each (autodiff of the general mass matrix); its parts are checked above
@pytest.mark.parametrize("joint", ["revolute", "prismatic"])
def test_hamiltonian_terms_against_autodiff_of_the_hamiltonian(joint):
    """`_one_segment.hamiltonian_terms` (what HamiltonianSystem uses for one segment) against
    ``jax.grad`` of ``H = ½ p²/(M + J) + V(q)`` built from the general routes' mass matrix and
    COM potential, with and without a drive's added inertia."""
    tree = _one(4, joint)

    def H(q, p, J):
        M = _jacobian_mass_matrix(tree, q)[0, 0] + J
        return 0.5 * p[0] ** 2 / M - jnp.sum(tree.masses * (segment_coms(tree, q) @ tree.gravity))

    @jax.jit
    def both(q, p, J):  # compiled once per case: autodiff of H, the closed forms without and with J
        return (
            jax.grad(H, argnums=(0, 1))(q, p, 0.0),
            jax.grad(H, argnums=(0, 1))(q, p, J),
            _one_segment.hamiltonian_terms(tree, q, p),
            _one_segment.hamiltonian_terms(tree, q, p, J),
        )

    for q, p in ((jnp.array([0.7]), jnp.array([1.9])), (jnp.array([-1.2]), jnp.array([-0.4]))):
        plain, added, got_plain, got_added = both(q, p, jnp.asarray(0.3))
        for (dH_dq, dH_dp), (qd, gradient_q) in ((plain, got_plain), (added, got_added)):
            np.testing.assert_allclose(qd, dH_dp, rtol=1e-13)
            np.testing.assert_allclose(gradient_q, dH_dq, rtol=1e-11, atol=1e-12)
        assert not np.allclose(plain[1], added[1])  # the added inertia changes q̇
