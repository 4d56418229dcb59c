"""OpenSim's muscle wrapping surfaces (WrapCylinder, WrapSphere, WrapEllipsoid), in JAX.

One path segment ``P → S`` (two consecutive path points, given in the wrap object's own frame)
wraps over a surface the way OpenSim 4.6 wraps it (``OpenSim/Simulation/Wrap/Wrap*.cpp``, Peter
Loan's SIMM algorithms): the same tests decide whether it wraps, the same tangent points ``r1``
(nearer ``P``) and ``r2`` (nearer ``S``) are chosen and the same length is put on the surface
between them, so the segment's length ``|P r1| + arc + |r2 S|`` is OpenSim's. `wrap_cylinder`,
`wrap_sphere` and `wrap_ellipsoid` do one segment (pure functions: jit, vmap and grad them; they
are not jitted themselves, so wrap them in `jax.jit` for speed). Whole muscle paths carry
`WrapObjects` fixed on segments with OpenSim's ``PathWrap`` ranges and methods
(`jaxbio.muscles.geometry.MusclePaths.from_points`); `wrap_paths` then runs OpenSim's
``GeometryPath::applyWrapObjects`` (which piece each object wraps, several objects in order,
repeated passes) and `jaxbio.muscles.geometry.lengths` / ``moment_arms`` include it.

The surfaces (frames: the wrap object's; the cylinder's axis is ``z``, centred):

- **cylinder** (radius, length): tangent points in the planes through ``P``/``S`` normal to the
  axis, slid along the axis into the plane through ``P``, ``S`` and an apex on the cylinder, then
  the helix between them, ``arc = √((R θ)² + Δz²)``. ``quadrant`` ("x", "-x", "y", "-y", "all")
  restricts wrapping to one side: the path may then wrap where the straight line misses the
  cylinder, and go the long way round. Without one it wraps only where the segment crosses the
  cylinder between its end caps. When a path has several wrap objects OpenSim slides the tangent
  points further until the straight pieces meet the helix within 0.1° (``single=False``; up to
  100 slides, emulated step for step — they can run far along the axis, as in OpenSim).
- **sphere** (radius): tangent points and the great circle in the plane through ``P``, ``S`` and
  the centre, ``arc = R θ``; wraps only where the segment crosses the sphere. Kept OpenSim quirk:
  a wrap the long way round (forced by a quadrant) gets the *negative* arc ``−R (2π − θ)``.
- **ellipsoid** (three semi-axes): wraps where the segment crosses the ellipsoid. A point ``c1``
  on the surface fixes the wrapping plane through ``P``, ``S``, ``c1``; ``method`` chooses it:
  ``"midpoint"`` (closest surface point to the chord's midpoint), ``"axial"`` (Frans' technique:
  where the chord crosses the coordinate plane normal to its most parallel axis), ``"hybrid"``
  (axial blended with the "fan" of closest points to 298 chord samples by how parallel the chord
  is to that axis). A quadrant mirrors ``c1`` to the active side. The tangent points from ``P``
  and ``S`` lie on the ellipse cut by that plane, and the arc is OpenSim's polyline of
  ``⌊|r1 r2| / 1 mm⌋`` chords (at most 499) along it — a planar curve, not a geodesic. Closest
  points come from OpenSim's Newton iteration (Eberly, Graphics Gems IV; 64 steps, ``|f| <
  1e-9``) with its special cases near the coordinate planes and axes, and the tangent points
  from OpenSim's Levenberg–Marquardt iteration, emulated step for step (value) — its derivative
  is that of the exact tangent point it converges to (a quadratic: the polar plane of ``P`` cut
  with the wrapping plane and the ellipsoid), since the iterate's own derivative is not defined
  across its data-dependent step counts. The iterate stops at a squared residual below 1e-8, so
  derivatives agree with finite differences of the length to ~1e-4 relative.

Where the result can differ from OpenSim's (measured in tests/muscles/test_wrapping.py):

- The Levenberg–Marquardt stop can flip on rounding differences (XLA fuses multiply–adds that
  OpenSim's build does not): then the tangent point moves by OpenSim's tolerance (≈1e-8 m in
  length), rarely (≈0.1 % of axial-method wraps) to the other of the two tangent points.
- OpenSim reuses the previous time's wrap where its algorithms give up (a sphere wrap whose
  straight line passes within 1e-5 rad of the centre; a 3-d closest-point Newton solve that has
  not converged in 64 steps): here, with no history, the current candidates / the last Newton
  iterate are used.
- The cylinder's axial slide uses the other end's axis point ``(0, 0, z)`` as the line direction
  in OpenSim, so exactly ``z = 0`` disables the slide; OpenSim's transforms practically never
  give an exact 0, here a path in the mid-plane can: the axis is used.
- Where OpenSim's ellipsoid polyline leaves the surface (its ray from the plane's axis point
  misses the ellipsoid on a long-way wrap forced by a quadrant) OpenSim returns NaN; here the
  ray's closest approach is used and the length stays finite.

Differentiability: every branch is a ``jnp.where`` over quantities that are finite for every
input (guarded divisions, square roots, arc sines and cosines, `jaxbio.spatial`'s safe norms),
so `jax.grad` is finite everywhere, also where the path does not wrap or a point lies inside the
surface. The length is continuous where a segment starts to wrap (the line just touches the
surface) but its gradient jumps there; the ellipsoid's polyline also steps (by ≈1e-7 of the arc)
when its chord count changes, and a quadrant's side switches are discontinuous, as in OpenSim.
"""

from __future__ import annotations

import math
from typing import NamedTuple
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxbio import quaternion as quat
from jaxbio._validate import _vec, model_dtype, to_device
from jaxbio.spatial import cross, dot, norm, safe_sqrt, unit

__all__ = [
    "SegmentWrap",
    "WrapObjects",
    "WrappedPaths",
    "NO_WRAP",
    "INSIDE_RADIUS",
    "WRAPPED",
    "MANDATORY_WRAP",
    "KINDS",
    "METHODS",
    "quadrant_axis_sign",
    "wrap_cylinder",
    "wrap_sphere",
    "wrap_ellipsoid",
    "wrap_paths",
]

#: OpenSim's ``WrapObject::WrapAction``: the segment misses the object.
NO_WRAP = 0
#: One end point is inside the object (no wrap).
INSIDE_RADIUS = 1
#: Wrapped, but another segment of the path may wrap with a smaller length change.
WRAPPED = 2
#: Wrapped, and the segment crosses the object: this segment must take the wrap.
MANDATORY_WRAP = 3

#: Wrap surface kinds, in the order of their integer codes.
KINDS = ("cylinder", "sphere", "ellipsoid")
#: Ellipsoid wrapping methods (OpenSim's ``PathWrap::method``), in the order of their codes.
METHODS = ("hybrid", "midpoint", "axial")

_ROUNDOFF = 2e-13  # SimmMacros ROUNDOFF_ERROR (EQUAL_WITHIN_ERROR)
_LINE_EPSILON = 1e-5  # WrapMath LINE_EPSILON
_TANGENCY = 0.1 * math.pi / 180.0  # WrapCylinder TANGENCY_THRESHOLD
_CYL_ADJUST = 100  # WrapCylinder MAX_ITERATIONS
_MU_MIN = 0.7073  # WrapEllipsoid MU_BLEND_MIN
_MU_MAX = 0.9  # MU_BLEND_MAX
_FAN = 300  # NUM_FAN_SAMPLES
_SV_BLEND = 0.3  # SV_BOUNDARY_BLEND
_NEWTON = 64  # iterations of the closest-point solves
_SEGMENT = 0.001  # WrapEllipsoid desiredSegLength (m)
_MAX_PIECES = 499


class SegmentWrap(NamedTuple):
    """One segment ``P → S`` over a wrap surface (a pytree; batch with `jax.vmap`).

    - ``length``: ``()`` m, the path length from ``P`` to ``S``: ``|P r1| + arc + |r2 S|`` where it
      wraps, ``|P S|`` where it does not.
    - ``arc``: ``()`` m, OpenSim's ``wrap_path_length``, the length on the surface from ``r1`` to
      ``r2`` (0 without a wrap; negative for the sphere's long way round, as in OpenSim).
    - ``r1``, ``r2``: ``(3,)`` m, wrap-object frame, the tangent points nearer ``P`` and ``S``
      (``P`` and ``S`` themselves without a wrap).
    - ``wraps``: ``()`` bool, the path wraps over the object.
    - ``status``: ``()`` int, OpenSim's ``WrapAction`` (`NO_WRAP`, `INSIDE_RADIUS`, `WRAPPED`,
      `MANDATORY_WRAP`).
    """

    length: Float[Array, ""]
    arc: Float[Array, ""]
    r1: Float[Array, 3]
    r2: Float[Array, 3]
    wraps: Bool[Array, ""]
    status: Int[Array, ""]


# ---- small guarded helpers ---------------------------------------------------------------------


def quadrant_axis_sign(quadrant: str) -> tuple[int, int]:
    """``(axis, sign)`` of an OpenSim ``quadrant`` string: ``"x"``/``"+x"``/``"X"`` → ``(0, 1)``,
    ``"-y"`` → ``(1, -1)``, …, ``"all"`` (or ``"Unassigned"``, OpenSim's default) → ``(0, 0)``.
    ``ValueError`` for anything else (as OpenSim refuses it)."""
    q = str(quadrant).strip()
    if q in ("all", "ALL", "All", "Unassigned", ""):
        return 0, 0
    s = q.lstrip("+-")
    if len(s) == 1 and s.lower() in "xyz" and len(q) - len(s) <= 1:
        return "xyz".index(s.lower()), -1 if q.startswith("-") else 1
    raise ValueError(f"quadrant {quadrant!r}: expected 'all', 'x', '-x', 'y', '-y', 'z' or '-z'")


def _eps(x) -> float:
    return float(jnp.finfo(jnp.result_type(x)).eps)


def _nz(v):
    """WrapMath::NormalizeOrZero: ``v/|v|``, zero where ``|v|`` is below machine epsilon."""
    return unit(v, jnp.zeros_like(v), _eps(v))


def _div(a, b):
    """``a / b`` where ``b ≠ 0``, else 0 (finite gradients on both sides)."""
    ok = b != 0
    return jnp.where(ok, a / jnp.where(ok, b, 1.0), 0.0)


def _sign(x):
    """SimmMacros DSIGN: +1 for ``x ≥ 0``, −1 otherwise."""
    return jnp.where(x >= 0, 1, -1)


