"""OpenSim's ``JointReaction`` analysis (``AnalyzeTool``) run unedited by `jaxbio.tools.run_setup`
and by live OpenSim 4.6 on the same setup, compared: file name, columns, rows, times and every
reaction load to 1e-6 relative.

Each setup is made here, its ForceSet replaced by a force set file of coordinate actuators (their
forces from a ``forces_file``, as after static optimisation), a coordinate limit force and a
spring (and, on the built model, point and torque actuators); loads on the child and on the parent, expressed in the ground, a body, a joint's offset
frame and the ``child`` / ``parent`` keywords. The fast test: a pendulum that OpenSim's API builds
(a pin joint between offset frames), a coordinates file, ``step_interval`` 2; the slow variant a
two-body arm (a gimbal and a pin joint).
The slow ones, on the repository's copies of OpenSim's example files (``tests/io/data``,
provenance in its README.md): gait10dof18musc (4.x: pin, custom and weld joints) walking with
its ground reactions, filtered at 6 Hz, ``step_interval`` 3; the 3.x gait10dof18musc from a
states file in OpenSim 4's labels. Live OpenSim runs in a subprocess (it changes the working
directory and logs to a file).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from jaxbio.io import read_storage
from jaxbio.tools import run_setup

DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

_OPENSIM = (
    "import sys, opensim; opensim.Logger.removeFileSink(); opensim.Logger.setLevelString('error'); "
    "sys.exit(0 if opensim.AnalyzeTool(sys.argv[1]).run() else 3)"
)

_FORCES = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="30000">
<ForceSet name="jr">
<objects>
{actuators}
<CoordinateLimitForce name="knee_limit"><coordinate>{knee}</coordinate>
<upper_stiffness>20</upper_stiffness><upper_limit>-10</upper_limit><lower_stiffness>20</lower_stiffness>
<lower_limit>-60</lower_limit><damping>0.5</damping><transition>5</transition></CoordinateLimitForce>
<SpringGeneralizedForce name="spring"><coordinate>{spring}</coordinate><stiffness>30</stiffness>
<rest_length>0.1</rest_length><viscosity>2</viscosity></SpringGeneralizedForce>
</objects>
</ForceSet>
</OpenSimDocument>
"""

