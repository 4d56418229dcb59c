"""Static optimisation of muscle forces: per frame, the least-effort forces that reproduce the joint
moments, differentiable with respect to every input by implicit differentiation.

The problem (one frame; ``m`` muscles, ``n`` coordinates)::

    minimise    Σᵢ xᵢᵖ + Σⱼ yⱼ²
    subject to  Σᵢ rᵢⱼ (xᵢ F̂ᵢ + Pᵢ) + Sⱼ yⱼ = τⱼ     (every coordinate j)
                0 ≤ xᵢ ≤ 1        (or lᵢ ≤ xᵢ ≤ uᵢ: ``activation_bounds``, OpenSim's control bounds)

- ``x`` is the muscle *activation* (``objective="activation"`` in `static_optimization_motion`:
  ``F̂ = F⁰ f_L(l̃) f_V(ṽ) cos α``, ``P = F⁰ f_PE(l̃) cos α``, rigid tendon, the Hill model of
  `jaxbio.muscles.curves.HillMuscle`) or the force ratio ``F/F⁰`` (``objective="force"``:
  ``F̂ = F⁰``, ``P = 0``). Muscle force ``Fᵢ = xᵢ F̂ᵢ + Pᵢ`` (N, tension positive);
  ``p = 2`` (Crowninshield & Brand's sum of squared stresses up to constant PCSA weights) or
  ``p = 3`` (Crowninshield & Brand 1981, maximal endurance).
- ``r`` is the ``(m, n)`` moment-arm matrix of `jaxbio.muscles.geometry.moment_arms`
  (``r = −∂l/∂q``, so ``rᵀF`` are the joint moments of the tensions; the "``R(q)ᵀ F = τ``" of the
  literature), ``τ`` the joint moments from inverse dynamics (Du 2021, eq. 2, `jaxbio.inverse_dynamics`).
- ``y`` are optional *reserve* (residual) torque actuators, one per coordinate, with strength
  ``Sⱼ`` (N·m per unit, ``0`` = none). Their cost is quadratic for every ``p`` (``|y|³`` has zero
  curvature at 0, which would make the problem only weakly convex there). Use them for coordinates
  that no muscle crosses (the pelvis and lumbar coordinates of ``gait10dof18musc``) and, with a
  small ``S``, to keep a frame solvable where the muscles are too weak.

This is the redundancy solution of Blajer et al. 2007 done with an effort criterion instead
of the pseudoinverse (Blajer et al. 2007, eq. 6, `jaxbio.estimation.pseudoinverse`): same moments, different
force sharing (the pseudoinverse minimises ``Σ Fᵢ²``, unweighted; static optimisation weights by
strength and respects the upper bounds).

Infeasible frames are not a silent wrong answer. Each moment equation gets two non-negative elastic
slacks with an exact (ℓ₁) penalty of weight ``infeasibility_weight`` per unit of scaled moment:
where the muscles (and reserves) can reproduce ``τ`` the optimum is the constrained one with zero
slack, exactly (exact-penalty theorem, as long as the weight exceeds the moment's Lagrange
multiplier); where they cannot, the optimum is the nearest reachable moment in the weighted ℓ₁
sense, the unmet part is returned as ``residual`` and ``feasible`` is false. `check_feasible`
turns that into a ``ValueError`` naming the frame and the joint.

Solvers (``solver=``):

- ``"qpax"`` (``p = 2`` only): the primal–dual interior-point QP solver of the maintained ``qpax``
  package (Tracy & Manchester 2024, "On the differentiability of the primal-dual interior-point
  method"), used for the forward solve only.
- ``"interior_point"`` (any ``p ≥ 2``): a small primal–dual interior-point method written here
  (Mehrotra predictor–corrector, box bounds handled as barrier terms, the ``n × n`` Schur
  complement ``E D⁻¹ Eᵀ`` inverted by the sweep operator, `_spd_inverse`). Written here because
  no maintained JAX solver takes a non-quadratic objective with inequality constraints: qpax is
  QP-only, optimistix and lineax have no inequality constraints, and jaxopt (which had them) is
  no longer maintained.
- ``"active_set"`` (any ``p ≥ 2``): the primal–dual active-set method of Hintermüller, Ito &
  Kunisch (2002) — Newton's method on the reduced KKT system of a guessed active set, the set
  corrected after each step — started without any bound active and the elastic slacks at 0 (the
  first step is the least-effort solution without bounds); for ``p ≠ 2`` the ``p = 2`` solution
  starts Newton's method on the dual of the ``p``-problem. A few ``n × n`` solves per frame where
  the interior point takes ~12 iterations. A frame it does not verify within ``ACTIVE_SET_STEPS``
  (the KKT check of the polish below; in practice infeasible frames, whose slacks keep changing,
  and some ``p = 3`` frames with an activation near 0) is solved again by the interior point:
  under `jax.vmap` (`static_optimization_motion`'s or a caller's) only those frames, gathered in
  buckets of ``FALLBACK_BUCKET`` (`_active_set_with_fallback`, a `jax.custom_batching.custom_vmap`). Same answers as the interior point (the problem is strictly
  convex in the activations and reserves).
- ``"auto"`` (default): ``"active_set"``, faster than the interior point on gait10dof18musc
  (benchmarks/static_optimization.py; benchmarks/README.md, "Measurements behind design choices") for ``p = 2`` (4.4 steps per frame
  on average, no fallback) and, by less, for ``p = 3`` (13 % of the frames handed over: an activation near 0, where the dual
  Newton steps of ``x = (c/3)^½`` oscillate between two muscles). The interior point is faster than qpax under
  ``vmap`` (qpax floors its slacks at √eps and so needs more iterations to a tolerance the polish
  can start from, and it stalls on infeasible frames, where the whole batch then runs to the
  iteration limit); all give the same forces. qpax stays available as an independent second
  solver for p = 2 (an optional dependency).

The interior point and qpax are followed by the same *active-set polish* (the active-set solver's
own iteration): the active bounds are identified from the
interior-point slacks and duals (a bound is active where its slack is below its dual), and Newton's
method on the reduced KKT system (stationarity of the free variables, the moment equations, the
active variables at their bounds) takes the solution to machine precision (one step for ``p = 2``).

Differentiation. The solver iterations are not differentiated (they run on `jax.lax.stop_gradient`
of the data). The polished point ``w* = (x, y, slacks, λ)`` is returned through a `jax.custom_jvp`
whose tangent is the implicit function theorem's ``dw/dθ = −K⁻¹ ∂F/∂θ``, with ``F`` the reduced KKT
residual at the final active set, ``K = ∂F/∂w`` and ``θ`` the problem data (moment arms, forces,
moments, reserve strengths, through ``E`` and ``b``): exact wherever the active set does not change
(strict complementarity), in forward (`jax.jvp`, `jax.jacfwd`) and reverse (`jax.grad`, by
transposing the linear tangent rule) mode alike, and free when nothing is differentiated.

References
----------
- R. D. Crowninshield, R. A. Brand (1981), A physiologically based criterion of muscle force
  prediction in locomotion, J. Biomech. 14, 793–801.
- F. C. Anderson, M. G. Pandy (2001), Static and dynamic optimization solutions for gait are
  practically equivalent, J. Biomech. 34, 153–161.
- S. Mehrotra (1992), On the implementation of a primal-dual interior point method,
  SIAM J. Optim. 2, 575–601; J. Nocedal, S. J. Wright (2006), Numerical Optimization, §16.6, §19.
- K. Tracy, Z. Manchester (2024), On the differentiability of the primal-dual interior-point
  method, arXiv:2406.11749 (qpax).
- M. Hintermüller, K. Ito, K. Kunisch (2002), The primal-dual active set strategy as a semismooth
  Newton method, SIAM J. Optim. 13, 865–888.
"""

from __future__ import annotations

import functools
from typing import NamedTuple
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxbio._validate import as_float, check_choice, check_finite, check_values, is_concrete, static_number

__all__ = [
    "StaticOptimizationResult",
    "static_optimization",
    "static_optimization_motion",
    "check_feasible",
    "muscle_force_components",
]

SOLVERS = ("auto", "active_set", "interior_point", "qpax")
OBJECTIVES = ("force", "activation")
#: N, the largest ``max_force`` accepted. The solver works in activations ``x ∈ [0, 1]`` with
#: absolute tolerances, so a muscle so strong that the moments need ``x`` below them (1e300 N
#: against a few N·m) would be solved as ``x = 0``; no muscle comes near this bound.
MAX_FORCE = 1e8


class StaticOptimizationResult(eqx.Module):
    """Solution of one frame (or, from `static_optimization_motion` / `jax.vmap`, of ``T`` frames:
    every field then has a leading ``T`` axis).

    - ``forces``: ``(m,)`` N, muscle–tendon tensions ``F = x F̂ + P`` (≥ 0).
    - ``activations``: ``(m,)`` in [0, 1], the optimisation variable ``x`` (activation, or
      ``F/F⁰`` for the force objective).
    - ``reserves``: ``(n,)`` N·m (N for a prismatic coordinate), reserve actuator moments ``S y``.
    - ``tau``: ``(n,)`` N·m, the joint moments that were asked for.
    - ``residual``: ``(n,)`` N·m, ``τ − rᵀF − S y``: the moment left unmet (0 to rounding where the
      frame is feasible).
    - ``feasible``: ``()`` bool, every ``|residual_j|`` within the tolerance.
    - ``cost``: ``()`` the objective ``Σ xᵖ + Σ y²`` (elastic penalty excluded).
    - ``moment_multipliers``: ``(n,)`` per N·m, the Lagrange multipliers of the moment equations,
      ``∂cost/∂τ`` at the optimum.
    - ``lower_multipliers``, ``upper_multipliers``: ``(m,)`` the multipliers (≥ 0) of ``x ≥ 0`` and
      ``x ≤ 1``. KKT stationarity reads ``p xᵢᵖ⁻¹ − F̂ᵢ Σⱼ rᵢⱼ λⱼ − lowerᵢ + upperᵢ = 0`` and, for the
      reserves, ``2 yⱼ − Sⱼ λⱼ = 0`` (λ = ``moment_multipliers``).
    - ``converged``: ``()`` bool, the active-set polish (or the active-set solver) was consistent
      (free variables inside their bounds, bound multipliers ≥ 0, reduced KKT residual at rounding).
    - ``iterations``: ``()`` int, interior-point iterations; for ``solver="active_set"`` its
      active-set steps, plus the interior point's iterations on a frame handed over to it.
    """

    forces: Float[Array, "*T m"]
    activations: Float[Array, "*T m"]
    reserves: Float[Array, "*T n"]
    tau: Float[Array, "*T n"]
    residual: Float[Array, "*T n"]
    feasible: Bool[Array, "*T"]
    cost: Float[Array, "*T"]
    moment_multipliers: Float[Array, "*T n"]
    lower_multipliers: Float[Array, "*T m"]
    upper_multipliers: Float[Array, "*T m"]
    converged: Bool[Array, "*T"]
    iterations: Int[Array, "*T"]


