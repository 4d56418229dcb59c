"""``jaxbio._linalg.cholesky_solve`` (small SPD solves with no LAPACK call) against numpy's LU
solve, under `jax.vmap` and with batch-last axes, and what it does with a matrix that is not
positive-definite; and the programs that use it carry no LAPACK custom call (jaxlib's batched
LAPACK kernels can deadlock XLA's CPU thread pool when two run at once: see the module)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbio._linalg import cholesky, cholesky_solve, factor_solve


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


@pytest.mark.parametrize("n", [1, 3, 7])
def test_packed_factor_equals_numpy(n):
    """`cholesky`'s packed columns are numpy's lower Cholesky factor, column by column, and
    `factor_solve` with them solves as numpy does; batch-last axes too."""
    rng = np.random.default_rng(10 + n)
    M, b = _spd(rng, n, 20)
    L = np.linalg.cholesky(M)
    packed = np.concatenate([L[:, k:, k] for k in range(n)], axis=1)
    got = jax.jit(jax.vmap(cholesky))(jnp.asarray(M))
    assert got.shape == (20, n * (n + 1) // 2)
    np.testing.assert_allclose(np.asarray(got), packed, rtol=1e-12, atol=1e-12)
    last = jax.jit(cholesky)(jnp.asarray(np.moveaxis(M, 0, -1)))
    np.testing.assert_allclose(np.asarray(last).T, packed, rtol=1e-12, atol=1e-12)
    ref = np.linalg.solve(M, b[..., None])[..., 0]
    cond = np.linalg.cond(M).max()
    x = jax.jit(jax.vmap(factor_solve))(jnp.asarray(packed), jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-13 * cond, atol=1e-13 * cond)
    x_last = jax.jit(factor_solve)(jnp.asarray(packed.T), jnp.asarray(b.T))
    np.testing.assert_allclose(np.asarray(x_last).T, ref, rtol=1e-13 * cond, atol=1e-13 * cond)


def test_not_positive_definite_gives_nan():
    M = jnp.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and −1
    assert np.all(np.isnan(np.asarray(cholesky_solve(M, jnp.ones(2)))))


def test_the_levenberg_marquardt_has_no_lapack_call():
    from jaxbio.sprint._solve import least_squares

    def res(t, a):
        return jnp.array([a * (t[1] - t[0] ** 2), 1.0 - t[0]]), {}

    assert not _lapack_calls(
        jax.vmap(lambda t0, a: least_squares(res, t0, a, max_steps=5)), jnp.ones((16, 2)), jnp.ones(16)
    )


def _lapack_calls(fn, *args):
    """The LAPACK custom calls in the compiled ``jit(fn)``."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    return [t for t in re.findall(r'custom_call_target="([^"]+)"', text) if "lapack" in t]


def test_per_state_solves_under_vmap_have_no_lapack_call():
    """The mass-matrix solves of the Hamiltonian's velocities, forward dynamics and constrained
    forward dynamics without contacts run as vectorised arithmetic under `jax.vmap` (arm7: 7
    coordinates, ≤ ``UNROLL_MAX``); the control: the same `vmap` of LAPACK's Cholesky has a call."""
    import jax.scipy.linalg as jsl

    import jaxbio as jb
    from jaxbio import hamiltonian as ham
    from jaxbio.dynamics import constrained_forward_dynamics, forward_dynamics

    tree = jb.load_model("arm7").tree
    x = jnp.tile(jnp.linspace(0.1, 0.7, 7), (4, 1))
    M = jax.vmap(lambda q: jb.dynamics.mass_matrix(tree, q))(x)
    assert _lapack_calls(jax.vmap(lambda m, b: jsl.cho_solve(jsl.cho_factor(m), b)), M, x)
    assert not _lapack_calls(jax.vmap(lambda q, p: ham.velocities(tree, q, p)), x, x)
    assert not _lapack_calls(jax.vmap(lambda q, v, t: forward_dynamics(tree, q, v, t)), x, x, x)
    assert not _lapack_calls(jax.vmap(lambda q, v, t: constrained_forward_dynamics(tree, q, v, t)[0]), x, x, x)


@pytest.mark.parametrize("n", [3, 14])
def test_spd_solve_and_its_gradient_equal_lapack_cholesky(n):
    """`spd_solve` (unrolled up to ``UNROLL_MAX``, LAPACK above) against ``cho_solve`` with its own
    derivative rules: values and reverse-mode gradients under `jax.vmap`, one and several
    right-hand sides."""
    import jax.scipy.linalg as jsl

    from jaxbio._linalg import spd_solve

    rng = np.random.default_rng(10 + n)
    M, b = (jnp.asarray(x) for x in _spd(rng, n, 8))
    B = jnp.asarray(rng.normal(size=(8, n, 2)))

    def loss(solve):
        return lambda M, b: jnp.sum(jnp.sin(solve(M, b)))

    ref = lambda M, b: jsl.cho_solve(jsl.cho_factor(M), b)  # noqa: E731
    for rhs in (b, B):
        np.testing.assert_allclose(jax.vmap(spd_solve)(M, rhs), jax.vmap(ref)(M, rhs), rtol=1e-10, atol=1e-12)
        g = jax.vmap(jax.grad(loss(spd_solve), argnums=(0, 1)))(M, rhs)
        g_ref = jax.vmap(jax.grad(loss(ref), argnums=(0, 1)))(M, rhs)
        sym = lambda z: 0.5 * (z + jnp.swapaxes(z, -1, -2))  # noqa: E731
        # cho_factor reads one triangle of M: compare the symmetric parts of ∂/∂M
        np.testing.assert_allclose(sym(g[0]), sym(g_ref[0]), rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(g[1], g_ref[1], rtol=1e-9, atol=1e-11)


@pytest.mark.slow
def test_gradient_through_a_scan_of_batched_hamiltonian_terms():
    """``grad`` of a `jax.lax.scan` over `jax.vmap` of the Hamiltonian's (∂H/∂p, ∂H/∂q), whose
    per-state route solves with `spd_solve`: it traces (without the leading batch axis kept by
    `spd_solve` the scan's linearisation failed on shapes (B, n) against (n, B)) and equals
    central differences."""
    import jaxbio as jb
    from jaxbio.hamiltonian import _tree_terms

    tree = jb.load_model("double_pendulum").tree

    def loss(q, p):
        def body(c, _):
            qq, pp = c
            d, e = jax.vmap(lambda a, b: _tree_terms(tree, a, b))(qq, pp)
            return (qq + 0.01 * d, pp - 0.01 * e), None

        (qq, _), _ = jax.lax.scan(body, (q, p), None, length=3)
        return jnp.sum(qq**2)

    q = jnp.array([[0.3, -0.2], [1.0, 0.5], [-0.7, 0.1]])
    p = jnp.array([[0.2, 0.1], [-0.3, 0.4], [0.0, -0.1]])
    g = jax.jit(jax.grad(loss))(q, p)
    h = 1e-6
    shifts = jnp.asarray([np.eye(q.size)[i].reshape(q.shape) * h for i in range(q.size)])
    values = jax.jit(jax.vmap(lambda d: jnp.stack([loss(q + d, p), loss(q - d, p)])))(shifts)
    fd = np.asarray((values[:, 0] - values[:, 1]) / (2 * h)).reshape(q.shape)
    np.testing.assert_allclose(np.asarray(g), fd, rtol=1e-6, atol=1e-8)
