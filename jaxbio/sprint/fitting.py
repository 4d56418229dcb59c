"""Fitting the sprinter to split times: batched Levenberg–Marquardt through Diffrax, robust starts,
Laplace uncertainty, and a hierarchical prior on the fatigue parameters.

The unknowns are the natural logs ``theta`` of the free parameters (``model.FREE`` by default:
``f0``, ``vmax``, ``energy``), so every estimate is positive. Residuals are split-time errors
divided by the rounding noise of 0.01 s data (``SIGMA_ROUND``), plus an optional Gaussian prior
``sqrt_prec @ (theta − mu)``. Many races are fitted in one ``jax.vmap``ped call (``fit_splits``);
each race runs Levenberg–Marquardt from several starts and keeps the best.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import diffrax
import equinox as eqx
import numpy as np

from jaxbio._validate import as_count
from jaxbio.sprint._solve import (
    LANES,
    _pick_best,
    batched_best_of_starts,
    converged,
    laplace,
    lm_init,
    lm_lanes,
    lm_result,
    lm_resume,
    signature,
)
from jaxbio.sprint.data import SIGMA_ROUND, Splits
from jaxbio.sprint.data import Race, SprintDataError
from jaxbio.sprint._speed_trace import SpeedTrace, speed_residuals
from jaxbio.simulation import Trajectory, crossing_times, hermite
from jaxbio.sprint.model import (
    FATIGUE,
    FREE,
    OFFSETS,
    PARAMETERS,
    UNITS,
    Sprinter,
    simulate_race,
    sprinter_system,
    to_values,
)

#: Tsit5 steps of the simulation inside fits (split times within ~1e-5 s of converged)
N_STEPS = 80


def steps_for(distance: float) -> int:
    """Tsit5 steps for fitting races up to ``distance`` m: ``N_STEPS`` per started 100 m. A 200 m
    race needs 160: where the reserve runs empty (E ≈ 1000 J/kg over 200 m) the throttle makes the
    dynamics stiff and 80 steps miss the 200 m time by seconds, 160 by ~1e-5 s (measured against
    4,000 steps)."""
    return N_STEPS * max(1, int(np.ceil(float(distance) / 100.0 - 1e-9)))


#: multiplicative offsets of the default starts from the model's values (f0, vmax, energy);
#: the centre first. Wider boxes (×0.8) only add starts that wander off (the model then never
#: reaches the finish) and cost iterations in the vmapped loop.
START_FACTORS = ((1.0, 1.0, 1.0), (0.92, 1.08, 0.9), (1.08, 0.93, 1.1), (1.0, 1.0, 0.8))


def default_starts(model: Sprinter, names=FREE, n: int = 4) -> np.ndarray:
    """``(S, k)`` log-parameter starts around ``model``: the model's values times
    ``START_FACTORS`` for ``f0``, ``vmax``, ``energy`` (other names start at the model's value);
    the first ``n``."""
    base = np.asarray(model.log_values(tuple(names)), dtype=float)
    out = []
    for fac in START_FACTORS[:n]:
        f = dict(zip(("f0", "vmax", "energy"), fac))
        out.append(base + np.log([f.get(k, 1.0) for k in names]))
    return np.array(out)


#: losses of the split residuals: ``"squared"`` (least squares) or ``"huber"`` (robust to one bad
#: split, see ``robust_residuals``)
LOSSES = ("squared", "huber")

#: Huber's threshold on the scaled residual (units of ``SIGMA_ROUND``): a split more than
#: ``HUBER_THRESHOLD · SIGMA_ROUND`` = 0.009 s off counts linearly, not quadratically. The clean
#: embedded races have misfits ≤ ~0.015 s (their model RMSE 0.004–0.009 s), a transcription error
#: 0.02–0.05 s.
HUBER_THRESHOLD = 3.0


def robust_residuals(r, loss: str = "huber", c: float = HUBER_THRESHOLD):
    """Residuals ``r̃`` with ``½ r̃² = ρ(r)``, so that least squares on ``r̃`` minimises the robust
    loss ``Σ ρ(r)`` in the same Levenberg–Marquardt (the square-root form of a robust cost, as in
    bundle adjustment, Triggs et al. 2000 §3.3; scipy's ``least_squares(loss=...)`` rescales the
    same way). Huber: ``ρ = ½ r²`` for ``|r| ≤ c``, ``c |r| − ½ c²`` beyond: ``r̃ = sign(r)
    √(2c|r| − c²)``, continuous with a continuous derivative at ``|r| = c``."""
    if loss == "squared":
        return r
    if loss != "huber":
        raise ValueError(f"unknown loss {loss!r}; known: {LOSSES}")
    a = jnp.abs(r)
    big = a > c
    safe = jnp.where(big, a, c)  # double where: finite gradients on both branches
    return jnp.where(big, jnp.sign(r) * jnp.sqrt(2.0 * c * safe - c * c), r)


def _residuals(theta, args, *, names, n_steps, fitness=None, loss="squared"):
    """Scaled residuals ``(L + k,)`` and, as aux, the predicted splits and the simulated race
    (``ts`` ``(n_steps + 1,)`` s and ``q``, ``p``, ``f``: the solver keeps those of its best
    point, so the profile needs no second simulation). ``fitness``: `sprinter_system`'s hook;
    ``loss``: ``LOSSES`` (``robust_residuals``)."""
    base, sp, mu, sqrt_prec = args
    model = base.with_log(names, theta)
    traj = simulate_race(model, sp.duration, sp.wind, n_steps=n_steps, fitness=fitness)
    if isinstance(sp, SpeedTrace):  # the second data kind: speeds at sample times (jaxbio.sprint.trace)
        pred, r = speed_residuals(model, traj, sp, fitness)
    else:
        pred = sp.reaction_time + model.rt_offset + crossing_times(traj, sp.distances)
        r = sp.weights * (pred - sp.times) / SIGMA_ROUND
    r = robust_residuals(r, loss)
    return jnp.concatenate([r, sqrt_prec @ (theta - mu)]), dict(pred=pred, ts=traj.ts, q=traj.q, p=traj.p, f=traj.f)


def residual_template(L: int, k: int, n_steps: int, dtype) -> tuple:
    """Zeros shaped like ``_residuals``' output for ``L`` splits and ``k`` free parameters (the
    solver's ``template``: it saves an abstract trace of the model)."""
    T = n_steps + 1
    return (
        jnp.zeros(L + k, dtype),
        dict(
            pred=jnp.zeros(L, dtype),
            ts=jnp.zeros(T, dtype),
            **{key: jnp.zeros((T, 1), dtype) for key in ("q", "p", "f")},
        ),
    )


def _profile(base, theta, sp, run, *, names, n_grid, fitness=None):
    """Speed and fitness profile of the fitted model on ``n_grid`` distances, from its simulated
    race ``run`` (the residuals' aux at the optimum); after the fit, once."""
    model = base.with_log(names, theta)
    system = sprinter_system(model, sp.wind, fitness)
    traj = Trajectory(
        ts=run["ts"],
        q=run["q"],
        p=run["p"],
        qd=run["p"] / model.mass,
        f=run["f"],
        energy=jnp.zeros_like(run["ts"]),
        result=diffrax.RESULTS.successful,
        solution=None,
    )
    end = jnp.interp(sp.times[-1], traj.ts, traj.q[:, 0]) if isinstance(sp, SpeedTrace) else sp.distances[-1]
    x = jnp.linspace(0.0, end, n_grid)
    s = crossing_times(traj, x)
    acc = jax.vmap(lambda t, y: system.vector_field(t, y)["p"][0])(traj.ts, {"q": traj.q, "p": traj.p, "f": traj.f})
    v = hermite(traj.ts, traj.qd[:, 0], acc / model.mass, s)
    f = jnp.interp(s, traj.ts, system.fitness.value(traj.f[:, 0]))
    # the run itself (s since the reaction, speed, acceleration at the solver's steps): the
    # force–velocity profile of fv_profile.fit_profile is computed from it
    return dict(
        x=x,
        t=s + sp.reaction_time + model.rt_offset,
        v=v,
        f=f,
        run_s=traj.ts,
        run_v=traj.qd[:, 0],
        run_a=acc / model.mass,
    )


def _residual_fn(base, fitness, *, names, n_steps, fitness_static, loss):
    """``(res_of(theta, (splits, mu, sqrt_prec)), fitness)``: one race's ``_residuals`` with the
    model ``base`` shared, and the fitness hook rebuilt from its arrays and static rest."""
    # a fitness hook comes as its arrays (traced) and the rest (static, hashable): eqx.partition
    fitness = None if fitness_static is None else eqx.combine(fitness, fitness_static)
    res = functools.partial(_residuals, names=names, n_steps=n_steps, fitness=fitness, loss=loss)
    return (lambda theta, a: res(theta, (base,) + a)), fitness  # the model is shared; splits and prior per race


def _fit_core_impl(
    base,
    splits,
    starts,
    mu,
    sqrt_prec,
    fitness=None,
    *,
    names,
    n_steps,
    max_steps,
    n_grid,
    fitness_static=None,
    loss="squared",
):
    res_of, fitness = _residual_fn(
        base, fitness, names=names, n_steps=n_steps, fitness_static=fitness_static, loss=loss
    )
    template = residual_template(splits.weights.shape[-1], len(names), n_steps, starts.dtype)
    # all races × starts as one flat vmap (see batched_best_of_starts)
    solved = batched_best_of_starts(res_of, starts, (splits, mu, sqrt_prec), max_steps=max_steps, template=template)
    return _finish(base, splits, solved, fitness, names=names, n_grid=n_grid)


def _finish(base, splits, solved, fitness, *, names, n_grid):
    """Convergence test, Laplace covariance, Hessian and profile of the best solve of each race
    (``solved``: ``least_squares``' outputs batched over races)."""
    theta, r, J, aux, ok, steps = solved
    L, k = splits.weights.shape[-1], len(names)

    def finish(r, J, ok, w):
        cov, chi2 = laplace(r, J, jnp.sum(w), k, L)
        # convergence: the solver's criterion, confirmed by the Gauss–Newton decrement
        return 0.5 * jnp.sum(r * r), ok & converged(r, J), cov, chi2, J.T @ J

    cost, ok, cov, chi2, hess = jax.vmap(finish)(r, J, ok, splits.weights)
    run = {key: aux.pop(key) for key in ("ts", "q", "p", "f")}
    if n_grid:
        prof = functools.partial(_profile, base, names=names, n_grid=n_grid, fitness=fitness)
        aux = {**aux, **jax.vmap(prof)(theta, splits, run)}
    return theta, cost, ok, steps, cov, hess, aux


def _round_impl(
    base, splits, mu, sqrt_prec, state, limit, fitness=None, *, names, n_steps, fitness_static=None, loss="squared"
):
    """One round of ``_solve.lm_lanes``: each lane's LM continued to ``limit`` iterations."""
    res_of, _ = _residual_fn(base, fitness, names=names, n_steps=n_steps, fitness_static=fitness_static, loss=loss)
    return jax.vmap(lambda st, a, lim: lm_resume(res_of, st, a, lim))(state, (splits, mu, sqrt_prec), limit)


def _lanes_finish_impl(base, splits, state, fitness=None, *, names, n_grid, fitness_static=None):
    """``_finish`` of the final ``lm_lanes`` states ``(B, S, …)``: the best start of each race."""
    fitness = None if fitness_static is None else eqx.combine(fitness, fitness_static)
    solved = jax.vmap(lambda st: _pick_best(jax.vmap(lm_result)(st)))(state)
    return _finish(base, splits, solved, fitness, names=names, n_grid=n_grid)


def _fit_lanes(
    quick,
    base,
    splits,
    starts,
    mu,
    sqrt_prec,
    *fitness,
    width,
    names,
    n_steps,
    max_steps,
    n_grid,
    fitness_static=None,
    loss="squared",
):
    """What ``_run_core`` returns, with the ``B·S`` solves run through ``_solve.lm_lanes`` (each
    iterating as ``least_squares`` does, so the same results) instead of one vmapped loop."""
    B, S, k = starts.shape
    rep = lambda a: np.repeat(np.asarray(a), S, axis=0)  # noqa: E731  (race-major, as the starts)
    args = jax.tree_util.tree_map(rep, (splits, mu, sqrt_prec))
    template = residual_template(splits.weights.shape[-1], k, n_steps, starts.dtype)
    state = jax.vmap(lambda t: lm_init(None, t, None, template))(jnp.reshape(starts, (B * S, k)))
    opts = dict(names=names, n_steps=n_steps, fitness_static=fitness_static, loss=loss)
    quick_round = width <= QUICK_COMPILE_MAX_BATCH  # a few lanes: compilation dominates
    program = (quick_round, tuple(sorted(opts.items())), signature((base, fitness)))  # the round's compiled program
    state = lm_lanes(
        lambda st, a, lim: _run_round(quick_round, base, *a, st, lim, *fitness, **opts),
        state,
        args,
        max_steps=max_steps,
        width=width,
        program=program,
    )
    state = jax.tree_util.tree_map(lambda a: a.reshape((B, S) + a.shape[1:]), state)
    return _run_lanes_finish(
        quick, base, splits, state, *fitness, names=names, n_grid=n_grid, fitness_static=fitness_static
    )


_STATIC = ("names", "n_steps", "max_steps", "n_grid", "fitness_static", "loss")

#: XLA options for small batches on CPU (the CLI's handful of races), where compilation dominates:
#: XLA's classic CPU emitters at LLVM -O0 compile the fit of 8 races in 1.1 s instead of 6.1 s and
#: run it in 0.3 s instead of 0.1 s, with identical results (measured on 2 cores, see the note of
#: issue #9). Large batches (``QUICK_COMPILE_MAX_BATCH``) keep XLA's defaults, where run time dominates.
QUICK_COMPILE = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0}
QUICK_COMPILE_MAX_BATCH = 64

