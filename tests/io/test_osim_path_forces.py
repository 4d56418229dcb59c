"""``PathActuator`` and ``PathSpring`` (`jaxbio.forces._osim_forces`, paths by
`jaxbio.forces._osim_paths`) against live OpenSim 4.6, float64.

Test models: gait10dof18musc (conditional and moving points) and arm26 (wrap cylinders and an
ellipsoid), each with a ``PathActuator`` and a ``PathSpring`` on a copy of some muscles' paths
(the springs' resting lengths at the default pose's path length, so that some states are slack);
and opensim-models' subject01_metabolics_path_actuator / _path_spring (``JAXBIO_OSIM_LIBRARY``,
default /work/om, skipped without it). At random states within the coordinate ranges, OpenSim's
generalised force of each type is ``InverseDynamicsSolver.solve`` with no force minus the same
with only that type enabled (actuators: random controls); jaxbio's is `passive_forces` /
`actuator_forces`, to 1e-9 relative. Tensions vs ``PathSpring.getTension``. Wrapped paths (slow):
against central differences of OpenSim's path length (OpenSim's own force over a wrap is not its
length's derivative; docs/opensim-support.md).
"""

from __future__ import annotations

import copy
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbio.io import load_osim
from jaxbio.forces import muscle_lengths, passive_forces
from jaxbio.forces._osim_forces import actuator_matrix, path_spring_tensions
from jaxbio.forces._osim_muscles import muscle_moment_arms

osim = pytest.importorskip("opensim")

from tests.io.test_osim_forces import assert_agree, compare_types  # noqa: E402

DATA = Path(__file__).parent / "data"
LIBRARY = Path(os.environ.get("JAXBIO_OSIM_LIBRARY", "/work/om"))
GAIT_MUSCLES = ("rect_fem_r", "vasti_r", "gastroc_r", "iliopsoas_l")  # moving, moving, conditional, conditional
ARM_MUSCLES = ("TRIlong", "BIClong", "BRA")  # wraps, wraps, straight


def with_path_forces(src: Path, dst: Path, muscles, stiffness=2000.0, dissipation=0.3) -> Path:
    """``src`` with, for each muscle of ``muscles``, a PathActuator ``<muscle>_act`` and a
    PathSpring ``<muscle>_spring`` on copies of its GeometryPath (the spring's resting length: the
    path length at the default pose)."""
    with jax.enable_x64(True):
        m = load_osim(src, dtype=jnp.float64)
        rest = dict(zip(m.muscles.names, np.asarray(muscle_lengths(m, m.defaults), float)))
    root = ET.parse(src).getroot()
    objects = root.find("Model/ForceSet/objects")
    for k, name in enumerate(muscles):
        muscle = next(o for o in objects if o.get("name") == name)
        act = ET.SubElement(objects, "PathActuator", name=f"{name}_act")
        act.append(copy.deepcopy(muscle.find("GeometryPath")))
        ET.SubElement(act, "optimal_force").text = str(50.0 + 10 * k)
        spring = ET.SubElement(objects, "PathSpring", name=f"{name}_spring")
        spring.append(copy.deepcopy(muscle.find("GeometryPath")))
        ET.SubElement(spring, "resting_length").text = repr(float(rest[name]))
        ET.SubElement(spring, "stiffness").text = str(stiffness)
        ET.SubElement(spring, "dissipation").text = str(dissipation)
    ET.ElementTree(root).write(dst)
    return dst


def states(path: Path, n: int, seed: int = 0):
    m = load_osim(path)
    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(m.ranges, float).T
    return lo + (hi - lo) * rng.uniform(size=(n, len(lo))), rng.normal(size=(n, len(lo)))


@pytest.fixture(scope="module")
def gait(tmp_path_factory):
    return with_path_forces(DATA / "gait10dof18musc.osim", tmp_path_factory.mktemp("gait") / "gait.osim", GAIT_MUSCLES)


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    return with_path_forces(DATA / "arm26.osim", tmp_path_factory.mktemp("arm") / "arm.osim", ARM_MUSCLES)


