"""`jaxbio.tools.run_setup` for an ``AnalyzeTool``'s analyses: which of its ``AnalysisSet`` it
runs, the warning naming those it does not run (never dropped silently), and the
``JointReaction`` analysis (`jaxbio.tools._analyses.joint_reaction_tool`)."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

from jaxbio._validate import echo

#: the files OpenSim writes for each analysis jaxbio does not run: ``<tool>_<analysis>_<suffix>.sto``
NOT_RUN = {
    "MuscleAnalysis": "Length, FiberLength, TendonLength, …, TendonForce, MomentArm_<coordinate>, Moment_<coordinate>",
    "BodyKinematics": "pos_global, vel_global, acc_global",
    "Kinematics": "q, u, dudt",
    "Actuation": "force, speed, power",
    "PointKinematics": "<point>_pos, <point>_vel, <point>_acc",
    "ForceReporter": "forces",
    "StatesReporter": "states",
    "InducedAccelerations": "<coordinate>, CENTER_OF_MASS",
    "ProbeReporter": "probes",
}


def _text(el, tag: str):
    child = el.find(tag)
    return None if child is None or child.text is None or not child.text.strip() else child.text.strip()


def active_analyses(setup, tool) -> list:
    """The analyses of the tool's ``<AnalysisSet><objects>`` that are on (``<on>``, default
    true), in file order. ``ValueError`` for an ``<on>`` that is not true or false."""
    out = []
    for a in tool.findall("AnalysisSet/objects/*"):
        on = (_text(a, "on") or "true").lower()
        if on not in ("true", "false"):
            raise ValueError(f"{setup}: {a.tag} {echo(a.get('name', ''))}: <on> must be true or false, got {echo(on)}")
        if on == "true":
            out.append(a)
    return out


def not_run_message(setup, tool, others) -> str:
    """The warning that names the analyses jaxbio does not run and the files OpenSim would write."""
    name = tool.get("name", "")
    parts = []
    for a in others:
        aname = a.get("name", a.tag)
        parts.append(f"{a.tag} {echo(aname)} (OpenSim writes {name}_{aname}_{{{NOT_RUN.get(a.tag, '…')}}}.sto)")
    return (
        f"{setup}: AnalyzeTool {echo(name)}: jaxbio does not run these analyses and does not write their files: "
        f"{'; '.join(parts)} (jaxbio runs InverseDynamics, StaticOptimization and JointReaction)"
    )


def joint_reaction_job(setup: Path, tool, analysis, path, number, lowpass, results: Path, progress):
    """One ``JointReaction`` analysis of an ``AnalyzeTool`` setup, read: ``(job, output, inputs,
    warnings)``, where ``job()`` computes its `jaxbio.io.Table` (`jaxbio.tools.joint_reaction_tool`)
    for ``<results_directory>/<tool name>_<analysis name>_ReactionLoads.sto``, ``inputs`` are the
    files it reads and ``warnings`` what the setup itself deserves (already issued)."""
    import jax.numpy as jnp

    from jaxbio.io import load_osim
    from jaxbio.tools._analyses import joint_reaction_tool

    here = setup.parent
    name = tool.get("name", "")
    aname = analysis.get("name", "JointReaction")
    interval = _text(analysis, "step_interval") or "1"
    if not interval.isdigit() or int(interval) < 1:
        raise ValueError(f"{setup}: JointReaction <step_interval> must be a whole number ≥ 1, got {echo(interval)}")

    def file(el, tag):
        text = _text(el, tag)
        if text is None or text == "Unassigned":
            return None
        if "\\" in text:  # a Windows path: OpenSim on Windows reads it, elsewhere it fails to open it
            warnings.warn(f"{setup}: <{tag}> {echo(text)}: its backslashes are read as folder separators", stacklevel=4)
            text = text.replace("\\", "/")
        return str(here / text)

    states, coords = file(tool, "states_file"), file(tool, "coordinates_file")
    said = []
    if states and coords:  # AnalyzeTool::loadStatesFromFile
        said.append(f"{setup}: <coordinates_file> is ignored since <states_file> is also set, as OpenSim does")
        coords = None
    if file(tool, "speeds_file"):
        raise ValueError(
            f"{setup}: <speeds_file> is not read by jaxbio (the speeds come from the coordinates' splines)"
        )
    if not states and not coords:
        raise ValueError(f"{setup}: AnalyzeTool {echo(name)} needs a <states_file> or a <coordinates_file>")
    replace = (_text(tool, "replace_force_set") or "false").lower() == "true"
    files = tuple(str(here / f) for f in (_text(tool, "force_set_files") or "").split())
    model_file = path("model_file")
    lists = {t: (_text(analysis, t) or "").split() for t in ("joint_names", "apply_on_bodies", "express_in_frame")}
    start = number(_text(tool, "initial_time") or "-inf", "initial_time")
    end = number(_text(tool, "final_time") or "inf", "final_time")
    out = results / f"{name}_{aname}_ReactionLoads.sto"
    loads, forces = file(tool, "external_loads_file"), file(analysis, "forces_file")
    inputs = [p for p in (model_file, states, coords, loads, forces) if p]
    for w in said:
        warnings.warn(w, stacklevel=3)

    def job():
        model = load_osim(model_file, dtype=jnp.float64, force_set_files=files, replace_force_set=replace)
        return joint_reaction_tool(
            model,
            states=states,
            motion=coords,
            external_loads=loads,
            forces_file=forces,
            joint_names=lists["joint_names"] or ("ALL",),
            on_bodies=lists["apply_on_bodies"] or ("child",),
            in_frames=lists["express_in_frame"] or ("ground",),
            lowpass_hz=lowpass if coords else None,
            start=start,
            end=end,
            step_interval=int(interval),
            dtype=jnp.float64,
            progress=progress,
        )

    return job, out, inputs, tuple(said)


def merged(runs) -> object:
    """One `jaxbio.tools.ToolRun` of several analyses' runs of one setup: their tables, files and
    warnings together (a table name met twice gets the analysis's number: ``reaction_loads_2``)."""
    first = runs[0]
    tables, files, said = dict(first.tables), dict(first.files), list(first.warnings)
    for k, r in enumerate(runs[1:], start=2):
        for key, t in r.tables.items():
            tables[key if key not in tables else f"{key}_{k}"] = t
        for key, f in r.files.items():
            files[key if key not in files else f"{key}_{k}"] = f
        said += list(r.warnings)
    matched = next((r.matched for r in runs if r.matched is not None), None)
    return dataclasses.replace(first, tables=tables, files=files, warnings=tuple(said), matched=matched)
