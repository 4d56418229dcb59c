"""OpenSim .mot/.sto reading and writing: both header styles, OpenSim's degrees rule (checked
against OpenSim's own Storage where it is installed), round trips, the Table API, and every bad
input refused with a ValueError naming the file (and line / column)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from jaxbio.io import Table, read_storage, write_sto
from tests.io import assert_refused

DATA = Path(__file__).parent / "data" / "arm26_id"
MOT = DATA / "arm26_InverseKinematics.mot"
STD = DATA / "std_arm26_InverseDynamics.sto"

MODERN = """Coordinates
version=1
nRows=3
nColumns=3
inDegrees={flag}

Units are S.I. units (second, meters, Newtons, ...)
If the header above contains a line with 'inDegrees', this indicates whether rotational values are in degrees (yes) or radians (no).

endheader
time\tknee\tpelvis_tx
0.0\t10.0\t0.5
0.01\t11.0\t0.51
0.02\t12.5\t0.52
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_simm_header_mot_is_degrees():
    t = read_storage(MOT)
    assert t.in_degrees
    assert t.name == "inverse kinematics"
    assert t.labels[:2] == ("r_shoulder_elev", "r_elbow_flex") and len(t.labels) == 11
    assert t.data.shape == (121, 11) and t.time.shape == (121,)
    assert t.time[0] == 0.0 and t.time[-1] == 1.0
    assert t.data[0, 1] == 0.89932091  # r_elbow_flex, degrees (0.9 → 90.1 over the motion)
    assert t.header["datarows"] == "121" and t.header["range"] == "0.000000 1.000000"
    assert "# SIMM Motion File Header:" in t.description
    assert not t.data.flags.writeable and not t.time.flags.writeable


def test_old_sto_is_radians_and_keeps_its_description():
    t = read_storage(STD)
    assert not t.in_degrees
    assert t.name == "Inverse Dynamics" and t.description == "This file contains inverse dynamics results."
    assert t.labels == ("r_shoulder_elev_moment", "r_elbow_flex_moment")
    assert t.time[0] == -0.00000020000000500175 and t.data.shape == (121, 2)


@pytest.mark.parametrize("flag, expected", [("yes", True), ("no", False), ("Y", True), ("N", False)])
def test_modern_header(tmp_path, flag, expected):
    t = read_storage(_write(tmp_path, "a.sto", MODERN.format(flag=flag)))
    assert t.in_degrees is expected
    assert t.name == "Coordinates" and t.header["version"] == "1" and t.header["inDegrees"] == flag
    assert t.description.startswith("Units are S.I. units")
    np.testing.assert_array_equal(t.column("knee"), [10.0, 11.0, 12.5])


@pytest.mark.parametrize(
    "name, text, expected",
    [
        # no inDegrees line: degrees only for a version-0 .mot (Storage::Storage, "SIMM files are in degrees")
        ("v0.mot", "x\nnRows=2\nnColumns=2\nendheader\ntime a\n0 1\n1 2\n", True),
        ("v0.sto", "x\nnRows=2\nnColumns=2\nendheader\ntime a\n0 1\n1 2\n", False),
        ("v1.mot", "x\nversion=1\nnRows=2\nnColumns=2\nendheader\ntime a\n0 1\n1 2\n", False),
        # the modern (version 3, DataType) header of TimeSeriesTable files, no nRows/nColumns
        (
            "v3.sto",
            "DataType=double\nversion=3\nOpenSimVersion=4.5\ninDegrees=yes\nendheader\ntime\ta\n0\t1\n1\t2\n",
            True,
        ),
        ("v3.mot", "DataType=double\nversion=3\nendheader\ntime\ta\n0\t1\n1\t2\n", False),
        ("angles.sto", "x\nnRows=2\nnColumns=2\nAngles are in degrees.\nendheader\ntime a\n0 1\n1 2\n", True),
    ],
)
def test_degrees_rule_as_opensim(tmp_path, name, text, expected):
    path = _write(tmp_path, name, text)
    assert read_storage(path).in_degrees is expected
    opensim = pytest.importorskip("opensim")
    assert opensim.Storage(str(path)).isInDegrees() is expected


