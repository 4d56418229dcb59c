"""Level-synchronous tree passes (after MJX ``scan.body_tree``; Du 2021, §3.3 hierarchy levels).

Segments are grouped by depth at trace time with numpy and each level is padded to the width
``K`` of the widest one. A pass is then one `jax.lax.scan` over depth whose body handles a whole
level at once:

- proximal → distal: gather each member's parent from the previous level's results (the scan
  carry) and apply ``step``;
- distal → proximal: each level's totals are its own terms plus its children's contributions.

Both select by one-hot contractions, ``(K, K)`` per level, which fuse with their neighbours
under `jax.vmap`; levels wider than `ONEHOT_WIDTH` (a star, a bushy tree: ``K²`` grows to
gigabytes) gather each member's parent and sum the children by a scatter-add (`jax.ops.segment_sum`)
instead, ``K`` per level.

The compiled program holds one copy of the level body whatever the depth, so compile time does
not grow with the number of segments (a 100-segment chain compiles as fast as a 2-segment one),
and the scan's per-level overhead is shared by the whole batch under `jax.vmap`. One static
gather maps the ``(levels, K)`` results back to segment order. Leaves of the pytrees passed in
have the segment as their leading axis.

The batch-last kernels (`jaxbio.dynamics.batch_last`) use a refinement of the same tables,
`schedule`: consecutive levels grouped into *phases*, and inside a phase segments scheduled into
*steps* that may mix levels, so that narrow and wide levels pad less. Both build on the level
grouping of `jaxbio._topology`; all tables are numpy, built once per topology (bounded LRU caches).
"""

from __future__ import annotations

import heapq
from functools import lru_cache
from typing import NamedTuple
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio._topology import TOPOLOGY_CACHE, children, depths, levels


class Levels(NamedTuple):
    """Static index tables of a tree (numpy)."""

    members: np.ndarray  # (L, K) segment index of each slot (padding repeats a real segment)
    parent_pos: np.ndarray  # (L, K) slot of each member's parent in the previous level
    up: np.ndarray  # (L, K) slot in level l of the parent of slot k of level l + 1, or K (none)
    slot: np.ndarray  # (n,) flat index level * K + position of each segment
    depth_members: tuple[np.ndarray, ...]  # unpadded members per level


@lru_cache(maxsize=TOPOLOGY_CACHE)
def levels_of(parents: tuple[int, ...]) -> Levels:
    """The level tables of the tree with these ``parents`` (cached per topology)."""
    depth, groups = depths(parents), levels(parents)
    L = len(groups)
    K = max(len(g) for g in groups)
    pos = np.empty(len(parents), dtype=np.int32)
    for g in groups:
        pos[list(g)] = np.arange(len(g))
    members = np.zeros((L, K), np.int32)
    parent_pos = np.zeros((L, K), np.int32)
    for lev, g in enumerate(groups):
        members[lev, : len(g)] = g
        members[lev, len(g) :] = g[0]
        if lev:
            parent_pos[lev, : len(g)] = pos[[parents[i] for i in g]]
    up = np.full((L, K), K, np.int32)
    for lev in range(1, L):
        up[lev - 1, : len(groups[lev])] = parent_pos[lev, : len(groups[lev])]
    slot = np.asarray([depth[i] * K + pos[i] for i in range(len(parents))], np.int32)
    return Levels(members, parent_pos, up, slot, tuple(np.asarray(g, np.int32) for g in groups))


def _gather(x, idx):
    return jax.tree_util.tree_map(lambda a: a[idx], x)


