"""Forward kinematics under `jax.vmap` runs the batch-last kernel
(`jaxbio.dynamics.batch_last.pose_batch`, routed by `segment_motion`); single states and every
derivative run the per-state level pass.

References independent of that kernel: Pinocchio's ``forwardKinematics``, single-state calls of
the per-state pass (`motion_soa`), and central differences.
"""

from __future__ import annotations

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.dynamics import batch_last as _batched
from jaxbio import _soa as soa
from jaxbio.dynamics.kinematics import motion_soa, segment_motion
from jaxbio.model import model_path
from tests._models import random_mixed_state, random_mixed_tree_dict, random_model_dict

BATCH = 300  # two chunks on CPU, the second overlapping the first
FIELDS = ("attitude", "position", "axis", "offset")


def _trees():
    out = {name: jb.load_model(name, dtype=jnp.float64).tree for name in ("double_pendulum", "arm7", "wholebody")}
    d = random_model_dict(np.random.default_rng(300), 13)  # several roots, revolute and prismatic joints
    out["random"] = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    d = random_mixed_tree_dict(np.random.default_rng(301), 12, free_inner=True, p_massless=0.4, p_rod=0.3)
    out["mixed"] = jb.SegmentTree.from_dict(d, dtype=jnp.float64)  # free, ball and fixed joints
    return out


TREES = _trees()


def _q(tree, batch=BATCH, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    return jax.vmap(lambda k: jb.configuration.random(tree, k, angle=2.0, distance=2.0))(keys)


def _per_state(tree, q):
    """The per-state level pass (`motion_soa`, never routed to the kernel), vmapped."""
    return jax.jit(jax.vmap(lambda x: {k: soa.join(motion_soa(tree, x)[k]) for k in FIELDS}))(q)


#: exhaustive cases (default-run budget): arm7 and mixed keep the chain and the ball, free and
#: fixed-joint kernels covered by default (wholebody also by the Pinocchio test)
_SLOW = ("double_pendulum", "random", "wholebody")


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in _SLOW else []) for n in sorted(TREES)]
)
def test_vmapped_segment_motion_equals_single_states(name):
    tree = TREES[name]
    q = _q(tree)
    if name == "mixed":  # quaternions of any norm: both routes use Q/|Q|
        quat = tree.joint_layout.quat_q
        q = q.at[:, quat].multiply(jnp.asarray(np.random.default_rng(1).uniform(0.5, 2.0, (BATCH, len(quat), 1))))
    got = jax.jit(jax.vmap(lambda x: segment_motion(tree, x)))(q)
    want = _per_state(tree, q)
    for k in FIELDS:
        np.testing.assert_allclose(getattr(got, k), want[k], rtol=0, atol=1e-13, err_msg=k)
    assert not np.any(got.omega) and not np.any(got.acceleration)
    pos, att = jax.jit(jax.vmap(lambda x: jb.forward_kinematics(tree, x)))(q)
    assert np.array_equal(pos, got.position) and np.array_equal(att, got.attitude)


@pytest.mark.parametrize("name", ["arm7", "wholebody"])
def test_vmapped_forward_kinematics_equals_pinocchio(name):
    pin_ref = pytest.importorskip("tests.pinocchio_ref")
    d = json.loads(model_path(name).read_text())
    model = pin_ref.build_pinocchio_model(d)
    tree = TREES[name]
    rows = (
        [random_mixed_state(np.random.default_rng(k), d)["q"] for k in range(40)]
        if not tree.is_axial
        else list(np.random.default_rng(2).uniform(-2, 2, (40, tree.nq)))
    )
    pos, att = jax.jit(jax.vmap(lambda x: jb.forward_kinematics(tree, x)))(jnp.asarray(np.stack(rows)))
    for k, x in enumerate(rows):
        ref_pos, ref_quat = pin_ref.pin_forward_kinematics(model, x)
        np.testing.assert_allclose(pos[k], ref_pos, rtol=0, atol=1e-12)
        canonical = att[k] * np.where(att[k][:, :1] < 0, -1.0, 1.0)
        np.testing.assert_allclose(canonical, ref_quat, rtol=0, atol=1e-12)


