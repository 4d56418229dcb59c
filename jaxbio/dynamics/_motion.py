"""The per-state proximal → distal pass of forward kinematics (`motion_soa`) and the joint rows it
starts from (`joint_rows`), below both `kinematics` (which stacks them, `segment_motion`) and the
batch-last kernels of `_batched` (which gather the same rows): moved out of `kinematics` so that
the two import it and not each other (tests/test_layers.py)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio import _soa as soa
from jaxbio.dynamics._levels import forward_pass, levels_of
from jaxbio.tree import SegmentTree


def motion_soa(tree: SegmentTree, q, qd=None, qdd=None, *, gravity_as_base: bool = False) -> dict:
    """Proximal → distal pass of the recursion (Du 2021, §2.2, attitudes by quaternion).

    ``q`` ``(nq,)``, ``qd`` and ``qdd`` ``(nv,)`` (zero when None). Returns a dict of
    structure-of-arrays tuples (see `_soa`) with the keys of `SegmentMotion`; every component is
    ``(n_segments,)``, except ``axis``, ``(nv,)``: the world axis of each velocity coordinate.
    With ``gravity_as_base`` the world is given the acceleration ``−g``, so that each segment's
    ``acceleration`` is ``a − g`` as it enters Du 2021, eq. 2.

    Segment ``i`` with parent ``p`` (world quantities; ``r`` the offset from the parent's origin;
    ``w``, ``u`` the joint's relative angular and linear velocity rotated to the world from the
    segment frame, ``ẇ``, ``u̇`` their segment-frame derivatives rotated likewise):
    ``Q_i = Q_p ⊗ O_i ⊗ J(q_i)``, ``ω_i = ω_p + w``, ``v_i = v_p + ω_p × r + u``,
    ``α_i = α_p + ẇ + ω_p × w``,
    ``a_i = a_p + α_p × r + ω_p × (ω_p × r) + u̇ + 2 ω_p × u + w × u``.
    A revolute joint has ``w = s q̇``, ``u = 0``; a prismatic one ``u = s q̇``, ``w = 0``
    (``s`` its world axis); a ball joint ``w = R_i ω``; a free joint ``u = R_i v``, ``w = R_i ω``
    (the last term of ``a_i`` is its only coupling, folded into ``u̇`` by `joint_rows`, the
    joint rows the batch-last kernels use too); a fixed joint neither.
    """
    tree.check_unbatched()
    dtype = jnp.result_type(tree.axes, q)
    if tree.is_axial:
        return _axial_motion(tree, q, qd, qdd, gravity_as_base, dtype)
    zeros = jnp.zeros(tree.nv, dtype)
    rows = joint_rows(tree, q.astype(dtype), zeros if qd is None else qd, zeros if qdd is None else qdd)
    d = tree.dofs
    axes = tree.dof_axes().astype(dtype)
    local = dict(q=rows.rotation, t=rows.translation, w=rows.w, u=rows.u, wd=rows.wd, ud=rows.ud)

    def step(par, loc):
        att = soa.qmul(par["attitude"], loc["q"])
        offset = soa.qrot(par["attitude"], loc["t"])
        w, u = soa.qrot(att, loc["w"]), soa.qrot(att, loc["u"])
        wd, ud = soa.qrot(att, loc["wd"]), soa.qrot(att, loc["ud"])
        w_p = par["omega"]
        w_p_x_u = soa.cross(w_p, u)
        acc = soa.add(
            soa.add(par["acceleration"], soa.cross(par["alpha"], offset)),
            soa.add(soa.cross(w_p, soa.cross(w_p, offset)), soa.add(ud, soa.scale(w_p_x_u, 2.0))),
        )
        return dict(
            attitude=att,
            position=soa.add(par["position"], offset),
            omega=soa.add(w_p, w),
            velocity=soa.add(soa.add(par["velocity"], soa.cross(w_p, offset)), u),
            alpha=soa.add(soa.add(par["alpha"], wd), soa.cross(w_p, w)),
            acceleration=acc,
            offset=offset,
        )

    out = forward_pass(levels_of(tree.parents), local, _root(tree, dtype, gravity_as_base), step, like=q)
    att_dof = tuple(c[d.segment] for c in out["attitude"])
    out["axis"] = soa.qrot(att_dof, soa.split(axes, 3))
    return out


def _root(tree, dtype, gravity_as_base):
    z = jnp.zeros((), dtype)
    g = soa.split(tree.gravity.astype(dtype), 3)
    return dict(
        attitude=(jnp.ones((), dtype), z, z, z),
        position=(z, z, z),
        omega=(z, z, z),
        velocity=(z, z, z),
        alpha=(z, z, z),
        acceleration=(-g[0], -g[1], -g[2]) if gravity_as_base else (z, z, z),
    )


class JointRows(NamedTuple):
    """Each segment's joint, structure of arrays with the segment first (`joint_rows`)."""

    rotation: tuple  # quaternion O ⊗ J(q): the segment's attitude in its parent's frame
    translation: tuple  # its origin in the parent's frame, m: origin + O t(q)
    w: tuple | None  # relative angular velocity, segment frame, rad/s
    u: tuple | None  # relative velocity of the origin, segment frame, m/s
    wd: tuple | None  # rate of w, rad/s²
    ud: tuple | None  # rate of u plus w × u (a free joint's coupling), m/s²


