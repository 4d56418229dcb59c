"""Kinetic and potential energy and the centre of mass, from the segment motion directly."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio.dynamics._checks import public, as_state, finite
from jaxbio.dynamics.kinematics import segment_motion
from jaxbio.dynamics.rnea import world_inertia_times
from jaxbio.spatial import cross, dot
from jaxbio.tree import SegmentTree

__all__ = ["kinetic_energy", "potential_energy", "center_of_mass", "segment_coms"]


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
    v = -jnp.sum(tree.masses * dot(segment_coms(tree, q), tree.gravity))
    return finite(v, "potential_energy result") if check else v


@public
def center_of_mass(tree: SegmentTree, q: Float[ArrayLike, " n"], *, check: bool = False) -> Float[Array, "3"]:
    """Whole-body centre of mass ``(3,)`` m, world frame."""
    q = as_state(tree, q, "q", check)
    com = jnp.sum(tree.masses[:, None] * segment_coms(tree, q), axis=0) / jnp.sum(tree.masses)
    return finite(com, "center_of_mass result") if check else com
