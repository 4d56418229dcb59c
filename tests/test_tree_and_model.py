"""SegmentTree construction, (de)serialisation and every bad model of API.md."""

import copy
import json
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.model import model_path
from tests._models import double_pendulum_dict, random_model_dict


def test_round_trip_dict_and_file(tmp_path):
    d = random_model_dict(np.random.default_rng(0), 7)
    tree = jb.SegmentTree.from_dict(d)
    assert tree.nq == 7 and tree.names == tuple(f"s{i}" for i in range(7))
    path = tmp_path / "m.json"
    jb.save_model(tree, path)
    saved = json.loads(path.read_text())
    assert saved["format"] == "jaxbio-model" and saved["version"] == 1
    back = jb.load_model(path).tree
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
    "massless leaf with a DOF": (
        lambda d: _seg(d).update(mass=0.0, inertia=np.zeros((3, 3)).tolist()),
        ["rod2", "moves no mass or inertia", "singular"],
    ),
    "negative mass": (lambda d: _seg(d).update(mass=-1.0), ["rod2", "mass"]),
    "inf mass": (lambda d: _seg(d).update(mass=float("inf")), ["rod2", "mass"]),
    "asymmetric inertia": (
        lambda d: _seg(d).update(inertia=[[1, 0.5, 0], [0, 1, 0], [0, 0, 1]]),
        ["rod2", "inertia", "symmetric"],
    ),
    "indefinite inertia": (
        lambda d: _seg(d).update(inertia=[[1, 0, 0], [0, -1, 0], [0, 0, 1]]),
        ["rod2", "inertia", "positive semi-definite"],
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
    # strict schema: a misspelt optional field must not fall back to its default (#17, item 6)
    "misspelt joint.origin": (
        lambda d: _seg(d)["joint"].update(orgin=_seg(d)["joint"].pop("origin")),
        ["rod2", "unknown field 'joint.orgin'", "did you mean 'joint.origin'"],
    ),
    "misspelt joint.orientation": (
        lambda d: _seg(d)["joint"].update(orientaton=_seg(d)["joint"].pop("orientation")),
        ["rod2", "'joint.orientaton'", "did you mean 'joint.orientation'"],
    ),
    "unknown segment field": (lambda d: _seg(d).update(Mass=2.0), ["rod2", "'Mass'", "did you mean 'mass'"]),
    "unknown top-level field": (lambda d: d.update(gravty=[0, -9.81, 0]), ["'gravty'", "did you mean 'gravity'"]),
    "unrelated field, no hint": (lambda d: d.update(comment="x"), ["'comment'", "the fields are"]),
    # JSON types: no bool, string or null where a number is expected
    "bool mass": (lambda d: _seg(d).update(mass=True), ["rod2", "mass", "bool"]),
    "string mass": (lambda d: _seg(d).update(mass="1.5"), ["rod2", "mass", "str"]),
    "list mass": (lambda d: _seg(d).update(mass=[1.0]), ["rod2", "mass", "a number"]),
    "string vector": (lambda d: _seg(d).update(com="0 0 0"), ["rod2", "com", "str"]),
    "strings in a vector": (lambda d: _seg(d).update(com=["0", "0", "0"]), ["rod2", "com", "index 0", "str"]),
    "bool in a vector": (lambda d: _seg(d)["joint"].update(axis=[0, 0, True]), ["rod2", "joint.axis", "bool"]),
    "null vector": (lambda d: _seg(d)["joint"].update(origin=None), ["rod2", "joint.origin", "NoneType"]),
    "inertia one level too deep": (
        lambda d: _seg(d).update(inertia=[[[1], [0], [0]], [[0], [1], [0]], [[0], [0], [1]]]),
        ["rod2", "inertia", "shape"],
    ),
    "ragged inertia": (lambda d: _seg(d).update(inertia=[[1, 0, 0], [0, 1], [0, 0, 1]]), ["rod2", "inertia", "ragged"]),
    "integer beyond float64": (lambda d: _seg(d).update(mass=10**400), ["rod2", "mass", "too large"]),
    "nan in gravity": (lambda d: d.update(gravity=[0, float("nan"), 0]), ["gravity", "NaN"]),
    "parent not a string": (lambda d: _seg(d).update(parent=0), ["rod2", "parent", "int"]),
    "own parent": (lambda d: _seg(d).update(parent="rod2"), ["rod2", "own parent"]),
    "misspelt parent": (
        lambda d: _seg(d).update(parent="rod"),
        ["rod2", "unknown parent 'rod'", "did you mean 'rod1'"],
    ),
    "misspelt joint type": (
        lambda d: _seg(d)["joint"].update(type="revolut"),
        ["rod2", "joint.type", "did you mean 'revolute'"],
    ),
    "joint type not a string": (lambda d: _seg(d)["joint"].update(type=["revolute"]), ["rod2", "joint.type"]),
    "joint not an object": (lambda d: _seg(d).update(joint="revolute"), ["rod2", "joint", "object"]),
    "segment not an object": (lambda d: d["segments"].append(3), ["segments[2]", "not an object"]),
    "nameless segment": (lambda d: _seg(d).pop("name"), ["segments[1]", "missing field 'name'"]),
    "version true": (lambda d: d.update(version=True), ["version"]),
    "version 2": (lambda d: d.update(version=2), ["version"]),
    "name not a string": (lambda d: d.update(name=7), ["name", "string"]),
    "segments empty": (lambda d: d.update(segments=[]), ["segments", "non-empty"]),
    "segments an object": (lambda d: d.update(segments={"rod1": {}}), ["segments", "non-empty list"]),
    "huge axis": (lambda d: _seg(d)["joint"].update(axis=[0, 0, 1e300]), None),  # accepted: the direction
    "huge quaternion": (
        lambda d: _seg(d)["joint"].update(orientation=[1e308, 1e308, 0, 0]),
        ["rod2", "joint.orientation", "unit quaternion"],
    ),
    "huge inertia": (lambda d: _seg(d).update(inertia=(1e308 * np.diag([1.0, 1.0, 1.5])).tolist()), "inertia-ok"),
    "inertia 1e308 breaks the triangle": (
        lambda d: _seg(d).update(inertia=(1e308 * np.diag([0.5, 0.5, 1.5])).tolist()),
        ["rod2", "triangle inequality"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_models_raise_naming_segment_and_field(case, tmp_path):
    mutate, words = BAD[case]
    d = _bad(mutate)
    if words is None:  # a model that looks odd but is valid
        np.testing.assert_array_equal(jb.SegmentTree.from_dict(d).axes[1], [0, 0, 1])
        return
    if words == "inertia-ok":  # valid in float64 (exactly the input), overflows float32
        np.testing.assert_array_equal(jb.SegmentTree.from_dict(d, dtype=jnp.float64).inertias[1], _seg(d)["inertia"])
        with pytest.raises(ValueError, match="'rod2': inertia overflows float32"):
            jb.SegmentTree.from_dict(d, dtype=jnp.float32)
        return
    with pytest.raises(ValueError) as err:
        jb.SegmentTree.from_dict(d)
    for w in words:
        assert w in str(err.value), (case, str(err.value))
    # and through the file loader, which also names the file
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d, allow_nan=True))
    with pytest.raises(ValueError, match="bad.json") as err_file:
        jb.load_model(path)
    assert str(err_file.value) == f"{path}: {err.value}"


def _shipped_dict(name):
    return json.loads(model_path(name).read_text())


def test_singular_mass_matrix_check_is_scale_free_and_sees_rounding_noise():
    """The loader's check of M (it runs only when a segment is massless or has a singular inertia,
    as arm7 and sagittal11 with their massless virtual links): it is not fooled by a model whose
    segments are far apart in scale, by rounding noise on a dead coordinate, or by overflow."""
    # sagittal11 with a 1e5 × heavier HAT, or a 14 mg toe: regular, accepted (the check compared
    # M's smallest eigenvalue with its largest before and refused both)
    for segment, factor in (("trunk", 1e5), ("toes_r", 1e-4)):
        d = _shipped_dict("sagittal11")
        s = next(x for x in d["segments"] if x["name"] == segment)
        s["mass"] *= factor
        s["inertia"] = [[v * factor for v in row] for row in s["inertia"]]
        jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    # a slender rod (no inertia about its axis, COM on it) spinning about its own oblique axis:
    # M's entry is rounding noise (± 1e-17), not 0, and the coordinate still moves nothing
    u = np.array([0.6, -0.3, 0.742])
    u /= np.linalg.norm(u)
    d = _bad(lambda d: _seg(d).update(com=(0.2 * u).tolist(), inertia=(0.05 * (np.eye(3) - np.outer(u, u))).tolist()))
    _seg(d)["joint"]["axis"] = u.tolist()
    with pytest.raises(ValueError, match="'rod2' .*moves no mass or inertia.*singular"):
        jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    # a COM 1e200 m away overflows M (float64): undecided, so accepted as the schema allows, not a crash
    d = _shipped_dict("sagittal11")
    d["segments"][-1]["com"] = [1e200, 0.0, 0.0]
    jb.SegmentTree.from_dict(d, dtype=jnp.float64)


def test_misspelt_origin_is_not_the_default():
    """#17 item 6: ``"orgin"`` used to be ignored and the origin became (0, 0, 0)."""
    d = double_pendulum_dict()
    d["segments"][1]["joint"]["orgin"] = d["segments"][1]["joint"].pop("origin")
    with pytest.raises(
        ValueError, match=r"segment 'rod2': unknown field 'joint.orgin' \(did you mean 'joint.origin'\?\)"
    ):
        jb.SegmentTree.from_dict(d)


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", ["empty file"]),
        (b"  \n\t\n", ["empty file"]),
        (b'{"name": "caf\xe9"}', ["not UTF-8", "0xe9", "line 1"]),
        (b"\n\n{,}", ["not valid JSON", "line 3"]),
        (b"[1, 2, 3]", ["expected a JSON object", "list"]),
        (b'"arm7"', ["expected a JSON object", "str"]),
        (b"null", ["expected a JSON object", "NoneType"]),
        (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
        (b'{"gravity": [0, 0, -9.81],\n "gravity": [0, 0, 0], "segments": []}', ["duplicate key 'gravity'", "line 1"]),
        (b"{}", ["missing field 'gravity'"]),
        (b'{"gravity": [0, NaN, 0], "segments": []}', ["gravity", "NaN"]),
        (b'{"gravity": [0, -Infinity, 0], "segments": []}', ["gravity", "inf"]),
        (b'{"gravity": [0, 1e999, 0], "segments": []}', ["gravity", "inf"]),
    ],
)
def test_unreadable_model_files_name_the_file(tmp_path, data, words):
    path = _write(tmp_path, "m.json", data)
    with pytest.raises(ValueError) as err:
        jb.load_model(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: "), msg
    for w in words:
        assert w in msg, msg


def test_duplicate_key_in_a_segment_names_its_line(tmp_path):
    d = double_pendulum_dict()
    text = json.dumps(d, indent=1).replace('"mass": 1.0,', '"mass": 1.0, "mass": 100.0,', 1)
    path = _write(tmp_path, "dup.json", text.encode())
    brace = text.rfind("{", 0, text.index('"name": "rod1"'))  # the first segment's object
    line = text.count("\n", 0, brace) + 1
    with pytest.raises(ValueError, match=rf"duplicate key 'mass' in the JSON object starting at line {line} "):
        jb.load_model(path)


def test_paths_that_are_not_model_files(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=rf"^{tmp_path}: is a directory"):
        jb.load_model(tmp_path)
    with pytest.raises(ValueError, match="model path is empty"):
        jb.load_model("")
    with pytest.raises(ValueError, match="must be a str or os.PathLike"):
        jb.load_model(None)
    with pytest.raises(ValueError, match="not a usable file path"):
        jb.load_model("a\0b.json")
    path = _write(tmp_path, "locked.json", json.dumps(double_pendulum_dict()).encode())

    real_open = os.open

    def refuse(file, *args, **kwargs):
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)  # chmod does not stop root; jaxbio._files.read_bytes opens with os.open
    with pytest.raises(ValueError, match=rf"^{path}: permission denied"):
        jb.load_model(path)


