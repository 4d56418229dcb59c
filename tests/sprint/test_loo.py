"""Leave-one-race-out forecasts (`jaxbio.sprint.loo`, issue #54) and the populations by race length
(`hierarchical.same_length`): the stacking formula and the summary against hand computations, the
pools, the forecast with a pooled prior against a fit with that prior given directly, and (slow)
the whole leave-one-out on four synthetic races against forecasts computed one by one."""

import warnings

import jax
import numpy as np
import pytest

import jaxbio.sprint as sprint
from jaxbio.sprint import hierarchical as H
from jaxbio.sprint import loo
from jaxbio.sprint.baselines import fit_baseline
from jaxbio.sprint.data import Race, race_sex
from jaxbio.sprint.fitting import fit, splits_from_races

jax.config.update("jax_enable_x64", True)


def _all_races():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sprint.data.SprintDataWarning)
        return sprint.embedded_races("all")


def test_race_sex_from_headers():
    sexes = {r.name: race_sex(r) for r in _all_races()}
    assert sexes["fraser_2009_berlin_wc_final"] == sexes["felix_2009_berlin_wc_200m"] == "female"
    assert {sexes[n] for n in sprint.embedded_names()} == {"male"}
    assert sexes["bolt_2009_berlin_wc_200m"] == "male"
    stub = Race("x", np.ones(1), np.ones(1) * 2, 0.1, 0.0, {"sex": "F", "race": "men's 100 m"}, "<x>", np.ones(1))
    assert race_sex(stub) == "female"  # an explicit sex line wins
    assert race_sex(Race("y", np.ones(1), np.ones(1) * 2, 0.1, 0.0, {}, "<y>", np.ones(1))) is None


def _ref(names):
    k = 3
    n = len(names)
    return H.ReferenceFits(
        race_names=tuple(names),
        names=("f0", "vmax", "energy"),
        theta=np.arange(n * k, dtype=float).reshape(n, k),
        gauss_newton=np.broadcast_to(np.eye(k), (n, k, k)).copy(),
        rss=np.ones(n),
        n_splits=np.full(n, 10.0),
        converged=np.ones(n, bool),
    )


def test_same_length_pool_and_pooled():
    races = _all_races()
    pool = H.same_length(races)
    by = {r.name: r for r in races}
    assert set(pool(by["felix_2009_berlin_wc_200m"])) == {"felix_2009_berlin_wc_200m", "bolt_2009_berlin_wc_200m"}
    assert "fraser_2009_berlin_wc_final" in pool(by["gay_2007_osaka_final"])
    ref = _ref([r.name for r in races])
    sub = H.pooled(ref, pool, by["felix_2009_berlin_wc_200m"])
    assert sub.race_names == ("bolt_2009_berlin_wc_200m",)  # its length, less itself
    np.testing.assert_array_equal(sub.theta, ref.theta[[ref.race_names.index("bolt_2009_berlin_wc_200m")]])
    lone = H.pooled(ref.without("bolt_2009_berlin_wc_200m"), pool, by["felix_2009_berlin_wc_200m"])
    assert lone.race_names == ref.without("bolt_2009_berlin_wc_200m").race_names  # nobody of its length: all
    assert H.pooled(ref, None, by["gay_2007_osaka_final"]) is ref
    both = _ref(["a", "b"]).concatenate(_ref(["b", "c"]))
    assert both.race_names == ("a", "b", "c") and both.theta.shape == (3, 3)


def test_stack_against_a_hand_computation():
    """The weight, mean and scale of `loo.stack` written out once more, from their definitions."""
    rng = np.random.default_rng(3)
    err = rng.normal(0, 0.05, (5, 3))
    sds = rng.uniform(0.03, 0.08, (5, 3))
    ferr = rng.normal(0.02, 0.06, (5, 3))
    err[4, 0] = ferr[4, 0] = sds[4, 0] = np.nan  # a skipped (race, cut-off)
    w, mean, (scale, dof) = loo.stack(10.0, 0.05, 10.1, err, sds, ferr, 1)
    k2 = np.nanmean((err / sds) ** 2)
    vf = np.mean(ferr[:, 1] ** 2)
    assert w == pytest.approx(vf / (vf + k2 * 0.05**2))
    assert mean == pytest.approx(w * 10.0 + (1 - w) * 10.1)
    z2 = []
    for i in range(5):
        for c in range(3):
            if np.isnan(err[i, c]):
                continue
            v_f = np.nanmean(ferr[:, c] ** 2)
            vm = k2 * sds[i, c] ** 2
            wi = v_f / (v_f + vm)
            z2.append(((wi * err[i, c] + (1 - wi) * ferr[i, c]) ** 2) / (vm * v_f / (vm + v_f)))
    assert scale == pytest.approx(np.sqrt(np.mean(z2)) * np.sqrt(k2 * 0.05**2 * vf / (k2 * 0.05**2 + vf)))
    assert dof == 5


