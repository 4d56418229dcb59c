"""How much freedom the splits support: a per-race choice among nested sprinter models.

The default fit frees ``model.FREE`` (``f0``, ``vmax``, ``energy``) and holds the rest at
``DEFAULTS``, with the reaction time from the race file. On clean splits that is enough; on
noisy ones (a transcribed first split, a timing convention that starts the clock differently)
the start may not fit, and a two- or three-parameter curve (the baselines) can then fit better;
over 200 m the late-race decline may not fit with the resting resupply rate.
Here each race is fitted with several models — nested sets of *extra* parameters freed on top of
``FREE``, each with a Gaussian prior (``EXTRA_PRIORS``):

- ``rt_offset`` [s]: added to the file's reaction time (the start the splits imply), prior
  N(0, 0.05 s);
- ``tau``: the impulse time constant, log-normal around its default (5 ms), sd 1 in log;
- ``hill_ratio``: Hill's a/F⁰ (the curvature of force–velocity; large a/F⁰ is the linear
  force–velocity of the Furusawa–Hill–Keller curve), log-normal around 0.25, sd 0.5 in log;
- ``recovery``: the reserve's resupply rate ``r`` [1/s] (``ė = … + r (1 − e)``), log-normal around
  its default (ln 2/30 s, resting phosphocreatine resynthesis), sd 1 in log. Over 100 m the reserve
  barely recovers and ``r`` is not identified; over 200 m the second half is run on what is resupplied
  while the reserve is low (anaerobic glycolysis, whose flux rises as phosphocreatine falls), and
  with ``r`` held at the resting value the model's speed holds and then collapses instead of the
  steady loss of a 200 m (Berlin 2009: 50 m segment speeds 11.6, 11.1, 10.5 m/s for Bolt). Freed, the
  four 50 m splits of both embedded 200 m races fit below both baselines (Bolt 0.0295 s → 0.0001 s,
  r ≈ 0.18 1/s; Felix 0.0439 → 0.0000 s, r ≈ 0.14 1/s), and Bolt's F⁰/m and v_max (17.1, 18.6) come
  close to his 100 m fit of the same championship (18.1, 19.1) instead of 22 and 15.6. Neither the
  other extras, nor 320 instead of 160 steps, nor a bend (removing any speed-dependent bend loss
  from the splits makes the base fit worse: the misfit is the late-race shape) do this.

First every race gets ``CANDIDATES`` (the base model and a free start offset: cheap, one vmapped
call over the races from the base optimum); only a race whose chosen model still fits worse than a
baseline gets the wider ``ESCALATION`` models (the start's shape and the force–velocity curve),
in a further call. Within a call all candidates share one superset of names: a parameter held
fixed gets a very tight prior (sd ``FIXED_SD``) at its default, so one compiled function fits all
races × candidates; every fit is written over ``NAMES``.

**Choice** (``select``): the Laplace approximation of each candidate's marginal likelihood
(evidence) ``log Z = −½χ² − ½ prior − ½ log det H + ½ log det P`` (``H`` the Gauss–Newton
Hessian incl. the prior precision ``P``; the flat prior of ``FREE`` is the same in every candidate
and cancels; a parameter held by a tight prior contributes ~0, as if fixed). The noise scale is
the rounding noise ``SIGMA_ROUND``, inflated by the misfit of the best-fitting candidate
(``max(1, χ²/dof)``, as for the Laplace std, and as Mallows' Cp takes the noise from the full
model): a model error that no candidate explains does not count as evidence for freeing more.
Then the **guarantee**: when ``baselines`` RMSEs are given and the chosen
model's RMSE exceeds one, the ``ESCALATION`` models are fitted too and the candidate with the
highest evidence among those at or below every baseline is taken instead; if none is, the
lowest-RMSE candidate, and the selection says so (``beats_baselines`` False). A candidate that is not a valid estimate
(``fitting.fit_problems``) is never chosen while a valid one exists. A race whose file gives no
readable reaction time (``Race.reaction_time_known`` False: ``data.ASSUMED_REACTION`` assumed)
is only given candidates that free the start offset: its prior N(0, 0.05 s) is then the whole
statement about the start, as 0 m/s is for an unknown wind.

A robust loss against one bad split is ``fit(..., loss="huber")`` (``fitting.robust_residuals``);
the choice uses least squares, since its promise is about RMSE.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxbio.sprint.data import SIGMA_ROUND, Race
from jaxbio.sprint.fitting import START_FACTORS, FitResult, fit, fit_problems, flat_parameters, value_std
from jaxbio.sprint.model import FREE, Sprinter

#: parameters the choice may free on top of ``FREE``
EXTRAS = ("rt_offset", "tau", "hill_ratio", "recovery")

#: the superset of fitted names every result is written over
NAMES = FREE + EXTRAS

#: prior sd of each extra parameter when it is freed, in the fits' coordinates (log units, or s
#: for ``rt_offset``); the centre is the base model's value (``DEFAULTS``, ``OFFSETS``)
EXTRA_PRIORS = {"rt_offset": 0.05, "tau": 1.0, "hill_ratio": 0.5, "recovery": 1.0}

#: prior sd of an extra parameter held fixed (the same compiled fit: a tight prior ≈ fixed)
FIXED_SD = 1e-5

#: the models every race is fitted with: the extras each frees (the base model first). A start
#: offset is the one extra cheap enough for every race (one more Jacobian column; the impulse
#: time constant, which also delays the start, had the lower evidence on every noisy variant of
#: the embedded races, and Hill's curvature converges slowly along a valley with f0 and vmax)
CANDIDATES = ((), ("rt_offset",))

#: the names of the base fit (``base_fit``) and of the ``CANDIDATES`` fit: the base model holds the
#: extras by a tight prior, so both calls run one compiled function (same names, shapes, starts)
FIRST_NAMES = FREE + tuple(n for n in EXTRAS if any(n in c for c in CANDIDATES))

#: the models added for a race whose chosen model fits worse than a baseline (the reserve's resupply
#: rate last: the late-race decline of a 200 m, see the module docstring)
ESCALATION = (("tau",), ("hill_ratio",), ("rt_offset", "hill_ratio"), ("rt_offset", "tau", "hill_ratio"), ("recovery",))

#: offset [s] of the start offset in the candidates' further starts (``_fit_candidates``)
START_OFFSET = 0.04

#: Levenberg–Marquardt steps of the ``ESCALATION`` fit (at least): Hill's curvature converges slowly,
#: along a valley with f0 and vmax (up to ~60 steps from the base optimum on the embedded races)
ESCALATION_MAX_STEPS = 200

#: log evidence [nats] each freed parameter must add: Kass & Raftery (1995)'s "positive" evidence
#: (Bayes factor > e, 2 ln K > 2); below it the simpler model is kept
EVIDENCE_MARGIN = 1.0

#: why a candidate was chosen (``selection["reason"]``)
REASONS = {
    "base": "no freed parameter raises the evidence by the margin",
    "evidence": "highest Laplace evidence, by more than the margin per freed parameter",
    "baseline": "freed to fit at least as well as the baselines",
    "best_rmse": "no candidate fits as well as every baseline: the lowest RMSE",
    "invalid": "no candidate is a valid estimate: the base model",
    "reaction_time": "the file's reaction time is not known: the start offset is always fitted, with its prior",
    "invalid_reaction_time": "no candidate is a valid estimate: the start offset freed (reaction time not known)",
}


def candidate_prior(model: Sprinter, candidates, names):
    """``(mu (C, k), sqrt_prec (C, k, k))`` over ``names`` in the fits' coordinates: zero
    precision on ``FREE``, ``1/EXTRA_PRIORS`` on the extras a candidate frees, ``1/FIXED_SD`` on
    the others; centred on ``model``'s values."""
    centre = np.array([float(model.log_values((n,))[0]) for n in names])
    mus, sps = [], []
    for cand in candidates:
        prec = [0.0 if n in FREE else 1.0 / (EXTRA_PRIORS[n] if n in cand else FIXED_SD) for n in names]
        mus.append(centre)
        sps.append(np.diag(prec))
    return np.array(mus), np.array(sps)


