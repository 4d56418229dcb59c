"""`jaxbio id`: the printed joint torques against the closed-form double pendulum (Lagrange's
equations written out here), and bad input (one line on stderr, exit 2)."""

import numpy as np
import pytest

import jaxbio as jb
from jaxbio.cli import main


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
    M = np.array([[i1 + i2 + m1 * r1**2 + m2 * (l1**2 + r2**2 + 2 * l1 * r2 * c2), i2 + m2 * (r2**2 + l1 * r2 * c2)],
                  [i2 + m2 * (r2**2 + l1 * r2 * c2), i2 + m2 * r2**2]])
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
    tree = jb.load_model("double_pendulum")
    freq = 0.5 + 0.25 * np.arange(2)
    for t, *tau in rows:
        w = 2 * np.pi * freq
        q, qd, qdd = 0.7 * np.sin(w * t), 0.7 * w * np.cos(w * t), -0.7 * w**2 * np.sin(w * t)
        np.testing.assert_allclose(tau, _double_pendulum_torques(tree, q, qd, qdd), atol=6e-4)  # printed to 3 decimals


@pytest.mark.parametrize("argv, message", [
    (["id", "--model", "nope"], "no shipped model 'nope'"),
    (["id", "--frames", "0"], "--frames must be ≥ 1"),
    (["id", "--duration", "-1"], "--duration > 0"),
])
def test_id_bad_input_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
