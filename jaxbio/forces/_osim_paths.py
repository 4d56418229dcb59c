"""OpenSim's ``GeometryPath``\\ s: the one reader and evaluator of the paths of muscles and path forces.

A path of an OpenSim ``ForceSet`` entry (a muscle, a ``PathActuator``, a ``PathSpring``) is
read here into `OsimPaths`, which `jaxbio.forces._osim_muscles.OsimMuscles` extends and
`jaxbio.forces._osim_forces.OsimForces` holds (``forces.paths``); lengths and moment arms of either
come from `path_lengths` and `path_moment_arms`.

**Formats.** 4.x: ``<GeometryPath><PathPointSet><objects>`` of ``PathPoint``,
``ConditionalPathPoint``, ``MovingPathPoint``, each with a ``socket_parent_frame`` (a body, the
ground or a ``PhysicalOffsetFrame``), ``<location>``; conditional points a ``socket_coordinate``
and ``<range>``; moving points ``x_location``/``y_location``/``z_location`` (a function each)
with ``socket_x_coordinate`` … . 3.x/2.x: the same elements with ``<body>``, ``<coordinate>``,
``<x_coordinate>`` … (2.x: ``MusclePoint``, ``MuscleViaPoint``, ``MovingMusclePoint``,
``XAttachment`` …). The functions are those of the joints (`jaxbio._osim_functions`).
Wrap objects: each body's (and the ground's) ``<WrapObjectSet><objects>`` (``WrapCylinder``,
``WrapSphere``, ``WrapEllipsoid``; ``active`` false: never wrapped over), each path's
``<PathWrapSet>`` (``wrap_object``, ``method``, ``range``). A ``FunctionBasedPath`` (OpenSim
4.5's fitted paths) is refused: no ``<GeometryPath>``.

**Frames.** Every point is converted at load time to the frame of its jaxbio tree segment (the
body's joint child frame, `jaxbio.io.osim`), wrap objects too (their frame is their body's):
``OsimPaths.paths`` is a `jaxbio.muscles.geometry.MusclePaths` on ``Model.tree``.

**Conditional and moving points** need OpenSim's coordinates ``c``, so the functions here take
``c`` (``Model.coordinate_names`` order), not the tree's ``q``:

- a ``ConditionalPathPoint`` is on the path when its coordinate is within its range, OpenSim's
  inclusive test with its tolerance, ``range_min − 1e-5 ≤ c ≤ range_max + 1e-5``
  (``ConditionalPathPoint::isActive``; range in rad or m, as the coordinate). Inside jit an
  inactive point is moved onto the previous active point of its path, so its pieces have zero
  length (finite gradients: `jaxbio.spatial.norm` is safe at zero) — the length is OpenSim's
  sum over the active points. A path that both wraps and has conditional points is refused
  (OpenSim's ``PathWrap`` range counts the points of the *current* path, which moves with the
  conditions; not implemented).
- a ``MovingPathPoint``'s location in its frame is ``(f_x(c_k), f_y(c_k), f_z(c_k))`` with
  ``c_k`` clamped to its coordinate's range (``MovingPathPoint::getLocation``; OpenSim requires
  one coordinate for the three; an axis without one is its function at 0). Its speed here is
  the derivative of that clamped location (zero beyond the range), OpenSim's
  ``MovingPathPoint::getVelocity`` uses the unclamped derivative: the lengthening speeds agree
  within the coordinate ranges.

**Moment arms** are ``−∂l/∂c`` (positive when the path shortens as ``c`` increases, OpenSim's
sign); a tension ``T`` along the path applies the generalised force ``−(∂l/∂c) T`` conjugate to
``ċ`` (OpenSim's ``GeometryPath::produceForces``, by virtual work).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import quaternion as quat
from jaxbio._validate import to_device
from jaxbio.coordinates import CoordinateMap, Piecewise, to_tree
from jaxbio.muscles import geometry
from jaxbio.muscles.geometry import MusclePaths

__all__ = ["OsimPaths", "path_lengths", "path_moment_arms", "read_paths"]

#: path point classes (4.x / 3.x names, and 2.x's)
FIXED_POINTS = ("PathPoint", "MusclePoint")
CONDITIONAL_POINTS = ("ConditionalPathPoint", "MuscleViaPoint", "ConditionalViaPoint")
MOVING_POINTS = ("MovingPathPoint", "MovingMusclePoint")
WRAP_TYPES = ("WrapCylinder", "WrapSphere", "WrapEllipsoid")
CONDITION_TOLERANCE = 1e-5  # ConditionalPathPoint::isActive

#: (segment, position, orientation) of a frame in its segment's frame
FramePose = tuple[int, np.ndarray, np.ndarray]


class OsimPaths(eqx.Module):
    """The ``GeometryPath``\\ s of ``k`` OpenSim forces (module docstring).

    - ``paths``: `jaxbio.muscles.geometry.MusclePaths` on ``Model.tree`` (points in segment
      frames; a moving point holds its location at the default coordinates, replaced per call);
      its ``names`` are the forces' names, the order of every per-path array and result.
    - ``conditional`` (static): ``(path, point, coordinate index)`` of each conditional point;
      ``conditional_ranges`` ``(kc, 2)`` rad / m, its range (min, max).
    - ``moving`` (static): ``(path, point)`` of each moving point; ``moving_functions``: a
      `jaxbio.coordinates.CoordinateMap` with three rows per moving point (its x, y, z location,
      m, in its body frame, of the clamped coordinate); ``moving_origins`` ``(km, 3)`` m and
      ``moving_orientations`` ``(km, 4)``: that body frame's pose in its segment frame.
    """

    paths: MusclePaths
    conditional_ranges: Float[Array, "kc 2"]
    moving_origins: Float[Array, "km 3"]
    moving_orientations: Float[Array, "km 4"]
    moving_functions: CoordinateMap | None
    conditional: tuple[tuple[int, int, int], ...] = eqx.field(static=True)
    moving: tuple[tuple[int, int], ...] = eqx.field(static=True)

    def __check_init__(self):
        kc, km = len(self.conditional), len(self.moving)
        if jnp.shape(self.conditional_ranges) != (kc, 2):
            raise ValueError(
                f"OsimPaths.conditional_ranges has shape {jnp.shape(self.conditional_ranges)}, expected {(kc, 2)}"
            )
        for f, n in (("moving_origins", 3), ("moving_orientations", 4)):
            if jnp.shape(getattr(self, f)) != (km, n):
                raise ValueError(f"OsimPaths.{f} has shape {jnp.shape(getattr(self, f))}, expected {(km, n)}")

    @property
    def n_paths(self) -> int:
        return self.paths.n_muscles


def _paths_at(paths: OsimPaths, model, c):
    """The paths with each moving point at its location for ``c``, and the ``(k, P)`` mask of
    the points on the path (conditional points within their ranges; ``None``: all)."""
    out = paths.paths
    if paths.moving:
        cc = jnp.clip(c, model.ranges[:, 0], model.ranges[:, 1])
        loc = to_tree(paths.moving_functions, cc).reshape(-1, 3)
        seg_pts = paths.moving_origins + quat.rotate(paths.moving_orientations, loc)
        i, k = (np.asarray(a, np.int32) for a in zip(*paths.moving))
        out = eqx.tree_at(lambda p: p.points, out, out.points.at[i, k].set(seg_pts.astype(out.points.dtype)))
    if not paths.conditional:
        return out, None
    i, k, j = (np.asarray(a, np.int32) for a in zip(*paths.conditional))
    x = c[j]
    on = (x >= paths.conditional_ranges[:, 0] - CONDITION_TOLERANCE) & (
        x <= paths.conditional_ranges[:, 1] + CONDITION_TOLERANCE
    )
    active = jnp.ones((out.n_muscles, out.max_points), bool).at[i, k].set(on)
    return out, active


def path_lengths(paths: OsimPaths, model, c: Float[Array, " nc"]) -> Float[Array, " k"]:
    """``(k,)`` m, the path lengths (OpenSim's ``GeometryPath::getLength``) of ``model`` (a
    `jaxbio.Model`: its tree, coordinates and ranges) at OpenSim's coordinates ``c`` ``(nc,)``
    rad / m. Traceable; the callers check their arguments."""
    p, active = _paths_at(paths, model, c)
    return geometry._path_lengths(p, model.tree, to_tree(model.coordinates, c), active)


def path_moment_arms(paths: OsimPaths, model, c: Float[Array, " nc"]) -> Float[Array, "k nc"]:
    """``(k, nc)`` m/rad / m/m, the moment arms ``−∂l/∂c`` of `path_lengths` (a path with wrap
    objects: one directional derivative at a time, as `jaxbio.muscles.geometry.moment_arms`)."""
    if paths.paths.path_wraps:
        basis = jnp.eye(c.shape[0], dtype=c.dtype)
        return -jax.lax.map(lambda v: jax.jvp(lambda x: path_lengths(paths, model, x), (c,), (v,))[1], basis).T
    return -jax.jacfwd(lambda x: path_lengths(paths, model, x))(c)


# ---- reading ---------------------------------------------------------------------------------------


def read_wrap_objects(model_elem: ET.Element, tree, frame: Callable[[str, str, str, bool], FramePose]):
    """``(specs, frames, inactive)``: every body's (and the ground's) wrap objects as
    `MusclePaths.from_points` takes them (``{name: spec}``, in the frame of their body, a key of
    ``frames``), and the names of the inactive ones (``active`` false)."""
    from jaxbio._osim_xml import _describe, _flag, _numbers, _text

    wrap_specs, frames = {}, {}
    holders = [(b.get("name", ""), b) for b in model_elem.findall("BodySet/objects/Body")]
    holders += [(g.get("name", "ground"), g) for g in model_elem.findall("Ground")]
    inactive = set()
    for body, holder in holders:
        for w in holder.findall("WrapObjectSet/objects/*"):
            name, where = w.get("name", ""), f"{_describe(holder)}: {_describe(w)}"
            if w.tag not in WRAP_TYPES:
                raise ValueError(
                    f"{where}: wrap object type {w.tag!r} is not supported; supported: {', '.join(WRAP_TYPES)}"
                )
            if name in wrap_specs or name in inactive:
                raise ValueError(f"{where}: the wrap object name is used twice")
            if w.find("active") is not None and not _flag(w, "active", where):
                inactive.add(name)
                continue
            seg, p, q = frame(body, "", where, True)
            key = f"{body} (body frame)"
            frames[key] = (None if seg < 0 else tree.names[seg], np.asarray(p, float), np.asarray(q, float))
            spec = dict(
                type=w.tag,
                frame=key,
                translation=_numbers(w, "translation", 3, where, default=np.zeros(3)),
                xyz_body_rotation=_numbers(w, "xyz_body_rotation", 3, where, default=np.zeros(3)),
                quadrant=_text(w, "quadrant") or "all",
            )
            if w.tag == "WrapEllipsoid":
                spec["dimensions"] = _numbers(w, "dimensions", 3, where, default=np.full(3, 0.05))
            else:
                spec["radius"] = float(_numbers(w, "radius", 1, where, default=[0.05])[0])
                if w.tag == "WrapCylinder":
                    spec["length"] = float(_numbers(w, "length", 1, where, default=[1.0])[0])
            wrap_specs[name] = spec
    return wrap_specs, frames, inactive


def read_paths(
    model_elem: ET.Element,
    elems: Sequence[ET.Element],
    tree,
    coordinates: Sequence[str],
    frame: Callable[[str, str, str, bool], FramePose],
    dtype,
    what: str = "paths",
) -> dict:
    """The fields of `OsimPaths` (a dict, so that `OsimMuscles` can add its own) of the
    ``<GeometryPath>`` of each element of ``elems`` (ForceSet entries, in that order; ``names``
    their names). ``frame`` resolves a body/frame path (as in
    `jaxbio.forces._osim_forces.read_forces`); ``what`` starts the message of a path refused by
    `MusclePaths.from_points`. ``ValueError`` naming the element for every defect."""
    from jaxbio._osim_xml import _describe, _function, _function_element, _numbers, _text

    coords = list(coordinates)

    def segment_name(seg: int) -> str:
        return "ground" if seg < 0 else tree.names[seg]

    def coordinate(path: str | None, where: str) -> int:
        name = (path or "").strip().rstrip("/").split("/")[-1]
        if not name:
            raise ValueError(f"{where}: no coordinate")
        if name not in coords:
            raise ValueError(f"{where}: no coordinate {name!r} in the model; coordinates are {coords}")
        return coords.index(name)

    def first_text(elem, tags):
        return next((t for t in (_text(elem, tag) for tag in tags) if t), None)

    wrap_specs, frames, inactive = read_wrap_objects(model_elem, tree, frame)
    points, wraps, names = {}, {}, []
    conditional, cond_ranges, moving, moving_pose, moving_src, moving_fn = [], [], [], [], [], []
    for o in elems:
        name, where = o.get("name", ""), _describe(o)
        owner = f"/forceset/{name}"
        gp = o.find("GeometryPath")
        if gp is None:
            other = [ch.tag for ch in o if ch.tag.endswith("Path")]
            raise ValueError(
                f"{where}: no <GeometryPath>" + (f" (its path is a {other[0]}, not supported)" if other else "")
            )
        pts = []
        has_condition = False
        for p in gp.findall("PathPointSet/objects/*"):
            here = f"{where}: {_describe(p)}"
            if p.tag not in FIXED_POINTS + CONDITIONAL_POINTS + MOVING_POINTS:
                raise ValueError(
                    f"{here}: path point type {p.tag!r} is not supported; supported: "
                    f"{', '.join(FIXED_POINTS + CONDITIONAL_POINTS + MOVING_POINTS)}"
                )
            body = first_text(
                p,
                (
                    "socket_parent_frame",
                    "socket_parent_frame_connectee_name",
                    "body",
                    "socket_body",
                    "socket_body_connectee_name",
                ),
            )
            if not body:
                raise ValueError(f"{here}: no <socket_parent_frame> (or <body>)")
            seg, origin, q = frame(body, owner, here, False)
            R = np.asarray(quat.to_matrix(np.asarray(q, float)))
            k = len(pts)
            if p.tag in MOVING_POINTS:
                fns, srcs = [], []
                for axis, legacy in zip("xyz", "XYZ"):
                    holder = p.find(f"{axis}_location")
                    if holder is None:
                        holder = p.find(f"{legacy}Attachment")
                    f_elem = None if holder is None else _function_element(holder, (), here)
                    fns.append(
                        _function(f_elem, f"{here}: {axis}_location")
                        if f_elem is not None
                        else Piecewise.polynomial([0.0])
                    )
                    cname = first_text(
                        p,
                        (
                            f"socket_{axis}_coordinate",
                            f"socket_{axis}_coordinate_connectee_name",
                            f"{axis}_coordinate",
                            f"{axis}Coordinate",
                        ),
                    )
                    srcs.append(None if not cname else coordinate(cname, f"{here}: {axis}_coordinate"))
                used = {s for s in srcs if s is not None}
                if len(used) > 1:
                    raise ValueError(
                        f"{here}: x, y and z must depend on the same coordinate (OpenSim refuses "
                        f"{[coords[s] for s in sorted(used)]})"
                    )
                src = used.pop() if used else 0
                fns = [f if s is not None else Piecewise.polynomial([_at_zero(f)]) for f, s in zip(fns, srcs)]
                loc = np.array([_at_zero(f) for f in fns])  # placeholder, replaced per call
                moving.append((len(names), k))
                moving_pose.append((origin, q))
                moving_src += [src] * 3
                moving_fn += fns
            else:
                loc = _numbers(p, "location", 3, here, default=np.zeros(3))
                if p.tag in CONDITIONAL_POINTS:
                    j = coordinate(
                        first_text(
                            p, ("socket_coordinate", "socket_coordinate_connectee_name", "coordinate", "coordinates")
                        ),
                        here,
                    )
                    rng = _numbers(p, "range", 2, here, default=np.zeros(2))
                    conditional.append((len(names), k, j))
                    cond_ranges.append(rng)
                    has_condition = True
            pts.append((segment_name(seg), origin + R @ loc, p.get("name", f"{name}-P{k + 1}")))
        if len(pts) < 2:
            raise ValueError(f"{where}: its path has {len(pts)} points; OpenSim needs at least 2")
        pw = []
        for w in gp.findall("PathWrapSet/objects/PathWrap"):
            here = f"{where}: {_describe(w)}"
            obj = _text(w, "wrap_object")
            if obj in inactive:
                continue
            if obj not in wrap_specs:
                raise ValueError(f"{here}: no wrap object {obj!r} in the model's WrapObjectSets")
            rng = _numbers(w, "range", 2, here, default=[-1, -1])
            pw.append(
                dict(wrap_object=obj, method=(_text(w, "method") or "hybrid").lower(), range=(int(rng[0]), int(rng[1])))
            )
        if pw and has_condition:
            raise ValueError(
                f"{where}: a path with both wrap objects and conditional path points is not "
                "supported (OpenSim's PathWrap range counts the active points)"
            )
        points[name] = pts
        if pw:
            wraps[name] = pw
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"{what}: two have the same name")
    try:
        paths = MusclePaths.from_points(
            tree, points, frames=frames, wrap_objects=wrap_specs or None, path_wraps=wraps or None, dtype=dtype
        )
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    dt = paths.points.dtype
    km = len(moving)
    return dict(
        paths=paths,
        conditional_ranges=to_device(np.array(cond_ranges, float).reshape(-1, 2), dt),
        moving_origins=to_device(np.array([p for p, _ in moving_pose], float).reshape(km, 3), dt),
        moving_orientations=to_device(np.array([q for _, q in moving_pose], float).reshape(km, 4), dt),
        moving_functions=CoordinateMap.from_pieces(coords, moving_src, moving_fn, dtype=dt) if km else None,
        conditional=tuple(conditional),
        moving=tuple(moving),
    )


def _at_zero(f: Piecewise) -> float:
    """``f(0)`` (numpy)."""
    piece = int(np.sum(0.0 >= np.asarray(f.breakpoints)))
    h = 0.0 - float(np.asarray(f.origins)[piece])
    return float(np.polynomial.polynomial.polyval(h, np.asarray(f.coefficients)[piece]))
