"""OpenSim's one-variable ``Function`` s as `jaxbio.coordinates.Piecewise` polynomials (numpy).

Each function is turned into the pieces that OpenSim evaluates, with OpenSim's own coefficients
and extrapolation (read from opensim-core, ``OpenSim/Common``):

- ``Constant``: ``value``.
- ``LinearFunction``: ``coefficients = (slope, intercept)``.
- ``PolynomialFunction``: ``coefficients`` from the highest power to the lowest
  (SimTK::Function::Polynomial).
- ``SimmSpline`` (and ``NaturalCubicSpline``, the name it had before OpenSim 3.0: OpenSim reads
  it as a SimmSpline, ``Object::renameType``, so it is *not* a natural spline): the cubic spline of
  Forsythe, Malcolm & Moler, "Computer Methods for Mathematical Computations" (1977), whose end
  conditions match the third derivative at each end to that of the cubic through the four end
  knots (three or fewer knots: see `simm_spline`); outside ``[x₀, x_{n−1}]`` a straight line with
  the end slope (second derivative 0).
- ``PiecewiseLinearFunction``: straight lines between knots, extrapolated with the end slopes.
- ``PiecewiseConstantFunction``: ``y[k]`` on ``[x[k], x[k+1])``, ``y[0]`` before, ``y[n−1]``
  after; derivatives 0.
- ``MultiplierFunction``: ``scale`` times its ``function``.

Knot spacings below ``TINY_NUMBER`` = 1e-7 are raised to it, as in OpenSim. ``GCVSpline`` (a
smoothing spline fitted at load time) and the functions of several variables are not supported.
"""

from __future__ import annotations

import numpy as np

from jaxbio.coordinates import Piecewise

__all__ = [
    "simm_spline",
    "piecewise_linear",
    "piecewise_constant",
    "polynomial",
    "linear",
    "constant",
    "as_line",
    "compose",
]

TINY_NUMBER = 1e-7  # OpenSim/Common/SimmMacros.h