# ---- input checks -----------------------------------------------------------------------------


def _check_finite(x, name: str, check: bool, axis_names: tuple[str, str] | None = None):
    """`jaxbio._validate.check_finite`, locating the first bad entry by ``axis_names`` for 2-D ``x``."""
    locate = None
    if axis_names is not None and jnp.ndim(x) == 2:
        locate = lambda idx, _: f" (first at {axis_names[0]} {idx[0]}, {axis_names[1]} {idx[1]})"  # noqa: E731
    return check_finite(x, name, check=check, locate=locate)


# ---- the problem in standard form -------------------------------------------------------------


def _standard_form(moment_arms, tau, max_force, passive_force, reserve_strength, infeasibility_weight, bounds=None):
    """Variables ``z = (x (m), y (n), s⁺ (n), s⁻ (n))``; equality ``E z = b`` with rows scaled by
    ``σⱼ`` (largest single actuator moment at coordinate j; the primal solution does not depend
    on it); bounds (``bounds = (lower, upper)`` of ``x``, default ``[0, 1]``) and cost
    coefficients."""
    m, n = moment_arms.shape
    A = moment_arms.T * max_force[None, :]  # (n, m) N·m per unit activation
    b = tau - jnp.sum(moment_arms * passive_force[:, None], axis=0)
    scale = jnp.maximum(jnp.max(jnp.abs(A), axis=1, initial=0.0), jnp.abs(reserve_strength))
    scale = jax.lax.stop_gradient(jnp.where(scale > 0, scale, 1.0))
    eye = jnp.eye(n, dtype=A.dtype)
    E = jnp.concatenate([A / scale[:, None], jnp.diag(reserve_strength / scale), eye, -eye], axis=1)
    dtype = A.dtype
    inf = jnp.inf
    x_lo, x_hi = (jnp.zeros(m, dtype), jnp.ones(m, dtype)) if bounds is None else bounds
    lower = jnp.concatenate([x_lo.astype(dtype), jnp.full(n, -inf, dtype), jnp.zeros(2 * n, dtype)])
    upper = jnp.concatenate([x_hi.astype(dtype), jnp.full(3 * n, inf, dtype)])
    return E, b / scale, lower, upper, scale


def _masks(m: int, n: int):
    """Static numpy masks: which variables have a finite lower / upper bound."""
    has_lower = np.concatenate([np.ones(m, bool), np.zeros(n, bool), np.ones(2 * n, bool)])
    has_upper = np.concatenate([np.ones(m, bool), np.zeros(3 * n, bool)])
    return has_lower, has_upper


def _cost_derivatives(z, m: int, n: int, p, weight):
    """Gradient and (diagonal) Hessian of ``Σ |x|ᵖ + Σ y² + w Σ (s⁺ + s⁻)``. ``p`` may be traced
    (one compiled program serves p = 2 and p = 3)."""
    x, y = z[:m], z[m : m + n]
    ax = jnp.abs(x)
    p = jnp.asarray(p, z.dtype)
    gx = p * jnp.sign(x) * ax ** (p - 1)
    hx = p * (p - 1) * ax ** (p - 2)  # |x|⁰ = 1 (also at 0) for p = 2
    gs = jnp.full((2 * n,), weight, z.dtype)
    g = jnp.concatenate([gx, 2.0 * y, gs])
    h = jnp.concatenate([hx, jnp.full_like(y, 2.0), jnp.zeros_like(gs)])
    return g, h


# ---- products with E and the n × n Schur complement ------------------------------------------
# Under `jax.vmap` on CPU a matrix product of one frame becomes a batched dot and a small
# factorisation one LAPACK call per frame; these few-element products are written as elementwise
# sums instead, which XLA fuses into loops over the whole batch (benchmarks/README.md).


def _E_blocks(E, m: int, n: int):
    """``(Â (n, m), ŝ (n,))`` of ``E = [Â, diag(ŝ), I, −I]`` (`_standard_form`'s structure)."""
    return E[:, :m], jnp.diagonal(E[:, m : m + n])


def _E_dot(E, z, m: int, n: int):
    """``E z`` by the structure of `_standard_form`'s ``E``."""
    A, s = _E_blocks(E, m, n)
    return jnp.sum(A * z[None, :m], axis=1) + s * z[m : m + n] + z[m + n : m + 2 * n] - z[m + 2 * n :]


def _Et_dot(E, lam, m: int, n: int):
    """``Eᵀ λ`` by the structure of `_standard_form`'s ``E``."""
    A, s = _E_blocks(E, m, n)
    return jnp.concatenate([jnp.sum(A * lam[:, None], axis=0), s * lam, lam, -lam])


def _E_diag_Et(E, d, m: int, n: int):
    """``E diag(d) Eᵀ`` ``(n, n)`` by the structure of `_standard_form`'s ``E``."""
    A, s = _E_blocks(E, m, n)
    S = jnp.diag(s * s * d[m : m + n] + d[m + n : m + 2 * n] + d[m + 2 * n :])
    for i in range(m):  # a sum of m outer products, not a reduction: XLA's CPU reduction is slower
        S = S + A[:, None, i] * (A[None, :, i] * d[i])
    return S


def _spd_inverse(S):
    """``S⁻¹`` of a small symmetric positive-definite ``(n, n)`` matrix by the sweep operator
    (Gauss–Jordan without pivoting, the pivots of an SPD matrix being positive), one
    `jax.lax.fori_loop` step per pivot on the whole matrix: elementwise work that `jax.vmap`
    vectorises over the frames, where ``jax.scipy.linalg.cho_factor`` would be one LAPACK call per
    frame (the interior point's Newton systems need no more than this accuracy; the active-set
    polish iterates to rounding). Under ``jit(vmap)`` factor and solve are faster this way than with
    ``cho_factor``/``cho_solve``; an unrolled Cholesky (`jaxbio._linalg.cholesky_solve`) was a
    little faster than this in the whole solver but doubled its compile time (benchmarks/README.md, "Measurements behind design choices")."""
    n = S.shape[-1]
    idx = jnp.arange(n)

    def sweep(k, a):
        col = jax.lax.dynamic_index_in_dim(a, k, axis=1, keepdims=False)
        d = jax.lax.dynamic_index_in_dim(col, k, keepdims=False)
        c = col / d
        row_k, col_k = (idx == k)[:, None], (idx == k)[None, :]
        out = jnp.where(row_k, c[None, :], a - col[:, None] * c[None, :])
        out = jnp.where(col_k, c[:, None], out)
        return jnp.where(row_k & col_k, -1.0 / d, out)

    return -jax.lax.fori_loop(0, n, sweep, S)


def _mv(M, v):
    """``M v`` for a small matrix, as an elementwise sum (see `_spd_inverse`)."""
    return jnp.sum(M * v[None, :], axis=1)


# ---- interior point ---------------------------------------------------------------------------


