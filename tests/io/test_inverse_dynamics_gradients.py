"""Whole-trial inverse dynamics differentiated with respect to the model (`jaxbio.io.
prepare_inverse_dynamics` + `jaxbio.tools.generalized_forces`), on OpenSim's subject01 gait with its
ground reactions (a tenth of a second: 7 frames), float64:

- the prepared inputs are the trial's frames (`inverse_dynamics_tool` is `generalized_forces` of
  them: its results are tested against OpenSim in test_inverse_dynamics_tool.py);
- ∂τ/∂masses (``jax.jacfwd``) against central finite differences and against the closed form:
  with the COMs and the inertias about them fixed, τ is affine in the masses, and its slope in
  ``m_i`` is the inverse dynamics of a unit point mass at segment ``i``'s COM alone (every other
  mass, every inertia and the ground reactions zero); so a finite step of any size is exact;
- ``jax.grad`` of a scalar of the trial (reverse mode, through the batched kernel's ``custom_jvp``)
  against the same Jacobian;
- a directional derivative in every array the model has (masses, COMs, inertias, joint frames,
  the coordinate map's spline coefficients, the bodies' frames, which carry the loads' lever arms)
  against central differences.
"""

import dataclasses
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb

S01 = Path(__file__).parent / "data" / "subject01"


def _masses(model, masses):
    return eqx.tree_at(lambda m: m.tree.masses, model, masses)


@jax.jit
def _value_and_mass_jacobian(model, inputs):
    """``τ`` ``(T, nc)`` of every frame and ``∂τ/∂masses`` ``(T, nc, n)`` (one compilation serves
    every model and inputs of the same structure)."""
    trial = jax.vmap(jb.tools.generalized_forces, (None, 0))
    return jax.jacfwd(lambda m: (trial(_masses(model, m), inputs),) * 2, has_aux=True)(model.tree.masses)[::-1]


@pytest.fixture(scope="module")
def case():
    with jax.enable_x64(True):
        model = jb.io.load_osim(S01 / "subject01.osim", dtype=jnp.float64)
        motion = jb.io.read_storage(S01 / "subject01_walk1_ik.mot")
        keep = (motion.time > 0.35) & (motion.time < 0.75)  # fewer rows for the splines: a faster test
        motion = dataclasses.replace(motion, time=motion.time[keep], data=motion.data[keep])
        inputs = jb.tools.prepare_inverse_dynamics(
            model, motion, external_loads=S01 / "subject01_walk1_grf.xml", lowpass_hz=6.0, start=0.5, end=0.6
        )
        return model, inputs


def test_prepared_inputs_are_frames_of_the_trial(case):
    model, inputs = case
    names = model.coordinate_names
    assert inputs.n_frames == 7 and inputs.c.shape == inputs.cdd.shape == (7, len(names))
    assert inputs.forces.shape == inputs.points.shape == (7, 2, 3)  # one ground reaction under each foot
    assert [model.bodies[b] for b in inputs.load_bodies] == ["calcn_r", "calcn_l"]
    assert inputs.force_frames == inputs.point_frames == (0, 0)  # the ground
    assert inputs.labels[:2] == ("pelvis_tilt_moment", "pelvis_list_moment") and inputs.labels[3] == "pelvis_tx_force"
    one = inputs.frame(3)
    assert one.c.shape == (len(names),) and one.forces.shape == (2, 3) and one.labels == inputs.labels
    other = jb.io.load_osim(S01.parent / "arm26.osim")
    with pytest.raises(ValueError, match="prepared for coordinates"):
        jb.tools.generalized_forces(other, one)


