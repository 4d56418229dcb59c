"""The ``.osim`` reader's part for the ``MarkerSet``: XML → `jaxbio.markers.OsimMarkers` (numpy;
the markers are evaluated by `jaxbio.markers`)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

import numpy as np

from jaxbio.markers import OsimMarkers

__all__ = ["read_markers"]


def read_markers(
    model_elem: ET.Element,
    frame: Callable[[str, str, str, bool], tuple[int, np.ndarray, np.ndarray]],
    body_of: Callable[[str, str, str], str],
    dtype,
) -> tuple[OsimMarkers | None, set]:
    """The `OsimMarkers` of a ``<Model>`` element (None without markers) and the set of the
    MarkerSet elements imported. ``frame(path, owner, where, body_only)`` resolves a frame to
    ``(segment, position, orientation)`` in its segment; ``body_of(path, owner, where)`` names its
    body. ``ValueError`` naming the marker for a missing frame, a bad location, a repeated name."""
    from jaxbio._validate import to_device
    from jaxbio._osim_xml import (
        describe as _describe,
        child_flag as _flag,
        child_numbers as _numbers,
        child_text as _text,
    )

    elems = [m for s in model_elem.findall("MarkerSet") for m in s.findall("objects/Marker")]
    if not elems:
        return None, set()
    names, frames, bodies, segments, fixed, locs, fps, fqs = [], [], [], [], [], [], [], []
    for m in elems:
        where = _describe(m)
        name = m.get("name", "")
        if name in names:
            raise ValueError(f"{where}: the marker name is used twice")
        parent = _text(m, "socket_parent_frame") or _text(m, "body")
        if not parent:
            raise ValueError(f"{where}: no <socket_parent_frame> (4.x) or <body> (3.x)")
        owner = f"/markerset/{name}"
        seg, p, q = frame(parent, owner, where, False)
        names.append(name)
        frames.append(parent)
        bodies.append(body_of(parent, owner, where))
        segments.append(int(seg))
        fixed.append(_flag(m, "fixed", where))
        locs.append(_numbers(m, "location", 3, where, default=np.zeros(3)))
        fps.append(np.asarray(p, float))
        fqs.append(np.asarray(q, float))
    markers = OsimMarkers(
        locations=to_device(np.asarray(locs), dtype),
        frame_positions=to_device(np.asarray(fps), dtype),
        frame_orientations=to_device(np.asarray(fqs), dtype),
        names=tuple(names),
        frames=tuple(frames),
        bodies=tuple(bodies),
        segments=tuple(segments),
        fixed=tuple(fixed),
    )
    return markers, set(elems)
