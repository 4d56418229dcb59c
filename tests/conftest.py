"""Tests run in float64 (validation precision); float32 tests cast explicitly.

Each XLA CPU executable holds its code in many memory mappings (one wrapped-muscle moment-arm
program: ≈2,250), and jax keeps every compiled executable alive. A long-lived pytest-xdist worker
that compiles the slow tests' large programs reached Linux's ``vm.max_map_count`` (65,530): the
next compile failed, and the C++ exception that reports it crashed the worker (SIGSEGV/SIGABRT in
``backend_compile_and_load``). So the compile caches are dropped after any test that leaves more
than ``_MAX_MAPS`` mappings (the default run never gets there; the slow one does).

``JAXBIO_TEST_DEADLINE`` (Unix time, seconds), where set: tests not started by then are skipped,
with that reason in the report. `.ci/run` sets it for the slow run, so that CI finishes within
its 90 minutes on a slower 2-core machine too (the default run is never cut).
"""

import gc
import os
import time

import jax
import pytest

jax.config.update("jax_enable_x64", True)
# the command line's persistent compilation cache (jaxbio.cli._common._setup_jax) is a process
# setting: off for the commands the tests run in-process and in subprocesses, unless asked for
os.environ.setdefault("JAXBIO_JAX_CACHE", "0")

_MAX_MAPS = 15_000


def _deadline() -> float | None:
    text = os.environ.get("JAXBIO_TEST_DEADLINE", "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise pytest.UsageError(f"JAXBIO_TEST_DEADLINE must be a Unix time in seconds, got {text!r}") from None


def pytest_configure(config):
    config._jaxbio_deadline = _deadline()


def pytest_runtest_setup(item):
    deadline = item.config._jaxbio_deadline
    if deadline is not None and time.time() > deadline:
        pytest.skip("not started: the run's time budget is spent (JAXBIO_TEST_DEADLINE)")


def _n_maps() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux: no limit to track
        return 0


@pytest.fixture(autouse=True)
def _release_compiled_programs_when_many():
    yield
    if _n_maps() > _MAX_MAPS:
        jax.clear_caches()
        gc.collect()
