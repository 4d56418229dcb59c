"""``jaxbio run-tool`` on the IK setup of every opensim-models pipeline with markers, against
OpenSim 4.6's ``InverseKinematicsTool`` run live on the same files (``$JAXBIO_OSIM_LIBRARY``,
default ``/work/om``; skipped when absent or without OpenSim).

Each setup is run as it stands, on the first frames of its time range (``FRAMES``: OpenSim
takes up to 0.15 s a frame). The pipelines' setups name the model that their Scale step writes;
the test puts a model of the library there: the scaled model the library ships where it has
one (Gait2354, Gait2392, Gait10dof18musc's ``subject01.osim``, Hamner's
``outputReference/subject02_registered.osim``), the generic one otherwise (Leg39, Rajagopal's
``Rajagopal2016.osim``). Both motions are evaluated with jaxbio's goal (whose markers equal
OpenSim's, `tests/io/test_ik.py`): at every frame jaxbio's is no larger than OpenSim's + 1e-9;
both write the marker-error file for the same frames.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

LIBRARY = Path(os.environ.get("JAXBIO_OSIM_LIBRARY", "/work/om"))
FRAMES = 12  # per pipeline; the slow test (OpenSim alone takes 2–20 s a pipeline, jaxbio compiles each)

#: pipeline: (its IK setup, the model put where the setup names it), both relative to LIBRARY
PIPELINES = {
    "leg39": ("Pipelines/Leg39/leg39_swing_short_IK_Setup.xml", "Models/Leg39/leg39.osim"),
    "gait2354": ("Pipelines/Gait2354_Simbody/subject01_Setup_IK.xml", "Models/Gait2354_Simbody/subject01_simbody.osim"),
    "gait2392": (
        "Pipelines/Gait2392_Simbody/subject01_Setup_IK.xml",
        "Pipelines/Gait2392_Simbody/OutputReference/subject01_simbody.osim",
    ),
    "gait10dof18musc": ("Pipelines/Gait10dof18musc/IK/walk_Setup_IK.xml", "Models/Gait10dof18musc/subject01.osim"),
    "rajagopal": ("Pipelines/Rajagopal/IK/ik_setup_run.xml", "Models/Rajagopal/Rajagopal2016.osim"),
    "hamner": ("Pipelines/Hamner/Setup_IK.xml", "Pipelines/Hamner/outputReference/subject02_registered.osim"),
}


def _text(root, tag):
    el = root.find(f".//InverseKinematicsTool/{tag}")
    return "" if el is None or el.text is None else el.text.strip()


def _copy(which, folder: Path, frames: int):
    """The pipeline's setup (its time range cut to ``frames`` frames), marker file and model,
    at the same places relative to each other under ``folder``. Returns the setup's path."""
    setup_rel, model_rel = PIPELINES[which]
    setup_src = LIBRARY / setup_rel
    if not (setup_src.is_file() and (LIBRARY / model_rel).is_file()):
        pytest.skip(f"opensim-models not found at {LIBRARY}")
    setup = folder / "setup" / setup_src.name
    setup.parent.mkdir(parents=True)
    root = ET.parse(setup_src).getroot()
    for tag in ("marker_file", "model_file"):
        rel = _text(root, tag)
        src = LIBRARY / model_rel if tag == "model_file" else setup_src.parent / rel
        dst = (setup.parent / rel).resolve()
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    for tag in ("results_directory", "output_motion_file"):  # OpenSim opens them, does not make them
        rel = _text(root, tag)
        if rel:
            (setup.parent / (rel if tag == "results_directory" else Path(rel).parent)).resolve().mkdir(
                parents=True, exist_ok=True
            )
    from jaxbio.io import read_trc

    time = read_trc(setup.parent / _text(root, "marker_file")).time
    span = [float(v) for v in _text(root, "time_range").split()] or [time[0], time[-1]]
    first = int(np.searchsorted(time, span[0] - 1e-9))
    last = min(first + frames - 1, int(np.searchsorted(time, span[1] + 1e-9)) - 1, time.size - 1)
    import re

    new = f"<time_range>{float(time[first])!r} {float(time[last])!r}</time_range>"
    text, n = re.subn(r"<time_range\s*/>|<time_range>[^<]*</time_range>", new, setup_src.read_text(), count=1)
    if not n:
        text = text.replace("</InverseKinematicsTool>", new + "</InverseKinematicsTool>", 1)
    setup.write_text(text)
    return setup