def test_summary_against_a_hand_computation():
    nan = np.nan
    truth = np.array([10.0, 11.0, 20.0])
    pred = {
        "model": np.array([[10.1, 10.0], [11.3, 11.1], [nan, 20.5]]),
        "stacked": np.array([[10.05, 10.0], [11.2, 11.0], [nan, 20.5]]),
        "fhk": np.array([[10.2, 10.05], [11.1, 11.2], [nan, 21.0]]),
        "tibshirani": np.array([[10.2, 9.9], [11.2, 11.2], [nan, 20.0]]),
    }
    sd = {m: np.full((3, 2), 0.1) for m in ("model", "stacked")}
    lower = {m: {lv: pred[m] - 0.15 for lv in loo.LEVELS} for m in sd}
    upper = {m: {lv: pred[m] + 0.15 for lv in loo.LEVELS} for m in sd}
    fc = loo.LooForecasts(
        races=("a", "b", "c"),
        sex=("male", "female", "male"),
        fractions=(0.4, 0.6),
        cut_m=np.array([[40, 60], [40, 60], [nan, 120]]),
        truth=truth,
        pred=pred,
        sd=sd,
        lower=lower,
        upper=upper,
        weight=np.ones((3, 2)),
    )
    s = loo.summary(fc)
    assert s["n"] == {0.4: 2, 0.6: 3}
    assert s["mae"]["model"][0.4] == pytest.approx((0.1 + 0.3) / 2)
    assert s["mae"]["fhk"][0.6] == pytest.approx((0.05 + 0.2 + 1.0) / 3)
    assert s["mae"]["tibshirani"][0.6] == pytest.approx((0.1 + 0.2 + 0.0) / 3)
    # model strictly better than both baselines: (a, 0.4) 0.1 < 0.2, (a, 0.6) 0 < 0.05, (b, 0.6) 0.1 < 0.2
    assert s["pairs"] == 5 and s["wins"]["model"] == 3
    # inside ± 0.15: model a 0.4 (0.1), a 0.6, b 0.6; not b 0.4 (0.3), c 0.6 (0.5)
    assert s["coverage"][("model", "all", 0.95)] == (pytest.approx(3 / 5), 5)
    assert s["coverage"][("model", "female", 0.68)] == (pytest.approx(1 / 2), 2)
    assert s["coverage"][("model", "male", 0.68)] == (pytest.approx(2 / 3), 3)
    sub = loo.summary(fc, ["c"])
    assert sub["n"] == {0.4: 0, 0.6: 1} and sub["mae"]["model"][0.6] == pytest.approx(0.5)


def test_forecast_with_a_pooled_prior():
    """`forecast(pool=...)` fits each race with the predictive of the population of its pool's other
    races: the same fit as that prior given to `fit` directly (the jitted core), and the pool shows
    in the populations returned."""
    ref = H.reference_fits()
    races = [sprint.load_race("gay_2007")]
    pool = lambda race: ("bolt_2009_berlin_wc_final", "gay_2007_osaka_final", "powell_2007_osaka_final")  # noqa: E731
    res, fc, pops = H.forecast(races, 60.0, ref=ref, pool=pool)
    assert pops[0].race_names == ("bolt_2009_berlin_wc_final", "powell_2007_osaka_final")
    keep = [ref.race_names.index(n) for n in ("bolt_2009_berlin_wc_final", "powell_2007_osaka_final")]
    direct = H.population(ref.subset(keep))
    np.testing.assert_allclose(pops[0].mean, direct.mean)
    mu, sp = direct.predictive().prior()
    again = fit(races, fit_until=60.0, prior=(mu[None], sp[None]))
    np.testing.assert_allclose(res.theta, again.theta, rtol=0, atol=1e-10)
    assert fc.mean.shape == res.predicted.shape and np.all(fc.sd[0, : races[0].n] > 0)


@pytest.mark.slow
def test_leave_one_out_on_four_synthetic_races():
    """`leave_one_out` against forecasts computed one race at a time: the sprinter's (population of
    the other three), FHK's (the JAX fit, not the scipy one the LOO uses) and the stacked one from
    nested forecasts (populations of the other two) put through the stacking formula by hand."""
    pop = H.population(H.reference_fits())
    races, _ = H.synthetic_races(pop.mean, np.diag([0.03, 0.03, 0.03]) ** 2, 4, seed=5, noise=0.008)
    ref = H.ReferenceFits.from_fit(fit(races), [r.name for r in races])
    fc = loo.leave_one_out(races, ref, fractions=(0.5,))
    i = 2
    res, f1, _ = H.forecast([races[i]], 50.0, populations={None: H.population(ref, leave_out=races[i].name)})
    assert fc.pred["model"][i, 0] == pytest.approx(res.predicted[0, -1], abs=2e-6)
    assert fc.sd["model"][i, 0] == pytest.approx(f1.sd[0, -1], rel=1e-4)
    base = fit_baseline("fhk", splits_from_races([races[i]], 50.0)).predicted[0, races[i].n - 1]
    assert fc.pred["fhk"][i, 0] == pytest.approx(base, abs=1e-5)  # scipy vs JAX Levenberg–Marquardt
    errs, sds, ferr = np.full((3, 1), np.nan), np.full((3, 1), np.nan), np.full((3, 1), np.nan)
    for row, j in enumerate(k for k in range(4) if k != i):
        two = ref.without(races[i].name)
        r_j, f_j, _ = H.forecast([races[j]], 50.0, populations={None: H.population(two, leave_out=races[j].name)})
        errs[row, 0] = r_j.predicted[0, -1] - races[j].times[-1]
        sds[row, 0] = f_j.sd[0, -1]
        ferr[row, 0] = fc.pred["fhk"][j, 0] - races[j].times[-1]
    w, mean, (scale, _) = loo.stack(
        fc.pred["model"][i, 0], fc.sd["model"][i, 0], fc.pred["fhk"][i, 0], errs, sds, ferr, 0
    )
    assert fc.weight[i, 0] == pytest.approx(w, rel=1e-4)
    assert fc.pred["stacked"][i, 0] == pytest.approx(mean, abs=1e-5)
    assert fc.sd["stacked"][i, 0] == pytest.approx(scale, rel=1e-3)