def _atan2(y, x):
    """``atan2(y, x)``, 0 with a zero gradient at ``(0, 0)``."""
    ok = (x != 0) | (y != 0)
    return jnp.where(ok, jnp.arctan2(jnp.where(ok, y, 0.0), jnp.where(ok, x, 1.0)), 0.0)


def _angle(u, v):
    """The angle between ``u`` and ``v`` in ``[0, π]`` (``acos`` of the normalised dot product,
    computed as ``atan2(|u × v|, u · v)``: the same number, a finite gradient at 0 and π)."""
    return _atan2(norm(cross(u, v)), dot(u, v))


def _asin_ratio(num, den):
    """``asin(num / den)`` for ``0 ≤ num < den``, ``π/2`` beyond (finite gradients)."""
    ratio = _div(num, den)
    ok = ratio < 1.0
    return jnp.where(ok, jnp.arcsin(jnp.where(ok, ratio, 0.0)), 0.5 * jnp.pi)


def _acos(x):
    """``acos`` clipped to ``[-1, 1]`` (used for comparisons only: no gradient)."""
    return jnp.arccos(jnp.clip(jax.lax.stop_gradient(x), -1.0, 1.0))


def _component(v, axis):
    """``v[..., axis]`` for a traced integer ``axis``."""
    return jnp.sum(v * jax.nn.one_hot(axis, 3, dtype=v.dtype), axis=-1)


def _set_component(v, axis, value):
    hot = jax.nn.one_hot(axis, 3, dtype=bool)
    return jnp.where(hot, jnp.asarray(value, v.dtype)[..., None], v)


def _closest_on_line(pt, line_pt, line_dir):
    """WrapMath::GetClosestPointOnLineToPoint (``line_dir`` need not be unit; a zero direction
    gives ``line_pt``)."""
    u = _nz(line_dir)
    return line_pt + dot(pt - line_pt, u)[..., None] * u


def _intersect_lines(p1, p2, p3, p4):
    """WrapMath::IntersectLines: the points of lines ``p1p2`` and ``p3p4`` closest to each other,
    ``(pInt1, s, pInt2, t, not_parallel)`` with ``s, t`` the parameters along ``p1→p2`` and
    ``p3→p4``. Parallel lines (``|v1 × v2|² ≤ 2e-13``) give ``not_parallel = False`` (OpenSim:
    NaN parameters, so every comparison on them fails)."""
    vec1 = p2 - p1
    mag1 = norm(vec1)
    vec1 = _nz(vec1)
    vec2 = p4 - p3
    mag2 = norm(vec2)
    vec2 = _nz(vec2)
    cp = cross(vec1, vec2)
    denom = dot(cp, cp)
    ok = jnp.abs(denom) > _ROUNDOFF
    d = p3 - p1
    t = _div(_det3(d, vec1, cp), jnp.where(ok, denom, 0.0))
    s = _div(_det3(d, vec2, cp), jnp.where(ok, denom, 0.0))
    return p1 + s[..., None] * vec1, _div(s, mag1), p3 + t[..., None] * vec2, _div(t, mag2), ok


def _det3(r0, r1, r2):
    return dot(r0, cross(r1, r2))


def _rotate_z(v, angle):
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1], v[..., 2]], axis=-1)


def _finish(p, s, wraps, status, r1, r2, arc):
    """`SegmentWrap` from a kernel's raw outputs: no-wrap lanes get ``r1 = P``, ``r2 = S``."""
    r1 = jnp.where(wraps, r1, p)
    r2 = jnp.where(wraps, r2, s)
    arc = jnp.where(wraps, arc, 0.0)
    length = jnp.where(wraps, norm(r1 - p) + arc + norm(s - r2), norm(s - p))
    return SegmentWrap(length, arc, r1, r2, wraps, jnp.asarray(status, jnp.int32))


# ---- cylinder ----------------------------------------------------------------------------------


def _cylinder_tangents(p, radius):
    """The two tangent points from ``p`` to the circle of the cylinder at ``p``'s height, and
    ``p``'s distance from the axis."""
    axis_pt = p * jnp.array([0.0, 0.0, 1.0], p.dtype)
    radial = p - axis_pt
    d = norm(radial)
    vv = _nz(radial)
    d_ok = jnp.where(d > 0, d, 1.0)
    sin_theta = radius / d_ok
    along = radius * sin_theta
    pp = axis_pt + along * vv
    h = safe_sqrt(radius * radius - along * along)
    uu = jnp.stack([-vv[1], vv[0], jnp.zeros_like(vv[0])])  # dn × vv
    return pp + h * uu, pp - h * uu, axis_pt, d


def _cylinder_kernel(p1, p2, radius, length, axis, sign, single):
    """OpenSim WrapCylinder::wrapLine (+ _make_spiral_path). Returns ``(status, wraps, r1, r2,
    arc)`` in the cylinder frame."""
    status, wraps, r1, r2, long_wrap = _cylinder_wrap(p1, p2, radius, length, axis, sign)
    r1, r2, arc = _spiral(p1, p2, r1, r2, long_wrap, radius, single)
    return status, wraps, r1, r2, arc


def _cylinder_lanes(p1, p2, d, axis, sign, single):
    """`_cylinder_kernel` on ``(r, W)`` segments ``p1``, ``p2`` ``(r, W, 3)``, with ``d``
    ``(r, 3)``, ``axis``, ``sign``, ``single`` ``(r,)`` per row: the tangent points of every lane
    (`jax.vmap`), then one `_spiral` over all lanes, so that its slides stop once every lane is
    done; lanes that do not wrap do not slide. Under a per-lane `jax.vmap` the spiral's chunk
    test became a select and all 100 slides ran; the measurement that justified this layout, bit
    for bit the same result, is in benchmarks/README.md, "Static optimisation with wrapping"."""
    status, wraps, r1, r2, long_wrap = jax.vmap(
        jax.vmap(_cylinder_wrap, in_axes=(0, 0, None, None, None, None)), in_axes=(0, 0, 0, 0, 0, 0)
    )(p1, p2, d[:, 0], d[:, 1], axis, sign)
    lanes = long_wrap.shape
    r1, r2, arc = _spiral(
        p1,
        p2,
        r1,
        r2,
        long_wrap,
        jnp.broadcast_to(d[:, 0, None], lanes),
        jnp.broadcast_to(jnp.asarray(single, bool)[:, None], lanes),
        still=~wraps,
    )
    return status.astype(jnp.int32), wraps, r1, r2, arc


def _cylinder_wrap(p1, p2, radius, length, axis, sign):
    """`_cylinder_kernel` before the spiral: ``(status, wraps, r1, r2, long_wrap)``."""
    dt = p1.dtype
    r2sq = radius * radius
    dn = jnp.array([0.0, 0.0, 1.0], dt)
    half = 0.5 * length
    d1sq = p1[0] ** 2 + p1[1] ** 2
    d2sq = p2[0] ** 2 + p2[1] ** 2
    inside = (d1sq < r2sq) | (d2sq < r2sq)
    near12, t12, near00, _, ok = _intersect_lines(p1, p2, -half * dn, half * dn)
    hits = ok & (dot(near12 - near00, near12 - near00) < r2sq) & (t12 > 0.0) & (t12 < 1.0)
    constrained = sign != 0

    r1a, r1b, p11, p11_dist = _cylinder_tangents(p1, radius)
    r2a, r2b, p22, p22_dist = _cylinder_tangents(p2, radius)

    # --- constrained: status and the pair of tangent points on the active side
    s1, s2 = _sign(_component(p1, axis)), _sign(_component(p2, axis))
    either = (s1 == sign) | (s2 == sign)
    other = (s1 != s2) & (_sign(_component(near12, axis)) != sign)
    status_c = jnp.where(either, jnp.where(hits, MANDATORY_WRAP, jnp.where(other, WRAPPED, NO_WRAP)), WRAPPED)
    r1am, r1bm, r2am, r2bm = r1a - p11, r1b - p11, r2a - p22, r2b - p22
    alpha = _acos(_div(dot(r1am, r2bm), norm(r1am) * norm(r2bm)))
    beta = _acos(_div(dot(r1bm, r2am), norm(r1bm) * norm(r2am)))
    ab = alpha > beta
    A1, B1 = _sign(_component(r1a, axis)) == sign, _sign(_component(r1b, axis)) == sign
    A2, B2 = _sign(_component(r2a, axis)) == sign, _sign(_component(r2b, axis)) == sign
    none_active = ~A1 & ~B1 & ~A2 & ~B2
    pair_a = (A1 & B1 & ~A2) | (A1 & ~B1) | (~A1 & ~B1 & ~A2 & B2) | (none_active & ab)
    far_c = jnp.where(none_active, True, jnp.where(pair_a, ab, ~ab))
    r1_c = jnp.where(pair_a, r1a, r1b)
    r2_c = jnp.where(pair_a, r2b, r2a)
    sum_musc = (r1_c - p1) + (r2_c - p2)
    sum_r = (r1_c - p11) + (r2_c - p22)
    long_c = dot(sum_r, sum_musc) < 0.0

    # --- unconstrained: the pair with the smallest angle between them
    n1a, n1b, n2a, n2b = _nz(r1am), _nz(r1bm), _nz(r2am), _nz(r2bm)
    d1, d2, d3, d4 = dot(n1a, n2a), dot(n1a, n2b), dot(n1b, n2a), dot(n1b, n2b)
    c1 = (d1 > d2) & (d1 > d3) & (d1 > d4)
    c2 = ~c1 & (d2 > d3) & (d2 > d4)
    c3 = ~c1 & ~c2 & (d3 > d4)
    r1_u = jnp.where(c1 | c2, r1a, r1b)
    r2_u = jnp.where(c1 | c3, r2a, r2b)

    status = jnp.where(constrained, status_c, jnp.where(hits, MANDATORY_WRAP, NO_WRAP))
    r1 = jnp.where(constrained, r1_c, r1_u)
    r2 = jnp.where(constrained, r2_c, r2_u)
    far = constrained & far_c
    long_wrap = constrained & long_c

    # --- the apex: where the plane through P, S and the axis point of the chord meets the cylinder
    t = _div(p11_dist, p11_dist + p22_dist)
    mpt = p1 + t * (p2 - p1)
    axispt = mpt * dn
    n = _nz(cross(_nz(p1 - axispt), _nz(p2 - axispt)))
    vert1 = _nz(cross(dn, n))
    vert2 = _nz(cross(n, dn))
    apex1, apex2 = axispt + radius * vert1, axispt + radius * vert2
    first = dot(mpt - apex1, mpt - apex1) < dot(mpt - apex2, mpt - apex2)
    apex = jnp.where(far == first, apex2, apex1)

    # --- slide r1, r2 along the axis into the plane through P, S and the apex
    n = _nz(cross(_nz(p1 - apex), _nz(p2 - apex)))
    d = -dot(p1, n)

    def slide(r, q_near, axis_dir, q_far):
        lo = r - 10.0 * dn
        dotprod = 20.0 * n[2]
        tt = _div(-d - dot(n, lo), dotprod)
        inter = (jnp.abs(dotprod) >= _LINE_EPSILON) & (tt >= -_LINE_EPSILON) & (tt <= 1.0 + _LINE_EPSILON)
        rp = lo + tt * 20.0 * dn
        ra = _closest_on_line(rp, q_near, axis_dir)
        closer = dot(ra - q_far, ra - q_far) < dot(q_near - q_far, q_near - q_far)
        return jnp.where(inter & closer, rp, r)

    # OpenSim passes the other end's axis point (0, 0, z) as the line's direction: the axis,
    # except when that z is exactly 0 (then the slide never happens). In OpenSim that z carries
    # the rounding of the frame transforms and is practically never exactly 0, here a path in a
    # cylinder's mid-plane may give an exact 0: the axis is used, as OpenSim almost always does.
    r1 = slide(r1, p11, dn, p22)
    r2 = slide(r2, p22, dn, p11)
    beyond = ((r1[2] < -half) | (r1[2] > half)) & ((r2[2] < -half) | (r2[2] > half))
    status = jnp.where(beyond & (status >= WRAPPED), NO_WRAP, status)
    wraps = ~inside & (status >= WRAPPED)
    status = jnp.where(inside, INSIDE_RADIUS, status)
    return status, wraps, r1, r2, long_wrap


