"""Reverse mode of the batch-last wrench recursion: `inverse_dynamics_vjp_batch`.

``tau = ID(q, qd, qdd)`` of `jaxbio.dynamics._batched.inverse_dynamics_batch` and a cotangent
``ct`` ``(B, nv)`` give ``(ctᵀ ∂tau/∂q, ctᵀ ∂tau/∂qd, ctᵀ ∂tau/∂qdd)`` by four passes per chunk,
on the layout, schedule and records of `jaxbio.dynamics._batched` (read its module docstring):

1. the forward pass (proximal → distal, `_forward_rnea`), keeping each phase's table of forward
   rows (what each step's parent rows were gathered from) and the own terms;
2. the backward pass (distal → proximal, `_torques_rnea`), keeping each step's subtree total;
3. the adjoint of the backward pass, proximal → distal: a slot's ``up`` went to its parent's
   total only, so the cotangent of its ``up`` is its parent's total's cotangent, *gathered* from
   a table of those (by the forward pass's ``parent_row``; padded slots read a zero row). The
   step function's VJP gives the cotangents of the total (which is also the own term's) and of
   the own record's offset and axis;
4. the adjoint of the forward pass, distal → proximal: a slot's rows were read by its children
   only, so the cotangent of its rows is the sum of its children's parent-row cotangents,
   gathered by ``rounds`` (`Phase.child_rows`) and across phases by ``later_children``, exactly
   as the backward pass sums wrenches. The step function's VJP gives the cotangents of the parent
   rows and of the `Joint` rows; padded slots' results are never read (the per-segment gathers
   use `Schedule.slot`).

Finally the joint construction of `_setup` (half-angle ``sin``/``cos``, quaternion product,
prismatic slide) is differentiated by hand around the ``sincos`` (so the vectorised one is
kept). The step functions are elementwise on ``(K, C)`` arrays, so their `jax.vjp` is too; they
run with the identity ``keep`` inside `jax.vjp` (`soa.keep` has no derivative rule) and their
cotangents are materialised by the chained ``keep`` outside it (`_Chained`).

Axial trees (revolute and prismatic joints) only, no external forces; the tree is a constant.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxbio._sincos import sincos
from jaxbio._validate import check_choice
from jaxbio.dynamics import _levels
from jaxbio.dynamics import _soa as soa
from jaxbio.dynamics._batched import (LAYOUTS, Accelerations, Own, Wrench, _after, _Chained, _RNEA, _concat, _forward_rnea, _rows, _scan,
                                      _setup, _torques_rnea, _write, chunk_size, default_layout)
from jaxbio.dynamics._levels import Schedule
from jaxbio.tree import SegmentTree

tree_map = jax.tree_util.tree_map


def _ident(x):
    return x


def _padded(ph) -> np.ndarray:
    """``(S, K)`` True where a slot is padding (it repeats its step's first member)."""
    m = ph.members
    pad = m == m[:, :1]
    pad[:, 0] = False
    return pad


class _ChainedVJP:
    """`_Chained` for a function differentiated by `jax.vjp`: each call materialises its argument
    (`soa.keep`) after the previous call's result (`_after`), and so does the reverse code with
    the cotangents, in its own (reverse) order, starting after ``start`` (set before the VJP runs).
    ``last``: the reverse code's latest result."""

    def __init__(self, keep):
        self.keep, self.primal, self.last = keep, None, None

    def __call__(self, x):
        me = self

        @jax.custom_vjp
        def kept(x):
            return me.keep(x)

        def fwd(x):
            me.primal = me.keep(_after(x, me.primal))
            return me.primal, None

        def bwd(_, g):
            me.last = me.keep(_after(g, me.last))
            return (me.last,)

        kept.defvjp(fwd, bwd)
        return kept(x)


def _forward_ad(parent, joint, body, keep):
    """`_forward_rnea` (axial trees, no external forces) as differentiated by `_forward_adjoint`:
    the same formulas with more materialised stages (``keep`` is `_ChainedVJP`, whose cotangents are
    materialised too), so that the reverse code of each shared intermediate (a rotation matrix and
    its cotangent) is computed once per element."""
    Rp, att = keep((soa.qmat(parent.attitude), soa.qmul(parent.attitude, joint.rotation)))
    off, s_w = keep((soa.matvec(Rp, joint.translation), soa.matvec(Rp, body.axis_in_parent)))
    w_p, al_p, acc_p = parent.angular_velocity, parent.angular_acceleration, parent.acceleration
    r = body.revolute
    sqd, sqdd = soa.scale(s_w, joint.qd), soa.scale(s_w, joint.qdd)
    w_x_sqd = soa.cross(w_p, sqd)
    w = soa.add(w_p, soa.scale(sqd, r))
    al = soa.add(al_p, soa.add(soa.scale(sqdd, r), soa.scale(w_x_sqd, r)))
    acc = soa.add(soa.add(acc_p, soa.cross(al_p, off)), soa.cross(w_p, soa.cross(w_p, off)))
    acc = soa.add(acc, soa.add(soa.scale(sqdd, 1 - r), soa.scale(w_x_sqd, 2.0 * (1 - r))))
    new = keep(Accelerations(att, w, al, acc))
    R = keep(soa.qmat(new.attitude))
    wb, alb, accb = keep((soa.matvec_t(R, w), soa.matvec_t(R, al), soa.matvec_t(R, acc)))
    com, inertia = body.com, body.inertia
    a_com = soa.add(accb, soa.add(soa.cross(alb, com), soa.cross(wb, soa.cross(wb, com))))
    fb, Iw, Ia = soa.scale(a_com, body.mass), soa.matvec(inertia, wb), soa.matvec(inertia, alb)
    mb = soa.add(soa.add(Ia, soa.cross(wb, Iw)), soa.cross(com, fb))
    fb, mb = keep((fb, mb))
    return new, keep(Own(Wrench(soa.matvec(R, fb), soa.matvec(R, mb)), off, axis=s_w))


def _forward(sched: Schedule, world, setup, keep, zero_row):
    """`jaxbio.dynamics._batched._forward_pass` of `_forward_rnea`, also returning each phase's
    table of forward rows (``E`` extern rows, then ``S·K``)."""
    C = zero_row.shape[1]
    step = functools.partial(_forward_rnea, general=False)
    done = [tree_map(lambda v: v + zero_row, world)]
    own, tables = [], []
    for ph in sched.phases:
        S, K = ph.members.shape
        E = len(ph.extern)
        rows = _concat(done)
        table = tree_map(lambda x: jnp.concatenate([x[ph.extern], jnp.zeros((S * K, C), x.dtype)], 0), rows)

        def body_fn(table, x, E=E, K=K):
            joint_t, body_t, parent_row, t = x
            chained = _Chained(keep)
            new, own_t = step(_rows(table, parent_row), joint_t, body_t, chained)
            return _write(table, new, E + t * K, after=chained.last), own_t

        by_step = (_rows(setup.joint, ph.members), _rows(setup.body, ph.members), ph.parent_row, np.arange(S))
        table, ys = _scan(body_fn, table, by_step)
        tables.append(table)
        done.append(tree_map(lambda x: x[E:], table))
        own.append(ys)
    return own, tables


def _later_sums(sched: Schedule, p: int, ups: list, like, zero_row):
    """Per row of phase ``p`` ``(S·K, C)``: the sum of ``ups`` rows (later phases' tables,
    nearest first) of its children in later phases (`Phase.later_children`)."""
    ph = sched.phases[p]
    S, K = ph.members.shape
    C = zero_row.shape[1]
    sums = tree_map(lambda a: jnp.zeros((S * K, C), a.dtype), like)
    if not ph.later_children.shape[0]:
        return None
    later = tree_map(lambda *x: jnp.concatenate((zero_row,) + x, 0), *ups)
    first = int(sched.slot[sched.phases[p + 1].members[0, 0]]) + 1  # global row of ups[0] row 0
    idx = np.where(ph.later_children > 0, ph.later_children - first + 1, 0)
    for k in range(idx.shape[0]):
        sums = tree_map(jnp.add, sums, _rows(later, idx[k]))
    return sums


def _backward(sched: Schedule, own: list, revolute, keep, zero_row):
    """`jaxbio.dynamics._batched._backward_pass` of `_torques_rnea`, returning each step's total
    (the subtree's wrench) per phase, leaves ``(S, K, C)`` (the outputs are not needed)."""
    C = zero_row.shape[1]
    step = functools.partial(_torques_rnea, general=False)
    totals, ups = [None] * len(own), []
    for p in reversed(range(len(own))):
        ph, loc = sched.phases[p], own[p]
        S, K = ph.members.shape
        sums = _later_sums(sched, p, ups, loc.term, zero_row)
        if sums is not None:
            loc = loc._replace(term=tree_map(lambda a, b: a + b.reshape(S, K, C), loc.term, sums))

        def body_fn(table, x, K=K):
            own_t, r, rounds, t = x
            total = own_t.term
            for k in range(rounds.shape[0]):
                total = tree_map(jnp.add, total, _rows(table, rounds[k]))
            chained = _Chained(keep)
            total = chained(total)
            up, _ = step(total, own_t, r)
            return _write(table, chained(up), t * K, after=chained.last), total

        table = tree_map(lambda _: jnp.broadcast_to(zero_row, (S * K + 1, C)), loc.term)
        xs = (loc, revolute[ph.members], ph.child_rows, np.arange(S))
        table, totals[p] = _scan(body_fn, table, xs, reverse=True)
        ups.insert(0, tree_map(lambda x: x[: S * K], table))
    return totals


def _backward_adjoint(sched: Schedule, own: list, totals: list, ct_outs: list, revolute, keep, zero_row):
    """Adjoint of `_backward`, proximal → distal: per phase the cotangents of the own records
    (`Own` with ``term``, ``offset``, ``axis``), leaves ``(S, K, C)``."""
    C = zero_row.shape[1]
    like = totals[0]
    done = [tree_map(lambda a: zero_row, like)]  # the world's row: nothing
    ct_own = []
    for p, ph in enumerate(sched.phases):
        S, K = ph.members.shape
        E = len(ph.extern)
        rows = _concat(done)
        # E extern rows (parents in earlier phases), S·K rows of this phase, one zero row
        table = tree_map(lambda x: jnp.concatenate([x[ph.extern], jnp.zeros((S * K + 1, C), x.dtype)], 0), rows)
        parent_row = np.where(_padded(ph), E + S * K, ph.parent_row)

        def body_fn(table, x, E=E, K=K):
            own_t, total_t, r, ct_out, prow, t = x
            ct_up = _rows(table, prow)

            def f(total, off, axis):
                return step(total, own_t._replace(offset=off, axis=axis), r)

            _, vjp = jax.vjp(f, total_t, own_t.offset, own_t.axis)
            chained = _Chained(keep)
            ct_total, ct_off, ct_axis = chained(vjp((ct_up, ct_out)))
            return _write(table, ct_total, E + t * K, after=chained.last), Own(ct_total, ct_off, axis=ct_axis)

        step = functools.partial(_torques_rnea, general=False)
        xs = (own[p], totals[p], revolute[ph.members], ct_outs[p], parent_row, np.arange(S))
        table, ys = _scan(body_fn, table, xs)
        done.append(tree_map(lambda x: x[E:E + S * K], table))
        ct_own.append(ys)
    return ct_own


def _forward_adjoint(sched: Schedule, tables: list, ct_own: list, setup, keep, zero_row, fused: bool):
    """Adjoint of `_forward`, distal → proximal: per phase the cotangents of the `Joint` rows
    (``rotation``, ``translation``, ``qd``, ``qdd``), leaves ``(S, K, C)``."""
    C = zero_row.shape[1]
    ct_joint, ups = [None] * len(sched.phases), []
    like = tree_map(lambda a: a[0], tables[0])  # an Accelerations record of (rows, C) leaves
    for p in reversed(range(len(sched.phases))):
        ph = sched.phases[p]
        S, K = ph.members.shape
        sums = _later_sums(sched, p, ups, like, zero_row)
        if sums is None:
            ct_rows = tree_map(lambda a: jnp.zeros((S, K, C), a.dtype), like)
        else:
            ct_rows = tree_map(lambda a: a.reshape(S, K, C), sums)

        def body_fn(table, x, p=p, K=K):
            ct_new, ct_own_t, joint_t, body_t, parent_row, rounds, t = x
            for k in range(rounds.shape[0]):
                ct_new = tree_map(jnp.add, ct_new, _rows(table, rounds[k]))
            parent = _rows(tables[p], parent_row)

            # the step with its stages materialised (fused: `_ChainedVJP`, reverse code included)
            ad = _ChainedVJP(keep) if fused else _ident
            if fused:
                ad.primal = parent
            _, vjp = jax.vjp(lambda parent, joint: _forward_ad(parent, joint, body_t, ad), parent, joint_t)
            if fused:
                ad.last = ct_new
            cts = vjp((ct_new, ct_own_t))
            chained = _Chained(keep)
            chained.last = ad.last if fused else None
            ct_parent, ct_j = chained(cts)
            return _write(table, ct_parent, t * K, after=chained.last), ct_j

        table = tree_map(lambda _: jnp.broadcast_to(zero_row, (S * K + 1, C)), like)
        xs = (ct_rows, ct_own[p], _rows(setup.joint, ph.members), _rows(setup.body, ph.members), ph.parent_row,
              ph.child_rows, np.arange(S))
        table, ct_joint[p] = _scan(body_fn, table, xs, reverse=True)
        ups.insert(0, tree_map(lambda x: x[: S * K], table))
    return ct_joint


def _chunk_vjp(tree: SegmentTree, sched: Schedule, q, qd, qdd, ct, *, fused: bool):
    """One chunk: ``q, qd, qdd, ct`` ``(n, C)`` -> ``(3 n, C)``: the cotangents of ``q``, ``qd``, ``qdd``."""
    n, C = q.shape
    setup = _setup(tree, q, qd, qdd, fused=fused)
    keep, zero_row = setup.keep, setup.zero_row
    world = _RNEA.world(tree.gravity.astype(q.dtype))
    own, tables = _forward(sched, world, setup, keep, zero_row)
    totals = _backward(sched, own, setup.revolute, keep, zero_row)

    # tau = concat(per-phase outputs)[slot]: ct back to the rows (padded rows: zero)
    sizes = [ph.members.size for ph in sched.phases]
    inv = np.full(sum(sizes), n, np.int64)
    inv[sched.slot] = np.arange(n)
    ct_rows = jnp.concatenate([ct, jnp.zeros_like(ct[:1])], 0)[inv]
    bounds = np.cumsum([0] + sizes)
    ct_outs = [ct_rows[a:b].reshape(ph.members.shape + (C,))
               for a, b, ph in zip(bounds[:-1], bounds[1:], sched.phases)]

    ct_own = _backward_adjoint(sched, own, totals, ct_outs, setup.revolute, keep, zero_row)
    ct_joint = _forward_adjoint(sched, tables, ct_own, setup, keep, zero_row, fused)

    def seg(get):  # per-phase (S, K, C) -> (n, C) in segment order
        return jnp.concatenate([get(x).reshape(-1, C) for x in ct_joint], 0)[sched.slot]

    ct_rot = tuple(seg(lambda j, c=c: j.rotation[c]) for c in range(4))
    ct_tr = tuple(seg(lambda j, c=c: j.translation[c]) for c in range(3))
    ct_qd, ct_qdd = seg(lambda j: j.qd), seg(lambda j: j.qdd)

    # the joint construction of `_setup` (axial), differentiated around its sin/cos
    dt = q.dtype
    rev = setup.revolute

    def col(a):
        return tuple(a[:, k, None] for k in range(a.shape[1]))

    orient, axis = col(tree.unit_orientations.astype(dt)), col(tree.unit_axes.astype(dt))
    s, c = keep(sincos(0.5 * q * rev) if fused else (jnp.sin(0.5 * q * rev), jnp.cos(0.5 * q * rev)))

    def build(s, c, q):
        rot = soa.qmul(orient, (c, s * axis[0], s * axis[1], s * axis[2]))
        tr = soa.scale(setup.body.axis_in_parent, q * (1 - rev))
        return rot, tr

    _, vjp = jax.vjp(build, s, c, q)
    ct_s, ct_c, ct_q = vjp((ct_rot, ct_tr))
    ct_q = ct_q + 0.5 * rev * (c * ct_s - s * ct_c)
    return jnp.concatenate([ct_q, ct_qd, ct_qdd], 0)


def inverse_dynamics_vjp_batch(tree: SegmentTree, q, qd, qdd, ct, *, chunk: int | None = None,
                               layout: str | None = None, schedule: Schedule | None = None):
    """``(ct_q, ct_qd, ct_qdd)`` ``(B, nq)``, ``(B, nv)``, ``(B, nv)``: the cotangents of ``q``,
    ``qd``, ``qdd`` of `jaxbio.dynamics._batched.inverse_dynamics_batch` ``(B, nv)`` for a
    cotangent ``ct`` ``(B, nv)``, i.e. what ``jax.vjp(jax.vmap(tau))`` gives, by a hand-written
    reverse pass on the batch-last layout (see this module's docstring). Axial trees (revolute and
    prismatic joints: ``tree.is_axial``) only; no external forces; the tree is not differentiated.
    Keywords as for `inverse_dynamics_batch`.
    """
    if not tree.is_axial:
        raise ValueError("inverse_dynamics_vjp_batch: only trees of revolute and prismatic joints "
                         "(tree.is_axial) are supported; differentiate jax.vmap(inverse_dynamics) instead")
    layout = default_layout() if layout is None else layout
    check_choice(layout, LAYOUTS, "layout")
    sched = _levels.schedule(tree.parents) if schedule is None else schedule
    q, qd, qdd, ct = (jnp.asarray(x) for x in (q, qd, qdd, ct))
    dt = jnp.result_type(q, qd, qdd, ct)
    q, qd, qdd, ct = (x.astype(dt) for x in (q, qd, qdd, ct))
    B, n = q.shape
    if B == 0:
        z = jnp.zeros((0, n), dt)
        return z, z, z
    C = chunk_size(B, layout) if chunk is None else max(1, min(int(chunk), B))
    nc = -(-B // C)
    fused = layout == "cpu"

    def one(start):
        parts = [lax.dynamic_slice_in_dim(x, start, C, 0).T for x in (q, qd, qdd, ct)]
        return _chunk_vjp(tree, sched, *parts, fused=fused).T

    if nc == 1:
        out = one(0)
    else:
        def body(i, out):
            start = jnp.minimum(i * C, B - C)
            return lax.dynamic_update_slice_in_dim(out, one(start), start, 0)

        out = lax.fori_loop(0, nc, body, jnp.zeros_like(q[:, :1]) + jnp.zeros((1, 3 * n), dt))
    return out[:, :n], out[:, n:2 * n], out[:, 2 * n:]
