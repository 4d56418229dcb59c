"""Input validation, the one home of jaxbio's checks.

Two kinds of check live here:

- **Argument checks** for every public function and module (`as_float`, `as_real`,
  `as_scalar`, `as_count`, `as_shape`, `coordinate_vector`, `as_coordinates`, `check_key`,
  `concrete`, `check_values`, `check_finite`, `in_range`, `check_precision`, `check_or_defer`).
  They run before tracing on concrete values and raise a ``ValueError`` that names the argument
  (and where the first bad entry is); on traced values the value checks are skipped
  (`check_values`), become an `equinox.error_if` (`check_finite`, `raise_if`; the return value
  must flow on), a flag that turns the outputs into NaN (`any_bad`) or NaN in place of the
  entries out of range (`in_range`). Dtype checks (`check_precision`) are static and run on
  traced values too.
- **Model dicts** (`validate_model_dict`, `check_inertia`, `cast_model`): numpy, outside jit; a
  strict schema (unknown fields refused), checked again after the dtype cast; every error names
  the segment and field.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


#: the joint types of a model dict (`jaxbio.tree` re-exports both)
JOINT_TYPES = ("revolute", "prismatic", "spherical", "free", "fixed")
#: joint types with one DOF along or about ``axis`` (the others have no axis)
AXIAL = ("revolute", "prismatic")


#: the most characters of one bad input value that an error message echoes (a 50 MB cell of a
#: motion file is named by its start and its length, not printed whole)
ECHO_CHARS = 100


def echo(value, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` for an error message, at most about ``limit`` characters: a longer one is
    cut, ending in ``…`` and its length (``'1.21.21.2…' (52428800 characters)``). The one place
    where the readers and the command line format a bad value into a message."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        text = repr(value[:limit])
        return f"{text[: limit - 1]}…{text[-1]} ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text)} characters)"


_QUAT_TOL = 1e-6
_SYM_TOL = 1e-9


# ---- argument checks ----------------------------------------------------------------------------


def is_concrete(x) -> bool:
    """True unless ``x`` is a JAX tracer (value checks can run on it before tracing)."""
    return not isinstance(x, jax.core.Tracer)


def any_traced(*xs) -> bool:
    """True if any leaf of the pytrees ``xs`` is a JAX tracer."""
    return any(not is_concrete(x) for x in jax.tree_util.tree_leaves(xs))


def concrete(x) -> np.ndarray | None:
    """``x`` as numpy if it is concrete (not traced), else None (value checks skipped under tracing)."""
    return np.asarray(x) if is_concrete(x) else None


#: floating dtypes too narrow for jaxbio's computations (3 and 2 significant digits, float16's
#: largest value 65504): refused by every public entry that takes arrays (`check_precision`)
HALF_PRECISION = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))


def check_precision(dtype, name: str, *, cast_from=None) -> None:
    """``ValueError`` "``name`` has dtype float16; use float32 or float64" when ``dtype`` is a
    half-precision float (`HALF_PRECISION`): the one rule of every public entry (dynamics,
    simulation, static optimisation, muscles). Half precision does not carry the dynamics (a
    mass matrix's condition, an integrator's step control, an interior point's barrier: they
    fail with an overflow or a library-internal error, or report a plausible wrong answer), so
    it is refused, never silently upcast. ``cast_from``: the dtype the value had before a cast
    to ``dtype`` (the dtype of the model or state it goes with), for the message. Static: runs
    on traced values too (at trace time). Models may still be *stored* in half precision
    (`jaxbio.load_model` ``dtype=``, `SegmentTree.astype`); compute with ``tree.astype(jnp.float32)``."""
    dt = np.dtype(dtype)
    if dt not in HALF_PRECISION:
        return
    if cast_from is not None and np.dtype(cast_from) != dt:
        raise ValueError(
            f"{name} would be cast to {dt} (the dtype of the model or state it goes with); "
            f"half precision is refused: use float32 or float64"
        )
    raise ValueError(f"{name} has dtype {dt}; use float32 or float64 (half precision is refused)")


def check_model_precision(tree, where: str = "") -> None:
    """``ValueError`` when the `SegmentTree` ``tree`` is held in half precision (`check_precision`'s
    rule for models: a float16/bfloat16 model can be loaded and stored, not computed with)."""
    dt = np.dtype(tree.masses.dtype)
    if dt in HALF_PRECISION:
        raise ValueError(
            f"{where}model {tree.name!r} has dtype {dt}; half precision can store a model but "
            f"not compute with it: use float32 or float64 (tree.astype(jnp.float32))"
        )


def as_float(x, name: str = "value", *, like=None):
    """``x`` as a floating JAX array (integers and bools are promoted to the default float, or to
    ``like``'s dtype when given); ``ValueError`` naming ``name`` for other dtypes (complex,
    objects) and for half precision (`check_precision`)."""
    x = jnp.asarray(x)
    if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == bool):
        raise ValueError(f"{name} must be a real array, got dtype {x.dtype}")
    check_precision(x.dtype, name)
    dtype = jnp.result_type(x, float) if like is None else jnp.asarray(like).dtype
    check_precision(dtype, name, cast_from=x.dtype)
    return x if x.dtype == dtype else x.astype(dtype)


def as_shape(x, shape: tuple[int, ...], name: str, context: str = "", *, like=None):
    """``as_float(x)`` of exactly ``shape``; ``ValueError`` "``name`` has shape …, expected …``context``"."""
    x = as_float(x, name, like=like)
    if x.shape != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}{context}")
    return x


def check_values(
    x, name: str, *, finite: bool = True, positive: bool = False, nonnegative: bool = False, below: float | None = None
) -> None:
    """Raise ``ValueError`` naming ``name`` if the concrete value ``x`` breaks a bound.

    Traced values pass unchecked (there is no value to look at before tracing).
    """
    a = concrete(x)
    if a is None:
        return
    if finite and not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite (contains NaN or inf), got {a.tolist()}")
    if positive and not (a > 0).all():
        raise ValueError(f"{name} must be positive (> 0), got {a.tolist()}")
    if nonnegative and not (a >= 0).all():
        raise ValueError(f"{name} must be non-negative (≥ 0), got {a.tolist()}")
    if below is not None and not (a < below).all():
        raise ValueError(f"{name} must be < {below:.6g}, got {a.tolist()}")


def check_finite(
    x, name: str, *, check: bool = True, locate: Callable[[tuple[int, ...], int], str] | None = None, hint: str = ""
):
    """``x`` unchanged after a NaN/inf check.

    Concrete ``x``: ``ValueError`` "``name`` contains NaN or inf" followed by ``locate(index of the
    first bad entry, number of bad entries)`` (default: `` (first at index …)`` for arrays) and
    ``hint``. Traced ``x`` with ``check=True``: an `equinox.error_if` (raises at run time, also
    under jit/vmap; the returned array must be used); with ``check=False`` nothing.
    """
    if is_concrete(x):
        bad = ~np.isfinite(np.asarray(x))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            if locate is not None:
                where = locate(idx, int(bad.sum()))
            else:
                where = f" (first at index {idx})" if idx else ""
            raise ValueError(f"{name} contains NaN or inf{where}{hint}")
        return x
    if check:
        return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), f"{name} contains NaN or inf")
    return x


def _bound(x: float) -> str:
    return "∞" if x == np.inf else "−∞" if x == -np.inf else f"{x:g}"


def in_range(x, name: str, low: float = -np.inf, high: float = np.inf, *, slack: float = 0.0):
    """``x`` (a real array) unchanged when every entry is finite and in ``[low, high]`` (widened by
    ``slack`` on both sides: values that far out pass unchanged, for rounding and
    finite-difference probes at a bound).

    Concrete ``x``: ``ValueError`` "``name`` must be finite and in [low, high], got v (first at
    index i; k entries out of range)". Traced ``x`` (under jit, vmap, grad): the entries out of
    range (NaN and ±inf included) become NaN, so every output that depends on them is NaN, not a
    plausible number, and so are derivatives through them; inside the range value and
    derivative are exactly those of ``x`` (a factor 1 or NaN, no ``error_if``: these checks sit
    in vector fields that integrators call thousands of times).
    """
    if is_concrete(x):
        a = np.asarray(x)
        with np.errstate(invalid="ignore"):
            bad = ~(np.isfinite(a) & (a >= low - slack) & (a <= high + slack))
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            at = f" (first at index {idx[0] if len(idx) == 1 else idx}; {int(bad.sum())} out of range)" if idx else ""
            interval = f"{'(' if low == -np.inf else '['}{_bound(low)}, {_bound(high)}{')' if high == np.inf else ']'}"
            raise ValueError(f"{name} must be finite and in {interval}, got {a[idx].item()!r}{at}")
        return x
    ok = jnp.isfinite(x) & (x >= low - slack) & (x <= high + slack)
    # a factor 1 (exact: value and derivative unchanged) or NaN, so derivatives are NaN there too
    return x * jnp.where(ok, 1.0, jnp.nan).astype(x.dtype)


def check_concrete_finite(x, name: str) -> None:
    """``ValueError`` naming ``name`` if ``x`` is a concrete array of numbers holding NaN or inf;
    traced values, None, strings and non-numbers pass (their shape checks name them later)."""
    if x is None or not is_concrete(x) or isinstance(x, (str, bytes)):
        return
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return
    check_finite(a, name)


def jit_checked(fn, check_arguments: Callable[[dict], None], *, static_argnames=(), convert: Callable | None = None):
    """``jax.jit(fn)`` (compiled on first call, inlined when called inside a caller's jit) that
    first calls ``check_arguments(bound arguments by name)`` on the Python side, before tracing:
    the one place where public functions check concrete arguments (NaN/inf, models) eagerly.

    ``convert(name, value)``, when given, replaces each argument before the checks (e.g. a
    `jaxbio.Model` by its tree where a function takes a tree).

    No attributes are set on the wrapper: `jax.vmap` and `jax.jit` copy a function's ``__dict__``
    onto their own wrappers, where a ``lower`` would shadow the outer jit's own.
    """
    jitted = jax.jit(fn, static_argnames=static_argnames)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return jitted(*args, **kwargs)  # let jit report the wrong call
        if convert is not None:
            for name, value in bound.arguments.items():
                bound.arguments[name] = convert(name, value)
            args, kwargs = bound.args, bound.kwargs
        check_arguments(bound.arguments)
        return jitted(*args, **kwargs)

    return call


def check_choice(value, choices, name: str):
    """``value`` if it is one of ``choices`` (a static option: a solver, a form, a layout), else
    ``ValueError("{name} must be one of 'a', 'b', got 'c'")`` — the one wording of every such check."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def to_device(x, dtype) -> jax.Array:
    """``x`` (a number, list or numpy array) as a JAX array of ``dtype``, cast in numpy and moved by
    `jax.device_put`: no XLA compilation (``jnp.asarray`` compiles a small program per shape and
    dtype), so that reading a model compiles nothing."""
    return jax.device_put(np.asarray(x).astype(dtype))


def take_rows(x, index):
    """``x[index]`` (``index``: static integers or a slice along the first axis): cut on the host
    and moved back by `jax.device_put` when ``x`` is a concrete JAX array (an eager gather or slice
    compiles a small program per shape, as `to_device` says), else ``x[index]`` as it is (numpy
    arrays, tracers)."""
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        return jax.device_put(np.asarray(x)[index])
    return x[index]


def as_real(x, name: str, *, like=None):
    """``x`` as a floating array, like `as_float`, except that a concrete value that is not a JAX
    array (a Python number, a list, numpy) comes back as numpy: inside the caller's `jax.jit`
    ``jnp.asarray`` would make it a tracer, and its value could no longer be checked before
    tracing. ``ValueError`` naming ``name`` for strings, None, complex numbers, objects and half
    precision (`check_precision`)."""
    if isinstance(x, (jax.Array, jax.core.Tracer)):
        return as_float(x, name, like=like)
    try:
        a = np.asarray(x)
    except (TypeError, ValueError):
        a = np.asarray(None)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer) or a.dtype == bool):
        raise ValueError(f"{name} must be real numbers, got {x!r}")
    check_precision(a.dtype, name)
    dtype = jnp.result_type(a, float) if like is None else jnp.result_type(like)
    check_precision(dtype, name, cast_from=a.dtype)
    return a.astype(dtype)


