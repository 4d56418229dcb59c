"""Coupled coordinates in the model file: ``"coordinates"`` and ``"coordinate_functions"``.

`jaxbio.save_model` writes an imported OpenSim model (tree + `jaxbio.coordinates.CoordinateMap` +
the coordinates' defaults, ranges and flags); `jaxbio.load_model` reads it back. The
reference is the model imported from the .osim file itself (whose dynamics tests/io compares
with live OpenSim): the same coordinates, flags and spline couplings, the same dynamics bit for
bit, and the same InverseDynamicsTool output on OpenSim's subject01 walking trial.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb

DATA = Path(__file__).parents[1] / "io" / "data"


@pytest.fixture(scope="module")
def gait():
    return jb.io.load_osim(DATA / "gait10dof18musc.osim", dtype=jnp.float64)


def _save(model, path):
    with pytest.warns(UserWarning, match="not part of the jaxbio model format"):
        jb.save_model(model, path)
    return path


def test_round_trip_keeps_coordinates_and_dynamics(gait, tmp_path):
    flagged = dataclasses.replace(
        gait,
        locked=tuple(n == "knee_angle_l" for n in gait.coordinate_names),
        clamped=tuple(n.startswith("hip") for n in gait.coordinate_names),
    )
    path = _save(flagged, tmp_path / "gait.json")
    back = jb.load_model(path, dtype=jnp.float64)
    assert back.coordinate_names == gait.coordinate_names
    assert back.motion_types == gait.motion_types
    assert back.locked == flagged.locked and back.clamped == flagged.clamped
    assert back.coordinates.source == gait.coordinates.source
    for field in ("defaults", "default_speeds"):
        np.testing.assert_array_equal(getattr(back, field), getattr(gait, field))
    finite = np.isfinite(np.asarray(gait.ranges))
    np.testing.assert_array_equal(np.asarray(back.ranges)[finite], np.asarray(gait.ranges)[finite])
    # the knees: one coordinate drives a rotation and two spline translations
    assert sum(s == gait.coordinate_index("knee_angle_r") for s in back.coordinates.source) == 3

    rng = np.random.default_rng(0)
    ID = jax.jit(jax.vmap(jb.inverse_dynamics, (None, 0, 0, 0)))
    MM = jax.jit(jax.vmap(jb.mass_matrix, (None, 0)))
    r = np.asarray(gait.ranges)
    c = rng.uniform(np.maximum(r[:, 0], -2), np.minimum(r[:, 1], 2), size=(64, len(r)))
    cd, cdd = rng.normal(size=(2, *c.shape))
    np.testing.assert_array_equal(ID(back, c, cd, cdd), ID(gait, c, cd, cdd))
    np.testing.assert_array_equal(MM(back, c), MM(gait, c))
    # the tree alone, in its own coordinates
    tree = jb.load_model(path, dtype=jnp.float64).tree
    assert tree.nq == gait.coordinates.nq == 14


def test_a_tree_saved_has_no_sections_and_loads_with_identity_coordinates(tmp_path):
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    jb.save_model(tree, tmp_path / "arm7.json")
    d = json.loads((tmp_path / "arm7.json").read_text())
    assert "coordinates" not in d and "coordinate_functions" not in d
    m = jb.load_model(tmp_path / "arm7.json", dtype=jnp.float64)
    assert m.coordinate_names == tree.names and m.coordinates.source == tuple(range(tree.nq))


def test_coordinates_without_functions_drive_the_tree_in_order(tmp_path):
    d = jb.load_model("double_pendulum", dtype=jnp.float64).tree.to_dict()
    d["coordinates"] = [{"name": "shoulder", "range": [-1.0, 1.0], "clamped": True}, {"name": "elbow"}]
    (tmp_path / "dp.json").write_text(json.dumps(d))
    m = jb.load_model(tmp_path / "dp.json", dtype=jnp.float64)
    assert m.coordinate_names == ("shoulder", "elbow") and m.motion_types == ("rotational", "rotational")
    np.testing.assert_array_equal(jb.coordinates.enforce_coordinates(m, jnp.array([2.0, 2.0])), [1.0, 2.0])


@pytest.mark.slow
def test_subject01_inverse_dynamics_from_json_equals_osim(tmp_path):
    osim = DATA / "subject01" / "subject01.osim"
    model = jb.io.load_osim(osim, dtype=jnp.float64)
    path = _save(model, tmp_path / "subject01.json")
    motion = DATA / "subject01" / "subject01_walk1_ik.mot"
    kw = dict(lowpass_hz=6.0, start=0.6, end=0.9, dtype=jnp.float64)
    ours = jb.tools.inverse_dynamics_tool(path, motion, **kw)
    ref = jb.tools.inverse_dynamics_tool(model, motion, **kw)
    assert ours.labels == ref.labels
    np.testing.assert_allclose(ours.data, ref.data, rtol=0, atol=1e-9 * (1 + np.abs(ref.data).max()))


def _tree_dict():
    return jb.load_model("double_pendulum", dtype=jnp.float64).tree.to_dict()


IDENTITY = {"breakpoints": [], "origins": [0.0], "coefficients": [[0.0, 1.0]]}


@pytest.mark.parametrize(
    "sections, message",
    [
        ({"coordinate_functions": [dict(IDENTITY, coordinate="a")] * 2}, "needs the 'coordinates'"),
        ({"coordinates": [{"name": "a"}]}, "1 'coordinates' for a tree of 2 coordinates"),
        ({"coordinates": [{"name": "a"}, {"name": "a"}]}, "duplicate name"),
        ({"coordinates": [{"name": "a", "rnage": [0, 1]}, {"name": "b"}]}, "did you mean 'range'"),
        ({"coordinates": [{"name": "a", "range": [1, 0]}, {"name": "b"}]}, "range minimum 1.0 is above its maximum"),
        ({"coordinates": [{"name": "a", "locked": "yes"}, {"name": "b"}]}, "'locked' must be true or false"),
        ({"coordinates": [{"name": "a", "motion_type": "spiral"}, {"name": "b"}]}, "'motion_type' must be one of"),
        (
            {"coordinates": [{"name": "a"}, {"name": "b"}], "coordinate_functions": [dict(IDENTITY, coordinate="a")]},
            "has 1 entries; the tree has 2",
        ),
        (
            {
                "coordinates": [{"name": "a"}, {"name": "b"}],
                "coordinate_functions": [dict(IDENTITY, coordinate="a"), dict(IDENTITY, coordinate="bb")],
            },
            "unknown coordinate 'bb'.*did you mean 'b'",
        ),
        (
            {
                "coordinates": [{"name": "a"}, {"name": "b"}],
                "coordinate_functions": [dict(IDENTITY, coordinate="a"), dict(IDENTITY, coordinate="a")],
            },
            "coordinate 'b' drives no tree coordinate",
        ),
        (
            {
                "coordinates": [{"name": "a"}],
                "coordinate_functions": [
                    dict(IDENTITY, coordinate="a"),
                    {"coordinate": "a", "breakpoints": [1.0, 0.5], "origins": [0, 0, 0], "coefficients": [[0, 1]] * 3},
                ],
            },
            "strictly ascending",
        ),
        (
            {
                "coordinates": [{"name": "a"}],
                "coordinate_functions": [
                    dict(IDENTITY, coordinate="a"),
                    {"coordinate": "a", "breakpoints": [0.0], "origins": [0.0], "coefficients": [[0, 1]]},
                ],
            },
            r"origins \(one per piece",
        ),
    ],
)
def test_bad_sections_are_refused_naming_the_field(sections, message, tmp_path):
    d = _tree_dict()
    d.update(sections)
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=message):
        jb.load_model(tmp_path / "bad.json")
    with pytest.raises(ValueError, match=message):
        jb.load_model(tmp_path / "bad.json")


def test_coordinates_need_a_tree_of_one_dof_joints(tmp_path):
    d = jb.load_model("wholebody", dtype=jnp.float64).tree.to_dict()
    d["coordinates"] = [{"name": "a"}]
    (tmp_path / "wb.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="revolute, prismatic and fixed joints only"):
        jb.load_model(tmp_path / "wb.json")
