"""The configuration manifold of a `SegmentTree`: ``q ⊕ dq``, ``q1 ⊖ q0`` and ``q̇ = G(q) v``.

With ball (``"spherical"``) and ``"free"`` joints, a configuration ``q`` (``tree.nq`` entries)
is not a vector space: a joint's rotation is a unit quaternion ``(w, x, y, z)``, and a velocity,
a step or a difference ``v`` has ``tree.nv`` entries (the joint's angular velocity ``ω`` in the
segment frame, ``[v, ω]`` for a free joint). This module holds the maps between the two, per joint
type (`jaxbio.tree.JOINT_NQ`/``JOINT_NV``; API.md):

- ``"revolute"`` / ``"prismatic"``: ``q`` an angle (rad) / a slide (m), ``v = q̇``;
  ``integrate(q, dq) = q + dq``.
- ``"spherical"``: ``q = Q`` (4), ``v = ω`` (3, rad/s, segment frame); ``Q ⊗ exp(dq)``.
- ``"free"``: ``q = [t, Q]`` (7: m in the joint frame, then the quaternion), ``v = [v, ω]`` (6,
  segment frame); the SE(3) product ``M(t, Q) · exp6([v, ω])``.
- ``"fixed"``: nothing.

These are Pinocchio's conventions (``pinocchio.integrate``, ``difference``, ``neutral`` on
``JointModelSpherical``/``JointModelFreeFlyer``; its quaternions are stored ``(x, y, z, w)``).

**Quaternions are read as rotations.** Every function uses the rotation of ``Q / |Q|``, so a
quaternion that drifted off the unit sphere in an ODE solver still means the rotation it points
to, and nothing is silently projected: `integrate` returns ``Q ⊗ exp(dq)``, whose norm is
``|Q|`` (unit in, unit out), and `velocity_to_qdot` returns ``½ Q ⊗ (0, ω)``, tangent to the
sphere of radius ``|Q|`` (the exact flow of ``q̇ = G(q) v`` keeps ``|Q|``). Project with
`normalize`; refuse non-unit quaternions with `check_unit` or ``check=True``.

All functions are pure, take one sample (batch with `jax.vmap`) and work under `jax.jit` and
`jax.grad`; the small-angle branches are Taylor series (a double ``where``), so derivatives at
``dq = 0`` and ``q0 = q1`` are finite and exact. The joint layout is static: each joint type is
one vectorised gather, whatever the number of segments.
"""

from __future__ import annotations

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio._validate import (
    as_coordinates,
    as_real,
    check_key,
    check_values,
    concrete,
    jit_checked,
)
from jaxbio.spatial import cross, dot
from jaxbio.tree import SegmentTree
from jaxbio.model import tree_of

__all__ = [
    "integrate",
    "difference",
    "neutral",
    "random",
    "normalize",
    "velocity_to_qdot",
    "velocity_to_qdot_transpose",
    "qdot_to_velocity",
    "check_unit",
]

#: `check_unit`'s default tolerance on ``| |Q| − 1 |`` (the model loader's, API.md)
UNIT_TOLERANCE = 1e-6

# ---- static layout ------------------------------------------------------------------------------


def _assemble(order: np.ndarray, axial, rotation, translation):
    """One configuration (``order = q_order``) or velocity (``v_order``) vector from its groups."""
    return jnp.concatenate([axial, rotation.reshape(-1), translation.reshape(-1)])[order]


# ---- SO(3) and SE(3) maps on quaternions, vectorised over (..., k) ------------------------------
# Each function of θ² has a Taylor branch below a threshold (double `where`: the exact branch never
# sees θ = 0, so values and gradients are finite); the thresholds keep the truncation error of the
# series and the rounding of the exact forms (≈ eps / θ²) both below 1e-13 in float64.

_SMALL = 1e-2  # θ² (rad²) below which the cos/sin/V/V⁻¹ series are used
_SMALL_ATAN = 1e-3  # (s / w)² below which atan(x)/x is a series (it converges slowly)


def _split(theta2, small):
    """``(θ, guarded θ²)``: θ computed only where not ``small`` (1 elsewhere)."""
    t2 = jnp.where(small, 1.0, theta2)
    return jnp.sqrt(t2), t2


