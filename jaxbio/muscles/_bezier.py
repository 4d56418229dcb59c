"""Segmented quintic Bézier curves as OpenSim builds and evaluates them.

OpenSim's Millard2012 muscle curves are ``SmoothSegmentedFunction`` objects: a chain of quintic
Bézier "corners" ``(x(u), y(u))``, ``u ∈ [0, 1]``, joined with matching slopes, extended by
straight lines outside ``[x_lo, x_hi]`` (``OpenSim/Common/SmoothSegmentedFunction.cpp``,
``SegmentedQuinticBezierToolkit.cpp``). Evaluating ``y(x)`` inverts ``x(u) = x`` on the segment
that holds ``x``. OpenSim starts Newton's method from a cubic-spline fit of ``u(x)`` (100 samples
per segment) and stops at ``|x(u) − x| ≤ 100 ε`` (``UTOL``, at most 20 steps).

Here each segment is kept as power-basis coefficients of ``x(u)`` and ``y(u)`` (the constant is
the segment's first control point, the rest are computed from differences to it, so their rounding
scales with the segment's extent). The inversion is Newton's method safeguarded by bisection
(``rtsafe``: a step leaving the sign-change bracket ``[lo, hi] ⊂ [0, 1]`` bisects instead), started
at ``u = (x − x(0))/(x(1) − x(0))``, in a `jax.lax.while_loop` until a step is below ``ε^(2/3)``
(the next would change ``u`` by about ``ε^(4/3)``); on the curves OpenSim builds that takes at
most 8 steps, about 5 on average. ``x(u)`` is monotone on every corner OpenSim builds (its
derivative is a Bernstein quartic with non-negative coefficients), so the bracket holds the root.
The solve is not differentiated: a `jax.custom_jvp` gives ``du = (dx − Σᵢ daᵢ uⁱ)/x'(u)``, the
implicit-function derivative, so ``dy/dx = y'(u)/x'(u)`` and derivatives with respect to the
control points (hence to the curve parameters) are exact, to every order.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

#: ``sqrt(SimTK::Eps)`` in double precision: OpenSim's test for parallel corner tangents.
ROOT_EPS = math.sqrt(np.finfo(np.float64).eps)
_MAX_STEPS = 64


def scale_curviness(curviness):
    """OpenSim's ``SmoothSegmentedFunctionFactory::scaleCurviness``: ``0.1 + 0.8 c``."""
    return 0.1 + 0.8 * curviness


def corner_control_points(x0, y0, dydx0, x1, y1, dydx1, c):
    """Control points ``(px, py)`` (each ``(..., 6)``) of the quintic Bézier corner from
    ``(x0, y0)`` with slope ``dydx0`` to ``(x1, y1)`` with slope ``dydx1``
    (``calcQuinticBezierCornerControlPoints``; ``c`` is the *scaled* curviness).

    The two tangent lines meet at ``(x_C, y_C)`` (the midpoint in ``x`` if the slopes differ by
    at most ``√ε``); the inner control points sit a fraction ``c`` of the way towards it, doubled.
    """
    x0, y0, dydx0, x1, y1, dydx1, c = jnp.broadcast_arrays(x0, y0, dydx0, x1, y1, dydx1, c)
    diff = dydx0 - dydx1
    parallel = jnp.abs(diff) <= ROOT_EPS
    xc = jnp.where(parallel, 0.5 * (x1 + x0), (y1 - y0 - x1 * dydx1 + x0 * dydx0) / jnp.where(parallel, 1.0, diff))
    yc = (xc - x1) * dydx1 + y1
    x0m = x0 + c * (xc - x0)
    y0m = y0 + c * (yc - y0)
    x1m = x1 + c * (xc - x1)
    y1m = y1 + c * (yc - y1)
    px = jnp.stack([x0, x0m, x0m, x1m, x1m, x1], axis=-1)
    py = jnp.stack([y0, y0m, y0m, y1m, y1m, y1], axis=-1)
    return px, py


def corner_is_c_shaped(x0, y0, dydx0, x1, y1, dydx1) -> np.ndarray:
    """OpenSim's check that a corner is 'C' shaped, not 'S' shaped: the chord is longer than
    either distance to the tangents' intersection (numpy, concrete inputs)."""
    x0, y0, dydx0, x1, y1, dydx1 = np.broadcast_arrays(
        *(np.asarray(v, np.float64) for v in (x0, y0, dydx0, x1, y1, dydx1))
    )
    diff = dydx0 - dydx1
    parallel = np.abs(diff) <= ROOT_EPS
    with np.errstate(divide="ignore", invalid="ignore"):
        xc = np.where(parallel, 0.5 * (x1 + x0), (y1 - y0 - x1 * dydx1 + x0 * dydx0) / np.where(parallel, 1.0, diff))
    yc = (xc - x1) * dydx1 + y1
    a = (xc - x0) ** 2 + (yc - y0) ** 2
    b = (xc - x1) ** 2 + (yc - y1) ** 2
    chord = (x1 - x0) ** 2 + (y1 - y0) ** 2
    return (chord > a) & (chord > b)


