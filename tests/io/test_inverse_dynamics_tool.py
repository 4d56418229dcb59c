"""OpenSim's InverseDynamicsTool on jaxbio (`jaxbio.io.inverse_dynamics_tool`, ``jaxbio
inverse-dynamics``, ``jaxbio run-tool``), against OpenSim's own results:

- subject01 (3D, 23 DOF, CustomJoints with spline-coupled knees) walking with ground reactions on
  both feet: OpenSim's standard ``std_subject01_InverseDynamics.sto`` within OpenSim's own test
  tolerance (2.0 N·m / N, ``testID.cpp``), and OpenSim 4.6 run live on the same setup (tight);
- arm26 through its AnalyzeTool setup file: the standard within 1e-2 N·m;
- external loads expressed in a body's frame against the lever-arm closed form of a pendulum.
"""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.cli import main
from jaxbio.tools._inverse_dynamics import inverse_dynamics_tool

DATA = Path(__file__).parent / "data"
S01 = DATA / "subject01"


def _matched(result, reference):
    """``reference``'s columns in ``result``'s order, interpolated at its times."""
    idx = [reference.labels.index(label) for label in result.labels]
    return np.stack([np.interp(result.time, reference.time, reference.data[:, j]) for j in idx], 1)


@pytest.fixture(scope="module")
def subject01():
    with jax.enable_x64(True):
        return inverse_dynamics_tool(
            S01 / "subject01.osim",
            S01 / "subject01_walk1_ik.mot",
            external_loads=S01 / "subject01_walk1_grf.xml",
            lowpass_hz=6.0,
            start=0.5,
            end=1.6,
            dtype=jnp.float64,
        )


def test_gait_with_ground_reactions_matches_opensims_standard(subject01):
    std = jb.io.read_storage(S01 / "std_subject01_InverseDynamics.sto")
    assert set(subject01.labels) == set(std.labels)
    assert subject01.time.size == 67 and np.isclose(subject01.time[0], 0.5, atol=1e-6)
    err = np.abs(subject01.data - _matched(subject01, std)).max(0)
    assert err.max() < 2.0, dict(zip(subject01.labels, err))  # OpenSim's testGait tolerance
    # the ground reactions matter: without them the pelvis residual forces are body weight
    assert np.abs(subject01.data[:, subject01.labels.index("pelvis_ty_force")]).max() < 300


def test_gait_with_ground_reactions_matches_live_opensim(subject01, tmp_path, monkeypatch):
    opensim = pytest.importorskip("opensim")
    work = tmp_path / "s01"
    shutil.copytree(S01, work)
    monkeypatch.chdir(work)  # OpenSim 4.6 reads the setup's model_file relative to the working directory
    opensim.InverseDynamicsTool(str(work / "subject01_Setup_InverseDynamics.xml")).run()
    live = jb.io.read_storage(work / "Results" / "subject01_InverseDynamics.sto")
    np.testing.assert_allclose(live.time, subject01.time, atol=1e-12)
    # measured 1e-4 N·m / N (the ground-reaction splines: GCVSPL's near-interpolation vs scipy's)
    np.testing.assert_allclose(subject01.data, _matched(subject01, live), atol=2e-3)


def test_run_tool_on_opensims_setup_files(tmp_path, capsys):
    work = tmp_path / "arm26"
    shutil.copytree(DATA / "arm26_id", work)
    assert main(["run-tool", str(work / "arm26_Setup_InverseDynamics.xml"), "--no-progress"]) == 0
    got = jb.io.read_storage(work / "Results" / "arm26_InverseDynamics.sto")
    std = jb.io.read_storage(work / "std_arm26_InverseDynamics.sto")
    assert got.labels == ("r_shoulder_elev_moment", "r_elbow_flex_moment")
    assert np.abs(got.data - _matched(got, std)).max() < 1e-2  # OpenSim's testArm26 tolerance
    assert "wrote" in capsys.readouterr().out


