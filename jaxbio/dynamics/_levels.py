"""Level-synchronous tree passes (after MJX ``scan.body_tree``; seed 001 §3.3 hierarchy levels).

Segments are grouped by depth at trace time with numpy and each level is padded to the width
``K`` of the widest one. A pass is then one `jax.lax.scan` over depth whose body handles a whole
level at once:

- proximal → distal: gather each member's parent from the previous level's results (the scan
  carry) and apply ``step``;
- distal → proximal: each level's totals are its own terms plus its children's contributions,
  brought in by "rounds" of gathers (round ``r`` hands each parent its ``r``-th child; a missing
  child reads a zero pad), so no scatter-add is needed.

The compiled program holds one copy of the level body whatever the depth, so compile time does
not grow with the number of segments (a 100-segment chain compiles as fast as a 2-segment one),
and the scan's per-level overhead is shared by the whole batch under `jax.vmap`. One static
gather maps the ``(levels, K)`` results back to segment order. Leaves of the pytrees passed in
have the segment as their leading axis.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Levels(NamedTuple):
    """Static index tables of a tree (numpy)."""

    members: np.ndarray  # (L, K) segment index of each slot (padding repeats a real segment)
    parent_pos: np.ndarray  # (L, K) slot of each member's parent in the previous level
    rounds: np.ndarray  # (L, R, K) per parent slot: slot of its r-th child in the next level, or K
    slot: np.ndarray  # (n,) flat index level * K + position of each segment
    depth_members: tuple[np.ndarray, ...]  # unpadded members per level


_CACHE: dict[tuple[int, ...], Levels] = {}


def levels_of(parents: tuple[int, ...]) -> Levels:
    if parents in _CACHE:
        return _CACHE[parents]
    depth: list[int] = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    L = max(depth) + 1
    groups = [[i for i, d in enumerate(depth) if d == lev] for lev in range(L)]
    K = max(len(g) for g in groups)
    pos = np.empty(len(parents), dtype=np.int32)
    for g in groups:
        pos[g] = np.arange(len(g))
    members = np.zeros((L, K), np.int32)
    parent_pos = np.zeros((L, K), np.int32)
    for lev, g in enumerate(groups):
        members[lev, : len(g)] = g
        members[lev, len(g):] = g[0]
        if lev:
            parent_pos[lev, : len(g)] = pos[[parents[i] for i in g]]
    children: list[list[list[int]]] = [[[] for _ in range(K)] for _ in range(L)]
    for i, p in enumerate(parents):
        if p >= 0:
            children[depth[p]][pos[p]].append(int(pos[i]))
    R = max(1, max(len(c) for lev in children for c in lev))
    rounds = np.full((L, R, K), K, np.int32)
    for lev in range(L):
        for k, ch in enumerate(children[lev]):
            rounds[lev, : len(ch), k] = ch
    slot = np.asarray([depth[i] * K + pos[i] for i in range(len(parents))], np.int32)
    lv = Levels(members, parent_pos, rounds, slot, tuple(np.asarray(g, np.int32) for g in groups))
    _CACHE[parents] = lv
    return lv


def _gather(x, idx):
    return jax.tree_util.tree_map(lambda a: a[idx], x)


def _select(x, onehot):
    """``out[k] = Σ_j onehot[k, j] x[j]`` for every leaf (``x`` leaves ``(K,)``).

    Inside the scan the slot maps change per level; a one-hot contraction written elementwise
    fuses with its neighbours, where a dynamic gather under `jax.vmap` would not.
    """
    return jax.tree_util.tree_map(lambda a: jnp.sum(onehot * a[None, :], axis=1), x)


def _onehot(idx: np.ndarray, width: int) -> np.ndarray:
    return (idx[..., None] == np.arange(width)).astype(np.float64)


def _by_level(x, lv: Levels):
    """Per-segment leaves ``(n, ...)`` -> per-slot leaves ``(L, K, ...)``."""
    return _gather(x, jnp.asarray(lv.members))


def _to_segments(y, lv: Levels):
    """Per-slot leaves ``(L, K, ...)`` -> segment order ``(n, ...)``."""
    return jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:])[lv.slot], y)


def forward_pass(lv: Levels, local, root, step: Callable, like=None):
    """Proximal → distal: ``out_level = step(parent_out, local_level)``.

    ``local``: pytree of per-segment inputs ``(n, ...)``; ``root``: dict, the world's values of
    the keys that children read from their parent (scalar leaves); ``step`` returns a dict with
    at least those keys. ``like``: an ``(n,)`` state array; the scan's first carry is built from
    ``zeros_like(like)``, so that it has the state's type inside `jax.shard_map` (whose
    varying-axis check rejects a carry that starts from constants). Returns ``step``'s outputs
    in segment order, leaves ``(n, ...)``.
    """
    K = lv.members.shape[1]
    zero = 0.0 if like is None else jnp.zeros_like(like[:1])
    init = jax.tree_util.tree_map(lambda r: jnp.broadcast_to(r + zero, (K,) + jnp.shape(r)), root)

    def body(carry, xs):
        loc, onehot = xs
        out = step(_select(carry, onehot.astype(carry_dtype)), loc)
        return {k: out[k] for k in carry}, out

    carry_dtype = jax.tree_util.tree_leaves(init)[0].dtype
    _, ys = jax.lax.scan(body, init, (_by_level(local, lv), _onehot(lv.parent_pos, K)))
    return _to_segments(ys, lv)


def backward_pass(lv: Levels, own, transport: Callable, aux=None):
    """Distal → proximal: ``total_i = own_i + Σ_children transport(total_c, aux_c)``.

    ``own``: pytree of per-segment terms ``(n, ...)``; ``aux``: per-segment data the transport
    needs (e.g. the child's offset from its parent); ``transport(level_totals, level_aux)`` gives
    what each member passes to its parent. Returns totals in segment order.
    """
    K = lv.members.shape[1]
    # zeros_like keeps the terms' type inside jax.shard_map (see forward_pass)
    zero = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(jnp.zeros_like(a[:1]), (K,) + a.shape[1:]), own)

    def body(contrib, xs):
        own_l, aux_l, children = xs
        # children[k, j] = 1 when slot j of the next level is a child of slot k
        tot = jax.tree_util.tree_map(jnp.add, own_l, _select(contrib, children.astype(dtype)))
        return transport(tot, aux_l), tot

    # rounds[l] points into level l + 1, whose contributions are the carry when level l runs
    dtype = jax.tree_util.tree_leaves(own)[0].dtype
    children = _onehot(lv.rounds, K + 1).sum(axis=1)[..., :K]  # (L, K, K); index K = no child
    xs = (_by_level(own, lv), _by_level(aux, lv), children)
    _, ys = jax.lax.scan(body, zero, xs, reverse=True)
    return _to_segments(ys, lv)
