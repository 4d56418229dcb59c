"""``jaxbio inverse-kinematics`` (short: ``jaxbio ik``), ``jaxbio inverse-dynamics`` (short:
``jaxbio id``), ``jaxbio static-optimization``,
``jaxbio run-tool SETUP.xml`` and ``jaxbio animate``: OpenSim's inverse dynamics and static
optimisation on jaxbio, and stick-figure animations.

``inverse-dynamics`` with ``--motion`` runs `jaxbio.tools.inverse_dynamics_tool` (OpenSim's
``InverseDynamicsTool``) and writes OpenSim's ``.sto`` (``--output``) or prints the table; without
``--motion`` it shows a shipped model's joint torques over a synthetic swing (the former
``jaxbio id``, `cmd_id` below). ``run-tool`` reads an OpenSim setup file as OpenSim users
write them (``InverseDynamicsTool``, or an ``AnalyzeTool`` with an ``InverseDynamics`` or a
``StaticOptimization`` analysis, written as OpenSim names its results:
``<name>_StaticOptimization_force.sto`` and ``_activation.sto`` in the results directory), paths
relative to the setup file. ``static-optimization`` runs `jaxbio.tools.static_optimization_tool`. Model forces: ``--forces-to-exclude`` (default
``muscles``), the setup's ``<forces_to_exclude>`` (none when absent, as OpenSim), and for an
AnalyzeTool what its InverseDynamics analysis keeps (``<replace_force_set>``, default true: no
model forces; else every force but the actuators). Bad input: one line on stderr, exit 2.
"""

from __future__ import annotations

import contextlib
import math
import sys
from pathlib import Path

from jaxbio._text import listing
from jaxbio.cli._common import _InputError, _number, _setup_jax, one_line


