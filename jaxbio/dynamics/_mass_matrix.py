"""Joint-space mass matrix from segment Jacobians, and the generalised bias and gravity forces.

``M(q) = Σ_k m_k J_v,kᵀ J_v,k + J_ω,kᵀ I_k J_ω,k`` with ``J_v,k`` the world-frame Jacobian of
segment ``k``'s centre of mass and ``J_ω,k`` of its angular velocity, ``I_k`` its inertia rotated
to the world. Column ``j`` of the Jacobians is non-zero only where joint ``j`` moves segment ``k``
(a static ancestor mask), so the whole matrix is a handful of vectorised products with no
recursion at all. This is deliberately a different route from the wrench recursion: the tests
check ``inverse_dynamics(q, qd, forward_dynamics(q, qd, tau)) = tau`` across the two.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio.dynamics import one_segment as _one_segment
from jaxbio.dynamics.batch_last import mass_matrix_batch, vmapped_by
from jaxbio.dynamics._checks import public, as_state, finite
from jaxbio.dynamics.kinematics import point_jacobian, segment_motion
from jaxbio.dynamics._rnea import _tau, world_inertia_times
from jaxbio.spatial import dot
from jaxbio.tree import SegmentTree

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
