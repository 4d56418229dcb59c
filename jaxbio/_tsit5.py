"""jaxbio's own adaptive Tsit5 loop with a stored-stage discrete adjoint (`solve`), what
`jaxbio.simulate` runs with ``adjoint=jaxbio.simulation.StoredAdjoint()``.

Why not Diffrax's loop (issue #19, item 1: gradients through batches of simulations in learning
pipelines): Diffrax's `RecursiveCheckpointAdjoint` traces the vector field into its step, its
checkpointed reverse loop and the rest of its machinery, and recomputes steps between
checkpoints. Here the forward loop's body is one step whose six stages are one `lax.fori_loop`
(the field traced once), and the reverse loop's body is one step whose stage VJPs are one
`lax.fori_loop` (the field's VJP traced once). The first value-and-gradient call (cold) and the
step are both faster than through Diffrax's loop, the forward passes alike (benchmarks/learning.py;
benchmarks/README.md, "The first compile of a training step" and benchmarks/README.md, "Measurements behind design choices"). The forward loop is an
`equinox.internal.while_loop` with buffers, the loop Diffrax itself runs: under `jax.vmap` a plain
`lax.while_loop` selects every carried buffer with the batched predicate at every iteration
(the stored stages of a 5-state toy at batch 32: a gradient several times slower; measured, see
benchmarks/README.md).

The solve is Diffrax's default: the Tsit5 tableau (`diffrax.Tsit5.tableau`), the PID controller's
defaults (integral only, safety 0.9, step factors in ``[1, 10]`` on acceptance and ``[0.2, 0.9]``
on rejection, RMS error norm scaled by ``atol + rtol·max(|x|, |x1|)``, no gradient through the
step size), saves by Tsit5's continuous extension (`dense_weights`), and a first step of 0.01 s:
inside `diffrax.diffeqsolve` the controller's initial-step selection sees a wrapped term, not an
`ODETerm`, and returns 0.01 (diffrax 0.7, ``_select_initial_step``); too long a first step is
rejected and shortened like any other. So the steps and the saved states are those of
``diffeqsolve(..., dt0=0.01, stepsize_controller=PIDController(rtol, atol))`` to round-off
(tests/test_tsit5.py: 1e-12). A step evaluates the dense output at its own save times only
(a contiguous run of the sorted ``ts``, `_each_save`), and the reverse pass gathers their
cotangents the same way.

Reverse mode (an `equinox.filter_custom_vjp`): the forward pass stores every accepted step's
end state, end time, length and seven stages ``k_i``; the reverse pass runs the exact adjoint of
the Runge–Kutta map ``x1 = x + h Σ b_i k_i``, ``k_i = f(t + c_i h, x + h Σ_j a_ij k_j)`` and of
the dense output ``x(t + θh) = x + h Σ b_i(θ) k_i``, stage by stage, last to first:
``κ_i = h b_i λ + h Σ_s b_i(θ_s) ȳ_s + h Σ_{j>i} a_ji ξ_j``, ``ξ_i = ∂f/∂xᵀ κ_i`` at stage
``i``'s input, ``λ ← λ + Σ_s ȳ_s + Σ_i ξ_i`` (the discretised solve differentiated exactly, the
gradient of Diffrax's adjoint for the same steps). A field that offers ``at_output(k)`` (itself,
linearised where its value ``k`` is known) is linearised at each stored stage instead of
recomputing it: the velocity form's takes ``q̈`` from the stage and skips the bias recursion
(`jaxbio.dynamics.forward.accelerations_at`; a shorter first value-and-gradient call).
A field that also offers ``with_aux(t, x) -> (k, aux)`` and ``aux_init(x)`` has its ``aux`` kept
per stage by the stored forward pass and handed back as ``at_output(k, aux)``: the velocity form
keeps the Cholesky factor of ``M + J`` (up to 12 coordinates, ``nv(nv+1)/2`` numbers), so the
reverse pass runs neither the mass matrix nor its factorisation (a shorter first
value-and-gradient call; benchmarks/README.md, "seventh pass").
Only the field's arrays that are differentiated enter its VJP (under `jax.vmap` the wrench
recursion then transposes by its batch-last adjoint, `jaxbio.dynamics.batch_last.vmapped_by`).
Forward mode is not supported (as with Diffrax's `RecursiveCheckpointAdjoint`); the times ``t0``,
``ts``, ``t1`` are not differentiated.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

_TABLEAU = diffrax.Tsit5.tableau
STAGES = 7  # six stages enter the step, the seventh is f at its end (first-same-as-last)
_A = np.zeros((STAGES, STAGES))
for _i, _row in enumerate(_TABLEAU.a_lower):
    _A[_i + 1, : len(_row)] = _row
_C = np.concatenate([[0.0], _TABLEAU.c])
_B = np.concatenate([np.asarray(_TABLEAU.b_sol)[: STAGES - 1], [0.0]])
_E = np.asarray(_TABLEAU.b_error)
FIRST_STEP = 0.01  # s: the first step Diffrax's PIDController takes in `diffeqsolve` (see module doc)
SUCCESSFUL, MAX_STEPS, NONFINITE = 0, 1, 2  # `solve`'s status codes


def _with_aux(field, t, x):
    """``(field(t, x), aux)``: with ``aux`` what the field keeps for its linearisation
    (``field.with_aux``, e.g. the velocity form's Cholesky factor of ``M + J``; its structure
    ``field.aux_init(x)``, zeros), None when it keeps nothing."""
    with_aux = getattr(field, "with_aux", None)
    return (field(t, x), None) if with_aux is None else with_aux(t, x)


def _aux_init(field, x):
    """Zeros with the structure of ``field``'s ``aux`` at a state like ``x`` (`_with_aux`)."""
    init = getattr(field, "aux_init", None)
    return None if init is None else init(x)


