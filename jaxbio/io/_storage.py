"""OpenSim storage files (``.mot``, ``.sto``): `Table`, `read_storage`, `write_sto`.

Both header styles that OpenSim's ``Storage`` reads (``OpenSim/Common/Storage.cpp``,
``parseHeaders``) are accepted:

- the OpenSim one: a name line, ``version=1`` (or a later version), ``nRows=…``,
  ``nColumns=…`` (time included), ``inDegrees=yes|no``, other ``key=value`` lines
  (``DataType=double``, ``OpenSimVersion=…``), free description lines, ``endheader``;
- the old SIMM one (``# SIMM Motion File Header:``, ``name …``, ``datacolumns …``,
  ``datarows …``, ``range …``, ``otherdata …``; also ``nr``/``nc``), with no ``version`` line.

then a label row starting with ``time`` and whitespace-separated numbers, one row a line.

**Degrees or radians.** As OpenSim decides: an ``inDegrees`` line says so (``yes``/``y`` or
``no``/``n``, any case; "Angles are in degrees." in old files too). Without one, a file with no
``version`` line (version 0) and the extension ``.mot`` is in degrees ("Motion files from SIMM
are in degrees", ``Storage::Storage``); any other file is in radians. One deliberate
difference: OpenSim forces degrees for a version-0 ``.mot`` even when it has ``inDegrees=no``;
here the explicit line wins (pass ``in_degrees=True`` to `read_storage` to do as OpenSim does).
The reader only records the flag: which columns are angles is the model's business (see
`process_coordinates`).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import numpy as np

from jaxbio._validate import echo
from jaxbio._text import (
    check_times,
    duplicate_message,
    file_error,
    known_names,
    missing_error,
    parse_number,
    read_lines,
    read_only,
)

_KIND = "motion file (OpenSim .mot/.sto)"
_ROWS = ("nr", "nRows", "datarows")
_COLUMNS = ("nc", "nColumns", "datacolumns")
#: SIMM's reserved header words (Storage::simmReservedKeys) and its other space-separated keys
_SIMM_KEYS = (
    "range",
    "Range",
    "wrap",
    "Wrap",
    "WRAP",
    "event",
    "enforce_loops",
    "enforce_constraints",
    "calc_derivatives",
    "otherdata",
    "units",
)


@dataclasses.dataclass(frozen=True, eq=False)
class Table:
    """A time series read from (or to be written to) an OpenSim ``.mot``/``.sto`` file.

    Fields (immutable; the arrays are read-only float64 copies):

    - ``time``: ``(n,)`` s, strictly increasing, finite, ``n >= 1``.
    - ``labels``: ``k`` column names (the file's labels after ``time``), unique, non-empty.
    - ``data``: ``(n, k)`` the columns, finite, in the file's units: angles in degrees when
      ``in_degrees`` (OpenSim never mixes: every rotational column follows the flag),
      translations in m, forces in N, moments in N·m.
    - ``in_degrees``: the file's rotational columns are in degrees (see the module docstring).
    - ``name``: the header's name line; ``description``: its free text lines (``\\n``-joined).
    - ``header``: every ``key=value`` header line (and the SIMM ``key value`` ones), as strings.

    ``column(name)`` is one column ``(n,)``; ``select(names)`` a `Table` of those columns in that
    order. Both raise ``ValueError`` naming missing columns (with the closest label).
    ``dataclasses.replace(table, data=...)`` makes a changed copy (validated again).
    """

    time: np.ndarray
    labels: tuple[str, ...]
    data: np.ndarray
    in_degrees: bool = False
    name: str = ""
    description: str = ""
    header: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        time = np.asarray(self.time)
        data = np.asarray(self.data)
        if isinstance(self.labels, str):
            raise ValueError("labels must be a sequence of column names, not one string")
        labels = tuple(self.labels)
        for i, label in enumerate(labels):
            if not isinstance(label, str) or not label.strip():
                raise ValueError(f"labels[{i}] must be a non-empty string, got {echo(label)}")
        if (message := duplicate_message(labels, "column label")) is not None:
            raise ValueError(f"{message} (after time)")
        for arr, name in ((time, "time"), (data, "data")):
            if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
                raise ValueError(f"{name} must be real numbers, got dtype {arr.dtype}")
        if time.ndim != 1 or time.shape[0] < 1:
            raise ValueError(f"time must be a non-empty vector, got shape {time.shape}")
        if data.shape != (time.shape[0], len(labels)):
            raise ValueError(
                f"data has shape {data.shape}, expected ({time.shape[0]}, {len(labels)}) "
                f"(one row per time, one column per label)"
            )
        if not np.all(np.isfinite(time)):
            raise ValueError(f"time contains NaN or inf (first at row {int(np.argmax(~np.isfinite(time)))})")
        bad = ~np.isfinite(data)
        if bad.any():
            r, c = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"data contains NaN or inf: column {echo(labels[c])}, row {r} (t = {float(time[r])!r} s)"
                f"; {int(bad.sum())} bad value(s)"
            )
        steps = np.diff(time)
        if np.any(~(steps > 0)):
            i = int(np.argmax(~(steps > 0)))
            raise ValueError(
                f"time must be strictly increasing: row {i + 1} has {float(time[i + 1])!r} s after {float(time[i])!r} s"
            )
        header = {str(k): str(v) for k, v in dict(self.header).items()}
        object.__setattr__(self, "time", read_only(time))
        object.__setattr__(self, "data", read_only(data))
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "in_degrees", bool(self.in_degrees))
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "description", str(self.description))
        object.__setattr__(self, "header", MappingProxyType(header))

    def column(self, name: str) -> np.ndarray:
        """The column ``name``, ``(n,)`` (read-only)."""
        try:
            return self.data[:, self.labels.index(name)]
        except ValueError:
            raise missing_error([name], self.labels, f"table {echo(self.name)}") from None

    def select(self, names: Iterable[str]) -> Table:
        """A `Table` of the columns ``names`` in that order (same time, flags and header)."""
        names = known_names(names, self.labels, f"table {echo(self.name)}")
        idx = [self.labels.index(n) for n in names]
        return dataclasses.replace(self, labels=tuple(names), data=self.data[:, idx])

    def __repr__(self) -> str:
        n, k = self.data.shape
        unit = "degrees" if self.in_degrees else "radians"
        span = f"t = {self.time[0]:g}…{self.time[-1]:g} s"
        shown = ", ".join(self.labels[:6]) + (", …" if k > 6 else "")
        return f"Table({self.name!r}: {n} rows × {k} columns [{shown}], {span}, {unit})"


def _parse_header(lines: list[str], path):
    """Header of a storage file, as ``Storage::parseHeaders``: returns the index of the line after
    ``endheader`` and the parsed fields."""
    name = None
    description = []
    header: dict[str, str] = {}
    rows = columns = None
    version = 0
    in_degrees = None
    first = True
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        delim = min((p for p in (line.find(" "), line.find("\t"), line.find("=")) if p >= 0), default=len(line))
        key = line[:delim]
        rest = line[delim:].lstrip(" \t=").strip()
        if key == "endheader":
            return i + 1, name, "\n".join(description), header, rows, columns, version, in_degrees
        if key == "name":
            name = header[key] = rest
        elif key in _ROWS or key in _COLUMNS:
            header[key] = rest
            try:
                value = int(rest)
            except ValueError:
                raise file_error(path, f"{key} must be a whole number, got {echo(rest)}", i + 1) from None
            if value < 0:
                raise file_error(path, f"{key} must be >= 0, got {value}", i + 1)
            if key in _ROWS:
                rows = value
            else:
                columns = value
        elif key == "version":
            header[key] = rest
            try:
                version = int(rest)
            except ValueError:
                raise file_error(path, f"version must be a whole number, got {echo(rest)}", i + 1) from None
        elif key == "inDegrees":
            header[key] = rest
            if rest.lower() not in ("yes", "y", "no", "n"):
                raise file_error(path, f"inDegrees must be yes or no, got {echo(rest)}", i + 1)
            in_degrees = rest.lower() in ("yes", "y")
        elif key == "DataType":
            header[key] = rest
            if rest != "double":
                raise file_error(
                    path, f"DataType={rest} is not supported (only tables of numbers, DataType=double)", i + 1
                )
        elif key == "Angles" and version == 0 and line in ("Angles are in degrees.", "Angles are in radians."):
            in_degrees = line == "Angles are in degrees."
            description.append(line)
        elif key in _SIMM_KEYS:
            header[key] = rest
        elif "=" in line:
            k, v = line.split("=", 1)
            header[k.strip()] = v.strip()
        elif first:
            name = line  # OpenSim files start with their name, without a key
        else:
            description.append(line)
        first = False
    raise file_error(path, "no 'endheader' line: not an OpenSim .mot/.sto file, or its header is cut short")


def read_storage(path, *, in_degrees: bool | None = None) -> Table:
    """Read an OpenSim ``.mot`` or ``.sto`` file (either header style, see the module docstring).

    - ``path``: the file.
    - ``in_degrees``: override the file's degrees/radians flag (None: as the header says).

    Returns a `Table`: ``time (n,)`` s, ``labels``, ``data (n, k)`` float64 in the file's units,
    ``in_degrees``, ``name``, ``description``, ``header``.

    ``ValueError`` naming the file (and the line, and the column where there is one) for: a
    missing file, an empty one, a binary (C3D) or XML file, no ``endheader``, ``nColumns`` that
    contradicts the label row, a label row that does not start with ``time`` (or has two), a
    row with too few or too many cells, a cell that is not a number, NaN or inf, time that goes
    back, no data rows, ``DataType`` other than ``double``.

    Read as OpenSim's ``Storage`` reads them, with a warning: a file with another number of rows
    than its ``nRows`` (the first ``nRows`` rows, or all there are), and a row at the time of the
    row before (it replaces that row, ``Storage::append``), a label repeated (its first column is
    read, ``Storage::getStateIndex``).
    """
    lines = read_lines(path, _KIND)
    if lines[0].strip().startswith("PathFileType"):
        raise file_error(path, "is a .trc marker file, not an OpenSim .mot/.sto file (use jaxbio.io.read_trc)", 1)
    start, name, description, header, rows, columns, version, flag = _parse_header(lines, path)
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == len(lines):
        raise file_error(path, "no column labels after 'endheader' (and no data)")
    label_line = i + 1
    labels = lines[i].split()
    if labels[0] != "time":
        raise file_error(path, f"the first column must be 'time', got {echo(labels[0])}", label_line)
    if (message := duplicate_message(labels, "column label")) is not None:
        if labels.count("time") > 1:
            raise file_error(path, message, label_line)
    if columns is not None and columns != len(labels):
        raise file_error(
            path,
            f"the header says nColumns={columns} (time included) but the label row has {len(labels)} columns",
            label_line,
        )
    values: list[list[float]] = []
    line_numbers: list[int] = []
    for j in range(i + 1, len(lines)):
        cells = lines[j].split()
        if not cells:
            continue
        if len(cells) != len(labels):
            raise file_error(
                path,
                f"row has {len(cells)} cells, expected {len(labels)} (one per label: time + {len(labels) - 1})",
                j + 1,
            )
        row = [parse_number(c, path, j + 1, labels[m]) for m, c in enumerate(cells)]
        for m, v in enumerate(row):
            if not np.isfinite(v):
                raise file_error(
                    path,
                    f"column {echo(labels[m])}: {echo(cells[m])} is not a finite number (data row {len(values)})",
                    j + 1,
                )
        values.append(row)
        line_numbers.append(j + 1)
    if not values:
        raise file_error(path, "no data rows after the column labels")
    if rows is not None and rows != len(values):
        # OpenSim's Storage reads nRows rows, or as many as there are (a row count left from an
        # edit is common: opensim-core's own UsingRelativePaths test motion says 151 and has 7)
        kept = min(rows, len(values))
        warnings.warn(
            f"{os.fspath(path)}: the header says nRows={rows} but the file has {len(values)} data rows: "
            f"the first {kept} are read, as OpenSim reads them",
            stacklevel=2,
        )
        values, line_numbers = values[:kept], line_numbers[:kept]
    array = np.asarray(values, dtype=np.float64)
    first = [j for j, label in enumerate(labels) if labels.index(label) == j]
    if len(first) < len(labels):  # OpenSim's Storage finds a label's first column (getStateIndex)
        dropped = [f"{label!r} (position {j + 1})" for j, label in enumerate(labels) if labels.index(label) != j]
        warnings.warn(
            f"{os.fspath(path)}, line {label_line}: repeated column labels {', '.join(dropped)}: the first "
            f"column of each name is read, as OpenSim reads it",
            stacklevel=2,
        )
        labels, array = [labels[j] for j in first], array[:, first]
    repeats = np.flatnonzero(np.diff(array[:, 0]) == 0)
    if repeats.size:  # OpenSim's Storage::append: a row at the last row's time replaces it
        warnings.warn(
            f"{os.fspath(path)}: {repeats.size} row(s) repeat the time of the row before (first at line "
            f"{line_numbers[repeats[0] + 1]}, t = {float(array[repeats[0], 0])!r} s): the later row replaces the "
            f"earlier, as OpenSim reads them",
            stacklevel=2,
        )
        keep = np.ones(len(array), bool)
        keep[repeats] = False
        array = array[keep]
        line_numbers = [n for n, k in zip(line_numbers, keep) if k]
    check_times(array[:, 0], path, line_numbers)
    if in_degrees is None:
        if flag is None:
            flag = version < 1 and os.fspath(path).lower().endswith(".mot")
        in_degrees = flag
    return Table(
        time=array[:, 0],
        labels=tuple(labels[1:]),
        data=array[:, 1:],
        in_degrees=bool(in_degrees),
        name=name if name is not None else "",
        description=description,
        header=header,
    )


def _format(value: float, precision: int | None) -> str:
    if precision is None:
        return repr(float(value))
    return f"{value:{8 + precision}.{precision}f}"  # OpenSim's IO::GetDoubleOutputFormat, "%{pad+p}.{p}lf"


def write_sto(path, table: Table, *, precision: int | None = None) -> None:
    """Write ``table`` to ``path`` (`format_sto`)."""
    text = format_sto(table, precision=precision)
    with open(os.fspath(path), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def format_sto(table: Table, *, precision: int | None = None) -> str:
    """The text of ``table`` in the layout of OpenSim's ``Storage::print`` (what OpenSim's
    tools write, e.g. the inverse-dynamics results)::

        <name>
        version=1
        nRows=<n>
        nColumns=<k + 1>
        inDegrees=<yes|no>
        <description lines, if any>
        endheader
        time<TAB><label 1><TAB>…
        <t><TAB><value><TAB>…

    - ``precision``: None (default) writes each number as the shortest decimal that reads back to
      the same float64 (exact round trip); an int ``p`` writes OpenSim's fixed format
      ``%{8+p}.{p}f`` (OpenSim's default is 8, its tools' ``output_precision`` 20).

    Other ``header`` entries are not written (``nRows``, ``nColumns`` and ``inDegrees`` are
    regenerated). ``ValueError`` for labels or a name that the format cannot hold (whitespace
    in a label, a line break in the name, an ``endheader`` line in the description).
    """
    if not isinstance(table, Table):
        raise ValueError(f"table must be a jaxbio.io.Table, got {type(table).__name__}")
    if precision is not None and (
        isinstance(precision, bool) or not isinstance(precision, int) or not 0 <= precision <= 40
    ):
        raise ValueError(f"precision must be None or an int from 0 to 40, got {echo(precision)}")
    for label in table.labels:
        if any(ch.isspace() for ch in label):
            raise ValueError(f"label {echo(label)} contains whitespace; OpenSim splits labels at spaces and tabs")
    if "time" in table.labels:
        raise ValueError("a data column is labelled 'time'; the time column is written from table.time")
    name = table.name or "jaxbio"
    if "\n" in name or "\r" in name:
        raise ValueError(f"name must be one line, got {echo(name)}")
    description = [line for line in table.description.replace("\r", "\n").split("\n") if line.strip()]
    if any(line.strip().split("=")[0].split()[0] == "endheader" for line in description):
        raise ValueError("description contains an 'endheader' line, which would end the header early")
    n, k = table.data.shape
    out = [name, "version=1", f"nRows={n}", f"nColumns={k + 1}", f"inDegrees={'yes' if table.in_degrees else 'no'}"]
    out += description
    out.append("endheader")
    out.append("\t".join(("time",) + table.labels))
    for t, row in zip(table.time.tolist(), table.data.tolist()):
        out.append("\t".join(_format(v, precision) for v in [t] + row))
    return "\n".join(out) + "\n"
