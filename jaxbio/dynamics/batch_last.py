"""The recursions for many states at once, batch-last: what ``jax.vmap`` of `jaxbio.inverse_dynamics`,
`jaxbio.dynamics.kinetic_energy_gradient` and `jaxbio.mass_matrix` runs.

The per-state recursion (`jaxbio.inverse_dynamics`) batched by `jax.vmap` puts the batch first and
the tree's level second; XLA on CPU then spends its time on the level selects and on arrays much
larger than the caches. This module computes the same quantities (Du 2021, eq. 2, world frame,
attitudes by quaternion) with the batch as the *last*, contiguous axis. Three kernels share one
proximal → distal pass and one distal → proximal pass; each brings its own step functions (the
fourth, forward kinematics, is the forward pass alone):

==============================  ===================================  ==============================
kernel                          forward step (own term)              backward step (output)
==============================  ===================================  ==============================
`inverse_dynamics_batch`        accelerations (own wrench)           `_torques_rnea`: joint torques
`kinetic_energy_gradient_batch` velocities (own momenta)             `_torques_momentum`: ``∂T/∂q``
`mass_matrix_batch`             placements (own composite inertia)   `_composite_to_parent` (CRBA)
`pose_batch`                    placements (the pose itself)         none: forward kinematics
==============================  ===================================  ==============================

`hamiltonian_flow_batch` (what `jax.vmap` of `jaxbio.HamiltonianSystem`'s vector field runs) chains
two of them in one chunk loop: the CRBA passes (``M`` and, from the same composites, gravity),
``q̇ = M⁻¹ p`` by a batch-last Cholesky unrolled over ``nv`` (`jaxbio._linalg.cholesky_solve`: no
LAPACK call per state), then the momentum passes at ``q̇`` (``∂T/∂q``) on the CRBA pass's placements and own
composites (`_forward_momentum_placed`: nothing placed or rotated twice). For a planar tree it runs
`jaxbio.dynamics.planar_batch` instead (the same formulas in 2-D algebra).

How it is laid out, and why:

- The batch is cut into chunks of ``C`` states (`chunk_size`), processed one after another by a
  `jax.lax.fori_loop` that slices a chunk out of the ``(B, n)`` inputs and writes its result in
  place, so a chunk's working set stays in cache and nothing is copied at full size (the last
  chunk starts at ``B − C`` and recomputes a few states rather than padding the batch).
- On CPU, XLA's runtime runs a loop body on the calling thread only when each of its operations
  (thunks) depends on the one before; otherwise it hands them to its intra-op thread pool, whose
  hand-offs cost more than these small operations (issue #23 item 1). So each scan step is one
  chain: every stage, table write, scanned output and the counter reads one number of the one
  before (`_after`, an exact zero), and the scans are `jax.lax.while_loop` loops with unsigned
  indices (`_scan`).
- Inside a chunk, records (`Joint`, `Body`, `Accelerations`, `Own`, …) hold tuples of ``(K, C)``
  arrays, one per component (structure of arrays, `jaxbio._soa`). Each pass is a scan
  (`_scan`) per *phase* over the *steps* of a `jaxbio.dynamics._levels.schedule`: ``K``
  segments (possibly of different tree levels) whose parents were computed in earlier steps or
  phases, gathered from a table of the rows computed so far.
  Own terms are computed in the segment's frame (``R I Rᵀ`` is never formed). A step adds its
  children's totals by one gather per round (round ``r`` hands each slot its ``r``-th child), or,
  when some slot has more than `_levels.WIDE_ROUNDS` children (a star, a bushy tree), by one scatter-add
  of ``(child row, slot)`` pairs (`_add_children`).
- On CPU (``layout="cpu"``) each stage of a step is materialised by `soa.keep`, one variadic
  `jax.lax.reduce`: XLA's CPU backend has no multi-output loop fusion, so without it every
  output gets its own loop and recomputes shared intermediates (a rotation matrix, a parent's
  motion); `jax.lax.optimization_barrier` is removed before fusion and does not help. ``sin`` and
  ``cos`` use the vectorised `jaxbio._sincos.sincos` (XLA's CPU ``sin``/``cos`` call libm per
  element). On an accelerator (``layout="accelerator"``) the whole batch is one chunk and neither
  trick is used.

Joints. A tree of revolute and prismatic joints only (``tree.is_axial``) carries one angle or slide
per segment and its joint axis through the passes, and each backward step projects onto it. Any
other tree (ball, free, fixed joints) carries the joint's relative motion in the segment frame
(`jaxbio.dynamics.kinematics.joint_rows`, the per-state kinematics' own, gathered from ``q``
``(nq, C)`` and ``v`` ``(nv, C)``), the same forward formulas as
`jaxbio.dynamics.kinematics.motion_soa`, and backward outputs that are world vectors, projected on
each velocity coordinate's axis ``R e_k`` at the end (`_coordinates_out`, `_crba_columns`). The
step functions take that choice as the static flag ``general``.

Measured timings, and the variants tried and dropped, are in benchmarks/README.md.

Differentiation is not defined by these kernels: `jaxbio.inverse_dynamics` (and ``energy``,
``mass_matrix``, `jaxbio.hamiltonian`, and `jaxbio.dynamics.kinematics.segment_motion` for poses) route `jax.vmap` to this module with `vmapped_by` and
derivatives (``jvp``, ``grad``, a batched tree) to the per-state code, except one: reverse mode of
the wrench recursion in the states, under `jax.vmap`, runs its hand-written batch-last adjoint
(`jaxbio.dynamics._adjoint`, routed by `vmapped_by`'s ``adjoint`` through `jaxbio._linear.linear_map`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxbio import _linear
from jaxbio._linalg import cholesky_solve
from jaxbio._linear import dense, is_zero, linear_map
from jaxbio._sincos import sincos
from jaxbio._validate import check_choice
from jaxbio.dynamics import _levels, planar_batch as _planar_batch
from jaxbio import _soa as soa
from jaxbio.dynamics._levels import Schedule
from jaxbio.dynamics._motion import joint_rows, motion_soa
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


def vmapped_by(kernel, adjoint=None):
    """Decorator for ``plain(tree, *states)``, a function of one state: under `jax.vmap` with the
    states batched and the tree not, ``kernel(tree, *states)`` runs on the ``(B, ...)`` states
    (unbatched states broadcast); a batched tree (``vmap`` over subjects) gets ``vmap(plain)``.

    `jax.custom_batching.custom_vmap` has no reverse-mode rule, so the whole is wrapped in a
    `jax.custom_jvp` whose rule is ``plain``'s own ``jvp``: ``jvp``, ``jacfwd`` and their batched
    forms differentiate ``plain``, never the kernel.

    ``adjoint``: a hashable object with ``adjoint(tree, *states, ct)`` (the cotangents of the
    ``n_states`` states for a cotangent ``ct`` of the output, all ``(B, ...)``, batch-last inside)
    and ``supports(tree)``. Then
    a derivative in the states alone (the tree and any further argument not differentiated: the
    rule sees symbolic zeros) is ``plain``'s ``jvp`` as a `jaxbio._linear.linear_map` whose
    transpose is ``plain``'s VJP, and under `jax.vmap` ``adjoint``: reverse mode (``grad``,
    ``vjp``, ``jacrev``, ``vmap`` of ``grad``) of a vmapped call runs the adjoint kernel; forward
    mode and derivatives of the adjoint itself (a Hessian-vector product) run the per-state code.
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
                out = jax.vmap(plain)(jax.tree_util.tree_map(full, tree, tree_batched), *states)
            else:
                out = kernel(tree, *states)
            return out, tree_map(lambda _: True, out)

        def _jvp(primals, tangents):
            return jax.jvp(plain, primals, tangents)

        def _adjoint_applies(tree, states) -> bool:
            return adjoint is not None and len(states) == adjoint.n_states and adjoint.supports(tree)

        def _state_tangent(tree, states, d_states):
            leaves, treedef = jax.tree_util.tree_flatten(tree)
            d_states = [jnp.zeros_like(x) if t is None else dense(t) for x, t in zip(states, d_states)]
            return linear_map(
                _PlainJvp(plain, treedef), _PlainVjp(plain, treedef, adjoint), [*leaves, *states], d_states
            )[0]

        def _jvp_adjoint(primals, tangents):
            tree, *states = primals
            d_tree, *d_states = tangents
            if _adjoint_applies(tree, states) and all(
                is_zero(t) for t in jax.tree_util.tree_leaves(d_tree, is_leaf=is_zero)
            ):
                return routed(tree, *states), _state_tangent(tree, states, d_states)
            tangents = jax.tree_util.tree_map(dense, tangents, is_leaf=is_zero)
            return jax.jvp(plain, primals, tangents)

        def tangent(tree, states, d_states):
            """The tangent of ``routed(tree, *states)`` along ``d_states`` (the tree fixed; None: a
            state not moved), without computing its value: what a caller's own derivative rule
            needs when it discards the value (`jaxbio.dynamics.forward`), so that neither the
            program nor the trace holds it."""
            if _adjoint_applies(tree, states):
                return _state_tangent(tree, states, d_states)
            moved = [k for k, t in enumerate(d_states) if t is not None]

            def of_moved(*xs):
                full = list(states)
                for k, x in zip(moved, xs):
                    full[k] = x
                return plain(tree, *full)

            return jax.jvp(of_moved, tuple(states[k] for k in moved), tuple(dense(d_states[k]) for k in moved))[1]

        routed.defjvp(_jvp if adjoint is None else _jvp_adjoint, symbolic_zeros=adjoint is not None)
        routed.__doc__ = plain.__doc__
        routed.tangent = tangent
        return routed

    return wrap


