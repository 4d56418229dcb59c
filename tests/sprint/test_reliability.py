"""Issue #17 (sprint part): no bad input becomes a plausible number, no file is ever lost.

Regression tests for each reproduction of the issue (through ``jaxbio.cli.main`` and
``read_csv``), the output-file policy of ``jaxbio._files``, the flagging of absurd fits, and
hypothesis properties: a generated split file — valid or with one known defect, in any of the
accepted spellings (separators, decimal marks, units, encodings, line ends) — is either refused
with ``SprintDataError`` at the defect's line, or read to exactly the numbers the generator wrote.
The expected values come from the generator, never from the parser.
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import tempfile
import types
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jaxbio import _files
from jaxbio.cli import main
from jaxbio.sprint import SprintDataError, read_csv
from jaxbio.cli import _sprint as sprint_cli
from jaxbio.sprint import fitting
from jaxbio.sprint.data import SprintDataWarning, _data_dir

BOLT_2009 = (_data_dir() / "bolt_2009_berlin_wc_final.csv").read_text(encoding="utf-8")
ROWS = BOLT_2009[BOLT_2009.index("distance_m") :]  # Bolt's 10 m splits, 0,0.00 to 100,9.58


def _file(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return p


def _cli(argv, monkeypatch):
    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")  # no persistent cache from inside the tests
    return main(["sprint", "--no-progress"] + [str(a) for a in argv])


def _sprint_layer(argv, monkeypatch):
    """``jaxbio sprint`` below the ``jaxbio`` entry point (whose own handling is not tested here)."""
    from jaxbio.cli import build_parser

    monkeypatch.setenv("JAXBIO_JAX_CACHE", "0")
    args = build_parser().parse_args(["sprint", "--no-progress"] + [str(a) for a in argv])
    return args.func(args)


def _no_fit(monkeypatch):
    """Make any fit fail the test: the checks under test must come before fitting."""

    def boom(*a, **k):
        pytest.fail("fitted although the input was bad")

    monkeypatch.setattr(fitting, "fit", boom)


def _one_error_line(err, *parts):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("jaxbio sprint: error: ") and "Traceback" not in err, err
    for p in parts:
        assert p in lines[0], (p, err)
    return lines[0]


def _read(text, path="race.csv"):
    """read_csv(path, text=...) and the SprintDataWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        race = read_csv(path, text=text)
    return race, [w for w in caught if issubclass(w.category, SprintDataWarning)]


# ---- defect 1: data loss -----------------------------------------------------------------------


def test_json_onto_the_input_csv_is_refused_and_the_csv_kept(tmp_path, capsys, monkeypatch):
    """Issue: `jaxbio sprint --csv my.csv --json my.csv` exited 0 and my.csv held JSON."""
    my = _file(tmp_path, "my.csv", "# reaction_time_s: 0.146\n# wind: +0.9\n" + ROWS)
    before = my.read_bytes()
    _no_fit(monkeypatch)
    (tmp_path / "sub").mkdir()
    for out in (my, tmp_path / "." / "my.csv", tmp_path / "sub" / ".." / "my.csv"):
        assert _cli(["--csv", my, "--json", out], monkeypatch) == 2
        _one_error_line(capsys.readouterr().err, f"--json {out}", "input file", "refusing to overwrite")
        assert my.read_bytes() == before
    # the same file through a symbolic link and a hard link, as --plot
    os.symlink(my, tmp_path / "link.png")
    os.link(my, tmp_path / "hard.png")
    for out in ("link.png", "hard.png"):
        assert _cli(["--csv", my, "--plot", tmp_path / out], monkeypatch) == 2
        _one_error_line(capsys.readouterr().err, "--plot", "refusing to overwrite an input")
        assert my.read_bytes() == before


def test_output_onto_an_embedded_race_file_is_refused(capsys, monkeypatch):
    _no_fit(monkeypatch)
    target = _data_dir() / "bolt_2009_berlin_wc_final.csv"
    before = target.read_bytes()
    assert _cli(["--race", "bolt_2009", "--json", target], monkeypatch) == 2
    _one_error_line(capsys.readouterr().err, "refusing to overwrite an input")
    assert target.read_bytes() == before


def test_bad_output_paths_refused_before_fitting(tmp_path, capsys, monkeypatch):
    _no_fit(monkeypatch)
    cases = [
        (["--json", tmp_path / "o.x", "--plot", tmp_path / "." / "o.x"], "same file as --json"),
        (["--json", tmp_path], "is a directory"),
        (["--json", tmp_path / "missing" / "o.json"], "does not exist"),
        (["--plot", tmp_path / "o.xyz"], "unknown image format 'xyz'"),
    ]
    for argv, message in cases:
        assert _cli(["--race", "bolt_2009"] + argv, monkeypatch) == 2
        _one_error_line(capsys.readouterr().err, message)
    if os.geteuid() != 0:  # root may write anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        assert _cli(["--race", "bolt_2009", "--json", ro / "o.json"], monkeypatch) == 2
        _one_error_line(capsys.readouterr().err, "cannot create files")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["ro"] if os.geteuid() != 0 else [])