def test_path_forces_are_imported(gait):
    m = load_osim(gait, strict=True)
    f = m.forces
    assert f.path_actuators.names == tuple(f"{n}_act" for n in GAIT_MUSCLES)
    assert f.path_springs.names == tuple(f"{n}_spring" for n in GAIT_MUSCLES)
    assert f.paths.paths.names == tuple(f"{n}_{t}" for n in GAIT_MUSCLES for t in ("act", "spring"))
    assert f.path_actuators.path_index == (0, 2, 4, 6) and f.path_springs.path_index == (1, 3, 5, 7)
    assert f.actuator_names == f.path_actuators.names
    np.testing.assert_allclose(f.optimal_force, [50.0, 60.0, 70.0, 80.0])
    assert np.all(np.isinf(f.min_control)) and np.all(np.isinf(f.max_control))
    assert len(f.paths.conditional) == 8 and len(f.paths.moving) == 4  # the muscles' points, twice


def test_gait_path_forces_match_opensim(gait):
    """Conditional and moving points: generalised forces to 1e-9 relative."""
    errors = compare_types(gait, *states(gait, 4), kinds=("PathSpring", "PathActuator"))
    assert_agree(errors)


def test_gait_spring_tensions_and_actuator_columns(gait):
    """``path_spring_tensions`` vs ``PathSpring.getTension`` (slack and stretched states); the
    PathActuator columns of ``actuator_matrix`` are the muscles' moment arms (the same paths)."""
    with jax.enable_x64(True):
        m = load_osim(gait, dtype=jnp.float64)
        model = osim.Model(str(gait))
        s = model.initSystem()
        cs = model.getCoordinateSet()
        springs = [osim.PathSpring.safeDownCast(model.getForceSet().get(n)) for n in m.forces.path_springs.names]
        c, cd = states(gait, 4, seed=1)
        slack = 0
        for x, xd in zip(c, cd):
            for k in range(cs.getSize()):
                cs.get(k).setValue(s, float(x[k]), False)
                cs.get(k).setSpeedValue(s, float(xd[k]))
            model.realizeVelocity(s)
            theirs = np.array([sp.getTension(s) for sp in springs])
            ours = np.asarray(path_spring_tensions(m, x, xd))
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-9)
            slack += int(np.sum(theirs == 0))
            rows = [m.muscles.index(n) for n in GAIT_MUSCLES]
            B = np.asarray(actuator_matrix(m, x))
            np.testing.assert_allclose(B, np.asarray(muscle_moment_arms(m, x))[rows].T, rtol=0, atol=1e-15)
        assert 0 < slack < 4 * len(springs)  # both branches of max(0, l − l₀)


@pytest.mark.slow
def test_wrapping_path_forces_are_the_derivative_of_opensims_length(arm):
    """Wrap cylinders and an ellipsoid: jaxbio's generalised force is ``−∂l/∂c T`` (virtual work
    of the path length, as for the muscles), against central differences of OpenSim's length
    (h = 1e-5; the muscles' moment-arm tolerance). At rest (``ċ = 0``): over a wrap OpenSim's
    ``getLengtheningSpeed`` and its applied forces (the straight segments' directions at its
    tangent points) are not the derivative of its length (docs/opensim-support.md)."""
    with jax.enable_x64(True):
        m = load_osim(arm, dtype=jnp.float64)
        model = osim.Model(str(arm))
        s = model.initSystem()
        cs = model.getCoordinateSet()
        fs = model.getForceSet()
        acts = [osim.PathActuator.safeDownCast(fs.get(n)) for n in m.forces.path_actuators.names]
        springs = [osim.PathSpring.safeDownCast(fs.get(n)) for n in m.forces.path_springs.names]

        def lengths(x):
            for k in range(cs.getSize()):
                cs.get(k).setValue(s, float(x[k]), False)
                cs.get(k).setSpeedValue(s, 0.0)
            model.realizeVelocity(s)
            return np.array([a.getLength(s) for a in acts]), np.array([p.getLength(s) for p in springs])

        f = m.forces
        controls = np.random.default_rng(3).uniform(-1.0, 2.0, len(acts))
        c, _ = states(arm, 3)
        for x in c:
            zero = np.zeros_like(x)
            h = 1e-5
            diffs = [(lengths(x + h * e), lengths(x - h * e)) for e in np.eye(len(x))]
            r_act = -np.stack([(p[0] - q[0]) / (2 * h) for p, q in diffs], 1)
            r_spring = -np.stack([(p[1] - q[1]) / (2 * h) for p, q in diffs], 1)
            l_spring = lengths(x)[1]
            tension = np.asarray(f.path_springs.stiffness) * np.maximum(
                l_spring - np.asarray(f.path_springs.resting_length), 0
            )
            expected = r_spring.T @ tension
            ours = np.asarray(passive_forces(m, x, zero))
            assert np.abs(ours - expected).max() <= 1e-4 * np.abs(tension).sum(), (ours, expected)  # 1e-4 m
            expected = r_act.T @ (np.asarray(f.optimal_force) * controls)
            ours = np.asarray(actuator_matrix(m, x)) @ (np.asarray(f.optimal_force) * controls)
            assert np.abs(ours - expected).max() <= 1e-4 * np.abs(np.asarray(f.optimal_force) * controls).sum()


