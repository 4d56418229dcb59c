"""OpenSim's muscles: the paths and Hill-type models of a ``ForceSet``'s Thelen and Millard muscles.

`jaxbio.io.load_osim` imports every enabled ``Thelen2003Muscle`` and
``Millard2012EquilibriumMuscle`` of an OpenSim 3.x or 4.x file into `OsimMuscles`
(``Model.muscles``; ``None`` when the file has none). Other muscle classes stay listed in
``Model.ignored`` (the skeleton still loads); disabled muscles (``appliesForce`` false, 3.x
``isDisabled`` true) are skipped, as OpenSim applies nothing for them.

**Formats.** 4.x: ``<GeometryPath><PathPointSet><objects>`` of ``PathPoint``,
``ConditionalPathPoint``, ``MovingPathPoint``, each with a ``socket_parent_frame`` (a body, the
ground or a ``PhysicalOffsetFrame``), ``<location>``; conditional points a ``socket_coordinate``
and ``<range>``; moving points ``x_location``/``y_location``/``z_location`` (a function each)
with ``socket_x_coordinate`` … . 3.x/2.x: the same elements with ``<body>``, ``<coordinate>``,
``<x_coordinate>`` … (2.x: ``MusclePoint``, ``MuscleViaPoint``, ``MovingMusclePoint``,
``XAttachment`` …). The functions are those of the joints (`jaxbio.io._osim_functions`).
Wrap objects: each body's (and the ground's) ``<WrapObjectSet><objects>`` (``WrapCylinder``,
``WrapSphere``, ``WrapEllipsoid``; ``active`` false: never wrapped over), each muscle's
``<PathWrapSet>`` (``wrap_object``, ``method``, ``range``).

**Frames.** Every point is converted at load time to the frame of its jaxbio tree segment (the
body's joint child frame, `jaxbio.io.osim`), wrap objects too (their frame is their body's):
``OsimMuscles.paths`` is a `jaxbio.muscles.geometry.MusclePaths` on ``Model.tree``.

**Conditional and moving points** need OpenSim's coordinates ``c``, so the functions here take
``c`` (``Model.coordinate_names`` order), not the tree's ``q``:

- a ``ConditionalPathPoint`` is on the path when its coordinate is within its range, OpenSim's
  inclusive test with its tolerance, ``range_min − 1e-5 ≤ c ≤ range_max + 1e-5``
  (``ConditionalPathPoint::isActive``; range in rad or m, as the coordinate). Inside jit an
  inactive point is moved onto the previous active point of its path, so its pieces have zero
  length (finite gradients: `jaxbio.spatial.norm` is safe at zero) — the length is OpenSim's
  sum over the active points. A muscle whose path both wraps and has conditional points is
  refused (OpenSim's ``PathWrap`` range counts the points of the *current* path, which moves
  with the conditions; not implemented).
- a ``MovingPathPoint``'s location in its frame is ``(f_x(c_k), f_y(c_k), f_z(c_k))`` with
  ``c_k`` clamped to its coordinate's range (``MovingPathPoint::getLocation``; OpenSim requires
  one coordinate for the three; an axis without one is its function at 0). Its speed here is
  the derivative of that clamped location (zero beyond the range), OpenSim's
  ``MovingPathPoint::getVelocity`` uses the unclamped derivative: the lengthening speeds agree
  within the coordinate ranges.

**Lengths, moment arms, speeds, forces** (`muscle_lengths`, `muscle_moment_arms`,
`muscle_lengthening_speeds`, `muscle_generalized_forces`, `muscle_static_optimization_forces`):
the path length is `jaxbio.muscles.geometry`'s (with OpenSim's wrapping,
`jaxbio.muscles.wrapping`) at ``q = to_tree(coordinates, c)`` and the points above; moment
arms ``−∂l/∂c`` (positive when the muscle shortens as ``c`` increases, OpenSim's sign), the
lengthening speed ``(∂l/∂c) ċ``, generalised forces ``rᵀ F`` conjugate to ``ċ`` (jaxbio's
convention; on Ball/Free rotations OpenSim's speeds differ, see `jaxbio.io.osim`). Static
optimisation forces: each muscle model's ``static_optimization_forces`` at that length and
speed (OpenSim's ``calcInextensibleTendonActiveFiberForce(s, 1)`` and the passive force).

**Agreement with live OpenSim 4.6** (tests/io/test_osim_muscles.py, float64, random states
within the coordinate ranges; measured maxima over 5–10 states):

- arm26 (Thelen, cylinders and ellipsoids): lengths 9e-16 m; moment arms of the muscle that does
  not wrap vs ``computeMomentArm`` 1e-16 m; of the wrapping ones vs central differences of
  OpenSim's length (h = 1e-5 rad; ``computeMomentArm`` is not ``−∂l/∂c`` over a wrap) 2e-5 m
  (OpenSim's tangent points are iterates, its length is smooth to ~1e-8 m); lengthening speeds
  6e-17 m/s (not wrapping) / 7e-6 m/s (wrapping, vs differences of OpenSim's length);
  static-optimisation forces vs ``calcInextensibleTendonActiveFiberForce(s, 1)`` 2e-14 relative.
- gait10dof18musc (Millard, conditional and moving points): lengths 6e-16 m, moment arms 9e-16
  m, speeds vs ``getLengtheningSpeed`` 2e-15 m/s, forces 3e-13 relative.
- subject01 (2.x file, 54 Thelen muscles, conditional and moving points): lengths 1.3e-7 m,
  moment arms 2e-7 m, forces 1.4e-5 relative — the skeleton's difference: OpenSim rounds this
  file's joint offsets to 6 significant digits when it converts them (body origins move by up
  to 3e-7 m); jaxbio keeps the file's numbers.
- The 3.x and 4.x files of arm26 and gait10dof18musc import equal arrays.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio._validate import as_shape, check_concrete_finite, jit_checked, to_device
from jaxbio.coordinates import CoordinateMap, Piecewise, to_tree
from jaxbio.muscles import geometry
from jaxbio.muscles.geometry import MusclePaths
from jaxbio.muscles.millard import Millard2012EquilibriumMuscle
from jaxbio.muscles.thelen import Thelen2003Muscle

__all__ = [
    "OsimMuscles",
    "muscle_lengths",
    "muscle_moment_arms",
    "muscle_lengthening_speeds",
    "muscle_generalized_forces",
    "muscle_static_optimization_forces",
]

#: the muscle classes jaxbio imports
MUSCLE_MODELS = {"Thelen2003Muscle": Thelen2003Muscle, "Millard2012EquilibriumMuscle": Millard2012EquilibriumMuscle}
#: the modules a model's muscles are grouped into (a module's static fields are shared): by class,
#: and the Millard muscles with rigid tendons apart when the model also has elastic ones
RIGID_MILLARD = "Millard2012EquilibriumMuscle (rigid tendon)"
GROUPS = {**MUSCLE_MODELS, RIGID_MILLARD: Millard2012EquilibriumMuscle}
#: path point classes (4.x / 3.x names, and 2.x's)
FIXED_POINTS = ("PathPoint", "MusclePoint")
CONDITIONAL_POINTS = ("ConditionalPathPoint", "MuscleViaPoint", "ConditionalViaPoint")
MOVING_POINTS = ("MovingPathPoint", "MovingMusclePoint")
WRAP_TYPES = ("WrapCylinder", "WrapSphere", "WrapEllipsoid")
CONDITION_TOLERANCE = 1e-5  # ConditionalPathPoint::isActive


class OsimMuscles(eqx.Module):
    """The Thelen and Millard muscles of an OpenSim model (module docstring), ``m`` of them.

    - ``names``, ``types`` (static): OpenSim's names and classes, ForceSet order (the order of
      every per-muscle array and result).
    - ``paths``: `jaxbio.muscles.geometry.MusclePaths` on ``Model.tree`` (points in segment
      frames; a moving point holds its location at the default coordinates, replaced per call).
    - ``thelen``, ``millard``: a `jaxbio.muscles.Thelen2003Muscle` /
      `jaxbio.muscles.Millard2012EquilibriumMuscle` of the muscles of that class, or ``None``;
      ``thelen_index``, ``millard_index`` (static): their positions in ``names``.
    - ``millard_rigid``, ``millard_rigid_index``: when a model has Millard muscles with rigid
      *and* with elastic tendons (``ignore_tendon_compliance``, a static field of the module),
      those with rigid tendons (``millard`` then holds the elastic ones); else ``None`` and ``()``.
    - ``min_control``, ``max_control`` ``(m,)``: OpenSim's control bounds (excitations).
    - ``conditional`` (static): ``(muscle, point, coordinate index)`` of each conditional point;
      ``conditional_ranges`` ``(kc, 2)`` rad / m, its range (min, max).
    - ``moving`` (static): ``(muscle, point)`` of each moving point; ``moving_functions``: a
      `jaxbio.coordinates.CoordinateMap` with three rows per moving point (its x, y, z location,
      m, in its body frame, of the clamped coordinate); ``moving_origins`` ``(km, 3)`` m and
      ``moving_orientations`` ``(km, 4)``: that body frame's pose in its segment frame.
    """

    paths: MusclePaths
    min_control: Float[Array, " m"]
    max_control: Float[Array, " m"]
    conditional_ranges: Float[Array, "kc 2"]
    moving_origins: Float[Array, "km 3"]
    moving_orientations: Float[Array, "km 4"]
    moving_functions: CoordinateMap | None
    thelen: Thelen2003Muscle | None
    millard: Millard2012EquilibriumMuscle | None
    millard_rigid: Millard2012EquilibriumMuscle | None
    names: tuple[str, ...] = eqx.field(static=True)
    types: tuple[str, ...] = eqx.field(static=True)
    thelen_index: tuple[int, ...] = eqx.field(static=True)
    millard_index: tuple[int, ...] = eqx.field(static=True)
    millard_rigid_index: tuple[int, ...] = eqx.field(static=True)
    conditional: tuple[tuple[int, int, int], ...] = eqx.field(static=True)
    moving: tuple[tuple[int, int], ...] = eqx.field(static=True)

    def __check_init__(self):
        m = len(self.names)
        if len(self.types) != m or self.paths.names != self.names:
            raise ValueError("OsimMuscles: names, types and paths must list the same muscles")
        if sorted(self.thelen_index + self.millard_index + self.millard_rigid_index) != list(range(m)):
            raise ValueError(
                "OsimMuscles: thelen_index, millard_index and millard_rigid_index must cover every muscle once"
            )
        for f in ("min_control", "max_control"):
            if jnp.shape(getattr(self, f)) != (m,):
                raise ValueError(f"OsimMuscles.{f} has shape {jnp.shape(getattr(self, f))}, expected {(m,)}")

    @property
    def n_muscles(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Position of muscle ``name``."""
        return self.paths.index(name)

    @property
    def groups(self) -> tuple[tuple[Millard2012EquilibriumMuscle | Thelen2003Muscle | None, tuple[int, ...]], ...]:
        """``(module, positions in names)`` of each muscle module (``None`` and ``()`` if empty)."""
        return (
            (self.thelen, self.thelen_index),
            (self.millard, self.millard_index),
            (self.millard_rigid, self.millard_rigid_index),
        )

    @property
    def max_isometric_force(self) -> Float[Array, " m"]:
        """``(m,)`` N, every muscle's ``max_isometric_force`` in ``names`` order."""
        groups = [(g, i) for g, i in self.groups if i]
        order = np.argsort(np.concatenate([np.asarray(i) for _, i in groups]))
        return jnp.concatenate([jnp.broadcast_to(g.max_isometric_force, (len(i),)) for g, i in groups])[order]