def _evidence(chi2, prior_cost, hess, sqrt_prec, s2):
    """Laplace log evidence (constants shared by the candidates dropped): data ``chi2`` ``(B,)``
    (scaled by ``SIGMA_ROUND``), ``prior_cost`` ``(B,)`` = ½|sqrt_prec (θ − mu)|², Gauss–Newton
    ``hess`` ``(B, k, k)`` incl. the prior precision, ``sqrt_prec`` ``(B, k, k)`` diagonal, noise
    variance ``s2`` ``(B,)`` in units of ``SIGMA_ROUND²``."""
    P = np.einsum("bji,bjk->bik", sqrt_prec, sqrt_prec)
    H = (hess - P) / s2[:, None, None] + P  # data curvature at the noise scale, plus the prior
    d = np.diagonal(P, axis1=1, axis2=2)
    on = d > 0
    half_logdet_P = 0.5 * np.sum(np.where(on, np.log(np.where(on, d, 1.0)), 0.0), axis=1)
    _, logdet_H = np.linalg.slogdet(H)
    return -0.5 * chi2 / s2 - prior_cost + half_logdet_P - 0.5 * logdet_H


def effective_parameters(hess, sqrt_prec) -> np.ndarray:
    """``(B,)`` the number of parameters the data determine, ``tr(H_data H⁻¹)``: 1 for a free
    parameter, ~0 for one held by a tight prior, in between for a prior of about the data's
    width."""
    P = np.einsum("bji,bjk->bik", sqrt_prec, sqrt_prec)
    return np.einsum("bij,bji->b", hess - P, np.linalg.pinv(hess, hermitian=True))


