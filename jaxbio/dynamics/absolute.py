"""Absolute (Cartesian) coordinates of any planar `SegmentTree` (the formulation of Blajer et al. 2007, §3).

Every segment ``b`` of a planar tree is a free rigid body in the plane with the three absolute
coordinates ``p_b = (x_b, y_b, θ_b)``: the world position (m) of its centre of mass and the world
angle (rad, counter-clockwise about +z) of its segment frame. The ``3N`` vector
``p = [x_1, y_1, θ_1, x_2, …]`` (``N = tree.nq`` bodies, segment order; virtual segments are
bodies too) is Blajer's ``p``; the joint coordinates ``q`` of the tree are its independent
coordinates. This module builds the pieces of the absolute-coordinate formulation

    M p̈ = f_g + B u + f_ext − Cᵀ λ,        C p̈ = γ_C                         (part I eq. 1)

- `absolute_coordinates` — ``p = g(q)`` (part I eq. 8); `absolute_motion` — ``ṗ = D q̇``,
  ``p̈ = D q̈ + γ`` (eq. 9); `velocity_map` — ``D = ∂g/∂q`` ``(3N, n)``;
- `mass_diagonal` — ``M = diag(m_1, m_1, I_1, …)`` (``I`` the inertia about the COM, about z);
  `gravity_vector` — ``f_g``; `actuation_matrix` — ``B`` ``(3N, n)``, the generalised forces in
  ``p`` of unit joint torques/forces ``u`` (``B = (∂q/∂p)ᵀ``, virtual work);
- `joint_constraints` — ``Φ(p) = 0`` (part I eq. 5), two rows per joint, and
  `contact_constraints` for points of segments held fixed on the ground (`jaxbio.dynamics.Contact`);
  `constraint_jacobian` — ``C = ∂Φ/∂p`` and ``γ_C`` with ``C p̈ = γ_C`` (``γ_C = −Ċ ṗ``);
- `open_constraint_matrix` — Blajer's ``E = ∂g(q, z)/∂z`` at ``z = 0`` (eq. 13) for
  open-constraint coordinates ``z`` of chosen joints.

Constraint rows of joint ``i`` (parent ``p``, ``P_i`` the child's origin = joint centre, ``A_i``
the parent-fixed point where the joint sits, ``s_i`` the world slide axis, ``n_i = ẑ × s_i``):

- revolute: ``Φ_i = P_i − A_i`` (world x, y);
- prismatic: ``Φ_i = (n_i · (P_i − A_i), θ_i − θ_p − β_i)`` with ``β_i`` the joint frame's angle
  in the parent (the ``orientation`` quaternion).

The multipliers of these rows are the joint's **constraint** reaction with the sign of part I
eq. 1: the child receives ``−C_childᵀ λ_i``, i.e. the force ``−λ_i`` (revolute) at ``P_i``, or
the force ``−λ_i,1 n_i`` and the moment ``−λ_i,2`` about ``P_i`` (prismatic). The open-constraint
coordinates ``z_i`` are the same directions, opened on the child's side (the child's subtree
translated by ``z`` in world x, y; or translated along ``n_i`` and turned about ``P_i``), so that
``C E = [I; 0]`` (eq. 14) and the multipliers of both schemes are the same numbers.

Every function takes an optional keyword ``pp``, the tree's `planar_params`, so that a caller
combining several of them checks planarity once.

Planar means: revolute axes ``±z``, prismatic axes in the x–y plane, joint orientations about z,
gravity in the plane. Out-of-plane offsets of origins and COMs are ignored (they do not enter the
in-plane dynamics). A tree that is not planar raises at run time (`equinox.error_if`).
"""

from __future__ import annotations

from typing import NamedTuple
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import quaternion as quat
from jaxbio.dynamics import planar_batch as _planar_batch
from jaxbio.dynamics.contact import Contacts, contact_points, contact_rows
from jaxbio.dynamics.kinematics import segment_motion
from jaxbio.spatial import cross
from jaxbio.tree import SegmentTree

__all__ = [
    "PlanarParams",
    "planar_params",
    "absolute_coordinates",
    "absolute_motion",
    "velocity_map",
    "joint_coordinates",
    "mass_diagonal",
    "gravity_vector",
    "actuation_matrix",
    "actuation_forces",
    "joint_constraints",
    "contact_constraints",
    "constraint_jacobian",
    "open_constraint_matrix",
]

