"""The recursions for many states at once, batch-last: what ``jax.vmap`` of `jaxbio.inverse_dynamics`,
`jaxbio.dynamics.kinetic_energy_gradient` and `jaxbio.mass_matrix` runs.

The per-state recursion (`jaxbio.dynamics.rnea`) batched by `jax.vmap` puts the batch first and
the tree's level second; XLA on CPU then spends its time on the level selects and on arrays much
larger than the caches. This module computes the same quantities (seed 001 eq. 2, world frame,
attitudes by quaternion) with the batch as the *last*, contiguous axis. Three kernels share one
proximal → distal pass and one distal → proximal pass; each brings its own step functions:

==============================  ===================================  ==============================
kernel                          forward step (own term)              backward step (output)
==============================  ===================================  ==============================
`inverse_dynamics_batch`        accelerations (own wrench)           `_torques_rnea`: joint torques
`kinetic_energy_gradient_batch` velocities (own momenta)             `_torques_momentum`: ``∂T/∂q``
`mass_matrix_batch`             placements (own composite inertia)   `_composite_to_parent` (CRBA)
==============================  ===================================  ==============================

How it is laid out, and why:

- The batch is cut into chunks of ``C`` states (`chunk_size`), processed one after another by a
  `jax.lax.fori_loop` that slices a chunk out of the ``(B, n)`` inputs and writes its result in
  place, so a chunk's working set stays in cache and nothing is copied at full size (the last
  chunk starts at ``B − C`` and recomputes a few states rather than padding the batch).
- Inside a chunk, records (`Joint`, `Body`, `Accelerations`, `Own`, …) hold tuples of ``(K, C)``
  arrays, one per component (structure of arrays, `jaxbio.dynamics._soa`). Each pass is a
  `jax.lax.scan` per *phase* over the *steps* of a `jaxbio.dynamics._levels.schedule`: ``K``
  segments (possibly of different tree levels) whose parents were computed in earlier steps or
  phases, gathered from a table of the rows computed so far.
  Own terms are computed in the segment's frame (``R I Rᵀ`` is never formed).
- On CPU (``layout="cpu"``) each stage of a step is materialised by `_keep`, one variadic
  `jax.lax.reduce`: XLA's CPU backend has no multi-output loop fusion, so without it every
  output gets its own loop and recomputes shared intermediates (a rotation matrix, a parent's
  motion); `jax.lax.optimization_barrier` is removed before fusion and does not help. ``sin`` and
  ``cos`` use the vectorised `jaxbio._sincos.sincos` (XLA's CPU ``sin``/``cos`` call libm per
  element). On an accelerator (``layout="accelerator"``) the whole batch is one chunk and neither
  trick is used.

Measured timings, and the variants tried and dropped, are in benchmarks/README.md.

Differentiation is not defined here: `jaxbio.dynamics.rnea` (and ``energy``, ``mass_matrix``)
route `jax.vmap` to this module with `vmapped_by` and everything else (``jvp``, ``grad``, a
batched tree) to the per-state code.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxbio._sincos import sincos
from jaxbio.dynamics import _levels
from jaxbio.dynamics import _soa as soa
from jaxbio.dynamics._levels import Schedule
from jaxbio.tree import SegmentTree

Vec = soa.Vec  # (x, y, z), each (K, C) inside a chunk (or (K, 1) for a per-segment constant)
Quat = soa.Quat  # (w, x, y, z)
tree_map = jax.tree_util.tree_map

CPU_CHUNK = 256  # default states per chunk on CPU: best of 64–4096 (see benchmarks/README.md)
LAYOUTS = ("cpu", "accelerator")


def default_layout() -> str:
    """``"cpu"`` when JAX's default backend is the CPU, else ``"accelerator"``."""
    return "cpu" if jax.default_backend() == "cpu" else "accelerator"


