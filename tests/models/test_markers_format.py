"""Markers in the model file (``"markers"``): `jaxbio.save_model` writes a model's markers, each
fixed to a segment (or the world) at its location in that segment's frame, and `jaxbio.load_model`
reads them back. The reference is the model imported from the ``.osim`` file, whose marker
positions tests/io compares with live OpenSim: the same names, flags and world positions, and the
same inverse-kinematics goal on a trial."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.markers import OsimMarkers, marker_positions

DATA = Path(__file__).parents[1] / "io" / "data"


def _round_trip(model, tmp_path):
    path = tmp_path / "model.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the forces are not part of the format
        jb.save_model(model, path)
    return jb.load_model(path, dtype=jnp.float64), json.loads(path.read_text())


@pytest.mark.parametrize("name", ["arm26.osim", "arm26_3x.osim"])
def test_markers_round_trip_through_the_model_file(name, tmp_path):
    """World positions equal at random coordinates (and their Jacobians), names and fixed flags
    kept; a marker whose frame is offset in its body (arm26's are on bodies) is written at its
    location in the segment."""
    with jax.enable_x64(True):
        model = jb.io.load_osim(DATA / name, dtype=jnp.float64)
        assert model.markers is not None and model.markers.n_markers
        back, d = _round_trip(model, tmp_path)
        assert back.markers.names == model.markers.names and back.markers.fixed == model.markers.fixed
        assert [m["name"] for m in d["markers"]] == list(model.markers.names)
        rng = np.random.default_rng(3)
        lo, hi = np.asarray(model.ranges).T
        for _ in range(3):
            c = jnp.asarray(rng.uniform(np.maximum(lo, -1.0), np.minimum(hi, 1.0)))
            np.testing.assert_allclose(marker_positions(back, c), marker_positions(model, c), rtol=0, atol=1e-14)
            np.testing.assert_allclose(
                jax.jacfwd(lambda c: marker_positions(back, c))(c),
                jax.jacfwd(lambda c: marker_positions(model, c))(c),
                rtol=0,
                atol=1e-13,
            )


def test_a_marker_in_an_offset_frame_and_on_the_world(tmp_path):
    """A marker whose frame is rotated and shifted in its segment, and one on the world: written at
    ``p + R(frame) location`` in the segment (a closed form), read back to the same world points."""
    with jax.enable_x64(True):
        model = jb.io.load_osim(DATA / "arm26.osim", dtype=jnp.float64)
        mk = model.markers
        turn = np.array([np.cos(0.4), 0.0, np.sin(0.4), 0.0])  # 0.8 rad about y
        moved = OsimMarkers(
            locations=mk.locations,
            frame_positions=mk.frame_positions.at[0].set(jnp.array([0.01, -0.02, 0.03])),
            frame_orientations=mk.frame_orientations.at[0].set(jnp.asarray(turn)),
            names=mk.names,
            frames=("ground",) + mk.frames[1:],
            bodies=("ground",) + mk.bodies[1:],
            segments=(-1,) + mk.segments[1:],
            fixed=mk.fixed,
        )
        model = eqx.tree_at(lambda m: m.markers, model, moved)
        back, d = _round_trip(model, tmp_path)
        loc = np.asarray(mk.locations[0])
        rot_y = np.array([[np.cos(0.8), 0, np.sin(0.8)], [0, 1, 0], [-np.sin(0.8), 0, np.cos(0.8)]])
        assert d["markers"][0]["segment"] is None
        np.testing.assert_allclose(d["markers"][0]["location"], [0.01, -0.02, 0.03] + rot_y @ loc, atol=1e-15)
        c = jnp.asarray(model.defaults) + 0.3
        np.testing.assert_allclose(marker_positions(back, c), marker_positions(model, c), rtol=0, atol=1e-14)


@pytest.mark.parametrize(
    "markers, match",
    [
        (
            [{"name": "A", "segment": "forarm", "location": [0, 0, 0]}],
            r"marker 'A': unknown segment 'forarm'.*did you mean 'forearm'",
        ),
        ([{"name": "A", "segment": None, "location": [0, 0]}], r"marker 'A': location: expected shape \(3,\)"),
        ([{"name": "A", "segment": None, "location": [0, 0, float("nan")]}], r"marker 'A': location"),
        (
            [
                {"name": "A", "segment": None, "location": [0, 0, 0]},
                {"name": "A", "segment": None, "location": [1, 0, 0]},
            ],
            r"marker 'A': the marker name is used twice",
        ),
        (
            [{"name": "A", "segment": None, "location": [0, 0, 0], "fixd": True}],
            r"unknown field 'fixd' \(did you mean 'fixed'\?\)",
        ),
        ([{"name": "A", "segment": None, "location": [0, 0, 0], "fixed": 1}], r"field 'fixed' must be true or false"),
        ([], r"'markers' must be a non-empty list"),
    ],
)
def test_bad_markers_are_refused_naming_the_marker(markers, match, tmp_path):
    d = jb.load_model("arm7").tree.to_dict()
    d["markers"] = markers
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=match):
        jb.load_model(path)


def test_a_model_without_markers_writes_none(tmp_path):
    path = tmp_path / "arm7.json"
    jb.save_model(jb.load_model("arm7"), path)
    assert "markers" not in json.loads(path.read_text()) and jb.load_model(path).markers is None