_PLANAR_TOL = 1e-6  # largest `_planar_batch.deviation` taken for planar (rad of tilt, m/s² of g_z)


class PlanarParams(NamedTuple):
    """In-plane numbers of a planar tree (arrays, segment order).

    ``origin`` ``(n, 2)`` m joint origin in the parent frame; ``beta`` ``(n,)`` rad joint-frame
    angle in the parent frame; ``axis`` ``(n, 2)`` prismatic axis in the joint frame;
    ``sign`` ``(n,)`` ``±1``, the z component of a revolute axis; ``com`` ``(n, 2)`` m COM in the
    segment frame; ``mass`` ``(n,)`` kg; ``izz`` ``(n,)`` kg·m² about the COM; ``gravity`` ``(2,)``
    m/s²; ``parent`` ``(n,)`` int (numpy, static; ``n`` stands for the world); ``revolute``
    ``(n,)`` bool (numpy, static).
    """

    origin: Array
    beta: Array
    axis: Array
    sign: Array
    com: Array
    mass: Array
    izz: Array
    gravity: Array
    parent: np.ndarray
    revolute: np.ndarray


def planar_params(tree: SegmentTree) -> PlanarParams:
    """The in-plane numbers of ``tree``; raises at run time (`equinox.error_if`, also under jit)
    if the tree is not planar (see the module docstring)."""
    tree.check_unbatched()
    rev = tree.is_revolute
    axes = tree.unit_axes
    o = tree.unit_orientations
    not_planar = _planar_batch.deviation(tree) > _PLANAR_TOL
    axes = eqx.error_if(
        axes,
        not_planar,
        "the tree is not planar (revolute axes must be ±z, prismatic axes in the "
        "x-y plane, joint orientations about z, gravity in the x-y plane)",
    )
    n = tree.nq
    parent = np.asarray([n if p < 0 else p for p in tree.parents], dtype=np.int32)
    return PlanarParams(
        origin=tree.origins[:, :2],
        beta=2.0 * jnp.arctan2(o[:, 3], o[:, 0]),
        axis=axes[:, :2],
        sign=jnp.sign(axes[:, 2]),
        com=tree.coms[:, :2],
        mass=tree.masses,
        izz=tree.inertias[:, 2, 2],
        gravity=tree.gravity[:2],
        parent=parent,
        revolute=rev,
    )


# ---- small planar algebra -------------------------------------------------------------------


def _rot(theta, v):
    """Rotate ``(..., 2)`` vectors by angles ``(...)``."""
    c, s = jnp.cos(theta), jnp.sin(theta)
    return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], axis=-1)


def _cross2(a, b):
    """z component of ``a × b`` for ``(..., 2)`` vectors."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _perp(v):
    """``ẑ × v`` for ``(..., 2)`` vectors."""
    return jnp.stack([-v[..., 1], v[..., 0]], axis=-1)


def _bodies(p):
    """``p (3N,)`` → positions ``(N, 2)``, angles ``(N,)``."""
    b = p.reshape(-1, 3)
    return b[:, :2], b[:, 2]


def _with_world(x, value=0.0):
    """Append one world row (index ``n``) to a per-segment array."""
    pad = jnp.full((1,) + x.shape[1:], value, x.dtype)
    return jnp.concatenate([x, pad], axis=0)


def _joint_geometry(pp: PlanarParams, p):
    """Per joint ``i``: child origin ``P_i``, parent anchor ``A_i`` (both ``(n, 2)``), the child's
    angle ``θ_i``, the parent's angle ``θ_p`` and the world slide axis ``s_i``."""
    r, th = _bodies(p)
    P = r - _rot(th, pp.com)
    r_w, th_w = _with_world(r), _with_world(th)
    com_w = _with_world(pp.com)
    rp, thp, comp = r_w[pp.parent], th_w[pp.parent], com_w[pp.parent]
    A = rp + _rot(thp, pp.origin - comp)
    s = _rot(thp + pp.beta, pp.axis)
    return P, A, th, thp, s


