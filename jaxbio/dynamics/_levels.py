"""Level-synchronous tree passes (after MJX ``scan.body_tree``).

Segments are grouped by depth at trace time with numpy. The proximal → distal pass computes a
whole level at once from its parents' results (a static gather from the previous level); the
distal → proximal pass adds every level's contributions into its parents with
`jax.ops.segment_sum`. Cost grows with tree depth, not with the number of segments, and no
scatter into a full ``(n, ...)`` buffer happens: each level keeps its own arrays and one static
permutation restores segment order at the end.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Levels(NamedTuple):
    """Static index tables of a tree (all numpy)."""

    members: tuple[np.ndarray, ...]  # segment indices of each level
    parent_pos: tuple[np.ndarray, ...]  # position of each member's parent inside the previous level
    order: np.ndarray  # concatenated members -> segment order permutation (inverse)


def levels_of(parents: tuple[int, ...]) -> Levels:
    depth: list[int] = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    n_levels = max(depth) + 1
    members = tuple(np.array([i for i, d in enumerate(depth) if d == lev], dtype=np.int32) for lev in range(n_levels))
    pos = np.empty(len(parents), dtype=np.int32)
    for m in members:
        pos[m] = np.arange(len(m))
    parent_pos = tuple(
        np.zeros(len(m), dtype=np.int32) if lev == 0 else pos[np.asarray([parents[i] for i in m])]
        for lev, m in enumerate(members)
    )
    flat = np.concatenate(members)
    order = np.empty_like(flat)
    order[flat] = np.arange(len(flat))
    return Levels(members, parent_pos, order)


def take_level(x, members: np.ndarray):
    """Rows ``members`` of every leaf of ``x`` (static gather; a slice when contiguous)."""
    if len(members) and np.all(np.diff(members) == 1):
        lo, hi = int(members[0]), int(members[-1]) + 1
        return jax.tree_util.tree_map(lambda a: a[lo:hi], x)
    return jax.tree_util.tree_map(lambda a: a[members], x)


def _assemble(per_level: list, lv: Levels):
    flat = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, axis=0), *per_level)
    if np.all(lv.order == np.arange(len(lv.order))):
        return flat
    return jax.tree_util.tree_map(lambda a: a[lv.order], flat)


def forward_pass(lv: Levels, local, root, step: Callable):
    """Proximal → distal: ``out_level = step(parent_out, local_level)``.

    ``local`` is a pytree of ``(n, ...)`` per-segment inputs, ``root`` the world's output (no
    leading axis; broadcast to level 0). Returns the outputs in segment order, ``(n, ...)``.
    """
    per_level = []
    prev = None
    for lev, m in enumerate(lv.members):
        loc = take_level(local, m)
        if lev == 0:
            par = jax.tree_util.tree_map(lambda r: jnp.broadcast_to(r, (len(m),) + jnp.shape(r)), root)
        else:
            par = jax.tree_util.tree_map(lambda a: a[lv.parent_pos[lev]], prev)
        prev = step(par, loc)
        per_level.append(prev)
    return _assemble(per_level, lv)


def backward_pass(lv: Levels, own, transport: Callable):
    """Distal → proximal accumulation: ``total_i = own_i + Σ_children transport(total_c, c)``.

    ``own`` is a pytree of ``(n, ...)`` per-segment terms; ``transport(total_level, level_index)``
    maps a level's totals to what each member passes to its parent (e.g. moves a moment to the
    parent's origin). Returns totals in segment order.
    """
    per_level: list = [None] * len(lv.members)
    carry = None
    for lev in range(len(lv.members) - 1, -1, -1):
        m = lv.members[lev]
        tot = take_level(own, m)
        if carry is not None:
            contrib = transport(carry, lev + 1)
            seg = lv.parent_pos[lev + 1]
            tot = jax.tree_util.tree_map(
                lambda t, c: t + jax.ops.segment_sum(c, seg, num_segments=len(m), indices_are_sorted=bool(np.all(np.diff(seg) >= 0))),
                tot,
                contrib,
            )
        per_level[lev] = tot
        carry = tot
    return _assemble(per_level, lv)
