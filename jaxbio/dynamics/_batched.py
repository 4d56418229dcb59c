"""The wrench recursion for many states at once, batch-last: what ``jax.vmap(jb.inverse_dynamics)`` runs.

The per-state recursion (`jaxbio.dynamics.rnea`), batched by `jax.vmap`, puts the batch first and
the tree's hierarchy level second; XLA on CPU then spends its time on the level selects and on
arrays much larger than the caches. This module computes the same quantities (seed 001 eq. 2,
global frame, attitudes by quaternion, levels as in seed 001 §3.3) for a whole batch with the
batch as the *last*, contiguous axis:

- the batch is cut into chunks of ``C`` states (`chunk_size`; 256 on CPU, the whole batch on
  GPU), processed one after another by a `jax.lax.fori_loop` that slices each chunk out of the
  ``(B, n)`` inputs and writes its torques into the ``(B, n)`` result in place, so that a chunk's
  working set stays in cache and nothing is copied at full size (the last chunk starts at
  ``B − C`` and recomputes a few states of the one before it rather than padding the batch);
- inside a chunk every quantity is a tuple of ``(K, C)`` arrays, one per component (``K`` slots
  of one tree level). The proximal → distal pass is a `jax.lax.scan` over levels that gathers
  each member's parent row and also computes each member's own wrench, in the segment's frame
  (``I`` applied there, so ``R I Rᵀ`` is never formed); the distal → proximal pass is a reverse
  scan that gathers each member's children rows and ends with the joint torque;
- levels are grouped into *phases* (`schedule`), each padded to its own width: one scan per
  level would multiply compile time, one scan for all levels pads every level to the widest
  (the whole body: 65 slots for 28 segments; in two phases, 41);
- on CPU, each stage of the level step is computed by one *multi-output* loop (`_keep`). XLA's
  CPU fusion has no multi-output loop fusion: left alone, it gives every output its own loop and
  recomputes a shared intermediate (a rotation matrix, a parent's motion) in each.
  `jax.lax.optimization_barrier` does not stop this on CPU (the barrier is removed before
  fusion). A variadic `jax.lax.reduce` is the one fusion root with several outputs that XLA CPU
  builds: ``_keep`` reduces ``[x, 0]`` over a padded axis of two rows for every leaf at once, so
  the whole stage becomes one fused loop that computes each intermediate once per element and
  writes each output once. It replaced a ``lax.cond`` barrier (a conditional whose predicate
  was always true), which cost a copy of every kept array and one runtime call per consumer;
- ``sin``/``cos`` of the joint angles use `jaxbio._sincos.sincos` on CPU (vectorised; XLA's CPU
  ``sin``/``cos`` call libm once per element).

Measured on 2 cores, float64, batch 10⁵ (``python benchmarks/inverse_dynamics.py``, which has
the table with Pinocchio): arm7 0.20 µs/state, the whole body 0.90 (with the ``cond`` barriers
and a padded batch: 0.39 and 1.96 on the same machine; ``vmap`` of the per-state recursion is
several times slower). Profiled (``perf``), the time is now almost all in the fused loops:
each stage runs on one core, and the second core only waits for work. Tried and dropped: one
stacked array per scan carry and output (fewer runtime calls, slower loops), a single fused
loop per level step (slower: XLA no longer fuses it whole), two independent chunks per loop
iteration or two chunk loops in one program (XLA's CPU runtime ran them one after the other),
chunks of 128 or 512.

Differentiation is not defined here: `jaxbio.dynamics.rnea` routes `jax.vmap` to this module and
everything else (``jvp``, ``grad``, a batched tree) to the per-state recursion.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxbio._sincos import sincos
from jaxbio.dynamics import _soa as soa
from jaxbio.dynamics._levels import levels_of
from jaxbio.tree import SegmentTree

CPU_CHUNK = 256  # states per chunk on CPU: measured best of 64–4096 (arm7 and wholebody, 2 cores)


def chunk_size(batch: int, backend: str | None = None) -> int:
    """States per chunk: `CPU_CHUNK` on CPU, the whole batch on an accelerator."""
    backend = jax.default_backend() if backend is None else backend
    return max(1, min(batch, CPU_CHUNK)) if backend == "cpu" else max(1, batch)


def _keep(x, on: bool = True):
    """``x`` (a pytree of arrays) computed by one loop and materialised (see the module docstring).

    Each leaf ``a`` becomes ``Σ_r [a, 0][r]``, one variadic `jax.lax.reduce` over a padded axis
    of two rows: XLA fuses every producer of every leaf into that one multi-output reduction, so
    an intermediate shared by several leaves is computed once per element, and the leaves are
    written to memory once. Exact: ``a + 0 = a``.
    """
    if not on:
        return x
    leaves, treedef = jax.tree_util.tree_flatten(x)
    padded = [jnp.stack([a, jnp.zeros_like(a)]) for a in leaves]
    zeros = [jnp.zeros((), a.dtype) for a in leaves]
    out = lax.reduce(padded, zeros, lambda u, v: tuple(a + b for a, b in zip(u, v)), [0])
    return jax.tree_util.tree_unflatten(treedef, list(out))


def _rows(t: tuple, idx) -> tuple:
    return tuple(x[idx] for x in t)


def _col(a) -> tuple:
    """``(n, k)`` array -> tuple of ``k`` arrays ``(n, 1)`` (per-segment constants)."""
    return tuple(a[:, k, None] for k in range(a.shape[1]))


# A phase (one more pair of scans) is worth this many padded slots. Measured on the whole body
# (batch 1e5, 2 cores): 4 -> four phases, 29 slots, 2.8 us/state, compile 4.4-4.9 s;
# 6 -> two phases, 41 slots, 3.3 us/state, compile 2.2 s (the issue asks for < 3 s).
PHASE_COST = 6


class Phase(NamedTuple):
    """Consecutive tree levels processed by one scan, each padded to the phase's width ``K``."""

    members: np.ndarray  # (len, K) segment of each slot (padding repeats the level's first member)
    parent_pos: np.ndarray  # (len, K) row of each member's parent in the previous level's rows
    rounds: np.ndarray  # (len, R, K) row of each slot's r-th child in the next level's rows, or -1