def test_utf8_bom_is_accepted(tmp_path):
    path = _write(tmp_path, "bom.json", b"\xef\xbb\xbf" + json.dumps(double_pendulum_dict()).encode())
    assert jb.load_model(path).tree.nq == 2


# ---- the dtype cast (#17 item 8): validation after the cast ----------------------------------


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int64, jnp.uint8, bool, jnp.complex64, complex, "int32", object])
def test_non_floating_dtypes_refused(dtype):
    with pytest.raises(ValueError, match="dtype must be a floating-point dtype"):
        jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=dtype)
    with pytest.raises(ValueError, match="^dtype must be a floating-point dtype"):  # not the file's fault
        jb.load_model("double_pendulum", dtype=dtype)
    with pytest.raises(ValueError, match="dtype must be a floating-point dtype"):
        jb.load_model("double_pendulum").tree.astype(dtype)


def test_not_a_dtype():
    with pytest.raises(ValueError, match="'float33' is not a dtype"):
        jb.SegmentTree.from_dict(double_pendulum_dict(), dtype="float33")


@pytest.mark.parametrize("name", jb.shipped_models())
@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32])
def test_shipped_models_load_in_narrow_floats(name, dtype):
    t64 = jb.load_model(name, dtype=jnp.float64).tree
    t = jb.load_model(name, dtype=dtype).tree
    for field in t.leaf_shapes:
        a = getattr(t, field)
        assert a.dtype == dtype and np.all(np.isfinite(np.asarray(a, float)))
        np.testing.assert_array_equal(a, getattr(t64, field).astype(dtype))