_quick_ok = [True]  # False once this XLA has rejected the options (then the defaults are used)


def quick_or_default(quick_fn, default_fn, quick: bool, *args, **kw):
    """``quick_fn(*args, **kw)`` (a ``jax.jit`` with ``compiler_options=QUICK_COMPILE``) when
    ``quick`` and on CPU, else ``default_fn`` (the same function jitted with XLA's defaults), which
    is also used from the first time an XLA rejects the options."""
    if quick and _quick_ok[0] and jax.default_backend() == "cpu":
        try:
            return quick_fn(*args, **kw)
        except jax.errors.JaxRuntimeError as e:  # an XLA without these options: compile normally
            if "compile option" not in str(e):
                raise
            _quick_ok[0] = False
    return default_fn(*args, **kw)


def quick_jit(impl, static_argnames):
    """``run(quick, *args, **kw)``: ``impl`` jitted twice, with ``compiler_options=QUICK_COMPILE``
    and with XLA's defaults, the call choosing between them as `quick_or_default` does (the fit,
    the hierarchical fit's Jacobians, the plot's parameter draws, the learned fatigue term)."""
    default = jax.jit(impl, static_argnames=static_argnames)
    quick_fn = jax.jit(impl, static_argnames=static_argnames, compiler_options=QUICK_COMPILE)
    return lambda quick, *args, **kw: quick_or_default(quick_fn, default, quick, *args, **kw)