def _exp3(w: Float[ArrayLike, "... 3"]) -> Float[Array, "... 4"]:
    """Unit quaternion of the rotation vector ``w`` (rad): ``(cos(θ/2), sin(θ/2) w/θ)``, θ = |w|."""
    w = jnp.asarray(w)
    t2 = dot(w, w)
    small = t2 < _SMALL
    t, _ = _split(t2, small)
    c = jnp.where(small, 1 - t2 / 8 + t2**2 / 384 - t2**3 / 46080, jnp.cos(t / 2))
    s = jnp.where(small, 0.5 - t2 / 48 + t2**2 / 3840 - t2**3 / 645120, jnp.sin(t / 2) / t)
    return jnp.concatenate([c[..., None], s[..., None] * w], axis=-1)


def _log3(Q: Float[ArrayLike, "... 4"]) -> Float[Array, "... 3"]:
    """The shortest rotation vector (rad, ``|·| ≤ π``) of the rotation of ``Q / |Q|``.

    ``Q`` and ``−Q`` give the same result; the norm of ``Q`` does not matter (θ = 2 atan2(|u|, w)
    with ``Q = (w, u)``, w ≥ 0). A zero quaternion gives 0.
    """
    Q = jnp.asarray(Q)
    Q = jnp.where(Q[..., :1] < 0, -Q, Q)
    w, u = Q[..., 0], Q[..., 1:]
    s2 = dot(u, u)
    small = s2 <= _SMALL_ATAN * w * w  # includes u = 0 (also for w = 0)
    w_safe = jnp.where(small & (w > 0), w, 1.0)
    r2 = jnp.where(small, s2, 0.0) / (w_safe * w_safe)
    series = (2 / w_safe) * (1 - r2 / 3 + r2**2 / 5 - r2**3 / 7 + r2**4 / 9)
    s, _ = _split(s2, small)
    f = jnp.where(small, series, 2 * jnp.arctan2(s, w) / s)
    return f[..., None] * u


def _se3_v(w, x):
    """``V(w) x``: the translation of ``exp6([x, w])``, V = I + B ŵ + C ŵ² (SE(3) V-matrix)."""
    t2 = dot(w, w)
    small = t2 < _SMALL
    t, t2s = _split(t2, small)
    half = jnp.sin(t / 2)
    B = jnp.where(small, 0.5 - t2 / 24 + t2**2 / 720 - t2**3 / 40320, 2 * half * half / t2s)
    C = jnp.where(small, 1 / 6 - t2 / 120 + t2**2 / 5040 - t2**3 / 362880, (t - jnp.sin(t)) / (t2s * t))
    wx = cross(w, x)
    return x + B[..., None] * wx + C[..., None] * cross(w, wx)


def _se3_v_inverse(w, x):
    """``V(w)⁻¹ x`` for ``|w| ≤ π``: V⁻¹ = I − ½ ŵ + D ŵ², D = (1 − (θ/2) cot(θ/2)) / θ²."""
    t2 = dot(w, w)
    small = t2 < _SMALL
    t, t2s = _split(t2, small)
    h = t / 2
    D = jnp.where(small, 1 / 12 + t2 / 720 + t2**2 / 30240 + t2**3 / 1209600, (1 - h * jnp.cos(h) / jnp.sin(h)) / t2s)
    wx = cross(w, x)
    return x - 0.5 * wx + D[..., None] * cross(w, wx)


def _rotation(Q):
    """``Q / |Q|`` (identity for a zero quaternion): the rotation a quaternion stands for."""
    return quat.normalize(Q)


def _pure(w):
    """The pure quaternion ``(0, w)``."""
    return jnp.concatenate([jnp.zeros_like(w[..., :1]), w], axis=-1)


# ---- checks -------------------------------------------------------------------------------------


def _unit_messages(tree: SegmentTree, name: str, tol: float) -> list[str]:
    L = tree.joint_layout
    out = []
    for row, i in enumerate(L.quat_segment):
        a = int(L.quat_q[row, 0])
        out.append(
            f"{name}[{a}:{a + 4}], the quaternion of segment {tree.names[i]!r} "
            f"({tree.joint_types[i]} joint), is not a unit quaternion (| |Q| - 1 | > {tol:g}); "
            f"project it with jb.configuration.normalize(tree, {name})"
        )
    return out


def check_unit(
    tree: SegmentTree, q: Float[ArrayLike, " nq"], *, name: str = "q", tol: float = UNIT_TOLERANCE
) -> Float[Array, " nq"]:
    """``q`` (``(nq,)``) unchanged, after checking that the quaternion of every spherical and free
    joint has norm 1 within ``tol`` (NaN and inf fail too).

    Concrete ``q``: ``ValueError`` naming ``name``, its entries and the segment. Traced ``q``
    (under jit/vmap/grad): an `equinox.branched_error_if` that raises the same message at run
    time; the returned array must be used, or the check disappears.
    """
    q = as_coordinates(tree, q, name)
    L = tree.joint_layout
    if len(L.quat_segment) == 0:
        return q
    messages = _unit_messages(tree, name, tol)
    a = concrete(q)
    if a is not None:
        norms = np.linalg.norm(a[L.quat_q], axis=-1)
        bad = ~(np.abs(norms - 1) <= tol)
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"{messages[row]}; its norm is {norms[row]:.9g}")
        return q
    norms = jnp.sqrt(jnp.sum(q[L.quat_q] ** 2, axis=-1))
    bad = ~(jnp.abs(norms - 1) <= tol)
    return eqx.branched_error_if(q, jnp.any(bad), jnp.argmax(bad), messages)


