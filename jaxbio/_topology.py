"""Static topology of a segment tree: depths, levels and children, from the parent indices.

The one home of the level grouping (Du 2021, §3.3 hierarchy levels): `jaxbio.tree.SegmentTree`
reports it, and the level-synchronous passes (`jaxbio.dynamics._levels`, `jaxbio.dynamics.batch_last`)
build their index tables on it. Plain Python on the static ``parents`` tuple (parents come
before children; ``-1`` is the world), cached per topology with a bounded LRU cache.
"""

from __future__ import annotations

from functools import lru_cache

TOPOLOGY_CACHE = 64  # distinct trees whose tables are kept (each a few kB at most)


@lru_cache(maxsize=TOPOLOGY_CACHE)
def depths(parents: tuple[int, ...]) -> tuple[int, ...]:
    """Depth of each segment: 0 for a child of the world, its parent's depth + 1 otherwise."""
    out: list[int] = []
    for p in parents:
        out.append(0 if p < 0 else out[p] + 1)
    return tuple(out)


@lru_cache(maxsize=TOPOLOGY_CACHE)
def levels(parents: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Segment indices by depth, increasing within a level: ``levels[0]`` are children of the world."""
    d = depths(parents)
    return tuple(tuple(i for i, di in enumerate(d) if di == lev) for lev in range(max(d) + 1))


@lru_cache(maxsize=TOPOLOGY_CACHE)
def children(parents: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Children of each segment, in increasing index."""
    out: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            out[p].append(i)
    return tuple(tuple(c) for c in out)


@lru_cache(maxsize=TOPOLOGY_CACHE)
def depth_first(parents: tuple[int, ...]) -> tuple[int, ...]:
    """Segment indices in depth-first pre-order, roots and children in increasing index (the
    order of nested bodies in a MuJoCo model, `jaxbio.io.to_mjcf`)."""
    kids = children(parents)
    order: list[int] = []
    stack = [i for i in reversed(range(len(parents))) if parents[i] < 0]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(reversed(kids[i]))
    return tuple(order)
