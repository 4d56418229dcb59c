"""Unit quaternions ``(w, x, y, z)`` for attitudes (Du 2021, §2.1).

Convention: active rotations, ``v_world = rotate(q, v_body) = R(q) @ v_body``, with
``R(q)`` the attitude matrix of Du 2021, eq. 1. Every function works on a single
quaternion ``(4,)`` or on any leading batch ``(..., 4)``; none of them uses a matmul,
so float32 on a GPU is not degraded by TF32. `multiply`, `to_matrix`, `from_matrix`, `normalize`,
`from_axis_angle` and `from_body_fixed_xyz` also work on numpy arrays (and then return numpy, with no JAX dispatch), for model building
outside jit.

Scipy's ``Rotation`` stores ``(x, y, z, w)``; convert with ``q[..., [1, 2, 3, 0]]``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio.spatial import cross as _cross
from jaxbio.spatial import unit as _unit

__all__ = [
    "multiply",
    "conjugate",
    "rotate",
    "to_matrix",
    "from_axis_angle",
    "from_body_fixed_xyz",
    "from_matrix",
    "normalize",
    "identity",
]


def _xp(*xs):
    """numpy when every input is a numpy array (build time), else jax.numpy."""
    return np if all(isinstance(x, np.ndarray) for x in xs) else jnp


def _one(*xs) -> bool:
    """Every input a single float64 numpy quaternion or vector: the model readers' case, where
    Python float arithmetic (the same IEEE operations, in the same order, as numpy's) skips
    numpy's per-call overhead (`jaxbio.io.osim` composes a few thousand poses per model)."""
    return all(isinstance(x, np.ndarray) and x.ndim == 1 and x.dtype == np.float64 for x in xs)


def identity(dtype=None) -> Float[Array, 4]:
    """The identity rotation ``(1, 0, 0, 0)``."""
    return jnp.array([1.0, 0.0, 0.0, 0.0], dtype=dtype)


def multiply(p: Float[ArrayLike, "... 4"], q: Float[ArrayLike, "... 4"]) -> Float[Array, "... 4"]:
    """Hamilton product ``p ⊗ q`` (apply ``q`` first, then ``p``)."""
    if _one(p, q):
        pw, px, py, pz = p.tolist()
        qw, qx, qy, qz = q.tolist()
        return np.array(
            [
                pw * qw - px * qx - py * qy - pz * qz,
                pw * qx + px * qw + py * qz - pz * qy,
                pw * qy - px * qz + py * qw + pz * qx,
                pw * qz + px * qy - py * qx + pz * qw,
            ]
        )
    xp = _xp(p, q)
    p = xp.asarray(p)
    q = xp.asarray(q)
    pw, px, py, pz = p[..., 0], p[..., 1], p[..., 2], p[..., 3]
    qw, qx, qy, qz = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return xp.stack(
        [
            pw * qw - px * qx - py * qy - pz * qz,
            pw * qx + px * qw + py * qz - pz * qy,
            pw * qy - px * qz + py * qw + pz * qx,
            pw * qz + px * qy - py * qx + pz * qw,
        ],
        axis=-1,
    )


def conjugate(q: Float[ArrayLike, "... 4"]) -> Float[Array, "... 4"]:
    """``q* = (w, -x, -y, -z)``; the inverse rotation for a unit quaternion."""
    q = jnp.asarray(q)
    return q * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def rotate(q: Float[ArrayLike, "... 4"], v: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3"]:
    """``R(q) v`` for a unit quaternion ``q``, without forming ``R``.

    Uses ``v' = v + 2 w (u × v) + 2 u × (u × v)`` with ``u = (x, y, z)``.
    """
    q = jnp.asarray(q)
    v = jnp.asarray(v)
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * _cross(u, v)
    return v + w * t + _cross(u, t)


def to_matrix(q: Float[ArrayLike, "... 4"]) -> Float[Array, "... 3 3"]:
    """Attitude matrix of Du 2021, eq. 1.

    ``R = (w² − |u|²) E + 2 u uᵀ + 2 w ũ`` with ``ũ`` the skew matrix of ``u = (x, y, z)``.
    (The extracted text of eq. 1 prints ``‖q‖² E``; for a rotation the scalar term must be
    ``w² − |u|²``, which is what Dumas et al. 2004 and every rotation library use.)
    """
    if _one(q):
        w, x, y, z = q.tolist()
        s = w * w - x * x - y * y - z * z
        return np.array(
            [
                [s + 2 * x * x, 2 * (x * y - w * z), 2 * (x * z + w * y)],
                [2 * (x * y + w * z), s + 2 * y * y, 2 * (y * z - w * x)],
                [2 * (x * z - w * y), 2 * (y * z + w * x), s + 2 * z * z],
            ]
        )
    xp = _xp(q)
    q = xp.asarray(q)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    s = w * w - x * x - y * y - z * z
    rows = [
        [s + 2 * x * x, 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), s + 2 * y * y, 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), s + 2 * z * z],
    ]
    return xp.stack([xp.stack(r, axis=-1) for r in rows], axis=-2)


