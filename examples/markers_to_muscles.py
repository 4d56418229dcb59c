"""From raw markers to muscle activations: OpenSim's Gait2354 pipeline (scale, inverse
kinematics, inverse dynamics, static optimisation) in one Python script, then the same as one
``jaxbio run-tool`` session of setup files.

    python examples/markers_to_muscles.py                 # the first 8 frames of the walk (short)
    python examples/markers_to_muscles.py --frames 0      # the setups' whole time range (0.4–1.6 s)
    python examples/markers_to_muscles.py --pipeline DIR --model GENERIC.osim --out WORKDIR

The inputs are opensim-models' ``Pipelines/Gait2354_Simbody`` (default ``/work/om``, or
``$JAXBIO_OSIM_LIBRARY``): the generic model ``gait2354_simbody.osim``, the static trial and the
ScaleTool setup, the walk's ``.trc`` and IK setup, its ground reactions and the ID setup. The
default run is short: IK, ID and SO over the first ``--frames 8`` frames of the IK setup's time
range (60 Hz); the scaling uses the whole static trial as the setup says.

1. **Python.** `jaxbio.tools.scale_tool` (the scaled model, markers placed),
   `jaxbio.tools.inverse_kinematics_tool` (the IK setup's marker weights),
   `jaxbio.tools.inverse_dynamics_tool` (ground reactions, 6 Hz low-pass),
   `jaxbio.tools.static_optimization_tool` (the 54 muscles plus the pipeline's reserve actuators,
   ``gait2354_CMC_Actuators.xml``).
2. **Setups.** The same four steps as one session; the example writes the setups into
   ``WORKDIR/session`` (the pipeline's Scale, IK and ID setups with the short time range, and a
   static-optimisation AnalyzeTool setup the pipeline lacks) and runs, as the shell would::

       cd WORKDIR/session
       jaxbio run-tool subject01_Setup_Scale.xml subject01_Setup_IK.xml \\
           subject01_Setup_InverseDynamics.xml subject01_Setup_StaticOptimization.xml

   The setups run in that order: the ScaleTool writes ``subject01_simbody.osim`` (its marker
   placer's output model), which the IK, ID and SO setups name as their model; the IK setup
   writes ``subject01_walk1_ik.mot``, which ID and SO read. The session's results equal the
   Python ones (checked at the end).

``--joint-fit`` adds, after step 1, `jaxbio.tools.joint_fit`: scales, marker offsets and the walk's
coordinates fitted together, started at the ScaleTool's result, and its marker RMS against
Scale-then-IK's (``--frames 0 --joint-fit``: the whole walk, a few minutes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import jax

jax.config.update(
    "jax_enable_x64", True
)  # the example's choice (the session computes in float64); the library never does this

import numpy as np  # noqa: E402

LIBRARY = Path(os.environ.get("JAXBIO_OSIM_LIBRARY", "/work/om"))
PIPELINE = LIBRARY / "Pipelines" / "Gait2354_Simbody"
GENERIC = LIBRARY / "Models" / "Gait2354_Simbody" / "gait2354_simbody.osim"
FILES = (
    "subject01_Setup_Scale.xml",
    "gait2354_Scale_MarkerSet.xml",
    "subject01_static.trc",
    "subject01_Setup_IK.xml",
    "subject01_walk1.trc",
    "subject01_Setup_InverseDynamics.xml",
    "subject01_walk1_grf.xml",
    "subject01_walk1_grf.mot",
    "gait2354_CMC_Actuators.xml",
)

SO_SETUP = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="30000">
  <AnalyzeTool name="subject01_walk1">
    <model_file>subject01_simbody.osim</model_file>
    <replace_force_set>false</replace_force_set>
    <force_set_files>gait2354_CMC_Actuators.xml</force_set_files>
    <results_directory>ResultsStaticOptimization</results_directory>
    <initial_time>{start}</initial_time>
    <final_time>{end}</final_time>
    <AnalysisSet name="Analyses"><objects>
      <StaticOptimization name="StaticOptimization">
        <on>true</on>
        <step_interval>1</step_interval>
        <use_model_force_set>true</use_model_force_set>
        <activation_exponent>2</activation_exponent>
        <use_muscle_physiology>true</use_muscle_physiology>
        <optimizer_convergence_criterion>1e-8</optimizer_convergence_criterion>
      </StaticOptimization>
    </objects></AnalysisSet>
    <external_loads_file>subject01_walk1_grf.xml</external_loads_file>
    <coordinates_file>subject01_walk1_ik.mot</coordinates_file>
    <lowpass_cutoff_frequency_for_coordinates>6</lowpass_cutoff_frequency_for_coordinates>
  </AnalyzeTool>
</OpenSimDocument>
"""


