"""Input validation, the one home of jaxbio's checks.

Two kinds of check live here:

- **Argument checks** for every public function and module (`as_float`, `as_real`,
  `as_scalar`, `as_count`, `as_shape`, `coordinate_vector`, `check_key`, `concrete`,
  `check_values`, `check_finite`, `check_or_defer`). They run before tracing on concrete values
  and raise a ``ValueError`` that names the argument (and where the first bad entry is); on
  traced values the value checks are skipped (`check_values`), become an `equinox.error_if`
  (`check_finite`, `raise_if`; the return value must flow on) or a flag that turns the outputs
  into NaN (`any_bad`).
- **Model dicts** (`validate_model_dict`, `check_inertia`): numpy, outside jit; every error names
  the segment and field.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxbio.tree import JOINT_TYPES

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


def as_float(x, name: str = "value", *, like=None):
    """``x`` as a floating JAX array (integers and bools are promoted to the default float, or to
    ``like``'s dtype when given); ``ValueError`` naming ``name`` for other dtypes (complex, objects)."""
    x = jnp.asarray(x)
    if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == bool):
        raise ValueError(f"{name} must be a real array, got dtype {x.dtype}")
    dtype = jnp.result_type(x, float) if like is None else jnp.asarray(like).dtype
    return x if x.dtype == dtype else x.astype(dtype)


def as_shape(x, shape: tuple[int, ...], name: str, context: str = "", *, like=None):
    """``as_float(x)`` of exactly ``shape``; ``ValueError`` "``name`` has shape …, expected …``context``"."""
    x = as_float(x, name, like=like)
    if x.shape != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}{context}")
    return x