def _spiral_geometry(r1, r2, long_wrap, radius):
    axial = r2[2] - r1[2]
    theta = _atan2(r1[0] * r2[1] - r1[1] * r2[0], r1[0] * r2[0] + r1[1] * r2[1])
    theta = jnp.where(long_wrap, 2.0 * jnp.pi - theta, theta)
    return theta, axial, safe_sqrt((radius * theta) ** 2 + axial**2)


def _adjust_tangent_point(pt, r, w):
    """WrapCylinder::_adjust_tangent_point: ``(adjusted?, new r)``."""
    alpha = _acos(_nz(r - pt)[2])
    omega = _acos(_nz(w - r)[2])
    adjust = jnp.abs(alpha - omega) > _TANGENCY
    p1a = jnp.stack([r[0], r[1], pt[2]])
    w1a = jnp.stack([r[0], r[1], w[2]])
    _, _, hit, _, ok = _intersect_lines(pt, w, p1a, w1a)
    return adjust & ok, r + 1.5 * (hit - r)


def _spiral(p1, p2, r1, r2, long_wrap, radius, single, still=False):
    """WrapCylinder::_make_spiral_path: the helix length, and (``single`` False) OpenSim's slides
    of ``r1``/``r2`` along the axis until the straight pieces meet the helix within 0.1°. On one
    segment or a batch of lanes (``p1``, ``p2``, ``r1``, ``r2`` ``(..., 3)``; ``long_wrap``,
    ``radius``, ``single`` ``(...)``): ten slides at a time, skipped once every lane is done.
    Lanes where ``still`` is true (``(...)``: segments that do not wrap, whose tangent points no
    caller reads) do not slide."""
    lead = jnp.shape(long_wrap)

    def flat(x, tail):
        return jnp.reshape(jnp.broadcast_to(x, lead + tail), (-1,) + tail)

    p1, p2, r1, r2 = (flat(x, (3,)) for x in (p1, p2, r1, r2))
    long_wrap, radius, single, still = (flat(jnp.asarray(x), ()) for x in (long_wrap, radius, single, still))
    single = single.astype(bool)

    def lane(p1, p2, r1, r2, done, count, long_wrap, radius, single):
        sense = jnp.where(long_wrap, -1.0, 1.0)
        theta, axial, length = _spiral_geometry(r1, r2, long_wrap, radius)
        pieces = jnp.maximum(jnp.floor(length / 0.002), 1.0)
        go = ~done & (pieces >= 2) & (count < _CYL_ADJUST) & ~single
        t = 1.0 / pieces
        w1 = _rotate_z(r1, sense * t * theta) + jnp.stack([0.0 * t, 0.0 * t, t * axial])
        adj1, r1n = _adjust_tangent_point(p1, r1, w1)
        r1n = jnp.where(adj1, r1n, r1)
        w2 = _rotate_z(r1n, sense * (1.0 - t) * theta) + jnp.stack([0.0 * t, 0.0 * t, (1.0 - t) * axial])
        adj2, r2n = _adjust_tangent_point(p2, r2, w2)
        r2n = jnp.where(adj2, r2n, r2)
        moved = go & (adj1 | adj2)
        return (
            jnp.where(moved, r1n, r1),
            jnp.where(moved, r2n, r2),
            done | ~moved,
            count + moved.astype(jnp.int32),
        )

    def step(carry, _):
        r1, r2, done, count = carry
        return jax.vmap(lane)(p1, p2, r1, r2, done, count, long_wrap, radius, single), None

    def chunk(carry, _):  # ten slides at a time; skipped once every lane is done
        return jax.lax.cond(
            jnp.all(carry[2]), lambda c: c, lambda c: jax.lax.scan(step, c, None, length=10)[0], carry
        ), None

    init = (r1, r2, single | still.astype(bool), jnp.zeros(single.shape, jnp.int32))
    (r1, r2, _, _), _ = jax.lax.scan(chunk, init, None, length=_CYL_ADJUST // 10)
    arc = jax.vmap(lambda a, b, w, r: _spiral_geometry(a, b, w, r)[2])(r1, r2, long_wrap, radius)
    return r1.reshape(lead + (3,)), r2.reshape(lead + (3,)), arc.reshape(lead)


# ---- sphere ------------------------------------------------------------------------------------


def _sphere_kernel(p1, p2, radius, axis, sign):
    """OpenSim WrapSphere::wrapLine. Returns ``(status, wraps, r1, r2, arc)``."""
    dt = p1.dtype
    n1, n2 = norm(p1), norm(p2)
    inside = (n1 < radius) | (n2 < radius)
    ri = p1 - p2
    a = dot(ri, ri)
    b = 2.0 * dot(p2, ri)
    c = dot(p2, p2) - radius * radius
    disc = b * b - 4.0 * a * c
    sq = safe_sqrt(disc)
    l1 = _div(-b + sq, 2.0 * a)
    l2 = _div(-b - sq, 2.0 * a)
    hit = (disc >= 0.0) & (l1 > 0.0) & (l1 < 1.0) & (l2 > 0.0) & (l2 < 1.0) & (l1 >= l2)

    p1p2 = _nz(p1 - p2)
    n = _nz(cross(p1p2, _nz(p2)))

    def tangents(p, pn):
        y = _nz(-p)
        z = cross(n, y)
        ang = _asin_ratio(radius, pn)
        ca, sa = jnp.cos(ang), jnp.sin(ang)
        k = pn * ca
        return p + k * (ca * y - sa * z), p + k * (ca * y + sa * z)

    r1a, r1b = tangents(p1, n1)
    r2a, r2b = tangents(p2, n2)
    n1a, n1b, n2a, n2b = _nz(r1a), _nz(r1b), _nz(r2a), _nz(r2b)
    j1, j2, j3, j4 = dot(n1a, n2a), dot(n1a, n2b), dot(n1b, n2a), dot(n1b, n2b)
    c1 = (j1 > j2) & (j1 > j3) & (j1 > j4)
    c2 = ~c1 & (j2 > j3) & (j2 > j4)
    c3 = ~c1 & ~c2 & (j3 > j4)
    take_1a = c1 | c2
    take_2a = c1 | c3
    r1 = jnp.where(take_1a, r1a, r1b)
    r2 = jnp.where(take_2a, r2a, r2b)

    # constrained: status, then the tangent points on the active side
    constrained = sign != 0
    s1, s2 = _sign(_component(p1, axis)), _sign(_component(p2, axis))
    either = (s1 == sign) | (s2 == sign)
    tt = dot(p1, p1p2)  # OpenSim compares this distance (m) with 0 and 1
    mm = p1 - tt[..., None] * p1p2
    mand = (dot(mm, mm) < radius * radius) & (tt > 0.0) & (tt < 1.0)
    other = (s1 != s2) & (_sign(_component(mm, axis)) != sign)
    status_c = jnp.where(either, jnp.where(mand, MANDATORY_WRAP, jnp.where(other, WRAPPED, NO_WRAP)), WRAPPED)
    off_side = (s1 != sign) | (s2 != sign)
    wrapaxis = sign * jax.nn.one_hot(axis, 3, dtype=dt)
    musc = _nz(-p1 - p2)
    pick1 = dot(n1a, musc) > dot(n1b, musc)
    pick2 = dot(n2a, musc) > dot(n2b, musc)
    q1, q11 = jnp.where(pick1, r1a, r1b), jnp.where(pick1, r1b, r1a)
    q2, q22 = jnp.where(pick2, r2a, r2b), jnp.where(pick2, r2b, r2a)
    flip = dot(_nz((q1 - p1) + (q2 - p2)), wrapaxis) < 0.0
    q1, q2 = jnp.where(flip, q11, q1), jnp.where(flip, q22, q2)
    far_q = dot(q1 + q2, (q1 - p1) + (q2 - p2)) < 0.0
    use_q = constrained & off_side
    r1 = jnp.where(use_q, q1, r1)
    r2 = jnp.where(use_q, q2, r2)
    far = use_q & far_q
    status = jnp.where(constrained, status_c, WRAPPED)
    status = jnp.where(hit, status, NO_WRAP)
    wraps = ~inside & (status >= WRAPPED)
    status = jnp.where(inside, INSIDE_RADIUS, status)
    angle = _angle(r1, r2)
    angle = jnp.where(far, -(2.0 * jnp.pi - angle), angle)
    return status, wraps, r1, r2, radius * angle


# ---- ellipsoid ---------------------------------------------------------------------------------

# the 2-d cross-section used near coordinate plane i: OpenSim's (first, second) axes of the ellipse
_FIRST = np.array([1, 2, 0])
_SECOND = np.array([2, 0, 1])


def _eberly(t, a, x, active):
    """Eberly's function of the Lagrange parameter ``t`` whose root gives the closest point
    (``f = Π P_k² − Σ_k a_k² x_k² Π_{l≠k} P_l²``, ``P_k = t + a_k²``, over the ``active`` axes)
    and its derivative in ``t`` (OpenSim's ``f`` and ``fp``)."""
    P = t + a * a
    cc = jnp.where(active, (a * x) ** 2, 0.0)
    G = jnp.where(active, P * P, 1.0)
    dG = jnp.where(active, 2.0 * P, 0.0)
    f = G[0] * G[1] * G[2] - cc[0] * G[1] * G[2] - cc[1] * G[0] * G[2] - cc[2] * G[0] * G[1]
    df = (
        dG[0] * G[1] * G[2]
        + G[0] * dG[1] * G[2]
        + G[0] * G[1] * dG[2]
        - cc[0] * (dG[1] * G[2] + G[1] * dG[2])
        - cc[1] * (dG[0] * G[2] + G[0] * dG[2])
        - cc[2] * (dG[0] * G[1] + G[0] * dG[1])
    )
    return f, df


@jax.custom_jvp
def _lagrange_parameter(a, x, active):
    """OpenSim's Newton iteration for the root of `_eberly` (start 0 inside the ellipsoid,
    ``max(a)·|x|`` outside; stop at ``|f| < 1e-9``, at most 64 steps; a solve that has not
    converged keeps its last iterate). Its derivative is the implicit one, ``dt = −f_x dx / f_t``,
    not the derivative of the iteration."""
    inside = jnp.sum(jnp.where(active, (x / a) ** 2, 0.0)) < 1.0
    t0 = jnp.where(inside, 0.0, jnp.max(jnp.where(active, a, 0.0)) * norm(jnp.where(active, x, 0.0)))

    def cond(c):
        _, k, done = c
        return ~done & (k < _NEWTON)

    def body(c):
        t, k, _ = c
        f, df = _eberly(t, a, x, active)
        done = jnp.abs(f) < 1e-9
        return jnp.where(done, t, t - _div(f, df)), k + 1, done

    return jax.lax.while_loop(cond, body, (t0, jnp.asarray(0, jnp.int32), jnp.asarray(False)))[0]


@_lagrange_parameter.defjvp
def _lagrange_parameter_jvp(primals, tangents):
    a, x, active = primals
    da, dx, _ = tangents
    t = _lagrange_parameter(a, x, active)
    _, f_t = _eberly(t, a, x, active)
    _, f_dir = jax.jvp(lambda a_, x_: _eberly(t, a_, x_, active)[0], (a, x), (da, dx))
    return t, -_div(f_dir, f_t)


def _closest_point(a, x, force=-1):
    """WrapEllipsoid::findClosestPoint: the point of the ellipsoid with semi-axes ``a`` closest to
    ``x`` (Eberly, Graphics Gems IV: `_lagrange_parameter`), with OpenSim's special cases: near a
    coordinate plane (``|x_i| ≤ 2e-13``, or ``force = i``) the 2-d ellipse of that plane (of the
    planes ``x`` is near, the one whose ellipse has the smallest radii), and near that ellipse's
    axes closed forms (closestPointToEllipse). ``force = -1``: detect the plane."""
    near = jnp.abs(x) <= _ROUNDOFF
    sums = jnp.stack([a[1] + a[2], a[0] + a[2], a[0] + a[1]])
    detected = jnp.where(jnp.any(near), jnp.argmin(jnp.where(near, sums, jnp.inf)), -1)
    special = jnp.where(jnp.asarray(force) >= 0, force, detected)
    active = jnp.arange(3) != special
    a2 = a * a
    t = _lagrange_parameter(a, x, active)
    newton = jnp.where(active, _div(a2 * x, t + a2), x)

    # closed forms of closestPointToEllipse near the 2-d ellipse's axes
    i = jnp.maximum(special, 0)
    first, second = jnp.asarray(_FIRST)[i], jnp.asarray(_SECOND)[i]
    u, v = _component(x, first), _component(x, second)
    al, be = _component(a, first), _component(a, second)
    near_u, near_v = jnp.abs(u) <= _ROUNDOFF, jnp.abs(v) <= _ROUNDOFF
    # both
    xb = jnp.where(al < be, jnp.where(u < 0, -al, al), u)
    yb = jnp.where(al < be, v, jnp.where(v < 0, -be, be))
    # u ≈ 0
    cu = (al >= be) | (jnp.abs(v) >= be - _div(al * al, be))
    yu = jnp.where(cu, jnp.where(v >= 0, be, -be), _div(be * be * v, be * be - al * al))
    xu = jnp.where(cu, u, al * safe_sqrt(jnp.abs(1.0 - _div(yu, be) ** 2)))
    # v ≈ 0
    cv = (be >= al) | (jnp.abs(u) >= al - _div(be * be, al))
    xv = jnp.where(cv, jnp.where(u >= 0, al, -al), _div(al * al * u, al * al - be * be))
    yv = jnp.where(cv, v, be * safe_sqrt(jnp.abs(1.0 - _div(xv, al) ** 2)))
    xs = jnp.where(near_u & near_v, xb, jnp.where(near_u, xu, xv))
    ys = jnp.where(near_u & near_v, yb, jnp.where(near_u, yu, yv))
    closed = _set_component(_set_component(x, first, xs), second, ys)
    return jnp.where((special >= 0) & (near_u | near_v), closed, newton)


def _tangent_roots(p, a, vs, vs4):
    """The two tangent points from ``p`` to the ellipse cut from the ellipsoid (semi-axes ``a``)
    by the plane ``vs · r + vs4 = 0`` through ``p``: the points of the ellipsoid in that plane
    and in the polar plane ``(A p) · r = 1`` of ``p`` (``A = diag(a⁻²)``), a quadratic."""
    n1 = p / (a * a)
    d = cross(n1, vs)
    x0 = _div(cross(vs, d) + (-vs4) * cross(d, n1), dot(d, d))
    aa = dot(d / a, d / a)
    bb = dot(x0 / a, d / a)
    cc = dot(x0 / a, x0 / a) - 1.0
    sq = safe_sqrt(bb * bb - aa * cc)
    return x0 + _div(-bb + sq, aa) * d, x0 + _div(-bb - sq, aa) * d


def _levenberg_marquardt(r, p, a, vs, vs4, enabled):
    """WrapEllipsoid::calcTangentPoint step for step: damped Gauss–Newton from ``r`` on the four
    residuals (in the plane, on the ellipsoid, the tangent plane's offset, ``p`` in it) until
    their squared sum is below 1e-8 (50 steps, each with OpenSim's damping and step-doubling
    searches of up to 1000 tries). ``lax.while_loop``: no derivative (see `_ellipse_tangent`).
    Lanes with ``enabled`` false (no wrap) return ``r`` at once."""
    a2 = a * a

    def residuals(r, d1):
        nr = 2.0 * r / a2
        ee = jnp.stack([dot(vs, r) + vs4, jnp.sum((r / a) ** 2) - 1.0, dot(nr, r) + d1, dot(nr, p) + d1])
        return ee, jnp.sum(ee * ee)

    d1 = -dot(2.0 * r / a2, r)
    ee, ssq = residuals(r, d1)
    big = jnp.asarray(1000, jnp.int32)

    def outer_cond(c):
        _, _, _, ssq, _, _, nit = c
        return enabled & (ssq > 1e-8) & (nit < 50)

    def outer_body(c):
        r, d1, ee, ssq, ssqo, alpha, nit = c
        live = outer_cond(c)  # under vmap, finished lanes run this body too: keep their loops empty
        top = jnp.stack([vs, 2.0 * r / a2, 2.0 * (2.0 * r) / a2, 2.0 * p / a2], axis=-1)  # rows 0..2
        dedth = jnp.concatenate([top, jnp.array([[0.0, 0.0, 1.0, 1.0]], r.dtype)], axis=0)
        pcos = dot(_nz(p - r), _nz(p))
        dd = jnp.where(pcos > 0.1, 1.0 - pcos**100, 1.0)
        v = -jnp.sum(dedth * ee[None, :], axis=1)
        gram = jnp.sum(dedth[:, None, :] * dedth[None, :, :], axis=-1)
        diag = jnp.diagonal(gram)

        def damp_cond(c):
            _, _, _, ssq, ssqo, _, _, n2 = c
            return live & (ssq >= ssqo) & (n2 < big)

        def damp_body(c):
            r, d1, ee, ssq, ssqo, alpha, _, n2 = c
            m = gram + jnp.diag(diag * (1.0 + alpha) - diag)
            vt = dd * jnp.linalg.solve(m, v) / 16.0
            r, d1 = r + vt[:3], d1 + vt[3]
            ee, new = residuals(r, d1)
            return r, d1, ee, new, ssq, alpha * 4.0, vt, n2 + 1

        zero = jnp.zeros(4, r.dtype)
        r, d1, ee, ssq, ssqo, alpha, vt, _ = jax.lax.while_loop(
            damp_cond, damp_body, (r, d1, ee, ssq, ssqo, alpha, zero, jnp.asarray(0, jnp.int32))
        )
        alpha = alpha / 8.0

        def grow_cond(c):
            _, _, _, ssq, ssqo, _, n2 = c
            return live & (ssq <= ssqo) & (n2 < big)

        def grow_body(c):
            r, d1, ee, ssq, ssqo, fakt, n2 = c
            fakt = fakt * 2.0
            r, d1 = r + vt[:3] * fakt, d1 + vt[3] * fakt
            ee, new = residuals(r, d1)
            return r, d1, ee, new, ssq, fakt, n2 + 1

        r, d1, ee, ssq, ssqo, fakt, _ = jax.lax.while_loop(
            grow_cond, grow_body, (r, d1, ee, ssq, ssqo, jnp.asarray(0.5, r.dtype), jnp.asarray(0, jnp.int32))
        )
        r, d1 = r - vt[:3] * fakt, d1 - vt[3] * fakt
        ee, ssq = residuals(r, d1)
        return r, d1, ee, ssq, ssq, alpha, nit + 1

    init = (r, d1, ee, ssq, ssq, jnp.asarray(0.01, r.dtype), jnp.asarray(0, jnp.int32))
    return jax.lax.while_loop(outer_cond, outer_body, init)[0]


def _ellipse_tangent(p, start, a, vs, vs4, enabled):
    """The tangent point from ``p`` (outside) to the ellipse cut by the wrapping plane that
    OpenSim's WrapEllipsoid::calcTangentPoint finds from ``start``: its value is OpenSim's
    iterate (`_levenberg_marquardt`, converged to a squared residual < 1e-8), its derivative
    that of the exact tangent point nearest to it (`_tangent_roots`), which the iterate
    approximates to second order in the length."""
    sg = jax.lax.stop_gradient
    iterate = _levenberg_marquardt(sg(start), sg(p), sg(a), sg(vs), sg(vs4), enabled)
    plus, minus = _tangent_roots(p, a, vs, vs4)
    near_plus = dot(sg(plus) - iterate, sg(plus) - iterate) <= dot(sg(minus) - iterate, sg(minus) - iterate)
    exact = jnp.where(near_plus, plus, minus)
    return exact + sg(iterate - exact)


def _section_points(r1, a, a0, ar1, vsy, phi):
    """Points of the ellipsoid on the rays from ``a0`` at angles ``phi`` (from ``ar1`` towards
    ``vsy``) in the wrapping plane (CalcDistanceOnEllipsoid's interior points)."""
    r = jnp.cos(phi)[:, None] * ar1 + jnp.sin(phi)[:, None] * vsy
    f1 = r / a
    f2 = a0 / a
    aa = jnp.sum(f1 * f1, axis=-1)
    bb = 2.0 * jnp.sum(f1 * f2, axis=-1)
    cc = jnp.sum(f2 * f2) - 1.0
    mu3 = _div(-bb + safe_sqrt(bb * bb - 4.0 * aa * cc), 2.0 * aa)
    return a0 + mu3[:, None] * r


def _ellipsoid_hit(p1_in, p2_in, dims):
    """The first part of WrapEllipsoid::wrapLine, in OpenSim's scaled units (``factor = 3 /
    Σ dims``): whether the segment wraps (both end points outside, not collinear with the
    centre, and the segment crosses the ellipsoid), its status (``MANDATORY_WRAP`` when it wraps:
    an ellipsoid never answers ``WRAPPED``), and ``(factor, p1, p2, a, p1e, p2e, l1, l2)``."""
    factor = 3.0 / jnp.sum(dims)
    p1, p2, a = p1_in * factor, p2_in * factor, dims * factor
    p1e = jnp.sum((p1 / a) ** 2) - 1.0
    p2e = jnp.sum((p2 / a) ** 2) - 1.0
    inside = (p1e < -1e-4) | (p2e < -1e-4)
    collinear = jnp.abs(dot(_nz(p1), _nz(p2)) - 1.0) < 1e-4
    f1, f2 = (p1 - p2) / a, p2 / a
    aa, bb, cc = dot(f1, f1), 2.0 * dot(f1, f2), dot(f2, f2) - 1.0
    disc = bb * bb - 4.0 * aa * cc
    sq = safe_sqrt(disc)
    l1, l2 = _div(-bb + sq, 2.0 * aa), _div(-bb - sq, 2.0 * aa)
    hit = (disc >= 0.0) & (l1 > 0.0) & (l1 < 1.0) & (l2 > 0.0) & (l2 < 1.0)
    wraps = ~inside & ~collinear & hit
    status = jnp.where(inside, INSIDE_RADIUS, jnp.where(wraps, MANDATORY_WRAP, NO_WRAP)).astype(jnp.int32)
    return status, wraps, (factor, p1, p2, a, p1e, p2e, l1, l2)


def _ellipsoid_kernel(p1_in, p2_in, dims, axis, sign, method):
    """OpenSim WrapEllipsoid::wrapLine. Returns ``(status, wraps, r1, r2, arc)``."""
    dt = p1_in.dtype
    status, wraps, (factor, p1, p2, a, p1e, p2e, l1, l2) = _ellipsoid_hit(p1_in, p2_in, dims)
    p1p2 = p1 - p2
    x1 = p2 + l1 * p1p2  # the chord's intersections with the ellipsoid
    x2 = p2 + l2 * p1p2
    r1r2 = x2 - x1

    # (1) Frans' technique: where the chord crosses the plane normal to its most parallel axis
    mu = jnp.abs(_nz(p1p2))
    t = _div(-x1, r1r2)
    t_sv = x1[None, :] + t[:, None] * r1r2[None, :]
    mid = x1 + 0.5 * r1r2
    tt = jnp.arange(1, _FAN - 1, dtype=dt) / _FAN
    svs = x1[None, :] + tt[:, None] * r1r2[None, :]
    # one batch of closest-point solves: Frans' three (2-d, forced), the fan's samples, the midpoint
    queries = jnp.concatenate([t_sv, svs, mid[None]], axis=0)
    force = jnp.concatenate([jnp.arange(3), jnp.full(svs.shape[0] + 1, -1)])
    closest = jax.vmap(lambda y, f: _closest_point(a, y, f))(queries, force)
    t_c1, cs, c_mid = closest[:3], closest[3:-1], closest[-1]
    best = jnp.argmax(mu)
    mub, tb = mu[best], t[best]
    c1_frans = t_c1[best]
    hybrid, midpoint, axial = method == 0, method == 1, method == 2
    s = jnp.where(
        (tb < 0.0) | (tb > 1.0),
        0.0,
        jnp.where(tb < _SV_BLEND, tb / _SV_BLEND, jnp.where(tb > 1.0 - _SV_BLEND, (1.0 - tb) / _SV_BLEND, 1.0)),
    )
    mub = jnp.where(hybrid & (mub > _MU_MIN) & (s < 1.0), _MU_MIN + s * (mub - _MU_MIN), mub)

    # (2) the fan: average direction from chord samples to their closest surface points
    v_sum = _nz(jnp.sum(_nz(cs - svs), axis=0))
    w = (mub - _MU_MIN) / (_MU_MAX - _MU_MIN)
    fan_weight = jnp.where(hybrid & (mub < _MU_MAX), jnp.where(mub <= _MU_MIN, 1.0, 1.0 - w), -jnp.inf)
    fw = jnp.minimum(fan_weight, 1.0)

    def choose_c1(c_fan, c_blend):
        c1_hybrid = jnp.where(mub <= _MU_MIN, c_fan, jnp.where(mub < _MU_MAX, c_blend, c1_frans))
        c1 = jnp.where(midpoint, c_mid, jnp.where(axial, c1_frans, c1_hybrid))
        # a quadrant: mirror c1 to the active side (after a fan also pulled towards the plane, below)
        flip = (sign != 0) & (_sign(_component(c1, axis)) != sign)
        return c1, flip, _set_component(c1, axis, -_component(c1, axis))

    # three closest-point solves in sequence (one solver in a scan): the fan's c1, the blend of
    # Frans' and the fan's, the mirrored c1 pulled towards the plane of the quadrant
    def phase(found, k):
        c_fan, c_blend, _ = found
        c1, _, mirror = choose_c1(c_fan, c_blend)
        pulled = _set_component(mirror, axis, _component(mirror, axis) * (1.0 - jnp.maximum(fw, 0.0)))
        query = jnp.where(k == 0, mid + v_sum, jnp.where(k == 1, w * c1_frans + (1.0 - w) * c_fan, pulled))
        c = _closest_point(a, query)
        return tuple(jnp.where(k == i, c, found[i]) for i in range(3)), None

    (c_fan, c_blend, c_pulled), _ = jax.lax.scan(phase, (mid, mid, mid), jnp.arange(3))
    c1, flip, c1_mirror = choose_c1(c_fan, c_blend)
    use_c1 = jnp.where(axial, (tb > 0.0) & (tb < 1.0), True)
    start1 = jnp.where(flip, c1_mirror, jnp.where(use_c1, c1, x1))
    start2 = jnp.where(flip, c1_mirror, jnp.where(use_c1, c1, x2))
    c1 = jnp.where(flip, jnp.where(fw > 0.0, c_pulled, c1_mirror), c1)

    # the wrapping plane through p1, p2, c1 and the tangent points in it (a point on the surface
    # is its own tangent point)
    vs = _nz(cross(p1p2, p1 - c1))
    vs4 = -dot(vs, c1)
    ends = jnp.stack([p1, p2])
    on = jnp.abs(jnp.stack([p1e, p2e])) < 1e-4
    tangent = jax.vmap(lambda q, st, en: _ellipse_tangent(q, st, a, vs, vs4, en))(
        ends, jnp.stack([start1, start2]), wraps & ~on
    )
    r1, r2 = jnp.where(on[:, None], ends, tangent)

    # CalcDistanceOnEllipsoid: polyline along the section, the short way unless that starts off
    # backwards at either end (then the long way)
    chord = norm(r1 - r2)
    chord_m = chord / factor
    short = chord_m < _SEGMENT
    pieces = jnp.clip(jnp.floor(chord_m / _SEGMENT), 1.0, float(_MAX_PIECES))
    imax = jnp.argmax(jnp.abs(vs))
    a0 = jax.nn.one_hot(imax, 3, dtype=dt) * _div(-vs4, _component(vs, imax))
    ar1, ar2 = _nz(r1 - a0), _nz(r2 - a0)
    phi0 = _angle(ar1, ar2)
    vsy = cross(_nz(cross(ar1, ar2)), ar1)
    k = jnp.arange(1, _MAX_PIECES, dtype=dt)
    steps = jnp.stack([phi0, -(2.0 * jnp.pi - phi0)]) / pieces  # near side, far side
    both = _section_points(r1, a, a0, ar1, vsy, (steps[:, None] * k[None, :]).reshape(-1)).reshape(2, -1, 3)
    w1 = both[0, 0]
    w2 = jnp.take(both[0], jnp.maximum(pieces.astype(jnp.int32) - 2, 0), axis=0)
    wrong = (dot(_nz(p1 - r1), _nz(w1 - r1)) > 0.0) | (dot(_nz(p2 - r2), _nz(w2 - r2)) > 0.0)
    far = (sign != 0) & ~short & (pieces >= 2) & wrong
    interior = jnp.where(far, both[1], both[0])
    pts = jnp.concatenate([r1[None], jnp.where((k < pieces)[:, None], interior, r2), r2[None]], axis=0)
    polyline = jnp.sum(norm(pts[1:] - pts[:-1]))
    arc = jnp.where(short, chord, polyline) / factor
    return status, wraps, r1 / factor, r2 / factor, arc


# ---- public one-segment functions -----------------------------------------------------------------


def _points(p, s):
    p, s = jnp.asarray(p), jnp.asarray(s)
    dt = jnp.result_type(p, s)
    dt = dt if jnp.issubdtype(dt, jnp.floating) else jnp.zeros(()).dtype
    if p.shape != (3,) or s.shape != (3,):
        raise ValueError(f"p and s must be (3,) points (batch with jax.vmap), got {p.shape} and {s.shape}")
    return p.astype(dt), s.astype(dt)


def _method_code(method: str) -> int:
    if method not in METHODS:
        raise ValueError(f"method {method!r}: expected one of {list(METHODS)}")
    return METHODS.index(method)


def wrap_cylinder(
    p: Float[ArrayLike, 3],
    s: Float[ArrayLike, 3],
    radius: Float[ArrayLike, ""],
    length: Float[ArrayLike, ""],
    *,
    quadrant: str = "all",
    single: bool = True,
) -> SegmentWrap:
    """OpenSim's WrapCylinder on the segment ``p → s``.

    Args:
        p, s: ``(3,)`` m, the segment's end points in the cylinder's frame (axis ``z``, centred).
        radius, length: m, the cylinder's radius and its length along ``z`` (a wrap whose two
            tangent points both lie beyond the end caps is refused).
        quadrant: OpenSim's ``quadrant`` ("all", "x", "-x", "y", "-y"; "z"/"-z" are accepted as
            OpenSim accepts them, though meaningless along the axis).
        single: OpenSim's ``singleWrap`` (the path has one wrap object): no tangent-point slides.
            ``False`` (a path with several wrap objects) slides them as OpenSim does.

    Returns:
        `SegmentWrap` (points in the cylinder frame).
    """
    p, s = _points(p, s)
    axis, sign = quadrant_axis_sign(quadrant)
    status, wraps, r1, r2, arc = _cylinder_kernel(
        p, s, jnp.asarray(radius, p.dtype), jnp.asarray(length, p.dtype), axis, sign, single
    )
    return _finish(p, s, wraps, status, r1, r2, arc)


def wrap_sphere(
    p: Float[ArrayLike, 3],
    s: Float[ArrayLike, 3],
    radius: Float[ArrayLike, ""],
    *,
    quadrant: str = "all",
) -> SegmentWrap:
    """OpenSim's WrapSphere on the segment ``p → s``.

    Args:
        p, s: ``(3,)`` m, end points in the sphere's frame (centre at the origin).
        radius: m.
        quadrant: OpenSim's ``quadrant`` ("all", "x", "-x", "y", "-y", "z", "-z").

    Returns:
        `SegmentWrap` (points in the sphere frame).
    """
    p, s = _points(p, s)
    axis, sign = quadrant_axis_sign(quadrant)
    status, wraps, r1, r2, arc = _sphere_kernel(p, s, jnp.asarray(radius, p.dtype), axis, sign)
    return _finish(p, s, wraps, status, r1, r2, arc)


def wrap_ellipsoid(
    p: Float[ArrayLike, 3],
    s: Float[ArrayLike, 3],
    dimensions: Float[ArrayLike, 3],
    *,
    quadrant: str = "all",
    method: str = "hybrid",
) -> SegmentWrap:
    """OpenSim's WrapEllipsoid on the segment ``p → s``.

    Args:
        p, s: ``(3,)`` m, end points in the ellipsoid's frame (centre at the origin, semi-axes
            along ``x, y, z``).
        dimensions: ``(3,)`` m, the semi-axes.
        quadrant: OpenSim's ``quadrant`` ("all", "x", "-x", "y", "-y", "z", "-z").
        method: OpenSim's ``PathWrap`` method, ``"hybrid"`` (default), ``"midpoint"`` or
            ``"axial"``.

    Returns:
        `SegmentWrap` (points in the ellipsoid frame).
    """
    p, s = _points(p, s)
    axis, sign = quadrant_axis_sign(quadrant)
    dims = jnp.asarray(dimensions, p.dtype)
    if dims.shape != (3,):
        raise ValueError(f"dimensions must be (3,), got {dims.shape}")
    status, wraps, r1, r2, arc = _ellipsoid_kernel(p, s, dims, axis, sign, _method_code(method))
    return _finish(p, s, wraps, status, r1, r2, arc)


def segment_kernel(kind: int):
    """The kernel of one surface kind: ``f(p1, p2, dims (3,), axis, sign, method, single) ->
    (status int32, wraps, r1, r2, arc)`` (points in the wrap frame; ``dims``: cylinder ``(radius,
    length, ·)``, sphere ``(radius, ·, ·)``, ellipsoid the semi-axes)."""

    def kernel(p1, p2, d, axis, sign, method, single):
        if kind == 0:
            out = _cylinder_kernel(p1, p2, d[0], d[1], axis, sign, single)
        elif kind == 1:
            out = _sphere_kernel(p1, p2, d[0], axis, sign)
        else:
            out = _ellipsoid_kernel(p1, p2, d, axis, sign, method)
        return (out[0].astype(jnp.int32),) + tuple(out[1:])

    return kernel


# ---- wrap objects on a model and OpenSim's PathWrap algorithm -------------------------------------


class WrapObjects(eqx.Module):
    """``w`` wrap surfaces fixed on segments of a `SegmentTree` (or on the world), as OpenSim's
    ``WrapObjectSet`` of each body.

    Fields:

    - ``translation``: ``(w, 3)`` m, the wrap frame's origin in its segment's frame (or in the
      world), OpenSim's ``translation``.
    - ``rotation``: ``(w, 4)`` unit quaternion, the wrap frame's attitude in that frame (OpenSim's
      ``xyz_body_rotation``, body-fixed X-Y-Z, via `jaxbio.quaternion.from_body_fixed_xyz`).
    - ``dimensions``: ``(w, 3)`` m: cylinder ``(radius, length, 0)``, sphere ``(radius, 0, 0)``,
      ellipsoid the three semi-axes.
    - ``segments``: static, the segment index of each object (``-1``: the world).
    - ``kinds``: static, ``"cylinder"``, ``"sphere"`` or ``"ellipsoid"``.
    - ``quadrants``: static, OpenSim's ``quadrant`` strings (`quadrant_axis_sign`).
    - ``names``: static.

    Numbers are array leaves (differentiable, e.g. radii and poses); what steers the algorithm is
    static. Built and checked by `jaxbio.muscles.geometry.MusclePaths.from_points`.
    """

    translation: Float[Array, "w 3"]
    rotation: Float[Array, "w 4"]
    dimensions: Float[Array, "w 3"]
    segments: tuple[int, ...] = eqx.field(static=True)
    kinds: tuple[str, ...] = eqx.field(static=True)
    quadrants: tuple[str, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __check_init__(self):
        w = len(self.names)
        if not (len(self.segments) == len(self.kinds) == len(self.quadrants) == w):
            raise ValueError("WrapObjects: names, segments, kinds and quadrants must have the same length")
        for field in ("translation", "rotation", "dimensions"):
            shape = jnp.shape(getattr(self, field))
            want = (w, 4) if field == "rotation" else (w, 3)
            if shape != want:
                raise ValueError(f"WrapObjects.{field} has shape {shape}, expected {want}")
        for name, kind, quadrant in zip(self.names, self.kinds, self.quadrants):
            if kind not in KINDS:
                raise ValueError(f"wrap object {name!r}: kind {kind!r} is not one of {list(KINDS)}")
            quadrant_axis_sign(quadrant)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"no wrap object named {name!r}; wrap objects are {list(self.names)}") from None

    def astype(self, dtype) -> WrapObjects:
        return WrapObjects(
            jnp.asarray(self.translation, dtype),
            jnp.asarray(self.rotation, dtype),
            jnp.asarray(self.dimensions, dtype),
            self.segments,
            self.kinds,
            self.quadrants,
            self.names,
        )


#: OpenSim type names accepted for each kind.
_TYPE_NAMES = {
    "cylinder": "cylinder",
    "wrapcylinder": "cylinder",
    "sphere": "sphere",
    "wrapsphere": "sphere",
    "ellipsoid": "ellipsoid",
    "wrapellipsoid": "ellipsoid",
}


def build_wrap_objects(specs: Mapping[str, Mapping], resolve, dtype) -> WrapObjects:
    """`WrapObjects` from OpenSim-like property dicts ``{name: {"type": "WrapCylinder" | "cylinder" |
    …, "frame": body name, "translation": (3,), "xyz_body_rotation": (3,) rad, "quadrant": str,
    "radius"/"length" (cylinder), "radius" (sphere), "dimensions" (3,) (ellipsoid)}}``.
    ``resolve(frame name, where)`` gives ``(segment index, origin (3,), rotation matrix (3, 3))``
    of a frame (`MusclePaths.from_points` passes its frame table). ``ValueError`` naming the
    object and property for a bad entry (OpenSim refuses negative radii and lengths and
    non-positive ellipsoid dimensions)."""
    names, segs, kinds, quads, trans, rots, dims = [], [], [], [], [], [], []
    allowed = {"type", "frame", "translation", "xyz_body_rotation", "quadrant", "radius", "length", "dimensions"}
    for name, spec in specs.items():
        where = f"wrap object {name!r}"
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: expected a dict of properties, got {type(spec).__name__}")
        unknown = set(spec) - allowed
        if unknown:
            raise ValueError(f"{where}: unknown properties {sorted(unknown)}; allowed {sorted(allowed)}")
        kind = _TYPE_NAMES.get(str(spec.get("type", "")).lower())
        if kind is None:
            raise ValueError(f"{where}: type {spec.get('type')!r} is not WrapCylinder, WrapSphere or WrapEllipsoid")
        if "frame" not in spec:
            raise ValueError(f"{where}: 'frame' (the body it is fixed on) is missing")
        seg, origin, R = resolve(spec["frame"], where)
        t = _vec(spec.get("translation", (0.0, 0.0, 0.0)), (3,), f"{where}, translation")
        angles = _vec(spec.get("xyz_body_rotation", (0.0, 0.0, 0.0)), (3,), f"{where}, xyz_body_rotation")
        quadrant = str(spec.get("quadrant", "all"))
        try:
            quadrant_axis_sign(quadrant)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        if kind == "ellipsoid":
            d = _vec(spec.get("dimensions", (0.05, 0.05, 0.05)), (3,), f"{where}, dimensions")
            if np.any(d <= 0):
                raise ValueError(f"{where}: dimensions must be positive, got {d.tolist()}")
        else:
            radius = float(_vec(spec.get("radius", 1.0), (), f"{where}, radius"))
            length = float(_vec(spec.get("length", 1.0), (), f"{where}, length")) if kind == "cylinder" else 0.0
            if not radius > 0 or not length >= 0:
                raise ValueError(f"{where}: radius must be positive and length non-negative, got {radius}, {length}")
            d = np.array([radius, length, 0.0])
        # pose in the segment: the frame's pose composed with the object's
        q_frame = (
            quat.from_matrix(np.asarray(R, float)) if not np.allclose(R, np.eye(3)) else np.array([1.0, 0.0, 0.0, 0.0])
        )
        q = quat.multiply(np.asarray(q_frame, float), quat.from_body_fixed_xyz(angles))
        names.append(str(name))
        segs.append(int(seg))
        kinds.append(kind)
        quads.append(quadrant)
        trans.append(origin + R @ t)
        rots.append(q / np.linalg.norm(q))
        dims.append(d)
    dt = model_dtype(dtype)
    return WrapObjects(
        to_device(np.reshape(trans, (-1, 3)), dt),
        to_device(np.reshape(rots, (-1, 4)), dt),
        to_device(np.reshape(dims, (-1, 3)), dt),
        tuple(segs),
        tuple(kinds),
        tuple(quads),
        tuple(names),
    )


def path_wrap_spec(spec, objects: WrapObjects, count: int, where: str) -> tuple[int, int, int, int]:
    """One OpenSim ``PathWrap`` as the static ``(object index, method code, first point, last
    point)`` of `MusclePaths.path_wraps`: ``spec`` is a wrap object's name or a dict
    ``{"wrap_object": name, "method": "hybrid" | "midpoint" | "axial", "range": (start, end)}``
    with OpenSim's 1-based ``range`` (a value below 1 means the first / last point)."""
    if isinstance(spec, str):
        spec = {"wrap_object": spec}
    if not isinstance(spec, Mapping) or "wrap_object" not in spec:
        raise ValueError(f"{where}: expected a wrap object name or a dict with 'wrap_object', got {spec!r}")
    unknown = set(spec) - {"wrap_object", "method", "range"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (wrap_object, method, range)")
    obj = objects.index(str(spec["wrap_object"]))
    method = str(spec.get("method", "hybrid")).lower()
    if method not in METHODS:
        raise ValueError(f"{where}: method {spec.get('method')!r} is not one of {list(METHODS)}")
    rng = spec.get("range", (-1, -1))
    try:
        start, end = (int(v) for v in rng)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: range must be two integers, got {rng!r}") from None
    first = start - 1 if start >= 1 else 0
    last = end - 1 if end >= 1 else count - 1
    if not 0 <= first < count or not 0 <= last < count:
        raise ValueError(f"{where}: range {tuple(rng)} is outside the path's {count} points")
    return obj, METHODS.index(method), first, last


def wrap_frames(objects: WrapObjects, attitude, position):
    """World pose of every wrap frame: origins ``(w, 3)`` m and attitudes ``(w, 4)``, from the
    segments' world attitudes ``(n, 4)`` and origins ``(n, 3)``."""
    seg = np.asarray(objects.segments, np.int64)
    idx = np.maximum(seg, 0)
    world = jnp.asarray((seg < 0)[:, None])
    att = attitude[idx]
    trans = objects.translation.astype(position.dtype)
    rot = objects.rotation.astype(position.dtype)
    origin = jnp.where(world, trans, position[idx] + quat.rotate(att, trans))
    q = jnp.where(world, rot, quat.multiply(att, rot))
    return origin, q


class WrappedPaths(NamedTuple):
    """The result of OpenSim's PathWrap algorithm on ``mw`` muscles (`wrap_paths`).

    - ``lengths``: ``(mw,)`` m, the path lengths.
    - ``points``: ``(mw, L, 3)`` m, world frame, the path's points in order (fixed points and the
      tangent points inserted by the wrap objects, ``L = P + 2 K``), padding after the last; the
      positions OpenSim's length and force directions use (its cached ground positions, see
      `wrap_paths`).
    - ``elements``: ``(mw, L)`` int, which point each is: ``k < P`` the muscle's point ``k``,
      ``P + 2 s`` / ``P + 2 s + 1`` the first / second tangent point of its wrap ``s``.
    - ``valid``: ``(mw, L)`` bool, real points (not padding).
    - ``arc``: ``(mw, L − 1)`` bool, the piece from point ``t`` to ``t + 1`` runs on a surface
      (its length is the wrap's arc, not the straight distance).
    """

    lengths: Float[Array, " mw"]
    points: Float[Array, "mw L 3"]
    elements: Int[Array, "mw L"]
    valid: Bool[Array, "mw L"]
    arc: Bool[Array, "mw L1"]


_ABSENT = 1e9  # rank of a point that is not on the path
_LENGTH_TOLERANCE = 0.0005  # GeometryPath::applyWrapObjects: stop when the length changes less (m)
_PASSES = 8  # … or after 8 passes (one pass for a path with a single wrap object)


def wrap_plan(path_wraps, counts, objects: WrapObjects):
    """Static tables of the wrapped muscles' ``PathWrap`` s (numpy, built once per trace)."""
    mw = len(path_wraps)
    K = max(len(w) for w in path_wraps)
    table = np.zeros((4, mw, K), np.int64)
    for i, wraps in enumerate(path_wraps):
        for k, spec in enumerate(wraps):
            table[:, i, k] = spec
        table[:, i, len(wraps) :] = table[:, i, :1]  # padding (never processed)
    n = np.array([len(w) for w in path_wraps])
    kinds = np.array([KINDS.index(k) for k in objects.kinds])[table[0]]
    # the most candidate pieces a wrap can see: its range plus the tangent-point pairs of the
    # muscle's other wraps that may sit inside it
    window = int(np.max(table[3] - table[2] + 2 * (n[:, None] - 1)))
    return dict(
        obj=table[0],
        method=table[1],
        first=table[2],
        last=table[3],
        n=n,
        kind=kinds,
        K=K,
        window=max(window, 1),
        counts=np.asarray(counts),
    )


def _path_length(rank, ground, arc, P):
    """OpenSim's calcLengthAfterPathComputation on one path: straight pieces between the points'
    ground positions ``ground`` ``(L, 3)``, and the arc between the two tangent points of one wrap
    object. Also the path order, which points are on it and which pieces are arcs."""
    perm = jnp.argsort(rank, stable=True)
    valid = rank[perm] < _ABSENT
    pts = ground[perm]
    e1, e2 = perm[:-1], perm[1:]
    pair = (e1 >= P) & ((e1 - P) % 2 == 0) & (e2 == e1 + 1)
    arcs = arc[jnp.maximum((e1 - P) // 2, 0)]
    piece = jnp.where(pair, arcs, norm(pts[1:] - pts[:-1]))
    return jnp.sum(jnp.where(valid[1:], piece, 0.0)), perm, valid, pair


class _PathState(NamedTuple):
    """The wrapped muscles' paths while OpenSim's algorithm runs (all ``(mw, …)``)."""

    elems: Array  # (mw, L, 3) current world position of every point (tangent points: latest)
    ground: Array  # (mw, L, 3) the position OpenSim's cached getLocationInGround returns
    frozen: Array  # (mw, L) bool: that cache is set
    rank: Array  # (mw, L) place on the path (_ABSENT: not on it)
    arc: Array  # (mw, K) each wrap's arc length
    done: Array  # (mw,) bool
    swapped: Array  # (mw,) bool: the first two wraps run in swapped order
    last_len: Array  # (mw,) length after the previous pass
    codes: Array  # (mw, 2) WrapAction of the first two wraps in the first pass


def wrap_paths(points: Float[Array, "mw P 3"], plan: dict, objects: WrapObjects, origin, attitude) -> WrappedPaths:
    """OpenSim's ``GeometryPath::applyWrapObjects`` on ``mw`` muscles whose fixed points are at
    ``points`` (world frame; padding after each muscle's ``plan["counts"]``), with the wrap
    frames at ``origin`` ``(w, 3)`` / ``attitude`` ``(w, 4)`` (`wrap_frames`).

    For each muscle, its wrap objects in order: remove the object's previous tangent points,
    try every path piece within the object's ``range`` (pieces between two tangent points of one
    other object excluded), take the first piece that must wrap (``MANDATORY_WRAP``) or else the
    ``WRAPPED`` piece whose length grows least, and insert the two tangent points there (on the
    wrap object's body). With several objects this repeats until the length changes by less
    than 0.5 mm (at most 8 passes; after the first pass the first two objects swap if the first
    missed and the second had a point inside it), as OpenSim does.

    OpenSim 4.6 quirk, emulated: a point's ground position is cached the first time it is asked
    for while the path is computed (``Point::getLocationInGround``), and moving a tangent point
    later (``PathWrapPoint::setLocation``) does not refresh that cache. So in the second and later
    passes the straight pieces to a tangent point that moved, and the length changes that choose
    between pieces, use the tangent point's first position, while the wrap computations and the
    arcs use its new one. Paths with a single wrap object (one pass) are not affected.

    All muscles advance together (no Python loop over muscles); each surface kind is evaluated
    once per step for the muscles that use it, and steps where no muscle has work are skipped
    with `jax.lax.cond`.
    """
    mw, P = points.shape[0], points.shape[1]
    K, W = plan["K"], plan["window"]
    L = P + 2 * K
    dt = points.dtype
    n = jnp.asarray(plan["n"])
    counts = plan["counts"]
    e_ids = np.arange(L)
    axis_sign = np.array([quadrant_axis_sign(q) for q in objects.quadrants]).reshape(-1, 2)
    obj_tab, meth_tab = jnp.asarray(plan["obj"]), jnp.asarray(plan["method"])
    first_tab, last_tab, kind_tab = jnp.asarray(plan["first"]), jnp.asarray(plan["last"]), jnp.asarray(plan["kind"])
    dims_all = objects.dimensions.astype(dt)
    rows_of = {c: np.nonzero(np.any(plan["kind"] == c, axis=1))[0] for c in range(len(KINDS))}
    rows_of = {c: r for c, r in rows_of.items() if r.size}
    span = plan["last"] - plan["first"] + 2 * (plan["n"][:, None] - 1)
    window_of = {c: int(min(W, max(1, np.max(np.where(plan["kind"][r] == c, span[r], 0))))) for c, r in rows_of.items()}
    mrange = jnp.arange(mw)

    def pick(x, idx):  # x (mw, L, ...) gathered at idx (mw, W)
        return jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)

    def kernels(A, B, ok, j, active):
        """Every candidate piece ``A → B`` over wrap ``j`` of each muscle: status, tangent
        points (world) and arc, one kernel per surface kind on the muscles that use it."""
        o = obj_tab[mrange, j]
        kind = kind_tab[mrange, j]
        st = jnp.zeros((mw, W), jnp.int32)
        r1w, r2w, arcw = A, B, jnp.zeros((mw, W), dt)
        for c, rows in rows_of.items():
            Wc = window_of[c]
            need = active[rows] & (kind[rows] == c) & jnp.any(ok[rows, :Wc], axis=1)
            oc = o[rows]
            Oc, Qc = origin[oc][:, None, :], attitude[oc][:, None, :]
            Qi = quat.conjugate(Qc)
            args = (
                quat.rotate(Qi, A[rows, :Wc] - Oc),
                quat.rotate(Qi, B[rows, :Wc] - Oc),
                dims_all[oc],
                jnp.asarray(axis_sign[:, 0])[oc],
                jnp.asarray(axis_sign[:, 1])[oc],
                meth_tab[rows, j[rows]],
                n[rows] == 1,
            )
            if KINDS[c] == "ellipsoid":
                # an ellipsoid answers MANDATORY_WRAP or nothing, so only the first piece that
                # crosses it matters: the cheap test on all pieces, the wrap on that one
                s_all = jax.vmap(jax.vmap(lambda p, q, d: _ellipsoid_hit(p, q, d)[0], in_axes=(0, 0, None)))(
                    args[0], args[1], args[2]
                )
                hits = ok[rows, :Wc] & (s_all == MANDATORY_WRAP)
                first = jnp.argmax(hits, axis=1)
                one = (
                    jnp.take_along_axis(args[0], first[:, None, None], axis=1),
                    jnp.take_along_axis(args[1], first[:, None, None], axis=1),
                ) + args[2:]
                need = need & jnp.any(hits, axis=1)
                kern = jax.vmap(jax.vmap(segment_kernel(c), in_axes=(0, 0, None, None, None, None, None)))
                at_first = jnp.arange(Wc)[None, :] == first[:, None]

                def run(a, k=kern, s_all=s_all, at_first=at_first):
                    _, _, r1, r2, arc = k(*a)
                    return (
                        s_all,
                        at_first,
                        jnp.where(at_first[..., None], r1, 0.0),
                        jnp.where(at_first[..., None], r2, 0.0),
                        jnp.where(at_first, arc, 0.0),
                    )

                def skip(a, s_all=s_all):
                    z = jnp.zeros(s_all.shape, dt)
                    return (
                        s_all,
                        jnp.zeros(z.shape, bool),
                        jnp.zeros(z.shape + (3,), dt),
                        jnp.zeros(z.shape + (3,), dt),
                        z,
                    )

                s_c, _, r1_c, r2_c, arc_c = jax.lax.cond(jnp.any(need), run, skip, one)
                need = active[rows] & (kind[rows] == c)  # the statuses of every piece count
            else:
                if KINDS[c] == "cylinder":  # one spiral over every lane (`_cylinder_lanes`)

                    def kern(p1, p2, d, axis, sign, method, single):
                        return _cylinder_lanes(p1, p2, d, axis, sign, single)

                else:
                    kern = jax.vmap(jax.vmap(segment_kernel(c), in_axes=(0, 0, None, None, None, None, None)))

                def skip(args):
                    z = jnp.zeros(args[0].shape[:2], dt)
                    return jnp.zeros(z.shape, jnp.int32), jnp.zeros(z.shape, bool), args[0], args[1], z

                s_c, _, r1_c, r2_c, arc_c = jax.lax.cond(jnp.any(need), lambda a, k=kern: k(*a), skip, args)
            pad = ((0, 0), (0, W - Wc))
            sel = jnp.pad(need[:, None] & jnp.ones((1, Wc), bool), pad)
            st = st.at[rows].set(jnp.where(sel, jnp.pad(s_c, pad), st[rows]))
            r1w = r1w.at[rows].set(
                jnp.where(sel[..., None], jnp.pad(Oc + quat.rotate(Qc, r1_c), pad + ((0, 0),)), r1w[rows])
            )
            r2w = r2w.at[rows].set(
                jnp.where(sel[..., None], jnp.pad(Oc + quat.rotate(Qc, r2_c), pad + ((0, 0),)), r2w[rows])
            )
            arcw = arcw.at[rows].set(jnp.where(sel, jnp.pad(arc_c, pad), arcw[rows]))
        return st, r1w, r2w, arcw

    def process(state: _PathState, j, active, first_pass):
        """One wrap object (``j``, per muscle) of one pass."""
        eA = (P + 2 * j)[:, None]
        own = active[:, None] & ((e_ids[None, :] == eA) | (e_ids[None, :] == eA + 1))
        rank = jnp.where(own, _ABSENT, state.rank)  # remove its tangent points
        perm = jnp.argsort(rank, axis=1, stable=True)
        posn = jnp.argsort(perm, axis=1)
        rank = jnp.where(rank < _ABSENT, posn.astype(dt), _ABSENT)
        ps = posn[mrange, first_tab[mrange, j]]
        pe = posn[mrange, last_tab[mrange, j]]
        t = ps[:, None] + jnp.arange(W)[None, :]
        e1 = jnp.take_along_axis(perm, jnp.minimum(t, L - 1), axis=1)
        e2 = jnp.take_along_axis(perm, jnp.minimum(t + 1, L - 1), axis=1)
        same = (e1 >= P) & (e2 >= P) & ((e1 - P) // 2 == (e2 - P) // 2)
        ok = active[:, None] & (t < pe[:, None]) & ~same
        A, B = pick(state.elems, e1), pick(state.elems, e2)  # what the wrap computation sees
        gA, gB = pick(state.ground, e1), pick(state.ground, e2)  # what the length change sees
        st, r1w, r2w, arcw = kernels(A, B, ok, j, active)

        # the first mandatory wrap, else the wrap that lengthens the path least
        mand = ok & (st == MANDATORY_WRAP)
        wrapped = ok & (st == WRAPPED)
        change = norm(gA - r1w) + arcw + norm(gB - r2w) - norm(gA - gB)
        any_m = jnp.any(mand, axis=1)
        first_m = jnp.argmax(mand, axis=1)
        looked = wrapped & (~any_m[:, None] | (jnp.arange(W)[None, :] < first_m[:, None]))
        change = jnp.where(looked & ~jnp.isnan(change), change, jnp.inf)
        any_w = jnp.any(change < jnp.inf, axis=1)
        best = jnp.where(any_m, first_m, jnp.argmin(change, axis=1))
        got = active & (any_m | any_w)
        last_seen = W - 1 - jnp.argmax(ok[:, ::-1], axis=1)
        code = jnp.where(any_m, MANDATORY_WRAP, jnp.where(jnp.any(ok, axis=1), st[mrange, last_seen], NO_WRAP))
        # the length changes asked for the end points' ground positions: those are cached now
        asked = jnp.zeros((mw, L), bool)
        asked = asked | jnp.any(looked[:, :, None] & (e1[:, :, None] == e_ids), axis=1)
        asked = asked | jnp.any(looked[:, :, None] & (e2[:, :, None] == e_ids), axis=1)
        freeze = asked & ~state.frozen
        ground = jnp.where(freeze[..., None], state.elems, state.ground)
        frozen = state.frozen | asked
        # insert the two tangent points after the piece's first point
        tb = (ps + best).astype(dt)[:, None]
        insA = got[:, None] & (e_ids[None, :] == eA)
        insB = got[:, None] & (e_ids[None, :] == eA + 1)
        rank = jnp.where(insA, tb + 0.25, jnp.where(insB, tb + 0.5, rank))
        elems = jnp.where(
            insA[..., None],
            r1w[mrange, best][:, None, :],
            jnp.where(insB[..., None], r2w[mrange, best][:, None, :], state.elems),
        )
        ground = jnp.where((insA | insB)[..., None] & ~frozen[..., None], elems, ground)
        arc = jnp.where(got[:, None] & (jnp.arange(K)[None, :] == j[:, None]), arcw[mrange, best][:, None], state.arc)
        pos_codes = jnp.where(first_pass & active[:, None], code[:, None], state.codes)
        return state._replace(elems=elems, ground=ground, frozen=frozen, rank=rank, arc=arc), pos_codes

    def step(state: _PathState, xs):
        pas, pos = xs
        active = ~state.done & (pos < n)
        j = jnp.where((n >= 2) & (pos < 2) & state.swapped, 1 - pos, pos)
        j = jnp.minimum(j, n - 1)

        def work(state):
            new, codes = process(state, j, active, pas == 0)
            return new._replace(codes=jnp.where(jnp.arange(2)[None, :] == pos, codes, state.codes))

        state = jax.lax.cond(jnp.any(active), work, lambda s: s, state)

        def end_of_pass(state):
            live = ~state.done
            length = jax.vmap(lambda r, g, a: _path_length(r, g, a, P)[0])(state.rank, state.ground, state.arc)
            on_path = state.rank < _ABSENT  # the length asked for every point's ground position
            ground = jnp.where((on_path & ~state.frozen)[..., None], state.elems, state.ground)
            frozen = state.frozen | on_path
            converged = (pas > 0) & (jnp.abs(length - state.last_len) < _LENGTH_TOLERANCE)
            swap = live & (pas == 0) & (n >= 2) & (state.codes[:, 0] == NO_WRAP) & (state.codes[:, 1] == INSIDE_RADIUS)
            drop0 = swap[:, None] & ((e_ids[None, :] == P) | (e_ids[None, :] == P + 1))
            return state._replace(
                ground=jnp.where(live[:, None, None], ground, state.ground),
                frozen=jnp.where(live[:, None], frozen, state.frozen),
                rank=jnp.where(drop0, _ABSENT, state.rank),
                last_len=jnp.where(live, length, state.last_len),
                done=state.done | (live & (converged | (n == 1))),
                swapped=state.swapped | swap,
            )

        return jax.lax.cond(pos == K - 1, end_of_pass, lambda s: s, state), None

    passes = _PASSES if np.any(plan["n"] >= 2) else 1
    steps = np.arange(passes * K)
    elems0 = jnp.concatenate([points, jnp.zeros((mw, 2 * K, 3), dt)], axis=1)
    rank0 = np.where(e_ids[None, :] < counts[:, None], e_ids[None, :], _ABSENT)
    init = _PathState(
        elems0,
        elems0,
        jnp.zeros((mw, L), bool),
        jnp.asarray(rank0, dt),
        jnp.zeros((mw, K), dt),
        jnp.zeros(mw, bool),
        jnp.zeros(mw, bool),
        jnp.full(mw, jnp.inf, dt),
        jnp.zeros((mw, 2), jnp.int32),
    )
    state, _ = jax.lax.scan(step, init, (jnp.asarray(steps // K), jnp.asarray(steps % K)))
    lengths, perm, valid, pair = jax.vmap(lambda r, g, a: _path_length(r, g, a, P))(state.rank, state.ground, state.arc)
    return WrappedPaths(lengths, jnp.take_along_axis(state.ground, perm[..., None], axis=1), perm, valid, pair)
