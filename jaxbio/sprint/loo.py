"""Leave-one-race-out forecasts of the final time, and the forecast that stacks the sprinter with FHK.

What `jaxbio sprint --fit-until` is judged by (issue #54): fit each race's splits up to a cut-off,
predict its last split (the final time), and compare with the truth — each race forecast from a
population learned from the *other* races only. ``leave_one_out`` does that for every race and
cut-off at once, for four forecasts:

- ``model``: the hierarchical sprinter (`jaxbio.sprint.hierarchical.forecast`), its prior the
  population of the other races of ``pool``, its interval the Laplace predictive (Student-t).
- ``fhk``, ``tibshirani``: the classical models fitted to the same splits (no prior, no interval).
- ``stacked``: the sprinter and FHK averaged with precision weights learned, for each held-out
  race, from the *nested* leave-one-out errors of the other races (``stack``): the sprinter's
  weight is ``v_f / (v_f + k² s²)``, with ``s`` its predictive sd for this race, ``k²`` the mean
  squared z of its errors on the other races (its sd's calibration) and ``v_f`` FHK's mean squared
  error at this cut-off on the other races. So the sprinter counts where it is sure and FHK where
  it is not (a short reference, a race unlike the population); the interval's scale is set so that
  the other races' errors have unit mean squared z, with Student-t quantiles of their number.

"Nested": the other races' errors that set race ``i``'s weight are forecasts from populations
without race ``i`` as well, so nothing of race ``i`` reaches its own forecast. Cut-offs are
fractions of each race's length (0.4, 0.5, 0.6: 40, 50, 60 m of a 100 m race); a (race, cut-off)
with fewer than ``MIN_SPLITS`` fitted splits is skipped (FHK has two parameters).

``summary`` turns the forecasts into the table of ``docs/sprint.md``: mean |error| per cut-off and
forecast, per-race winners, and interval coverage by sex (``data.race_sex``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxbio.sprint.data import Race, Splits, race_sex
from jaxbio.sprint.hierarchical import (
    FORM,
    HYPER_SCALE,
    HYPER_STRENGTH,
    Population,
    ReferenceFits,
    pooled,
    population,
    predict_intervals,
    quantile_factor,
)

#: cut-offs as fractions of each race's length (40, 50, 60 m of a 100 m race)
FRACTIONS = (0.4, 0.5, 0.6)
#: fewest fitted splits for a (race, cut-off) to be forecast: FHK's two parameters
MIN_SPLITS = 2
#: fewest other races of a race's pool (those like it) to learn its stacking weight from; with
#: fewer the stacked forecast is the sprinter's
MIN_STACK = 3
#: the forecasts compared
METHODS = ("model", "stacked", "fhk", "tibshirani")
LEVELS = (0.68, 0.95)


@dataclasses.dataclass(frozen=True)
class LooForecasts:
    """Leave-one-out forecasts of the final time (numpy; ``NaN`` where a (race, cut-off) is skipped).

    ``races`` ``(R,)`` names; ``sex`` ``(R,)`` ``"female"``/``"male"``/``""``; ``fractions`` ``(C,)``;
    ``cut_m`` ``(R, C)`` the cut-off of each race [m]; ``truth`` ``(R,)`` s the measured last
    split; ``pred`` and, for the forecasts with intervals (``model``, ``stacked``), ``sd``,
    ``lower``/``upper`` (``{level: (R, C)}``), ``dof`` (the Student-t's degrees of freedom) and
    ``weight`` (the sprinter's share in ``stacked``), each a dict by method of ``(R, C)`` arrays [s].
    """

    races: tuple
    sex: tuple
    fractions: tuple
    cut_m: np.ndarray
    truth: np.ndarray
    pred: dict
    sd: dict
    lower: dict
    upper: dict
    weight: np.ndarray
    dof: dict = dataclasses.field(default_factory=dict)

    def errors(self, method: str) -> np.ndarray:
        """``(R, C)`` s: predicted − measured final time."""
        return self.pred[method] - self.truth[:, None]

    def inside(self, method: str, level: float) -> np.ndarray:
        """``(R, C)`` float: 1 where the truth is inside the ``level`` interval, 0 outside, NaN skipped."""
        lo, hi = self.lower[method][level], self.upper[method][level]
        out = ((lo <= self.truth[:, None]) & (self.truth[:, None] <= hi)).astype(float)
        return np.where(np.isnan(lo), np.nan, out)


def _rows(races, fractions):
    """``(race index, fraction index, cut-off m)`` of every (race, cut-off) with enough splits."""
    out = []
    for i, r in enumerate(races):
        for c, f in enumerate(fractions):
            cut = f * r.distances[-1]
            if int(r.until(cut).sum()) >= MIN_SPLITS:
                out.append((i, c, cut))
    return out


def _fit_rows(races, rows, pops, *, model, names, n_steps, physio=None):
    """One batched fit: row ``(i, cut)`` fits race ``i``'s splits ≤ ``cut`` with the prior of
    ``pops[row]``' predictive (times the ``physio`` priors, `physiology.with_priors`, whose names
    are then free too); returns its predicted final time and predictive sd ``(N,)`` each."""
    from jaxbio.sprint.fitting import _round_up, fit_splits

    n = len(rows)
    B = _round_up(n, 8)
    idx = list(range(n)) + [0] * (B - n)
    L = _round_up(max(r.n for r in races), 8)
    rs = [races[rows[k][0]] for k in idx]
    splits = Splits.from_arrays(
        [r.distances for r in rs],
        [r.times for r in rs],
        [r.reaction_time for r in rs],
        [r.wind for r in rs],
        weights=[r.until(rows[k][1]).astype(float) for r, k in zip(rs, idx)],
        length=L,
    )
    new = [pops[k].predictive() for k in idx]
    if physio:
        from jaxbio.sprint.physiology import with_priors

        new = [with_priors(p, physio) for p in new]
        names = new[0].names
    priors = [p.prior() for p in new]
    prior = (np.array([p[0] for p in priors]), np.array([p[1] for p in priors]))
    res = fit_splits(splits, model=model, names=names, prior=prior, n_steps=n_steps)
    fc = predict_intervals(res, new, n_steps=n_steps)
    last = np.array([races[i].n - 1 for i, _ in rows])
    k = np.arange(n)
    # the fit's own prediction (fit_splits' simulation) and the intervals' sd and degrees of freedom
    return res.predicted[k, last], fc.sd[k, last], fc.dof[k, last], res.converged[:n]


def leave_one_out(
    races: list[Race],
    ref: ReferenceFits,
    *,
    fractions=FRACTIONS,
    pool=None,
    model=None,
    form: str = FORM,
    strength: float = HYPER_STRENGTH,
    scale: float = HYPER_SCALE,
    physio: dict | None = None,
) -> LooForecasts:
    """Leave-one-race-out forecasts of every race's final time from its splits up to each cut-off.

    ``races``: the races (R); ``ref``: full fits of (at least) the races of ``pool``, by name
    (`hierarchical.ReferenceFits`); ``pool``: the names the population may be learned from
    (default: every race of ``ref``), or a function of the race being forecast that gives them
    (group means: e.g. the races of its length) — race ``i``'s is learned from its pool less race ``i``, and
    the stacking weights from nested forecasts of the other races of ``races`` with populations
    less both. ``fractions``: cut-offs as fractions of each race's length. ``form``, ``strength``,
    ``scale``: the population's hyperprior (`hierarchical.fit_population`). ``physio``:
    physiological priors multiplied into every population's predictive (`physiology.with_priors`;
    ``None``: none). Returns `LooForecasts`.
    """
    from jaxbio.sprint.baselines import fit_baseline
    from jaxbio.sprint.fitting import steps_for
    from jaxbio.sprint.model import Sprinter

    model = Sprinter() if model is None else model
    names = ref.names
    pool = tuple(ref.race_names) if pool is None else pool if callable(pool) else tuple(pool)
    R, C = len(races), len(fractions)
    rows = _rows(races, fractions)
    n_steps = steps_for(max(r.distances[-1] for r in races))
    pool_of = pool if callable(pool) else (lambda race, p=pool: p)
    cache: dict = {}

    def pop_without(target: Race, *out) -> Population:
        """The population of ``target``'s pool less ``target`` and the races named ``out``."""
        key = (target.name, frozenset(out))
        if key not in cache:
            base = ref.subset([j for j, nm in enumerate(ref.race_names) if nm not in out])
            sub = pooled(base, pool_of, target)
            cache[key] = population(sub, leave_out=target.name, form=form, strength=strength, scale=scale)
        return cache[key]

    # the forecasts themselves (population without the race), then the nested ones (without two)
    fit_rows = [(i, cut) for i, _, cut in rows]
    fit_pops = [pop_without(races[i]) for i, _, _ in rows]
    nested = [(h, k) for h in range(R) for k, (i, _, _) in enumerate(rows) if i != h]
    fit_rows += [(rows[k][0], rows[k][2]) for _, k in nested]
    fit_pops += [pop_without(races[rows[k][0]], races[h].name) for h, k in nested]
    pred, sd, dof, _ = _fit_rows(races, fit_rows, fit_pops, model=model, names=names, n_steps=n_steps, physio=physio)

    nan = lambda: np.full((R, C), np.nan)  # noqa: E731
    out_pred = {m: nan() for m in METHODS}
    out_sd = {m: nan() for m in ("model", "stacked")}
    out_dof = {m: nan() for m in ("model", "stacked")}
    lower = {m: {lv: nan() for lv in LEVELS} for m in ("model", "stacked")}
    upper = {m: {lv: nan() for lv in LEVELS} for m in ("model", "stacked")}
    cut_m = nan()
    truth = np.array([r.times[-1] for r in races])
    for k, (i, c, cut) in enumerate(rows):
        cut_m[i, c] = cut
        out_pred["model"][i, c], out_sd["model"][i, c], out_dof["model"][i, c] = pred[k], sd[k], dof[k]
        for lv in LEVELS:
            q = quantile_factor(lv, dof[k])
            lower["model"][lv][i, c], upper["model"][lv][i, c] = pred[k] - q * sd[k], pred[k] + q * sd[k]
    # nested forecasts: (held-out race h) -> the other rows' model errors and sds
    inner_err = {h: np.full((R, C), np.nan) for h in range(R)}
    inner_sd = {h: np.full((R, C), np.nan) for h in range(R)}
    for n_, (h, k) in enumerate(nested):
        i, c, _ = rows[k]
        inner_err[h][i, c] = pred[len(rows) + n_] - truth[i]
        inner_sd[h][i, c] = sd[len(rows) + n_]
    # the baselines (no prior: nothing to leave out), one scipy fit per (race, cut-off)
    for kind in ("fhk", "tibshirani"):
        base_pred = fit_baseline(kind, _row_splits(races, rows), backend="scipy").predicted
        for k, (i, c, _) in enumerate(rows):
            out_pred[kind][i, c] = base_pred[k, races[i].n - 1]
    fhk_err = out_pred["fhk"] - truth[:, None]
    weight = nan()
    for k, (i, c, _) in enumerate(rows):
        group = set(pool_of(races[i]))
        others = np.array([j != i and r.name in group for j, r in enumerate(races)])
        if others.sum() < MIN_STACK:  # too few races like this one to learn a weight: the sprinter alone
            weight[i, c] = 1.0
            out_pred["stacked"][i, c], out_sd["stacked"][i, c], out_dof["stacked"][i, c] = pred[k], sd[k], dof[k]
            for lv in LEVELS:
                lower["stacked"][lv][i, c], upper["stacked"][lv][i, c] = (
                    lower["model"][lv][i, c],
                    upper["model"][lv][i, c],
                )
            continue
        w, mean, scale_ = stack(
            out_pred["model"][i, c],
            out_sd["model"][i, c],
            out_pred["fhk"][i, c],
            inner_err[i][others],
            inner_sd[i][others],
            fhk_err[others],
            c,
        )
        weight[i, c] = w
        out_pred["stacked"][i, c], out_sd["stacked"][i, c], out_dof["stacked"][i, c] = mean, scale_[0], scale_[1]
        for lv in LEVELS:
            q = quantile_factor(lv, scale_[1])
            lower["stacked"][lv][i, c], upper["stacked"][lv][i, c] = mean - q * scale_[0], mean + q * scale_[0]
    return LooForecasts(
        races=tuple(r.name for r in races),
        sex=tuple(race_sex(r) or "" for r in races),
        fractions=tuple(float(f) for f in fractions),
        cut_m=cut_m,
        truth=truth,
        pred=out_pred,
        sd=out_sd,
        lower=lower,
        upper=upper,
        weight=weight,
        dof=out_dof,
    )