#: Levels up to this wide select parents and sum children by one-hot contractions (``K²`` per
#: level and state, which fuse); wider trees gather each slot's parent and scatter-add children
#: (``K`` per level): for a star of 1,500 leaves the one-hot tables took 50 GB to build
#: (benchmarks/README.md, "Wide and bushy trees"). Every shipped model is within it.
ONEHOT_WIDTH = 64


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
        loc, parent = xs
        if K > ONEHOT_WIDTH:  # parent: the slot of each member's parent
            out = step(_gather(carry, parent), loc)
        else:  # parent: one-hot (K, K)
            out = step(_select(carry, parent.astype(carry_dtype)), loc)
        return {k: out[k] for k in carry}, out

    carry_dtype = jax.tree_util.tree_leaves(init)[0].dtype
    parent = lv.parent_pos if K > ONEHOT_WIDTH else _onehot(lv.parent_pos, K)
    _, ys = jax.lax.scan(body, init, (_by_level(local, lv), parent))
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
        if K > ONEHOT_WIDTH:  # children[j]: slot of the parent of the next level's slot j, or K (none)
            kids = jax.tree_util.tree_map(lambda a: jax.ops.segment_sum(a, children, K + 1)[:K], contrib)
        else:  # children[k, j] = 1 when slot j of the next level is a child of slot k
            kids = _select(contrib, children.astype(dtype))
        tot = jax.tree_util.tree_map(jnp.add, own_l, kids)
        return transport(tot, aux_l), tot

    # level l's children are in level l + 1, whose contributions are the carry when level l runs
    dtype = jax.tree_util.tree_leaves(own)[0].dtype
    children = lv.up if K > ONEHOT_WIDTH else _onehot(lv.up, K + 1).transpose(0, 2, 1)[:, :K]  # (L, K, K)
    xs = (_by_level(own, lv), _by_level(aux, lv), children)
    _, ys = jax.lax.scan(body, zero, xs, reverse=True)
    return _to_segments(ys, lv)


# ---- phases of mixed-level steps (the batch-last kernels, `jaxbio.dynamics.batch_last`) ---------


class Phase(NamedTuple):
    """Segments processed by one pair of scans: ``S`` steps of ``K`` slots each.

    A step's members have their parents in earlier steps of the phase or in earlier phases, and
    their children in later steps or later phases, so a step may mix tree levels. The forward scan
    writes each step's results into a table of ``E + S·K`` rows: ``E`` rows copied from the world
    and earlier phases (``extern``), then ``K`` rows per step; the reverse scan writes each step's
    totals into a table of ``S·K + 1`` rows (the last one zero).
    """

    members: np.ndarray  # (S, K) segment of each slot (padding repeats the step's first member)
    parent_row: np.ndarray  # (S, K) row of each slot's parent in the forward table
    extern: np.ndarray  # (E,) global row (see `Schedule`) of each extern row of the forward table
    child_rows: np.ndarray  # (S, R, K) row of each slot's r-th child of this phase, or S·K (zero)
    later_children: np.ndarray  # (R', S·K) global row of each row's r-th child in a later phase, or 0


class Schedule(NamedTuple):
    """Phases in order. Global rows number the world (0) and then every phase's ``S·K`` rows."""

    phases: tuple[Phase, ...]
    slot: np.ndarray  # (n,) global row − 1 of each segment: its row in the phases' concatenated rows


def _window(parents: tuple[int, ...], segs: list[int]):
    """Children inside ``segs`` and the height (longest chain of descendants in ``segs``, 1 for a
    leaf) of each member, and the members whose parent is outside ``segs``."""
    inside = set(segs)
    kids = {i: [c for c in children(parents)[i] if c in inside] for i in segs}
    height: dict[int, int] = {}
    for i in sorted(segs, reverse=True):  # children have larger indices than their parent
        height[i] = 1 + max((height[c] for c in kids[i]), default=0)
    roots = [i for i in segs if parents[i] not in inside]
    return kids, height, roots


def _steps(parents: tuple[int, ...], segs: list[int], K: int, window=None) -> list[list[int]]:
    """List scheduling of ``segs`` (a parent before its children) into steps of at most ``K``:
    each step takes the ready segments with the longest chain of descendants in ``segs`` first
    (ties: lower index). A heap keeps it O(n log n). ``window``: `_window` of ``segs`` if known."""
    kids, height, roots = _window(parents, segs) if window is None else window
    ready = [(-height[i], i) for i in roots]
    heapq.heapify(ready)
    steps = []
    while ready:
        step = sorted(heapq.heappop(ready)[1] for _ in range(min(K, len(ready))))
        steps.append(step)
        for i in step:
            for c in kids[i]:
                heapq.heappush(ready, (-height[c], c))
    return steps


