"""Validation of model dicts (numpy, outside jit). Every error names the segment and field."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxbio.tree import JOINT_TYPES

_QUAT_TOL = 1e-6
_SYM_TOL = 1e-9


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