def chunk_size(batch: int, layout: str = "cpu", *, cpu_chunk: int = CPU_CHUNK) -> int:
    """States per chunk: ``cpu_chunk`` for the ``"cpu"`` layout, the whole batch otherwise."""
    return max(1, min(batch, cpu_chunk)) if layout == "cpu" else max(1, batch)


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
            if not tree.is_axial:  # ball, free or fixed joints: the per-state recursion, vmapped
                return jax.vmap(plain, in_axes=(None,) + (0,) * len(states))(tree, *states), True
            return kernel(tree, *states), True

        @routed.defjvp
        def _jvp(primals, tangents):
            return jax.jvp(plain, primals, tangents)

        routed.__doc__ = plain.__doc__
        return routed
    return wrap


# ---- records ---------------------------------------------------------------------------------
# Every leaf is an array whose leading axes are (segments or slots) and whose last axis is the
# chunk's states (C) or 1 for per-segment constants. Field order is leaf order (it steers nothing
# but is kept stable).


class Body(NamedTuple):
    """Per-segment constants, leaves ``(n, 1)``."""

    axis_in_parent: Vec  # joint axis in the parent frame (constant: the orientation is)
    revolute: jax.Array  # 1 revolute, 0 prismatic
    com: Vec  # centre of mass, segment frame, m
    mass: jax.Array  # kg
    inertia: tuple  # 9 entries, row-major, about the COM, segment frame, kg·m²


class Joint(NamedTuple):
    """Per-state joint inputs, leaves ``(n, C)``."""

    rotation: Quat  # attitude relative to the parent: orientation · rotation about the axis
    translation: Vec  # joint centre in the parent frame (origin + prismatic displacement), m
    qd: jax.Array  # rad/s or m/s (``q`` for the mass matrix, unused)
    qdd: jax.Array  # rad/s² or m/s² (``qd`` for ∂T/∂q, ``q`` for the mass matrix, unused)
    force: Optional[Vec] = None  # external force on the segment, world frame, N
    moment: Optional[Vec] = None  # external moment about the segment origin, world frame, N·m


class Accelerations(NamedTuple):
    """Forward rows of the wrench recursion (world frame)."""

    attitude: Quat
    angular_velocity: Vec  # rad/s
    angular_acceleration: Vec  # rad/s²
    acceleration: Vec  # of the origin, less gravity, m/s²


class Velocities(NamedTuple):
    """Forward rows of ``∂T/∂q`` (world frame)."""

    attitude: Quat
    angular_velocity: Vec  # rad/s
    velocity: Vec  # of the origin, m/s


class Placement(NamedTuple):
    """Forward rows of the mass matrix (world frame)."""

    attitude: Quat
    position: Vec  # of the origin (the joint centre), m


class Wrench(NamedTuple):
    """Force and moment about the segment origin (or linear and angular momentum), world frame."""

    force: Vec
    moment: Vec


class Composite(NamedTuple):
    """Mass, first moment and inertia about the segment origin, world frame."""

    mass: jax.Array  # kg
    first_moment: Vec  # m c, kg·m
    inertia: tuple  # 6 entries xx yy zz xy xz yz, kg·m²


class Own(NamedTuple):
    """What the forward step hands the backward step, per slot."""

    term: Wrench | Composite  # the segment's own term, summed over its subtree distal → proximal
    offset: Vec  # origin relative to the parent's origin, world frame, m
    axis: Vec  # joint axis, world frame
    parent_angular_velocity: Optional[Vec] = None  # ∂T/∂q only
    velocity: Optional[Vec] = None  # ∂T/∂q only: of the origin
    position: Optional[Vec] = None  # mass matrix only: of the origin


_SYM = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))  # the 6 entries of a symmetric 3×3


# ---- forward steps: (parent rows, joint, body) -> (own rows, own terms) -----------------------


def _place(parent_attitude: Quat, joint: Joint, body: Body, keep):
    """The segment's attitude, its offset from the parent's origin and its joint axis (world)."""
    Rp, att = keep((soa.qmat(parent_attitude), soa.qmul(parent_attitude, joint.rotation)))
    off, axis = keep((soa.matvec(Rp, joint.translation), soa.matvec(Rp, body.axis_in_parent)))
    return att, off, axis


