"""The ``jaxbio`` command line.

``jaxbio sprint`` (the main job, also ``jaxbio`` with no arguments) fits the fitness-dependent
Hamiltonian sprinter to 100 m split times; ``jaxbio inverse-dynamics`` (short ``jaxbio id``) runs
OpenSim's inverse dynamics on a model and motion file (``--motion``; `jaxbio.io._cli`), or shows a
shipped model's joint torques over a synthetic motion; ``jaxbio run-tool SETUP.xml`` runs an
OpenSim setup file; ``jaxbio animate`` draws a motion as a stick figure (GIF/MP4).

Exit codes: 0 ok; 2 bad input (one line on stderr: ``jaxbio: error: <path>: <problem>`` for a
model file, ``jaxbio id: error: argument --frames: …`` for an option; also for an input that is not
a regular file or too large, and an output that cannot be written, see `jaxbio._files`); 141 when the reader of
stdout goes away (``jaxbio id | head -1``: nothing more is printed, no traceback; 128 + SIGPIPE, as
a shell reports for tools stopped by the closed pipe); 130 on Ctrl-C; 1 for what a subcommand
documents (``jaxbio sprint``: a fit did not converge). Anything else is a bug and stays a
traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

MAX_FRAMES = 100_000  # `jaxbio id` prints one line per frame; more is a typo, not a table
MAX_MESSAGE = 1000  # the longest error line printed, in characters


def one_line(message) -> str:
    """An error message as one line of at most `MAX_MESSAGE` characters: line breaks become
    spaces, and a longer message keeps its start and its end (where the reason usually is). The
    values inside are already cut by `jaxbio._validate.echo`; this is the last guard."""
    text = str(message).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    if len(text) > MAX_MESSAGE:
        text = f"{text[:MAX_MESSAGE * 2 // 3]} … {text[-(MAX_MESSAGE // 3 - 3):]}"
    return text


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``jaxbio id: error: …`` on stderr, exit 2; no usage block)."""

    def error(self, message):
        self.exit(2, one_line(f"{self.prog}: error: {message} (see '{self.prog} --help')") + "\n")


def _number(kind: str, check, what: str):
    """An argparse ``type``: ``kind`` (``int``/``float``) that passes ``check``, else the error
    "must be ``what``, got …"."""
    from jaxbio._validate import echo

    def parse(text: str):
        try:
            value = int(text) if kind == "int" else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {echo(text)}") from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {echo(text)}")
        return value
    parse.__name__ = kind
    return parse


def _enable_x64():
    import jax

    jax.config.update("jax_enable_x64", True)  # the CLI validates in float64 (API.md)


def cmd_id(args) -> int:
    if not args.model:
        raise _InputError("--model is empty: give a shipped model name or a model .json file")
    _enable_x64()
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxbio as jb

    try:
        tree = jb.load_model(args.model, dtype=jnp.float64)
    except ValueError as e:  # load_model's messages start with the file's path
        raise _InputError(str(e)) from None
    n = tree.nq
    overflow = (f"overflow float64 for --amplitude {args.amplitude} and --duration {args.duration}; "
                "use smaller values")
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
    print(f"Inverse dynamics of {tree.name!r} ({n} DOF, {float(np.sum(tree.masses)):.2f} kg), "
          f"wrench recursion, float64")
    print(f"motion: q_i(t) = A_i sin(2π f_i t), A = {args.amplitude} rad (revolute) / 0.05 m, "
          f"f_i = 0.5 + 0.25 i Hz, {args.frames} frames over {args.duration} s")
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


class _InputError(ValueError):
    """Bad user input of ``jaxbio id``: printed as one line, exit 2 (a ``ValueError``, so that it
    is caught as one also when this module runs as ``python -m jaxbio.cli``, where it exists twice:
    ``__main__._InputError`` and ``jaxbio.cli._InputError``)."""


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jaxbio", description="Differentiable biomechanics in JAX.")
    sub = p.add_subparsers(dest="command")
    from jaxbio.io._cli import add_parsers as add_opensim_tools

    add_opensim_tools(sub, _synthetic_motion_options)
    from jaxbio.sprint._cli import add_parser as add_sprint

    add_sprint(sub)
    return p


def _synthetic_motion_options(pid) -> None:
    """The options of ``jaxbio inverse-dynamics`` without ``--motion`` (`cmd_id`)."""
    pid.add_argument("--frames", type=_number("int", lambda v: 1 <= v <= MAX_FRAMES, f"an integer from 1 to {MAX_FRAMES}"),
                     default=6, help="number of frames (default 6)")
    pid.add_argument("--duration", type=_number("float", lambda v: math.isfinite(v) and v > 0, "a finite number > 0 (s)"),
                     default=1.0, help="motion duration in s (default 1)")
    pid.add_argument("--amplitude", type=_number("float", math.isfinite, "a finite number (rad)"),
                     default=0.5, help="joint amplitude in rad (default 0.5)")
    pid.add_argument("--columns", type=_number("int", lambda v: v >= 1, "an integer ≥ 1"),
                     default=8, help="at most this many joint columns (default 8)")


class _PipeClosed(BaseException):
    """The reader of stdout went away. A BaseException, so that no subcommand's ``except
    Exception`` / ``except OSError`` reports it as an error of its own."""


class _Stdout:
    """``sys.stdout`` whose ``BrokenPipeError`` becomes `_PipeClosed` (everything else delegated)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise _PipeClosed from None

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        try:
            return self._stream.flush()
        except BrokenPipeError:
            raise _PipeClosed from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _discard_stdout(stream) -> None:
    """Point stdout's file descriptor at /dev/null, so that the interpreter's final flush of what
    is still buffered does not print "Exception ignored … BrokenPipeError" (Python docs, "Note on
    SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor (e.g. captured output)
        pass


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            args = parser.parse_args(["sprint"] + (argv or []))
    except SystemExit as e:  # --help (0) or a bad option (2, one line printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if args.command == "sprint":
        return args.func(args)
    try:
        return args.func(args)
    except BrokenPipeError:
        raise  # stdout closed: `main` exits 141
    except (_InputError, ValueError, OSError) as e:  # bad input or an unusable file: one line
        print(one_line(f"jaxbio: error: {e}"), file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """Run the ``jaxbio`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    stdout = sys.stdout
    sys.stdout = _Stdout(stdout)
    try:
        code = _run(argv)
        sys.stdout.flush()
        return code
    except (_PipeClosed, BrokenPipeError):
        _discard_stdout(stdout)
        return 141
    except KeyboardInterrupt:
        print("jaxbio: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
