"""numpy or jax.numpy by the arguments: model building outside jit in numpy (no XLA compilation
while a model file is read), the same code on JAX arrays and tracers (a model built inside
`jax.jit`, `jax.vmap` over parameters, `jax.grad` with respect to them). Imports nothing of
jaxbio."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def namespace(*args):
    """`jax.numpy` when any leaf of ``args`` is a JAX array or a tracer, else `numpy`."""
    return jnp if any(isinstance(x, (jax.Array, jax.core.Tracer)) for x in jax.tree_util.tree_leaves(args)) else np


class _Dispatch:
    """``xnp.f(*args, **kwargs)`` is ``numpy.f`` or ``jax.numpy.f`` by `namespace` of the
    arguments."""

    def __getattr__(self, name):
        def call(*args, **kwargs):
            return getattr(namespace(args, kwargs), name)(*args, **kwargs)

        call.__name__ = name
        return call


xnp = _Dispatch()