def base_fit(
    races: list[Race], *, fit_until: float | None = None, model: Sprinter | None = None, prior=None, **kw
) -> FitResult:
    """The base model (``FREE`` fitted, the rest held) as `fitting.fit` over ``FIRST_NAMES`` with
    the extras held by a tight prior (``FIXED_SD``): the same values as ``fit(races)`` to ~1e-9
    and the compiled function ``fit_selected``'s candidates reuse. ``prior``: ``None`` or
    ``(mu, sqrt_prec)`` on ``FREE`` (as ``fit_selected``'s); ``**kw``: `fitting.fit`'s."""
    model = Sprinter() if model is None else model
    mu_f, sp_f = _free_prior(prior, len(races))
    mu, sp = _with_free_prior(*candidate_prior(model, ((),), FIRST_NAMES), mu_f, sp_f)
    return fit(races, fit_until=fit_until, model=model, names=FIRST_NAMES, prior=(mu[:, 0], sp[:, 0]), **kw)


def _free_prior(prior, R):
    """``(mu (R, 3), sqrt_prec (R, 3, 3))`` on ``FREE`` from ``None`` or a prior whose first
    coordinates are ``FREE``'s."""
    nf = len(FREE)
    if prior is None:
        return np.zeros((R, nf)), np.zeros((R, nf, nf))
    mu = np.broadcast_to(np.asarray(prior[0], dtype=float)[..., :nf], (R, nf))
    sp = np.broadcast_to(np.asarray(prior[1], dtype=float)[..., :nf, :nf], (R, nf, nf))
    return mu, sp


