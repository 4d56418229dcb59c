"""Rigid-body dynamics of segment trees: one file per algorithm."""

from jaxbio.dynamics.energy import (center_of_mass, kinetic_energy, kinetic_energy_gradient, potential_energy,
                                   segment_coms)
from jaxbio.dynamics.forward import forward_dynamics
from jaxbio.dynamics.kinematics import SegmentMotion, forward_kinematics, segment_motion
from jaxbio.dynamics.mass_matrix import bias_forces, com_jacobians, gravity_forces, mass_matrix
from jaxbio.dynamics.rnea import inverse_dynamics, rnea, segment_wrenches

__all__ = [
    "SegmentMotion",
    "bias_forces",
    "center_of_mass",
    "com_jacobians",
    "forward_dynamics",
    "forward_kinematics",
    "gravity_forces",
    "inverse_dynamics",
    "kinetic_energy",
    "kinetic_energy_gradient",
    "mass_matrix",
    "potential_energy",
    "rnea",
    "segment_coms",
    "segment_motion",
    "segment_wrenches",
]
