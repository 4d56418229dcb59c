"""Muscle path geometry: paths through points fixed on segments (or the world), optionally
wrapping over OpenSim's wrap surfaces.

A muscle–tendon path is a polyline through ``P`` points, each fixed in the frame of one segment
of a `SegmentTree` or in the world (ground). Without wrap objects its length is the sum of the
straight distances between consecutive points. A path may also carry OpenSim wrap objects
(cylinders, spheres, ellipsoids fixed on segments, `jaxbio.muscles.wrapping.WrapObjects`) with
OpenSim's ``PathWrap`` ranges and methods: its length is then OpenSim's, tangent points and arcs
on the surfaces included (`jaxbio.muscles.wrapping.wrap_paths`, which emulates
``GeometryPath::applyWrapObjects``). Moment arms, lengthening velocities, generalised forces and
the wrenches the muscles apply to the segments follow from the length by automatic
differentiation and by statics.

Sign conventions (used throughout):

- moment arm ``r = −∂l/∂q``: **positive when the muscle shortens as ``q`` increases**, so that a
  tension ``F ≥ 0`` produces the generalised force ``τ = rᵀ F`` that acts along ``+q``
  (API.md: ``tau`` positive along the joint axis).
- lengthening velocity ``dl/dt = (∂l/∂q) q̇ = −r q̇`` (positive when the muscle lengthens).
- the wrench route: every straight piece of a path between consecutive points on *different*
  bodies pulls both of its end points towards each other with the tension (Du 2021, §3.2: the
  muscle force acts along the line between attachment points). `muscle_wrenches` returns these
  forces summed per segment, world frame, with moments about each segment's origin, in the form
  ``external`` of `jaxbio.inverse_dynamics`. Since inverse dynamics returns the generalised force
  still *needed* from the joints, ``inverse_dynamics(tree, q, 0, 0, external=muscle_wrenches(…))
  − inverse_dynamics(tree, q, 0, 0) = −generalized_forces(…)``.

Muscles are arrays, not Python objects: ``m`` muscles padded to ``P`` points with a mask, so every
function is one vectorised computation (no Python loop over muscles or frames in traced code) and
works under `jax.jit`, `jax.vmap` and `jax.grad`. The public functions are wrapped in `jax.jit`
(compiled on first call, so eager use is fast; inlined inside a caller's own jit).

Bad input never becomes a plausible length: before tracing, paths built for another tree
(`check_tree`), a wrong shape and a concrete NaN/inf are ``ValueError`` s naming the argument;
a traced NaN/inf reaches every output that depends on it (the zero-length guards of
`jaxbio.spatial` keep NaN), and a batch of 0 states gives empty results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio._validate import (
    as_shape,
    check_concrete_finite,
    check_model_precision,
    check_precision,
    jit_checked,
    model_dtype,
    to_device,
)
from jaxbio.dynamics.batch_last import vmapped_by
from jaxbio.dynamics.kinematics import segment_motion
from jaxbio.muscles import _batched_geometry, wrapping
from jaxbio.muscles.wrapping import WrapObjects
from jaxbio.spatial import cross, norm, unit
from jaxbio.tree import SegmentTree
from jaxbio.model import tree_of

__all__ = [
    "MusclePaths",
    "WORLD",
    "check_tree",
    "tree_topology",
    "path_points_world",
    "lengths",
    "lengthening_velocity",
    "lengths_and_velocities",
    "moment_arms",
    "generalized_forces",
    "muscle_wrenches",
]

#: Segment index of a point fixed in the world (ground) frame.
WORLD = -1
#: Names that always mean the world frame in `MusclePaths.from_points`.
WORLD_NAMES = ("ground", "world")


class MusclePaths(eqx.Module):
    """Paths of ``m`` muscles, each through up to ``P`` points, optionally over wrap surfaces.

    Fields:

    - ``points``: ``(m, P, 3)`` m, array leaf: each point in the frame of its segment, or in the
      world frame where its segment is ``WORLD`` (−1). Padding repeats the last active point.
    - ``segments``: static ``tuple`` of ``m`` tuples of ``P`` ints, the segment index of each point
      in the `SegmentTree` (``-1`` = world/ground). `segment_index` gives it as a numpy array.
    - ``counts``: static, number of active points of each muscle (≥ 2); active points come first.
    - ``names``: static, muscle names; ``point_names``: static, per muscle, its points' names.
    - ``built_for``: static, the `tree_topology` of the `SegmentTree` the paths were built for (its
      name, segment names, parents and joint types), or ``()`` when unknown. Every function
      taking ``(paths, tree)`` refuses a tree of another topology (`check_tree`): a segment
      index means nothing on another tree. Trees with the same topology and other numbers (a
      scaled subject) are accepted.
    - ``wrap_objects``: `WrapObjects` (array leaves: poses and dimensions) or ``None``.
    - ``path_wraps``: static, per muscle a tuple of OpenSim ``PathWrap`` s in their order, each
      ``(wrap object index, method code, first point, last point)`` (method codes index
      `jaxbio.muscles.wrapping.METHODS`; the points, 0-based, bound the pieces the object may
      wrap, OpenSim's ``range``); ``()`` when no muscle wraps.

    The topology (which segment holds which point, how many points) is static, the coordinates
    are an array leaf: `jax.grad` with respect to ``points`` (attachment sites) works, and
    `jax.vmap` over stacked ``points`` (subjects) too. Build with `MusclePaths.from_points`,
    which validates the input; the constructor itself checks shapes only (it also runs on traced
    arrays).
    """

    points: Float[Array, "m P 3"]
    segments: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    counts: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    point_names: tuple[tuple[str, ...], ...] = eqx.field(static=True, default=())
    built_for: tuple = eqx.field(static=True, default=())
    wrap_objects: WrapObjects | None = None
    path_wraps: tuple[tuple[tuple[int, int, int, int], ...], ...] = eqx.field(static=True, default=())

    def __check_init__(self):
        m = len(self.names)
        if len(self.segments) != m or len(self.counts) != m:
            raise ValueError(
                f"MusclePaths: names ({m}), segments ({len(self.segments)}) and counts "
                f"({len(self.counts)}) must have the same length"
            )
        P = len(self.segments[0]) if m else 0
        if any(len(s) != P for s in self.segments):
            raise ValueError("MusclePaths.segments: every muscle must have the same padded length P")
        shape = jnp.shape(self.points)
        if shape[-3:] != (m, P, 3):
            raise ValueError(f"MusclePaths.points has shape {shape}, expected {(m, P, 3)}")
        for name, c in zip(self.names, self.counts):
            if not 2 <= c <= P:
                raise ValueError(f"muscle {name!r}: a path needs at least 2 points (got {c})")
        n_segments = len(self.built_for[1]) if self.built_for else None
        for name, row in zip(self.names, self.segments):
            for k, seg in enumerate(row):
                if seg < WORLD or (n_segments is not None and seg >= n_segments):
                    size = f" ({n_segments} segments)" if n_segments else ""
                    raise ValueError(
                        f"muscle {name!r}, point {k}: segment index {seg} is neither {WORLD} (the "
                        f"world) nor a segment of the tree{size}"
                    )
        if self.path_wraps:
            if len(self.path_wraps) != m:
                raise ValueError(f"MusclePaths.path_wraps: one tuple per muscle ({m}), got {len(self.path_wraps)}")
            w = len(self.wrap_objects.names) if self.wrap_objects is not None else 0
            for name, count, wraps in zip(self.names, self.counts, self.path_wraps):
                for obj, method, first, last in wraps:
                    if not (
                        0 <= obj < w
                        and 0 <= method < len(wrapping.METHODS)
                        and 0 <= first < count
                        and 0 <= last < count
                    ):
                        raise ValueError(
                            f"muscle {name!r}: path wrap {(obj, method, first, last)} refers to a wrap "
                            f"object, method or points that do not exist ({w} objects, {count} points)"
                        )

    # ---- static helpers (numpy) --------------------------------------------------------------
    @property
    def n_muscles(self) -> int:
        return len(self.names)

    @property
    def max_points(self) -> int:
        """``P``, the padded number of points per muscle."""
        return len(self.segments[0]) if self.segments else 0

    @property
    def segment_index(self) -> np.ndarray:
        """``(m, P)`` int, static: segment of each point, ``-1`` for the world."""
        return np.asarray(self.segments, dtype=np.int64).reshape(self.n_muscles, self.max_points)

    @property
    def mask(self) -> np.ndarray:
        """``(m, P)`` bool, static: true for active (non-padding) points."""
        return np.arange(self.max_points)[None, :] < np.asarray(self.counts)[:, None]

    @property
    def piece_mask(self) -> np.ndarray:
        """``(m, P−1)`` bool, static: true for the straight pieces ``k → k+1`` of each path."""
        return self.mask[:, 1:]

    @property
    def wrapped(self) -> np.ndarray:
        """Indices of the muscles with wrap objects (static)."""
        return np.array([i for i, w in enumerate(self.path_wraps) if w], np.int64)

    def index(self, name: str) -> int:
        """Index of the muscle called ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"no muscle named {name!r}; muscles are {list(self.names)}") from None

    # ---- validated construction --------------------------------------------------------------
    @classmethod
    def from_points(
        cls,
        tree: SegmentTree,
        muscles: Mapping[str, Sequence[tuple]],
        *,
        frames: Mapping[str, tuple] | None = None,
        wrap_objects: Mapping[str, Mapping] | None = None,
        path_wraps: Mapping[str, Sequence] | None = None,
        dtype=None,
    ) -> MusclePaths:
        """Build and validate paths from named points.

        Args:
            tree: the model whose segment names the points refer to.
            muscles: ``{muscle name: [(frame name, xyz), ...]}`` or with a third element, the
                point's name: ``(frame name, xyz, point name)``. ``xyz`` in m, in that frame.
            frames: optional extra frames rigidly fixed to a segment or to the world:
                ``{name: (segment name or None for the world, origin (3,), quaternion (4,))}``,
                the frame's origin (m) and attitude in that segment's frame (the quaternion may be
                omitted). Use it for bodies welded to another body, e.g. OpenSim's ``base`` of
                arm26 welded to the ground, or ``calcn`` welded to ``talus``. ``"ground"`` and
                ``"world"`` always mean the world frame.
            wrap_objects: optional OpenSim wrap surfaces, ``{name: {"type": "WrapCylinder" |
                "WrapSphere" | "WrapEllipsoid", "frame": segment or frame name, "translation":
                (3,) m, "xyz_body_rotation": (3,) rad (body-fixed X-Y-Z), "quadrant": "all" |
                "x" | "-x" | "y" | "-y" | "z" | "-z", "radius": m, "length": m (cylinder),
                "dimensions": (3,) m (ellipsoid)}}``, OpenSim's property names and defaults.
            path_wraps: ``{muscle name: [wrap object name, or {"wrap_object": name, "method":
                "hybrid" | "midpoint" | "axial", "range": (start, end)}, ...]}``, OpenSim's
                ``PathWrapSet`` of each muscle in its order (``range`` 1-based over the
                muscle's points, ``-1`` = first / last, as OpenSim).
            dtype: float dtype of ``points`` (default: JAX's default float type).

        Raises:
            ValueError naming the muscle and point for: a frame name that is neither a segment
            nor in ``frames``, fewer than 2 points, a non-finite or wrongly shaped coordinate,
            and two consecutive points that coincide on the same segment (a zero-length piece);
            naming the wrap object or path wrap for a bad wrap entry (unknown type, frame or
            object, bad dimensions, quadrant, method or range).
        """
        frames = dict(frames or {})
        resolved: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
        for nm in WORLD_NAMES:
            resolved[nm] = (WORLD, np.zeros(3), np.eye(3))
        for i, nm in enumerate(tree.names):
            resolved[nm] = (i, np.zeros(3), np.eye(3))
        for fname, spec in frames.items():
            seg_name, origin = spec[0], np.asarray(spec[1], float)
            q = np.asarray(spec[2], float) if len(spec) > 2 else np.array([1.0, 0.0, 0.0, 0.0])
            if seg_name is None or seg_name in WORLD_NAMES:
                seg = WORLD
            elif seg_name in tree.names:
                seg = tree.names.index(seg_name)
            else:
                raise ValueError(f"frame {fname!r}: unknown segment {seg_name!r}; segments are {list(tree.names)}")
            if origin.shape != (3,) or q.shape != (4,) or abs(np.linalg.norm(q) - 1) > 1e-6:
                raise ValueError(f"frame {fname!r}: origin must be (3,) and the quaternion (4,) of unit norm")
            resolved[fname] = (seg, origin, quat.to_matrix(q / np.linalg.norm(q)))

        names, seg_rows, pt_rows, pname_rows, counts = [], [], [], [], []
        for mname, pts in muscles.items():
            pts = list(pts)
            if len(pts) < 2:
                raise ValueError(f"muscle {mname!r}: a path needs at least 2 points, got {len(pts)}")
            segs, xyzs, pnames = [], [], []
            for k, spec in enumerate(pts):
                frame, xyz = spec[0], np.asarray(spec[1], float)
                pname = str(spec[2]) if len(spec) > 2 else f"{mname}-P{k + 1}"
                if frame not in resolved:
                    raise ValueError(
                        f"muscle {mname!r}, point {k} ({pname!r}): unknown segment {frame!r}; "
                        f"segments are {list(tree.names)}, fixed frames {sorted(set(resolved) - set(tree.names))}"
                    )
                if xyz.shape != (3,) or not np.all(np.isfinite(xyz)):
                    raise ValueError(
                        f"muscle {mname!r}, point {k} ({pname!r}): xyz must be 3 finite numbers, got {spec[1]!r}"
                    )
                seg, origin, R = resolved[frame]
                p = origin + R @ xyz
                if k > 0 and seg == segs[-1] and np.linalg.norm(p - xyzs[-1]) <= 1e-12:
                    raise ValueError(
                        f"muscle {mname!r}, point {k} ({pname!r}) coincides with point {k - 1} "
                        f"({pnames[-1]!r}) on the same segment: zero-length path piece"
                    )
                segs.append(seg)
                xyzs.append(p)
                pnames.append(pname)
            names.append(str(mname))
            seg_rows.append(segs)
            pt_rows.append(xyzs)
            pname_rows.append(pnames)
            counts.append(len(segs))
        if not names:
            raise ValueError("MusclePaths.from_points: no muscles given")

        def resolve(frame, where):
            if frame not in resolved:
                raise ValueError(
                    f"{where}: unknown frame {frame!r}; segments are {list(tree.names)}, fixed "
                    f"frames {sorted(set(resolved) - set(tree.names))}"
                )
            return resolved[frame]

        objects = wrapping.build_wrap_objects(dict(wrap_objects or {}), resolve, dtype) if wrap_objects else None
        unknown = set(path_wraps or {}) - set(names)
        if unknown:
            raise ValueError(f"path_wraps: unknown muscles {sorted(unknown)}; muscles are {names}")
        wraps = []
        for mname, count in zip(names, counts):
            specs = list((path_wraps or {}).get(mname, ()))
            if specs and objects is None:
                raise ValueError(f"muscle {mname!r}: path wraps given but no wrap_objects")
            wraps.append(
                tuple(
                    wrapping.path_wrap_spec(sp, objects, count, f"muscle {mname!r}, path wrap {k}")
                    for k, sp in enumerate(specs)
                )
            )
        P = max(counts)
        seg_arr = np.zeros((len(names), P), np.int64)
        pt_arr = np.zeros((len(names), P, 3))
        for i, (segs, xyzs) in enumerate(zip(seg_rows, pt_rows)):
            c = len(segs)
            seg_arr[i, :c], pt_arr[i, :c] = segs, xyzs
            seg_arr[i, c:], pt_arr[i, c:] = segs[-1], xyzs[-1]  # padding: repeat the last point
        dt = model_dtype(dtype)
        return cls(
            points=to_device(pt_arr, dt),
            segments=tuple(tuple(int(s) for s in row) for row in seg_arr),
            counts=tuple(counts),
            names=tuple(names),
            point_names=tuple(tuple(r) for r in pname_rows),
            built_for=tree_topology(tree),
            wrap_objects=objects,
            path_wraps=tuple(wraps) if any(wraps) else (),
        )

    def astype(self, dtype) -> MusclePaths:
        """The same paths with ``points`` (and the wrap objects' numbers) cast to ``dtype``."""
        out = eqx.tree_at(lambda p: p.points, self, jnp.asarray(self.points, dtype))
        if self.wrap_objects is not None:
            out = eqx.tree_at(lambda p: p.wrap_objects, out, self.wrap_objects.astype(dtype))
        return out


