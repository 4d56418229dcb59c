"""The Hamiltonian flow of a planar tree, batch-last, in 2-D algebra (what `jax.vmap` of
`jaxbio.HamiltonianSystem`'s vector field runs for a planar tree on the CPU).

A tree whose revolute axes are ``±z``, prismatic axes in the x–y plane, joint orientations about
``z`` and gravity in the x–y plane (`jaxbio.dynamics.absolute`'s planar trees, e.g. the double
pendulum and the sagittal models) moves in the plane: each segment's attitude is one angle, every
cross product one number, every composite inertia about a joint one scalar. The general kernel
(`jaxbio.dynamics.batch_last.hamiltonian_flow_batch`) composes quaternions, forms 3 × 3 rotation
matrices and ``R I Rᵀ`` and carries six inertia entries per composite: ~980 operations per state
for the double pendulum, where these formulas need ~150. Out-of-plane numbers (the z of origins
and COMs, products of inertia with z) do not enter the in-plane dynamics, so the two kernels agree
to round-off (tested).

With ``φ_i`` segment ``i``'s world angle (``φ_λ + β_i + σ_i q_i``, ``λ`` its parent, ``β_i`` the
joint frame's angle, ``σ_i = ±1`` the revolute axis), ``P_i`` its joint centre, ``d_i = P_i − P_λ``,
``r_i = R(φ_i) c_i`` its COM offset, ``s_i`` a prismatic joint's world axis, ``perp(v) = ẑ × v``
and ``v × w`` the scalar ``v_x w_y − v_y w_x``:

- composites about each joint centre, distal → proximal: ``m̄``, ``h̄ = Σ m (C − P)``,
  ``J̄ = Σ I_zz + m |C − P|²`` (moved to the parent: ``h̄ += m̄ d``, ``J̄ += 2 d · h̄ + m̄ |d|²``);
- coordinate ``i`` at unit rate: linear momentum ``lin_i = σ_i perp(h̄_i)`` (revolute) or
  ``m̄_i s_i``; angular ``L_i = σ_i J̄_i`` or ``h̄_i × s_i``; then ``M[j, i] = σ_j (L_i +
  (P_i − P_j) × lin_i)`` (``j`` revolute, moving ``i``) or ``s_j · lin_i``, and the gravity forces
  ``g_i = −lin_i · g`` (the planar forms of `jaxbio.dynamics.batch_last._crba_columns`);
- ``q̇ = (M + J)⁻¹ p`` (`jaxbio._linalg.cholesky_solve`);
- velocities proximal → distal (``ω_i = ω_λ + σ_i q̇_i``, ``v_i = v_λ + ω_λ perp(d_i) + s_i q̇_i``),
  subtree linear momenta ``P̄_i`` distal → proximal, and ``∂T/∂q_i = σ_i P̄_i × v_i`` (revolute) or
  ``ω_i s_i × P̄_i`` (prismatic), the planar forms of `kinetic_energy_gradient_batch`'s
  (the angular-momentum term ``H × ω`` vanishes: both are along ``z``).

The velocity form (`jaxbio.HamiltonianSystem.velocity_field`, what `jaxbio.simulate` integrates
under reverse mode) uses the same placements and ``M``: `_accelerations_factored` gives ``q̈ = (M +
J)⁻¹ (τ − bias)`` and the packed Cholesky factor, the bias by the planar wrench recursion
(`_inverse_dynamics`: accelerations proximal → distal from ``a_0 = −g``, forces and moments about
the joint centres distal → proximal). Both are plain JAX on ``(n, ...)`` arrays, written for one
state: under `jax.vmap` every operation runs on the batch, and reverse mode differentiates
`_inverse_dynamics` by `jax.vjp` (no hand-written adjoint: straight-line scalar code transposes
into the same few fused loops). `jaxbio.dynamics.forward` routes them (``planar=True``, under
`jax.vmap` only).

Which trees: `planar` decides from concrete numbers (static). `jaxbio.simulate` decides before
Diffrax traces the system (`jaxbio.hamiltonian.solver_field`), so its solve compiles one kernel;
for a tree traced by the caller (the system an argument of the caller's `jax.jit`) on CPU,
`hamiltonian_flow_batch` compiles both and a `jax.lax.cond` on `deviation` picks one at run time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from typing import NamedTuple

from jaxbio import _topology
from jaxbio._linalg import cholesky, cholesky_solve, factor_solve
from jaxbio._sincos import sincos
from jaxbio import _soa as soa
from jaxbio.tree import SegmentTree

# how far from exactly planar a concrete tree may be for this kernel (its results then differ
# from the general kernel's by about this much, relative)
TOLERANCE = 1e-12


def deviation(tree: SegmentTree, xp=jnp):
    """How far ``tree`` is from planar (0 when it is): the largest of ``max(|s_x|, |s_y|)`` over
    revolute axes and ``|s_z|`` over prismatic axes (unit axes: the sine of the tilt), the x and y
    parts of the joint orientations (unit quaternions: the sine of half the tilt) and ``|g_z|``
    (m/s²). Each is linear in a small tilt. The planarity check of `jaxbio.dynamics.absolute` and
    this kernel's choice both read it. ``xp``: `numpy` (concrete numbers) or `jax.numpy`."""

    def unit(x):  # rows made unit, zero rows (joints without an axis) kept zero
        norm = xp.linalg.norm(x, axis=1, keepdims=True)
        return xp.where(norm > 0, x / xp.where(norm > 0, norm, 1.0), 0.0)

    axes, orient, g = unit(xp.asarray(tree.axes)), unit(xp.asarray(tree.orientations)), xp.asarray(tree.gravity)
    off = xp.where(xp.asarray(tree.is_revolute), xp.max(xp.abs(axes[:, :2]), axis=1), xp.abs(axes[:, 2]))
    return xp.maximum(xp.maximum(xp.max(off), xp.max(xp.abs(orient[:, 1:3]))), xp.abs(g[2]))


