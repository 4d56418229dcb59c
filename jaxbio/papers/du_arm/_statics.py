"""Du's static arm (Du 2021, §3.1–3.3.2): weights and muscles as external wrenches built by the
core (`jaxbio.dynamics.point_loads`, `jaxbio.muscles.geometry`), the biceps/triceps tension solve
(eqs. 4–5) and the wrench recursion at rest (`arm_statics`). Conventions: `jaxbio.papers.du_arm`."""

from __future__ import annotations


import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxbio._validate import as_float, check_choice, check_eagerly, enforce
from jaxbio.dynamics.loads import point_loads
from jaxbio.dynamics import segment_wrenches
from jaxbio.muscles import geometry
from jaxbio.muscles.geometry import MusclePaths, tree_topology
from jaxbio.papers.du_arm._model import Arm, ArmMuscles, Weights, _least_aligned_axis, _pose, _starts, _tree, _vec3
from jaxbio.spatial import cross, dot, norm, unit


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
    arm: Arm, root: Float[ArrayLike, 3], ends: Float[ArrayLike, "n 3"], weights: Weights
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """Weight wrenches (Du 2021, §3.3.2): ``[m g ; (w₂ d_i) × m g]`` summed per segment.

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
    return point_loads(
        tree,
        jnp.zeros((arm.n,), ends.dtype),
        weights.segments,
        weights.ratios[:, None] * (ends[k] - starts[k]),
        weights.masses[:, None] * arm.gravity[None, :],
    )


def muscle_paths(
    arm: Arm, root: Float[ArrayLike, 3], ends: Float[ArrayLike, "n 3"], muscles: ArmMuscles
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
    return _muscle_paths(arm, muscles, starts, ends)


def _muscle_paths(arm, muscles, starts, ends) -> MusclePaths:
    """`muscle_paths` from the segment starts and ends ``(n, 3)`` (traced poses too), recording
    the arm's tree (`MusclePaths.built_for`) so that another tree is refused."""
    kd, kp = np.asarray(muscles.distal_segments), np.asarray(muscles.proximal_segments)
    d = ends - starts
    points = jnp.stack(
        [(1.0 - muscles.distal_ratios)[:, None] * d[kd], (1.0 - muscles.proximal_ratios)[:, None] * d[kp]], axis=1
    )
    return MusclePaths(
        points=points,
        segments=tuple(zip(muscles.distal_segments, muscles.proximal_segments)),
        counts=(2,) * len(muscles.names),
        names=muscles.names,
        built_for=tree_topology(_tree(arm, starts, ends)),
    )


def _muscle_points(tree, paths):
    pts = geometry.path_points_world(paths, tree, jnp.zeros((tree.nq,), tree.origins.dtype))
    pd, pp = pts[:, 0], pts[:, 1]
    return pd, pp, unit(pp - pd, jnp.zeros_like(pd))


