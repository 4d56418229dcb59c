"""benchmarks/precision.py and benchmarks/memory.py: their row-producing functions run on tiny
batches and give finite numbers; float32 agrees with float64 to float32 round-off (the float64 run
is the reference); XLA's memory account of the checkpointed gradient grows with the trials. No
times or exact byte counts are asserted."""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _script(name):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def _pendulum_dict():
    """One rod of 1 kg, 1 m, hinged at the world origin (planar)."""
    return {
        "gravity": [0, -9.81, 0],
        "segments": [
            {
                "name": "rod",
                "parent": None,
                "joint": {"type": "revolute", "axis": [0, 0, 1]},
                "mass": 1.0,
                "com": [0, -0.5, 0],
                "inertia": [[0.1, 0, 0], [0, 0.01, 0], [0, 0, 0.1]],
            }
        ],
    }


@pytest.mark.slow
def test_precision_errors_and_dynamics_rows():
    precision = _script("precision")
    a, r = precision.errors(np.array([1.0, 2.5, -4.0], np.float32), np.array([1.0, 2.0, -4.0]))
    assert (a, r) == (0.5, 0.125)
    rows = precision.dynamics_rows("arm7", 4)
    assert {x["operation"] for x in rows} == {
        "inverse_dynamics",
        "mass_matrix",
        "segment_wrenches force",
        "segment_wrenches moment",
        "forward_dynamics",
    }
    for x in rows:
        assert set(x) == {"operation", "model", "batch", "abs_error", "rel_error", "unit", "note"}
        assert np.isfinite(x["abs_error"]) and np.isfinite(x["rel_error"])
        assert 0 < x["rel_error"] < 1e-3, x  # float32 round-off, not zero (the run really was float32)
        assert "float32 run returned" not in x["note"], x  # dtype followed the inputs


@pytest.mark.slow
def test_memory_account_and_real_run_on_a_small_model():
    memory = _script("memory")
    kw = dict(duration=0.2, steps=4)
    rows = [memory.compiled_bytes(_pendulum_dict(), "float64", "steps+checkpoint", n, **kw) for n in (2, 8)]
    assert all(r["bytes"] > 0 for r in rows) and rows[1]["bytes"] > rows[0]["bytes"]
    a, b = memory.fit_per_trial([2, 8], [r["bytes"] for r in rows])
    assert b > 0 and np.isfinite(a)
    np.testing.assert_allclose(memory.fit_per_trial([1, 2, 3], [10, 12, 14]), (8.0, 2.0))
    run = memory.run_gradient(_pendulum_dict(), "float32", "steps+checkpoint", 3, **kw)
    assert run["finite"] and run["grad_norm"] > 0 and run["peak_rss_bytes"] > 0
    with pytest.raises(ValueError, match="mode must be one of"):
        memory.gradient_function(_pendulum_dict(), "float64", "backsolve")
