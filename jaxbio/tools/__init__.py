"""OpenSim's tools run from their own setup files, one or a whole session of them.

`run` takes setup files (``InverseKinematicsTool``, ``InverseDynamicsTool``; ``AnalyzeTool`` with
one ``InverseDynamics`` or one ``StaticOptimization`` analysis), folders of them and globs, runs each as OpenSim's tool would
and writes the files OpenSim writes, in one process: a model read once (`jaxbio.io.load_osim`)
and a model's and trial length's programs traced and compiled once (`jaxbio._aot`) serve every
trial of the session. ``jaxbio run-tool`` is this function from the shell. The single jobs
(`inverse_kinematics_job`, `inverse_dynamics_job`, `static_optimization_job`) are also what
``jaxbio inverse-kinematics``, ``jaxbio inverse-dynamics --motion`` and ``jaxbio
static-optimization`` run; `jaxbio.tools.read_ik_tasks` reads an ``IKTaskSet``.

Everything computes in float64 (OpenSim's double precision), inside ``jax.enable_x64``: the
process's own JAX configuration is left as it is.

The tools' parts (``jb.tools``, the top layer: it builds on the core, `jaxbio.forces` and the
readers of `jaxbio.io`; nothing below imports it):

Processing (OpenSim's inverse-dynamics preparation, step for step):
`process_coordinates(table, lowpass_hz=..., start=..., end=..., rotational=...)` →
`ProcessedCoordinates` (pad, resample, filter, degrees → radians, quintic GCV splines and their
derivatives); `lowpass_iir(signal, dt, cutoff_hz)` (OpenSim's zero-phase 3rd-order Butterworth,
`butterworth_coefficients`); `GCVSpline(x, y, degree=5, error_variance=0.0)` (Woltring's GCVSPL).

External loads: `read_external_loads(xml)` → `ExternalLoads` (`ExternalForce` entries);
`external_load_data(loads, times)` → `ExternalForceData` (identifiers by prefix, cubic spline in
time, the frames they name).

Inverse dynamics: `inverse_dynamics_tool(model, motion, external_loads=..., lowpass_hz=...,
start=..., end=...)` → `jaxbio.io.Table` of generalised forces labelled as OpenSim labels them
(``InverseDynamicsTool``, every frame in one ``jit(vmap)``); `prepare_inverse_dynamics` →
`InverseDynamicsInputs`, `generalized_forces(model, inputs)` (one frame, pure);
`coordinates_table`; the tools warn for motion columns that name no coordinate and coordinates
without a column, and `recording_matches` gives what they matched (`InputMatch`).

Static optimisation: `static_optimization_tool(model, motion, ...)` →
`StaticOptimizationTables` (OpenSim's ``AnalyzeTool`` static optimisation, every frame in one
``jit(vmap)``); `prepare_static_optimization`, `solve_static_optimization` (one frame, pure,
differentiable), `static_optimization_problem`. JointReaction: `joint_reaction_tool` (OpenSim's
``AnalyzeTool`` ``JointReaction`` analysis), `muscle_path_wrenches`.

Inverse kinematics: `inverse_kinematics_tool` → `InverseKinematicsResult`
(``InverseKinematicsTool``); `read_ik_tasks` (an ``IKTaskSet`` → `CoordinateTask` s and marker
weights), `prepare_inverse_kinematics` → `InverseKinematicsInputs`,
`solve_inverse_kinematics`, `inverse_kinematics_residuals`, `marker_errors`.

Scaling (OpenSim's ``ScaleTool``, numpy on the model's XML): `scale_tool(setup)` → `ScaleResult`
(a `ScaleSetup`, or its file through `read_scale_setup`; `Measurement`):
`measurement_scale_factors`, `scale_factors`, `scale_osim` (the scaled ``.osim`` text),
`place_markers`, `format_marker_set`, `format_scale_set`. Beyond OpenSim: `joint_fit` →
`JointFitResult` fits the scale factors, the marker offsets and every frame's coordinates
together; `model_scaling` → `ModelScaling`, the scaled model as a pure, differentiable function
of per-body factors; `joint_fit_objective`, `fitted_osim`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import warnings
from collections.abc import Callable
from pathlib import Path

from jaxbio._text import read_xml
from jaxbio._validate import echo


@dataclasses.dataclass(frozen=True)
class ToolRun:
    """What one tool run computed and wrote.

    - ``setup``: the setup file (None for a job run without one); ``tool``: its tool element
      (``"InverseDynamicsTool"``, ``"AnalyzeTool"``) or the job's name.
    - ``tables``: the results as `jaxbio.io.Table` s by name: ``"coordinates"`` and
      ``"marker_errors"`` (inverse kinematics), ``"generalized_forces"`` (inverse
      dynamics: N·m and N per coordinate), or ``"forces"`` (N, and N·m for torque actuators) and
      ``"activations"`` (static optimisation).
    - ``files``: the files written, by the name of the table each holds.
    - ``warnings``: the warnings the run gave (also issued as Python warnings).
    - ``matched``: the `jaxbio.tools.InputMatch` of the run: the coordinates read from the motion's
      columns, those held at a value for want of one (and the value), the columns not read, the
      data columns of each external force (None for a run that prepared no inputs).
    """

    setup: Path | None
    tool: str
    tables: dict
    files: dict
    warnings: tuple[str, ...] = ()
    matched: object = None


def _write_sto(path: str, table, inputs, flag: str) -> Path:
    from jaxbio._files import check_outputs, write_outputs
    from jaxbio.io import format_sto

    (out,) = check_outputs([(flag, path)], inputs)
    write_outputs([(out, lambda f: f.write(format_sto(table).encode()))])
    return Path(path)


def inverse_dynamics_job(
    model,
    motion,
    *,
    external_loads=None,
    forces_to_exclude=("muscles",),
    lowpass=None,
    start=None,
    end=None,
    output=None,
    progress: Callable[[str], None] | None = None,
) -> ToolRun:
    """OpenSim's ``InverseDynamicsTool`` on files (`jaxbio.tools.inverse_dynamics_tool` in float64):
    the generalised forces, written to ``output`` (OpenSim's ``.sto``) when given. The output is
    checked to be writable before any work. Returns a `ToolRun` (``tables["generalized_forces"]``);
    the tool's warnings (e.g. a ``forces_to_exclude`` word that matches nothing) are issued and kept
    in ``warnings``."""
    import jax.numpy as jnp

    from jaxbio.tools._inverse_dynamics import inverse_dynamics_tool

    inputs = [str(p) for p in (model, motion, external_loads) if p]
    if output:
        from jaxbio._files import check_outputs

        check_outputs([("--output", output)], inputs)  # before any work
    table, said, matched = _recorded(
        inverse_dynamics_tool,
        model,
        motion,
        external_loads=external_loads,
        forces_to_exclude=forces_to_exclude,
        lowpass_hz=lowpass,
        start=start,
        end=end,
        dtype=jnp.float64,
        progress=progress,
    )
    files = {"generalized_forces": _write_sto(output, table, inputs, "--output")} if output else {}
    return ToolRun(None, "inverse_dynamics", {"generalized_forces": table}, files, said, matched)


def _recorded(fn, *args, **kwargs):
    """``(result, warnings, matched)`` of ``fn(*args, **kwargs)`` run with float64 enabled: the
    messages of the warnings it issued (recorded, then issued again under the caller's own
    filters) and the last `jaxbio.tools.InputMatch` of the inputs it prepared (None when none)."""
    import jax

    from jaxbio.tools._inverse_dynamics import recording_matches

    with recording_matches() as matches, warnings.catch_warnings(record=True) as caught, jax.enable_x64(True):
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return result, tuple(str(w.message) for w in caught), (matches[-1] if matches else None)


def inverse_kinematics_job(
    model,
    markers,
    *,
    tasks=None,
    coordinate_file=None,
    start=None,
    end=None,
    accuracy=1e-5,
    output=None,
    output_errors=None,
    progress: Callable[[str], None] | None = None,
) -> ToolRun:
    """OpenSim's ``InverseKinematicsTool`` on files (`jaxbio.tools.inverse_kinematics_tool` in
    float64): the coordinates written to ``output`` (OpenSim's ``.mot``, degrees) and the marker
    errors to ``output_errors`` (``_ik_marker_errors.sto``) when given, checked writable before any
    work. ``tasks``: an ``IKTaskSet`` file or ``(marker_weights, coordinate_tasks)`` (`read_ik_tasks`);
    None: every marker of the file that the model has, weight 1. Returns a `ToolRun`
    (``tables["coordinates"]``, ``tables["marker_errors"]``)."""
    import jax.numpy as jnp

    from jaxbio.tools._inverse_kinematics import inverse_kinematics_tool

    if tasks is None:
        weights, coords = None, None
    elif isinstance(tasks, (str, os.PathLike)):
        from jaxbio.tools._inverse_kinematics import read_ik_tasks

        weights, coords = read_ik_tasks(tasks)
    else:
        weights, coords = tasks
    inputs = [str(p) for p in (model, markers, coordinate_file) if p and isinstance(p, (str, os.PathLike))]
    outputs = [(f, p) for f, p in (("--output", output), ("--output-errors", output_errors)) if p]
    if outputs:
        from jaxbio._files import check_outputs

        check_outputs(outputs, inputs)  # before any work
    result, said, matched = _recorded(
        inverse_kinematics_tool,
        model,
        markers,
        marker_weights=weights,
        coordinate_tasks=coords,
        coordinate_file=coordinate_file,
        start=start,
        end=end,
        accuracy=accuracy,
        dtype=jnp.float64,
        progress=progress,
    )
    tables = {"coordinates": result.coordinates, "marker_errors": result.errors}
    files = {
        name: _write_sto(path, tables[name], inputs, flag)
        for name, flag, path in (
            ("coordinates", "--output", output),
            ("marker_errors", "--output-errors", output_errors),
        )
        if path
    }
    return ToolRun(None, "inverse_kinematics", tables, files, said, matched)


def static_optimization_job(
    model,
    motion,
    *,
    external_loads=None,
    actuators=(),
    lowpass=None,
    start=None,
    end=None,
    activation_exponent=2.0,
    use_muscle_physiology=True,
    output_forces=None,
    output_activations=None,
    progress: Callable[[str], None] | None = None,
    step_interval: int = 1,
) -> ToolRun:
    """OpenSim's static optimisation on files (`jaxbio.tools.static_optimization_tool` in float64):
    forces and activations, written to ``output_forces`` / ``output_activations`` when given
    (checked writable before any work). Returns a `ToolRun` (``tables["forces"]``,
    ``tables["activations"]``); the tool's warnings are re-issued and kept in ``warnings``."""
    import jax.numpy as jnp

    from jaxbio.tools._static_optimization import static_optimization_tool

    inputs = [str(p) for p in (model, motion, external_loads, *actuators) if p]
    outputs = [
        (flag, path)
        for flag, path in (("--output-forces", output_forces), ("--output-activations", output_activations))
        if path
    ]
    if outputs:
        from jaxbio._files import check_outputs

        check_outputs(outputs, inputs)  # before any work
    tables, said, matched = _recorded(
        static_optimization_tool,
        model,
        motion,
        external_loads=external_loads,
        actuators=actuators or None,
        lowpass_hz=lowpass,
        start=start,
        end=end,
        activation_exponent=activation_exponent,
        use_muscle_physiology=use_muscle_physiology,
        dtype=jnp.float64,
        progress=progress,
        step_interval=step_interval,
    )
    files = {
        name: _write_sto(path, table, inputs, flag)
        for name, flag, path, table in (
            ("forces", "--output-forces", output_forces, tables.forces),
            ("activations", "--output-activations", output_activations, tables.activations),
        )
        if path
    }
    return ToolRun(
        None,
        "static_optimization",
        {"forces": tables.forces, "activations": tables.activations},
        files,
        said,
        matched,
    )


def run(setups, *, progress: bool = True) -> list[ToolRun]:
    """Run OpenSim setup files in turn in this process and write what OpenSim writes.

    ``setups``: a setup file, a folder (its ``.xml`` files whose document is an
    ``InverseDynamicsTool`` or ``AnalyzeTool``, sorted), a glob (``"trials/*/Setup_ID.xml"``), or
    a list of these (`setup_files`). ``progress``: a tqdm bar over the setups on stderr.

    Returns one `ToolRun` per setup, in order. The first setup that fails raises its
    ``ValueError`` (naming the setup file); the files of the setups before it are written. The
    outputs are those of separate runs: a session only shares what is read and compiled."""
    files = setup_files(setups)
    bar = None
    if progress and len(files) > 1:
        from tqdm import tqdm

        bar = tqdm(total=len(files), unit="setup", leave=False)
    done = []
    try:
        for setup in files:
            if bar is not None:
                bar.set_description_str(setup.name)
            done.append(run_setup(setup))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return done


def _setup_text(el, tag: str):
    child = el.find(tag)
    return None if child is None or child.text is None or not child.text.strip() else child.text.strip()


#: the setup documents `run` runs (a folder given to it contributes its .xml files of these)
TOOLS = ("InverseKinematicsTool", "InverseDynamicsTool", "AnalyzeTool", "ScaleTool")


def setup_files(given) -> list[Path]:
    """The setup files named by ``given`` (a path, a folder or a glob, or a list of them), in order: a file as it is, a folder's ``.xml``
    files whose document is a tool `TOOLS` names (sorted; external loads and actuator files are
    skipped), a quoted glob's matches (sorted). ``ValueError`` for a folder or glob with none."""
    import glob

    if isinstance(given, (str, os.PathLike)):
        given = [given]
    out: list[Path] = []
    for item in map(os.fspath, given):
        if any(c in item for c in "*?[") and not Path(item).exists():
            matches = sorted(glob.glob(item))
            if not matches:
                raise ValueError(f"{echo(item)}: no file matches")
            out += [Path(m) for m in matches]
        elif Path(item).is_dir():
            found = [p for p in sorted(Path(item).glob("*.xml")) if _tool_tag(p) in TOOLS]
            if not found:
                raise ValueError(
                    f"{item}: no InverseKinematicsTool, InverseDynamicsTool, AnalyzeTool or ScaleTool setup .xml "
                    "in this folder"
                )
            out += found
        else:
            out.append(Path(item))
    return out


def _tool_tag(path: Path) -> str | None:
    """The tool element's tag of an OpenSim document (None when it is not one)."""
    try:
        root = read_xml(path, "OpenSim tool setup file")
    except ValueError:
        return None
    tool = root if root.tag != "OpenSimDocument" else next(iter(root), None)
    return None if tool is None else tool.tag


def run_setup(setup, *, progress: Callable[[str], None] | None = None) -> ToolRun:
    """Run one OpenSim setup file as OpenSim's tool would and write the files it writes.

    ``setup``: the path of an ``InverseDynamicsTool`` setup, or of an ``AnalyzeTool`` with one
    ``InverseDynamics`` or one ``StaticOptimization`` analysis (paths in it relative to the
    setup file, as OpenSim reads them). ``progress``: called with a short description of each
    stage (e.g. a tqdm bar's ``set_description_str``), or None.

    Returns a `ToolRun` (the tables computed and the files written). ``ValueError`` naming the
    setup file and the element for a setup jaxbio does not run or a bad value; a failed run
    leaves no results directory it made. Computes in float64 (inside ``jax.enable_x64``)."""
    setup = Path(setup)
    root = read_xml(setup, "OpenSim tool setup file")
    tool = root if root.tag != "OpenSimDocument" else next(iter(root), None)
    if tool is None:
        raise ValueError(f"{setup}: an empty OpenSimDocument")
    here = setup.parent
    if tool.tag == "ScaleTool":
        return _run_scale(setup, progress)

    def path(tag, required=True):
        text = _setup_text(tool, tag)
        if text is None or text == "Unassigned":
            if required:
                raise ValueError(f"{setup}: <{tool.tag}> has no <{tag}>")
            return None
        return str(here / text)

    def number(text, tag):
        try:
            return float(text)
        except (TypeError, ValueError):
            raise ValueError(f"{setup}: <{tag}> must be a number, got {echo(text)}") from None

    cutoff = _setup_text(tool, "lowpass_cutoff_frequency_for_coordinates")
    lowpass = None if cutoff is None else number(cutoff, "lowpass_cutoff_frequency_for_coordinates")
    if lowpass is not None and lowpass < 0:  # OpenSim's -1: no filtering
        lowpass = None
    if lowpass is not None and not 0 < lowpass < math.inf:  # OpenSim would filter everything to 0 (or NaN)
        raise ValueError(
            f"{setup}: <lowpass_cutoff_frequency_for_coordinates> must be a finite cutoff > 0 Hz, or "
            f"negative (-1) for no filtering, got {echo(cutoff)}"
        )
    results = Path(path("results_directory", required=False) or here)
    name = tool.get("name", "")
    if tool.tag == "InverseKinematicsTool":
        return _run_inverse_kinematics(setup, tool, path, number, results, name, progress)
    if tool.tag == "InverseDynamicsTool":
        span = (_setup_text(tool, "time_range") or "-inf inf").split()
        if len(span) != 2:
            raise ValueError(f"{setup}: <time_range> must hold two times, got {echo(' '.join(span))}")
        start, end = (number(s, "time_range") for s in span)
        output = _setup_text(tool, "output_gen_force_file") or f"{name}_InverseDynamics"
        output = Path(output).name  # OpenSim writes into the results directory, whatever the path says
        external = path("external_loads_file", required=False)
        exclude = tuple((_setup_text(tool, "forces_to_exclude") or "").split())  # OpenSim's default: none
    elif tool.tag == "AnalyzeTool":
        from jaxbio.tools import _analyze

        active = _analyze.active_analyses(setup, tool)
        others = [a for a in active if a.tag not in ("InverseDynamics", "StaticOptimization", "JointReaction")]
        if others:  # never dropped silently: refused when nothing else runs, else named in a warning
            message = _analyze.not_run_message(setup, tool, others)
            if len(others) == len(active):
                raise ValueError(message)
            warnings.warn(message, stacklevel=2)
        analyses = [a for a in active if a.tag in ("InverseDynamics", "StaticOptimization")]
        kinds = sorted({a.tag for a in analyses})
        reactions = [a for a in active if a.tag == "JointReaction"]
        if reactions and len(analyses) <= 1 and kinds != ["InverseDynamics"]:
            runs = [
                _run_analyze_static_optimization(setup, tool, a, path, number, lowpass, results, name, progress)
                for a in analyses
            ]
            runs += [_run_joint_reaction(setup, tool, a, path, number, lowpass, results, progress) for a in reactions]
            done = _analyze.merged(runs)
            return dataclasses.replace(done, warnings=((message,) if others else ()) + done.warnings)
        if kinds == ["StaticOptimization"] and len(analyses) == 1:
            done = _run_analyze_static_optimization(
                setup, tool, analyses[0], path, number, lowpass, results, name, progress
            )
            return dataclasses.replace(done, warnings=((message,) if others else ()) + done.warnings)
        if kinds != ["InverseDynamics"] or reactions:
            raise ValueError(
                f"{setup}: AnalyzeTool {echo(name)}: jaxbio runs one InverseDynamics, or one StaticOptimization "
                f"and JointReaction analyses (found {[a.tag for a in active] or 'none'})"
            )
        if (_setup_text(analyses[0], "use_model_force_set") or "true").lower() == "true":
            raise ValueError(
                f"{setup}: InverseDynamics analysis with <use_model_force_set> true (the model's actuators "
                "as unknowns) is not run by jaxbio; set it false for joint moments"
            )
        if (_setup_text(tool, "force_set_files") or "").split():
            raise ValueError(f"{setup}: AnalyzeTool {echo(name)}: <force_set_files> are not read by jaxbio")
        # <replace_force_set> (default true) empties the model's ForceSet (AbstractTool::updateModelForces);
        # else the analysis drops the muscles and holds every other actuator at zero: other forces act
        replace = (_setup_text(tool, "replace_force_set") or "true").lower() == "true"
        exclude = ("all",) if replace else ("actuators",)
        start = number(_setup_text(tool, "initial_time") or "-inf", "initial_time")
        end = number(_setup_text(tool, "final_time") or "inf", "final_time")
        output = f"{name}_InverseDynamics"
        external = path("external_loads_file", required=False)
    else:
        raise ValueError(
            f"{setup}: <{tool.tag}> is not a tool jaxbio runs (InverseKinematicsTool, InverseDynamicsTool, "
            "AnalyzeTool, ScaleTool)"
        )
    if not output.endswith(".sto"):
        output += ".sto"
    with _results_directory(setup, results):
        done = inverse_dynamics_job(
            path("model_file"),
            path("coordinates_file"),
            external_loads=external,
            forces_to_exclude=exclude,
            lowpass=lowpass,
            start=start,
            end=end,
            output=str(results / output),
            progress=progress,
        )
    return dataclasses.replace(done, setup=setup, tool=tool.tag)


@contextlib.contextmanager
def _results_directory(setup, results: Path):
    """Make ``results`` (OpenSim's ``<results_directory>``, with missing parents) for the run in
    the ``with`` block; if the run fails, the directories made here are removed again (when still
    empty): a failed ``run-tool`` leaves nothing behind. ``ValueError`` naming the setup file when
    the directory cannot be made."""
    made = []
    for d in (results, *results.parents):
        if d.exists() or d.is_symlink():
            break
        made.append(d)
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _remove_empty(made)
        raise ValueError(
            f"{setup}: <results_directory> {results}: cannot make the directory ({e.strerror or e})"
        ) from None
    try:
        yield
    except BaseException:
        _remove_empty(made)
        raise


def _remove_empty(directories) -> None:
    for d in directories:  # deepest first
        try:
            d.rmdir()
        except OSError:  # not empty (or gone): left as it is
            break


def _run_analyze_static_optimization(setup, tool, analysis, path, number, lowpass, results, name, progress) -> ToolRun:
    """`run_setup` for an AnalyzeTool with a StaticOptimization analysis."""

    def flag(el, tag, default):
        text = (_setup_text(el, tag) or default).lower()
        if text not in ("true", "false"):
            raise ValueError(f"{setup}: <{tag}> must be true or false, got {echo(text)}")
        return text == "true"

    if not flag(analysis, "use_model_force_set", "true"):
        raise ValueError(
            f"{setup}: StaticOptimization with <use_model_force_set> false (a CoordinateActuator per "
            "coordinate instead of the muscles) is not run by jaxbio"
        )
    interval = _setup_text(analysis, "step_interval") or "1"
    if not interval.isdigit() or int(interval) < 1:
        raise ValueError(
            f"{setup}: StaticOptimization <step_interval> must be a whole number ≥ 1, got {echo(interval)}"
        )
    here = setup.parent
    files = tuple(str(here / f) for f in (_setup_text(tool, "force_set_files") or "").split())
    if flag(tool, "replace_force_set", "false") and files:
        raise ValueError(
            f"{setup}: <replace_force_set> true would remove the model's muscles; jaxbio appends "
            "<force_set_files> (set it false)"
        )
    start = max(
        number(_setup_text(tool, "initial_time") or "-inf", "initial_time"),
        number(_setup_text(analysis, "start_time") or "-inf", "start_time"),
    )
    end = min(
        number(_setup_text(tool, "final_time") or "inf", "final_time"),
        number(_setup_text(analysis, "end_time") or "inf", "end_time"),
    )
    exponent = number(_setup_text(analysis, "activation_exponent") or "2", "activation_exponent")
    physiology = flag(analysis, "use_muscle_physiology", "true")
    tolerance = number(
        _setup_text(analysis, "optimizer_convergence_criterion") or "1e-4", "optimizer_convergence_criterion"
    )
    stem = f"{name}_StaticOptimization"
    with _results_directory(setup, results):
        done = static_optimization_job(
            path("model_file"),
            path("coordinates_file"),
            external_loads=path("external_loads_file", required=False),
            actuators=files,
            lowpass=lowpass,
            start=start,
            end=end,
            activation_exponent=exponent,
            use_muscle_physiology=physiology,
            output_forces=str(results / f"{stem}_force.sto"),
            output_activations=str(results / f"{stem}_activation.sto"),
            progress=progress,
            step_interval=int(interval),
        )
    if tolerance > _LOOSE:
        message = (
            f"{setup}: <optimizer_convergence_criterion> {tolerance:g}: OpenSim's IPOPT stops this far "
            f"from the optimum, small activations held off their bounds (up to about 0.01 of activation, "
            f"15 N, on opensim-core's ankle-spring setup); jaxbio writes the optimum, which OpenSim "
            f"reaches with a criterion of 1e-8"
        )
        warnings.warn(message, stacklevel=2)
        done = dataclasses.replace(done, warnings=done.warnings + (message,))
    return dataclasses.replace(done, setup=setup, tool=tool.tag)


def _run_joint_reaction(setup, tool, analysis, path, number, lowpass, results, progress) -> ToolRun:
    """`run_setup` for one ``JointReaction`` analysis (`jaxbio.tools._analyze.joint_reaction_job`):
    writes ``<name>_<analysis>_ReactionLoads.sto``; ``tables["reaction_loads"]``."""
    from jaxbio.tools import _analyze

    job, out, inputs, said = _analyze.joint_reaction_job(
        setup, tool, analysis, path, number, lowpass, results, progress
    )
    with _results_directory(setup, results):
        from jaxbio._files import check_outputs

        check_outputs([("<results_directory>", str(out))], inputs)  # before any work
        table, more, matched = _recorded(job)
        written = _write_sto(str(out), table, inputs, "<results_directory>")
    return ToolRun(setup, tool.tag, {"reaction_loads": table}, {"reaction_loads": written}, said + more, matched)


#: an ``optimizer_convergence_criterion`` above this leaves OpenSim's static optimisation visibly
#: short of the optimum jaxbio solves for (`_run_analyze_static_optimization` warns)
_LOOSE = 1e-6


def _run_inverse_kinematics(setup, tool, path, number, results, name, progress) -> ToolRun:
    """`run_setup` for an ``InverseKinematicsTool`` (``InverseKinematicsTool::run``): the motion
    goes to ``<output_motion_file>`` relative to the setup's folder (OpenSim prints it from
    there), the errors to ``<results_directory>/<name>_ik_marker_errors.sto`` when
    ``<report_errors>`` (default true)."""
    here = setup.parent
    span = (_setup_text(tool, "time_range") or "-inf inf").split()
    if len(span) != 2:
        raise ValueError(f"{setup}: <time_range> must hold two times, got {echo(' '.join(span))}")
    start, end = (number(s, "time_range") for s in span)
    accuracy = number(_setup_text(tool, "accuracy") or "1e-5", "accuracy")
    if not (math.isfinite(accuracy) and accuracy > 0):
        raise ValueError(f"{setup}: <accuracy> must be a finite number > 0, got {echo(accuracy)}")
    weight = _setup_text(tool, "constraint_weight") or "Inf"
    number(
        weight.replace("Inf", "inf").replace("Infinity", "inf"), "constraint_weight"
    )  # checked; OpenSim 4.6 ignores it
    flags = {}
    for tag, default in (("report_errors", "true"), ("report_marker_locations", "false")):
        text = (_setup_text(tool, tag) or default).lower()
        if text not in ("true", "false"):
            raise ValueError(f"{setup}: <{tag}> must be true or false, got {echo(text)}")
        flags[tag] = text == "true"
    if flags["report_marker_locations"]:
        warnings.warn(
            f"{setup}: <report_marker_locations> true: jaxbio does not write "
            f"{name}_ik_model_marker_locations.sto (jaxbio.markers.marker_positions gives them)",
            stacklevel=3,
        )
    task_set = tool.find("IKTaskSet")
    from jaxbio.tools._inverse_kinematics import read_ik_tasks

    tasks = read_ik_tasks(task_set, where=str(setup)) if task_set is not None else ({}, {})
    marker_file = path("marker_file")
    coordinate_file = path("coordinate_file", required=False)
    motion = _setup_text(tool, "output_motion_file")
    motion = None if motion in (None, "Unassigned") else str(here / motion)
    errors = str(results / f"{name}_ik_marker_errors.sto") if flags["report_errors"] else None
    if motion is None and errors is None:
        warnings.warn(f"{setup}: no <output_motion_file> and <report_errors> false: nothing is written", stacklevel=3)
    with _results_directory(setup, results):
        if motion is not None:
            Path(motion).parent.mkdir(parents=True, exist_ok=True)
        done = inverse_kinematics_job(
            path("model_file"),
            marker_file,
            tasks=tasks if task_set is not None else None,
            coordinate_file=coordinate_file,
            start=start,
            end=end,
            accuracy=accuracy,
            output=motion,
            output_errors=errors,
            progress=progress,
        )
    return dataclasses.replace(done, setup=setup, tool=tool.tag)


def _run_scale(setup: Path, progress) -> ToolRun:
    """`run_setup` for a ``ScaleTool`` (`jaxbio.tools.scale_tool`): writes, relative to the setup's
    folder as OpenSim does, the ModelScaler's ``<output_model_file>`` (the scaled model) and
    ``<output_scale_file>`` (the applied ScaleSet), the MarkerPlacer's ``<output_model_file>``
    (the model with its markers placed), ``<output_marker_file>`` (its MarkerSet) and
    ``<output_motion_file>`` (the static pose: the model's coordinates, as an IK motion in
    degrees, where OpenSim writes every state variable in radians). Every output is checked
    writable before any work. Tables: ``"static_pose"`` (one frame)."""
    from jaxbio._files import check_outputs, write_outputs
    from jaxbio.tools._scale import format_marker_set, format_scale_set, read_scale_setup, scale_tool

    spec = read_scale_setup(setup)
    named = [
        ("<ModelScaler><output_model_file>", spec.output_model_file if spec.scale else None),
        ("<ModelScaler><output_scale_file>", spec.output_scale_file if spec.scale else None),
        ("<MarkerPlacer><output_model_file>", spec.output_placed_model_file if spec.place else None),
        ("<MarkerPlacer><output_marker_file>", spec.output_marker_file if spec.place else None),
        ("<MarkerPlacer><output_motion_file>", spec.output_motion_file if spec.place else None),
    ]
    inputs = [
        str(p)
        for p in (
            spec.model_file,
            spec.marker_set_file,
            spec.marker_file,
            spec.placer_marker_file,
            spec.coordinate_file,
        )
        if p
    ]
    outputs = check_outputs([(flag, p) for flag, p in named if p], inputs)  # before any work
    result, said, _ = _recorded(scale_tool, spec, progress=progress)
    tables = {}
    writers = {}
    if result.scaled is not None:
        writers["<ModelScaler><output_model_file>"] = result.scaled.encode()
        writers["<ModelScaler><output_scale_file>"] = format_scale_set(result.factors).encode()
    if result.placed is not None:
        writers["<MarkerPlacer><output_model_file>"] = result.placed.encode()
        writers["<MarkerPlacer><output_marker_file>"] = format_marker_set(result.placed).encode()
    if result.static_pose is not None:
        import numpy as np

        from jaxbio.io import format_sto
        from jaxbio.tools._inverse_dynamics import coordinates_table

        t0 = spec.placer_time_range[0] if spec.placer_time_range else 0.0
        table = coordinates_table(result.model, np.array([t0]), result.static_pose[None], name="static pose")
        tables["static_pose"] = table
        writers["<MarkerPlacer><output_motion_file>"] = format_sto(table).encode()
    files, todo = {}, []
    for (flag, p), out in zip([x for x in named if x[1]], outputs):
        if flag in writers:
            data = writers[flag]
            todo.append((out, lambda f, data=data: f.write(data)))
            files[flag] = Path(p)
    write_outputs(todo)
    return ToolRun(setup, "ScaleTool", tables, files, said, None)


from jaxbio._lazy import attach  # noqa: E402

#: the tools' public names defined in the private modules (imported on first use: ``jaxbio
#: run-tool`` loads only the tools a session runs)
_EXPORTS = {
    "joint_reaction_tool": "_analyses",
    "muscle_path_wrenches": "_analyses",
    "coordinates_table": "_inverse_dynamics",
    "generalized_forces": "_inverse_dynamics",
    "InputMatch": "_inverse_dynamics",
    "inverse_dynamics_tool": "_inverse_dynamics",
    "InverseDynamicsInputs": "_inverse_dynamics",
    "prepare_inverse_dynamics": "_inverse_dynamics",
    "recording_matches": "_inverse_dynamics",
    "butterworth_coefficients": "_processing",
    "lowpass_iir": "_processing",
    "process_coordinates": "_processing",
    "ProcessedCoordinates": "_processing",
    "GCVSpline": "_gcvspl",
    "external_load_data": "_external_loads",
    "ExternalForce": "_external_loads",
    "ExternalForceData": "_external_loads",
    "ExternalLoads": "_external_loads",
    "read_external_loads": "_external_loads",
    "prepare_static_optimization": "_static_optimization",
    "solve_static_optimization": "_static_optimization",
    "static_optimization_problem": "_static_optimization",
    "static_optimization_tool": "_static_optimization",
    "StaticOptimizationTables": "_static_optimization",
    "CoordinateTask": "_inverse_kinematics",
    "inverse_kinematics_residuals": "_inverse_kinematics",
    "inverse_kinematics_tool": "_inverse_kinematics",
    "InverseKinematicsInputs": "_inverse_kinematics",
    "InverseKinematicsResult": "_inverse_kinematics",
    "marker_errors": "_inverse_kinematics",
    "prepare_inverse_kinematics": "_inverse_kinematics",
    "read_ik_tasks": "_inverse_kinematics",
    "solve_inverse_kinematics": "_inverse_kinematics",
    "format_marker_set": "_scale",
    "format_scale_set": "_scale",
    "Measurement": "_scale",
    "measurement_scale_factors": "_scale",
    "place_markers": "_scale",
    "read_scale_setup": "_scale",
    "scale_factors": "_scale",
    "scale_osim": "_scale",
    "scale_tool": "_scale",
    "ScaleResult": "_scale",
    "ScaleSetup": "_scale",
    "fitted_osim": "_joint_fit",
    "joint_fit": "_joint_fit",
    "joint_fit_objective": "_joint_fit",
    "JointFitResult": "_joint_fit",
    "model_scaling": "_joint_fit",
    "ModelScaling": "_joint_fit",
}

__getattr__, __dir__ = attach(__name__, globals(), exports=_EXPORTS)

__all__ = sorted(
    [
        *_EXPORTS,
        "ToolRun",
        "inverse_dynamics_job",
        "inverse_kinematics_job",
        "run",
        "run_setup",
        "setup_files",
        "static_optimization_job",
    ],
    key=str.lower,
)
