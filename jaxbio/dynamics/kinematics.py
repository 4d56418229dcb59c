"""Forward kinematics: world attitudes (quaternions), positions, velocities, accelerations."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio.dynamics._checks import public, as_state
from jaxbio.dynamics._levels import forward_pass, levels_of
from jaxbio.spatial import cross
from jaxbio.tree import SegmentTree

__all__ = ["forward_kinematics", "SegmentMotion", "segment_motion"]


class SegmentMotion(NamedTuple):
    """World-frame motion of every segment frame, each ``(n, ...)`` in segment order.

    ``attitude`` ``(n, 4)`` unit quaternions; ``position`` ``(n, 3)`` m (segment origin = joint
    centre); ``axis`` ``(n, 3)`` world joint axis; ``omega`` ``(n, 3)`` rad/s; ``velocity``
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


def _local_joint(tree: SegmentTree, q):
    """Per-segment joint transform in the parent frame: quaternion ``(n, 4)``, translation ``(n, 3)``."""
    rev = np.asarray(tree.is_revolute)
    angle = jnp.where(rev, q, jnp.zeros_like(q))
    slide = jnp.where(rev, jnp.zeros_like(q), q)
    joint_q = quat.from_axis_angle(tree.axes, angle)
    local_q = quat.multiply(tree.orientations, joint_q)
    local_t = tree.origins + quat.rotate(tree.orientations, tree.axes * slide[:, None])
    return local_q, local_t


def segment_motion(tree: SegmentTree, q, qd=None, qdd=None, *, gravity_as_base: bool = False) -> SegmentMotion:
    """Proximal → distal pass of the recursion (seed 001 §2.2, attitudes by quaternion).

    With ``gravity_as_base`` the world is given the acceleration ``-g``, so that each segment's
    ``acceleration`` is ``a − g`` as it enters seed 001 eq. 2.
    """
    dtype = jnp.result_type(tree.axes, q)
    zeros = jnp.zeros_like(q)
    qd = zeros if qd is None else qd
    qdd = zeros if qdd is None else qdd
    rev = jnp.asarray(tree.is_revolute)
    local_q, local_t = _local_joint(tree, q)
    lv = levels_of(tree.parents)
    z3 = jnp.zeros(3, dtype)
    root = dict(
        attitude=quat.identity(dtype),
        position=z3,
        omega=z3,
        velocity=z3,
        alpha=z3,
        acceleration=-tree.gravity.astype(dtype) if gravity_as_base else z3,
    )
    local = dict(q=local_q, t=local_t, axis=tree.axes, qd=qd, qdd=qdd, rev=rev)

    def step(par, loc):
        att = quat.multiply(par["attitude"], loc["q"])
        offset = quat.rotate(par["attitude"], loc["t"])
        pos = par["position"] + offset
        s = quat.rotate(att, loc["axis"])
        w_p = par["omega"]
        r = loc["rev"][:, None]
        sqd = s * loc["qd"][:, None]
        sqdd = s * loc["qdd"][:, None]
        w_x_sqd = cross(w_p, sqd)
        omega = w_p + jnp.where(r, sqd, 0.0)
        vel = par["velocity"] + cross(w_p, offset) + jnp.where(r, 0.0, sqd)
        alpha = par["alpha"] + jnp.where(r, sqdd + w_x_sqd, 0.0)
        acc = (
            par["acceleration"]
            + cross(par["alpha"], offset)
            + cross(w_p, cross(w_p, offset))
            + jnp.where(r, 0.0, sqdd + 2.0 * w_x_sqd)
        )
        return dict(attitude=att, position=pos, axis=s, omega=omega, velocity=vel, alpha=alpha,
                    acceleration=acc, offset=offset)

    out = forward_pass(lv, local, root, step)
    return SegmentMotion(**out)


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
    """
    q = as_state(tree, q, "q", check)
    m = segment_motion(tree, q)
    return m.position, m.attitude
