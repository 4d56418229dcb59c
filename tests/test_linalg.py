"""``jaxbio._linalg.cholesky_solve`` (small SPD solves with no LAPACK call) against numpy's LU
solve, under `jax.vmap` and with batch-last axes, and what it does with a matrix that is not
positive-definite; and the programs that use it carry no LAPACK custom call (jaxlib's batched
LAPACK kernels can deadlock XLA's CPU thread pool when two run at once: see the module)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbio._linalg import cholesky_solve


def _spd(rng, n, batch):
    a = rng.normal(size=(batch, n, n))
    return a @ np.swapaxes(a, 1, 2) + 0.1 * np.eye(n), rng.normal(size=(batch, n))


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_vmapped_and_batch_last_equal_numpy(n):
    rng = np.random.default_rng(n)
    M, b = _spd(rng, n, 50)
    ref = np.linalg.solve(M, b[..., None])[..., 0]
    got = jax.jit(jax.vmap(cholesky_solve))(jnp.asarray(M), jnp.asarray(b))  # float64 (conftest)
    last = jax.jit(cholesky_solve)(jnp.asarray(np.moveaxis(M, 0, -1)), jnp.asarray(b.T))
    cond = np.linalg.cond(M).max()
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-13 * cond, atol=1e-13 * cond)
    np.testing.assert_allclose(np.asarray(last).T, ref, rtol=1e-13 * cond, atol=1e-13 * cond)


def test_not_positive_definite_gives_nan():
    M = jnp.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and −1
    assert np.all(np.isnan(np.asarray(cholesky_solve(M, jnp.ones(2)))))


def test_the_levenberg_marquardt_has_no_lapack_call():
    from jaxbio.sprint._solve import least_squares

    def res(t, a):
        return jnp.array([a * (t[1] - t[0] ** 2), 1.0 - t[0]]), {}

    text = jax.jit(jax.vmap(lambda t0, a: least_squares(res, t0, a, max_steps=5))).lower(
        jnp.ones((16, 2)), jnp.ones(16)).compile().as_text()
    assert not [t for t in re.findall(r'custom_call_target="([^"]+)"', text) if "lapack" in t]