def copy_inputs(pipeline: Path, generic: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy(pipeline / name, folder / name)
    shutil.copy(generic, folder / "gait2354_simbody.osim")


def time_range(setup: Path, frames: int) -> tuple[float, float]:
    """The IK setup's time range, cut to its first ``frames`` frames of the walk (0: all)."""
    start, end = (float(v) for v in ET.parse(setup).getroot().find(".//time_range").text.split())
    if frames > 0:
        from jaxbio.io import read_trc

        t = read_trc(setup.parent / "subject01_walk1.trc").time
        inside = t[(t >= start - 1e-9) & (t <= end + 1e-9)]
        end = float(inside[min(frames, inside.size) - 1])
    return start, end


def set_text(path: Path, tag: str, text: str) -> None:
    """Every ``<tag>`` of a setup file set to ``text`` (the file's layout kept otherwise)."""
    tree = ET.parse(path)
    for el in tree.getroot().iter(tag):
        el.text = text
    tree.write(path, encoding="UTF-8", xml_declaration=True)


def python_pipeline(folder: Path, start: float, end: float) -> dict:
    """Scale, IK, ID and SO with jaxbio's functions; returns their tables."""
    from jaxbio.tools import inverse_dynamics_tool, inverse_kinematics_tool, scale_tool, static_optimization_tool
    from jaxbio.io import write_sto
    from jaxbio.tools import read_ik_tasks

    cwd = os.getcwd()
    os.chdir(folder)  # the setups' file names are relative to their folder
    tables = {}
    try:
        scaled = scale_tool("subject01_Setup_Scale.xml")
        tables["scale"] = scaled
        Path("subject01_simbody.osim").write_text(scaled.placed)
        print(f"scaled: {len(scaled.factors)} frames' factors, e.g. femur_r {np.round(scaled.factors['femur_r'], 4)}")
        weights, tasks = read_ik_tasks("subject01_Setup_IK.xml")
        ik = inverse_kinematics_tool(
            "subject01_simbody.osim",
            "subject01_walk1.trc",
            marker_weights=weights,
            coordinate_tasks=tasks,
            start=start,
            end=end,
        )
        write_sto("subject01_walk1_ik.mot", ik.coordinates)
        rms = ik.errors.column("marker_error_RMS")
        print(f"IK: {ik.c.shape[0]} frames, {start:g}–{end:g} s, marker RMS {1000 * rms.mean():.2f} mm (mean)")
        tau = inverse_dynamics_tool(
            "subject01_simbody.osim",
            "subject01_walk1_ik.mot",
            external_loads="subject01_walk1_grf.xml",
            lowpass_hz=6.0,
            start=start,
            end=end,
        )
        knee = tau.column("knee_angle_r_moment")
        print(f"ID: right knee moment {knee.min():.1f} … {knee.max():.1f} N·m")
        so = static_optimization_tool(
            "subject01_simbody.osim",
            "subject01_walk1_ik.mot",
            external_loads="subject01_walk1_grf.xml",
            actuators="gait2354_CMC_Actuators.xml",
            lowpass_hz=6.0,
            start=start,
            end=end,
        )
        a = so.activations
        muscles = [n for n in a.labels if n in ("soleus_r", "vasti_r", "glut_max2_r", "rect_fem_r")]
        print("SO: mean activations " + ", ".join(f"{n} {a.column(n).mean():.3f}" for n in muscles))
        return {**tables, "ik": ik.coordinates, "id": tau, "so": a, "ik_rms": rms}
    finally:
        os.chdir(cwd)


def joint_fit(folder: Path, scaled, start: float, end: float, reference_rms) -> None:
    """Beyond OpenSim: the scale factors, marker offsets and the walk's coordinates fitted
    together (`jaxbio.tools.joint_fit`), started at (and regularised towards) the ScaleTool's result,
    so that its start is Scale-then-IK."""
    from jaxbio.tools import joint_fit, model_scaling, prepare_inverse_kinematics
    from jaxbio.tools import read_ik_tasks

    scaling = model_scaling(folder / "gait2354_simbody.osim", marker_set=folder / "gait2354_Scale_MarkerSet.xml")
    s0 = np.stack([scaled.factors[b] for b in scaling.bodies])
    weights, tasks = read_ik_tasks(folder / "subject01_Setup_IK.xml")
    trial = prepare_inverse_kinematics(
        scaling.model,
        folder / "subject01_walk1.trc",
        marker_weights=weights,
        coordinate_tasks=tasks,
        start=start,
        end=end,
    )
    fit = joint_fit(scaling, trial, factors=s0, offsets=scaling.marker_offsets(scaled.model, s0), max_steps=300)
    print(
        f"joint fit ({fit.steps} BFGS steps): mean marker RMS {1000 * fit.marker_rms[0].mean():.2f} mm, "
        f"Scale-then-IK {1000 * np.mean(reference_rms):.2f} mm (objective {fit.objective:.4g} m², "
        f"from {fit.start_objective:.4g})"
    )


def session(folder: Path, start: float, end: float) -> list:
    """The same four steps from setup files, one ``jaxbio run-tool`` session (`jaxbio.tools.run`)."""
    from jaxbio.tools import run

    for name in ("subject01_Setup_IK.xml", "subject01_Setup_InverseDynamics.xml"):
        set_text(folder / name, "time_range", f"{start!r} {end!r}")
    (folder / "subject01_Setup_StaticOptimization.xml").write_text(SO_SETUP.format(start=repr(start), end=repr(end)))
    setups = [
        "subject01_Setup_Scale.xml",
        "subject01_Setup_IK.xml",
        "subject01_Setup_InverseDynamics.xml",
        "subject01_Setup_StaticOptimization.xml",
    ]
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return run(setups, progress=False)
    finally:
        os.chdir(cwd)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", type=Path, default=PIPELINE, help="Gait2354_Simbody pipeline folder")
    parser.add_argument("--model", type=Path, default=GENERIC, help="the generic gait2354_simbody.osim")
    parser.add_argument("--frames", type=int, default=8, help="frames of the walk for IK/ID/SO, at least 6 (0: all)")
    parser.add_argument("--joint-fit", action="store_true", help="also fit scales, offsets and motion together")
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if not (args.pipeline.is_dir() and args.model.is_file()):
        raise SystemExit(
            f"opensim-models' Gait2354 pipeline not found ({args.pipeline}, {args.model}): pass --pipeline/--model"
        )
    work = args.out or Path(tempfile.mkdtemp(prefix="markers_to_muscles_"))
    warnings.simplefilter("ignore")  # the tools warn about markers without tasks, as OpenSim does
    copy_inputs(args.pipeline, args.model, work / "python")
    copy_inputs(args.pipeline, args.model, work / "session")
    start, end = time_range(work / "python" / "subject01_Setup_IK.xml", args.frames)
    print("1. Python")
    ours = python_pipeline(work / "python", start, end)
    if args.joint_fit:
        joint_fit(work / "python", ours["scale"], start, end, ours["ik_rms"])
    print("2. run-tool session (setups in", work / "session", ")")
    done = session(work / "session", start, end)
    for r in done:
        print(f"   {r.setup.name}: {', '.join(str(p) for p in r.files.values())}")
    tables = {
        "ik": done[1].tables["coordinates"],
        "id": done[2].tables["generalized_forces"],
        "so": done[3].tables["activations"],
    }
    for key, table in tables.items():
        diff = np.max(np.abs(np.asarray(table.data) - np.asarray(ours[key].data)))
        print(f"   {key}: largest difference from the Python run {diff:.2g}")
        assert diff < 1e-6, key


if __name__ == "__main__":
    main()
