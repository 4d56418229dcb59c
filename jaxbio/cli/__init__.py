"""The ``jaxbio`` command line.

``jaxbio sprint`` (the main job, also ``jaxbio`` with no arguments) fits the fitness-dependent
Hamiltonian sprinter to 100 m split times; ``jaxbio inverse-dynamics`` (short ``jaxbio id``) runs
OpenSim's inverse dynamics on a model and motion file (``--motion``; `jaxbio.cli._opensim`), or shows a
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
import os
import sys

from jaxbio.cli._common import _InputError, _Parser, one_line


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jaxbio", description="Differentiable biomechanics in JAX.")
    sub = p.add_subparsers(dest="command")
    from jaxbio.cli._opensim import _synthetic_motion_options, add_parsers as add_opensim_tools

    add_opensim_tools(sub, _synthetic_motion_options)
    from jaxbio.cli._sprint import add_parser as add_sprint

    add_sprint(sub)
    return p


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
