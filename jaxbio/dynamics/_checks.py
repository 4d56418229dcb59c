"""Shape checks before tracing, and opt-in finite checks inside jit."""

from __future__ import annotations

import functools

import jax

from jaxbio._validate import as_shape, finite
from jaxbio.tree import SegmentTree

#: Decorator for the public dynamics functions: compiled on first call (so eager use is fast),
#: inlined when called inside a user's own jit; ``check`` is a static flag.
public = functools.partial(jax.jit, static_argnames=("check",))


def as_state(tree: SegmentTree, x, name: str, check: bool, shape: tuple[int, ...] | None = None):
    """``x`` as an array of shape ``(tree.nq,)`` (or ``shape``); ValueError at trace time otherwise."""
    tree.check_unbatched()  # a stacked tree outside vmap would broadcast into one plausible answer
    want = (tree.nq,) if shape is None else shape
    x = as_shape(x, want, name, f" for model {tree.name!r} ({tree.nq} coordinates: "
                 f"{', '.join(tree.names)}); batch with jax.vmap")
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