def fit_selected(
    races: list[Race],
    *,
    fit_until: float | None = None,
    model: Sprinter | None = None,
    prior=None,
    baselines=None,
    base: FitResult | None = None,
    **kw,
) -> FitResult:
    """Fit every race with the candidate models and keep, per race, the one ``select`` chooses.

    The base model (``FREE``: `fitting.fit` from its default starts, or ``base``, such a fit
    already at hand), then ``CANDIDATES`` from its optimum (one vmapped call over the races, so a
    candidate's misfit is never above the base's but for its prior), then — only for races whose
    choice fits worse than a baseline — ``ESCALATION``.
    ``fit_until``, ``model``, ``**kw``: as for `fitting.fit` (``fitness=``, ``loss=``, …);
    ``prior``: ``None`` or ``(mu, sqrt_prec)`` on ``FREE`` (``(3,)``/``(R, 3)`` and
    ``(3, 3)``/``(R, 3, 3)``, e.g. `fitting.population_prior`), added to every candidate; with
    ``base`` given, its prior (``FitResult.prior``, e.g. ``fit(prior="population")``'s) is used;
    ``baselines``: ``None`` or a list of ``(R,)`` baseline RMSEs [s] on the same fitted splits
    (`baselines.fit_baseline` ``.rmse``) that the chosen model must not exceed.

    Returns a ``FitResult`` over ``NAMES`` (``R`` rows) with ``fixed`` (the extras a race holds at
    their default; their ``std`` NaN) and ``selection`` (per race: ``freed``, ``reason``,
    ``criterion``, ``noise_scale``, ``beats_baselines`` and each candidate's ``freed``,
    ``rmse_s``, ``log_evidence`` over the base model and ``valid``).
    """
    model = Sprinter() if model is None else model
    R, nf = len(races), len(FREE)
    if base is None:
        base = base_fit(races, fit_until=fit_until, model=model, prior=prior, **kw)
    elif prior is None and base.prior is not None:
        prior = base.prior
    mu_f, sp_f = _free_prior(prior, R)
    theta0 = np.asarray(base.theta)[:R, :nf]
    mu0, sp0 = _with_free_prior(*candidate_prior(model, ((),), NAMES), mu_f, sp_f)
    first = _embed(base, mu0[:, 0], sp0[:, 0])
    more = _fit_candidates(
        races,
        CANDIDATES[1:],
        theta0,
        mu_f,
        sp_f,
        model,
        fit_until,
        kw,
        length=first.predicted.shape[1],
        n_starts=len(START_FACTORS),
    )
    bound = None if baselines is None else np.min(np.stack([np.asarray(b, dtype=float)[:R] for b in baselines]), 0)
    # a race whose file gives no readable reaction time (``Race.reaction_time_known``) always frees the start offset
    unknown_rt = np.array([not getattr(r, "reaction_time_known", True) for r in races])
    res = select(_stack([first] + more), CANDIDATES, bound, unknown_rt)
    worse = [i for i in range(R) if res.selection[i]["beats_baselines"] is False]
    if worse:  # free more where a baseline still fits better (``ESCALATION``)
        pick = lambda a: np.asarray(a)[worse]  # noqa: E731
        kw_wide = {**kw, "max_steps": max(kw.get("max_steps", 60), ESCALATION_MAX_STEPS)}
        wider = _fit_candidates(
            [races[i] for i in worse],
            ESCALATION,
            theta0[worse],
            pick(mu_f),
            pick(sp_f),
            model,
            fit_until,
            kw_wide,
            length=first.predicted.shape[1],
        )
        rows = [_take(r, worse) for r in [first] + more] + wider
        again = select(_stack(rows), CANDIDATES + ESCALATION, bound[worse], unknown_rt[worse])
        res = _merge(res, again, worse)
    return res


def _with_free_prior(mu, sp, mu_f, sp_f):
    """Candidate priors ``(C, k)``, ``(C, k, k)`` for each of R races with their prior on ``FREE``
    (``mu_f`` ``(R, 3)``, ``sp_f`` ``(R, 3, 3)``): ``(R, C, k)``, ``(R, C, k, k)``."""
    R, nf = mu_f.shape
    mu = np.broadcast_to(mu, (R,) + mu.shape).copy()
    sp = np.broadcast_to(sp, (R,) + sp.shape).copy()
    mu[:, :, :nf] = mu_f[:, None]
    sp[:, :, :nf, :nf] = sp_f[:, None]
    return mu, sp


