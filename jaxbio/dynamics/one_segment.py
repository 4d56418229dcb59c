"""Closed forms for a tree of one segment: a single revolute or prismatic joint on the ground.

The sprinter (`jaxbio.sprint`), a pendulum on a hinge or a mass on a slider: for one joint the
kinetic energy ``T = ½ M q̇²`` has a constant ``M`` (a slider moves the segment without turning it;
a hinge turns it about its own fixed axis), so

- ``M = m`` (prismatic, unit axis) or ``M = sᵀ (I_C + m(|c|² E − c cᵀ)) s`` (revolute: the
  inertia about the axis through the joint centre, parallel-axis theorem; ``s``, ``c``, ``I_C``
  in the segment frame, where the hinge axis does not move);
- ``∂T/∂q = 0``;
- the COM in the world ``c_w = o + R₀ (s q + c)`` (prismatic) or ``o + R₀ R(s, q) c``
  (revolute), with ``o``, ``R₀`` the joint's placement; ``V = −m g · c_w`` and
  ``g(q) = ∂V/∂q = −m g · ∂c_w/∂q``, ``∂c_w/∂q = R₀ s`` or ``R₀ (s × R(s, q) c)``; a slider's
  forms take ``g · R₀ v`` from the raw placement quaternion and axis without normalising them
  (`_gravity_along`): they are the sprinter's, traced in every fit.

The public functions of `jaxbio.dynamics` use these for ``tree.nq == 1`` instead of the level
recursion and the batch kernels: the same numbers (tested against the general routes), without
the machinery whose tracing and compilation dominate such a small model inside a vmapped fit
(the sprint fit's Jacobian of split times on the general routes: benchmarks/README.md, "Measurements behind design choices";
see benchmarks/sprint.py for the fit with these closed forms).
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxbio import quaternion as quat
from jaxbio.spatial import cross, dot


def applies(tree) -> bool:
    """Whether the closed forms apply (static): one segment on a revolute or prismatic joint."""
    return tree.n_segments == 1 and tree.is_axial


def _revolute(tree) -> bool:
    return tree.joint_types[0] == "revolute"


def mass_matrix(tree, q):
    """``(1, 1)``: ``m`` or the inertia about the hinge axis."""
    m = tree.masses[0]
    if _revolute(tree):
        s, c = tree.unit_axes[0], tree.coms[0]
        about_joint = tree.inertias[0] + m * (dot(c, c) * jnp.eye(3, dtype=c.dtype) - c[:, None] * c[None, :])
        value = dot(s, about_joint @ s)
    else:
        value = m * _slider_scale(tree)[0]
    return jnp.reshape(value, (1, 1)) + jnp.zeros_like(q)[:, None]


def _slider_scale(tree):
    """``|ŝ|²`` (1, or 0 for a zero axis; NaN stays NaN) and ``1/|a|`` (0 for a zero axis) of a
    slider's raw axis ``a``: a slider's closed forms need no unit vectors."""
    a = tree.axes[0]
    a2 = jnp.sum(a * a)
    pos = a2 > 0
    return jnp.where(pos, 1.0, a2), jnp.where(pos, 1.0 / jnp.sqrt(jnp.where(pos, a2, 1.0)), 0.0)


def _gravity_along(tree, v):
    """``g · R₀ v`` for the joint placement ``r = (w, u)`` without normalising it: ``r v r* =
    (w² − u·u) v + 2 (u·v) u + 2 w u × v = |r|² R(r̂) v``, so ``g · R₀ v = [(w² − u·u) g·v +
    2 (u·v)(u·g) + 2 w u·(v × g)] / |r|²`` (a zero ``r`` reads as the identity, like
    `SegmentTree.unit_orientations`). A third of the operations of the general rotation: the
    sprinter's vector field is one slider, traced and compiled in every fit."""
    r, g = tree.orientations[0], tree.gravity
    w, u = r[0], r[1:]
    gv = jnp.dot(g, v)
    r2 = jnp.sum(r * r)
    turned = (w * w - jnp.dot(u, u)) * gv + 2.0 * jnp.dot(u, v) * jnp.dot(u, g) + 2.0 * w * jnp.dot(u, jnp.cross(v, g))
    pos = r2 > 0
    return jnp.where(pos, turned / jnp.where(pos, r2, 1.0), gv)


def _lever(tree, q):
    """``∂c_w/∂q`` ``(3,)`` of a hinge: ``R₀ (s × R(s, q) c)``."""
    s, r0 = tree.unit_axes[0], tree.unit_orientations[0]
    return quat.rotate(r0, cross(s, quat.rotate(quat.from_axis_angle(s, q[0]), tree.coms[0])))


def potential_energy(tree, q):
    """``V = −m g · c_w`` J, ``c_w = o + R₀ R(s, q) c`` (hinge) or ``o + R₀ (ŝ q + c)`` (slider)."""
    m, o, c = tree.masses[0], tree.origins[0], tree.coms[0]
    if _revolute(tree):
        s = tree.unit_axes[0]
        com = o + quat.rotate(tree.unit_orientations[0], quat.rotate(quat.from_axis_angle(s, q[0]), c))
        return -m * dot(tree.gravity, com)
    along = _gravity_along(tree, tree.axes[0]) * _slider_scale(tree)[1]
    return -m * (jnp.dot(tree.gravity, o) + along * q[0] + _gravity_along(tree, c))


def gravity_forces(tree, q):
    """``g(q) = ∂V/∂q`` ``(1,)``: ``−m g · ∂c_w/∂q`` with ``∂c_w/∂q = R₀ (s × R(s, q) c)`` (hinge)
    or ``R₀ ŝ`` (slider)."""
    if _revolute(tree):
        g = dot(tree.gravity, _lever(tree, q))
    else:
        g = _gravity_along(tree, tree.axes[0]) * _slider_scale(tree)[1] + 0.0 * q[0]
    return jnp.reshape(-tree.masses[0] * g, (1,))


def kinetic_energy_gradient(tree, q, qd):
    """``∂T/∂q = 0`` ``(1,)``."""
    return jnp.zeros_like(q) * qd


def hamiltonian_terms(tree, q, p, added_inertia=None):
    """``(∂H/∂p, ∂H/∂q)`` ``(1,)`` each of ``H = ½ p²/(M + J) + V(q)``: ``q̇ = p/(M + J)`` and
    ``g(q) − ∂T/∂q`` (``J`` ``(1,)`` or scalar, a drive's added inertia, default none). What
    `jaxbio.HamiltonianSystem`'s vector field uses for a one-segment tree, calling these closed
    forms directly rather than through the public, argument-checking `jaxbio.dynamics` functions:
    their jit wrappers are traced again under every transformation of a fit (the sprint fit's
    trace, benchmarks/README.md)."""
    M = mass_matrix(tree, q)
    if added_inertia is not None:
        M = M + jnp.diag(jnp.broadcast_to(added_inertia, M.shape[:1]))
    qd = p / M[0]
    return qd, -kinetic_energy_gradient(tree, q, qd) + gravity_forces(tree, q)