def _at(field, k, aux):
    """``field`` linearised where its value is known to be ``k`` (``field.at_output(k, aux)``, a
    field that returns ``k`` and differentiates as ``field`` at that point, when it offers one:
    then the reverse pass does not recompute what the forward pass stored), else ``field``."""
    at = getattr(field, "at_output", None)
    if at is None:
        return field
    return at(k) if aux is None else at(k, aux)


def _rms(v, scale):
    return jnp.sqrt(jnp.mean((v / scale) ** 2))


def _combine(weights, K):
    """``weights @ K`` (``(…, 7) @ (7, d)``) as a multiply-and-sum: under `jax.vmap` a `dot` of
    these sizes is one small matrix product per trajectory on the CPU (the dense output alone
    was a large part of a double-pendulum solve at batch 32; benchmarks/README.md, "Measurements behind design choices")."""
    return jnp.sum(weights[..., :, None] * K, axis=-2)


def dense_weights(theta):
    """``b(θ)`` ``(…, 7)``: Tsit5's continuous extension ``x(t + θh) = x + h Σ_i b_i(θ) k_i``
    (Tsitouras 2011, the interpolant Diffrax's Tsit5 saves ``ts`` by), ``θ`` in ``[0, 1]``;
    ``b(1)`` is the step's own weights and ``b_7(1) = 0``."""
    t = jnp.asarray(theta)[..., None]
    t2 = t * t
    return jnp.concatenate(
        [
            -1.0530884977290216 * t * (t - 1.3299890189751412) * (t2 - 1.4364028541716351 * t + 0.7139816917074209),
            0.1017 * t2 * (t2 - 2.1966568338249754 * t + 1.2949852507374631),
            2.490627285651252793 * t2 * (t2 - 2.38535645472061657 * t + 1.57803468208092486),
            -16.54810288924490272 * (t - 1.21712927295533244) * (t - 0.61620406037800089) * t2,
            47.37952196281928122 * (t - 1.203071208372362603) * (t - 0.658047292653547382) * t2,
            -34.87065786149660974 * (t - 1.2) * (t - 0.666666666666666667) * t2,
            2.5 * (t - 1) * (t - 0.6) * t2,
        ],
        axis=-1,
    )


def _theta(s, t, h):
    """θ of the save time ``s`` inside the step ``(t, t + h]``."""
    return (s - t) / jnp.where(h > 0, h, 1)


def _each_save(ts, start, more, body, carry):
    """``body(k, carry)`` for ``k = start, start ± 1, …`` while ``more(k)``: the save times inside
    one step, a contiguous run of the sorted ``ts`` (a step holds a few of them at most), so that a
    step's dense output costs what its saves need, not ``len(ts)`` evaluations (under `jax.vmap`
    the run is as long as the batch's longest)."""
    return jax.lax.while_loop(lambda c: more(c[0]), lambda c: body(*c), (start, carry))