def joint_rows(tree: SegmentTree, q, qd=None, qdd=None, *, sincos=None) -> JointRows:
    """Every segment's joint from ``q`` ``(nq, ...)`` and ``qd``, ``qdd`` ``(nv, ...)`` (any
    trailing axes: none for one state, the chunk for the batch-last kernels), by static gathers
    (`_joint_tables`); each component comes back ``(n_segments, ...)``.

    ``J(q)`` is the axis-angle of a revolute joint or the quaternion of a ball or free joint,
    normalised (the dynamics depend on the rotation only; a zero quaternion reads as the identity,
    as `jaxbio.quaternion.normalize`; `jaxbio.configuration` checks and projects); ``t(q)`` the
    slide along the axis or a free joint's translation. ``w``, ``u`` are ``Σ axis · v`` over the
    segment's angular and linear coordinates (None without ``qd``). ``sincos``: the function
    ``x -> (sin x, cos x)`` to use (the kernels' vectorised one), default `jax.numpy`'s.
    """
    t = _joint_tables(tree)
    dt = q.dtype
    trailing = (1,) * (q.ndim - 1)

    def const(a):  # (n, k) constants -> k arrays (n, 1, ...) broadcasting over the trailing axes
        a = jnp.asarray(a).astype(dt)
        return tuple(a[:, k].reshape((-1,) + trailing) for k in range(a.shape[1]))

    def gather(x, rows):  # rows of x, the last index reading zero
        return jnp.concatenate([x, jnp.zeros_like(x[:1])], 0)[rows]

    (rev,), axis, orient = const(tree.is_revolute[:, None]), const(tree.unit_axes), const(tree.unit_orientations)
    x = gather(q, t.axial_q)  # angle or slide
    half = 0.5 * x * rev
    s, c = sincos(half) if sincos is not None else (jnp.sin(half), jnp.cos(half))
    (has_quat,) = const(t.has_quat)
    Q = tuple(gather(q, t.quat_q[:, k]) + (k == 0) * (1.0 - has_quat) for k in range(4))
    n2 = sum(y * y for y in Q)
    unit = n2 > 0
    inv = jax.lax.rsqrt(jnp.where(unit, n2, 1.0))
    Q = tuple(jnp.where(unit, y * inv, float(k == 0)) for k, y in enumerate(Q))
    J = soa.where(has_quat > 0, Q, (c, s * axis[0], s * axis[1], s * axis[2]))
    local_t = soa.add(soa.scale(axis, x * (1 - rev)), tuple(gather(q, t.trans_q[:, k]) for k in range(3)))
    rows = JointRows(
        soa.qmul(orient, J), soa.add(const(tree.origins), soa.matvec(soa.qmat(orient), local_t)), None, None, None, None
    )
    if qd is None:
        return rows
    axes = tree.dof_axes().astype(dt)

    def vector(v, idx):  # Σ axis · v over the coordinates in idx, segment frame
        return tuple(gather(axes[:, k], idx[:, k]).reshape((-1,) + trailing) * gather(v, idx[:, k]) for k in range(3))

    w, u = vector(qd, t.w_v), vector(qd, t.u_v)
    return rows._replace(w=w, u=u, wd=vector(qdd, t.w_v), ud=soa.add(vector(qdd, t.u_v), soa.cross(w, u)))