# power-basis coefficients of the quintic Bernstein polynomials: x(u) = Σᵢ uⁱ Σₖ M[i, k] pₖ
_POWER = np.array(
    [
        [math.comb(5, k) * math.comb(5 - k, i - k) * (-1) ** (i - k) if i >= k else 0.0 for k in range(6)]
        for i in range(6)
    ]
)


def power_coefficients(p):
    """``(..., 6)`` control points → ``(..., 6)`` coefficients of ``1, u, …, u⁵``. The constant
    is ``p₀`` and the others are computed from ``pₖ − p₀`` (the Bernstein rows beyond the first
    sum to 0), so their rounding scales with the segment's extent, not with ``|p₀|``."""
    rel = p - p[..., :1]
    tail = jnp.einsum("ik,...k->...i", jnp.asarray(_POWER[1:], p.dtype), rel)
    return jnp.concatenate([p[..., :1], tail], axis=-1)


def _horner_tail(u, a):
    """``Σᵢ₌₁ aᵢ uⁱ`` (the polynomial less its constant) and its derivative, ``a`` ``(..., 6)``."""
    value = a[..., 5]
    slope = jnp.zeros_like(value)
    for i in range(4, 0, -1):
        slope = slope * u + value
        value = value * u + a[..., i]
    slope = slope * u + value
    return value * u, slope


def _horner(u, a):
    """``Σᵢ aᵢ uⁱ`` and its derivative, ``a`` ``(..., 6)`` power coefficients."""
    tail, slope = _horner_tail(u, a)
    return a[..., 0] + tail, slope


@jax.custom_jvp
def solve_u(x, a):
    """``u ∈ [0, 1]`` with ``x(u) = Σᵢ aᵢ uⁱ = x`` ``(...)``, for power coefficients ``a``
    ``(..., 6)`` of a non-decreasing quintic with ``x(0) ≤ x ≤ x(1)`` (see the module docstring)."""
    x, a = jax.lax.stop_gradient((x, a))
    offset = a[..., 0] - x  # x(u) − x = offset + Σᵢ₌₁ aᵢ uⁱ
    width = jnp.sum(a[..., 1:], axis=-1)
    u = jnp.clip(-offset / jnp.where(width > 0, width, 1.0), 0.0, 1.0)
    # Newton converges quadratically: after a step below ε^(2/3) the error is ~ε^(4/3) ≪ ε, and
    # rounding-level oscillations (steps ~10 ε) stop at once
    tol_u = float(jnp.finfo(x.dtype).eps) ** (2.0 / 3.0)

    def cond(state):
        i, _, _, _, step = state
        return (i < _MAX_STEPS) & jnp.any(jnp.abs(step) > tol_u)

    def body(state):
        i, u, lo, hi, _ = state
        f, df = _horner_tail(u, a)
        f = f + offset
        lo = jnp.where(f < 0, u, lo)
        hi = jnp.where(f > 0, u, hi)
        newton = u - f / jnp.where(df > 0, df, 1.0)
        ok = (df > 0) & (newton >= lo) & (newton <= hi)
        new = jnp.where(f == 0, u, jnp.where(ok, newton, 0.5 * (lo + hi)))
        return i + 1, new, lo, hi, new - u

    state = (0, u, jnp.zeros_like(u), jnp.ones_like(u), jnp.ones_like(u))
    return jax.lax.while_loop(cond, body, state)[1]


@solve_u.defjvp
def _solve_u_jvp(primals, tangents):
    x, a = primals
    dx, da = tangents
    u = solve_u(x, a)
    # x = Σ aᵢ uⁱ  ⇒  dx = x'(u) du + Σ daᵢ uⁱ
    slope = _horner(u, a)[1]
    slope = jnp.where(slope > 0, slope, jnp.finfo(u.dtype).tiny)
    du = (dx - _horner(u, da)[0]) / slope
    return u, du