def test_explicit_in_degrees_no_in_a_version0_mot(tmp_path):
    """OpenSim forces degrees for any version-0 .mot; here the explicit line wins, and the
    override reproduces OpenSim."""
    path = _write(tmp_path, "a.mot", "x\nnRows=2\nnColumns=2\ninDegrees=no\nendheader\ntime a\n0 1\n1 2\n")
    assert read_storage(path).in_degrees is False
    assert read_storage(path, in_degrees=True).in_degrees is True


def test_against_opensim_storage():
    opensim = pytest.importorskip("opensim")
    for path in (MOT, STD):
        ours = read_storage(path)
        theirs = opensim.Storage(str(path))
        assert theirs.isInDegrees() == ours.in_degrees
        assert tuple(theirs.getColumnLabels().get(i) for i in range(1, len(ours.labels) + 1)) == ours.labels
        assert theirs.getSize() == ours.time.shape[0]
        for j, label in enumerate(ours.labels[:3]):
            col = opensim.ArrayDouble()
            theirs.getDataColumn(label, col, float(ours.time[0]))
            np.testing.assert_array_equal([col.get(i) for i in range(col.getSize())], ours.data[:, j])


def test_round_trip_exact(tmp_path):
    rng = np.random.default_rng(1)
    t = Table(
        time=np.cumsum(rng.uniform(0.001, 0.01, 50)) - 0.1,
        labels=("a", "b_moment", "c"),
        data=rng.standard_normal((50, 3)) * [1e-9, 1.0, 1e6],
        in_degrees=True,
        name="test table",
        description="line one\nline two",
    )
    path = tmp_path / "t.sto"
    write_sto(path, t)
    back = read_storage(path)
    np.testing.assert_array_equal(back.time, t.time)
    np.testing.assert_array_equal(back.data, t.data)
    assert (back.labels, back.in_degrees, back.name, back.description) == (
        t.labels,
        True,
        "test table",
        "line one\nline two",
    )
    assert back.header["version"] == "1" and back.header["nRows"] == "50" and back.header["nColumns"] == "4"
    if (opensim := _opensim()) is not None:  # OpenSim reads what we write, degrees flag included
        s = opensim.Storage(str(path))
        assert s.getSize() == 50 and s.isInDegrees()


def _opensim():
    try:
        import opensim
    except ImportError:
        return None
    return opensim


def test_write_in_opensim_fixed_format(tmp_path):
    """precision=20 is OpenSim's "%28.20lf" layout, the layout of the ID standard; the numbers
    read back equal the standard's (the standard was printed by a runtime that writes 17
    significant digits then zeros, glibc writes the exact expansion, so the bytes differ)."""
    std = read_storage(STD)
    path = tmp_path / "id.sto"
    write_sto(path, dataclasses.replace(std, description=""), precision=20)
    ours = path.read_text().split("\n")
    assert ours[:7] == [
        "Inverse Dynamics",
        "version=1",
        "nRows=121",
        "nColumns=3",
        "inDegrees=no",
        "endheader",
        "time\tr_shoulder_elev_moment\tr_elbow_flex_moment",
    ]
    theirs = STD.read_text().split("\n")[7:]
    assert len(ours[7:]) == len(theirs) == 122  # 121 rows and the final newline
    for a, b in zip(ours[7:-1], theirs[:-1]):
        assert [len(c) for c in a.split("\t")] == [len(c) for c in b.split("\t")] == [28, 28, 28]
        np.testing.assert_allclose(
            [float(c) for c in a.split("\t")], [float(c) for c in b.split("\t")], rtol=1e-16, atol=1e-19
        )
    back = read_storage(path)
    np.testing.assert_array_equal(back.data, std.data)
    write_sto(path, std, precision=8)
    assert path.read_text().split("\n")[8] == "     -0.00000020\t      0.05558359\t      0.02485738"


