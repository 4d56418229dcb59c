"""Wide and bushy trees (issue #49 item 5): a segment with hundreds of children.

The batch-last kernels sum a step's children by one scatter-add when some slot has more than
`batch_last.WIDE_ROUNDS` of them, and the per-state level passes gather parents and scatter-add
children when a level is wider than `_levels.ONEHOT_WIDTH`. Checked here against Pinocchio (state
by state, float64), the two routes against each other, gradients against central finite
differences, and that every shipped model stays on the unchanged paths. The 1,500-leaf star and
2,000-segment trees (`slow`) check that they compile and match; timings are in
benchmarks/wide_trees.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.dynamics import _levels, batch_last
from jaxbio.model import model_path
from tests._models import bushy_parents, random_model_dict, star_parents, uniform_parents

pytestmark = pytest.mark.usefixtures("_float64")
RTOL = 1e-10


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1.0))


def model(parents, seed: int = 0):
    d = random_model_dict(np.random.default_rng(seed), len(parents), parents=parents)
    return d, jb.SegmentTree.from_dict(d, dtype=jnp.float64)


def states(tree, batch: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return (
        jnp.asarray(rng.uniform(-2, 2, (batch, tree.nq))),
        jnp.asarray(rng.uniform(-3, 3, (batch, tree.nv))),
        jnp.asarray(rng.uniform(-10, 10, (batch, tree.nv))),
    )


def batched_tau(tree, q, qd, qdd):
    return jax.jit(jax.vmap(lambda a, b, c: jb.inverse_dynamics(tree, a, b, c)))(q, qd, qdd)


def pinocchio_tau(d, q, qd, qdd):
    pin_ref = pytest.importorskip("tests.pinocchio_ref", reason="Pinocchio reference needs `pip install pin`")
    pm = pin_ref.build_pinocchio_model(d)
    return np.stack(
        [pin_ref.pin_inverse_dynamics(pm, *(np.asarray(x[i]) for x in (q, qd, qdd))) for i in range(len(q))]
    )


STAR = star_parents(300)
BUSHY = bushy_parents(np.random.default_rng(3), 400)


def test_trees_take_the_wide_paths():
    """The star and the bushy tree here run the scatter-add paths (else this file tests nothing new)."""
    for parents in (STAR, BUSHY):
        sched = _levels.schedule(parents)
        assert any(batch_last._wide(ph.child_rows) or batch_last._wide(ph.later_children) for ph in sched.phases)
        assert _levels.levels_of(parents).members.shape[1] > _levels.ONEHOT_WIDTH


@pytest.mark.parametrize("name", ["arm7", "wholebody", "sagittal11", "arm26", "double_pendulum"])
def test_shipped_models_keep_the_narrow_paths(name):
    """Every shipped model is within `WIDE_ROUNDS` and `ONEHOT_WIDTH`: its programs are unchanged."""
    tree = jb.load_model(model_path(name)).tree
    sched = _levels.schedule(tree.parents)
    assert not any(batch_last._wide(ph.child_rows) or batch_last._wide(ph.later_children) for ph in sched.phases)
    assert _levels.levels_of(tree.parents).members.shape[1] <= _levels.ONEHOT_WIDTH


def test_child_pairs_sum_like_rounds():
    """`child_pairs` names the same children as the rounds, sorted by slot and round."""
    rng = np.random.default_rng(0)
    for parents in (STAR, BUSHY, uniform_parents(rng, 300)):
        for ph in _levels.schedule(parents).phases:
            S, R, K = ph.child_rows.shape
            rows, slots = _levels.child_pairs(ph.child_rows, S * K)
            values = rng.normal(size=S * K + 1)
            values[-1] = 0.0
            by_rounds = values[ph.child_rows].sum(axis=1)  # (S, K)
            by_pairs = np.zeros((S, K))
            for s in range(S):
                np.add.at(by_pairs[s], slots[s], values[rows[s]])
                assert np.all(np.diff(slots[s][rows[s] != S * K]) >= 0)
            np.testing.assert_allclose(by_pairs, by_rounds, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("parents", [STAR, pytest.param(BUSHY, marks=pytest.mark.slow)], ids=["star300", "bushy400"])
def test_inverse_dynamics_against_pinocchio(parents):
    d, tree = model(parents)
    q, qd, qdd = states(tree, 6)
    want = pinocchio_tau(d, q, qd, qdd)
    assert rel(batched_tau(tree, q, qd, qdd), want) < RTOL  # batch-last kernel
    one = jax.jit(lambda a, b, c: jb.inverse_dynamics(tree, a, b, c))
    assert rel(np.stack([one(q[i], qd[i], qdd[i]) for i in range(len(q))]), want) < RTOL  # per-state levels


@pytest.mark.parametrize("parents", [pytest.param(STAR, marks=pytest.mark.slow), BUSHY], ids=["star300", "bushy400"])
def test_mass_matrix_and_kinematics_batched(parents):
    """``vmap`` of the mass matrix (CRBA kernel: the wide backward pass) against the per-state
    Jacobian route, and of forward kinematics against the per-state level pass."""
    _, tree = model(parents)
    q, _, _ = states(tree, 3)
    M = jax.jit(jax.vmap(lambda a: jb.mass_matrix(tree, a)))(q)
    M1 = np.stack([jax.jit(lambda a: jb.mass_matrix(tree, a))(q[i]) for i in range(len(q))])
    assert rel(M, M1) < RTOL
    pos, att = jax.jit(jax.vmap(lambda a: jb.forward_kinematics(tree, a)))(q)
    mo = [jb.dynamics.kinematics.motion_soa(tree, q[i]) for i in range(len(q))]
    from jaxbio import _soa as soa

    assert rel(pos, np.stack([soa.join(m["position"]) for m in mo])) < RTOL
    assert rel(att, np.stack([soa.join(m["attitude"]) for m in mo])) < RTOL


@pytest.mark.parametrize(
    "parents",
    [pytest.param(star_parents(100), marks=pytest.mark.slow), bushy_parents(np.random.default_rng(5), 150)],
    ids=["star100", "bushy150"],
)
def test_gradients_against_finite_differences(parents):
    """``grad`` of ``Σ w·tau`` in ``(q, qd, qdd)``: per state (the level passes) and under
    ``vmap`` (the batch-last adjoint), along random directions, against central differences."""
    _, tree = model(parents, seed=2)
    q, qd, qdd = states(tree, 2, seed=4)
    rng = np.random.default_rng(6)
    w = jnp.asarray(rng.normal(size=tree.nv))

    def f(a, b, c):
        return jnp.dot(w, jb.inverse_dynamics(tree, a, b, c))

    grads = jax.jit(jax.vmap(jax.grad(f, argnums=(0, 1, 2))))(q, qd, qdd)
    for i in range(len(q)):
        x = (q[i], qd[i], qdd[i])
        one = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(*x)
        for k in range(3):
            assert rel(grads[k][i], one[k]) < 1e-9
            v = jnp.asarray(rng.normal(size=x[k].shape))
            h = 1e-5
            plus = [xx + h * v if j == k else xx for j, xx in enumerate(x)]
            minus = [xx - h * v if j == k else xx for j, xx in enumerate(x)]
            fd = (f(*plus) - f(*minus)) / (2 * h)
            assert abs(float(jnp.dot(one[k], v)) - float(fd)) <= 1e-6 * max(1.0, abs(float(fd)))


@pytest.mark.slow
@pytest.mark.parametrize(
    "parents",
    [
        star_parents(1500),
        uniform_parents(np.random.default_rng(0), 2000),
        bushy_parents(np.random.default_rng(0), 2000),
    ],
    ids=["star1500", "random2000", "bushy2000"],
)
def test_large_trees_compile_and_match(parents):
    """The batch-last kernel against the per-state level passes (both checked against Pinocchio on
    the smaller trees above; Pinocchio's ``createData`` raises MemoryError at 1,500 joints)."""
    _, tree = model(parents)
    q, qd, qdd = states(tree, 4)
    tau = batched_tau(tree, q, qd, qdd)
    one = jax.jit(lambda a, b, c: jb.inverse_dynamics(tree, a, b, c))
    assert rel(tau[:2], np.stack([one(q[i], qd[i], qdd[i]) for i in range(2)])) < RTOL


def test_forward_dynamics_batched_star():
    """``vmap`` of forward dynamics on the star (mass matrix by the wide CRBA pass, bias by the
    wide wrench pass): inverse dynamics of its result gives ``tau`` back, and it equals one state's."""
    _, tree = model(STAR)
    q, qd, tau = states(tree, 3)
    qdd = jax.jit(jax.vmap(lambda a, b, c: jb.forward_dynamics(tree, a, b, c)))(q, qd, tau)
    assert rel(batched_tau(tree, q, qd, qdd), tau) < 1e-9
    one = jax.jit(lambda a, b, c: jb.forward_dynamics(tree, a, b, c))(q[0], qd[0], tau[0])
    assert rel(qdd[0], one) < 1e-9