def _fit_candidates(
    races, candidates, theta0, mu_f, sp_f, model, fit_until, kw, length=None, n_starts: int = 1
) -> list[FitResult]:
    """One vmapped fit of every race × candidate (over ``FREE`` and the extras these candidates
    free) from the base optimum ``theta0`` ``(R, 3)`` (``n_starts`` > 1: also from
    ``START_FACTORS``' offsets of it, a start offset of ±``START_OFFSET``); a list of ``C``
    ``FitResult`` over ``NAMES``, one per candidate, ``R`` rows each."""
    R, C, nf = len(races), len(candidates), len(FREE)
    names = FREE + tuple(n for n in EXTRAS if any(n in c for c in candidates))
    k = len(names)
    mu, sp = _with_free_prior(*candidate_prior(model, candidates, names), mu_f, sp_f)
    starts = np.repeat(mu[:, :, None], n_starts, axis=2)  # (R, C, S, k)
    starts[..., :nf] = theta0[:, None, None]
    for j in range(1, n_starts):
        starts[:, :, j, :nf] += np.log(START_FACTORS[j])
        if "rt_offset" in names:
            starts[:, :, j, names.index("rt_offset")] += START_OFFSET * (-1) ** j
    rows = [r for r in races for _ in range(C)]
    res = fit(
        rows,
        fit_until=fit_until,
        model=model,
        names=names,
        starts=starts.reshape(R * C, n_starts, k),
        prior=(mu.reshape(R * C, k), sp.reshape(R * C, k, k)),
        **kw,
    )
    mu_all, sp_all = _with_free_prior(*candidate_prior(model, candidates, NAMES), mu_f, sp_f)
    out = []
    for c in range(C):
        part = _take(res, [i * C + c for i in range(R)])
        out.append(_embed(part, mu_all[:, c], sp_all[:, c], length))
    return out


_ROW_FIELDS = ("theta", "std", "cov_log", "cost", "converged", "steps", "predicted", "rmse", "hessian")


def _take(res: FitResult, idx) -> FitResult:
    """Rows ``idx`` of ``res``."""
    idx = np.asarray(idx, dtype=int)
    pick = lambda a: None if a is None else np.asarray(a)[idx]  # noqa: E731
    return FitResult(
        names=res.names,
        **{f: pick(getattr(res, f)) for f in _ROW_FIELDS},
        model=res.model,
        splits=jax.tree_util.tree_map(pick, res.splits),
        profile={key: pick(v) for key, v in res.profile.items()},
        prior=None if res.prior is None else tuple(map(pick, res.prior)),
        fixed=pick(res.fixed),
        selection=None if res.selection is None else [res.selection[i] for i in idx],
    )


def _pad_splits(res: FitResult, L: int) -> FitResult:
    """``res`` with its splits padded to ``L`` (repeating the last one, weight 0)."""
    extra = L - res.predicted.shape[1]
    rep = lambda a: np.concatenate([np.asarray(a), np.repeat(np.asarray(a)[:, -1:], extra, 1)], 1)  # noqa: E731
    sp = res.splits
    splits = type(sp)(
        distances=rep(sp.distances),
        times=rep(sp.times),
        weights=np.concatenate([np.asarray(sp.weights), np.zeros((sp.weights.shape[0], extra))], 1),
        reaction_time=np.asarray(sp.reaction_time),
        wind=np.asarray(sp.wind),
        duration=np.asarray(sp.duration),
    )
    return FitResult(
        names=res.names,
        **{f: getattr(res, f) for f in _ROW_FIELDS if f != "predicted"},
        predicted=rep(res.predicted),
        model=res.model,
        splits=splits,
        profile=res.profile,
        prior=res.prior,
    )


def _embed(res: FitResult, mu, sqrt_prec, length: int | None = None) -> FitResult:
    """A fit over some of ``NAMES`` written over ``NAMES``: the other parameters at ``mu``
    ``(R, K)``, with zero covariance and the prior curvature of ``sqrt_prec`` ``(R, K, K)`` in
    the Hessian (parameters held fixed by a tight prior); ``prior`` set to ``(mu, sqrt_prec)``."""
    idx = [NAMES.index(n) for n in res.names]
    R, K = res.theta.shape[0], len(NAMES)
    if length is not None and length != res.predicted.shape[1]:  # a subset of races: other padding
        res = _pad_splits(res, length)
    theta = np.asarray(mu, dtype=float).copy()
    theta[:, idx] = res.theta
    hess = np.einsum("bji,bjk->bik", sqrt_prec, sqrt_prec)
    cov, std = np.zeros((R, K, K)), np.full((R, K), np.nan)
    ii = np.ix_(range(R), idx, idx)
    hess[ii], cov[ii], std[:, idx] = res.hessian, res.cov_log, res.std
    return FitResult(
        names=NAMES,
        theta=theta,
        std=std,
        cov_log=cov,
        cost=res.cost,
        converged=res.converged,
        steps=res.steps,
        predicted=res.predicted,
        rmse=res.rmse,
        model=res.model,
        splits=res.splits,
        profile=res.profile,
        hessian=hess,
        prior=(np.asarray(mu), np.asarray(sqrt_prec)),
    )


