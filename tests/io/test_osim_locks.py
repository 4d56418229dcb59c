"""Locked and clamped coordinates (``<locked>``, ``<clamped>`` in an .osim file) against live OpenSim.

A copy of gait10dof18musc (ForceSet emptied, as in test_osim_opensim.py, so that OpenSim's
accelerations hold gravity and inertia only) with two coordinates locked — the pelvis tilt and the
left knee, a coupled CustomJoint coordinate that drives a rotation and two spline translations —
and two clamped. OpenSim reads the flags itself (``initSystem``); compared are:

- the values OpenSim keeps after ``Coordinate.setValue(state, value, enforceConstraints=True)``
  of random values beyond the ranges, against `jaxbio.coordinates.enforce_coordinates`;
- the accelerations ``u̇`` of ``realizeAcceleration`` (the lock is a Simbody ``PrescribedMotion``
  constraint) against `jaxbio.coordinates.forward_dynamics(..., locked=model.locked)`, and against
  the unlocked accelerations to show that the locks change them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import jax.numpy as jnp

import jaxbio as jb
import numpy as np
import pytest

from jaxbio.coordinates import enforce_coordinates
from jaxbio.io import load_osim

osim = pytest.importorskip("opensim")

from tests.io.test_osim_opensim import OpenSimModel, _without_forces  # noqa: E402

DATA = Path(__file__).parent / "data"
LOCKED = ("pelvis_tilt", "knee_angle_l")
CLAMPED = ("hip_flexion_r", "ankle_angle_r")


def _with_flags(src: Path, dst: Path) -> Path:
    tree = ET.parse(src)
    for coord in tree.getroot().iter("Coordinate"):
        name = coord.get("name")
        for tag, names in (("locked", LOCKED), ("clamped", CLAMPED)):
            if name in names:
                elem = coord.find(tag)
                if elem is None:
                    elem = ET.SubElement(coord, tag)
                elem.text = "true"
        if name in LOCKED:  # a lock value inside the range, not the file's default 0
            lo, hi = (float(x) for x in coord.find("range").text.split())
            coord.find("default_value").text = repr(0.3 * lo + 0.7 * hi)
    tree.write(dst)
    return dst


@pytest.fixture(scope="module")
def flagged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("locks")
    path = _with_flags(_without_forces(DATA / "gait10dof18musc.osim", tmp / "no_forces.osim"), tmp / "flags.osim")
    return load_osim(path, dtype=jnp.float64), OpenSimModel(path)


def test_flags_are_read(flagged):
    m, ref = flagged
    assert [n for n, f in zip(m.coordinate_names, m.locked) if f] == sorted(LOCKED, key=m.coordinate_index)
    assert [n for n, f in zip(m.coordinate_names, m.clamped) if f] == sorted(CLAMPED, key=m.coordinate_index)
    for name in LOCKED:
        assert ref.coordinates[ref.names.index(name)].getLocked(ref.state)


def test_enforce_coordinates_matches_setvalue(flagged):
    m, ref = flagged
    rng = np.random.default_rng(3)
    r = np.asarray(m.ranges)
    span = r[:, 1] - r[:, 0]
    for _ in range(3):
        c = rng.uniform(r[:, 0] - 0.3 * span, r[:, 1] + 0.3 * span)  # some beyond the range
        for coord, value in zip(ref.coordinates, c):
            coord.setValue(ref.state, float(value), True)
        kept = np.array([coord.getValue(ref.state) for coord in ref.coordinates])
        ours = np.asarray(enforce_coordinates(m, c))
        np.testing.assert_allclose(ours, kept, rtol=0, atol=1e-12)
        moved = np.flatnonzero(np.abs(ours - c) > 1e-9)  # the test can fail: values did change
        assert {m.coordinate_names[k] for k in moved} <= set(LOCKED + CLAMPED) and len(moved) >= 2


def test_locked_forward_dynamics_matches_opensim(flagged):
    m, ref = flagged
    rng = np.random.default_rng(0)
    r = np.asarray(m.ranges)
    locked = np.asarray(m.locked)
    fd = jax.jit(
        lambda c, cd, locked: jb.forward_dynamics(m, c, cd, jnp.zeros_like(c), locked=locked),
        static_argnums=2,
    )
    for _ in range(3):
        c = np.asarray(enforce_coordinates(m, rng.uniform(np.maximum(r[:, 0], -1), np.minimum(r[:, 1], 1))))
        cd = np.where(locked, 0.0, rng.normal(size=len(c)))  # the lock holds the speed at 0 too
        ref.set(c, cd)
        udot = np.array([ref.state.getUDot().get(int(k)) for k in ref.mobility])
        ours = np.asarray(fd(c, cd, m.locked))
        scale = 1 + np.abs(udot).max()
        assert np.abs(ours - udot).max() / scale < 1e-9
        assert np.all(ours[locked] == 0)
        free = np.asarray(fd(c, cd, None))  # without the locks: other accelerations
        assert np.abs(free - udot).max() / scale > 1e-3


def test_locked_argument_forms_and_reaction(flagged):
    m, _ = flagged
    c = m.defaults
    cd = jnp.linspace(-0.5, 0.5, m.coordinates.nc) * (1 - jnp.asarray(m.locked, float))
    tau = jnp.zeros_like(c)
    by_flags = jb.forward_dynamics(m, c, cd, tau, locked=m.locked)
    by_names = jb.forward_dynamics(m, c, cd, tau, locked=list(LOCKED))
    np.testing.assert_array_equal(by_flags, by_names)
    # the lock's reaction: the generalised force that, applied, gives the same motion unlocked
    reaction = jb.inverse_dynamics(m, c, cd, by_flags)
    np.testing.assert_allclose(np.asarray(reaction)[~np.asarray(m.locked)], 0, atol=1e-9)
    unlocked = jb.forward_dynamics(m, c, cd, reaction)
    np.testing.assert_allclose(unlocked, by_flags, atol=1e-9)
    with pytest.raises(ValueError, match="no coordinate 'kneee'"):
        jb.forward_dynamics(m, c, cd, tau, locked=["kneee"])
    with pytest.raises(ValueError, match="bools"):
        jb.forward_dynamics(m, c, cd, tau, locked=(True, False))