@dataclasses.dataclass(frozen=True)
class _PlainJvp:
    """``(tree leaves, states, tangents of the states) -> [jvp of plain]`` (`vmapped_by`)."""

    plain: Callable
    treedef: Any

    def __call__(self, *args):
        n = self.treedef.num_leaves
        tree = jax.tree_util.tree_unflatten(self.treedef, args[:n])
        k = (len(args) - n) // 2
        states, tangents = args[n : n + k], args[n + k :]
        return [jax.jvp(lambda *s: self.plain(tree, *s), tuple(states), tuple(tangents))[1]]


@dataclasses.dataclass(frozen=True)
class _PlainVjp:
    """``(tree leaves, states, cotangent) -> cotangents of the states``: ``plain``'s VJP; under
    `jax.vmap` of the states with the tree unbatched, the batch-last ``adjoint`` (`vmapped_by`)."""

    plain: Callable
    treedef: Any
    adjoint: Any

    def __call__(self, *args):
        n = self.treedef.num_leaves
        return _plain_vjp(self.plain, jax.tree_util.tree_unflatten(self.treedef, args[:n]), *args[n:])

    def vmapped(self, in_axes, size, summed):
        n = self.treedef.num_leaves
        if any(a is not None for a in in_axes[:n]):  # a batched tree: vmap of the per-state VJP
            return _linear.Vmapped(self, in_axes, size, summed)
        return _AdjointKernel(self.plain, self.treedef, self.adjoint, in_axes[n:], size, summed)


@dataclasses.dataclass(frozen=True)
class _AdjointKernel:
    """`_PlainVjp` under `jax.vmap`: ``adjoint`` on the ``(size, ...)`` states and cotangent
    (unbatched ones broadcast); a state's cotangent is summed over the batch where the batch
    shares that state's tangent (``summed``)."""

    plain: Callable
    treedef: Any
    adjoint: Any
    axes: tuple  # of the states and the cotangent: 0 or None
    size: int
    summed: tuple

    def __call__(self, *args):
        n = self.treedef.num_leaves
        tree = jax.tree_util.tree_unflatten(self.treedef, args[:n])
        full = [
            x if a is not None else jnp.broadcast_to(x, (self.size,) + x.shape) for x, a in zip(args[n:], self.axes)
        ]
        out = _adjoint_call(self.adjoint, self.plain, tree, *full)
        return [x.sum(0) if s else x for x, s in zip(out, self.summed)]


def _plain_vjp(plain, tree, *args):
    """``plain``'s VJP in the states: ``args`` the states and the output's cotangent (one state)."""
    return list(jax.vjp(lambda *s: plain(tree, *s), *args[:-1])[1](args[-1]))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _adjoint_call(adjoint, plain, tree, *args):
    """``adjoint(tree, *states, ct)``; its own derivatives (a Hessian-vector product, say) are those
    of `jax.vmap` of the per-state VJP it stands for (`_plain_vjp`), not the kernel's."""
    return list(adjoint(tree, *args))


@_adjoint_call.defjvp
def _adjoint_call_jvp(adjoint, plain, primals, tangents):
    per_state = functools.partial(_plain_vjp, plain)
    return jax.jvp(lambda tr, *a: list(jax.vmap(per_state, in_axes=(None,) + (0,) * len(a))(tr, *a)), primals, tangents)


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
    """Per-state joint inputs, leaves ``(n, C)``. A tree of revolute and prismatic joints only
    (axial) carries ``qd``, ``qdd``; any other tree carries the joint's relative motion in the
    segment frame, ``w``, ``u``, ``wd``, ``ud`` (see `_relative`)."""

    rotation: Quat  # attitude relative to the parent: orientation · joint rotation
    translation: Vec  # joint centre in the parent frame (origin + prismatic or free displacement), m
    qd: jax.Array | None = None  # axial: rad/s or m/s
    qdd: jax.Array | None = None  # axial: rad/s² or m/s² (``qd`` for ∂T/∂q, unused)
    w: Vec | None = None  # general: relative angular velocity, segment frame, rad/s
    u: Vec | None = None  # general: relative velocity of the origin, segment frame, m/s
    wd: Vec | None = None  # general: rate of ``w``, rad/s²
    ud: Vec | None = None  # general: rate of ``u`` plus ``w × u`` (the free joint's coupling), m/s²
    force: Vec | None = None  # external force on the segment, world frame, N
    moment: Vec | None = None  # external moment about the segment origin, world frame, N·m


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


class Motion(NamedTuple):
    """Forward rows of ``∂T/∂q`` on the mass-matrix pass's placements (world frame)."""

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
    axis: Vec | None = None  # axial trees: joint axis, world frame
    attitude: Quat | None = None  # other trees: the segment's attitude
    angular_velocity: Vec | None = None  # ∂T/∂q only: the segment's
    velocity: Vec | None = None  # ∂T/∂q only: of the origin
    position: Vec | None = None  # mass matrix only: of the origin


_SYM = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))  # the 6 entries of a symmetric 3×3


# ---- forward steps: (parent rows, joint, body) -> (own rows, own terms) -----------------------
# ``general``: the tree has ball, free or fixed joints (a static flag bound by `_chunk`).


def _place(parent_attitude: Quat, joint: Joint, body: Body, keep, general: bool):
    """The segment's attitude, its offset from the parent's origin and (axial trees) its joint
    axis, world frame."""
    Rp, att = keep((soa.qmat(parent_attitude), soa.qmul(parent_attitude, joint.rotation)))
    if general:
        return att, keep(soa.matvec(Rp, joint.translation)), None
    off, axis = keep((soa.matvec(Rp, joint.translation), soa.matvec(Rp, body.axis_in_parent)))
    return att, off, axis


