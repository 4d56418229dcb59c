"""Du's static arm (seed 001 §3.1–3.3): weights, biceps/triceps tensions, elbow inverse kinematics.

Seed 001 (Du, *Quaternion-based analytical inverse dynamics for the human body*, after Dumas et al.
2004) builds three static arms of one-dimensional segments, shoulder fixed:

- §3.1: upper arm + forearm, a point weight at the end of the forearm; the elbow lies on a circle
  around the shoulder–hand line (angle ``θ_input``, 0 at the lowest elbow); the joint wrenches
  follow from the distal → proximal recursion (001 eq. 3, the static form of eq. 2).
- §3.2: a biceps and a triceps, each a tension between the shoulder and a point of the forearm
  given by a ratio (0.9 and 1.1) of the forearm vector; the tension that cancels the elbow moment
  normal to the arm plane (001 eqs. 4–5; only one of the two muscles pulls).
- §3.3: a hand (third segment), segments numbered proximal → distal and processed by hierarchy
  level of the segment tree, weights as their own wrenches (001 §3.3.2), and an inverse kinematics
  that puts the elbow on its circle where the wrist bends least (001 §3.3.1).

Here the recursion is jaxbio's (`jaxbio.segment_wrenches`, already level-synchronous) on a
`SegmentTree` built from the segment end points (`arm_tree`); weights and muscles enter it as
``external`` wrenches (`weight_wrenches`, `muscle_wrenches`), built by the core: the weights by
`jaxbio.dynamics.point_loads`, the muscles as `jaxbio.muscles.geometry.MusclePaths`
(`muscle_paths`: points fixed in the segment frames) by `jaxbio.muscles.geometry`.

**Frames and units.** World frame (Du's ICS): z up, gravity ``(0, 0, −9.81)`` m/s² by default
(``Arm.gravity``), positions in m, forces in N, moments in N·m. A *pose* is ``root`` ``(3,)`` (the
proximal end of the root segment: the shoulder) and ``ends`` ``(n, 3)``, the distal end of every
segment; segment ``i`` runs from ``starts[i]`` (its parent's distal end, or ``root``) to
``ends[i]``: Du's ``d_i = ends[i] − starts[i]``. Segment indices are jaxbio's, proximal → distal
(0 upper arm, 1 forearm, 2 hand), i.e. Du's §3.3 numbering minus one.

**Sign of the joint wrenches.** `jaxbio.segment_wrenches` returns the force and the moment (about
the joint centre) that each segment *receives from its parent*: statically, the wrench that holds
the segment and everything distal to it against gravity, weights and muscles. Du's eq. 3 writes the
same recursion with the opposite sign for some terms (the extraction mixes ``m g`` and ``−m g``);
jaxbio's convention is used throughout, and the tension solve below is written for it.

**Ratios.** Two conventions, both Du's: muscle attachments use ``r`` *from the distal end* (the
point ``ends − r d = starts + (1 − r) d``, lever ``(1 − r_d) d`` of eqs. 4–5, so 0.9 is near the
elbow and 1.1 lies behind it); weights use ``w₂`` *from the proximal end* (the point
``starts + w₂ d``: Du's ``D₂ = grip − w₂ l₃ h_x`` and the weight lever ``d_i w₂(j)``; the text's
"from the distal end" for weights contradicts its own formulas, which are followed).

Anthropometry: the text gives no masses or lengths; `Arm.de_leva` uses de Leva (1996), the source
of jaxbio's shipped models (`jaxbio/models/README.md`).
"""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxbio import quaternion as quat
from jaxbio._validate import any_traced, as_float, as_shape, check_eagerly, enforce
from jaxbio.dynamics.loads import point_loads
from jaxbio.dynamics.rnea import segment_wrenches
from jaxbio.models.anthropometrics import DE_LEVA_MALE
from jaxbio.models.build import gyration_inertia
from jaxbio.muscles import geometry
from jaxbio.muscles.geometry import MusclePaths
from jaxbio.spatial import cross, dot, norm, safe_sqrt, unit
from jaxbio.tree import SegmentTree

__all__ = [
    "Arm",
    "Weights",
    "ArmMuscles",
    "MuscleTensions",
    "ArmStatics",
    "ElbowCase",
    "ElbowSolution",
    "du_muscles",
    "segment_starts",
    "arm_tree",
    "weight_wrenches",
    "muscle_paths",
    "muscle_points",
    "muscle_moment_arms",
    "muscle_wrenches",
    "muscle_tensions",
    "arm_statics",
    "hand_points",
    "elbow_at_angle",
    "elbow_position",
    "wrist_bending",
    "hand_arm_pose",
]



# ---------------------------------------------------------------------------------------------
# small helpers (checks: jaxbio._validate; NaN-free norms and unit vectors: jaxbio.spatial)
# ---------------------------------------------------------------------------------------------
def _vec3(x, name: str):
    return as_shape(x, (3,), name, " (a world-frame vector); batch with jax.vmap")


def _scalar(x, name: str):
    return as_shape(x, (), name, " (a scalar); batch with jax.vmap")


def _least_aligned_axis(u):
    """The world axis least aligned with ``u`` ``(3,)`` (a valid fallback reference)."""
    return jnp.eye(3, dtype=u.dtype)[jnp.argmin(jnp.abs(u))]


def _rtol(dtype, rtol):
    return float(jnp.finfo(dtype).eps) ** 0.5 if rtol is None else rtol


