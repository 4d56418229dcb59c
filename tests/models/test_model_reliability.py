"""Property tests of model loading (#17): no malformed model becomes a plausible tree.

Start from a valid shipped model dict (jaxbio/models/*.json, read with json only), mutate it
(delete, rename, misspell or add fields; replace values with wrong types, shapes, NaN, inf, huge,
tiny or negative numbers; reorder segments; duplicate names) and check the contract: either a
``ValueError`` naming where (the model or a segment) and what (a field), or a tree whose arrays are
exactly the input values cast to the dtype, all finite. The expected arrays are computed here from
the dict, with a schema of our own, not the loader's.
"""

from __future__ import annotations

import copy
import json
import math
import re

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import jaxbio as jb
from tests._models import REPO

MODELS = {p.stem: json.loads(p.read_text()) for p in sorted((REPO / "jaxbio" / "models").glob("*.json"))}
SMALL = tuple(MODELS)  # every shipped model (validation is numpy: fast)

# the schema of API.md, written out here (independent of jaxbio._validate)
TOP = {"format", "version", "name", "gravity", "segments"}
SEGMENT = {"name", "parent", "joint", "mass", "com", "inertia"}
JOINT = {"type", "axis", "origin", "orientation"}
FIELD_WORDS = ("format", "version", "name", "gravity", "segments", "parent", "joint", "mass", "com", "inertia", "dtype")
FLOATS = {"float64": jnp.float64, "float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- what an accepted dict must give, computed independently ------------------------------------


class Invalid(Exception):
    """The dict breaks the schema of API.md (so the loader must have refused it)."""


def _number(x) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise Invalid(f"not a number: {x!r}")
    try:
        return float(x)
    except OverflowError:  # an int beyond float64
        raise Invalid("too large") from None


def _array(x, shape) -> np.ndarray:
    def walk(v, sh):
        if not sh:
            return _number(v)
        if not isinstance(v, list) or len(v) != sh[0]:
            raise Invalid(f"wrong shape: {v!r}")
        return [walk(e, sh[1:]) for e in v]

    a = np.array(walk(x, shape), dtype=float)
    if not np.all(np.isfinite(a)):
        raise Invalid("NaN or inf")
    return a


def expected_tree(d: dict, dtype) -> dict:
    """The arrays ``from_dict(d, dtype)`` must return if ``d`` is valid, else `Invalid`."""
    if not isinstance(d, dict) or not set(d) <= TOP or not {"gravity", "segments"} <= set(d):
        raise Invalid("top level")
    if d.get("format", "jaxbio-model") != "jaxbio-model" or not isinstance(d.get("format", ""), str):
        raise Invalid("format")
    if type(d.get("version", 1)) is not int or d.get("version", 1) != 1:
        raise Invalid("version")
    if not isinstance(d.get("name", "model"), str) or not d.get("name", "model"):
        raise Invalid("name")
    segs = d["segments"]
    if not isinstance(segs, list) or not segs:
        raise Invalid("segments")
    out = {k: [] for k in ("axes", "origins", "orientations", "masses", "coms", "inertias")}
    names, parents = [], []
    for s in segs:
        if not isinstance(s, dict) or set(s) != SEGMENT:
            raise Invalid("segment fields")
        j = s["joint"]
        if not isinstance(j, dict) or not set(j) <= JOINT or "type" not in j:
            raise Invalid("joint fields")
        if not isinstance(s["name"], str) or not s["name"] or s["name"] in names:
            raise Invalid("name")
        p = s["parent"]
        if p is not None and (not isinstance(p, str) or p not in names):
            raise Invalid("parent")
        if j["type"] not in ("revolute", "prismatic", "spherical", "free", "fixed"):
            raise Invalid("joint type")
        if ("axis" in j) != (j["type"] in ("revolute", "prismatic")):
            raise Invalid("axis present exactly on revolute and prismatic joints")
        axis = _array(j["axis"], (3,)) if "axis" in j else np.array([1.0, 0.0, 0.0])
        if np.max(np.abs(axis)) > 1e150:
            axis = axis / np.max(np.abs(axis))
        if np.linalg.norm(axis) < 1e-12:
            raise Invalid("zero axis")
        if "axis" not in j:
            axis = np.zeros(3)
        quat = _array(j.get("orientation", [1, 0, 0, 0]), (4,))
        big = np.max(np.abs(quat))
        if big == 0 or not abs(big * np.linalg.norm(quat / big) - 1) <= 1e-6:  # no overflow at 1e200
            raise Invalid("quaternion")
        mass = _number(s["mass"])
        if not (math.isfinite(mass) and mass >= 0):
            raise Invalid("mass")
        inertia = _array(s["inertia"], (3, 3))
        unit = inertia / max(np.max(np.abs(inertia)), 1e-300)  # scale-free (1e300 entries)
        e = np.linalg.eigvalsh(0.5 * (unit + unit.T))
        # positive semi-definite (zero, a rod) with the triangle inequality
        if not np.allclose(unit, unit.T, rtol=0, atol=1e-9) or e[0] < -1e-9 * e[2] or e[2] > e[0] + e[1] + 1e-9 * e[2]:
            raise Invalid("inertia")
        names.append(s["name"])
        parents.append(-1 if p is None else names.index(p))
        out["axes"].append(axis / np.linalg.norm(axis) if "axis" in j else axis)  # zeros without an axis
        out["origins"].append(_array(j.get("origin", [0, 0, 0]), (3,)))
        out["orientations"].append(quat / np.linalg.norm(quat))
        out["masses"].append(mass)
        out["coms"].append(_array(s["com"], (3,)))
        out["inertias"].append(np.where(inertia == inertia.T, inertia, (inertia + inertia.T) / 2))
    arrays = {k: np.asarray(v, dtype=float) for k, v in out.items()}
    arrays["gravity"] = _array(d["gravity"], (3,))
    np_dtype = jnp.dtype(dtype)  # numpy's own for bfloat16 too (ml_dtypes)
    with np.errstate(over="ignore", under="ignore"):
        cast = {k: v.astype(np_dtype) for k, v in arrays.items()}
    c64 = {k: v.astype(float) for k, v in cast.items()}
    if not all(np.all(np.isfinite(v)) for v in c64.values()):
        raise Invalid("overflow in the cast")
    if np.any((arrays["masses"] > 0) & ~(c64["masses"] >= float(jnp.finfo(np_dtype).tiny))):
        raise Invalid("mass underflow in the cast")
    slack = max(1e-9, 16 * float(jnp.finfo(np_dtype).eps))

    def moments(inertia):
        return np.linalg.eigvalsh(inertia / np.max(np.abs(inertia))) if np.any(inertia) else np.zeros(3)

    for before, inertia in zip(arrays["inertias"], c64["inertias"]):
        e = moments(inertia)
        if e[0] < -slack * e[2] or e[2] > e[0] + e[1] + slack * e[2]:
            raise Invalid("inertia after the cast")
        if moments(before)[0] > 0 and not e[0] > 0:
            raise Invalid("a positive-definite inertia made singular by the cast")
    return {"arrays": cast, "names": tuple(names), "parents": tuple(parents)}


def _has_degenerate_segment(d: dict) -> bool:
    """A segment with mass 0 or a singular inertia: only then does the loader evaluate the mass
    matrix (API.md: a model whose mass matrix is singular in every configuration is refused)."""
    for s in d["segments"]:
        inertia = np.asarray(s["inertia"], float)
        scale = np.max(np.abs(inertia))
        if float(s["mass"]) == 0 or scale == 0 or np.linalg.eigvalsh(inertia / scale)[0] <= 1e-12:
            return True
    return False


def check_contract(d: dict, dtype=jnp.float64) -> str:
    """``from_dict(d, dtype)``: a located ValueError if the independent check says invalid, the
    exact (cast) arrays if valid. Returns "refused" or "accepted" (for `hypothesis.event`).

    The schema check here does not compute mass matrices, so a valid model refused because its
    mass matrix is singular at every sampled configuration is allowed when it has a massless
    segment or a singular inertia (the shipped arm7 and sagittal11 have massless virtual links):
    a scaled value can make it singular in float64 (a 1e12 × heavier HAT on sagittal11's massless
    base: I + m d² − m d² loses I). Such refusals are reported as "refused (singular M)"."""
    try:
        want = expected_tree(d, dtype)
    except Invalid:
        want = None
    try:
        tree = jb.SegmentTree.from_dict(d, dtype=dtype)
    except ValueError as e:
        msg = str(e)
        assert re.match(r"(segment '[^']*'|model '[^']*'|model:|dtype)", msg), msg
        assert any(w in msg for w in FIELD_WORDS), msg
        if want is not None and "mass matrix is singular" in msg:
            assert _has_degenerate_segment(d), f"refused a valid model whose bodies are all regular: {msg}"
            assert re.match(r"segment '([^']*)'", msg).group(1) in want["names"], msg
            return "refused (singular M)"
        assert want is None, f"refused a valid model: {msg}"
        return "refused"
    assert want is not None, "accepted a model that breaks the schema"
    assert tree.names == want["names"] and tree.parents == want["parents"]
    for field, expected in want["arrays"].items():
        got = np.asarray(getattr(tree, field))
        assert got.dtype == expected.dtype, field
        assert np.all(np.isfinite(got.astype(float))), field
        if field in ("axes", "orientations"):  # normalised: the same to the last bit or two
            np.testing.assert_allclose(
                got.astype(float),
                expected.astype(float),
                rtol=0,
                atol=2 * float(jnp.finfo(expected.dtype).eps),
                err_msg=field,
            )
        else:
            np.testing.assert_array_equal(got, expected, err_msg=field)
    assert np.all(np.asarray(tree.masses, float) >= 0)
    return "accepted"


# ---- mutations ----------------------------------------------------------------------------------


def _locations(d: dict) -> list[tuple]:
    """Paths to every value of the model: ("gravity",), ("segments", i, "mass"), ("segments", i, "joint", "axis") …"""
    locs = [(k,) for k in d]
    for i, s in enumerate(d["segments"]):
        locs += [("segments", i, k) for k in s]
        locs += [("segments", i, "joint", k) for k in s["joint"]]
    return locs


def _parent_of(d, path):
    obj = d
    for k in path[:-1]:
        obj = obj[k]
    return obj


BAD_VALUES = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            "",
            "1.0",
            "0 0 1",
            {},
            [],
            [[]],
            {"x": 1},
            "revolute",
            0,
            -1,
            1,
            float("nan"),
            float("inf"),
            -float("inf"),
            1e300,
            -1e300,
            1e-300,
            5e-324,
            10**400,
            [1.0, 2.0],
            [0.0, 0.0, 0.0],
            [1, 0, 0, 0],
            [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
            [[1, 0, 0], [0, 1, 0]],
            [[[1]]],
            [0, "0", 1],
            [0, None, 1],
            [True, 0, 0],
            [[1, 0, 0], [0, 1], [0, 0, 1]],
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=0, max_size=5),
    st.text(max_size=8),
)


