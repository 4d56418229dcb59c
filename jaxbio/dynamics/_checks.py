"""Shape checks before tracing, and opt-in finite checks inside jit."""

from __future__ import annotations

import functools
import inspect

import jax
import numpy as np

from jaxbio._validate import as_shape, check_finite, finite, is_concrete
from jaxbio.tree import SegmentTree

#: Arguments of the public functions that hold one state (checked for NaN/inf when concrete).
STATE_ARGUMENTS = ("q", "qd", "qdd", "tau")


def public(fn):
    """Decorator for the public dynamics functions: compiled on first call (so eager use is fast),
    inlined when called inside a user's own jit; ``check`` is a static flag.

    Concrete (not traced) state arguments are checked before tracing: NaN or inf in ``q``,
    ``qd``, ``qdd``, ``tau`` or ``external`` raise ``ValueError`` naming the argument and the first
    bad entry (shapes are checked at trace time, `as_state`). Traced ones (under jit, vmap, grad)
    are not looked at: NaN/inf flows to every output that depends on it, or raises at run time
    with ``check=True``.
    """
    jitted = jax.jit(fn, static_argnames=("check",))
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError:
            return jitted(*args, **kwargs)  # let jit report the wrong call
        for name in STATE_ARGUMENTS:
            _check_concrete(arguments.get(name), name)
        external = arguments.get("external")
        if isinstance(external, (tuple, list)) and len(external) == 2:
            _check_concrete(external[0], "external forces")
            _check_concrete(external[1], "external moments")
        return jitted(*args, **kwargs)

    # no attributes on `call`: jax.vmap and jax.jit copy a function's __dict__ onto their
    # wrappers, where a `lower` would shadow the outer jit's own
    return call


def _check_concrete(x, name: str) -> None:
    if x is None or not is_concrete(x) or isinstance(x, (str, bytes)):
        return
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return  # not numbers: as_state names it at trace time
    check_finite(a, name)


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