def calibration_factor(fc: LooForecasts, method: str = "model", keep=None) -> float:
    """The factor ``k`` by which ``method``'s predictive sd would have to be multiplied for the
    errors of the races ``keep`` (names; default all) to have unit mean squared normal score: each
    error's Student-t probability ``T_ν(error/sd)`` mapped to a normal quantile, ``k = sqrt(mean
    s²)``. 1 for calibrated intervals; above 1 where they are too narrow."""
    from scipy.stats import norm
    from scipy.stats import t as student_t

    keep = set(fc.races) if keep is None else set(keep)
    rows = np.array([n in keep for n in fc.races])[:, None] & ~np.isnan(fc.pred[method])
    z = (fc.errors(method) / fc.sd[method])[rows]
    nu = fc.dof[method][rows]
    score = norm.ppf(np.clip(student_t.cdf(z, nu), 1e-15, 1 - 1e-15))
    return float(np.sqrt(np.mean(score**2)))


def inside_inflated(fc: LooForecasts, method: str, level: float, factor: float) -> np.ndarray:
    """``(R, C)`` like `LooForecasts.inside`, for ``method``'s interval widened by ``factor`` about
    its centre (NaN skipped)."""
    half = fc.upper[method][level] - fc.pred[method]
    out = (np.abs(fc.errors(method)) <= factor * half).astype(float)
    return np.where(np.isnan(half), np.nan, out)