def tree_topology(tree: SegmentTree) -> tuple:
    """``(name, segment names, parents, joint types)`` of ``tree``: what `MusclePaths` records of
    the tree it was built for (static, hashable)."""
    return (tree.name, tuple(tree.names), tuple(tree.parents), tuple(tree.joint_types))


def check_tree(paths: MusclePaths, tree: SegmentTree) -> None:
    """``ValueError`` naming both models unless ``paths`` were built for a tree of ``tree``'s
    topology (same segment names, parents and joint types; the numbers may differ). Paths that
    do not record their tree (``paths.built_for == ()``, built by the constructor) are checked
    only for segment indices within ``tree``. Static: runs before tracing."""
    if not isinstance(paths, MusclePaths):
        raise ValueError(f"paths must be a MusclePaths, got {type(paths).__name__}")
    if not isinstance(tree, SegmentTree):
        raise ValueError(f"tree must be a SegmentTree, got {type(tree).__name__}")
    check_model_precision(tree)  # half precision stores, it does not compute (`check_precision`)
    for leaf in jax.tree_util.tree_leaves(paths):
        if hasattr(leaf, "dtype"):
            check_precision(leaf.dtype, "paths")
    if paths.built_for:
        name, names, parents, types = paths.built_for
        if (names, parents, types) != tuple(tree_topology(tree)[1:]):
            raise ValueError(
                f"muscle paths and tree do not match: the paths were built for model {name!r} "
                f"(segments {list(names)}), the tree is model {tree.name!r} (segments {list(tree.names)}); "
                f"build the paths on this tree (MusclePaths.from_points)"
            )
        return
    seg = paths.segment_index
    if seg.size and seg.max() >= tree.nq:
        i, k = (int(a[0]) for a in np.nonzero(seg >= tree.nq))
        raise ValueError(
            f"muscle paths and tree do not match: muscle {paths.names[i]!r}, point {k} is on segment "
            f"index {int(seg[i, k])}, but model {tree.name!r} has {tree.nq} segments"
        )
    objects = paths.wrap_objects
    for name, k in zip(objects.names if objects is not None else (), objects.segments if objects is not None else ()):
        if k >= tree.nq:
            raise ValueError(
                f"muscle paths and tree do not match: wrap object {name!r} is on segment index {k}, "
                f"but model {tree.name!r} has {tree.nq} segments"
            )


