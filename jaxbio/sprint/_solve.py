"""Shared least-squares machinery: Levenberg–Marquardt, Laplace covariance, splits padded into one
batch.

The Levenberg–Marquardt loop is written here rather than taken from optimistix because it still
compiles and runs several times faster on the sprint fit (one forward-mode Jacobian per iteration,
the model traced once; a rejected step costs one Jacobian, and it needs fewer steps to its
stopping test), measured with ``python benchmarks/sprint_solver.py`` against
``optimistix.least_squares(..., LevenbergMarquardt(rtol=1e-8, atol=1e-10))``; both converge on
every race to the same optimum (½χ² within 3e-8). Numbers: benchmarks/README.md, "Measurements behind design choices".
Its results are also checked against scipy's ``least_squares`` in ``tests/test_sprint.py``.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio._linalg import cholesky_solve


def decrement(r, J):
    """Gauss–Newton decrement ``gᵀ(JᵀJ)⁻¹g`` with ``g = Jᵀr``: twice the cost decrease a full
    Gauss–Newton step would still give — a scale-free stationarity measure."""
    g = J.T @ r
    A = J.T @ J
    dA = jnp.diag(A)
    return g @ cholesky_solve(A + jnp.diag(1e-12 * jnp.max(dA) + 1e-300 + 0 * dA), g)


def converged(r, J, tol: float = 1e-6):
    """True where the result is stationary: ``decrement ≤ tol (1 + cost)``."""
    return decrement(r, J) <= tol * (1.0 + 0.5 * jnp.sum(r * r))


def least_squares(
    residuals, theta0, args, *, max_steps: int = 100, rtol: float = 1e-8, atol: float = 1e-10, template=None
):
    """Levenberg–Marquardt on ``residuals(theta, args) -> (r (m,), aux)``.

    One forward-mode Jacobian per iteration (the model is traced once, which keeps compile time
    low): a rejected step is undone and retried with a larger damping. Converged when, at an
    accepted point, the Gauss–Newton decrement ``gᵀ(JᵀJ)⁻¹g`` (the decrease a full step would
    still give) is below ``rtol (1 + cost)``, or an almost undamped step is below ``rtol``/``atol``;
    callers confirm with the gradient at the result.
    Pure JAX (``lax.while_loop``); vmap gives a batch of fits.

    ``template``: ``(r, aux)`` arrays of the output shapes (saves an abstract trace of the model).
    Returns ``(theta (k,), r (m,), J (m, k), aux, converged bool, steps)`` at the best point.
    """
    st = jax.lax.while_loop(
        lambda st: (~st["done"]) & (st["i"] < max_steps),
        lm_step(residuals, args, rtol, atol),
        lm_init(residuals, theta0, args, template),
    )
    return lm_result(st)


def lm_init(residuals, theta0, args, template=None) -> dict:
    """The state of ``least_squares`` before its first iteration, which evaluates ``theta0`` itself
    (cost inf, so it is accepted): the model is traced once, inside the loop. ``template``: as
    ``least_squares``'."""
    k = theta0.shape[0]
    m_out = jax.eval_shape(lambda t: residuals(t, args), theta0) if template is None else template
    zeros = lambda sds: jnp.zeros(sds.shape, sds.dtype)  # noqa: E731
    r0 = zeros(m_out[0])
    aux0 = jax.tree_util.tree_map(zeros, m_out[1])
    return dict(
        best=theta0,
        r=r0,
        J=jnp.zeros(r0.shape + (k,), theta0.dtype),
        aux=aux0,
        cost=jnp.asarray(jnp.inf, theta0.dtype),
        lam=jnp.asarray(1e-2, theta0.dtype),
        trial=theta0,
        step=jnp.full_like(theta0, jnp.inf),
        done=jnp.asarray(False),
        i=jnp.asarray(0),
        conv=jnp.asarray(False),
    )


