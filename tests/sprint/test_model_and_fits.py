"""The sprinter model, split times, fits and baselines (jb.sprint), against independent references:
closed forms, scipy's solve_ivp and least_squares, finite differences, synthetic round trips."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq, least_squares

import jaxbio as jb
import jaxbio.sprint as sprint
from jaxbio.sprint import model as M
from jaxbio.sprint.baselines import fit_baseline
from jaxbio.sprint.fitting import fit, fit_splits

D10 = np.arange(10.0, 101.0, 10.0)
RACES = sprint.embedded_races()


def test_parameters_positive_and_validated():
    m = sprint.Sprinter(f0=12.0, vmax=18.0)
    assert float(m.f0) == pytest.approx(12.0) and float(m.vmax) == pytest.approx(18.0)
    assert float(m.energy) == pytest.approx(M.DEFAULTS["energy"])
    for name in M.PARAMETERS:
        assert float(m.value(name)) > 0
    with pytest.raises(ValueError, match="f0"):
        sprint.Sprinter(f0=-1.0)
    with pytest.raises(ValueError, match="unknown"):
        sprint.Sprinter(speed=3.0)
    # any real log gives a positive parameter
    m2 = m.with_log(("f0", "energy"), jnp.array([-3.0, 2.0]))
    assert float(m2.f0) == pytest.approx(np.exp(-3.0)) and float(m2.energy) == pytest.approx(np.exp(2.0))


def test_system_is_built_from_library_parts():
    """The sprinter is a jb.HamiltonianSystem: q̇ = ∂H/∂p, and ṗ, ė equal the module docstring's
    equations written again in numpy (``_numpy_rhs``), at a state mid-race."""
    p = dict(M.DEFAULTS, mass=70.0)
    m = sprint.Sprinter(**p)
    system = sprint.sprinter_system(m, wind=0.7)
    assert isinstance(system, jb.HamiltonianSystem) and system.tree.joint_types == ("prismatic",)
    v, e, s = 9.5, 0.6, 3.0
    y = {"q": jnp.array([12.0]), "p": jnp.array([70.0 * v]), "f": jnp.array([e])}
    dy = system.vector_field(s, y)
    np.testing.assert_allclose(dy["q"], jax.grad(lambda p_: system.energy({**y, "p": p_}))(y["p"]), rtol=1e-14)
    ref = _numpy_rhs(p, 0.7)(s, [12.0, v, e])
    np.testing.assert_allclose([dy["q"][0], dy["p"][0] / 70.0, dy["f"][0]], ref, rtol=1e-12)
    np.testing.assert_allclose(system.fitness.value(jnp.array([1.0, 0.0])), [1.0, 0.0], atol=1e-15)


def test_closed_form_without_fatigue_or_drag():
    """Linear force–velocity, step impulse, no fatigue, no drag: v = v∞(1 − e^{−λs}) exactly."""
    f0, vmax, alpha = 10.0, 14.0, 0.2
    m = sprint.Sprinter(
        f0=f0, vmax=vmax, rayleigh=alpha, hill_ratio=1e9, tau=1e-9, drag=1e-14, energy=1e14, activation_power=1e-9
    )
    lam = f0 / vmax + alpha
    vinf = f0 / lam
    s_exact = np.array([brentq(lambda s: vinf * (s - (1 - np.exp(-lam * s)) / lam) - d, 1e-6, 30) for d in D10])
    got = np.asarray(sprint.split_times(m, D10, 0.15, 0.0, 13.0)) - 0.15
    np.testing.assert_allclose(got, s_exact, atol=2e-6)


def _numpy_rhs(p, wind):
    """The vector field written again in numpy, per unit mass, from the module docstring."""

    def rhs(s, y):
        q, v, e = y
        b = p["hill_ratio"] * p["vmax"]
        hill = p["f0"] * (b - p["hill_ratio"] * v) / (v + b)
        fit_ = e * (1 + p["half_saturation"]) / (e + p["half_saturation"])
        drive = fit_ * (1 - np.exp(-s / p["tau"])) * hill
        rel = v - wind
        a = drive - p["rayleigh"] * v - p["drag"] * rel * abs(rel)
        use = (p["activation_power"] + drive * v) * e / (e + M.RESERVE_EPS)
        return [v, a, -use / p["energy"] + p["recovery"] * (1 - e)]

    return rhs


@pytest.mark.parametrize("wind", [-0.5, 0.9])
def test_split_times_against_solve_ivp(wind):
    p = dict(M.DEFAULTS, f0=16.5, vmax=19.5, energy=900.0, tau=0.03)
    m = sprint.Sprinter(**p)
    sol = solve_ivp(_numpy_rhs(p, wind), (0, 13), [0, 0, 1], method="DOP853", rtol=1e-11, atol=1e-12, dense_output=True)
    ref = np.array([brentq(lambda s: sol.sol(s)[0] - d, 1e-3, 13) for d in D10]) + 0.146
    got = np.asarray(sprint.split_times(m, D10, 0.146, wind, 13.0))
    np.testing.assert_allclose(got, ref, atol=3e-5)  # 80 steps; 1000× below the data's 0.01 s
    got = np.asarray(sprint.split_times(m, D10, 0.146, wind, 13.0, n_steps=640))
    np.testing.assert_allclose(got, ref, atol=1e-7)
    # the trajectory: reserve positive and decreasing, fitness in (0, 1]
    traj = sprint.simulate_race(m, 13.0, wind, n_steps=640)
    e = np.asarray(traj.f[:, 0])
    np.testing.assert_allclose(e, sol.sol(np.asarray(traj.ts))[2], atol=1e-6)
    np.testing.assert_allclose(traj.qd[:, 0], sol.sol(np.asarray(traj.ts))[1], atol=1e-6)
    fitness = np.asarray(sprint.sprinter_system(m).fitness.value(traj.f[:, 0]))
    assert np.all(e > 0) and np.all(np.diff(e) < 0) and np.all((fitness > 0) & (fitness <= 1 + 1e-12))


def _gradient_setup():
    m = sprint.Sprinter(f0=16.0, vmax=20.0, energy=950.0, tau=0.02)
    names = M.PARAMETERS
    th0 = m.log_values(names)

    def f(th, **kw):
        return sprint.split_times(m.with_log(names, th), D10, 0.15, 0.5, 12.0, **kw)

    h = 1e-5
    fj = jax.jit(f)
    J_fd = np.stack(
        [(np.asarray(fj(th0.at[j].add(h))) - np.asarray(fj(th0.at[j].add(-h)))) / (2 * h) for j in range(len(names))],
        axis=1,
    )
    return f, th0, names, J_fd


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_split_time_gradients_against_finite_differences():
    """∂t_i/∂(log θ_j) for every parameter, forward and reverse mode, against central differences."""
    f, th0, names, J_fd = _gradient_setup()
    J_fwd = np.asarray(jax.jacfwd(f)(th0))
    np.testing.assert_allclose(J_fwd, J_fd, atol=1e-7, rtol=1e-5)
    w = np.linspace(1.0, 2.0, len(D10))
    g_rev = np.asarray(jax.grad(lambda th: jnp.dot(w, f(th)))(th0))
    np.testing.assert_allclose(g_rev, w @ J_fd, atol=1e-6, rtol=1e-5)
    # mass does not change split times; every other parameter does
    assert np.max(np.abs(J_fwd[:, names.index("mass")])) < 1e-9
    assert all(np.max(np.abs(J_fwd[:, j])) > 1e-6 for j, n in enumerate(names) if n != "mass")


def _synthetic(n_races, seed, rounded=True):
    rng = np.random.default_rng(seed)
    base = sprint.Sprinter()
    truth = np.log(np.array([M.DEFAULTS[n] for n in M.FREE]))[None] + rng.normal(0, [0.05, 0.05, 0.04], (n_races, 3))
    rt = rng.uniform(0.12, 0.18, n_races)
    wind = rng.uniform(-1, 1.5, n_races)
    times = jax.jit(jax.vmap(lambda th, r, w: sprint.split_times(base.with_log(M.FREE, th), D10, r, w, 13.0)))(
        jnp.asarray(truth), jnp.asarray(rt), jnp.asarray(wind)
    )
    times = np.asarray(times)
    if rounded:
        times = np.round(times, 2)
    return truth, sprint.Splits.from_arrays([D10] * n_races, list(times), rt, wind, length=16)


def test_synthetic_round_trip_batch():
    """8 races simulated with known parameters, rounded to 0.01 s, fitted in one vmapped call."""
    truth, splits = _synthetic(8, 0)
    res = fit_splits(splits)
    assert res.converged.all()
    err = np.abs(res.theta - truth)
    assert np.all(err < 4 * np.sqrt(np.diagonal(res.cov_log, axis1=1, axis2=2)) + 1e-3), (err, res.std)
    assert np.all(err < 0.05)
    assert np.all(res.rmse < 0.005)  # rounding noise is 0.0029 s
    assert np.all(np.isfinite(res.std)) and np.all(res.std > 0)


def test_embedded_races_accuracy_and_uncertainty():
    """Issue #6: every race's split-time RMSE ≤ 0.01 s and below both baselines; finite Laplace std."""
    res = fit(RACES)
    splits = sprint.splits_from_races(RACES)
    fhk = fit_baseline("fhk", splits).rows(len(RACES))
    tib = fit_baseline("tibshirani", splits).rows(len(RACES))
    assert res.converged.all() and fhk.converged.all() and tib.converged.all()
    assert np.all(res.rmse <= 0.01), res.rmse
    assert np.all(res.rmse < fhk.rmse) and np.all(res.rmse < tib.rmse), (res.rmse, fhk.rmse, tib.rmse)
    assert np.all(np.isfinite(res.std)) and np.all(res.std > 0)
    assert np.all(res.std / res.values < 0.1)
    for i, _race in enumerate(RACES):
        p = res.profile_of(i)
        assert 11.0 < p.top_speed < 13.0 and 40 < p.top_speed_at < 90 and p.speed_lost > 0


