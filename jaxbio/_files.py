"""Files: reading an input's bytes with named errors (`read_bytes`, the one reader of every input
file: models, motions, setups, external loads, split and trace files), and the command line's
outputs, checked before any work and written all-or-nothing after it.

Inputs: a regular file (or a link to one) of at most `MAX_INPUT_BYTES` (256 MiB); anything else
(a FIFO, a device such as ``/dev/zero``, a socket, a directory, a larger file) is refused with
``ValueError`` "``path``: …" before it is read, so that no input blocks or fills the memory.

Policy (the ``jaxbio`` commands that write files, e.g. ``jaxbio sprint --json/--plot``):

- ``check_outputs`` runs before any fitting and refuses (``ValueError``, one line naming the
  option and the path) an output that is an input file (same resolved path or the same file
  through a link), two options naming the same file, a directory, a path whose directory does not
  exist or cannot be written, or an existing read-only file. That a directory can be written is
  tested by creating (and removing) a temporary file in it, not by permission bits: root passes
  those, and a read-only mount or ``/sys`` would only fail after the work.
- An existing output file that the user named explicitly is overwritten (normal CLI behaviour).
  Symbolic links are followed: the file they point to is replaced, the link is kept.
- ``write_outputs`` renders every file into a temporary file in the target's own directory
  (flushed and fsynced), and only when all of them have been produced renames each into place
  with ``os.replace`` (atomic on POSIX and Windows). If anything fails, the temporaries are
  removed and no output is created or changed; a failed write (a full disk) is an
  `OutputWriteError` (``OSError`` and ``ValueError``) naming the option and the path. A new
  file gets the usual permissions (0666 less the umask), a replaced one keeps its mode.
- An existing output that is not a regular file (``/dev/null``, ``/dev/stdout``, a FIFO) is
  written in place after the regular files were renamed (it cannot be replaced). A FIFO that no
  process opens for reading within `FIFO_WAIT_S` is an error, not a hang.
"""

from __future__ import annotations

import dataclasses
import io
import os
import secrets
import stat
from typing import BinaryIO
from collections.abc import Callable, Iterable


@dataclasses.dataclass(frozen=True)
class Output:
    """A checked output: ``option`` (e.g. ``--json``) and ``path`` as given, ``target`` the
    resolved path written, ``special`` True for an existing non-regular file (written in place)."""

    option: str
    path: str
    target: str
    special: bool = False


#: the largest input file read (bytes): 256 MiB. Motion, model, setup and split files are text of
#: a few MB at most; a larger one is a wrong file (``/dev/zero``, a video), refused before it fills
#: the memory.
MAX_INPUT_BYTES = 256 * 2**20

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(ValueError):
    """An input file that cannot be read: ``str(e)`` is "``path``: ``problem``"; ``path`` and
    ``problem`` are kept for readers with their own message format (the split files')."""

    def __init__(self, path, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}")


def _a(what: str) -> str:
    """``what`` with its indefinite article ("a model file", "an OpenSim model file")."""
    return ("an " if what[:1].lower() in "aeiou" else "a ") + what


def _not_regular(path, mode: int, what: str) -> InputFileError:
    if stat.S_ISDIR(mode):
        return InputFileError(path, f"is a directory, not {_a(what)}")
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return InputFileError(path, f"not a regular file ({kind}); {_a(what)} must be a regular file")


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


def _too_large(path, size: int | None, what: str, limit: int) -> InputFileError:
    """``size`` None: more than ``limit`` bytes were read (a file that grew), its size unknown."""
    given = "more than " + _size(limit) if size is None else _size(size)
    return InputFileError(path, f"too large for {_a(what)} ({given}; the limit is {_size(limit)})")