def lm_step(residuals, args, rtol: float = 1e-8, atol: float = 1e-10):
    """One Levenberg–Marquardt iteration of ``least_squares``, ``state -> state`` (``lm_init``)."""

    def lin(theta):
        def f(t):
            r, aux = residuals(t, args)
            return r, (r, aux)

        jac, (r, aux) = jax.jacfwd(f, has_aux=True)(theta)
        return r, jac, aux

    def cost_of(r):
        c = 0.5 * jnp.sum(r * r)
        return jnp.where(jnp.isfinite(c), c, jnp.inf)

    def propose(theta, r, J, lam):
        g = J.T @ r
        A = J.T @ J
        dA = jnp.diag(A)
        D = jnp.maximum(dA, 1e-9 * jnp.max(dA) + 1e-12)  # Marquardt scaling, floored for flat directions
        step = cholesky_solve(A + lam * jnp.diag(D), -g)  # no LAPACK call per problem (`jaxbio._linalg`)
        return theta + step, step

    def body(st):
        r, J, aux = lin(st["trial"])
        c = cost_of(r)
        first = st["i"] == 0
        better = (c <= st["cost"]) & jnp.isfinite(c)
        small_step = jnp.max(jnp.abs(st["step"])) <= rtol * (1.0 + jnp.max(jnp.abs(st["best"]))) + atol
        stationary = decrement(r, J) <= rtol * (1.0 + c)
        conv = better & (~first) & (stationary | (small_step & (st["lam"] <= 1.0)))
        pick = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(better, a, b), new, old)  # noqa: E731
        best = pick(st["trial"], st["best"])
        r_b, J_b, aux_b = pick((r, J, aux), (st["r"], st["J"], st["aux"]))
        cost_b = jnp.where(better, c, st["cost"])
        lam = jnp.where(first, st["lam"], jnp.clip(jnp.where(better, st["lam"] / 3.0, st["lam"] * 4.0), 1e-12, 1e12))
        trial, step = propose(best, r_b, J_b, lam)
        stuck = lam >= 1e12
        # stuck: no step decreases the cost any more (rounding level); the caller's gradient test
        # tells an optimum from a failure
        return dict(
            best=best,
            r=r_b,
            J=J_b,
            aux=aux_b,
            cost=cost_b,
            lam=lam,
            trial=trial,
            step=step,
            done=conv | stuck,
            i=st["i"] + 1,
            conv=conv | stuck,
        )

    return body


def lm_result(st):
    """``least_squares``' return value from its final state."""
    ok = st["conv"] & jnp.all(jnp.isfinite(st["best"])) & jnp.isfinite(st["cost"])
    return st["best"], st["r"], st["J"], st["aux"], ok, st["i"]


def lm_resume(residuals, st, args, limit, rtol: float = 1e-8, atol: float = 1e-10) -> dict:
    """``least_squares``' iterations continued from state ``st`` until it is done or has run
    ``limit`` iterations in all (a traced integer): ``lm_result`` of the state is then what
    ``least_squares(max_steps=limit)`` returns, iteration for iteration (``lm_lanes``)."""
    return jax.lax.while_loop(lambda s: (~s["done"]) & (s["i"] < limit), lm_step(residuals, args, rtol, atol), st)


#: problems one round of ``lm_lanes`` advances together, the iterations of a round, and the share
#: of unfinished problems above which a round advances all of them at once
LANES, ROUND_STEPS, FULL_SHARE = 256, 4, 0.35


@functools.lru_cache(maxsize=32)
def _lane_record(key) -> dict:
    """What ``lm_lanes`` remembers of one compiled program (the same mutable dict for every call
    with ``key``; the least recently used of more than 32 is dropped): ``price``, the seconds its
    first full-width round spent compiling (the estimate of what a lane program costs to
    compile), and ``ready``, whether its lane program has been compiled."""
    return {"price": None, "ready": False}


