"""`jb.io.to_mjcf` against MuJoCo itself: the exported model compiled by MuJoCo, its inverse
dynamics (``mj_inverse``, MuJoCo's own recursion) on the translated state, translated back, equals
`jb.inverse_dynamics` — on every shipped model, the whole body written as hinge chains (merged
massless links), and random trees with every joint type; the state and force translations under
jit and vmap; bad input refused."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.io import from_mujoco_force, to_mjcf, to_mujoco_state
from jaxbio.io._mjcf import _merges
from jaxbio.model import model_path
from tests._models import hinge_chains, random_mixed_state, random_mixed_tree_dict

mujoco = pytest.importorskip("mujoco")

TOL = 1e-10  # relative to max(1, max |τ|): float64, MuJoCo's diagonalised inertia


inverse_dynamics = jax.jit(jb.inverse_dynamics)
to_state = jax.jit(to_mujoco_state)
from_force = jax.jit(from_mujoco_force)


def mujoco_inverse(tree, model, q, v, vdot):
    data = mujoco.MjData(model)
    qpos, qvel, qacc = (np.asarray(x) for x in to_state(tree, q, v, vdot))
    data.qpos[:], data.qvel[:], data.qacc[:] = qpos, qvel, qacc
    mujoco.mj_inverse(model, data)
    return np.asarray(from_force(tree, q, data.qfrc_inverse.copy()))


def check_against_mujoco(tree, states):
    model = mujoco.MjModel.from_xml_string(to_mjcf(tree))
    assert (model.nq, model.nv) == (tree.nq, tree.nv)
    for q, v, vdot in states:
        tau = np.asarray(inverse_dynamics(tree, q, v, vdot))
        tau_mj = mujoco_inverse(tree, model, q, v, vdot)
        np.testing.assert_allclose(tau_mj, tau, rtol=0, atol=TOL * max(1.0, np.abs(tau).max()))


def random_states(tree, n, seed):
    keys = jax.random.split(jax.random.PRNGKey(seed), 3 * n).reshape(n, 3, -1)
    return [
        (
            jb.configuration.random(tree, k[0]),
            2 * jax.random.normal(k[1], (tree.nv,)),
            5 * jax.random.normal(k[2], (tree.nv,)),
        )
        for k in keys
    ]


@pytest.mark.parametrize(
    "name",
    ["arm7", "wholebody", "sagittal11"]
    + [pytest.param(n, marks=pytest.mark.slow) for n in ("double_pendulum", "arm26")],
)
def test_shipped_models_match_mujoco(name):
    tree = jb.load_model(name, dtype=jnp.float64).tree
    check_against_mujoco(tree, random_states(tree, 4, seed=1))


def test_hinge_chains_become_one_body_with_several_joints():
    """The whole body with every ball and free joint as a chain of massless hinges and slides:
    each chain is one MuJoCo body (MuJoCo refuses massless moving bodies), same dynamics."""
    d = json.loads(model_path("wholebody").read_text())
    tree = jb.SegmentTree.from_dict(hinge_chains(d), dtype=jnp.float64)
    model = mujoco.MjModel.from_xml_string(to_mjcf(tree))
    assert model.nbody - 1 == len(d["segments"])  # one body per original segment
    check_against_mujoco(tree, random_states(tree, 4, seed=2))


SEEDS = range(5)


@functools.cache
def random_tree(seed):
    """A random tree (every joint type, turned joint frames, massless frames, random gravity), its
    three random states, and whether it has a massless moving segment that cannot be merged."""
    rng = np.random.default_rng(seed)
    d = random_mixed_tree_dict(rng, 9, p_rod=0.0)
    tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    arr = {k: np.asarray(getattr(tree, k)) for k in ("masses", "inertias")}
    merged = {_merges(tree, arr, i) for i in range(tree.n_segments)} - {None}
    stuck = any(
        arr["masses"][i] == 0 and tree.joint_types[i] != "fixed" and i not in merged and _merges(tree, arr, i) is None
        for i in range(tree.n_segments)
    )
    states = [(s["q"], s["qd"], s["qdd"]) for s in (random_mixed_state(rng, d) for _ in range(3))]
    return tree, states, stuck


# seed 1 has a massless moving segment that cannot be merged: the default run sees both branches
@pytest.mark.parametrize("seed", [s if s < 2 else pytest.param(s, marks=pytest.mark.slow) for s in SEEDS])
def test_random_trees_match_mujoco(seed):
    """A massless segment that moves and cannot be merged is refused by MuJoCo's compiler, as the
    docstring says; every tree MuJoCo accepts has jaxbio's dynamics."""
    tree, states, stuck = random_tree(seed)
    if stuck:
        with pytest.raises(ValueError, match="mass and inertia of moving bodies"):
            mujoco.MjModel.from_xml_string(to_mjcf(tree))
    else:
        check_against_mujoco(tree, states)