# ---- the map q → p and its derivatives (part I eq. 8, eq. 9) ------------------------------


def _ancestor_matrix(tree: SegmentTree, dtype):
    """``(n, n)`` 0/1 (static): ``[k, j] = 1`` when joint ``j`` moves segment ``k``."""
    return jnp.asarray(tree.ancestors, dtype)


def _planar_tree(tree: SegmentTree, pp: PlanarParams) -> SegmentTree:
    """``tree`` with its joint axes taken from ``pp`` (revolute ``(0, 0, ±1)``, prismatic the
    in-plane part): the planar idealisation, and the planarity check of `planar_params` flows into
    every result computed from it."""
    zero = jnp.zeros_like(pp.sign)
    axes = jnp.where(
        jnp.asarray(pp.revolute)[:, None],
        jnp.stack([zero, zero, pp.sign], -1),
        jnp.concatenate([pp.axis, zero[:, None]], -1),
    )
    return eqx.tree_at(lambda t: t.axes, tree, axes)


def _stack(xy, theta):
    """``(N, 2)`` positions and ``(N,)`` angles (or their rates) → ``(3N,)`` ``[x, y, θ, …]``."""
    return jnp.concatenate([xy, theta[:, None]], axis=-1).reshape(-1)


def absolute_motion(tree: SegmentTree, q, qd=None, qdd=None, *, pp: PlanarParams | None = None):
    """``p = g(q)``, ``ṗ = D q̇`` and ``p̈ = D q̈ + γ`` (Blajer et al. 2007, eq. 9), each ``(3N,)``.

    The positions, velocities and accelerations of the COMs and the angular rates are those of
    jaxbio's forward kinematics (`jaxbio.dynamics.segment_motion`, the one recursion): for COM
    offset ``c = R c_local``, ``r = O + c``, ``ṙ = v + ω × c``, ``r̈ = a + α × c + ω × (ω × c)``,
    ``θ̇ = ω_z``, ``θ̈ = α_z``. The angle ``θ`` is the sum of the joint angles along the path
    (``β + sign q`` of every revolute ancestor), not wrapped as a quaternion's would be, so that
    `joint_coordinates` inverts ``g`` for any ``q``. With ``qdd`` omitted ``p̈`` is ``γ``, the
    acceleration at ``q̈ = 0``.

    Args:
        q, qd, qdd: ``(n,)`` joint coordinates (rad / m), velocities and accelerations; ``qd``,
            ``qdd`` default to zero.
    Returns:
        ``(p, pd, pdd)``, each ``(3N,)``: ``[x, y, θ]`` per body, m and rad (and rates); ``pdd`` is
        the true acceleration (gravity not included).
    """
    pp = planar_params(tree) if pp is None else pp
    q = jnp.asarray(q)
    qd = jnp.zeros_like(q) if qd is None else jnp.asarray(qd, q.dtype)
    qdd = jnp.zeros_like(q) if qdd is None else jnp.asarray(qdd, q.dtype)
    mo = segment_motion(_planar_tree(tree, pp), q, qd, qdd)
    c = quat.rotate(mo.attitude, tree.coms.astype(q.dtype))  # COM offsets, world
    theta = _ancestor_matrix(tree, q.dtype) @ (pp.beta + jnp.where(jnp.asarray(pp.revolute), pp.sign * q, 0.0))
    w, al = mo.omega, mo.alpha
    p = _stack((mo.position + c)[:, :2], theta)
    pd = _stack((mo.velocity + cross(w, c))[:, :2], w[:, 2])
    pdd = _stack((mo.acceleration + cross(al, c) + cross(w, cross(w, c)))[:, :2], al[:, 2])
    return p, pd, pdd


def absolute_coordinates(tree: SegmentTree, q) -> Float[Array, " 3N"]:
    """``p = g(q)`` ``(3N,)`` (part I eq. 8): COM x, y (m) and frame angle θ (rad) per segment
    (`absolute_motion`)."""
    return absolute_motion(tree, q)[0]


def velocity_map(tree: SegmentTree, q) -> Float[Array, "3N n"]:
    """``D(q) = ∂g/∂q`` ``(3N, n)`` (eq. 13; ``ṗ = D q̇``), by forward-mode differentiation."""
    return jax.jacfwd(lambda x: absolute_coordinates(tree, x))(q)


