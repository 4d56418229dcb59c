"""The stacked forecast of the final time (`jaxbio.sprint.stacking`, issue #54): the shipped nested
forecasts are fresh (fingerprint; slow: recomputed), the command line's JSON carries the stacked
forecast with weights equal to a hand computation from the shipped file, a race with too few
reference races of its length gets none, and (slow) the command line's stack equals the
leave-one-out's."""

import argparse
import json
import warnings

import numpy as np
import pytest
import scipy.stats

import jaxbio.sprint as sprint
from jaxbio.cli._sprint import add_parser
from jaxbio.sprint import hierarchical as H
from jaxbio.sprint import stacking
from jaxbio.sprint.baselines import fit_baseline
from jaxbio.sprint.data import Splits

RACES = sprint.embedded_races()
REGENERATE = "regenerate with `python -m jaxbio.sprint.stacking --write`"


def _run(argv, monkeypatch):
    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")
    parser = argparse.ArgumentParser(prog="jaxbio")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sprint", "--no-progress"] + argv)
    return args.func(args)


def test_shipped_nested_forecasts_are_fresh():
    """A change to an embedded race, the reference fits' settings, the hyperprior or the cut-offs
    without regenerating ``data/nested_forecasts.json`` fails here."""
    found = stacking.read()
    assert found is not None, f"{stacking.FILENAME} missing or unreadable: {REGENERATE}"
    key, nested = found
    assert nested.race_names == tuple(r.name for r in RACES), REGENERATE
    assert nested.cuts_m == stacking.CUTS_M, REGENERATE
    assert key == stacking.fingerprint(RACES, stacking.CUTS_M), REGENERATE
    assert stacking.lookup(RACES) is not None
    R, C = len(RACES), len(stacking.CUTS_M)
    assert nested.pred.shape == nested.sd.shape == (R + 1, C, R)
    for h in range(R):  # a race is never forecast from a population without itself twice
        assert np.all(np.isnan(nested.pred[h, :, h]))
    np.testing.assert_array_equal(nested.truth, [r.times[-1] for r in RACES])


def test_fingerprint_changes_with_the_settings():
    base = stacking.fingerprint(RACES, stacking.CUTS_M)
    assert stacking.fingerprint(RACES, stacking.CUTS_M[:-1]) != base
    assert stacking.fingerprint(RACES, stacking.CUTS_M, strength=2.0) != base
    assert stacking.fingerprint(RACES[:4], stacking.CUTS_M) != base


def test_no_stack_with_too_few_reference_races(monkeypatch):
    """A race whose pool holds fewer than ``MIN_STACK`` other reference races (a 200 m race on the
    command line), or whose cut-off leaves them fewer than two splits, gets no stacked forecast,
    and nothing is fitted for it."""
    monkeypatch.setattr(stacking, "compute_nested", None)  # would fail if called
    ref = H.reference_fits()
    st = stacking.stacked_final_times(
        RACES[:1],
        60.0,
        [9.7],
        [0.05],
        [9.72],
        ref=ref,
        reference=RACES,
        pool=lambda race: tuple(r.name for r in RACES[:3]),
    )
    assert not st.available[0] and "fewer than 3" in st.reason[0] and np.isnan(st.mean[0])
    # a cut-off before the reference races' second split: nothing to learn the weight from
    st = stacking.stacked_final_times(RACES[:1], 15.0, [9.7], [0.05], [9.72], ref=ref, reference=RACES)
    assert not st.available[0] and "2 splits ≤ 15 m" in st.reason[0]


def _fhk_final(race, cut):
    """FHK fitted to ``race``'s splits ≤ ``cut`` alone: its predicted final time."""
    sp = Splits.from_arrays(
        [race.distances], [race.times], [race.reaction_time], [race.wind], weights=[race.until(cut).astype(float)]
    )
    return fit_baseline("fhk", sp, backend="scipy").predicted[0, race.n - 1]


