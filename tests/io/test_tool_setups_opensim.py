"""OpenSim's tool setups run unedited (`jaxbio.tools.run_setup`) against live OpenSim 4.6 on the
same setup, at the edges OpenSim's own files reach: frames beyond the ground-reaction data
(OpenSim extrapolates), motion columns that name no coordinate and coordinates without a column
(OpenSim holds them and logs it), ``step_interval``, force set files that repeat the model's
force names, point and torque actuators as static-optimisation reserves.

Live OpenSim runs in a subprocess in a copy of the setup's folder (its tools change the working
directory and log to a file). The data are the repository's copies of OpenSim's example files
(``tests/io/data/subject01``, ``tests/io/data/arm26_id``; provenance in their README.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxbio as jb
from jaxbio.tools import run_setup

DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

_OPENSIM = (
    "import sys, opensim; opensim.Logger.removeFileSink(); opensim.Logger.setLevelString('error'); "
    "t = {'InverseDynamicsTool': opensim.InverseDynamicsTool, 'AnalyzeTool': opensim.AnalyzeTool}[sys.argv[1]]; "
    "sys.exit(0 if t(sys.argv[2]).run() else 3)"
)


def _opensim(tool: str, setup: Path) -> None:
    pytest.importorskip("opensim")
    r = subprocess.run(
        [sys.executable, "-c", _OPENSIM, tool, setup.name], cwd=setup.parent, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]


def _cut_rows(path: Path, keep) -> None:
    """Keep the data rows of a .mot whose time satisfies ``keep`` (and fix nRows)."""
    lines = path.read_text().splitlines()
    end = next(i for i, ln in enumerate(lines) if ln.strip().lower() == "endheader")
    head, labels, rows = lines[: end + 1], lines[end + 1], lines[end + 2 :]
    rows = [r for r in rows if r.strip() and keep(float(r.split()[0]))]
    head = [re.sub(r"^nRows=\d+", f"nRows={len(rows)}", h) for h in head]
    path.write_text("\n".join(head + [labels] + rows) + "\n")


@pytest.fixture(scope="module")
def subject01(tmp_path_factory):
    """Two copies of OpenSim's subject01 inverse dynamics (0.5–1.6 s, 6 Hz): ``"opensim"`` and
    ``"jaxbio"``."""
    root = tmp_path_factory.mktemp("subject01")
    for who in ("opensim", "jaxbio"):
        shutil.copytree(DATA / "subject01", root / who)
    return root


def _id_both(folder_of, edit) -> tuple:
    """Edit both copies (``edit(folder)``), run the setup in each; (jaxbio's ToolRun, its table,
    OpenSim's table)."""
    for who in ("opensim", "jaxbio"):
        edit(folder_of / who)
    setup = "subject01_Setup_InverseDynamics.xml"
    _opensim("InverseDynamicsTool", folder_of / "opensim" / setup)
    with pytest.warns(UserWarning) as caught:
        done = run_setup(folder_of / "jaxbio" / setup)
    ours = jb.io.read_storage(done.files["generalized_forces"])
    theirs = jb.io.read_storage(folder_of / "opensim" / "Results" / "subject01_InverseDynamics.sto")
    return done, ours, theirs, [str(w.message) for w in caught]


def _relative(ours, theirs) -> float:
    assert sorted(ours.labels) == sorted(theirs.labels)  # OpenSim's order is Simbody's tree order
    np.testing.assert_allclose(ours.time, theirs.time, rtol=0, atol=1e-12)
    d = ours.select(theirs.labels).data - theirs.data
    return float(np.abs(d).max() / np.abs(theirs.data).max())


def test_external_loads_beyond_the_data_are_extrapolated_as_opensim_does(subject01):
    """The ground reactions cut to 0.55–1.55 s inside the setup's 0.5–1.6 s: OpenSim extrapolates
    its splines of the data at the frames outside (jaxbio refused them before; opensim-models'
    walk_Setup_ID reaches t = -5e-7 s before its data this way). jaxbio warns, naming the span,
    and equals live OpenSim to 1e-6 relative (measured 5e-11)."""

    def edit(folder):
        _cut_rows(folder / "subject01_walk1_grf.mot", lambda t: 0.55 <= t <= 1.55)

    done, ours, theirs, caught = _id_both(subject01, edit)
    assert any("cover t = 0.55–1.55 s" in w and "extrapolated as OpenSim" in w for w in caught), caught
    assert _relative(ours, theirs) < 1e-6


def test_a_misspelt_motion_column_is_named_and_held_as_opensim_holds_it(subject01):
    """``hip_flexion_r`` misspelt in the motion: jaxbio warns for the column that names no
    coordinate and for the coordinate without a column (with the value it is held at, its
    default 0), returns them in ``ToolRun.matched``, and equals OpenSim, which does the same."""

    def edit(folder):
        mot = folder / "subject01_walk1_ik.mot"
        mot.write_text(mot.read_text().replace("\thip_flexion_r\t", "\thip_flexon_r\t", 1))
        shutil.copy(DATA / "subject01" / "subject01_walk1_grf.mot", folder)  # the full data again

    done, ours, theirs, caught = _id_both(subject01, edit)
    assert any("name no coordinate" in w and "hip_flexon_r" in w for w in caught), caught
    assert any("have no column" in w and "hip_flexion_r = 0 rad" in w for w in caught), caught
    assert done.matched.ignored_columns == ("hip_flexon_r",)
    assert done.matched.defaults == {"hip_flexion_r": 0.0}
    assert "hip_flexion_r" not in done.matched.coordinates and "knee_angle_r" in done.matched.coordinates
    assert set(done.matched.external_forces) == {"RightForce", "LeftForce"}
    assert done.matched.external_forces["RightForce"]["force"] == (
        "ground_force_vx",
        "ground_force_vy",
        "ground_force_vz",
    )
    assert any("hip_flexon_r" in w for w in done.warnings)
    assert _relative(ours, theirs) < 1e-6


_RESERVES = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="30000">
<ForceSet name="arm26_reserves">
<objects>
  <CoordinateActuator name="r_shoulder_reserve"><coordinate>r_shoulder_elev</coordinate>
    <optimal_force>5</optimal_force></CoordinateActuator>
  <CoordinateActuator name="r_shoulder_reserve"><coordinate>r_shoulder_elev</coordinate>
    <optimal_force>7</optimal_force></CoordinateActuator>
  <TorqueActuator name="elbow_torque"><bodyA>r_ulna_radius_hand</bodyA><bodyB>r_humerus</bodyB>
    <axis>0 0 1</axis><torque_is_global>false</torque_is_global><optimal_force>2</optimal_force></TorqueActuator>
  <PointActuator name="hand_push"><body>r_ulna_radius_hand</body><point>0 -0.2 0</point>
    <direction>1 0 0</direction><point_is_global>false</point_is_global><force_is_global>true</force_is_global>
    <optimal_force>3</optimal_force></PointActuator>
</objects>
<groups/>
</ForceSet>
</OpenSimDocument>
"""


def test_step_interval_frames_are_opensims():
    """The frames an analysis with ``step_interval`` records (``AnalyzeTool::run``): the first,
    those at a storage index that is a multiple of the interval, the last. opensim-core's
    ankle-spring setup (interval 10, 0.5–1.3 s of a 1 kHz motion starting at index 507) gives
    OpenSim's 0.500, 0.503, 0.513, … rows."""
    from types import SimpleNamespace

    from jaxbio.tools._static_optimization import _analysis_frames

    samples = np.round(np.arange(0, 2.5, 0.001), 6)
    frames = samples[500:1301]
    p = SimpleNamespace(time=frames, filtered=SimpleNamespace(time=samples))
    got = frames[_analysis_frames(p, 10)]
    assert got[:3].tolist() == [0.5, 0.51, 0.52] and got[-1] == 1.3 and got.size == 81
    p = SimpleNamespace(time=frames, filtered=SimpleNamespace(time=samples[7:]))  # index 493 first
    got = frames[_analysis_frames(p, 10)]
    assert got[:3].tolist() == [0.5, 0.507, 0.517] and got[-2:].tolist() == [1.297, 1.3]


@pytest.mark.slow  # arm26's wrapping paths: about a minute
def test_static_optimization_step_interval_point_torque_and_repeated_reserves(tmp_path):
    """arm26's static optimisation setup (Millard muscles) with ``step_interval`` 4, a force set file that names a
    reserve twice (OpenSim's ForceSet::append keeps the first) and torque and point actuators
    (unknowns of OpenSim's static optimisation like the muscles): runs unedited, writes OpenSim's
    rows (first, last, every 4th storage index) and columns, and agrees with live OpenSim:
    activations within 0.01, forces within OpenSim's arm26 test tolerance (4 N)."""
    for who in ("opensim", "jaxbio"):
        d = tmp_path / who
        shutil.copytree(DATA / "arm26_id", d)
        (d / "reserves.xml").write_text(_RESERVES)
        # OpenSim 4.6 refuses arm26's Thelen muscles (minimum_activation < 0.01): Millard ones, as
        # OpenSim's own test reads them
        model = d / "arm26.osim"
        model.write_text(re.sub(r"<(/?)Thelen2003Muscle\b", r"<\1Millard2012EquilibriumMuscle", model.read_text()))
        setup = d / "arm26_Setup_StaticOptimization.xml"
        text = setup.read_text()
        text = re.sub(
            r"<force_set_files>\s*</force_set_files>", "<force_set_files>reserves.xml</force_set_files>", text
        )
        text = re.sub(r"<step_interval>\s*1\s*</step_interval>", "<step_interval>4</step_interval>", text)
        text = re.sub(r"<final_time>[^<]*</final_time>", "<final_time>0.45</final_time>", text)
        setup.write_text(text)
    _opensim("AnalyzeTool", tmp_path / "opensim" / "arm26_Setup_StaticOptimization.xml")
    with pytest.warns(UserWarning, match=r"reserves\.xml: the model already has forces named \['r_shoulder_reserve'\]"):
        done = run_setup(tmp_path / "jaxbio" / "arm26_Setup_StaticOptimization.xml")
    for kind, name, tol in (("activation", "activations", 0.01), ("force", "forces", 4.0)):
        theirs = jb.io.read_storage(tmp_path / "opensim" / "Results" / f"arm26_StaticOptimization_{kind}.sto")
        ours = jb.io.read_storage(done.files[name])
        assert ours.time.size == theirs.time.size < 30
        np.testing.assert_allclose(ours.time, theirs.time, atol=1e-9)
        common = [c for c in theirs.labels if c in ours.labels]
        assert {"r_shoulder_reserve", "elbow_torque", "hand_push"} <= set(common)
        assert list(ours.labels) == [c for c in theirs.labels if c in ours.labels]
        d = np.abs(ours.select(common).data - theirs.select(common).data)
        assert d.max() <= tol, (kind, dict(zip(common, d.max(0))))
