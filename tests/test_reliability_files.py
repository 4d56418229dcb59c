"""Reliability of the command line's files and messages (issue #50, third pass): inputs that are
not regular files (a FIFO never blocks, ``/dev/zero`` never fills the memory) or too large,
exclusive bounds refused at their edge, outputs checked by creating a file, no empty results
directory after a failed ``run-tool``, bad values echoed at most ~100 characters, the real reason
for a wrong model or text encoding. Every CLI failure: exit 2, one line on stderr. Fast: no JAX
compile (every failure comes before any fitting)."""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxbio import _files
from jaxbio.cli import main
from tests._models import REPO

DATA = REPO / "tests" / "io" / "data"
ARM26 = DATA / "arm26_id"
MOTION = ARM26 / "arm26_InverseKinematics.mot"
OSIM = ARM26 / "arm26.osim"
SPLITS = (
    "# reaction_time_s: 0.146\ndistance_m,time_s\n10,1.88\n20,2.96\n30,3.88\n40,4.77\n50,5.64\n"
    "60,6.50\n70,7.36\n80,8.22\n90,9.09\n100,9.96\n"
)


def _one_line_exit_2(argv, capsys, *needles):
    """Run ``jaxbio argv`` in-process: exit 2, nothing on stdout, one stderr line holding every
    needle; returns that line."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == 2, (code, captured.err[-2000:])
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err[-2000:]
    for needle in needles:
        assert needle in captured.err, captured.err
    return captured.err


class _FifoGuard:
    """A FIFO whose writer end a thread keeps opening (non-blocking) for a few seconds: every
    reader that opens it blocking is then released (it reads garbage and the test fails on the
    message) instead of hanging the test run."""

    def __init__(self, path: Path, seconds: float = 20.0):
        os.mkfifo(path)
        self.path, self.stop = path, threading.Event()
        self.thread = threading.Thread(target=self._write, args=(seconds,), daemon=True)
        self.thread.start()

    def _write(self, seconds):
        deadline = time.monotonic() + seconds
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:  # ENXIO: no reader yet
                assert e.errno == errno.ENXIO
                time.sleep(0.05)
                continue
            try:
                os.write(fd, b"not,a,split,file\n")
            except OSError:
                pass
            os.close(fd)
            time.sleep(0.05)

    def close(self):
        self.stop.set()
        self.thread.join(5)


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


@pytest.fixture
def fifo(tmp_path):
    guards = []

    def make(name):
        guards.append(_FifoGuard(tmp_path / name))
        return tmp_path / name

    yield make
    for g in guards:
        g.close()


# --- 1. special files -----------------------------------------------------------------------


def _argv_with(kind: str, special: str, tmp_path: Path) -> list:
    """A command whose input ``kind`` is the file ``special`` (the other inputs good)."""
    setup = tmp_path / "setup.xml"
    loads = tmp_path / "loads.xml"
    if kind == "setup-model":
        setup.write_text(
            f"<OpenSimDocument><InverseDynamicsTool name='t'><model_file>{special}</model_file>"
            f"<coordinates_file>{MOTION}</coordinates_file><results_directory>{tmp_path / 'res'}"
            "</results_directory></InverseDynamicsTool></OpenSimDocument>"
        )
    if kind == "loads-data":
        loads.write_text(
            f"<OpenSimDocument><ExternalLoads name='x'><objects><ExternalForce name='f'>"
            "<applied_to_body>r_humerus</applied_to_body><force_identifier>f</force_identifier>"
            f"</ExternalForce></objects><datafile>{special}</datafile></ExternalLoads></OpenSimDocument>"
        )
    return {
        "split": ["sprint", "--csv", special],
        "osim": ["id", "--model", special, "--motion", MOTION],
        "json": ["id", "--model", special],
        "motion": ["id", "--model", OSIM, "--motion", special],
        "loads": ["id", "--model", OSIM, "--motion", MOTION, "--external-loads", special],
        "loads-data": ["id", "--model", OSIM, "--motion", MOTION, "--external-loads", loads],
        "so-motion": ["static-optimization", "--model", OSIM, "--motion", special],
        "so-actuators": ["static-optimization", "--model", OSIM, "--motion", MOTION, "--actuators", special],
        "setup": ["run-tool", special],
        "setup-model": ["run-tool", setup],
        "animate": ["animate", "--model", "arm26", "--motion", special, "--output", tmp_path / "a.gif"],
    }[kind]


KINDS = [
    "split",
    "osim",
    "json",
    "motion",
    "loads",
    "loads-data",
    "so-motion",
    "so-actuators",
    "setup",
    "setup-model",
    "animate",
]


@needs_fifo
@pytest.mark.parametrize("kind", KINDS)
def test_a_fifo_input_is_refused_without_blocking(kind, fifo, tmp_path, capsys):
    special = fifo(
        f"input_{kind}.{'osim' if kind in ('osim', 'setup-model') else 'json' if kind == 'json' else 'xml' if kind in ('loads', 'setup', 'so-actuators') else 'mot'}"
    )
    _one_line_exit_2(_argv_with(kind, special, tmp_path), capsys, str(special), "not a regular file (a FIFO)")
    assert not (tmp_path / "res").exists()


@pytest.fixture
def memory_guard():
    """At most ~1 GiB more address space while the test runs (Linux), so that a reader that reads
    ``/dev/zero`` to the end fails with MemoryError instead of swapping the machine."""
    resource = pytest.importorskip("resource")
    try:
        size = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
    except (OSError, StopIteration):
        pytest.skip("no /proc/self/status")
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, old[1]))
    yield
    resource.setrlimit(resource.RLIMIT_AS, old)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
@pytest.mark.parametrize("kind", ["split", "osim", "json", "motion", "setup", "animate"])
def test_a_device_is_refused_not_read(kind, device, tmp_path, capsys, memory_guard):
    _one_line_exit_2(_argv_with(kind, device, tmp_path), capsys, device, "not a regular file (a character device)")


def test_an_input_larger_than_the_cap_is_refused_before_reading(tmp_path, capsys, monkeypatch):
    big = tmp_path / "big.mot"
    big.write_bytes(b"x" * 300_000)  # the model is 79 kB
    monkeypatch.setattr(_files, "MAX_INPUT_BYTES", 200_000)
    _one_line_exit_2(
        ["id", "--model", OSIM, "--motion", big],
        capsys,
        str(big),
        "too large for a motion file",
        "300000 bytes",
        "the limit is 200000 bytes",
    )


@needs_fifo
def test_library_readers_refuse_a_fifo(fifo):
    """The public readers behind the CLI (and read_c3d, which hands the path to ezc3d)."""
    from jaxbio import load_model
    from jaxbio.io import load_osim, read_storage, read_trc

    readers = [load_model, load_osim, read_storage, read_trc]
    try:
        from jaxbio.io import read_c3d
        import ezc3d  # noqa: F401

        readers.append(read_c3d)
    except ImportError:
        pass
    for reader in readers:
        path = fifo(f"in_{reader.__name__}.dat")
        with pytest.raises(ValueError, match="not a regular file \\(a FIFO\\)"):
            reader(path)


def test_read_bytes_refuses_special_files_and_stops_at_the_limit(tmp_path):
    with pytest.raises(_files.InputFileError, match="not a regular file"):
        _files.read_bytes("/dev/zero", "motion file")
    with pytest.raises(_files.InputFileError, match="is a directory, not a model file"):
        _files.read_bytes(tmp_path, "model file")
    f = tmp_path / "f.txt"
    f.write_bytes(b"abc")
    assert _files.read_bytes(f, "x") == b"abc"
    assert _files.read_bytes(f, "x", first=2) == b"ab"
    with pytest.raises(_files.InputFileError, match=r"too large for an input \(3 bytes; the limit is 2 bytes\)"):
        _files.read_bytes(f, "input", limit=2)
    assert _files.MAX_INPUT_BYTES >= 100 * 2**20  # motion files of long captures fit


def test_the_package_reads_input_files_only_through_read_bytes():
    """No other reader of input bytes in jaxbio/ (the single checked home of class 1)."""
    import re

    pattern = re.compile(r"\bopen\([^)]*\"r|\.read_bytes\(\)|\.read_text\(|np\.loadtxt|np\.genfromtxt|ET\.parse\(")
    offenders = []
    for path in (REPO / "jaxbio").rglob("*.py"):
        for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{k}: {line.strip()}")
    allowed = (
        "jaxbio/plot.py:",  # reads back its own temporary animation
        "jaxbio/models/_build.py:",  # the model builder compares its own shipped files
        "jaxbio/muscles/sets.py:",  # package data (importlib.resources)
        "jaxbio/_aot.py:",  # jaxbio's own source (its fingerprint) and the programs it kept
        "jaxbio/sprint/_reference.py:",
    )  # package data: the shipped reference fits
    offenders = [
        o for o in offenders if not o.startswith(allowed) and "text=f.read_bytes()" not in o
    ]  # an embedded race (importlib.resources)
    assert not offenders, offenders


# --- 2. inclusive edges of documented limits --------------------------------------------------


@pytest.mark.parametrize("cutoff", ["60", "59.99", "58", "54.1", "120", "1e300"])
def test_lowpass_at_or_near_nyquist_is_refused(cutoff, capsys):
    """arm26's motion is sampled at 120 Hz (Δt printed as 0.00833333): 60 Hz was accepted and
    58 Hz gave accelerations of thousands of rad/s²."""
    _one_line_exit_2(
        ["id", "--model", OSIM, "--motion", MOTION, "--lowpass", cutoff],
        capsys,
        "Nyquist frequency of the samples, 60 Hz",
        "at most 0.9 × Nyquist = 54 Hz",
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["id", "--lowpass", "0"], "argument --lowpass: must be a finite number > 0"),
        (["id", "--lowpass", "-0"], "argument --lowpass: must be a finite number > 0"),
        (["id", "--lowpass", "nan"], "argument --lowpass: must be a finite number > 0"),
        (["static-optimization", "--model", "m", "--motion", "m", "--lowpass", "0"], "argument --lowpass"),
        (
            ["static-optimization", "--model", "m", "--motion", "m", "--activation-exponent", "1.9999999"],
            "argument --activation-exponent: must be a finite number ≥ 2",
        ),
        (["animate", "--model", "m", "--motion", "m", "--output", "a.gif", "--fps", "0"], "argument --fps"),
        (["id", "--frames", "100001"], "argument --frames: must be an integer from 1 to 100000"),
        (["id", "--duration", "0"], "argument --duration: must be a finite number > 0"),
        (["id", "--columns", "0"], "argument --columns: must be an integer ≥ 1"),
    ],
)
def test_options_refuse_their_exclusive_edges(argv, message, capsys):
    _one_line_exit_2(argv, capsys, message)


@settings(max_examples=40, deadline=None)
@given(dt=st.floats(1e-4, 1.0), fraction=st.floats(0.9 * (1 + 1e-12), 1e6))  # above, beyond rounding
def test_lowpass_iir_refuses_every_cutoff_above_the_bound(dt, fraction):
    from jaxbio.tools import lowpass_iir

    with pytest.raises(ValueError, match="Nyquist"):
        lowpass_iir(np.zeros(8), dt, fraction * 0.5 / dt)


@settings(max_examples=20, deadline=None)
@given(dt=st.floats(1e-4, 1.0), fraction=st.floats(1e-3, 0.9))
def test_lowpass_iir_accepts_cutoffs_up_to_the_inclusive_bound(dt, fraction):
    from jaxbio.tools import lowpass_iir

    t = np.arange(64) * dt
    x = np.sin(2 * np.pi * 0.01 / dt * t)  # a slow sine: the filter keeps it
    y = lowpass_iir(x, dt, fraction * 0.5 / dt)
    assert np.all(np.isfinite(y))


@settings(max_examples=5, deadline=None)  # the samples' Nyquist frequency: 60.000024 Hz (Δt = 0.00833333 s)
@given(fraction=st.floats(0.9 * (1 + 1e-6), 2.0))
def test_process_coordinates_refuses_cutoffs_near_nyquist(fraction):
    from jaxbio.tools import process_coordinates
    from jaxbio.io import read_storage

    table = read_storage(MOTION).select(["r_shoulder_elev", "r_elbow_flex"])
    with pytest.raises(ValueError, match=r"lowpass_hz = .* Nyquist frequency of the samples, 60 Hz"):
        process_coordinates(table, lowpass_hz=fraction * 60.0, rotational=True)


def test_the_cutoff_bound_is_inclusive_and_sane():
    from jaxbio.tools import process_coordinates
    from jaxbio.io import read_storage

    table = read_storage(MOTION).select(["r_shoulder_elev", "r_elbow_flex"])
    raw = process_coordinates(table, rotational=True)
    edge = process_coordinates(table, lowpass_hz=0.9 * 60.0, rotational=True)  # 54 Hz: accepted
    assert np.abs(edge.qdd).max() < 2 * np.abs(raw.qdd).max()  # no ringing (58 Hz gave 2618 rad/s²)


@pytest.mark.parametrize("cutoff", ["0", "nan", "inf"])
def test_run_tool_refuses_a_meaningless_setup_cutoff(cutoff, tmp_path, capsys):
    setup = tmp_path / "setup.xml"
    setup.write_text(
        f"<OpenSimDocument><InverseDynamicsTool name='t'><model_file>{OSIM}</model_file>"
        f"<coordinates_file>{MOTION}</coordinates_file><results_directory>res</results_directory>"
        f"<lowpass_cutoff_frequency_for_coordinates>{cutoff}</lowpass_cutoff_frequency_for_coordinates>"
        "</InverseDynamicsTool></OpenSimDocument>"
    )
    _one_line_exit_2(["run-tool", setup], capsys, str(setup), "<lowpass_cutoff_frequency_for_coordinates> must be")
    assert not (tmp_path / "res").exists()


# --- 3. outputs checked by creating a file, also as root -------------------------------------


def _unwritable_directory():
    """A directory where no file can be created even by root (``/sys``, a read-only pseudo file
    system), or None."""
    for d in ("/sys", "/proc"):
        if os.path.isdir(d):
            try:
                fd = os.open(os.path.join(d, ".jaxbio_probe"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError:
                return d
            os.close(fd)
            os.unlink(os.path.join(d, ".jaxbio_probe"))
    return None


@pytest.mark.parametrize(
    "argv_of",
    [
        lambda out: ["sprint", "--json", out],
        lambda out: ["sprint", "--plot", out.replace(".json", ".png")],
        lambda out: ["id", "--model", OSIM, "--motion", MOTION, "--output", out.replace(".json", ".sto")],
        lambda out: [
            "static-optimization",
            "--model",
            OSIM,
            "--motion",
            MOTION,
            "--output-forces",
            out.replace(".json", ".sto"),
        ],
        lambda out: ["animate", "--model", "arm26", "--motion", MOTION, "--output", out.replace(".json", ".gif")],
    ],
)
def test_an_output_in_a_read_only_file_system_is_refused_before_any_work(argv_of, capsys):
    d = _unwritable_directory()
    if d is None:
        pytest.skip("no read-only pseudo file system here")
    argv = argv_of(os.path.join(d, "out.json"))
    err = _one_line_exit_2(argv, capsys, f"cannot create files in directory {d}")
    assert argv[argv.index(next(a for a in argv if str(a).startswith(d))) - 1] in err  # the option


def test_the_probe_is_a_created_file_not_permission_bits(tmp_path, monkeypatch):
    """Root passes os.access; a read-only mount only fails on creation: simulated by os.open."""
    real_open = os.open

    def read_only_mount(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.path.dirname(os.fspath(path)) == str(tmp_path):
            raise OSError(errno.EROFS, "Read-only file system", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_mount)
    with pytest.raises(
        ValueError,
        match=rf"^--json {tmp_path}/r.json: cannot create files in directory "
        rf"{tmp_path} \(Read-only file system\)$",
    ):
        _files.check_outputs([("--json", str(tmp_path / "r.json"))])
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_names_the_option_and_leaves_nothing(tmp_path):
    (out,) = _files.check_outputs([("--output", str(tmp_path / "a.sto"))])
    assert list(tmp_path.iterdir()) == []  # the probe is gone

    def full_disk(f):
        f.write(b"abc")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ValueError, match=rf"^--output {tmp_path}/a.sto: cannot write the file \(No space left"):
        _files.write_outputs([(out, full_disk)])
    assert list(tmp_path.iterdir()) == []


@needs_fifo
@pytest.mark.parametrize("motion", ["empty", "fifo", "missing"])
def test_a_failed_run_tool_leaves_no_results_directory(motion, tmp_path, fifo, capsys):
    bad = {"empty": tmp_path / "empty.mot", "fifo": None, "missing": tmp_path / "missing.mot"}[motion]
    if motion == "empty":
        bad.write_text("")
    if motion == "fifo":
        bad = fifo("m.mot")
    kept = tmp_path / "kept"
    kept.mkdir()
    for results in ("a/b/c", "kept/new", "kept"):
        setup = tmp_path / "setup.xml"
        setup.write_text(
            f"<OpenSimDocument><InverseDynamicsTool name='t'><model_file>{OSIM}</model_file>"
            f"<coordinates_file>{bad}</coordinates_file><results_directory>{results}"
            "</results_directory><forces_to_exclude>all</forces_to_exclude>"
            "</InverseDynamicsTool></OpenSimDocument>"
        )
        _one_line_exit_2(["run-tool", setup], capsys, str(bad))
        assert not (tmp_path / "a").exists() and not (kept / "new").exists() and kept.is_dir()
        assert list(kept.iterdir()) == []


# --- 4. messages: bad values echoed short, the real reason ------------------------------------

MOT_HEAD = "cut\nversion=1\nnRows=1\nnColumns=2\ninDegrees=yes\nendheader\ntime\tr_elbow_flex\n"


def test_echo_cuts_long_values():
    from jaxbio._validate import ECHO_CHARS, echo

    assert echo("1.5") == "'1.5'"
    long = echo("x" * 10**6)
    assert len(long) < ECHO_CHARS + 30 and long.endswith("…' (1000000 characters)")


@settings(max_examples=15, deadline=None)
@given(
    cell=st.text(alphabet="0123456789.,;eE+-x ", min_size=150, max_size=20_000).filter(
        lambda c: c.strip() and "," not in c.strip()[:1]
    ),
    where=st.sampled_from(["split cell", "split header", "motion cell", "motion label", "option"]),
)
def test_an_over_long_bad_value_is_echoed_short(cell, where):
    import tempfile

    from jaxbio.cli._common import MAX_MESSAGE

    cell = cell.strip().replace(" ", "0") + "x"  # never a number
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("f.csv" if where.startswith("split") else "f.mot")
        text = {
            "split cell": f"# reaction_time_s: 0.15\ndistance_m,time_s\n10,{cell}\n",
            "split header": f"# reaction_time_s: {cell}\ndistance_m,time_s\n10,1.9\n",
            "motion cell": MOT_HEAD + f"0\t{cell}\n",
            "motion label": MOT_HEAD.replace("r_elbow_flex", cell.replace(",", "_").replace(";", "_")) + "0\t1\n",
            "option": "",
        }[where]
        path.write_text(text)
        argv = {
            "split": ["sprint", "--csv", path],
            "motion": ["id", "--model", OSIM, "--motion", path],
            "option": ["id", "--lowpass", cell],
        }[where.split()[0]]
        import io
        from contextlib import redirect_stderr, redirect_stdout

        err, out = io.StringIO(), io.StringIO()
        with redirect_stderr(err), redirect_stdout(out):
            code = main([str(a) for a in argv])
    err = err.getvalue()
    assert code == 2 and err.count("\n") == 1 and out.getvalue() == "", err[:3000]
    assert len(err) <= MAX_MESSAGE + 1, len(err)
    value = cell.replace(",", "_").replace(";", "_") if where == "motion label" else cell
    assert value[:120] not in err, err  # at most ~100 characters of the value


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["id", "--model", OSIM], "an OpenSim .osim model needs --motion"),
        (["id", "--model", "missing.osim"], "an OpenSim .osim model needs --motion"),
    ],
)
def test_an_osim_model_without_motion_says_so(argv, needle, capsys):
    err = _one_line_exit_2(argv, capsys, needle)
    assert "JSON" not in err


def test_an_xml_file_as_a_json_model_says_it_is_xml(tmp_path, capsys):
    model = tmp_path / "arm26.json"
    shutil.copy(OSIM, model)
    err = _one_line_exit_2(["id", "--model", model], capsys, "is an XML document (an OpenSim .osim model?)")
    assert "not valid JSON" not in err


ENCODINGS = {
    "utf-16-le": "UTF-16 (little-endian, without",
    "utf-16-be": "UTF-16 (big-endian, without",
    "utf-32-le": "UTF-32 (little-endian, without",
    "utf-32-be": "UTF-32 (big-endian, without",
    "utf-32": "UTF-32 (little-endian, with a",
    "utf-16": "UTF-16 (little-endian, with a",
}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("kind", ["motion", "osim", "split", "json", "setup"])
def test_utf16_and_utf32_files_are_named_by_their_encoding(kind, encoding, tmp_path, capsys):
    if kind == "split" and encoding == "utf-16":
        pytest.skip("split files may be UTF-16 with a byte-order mark")
    source = {
        "motion": MOTION,
        "osim": OSIM,
        "json": REPO / "jaxbio" / "models" / "arm7.json",
        "setup": ARM26 / "arm26_Setup_InverseDynamics.xml",
    }.get(kind)
    text = SPLITS if source is None else source.read_text(encoding="utf-8")
    path = tmp_path / f"f.{ {'motion': 'mot', 'osim': 'osim', 'split': 'csv', 'json': 'json', 'setup': 'xml'}[kind] }"
    path.write_bytes(text.encode(encoding))
    argv = {
        "motion": ["id", "--model", OSIM, "--motion", path],
        "osim": ["id", "--model", path, "--motion", MOTION],
        "split": ["sprint", "--csv", path],
        "json": ["id", "--model", path],
        "setup": ["run-tool", path],
    }[kind]
    err = _one_line_exit_2(argv, capsys, str(path), f"the file is {ENCODINGS[encoding]}", "save it as UTF-8")
    assert "column line" not in err and "binary" not in err


def test_text_encoding_leaves_utf8_and_binary_alone():
    from jaxbio._files import text_encoding

    assert text_encoding(MOTION.read_bytes()) is None
    assert text_encoding("héllo wörld\n".encode()) is None
    assert text_encoding(np.random.default_rng(0).bytes(4096)) is None
    assert text_encoding(np.linspace(0, 1, 512).tobytes()) is None  # floats: zeros, but not in the pattern


def test_a_long_column_list_is_cut(tmp_path, capsys):
    path = tmp_path / "many.mot"
    labels = [f"c{i}_{'x' * 200}" for i in range(500)]
    path.write_text(
        MOT_HEAD.replace("nColumns=2", "nColumns=501").replace("r_elbow_flex", "\t".join(labels))
        + "0\t"
        + "\t".join("1" for _ in labels)
        + "\n"
    )
    err = _one_line_exit_2(
        ["id", "--model", OSIM, "--motion", path], capsys, "none of the model's coordinates", "(500 in all)"
    )
    assert len(err) < 1200


@needs_fifo
def test_an_output_fifo_without_a_reader_fails_instead_of_hanging(tmp_path, monkeypatch):
    fifo_path = tmp_path / "out.json"
    os.mkfifo(fifo_path)
    monkeypatch.setattr(_files, "FIFO_WAIT_S", 0.2)
    (out,) = _files.check_outputs([("--json", str(fifo_path))])
    assert out.special
    done = threading.Event()

    def rescue():  # a writer that blocks (a regression) is released after 5 s, and the test fails
        if not done.wait(5):
            fd = os.open(fifo_path, os.O_RDONLY | os.O_NONBLOCK)
            time.sleep(1)
            os.close(fd)

    threading.Thread(target=rescue, daemon=True).start()
    try:
        with pytest.raises(
            ValueError,
            match=rf"^--json {fifo_path}: cannot write the file \(a FIFO that no process "
            "reads",
        ):
            _files.write_outputs([(out, lambda f: f.write(b"{}"))])
    finally:
        done.set()


@needs_fifo
def test_an_output_fifo_with_a_reader_is_written(tmp_path):
    fifo_path = tmp_path / "out.json"
    os.mkfifo(fifo_path)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo_path, "rb").read()), daemon=True)
    reader.start()
    (out,) = _files.check_outputs([("--json", str(fifo_path))])
    _files.write_outputs([(out, lambda f: f.write(b"{}"))])
    reader.join(10)
    assert got == [b"{}"]