def as_scalar(x, name: str):
    """``x`` as a real scalar (`as_real`: numpy when concrete and not a JAX array);
    ``ValueError`` naming ``name`` for anything else (another shape, a string, None)."""
    x = as_real(x, name)
    if x.shape != ():
        raise ValueError(f"{name} must be a real scalar, got shape {tuple(x.shape)}")
    return x


def as_count(x, name: str, *, minimum: int = 1) -> int:
    """``x`` as a Python int ≥ ``minimum`` (a static size: a step count, a step budget);
    ``ValueError`` naming ``name`` for bools, floats, traced values and smaller numbers."""
    if isinstance(x, bool) or isinstance(x, jax.core.Tracer):
        raise ValueError(f"{name} must be a (static) int ≥ {minimum}, got {x!r}")
    try:
        value = operator.index(x)
    except TypeError:
        raise ValueError(f"{name} must be a (static) int ≥ {minimum}, got {x!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be a (static) int ≥ {minimum}, got {value}")
    return value


def check_flag(x, name: str) -> bool:
    """``x`` as a Python bool; ``ValueError`` naming ``name`` for anything but True/False (numpy
    bools included; not 0/1, not a traced value)."""
    if not isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {x!r}")
    return bool(x)


def coordinate_vector(x, name: str, n: int | None = None):
    """``x`` as a float array that is a scalar or a vector, of length ``n`` when given (one
    entry per coordinate); ``ValueError`` "``name`` has shape …, expected (n,) or a scalar"."""
    x = as_float(x, name)
    if n is None:
        if x.ndim > 1:
            raise ValueError(
                f"{name} must be a scalar or a vector (one entry per coordinate), got shape {tuple(x.shape)}"
            )
    elif x.shape not in ((), (n,)):
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected ({n},) (one entry per coordinate) or a scalar")
    return x