class Schedule(NamedTuple):
    phases: tuple[Phase, ...]
    slot: np.ndarray  # (n,) row of each segment in the phases' outputs, flattened and concatenated


_SCHEDULES: dict[tuple[int, ...], Schedule] = {}


def schedule(parents: tuple[int, ...]) -> Schedule:
    """Levels of the tree (by depth) grouped into phases of equal width.

    Padding every level to the widest (one scan) wastes slots on trees whose levels differ in
    width (the whole body: 65 slots for 28 segments); one scan per level multiplies compile time.
    A dynamic programme over the level widths minimises ``Σ len·K + PHASE_COST`` per phase (the
    whole body: widths 1×6, 3×3, 5, 4, 2, 2 -> phases of width 1 and 5, 41 slots).
    """
    if parents in _SCHEDULES:
        return _SCHEDULES[parents]
    levels = [g.tolist() for g in levels_of(parents).depth_members]  # segments by depth
    L = len(levels)
    width = [len(g) for g in levels]
    best, cut = [0.0] + [np.inf] * L, [0] * (L + 1)
    for b in range(1, L + 1):
        for a in range(b):
            c = best[a] + (b - a) * max(width[a:b]) + PHASE_COST
            if c < best[b]:
                best[b], cut[b] = c, a
    bounds, b = [], L
    while b > 0:
        bounds.append((cut[b], b))
        b = cut[b]
    bounds.reverse()
    pos = np.empty(len(parents), np.int64)
    for g in levels:
        pos[g] = np.arange(len(g))
    phases, slot, offset = [], np.empty(len(parents), np.int64), 0
    for a, b in bounds:
        K = max(width[a:b])
        members = np.array([g + [g[0]] * (K - len(g)) for g in levels[a:b]], np.int64)
        parent_pos = np.zeros((b - a, K), np.int64)
        for j, lev in enumerate(range(a, b)):
            if lev:
                parent_pos[j, : width[lev]] = pos[[parents[i] for i in levels[lev]]]
        children = [[[int(pos[c]) for c in levels[lev + 1] if parents[c] == i] if lev + 1 < L else []
                     for i in levels[lev]] for lev in range(a, b)]
        R = max(1, max(len(ch) for lev in children for ch in lev))
        rounds = np.full((b - a, R, K), -1, np.int64)
        for j, lev in enumerate(children):
            for k, ch in enumerate(lev):
                rounds[j, : len(ch), k] = ch
        for j, g in enumerate(levels[a:b]):
            slot[g] = offset + j * K + np.arange(len(g))
        offset += (b - a) * K
        phases.append(Phase(members, parent_pos, rounds))
    out = Schedule(tuple(phases), slot)
    _SCHEDULES[parents] = out
    return out


def _scan(f, carry, xs, reverse=False):
    """`jax.lax.scan`, or for one step ``f`` called directly (no loop; static index arrays stay numpy)."""
    length = jax.tree_util.tree_leaves(xs)[0].shape[0]
    if length == 1:
        carry, y = f(carry, jax.tree_util.tree_map(lambda a: a[0], xs))
        return carry, jax.tree_util.tree_map(lambda a: a[None], y)
    xs = jax.tree_util.tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, xs)
    return lax.scan(f, carry, xs, reverse=reverse)


