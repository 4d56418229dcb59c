"""Speed traces (radar/laser), issue #21: the reader's validation (FILE:LINE), the model's speed
at sample times against a fine simulation, the fit to synthetic traces with known truth (white
and correlated noise) recovering the parameters within their Laplace std, the baselines on a
trace against closed-form data, and ``jaxbio sprint --csv TRACE`` (exit codes, JSON)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from jaxbio.cli import main
from jaxbio.sprint import SprintDataError, Sprinter, simulate_race
from jaxbio.sprint.baselines import fhk_motion
from jaxbio.sprint.trace import (
    SpeedTrace,
    Trace,
    fit_trace_baseline,
    fit_traces,
    is_trace_text,
    model_speed,
    read_trace,
    synthetic_trace,
)

TRUTH = dict(f0=16.0, vmax=20.0, energy=1000.0)
EXAMPLE = "examples/data/sprint_trace_synthetic.csv"
HEAD = "# reaction_time_s: 0.150\n# wind: 0\n# time_origin: gun\n"


def _trace(t, v, name, rt=0.15):
    return Trace(
        name=name,
        times=np.asarray(t),
        speeds=np.asarray(v),
        time_origin="gun",
        reaction_time=rt,
        wind=0.0,
        header={},
        path=name,
        lines=np.arange(len(t)),
    )


def _rows(t, v):
    return "time_s,speed_m_s\n" + "".join(f"{a:.3f},{b:.3f}\n" for a, b in zip(t, v))


# ---- reader ------------------------------------------------------------------------------------

GOOD_ROWS = _rows(np.arange(1, 41) * 0.25, np.minimum(np.arange(1, 41) * 1.2, 11.5))


def test_read_gun_and_movement_traces():
    tr = read_trace("t.csv", text="# athlete: Test\n" + HEAD + GOOD_ROWS)
    assert tr.n == 40 and tr.time_origin == "gun" and tr.reaction_time == 0.15 and tr.wind == 0.0
    np.testing.assert_allclose(tr.since_reaction, tr.times - 0.15)
    assert list(tr.lines[:2]) == [6, 7]
    with warnings.catch_warnings(record=True) as caught:  # no reaction time needed; unknown wind warned
        warnings.simplefilter("always")
        mv = read_trace(
            "m.csv", text="# time_origin: movement (radar started by the athlete)\n" + GOOD_ROWS.replace(",", ";")
        )
    assert mv.reaction_time is None and mv.gun_offset == 0.0 and not mv.wind_known
    np.testing.assert_array_equal(mv.since_reaction, tr.times)
    assert len(caught) == 1 and "wind unknown" in str(caught[0].message)
    assert is_trace_text("\ufeff# a: b\n\ntime_s;speed_m_s\n") and not is_trace_text("# x: y\ndistance_m,time_s\n")


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("# reaction_time_s: 0.15\n" + GOOD_ROWS, 0, "time_origin"),
        ("# time_origin: radar\n# reaction_time_s: 0.15\n" + GOOD_ROWS, 1, "'radar'"),
        ("# time_origin: gun\n" + GOOD_ROWS, 0, "reaction_time_s"),
        (HEAD + GOOD_ROWS + "10.25,nan\n", 45, "NaN"),
        (HEAD + GOOD_ROWS + "10.25,43.2\n", 45, "km/h or mph?"),
        (HEAD + GOOD_ROWS + "10.25,-0.5\n", 45, "negative speed"),
        (HEAD + GOOD_ROWS + "9.5,11\n", 45, "times must increase: 9.5 s after 10 s (line 44)"),
        (HEAD + GOOD_ROWS + "10000,11\n", 45, "milliseconds"),
        (HEAD + GOOD_ROWS + "10.25,11,3\n", 45, "expected 2 values"),
        (HEAD + GOOD_ROWS + "10.25,1x\n", 45, "not a number"),
        (HEAD + "time_s,speed_m_s\n0.5,2\n1.0,5\n", 6, "at least 10"),
        (HEAD + _rows(np.arange(1, 21) * 0.5, np.full(20, 2.0)), 4, "not a sprint"),
        (HEAD + "time_s,distance_m\n", 4, "column line 'time_s,speed_m_s'"),
        (HEAD + "# time_origin: movement\n" + GOOD_ROWS, 4, "given twice"),
    ],
)
def test_bad_traces_refused_with_their_line(text, line, message):
    with pytest.raises(SprintDataError) as err:
        read_trace("t.csv", text=text)
    assert err.value.line == line and message in str(err.value) and str(err.value).startswith(f"t.csv:{line}: "), str(
        err.value
    )


# ---- the model's speed at the sample times ------------------------------------------------------


@pytest.mark.slow
def test_model_speed_against_a_fine_simulation():
    """The fit's speeds (80 steps, Hermite with the vector field's acceleration) against 4,000
    steps read directly (linear interpolation of a much finer grid): within 2e-3 m/s."""
    model = Sprinter(**TRUTH)
    s = np.linspace(-0.1, 12.0, 400)
    v = np.asarray(model_speed(model, simulate_race(model, 13.0, 1.0, n_steps=80), 1.0, s))
    fine = simulate_race(model, 13.0, 1.0, n_steps=4000)
    ref = np.where(s > 0, np.interp(s, np.asarray(fine.ts), np.asarray(fine.qd[:, 0])), 0.0)
    assert np.max(np.abs(v - ref)) < 2e-3 and v[0] == 0.0


# ---- the fit on synthetic traces ----------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted():
    """One batch: white noise (σ 0.2 m/s) and AR(1) noise (σ 0.2 m/s, lag-1 correlation 0.9),
    25 Hz, from the same known sprinter."""
    truth = Sprinter(**TRUTH)
    traces = [_trace(*synthetic_trace(truth, rate=25.0, noise=0.2, rho=rho, seed=0), f"rho{rho}") for rho in (0.0, 0.9)]
    res, noise = fit_traces(traces)
    return traces, res, noise


def test_fit_recovers_the_sprinter_within_its_laplace_std(fitted):
    traces, res, noise = fitted
    assert res.converged.all() and np.all(np.isfinite(res.std)) and np.all(res.std > 0)
    truth = np.log([TRUTH[n] for n in res.names])
    z = (res.theta - truth) / np.sqrt(np.diagonal(res.cov_log, axis1=1, axis2=2))
    assert np.all(np.abs(z) < 4), z
    assert abs(noise["sigma"][0] - 0.2) < 0.03 and noise["inflation"][0] < 1.5  # white noise found white
    assert noise["rho"][1] > 0.6 and noise["inflation"][1] > 4  # correlated samples count for fewer
    assert np.all(res.std[1] > 1.5 * res.std[0])
    assert abs(res.rmse[0] - noise["sigma"][0]) < 0.01  # rmse in m/s on the speeds
    p = res.profile_of(0)
    assert 11.0 < p.top_speed < 13.0 and abs(p.x[-1] - 100.0) < 1.0  # the profile ends where the trace does


def test_movement_onset_times_fit_like_gun_times(fitted):
    """The same samples with times from movement onset (gun times − reaction time, no reaction
    time given) fit to the same sprinter; reported profile times then start at movement onset."""
    traces, res, _ = fitted
    tr = traces[0]
    mv = Trace(
        name="mv",
        times=tr.times - 0.15,
        speeds=tr.speeds,
        time_origin="movement",
        reaction_time=None,
        wind=0.0,
        header={},
        path="mv",
        lines=tr.lines,
    )
    keep = mv.times >= 0
    mv = Trace(**{**mv.__dict__, "times": mv.times[keep], "speeds": mv.speeds[keep], "lines": mv.lines[keep]})
    gun = Trace(**{**tr.__dict__, "times": tr.times[keep], "speeds": tr.speeds[keep], "lines": tr.lines[keep]})
    both, _ = fit_traces([gun, mv])
    np.testing.assert_allclose(both.theta[1], both.theta[0], atol=1e-7)
    assert both.profile_of(1).t[0] == 0.0 and both.profile_of(0).t[0] == pytest.approx(0.15)


def test_white_noise_std_is_the_least_squares_standard_error(fitted):
    """For white noise the reported std is the textbook σ̂ (JᵀJ)⁻¹ᐟ² of the speed residuals: the
    Jacobian by central finite differences of the model's speeds (independent of the solver)."""
    traces, res, noise = fitted
    tr = traces[0]
    s = tr.since_reaction

    def speeds(theta):
        m = Sprinter(**TRUTH).with_log(res.names, theta)
        return np.asarray(model_speed(m, simulate_race(m, 1.05 * s[-1] + 0.5, 0.0, n_steps=80), 0.0, s))

    h = 1e-5
    J = np.stack([(speeds(res.theta[0] + h * e) - speeds(res.theta[0] - h * e)) / (2 * h) for e in np.eye(3)], 1)
    cov = noise["sigma"][0] ** 2 * noise["inflation"][0] * np.linalg.inv(J.T @ J)
    np.testing.assert_allclose(res.cov_log[0], cov, rtol=1e-3)