def _as_state(tree: SegmentTree, x, name: str):
    """``x`` as a float array of shape ``(tree.nq,)``; ``ValueError`` naming it otherwise."""
    return as_shape(
        x,
        (tree.nq,),
        name,
        f" for model {tree.name!r} ({tree.nq} coordinates: {', '.join(tree.names)}); batch with jax.vmap",
    )


def _as_forces(paths: MusclePaths, forces):
    return as_shape(forces, (paths.n_muscles,), "forces", f": one tension per muscle ({', '.join(paths.names)})")


def _public(fn):
    """`jax.jit` of ``fn(paths, tree, *arrays)`` (compiled on first call, inlined in a caller's
    jit), after checks that run before tracing: `check_tree`, and NaN/inf in a concrete array
    argument (``ValueError`` naming it and the first bad entry). Traced arrays are not looked at:
    a NaN or inf in them flows to the outputs that depend on it (never masked into a finite
    number)."""
    return jit_checked(fn, _check_arguments, convert=_tree_argument)


def _tree_argument(name: str, value):
    """A `jaxbio.Model` given as ``tree``: its tree (`jaxbio.model.tree_of`)."""
    return tree_of(value) if name == "tree" else value


def _check_arguments(arguments: dict) -> None:
    check_tree(arguments["paths"], arguments["tree"])
    for name, x in list(arguments.items())[2:]:
        check_concrete_finite(x, name)


