""".trc marker files (checked against OpenSim's TRCFileAdapter where installed) and C3D files
through ezc3d: a small C3D is written with ezc3d in the test and read back."""

import subprocess
import sys

import numpy as np
import pytest

from jaxbio.io import Markers, read_c3d, read_trc
from tests.io import assert_refused

TRC = """PathFileType\t4\t(X/Y/Z)\ts.trc
DataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\tOrigDataRate\tOrigDataStartFrame\tOrigNumFrames
100.00\t100.00\t3\t2\t{unit}\t100.00\t1\t3
Frame#\tTime\tR.ASIS\t\t\tL.ASIS\t\t\t
\t\tX1\tY1\tZ1\tX2\tY2\tZ2\t

1\t0.000\t1.0\t2.0\t3.0\t4.0\t5.0\t6.0
2\t0.010\t\t\t\t4.1\t5.1\t6.1
3\t0.020\t2.0\t3.0\t4.0\t4.2\t5.2\t6.2\t
"""


def _trc(tmp_path, text=None, unit="mm", name="s.trc"):
    path = tmp_path / name
    path.write_text(TRC.format(unit=unit) if text is None else text)
    return path


def test_read_trc(tmp_path):
    m = read_trc(_trc(tmp_path))
    assert m.names == ("R.ASIS", "L.ASIS") and m.rate == 100.0
    np.testing.assert_array_equal(m.time, [0.0, 0.01, 0.02])
    assert m.positions.shape == (3, 2, 3)
    mm = np.array([[4.0, 5.0, 6.0], [4.1, 5.1, 6.1], [4.2, 5.2, 6.2]])
    np.testing.assert_array_equal(m.marker("L.ASIS"), mm / 1000.0)
    np.testing.assert_array_equal(m.missing, [[False, False], [True, False], [False, False]])
    assert np.isnan(m.positions[1, 0]).all()
    assert m.header["Units"] == "mm" and m.header["NumFrames"] == "3" and m.header["PathFileType"] == "4 (X/Y/Z) s.trc"
    assert not m.positions.flags.writeable
    with pytest.raises(ValueError, match=r"no marker 'R.ASI' \(did you mean 'R.ASIS'\?\)"):
        m.marker("R.ASI")


@pytest.mark.parametrize("unit, per_metre", [("mm", 1000.0), ("cm", 100.0), ("m", 1.0)])
def test_trc_units(tmp_path, unit, per_metre):
    m = read_trc(_trc(tmp_path, unit=unit))
    assert m.positions[0, 0, 0] == 1.0 / per_metre


def test_trc_against_opensim(tmp_path):
    opensim = pytest.importorskip("opensim")
    path = _trc(tmp_path)
    ours = read_trc(path)
    table = opensim.TimeSeriesTableVec3(str(path)).flatten()
    assert list(table.getColumnLabels()) == [f"{n}_{i}" for n in ours.names for i in (1, 2, 3)]
    np.testing.assert_array_equal(list(table.getIndependentColumn()), ours.time)
    np.testing.assert_array_equal(table.getMatrix().to_numpy() / 1000.0, ours.positions.reshape(3, 6))


BAD_TRC = [
    ("frame\n", r"line 1: the first line must start with 'PathFileType'"),
    (TRC.replace("\tUnits\t", "\tUnitz\t"), r"line 2: the header has no 'Units'"),
    (TRC.replace("\t{unit}\t", "\tinch\t"), r"line 3: Units must be one of mm, cm, m, got 'inch'"),
    (TRC.replace("100.00\t100.00\t3\t2", "100.00\t100.00\t3\t3"), r"line 4: NumMarkers=3 but line 4 names 2"),
    (TRC.replace("100.00\t100.00\t3\t2", "100.00\t100.00\t4\t2"), r"NumFrames=4 but the file has 3 data rows"),
    (TRC.replace("\tL.ASIS\t", "\tR.ASIS\t"), r"line 4: duplicate marker name 'R.ASIS'"),
    (TRC.replace("X2\tY2", "Y2\tX2"), r"line 5: line 5 must hold X1 Y1 Z1"),
    (TRC.replace("2\t0.010\t\t\t\t4.1", "2\t0.010\t\t\t4.1"), r"line 8: row has 7 cells, expected 8"),
    (TRC.replace("4.1\t5.1", "4.1\tfive"), r"line 8: column 'L.ASIS Y': 'five' is not a number"),
    (TRC.replace("4.1\t5.1", "4.1\tinf"), r"line 8: marker 'L.ASIS': infinite coordinate"),
    (TRC.replace("2\t0.010", "2\t0.030"), r"line 9: time goes back"),
    (TRC.split("\n1\t")[0] + "\n", "no data rows"),
    (TRC.replace("100.00\t100.00\t3", "-1\t100.00\t3"), r"line 3: DataRate must be a positive number"),
    ("x\nversion=1\nendheader\ntime a\n0 1\n", r"read_storage"),
]


@pytest.mark.parametrize("text, match", BAD_TRC)
def test_trc_bad(tmp_path, text, match):
    assert_refused(read_trc, _trc(tmp_path, text.replace("{unit}", "mm")), match)


