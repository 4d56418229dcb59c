"""The joint-space mass matrix of a segment tree in numpy (float64), and the check made with it
while a model is read (`check_nonsingular`, run by `jaxbio.SegmentTree.from_dict`): in numpy, so
that reading a model (a JSON file, an ``.osim``) compiles no XLA program. It imports nothing of
jaxbio (a bottom floor, beside `jaxbio._validate`).

The conventions are `jaxbio.SegmentTree`'s: segment frame = parent frame · Translation(origin) ·
Rotation(orientation) · joint motion; a revolute joint turns by ``q`` rad about ``axis``, a
prismatic one slides ``q`` m along it; a ball joint's velocity is ``ω`` in the segment frame; a
free joint's is ``(v, ω)``, the origin's velocity relative to the parent and ``ω``, both in the
segment frame. ``M = Σ_i m_i J_vᵀ J_v + J_ωᵀ (R_i I_i R_iᵀ) J_ω`` from each segment's world
Jacobians at its centre of mass: a second method beside the JAX kernels' recursion
(tests/test_rigid_numpy.py compares the two).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: configuration and velocity sizes of each joint type (as `jaxbio.tree.JOINT_NQ`/`JOINT_NV`)
_NQ = {"revolute": 1, "prismatic": 1, "spherical": 4, "free": 7, "fixed": 0}
_NV = {"revolute": 1, "prismatic": 1, "spherical": 3, "free": 6, "fixed": 0}


def rotation(quaternion: np.ndarray) -> np.ndarray:
    """The rotation matrix ``(3, 3)`` of a quaternion ``(w, x, y, z)`` (normalised first)."""
    w, x, y, z = np.asarray(quaternion, float) / np.linalg.norm(quaternion)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _axis_rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rodrigues' rotation by ``angle`` rad about the unit ``axis``."""
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def random_configuration(joint_types, rng: np.random.Generator) -> np.ndarray:
    """A random ``q`` ``(nq,)``: revolute angles uniform in ``[−π, π]``, slides and free
    translations uniform in ``[−1, 1]`` m, quaternions uniform on SO(3) (normalised Gaussians)."""
    parts = []
    for t in joint_types:
        if t == "revolute":
            parts.append(rng.uniform(-np.pi, np.pi, 1))
        elif t == "prismatic":
            parts.append(rng.uniform(-1.0, 1.0, 1))
        elif t in ("spherical", "free"):
            if t == "free":
                parts.append(rng.uniform(-1.0, 1.0, 3))
            g = rng.normal(size=4)
            parts.append(g / np.linalg.norm(g))
    return np.concatenate(parts) if parts else np.zeros(0)


def mass_matrix(v: dict, q: np.ndarray) -> np.ndarray:
    """``M(q)`` ``(nv, nv)`` (float64) of the model ``v`` (`validate_model_dict`'s numpy fields:
    ``parents``, ``joint_types``, ``axes``, ``origins``, ``orientations``, ``masses``, ``coms``,
    ``inertias``) at the configuration ``q`` ``(nq,)``."""
    parents, types = v["parents"], v["joint_types"]
    n = len(parents)
    nv = sum(_NV[t] for t in types)
    R = np.zeros((n, 3, 3))
    p = np.zeros((n, 3))
    cols: list[list[tuple[int, np.ndarray, np.ndarray]]] = []  # per segment: (v index, ω, point-or-linear)
    iq = iv = 0
    for i in range(n):
        a = int(parents[i])
        Rp, pp = (np.eye(3), np.zeros(3)) if a < 0 else (R[a], p[a])
        Rj = Rp @ rotation(v["orientations"][i])
        pj = pp + Rp @ np.asarray(v["origins"][i], float)
        t = types[i]
        qi = q[iq : iq + _NQ[t]]
        axis = np.asarray(v["axes"][i], float)
        own = []
        if t == "revolute":
            R[i], p[i] = Rj @ _axis_rotation(axis / np.linalg.norm(axis), qi[0]), pj
            own.append((iv, R[i] @ axis / np.linalg.norm(axis), None))
        elif t == "prismatic":
            R[i], p[i] = Rj, pj + Rj @ axis / np.linalg.norm(axis) * qi[0]
            own.append((iv, None, R[i] @ axis / np.linalg.norm(axis)))
        elif t == "spherical":
            R[i], p[i] = Rj @ rotation(qi), pj
            own += [(iv + k, R[i][:, k], None) for k in range(3)]
        elif t == "free":
            R[i], p[i] = Rj @ rotation(qi[3:]), pj + Rj @ qi[:3]
            own += [(iv + k, None, R[i][:, k]) for k in range(3)]
            own += [(iv + 3 + k, R[i][:, k], None) for k in range(3)]
        else:
            R[i], p[i] = Rj, pj
        # an axis of rotation through the joint's origin p[i]: (index, ω column, origin)
        own = [(j, w, p[i].copy() if w is not None else lin) for j, w, lin in own]
        cols.append(([] if a < 0 else cols[a]) + own)
        iq += _NQ[t]
        iv += _NV[t]
    M = np.zeros((nv, nv))
    for i in range(n):
        c = p[i] + R[i] @ np.asarray(v["coms"][i], float)
        Jv = np.zeros((3, nv))
        Jw = np.zeros((3, nv))
        for j, w, x in cols[i]:
            if w is None:  # a slide: linear velocity x
                Jv[:, j] += x
            else:  # a rotation ω = w about the point x
                Jw[:, j] += w
                Jv[:, j] += np.cross(w, c - x)
        I_world = R[i] @ np.asarray(v["inertias"][i], float) @ R[i].T
        M += float(v["masses"][i]) * Jv.T @ Jv + Jw.T @ I_world @ Jw
    return (M + M.T) / 2