def coordinates_message(tree, name: str, shape: tuple[int, ...], size: str = "nq") -> str:
    """The error message for a generalised vector ``name`` of the wrong ``shape``, naming both of
    the model's sizes, e.g. "q has 13 entries; model 'x' has nq = 14 (configuration) and nv = 12
    (velocity); q must have nq = 14 entries". ``size``: ``"nq"`` for a configuration, ``"nv"``
    for a velocity, an acceleration or a generalised force."""
    shape = tuple(shape)
    got = f"{shape[0]} entries" if len(shape) == 1 else f"shape {shape}"
    msg = (
        f"{name} has {got}; model {tree.name!r} has nq = {tree.nq} (configuration) and "
        f"nv = {tree.nv} (velocity); {name} must have {size} = {getattr(tree, size)} entries"
    )
    return msg + ("; one sample is a vector: batch with jax.vmap" if len(shape) > 1 else "")


def as_coordinates(tree, x, name: str, size: str = "nq", *, like=None):
    """``x`` as a float vector (`as_float`) of ``tree.nq`` entries (``size="nq"``, a
    configuration) or ``tree.nv`` (``size="nv"``); ``ValueError`` with `coordinates_message`
    otherwise. Shapes are static, so this also runs at trace time."""
    x = as_float(x, name, like=like)
    if x.shape != (getattr(tree, size),):
        raise ValueError(coordinates_message(tree, name, x.shape, size))
    return x


def check_key(key, name: str = "key") -> None:
    """``ValueError`` naming ``name`` unless ``key`` is one JAX PRNG key: a typed key
    (``jax.random.key``) of shape ``()`` or a raw ``uint32`` key of shape ``(2,)``
    (``jax.random.PRNGKey``)."""
    try:
        dtype, shape = jnp.result_type(key), jnp.shape(key)
    except TypeError:
        dtype, shape = None, None
    typed = dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)
    if not ((typed and shape == ()) or (dtype == jnp.uint32 and shape == (2,))):
        raise ValueError(
            f"{name} must be one PRNG key (jax.random.key(0) or jax.random.PRNGKey(0)), "
            f"got {type(key).__name__} with dtype {dtype} and shape {shape}"
        )


def _show(value: np.ndarray) -> str:
    return np.array2string(value, threshold=6, precision=6) if value.ndim else repr(value.item())


def check_or_defer(checks) -> list[tuple[Any, str]]:
    """Run each argument check now where its inputs are concrete; return the others for jit.

    ``checks``: triples ``(bad, message, values)``, ``values`` a dict ``{name: value}`` and
    ``bad(xp, *values.values())`` a bool (array), true for bad input, written for ``xp`` = numpy or
    jax.numpy. A check whose values are all concrete runs now with numpy and raises
    ``ValueError("<message> (got name=value, …)")``; a check with a traced value is returned as
    ``(pred, message)`` with ``pred`` its traced bool, for `raise_if` (an `equinox.error_if`)
    or `any_bad` (a flag that turns the jitted outputs into NaN).
    """
    deferred = []
    for bad, message, values in checks:
        if any_traced(*values.values()):
            deferred.append((jnp.any(bad(jnp, *values.values())), message))
            continue
        arrays = {k: np.asarray(v) for k, v in values.items()}
        with np.errstate(invalid="ignore"):
            failed = bool(np.any(bad(np, *arrays.values())))
        if failed:
            got = ", ".join(f"{k}={_show(v)}" for k, v in arrays.items())
            raise ValueError(f"{message} (got {got})")
    return deferred


def any_bad(deferred):
    """The traced flag "some deferred check of `check_or_defer` failed" (None if there are none)."""
    if not deferred:
        return None
    return jnp.any(jnp.stack([pred for pred, _ in deferred]))


