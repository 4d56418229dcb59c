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
  ``g(q) = ∂V/∂q = −m g · ∂c_w/∂q``, ``∂c_w/∂q = R₀ s`` or ``R₀ (s × R(s, q) c)``.

The public functions of `jaxbio.dynamics` use these for ``tree.nq == 1`` instead of the level
recursion and the batch kernels: the same numbers (tested against the general routes), without
the machinery whose tracing and compilation dominate such a small model inside a vmapped fit
(the sprint fit's Jacobian of split times traced in 17 s and compiled in 18 s on the general
routes; see benchmarks/sprint.py for the fit with these closed forms).
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
    s, c, m = tree.unit_axes[0], tree.coms[0], tree.masses[0]
    if _revolute(tree):
        about_joint = tree.inertias[0] + m * (dot(c, c) * jnp.eye(3, dtype=c.dtype) - c[:, None] * c[None, :])
        value = dot(s, about_joint @ s)
    else:
        value = m * dot(s, s)
    return jnp.reshape(value, (1, 1)) + jnp.zeros_like(q)[:, None]


def _com_and_lever(tree, q):
    """World COM ``(3,)`` and ``∂c_w/∂q`` ``(3,)``."""
    s, c, o, r0 = tree.unit_axes[0], tree.coms[0], tree.origins[0], tree.unit_orientations[0]
    if _revolute(tree):
        turned = quat.rotate(quat.from_axis_angle(s, q[0]), c)
        return o + quat.rotate(r0, turned), quat.rotate(r0, cross(s, turned))
    return o + quat.rotate(r0, s * q[0] + c), quat.rotate(r0, s) + 0.0 * q[0]


def potential_energy(tree, q):
    """``V = −m g · c_w`` J."""
    com, _ = _com_and_lever(tree, q)
    return -tree.masses[0] * dot(tree.gravity, com)


def gravity_forces(tree, q):
    """``g(q) = ∂V/∂q`` ``(1,)``."""
    _, lever = _com_and_lever(tree, q)
    return jnp.reshape(-tree.masses[0] * dot(tree.gravity, lever), (1,))


def kinetic_energy_gradient(tree, q, qd):
    """``∂T/∂q = 0`` ``(1,)``."""
    return jnp.zeros_like(q) * qd
