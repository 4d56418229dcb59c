"""Constrained dynamics of planar trees: joint reactions three ways and the support phase
(Blajer, Dziewiecki & Mazur 2007, §3; generic: any planar `SegmentTree` with `Contact` s).

All three schemes return the same quantity: for every joint ``i`` (= segment ``i``) the planar
wrench ``(Fx, Fy, Mz)`` that segment ``i`` receives from its parent through its joint, world
frame, the moment about the joint centre (the segment's origin). This is the in-plane part of
`jaxbio.segment_wrenches` (forces ``[:, :2]``, moments ``[:, 2]``); ``Mz`` of a revolute joint is
its net joint moment (± the joint torque, by the axis sign), ``(Fx, Fy)`` its joint reaction force.

(a) `reactions_recursion` — d'Alembert's method: from the measured/computed ``q, q̇, q̈`` and the
    external (ground) forces, the distal → proximal Newton–Euler recursion (`jb.segment_wrenches`,
    Du 2021, eq. 2; Blajer et al. 2007, §3 first scheme). Needs no joint torques.
(b) `reactions_lagrange` — Lagrange multipliers in absolute coordinates (eq. 10):
    ``λ = (C M⁻¹ Cᵀ)⁻¹ (C M⁻¹ (f_g + B u + f_ext) − γ_C)`` for all ``l = 2N`` joint constraint rows
    (`jaxbio.dynamics.absolute`), plus the rows of ground `Contact` s, whose multipliers are the
    ground reactions. Needs ``q, q̇, u`` but no ``q̈`` (it is a forward-dynamics solve). When a
    body is massless (the virtual base links of ``sagittal11``) or a point mass (``I_zz = 0``),
    ``M`` is singular and the same ``λ`` is computed with ``M̃ = M + α CᵀC`` in place of ``M`` and
    ``f + α Cᵀγ_C`` in place of ``f`` (a dense ``3N × 3N`` Cholesky; see `reactions_lagrange`).
(c) `reactions_augmented` — the augmented joint-coordinate method (eqs. 11–16):
    ``λ* = Eᵀ [f_g + B u + f_ext − M (D q̈ + γ)]``, with ``E`` of eq. 13 for the chosen joints only.
    No matrix is inverted. Needs ``q, q̇, q̈, u`` and the external (ground) forces.

Sign convention of the multipliers (eq. 10, eq. 16): the constraint rows of joint ``i`` are
``Φ_i = P_i − A_i`` (child's joint centre minus the parent's; `jaxbio.dynamics.absolute`), the
child receives ``−C_childᵀ λ``; hence the constraint force on the child is ``−λ_i``, and the
returned wrench is ``F = −λ_i``, ``Mz = ±u_i`` (revolute) or ``F = u_i s_i − λ_i,1 n_i``,
``Mz = −λ_i,2`` (prismatic: slide axis ``s_i``, ``n_i = ẑ × s_i``). ``λ`` of (b) and ``λ*`` of (c)
are the same numbers (the tests check it). The ground reaction of a `Contact` is returned as
``(Fx, Fy, Mz)`` on the segment, the moment about the contact point (zero for a pin).

Support phase. Ground contacts enter (b) as extra constraints (``contacts=``; the multipliers
are the ground reactions) and (a), (c) as given external forces (``external=``, e.g. measured
force-plate data or the output of `constrained_forward_dynamics`, converted by
`jaxbio.dynamics.contact_external`). (b) also accepts ``external=`` (given ground forces, no contact rows).
`constrained_forward_dynamics` solves the joint-coordinate system with the contact constraints
for ``q̈`` and the ground reactions (Blajer part I eq. 16 projected with Lagrange multipliers).

Cost and when to use which. Measured with `benchmarks/reactions.py` on sagittal11 (11 segments;
the times per frame and their ratios to the recursion: benchmarks/README.md, "Measurements behind design choices"):

| scheme | work per frame | cost |
|---|---|---|
| (a) recursion | O(N): one kinematic pass and one wrench pass (level scans) | the reference |
| (b) Lagrange, flight | ``C`` ``(l × 3N)`` from analytic 2×3 blocks, ``C M⁻¹ Cᵀ`` (l²·3N), Cholesky l³/3 with ``l = 2N = 22`` | a few times (a) |
| (b) Lagrange, support (weld + pin, ``l = 27``) | the same with the contact rows | several times (a) |
| (b) with a massless body (``M̃``), flight / support | plus ``M̃ = M + α CᵀC``, its Cholesky (3N)³/3 and ``M̃⁻¹ Cᵀ`` | about twice the rows above |
| (c) augmented, all joints | O(N): one kinematic pass (level scan: p, ṗ, p̈ = D q̈ + γ) + ``Eᵀ w`` ``(2N × 3N)`` | about (a) |
| (c) augmented, hip + knee + ankle | the same with ``l* = 6`` columns of ``E`` | below (a) |

(The support-phase ``q̈`` itself, `constrained_forward_dynamics`, costs ``M``, its Cholesky, the
bias recursion and a ``lc × lc`` solve.) The (b) rows above were measured when the virtual base
links of ``sagittal11`` carried 0.1 g each (every body massive: ``M⁻¹`` diagonal); since they are
massless, (b) on ``sagittal11`` takes the ``M̃`` form, about twice the time of the diagonal form.

Use (a) for inverse dynamics of measured motion: simple, O(N), and it gives the joint moments too.
Use (c) when ``u`` is known and only a few joints matter (``joints=``): it is then the cheapest,
needs no solve, and separates the constraint reaction from the actuation (with muscle forces in
``B u`` the joint loads differ from the net-moment ones — the paper's closing remark; muscle forces
enter as ``external`` force pairs plus the remaining ``tau``, built by
`jaxbio.estimation.actuation_loads` and evaluated by `jaxbio.estimation.joint_reactions`). Use (b)
when ``q̈`` is *not* known (forward simulation: reactions from ``q, q̇, u`` alone) or when the
ground reactions must come out of the same solve; it is several times dearer (twice that again
with a massless body) and needs a non-singular constraint set (checked: contacts redundant by structure
raise `ValueError` before tracing; a numerically singular set, e.g. two pins that coincide at a
joint or both feet welded with coincident straight legs, raises at run time — never a
least-squares answer).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio._linalg import spd_solve
from jaxbio.dynamics._checks import as_external, as_state, finite
from jaxbio.dynamics._mass_matrix import mass_matrix
from jaxbio.dynamics._rnea import rnea
from jaxbio.dynamics import absolute as ab
from jaxbio.dynamics.contact import Contact, check_contacts, contact_terms, contact_wrenches
from jaxbio.tree import SegmentTree

__all__ = [
    "reactions_recursion",
    "reactions_lagrange",
    "reactions_augmented",
    "lagrange_multipliers",
    "augmented_multipliers",
    "constrained_forward_dynamics",
    "planar_wrenches",
]

External = tuple[Float[ArrayLike, "n 3"], Float[ArrayLike, "n 3"]] | None

_jit = functools.partial(jax.jit, static_argnames=("check",))
_jit_rcond = functools.partial(jax.jit, static_argnames=("rcond", "check"))
_jit_joints = functools.partial(jax.jit, static_argnames=("joints", "check"))


# ---- helpers ----------------------------------------------------------------------------------


def planar_wrenches(forces: Float[ArrayLike, "n 3"], moments: Float[ArrayLike, "n 3"]) -> Float[Array, "n 3"]:
    """``(Fx, Fy, Mz)`` ``(n, 3)`` from 3D world-frame ``forces`` and ``moments`` ``(n, 3)`` (e.g. the
    output of `jaxbio.segment_wrenches`)."""
    forces, moments = jnp.asarray(forces), jnp.asarray(moments)
    return jnp.stack([forces[..., 0], forces[..., 1], moments[..., 2]], axis=-1)


def _joint_indices(tree: SegmentTree, joints) -> np.ndarray:
    if joints is None:
        return np.arange(tree.nq, dtype=np.int32)
    if isinstance(joints, str):
        joints = (joints,)
    idx = [tree.index(j) if isinstance(j, str) else int(j) for j in joints]
    for j, i in zip(joints, idx):
        if not 0 <= i < tree.nq:
            raise ValueError(f"joint {j!r}: index out of range for model {tree.name!r} ({tree.nq} joints)")
    if len(set(idx)) != len(idx):
        raise ValueError(f"joints {tuple(joints)!r} lists a joint twice")
    return np.asarray(idx, dtype=np.int32)


def _wrenches_from_multipliers(pp: ab.PlanarParams, p, lam, u, idx):
    """Joint wrenches ``(m, 3)`` of joints ``idx`` from their multipliers ``lam`` ``(m, 2)`` and
    the joint torques/forces ``u`` ``(n,)`` (module docstring)."""
    _, _, _, _, s = ab._joint_geometry(pp, p)
    s = s[idx]
    nvec = ab._perp(s)
    ui = u[idx]
    rev = jnp.asarray(pp.revolute[idx])
    f_rev, m_rev = -lam, pp.sign[idx] * ui
    f_pri = ui[:, None] * s - lam[:, :1] * nvec
    m_pri = -lam[:, 1]
    f = jnp.where(rev[:, None], f_rev, f_pri)
    m = jnp.where(rev, m_rev, m_pri)
    return jnp.concatenate([f, m[:, None]], axis=-1)


def _external_generalized(pp: ab.PlanarParams, p, external):
    """``f_ext`` ``(3N,)`` from world-frame ``(forces, moments about the segment origins)``."""
    if external is None:
        return jnp.zeros_like(p)
    r, th = ab._bodies(p)
    origin = r - ab._rot(th, pp.com)
    F = external[0][:, :2]
    M = external[1][:, 2] + ab._cross2(origin - r, F)
    return jnp.concatenate([F, M[:, None]], axis=-1).reshape(-1)


def _default_rcond(dtype) -> float:
    return float(np.sqrt(np.finfo(dtype).eps))


_CONSTRAINTS_SINGULAR = (
    "the constraint matrix is singular or too ill-conditioned (smallest equilibrated Cholesky "
    "pivot below rcond={rcond:g}): the constraints are redundant in this configuration, so "
    "the multipliers are not unique"
)


_MASS_SINGULAR = (
    "the augmented mass matrix M + α CᵀC is singular or too ill-conditioned (smallest equilibrated "
    "Cholesky pivot below rcond={rcond:g}): the mass matrix is singular in this configuration "
    "(a motion allowed by the joints and contacts moves no mass or inertia in this pose)"
)


def _spd_solve(A, b, rcond: float, what: str, message: str = _CONSTRAINTS_SINGULAR):
    """Solve ``A x = b`` (``b`` a vector or a matrix of columns) for a symmetric positive-definite
    ``A`` by Cholesky of its equilibrated form ``S = A / (d dᵀ)``, ``d = √diag(A)``; raises at run
    time (`equinox.error_if`) if a pivot of ``S`` falls below ``rcond`` or is not finite: a singular
    or numerically singular matrix (by default: constraint set) is reported, never solved in the
    least-squares sense."""
    d = jnp.sqrt(jnp.diag(A))
    S = A / (d[:, None] * d[None, :])
    L = jnp.linalg.cholesky(S)
    piv = jnp.diag(L) ** 2
    bad = ~jnp.all(jnp.isfinite(L)) | (jnp.min(piv) < rcond)
    L = eqx.error_if(L, bad, f"{what}: " + message.format(rcond=rcond))
    scale = d if b.ndim == 1 else d[:, None]
    return jsl.cho_solve((L, True), b / scale) / scale


def _state(tree, x, name, check):
    return as_state(tree, x, name, check)


# ---- (a) d'Alembert recursion ------------------------------------------------------------------


@_jit
def reactions_recursion(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    external: External = None,
    *,
    check: bool = False,
) -> Float[Array, "n 3"]:
    """Joint wrenches by d'Alembert's recursion (Blajer et al. 2007, §3, first scheme; Du 2021, eq. 2).

    Args:
        tree: a planar model (e.g. ``jb.load_model("sagittal11")``).
        q, qd, qdd: ``(n,)`` rad / m, joint coordinates, velocities, accelerations.
        external: optional ``(forces, moments)``, each ``(n, 3)``, world frame, moments about each
            segment's origin (ground reactions: `jaxbio.dynamics.contact_external`).
        check: NaN/inf in the inputs or result raise at run time.

    Returns:
        ``(n, 3)``: ``(Fx, Fy)`` N and ``Mz`` N·m about the joint centre, world frame, on each
        segment from its parent (the in-plane part of `jaxbio.segment_wrenches`).
    """
    q, qd, qdd = (_state(tree, x, k, check) for x, k in ((q, "q"), (qd, "qd"), (qdd, "qdd")))
    external = as_external(tree, external, check)
    _, forces, moments = rnea(tree, q, qd, qdd, external)
    out = planar_wrenches(forces, moments)
    return finite(out, "reactions_recursion result") if check else out


# ---- (b) Lagrange multipliers in absolute coordinates --------------------------------------------


def _lagrange(tree, q, qd, tau, contacts, external, rcond, check):
    q, qd, tau = (_state(tree, x, k, check) for x, k in ((q, "q"), (qd, "qd"), (tau, "tau")))
    external = as_external(tree, external, check)
    pp = ab.planar_params(tree)
    p, pd, _ = ab.absolute_motion(tree, q, qd, pp=pp)
    C, gamma = ab.constraint_jacobian(tree, p, pd, contacts, pp=pp)
    m = ab.mass_diagonal(tree, pp=pp)
    f = ab.gravity_vector(tree, pp=pp) + ab._actuation_forces(tree, pp, p, tau) + _external_generalized(pp, p, external)
    rcond = _default_rcond(C.dtype) if rcond is None else rcond

    def diagonal(_):
        """Eq. 10 as printed: every body has mass and a moment of inertia, ``M⁻¹`` is diagonal."""
        minv = 1.0 / m
        return (C * minv[None, :]) @ C.T, C @ (minv * f) - gamma

    def augmented(_):
        """A massless body (a virtual link, mass 0) or a point mass (``I_zz = 0``): ``M`` is
        singular, so eq. 10 is applied to ``M̃ = M + α CᵀC`` and ``f̃ = f + α Cᵀγ_C`` instead,
        which adds ``α Cᵀ(C p̈ − γ_C) = 0`` to the equations of motion and leaves ``λ`` unchanged.
        ``M̃`` is positive-definite exactly when every motion allowed by the joints and contacts
        moves some mass or inertia; ``α`` is the mean body mass (kg)."""
        alpha = jnp.mean(pp.mass)
        X = _spd_solve(jnp.diag(m) + alpha * C.T @ C, C.T, rcond, "reactions_lagrange", _MASS_SINGULAR)  # M̃⁻¹ Cᵀ
        return C @ X, X.T @ (f + alpha * C.T @ gamma) - gamma

    A, rhs = jax.lax.cond(jnp.all(m > 0), diagonal, augmented, None)
    lam = _spd_solve(A, rhs, rcond, "reactions_lagrange")
    return (finite(lam, "lagrange multipliers") if check else lam), pp, p, tau


@_jit_rcond
def lagrange_multipliers(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    tau: Float[ArrayLike, " n"],
    contacts: Sequence[Contact] = (),
    external: External = None,
    *,
    rcond: float | None = None,
    check: bool = False,
) -> Float[Array, " l"]:
    """Blajer eq. 10: ``λ = (C M⁻¹ Cᵀ)⁻¹ (C M⁻¹ (f_g + B u + f_ext) − γ_C)``, ``(2n + lc,)``.

    Rows: two per joint (segment order, `jaxbio.dynamics.absolute.joint_constraints`), then the
    contact rows (x, y [, θ] per contact). ``C``, ``γ_C``, ``M``, ``f_g``, ``B`` as in
    `jaxbio.dynamics.absolute`; ``u = tau``. ``C M⁻¹ Cᵀ`` is solved by a Cholesky factorisation of
    its equilibrated form (unit diagonal), checked as described in `reactions_lagrange` (which also
    says how a massless body or point mass, where ``M`` is singular, is handled).
    Arguments as in `reactions_lagrange`.
    """
    contacts = check_contacts(tree, contacts)
    return _lagrange(tree, q, qd, tau, contacts, external, rcond, check)[0]


@_jit_rcond
def reactions_lagrange(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    tau: Float[ArrayLike, " n"],
    contacts: Sequence[Contact] = (),
    external: External = None,
    *,
    rcond: float | None = None,
    check: bool = False,
) -> tuple[Float[Array, "n 3"], Float[Array, "k 3"]]:
    """Joint wrenches from the Lagrange multipliers of the absolute-coordinate model (eq. 10).

    Eq. 10 inverts the diagonal ``M = diag(m, m, I_zz)``. A massless segment (mass 0, e.g. the
    virtual base links ``base_x``, ``base_y`` of ``sagittal11``) or a point mass (``I_zz = 0``)
    makes ``M`` singular; then the equations of motion ``M p̈ + Cᵀλ = f``, ``C p̈ = γ_C`` are
    solved in the equivalent form ``M̃ p̈ + Cᵀλ = f + α Cᵀγ_C`` with ``M̃ = M + α CᵀC`` (the
    constraint rows added ``α`` times, ``α`` = the mean body mass), so the same formula gives the
    same ``λ`` with ``M̃⁻¹`` (a Cholesky of the dense ``3N × 3N`` ``M̃``, about twice the cost).
    ``M̃`` is positive-definite when the joint-space mass matrix is. The choice is made at run
    time (`jax.lax.cond` on the masses and ``I_zz``), so one compiled function serves both.

    Args:
        tree: a planar model.
        q, qd: ``(n,)`` joint coordinates (rad / m) and velocities — no accelerations needed.
        tau: ``(n,)`` N·m / N, joint torques/forces ``u`` (as in `jaxbio.forward_dynamics`; zero on
            the unactuated floating-base coordinates for a physical motion).
        contacts: ground `Contact` s (static structure); their multipliers are the ground reactions.
        external: optional given external wrenches (as in `reactions_recursion`).
        rcond: threshold on the smallest pivot of the Cholesky factor of the equilibrated
            ``C M⁻¹ Cᵀ`` (unit diagonal; default √eps of the dtype, 1.5e-8 in float64); below it,
            or non-finite, raises at run time (`equinox.error_if`). With a massless body or a
            point mass the same threshold applies to ``M̃ = M + α CᵀC`` (``α`` the mean body mass;
            below it: the mass matrix is singular in this configuration) and to ``C M̃⁻¹ Cᵀ``. For
            ``sagittal11`` (massless base links) the smallest pivots are about 0.02 (``M̃``) and
            0.95 (``C M̃⁻¹ Cᵀ``) without contacts, 0.2–0.5 with the right foot welded and the left
            toe tip pinned.
        check: NaN/inf in inputs or results raise at run time.

    Returns:
        ``joints`` ``(n, 3)`` (as `reactions_recursion`) and ``contacts`` ``(k, 3)``: the ground
        reaction on each contact's segment, ``(Fx, Fy)`` N and ``Mz`` N·m about the contact point.

    Raises:
        ValueError (before tracing): a contact on an unknown segment, more constraint rows than
        degrees of freedom, or contacts that are redundant in every configuration.
    """
    contacts = check_contacts(tree, contacts)
    lam, pp, p, tau = _lagrange(tree, q, qd, tau, contacts, external, rcond, check)
    n = tree.nq
    joints = _wrenches_from_multipliers(pp, p, lam[: 2 * n].reshape(n, 2), tau, np.arange(n))
    ground = contact_wrenches(-lam[2 * n :], contacts)  # the ground pushes against the multipliers
    return joints, ground


# ---- (c) augmented joint-coordinate method ---------------------------------------------------------


def _augmented(tree, q, qd, qdd, tau, external, idx, check):
    q, qd, qdd, tau = (_state(tree, x, k, check) for x, k in ((q, "q"), (qd, "qd"), (qdd, "qdd"), (tau, "tau")))
    external = as_external(tree, external, check)
    pp = ab.planar_params(tree)
    p, _, pdd = ab.absolute_motion(tree, q, qd, qdd, pp=pp)  # p̈ = D q̈ + γ, eq. 9
    E = ab._open_constraint_matrix(tree, pp, p, tuple(int(i) for i in idx))  # (3N, 2m), eq. 13
    f = ab.gravity_vector(tree, pp=pp) + ab._actuation_forces(tree, pp, p, tau) + _external_generalized(pp, p, external)
    lam = (E.T @ (f - ab.mass_diagonal(tree, pp=pp) * pdd)).reshape(len(idx), 2)  # eq. 16
    return (finite(lam, "augmented multipliers") if check else lam), pp, p, tau


@_jit_joints
def augmented_multipliers(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    tau: Float[ArrayLike, " n"],
    external: External = None,
    *,
    joints: Sequence[str] | None = None,
    check: bool = False,
) -> Float[Array, "m 2"]:
    """Blajer eq. 16: ``λ* = Eᵀ [f_g + B u + f_ext − M (D q̈ + γ)]``, ``(m, 2)`` for the ``m`` chosen
    joints (two open-constraint coordinates each, `jaxbio.dynamics.absolute.open_constraint_matrix`).

    ``D q̈ + γ = p̈`` (eq. 9) from the kinematic recursion (`jaxbio.dynamics.absolute.absolute_motion`).
    Arguments as in `reactions_augmented`. Equal to the joint rows of `lagrange_multipliers` for a
    consistent ``(q̈, u, f_ext)``.
    """
    idx = _joint_indices(tree, joints)
    return _augmented(tree, q, qd, qdd, tau, external, idx, check)[0]


@_jit_joints
def reactions_augmented(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    tau: Float[ArrayLike, " n"],
    external: External = None,
    *,
    joints: Sequence[str] | None = None,
    check: bool = False,
) -> Float[Array, "m 3"]:
    """Joint wrenches by the augmented joint-coordinate method (Blajer et al. 2007, eqs. 11–16).

    Args:
        tree: a planar model.
        q, qd, qdd: ``(n,)`` joint coordinates, velocities, accelerations.
        tau: ``(n,)`` N·m / N, joint torques/forces ``u`` consistent with ``q̈``.
        external: optional external (ground) wrenches, as in `reactions_recursion`.
        joints: static tuple of segment names (or indices) whose joints are opened (default: all,
            segment order); only these are computed, e.g. ``("thigh_r", "shank_r", "foot_r")`` for
            the right hip, knee and ankle.
        check: NaN/inf in inputs or results raise at run time.

    Returns:
        ``(m, 3)`` wrenches of the chosen joints, as in `reactions_recursion`.
    """
    idx = _joint_indices(tree, joints)
    lam, pp, p, tau = _augmented(tree, q, qd, qdd, tau, external, idx, check)
    return _wrenches_from_multipliers(pp, p, lam, tau, idx)


# ---- support phase: contact forces -----------------------------------------------------------------


@_jit_rcond
def constrained_forward_dynamics(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    tau: Float[ArrayLike, " n"],
    contacts: Sequence[Contact] = (),
    external: External = None,
    *,
    rcond: float | None = None,
    check: bool = False,
) -> tuple[Float[Array, " n"], Float[Array, "k 3"]]:
    """``q̈`` and the ground reactions of the support phase, in joint coordinates.

    With ``G = ∂φ/∂q`` the Jacobian of the contact rows (world x, y of each contact point, and the
    segment angle for a weld) and ``G q̈ = γ_G = −Ġ q̇``:
    ``M q̈ = τ − h − Gᵀ λ``, ``λ = (G M⁻¹ Gᵀ)⁻¹ (G M⁻¹ (τ − h) − γ_G)`` (``h`` = bias with the given
    external wrenches). The ground reaction on a contact's segment is ``−λ``.

    Returns:
        ``qdd`` ``(n,)`` and ``(k, 3)`` ground wrenches ``(Fx, Fy, Mz about the contact point)``.
        Without contacts this is `jaxbio.forward_dynamics`.

    Raises:
        ValueError before tracing, and run-time errors, as `reactions_lagrange`.
    """
    contacts = check_contacts(tree, contacts)
    q, qd, tau = (_state(tree, x, k, check) for x, k in ((q, "q"), (qd, "qd"), (tau, "tau")))
    external = as_external(tree, external, check)
    h = rnea(tree, q, qd, jnp.zeros_like(q), external)[0]
    M = mass_matrix(tree, q)
    if not contacts:
        free = spd_solve(M, tau - h)
        return free, jnp.zeros((0, 3), free.dtype)
    G, gamma = contact_terms(tree, q, qd, contacts)
    # one factorisation for both right-hand sides (no LAPACK call per state under vmap, `_linalg`)
    sol = spd_solve(M, jnp.concatenate([(tau - h)[:, None], G.T], axis=1))
    free, X = sol[:, 0], sol[:, 1:]  # M⁻¹ (τ − h), M⁻¹ Gᵀ
    rcond = _default_rcond(M.dtype) if rcond is None else rcond
    lam = _spd_solve(G @ X, G @ free - gamma, rcond, "constrained_forward_dynamics")
    qdd = free - X @ lam
    wrenches = contact_wrenches(-lam, contacts)
    if check:
        qdd, wrenches = finite(qdd, "qdd"), finite(wrenches, "ground reactions")
    return qdd, wrenches
