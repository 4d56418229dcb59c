"""Point forces on segments → the ``external`` wrenches of the recursions.

A force applied at a point fixed on a segment (a held weight, a hand load, a spring's pull) enters
`jaxbio.inverse_dynamics`, `jaxbio.segment_wrenches` and the forward dynamics as the pair
``external = (forces (n, 3), moments (n, 3))``: world frame, moments about each segment's origin
(its joint centre), summed per segment. `point_loads` builds that pair; muscles have their own
builder (`jaxbio.muscles.geometry.muscle_wrenches`) and ground contacts theirs
(`jaxbio.dynamics.contact_external`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio._validate import as_shape
from jaxbio.dynamics._checks import as_state
from jaxbio.dynamics.kinematics import segment_motion
from jaxbio.spatial import cross
from jaxbio.tree import SegmentTree

__all__ = ["point_loads"]


def point_loads(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    segments: Sequence[int | str],
    points: Float[ArrayLike, "k 3"],
    forces: Float[ArrayLike, "k 3"],
    torques: Float[ArrayLike, "k 3"] | None = None,
    *,
    world_points: bool = False,
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """External wrenches of ``k`` point forces (and free torques): ``[f ; (X − O_s) × f + t]``
    summed per segment.

    Args:
        tree: the model (``n`` segments).
        q: ``(n,)`` rad / m, generalised coordinates.
        segments: static, ``k`` segment indices or names: the segment each force acts on.
        points: ``(k, 3)`` m, the point of application in its segment's frame (in the world
            frame with ``world_points``: a centre of pressure measured by a force plate).
        forces: ``(k, 3)`` N, world frame (a weight: ``mass · tree.gravity``).
        torques: ``(k, 3)`` N·m, world frame, free moments added to each segment (None: zero).

    Returns:
        ``(forces (n, 3) N, moments (n, 3) N·m)``, world frame, moments about each segment's
        origin: the ``external`` argument of `jaxbio.inverse_dynamics`. Their generalised force is
        the virtual work ``Σ J_v(X)ᵀ f`` of the point forces, so
        ``inverse_dynamics(…, external=point_loads(…)) − inverse_dynamics(…) = −Σ J_vᵀ f``.
        jit, vmap and grad work (``segments`` is static).
    """
    segs = []
    for s in segments:
        if isinstance(s, str):
            if s not in tree.names:
                raise ValueError(f"segments: unknown segment {s!r}; segments are {list(tree.names)}")
            s = tree.names.index(s)
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s < tree.n_segments:
            raise ValueError(f"segments: {s!r} is not a segment index in [0, {tree.n_segments}) of {list(tree.names)}")
        segs.append(int(s))
    q = as_state(tree, q, "q", False)
    k = len(segs)
    points = as_shape(points, (k, 3), "points", " (one segment-frame point per entry of segments)", like=q)
    forces = as_shape(forces, (k, 3), "forces", " (one world-frame force per entry of segments)", like=q)
    torques = (
        jnp.zeros_like(forces)
        if torques is None
        else as_shape(torques, (k, 3), "torques", " (one world-frame free moment per entry of segments)", like=q)
    )
    return _point_loads(tree, q, tuple(segs), points, forces, torques, bool(world_points))


@functools.partial(jax.jit, static_argnums=(2, 6))
def _point_loads(tree, q, segments, points, forces, torques, world_points):
    n = tree.n_segments
    zeros = jnp.zeros((n, 3), q.dtype)
    if not segments:
        return zeros, zeros
    seg = np.asarray(segments)
    motion = segment_motion(tree, q)
    if world_points:
        lever = points - motion.position[seg]
    else:
        lever = quat.rotate(motion.attitude[seg], points)  # X − O_s, world frame
    return zeros.at[seg].add(forces), zeros.at[seg].add(cross(lever, forces) + torques)