def _interior_point(E, b, lower, upper, m, n, p, weight, tol, max_iterations):
    """Primal–dual interior point (Mehrotra predictor–corrector) for
    ``min c(z) s.t. E z = b, lower ≤ z ≤ upper`` with separable convex ``c`` (Nocedal & Wright
    §19.3 with the Schur complement of §16.6). Returns ``(z, λ, ν_l, ν_u, s_l, s_u, ok, it)``
    with the convention ``∇c − Eᵀλ − ν_l + ν_u = 0``."""
    has_lower, has_upper = _masks(m, n)
    hl, hu = jnp.asarray(has_lower), jnp.asarray(has_upper)
    n_bounds = int(has_lower.sum() + has_upper.sum())
    dtype = E.dtype
    lo = jnp.where(hl, lower, 0.0)
    up = jnp.where(hu, upper, 0.0)
    tiny = jnp.finfo(dtype).tiny

    # start: muscles mid-range, slacks absorb the initial moment error
    x0 = 0.5 * (lower[:m] + upper[:m])
    r0 = b - jnp.sum(E[:, :m] * x0[None, :], axis=1)
    z0 = jnp.concatenate([x0, jnp.zeros(n, dtype), jnp.maximum(r0, 0.0) + 1.0, jnp.maximum(-r0, 0.0) + 1.0])
    # duals consistent with stationarity at λ = 0 (ν_l − ν_u = ∇c), so the slacks' large linear
    # cost does not show up as a huge initial dual residual
    g0, _ = _cost_derivatives(z0, m, n, p, weight)
    nl0 = jnp.where(hl, jnp.maximum(g0, 0.0) + 1.0, 0.0).astype(dtype)
    nu0 = jnp.where(hu, jnp.maximum(-g0, 0.0) + 1.0, 0.0).astype(dtype)
    lam0 = jnp.zeros(n, dtype)

    def slacks(z):
        return jnp.where(hl, z - lo, 1.0), jnp.where(hu, up - z, 1.0)

    def residuals(z, lam, nl, nu):
        g, h = _cost_derivatives(z, m, n, p, weight)
        r_d = g - _Et_dot(E, lam, m, n) - nl + nu
        r_p = _E_dot(E, z, m, n) - b
        sl, su = slacks(z)
        comp = jnp.concatenate([jnp.where(hl, sl * nl, 0.0), jnp.where(hu, su * nu, 0.0)])
        return g, h, r_d, r_p, sl, su, comp

    def error(r_d, r_p, comp, nl, nu):
        # the largest complementarity product (relative to its dual), not the mean: near-degenerate
        # bounds (p = 3, tiny activations) must be resolved before the active set is read off
        rel = comp / (1.0 + jnp.concatenate([nl, nu]))
        primal = jnp.max(jnp.abs(r_p)) / (1.0 + jnp.max(jnp.abs(b)))
        return jnp.maximum(jnp.maximum(jnp.max(jnp.abs(r_d)) / (1.0 + weight), primal), jnp.max(rel))

    def max_step(v, dv, mask):
        ratio = jnp.where(mask & (dv < 0), -v / jnp.where(dv < 0, dv, -1.0), jnp.inf)
        return jnp.minimum(1.0, jnp.min(ratio))

    def step(state):
        z, lam, nl, nu, it, _, res = state
        g, h, r_d, r_p, sl, su, comp = res
        mu = jnp.sum(comp) / n_bounds
        D = h + jnp.where(hl, nl / sl, 0.0) + jnp.where(hu, nu / su, 0.0)
        D = jnp.maximum(D, 1e-14)
        S = _E_diag_Et(E, 1.0 / D, m, n)
        S = S + 1e-14 * jnp.max(jnp.abs(jnp.diag(S))) * jnp.eye(n, dtype=dtype)
        S_inv = _spd_inverse(S)

        def direction(rcl, rcu):
            gg = -r_d - jnp.where(hl, rcl / sl, 0.0) + jnp.where(hu, rcu / su, 0.0)
            dlam = _mv(S_inv, -r_p - _E_dot(E, gg / D, m, n))
            dz = (gg + _Et_dot(E, dlam, m, n)) / D
            dnl = jnp.where(hl, (-rcl - nl * dz) / sl, 0.0)
            dnu = jnp.where(hu, (-rcu + nu * dz) / su, 0.0)
            return dz, dlam, dnl, dnu

        def step_length(dz, dnl, dnu):
            return jnp.minimum(
                jnp.minimum(max_step(sl, dz, hl), max_step(su, -dz, hu)),
                jnp.minimum(max_step(nl, dnl, hl), max_step(nu, dnu, hu)),
            )

        # predictor (affine scaling)
        dz_a, _, dnl_a, dnu_a = direction(sl * nl, su * nu)
        a_aff = step_length(dz_a, dnl_a, dnu_a)
        mu_aff = (
            jnp.sum(jnp.where(hl, (sl + a_aff * dz_a) * (nl + a_aff * dnl_a), 0.0))
            + jnp.sum(jnp.where(hu, (su - a_aff * dz_a) * (nu + a_aff * dnu_a), 0.0))
        ) / n_bounds
        sigma = jnp.clip((mu_aff / jnp.maximum(mu, tiny)) ** 3, 0.0, 1.0)
        # corrector
        rcl = sl * nl + dz_a * dnl_a - sigma * mu
        rcu = su * nu - dz_a * dnu_a - sigma * mu
        dz, dlam, dnl, dnu = direction(rcl, rcu)
        alpha = jnp.minimum(1.0, 0.995 * step_length(dz, dnl, dnu))
        z_new = z + alpha * dz
        lam_new = lam + alpha * dlam
        nl_new = jnp.where(hl, jnp.maximum(nl + alpha * dnl, tiny), 0.0)
        nu_new = jnp.where(hu, jnp.maximum(nu + alpha * dnu, tiny), 0.0)
        finite = jnp.all(jnp.isfinite(z_new)) & jnp.all(jnp.isfinite(lam_new))
        z_new = jnp.where(finite, z_new, z)
        lam_new = jnp.where(finite, lam_new, lam)
        nl_new = jnp.where(finite, nl_new, nl)
        nu_new = jnp.where(finite, nu_new, nu)
        res = residuals(z_new, lam_new, nl_new, nu_new)
        _, _, r_d, r_p, _, _, comp = res
        done = (error(r_d, r_p, comp, nl_new, nu_new) < tol) | ~finite
        return z_new, lam_new, nl_new, nu_new, it + 1, done, res

    def cond(state):
        return (state[4] < max_iterations) & ~state[5]

    state = (z0, lam0, nl0, nu0, jnp.asarray(0, jnp.int32), jnp.asarray(False), residuals(z0, lam0, nl0, nu0))
    z, lam, nl, nu, it, _, (_, _, r_d, r_p, sl, su, comp) = jax.lax.while_loop(cond, step, state)
    ok = error(r_d, r_p, comp, nl, nu) < 100 * tol
    return z, lam, nl, nu, sl, su, ok, it


def _qpax_solve(E, b, lower, upper, m, n, weight, tol, max_iterations):
    """The same problem (``p = 2``) by ``qpax.solve_qp``; returns what `_interior_point` returns.

    qpax floors its slacks and duals at √eps, so its complementarity residual cannot go below
    ≈ 1.5e-8 × (dual size): the elastic slacks are rescaled (``s̃ = w s``, unit cost) to keep their
    duals O(1), and qpax is run to ``max(tol, 1e-6)``; the active-set polish does the rest."""
    import qpax

    N = E.shape[1]
    dtype = E.dtype
    Q = jnp.diag(jnp.concatenate([jnp.full(m + n, 2.0, dtype), jnp.zeros(2 * n, dtype)]))
    c = jnp.concatenate([jnp.zeros(m + n, dtype), jnp.ones(2 * n, dtype)])
    col = jnp.concatenate([jnp.ones(m + n, dtype), jnp.full(2 * n, 1.0 / weight, dtype)])
    has_lower, has_upper = _masks(m, n)
    il, iu = np.flatnonzero(has_lower), np.flatnonzero(has_upper)
    eye = np.eye(N)
    G = jnp.asarray(np.concatenate([-eye[il], eye[iu]]), dtype)  # G z ≤ h
    h = jnp.concatenate([-lower[il], upper[iu]])
    z, s, dual, y, converged, it = qpax.solve_qp(
        Q, c, E * col, b, G, h, solver_tol=max(tol, 1e-6), max_iter=max_iterations
    )
    # back to the unscaled slacks; qpax: Q z + c + Eᵀy + Gᵀdual = 0  ⇒  λ = −y; lower rows first
    k = il.size
    nl = jnp.zeros(N, dtype).at[il].set(dual[:k]) / col
    nu = jnp.zeros(N, dtype).at[iu].set(dual[k:]) / col
    sl = jnp.ones(N, dtype).at[il].set(s[:k]) * col
    su = jnp.ones(N, dtype).at[iu].set(s[k:]) * col
    return z * col, -y, nl, nu, sl, su, converged == 1, jnp.asarray(it, jnp.int32)


# ---- active-set polish and implicit differentiation ------------------------------------------


def _reduced_kkt(w, E, b, bound_value, free, m, n, p, weight):
    """Reduced KKT residual ``F(w)``, ``w = (z, λ)``: stationarity for free variables, ``z = bound``
    for active ones, and the moment equations ``E z − b``."""
    N = E.shape[1]
    z, lam = w[:N], w[N:]
    g, _ = _cost_derivatives(z, m, n, p, weight)
    stat = jnp.where(free, g - _Et_dot(E, lam, m, n), z - bound_value)
    return jnp.concatenate([stat, _E_dot(E, z, m, n) - b])


