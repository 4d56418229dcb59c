"""jaxbio.sprint.fv_profile: the Samozino et al. (2016) horizontal force–velocity profile against
closed forms (mono-exponential without air; the linear-force sprinter without fatigue or drag),
a direct numpy/scipy computation with air friction, and the fitted run against a new simulation."""

import jax
import numpy as np
import pytest
from scipy import stats
from scipy.integrate import quad
from scipy.optimize import brentq

import jaxbio.sprint as sprint
from jaxbio.sprint import fv_profile as fv

G = 9.81


def _rf(a):
    return a / np.hypot(a, G)


def test_split_time_profile_closed_form_without_air():
    """v = vmax(1 − e^{−s/τ}) in a vacuum: F_H/m = (vmax − v)/τ is a line, so F0 = vmax/τ,
    V0 = vmax, Pmax = vmax²/(4τ) exactly; RF_max is RF at the first sample after 0.3 s."""
    vmax, tau = 12.0, 1.2
    p = fv.split_time_profile(vmax, tau, pressure=0.0)
    assert p.f0 == pytest.approx(vmax / tau, rel=1e-12)
    assert p.v0 == pytest.approx(vmax, rel=1e-12)
    assert p.pmax == pytest.approx(vmax**2 / (4 * tau), rel=1e-12)
    assert p.slope == pytest.approx(-1 / tau, rel=1e-12)
    assert p.rf_max == pytest.approx(_rf(vmax / tau * np.exp(-0.31 / tau)), rel=1e-12)
    s = np.linspace(0.31, 6.0, 570)  # 100 Hz after 0.3 s
    v = vmax * (1 - np.exp(-s / tau))
    assert p.d_rf == pytest.approx(stats.linregress(v, _rf((vmax - v) / tau)).slope, rel=1e-9)
    assert p.window == 6.0


@pytest.mark.parametrize("wind", [0.0, -1.5, 2.0])
def test_split_time_profile_with_air_against_a_direct_computation(wind):
    vmax, tau, m, h = 11.8, 1.25, 94.0, 1.95
    p_pa, T = 100000.0, 300.0
    p = fv.split_time_profile(vmax, tau, mass=m, height=h, wind=wind, pressure=p_pa, temperature=T)
    # written out again from Samozino et al. (2016) / shorts::get_air_resistance
    rho = 1.293 * (p_pa / 101325.0) * 273.15 / T
    k = 0.5 * rho * 0.266 * 0.2025 * h**0.725 * m**0.425 * 0.9
    s = np.linspace(0.01, 6.0, 600)  # 100 Hz after movement onset
    v = vmax * (1 - np.exp(-s / tau))
    F = m * vmax / tau * np.exp(-s / tau) + k * np.sign(v - wind) * (v - wind) ** 2
    fit = stats.linregress(v, F)
    F0, V0 = fit.intercept, -fit.intercept / fit.slope
    np.testing.assert_allclose([p.f0, p.v0, p.pmax, p.slope], [F0 / m, V0, F0 * V0 / 4 / m, fit.slope / m], rtol=1e-9)
    rf = F / np.hypot(F, m * G)
    late = s > 0.3
    assert p.rf_max == pytest.approx(rf[late].max(), rel=1e-12)
    assert p.d_rf == pytest.approx(stats.linregress(v[late], rf[late]).slope, rel=1e-9)
    # at vmax the runner still pushes against the air: the line reaches zero force beyond vmax
    assert p.v0 > vmax


