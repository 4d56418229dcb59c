"""Inverse kinematics of Du's arm (Du 2021, §3.1, §3.3.1): the elbow on its circle (at an angle, or
where the wrist bends least), the hand's points from the grip, the pose of the arm with a hand.
Conventions: `jaxbio.papers.du_arm`."""

from __future__ import annotations


import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxbio._validate import check_eagerly, enforce
from jaxbio.papers.du_arm._model import Arm, _least_aligned_axis, _rtol, _scalar, _vec3
from jaxbio.spatial import cross, dot, norm, safe_sqrt, unit


# ---------------------------------------------------------------------------------------------
# inverse kinematics (Du 2021, §3.1, §3.3.1)
# ---------------------------------------------------------------------------------------------
class ElbowCase:
    """Case codes of `ElbowSolution.case` (int32). The elbow locus, the intersection of the sphere
    of radius ``l₁`` about the shoulder with the sphere of radius ``l₂`` about the wrist, is empty,
    a point or a circle (Du 2021, §3.3.1, Figs. 3.3.3–3.3.5); distances are compared with the
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
    - ``CIRCLE_PARALLEL`` (7): a circle, the hand's long axis parallel to the circle's plane (the
      hand line never meets the plane, Fig. 3.3.4's second subcase: Du's construction of the
      point nearest the intersection has nothing to work on). Du's rule of the first subcase
      applies, as he says ("these two count as the same subcase"): the forearm coplanar with the
      hand's x and z axes, bent forwards (hand turned towards ``+hand_z``). This is *not* the least
      bending point (``C − ρ ĥ``, unique here). If no elbow on the circle makes the forearm
      coplanar (the palm plane too close to the circle's plane), the elbow that brings the forearm
      closest to it (least ``|f · (ĥ_x × ĥ_z)|``), forwards. Without ``hand_z`` the least-bending
      point.

    ``VALID`` lists the codes that are solutions, ``NAMES`` their descriptions.
    """

    OUT_OF_REACH = 0
    TOO_CLOSE = 1
    STRETCHED = 2
    FOLDED = 3
    CIRCLE = 4
    CIRCLE_AXIAL = 5
    SPHERE = 6
    CIRCLE_PARALLEL = 7
    VALID = (2, 3, 4, 5, 6, 7)
    NAMES = (
        "out of reach",
        "too close",
        "stretched",
        "folded",
        "circle",
        "circle (axial hand)",
        "sphere",
        "circle (hand parallel to its plane)",
    )


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

    elbow: Float[Array, 3]
    valid: Bool[Array, ""]
    case: Int[Array, ""]
    center: Float[Array, 3]
    radius: Float[Array, ""]
    axis: Float[Array, 3]


_IK_CHECKS = (
    (
        lambda xp, S, W, l1, l2: ~((l1 > 0) & (l2 > 0) & xp.isfinite(l1) & xp.isfinite(l2)),
        "upper_arm_length and forearm_length must be positive and finite (m)",
    ),
    (
        lambda xp, S, W, l1, l2: ~(xp.all(xp.isfinite(S)) & xp.all(xp.isfinite(W))),
        "shoulder and wrist (hand) positions must be finite (no NaN/inf)",
    ),
)
_HX_CHECKS = (
    (
        lambda xp, hx: ~(xp.all(xp.isfinite(hx)) & (xp.linalg.norm(hx, axis=-1) > 0)),
        "hand_x must be a finite non-zero vector",
    ),
)


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
        [
            at_shoulder & (diff <= tol),
            at_shoulder,
            d > l1 + l2 + tol,
            d < diff - tol,
            jnp.abs(d - (l1 + l2)) <= tol,
            jnp.abs(d - diff) <= tol,
        ],
        [
            ElbowCase.SPHERE,
            ElbowCase.TOO_CLOSE,
            ElbowCase.OUT_OF_REACH,
            ElbowCase.TOO_CLOSE,
            ElbowCase.STRETCHED,
            ElbowCase.FOLDED,
        ],
        ElbowCase.CIRCLE,
    ).astype(jnp.int32)
    rho = jnp.where(case == ElbowCase.CIRCLE, rho, 0.0)
    return case, n, C, rho