def planar(tree: SegmentTree) -> bool | None:
    """Whether this kernel applies to ``tree`` (static): revolute and prismatic joints only, at least
    two segments, and a `deviation` within `TOLERANCE`. None when the numbers are traced (decide at
    run time with `deviation`, e.g. by `jax.lax.cond`)."""
    if not tree.is_axial or tree.n_segments < 2 or tree.axes.shape != (tree.n_segments, 3):
        return False
    if any(isinstance(x, jax.core.Tracer) for x in (tree.axes, tree.orientations, tree.gravity)):
        return None
    return bool(deviation(tree, np) <= TOLERANCE)


def _rot(c, s, v):
    """``R(φ) v`` for ``cos φ``, ``sin φ`` and a 2-vector ``v``."""
    return (c * v[0] - s * v[1], s * v[0] + c * v[1])


def _cross(a, b):
    return a[0] * b[1] - a[1] * b[0]


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1]


class _Frames(NamedTuple):
    """A planar tree's placements at ``q``: every entry ``(...)`` (one state, or a chunk ``(C,)``)
    unless said otherwise; lists run over segments in index order (parents first)."""

    s: jax.Array  # (n, ...) sin of each segment's world angle
    c: jax.Array  # (n, ...) cos
    d: list  # joint centre offsets P_i − P_λ, 2-tuples
    P: list  # joint centres, 2-tuples
    r: list  # COM offsets R(φ_i) c_i, 2-tuples
    sw: list  # prismatic joints' world axes, 2-tuples (None for revolute)


def _constants(tree: SegmentTree, dt):
    """The tree's planar constants in ``dt``: ``(beta, sign, slide, origin, com, mass, izz, g)``
    (joint frame angles, revolute signs ``σ``, prismatic axes in the parent frame, origins, COMs,
    masses, ``I_zz`` about the COM, gravity)."""
    o = tree.unit_orientations.astype(dt)
    beta = 2.0 * jnp.arctan2(o[:, 3], o[:, 0])  # joint frame's angle in the parent frame
    axes = tree.unit_axes.astype(dt)
    sign = axes[:, 2]
    cb, sb = jnp.cos(beta), jnp.sin(beta)
    slide = [_rot(cb[i], sb[i], (axes[i, 0], axes[i, 1])) for i in range(tree.n_segments)]
    origin, com = tree.origins.astype(dt), tree.coms.astype(dt)
    mass, izz = tree.masses.astype(dt), tree.inertias[:, 2, 2].astype(dt)
    return beta, sign, slide, origin, com, mass, izz, tree.gravity.astype(dt)


