"""Newton–Euler wrench recursion in the global frame (Dumas et al. 2004; Du 2021, eq. 2).

For every segment ``i`` (attitude quaternion ``Q_i``, attitude matrix ``R_i`` of Du 2021, eq. 1)
the wrench it receives from its parent through its joint, about the joint centre ``P_i``, is

    F_i = m_i (a_Ci − g) − F_ext,i + Σ_children F_c
    M_i = I_i α_i + ω_i × I_i ω_i + c_i × m_i (a_Ci − g) − M_ext,i
          + Σ_children (M_c + (P_c − P_i) × F_c)

with ``I_i = R_i I_i^body R_iᵀ`` the inertia rotated to the global frame and ``c_i = R_i com_i``.
This is eq. 2 written about the proximal joint centre, with the children's (distal) wrenches
transported as in Du 2021, eq. 3. Trees are processed by hierarchy level (Du 2021, §3.3): all
segments of one depth at once, deepest first.
"""

from __future__ import annotations


import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio.dynamics._adjoint import inverse_dynamics_vjp_batch
from jaxbio.dynamics.batch_last import inverse_dynamics_batch, vmapped_by
from jaxbio.dynamics._checks import public, as_external, as_state, finite
from jaxbio.dynamics._levels import backward_pass, levels_of
from jaxbio import _soa as soa
from jaxbio.dynamics._motion import motion_soa
from jaxbio.spatial import matvec
from jaxbio.tree import SegmentTree

__all__ = ["inverse_dynamics", "segment_wrenches", "rnea"]

External = tuple[Float[ArrayLike, "n 3"], Float[ArrayLike, "n 3"]] | None


def world_inertia_times(attitude, inertia_body, v):
    """``R I Rᵀ v`` for world-frame ``v`` (arrays ``(..., 4)``, ``(..., 3, 3)``, ``(..., 3)``):
    rotate into the body, multiply, rotate back."""
    vb = quat.rotate(quat.conjugate(attitude), v)
    return quat.rotate(attitude, matvec(inertia_body, vb))


def rnea(tree: SegmentTree, q, qd, qdd, external=None):
    """Unchecked core: ``(tau (nv,), forces, moments)`` with ``forces``/``moments``
    ``(n_segments, 3)``; see `segment_wrenches`."""
    mo = motion_soa(tree, q, qd, qdd, gravity_as_base=True)
    att, w = mo["attitude"], mo["omega"]
    c = soa.qrot(att, soa.split(tree.coms, 3))
    a_com = soa.add(mo["acceleration"], soa.add(soa.cross(mo["alpha"], c), soa.cross(w, soa.cross(w, c))))
    f_own = soa.scale(a_com, tree.masses)  # m (a_C − g)
    inertia = soa.split(tree.inertias.reshape(tree.inertias.shape[:-2] + (9,)), 9)

    def i_world(v):  # R I Rᵀ v
        return soa.qrot(att, soa.matvec(inertia, soa.qrot_inv(att, v)))

    m_own = soa.add(soa.add(i_world(mo["alpha"]), soa.cross(w, i_world(w))), soa.cross(c, f_own))
    if external is not None:
        f_own = soa.sub(f_own, soa.split(external[0], 3))
        m_own = soa.sub(m_own, soa.split(external[1], 3))

    lv = levels_of(tree.parents)
    offset = mo["offset"]

    def transport(total, r):  # child wrench → about the parent's origin
        f, m = total
        return f, soa.add(m, soa.cross(r, f))

    forces, moments = backward_pass(lv, (f_own, m_own), transport, offset)
    # each velocity coordinate: its world axis · its segment's moment (angular) or force
    d = tree.dofs
    seg = jnp.asarray(d.segment)
    tau = jnp.where(
        d.rotational,
        soa.dot(mo["axis"], tuple(m[seg] for m in moments)),
        soa.dot(mo["axis"], tuple(f[seg] for f in forces)),
    )
    return tau, soa.join(forces), soa.join(moments)