def test_mass_jacobian_is_the_point_mass_closed_form_and_finite_differences(case):
    model, inputs = case
    with jax.enable_x64(True):
        m0 = model.tree.masses
        n = m0.shape[0]

        def tau(masses, model=model, inputs=inputs):
            return np.asarray(_value_and_mass_jacobian(_masses(model, masses), inputs)[0])

        tau0, jac = (np.asarray(x) for x in _value_and_mass_jacobian(model, inputs))
        assert jac.shape == (7, len(model.coordinate_names), n)

        # closed form: one unit point mass at segment i's COM, nothing else (no inertia, no ground reactions)
        bare = eqx.tree_at(lambda m: m.tree.inertias, model, jnp.zeros_like(model.tree.inertias))
        unloaded = eqx.tree_at(lambda i: (i.forces, i.torques), inputs, (inputs.forces * 0, inputs.torques * 0))
        point = np.stack([tau(jnp.eye(n)[i], bare, unloaded) for i in range(n)], -1)
        scale = np.abs(point).max()
        np.testing.assert_allclose(jac, point, rtol=0, atol=1e-11 * scale)

        # central differences of 1 kg on every segment (massless frames included): exact, τ is affine
        fd = np.stack([(tau(m0.at[i].add(1.0)) - tau(m0.at[i].add(-1.0))) / 2.0 for i in range(n)], -1)
        np.testing.assert_allclose(jac, fd, rtol=0, atol=1e-10 * scale)

        # affine: a large change of every mass at once is the Jacobian's prediction
        delta = jnp.asarray(np.random.default_rng(0).uniform(-0.5, 0.5, n)) * (m0 + 1.0)
        np.testing.assert_allclose(
            tau(m0 + delta) - tau0, np.einsum("tcn,n->tc", jac, delta), rtol=0, atol=1e-10 * scale
        )

        # reverse mode (what an optimiser calls) contracts the same Jacobian
        w = jnp.asarray(np.random.default_rng(1).normal(size=jac.shape[:2]))
        trial = jax.vmap(jb.tools.generalized_forces, (None, 0))
        grad = jax.jit(jax.grad(lambda masses: jnp.sum(w * trial(_masses(model, masses), inputs))))(m0)
        np.testing.assert_allclose(np.asarray(grad), np.einsum("tc,tcn->n", np.asarray(w), jac), rtol=1e-12, atol=1e-9)


@pytest.mark.slow
def test_directional_derivative_in_every_model_array_matches_central_differences(case):
    model, inputs = case
    with jax.enable_x64(True):
        rng = np.random.default_rng(2)
        arrays, static = eqx.partition(model, eqx.is_inexact_array)
        # a random direction in every array: tangent to the unit sphere for joint axes and joint
        # orientations (a derivative off it is not a rotation's: the batched kernel and the per-state
        # recursion treat non-unit ones differently), symmetric in the inertias, only the spline
        # coefficients of the coordinate map that are used (the padding never is), none in the breakpoints
        direction = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.normal(size=a.shape)), arrays)
        tangent = lambda d, u: d - jnp.sum(d * u, -1, keepdims=True) * u
        direction = eqx.tree_at(
            lambda d: (d.tree.axes, d.tree.orientations),
            direction,
            (
                tangent(direction.tree.axes, model.tree.axes),
                tangent(direction.tree.orientations, model.tree.orientations),
            ),
        )
        direction = eqx.tree_at(
            lambda d: d.tree.inertias,
            direction,
            direction.tree.inertias + jnp.swapaxes(direction.tree.inertias, -1, -2),
        )
        direction = eqx.tree_at(
            lambda d: d.coordinates.breakpoints, direction, jnp.zeros_like(model.coordinates.breakpoints)
        )
        direction = eqx.tree_at(
            lambda d: d.coordinates.coefficients,
            direction,
            direction.coordinates.coefficients * (model.coordinates.coefficients != 0),
        )

        def along(eps):
            moved = jax.tree_util.tree_map(lambda a, d: a + eps * d, arrays, direction)
            return jax.vmap(jb.tools.generalized_forces, (None, 0))(eqx.combine(moved, static), inputs)

        at = jax.jit(lambda eps: jax.jvp(along, (eps,), (jnp.ones_like(eps),)))  # (τ, dτ/dε) at ε
        _, dtau = at(jnp.float64(0.0))
        h = 1e-5
        fd = (at(jnp.float64(h))[0] - at(jnp.float64(-h))[0]) / (2 * h)
        np.testing.assert_allclose(np.asarray(dtau), np.asarray(fd), rtol=0, atol=1e-6 * float(jnp.abs(dtau).max()))
        assert float(jnp.abs(dtau).max()) > 1.0
