"""SegmentTree construction, (de)serialisation and every bad model of API.md."""

import copy
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from tests._models import double_pendulum_dict, random_model_dict


def test_round_trip_dict_and_file(tmp_path):
    d = random_model_dict(np.random.default_rng(0), 7)
    tree = jb.SegmentTree.from_dict(d)
    assert tree.nq == 7 and tree.names == tuple(f"s{i}" for i in range(7))
    path = tmp_path / "m.json"
    jb.save_model(tree, path)
    saved = json.loads(path.read_text())
    assert saved["format"] == "jaxbio-model" and saved["version"] == 1
    back = jb.load_model(path)
    for a, b in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(back)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)
    assert back.parents == tree.parents and back.joint_types == tree.joint_types


def test_format_and_version_optional():
    d = double_pendulum_dict()
    del d["format"], d["version"]
    assert jb.SegmentTree.from_dict(d).nq == 2


def test_levels_follow_hierarchy():
    d = random_model_dict(np.random.default_rng(1), 12)
    tree = jb.SegmentTree.from_dict(d)
    for depth, members in enumerate(tree.levels):
        for i in members:
            p = tree.parents[i]
            assert (p == -1) if depth == 0 else (p in tree.levels[depth - 1])


def _bad(mutate):
    d = copy.deepcopy(double_pendulum_dict())
    mutate(d)
    return d


def _seg(d, i=1):
    return d["segments"][i]


BAD = {
    "unknown parent": (lambda d: _seg(d).update(parent="nope"), ["rod2", "parent", "nope"]),
    "parent after child": (
        lambda d: d["segments"].reverse(),
        ["rod2", "parent", "after"],
    ),
    "unknown joint type": (lambda d: _seg(d)["joint"].update(type="ball"), ["rod2", "joint.type", "ball"]),
    "zero axis": (lambda d: _seg(d)["joint"].update(axis=[0, 0, 0]), ["rod2", "joint.axis", "zero"]),
    "nan axis": (lambda d: _seg(d)["joint"].update(axis=[0, float("nan"), 1]), ["rod2", "joint.axis", "NaN"]),
    "non-unit quaternion": (
        lambda d: _seg(d)["joint"].update(orientation=[1, 0.01, 0, 0]),
        ["rod2", "joint.orientation", "unit quaternion"],
    ),
    "zero mass": (lambda d: _seg(d).update(mass=0.0), ["rod2", "mass"]),
    "negative mass": (lambda d: _seg(d).update(mass=-1.0), ["rod2", "mass"]),
    "inf mass": (lambda d: _seg(d).update(mass=float("inf")), ["rod2", "mass"]),
    "asymmetric inertia": (
        lambda d: _seg(d).update(inertia=[[1, 0.5, 0], [0, 1, 0], [0, 0, 1]]),
        ["rod2", "inertia", "symmetric"],
    ),
    "indefinite inertia": (
        lambda d: _seg(d).update(inertia=[[1, 0, 0], [0, -1, 0], [0, 0, 1]]),
        ["rod2", "inertia", "positive-definite"],
    ),
    "triangle inequality": (
        lambda d: _seg(d).update(inertia=[[1, 0, 0], [0, 1, 0], [0, 0, 3]]),
        ["rod2", "inertia", "triangle"],
    ),
    "com shape": (lambda d: _seg(d).update(com=[0, 1]), ["rod2", "com", "shape"]),
    "inertia shape": (lambda d: _seg(d).update(inertia=[1, 1, 1]), ["rod2", "inertia", "shape"]),
    "origin shape": (lambda d: _seg(d)["joint"].update(origin=[0, 0, 0, 0]), ["rod2", "joint.origin", "shape"]),
    "duplicate name": (lambda d: _seg(d).update(name="rod1", parent=None), ["rod1", "duplicate"]),
    "missing mass": (lambda d: _seg(d).pop("mass"), ["rod2", "mass", "missing"]),
    "gravity shape": (lambda d: d.update(gravity=[0, -9.81]), ["gravity", "shape"]),
    "bad format": (lambda d: d.update(format="urdf"), ["format"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_models_raise_naming_segment_and_field(case, tmp_path):
    mutate, words = BAD[case]
    d = _bad(mutate)
    with pytest.raises(ValueError) as err:
        jb.SegmentTree.from_dict(d)
    for w in words:
        assert w in str(err.value), (case, str(err.value))
    # and through the file loader, which also names the file
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d, allow_nan=True))
    with pytest.raises(ValueError, match="bad.json"):
        jb.load_model(path)


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(ValueError, match="no such model file"):
        jb.load_model(tmp_path / "absent.json")
    p = tmp_path / "broken.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        jb.load_model(p)
    with pytest.raises(ValueError, match="no shipped model"):
        jb.load_model("no_such_model")


def test_state_shapes_checked_before_tracing():
    tree = jb.SegmentTree.from_dict(double_pendulum_dict())
    z = jnp.zeros(2)
    with pytest.raises(ValueError, match=r"q has shape \(3,\), expected \(2,\).*rod1, rod2"):
        jb.inverse_dynamics(tree, jnp.zeros(3), z, z)
    with pytest.raises(ValueError, match="qd has shape"):
        jax.jit(jb.inverse_dynamics)(tree, z, jnp.zeros((2, 1)), z)
    with pytest.raises(ValueError, match="tau has shape"):
        jb.forward_dynamics(tree, z, z, jnp.zeros(4))
    with pytest.raises(ValueError, match="external forces has shape"):
        jb.inverse_dynamics(tree, z, z, z, external=(jnp.zeros((3, 3)), jnp.zeros((2, 3))))
    with pytest.raises(ValueError, match="external must be a pair"):
        jb.inverse_dynamics(tree, z, z, z, external=jnp.zeros((2, 3)))
    # batches are the caller's vmap; a batched q without vmap is refused, not broadcast
    with pytest.raises(ValueError, match="batch with jax.vmap"):
        jb.mass_matrix(tree, jnp.zeros((5, 2)))


def test_nan_inputs_caught_when_checking():
    tree = jb.SegmentTree.from_dict(double_pendulum_dict())
    z = jnp.zeros(2)
    bad = jnp.array([0.1, jnp.nan])
    # unchecked: NaN propagates (never a plausible number)
    assert np.all(np.isnan(np.asarray(jb.inverse_dynamics(tree, bad, z, z))))
    f = jax.jit(lambda q: jb.inverse_dynamics(tree, q, z, z, check=True))
    with pytest.raises(Exception, match="q contains NaN or inf"):
        jax.block_until_ready(f(bad))
    with pytest.raises(Exception, match="qdd contains NaN or inf"):
        jax.block_until_ready(jb.forward_dynamics(tree, z, z, z, check=True) + jb.inverse_dynamics(tree, z, z, jnp.array([jnp.inf, 0.0]), check=True))
    np.testing.assert_allclose(f(z), jb.inverse_dynamics(tree, z, z, z))


def test_constructor_checks_shapes():
    tree = jb.SegmentTree.from_dict(double_pendulum_dict())
    with pytest.raises(ValueError, match="masses has shape"):
        jb.SegmentTree(
            axes=tree.axes, origins=tree.origins, orientations=tree.orientations, masses=jnp.ones(3),
            coms=tree.coms, inertias=tree.inertias, gravity=tree.gravity, names=tree.names,
            parents=tree.parents, joint_types=tree.joint_types,
        )