@public
def inverse_dynamics(
    tree: SegmentTree,
    q: Float[ArrayLike, " nq"],
    qd: Float[ArrayLike, " nv"],
    qdd: Float[ArrayLike, " nv"],
    external: External = None,
    *,
    check: bool = False,
) -> Float[Array, " nv"]:
    """Generalised forces that produce ``qdd`` at ``(q, qd)``: the wrench recursion (Du 2021, eq. 2).

    Args:
        tree: the model.
        q: ``(nq,)`` generalised coordinates: rad / m, unit quaternions ``(w, x, y, z)`` of ball
            and free joints (see `jaxbio.SegmentTree`).
        qd: ``(nv,)`` rad/s / m/s, generalised velocities (segment-frame ``ω`` and ``v`` of ball
            and free joints).
        qdd: ``(nv,)`` rad/s² / m/s², generalised accelerations (their time derivatives).
        external: optional ``(forces, moments)``, each ``(n_segments, 3)``, world frame: N applied
            to each segment, and N·m about that segment's origin (its joint centre).
        check: if true, NaN/inf in any input or in the result raise at run time
            (`equinox.error_if`, works under jit); shapes are always checked before tracing.

    Returns:
        ``tau`` ``(nv,)`` N·m / N: joint moment (revolute) or force (prismatic) on each segment
        from its parent, positive along the joint axis; for a ball joint the moment, for a free
        joint ``[force, moment]`` (about the segment origin), in the segment frame.
    """
    q, qd, qdd, external = _inputs(tree, q, qd, qdd, external, check)
    tau = _tau(tree, q, qd, qdd, *(external or ()))
    return _out(tau, "inverse_dynamics result", check)


@public
def segment_wrenches(
    tree: SegmentTree,
    q: Float[ArrayLike, " nq"],
    qd: Float[ArrayLike, " nv"],
    qdd: Float[ArrayLike, " nv"],
    external: External = None,
    *,
    check: bool = False,
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """The wrench each segment receives from its parent through its joint.

    Same arguments as `inverse_dynamics`. Returns ``forces`` ``(n_segments, 3)`` N and
    ``moments`` ``(n_segments, 3)`` N·m about the joint centre, both in the world frame: the joint reaction force and
    the net joint moment of Du 2021 and Blajer et al. 2007 (the component of ``moments`` along a revolute
    joint's axis is its ``tau``; the rest is carried by the joint's structure).
    """
    q, qd, qdd, external = _inputs(tree, q, qd, qdd, external, check)
    _, forces, moments = rnea(tree, q, qd, qdd, external)
    return _out(forces, "segment forces", check), _out(moments, "segment moments", check)


def _plain_tau(tree, q, qd, qdd, *external):
    return rnea(tree, q, qd, qdd, external or None)[0]


def _tau_batch(tree, q, qd, qdd, *external):
    return inverse_dynamics_batch(tree, q, qd, qdd, tuple(external) or None)


class _TauAdjoint:
    """The VJP of `_tau` in ``(q, qd, qdd)`` for ``(B, ·)`` states (see `vmapped_by`): the batch-last
    `jaxbio.dynamics._adjoint.inverse_dynamics_vjp_batch` (axial trees)."""

    n_states = 3

    def supports(self, tree) -> bool:
        return tree.is_axial

    def __call__(self, tree, q, qd, qdd, ct):
        return inverse_dynamics_vjp_batch(tree, q, qd, qdd, ct)


@vmapped_by(_tau_batch, adjoint=_TauAdjoint())
def _tau(tree, q, qd, qdd, *external):
    """``tau`` of one state by the per-state recursion, except under `jax.vmap`, which runs the
    batch-last kernel of `jaxbio.dynamics.batch_last` (same numbers to round-off, several times
    faster on CPU; see that module); derivatives are the per-state recursion's (`vmapped_by`).
    ``external``: nothing, or ``(forces, moments)``."""
    return _plain_tau(tree, q, qd, qdd, *external)


def _inputs(tree, q, qd, qdd, external, check):
    q = as_state(tree, q, "q", check)
    qd = as_state(tree, qd, "qd", check)
    qdd = as_state(tree, qdd, "qdd", check)
    return q, qd, qdd, as_external(tree, external, check)


def _out(x, name, check):
    return finite(x, name) if check else x