@pytest.mark.parametrize(
    ("mutate", "dtype", "words"),
    [
        (lambda d: _seg(d).update(mass=1e300), jnp.float32, ["rod2", "mass overflows float32"]),
        (lambda d: _seg(d).update(mass=1e-300), jnp.float32, ["rod2", "mass underflows in float32", "becomes 0.0 kg"]),
        (lambda d: _seg(d).update(mass=1e-40), jnp.float32, ["rod2", "mass underflows in float32"]),  # subnormal
        (lambda d: _seg(d).update(mass=1e5), jnp.float16, ["rod2", "mass overflows float16"]),
        (lambda d: _seg(d).update(mass=1e-310), jnp.float64, ["rod2", "mass underflows in float64"]),
        (lambda d: d.update(gravity=[0, -1e39, 0]), jnp.float32, ["gravity overflows float32"]),
        (lambda d: _seg(d).update(com=[0, 1e40, 0]), jnp.float32, ["rod2", "com overflows"]),
        (
            lambda d: _seg(d)["joint"].update(origin=[0, 7e4, 0]),
            jnp.float16,
            ["rod2", "joint.origin overflows float16"],
        ),
        (
            lambda d: _seg(d).update(inertia=np.diag([1e-50, 1e-50, 1e-50]).tolist()),
            jnp.float32,
            ["rod2", "after the cast to float32", "not positive-definite"],
        ),
        (
            lambda d: _seg(d).update(inertia=np.diag([1.0, 1.0, 1e-9]).tolist()),
            jnp.float16,
            ["rod2", "after the cast to float16", "not positive-definite"],
        ),
        (
            lambda d: _seg(d).update(inertia=np.diag([1e39, 1e39, 1e39]).tolist()),
            jnp.float32,
            ["rod2", "inertia overflows"],
        ),
    ],
)
def test_values_spoilt_by_the_cast_are_refused(mutate, dtype, words):
    d = _bad(mutate)
    if dtype != jnp.float64:
        jb.SegmentTree.from_dict(d, dtype=jnp.float64)  # fine in float64: the cast spoils it
    with pytest.raises(ValueError) as err:
        jb.SegmentTree.from_dict(d, dtype=dtype)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_astype_refuses_what_the_cast_breaks_only():
    tree = jb.SegmentTree.from_dict(_bad(lambda d: _seg(d).update(mass=1e-40)), dtype=jnp.float64)
    with pytest.raises(ValueError, match="'rod2': mass underflows in float32"):
        tree.astype(jnp.float32)
    assert tree.astype(jnp.float64).masses[1] == 1e-40
    # a tree built directly (no from_dict) with a semi-definite inertia: the cast breaks nothing
    rod = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    flat = eqx.tree_at(lambda t: t.inertias, rod, rod.inertias.at[:, 1, 1].set(0.0))
    assert flat.astype(jnp.float32).inertias.dtype == jnp.float32
    with pytest.raises(ValueError, match="masses and inertias do not survive"):
        rod.astype(jnp.int32)


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
    # eager: refused before tracing; traced and unchecked: NaN propagates (never a plausible number)
    with pytest.raises(ValueError, match="q contains NaN or inf"):
        jb.inverse_dynamics(tree, bad, z, z)
    assert np.all(np.isnan(np.asarray(jax.jit(lambda q: jb.inverse_dynamics(tree, q, z, z))(bad))))
    f = jax.jit(lambda q: jb.inverse_dynamics(tree, q, z, z, check=True))
    with pytest.raises(Exception, match="q contains NaN or inf"):
        jax.block_until_ready(f(bad))
    with pytest.raises(Exception, match="qdd contains NaN or inf"):
        jax.block_until_ready(
            jb.forward_dynamics(tree, z, z, z, check=True)
            + jb.inverse_dynamics(tree, z, z, jnp.array([jnp.inf, 0.0]), check=True)
        )
    np.testing.assert_allclose(f(z), jb.inverse_dynamics(tree, z, z, z))


