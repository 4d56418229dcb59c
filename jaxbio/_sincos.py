"""``sin`` and ``cos`` from elementwise arithmetic only (fdlibm's algorithm), shared by the
batched kernels: XLA on CPU calls libm's scalar ``sin``/``cos`` one element at a time, whereas
this vectorises (see `jaxbio.papers.watanabe_pendulum` and `jaxbio.dynamics.batch_last`)."""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["sincos"]


# fdlibm's Cody–Waite split of π/2 (33 + 33 + 33 bits) and its sin/cos kernel polynomials on |r| ≤ π/4.
_PIO2 = (1.57079632673412561417e00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)
_INVPIO2 = 6.36619772367581382433e-01
_S = (
    -1.66666666666666324348e-01,
    8.33333333332248946124e-03,
    -1.98412698298579493134e-04,
    2.75573137070700676789e-06,
    -2.50507602534068634195e-08,
    1.58969099521155010221e-10,
)
_C = (
    4.16666666666666019037e-02,
    -1.38888888888741095749e-03,
    2.48015872894767294178e-05,
    -2.75573143513906633035e-07,
    2.08757232129817482790e-09,
    -1.13596475577881948265e-11,
)


def _poly(z, coeffs):
    out = coeffs[-1]
    for c in coeffs[-2::-1]:
        out = c + z * out
    return out


def sincos(x):
    """``(sin x, cos x)`` from elementwise arithmetic only (no libm call), so XLA vectorises it.

    fdlibm's algorithm: ``x = k π/2 + r`` with a three-part Cody–Waite reduction, the minimax
    kernels on ``|r| ≤ π/4``, and the quadrant ``k mod 4``. Absolute error ≤ ~2e-16 (float64)
    for ``|x| ≤ 1e6`` rad (the reduction is exact while ``|k| < 2²⁰``; beyond that the error
    grows like ``ulp(x)``). Differentiable (``round`` has zero derivative, so
    ``d sin/dx`` is the kernel's derivative, i.e. ``cos x`` to round-off).
    """
    x = jnp.asarray(x)
    k = jnp.round(x * _INVPIO2)
    r = ((x - k * _PIO2[0]) - k * _PIO2[1]) - k * _PIO2[2]
    z = r * r
    s = r + r * z * _poly(z, _S)
    hz = 0.5 * z
    w = 1.0 - hz
    c = w + (((1.0 - w) - hz) + z * z * _poly(z, _C))
    quadrant = k - 4.0 * jnp.floor(0.25 * k)  # k mod 4, as a float
    odd = (quadrant == 1.0) | (quadrant == 3.0)
    sin = jnp.where(odd, c, s)
    cos = jnp.where(odd, s, c)
    sin = jnp.where(quadrant >= 2.0, -sin, sin)
    cos = jnp.where((quadrant == 1.0) | (quadrant == 2.0), -cos, cos)
    return sin, cos