def check_input(path, what: str, limit: int | None = None) -> str:
    """``os.fspath(path)`` when it names an existing regular file of at most ``limit`` bytes (a
    link to one counts); else `InputFileError` (a ``ValueError``) "``path``: …" naming ``what``:
    missing, a directory, not a regular file (a FIFO, a device, a socket: never opened, so never
    blocks), too large, or not a usable path. For readers that open the file themselves (ezc3d);
    everything else reads with `read_bytes`."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    try:
        path = os.fspath(path)
        st = os.stat(path)
    except OSError as e:
        raise _unreadable(path, e, what) from None
    except (ValueError, TypeError) as e:  # an embedded NUL byte, not a path
        raise InputFileError(repr(str(path)), f"not a usable file path ({e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode, what)
    if st.st_size > limit:
        raise _too_large(path, st.st_size, what, limit)
    return path


def _unreadable(path, e: OSError, what: str) -> InputFileError:
    """The `InputFileError` of an input that ``os.stat`` or ``os.open`` refused with ``e``."""
    if isinstance(e, FileNotFoundError):
        return InputFileError(path, f"no such {what}")
    if isinstance(e, IsADirectoryError):
        return InputFileError(path, f"is a directory, not {_a(what)}")
    if isinstance(e, PermissionError):
        return InputFileError(path, f"permission denied (cannot read the {what})")
    return InputFileError(path, f"cannot read the {what} ({e.strerror or e})")


def read_bytes(path, what: str, limit: int | None = None, first: int | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` bytes (`MAX_INPUT_BYTES`); the
    one way the package reads an input file. `InputFileError` (a ``ValueError``) "``path``: …"
    naming ``what`` (e.g. "model file") when it is missing, a directory, not a regular file (a
    FIFO, ``/dev/zero``, a socket), larger than ``limit``, unreadable, or not a usable path.

    The path is checked with ``os.stat`` before it is opened, and opened non-blocking and checked
    again on the open file (``fstat``), so a FIFO never blocks, even if it replaced the file
    between the two; the read stops after ``limit`` bytes, even for a file that grows. ``first``:
    only the file's first ``first`` bytes (a magic number)."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    path = check_input(path, what, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise _unreadable(path, e, what) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode, what)
        chunks, size = [], 0
        end = limit + 1 if first is None else min(first, limit + 1)
        while size < end:
            chunk = os.read(fd, min(end - size, 2**24))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise _too_large(path, None, what, limit)
        return b"".join(chunks)
    except OSError as e:
        raise InputFileError(path, f"cannot read the {what} ({e.strerror or e})") from None
    finally:
        os.close(fd)


_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32 (little-endian, with a byte-order mark)"),
    (b"\x00\x00\xfe\xff", "UTF-32 (big-endian, with a byte-order mark)"),
    (b"\xff\xfe", "UTF-16 (little-endian, with a byte-order mark)"),
    (b"\xfe\xff", "UTF-16 (big-endian, with a byte-order mark)"),
)


def text_encoding(raw: bytes) -> str | None:
    """The encoding of text ``raw`` when it is UTF-16 or UTF-32 (what Windows tools write as
    "Unicode"), with or without a byte-order mark, e.g. ``"UTF-16 (little-endian, without a
    byte-order mark)"``; None otherwise (UTF-8, ASCII, binary). Without a mark it is told by where
    the NUL bytes of ASCII characters fall in the first 4 kB: every second byte (UTF-16) or three
    of every four (UTF-32), on the high side (little-endian) or the low side (big-endian)."""
    for bom, name in _BOMS:
        if raw.startswith(bom):
            return name
    head = raw[:4096]
    n = len(head) // 4 * 4
    if n < 4:
        return None
    zeros = [head[k:n:4].count(0) / (n // 4) for k in range(4)]  # share of NUL bytes at each position mod 4
    nul, text = (lambda z: z >= 0.9), (lambda z: z <= 0.1)
    if text(zeros[0]) and all(nul(z) for z in zeros[1:]):
        return "UTF-32 (little-endian, without a byte-order mark)"
    if all(nul(z) for z in zeros[:3]) and text(zeros[3]):
        return "UTF-32 (big-endian, without a byte-order mark)"
    if text(zeros[0]) and text(zeros[2]) and nul(zeros[1]) and nul(zeros[3]):
        return "UTF-16 (little-endian, without a byte-order mark)"
    if nul(zeros[0]) and nul(zeros[2]) and text(zeros[1]) and text(zeros[3]):
        return "UTF-16 (big-endian, without a byte-order mark)"
    return None


class OutputWriteError(OSError, ValueError):
    """A write of `write_outputs` that failed (a full disk): ``str(e)`` is one line naming the
    option and the path; an ``OSError`` (with the ``errno``) for library callers, a
    ``ValueError`` for the command line's one-line errors."""

    def __str__(self):
        return self.strerror or super().__str__()


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
        if not special:
            _probe(where, parent)
        checked.append(Output(option, path, target, special))
    return checked


def _probe(where: str, parent: str) -> None:
    """Create and remove an empty temporary file in ``parent``, as `write_outputs` will: the only
    check that also holds for root (who passes every permission bit) and on read-only mounts and
    pseudo file systems (``/proc``, ``/sys``). ``ValueError`` "``where``: cannot create files in
    directory …" with the system's reason."""
    try:
        fd, tmp = _temporary(os.path.join(parent, "probe"))
    except OSError as e:
        raise ValueError(f"{where}: cannot create files in directory {parent} ({e.strerror or e})") from None
    os.close(fd)
    try:
        os.unlink(tmp)
    except OSError:  # pragma: no cover — created a moment ago
        pass


def _temporary(target: str) -> tuple[int, str]:
    """A new empty file next to ``target`` (mode 0666 less the umask), as ``(fd, path)``."""
    d, base = os.path.split(target)
    while True:
        tmp = os.path.join(d, f".{base}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:  # pragma: no cover — 32 random bits
            continue


#: how long an output FIFO may wait for a process that reads it (s), before the write fails
FIFO_WAIT_S = 10.0


def _open_special(out: Output) -> int:
    """Open the special output ``out`` (``/dev/null``, a pipe, a FIFO) for writing. A FIFO that
    no process reads would block forever: it is opened non-blocking, retried for `FIFO_WAIT_S`,
    then refused (``OSError`` ENXIO, "no process reads it"); once open, writes block as usual."""
    import errno
    import time

    flags = os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(out.target, flags)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            if time.monotonic() > deadline:
                raise OSError(errno.ENXIO, f"a FIFO that no process reads (waited {FIFO_WAIT_S:g} s)") from None
            time.sleep(0.05)
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return fd


def write_outputs(items: Iterable[tuple[Output, Callable[[BinaryIO], None]]]) -> None:
    """Write every ``(output, writer)``: ``writer(f)`` writes the file's bytes to the binary file
    ``f``. All or nothing (see the module docstring); the writers' exceptions propagate."""
    staged: list[tuple[Output, str | bytes]] = []  # temporary path, or the bytes of a special file
    current = None  # the output being written, named in the error of a failed write
    try:
        for out, writer in items:
            current = out
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
                current = out
                os.replace(tmp, out.target)
                staged[i] = (out, b"")  # done: nothing to clean up
        for out, data in staged:
            if out.special:
                current = out
                with os.fdopen(_open_special(out), "wb") as f:
                    f.write(data)
    except BaseException as e:
        for _out, tmp in staged:
            if isinstance(tmp, str):
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        if isinstance(e, OSError) and not isinstance(e, BrokenPipeError) and current is not None:  # a full disk
            raise OutputWriteError(
                e.errno, f"{current.option} {current.path}: cannot write the file ({e.strerror or e})"
            ) from None
        raise