def test_table_api():
    t = read_storage(MOT)
    np.testing.assert_array_equal(t.column("r_elbow_flex"), t.data[:, 1])
    s = t.select(["r_elbow_flex", "r_shoulder_elev"])
    assert s.labels == ("r_elbow_flex", "r_shoulder_elev") and s.in_degrees and s.name == t.name
    np.testing.assert_array_equal(s.data, t.data[:, [1, 0]])
    with pytest.raises(ValueError, match=r"no column 'r_elbow_flx' \(did you mean 'r_elbow_flex'\?\)"):
        t.column("r_elbow_flx")
    with pytest.raises(ValueError, match="no column 'knee', 'hip'"):
        t.select(["r_elbow_flex", "knee", "hip"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.in_degrees = False
    with pytest.raises(TypeError):
        t.header["x"] = "1"
    assert "121 rows × 11 columns" in repr(t) and "degrees" in repr(t)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"labels": ("a", "a")}, "duplicate column label 'a'"),
        ({"data": [[1.0, np.nan], [2.0, 3.0]]}, r"NaN or inf: column 'b', row 0"),
        ({"time": [0.0, 0.0]}, "strictly increasing"),
        ({"data": [[1.0, 2.0]]}, r"expected \(2, 2\)"),
        ({"labels": ("a", "")}, "non-empty"),
    ],
)
def test_table_refuses(kwargs, match):
    base = {"time": [0.0, 1.0], "labels": ("a", "b"), "data": [[1.0, 2.0], [3.0, 4.0]]}
    with pytest.raises(ValueError, match=match):
        Table(**{**base, **kwargs})


def test_write_refuses(tmp_path):
    t = Table(time=[0.0], labels=("a b",), data=[[1.0]])
    with pytest.raises(ValueError, match="whitespace"):
        write_sto(tmp_path / "x.sto", t)
    with pytest.raises(ValueError, match="endheader"):
        write_sto(tmp_path / "x.sto", Table(time=[0.0], labels=("a",), data=[[1.0]], description="endheader"))
    with pytest.raises(ValueError, match="precision"):
        write_sto(tmp_path / "x.sto", Table(time=[0.0], labels=("a",), data=[[1.0]]), precision=-1)


GOOD_HEAD = "x\nversion=1\nnRows=2\nnColumns=3\ninDegrees=no\nendheader\n"


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("a.mot", "x\nnRows=2\nnColumns=3\ntime a b\n0 1 2\n1 2 3\n", "no 'endheader' line"),
        (
            "a.mot",
            GOOD_HEAD.replace("nColumns=3", "nColumns=4") + "time a b\n0 1 2\n1 2 3\n",
            r"line 7: the header says nColumns=4",
        ),
        ("a.mot", GOOD_HEAD + "time a b\n0 1 2\n1 2 x3\n", r"line 9: column 'b': 'x3' is not a number"),
        ("a.mot", GOOD_HEAD + "time a b\n0 1 2\n1 2,5 3\n", r"line 9: .*decimal comma"),
        (
            "a.mot",
            GOOD_HEAD + "time a b\n0 1 2\n1 nan 3\n",
            r"line 9: column 'a': 'nan' is not a finite number \(data row 1\)",
        ),
        ("a.mot", GOOD_HEAD + "time a b\n0 1 2\n1 2\n", r"line 9: row has 2 cells, expected 3"),
        ("a.mot", GOOD_HEAD + "time a time\n0 1 2\n1 2 3\n", r"line 7: duplicate column label 'time'"),
        ("a.mot", GOOD_HEAD + "time a b\n1 1 2\n0.5 2 3\n", r"line 9: time goes back: 0.5 s after 1.0 s"),
        ("a.mot", GOOD_HEAD.replace("nRows=2\n", "") + "time a b\n", "no data rows"),
        ("a.mot", GOOD_HEAD, "no column labels"),
        ("a.mot", GOOD_HEAD + "frame a b\n0 1 2\n1 2 3\n", r"line 7: the first column must be 'time'"),
        (
            "a.mot",
            GOOD_HEAD.replace("inDegrees=no", "inDegrees=maybe") + "time a b\n0 1 2\n1 2 3\n",
            r"line 5: inDegrees must be yes or no",
        ),
        (
            "a.mot",
            GOOD_HEAD.replace("nRows=2", "nRows=two") + "time a b\n0 1 2\n1 2 3\n",
            r"line 3: nRows must be a whole",
        ),
        ("a.sto", "DataType=Vec3\nversion=3\nendheader\ntime\tm\n0\t1,2,3\n", r"DataType=Vec3 is not supported"),
        ("a.mot", "", "the file is empty"),
        ("a.mot", "<?xml version='1.0'?>\n<OpenSimDocument/>\n", "is an XML document"),
        ("a.mot", "PathFileType\t4\t(X/Y/Z)\ta.trc\n", r"is a \.trc marker file.*read_trc"),
    ],
)
def test_bad_files(tmp_path, name, content, match):
    assert_refused(read_storage, _write(tmp_path, name, content), match)


