"""Straight muscle paths for many frames at once, batch-last: what `jax.vmap` of
`jaxbio.muscles.geometry.lengths` and `moment_arms` runs for paths without wrap objects.

The per-frame code batched by `jax.vmap` puts the frame first and ``(muscle, point, xyz)``
last: XLA on CPU then gathers each point's segment pose per frame and works on vectors of 3.
Here each chunk of frames runs the forward pass of forward kinematics
(`jaxbio.dynamics.batch_last.pose_rows`, the same chunk loop as the dynamics kernels) and every
path point as a row of the chunk's ``C`` frames: ``X = O_s + R(Q_s) p`` gathered by whole rows,
the pieces' lengths and unit vectors, and the moment arms by virtual work (the formulas of
`geometry._straight_moment_arms`). Same numbers as the per-frame code to round-off; not
differentiable by itself: `geometry` routes `jax.vmap` here with
`jaxbio.dynamics.batch_last.vmapped_by`, and derivatives (``jvp``, ``grad``, a batched model) to
the per-frame code. Measured in benchmarks/README.md ("Muscle paths batch-last").
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp

from jaxbio import _soa as soa
from jaxbio.dynamics.batch_last import chunked as _batched, chunk_size, default_layout, pose_rows

#: frames per chunk of the moment arms on CPU: their ``(m, nv)`` sums per frame make a chunk's
#: working set 9× the lengths' (gait10dof18musc, float64, 20,000 frames: 3.5–3.6 µs per frame
#: at 32–128, 5.6–5.8 at 256; the lengths keep the dynamics' 256)
ARMS_CHUNK = 128


def _point_segments(paths):
    """Each path point's segment index ``(m·P,)`` (0 for ground points) and whether it is on the
    ground ``(m·P, 1)``, static."""
    seg = paths.segment_index.reshape(-1)
    return np.maximum(seg, 0), (seg < 0)[:, None]


def _points(paths, att, pos, keep):
    """World path points, a 3-tuple of ``(m, P, C)`` rows; ``att``, ``pos`` the segments' rows."""
    m, P = paths.segment_index.shape
    C = att[0].shape[1]
    idx, on_world = _point_segments(paths)
    local = paths.points.astype(att[0].dtype).reshape(-1, 3)
    p = tuple(local[:, k, None] for k in range(3))  # (M, 1)
    moving = soa.add(tuple(c[idx] for c in pos), soa.qrot(tuple(c[idx] for c in att), p))
    X = tuple(jnp.where(on_world, pk, xk) for pk, xk in zip(p, moving))
    return keep(tuple(x.reshape(m, P, C) for x in X))


def _pieces(paths, X):
    """Each piece's length ``(m, P−1, C)`` (0 for padding pieces) and its vector 3-tuple."""
    real = paths.piece_mask[..., None]
    d = tuple(x[:, 1:] - x[:, :-1] for x in X)
    return jnp.where(real, jnp.sqrt(soa.dot(d, d)), 0.0), d


def _lengths_chunk(paths, tree, sched, q, a, b, external, *, fused: bool):
    """``(m, C)`` lengths of one chunk ``q`` ``(nq, C)``."""
    del a, b, external
    att, pos, keep = pose_rows(tree, sched, q, fused=fused)
    return jnp.sum(_pieces(paths, _points(paths, att, pos, keep))[0], axis=1)


def _lengths_velocities_chunk(paths, tree, sched, q, qd, b, external, *, fused: bool):
    """``(2 m, C)``: the lengths of one chunk, then their rates ``Σ_k u_k · (V_{k+1} − V_k)``,
    ``V = v_s + ω_s × (X − O_s)`` the velocity of a point on segment ``s`` (0 on the ground)."""
    del b, external
    att, pos, w, v, keep = pose_rows(tree, sched, q, qd, fused=fused)
    X = _points(paths, att, pos, keep)
    idx, on_world = _point_segments(paths)
    # the lever X − O from the kept points (recomputing R p here was ~10 % slower)
    arm = soa.sub(tuple(x.reshape(idx.size, -1) for x in X), tuple(c[idx] for c in pos))
    V = soa.add(tuple(c[idx] for c in v), soa.cross(tuple(c[idx] for c in w), arm))
    V = tuple(jnp.where(on_world, 0.0, c).reshape(X[0].shape) for c in V)
    length, d = _pieces(paths, X)
    dV = tuple(c[:, 1:] - c[:, :-1] for c in V)
    ok = length > 0
    rate = jnp.where(ok, soa.dot(d, dV) / jnp.where(ok, length, 1.0), 0.0)
    return jnp.concatenate([jnp.sum(length, axis=1), jnp.sum(rate, axis=1)], 0)