def _forward_rnea(parent: Accelerations, joint: Joint, body: Body, keep):
    """Motion of the segment, and its own wrench ``m (a_C − g)``, ``I α + ω × I ω + c × f``
    (computed in the segment's frame, less the external wrench)."""
    att, off, s_w = _place(parent.attitude, joint, body, keep)
    w_p, al_p, acc_p, r = parent.angular_velocity, parent.angular_acceleration, parent.acceleration, body.revolute
    sqd, sqdd = soa.scale(s_w, joint.qd), soa.scale(s_w, joint.qdd)
    w_x_sqd, w_x_off = soa.cross(w_p, sqd), soa.cross(w_p, off)
    w = soa.add(w_p, soa.scale(sqd, r))
    al = soa.add(al_p, soa.scale(soa.add(sqdd, w_x_sqd), r))
    acc = soa.add(soa.add(acc_p, soa.cross(al_p, off)), soa.cross(w_p, w_x_off))
    acc = soa.add(acc, soa.scale(soa.add(sqdd, soa.scale(w_x_sqd, 2.0)), 1 - r))
    new = keep(Accelerations(att, w, al, acc))
    R = soa.qmat(new.attitude)
    wb, alb, accb = keep((soa.matvec_t(R, new.angular_velocity), soa.matvec_t(R, new.angular_acceleration),
                          soa.matvec_t(R, new.acceleration)))
    com, inertia = body.com, body.inertia
    w_x_c = soa.cross(wb, com)
    a_com = soa.add(accb, soa.add(soa.cross(alb, com), soa.cross(wb, w_x_c)))
    fb, Iw, Ia = soa.scale(a_com, body.mass), soa.matvec(inertia, wb), soa.matvec(inertia, alb)
    mb = soa.add(soa.add(Ia, soa.cross(wb, Iw)), soa.cross(com, fb))
    f, m = soa.matvec(R, fb), soa.matvec(R, mb)
    if joint.force is not None:
        f, m = soa.sub(f, joint.force), soa.sub(m, joint.moment)
    return new, keep(Own(Wrench(f, m), off, s_w))


def _forward_momentum(parent: Velocities, joint: Joint, body: Body, keep):
    """Velocity of the segment, and its own momenta ``p = m v_C``, ``h = I ω + c × p`` (about
    the origin; computed in the segment's frame)."""
    att, off, s_w = _place(parent.attitude, joint, body, keep)
    w_p, r = parent.angular_velocity, body.revolute
    sqd = soa.scale(s_w, joint.qd)
    w = soa.add(w_p, soa.scale(sqd, r))
    v = soa.add(soa.add(parent.velocity, soa.cross(w_p, off)), soa.scale(sqd, 1 - r))
    new = keep(Velocities(att, w, v))
    R = soa.qmat(new.attitude)
    wb, vb = keep((soa.matvec_t(R, new.angular_velocity), soa.matvec_t(R, new.velocity)))
    pb = soa.scale(soa.add(vb, soa.cross(wb, body.com)), body.mass)
    hb = soa.add(soa.matvec(body.inertia, wb), soa.cross(body.com, pb))
    momenta = Wrench(soa.matvec(R, pb), soa.matvec(R, hb))
    return new, keep(Own(momenta, off, s_w, parent_angular_velocity=w_p, velocity=new.velocity))


def _forward_crba(parent: Placement, joint: Joint, body: Body, keep):
    """Placement of the segment, and its own composite about its origin: ``m``, ``h = m c``,
    ``J = R I Rᵀ + m [c]ᵀ[c]``."""
    att, off, s_w = _place(parent.attitude, joint, body, keep)
    new = keep(Placement(att, soa.add(parent.position, off)))
    R = soa.qmat(new.attitude)
    c, mass, inertia = soa.matvec(R, body.com), body.mass, body.inertia
    RI = tuple(sum(R[3 * a + k] * inertia[3 * k + b] for k in range(3)) for a in range(3) for b in range(3))
    IC = tuple(sum(RI[3 * a + k] * R[3 * b + k] for k in range(3)) for a, b in _SYM)
    cc = soa.dot(c, c)
    J = tuple(IC[i] + mass * ((cc if a == b else 0.0) - c[a] * c[b]) for i, (a, b) in enumerate(_SYM))
    own = Composite(mass + jnp.zeros_like(c[0]), soa.scale(c, mass), J)
    return new, keep(Own(own, off, s_w, position=new.position))