def _stack(parts: list[FitResult]) -> FitResult:
    """``C`` results of ``R`` rows each (one per candidate) as one of ``R · C`` rows, race-major."""
    C, R = len(parts), parts[0].theta.shape[0]

    def mix(*a):
        a = np.stack([np.asarray(x) for x in a], 1)
        return a.reshape((R * C,) + a.shape[2:])

    p0 = parts[0]
    return FitResult(
        names=p0.names,
        **{f: mix(*(getattr(p, f) for p in parts)) for f in _ROW_FIELDS},
        model=p0.model,
        splits=jax.tree_util.tree_map(mix, *(p.splits for p in parts)),
        profile={key: mix(*(p.profile[key] for p in parts)) for key in p0.profile},
        prior=tuple(mix(*(p.prior[j] for p in parts)) for j in range(2)),
    )


def _merge(res: FitResult, again: FitResult, idx) -> FitResult:
    """``res`` with its rows ``idx`` replaced by ``again``'s rows."""

    def put(a, b):
        if a is None:
            return None
        a = np.array(a)
        a[np.asarray(idx)] = np.asarray(b)
        return a

    sel = list(res.selection)
    for j, i in enumerate(idx):
        sel[i] = again.selection[j]
    return FitResult(
        names=res.names,
        **{f: put(getattr(res, f), getattr(again, f)) for f in _ROW_FIELDS},
        model=res.model,
        splits=jax.tree_util.tree_map(put, res.splits, again.splits),
        profile={key: put(res.profile[key], again.profile[key]) for key in res.profile},
        prior=tuple(put(a, b) for a, b in zip(res.prior, again.prior)),
        fixed=put(res.fixed, again.fixed),
        selection=sel,
    )