def _checked(*configurations: str):
    """`jit_checked` with a static ``check`` flag: with ``check=True``, the named configuration
    arguments are checked by `check_unit` before tracing when concrete (a ``ValueError`` naming
    the segment) and inside the compiled function otherwise."""

    def check_arguments(arguments: dict) -> None:
        if arguments.get("check"):
            for name in configurations:
                check_unit(arguments["tree"], arguments[name], name=name)

    def wrap(fn):
        return jit_checked(fn, check_arguments, static_argnames=("check",), convert=_tree_argument)

    return wrap


def _tree_argument(name: str, value):
    """A `jaxbio.Model` given as ``tree``: its tree (`jaxbio.model.tree_of`)."""
    return tree_of(value) if name == "tree" else value


def _configuration(tree, q, name, check, like=None):
    q = as_coordinates(tree, q, name, like=like)
    return check_unit(tree, q, name=name) if check else q


# ---- public functions ---------------------------------------------------------------------------


@_checked("q")
def integrate(
    tree: SegmentTree, q: Float[ArrayLike, " nq"], dq: Float[ArrayLike, " nv"], *, check: bool = False
) -> Float[Array, " nq"]:
    """``q ⊕ dq``: the configuration reached from ``q`` by the step ``dq`` held for unit time.

    - ``tree``: the model (only its joint layout is used).
    - ``q``: ``(nq,)`` configuration (rad, m, quaternions ``(w, x, y, z)``).
    - ``dq``: ``(nv,)`` step: rad / m for revolute / prismatic joints, a rotation vector (rad) in
      the segment frame for a ball joint, ``[translation m, rotation vector rad]`` in the segment
      frame for a free joint (a twist).
    - ``check``: refuse non-unit quaternions in ``q`` (`check_unit`).

    Returns ``(nq,)``: axial coordinates ``q + dq``; ball joints ``Q ⊗ exp(dq)``; free joints the
    pose ``M(t, Q) · exp6([v, ω])``: ``Q ⊗ exp(ω)`` and ``t + R(Q) V(ω) v`` with ``V`` the SE(3)
    V-matrix (Pinocchio's ``integrate`` on a FreeFlyer). The quaternion of the result has the norm
    of ``Q`` and is exactly ``Q ⊗ exp(ω)``; Pinocchio also flips its sign into ``Q``'s hemisphere
    when ``|ω| > π`` (the same rotation, but not smooth in ``dq``); this does not.
    ``d/dt integrate(q, t v)`` at ``t = 0`` is `velocity_to_qdot` ``(q, v)``.
    """
    L = tree.joint_layout
    q = _configuration(tree, q, "q", check)
    dq = as_coordinates(tree, dq, "dq", "nv")
    dt = jnp.result_type(q, dq)
    q, dq = q.astype(dt), dq.astype(dt)
    Q, w = q[L.quat_q], dq[L.quat_v]
    rotation = quat.multiply(Q, _exp3(w))
    Qf, wf = Q[L.free], w[L.free]
    translation = q[L.trans_q] + quat.rotate(_rotation(Qf), _se3_v(wf, dq[L.trans_v]))
    return _assemble(L.q_order, q[L.axial_q] + dq[L.axial_v], rotation, translation)