def _stages(total: int, disable: bool):
    """A tqdm bar over the stages of a run (stderr), or a silent stand-in."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    if tqdm is None or disable or not sys.stderr.isatty():
        return None
    return tqdm(total=total, unit="step", leave=False, bar_format="{desc}: {n_fmt}/{total_fmt} [{elapsed}]")


def _progress(bar):
    def say(message: str):
        if bar is not None:
            if bar.n or bar.desc:
                bar.update(1)
            bar.set_description_str(message)

    return say


@contextlib.contextmanager
def _warning_lines():
    """Warnings issued in the block print as one line each, ``warning: MESSAGE`` on stderr (they
    stay Python warnings: filters and ``pytest.warns`` see them as before)."""
    import warnings

    previous = warnings.formatwarning
    warnings.formatwarning = lambda message, *args, **kwargs: one_line(f"warning: {message}") + "\n"
    try:
        yield
    finally:
        warnings.formatwarning = previous


def _print_table(table, columns: int = 8) -> None:
    cols = list(range(min(columns, len(table.labels))))
    width = max(12, max(len(table.labels[i]) for i in cols) + 2)
    more = "  …" if len(table.labels) > len(cols) else ""
    print("time [s]".rjust(9) + "".join(table.labels[i].rjust(width) for i in cols) + more)
    for k in range(table.time.size):
        print(f"{table.time[k]:9.4f}" + "".join(f"{table.data[k, i]:{width}.4f}" for i in cols))


def _run_job(job: str, model, motion, *, no_progress: bool, **options) -> int:
    """``jaxbio inverse-dynamics --motion`` and ``jaxbio static-optimization``: the `jaxbio.tools`
    job named ``job`` (``inverse_dynamics_job``, ``static_optimization_job``) with a progress bar
    over its stages, its warnings as one line each, then `_report`."""
    _setup_jax()
    import jaxbio.tools

    bar = _stages(4 + (options.get("external_loads") is not None), no_progress)
    try:
        with _warning_lines():
            done = getattr(jaxbio.tools, job)(model, motion, progress=_progress(bar), **options)
    finally:
        if bar is not None:
            bar.close()
    _report(done)
    return 0


def _report(done) -> None:
    """The lines a tool run prints: a line per file written, or the table when nothing was written
    (its warnings were printed as they were issued, `_warning_lines`)."""
    for kind, path in done.files.items():
        table = done.tables.get(kind)
        if table is None:  # a model or an XML set (ScaleTool)
            print(f"wrote {path} ({kind})")
            continue
        what = {"generalized_forces": "generalised forces", "marker_errors": "marker errors"}.get(kind, kind)
        print(
            f"wrote {path}: {table.time.size} frames × {len(table.labels)} {what} "
            f"(t = {table.time[0]:.4f}–{table.time[-1]:.4f} s)"
        )
    if not done.files and done.tables:
        _print_table(
            done.tables.get("activations", done.tables.get("generalized_forces", done.tables.get("coordinates")))
        )


def cmd_static_optimization(args) -> int:
    return _run_job(
        "static_optimization_job",
        args.model,
        args.motion,
        external_loads=args.external_loads,
        actuators=tuple(args.actuators or ()),
        lowpass=args.lowpass,
        start=args.start,
        end=args.end,
        activation_exponent=args.activation_exponent,
        use_muscle_physiology=not args.no_muscle_physiology,
        output_forces=args.output_forces,
        output_activations=args.output_activations,
        no_progress=args.no_progress,
    )


def cmd_inverse_kinematics(args) -> int:
    return _run_job(
        "inverse_kinematics_job",
        args.model,
        args.markers,
        tasks=args.tasks,
        coordinate_file=args.coordinates,
        start=args.start,
        end=args.end,
        output=args.output,
        output_errors=args.output_errors,
        no_progress=args.no_progress,
    )


def cmd_inverse_dynamics(args) -> int:
    if args.motion is None:
        if args.model and Path(args.model).suffix.lower() == ".osim":
            raise ValueError(
                f"--model {args.model}: an OpenSim .osim model needs --motion (its coordinates, .mot/.sto); "
                "without --motion, --model is a shipped model name or a jaxbio model .json"
            )
        if (
            args.external_loads
            or args.output
            or args.lowpass is not None
            or args.start is not None
            or args.end is not None
            or args.forces_to_exclude is not None
        ):
            raise ValueError(
                "--external-loads, --forces-to-exclude, --output, --lowpass, --start and --end need --motion"
            )
        args.model = "arm7" if args.model is None else args.model
        return cmd_id(args)
    if not args.model:
        raise ValueError(
            "--model is needed with --motion: an OpenSim .osim file, a model .json or a shipped model name"
        )
    exclude = ("muscles",) if args.forces_to_exclude is None else tuple(args.forces_to_exclude)
    return _run_job(
        "inverse_dynamics_job",
        args.model,
        args.motion,
        external_loads=args.external_loads,
        forces_to_exclude=exclude,
        lowpass=args.lowpass,
        start=args.start,
        end=args.end,
        output=args.output,
        no_progress=args.no_progress,
    )


def cmd_run_tool(args) -> int:
    """``jaxbio run-tool SETUP.xml [SETUP.xml | FOLDER | 'GLOB' …]``: `jaxbio.tools.run_setup` on
    every setup in turn in this process, so that a model is read and its and a trial length's
    programs are traced and compiled once for the whole session (`jaxbio._aot`); with more than
    one setup, one progress bar over them. The first setup that fails stops the session with its
    one-line error (exit 2); the outputs of the setups before it are written."""
    _setup_jax()

    from jaxbio.tools import run_setup, setup_files

    setups = setup_files(args.setup)
    single = len(setups) == 1
    bar = _stages(len(setups), args.no_progress or single)
    try:
        for setup in setups:
            if bar is not None:
                bar.set_description_str(setup.name)
            stages = _stages(5, args.no_progress) if single else None
            try:
                with _warning_lines():
                    done = run_setup(setup, progress=_progress(stages) if single else None)
            finally:
                if stages is not None:
                    stages.close()
            _report(done)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return 0


def cmd_animate(args) -> int:
    _setup_jax()
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxbio import coordinates
    from jaxbio._files import check_outputs, write_outputs
    from jaxbio.io import load_model, read_storage
    from jaxbio.tools import process_coordinates
    from jaxbio.plot import animate

    (out,) = check_outputs([("--output", args.output)], [args.model, args.motion])
    fmt = Path(args.output).suffix.lower().lstrip(".")
    if fmt not in ("gif", "mp4"):
        raise ValueError(f"--output {args.output}: the animation format follows the extension, .gif or .mp4")
    m = load_model(args.model, dtype=jnp.float64)
    table = read_storage(args.motion)
    names = m.coordinate_names
    present = [n for n in names if n in table.labels]
    if not present:
        raise ValueError(
            f"{args.motion}: none of the model's coordinates {list(names)[:8]}… is a column "
            f"(columns: {listing(table.labels, 12)})"
        )
    rotational = [n for n in present if m.motion_types[names.index(n)] == "rotational"]
    p = process_coordinates(table.select(present), rotational=rotational)  # degrees -> radians, as read
    c = np.tile(np.asarray(m.defaults, float), (p.time.size, 1))
    c[:, [names.index(n) for n in present]] = p.q
    q = jax.jit(jax.vmap(lambda x: coordinates.to_tree(m.coordinates, x)))(jnp.asarray(c))
    bar = _stages(1, args.no_progress)
    pictures = []

    def render(f):
        def step(k, n):
            if bar is not None:
                bar.total = n
                bar.update(1)

        pictures.append(
            animate(
                m.tree,
                p.time,
                np.asarray(q),
                f,
                format=fmt,
                fps=args.fps,
                view=args.view,
                title=Path(args.motion).name,
                progress=step,
            )
        )

    try:
        write_outputs([(out, render)])
    finally:
        if bar is not None:
            bar.close()
    print(f"wrote {args.output}: {pictures[0]} pictures at {args.fps:g} fps ({p.time[-1] - p.time[0]:.3f} s of motion)")
    return 0


def _time():
    return _number("float", math.isfinite, "a finite time in s")


def _positive():
    return _number("float", lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


def _exponent():
    return _number("float", lambda v: math.isfinite(v) and v >= 2, "a finite number ≥ 2")


def add_parsers(sub, id_options) -> None:
    """Add ``inverse-dynamics`` (alias ``id``; ``id_options(parser)`` adds the synthetic-motion
    options of `cmd_id`, `_synthetic_motion_options`), ``run-tool`` and ``animate`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "inverse-dynamics",
        aliases=["id"],
        help="inverse dynamics of a motion file (OpenSim's "
        "InverseDynamicsTool), or of a shipped model over a synthetic motion",
    )
    p.add_argument(
        "--model",
        default=None,
        help="an OpenSim .osim file, a model .json file or a shipped model name (default arm7 without --motion)",
    )
    p.add_argument("--motion", default=None, help="coordinates (.mot/.sto, e.g. inverse kinematics output)")
    p.add_argument("--external-loads", default=None, help="OpenSim ExternalLoads .xml (its data file beside it)")
    p.add_argument(
        "--forces-to-exclude",
        nargs="*",
        default=None,
        metavar="NAME",
        help="model forces left out, as OpenSim's forces_to_exclude: force or ForceSet group names, or "
        "all, actuators, muscles (default: muscles; give the option alone to exclude nothing)",
    )
    p.add_argument(
        "--lowpass",
        type=_positive(),
        default=None,
        help="low-pass cutoff for the coordinates, Hz "
        "(OpenSim's lowpass_cutoff_frequency_for_coordinates; default none); > 0 and at most 0.9 × the "
        "Nyquist frequency 1/(2 Δt) of the samples (nearer, the filter rings); a cutoff below about 2 / the "
        "motion's duration mostly replaces the motion by the filter's start-up (typical: 6 Hz)",
    )
    p.add_argument("--start", type=_time(), default=None, help="first time, s (default the motion's)")
    p.add_argument("--end", type=_time(), default=None, help="last time, s (default the motion's)")
    p.add_argument("--output", default=None, help="write OpenSim's .sto here (default: print the table)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    id_options(p)
    p.set_defaults(func=cmd_inverse_dynamics)

    ik = sub.add_parser(
        "inverse-kinematics",
        aliases=["ik"],
        help="coordinates that fit measured markers (OpenSim's InverseKinematicsTool)",
    )
    ik.add_argument("--model", required=True, help="an OpenSim .osim file with a MarkerSet")
    ik.add_argument("--markers", required=True, help="marker trajectories (.trc; units from its header)")
    ik.add_argument(
        "--tasks",
        default=None,
        help="an OpenSim IKTaskSet .xml (marker and coordinate tasks with weights; default: every marker of "
        "the file that the model has, weight 1)",
    )
    ik.add_argument("--coordinates", default=None, help="coordinate file (.mot/.sto) for from_file coordinate tasks")
    ik.add_argument("--start", type=_time(), default=None, help="first time, s (default the file's)")
    ik.add_argument("--end", type=_time(), default=None, help="last time, s (default the file's)")
    ik.add_argument("--output", default=None, help="write OpenSim's .mot here (degrees; default: print the table)")
    ik.add_argument("--output-errors", default=None, help="write the marker errors .sto here")
    ik.add_argument("--no-progress", action="store_true", help="no progress bar")
    ik.set_defaults(func=cmd_inverse_kinematics)

    so = sub.add_parser(
        "static-optimization",
        help="muscle activations and forces of a motion file (OpenSim's "
        "AnalyzeTool with a StaticOptimization analysis)",
    )
    so.add_argument("--model", required=True, help="an OpenSim .osim file with Thelen2003 or Millard2012 muscles")
    so.add_argument("--motion", required=True, help="coordinates (.mot/.sto, e.g. inverse kinematics output)")
    so.add_argument("--external-loads", default=None, help="OpenSim ExternalLoads .xml (its data file beside it)")
    so.add_argument(
        "--actuators",
        nargs="+",
        default=None,
        metavar="XML",
        help="OpenSim force set files of reserve actuators (CoordinateActuators), appended to the model's",
    )
    so.add_argument(
        "--lowpass",
        type=_positive(),
        default=None,
        help="low-pass cutoff for the coordinates, Hz "
        "(default none); > 0 and at most 0.9 × the Nyquist frequency 1/(2 Δt) of the samples; a cutoff below about "
        "2 / the motion's duration mostly replaces the motion by the filter's start-up (typical: 6 Hz)",
    )
    so.add_argument("--start", type=_time(), default=None, help="first time, s (default the motion's)")
    so.add_argument("--end", type=_time(), default=None, help="last time, s (default the motion's)")
    so.add_argument("--activation-exponent", type=_exponent(), default=2.0, help="p of the cost Σ aᵖ (≥ 2, default 2)")
    so.add_argument(
        "--no-muscle-physiology",
        action="store_true",
        help="muscle strength = max isometric force (OpenSim's use_muscle_physiology false)",
    )
    so.add_argument("--output-forces", default=None, help="write the forces' .sto here")
    so.add_argument("--output-activations", default=None, help="write the activations' .sto here (neither: print)")
    so.add_argument("--no-progress", action="store_true", help="no progress bar")
    so.set_defaults(func=cmd_static_optimization)

    r = sub.add_parser(
        "run-tool",
        help="run OpenSim tool setup files (InverseKinematicsTool, InverseDynamicsTool, ScaleTool; AnalyzeTool "
        "with an InverseDynamics or a StaticOptimization analysis), several in one process",
    )
    r.add_argument(
        "setup",
        nargs="+",
        help="setup .xml files (their paths are relative to each), folders (every "
        "tool setup .xml in it) or quoted globs; run in turn, a model's programs compiled once",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_run_tool)

    a = sub.add_parser("animate", help="stick-figure animation of a motion file on a model (GIF or MP4)")
    a.add_argument("--model", required=True, help="an OpenSim .osim file, a model .json file or a shipped model name")
    a.add_argument("--motion", required=True, help="coordinates (.mot/.sto)")
    a.add_argument("--output", required=True, help="the animation, .gif or .mp4 (MP4 needs ffmpeg)")
    a.add_argument("--fps", type=_positive(), default=25.0, help="pictures per second of motion (default 25)")
    a.add_argument(
        "--view",
        default="auto",
        choices=["auto", "xy", "yx", "xz", "zx", "yz", "zy", "3d"],
        help="the plane drawn (default auto: gravity's plane with the widest extent)",
    )
    a.add_argument("--no-progress", action="store_true", help="no progress bar")
    a.set_defaults(func=cmd_animate)


MAX_FRAMES = 100_000  # `jaxbio id` prints one line per frame; more is a typo, not a table


def cmd_id(args) -> int:
    if not args.model:
        raise _InputError("--model is empty: give a shipped model name or a model .json file")
    _setup_jax()
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxbio as jb

    try:
        tree = jb.load_model(args.model, dtype=jnp.float64).tree
    except ValueError as e:  # load_model's messages start with the file's path
        raise _InputError(str(e)) from None
    n = tree.nq
    overflow = f"overflow float64 for --amplitude {args.amplitude} and --duration {args.duration}; use smaller values"
    with np.errstate(all="ignore"):  # an overflow is refused below, in one line
        t = np.linspace(0.0, args.duration, args.frames)
        # a smooth motion: every joint swings ±amplitude at its own frequency
        freq = 0.5 + 0.25 * np.arange(n)
        amp = np.where(tree.is_revolute, args.amplitude, 0.05)
        phase = 2 * np.pi * freq[None, :] * t[:, None]
        q = amp * np.sin(phase)
        qd = amp * 2 * np.pi * freq * np.cos(phase)
        qdd = -amp * (2 * np.pi * freq) ** 2 * np.sin(phase)
    if not all(np.all(np.isfinite(x)) for x in (q, qd, qdd)):
        raise _InputError(f"the motion's angles, velocities or accelerations {overflow}")
    tau = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(tree, q, qd, qdd)
    tau = np.asarray(tau)
    if not np.all(np.isfinite(tau)):
        raise _InputError(f"the joint torques of {tree.name!r} {overflow}")
    units = ["N·m" if r else "N" for r in tree.is_revolute]
    print(
        f"Inverse dynamics of {tree.name!r} ({n} DOF, {float(np.sum(tree.masses)):.2f} kg), wrench recursion, float64"
    )
    print(
        f"motion: q_i(t) = A_i sin(2π f_i t), A = {args.amplitude} rad (revolute) / 0.05 m, "
        f"f_i = 0.5 + 0.25 i Hz, {args.frames} frames over {args.duration} s"
    )
    width = max(max(len(s) for s in tree.names), 10) + 2  # names, and numbers such as -1234.567
    head = "t [s]".rjust(7) + "".join(name[: width - 1].rjust(width) for name in tree.names)
    cols = list(range(n))
    if n > args.columns:
        cols = cols[: args.columns]
        head = "t [s]".rjust(7) + "".join(tree.names[i][: width - 1].rjust(width) for i in cols) + "  …"
    print(head)
    print("".rjust(7) + "".join(f"[{units[i]}]".rjust(width) for i in cols))
    for k in range(len(t)):
        print(f"{t[k]:7.3f}" + "".join(f"{tau[k, i]:{width}.3f}" for i in cols))
    return 0


def _synthetic_motion_options(pid) -> None:
    """The options of ``jaxbio inverse-dynamics`` without ``--motion`` (`cmd_id`)."""
    pid.add_argument(
        "--frames",
        type=_number("int", lambda v: 1 <= v <= MAX_FRAMES, f"an integer from 1 to {MAX_FRAMES}"),
        default=6,
        help="number of frames (default 6)",
    )
    pid.add_argument(
        "--duration",
        type=_number("float", lambda v: math.isfinite(v) and v > 0, "a finite number > 0 (s)"),
        default=1.0,
        help="motion duration in s (default 1)",
    )
    pid.add_argument(
        "--amplitude",
        type=_number("float", math.isfinite, "a finite number (rad)"),
        default=0.5,
        help="joint amplitude in rad (default 0.5)",
    )
    pid.add_argument(
        "--columns",
        type=_number("int", lambda v: v >= 1, "an integer ≥ 1"),
        default=8,
        help="at most this many joint columns (default 8)",
    )