def stack(model_pred, model_sd, fhk_pred, model_err, model_sds, fhk_err, c):
    """The stacked forecast of one race at cut-off column ``c`` from the other races' errors.

    ``model_pred``, ``model_sd``, ``fhk_pred``: this race's forecasts [s]; ``model_err``,
    ``model_sds``, ``fhk_err``: ``(R', C)`` the other races' leave-one-out errors and predictive
    sds (NaN where skipped), from populations without this race. ``k² = mean (model_err /
    model_sds)²`` over every cut-off (the sprinter's sd calibration), ``v_f = mean fhk_err²`` at
    column ``c``; the sprinter's weight ``w = v_f / (v_f + k² s²)``. The scale ``g·sqrt(k² s² v_f
    / (k² s² + v_f))`` with ``g² = mean z²`` of the other races' stacked errors at every cut-off
    (their own weights from the same ``k``, ``v_f``), and Student-t quantiles with as many degrees
    of freedom as other races. Returns ``(w, mean, (scale, dof))``.
    """
    ok = ~np.isnan(model_err) & ~np.isnan(fhk_err)
    k2 = float(np.mean((model_err[ok] / model_sds[ok]) ** 2))
    v_f = np.array([np.mean(fhk_err[:, j][ok[:, j]] ** 2) if ok[:, j].any() else np.nan for j in range(ok.shape[1])])
    v_f = np.where(np.isnan(v_f), np.nanmean(v_f), v_f)

    def combine(pm, sm, pf, col):
        vm = k2 * sm**2
        w = v_f[col] / (v_f[col] + vm)
        return w, w * pm + (1 - w) * pf, np.sqrt(vm * v_f[col] / (vm + v_f[col]))

    cols = np.nonzero(ok)[1]
    _, m_o, s_o = combine(model_err[ok], model_sds[ok], fhk_err[ok], cols)  # errors: truth 0
    g2 = float(np.mean((m_o / s_o) ** 2))
    w, mean, s = combine(model_pred, model_sd, fhk_pred, c)
    n_races = int(np.sum(ok.any(axis=1)))
    return float(w), float(mean), (float(np.sqrt(g2) * s), float(max(n_races, 1)))