def from_axis_angle(axis: Float[ArrayLike, "... 3"], angle: Float[ArrayLike, ...]) -> Float[Array, "... 4"]:
    """Rotation by ``angle`` (rad, counter-clockwise) about the unit vector ``axis`` (numpy in,
    numpy out when both are numpy arrays)."""
    xp = _xp(axis, angle)
    axis = xp.asarray(axis)
    half = 0.5 * xp.asarray(angle)[..., None]
    return xp.concatenate([xp.cos(half), xp.sin(half) * axis], axis=-1)


def from_body_fixed_xyz(angles: Float[ArrayLike, "... 3"]) -> Float[Array, "... 4"]:
    """Rotation by body-fixed (intrinsic) X-Y-Z angles ``(a, b, c)`` rad: ``R = Rx(a) Ry(b) Rz(c)``
    (Simbody's ``setRotationToBodyFixedXYZ``, OpenSim's ``xyz_body_rotation`` and
    ``orientation`` properties). Works on numpy arrays too (returns numpy)."""
    xp = _xp(angles)
    angles = xp.asarray(angles)
    half = 0.5 * angles
    c, s = xp.cos(half), xp.sin(half)
    z = xp.zeros_like(half[..., 0])
    qx = xp.stack([c[..., 0], s[..., 0], z, z], axis=-1)
    qy = xp.stack([c[..., 1], z, s[..., 1], z], axis=-1)
    qz = xp.stack([c[..., 2], z, z, s[..., 2]], axis=-1)
    return multiply(multiply(qx, qy), qz)


def from_matrix(R: Float[ArrayLike, "... 3 3"]) -> Float[Array, "... 4"]:
    """Unit quaternion (``w ≥ 0``) of a rotation matrix, robust for every rotation.

    Shepperd's method: of the four candidate formulas, use the one whose pivot
    (``1 + trace`` or ``1 + 2 R_kk − trace``) is largest, so no division by a small number
    happens, including at 180° rotations.
    """
    xp = _xp(R)
    R = xp.asarray(R)
    r00, r11, r22 = R[..., 0, 0], R[..., 1, 1], R[..., 2, 2]
    tr = r00 + r11 + r22
    pivots = xp.stack([1 + tr, 1 + 2 * r00 - tr, 1 + 2 * r11 - tr, 1 + 2 * r22 - tr], axis=-1)
    k = xp.argmax(pivots, axis=-1)
    d21 = R[..., 2, 1] - R[..., 1, 2]
    d02 = R[..., 0, 2] - R[..., 2, 0]
    d10 = R[..., 1, 0] - R[..., 0, 1]
    s01 = R[..., 0, 1] + R[..., 1, 0]
    s02 = R[..., 0, 2] + R[..., 2, 0]
    s12 = R[..., 1, 2] + R[..., 2, 1]
    # each candidate is 4 * (component of the pivot) * q; normalised below
    cands = xp.stack(
        [
            xp.stack([pivots[..., 0], d21, d02, d10], axis=-1),
            xp.stack([d21, pivots[..., 1], s01, s02], axis=-1),
            xp.stack([d02, s01, pivots[..., 2], s12], axis=-1),
            xp.stack([d10, s02, s12, pivots[..., 3]], axis=-1),
        ],
        axis=-2,
    )
    q = xp.take_along_axis(cands, k[..., None, None], axis=-2)[..., 0, :]
    q = normalize(q)
    return xp.where(q[..., :1] < 0, -q, q)


def normalize(q: Float[ArrayLike, "... 4"]) -> Float[Array, "... 4"]:
    """``q / |q|``; a zero quaternion maps to the identity instead of NaN (numpy in, numpy out)."""
    if isinstance(q, np.ndarray):
        n = np.sqrt(np.sum(q * q, axis=-1, keepdims=True))
        out = np.where(n > 0, q / np.where(n > 0, n, 1.0), np.array([1.0, 0.0, 0.0, 0.0], q.dtype))
        return np.where(np.isnan(n), n, out)
    q = jnp.asarray(q)
    return _unit(q, identity(q.dtype))
