"""What `jaxbio.tools.run_setup` does with the analyses of an ``AnalyzeTool`` setup that it does
not run (never dropped silently: named, with the files OpenSim would write), and its refusals of
``JointReaction`` setups it cannot run as OpenSim does (none of these computes anything: fast);
the muscles' path loads against their moment arms (slow). The reaction loads themselves are
compared with live OpenSim in ``tests/io/test_joint_reaction_opensim.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from jaxbio.tools import run_setup

DATA = Path(__file__).parent / "data"

_SETUP = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="30000">
<AnalyzeTool name="trial">
<model_file>{model}</model_file>
<results_directory>results</results_directory>
<AnalysisSet name="Analyses"><objects>
{analyses}
</objects></AnalysisSet>
<coordinates_file>{motion}</coordinates_file>
</AnalyzeTool>
</OpenSimDocument>
"""


def _setup(tmp: Path, analyses: str, model="arm26.osim", motion="motion.mot") -> Path:
    shutil.copy(DATA / "arm26.osim", tmp / "arm26.osim")
    (tmp / "motion.mot").write_text(
        "motion\nversion=1\nnRows=2\nnColumns=3\ninDegrees=yes\nendheader\n"
        "time\tr_shoulder_elev\tr_elbow_flex\n0\t0\t10\n0.01\t1\t11\n"
    )
    path = tmp / "setup.xml"
    path.write_text(_SETUP.format(model=model, motion=motion, analyses=analyses))
    return path


def test_analyses_jaxbio_does_not_run_are_named_not_dropped(tmp_path):
    setup = _setup(
        tmp_path,
        "<MuscleAnalysis name='MA'><on>true</on></MuscleAnalysis>"
        "<BodyKinematics name='BodyKinematics'><on>true</on></BodyKinematics>"
        "<Kinematics name='Kinematics'><on>false</on></Kinematics>",
    )
    with pytest.raises(ValueError) as e:
        run_setup(setup)
    message = str(e.value)
    assert "MuscleAnalysis 'MA'" in message and "trial_MA_{Length" in message
    assert "BodyKinematics 'BodyKinematics'" in message and "pos_global" in message
    assert "Kinematics 'Kinematics'" not in message  # <on> false: OpenSim does not run it either
    assert not (tmp_path / "results").exists()


def test_analyses_not_run_beside_one_that_runs_are_warned_about(tmp_path):
    setup = _setup(
        tmp_path,
        "<JointReaction name='JR'><joint_names>r_elbow</joint_names></JointReaction><Kinematics name='Kin'/>",
    )
    with pytest.warns(UserWarning, match=r"Kinematics 'Kin' \(OpenSim writes trial_Kin_\{q, u, dudt\}.sto\)"):
        with pytest.raises(ValueError, match="muscle 'TRIlong'"):  # the JointReaction itself: no forces file
            run_setup(setup)


def test_inverse_dynamics_beside_a_joint_reaction_is_refused_not_half_run(tmp_path):
    setup = _setup(
        tmp_path,
        "<InverseDynamics name='ID'><use_model_force_set>false</use_model_force_set></InverseDynamics>"
        "<JointReaction name='JR'/>",
    )
    with pytest.raises(ValueError, match=r"found \['InverseDynamics', 'JointReaction'\]"):
        run_setup(setup)


def test_an_analysis_set_with_nothing_on_is_refused(tmp_path):
    setup = _setup(tmp_path, "<JointReaction name='JR'><on>false</on></JointReaction>")
    with pytest.raises(ValueError, match="found none"):
        run_setup(setup)


@pytest.mark.parametrize(
    ("analysis", "match"),
    [
        (
            "<JointReaction name='JR'><joint_names>r_elbow</joint_names></JointReaction>",
            "act at points of bodies.*muscle 'TRIlong'",
        ),
        (
            "<JointReaction name='JR'><step_interval>0</step_interval></JointReaction>",
            "step_interval> must be a whole number",
        ),
    ],
)
def test_joint_reaction_setups_jaxbio_cannot_run_as_opensim_are_refused(tmp_path, analysis, match):
    with pytest.raises(ValueError, match=match):
        run_setup(_setup(tmp_path, analysis))
    assert not (tmp_path / "results").exists()


def test_joint_reaction_frames_are_read_as_opensim_names_them():
    import jaxbio as jb
    from jaxbio.tools._analyses import read_reaction_frames

    m = jb.io.load_osim(DATA / "gait10dof18musc.osim")
    with pytest.warns(UserWarning, match="'nothing' is not a joint"):
        f = read_reaction_frames(m, ["hip_r", "nothing", "knee_r"], ["child"], ["ground"])
    assert f.labels == ("hip_r_on_femur_r_in_ground", "knee_r_on_tibia_r_in_ground")
    f = read_reaction_frames(
        m, ["knee_r"] * 3, ["parent", "child", "CHILD"], ["knee_r/femur_r_offset", "child", "parent"]
    )
    assert f.labels == (
        "knee_r_on_femur_r_in_femur_r_offset",
        "knee_r_on_tibia_r_in_tibia_r",
        "knee_r_on_tibia_r_in_femur_r",
    )
    assert len(read_reaction_frames(m, ["ALL"]).labels) == len(m.joints)
    with pytest.raises(ValueError, match="express_in_frame> 'thorax' is neither"):
        read_reaction_frames(m, ["knee_r"], ["child"], ["thorax"])
    with pytest.raises(ValueError, match="apply_on_bodies> has 2 entries"):
        read_reaction_frames(m, ["knee_r", "hip_r", "back"], ["child", "parent"], ["ground"])
    with pytest.raises(ValueError, match="must be child or parent"):
        read_reaction_frames(m, ["knee_r"], ["distal"], ["ground"])


@pytest.mark.slow  # compiles the paths' moment arms
def test_muscle_path_loads_have_the_muscles_generalised_force():
    """`jaxbio.tools.muscle_path_wrenches` (what JointReaction applies: point forces at the path's
    points, conditional points off their range left out, moving points' generalised forces) does
    the virtual work of the tensions along the path length: ``Jᵀw + τ = rᵀT`` with ``r = −∂l/∂c``
    (gait10dof18musc: conditional and moving points)."""
    import jax
    import jax.numpy as jnp

    import jaxbio as jb
    from jaxbio.forces._osim_paths import path_moment_arms

    with jax.enable_x64(True):
        m = jb.io.load_osim(DATA / "gait10dof18musc.osim", dtype=jnp.float64)
        c = m.defaults + 0.3 * jnp.sin(jnp.arange(len(m.coordinate_names)) + 1.0)
        z = jnp.zeros_like(c)
        tensions = 100.0 + 10.0 * jnp.arange(len(m.muscles.names))

        @jax.jit
        def both(m, c, tensions):
            f, mm, tau = jb.tools.muscle_path_wrenches(m, c, tensions)
            jtw = jb.inverse_dynamics(m, c, z, z) - jb.inverse_dynamics(m, c, z, z, (f, mm))
            return jtw, tau, path_moment_arms(m.muscles, m, c)

        jtw, tau, r = both(m, c, tensions)
        np.testing.assert_allclose(jtw + tau, r.T @ tensions, rtol=0, atol=1e-11)
        assert float(jnp.max(jnp.abs(tau))) > 1.0  # the moving points' part is there (vasti, rectus femoris)