def _reduced_jacobian(w, E, free, m, n, p, weight):
    N = E.shape[1]
    z = w[:N]
    _, h = _cost_derivatives(z, m, n, p, weight)
    top = jnp.concatenate([jnp.diag(jnp.where(free, h, 1.0)), -(E.T * free[:, None])], axis=1)
    reg = 1e-13 * jnp.max(jnp.abs(E)) * jnp.eye(n, dtype=E.dtype)
    bottom = jnp.concatenate([E, -reg], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def _reduced_newton_step(w, F, E, free, m, n, p, weight):
    """The Newton step ``−K⁻¹ F`` of the reduced KKT system (``K`` = `_reduced_jacobian`) by
    block elimination onto the ``n`` moment multipliers: active variables move to their bound,
    free ones with curvature (``h > 0``) are eliminated through ``h``, and a free elastic slack
    (zero curvature, column ``±e_j``) fixes its row's multiplier and takes up that row's
    remainder. What is left is the ``n × n`` system ``(E_c h_c⁻¹ E_cᵀ − ρ I) Δλ = …`` on the rows
    without a free slack, solved by `_spd_inverse` (the ``(m + 4n)²`` LU of ``K``, 58 × 58 for
    gait10dof18musc, was one LAPACK call per frame under `jax.vmap`, most of the batch's time;
    benchmarks/README.md). Frames
    where the elimination is singular (both slacks of a row free; a free activation with zero
    curvature, ``p > 2`` at ``x = 0``) come out inaccurate, and the polish's final KKT check
    rejects them."""
    N = E.shape[1]
    z = w[:N]
    F_s, F_c = F[:N], F[N:]
    _, h = _cost_derivatives(z, m, n, p, weight)
    slack = np.arange(N) >= m + n
    curved = free & ~slack
    h_c = jnp.where(curved, jnp.maximum(h, jnp.finfo(h.dtype).tiny ** 0.25), 1.0)
    flat_p = free[m + n : m + 2 * n]
    flat_m = free[m + 2 * n :] & ~flat_p
    fixed = flat_p | flat_m
    dlam_fixed = jnp.where(flat_p, F_s[m + n : m + 2 * n], jnp.where(flat_m, -F_s[m + 2 * n :], 0.0))
    reg = 1e-13 * jnp.max(jnp.abs(E))
    S = _E_diag_Et(E, jnp.where(curved, 1.0 / h_c, 0.0), m, n) - reg * jnp.eye(n, dtype=E.dtype)
    u = jnp.where(curved, F_s / h_c, jnp.where(free, 0.0, F_s))
    rhs = -F_c + _E_dot(E, u, m, n)
    rhs = jnp.where(fixed, dlam_fixed, rhs - _mv(S, dlam_fixed))
    S = jnp.where(fixed[:, None] | fixed[None, :], jnp.eye(n, dtype=E.dtype), S)
    dlam = _mv(_spd_inverse(S), rhs)
    dz = jnp.where(curved, (-F_s + _Et_dot(E, dlam, m, n)) / h_c, jnp.where(free, 0.0, -F_s))
    rest = -F_c - _E_dot(E, dz, m, n) + reg * dlam  # what the free slack of a fixed row takes up
    dz = dz.at[m + n : m + 2 * n].add(jnp.where(flat_p, rest, 0.0))
    dz = dz.at[m + 2 * n :].add(jnp.where(flat_m, -rest, 0.0))
    return jnp.concatenate([dz, dlam])


@functools.partial(jax.custom_jvp, nondiff_argnums=(6, 7, 8))
def _implicit_solution(w, E, b, bound_value, free, p, m, n, weight):
    """``w`` (the polished KKT point, computed without gradients); its derivative with respect to
    the problem data ``(E, b)`` is the implicit function theorem's ``dw = −K⁻¹ (∂F/∂E dE + ∂F/∂b db)``
    with ``F`` the reduced KKT residual at the final active set and ``K = ∂F/∂w``. A `jax.custom_jvp`
    whose tangent rule is linear (a linear solve), so `jax.grad` transposes it."""
    return w


@_implicit_solution.defjvp
def _implicit_solution_jvp(m, n, weight, primals, tangents):
    w, E, b, bound_value, free, p = primals
    _, dE, db, _, _, _ = tangents
    w = jax.lax.stop_gradient(w)
    F_dot = jax.jvp(lambda E_, b_: _reduced_kkt(w, E_, b_, bound_value, free, m, n, p, weight), (E, b), (dE, db))[1]
    K = _reduced_jacobian(w, E, free, m, n, p, weight)
    return w, -jnp.linalg.solve(K, F_dot)


#: `_solve_frame`: moments below this fraction of the largest single actuator moment get a tighter
#: interior-point tolerance (frames of ordinary size keep ``tol``).
_SMALL_DEMAND = 1e-2


class _Problem(NamedTuple):
    """One frame's problem after the input checks of `_prepare` (``bounds``: ``None`` or the
    activation box; ``E, b, lower, upper, scale`` from `_standard_form`, not stop-gradiented)."""

    moment_arms: Array
    tau: Array
    max_force: Array
    passive_force: Array
    reserve_strength: Array
    valid: Array
    bounds: tuple | None
    E: Array
    b: Array
    lower: Array
    upper: Array
    scale: Array


class _Solution(NamedTuple):
    """What a solver hands to `_finish`: ``w = (z, λ)`` (no gradient), the final active set, whether
    the active-set polish verified it (``polished``), and the iterations taken."""

    w: Array
    at_lower: Array
    at_upper: Array
    polished: Array
    iterations: Array


def _prepare(moment_arms, tau, max_force, passive_force, reserve_strength, bounds, weight) -> _Problem:
    """Input that is not a valid problem — NaN or inf anywhere, ``max_force`` outside
    ``[0, MAX_FORCE]`` — becomes a harmless zero problem with ``valid`` false (`_result` then makes
    every output NaN); then `_standard_form`."""
    valid = jnp.asarray(True)
    for x in (moment_arms, tau, max_force, passive_force, reserve_strength):
        valid = valid & jnp.all(jnp.isfinite(x))
    valid = valid & jnp.all(max_force >= 0) & jnp.all(max_force <= MAX_FORCE)
    if bounds is not None:  # activation bounds: finite, 0 ≤ lower ≤ upper
        bounds = tuple(jnp.asarray(x, moment_arms.dtype) for x in bounds)
        valid = valid & jnp.all(jnp.isfinite(bounds[0])) & jnp.all(jnp.isfinite(bounds[1]))
        valid = valid & jnp.all(bounds[0] >= 0) & jnp.all(bounds[0] <= bounds[1])
        bounds = tuple(jnp.where(valid, x, d) for x, d in zip(bounds, (0.0, 1.0)))
    given_tau = tau
    moment_arms, tau, passive_force, reserve_strength = (
        jnp.where(valid, x, jnp.zeros_like(x)) for x in (moment_arms, tau, passive_force, reserve_strength)
    )
    max_force = jnp.where(valid, max_force, jnp.ones_like(max_force))
    if moment_arms.shape[1] == 0:
        E = b = lower = upper = scale = jnp.zeros(0, moment_arms.dtype)
    else:
        E, b, lower, upper, scale = _standard_form(
            moment_arms, tau, max_force, passive_force, reserve_strength, weight, bounds
        )
    return _Problem(
        moment_arms, given_tau, max_force, passive_force, reserve_strength, valid, bounds, E, b, lower, upper, scale
    )


def _polish(Es, bs, lower, upper, w0, at_lower, at_upper, m, n, p, weight, steps, converge=False, dual=False):
    """Active-set polish / primal–dual active-set method: Newton steps on the reduced KKT system,
    each followed by the active-set update of Hintermüller, Ito & Kunisch (2002) for box
    constraints (a bound becomes active where the free variable crosses it, and is released where
    its multiplier has the wrong sign), at most ``steps``; then the KKT check of the result (free
    variables inside their bounds, bound multipliers of the right sign, reduced KKT residual at
    rounding). Exact for p = 2 once the active set is right. ``converge``: ``polished`` also
    requires the loop to have stopped on its own (active set stable, last step at rounding level),
    not at ``steps``. ``dual`` (also implies ``converge``): after each Newton step the activations are
    set to those that minimise the Lagrangian at the new multipliers, clipped to their box, and
    their active set read off from them (Newton's method on the dual; for ``p = 2`` the same
    step). Returns ``(w, at_lower, at_upper, polished, steps taken)``."""
    N = Es.shape[1]
    has_lower, has_upper = _masks(m, n)
    hl, hu = jnp.asarray(has_lower), jnp.asarray(has_upper)
    lo = jnp.where(hl, lower, 0.0)
    up = jnp.where(hu, upper, 0.0)
    eps = float(jnp.finfo(Es.dtype).eps)

    def bound_set(at_lower, at_upper):
        return ~(at_lower | at_upper), jnp.where(at_lower, lo, jnp.where(at_upper, up, 0.0))

    def polish_step(carry):
        w_old, at_lower, at_upper, k, _ = carry
        free, bound_value = bound_set(at_lower, at_upper)
        F = _reduced_kkt(w_old, Es, bs, bound_value, free, m, n, p, weight)
        w = w_old + _reduced_newton_step(w_old, F, Es, free, m, n, p, weight)
        zz = w[:N]
        g, _ = _cost_derivatives(zz, m, n, p, weight)
        mult = jnp.where(free, 0.0, g - _Et_dot(Es, w[N:], m, n))  # ν_l − ν_u on the active bounds
        new_lower = hl & ((at_lower & (mult >= 0)) | (free & (zz < lo)))
        new_upper = hu & ((at_upper & (mult <= 0)) | (free & (zz > up))) & ~new_lower
        if dual:  # the activations that minimise the Lagrangian at the new λ, in their box
            c = _Et_dot(Es, w[N:], m, n)[:m]
            x = (jnp.maximum(c, 0.0) / p) ** (1.0 / (p - 1.0))
            x_low, x_up = lo[:m], up[:m]
            low_x = x <= x_low
            up_x = (x >= x_up) & ~low_x
            zz = zz.at[:m].set(jnp.clip(x, x_low, x_up))
            new_lower = new_lower.at[:m].set(low_x)
            new_upper = new_upper.at[:m].set(up_x)
        free_new, bv_new = bound_set(new_lower, new_upper)
        w = w.at[:N].set(jnp.where(free_new, zz, bv_new))
        # done once the active set is stable and the Newton step is at rounding level
        small = jnp.max(jnp.abs(w - w_old)[:N]) <= 1e3 * eps * (1.0 + jnp.max(jnp.abs(zz[: m + n])))
        done = jnp.all(new_lower == at_lower) & jnp.all(new_upper == at_upper) & small
        return w, new_lower, new_upper, k + 1, done

    w, at_lower, at_upper, k, done = jax.lax.while_loop(
        lambda c: (c[3] < steps) & ~c[4],
        polish_step,
        (w0, at_lower, at_upper, jnp.asarray(0, jnp.int32), jnp.asarray(False)),
    )
    free, bound_value = bound_set(at_lower, at_upper)
    z_pol, lam_pol = w[:N], w[N:]
    g, _ = _cost_derivatives(z_pol, m, n, p, weight)
    bound_mult = g - _Et_dot(Es, lam_pol, m, n)  # = ν_l − ν_u at the optimum
    slack = 10 * float(np.sqrt(eps))
    inside = jnp.all(jnp.where(hl & free, z_pol >= lower - slack, True)) & jnp.all(
        jnp.where(hu & free, z_pol <= upper + slack, True)
    )
    signs = jnp.all(jnp.where(at_lower, bound_mult >= -slack, True)) & jnp.all(
        jnp.where(at_upper, bound_mult <= slack, True)
    )
    kkt = jnp.max(jnp.abs(_reduced_kkt(w, Es, bs, bound_value, free, m, n, p, weight)))
    polished = inside & signs & (kkt < 0.1 * float(np.sqrt(eps)) * (1.0 + weight)) & jnp.all(jnp.isfinite(w))
    if converge or dual:  # the active-set method: its loop must also have converged
        polished = polished & done
    return w, at_lower, at_upper, polished, k


def _interior_point_solve(prob: _Problem, p, *, solver, weight, tol, max_iterations, polish_steps=8) -> _Solution:
    """The interior point (or qpax), its active set read off the slacks and duals (a bound is
    active where its slack is below its dual), then `_polish`; where the polish is not verified,
    the interior-point point itself."""
    m, n = prob.moment_arms.shape
    Es, bs = jax.lax.stop_gradient((prob.E, prob.b))
    lower, upper = prob.lower, prob.upper
    if solver == "qpax":
        z, lam, nl, nu, sl, su, _, it = _qpax_solve(Es, bs, lower, upper, m, n, weight, tol, max_iterations)
    else:
        # the moments asked for, in units of the largest single actuator moment: far below 1, the
        # activations, multipliers and complementarity products are as small, and an absolute
        # tolerance would stop before the active bounds can be told apart (τ 1e-5 of a muscle's
        # moment came back 3× too strong); tighten it in proportion, down to 1e-6 of ``tol``
        demand = jnp.max(jnp.abs(bs), initial=0.0)
        tol_frame = tol * jnp.clip(demand / _SMALL_DEMAND, 1e-6, 1.0)
        z, lam, nl, nu, sl, su, _, it = _interior_point(
            Es, bs, lower, upper, m, n, p, weight, tol_frame, max_iterations
        )
    has_lower, has_upper = _masks(m, n)
    hl, hu = jnp.asarray(has_lower), jnp.asarray(has_upper)
    at_lower = hl & (sl < nl)
    at_upper = hu & (su < nu) & ~at_lower
    bound_value = jnp.where(at_lower, jnp.where(hl, lower, 0.0), jnp.where(at_upper, jnp.where(hu, upper, 0.0), 0.0))
    w0 = jnp.concatenate([jnp.where(at_lower | at_upper, bound_value, z), lam])
    w, at_lower, at_upper, polished, _ = _polish(
        Es, bs, lower, upper, w0, at_lower, at_upper, m, n, p, weight, polish_steps
    )
    w = jnp.where(polished, w, jnp.concatenate([z, lam]))
    return _Solution(w, at_lower, at_upper, polished, it)


#: `_active_set_solve`: the most primal–dual active-set steps for the p = 2 problem and for the
#: p-problem started from its solution; a frame not verified by then goes to the interior point.
ACTIVE_SET_STEPS = 12


def _active_set_solve(prob: _Problem, p, *, weight, steps=None) -> _Solution:
    """The primal–dual active-set method (Hintermüller, Ito & Kunisch 2002; `_polish`) from a cheap
    start, no interior point: every activation and reserve free, every elastic slack at 0 (the
    frame feasible), so the first Newton step is the least-effort solution without bounds
    (``p = 2``); the active set is then corrected step by step. For ``p ≠ 2`` the ``p = 2``
    solution (its activations, multipliers and active set) starts Newton's method on the
    ``p``-problem. ``polished`` false (not converged in ``steps``, a singular elimination, a cycle)
    sends the frame to `_interior_point_solve` (`_solve_frame`, `_frames_solver`)."""
    m, n = prob.moment_arms.shape
    steps = ACTIVE_SET_STEPS if steps is None else steps
    Es, bs = jax.lax.stop_gradient((prob.E, prob.b))
    N = Es.shape[1]
    has_lower, _ = _masks(m, n)
    at_lower = jnp.asarray(has_lower) & (np.arange(N) >= m + n)  # the 2n elastic slacks at 0
    at_upper = jnp.zeros(N, bool)
    w0 = jnp.zeros(N + n, Es.dtype)
    two = jnp.asarray(2.0, Es.dtype)
    w, at_lower, at_upper, polished, k = _polish(
        Es, bs, prob.lower, prob.upper, w0, at_lower, at_upper, m, n, two, weight, steps, converge=True
    )

    def p_problem(_):
        return _polish(Es, bs, prob.lower, prob.upper, w, at_lower, at_upper, m, n, p, weight, steps, dual=True)

    # p is shared by the frames of a batch, so this stays a branch under `jax.vmap`
    w, at_lower, at_upper, polished_p, k_p = jax.lax.cond(
        p == 2, lambda _: (w, at_lower, at_upper, polished, jnp.asarray(0, jnp.int32)), p_problem, None
    )
    return _Solution(w, at_lower, at_upper, polished_p, k + k_p)


def _finish(prob: _Problem, sol: _Solution, p, *, weight, residual_tolerance) -> StaticOptimizationResult:
    """The result from a solution: the implicit-differentiation hook on ``w`` (value ``w``,
    derivative ``−K⁻¹ ∂F/∂θ``, only evaluated when differentiated), forces, multipliers, `_result`."""
    m, n = prob.moment_arms.shape
    if n == 0:  # no moment to reproduce: every activation at its lower bound
        return _no_coordinates(
            prob.moment_arms,
            prob.tau,
            prob.max_force,
            prob.passive_force,
            prob.valid,
            None if prob.bounds is None else prob.bounds[0],
            p,
        )
    E, b = prob.E, prob.b
    N = E.shape[1]
    has_lower, has_upper = _masks(m, n)
    lo = jnp.where(jnp.asarray(has_lower), prob.lower, 0.0)
    up = jnp.where(jnp.asarray(has_upper), prob.upper, 0.0)
    free = ~(sol.at_lower | sol.at_upper)
    bound_value = jnp.where(sol.at_lower, lo, jnp.where(sol.at_upper, up, 0.0))
    w = jax.lax.stop_gradient(sol.w)
    w = _implicit_solution(w, E, b, bound_value, free, p, m, n, weight)
    z, lam = w[:N], w[N:]
    x = z[:m]
    y = z[m : m + n]
    forces = x * prob.max_force + prob.passive_force
    reserves = prob.reserve_strength * y
    g, _ = _cost_derivatives(z, m, n, p, weight)
    bound_mult = (g - _Et_dot(E, lam, m, n))[:m]
    lower_mult = jnp.where(sol.at_lower[:m], bound_mult, 0.0)
    upper_mult = jnp.where(sol.at_upper[:m], -bound_mult, 0.0)
    cost = jnp.sum(jnp.abs(x) ** p) + jnp.sum(y**2)
    return _result(
        prob.moment_arms,
        prob.tau,
        forces,
        x,
        reserves,
        cost,
        lam / prob.scale,
        lower_mult,
        upper_mult,
        jax.lax.stop_gradient(sol.polished),
        sol.iterations,
        prob.valid,
        residual_tolerance,
    )


def _solve_frame(
    moment_arms,
    tau,
    max_force,
    passive_force,
    reserve_strength,
    p,
    bounds=None,
    *,
    solver,
    weight,
    tol,
    max_iterations,
    residual_tolerance,
    polish_steps=8,
):
    """One frame (see `static_optimization`); ``p`` is a (traced) scalar, the rest static.

    Input that is not a valid problem — NaN or inf anywhere, ``max_force`` outside
    ``[0, MAX_FORCE]`` — is refused before tracing when concrete; traced (under jit) it is
    solved as a harmless zero problem and every output is NaN, ``feasible`` and ``converged``
    false: NaN in, NaN out, never a plausible force. ``feasible`` is recomputed from the
    returned forces (`_result`), whatever the solver reported.

    ``solver="active_set"``: `_active_set_solve`, and the interior point where it is not verified
    (a `jax.lax.cond`; under a caller's `jax.vmap` both run for every frame, which
    `_frames_solver` avoids by solving only the unverified frames again)."""
    m, n = moment_arms.shape
    p = jax.lax.stop_gradient(jnp.asarray(p, moment_arms.dtype))
    prob = _prepare(moment_arms, tau, max_force, passive_force, reserve_strength, bounds, weight)
    if n == 0:
        return _finish(prob, None, p, weight=weight, residual_tolerance=residual_tolerance)
    ip = functools.partial(
        _interior_point_solve,
        solver="interior_point" if solver == "active_set" else solver,
        weight=weight,
        tol=tol,
        max_iterations=max_iterations,
        polish_steps=polish_steps,
    )
    if solver == "active_set":
        sol = _active_set_with_fallback(jax.lax.stop_gradient(prob), p, ip, weight)
    else:
        sol = ip(prob, p)
    return _finish(prob, sol, p, weight=weight, residual_tolerance=residual_tolerance)


def _active_set_with_fallback(prob: _Problem, p, ip, weight) -> _Solution:
    """`_active_set_solve`, then ``ip`` (the interior point) if it did not verify the frame. A
    `jax.custom_batching.custom_vmap`: under `jax.vmap` (a caller's, or `_frames_solver`'s) the
    active-set method runs on every frame and the interior point only on the frames it did not
    verify (`_fallback`), where a batched `jax.lax.cond` would run both on every frame. ``prob``
    without gradients (the derivative comes from `_finish`)."""

    def one(prob, p):
        sol = _active_set_solve(prob, p, weight=weight)
        return jax.lax.cond(sol.polished, lambda s: s, lambda s: _add_iterations(ip(prob, p), s), sol)

    solve = jax.custom_batching.custom_vmap(one)

    @solve.def_vmap
    def _rule(axis_size, in_batched, prob, p):
        prob_batched, p_batched = in_batched
        prob = jax.tree_util.tree_map(
            lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)), prob, prob_batched
        )
        if p_batched:  # p differs between frames (never in jaxbio): both solvers on every frame
            sol = jax.vmap(one)(prob, p)
        else:
            sol = jax.vmap(functools.partial(_active_set_solve, weight=weight), in_axes=(0, None))(prob, p)
            sol = _fallback(prob, sol, p, ip, FALLBACK_BUCKET)
        return sol, jax.tree_util.tree_map(lambda _: True, sol)

    return solve(prob, p)


