"""Joint axes and placement quaternions are used normalised (`SegmentTree.unit_axes`,
`unit_orientations`) by every algorithm, per state and under vmap (the batch-last kernels): a
tree whose axes or orientations were scaled by hand, or are traced under jax.grad, gives the
results of the unit model, and the gradient with respect to an axis has no radial part."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb


@pytest.mark.parametrize("name", ["arm7", pytest.param("wholebody", marks=pytest.mark.slow)])
@pytest.mark.parametrize("field", ["axes", "orientations"])
def test_scaled_axes_and_orientations_give_the_unit_models_dynamics(name, field):
    with jax.enable_x64(True):
        tree = jb.load_model(name, dtype=jnp.float64).tree
        scaled = eqx.tree_at(lambda t: getattr(t, field), tree, getattr(tree, field) * 1.1)
        keys = jax.random.split(jax.random.PRNGKey(0), 3)
        q = jax.vmap(lambda k: jb.configuration.random(tree, k))(keys)
        qd = jax.random.normal(keys[0], (3, tree.nv))
        qdd = jax.random.normal(keys[1], (3, tree.nv))
        unit = jax.vmap(jb.inverse_dynamics, (None, 0, 0, 0))(tree, q, qd, qdd)
        batched = jax.vmap(jb.inverse_dynamics, (None, 0, 0, 0))(scaled, q, qd, qdd)
        single = jnp.stack([jb.inverse_dynamics(scaled, q[i], qd[i], qdd[i]) for i in range(3)])
        np.testing.assert_allclose(batched, unit, atol=1e-11)
        np.testing.assert_allclose(single, unit, atol=1e-11)
        M = jax.vmap(jb.mass_matrix, (None, 0))
        np.testing.assert_allclose(M(scaled, q), M(tree, q), atol=1e-11)


def test_gradient_with_respect_to_an_axis_is_tangent():
    with jax.enable_x64(True):
        tree = jb.load_model("arm7", dtype=jnp.float64).tree
        q = jb.configuration.random(tree, jax.random.PRNGKey(2))
        f = lambda axes: jnp.sum(
            jb.inverse_dynamics(eqx.tree_at(lambda t: t.axes, tree, axes), q, q * 0 + 0.3, q * 0 - 0.2) ** 2
        )
        g = jax.grad(f)(tree.axes)
        radial = jnp.sum(g * tree.axes, axis=1)
        assert float(jnp.abs(g).max()) > 1e-3 and float(jnp.abs(radial).max()) < 1e-10