def _frames(tree: SegmentTree, q, keep, sin_cos=sincos) -> _Frames:
    """`_Frames` at ``q`` ``(n, ...)``: one ``sin_cos`` for every segment's world angle, then the
    placements; ``keep`` materialises (`flow_chunk`)."""
    n, parents, rev = tree.n_segments, tree.parents, tree.is_revolute
    beta, sign, slide, origin, com, _, _, _ = _constants(tree, q.dtype)
    phi = []
    for i in range(n):
        base = beta[i] + (phi[parents[i]] if parents[i] >= 0 else 0.0)
        phi.append(base + sign[i] * q[i] if rev[i] else base + jnp.zeros_like(q[i]))
    s, c = keep(sin_cos(jnp.stack(phi)))

    def parent_rot(i):
        j = parents[i]
        return (1.0, 0.0) if j < 0 else (c[j], s[j])

    # placements: offsets d_i = P_i − P_λ, joint centres P_i, COM offsets r_i, prismatic world axes
    d, P, r, sw = [], [], [], []
    for i in range(n):
        cp, spn = parent_rot(i)
        local = (origin[i, 0], origin[i, 1])
        if not rev[i]:
            local = (local[0] + slide[i][0] * q[i], local[1] + slide[i][1] * q[i])
            sw.append(_rot(cp, spn, slide[i]))
        else:
            sw.append(None)
        d.append(_rot(cp, spn, local))
        P.append(d[i] if parents[i] < 0 else (P[parents[i]][0] + d[i][0], P[parents[i]][1] + d[i][1]))
        r.append(_rot(c[i], s[i], (com[i, 0], com[i, 1])))
    d, P, r, sw = keep((d, P, r, sw))
    return _Frames(s, c, d, P, r, sw)


def _mass_matrix(tree: SegmentTree, fr: _Frames, added, zero, keep):
    """``(M + diag(added), g, hb, mb)`` of a planar tree at its placements ``fr``: ``M`` an
    ``n × n`` list of lists, the gravity forces ``g`` a list (the planar forms of
    `jaxbio.dynamics.batch_last._crba_columns`, see the module docstring), and the composites'
    ``h̄`` and ``m̄``."""
    n, parents, rev = tree.n_segments, tree.parents, tree.is_revolute
    _, sign, _, _, com, mass, izz, g = _constants(tree, zero.dtype)
    d, P, r, sw = fr.d, fr.P, fr.r, fr.sw
    # composites about each joint centre, distal → proximal
    children = _topology.children(parents)
    mb = [None] * n
    hb = [None] * n
    Jb = [None] * n
    for i in reversed(range(n)):
        m_i, h_i = mass[i], (mass[i] * r[i][0], mass[i] * r[i][1])
        J_i = izz[i] + mass[i] * (com[i, 0] ** 2 + com[i, 1] ** 2)
        for k in children[i]:
            dk = d[k]
            J_i = J_i + Jb[k] + 2.0 * _dot(dk, hb[k]) + mb[k] * _dot(dk, dk)
            h_i = (h_i[0] + hb[k][0] + mb[k] * dk[0], h_i[1] + hb[k][1] + mb[k] * dk[1])
            m_i = m_i + mb[k]
        mb[i], hb[i], Jb[i] = m_i, h_i, J_i
    hb, Jb = keep((hb, Jb))

    # columns of M and the gravity forces
    lin, L = [], []
    for i in range(n):
        if rev[i]:
            lin.append((-sign[i] * hb[i][1], sign[i] * hb[i][0]))
            L.append(sign[i] * Jb[i])
        else:
            lin.append((mb[i] * sw[i][0], mb[i] * sw[i][1]))
            L.append(_cross(hb[i], sw[i]))
    grav = [-(lin[i][0] * g[0] + lin[i][1] * g[1]) for i in range(n)]
    M = [[zero] * n for _ in range(n)]
    for i in range(n):
        j = i
        while j >= 0:
            if rev[j]:
                dij = (P[i][0] - P[j][0], P[i][1] - P[j][1])
                v = sign[j] * (L[i] + _cross(dij, lin[i]))
            else:
                v = _dot(sw[j], lin[i])
            M[i][j] = M[j][i] = v
            j = parents[j]
    for i in range(n):
        M[i][i] = M[i][i] + added[i]
    M, grav = keep((M, grav))
    return M, grav, hb, mb