_SETUP = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="30000">
<AnalyzeTool name="jr">
<model_file>{model}</model_file>
<replace_force_set>{replace}</replace_force_set>
<force_set_files>forces.xml</force_set_files>
<results_directory>results</results_directory>
<initial_time>{t0}</initial_time>
<final_time>{t1}</final_time>
<AnalysisSet name="Analyses"><objects>
<JointReaction name="JointReaction">
<on>true</on><step_interval>{interval}</step_interval><in_degrees>true</in_degrees>
<forces_file>actuation.sto</forces_file>
<joint_names>{joints}</joint_names>
<apply_on_bodies>{on}</apply_on_bodies>
<express_in_frame>{frames}</express_in_frame>
</JointReaction>
</objects></AnalysisSet>
<external_loads_file>{loads}</external_loads_file>
<states_file>{states}</states_file>
<coordinates_file>{coordinates}</coordinates_file>
<lowpass_cutoff_frequency_for_coordinates>{lowpass}</lowpass_cutoff_frequency_for_coordinates>
</AnalyzeTool>
</OpenSimDocument>
"""


def _actuation(path: Path, names, t0: float, t1: float) -> None:
    """A smooth ``forces_file`` for ``names`` over [t0 − 0.1, t1 + 0.1] s (N·m / N)."""
    t = np.linspace(t0 - 0.1, t1 + 0.1, 57)
    cols = [40 * np.sin(7 * t + k) + 5 * k + 100 for k in range(len(names))]
    lines = ["actuation", "version=1", f"nRows={t.size}", f"nColumns={len(names) + 1}", "inDegrees=no", "endheader"]
    lines.append("\t".join(["time", *names]))
    lines += ["\t".join(f"{v:.17g}" for v in row) for row in np.column_stack([t, *cols])]
    path.write_text("\n".join(lines) + "\n")


def _both(tmp: Path, files: dict, setup: dict, actuators: dict, muscles=(), others=None) -> tuple:
    """Write the setup into two copies (``opensim``, ``jaxbio``), run each; the two result files.
    ``muscles``: the model's muscles, kept (``replace_force_set`` false), their forces in the file;
    ``others``: more actuators, ``{name: xml}``, in the force set file and the forces file."""
    others = others or {}
    setup = dict(setup, replace="false" if muscles else "true")
    acts = "\n".join(
        f'<CoordinateActuator name="{n}"><coordinate>{c}</coordinate><optimal_force>{f}</optimal_force></CoordinateActuator>'
        for n, (c, f) in actuators.items()
    ) + "\n".join(others.values())
    out = {}
    for who in ("opensim", "jaxbio"):
        d = tmp / who
        d.mkdir()
        for name, src in files.items():
            shutil.copy(src, d / name)
        (d / "forces.xml").write_text(_FORCES.format(actuators=acts, **setup))
        _actuation(d / "actuation.sto", [*actuators, *others, *muscles], float(setup["t0"]), float(setup["t1"]))
        (d / "setup.xml").write_text(_SETUP.format(**setup))
        if who == "opensim":
            r = subprocess.run([sys.executable, "-c", _OPENSIM, "setup.xml"], cwd=d, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-2000:]
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # unread columns of the motion: warned, not asserted here
                done = run_setup(d / "setup.xml")
            assert set(done.files) == {"reaction_loads"}
        out[who] = read_storage(d / "results" / "jr_JointReaction_ReactionLoads.sto")
    return out["jaxbio"], out["opensim"]


def _compare(ours, theirs) -> float:
    assert ours.labels == theirs.labels
    assert ours.time.shape == theirs.time.shape
    np.testing.assert_allclose(ours.time, theirs.time, atol=1e-12)
    scale = np.abs(theirs.data).max(axis=0, keepdims=True) + 1.0  # per column; 1 N / N·m / m floor
    return float(np.max(np.abs(ours.data - theirs.data) / scale))


@pytest.mark.parametrize("arm", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["pin", "arm"])
def test_joint_reaction_loads_equal_opensims_on_a_built_model(tmp_path, arm):
    osim = pytest.importorskip("opensim")
    v = osim.Vec3
    m = osim.Model()
    m.setName("arm")
    upper = osim.Body("upper", 2.0, v(0.02, -0.15, 0.01), osim.Inertia(0.02, 0.003, 0.021, 0.001, 0.0005, -0.0007))
    m.addBody(upper)
    kind = osim.GimbalJoint if arm else osim.PinJoint
    m.addJoint(kind("shoulder", m.getGround(), v(0.1, 1.5, 0.05), v(0.1, 0.2, 0.3), upper, v(0, 0.02, 0), v(0, 0, 0.1)))
    names = ["shoulder_coord_0", "shoulder_coord_1", "shoulder_coord_2"] if arm else ["shoulder_coord_0"]
    joints, on, frames = "shoulder shoulder shoulder", "child parent parent", "ground upper shoulder/upper_offset"
    if arm:
        lower = osim.Body("lower", 1.2, v(0, -0.12, 0.02), osim.Inertia(0.01, 0.002, 0.011, 0, 0, 0))
        m.addBody(lower)
        m.addJoint(osim.PinJoint("elbow", upper, v(0, -0.3, 0), v(0.2, 0, 0), lower, v(0, 0.01, 0), v(0, 0.1, 0)))
        names.append("elbow_coord_0")
        joints, on = joints + " elbow elbow elbow", on + " child parent parent"
        frames += " elbow/upper_offset child parent"
    m.finalizeConnections()
    m.printToXML(str(tmp_path / "arm.osim"))
    t = np.round(np.arange(0.0, 0.2, 0.01), 10)
    q = np.column_stack([0.3 * np.sin((k + 2) * t + k) for k in range(len(names))])
    lines = ["motion", "version=1", f"nRows={t.size}", f"nColumns={len(names) + 1}", "inDegrees=no", "endheader"]
    lines += ["\t".join(["time", *names])] + ["\t".join(f"{x:.17g}" for x in row) for row in np.column_stack([t, q])]
    (tmp_path / "motion.sto").write_text("\n".join(lines) + "\n")
    files = {"model.osim": tmp_path / "arm.osim", "motion.sto": tmp_path / "motion.sto"}
    setup = dict(
        model="model.osim",
        t0="0.02",
        t1="0.17",
        interval="2",
        joints=joints,
        on=on,
        frames=frames,
        loads="",
        states="",
        coordinates="motion.sto",
        lowpass="-1",
        knee=names[-1],
        spring=names[0],
    )
    actuators = {"sh_act": (names[0], 100), "el_act": (names[-1], 50)}
    others = {  # reserves of gait2392's kind: forces and torques on bodies
        "FX": "<PointActuator name='FX'><body>upper</body><point>0.01 -0.1 0.02</point><point_is_global>false"
        "</point_is_global><direction>0.6 0.8 0</direction><force_is_global>true</force_is_global>"
        "<optimal_force>1</optimal_force></PointActuator>",
        "FY": "<PointActuator name='FY'><body>upper</body><point>0.1 1.4 0</point><point_is_global>true"
        "</point_is_global><direction>0 0.6 0.8</direction><force_is_global>false</force_is_global>"
        "<optimal_force>1</optimal_force></PointActuator>",
        "MX": "<TorqueActuator name='MX'><bodyA>upper</bodyA><bodyB>ground</bodyB><torque_is_global>true"
        "</torque_is_global><axis>1 0 0</axis><optimal_force>1</optimal_force></TorqueActuator>",
        "MZ": "<TorqueActuator name='MZ'><bodyA>upper</bodyA><bodyB>ground</bodyB><torque_is_global>false"
        "</torque_is_global><axis>0 0.6 0.8</axis><optimal_force>1</optimal_force></TorqueActuator>",
    }
    ours, theirs = _both(tmp_path, files, setup, actuators, others=others)
    assert ours.time.size == 9  # 0.02 (first), 0.04, 0.06, …, 0.16, 0.17 (last)
    assert _compare(ours, theirs) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("with_muscles", [False, True], ids=["reserves", "muscles"])
def test_joint_reaction_loads_equal_opensims_gait10dof(tmp_path, with_muscles):
    pytest.importorskip("opensim")
    spring = DATA / "so_spring"
    files = {
        "model.osim": DATA / "gait10dof18musc.osim",
        "motion.sto": spring / "walk_subject01_Kinematics_q.sto",
        "loads.xml": spring / "externalForces.xml",
        "subject01_walk1_grf.mot": spring / "subject01_walk1_grf.mot",
    }
    setup = dict(
        model="model.osim",
        t0="0.8",
        t1="0.92",
        interval="3",
        joints="ground_pelvis hip_r knee_r ankle_r mtp_r back knee_l",
        on="child parent child parent child parent parent",
        frames="ground child parent pelvis knee_r/femur_r_offset tibia_l ground",
        loads="loads.xml",
        states="",
        coordinates="motion.sto",
        lowpass="6",
        knee="knee_angle_r",
        spring="ankle_angle_l",
    )
    actuators = {"hip_r_act": ("hip_flexion_r", 100), "knee_r_act": ("knee_angle_r", 50), "tx_act": ("pelvis_tx", 200)}
    import jaxbio as jb

    muscles = jb.io.load_osim(files["model.osim"]).muscles.names if with_muscles else ()
    ours, theirs = _both(tmp_path, files, setup, actuators, muscles)
    assert ours.time.size >= 4
    assert _compare(ours, theirs) < 1e-6


@pytest.mark.slow
def test_joint_reaction_loads_equal_opensims_from_a_states_file_3x(tmp_path):
    pytest.importorskip("opensim")
    import jax
    import jax.numpy as jnp

    import jaxbio as jb
    from jaxbio.io import format_sto

    s01 = DATA / "subject01"
    with jax.enable_x64(True):
        model = jb.io.load_osim(DATA / "gait10dof18musc_3x.osim", dtype=jnp.float64)
        # a states file in OpenSim 4's labels: values and speeds of every coordinate at 0.01 s
        t = np.arange(0.6, 0.75, 0.01)
        c = np.asarray(model.defaults)[None] + 0.05 * np.sin(np.outer(t, 1 + np.arange(len(model.coordinate_names))))
        cd = (
            0.2
            * np.cos(np.outer(t, 1 + np.arange(len(model.coordinate_names))))
            * (1 + np.arange(len(model.coordinate_names)))
        )
    labels, cols = [], []
    for k, n in enumerate(model.coordinate_names):
        j = model.joints[model.coordinate_joints[k]]
        labels += [f"/jointset/{j}/{n}/value", f"/jointset/{j}/{n}/speed"]
        cols += [c[:, k], cd[:, k]]
    states = jb.io.Table(time=t, labels=tuple(labels), data=np.column_stack(cols), in_degrees=False, name="states")
    path = tmp_path / "states.sto"
    path.write_text(format_sto(states))
    files = {
        "model.osim": DATA / "gait10dof18musc_3x.osim",
        "states.sto": path,
        "loads.xml": s01 / "subject01_walk1_grf.xml",
        "subject01_walk1_grf.mot": s01 / "subject01_walk1_grf.mot",
    }
    setup = dict(
        model="model.osim",
        t0="0.605",
        t1="0.7",
        interval="2",
        joints="ALL",
        on="parent",
        frames="child",
        loads="loads.xml",
        states="states.sto",
        coordinates="",
        lowpass="-1",
        knee="knee_angle_r",
        spring="ankle_angle_l",
    )
    actuators = {"hip_r_act": ("hip_flexion_r", 100), "lumbar_act": ("lumbar_extension", 50)}
    ours, theirs = _both(tmp_path, files, setup, actuators)
    assert _compare(ours, theirs) < 1e-6


@pytest.mark.slow
def test_joint_reaction_loads_with_wrapping_muscles_equal_opensims_arm26(tmp_path):
    """arm26's muscles (wrap cylinders and an ellipsoid) pulling with a forces file's tensions."""
    pytest.importorskip("opensim")
    import jaxbio as jb

    arm = DATA / "arm26_id"
    files = {"model.osim": DATA / "arm26.osim", "motion.mot": arm / "arm26_InverseKinematics.mot"}
    setup = dict(
        model="model.osim",
        t0="0.1",
        t1="0.4",
        interval="5",
        joints="r_shoulder r_elbow r_elbow",
        on="child child parent",
        frames="ground r_humerus child",
        loads="",
        states="",
        coordinates="motion.mot",
        lowpass="-1",
        knee="r_elbow_flex",
        spring="r_shoulder_elev",
    )
    muscles = jb.io.load_osim(files["model.osim"]).muscles.names
    ours, theirs = _both(tmp_path, files, setup, {"elbow_act": ("r_elbow_flex", 10)}, muscles)
    assert _compare(ours, theirs) < 1e-6


MODELS = Path(os.environ.get("JAXBIO_OPENSIM_MODELS", "/work/om"))


@pytest.mark.slow
def test_the_joint_reaction_tutorial_equals_opensim(tmp_path):
    """opensim-models' ``Tutorials/Estimating_Joint_Reaction_Loads/setup_JointReaction.xml``
    unedited (gait2392: 92 muscles with wrap objects, point and torque residual actuators, ground
    reactions), its inputs as the tutorial's steps leave them: the model saved under the name the
    setup reads, the reference static-optimisation forces where its Windows ``forces_file`` path
    points (for OpenSim on Linux: a file whose name holds the backslash)."""
    pytest.importorskip("opensim")
    tutorial = MODELS / "Tutorials" / "Estimating_Joint_Reaction_Loads"
    if not tutorial.is_dir():
        pytest.skip(f"no opensim-models at {MODELS} (set JAXBIO_OPENSIM_MODELS)")
    forces = tutorial / "OutputReference" / "ResultsStaticOptimization" / "subject01_StaticOptimization_force.sto"
    out = {}
    for who in ("opensim", "jaxbio"):
        d = tmp_path / who
        shutil.copytree(tutorial, d)
        shutil.copy(d / "subject01_simbody_adjusted_StaticOp.osim", d / "subject01_simbody_adjusted.osim")
        (d / "ResultsStaticOptimization").mkdir()
        shutil.copy(forces, d / "ResultsStaticOptimization" / forces.name)
        shutil.copy(forces, d / f"ResultsStaticOptimization\\{forces.name}")
        if who == "opensim":
            r = subprocess.run(
                [sys.executable, "-c", _OPENSIM, "setup_JointReaction.xml"], cwd=d, capture_output=True, text=True
            )
            assert r.returncode == 0, r.stderr[-2000:]
        else:
            with pytest.warns(UserWarning, match="backslashes are read as folder separators"):
                run_setup(d / "setup_JointReaction.xml")
        out[who] = read_storage(d / "ResultsStaticOptimization" / "subject01_JointReaction_ReactionLoads.sto")
    assert out["jaxbio"].time.size == 151
    assert _compare(out["jaxbio"], out["opensim"]) < 1e-6