def _points_and_origins(paths: MusclePaths, tree: SegmentTree, q):
    """World points ``(m, P, 3)`` and the world origin of each point's segment ``(m, P, 3)``
    (zeros for world points)."""
    return _motion_points(paths, segment_motion(tree, q))


def _motion_points(paths: MusclePaths, mo):
    """`_points_and_origins` from the segments' world motion ``mo`` (`segment_motion`)."""
    seg = paths.segment_index
    idx = np.maximum(seg, 0)
    on_world = jnp.asarray((seg < 0)[..., None])
    att = mo.attitude[idx]  # (m, P, 4), gathered with static indices
    org = mo.position[idx]
    pts = paths.points.astype(jnp.result_type(paths.points, mo.position))
    moving = org + quat.rotate(att, pts)
    return jnp.where(on_world, pts, moving), jnp.where(on_world, 0.0, org)


@_public
def path_points_world(paths: MusclePaths, tree: SegmentTree, q: Float[ArrayLike, " n"]) -> Float[Array, "m P 3"]:
    """World position of every path point.

    Args:
        paths: the muscle paths (``m`` muscles, ``P`` padded points).
        tree: the model (``n`` segments).
        q: ``(n,)`` rad / m, generalised coordinates.

    Returns:
        ``(m, P, 3)`` m, world frame. Padding entries repeat each muscle's last active point.
    """
    q = _as_state(tree, q, "q")
    return _points_and_origins(paths, tree, q)[0]