def raise_if(x, deferred):
    """``x`` unchanged, with one `equinox.branched_error_if` raising the message of the first
    failed deferred check of `check_or_defer` at run time (also under jit/vmap; the returned
    value must be used). One condition, whatever the number of checks."""
    if not deferred:
        return x
    preds = jnp.stack([pred for pred, _ in deferred])
    return eqx.branched_error_if(x, jnp.any(preds), jnp.argmax(preds), [msg for _, msg in deferred])


def check_eagerly(checks, *xs) -> None:
    """Run ``checks`` (pairs ``(bad(xp, *xs) -> bool array, message)``, ``xp`` numpy or jax.numpy)
    with numpy and raise ``ValueError(message)`` when the inputs are concrete; nothing for traced
    inputs (the jitted code enforces the same checks with `enforce`)."""
    if any_traced(*xs):
        return
    ys = [None if x is None else np.asarray(x) for x in xs]
    for bad, msg in checks:
        if bool(np.any(bad(np, *ys))):
            raise ValueError(msg)


def enforce(x, checks, *xs):
    """``x`` unchanged, with an `equinox.error_if` per check of `check_eagerly`'s form (raises at
    run time, also under jit/vmap; the returned array must be used)."""
    for bad, msg in checks:
        x = eqx.error_if(x, bad(jnp, *xs), msg)
    return x


def finite(x, name: str):
    """``x`` unchanged, with an `equinox.error_if` for NaN/inf (also on concrete values, at run time).

    The returned array must be used for the check to stay in the graph.
    """
    return eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), f"{name} contains NaN or inf")


def static_number(
    x,
    name: str,
    *,
    positive: bool = False,
    nonnegative: bool = False,
    integer: bool = False,
    at_most: float | None = None,
) -> float | int:
    """A static option (a solver tolerance, a weight, an iteration count) as a Python ``float``
    (``int`` with ``integer=True``), checked before tracing: ``ValueError`` naming ``name`` for a
    non-number (an array of more than one value, a tracer), NaN or inf, a value breaking the sign
    or the ``at_most`` bound, or a non-integer where an integer is required."""
    try:
        value = float(x)
    except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
        raise ValueError(f"{name} must be a number (a static option, not a traced or array value), got {x!r}") from None
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be positive (> 0), got {value:g}")
    if nonnegative and not value >= 0:
        raise ValueError(f"{name} must be non-negative (≥ 0), got {value:g}")
    if at_most is not None and not value <= at_most:
        raise ValueError(f"{name} must be ≤ {at_most:g}, got {value:g}")
    if integer:
        if value != int(value):
            raise ValueError(f"{name} must be an integer, got {value:g}")
        return int(value)
    return value


# ---- model dicts ----------------------------------------------------------------------------------
# The JSON model format of API.md ("Model file format", version 1) is a strict schema: every field
# below and nothing else. A misspelt optional field would otherwise be ignored and its default used
# (``"orgin"`` → origin (0, 0, 0)), so unknown fields are refused with a "did you mean" hint.

#: fields of the model object, of each segment and of each joint (API.md)
MODEL_FIELDS = ("format", "version", "name", "gravity", "segments", "coordinates", "coordinate_functions", "markers")
SEGMENT_FIELDS = ("name", "parent", "joint", "mass", "com", "inertia")
JOINT_FIELDS = ("type", "axis", "origin", "orientation")
#: array fields of a `SegmentTree` and the model-file field each comes from
ARRAY_FIELDS = {
    "axes": "joint.axis",
    "origins": "joint.origin",
    "orientations": "joint.orientation",
    "masses": "mass",
    "coms": "com",
    "inertias": "inertia",
    "gravity": "gravity",
}


def _kind(value: Any) -> str:
    """``value`` for an error message: its type and a short repr."""
    r = repr(value)
    return f"{type(value).__name__} {r if len(r) <= 60 else r[:57] + '...'}"