@pytest.mark.slow
def test_model_profile_closed_form_without_fatigue_or_drag():
    """Linear force–velocity (hill_ratio huge), a step impulse, no fatigue and no drag:
    a = f0 − λv with λ = f0/vmax + α (tests/sprint/test_model_and_fits.py::
    test_closed_form_without_fatigue_or_drag), so in a vacuum F0 = f0, V0 = f0/λ, and
    RF_max = RF(f0 e^{−0.31 λ})."""
    with jax.enable_x64(True):
        f0, vmax, alpha = 10.0, 14.0, 0.2
        m = sprint.Sprinter(
            f0=f0, vmax=vmax, rayleigh=alpha, hill_ratio=1e9, tau=1e-9, drag=1e-14, energy=1e14, activation_power=1e-9
        )
        p = fv.model_profile(m, pressure=0.0)
    lam = f0 / vmax + alpha
    assert p.f0 == pytest.approx(f0, rel=1e-5)
    assert p.v0 == pytest.approx(f0 / lam, rel=1e-5)
    assert p.pmax == pytest.approx(f0 * f0 / lam / 4, rel=1e-5)
    assert p.rf_max == pytest.approx(_rf(f0 * np.exp(-0.31 * lam)), rel=1e-5)
    assert p.window == 6.0  # still accelerating at 6 s: no cut at the top speed


def test_profile_from_run_cuts_at_the_top_speed():
    """Past its top speed a run's F_H(v) turns back: only the samples up to it are used."""
    ts = np.linspace(0.0, 8.0, 81)
    v = 10 * np.sin(np.pi * ts / 10)  # top speed at 5 s
    a = np.pi * np.cos(np.pi * ts / 10)
    p = fv.profile_from_run(ts, v, a, pressure=0.0)
    assert p.window == pytest.approx(5.0)
    s = np.arange(1, 501) / 100
    ref = stats.linregress(10 * np.sin(np.pi * s / 10), np.pi * np.cos(np.pi * s / 10))
    assert p.f0 == pytest.approx(ref.intercept, rel=1e-6)


@pytest.fixture(scope="module")
def bolt_fit():
    with jax.enable_x64(True):
        races = [sprint.load_race("bolt_2009")]
        return races, sprint.fit(races)


def test_fit_profile_equals_a_new_simulation(bolt_fit):
    """The profile from the run the fit kept (81 steps) equals the one of a finer new simulation."""
    races, res = bolt_fit
    a = fv.fit_profile(res, 0)
    with jax.enable_x64(True):
        b = fv.model_profile(res.sprinter(0), races[0].wind)
    np.testing.assert_allclose(a[:6], b[:6], rtol=2e-3)
    # sprint-science ranges: a linear profile of an elite 100 m
    assert 8 < a.f0 < 13 and 11 < a.v0 < 14 and 0.5 < a.rf_max < 0.7 and a.d_rf < 0


def test_mean_split_speeds_against_the_integral_of_the_speed():
    """Furusawa–Hill–Keller: the mean of v(s) over each split equals Δd/Δt of its split times."""
    vmax, tau, rt = 12.0, 1.2, 0.15
    d = np.array([10.0, 20.0, 50.0, 100.0])
    x = lambda s: vmax * (s - tau * (1 - np.exp(-s / tau)))  # noqa: E731
    s = np.array([brentq(lambda u: x(u) - di, 1e-9, 30) for di in d])
    mid, speed = fv.mean_split_speeds(d, s + rt, rt)
    edges = np.concatenate([[0.0], s])
    ref = [quad(lambda u: vmax * (1 - np.exp(-u / tau)), a, b)[0] / (b - a) for a, b in zip(edges[:-1], edges[1:])]
    np.testing.assert_allclose(speed, ref, rtol=1e-10)
    np.testing.assert_allclose(mid, [5, 15, 35, 75])
    with pytest.raises(ValueError, match="one length"):
        fv.mean_split_speeds(d, s[:3], rt)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(mass=0.0), "mass"),
        (dict(mass=-80.0), "mass"),
        (dict(height=0.0), "height"),
        (dict(height=float("nan")), "height"),
        (dict(temperature=-1.0), "temperature"),
        (dict(pressure=-1.0), "pressure"),
    ],
)
def test_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        fv.split_time_profile(12.0, 1.2, **kw)
    with pytest.raises(ValueError, match=match):
        fv.air_friction(**{"mass": 80.0, "height": 1.8, **kw})


def test_bad_motion():
    with pytest.raises(ValueError, match="vmax"):
        fv.split_time_profile(0.0, 1.2)
    with pytest.raises(ValueError, match="tau"):
        fv.split_time_profile(12.0, -1.0)
    with pytest.raises(ValueError, match="one length"):
        fv.profile_from_motion(np.arange(5.0), np.arange(4.0), np.arange(5.0))
    with pytest.raises(ValueError, match="after 0.3 s"):
        fv.profile_from_motion(np.array([0.0, 0.1, 0.2, 0.4]), np.ones(4), np.ones(4))


