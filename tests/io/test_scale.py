"""OpenSim's ScaleTool (`jaxbio.tools.scale_tool`, ``jaxbio run-tool``) against OpenSim 4.6 run live.

The pipelines of opensim-models (``$JAXBIO_OSIM_LIBRARY``, default ``/work/om``; skipped when
absent): Gait2354_Simbody's ``subject01_Setup_Scale.xml`` (uniform measurements and manual
scales, Thelen muscles with moving and conditional path points, a 2.x marker set file) and
Rajagopal's ``scale_setup_run.xml`` on Rajagopal2016 (the pelvis scaled per axis: OpenSim's
cylinder inertia; wrap cylinders, Millard muscles, coupler constraints). Every number of
OpenSim's scaled ``.osim`` is compared with jaxbio's (masses, inertias, mass centres, offset
frames, geometry, markers, path points, joint and path-point functions, wrap objects, fibre and
tendon lengths): 1e-9. Marker placement: jaxbio's static pose is IK's optimum, where OpenSim's
assembler stops at its default accuracy; the pose is compared with OpenSim's solver run to 1e-12,
and the moved markers at that pose with OpenSim's kinematics (1e-9).
"""

from __future__ import annotations

import collections
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

LIBRARY = Path(os.environ.get("JAXBIO_OSIM_LIBRARY", "/work/om"))
DATA = Path(__file__).parent / "data"


def _leaves(path) -> dict:
    """Every numeric leaf of an XML file by its path of ``tag[name]#k`` (the GeometryPath's name
    normalised: OpenSim 4.6 prints ``path`` where 4.0 files say ``geometrypath``)."""
    root = ET.parse(path).getroot()
    out = {}

    def walk(el, key):
        counts = collections.Counter()
        for ch in el:
            if not isinstance(ch.tag, str):
                continue
            name = "path" if ch.tag == "GeometryPath" else ch.get("name")
            counts[(ch.tag, name)] += 1
            sub = key + (f"{ch.tag}[{name}]#{counts[(ch.tag, name)]}",)
            if len(ch) == 0 and ch.text and ch.text.strip():
                try:
                    out[sub] = np.array([float(v) for v in ch.text.split()])
                except ValueError:
                    pass
            walk(ch, sub)

    walk(root, ())
    return out


def _compare(ours, reference) -> dict:
    """``{tag: (largest |difference|, where)}`` over OpenSim's numeric leaves; asserts that
    jaxbio's file has each of them."""
    a, b = _leaves(ours), _leaves(reference)
    missing = ["/".join(k[-3:]) for k in b if k not in a]
    assert not missing, f"numbers of OpenSim's file missing from jaxbio's: {missing[:10]}"
    worst: dict = {}
    for k, v in b.items():
        w = a[k]
        assert w.shape == v.shape, "/".join(k)
        with np.errstate(invalid="ignore"):  # infinite bounds in both files
            d = np.where(w == v, 0.0, np.abs(w - v))
        d = float(np.max(d)) if v.size else 0.0
        tag = k[-1].split("[")[0]
        if d >= worst.get(tag, (-1.0, ""))[0]:
            worst[tag] = (d, "/".join(k[-3:]))
    return worst


def _pipeline(tmp_path, which):
    """A copy of a pipeline's scale setup with its model and trial, ready to run twice."""
    if which == "gait2354":
        src = LIBRARY / "Pipelines" / "Gait2354_Simbody"
        model = LIBRARY / "Models" / "Gait2354_Simbody" / "gait2354_simbody.osim"
        if not (src.is_dir() and model.is_file()):
            pytest.skip(f"opensim-models not found at {LIBRARY}")
        for f in ("subject01_Setup_Scale.xml", "gait2354_Scale_MarkerSet.xml", "subject01_static.trc"):
            shutil.copy(src / f, tmp_path / f)
        shutil.copy(model, tmp_path / model.name)
        return tmp_path / "subject01_Setup_Scale.xml", {
            "scaled": "subject01_scaledOnly.osim",
            "placed": "subject01_simbody.osim",
        }
    src = LIBRARY / "Pipelines" / "Rajagopal"
    model = LIBRARY / "Models" / "Rajagopal" / "Rajagopal2016.osim"
    if not (src.is_dir() and model.is_file()):
        pytest.skip(f"opensim-models not found at {LIBRARY}")
    (tmp_path / "Scale").mkdir()
    (tmp_path / "ExpData").mkdir()
    shutil.copy(model, tmp_path / "generic_unscaled.osim")
    shutil.copy(src / "ExpData" / "static_run.trc", tmp_path / "ExpData" / "static_run.trc")
    text = (src / "Scale" / "scale_setup_run.xml").read_text()
    text = text.replace(
        "<output_model_file>Unassigned</output_model_file>", "<output_model_file>scaled_only.osim</output_model_file>"
    )
    (tmp_path / "Scale" / "scale_setup_run.xml").write_text(text)
    return tmp_path / "Scale" / "scale_setup_run.xml", {
        "scaled": "scaled_only.osim",
        "placed": "subject_scaled_run.osim",
    }


