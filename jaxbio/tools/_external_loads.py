"""OpenSim ExternalLoads files (``.xml``) and their data (``.mot``/``.sto``): ground reactions and
other measured loads, as OpenSim's ``ExternalForce`` reads them (opensim-core
``Simulation/Model/ExternalForce.cpp``, ``ExternalLoads.cpp``, OpenSim 4.x):

- each ``<ExternalForce>`` names the body it is ``applied_to_body``, the frames its force (and
  torque) and its point are expressed in (default ``ground``), and *identifiers*: the force,
  point and torque are the data columns whose labels **start with** the identifier (exactly three
  each, in file order: ``ground_force_v`` → ``ground_force_vx, _vy, _vz``). No force identifier
  means no force; no point means the body's origin; no torque identifier means no torque.
  ``appliesForce`` false (or the pre-4.0 ``isDisabled`` true) drops it.
- the data are interpolated in time by an interpolating cubic spline (OpenSim's ``GCVSpline`` of
  degree 3 with zero error variance; piecewise linear for two or three rows, constant for one),
  with no filtering: OpenSim 4 ignores ``external_loads_model_kinematics_file`` and
  ``lowpass_cutoff_frequency_for_load_kinematics`` (it warns), and so does jaxbio.
- ``datafile`` is found as given, else beside the ``.xml`` file.

Files written before OpenSim 2.3.1 (``PrescribedForce`` objects, document version < 20301) are
refused with a clear error: OpenSim 4 converts them on load; open and save them there first.
"""

from __future__ import annotations

import os
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxbio._validate import echo
from jaxbio._text import read_xml

__all__ = ["ExternalForce", "ExternalLoads", "read_external_loads"]


class ExternalForce(NamedTuple):
    """One ``<ExternalForce>``: names and identifiers as written (``None`` when absent)."""

    name: str
    body: str  # applied_to_body
    force_frame: str  # force_expressed_in_body (also the torque's frame)
    point_frame: str  # point_expressed_in_body
    force_identifier: str | None
    point_identifier: str | None
    torque_identifier: str | None


class ExternalLoads(NamedTuple):
    """An ExternalLoads file: its applied forces and the data file they read (resolved path)."""

    path: Path
    forces: tuple[ExternalForce, ...]
    datafile: Path


def _text(el: ET.Element, tag: str) -> str | None:
    child = el.find(tag)
    if child is None or child.text is None or not child.text.strip():
        return None
    return child.text.strip()


def read_external_loads(path: str | os.PathLike) -> ExternalLoads:
    """Parse an OpenSim ExternalLoads ``.xml`` (see the module docstring).

    Raises ``ValueError`` naming the file (and the element) for a file that cannot be read or is
    not XML, a document without ``<ExternalLoads>``, an old-format file, an ExternalForce with no
    ``applied_to_body``, with neither force nor torque identifier, or with a point but no force,
    and a missing data file. Which columns an identifier finds is checked against the data in
    `external_load_data`."""
    p = Path(path)
    root = read_xml(p, "OpenSim external loads file")
    loads = root if root.tag == "ExternalLoads" else root.find("ExternalLoads")
    if loads is None:
        raise ValueError(f"{p}: no <ExternalLoads> element: not an OpenSim external loads file")
    version = root.get("Version")
    if (version is not None and version.isdigit() and int(version) < 20301) or loads.find(
        ".//PrescribedForce"
    ) is not None:
        raise ValueError(
            f"{p}: an ExternalLoads file of OpenSim < 2.3.1 (PrescribedForce objects) is not read; "
            "open and save it in OpenSim 4, which converts it"
        )
    forces = []
    for ef in loads.iter("ExternalForce"):
        name = ef.get("name", "<unnamed>")
        applies = (_text(ef, "appliesForce") or "true").lower()
        disabled = (_text(ef, "isDisabled") or "false").lower()
        if applies == "false" or disabled == "true":
            continue
        body = _text(ef, "applied_to_body")
        if body is None:
            raise ValueError(f"{p}: ExternalForce {echo(name)} has no applied_to_body")
        f = ExternalForce(
            name,
            body,
            _text(ef, "force_expressed_in_body") or "ground",
            _text(ef, "point_expressed_in_body") or "ground",
            _text(ef, "force_identifier"),
            _text(ef, "point_identifier"),
            _text(ef, "torque_identifier"),
        )
        if f.force_identifier is None and f.torque_identifier is None:
            raise ValueError(f"{p}: ExternalForce {echo(name)} identifies neither a force nor a torque")
        if f.force_identifier is None and f.point_identifier is not None:
            raise ValueError(f"{p}: ExternalForce {echo(name)} gives a point but no force")
        forces.append(f)
    datafile = _text(loads, "datafile")
    if datafile is None:
        raise ValueError(f"{p}: <datafile> is empty: the external loads name no data file")
    data = Path(datafile)
    if not data.exists():  # a FIFO or a device exists: its reader refuses it as "not a regular file"
        data = p.parent / datafile
    if not data.exists():
        raise ValueError(f"{p}: data file {echo(datafile)} not found (as given, or beside the .xml)")
    return ExternalLoads(p, tuple(forces), data)