# ---- the figure of `jaxbio sprint --plot` and the numbers in it -----------------------------


N_SAMPLES = 400  # one compiled sampler for every test here


@pytest.fixture(scope="module")
def bolt_samples(bolt_fit):
    from jaxbio.sprint.plots import predictive_samples

    with jax.enable_x64(True):
        return predictive_samples(bolt_fit[1], N_SAMPLES, seed=1)


@pytest.mark.slow
def test_predictive_samples_match_the_delta_method(bolt_fit, bolt_samples):
    """Sampling the log-parameters from the Laplace Gaussian gives split-time spreads equal to the
    delta method's sqrt(diag(J C Jᵀ)) (J: forward-mode Jacobian of the split times)."""
    from jaxbio.sprint.plots import band, predictive_samples

    races, res = bolt_fit
    r = races[0]
    smp = bolt_samples
    with jax.enable_x64(True):
        base = res.model

        def times(theta):
            return sprint.split_times(
                base.with_log(res.names, theta), r.distances, r.reaction_time, r.wind, float(res.splits.duration[0])
            )

        J = np.asarray(jax.jacfwd(times)(jax.numpy.asarray(res.theta[0])))
    pred = smp["predicted"][0][:, : r.n]
    delta = np.sqrt(np.diag(J @ res.cov_log[0] @ J.T))
    np.testing.assert_allclose(pred.std(0), delta, rtol=0.2)
    np.testing.assert_allclose(pred.mean(0), res.predicted[0, : r.n], atol=0.2 * delta.max())
    lo, hi = band(pred, axis=0)
    assert np.all(lo < res.predicted[0, : r.n]) and np.all(res.predicted[0, : r.n] < hi)
    assert smp["v"].shape == smp["f"].shape == (1, 400, res.profile["x"].shape[-1])
    with pytest.raises(ValueError, match="n_samples"):
        predictive_samples(res, 1)
    with pytest.raises(ValueError, match="level"):
        band(pred, 1.5)