def _add_iterations(sol: _Solution, before: _Solution) -> _Solution:
    """``sol`` with the iterations of ``before`` (the active-set steps that preceded a fallback) added."""
    return sol._replace(iterations=sol.iterations + before.iterations)


def _result(
    moment_arms,
    tau,
    forces,
    activations,
    reserves,
    cost,
    moment_mult,
    lower_mult,
    upper_mult,
    converged,
    iterations,
    valid,
    residual_tolerance,
) -> StaticOptimizationResult:
    """The result of one frame, its residual and ``feasible`` computed from the returned forces
    (elementwise sums: no reduced-precision matmul), every float output NaN where not ``valid``.

    ``feasible``: every ``|τⱼ − Σᵢ rᵢⱼ Fᵢ − Sⱼ yⱼ| ≤ residual_tolerance · max(1, |τⱼ|, Σᵢ |rᵢⱼ Fᵢ| + |Sⱼ yⱼ|)``
    (N·m, N for a prismatic coordinate): relative to the moments that are balanced, and at least
    ``residual_tolerance`` N·m. Relative to the moments, not to the actuators' capacity: a
    solver that lost the solution in rounding (a muscle of 1e300 N asked for 10 N·m) is reported
    infeasible, not feasible within 1e-6 of 1e298 N·m."""
    moments = jnp.sum(moment_arms * forces[:, None], axis=0)
    residual = tau - moments - reserves
    balanced = jnp.sum(jnp.abs(moment_arms * forces[:, None]), axis=0) + jnp.abs(reserves)
    size = jnp.maximum(jnp.maximum(jnp.abs(tau), balanced), 1.0)
    feasible = valid & jnp.all(jnp.abs(residual) <= residual_tolerance * size)
    nan = jnp.where(valid, 0.0, jnp.nan).astype(forces.dtype)  # NaN in, NaN out
    return StaticOptimizationResult(
        forces=forces + nan,
        activations=activations + nan,
        reserves=reserves + nan,
        tau=tau,
        residual=residual + nan,
        feasible=feasible,
        cost=cost + nan,
        moment_multipliers=moment_mult + nan,
        lower_multipliers=lower_mult + nan,
        upper_multipliers=upper_mult + nan,
        converged=converged & valid,
        iterations=iterations,
    )