# ---- backward steps: (subtree total, own, revolute) -> (what the parent gets, output) ---------


def _wrench_to_parent(total: Wrench, own: Own) -> Wrench:
    """The subtree's wrench (or momenta) about the parent's origin."""
    return Wrench(total.force, soa.add(total.moment, soa.cross(own.offset, total.force)))


def _torques_rnea(total: Wrench, own: Own, r):
    """Joint torque: ``s · M`` (revolute) or ``s · F`` (prismatic)."""
    tau = r * soa.dot(own.axis, total.moment) + (1 - r) * soa.dot(own.axis, total.force)
    return _wrench_to_parent(total, own), tau


def _torques_momentum(total: Wrench, own: Own, r):
    """``∂T/∂q``: ``s · (H × ω_λ + P × v)`` (revolute), ``s · (P × ω_λ)`` (prismatic)."""
    P, H, s_w, w_p = total.force, total.moment, own.axis, own.parent_angular_velocity
    tau = r * soa.dot(s_w, soa.add(soa.cross(H, w_p), soa.cross(P, own.velocity))) \
        + (1 - r) * soa.dot(s_w, soa.cross(P, w_p))
    return _wrench_to_parent(total, own), tau


def _composite_to_parent(total: Composite, own: Own, r):
    """The subtree's composite moved by ``d`` (the offset) to the parent's origin:
    ``h += m d``, ``J += [d]ᵀ[h] + [h]ᵀ[d] + m [d]ᵀ[d]``; output: the composite itself."""
    m, h, J, d = total.mass, total.first_moment, total.inertia, own.offset
    dh, dd = soa.dot(d, h), soa.dot(d, d)
    J_up = tuple(J[i] + (2 * dh + m * dd if a == b else 0.0) - h[a] * d[b] - d[a] * h[b] - m * d[a] * d[b]
                 for i, (a, b) in enumerate(_SYM))
    return Composite(m, soa.add(h, soa.scale(d, m)), J_up), total


# ---- the two passes over a schedule ----------------------------------------------------------


def _write(table, rows, start):
    """Each leaf of ``rows`` ``(K, C)`` written into its ``table`` leaf at row ``start`` (in place)."""
    return tree_map(lambda a, b: lax.dynamic_update_slice_in_dim(a, b, start, 0), table, rows)


def _rows(table, idx):
    return tree_map(lambda x: x[idx], table)


def _concat(parts):
    """Records with the same structure -> one record, leaves concatenated along rows."""
    return tree_map(lambda *x: jnp.concatenate(x, 0), *parts)


def _scan(f, carry, xs, reverse=False):
    """`jax.lax.scan`, or for one step ``f`` called directly (no loop; static index arrays stay numpy)."""
    length = jax.tree_util.tree_leaves(xs)[0].shape[0]
    if length == 1:
        carry, y = f(carry, tree_map(lambda a: a[0], xs))
        return carry, tree_map(lambda a: a[None], y)
    xs = tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, xs)
    return lax.scan(f, carry, xs, reverse=reverse)