_run_core = quick_jit(_fit_core_impl, _STATIC)
_run_round = quick_jit(_round_impl, ("names", "n_steps", "fitness_static", "loss"))
_run_lanes_finish = quick_jit(_lanes_finish_impl, ("names", "n_grid", "fitness_static"))


@functools.lru_cache(maxsize=16)
def _sharded_core(devices: tuple, n_args: int, **kw):
    """`_fit_core_impl` with its races split over ``devices`` (`jaxbio.batching.batch`; the model
    and a fitness hook's arrays shared), one compiled function per options."""
    from jaxbio.batching import batch

    return batch(
        functools.partial(_fit_core_impl, **kw),
        in_axes=(None, 0, 0, 0, 0) + (None,) * (n_args - 5),
        devices=devices,
        vectorized=True,
    )


class FitResult(eqx.Module):
    """Fits of B races (numpy arrays; row ``i`` is race ``i``).

    ``names``: the free parameters; ``theta`` ``(B, k)`` their natural logs; ``values`` ``(B, k)``
    in SI units; ``std`` ``(B, k)`` Laplace standard deviations of the values (delta method,
    ``value · std(log)``), NaN for a parameter the splits do not determine (the Gauss–Newton
    Hessian is singular along it, see ``flat_parameters``); ``cov_log`` ``(B, k, k)``; ``cost``
    ``(B,)`` ½χ² (incl. prior); ``converged`` ``(B,)``: stationary *and* no such flat direction;
    ``steps`` ``(B,)`` LM steps; ``predicted`` ``(B, L)`` split times [s]
    at ``splits.distances``; ``rmse`` ``(B,)`` s over the fitted splits; ``model`` the base
    ``Sprinter`` (fixed parameters); ``splits`` the data; ``profile`` dict of ``(B, n_grid)``
    arrays: ``x`` m (0 to the last split), ``t`` s from the gun, ``v`` m/s, ``f`` fitness; and
    ``(B, n_steps + 1)`` arrays of the simulated run at the solver's steps: ``run_s`` s since the
    reaction, ``run_v`` m/s, ``run_a`` m/s² (`fv_profile.fit_profile`);
    ``hessian`` ``(B, k, k)`` the Gauss–Newton Hessian ``JᵀJ`` of the scaled residuals (prior rows
    included) at the optimum; ``prior`` ``(mu (B, k), sqrt_prec (B, k, k))`` the Gaussian prior
    fitted with (zero precision: none). Set by the model choice (`jaxbio.sprint.selection`), else ``None``:
    ``fixed`` ``(B, k)`` bool, the parameters held at their prior centre in race ``i`` (their
    ``std`` NaN; ``fit_problems`` skips them); ``selection`` a list of ``B`` dicts saying what was
    freed and why (``selection.select``).
    """

    names: tuple = eqx.field(static=True)
    theta: np.ndarray
    std: np.ndarray
    cov_log: np.ndarray
    cost: np.ndarray
    converged: np.ndarray
    steps: np.ndarray
    predicted: np.ndarray
    rmse: np.ndarray
    model: Sprinter
    splits: Splits
    profile: dict
    hessian: np.ndarray | None = None
    prior: tuple | None = None
    fixed: np.ndarray | None = None
    selection: list | None = None

    @property
    def values(self) -> np.ndarray:
        """``(B, k)`` the parameters in SI units (``model.to_values``)."""
        return to_values(self.names, self.theta)

    def freed(self, i: int) -> tuple:
        """The parameters fitted in race ``i`` (all ``names`` unless ``fixed`` says otherwise)."""
        return tuple(n for j, n in enumerate(self.names) if self.fixed is None or not self.fixed[i, j])

    def sprinter(self, i: int) -> Sprinter:
        """The fitted ``Sprinter`` of race ``i``."""
        return self.model.with_log(self.names, jnp.asarray(self.theta[i]))

    def profile_of(self, i: int) -> Profile:
        """Speed and fitness against distance of race ``i``."""
        p = self.profile
        return Profile(x=p["x"][i], t=p["t"][i], v=p["v"][i], fitness=p["f"][i])

    def parameters(self, i: int) -> dict:
        """``{name: (value, std)}`` of race ``i`` in SI units."""
        return {n: (float(self.values[i, j]), float(self.std[i, j])) for j, n in enumerate(self.names)}


