"""Joint-space mass matrix from segment Jacobians, and the generalised bias and gravity forces.

``M(q) = Σ_k m_k J_v,kᵀ J_v,k + J_ω,kᵀ I_k J_ω,k`` with ``J_v,k`` the world-frame Jacobian of
segment ``k``'s centre of mass and ``J_ω,k`` of its angular velocity, ``I_k`` its inertia rotated
to the world. Column ``j`` of the Jacobians is non-zero only where joint ``j`` moves segment ``k``
(a static ancestor mask), so the whole matrix is a handful of vectorised products with no
recursion at all. This is deliberately a different route from the wrench recursion: the tests
check ``inverse_dynamics(q, qd, forward_dynamics(q, qd, tau)) = tau`` across the two.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import ARRAY_FIELDS
from jaxbio.configuration import random as random_configuration
from jaxbio.dynamics import one_segment as _one_segment
from jaxbio.dynamics.batch_last import mass_matrix_batch, vmapped_by
from jaxbio.dynamics._checks import public, as_state, finite
from jaxbio.dynamics.kinematics import point_jacobian, segment_motion
from jaxbio.dynamics._rnea import _tau, world_inertia_times
from jaxbio.spatial import dot
from jaxbio.tree import MODEL_CHECKS, SegmentTree, _dofs

__all__ = ["mass_matrix", "bias_forces", "gravity_forces", "com_jacobians"]


def com_jacobians(tree: SegmentTree, q) -> tuple[Float[Array, "n n 3"], Float[Array, "n n 3"], object]:
    """``J_v[k, j]`` and ``J_ω[k, j]`` ``(n_segments, nv, 3)``: world velocity of COM ``k`` /
    angular velocity of segment ``k`` per unit ``qd[j]``. Also returns the segment motion used."""
    mo = segment_motion(tree, q)
    jv, jw = jax.vmap(lambda k, c: point_jacobian(tree, q, k, c, motion=mo))(jnp.arange(tree.n_segments), tree.coms)
    return jnp.swapaxes(jv, 1, 2), jnp.swapaxes(jw, 1, 2), mo


@public
def mass_matrix(tree: SegmentTree, q: Float[ArrayLike, " nq"], *, check: bool = False) -> Float[Array, "n n"]:
    """Joint-space inertia matrix ``M(q)`` ``(nv, nv)`` (kg·m², kg·m, kg by coordinate type),
    symmetric positive-definite, so that ``T = ½ qdᵀ M qd`` (``q`` ``(nq,)``, ``qd`` ``(nv,)``). A one-segment tree uses the closed
    form of `jaxbio.dynamics.one_segment`.

    One state: from the segment Jacobians (the module docstring). Under `jax.vmap` (states
    batched, tree not): the composite-rigid-body algorithm on the batch-last kernel
    (`jaxbio.dynamics.batch_last.mass_matrix_batch`), a second, independent route; derivatives
    always follow the Jacobian route.
    """
    q = as_state(tree, q, "q", check)
    M = _one_segment.mass_matrix(tree, q) if _one_segment.applies(tree) else _mass_matrix(tree, q)
    return finite(M, "mass_matrix result") if check else M


def _jacobian_mass_matrix(tree: SegmentTree, q):
    jv, jw, mo = com_jacobians(tree, q)
    n, nv = tree.n_segments, tree.nv
    # I_k J_ω[k, j] for every column j
    att = jnp.broadcast_to(mo.attitude[:, None, :], (n, nv, 4))
    inert = jnp.broadcast_to(tree.inertias[:, None, :, :], (n, nv, 3, 3))
    i_jw = world_inertia_times(att, inert, jw)
    # Σ_k over segments, 3-vector dot over the last axis; elementwise, no TF32 matmul on GPU
    M = jnp.sum(tree.masses[:, None, None] * dot(jv[:, :, None, :], jv[:, None, :, :]), axis=0)
    M = M + jnp.sum(dot(jw[:, :, None, :], i_jw[:, None, :, :]), axis=0)
    return 0.5 * (M + M.T)


@vmapped_by(mass_matrix_batch)
def _mass_matrix(tree, q):
    """The Jacobian route for one state; the composite-rigid-body kernel under `jax.vmap`
    (`vmapped_by`: derivatives are the Jacobian route's)."""
    return _jacobian_mass_matrix(tree, q)


@public
def bias_forces(
    tree: SegmentTree, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"], *, check: bool = False
) -> Float[Array, " n"]:
    """``C(q, qd) qd + g(q)`` ``(nv,)`` N·m / N, so that ``M qdd + bias = tau``."""
    q = as_state(tree, q, "q", check)
    qd = as_state(tree, qd, "qd", check)
    out = _tau(tree, q, qd, jnp.zeros_like(qd))
    return finite(out, "bias_forces result") if check else out


@public
def gravity_forces(tree: SegmentTree, q: Float[ArrayLike, " n"], *, check: bool = False) -> Float[Array, " n"]:
    """``g(q)`` ``(nv,)`` N·m / N: the generalised forces that hold the model still against
    gravity (``g = ∂V/∂q`` for revolute and prismatic coordinates; the gravity moment and force
    in the segment frame for a ball or free joint)."""
    q = as_state(tree, q, "q", check)
    if _one_segment.applies(tree):
        out = _one_segment.gravity_forces(tree, q)
    else:
        z = jnp.zeros(tree.nv, q.dtype)
        out = _tau(tree, q, z, z)
    return finite(out, "gravity_forces result") if check else out


# ---- the model check of `SegmentTree.from_dict` that needs the mass matrix (moved from _validate) ----

#: random configurations at which `check_nonsingular` evaluates M, and its relative threshold
_SINGULAR_SAMPLES = 3
_SINGULAR_RTOL = 1e-10


def coordinate_label(joint_types: tuple[str, ...], names: tuple[str, ...], j: int) -> str:
    """``"segment 'x' (spherical joint, ω_z)"``: velocity coordinate ``j`` of a tree, for messages."""
    d = _dofs(tuple(joint_types))
    i = int(d.segment[j])
    t = joint_types[i]
    if t in ("revolute", "prismatic"):
        return f"segment {names[i]!r} ({t} joint)"
    k = j - int(np.argmax(d.segment == i))
    part = ("v_x", "v_y", "v_z", "ω_x", "ω_y", "ω_z")[k + (3 if t == "spherical" else 0)]
    return f"segment {names[i]!r} ({t} joint, {part} in the segment frame)"


def check_nonsingular(v: dict[str, Any]) -> None:
    """Refuse a model whose mass matrix is singular for every configuration: a coordinate that
    moves no mass or inertia (a massless leaf with a DOF, a ball joint on a slender rod that can
    spin about its own axis, …). ``v``: `validate_model_dict`'s result.

    When every mass is positive and every inertia positive-definite, ``M`` is positive-definite
    everywhere and nothing is computed. Otherwise ``M`` is evaluated (float64) at
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
    with jax.enable_x64(True):
        tree = SegmentTree(**{k: jnp.asarray(v[k], jnp.float64) for k in ARRAY_FIELDS},
                           names=v["names"], parents=v["parents"], joint_types=v["joint_types"], name=v["name"])
        if tree.nv == 0:
            return
        # the same tree with every inertia made isotropic (trace / 2, as large as its two largest
        # principal moments on average): its diagonal is what each coordinate would move if no
        # inertia had a zero principal moment
        iso = np.trace(v["inertias"], axis1=1, axis2=2)[:, None, None] / 2 * np.eye(3)
        rounder = SegmentTree(**{k: jnp.asarray(iso if k == "inertias" else v[k], jnp.float64) for k in ARRAY_FIELDS},
                              names=v["names"], parents=v["parents"], joint_types=v["joint_types"], name=v["name"])
        null = None
        for key in jr.split(jr.PRNGKey(0), _SINGULAR_SAMPLES):
            q = random_configuration(tree, key)
            M = np.asarray(mass_matrix(tree, q))
            reach = np.diag(np.asarray(mass_matrix(rounder, q)))
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


MODEL_CHECKS.append(check_nonsingular)