def _forward_pass(sched: Schedule, step: Callable, world, joint: Joint, body: Body, keep, zero_row):
    """Proximal → distal over the phases: ``step(parent rows, joint, body, keep)`` per step, the
    parent rows gathered from a table of the world's and every earlier row. Returns the own
    terms (`Own`, leaves ``(S, K, C)``), one record per phase."""
    C = zero_row.shape[1]
    # built from zeros_like(q): the state's type inside jax.shard_map (a constant carry is rejected)
    done = [tree_map(lambda v: v + zero_row, world)]  # forward rows so far: the world, then each phase's
    own = []
    for ph in sched.phases:
        S, K = ph.members.shape
        E = len(ph.extern)
        rows = _concat(done)
        # numpy index arrays are captured by reference when traced: never modify one in place
        table = tree_map(lambda x: jnp.concatenate([x[ph.extern], jnp.zeros((S * K, C), x.dtype)], 0), rows)

        def body_fn(table, x, E=E, K=K):
            joint_t, body_t, parent_row, t = x
            new, own_t = step(_rows(table, parent_row), joint_t, body_t, keep)
            return _write(table, new, E + t * K), own_t

        by_step = (_rows(joint, ph.members), _rows(body, ph.members), ph.parent_row, np.arange(S))
        table, ys = _scan(body_fn, table, by_step)
        done.append(tree_map(lambda x: x[E:], table))
        own.append(ys)
    return own


def _backward_pass(sched: Schedule, step: Callable, own: list, revolute, keep, zero_row):
    """Distal → proximal over the phases: each slot's total is its own term plus its children's
    (gathered by rounds from a table of later steps' and later phases' transported totals), then
    ``step(total, own, revolute) -> (to the parent, output)``. Returns the outputs, one per phase
    (leaves ``(S, K, C)``)."""
    C = zero_row.shape[1]
    outs, ups = [None] * len(own), []  # ups: totals of the later phases, nearest first
    for p in reversed(range(len(own))):
        ph, loc = sched.phases[p], own[p]
        S, K = ph.members.shape
        if ph.later_children.shape[0]:  # children in later phases: summed into the own term
            later = tree_map(lambda *x: jnp.concatenate((zero_row,) + x, 0), *ups)
            first = int(sched.slot[sched.phases[p + 1].members[0, 0]]) + 1  # global row of ups[0] row 0
            idx = np.where(ph.later_children > 0, ph.later_children - first + 1, 0)
            sums = tree_map(lambda a: jnp.zeros((S * K, C), a.dtype), loc.term)
            for k in range(idx.shape[0]):
                sums = tree_map(jnp.add, sums, _rows(later, idx[k]))
            loc = loc._replace(term=tree_map(lambda a, b: a + b.reshape(S, K, C), loc.term, sums))

        def body_fn(table, x, K=K):
            own_t, r, rounds, t = x
            total = own_t.term
            for k in range(rounds.shape[0]):  # round k brings each parent its k-th child
                total = tree_map(jnp.add, total, _rows(table, rounds[k]))
            up, out = step(keep(total), own_t, r)
            return _write(table, up, t * K), out

        table = tree_map(lambda _: jnp.broadcast_to(zero_row, (S * K + 1, C)), loc.term)
        xs = (loc, revolute[ph.members], ph.child_rows, np.arange(S))
        table, outs[p] = _scan(body_fn, table, xs, reverse=True)
        ups.insert(0, tree_map(lambda x: x[: S * K], table))
    return outs


def _by_segment(sched: Schedule, parts: list, C: int, get: Callable = lambda x: x):
    """``get`` of per-phase outputs ``(S, K, C)`` -> ``(n, C)`` in segment order."""
    return jnp.concatenate([get(x).reshape(-1, C) for x in parts], 0)[sched.slot]


def _torques_out(tree: SegmentTree, sched: Schedule, outs: list, own: list, C: int):
    """Per-phase joint outputs -> ``(n, C)`` in segment order."""
    return _by_segment(sched, outs, C)


def _crba_columns(tree: SegmentTree, sched: Schedule, composites: list, own: list, C: int):
    """``M`` ``(n·n, C)`` from each subtree's composite ``(m, h, J)`` about its joint centre.

    Joint ``i`` moving at unit rate moves its subtree rigidly: linear momentum ``s × h`` and
    angular momentum ``J s`` about ``P_i`` (revolute), or ``m s`` and ``h × s`` (prismatic).
    ``M[j, i]`` for ``j`` an ancestor of ``i`` (or ``i``) is joint ``j``'s share of that
    momentum: ``s_j · (L + (P_i − P_j) × lin)`` (revolute ``j``), ``s_j · lin`` (prismatic).
    """
    n = tree.nq

    def seg(parts, get):
        return _by_segment(sched, parts, C, get)

    m = seg(composites, lambda c: c.mass)
    h = tuple(seg(composites, lambda c, k=k: c.first_moment[k]) for k in range(3))
    J6 = tuple(seg(composites, lambda c, k=k: c.inertia[k]) for k in range(6))
    s = tuple(seg(own, lambda o, k=k: o.axis[k]) for k in range(3))
    pos = tuple(seg(own, lambda o, k=k: o.position[k]) for k in range(3))
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


