"""Muscle lengths and moment arms under `jax.vmap` run the batch-last kernels of
`jaxbio.muscles._batched_geometry` (straight paths); single frames and every derivative run the
per-frame code.

References independent of those kernels: single-frame calls (the per-frame path code on the
per-state kinematics), central differences, and NumPy forward kinematics with rotation matrices.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbio.muscles import geometry, sets
from tests.muscles.numpy_ref import NumpyModel
from tests.muscles.test_geometry import _random_3d_paths

BATCH = 300  # CPU chunks of 256 (lengths) and 128 (moment arms), the last overlapping


def _models():
    out = {name: sets.load_muscle_set(name, dtype=jnp.float64)[:2] for name in ("gait10dof18musc", "arm26")}
    out["random 3-D chain"] = _random_3d_paths(np.random.default_rng(12))  # prismatic joints, ground points
    return out


MODELS = _models()


def _q(tree, batch=BATCH, seed=0):
    q = np.random.default_rng(seed).uniform(-1.5, 1.5, (batch, tree.nq))
    q[:, ~tree.is_revolute] *= 0.3
    return jnp.asarray(q)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_vmapped_lengths_and_moment_arms_equal_single_frames(name):
    tree, paths = MODELS[name]
    q = _q(tree)
    L, r = jax.jit(jax.vmap(lambda x: (geometry.lengths(paths, tree, x), geometry.moment_arms(paths, tree, x))))(q)
    assert L.shape == (BATCH, paths.n_muscles) and r.shape == (BATCH, paths.n_muscles, tree.nv)
    one = jax.jit(lambda x: (geometry.lengths(paths, tree, x), geometry.moment_arms(paths, tree, x)))
    for k in (0, 130, 255, 256, BATCH - 1):
        L1, r1 = one(q[k])
        np.testing.assert_allclose(L[k], L1, rtol=0, atol=1e-14)
        np.testing.assert_allclose(r[k], r1, rtol=0, atol=1e-13)
    # lengths against NumPy rotation matrices
    np.testing.assert_allclose(L, NumpyModel(tree, paths).lengths(np.asarray(q)), rtol=0, atol=1e-13)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n == "arm26" else []) for n in sorted(MODELS)]
)
def test_vmapped_lengths_and_velocities_equal_single_frames_and_minus_r_qd(name):
    """The velocity kernel (points' velocities from their segments') against single frames (one
    jvp of the per-frame lengths) and against ``−r q̇`` from the vmapped moment arms."""
    tree, paths = MODELS[name]
    q = _q(tree)
    qd = jnp.asarray(np.random.default_rng(5).uniform(-3, 3, q.shape))
    L, V = jax.jit(jax.vmap(lambda a, b: geometry.lengths_and_velocities(paths, tree, a, b)))(q, qd)
    r = jax.jit(jax.vmap(lambda a: geometry.moment_arms(paths, tree, a)))(q)
    np.testing.assert_allclose(V, -jnp.einsum("bmj,bj->bm", r, qd), rtol=0, atol=1e-12)
    one = jax.jit(lambda a, b: geometry.lengths_and_velocities(paths, tree, a, b))
    for k in (0, 255, BATCH - 1):
        L1, V1 = one(q[k], qd[k])
        np.testing.assert_allclose(L[k], L1, rtol=0, atol=1e-14)
        np.testing.assert_allclose(V[k], V1, rtol=0, atol=1e-13)


def test_vmapped_moment_arms_match_central_differences():
    tree, paths = MODELS["random 3-D chain"]
    q = _q(tree, 6, seed=1)
    r = jax.jit(jax.vmap(lambda x: geometry.moment_arms(paths, tree, x)))(q)
    lengths = jax.jit(jax.vmap(lambda x: geometry.lengths(paths, tree, x)))
    h = 1e-6
    for j in range(tree.nq):
        e = jnp.zeros(tree.nq).at[j].set(h)
        fd = (lengths(q + e) - lengths(q - e)) / (2 * h)
        np.testing.assert_allclose(r[:, :, j], -fd, rtol=0, atol=1e-8)


def test_gradients_through_vmapped_lengths():
    """Reverse mode of a loss of vmapped lengths (the per-frame code's derivative) in ``q`` and
    in the attachment points, against central differences."""
    tree, paths = MODELS["arm26"]
    q = _q(tree, 5, seed=2)
    w = jnp.asarray(np.random.default_rng(3).normal(size=(5, paths.n_muscles)))

    def loss(p, x):
        return jnp.sum(w * jax.vmap(lambda a: geometry.lengths(p, tree, a))(x))

    gp, gq = jax.jit(jax.grad(loss, argnums=(0, 1)))(paths, q)
    h = 1e-6
    e = jnp.zeros_like(q).at[3, 1].set(h)
    np.testing.assert_allclose(gq[3, 1], (loss(paths, q + e) - loss(paths, q - e)) / (2 * h), atol=1e-8)
    bump = lambda s: eqx.tree_at(lambda p: p.points, paths, paths.points.at[5, 1, 0].add(s))  # noqa: E731
    np.testing.assert_allclose(gp.points[5, 1, 0], (loss(bump(h), q) - loss(bump(-h), q)) / (2 * h), atol=1e-8)


def test_float32_sizes_nan_and_batched_models():
    tree, paths = MODELS["gait10dof18musc"]
    q = _q(tree, 200, seed=4)
    f64 = jax.jit(jax.vmap(lambda x: geometry.moment_arms(paths, tree, x)))(q)
    t32, p32 = tree.astype(jnp.float32), paths.astype(jnp.float32)
    f32 = jax.jit(jax.vmap(lambda x: geometry.moment_arms(p32, t32, x)))(q.astype(jnp.float32))
    assert f32.dtype == jnp.float32
    np.testing.assert_allclose(f32, f64, rtol=0, atol=2e-6)
    empty = jax.vmap(lambda x: geometry.lengths(paths, tree, x))(jnp.zeros((0, tree.nq)))
    assert empty.shape == (0, paths.n_muscles)
    one = jax.vmap(lambda x: geometry.moment_arms(paths, tree, x))(q[:1])
    np.testing.assert_allclose(one[0], f64[0], rtol=0, atol=1e-14)
    # a NaN frame stays NaN in its own row only
    bad = q.at[7, 3].set(jnp.nan)
    L = np.asarray(jax.jit(jax.vmap(lambda x: geometry.lengths(paths, tree, x)))(bad))
    assert np.isnan(L[7]).any() and np.isfinite(np.delete(L, 7, axis=0)).all()
    # models batched with the frames (attachment points scaled per frame): the per-frame code
    scale = jnp.linspace(0.9, 1.1, 3)
    batched = jax.vmap(lambda s: eqx.tree_at(lambda p: p.points, paths, s * paths.points))(scale)
    Lb = jax.vmap(lambda p, x: geometry.lengths(p, tree, x))(batched, q[:3])
    for k in range(3):
        pk = eqx.tree_at(lambda p: p.points, paths, scale[k] * paths.points)
        np.testing.assert_allclose(Lb[k], geometry.lengths(pk, tree, q[k]), rtol=0, atol=1e-14)