def flow_chunk(tree: SegmentTree, sched, q, p, added, external, *, fused: bool):
    """``(q̇, ∂H/∂q)`` of a planar tree on one chunk, as `jaxbio.dynamics.batch_last._flow_chunk`:
    ``q`` ``(n, C)``, ``p`` and ``added`` ``(n, C)``; returns ``(2 n, C)``. ``sched`` and
    ``external`` are unused (the segments are visited in index order: parents first)."""
    del sched, external
    zero = jnp.zeros_like(q[0])

    def keep(x):  # every leaf (C,), materialised by one loop on CPU (`jaxbio._soa.keep`)
        x = jax.tree_util.tree_map(lambda a: a + zero, x)
        return soa.keep(x) if fused else x

    n, parents, rev = tree.n_segments, tree.parents, tree.is_revolute
    _, sign, _, _, _, mass, _, _ = _constants(tree, q.dtype)
    fr = _frames(tree, q, keep)
    d, r, sw = fr.d, fr.r, fr.sw
    children = _topology.children(parents)
    M, grav, _, _ = _mass_matrix(tree, fr, added, zero, keep)
    qd = cholesky_solve(jnp.stack([jnp.stack(row) for row in M]), p, soa.keep if fused else (lambda x: x))

    # velocities proximal → distal, subtree linear momenta distal → proximal, ∂T/∂q
    w, v, mom = [], [], []
    for i in range(n):
        j = parents[i]
        w_p, v_p = (zero, (zero, zero)) if j < 0 else (w[j], v[j])
        vi = (v_p[0] - w_p * d[i][1], v_p[1] + w_p * d[i][0])
        if rev[i]:
            wi = w_p + sign[i] * qd[i]
        else:
            wi = w_p
            vi = (vi[0] + sw[i][0] * qd[i], vi[1] + sw[i][1] * qd[i])
        w.append(wi)
        v.append(vi)
        mom.append((mass[i] * (vi[0] - wi * r[i][1]), mass[i] * (vi[1] + wi * r[i][0])))
    w, v, mom = keep((w, v, mom))
    Pb = [None] * n
    for i in reversed(range(n)):
        tot = mom[i]
        for k in children[i]:
            tot = (tot[0] + Pb[k][0], tot[1] + Pb[k][1])
        Pb[i] = tot
    dT = [sign[i] * _cross(Pb[i], v[i]) if rev[i] else w[i] * _cross(sw[i], Pb[i]) for i in range(n)]
    return jnp.concatenate([qd, jnp.stack([grav[i] - dT[i] for i in range(n)])], 0)


# ---- the velocity form: inverse dynamics and forward dynamics in 2-D algebra --------------------


@jax.custom_jvp
def _sincos(x):
    """`jaxbio._sincos.sincos` with the derivative ``(cos x, −sin x) dx`` from its own values (the
    reverse pass of the velocity form differentiates the placements)."""
    return sincos(x)


@_sincos.defjvp
def _sincos_jvp(primals, tangents):
    s, c = sincos(primals[0])
    return (s, c), (c * tangents[0], -s * tangents[0])


def _identity(x):
    return x


