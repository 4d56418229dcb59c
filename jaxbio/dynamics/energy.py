"""Kinetic and potential energy and the centre of mass, from the segment motion directly."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio.configuration import velocity_to_qdot
from jaxbio.dynamics import one_segment as _one_segment
from jaxbio.dynamics.batch_last import kinetic_energy_gradient_batch, vmapped_by
from jaxbio.dynamics._checks import public, as_state, finite
from jaxbio.dynamics.kinematics import segment_motion
from jaxbio.dynamics._rnea import _tau, world_inertia_times
from jaxbio.spatial import cross, dot
from jaxbio.tree import SegmentTree

__all__ = ["kinetic_energy", "kinetic_energy_gradient", "potential_energy", "center_of_mass", "segment_coms"]


def segment_coms(tree: SegmentTree, q) -> Float[Array, "n 3"]:
    """World positions ``(n, 3)`` m of every segment's centre of mass."""
    mo = segment_motion(tree, q)
    return mo.position + quat.rotate(mo.attitude, tree.coms)


@public
def kinetic_energy(
    tree: SegmentTree, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"], *, check: bool = False
) -> Float[Array, ""]:
    """``T = Σ ½ m |v_C|² + ½ ω·I ω`` J, summed over segments (equals ``½ qdᵀ M qd``)."""
    q = as_state(tree, q, "q", check)
    qd = as_state(tree, qd, "qd", check)
    mo = segment_motion(tree, q, qd)
    c = quat.rotate(mo.attitude, tree.coms)
    v_com = mo.velocity + cross(mo.omega, c)
    t = 0.5 * jnp.sum(tree.masses * dot(v_com, v_com))
    t = t + 0.5 * jnp.sum(dot(mo.omega, world_inertia_times(mo.attitude, tree.inertias, mo.omega)))
    return finite(t, "kinetic_energy result") if check else t


@public
def potential_energy(tree: SegmentTree, q: Float[ArrayLike, " n"], *, check: bool = False) -> Float[Array, ""]:
    """``V(q) = −Σ m_i g · c_i`` J (zero with every COM at the world origin)."""
    q = as_state(tree, q, "q", check)
    if _one_segment.applies(tree):
        v = _one_segment.potential_energy(tree, q)
    else:
        v = -jnp.sum(tree.masses * dot(segment_coms(tree, q), tree.gravity))
    return finite(v, "potential_energy result") if check else v


@public
def center_of_mass(tree: SegmentTree, q: Float[ArrayLike, " n"], *, check: bool = False) -> Float[Array, 3]:
    """Whole-body centre of mass ``(3,)`` m, world frame."""
    q = as_state(tree, q, "q", check)
    com = jnp.sum(tree.masses[:, None] * segment_coms(tree, q), axis=0) / jnp.sum(tree.masses)
    return finite(com, "center_of_mass result") if check else com


@public
def kinetic_energy_gradient(
    tree: SegmentTree, q: Float[ArrayLike, " nq"], qd: Float[ArrayLike, " nv"], *, check: bool = False
) -> Float[Array, " nv"]:
    """The velocity-dependent part of ``−∂H/∂q`` at fixed momentum, ``(nv,)`` N·m / N:
    ``ṗ = tau − g(q) + kinetic_energy_gradient(q, qd)`` for the momentum ``p = M(q) qd``.

    - Revolute and prismatic joints only: ``∂T/∂q`` at fixed ``qd``, equal to
      ``jax.grad(kinetic_energy, argnums=1)``, which it is for one state. Under `jax.vmap` it
      runs the batch-last kernel of `jaxbio.dynamics.batch_last` (`kinetic_energy_gradient_batch`:
      subtree momenta summed like the wrench recursion's wrenches); its derivatives are those of
      the autodiff route. A one-segment tree: 0 (`jaxbio.dynamics.one_segment`).
    - With ball or free joints ``qd`` is not ``q̇`` (it is the segment-frame ``ω``, ``v``), and
      the same role is played by ``Ṁ qd − C(q, qd) qd``: the rate of ``M(q)`` along
      ``q̇ = G(q) qd`` (`jaxbio.configuration`) applied to ``qd``, minus the Coriolis and
      centrifugal forces (both from the wrench recursion without gravity; for a single tumbling
      body it is Euler's gyroscopic ``p × ω``). For revolute and prismatic coordinates the two
      expressions agree. Under `jax.vmap` the same kernel computes it in one pass as ``Ṡᵀ h``
      (see `kinetic_energy_gradient_batch`); derivatives follow the two recursions.
    """
    q = as_state(tree, q, "q", check)
    qd = as_state(tree, qd, "qd", check)
    if _one_segment.applies(tree):
        out = _one_segment.kinetic_energy_gradient(tree, q, qd)
    else:
        out = _gradient(tree, q, qd)
    return finite(out, "kinetic_energy_gradient result") if check else out


def _momentum_rate(tree, q, qd):
    """``Ṁ qd − C(q, qd) qd`` (see `kinetic_energy_gradient`), by two gravity-free recursions."""
    free = eqx.tree_at(lambda t: t.gravity, tree, jnp.zeros_like(tree.gravity))
    zero = jnp.zeros_like(qd)
    _, m_dot_qd = jax.jvp(lambda x: _tau(free, x, zero, qd), (q,), (velocity_to_qdot(tree, q, qd),))
    return m_dot_qd - _tau(free, q, qd, zero)


def _plain_gradient(tree, q, qd):
    if tree.is_axial:
        return jax.grad(kinetic_energy, argnums=1)(tree, q, qd)
    return _momentum_rate(tree, q, qd)


@vmapped_by(kinetic_energy_gradient_batch)
def _gradient(tree, q, qd):
    """``∂T/∂q`` by autodiff (axial trees) or `_momentum_rate` for one state; the batch-last
    kernel under `jax.vmap` (`vmapped_by`)."""
    return _plain_gradient(tree, q, qd)