#: Rounds (children of one slot in its phase, `Phase.child_rows`) up to which a step of the
#: batch-last kernels sums its children by one gather and add per round, in order; a step with
#: more (a segment with many children: a star, a bushy tree) adds them by one scatter-add of its
#: ``(child row, slot)`` pairs (`child_pairs`), so that the program holds two operations, not one
#: per child: a star of 1,500 leaves did not compile in 6 GB with rounds (benchmarks/README.md,
#: "Wide and bushy trees"). Schedules of large trees price those steps (`WIDE_STEP_COST`), so
#: that they rather end a phase at such a segment and sum its children once, outside the loops
#: (`_large_tree_phases`). Every shipped model is within it and keeps the rounds' program exactly.
WIDE_ROUNDS = 16
#: `_large_tree_phases`: what a step that sums its children by scatter-add costs beyond its slots,
#: in slots (a bushy 2,000-segment tree in one phase of 51 steps of 40 slots ran as 3,200 slots).
WIDE_STEP_COST = 20.0

#: Trees up to this many segments get the exhaustive schedule (every run of consecutive levels a
#: candidate phase, each list-scheduled at every width); larger ones `_large_tree_phases`.
EXHAUSTIVE_SEGMENTS = 64
#: `_large_tree_phases`: phases of up to this many levels are costed at every width.
_EXACT_SPAN = 32
_MANY_WIDTHS = 256


def _cost(steps, step_cost: float) -> float:
    return len(steps) * (max(len(s) for s in steps) + step_cost)


@lru_cache(maxsize=TOPOLOGY_CACHE)
def schedule(parents: tuple[int, ...], *, step_cost: float = 0.75, phase_cost: float = 6) -> Schedule:
    """Phases of consecutive tree levels, each scheduled into steps of equal width ``K``.

    Padding every level to the widest (one scan) wastes slots on trees whose levels differ in
    width (the whole body: 65 slots for 28 segments); one scan per level multiplies compile time.
    Inside a phase a step need not be one level (`_steps`: the whole body's limbs, levels of
    widths 3, 3, 3, 5, 4, 2, 2, fit in 8 steps of 3). The phases minimise
    ``Σ S·(K + step_cost) + phase_cost`` over the phases, in units of one slot (one segment's
    step for one state). The defaults were fitted to the whole body on CPU (a step costs about
    0.75 of a slot; a phase, one more pair of scans, costs compile time worth 6 slots; see
    benchmarks/README.md): 6 steps of 1, then 8 of 3, 30 slots for 28 segments.

    Trees of at most `EXHAUSTIVE_SEGMENTS` segments (every shipped model) are searched
    exhaustively: a dynamic programme over every run of consecutive levels, each with every
    width ``1 … widest level``. That search costs O(levels² · segments · width), which made a
    1,000-segment chain slow to trace (issue #17); larger trees use `_large_tree_phases`,
    which costs candidate phases in closed form.
    Cached per topology and costs.
    """
    if len(parents) > EXHAUSTIVE_SEGMENTS:
        return _tables(parents, _large_tree_phases(parents, step_cost, phase_cost))
    groups = [list(g) for g in levels(parents)]

    def best_steps(segs, max_width):  # K = max_width (the widest level): one step per level
        if max_width == 1:
            return [[i] for i in segs]
        window = _window(parents, segs)
        return min(
            (_steps(parents, segs, K, window) for K in range(1, max_width + 1)), key=lambda st: _cost(st, step_cost)
        )

    L = len(groups)
    plan: dict[tuple[int, int], list[list[int]]] = {}
    best, cut = [0.0] + [np.inf] * L, [0] * (L + 1)
    for b in range(1, L + 1):
        for a in range(b):
            segs = sorted(i for g in groups[a:b] for i in g)
            steps = plan[a, b] = best_steps(segs, max(len(g) for g in groups[a:b]))
            c = best[a] + _cost(steps, step_cost) + phase_cost
            if c < best[b]:
                best[b], cut[b] = c, a
    bounds, b = [], L
    while b > 0:
        bounds.append((cut[b], b))
        b = cut[b]
    return _tables(parents, [plan[a, b] for a, b in reversed(bounds)])


def _widths_to_try(W: int) -> np.ndarray:
    """Every width ``1 … W``, or for a very wide phase 1 … 16 and a geometric grid up to ``W``."""
    if W <= _MANY_WIDTHS:
        return np.arange(1, W + 1)
    return np.unique(np.concatenate([np.arange(1, 17), np.geomspace(16, W, 64).round().astype(np.int64), [W]]))