def test_run_tool_runs_a_session_of_setups_in_one_call(tmp_path, capsys):
    """``run-tool A.xml FOLDER 'GLOB'``: each setup in turn in one process, outputs equal to one
    call per setup; a folder contributes its tool setups only; the first failing setup stops the
    session with one line and exit 2, after the outputs of those before it were written."""
    single, a, b = (tmp_path / n for n in ("single", "a", "b"))
    for d in (single, a, b):
        shutil.copytree(DATA / "arm26_id", d)
    setup = "arm26_Setup_InverseDynamics.xml"
    assert main(["run-tool", str(single / setup), "--no-progress"]) == 0
    expected = (single / "Results" / "arm26_InverseDynamics.sto").read_bytes()
    capsys.readouterr()
    # a file, a folder (its tool setups; other .xml files are skipped) and a glob
    (b / "arm26_Setup_StaticOptimization.xml").unlink()  # (static optimisation's first compile is long)
    (b / "not_a_setup.xml").write_text("<ExternalLoads/>")
    assert main(["run-tool", str(a / setup), str(b), "--no-progress"]) == 0
    assert (a / "Results" / "arm26_InverseDynamics.sto").read_bytes() == expected
    assert (b / "Results" / "arm26_InverseDynamics.sto").read_bytes() == expected
    assert capsys.readouterr().out.count("wrote") == 2
    for f in (a / "Results").iterdir():
        f.unlink()
    assert main(["run-tool", str(tmp_path / "[a]" / "*InverseDynamics.xml"), "--no-progress"]) == 0
    assert (a / "Results" / "arm26_InverseDynamics.sto").read_bytes() == expected
    # a failing second setup: the first one's output is written, then one line, exit 2
    broken = tmp_path / "broken.xml"
    broken.write_text("<OpenSimDocument><InverseDynamicsTool/></OpenSimDocument>")
    (single / "Results" / "arm26_InverseDynamics.sto").unlink()
    capsys.readouterr()
    assert main(["run-tool", str(single / setup), str(broken), "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert (single / "Results" / "arm26_InverseDynamics.sto").read_bytes() == expected
    assert err.count("\n") == 1 and "broken.xml" in err
    assert main(["run-tool", str(tmp_path / "nothing*.xml")]) == 2
    assert "no file matches" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "loads.xml").write_text("<ExternalLoads/>")
    assert main(["run-tool", str(tmp_path / "empty")]) == 2  # a folder with no setup in it
    assert "no InverseKinematicsTool, InverseDynamicsTool, AnalyzeTool or ScaleTool setup" in capsys.readouterr().err


def test_tools_run_from_python_equals_the_command_line(tmp_path, capsys):
    """`jaxbio.tools.run`: a session of setups from Python writes the files ``run-tool`` writes,
    byte for byte, returns the tables it wrote, leaves the process's float64 setting as it was,
    and names the setup file of a bad setup in its ``ValueError``."""
    single, a, b = (tmp_path / n for n in ("single", "a", "b"))
    for d in (single, a, b):
        shutil.copytree(DATA / "arm26_id", d)
        (d / "arm26_Setup_StaticOptimization.xml").unlink()  # (static optimisation's first compile is long)
    setup = "arm26_Setup_InverseDynamics.xml"
    assert main(["run-tool", str(single / setup), "--no-progress"]) == 0
    expected = (single / "Results" / "arm26_InverseDynamics.sto").read_bytes()
    x64 = jax.config.jax_enable_x64
    with jax.enable_x64(False):
        runs = jb.tools.run([a / setup, str(b)], progress=False)
        assert not jax.config.jax_enable_x64
    assert jax.config.jax_enable_x64 == x64
    assert [r.setup for r in runs] == [a / setup, b / setup]
    for run, d in zip(runs, (a, b)):
        written = d / "Results" / "arm26_InverseDynamics.sto"
        assert run.files == {"generalized_forces": written} and written.read_bytes() == expected
        table = run.tables["generalized_forces"]
        assert table.data.dtype == np.float64
        np.testing.assert_array_equal(table.data, jb.io.read_storage(written).data)
    assert jb.tools.setup_files(str(tmp_path / "[ab]" / "*InverseDynamics.xml")) == [a / setup, b / setup]
    broken = tmp_path / "broken.xml"
    broken.write_text("<OpenSimDocument><InverseDynamicsTool/></OpenSimDocument>")
    with pytest.raises(ValueError, match="broken.xml: <InverseDynamicsTool> has no <model_file>"):
        jb.tools.run(broken)


def test_external_loads_in_a_body_frame_act_through_their_lever_arms(tmp_path):
    # double pendulum (rods 1 m, pivot at the origin, angles from hanging down); a force given in
    # rod2's frame at rod2's point (0, -0.5, 0), a torque in rod2's frame: Δτ = −Jᵀ[F; T]
    (tmp_path / "loads.mot").write_text(
        textwrap.dedent("""\
        loads
        version=1
        nRows=4
        nColumns=10
        inDegrees=no
        endheader
        time\tf_x\tf_y\tf_z\tp_x\tp_y\tp_z\tm_x\tm_y\tm_z
        0\t3\t-2\t0\t0\t-0.5\t0\t0\t0\t0.7
        1\t3\t-2\t0\t0\t-0.5\t0\t0\t0\t0.7
        2\t3\t-2\t0\t0\t-0.5\t0\t0\t0\t0.7
        3\t3\t-2\t0\t0\t-0.5\t0\t0\t0\t0.7
        """)
    )
    (tmp_path / "loads.xml").write_text(
        textwrap.dedent("""\
        <?xml version="1.0" encoding="UTF-8" ?>
        <OpenSimDocument Version="40000"><ExternalLoads><objects>
          <ExternalForce name="push"><applied_to_body>rod2</applied_to_body>
            <force_expressed_in_body>rod2</force_expressed_in_body><point_expressed_in_body>rod2</point_expressed_in_body>
            <force_identifier>f_</force_identifier><point_identifier>p_</point_identifier>
            <torque_identifier>m_</torque_identifier></ExternalForce>
        </objects><datafile>loads.mot</datafile></ExternalLoads></OpenSimDocument>
        """)
    )
    t = np.linspace(0.0, 3.0, 31)
    a, b = 0.4 + 0.3 * np.sin(t), -0.8 + 0.5 * t
    motion = jb.io.Table(time=t, labels=("rod1", "rod2"), data=np.stack([a, b], 1))
    with jax.enable_x64(True):
        loaded = inverse_dynamics_tool(
            "double_pendulum", motion, external_loads=tmp_path / "loads.xml", dtype=jnp.float64
        )
        free = inverse_dynamics_tool("double_pendulum", motion, dtype=jnp.float64)
    assert loaded.labels == ("rod1_moment", "rod2_moment")
    down = lambda th: np.stack([np.sin(th), -np.cos(th)], -1)
    R = lambda th: np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]]).transpose(2, 0, 1)
    F = np.einsum("tij,j->ti", R(a + b), [3.0, -2.0])
    X = down(a) + 0.5 * down(a + b)  # world point: elbow + R(a+b) (0, -0.5)
    cross = lambda r, f: r[:, 0] * f[:, 1] - r[:, 1] * f[:, 0]
    expect = np.stack([-(cross(X, F) + 0.7), -(cross(X - down(a), F) + 0.7)], 1)
    np.testing.assert_allclose(loaded.data - free.data, expect, atol=1e-10)


