"""The shipped reference fits of the embedded races (``jaxbio/sprint/data/reference_fits.json``,
`jaxbio.sprint._reference`): their fingerprint is the current data's and settings', they load as
the `ReferenceFits` the population needs, anything else falls back to fitting, and (slow) a fresh
fit reproduces them."""

import dataclasses
import fnmatch
import json
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest

import jaxbio.sprint as sprint
from jaxbio.sprint import _reference
from jaxbio.sprint.data import SprintDataWarning
from jaxbio.sprint import fitting
from jaxbio.sprint import hierarchical as H
from jaxbio.sprint.model import FREE, Sprinter

RACES = sprint.embedded_races()
REGENERATE = "regenerate with `python -m jaxbio.sprint.hierarchical --write-reference`"


def test_shipped_fingerprint_is_the_current_one():
    """A change to an embedded race, the default model or the fit's defaults without regenerating
    the shipped file fails here."""
    shipped = _reference.read()
    assert shipped is not None, f"{_reference.FILENAME} missing or unreadable: {REGENERATE}"
    assert shipped["race_names"] == tuple(r.name for r in RACES), REGENERATE
    assert shipped["names"] == tuple(FREE), REGENERATE
    assert shipped["fingerprint"] == H.reference_fingerprint(RACES), REGENERATE


def test_shipped_file_installs():
    """pyproject's package-data lists the file, so an installed jaxbio has it (else every
    ``--fit-until`` would fit the reference races again, silently)."""
    config = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["jaxbio.sprint"]
    assert any(fnmatch.fnmatch(f"data/{_reference.FILENAME}", p) for p in patterns), patterns


def test_default_reference_fits_load_the_shipped_ones(monkeypatch):
    """``reference_fits()`` and ``reference_fits(embedded_races())`` (the CLI's call) load the file,
    fitting nothing; the fits have the shapes and names `ReferenceFits` documents."""
    monkeypatch.setattr(fitting, "fit", _no_fit)
    R, k = len(RACES), len(FREE)
    for ref in (H.reference_fits(), H.reference_fits(RACES), H.reference_fits(model=Sprinter())):
        assert ref.race_names == tuple(r.name for r in RACES) and ref.names == tuple(FREE)
        assert ref.theta.shape == (R, k) and ref.gauss_newton.shape == (R, k, k)
        assert ref.rss.shape == ref.n_splits.shape == ref.converged.shape == (R,)
        assert ref.converged.dtype == bool and ref.converged.all()
        np.testing.assert_array_equal(ref.n_splits, [r.n for r in RACES])  # full fits: every split
        np.testing.assert_allclose(ref.gauss_newton, np.swapaxes(ref.gauss_newton, 1, 2), rtol=0, atol=0)
        assert np.all(np.linalg.eigvalsh(ref.gauss_newton) > 0)
    pop = H.population(H.reference_fits(), leave_out=RACES[0].name)  # what forecast makes of them
    assert pop.race_names == tuple(r.name for r in RACES[1:])


def _no_fit(*a, **kw):
    raise AssertionError("the shipped reference fits were expected, but a fit ran")


class _Fitted(Exception):
    """Raised by the stub fit: the fallback was taken (no minute-long fit runs)."""


def _stub_fit(calls):
    def fit(races, **kw):
        calls.append(([r.name for r in races], kw))
        raise _Fitted

    return fit


def _changed(race, **kw):
    return dataclasses.replace(race, **kw)


@pytest.mark.parametrize("case", ["time", "reaction_time", "wind", "races", "model", "names", "kw", "no_shipped"])
def test_anything_else_is_fitted(case, monkeypatch):
    """A changed race, other races, another model, other free parameters, extra fit options or
    ``shipped=False``: the fingerprint (or the call) differs and the races are fitted."""
    calls = []
    monkeypatch.setattr(fitting, "fit", _stub_fit(calls))
    races, kw = list(RACES), {}
    if case == "time":
        races[1] = _changed(races[1], times=races[1].times + np.where(np.arange(races[1].n) == 3, 0.01, 0.0))
    elif case == "reaction_time":
        races[0] = _changed(races[0], reaction_time=races[0].reaction_time + 0.001)
    elif case == "wind":
        races[2] = _changed(races[2], wind=races[2].wind + 0.1)
    elif case == "races":
        races = races[:-1]
    elif case == "model":
        kw["model"] = Sprinter(hill_ratio=0.3)
    elif case == "names":
        kw["names"] = ("f0", "vmax")
    elif case == "kw":
        kw["max_steps"] = 30
    else:
        kw["shipped"] = False
    with pytest.raises(_Fitted):
        H.reference_fits(races, **kw)
    assert len(calls) == 1 and calls[0][0] == [r.name for r in races]


def test_changed_file_or_settings_fall_back(monkeypatch, tmp_path):
    """The shipped file missing, corrupt, or with another fingerprint (a data or fit change not
    regenerated), or JAX in float32: fitted."""
    calls = []
    monkeypatch.setattr(fitting, "fit", _stub_fit(calls))
    good = json.loads(_reference.shipped_file().read_text())
    variants = {
        "missing": None,
        "corrupt": "{not json",
        "stale": json.dumps({**good, "fingerprint": "0" * 64}),
        "short": json.dumps({k: v for k, v in good.items() if k != "theta"}),
    }
    for name, text in variants.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(_reference, "shipped_file", lambda p=path: p)
        with pytest.warns(SprintDataWarning, match="missing or stale"), pytest.raises(_Fitted):
            H.reference_fits()
    assert len(calls) == len(variants)
    monkeypatch.undo()
    monkeypatch.setattr(fitting, "fit", _stub_fit(calls))
    monkeypatch.setattr(_reference, "_float64", lambda: False)
    with pytest.raises(_Fitted):
        H.reference_fits()


