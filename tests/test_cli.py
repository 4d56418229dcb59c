"""`jaxbio id`: the printed joint torques against the closed-form double pendulum (Lagrange's
equations written out here), and bad input (one line on stderr, exit 2)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import jaxbio as jb
from jaxbio.cli import main
from tests._models import REPO


def _double_pendulum_torques(tree, q, qd, qdd):
    """τ = M q̈ + C + G of two hinged bodies in the plane (relative angles, hanging at q = 0),
    COM distances r_i and inertias about z from the model file."""
    m1, m2 = np.asarray(tree.masses)
    r1, r2 = (float(np.linalg.norm(c)) for c in np.asarray(tree.coms))
    i1, i2 = np.asarray(tree.inertias)[:, 2, 2]
    l1 = float(np.linalg.norm(np.asarray(tree.origins)[1]))
    g = -float(np.asarray(tree.gravity)[1])
    q1, q2 = q
    c2 = np.cos(q2)
    M = np.array(
        [
            [i1 + i2 + m1 * r1**2 + m2 * (l1**2 + r2**2 + 2 * l1 * r2 * c2), i2 + m2 * (r2**2 + l1 * r2 * c2)],
            [i2 + m2 * (r2**2 + l1 * r2 * c2), i2 + m2 * r2**2],
        ]
    )
    h = m2 * l1 * r2 * np.sin(q2)
    C = np.array([-h * (2 * qd[0] * qd[1] + qd[1] ** 2), h * qd[0] ** 2])
    G = g * np.array([(m1 * r1 + m2 * l1) * np.sin(q1) + m2 * r2 * np.sin(q1 + q2), m2 * r2 * np.sin(q1 + q2)])
    return M @ qdd + C + G


def test_id_prints_the_closed_form_double_pendulum(capsys):
    assert main(["id", "--model", "double_pendulum", "--frames", "5", "--duration", "2", "--amplitude", "0.7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Inverse dynamics of 'double_pendulum' (2 DOF")
    rows = np.array([[float(x) for x in line.split()] for line in out[4:]])
    assert rows.shape == (5, 3)
    tree = jb.load_model("double_pendulum").tree
    freq = 0.5 + 0.25 * np.arange(2)
    for t, *tau in rows:
        w = 2 * np.pi * freq
        q, qd, qdd = 0.7 * np.sin(w * t), 0.7 * w * np.cos(w * t), -0.7 * w**2 * np.sin(w * t)
        np.testing.assert_allclose(tau, _double_pendulum_torques(tree, q, qd, qdd), atol=6e-4)  # printed to 3 decimals


@pytest.mark.parametrize(
    "argv, message",
    [
        (["id", "--model", "nope"], "jaxbio: error: no shipped model 'nope'"),
        (["id", "--model", ""], "jaxbio: error: --model is empty"),
        (["id", "--frames", "0"], "argument --frames: must be an integer from 1 to 100000, got '0'"),
        (["id", "--frames", "-1"], "argument --frames: must be an integer from 1 to 100000"),
        (["id", "--frames", "1000000000000"], "argument --frames: must be an integer from 1 to 100000"),
        (["id", "--frames", "2.5"], "argument --frames: must be an integer"),
        (["id", "--duration", "-1"], "argument --duration: must be a finite number > 0 (s), got '-1'"),
        (["id", "--duration", "0"], "argument --duration: must be a finite number > 0"),
        (["id", "--duration", "nan"], "argument --duration: must be a finite number > 0 (s), got 'nan'"),
        (["id", "--duration", "inf"], "argument --duration: must be a finite number > 0"),
        (["id", "--duration", "1e309"], "argument --duration: must be a finite number > 0"),
        (["id", "--amplitude", "nan"], "argument --amplitude: must be a finite number (rad), got 'nan'"),
        (["id", "--amplitude=-inf"], "argument --amplitude: must be a finite number"),
        (["id", "--amplitude", "-inf"], "argument --amplitude: expected one argument"),  # argparse: an option
        (["id", "--amplitude", "abc"], "argument --amplitude: must be a finite number"),
        (["id", "--columns", "0"], "argument --columns: must be an integer ≥ 1, got '0'"),
        (["id", "--columns", "-1"], "argument --columns: must be an integer ≥ 1"),
        (["id", "--nope"], "unrecognized arguments: --nope"),
        (["nope"], "invalid choice: 'nope'"),
        (["id", "--model", "double_pendulum", "--amplitude", "1e300"], "overflow float64 for --amplitude 1e+300"),
        (
            ["id", "--model", "double_pendulum", "--duration", "1e308"],
            "overflow float64 for --amplitude 0.5 and --duration 1e+308",
        ),
    ],
)
def test_id_bad_input_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1, captured.err
    assert captured.out == ""


def _files(tmp_path):
    d = tmp_path / "a_directory"
    d.mkdir()
    model = json.dumps(jb.load_model("double_pendulum").tree.to_dict())
    files = {
        "directory": (d, "is a directory, not a model file"),
        "missing": (tmp_path / "absent.json", "no such model file"),
        "non-UTF-8": (tmp_path / "latin1.json", "not UTF-8 text (byte 0xe9"),
        "invalid JSON": (tmp_path / "broken.json", "not valid JSON (line 2"),
        "empty": (tmp_path / "empty.json", "empty file"),
        "duplicate key": (tmp_path / "dup.json", "duplicate key 'name'"),
        "NaN literal": (tmp_path / "nan.json", "mass: contains NaN or inf"),
        "top-level array": (tmp_path / "array.json", "expected a JSON object"),
        "misspelt field": (tmp_path / "orgin.json", "unknown field 'joint.orgin' (did you mean 'joint.origin'?)"),
    }
    files["non-UTF-8"][0].write_bytes(b'{"name": "caf\xe9"}')
    files["invalid JSON"][0].write_text("{\n  oops\n}")
    files["empty"][0].write_text("")
    files["duplicate key"][0].write_text('{"name": "a", "name": "b"}')
    files["NaN literal"][0].write_text(model.replace('"mass": 1.0', '"mass": NaN', 1))
    files["top-level array"][0].write_text(f"[{model}]")
    files["misspelt field"][0].write_text(model.replace('"origin"', '"orgin"', 1))
    return files


CASES = (
    "directory",
    "missing",
    "non-UTF-8",
    "invalid JSON",
    "empty",
    "duplicate key",
    "NaN literal",
    "top-level array",
    "misspelt field",
)


@pytest.mark.parametrize("case", CASES)
def test_id_bad_model_file_names_the_path(case, tmp_path, capsys):
    path, problem = _files(tmp_path)[case]
    assert main(["id", "--model", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"jaxbio: error: {path}: "), captured.err
    assert problem in captured.err and captured.err.count("\n") == 1, captured.err
    assert captured.out == ""


def test_help_exits_0(capsys):
    assert main(["id", "--help"]) == 0
    assert "--duration" in capsys.readouterr().out


# ---- a closed stdout (``jaxbio … | head -1``) ends the command quietly ------------------------


class _ClosedPipe:
    """A stdout whose reader went away after ``lines`` lines."""

    def __init__(self, lines=1):
        self.lines, self.text = lines, ""

    def write(self, text):
        if self.text.count("\n") >= self.lines:
            raise BrokenPipeError(32, "Broken pipe")
        self.text += text
        return len(text)

    def flush(self):
        if self.text.count("\n") > self.lines:
            raise BrokenPipeError(32, "Broken pipe")


def test_broken_pipe_in_process(monkeypatch, capsys):
    pipe = _ClosedPipe(1)
    monkeypatch.setattr(sys, "stdout", pipe)
    assert main(["id", "--model", "double_pendulum", "--frames", "50"]) == 141
    assert sys.stdout is pipe  # restored
    assert pipe.text.startswith("Inverse dynamics of 'double_pendulum'")
    assert capsys.readouterr().err == ""


def test_broken_pipe_inside_a_subcommand_that_catches_oserror(monkeypatch, capsys):
    """A subcommand's own ``except OSError`` does not turn the closed pipe into an error line."""
    from jaxbio.cli import _opensim as cli  # the inverse-dynamics command calls its cmd_id

    def noisy(args):
        try:
            for _ in range(100):
                print("line")
            return 0
        except (ValueError, OSError) as e:  # what jaxbio sprint does
            print(f"jaxbio sprint: error: {e}", file=sys.stderr)
            return 2

    monkeypatch.setattr(cli, "cmd_id", noisy)
    monkeypatch.setattr(sys, "stdout", _ClosedPipe(1))
    assert main(["id"]) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv", [["id", "--model", "double_pendulum", "--frames", "20000"], ["sprint", "--no-progress"]]
)
def test_broken_pipe_real_process(argv):
    """``jaxbio id | head -1`` and ``jaxbio sprint | head -1``: no traceback, no error line."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxbio.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # what head does after its line
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert first, err
    assert err == "", err
    assert code in (0, 141)  # 0 if everything fitted into the pipe before it closed


def test_every_command_uses_the_persistent_compilation_cache(tmp_path):
    """``JAXBIO_JAX_CACHE=DIR``: a model command (``jaxbio id``, the setup every OpenSim tool
    shares) writes its compiled programs there, so that the next cold run reads them instead of
    compiling; ``JAXBIO_JAX_CACHE=0`` writes nothing."""
    cache = tmp_path / "cache"
    argv = [sys.executable, "-m", "jaxbio.cli", "id", "--model", "double_pendulum", "--frames", "3"]
    for setting, written in ((str(cache), True), ("0", False)):
        env = dict(os.environ, PYTHONPATH=str(REPO), JAXBIO_JAX_CACHE=setting, HOME=str(tmp_path))
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        entries = list(cache.iterdir()) if cache.exists() else []
        assert bool(entries) == written, (setting, entries)
        if written:
            import shutil

            shutil.rmtree(cache)
    assert not (tmp_path / ".cache").exists()  # "0": not the default folder either