@pytest.mark.slow  # 11 s, three compiles
def test_float32_layouts_and_sizes():
    """float32 against float64; the accelerator layout (one chunk) on the CPU; batches of 1
    and 0."""
    tree = TREES["mixed"]
    q = _q(tree, 257, seed=3)
    want = jax.jit(_batched.pose_batch)(tree, q)
    got = jax.jit(lambda t, x: _batched.pose_batch(t, x, layout="accelerator"))(tree, q)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)
    t32 = jb.SegmentTree.from_dict(json.loads(model_path("wholebody").read_text()), dtype=jnp.float32)
    q = _q(TREES["wholebody"], 100, seed=4)
    got32 = jax.jit(jax.vmap(lambda x: segment_motion(t32, x)))(q.astype(jnp.float32))
    want64 = jax.jit(jax.vmap(lambda x: segment_motion(TREES["wholebody"], x)))(q)
    assert got32.position.dtype == jnp.float32
    np.testing.assert_allclose(got32.position, want64.position, rtol=0, atol=2e-5)
    one = jax.vmap(lambda x: segment_motion(tree, x))(_q(tree, 1))
    assert one.position.shape == (1, tree.n_segments, 3)
    empty = jax.vmap(lambda x: segment_motion(tree, x))(jnp.zeros((0, tree.nq)))
    assert empty.attitude.shape == (0, tree.n_segments, 4) and empty.axis.shape == (0, tree.nv, 3)


@pytest.mark.parametrize("name", ["arm7", pytest.param("wholebody", marks=pytest.mark.slow)])
def test_derivatives_of_vmapped_poses(name):
    """``jax.grad`` of a loss of vmapped poses (reverse mode through the per-state pass's jvp)
    against central differences, and ``jacfwd`` under vmap against single states."""
    tree = TREES[name]
    q = _q(tree, 3, seed=5)
    w = jnp.asarray(np.random.default_rng(6).normal(size=(3, tree.n_segments, 7)))

    @jax.jit
    def loss(x):
        mo = jax.vmap(lambda a: segment_motion(tree, a))(x)
        return (
            jnp.sum(w[..., :3] * mo.position)
            + jnp.sum(w[..., 3:] * mo.attitude)
            + jnp.sum(mo.axis**2 * mo.offset[:, :1, :1])
        )

    grad = jax.grad(loss)(q)
    h = 1e-6
    for i, j in [(0, 0), (1, tree.nq // 2), (2, tree.nq - 1)]:
        e = jnp.zeros_like(q).at[i, j].set(h)
        fd = (loss(q + e) - loss(q - e)) / (2 * h)
        assert abs(float(grad[i, j] - fd)) < 1e-7 * max(1.0, abs(float(fd)))
    jac = jax.jit(jax.vmap(jax.jacfwd(lambda a: segment_motion(tree, a).position)))(q)
    one = jax.jit(jax.jacfwd(lambda a: soa.join(motion_soa(tree, a)["position"])))
    for k in range(3):
        np.testing.assert_allclose(jac[k], one(q[k]), rtol=0, atol=1e-12)


def test_vmap_over_subjects_uses_each_tree():
    base = TREES["arm7"]
    subjects = [eqx.tree_at(lambda t: t.origins, base, s * base.origins) for s in (0.8, 1.0, 1.3)]
    batch_tree = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *subjects)
    q = _q(base, 3, seed=7)
    pos, _ = eqx.filter_jit(jax.vmap(jb.forward_kinematics))(batch_tree, q)
    for k, tree_k in enumerate(subjects):
        np.testing.assert_allclose(pos[k], _per_state(tree_k, q[k : k + 1])["position"][0], rtol=0, atol=1e-14)
