"""The embedded races: every file of every collection (``data/``, ``data/more/``) parses with its
sources, its splits add up to the official result and to the segment times its source publishes,
``jaxbio sprint --races`` chooses a collection, and the default collection (what ``jaxbio sprint``
fits and the ``--fit-until`` population is learned from) is unchanged."""

import argparse
import json
import re
import warnings

import numpy as np
import pytest

from jaxbio.sprint import data
from jaxbio.cli._sprint import _load, add_parser

#: the default collection: these five elite men's 100 m races, nothing else (adding a race here
#: changes every number `jaxbio sprint` prints and the `--fit-until` population)
DEFAULT = [
    "bolt_2008_beijing_og_final",
    "bolt_2009_berlin_wc_final",
    "gay_2007_osaka_final",
    "powell_2007_osaka_final",
    "powell_2009_berlin_final",
]

#: segment times [s] as each source publishes them (typed from the source, not from the files):
#: the files hold their running sums. Graubner & Nixdorf (2011) via the runrgetics script
#: (JrmyBriand/runrgetics@7fe93574, data-raw/graubner_nixdorf_sprints.R); Bolt's 200 m segments
#: are also in janluksoft/AspNETWebForm@06c29ab6 WebAppExample/Records.aspx.
SEGMENTS = {
    "bolt_2009_berlin_wc_200m": (50.0, [5.60, 4.32, 4.52, 4.75]),
    "felix_2009_berlin_wc_200m": (50.0, [6.25, 4.91, 5.22, 5.64]),
    "fraser_2009_berlin_wc_final": (20.0, [3.03, 1.95, 1.90, 1.89, 1.96]),
}
#: official results (the IAAF event reports cited in each file)
RESULTS = {"bolt_2009_berlin_wc_200m": 19.19, "felix_2009_berlin_wc_200m": 22.02, "fraser_2009_berlin_wc_final": 10.73}


def _read_all():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", data.SprintDataWarning)
        races = data.embedded_races("all")
    return races, [str(w.message) for w in caught]


def test_collections_and_default_unchanged():
    assert data.embedded_names() == DEFAULT == data.embedded_names("default")
    more = data.embedded_names("more")
    assert more and not set(more) & set(DEFAULT)
    assert data.embedded_names("all") == DEFAULT + more
    assert [r.name for r in data.embedded_races()] == DEFAULT
    with pytest.raises(ValueError, match="race collection must be one of 'default', 'more', 'all', got 'women'"):
        data.embedded_names("women")
    # prefixes: a unique default race wins (old prefixes keep naming the same race), else any collection
    assert data.load_race("bolt_2009").name == "bolt_2009_berlin_wc_final"
    assert data.load_race("fraser").path == "jaxbio/sprint/data/more/fraser_2009_berlin_wc_final.csv"
    with pytest.raises(ValueError, match="unknown race 'bolt'"):
        data.load_race("bolt")


def test_every_embedded_file_parses_with_its_sources():
    races, warned = _read_all()
    assert [r.name for r in races] == data.embedded_names("all")
    for r in races:
        for key in ("athlete", "race", "date", "result", "wind", "reaction_time_s", "source"):
            assert r.header.get(key), f"{r.name}: header {key!r} missing or empty"
        # where to check it (the Osaka 2007 files name their URL under transcribed_from; Bolt 2008
        # has none); every race of the more collection has a URL
        assert "source_url" in r.header or "transcribed_from" in r.header, r.name
        if r.name in data.embedded_names("more"):
            assert r.header["source_url"].startswith("https://"), r.name
        if r.name in SEGMENTS:
            assert r.header["source_url"].startswith("https://github.com/JrmyBriand/runrgetics/blob/")
        assert 0.1 < r.reaction_time < 0.2
        assert r.distances[-1] in (100.0, 200.0)
        if r.distances[-1] > 100:
            assert "BEND IS IGNORED" in r.header["race"], r.name
        # the last split is the official result the header states
        result = float(re.match(r"\s*(\d+\.\d+)", r.header["result"])[1])
        assert r.times[-1] == pytest.approx(result, abs=1e-9), r.name
        assert data.embedded_file(r.name).read_bytes()  # the file the CLI protects from being overwritten
    # the only warnings: a wind the sources do not give
    unknown = [r.name for r in races if not r.wind_known]
    assert len(warned) == len(unknown) and all("wind unknown" in w for w in warned)
    assert set(unknown) <= set(data.embedded_names("more"))


@pytest.mark.parametrize("name", sorted(SEGMENTS))
def test_new_races_add_up_to_their_sources_segments(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", data.SprintDataWarning)  # Felix: wind unknown
        r = data.load_race(name)
    step, seg = SEGMENTS[name]
    np.testing.assert_allclose(r.distances, step * np.arange(1, len(seg) + 1))
    np.testing.assert_allclose(r.times, np.cumsum(seg), atol=0.005)  # sums of 0.01 s values: exact to rounding
    assert abs(sum(seg) - RESULTS[name]) < 0.005 and r.times[-1] == RESULTS[name]


def _args(argv):
    parser = argparse.ArgumentParser(prog="jaxbio")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["sprint", "--no-progress"] + argv)


def test_races_option_chooses_a_collection():
    name = lambda argv: [r.name for r in _load(_args(argv))[0]]  # noqa: E731
    assert name([]) == DEFAULT == name(["--races", "default"])
    assert name(["--races", "more"]) == data.embedded_names("more")
    assert name(["--races", "all"]) == data.embedded_names("all")
    assert name(["--race", "gay"]) == ["gay_2007_osaka_final"]
    assert name(["--race", "fraser", "--races", "default"]) == ["fraser_2009_berlin_wc_final"] + DEFAULT
    races, files, notes = _load(_args(["--races", "more"]))
    assert len(files) == len(races) and all(f.endswith(f"more/{r.name}.csv") for f, r in zip(files, races))
    assert len(notes) == sum(not r.wind_known for r in races)  # one stderr line per unknown wind
    with pytest.raises(SystemExit) as e:
        _args(["--races", "women"])
    assert e.value.code == 2


@pytest.mark.slow
def test_cli_fits_the_more_collection(tmp_path, monkeypatch):
    """`jaxbio sprint --races more` fits every race of the collection (exit 0) and the JSON has
    each one with its model and baseline RMSE; the 100 m race fits within 0.01 s and beats FHK."""
    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")
    js = tmp_path / "more.json"
    args = _args(["--races", "more", "--json", str(js)])
    assert args.func(args) == 0
    out = json.loads(js.read_text())
    assert [o["race"] for o in out] == data.embedded_names("more")
    for o in out:
        assert o["converged"] and np.isfinite(o["rmse_s"])
    fraser = next(o for o in out if o["race"] == "fraser_2009_berlin_wc_final")
    assert fraser["rmse_s"] < 0.01 and fraser["rmse_s"] < fraser["baselines"]["fhk"]["rmse_s"]