def _moment_arms_chunk(paths, tree, sched, q, a, b, external, *, fused: bool):
    """``(m·nv, C)`` moment arms of one chunk (muscle-major), a tree of revolute and prismatic
    joints: ``∂l/∂q_j = a_j · (Σ_p X_p × g_p − O_j × Σ_p g_p)`` (revolute) or ``a_j · Σ_p g_p``
    (prismatic), ``g_p = u_{p−1} − u_p``, sums over the points ``j`` moves
    (`geometry._straight_moment_arms`)."""
    del a, b, external
    att, pos, keep = pose_rows(tree, sched, q, fused=fused)
    X = _points(paths, att, pos, keep)
    length, d = _pieces(paths, X)
    ok = length > 0
    u = tuple(jnp.where(ok, c / jnp.where(ok, length, 1.0), 0.0) for c in d)  # (m, P−1, C)
    edge = jnp.zeros_like(u[0][:, :1])
    g = keep(tuple(jnp.concatenate([edge, c], 1) - jnp.concatenate([c, edge], 1) for c in u))  # (m, P, C) = ∂l/∂X
    Xg = soa.cross(X, g)
    seg = paths.segment_index
    moves = np.where((seg >= 0)[..., None], tree.dof_ancestors[np.maximum(seg, 0)], False)  # (m, P, nv)
    dt = q.dtype

    def over_points(v):  # Σ_p moves[m, p, j] v[m, p] -> (m, nv, C)
        return sum(jnp.asarray(moves[:, k, :, None], dt) * v[:, k, None, :] for k in range(moves.shape[1]))

    pull, turn = keep((tuple(over_points(c) for c in g), tuple(over_points(c) for c in Xg)))
    d_seg = tree.dofs.segment
    centre = tuple(c[d_seg][None] for c in pos)  # (1, nv, C): each coordinate's joint centre
    axis = soa.qrot(tuple(c[d_seg] for c in att), tuple(tree.dof_axes().astype(dt)[:, k, None] for k in range(3)))
    rot = np.asarray(tree.dofs.rotational)[None, :, None]
    lever = soa.where(rot, soa.sub(turn, soa.cross(centre, pull)), pull)
    r = -soa.dot(tuple(c[None] for c in axis), lever)  # (m, nv, C)
    return r.reshape(-1, r.shape[-1])


def _over_chunks(chunk_fn, paths, tree, states, width, chunk):
    """``chunk_fn(paths, …)`` over the batch (`jaxbio.dynamics.batch_last.chunked`): ``(B, width)``."""

    def run(tree_, sched, *parts, fused):
        return chunk_fn(paths, tree_, sched, *parts, fused=fused)

    return _batched(tree, run, states, None, chunk=chunk, layout=None, schedule=None, width=width)


def lengths_batch(paths, tree, q, chunk=None):
    """``(B, m)`` muscle–tendon lengths of straight paths (no wrap objects) for ``q`` ``(B, nq)``."""
    return _over_chunks(_lengths_chunk, paths, tree, [q, None, None], paths.n_muscles, chunk)


def lengths_velocities_batch(paths, tree, q, qd, chunk=None):
    """``(lengths (B, m), lengthening velocities (B, m))`` of straight paths on a tree of revolute
    and prismatic joints for ``q``, ``qd`` ``(B, n)``."""
    m = paths.n_muscles
    out = _over_chunks(_lengths_velocities_chunk, paths, tree, [q, qd, None], 2 * m, chunk)
    return out[:, :m], out[:, m:]


def moment_arms_batch(paths, tree, q, chunk=None):
    """``(B, m, nv)`` moment arms of straight paths on a tree of revolute and prismatic joints for
    ``q`` ``(B, nq)``."""
    if chunk is None:
        chunk = chunk_size(q.shape[0], default_layout(), cpu_chunk=ARMS_CHUNK)
    out = _over_chunks(_moment_arms_chunk, paths, tree, [q, None, None], paths.n_muscles * tree.nv, chunk)
    return out.reshape(q.shape[0], paths.n_muscles, tree.nv)