def _no_coordinates(moment_arms, tau, max_force, passive_force, valid, lower=None, p=2):
    """A frame with no coordinate (``n = 0``): nothing to reproduce, so ``x`` at its lower bound
    (0 by default; the minimum of ``Σ xᵖ``) and the forces ``x F̂ + P``."""
    zeros_m, zeros_n = jnp.zeros_like(max_force), jnp.zeros_like(tau)
    x = zeros_m if lower is None else lower + zeros_m
    return _result(
        moment_arms,
        tau,
        x * max_force + passive_force,
        x,
        zeros_n,
        jnp.sum(x ** jnp.asarray(p, x.dtype)),
        zeros_n,
        zeros_m,
        zeros_m,
        jnp.asarray(True),
        jnp.asarray(0, jnp.int32),
        valid,
        0.0,
    )


_OPTIONS = ("solver", "weight", "tol", "max_iterations", "residual_tolerance")
_solve_frame_jit = jax.jit(_solve_frame, static_argnames=_OPTIONS)


#: `_frames_solver`: frames per chunk. A chunk's iterations stop when its own slowest frame has
#: converged (under `jax.vmap` the whole batch waits for the slowest), and its working set
#: stays in cache (benchmarks/README.md).
CHUNK = 64


#: `_frames_solver` with ``solver="active_set"``: frames of a chunk that the active-set method did
#: not verify are solved again by the interior point in buckets of this many (gathered, solved,
#: scattered back), so the fallback costs in proportion to the frames that need it.
FALLBACK_BUCKET = 8


def _fallback(prob: _Problem, sol: _Solution, p, ip, bucket: int) -> _Solution:
    """The frames of a batch ``(T, ...)`` whose ``sol.polished`` is false, solved again by ``ip``
    (`_interior_point_solve` of one frame), ``bucket`` frames at a time (a fixed-size gather, one
    `jax.lax.while_loop` step per bucket, none when every frame is verified): the cost is that
    of the frames that need it, not of the batch. The batching rule of `_active_set_with_fallback`."""
    T = sol.polished.shape[0]
    bucket = min(bucket, T)
    vip = jax.vmap(ip, in_axes=(0, None))

    def one_bucket(carry):
        sol, todo = carry
        idx = jnp.nonzero(todo, size=bucket, fill_value=T)[0]  # unused slots point past the end
        take = jnp.minimum(idx, T - 1)
        redo = _add_iterations(
            vip(jax.tree_util.tree_map(lambda x: x[take], prob), p), jax.tree_util.tree_map(lambda x: x[take], sol)
        )
        sol = jax.tree_util.tree_map(lambda a, r: a.at[idx].set(r, mode="drop"), sol, redo)
        return sol, todo.at[idx].set(False, mode="drop")

    sol, _ = jax.lax.while_loop(lambda c: jnp.any(c[1]), one_bucket, (sol, ~sol.polished))
    return sol


@functools.cache
def _frames_solver(solver: str, weight: float, tol: float, max_iterations: int, residual_tolerance: float):
    """``jit(vmap(_solve_frame))`` over frames (``p`` and the activation bounds shared), one compiled
    program per option set and shape: ``solve(R (T, m, n), τ (T, n), F̂ (T, m), P (T, m), S (T, n),
    p, bounds)`` (``bounds``: ``None`` or ``(lower (m,), upper (m,))``). With
    ``solver="active_set"``, per chunk: the active-set method on every frame, the interior point
    on the frames it did not verify (`_fallback`, through `_active_set_with_fallback`'s batching
    rule)."""
    frame = functools.partial(
        _solve_frame,
        solver=solver,
        weight=weight,
        tol=tol,
        max_iterations=max_iterations,
        residual_tolerance=residual_tolerance,
    )
    batch = jax.vmap(frame, in_axes=(0, 0, 0, 0, 0, None, None))

    def solve(R, tau, fmax, passive, reserve, p, bounds):
        T = R.shape[0]
        if T <= CHUNK:
            return batch(R, tau, fmax, passive, reserve, p, bounds)
        chunks = -(-T // CHUNK)
        pad = chunks * CHUNK - T

        def to_chunks(x):  # (T, ...) → (chunks, CHUNK, ...), the last chunk padded with the last frame
            x = jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]) if pad else x
            return x.reshape((chunks, CHUNK) + x.shape[1:])

        out = jax.lax.map(lambda a: batch(*a, p, bounds), tuple(to_chunks(x) for x in (R, tau, fmax, passive, reserve)))
        return jax.tree_util.tree_map(lambda x: x.reshape((chunks * CHUNK,) + x.shape[2:])[:T], out)

    return jax.jit(solve)


def _resolve_solver(solver: str, p: float) -> str:
    check_choice(solver, SOLVERS, "solver")
    if solver == "auto":
        return "active_set"
    if solver == "qpax":
        if p != 2:
            raise ValueError(f"solver 'qpax' solves quadratic programs only (p = 2), got p = {p}")
        try:
            import qpax  # noqa: F401
        except ImportError:
            raise ImportError("solver='qpax' needs the qpax package: pip install qpax") from None
    return solver


def _default_residual_tolerance(residual_tolerance, dtype) -> float:
    if residual_tolerance is not None:
        return residual_tolerance
    return 1e-6 if jnp.finfo(dtype).bits >= 64 else 1e-4


def _default_tol(tol, dtype) -> float:
    if tol is not None:
        return tol
    return 1e-9 if jnp.finfo(dtype).bits >= 64 else 1e-5


def _options(infeasibility_weight, tol, max_iterations, residual_tolerance, dtype) -> dict:
    """The static solver options, checked before tracing (``ValueError`` naming the option): a
    weight ≤ 0 would make leaving the moments unmet free, a negative tolerance would report every
    frame infeasible, a zero iteration limit would return the starting point."""
    return dict(
        weight=static_number(infeasibility_weight, "infeasibility_weight", positive=True),
        tol=static_number(_default_tol(tol, dtype), "tol", positive=True),
        max_iterations=static_number(max_iterations, "max_iterations", positive=True, integer=True),
        residual_tolerance=static_number(
            _default_residual_tolerance(residual_tolerance, dtype), "residual_tolerance", positive=True
        ),
    )


def _check_max_force(fmax, name: str = "max_force") -> None:
    """Concrete ``max_force`` in ``[0, MAX_FORCE]`` N (traced values: `_solve_frame` gives NaN)."""
    check_values(fmax, name, nonnegative=True)
    a = np.asarray(fmax) if is_concrete(fmax) else None
    if a is not None and a.size and not np.all(a <= MAX_FORCE):
        raise ValueError(
            f"{name} must be ≤ MAX_FORCE = {MAX_FORCE:g} N (the solver's activations could not "
            f"resolve the moments), got {float(a.max()):g} N"
        )


def _check_p(p) -> float:
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"p must be a number ≥ 2 (2 or 3), got {p!r}") from None
    if not np.isfinite(p) or p < 2:
        raise ValueError(f"p must be ≥ 2 (the cost Σ xᵖ must be C² and convex), got {p}")
    return p


def _check_layout(arms: tuple[int, int], tau: tuple[int, ...], fmax: tuple[int, ...]) -> None:
    """``ValueError`` naming the argument whose shape breaks the layout ``moment_arms (m, n)``,
    ``tau (n,)``, ``max_force (m,)``: ``moment_arms`` (saying it looks transposed) when ``tau`` and
    ``max_force`` agree with each other but not with it, else ``tau`` or ``max_force``."""
    m, n = arms
    if tau == (n,) and fmax == (m,):
        return
    if len(tau) == 1 and len(fmax) == 1:
        if (fmax[0], tau[0]) == (n, m):
            raise ValueError(
                f"moment_arms has shape {arms}, expected ({fmax[0]}, {tau[0]}) (muscles × coordinates: "
                f"max_force has {fmax[0]} entries, tau {tau[0]}); it looks transposed: pass "
                f"moment_arms.T"
            )
        if tau != (n,) and fmax != (m,):
            raise ValueError(
                f"moment_arms has shape {arms}, expected ({fmax[0]}, {tau[0]}) (muscles × coordinates: "
                f"max_force has {fmax[0]} entries, tau {tau[0]})"
            )
    if tau != (n,):
        raise ValueError(
            f"tau has shape {tau}, expected ({n},): one moment per column of moment_arms {arms} (muscles × coordinates)"
        )
    raise ValueError(
        f"max_force has shape {fmax}, expected ({m},): one per row of moment_arms {arms} (muscles × coordinates)"
    )