def _forward(field, x0, t0, ts, t1, rtol, atol, max_steps: int, store: int):
    """The forward loop: ``(ys (T, d), status, counts, stored)``; ``counts`` is ``(accepted,
    attempted)`` steps; ``stored`` is ``(n, X (store, d), K (store, 7, d), T1 (store,), H
    (store,), AUX)`` when ``store`` (the number of steps kept, ≥ 1) is nonzero: the end state,
    the stages, the end time and the length of the first ``store`` accepted steps, and the
    field's ``aux`` at each stage (`_with_aux`; leaves ``(store, 7, …)``, None when it keeps
    nothing), ``n`` the number of accepted steps (more than ``store`` when the buffer ran out);
    else None. ``max_steps`` bounds the steps taken either way."""
    dtype = x0.dtype
    A, C, B, E = (jnp.asarray(a, dtype) for a in (_A, _C, _B, _E))
    ys = jnp.where((ts <= t0)[:, None], x0, jnp.full(ts.shape + x0.shape, jnp.nan, dtype))
    size = store
    # the field's aux per stage (only when storing: the pass that is not differentiated needs none)
    aux = jax.tree_util.tree_map(
        lambda a: jnp.zeros((STAGES,) + a.shape, a.dtype), _aux_init(field, x0) if store else None
    )
    stored = (
        jnp.zeros((size,) + x0.shape, dtype),
        jnp.zeros((size, STAGES) + x0.shape, dtype),
        jnp.zeros((size,), dtype),
        jnp.zeros((size,), dtype),
        jax.tree_util.tree_map(lambda a: jnp.zeros((size,) + a.shape, a.dtype), aux),
    )
    tiny = 1e3 * jnp.finfo(dtype).eps * jnp.maximum(jnp.maximum(jnp.abs(t0), jnp.abs(t1)), t1 - t0)

    def cond(c):
        t, _, _, _, _, attempts, _, stop, _, _, _ = c
        return (t < t1) & (attempts < max_steps) & ~stop

    def body(c):
        t, x, K, aux, h, attempts, n, stop, saved, ys, stored = c
        ends = t + h >= t1
        hs = jnp.where(ends, t1 - t, h)  # the last step ends at t1 exactly

        def stage(i, Ka):
            K, aux = Ka
            ti, xi = t + C[i] * hs, x + hs * _combine(A[i], K)
            if not store:
                return K.at[i].set(field(ti, xi)), aux
            # materialised once: else XLA's CPU backend fuses the field into the write below and
            # recomputes it for every element it writes (the Cholesky factor's, say)
            k, a = jax.lax.optimization_barrier(_with_aux(field, ti, xi))
            return K.at[i].set(k), jax.tree_util.tree_map(lambda s, v: s.at[i].set(v), aux, a)

        # stage 0 of the first step is f(t0, x0); later steps reuse their predecessor's last stage
        K, aux = jax.lax.fori_loop(jnp.where(attempts == 0, 0, 1), STAGES, stage, (K, aux))
        x1 = x + hs * _combine(B, K)  # = the last stage's input (its row of A is B)
        x1_finite = jnp.all(jnp.isfinite(x1))
        err = _rms(hs * _combine(E, K), atol + rtol * jnp.maximum(jnp.abs(x), jnp.abs(jnp.where(x1_finite, x1, x))))
        keep = err < 1
        factor = 0.9 * jnp.where(err == 0, 1.0, err) ** (-0.2)
        factor = jnp.where(jnp.isfinite(factor), factor, 0.2)
        factor = jax.lax.stop_gradient(jnp.where(keep, jnp.clip(factor, 1.0, 10.0), jnp.clip(factor, 0.2, 0.9)))
        bad = (~x1_finite & (hs <= tiny)) | ~jnp.isfinite(hs)
        ok = keep & ~bad
        # the step's scalars materialised once (see `stage`): they steer every write below
        x1, hs, factor, ok = jax.lax.optimization_barrier((x1, hs, factor, ok))
        if store:
            X, KK, T1, H, AUX = stored
            put = ok & (n < size)  # past the buffer the solve goes on, its steps not kept
            slot = jnp.minimum(n, size - 1)
            stored = (
                X.at[slot].set(x1, pred=put),
                KK.at[slot].set(K, pred=put),
                T1.at[slot].set(t + hs, pred=put),
                H.at[slot].set(hs, pred=put),
                # aux first: inside the loop AUX's leaves are equinox's buffers, not arrays
                jax.tree_util.tree_map(lambda v, s: s.at[slot].set(v, pred=put), aux, AUX),
            )

        def save(k, ys):  # the save times in (t, t + hs], from the first not saved yet
            y = x + hs * _combine(dense_weights(_theta(ts[k], t, hs)), K)
            return k + 1, ys.at[k].set(y)

        saved, ys = _each_save(
            ts, saved, lambda k: ok & (k < ts.shape[0]) & (ts[jnp.minimum(k, ts.shape[0] - 1)] <= t + hs), save, ys
        )
        last = jax.tree_util.tree_map(lambda s: jnp.where(ok, s.at[0].set(s[STAGES - 1]), s), (K, aux))
        return (
            jnp.where(ok, jnp.where(ends, t1, t + hs), t),
            jnp.where(ok, x1, x),
            *last,
            hs * factor,
            attempts + 1,
            n + ok,
            stop | bad,
            saved,
            ys,
            stored,
        )

    c = (
        t0,
        x0,
        jnp.zeros((STAGES,) + x0.shape, dtype),
        aux,
        jnp.asarray(FIRST_STEP, dtype),
        jnp.int32(0),
        jnp.int32(0),
        jnp.bool_(False),
        jnp.sum(ts <= t0, dtype=jnp.int32),  # the saves before the first not yet written
        ys,
        stored,
    )
    t, _, _, _, _, attempts, n, stop, _, ys, stored = eqxi.while_loop(
        cond, body, c, kind="lax", buffers=lambda c: c[10]
    )
    status = jnp.where(t >= t1, SUCCESSFUL, jnp.where(stop, NONFINITE, MAX_STEPS))
    return ys, status, (n, attempts), ((n,) + stored if store else None)