def signature(tree, skip: int = 0) -> tuple:
    """A hashable of what a jitted function's compiled program depends on in ``tree``: its
    structure and each leaf's shape (less the first ``skip`` axes) and dtype."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple((np.shape(x)[skip:], str(jnp.result_type(x))) for x in leaves)


def lm_lanes(
    round_fn,
    state: dict,
    args,
    *,
    max_steps: int,
    width: int = LANES,
    round_steps: int = ROUND_STEPS,
    full_share: float = FULL_SHARE,
    program=None,
    lane_price: float | None = None,
) -> dict:
    """Run many ``least_squares`` problems to the end, all at once while most are running and
    then through a fixed number of lanes.

    A vmapped ``while_loop`` iterates as long as its slowest problem, every problem paying for
    every iteration. Here each round advances problems by ``round_steps`` iterations
    (``round_fn(state, args, limit)``: ``lm_resume`` vmapped and jitted, ``limit`` one per
    problem); between rounds (host numpy):

    - while more than ``full_share`` of the ``N`` problems are unfinished, the round takes all
      ``N`` (finished ones do not move): one wide program that keeps every core busy;
    - after that, ``width`` lanes advance the unfinished problems, a finished problem leaving its
      lane to the next unfinished one: the cost is about the *sum* of the stragglers' iterations,
      not their maximum times the count, and one compiled ``round_fn`` of width ``width`` serves
      every batch size.

    The lane program is a second compilation. Until it exists, the stragglers are first "rented"
    full-width rounds (already compiled) and the lanes "bought" only once those rounds have cost
    as much as compiling costs — the ski-rental rule, at most twice the better of the two choices
    made in hindsight. The price is ``lane_price`` seconds, or else the compile time of this
    program's first full-width round (its time less that of the fastest later one; all of it
    when there was one round, an upper bound), remembered per
    ``program`` (a hashable naming ``round_fn``'s static options) together with whether the
    lanes were bought; with ``program=None`` nothing is remembered and each call measures its own
    price.

    Measured on 1,000 copies of the embedded races × 4 starts: benchmarks/README.md, "Measurements behind design choices".

    ``state``: ``lm_init`` states of ``N`` problems (numpy, leading axis ``N``), ``args`` their
    arguments (pytree, leading axis ``N``); returns the final states (each problem's sequence of
    iterations is that of ``least_squares(max_steps=max_steps)``, whichever rounds ran)."""
    state = jax.tree_util.tree_map(np.array, state)  # writable host copies
    args = jax.tree_util.tree_map(np.asarray, args)
    total = state["i"].shape[0]
    rec = (
        _lane_record((program, width, signature((state, args), skip=1)))
        if program is not None
        else _lane_record.__wrapped__(None)
    )  # unnamed: a fresh record, not kept
    full_times, rent = [], 0.0
    while True:
        todo = np.flatnonzero(~state["done"] & (state["i"] < max_steps))
        if todo.size == 0:
            return state
        tail = todo.size <= full_share * total
        if tail and rec["price"] is None:  # the full-width program's compile, if it compiled here
            rec["price"] = (full_times[0] - min(full_times[1:], default=0.0)) if full_times else 0.0
        price = lane_price if lane_price is not None else rec["price"]
        if not tail or not (rec["ready"] or rent >= price):  # all of them in one round
            t0 = time.perf_counter()
            out = round_fn(state, args, np.minimum(state["i"] + round_steps, max_steps))
            state = jax.tree_util.tree_map(np.array, out)
            dt = time.perf_counter() - t0
            if tail:
                rent += dt
            else:
                full_times.append(dt)
            continue
        rec["ready"] = True
        n = min(todo.size, width)
        lanes = np.concatenate([todo[:n], np.full(width - n, todo[0])])
        limit = np.minimum(state["i"][lanes] + round_steps, max_steps)
        limit[n:] = state["i"][lanes[n:]]  # padding lanes: a copy of a problem that does not move
        take = lambda a: a[lanes]  # noqa: E731
        out = round_fn(jax.tree_util.tree_map(take, state), jax.tree_util.tree_map(take, args), limit)
        out = jax.tree_util.tree_map(lambda a: np.asarray(a)[:n], out)
        state = jax.tree_util.tree_map(lambda a, b: _put(a, todo[:n], b), state, out)


def _put(a, idx, b):
    a[idx] = b
    return a


def _pick_best(out):
    """The solve with the lowest finite cost among ``S`` solves (leading axis of ``out``)."""
    r = out[1]
    cost = 0.5 * jnp.sum(r * r, axis=-1)
    i = jnp.argmin(jnp.where(jnp.isfinite(cost), cost, jnp.inf))
    return jax.tree_util.tree_map(lambda a: a[i], out)


def batched_best_of_starts(residuals, starts, args, **kw):
    """Run ``least_squares`` from each of ``S`` starts for ``B`` problems and keep the lowest cost
    of each: ``starts`` ``(B, S, k)``, ``args`` a pytree batched over ``B`` (leading axis).

    The ``B·S`` solves run as *one* flat ``vmap`` instead of a ``vmap`` of ``vmap``s: batching a
    ``while_loop`` re-traces its body, and nesting doubles that (the sprinter's trace time halves).
    Returns the best solve of each problem, batched over ``B``."""
    B, S = starts.shape[:2]
    flat_args = jax.tree_util.tree_map(lambda a: jnp.repeat(a, S, axis=0), args)
    flat = jax.vmap(lambda t0, a: least_squares(residuals, t0, a, **kw))(
        starts.reshape((B * S,) + starts.shape[2:]), flat_args
    )
    out = jax.tree_util.tree_map(lambda a: a.reshape((B, S) + a.shape[1:]), flat)
    return jax.vmap(_pick_best)(out)


def laplace(r, J, n_data, n_params, n_rows: int):
    """Laplace (Gauss–Newton) covariance at the optimum from the residuals ``r`` and Jacobian ``J``.

    ``cov = s² (JᵀJ)⁻¹`` with ``J`` the Jacobian of the scaled residuals (data rows divided by the
    rounding noise, then prior rows) and ``s² = max(1, χ²_data/(n − k))``: ``s = 1`` when the fit
    is as good as the data allow, inflated when it is not. ``n_data``: fitted splits;
    ``n_params``: parameters; the first ``n_rows`` residuals are the data. Returns
    ``(cov (k, k), chi2_data)``.
    """
    chi2 = jnp.sum(r[:n_rows] ** 2)
    dof = jnp.maximum(n_data - n_params, 1)
    s2 = jnp.maximum(1.0, chi2 / dof)
    cov = s2 * jnp.linalg.pinv(J.T @ J, hermitian=True)
    return cov, chi2