def static_optimization(
    moment_arms: Float[ArrayLike, "m n"],
    tau: Float[ArrayLike, " n"],
    max_force: Float[ArrayLike, " m"],
    *,
    p: float = 2,
    passive_force: Float[ArrayLike, " m"] | None = None,
    reserve_strength: Float[ArrayLike, " n"] | None = None,
    activation_bounds: tuple[Float[ArrayLike, " m"], Float[ArrayLike, " m"]] | None = None,
    solver: str = "auto",
    infeasibility_weight: float = 1e5,
    tol: float | None = None,
    max_iterations: int = 60,
    residual_tolerance: float | None = None,
    check: bool = False,
    joint_names: Sequence[str] | None = None,
) -> StaticOptimizationResult:
    """Static optimisation of one frame: ``min Σ xᵢᵖ + Σ yⱼ²`` s.t. ``rᵀ(x F̂ + P) + S y = τ``,
    ``0 ≤ x ≤ 1`` (see the module docstring). Batch frames with `jax.vmap`; jit, grad and jvp
    work (implicit differentiation through the optimum).

    Args:
        moment_arms: ``(m, n)`` m/rad (m/m for prismatic coordinates), ``r = −∂l/∂q`` as
            `jaxbio.muscles.geometry.moment_arms` returns it.
        tau: ``(n,)`` N·m / N, joint moments to reproduce (e.g. `jaxbio.inverse_dynamics`).
        max_force: ``(m,)`` N, ``F̂``: force at full activation along the tendon (``F⁰`` for the
            ``F/F⁰`` objective, ``F⁰ f_L f_V cos α`` for activations; see
            `muscle_force_components`). In ``[0, MAX_FORCE]`` (1e8 N).
        p: static, exponent of the effort (2 or 3; any ``p ≥ 2`` works with the interior point).
        passive_force: ``(m,)`` N, force that does not depend on ``x`` (passive fibre force),
            ≥ 0, default 0.
        reserve_strength: ``(n,)`` N·m per unit reserve activation, ``S``; 0 (default) = no
            reserve actuator on that coordinate.
        activation_bounds: ``(lower (m,), upper (m,))``, ``0 ≤ lower ≤ upper`` (finite), the box
            of ``x`` instead of ``[0, 1]`` (OpenSim's ``min_control``/``max_control``).
        solver: static, ``"auto"`` (= ``"active_set"``), ``"active_set"`` (the interior point
            on a frame where it does not converge; under `jax.vmap` only on those frames),
            ``"interior_point"`` or ``"qpax"`` (p = 2 only; needs ``pip install qpax``).
        infeasibility_weight: static, exact-penalty weight of the unmet moment (per unit of the
            coordinate's largest single-actuator moment). Must exceed the moment multipliers; if
            the muscles could reproduce ``τ`` only at a marginal cost above it, the frame is
            reported infeasible. > 0.
        tol: static, interior-point tolerance (scaled KKT residual and largest complementarity
            product); default ``1e-9`` in float64, ``1e-5`` in float32, tightened for frames
            whose moments are far below the actuators' capacity. The active-set polish then takes
            the solution to rounding precision whatever ``tol``. > 0.
        max_iterations: static, interior-point iteration limit (an integer ≥ 1).
        residual_tolerance: static, ``feasible`` means that for every coordinate ``j`` the
            residual recomputed from the returned forces is within
            ``residual_tolerance · max(1, |τⱼ|, Σᵢ|rᵢⱼ Fᵢ| + |Sⱼ yⱼ|)`` N·m (relative to the moments
            balanced at that coordinate, and at least ``residual_tolerance`` N·m); default
            ``1e-6`` in float64, ``1e-4`` in float32. > 0.
        check: static; inside jit, raise (`equinox.error_if`) on NaN/inf input and on an
            infeasible frame (naming the joint). Outside jit the input is always checked.
            Without it, a frame whose traced input has NaN or inf, or a ``max_force`` outside
            ``[0, MAX_FORCE]``, comes back with every float field NaN and ``feasible``,
            ``converged`` false (NaN in, NaN out; never a plausible force).
        joint_names: names of the ``n`` coordinates, for the error messages of ``check``.

    Zero muscles (``m = 0``: reserves only) and zero coordinates (``n = 0``: nothing to
    reproduce, every activation 0) are solved, with empty arrays where the size is 0.

    Returns:
        `StaticOptimizationResult` of the frame.

    Raises:
        ValueError (before tracing, naming the argument): wrong shapes, ``max_force`` outside
        ``[0, MAX_FORCE]``, NaN/inf input, ``p < 2``, unknown solver, an option that is not a
        positive finite number (``infeasibility_weight``, ``tol``, ``residual_tolerance``,
        ``max_iterations``).
    """
    p = _check_p(p)
    solver = _resolve_solver(solver, p)
    R = as_float(moment_arms, "moment_arms")
    if R.ndim != 2:
        raise ValueError(
            f"moment_arms must be (m, n) (muscles × coordinates), got shape {R.shape}; batch with jax.vmap"
        )
    m, n = R.shape
    tau = as_float(tau, "tau")
    fmax = as_float(max_force, "max_force")
    _check_layout(R.shape, tau.shape, fmax.shape)
    passive = jnp.zeros(m, fmax.dtype) if passive_force is None else as_float(passive_force, "passive_force")
    reserve = jnp.zeros(n, fmax.dtype) if reserve_strength is None else as_float(reserve_strength, "reserve_strength")
    if passive.shape != (m,):
        raise ValueError(f"passive_force has shape {passive.shape}, expected ({m},)")
    if reserve.shape != (n,):
        raise ValueError(f"reserve_strength has shape {reserve.shape}, expected ({n},)")
    dtype = jnp.result_type(R, tau, fmax, passive, reserve)
    options = _options(infeasibility_weight, tol, max_iterations, residual_tolerance, dtype)
    R, tau, fmax, passive, reserve = (a.astype(dtype) for a in (R, tau, fmax, passive, reserve))
    R = _check_finite(R, "moment_arms", check)
    tau = _check_finite(tau, "tau", check)
    fmax = _check_finite(fmax, "max_force", check)
    passive = _check_finite(passive, "passive_force", check)
    reserve = _check_finite(reserve, "reserve_strength", check)
    if is_concrete(fmax) and np.any(np.asarray(fmax) < 0):
        raise ValueError(f"max_force must be ≥ 0, got {np.asarray(fmax).tolist()}")
    _check_max_force(fmax)
    check_values(passive, "passive_force", nonnegative=True)  # a muscle cannot push
    bounds = None
    if activation_bounds is not None:
        if not isinstance(activation_bounds, (tuple, list)) or len(activation_bounds) != 2:
            raise ValueError("activation_bounds must be a pair (lower (m,), upper (m,))")
        bounds = tuple(
            jnp.broadcast_to(as_float(b, name).astype(dtype), (m,))
            if jnp.ndim(b) == 0
            else as_float(b, name).astype(dtype)
            for b, name in zip(activation_bounds, ("activation_bounds[0]", "activation_bounds[1]"))
        )
        for b, name in zip(bounds, ("lower", "upper")):
            if b.shape != (m,):
                raise ValueError(f"activation_bounds: {name} has shape {b.shape}, expected ({m},)")
            _check_finite(b, f"activation_bounds ({name})", check)
        lo, hi = (np.asarray(b) if is_concrete(b) else None for b in bounds)
        if lo is not None and hi is not None and not (np.all(lo >= 0) and np.all(lo <= hi)):
            raise ValueError(
                f"activation_bounds must satisfy 0 ≤ lower ≤ upper, got lower {lo.tolist()}, upper {hi.tolist()}"
            )
    result = _solve_frame_jit(R, tau, fmax, passive, reserve, p, bounds, solver=solver, **options)
    if check:
        result = _error_if_infeasible(result, joint_names or tuple(f"coordinate {j}" for j in range(n)))
    return result


def _error_if_infeasible(result: StaticOptimizationResult, joint_names: Sequence[str]):
    """`equinox.branched_error_if` naming the first joint with an unmet moment (works under jit)."""
    bad = ~result.feasible
    joint = jnp.argmax(jnp.abs(result.residual) * 1.0, axis=-1)
    # the worst joint of the first infeasible frame (frames flattened; only the joint is named)
    joint = jnp.ravel(joint)[jnp.argmax(jnp.ravel(bad))]
    msgs = [
        f"static optimisation infeasible: the muscles (and reserves) cannot produce the joint moment "
        f"at {name!r}; call check_feasible outside jit for the frame index"
        for name in joint_names
    ]
    forces = eqx.branched_error_if(result.forces, jnp.any(bad), joint, msgs)
    return eqx.tree_at(lambda r: r.forces, result, forces)


def check_feasible(
    result: StaticOptimizationResult, joint_names: Sequence[str] | None = None
) -> StaticOptimizationResult:
    """Raise ``ValueError`` naming the first infeasible frame and its joint, else return ``result``.

    ``result`` from `static_optimization` (one frame) or a batch (leading ``T`` axis, e.g. from
    `static_optimization_motion`). Outside jit the message names the frame index, the joint, the
    required and the unmet moment; under jit it falls back to `equinox.branched_error_if`, which
    can name only the joint.
    """
    residual = result.residual
    n = residual.shape[-1]
    names = tuple(joint_names) if joint_names is not None else tuple(f"coordinate {j}" for j in range(n))
    if len(names) != n:
        raise ValueError(f"joint_names has {len(names)} names, the result has {n} coordinates")
    if not is_concrete(residual) or not is_concrete(result.feasible):
        return _error_if_infeasible(result, names)
    feasible = np.atleast_1d(np.asarray(result.feasible))
    if feasible.all():
        return result
    res = np.asarray(residual).reshape(-1, n)
    tau = np.asarray(result.tau).reshape(-1, n)
    frame = int(np.flatnonzero(~feasible)[0])
    joint = int(np.argmax(np.abs(res[frame])))
    where = f"frame {frame}, " if np.ndim(result.feasible) else ""
    raise ValueError(
        f"static optimisation infeasible at {where}joint {names[joint]!r}: the muscles (and reserves) "
        f"reach {tau[frame, joint] - res[frame, joint]:.6g} of the required {tau[frame, joint]:.6g} "
        f"(unmet {res[frame, joint]:.6g} N·m); {int((~feasible).sum())} of {feasible.size} frame(s) infeasible. "
        f"Add a reserve actuator (reserve_strength) or check the muscle model."
    )


# ---- model + motion ---------------------------------------------------------------------------


