"""Forward kinematics: world attitudes (quaternions), positions, velocities, accelerations, and the
world Jacobian of a point fixed on a segment (`point_jacobian`, the one every algorithm uses)."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxbio import quaternion as quat
from jaxbio import _soa as soa
from jaxbio._validate import as_shape, is_concrete
from jaxbio.dynamics._checks import public, as_state
from jaxbio.dynamics._motion import motion_soa
from jaxbio.spatial import cross
from jaxbio.tree import SegmentTree

__all__ = ["forward_kinematics", "SegmentMotion", "segment_motion", "motion_soa", "point_jacobian"]


class SegmentMotion(NamedTuple):
    """World-frame motion of every segment frame, each ``(n, ...)`` in segment order
    (``n = n_segments``).

    ``attitude`` ``(n, 4)`` unit quaternions; ``position`` ``(n, 3)`` m (segment origin = joint
    centre); ``axis`` ``(nv, 3)`` world axis of each velocity coordinate (the joint axis of a
    revolute or prismatic joint, the segment's frame axes for a ball or free joint); ``omega`` ``(n, 3)`` rad/s; ``velocity``
    ``(n, 3)`` m/s of the origin; ``alpha`` ``(n, 3)`` rad/s²; ``acceleration`` ``(n, 3)`` m/s² of
    the origin (minus gravity when ``gravity_as_base`` was set); ``offset`` ``(n, 3)`` m, the
    vector from the parent's origin (the world origin for roots) to this origin.
    """

    attitude: Array
    position: Array
    axis: Array
    omega: Array
    velocity: Array
    alpha: Array
    acceleration: Array
    offset: Array


def segment_motion(tree: SegmentTree, q, qd=None, qdd=None, *, gravity_as_base: bool = False) -> SegmentMotion:
    """`motion_soa` with every quantity stacked to ``(n, 3)`` / ``(n, 4)`` arrays.

    Without ``qd``, ``qdd`` and ``gravity_as_base`` (poses only) it runs the forward pass alone,
    and under `jax.vmap` the batch-last kernel `jaxbio.dynamics.batch_last.pose_batch` (the velocity
    fields are then zero); its derivatives are this per-state pass's."""
    if qd is None and qdd is None and not gravity_as_base:
        from jaxbio.dynamics.batch_last import pose

        tree.check_unbatched()
        q = jnp.asarray(q)
        att, pos = pose(tree, q.astype(jnp.result_type(tree.axes, q)))
        d = tree.dofs
        # each coordinate's axis is fixed in its segment (R e_k); the offset from the parent's origin
        axis = quat.rotate(att[d.segment], tree.dof_axes().astype(pos.dtype))
        parents = np.asarray(tree.parents)
        off = pos - jnp.where((parents >= 0)[:, None], pos[np.maximum(parents, 0)], 0.0)
        zero = jnp.zeros_like(pos)
        return SegmentMotion(att, pos, axis, zero, zero, zero, zero, off)
    out = motion_soa(tree, q, qd, qdd, gravity_as_base=gravity_as_base)
    return SegmentMotion(**{k: soa.join(v) for k, v in out.items()})


@public
def forward_kinematics(
    tree: SegmentTree, q: Float[ArrayLike, " n"], *, check: bool = False
) -> tuple[Float[Array, "n 3"], Float[Array, "n 4"]]:
    """World pose of every segment frame.

    Args:
        tree: the model.
        q: ``(n,)`` rad (revolute) / m (prismatic), generalised coordinates.
        check: if true, NaN/inf in ``q`` raise at run time (`equinox.error_if`).

    Returns:
        ``positions`` ``(n, 3)`` m, world frame, of each segment origin (its joint centre), and
        ``quaternions`` ``(n, 4)`` ``(w, x, y, z)``, attitude of each segment frame in the world.

    Under `jax.vmap` over ``q`` it runs the batch-last kernel
    (`jaxbio.dynamics.batch_last.pose_batch`, faster than the per-state pass; benchmarks/README.md); derivatives are the per-state pass's.
    """
    q = as_state(tree, q, "q", check)
    m = segment_motion(tree, q)
    return m.position, m.attitude


def point_jacobian(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    segment: str | int | Int[ArrayLike, ""],
    point: Float[ArrayLike, " 3"],
    *,
    motion: SegmentMotion | None = None,
) -> tuple[Float[Array, "3 n"], Float[Array, "3 n"]]:
    """World velocity Jacobians of a point fixed on a segment: ``v = J_v q̇``, ``ω = J_ω q̇``
    (``q̇`` the ``nv`` velocity).

    Column ``j`` is non-zero only where coordinate ``j`` moves ``segment`` (a static ancestor
    mask): ``a_j × (X − O_j)`` (an angular coordinate: revolute, or ω of a ball/free joint;
    ``a_j`` its world axis, ``O_j`` its joint centre, ``X`` the point) or ``a_j`` (prismatic, or
    the linear velocity of a free joint) for ``J_v``; ``a_j`` (angular) or 0 for ``J_ω``.

    Args:
        tree: the model.
        q: ``(n,)`` rad / m, generalised coordinates.
        segment: the segment's name, or its index (an int, also a traced one: `jax.vmap` over
            segments and points gives the Jacobians of many points, as `com_jacobians` does).
        point: ``(3,)`` m, the point in the segment frame.
        motion: optional `segment_motion` of ``(tree, q)`` already computed (it is reused).

    Returns:
        ``(J_v, J_ω)``, each ``(3, nv)``, world frame: m/rad (m/m on prismatic joints) and rad/rad.
    """
    q = as_state(tree, q, "q", False)
    point = as_shape(point, (3,), "point", " (m, in the segment frame)")
    seg = tree.index(segment) if isinstance(segment, str) else segment
    if is_concrete(seg):
        n = tree.n_segments
        if jnp.ndim(seg) != 0 or not -n <= int(seg) < n:
            raise ValueError(f"segment must be a name or an index in [0, {n}) of model {tree.name!r}, got {seg!r}")
        seg = int(seg) % n
    mo = segment_motion(tree, q) if motion is None else motion
    # a traced index out of range reads NaN (JAX would clamp it to a plausible other segment)
    pos = jnp.take(mo.position, seg, axis=0, mode="fill", fill_value=jnp.nan)
    att = jnp.take(mo.attitude, seg, axis=0, mode="fill", fill_value=jnp.nan)
    X = pos + quat.rotate(att, point.astype(mo.position.dtype))
    d = tree.dofs
    # (nv, 1): coordinate j moves the segment
    anc = jnp.take(jnp.asarray(tree.dof_ancestors), seg, axis=0, mode="clip")[:, None]
    rot = jnp.asarray(d.rotational)[:, None]
    centre = mo.position[d.segment]  # each coordinate's joint centre (its segment's origin)
    jv = jnp.where(anc, jnp.where(rot, cross(mo.axis, X[None, :] - centre), mo.axis), 0.0)
    jw = jnp.where(anc & rot, mo.axis, 0.0)
    return jv.T, jw.T
