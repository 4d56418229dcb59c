"""Input validation, the one home of jaxbio's checks.

Two kinds of check live here:

- **Argument checks** for every public function and module (`as_float`, `as_shape`, `concrete`,
  `check_values`, `check_finite`). They run before tracing on concrete values and raise a
  ``ValueError`` that names the argument (and where the first bad entry is); on traced values the
  value checks are skipped (`check_values`) or become an `equinox.error_if` (`check_finite`, whose
  return value must flow on).
- **Model dicts** (`validate_model_dict`, `check_inertia`): numpy, outside jit; every error names
  the segment and field.
"""

from __future__ import annotations

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


def static_number(x, name: str, *, positive: bool = False, nonnegative: bool = False, integer: bool = False,
                  at_most: float | None = None) -> float | int:
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
