"""Tests run in float64 (validation precision); float32 tests cast explicitly.

Each XLA CPU executable holds its code in many memory mappings (one wrapped-muscle moment-arm
program: ≈2,250), and jax keeps every compiled executable alive. A long-lived pytest-xdist worker
that compiles the slow tests' large programs reached Linux's ``vm.max_map_count`` (65,530): the
next compile failed, and the C++ exception that reports it crashed the worker (SIGSEGV/SIGABRT in
``backend_compile_and_load``). So the compile caches are dropped after any test that leaves more
than ``_MAX_MAPS`` mappings (the default run never gets there; the slow one does).
"""

import gc

import jax
import pytest

jax.config.update("jax_enable_x64", True)

_MAX_MAPS = 15_000


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
