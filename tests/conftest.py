"""Tests run in float64 (validation precision); float32 tests cast explicitly."""

import jax

jax.config.update("jax_enable_x64", True)