def test_constructor_checks_shapes():
    tree = jb.SegmentTree.from_dict(double_pendulum_dict())
    with pytest.raises(ValueError, match="masses has shape"):
        jb.SegmentTree(
            axes=tree.axes,
            origins=tree.origins,
            orientations=tree.orientations,
            masses=jnp.ones(3),
            coms=tree.coms,
            inertias=tree.inertias,
            gravity=tree.gravity,
            names=tree.names,
            parents=tree.parents,
            joint_types=tree.joint_types,
        )


# ---- a batch of models is not one model (#17 item 7) -------------------------------------------


def _entry_points():
    """Every public function of one model, called on (tree, q) (name, call)."""
    from jaxbio.dynamics import absolute, contact

    def z(tree):
        return jnp.zeros(tree.nq)

    ext = lambda t: (jnp.zeros((t.nq, 3)), jnp.zeros((t.nq, 3)))  # noqa: E731
    return {
        "inverse_dynamics": lambda t, q: jb.inverse_dynamics(t, q, z(t), z(t)),
        "inverse_dynamics(external)": lambda t, q: jb.inverse_dynamics(t, q, z(t), z(t), ext(t)),
        "segment_wrenches": lambda t, q: jb.segment_wrenches(t, q, z(t), z(t)),
        "mass_matrix": lambda t, q: jb.mass_matrix(t, q),
        "bias_forces": lambda t, q: jb.bias_forces(t, q, z(t)),
        "gravity_forces": lambda t, q: jb.gravity_forces(t, q),
        "forward_dynamics": lambda t, q: jb.forward_dynamics(t, q, z(t), z(t)),
        "kinetic_energy": lambda t, q: jb.kinetic_energy(t, q, z(t) + 1.0),
        "potential_energy": lambda t, q: jb.potential_energy(t, q),
        "center_of_mass": lambda t, q: jb.center_of_mass(t, q),
        "kinetic_energy_gradient": lambda t, q: jb.dynamics.kinetic_energy_gradient(t, q, z(t) + 1.0),
        "forward_kinematics": lambda t, q: jb.forward_kinematics(t, q),
        "segment_motion": lambda t, q: jb.dynamics.segment_motion(t, q).position,
        "point_jacobian": lambda t, q: jb.dynamics.point_jacobian(t, q, "rod2", jnp.zeros(3)),
        "com_jacobians": lambda t, q: jb.dynamics.com_jacobians(t, q)[0],
        "point_loads": lambda t, q: jb.dynamics.point_loads(t, q, ["rod2"], jnp.zeros((1, 3)), jnp.ones((1, 3))),
        "contact_jacobian": lambda t, q: contact.contact_jacobian(t, q, (jb.dynamics.Contact("rod2"),)),
        "contact_external": lambda t, q: contact.contact_external(
            t, q, (jb.dynamics.Contact("rod2"),), jnp.ones((1, 3))
        ),
        "absolute_coordinates": lambda t, q: absolute.absolute_coordinates(t, q),
        "mass_diagonal": lambda t, q: absolute.mass_diagonal(t),
    }