class _JointTables(NamedTuple):
    """Static gathers of `joint_rows` (numpy; an index equal to the array's length reads zero)."""

    axial_q: np.ndarray  # (n,) q row of the segment's angle or slide
    quat_q: np.ndarray  # (n, 4) q rows of its quaternion (ball, free)
    has_quat: np.ndarray  # (n, 1) float: 1 for ball and free joints
    trans_q: np.ndarray  # (n, 3) q rows of a free joint's translation
    w_v: np.ndarray  # (n, 3) v row feeding each segment-frame component of w (with its dof_axes entry)
    u_v: np.ndarray  # (n, 3) likewise for u


def _joint_tables(tree: SegmentTree) -> _JointTables:
    n, nq, nv, L, d = tree.n_segments, tree.nq, tree.nv, tree.joint_layout, tree.dofs
    axial_q = np.full(n, nq)
    axial_q[L.axial_segment] = L.axial_q
    quat_q = np.full((n, 4), nq)
    quat_q[L.quat_segment] = L.quat_q
    trans_q = np.full((n, 3), nq)
    trans_q[L.quat_segment[L.free]] = L.trans_q
    w_v, u_v = np.full((n, 3), nv), np.full((n, 3), nv)
    for k in range(nv):  # each (segment, component) is fed by one coordinate at most
        target = w_v if d.rotational[k] else u_v
        comps = range(3) if d.axial[k] else np.flatnonzero(d.unit_axis[k])
        target[d.segment[k], comps] = k
    has_quat = (quat_q[:, :1] < nq).astype(float)
    return _JointTables(axial_q, quat_q, has_quat, trans_q, w_v, u_v)


def _axial_motion(tree, q, qd, qdd, gravity_as_base, dtype):
    """`motion_soa` for a tree of revolute and prismatic joints only (``nq = nv = n_segments``)."""
    zeros = jnp.zeros_like(q)
    qd = zeros if qd is None else qd
    qdd = zeros if qdd is None else qdd
    rev = jnp.asarray(tree.is_revolute)
    axis = soa.split(tree.unit_axes, 3)
    orient = soa.split(tree.unit_orientations, 4)
    # local joint transform in the parent frame
    half = 0.5 * jnp.where(rev, q, 0.0)
    c, s_ = jnp.cos(half), jnp.sin(half)
    local_q = soa.qmul(orient, (c, s_ * axis[0], s_ * axis[1], s_ * axis[2]))
    slide = jnp.where(rev, 0.0, q)
    local_t = soa.add(soa.split(tree.origins, 3), soa.qrot(orient, soa.scale(axis, slide)))

    lv = levels_of(tree.parents)
    local = dict(q=local_q, t=local_t, axis=axis, qd=qd, qdd=qdd, rev=rev)

    def step(par, loc):
        att = soa.qmul(par["attitude"], loc["q"])
        offset = soa.qrot(par["attitude"], loc["t"])
        s = soa.qrot(att, loc["axis"])
        w_p = par["omega"]
        r = loc["rev"]
        zero = (0.0, 0.0, 0.0)
        sqd = soa.scale(s, loc["qd"])
        sqdd = soa.scale(s, loc["qdd"])
        w_x_sqd = soa.cross(w_p, sqd)
        omega = soa.add(w_p, soa.where(r, sqd, zero))
        vel = soa.add(soa.add(par["velocity"], soa.cross(w_p, offset)), soa.where(r, zero, sqd))
        alpha = soa.add(par["alpha"], soa.where(r, soa.add(sqdd, w_x_sqd), zero))
        acc = soa.add(
            soa.add(par["acceleration"], soa.cross(par["alpha"], offset)),
            soa.add(soa.cross(w_p, soa.cross(w_p, offset)), soa.where(r, zero, soa.add(sqdd, soa.scale(w_x_sqd, 2.0)))),
        )
        return dict(
            attitude=att,
            position=soa.add(par["position"], offset),
            axis=s,
            omega=omega,
            velocity=vel,
            alpha=alpha,
            acceleration=acc,
            offset=offset,
        )

    return forward_pass(lv, local, _root(tree, dtype, gravity_as_base), step, like=q)