def joint_coordinates(tree: SegmentTree, p, *, pp: PlanarParams | None = None) -> Float[Array, " n"]:
    """The joint coordinates ``q`` ``(n,)`` of a consistent ``p`` (the inverse of ``g``): the
    relative angle (revolute) or the slide ``s_i · (P_i − A_i)`` (prismatic)."""
    pp = planar_params(tree) if pp is None else pp
    P, A, th, thp, s = _joint_geometry(pp, p)
    rel = pp.sign * (th - thp - pp.beta)
    slide = jnp.sum(s * (P - A), axis=-1)
    return jnp.where(jnp.asarray(pp.revolute), rel, slide)


def mass_diagonal(tree: SegmentTree, *, pp: PlanarParams | None = None) -> Float[Array, " 3N"]:
    """Diagonal of ``M`` ``(3N,)``: ``(m, m, I_zz)`` per body (kg, kg, kg·m² about the COM)."""
    pp = planar_params(tree) if pp is None else pp
    return jnp.stack([pp.mass, pp.mass, pp.izz], axis=-1).reshape(-1)


def gravity_vector(tree: SegmentTree, *, pp: PlanarParams | None = None) -> Float[Array, " 3N"]:
    """``f_g`` ``(3N,)``: ``(m g_x, m g_y, 0)`` per body, N."""
    pp = planar_params(tree) if pp is None else pp
    f = pp.mass[:, None] * pp.gravity[None, :]
    return jnp.concatenate([f, jnp.zeros_like(f[:, :1])], axis=-1).reshape(-1)


def actuation_matrix(tree: SegmentTree, p) -> Float[Array, "3N n"]:
    """``B`` ``(3N, n)``: column ``i`` is the generalised force in ``p`` of a unit torque (revolute,
    about the joint axis: ``±1`` on the child's θ, ``∓1`` on the parent's) or unit force
    (prismatic, along the axis at the joint centre, opposite on the parent) of joint ``i``.
    By virtual work ``B = (∂q/∂p)ᵀ`` with ``q(p)`` from `joint_coordinates`."""
    return jax.jacfwd(lambda x: joint_coordinates(tree, x))(p).T


def actuation_forces(tree: SegmentTree, p, u, *, pp: PlanarParams | None = None) -> Float[Array, " 3N"]:
    """``B u`` ``(3N,)`` in closed form (equal to ``actuation_matrix(tree, p) @ u``): a revolute
    joint puts ``±u`` on the child's θ and ``∓u`` on the parent's; a prismatic joint the force
    ``u s`` on the child at the joint centre ``P`` and ``−u s`` on the parent at the same point."""
    pp = planar_params(tree) if pp is None else pp
    return _actuation_forces(tree, pp, p, jnp.asarray(u, p.dtype))


def _parent_onehot(tree: SegmentTree, dtype):
    """``(n, N)`` static 0/1: ``[i, b] = 1`` when ``b`` is the parent of joint ``i`` (world: none)."""
    n = tree.nq
    out = np.zeros((n, n))
    for i, par in enumerate(tree.parents):
        if par >= 0:
            out[i, par] = 1.0
    return jnp.asarray(out, dtype)


def _actuation_forces(tree, pp, p, u):
    P, A, th, thp, s = _joint_geometry(pp, p)
    r, _ = _bodies(p)
    rp = _with_world(r)[pp.parent]
    rev = jnp.asarray(pp.revolute)[:, None]
    us = u[:, None] * s
    zero = jnp.zeros_like(u)
    child = jnp.where(
        rev, jnp.stack([zero, zero, pp.sign * u], -1), jnp.concatenate([us, _cross2(P - r, us)[:, None]], -1)
    )
    parent = jnp.where(
        rev, jnp.stack([zero, zero, -pp.sign * u], -1), jnp.concatenate([-us, -_cross2(P - rp, us)[:, None]], -1)
    )
    return (child + _parent_onehot(tree, p.dtype).T @ parent).reshape(-1)


# ---- constraints (part I eq. 5) ---------------------------------------------------------------


