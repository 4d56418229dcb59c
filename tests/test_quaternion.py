"""jb.quaternion against scipy.spatial.transform.Rotation (which stores x, y, z, w)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from jaxbio import quaternion as quat

N = 200


def wxyz(r: Rotation) -> np.ndarray:
    return r.as_quat()[..., [3, 0, 1, 2]]


@pytest.fixture
def rots():
    return Rotation.random(N, random_state=0)


def test_to_matrix(rots):
    np.testing.assert_allclose(quat.to_matrix(wxyz(rots)), rots.as_matrix(), atol=1e-14)


def test_rotate(rots):
    v = np.random.default_rng(1).normal(size=(N, 3))
    np.testing.assert_allclose(quat.rotate(wxyz(rots), v), rots.apply(v), atol=1e-13)


def test_multiply_composes_like_scipy(rots):
    other = Rotation.random(N, random_state=2)
    prod = quat.multiply(wxyz(rots), wxyz(other))
    ref = rots * other  # apply other first, then rots
    np.testing.assert_allclose(quat.to_matrix(prod), ref.as_matrix(), atol=1e-13)


def test_conjugate_is_inverse(rots):
    q = wxyz(rots)
    np.testing.assert_allclose(quat.to_matrix(quat.conjugate(q)), rots.inv().as_matrix(), atol=1e-14)
    np.testing.assert_allclose(quat.multiply(q, quat.conjugate(q)), np.tile([1, 0, 0, 0], (N, 1)), atol=1e-15)


def test_from_axis_angle():
    rng = np.random.default_rng(3)
    axis = rng.normal(size=(N, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    angle = rng.uniform(-2 * np.pi, 2 * np.pi, size=N)
    ref = Rotation.from_rotvec(axis * angle[:, None])
    np.testing.assert_allclose(quat.to_matrix(quat.from_axis_angle(axis, angle)), ref.as_matrix(), atol=1e-13)


def test_from_matrix_random(rots):
    q = quat.from_matrix(rots.as_matrix())
    ref = wxyz(rots)
    ref = np.where(ref[:, :1] < 0, -ref, ref)
    np.testing.assert_allclose(q, ref, atol=1e-13)


@pytest.mark.parametrize("axis", [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, -1, 1]])
@pytest.mark.parametrize("angle", [0.0, 1e-12, np.pi / 2, np.pi - 1e-9, np.pi, -np.pi])
def test_from_matrix_hard_cases(axis, angle):
    """Identity, tiny and half-turn rotations, where naive trace formulas divide by ~0."""
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    R = Rotation.from_rotvec(axis * angle).as_matrix()
    q = np.asarray(quat.from_matrix(R))
    assert np.all(np.isfinite(q))
    np.testing.assert_allclose(np.linalg.norm(q), 1.0, atol=1e-15)
    np.testing.assert_allclose(quat.to_matrix(q), R, atol=1e-14)


def test_normalize():
    q = np.array([[2.0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    n = np.asarray(quat.normalize(q))
    np.testing.assert_allclose(n[:2], [[1, 0, 0, 0], [0.5, 0.5, 0.5, 0.5]])
    np.testing.assert_allclose(n[2], [1, 0, 0, 0])  # zero -> identity, not NaN
    g = jax.grad(lambda x: quat.normalize(x)[1])(jnp.zeros(4))
    assert np.all(np.isfinite(g))


def test_jit_vmap_grad_and_float32(rots):
    q = wxyz(rots)
    f = jax.jit(jax.vmap(lambda a: quat.from_matrix(quat.to_matrix(a))))
    back = np.asarray(f(q))
    np.testing.assert_allclose(np.abs(np.sum(back * q, axis=1)), 1.0, atol=1e-12)
    q32 = q.astype(np.float32)
    m32 = quat.to_matrix(q32)
    assert m32.dtype == jnp.float32
    np.testing.assert_allclose(m32, rots.as_matrix(), atol=2e-6)
    # rotation keeps length: gradient of |R v|^2 wrt v is 2 v
    v = jnp.array([0.3, -1.0, 2.0])
    g = jax.grad(lambda v: jnp.sum(quat.rotate(q[0], v) ** 2))(v)
    np.testing.assert_allclose(g, 2 * v, atol=1e-13)


def test_numpy_inputs_stay_numpy_and_agree_with_jax():
    """`to_matrix` and `multiply` on numpy arrays (model building, outside jit) give numpy arrays
    equal to the JAX path."""
    rots = Rotation.random(20, random_state=3)
    p, q = wxyz(rots), wxyz(Rotation.random(20, random_state=4))
    m = quat.to_matrix(np.asarray(p))
    assert isinstance(m, np.ndarray)
    np.testing.assert_allclose(m, quat.to_matrix(jnp.asarray(p)), atol=1e-15)
    prod = quat.multiply(np.asarray(p), np.asarray(q))
    assert isinstance(prod, np.ndarray)
    np.testing.assert_allclose(prod, quat.multiply(jnp.asarray(p), jnp.asarray(q)), atol=1e-15)


def test_from_axis_angle_numpy_in_numpy_out():
    axis = np.array([[0.0, 0.6, 0.8], [1.0, 0.0, 0.0]])
    angle = np.array([0.3, -2.0])
    q = quat.from_axis_angle(axis, angle)
    assert isinstance(q, np.ndarray) and q.dtype == np.float64
    np.testing.assert_allclose(q, quat.from_axis_angle(jnp.asarray(axis), jnp.asarray(angle)), atol=1e-15)