class Curve(NamedTuple):
    """A built OpenSim ``SmoothSegmentedFunction`` with ``S`` Bézier segments (batch ``...``):

    - ``coeff_x``, ``coeff_y``: ``(..., S, 6)`` power coefficients of ``x(u)``, ``y(u)`` per segment
      (`power_coefficients` of the control points), ordered in ``x``.
    - ``x_lo``, ``x_hi``: ``(...)`` the Bézier domain; outside it the curve is the line through
      ``(x_lo, y_lo)`` with slope ``slope_lo`` (left) or ``(x_hi, y_hi)`` with ``slope_hi`` (right).
    """

    coeff_x: jax.Array
    coeff_y: jax.Array
    x_lo: jax.Array
    x_hi: jax.Array
    y_lo: jax.Array
    y_hi: jax.Array
    slope_lo: jax.Array
    slope_hi: jax.Array

    @classmethod
    def build(cls, ctrl_x, ctrl_y, x_lo, x_hi, y_lo, y_hi, slope_lo, slope_hi) -> Curve:
        """From control points ``(..., S, 6)`` (``ctrl_x`` non-decreasing within each segment)."""
        return cls(power_coefficients(ctrl_x), power_coefficients(ctrl_y), x_lo, x_hi, y_lo, y_hi, slope_lo, slope_hi)

    def value_and_derivative(self, x):
        """``(y, dy/dx)`` ``(...)`` at ``x`` (broadcast against the batch shape).

        The segment holding ``x`` is the first with ``x_start ≤ x < x_end`` (``calcIndex``); the
        slope is ``y'(u)/x'(u)``.
        """
        x = jnp.asarray(x)
        x = x.astype(jnp.result_type(x, self.coeff_x))
        batch = jnp.broadcast_shapes(x.shape, self.coeff_x.shape[:-2], jnp.shape(self.x_lo), jnp.shape(self.x_hi))
        x = jnp.broadcast_to(x, batch)
        below = x < self.x_lo
        above = x > self.x_hi
        x_in = jnp.where(below, self.x_lo, jnp.where(above, self.x_hi, x))
        n_seg = self.coeff_x.shape[-2]
        idx = jnp.sum(x_in[..., None] >= self.coeff_x[..., 1:, 0], axis=-1)  # segment starts: x(0) = a₀
        pick = (jnp.arange(n_seg) == idx[..., None]).astype(x.dtype)[..., None]  # (..., S, 1)
        ax = jnp.sum(pick * self.coeff_x, axis=-2)
        ay = jnp.sum(pick * self.coeff_y, axis=-2)
        u = solve_u(x_in, ax)
        y_bez, dydu = _horner(u, ay)
        dxdu = _horner(u, ax)[1]
        slope_bez = dydu / jnp.where(dxdu > 0, dxdu, jnp.finfo(dxdu.dtype).tiny)
        y = jnp.where(
            below,
            self.y_lo + self.slope_lo * (x - self.x_lo),
            jnp.where(above, self.y_hi + self.slope_hi * (x - self.x_hi), y_bez),
        )
        slope = jnp.where(below, self.slope_lo, jnp.where(above, self.slope_hi, slope_bez))
        return y, jnp.broadcast_to(slope, batch)

    def __call__(self, x):
        """The curve's value at ``x``."""
        return self.value_and_derivative(x)[0]


def stack_curves(curves) -> Curve:
    """One `Curve` evaluating several curves at once: batch ``(..., k)`` for ``k`` curves of batch
    ``(...)``, segments padded to the longest (padded segments start beyond every ``x``, so they
    are never selected). One evaluation site instead of ``k`` keeps compiled programs small."""
    n_seg = max(c.coeff_x.shape[-2] for c in curves)

    def pad(c: Curve) -> Curve:
        extra = n_seg - c.coeff_x.shape[-2]
        if not extra:
            return c
        big = jnp.finfo(c.coeff_x.dtype).max

        def grow(a, start):
            widths = [(0, 0)] * a.ndim
            widths[-2] = (0, extra)
            padded = jnp.pad(a, widths)
            return padded.at[..., -extra:, 0].set(start)

        return c._replace(coeff_x=grow(c.coeff_x, big), coeff_y=grow(c.coeff_y, 0.0))

    padded = [pad(c) for c in curves]
    fields = []
    for i, name in enumerate(Curve._fields):
        parts = [getattr(c, name) for c in padded]
        if i < 2:  # (..., S, 6) coefficients → (..., k, S, 6)
            fields.append(jnp.stack(parts, axis=-3))
        else:  # (...) ends → (..., k)
            fields.append(jnp.stack(jnp.broadcast_arrays(*[jnp.asarray(p) for p in parts]), axis=-1))
    return Curve(*fields)