@pytest.mark.parametrize("name", ["path_actuator", "path_spring"])
def test_library_path_force_models_match_opensim(name):
    path = LIBRARY / "Models" / "Gait10dof18musc" / f"subject01_metabolics_{name}.osim"
    if not path.exists():
        pytest.skip(f"{path} not found (set JAXBIO_OSIM_LIBRARY)")
    assert not load_osim(path, strict=True).not_imported
    kind = {"path_actuator": "PathActuator", "path_spring": "PathSpring"}[name]
    assert_agree(compare_types(path, *states(path, 6), kinds=(kind,)), minimum=0.1)  # optimal_force 10 N


@pytest.mark.slow  # 75 s of the default run (its 25 slowest, 2026-12-08)
def test_path_forces_in_float32_and_gradients(gait):
    m32 = load_osim(gait, dtype=jnp.float32)
    c, cd = (jnp.asarray(x[0], jnp.float32) for x in states(gait, 1))
    assert passive_forces(m32, c, cd).dtype == jnp.float32
    assert actuator_matrix(m32, c).dtype == jnp.float32
    with jax.enable_x64(True):
        m = load_osim(gait, dtype=jnp.float64)
        c, cd = (jnp.asarray(x[2]) for x in states(gait, 3))
        g = jax.grad(lambda x: jnp.sum(passive_forces(m, x, cd) ** 2))(c)
        h = 1e-6
        e = jnp.eye(len(c))[3]  # hip flexion
        fd = (jnp.sum(passive_forces(m, c + h * e, cd) ** 2) - jnp.sum(passive_forces(m, c - h * e, cd) ** 2)) / (2 * h)
        np.testing.assert_allclose(g[3], fd, rtol=1e-5)


def test_reading_path_forces_compiles_nothing(gait):
    from tests.test_rigid_numpy import _compilations

    assert _compilations(lambda: load_osim(gait, dtype=jnp.float64)) == []


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("<stiffness>2000.0</stiffness>", "", r"PathSpring 'rect_fem_r_spring': <stiffness> must be a number ≥ 0"),
        ("<dissipation>0.3</dissipation>", "<dissipation>-1</dissipation>", r"<dissipation> must be a number ≥ 0"),
        ("GeometryPath", "FunctionBasedPath", r"PathActuator 'rect_fem_r_act': no <GeometryPath> \(its path is"),
    ],
)
def test_bad_path_forces_are_refused(gait, tmp_path, old, new, message):
    text = gait.read_text()
    at = text.index("<PathActuator")
    bad = tmp_path / "bad.osim"
    bad.write_text(text[:at] + text[at:].replace(old, new, 2 if old == "GeometryPath" else 1))
    with pytest.raises(ValueError, match=message):
        load_osim(bad)