def test_cli_json_stacked_weight_by_hand(tmp_path, monkeypatch):
    """``jaxbio sprint --race bolt_2008 --fit-until 60 --json``: the stacked final time, its weight,
    scale and intervals equal the formula of `loo.stack` worked by hand from the shipped nested
    forecasts (the other four races at 40/50/60 m, populations without Bolt 2008 as well) and FHK
    fitted to each of them race by race."""
    js = tmp_path / "s.json"
    assert _run(["--race", "bolt_2008", "--fit-until", "60", "--json", str(js)], monkeypatch) == 0
    rec = json.loads(js.read_text())
    st = rec["stacked_final_time"]
    assert st["available"] and st["nested_from"] == "shipped"
    assert st["model_s"] == pytest.approx(rec["splits"][-1]["predicted_s"], abs=1e-12)
    assert st["model_sd_s"] == pytest.approx(rec["splits"][-1]["predicted_sd_s"], abs=1e-12)
    assert st["fhk_s"] == pytest.approx(rec["baselines"]["fhk"]["predicted_s"][-1], abs=1e-9)
    _, nested = stacking.read()
    h = 0  # bolt_2008's row: populations without it
    others = [1, 2, 3, 4]
    assert st["learned_from"] == [RACES[j].name for j in others]
    cols = [nested.cuts_m.index(c) for c in (40.0, 50.0, 60.0)]
    err, sds, fhk = [], [], []
    for j in others:
        for c in cols:
            p = nested.pred[h, c, j]
            if np.isnan(p):
                continue
            err.append(p - RACES[j].times[-1])
            sds.append(nested.sd[h, c, j])
            fhk.append((c, _fhk_final(RACES[j], nested.cuts_m[c]) - RACES[j].times[-1]))
    err, sds = np.array(err), np.array(sds)
    k2 = np.mean((err / sds) ** 2)
    v_f = {c: np.mean([e**2 for cc, e in fhk if cc == c]) for c in cols}
    s = st["model_sd_s"]
    w = v_f[cols[2]] / (v_f[cols[2]] + k2 * s**2)
    assert st["weight_model"] == pytest.approx(w, rel=1e-9)
    assert st["weight_fhk"] == pytest.approx(1 - w, rel=1e-9)
    assert st["predicted_s"] == pytest.approx(w * st["model_s"] + (1 - w) * st["fhk_s"], abs=1e-12)
    # the scale: the other races' stacked errors have unit mean squared z
    z2 = []
    for e, sd_, (c, ef) in zip(err, sds, fhk):
        vm = k2 * sd_**2
        wi = v_f[c] / (v_f[c] + vm)
        z2.append(((wi * e + (1 - wi) * ef) / np.sqrt(vm * v_f[c] / (vm + v_f[c]))) ** 2)
    scale = np.sqrt(np.mean(z2)) * np.sqrt(k2 * s**2 * v_f[cols[2]] / (k2 * s**2 + v_f[cols[2]]))
    assert st["sd_s"] == pytest.approx(scale, rel=1e-9)
    assert st["dof"] == 4
    for lv, key in ((0.68, "interval_68_s"), (0.95, "interval_95_s")):
        q = scipy.stats.t.ppf(0.5 + lv / 2, 4)
        np.testing.assert_allclose(st[key], [st["predicted_s"] - q * scale, st["predicted_s"] + q * scale], rtol=1e-9)


@pytest.mark.slow
def test_shipped_nested_forecasts_equal_a_fresh_computation():
    """The shipped numbers are what `compute_nested` gives now (fits converge to ~1e-9 s)."""
    fresh = stacking.compute_nested(RACES, H.reference_fits(RACES), stacking.CUTS_M)
    _, shipped = stacking.read()
    np.testing.assert_array_equal(np.isnan(fresh.pred), np.isnan(shipped.pred))
    np.testing.assert_allclose(fresh.pred, shipped.pred, rtol=0, atol=1e-6)
    np.testing.assert_allclose(fresh.sd, shipped.sd, rtol=1e-6)


@pytest.mark.slow
def test_forecast_stacked_equals_the_leave_one_out():
    """``forecast(stacked=True)`` of the default races at 60 m (the command line's call) is the
    leave-one-out's stacked forecast of the same races at 60 % (`loo.leave_one_out`), and a race
    outside the reference (Fraser 2009) is stacked from the plain leave-one-out forecasts."""
    from jaxbio.sprint import loo

    ref = H.reference_fits(RACES)
    pool = H.same_length(RACES)
    res, fc, _ = H.forecast(RACES, 60.0, ref=ref, pool=pool)
    fc = stacking.with_stacked(fc, RACES, 60.0, res, ref, reference=RACES, pool=pool)
    want = loo.leave_one_out(RACES, ref, pool=pool)
    np.testing.assert_allclose(fc.stacked.mean, want.pred["stacked"][:, 2], rtol=0, atol=1e-6)
    np.testing.assert_allclose(fc.stacked.weight, want.weight[:, 2], rtol=0, atol=1e-6)
    np.testing.assert_allclose(fc.stacked.sd, want.sd["stacked"][:, 2], rtol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fraser = sprint.load_race("fraser")
    res, fc, _ = H.forecast([fraser], 60.0, ref=ref, pool=pool)
    fc = stacking.with_stacked(fc, [fraser], 60.0, res, ref, reference=RACES, pool=pool)
    assert fc.stacked.available[0] and fc.stacked.nested_from[0] == "shipped"
    assert abs(fc.stacked.mean[0] - fraser.times[-1]) < abs(fc.stacked.model[0] - fraser.times[-1])


def test_missing_file_warns_and_computes(monkeypatch):
    """Without the shipped file the default request warns (naming the command that regenerates it)
    and computes the nested forecasts (here a stub that returns the shipped numbers at the cut-offs
    asked for): the same stacked forecast as from the file."""
    ref = H.reference_fits()
    args = (RACES[:2], 60.0, [9.73, 9.58], [0.05, 0.04], [9.727, 9.608])
    kw = dict(ref=ref, reference=RACES, pool=H.same_length(RACES))
    shipped = stacking.stacked_final_times(*args, **kw)
    assert shipped.nested_from == ("shipped", "shipped")
    _, nested = stacking.read()

    calls = []

    def stub(group, ref_, cuts, **_):
        calls.append(tuple(cuts))
        cols = [nested.cuts_m.index(c) for c in cuts]
        return stacking.NestedForecasts(
            nested.race_names, tuple(cuts), nested.truth, nested.pred[:, cols], nested.sd[:, cols]
        )

    monkeypatch.setattr(stacking, "read", lambda path=None: None)
    monkeypatch.setattr(stacking, "compute_nested", stub)
    with pytest.warns(sprint.data.SprintDataWarning, match="python -m jaxbio.sprint.stacking --write"):
        computed = stacking.stacked_final_times(*args, **kw)
    assert computed.nested_from == ("computed", "computed") and calls == [(40.0, 50.0, 60.0)]  # once for both
    np.testing.assert_allclose(computed.mean, shipped.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(computed.sd, shipped.sd, rtol=1e-12)
