"""Marker trajectories: `Markers`, and `read_trc` for OpenSim/Motion Analysis ``.trc`` files.

The ``.trc`` layout (as OpenSim's ``TRCFileAdapter`` reads it; tab-separated)::

    PathFileType  4  (X/Y/Z)  <file name>
    DataRate  CameraRate  NumFrames  NumMarkers  Units  OrigDataRate  OrigDataStartFrame  OrigNumFrames
    60.00     60.00       150        41          mm     60.00         1                   150
    Frame#  Time  <marker 1>  <tab>  <tab>  <marker 2> …
                  X1  Y1  Z1  X2  Y2  Z2 …
    <blank line>
    1  0.000  x  y  z  x  y  z …

A marker with an empty cell in a frame is missing there (occluded): its three coordinates are
NaN in `Markers.positions`, as in OpenSim. Positions are converted to metres from the
``Units`` of the header (``mm``, ``cm`` or ``m``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from jaxbio._validate import echo
from jaxbio._text import check_times, duplicate_message, file_error, missing_error, parse_number, read_lines, read_only

_KIND = "marker file (.trc)"
#: units of length per metre, for the Units of .trc and C3D files (positions are divided by it)
PER_METRE = MappingProxyType({"mm": 1000.0, "cm": 100.0, "m": 1.0})


@dataclasses.dataclass(frozen=True, eq=False)
class Markers:
    """Marker trajectories (from `read_trc` or `read_c3d`).

    - ``time``: ``(n,)`` s, strictly increasing.
    - ``names``: ``m`` marker names, unique.
    - ``positions``: ``(n, m, 3)`` m, in the lab frame of the file (x, y, z as recorded; OpenSim
      models are y up, many labs z up); NaN where a marker is missing in a frame (occluded),
      and only there (all three coordinates together).
    - ``rate``: the sampling rate in Hz (``DataRate`` / ``POINT:RATE``).
    - ``header``: the file's metadata as strings (``DataRate``, ``NumFrames``, ``Units`` (the
      file's unit, before conversion), …).

    ``marker(name)`` is ``(n, 3)`` m; ``missing`` is ``(n, m)`` bool. Arrays are read-only.
    """

    time: np.ndarray
    names: tuple[str, ...]
    positions: np.ndarray
    rate: float
    header: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        time = np.asarray(self.time, dtype=np.float64)
        positions = np.asarray(self.positions, dtype=np.float64)
        names = tuple(self.names)
        if (message := duplicate_message(names, "marker name")) is not None:
            raise ValueError(message)
        if time.ndim != 1:
            raise ValueError(f"time must be a vector, got shape {time.shape}")
        if positions.shape != (time.shape[0], len(names), 3):
            raise ValueError(f"positions has shape {positions.shape}, expected ({time.shape[0]}, {len(names)}, 3)")
        if not np.all(np.isfinite(time)) or np.any(np.diff(time) <= 0):
            raise ValueError("time must be finite and strictly increasing")
        if np.any(np.isinf(positions)):
            raise ValueError("positions contain inf (missing markers are NaN)")
        partial = np.isnan(positions).any(-1) & ~np.isnan(positions).all(-1)
        if partial.any():
            f, k = (int(i) for i in np.argwhere(partial)[0])
            raise ValueError(f"marker {echo(names[k])} at frame {f} has some coordinates NaN and others not")
        rate = float(self.rate)
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"rate must be a positive number of Hz, got {echo(self.rate)}")
        object.__setattr__(self, "time", read_only(time))
        object.__setattr__(self, "positions", read_only(positions))
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "header", MappingProxyType({str(k): str(v) for k, v in dict(self.header).items()}))

    def marker(self, name: str) -> np.ndarray:
        """The trajectory of marker ``name``, ``(n, 3)`` m (NaN where missing)."""
        try:
            return self.positions[:, self.names.index(name)]
        except ValueError:
            raise missing_error([name], self.names, "markers", "marker") from None

    @property
    def missing(self) -> np.ndarray:
        """``(n, m)`` bool: the marker is missing (NaN) in that frame."""
        return np.isnan(self.positions[..., 0])

    def __repr__(self) -> str:
        n, m, _ = self.positions.shape
        shown = ", ".join(self.names[:6]) + (", …" if m > 6 else "")
        return f"Markers({n} frames × {m} markers [{shown}], {self.rate:g} Hz, {int(self.missing.sum())} missing)"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("\t")]


def _fast_row(cells: list[str], m: int) -> np.ndarray | None:
    """The ``(m, 3)`` coordinates of a data row read at once (``float`` of every cell, an empty
    cell as NaN, a triple with a NaN all NaN: the values of `_checked_row`), or None where
    `_checked_row` must read it to name a problem (a cell that is not a number, an infinity)."""
    try:
        values = np.fromiter(map(float, [c or "nan" for c in cells[2:]]), float, 3 * m).reshape(m, 3)
    except ValueError:
        return None
    if np.isinf(values).any():
        return None
    values[np.isnan(values).any(axis=1)] = np.nan
    return values


def _checked_row(cells: list[str], names, path, line: int) -> np.ndarray:
    """A data row's ``(m, 3)`` coordinates cell by cell: a marker with an empty cell or a NaN is
    missing (NaN, as OpenSim); ``ValueError`` naming the file, line and column for a cell that is
    not a number, or an infinite coordinate."""
    m = len(names)
    row = np.full((m, 3), np.nan)
    for k in range(m):
        triple = cells[2 + 3 * k : 5 + 3 * k]
        if any(not c for c in triple):
            continue  # missing marker, as OpenSim: NaN
        xyz_k = [parse_number(c, path, line, f"{names[k]} {'XYZ'[a]}") for a, c in enumerate(triple)]
        if any(math.isinf(v) for v in xyz_k):
            raise file_error(path, f"marker {echo(names[k])}: infinite coordinate", line)
        if not any(math.isnan(v) for v in xyz_k):
            row[k] = xyz_k
    return row


def read_trc(path) -> Markers:
    """Read a ``.trc`` marker file (the layout is in this module's docstring).

    Returns `Markers`: ``time (n,)`` s (the ``Time`` column), ``names``, ``positions (n, m, 3)``
    in metres (NaN where a marker is missing), ``rate`` = ``DataRate`` Hz, ``header``.

    ``ValueError`` naming the file (and line, column) for: no ``PathFileType`` first line, a
    missing ``DataRate``/``NumFrames``/``NumMarkers``/``Units`` entry, an unknown unit, a marker
    count that differs from ``NumMarkers``, a coordinate row that is not ``X1 Y1 Z1 X2 …``, a row
    with the wrong number of cells, a cell that is not a number, inf, ``NumFrames`` that
    differs from the number of rows, time not strictly increasing, no data, a binary or XML file.
    """
    lines = read_lines(path, _KIND)
    first = lines[0].split()
    if not first or first[0] != "PathFileType":
        hint = (
            " (it looks like an OpenSim .mot/.sto file: use jaxbio.io.read_storage)"
            if any(line.strip() == "endheader" for line in lines)
            else ""
        )
        raise file_error(path, f"the first line must start with 'PathFileType'{hint}", 1)
    if len(lines) < 5:
        raise file_error(
            path, "the header is cut short (expected 5 lines: PathFileType, keys, values, marker names, X1 Y1 Z1 …)"
        )
    keys = [c for c in _cells(lines[1]) if c]
    values = [c for c in _cells(lines[2]) if c]
    if len(keys) != len(values):
        raise file_error(path, f"{len(keys)} header keys on line 2 but {len(values)} values on line 3", 3)
    header = {"PathFileType": " ".join(first[1:])}
    header.update(zip(keys, values))
    for key in ("DataRate", "NumFrames", "NumMarkers", "Units"):
        if key not in header:
            raise file_error(path, f"the header has no {echo(key)} (keys on line 2: {', '.join(keys)})", 2)
    rate = parse_number(header["DataRate"], path, 3, "DataRate")
    if not (math.isfinite(rate) and rate > 0):
        raise file_error(path, f"DataRate must be a positive number of Hz, got {echo(header['DataRate'])}", 3)
    counts = {}
    for key in ("NumFrames", "NumMarkers"):
        try:
            counts[key] = int(header[key])
        except ValueError:
            raise file_error(path, f"{key} must be a whole number, got {echo(header[key])}", 3) from None
    unit = header["Units"]
    if unit not in PER_METRE:
        raise file_error(path, f"Units must be one of {', '.join(PER_METRE)}, got {echo(unit)}", 3)
    labels = [c for c in _cells(lines[3]) if c]
    if labels[:2] != ["Frame#", "Time"]:
        raise file_error(path, f"line 4 must start with 'Frame#' and 'Time', got {labels[:2]}", 4)
    names = labels[2:]
    m = counts["NumMarkers"]
    if len(names) != m:
        raise file_error(path, f"NumMarkers={m} but line 4 names {len(names)} markers", 4)
    if (message := duplicate_message(names, "marker name")) is not None:
        raise file_error(path, message, 4)
    xyz = [c for c in _cells(lines[4]) if c]
    if len(xyz) != 3 * m or any(not c.upper().startswith("XYZ"[j % 3]) for j, c in enumerate(xyz)):
        raise file_error(
            path,
            f"line 5 must hold X1 Y1 Z1 … for {m} markers ({3 * m} labels), got "
            f"{len(xyz)}: {' '.join(xyz[:6])}{' …' if len(xyz) > 6 else ''}",
            5,
        )
    per_metre = PER_METRE[unit]
    width = 2 + 3 * m
    times, rows, line_numbers = [], [], []
    for i in range(5, len(lines)):
        if not lines[i].strip():
            continue
        cells = _cells(lines[i])
        while len(cells) > width and not cells[-1]:
            cells.pop()  # trailing tabs
        if len(cells) != width:
            raise file_error(
                path, f"row has {len(cells)} cells, expected {width} (Frame#, Time and X Y Z for {m} markers)", i + 1
            )
        t = parse_number(cells[1], path, i + 1, "Time")
        row = _fast_row(cells, m)
        if row is None:
            row = _checked_row(cells, names, path, i + 1)
        if not math.isfinite(t):
            raise file_error(path, f"Time is {echo(cells[1])}, not a finite number", i + 1)
        times.append(t)
        rows.append(row / per_metre)
        line_numbers.append(i + 1)
    if not rows:
        raise file_error(path, "no data rows after the header")
    if counts["NumFrames"] != len(rows):
        raise file_error(path, f"NumFrames={counts['NumFrames']} but the file has {len(rows)} data rows")
    time = np.asarray(times)
    check_times(time, path, line_numbers)
    return Markers(time=time, names=tuple(names), positions=np.stack(rows), rate=rate, header=header)