def _chunk(tree: SegmentTree, q, qd, qdd, fext, mext, keep_on: bool, fast_trig: bool):
    """``tau`` ``(n, C)`` for one chunk; ``q, qd, qdd`` ``(n, C)``, ``fext``/``mext`` 3-tuples of
    ``(n, C)`` world-frame external forces / moments about each segment origin, or None."""
    keep = lambda x: _keep(x, keep_on)  # noqa: E731
    n, C = q.shape
    dt = q.dtype
    sched = schedule(tree.parents)

    def by_level(t, ph):  # tuple of (n, ...) -> tuple of (len, K, ...)
        return tuple(x[ph.members] for x in t)

    rev = jnp.asarray(tree.is_revolute, dt)[:, None]
    orient = _col(tree.orientations.astype(dt))
    axis = _col(tree.axes.astype(dt))
    axis_in_parent = soa.qrot(orient, axis)  # the joint axis in the parent frame (constant)
    half = 0.5 * q * rev
    s, c = keep(sincos(half) if fast_trig else (jnp.sin(half), jnp.cos(half)))
    local_q = soa.qmul(orient, (c, s * axis[0], s * axis[1], s * axis[2]))
    local_t = soa.add(_col(tree.origins.astype(dt)), soa.scale(axis_in_parent, q * (1 - rev)))
    varying = local_q + local_t + (qd, qdd)  # (n, C) each
    if fext is not None:
        varying = varying + fext + mext
    # per-segment constants stay (n, 1): axis in parent, revolute flag, COM, mass, inertia
    constant = axis_in_parent + (rev,) + _col(tree.coms.astype(dt)) + (tree.masses.astype(dt)[:, None],) \
        + _col(tree.inertias.astype(dt).reshape(n, 9))

    def forward(parent_level, x):
        var, cst, pp = x
        lq, lt, (qd_, qdd_) = var[0:4], var[4:7], var[7:9]
        sa, r, com, mass, inertia = cst[0:3], cst[3], cst[4:7], cst[7], cst[8:17]
        P = _rows(parent_level, pp)
        att_p, w_p, al_p, acc_p = P[0:4], P[4:7], P[7:10], P[10:13]
        Rp, att = keep((soa.qmat(att_p), soa.qmul(att_p, lq)))
        off, s_w = keep((soa.matvec(Rp, lt), soa.matvec(Rp, sa)))
        sqd, sqdd = soa.scale(s_w, qd_), soa.scale(s_w, qdd_)
        w_x_sqd, w_x_off = soa.cross(w_p, sqd), soa.cross(w_p, off)
        w = soa.add(w_p, soa.scale(sqd, r))
        al = soa.add(al_p, soa.scale(soa.add(sqdd, w_x_sqd), r))
        acc = soa.add(soa.add(acc_p, soa.cross(al_p, off)), soa.cross(w_p, w_x_off))
        acc = soa.add(acc, soa.scale(soa.add(sqdd, soa.scale(w_x_sqd, 2.0)), 1 - r))
        new = keep(att + w + al + acc)
        att, w, al, acc = new[0:4], new[4:7], new[7:10], new[10:13]
        # own wrench, in the segment's frame: m (a_C − g) and I α + ω × I ω + c × f
        R = soa.qmat(att)
        wb, alb, accb = keep((soa.matvec_t(R, w), soa.matvec_t(R, al), soa.matvec_t(R, acc)))
        w_x_c = soa.cross(wb, com)
        a_com = soa.add(accb, soa.add(soa.cross(alb, com), soa.cross(wb, w_x_c)))
        fb, Iw, Ia = soa.scale(a_com, mass), soa.matvec(inertia, wb), soa.matvec(inertia, alb)
        mb = soa.add(soa.add(Ia, soa.cross(wb, Iw)), soa.cross(com, fb))
        f, m = soa.matvec(R, fb), soa.matvec(R, mb)
        if fext is not None:
            f, m = soa.sub(f, var[9:12]), soa.sub(m, var[12:15])
        return new, keep(f + m + off + s_w)

    g = tree.gravity.astype(dt)
    carry = (1.0, 0.0, 0.0, 0.0) + (0.0,) * 6 + (-g[0], -g[1], -g[2])  # the world, as level "-1"
    # built from zeros_like(q): the state's type inside jax.shard_map (a constant carry is rejected)
    carry = tuple(v + jnp.zeros_like(q[:1]) for v in carry)
    own = []
    for ph in sched.phases:
        K = ph.members.shape[1]
        # the first level's parents are gathered into the carry here (numpy index arrays are
        # captured by reference when traced: build new ones, never modify one in place)
        first = ph.parent_pos[0] if ph is not sched.phases[0] else np.zeros(K, np.int64)
        carry = _rows(carry, first.copy())
        pp = np.concatenate([np.arange(K)[None], ph.parent_pos[1:]], 0)
        carry, ys = _scan(forward, carry, (by_level(varying, ph), by_level(constant, ph), pp))
        own.append(ys)  # per level: own force, own moment, offset from the parent, joint axis

    def backward(child_level, x):
        loc, r, rounds = x
        tot = list(loc[:6])
        for k in range(rounds.shape[0]):  # round k brings each parent its k-th child (last row: none)
            tot = [t + u for t, u in zip(tot, _rows(child_level, rounds[k]))]
        tot = keep(tuple(tot))
        fo, mo, off, s_w = tot[:3], tot[3:], loc[6:9], loc[9:12]
        up = fo + soa.add(mo, soa.cross(off, fo))  # about the parent's origin
        zero = jnp.zeros((1, C), dt)
        tau = r * soa.dot(s_w, mo) + (1 - r) * soa.dot(s_w, fo)
        return tuple(jnp.concatenate([u, zero], 0) for u in up), tau

    parts = []
    carry = None
    for ph, loc in zip(reversed(sched.phases), reversed(own)):
        K = ph.members.shape[1]
        rounds = np.where(ph.rounds < 0, K, ph.rounds)  # row K of the carry: zeros
        if carry is None:
            carry = tuple(jnp.broadcast_to(jnp.zeros_like(q[:1]), (K + 1, C)) for _ in range(6))
        else:  # the next phase's first level: sum each last-level slot's children here
            sums = [jnp.zeros((K, C), dt) for _ in range(6)]
            none = carry[0].shape[0] - 1  # that phase's zero row
            for k in range(rounds.shape[1]):
                idx = np.where(ph.rounds[-1, k] < 0, none, ph.rounds[-1, k])
                sums = [a + b for a, b in zip(sums, _rows(carry, idx))]
            carry = tuple(jnp.concatenate([x, jnp.zeros((1, C), dt)], 0) for x in keep(tuple(sums)))
            last = np.full(rounds.shape[1:], K, np.int64)
            last[0] = np.arange(K)  # the last level reads those sums, once
            rounds = np.concatenate([rounds[:-1], last[None]], 0)
        carry, tau = _scan(backward, carry, (loc, rev[ph.members], rounds), reverse=True)
        parts.append(tau)
    flat = jnp.concatenate([t.reshape(-1, C) for t in parts[::-1]], 0)  # (slots, C)
    return flat[sched.slot]