def _relative(w_p: Vec, att: Quat, s_w, joint: Joint, body: Body, general: bool):
    """The joint's relative motion rotated to the world, ``(w, u, ẇ, u̇, ω_p × w, ω_p × u)``
    (`jaxbio.dynamics.kinematics.motion_soa`): ``s q̇`` and ``s q̈`` on the angular (revolute)
    or linear (prismatic) side, sharing one cross product; else ``R`` times the segment-frame
    ``w``, ``u``, ``wd``, ``ud`` of `Joint`. Unused terms cost nothing (XLA drops them)."""
    if not general:
        r = body.revolute
        sqd, sqdd = soa.scale(s_w, joint.qd), soa.scale(s_w, joint.qdd)
        w_x_sqd = soa.cross(w_p, sqd)
        return (
            soa.scale(sqd, r),
            soa.scale(sqd, 1 - r),
            soa.scale(sqdd, r),
            soa.scale(sqdd, 1 - r),
            soa.scale(w_x_sqd, r),
            soa.scale(w_x_sqd, 1 - r),
        )
    R = soa.qmat(att)
    w, u = soa.matvec(R, joint.w), soa.matvec(R, joint.u)
    return w, u, soa.matvec(R, joint.wd), soa.matvec(R, joint.ud), soa.cross(w_p, w), soa.cross(w_p, u)


def _own(general: bool, s_w, att, off, term, **rows) -> Own:
    return Own(term, off, attitude=att, **rows) if general else Own(term, off, axis=s_w, **rows)


def _forward_rnea(parent: Accelerations, joint: Joint, body: Body, keep, general: bool):
    """Motion of the segment, and its own wrench ``m (a_C − g)``, ``I α + ω × I ω + c × f``
    (computed in the segment's frame, less the external wrench)."""
    att, off, s_w = _place(parent.attitude, joint, body, keep, general)
    w_p, al_p, acc_p = parent.angular_velocity, parent.angular_acceleration, parent.acceleration
    w_rel, u_rel, wd_rel, ud_rel, w_x_w, w_x_u = _relative(w_p, att, s_w, joint, body, general)
    w_x_off = soa.cross(w_p, off)
    w = soa.add(w_p, w_rel)
    al = soa.add(al_p, soa.add(wd_rel, w_x_w))
    acc = soa.add(soa.add(acc_p, soa.cross(al_p, off)), soa.cross(w_p, w_x_off))
    acc = soa.add(acc, soa.add(ud_rel, soa.scale(w_x_u, 2.0)))
    new = keep(Accelerations(att, w, al, acc))
    R = soa.qmat(new.attitude)
    wb, alb, accb = keep(
        (
            soa.matvec_t(R, new.angular_velocity),
            soa.matvec_t(R, new.angular_acceleration),
            soa.matvec_t(R, new.acceleration),
        )
    )
    com, inertia = body.com, body.inertia
    w_x_c = soa.cross(wb, com)
    a_com = soa.add(accb, soa.add(soa.cross(alb, com), soa.cross(wb, w_x_c)))
    fb, Iw, Ia = soa.scale(a_com, body.mass), soa.matvec(inertia, wb), soa.matvec(inertia, alb)
    mb = soa.add(soa.add(Ia, soa.cross(wb, Iw)), soa.cross(com, fb))
    f, m = soa.matvec(R, fb), soa.matvec(R, mb)
    if joint.force is not None:
        f, m = soa.sub(f, joint.force), soa.sub(m, joint.moment)
    return new, keep(_own(general, s_w, att, off, Wrench(f, m)))


def _forward_momentum(parent: Velocities, joint: Joint, body: Body, keep, general: bool):
    """Velocity of the segment, and its own momenta ``p = m v_C``, ``h = I ω + c × p`` (about
    the origin; computed in the segment's frame)."""
    att, off, s_w = _place(parent.attitude, joint, body, keep, general)
    w_p = parent.angular_velocity
    w_rel, u_rel, *_ = _relative(w_p, att, s_w, joint, body, general)
    w = soa.add(w_p, w_rel)
    v = soa.add(soa.add(parent.velocity, soa.cross(w_p, off)), u_rel)
    new = keep(Velocities(att, w, v))
    R = soa.qmat(new.attitude)
    wb, vb = keep((soa.matvec_t(R, new.angular_velocity), soa.matvec_t(R, new.velocity)))
    pb = soa.scale(soa.add(vb, soa.cross(wb, body.com)), body.mass)
    hb = soa.add(soa.matvec(body.inertia, wb), soa.cross(body.com, pb))
    momenta = Wrench(soa.matvec(R, pb), soa.matvec(R, hb))
    return new, keep(
        _own(general, s_w, att, off, momenta, angular_velocity=new.angular_velocity, velocity=new.velocity)
    )


def _forward_momentum_placed(parent: Motion, joint: Joint, body: Body, keep, general: bool, placed: Own):
    """`_forward_momentum` on the placements of `_forward_crba` (``placed``: the segment's offset,
    axis or attitude, and own composite ``(m, h = m c, J)`` about its origin, world frame): the
    momenta about the origin are ``P = m v + ω × h`` and ``H = J ω + h × v``, so no attitude,
    rotation matrix or segment-frame term is computed again (`hamiltonian_flow_batch`)."""
    off, w_p = placed.offset, parent.angular_velocity
    w_rel, u_rel, *_ = _relative(w_p, placed.attitude, placed.axis, joint, body, general)
    w = soa.add(w_p, w_rel)
    v = soa.add(soa.add(parent.velocity, soa.cross(w_p, off)), u_rel)
    new = keep(Motion(w, v))
    m, h, J6 = placed.term
    Jm = {(a, b): J6[i] for i, (a, b) in enumerate(_SYM)}
    Jm.update({(b, a): x for (a, b), x in list(Jm.items())})
    Jw = tuple(sum(Jm[a, b] * new.angular_velocity[b] for b in range(3)) for a in range(3))
    P = soa.add(soa.scale(new.velocity, m), soa.cross(new.angular_velocity, h))
    H = soa.add(Jw, soa.cross(h, new.velocity))
    return new, keep(
        _own(
            general,
            placed.axis,
            placed.attitude,
            off,
            Wrench(P, H),
            angular_velocity=new.angular_velocity,
            velocity=new.velocity,
        )
    )


def _forward_crba(parent: Placement, joint: Joint, body: Body, keep, general: bool):
    """Placement of the segment, and its own composite about its origin: ``m``, ``h = m c``,
    ``J = R I Rᵀ + m [c]ᵀ[c]``."""
    att, off, s_w = _place(parent.attitude, joint, body, keep, general)
    new = keep(Placement(att, soa.add(parent.position, off)))
    R = soa.qmat(new.attitude)
    c, mass, inertia = soa.matvec(R, body.com), body.mass, body.inertia
    RI = tuple(sum(R[3 * a + k] * inertia[3 * k + b] for k in range(3)) for a in range(3) for b in range(3))
    IC = tuple(sum(RI[3 * a + k] * R[3 * b + k] for k in range(3)) for a, b in _SYM)
    cc = soa.dot(c, c)
    J = tuple(IC[i] + mass * ((cc if a == b else 0.0) - c[a] * c[b]) for i, (a, b) in enumerate(_SYM))
    own = Composite(mass + jnp.zeros_like(c[0]), soa.scale(c, mass), J)
    return new, keep(_own(general, s_w, att, off, own, position=new.position))


class Moving(NamedTuple):
    """Forward rows of forward kinematics with velocities (world frame)."""

    attitude: Quat
    position: Vec  # of the origin, m
    angular_velocity: Vec  # rad/s
    velocity: Vec  # of the origin, m/s


def _forward_moving(parent: Moving, joint: Joint, body: Body, keep, general: bool):
    """Placement and velocity of the segment; its own rows are those (`pose_rows` with ``qd``)."""
    att, off, s_w = _place(parent.attitude, joint, body, keep, general)
    w_p = parent.angular_velocity
    w_rel, u_rel, *_ = _relative(w_p, att, s_w, joint, body, general)
    new = keep(
        Moving(
            att,
            soa.add(parent.position, off),
            soa.add(w_p, w_rel),
            soa.add(soa.add(parent.velocity, soa.cross(w_p, off)), u_rel),
        )
    )
    return new, new