def test_calibration_factor_and_widened_intervals():
    """``calibration_factor``: with normal intervals (infinite degrees of freedom) the root mean
    squared z of the kept races; with Student-t ones each z goes through the t's probability to a
    normal score first. ``inside_inflated``: inside the interval widened about its centre."""
    nan = np.nan
    truth = np.array([10.0, 11.0])
    pred = {m: np.array([[10.1, 10.3], [10.8, nan]]) for m in loo.METHODS}
    sd = {m: np.full((2, 2), 0.1) for m in ("model", "stacked")}
    lower = {m: {lv: pred[m] - 0.15 for lv in loo.LEVELS} for m in sd}
    upper = {m: {lv: pred[m] + 0.15 for lv in loo.LEVELS} for m in sd}
    kw = dict(
        races=("a", "b"),
        sex=("male", "female"),
        fractions=(0.4, 0.6),
        cut_m=np.array([[40, 60], [40, nan]]),
        truth=truth,
        pred=pred,
        sd=sd,
        lower=lower,
        upper=upper,
        weight=np.ones((2, 2)),
    )
    fc = loo.LooForecasts(**kw, dof={m: np.full((2, 2), np.inf) for m in sd})
    z = np.array([1.0, 3.0, -2.0])
    assert loo.calibration_factor(fc) == pytest.approx(np.sqrt(np.mean(z**2)))
    assert loo.calibration_factor(fc, keep=["a"]) == pytest.approx(np.sqrt((1 + 9) / 2))
    t = loo.LooForecasts(**kw, dof={m: np.full((2, 2), 4.0) for m in sd})
    import scipy.stats as st

    scores = st.norm.ppf(st.t.cdf(z, 4.0))
    assert loo.calibration_factor(t) == pytest.approx(np.sqrt(np.mean(scores**2)))
    assert loo.calibration_factor(t) < loo.calibration_factor(fc)  # heavy tails: a large z is less surprising
    # |errors| 0.1, 0.3, 0.2 against half-width 0.15 × 2 = 0.3
    np.testing.assert_array_equal(loo.inside_inflated(fc, "model", 0.95, 2.0), [[1.0, 1.0], [1.0, nan]])
    np.testing.assert_array_equal(loo.inside_inflated(fc, "model", 0.95, 1.0), [[1.0, 0.0], [0.0, nan]])


def test_physiological_priors_multiply_into_the_population():
    """`physiology.with_priors`: for a parameter of the population the product of two Gaussians
    (closed form in one dimension, the other parameters moved through their correlation), a new
    parameter appended with the prior alone."""
    from jaxbio.sprint.physiology import with_priors

    cov = np.array([[0.04, 0.01, 0.0], [0.01, 0.09, 0.0], [0.0, 0.0, 0.01]])
    pop = H.Population(
        names=("f0", "vmax", "energy"),
        race_names=("a", "b"),
        mean=np.array([2.7, 3.0, 6.9]),
        cov=cov,
        sigma=0.01,
        shrinkage=np.zeros((2, 3)),
        posterior_mean=np.zeros((2, 3)),
        iterations=1,
        mean_cov=np.zeros((3, 3)),
        dof=3.0,
        sigma_dof=20.0,
    )
    m0, s0 = np.log(800.0), 0.5
    out = with_priors(pop, {"energy": (m0, s0), "recovery": (-3.8, 0.5)})
    assert out.names == ("f0", "vmax", "energy", "recovery") and out.dof == 3.0 and out.sigma == 0.01
    v = 1 / (1 / 0.01 + 1 / s0**2)
    assert out.cov[2, 2] == pytest.approx(v)
    assert out.mean[2] == pytest.approx(v * (6.9 / 0.01 + m0 / s0**2))
    np.testing.assert_allclose(out.mean[:2], pop.mean[:2])  # energy uncorrelated with f0, vmax here
    np.testing.assert_allclose(out.cov[:2, :2], cov[:2, :2])
    assert out.mean[3] == -3.8 and out.cov[3, 3] == pytest.approx(0.25) and np.all(out.cov[3, :3] == 0)
    assert out.shrinkage.shape == out.posterior_mean.shape == (2, 4)