ENTRY_POINTS = _entry_points()


def _two_models():
    return [
        jb.SegmentTree.from_dict(double_pendulum_dict(m1=m1, l1=l1), dtype=jnp.float64)
        for m1, l1 in ((1.0, 1.0), (3.0, 0.7))
    ]


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("batch", ["stacked", "vmap-out", "two axes", "masses only"])
def test_batched_tree_refused_outside_vmap(name, batch):
    """#17 item 7: a tree with a batch axis used to give one plausible (n, n) answer."""
    a, b = _two_models()
    if batch == "stacked":
        tree = jax.tree.map(lambda x, y: jnp.stack([x, y]), a, b)
    elif batch == "vmap-out":
        tree = jax.vmap(lambda m: eqx.tree_at(lambda t: t.masses, a, a.masses * m))(jnp.array([1.0, 2.0]))
    elif batch == "two axes":
        tree = jax.tree.map(lambda x: jnp.broadcast_to(x, (2, 3) + x.shape), a)
    else:
        tree = eqx.tree_at(lambda t: t.masses, a, jnp.stack([a.masses, b.masses]))
    f = ENTRY_POINTS[name]
    q = jnp.array([0.3, -0.2])
    with pytest.raises(ValueError, match=r"tree has a batch axis.*use jax\.vmap\(\.\.\., in_axes=\(0, \.\.\.\)\)"):
        f(tree, q)
    with pytest.raises(ValueError, match="tree has a batch axis"):
        jax.jit(f)(tree, q)


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_batched_tree_passes_under_vmap(name):
    """Inside jax.vmap each model is unbatched: the check must not fire (traced only, no compile)."""
    a, b = _two_models()
    stacked = jax.tree.map(lambda x, y: jnp.stack([x, y]), a, b)
    f = ENTRY_POINTS[name]
    out = jax.eval_shape(jax.vmap(f, in_axes=(0, None)), stacked, jnp.zeros(2))
    want = jax.eval_shape(f, a, jnp.zeros(2))
    assert [o.shape for o in jax.tree.leaves(out)] == [(2,) + w.shape for w in jax.tree.leaves(want)]