def _forward_pose(parent: Placement, joint: Joint, body: Body, keep, general: bool):
    """Placement of the segment; its own rows are that placement (`pose_batch`)."""
    att, off, _ = _place(parent.attitude, joint, body, keep, general)
    new = keep(Placement(att, soa.add(parent.position, off)))
    return new, new


# ---- backward steps: (subtree total, own, revolute) -> (what the parent gets, output) ---------
# The output is one number per segment on an axial tree (the joint's), else the two world vectors
# that `_coordinates_out` projects on each coordinate's axis (angular, linear).


def _wrench_to_parent(total: Wrench, own: Own) -> Wrench:
    """The subtree's wrench (or momenta) about the parent's origin."""
    return Wrench(total.force, soa.add(total.moment, soa.cross(own.offset, total.force)))


def _project(angular: Vec, linear: Vec, own: Own, r, general: bool):
    """``s · angular`` (revolute) or ``s · linear`` (prismatic); on a general tree both vectors."""
    if general:
        return angular, linear
    return r * soa.dot(own.axis, angular) + (1 - r) * soa.dot(own.axis, linear)


def _torques_rnea(total: Wrench, own: Own, r, general: bool):
    """Joint torque: ``s · M`` (an angular coordinate) or ``s · F`` (a linear one)."""
    return _wrench_to_parent(total, own), _project(total.moment, total.force, own, r, general)


def _torques_momentum(total: Wrench, own: Own, r, general: bool):
    """``Ṡᵀ h`` (`kinetic_energy_gradient_batch`): ``s · (H × ω + P × v)`` (angular coordinate),
    ``s · (P × ω)`` (linear), with ``ω`` the segment's angular velocity, ``v`` its origin's."""
    P, H, w = total.force, total.moment, own.angular_velocity
    angular = soa.add(soa.cross(H, w), soa.cross(P, own.velocity))
    return _wrench_to_parent(total, own), _project(angular, soa.cross(P, w), own, r, general)


def _composite_to_parent(total: Composite, own: Own, r, general: bool):
    """The subtree's composite moved by ``d`` (the offset) to the parent's origin:
    ``h += m d``, ``J += [d]ᵀ[h] + [h]ᵀ[d] + m [d]ᵀ[d]``; output: the composite itself."""
    m, h, J, d = total.mass, total.first_moment, total.inertia, own.offset
    dh, dd = soa.dot(d, h), soa.dot(d, d)
    J_up = tuple(
        J[i] + (2 * dh + m * dd if a == b else 0.0) - h[a] * d[b] - d[a] * h[b] - m * d[a] * d[b]
        for i, (a, b) in enumerate(_SYM)
    )
    return Composite(m, soa.add(h, soa.scale(d, m)), J_up), total


# ---- the two passes over a schedule ----------------------------------------------------------


def _after(x, dep):
    """``x`` (a pytree) with an exact zero added to each leaf that reads one number of ``dep`` (its
    last leaf), or nothing where that number is not finite: ``x``'s producers then run after
    ``dep``'s (see `_write`). ``dep`` None: ``x``."""
    if dep is None:
        return x
    p = jax.tree_util.tree_leaves(dep)[-1].reshape(-1)[0]
    zero = jnp.where(jnp.isfinite(p), p * 0, 0)
    return tree_map(lambda a: a + zero.astype(jnp.result_type(a)), x)


class _Chained:
    """``keep`` whose every stage reads one number of the stage before (`_after`): the stages of a
    loop body form one chain (see `_write`). ``last``: the latest stage's result."""

    def __init__(self, keep):
        self.keep, self.last = keep, None

    def __call__(self, x):
        self.last = self.keep(_after(x, self.last))
        return self.last


def _write(table, rows, start, after=None):
    """Each leaf of ``rows`` ``(K, C)`` written into its ``table`` leaf at row ``start`` (in place),
    one after the other, the first after ``after`` (a pytree, or None).

    Each write reads one number of the previous write's result (`_after`), so the writes form a
    chain. XLA's CPU runtime runs the thunks of a loop body in order on the calling thread when
    each depends on the one before; otherwise it hands them to its intra-op thread pool, whose
    hand-offs cost more than these small steps (issue #23 item 1). `_scan`'s loop bodies chain
    their stages (`_Chained`), these writes, the scanned outputs' writes and the counter this way;
    measured in benchmarks/README.md, "Chained table writes" and "Every scan step one chain". An
    ``optimization_barrier`` does not do it: XLA removes it before the thunks are built.
    """
    leaves, treedef = jax.tree_util.tree_flatten(table)
    out, prev = [], after
    start = _after(start, after)  # a computed row index is a thunk of its own: in the chain too
    for a, b in zip(leaves, jax.tree_util.tree_leaves(rows)):
        prev = lax.dynamic_update_slice_in_dim(a, _after(b, prev), start, 0)
        out.append(prev)
    return jax.tree_util.tree_unflatten(treedef, out)


def _rows(table, idx):
    return tree_map(lambda x: x[idx], table)


def _concat(parts):
    """Records with the same structure -> one record, leaves concatenated along rows."""
    return tree_map(lambda *x: jnp.concatenate(x, 0), *parts)


def _scan(f, carry, xs, reverse=False):
    """`jax.lax.scan` of ``f(carry, x) -> (carry, y)``, the scanned outputs written by `_write`
    after the carry, and the counter after them: with ``f``'s own chain (`_Chained`, `_write`) the
    loop body's thunks form one chain. One step: ``f`` called directly (no loop; static index
    arrays stay numpy)."""
    length = jax.tree_util.tree_leaves(xs)[0].shape[0]
    if length == 1:
        carry, y = f(carry, tree_map(lambda a: a[0], xs))
        return carry, tree_map(lambda a: a[None], y)
    xs = tree_map(lambda a: jnp.asarray(a) if isinstance(a, np.ndarray) else a, xs)
    if length == 2:
        # two steps (a double pendulum's chain): unrolled, ~30 % faster and a small program (longer
        # schedules gain nothing and compile slower, benchmarks/README.md)
        return lax.scan(f, carry, xs, reverse=reverse, unroll=True)
    # unsigned indices: nothing computes a wrap of negative ones (a thunk outside the chain)
    xs = tree_map(lambda a: a.astype(jnp.uint32) if jnp.issubdtype(a.dtype, jnp.signedinteger) else a, xs)
    ys = jax.eval_shape(lambda c, x: f(c, x)[1], carry, tree_map(lambda a: a[0], xs))
    # the outputs and the counter from the carry, not constants: the state's type inside jax.shard_map
    ys = _after(tree_map(lambda s: jnp.zeros((length,) + s.shape, s.dtype), ys), carry)

    def body(state):
        i, carry, ys = state
        t = length - 1 - i if reverse else i
        carry, y = f(carry, tree_map(lambda a: lax.dynamic_index_in_dim(a, t, 0, keepdims=False), xs))
        ys = _write(ys, tree_map(lambda a: a[None], y), t, after=carry)
        return _after(i + 1, ys), carry, ys

    return lax.while_loop(lambda s: s[0] < length, body, (_after(jnp.zeros((), jnp.uint32), carry), carry, ys))[1:]


