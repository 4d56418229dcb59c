"""Small pure functions on ``(..., 3)`` vectors and ``(..., 3, 3)`` matrices.

Written with elementwise products and sums (no ``dot``/``matmul``), so XLA fuses them with
their neighbours and a GPU in float32 does not round them through TF32.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

__all__ = ["cross", "dot", "matvec", "skew", "safe_sqrt", "norm", "unit"]


def cross(a: Float[ArrayLike, "... 3"], b: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3"]:
    """``a × b``."""
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    return jnp.stack(
        [
            a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
            a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
            a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0],
        ],
        axis=-1,
    )


def dot(a: Float[ArrayLike, "... 3"], b: Float[ArrayLike, "... 3"]) -> Float[Array, ...]:
    """``a · b`` over the last axis."""
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def matvec(A: Float[ArrayLike, "... 3 3"], v: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3"]:
    """``A @ v`` for 3×3 ``A``, unrolled."""
    A = jnp.asarray(A)
    v = jnp.asarray(v)
    return jnp.stack([dot(A[..., i, :], v) for i in range(3)], axis=-1)


def skew(v: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3 3"]:
    """The skew-symmetric matrix ``ṽ`` with ``ṽ u = v × u`` (Du 2021, §2.2)."""
    v = jnp.asarray(v)
    z = jnp.zeros_like(v[..., 0])
    x, y, w = v[..., 0], v[..., 1], v[..., 2]
    return jnp.stack([jnp.stack([z, -w, y], -1), jnp.stack([w, z, -x], -1), jnp.stack([-y, x, z], -1)], axis=-2)


def safe_sqrt(x: Float[ArrayLike, ...]) -> Float[Array, ...]:
    """``√x`` for ``x > 0``, 0 for ``x ≤ 0``, with a finite gradient at 0 (double-where trick).
    NaN stays NaN (a guard must not turn a bad input into a plausible 0)."""
    x = jnp.asarray(x)
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), jnp.where(jnp.isnan(x), x, 0.0))


def norm(v: Float[ArrayLike, "... d"]) -> Float[Array, ...]:
    """``|v|`` over the last axis (any length: planar vectors, 3-vectors, quaternions), with a
    finite gradient (zero) at ``v = 0``; NaN where ``v`` has a NaN, inf where it has an inf."""
    v = jnp.asarray(v)
    return safe_sqrt(jnp.sum(v * v, axis=-1))


def unit(
    v: Float[ArrayLike, "... d"], fallback: Float[ArrayLike, "... d"], tiny: Float[ArrayLike, ...] = 0.0
) -> Float[Array, "... d"]:
    """``v / |v|`` over the last axis (any length), or ``fallback`` where ``|v| <= tiny`` (no NaN
    from a zero vector, finite gradients); where ``v`` has a NaN or an inf the result is not
    finite either, never the fallback."""
    v = jnp.asarray(v)
    n = norm(v)
    ok = n > tiny
    out = jnp.where(ok[..., None], v / jnp.where(ok, n, 1.0)[..., None], fallback)
    return jnp.where(jnp.isnan(n)[..., None], n[..., None], out)
