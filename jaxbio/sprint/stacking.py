"""The stacked forecast of a race's final time: the sprinter averaged with FHK (issue #54).

`jaxbio.sprint.loo` showed, over every shipped race, that the sprinter forecast from its
population fails where a race is unlike that population (Fraser 2009: a woman's race, forecast
0.17 s slow from 60 m with a population of five men) while the sprinter stacked with FHK, with
precision weights learned from *nested* leave-one-out forecasts of the other races (`loo.stack`),
does not. This module brings that stacked forecast to `with_stacked` (after `hierarchical.forecast`) and
``jaxbio sprint --fit-until``.

What the weights need. For a race forecast from splits ≤ ``D`` m with the population of its
group (the reference races of its pool, `hierarchical.same_length`), `loo.stack` takes the
sprinter's and FHK's errors on the *other* races of the group, each forecast at ``D`` and at the
leave-one-out's cut-offs (`loo.FRACTIONS` of the race length) from a population that also leaves
out the race being forecast (when it is a reference race): the "nested" forecasts
(`NestedForecasts`). FHK's are scipy fits (milliseconds); the sprinter's are fits with a prior,
``R·R`` of them per cut-off for ``R`` reference races, more than the forecast itself.

So they are shipped. ``data/nested_forecasts.json`` holds the nested forecasts of the default
collection (the five men's 100 m races of the command line's reference) at ``CUTS_M`` (every
10 m from 20 to 90 m, which covers every cut-off of the 100 m races: a fit depends only on which
splits are ≤ ``D``, so a requested ``D`` uses the stored cut-off that fits the same splits of
every reference race); it is loaded when its fingerprint (the reference fits' fingerprint, which
covers the races as parsed, the model and the fit, plus the hyperprior, the cut-offs and
``NESTED_VERSION``) matches, and computed otherwise (another group or cut-off: one batched fit).
Regenerate it with ``python -m jaxbio.sprint.stacking --write``; ``tests/sprint/test_stacking.py``
fails while it is stale.

A race whose group has fewer than `loo.MIN_STACK` other reference races (a 200 m race: the
command line's reference holds one other) gets no stacked forecast (``available`` False).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib import resources

import numpy as np

from jaxbio._files import read_bytes
from jaxbio.sprint import hierarchical
from jaxbio.sprint.data import Race
from jaxbio.sprint.hierarchical import FORM, HYPER_SCALE, HYPER_STRENGTH, ReferenceFits, pooled, population
from jaxbio.sprint.loo import FRACTIONS, LEVELS, MIN_SPLITS, MIN_STACK, _fit_rows, _row_splits, stack

#: the shipped nested forecasts' cut-offs [m] (100 m races: every cut-off with 2 to 9 splits)
CUTS_M = (20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0)
#: the shipped file, in ``jaxbio/sprint/data/``
FILENAME = "nested_forecasts.json"
#: bump when the nested forecasts' definition changes (then regenerate the file)
NESTED_VERSION = 1


@dataclasses.dataclass(frozen=True)
class NestedForecasts:
    """The sprinter's forecasts of the final time of a group of ``R`` reference races (numpy).

    ``race_names`` ``(R,)``; ``cuts_m`` ``(C,)`` cut-offs [m]; ``truth`` ``(R,)`` s the measured
    final times; ``pred``, ``sd`` ``(R + 1, C, R)`` s: ``[h, c, j]`` is race ``j``'s forecast from
    its splits ≤ ``cuts_m[c]`` with the population of the group less races ``j`` and ``h`` (row
    ``R``: less ``j`` alone, for a race forecast that is not in the group) and its predictive sd;
    NaN where ``h == j`` or race ``j`` has fewer than `loo.MIN_SPLITS` splits ≤ the cut-off.
    """

    race_names: tuple
    cuts_m: tuple
    truth: np.ndarray
    pred: np.ndarray
    sd: np.ndarray

    def column(self, races: list[Race], cut: float) -> int | None:
        """The index of the stored cut-off whose fitted splits equal those ≤ ``cut`` for every race
        of ``races`` (the group, in ``race_names`` order), or ``None``."""
        want = [r.until(cut) for r in races]
        for c, stored in enumerate(self.cuts_m):
            if all(np.array_equal(r.until(stored), w) for r, w in zip(races, want)):
                return c
        return None


@dataclasses.dataclass(frozen=True)
class StackedForecast:
    """The stacked forecasts of the final times of ``B`` races (numpy, ``(B,)`` each; NaN where not
    ``available``).

    ``mean`` s; ``sd`` s the scale of the Student-t with ``dof`` degrees of freedom;
    ``lower``/``upper`` ``{0.68: (B,), 0.95: (B,)}`` s the central intervals; ``weight`` the
    sprinter's share (FHK's is ``1 − weight``); ``model``, ``model_sd``, ``fhk`` s the two
    forecasts it averages; ``available`` ``(B,)`` bool; ``reason`` ``(B,)`` why not (``""``
    where available); ``learned_from`` per race the reference races whose nested errors set its
    weight; ``nested_from`` per race ``"shipped"`` or ``"computed"`` (``""`` where not available).
    """

    mean: np.ndarray
    sd: np.ndarray
    dof: np.ndarray
    lower: dict
    upper: dict
    weight: np.ndarray
    model: np.ndarray
    model_sd: np.ndarray
    fhk: np.ndarray
    available: np.ndarray
    reason: tuple
    learned_from: tuple
    nested_from: tuple


def _settings(form, strength, scale) -> dict:
    return {
        "form": form,
        "strength": float(strength),
        "scale": float(scale),
        "min_splits": MIN_SPLITS,
        "nested_version": NESTED_VERSION,
    }


def fingerprint(
    group: list[Race], cuts, *, model=None, names=None, form=FORM, strength=HYPER_STRENGTH, scale=HYPER_SCALE
):
    """SHA-256 (hex) of what the nested forecasts of ``group`` at ``cuts`` depend on: the reference
    fits' fingerprint (`hierarchical.reference_fingerprint`: the races as parsed, ``model``, the
    free ``names``, the fit's defaults and version), the hyperprior, ``cuts`` and
    ``NESTED_VERSION``; ``None`` for a traced ``model``."""
    from jaxbio.sprint.fitting import FREE
    from jaxbio.sprint.hierarchical import reference_fingerprint

    ref_key = reference_fingerprint(group, model, FREE if names is None else names)
    if ref_key is None:
        return None
    payload = {
        "reference": ref_key,
        "cuts_m": [float(c) for c in cuts],
        **_settings(form, strength, scale),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def compute_nested(
    group: list[Race],
    ref: ReferenceFits,
    cuts=CUTS_M,
    *,
    model=None,
    form: str = FORM,
    strength: float = HYPER_STRENGTH,
    scale: float = HYPER_SCALE,
) -> NestedForecasts:
    """The `NestedForecasts` of the races ``group`` (each in ``ref``, by name) at ``cuts`` [m]: one
    batched fit of every (excluded race ``h`` or none, cut-off, race ``j ≠ h``), each with the
    predictive of the population of ``ref``'s ``group`` races less ``j`` and ``h`` as its prior
    (as `loo.leave_one_out` forecasts them)."""
    from jaxbio.sprint.fitting import steps_for
    from jaxbio.sprint.model import Sprinter

    model = Sprinter() if model is None else model
    names = [r.name for r in group]
    base = ref.subset([ref.race_names.index(n) for n in names])
    R, C = len(group), len(cuts)
    rows, pops, where = [], [], []
    cache = {}
    for h in range(R + 1):
        for c, cut in enumerate(cuts):
            for j, r in enumerate(group):
                if j == h or int(r.until(cut).sum()) < MIN_SPLITS:
                    continue
                key = (j, h)
                if key not in cache:
                    sub = base.without(names[h]) if h < R else base
                    cache[key] = population(
                        pooled(sub, None, r), leave_out=r.name, form=form, strength=strength, scale=scale
                    )
                rows.append((j, float(cut)))
                pops.append(cache[key])
                where.append((h, c, j))
    pred = np.full((R + 1, C, R), np.nan)
    sd = np.full((R + 1, C, R), np.nan)
    if rows:
        n_steps = steps_for(max(float(r.distances[-1]) for r in group))
        p, s, _, _ = _fit_rows(group, rows, pops, model=model, names=ref.names, n_steps=n_steps)
        for k, (h, c, j) in enumerate(where):
            pred[h, c, j], sd[h, c, j] = p[k], s[k]
    return NestedForecasts(
        race_names=tuple(names),
        cuts_m=tuple(float(c) for c in cuts),
        truth=np.array([r.times[-1] for r in group], dtype=float),
        pred=pred,
        sd=sd,
    )


# ---- the shipped file --------------------------------------------------------------------


def shipped_file():
    """The shipped file (an ``importlib.resources`` path; it may be missing)."""
    return resources.files("jaxbio.sprint") / "data" / FILENAME


def read(path=None) -> tuple[str, NestedForecasts] | None:
    """``(fingerprint, NestedForecasts)`` of the shipped file (or ``path``); ``None`` when missing or
    unreadable."""
    path = shipped_file() if path is None else path
    try:
        raw = json.loads(read_bytes(path, "nested forecasts file").decode("utf-8"))
        nested = NestedForecasts(
            race_names=tuple(raw["race_names"]),
            cuts_m=tuple(float(c) for c in raw["cuts_m"]),
            truth=np.asarray(raw["truth"], dtype=float),
            pred=np.asarray(raw["pred"], dtype=float),
            sd=np.asarray(raw["sd"], dtype=float),
        )
        key = str(raw["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return key, nested


def _json_array(a) -> list:
    """A nested list of floats with ``None`` (JSON ``null``) for NaN."""
    a = np.asarray(a, dtype=float)
    return [_json_array(x) for x in a] if a.ndim else (float(a) if np.isfinite(a) else None)


def write(path, nested: NestedForecasts, key: str) -> None:
    """Write ``nested`` with its fingerprint ``key`` to ``path`` (JSON; NaN as ``null``)."""
    out = {
        "fingerprint": key,
        "nested_version": NESTED_VERSION,
        "generated_by": "python -m jaxbio.sprint.stacking --write",
        "race_names": list(nested.race_names),
        "cuts_m": list(nested.cuts_m),
        "truth": [float(t) for t in nested.truth],
        "pred": _json_array(nested.pred),
        "sd": _json_array(nested.sd),
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, allow_nan=False)
        f.write("\n")


def lookup(group: list[Race], **kw) -> NestedForecasts | None:
    """The shipped nested forecasts if they are those of ``group`` at ``CUTS_M`` with the settings
    ``kw`` (``model``, ``names``, ``form``, ``strength``, ``scale``) in float64; else ``None``."""
    from jaxbio.sprint import _reference

    if not _reference._float64():
        return None
    found = read()
    if found is None:
        return None
    key, nested = found
    if nested.race_names != tuple(r.name for r in group):
        return None
    want = fingerprint(group, CUTS_M, **kw)
    return nested if want is not None and key == want else None


def write_nested_forecasts(path=None) -> NestedForecasts:
    """Compute the nested forecasts of the default collection (the command line's 100 m reference)
    at ``CUTS_M`` from the shipped reference fits and write them (default: this source tree's
    ``data/nested_forecasts.json``). Run it (``python -m jaxbio.sprint.stacking --write``) after
    regenerating the reference fits or changing the hyperprior: the tests fail until then."""
    from pathlib import Path

    import jax

    from jaxbio.sprint.data import embedded_races
    from jaxbio.sprint.hierarchical import reference_fits

    jax.config.update("jax_enable_x64", True)
    group = embedded_races()
    nested = compute_nested(group, reference_fits(group), CUTS_M)
    path = Path(__file__).with_name("data") / FILENAME if path is None else path
    write(path, nested, fingerprint(group, CUTS_M))
    return nested


def _warn_if_stale(group, names, settings) -> None:
    """A ``SprintDataWarning`` when the group and settings are the shipped file's (the default
    collection, default model and hyperprior, float64) but the file does not hold them: it is
    missing or stale, so every ``--fit-until`` computes the nested forecasts again."""
    import warnings

    from jaxbio.sprint import _reference
    from jaxbio.sprint.data import SprintDataWarning, embedded_races

    default = dict(model=None, form=FORM, strength=HYPER_STRENGTH, scale=HYPER_SCALE)
    if not _reference._float64() or settings != default:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SprintDataWarning)
        ours = [r.name for r in group] == [r.name for r in embedded_races()]
    if not ours or fingerprint(group, CUTS_M, names=names) != fingerprint(embedded_races(), CUTS_M):
        return
    warnings.warn(
        SprintDataWarning(
            f"jaxbio/sprint/data/{FILENAME}",
            0,
            "the shipped nested forecasts are missing or stale: computing them for the stacked forecast "
            "instead (slow); regenerate them with `python -m jaxbio.sprint.stacking --write`",
        ),
        stacklevel=3,
    )


# ---- the stacked forecast ------------------------------------------------------------------


def _fhk_final(races: list[Race], cuts) -> np.ndarray:
    """``(R, C)`` s FHK's forecasts of the final times from the splits ≤ each cut-off (NaN with fewer
    than `loo.MIN_SPLITS`)."""
    from jaxbio.sprint.baselines import fit_baseline

    rows = [(j, c, cut) for j, r in enumerate(races) for c, cut in enumerate(cuts) if r.until(cut).sum() >= MIN_SPLITS]
    out = np.full((len(races), len(cuts)), np.nan)
    if rows:
        pred = fit_baseline("fhk", _row_splits(races, rows), backend="scipy").predicted
        for k, (j, c, _) in enumerate(rows):
            out[j, c] = pred[k, races[j].n - 1]
    return out


def stacked_final_times(
    races: list[Race],
    fit_until: float,
    model_pred,
    model_sd,
    fhk_pred,
    *,
    ref: ReferenceFits,
    reference: list[Race],
    pool=None,
    model=None,
    form: str = FORM,
    strength: float = HYPER_STRENGTH,
    scale: float = HYPER_SCALE,
) -> StackedForecast:
    """The stacked forecasts (`loo.stack`) of the final times of ``races`` fitted to their splits ≤
    ``fit_until`` m.

    ``model_pred``, ``model_sd``, ``fhk_pred`` ``(B,)`` s: each race's sprinter forecast, its
    predictive sd, and FHK's forecast, from those splits. ``ref``: the reference fits the
    sprinter's populations came from; ``reference``: those races (`Race`, at least the ones of
    ``ref`` that a pool names); ``pool``: as in `hierarchical.forecast` (``None``: every race of
    ``ref``). A race's group is its pool's reference races; the stack needs `loo.MIN_STACK` of
    them besides the race itself. Its weight and scale come from the group's nested forecasts
    at ``fit_until`` and at `loo.FRACTIONS` of the race's length (shipped for the default
    collection, else computed: `compute_nested`), exactly as `loo.leave_one_out` stacks a race
    of its own set at those cut-offs. Returns `StackedForecast`.
    """
    from jaxbio.sprint.hierarchical import quantile_factor

    B = len(races)
    by_name = {r.name: r for r in reference}
    settings = dict(model=model, form=form, strength=strength, scale=scale)
    nan = lambda: np.full(B, np.nan)  # noqa: E731
    mean, sd, dof, weight = nan(), nan(), nan(), nan()
    lower = {lv: nan() for lv in LEVELS}
    upper = {lv: nan() for lv in LEVELS}
    available = np.zeros(B, bool)
    reason, learned, source = [""] * B, [()] * B, [""] * B
    groups: dict = {}  # group names -> (NestedForecasts from shipped or computed, source)
    fhk_of: dict = {}  # (group names, cut-offs) -> (R, C) FHK's final times
    computed: dict = {}  # (group names, cut-offs) -> NestedForecasts computed here
    for b, race in enumerate(races):
        names = tuple(n for n in (pool(race) if pool is not None else ref.race_names) if n in ref.race_names)
        others = [n for n in names if n != race.name]
        if len(others) < MIN_STACK:
            reason[b] = f"fewer than {MIN_STACK} other reference races of its pool ({len(others)})"
            continue
        missing = [n for n in names if n not in by_name]
        if missing:
            raise ValueError(f"stacked_final_times: reference race(s) {missing} not given in reference")
        group = [by_name[n] for n in names]
        if sum(int(g.until(fit_until).sum()) >= MIN_SPLITS for g in group if g.name != race.name) < MIN_STACK:
            reason[b] = f"fewer than {MIN_STACK} other reference races with {MIN_SPLITS} splits ≤ {fit_until:g} m"
            continue
        length = float(race.distances[-1])
        cuts = [f * length for f in FRACTIONS]
        # fit_until's column: a fraction's if every group race fits the same splits there, else its own
        same = [c for c, cut in enumerate(cuts) if all(np.array_equal(g.until(cut), g.until(fit_until)) for g in group)]
        c_at = same[0] if same else len(cuts)
        cuts = cuts if same else cuts + [float(fit_until)]
        if names not in groups:
            shipped = lookup(group, names=ref.names, **settings)
            if shipped is None:
                _warn_if_stale(group, ref.names, settings)
            groups[names] = (shipped, "shipped") if shipped is not None else (None, "")
        nested, src = groups[names]
        if (names, tuple(cuts)) not in fhk_of:  # FHK fitted once per group and cut-offs, not per race
            fhk_of[(names, tuple(cuts))] = _fhk_final(group, cuts)
        cols = [nested.column(group, c) for c in cuts] if nested is not None else [None]
        if nested is None or any(c is None for c in cols):  # computed once per group and cut-offs
            if (names, tuple(cuts)) not in computed:
                computed[(names, tuple(cuts))] = compute_nested(group, ref, cuts, **settings)
            nested = computed[(names, tuple(cuts))]
            cols, src = list(range(len(cuts))), "computed"
        h = names.index(race.name) if race.name in names else len(names)
        keep = [j for j, n in enumerate(names) if n != race.name]
        inner = nested.pred[h][cols][:, keep].T  # (R', C)
        inner_sd = nested.sd[h][cols][:, keep].T
        truth = nested.truth[keep]
        fhk_err = fhk_of[(names, tuple(cuts))][keep] - truth[:, None]
        w, m, (s, d) = stack(
            float(model_pred[b]),
            float(model_sd[b]),
            float(fhk_pred[b]),
            inner - truth[:, None],
            inner_sd,
            fhk_err,
            c_at,
        )
        available[b] = True
        mean[b], sd[b], dof[b], weight[b] = m, s, d, w
        for lv in LEVELS:
            q = float(quantile_factor(lv, d))
            lower[lv][b], upper[lv][b] = m - q * s, m + q * s
        learned[b] = tuple(names[j] for j in keep)
        source[b] = src
    return StackedForecast(
        mean=mean,
        sd=sd,
        dof=dof,
        lower=lower,
        upper=upper,
        weight=weight,
        model=np.asarray(model_pred, dtype=float),
        model_sd=np.asarray(model_sd, dtype=float),
        fhk=np.asarray(fhk_pred, dtype=float),
        available=available,
        reason=tuple(reason),
        learned_from=tuple(learned),
        nested_from=tuple(source),
    )


def with_stacked(
    fc,
    races,
    fit_until: float,
    res,
    ref,
    *,
    reference=None,
    pool=None,
    model=None,
    form: str = FORM,
    strength: float = HYPER_STRENGTH,
    scale: float = HYPER_SCALE,
):
    """The `jaxbio.sprint.hierarchical.Forecast` ``fc`` of `hierarchical.forecast` (its ``res``,
    the same ``races``, ``fit_until``, ``ref``, ``pool`` and hyperprior) with ``stacked``: FHK
    fitted to the same splits, stacked with the sprinter's final times (`stacked_final_times`).
    ``reference``: the reference races of ``ref`` (`Race`; default: the embedded races of those
    names)."""
    import dataclasses
    import warnings

    from jaxbio.sprint.baselines import fit_baseline
    from jaxbio.sprint.data import SprintDataWarning, embedded_races
    from jaxbio.sprint.fitting import splits_from_races

    if reference is None:
        with warnings.catch_warnings():  # a reference race's unknown wind is not this call's input
            warnings.simplefilter("ignore", SprintDataWarning)
            reference = [r for r in embedded_races("all") if r.name in ref.race_names]
    last = np.array([r.n - 1 for r in races])
    b = np.arange(len(races))
    fhk = fit_baseline("fhk", splits_from_races(races, fit_until), backend="scipy").predicted[b, last]
    st = stacked_final_times(
        races,
        fit_until,
        np.asarray(res.predicted)[b, last],
        fc.sd[b, last],
        fhk,
        ref=ref,
        reference=reference,
        pool=pool,
        model=model,
        form=form,
        strength=strength,
        scale=scale,
    )
    return hierarchical.Forecast(
        **{f.name: getattr(fc, f.name) for f in dataclasses.fields(fc) if f.name != "stacked"}, stacked=st
    )


__all__ = [
    "CUTS_M",
    "NestedForecasts",
    "StackedForecast",
    "compute_nested",
    "fingerprint",
    "stacked_final_times",
    "with_stacked",
    "write_nested_forecasts",
]


if __name__ == "__main__":  # python -m jaxbio.sprint.stacking --write [PATH]
    import argparse

    parser = argparse.ArgumentParser(prog="python -m jaxbio.sprint.stacking")
    parser.add_argument(
        "--write",
        nargs="?",
        const="",
        metavar="PATH",
        required=True,
        help="compute the nested forecasts of the default collection and write them (default: the "
        "package's data/nested_forecasts.json)",
    )
    args = parser.parse_args()
    from jaxbio.sprint.stacking import write_nested_forecasts as _write  # the module, not this __main__ copy

    _write(args.write or None)