def _pieces(paths: MusclePaths, pts):
    """Vectors ``(m, P−1, 3)`` between consecutive points, their lengths ``(m, P−1)`` and unit
    vectors (zero for padding pieces and where the length is zero), with finite gradients at zero
    length (`jaxbio.spatial.norm`, `unit`); a NaN point gives NaN, never a zero."""
    d = pts[:, 1:, :] - pts[:, :-1, :]
    real = jnp.asarray(paths.piece_mask)  # static: padding pieces are not part of the path
    length = jnp.where(real, norm(d), 0.0)
    u = jnp.where(real[..., None], unit(d, jnp.zeros_like(d)), 0.0)
    return d, length, u


def _wrapped(paths: MusclePaths, mo, pts) -> wrapping.WrappedPaths:
    """OpenSim's wrapping (`jaxbio.muscles.wrapping.wrap_paths`) on the muscles with wrap
    objects, from the world points ``pts`` ``(m, P, 3)`` and the segments' motion ``mo``."""
    wm = paths.wrapped
    plan = wrapping.wrap_plan([paths.path_wraps[i] for i in wm], np.asarray(paths.counts)[wm], paths.wrap_objects)
    origin, attitude = wrapping.wrap_frames(paths.wrap_objects, mo.attitude, mo.position)
    return wrapping.wrap_paths(pts[wm], plan, paths.wrap_objects, origin, attitude)


@_public
def lengths(paths: MusclePaths, tree: SegmentTree, q: Float[ArrayLike, " n"]) -> Float[Array, " m"]:
    """Muscle–tendon length: the sum of the straight distances between consecutive active points,
    or, for a muscle with wrap objects, OpenSim's wrapped length (straight pieces to the tangent
    points plus the arcs on the surfaces, `jaxbio.muscles.wrapping`).

    Where a path starts or stops wrapping the length is continuous and its gradient jumps (the
    moment arm is discontinuous there, as OpenSim's).

    Args:
        paths: the muscle paths.
        tree: the model.
        q: ``(n,)`` rad / m, generalised coordinates.

    Returns:
        ``(m,)`` m.
    """
    q = _as_state(tree, q, "q")
    return _path_lengths(paths, tree, q)


def _path_lengths(paths: MusclePaths, tree: SegmentTree, q, active=None):
    """`lengths` (unchecked), with an optional per-call ``(m, P)`` bool mask ``active`` of the
    points on each path (OpenSim's conditional path points, `jaxbio.io`): an inactive point is
    moved onto the previous active point of its path (the next one where none precedes), so its
    pieces have zero length and finite (zero) gradients. Muscles with wrap objects must have
    every point active (not checked here)."""
    if active is None and not paths.path_wraps:
        return _straight_lengths((paths, tree), q.astype(jnp.result_type(tree.axes, paths.points, q)))
    mo = segment_motion(tree, q)
    pts = _motion_points(paths, mo)[0]
    if active is not None:
        pts = _collapse_inactive(pts, active)
    straight = jnp.sum(_pieces(paths, pts)[1], axis=-1)
    if not paths.path_wraps:
        return straight
    return straight.at[paths.wrapped].set(_wrapped(paths, mo, pts).lengths)