#: relative size (to the largest) below which an eigenvalue of the Laplace covariance counts as
#: zero: ``pinv`` drops the directions where the Gauss–Newton Hessian is singular (relative
#: eigenvalue < ~1e-14), leaving a *zero* variance there. Well-posed fits of the embedded races
#: have ratios of 1e-4–1e-3; a parameter that ran off to where it no longer changes the splits
#: (E → 1e11–1e23 J/kg with 1 m or 0.1 m "splits" of a resampled curve) gives 1e-36–1e-61.
FLAT_RTOL = 1e-12


def value_std(names, theta, cov) -> np.ndarray:
    """``(B, k)`` standard deviations in SI units of the fits' coordinates ``theta`` ``(B, k)``
    with covariance ``cov`` ``(B, k, k)``: ``value · std(log)`` (delta method) for a log
    parameter, ``std`` itself for an offset."""
    sd = np.sqrt(np.maximum(np.diagonal(np.asarray(cov), axis1=-2, axis2=-1), 0.0))
    lin = np.array([n in OFFSETS for n in names], dtype=bool)
    return np.where(lin, 1.0, to_values(names, theta)) * sd


def flat_parameters(cov_log: np.ndarray, rtol: float = FLAT_RTOL) -> np.ndarray:
    """``(B, k)`` bool: the parameters with a weight ``> 0.1`` in a direction where the covariance
    ``cov_log`` ``(B, k, k)`` is (numerically) zero or not finite — the splits do not determine
    them, and the Laplace std would read 0."""
    cov = np.asarray(cov_log, dtype=float)
    out = np.ones(cov.shape[:2], dtype=bool)
    ok = np.all(np.isfinite(cov), axis=(1, 2))
    if np.any(ok):
        ev, V = np.linalg.eigh(cov[ok])
        flat = ev <= rtol * np.max(np.abs(ev), axis=-1, keepdims=True)  # (b, k) over eigenvalues
        weight = np.einsum("bjm,bm->bj", V**2, flat.astype(float))  # share of each parameter in them
        out[ok] = weight > 0.01
    return out


