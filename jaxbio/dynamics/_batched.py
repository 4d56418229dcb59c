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
  of one *step*). The proximal → distal pass is a `jax.lax.scan` over steps that gathers each
  member's parent row from a table of the rows computed so far and also computes each member's
  own wrench, in the segment's frame (``I`` applied there, so ``R I Rᵀ`` is never formed); the
  distal → proximal pass is a reverse scan that gathers each member's children rows from a table
  of the wrenches of later steps and ends with the joint torque;
- segments are grouped into *phases* of consecutive tree levels (`schedule`), and inside a phase
  into steps of equal width ``K`` by list scheduling (a parent in an earlier step than its
  children): a step may mix tree levels, so the whole body's limbs (levels of widths 3, 3, 3, 5,
  4, 2, 2) take 8 steps of 3 slots instead of 7 levels padded to 5. One scan per level would
  multiply compile time, one scan for all levels pads every level to the widest (the whole body:
  65 slots for 28 segments; level by level in two phases 41; now 30, in 14 steps);
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
the table with Pinocchio): arm7 0.20 µs/state, sagittal11 0.33, the whole body 0.83. On the same
machine, with ``cond`` barriers and a padded batch: arm7 0.39, the whole body 1.96; then with
multi-output fusions but steps that were tree levels: sagittal11 0.47, the whole body 0.95. Profiled (``perf``), the time is now
almost all in the fused loops: each runs on one core, and the second core only waits for work.
Tried and dropped: one stacked array per scan carry and output (fewer runtime calls, slower
loops), a single fused loop per level step (slower: XLA no longer fuses it whole), the scans
unrolled (no faster, compile 3×), two independent chunks per loop iteration or two chunk loops
in one program (XLA's CPU runtime ran them one after the other), chunks of 128 or 512, dropping
the prismatic terms from all-revolute phases (no faster).

The same passes with momenta in place of their rates of change give ``∂T/∂q``
(`kinetic_energy_gradient_batch`), and with subtree mass, first moment and inertia in place of
wrenches the composite-rigid-body mass matrix (`mass_matrix_batch`); together they run the
batched Hamiltonian vector field (`jaxbio.hamiltonian`).

Differentiation is not defined here: `jaxbio.dynamics.rnea` (and ``energy``, ``mass_matrix``)
route `jax.vmap` to this module and everything else (``jvp``, ``grad``, a batched tree) to the
per-state code.
"""

from __future__ import annotations

from functools import partial
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


def vmapped_by(kernel):
    """Decorator for ``plain(tree, *states)``, a function of one state: under `jax.vmap` with the
    states batched and the tree not, ``kernel(tree, *states)`` runs on the ``(B, ...)`` states
    (unbatched states broadcast); a batched tree (``vmap`` over subjects) gets ``vmap(plain)``.

    `jax.custom_batching.custom_vmap` has no reverse-mode rule, so the whole is wrapped in a
    `jax.custom_jvp` whose rule is ``plain``'s own ``jvp``: ``grad``, ``jacfwd``/``jacrev`` and
    their batched forms differentiate ``plain``, never the kernel.
    """
    def wrap(plain):
        @jax.custom_jvp
        @jax.custom_batching.custom_vmap
        def routed(tree, *states):
            return plain(tree, *states)

        @routed.def_vmap
        def _vmap(axis_size, in_batched, tree, *states):
            tree_batched, *states_batched = in_batched

            def full(x, b):
                return x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

            states = [full(x, b) for x, b in zip(states, states_batched)]
            if any(jax.tree_util.tree_leaves(tree_batched)):
                return jax.vmap(plain)(jax.tree_util.tree_map(full, tree, tree_batched), *states), True
            return kernel(tree, *states), True

        @routed.defjvp
        def _jvp(primals, tangents):
            return jax.jvp(plain, primals, tangents)

        routed.__doc__ = plain.__doc__
        return routed
    return wrap


def _write(table: tuple, rows: tuple, start) -> tuple:
    """Each component's ``rows`` ``(K, C)`` written into its ``table`` at row ``start`` (in place)."""
    return tuple(lax.dynamic_update_slice_in_dim(a, b, start, 0) for a, b in zip(table, rows))


def _rows(t: tuple, idx) -> tuple:
    return tuple(x[idx] for x in t)


def _col(a) -> tuple:
    """``(n, k)`` array -> tuple of ``k`` arrays ``(n, 1)`` (per-segment constants)."""
    return tuple(a[:, k, None] for k in range(a.shape[1]))


# Costs in units of one slot (one segment's level step for one state). A step costs about 0.75 of
# a slot more (fitted to the whole body at batch 1e5 on 2 cores: 41 slots in 13 steps 0.95
# us/state, 28 in 28 steps 0.92, 28 in 13 steps 0.75); a phase (one more pair of scans) costs
# compile time, and is worth this many slots.
STEP_COST = 0.75
PHASE_COST = 6


class Phase(NamedTuple):
    """Segments processed by one pair of scans: ``S`` steps of ``K`` slots each.

    A step's members have their parents in earlier steps of the phase or in earlier phases, and
    their children in later steps or later phases, so a step may mix tree levels. The forward scan
    writes each step's results into a table of ``E + S·K`` rows: ``E`` rows copied from the world
    and earlier phases (``extern``), then ``K`` rows per step; the reverse scan writes each step's
    wrenches into a table of ``S·K + 1`` rows (the last one zero).
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


_SCHEDULES: dict[tuple[int, ...], Schedule] = {}


def _steps(parents: tuple[int, ...], segs: list[int], K: int) -> list[list[int]]:
    """List scheduling of ``segs`` (a parent before its children) into steps of at most ``K``:
    each step takes the ready segments with the longest chain of descendants in ``segs`` first."""
    inside = set(segs)
    children: dict[int, list[int]] = {i: [] for i in segs}
    for i in segs:
        if parents[i] in inside:
            children[parents[i]].append(i)
    height: dict[int, int] = {}
    for i in sorted(segs, reverse=True):  # children have larger indices than their parent
        height[i] = 1 + max((height[c] for c in children[i]), default=0)
    ready = sorted((i for i in segs if parents[i] not in inside), key=lambda i: (-height[i], i))
    steps = []
    while ready:
        step, ready = ready[:K], ready[K:]
        steps.append(sorted(step))
        ready = sorted(ready + [c for i in step for c in children[i]], key=lambda i: (-height[i], i))
    return steps


def _cost(steps: list[list[int]]) -> float:
    return len(steps) * (max(len(s) for s in steps) + STEP_COST)


def _best_steps(parents, segs: list[int], max_width: int) -> list[list[int]]:
    """`_steps` at the width ``K ≤ max_width`` of least `_cost`. ``K = max_width`` (the widest
    level) always gives one step per level."""
    if max_width == 1:
        return [[i] for i in segs]
    return min((_steps(parents, segs, K) for K in range(1, max_width + 1)), key=_cost)


def schedule(parents: tuple[int, ...]) -> Schedule:
    """Phases of consecutive tree levels (by depth), each scheduled into steps of equal width.

    Padding every level to the widest (one scan) wastes slots on trees whose levels differ in
    width (the whole body: 65 slots for 28 segments); one scan per level multiplies compile time.
    Inside a phase a step need not be one level (`_steps`: the whole body's limbs, levels of
    widths 3, 3, 3, 5, 4, 2, 2, fit in 8 steps of 3). A dynamic programme over the levels
    minimises ``Σ S·(K + STEP_COST) + PHASE_COST`` over the phases (the whole body: 6 steps of 1,
    then 8 of 3: 30 slots for 28 segments).
    """
    if parents in _SCHEDULES:
        return _SCHEDULES[parents]
    levels = [g.tolist() for g in levels_of(parents).depth_members]  # segments by depth
    L = len(levels)
    plan: dict[tuple[int, int], list[list[int]]] = {}
    best, cut = [0.0] + [np.inf] * L, [0] * (L + 1)
    for b in range(1, L + 1):
        for a in range(b):
            segs = sorted(i for g in levels[a:b] for i in g)
            steps = plan[a, b] = _best_steps(parents, segs, max(len(g) for g in levels[a:b]))
            c = best[a] + _cost(steps) + PHASE_COST
            if c < best[b]:
                best[b], cut[b] = c, a
    bounds, b = [], L
    while b > 0:
        bounds.append((cut[b], b))
        b = cut[b]
    all_steps = [plan[a, b] for a, b in reversed(bounds)]

    n = len(parents)
    phase_of, row = np.empty(n, np.int64), np.empty(n, np.int64)  # row: global
    offset = 1
    for p, steps in enumerate(all_steps):
        K = max(len(s) for s in steps)
        for t, step in enumerate(steps):
            for k, i in enumerate(step):
                phase_of[i], row[i] = p, offset + t * K + k
        offset += len(steps) * K
    children: list[list[int]] = [[] for _ in range(n)]
    for i, par in enumerate(parents):
        if par >= 0:
            children[par].append(i)
    phases = []
    for p, steps in enumerate(all_steps):
        S, K = len(steps), max(len(s) for s in steps)
        start = row[steps[0][0]]  # global row of the phase's first slot
        members = np.array([s + [s[0]] * (K - len(s)) for s in steps], np.int64)
        extern: list[int] = []  # global rows of parents outside the phase (0: the world)
        parent_row = np.zeros((S, K), np.int64)
        for t, step in enumerate(steps):
            for k, i in enumerate(members[t]):
                par = parents[i]
                if par >= 0 and phase_of[par] == p:
                    parent_row[t, k] = -1 - (row[par] - start)  # in-phase: fixed below
                else:
                    g = 0 if par < 0 else int(row[par])
                    if g not in extern:
                        extern.append(g)
                    parent_row[t, k] = extern.index(g)
        E = len(extern)
        parent_row = np.where(parent_row < 0, E - 1 - parent_row, parent_row)
        inner = [[[int(row[c] - start) for c in children[i] if phase_of[c] == p] for i in m] for m in members]
        R = max(1, max(len(ch) for m in inner for ch in m))
        child_rows = np.full((S, R, K), S * K, np.int64)
        for t, m in enumerate(inner):
            for k, ch in enumerate(m):
                child_rows[t, : len(ch), k] = ch
        later = [[int(row[c]) for c in children[i] if phase_of[c] > p] for i in members.reshape(-1)]
        for t, step in enumerate(steps):  # padded slots: nothing from later phases (counted once)
            for k in range(len(step), K):
                later[t * K + k] = []
        R2 = max(len(ch) for ch in later)
        later_children = np.zeros((R2, S * K), np.int64)
        for j, ch in enumerate(later):
            later_children[: len(ch), j] = ch
        phases.append(Phase(members, parent_row, np.asarray(extern, np.int64), child_rows, later_children))
    out = Schedule(tuple(phases), row - 1)
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


def _chunk(tree: SegmentTree, q, qd, qdd, fext, mext, keep_on: bool, fast_trig: bool, mode: str = "wrench"):
    """``tau`` ``(n, C)`` for one chunk; ``q, qd, qdd`` ``(n, C)``, ``fext``/``mext`` 3-tuples of
    ``(n, C)`` world-frame external forces / moments about each segment origin, or None.

    ``mode="momentum"`` (``qdd``, ``fext``, ``mext`` ignored): ``∂T/∂q`` at fixed ``qd`` instead,
    by the same passes with momenta in place of their rates (see `kinetic_energy_gradient_batch`).
    ``mode="crba"`` (only ``q`` used): the mass matrix ``(n·n, C)`` row-major (`mass_matrix_batch`).
    """
    momentum, crba = mode == "momentum", mode == "crba"
    keep = lambda x: _keep(x, keep_on)  # noqa: E731
    n, C = q.shape
    dt = q.dtype
    sched = schedule(tree.parents)
    zero_row = jnp.zeros_like(q[:1])  # (1, C): the state's type inside jax.shard_map (see below)

    def by_step(t, ph):  # tuple of (n, ...) -> tuple of (S, K, ...)
        return tuple(x[ph.members] for x in t)

    rev = jnp.asarray(tree.is_revolute, dt)[:, None]
    orient = _col(tree.orientations.astype(dt))
    axis = _col(tree.axes.astype(dt))
    axis_in_parent = soa.qrot(orient, axis)  # the joint axis in the parent frame (constant)
    half = 0.5 * q * rev
    s, c = keep(sincos(half) if fast_trig else (jnp.sin(half), jnp.cos(half)))
    local_q = soa.qmul(orient, (c, s * axis[0], s * axis[1], s * axis[2]))
    local_t = soa.add(_col(tree.origins.astype(dt)), soa.scale(axis_in_parent, q * (1 - rev)))
    varying = local_q + local_t + (qd, qd if momentum or crba else qdd)  # (n, C) each
    if fext is not None and not (momentum or crba):
        varying = varying + fext + mext
    # per-segment constants stay (n, 1): axis in parent, revolute flag, COM, mass, inertia
    constant = axis_in_parent + (rev,) + _col(tree.coms.astype(dt)) + (tree.masses.astype(dt)[:, None],) \
        + _col(tree.inertias.astype(dt).reshape(n, 9))

    def forward_momentum(E, table, x):
        var, cst, pp, t = x
        lq, lt, qd_ = var[0:4], var[4:7], var[7]
        sa, r, com, mass, inertia = cst[0:3], cst[3], cst[4:7], cst[7], cst[8:17]
        P = _rows(table, pp)
        att_p, w_p, v_p = P[0:4], P[4:7], P[7:10]
        att, off, s_w = place(att_p, lq, lt, sa)
        sqd = soa.scale(s_w, qd_)
        w = soa.add(w_p, soa.scale(sqd, r))
        v = soa.add(soa.add(v_p, soa.cross(w_p, off)), soa.scale(sqd, 1 - r))
        new = keep(att + w + v)
        att, w, v = new[0:4], new[4:7], new[7:10]
        # own momenta, in the segment's frame: p = m v_C, h = I ω + c × p (about the origin)
        R = soa.qmat(att)
        wb, vb = keep((soa.matvec_t(R, w), soa.matvec_t(R, v)))
        pb = soa.scale(soa.add(vb, soa.cross(wb, com)), mass)
        hb = soa.add(soa.matvec(inertia, wb), soa.cross(com, pb))
        return _write(table, new, E + t * pp.shape[0]), keep(soa.matvec(R, pb) + soa.matvec(R, hb) + off + s_w + w_p + v)

    def place(att_p, lq, lt, sa):
        """The segment's attitude, its offset from the parent's origin and its joint axis (world)."""
        Rp, att = keep((soa.qmat(att_p), soa.qmul(att_p, lq)))
        return (att,) + keep((soa.matvec(Rp, lt), soa.matvec(Rp, sa)))

    def forward_crba(E, table, x):
        var, cst, pp, t = x
        lq, lt = var[0:4], var[4:7]
        sa, com, mass, inertia = cst[0:3], cst[4:7], cst[7], cst[8:17]
        P = _rows(table, pp)
        att_p, pos_p = P[0:4], P[4:7]
        att, off, s_w = place(att_p, lq, lt, sa)
        new = keep(att + soa.add(pos_p, off))
        # own composite about the own origin: m, h = m c, J = R I Rᵀ + m ([c]ᵀ[c]) (xx yy zz xy xz yz)
        R = soa.qmat(new[0:4])
        c = soa.matvec(R, com)
        RI = tuple(sum(R[3 * a + k] * inertia[3 * k + b] for k in range(3)) for a in range(3) for b in range(3))
        IC = tuple(sum(RI[3 * a + k] * R[3 * b + k] for k in range(3)) for a, b in _SYM)
        cc = soa.dot(c, c)
        J = tuple(IC[i] + mass * ((cc if a == b else 0.0) - c[a] * c[b]) for i, (a, b) in enumerate(_SYM))
        m = mass + jnp.zeros_like(c[0])
        return _write(table, new, E + t * pp.shape[0]), keep((m,) + soa.scale(c, mass) + J + off + s_w + new[4:7])

    def forward(E, table, x):
        var, cst, pp, t = x
        lq, lt, (qd_, qdd_) = var[0:4], var[4:7], var[7:9]
        sa, r, com, mass, inertia = cst[0:3], cst[3], cst[4:7], cst[7], cst[8:17]
        P = _rows(table, pp)
        att_p, w_p, al_p, acc_p = P[0:4], P[4:7], P[7:10], P[10:13]
        att, off, s_w = place(att_p, lq, lt, sa)
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
        return _write(table, new, E + t * pp.shape[0]), keep(f + m + off + s_w)

    g = tree.gravity.astype(dt)
    # the world, global row 0: attitude, then angular velocity, angular acceleration and
    # acceleration (less gravity) of the origin; velocity of the origin (momentum); position (crba)
    step, world = {"wrench": (forward, (0.0,) * 6 + (-g[0], -g[1], -g[2])),
                   "momentum": (forward_momentum, (0.0,) * 6),
                   "crba": (forward_crba, (0.0,) * 3)}[mode]
    world = (1.0, 0.0, 0.0, 0.0) + world
    nsum = 10 if crba else 6  # summed over each subtree: (m, h, J) or (force, moment)
    # built from zeros_like(q): the state's type inside jax.shard_map (a constant carry is rejected)
    done = [tuple(v + zero_row for v in world)]  # forward rows so far: the world, then each phase's
    own = []
    for ph in sched.phases:
        S, K = ph.members.shape
        rows = tuple(jnp.concatenate(parts, 0) for parts in zip(*done))
        # numpy index arrays are captured by reference when traced: never modify one in place
        table = tuple(jnp.concatenate([x[ph.extern], jnp.zeros((S * K, C), dt)], 0) for x in rows)
        xs = (by_step(varying, ph), by_step(constant, ph), ph.parent_row, np.arange(S))
        table, ys = _scan(partial(step, len(ph.extern)), table, xs)
        done.append(tuple(x[len(ph.extern):] for x in table))
        own.append(ys)  # per step: own force, own moment, offset from the parent, joint axis

    def backward(table, x):
        loc, r, rounds, t = x
        tot = list(loc[:nsum])
        for k in range(rounds.shape[0]):  # round k brings each parent its k-th child
            tot = [a + b for a, b in zip(tot, _rows(table, rounds[k]))]
        tot = keep(tuple(tot))
        K = rounds.shape[1]
        if crba:  # composite moved to the parent's origin: d = off, h += m d, J += [d]ᵀ[h] + [h]ᵀ[d] + m[d]ᵀ[d]
            m, h, J, d = tot[0], tot[1:4], tot[4:10], loc[10:13]
            dh, dd = soa.dot(d, h), soa.dot(d, d)
            up = (m,) + soa.add(h, soa.scale(d, m)) + tuple(
                J[i] + (2 * dh + m * dd if a == b else 0.0) - h[a] * d[b] - d[a] * h[b] - m * d[a] * d[b]
                for i, (a, b) in enumerate(_SYM))
            return _write(table, up, t * K), tot
        fo, mo, off, s_w = tot[:3], tot[3:], loc[6:9], loc[9:12]
        up = fo + soa.add(mo, soa.cross(off, fo))  # about the parent's origin
        if momentum:  # ∂T/∂q: s · (H × ω_λ + P × v) revolute, s · (P × ω_λ) prismatic
            w_p, v = loc[12:15], loc[15:18]
            tau = r * soa.dot(s_w, soa.add(soa.cross(mo, w_p), soa.cross(fo, v))) \
                + (1 - r) * soa.dot(s_w, soa.cross(fo, w_p))
        else:
            tau = r * soa.dot(s_w, mo) + (1 - r) * soa.dot(s_w, fo)
        return _write(table, up, t * K), tau

    taus, ups = [None] * len(own), []  # ups: wrenches of the later phases, nearest first
    for p in reversed(range(len(own))):
        ph, loc = sched.phases[p], own[p]
        S, K = ph.members.shape
        if ph.later_children.shape[0]:  # children in later phases: summed into the own wrench
            later = tuple(jnp.concatenate((zero_row,) + parts, 0) for parts in zip(*ups))
            first = int(sched.slot[sched.phases[p + 1].members[0, 0]]) + 1  # global row of ups[0][0]
            idx = np.where(ph.later_children > 0, ph.later_children - first + 1, 0)
            sums = [jnp.zeros((S * K, C), dt) for _ in range(nsum)]
            for k in range(idx.shape[0]):
                sums = [a + b for a, b in zip(sums, _rows(later, idx[k]))]
            loc = tuple(a + b.reshape(S, K, C) for a, b in zip(loc[:nsum], sums)) + tuple(loc[nsum:])
        table = tuple(jnp.broadcast_to(zero_row, (S * K + 1, C)) for _ in range(nsum))
        table, taus[p] = _scan(backward, table, (loc, rev[ph.members], ph.child_rows, np.arange(S)), reverse=True)
        ups.insert(0, tuple(x[: S * K] for x in table))
    if crba:
        return _crba_columns(tree, sched, taus, own, C)
    flat = jnp.concatenate([t.reshape(-1, C) for t in taus], 0)  # (slots, C)
    return flat[sched.slot]


_SYM = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))  # the 6 entries of a symmetric 3×3


def _crba_columns(tree: SegmentTree, sched: Schedule, composites, own, C):
    """``M`` ``(n·n, C)`` from each subtree's composite ``(m, h, J)`` about its joint centre.

    Joint ``i`` moving at unit rate moves its subtree rigidly: linear momentum ``s × h`` and
    angular momentum ``J s`` about ``P_i`` (revolute), or ``m s`` and ``h × s`` (prismatic).
    ``M[j, i]`` for ``j`` an ancestor of ``i`` (or ``i``) is joint ``j``'s share of that
    momentum: ``s_j · (L + (P_i − P_j) × lin)`` (revolute ``j``), ``s_j · lin`` (prismatic).
    """
    n = tree.nq

    def seg(parts, k):  # component k of per-step outputs, in segment order (n, C)
        return jnp.concatenate([x[k].reshape(-1, C) for x in parts], 0)[sched.slot]

    m = seg(composites, 0)
    h = tuple(seg(composites, k) for k in range(1, 4))
    J6 = tuple(seg(composites, k) for k in range(4, 10))
    s = tuple(seg(own, k) for k in range(13, 16))
    pos = tuple(seg(own, k) for k in range(16, 19))
    Jm = {(a, b): J6[i] for i, (a, b) in enumerate(_SYM)}
    Jm.update({(b, a): v for (a, b), v in list(Jm.items())})
    rev = np.asarray(tree.is_revolute)[:, None]
    lin = soa.where(rev, soa.cross(s, h), soa.scale(s, m))
    L = soa.where(rev, tuple(sum(Jm[a, b] * s[b] for b in range(3)) for a in range(3)), soa.cross(h, s))
    anc = np.asarray(tree.ancestors)  # anc[i, j]: j is i or an ancestor of i
    i_idx, j_idx = np.nonzero(anc)
    d = soa.sub(_rows(pos, i_idx), _rows(pos, j_idx))
    moment = soa.add(_rows(L, i_idx), soa.cross(d, _rows(lin, i_idx)))
    s_j = _rows(s, j_idx)
    vals = jnp.where(rev[j_idx], soa.dot(s_j, moment), soa.dot(s_j, _rows(lin, i_idx)))
    vals = jnp.concatenate([vals, jnp.zeros_like(vals[:1])], 0)  # last row: zero
    where = np.full((n, n), len(i_idx), np.int64)
    where[j_idx, i_idx] = np.arange(len(i_idx))
    where[i_idx, j_idx] = np.arange(len(i_idx))
    return vals[where.reshape(-1)]


def inverse_dynamics_batch(tree: SegmentTree, q, qd, qdd, external=None, *, chunk: int | None = None):
    """``tau`` ``(B, n)`` for ``q, qd, qdd`` ``(B, n)`` (``external``: forces and moments
    ``(B, n, 3)``, world frame, or None). Same result as `jax.vmap` of the per-state recursion
    to round-off; not differentiable by itself (see `jaxbio.dynamics.rnea`)."""
    states = [q, qd, qdd] + ([] if external is None else [external[0], external[1]])
    return _batched(tree, states, chunk=chunk, mode="wrench")


def kinetic_energy_gradient_batch(tree: SegmentTree, q, qd, *, chunk: int | None = None):
    """``∂T/∂q`` at fixed ``qd`` ``(B, n)`` for ``q, qd`` ``(B, n)``, by the same two passes as
    the wrench recursion with momenta in place of their rates of change.

    Perturbing joint ``i`` moves its whole subtree rigidly (about the axis ``s_i`` through the
    joint centre, or along it) with every ``qd`` fixed, so only the subtree's kinetic energy
    changes, through the parent's motion seen by it. With ``P_i`` and ``H_i`` the linear and
    angular momentum of the subtree (about the joint centre), ``ω_λ`` the parent's angular velocity
    and ``v_i`` the joint centre's velocity (world frame):

        ∂T/∂q_i = s_i · (H_i × ω_λ + P_i × v_i)      revolute
        ∂T/∂q_i = s_i · (P_i × ω_λ)                  prismatic

    ``(P_i, H_i)`` are summed distal → proximal and moved to the parent's joint centre exactly as
    the wrench ``(F_i, M_i)`` is. Same result as ``jax.grad`` of `jaxbio.kinetic_energy` to
    round-off; not differentiable by itself (see `jaxbio.hamiltonian.dH_dq`).
    """
    return _batched(tree, [q, qd, qd], chunk=chunk, mode="momentum")


def mass_matrix_batch(tree: SegmentTree, q, *, chunk: int | None = None):
    """``M`` ``(B, n, n)`` for ``q`` ``(B, n)`` by the composite-rigid-body algorithm in the world
    frame: one proximal → distal pass (attitudes and joint centres), one distal → proximal pass
    summing each subtree's mass, first moment ``h`` and inertia ``J`` about its joint centre
    (parallel-axis transport ``J += [d]ᵀ[h] + [h]ᵀ[d] + m [d]ᵀ[d]``), then one entry per pair of a
    segment and an ancestor (`_crba_columns`). Same result as `jaxbio.mass_matrix` to round-off;
    not differentiable by itself (see `jaxbio.dynamics.mass_matrix`)."""
    B, n = q.shape
    return _batched(tree, [q, q, q], chunk=chunk, mode="crba").reshape(B, n, n)


def _batched(tree: SegmentTree, states: list, *, chunk: int | None, mode: str):
    """`_chunk` over the batch: ``states`` ``[q, qd, qdd]`` ``(B, n)`` (+ external ``(B, n, 3)``)."""
    q = states[0]
    B, n = q.shape
    width = n * n if mode == "crba" else n
    backend = jax.default_backend()
    C = chunk_size(B, backend) if chunk is None else max(1, min(int(chunk), B))
    cpu = backend == "cpu"
    nc = -(-B // C)

    def one(start):
        st = [lax.dynamic_slice_in_dim(x, start, C, 0) for x in states]  # (C, n, ...) each
        qc, qdc, qddc = (x.T for x in st[:3])
        fext = mext = None
        if len(st) > 3:  # (C, n, 3) each
            fext = tuple(st[3][:, :, k].T for k in range(3))
            mext = tuple(st[4][:, :, k].T for k in range(3))
        return _chunk(tree, qc, qdc, qddc, fext, mext, keep_on=cpu, fast_trig=cpu, mode=mode).T

    if nc == 1:
        return one(0)

    def body(i, out):
        # every chunk is full: the last one starts at B - C and recomputes a few states of the one
        # before it (same values), so no input or output is padded or copied at full size
        start = jnp.minimum(i * C, B - C)
        return lax.dynamic_update_slice_in_dim(out, one(start), start, 0)

    # from zeros_like(q), not a constant: the state's type inside jax.shard_map (see `_chunk`)
    return lax.fori_loop(0, nc, body, jnp.zeros_like(q[:, :1]) + jnp.zeros((1, width), q.dtype))
