"""Shape checks before tracing, and opt-in finite checks inside jit."""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp

from jaxbio.tree import SegmentTree

#: Decorator for the public dynamics functions: compiled on first call (so eager use is fast),
#: inlined when called inside a user's own jit; ``check`` is a static flag.
public = functools.partial(jax.jit, static_argnames=("check",))


def finite(x, name: str):
    """``x`` unchanged, raising at run time (also under jit) if it holds NaN or inf.

    Uses `equinox.error_if`; the returned array must be used for the check to stay in the graph.
    """
    return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), f"{name} contains NaN or inf")


def as_state(tree: SegmentTree, x, name: str, check: bool, shape: tuple[int, ...] | None = None):
    """``x`` as an array of shape ``(tree.nq,)`` (or ``shape``); ValueError at trace time otherwise."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    want = (tree.nq,) if shape is None else shape
    if x.shape != want:
        raise ValueError(
            f"{name} has shape {x.shape}, expected {want} for model {tree.name!r} "
            f"({tree.nq} coordinates: {', '.join(tree.names)}); batch with jax.vmap"
        )
    return finite(x, name) if check else x


def as_external(tree: SegmentTree, external, check: bool):
    """``external = (forces (n, 3), moments (n, 3))`` or None → the pair of arrays (or None)."""
    if external is None:
        return None
    if not isinstance(external, (tuple, list)) or len(external) != 2:
        raise ValueError("external must be a pair (forces (n, 3), moments (n, 3)) of world-frame arrays")
    forces, moments = external
    n = tree.nq
    forces = as_state(tree, forces, "external forces", check, (n, 3))
    moments = as_state(tree, moments, "external moments", check, (n, 3))
    return forces, moments