def _is_number(x: Any) -> bool:
    """A real number: int or float (also numpy's), not a bool (JSON ``true`` is no mass)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _check_fields(obj: dict, allowed: tuple[str, ...], required: tuple[str, ...], where: str, prefix: str = "") -> None:
    """``ValueError`` for a field of ``obj`` not in ``allowed`` (with difflib's closest allowed
    name as a hint) or a missing ``required`` one."""
    for key in obj:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            hint = (
                f" (did you mean '{prefix}{close[0]}'?)"
                if close
                else f"; the fields are {', '.join(repr(prefix + a) for a in allowed)}"
            )
            raise ValueError(f"{where}: unknown field '{prefix}{key}'{hint}")
    for key in required:
        if key not in obj:
            raise ValueError(f"{where}: missing field '{prefix}{key}'")


def _nesting_problem(value: Any, shape: tuple[int, ...], index: tuple[int, ...] = ()) -> str | None:
    """None if ``value`` is nested lists of real numbers of exactly ``shape``; else ``"shape"`` for
    a wrong length or depth, or the first entry that is not a number."""
    if not shape:
        if _is_number(value):
            return None
        if isinstance(value, (list, tuple)):
            return "shape"
        at = index[0] if len(index) == 1 else index
        return f"entry at index {at} is {_kind(value)}, not a number"
    if not isinstance(value, (list, tuple)) or len(value) != shape[0]:
        return "shape"
    for i, x in enumerate(value):
        problem = _nesting_problem(x, shape[1:], index + (i,))
        if problem is not None:
            return problem
    return None


def _shape_of(value: Any) -> str:
    try:
        return str(np.shape(value))
    except ValueError:  # ragged nested lists
        return f"a ragged list {_kind(value)}"


def _vec(value: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    """``value`` as a finite float64 array of exactly ``shape``.

    Accepted: (nested) lists of real numbers (JSON numbers) or a real numeric array. Refused with a
    ``ValueError`` starting with ``where``: bools, strings, null, objects, complex numbers, a wrong
    length or nesting depth, numbers too large for float64, NaN and inf.
    """
    if isinstance(value, (list, tuple)) or _is_number(value):
        problem = _nesting_problem(value, shape)
        if problem == "shape" and shape == ():
            raise ValueError(f"{where}: expected a number, got {_kind(value)}")
        if problem == "shape":
            raise ValueError(f"{where}: expected shape {shape}, got {_shape_of(value)}")
        if problem is not None:
            raise ValueError(f"{where}: expected numbers of shape {shape}; {problem}")
        try:
            a = np.array(value, dtype=float)
        except OverflowError:  # an integer beyond float64
            raise ValueError(f"{where}: a number is too large for float64: {_kind(value)}") from None
    elif isinstance(value, (np.ndarray, jax.Array)):
        a = np.asarray(value)
        if a.dtype.kind not in "iuf":
            raise ValueError(f"{where}: expected real numbers of shape {shape}, got an array of dtype {a.dtype}")
        if a.shape != shape:
            raise ValueError(f"{where}: expected shape {shape}, got {a.shape}")
        a = a.astype(float)
    else:
        what = "a number" if shape == () else f"numbers of shape {shape}"
        raise ValueError(f"{where}: expected {what}, got {_kind(value)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{where}: contains NaN or inf: {a.tolist()}")
    return a


def check_inertia(inertia: np.ndarray, where: str, *, rtol: float = 1e-9, physical: bool = True) -> None:
    """Symmetric positive semi-definite with principal moments obeying the triangle inequality
    (``rtol``: relative slack for rounding, of the positivity and of the triangle inequality;
    ``physical`` false: the triangle inequality is not checked, as OpenSim does not check it).
    Zero is allowed (a massless frame, a point mass); a slender rod has one zero moment. Checked
    on the tensor divided by its largest entry, so that neither 1e300 nor 1e-300 over- or
    underflows."""
    scale = float(np.max(np.abs(inertia)))
    if scale == 0.0:
        return
    unit = inertia / scale
    if not np.allclose(unit, unit.T, rtol=0.0, atol=_SYM_TOL):
        raise ValueError(f"{where}: inertia is not symmetric: {inertia.tolist()}")
    eig = np.linalg.eigvalsh(0.5 * (unit + unit.T))
    moments = [float(e) * scale for e in eig]
    if eig[0] < -rtol * eig[2]:
        raise ValueError(f"{where}: inertia is not positive semi-definite (principal moments {moments})")
    # triangle inequality on principal moments: each ≤ sum of the other two
    if physical and eig[2] > eig[0] + eig[1] + rtol * eig[2]:
        raise ValueError(
            f"{where}: inertia breaks the triangle inequality "
            f"({moments[2]:.6g} > {moments[0]:.6g} + {moments[1]:.6g}); no rigid body has these principal moments"
        )


def _norm(v: np.ndarray) -> float:
    """Euclidean norm without overflow (1e300 entries) or underflow."""
    big = float(np.max(np.abs(v)))
    if big == 0.0:
        return 0.0
    if 1e-150 < big < 1e150:
        return float(np.linalg.norm(v))
    return big * float(np.linalg.norm(v / big))


def _symmetrised(m: np.ndarray) -> np.ndarray:
    """``(m + mᵀ)/2``, exactly ``m`` where it is already symmetric (no overflow, no rounding)."""
    return np.where(m == m.T, m, 0.5 * m + 0.5 * m.T)


def validate_model_dict(d: dict[str, Any], *, physical: bool = True) -> dict[str, Any]:
    """Check a model dict (the JSON layout of API.md) and return float64 numpy arrays (the keys of
    `ARRAY_FIELDS`; axes and quaternions normalised, inertias symmetrised) plus the static
    topology (``names``, ``parents``, ``joint_types``, ``name``).

    Every defect raises ``ValueError`` naming the segment and field: unknown fields (with a "did
    you mean" hint), missing fields, wrong JSON types (a bool or string as a number, a string as
    a vector), wrong shapes or nesting, NaN/inf, and the physical rules of API.md (``physical``
    false: inertias need not obey the triangle inequality, see `SegmentTree.from_dict`). The dtype
    cast is checked separately, after it happens (`cast_model`).
    """
    if not isinstance(d, dict):
        raise ValueError(f"model: expected a JSON object with the fields {', '.join(MODEL_FIELDS)}, got {_kind(d)}")
    name = d.get("name", "model")
    if not isinstance(name, str) or not name:
        raise ValueError(f"model: field 'name' must be a non-empty string, got {_kind(name)}")
    top = f"model {name!r}"
    _check_fields(d, MODEL_FIELDS, ("gravity", "segments"), top)
    fmt = d.get("format", "jaxbio-model")
    if not isinstance(fmt, str) or fmt != "jaxbio-model":
        raise ValueError(f"{top}: format must be 'jaxbio-model', got {_kind(fmt)}")
    version = d.get("version", 1)
    if not isinstance(version, (int, np.integer)) or isinstance(version, (bool, np.bool_)) or version != 1:
        raise ValueError(f"{top}: unsupported version {version!r} (this jaxbio reads version 1, the integer 1)")
    gravity = _vec(d["gravity"], (3,), f"{top}: gravity")
    segs = d["segments"]
    if not isinstance(segs, (list, tuple)) or not segs:
        raise ValueError(f"{top}: 'segments' must be a non-empty list, got {_kind(segs)}")

    names: list[str] = []
    parents: list[int] = []
    types: list[str] = []
    out: dict[str, list] = {k: [] for k in ARRAY_FIELDS if k != "gravity"}
    all_names = [s.get("name") if isinstance(s, dict) else None for s in segs]
    for i, s in enumerate(segs):
        if not isinstance(s, dict):
            raise ValueError(f"{top}: segments[{i}] is not an object, got {_kind(s)}")
        sname = s.get("name")
        where = f"segment {sname!r}" if isinstance(sname, str) and sname else f"{top}: segments[{i}]"
        _check_fields(s, SEGMENT_FIELDS, SEGMENT_FIELDS, where)
        if not isinstance(sname, str) or not sname:
            raise ValueError(f"{where}: field 'name' must be a non-empty string, got {_kind(sname)}")
        if sname in names:
            raise ValueError(f"{where}: duplicate name (field 'name'; segments[{names.index(sname)}] has it too)")
        parent = s["parent"]
        if parent is None:
            parents.append(-1)
        elif not isinstance(parent, str):
            raise ValueError(f"{where}: field 'parent' must be a segment name or null, got {_kind(parent)}")
        elif parent == sname:
            raise ValueError(f"{where}: a segment cannot be its own parent (field 'parent')")
        elif parent in names:
            parents.append(names.index(parent))
        elif parent in all_names:
            raise ValueError(f"{where}: parent {parent!r} is listed after its child (field 'parent')")
        else:
            close = difflib.get_close_matches(parent, names, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{where}: unknown parent {parent!r} (field 'parent'){hint}")
        joint = s["joint"]
        if not isinstance(joint, dict):
            raise ValueError(f"{where}: field 'joint' must be an object, got {_kind(joint)}")
        _check_fields(joint, JOINT_FIELDS, ("type",), where, prefix="joint.")
        jtype = joint["type"]
        if not isinstance(jtype, str) or jtype not in JOINT_TYPES:
            close = difflib.get_close_matches(jtype, JOINT_TYPES, n=1) if isinstance(jtype, str) else []
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"{where}: unknown joint type {jtype!r} (field 'joint.type'); {hint}use one of {JOINT_TYPES}"
            )
        if jtype in AXIAL:
            if "axis" not in joint:
                raise ValueError(f"{where}: a {jtype} joint needs field 'joint.axis'")
            axis = _vec(joint["axis"], (3,), f"{where}: joint.axis")
            norm = _norm(axis)
            if norm < 1e-12:
                raise ValueError(f"{where}: joint.axis is zero: {axis.tolist()}")
        elif "axis" in joint:
            raise ValueError(f"{where}: a {jtype} joint has no axis; remove field 'joint.axis'")
        else:
            axis, norm = np.zeros(3), 1.0
        origin = _vec(joint.get("origin", [0.0, 0.0, 0.0]), (3,), f"{where}: joint.origin")
        quat = _vec(joint.get("orientation", [1.0, 0.0, 0.0, 0.0]), (4,), f"{where}: joint.orientation")
        qn = _norm(quat)
        if not abs(qn - 1.0) <= _QUAT_TOL:
            raise ValueError(
                f"{where}: joint.orientation is not a unit quaternion (norm {qn:.9g}, tolerance {_QUAT_TOL})"
            )
        mass = float(_vec(s["mass"], (), f"{where}: mass"))
        if mass < 0:
            raise ValueError(f"{where}: mass must be non-negative and finite, got {mass!r} (field 'mass')")
        com = _vec(s["com"], (3,), f"{where}: com")
        inertia = _vec(s["inertia"], (3, 3), f"{where}: inertia")
        check_inertia(inertia, where, physical=physical)

        names.append(sname)
        types.append(jtype)
        out["axes"].append(axis / norm)
        out["origins"].append(origin)
        out["orientations"].append(quat / qn)
        out["masses"].append(mass)
        out["coms"].append(com)
        out["inertias"].append(_symmetrised(inertia))

    result: dict[str, Any] = {k: np.stack(v) if k != "masses" else np.asarray(v) for k, v in out.items()}
    result.update(names=tuple(names), parents=tuple(parents), joint_types=tuple(types), name=name, gravity=gravity)
    result["coordinates"] = validate_coordinates_dict(d, result)
    result["markers"] = validate_markers_dict(d, result)
    return result


#: fields of each marker (``"markers"``) in a model file
MARKER_FIELDS = ("name", "segment", "location", "fixed")


def validate_markers_dict(d: dict[str, Any], tree: dict[str, Any]) -> dict[str, Any] | None:
    """The model file's optional ``"markers"`` section, checked against the validated tree ``tree``
    (`validate_model_dict`'s result), or None when the file has none.

    ``"markers"``: a list of ``{"name", "segment" (a segment's name, or null for the world),
    "location" ([x, y, z] m in that segment's frame), "fixed" (false; OpenSim's flag: marker
    placement leaves the marker where it is)}``, names unique. Returns numpy: ``names``,
    ``segments`` (indices, ``-1`` for the world), ``locations`` ``(m, 3)`` and ``fixed``.
    """
    if "markers" not in d:
        return None
    top = f"model {tree['name']!r}"
    items = _list_field(d, "markers", top)
    index = {name: i for i, name in enumerate(tree["names"])}
    names, segments, locations, fixed = [], [], [], []
    for k, item in enumerate(items):
        where = f"{top}: markers[{k}]"
        _check_fields(item, MARKER_FIELDS, ("name", "segment", "location"), where)
        name = item["name"]
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: field 'name' must be a non-empty string, got {_kind(name)}")
        where = f"{top}: marker {name!r}"
        if name in names:
            raise ValueError(f"{where}: the marker name is used twice")
        segment = item["segment"]
        if segment is None:
            segments.append(-1)
        elif isinstance(segment, str) and segment in index:
            segments.append(index[segment])
        else:
            close = difflib.get_close_matches(str(segment), list(index), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{where}: unknown segment {segment!r} (field 'segment'; null for the world){hint}")
        names.append(name)
        locations.append(_vec(item["location"], (3,), f"{where}: location"))
        fixed.append(_flag_field(item, "fixed", where))
    return {
        "names": tuple(names),
        "segments": tuple(segments),
        "locations": np.reshape(np.asarray(locations, dtype=float), (-1, 3)),
        "fixed": tuple(fixed),
    }


#: fields of each model coordinate (``"coordinates"``) and of each tree coordinate's function
#: (``"coordinate_functions"``) in a model file; the names of OpenSim's Coordinate properties
COORDINATE_FIELDS = ("name", "default_value", "default_speed_value", "range", "clamped", "locked", "motion_type")
FUNCTION_FIELDS = ("coordinate", "breakpoints", "origins", "coefficients")
MOTION_TYPES = ("rotational", "translational", "coupled")


def _flag_field(obj: dict, key: str, where: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{where}: field '{key}' must be true or false, got {_kind(value)}")
    return bool(value)


def _list_field(d: dict, key: str, top: str) -> list:
    value = d[key]
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{top}: '{key}' must be a non-empty list of objects, got {_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"{top}: {key}[{i}] is not an object, got {_kind(item)}")
    return list(value)


def validate_coordinates_dict(d: dict[str, Any], tree: dict[str, Any]) -> dict[str, Any] | None:
    """The model file's optional coupled-coordinate sections, checked against the validated tree
    ``tree`` (`validate_model_dict`'s result), or None when the file has neither.

    ``"coordinates"``: the model's ``nc`` coordinates ``c``, in order, each ``{"name",
    "default_value" (0), "default_speed_value" (0), "range" ([min, max]; none: unbounded),
    "clamped" (false), "locked" (false), "motion_type" ("rotational", "translational" or
    "coupled"; default: the joint type of the one tree coordinate an identity drives, else
    "coupled")}``. ``"coordinate_functions"``: one object per tree coordinate ``q`` (``nq``, in
    the tree's order), ``{"coordinate": name, "breakpoints" (m,), "origins" (m + 1,),
    "coefficients" (m + 1, degree + 1)}``: ``q[k] = Σ_p a[i, p] (c − origin[i])^p`` on piece ``i``
    (`jaxbio.coordinates.Piecewise`). Without it the coordinates drive the tree's coordinates one
    to one, in order (``nc = nq``). Returns numpy: ``names``, ``defaults``, ``speeds``,
    ``ranges`` ``(nc, 2)``, ``clamped``, ``locked``, ``motion_types``, ``source`` (``nq`` ints)
    and ``pieces`` (``nq`` triples ``(breakpoints, origins, coefficients)``).
    """
    if "coordinates" not in d:
        if "coordinate_functions" in d:
            raise ValueError(
                f"model {tree['name']!r}: 'coordinate_functions' needs the 'coordinates' they are functions of"
            )
        return None
    top = f"model {tree['name']!r}"
    types = tree["joint_types"]
    if any(t not in ("revolute", "prismatic", "fixed") for t in types):
        raise ValueError(
            f"{top}: 'coordinates' (coupled coordinates) need a tree of revolute, prismatic and fixed "
            f"joints only; this one has {sorted(set(types))}"
        )
    dof_types = [t for t in types if t != "fixed"]
    nq = len(dof_types)
    names: list[str] = []
    defaults, speeds, ranges, clamped, locked, motions = [], [], [], [], [], []
    for i, c in enumerate(_list_field(d, "coordinates", top)):
        name = c.get("name")
        where = f"{top}: coordinate {name!r}" if isinstance(name, str) and name else f"{top}: coordinates[{i}]"
        _check_fields(c, COORDINATE_FIELDS, ("name",), where)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: field 'name' must be a non-empty string, got {_kind(name)}")
        if name in names:
            raise ValueError(f"{where}: duplicate name (coordinates[{names.index(name)}] has it too)")
        names.append(name)
        defaults.append(float(_vec(c.get("default_value", 0.0), (), f"{where}: default_value")))
        speeds.append(float(_vec(c.get("default_speed_value", 0.0), (), f"{where}: default_speed_value")))
        r = _vec(c["range"], (2,), f"{where}: range") if "range" in c else np.array([-np.inf, np.inf])
        if r[0] > r[1]:
            raise ValueError(f"{where}: range minimum {r[0]} is above its maximum {r[1]}")
        ranges.append(r)
        clamped.append(_flag_field(c, "clamped", where))
        locked.append(_flag_field(c, "locked", where))
        motion = c.get("motion_type")
        if motion is not None and motion not in MOTION_TYPES:
            raise ValueError(f"{where}: field 'motion_type' must be one of {MOTION_TYPES}, got {_kind(motion)}")
        motions.append(motion)
    if "coordinate_functions" in d:
        functions = _list_field(d, "coordinate_functions", top)
        if len(functions) != nq:
            raise ValueError(
                f"{top}: 'coordinate_functions' has {len(functions)} entries; the tree has {nq} "
                "coordinates (one function per revolute or prismatic joint, in segment order)"
            )
        source, pieces = [], []
        for k, f in enumerate(functions):
            where = f"{top}: coordinate_functions[{k}]"
            _check_fields(f, FUNCTION_FIELDS, FUNCTION_FIELDS, where)
            if f["coordinate"] not in names:
                close = difflib.get_close_matches(str(f["coordinate"]), names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"{where}: unknown coordinate {f['coordinate']!r} (field 'coordinate'){hint}")
            source.append(names.index(f["coordinate"]))
            b = np.asarray(f["breakpoints"], dtype=object)
            m = len(f["breakpoints"]) if isinstance(f["breakpoints"], (list, tuple)) else -1
            if m < 0 or b.ndim != 1:
                raise ValueError(f"{where}: 'breakpoints' must be a list of numbers, got {_kind(f['breakpoints'])}")
            b = _vec(f["breakpoints"], (m,), f"{where}: breakpoints")
            if np.any(np.diff(b) <= 0):
                raise ValueError(f"{where}: 'breakpoints' must be strictly ascending, got {b.tolist()}")
            o = _vec(f["origins"], (m + 1,), f"{where}: origins (one per piece, len(breakpoints) + 1)")
            a = f["coefficients"]
            width = len(a[0]) if isinstance(a, (list, tuple)) and a and isinstance(a[0], (list, tuple)) else 0
            if width < 1:
                raise ValueError(
                    f"{where}: 'coefficients' must be {m + 1} lists of ascending-power coefficients, got {_kind(a)}"
                )
            pieces.append((b, o, _vec(a, (m + 1, width), f"{where}: coefficients (one row per piece)")))
    else:
        if len(names) != nq:
            raise ValueError(
                f"{top}: {len(names)} 'coordinates' for a tree of {nq} coordinates; without "
                "'coordinate_functions' each coordinate drives one tree coordinate, in order"
            )
        source = list(range(nq))
        pieces = [(np.zeros(0), np.zeros(1), np.array([[0.0, 1.0]]))] * nq
    for j, name in enumerate(names):
        driven = [k for k, s in enumerate(source) if s == j]
        if not driven:
            raise ValueError(
                f"{top}: coordinate {name!r} drives no tree coordinate (no 'coordinate_functions' entry "
                "names it): it would move no mass"
            )
        if motions[j] is None:
            b, o, a = pieces[driven[0]]
            x = np.array([-1.3, 0.2, 2.1])
            identity = (
                len(driven) == 1
                and len(b) == 0
                and np.allclose(np.polynomial.polynomial.polyval(x - o[0], a[0]), x, rtol=0, atol=1e-12)
            )
            motions[j] = (
                ("rotational" if dof_types[driven[0]] == "revolute" else "translational") if identity else "coupled"
            )
    return dict(
        names=tuple(names),
        defaults=np.asarray(defaults),
        speeds=np.asarray(speeds),
        ranges=np.stack(ranges),
        clamped=tuple(clamped),
        locked=tuple(locked),
        motion_types=tuple(motions),
        source=tuple(source),
        pieces=tuple(pieces),
    )


def model_dtype(dtype=None) -> np.dtype:
    """The floating dtype model arrays are cast to: JAX's default float type for None.

    float16 and bfloat16 are accepted here (a model may be stored in half precision) but refused
    where a model computes (`check_model_precision`): cast with ``tree.astype(jnp.float32)``.

    ``ValueError`` for anything else: integer or bool arrays would truncate masses and inertias
    to 0, complex ones are no physics.
    """
    if dtype is None:
        return np.dtype(jax.dtypes.canonicalize_dtype(np.float64))  # float32 unless x64 (no compile)
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype: {dtype!r} is not a dtype") from None
    if not jnp.issubdtype(dt, jnp.floating):
        raise ValueError(
            f"dtype must be a floating-point dtype (float64, float32, float16, bfloat16), got {dt}: "
            "masses and inertias do not survive a cast to it"
        )
    return dt


def check_cast_model(
    arrays: dict[str, Any],
    names: tuple[str, ...],
    model: str = "model",
    *,
    before: dict[str, Any] | None = None,
    physical: bool = True,
) -> None:
    """Check a model's arrays *after* the cast to their dtype (the float64 checks of
    `validate_model_dict` hold for the input, not for what a narrower dtype makes of it).

    ``arrays``: the fields of `ARRAY_FIELDS`, concrete and unbatched. ``ValueError`` naming the
    segment and field when a value overflows to inf, a mass underflows to 0 or to a subnormal
    number (most of its digits lost), or an inertia is no longer positive-definite or breaks the
    triangle inequality by more than the dtype's rounding. With ``before`` (the same fields before
    the cast, e.g. for `SegmentTree.astype` of a tree built without `from_dict`) only what the
    cast broke is refused.
    """
    dt = jnp.result_type(arrays["masses"])
    info = jnp.finfo(dt)
    a = {k: np.asarray(arrays[k], dtype=np.float64) for k in ARRAY_FIELDS}
    b = None if before is None else {k: np.asarray(before[k], dtype=np.float64) for k in ARRAY_FIELDS}
    for field, key in ARRAY_FIELDS.items():
        bad = ~np.isfinite(a[field]) & (True if b is None else np.isfinite(b[field]))
        if bad.any():
            where = f"model {model!r}" if field == "gravity" else f"segment {names[int(np.argwhere(bad)[0][0])]!r}"
            raise ValueError(
                f"{where}: {key} overflows {dt} (largest finite value {float(info.max):.6g}); use a wider dtype"
            )
    for i, m in enumerate(a["masses"]):
        if not m >= float(info.tiny) and (b is None or b["masses"][i] > 0):
            raise ValueError(
                f"segment {names[i]!r}: mass underflows in {dt} (becomes {float(m)!r} kg; smallest normal "
                f"{float(info.tiny):.6g}) (field 'mass'); use a wider dtype"
            )
    for i, inertia in enumerate(a["inertias"]):
        if b is not None:
            try:
                check_inertia(b["inertias"][i], "")
            except (ValueError, np.linalg.LinAlgError):
                continue  # not a check the cast can fail
        where = f"segment {names[i]!r}: after the cast to {dt}"
        check_inertia(inertia, where, rtol=max(1e-9, 16 * float(info.eps)), physical=physical)
        if b is not None and _positive_definite(b["inertias"][i]) and not _positive_definite(inertia):
            raise ValueError(
                f"{where}: inertia is not positive-definite, as it was before (a principal moment "
                f"underflows; field 'inertia'); use a wider dtype"
            )


def _positive_definite(inertia: np.ndarray) -> bool:
    scale = float(np.max(np.abs(inertia)))
    if not scale > 0:
        return False
    unit = inertia / scale
    return float(np.linalg.eigvalsh(0.5 * (unit + unit.T))[0]) > 0


def cast_model(v: dict[str, Any], dtype=None, *, physical: bool = True) -> dict[str, jax.Array]:
    """The arrays of `validate_model_dict`'s result as JAX arrays of ``dtype`` (`model_dtype`),
    checked after the cast (`check_cast_model`; ``physical`` as there)."""
    dt = model_dtype(dtype)
    with np.errstate(over="ignore", under="ignore"):  # refused below, naming the segment
        arrays = {k: to_device(v[k], dt) for k in ARRAY_FIELDS}
    check_cast_model(
        arrays, v["names"], v.get("name", "model"), before={k: v[k] for k in ARRAY_FIELDS}, physical=physical
    )
    return arrays