def _lowest_direction(n, dtype):
    """Unit vector ⊥ ``n`` pointing most downwards (−z); for a vertical ``n``, most towards −x
    (Du 2021, §3.1: ``θ_input = 0`` is the elbow of minimal z, minimal x the secondary rule)."""
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
            elbow, ~valid, "no elbow position: the wrist is out of reach of the arm or too close to the shoulder"
        )
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
    # the hand line parallel to the circle's plane (ĥ · n = 0): Du's coplanar forward rule
    parallel = (jnp.abs(dot(h, n)) <= rtol) & ~axial
    e_par = e_min if hz is None else _coplanar_forward(W, C, rho, n, h, hz)
    circle = case == ElbowCase.CIRCLE
    case = jnp.where(circle & axial, ElbowCase.CIRCLE_AXIAL, case)
    case = jnp.where(circle & parallel, ElbowCase.CIRCLE_PARALLEL, case).astype(jnp.int32)
    elbow = C + rho * jnp.where(axial, e_ax, jnp.where(parallel, e_par, e_min))
    elbow = jnp.where(case == ElbowCase.SPHERE, W - l2 * h, elbow)
    return _finish(elbow, case, C, rho, n, check)


def _coplanar_forward(W, C, rho, n, h, hz):
    """Unit ``e`` ⊥ ``n`` such that the forearm ``f = W − (C + ρ e)`` lies in the plane of ``ĥ``
    and ``hz`` (Du's rule, Du 2021, §3.3.1, first subcase), of the two solutions the one bent
    forwards: ``(ĥ − (ĥ·f̂) f̂) · hz⊥ > 0`` (the hand turned towards ``+hand_z``; ``hz⊥`` = the part
    of ``hz`` normal to ``ĥ``). With ``e = cos φ p + sin φ k`` (``p`` = ``ĥ`` projected on the
    circle's plane, ``k = n × p``) coplanarity ``f · m = 0`` (``m = ĥ × hz⊥``) reads
    ``a cos φ + β sin φ = γ``, ``a = ρ p·m``, ``β = ρ k·m``, ``γ = (W − C)·n (n·m)``, solved in closed
    form, ``φ = atan2(β, a) ± acos(γ / √(a² + β²))``; with ``|γ| > √(a² + β²)`` (no coplanar
    elbow) the ``acos`` argument is clipped: the elbow of least ``|f · m|``."""
    dt = W.dtype
    p = unit(h - dot(h, n) * n, _lowest_direction(n, dt))
    k = cross(n, p)
    zp = unit(hz - dot(hz, h) * h, _least_aligned_axis(h))  # hz ∦ hand_x is checked on input
    m = cross(h, zp)
    a, beta, gam = rho * dot(p, m), rho * dot(k, m), dot(W - C, n) * dot(n, m)
    R = jnp.sqrt(a * a + beta * beta)
    ok = R > 1e-12 * jnp.maximum(rho, 1e-300)
    phi0 = jnp.arctan2(beta, jnp.where(ok, a, 1.0))
    delta = jnp.arccos(jnp.clip(gam / jnp.where(ok, R, 1.0), -1.0, 1.0))
    delta = jnp.where(ok, delta, 0.5 * jnp.pi)  # palm plane ∥ circle plane: every elbow as far; ±k

    def pick(phi):
        e = jnp.cos(phi) * p + jnp.sin(phi) * k
        f = unit(W - (C + rho * e), h)
        return e, dot(h - dot(h, f) * f, zp)

    e1, s1 = pick(phi0 + delta)
    e2, s2 = pick(phi0 - delta)
    return jnp.where(s1 >= s2, e1, e2)


_elbow_jit = eqx.filter_jit(_elbow_core)


