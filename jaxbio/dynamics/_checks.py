"""Shape checks before tracing, and opt-in finite checks inside jit."""

from __future__ import annotations

from jaxbio._validate import (
    as_float,
    as_shape,
    check_concrete_finite,
    check_model_precision,
    coordinates_message,
    finite,
    jit_checked,
)
import functools

from jaxbio.configuration import check_unit
from jaxbio.model import Model
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

    Quaternions in ``q`` (ball and free joints): the dynamics use the rotation of ``Q/|Q|``, so a
    non-unit quaternion (an integrator's drift) gives the results of its normalised form. With
    ``check=True`` a quaternion whose norm is off 1 by more than
    `jaxbio.configuration.UNIT_TOLERANCE` is an error naming the segment and its ``q`` entries:
    ``ValueError`` before tracing for a concrete ``q``, a run-time error when traced
    (`jaxbio.configuration.check_unit`).

    The first argument is a `jaxbio.SegmentTree` (the state in its joint coordinates ``q``) or a
    `jaxbio.Model` (the state in the model's own coordinates ``c``): a model whose coordinates are
    its tree's (``model.coordinates.identity_map``) runs on its tree as it is; any other runs the
    function's form in model coordinates registered in `MODEL_FORMS`
    (`jaxbio.dynamics.model_coordinates`: the chain rule through the coordinate map).
    """
    jitted = jit_checked(fn, _check_states, static_argnames=("check",))
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        model = kwargs.pop("tree") if "tree" in kwargs else (args[0] if args else None)
        rest = args[1:] if args and model is args[0] else args
        if isinstance(model, Model):
            if "locked" in kwargs or not model.coordinates.identity_map:
                return MODEL_FORMS[name](model, *rest, **kwargs)
            model = model.tree
        if "locked" in kwargs:
            raise ValueError(f"{name}: locked needs a jaxbio.Model (its coordinates' names), not a SegmentTree")
        return jitted(model, *rest, **kwargs)

    return call


#: The public functions' forms for a `jaxbio.Model` in its own coordinates, by function name
#: (filled by `jaxbio.dynamics.model_coordinates` when the package is imported).
MODEL_FORMS: dict = {}


def _check_states(arguments: dict) -> None:
    for name in STATE_ARGUMENTS:
        check_concrete_finite(arguments.get(name), name)
    tree, q = arguments.get("tree"), arguments.get("q")
    if arguments.get("check") and isinstance(tree, SegmentTree) and q is not None:
        check_unit(tree, q)  # concrete q: ValueError now; traced: nothing here (see as_state)
    external = arguments.get("external")
    if isinstance(external, (tuple, list)) and len(external) == 2:
        check_concrete_finite(external[0], "external forces")
        check_concrete_finite(external[1], "external moments")


def as_state(tree: SegmentTree, x, name: str, check: bool, shape: tuple[int, ...] | None = None):
    """``x`` as an array of shape ``(tree.nq,)`` when ``name`` is ``"q"`` (a configuration),
    ``(tree.nv,)`` otherwise (velocities, accelerations, forces), or ``shape``; ValueError at
    trace time otherwise, saying nq and nv when they differ."""
    tree.check_unbatched()  # a stacked tree outside vmap would broadcast into one plausible answer
    check_model_precision(tree)
    if shape is None:
        size = "nq" if name == "q" else "nv"
        want = (getattr(tree, size),)
        if tree.nq != tree.nv:
            x = as_float(x, name)
            if x.shape != want:
                raise ValueError(coordinates_message(tree, name, x.shape, size))
        context = f" for model {tree.name!r} ({tree.nq} coordinates: {', '.join(tree.names)}); batch with jax.vmap"
    else:
        want, context = shape, f" for model {tree.name!r} ({tree.n_segments} segments); batch with jax.vmap"
    x = as_shape(x, want, name, context)
    if not check:
        return x
    x = finite(x, name)
    return check_unit(tree, x) if name == "q" and shape is None else x


def as_external(tree: SegmentTree, external, check: bool):
    """``external = (forces (n, 3), moments (n, 3))`` (``n = n_segments``) or None → the pair of
    arrays (or None)."""
    if external is None:
        return None
    if not isinstance(external, (tuple, list)) or len(external) != 2:
        raise ValueError("external must be a pair (forces (n, 3), moments (n, 3)) of world-frame arrays")
    forces, moments = external
    n = tree.n_segments
    forces = as_state(tree, forces, "external forces", check, (n, 3))
    moments = as_state(tree, moments, "external moments", check, (n, 3))
    return forces, moments