def test_sprinter_fit_equals_scipy_least_squares():
    """The package's Levenberg–Marquardt (quick-compile path, see ``fit.QUICK_COMPILE``) reaches the
    optimum scipy's trust-region ``least_squares`` finds on the same residuals and Jacobian."""
    from jaxbio.sprint.fitting import FREE, N_STEPS, _residuals, default_starts

    res = fit(RACES[:1])
    sp = sprint.splits_from_races(RACES[:1]).race(0)
    k = len(FREE)
    args = (M.Sprinter(), sp, jnp.zeros(k), jnp.zeros((k, k)))
    r = jax.jit(lambda th: _residuals(th, args, names=FREE, n_steps=N_STEPS)[0])
    J = jax.jit(jax.jacfwd(r))
    ref = least_squares(
        lambda th: np.asarray(r(jnp.asarray(th))),
        default_starts(M.Sprinter())[0],
        jac=lambda th: np.asarray(J(jnp.asarray(th))),
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    assert ref.success and res.converged[0]
    np.testing.assert_allclose(res.theta[0], ref.x, atol=1e-4)
    np.testing.assert_allclose(res.cost[0], ref.cost, rtol=1e-6)


@pytest.mark.slow
def test_quick_compile_equals_default_compile():
    """``QUICK_COMPILE`` (XLA -O0, classic emitters) changes compile and run time, not the result."""
    splits = sprint.splits_from_races(RACES)
    a, b = fit_splits(splits, quick_compile=True), fit_splits(splits, quick_compile=False)
    np.testing.assert_allclose(a.theta, b.theta, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.predicted, b.predicted, rtol=0, atol=1e-10)


def test_fit_until_prediction_beats_baselines_on_average():
    """Issue #6: fitted to ≤ 60 m with the hierarchical prior, the predicted 100 m time is closer to
    the truth than the baselines' on average over the embedded races."""
    ref = fit(RACES)
    res = fit(RACES, fit_until=60.0, prior="population", reference_fit=ref)
    splits = sprint.splits_from_races(RACES, 60.0)
    errs = []
    for pred in (res.predicted, fit_baseline("fhk", splits).predicted, fit_baseline("tibshirani", splits).predicted):
        errs.append(np.mean([abs(pred[i, r.n - 1] - r.times[-1]) for i, r in enumerate(RACES)]))
    assert res.converged.all()
    assert errs[0] < errs[1] and errs[0] < errs[2], errs


@pytest.mark.parametrize("fit_until", [None, 60.0])
def test_scipy_backend_baselines_equal_the_jax_fits(fit_until):
    """The CLI fits the baselines with scipy (no compilation); same residuals, same optimum as the
    vmapped JAX Levenberg–Marquardt: predicted splits and RMSE agree (Tibshirani's c may run to
    0 along a flat direction, so parameters are compared through their predictions)."""
    splits = sprint.splits_from_races(RACES, fit_until)
    n = len(RACES)
    for kind in ("fhk", "tibshirani"):
        a, b = fit_baseline(kind, splits).rows(n), fit_baseline(kind, splits, backend="scipy").rows(n)
        assert a.converged.all() and b.converged.all()
        np.testing.assert_allclose(b.predicted, a.predicted, atol=1e-5)
        np.testing.assert_allclose(b.rmse, a.rmse, atol=1e-6)
    with pytest.raises(ValueError, match="backend"):
        fit_baseline("fhk", splits, backend="numba")


def _scipy_time(motion, th, d):
    s_hi = 30.0
    return brentq(lambda s: motion(th, s)[0] - d, 1e-9, s_hi)


def _fhk_np(th, s):
    vmax, tau = np.exp(th)
    return vmax * (s - tau * (1 - np.exp(-s / tau))), None


def _tib_np(th, s):
    f, c, k = np.exp(th)
    A = f / k + c / k**2
    return A * (s - (1 - np.exp(-k * s)) / k) - c * s**2 / (2 * k), None


@pytest.mark.parametrize(
    "kind,motion,x0",
    [("fhk", _fhk_np, [np.log(12), np.log(1.2)]), ("tibshirani", _tib_np, [np.log(10), np.log(0.05), np.log(0.8)])],
)
def test_baselines_against_scipy_least_squares(kind, motion, x0):
    race = sprint.load_race("powell_2007")  # a race where Tibshirani's c is clearly positive
    res = fit_baseline(kind, sprint.splits_from_races([race])).rows(1)

    def resid(th):
        return np.array([race.reaction_time + _scipy_time(motion, th, d) for d in race.distances]) - race.times

    ref = least_squares(resid, x0, xtol=1e-14, ftol=1e-14, gtol=1e-14)
    assert res.converged[0]
    np.testing.assert_allclose(res.theta[0], ref.x, rtol=1e-5, atol=1e-6)
    assert res.rmse[0] == pytest.approx(np.sqrt(np.mean(ref.fun**2)), rel=1e-6)