@pytest.mark.parametrize(
    "name",
    [
        "mass_matrix",
        "inverse_dynamics",
        "forward_kinematics",
        pytest.param("absolute_coordinates", marks=pytest.mark.slow),
    ],
)
def test_batched_tree_under_vmap_is_each_model(name):
    a, b = _two_models()
    stacked = jax.tree.map(lambda x, y: jnp.stack([x, y]), a, b)
    f = ENTRY_POINTS[name]
    q = jnp.array([0.3, -0.2])
    out = jax.vmap(f, in_axes=(0, None))(stacked, q)
    for k, tree in enumerate((a, b)):
        for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(f(tree, q))):
            np.testing.assert_allclose(got[k], want, rtol=1e-12, atol=1e-12)


def test_check_unbatched_messages():
    a, _ = _two_models()
    assert a.check_unbatched() is a
    stacked = jax.tree.map(lambda x: jnp.stack([x, x, x]), a)
    with pytest.raises(
        ValueError,
        match=r"'double_pendulum_test'\.axes has shape \(3, 2, 3\), one model's is \(2, 3\) \(batch shape \(3,\)\)",
    ):
        stacked.check_unbatched()
    with pytest.raises(ValueError, match="tree has a batch axis"):
        stacked.to_dict()
    wrong = jax.tree.map(lambda x: x[..., :1], a)  # not a batch: a wrong shape
    with pytest.raises(ValueError, match=r"SegmentTree\.axes has shape \(2, 1\), expected \(2, 3\)"):
        jb.mass_matrix(wrong, jnp.zeros(2))


# ---- save_model writes only what load_model reads, and never half a file ---------------------


def test_save_model_refuses_a_tree_it_could_not_read_back(tmp_path):
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    path = tmp_path / "m.json"
    jb.save_model(tree, path)
    before = path.read_bytes()
    bad = eqx.tree_at(lambda t: t.masses, tree, tree.masses.at[1].set(jnp.nan))
    with pytest.raises(ValueError, match="segment 'rod2': mass"):
        jb.save_model(bad, path)
    assert path.read_bytes() == before  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # no temporary file left


def test_save_model_is_atomic(tmp_path, monkeypatch):
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    path = tmp_path / "m.json"
    jb.save_model(tree, path)
    path.chmod(0o640)
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("jaxbio._files.os.replace", crash)
    with pytest.raises(OSError, match="No space left"):
        jb.save_model(jb.SegmentTree.from_dict(double_pendulum_dict(m1=2.0)), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
    monkeypatch.undo()
    jb.save_model(jb.SegmentTree.from_dict(double_pendulum_dict(m1=2.0)), path)
    assert (path.stat().st_mode & 0o777) == 0o640  # permissions kept
    assert jb.load_model(path).tree.masses[0] == 2.0
    with pytest.raises(ValueError, match="is a directory"):
        jb.save_model(tree, tmp_path)
