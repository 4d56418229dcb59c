"""`jb.batch` (jaxbio/batching.py): the batch split over devices equals ``jax.jit(jax.vmap)`` on one.

The device count is fixed when jax starts, so the multi-device checks run tests/_batch_check.py in
a fresh interpreter with ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (each case
computes the same batch both ways, float64). The two-process checks start
examples/distributed.py's workers on localhost (`jax.distributed`, gloo CPU collectives) and
compare with `jax.jit(jax.vmap)` computed here. In this process (one CPU device) `jb.batch` falls
back to ``jit(vmap)``; the bad-input checks run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from tests._models import REPO

TIMEOUT_S = 600  # never hang CI (the default cases take ~20–60 s on a loaded 2-core machine)


def _env(devices: int) -> dict:
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "").replace("--xla_force_host_platform_device_count", "--ignored_count")
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _run_cases(*cases: str, devices: int = 4) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests._batch_check", *cases],
        cwd=REPO,
        env=_env(devices),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["devices"] == devices
    return out


def _assert_close(result: dict, rtol: float = 1e-12):
    for name, r in result.items():
        assert isinstance(r, dict), name
        assert r["leaves"] > 0, name
        assert r["max_abs_diff"] <= rtol * max(r["scale"], 1.0), (name, r)


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_four_devices_inverse_dynamics_and_simulation():
    """arm7 inverse dynamics over 1001 frames (padded to 1004), 8 frames in chunks of one, 3 < 4
    frames along axis 1, its gradient (mapped q and a broadcast mass scale), and a slider's fixed-grid
    simulation over initial states and over parameters: the same numbers as one device."""
    out = _run_cases("inverse_dynamics", "inverse_dynamics_grad", "simulate")
    for case in ("inverse_dynamics", "inverse_dynamics_grad", "simulate"):
        _assert_close(out[case])


@pytest.mark.slow
def test_four_devices_adaptive_simulation_sprint_and_static_optimization():
    """Adaptive Diffrax solves with on-device error checks, a gradient through fixed-grid ones, a sprint fit of
    three races (`fit_splits(devices=)`), static optimisation of arm26 frames (per frame, and the
    vectorized `static_optimization_motion`)."""
    out = _run_cases("simulate_adaptive", "sprint_fit", "static_optimization")
    _assert_close(out["simulate_adaptive"], rtol=1e-10)
    _assert_close(out["sprint_fit"], rtol=1e-8)  # a Levenberg–Marquardt solve: round-off steers the last step
    _assert_close(out["static_optimization"], rtol=1e-8)


# --- one device (this process): the fallback is jit(vmap) --------------------------------------


TREE = jb.load_model("arm7", dtype=jnp.float64).tree


def _states(batch, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.uniform(-1, 1, (batch, TREE.nv)) for _ in range(3))


def test_one_device_equals_jit_vmap_with_pytrees_and_static_leaves():
    """Pytree in (a dict of states, the tree broadcast, a Python string static) and out (a dict,
    a string passed through)."""
    q, qd, qdd = _states(5)

    def fn(tree, state, label):
        tau = jb.inverse_dynamics(tree, state["q"], state["qd"], state["qdd"])
        return {"tau": tau, "norm": jnp.linalg.norm(tau), "label": label}

    got = jb.batch(fn, in_axes=(None, 0, None))(TREE, {"q": q, "qd": qd, "qdd": qdd}, "arm")
    ref = jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0))(TREE, q, qd, qdd)
    assert got["label"] == "arm"
    np.testing.assert_allclose(got["tau"], ref, rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(got["norm"], np.linalg.norm(ref, axis=1), rtol=1e-13)
    chunked = jb.batch(fn, in_axes=(None, {"q": 0, "qd": 0, "qdd": 0}, None), chunk_size=2)(
        TREE, {"q": q, "qd": qd, "qdd": qdd}, "arm"
    )
    np.testing.assert_allclose(chunked["tau"], ref, rtol=1e-13, atol=1e-12)
    per = jax.vmap(jb.inverse_dynamics, in_axes=(None, 1, 1, 1))  # frames along axis 1, in chunks of 2
    vectorized = jb.batch(per, in_axes=(None, 1, 1, 1), chunk_size=2, vectorized=True)
    np.testing.assert_allclose(vectorized(TREE, q.T, qd.T, qdd.T), ref, rtol=1e-13, atol=1e-12)
    explicit = jb.batch(jb.inverse_dynamics, in_axes=(None, 0, 0, 0), devices=jax.devices()[:1])
    np.testing.assert_allclose(explicit(TREE, q, qd, qdd), ref, rtol=1e-13, atol=1e-12)
    inside = jax.jit(lambda q: explicit(TREE, q, qd, qdd))  # called while tracing
    np.testing.assert_allclose(inside(q), ref, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize(
    "in_axes, args, match",
    [
        ("rows", None, "in_axes must be an int, None or a tuple"),
        ((None, 0, 0, 1.5), None, r"in_axes\[3\] holds 1.5"),
        ((None, 0, 0), None, "in_axes has 3 entries but the function got 4"),
        ((0, 0, 0, 0), None, "maps a leaf of argument 0 that is not an array|different batch sizes"),
        ((None, 2, 0, 0), None, "in_axes 2 is out of range"),
        (None, None, "maps no argument"),
        ((None, 0, 0, 0), "sizes", "different batch sizes"),
    ],
)
def test_bad_in_axes(in_axes, args, match):
    q, qd, qdd = _states(4)
    if args == "sizes":
        qdd = qdd[:3]
    with pytest.raises(ValueError, match=match):
        jb.batch(jb.inverse_dynamics, in_axes=in_axes)(TREE, q, qd, qdd)


def test_bad_options():
    with pytest.raises(ValueError, match=r"chunk_size must be a \(static\) int ≥ 1"):
        jb.batch(jb.inverse_dynamics, chunk_size=0)
    with pytest.raises(ValueError, match="devices must be a non-empty sequence"):
        jb.batch(jb.inverse_dynamics, devices=[])
    with pytest.raises(ValueError, match="pass arguments positionally"):
        jb.batch(jb.inverse_dynamics, in_axes=(None, 0, 0, 0))(TREE, *_states(2), external=None)


def test_lazy_export():
    from jaxbio.batching import batch

    assert jb.batch is batch and "batch" in dir(jb)


# --- two processes (jax.distributed on localhost, gloo CPU collectives) ----------------------------


def _example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("distributed_example", REPO / "examples" / "distributed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
    """examples/distributed.py starts two processes with two CPU devices each (4 devices in all,
    1001 frames padded to 1004): the gathered inverse dynamics and simulations equal
    ``jit(vmap)`` in this process."""
    example = _example()
    path = tmp_path / "out.npz"
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "distributed.py"), "--local-devices", "2", "--save", str(path)],
        cwd=tmp_path,
        env=_env(1),
        capture_output=True,
        text=True,
        timeout=example.WORKER_TIMEOUT_S + 60,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    saved = np.load(path)
    assert int(saved["processes"]) == 2 and int(saved["devices"]) == 4
    tree, (q, qd, qdd), simulate, q0 = example.problems()
    for name, x in (("q", q), ("qd", qd), ("qdd", qdd), ("q0", q0)):
        np.testing.assert_array_equal(saved[name], x)
    tau = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(tree, q, qd, qdd)
    np.testing.assert_allclose(saved["tau"], tau, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(saved["qs"], jax.jit(jax.vmap(simulate))(q0), rtol=1e-12, atol=1e-12)
