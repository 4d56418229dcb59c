"""Shared helpers of the text readers (.mot/.sto, .trc): reading a file's lines with the checks
that tell a wrong file type apart, and parsing numbers with errors that name file, line and
column."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable

import numpy as np

from jaxbio._files import read_bytes, text_encoding
from jaxbio._validate import echo

#: what a file's first bytes say it is, for files given under a text extension
_MAGIC = (
    (b"<?xml", "an XML document (an OpenSim .osim model or setup file?)"),
    (b"<", "an XML/HTML document"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\x89HDF", "an HDF5 file"),
)


def read_xml(path, kind: str):
    """The root element of the XML file ``path``; ``ValueError`` naming the file and ``kind``
    (e.g. ``"external loads file"``) for a file that cannot be read or is not XML (with the
    parser's line and column)."""
    import xml.etree.ElementTree as ET

    raw = read_bytes(os.fspath(path), kind)
    try:
        return parse_xml(raw)
    except ET.ParseError as e:
        raise xml_error(path, raw, f"not an XML file, expected an {kind}", e) from None


#: OpenSim's class names of nested classes (``HuntCrossleyForce::ContactParametersSet``) are its
#: element names; Python's XML parser reads ``:`` as a namespace separator and refuses them, so
#: ``::`` is swapped for this (a valid name) before parsing and back afterwards
_COLONS = b"__jaxbio_colons__"
_LEGACY_TAG = re.compile(rb"(</?[A-Za-z_][A-Za-z0-9_.-]*)::(?=[A-Za-z_])")


def parse_xml(raw: bytes):
    """The root element of the XML document ``raw`` (`xml.etree.ElementTree.fromstring`),
    accepting OpenSim's element names with ``::`` (``<HuntCrossleyForce::ContactParameters>``,
    which OpenSim writes and reads): the elements keep those names. ``ET.ParseError`` otherwise."""
    import xml.etree.ElementTree as ET

    if b"::" not in raw:
        return ET.fromstring(raw)
    swapped = raw
    while True:  # a name may hold several (A::B::C)
        again = _LEGACY_TAG.sub(lambda m: m.group(1) + _COLONS, swapped)
        if again == swapped:
            break
        swapped = again
    if swapped == raw:
        return ET.fromstring(raw)
    root = ET.fromstring(swapped)
    marker = _COLONS.decode()
    for elem in root.iter():
        if isinstance(elem.tag, str) and marker in elem.tag:
            elem.tag = elem.tag.replace(marker, "::")
    return root


def xml_error(path, raw: bytes, message: str, error) -> ValueError:
    """The error for XML bytes that do not parse: the encoding when that is the reason (UTF-32,
    or UTF-16 without a byte-order mark: the XML parser reads neither), else ``message`` and the
    parser's line and column."""
    encoding = text_encoding(raw)
    if encoding:
        return file_error(path, f"the file is {encoding} encoded; save it as UTF-8")
    return file_error(path, f"{message} ({error})")


def file_error(path, message: str, line: int | None = None) -> ValueError:
    """``ValueError("<path>[, line N]: <message>")`` (lines 1-based)."""
    where = f"{os.fspath(path)}" + (f", line {line}" if line is not None else "")
    return ValueError(f"{where}: {message}")


def read_lines(path, kind: str) -> list[str]:
    """The lines of the text file ``path`` (``\\n``, ``\\r\\n`` or ``\\r`` endings, a UTF-8 BOM
    dropped); ``kind`` (e.g. ``"motion file (OpenSim .mot/.sto)"``) names what was expected in the
    ``ValueError`` for a missing, empty, binary (a C3D file, …) or XML file."""
    path = os.fspath(path)
    raw = read_bytes(path, kind)
    if not raw.strip():
        raise file_error(path, f"the file is empty, expected a {kind}")
    encoding = text_encoding(raw)
    if encoding:
        raise file_error(path, f"the file is {encoding} encoded; save it as UTF-8 (or ASCII), not a {kind}")
    head = raw.lstrip()[:64]
    for magic, what in _MAGIC:
        if head.startswith(magic):
            raise file_error(path, f"is {what}, not a {kind}")
    c3d = raw[1:2] == b"P" and raw[0] in (1, 2)  # C3D: parameter block number, then 0x50
    if c3d or b"\x00" in raw[:4096]:
        hint = " (it looks like a C3D file: use jaxbio.io.read_c3d)" if c3d else ""
        raise file_error(path, f"is a binary file, not a {kind}{hint}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise file_error(path, f"is not UTF-8 text (byte {e.start}), not a {kind}", line) from None
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def parse_number(cell: str, path, line: int, column: str) -> float:
    """``float(cell)``; ``ValueError`` naming file, line and column for text that is not a
    number (a decimal comma, a unit, a word)."""
    try:
        return float(cell)
    except ValueError:
        hint = " (decimal comma? use '.')" if "," in cell else ""
        raise file_error(path, f"column {echo(column)}: {echo(cell)} is not a number{hint}", line) from None


def check_times(time: np.ndarray, path, lines: list[int]) -> None:
    """``ValueError`` naming the file and lines unless ``time`` is strictly increasing."""
    steps = np.diff(time)
    bad = np.flatnonzero(~(steps > 0))
    if bad.size:
        i = int(bad[0])
        what = "repeats" if steps[i] == 0 else "goes back"
        raise file_error(
            path,
            f"time {what}: {float(time[i + 1])!r} s after {float(time[i])!r} s (line {lines[i]}); "
            f"times must be strictly increasing",
            lines[i + 1],
        )


def read_only(a) -> np.ndarray:
    """A read-only float64 copy of ``a`` (the immutable fields of the readers' results)."""
    a = np.array(a, dtype=np.float64, copy=True)
    a.flags.writeable = False
    return a


def missing_error(names: Iterable[str], labels: tuple[str, ...], what: str, item: str = "column") -> ValueError:
    """The ``ValueError`` for column or marker ``names`` that ``what`` lacks, with the closest
    existing label for each and the list of labels."""
    names = list(names)
    hints = []
    for name in names[:10]:
        close = difflib.get_close_matches(name, labels, n=1) if len(name) <= 1000 else []
        hints.append(f"{echo(name)}" + (f" (did you mean {echo(close[0])}?)" if close else ""))
    if len(names) > 10:
        hints.append(f"… ({len(names)} in all)")
    return ValueError(f"{what} has no {item} {', '.join(hints)}; {item}s: {listing(labels)}")


def listing(labels, at_most: int = 40) -> str:
    """The labels for a message: the first ``at_most``, each cut by `jaxbio._validate.echo`'s
    rule, then how many there are in all."""
    shown = [label if len(label) <= 40 else echo(label, 40) for label in labels[:at_most]]
    return ", ".join(shown) + (f", … ({len(labels)} in all)" if len(labels) > at_most else "")


def known_names(names, labels: tuple[str, ...], what: str) -> list[str]:
    """``names`` (one name or an iterable of names) as a list, every one of them in ``labels``;
    otherwise the `missing_error` naming all that are not."""
    names = [names] if isinstance(names, str) else list(names)
    missing = [n for n in names if n not in labels]
    if missing:
        raise missing_error(missing, labels, what)
    return names


def duplicate_message(names, item: str) -> str | None:
    """ "duplicate <item> 'x' (1-based positions i and j)" for the first name that repeats in
    ``names``, or None when all are different."""
    seen: dict[str, int] = {}
    for j, name in enumerate(names):
        if name in seen:
            return f"duplicate {item} {echo(name)} (positions {seen[name] + 1} and {j + 1})"
        seen[name] = j
    return None