def select(res: FitResult, candidates, bound=None, unknown_rt=None) -> FitResult:
    """Choose one candidate per race from ``res`` (over ``NAMES``, ``R · C`` rows race-major: row
    ``i C + c`` is race ``i`` fitted with ``candidates[c]``, the base model ``()`` first, with the
    Gaussian prior ``res.prior``).

    Per race: the noise variance ``s² = max(1, min_c χ²_c/(n − k_c))`` of the best-fitting
    candidate (``χ²`` of the splits in units of ``SIGMA_ROUND``, ``k_c`` its effective parameters,
    ``effective_parameters``; Mallows' Cp estimates the noise from the full model likewise);
    each candidate's Laplace log evidence at that noise (``_evidence``), less ``EVIDENCE_MARGIN``
    per freed extra; the valid candidates (no ``fitting.fit_problems``); the best of those, unless
    its RMSE exceeds ``bound`` ``(R,)`` (the best baseline RMSE), then the best one that does not,
    else the lowest RMSE. ``unknown_rt`` ``(R,)`` bool: races whose reaction time is not known
    (``Race.reaction_time_known`` False): only candidates that free ``rt_offset`` are chosen for
    them (reason ``"reaction_time"``). Returns the chosen rows with ``fixed`` and ``selection``."""
    C = len(candidates)
    R = res.theta.shape[0] // C
    names = res.names
    sqrt_prec = np.asarray(res.prior[1], dtype=float)
    w = np.asarray(res.splits.weights)
    n = w.sum(1)
    chi2 = np.sum(w * (res.predicted - np.asarray(res.splits.times)) ** 2, axis=1) / SIGMA_ROUND**2
    prior_cost = np.maximum(res.cost - 0.5 * chi2, 0.0)
    k_eff = effective_parameters(res.hessian, sqrt_prec)
    # the noise variance from the best-fitting candidate, as Mallows' Cp takes it from the full model
    per_dof = (chi2 / np.maximum(n - k_eff, 1.0)).reshape(R, C)
    s2 = np.maximum(1.0, np.min(np.where(np.isfinite(per_dof), per_dof, np.inf), axis=1))
    ev = _evidence(chi2, prior_cost, res.hessian, sqrt_prec, np.repeat(s2, C)).reshape(R, C)
    ev = ev - ev[:, :1]
    fixed_c = np.array([[n_ not in FREE and n_ not in cand for n_ in names] for cand in candidates])
    fixed = np.tile(fixed_c, (R, 1))
    # the Laplace covariance of each row at its own inflation; std NaN for fixed and flat parameters
    s2_own = np.maximum(1.0, chi2 / np.maximum(n - k_eff, 1.0))
    cov = s2_own[:, None, None] * np.linalg.pinv(res.hessian, hermitian=True)
    cov = np.where(fixed[:, :, None] | fixed[:, None, :], 0.0, cov)
    flat = flat_parameters(np.where(fixed[:, :, None] & fixed[:, None, :], np.eye(len(names)), cov)) & ~fixed
    std = np.where(fixed | flat, np.nan, value_std(names, res.theta, cov))
    ok = np.asarray(res.converged) & ~flat.any(axis=1)
    rows = FitResult(
        names=names,
        theta=res.theta,
        std=std,
        cov_log=cov,
        cost=res.cost,
        converged=ok,
        steps=res.steps,
        predicted=res.predicted,
        rmse=res.rmse,
        model=res.model,
        splits=res.splits,
        profile=res.profile,
        hessian=res.hessian,
        prior=res.prior,
        fixed=fixed,
    )
    valid = np.array([not fit_problems(rows, j) for j in range(R * C)]).reshape(R, C)
    rmse = np.asarray(res.rmse).reshape(R, C)
    size = np.array([len(c) for c in candidates])
    frees_rt = np.array(["rt_offset" in c for c in candidates])
    unknown_rt = np.zeros(R, bool) if unknown_rt is None else np.asarray(unknown_rt, dtype=bool)
    pick, info = [], []
    for i in range(R):
        b = None if bound is None else bound[i]
        c, why = _choose(ev[i] - EVIDENCE_MARGIN * size, rmse[i], valid[i], b, frees_rt if unknown_rt[i] else None)
        pick.append(i * C + c)
        info.append(
            dict(
                freed=list(candidates[c]),
                reason=REASONS[why],
                criterion="Laplace log evidence",
                noise_scale=float(np.sqrt(s2[i])),
                beats_baselines=None if b is None else bool(rmse[i, c] <= b),
                candidates=[
                    dict(
                        freed=list(cand),
                        rmse_s=float(rmse[i, j]),
                        log_evidence=float(ev[i, j]),
                        valid=bool(valid[i, j]),
                    )
                    for j, cand in enumerate(candidates)
                ],
            )
        )
    out = _take(rows, pick)
    return FitResult(
        names=out.names,
        **{f: getattr(out, f) for f in _ROW_FIELDS},
        model=out.model,
        splits=out.splits,
        profile=out.profile,
        prior=out.prior,
        fixed=out.fixed,
        selection=info,
    )


def _choose(score, rmse, valid, bound, required=None):
    """Index and reason key of the chosen candidate of one race from its ``score`` (log evidence
    less ``EVIDENCE_MARGIN`` per freed parameter), ``rmse``, ``valid`` and the baselines' best
    RMSE ``bound`` (see ``select``); ``required``: ``None``, or a bool mask of the only candidates
    allowed (those freeing the start offset, for a race of unknown reaction time)."""
    if required is not None:
        if not (valid & required).any():
            return int(np.argmax(required)), "invalid_reaction_time"
        valid = valid & required
    if not valid.any():
        return 0, "invalid"
    order = [j for j in np.argsort(-score, kind="stable") if valid[j]]
    best = order[0]
    why = "reaction_time" if required is not None else "base" if best == 0 else "evidence"
    if bound is None or rmse[best] <= bound:
        return best, why
    fit_ok = [j for j in order if rmse[j] <= bound]
    if fit_ok:
        return fit_ok[0], "baseline"
    return min(order, key=lambda j: rmse[j]), "best_rmse"