def test_failed_plot_writes_nothing(tmp_path, capsys, monkeypatch):
    """Issue: when the plot failed, the JSON was already written. Now both files go to
    temporaries first; a failing plot leaves an existing JSON untouched and no debris."""
    js, png = tmp_path / "r.json", tmp_path / "r.png"
    js.write_text("old results\n")

    def broken_plot(f, *a, **k):
        f.write(b"\x89PNG half a file")
        raise OSError("disk full")

    monkeypatch.setattr(sprint_cli, "_plot", broken_plot)
    assert _cli(["--race", "bolt_2009", "--json", js, "--plot", png], monkeypatch) == 2
    _one_error_line(capsys.readouterr().err, "disk full")
    assert js.read_text() == "old results\n" and not png.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_write_outputs_all_or_nothing(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.txt"
    a.write_bytes(b"old a")
    a.chmod(0o640)
    outs = _files.check_outputs([("--a", str(a)), ("--b", str(b))])

    def fail(f):
        f.write(b"partial")
        raise RuntimeError("renderer crashed")

    with pytest.raises(RuntimeError, match="renderer crashed"):
        _files.write_outputs([(outs[0], lambda f: f.write(b"new a")), (outs[1], fail)])
    assert a.read_bytes() == b"old a" and not b.exists() and sorted(os.listdir(tmp_path)) == ["a.json"]
    _files.write_outputs([(outs[0], lambda f: f.write(b"new a")), (outs[1], lambda f: f.write(b"new b"))])
    assert a.read_bytes() == b"new a" and b.read_bytes() == b"new b"
    assert stat.S_IMODE(a.stat().st_mode) == 0o640  # a replaced file keeps its mode
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.txt"]


def test_write_outputs_follows_links_and_writes_special_files(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    os.symlink(real, link)
    (out,) = _files.check_outputs([("--json", str(link))])
    _files.write_outputs([(out, lambda f: f.write(b"new"))])
    assert link.is_symlink() and real.read_text() == "new"
    (null,) = _files.check_outputs([("--json", os.devnull)])
    assert null.special
    _files.write_outputs([(null, lambda f: f.write(b"discarded"))])
    assert os.path.exists(os.devnull) and not stat.S_ISREG(os.stat(os.devnull).st_mode)


def test_broken_pipe_is_not_bad_input_and_files_are_written_first(tmp_path, monkeypatch):
    """`jaxbio sprint | head -1`: the sprint command must not turn the BrokenPipeError into
    "error: [Errno 32]" and exit 2 (the jaxbio entry point handles it), and the JSON is written
    before the table is printed."""

    class ClosedPipe(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    js = tmp_path / "r.json"
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    with pytest.raises(BrokenPipeError):
        _sprint_layer(["--race", "bolt_2009", "--json", js], monkeypatch)
    assert json.loads(js.read_text())["race"] == "bolt_2009_berlin_wc_final"


# ---- defect 2: header numbers ------------------------------------------------------------------


@pytest.mark.parametrize(
    "reaction, wind, rt, w",
    [
        ("0,146", "+0,9", 0.146, 0.9),
        ("0.146 s", "−1,5", 0.146, -1.5),  # U+2212
        ("146 ms", "–0.5 m/s", 0.146, -0.5),  # U+2013 as printed in result lists
        ("0.146 (official)", "3.2 km/h", 0.146, 3.2 / 3.6),
        ("0.146", "2 mph (estimated)", 0.146, 2 * 0.44704),
        ("146,5 ms", '0.0 m/s (t-nation: "x"; y)', 0.1465, 0.0),
    ],
)
def test_header_numbers_decimal_commas_and_units(reaction, wind, rt, w):
    race, warned = _read(f"# reaction_time_s: {reaction}\n# wind: {wind}\n" + ROWS)
    assert race.reaction_time == pytest.approx(rt, rel=1e-15, abs=0) and race.wind == pytest.approx(w, rel=1e-15, abs=0)
    assert race.wind_known and warned == []


@pytest.mark.parametrize(
    "header, line, message",
    [
        ("# reaction_time_s: 0.146\n# wind: 3.2 knots", 2, "unknown unit or text 'knots'"),
        ("# reaction_time_s: 0.146\n# wind: 1.234,5", 2, "cannot read the number"),
        ("# reaction_time_s: 0.146\n# wind: NW 2.0", 2, "cannot read"),
        ("# reaction_time_s: 146\n# wind: 0", 1, "milliseconds?"),
        ("# reaction_time_s: -0.1\n# wind: 0", 1, "[0, 1) s"),
        ("# reaction_time_s: 0.146\n# wind: 25", 2, "impossible"),
        ("# reaction_time_s: 0.146\n# wind: -80 km/h", 2, "impossible"),
        ("# reaction_time_s: 0.146\n# wind: 0.9\n# reaction_time_s: 0.9", 3, "given twice (lines 1 and 3)"),
        (
            "# wind: 0.9\n# athlete: A\n# reaction_time_s: 0.146\n# athlete: B",
            4,
            "'athlete' given twice (lines 2 and 4)",
        ),
        ("# reaction time: 0.146\n# wind: 0", 0, "found 'reaction time' (line 1)"),
    ],
)
def test_header_values_refused_with_their_line(header, line, message, tmp_path, capsys, monkeypatch):
    text = header + "\n" + ROWS
    with pytest.raises(SprintDataError) as err:
        read_csv("race.csv", text=text)
    assert err.value.line == line and message in str(err.value) and str(err.value).startswith(f"race.csv:{line}:")
    _no_fit(monkeypatch)
    p = _file(tmp_path, "race.csv", text)
    assert _cli(["--csv", p], monkeypatch) == 2
    assert _one_error_line(capsys.readouterr().err, message) == f"jaxbio sprint: error: {p}:{line}: {err.value.problem}"


@pytest.mark.parametrize(
    "value",
    ["RT 0.146 / 0.152", "0.146 / 0.152", "0.146 official", "0,1,46", "unknown", "n/a (not in the report)", ""],
)
def test_a_reaction_time_that_is_not_one_number_is_assumed_with_a_warning(value):
    """Issue #54 item 3: two numbers or text were refused; now the reaction time is unknown,
    ``ASSUMED_REACTION`` is assumed and one warning names the line (the model choice fits the
    start offset). A readable number out of range and a missing line are still refused (above)."""
    from jaxbio.sprint.data import ASSUMED_REACTION

    race, warned = _read(f"# wind: 0.9\n# reaction_time_s: {value}\n" + ROWS)
    assert race.reaction_time == ASSUMED_REACTION == 0.15 and not race.reaction_time_known
    assert race.wind_known and race.wind == 0.9  # the rest of the header as before
    assert len(warned) == 1 and warned[0].message.line == 2
    assert str(warned[0].message).startswith("race.csv:2: reaction_time_s ")
    assert "not one number" in str(warned[0].message) and "0.15 s assumed" in str(warned[0].message)
    race, warned = _read("# wind: 0.9\n# reaction_time_s: 0.146 (RT 0.146 / 0.152 in the report)\n" + ROWS)
    assert race.reaction_time == 0.146 and race.reaction_time_known and warned == []  # a remark in parentheses


def test_a_trace_still_refuses_a_reaction_time_that_is_not_one_number():
    """Speed traces are fitted on speed with no start offset: there it stays an error."""
    from jaxbio.sprint.trace import read_trace

    text = "# reaction_time_s: 0.146 / 0.152\n# wind: 0\n# time_origin: gun\ntime_s,speed_m_s\n"
    text += "".join(f"{0.2 + 0.1 * i:.2f},{min(1.0 + i, 11.0):.1f}\n" for i in range(40))
    with pytest.raises(SprintDataError, match="trace.csv:1: reaction_time_s: unknown unit or text"):
        read_trace("trace.csv", text=text)


@pytest.mark.parametrize(
    "wind", ["not given in the sources seen", "n/a", "unknown", "", "–", "n/a (not in the 2009 report)", None]
)
def test_unknown_wind_is_assumed_zero_with_a_warning(wind):
    header = "# reaction_time_s: 0.146\n" + (f"# wind: {wind}\n" if wind is not None else "")
    race, warned = _read(header + ROWS)
    assert race.wind == 0.0 and not race.wind_known
    assert len(warned) == 1 and "wind unknown, 0 m/s assumed" in str(warned[0].message)
    assert warned[0].message.line == (2 if wind is not None else 0)


@pytest.mark.parametrize(
    "header, line, message, rt, wind",
    [
        ("# reaction_time_s: 0.6\n# wind: 0", 1, "reaction time 0.6 s is outside the usual 0.08–0.5 s", 0.6, 0.0),
        ("# reaction_time_s: 0.05\n# wind: 0", 1, "reaction time 0.05 s is outside", 0.05, 0.0),
        ("# reaction_time_s: 0.146\n# wind: -12", 2, "wind -12 m/s is beyond ±10 m/s", 0.146, -12.0),
    ],
)
def test_implausible_values_are_read_with_a_warning(header, line, message, rt, wind):
    race, warned = _read(header + "\n" + ROWS)
    assert race.reaction_time == rt and race.wind == wind
    assert len(warned) == 1 and str(warned[0].message).startswith(f"race.csv:{line}: {message}")


def test_cli_fits_a_race_whose_reaction_time_is_not_one_number(tmp_path, capsys, monkeypatch):
    """Issue #54 item 3: `# reaction_time_s: RT 0.146 / 0.152` stopped the CLI (exit 2). Now: one
    warning line, the table says the reaction time is unknown and the start offset is fitted, the
    JSON has ``reaction_time_s: null`` and the assumed value (as for an unknown wind), and the
    start found (0.15 s + offset) is Bolt's from the embedded file's fit (0.146 + 0.061 s)."""
    two = _file(
        tmp_path, "two.csv", "# athlete: Usain Bolt\n# reaction_time_s: RT 0.146 / 0.152\n# wind: +0.9\n" + ROWS
    )
    js = tmp_path / "out.json"
    assert _cli(["--race", "bolt_2009", "--csv", two, "--json", js], monkeypatch) == 0
    out = capsys.readouterr()
    assert out.err.strip().splitlines() == [
        f"jaxbio sprint: warning: {two}:2: reaction_time_s 'RT 0.146 / 0.152' is not one number in s or ms: "
        "reaction time unknown, 0.15 s assumed and the start offset fitted with its prior "
        "(write one number, e.g. '0.146 s (official)', to use it)"
    ]
    assert "reaction time unknown (0.15 s assumed; the start offset RT fitted with its prior N(0, 0.05 s)) for two" in (
        out.out
    )
    ref, rec = json.loads(js.read_text())
    assert ref["reaction_time_s"] == 0.146 and "reaction_time_assumed_s" not in ref
    assert rec["reaction_time_s"] is None and rec["reaction_time_assumed_s"] == 0.15 and rec["wind_mps"] == 0.9
    assert rec["selection"]["freed"] == ["rt_offset"] and "not known" in rec["selection"]["reason"]
    start_ref = 0.146 + ref["selection"]["parameters"]["rt_offset"]["value"]
    start = 0.15 + rec["selection"]["parameters"]["rt_offset"]["value"]
    assert start == pytest.approx(start_ref, abs=2e-3)  # the same start, from another assumed reaction time
    assert rec["rmse_s"] == pytest.approx(ref["rmse_s"], abs=2e-4)


def test_cli_header_spellings_give_the_numbers_of_the_embedded_race(tmp_path, capsys, monkeypatch):
    """Issue: `# reaction_time_s: 0,146` was read as 0 s (F0 11.8 instead of 15.9), `3.2 km/h` as
    3.2 m/s, and free-text wind stopped the CLI. Bolt 2009's splits with RT and wind spelled
    differently must fit exactly like the embedded file; free-text wind runs, reported as unknown."""
    comma = _file(tmp_path, "comma.csv", "# reaction_time_s: 0,146\n# wind: +0,9\n" + ROWS)
    units = _file(tmp_path, "units.csv", "# reaction_time_s: 146 ms\n# wind: 3.24 km/h (= 0.9 m/s)\n" + ROWS)
    free = _file(tmp_path, "free.csv", "# reaction_time_s: 0.146\n# wind: not given in the sources seen\n" + ROWS)
    js = tmp_path / "out.json"
    assert _cli(["--race", "bolt_2009", "--csv", comma, "--csv", units, "--csv", free, "--json", js], monkeypatch) == 0
    out = capsys.readouterr()
    assert out.err.strip().splitlines() == [
        f"jaxbio sprint: warning: {free}:2: wind 'not given in the sources seen': wind unknown, 0 m/s assumed"
    ]
    assert "wind unknown (0 m/s assumed) for free" in out.out
    recs = json.loads(js.read_text())
    ref = recs[0]
    # the model choice frees a start offset on this race (selection.py): F0 18.05 (15.88 with the
    # file's reaction time held; 11.8 if the reaction time were read as 0)
    assert ref["selection"]["freed"] == ["rt_offset"]
    assert ref["parameters"]["f0"]["value"] == pytest.approx(18.05, abs=0.01)
    for rec in recs[1:3]:
        assert rec["reaction_time_s"] == 0.146 and rec["wind_mps"] == pytest.approx(0.9, rel=1e-15)
        for name, p in rec["parameters"].items():
            assert p["value"] == pytest.approx(ref["parameters"][name]["value"], rel=1e-9)
    assert recs[3]["wind_mps"] is None and recs[3]["wind_assumed_mps"] == 0.0 and recs[3]["converged"]
    assert "wind_assumed_mps" not in ref and "problems" not in ref


# ---- data rows ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows, line, message",
    [
        ("distance_m,time_s\n10,1,88\n20,2,88\n", 4, "separate the columns by ';'"),
        ("distance_m;time_s\n10;1.234,5\n", 4, "both a decimal comma and a point"),
        ("distance_m,time_s\n10;1.88\n", 4, "the column line uses a comma"),
        ("distance_m,time_s\n10,1.88\n30,3.78\n20,2.88\n", 6, "distances must increase: 20 m after 30 m (line 5)"),
        ("distance_m,time_s\n10,1.88\n20,2.88\n20,2.88\n30,3.78\n", 6, "distance 20 m given twice (lines 5 and 6)"),
        ("distance_m,time_s\n10,1.88\n20,1_0\n", 5, "not a number: '1_0'"),
        ("distance_m,time_s\n10,1.88\n20,0x1F\n", 5, "not a number"),
        ("distance_m,time_s\n10,1.88\n20,٣\n", 5, "not a number"),  # an Arabic-Indic digit: float() would take it
        ("distance_m,time_s\n10,1.88\n20,-inf\n", 5, "NaN or infinite"),
        ("distance_m,time_s\n10,1.88\n20,1e999\n", 5, "NaN or infinite"),
        ("distance_m,time_s\n10,1.88\n100,9.58\n200,19.19\n300,31.00\n", 7, "beyond 200 m"),
        ("distance_m,time_s\n10,1.88\n10.5,1.93\n20,2.88\n", 5, "at least 1 m apart"),
        ("distance_m,time_s\n10,1.88\n20,2.2\n", 5, "faster than any sprinter"),
        ("distance_m,time_s\n10,1880\n20,2880\n", 4, "slower than a sprint"),  # milliseconds
        ("distance_m,time_s\n10,1.88\n90,8.74\n100,19.58\n", 6, "0.92 m/s, slower than a sprint"),  # a typo
    ],
)
def test_bad_rows_refused_with_their_line(rows, line, message):
    with pytest.raises(SprintDataError) as err:
        read_csv("race.csv", text="# reaction_time_s: 0.146\n# wind: 0\n" + rows)
    assert err.value.line == line and message in str(err.value), str(err.value)


def test_file_encodings_and_line_ends(tmp_path):
    head = "# athlete: Zoë Müller\n# reaction_time_s: 0,146\n# wind: −0,5 m/s\n"
    text = head + ROWS
    for data in (
        b"\xef\xbb\xbf" + text.encode(),
        text.replace("\n", "\r\n").encode(),
        text.encode("utf-16"),
        text.replace("\n", "\r").encode(),
        (head + ROWS.replace(",", "\t")).encode(),
        (head + ROWS.replace(",", " ; ").replace(".", ",")).encode(),
    ):
        race = read_csv(_file(tmp_path, "r.csv", data))
        assert race.header["athlete"] == "Zoë Müller" and race.reaction_time == 0.146 and race.wind == -0.5
        assert race.distances[-1] == 100 and race.times[-1] == 9.58
    with pytest.raises(SprintDataError) as err:
        read_csv(_file(tmp_path, "latin1.csv", ("# reaction_time_s: 0.146\n# athlete: Zoë\n" + ROWS).encode("latin-1")))
    assert str(err.value).startswith(f"{tmp_path / 'latin1.csv'}:2: not UTF-8 text (byte 0xeb)")
    with pytest.raises(SprintDataError, match="is a directory"):
        read_csv(tmp_path)


# ---- defect 3: absurd fits ---------------------------------------------------------------------


def test_a_300_m_race_and_1000_splits_are_refused_before_fitting(tmp_path, capsys, monkeypatch):
    """Issue: a 200 m race was fitted (exit 1, ± 0.00) and 1,000 splits gave E = 8.3e17 ± 0, exit 0.
    (Races up to 200 m are now for the model, issue #21: test_lengths.py; beyond is refused.)"""
    _no_fit(monkeypatch)
    d300 = _file(
        tmp_path,
        "r300.csv",
        "# reaction_time_s: 0.15\n# wind: 0\ndistance_m,time_s\n50,5.60\n100,10.10\n150,14.60\n200,19.30\n300,31.00\n",
    )
    assert _cli(["--csv", d300], monkeypatch) == 2
    _one_error_line(capsys.readouterr().err, f"{d300}:8:", "beyond 200 m")
    d = np.linspace(0.1, 100, 1000)
    t = np.interp(
        d,
        [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100],
        [0.146, 1.88, 2.88, 3.78, 4.64, 5.47, 6.29, 7.10, 7.92, 8.74, 9.58],
    )
    many = _file(
        tmp_path,
        "many.csv",
        "# reaction_time_s: 0.146\n# wind: 0\ndistance_m,time_s\n"
        + "".join(f"{a:.4f},{b:.5f}\n" for a, b in zip(d, t)),
    )
    assert _cli(["--csv", many], monkeypatch) == 2
    _one_error_line(capsys.readouterr().err, f"{many}:5:", "0.1 m apart")


def test_absurd_fits_are_flagged_not_converged_exit_1(tmp_path, capsys, monkeypatch):
    """Issue: reaction 0.9 s (the value a repeated key used to give) fitted E = 8.4e10 J/kg,
    "converged", exit 0; the 1 m resampling of a race (what 1,000 splits became) ran E off to
    ~1e12 with std 0. Both must be flagged: exit 1, a stderr line naming race and parameter,
    "!" and "n/a" in the table (never "± 0"), "converged": false and "problems" in the JSON."""
    slow = _file(tmp_path, "slow_rt.csv", "# reaction_time_s: 0.9\n# wind: +0.9\n" + ROWS)
    d = np.arange(1.0, 101.0)
    t = np.interp(
        d,
        [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100],
        [0.146, 1.88, 2.88, 3.78, 4.64, 5.47, 6.29, 7.10, 7.92, 8.74, 9.58],
    )
    dense = _file(
        tmp_path,
        "dense.csv",
        "# reaction_time_s: 0.146\n# wind: 0\ndistance_m,time_s\n" + "".join(f"{a:g},{b:.5f}\n" for a, b in zip(d, t)),
    )
    js = tmp_path / "out.json"
    assert _cli(["--csv", slow, "--csv", dense, "--json", js], monkeypatch) == 1
    out = capsys.readouterr()
    err = [line for line in out.err.splitlines() if "not a valid fit" in line]
    assert len(err) == 2 and "Traceback" not in out.err, out.err
    assert err[0].startswith(f"jaxbio sprint: slow_rt ({slow}): not a valid fit: ") and "energy = " in err[0]
    assert "outside the plausible 50–20000 J/kg" in err[0]
    assert err[1].startswith(f"jaxbio sprint: dense ({dense}): not a valid fit: ") and "energy" in err[1]
    rows = {line.split()[0]: line for line in out.out.splitlines() if line.startswith(("slow_rt", "dense"))}
    assert set(rows) == {"slow_rt", "dense"}
    for row in rows.values():
        assert " !" in row and "± 0 " not in row and "± 0.00 " not in row
    assert "n/a" in rows["slow_rt"]  # its E direction is flat: no std, and it prints as such
    assert "! not a valid estimate" in out.out
    recs = json.loads(js.read_text())
    for rec in recs:
        assert rec["converged"] is False and "energy" in rec["problems"]
    assert recs[0]["parameters"]["energy"]["std"] is None


def test_flat_directions_give_nan_std_and_no_convergence():
    """The class of defect: pinv of a singular Gauss–Newton Hessian gives variance 0 along the flat
    direction, which printed as "± 0". ``flat_parameters`` finds it, including a flat direction
    that mixes parameters; healthy covariances (embedded-race condition ~1e-3) are untouched."""
    healthy = np.diag([1e-3, 1e-4, 1e-6])
    J = np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 1.0], [1.0, 2.0, 0.0]])  # col 1 = 2 × col 0
    mixed = np.linalg.pinv(J.T @ J, hermitian=True)
    E_gone = np.linalg.pinv(np.diag([1.0, 2.0, 0.0]), hermitian=True)
    flags = fitting.flat_parameters(np.stack([healthy, mixed, E_gone, np.full((3, 3), np.nan)]))
    assert flags.tolist() == [[False, False, False], [True, True, False], [False, False, True], [True, True, True]]
    res = types.SimpleNamespace(
        names=("f0", "vmax", "energy"),
        values=np.array([[16.0, 20.0, 1000.0]] * 3),
        std=np.array([[0.2, 0.2, 17.0], [0.2, 0.2, np.nan], [0.2, 0.2, 17.0]]),
        converged=np.array([True, False, False]),
    )
    assert fitting.fit_problems(res, 0) == {}
    assert (
        list(fitting.fit_problems(res, 1)) == ["energy"] and "not determined" in fitting.fit_problems(res, 1)["energy"]
    )
    assert fitting.fit_problems(res, 2) == {"fit": "the fit did not converge"}
    assert (
        sprint_cli._fmt_pm(1000.0, 0.0, 0) == "1000 ± n/a"
        and sprint_cli._fmt_pm(8.3e17, np.nan, 0, True) == "8.3e+17 ± n/a !"
    )