def test_baseline_on_a_trace_recovers_closed_form_fhk():
    """FHK's v(t) fitted to speeds generated by FHK itself (plus noise) gives back v_max, τ."""
    s = np.arange(1, 250) / 25.0
    v = np.asarray(fhk_motion(np.log([11.8, 1.3]), s - 0.15, np)[1])
    v = np.where(s > 0.15, v, 0.0) + 0.05 * np.random.default_rng(0).normal(size=s.size)
    b = fit_trace_baseline("fhk", SpeedTrace.from_traces([_trace(s, v, "fhk")]))
    assert b.converged[0]
    np.testing.assert_allclose(b.values[0], [11.8, 1.3], rtol=0.02)
    assert abs(b.rmse[0] - 0.05) < 0.01


# ---- the command line ---------------------------------------------------------------------------


def test_cli_fits_the_example_trace(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")
    js, png = tmp_path / "out.json", tmp_path / "trace.png"
    assert main(["sprint", "--no-progress", "--csv", EXAMPLE, "--json", str(js), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "speed traces" in out and "sprint_trace_synthetic" in out
    rec = json.loads(js.read_text())
    assert rec["kind"] == "speed_trace" and rec["time_origin"] == "gun" and rec["converged"] is True
    for name, value in TRUTH.items():  # the file header's truth, within 4 Laplace std
        p = rec["parameters"][name]
        assert abs(p["value"] - value) < 4 * p["std"], (name, p)
    assert (
        rec["rmse_mps"] < rec["baselines"]["fhk"]["rmse_mps"]
        and rec["rmse_mps"] < rec["baselines"]["tibshirani"]["rmse_mps"]
    )
    assert len(rec["samples"]["predicted_mps"]) == len(rec["samples"]["time_s"]) > 400
    assert math.isclose(rec["noise_mps"], 0.2, rel_tol=0.2)


def test_cli_fits_the_real_laser_trace(tmp_path, monkeypatch, capsys):
    """A real laser trace (examples/data/laser_trace_dynaspeed.csv, 100 Hz, movement onset):
    a valid fit (exit 0) closer than both baselines; the within-step oscillation shows as strongly
    correlated residuals, so the std is inflated (the white-noise std would be ~7x too small)."""
    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")
    js = tmp_path / "out.json"
    assert main(["sprint", "--no-progress", "--csv", "examples/data/laser_trace_dynaspeed.csv", "--json", str(js)]) == 0
    rec = json.loads(js.read_text())
    assert rec["converged"] is True and rec["time_origin"] == "movement" and rec["reaction_time_s"] is None
    assert rec["rmse_mps"] < min(b["rmse_mps"] for b in rec["baselines"].values())
    assert rec["residual_lag1_correlation"] > 0.9 and rec["variance_inflation"] > 10
    assert (
        8.0 < rec["top_speed_mps"] < 9.5 and 45 < rec["distance_covered_m"] < 55
    )  # laser: 9.4 m/s peak reading, 49.9 m


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--fit-until", "60"], "cannot be fitted with --fit-until"),
        (["--race", "bolt_2009"], "cannot be fitted with split files"),
    ],
)
def test_cli_trace_mixed_with_splits_or_fit_until_exit_2(extra, message, monkeypatch, capsys):
    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")
    assert main(["sprint", "--no-progress", "--csv", EXAMPLE] + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and EXAMPLE in err[0], err


def test_cli_bad_trace_one_line_exit_2(tmp_path, monkeypatch, capsys):
    p = tmp_path / "bad.csv"
    p.write_text(HEAD + GOOD_ROWS + "10.25,43.2\n")
    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")
    assert main(["sprint", "--no-progress", "--csv", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"jaxbio sprint: error: {p}:45: speed 43.2 m/s"), err