@vmapped_by(lambda model, q: _batched_geometry.lengths_batch(*model, q))
def _straight_lengths(model, q):
    """Lengths of straight paths (no wrap objects, every point active) for one ``q`` (of the
    result dtype); under `jax.vmap` the batch-last kernel
    (`jaxbio.muscles._batched_geometry.lengths_batch`, much faster; benchmarks/README.md, "Measurements behind design choices"); derivatives are this function's."""
    paths, tree = model
    pts = _motion_points(paths, segment_motion(tree, q))[0]
    return jnp.sum(_pieces(paths, pts)[1], axis=-1)


def _collapse_inactive(pts, active):
    """World points ``(m, P, 3)`` with each point where ``active`` ``(m, P)`` is false replaced
    by the previous active point of its row (the first active one where none precedes)."""
    k = jnp.arange(pts.shape[1])
    previous = jax.lax.cummax(jnp.where(active, k, -1), axis=1)
    first = jnp.argmax(active, axis=1)
    source = jnp.where(previous < 0, first[:, None], previous)
    return jnp.take_along_axis(pts, source[..., None], axis=1)


def _tension_path(paths: MusclePaths, tree: SegmentTree, q):
    """The path as the tension acts along it, for every muscle: points ``(m, L, 3)`` world frame in
    path order, their segments ``(m, L)`` (−1: world), those segments' world origins ``(m, L,
    3)``, and the pieces ``(m, L − 1)`` that pull two different bodies together (straight, not
    on a wrap surface, between points on different segments). Tangent points sit on their wrap
    object's segment, as OpenSim's PathWrapPoints (``L = P`` without wrap objects)."""
    mo = segment_motion(tree, q)
    pts, org = _motion_points(paths, mo)
    seg = paths.segment_index
    pulls = jnp.asarray(paths.piece_mask & (seg[:, 1:] != seg[:, :-1]))
    seg = jnp.asarray(seg)
    if not paths.path_wraps:
        return pts, seg, org, pulls
    res = _wrapped(paths, mo, pts)
    wm = paths.wrapped
    P = paths.max_points
    pad = res.points.shape[1] - P
    # each wrapped muscle's element → segment table: its points, then its wraps' objects (twice)
    obj_seg = np.asarray(paths.wrap_objects.segments, np.int64)
    table = np.zeros((len(wm), P + pad), np.int64)
    for r, i in enumerate(wm):
        table[r, :P] = paths.segment_index[i]
        for k, (obj, *_rest) in enumerate(paths.path_wraps[i]):
            table[r, P + 2 * k : P + 2 * k + 2] = obj_seg[obj]
    seg_w = jnp.take_along_axis(jnp.asarray(table), res.elements, axis=1)
    pulls_w = res.valid[:, 1:] & ~res.arc & (seg_w[:, 1:] != seg_w[:, :-1])
    org_w = jnp.where((seg_w >= 0)[..., None], mo.position[jnp.maximum(seg_w, 0)], 0.0)

    def widen(x):
        return jnp.concatenate([x, jnp.repeat(x[:, -1:], pad, axis=1)], axis=1)

    pts = widen(pts).at[wm].set(res.points.astype(pts.dtype))
    seg = widen(seg).at[wm].set(seg_w)
    org = widen(org).at[wm].set(org_w.astype(org.dtype))
    pulls = jnp.concatenate([pulls, jnp.zeros((pulls.shape[0], pad), bool)], axis=1).at[wm].set(pulls_w)
    return pts, seg, org, pulls


@_public
def lengthening_velocity(
    paths: MusclePaths, tree: SegmentTree, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"]
) -> Float[Array, " m"]:
    """Rate of change of the muscle–tendon lengths, ``dl/dt = (∂l/∂q) q̇ = −r q̇`` (by `jax.jvp`).

    Args:
        q: ``(n,)`` rad / m, generalised coordinates.
        qd: ``(n,)`` rad/s / m/s, generalised velocities.

    Returns:
        ``(m,)`` m/s, positive when the muscle lengthens.
    """
    q = _as_state(tree, q, "q")
    qd = _as_state(tree, qd, "qd").astype(q.dtype)
    return _lengths_and_velocities(paths, tree, q, qd)[1]


@_public
def lengths_and_velocities(
    paths: MusclePaths, tree: SegmentTree, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"]
) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
    """`lengths` and `lengthening_velocity` together, from one `jax.jvp`: one forward-kinematics
    pass for both (what a Hill muscle's force needs). Faster than the two functions called
    separately (measured on the muscle forces ``a F̂ + P``; benchmarks/README.md, "Measurements behind design choices").

    Args:
        q: ``(n,)`` rad / m, generalised coordinates.
        qd: ``(n,)`` rad/s / m/s, generalised velocities.

    Returns:
        ``(lengths (m,) m, lengthening velocities (m,) m/s)``.
    """
    q = _as_state(tree, q, "q")
    qd = _as_state(tree, qd, "qd").astype(q.dtype)
    return _lengths_and_velocities(paths, tree, q, qd)


