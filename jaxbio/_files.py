"""Files: reading an input's bytes with named errors (`read_bytes`, for the model loader and the
motion-file readers), and the command line's outputs, checked before any work and written
all-or-nothing after it.

Policy (the ``jaxbio`` commands that write files, e.g. ``jaxbio sprint --json/--plot``):

- ``check_outputs`` runs before any fitting and refuses (``ValueError``, one line naming the
  option and the path) an output that is an input file (same resolved path or the same file
  through a link), two options naming the same file, a directory, a path whose directory does not
  exist or cannot be written, or an existing read-only file.
- An existing output file that the user named explicitly is overwritten (normal CLI behaviour).
  Symbolic links are followed: the file they point to is replaced, the link is kept.
- ``write_outputs`` renders every file into a temporary file in the target's own directory
  (flushed and fsynced), and only when all of them have been produced renames each into place
  with ``os.replace`` (atomic on POSIX and Windows). If anything fails, the temporaries are
  removed and no output is created or changed. A new file gets the usual permissions (0666 less
  the umask), a replaced one keeps its mode.
- An existing output that is not a regular file (``/dev/null``, ``/dev/stdout``, a FIFO) is
  written in place after the regular files were renamed (it cannot be replaced).
"""

from __future__ import annotations

import dataclasses
import io
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Iterable


@dataclasses.dataclass(frozen=True)
class Output:
    """A checked output: ``option`` (e.g. ``--json``) and ``path`` as given, ``target`` the
    resolved path written, ``special`` True for an existing non-regular file (written in place)."""

    option: str
    path: str
    target: str
    special: bool = False


def read_bytes(path, what: str) -> bytes:
    """The bytes of the file ``path``; ``ValueError`` "``path``: …" naming ``what`` (e.g. "model
    file") when it is missing, a directory, unreadable, or not a usable path."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a directory, not a {what}") from None
    except PermissionError:
        raise ValueError(f"{path}: permission denied (cannot read the {what})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    except ValueError as e:  # e.g. an embedded NUL byte
        raise ValueError(f"{str(path)!r}: not a usable file path ({e})") from None


def _same_file(a: str, b: str) -> bool:
    if os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b)):
        return True
    try:
        return os.path.samefile(a, b)  # hard links, case-insensitive file systems
    except OSError:
        return False


def check_outputs(outputs: Iterable[tuple[str, str | None]], inputs: Iterable[str] = ()) -> list[Output]:
    """Check ``(option, path)`` outputs (``None`` paths are skipped) against the ``inputs`` paths;
    returns the ``Output`` list or raises ``ValueError`` (see the module docstring)."""
    inputs = [os.fspath(p) for p in inputs]
    checked: list[Output] = []
    for option, path in outputs:
        if path is None:
            continue
        path = os.fspath(path)
        where = f"{option} {path}"
        if not path.strip():
            raise ValueError(f"{option}: empty file name")
        target = os.path.realpath(path)
        if os.path.isdir(target):
            raise ValueError(f"{where}: is a directory, not a file")
        for inp in inputs:
            if _same_file(target, inp):
                raise ValueError(f"{where}: is the input file {inp}; refusing to overwrite an input")
        for other in checked:
            if _same_file(target, other.target):
                raise ValueError(f"{where}: same file as {other.option} {other.path}; give different files")
        parent = os.path.dirname(target)
        if not os.path.isdir(parent):
            raise ValueError(f"{where}: directory {parent} does not exist")
        special = False
        if os.path.exists(target):
            mode = os.stat(target).st_mode
            special = not stat.S_ISREG(mode)
            if not os.access(target, os.W_OK):
                raise ValueError(f"{where}: file is not writable")
        if not special and not os.access(parent, os.W_OK | os.X_OK):
            raise ValueError(f"{where}: cannot create files in directory {parent}")
        checked.append(Output(option, path, target, special))
    return checked


def _temporary(target: str) -> tuple[int, str]:
    """A new empty file next to ``target`` (mode 0666 less the umask), as ``(fd, path)``."""
    d, base = os.path.split(target)
    while True:
        tmp = os.path.join(d, f".{base}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:  # pragma: no cover — 32 random bits
            continue


def write_outputs(items: Iterable[tuple[Output, Callable[[BinaryIO], None]]]) -> None:
    """Write every ``(output, writer)``: ``writer(f)`` writes the file's bytes to the binary file
    ``f``. All or nothing (see the module docstring); the writers' exceptions propagate."""
    staged: list[tuple[Output, str | bytes]] = []  # temporary path, or the bytes of a special file
    try:
        for out, writer in items:
            if out.special:
                buf = io.BytesIO()
                writer(buf)
                staged.append((out, buf.getvalue()))
                continue
            fd, tmp = _temporary(out.target)
            staged.append((out, tmp))
            with os.fdopen(fd, "wb") as f:
                writer(f)
                f.flush()
                os.fsync(f.fileno())
            if os.path.exists(out.target):
                os.chmod(tmp, stat.S_IMODE(os.stat(out.target).st_mode))
        for i, (out, tmp) in enumerate(staged):
            if not out.special:
                os.replace(tmp, out.target)
                staged[i] = (out, b"")  # done: nothing to clean up
        for out, data in staged:
            if out.special:
                with open(out.target, "wb") as f:
                    f.write(data)
    except BaseException:
        for out, tmp in staged:
            if isinstance(tmp, str):
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        raise