def _rnea(tree: SegmentTree, fr: _Frames, qd, qdd):
    """The wrench recursion of a planar tree at its placements ``fr``: ``tau`` ``(n, ...)``.

    World frame, about each joint centre: proximal → distal ``ω_i = ω_λ + σ_i q̇_i``, ``α_i = α_λ +
    σ_i q̈_i`` (revolute; a prismatic joint keeps its parent's), the joint centre's velocity ``v_i
    = v_λ + ω_λ perp(d_i)`` (``+ s_i q̇_i``) and acceleration ``a_i = a_λ + α_λ perp(d_i) − ω_λ²
    d_i`` (``+ s_i q̈_i + 2 ω_λ perp(s_i) q̇_i``), from ``a_0 = −g``; each segment's own force
    ``f_i = m_i (a_i + α_i perp(r_i) − ω_i² r_i)`` and moment ``n_i = I_zz,i α_i + r_i × f_i``;
    distal → proximal ``F_i = f_i + Σ F_k``, ``N_i = n_i + Σ (N_k + d_k × F_k)``; ``tau_i = σ_i
    N_i`` (revolute) or ``s_i · F_i`` (prismatic)."""
    n, parents, rev = tree.n_segments, tree.parents, tree.is_revolute
    _, sign, _, _, _, mass, izz, g = _constants(tree, qd.dtype)
    zero = jnp.zeros_like(qd[0])
    d, r, sw = fr.d, fr.r, fr.sw
    w, al, a, f, own = [], [], [], [], []
    for i in range(n):
        j = parents[i]
        if j < 0:
            w_p, al_p, a_p = zero, zero, (-g[0] + zero, -g[1] + zero)
        else:
            w_p, al_p, a_p = w[j], al[j], a[j]
        ai = (a_p[0] - al_p * d[i][1] - w_p * w_p * d[i][0], a_p[1] + al_p * d[i][0] - w_p * w_p * d[i][1])
        if rev[i]:
            wi, ali = w_p + sign[i] * qd[i], al_p + sign[i] * qdd[i]
        else:
            s_i = sw[i]
            wi, ali = w_p, al_p
            ai = (
                ai[0] + s_i[0] * qdd[i] - 2.0 * w_p * s_i[1] * qd[i],
                ai[1] + s_i[1] * qdd[i] + 2.0 * w_p * s_i[0] * qd[i],
            )
        w.append(wi)
        al.append(ali)
        a.append(ai)
        ac = (ai[0] - ali * r[i][1] - wi * wi * r[i][0], ai[1] + ali * r[i][0] - wi * wi * r[i][1])
        fi = (mass[i] * ac[0], mass[i] * ac[1])
        f.append(fi)
        own.append(izz[i] * ali + _cross(r[i], fi))
    children = _topology.children(parents)
    F, N = [None] * n, [None] * n
    for i in reversed(range(n)):
        Fi, Ni = f[i], own[i]
        for k in children[i]:
            Fi = (Fi[0] + F[k][0], Fi[1] + F[k][1])
            Ni = Ni + N[k] + _cross(d[k], F[k])
        F[i], N[i] = Fi, Ni
    return jnp.stack([sign[i] * N[i] if rev[i] else _dot(sw[i], F[i]) for i in range(n)])


def _inverse_dynamics(tree: SegmentTree, q, qd, qdd):
    """``tau`` ``(n, ...)`` N·m / N of a planar tree (`planar`) at ``q``, ``qd``, ``qdd`` ``(n,
    ...)``: one state, or under `jax.vmap` (each operation then runs on the batch). The same
    numbers as `jaxbio.inverse_dynamics` to round-off (no external loads); differentiable (plain
    JAX, ``sin``/``cos`` with their own derivative). The recursion: `_rnea`."""
    return _rnea(tree, _frames(tree, q, _identity, _sincos), qd, qdd)


def _accelerations_factored(tree: SegmentTree, q, qd, tau, added):
    """``(qdd, L)`` of a planar tree: ``qdd = (M + diag(added))⁻¹ (tau − bias)`` ``(n, ...)``, the
    bias `_inverse_dynamics` at ``qdd = 0``, and ``L`` the packed Cholesky factor of ``M + diag(added)``
    (`jaxbio._linalg.cholesky`, ``(n(n+1)/2, ...)``), from one set of placements; ``q``, ``qd``,
    ``tau``, ``added`` ``(n, ...)``. The velocity form's field (`jaxbio.dynamics.forward`'s
    ``planar=True``); not differentiated by itself (the derivatives are `jaxbio.dynamics.forward`'s
    rule)."""
    zero = jnp.zeros_like(q[0])
    fr = _frames(tree, q, _identity, _sincos)
    M, _, _, _ = _mass_matrix(tree, fr, added, zero, _identity)
    L = cholesky(jnp.stack([jnp.stack(row) for row in M]))
    return factor_solve(L, tau - _rnea(tree, fr, qd, jnp.zeros_like(qd))), L