def _forward_pass(
    sched: Schedule,
    step: Callable,
    world,
    joint: Joint,
    body: Body,
    keep,
    zero_row,
    placed=None,
    tables: list | None = None,
):
    """Proximal → distal over the phases: ``step(parent rows, joint, body, keep)`` per step, the
    parent rows gathered from a table of the world's and every earlier row. Returns the own
    terms (`Own`, leaves ``(S, K, C)``), one record per phase. ``placed``: the own terms of an
    earlier forward pass over the same schedule, handed to ``step`` as ``placed=`` (its rows of
    the step). ``tables``: a list that gets each phase's table (``E`` rows of earlier phases, then
    ``S·K``), for the adjoint (`jaxbio.dynamics._adjoint`)."""
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
            joint_t, body_t, parent_row, t, *placed_t = x
            extra = {"placed": placed_t[0]} if placed_t else {}
            chained = _Chained(keep)
            new, own_t = step(_rows(table, parent_row), joint_t, body_t, chained, **extra)
            return _write(table, new, E + t * K, after=chained.last), own_t

        by_step = (_rows(joint, ph.members), _rows(body, ph.members), ph.parent_row, np.arange(S))
        if placed is not None:
            by_step += (placed[len(own)],)
        table, ys = _scan(body_fn, table, by_step)
        if tables is not None:
            tables.append(table)
        done.append(tree_map(lambda x: x[E:], table))
        own.append(ys)
    return own


def _backward_pass(sched: Schedule, step: Callable, own: list, revolute, keep, zero_row, totals: bool = False):
    """Distal → proximal over the phases: each slot's total is its own term plus its children's
    (`_add_children`, from a table of later steps' and later phases' transported totals), then
    ``step(total, own, revolute) -> (to the parent, output)``. Returns the outputs, one per phase
    (leaves ``(S, K, C)``); with ``totals`` the totals instead (for the adjoint)."""
    C = zero_row.shape[1]
    outs, ups = [None] * len(own), []  # ups: totals of the later phases, nearest first
    for p in reversed(range(len(own))):
        ph, loc = sched.phases[p], own[p]
        S, K = ph.members.shape
        sums = _later_sums(sched, p, ups, loc.term, zero_row)
        if sums is not None:  # children in later phases: summed into the own term
            loc = loc._replace(term=tree_map(lambda a, b: a + b.reshape(S, K, C), loc.term, sums))

        def body_fn(table, x, K=K):
            own_t, r, kids, t = x
            total = _add_children(own_t.term, table, kids)
            chained = _Chained(keep)
            total = chained(total)
            up, out = step(total, own_t, r)
            return _write(table, up, t * K, after=chained.last), total if totals else out

        table = tree_map(lambda _: jnp.broadcast_to(zero_row, (S * K + 1, C)), loc.term)
        xs = (loc, revolute[ph.members], children_of(ph), np.arange(S))
        table, outs[p] = _scan(body_fn, table, xs, reverse=True)
        ups.insert(0, tree_map(lambda x: x[: S * K], table))
    return outs


def _later_sums(sched: Schedule, p: int, ups: list, like, zero_row):
    """Per row of phase ``p`` ``(S·K, C)``, the sum of the ``ups`` rows (later phases' tables,
    nearest first; leaves like ``like``) of its children in later phases (`Phase.later_children`);
    None when it has none. Rounds as in a step (`children_of`): one gather per round, or for
    more than `_levels.WIDE_ROUNDS` one scatter-add."""
    ph = sched.phases[p]
    if not ph.later_children.shape[0]:
        return None
    S, K = ph.members.shape
    C = zero_row.shape[1]
    later = tree_map(lambda *x: jnp.concatenate((zero_row,) + x, 0), *ups)
    first = int(sched.slot[sched.phases[p + 1].members[0, 0]]) + 1  # global row of ups[0] row 0
    idx = np.where(ph.later_children > 0, ph.later_children - first + 1, 0)
    sums = tree_map(lambda a: jnp.zeros((S * K, C), a.dtype), like)
    if _wide(idx):
        rows, slots = _levels.child_pairs(idx[None], 0)
        return _add_children(sums, later, (rows[0], slots[0]))
    return _add_children(sums, later, idx)


def _wide(rounds: np.ndarray) -> bool:
    """Whether rounds ``(…, R, K)`` are summed by scatter-add (`_levels.WIDE_ROUNDS`)."""
    return rounds.shape[-2] > _levels.WIDE_ROUNDS


def children_of(ph) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """What a step of ``ph`` sums its children by (the scanned input `_add_children` takes):
    `Phase.child_rows` ``(S, R, K)``, or where ``R`` is over `_levels.WIDE_ROUNDS` the pairs
    ``(rows, slots)`` ``(S, N)`` of `_levels.child_pairs`."""
    return _levels.child_pairs(ph.child_rows, ph.members.size) if _wide(ph.child_rows) else ph.child_rows


def _add_children(total, table, children):
    """``total`` (leaves ``(K, C)``) plus each slot's children's rows of ``table`` (its leaves
    ``(rows, C)``). ``children``: rounds ``(R, K)``, the row of each slot's ``r``-th child or a
    zero row (one gather and add per round, in order), or pairs ``(rows (N,), slots (N,))``
    (one gather of the children's rows and one scatter-add; padding reads a zero row)."""
    if isinstance(children, tuple):
        rows, slots = children
        return tree_map(
            lambda a, b: a.at[slots].add(b[rows], indices_are_sorted=True, mode="promise_in_bounds"), total, table
        )
    for k in range(children.shape[0]):  # round k brings each parent its k-th child
        total = tree_map(jnp.add, total, _rows(table, children[k]))
    return total


def _by_segment(sched: Schedule, parts: list, C: int, get: Callable = lambda x: x):
    """``get`` of per-phase outputs ``(S, K, C)`` -> ``(n, C)`` in segment order."""
    return jnp.concatenate([get(x).reshape(-1, C) for x in parts], 0)[sched.slot]


def _segment_rows(sched: Schedule, parts: list, C: int, get: Callable, k: int) -> tuple:
    """``get(part)[c]`` for ``c < k`` (a vector or quaternion field) in segment order, ``(n, C)`` each."""
    return tuple(_by_segment(sched, parts, C, lambda x, c=c: get(x)[c]) for c in range(k))


def _torques_out(tree: SegmentTree, sched: Schedule, outs: list, own: list, C: int, keep):
    """Per-phase joint outputs -> ``(nv, C)`` in coordinate order."""
    if tree.is_axial:
        return _by_segment(sched, outs, C)
    return _coordinates_out(tree, sched, outs, own, C)


def _coordinates_out(tree: SegmentTree, sched: Schedule, outs: list, own: list, C: int):
    """A general tree's outputs ``(angular, linear)`` world vectors per segment -> ``(nv, C)``:
    coordinate ``k`` of segment ``i`` gets ``(R_i e_k) · angular_i`` (an angular coordinate) or
    ``(R_i e_k) · linear_i``, with ``e_k`` its segment-frame axis (`SegmentTree.dof_axes`)."""
    d = tree.dofs
    att = _segment_rows(sched, own, C, lambda o: o.attitude, 4)
    angular = soa.qrot_inv(att, _segment_rows(sched, outs, C, lambda o: o[0], 3))
    linear = soa.qrot_inv(att, _segment_rows(sched, outs, C, lambda o: o[1], 3))
    rot = d.rotational[:, None]
    e = tree.dof_axes().astype(att[0].dtype)
    return sum(e[:, c, None] * jnp.where(rot, angular[c][d.segment], linear[c][d.segment]) for c in range(3))