def _lengths_and_velocities(paths, tree, q, qd):
    if tree.is_axial and not paths.path_wraps:
        dt = jnp.result_type(tree.axes, paths.points, q)
        return _straight_lengths_and_velocities((paths, tree), q.astype(dt), qd.astype(dt))
    return jax.jvp(lambda x: _path_lengths(paths, tree, x), (q,), (qd,))


@vmapped_by(lambda model, q, qd: _batched_geometry.lengths_velocities_batch(*model, q, qd))
def _straight_lengths_and_velocities(model, q, qd):
    """`_straight_lengths` and its rate along ``qd`` (one jvp) on a tree of revolute and
    prismatic joints; under `jax.vmap` the batch-last kernel
    (`jaxbio.muscles._batched_geometry.lengths_velocities_batch`: each point's velocity from its
    segment's, in the forward pass); derivatives are this function's."""
    return jax.jvp(lambda x: _straight_lengths(model, x), (q,), (qd,))


@_public
def moment_arms(paths: MusclePaths, tree: SegmentTree, q: Float[ArrayLike, " n"]) -> Float[Array, "m n"]:
    """Moment arms ``r = −∂l/∂q``.

    Straight paths on a tree of revolute and prismatic joints (the shipped muscle sets): by
    virtual work from one forward-kinematics pass (`_straight_moment_arms`; much faster than `jax.jacfwd`,
    benchmarks/README.md, "Measurements behind design choices"). Paths with wrap objects: one
    directional derivative of `lengths` per coordinate. Other trees (ball or free joints, whose
    ``q`` holds quaternions): `jax.jacfwd` of `lengths`.

    Positive ``r[i, j]``: muscle ``i`` shortens when ``q[j]`` increases, so its tension pulls
    ``q[j]`` in the positive direction. For a prismatic coordinate the "moment arm" is
    dimensionless (m/m).

    Args:
        q: ``(n,)`` rad / m, generalised coordinates.

    Returns:
        ``(m, n)`` m per rad (revolute) / m per m (prismatic).
    """
    q = _as_state(tree, q, "q")
    if paths.path_wraps:
        # one directional derivative per coordinate in sequence: with the wrap surfaces' loops
        # this compiles and runs faster than jacfwd's batch of tangents
        basis = jnp.eye(tree.nq, dtype=q.dtype)
        return -jax.lax.map(lambda v: jax.jvp(lambda x: lengths(paths, tree, x), (q,), (v,))[1], basis).T
    if tree.is_axial:
        return _straight_moment_arms((paths, tree), q.astype(jnp.result_type(tree.axes, paths.points, q)))
    return -jax.jacfwd(lambda x: lengths(paths, tree, x))(q)


@vmapped_by(lambda model, q: _batched_geometry.moment_arms_batch(*model, q))
def _straight_moment_arms(model, q):
    """`moment_arms` of straight-line paths on a tree of revolute and prismatic joints, by
    virtual work from one forward-kinematics pass instead of ``n`` tangents of it.

    ``l = Σ_k |X_{k+1} − X_k|`` over the path points ``X_p``, so ``∂l/∂X_p = g_p = u_{p−1} − u_p``
    (``u_k`` the unit vector of piece ``k``; 0 for padding pieces and before the first / after the
    last point), and a point fixed on a segment moves with coordinate ``j`` by ``a_j × (X − O_j)``
    (revolute: world axis ``a_j`` through the joint centre ``O_j``) or ``a_j`` (prismatic) when
    ``j`` moves that segment (`jaxbio.dynamics.kinematics.point_jacobian`'s columns). Hence

        ∂l/∂q_j = a_j · (Σ_p X_p × g_p − O_j × Σ_p g_p)    (revolute)
        ∂l/∂q_j = a_j · Σ_p g_p                             (prismatic)

    with both sums over the points that ``j`` moves (a static mask). Exact, not an approximation
    (tested against `jax.jacfwd` of `lengths` to 1e-12 in float64, with its derivatives); the
    jacfwd it replaces cost 10 forward-kinematics tangents per frame on gait10dof18musc. It is
    ``−Σ_p g_pᵀ J_p`` with ``J_p`` `point_jacobian`'s ``J_v``, contracted without building each
    point's ``(3, nv)`` Jacobian: through `point_jacobian` (vmapped over the points, on this
    function's `segment_motion`) the same moment arms were slower (benchmarks/README.md, "Measurements behind design choices").

    ``model`` is ``(paths, tree)``, ``q`` of the result dtype. Under `jax.vmap` it runs the
    batch-last kernel (`jaxbio.muscles._batched_geometry.moment_arms_batch`, the same formulas, faster); derivatives are this function's."""
    paths, tree = model
    mo = segment_motion(tree, q)
    pts = _motion_points(paths, mo)[0]  # (m, P, 3)
    u = _pieces(paths, pts)[2]  # (m, P−1, 3)
    edge = jnp.zeros_like(u[:, :1])
    g = jnp.concatenate([edge, u], axis=1) - jnp.concatenate([u, edge], axis=1)  # (m, P, 3) = ∂l/∂X
    seg = paths.segment_index
    # (m, P, nv) static: coordinate j moves point p (world points: no coordinate)
    moves = np.where((seg >= 0)[..., None], tree.dof_ancestors[np.maximum(seg, 0)], False)
    # (2, m, nv, 3): Σ_p g_p and Σ_p X_p × g_p in one contraction with the 0/1 mask (full
    # precision: no TF32 on GPU)
    pull, turn = jnp.einsum(
        "mpj,cmpk->cmjk",
        jnp.asarray(moves, g.dtype),
        jnp.stack([g, cross(pts, g)]),
        precision=jax.lax.Precision.HIGHEST,
    )
    d = tree.dofs
    centre = mo.position[d.segment]  # (nv, 3) each coordinate's joint centre
    lever = jnp.where(jnp.asarray(d.rotational)[:, None], turn - cross(centre, pull), pull)
    return -jnp.sum(mo.axis * lever, axis=-1)