def test_fingerprint_covers_the_fit_defaults(monkeypatch):
    """The fit's defaults and version enter the fingerprint (a changed default invalidates)."""
    base = H.reference_fingerprint(RACES)
    assert H.reference_fingerprint(RACES, Sprinter(), FREE) == base
    changes = [
        (_reference, "FIT_VERSION", _reference.FIT_VERSION + 1),
        (fitting, "N_STEPS", fitting.N_STEPS + 1),
        (fitting, "START_FACTORS", fitting.START_FACTORS[:3]),
        (fitting, "fit_splits", lambda splits, *, max_steps=61: None),
    ]
    for module, name, value in changes:
        with monkeypatch.context() as m:
            m.setattr(module, name, value)
            assert H.reference_fingerprint(RACES) != base, name
    assert H.reference_fingerprint(RACES) == base


def test_write_round_trips(tmp_path):
    """``write`` then ``read``: the same arrays exactly (JSON floats are ``repr``: float64 round trip)."""
    ref = H.reference_fits()
    path = tmp_path / "ref.json"
    _reference.write(path, ref, H.reference_fingerprint(RACES))
    back = _reference.read(path)
    assert back["fingerprint"] == H.reference_fingerprint(RACES)
    for key in _reference.ARRAYS:
        np.testing.assert_array_equal(back[key], getattr(ref, key))


@pytest.mark.slow
def test_a_fresh_fit_reproduces_the_shipped_fits():
    """Refit the embedded races (~1 min) and compare with the shipped numbers. The fit is
    deterministic on one machine, but XLA's CPU code differs between machines and versions
    (vectorisation, fused multiply-adds), and the Levenberg–Marquardt stops at a tolerance, so a
    fresh fit may differ in the last digits: the log-parameters to 1e-6 (a 1e-4 % change of a
    parameter, 1e-3 of their Laplace sd), the Gauss–Newton matrices and residual sums of squares to
    1e-5 relative."""
    shipped = H.reference_fits()
    fresh = H.reference_fits(shipped=False)
    assert fresh.race_names == shipped.race_names and fresh.names == shipped.names
    np.testing.assert_allclose(fresh.theta, shipped.theta, rtol=0, atol=1e-6)
    np.testing.assert_allclose(fresh.gauss_newton, shipped.gauss_newton, rtol=1e-5, atol=0)
    np.testing.assert_allclose(fresh.rss, shipped.rss, rtol=1e-5, atol=0)
    np.testing.assert_array_equal(fresh.n_splits, shipped.n_splits)
    np.testing.assert_array_equal(fresh.converged, shipped.converged)


def test_a_stale_shipped_file_is_fitted_with_a_warning(monkeypatch, tmp_path):
    """The default request (the embedded races as read now, default model and names) against a
    shipped file that is missing or of other data: fitted, and a ``SprintDataWarning`` says the file
    is stale and how to regenerate it (the CLI prints it as one line). Other races or settings fall
    back silently (the documented fallback)."""
    calls = []
    monkeypatch.setattr(fitting, "fit", _stub_fit(calls))
    good = json.loads(_reference.shipped_file().read_text())
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({**good, "fingerprint": "0" * 64}))
    for path in (stale, tmp_path / "missing.json"):
        monkeypatch.setattr(_reference, "shipped_file", lambda p=path: p)
        with pytest.warns(SprintDataWarning, match="stale.*--write-reference"), pytest.raises(_Fitted):
            H.reference_fits()
    races = list(RACES)
    races[1] = _changed(races[1], wind=races[1].wind + 0.1)
    for args, kw in (((races,), {}), ((), {"model": Sprinter(hill_ratio=0.3)}), ((), {"names": ("f0", "vmax")})):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SprintDataWarning)
            with pytest.raises(_Fitted):
                H.reference_fits(*args, **kw)
    assert len(calls) == 5


def test_the_cli_prints_the_stale_warning_as_one_line(monkeypatch, tmp_path, capsys):
    """``jaxbio sprint --fit-until``: a stale shipped file costs a fit of the reference races (here
    stubbed: it returns the shipped numbers) and one stderr line; the forecast is the usual one."""
    import argparse

    from jaxbio.cli._sprint import add_parser

    good = json.loads(_reference.shipped_file().read_text())
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({**good, "fingerprint": "0" * 64}))
    numbers = _reference.read(stale)
    loaded = H.ReferenceFits(
        race_names=numbers["race_names"], names=numbers["names"], **{k: numbers[k] for k in _reference.ARRAYS}
    )
    monkeypatch.setattr(_reference, "shipped_file", lambda: stale)
    real_fit, reference_calls = fitting.fit, []

    def fit(races, **kw):  # the reference races' full fit is stubbed, the forecast's fit is real
        if "fit_until" not in kw and [r.name for r in races] == [r.name for r in RACES]:
            reference_calls.append(kw)
            return "full fit"
        return real_fit(races, **kw)

    monkeypatch.setattr(fitting, "fit", fit)
    monkeypatch.setattr(H.ReferenceFits, "from_fit", classmethod(lambda cls, res, *a, **kw: loaded))
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers())
    args = p.parse_args(["sprint", "--race", "gay_2007", "--fit-until", "60", "--no-progress"])
    assert args.func(args) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(reference_calls) == 1
    assert len(err) == 1 and err[0].startswith("jaxbio sprint: warning: jaxbio/sprint/data/reference_fits.json:0:")
    assert "--write-reference" in err[0]