def joint_constraints(tree: SegmentTree, p, *, pp: PlanarParams | None = None) -> Float[Array, " 2n"]:
    """``Φ(p)`` ``(2n,)``: two rows per joint in segment order (see the module docstring);
    zero where ``p = g(q)``."""
    pp = planar_params(tree) if pp is None else pp
    P, A, th, thp, s = _joint_geometry(pp, p)
    d = P - A
    pris = jnp.stack([jnp.sum(_perp(s) * d, axis=-1), th - thp - pp.beta], axis=-1)
    rows = jnp.where(jnp.asarray(pp.revolute)[:, None], d, pris)
    return rows.reshape(-1)


def contact_constraints(
    tree: SegmentTree, p, contacts: Contacts, *, pp: PlanarParams | None = None
) -> Float[Array, " lc"]:
    """Contact constraint functions ``(lc,)``: per contact the world x, y of its point (and the
    segment's angle θ for a weld). The ground position is a constant, so it is left out: it does
    not enter ``C`` or ``γ``."""
    pp = planar_params(tree) if pp is None else pp
    seg, keep, _ = contact_rows(tree, contacts)
    if len(seg) == 0:
        return jnp.zeros((0,), p.dtype)
    r, th = _bodies(p)
    pts = contact_points(contacts, p.dtype)
    X = r[seg] + _rot(th[seg], pts - pp.com[seg])
    table = jnp.concatenate([X, th[seg][:, None]], axis=-1).reshape(-1)
    return table[keep]


def _joint_blocks(pp: PlanarParams, p):
    """Analytic blocks of ``∂Φ/∂p`` for the joint rows: child ``(n, 2, 3)`` and parent
    ``(n, 2, 3)`` (columns ``x, y, θ`` of the child / parent body)."""
    P, A, th, thp, s = _joint_geometry(pp, p)
    r, _ = _bodies(p)
    rp = _with_world(r)[pp.parent]
    one, zero = jnp.ones_like(th), jnp.zeros_like(th)
    kc = _perp(P - r)  # ∂P/∂θ_child
    kp = _perp(A - rp)  # ∂A/∂θ_parent
    rev_c = jnp.stack([jnp.stack([one, zero, kc[:, 0]], -1), jnp.stack([zero, one, kc[:, 1]], -1)], 1)
    rev_p = jnp.stack([jnp.stack([-one, zero, -kp[:, 0]], -1), jnp.stack([zero, -one, -kp[:, 1]], -1)], 1)
    nv = _perp(s)
    d = P - A
    pri_c = jnp.stack([jnp.stack([nv[:, 0], nv[:, 1], jnp.sum(nv * kc, -1)], -1), jnp.stack([zero, zero, one], -1)], 1)
    pri_p = jnp.stack(
        [
            jnp.stack([-nv[:, 0], -nv[:, 1], -jnp.sum(nv * kp, -1) - jnp.sum(s * d, -1)], -1),
            jnp.stack([zero, zero, -one], -1),
        ],
        1,
    )
    rev = jnp.asarray(pp.revolute)[:, None, None]
    return jnp.where(rev, rev_c, pri_c), jnp.where(rev, rev_p, pri_p)


def _contact_blocks(tree, pp, p, contacts, seg):
    """``(k, 3, 3)`` blocks ``∂(x, y, θ of the contact)/∂(x, y, θ of its segment)``."""
    r, th = _bodies(p)
    pts = contact_points(contacts, p.dtype)
    lever = _rot(th[seg], pts - pp.com[seg])  # X − r_s
    k = _perp(lever)
    one, zero = jnp.ones_like(k[:, 0]), jnp.zeros_like(k[:, 0])
    return jnp.stack(
        [jnp.stack([one, zero, k[:, 0]], -1), jnp.stack([zero, one, k[:, 1]], -1), jnp.stack([zero, zero, one], -1)], 1
    )