# ---- evaluation -------------------------------------------------------------------------------------


def _muscles_of(model):
    from jaxbio.model import Model

    if not isinstance(model, Model):
        raise ValueError(f"model must be an Model (jaxbio.io.load_osim), got {type(model).__name__}")
    if model.muscles is None:
        raise ValueError(
            f"{model.path or 'model'}: no imported muscles (Thelen2003Muscle, "
            f"Millard2012EquilibriumMuscle); ignored: {list(model.ignored)}"
        )
    return model.muscles


def _check_arguments(arguments: dict) -> None:
    _muscles_of(arguments["model"])
    for name, x in list(arguments.items())[1:]:
        check_concrete_finite(x, name)


def _coordinates(model, x, name: str):
    return as_shape(
        x,
        (model.coordinates.nc,),
        name,
        f" (OpenSim's coordinates {', '.join(model.coordinate_names)}); batch with jax.vmap",
        like=model.ranges,
    )


def _paths_at(model, c):
    """The muscle paths with each moving point at its location for ``c``, and the ``(m, P)``
    mask of the points on the path (conditional points within their ranges)."""
    mus = model.muscles
    paths = mus.paths
    if mus.moving:
        cc = jnp.clip(c, model.ranges[:, 0], model.ranges[:, 1])
        loc = to_tree(mus.moving_functions, cc).reshape(-1, 3)
        seg_pts = mus.moving_origins + quat.rotate(mus.moving_orientations, loc)
        i, k = (np.asarray(a, np.int32) for a in zip(*mus.moving))
        paths = eqx.tree_at(lambda p: p.points, paths, paths.points.at[i, k].set(seg_pts.astype(paths.points.dtype)))
    if not mus.conditional:
        return paths, None
    i, k, j = (np.asarray(a, np.int32) for a in zip(*mus.conditional))
    x = c[j]
    on = (x >= mus.conditional_ranges[:, 0] - CONDITION_TOLERANCE) & (
        x <= mus.conditional_ranges[:, 1] + CONDITION_TOLERANCE
    )
    active = jnp.ones((paths.n_muscles, paths.max_points), bool).at[i, k].set(on)
    return paths, active