def test_inverse_dynamics_command_writes_opensims_layout(tmp_path, capsys):
    out = tmp_path / "id.sto"
    code = main(
        [
            "inverse-dynamics",
            "--model",
            str(DATA / "arm26.osim"),
            "--motion",
            str(DATA / "arm26_id" / "arm26_InverseKinematics.mot"),
            "--lowpass",
            "6",
            "--start",
            "0.2",
            "--end",
            "0.3",
            "--output",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0 and "wrote" in capsys.readouterr().out
    text = out.read_text().splitlines()
    assert text[1:5] == ["version=1", "nRows=13", "nColumns=3", "inDegrees=no"]
    assert text[6] == "time\tr_shoulder_elev_moment\tr_elbow_flex_moment"
    std = jb.io.read_storage(DATA / "arm26_id" / "std_arm26_InverseDynamics.sto")
    got = jb.io.read_storage(out)
    assert np.abs(got.data - _matched(got, std)).max() < 1e-3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "nothere.osim", "--motion", "x.mot"], "nothere.osim"),
        (
            ["--model", str(DATA / "arm26.osim"), "--motion", str(S01 / "subject01_walk1_ik.mot")],
            "none of the model's coordinates",
        ),
        (
            [
                "--model",
                str(DATA / "arm26.osim"),
                "--motion",
                str(DATA / "arm26_id" / "arm26_InverseKinematics.mot"),
                "--start",
                "5",
            ],
            "start",
        ),
        (
            [
                "--model",
                str(S01 / "subject01.osim"),
                "--motion",
                str(S01 / "subject01_walk1_ik.mot"),
                "--external-loads",
                str(DATA / "arm26.osim"),
            ],
            "ExternalLoads",
        ),
        (["--output", "x.sto"], "need --motion"),
    ],
)
def test_inverse_dynamics_command_refuses_bad_input_in_one_line(args, message, capsys):
    assert main(["id", "--no-progress"] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxbio: error:") and message in err[0], err


def test_external_loads_must_name_three_columns_and_known_bodies(tmp_path):
    shutil.copy(S01 / "subject01_walk1_grf.mot", tmp_path / "grf.mot")
    xml = (S01 / "subject01_walk1_grf.xml").read_text().replace("subject01_walk1_grf.mot", "grf.mot")
    (tmp_path / "a.xml").write_text(xml.replace("<force_identifier>ground_force_v", "<force_identifier>ground_force_"))
    (tmp_path / "b.xml").write_text(xml.replace("<applied_to_body>calcn_r", "<applied_to_body>heel"))
    with jax.enable_x64(True):
        for name, message in (("a.xml", "must match exactly 3 data columns"), ("b.xml", "'heel' is not a body")):
            with pytest.raises(ValueError, match=message):
                inverse_dynamics_tool(
                    S01 / "subject01.osim",
                    S01 / "subject01_walk1_ik.mot",
                    external_loads=tmp_path / name,
                    start=0.5,
                    end=0.6,
                )


@pytest.mark.slow
def test_animate_command_draws_a_motion_file(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "arm.gif"
    code = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from jaxbio.cli import main; sys.exit(main(sys.argv[1:]))",
            "animate",
            "--model",
            str(DATA / "arm26.osim"),
            "--motion",
            str(DATA / "arm26_id" / "arm26_InverseKinematics.mot"),
            "--output",
            str(out),
            "--fps",
            "4",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert code.returncode == 0, code.stderr
    assert "wrote" in code.stdout and out.read_bytes()[:3] == b"GIF"


def test_a_written_motion_plays_in_opensim_on_the_same_model(tmp_path):
    # jaxbio writes a .mot of gait10dof18musc's coordinates (degrees for the angles); OpenSim reads
    # it with its own reader, sets the coordinates and places the bodies where jaxbio does
    opensim = pytest.importorskip("opensim")
    with jax.enable_x64(True):
        m = jb.io.load_osim(DATA / "gait10dof18musc.osim", dtype=jnp.float64)
        lo, hi = np.asarray(m.ranges).T
        t = np.linspace(0.0, 1.0, 5)
        c = lo + (hi - lo) * np.random.default_rng(0).uniform(0.3, 0.7, (t.size, lo.size))
        jb.io.write_sto(tmp_path / "motion.mot", jb.io.coordinates_table(m, t, c))
        q = jax.vmap(lambda x: jb.coordinates.to_tree(m.coordinates, x))(jnp.asarray(c))
        pos, att = jax.vmap(jb.forward_kinematics, (None, 0))(m.tree, q)
    model = opensim.Model(str(DATA / "gait10dof18musc.osim"))
    model.updForceSet().clearAndDestroy()
    state = model.initSystem()
    table = opensim.TimeSeriesTable(str(tmp_path / "motion.mot"))
    assert table.getTableMetaDataAsString("inDegrees") == "yes"
    labels = list(table.getColumnLabels())
    for k in range(t.size):
        row = table.getRowAtIndex(k)
        for j, label in enumerate(labels):
            coord = model.getCoordinateSet().get(label)
            value = row[j] * (np.pi / 180 if coord.getMotionType() == 1 else 1.0)  # 1: Rotational
            coord.setValue(state, value, False)
        model.realizePosition(state)
        for b in ("pelvis", "tibia_r", "calcn_l", "torso"):
            body = model.getBodySet().get(b)
            seg, p_in_seg, o_in_seg = m.body_frame(b)
            R = np.asarray(jb.quaternion.to_matrix(att[k, seg]))
            expect = np.asarray(pos[k, seg]) + R @ np.asarray(p_in_seg)
            got = body.getPositionInGround(state)
            np.testing.assert_allclose([got.get(i) for i in range(3)], expect, atol=1e-9)