def test_trc_binary(tmp_path):
    path = tmp_path / "x.trc"
    path.write_bytes(b"\x02P" + bytes(100))
    assert_refused(read_trc, path, r"x\.trc: is a binary file.*read_c3d")


def test_markers_refuse():
    with pytest.raises(ValueError, match="some coordinates NaN"):
        Markers(time=[0.0], names=("a",), positions=[[[1.0, np.nan, 2.0]]], rate=1.0)
    with pytest.raises(ValueError, match="duplicate marker name 'a'"):
        Markers(time=[0.0], names=("a", "a"), positions=np.zeros((1, 2, 3)), rate=1.0)
    with pytest.raises(ValueError, match="rate"):
        Markers(time=[0.0], names=("a",), positions=np.zeros((1, 1, 3)), rate=0.0)


# ---- C3D ------------------------------------------------------------------------------------


_WRITER = """
import sys
import ezc3d
import numpy as np

for path, units in zip(sys.argv[1::2], sys.argv[2::2]):
    c = ezc3d.c3d()
    c["parameters"]["POINT"]["RATE"]["value"] = [100]
    c["parameters"]["POINT"]["LABELS"]["value"] = ("RASI", "LASI", "C7")
    c["parameters"]["ANALOG"]["RATE"]["value"] = [1000]
    c["parameters"]["ANALOG"]["LABELS"]["value"] = ("Fx1", "Fy1", "Fz1", "EMG")
    c.add_parameter("ANALOG", "UNITS", ["N", "N", "N", "V"])
    c.add_parameter("POINT", "UNITS", units)
    n = 6
    points = np.ones((4, 3, n))
    points[:3] = np.arange(3 * 3 * n, dtype=float).reshape(3, 3, n) * 10.0
    points[:3, 2, 4] = np.nan  # C7 missing in frame 4
    c["data"]["points"] = points
    c["data"]["analogs"] = np.arange(4 * n * 10, dtype=float).reshape(1, 4, n * 10) / 8.0
    c.write(path)
"""


def _points():
    """The marker coordinates `_WRITER` writes, ``(4, markers, frames)`` in the file's unit."""
    points = np.ones((4, 3, 6))
    points[:3] = np.arange(3 * 3 * 6, dtype=float).reshape(3, 3, 6) * 10.0
    points[:3, 2, 4] = np.nan
    return points


@pytest.fixture(scope="module")
def c3d_files(tmp_path_factory):
    """Three small C3D files written by ezc3d (units mm, m, in). In a subprocess: once ezc3d has
    converted Python strings to a std::vector<std::string> (the labels), OpenSim's SWIG wrappers
    in the same process no longer accept their own StdVectorString (a clash of the two SWIG
    runtimes), which would break the OpenSim comparisons of other test files."""
    pytest.importorskip("ezc3d")
    folder = tmp_path_factory.mktemp("c3d")
    files = {units: folder / f"{units}.c3d" for units in ("mm", "m", "in")}
    args = [a for units, path in files.items() for a in (str(path), units)]
    subprocess.run([sys.executable, "-c", _WRITER, *args], check=True)
    return files


def test_c3d_round_trip(c3d_files):
    points = _points()
    d = read_c3d(c3d_files["mm"])
    m = d.markers
    assert m.names == ("RASI", "LASI", "C7") and m.rate == 100.0
    np.testing.assert_array_equal(m.time, np.arange(6) / 100.0)
    expected = points[:3].transpose(2, 1, 0) / 1000.0
    np.testing.assert_array_equal(m.positions, expected)  # NaN where missing, metres
    assert m.missing.sum() == 1 and m.missing[4, 2]
    a = d.analogs
    assert a.names == ("Fx1", "Fy1", "Fz1", "EMG") and a.units == ("N", "N", "N", "V") and a.rate == 1000.0
    assert a.data.shape == (60, 4)
    np.testing.assert_array_equal(a.channel("EMG"), np.arange(180, 240) / 8.0)
    np.testing.assert_array_equal(a.time, np.arange(60) / 1000.0)
    assert d.header["units"] == "mm"
    with pytest.raises(ValueError, match="no channel 'Fz2'"):
        a.channel("Fz2")


def test_c3d_metres(c3d_files):
    np.testing.assert_array_equal(read_c3d(c3d_files["m"]).markers.positions[0, 0], _points()[:3, 0, 0])


def test_c3d_without_ezc3d(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ezc3d", None)  # import ezc3d raises ImportError
    with pytest.raises(ImportError, match=r"pip install ezc3d"):
        read_c3d(tmp_path / "x.c3d")


def test_c3d_bad(tmp_path, c3d_files):
    text = tmp_path / "a.c3d"
    text.write_text("time a\n0 1\n")
    with pytest.raises(ValueError, match=r"a\.c3d: is not a C3D file"):
        read_c3d(text)
    with pytest.raises(ValueError, match="no such file"):
        read_c3d(tmp_path / "missing.c3d")
    broken = tmp_path / "b.c3d"
    broken.write_bytes(b"\x02P" + bytes(20))
    with pytest.raises(ValueError, match=r"b\.c3d: ezc3d cannot read it"):
        read_c3d(broken)
    with pytest.raises(ValueError, match="POINT:UNITS must be one of mm, cm, m, got 'in'"):
        read_c3d(c3d_files["in"])
