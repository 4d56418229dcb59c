"""Structure-of-arrays algebra for the recursion kernels.

Inside the kernels a 3-vector is a tuple ``(x, y, z)`` and a quaternion a tuple
``(w, x, y, z)`` of same-shaped arrays (one entry per segment of a level, and under `jax.vmap`
one more axis for the batch). Compared with ``(..., 3)`` arrays this removes every
slice/stack/reshape around the tiny trailing axis: the compiled HLO is plain elementwise
arithmetic that XLA fuses into a few loops, which cut compile time and per-state time several
fold (see benchmarks/inverse_dynamics.py). Public functions convert at the boundary only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

Vec = tuple  # (x, y, z)
Quat = tuple  # (w, x, y, z)


def keep(x, on: bool = True):
    """``x`` (a pytree of arrays) computed by one loop and materialised (see
    `jaxbio.dynamics.batch_last`'s docstring: XLA's CPU backend has no multi-output loop fusion).

    Each leaf ``a`` becomes ``Σ_r [a, 0][r]``, one variadic `jax.lax.reduce` over a padded axis
    of two rows: XLA fuses every producer of every leaf into that one multi-output reduction, so
    an intermediate shared by several leaves is computed once per element, and the leaves are
    written to memory once. Exact: ``a + 0 = a``.
    """
    if not on:
        return x
    leaves, treedef = jax.tree_util.tree_flatten(x)
    padded = [jnp.stack([a, jnp.zeros_like(a)]) for a in leaves]
    zeros = [jnp.zeros((), a.dtype) for a in leaves]
    out = lax.reduce(padded, zeros, lambda u, v: tuple(a + b for a, b in zip(u, v)), [0])
    return jax.tree_util.tree_unflatten(treedef, list(out))


def split(a, k: int) -> tuple:
    """``(..., k)`` array -> tuple of ``k`` arrays ``(...)``."""
    return tuple(a[..., i] for i in range(k))


def join(t: tuple):
    """Tuple of arrays -> stacked ``(..., k)`` array."""
    return jnp.stack(t, axis=-1)


def add(a: Vec, b: Vec) -> Vec:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def sub(a: Vec, b: Vec) -> Vec:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def scale(a: Vec, s) -> Vec:
    return (a[0] * s, a[1] * s, a[2] * s)


def cross(a: Vec, b: Vec) -> Vec:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def dot(a: Vec, b: Vec):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def where(c, a: tuple, b: tuple) -> tuple:
    return tuple(jnp.where(c, x, y) for x, y in zip(a, b))


def qmul(p: Quat, q: Quat) -> Quat:
    pw, px, py, pz = p
    qw, qx, qy, qz = q
    return (
        pw * qw - px * qx - py * qy - pz * qz,
        pw * qx + px * qw + py * qz - pz * qy,
        pw * qy - px * qz + py * qw + pz * qx,
        pw * qz + px * qy - py * qx + pz * qw,
    )


def qrot(q: Quat, v: Vec) -> Vec:
    """``R(q) v``: ``v + w t + u × t`` with ``t = 2 u × v``."""
    u = q[1:]
    t = scale(cross(u, v), 2.0)
    return add(add(v, scale(t, q[0])), cross(u, t))


def qrot_inv(q: Quat, v: Vec) -> Vec:
    """``R(q)ᵀ v``."""
    return qrot((q[0], -q[1], -q[2], -q[3]), v)


def matvec(m: tuple, v: Vec) -> Vec:
    """``m`` a 9-tuple (row-major 3×3)."""
    return (
        m[0] * v[0] + m[1] * v[1] + m[2] * v[2],
        m[3] * v[0] + m[4] * v[1] + m[5] * v[2],
        m[6] * v[0] + m[7] * v[1] + m[8] * v[2],
    )


def matvec_t(m: tuple, v: Vec) -> Vec:
    """``mᵀ v`` for a row-major 9-tuple ``m``."""
    return (
        m[0] * v[0] + m[3] * v[1] + m[6] * v[2],
        m[1] * v[0] + m[4] * v[1] + m[7] * v[2],
        m[2] * v[0] + m[5] * v[1] + m[8] * v[2],
    )


def qmat(q: Quat) -> tuple:
    """Row-major rotation matrix of a unit quaternion (Du 2021, eq. 1) as a 9-tuple."""
    w, x, y, z = q
    return (
        1 - 2 * (y * y + z * z),
        2 * (x * y - w * z),
        2 * (x * z + w * y),
        2 * (x * y + w * z),
        1 - 2 * (x * x + z * z),
        2 * (y * z - w * x),
        2 * (x * z - w * y),
        2 * (y * z + w * x),
        1 - 2 * (x * x + y * y),
    )