def _crba_columns(tree: SegmentTree, sched: Schedule, composites: list, own: list, C: int, keep, gravity=None):
    """``M`` ``(nv·nv, C)`` from each subtree's composite ``(m, h, J)`` about its joint centre;
    with ``gravity`` ``(3,)`` m/s² also the gravity forces ``g(q)`` ``(nv, C)`` (see below).

    Coordinate ``i`` (of segment ``σ(i)``, world axis ``s_i``) moving at unit rate moves the
    subtree of ``σ(i)`` rigidly: linear momentum ``s × h`` and angular momentum ``J s`` about
    ``P_σ(i)`` (an angular coordinate), or ``m s`` and ``h × s`` (a linear one). ``M[j, i]`` for
    ``j`` a coordinate that moves ``σ(i)`` is its share of that momentum:
    ``s_j · (L + (P_σ(i) − P_σ(j)) × lin)`` (angular ``j``), ``s_j · lin`` (linear ``j``).

    The same composites hold the subtree's weight: ``g_i = −s · (h × g) = −lin · g`` (angular
    coordinate: the moment about ``P_σ(i)`` that holds the subtree still) or ``−m s · g = −lin · g``
    (linear), what the wrench recursion gives with ``q̇ = q̈ = 0``.
    """
    nv, d = tree.nv, tree.dofs

    def seg(parts, get, k=None):
        if k is not None:
            return _segment_rows(sched, parts, C, get, k)
        return _by_segment(sched, parts, C, get)

    m = seg(composites, lambda c: c.mass)
    h = seg(composites, lambda c: c.first_moment, 3)
    J6 = seg(composites, lambda c: c.inertia, 6)
    pos = seg(own, lambda o: o.position, 3)
    if tree.is_axial:  # coordinate i is segment i's
        s = seg(own, lambda o: o.axis, 3)
    else:  # per coordinate: its segment's rows, and the axis R e_k
        m, h, J6, pos = tree_map(lambda x: x[d.segment], (m, h, J6, pos))
        att = tuple(x[d.segment] for x in seg(own, lambda o: o.attitude, 4))
        e = tree.dof_axes().astype(m.dtype)
        s = soa.qrot(att, tuple(e[:, k, None] for k in range(3)))
    Jm = {(a, b): J6[i] for i, (a, b) in enumerate(_SYM)}
    Jm.update({(b, a): v for (a, b), v in list(Jm.items())})
    rot = d.rotational[:, None]
    lin = soa.where(rot, soa.cross(s, h), soa.scale(s, m))
    L = soa.where(rot, tuple(sum(Jm[a, b] * s[b] for b in range(3)) for a in range(3)), soa.cross(h, s))
    s, pos, lin, L = keep((s, pos, lin, L))  # read by every pair: computed once (6.4 against 9–11 µs/state on the body)
    # pairs (i, j): coordinate j moves coordinate i's segment; within one segment, j ≤ i only
    anc = tree.dof_ancestors[d.segment] & ((d.segment[:, None] != d.segment[None, :]) | np.tri(nv, dtype=bool))
    i_idx, j_idx = np.nonzero(anc)
    dpos = soa.sub(_rows(pos, i_idx), _rows(pos, j_idx))
    moment = soa.add(_rows(L, i_idx), soa.cross(dpos, _rows(lin, i_idx)))
    s_j = _rows(s, j_idx)
    vals = jnp.where(rot[j_idx], soa.dot(s_j, moment), soa.dot(s_j, _rows(lin, i_idx)))
    vals = jnp.concatenate([vals, jnp.zeros_like(vals[:1])], 0)  # last row: zero
    where = np.full((nv, nv), len(i_idx), np.int64)
    where[j_idx, i_idx] = np.arange(len(i_idx))
    where[i_idx, j_idx] = np.arange(len(i_idx))
    M = vals[where.reshape(-1)]
    if gravity is None:
        return M
    return M, -soa.dot(lin, tuple(gravity[k] for k in range(3)))


class _Kernel(NamedTuple):
    """One batched algorithm: the world's forward row, the two steps, the output assembly."""

    world: Callable  # gravity (3,) -> the world's forward row (scalar leaves)
    forward: Callable  # see `_forward_pass`
    backward: Callable  # see `_backward_pass`
    output: Callable  # (tree, schedule, outputs, own, C, keep) -> (width, C)
    square: bool  # output width n·n (else n)


_QUAT_ID = (1.0, 0.0, 0.0, 0.0)
_ZERO = (0.0, 0.0, 0.0)
_RNEA = _Kernel(
    lambda g: Accelerations(_QUAT_ID, _ZERO, _ZERO, (-g[0], -g[1], -g[2])),
    _forward_rnea,
    _torques_rnea,
    _torques_out,
    False,
)
_MOMENTUM = _Kernel(
    lambda g: Velocities(_QUAT_ID, _ZERO, _ZERO), _forward_momentum, _torques_momentum, _torques_out, False
)
_CRBA = _Kernel(lambda g: Placement(_QUAT_ID, _ZERO), _forward_crba, _composite_to_parent, _crba_columns, True)


class _Setup(NamedTuple):
    """What every kernel of a chunk starts from (`_setup`)."""

    joint: Joint
    body: Body
    revolute: jax.Array  # (n, 1)
    keep: Callable
    general: bool
    zero_row: jax.Array  # (1, C)


def _setup(tree: SegmentTree, q, qd, qdd, *, fused: bool) -> _Setup:
    """The joints of a chunk (``q`` ``(nq, C)``, ``qd, qdd`` ``(nv, C)`` or None) and the bodies'
    constants. ``fused``: the CPU tricks (`soa.keep`, vectorised ``sincos``)."""
    keep = (lambda x: soa.keep(x)) if fused else (lambda x: x)
    dt = q.dtype
    zero_row = jnp.zeros_like(q[:1])  # (1, C): the state's type inside jax.shard_map
    general = not tree.is_axial

    def col(a):  # (n, k) constants -> k arrays (n, 1)
        return tuple(a[:, k, None] for k in range(a.shape[1]))

    n = tree.n_segments
    rev = jnp.asarray(tree.is_revolute, dt)[:, None]
    orient, axis = col(tree.unit_orientations.astype(dt)), col(tree.unit_axes.astype(dt))
    body = Body(
        soa.qrot(orient, axis),
        rev,
        col(tree.coms.astype(dt)),
        tree.masses.astype(dt)[:, None],
        col(tree.inertias.astype(dt).reshape(n, 9)),
    )
    if general:
        # the per-state kinematics' joint rows, batch-last (their w × u folded into ud)
        rows = joint_rows(tree, q, qd, qdd, sincos=lambda x: keep(sincos(x) if fused else (jnp.sin(x), jnp.cos(x))))
        joint = Joint(rows.rotation, rows.translation, w=rows.w, u=rows.u, wd=rows.wd, ud=rows.ud)
    else:
        half = 0.5 * q * rev
        s, c = keep(sincos(half) if fused else (jnp.sin(half), jnp.cos(half)))
        joint = Joint(
            rotation=soa.qmul(orient, (c, s * axis[0], s * axis[1], s * axis[2])),
            translation=soa.add(col(tree.origins.astype(dt)), soa.scale(body.axis_in_parent, q * (1 - rev))),
            qd=qd,
            qdd=qdd,
        )
    return _Setup(joint, body, rev, keep, general, zero_row)


def _passes(tree: SegmentTree, kernel: _Kernel, sched: Schedule, setup: _Setup):
    """``kernel``'s forward and backward passes: ``(own, outs)`` per phase."""
    forward, backward = (functools.partial(f, general=setup.general) for f in (kernel.forward, kernel.backward))
    world = kernel.world(tree.gravity.astype(setup.zero_row.dtype))
    own = _forward_pass(sched, forward, world, setup.joint, setup.body, setup.keep, setup.zero_row)
    return own, _backward_pass(sched, backward, own, setup.revolute, setup.keep, setup.zero_row)