@_checked("q0", "q1")
def difference(
    tree: SegmentTree, q0: Float[ArrayLike, " nq"], q1: Float[ArrayLike, " nq"], *, check: bool = False
) -> Float[Array, " nv"]:
    """``q1 ⊖ q0``: the step ``dq`` (``(nv,)``) with ``integrate(q0, dq) = q1``.

    - ``q0``, ``q1``: ``(nq,)`` configurations.
    - ``check``: refuse non-unit quaternions in ``q0`` or ``q1`` (`check_unit`).

    Returns ``(nv,)``: axial ``q1 − q0`` (no wrapping of angles); ball joints the rotation vector
    (rad, segment frame of ``q0``) ``log(Q0* ⊗ Q1)``; free joints ``log6(M0⁻¹ M1) = [V(ω)⁻¹
    R0ᵀ (t1 − t0), ω]`` (Pinocchio's ``difference``). Rotations are the shortest (``|ω| ≤ π``):
    ``Q`` and ``−Q`` are the same rotation, and only the direction of each quaternion matters.
    ``integrate(q0, difference(q0, q1))`` equals ``q1`` up to the sign and norm of its
    quaternions (exactly, for unit ``q0`` and ``q1`` in the same hemisphere of ``Q0 ⊗ ·``).
    """
    L = tree.joint_layout
    q0 = _configuration(tree, q0, "q0", check)
    q1 = _configuration(tree, q1, "q1", check)
    dt = jnp.result_type(q0, q1)
    q0, q1 = q0.astype(dt), q1.astype(dt)
    Q0 = q0[L.quat_q]
    w = _log3(quat.multiply(quat.conjugate(Q0), q1[L.quat_q]))
    local = quat.rotate(quat.conjugate(_rotation(Q0[L.free])), q1[L.trans_q] - q0[L.trans_q])
    return _assemble(L.v_order, q1[L.axial_q] - q0[L.axial_q], w, _se3_v_inverse(w[L.free], local))


def neutral(tree: SegmentTree, dtype=None) -> Float[Array, " nq"]:
    """The reference configuration ``(nq,)``: zero angles, slides and translations, identity
    quaternions ``(1, 0, 0, 0)`` (Pinocchio's ``neutral``). ``dtype`` defaults to the tree's. A
    `jaxbio.Model` in its tree's coordinates is taken as its tree."""
    tree = tree_of(tree, "neutral: ")
    L = tree.joint_layout
    dtype = jnp.result_type(tree.origins) if dtype is None else dtype
    q = np.zeros(tree.nq)
    q[L.quat_q[:, 0]] = 1.0
    return jnp.asarray(q, dtype)


def _check_random(arguments: dict) -> None:
    if "key" in arguments:
        check_key(arguments["key"])
    for name in ("angle", "distance"):
        if name in arguments:
            check_values(as_real(arguments[name], name), name, nonnegative=True)


@partial(jit_checked, check_arguments=_check_random, static_argnames=("dtype",), convert=_tree_argument)
def random(tree: SegmentTree, key, *, angle: float = np.pi, distance: float = 1.0, dtype=None) -> Float[Array, " nq"]:
    """A random configuration ``(nq,)``, a deterministic function of ``key``.

    - ``key``: one PRNG key (``jax.random.key(0)`` or ``jax.random.PRNGKey(0)``).
    - ``angle``: revolute angles are uniform in ``[−angle, angle]`` rad (default π: any angle).
    - ``distance``: prismatic slides and each component of a free joint's translation are
      uniform in ``[−distance, distance]`` m (default 1).
    - ``dtype``: a floating dtype; defaults to the tree's.

    The quaternion of each ball and free joint is uniform on the unit sphere (a normalised
    Gaussian 4-vector), so its rotation is uniform on SO(3) (Haar measure), either sign of ``w``.
    """
    L = tree.joint_layout
    dtype = jnp.result_type(tree.origins) if dtype is None else dtype
    k_axial, k_quat, k_trans = jax.random.split(key, 3)
    half_width = jnp.where(L.revolute, jnp.asarray(angle, dtype), jnp.asarray(distance, dtype))
    axial = half_width * jax.random.uniform(k_axial, L.axial_q.shape, dtype, -1.0, 1.0)
    rotation = quat.normalize(jax.random.normal(k_quat, L.quat_q.shape, dtype))
    translation = distance * jax.random.uniform(k_trans, L.trans_q.shape, dtype, -1.0, 1.0)
    return _assemble(L.q_order, axial, rotation, translation.astype(dtype))


@jax.jit
def normalize(tree: SegmentTree, q: Float[ArrayLike, " nq"]) -> Float[Array, " nq"]:
    """``q`` (``(nq,)``) with the quaternion of every ball and free joint divided by its norm (a
    zero quaternion becomes the identity); the other entries unchanged. A projection:
    idempotent, the identity on unit quaternions."""
    L = tree.joint_layout
    q = as_coordinates(tree, q, "q")
    return _assemble(L.q_order, q[L.axial_q], quat.normalize(q[L.quat_q]), q[L.trans_q])