def constraint_jacobian(tree: SegmentTree, p, pd, contacts: Contacts = (), *, pp: PlanarParams | None = None):
    """``C = ∂Φ/∂p`` ``(l, 3N)`` and ``γ_C`` ``(l,)`` with ``C p̈ = γ_C`` (``γ_C = −Ċ ṗ``), for the
    ``2n`` joint rows followed by the contact rows (``l = 2n + lc``).

    ``C`` is assembled from analytic ``2 × 3`` (joint: child and parent body) and ``3 × 3``
    (contact) blocks; ``γ_C`` is the second derivative of ``Φ`` along ``ṗ`` (forward mode, one
    tangent). The tests compare ``C`` with ``jax.jacfwd`` of `joint_constraints` /
    `contact_constraints`.
    """
    pp = planar_params(tree) if pp is None else pp
    n = tree.nq
    cc, cp = _joint_blocks(pp, p)
    eye = jnp.eye(n, dtype=p.dtype)
    C = jnp.einsum("irk,ib->irbk", cc, eye) + jnp.einsum("irk,ib->irbk", cp, _parent_onehot(tree, p.dtype))
    C = C.reshape(2 * n, 3 * n)
    seg, keep, _ = contact_rows(tree, contacts)
    if len(seg):
        onehot = jnp.asarray(np.eye(n)[seg], p.dtype)
        Cc = jnp.einsum("crk,cb->crbk", _contact_blocks(tree, pp, p, contacts, seg), onehot)
        C = jnp.concatenate([C, Cc.reshape(3 * len(seg), 3 * n)[keep]], axis=0)

    def phi(x):
        return jnp.concatenate([joint_constraints(tree, x, pp=pp), contact_constraints(tree, x, contacts, pp=pp)])

    # second derivative of Φ along ṗ: d²/dt² Φ(p + t ṗ) = ṗᵀ ∂²Φ ṗ = Ċ ṗ
    cdot_pd = jax.jvp(lambda x: jax.jvp(phi, (x,), (pd,))[1], (p,), (pd,))[1]
    return C, -cdot_pd


# ---- Blajer's E (eq. 13) ------------------------------------------------------------------------


def open_constraint_matrix(tree: SegmentTree, q, joints: Sequence[int] | None = None) -> Float[Array, "3N l"]:
    """``E = ∂g(q, z)/∂z`` at ``z = 0`` (Blajer et al. 2007, eq. 13), ``(3N, 2·len(joints))``.

    Two open-constraint coordinates per chosen joint ``i`` (default: all joints, segment order),
    opened on the child's side: revolute — the child's subtree translated by ``z`` in world x, y
    (entries 0/1, as in eq. 12); prismatic — translated along ``n_i = ẑ × s_i``, then turned about
    the joint centre ``P_i`` (entries ``(−(y_b − P_y), x_b − P_x, 1)`` for the bodies ``b`` of
    the subtree). With `constraint_jacobian`'s joint rows ``C E = [I; 0]`` (eq. 14).
    """
    joints = tuple(range(tree.nq)) if joints is None else tuple(int(j) for j in joints)
    return _open_constraint_matrix(tree, planar_params(tree), absolute_coordinates(tree, q), joints)


def _open_constraint_matrix(tree, pp, p, joints):
    n = tree.nq
    idx = np.asarray(joints, dtype=np.int32)
    P, _, _, _, s = _joint_geometry(pp, p)
    r, _ = _bodies(p)
    desc = jnp.asarray(tree.ancestors.T[idx], p.dtype)  # (m, N): body b in the subtree of joint j
    Pj, nj = P[idx], _perp(s[idx])  # (m, 2)
    one = jnp.ones_like(desc)
    zero = jnp.zeros_like(desc)
    # revolute columns: world x and world y
    ex = jnp.stack([one, zero, zero], axis=-1)  # (m, N, 3)
    ey = jnp.stack([zero, one, zero], axis=-1)
    # prismatic columns: along n, and a turn about P
    lever = r[None, :, :] - Pj[:, None, :]  # (m, N, 2)
    en = jnp.stack(
        [jnp.broadcast_to(nj[:, None, 0], desc.shape), jnp.broadcast_to(nj[:, None, 1], desc.shape), zero], -1
    )
    er = jnp.stack([-lever[..., 1], lever[..., 0], one], axis=-1)
    rev = jnp.asarray(pp.revolute[idx])[:, None, None]
    c1 = jnp.where(rev, ex, en) * desc[..., None]
    c2 = jnp.where(rev, ey, er) * desc[..., None]
    cols = jnp.stack([c1, c2], axis=1)  # (m, 2, N, 3)
    return cols.reshape(2 * len(idx), 3 * n).T
