"""OpenSim's markers: the ``MarkerSet`` of a model (`OsimMarkers`, ``Model.markers``) and
their world positions as a function of the coordinates (`marker_positions`).

A ``Marker`` is a point fixed in a frame: OpenSim 4.x names the frame with
``<socket_parent_frame>`` (a body, the ground or a ``PhysicalOffsetFrame``; a path absolute or
relative to the marker, ``/markerset/<name>``), 3.x with ``<body>`` (a body name); ``<location>``
is the point in that frame (m), ``<fixed>`` whether marker placement (scaling) may move it.
`load_osim` resolves each frame to the tree segment it is fixed to and its pose there, as for the
other body-fixed points of the model (`jaxbio.io.osim`, "Frames"): the world position of marker
``k`` is ``X_WS(q) · X_SF · location_k``, with ``X_WS`` the segment's pose (forward kinematics of
the tree at ``q = to_tree(cmap, c)``) and ``X_SF`` the fixed pose of the marker's frame in the
segment. OpenSim computes the same product (``Station::findLocationInFrame``); tests/io/
test_osim_markers.py checks jaxbio against live OpenSim at random poses to 1e-12 m.

The locations are array leaves, so ``jax.grad`` of anything computed from `marker_positions`
reaches them (marker placement), as well as the coordinates and the tree's joint frames.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import coordinates
from jaxbio import quaternion as quat
from jaxbio._validate import as_shape
from jaxbio.dynamics import forward_kinematics

__all__ = ["OsimMarkers", "marker_positions"]


class OsimMarkers(eqx.Module):
    """The markers of an OpenSim model (``Model.markers``), in the MarkerSet's order.

    - ``names`` (static): the marker names, unique.
    - ``frames`` (static): the frame each marker is fixed to, as the file names it (a body name,
      or a component path such as ``/bodyset/torso``).
    - ``bodies`` (static): the OpenSim body that frame is fixed to (the ground's name for the ground).
    - ``segments`` (static): the tree segment index of that body (``-1``: the world).
    - ``fixed`` (static): OpenSim's ``<fixed>`` flag (marker placement leaves the marker where it is).
    - ``locations``: ``(m, 3)`` m, each marker in its frame (``<location>``).
    - ``frame_positions`` ``(m, 3)`` m and ``frame_orientations`` ``(m, 4)`` ``(w, x, y, z)``: the
      pose of each marker's frame in its segment's frame (identity rotation for a body-fixed
      frame whose body frame is the segment frame).
    """

    locations: Float[Array, "m 3"]
    frame_positions: Float[Array, "m 3"]
    frame_orientations: Float[Array, "m 4"]
    names: tuple[str, ...] = eqx.field(static=True)
    frames: tuple[str, ...] = eqx.field(static=True)
    bodies: tuple[str, ...] = eqx.field(static=True)
    segments: tuple[int, ...] = eqx.field(static=True)
    fixed: tuple[bool, ...] = eqx.field(static=True)

    def __check_init__(self):
        m = len(self.names)
        if len(set(self.names)) != m:
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise ValueError(f"names: marker names are used twice: {dup}")
        for field in ("frames", "bodies", "segments", "fixed"):
            if len(getattr(self, field)) != m:
                raise ValueError(f"{field}: {len(getattr(self, field))} entries for {m} markers")
        for field, k in (("locations", 3), ("frame_positions", 3), ("frame_orientations", 4)):
            if getattr(self, field).shape != (m, k):
                raise ValueError(f"{field}: shape {getattr(self, field).shape}, expected ({m}, {k})")

    @property
    def n_markers(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Position of marker ``name`` (``ValueError`` naming the markers when absent)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"no marker {name!r}; the model's markers are {list(self.names)}") from None

    def select(self, names) -> OsimMarkers:
        """The markers ``names`` (in that order) as an `OsimMarkers`."""
        k = np.asarray([self.index(n) for n in names], dtype=np.int32)
        pick = lambda t: tuple(t[i] for i in k)
        return OsimMarkers(
            locations=self.locations[k],
            frame_positions=self.frame_positions[k],
            frame_orientations=self.frame_orientations[k],
            names=pick(self.names),
            frames=pick(self.frames),
            bodies=pick(self.bodies),
            segments=pick(self.segments),
            fixed=pick(self.fixed),
        )


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
    from jaxbio._osim_xml import _describe, _flag, _numbers, _text

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


def _marker_points(model, markers: OsimMarkers, q) -> Float[Array, "m 3"]:
    """World positions of ``markers`` on ``model.tree`` at tree coordinates ``q``."""
    dt = q.dtype
    positions, attitudes = forward_kinematics(model.tree, q)
    positions = jnp.concatenate([positions, jnp.zeros((1, 3), dt)])  # the last row: the world
    attitudes = jnp.concatenate([attitudes, jnp.array([[1.0, 0.0, 0.0, 0.0]], dt)])
    seg = np.asarray(markers.segments, dtype=np.int32)  # -1: the appended world row
    in_segment = markers.frame_positions + quat.rotate(markers.frame_orientations, markers.locations)
    return positions[seg] + quat.rotate(attitudes[seg], in_segment)


def marker_positions(model, c: Float[ArrayLike, " nc"], markers: OsimMarkers | None = None) -> Float[Array, "m 3"]:
    """World positions of the model's markers at OpenSim coordinates ``c``.

    - ``model``: an `Model` with markers (``model.markers``; `jaxbio.io.load_osim`).
    - ``c``: ``(nc,)`` rad / m, OpenSim's coordinates in ``model.coordinate_names`` order.
    - ``markers``: another `OsimMarkers` on the same model (e.g. ``model.markers.select(names)``);
      default ``model.markers``.

    Returns ``(m, 3)`` m in the ground (world) frame, the markers in ``markers.names`` order:
    OpenSim's ``Marker::getLocationInGround``. Pure: ``jax.vmap`` over frames ``c`` (or over
    models), ``jax.grad`` / ``jax.jacfwd`` with respect to ``c``, the marker locations and the
    tree's joint frames.
    """
    markers = model.markers if markers is None else markers
    if markers is None:
        raise ValueError(f"{model.path}: the model has no markers (no <MarkerSet> in the .osim file)")
    c = as_shape(c, (model.coordinates.nc,), "c", "", like=model.defaults)
    return _marker_points(model, markers, coordinates.to_tree(model.coordinates, c))