def test_read_as_opensim_reads(tmp_path):
    """Where OpenSim's Storage reads a file jaxbio would otherwise refuse, it is read the same way
    with a warning naming the file: nRows that disagree with the rows (the first nRows, or all
    there are; opensim-core's UsingRelativePaths motion says 151 and has 7) and a repeated time
    (the later row replaces the earlier, as ``Storage::append``; the ankle-spring test motion of
    opensim-core ends so)."""
    with pytest.warns(UserWarning, match=r"a\.mot: the header says nRows=2 but the file has 1 data rows"):
        t = read_storage(_write(tmp_path, "a.mot", GOOD_HEAD + "time a b\n0 1 2\n"))
    assert t.time.tolist() == [0.0]
    with pytest.warns(UserWarning, match=r"the first 2 are read"):
        t = read_storage(_write(tmp_path, "b.mot", GOOD_HEAD + "time a b\n0 1 2\n1 2 3\n2 3 4\n"))
    assert t.time.tolist() == [0.0, 1.0]
    head = GOOD_HEAD.replace("nRows=2", "nRows=3")
    with pytest.warns(UserWarning, match=r"c\.mot: 1 row\(s\) repeat the time.*line 10, t = 1\.0 s"):
        t = read_storage(_write(tmp_path, "c.mot", head + "time a b\n0 1 2\n1 2 3\n1 5 6\n"))
    assert t.time.tolist() == [0.0, 1.0] and t.data.tolist() == [[1.0, 2.0], [5.0, 6.0]]
    with pytest.warns(UserWarning, match=r"e\.mot, line 7: repeated column labels 'a' \(position 3\)"):
        t = read_storage(_write(tmp_path, "e.mot", GOOD_HEAD + "time a a\n0 1 2\n1 2 3\n"))
    assert t.labels == ("a",) and t.data.tolist() == [[1.0], [2.0]]
    with pytest.raises(ValueError, match="time goes back"):
        read_storage(_write(tmp_path, "d.mot", head + "time a b\n0 1 2\n1 2 3\n0.5 5 6\n"))


def test_binary_files(tmp_path):
    c3d = tmp_path / "trial.mot"
    c3d.write_bytes(b"\x02P" + bytes(510))
    with pytest.raises(ValueError, match=r"trial\.mot: is a binary file.*read_c3d"):
        read_storage(c3d)
    latin = tmp_path / "latin.sto"
    latin.write_bytes(b"x\nendheader\ntime \xe9\n0 1\n")
    with pytest.raises(ValueError, match=r"latin\.sto, line 3: is not UTF-8"):
        read_storage(latin)
    with pytest.raises(ValueError, match=r"missing\.mot: no such motion file \(OpenSim \.mot/\.sto\)"):
        read_storage(tmp_path / "missing.mot")
    with pytest.raises(ValueError, match="is a directory"):
        read_storage(tmp_path)


def test_crlf_and_spaces(tmp_path):
    path = tmp_path / "w.mot"
    path.write_bytes(
        b"x\r\nversion=1\r\nnRows=2\r\nnColumns=2\r\ninDegrees=yes\r\nendheader\r\n"
        b"time    a\r\n  0.0   1.0\r\n\r\n  0.5   2.0  \r\n\r\n"
    )
    t = read_storage(path)
    np.testing.assert_array_equal(t.time, [0.0, 0.5])
    np.testing.assert_array_equal(t.data[:, 0], [1.0, 2.0])