def muscle_points(
    arm: Arm, root: Float[ArrayLike, 3], ends: Float[ArrayLike, "n 3"], muscles: ArmMuscles
) -> tuple[Float[Array, "m 3"], Float[Array, "m 3"], Float[Array, "m 3"]]:
    """Attachment points and directions of the muscles (Du 2021, §3.2).

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
    return _muscle_points(_tree(arm, starts, ends), _muscle_paths(arm, muscles, starts, ends))


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
    arm: Arm, root: Float[ArrayLike, 3], ends: Float[ArrayLike, "n 3"], muscles: ArmMuscles, joint: int
) -> Float[Array, "m 3"]:
    """Moment about the proximal joint centre of segment ``joint`` per newton of tension (m, world):
    ``((1 − r_d) d_{n_d}) × u`` (Du 2021, eq. 4 as a vector) for each muscle that spans that joint,
    zero for the others. The lever runs from the joint centre to the distal attachment (it is
    ``(1 − r_d) d`` when the muscle's distal segment is ``joint`` itself). Computed by the core
    (`jaxbio.muscles.geometry.moment_arms` about the world axes, on `muscle_paths`)."""
    root, ends = _pose(arm, root, ends)
    _check_muscles(arm, muscles)
    return _moment_arms_jit(arm, root, ends, muscles, _check_joint(arm, joint))


@eqx.filter_jit
def _moment_arms_jit(arm, root, ends, muscles, joint):
    starts, ends = _starts(arm, root, ends)
    return _moment_arms(_tree(arm, starts, ends), _muscle_paths(arm, muscles, starts, ends), joint)


_TENSION_CHECKS = ((lambda xp, t: ~xp.all(xp.isfinite(t)), "tensions contain NaN or inf"),)


#: Forms of Du's muscle wrench (`muscle_wrenches`, `arm_statics`).
MUSCLE_WRENCH_FORMS = ("pair", "distal_only")


def _check_form(form):
    check_choice(form, MUSCLE_WRENCH_FORMS, "form")
    return form


def muscle_wrenches(
    arm: Arm,
    root: Float[ArrayLike, 3],
    ends: Float[ArrayLike, "n 3"],
    muscles: ArmMuscles,
    tensions: Float[ArrayLike, " m"],
    *,
    form: str = "pair",
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """External wrenches of muscle tensions (Du 2021, eq. 5, §3.1).

    Two forms (static ``form``):

    - ``"pair"`` (default): muscle ``j`` with tension ``μ_j`` (N; positive pulls) applies
      ``μ_j u_j`` to its distal segment at the distal attachment and ``−μ_j u_j`` to its proximal
      segment at the proximal attachment — the "pairs of forces originating from the endpoints of
      muscles" Du announces in §3.1. Internal to the arm: the joints proximal to the muscle stay
      in equilibrium (a muscle from the shoulder to the forearm loads the elbow, not the trunk).
      Computed by the core (`jaxbio.muscles.geometry.muscle_wrenches` on `muscle_paths`).
    - ``"distal_only"``: eq. 5 as printed,
      ``[F ; M]_m,i = Σ_{n_d(j)+1 = i} [u_j μ_j ; ((1 − r_d(j)) d_{n_d(j)}) × u_j μ_j]`` — only the
      distal half of each pair, on segment ``n_d(j)`` (Du's joint ``n_d(j) + 1`` is its proximal
      joint) at the distal attachment. The proximal half ``−μ_j u_j`` at the proximal attachment
      is omitted, so the muscle is an *external* pull: the joints it spans are loaded the same
      (identical elbow wrench for Du's biceps/triceps), but every joint proximal to its proximal
      attachment also carries ``μ_j u_j`` (and its moment), e.g. the shoulder force differs by the
      tension. Computed by the core (`jaxbio.dynamics.point_loads`).

    Args:
        arm, root, ends: model and pose (see `arm_tree`); ``ends`` ``(n, 3)`` m, world.
        muscles: ``m`` muscles (Du's ``muscends``).
        tensions: ``(m,)`` N.
        form: ``"pair"`` or ``"distal_only"`` (static).

    Returns:
        ``external = (forces (n, 3) N, moments (n, 3) N·m)``, world frame, moments about each
        segment's proximal joint centre (add it to the weights' wrenches).

    Raises:
        ValueError: an unknown ``form``, tensions not ``(m,)`` or not finite, bad muscles.
    """
    _check_form(form)
    root, ends = _pose(arm, root, ends)
    _check_muscles(arm, muscles)
    tensions = as_float(tensions)
    if tensions.shape != (len(muscles.names),):
        raise ValueError(f"tensions must have shape ({len(muscles.names)},), got {tensions.shape}")
    check_eagerly(_TENSION_CHECKS, tensions)
    return _muscle_wrenches_jit(arm, root, ends, muscles, tensions, form)


def _muscle_wrenches(arm, muscles, starts, ends, tree, paths, tensions, form):
    z = jnp.zeros((arm.n,), ends.dtype)
    if form == "pair":
        return geometry.muscle_wrenches(paths, tree, z, tensions)
    kd = np.asarray(muscles.distal_segments)
    _, _, u = _muscle_points(tree, paths)  # distal → proximal, Du's u_j
    lever = (1.0 - muscles.distal_ratios)[:, None] * (ends[kd] - starts[kd])  # (1 − r_d) d_{n_d}
    return point_loads(tree, z, muscles.distal_segments, lever, tensions[:, None] * u)


@eqx.filter_jit
def _muscle_wrenches_jit(arm, root, ends, muscles, tensions, form):
    starts, ends = _starts(arm, root, ends)
    tensions = enforce(tensions, _TENSION_CHECKS, tensions)
    return _muscle_wrenches(
        arm, muscles, starts, ends, _tree(arm, starts, ends), _muscle_paths(arm, muscles, starts, ends), tensions, form
    )


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
    axis: Float[Array, 3]
    removable: Float[Array, 3]
    residual: Float[Array, 3]
    feasible: Bool[Array, ""]


_MOMENT_CHECKS = ((lambda xp, M: ~xp.all(xp.isfinite(M)), "joint_moment contains NaN or inf"),)
_AXIS_CHECKS = (
    (
        lambda xp, a: ~(xp.all(xp.isfinite(a)) & (xp.linalg.norm(a, axis=-1) > 0)),
        "axis must be a finite non-zero vector",
    ),
)


def muscle_tensions(
    arm: Arm,
    root: Float[ArrayLike, 3],
    ends: Float[ArrayLike, "n 3"],
    muscles: ArmMuscles,
    joint_moment: Float[ArrayLike, 3],
    joint: int = 1,
    *,
    axis: Float[ArrayLike, 3] | None = None,
) -> MuscleTensions:
    """Tensions that cancel the moment at a joint normal to the arm plane (Du 2021, §3.2, eq. 4).

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
    return _muscle_tensions(
        arm, starts, ends, _tree(arm, starts, ends), _muscle_paths(arm, muscles, starts, ends), M, joint, axis
    )


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
    muscles: MuscleTensions | None
    muscle_forces: Float[Array, "n 3"]
    muscle_moments: Float[Array, "n 3"]


def arm_statics(
    arm: Arm,
    root: Float[ArrayLike, 3],
    ends: Float[ArrayLike, "n 3"],
    weights: Weights,
    muscles: ArmMuscles | None = None,
    joint: int = 1,
    *,
    form: str = "pair",
) -> ArmStatics:
    """Du's static arm (Du 2021, §3.1–3.3) with jaxbio's wrench recursion.

    Builds the tree (`arm_tree`), applies the weights as ``external`` wrenches and runs
    `jaxbio.segment_wrenches` at rest (``q = q̇ = q̈ = 0``: only gravity and the external wrenches
    act; the tree is processed by hierarchy level, deepest first, as in §3.3.2). With ``muscles``,
    solves their tensions at ``joint`` (`muscle_tensions`) and adds the muscle wrenches
    (`muscle_wrenches`; the recursion is affine in them at rest, so it runs once, batched over the
    weights alone and each muscle at 1 N). One compiled program; jit, vmap and grad work.

    ``form`` (static): how the muscle wrenches enter, ``"pair"`` (default, the force pairs) or
    ``"distal_only"`` (eq. 5 as printed, the distal half only; see `muscle_wrenches`). The
    tensions are the same (they depend on the joint's own moment only); the joints proximal to
    the muscles' proximal attachments differ.
    """
    _check_form(form)
    root, ends = _pose(arm, root, ends)
    _check_weights(arm, weights)
    if muscles is not None:
        _check_muscles(arm, muscles)
    return _arm_statics(arm, root, ends, weights, muscles, _check_joint(arm, joint), form)


@eqx.filter_jit
def _arm_statics(arm, root, ends, weights, muscles, joint, form="pair"):
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
    # wrenches added (Du 2021, §3.2, "redo (3)"), one recursion to compile instead of two.
    m = len(muscles.names)
    paths = _muscle_paths(arm, muscles, starts, ends)
    unit_f, unit_m = jax.vmap(lambda t: _muscle_wrenches(arm, muscles, starts, ends, tree, paths, t, form))(
        jnp.eye(m, dtype=ends.dtype)
    )
    batch_f = jnp.concatenate([ext[0][None], ext[0][None] + unit_f])
    batch_m = jnp.concatenate([ext[1][None], ext[1][None] + unit_m])
    fb, mb = jax.vmap(lambda f, mo: segment_wrenches(tree, z, z, z, (f, mo)))(batch_f, batch_m)
    forces, moments = fb[0], mb[0]
    sol = _muscle_tensions(arm, starts, ends, tree, paths, moments[joint], joint, None)
    mu = sol.tensions[:, None, None]
    f2 = forces + jnp.sum(mu * (fb[1:] - forces), axis=0)
    m2 = moments + jnp.sum(mu * (mb[1:] - moments), axis=0)
    return ArmStatics(forces, moments, sol, f2, m2)