def inverse_dynamics_batch(tree: SegmentTree, q, qd, qdd, external=None, *, chunk: int | None = None):
    """``tau`` ``(B, n)`` for ``q, qd, qdd`` ``(B, n)`` (``external``: forces and moments
    ``(B, n, 3)``, world frame, or None). Same result as `jax.vmap` of the per-state recursion
    to round-off; not differentiable by itself (see `jaxbio.dynamics.rnea`)."""
    B, n = q.shape
    backend = jax.default_backend()
    C = chunk_size(B, backend) if chunk is None else max(1, min(int(chunk), B))
    cpu = backend == "cpu"
    nc = -(-B // C)
    states = [q, qd, qdd]
    if external is not None:
        states += [external[0], external[1]]

    def one(start):
        st = [lax.dynamic_slice_in_dim(x, start, C, 0) for x in states]  # (C, n, ...) each
        qc, qdc, qddc = (x.T for x in st[:3])
        fext = mext = None
        if len(st) > 3:  # (C, n, 3) each
            fext = tuple(st[3][:, :, k].T for k in range(3))
            mext = tuple(st[4][:, :, k].T for k in range(3))
        return _chunk(tree, qc, qdc, qddc, fext, mext, keep_on=cpu, fast_trig=cpu).T

    if nc == 1:
        return one(0)

    def body(i, out):
        # every chunk is full: the last one starts at B - C and recomputes a few states of the one
        # before it (same values), so no input or output is padded or copied at full size
        start = jnp.minimum(i * C, B - C)
        return lax.dynamic_update_slice_in_dim(out, one(start), start, 0)

    # zeros_like(q), not a constant: the state's type inside jax.shard_map (see `_chunk`)
    return lax.fori_loop(0, nc, body, jnp.zeros_like(q))