#: random configurations at which `check_nonsingular` evaluates M, and its relative threshold
_SINGULAR_SAMPLES = 3
_SINGULAR_RTOL = 1e-10


def coordinate_label(joint_types: tuple[str, ...], names: tuple[str, ...], j: int) -> str:
    """``"segment 'x' (spherical joint, ω_z in the segment frame)"``: velocity coordinate ``j`` of a
    tree, for messages."""
    owner = np.repeat(np.arange(len(joint_types)), [_NV[t] for t in joint_types])
    i = int(owner[j])
    t = joint_types[i]
    if t in ("revolute", "prismatic"):
        return f"segment {names[i]!r} ({t} joint)"
    k = j - int(np.argmax(owner == i))
    part = ("v_x", "v_y", "v_z", "ω_x", "ω_y", "ω_z")[k + (3 if t == "spherical" else 0)]
    return f"segment {names[i]!r} ({t} joint, {part} in the segment frame)"


def check_nonsingular(v: dict[str, Any]) -> None:
    """Refuse a model whose mass matrix is singular for every configuration: a coordinate that
    moves no mass or inertia (a massless leaf with a DOF, a ball joint on a slender rod that can
    spin about its own axis, …). ``v``: `jaxbio._validate.validate_model_dict`'s result.

    When every mass is positive and every inertia positive-definite, ``M`` is positive-definite
    everywhere and nothing is computed. Otherwise ``M`` is evaluated (`mass_matrix`) at
    ``_SINGULAR_SAMPLES`` random configurations (fixed seed). A sample is singular when a
    coordinate moves nothing: its diagonal entry ``M_jj`` is at most ``_SINGULAR_RTOL`` times the
    same entry of the tree with every inertia replaced by the isotropic ``tr(I)/2 · E`` (exactly 0
    for a massless leaf; rounding noise for a slender rod spinning about its own oblique axis);
    otherwise when the smallest eigenvalue of the equilibrated ``S = D^{-1/2} M D^{-1/2}``
    (``D = diag M``, so that neither units nor a 1e5 kg segment beside a 0.1 kg one matter) is
    below ``_SINGULAR_RTOL``. Singular at every sample: ``ValueError`` naming the coordinate with
    the largest share of the null direction. A sample where ``M`` overflows (enormous masses or
    lengths) decides nothing; if every one does, the model is accepted. A model singular only at
    special configurations (a straight chain of point masses) is accepted, as Pinocchio and MuJoCo
    accept it.
    """
    masses, inertias = v["masses"], v["inertias"]
    if np.all(masses > 0) and all(np.linalg.eigvalsh(I)[0] > 1e-12 * np.max(np.abs(I)) for I in inertias):
        return
    if sum(_NV[t] for t in v["joint_types"]) == 0:
        return
    # the same tree with every inertia made isotropic (trace / 2, as large as its two largest
    # principal moments on average): its diagonal is what each coordinate would move if no
    # inertia had a zero principal moment
    iso = np.trace(v["inertias"], axis1=1, axis2=2)[:, None, None] / 2 * np.eye(3)
    rounder = {**v, "inertias": iso}
    rng = np.random.default_rng(0)
    null = None
    with np.errstate(all="ignore"):  # an overflowing sample is skipped below
        for _ in range(_SINGULAR_SAMPLES):
            q = random_configuration(v["joint_types"], rng)
            M = mass_matrix(v, q)
            reach = np.diag(mass_matrix(rounder, q))
            if not (np.all(np.isfinite(M)) and np.all(np.isfinite(reach))):
                continue  # overflow: this sample decides nothing
            d = np.diag(M)
            dead = d <= _SINGULAR_RTOL * reach  # moves nothing (also 0 <= 0), or only rounding noise
            if np.any(dead):
                null = dead.astype(float)
                continue
            eig, vec = np.linalg.eigh(M / np.sqrt(d)[:, None] / np.sqrt(d)[None, :])
            if eig[0] > _SINGULAR_RTOL:
                return
            null = vec[:, 0]
    if null is None:
        return
    j = int(np.argmax(np.abs(null)))
    raise ValueError(
        f"{coordinate_label(v['joint_types'], v['names'], j)}: this coordinate moves no mass or inertia (or too "
        f"little next to the rest of the model for float64 to tell), so the mass matrix is singular in every "
        f"configuration (a massless segment with a DOF and nothing massive beyond it, or a rotation about a "
        f"slender body's own axis); give the segment mass or inertia there, or remove the DOF (a 'fixed' joint)"
    )