# ---- hypothesis: generated split files ---------------------------------------------------------

_WIND_UNITS = {"": 1.0, " m/s": 1.0, "m/s": 1.0, " km/h": 1 / 3.6, " mph": 0.44704}  # the test's own table
_FREE_WIND = ["not given in the sources seen", "n/a", "unknown", "", "–", "? (see notes)"]
_DEFECTS = [
    "none",
    "none",
    "none",
    "free_wind",
    "no_wind",
    "dup_key",
    "unit",
    "trailing_text",
    "ms_without_unit",
    "negative_rt",
    "huge_wind",
    "swap_rows",
    "dup_row",
    "nan_cell",
    "negative",
    "beyond",
    "too_close",
    "comma_in_comma_file",
    "latin1",
    "two_marks",
    "no_reaction",
    "ms_times",
]


def _num(text: str, mark: str) -> str:
    return text.replace(".", mark)


@st.composite
def split_files(draw):
    """``(bytes, expected)``: ``expected`` is ``("ok", rt, wind, wind_known, distances, times, lines,
    rt_known)`` or ``("error", line)``. A reaction time that is not one number (text after it, two
    decimal marks) is read as unknown (0.15 s assumed, a warning); the same defects of the wind
    are refused."""
    n = draw(st.integers(3, 10))
    distances = sorted(draw(st.lists(st.sampled_from(range(5, 101, 5)), min_size=n, max_size=n, unique=True)))
    rt_ms = draw(st.integers(100, 200))
    speeds = draw(st.lists(st.integers(50, 120), min_size=n, max_size=n))  # dm/s: 5–12 m/s
    cs, prev_d, t = [], 0, rt_ms / 1000
    for d, v in zip(distances, speeds):
        t += (d - prev_d) / (v / 10)
        cs.append(round(t * 100))  # hundredths of a second
        prev_d = d
    sep = draw(st.sampled_from([",", ";", "\t"]))
    mark = "." if sep == "," else draw(st.sampled_from([".", ","]))
    header_mark = draw(st.sampled_from([".", ","]))
    defect = draw(st.sampled_from(_DEFECTS))

    rt_style = draw(st.sampled_from(["s", "s_unit", "ms"]))
    rt_text = {"s": f"{rt_ms / 1000:.3f}", "s_unit": f"{rt_ms / 1000:.3f} s", "ms": f"{rt_ms} ms"}[rt_style]
    rt_text = _num(rt_text, header_mark) + draw(st.sampled_from(["", " (official)", " (RT: 0.1; x)"]))
    unit = draw(st.sampled_from(sorted(_WIND_UNITS)))
    wind_hundredths = draw(st.integers(-990, 990)) if _WIND_UNITS[unit] == 1.0 else draw(st.integers(-2000, 2000))
    sign = "+" if wind_hundredths > 0 else draw(st.sampled_from(["-", "−", "–"])) if wind_hundredths < 0 else ""
    wind_text = sign + _num(f"{abs(wind_hundredths) / 100:.2f}", header_mark) + unit
    wind = wind_hundredths / 100 * _WIND_UNITS[unit]
    wind_known = rt_known = True

    header = [
        ("athlete", "# athlete: Zoë Runner"),
        ("rt", f"# reaction_time_s: {rt_text}"),
        ("wind", f"# wind: {wind_text}"),
        ("comment", "# splits from a video analysis"),
    ]
    header = draw(st.permutations(header))
    rows = [("col", sep.join(["distance_m", "time_s"]))]
    if draw(st.booleans()):
        rows.append(("gun", sep.join(["0", _num("0.00", mark)])))
    for i, (d, c) in enumerate(zip(distances, cs)):
        rows.append((f"row{i}", sep.join([str(d), _num(f"{c / 100:.2f}", mark)])))
    lines = list(header) + [("blank", "")] + rows
    error_tag = None

    def index(tag):
        return [k for k, _ in lines].index(tag)

    if defect == "free_wind":
        lines[index("wind")] = ("wind", f"# wind: {draw(st.sampled_from(_FREE_WIND))}")
        wind, wind_known = 0.0, False
    elif defect == "no_wind":
        del lines[index("wind")]
        wind, wind_known = 0.0, False
    elif defect == "dup_key":
        key = draw(st.sampled_from(["athlete", "rt", "wind"]))
        i = index(key)
        lines.insert(draw(st.integers(i + 1, index("col"))), ("dup", lines[i][1]))
        error_tag = "dup"
    elif defect in ("unit", "trailing_text"):
        key = draw(st.sampled_from(["rt", "wind"]))
        text = lines[index(key)][1].split(" (")[0]
        lines[index(key)] = (key, text + (" knots" if defect == "unit" else " official"))
        error_tag, rt_known = (key, True) if key == "wind" else (None, False)
    elif defect == "ms_without_unit":
        lines[index("rt")] = ("rt", f"# reaction_time_s: {rt_ms}")
        error_tag = "rt"
    elif defect == "negative_rt":
        lines[index("rt")] = ("rt", f"# reaction_time_s: -{rt_text}")
        error_tag = "rt"
    elif defect == "huge_wind":
        lines[index("wind")] = (
            "wind",
            f"# wind: {draw(st.sampled_from(['+', '-', '−']))}{draw(st.integers(21, 99))} m/s",
        )
        error_tag = "wind"
    elif defect == "two_marks":
        key = draw(st.sampled_from(["rt", "wind"]))
        lines[index(key)] = (key, lines[index(key)][1].split(":")[0] + ": 1.234,5")
        error_tag, rt_known = (key, True) if key == "wind" else (None, False)
    elif defect == "no_reaction":
        del lines[index("rt")]
        error_tag = "file"
    elif defect == "swap_rows":
        i = draw(st.integers(0, n - 2))
        a, b = index(f"row{i}"), index(f"row{i + 1}")
        lines[a], lines[b] = lines[b], lines[a]
        error_tag = f"row{i}"  # now the later of the two
    elif defect == "dup_row":
        i = index(f"row{draw(st.integers(0, n - 1))}")
        lines.insert(i + 1, ("dup", lines[i][1]))
        error_tag = "dup"
    elif defect == "nan_cell":
        tag = f"row{draw(st.integers(0, n - 1))}"
        d, _ = lines[index(tag)][1].split(sep)
        bad = draw(st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e999"]))
        lines[index(tag)] = (tag, sep.join([d, bad] if draw(st.booleans()) else [bad, "1.00"]))
        error_tag = tag
    elif defect == "negative":
        tag = f"row{draw(st.integers(0, n - 1))}"
        d, t_text = lines[index(tag)][1].split(sep)
        lines[index(tag)] = (tag, sep.join(["-" + d, t_text] if draw(st.booleans()) else [d, "-" + t_text]))
        error_tag = tag
    elif defect == "beyond":
        far = draw(st.sampled_from([210, 250, 300, 400, 1e6, 1e300]))  # beyond MAX_DISTANCE = 200 m
        lines.append(("far", sep.join([f"{far:g}", _num(f"{cs[-1] / 100 + min(far, 1e4) / 10:.2f}", mark)])))
        error_tag = "far"
    elif defect == "ms_times":  # times written in milliseconds
        for i, c in enumerate(cs):
            lines[index(f"row{i}")] = (f"row{i}", sep.join([str(distances[i]), str(c * 10)]))
        error_tag = "row0"
    elif defect == "too_close":
        i = draw(st.integers(0, n - 2))
        lines.insert(
            index(f"row{i}") + 1,
            ("close", sep.join([_num(f"{distances[i] + 0.5:.1f}", mark), _num(f"{(cs[i] + 5) / 100:.2f}", mark)])),
        )
        error_tag = "close"
    elif defect == "comma_in_comma_file" and sep == ",":
        first = index("col") + 1
        for k in range(first, len(lines)):
            tag, text = lines[k]
            d, t_text = text.split(",")
            lines[k] = (tag, f"{d},{t_text.replace('.', ',')}")
        error_tag = lines[first][0]

    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    text = newline.join(t for _, t in lines) + newline * draw(st.integers(0, 2))
    encoding = draw(st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "str"]))
    if defect == "latin1":
        data = text.replace("−", "-").replace("–", "-").encode("latin-1")
        error_tag = "athlete"
    else:
        data = text if encoding == "str" else text.encode(encoding)
    if error_tag is not None:
        return data, ("error", 0 if error_tag == "file" else index(error_tag) + 1)
    row_lines = [index(f"row{i}") + 1 for i in range(n)]
    rt = rt_ms / 1000 if rt_known else 0.15
    return data, ("ok", rt, wind, wind_known, [float(d) for d in distances], [c / 100 for c in cs], row_lines, rt_known)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(split_files())