def test_race_figure_has_its_panels_and_is_written(bolt_fit, bolt_samples, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from jaxbio.sprint.baselines import fit_baseline
    from jaxbio.sprint.plots import FITNESS_CAPTION, FV_LINE, FV_MODEL, FV_SPLITS, race_figure, write_figure

    races, res = bolt_fit
    splits = sprint.splits_from_races(races)
    fhk, tib = (fit_baseline(k, splits, backend="scipy").rows(1) for k in ("fhk", "tibshirani"))
    with jax.enable_x64(True):
        fig = race_figure(races, res, fhk, tib, 60.0, bolt_samples)
    ax_v, ax_f, ax_fv, ax_r = fig.axes
    assert len(fig.axes) == 4  # speed, fitness, force-velocity, one residual panel per race
    assert "speed" in ax_v.get_title() and "fitness" in ax_f.get_title() and "force" in ax_fv.get_title()
    assert ax_r.get_title() == races[0].label and ax_r.get_ylabel().startswith("predicted − measured")
    assert "Laplace" not in " ".join(ax.get_title() for ax in fig.axes)  # plain words for a coach
    # one figure legend names the races by athlete and year; each panel's key its line styles
    (races_legend,) = fig.legends
    assert [t.get_text() for t in races_legend.get_texts()] == [f"{races[0].label} (RMSE {1e3 * res.rmse[0]:.1f} ms)"]
    keys = [t.get_text() for t in ax_v.get_legend().get_texts()]
    assert keys == [
        "measured: mean speed over each split",
        "model: mean speed over each split",
        "model: instantaneous speed",
        "90 % band (the fit's uncertainty)",
    ]
    for leg in [races_legend] + [ax.get_legend() for ax in (ax_v, ax_fv, ax_r)]:
        assert min(t.get_fontsize() for t in leg.get_texts()) >= 8.5  # readable
    # fitness is explained in the figure
    assert any(t.get_text() == FITNESS_CAPTION for t in ax_f.texts)
    assert "share of the fresh muscle force" in FITNESS_CAPTION and "no unit" in FITNESS_CAPTION
    # the linear force-velocity profile of sprint science: the line (0, F0)-(V0, 0) of the race's
    # profile, which is the least-squares line (numpy's polyfit, not the module's) of the drawn F_H(v)
    prof = fv.fit_profile(res, 0, wind=races[0].wind)
    (line,) = [ln for ln in ax_fv.get_lines() if ln.get_gid() == "fv-linear"]
    np.testing.assert_allclose(line.get_xdata(), [0.0, prof.v0], rtol=1e-12)
    np.testing.assert_allclose(line.get_ydata(), [prof.f0, 0.0], rtol=1e-12)
    (curve,) = [ln for ln in ax_fv.get_lines() if ln.get_gid() == "fv-model"]
    slope, f0 = np.polyfit(curve.get_xdata(), curve.get_ydata(), 1)
    assert f0 == pytest.approx(prof.f0, rel=1e-9) and -f0 / slope == pytest.approx(prof.v0, rel=1e-9)
    fv_keys = [t.get_text() for t in ax_fv.get_legend().get_texts()]
    assert fv_keys[:3] == [FV_MODEL, FV_LINE.replace(": ", ":\n"), FV_SPLITS]
    assert fv_keys[3] == f"{races[0].label}: F0 {prof.f0:.1f} N/kg, V0 {prof.v0:.1f} m/s, Pmax {prof.pmax:.0f} W/kg"
    # no key covers the data of its panel (drawn points, lines, steps and bands, in display coordinates)
    fig.canvas.draw()
    for ax in (ax_v, ax_fv, ax_f):
        box = (ax.get_legend() or next(t for t in ax.texts if t.get_text() == FITNESS_CAPTION)).get_window_extent()
        pts = [ln.get_xydata() for ln in ax.get_lines() if ln.get_transform() is ax.transData]  # not axvline
        pts += [p.get_path().vertices for p in ax.patches] + [c.get_paths()[0].vertices for c in ax.collections]
        xy = ax.transData.transform(np.concatenate([np.asarray(p, dtype=float) for p in pts]))
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        inside = (xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)
        assert not inside.any(), (ax.get_title(), xy[inside][:3])
    plt.close(fig)
    path = tmp_path / "race.png"
    with jax.enable_x64(True), open(path, "wb") as f:
        write_figure(f, "png", races, res, fhk, tib, n_samples=N_SAMPLES)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


def test_cli_prints_and_writes_the_force_velocity_profile(tmp_path, capsys, monkeypatch):
    import argparse
    import json

    from jaxbio.cli._sprint import add_parser

    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")
    parser = argparse.ArgumentParser(prog="jaxbio")
    add_parser(parser.add_subparsers(dest="command"))
    js = tmp_path / "r.json"
    args = parser.parse_args(["sprint", "--no-progress", "--race", "gay", "--json", str(js)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "force-velocity profile per kg" in out and "model splits" in out
    rec = json.loads(js.read_text())
    fvr = rec["force_velocity"]
    assert set(fvr) == {"method", "model", "split_times", "assumed"}
    race = sprint.load_race("gay")
    fhk = rec["baselines"]["fhk"]["parameters"]
    ref = fv.split_time_profile(fhk["vmax"]["value"], fhk["tau"]["value"], wind=race.wind)
    assert fvr["split_times"]["f0"]["value"] == pytest.approx(ref.f0, rel=1e-9)
    assert fvr["split_times"]["f0"]["unit"] == "N/kg" and fvr["model"]["pmax"]["unit"] == "W/kg"
    assert 8 < fvr["model"]["f0"]["value"] < 13
    prof = rec["profile"]
    assert prof["distance_m"][0] == 0 and prof["distance_m"][-1] == 100 and prof["fitness"][0] == pytest.approx(1.0)
    assert prof["fitness"][-1] == pytest.approx(rec["finish_fitness"], abs=1e-4)
