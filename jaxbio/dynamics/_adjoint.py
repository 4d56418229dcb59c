"""Reverse mode of the batch-last wrench recursion: `inverse_dynamics_vjp_batch`.

``tau = ID(q, qd, qdd)`` of `jaxbio.dynamics.batch_last.inverse_dynamics_batch` and a cotangent
``ct`` ``(B, nv)`` give ``(ctᵀ ∂tau/∂q, ctᵀ ∂tau/∂qd, ctᵀ ∂tau/∂qdd)`` by four passes per chunk,
on the layout, schedule and records of `jaxbio.dynamics.batch_last` (read its module docstring):

1. the forward pass (proximal → distal, `_forward_rnea`), keeping each phase's table of forward
   rows (what each step's parent rows were gathered from) and the own terms;
2. the backward pass (distal → proximal, `_torques_rnea`), keeping each step's subtree total;
3. the adjoint of the backward pass, proximal → distal, by hand (`_ct_total`): a slot's ``up``
   went to its parent's total only, so the cotangent of its ``up`` is its parent's total's
   cotangent, *gathered* from a table of those (by the forward pass's ``parent_row``; padded
   slots read a zero row). It gives the cotangents of the total (which is also the own term's) and
   of the own record's offset and axis;
4. the adjoint of the forward pass, distal → proximal, by hand (`_step_adjoint`): a slot's rows
   were read by its children only, so the cotangent of its rows is the sum of its children's
   parent-row cotangents, gathered by ``rounds`` (`Phase.child_rows`) and across phases by
   ``later_children`` (or scatter-added for wide trees), exactly as the backward pass sums
   wrenches (`batch_last._add_children`). Attitudes get a world-frame
   rotation cotangent (a 3-vector, not the quaternion's 4 numbers), which a child hands its parent
   unchanged and whose projection on the joint axis is the angle's cotangent, so the joint
   construction of `_setup` (half-angle ``sin``/``cos``) needs no derivative; padded slots'
   results are never read (the per-segment gathers use `Schedule.slot`).

`jax.vjp` of `_forward_rnea` in pass 4 (with its stages and their cotangents materialised) gave
the same numbers and was slower (commit 8235ba5 has it). So was a two-pass variant (pass 3
folded into pass 1 as one more forward row, passes 2 and 4 in one distal → proximal pass; commit
c380287). Measurements: benchmarks/README.md, "Measurements behind design choices". The passes use `_scan`, `_write` and `_Chained` as the forward
kernels do.

Axial trees (revolute and prismatic joints) only, no external forces; the tree is a constant.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio import _soa as soa
from jaxbio.dynamics.batch_last import (
    Own,
    Wrench,
    _Chained,
    _add_children,
    _RNEA,
    _backward_pass,
    _concat,
    _forward_pass,
    _forward_rnea,
    _later_sums,
    _rows,
    _scan,
    _setup,
    _torques_rnea,
    _write,
    children_of,
    chunked as _batched,
)
from jaxbio.dynamics._levels import Schedule
from jaxbio.tree import SegmentTree

tree_map = jax.tree_util.tree_map


def _padded(ph) -> np.ndarray:
    """``(S, K)`` True where a slot is padding (it repeats its step's first member)."""
    m = ph.members
    pad = m == m[:, :1]
    pad[:, 0] = False
    return pad


def _ct_total(ct_up, ct, own: Own, r):
    """The cotangent of a slot's total wrench from its ``up``'s (its parent's total's, ``ct_up``) and
    its output's ``ct``: ``up = (F, M + d × F)``, ``out = s · (r M + (1 − r) F)``."""
    s = own.axis
    return Wrench(
        soa.add(soa.add(ct_up.force, soa.cross(ct_up.moment, own.offset)), soa.scale(s, (1 - r) * ct)),
        soa.add(ct_up.moment, soa.scale(s, r * ct)),
    )


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
            chained = _Chained(keep)
            F, M = total_t
            ct_own = chained(
                Own(
                    _ct_total(ct_up, ct_out, own_t, r),
                    soa.cross(F, ct_up.moment),
                    axis=soa.add(soa.scale(M, r * ct_out), soa.scale(F, (1 - r) * ct_out)),
                )
            )
            return _write(table, ct_own.term, E + t * K, after=chained.last), ct_own

        xs = (own[p], totals[p], revolute[ph.members], ct_outs[p], parent_row, np.arange(S))
        table, ys = _scan(body_fn, table, xs)
        done.append(tree_map(lambda x: x[E : E + S * K], table))
        ct_own.append(ys)
    return ct_own


def _step_adjoint(ct, ct_own: Own, own: Own, new, parent, qd, qdd, body):
    """Adjoint of one `_forward_rnea` step (axial tree, no external forces), by hand.

    Attitudes get a world-frame rotation cotangent ``θ̄`` (a perturbation ``δR = [δθ]× R``), so the
    joint angle's is ``s · θ̄`` and the parent's attitude gets the child's ``θ̄`` unchanged.
    ``ct``: the cotangents ``(θ̄, ω̄, ᾱ, ā)`` of the segment's rows (its children's sums);
    ``ct_own``: of its own wrench, offset and axis; ``own``, ``new``, ``parent``: the forward
    pass's own record, the segment's rows and its parent's rows. Returns the cotangents of the
    parent's rows (same form) and ``(q̄, q̄̇, q̄̈)``.

    With ``c = R c_b``, ``I = R I_b Rᵀ``: ``f = m (a + α × c + ω × (ω × c))``,
    ``n = I α + ω × I ω + c × f``; with ``s`` the world axis, ``d`` the offset, ``r`` 1 for a
    revolute joint: ``ω = ω_p + r s q̇``, ``α = α_p + r (s q̈ + ω_p × s q̇)``,
    ``a = a_p + α_p × d + ω_p × (ω_p × d) + (1 − r)(s q̈ + 2 ω_p × s q̇)``, ``d = R_p t`` (``t``
    moved by ``(1 − r) q`` along the axis), ``s = R_p s_p``.
    """
    X, dot, add, sc = soa.cross, soa.dot, soa.add, soa.scale
    ct_th, ct_w, ct_al, ct_acc = ct
    ct_f, ct_m = ct_own.term.force, ct_own.term.moment
    att, w, al, _ = new
    R = soa.qmat(att)

    def inertia(x):
        return soa.matvec(R, soa.matvec(body.inertia, soa.matvec_t(R, x)))

    m, c, f = body.mass, soa.matvec(R, body.com), own.term.force
    # own wrench -> rows and attitude
    g = add(ct_f, X(ct_m, c))
    ct_acc = add(ct_acc, sc(g, m))
    I_ctm, I_al, I_w = inertia(ct_m), inertia(al), inertia(w)
    ctm_x_w = X(ct_m, w)
    I_ctm_x_w = inertia(ctm_x_w)
    g_x_w = X(g, w)
    ct_al = add(ct_al, add(sc(X(c, g), m), I_ctm))
    ct_w = add(ct_w, add(sc(add(X(X(w, c), g), X(c, g_x_w)), m), add(X(I_w, ct_m), I_ctm_x_w)))
    ct_c = add(sc(add(X(g, al), X(g_x_w, w)), m), X(f, ct_m))
    ct_th = add(
        ct_th, add(add(X(c, ct_c), soa.sub(X(I_al, ct_m), X(al, I_ctm))), soa.sub(X(I_w, ctm_x_w), X(w, I_ctm_x_w)))
    )
    # joint motion -> parent rows and coordinates
    r = body.revolute
    w_p, al_p = parent.angular_velocity, parent.angular_acceleration
    off, s = own.offset, own.axis
    e = add(sc(ct_al, r), sc(ct_acc, 2 * (1 - r)))  # of ω_p × s q̇
    e2 = add(sc(ct_al, r), sc(ct_acc, 1 - r))  # of s q̈
    ct_qd = r * dot(s, ct_w) + dot(X(w_p, s), e)
    ct_qdd = dot(s, e2)
    ct_s = add(add(ct_own.axis, sc(ct_w, r * qd)), add(sc(e2, qdd), sc(X(e, w_p), qd)))
    ct_off = add(ct_own.offset, add(X(ct_acc, al_p), X(X(ct_acc, w_p), w_p)))
    ct_q = r * dot(s, ct_th) + (1 - r) * dot(s, ct_off)
    ct_thp = add(ct_th, add(X(off, ct_off), X(s, ct_s)))
    ct_alp = add(ct_al, X(off, ct_acc))
    ct_wp = add(add(ct_w, sc(X(s, e), qd)), add(X(X(w_p, off), ct_acc), X(off, X(ct_acc, w_p))))
    return (ct_thp, ct_wp, ct_alp, ct_acc), (ct_q, ct_qd, ct_qdd)


def _forward_adjoint(sched: Schedule, tables: list, own: list, ct_own: list, setup, keep, zero_row):
    """Adjoint of `_forward` by `_step_adjoint`, distal → proximal: per phase ``(q̄, q̄̇, q̄̈)``,
    leaves ``(S, K, C)``."""
    C = zero_row.shape[1]
    out, ups = [None] * len(sched.phases), []
    like = tuple((zero_row,) * 3 for _ in range(4))  # (θ̄, ω̄, ᾱ, ā)
    for p in reversed(range(len(sched.phases))):
        ph = sched.phases[p]
        S, K = ph.members.shape
        E = len(ph.extern)
        sums = _later_sums(sched, p, ups, like, zero_row)
        if sums is None:
            ct_rows = tree_map(lambda a: jnp.zeros((S, K, C), a.dtype), like)
        else:
            ct_rows = tree_map(lambda a: a.reshape(S, K, C), sums)
        rows = tree_map(lambda a: a[E:].reshape(S, K, C), tables[p])

        def body_fn(table, x, p=p):
            ct, ct_own_t, own_t, new, qd, qdd, body_t, parent_row, kids, t = x
            chained = _Chained(keep)
            ct = chained(_add_children(ct, table, kids))
            up, coords = _step_adjoint(ct, ct_own_t, own_t, new, _rows(tables[p], parent_row), qd, qdd, body_t)
            up, coords = chained((up, coords))
            return _write(table, up, t * K, after=chained.last), coords

        table = tree_map(lambda _: jnp.broadcast_to(zero_row, (S * K + 1, C)), like)
        xs = (
            ct_rows,
            ct_own[p],
            own[p],
            rows,
            setup.joint.qd[ph.members],
            setup.joint.qdd[ph.members],
            _rows(setup.body, ph.members),
            ph.parent_row,
            children_of(ph),
            np.arange(S),
        )
        table, out[p] = _scan(body_fn, table, xs, reverse=True)
        ups.insert(0, tree_map(lambda x: x[: S * K], table))
    return out


def _chunk_vjp(tree: SegmentTree, sched: Schedule, q, qd, qdd, ct, *, fused: bool):
    """One chunk: ``q, qd, qdd, ct`` ``(n, C)`` -> ``(3 n, C)``: the cotangents of ``q``, ``qd``, ``qdd``."""
    n, C = q.shape
    setup = _setup(tree, q, qd, qdd, fused=fused)
    keep, zero_row = setup.keep, setup.zero_row
    world = _RNEA.world(tree.gravity.astype(q.dtype))
    ct_outs = _ct_outs(sched, ct)
    tables = []
    own = _forward_pass(
        sched,
        functools.partial(_forward_rnea, general=False),
        world,
        setup.joint,
        setup.body,
        keep,
        zero_row,
        tables=tables,
    )
    totals = _backward_pass(
        sched, functools.partial(_torques_rnea, general=False), own, setup.revolute, keep, zero_row, totals=True
    )
    ct_own = _backward_adjoint(sched, own, totals, ct_outs, setup.revolute, keep, zero_row)
    coords = _forward_adjoint(sched, tables, own, ct_own, setup, keep, zero_row)
    ct_q, ct_qd, ct_qdd = (jnp.concatenate([x[k].reshape(-1, C) for x in coords], 0)[sched.slot] for k in range(3))
    return jnp.concatenate([ct_q, ct_qd, ct_qdd], 0)


def _ct_outs(sched: Schedule, ct):
    """``tau = concat(per-phase outputs)[slot]``: ``ct`` ``(n, C)`` back to per-phase ``(S, K, C)``
    rows (padded rows: zero)."""
    n, C = ct.shape
    sizes = [ph.members.size for ph in sched.phases]
    inv = np.full(sum(sizes), n, np.int64)
    inv[sched.slot] = np.arange(n)
    ct_rows = jnp.concatenate([ct, jnp.zeros_like(ct[:1])], 0)[inv]
    bounds = np.cumsum([0] + sizes)
    return [ct_rows[a:b].reshape(ph.members.shape + (C,)) for a, b, ph in zip(bounds[:-1], bounds[1:], sched.phases)]


def inverse_dynamics_vjp_batch(
    tree: SegmentTree,
    q,
    qd,
    qdd,
    ct,
    *,
    chunk: int | None = None,
    layout: str | None = None,
    schedule: Schedule | None = None,
):
    """``(ct_q, ct_qd, ct_qdd)`` ``(B, nq)``, ``(B, nv)``, ``(B, nv)``: the cotangents of ``q``,
    ``qd``, ``qdd`` of `jaxbio.dynamics.batch_last.inverse_dynamics_batch` ``(B, nv)`` for a
    cotangent ``ct`` ``(B, nv)``, i.e. what ``jax.vjp(jax.vmap(tau))`` gives, by a hand-written
    reverse pass on the batch-last layout (see this module's docstring). Axial trees (revolute and
    prismatic joints: ``tree.is_axial``) only; no external forces; the tree is not differentiated.
    Keywords as for `inverse_dynamics_batch`.
    """
    if not tree.is_axial:
        raise ValueError(
            "inverse_dynamics_vjp_batch: only trees of revolute and prismatic joints "
            "(tree.is_axial) are supported; differentiate jax.vmap(inverse_dynamics) instead"
        )
    q, qd, qdd, ct = (jnp.asarray(x) for x in (q, qd, qdd, ct))
    dt = jnp.result_type(q, qd, qdd, ct)
    q, qd, qdd, ct = (x.astype(dt) for x in (q, qd, qdd, ct))
    n = q.shape[1]

    def run(tree, sched, q, qd, qdd, ct, external, fused):
        return _chunk_vjp(tree, sched, q, qd, qdd, ct, fused=fused)

    out = _batched(tree, run, [q, qd, qdd, ct], None, chunk=chunk, layout=layout, schedule=schedule, width=3 * n)
    return out[:, :n], out[:, n : 2 * n], out[:, 2 * n :]