def _outputs(setup: Path):
    root = ET.parse(setup).getroot()
    motion = setup.parent / _text(root, "output_motion_file")
    # ``<name>_ik_marker_errors.sto``, the tool's name (none in Gait10dof18musc's setup)
    (errors,) = (setup.parent / (_text(root, "results_directory") or ".")).glob("*ik_marker_errors.sto")
    return motion, errors


def _compare(tmp_path, which, frames=FRAMES):
    pytest.importorskip("opensim")
    import jax
    import jax.numpy as jnp

    import jaxbio as jb
    from jaxbio.cli import main
    from jaxbio.tools import read_ik_tasks

    ours = _copy(which, tmp_path / "jaxbio", frames)
    theirs = _copy(which, tmp_path / "opensim", frames)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["run-tool", str(ours), "--no-progress"]) == 0
    live = (  # in a subprocess (the tool changes directory; a crash stays there)
        "import sys, opensim; opensim.Logger.removeFileSink(); opensim.Logger.setLevelString('error'); "
        "sys.exit(0 if opensim.InverseKinematicsTool(sys.argv[1]).run() else 3)"
    )
    r = subprocess.run([sys.executable, "-c", live, theirs.name], cwd=theirs.parent, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    (mot_a, err_a), (mot_b, err_b) = _outputs(ours), _outputs(theirs)
    a, b = jb.io.read_storage(mot_a), jb.io.read_storage(mot_b)
    assert a.time.size == b.time.size and 1 <= a.time.size <= frames
    np.testing.assert_allclose(a.time, b.time, rtol=0, atol=1e-8)  # OpenSim prints 8 decimals
    root = ET.parse(ours).getroot()
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = jb.io.load_osim(ours.parent / _text(root, "model_file"), dtype=jnp.float64)
        mw, ct = read_ik_tasks(root.find(".//IKTaskSet"), where=str(ours))
        inputs = jb.tools.prepare_inverse_kinematics(
            m,
            ours.parent / _text(root, "marker_file"),
            marker_weights=mw,
            coordinate_tasks=ct,
            start=float(a.time[0]),
            end=float(a.time[-1]),
        )
        rot = np.array([t == "rotational" for t in m.motion_types])

        def radians(table):
            x = table.select(m.coordinate_names).data.copy()
            if table.in_degrees:
                x[:, rot] = np.radians(x[:, rot])
            return jnp.asarray(x)

        goal = jax.jit(jax.vmap(lambda f, c: 0.5 * jnp.sum(jb.tools.inverse_kinematics_residuals(m, f, c) ** 2)))
        ga, gb = np.asarray(goal(inputs, radians(a))), np.asarray(goal(inputs, radians(b)))
    assert np.all(ga <= gb + 1e-9), f"{which}: jaxbio's goal above OpenSim's by {(ga - gb).max():.3g}"
    ea, eb = jb.io.read_storage(err_a), jb.io.read_storage(err_b)
    assert ea.labels == eb.labels
    np.testing.assert_allclose(ea.time, eb.time, rtol=0, atol=1e-8)
    assert np.all(np.isfinite(ea.data))
    return ga, gb


@pytest.mark.slow
@pytest.mark.parametrize("which", sorted(PIPELINES))
def test_ik_matches_live_opensim_on_every_pipeline(tmp_path, which):
    _compare(tmp_path, which)