def overflow_message(stored_steps: int) -> str:
    """The error of a gradient through a solve longer than the steps its reverse pass keeps."""
    return (
        f"simulate: the gradient needs every step of the solve, but it took more than the "
        f"{stored_steps} steps kept for reverse mode; pass "
        f"adjoint=jaxbio.simulation.StoredAdjoint(steps=N) with a larger N, or "
        f"adjoint=diffrax.RecursiveCheckpointAdjoint() (less memory, slower)"
    )


@eqx.filter_custom_vjp
def solve(diff, t0, ts, t1, rtol, atol, max_steps: int, stored_steps: int | None = None, throw: bool = True):
    """``(ys (T, d), status, (accepted, attempted))``: ``x(ts)`` of ``dx/dt = field(t, x)`` from
    ``x(t0) = x0`` to ``t1``, with ``diff = (field, x0)`` (``field`` a pytree callable, e.g. an
    `equinox.Module`; ``x0`` ``(d,)``), ``ts`` ``(T,)`` increasing in ``[t0, t1]`` (saved by the
    dense output); ``rtol``, ``atol`` scalars; ``max_steps`` the step budget (accepted and
    rejected steps); ``stored_steps`` (default ``max_steps``) the number of accepted steps kept
    under reverse mode (memory: ``(8·d + 7·a + 2)·stored_steps`` numbers per solve, ``a`` the
    size of the field's ``aux``, 0 for none). A differentiated solve that takes more accepted
    steps than that has the same values, and a NaN gradient (``throw=False``) or an
    `equinox.error_if` naming the cause (`overflow_message`). ``status``: `SUCCESSFUL`,
    `MAX_STEPS` or `NONFINITE`; rows not reached are NaN. Reverse-mode differentiable in
    ``diff`` (see the module docstring)."""
    field, x0 = diff
    ys, status, counts, _ = _forward(field, x0, t0, ts, t1, rtol, atol, max_steps, store=0)
    return ys, status, counts


def _kept(max_steps: int, stored_steps: int | None) -> int:
    return max_steps if stored_steps is None else max(1, min(max_steps, stored_steps))


@solve.def_fwd
def _solve_fwd(perturbed, diff, t0, ts, t1, rtol, atol, max_steps, stored_steps=None, throw=True):
    field, x0 = diff
    ys, status, counts, stored = _forward(
        field, x0, t0, ts, t1, rtol, atol, max_steps, store=_kept(max_steps, stored_steps)
    )
    return (ys, status, counts), stored


