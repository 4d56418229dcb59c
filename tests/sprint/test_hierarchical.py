"""The hierarchical sprinter (jb.sprint.hierarchical): the population's EM against closed forms and
a direct maximisation of the marginal likelihood, recovery of a known population, shrinkage,
predictive intervals against finite differences, and interval coverage on synthetic races."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

import jaxbio.sprint as sprint
from jaxbio.sprint import hierarchical as H
from jaxbio.sprint.data import SIGMA_ROUND
from jaxbio.sprint.fitting import fit

RACES = sprint.embedded_races()


def test_em_equal_noise_closed_form():
    """Equal, known per-race noise ``c``: the ML population is ``μ = mean θ̂`` and
    ``σ² = var(θ̂) − c`` (ddof 0) per parameter; a spread below the noise collapses to the floor."""
    rng = np.random.default_rng(0)
    R, c = 400, 0.02**2
    theta = rng.normal([1.0, 2.0, 3.0], [0.05, 0.03, 0.0], (R, 3)) + rng.normal(0, np.sqrt(c), (R, 3))
    info = np.broadcast_to(np.eye(3) / c, (R, 3, 3))
    mean, cov, _ = H.fit_population(theta, info, form="diagonal", strength=0.0, max_iter=5000, tol=1e-14)
    np.testing.assert_allclose(mean, theta.mean(0), atol=1e-10)
    v = theta.var(0) - c
    np.testing.assert_allclose(np.diag(cov)[:2], v[:2], rtol=1e-5)
    if v[2] < 0:  # the third parameter has no spread beyond the noise
        assert np.diag(cov)[2] < 1e-6


def _marginal_nll(params, theta, info, k):
    mu, Lf = params[:k], params[k:]
    L = np.zeros((k, k))
    L[np.tril_indices(k)] = Lf
    S = L @ L.T
    out = 0.0
    for t, A in zip(theta, info):
        C = S + np.linalg.inv(A)
        d = t - mu
        out += 0.5 * (d @ np.linalg.solve(C, d) + np.linalg.slogdet(C)[1])
    return out


def test_em_reaches_the_marginal_likelihood_maximum():
    """Full covariance, no hyperprior, unequal per-race precisions: EM's population equals the
    maximiser of ``Π N(θ̂_i; μ, Σ + A_i⁻¹)`` found by scipy (BFGS on μ and a Cholesky factor)."""
    rng = np.random.default_rng(1)
    R, k = 30, 3
    true_S = np.array([[4.0, 1.5, -1.0], [1.5, 3.0, 0.5], [-1.0, 0.5, 2.0]]) * 1e-3
    th = rng.multivariate_normal(np.zeros(k), true_S, R)
    info = []
    for _ in range(R):
        M = rng.normal(size=(k, k))
        info.append(M @ M.T * 300.0 + np.eye(k) * 100.0)
    info = np.array(info)
    theta = np.array([t + rng.multivariate_normal(np.zeros(k), np.linalg.inv(A)) for t, A in zip(th, info)])
    mean, cov, _ = H.fit_population(theta, info, form="full", strength=0.0, max_iter=20000, tol=1e-13)
    x0 = np.concatenate([theta.mean(0), np.linalg.cholesky(np.cov(theta.T))[np.tril_indices(k)]])
    ref = minimize(_marginal_nll, x0, args=(theta, info, k), method="BFGS", options=dict(gtol=1e-9, maxiter=5000))
    L = np.zeros((k, k))
    L[np.tril_indices(k)] = ref.x[k:]
    np.testing.assert_allclose(mean, ref.x[:k], atol=2e-5)
    np.testing.assert_allclose(cov, L @ L.T, atol=2e-5)
    assert (
        _marginal_nll(np.concatenate([mean, np.linalg.cholesky(cov)[np.tril_indices(k)]]), theta, info, k)
        <= ref.fun + 1e-7
    )


def test_population_recovery_improves_with_more_races():
    """Gaussian per-race likelihoods drawn around a known population: the error of the learned mean
    and sd shrinks with the number of races (averaged over 20 draws)."""
    rng = np.random.default_rng(2)
    mu, sd = np.array([2.8, 3.0, 6.9]), np.array([0.035, 0.03, 0.035])
    errs = {}
    for R in (5, 40, 400):
        e = []
        for _ in range(20):
            th = mu + sd * rng.normal(size=(R, 3))
            noise_sd = rng.uniform(0.005, 0.02, (R, 3))
            theta = th + noise_sd * rng.normal(size=(R, 3))
            info = np.array([np.diag(1 / s**2) for s in noise_sd])
            m, C, _ = H.fit_population(theta, info, form="diagonal", strength=1.0, scale=0.05)
            e.append(np.concatenate([np.abs(m - mu) / sd, np.abs(np.sqrt(np.diag(C)) - sd) / sd]))
        errs[R] = np.mean(e)
    assert errs[5] > errs[40] > errs[400], errs
    assert errs[400] < 0.05, errs


@pytest.fixture(scope="module")
def embedded():
    ref_fit = fit(RACES)
    ref = H.ReferenceFits.from_fit(ref_fit, [r.name for r in RACES])
    out = {cut: H.forecast(RACES, cut, ref=ref) for cut in (40.0, 60.0, None)}
    return ref, out


def test_sigma_and_prior_scaling(embedded):
    ref, out = embedded
    s = H.sigma_obs(ref)
    assert SIGMA_ROUND < s < 0.02  # rounding plus timing noise and misfit
    pop = out[60.0][2][0]
    assert pop.race_names == tuple(r.name for r in RACES[1:])  # leave-one-out by name
    mu, sp = pop.prior()
    np.testing.assert_allclose(sp.T @ sp, (pop.sigma / SIGMA_ROUND) ** 2 * np.linalg.inv(pop.cov), rtol=1e-9)
    assert np.all((pop.shrinkage > 0) & (pop.shrinkage < 1))


def test_shrinkage_grows_with_fewer_splits(embedded):
    """Each parameter of each race is pulled more toward the population when fewer splits are fitted."""
    _, out = embedded
    sh = {cut: out[cut][1].shrinkage for cut in out}
    assert np.all(sh[40.0] >= sh[60.0] - 1e-9) and np.all(sh[60.0] >= sh[None] - 1e-9), sh
    assert np.all(sh[40.0][:, 2] > 0.5)  # the fatigue reserve E is hardly seen in the first 40 m


def test_predictive_sd_against_finite_differences(embedded):
    """The predictive sd ``sqrt(J C Jᵀ + σ²)`` with ``J`` by central differences of `split_times`
    and ``C = (J_fᵀ J_f/σ² + Σ⁻¹)⁻¹`` computed here again (``Σ`` the new race's predictive
    covariance, ``(Σ̂ + Var μ̂)·(ν + 1)/ν``), and the Student-t intervals with the
    Welch–Satterthwaite degrees of freedom (scipy's t quantiles)."""
    from scipy.stats import t as student_t

    _, out = embedded
    res, fc, pops = out[60.0]
    i, race = 1, RACES[1]
    pop = pops[i]
    assert pop.dof == H.HYPER_STRENGTH + 3 and pop.sigma_dof == sum(r.n - 3 for r in RACES[2:]) + RACES[0].n - 3
    cov = (pop.cov + pop.mean_cov) * (pop.dof + 1) / pop.dof
    np.testing.assert_allclose(pop.predictive().cov, cov, rtol=1e-12)
    sp = res.splits.race(i)

    one = jax.jit(
        lambda th: sprint.split_times(
            res.model.with_log(res.names, th), race.distances, race.reaction_time, race.wind, sp.duration
        )
    )

    def times(th):
        return np.asarray(one(jnp.asarray(th)))

    h = 1e-5
    J = np.stack([(times(res.theta[i] + h * e) - times(res.theta[i] - h * e)) / (2 * h) for e in np.eye(3)], 1)
    f = race.until(60.0)
    C = np.linalg.inv(J[f].T @ J[f] / pop.sigma**2 + np.linalg.inv(cov))
    sd = np.sqrt(np.einsum("lj,jm,lm->l", J, C, J) + pop.sigma**2)
    np.testing.assert_allclose(fc.sd[i, : race.n], sd, rtol=1e-4)
    np.testing.assert_allclose(fc.mean[i, : race.n], times(res.theta[i]), atol=1e-6)
    np.testing.assert_allclose(res.std[i], res.values[i] * np.sqrt(np.diag(C)), rtol=1e-4)
    v_pop = np.einsum("lj,jm,lm->l", J @ C, np.linalg.inv(cov), J @ C)  # the prior's share of J C Jᵀ
    v_noise = sd**2 - v_pop
    dof = (v_pop + v_noise) ** 2 / (v_pop**2 / pop.dof + v_noise**2 / pop.sigma_dof)
    np.testing.assert_allclose(fc.dof[i, : race.n], dof, rtol=1e-3)
    assert np.all((fc.dof[i, : race.n] > pop.dof - 1e-9) & (fc.dof[i, : race.n] < pop.dof + pop.sigma_dof))
    for lv in (0.68, 0.95):
        z = (fc.upper[lv] - fc.mean)[i, : race.n] / fc.sd[i, : race.n]
        np.testing.assert_allclose(z, student_t.ppf(0.5 + lv / 2, dof), rtol=1e-3)


def test_embedded_forecasts_converge_and_beat_baselines_on_average(embedded):
    from jaxbio.sprint.baselines import fit_baseline
    from jaxbio.sprint.fitting import splits_from_races

    _, out = embedded
    errs = []
    for cut in (40.0, 60.0):
        res, fc, _ = out[cut]
        assert res.converged.all()
        sp = splits_from_races(RACES, cut)
        base = [fit_baseline(k, sp, backend="scipy").predicted for k in ("fhk", "tibshirani")]
        for i, r in enumerate(RACES):
            j = r.n - 1
            errs.append([abs(p[i, j] - r.times[j]) for p in (res.predicted, *base)])
    m = np.mean(errs, axis=0)
    assert m[0] < m[1] and m[0] < m[2], m


SYN_MEAN = np.array([2.79, 2.975, 6.91])
SYN_SD = np.array([0.035, 0.03, 0.035])


@pytest.fixture(scope="module")
def synthetic64():
    races, truth = H.synthetic_races(SYN_MEAN, np.diag(SYN_SD**2), 64, seed=1)
    return races, truth, H.ReferenceFits.from_fit(fit(races), [r.name for r in races])


@pytest.mark.slow
def test_population_recovered_from_synthetic_sprinter_fits(synthetic64):
    """64 synthetic races fitted by the sprinter (10 m splits rounded to 0.01 s): the learned
    population is within sampling error of the drawn parameters' mean and sd; fitted to ≤ 50 m,
    the estimates under the population prior are closer to the truth than plain least squares on
    the same splits (with all splits the shrinkage is ~3 % and the gain within sampling noise)."""
    races, truth, ref = synthetic64
    pop = H.population(ref)
    se = truth.std(0) / np.sqrt(len(races))
    assert np.all(np.abs(pop.mean - truth.mean(0)) < 3 * se + 1e-3), (pop.mean, truth.mean(0))
    np.testing.assert_allclose(pop.sd, truth.std(0), rtol=0.15)
    assert pop.sigma == pytest.approx(SIGMA_ROUND, rel=0.15)
    raw = np.sqrt(np.mean((fit(races, fit_until=50.0).theta - truth) ** 2, axis=0))
    shrunk = np.sqrt(np.mean((H.forecast(races, 50.0, ref=ref)[0].theta - truth) ** 2, axis=0))
    assert np.all(shrunk < raw), (shrunk, raw)


@pytest.mark.slow
def test_interval_coverage_on_synthetic_races(synthetic64):
    """64 races drawn from a known population, 10 m splits rounded to 0.01 s, fitted to ≤ 40, 50 and
    60 m with the population learned (leave-one-out) from full fits of the others: the share of the
    held-out splits inside the 68 % and 95 % intervals is within 0.10 and 0.04 of nominal (the
    splits of one race are correlated: about 64 independent draws per cut-off)."""
    races, _, ref = synthetic64
    n = len(races)
    inside = {0.68: [], 0.95: []}
    T = np.array([r.times for r in races])
    L = T.shape[1]
    for cut in (40.0, 50.0, 60.0):
        res, fc, _ = H.forecast(races, cut, ref=ref)
        assert res.converged.all()
        held = ~fc.fitted[:n, :L]
        Tp = np.pad(T, ((0, 0), (0, fc.mean.shape[1] - L)))
        for lv in inside:
            inside[lv] += list(fc.inside(Tp, lv)[:n, :L][held])
    cov = {lv: float(np.mean(v)) for lv, v in inside.items()}
    assert abs(cov[0.68] - 0.68) < 0.10 and abs(cov[0.95] - 0.95) < 0.04, cov


# ---- calibration: the predictive of a new race (issue #21, item 3) ----------------------------


def test_mean_covariance_closed_form():
    """Equal races with precision ``A``: ``Var μ̂ = (Σ + A⁻¹)/R``; a race that sees nothing
    (``A = 0``) adds nothing to the mean's precision."""
    rng = np.random.default_rng(3)
    M = rng.standard_normal((3, 3))
    cov, A = M @ M.T + np.eye(3), np.diag([4.0, 2.0, 9.0])
    R = 4
    _, P, _ = H.posterior(np.zeros((R, 3)), np.repeat(A[None], R, 0), np.zeros(3), cov)
    np.testing.assert_allclose(H.mean_covariance(cov, P), (cov + np.linalg.inv(A)) / R, rtol=1e-10)
    _, P5, _ = H.posterior(
        np.zeros((R + 1, 3)), np.concatenate([np.repeat(A[None], R, 0), np.zeros((1, 3, 3))]), np.zeros(3), cov
    )
    np.testing.assert_allclose(H.mean_covariance(cov, P5), (cov + np.linalg.inv(A)) / R, rtol=1e-8)


def test_predictive_dof_welch_satterthwaite():
    """Closed forms: one part alone keeps its degrees of freedom; two equal parts with ν each give 2ν."""
    assert H.predictive_dof(1.0, 0.0, 4.0, 30.0) == pytest.approx(4.0)
    assert H.predictive_dof(0.0, 2.0, 4.0, 30.0) == pytest.approx(30.0)
    assert H.predictive_dof(1.0, 1.0, 5.0, 5.0) == pytest.approx(10.0)
    assert np.isinf(H.predictive_dof(1.0, 1.0, np.inf, np.inf))
    assert H.quantile_factor(0.95, np.inf) == pytest.approx(H.Z[0.95])
    assert H.quantile_factor(0.95, 4.0) == pytest.approx(2.7764451, rel=1e-6)  # t tables


def test_new_race_interval_exact_for_a_normal_sample():
    """Races measured exactly (``A_i`` huge), no hyperprior: the population of R = 5 draws of
    N(0, 1) and its `predictive` give ``x̄ ± t_{R−1} s √(1 + 1/R)``, whose coverage of a sixth draw is
    exactly nominal; measured over 1,000 samples within 3 binomial sd. The plug-in interval
    (normal quantile, maximum-likelihood ``Σ``, no ``Var μ̂``) that the forecasts used before
    covers clearly less: this test tells the two apart."""
    rng = np.random.default_rng(0)
    R, n = 5, 1000
    inside = {lv: [] for lv in H.Z}
    plug = {lv: [] for lv in H.Z}
    for _ in range(n):
        x = rng.standard_normal(R + 1)
        ref = H.ReferenceFits(
            race_names=tuple(f"r{i}" for i in range(R)),
            names=("f0",),
            theta=x[:R, None],
            gauss_newton=np.full((R, 1, 1), 1e8),
            rss=np.zeros(R),
            n_splits=np.full(R, 10.0),
            converged=np.ones(R, bool),
        )
        pop = H.population(ref, sigma=1.0, strength=0.0)
        new = pop.predictive()
        assert pop.dof == R - 1
        np.testing.assert_allclose(new.cov[0, 0], np.var(x[:R], ddof=1) * (1 + 1 / R), rtol=1e-6)
        for lv in H.Z:
            inside[lv].append(abs(x[R] - new.mean[0]) <= H.quantile_factor(lv, new.dof) * np.sqrt(new.cov[0, 0]))
            plug[lv].append(abs(x[R] - pop.mean[0]) <= H.Z[lv] * np.sqrt(pop.cov[0, 0]))
    for lv in H.Z:
        se = np.sqrt(lv * (1 - lv) / n)
        assert abs(np.mean(inside[lv]) - lv) < 3 * se, (lv, np.mean(inside[lv]))
        assert np.mean(plug[lv]) < lv - 3 * se, (lv, np.mean(plug[lv]))


@pytest.mark.slow
def test_interval_coverage_in_sets_of_five_synthetic_races():
    """The embedded regime with known truth: 20 sets of 5 synthetic races (timing noise 0.008 s
    like the embedded races' σ, rounded to 0.01 s), each race forecast from ≤ 40, 50, 60 m with the
    population of the other 4 of its set. The share of the last splits inside the calibrated 68 %
    and 95 % intervals is within 3 binomial sd of nominal, counting only the 100 races as
    independent (their three cut-offs are correlated)."""
    S, R = 20, 5
    races, _ = H.synthetic_races(SYN_MEAN, np.diag(SYN_SD**2), S * R, seed=11, noise=0.008)
    ref = H.ReferenceFits.from_fit(fit(races), [r.name for r in races])
    pops = {}
    for g in range(S):
        sub = ref.subset(list(range(g * R, g * R + R)))
        pops.update({n: H.population(sub, leave_out=n) for n in sub.race_names})
    inside = {lv: [] for lv in H.Z}
    for cut in (40.0, 50.0, 60.0):
        res, fc, _ = H.forecast(races, cut, populations=pops)
        assert res.converged.all()
        for i, r in enumerate(races):
            for lv in inside:
                inside[lv].append(fc.lower[lv][i, r.n - 1] <= r.times[-1] <= fc.upper[lv][i, r.n - 1])
    for lv, v in inside.items():
        assert abs(np.mean(v) - lv) < 3 * np.sqrt(lv * (1 - lv) / (S * R)), (lv, np.mean(v))


def test_fit_names_the_one_way_to_the_hierarchical_prior():
    """``fit`` no longer takes ``prior="hierarchical"`` (one way: `hierarchical.forecast`); the
    refusal names where it went, before any fitting."""
    from jaxbio.sprint.data import embedded_races
    from jaxbio.sprint.fitting import fit

    with pytest.raises(
        ValueError,
        match=r"'population', got 'hierarchical' \(the hierarchical prior: jaxbio\.sprint\.hierarchical\.forecast\)",
    ):
        fit(embedded_races()[:1], prior="hierarchical")