def _run_both(tmp_path, which):
    osim = pytest.importorskip("opensim")
    from jaxbio.tools import run_setup

    ours_dir, ref_dir = tmp_path / "jaxbio", tmp_path / "opensim"
    ours_dir.mkdir()
    ref_dir.mkdir()
    setup, outputs = _pipeline(ours_dir, which)
    _pipeline(ref_dir, which)
    ref_setup = ref_dir / setup.relative_to(ours_dir)
    cwd = os.getcwd()
    try:
        os.chdir(ref_setup.parent)
        assert osim.ScaleTool(ref_setup.name).run()
    finally:
        os.chdir(cwd)
    with pytest.warns(UserWarning, match="no applied marker task"):  # markers the placer's IK leaves out
        done = run_setup(setup)
    return osim, setup, ref_setup, outputs, done


@pytest.mark.parametrize("which", ["gait2354", pytest.param("rajagopal", marks=pytest.mark.slow)])
def test_scaled_model_equals_opensims(tmp_path, which):
    osim, setup, ref_setup, outputs, done = _run_both(tmp_path, which)
    ours = setup.parent / outputs["scaled"]
    assert ours in done.files.values()
    worst = _compare(ours, ref_setup.parent / outputs["scaled"])
    checked = {
        "mass",
        "inertia",
        "mass_center",
        "translation",
        "location",
        "scale_factors",
        "optimal_fiber_length",
        "tendon_slack_length",
    }
    assert checked <= set(worst)
    for tag, (d, where) in worst.items():
        assert d <= 1e-9, f"{tag}: {d:.3g} at {where}"
    if which == "rajagopal":
        assert {"radius", "length", "scale"} <= set(worst)  # wrap cylinders, MultiplierFunctions
    # the scaled file loads in OpenSim and gives OpenSim's total mass
    m = osim.Model(str(ours))
    s = m.initSystem()
    mass = float(ET.parse(setup).getroot().find("ScaleTool/mass").text)
    if mass > 0:
        assert abs(m.getTotalMass(s) - mass) < 1e-9
    # the placed model: OpenSim's with the markers OpenSim did not move, and the marker set
    placed = _compare(setup.parent / outputs["placed"], ref_setup.parent / outputs["placed"])
    for tag, (d, where) in placed.items():
        if tag != "location" or "Marker[" not in where:
            assert d <= 1e-9, f"{tag}: {d:.3g} at {where}"


def _opensim_static_pose(osim, model_path, setup_path, t0, t1):
    """OpenSim's MarkerPlacer IK (``InverseKinematicsSolver::assemble`` on the averaged frame)
    with accuracy 1e-12 instead of its default."""
    tool = osim.ScaleTool(str(setup_path))
    placer = tool.getMarkerPlacer()
    trc = str(Path(setup_path).parent / placer.getStaticPoseFileName())
    table = osim.TimeSeriesTableVec3(trc)
    times = np.array(table.getIndependentColumn())
    t0, t1 = max(t0, times[0]), min(t1, times[-1])
    average = table.averageRow(t0, t1)
    for r in range(table.getNumRows() - 1, -1, -1):
        table.removeRowAtIndex(r)
    table.appendRow(t0, average)
    factor = {"mm": 1e-3, "cm": 1e-2, "m": 1.0}[table.getTableMetaDataAsString("Units").strip()]
    row = table.updRowAtIndex(0)
    for i in range(row.size()):
        row[i] = osim.Vec3(row[i][0] * factor, row[i][1] * factor, row[i][2] * factor)
    table.removeTableMetaDataKey("Units")
    table.addTableMetaDataString("Units", "m")
    model = osim.Model(str(model_path))
    s = model.initSystem()
    s.setTime(t0)
    tasks = placer.getIKTaskSet()
    weights = osim.SetMarkerWeights()
    references = osim.SimTKArrayCoordinateReference()
    for i in range(tasks.getSize()):
        task = tasks.get(i)
        if not task.getApply():
            continue
        if task.getConcreteClassName() == "IKMarkerTask":
            weights.cloneAndAppend(osim.MarkerWeight(task.getName(), task.getWeight()))
            continue
        ct = osim.IKCoordinateTask.safeDownCast(task)
        manual = ct.getValueType() == osim.IKCoordinateTask.ManualValue
        value = ct.getValue() if manual else model.getCoordinateSet().get(task.getName()).getValue(s)
        ref = osim.CoordinateReference(task.getName(), osim.Constant(value))
        ref.setWeight(task.getWeight())
        references.push_back(ref)
    solver = osim.InverseKinematicsSolver(model, osim.MarkersReference(table, weights), references, float("inf"))
    solver.setAccuracy(1e-12)
    solver.assemble(s)
    model.realizePosition(s)
    coordinates = model.getCoordinateSet()
    return (
        model,
        s,
        {coordinates.get(i).getName(): coordinates.get(i).getValue(s) for i in range(coordinates.getSize())},
    )