@_checked("q")
def velocity_to_qdot(
    tree: SegmentTree, q: Float[ArrayLike, " nq"], v: Float[ArrayLike, " nv"], *, check: bool = False
) -> Float[Array, " nq"]:
    """``q̇ = G(q) v``: the rate of change of the configuration (``(nq,)``) when the joints move
    with velocity ``v`` (``(nv,)``; rad/s, m/s, segment-frame ``ω`` and ``[v, ω]``).

    Axial ``q̇ = v``; ball and free quaternions ``Q̇ = ½ Q ⊗ (0, ω)``; free translations
    ``ṫ = R(Q) v_lin`` (``R`` of ``Q/|Q|``). ``G(q) = ∂ integrate(q, dq)/∂dq`` at ``dq = 0``, the
    right side of ``q̇ = G(q) v`` for ODE solvers that advance ``q`` (the Hamiltonian simulation).
    ``check``: refuse non-unit quaternions in ``q`` (`check_unit`).
    """
    L = tree.joint_layout
    q = _configuration(tree, q, "q", check)
    v = as_coordinates(tree, v, "v", "nv")
    dt = jnp.result_type(q, v)
    q, v = q.astype(dt), v.astype(dt)
    Q = q[L.quat_q]
    rotation = 0.5 * quat.multiply(Q, _pure(v[L.quat_v]))
    translation = quat.rotate(_rotation(Q[L.free]), v[L.trans_v])
    return _assemble(L.q_order, v[L.axial_v], rotation, translation)


@_checked("q")
def velocity_to_qdot_transpose(
    tree: SegmentTree, q: Float[ArrayLike, " nq"], g: Float[ArrayLike, " nq"], *, check: bool = False
) -> Float[Array, " nv"]:
    """``G(q)ᵀ g``: an ``(nq,)`` gradient or force ``g`` conjugate to ``q`` as an ``(nv,)`` one
    conjugate to ``v`` (the transpose of `velocity_to_qdot`).

    Why: for a scalar ``f(q)``, ``∂ f(integrate(q, δ))/∂δ`` at ``δ = 0`` is ``G(q)ᵀ ∇_q f``, so
    ``-G(q)ᵀ ∇_q V`` is the generalised force of a potential ``V`` (N, N·m in the segment frame,
    ``nv`` long) computed from ``jax.grad`` of a function of the ``nq`` coordinates, and the
    power balance ``∇_q f · q̇ = (Gᵀ ∇_q f) · v`` holds. Axial entries pass through; ball and free
    ``ω``-entries are ``½ vec(Q* ⊗ g_Q)``; free linear entries ``R(Q)ᵀ g_t``.
    """
    return _to_velocity_coordinates(tree, q, g, "g", check, lambda Q: 0.5)


@_checked("q")
def qdot_to_velocity(
    tree: SegmentTree, q: Float[ArrayLike, " nq"], qdot: Float[ArrayLike, " nq"], *, check: bool = False
) -> Float[Array, " nv"]:
    """The velocity ``v`` (``(nv,)``) of a configuration rate ``qdot`` (``(nq,)``), the left
    inverse of `velocity_to_qdot`: ``qdot_to_velocity(q, velocity_to_qdot(q, v)) = v``.

    Axial ``v = q̇``; ``ω = 2 vec(Q* ⊗ Q̇) / |Q|²``; free ``v_lin = R(Q)ᵀ ṫ``. The component of
    ``Q̇`` along ``Q`` (a change of norm, no rotation) is dropped. Use it for velocities from
    finite differences of measured configurations.
    """

    def scale(Q):  # 2 / |Q|²
        n2 = jnp.sum(Q * Q, axis=-1, keepdims=True)
        return 2 / jnp.where(n2 > 0, n2, 1.0)

    return _to_velocity_coordinates(tree, q, qdot, "qdot", check, scale)


def _to_velocity_coordinates(tree: SegmentTree, q, x, name: str, check: bool, scale):
    """An ``(nq,)`` ``x`` mapped to ``(nv,)``: axial entries pass through, ball and free
    ``ω``-entries are ``scale(Q) · vec(Q* ⊗ x_Q)``, free linear entries ``R(Q)ᵀ x_t``
    (`velocity_to_qdot_transpose`, `qdot_to_velocity`)."""
    L = tree.joint_layout
    q = _configuration(tree, q, "q", check)
    x = as_coordinates(tree, x, name)
    dt = jnp.result_type(q, x)
    q, x = q.astype(dt), x.astype(dt)
    Q = q[L.quat_q]
    rotation = scale(Q) * quat.multiply(quat.conjugate(Q), x[L.quat_q])[..., 1:]
    translation = quat.rotate(quat.conjugate(_rotation(Q[L.free])), x[L.trans_q])
    return _assemble(L.v_order, x[L.axial_q], rotation, translation)