#: physically plausible ranges of the fitted parameters (SI units, ``model.UNITS``): a fit outside
#: them is not a valid estimate (``fit_problems``). The embedded elite races give F0/m 15.7–17.1
#: N/kg, v_max 18.9–20.5 m/s and E 960–1040 J/kg; the ranges leave room for any runner (v_max is
#: above the top speed, which is ≥ 5 m/s in any race this model describes), while E > 20 kJ/kg
#: (a reserve lasting over 200 s at the activation power) means no fatigue is visible in the splits.
PLAUSIBLE = {
    "f0": (2.0, 50.0),
    "vmax": (5.0, 50.0),
    "energy": (50.0, 2.0e4),
    # the freed start parameters (`selection`): the impulse rises within 0.5 s, the
    # start the splits imply is within 0.3 s of the file's reaction time (a first split
    # 0.05 s slow on 20 m splits needs +0.26 s; a reaction time of 0.9 s, −0.75 s)
    "tau": (1e-4, 0.5),
    "rt_offset": (-0.3, 0.3),
    "hill_ratio": (0.02, 5.0),
}


def fit_problems(res: FitResult, i: int) -> dict[str, str]:
    """Why race ``i`` of ``res`` is not a valid estimate (empty if it is): ``{parameter: phrase}``
    for a value that is not finite or outside ``PLAUSIBLE`` or a parameter the splits do not
    determine (NaN std, see ``flat_parameters``); else ``{"fit": "the fit did not converge"}`` if
    it did not."""
    out = {}
    for j, n in enumerate(res.names):
        if getattr(res, "fixed", None) is not None and res.fixed[i, j]:
            continue  # held at its prior centre by the model choice: not an estimate
        v, s = float(res.values[i, j]), float(res.std[i, j])
        unit = UNITS.get(n, "")
        lo, hi = PLAUSIBLE.get(n, (0.0, np.inf))
        if not np.isfinite(v):
            out[n] = f"{n} is {v}"
        elif not lo <= v <= hi:
            out[n] = f"{n} = {v:.4g} {unit} is outside the plausible {lo:g}–{hi:g} {unit}"
        elif not (np.isfinite(s) and s > 0):
            out[n] = f"{n} = {v:.4g} {unit} is not determined by the splits (the fit is flat along it)"
    if not out and not bool(res.converged[i]):
        out["fit"] = "the fit did not converge"
    return out