@solve.def_bwd
def _solve_bwd(stored, cotangents, perturbed, diff, t0, ts, t1, rtol, atol, max_steps, stored_steps=None, throw=True):
    """Steps ``n, n − 1 … 0``, stages 5 … 0 each: a step's seventh stage ``f(t_{j+1}, x_{j+1})``
    (in the saves inside it) is the next step's stage 0, so its cotangent joins stage 0 of step
    ``j + 1``; step ``n`` (length 0) carries only the last step's. A solve with more accepted
    steps than were kept gets NaN (or raises, ``throw``)."""
    ys_bar = cotangents[0]
    field, x0 = diff
    n_all, X, KK, T1, H, AUX = stored
    kept = X.shape[0]
    overflow = n_all > kept
    n = jnp.minimum(n_all, kept)
    dtype = x0.dtype
    A, C, B = (jnp.asarray(a, dtype) for a in (_A, _C, _B))
    ys_bar = jnp.where(jnp.isfinite(ys_bar), ys_bar, 0.0)  # rows not reached carry no gradient
    moving, fixed = eqx.partition(field, perturbed[0])
    per_step = STAGES - 1  # stages 0..5 enter x1 = x + h Σ b_i k_i

    def step(j):
        """start time, start state, length, stages of step ``j`` (``j = n``: length 0)."""
        before = jnp.maximum(j - 1, 0)
        t = jnp.where(j == 0, t0, T1[before])
        x = jnp.where(j == 0, x0, X[before])
        last = jnp.maximum(jnp.minimum(j, n - 1), 0)
        return t, x, jnp.where(j < n, H[last], 0), KK[last], jax.tree_util.tree_map(lambda s: s[last], AUX)

    def saved(j, k):
        """``(Σ_s ys̄_s, h Σ_s b(θ_s) ys̄_s (7, d))`` over the saves inside step ``j ≥ 0``: those
        before index ``k`` whose time is past the step's start (the saves of later steps are at
        ``k`` and after); and the index of the step's first save."""
        t, _, h, _, _ = step(j)

        def add(k, acc):
            direct, through = acc
            s = k - 1
            weights = dense_weights(_theta(ts[s], t, h))
            return k - 1, (direct + ys_bar[s], through + weights[:, None] * ys_bar[s])

        zero = (jnp.zeros_like(x0), jnp.zeros((STAGES,) + x0.shape, dtype))
        k, (direct, through) = _each_save(
            ts, k, lambda k: (j >= 0) & (k > 0) & (ts[jnp.maximum(k - 1, 0)] > t), add, zero
        )
        return (direct, h * through), k

    def body(c):
        j, lam, grad, (direct, through), k = c
        t, x, h, K, aux = step(j)
        # the field's value (and aux) at each stage's input: its stored stage, except at step n
        # (length 0), whose one stage with a cotangent (0) is the last step's seventh (the other
        # stages' cotangents are 0 there)
        out, aux = jax.tree_util.tree_map(lambda s: jnp.where(j < n, s, s.at[0].set(s[STAGES - 1])), (K, aux))
        # κ_i = x̄'s share in stage i: from λ = x̄ at the step's end, from the saves inside the step,
        # at stage 0 from the previous step's seventh stage; λ becomes x̄ at the step's start
        previous, k = saved(j - 1, k)
        kappa = (h * B[:, None] * lam + through).at[0].add(jnp.where(j > 0, previous[1][STAGES - 1], 0))

        def stage(r, c):
            lam, kappa, grad = c
            i = per_step - 1 - r
            at_i = jax.tree_util.tree_map(lambda s: s[i], aux)
            _, pull = jax.vjp(
                lambda m, z: _at(eqx.combine(m, fixed), out[i], at_i)(t + C[i] * h, z),
                moving,
                x + h * _combine(A[i], K),
            )
            g, xi_bar = pull(kappa[i])
            return lam + xi_bar, kappa + h * A[i][:, None] * xi_bar, jax.tree_util.tree_map(jnp.add, grad, g)

        lam, _, grad = jax.lax.fori_loop(0, per_step, stage, (lam + direct, kappa, grad))
        return j - 1, lam, grad, previous, k

    # step n (length 0) holds no save; the saves up to the end of the last kept step are the solve's
    end = jnp.where(n > 0, T1[jnp.maximum(n - 1, 0)], t0)
    nothing = (jnp.zeros_like(x0), jnp.zeros((STAGES,) + x0.shape, dtype))
    c = (
        n,
        jnp.zeros_like(x0),
        jax.tree_util.tree_map(jnp.zeros_like, moving),
        nothing,
        jnp.sum(ts <= end, dtype=jnp.int32),
    )
    _, lam, grad, _, _ = jax.lax.while_loop(lambda c: c[0] >= 0, body, c)
    lam = lam + jnp.sum(jnp.where((ts <= t0)[:, None], ys_bar, 0.0), axis=0)
    out = jax.tree_util.tree_map(lambda g: jnp.where(overflow, jnp.nan, g), (grad, lam))
    if throw:
        out = eqx.error_if(out, overflow, overflow_message(kept))
    return out
