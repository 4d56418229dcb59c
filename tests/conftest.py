"""Tests run in float64 (validation precision); float32 tests cast explicitly.

The main thread may grow its stack to 256 MiB (or the hard limit): XLA's CPU compiler recurses
deeply on the largest programs here (OpenSim wrap surfaces under jvp and vmap), and one such
compile crashed a pytest-xdist worker with a segmentation fault at the default 8 MiB (CI,
2026-11-25). Test harness only; the library changes no process setting.
"""

import resource

import jax

jax.config.update("jax_enable_x64", True)

_soft, _hard = resource.getrlimit(resource.RLIMIT_STACK)
_want = 256 * 2**20 if _hard == resource.RLIM_INFINITY else min(_hard, 256 * 2**20)
if _soft != resource.RLIM_INFINITY and _soft < _want:
    resource.setrlimit(resource.RLIMIT_STACK, (_want, _hard))