# ---------------------------------------------------------------------------------------------
# model parameters
# ---------------------------------------------------------------------------------------------
class Arm(eqx.Module):
    """Segment parameters of Du's arm (seed 001 §3.1, §3.3): one-dimensional segments in a tree.

    Fields (array leaves, so `jax.vmap`/`jax.grad` over subjects work):

    - ``lengths`` ``(n,)`` m, segment lengths (used by the inverse kinematics).
    - ``masses`` ``(n,)`` kg.
    - ``com_ratios`` ``(n,)``: centre of mass at ``starts + com_ratio · d`` (fraction from the
      proximal end; "we may treat the center of mass as a ratio of the overall length", §3.1).
    - ``gyration_ratios`` ``(n, 2)``: radii of gyration about a transverse axis and about the long
      axis, as fractions of the length (inertia about the COM in Du's segment frame is
      ``m L² diag(k_long², k_trans², k_trans²)``; irrelevant in statics, kept "for the sake of
      preparation for adding motion", §3.1).
    - ``gravity`` ``(3,)`` m/s², world frame.

    Static: ``names``, ``parents`` (Du's ``segcons``, ``-1`` for the shoulder; parents first).
    Build Du's arms with `Arm.de_leva`.
    """

    lengths: Float[Array, " n"]
    masses: Float[Array, " n"]
    com_ratios: Float[Array, " n"]
    gyration_ratios: Float[Array, "n 2"]
    gravity: Float[Array, "3"]
    names: tuple[str, ...] = eqx.field(static=True)
    parents: tuple[int, ...] = eqx.field(static=True)

    def __check_init__(self):
        n = len(self.names)
        if len(self.parents) != n:
            raise ValueError(f"Arm: names ({n}) and parents ({len(self.parents)}) must have the same length")
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"Arm: segment {self.names[i]!r} has parent {p}; it must be -1 or an earlier segment")
        for field, shape in (("lengths", (n,)), ("masses", (n,)), ("com_ratios", (n,)),
                             ("gyration_ratios", (n, 2)), ("gravity", (3,))):
            if jnp.shape(getattr(self, field)) != shape:
                raise ValueError(f"Arm.{field} has shape {jnp.shape(getattr(self, field))}, expected {shape}")
        if any_traced(self.lengths, self.masses, self.com_ratios, self.gyration_ratios, self.gravity):
            return
        L, m = np.asarray(self.lengths), np.asarray(self.masses)
        k = np.asarray(self.gyration_ratios)
        for field, bad in (("lengths", ~(np.isfinite(L) & (L > 0))), ("masses", ~(np.isfinite(m) & (m > 0)))):
            if bad.any():
                got = np.asarray(getattr(self, field)).tolist()
                raise ValueError(f"Arm.{field} must be positive and finite, got {got}")
        if not np.all(np.isfinite(np.asarray(self.com_ratios))):
            raise ValueError(f"Arm.com_ratios must be finite, got {np.asarray(self.com_ratios).tolist()}")
        if not np.all(np.isfinite(k) & (k > 0)) or np.any(k[:, 1] ** 2 > 2 * k[:, 0] ** 2):
            raise ValueError("Arm.gyration_ratios must be positive with k_long² <= 2 k_trans² (a physical inertia)")
        g = np.asarray(self.gravity)
        if not np.all(np.isfinite(g)) or not np.any(g != 0):
            raise ValueError(f"Arm.gravity must be finite and non-zero, got {g.tolist()}")

    @property
    def n(self) -> int:
        """Number of segments."""
        return len(self.names)

    @classmethod
    def de_leva(cls, hand: bool = True, body_mass: float = 73.0, *, dtype=None) -> "Arm":
        """Du's arm with de Leva (1996, Table 4, males) numbers, chained shoulder → distal.

        ``hand=False``: upper arm and forearm (seed 001 §3.1–3.2, the weight at the wrist);
        ``hand=True``: plus the hand (§3.3). ``body_mass`` kg scales the masses (lengths are de
        Leva's mean lengths: upper arm 0.2817 m, forearm 0.2689 m, hand 0.0862 m).
        """
        names = ("upper_arm", "forearm", "hand") if hand else ("upper_arm", "forearm")
        rows = np.array([(DE_LEVA_MALE[k].length_mm / 1000, DE_LEVA_MALE[k].mass / 100, DE_LEVA_MALE[k].com / 100,
                          DE_LEVA_MALE[k].r_transverse / 100, DE_LEVA_MALE[k].r_longitudinal / 100) for k in names])
        dt = dtype if dtype is not None else jnp.zeros(()).dtype
        return cls(
            lengths=jnp.asarray(rows[:, 0], dt),
            masses=jnp.asarray(rows[:, 1] * body_mass, dt),
            com_ratios=jnp.asarray(rows[:, 2], dt),
            gyration_ratios=jnp.asarray(rows[:, 3:5], dt),
            gravity=jnp.asarray([0.0, 0.0, -9.81], dt),
            names=names,
            parents=tuple(range(-1, len(names) - 1)),
        )


class Weights(eqx.Module):
    """Point weights held by or hung on segments (Du's ``weightsegs``, seed 001 §3.3.1).

    ``segments`` (static tuple, Du's ``w₁``): segment index of each weight; ``ratios`` ``(w,)``
    (Du's ``w₂``): the weight acts at ``starts + ratio · d`` of that segment (fraction from the
    proximal end; Du's held object: hand, 0.75); ``masses`` ``(w,)`` kg.
    """

    ratios: Float[Array, " w"]
    masses: Float[Array, " w"]
    segments: tuple[int, ...] = eqx.field(static=True)

    def __check_init__(self):
        w = len(self.segments)
        for f in ("ratios", "masses"):
            if jnp.shape(getattr(self, f)) != (w,):
                raise ValueError(f"Weights.{f} has shape {jnp.shape(getattr(self, f))}, expected ({w},)")
        if not any_traced(self.masses, self.ratios):
            if not (np.all(np.isfinite(np.asarray(self.ratios))) and np.all(np.isfinite(np.asarray(self.masses)))
                    and np.all(np.asarray(self.masses) >= 0)):
                raise ValueError("Weights: ratios must be finite and masses finite and >= 0")


class ArmMuscles(eqx.Module):
    """Line muscles between two segments (Du's ``muscends`` array, seed 001 §3.2).

    Column ``j`` of Du's array is ``(r_d, r_p, n_d, n_p)``: the muscle pulls between the point
    ``ends − r_d d`` of the distal segment ``n_d`` and ``ends − r_p d`` of the proximal segment
    ``n_p`` (ratios from the *distal* end of each segment, the lever ``(1 − r_d) d`` of eqs. 4–5).

    ``distal_ratios``, ``proximal_ratios`` ``(m,)``; static ``distal_segments``,
    ``proximal_segments`` (jaxbio indices, proximal → distal) and ``names``. See `du_muscles`.
    """

    distal_ratios: Float[Array, " m"]
    proximal_ratios: Float[Array, " m"]
    distal_segments: tuple[int, ...] = eqx.field(static=True)
    proximal_segments: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __check_init__(self):
        m = len(self.names)
        if len(self.distal_segments) != m or len(self.proximal_segments) != m:
            raise ValueError("ArmMuscles: names, distal_segments and proximal_segments must have the same length")
        for f in ("distal_ratios", "proximal_ratios"):
            if jnp.shape(getattr(self, f)) != (m,):
                raise ValueError(f"ArmMuscles.{f} has shape {jnp.shape(getattr(self, f))}, expected ({m},)")
        for name, a, b in zip(self.names, self.distal_segments, self.proximal_segments):
            if a == b:
                raise ValueError(f"muscle {name!r}: distal and proximal segment are both {a}")
        if not any_traced(self.distal_ratios, self.proximal_ratios):
            if not np.all(np.isfinite(np.asarray(self.distal_ratios))) or not np.all(
                    np.isfinite(np.asarray(self.proximal_ratios))):
                raise ValueError("ArmMuscles: ratios must be finite")


def du_muscles(dtype=None) -> ArmMuscles:
    """Du's biceps and triceps (seed 001 §3.2).

    Du's array ``[[0.9, 1.1], [1, 1], [1, 1], [2, 2]]`` in his §3.1–3.2 numbering (1 forearm,
    2 upper arm) becomes, in jaxbio's (0 upper arm, 1 forearm): distal segment 1 with
    ``r_d = 0.9`` (biceps, 0.1 of the forearm in front of the elbow) and ``1.1`` (triceps, 0.1
    behind it), proximal segment 0 with ``r_p = 1`` (the shoulder).
    """
    dt = dtype if dtype is not None else jnp.zeros(()).dtype
    return ArmMuscles(
        distal_ratios=jnp.asarray([0.9, 1.1], dt),
        proximal_ratios=jnp.asarray([1.0, 1.0], dt),
        distal_segments=(1, 1),
        proximal_segments=(0, 0),
        names=("biceps", "triceps"),
    )