def _misspell(draw, key: str) -> str:
    how = draw(st.sampled_from(["drop", "swap", "double", "upper", "space", "other"]))
    i = draw(st.integers(0, max(len(key) - 1, 0)))
    if how == "drop" and len(key) > 1:
        return key[:i] + key[i + 1 :]
    if how == "swap" and len(key) > 2:
        i = min(i, len(key) - 2)
        return key[:i] + key[i + 1] + key[i] + key[i + 2 :]
    if how == "double":
        return key[:i] + key[i] + key[i:]
    if how == "upper":
        return key.capitalize() if key != key.capitalize() else key.upper()
    if how == "space":
        return key + " "
    return draw(st.text(min_size=1, max_size=10))


@st.composite
def mutated(draw, names=SMALL):
    name = draw(st.sampled_from(names))
    d = copy.deepcopy(MODELS[name])
    kind = draw(
        st.sampled_from(
            ["delete", "rename", "add", "replace", "replace", "replace", "reorder", "duplicate name", "scale", "nest"]
        )
    )
    locs = _locations(d)
    if kind in ("delete", "rename", "replace", "nest"):
        path = draw(st.sampled_from(locs))
        obj = _parent_of(d, path)
        key = path[-1]
        if kind == "delete":
            del obj[key]
        elif kind == "rename":
            new = _misspell(draw, key)
            obj[new] = obj.pop(key)
        elif kind == "replace":
            obj[key] = draw(BAD_VALUES)
        else:  # one level of nesting too many or too few
            obj[key] = [obj[key]] if draw(st.booleans()) or not isinstance(obj[key], list) else obj[key][0]
    elif kind == "add":
        where = draw(st.sampled_from(["top", "segment", "joint"]))
        i = draw(st.integers(0, len(d["segments"]) - 1))
        obj = {"top": d, "segment": d["segments"][i], "joint": d["segments"][i]["joint"]}[where]
        allowed = {"top": TOP, "segment": SEGMENT, "joint": JOINT}[where]
        key = _misspell(draw, draw(st.sampled_from(sorted(allowed))))
        obj[key] = draw(st.one_of(BAD_VALUES, st.just([0.0, 0.0, 0.0])))
    elif kind == "reorder":
        d["segments"] = draw(st.permutations(d["segments"]))
    elif kind == "duplicate name":
        i, j = draw(st.integers(0, len(d["segments"]) - 1)), draw(st.integers(0, len(d["segments"]) - 1))
        d["segments"][i]["name"] = d["segments"][j]["name"]
    else:  # scale a numeric field by a power of ten (over/underflow in the target dtype)
        i = draw(st.integers(0, len(d["segments"]) - 1))
        s = d["segments"][i]
        f = float(f"1e{draw(st.integers(-320, 320))}")  # inf beyond 1e308
        field = draw(st.sampled_from(["mass", "com", "inertia", "origin", "gravity"]))
        if field == "mass":
            s["mass"] = s["mass"] * f
        elif field == "inertia":
            s["inertia"] = [[x * f for x in row] for row in s["inertia"]]
        elif field == "com":
            s["com"] = [x * f for x in s["com"]]
        elif field == "origin":
            s["joint"]["origin"] = [x * f for x in s["joint"]["origin"]]
        else:
            d["gravity"] = [x * f for x in d["gravity"]]
    return d