def _public(fn):
    """`jax.jit` of ``fn(model, *arrays)`` after the checks before tracing: a model with
    muscles, no NaN/inf in a concrete array argument (``ValueError`` naming it)."""
    return jit_checked(fn, _check_arguments)


def _lengths(model, c):
    paths, active = _paths_at(model, c)
    return geometry._path_lengths(paths, model.tree, to_tree(model.coordinates, c), active)


@_public
def muscle_lengths(model, c: Float[ArrayLike, " nc"]) -> Float[Array, " m"]:
    """Muscle–tendon path lengths (OpenSim's ``GeometryPath::getLength``).

    Args:
        model: an `Model` with muscles (``model.muscles``).
        c: ``(nc,)`` rad / m, OpenSim's coordinates (``model.coordinate_names``).

    Returns:
        ``(m,)`` m, ``model.muscles.names`` order.
    """
    _muscles_of(model)
    return _lengths(model, _coordinates(model, c, "c"))


@_public
def muscle_moment_arms(model, c: Float[ArrayLike, " nc"]) -> Float[Array, "m nc"]:
    """Moment arms ``r = −∂l/∂c``: positive when the muscle shortens as the coordinate increases
    (OpenSim's ``computeMomentArm`` sign).

    Args:
        c: ``(nc,)`` rad / m, OpenSim's coordinates.

    Returns:
        ``(m, nc)`` m per rad (rotational) / m per m (translational).
    """
    mus = _muscles_of(model)
    c = _coordinates(model, c, "c")
    if mus.paths.path_wraps:
        return _wrapped_lengths_and_moment_arms(model, c)[1]
    return -jax.jacfwd(lambda x: _lengths(model, x))(c)