def _round_up(n: int, m: int) -> int:
    return max(m, -(-n // m) * m)


def fit_splits(
    splits: Splits,
    *,
    model: Sprinter | None = None,
    names=FREE,
    starts=None,
    prior=None,
    n_steps: int = N_STEPS,
    max_steps: int = 60,
    n_grid: int = 201,
    quick_compile: bool | None = None,
    fitness=None,
    devices=None,
    loss: str = "squared",
    lanes: bool | int | None = None,
) -> FitResult:
    """Fit every race of ``splits`` (B races) in one vmapped, jitted call.

    ``splits`` may also be a `jaxbio.sprint.trace.SpeedTrace` (speed traces, the second data kind:
    residuals on speed, ``predicted`` speeds [m/s], ``rmse`` m/s; see `trace.fit_traces`, which
    also rescales the covariance by the noise estimated from the residuals).

    ``model``: fixed parameters and the centre of the default starts (``Sprinter()``);
    ``names``: free parameters; ``starts``: ``(S, k)`` or ``(B, S, k)`` log starts
    (``default_starts``); ``prior``: ``None`` or ``(mu (B, k), sqrt_prec (B, k, k))`` in log space.
    ``quick_compile``: compile with ``QUICK_COMPILE`` (faster compile, slower run; CPU only);
    default: for batches of at most ``QUICK_COMPILE_MAX_BATCH`` races. ``fitness``: a modified
    fatigue law, `sprinter_system`'s hook, held fixed (a pytree: its arrays are traced, the rest
    must be hashable, as Equinox modules and their bound methods are).
    ``devices``: split the races over these devices (e.g. ``jax.devices()``: host CPU devices,
    GPUs; `jaxbio.batch`), each fitting its share, XLA's default compiler options; default: one
    device. Same results as one device (each race's solve is independent of the others).
    ``loss``: ``"squared"`` (least squares) or ``"huber"`` (robust to a bad split,
    ``robust_residuals``; compiled separately). ``names`` may include ``"rt_offset"``
    (``model.OFFSETS``: fitted as it is, not as a log).
    ``lanes``: run the ``B·S`` solves ``_solve.LANES`` at a time in rounds of a few iterations,
    refilling the lanes of finished solves (``_solve.lm_lanes``): the same iterations and results,
    but a batch no longer runs as many iterations as its slowest solve (a start that wanders off
    runs to ``max_steps``); default: when there are more than ``LANES`` solves and one device;
    an integer > 1: that many lanes.
    Returns a ``FitResult`` (host numpy).
    """
    if not (lanes is None or isinstance(lanes, bool)):
        lanes = as_count(lanes, "fit_splits: lanes (None, a bool or a number of lanes)", minimum=2)
    if loss not in LOSSES:
        raise ValueError(f"fit_splits: unknown loss {loss!r}; known: {LOSSES}")
    model = Sprinter() if model is None else model
    names = tuple(names)
    B, k = splits.weights.shape[0], len(names)
    starts = default_starts(model, names) if starts is None else np.asarray(starts, dtype=float)
    if starts.ndim == 2:
        starts = np.broadcast_to(starts, (B,) + starts.shape)
    if prior is None:
        mu, sp = np.zeros((B, k)), np.zeros((B, k, k))
    else:
        mu, sp = (np.broadcast_to(np.asarray(a, dtype=float), s) for a, s in zip(prior, ((B, k), (B, k, k))))
    quick = B <= QUICK_COMPILE_MAX_BATCH if quick_compile is None else bool(quick_compile)
    core_args = (model, splits, jnp.asarray(starts), jnp.asarray(mu), jnp.asarray(sp))
    core_kw = dict(names=names, n_steps=n_steps, max_steps=max_steps, n_grid=n_grid)
    if loss != "squared":
        core_kw["loss"] = loss
    if fitness is not None:
        arrays, core_kw["fitness_static"] = eqx.partition(fitness, eqx.is_array)
        core_args += (arrays,)
    if devices is not None and len(devices) > 1:
        core = _sharded_core(tuple(devices), len(core_args), **core_kw)
        theta, cost, ok, steps, cov, hess, aux = core(*core_args)
    elif (starts.shape[0] * starts.shape[1] > LANES) if lanes is None else lanes:
        width = LANES if lanes is None or lanes is True else lanes
        theta, cost, ok, steps, cov, hess, aux = _fit_lanes(quick, *core_args, width=width, **core_kw)
    else:
        theta, cost, ok, steps, cov, hess, aux = _run_core(quick, *core_args, **core_kw)
    theta, cost, ok, steps, cov, hess = map(np.asarray, (theta, cost, ok, steps, cov, hess))
    aux = jax.tree_util.tree_map(np.asarray, aux)
    pred = aux.pop("pred")
    w = np.asarray(splits.weights)
    observed = splits.speeds if isinstance(splits, SpeedTrace) else splits.times  # m/s for a trace
    rmse = np.sqrt(np.sum(w * (pred - np.asarray(observed)) ** 2, axis=1) / np.maximum(w.sum(1), 1))
    std = value_std(names, theta, cov)
    flat = flat_parameters(cov)  # a singular Hessian: std 0 there would look like certainty
    std = np.where(flat, np.nan, std)
    ok = ok & ~flat.any(axis=1)
    return FitResult(
        names=names,
        theta=theta,
        std=std,
        cov_log=cov,
        cost=cost,
        converged=ok,
        steps=steps,
        predicted=pred,
        rmse=rmse,
        model=model,
        splits=splits,
        profile=aux,
        hessian=hess,
        prior=(np.asarray(mu, dtype=float), np.asarray(sp, dtype=float)),
    )


def splits_from_races(
    races: list[Race], fit_until: float | None = None, *, pad_batch: int = 8, pad_length: int = 8
) -> Splits:
    """Pad races into one ``Splits`` batch; splits beyond ``fit_until`` m get weight 0.

    The batch is padded (repeating the first race) to a multiple of ``pad_batch`` and the splits
    to a multiple of ``pad_length`` so that different selections share one compiled fit.
    """
    D = [r.distances for r in races]
    T = [r.times for r in races]
    W = [np.ones(r.n) if fit_until is None else r.until(fit_until).astype(float) for r in races]
    B = _round_up(len(races), pad_batch)
    L = _round_up(max(r.n for r in races), pad_length)
    idx = list(range(len(races))) + [0] * (B - len(races))
    return Splits.from_arrays(
        [D[i] for i in idx],
        [T[i] for i in idx],
        [races[i].reaction_time for i in idx],
        [races[i].wind for i in idx],
        weights=[W[i] for i in idx],
        length=L,
    )


def check_enough_splits(races: list[Race], n_params: int, fit_until: float | None = None) -> None:
    """``SprintDataError`` (file and line) if a race has fewer fitted splits than ``n_params``, or
    if ``fit_until`` is past its last split."""
    for r in races:
        if fit_until is not None and fit_until > r.distances[-1] + 1e-9:
            raise SprintDataError(
                r.path, int(r.lines[-1]), f"--fit-until {fit_until:g} m is past the last split ({r.distances[-1]:g} m)"
            )
        n = int(r.until(fit_until).sum()) if fit_until is not None else r.n
        if n < n_params:
            where = f" at or before {fit_until:g} m" if fit_until is not None else ""
            raise SprintDataError(
                r.path,
                int(r.lines[max(n - 1, 0)]),
                f"{n} split(s){where} but {n_params} parameters to fit; need at least {n_params}",
            )


#: prior standard deviation of the log fatigue parameters (between-athlete spread), see
#: ``population_prior``
PRIOR_SD = 0.01


def population_prior(theta: np.ndarray, names=FREE, on=None, sd: float | None = PRIOR_SD):
    """Gaussian prior in log space on the fatigue parameters, learned from fitted races.

    Centre: the median of ``theta`` ``(R, k)`` (robust to one unusual race, e.g. Powell 2007's
    late "tightening up"). Width: ``sd`` in log units (default ``PRIOR_SD`` = 0.01, i.e. 1 %), or
    the sample standard deviation of the races if ``sd`` is None. With only a handful of races the
    sample spread is dominated by the outlier; on the embedded races a leave-one-out test of the
    ``--fit-until 60`` prediction gives a mean |error| of 0.026 s with 1 %, 0.030 s with 2 % and
    0.040 s with the sample spread (the baselines: 0.035 s). Parameters not in ``on`` (default:
    the fatigue parameters among ``names``) get no prior (zero precision).
    Returns ``(mu (k,), sqrt_prec (k, k))`` for ``fit_splits(prior=...)``.
    """
    names = tuple(names)
    on = tuple(n for n in names if n in FATIGUE) if on is None else tuple(on)
    theta = np.asarray(theta, dtype=float)
    mu = np.median(theta, axis=0)
    if sd is None:
        spread = theta.std(0, ddof=1) if theta.shape[0] > 1 else np.full(theta.shape[1], PRIOR_SD)
        spread = np.maximum(spread, 1e-3)
    else:
        spread = np.full(theta.shape[1], float(sd))
    prec = np.array([1.0 / spread[j] if n in on else 0.0 for j, n in enumerate(names)])
    return mu, np.diag(prec)


def fit(
    races: list[Race],
    *,
    fit_until: float | None = None,
    model: Sprinter | None = None,
    names=FREE,
    prior=None,
    reference: list[Race] | None = None,
    reference_fit: FitResult | None = None,
    **kw,
) -> FitResult:
    """Fit the sprinter to ``races`` (all in one vmapped call) and return the first ``len(races)`` rows.

    ``fit_until``: fit only splits ≤ this distance [m] (the rest are predicted). ``prior``:
    ``None`` (plain least squares), ``(mu, sqrt_prec)``, or ``"population"``: the earlier prior on the fatigue parameters alone (median of the other
    reference races, sd 1 %, ``population_prior``); ``reference_fit``: a full fit of
    ``reference`` already at hand.
    ``fitness=`` (through ``**kw`` to ``fit_splits``): a modified fatigue law, also used for the
    reference fits. ``starts=`` (through ``**kw``): ``(S, k)``, or ``(R, S, k)`` per race.
    ``devices=`` (also through ``**kw``): split the races over devices.
    ``SprintDataError`` for too few splits or ``fit_until`` past the last split.

    The hierarchical prior (every free parameter's population learned from full fits of reference
    races, with the estimated split noise and predictive intervals) is
    `jaxbio.sprint.hierarchical.forecast`.
    """
    model = Sprinter() if model is None else model
    names = tuple(names)
    if isinstance(prior, str) and prior != "population":
        hint = " (the hierarchical prior: jaxbio.sprint.hierarchical.forecast)" if prior == "hierarchical" else ""
        raise ValueError(f"fit: prior must be None, (mu, sqrt_prec) or 'population', got {prior!r}{hint}")
    n_needed = len(names)
    prior_arrays = None
    if isinstance(prior, str) and prior == "population":
        from jaxbio.sprint.data import embedded_races

        reference = embedded_races() if reference is None else reference
        ref_fit = reference_fit if reference_fit is not None else fit(reference, model=model, names=names, **kw)
        mus, sps = [], []
        for r in races:
            keep = [j for j, ref in enumerate(reference) if ref.name != r.name]
            mu, sp = population_prior(ref_fit.theta[keep], names)
            mus.append(mu)
            sps.append(sp)
        n_needed -= int(np.count_nonzero(np.diag(sps[0])))
        prior_arrays = (np.array(mus), np.array(sps))
    elif prior is not None:
        prior_arrays = prior
        n_needed -= int(
            np.count_nonzero(np.diagonal(np.asarray(prior[1]), axis1=-2, axis2=-1).reshape(-1, len(names))[0])
        )
    check_enough_splits(races, max(n_needed, 1), fit_until)
    splits = splits_from_races(races, fit_until)
    kw.setdefault("n_steps", steps_for(max(r.distances[-1] for r in races)))  # 80 up to 100 m
    B = splits.distances.shape[0]
    if prior_arrays is not None:
        mu, sp = prior_arrays
        mu = np.broadcast_to(mu, (len(races), len(names))) if np.ndim(mu) < 2 else mu
        sp = np.broadcast_to(sp, (len(races),) + (len(names),) * 2) if np.ndim(sp) < 3 else sp
        pad = B - len(races)
        prior_arrays = (
            np.concatenate([mu, np.repeat(mu[:1], pad, 0)]),
            np.concatenate([sp, np.repeat(sp[:1], pad, 0)]),
        )
    if np.ndim(kw.get("starts")) == 3:  # per-race starts (R, S, k): padded like the races
        st = np.asarray(kw["starts"], dtype=float)
        kw["starts"] = np.concatenate([st, np.repeat(st[:1], B - len(races), 0)])
    res = fit_splits(splits, model=model, names=names, prior=prior_arrays, **kw)
    n = len(races)
    cut = lambda a: a[:n]  # noqa: E731
    return FitResult(
        names=res.names,
        theta=cut(res.theta),
        std=cut(res.std),
        cov_log=cut(res.cov_log),
        cost=cut(res.cost),
        converged=cut(res.converged),
        steps=cut(res.steps),
        predicted=cut(res.predicted),
        rmse=cut(res.rmse),
        model=res.model,
        splits=jax.tree_util.tree_map(cut, res.splits),
        profile={k: cut(v) for k, v in res.profile.items()},
        hessian=cut(res.hessian),
        prior=tuple(map(cut, res.prior)),
    )


# ---- profiles for tables and plots -----------------------------------------------------------


class Profile(eqx.Module):
    """Model speed and fitness against distance for one race (numpy).

    ``x`` ``(n,)`` m, ``t`` ``(n,)`` s from the gun, ``v`` ``(n,)`` m/s, ``fitness`` ``(n,)``;
    ``top_speed`` m/s reached at ``top_speed_at`` m; ``speed_lost`` m/s between the top speed and
    the finish.
    """

    x: np.ndarray
    t: np.ndarray
    v: np.ndarray
    fitness: np.ndarray

    @property
    def _imax(self):
        return int(np.argmax(self.v))

    @property
    def top_speed(self) -> float:
        return float(self.v[self._imax])

    @property
    def top_speed_at(self) -> float:
        i = self._imax
        if 0 < i < len(self.v) - 1:  # parabola through the three points around the maximum
            y0, y1, y2 = self.v[i - 1 : i + 2]
            den = y0 - 2 * y1 + y2
            off = 0.5 * (y0 - y2) / den if den < 0 else 0.0
            return float(self.x[i] + off * (self.x[1] - self.x[0]))
        return float(self.x[i])

    @property
    def speed_lost(self) -> float:
        return float(self.top_speed - self.v[-1])


__all__ = [
    "FLAT_RTOL",
    "FitResult",
    "N_STEPS",
    "PARAMETERS",
    "PLAUSIBLE",
    "Profile",
    "check_enough_splits",
    "default_starts",
    "fit",
    "fit_problems",
    "fit_splits",
    "flat_parameters",
    "population_prior",
    "PRIOR_SD",
    "splits_from_races",
]