def _chunk(tree: SegmentTree, kernel: _Kernel, sched: Schedule, q, qd, qdd, external, *, fused: bool):
    """One chunk: ``q`` ``(nq, C)``, ``qd, qdd`` ``(nv, C)`` (None for the mass matrix);
    ``external``: None or 3-tuples ``(n, C)`` of world-frame forces and moments about each
    segment origin. Returns ``(nv, C)`` (``(nv·nv, C)`` row-major for the mass matrix).
    ``fused``: the CPU tricks (`soa.keep`, vectorised ``sincos``)."""
    setup = _setup(tree, q, qd, qdd, fused=fused)
    if external is not None:
        setup = setup._replace(joint=setup.joint._replace(force=external[0], moment=external[1]))
    own, outs = _passes(tree, kernel, sched, setup)
    return kernel.output(tree, sched, outs, own, q.shape[1], setup.keep)


def _flow_chunk(tree: SegmentTree, sched: Schedule, q, p, added, external, *, fused: bool):
    """`hamiltonian_flow_batch` on one chunk: ``q`` ``(nq, C)``, ``p`` and ``added`` ``(nv, C)``.
    Returns ``(2 nv, C)``: ``q̇`` rows, then ``∂H/∂q`` rows."""
    del external
    nv, C = tree.nv, q.shape[1]
    setup = _setup(tree, q, None, None, fused=fused)
    own, composites = _passes(tree, _CRBA, sched, setup)
    M, grav = _crba_columns(tree, sched, composites, own, C, setup.keep, gravity=tree.gravity.astype(q.dtype))
    M = M.reshape(nv, nv, C) + added[:, None, :] * np.eye(nv, dtype=bool)[:, :, None]
    qd = cholesky_solve(M, p, setup.keep)
    if setup.general:  # the same joint rows with velocities (XLA shares the rotations)
        moving = _setup(tree, q, qd, qd, fused=fused)
    else:
        moving = setup._replace(joint=setup.joint._replace(qd=qd, qdd=qd))
    if all(ph.members.shape[0] <= 2 for ph in sched.phases):
        # unrolled schedules (`_scan`): the momentum passes on the CRBA pass's placements and own
        # composites (`_forward_momentum_placed`). Under a `lax.scan` (longer schedules) handing the
        # placements over as scanned inputs was slower (arm7: 30 -> 51 ms per 20 s simulation,
        # benchmarks/README.md), so those recompute them.
        general = setup.general
        own = _forward_pass(
            sched,
            functools.partial(_forward_momentum_placed, general=general),
            Motion(_ZERO, _ZERO),
            moving.joint,
            moving.body,
            setup.keep,
            setup.zero_row,
            placed=own,
        )
        outs = _backward_pass(
            sched,
            functools.partial(_torques_momentum, general=general),
            own,
            setup.revolute,
            setup.keep,
            setup.zero_row,
        )
    else:
        own, outs = _passes(tree, _MOMENTUM, sched, moving)
    dT = _torques_out(tree, sched, outs, own, C, setup.keep)
    return jnp.concatenate([qd, grav - dT], 0)