def _row_splits(races, rows) -> Splits:
    """The (race, cut-off) rows as one ``Splits`` batch (splits after the cut-off weight 0)."""
    rs = [races[i] for i, _, _ in rows]
    return Splits.from_arrays(
        [r.distances for r in rs],
        [r.times for r in rs],
        [r.reaction_time for r in rs],
        [r.wind for r in rs],
        weights=[r.until(cut).astype(float) for r, (_, _, cut) in zip(rs, rows)],
    )


def summary(fc: LooForecasts, keep=None) -> dict:
    """The numbers of the table: for the races ``keep`` (names; default all), per fraction ``f``:
    ``mae[method][f]`` mean |error| [s] and ``n[f]`` the number of races; ``wins[method]`` the
    (race, cut-off) pairs where that forecast's |error| is the smallest of ``model``, ``fhk``,
    ``tibshirani`` (and of ``stacked``, ``fhk``, ``tibshirani`` for ``stacked``; ties to the
    baselines) out of ``pairs``; ``coverage[(method, sex, level)]`` the share inside the
    interval and the count (``sex`` ``"all"``, ``"female"``, ``"male"``)."""
    keep = set(fc.races) if keep is None else set(keep)
    rows = np.array([n in keep for n in fc.races])
    out = {"mae": {m: {} for m in METHODS}, "n": {}, "wins": {}, "coverage": {}}
    for c, f in enumerate(fc.fractions):
        ok = rows & ~np.isnan(fc.pred["model"][:, c])
        out["n"][f] = int(ok.sum())
        for m in METHODS:
            out["mae"][m][f] = float(np.mean(np.abs(fc.errors(m)[ok, c]))) if ok.any() else np.nan
    valid = rows[:, None] & ~np.isnan(fc.pred["model"])
    base = np.minimum(np.abs(fc.errors("fhk")), np.abs(fc.errors("tibshirani")))
    out["pairs"] = int(valid.sum())
    for m in ("model", "stacked"):
        out["wins"][m] = int(np.sum((np.abs(fc.errors(m)) < base)[valid]))
    out["wins"]["fhk"] = int(np.sum(valid & (np.abs(fc.errors("fhk")) <= np.abs(fc.errors("model")))))
    sexes = np.array(fc.sex)
    for m in ("model", "stacked"):
        for sex in ("all", "female", "male"):
            sel = valid & ((sexes == sex)[:, None] if sex != "all" else True)
            for lv in LEVELS:
                ins = fc.inside(m, lv)[sel]
                out["coverage"][(m, sex, lv)] = (float(np.mean(ins)) if ins.size else np.nan, int(ins.size))
    return out


__all__ = [
    "FRACTIONS",
    "LooForecasts",
    "calibration_factor",
    "inside_inflated",
    "leave_one_out",
    "stack",
    "summary",
]