@_public
def generalized_forces(
    paths: MusclePaths, tree: SegmentTree, q: Float[ArrayLike, " n"], forces: Float[ArrayLike, " m"]
) -> Float[Array, " n"]:
    """Generalised forces of the muscle tensions, ``τ = rᵀ F``.

    Args:
        q: ``(n,)`` rad / m, generalised coordinates.
        forces: ``(m,)`` N, muscle–tendon tensions (positive pulls).

    Returns:
        ``(n,)`` N·m (revolute) / N (prismatic), positive along each joint axis (API.md), i.e.
        the joint moments the muscles produce.
    """
    forces = _as_forces(paths, forces)
    r = moment_arms(paths, tree, q)
    return jnp.sum(r * forces[:, None].astype(r.dtype), axis=0)  # elementwise: no reduced-precision matmul


@_public
def muscle_wrenches(
    paths: MusclePaths, tree: SegmentTree, q: Float[ArrayLike, " n"], forces: Float[ArrayLike, " m"]
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """The wrenches the muscles apply to the segments (Du 2021, §3.2).

    Every straight piece of a path between consecutive points on different bodies pulls each of
    its two end points towards the other with the muscle's tension: ``+F u`` on the proximal point
    (``u`` the unit vector from it to the next point) and ``−F u`` on the next one. Pieces on one
    segment exert no net wrench on it and are skipped; forces on world points (the ground) are
    dropped. The forces on each segment are summed with their moments about the segment's origin.
    A wrapped path pulls at its tangent points, which belong to the wrap object's segment, and
    its arcs carry no force (OpenSim's ``GeometryPath::getPointForceDirections``); its
    generalised force then equals ``rᵀF`` where OpenSim's tangent points make the length
    stationary (spheres; cylinders and ellipsoids to within OpenSim's tangency heuristics).

    Args:
        q: ``(n,)`` rad / m, generalised coordinates.
        forces: ``(m,)`` N, muscle–tendon tensions.

    Returns:
        ``(forces (n, 3) N, moments (n, 3) N·m)``, world frame, moments about each segment's
        origin (its joint centre): the ``external`` argument of `jaxbio.inverse_dynamics`. Their
        generalised force ``Jᵀ(f, m)`` equals `generalized_forces`, so
        ``inverse_dynamics(…, external=muscle_wrenches(…)) − inverse_dynamics(…) = −rᵀF``.
    """
    q = _as_state(tree, q, "q")
    tension = _as_forces(paths, forces)
    pts, seg, org, spans = _tension_path(paths, tree, q)
    d = pts[:, 1:, :] - pts[:, :-1, :]
    unit_d = jnp.where(spans[..., None], unit(d, jnp.zeros_like(d)), 0.0)
    n = len(tree.names)  # segments (fixed ones too), not coordinates
    # pieces spanning two bodies; contributions on the world go to a dropped bin n
    f = tension[:, None, None].astype(unit_d.dtype) * unit_d  # (m, L−1, 3) on the proximal point
    f_all = jnp.concatenate([f, -f], axis=1)  # on points k and k+1
    p_all = jnp.concatenate([pts[:, :-1], pts[:, 1:]], axis=1)
    o_all = jnp.concatenate([org[:, :-1], org[:, 1:]], axis=1)
    s_all = jnp.concatenate([seg[:, :-1], seg[:, 1:]], axis=1)
    bins = jnp.where(s_all < 0, n, s_all).reshape(-1)
    m_all = jnp.cross(p_all - o_all, f_all)
    seg_f = jax.ops.segment_sum(f_all.reshape(-1, 3), bins, num_segments=n + 1)[:n]
    seg_m = jax.ops.segment_sum(m_all.reshape(-1, 3), bins, num_segments=n + 1)[:n]
    return seg_f, seg_m