def chunked(
    tree: SegmentTree,
    kernel: _Kernel | Callable,
    states: list,
    external: list | None,
    *,
    chunk: int | None,
    layout: str | None,
    schedule: Schedule | None,
    width: int | None = None,
):
    """`_chunk` over the batch: ``states`` ``[q, a, b]`` ``(B, n)`` (None for one not used),
    ``external`` None or ``[forces, moments]`` ``(B, n, 3)``; chunks written in place into the
    ``(B, width)`` result. ``kernel``: a `_Kernel`, or a function ``(tree, schedule, *states,
    external, fused=) -> (width, C)`` of one chunk (any number of states), as `_chunk` (then
    ``width`` is given)."""
    layout = default_layout() if layout is None else layout
    check_choice(layout, LAYOUTS, "layout")
    sched = _levels.schedule(tree.parents) if schedule is None else schedule
    q = states[0]
    B = q.shape[0]
    C = chunk_size(B, layout) if chunk is None else max(1, min(int(chunk), B))
    if isinstance(kernel, _Kernel):
        width = tree.nv**2 if kernel.square else tree.nv

        def run(tree, sched, q, a, b, ext, fused):
            return _chunk(tree, kernel, sched, q, a, b, ext, fused=fused)
    else:
        run = kernel
    if B == 0:  # an empty batch (vmap over 0 states): the empty result, nothing to slice
        return jnp.zeros_like(q[:, :1]) + jnp.zeros((1, width), q.dtype)
    nc = -(-B // C)

    def one(start):
        parts = [None if x is None else lax.dynamic_slice_in_dim(x, start, C, 0).T for x in states]
        ext = None
        if external is not None:  # (C, n, 3) each -> 3-tuples of (n, C)
            ext = tuple(
                tuple(e[:, :, k].T for k in range(3))
                for e in (lax.dynamic_slice_in_dim(x, start, C, 0) for x in external)
            )
        return run(tree, sched, *parts, ext, fused=layout == "cpu").T

    if nc == 1:
        return one(0)

    def body(i, out):
        # every chunk is full: the last one starts at B - C and recomputes a few states of the one
        # before it (same values), so no input or output is padded or copied at full size
        start = jnp.minimum(i * C, B - C)
        return lax.dynamic_update_slice_in_dim(out, one(start), start, 0)

    # from zeros_like(q), not a constant: the state's type inside jax.shard_map
    return lax.fori_loop(0, nc, body, jnp.zeros_like(q[:, :1]) + jnp.zeros((1, width), q.dtype))


def inverse_dynamics_batch(
    tree: SegmentTree,
    q,
    qd,
    qdd,
    external=None,
    *,
    chunk: int | None = None,
    layout: str | None = None,
    schedule: Schedule | None = None,
):
    """``tau`` ``(B, nv)`` for ``q`` ``(B, nq)``, ``qd, qdd`` ``(B, nv)`` (``external``: forces
    and moments ``(B, n_segments, 3)``, world frame, about each segment origin, or None). Same result as `jax.vmap` of the per-state recursion
    to round-off; not differentiable by itself (see `jaxbio.inverse_dynamics`).

    Static keywords (all three kernels): ``chunk`` states per chunk (default: `chunk_size` of the
    layout); ``layout`` ``"cpu"`` (chunks, `soa.keep` fusions, vectorised sin/cos) or
    ``"accelerator"`` (one chunk, plain XLA), default `default_layout`; ``schedule`` a
    `jaxbio.dynamics._levels.schedule` of ``tree.parents`` (default: its default costs).
    """
    ext = None if external is None else [external[0], external[1]]
    return chunked(tree, _RNEA, [q, qd, qdd], ext, chunk=chunk, layout=layout, schedule=schedule)


def kinetic_energy_gradient_batch(
    tree: SegmentTree, q, qd, *, chunk: int | None = None, layout: str | None = None, schedule: Schedule | None = None
):
    """``∂T/∂q`` at fixed ``qd`` ``(B, nv)`` for ``q`` ``(B, nq)``, ``qd`` ``(B, nv)``, by the
    same two passes as the wrench recursion with momenta in place of their rates of change.

    Perturbing joint ``i`` moves its whole subtree rigidly (about the axis ``s_i`` through the
    joint centre, or along it) with every ``qd`` fixed, so only the subtree's kinetic energy
    changes, through the parent's motion seen by it. With ``P_i`` and ``H_i`` the linear and
    angular momentum of the subtree (about the joint centre), ``ω_λ`` the parent's angular velocity
    and ``v_i`` the joint centre's velocity (world frame):

        ∂T/∂q_i = s_i · (H_i × ω_λ + P_i × v_i)      revolute
        ∂T/∂q_i = s_i · (P_i × ω_λ)                  prismatic

    ``(P_i, H_i)`` are summed distal → proximal and moved to the parent's joint centre exactly as
    the wrench ``(F_i, M_i)`` is. (``s_i × ω_λ = s_i × ω_i`` here, so the kernel uses the
    segment's own ``ω_i``.)

    With ball or free joints the same passes give ``Ṁ qd − C qd`` (what
    `jaxbio.dynamics.kinetic_energy_gradient` returns there): coordinate ``k``'s momentum is
    ``p_k = S_kᵀ h`` (``S_k`` its spatial axis, ``h`` its subtree's momentum), and
    ``ṗ_k = S_kᵀ ḣ + Ṡ_kᵀ h`` where ``S_kᵀ ḣ`` is the wrench recursion's torque plus gravity and
    ``Ṡ_k = ν_i × S_k`` (the axis is fixed in the segment, spatial velocity ``ν_i``). Written
    about the segment origin that is ``(R_i e_k) · (H_i × ω_i + P_i × v_i)`` for an angular
    coordinate and ``(R_i e_k) · (P_i × ω_i)`` for a linear one: the formulas above. Same result as ``jax.grad`` of `jaxbio.kinetic_energy` to
    round-off; not differentiable by itself (see `jaxbio.hamiltonian.dH_dq`). Keywords as for
    `inverse_dynamics_batch`.
    """
    return chunked(tree, _MOMENTUM, [q, qd, qd], None, chunk=chunk, layout=layout, schedule=schedule)


def hamiltonian_flow_batch(
    tree: SegmentTree,
    q,
    p,
    added_inertia,
    *,
    chunk: int | None = None,
    layout: str | None = None,
    schedule: Schedule | None = None,
    planar: bool | None = None,
):
    """``(q̇, ∂H/∂q)`` ``(B, nv)`` each for ``q`` ``(B, nq)``, momenta ``p`` ``(B, nv)`` and a
    diagonal ``added_inertia`` ``J`` ``(B, nv)``: what `jaxbio.HamiltonianSystem`'s vector field
    needs of the tree, in one chunk loop.

    Per chunk: the composite-rigid-body passes give ``M(q)`` and, from the same composites, the
    gravity forces ``g(q)`` (`_crba_columns`); ``q̇ = (M + J)⁻¹ p`` by a batch-last Cholesky
    (`jaxbio._linalg.cholesky_solve`, no LAPACK call per state); the momentum passes at ``q̇`` give
    ``∂T/∂q`` (as `kinetic_energy_gradient_batch`, on the CRBA pass's placements), and
    ``∂H/∂q = −∂T/∂q + g`` (`jaxbio.hamiltonian.dH_dq`). A planar tree runs the same formulas in
    2-D algebra (`jaxbio.dynamics.planar_batch`, ``schedule`` unused): one angle per segment, scalar
    cross products and inertias. ``planar``: whether the tree is (`_planar_batch.planar`, given by
    a caller that decided it while the numbers were concrete); None decides here.
    Same result as `jax.vmap` of the per-state route to round-off; not differentiable by itself
    (see `jaxbio.hamiltonian`). Other keywords as for `inverse_dynamics_batch`.
    """

    def run(kernel):
        return chunked(
            tree, kernel, [q, p, added_inertia], None, chunk=chunk, layout=layout, schedule=schedule, width=2 * tree.nv
        )

    # a planar tree: the same flow in 2-D algebra (`_planar_batch`), ~5× cheaper per state. Traced
    # numbers (the model an argument of jit, as in Diffrax's solve): on CPU both kernels, chosen at
    # run time; on an accelerator the general one (a conditional there may cost a host sync per call)
    layout = default_layout() if layout is None else layout
    flat = _planar_batch.planar(tree) if planar is None else planar
    if flat is None and layout == "cpu":
        out = lax.cond(
            _planar_batch.deviation(tree) <= _planar_batch.TOLERANCE,
            lambda: run(_planar_batch.flow_chunk),
            lambda: run(_flow_chunk),
        )
    else:
        out = run(_planar_batch.flow_chunk if flat is True else _flow_chunk)
    return out[:, : tree.nv], out[:, tree.nv :]


def mass_matrix_batch(
    tree: SegmentTree, q, *, chunk: int | None = None, layout: str | None = None, schedule: Schedule | None = None
):
    """``M`` ``(B, nv, nv)`` for ``q`` ``(B, nq)`` by the composite-rigid-body algorithm in the world
    frame: one proximal → distal pass (attitudes and joint centres), one distal → proximal pass
    summing each subtree's mass, first moment ``h`` and inertia ``J`` about its joint centre
    (`_composite_to_parent`), then one entry per pair of a coordinate and one that moves its
    segment (`_crba_columns`). Same result as `jaxbio.mass_matrix` to round-off; not differentiable by
    itself (see `jaxbio.dynamics.mass_matrix`). Keywords as for `inverse_dynamics_batch`.
    """
    out = chunked(tree, _CRBA, [q, None, None], None, chunk=chunk, layout=layout, schedule=schedule)
    return out.reshape(q.shape[0], tree.nv, tree.nv)


def pose_rows(tree: SegmentTree, sched: Schedule, q, qd=None, *, fused: bool):
    """The forward pass of forward kinematics on one chunk ``q`` ``(nq, C)``: ``(attitude,
    position, keep)``, a 4- and a 3-tuple of ``(n, C)`` rows in segment order and the chunk's
    `soa.keep` (what a caller's own chunk function builds on: `jaxbio.muscles._batched_geometry`).
    With ``qd`` ``(nv, C)``: ``(attitude, position, angular velocity, velocity, keep)``."""
    C = q.shape[1]
    setup = _setup(tree, q, qd, qd, fused=fused)  # qdd unused (XLA drops it)
    step, world = (
        (_forward_pose, Placement(_QUAT_ID, _ZERO))
        if qd is None
        else (_forward_moving, Moving(_QUAT_ID, _ZERO, _ZERO, _ZERO))
    )
    own = _forward_pass(
        sched,
        functools.partial(step, general=setup.general),
        world,
        setup.joint,
        setup.body,
        setup.keep,
        setup.zero_row,
    )
    rows = tuple(
        _segment_rows(sched, own, C, lambda o, f=f: getattr(o, f), len(getattr(world, f))) for f in world._fields
    )
    return (*rows, setup.keep)


def _pose_chunk(tree: SegmentTree, sched: Schedule, q, a, b, external, *, fused: bool):
    """`pose_batch` on one chunk: ``q`` ``(nq, C)`` -> ``(7 n, C)``, segment-major: each
    segment's attitude (4 rows), then its position (3)."""
    del a, b, external
    att, pos, _ = pose_rows(tree, sched, q, fused=fused)
    return jnp.stack((*att, *pos), 1).reshape(7 * tree.n_segments, q.shape[1])


def pose_batch(
    tree: SegmentTree, q, *, chunk: int | None = None, layout: str | None = None, schedule: Schedule | None = None
):
    """Forward kinematics of ``q`` ``(B, nq)``: world attitudes ``(B, n, 4)`` and origins
    ``(B, n, 3)`` of every segment, by the forward pass alone with the batch last. Same result as
    `jax.vmap` of `jaxbio.dynamics.kinematics.motion_soa` to round-off; not differentiable by
    itself (see `jaxbio.dynamics.kinematics.segment_motion`). Keywords as for
    `inverse_dynamics_batch`."""
    out = chunked(
        tree,
        _pose_chunk,
        [q, None, None],
        None,
        chunk=chunk,
        layout=layout,
        schedule=schedule,
        width=7 * tree.n_segments,
    ).reshape(q.shape[0], tree.n_segments, 7)
    return out[..., :4], out[..., 4:]


@vmapped_by(pose_batch)
def pose(tree: SegmentTree, q):
    """World ``(attitudes (n, 4), origins (n, 3))`` of every segment for one ``q`` ``(nq,)`` (of
    `jaxbio.dynamics.kinematics.motion_soa`'s dtype); `pose_batch` under `jax.vmap`
    (`vmapped_by`: derivatives are the per-state pass's)."""
    mo = motion_soa(tree, q)
    return soa.join(mo["attitude"]), soa.join(mo["position"])