@pytest.mark.parametrize("which", ["gait2354", pytest.param("rajagopal", marks=pytest.mark.slow)])
def test_marker_placement_against_opensim(tmp_path, which):
    osim = pytest.importorskip("opensim")
    import jax

    from jaxbio.tools import place_markers, read_scale_setup

    setup, outputs = _pipeline(tmp_path, which)
    spec = read_scale_setup(setup)
    cwd = os.getcwd()
    try:
        os.chdir(setup.parent)
        tool = osim.ScaleTool(setup.name)
        tool.getMarkerPlacer().setApply(False)
        tool.run()  # OpenSim's scaled model (run() says False: the placer did not run)
    finally:
        os.chdir(cwd)
    scaled = setup.parent / outputs["scaled"]
    assert scaled.is_file()
    t0, t1 = spec.placer_time_range
    model, s, pose = _opensim_static_pose(osim, scaled, setup, t0, t1)
    kwargs = dict(
        time_range=spec.placer_time_range,
        marker_weights=spec.marker_weights,
        coordinate_tasks=spec.coordinate_tasks,
    )
    with pytest.warns(UserWarning, match="no applied marker task"):
        _, c, errors, inputs = place_markers(scaled, spec.placer_marker_file, move_markers=False, **kwargs)
    from jaxbio.tools._scale import _load_text

    with jax.enable_x64(True):
        names = _load_text(scaled.read_text()).coordinate_names
    c_opensim = np.array([pose[n] for n in names])
    np.testing.assert_allclose(c, c_opensim, atol=1e-6)  # the lumbar joint's optimum is flat
    # the markers moved at OpenSim's pose, against OpenSim's kinematics (moveModelMarkersToPose)
    with pytest.warns(UserWarning, match="no applied marker task"):
        text, _, _, _ = place_markers(scaled, spec.placer_marker_file, static_pose=c_opensim, **kwargs)
    placed = tmp_path / "placed.osim"
    placed.write_text(text)
    from jaxbio.io import read_trc

    data = osim.MarkerData(spec.placer_marker_file)
    data.averageFrames(-1.0, t0, t1)
    frame = data.getFrame(0)
    factor = {"mm": 1e-3, "cm": 1e-2, "m": 1.0}[read_trc(spec.placer_marker_file).header["Units"]]
    ours = osim.Model(str(placed))
    ours.initSystem()
    worst = 0.0
    for i in range(model.getMarkerSet().getSize()):
        marker = model.getMarkerSet().get(i)
        k = data.getMarkerIndex(marker.getName())
        if marker.get_fixed() or k < 0:
            continue
        v = frame.getMarker(k)
        measured = osim.Vec3(v[0] * factor, v[1] * factor, v[2] * factor)
        expected = model.getGround().findStationLocationInAnotherFrame(s, measured, marker.getParentFrame())
        got = ours.getMarkerSet().get(marker.getName()).get_location()
        worst = max(worst, max(abs(got[j] - expected[j]) for j in range(3)))
    assert worst <= 1e-9


def test_uniform_scaling_closed_form():
    """Equal factors ``s``: masses × s³, inertias × s⁵, lengths × s; with a subject mass, the
    masses sum to it."""
    import jax

    from jaxbio.tools import scale_osim
    from jaxbio.tools._scale import _load_text

    s = 1.3
    generic = (DATA / "arm26.osim").read_text()
    bodies = ("r_humerus", "r_ulna_radius_hand")
    text = scale_osim(DATA / "arm26.osim", {b: [s, s, s] for b in bodies}, name="big")
    with jax.enable_x64(True):
        a, b = _load_text(generic), _load_text(text)
    assert 'name="big"' in text
    np.testing.assert_allclose(np.asarray(b.markers.locations)[1:], s * np.asarray(a.markers.locations)[1:], rtol=1e-15)
    root, root0 = ET.fromstring(text), ET.fromstring(generic)
    for name in bodies:
        el = root.find(f".//BodySet/objects/Body[@name='{name}']")
        el0 = root0.find(f".//BodySet/objects/Body[@name='{name}']")
        m, m0 = (float(e.find("mass").text) for e in (el, el0))
        assert m == pytest.approx(m0 * s**3, rel=1e-14)
        i, i0 = (np.array(e.find("inertia").text.split(), float) for e in (el, el0))
        np.testing.assert_allclose(i, i0 * s**5, rtol=1e-14)
    with_mass = scale_osim(DATA / "arm26.osim", {b: [s, s, s] for b in bodies}, mass=50.0)
    masses = [float(e.text) for e in ET.fromstring(with_mass).findall(".//BodySet/objects/Body/mass")]
    assert sum(masses) == pytest.approx(50.0, rel=1e-14)