def _estimate(w: np.ndarray, widths: np.ndarray, step_cost: float) -> tuple[float, int]:
    """``(cost, K)`` of the cheapest width ``K`` among ``widths`` for a phase whose levels have
    ``w`` segments each, without scheduling it: `_steps` at width ``K`` takes
    ``S(K) = max_j (j + ⌈N_j / K⌉)`` steps, ``N_j`` the phase's segments at its level ``j`` or
    deeper (a segment of level ``j`` cannot run before step ``j``, and ``N_j`` segments need
    ``⌈N_j / K⌉`` steps; highest-first list scheduling meets this bound — checked on every
    window of random trees, and asserted by the tests)."""
    span, W = len(w), int(w.max())
    if W == 1 or bool(np.all(w == W)):  # one step per level is optimal: S·K ≥ N, S ≥ span
        return span * (W + step_cost), W
    deeper = np.cumsum(w[::-1])[::-1]  # N_j
    S = np.max(np.arange(span)[:, None] + -(-deeper[:, None] // widths[None, :]), axis=0)
    c = S * (widths + step_cost)
    k = int(np.argmin(c))
    return float(c[k]), int(widths[k])


def _large_tree_phases(parents: tuple[int, ...], step_cost: float, phase_cost: float) -> list[list[list[int]]]:
    """Phases of a tree of more than `EXHAUSTIVE_SEGMENTS` segments: the objective of `schedule`,
    minimised by a dynamic programme over runs of consecutive levels in which no candidate is
    list-scheduled. Runs of up to `_EXACT_SPAN` levels are costed by `_estimate` (the step count
    of `_steps` in closed form, every width); longer runs at one step per level, at the width of
    their widest level (``(b − a)(max width + step_cost)``, an upper bound; vectorised over the
    run's start). Each chosen phase is then list-scheduled at its best width.

    Two rules differ from the exhaustive search. A phase costs ``phase_cost · n /
    EXHAUSTIVE_SEGMENTS`` (``n`` segments): its compile time (a copy of the step functions, about
    the whole of a one-phase program's) does not shrink as the tree grows while the slots it saves
    are per state, so it must save a fixed share of the tree's slots (a random 2,000-segment tree
    had four phases, compiling 3–5× longer than one phase that ran as fast). And a phase that
    holds a segment with more than `WIDE_ROUNDS` children and its children pays `WIDE_STEP_COST`
    per step for the scatter-add of its children, which a phase boundary avoids (the children
    then come from a later phase, `Phase.later_children`, summed once outside the loops). Both
    measured in benchmarks/README.md, "Wide and bushy trees". About
    ``levels · min(levels, _EXACT_SPAN)`` small numpy evaluations (timed on a 1,000-segment
    chain, random tree and binary tree: benchmarks/README.md, "Measurements behind design choices")."""
    groups = [list(g) for g in levels(parents)]
    widths = np.asarray([len(g) for g in groups], np.int64)
    kids = children(parents)
    most = np.asarray([max(len(kids[i]) for i in g) for g in groups], np.int64)  # most children per level
    phase_cost = phase_cost * len(parents) / EXHAUSTIVE_SEGMENTS
    L = len(groups)
    best = np.zeros(L + 1)
    cut = np.zeros(L + 1, np.int64)
    for b in range(1, L + 1):
        rev = widths[b - 1 :: -1]
        widest = np.maximum.accumulate(rev)[::-1]  # widest[a], narrowest[a]: of levels a … b−1
        narrowest = np.minimum.accumulate(rev)[::-1]
        # one step per level: exact for runs of equal widths, an upper bound for the others
        steps = (b - np.arange(b)).astype(np.float64)
        c = best[:b] + steps * (widest + step_cost) + phase_cost
        for a in range(max(0, b - _EXACT_SPAN), b):
            if widest[a] != narrowest[a]:
                cost, K = _estimate(widths[a:b], _widths_to_try(int(widest[a])), step_cost)
                if best[a] + cost + phase_cost < c[a]:
                    c[a], steps[a] = best[a] + cost + phase_cost, cost / (K + step_cost)
        # children summed by scatter-add in every step (a segment of levels a … b−2 with more than
        # WIDE_ROUNDS children): WIDE_STEP_COST per step
        inner = np.zeros(b, np.int64)  # inner[a]: most children of a segment of levels a … b−2
        inner[: b - 1] = np.maximum.accumulate(most[: b - 1][::-1])[::-1]
        c += np.where(inner > WIDE_ROUNDS, WIDE_STEP_COST * steps, 0.0)
        cut[b] = int(np.argmin(c))  # ties: the smallest a, the longest phase
        best[b] = c[cut[b]]
    bounds, b = [], L
    while b > 0:
        bounds.append((int(cut[b]), b))
        b = int(cut[b])
    phases = []
    for a, b in reversed(bounds):
        segs = sorted(i for g in groups[a:b] for i in g)
        W = int(widths[a:b].max())
        if W == 1:
            phases.append([[i] for i in segs])
            continue
        K = _estimate(widths[a:b], _widths_to_try(W), step_cost)[1]
        window = _window(parents, segs)
        phases.append(
            min((_steps(parents, segs, k, window) for k in sorted({K, W})), key=lambda st: _cost(st, step_cost))
        )
    return phases


def child_pairs(rounds: np.ndarray, missing: int) -> tuple[np.ndarray, np.ndarray]:
    """Rounds ``(S, R, K)`` (the row of slot ``k``'s ``r``-th child at step ``s``, or ``missing``)
    as pairs ``(rows, slots)``, each ``(S, N)``: per step, every child's row and its parent's
    slot, sorted by slot and then by round (the rounds' order), padded to the step with most
    children by ``(missing, 0)``. For a scatter-add of the children (`batch_last._add_children`)."""
    S, R, K = rounds.shape
    has = rounds != missing
    N = max(1, int(has.sum(axis=(1, 2)).max()))
    rows, slots = np.full((S, N), missing, np.int64), np.zeros((S, N), np.int64)
    for s in range(S):
        k, r = np.nonzero(has[s].T)  # by slot, then by round
        rows[s, : len(k)], slots[s, : len(k)] = rounds[s, r, k], k
    return rows, slots


def _tables(parents: tuple[int, ...], all_steps: list[list[list[int]]]) -> Schedule:
    """The index tables of phases given as lists of steps (lists of segments)."""
    n = len(parents)
    kids = children(parents)
    phase_of, row = np.empty(n, np.int64), np.empty(n, np.int64)  # row: global
    offset = 1
    for p, steps in enumerate(all_steps):
        K = max(len(s) for s in steps)
        for t, step in enumerate(steps):
            for k, i in enumerate(step):
                phase_of[i], row[i] = p, offset + t * K + k
        offset += len(steps) * K
    phases = []
    for p, steps in enumerate(all_steps):
        S, K = len(steps), max(len(s) for s in steps)
        start = row[steps[0][0]]  # global row of the phase's first slot
        members = np.array([s + [s[0]] * (K - len(s)) for s in steps], np.int64)
        extern: dict[int, int] = {}  # global row of each parent outside the phase (0: the world) -> its row
        parent_row = np.zeros((S, K), np.int64)
        for t, _step in enumerate(steps):
            for k, i in enumerate(members[t]):
                par = parents[i]
                if par >= 0 and phase_of[par] == p:
                    parent_row[t, k] = -1 - (row[par] - start)  # in-phase: fixed below
                else:
                    g = 0 if par < 0 else int(row[par])
                    parent_row[t, k] = extern.setdefault(g, len(extern))
        E = len(extern)
        parent_row = np.where(parent_row < 0, E - 1 - parent_row, parent_row)
        inner = [[[int(row[c] - start) for c in kids[i] if phase_of[c] == p] for i in m] for m in members]
        R = max(1, max(len(ch) for m in inner for ch in m))
        child_rows = np.full((S, R, K), S * K, np.int64)
        for t, m in enumerate(inner):
            for k, ch in enumerate(m):
                child_rows[t, : len(ch), k] = ch
        later = [[int(row[c]) for c in kids[i] if phase_of[c] > p] for i in members.reshape(-1)]
        for t, step in enumerate(steps):  # padded slots: nothing from later phases (counted once)
            for k in range(len(step), K):
                later[t * K + k] = []
        R2 = max(len(ch) for ch in later)
        later_children = np.zeros((R2, S * K), np.int64)
        for j, ch in enumerate(later):
            later_children[: len(ch), j] = ch
        phases.append(Phase(members, parent_row, np.asarray(list(extern), np.int64), child_rows, later_children))
    return Schedule(tuple(phases), row - 1)