class _Kernel(NamedTuple):
    """One batched algorithm: the world's forward row, the two steps, the output assembly."""

    world: Callable  # gravity (3,) -> the world's forward row (scalar leaves)
    forward: Callable  # see `_forward_pass`
    backward: Callable  # see `_backward_pass`
    output: Callable  # (tree, schedule, outputs, own, C) -> (width, C)
    square: bool  # output width n·n (else n)


_QUAT_ID = (1.0, 0.0, 0.0, 0.0)
_ZERO = (0.0, 0.0, 0.0)
_RNEA = _Kernel(lambda g: Accelerations(_QUAT_ID, _ZERO, _ZERO, (-g[0], -g[1], -g[2])),
                _forward_rnea, _torques_rnea, _torques_out, False)
_MOMENTUM = _Kernel(lambda g: Velocities(_QUAT_ID, _ZERO, _ZERO), _forward_momentum, _torques_momentum,
                    _torques_out, False)
_CRBA = _Kernel(lambda g: Placement(_QUAT_ID, _ZERO), _forward_crba, _composite_to_parent, _crba_columns, True)


def _chunk(tree: SegmentTree, kernel: _Kernel, sched: Schedule, q, qd, qdd, external, *, fused: bool):
    """One chunk: ``q, qd, qdd`` ``(n, C)``; ``external``: None or 3-tuples ``(n, C)`` of world-frame
    forces and moments about each segment origin. Returns ``(n, C)`` (``(n·n, C)`` row-major for
    the mass matrix). ``fused``: the CPU tricks (`_keep`, vectorised ``sincos``)."""
    keep = (lambda x: _keep(x)) if fused else (lambda x: x)
    dt = q.dtype
    zero_row = jnp.zeros_like(q[:1])  # (1, C): the state's type inside jax.shard_map

    def col(a):  # (n, k) constants -> k arrays (n, 1)
        return tuple(a[:, k, None] for k in range(a.shape[1]))

    rev = jnp.asarray(tree.is_revolute, dt)[:, None]
    orient, axis = col(tree.orientations.astype(dt)), col(tree.axes.astype(dt))
    body = Body(soa.qrot(orient, axis), rev, col(tree.coms.astype(dt)), tree.masses.astype(dt)[:, None],
                col(tree.inertias.astype(dt).reshape(tree.nq, 9)))
    half = 0.5 * q * rev
    s, c = keep(sincos(half) if fused else (jnp.sin(half), jnp.cos(half)))
    joint = Joint(rotation=soa.qmul(orient, (c, s * axis[0], s * axis[1], s * axis[2])),
                  translation=soa.add(col(tree.origins.astype(dt)), soa.scale(body.axis_in_parent, q * (1 - rev))),
                  qd=qd, qdd=qdd)
    if external is not None:
        joint = joint._replace(force=external[0], moment=external[1])
    own = _forward_pass(sched, kernel.forward, kernel.world(tree.gravity.astype(dt)), joint, body, keep, zero_row)
    outs = _backward_pass(sched, kernel.backward, own, rev, keep, zero_row)
    return kernel.output(tree, sched, outs, own, q.shape[1])