def _knots(x, y, minimum: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"{what}: x and y must be two lists of the same length, got {x.shape} and {y.shape}")
    if len(x) < minimum:
        raise ValueError(f"{what}: needs at least {minimum} knots, got {len(x)}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError(f"{what}: knots must be finite")
    if np.any(np.diff(x) <= 0):
        raise ValueError(f"{what}: x must be strictly increasing, got {x.tolist()}")
    return x, y


def simm_spline(x, y, what: str = "SimmSpline") -> Piecewise:
    """OpenSim's ``SimmSpline`` through the knots ``(x, y)`` (at least 2, ``x`` increasing).

    Second derivatives ``σ`` solve the tridiagonal system of the interior knots
    ``h_{i−1} σ_{i−1} + 2 (h_{i−1} + h_i) σ_i + h_i σ_{i+1} = Δ_i − Δ_{i−1}`` (``h_i`` the knot
    spacings, ``Δ_i`` the slopes of the chords), closed by ``−h₀ σ₀ + h₀ σ₁ = r₀`` and
    ``h_{n−2} σ_{n−2} − h_{n−2} σ_{n−1} = r_{n−1}``, where ``r`` is zero for three knots and,
    for four or more, ``h²`` times the divided difference of the end third derivatives of the
    cubics through the four end knots. Two knots: a straight line. Pieces: ``y_i + b_i t + c_i t²
    + d_i t³`` with ``t = x − x_i``; outside the knots the end tangents.
    """
    x, y = _knots(x, y, 2, what)
    n = len(x)
    h = np.maximum(TINY_NUMBER, np.diff(x))
    chord = np.diff(y) / h
    if n == 2:
        b = np.full(2, chord[0])
        c = np.zeros(2)
        d = np.zeros(2)
    else:
        diag = np.empty(n)
        rhs = np.zeros(n)
        diag[1:-1] = 2.0 * (h[:-1] + h[1:])
        rhs[1:-1] = chord[1:] - chord[:-1]
        diag[0], diag[-1] = -h[0], -h[-1]
        if n > 3:

            def spacing(i, j):
                return max(TINY_NUMBER, x[i] - x[j])

            # third-derivative end conditions (divided differences of the second differences)
            rhs[0] = (rhs[2] / spacing(3, 1) - rhs[1] / spacing(2, 0)) * h[0] ** 2 / spacing(3, 0)
            rhs[-1] = (
                -(rhs[-2] / spacing(n - 1, n - 3) - rhs[-3] / spacing(n - 2, n - 4))
                * h[-1] ** 2
                / spacing(n - 1, n - 4)
            )
        # Thomas algorithm on the symmetric tridiagonal system (off-diagonal h)
        for i in range(1, n):
            t = h[i - 1] / diag[i - 1]
            diag[i] -= t * h[i - 1]
            rhs[i] -= t * rhs[i - 1]
        sigma = np.empty(n)
        sigma[-1] = rhs[-1] / diag[-1]
        for i in range(n - 2, -1, -1):
            sigma[i] = (rhs[i] - h[i] * sigma[i + 1]) / diag[i]
        b = np.empty(n)
        b[:-1] = chord - h * (sigma[1:] + 2.0 * sigma[:-1])
        b[-1] = chord[-1] + h[-1] * (sigma[-2] + 2.0 * sigma[-1])
        c = 3.0 * sigma
        d = np.append(np.diff(sigma) / h, 0.0)
    zeros = np.zeros(2)
    coefficients = np.vstack(
        [
            [y[0], b[0], 0.0, 0.0],  # x < x0: the tangent at x0
            np.column_stack([y[:-1], b[:-1], c[:-1], d[:-1]]),  # [x_i, x_{i+1})
            np.concatenate([[y[-1], b[-1]], zeros]),  # beyond x_{n-1}: the tangent there
        ]
    )
    # the last cubic keeps x_{n-1} itself (OpenSim's second derivative there is 2 c_{n-1})
    breakpoints = np.append(x[:-1], np.nextafter(x[-1], np.inf))
    origins = np.concatenate([[x[0]], x[:-1], [x[-1]]])
    return Piecewise(breakpoints, origins, coefficients)


def piecewise_linear(x, y, what: str = "PiecewiseLinearFunction") -> Piecewise:
    """OpenSim's ``PiecewiseLinearFunction``: chords between the knots, the first and last
    extended beyond them; one knot is a constant."""
    x, y = _knots(x, y, 1, what)
    if len(x) == 1:
        return constant(y[0])
    slope = np.diff(y) / np.maximum(TINY_NUMBER, np.diff(x))
    coefficients = np.column_stack([y[:-1], slope])
    return Piecewise(x[1:-1], x[:-1], coefficients)


def piecewise_constant(x, y, what: str = "PiecewiseConstantFunction") -> Piecewise:
    """OpenSim's ``PiecewiseConstantFunction``: ``y[k]`` from ``x[k]`` to the next knot."""
    x, y = _knots(x, y, 1, what)
    return Piecewise(x[1:], np.zeros(len(x)), y[:, None])


def polynomial(coefficients_high_first, what: str = "PolynomialFunction") -> Piecewise:
    """``Σ a_p x^p`` from OpenSim's coefficient list (highest power first)."""
    a = np.asarray(coefficients_high_first, dtype=float)
    if a.ndim != 1 or len(a) == 0 or not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: coefficients must be a non-empty list of finite numbers, got {a.tolist()}")
    return Piecewise.polynomial(a[::-1])


def linear(slope: float, intercept: float) -> Piecewise:
    """``slope · x + intercept`` (OpenSim's ``LinearFunction``)."""
    return Piecewise.polynomial([intercept, slope])


def constant(value: float) -> Piecewise:
    """``value`` everywhere."""
    return Piecewise.polynomial([value])


def as_line(f: Piecewise, rtol: float = 1e-12) -> tuple[float, float] | None:
    """``(slope, intercept)`` if ``f`` is one straight line everywhere (a LinearFunction, a
    two-knot SimmSpline, …), else None."""
    a, o = f.coefficients, f.origins
    if a.shape[1] > 2 and np.any(a[:, 2:] != 0):
        return None
    slope = a[:, 1] if a.shape[1] > 1 else np.zeros(len(a))
    intercept = a[:, 0] - slope * o
    scale = 1.0 + float(np.max(np.abs(np.concatenate([slope, intercept]))))
    if np.ptp(slope) > rtol * scale or np.ptp(intercept) > rtol * scale:
        return None
    return float(slope[0]), float(intercept[0])


def compose(f: Piecewise, g: Piecewise, what: str) -> Piecewise:
    """``f(g(x))`` as a `Piecewise`, when ``f`` or ``g`` is a straight line (`as_line`);
    ``ValueError`` naming ``what`` otherwise (the composition of two curves is not one)."""
    line_f, line_g = as_line(f), as_line(g)
    if line_f is not None:  # a g + b
        a, b = line_f
        coefficients = a * g.coefficients
        coefficients[:, 0] += b
        return Piecewise(g.breakpoints, g.origins, coefficients)
    if line_g is None:
        raise ValueError(f"{what}: both functions are curves; their composition is not supported")
    s, t = line_g  # f(s x + t): piece (s x + t − o)^p = s^p (x − (o − t)/s)^p
    if s == 0.0:
        return constant(float(_value(f, t)))
    powers = s ** np.arange(f.coefficients.shape[1])
    breakpoints, origins, coefficients = (f.breakpoints - t) / s, (f.origins - t) / s, f.coefficients * powers
    if s < 0:
        breakpoints, origins, coefficients = breakpoints[::-1], origins[::-1], coefficients[::-1]
    return Piecewise(breakpoints, origins, coefficients)


def _value(f: Piecewise, x: float) -> float:
    piece = int(np.sum(x >= f.breakpoints))
    return float(np.polynomial.polynomial.polyval(x - f.origins[piece], f.coefficients[piece]))