# ---------------------------------------------------------------------------------------------
# pose → SegmentTree
# ---------------------------------------------------------------------------------------------
def _starts_xp(xp, parents, root, ends):
    par = np.asarray(parents)
    return xp.where((par < 0)[:, None], root[None, :], ends[np.maximum(par, 0)])


def _pose_checks(parents):
    def zero_length(xp, root, ends):
        L = xp.linalg.norm(ends - _starts_xp(xp, parents, root, ends), axis=-1)
        return xp.any(L <= 1e-9 * xp.maximum(xp.max(L), 1.0))

    return (
        (lambda xp, root, ends: ~(xp.all(xp.isfinite(root)) & xp.all(xp.isfinite(ends))),
         "arm pose: root or ends contain NaN or inf"),
        (zero_length, "arm pose: a segment has zero length (its distal end coincides with its proximal end)"),
    )


def _pose(arm: Arm, root, ends):
    """Shape checks, and the value checks when concrete (ValueError)."""
    root = _vec3(root, "root")
    ends = as_float(ends)
    if ends.shape != (arm.n, 3):
        raise ValueError(f"ends must have shape ({arm.n}, 3) (distal end of each of {arm.names}), got {ends.shape}")
    check_eagerly(_pose_checks(arm.parents), root, ends)
    dt = jnp.result_type(root, ends)
    return root.astype(dt), ends.astype(dt)


def _starts(arm, root, ends):
    ends = enforce(ends, _pose_checks(arm.parents), root, ends)
    return _starts_xp(jnp, arm.parents, root, ends), ends


def segment_starts(arm: Arm, root: Float[ArrayLike, "3"], ends: Float[ArrayLike, "n 3"]) -> Float[Array, "n 3"]:
    """``(n, 3)`` m, world: proximal end of every segment (its parent's distal end, or ``root``)."""
    root, ends = _pose(arm, root, ends)
    return _segment_starts(arm, root, ends)


@eqx.filter_jit
def _segment_starts(arm, root, ends):
    return _starts(arm, root, ends)[0]


def _tree(arm: Arm, starts, ends) -> SegmentTree:
    d = ends - starts
    L = norm(d)
    x = unit(d, jnp.zeros_like(d))  # segment long axes, world
    n = arm.n
    xx = x[:, :, None] * x[:, None, :]
    # Du's m L² diag(k_long², k_trans², k_trans²) in the world: k_trans about every transverse axis
    inertias = gyration_inertia(arm.masses, L, (arm.gyration_ratios[:, 0], arm.gyration_ratios[:, 1]),
                                (jnp.eye(3, dtype=d.dtype) - xx, xx))
    par = np.asarray(arm.parents)
    origins = starts - jnp.where((par < 0)[:, None], 0.0, starts[np.maximum(par, 0)])
    return SegmentTree(
        axes=jnp.broadcast_to(jnp.asarray([0.0, 0.0, 1.0], d.dtype), (n, 3)),
        origins=origins,
        orientations=jnp.broadcast_to(quat.identity(d.dtype), (n, 4)),
        masses=arm.masses,
        coms=arm.com_ratios[:, None] * d,
        inertias=inertias,
        gravity=arm.gravity,
        names=arm.names,
        parents=arm.parents,
        joint_types=("revolute",) * n,
        name="du_arm",
    )


def arm_tree(arm: Arm, root: Float[ArrayLike, "3"], ends: Float[ArrayLike, "n 3"]) -> SegmentTree:
    """The `SegmentTree` of the arm in the pose ``(root, ends)``, at ``q = 0`` (seed 001 §3.1).

    Segment frames follow jaxbio's model convention (`jaxbio/models/README.md`): origin at the
    proximal end (the joint centre), axes parallel to the world's at ``q = 0``. The COM is at
    ``com_ratio · d`` and the inertia about it is Du's segment-frame tensor
    ``m L² diag(k_long², k_trans², k_trans²)`` (x along the segment) rotated to the world,
    ``R I Rᵀ = m L² (k_trans² (E − x̂x̂ᵀ) + k_long² x̂x̂ᵀ)`` — independent of the roll of Du's frame
    because the two transverse radii are equal. Joint axes are world z (only the full moment
    vectors of `jaxbio.segment_wrenches` are used here). Works on traced poses (jit, vmap, grad).

    Args:
        arm: segment parameters.
        root: ``(3,)`` m, world: the shoulder (proximal end of the root segments).
        ends: ``(n, 3)`` m, world: distal end of each segment.

    Returns:
        a `SegmentTree`, to evaluate at ``q = qd = qdd = 0``. Raises `ValueError` (an equinox
        run-time error under jit) for a zero-length segment or a non-finite pose.
    """
    root, ends = _pose(arm, root, ends)
    return _arm_tree(arm, root, ends)


@eqx.filter_jit
def _arm_tree(arm, root, ends):
    starts, ends = _starts(arm, root, ends)
    return _tree(arm, starts, ends)


# ---------------------------------------------------------------------------------------------
# weights and muscles as external wrenches
# ---------------------------------------------------------------------------------------------
def _check_weights(arm, weights):
    if not isinstance(weights, Weights):
        raise ValueError(f"weights must be a Weights module, got {type(weights).__name__}")
    for k in weights.segments:
        if not 0 <= k < arm.n:
            raise ValueError(f"Weights.segments {weights.segments} out of range for segments {arm.names}")


def _check_muscles(arm, muscles):
    if not isinstance(muscles, ArmMuscles):
        raise ValueError(f"muscles must be an ArmMuscles module, got {type(muscles).__name__}")
    for name, a, b in zip(muscles.names, muscles.distal_segments, muscles.proximal_segments):
        if not (0 <= a < arm.n and 0 <= b < arm.n):
            raise ValueError(f"muscle {name!r}: segments ({a}, {b}) out of range for segments {arm.names}")