def muscle_force_components(muscle, musculotendon_length, musculotendon_velocity, objective: str = "activation"):
    """``(F̂, P)`` ``(m,)`` N: muscle force at full activation minus passive, and passive force.

    ``objective="activation"``: from a rigid-tendon `jaxbio.muscles.curves.HillMuscle`, the force
    along the tendon is linear in the activation ``a``: ``F = a F̂ + P`` with
    ``F̂ = F⁰ f_L(l̃) f_V(ṽ) cos α`` and ``P = F⁰ f_PE(l̃) cos α`` (evaluated as ``force(1) − force(0)``
    and ``force(0)``; ``P`` clipped at 0, since De Groote's passive curve is slightly negative below
    slack length and a muscle cannot push). ``objective="force"``: ``F̂ = F⁰``, ``P = 0``.

    ``musculotendon_length`` ``(m,)`` m, ``musculotendon_velocity`` ``(m,)`` m/s (lengthening positive).
    """
    check_choice(objective, OBJECTIVES, "objective")
    if objective == "force":
        return muscle.max_isometric_force, jnp.zeros_like(muscle.max_isometric_force)
    if muscle.tendon != "rigid":
        raise ValueError("static optimisation needs a rigid-tendon HillMuscle (force linear in activation)")
    # the curves before `HillMuscle.force`'s clip at 0 (F̂ is the difference of the raw curves)
    passive = muscle._signed_force(0.0, musculotendon_length, musculotendon_velocity)
    full = muscle._signed_force(1.0, musculotendon_length, musculotendon_velocity)
    # De Groote's passive curve dips slightly below zero under slack length (≥ −0.019 F⁰);
    # a muscle cannot push, so the passive force is clipped at 0
    return full - passive, jnp.maximum(passive, 0.0)


def _as_hill(parameters):
    from jaxbio.muscles.curves import HillMuscle

    if isinstance(parameters, HillMuscle):
        return parameters
    return HillMuscle(
        max_isometric_force=parameters.max_isometric_force,
        optimal_fiber_length=parameters.optimal_fiber_length,
        tendon_slack_length=parameters.tendon_slack_length,
        pennation_angle=parameters.pennation_angle,
        max_contraction_velocity=parameters.max_contraction_velocity,
        tendon="rigid",
    )


def frame_problem(tree, paths, muscle, q, qd, qdd, tau=None, external=None, objective="activation"):
    """The data of one frame's static optimisation: ``(R (m, n), τ (n,), F̂ (m,), P (m,))`` —
    moment arms (`jaxbio.muscles.geometry.moment_arms`), joint moments (`jaxbio.inverse_dynamics`
    of ``q, qd, qdd`` with ``external`` unless ``tau`` is given), and `muscle_force_components`
    at the frame's musculotendon lengths and velocities. No checks (callers check); one home for
    `static_optimization_motion` and the amortised estimator of `jaxbio.learning.estimators`."""
    from jaxbio.dynamics import inverse_dynamics
    from jaxbio.muscles.geometry import lengths_and_velocities, moment_arms

    if tau is None:
        tau = inverse_dynamics(tree, q, qd, qdd, external)
    R = moment_arms(paths, tree, q)
    fmax, passive = muscle_force_components(muscle, *lengths_and_velocities(paths, tree, q, qd), objective)
    return R, tau, fmax, passive


@eqx.filter_jit
def _motion_problem(tree, paths, muscle, q, qd, qdd, tau, external, objective):
    """`frame_problem` batched over the frames."""

    def frame(q_t, qd_t, qdd_t, tau_t, ext_t):
        return frame_problem(tree, paths, muscle, q_t, qd_t, qdd_t, tau_t, ext_t, objective)

    return jax.vmap(frame)(q, qd, qdd, tau, external)


def reserve_vector(tree, reserve_strength, dtype):
    """``(n,)`` reserve strengths from ``None`` (no reserves), an ``(n,)`` array, or a mapping
    ``{segment name: strength}`` over ``tree.names``; ``ValueError`` naming an unknown segment or a
    wrong shape."""
    n = tree.nq
    if isinstance(reserve_strength, Mapping):
        strength = np.zeros(n)
        for key, value in reserve_strength.items():
            if key not in tree.names:
                raise ValueError(
                    f"reserve_strength: no segment {key!r} in {tree.name!r}; segments are {list(tree.names)}"
                )
            strength[tree.names.index(key)] = float(value)
        return jnp.asarray(strength, dtype)
    if reserve_strength is None:
        return jnp.zeros(n, dtype)
    reserve = as_float(reserve_strength, "reserve_strength").astype(dtype)
    if reserve.shape != (n,):
        raise ValueError(f"reserve_strength has shape {reserve.shape}, expected ({n},)")
    return reserve


def static_optimization_motion(
    tree,
    paths,
    parameters,
    q: Float[ArrayLike, "T n"],
    qd: Float[ArrayLike, "T n"],
    qdd: Float[ArrayLike, "T n"],
    *,
    tau: Float[ArrayLike, "T n"] | None = None,
    external=None,
    p: float = 2,
    objective: str = "activation",
    reserve_strength: Float[ArrayLike, " n"] | Mapping[str, float] | None = None,
    solver: str = "auto",
    infeasibility_weight: float = 1e5,
    tol: float | None = None,
    max_iterations: int = 60,
    residual_tolerance: float | None = None,
    check: bool = False,
) -> StaticOptimizationResult:
    """Static optimisation over a motion: ``τ`` by inverse dynamics, moment arms and (for
    ``objective="activation"``) the rigid-tendon Hill force–length–velocity factors per frame,
    then `static_optimization` on every frame (one ``jit(vmap)``).

    Args:
        tree: the `jaxbio.SegmentTree` (``n`` coordinates).
        paths: `jaxbio.muscles.MusclePaths` of the ``m`` muscles (e.g. from
            `jaxbio.muscles.load_muscle_set`).
        parameters: `jaxbio.muscles.sets.MuscleParameters` or a rigid-tendon
            `jaxbio.muscles.curves.HillMuscle` (differentiate with respect to its fields).
        q, qd, qdd: ``(T, n)`` rad, rad/s, rad/s² (m, m/s, m/s² for prismatic), the motion.
        tau: optional ``(T, n)`` N·m, joint moments to use instead of inverse dynamics.
        external: optional ``(forces (T, n, 3), moments (T, n, 3))`` world-frame wrenches on the
            segments for `jaxbio.inverse_dynamics` (e.g. ground reactions).
        p, solver, infeasibility_weight, tol, max_iterations, residual_tolerance, check: as in
            `static_optimization`.
        objective: ``"activation"`` (Σ aᵖ with force–length–velocity) or ``"force"`` (Σ (F/F⁰)ᵖ).
        reserve_strength: ``(n,)`` N·m per unit, or ``{segment name: strength}`` using
            ``tree.names`` (e.g. ``{"pelvis_tx": 1000, "pelvis_ty": 1000, "pelvis": 1000,
            "torso": 1000}`` for gait10dof18musc); 0 / absent = no reserve.

    Returns:
        `StaticOptimizationResult` with a leading ``T`` axis on every field.

    Raises:
        ValueError naming the array (and the first bad frame) for wrong shapes, frame counts that
        differ between ``q``, ``qd``, ``qdd`` and ``tau``, or NaN/inf; for an unknown segment in
        ``reserve_strength``; for a muscle set and parameters of different sizes; for paths built
        on another tree (`jaxbio.muscles.geometry.check_tree`); for the options as in
        `static_optimization`. ``T = 0`` frames give empty results.
    """
    p = _check_p(p)
    solver = _resolve_solver(solver, p)
    check_choice(objective, OBJECTIVES, "objective")
    from jaxbio.muscles.geometry import check_tree

    check_tree(paths, tree)
    n = tree.nq
    muscle = _as_hill(parameters)
    if muscle.size != paths.n_muscles:
        raise ValueError(f"parameters describe {muscle.size} muscles, the paths {paths.n_muscles}")
    arrays = {}
    frames = None
    for name, x in (("q", q), ("qd", qd), ("qdd", qdd), ("tau", tau)):
        if x is None:
            continue
        x = as_float(x, name)
        if x.ndim != 2 or x.shape[1] != n:
            raise ValueError(
                f"{name} has shape {x.shape}, expected (T, {n}) (frames × coordinates of "
                f"{tree.name!r}: {', '.join(tree.names)})"
            )
        if frames is None:
            frames = x.shape[0]
        elif x.shape[0] != frames:
            raise ValueError(
                f"{name} has {x.shape[0]} frames but q has {frames}: the motion arrays must have "
                f"the same number of frames"
            )
        arrays[name] = _check_finite(x, name, check, ("frame", "coordinate"))
    dtype = jnp.result_type(*arrays.values())
    options = _options(infeasibility_weight, tol, max_iterations, residual_tolerance, dtype)
    _check_max_force(muscle.max_isometric_force, "max_isometric_force of parameters")
    reserve = reserve_vector(tree, reserve_strength, dtype)
    reserve = _check_finite(reserve, "reserve_strength", check)
    if external is not None:
        if not isinstance(external, (tuple, list)) or len(external) != 2:
            raise ValueError("external must be a pair (forces (T, n, 3), moments (T, n, 3))")
        external = tuple(as_float(e, "external").astype(dtype) for e in external)
        for nm, e in zip(("external forces", "external moments"), external):
            if e.shape != (frames, n, 3):
                raise ValueError(f"{nm} has shape {e.shape}, expected ({frames}, {n}, 3)")
        external = tuple(
            _check_finite(e, nm, check) for e, nm in zip(external, ("external forces", "external moments"))
        )
    problem = _motion_problem(
        tree,
        paths,
        muscle,
        arrays["q"].astype(dtype),
        arrays["qd"].astype(dtype),
        arrays["qdd"].astype(dtype),
        arrays.get("tau"),
        external,
        objective,
    )
    solve = _frames_solver(
        solver, options["weight"], options["tol"], options["max_iterations"], options["residual_tolerance"]
    )
    result = solve(*problem, jnp.broadcast_to(reserve, (frames, n)), jnp.asarray(p, dtype), None)
    if check:
        result = _error_if_infeasible(result, tree.names)
    return result