def test_property_generated_files_read_exactly_or_refused_at_their_line(case):
    data, expected = case
    event(f"{expected[0]}: {'bytes' if isinstance(data, bytes) else 'str'}")
    if expected[0] == "error":
        with pytest.raises(SprintDataError) as err:
            _read(data)
        assert err.value.path == "race.csv" and err.value.line == expected[1], (str(err.value), expected)
        assert str(err.value).startswith(f"race.csv:{expected[1]}: ") and "\n" not in str(err.value)
        return
    _, rt, wind, wind_known, distances, times, row_lines, rt_known = expected
    race, warned = _read(data)
    assert race.reaction_time == rt and race.reaction_time_known == rt_known
    assert [w for w in warned if "not one number" in str(w.message)] == ([] if rt_known else warned[:1])
    warned = [w for w in warned if "not one number" not in str(w.message)]
    assert race.wind == pytest.approx(wind, rel=1e-12, abs=1e-15) and race.wind_known == wind_known
    assert race.distances.tolist() == distances and race.times.tolist() == times
    assert race.lines.tolist() == row_lines and race.header["athlete"] == "Zoë Runner"
    assert [("wind unknown" in str(w.message)) for w in warned] == ([] if wind_known else [True])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(split_files())
def test_property_cli_bad_files_one_line_exit_2(case):
    """Through the command line: a file the reader refuses gives exactly its message as one
    stderr line, exit 2, nothing on stdout, no fit (no JAX work), no traceback."""
    data, expected = case
    if expected[0] != "error":
        return  # valid files would be fitted: covered by read_csv above and the CLI tests
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "race.csv")
        with open(p, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
        with pytest.raises(SprintDataError) as want:
            read_csv(p)
        out, err = io.StringIO(), io.StringIO()
        old = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            code = main(["sprint", "--no-progress", "--csv", p, "--json", os.path.join(d, "out.json")])
        finally:
            sys.stdout, sys.stderr = old
        assert code == 2 and out.getvalue() == ""
        assert err.getvalue() == f"jaxbio sprint: error: {want.value}\n"
        assert want.value.line == expected[1]
        assert sorted(os.listdir(d)) == ["race.csv"]


def test_a_refused_file_gives_no_warning():
    """Warnings (unknown wind, implausible reaction time) only for a file that is read: a bad one
    gives its error alone."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SprintDataError, match="distances must increase"):
            read_csv("race.csv", text="# reaction_time_s: 0.7\ndistance_m,time_s\n20,2.88\n10,1.88\n")