def check_values(x, name: str, *, finite: bool = True, positive: bool = False, nonnegative: bool = False,
                 below: float | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` if the concrete value ``x`` breaks a bound.

    Traced values pass unchecked (there is no value to look at before tracing).
    """
    a = concrete(x)
    if a is None:
        return
    if finite and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (contains NaN or inf), got {a.tolist()}")
    if positive and not np.all(a > 0):
        raise ValueError(f"{name} must be positive (> 0), got {a.tolist()}")
    if nonnegative and not np.all(a >= 0):
        raise ValueError(f"{name} must be non-negative (≥ 0), got {a.tolist()}")
    if below is not None and not np.all(a < below):
        raise ValueError(f"{name} must be < {below:.6g}, got {a.tolist()}")


def check_finite(x, name: str, *, check: bool = True,
                 locate: Callable[[tuple[int, ...], int], str] | None = None, hint: str = ""):
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


def as_real(x, name: str, *, like=None):
    """``x`` as a floating array, like `as_float`, except that a concrete value that is not a JAX
    array (a Python number, a list, numpy) comes back as numpy: inside the caller's `jax.jit`
    ``jnp.asarray`` would make it a tracer, and its value could no longer be checked before
    tracing. ``ValueError`` naming ``name`` for strings, None, complex numbers and objects."""
    if isinstance(x, (jax.Array, jax.core.Tracer)):
        return as_float(x, name, like=like)
    try:
        a = np.asarray(x)
    except (TypeError, ValueError):
        a = np.asarray(None)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer) or a.dtype == bool):
        raise ValueError(f"{name} must be real numbers, got {x!r}")
    return a.astype(jnp.result_type(a, float) if like is None else jnp.result_type(like))


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


def coordinate_vector(x, name: str, n: int | None = None):
    """``x`` as a float array that is a scalar or a vector, of length ``n`` when given (one
    entry per coordinate); ``ValueError`` "``name`` has shape …, expected (n,) or a scalar"."""
    x = as_float(x, name)
    if n is None:
        if x.ndim > 1:
            raise ValueError(f"{name} must be a scalar or a vector (one entry per coordinate), "
                             f"got shape {tuple(x.shape)}")
    elif x.shape not in ((), (n,)):
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected ({n},) (one entry per "
                         f"coordinate) or a scalar")
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
        raise ValueError(f"{name} must be one PRNG key (jax.random.key(0) or jax.random.PRNGKey(0)), "
                         f"got {type(key).__name__} with dtype {dtype} and shape {shape}")


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


# ---- model dicts ----------------------------------------------------------------------------------


def _vec(value: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected numbers of shape {shape}, got {value!r}") from None
    if a.shape != shape:
        raise ValueError(f"{where}: expected shape {shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{where}: contains NaN or inf: {a.tolist()}")
    return a


def check_inertia(inertia: np.ndarray, where: str) -> None:
    """Symmetric positive-definite with principal moments obeying the triangle inequality."""
    scale = max(float(np.max(np.abs(inertia))), 1e-300)
    if not np.allclose(inertia, inertia.T, rtol=0.0, atol=_SYM_TOL * scale):
        raise ValueError(f"{where}: inertia is not symmetric: {inertia.tolist()}")
    eig = np.linalg.eigvalsh(0.5 * (inertia + inertia.T))
    if eig[0] <= 0:
        raise ValueError(f"{where}: inertia is not positive-definite (principal moments {eig.tolist()})")
    # triangle inequality on principal moments: each ≤ sum of the other two
    if eig[2] > eig[0] + eig[1] + 1e-9 * eig[2]:
        raise ValueError(
            f"{where}: inertia breaks the triangle inequality "
            f"({eig[2]:.6g} > {eig[0]:.6g} + {eig[1]:.6g}); no rigid body has these principal moments"
        )


def validate_model_dict(d: dict[str, Any]) -> dict[str, Any]:
    """Check a model dict and return numpy arrays plus static topology."""
    if not isinstance(d, dict):
        raise ValueError(f"model: expected a dict (JSON object), got {type(d).__name__}")
    fmt = d.get("format", "jaxbio-model")
    if fmt != "jaxbio-model":
        raise ValueError(f"model: format must be 'jaxbio-model', got {fmt!r}")
    version = d.get("version", 1)
    if version != 1:
        raise ValueError(f"model: unsupported version {version!r} (this jaxbio reads version 1)")
    name = str(d.get("name", "model"))
    if "gravity" not in d:
        raise ValueError(f"model {name!r}: missing field 'gravity'")
    gravity = _vec(d["gravity"], (3,), f"model {name!r}: gravity")
    segs = d.get("segments")
    if not isinstance(segs, list) or not segs:
        raise ValueError(f"model {name!r}: 'segments' must be a non-empty list")

    names: list[str] = []
    parents: list[int] = []
    types: list[str] = []
    out: dict[str, list] = {k: [] for k in ("axes", "origins", "orientations", "masses", "coms", "inertias")}
    all_names = [s.get("name") if isinstance(s, dict) else None for s in segs]
    for i, s in enumerate(segs):
        if not isinstance(s, dict):
            raise ValueError(f"model {name!r}: segment #{i} is not an object")
        sname = s.get("name")
        if not isinstance(sname, str) or not sname:
            raise ValueError(f"model {name!r}: segment #{i}: field 'name' must be a non-empty string")
        where = f"segment {sname!r}"
        if sname in names:
            raise ValueError(f"{where}: duplicate name (field 'name')")
        for field in ("parent", "joint", "mass", "com", "inertia"):
            if field not in s:
                raise ValueError(f"{where}: missing field {field!r}")
        parent = s["parent"]
        if parent is None:
            parents.append(-1)
        elif parent in names:
            parents.append(names.index(parent))
        elif parent in all_names:
            raise ValueError(f"{where}: parent {parent!r} is listed after its child (field 'parent')")
        else:
            raise ValueError(f"{where}: unknown parent {parent!r} (field 'parent')")
        joint = s["joint"]
        if not isinstance(joint, dict):
            raise ValueError(f"{where}: field 'joint' must be an object")
        jtype = joint.get("type")
        if jtype not in JOINT_TYPES:
            raise ValueError(f"{where}: unknown joint type {jtype!r} (field 'joint.type'); use one of {JOINT_TYPES}")
        if "axis" not in joint:
            raise ValueError(f"{where}: missing field 'joint.axis'")
        axis = _vec(joint["axis"], (3,), f"{where}: joint.axis")
        norm = float(np.linalg.norm(axis))
        if norm < 1e-12:
            raise ValueError(f"{where}: joint.axis is zero")
        origin = _vec(joint.get("origin", [0.0, 0.0, 0.0]), (3,), f"{where}: joint.origin")
        quat = _vec(joint.get("orientation", [1.0, 0.0, 0.0, 0.0]), (4,), f"{where}: joint.orientation")
        qn = float(np.linalg.norm(quat))
        if abs(qn - 1.0) > _QUAT_TOL:
            raise ValueError(
                f"{where}: joint.orientation is not a unit quaternion (norm {qn:.9g}, tolerance {_QUAT_TOL})"
            )
        try:
            mass = float(s["mass"])
        except (TypeError, ValueError):
            raise ValueError(f"{where}: field 'mass' must be a number, got {s['mass']!r}") from None
        if not np.isfinite(mass) or mass <= 0:
            raise ValueError(f"{where}: mass must be positive and finite, got {mass!r} (field 'mass')")
        com = _vec(s["com"], (3,), f"{where}: com")
        inertia = _vec(s["inertia"], (3, 3), f"{where}: inertia")
        check_inertia(inertia, f"{where}: inertia")

        names.append(sname)
        types.append(jtype)
        out["axes"].append(axis / norm)
        out["origins"].append(origin)
        out["orientations"].append(quat / qn)
        out["masses"].append(mass)
        out["coms"].append(com)
        out["inertias"].append(0.5 * (inertia + inertia.T))

    result: dict[str, Any] = {k: np.stack(v) if k != "masses" else np.asarray(v) for k, v in out.items()}
    result.update(names=tuple(names), parents=tuple(parents), joint_types=tuple(types), name=name, gravity=gravity)
    return result