def _wrapped_lengths_and_moment_arms(model, c):
    """``(lengths (m,), moment arms (m, nc))`` of a model whose paths wrap, for one ``c``: one
    directional derivative of `_lengths` per coordinate in sequence (`jax.lax.map`; with the wrap
    surfaces' loops this compiles and runs faster than `jax.jacfwd`'s batch of tangents, see
    `jaxbio.muscles.geometry.moment_arms`), the lengths taken from the first one's primal."""
    basis = jnp.eye(c.shape[0], dtype=c.dtype)
    lengths, slopes = jax.lax.map(lambda v: jax.jvp(lambda x: _lengths(model, x), (c,), (v,)), basis)
    return lengths[0], -slopes.T


@_public
def muscle_lengthening_speeds(model, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"]) -> Float[Array, " m"]:
    """Lengthening speeds ``dl/dt = (∂l/∂c) ċ`` (OpenSim's ``getLengtheningSpeed``).

    Args:
        c: ``(nc,)`` rad / m, OpenSim's coordinates; cd: ``(nc,)`` rad/s / m/s, their rates.

    Returns:
        ``(m,)`` m/s, positive when the muscle lengthens.
    """
    _muscles_of(model)
    c = _coordinates(model, c, "c")
    cd = _coordinates(model, cd, "cd").astype(c.dtype)
    return jax.jvp(lambda x: _lengths(model, x), (c,), (cd,))[1]


@_public
def muscle_generalized_forces(
    model, c: Float[ArrayLike, " nc"], tensions: Float[ArrayLike, " m"]
) -> Float[Array, " nc"]:
    """Generalised forces of the muscle tensions, ``τ = rᵀ F`` (conjugate to ``ċ``).

    Args:
        c: ``(nc,)`` rad / m, OpenSim's coordinates.
        tensions: ``(m,)`` N, the tendon forces (positive pulls).

    Returns:
        ``(nc,)`` N·m (rotational) / N (translational).
    """
    mus = _muscles_of(model)
    tensions = as_shape(
        tensions, (mus.n_muscles,), "tensions", f": one per muscle ({', '.join(mus.names)})", like=model.ranges
    )
    r = muscle_moment_arms(model, c)
    return jnp.sum(r * tensions[:, None].astype(r.dtype), axis=0)


@_public
def muscle_static_optimization_forces(
    model, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"]
) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
    """``(F̂, P)`` ``(m,)`` N: each muscle's active force at full activation on a rigid tendon
    (OpenSim's ``calcInextensibleTendonActiveFiberForce(s, 1)``) and its passive force, from its
    model's ``static_optimization_forces`` at the path length and lengthening speed.

    Args:
        c: ``(nc,)`` rad / m, OpenSim's coordinates; cd: ``(nc,)`` rad/s / m/s, their rates.
    """
    mus = _muscles_of(model)
    c = _coordinates(model, c, "c")
    cd = _coordinates(model, cd, "cd").astype(c.dtype)
    return _forces_at(mus, *jax.jvp(lambda x: _lengths(model, x), (c,), (cd,)))


def _forces_at(mus, length, speed):
    """``(F̂, P)`` of `muscle_static_optimization_forces` at path lengths and lengthening speeds
    ``(m,)`` (m, m/s)."""
    active = jnp.zeros_like(length)
    passive = jnp.zeros_like(length)
    for group, index in mus.groups:
        if group is None:
            continue
        idx = np.asarray(index, np.int32)
        f, p = group.static_optimization_forces(length[idx], speed[idx])
        active = active.at[idx].set(f.astype(active.dtype))
        passive = passive.at[idx].set(p.astype(passive.dtype))
    return active, passive


# ---- reading the muscles ---------------------------------------------------------------------------

#: (segment, position, orientation) of a frame in its segment's frame
FramePose = tuple[int, np.ndarray, np.ndarray]


def read_muscles(
    model_elem: ET.Element,
    tree,
    coordinates: Sequence[str],
    disabled: set,
    frame: Callable[[str, str, str, bool], FramePose],
    dtype,
) -> tuple[OsimMuscles | None, set, tuple[str, ...]]:
    """`OsimMuscles` of a ``<Model>`` element's ForceSet (``None`` when it has no enabled Thelen
    or Millard muscle), the set of elements imported and notes for ``Model.ignored`` (muscle
    models whose parameters OpenSim refuses: not imported, the skeleton stays usable). ``frame``
    resolves a body/frame path (as in `jaxbio.io._osim_forces.read_forces`); ``disabled`` holds
    the ForceSet entries that apply no force."""
    from jaxbio.io._osim_xml import _describe, _flag, _function, _function_element, _numbers, _text

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

    def given(elem) -> bool:  # an empty element is a property the file does not set (OpenSim: its default)
        return bool((elem.text or "").strip())

    def properties(o):  # OpenSim's XML properties of the muscle model (from_opensim's input)
        row, where, cls = {}, _describe(o), MUSCLE_MODELS[o.tag]
        for ch in o:
            if ch.tag in cls.OPENSIM_PROPERTIES and given(ch):
                row[ch.tag] = float(_numbers(o, ch.tag, 1, where)[0])
            elif ch.tag in ("ignore_tendon_compliance", "ignore_activation_dynamics"):
                row[ch.tag] = _flag(o, ch.tag, where)
            elif ch.tag in getattr(cls, "OPENSIM_CURVES", {}):
                props = cls.OPENSIM_CURVES[ch.tag].OPENSIM_PROPERTIES
                row[ch.tag] = {
                    g.tag: float(_numbers(ch, g.tag, 1, f"{where}: <{ch.tag}>")[0])
                    for g in ch
                    if g.tag in props and given(g)
                }
        return row

    def group_of(o) -> str:  # the module a muscle goes to: its class, Millard split by its static tendon flag
        if o.tag == "Millard2012EquilibriumMuscle" and mixed_tendons:
            return RIGID_MILLARD if _flag(o, "ignore_tendon_compliance", _describe(o)) else o.tag
        return o.tag

    elems = [
        o
        for s in model_elem.findall("ForceSet")
        for o in s.findall("objects/*")
        if o.tag in MUSCLE_MODELS and o not in disabled
    ]
    # Millard muscles with rigid and elastic tendons (a static flag of the module): two modules
    millard = [o for o in elems if o.tag == "Millard2012EquilibriumMuscle"]
    mixed_tendons = len({_flag(o, "ignore_tendon_compliance", _describe(o)) for o in millard}) > 1
    # muscle models jaxbio refuses (parameters out of range): not imported, listed in ignored
    notes = []
    for kind, cls in GROUPS.items():
        mine = [o for o in elems if group_of(o) == kind]
        if not mine:
            continue
        try:
            cls.from_opensim([properties(o) for o in mine])
        except (ValueError, NotImplementedError) as e:
            notes.append(f"{mine[0].tag}: {len(mine)} muscles not imported, parameters refused ({e})")
            elems = [o for o in elems if group_of(o) != kind]
    if not elems:
        return None, set(), tuple(notes)

    # wrap objects of every body and the ground, in the frame of the body (a frame spec)
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

    points, wraps, rows = {}, {}, {t: [] for t in GROUPS}
    names, types, lo, hi = [], [], [], []
    conditional, cond_ranges, moving, moving_pose, moving_src, moving_fn = [], [], [], [], [], []
    for o in elems:
        name, where = o.get("name", ""), _describe(o)
        owner = f"/forceset/{name}"
        gp = o.find("GeometryPath")
        if gp is None:
            raise ValueError(f"{where}: no <GeometryPath>")
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
        rows[group_of(o)].append((len(names), properties(o)))
        names.append(name)
        types.append(o.tag)
        lo.append(_control(o, "min_control", where, 0.0))
        hi.append(_control(o, "max_control", where, 1.0))
    if len(set(names)) != len(names):
        raise ValueError("two muscles have the same name")

    try:
        paths = MusclePaths.from_points(
            tree, points, frames=frames, wrap_objects=wrap_specs or None, path_wraps=wraps or None, dtype=dtype
        )
    except ValueError as e:
        raise ValueError(f"muscle paths: {e}") from None
    groups = {
        kind: jax.tree_util.tree_map(
            lambda x: to_device(x, paths.points.dtype), cls.from_opensim([r for _, r in rows[kind]])
        )
        for kind, cls in GROUPS.items()
        if rows[kind]
    }
    dt = paths.points.dtype
    km = len(moving)
    muscles = OsimMuscles(
        paths=paths,
        min_control=to_device(np.array(lo, float), dt),
        max_control=to_device(np.array(hi, float), dt),
        conditional_ranges=to_device(np.array(cond_ranges, float).reshape(-1, 2), dt),
        moving_origins=to_device(np.array([p for p, _ in moving_pose], float).reshape(km, 3), dt),
        moving_orientations=to_device(np.array([q for _, q in moving_pose], float).reshape(km, 4), dt),
        moving_functions=CoordinateMap.from_pieces(coords, moving_src, moving_fn, dtype=dt) if km else None,
        thelen=groups.get("Thelen2003Muscle"),
        millard=groups.get("Millard2012EquilibriumMuscle"),
        millard_rigid=groups.get(RIGID_MILLARD),
        names=tuple(names),
        types=tuple(types),
        thelen_index=tuple(i for i, _ in rows["Thelen2003Muscle"]),
        millard_index=tuple(i for i, _ in rows["Millard2012EquilibriumMuscle"]),
        millard_rigid_index=tuple(i for i, _ in rows[RIGID_MILLARD]),
        conditional=tuple(conditional),
        moving=tuple(moving),
    )
    return muscles, set(elems), tuple(notes)


def _at_zero(f: Piecewise) -> float:
    """``f(0)`` (numpy)."""
    piece = int(np.sum(0.0 >= np.asarray(f.breakpoints)))
    h = 0.0 - float(np.asarray(f.origins)[piece])
    return float(np.polynomial.polynomial.polyval(h, np.asarray(f.coefficients)[piece]))


def _control(elem, tag, where, default):
    from jaxbio.io._osim_forces import read_control

    return read_control(elem, tag, where, default)
