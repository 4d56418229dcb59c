"""Du's arm (Du 2021, §3.1, §3.3): its parameters (`Arm`, `Weights`, `ArmMuscles`) and the map
from a pose to a `SegmentTree` (`arm_tree`). Frames, units and conventions: `jaxbio.papers.du_arm`."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio._validate import any_traced, as_float, as_shape, check_eagerly, enforce
from jaxbio.models.anthropometrics import DE_LEVA_MALE
from jaxbio.models.build import gyration_inertia
from jaxbio.spatial import norm, unit
from jaxbio.tree import SegmentTree


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
    """Segment parameters of Du's arm (Du 2021, §3.1, §3.3): one-dimensional segments in a tree.

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
    gravity: Float[Array, 3]
    names: tuple[str, ...] = eqx.field(static=True)
    parents: tuple[int, ...] = eqx.field(static=True)

    def __check_init__(self):
        n = len(self.names)
        if len(self.parents) != n:
            raise ValueError(f"Arm: names ({n}) and parents ({len(self.parents)}) must have the same length")
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"Arm: segment {self.names[i]!r} has parent {p}; it must be -1 or an earlier segment")
        for field, shape in (
            ("lengths", (n,)),
            ("masses", (n,)),
            ("com_ratios", (n,)),
            ("gyration_ratios", (n, 2)),
            ("gravity", (3,)),
        ):
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
    def de_leva(cls, hand: bool = True, body_mass: float = 73.0, *, dtype=None) -> Arm:
        """Du's arm with de Leva (1996, Table 4, males) numbers, chained shoulder → distal.

        ``hand=False``: upper arm and forearm (Du 2021, §3.1–3.2, the weight at the wrist);
        ``hand=True``: plus the hand (§3.3). ``body_mass`` kg scales the masses (lengths are de
        Leva's mean lengths: upper arm 0.2817 m, forearm 0.2689 m, hand 0.0862 m).
        """
        names = ("upper_arm", "forearm", "hand") if hand else ("upper_arm", "forearm")
        rows = np.array(
            [
                (
                    DE_LEVA_MALE[k].length_mm / 1000,
                    DE_LEVA_MALE[k].mass / 100,
                    DE_LEVA_MALE[k].com / 100,
                    DE_LEVA_MALE[k].r_transverse / 100,
                    DE_LEVA_MALE[k].r_longitudinal / 100,
                )
                for k in names
            ]
        )
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
    """Point weights held by or hung on segments (Du's ``weightsegs``, Du 2021, §3.3.1).

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
            if not (
                np.all(np.isfinite(np.asarray(self.ratios)))
                and np.all(np.isfinite(np.asarray(self.masses)))
                and np.all(np.asarray(self.masses) >= 0)
            ):
                raise ValueError("Weights: ratios must be finite and masses finite and >= 0")


class ArmMuscles(eqx.Module):
    """Line muscles between two segments (Du's ``muscends`` array, Du 2021, §3.2).

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
                np.isfinite(np.asarray(self.proximal_ratios))
            ):
                raise ValueError("ArmMuscles: ratios must be finite")


def du_muscles(dtype=None) -> ArmMuscles:
    """Du's biceps and triceps (Du 2021, §3.2).

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
        (
            lambda xp, root, ends: ~(xp.all(xp.isfinite(root)) & xp.all(xp.isfinite(ends))),
            "arm pose: root or ends contain NaN or inf",
        ),
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


def segment_starts(arm: Arm, root: Float[ArrayLike, 3], ends: Float[ArrayLike, "n 3"]) -> Float[Array, "n 3"]:
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
    inertias = gyration_inertia(
        arm.masses, L, (arm.gyration_ratios[:, 0], arm.gyration_ratios[:, 1]), (jnp.eye(3, dtype=d.dtype) - xx, xx)
    )
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


def arm_tree(arm: Arm, root: Float[ArrayLike, 3], ends: Float[ArrayLike, "n 3"]) -> SegmentTree:
    """The `SegmentTree` of the arm in the pose ``(root, ends)``, at ``q = 0`` (Du 2021, §3.1).

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