def _batched(tree: SegmentTree, kernel: _Kernel, states: list, external: list | None, *,
             chunk: int | None, layout: str | None, schedule: Schedule | None):
    """`_chunk` over the batch: ``states`` ``[q, a, b]`` ``(B, n)``, ``external`` None or
    ``[forces, moments]`` ``(B, n, 3)``; chunks written in place into the ``(B, width)`` result."""
    layout = default_layout() if layout is None else layout
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    sched = _levels.schedule(tree.parents) if schedule is None else schedule
    q = states[0]
    B, n = q.shape
    C = chunk_size(B, layout) if chunk is None else max(1, min(int(chunk), B))
    width = n * n if kernel.square else n
    if B == 0:  # an empty batch (vmap over 0 states): the empty result, nothing to slice
        return jnp.zeros_like(q[:, :1]) + jnp.zeros((1, width), q.dtype)
    nc = -(-B // C)

    def one(start):
        qc, ac, bc = (lax.dynamic_slice_in_dim(x, start, C, 0).T for x in states)  # (n, C) each
        ext = None
        if external is not None:  # (C, n, 3) each -> 3-tuples of (n, C)
            ext = tuple(tuple(e[:, :, k].T for k in range(3))
                        for e in (lax.dynamic_slice_in_dim(x, start, C, 0) for x in external))
        return _chunk(tree, kernel, sched, qc, ac, bc, ext, fused=layout == "cpu").T

    if nc == 1:
        return one(0)

    def body(i, out):
        # every chunk is full: the last one starts at B - C and recomputes a few states of the one
        # before it (same values), so no input or output is padded or copied at full size
        start = jnp.minimum(i * C, B - C)
        return lax.dynamic_update_slice_in_dim(out, one(start), start, 0)

    # from zeros_like(q), not a constant: the state's type inside jax.shard_map
    return lax.fori_loop(0, nc, body, jnp.zeros_like(q[:, :1]) + jnp.zeros((1, width), q.dtype))


def inverse_dynamics_batch(tree: SegmentTree, q, qd, qdd, external=None, *, chunk: int | None = None,
                           layout: str | None = None, schedule: Schedule | None = None):
    """``tau`` ``(B, n)`` for ``q, qd, qdd`` ``(B, n)`` (``external``: forces and moments
    ``(B, n, 3)``, world frame, or None). Same result as `jax.vmap` of the per-state recursion
    to round-off; not differentiable by itself (see `jaxbio.dynamics.rnea`).

    Static keywords (all three kernels): ``chunk`` states per chunk (default: `chunk_size` of the
    layout); ``layout`` ``"cpu"`` (chunks, `_keep` fusions, vectorised sin/cos) or
    ``"accelerator"`` (one chunk, plain XLA), default `default_layout`; ``schedule`` a
    `jaxbio.dynamics._levels.schedule` of ``tree.parents`` (default: its default costs).
    """
    ext = None if external is None else [external[0], external[1]]
    return _batched(tree, _RNEA, [q, qd, qdd], ext, chunk=chunk, layout=layout, schedule=schedule)


def kinetic_energy_gradient_batch(tree: SegmentTree, q, qd, *, chunk: int | None = None,
                                  layout: str | None = None, schedule: Schedule | None = None):
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
    round-off; not differentiable by itself (see `jaxbio.hamiltonian.dH_dq`). Keywords as for
    `inverse_dynamics_batch`.
    """
    return _batched(tree, _MOMENTUM, [q, qd, qd], None, chunk=chunk, layout=layout, schedule=schedule)


def mass_matrix_batch(tree: SegmentTree, q, *, chunk: int | None = None, layout: str | None = None,
                      schedule: Schedule | None = None):
    """``M`` ``(B, n, n)`` for ``q`` ``(B, n)`` by the composite-rigid-body algorithm in the world
    frame: one proximal → distal pass (attitudes and joint centres), one distal → proximal pass
    summing each subtree's mass, first moment ``h`` and inertia ``J`` about its joint centre
    (`_composite_to_parent`), then one entry per pair of a segment and an ancestor
    (`_crba_columns`). Same result as `jaxbio.mass_matrix` to round-off; not differentiable by
    itself (see `jaxbio.dynamics.mass_matrix`). Keywords as for `inverse_dynamics_batch`.
    """
    B, n = q.shape
    out = _batched(tree, _CRBA, [q, q, q], None, chunk=chunk, layout=layout, schedule=schedule)
    return out.reshape(B, n, n)