def weight_wrenches(
    arm: Arm, root: Float[ArrayLike, "3"], ends: Float[ArrayLike, "n 3"], weights: Weights
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """Weight wrenches (seed 001 §3.3.2): ``[m g ; (w₂ d_i) × m g]`` summed per segment.

    Returns ``external = (forces, moments)`` for `jaxbio.segment_wrenches`: ``(n, 3)`` N and
    ``(n, 3)`` N·m about each segment's proximal joint centre, world frame. Computed by the core
    (`jaxbio.dynamics.point_loads` on `arm_tree`).
    """
    root, ends = _pose(arm, root, ends)
    _check_weights(arm, weights)
    return _weight_wrenches_jit(arm, root, ends, weights)


@eqx.filter_jit
def _weight_wrenches_jit(arm, root, ends, weights):
    starts, ends = _starts(arm, root, ends)
    return _weight_wrenches(arm, _tree(arm, starts, ends), starts, ends, weights)


def _weight_wrenches(arm, tree, starts, ends, weights):
    k = np.asarray(weights.segments, dtype=int)
    return point_loads(tree, jnp.zeros((arm.n,), ends.dtype), weights.segments,
                       weights.ratios[:, None] * (ends[k] - starts[k]), weights.masses[:, None] * arm.gravity[None, :])


def muscle_paths(
    arm: Arm, root: Float[ArrayLike, "3"], ends: Float[ArrayLike, "n 3"], muscles: ArmMuscles
) -> MusclePaths:
    """Du's ratio-attached muscles as the core's `jaxbio.muscles.geometry.MusclePaths` of
    ``arm_tree(arm, root, ends)``: two points per muscle, the distal attachment first, each fixed
    in its segment's frame (origin at the proximal end, axes parallel to the world's at ``q = 0``)
    at ``(1 − r) d``. With the tree at ``q = 0`` every function of `jaxbio.muscles.geometry`
    applies (lengths, moment arms about the joint axes, `muscle_wrenches`)."""
    root, ends = _pose(arm, root, ends)
    _check_muscles(arm, muscles)
    return _muscle_paths_jit(arm, root, ends, muscles)


@eqx.filter_jit
def _muscle_paths_jit(arm, root, ends, muscles):
    starts, ends = _starts(arm, root, ends)
    return _muscle_paths(muscles, starts, ends)


def _muscle_paths(muscles, starts, ends) -> MusclePaths:
    """`muscle_paths` from the segment starts and ends ``(n, 3)`` (traced poses too)."""
    kd, kp = np.asarray(muscles.distal_segments), np.asarray(muscles.proximal_segments)
    d = ends - starts
    points = jnp.stack([(1.0 - muscles.distal_ratios)[:, None] * d[kd],
                        (1.0 - muscles.proximal_ratios)[:, None] * d[kp]], axis=1)
    return MusclePaths(points=points, segments=tuple(zip(muscles.distal_segments, muscles.proximal_segments)),
                       counts=(2,) * len(muscles.names), names=muscles.names)


def _muscle_points(tree, paths):
    pts = geometry.path_points_world(paths, tree, jnp.zeros((tree.nq,), tree.origins.dtype))
    pd, pp = pts[:, 0], pts[:, 1]
    return pd, pp, unit(pp - pd, jnp.zeros_like(pd))


def muscle_points(
    arm: Arm, root: Float[ArrayLike, "3"], ends: Float[ArrayLike, "n 3"], muscles: ArmMuscles
) -> tuple[Float[Array, "m 3"], Float[Array, "m 3"], Float[Array, "m 3"]]:
    """Attachment points and directions of the muscles (seed 001 §3.2).

    Returns ``distal_points`` ``(m, 3)`` m, ``proximal_points`` ``(m, 3)`` m (world) and Du's unit
    vectors ``u`` ``(m, 3)`` from the distal to the proximal attachment (the direction of the pull
    on the distal segment). A muscle of zero length gets ``u = 0``.
    """
    root, ends = _pose(arm, root, ends)
    _check_muscles(arm, muscles)
    return _muscle_points_jit(arm, root, ends, muscles)


@eqx.filter_jit
def _muscle_points_jit(arm, root, ends, muscles):
    starts, ends = _starts(arm, root, ends)
    return _muscle_points(_tree(arm, starts, ends), _muscle_paths(muscles, starts, ends))


def _check_joint(arm, joint):
    if isinstance(joint, bool) or not isinstance(joint, (int, np.integer)) or not 0 <= joint < arm.n:
        raise ValueError(f"joint must be a static segment index in [0, {arm.n}) of {arm.names}, got {joint!r}")
    return int(joint)


def _moment_arms(tree, paths, joint):
    """``(m, 3)`` m: the vector moment arms about the proximal joint of segment ``joint``, from the
    core's scalar moment arms ``−∂l/∂q`` with that joint's axis set to world x, y and z in turn."""
    q0 = jnp.zeros((tree.nq,), tree.origins.dtype)

    def about(axis):
        turned = eqx.tree_at(lambda t: t.axes, tree, jnp.broadcast_to(axis, tree.axes.shape))
        return geometry.moment_arms(paths, turned, q0)[:, joint]

    return jax.vmap(about, out_axes=1)(jnp.eye(3, dtype=q0.dtype))


def muscle_moment_arms(
    arm: Arm, root: Float[ArrayLike, "3"], ends: Float[ArrayLike, "n 3"], muscles: ArmMuscles, joint: int
) -> Float[Array, "m 3"]:
    """Moment about the proximal joint centre of segment ``joint`` per newton of tension (m, world):
    ``((1 − r_d) d_{n_d}) × u`` (seed 001 eq. 4 as a vector) for each muscle that spans that joint,
    zero for the others. The lever runs from the joint centre to the distal attachment (it is
    ``(1 − r_d) d`` when the muscle's distal segment is ``joint`` itself). Computed by the core
    (`jaxbio.muscles.geometry.moment_arms` about the world axes, on `muscle_paths`)."""
    root, ends = _pose(arm, root, ends)
    _check_muscles(arm, muscles)
    return _moment_arms_jit(arm, root, ends, muscles, _check_joint(arm, joint))


@eqx.filter_jit
def _moment_arms_jit(arm, root, ends, muscles, joint):
    starts, ends = _starts(arm, root, ends)
    return _moment_arms(_tree(arm, starts, ends), _muscle_paths(muscles, starts, ends), joint)


_TENSION_CHECKS = ((lambda xp, t: ~xp.all(xp.isfinite(t)), "tensions contain NaN or inf"),)


def muscle_wrenches(
    arm: Arm,
    root: Float[ArrayLike, "3"],
    ends: Float[ArrayLike, "n 3"],
    muscles: ArmMuscles,
    tensions: Float[ArrayLike, " m"],
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """External wrenches of muscle tensions (seed 001 eq. 5, as pairs of forces, §3.1).

    Muscle ``j`` with tension ``μ_j`` (N; positive pulls) applies ``μ_j u_j`` to its distal segment
    at the distal attachment and ``−μ_j u_j`` to its proximal segment at the proximal attachment.
    Du's eq. 5 keeps only the distal half (``[u μ ; (1 − r_d) d × u μ]`` at joint ``n_d + 1``);
    the pair is what he announces in §3.1 ("pairs of forces originating from the endpoints of
    muscles") and leaves the joints proximal to the muscle in equilibrium.

    Returns ``external = (forces (n, 3) N, moments (n, 3) N·m)``, world frame, moments about each
    segment's proximal joint centre (add it to the weights' wrenches). Computed by the core
    (`jaxbio.muscles.geometry.muscle_wrenches` on `muscle_paths`).
    """
    root, ends = _pose(arm, root, ends)
    _check_muscles(arm, muscles)
    tensions = as_float(tensions)
    if tensions.shape != (len(muscles.names),):
        raise ValueError(f"tensions must have shape ({len(muscles.names)},), got {tensions.shape}")
    check_eagerly(_TENSION_CHECKS, tensions)
    return _muscle_wrenches_jit(arm, root, ends, muscles, tensions)


@eqx.filter_jit
def _muscle_wrenches_jit(arm, root, ends, muscles, tensions):
    starts, ends = _starts(arm, root, ends)
    tensions = enforce(tensions, _TENSION_CHECKS, tensions)
    return geometry.muscle_wrenches(_muscle_paths(muscles, starts, ends), _tree(arm, starts, ends),
                                    jnp.zeros((arm.n,), ends.dtype), tensions)


class MuscleTensions(eqx.Module):
    """Result of `muscle_tensions`.

    - ``tensions`` ``(m,)`` N, ≥ 0 (at most one non-zero).
    - ``axis`` ``(3,)`` unit, world: the direction whose moment component is cancelled (the normal
      of the plane of the two segments meeting at the joint, Du's ``u₂ × u₁`` direction).
    - ``removable`` ``(3,)`` N·m: the part of the joint moment along ``axis`` (Du's ``R₂`` of
      eq. 4, in jaxbio's sign convention).
    - ``residual`` ``(3,)`` N·m: the joint moment left with the muscles pulling (world frame).
    - ``feasible`` bool: false when no muscle can produce the needed moment (all on the wrong
      side, or zero moment arms, e.g. the arm fully stretched); the tensions are then zero, never
      NaN.
    """

    tensions: Float[Array, " m"]
    axis: Float[Array, "3"]
    removable: Float[Array, "3"]
    residual: Float[Array, "3"]
    feasible: Bool[Array, ""]


_MOMENT_CHECKS = ((lambda xp, M: ~xp.all(xp.isfinite(M)), "joint_moment contains NaN or inf"),)
_AXIS_CHECKS = ((lambda xp, a: ~(xp.all(xp.isfinite(a)) & (xp.linalg.norm(a, axis=-1) > 0)),
                 "axis must be a finite non-zero vector"),)


def muscle_tensions(
    arm: Arm,
    root: Float[ArrayLike, "3"],
    ends: Float[ArrayLike, "n 3"],
    muscles: ArmMuscles,
    joint_moment: Float[ArrayLike, "3"],
    joint: int = 1,
    *,
    axis: Optional[Float[ArrayLike, "3"]] = None,
) -> MuscleTensions:
    """Tensions that cancel the moment at a joint normal to the arm plane (seed 001 §3.2, eq. 4).

    ``joint_moment`` ``M`` is the moment that segment ``joint`` receives from its parent about its
    proximal joint centre without muscles (``segment_wrenches(...)[1][joint]``, world frame, N·m).
    With tensions ``μ ≥ 0`` on the muscles that span the joint it becomes ``M − Σ μ_j a_j``
    (``a_j`` from `muscle_moment_arms`). Du projects the moment on the normal ``n`` of the plane of
    the muscles (his ``R₂``) and lets only the muscle that can cancel it pull, with
    ``μ = |R₂| / |(1 − r_d) d × u|``, the other one zero "to minimize added force". In general
    form: minimise ``Σ μ`` subject to ``Σ μ_j (n·a_j) = n·M`` and ``μ ≥ 0``, solved exactly by the
    single muscle with the largest moment arm on the needed side (for Du's biceps and triceps,
    his rule).

    Args:
        arm, root, ends: model and pose (see `arm_tree`).
        muscles: the muscles (Du's ``muscends``); only those spanning the joint are used.
        joint_moment: ``(3,)`` N·m, world frame, as above.
        joint: static index of the segment whose proximal joint is balanced (1: the elbow).
        axis: optional ``(3,)`` direction to cancel; default the normal of the plane of segment
            ``joint`` and its parent (for a chain arm, the plane of Du's coplanar muscles).

    Returns:
        `MuscleTensions` (tensions in N). Piecewise differentiable (the active muscle switches
        where the needed moment changes sign).
    """
    root, ends = _pose(arm, root, ends)
    _check_muscles(arm, muscles)
    joint = _check_joint(arm, joint)
    M = _vec3(joint_moment, "joint_moment")
    check_eagerly(_MOMENT_CHECKS, M)
    if axis is not None:
        axis = _vec3(axis, "axis")
        check_eagerly(_AXIS_CHECKS, axis)
    return _muscle_tensions_jit(arm, root, ends, muscles, M, joint, axis)


@eqx.filter_jit
def _muscle_tensions_jit(arm, root, ends, muscles, M, joint, axis):
    starts, ends = _starts(arm, root, ends)
    M = enforce(M, _MOMENT_CHECKS, M)
    if axis is not None:
        axis = enforce(axis, _AXIS_CHECKS, axis)
    return _muscle_tensions(arm, starts, ends, _tree(arm, starts, ends), _muscle_paths(muscles, starts, ends),
                            M, joint, axis)


def _muscle_tensions(arm, starts, ends, tree, paths, M, joint, axis):
    a = _moment_arms(tree, paths, joint)  # (m, 3) m
    dt = ends.dtype
    if axis is None:
        p = arm.parents[joint]
        d_j = ends[joint] - starts[joint]
        # a root segment has no parent segment, hence no plane: the fallback below
        d_p = ends[p] - starts[p] if p >= 0 else jnp.zeros_like(d_j)
        normal = cross(d_p, d_j)
        # fallback (straight arm, no plane): the direction of the largest muscle moment arm
        big = a[jnp.argmax(norm(a))]
        fallback = unit(big, _least_aligned_axis(unit(d_j, jnp.asarray([1.0, 0.0, 0.0], dt))))
        no_plane = norm(normal) <= 1e-12 * norm(d_p) * norm(d_j)
        n = unit(normal, fallback, tiny=1e-12 * norm(d_p) * norm(d_j))
    else:
        no_plane = jnp.asarray(False)
        n = unit(axis, jnp.asarray([0.0, 0.0, 1.0], dt))
    R = dot(n, M)  # needed moment along n (jaxbio sign: the reaction on the segment)
    b = dot(a, n[None, :])  # (m,) moment arm of each muscle along n, m
    s = jnp.where(R >= 0, 1.0, -1.0)
    score = s * b
    k = jnp.argmax(score)
    best = score[k]
    lever_scale = norm(ends[joint] - starts[joint])  # m
    can = best > 1e-12 * lever_scale
    feasible = (R == 0) | can
    # no arm plane and no moment arm at all (arm straight): only a zero moment is "cancelled"
    degenerate = no_plane & (jnp.max(norm(a)) <= 1e-12 * lever_scale)
    feasible = jnp.where(degenerate, ~jnp.any(M != 0), feasible)
    mu_k = jnp.where(can, jnp.abs(R) / jnp.where(can, best, 1.0), 0.0)
    tensions = jnp.where(jnp.arange(b.shape[0]) == k, mu_k, 0.0)
    residual = M - jnp.sum(tensions[:, None] * a, axis=0)
    return MuscleTensions(tensions=tensions, axis=n, removable=R * n, residual=residual, feasible=feasible)


class ArmStatics(eqx.Module):
    """Result of `arm_statics` (world frame; moments about each segment's proximal joint centre).

    - ``forces``, ``moments`` ``(n, 3)`` N, N·m: joint wrenches with the weights only (§3.1, eq. 3).
    - ``muscles``: the `MuscleTensions` solve at the chosen joint (§3.2), or None.
    - ``muscle_forces``, ``muscle_moments`` ``(n, 3)``: joint wrenches with weights and muscle
      tensions (the "redo (3)" step of §3.2); equal to the above without muscles.
    """

    forces: Float[Array, "n 3"]
    moments: Float[Array, "n 3"]
    muscles: Optional[MuscleTensions]
    muscle_forces: Float[Array, "n 3"]
    muscle_moments: Float[Array, "n 3"]


def arm_statics(
    arm: Arm,
    root: Float[ArrayLike, "3"],
    ends: Float[ArrayLike, "n 3"],
    weights: Weights,
    muscles: Optional[ArmMuscles] = None,
    joint: int = 1,
) -> ArmStatics:
    """Du's static arm (seed 001 §3.1–3.3) with jaxbio's wrench recursion.

    Builds the tree (`arm_tree`), applies the weights as ``external`` wrenches and runs
    `jaxbio.segment_wrenches` at rest (``q = q̇ = q̈ = 0``: only gravity and the external wrenches
    act; the tree is processed by hierarchy level, deepest first, as in §3.3.2). With ``muscles``,
    solves their tensions at ``joint`` (`muscle_tensions`) and adds the muscle wrenches
    (`muscle_wrenches`; the recursion is affine in them at rest, so it runs once, batched over the
    weights alone and each muscle at 1 N). One compiled program; jit, vmap and grad work.
    """
    root, ends = _pose(arm, root, ends)
    _check_weights(arm, weights)
    if muscles is not None:
        _check_muscles(arm, muscles)
    return _arm_statics(arm, root, ends, weights, muscles, _check_joint(arm, joint))


@eqx.filter_jit
def _arm_statics(arm, root, ends, weights, muscles, joint):
    starts, ends = _starts(arm, root, ends)
    tree = _tree(arm, starts, ends)
    ext = _weight_wrenches(arm, tree, starts, ends, weights)
    z = jnp.zeros((arm.n,), ends.dtype)
    if muscles is None:
        forces, moments = segment_wrenches(tree, z, z, z, ext)
        return ArmStatics(forces, moments, None, forces, moments)
    # At rest the recursion is affine in the external wrenches, so one batched pass gives the
    # wrenches with the weights (batch 0) and with each muscle added at 1 N (batch 1 + j); the
    # tensions then combine them exactly — the same numbers as a second pass with the muscle
    # wrenches added (seed 001 §3.2, "redo (3)"), one recursion to compile instead of two.
    m = len(muscles.names)
    paths = _muscle_paths(muscles, starts, ends)
    unit_f, unit_m = jax.vmap(lambda t: geometry.muscle_wrenches(paths, tree, z, t))(jnp.eye(m, dtype=ends.dtype))
    batch_f = jnp.concatenate([ext[0][None], ext[0][None] + unit_f])
    batch_m = jnp.concatenate([ext[1][None], ext[1][None] + unit_m])
    fb, mb = jax.vmap(lambda f, mo: segment_wrenches(tree, z, z, z, (f, mo)))(batch_f, batch_m)
    forces, moments = fb[0], mb[0]
    sol = _muscle_tensions(arm, starts, ends, tree, paths, moments[joint], joint, None)
    mu = sol.tensions[:, None, None]
    f2 = forces + jnp.sum(mu * (fb[1:] - forces), axis=0)
    m2 = moments + jnp.sum(mu * (mb[1:] - moments), axis=0)
    return ArmStatics(forces, moments, sol, f2, m2)


# ---------------------------------------------------------------------------------------------
# inverse kinematics (seed 001 §3.1, §3.3.1)
# ---------------------------------------------------------------------------------------------
class ElbowCase:
    """Case codes of `ElbowSolution.case` (int32). The elbow locus, the intersection of the sphere
    of radius ``l₁`` about the shoulder with the sphere of radius ``l₂`` about the wrist, is empty,
    a point or a circle (seed 001 §3.3.1, Figs. 3.3.3–3.3.5); distances are compared with the
    tolerance ``rtol · (l₁ + l₂)``.

    - ``OUT_OF_REACH`` (0): ``|W − S| > l₁ + l₂`` — no solution.
    - ``TOO_CLOSE`` (1): ``|W − S| < |l₁ − l₂|`` — no solution.
    - ``STRETCHED`` (2): ``|W − S| = l₁ + l₂`` — a single point, the arm straight.
    - ``FOLDED`` (3): ``|W − S| = |l₁ − l₂| > 0`` — a single point, the arm folded back.
    - ``CIRCLE`` (4): a circle; the elbow is its unique point of least wrist bending (Fig. 3.3.5).
    - ``CIRCLE_AXIAL`` (5): a circle whose points all bend the wrist equally (the hand's long axis
      along the circle's axis, Fig. 3.3.4); Du's rule: the forearm coplanar with the hand's x and z
      axes, bent forwards (the hand turned towards ``+hand_z``).
    - ``SPHERE`` (6): the wrist on the shoulder with ``l₁ = l₂``: the locus is a sphere; the elbow
      puts the forearm along the hand (zero bending).

    ``VALID`` lists the codes that are solutions, ``NAMES`` their descriptions.
    """

    OUT_OF_REACH = 0
    TOO_CLOSE = 1
    STRETCHED = 2
    FOLDED = 3
    CIRCLE = 4
    CIRCLE_AXIAL = 5
    SPHERE = 6
    VALID = (2, 3, 4, 5, 6)
    NAMES = ("out of reach", "too close", "stretched", "folded", "circle", "circle (axial hand)", "sphere")


class ElbowSolution(eqx.Module):
    """Result of `elbow_position` / `elbow_at_angle` (world frame, m).

    - ``elbow`` ``(3,)``: the elbow. When ``valid`` is false it is a finite placeholder (the point
      at ``l₁`` from the shoulder on the shoulder–wrist line, the closest the arm gets), not a
      solution.
    - ``valid`` bool: a solution exists (``case`` in `ElbowCase.VALID`).
    - ``case`` int32: an `ElbowCase` code.
    - ``center`` ``(3,)``, ``radius`` (m), ``axis`` ``(3,)`` unit (shoulder → wrist): the circle of
      possible elbows (radius 0 for single points and no-solution cases).
    """

    elbow: Float[Array, "3"]
    valid: Bool[Array, ""]
    case: Int[Array, ""]
    center: Float[Array, "3"]
    radius: Float[Array, ""]
    axis: Float[Array, "3"]


_IK_CHECKS = (
    (lambda xp, S, W, l1, l2: ~((l1 > 0) & (l2 > 0) & xp.isfinite(l1) & xp.isfinite(l2)),
     "upper_arm_length and forearm_length must be positive and finite (m)"),
    (lambda xp, S, W, l1, l2: ~(xp.all(xp.isfinite(S)) & xp.all(xp.isfinite(W))),
     "shoulder and wrist (hand) positions must be finite (no NaN/inf)"),
)
_HX_CHECKS = ((lambda xp, hx: ~(xp.all(xp.isfinite(hx)) & (xp.linalg.norm(hx, axis=-1) > 0)),
               "hand_x must be a finite non-zero vector"),)


def _hz_bad(xp, hx, hz):
    hxu = hx / xp.maximum(xp.linalg.norm(hx, axis=-1), 1e-300)
    perp = hz - xp.sum(hz * hxu) * hxu
    return ~(xp.all(xp.isfinite(hz)) & (xp.linalg.norm(perp, axis=-1) > 1e-6 * xp.linalg.norm(hz, axis=-1)))


_HZ_CHECKS = ((_hz_bad, "hand_z must be finite, non-zero and not parallel to hand_x"),)
_THETA_CHECKS = ((lambda xp, t: ~xp.isfinite(t), "theta must be finite"),)
_L3_CHECKS = ((lambda xp, l3: ~((l3 > 0) & xp.isfinite(l3)), "hand_length must be positive and finite (m)"),)
_GRIP_CHECKS = ((lambda xp, g, r: ~(xp.all(xp.isfinite(g)) & xp.isfinite(r)), "grip and grip_ratio must be finite"),)


def _ik_inputs(shoulder, wrist, l1, l2):
    S = _vec3(shoulder, "shoulder")
    W = _vec3(wrist, "wrist")
    l1 = _scalar(l1, "upper_arm_length")
    l2 = _scalar(l2, "forearm_length")
    check_eagerly(_IK_CHECKS, S, W, l1, l2)
    return S, W, l1, l2


def _circle(S, W, l1, l2, rtol):
    """Geometry of the two spheres: ``(case before the axial split, axis n, centre, radius)``."""
    v = W - S
    d = norm(v)
    tol = rtol * (l1 + l2)
    at_shoulder = d <= tol
    n = unit(v, jnp.asarray([0.0, 0.0, 1.0], v.dtype))
    dd = jnp.where(at_shoulder, jnp.ones_like(d), d)
    a = jnp.clip((dd * dd + l1 * l1 - l2 * l2) / (2.0 * dd), -l1, l1)  # shoulder → centre, along n
    rho = safe_sqrt(l1 * l1 - a * a)
    diff = jnp.abs(l1 - l2)
    C = S + a * n
    case = jnp.select(
        [at_shoulder & (diff <= tol), at_shoulder, d > l1 + l2 + tol, d < diff - tol,
         jnp.abs(d - (l1 + l2)) <= tol, jnp.abs(d - diff) <= tol],
        [ElbowCase.SPHERE, ElbowCase.TOO_CLOSE, ElbowCase.OUT_OF_REACH, ElbowCase.TOO_CLOSE,
         ElbowCase.STRETCHED, ElbowCase.FOLDED],
        ElbowCase.CIRCLE,
    ).astype(jnp.int32)
    rho = jnp.where(case == ElbowCase.CIRCLE, rho, 0.0)
    return case, n, C, rho


def _lowest_direction(n, dtype):
    """Unit vector ⊥ ``n`` pointing most downwards (−z); for a vertical ``n``, most towards −x
    (seed 001 §3.1: ``θ_input = 0`` is the elbow of minimal z, minimal x the secondary rule)."""
    down = jnp.asarray([0.0, 0.0, -1.0], dtype)
    back = jnp.asarray([-1.0, 0.0, 0.0], dtype)
    dp = down - dot(down, n) * n
    bp = back - dot(back, n) * n
    vertical = norm(dp) <= 1e-9
    return unit(jnp.where(vertical, bp, dp), jnp.asarray([0.0, 1.0, 0.0], dtype))


def _finish(elbow, case, C, rho, n, check):
    valid = case >= ElbowCase.STRETCHED
    if check:
        elbow = eqx.error_if(
            elbow, ~valid, "no elbow position: the wrist is out of reach of the arm or too close to the shoulder")
    return ElbowSolution(elbow=elbow, valid=valid, case=case, center=C, radius=rho, axis=n)


def _elbow_core(S, W, l1, l2, hx, hz, rtol, check):
    W = enforce(W, _IK_CHECKS, S, W, l1, l2)
    hx = enforce(hx, _HX_CHECKS, hx)
    if hz is not None:
        hz = enforce(hz, _HZ_CHECKS, hx, hz)
    case, n, C, rho = _circle(S, W, l1, l2, rtol)
    h = unit(hx, n)
    hp = h - dot(h, n) * n  # the hand axis projected on the circle's plane
    axial = norm(hp) <= rtol
    e_min = -unit(hp, jnp.zeros_like(hp))  # −ĥ⊥: the point of least bending (Fig. 3.3.5)
    if hz is None:
        e_ax = _lowest_direction(n, W.dtype)  # no palm direction: the lowest point (§3.1 rule)
    else:
        zp = unit(hz - dot(hz, n) * n, _lowest_direction(n, W.dtype))
        s = jnp.where(dot(h, W - C) >= 0, 1.0, -1.0)  # forward bend: towards +hand_z (Fig. 3.3.4)
        e_ax = s * zp
    case = jnp.where((case == ElbowCase.CIRCLE) & axial, ElbowCase.CIRCLE_AXIAL, case).astype(jnp.int32)
    elbow = C + rho * jnp.where(axial, e_ax, e_min)
    elbow = jnp.where(case == ElbowCase.SPHERE, W - l2 * h, elbow)
    return _finish(elbow, case, C, rho, n, check)


_elbow_jit = eqx.filter_jit(_elbow_core)


def elbow_position(
    shoulder: Float[ArrayLike, "3"],
    wrist: Float[ArrayLike, "3"],
    upper_arm_length: Float[ArrayLike, ""],
    forearm_length: Float[ArrayLike, ""],
    hand_x: Float[ArrayLike, "3"],
    hand_z: Optional[Float[ArrayLike, "3"]] = None,
    *,
    rtol: Optional[float] = None,
    check: bool = False,
) -> ElbowSolution:
    """The elbow that bends the wrist least (seed 001 §3.3.1, Figs. 3.3.3–3.3.5).

    The elbow ``E`` lies on the circle ``|E − S| = l₁``, ``|W − E| = l₂`` (centre on the
    shoulder–wrist line). Du's wrist bending is the angle between the forearm ``W − E`` and the
    hand's long axis ``hand_x`` (`wrist_bending`); on the circle it is least at ``E = C − ρ ĥ⊥``
    (``ĥ⊥`` the hand axis projected on the circle's plane): Du's "point on the circle closest to
    the intersection of the hand line with the plane" whenever that intersection lies behind the
    wrist (where it lies in front, his construction would give the most bent point; the objective
    is followed). If the hand axis is along the circle's axis every point bends equally
    (`ElbowCase.CIRCLE_AXIAL`) and Du's rule applies: the forearm coplanar with the hand's x and z
    axes, bent forwards (the hand turned towards ``+hand_z``: pass the outward palm normal).
    Without ``hand_z`` the lowest such elbow is taken.

    Differentiable (jit, vmap, grad) where the solution is unique (`ElbowCase.CIRCLE`);
    no-solution cases return ``valid = False`` and a finite placeholder, never NaN.

    Args:
        shoulder: ``(3,)`` m, world (Du: the origin).
        wrist: ``(3,)`` m, world (Du's ``D₂``; from a grip point with `hand_points`).
        upper_arm_length, forearm_length: m, scalars ``l₁``, ``l₂`` > 0.
        hand_x: ``(3,)`` the hand's long axis (wrist → fingers), any non-zero length.
        hand_z: optional ``(3,)`` the hand's z axis (outward palm normal), not parallel to hand_x.
        rtol: tolerance of the single-point and axial cases, relative to ``l₁ + l₂`` (and to 1 for
            the hand direction); default ``sqrt(eps)`` of the dtype.
        check: static; if true, a no-solution case raises at run time (`equinox.error_if`).

    Returns:
        `ElbowSolution`. Raises `ValueError` (before tracing; an equinox run-time error under jit)
        for non-positive lengths, non-finite positions, a zero ``hand_x`` or a ``hand_z`` parallel
        to it.
    """
    S, W, l1, l2 = _ik_inputs(shoulder, wrist, upper_arm_length, forearm_length)
    hx = _vec3(hand_x, "hand_x")
    check_eagerly(_HX_CHECKS, hx)
    hz = None
    if hand_z is not None:
        hz = _vec3(hand_z, "hand_z")
        check_eagerly(_HZ_CHECKS, hx, hz)
    dt = jnp.result_type(S, W, l1, l2, hx)
    cast = lambda x: None if x is None else x.astype(dt)  # noqa: E731
    return _elbow_jit(cast(S), cast(W), cast(l1), cast(l2), cast(hx), cast(hz), _rtol(dt, rtol), bool(check))


@eqx.filter_jit
def _elbow_at_angle(S, W, l1, l2, theta, rtol, check):
    W = enforce(W, _IK_CHECKS, S, W, l1, l2)
    theta = enforce(theta, _THETA_CHECKS, theta)
    case, n, C, rho = _circle(S, W, l1, l2, rtol)
    e1 = _lowest_direction(n, W.dtype)
    e2 = cross(n, e1)
    elbow = C + rho * (jnp.cos(theta) * e1 + jnp.sin(theta) * e2)
    elbow = jnp.where(case == ElbowCase.SPHERE, S + l1 * e1, elbow)
    return _finish(elbow, case, C, rho, n, check)


def elbow_at_angle(
    shoulder: Float[ArrayLike, "3"],
    hand: Float[ArrayLike, "3"],
    upper_arm_length: Float[ArrayLike, ""],
    forearm_length: Float[ArrayLike, ""],
    theta: Float[ArrayLike, ""] = 0.0,
    *,
    rtol: Optional[float] = None,
    check: bool = False,
) -> ElbowSolution:
    """The elbow of Du's two-segment arm at the rotation ``θ_input`` (seed 001 §3.1).

    The elbow turns by ``theta`` (rad, right-handed about the shoulder → hand axis ``D₃D₁``) on its
    circle, ``theta = 0`` being the elbow of minimal z (for a vertical arm, of minimal x). The law
    of cosines of §3.1 (``cos θ = (|D₁|² − l₁² − l₂²)/(2 l₁ l₂)``) is implicit in the circle's
    centre and radius. Cases, tolerance and errors as `elbow_position`; differentiable in the
    circle case.

    Args:
        shoulder, hand: ``(3,)`` m, world (Du's ``D₃`` and ``D₁``; the forearm ends at the hand).
        upper_arm_length, forearm_length: m.
        theta: rad, scalar.
    """
    S, W, l1, l2 = _ik_inputs(shoulder, hand, upper_arm_length, forearm_length)
    theta = _scalar(theta, "theta")
    check_eagerly(_THETA_CHECKS, theta)
    dt = jnp.result_type(S, W, l1, l2, theta)
    return _elbow_at_angle(S.astype(dt), W.astype(dt), l1.astype(dt), l2.astype(dt), theta.astype(dt),
                           _rtol(dt, rtol), bool(check))


@jax.jit
def wrist_bending(
    elbow: Float[ArrayLike, "3"], wrist: Float[ArrayLike, "3"], hand_x: Float[ArrayLike, "3"]
) -> Float[Array, ""]:
    """Du's wrist bending (seed 001 §3.3.1): the angle (rad, in ``[0, π]``) of the shorter arc
    between the forearm direction ``wrist − elbow`` and the hand's long axis ``hand_x``
    (``atan2(|f × h|, f · h)``, finite gradients)."""
    f = jnp.asarray(wrist) - jnp.asarray(elbow)
    h = jnp.asarray(hand_x)
    return jnp.arctan2(norm(cross(f, h)), dot(f, h))


def _hand_core(g, hx, l3, ratio):
    g = enforce(g, _GRIP_CHECKS, g, ratio)
    hx = enforce(hx, _HX_CHECKS, hx)
    l3 = enforce(l3, _L3_CHECKS, l3)
    h = unit(hx, jnp.zeros_like(hx))
    return g - ratio * l3 * h, g + (1.0 - ratio) * l3 * h


_hand_jit = eqx.filter_jit(_hand_core)


def _hand_inputs(grip, hand_x, hand_length, grip_ratio):
    g = _vec3(grip, "grip")
    hx = _vec3(hand_x, "hand_x")
    l3 = _scalar(hand_length, "hand_length")
    r = _scalar(grip_ratio, "grip_ratio")
    check_eagerly(_GRIP_CHECKS, g, r)
    check_eagerly(_HX_CHECKS, hx)
    check_eagerly(_L3_CHECKS, l3)
    return g, hx, l3, r


def hand_points(
    grip: Float[ArrayLike, "3"],
    hand_x: Float[ArrayLike, "3"],
    hand_length: Float[ArrayLike, ""],
    grip_ratio: Float[ArrayLike, ""] = 0.75,
) -> tuple[Float[Array, "3"], Float[Array, "3"]]:
    """Wrist and hand end from the held object's position (seed 001 §3.3.1):
    ``D₂ = grip − w₂ l₃ ĥ_x``, ``D₃ = grip + (1 − w₂) l₃ ĥ_x`` (m, world; Du's ``w₂ = 0.75``)."""
    return _hand_jit(*_hand_inputs(grip, hand_x, hand_length, grip_ratio))


def hand_arm_pose(
    arm: Arm,
    grip: Float[ArrayLike, "3"],
    hand_x: Float[ArrayLike, "3"],
    hand_z: Optional[Float[ArrayLike, "3"]] = None,
    shoulder: Float[ArrayLike, "3"] = (0.0, 0.0, 0.0),
    grip_ratio: Float[ArrayLike, ""] = 0.75,
    *,
    rtol: Optional[float] = None,
    check: bool = False,
) -> tuple[Float[Array, "3 3"], ElbowSolution]:
    """Pose of Du's arm with a hand (seed 001 §3.3.1) from the grip point and the hand's axes.

    ``arm`` must be the chain upper arm → forearm → hand (`Arm.de_leva(hand=True)`). The wrist and
    hand end follow from `hand_points`, the elbow from `elbow_position`. Returns ``ends``
    ``(3, 3)`` m (elbow, wrist, hand end; ``root = shoulder``) and the `ElbowSolution` (check
    ``valid``: otherwise the elbow is a placeholder).
    """
    if arm.n != 3 or arm.parents != (-1, 0, 1):
        raise ValueError("hand_arm_pose needs the chain upper arm → forearm → hand (Arm.de_leva(hand=True))")
    g, hx, l3, r = _hand_inputs(grip, hand_x, arm.lengths[2], grip_ratio)
    S = _vec3(shoulder, "shoulder")
    hz = None
    if hand_z is not None:
        hz = _vec3(hand_z, "hand_z")
        check_eagerly(_HZ_CHECKS, hx, hz)
    dt = jnp.result_type(g, hx, arm.lengths, S)
    return _hand_arm_pose(arm, S.astype(dt), g.astype(dt), hx.astype(dt), None if hz is None else hz.astype(dt),
                          r.astype(dt), _rtol(dt, rtol), bool(check))


@eqx.filter_jit
def _hand_arm_pose(arm, S, g, hx, hz, r, rtol, check):
    wrist, tip = _hand_core(g, hx, arm.lengths[2], r)
    sol = _elbow_core(S, wrist, arm.lengths[0], arm.lengths[1], hx, hz, rtol, check)
    return jnp.stack([sol.elbow, wrist, tip]), sol
