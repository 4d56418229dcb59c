"""C3D motion-capture files through ezc3d (an optional dependency: ``pip install ezc3d``, or the
``c3d`` extra ``pip install "jaxbio[c3d]"``). ezc3d is the maintained reader OpenSim itself
uses (``OpenSim/Common/C3DFileAdapter.cpp``); it is imported on the first call only."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from jaxbio._files import read_bytes
from jaxbio.io._markers import PER_METRE, Markers
from jaxbio._text import duplicate_message, file_error, missing_error, read_only

#: the largest C3D file read (bytes): 2 GiB (long captures with many analog channels are large)
MAX_C3D_BYTES = 2 * 2**30

_INSTALL = 'read_c3d needs the ezc3d package: pip install ezc3d (or pip install "jaxbio[c3d]")'


@dataclasses.dataclass(frozen=True, eq=False)
class AnalogChannels:
    """Analog channels of a C3D file (force plates, EMG, …).

    - ``time``: ``(n,)`` s, ``i / rate`` (from 0, as OpenSim's C3D adapter).
    - ``names``: ``c`` channel labels (``ANALOG:LABELS``); ``units``: their units as written in
      ``ANALOG:UNITS`` (``""`` where the file gives none; values are *not* converted).
    - ``data``: ``(n, c)`` the values (scale and offset applied by ezc3d).
    - ``rate``: sampling rate in Hz (``ANALOG:RATE``; usually a multiple of the marker rate).

    ``channel(name)`` is one channel ``(n,)``. Arrays are read-only.
    """

    time: np.ndarray
    names: tuple[str, ...]
    units: tuple[str, ...]
    data: np.ndarray
    rate: float

    def __post_init__(self):
        data = np.asarray(self.data, dtype=np.float64)
        if data.shape != (np.shape(self.time)[0], len(self.names)) or len(self.units) != len(self.names):
            raise ValueError(
                f"data has shape {data.shape}, expected ({np.shape(self.time)[0]}, {len(self.names)}) "
                f"and one unit per channel"
            )
        object.__setattr__(self, "time", read_only(self.time))
        object.__setattr__(self, "data", read_only(data))
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "units", tuple(self.units))
        object.__setattr__(self, "rate", float(self.rate))

    def channel(self, name: str) -> np.ndarray:
        """The channel ``name``, ``(n,)`` in its file unit."""
        try:
            return self.data[:, self.names.index(name)]
        except ValueError:
            raise missing_error([name], self.names, "analog channels", "channel") from None


@dataclasses.dataclass(frozen=True, eq=False)
class C3DData:
    """What `read_c3d` returns: ``markers`` (`Markers`, metres), ``analogs``
    (`AnalogChannels`, or None when the file has none), ``header`` (selected metadata:
    ``first_frame``, ``last_frame``, the file's point ``units``)."""

    markers: Markers
    analogs: AnalogChannels | None
    header: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "header", MappingProxyType({str(k): str(v) for k, v in dict(self.header).items()}))


def _labels(group: dict, name: str, count: int, prefix: str) -> list[str]:
    """Labels of a C3D group, continued by LABELS2, LABELS3 … (more than 255 entries), padded
    with ``prefix<i>`` where the file has fewer labels than entries."""
    labels: list[str] = []
    for key in [name] + [f"{name}{i}" for i in range(2, 100)]:
        if key not in group:
            break
        labels += [str(v).strip() for v in group[key]["value"]]
    labels = labels[:count]
    return labels + [f"{prefix}{i + 1}" for i in range(len(labels), count)]


def _unique(names: list[str], path, what: str) -> tuple[str, ...]:
    if (message := duplicate_message(names, f"{what} label")) is not None:
        raise file_error(path, message)
    return tuple(names)


def read_c3d(path) -> C3DData:
    """Read a C3D file with ezc3d.

    Returns `C3DData`:

    - ``markers``: `Markers` with ``positions (n, m, 3)`` in metres (converted from
      ``POINT:UNITS``: mm, cm or m), NaN where a marker is invalid (negative residual, or NaN
      in the file), ``time = i / POINT:RATE`` s from 0 (as OpenSim), ``names`` from
      ``POINT:LABELS``.
    - ``analogs``: `AnalogChannels` (``data (n_analog, c)``, names, units, rate) or None.
    - ``header``: ``first_frame``/``last_frame`` (the C3D header's, 0-based as ezc3d reports
      them) and the file's point ``units``.

    ``ImportError`` with the install hint when ezc3d is missing; ``ValueError`` naming the
    file when it is missing, is not a C3D file, has an unknown point unit or duplicate labels.
    """
    try:
        import ezc3d
    except ImportError:
        raise ImportError(_INSTALL) from None
    path = os.fspath(path)
    if not os.path.lexists(path):
        raise ValueError(f"{path}: no such file")
    head = read_bytes(path, "C3D file", MAX_C3D_BYTES, first=2)  # a regular file (ezc3d then opens it)
    if len(head) < 2 or head[1:2] != b"P":
        raise file_error(path, "is not a C3D file (its second byte is not the C3D key 0x50)")
    try:
        c3d = ezc3d.c3d(path)
    except Exception as e:  # ezc3d raises RuntimeError/IOError subclasses with C++ messages
        raise file_error(path, f"ezc3d cannot read it as C3D: {e}") from None
    parameters, data, header = c3d["parameters"], c3d["data"], c3d["header"]
    point = parameters.get("POINT", {})
    points = np.asarray(data["points"], dtype=np.float64)  # (4, m, n)
    m, n = points.shape[1], points.shape[2]
    rate = float(header["points"]["frame_rate"])
    units = str(point["UNITS"]["value"][0]).strip() if "UNITS" in point and len(point["UNITS"]["value"]) else "mm"
    if units not in PER_METRE:
        raise file_error(path, f"POINT:UNITS must be one of {', '.join(PER_METRE)}, got {units!r}")
    positions = points[:3].transpose(2, 1, 0) / PER_METRE[units]  # (n, m, 3)
    residuals = data.get("meta_points", {}).get("residuals")
    invalid = np.isnan(positions).any(-1)
    if residuals is not None and np.size(residuals):
        invalid |= np.asarray(residuals)[0].T < 0
    positions[invalid] = np.nan
    if not (math.isfinite(rate) and rate > 0):
        if n > 0:
            raise file_error(path, f"POINT:RATE must be positive, got {rate!r}")
        rate = 1.0
    names = _unique(_labels(point, "LABELS", m, "marker"), path, "POINT")
    markers = Markers(
        time=np.arange(n) / rate,
        names=names,
        positions=positions,
        rate=rate,
        header={"DataRate": f"{rate:g}", "Units": units, "NumFrames": n, "NumMarkers": m},
    )
    analogs = None
    values = np.asarray(data["analogs"], dtype=np.float64)
    if values.ndim == 3 and values.shape[1] > 0 and values.shape[2] > 0:
        analog = parameters.get("ANALOG", {})
        c, na = values.shape[1], values.shape[2]
        arate = float(header["analogs"]["frame_rate"])
        if not (math.isfinite(arate) and arate > 0):
            raise file_error(path, f"ANALOG:RATE must be positive, got {arate!r}")
        unit_values = [str(u).strip() for u in analog.get("UNITS", {"value": []})["value"]][:c]
        analogs = AnalogChannels(
            time=np.arange(na) / arate,
            names=_unique(_labels(analog, "LABELS", c, "channel"), path, "ANALOG"),
            units=tuple(unit_values + [""] * (c - len(unit_values))),
            data=values[0].T,
            rate=arate,
        )
    info = {
        "first_frame": header["points"]["first_frame"],
        "last_frame": header["points"]["last_frame"],
        "units": units,
    }
    return C3DData(markers=markers, analogs=analogs, header=info)