def elbow_position(
    shoulder: Float[ArrayLike, 3],
    wrist: Float[ArrayLike, 3],
    upper_arm_length: Float[ArrayLike, ""],
    forearm_length: Float[ArrayLike, ""],
    hand_x: Float[ArrayLike, 3],
    hand_z: Float[ArrayLike, 3] | None = None,
    *,
    rtol: float | None = None,
    check: bool = False,
) -> ElbowSolution:
    """The elbow that bends the wrist least (Du 2021, §3.3.1, Figs. 3.3.3–3.3.5).

    The elbow ``E`` lies on the circle ``|E − S| = l₁``, ``|W − E| = l₂`` (centre on the
    shoulder–wrist line). Du's wrist bending is the angle between the forearm ``W − E`` and the
    hand's long axis ``hand_x`` (`wrist_bending`); on the circle it is least at ``E = C − ρ ĥ⊥``
    (``ĥ⊥`` the hand axis projected on the circle's plane): Du's "point on the circle closest to
    the intersection of the hand line with the plane" whenever that intersection lies behind the
    wrist (where it lies in front, his construction would give the most bent point; the objective
    is followed). If the hand axis is along the circle's axis every point bends equally
    (`ElbowCase.CIRCLE_AXIAL`) and Du's rule applies: the forearm coplanar with the hand's x and z
    axes, bent forwards (the hand turned towards ``+hand_z``: pass the outward palm normal).
    Without ``hand_z`` the lowest such elbow is taken. If the hand axis is parallel to the
    circle's plane (the hand line never meets it) Du applies the same coplanar forward rule
    (`ElbowCase.CIRCLE_PARALLEL`; without ``hand_z``, the least-bending point).

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
    shoulder: Float[ArrayLike, 3],
    hand: Float[ArrayLike, 3],
    upper_arm_length: Float[ArrayLike, ""],
    forearm_length: Float[ArrayLike, ""],
    theta: Float[ArrayLike, ""] = 0.0,
    *,
    rtol: float | None = None,
    check: bool = False,
) -> ElbowSolution:
    """The elbow of Du's two-segment arm at the rotation ``θ_input`` (Du 2021, §3.1).

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
    return _elbow_at_angle(
        S.astype(dt), W.astype(dt), l1.astype(dt), l2.astype(dt), theta.astype(dt), _rtol(dt, rtol), bool(check)
    )


@jax.jit
def wrist_bending(
    elbow: Float[ArrayLike, 3], wrist: Float[ArrayLike, 3], hand_x: Float[ArrayLike, 3]
) -> Float[Array, ""]:
    """Du's wrist bending (Du 2021, §3.3.1): the angle (rad, in ``[0, π]``) of the shorter arc
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
    grip: Float[ArrayLike, 3],
    hand_x: Float[ArrayLike, 3],
    hand_length: Float[ArrayLike, ""],
    grip_ratio: Float[ArrayLike, ""] = 0.75,
) -> tuple[Float[Array, 3], Float[Array, 3]]:
    """Wrist and hand end from the held object's position (Du 2021, §3.3.1):
    ``D₂ = grip − w₂ l₃ ĥ_x``, ``D₃ = grip + (1 − w₂) l₃ ĥ_x`` (m, world; Du's ``w₂ = 0.75``)."""
    return _hand_jit(*_hand_inputs(grip, hand_x, hand_length, grip_ratio))


def hand_arm_pose(
    arm: Arm,
    grip: Float[ArrayLike, 3],
    hand_x: Float[ArrayLike, 3],
    hand_z: Float[ArrayLike, 3] | None = None,
    shoulder: Float[ArrayLike, 3] = (0.0, 0.0, 0.0),
    grip_ratio: Float[ArrayLike, ""] = 0.75,
    *,
    rtol: float | None = None,
    check: bool = False,
) -> tuple[Float[Array, "3 3"], ElbowSolution]:
    """Pose of Du's arm with a hand (Du 2021, §3.3.1) from the grip point and the hand's axes.

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
    return _hand_arm_pose(
        arm,
        S.astype(dt),
        g.astype(dt),
        hx.astype(dt),
        None if hz is None else hz.astype(dt),
        r.astype(dt),
        _rtol(dt, rtol),
        bool(check),
    )


@eqx.filter_jit
def _hand_arm_pose(arm, S, g, hx, hz, r, rtol, check):
    wrist, tip = _hand_core(g, hx, arm.lengths[2], r)
    sol = _elbow_core(S, wrist, arm.lengths[0], arm.lengths[1], hx, hz, rtol, check)
    return jnp.stack([sol.elbow, wrist, tip]), sol