# ---- the properties -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("dtype", sorted(FLOATS))
def test_shipped_models_are_accepted_exactly(name, dtype):
    assert check_contract(copy.deepcopy(MODELS[name]), FLOATS[dtype]) == "accepted"


@SETTINGS
@given(d=mutated(), dtype=st.sampled_from(sorted(FLOATS)))
def test_mutated_model_refused_with_location_or_loaded_exactly(d, dtype):
    event(check_contract(d, FLOATS[dtype]))


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=mutated(), dtype=st.sampled_from(sorted(FLOATS)))
def test_mutated_model_many_examples_slow(d, dtype):
    event(check_contract(d, FLOATS[dtype]))


@SETTINGS
@given(d=mutated(), data=st.data())
def test_mutated_model_through_a_file(d, data, tmp_path_factory):
    """The same contract through load_model; every error starts with the file's path."""
    path = tmp_path_factory.mktemp("m") / "model.json"
    try:
        text = json.dumps(d, allow_nan=True)
    except (TypeError, ValueError):
        return
    path.write_text(text)
    back = json.loads(text)  # what the file holds (tuples become lists, etc.)
    try:
        expected_tree(back, jnp.float64)
        valid = True
    except Invalid:
        valid = False
    try:
        tree = jb.load_model(path, dtype=jnp.float64).tree
    except ValueError as e:
        assert str(e).startswith(f"{path}: "), str(e)
        if valid and "mass matrix is singular" in str(e):  # as in check_contract
            assert _has_degenerate_segment(back), str(e)
            return
        assert not valid, str(e)
        return
    assert valid
    assert check_contract(back, jnp.float64) == "accepted"
    assert tree.names == tuple(s["name"] for s in back["segments"])