@pytest.mark.slow
def test_most_random_trees_are_compared():
    """The random-tree test above must compare most trees, not refuse them all."""
    assert sum(not random_tree(seed)[2] for seed in SEEDS) >= 3


def test_translations_under_jit_and_vmap():
    tree = jb.load_model("wholebody", dtype=jnp.float64).tree
    states = random_states(tree, 5, seed=3)
    q, v, vdot = (jnp.stack(x) for x in zip(*states))
    batched = jax.jit(jax.vmap(lambda q, v, a: to_mujoco_state(tree, q, v, a)))(q, v, vdot)
    for k, s in enumerate(states):
        for got, want in zip(batched, to_mujoco_state(tree, *s)):
            np.testing.assert_allclose(got[k], want, rtol=1e-14, atol=1e-14)
    # the force translation is the transpose of the velocity translation (power is invariant)
    f = jax.random.normal(jax.random.PRNGKey(4), (5, tree.nv))
    back = jax.jit(jax.vmap(lambda q, f: from_mujoco_force(tree, q, f)))(q, f)
    _, qvel, _ = batched
    np.testing.assert_allclose(jnp.sum(back * v, axis=1), jnp.sum(f * qvel, axis=1), rtol=1e-13)
    # and under grad: d(f · qvel)/dv is the force translation (qvel is linear in v)
    g = jax.grad(lambda v: jnp.dot(f[0], to_mujoco_state(tree, q[0], v)[1]))(v[0])
    np.testing.assert_allclose(g, back[0], rtol=1e-13, atol=1e-13)


def test_exact_numbers_and_names():
    tree = jb.load_model("arm26", dtype=jnp.float64).tree
    xml = to_mjcf(tree)
    assert repr(float(tree.masses[-1])) in xml
    for name in tree.names:
        assert f'name="{name}"' in xml
    # arm7's shoulder: three hinges, one body named after the segment with the mass
    arm = mujoco.MjModel.from_xml_string(to_mjcf(jb.load_model("arm7", dtype=jnp.float64).tree))
    body = arm.body("upper_arm").id
    assert [arm.joint(j).name for j in range(arm.njnt) if arm.jnt_bodyid[j] == body] == [
        "shoulder_flexion",
        "shoulder_abduction",
        "upper_arm",
    ]


def test_bad_input_refused():
    d = random_mixed_tree_dict(np.random.default_rng(0), 6, free_root=False)
    d["segments"][3]["joint"] = {"type": "free", "origin": [0.0, 0.0, 0.0], "orientation": [1.0, 0.0, 0.0, 0.0]}
    d["segments"][3]["parent"] = d["segments"][0]["name"]
    nested = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    with pytest.raises(ValueError, match="free joint below segment"):
        to_mjcf(nested)
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    with pytest.raises(ValueError, match=r"q must have shape \(7,\)"):
        to_mujoco_state(tree, jnp.zeros((2, 7)))
    with pytest.raises(ValueError, match="vdot must have shape"):
        to_mujoco_state(tree, jnp.zeros(7), jnp.zeros(7), jnp.zeros(6))
    with pytest.raises(ValueError, match="qfrc"):
        from_mujoco_force(tree, jnp.zeros(7), jnp.zeros(8))
    with pytest.raises(TypeError, match="SegmentTree"):
        to_mjcf(d)


@pytest.mark.slow
def test_mjx_inverse_matches():
    """The same model on a device through MJX (`benchmarks/gpu.py`'s peer): ``mjx.inverse`` under
    jit and vmap, float64, equals jaxbio's inverse dynamics (free pelvis and ball joints)."""
    mjx = pytest.importorskip("mujoco.mjx")
    tree = jb.load_model("wholebody", dtype=jnp.float64).tree
    model = mjx.put_model(mujoco.MjModel.from_xml_string(to_mjcf(tree)))
    data = mjx.make_data(model)
    q, v, vdot = (jnp.stack(x) for x in zip(*random_states(tree, 4, seed=5)))
    qpos, qvel, qacc = jax.vmap(lambda q, v, a: to_mujoco_state(tree, q, v, a))(q, v, vdot)
    qfrc = jax.jit(jax.vmap(lambda p, w, a: mjx.inverse(model, data.replace(qpos=p, qvel=w, qacc=a)).qfrc_inverse))(
        qpos, qvel, qacc
    )
    tau_mjx = jax.vmap(lambda q, f: from_mujoco_force(tree, q, f))(q, qfrc)
    tau = jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0))(tree, q, v, vdot)
    np.testing.assert_allclose(tau_mjx, tau, rtol=0, atol=TOL * max(1.0, float(jnp.abs(tau).max())))
