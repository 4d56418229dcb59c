"""`python -m benchmarks`: the common row, the table, the suite selection, and one real suite end to end;
the machine line, and the slow run's deadline in `.ci/run`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _machine  # noqa: E402
import run  # noqa: E402


def test_row_ratio_and_throughput():
    r = _machine.row("inverse dynamics", "arm7", 1000, 2e-7, compile_s=1.5, peer="pin.rnea loop", peer_seconds=1e-6)
    assert r["ratio"] == pytest.approx(5.0)
    assert r["per_second"] == pytest.approx(5e6)
    assert _machine.row("x", "m", 1, 1e-3)["ratio"] is None


def test_machine_line_says_whether_pinned(monkeypatch):
    """The machine line tells an unpinned run from a pinned one (taskset) or a sized thread pool."""
    monkeypatch.delenv("PJRT_NPROC", raising=False)
    monkeypatch.delenv("NPROC", raising=False)
    monkeypatch.setattr(_machine.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(_machine.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert _machine.threads() == "unpinned"
    monkeypatch.setattr(_machine.os, "sched_getaffinity", lambda pid: {2}, raising=False)
    monkeypatch.setenv("PJRT_NPROC", "1")
    assert _machine.threads() == "pinned to 1 of 4 cores, PJRT_NPROC=1"
    assert "(pinned to 1 of 4 cores, PJRT_NPROC=1)" in _machine.machine()


def test_table_plain_and_markdown():
    rows = [
        _machine.row(
            "inverse dynamics", "arm7", 100_000, 2.04e-7, compile_s=3.2, peer="pin.rnea loop", peer_seconds=1e-6
        ),
        _machine.row("sprint fit", "synthetic races", 1000, 4e-3, unit="race"),
    ]
    plain = run.format_table(rows)
    assert "204 ns/state" in plain and "4.9×" in plain and "100,000" in plain and "4 ms/race" in plain
    md = run.format_table(rows, markdown=True).splitlines()
    assert md[0].startswith("| operation |") and len(md) == 4 and md[2].count("|") == len(run.COLUMNS) + 1


def test_unknown_suite_and_list(capsys):
    assert run.main(["--only", "nope"]) == 2
    assert "unknown suite" in capsys.readouterr().err
    assert run.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(s.name in listed for s in run.SUITES)
    assert all((ROOT / "benchmarks" / f"{s.name}.py").exists() for s in run.SUITES)


@pytest.mark.slow
def test_one_suite_end_to_end(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "planar_chain", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["suites"][0]["status"] == "ok" and result["rows"]
    assert all(r["seconds"] > 0 and r["ratio"] > 0 for r in result["rows"])
    assert "planar chain" in proc.stdout and "jaxbio / item" in proc.stdout


@pytest.mark.slow
def test_gpu_suite_on_the_cpu(tmp_path):
    """`benchmarks/gpu.py` (MJX as the peer) at tiny sizes on the CPU: every row has its peer, and in
    float64 MJX and jaxbio agree to round-off on the same states."""
    pytest.importorskip("mujoco.mjx")
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/gpu.py",
            "--quick",
            "--batch",
            "64",
            "--sim-batch",
            "8",
            "--scipy-trajectories",
            "1",
            "--models",
            "wholebody",
            "--sim-models",
            "",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert len(result["rows"]) == 5 and all(r["ratio"] > 0 for r in result["rows"])
    runs = {r["precision"]: r for r in result["inverse_dynamics_wholebody"]["runs"]}
    assert runs["float64"]["mjx_rel_error"] < 1e-12
    assert runs["float32, full-precision matmuls"]["jaxbio_rel_error"] < 1e-4


def test_precision_table():
    rows = [
        {
            "operation": "inverse dynamics",
            "model": "arm7",
            "batch": 1000,
            "abs_error": 7.3e-6,
            "rel_error": 5.8e-7,
            "unit": "N·m",
            "note": "",
        }
    ]
    text = run.format_precision(rows)
    assert "7.3e-06 N·m" in text and "5.8e-07" in text
    assert run.format_precision(rows, markdown=True).count("\n") == 2


@pytest.mark.parametrize(
    "deadline, expect", [("1", "1 skipped"), ("", "1 passed"), ("soon", "JAXBIO_TEST_DEADLINE must be")]
)
def test_ci_deadline_skips_tests_not_started(deadline, expect):
    """`.ci/run`'s slow run: past ``JAXBIO_TEST_DEADLINE`` a test is skipped, not started (tests/conftest.py)."""
    env = dict(os.environ, JAXBIO_TEST_DEADLINE=deadline)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            f"{Path(__file__)}::test_row_ratio_and_throughput",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert expect in r.stdout + r.stderr, r.stdout + r.stderr
    if deadline == "1":
        assert "time budget" in r.stdout