@SETTINGS
@given(
    name=st.sampled_from(SMALL),
    segment=st.integers(0, 100),
    exponent=st.integers(-330, 330),
    field=st.sampled_from(["mass", "inertia", "com", "gravity"]),
    dtype=st.sampled_from(sorted(FLOATS)),
)
def test_dtype_casts_of_scaled_values(name, segment, exponent, field, dtype):
    """A value scaled by 10^k: refused (naming the field) exactly when the cast spoils it, else the cast value."""
    d = copy.deepcopy(MODELS[name])
    s = d["segments"][segment % len(d["segments"])]
    f = float(f"1e{exponent}")  # inf beyond 1e308
    if field == "mass":
        s["mass"] *= f
    elif field == "inertia":
        s["inertia"] = [[x * f for x in row] for row in s["inertia"]]
    elif field == "com":
        s["com"] = [x * f for x in s["com"]]
    else:
        d["gravity"] = [x * f for x in d["gravity"]]
    event(check_contract(d, FLOATS[dtype]))


NOT_FLOAT = st.sampled_from(
    [
        jnp.int8,
        jnp.int16,
        jnp.int32,
        jnp.int64,
        jnp.uint8,
        jnp.uint32,
        jnp.bool_,
        bool,
        int,
        complex,
        jnp.complex64,
        jnp.complex128,
        "int32",
        "bool",
        "complex64",
        object,
        "U8",
    ]
)


@SETTINGS
@given(name=st.sampled_from(SMALL), dtype=NOT_FLOAT)
def test_non_float_dtypes_always_refused(name, dtype):
    with pytest.raises(ValueError, match="dtype must be a floating-point dtype"):
        jb.SegmentTree.from_dict(copy.deepcopy(MODELS[name]), dtype=dtype)
    with pytest.raises(ValueError, match="^dtype must be a floating-point dtype"):
        jb.load_model(name, dtype=dtype)


def test_the_property_can_fail():
    """The independent checker does see a loader that accepts junk (guards the test itself)."""
    d = copy.deepcopy(MODELS["double_pendulum"])
    d["segments"][1]["joint"]["orgin"] = d["segments"][1]["joint"].pop("origin")
    with pytest.raises(Invalid):
        expected_tree(d, jnp.float64)
    d = copy.deepcopy(MODELS["double_pendulum"])
    d["segments"][0]["mass"] = "1.0"
    with pytest.raises(Invalid):
        expected_tree(d, jnp.float64)
    d = copy.deepcopy(MODELS["double_pendulum"])
    d["segments"][0]["mass"] = 1e-300
    expected_tree(d, jnp.float64)
    with pytest.raises(Invalid):
        expected_tree(d, jnp.float32)
