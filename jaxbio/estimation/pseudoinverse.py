"""Minimum-norm solution of an underdetermined linear system with non-negative entries (Blajer et al. 2007, §2.1).

Blajer, Dziewiecki & Mazur (2007, eq. 6) distribute ``k`` required joint quantities ``b`` over
``m > k`` controls ``x`` (muscle forces and torques) with the pseudoinverse

    H† = Hᵀ (H Hᵀ)⁻¹,   x = H† b,

which is the solution of ``H x = b`` of least norm ``xᵀx``. Muscles only pull, so "in the case some
of the muscle forces determined are negative, they should be set to zero, and the calculations
should be repeated until all the muscle forces are either positive or vanish" (Blajer et al. 2007, after
eq. 6). `clamped_pseudoinverse` does exactly that, with masks instead of deleted columns so that it
runs under `jax.jit` and `jax.vmap`:

1. **Blajer's clamping** (Blajer et al. 2007, eq. 6 and the paragraph after it): solve on the free columns;
   clamp *every* negative entry (among those declared non-negative) to zero, i.e. drop its column;
   repeat. At most ``m`` rounds, since each clamps at least one column.
2. **Release (an addition)**: clamping is a heuristic; a column clamped early may have a negative
   Lagrange multiplier at the end (the norm would decrease if it were allowed to carry a positive
   value). The loop then goes on as a primal active-set method (Lawson & Hanson 1974, ch. 23,
   applied to ``min ½‖x‖² s.t. Hx = b, x_N ≥ 0``): release the clamped entry with the most
   negative multiplier, re-solve, and if an entry would turn negative step back along the
   segment towards the new solution until the first one reaches zero and clamp it. The result then
   satisfies all KKT conditions of that problem (primal and dual feasibility, stationarity,
   complementary slackness). When the clamping alone already does (the usual case), this phase
   ends after one check and the answer is Blajer's.

Each solve on the free columns uses the SVD pseudoinverse of ``H`` with the clamped columns
zeroed, which equals ``Hᵀ(HHᵀ)⁻¹`` when the free columns have full row rank and gives the
least-squares minimum-norm solution when they do not (``b`` then cannot be reached: the
``residual`` says by how much). The active set is found without gradients (`jax.lax.while_loop`);
the returned ``x`` is the differentiable solve on that set, so `jax.grad` works and gives the
derivative of the solution on the final active set.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int

__all__ = ["PseudoinverseSolution", "clamped_pseudoinverse"]


class PseudoinverseSolution(eqx.Module):
    """Result of `clamped_pseudoinverse` (one system; a leading batch axis under `jax.vmap`).

    - ``x``: ``(m,)`` the solution (units of the columns of ``H``: N for muscle forces, N·m for
      torques in Blajer et al. 2007); clamped entries are exactly 0, non-negative entries are ≥ 0.
    - ``residual``: ``(k,)`` ``H x − b`` (units of ``b``); ~0 when ``b`` is reachable.
    - ``active``: ``(m,)`` bool, true for the free (not clamped) entries.
    - ``iterations``: ``()`` int, solves performed while finding the active set.
    - ``multipliers``: ``(k,)`` ν with ``x[active] = (Hᵀν)[active]`` (the Lagrange multipliers of
      ``Hx = b`` for the objective ``½‖x‖²``); ``−(Hᵀν)[~active] ≥ 0`` are those of the clamps.
    - ``converged``: ``()`` bool, false if ``max_iterations`` ran out before the KKT conditions held.
    """

    x: Float[Array, " m"]
    residual: Float[Array, " k"]
    active: Bool[Array, " m"]
    iterations: Int[Array, ""]
    multipliers: Float[Array, " k"]
    converged: Bool[Array, ""]


def _solve(H, b, active, rcond):
    """Minimum-norm (least-squares) solution on the ``active`` columns and its multipliers."""
    Hm = H * active[None, :].astype(H.dtype)
    Hp = jnp.linalg.pinv(Hm, rtol=rcond)  # (m, k) = Hmᵀ (Hm Hmᵀ)⁻¹ at full row rank (eq. 6)
    x = Hp @ b
    nu = Hp.T @ x  # (Hm Hmᵀ)⁺ b, since pinv(Hm Hmᵀ) = Hpᵀ Hp
    return x, nu


def clamped_pseudoinverse(
    H: Float[ArrayLike, "k m"],
    b: Float[ArrayLike, " k"],
    *,
    nonnegative: Bool[ArrayLike, " m"] | None = None,
    max_iterations: int | None = None,
    rtol: float | None = None,
) -> PseudoinverseSolution:
    """Least-norm solution of ``H x = b`` with ``x[nonnegative] ≥ 0`` (Blajer et al. 2007, eq. 6 with clamping).

    Args:
        H: ``(k, m)`` the distribution matrix (Blajer et al. 2007: ``H = B̄ᵀM̄⁻¹B̄`` in the flying phase,
            eq. 4, ``H = D̄ᵀB̄`` in the support phase, eq. 8), usually ``k ≤ m``.
        b: ``(k,)`` right-hand side (Blajer et al. 2007: ``h``).
        nonnegative: ``(m,)`` bool, the entries that may not be negative (muscle forces);
            default all. Entries with ``False`` (torque actuators) are never clamped.
        max_iterations: cap on the solves that find the active set (static; default ``3 m + 2``:
            at most ``m`` clamping rounds plus the release phase). ``converged`` reports whether
            it sufficed.
        rtol: relative tolerance (static) for a negative entry and for a release, relative to the
            largest entry of the solve / of ``Hᵀν``; default ``1000 · eps`` of the dtype. Also the
            cut-off of the SVD pseudoinverse (relative to the largest singular value).

    Returns:
        `PseudoinverseSolution` (``x``, ``residual = Hx − b``, ``active``, ``iterations``,
        ``multipliers``, ``converged``).

    Raises:
        ValueError: ``H`` not 2-D, ``b`` or ``nonnegative`` of the wrong length (before tracing);
        NaN/inf in ``H`` or ``b`` raise at run time (`equinox.error_if`).

    Works under `jax.jit`, `jax.vmap` (a batch of systems) and `jax.grad` (through the final solve
    on the found active set).
    """
    H = jnp.asarray(H)
    b = jnp.asarray(b)
    if H.ndim != 2:
        raise ValueError(f"H must be a (k, m) matrix, got shape {H.shape}; batch with jax.vmap")
    k, m = H.shape
    if b.shape != (k,):
        raise ValueError(f"b has shape {b.shape}, expected {(k,)} to match H {H.shape}")
    dtype = jnp.result_type(H, b, float)
    H = H.astype(dtype)
    b = b.astype(dtype)
    if nonnegative is None:
        nonneg = jnp.ones((m,), bool)
    else:
        nonneg = jnp.asarray(nonnegative)
        if nonneg.shape != (m,) or nonneg.dtype != bool:
            raise ValueError(f"nonnegative must be a ({m},) bool mask, got {nonneg.dtype} {nonneg.shape}")
    H = eqx.error_if(H, ~jnp.all(jnp.isfinite(H)), "clamped_pseudoinverse: H contains NaN or inf")
    b = eqx.error_if(b, ~jnp.all(jnp.isfinite(b)), "clamped_pseudoinverse: b contains NaN or inf")
    max_it = 3 * m + 2 if max_iterations is None else int(max_iterations)
    tol = 1000.0 * jnp.finfo(dtype).eps if rtol is None else float(rtol)
    rcond = None if rtol is None else tol

    Hs, bs = jax.lax.stop_gradient(H), jax.lax.stop_gradient(b)
    onehot = jnp.eye(m, dtype=bool)
    bscale = jnp.max(jnp.abs(bs))
    hscale = jnp.max(jnp.abs(Hs))

    def body(state):
        x, active, it, phase2, _, _, blocked, last = state
        z, nu = _solve(Hs, bs, active, rcond)
        zscale = jnp.max(jnp.abs(z))
        # a release that left the released entry at zero (degenerate multipliers): undo it and
        # block that entry until a release succeeds (Lawson & Hanson's anti-cycling rule)
        z_last = jnp.where(last >= 0, z[jnp.maximum(last, 0)], jnp.inf)
        failed = z_last <= tol * zscale
        succeeded = (last >= 0) & ~failed
        blocked = jnp.where(succeeded, False, blocked)
        neg = nonneg & active & (z < -tol * zscale)
        any_neg = jnp.any(neg)
        # (1) Blajer: clamp every negative entry at once
        active_blajer = active & ~neg
        # (2) from a sign-feasible x: step towards z until the first entry reaches zero
        ratio = jnp.where(neg, x / jnp.where(neg, x - z, 1.0), jnp.inf)
        first = jnp.argmin(ratio)
        alpha = jnp.clip(ratio[first], 0.0, 1.0)
        x_step = x + alpha * (z - x)
        hit = nonneg & active & (x_step <= tol * zscale)
        active_lh = active & ~hit & ~onehot[first]
        x_lh = jnp.where(active_lh, x_step, 0.0)
        # no negative entry: release the clamped entry that would lower the objective most —
        # with b reached, the most negative clamp multiplier −(Hᵀν)_j; with b out of reach
        # (Blajer over-clamped, or b infeasible), the steepest descent of ½‖Hx − b‖², Hᵀ(b − Hz)
        res = bs - Hs @ z
        reached = jnp.max(jnp.abs(res)) <= 10.0 * tol * (bscale + hscale * zscale)
        w = jnp.where(reached, Hs.T @ nu, Hs.T @ res)
        cand = nonneg & ~active & ~blocked & (w > tol * jnp.max(jnp.abs(w)) * m)
        release = jnp.any(cand)
        j = jnp.argmax(jnp.where(cand, w, -jnp.inf))
        active_rel = active | (onehot[j] & release)

        x_new = jnp.where(any_neg & phase2, x_lh, z)
        active_new = jnp.where(any_neg, jnp.where(phase2, active_lh, active_blajer), active_rel)
        last_new = jnp.where(~any_neg & release, j, -1).astype(jnp.int32)
        done = ~any_neg & ~release
        # the failed-release branch: x unchanged, the entry clamped again and blocked
        onehot_last = onehot[jnp.maximum(last, 0)]
        x_new = jnp.where(failed, x, x_new)
        active_new = jnp.where(failed, active & ~onehot_last, active_new)
        blocked = jnp.where(failed, blocked | onehot_last, blocked)
        last_new = jnp.where(failed, -1, last_new).astype(jnp.int32)
        done = done & ~failed
        return (x_new, active_new, it + 1, phase2 | ~any_neg, done, done & reached, blocked, last_new)

    def cond(state):
        return (~state[4]) & (state[2] < max_it)

    init = (
        jnp.zeros((m,), dtype),
        jnp.ones((m,), bool),
        jnp.zeros((), jnp.int32),
        jnp.zeros((), bool),
        jnp.zeros((), bool),
        jnp.zeros((), bool),
        jnp.zeros((m,), bool),
        -jnp.ones((), jnp.int32),
    )
    _, active, iterations, _, _, converged, _, _ = jax.lax.while_loop(cond, body, init)

    x, nu = _solve(H, b, active, rcond)  # differentiable solve on the final active set
    x = jnp.where(nonneg, jnp.maximum(x, 0.0), x)  # round-off below zero on a converged set
    x = jnp.where(active, x, 0.0)
    return PseudoinverseSolution(
        x=x,
        residual=H @ x - b,
        active=active,
        iterations=iterations,
        multipliers=nu,
        converged=converged,
    )