def identifier_columns(labels, identifier: str, *, where: str) -> np.ndarray:
    """Indices of the three data columns whose labels start with ``identifier`` (OpenSim's
    ``Storage::getColumnIndicesForIdentifier``); ``ValueError`` naming ``where`` otherwise."""
    found = [i for i, label in enumerate(labels) if label.startswith(identifier)]
    if len(found) != 3:
        raise ValueError(
            f"{where}: identifier {echo(identifier)} must match exactly 3 data columns (labels starting "
            f"with it), found {len(found)}: {[labels[i] for i in found]}"
        )
    return np.asarray(found)


class ExternalForceData(NamedTuple):
    """One applied force's data at the requested times (``T`` of them), in the frames its
    `ExternalForce` names: ``force`` ``(T, 3)`` N and ``torque`` ``(T, 3)`` N·m in
    ``force_frame`` (None when not applied), ``point`` ``(T, 3)`` m in ``point_frame`` (None:
    the body's origin)."""

    spec: ExternalForce
    force: np.ndarray | None
    point: np.ndarray | None
    torque: np.ndarray | None


def external_load_data(loads: ExternalLoads, times, table=None) -> tuple[ExternalForceData, ...]:
    """The data of every force of ``loads`` at ``times`` ``(T,)`` s, interpolated as OpenSim's
    ``ExternalForce`` does (module docstring). ``table``: the data file already read
    (`read_storage`), else it is read from ``loads.datafile``. ``ValueError`` naming the file for
    an identifier that does not find exactly three columns. Times outside the data are
    extrapolated as OpenSim's functions extrapolate (the spline's natural ends are straight
    lines; two or three rows: the end segments), with a warning beyond half a sample."""
    from jaxbio.tools._gcvspl import GCVSpline
    from jaxbio.io import read_storage

    table = read_storage(loads.datafile) if table is None else table
    t = np.asarray(times, float).reshape(-1)
    where = f"{loads.datafile}"
    if table.time.size > 1 and t.size:
        # OpenSim evaluates its functions of the data wherever the tool asks (it pads and filters
        # the motion, and its resampled frames may start a rounding error before the data):
        # beyond half a sample it is extrapolation worth knowing about
        margin = 0.5 * float(np.min(np.diff(table.time)))
        if t.min() < table.time[0] - margin or t.max() > table.time[-1] + margin:
            warnings.warn(
                f"{where}: the external loads cover t = {table.time[0]:g}–{table.time[-1]:g} s; at the "
                f"requested {t.min():g}–{t.max():g} s they are extrapolated as OpenSim extrapolates "
                f"them (linearly from the ends of the data's spline)",
                stacklevel=2,
            )

    def series(identifier):
        if identifier is None:
            return None
        cols = identifier_columns(table.labels, identifier, where=where)
        y = table.data[:, cols]
        n = table.time.size
        if n == 1:
            return np.broadcast_to(y[0], (t.size, 3)).copy()
        if n <= 3:  # OpenSim's PiecewiseLinearFunction, continued by the end segments' slopes
            slope = (y[[0, -1]] - y[[1, -2]]) / (table.time[[0, -1]] - table.time[[1, -2]])[:, None]
            out = np.stack([np.interp(t, table.time, y[:, k]) for k in range(3)], 1)
            before, after = t < table.time[0], t > table.time[-1]
            out[before] = y[0] + (t[before, None] - table.time[0]) * slope[0]
            out[after] = y[-1] + (t[after, None] - table.time[-1]) * slope[1]
            return out
        return GCVSpline(table.time, y, degree=3, exact=False)(t)

    out = []
    for f in loads.forces:
        force = series(f.force_identifier)
        out.append(
            ExternalForceData(
                f, force, series(f.point_identifier) if force is not None else None, series(f.torque_identifier)
            )
        )
    return tuple(out)