def _arm_trial(names, t=(0.0, 0.01, 0.02)) -> object:
    from jaxbio.io import Markers

    pos = np.tile(np.arange(3 * len(names), dtype=float).reshape(1, -1, 3), (len(t), 1, 1))
    return Markers(time=np.array(t), names=tuple(names), positions=pos, rate=100.0)


@pytest.mark.slow
def test_a_static_trial_that_does_not_fit_is_warned_about():
    """Marker placement on arm26 from a trial of its own markers at a pose (no warning), then
    the same trial off by 0.3 m at the elbow, and in millimetres read as metres: warned, the
    markers named."""
    import warnings

    import jax
    import jax.numpy as jnp

    from jaxbio.io import Markers
    from jaxbio.markers import marker_positions
    from jaxbio.tools import place_markers
    from jaxbio.tools._scale import _load_text

    with jax.enable_x64(True):
        arm = _load_text((DATA / "arm26.osim").read_text(), dtype=jnp.float64)
        c = np.array(arm.defaults) + np.array([0.0, 0.4])[: len(arm.defaults)]
        x = np.asarray(marker_positions(arm, jnp.asarray(c)))
    names = arm.markers.names

    def place(positions):
        trial = Markers(time=np.array([0.0, 0.01]), names=names, positions=np.stack([positions] * 2), rate=100.0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, pose, errors, _ = place_markers(DATA / "arm26.osim", trial)
        return pose, errors, " | ".join(str(w.message) for w in caught)

    pose, errors, said = place(x)
    assert "does not fit" not in said and max(errors.values()) < 1e-6
    off = x.copy()
    off[1] += [0.3, 0.0, 0.0]
    _, _, said = place(off)
    assert "does not fit" in said and names[1] in said
    _, _, said = place(1000 * x)
    assert "does not fit" in said and all(n in said for n in names if not np.allclose(x[names.index(n)], 0))


def test_measurement_errors_name_markers_and_time_range():
    import jax

    from jaxbio.tools import Measurement, measurement_scale_factors
    from jaxbio.tools._scale import _load_text

    with jax.enable_x64(True):
        arm = _load_text((DATA / "arm26.osim").read_text())
    trial = _arm_trial(["r_acromion", "r_humerus_epicondyle", "r_radius_styloid"])
    arm_m = Measurement("arm", (("r_acromion", "r_humerus_epicondyle"),), {"r_humerus": "X Y Z"})
    with jax.enable_x64(True):
        factors = measurement_scale_factors(arm, trial, [arm_m], (0.0, 0.02))
    assert set(factors) == {"arm"} and factors["arm"] > 0
    ghost = Measurement("ghost", (("r_acromion", "nowhere"), ("elsewhere", "r_radius_styloid")), {"r_humerus": "X"})
    with pytest.raises(ValueError, match="not in the model.*elsewhere, nowhere.*not in the marker file"):
        measurement_scale_factors(arm, trial, [ghost], (0.0, 0.02))
    partial = _arm_trial(["r_acromion", "r_humerus_epicondyle"])
    forearm = Measurement("forearm", (("r_humerus_epicondyle", "r_radius_styloid"),), {"r_ulna_radius_hand": "Y"})
    with pytest.raises(ValueError, match=r"not in the marker file \(markers\): r_radius_styloid"):
        measurement_scale_factors(arm, partial, [forearm], (0.0, 0.02))
    with pytest.raises(ValueError, match="outside the data"):
        measurement_scale_factors(arm, trial, [arm_m], (1.0, 2.0))
    with pytest.raises(ValueError, match="ends before it starts"):
        measurement_scale_factors(arm, trial, [arm_m], (0.02, 0.0))
    with pytest.raises(ValueError, match="no body or frame of the model"):
        from jaxbio.tools import scale_osim

        scale_osim(DATA / "arm26.osim", {"r_femur": [1, 1, 1]})


if __name__ == "__main__":  # the largest differences per quantity: python -m tests.io.test_scale
    import tempfile

    for which in ("gait2354", "rajagopal"):
        with tempfile.TemporaryDirectory() as d:
            _, setup, ref, outputs, _ = _run_both(Path(d), which)
            for kind in ("scaled", "placed"):
                print(f"{which} {kind} ({outputs[kind]}):")
                worst = _compare(setup.parent / outputs[kind], ref.parent / outputs[kind])
                for tag, (diff, where) in sorted(worst.items(), key=lambda x: -x[1][0]):
                    print(f"  {tag:24s} {diff:.3g}  ({where})")
