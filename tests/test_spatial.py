"""jaxbio.spatial's NaN-free norm, square root and unit vector, against numpy."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio import spatial


def test_norm_unit_safe_sqrt_match_numpy_and_have_finite_gradients_at_zero():
    v = np.random.default_rng(0).normal(size=(5, 3))
    np.testing.assert_allclose(spatial.norm(v), np.linalg.norm(v, axis=-1), rtol=1e-14)
    np.testing.assert_allclose(spatial.unit(v, jnp.zeros(3)), v / np.linalg.norm(v, axis=-1)[:, None], rtol=1e-14)
    np.testing.assert_allclose(spatial.safe_sqrt(np.abs(v)), np.sqrt(np.abs(v)), rtol=1e-14)
    fallback = jnp.array([0.0, 0.0, 1.0])
    np.testing.assert_array_equal(spatial.unit(jnp.zeros(3), fallback), fallback)
    np.testing.assert_array_equal(spatial.unit(jnp.array([1e-9, 0.0, 0.0]), fallback, tiny=1e-6), fallback)
    assert spatial.safe_sqrt(-1.0) == 0.0
    for f in (spatial.norm, lambda x: spatial.unit(x, fallback).sum(), lambda x: spatial.safe_sqrt(x[0])):
        g = jax.grad(f)(jnp.zeros(3))
        assert np.all(np.isfinite(np.asarray(g)))
