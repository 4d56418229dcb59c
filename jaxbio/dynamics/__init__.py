"""Rigid-body dynamics of segment trees: one file per algorithm.

- `kinematics`: forward kinematics and the one point Jacobian (`point_jacobian`).
- `inverse_dynamics` and `segment_wrenches` (the wrench recursion, private `_rnea`), `mass_matrix`,
  `forward`, `energy`: inverse and forward dynamics, energies; `model_coordinates`: all of them
  for a `jaxbio.Model` in its own coordinates.
- `loads`: point forces on segments as ``external`` wrenches (`point_loads`).
- `contact`: the one contact type (`Contact`, a point of a segment held on the ground) and its
  constraint rows.
- `absolute`: absolute (Cartesian) coordinates of any planar tree.
- `constrained`: constrained dynamics of planar trees — the support phase
  (`constrained_forward_dynamics`) and joint reactions three ways (d'Alembert recursion, Lagrange
  multipliers, the augmented joint-coordinate method).
"""

from jaxbio.dynamics.energy import (
    center_of_mass,
    kinetic_energy,
    kinetic_energy_gradient,
    potential_energy,
    segment_coms,
)
from jaxbio.dynamics.forward import forward_dynamics
from jaxbio.dynamics.loads import point_loads
from jaxbio.dynamics.kinematics import SegmentMotion, forward_kinematics, point_jacobian, segment_motion
from jaxbio.dynamics._mass_matrix import bias_forces, com_jacobians, gravity_forces, mass_matrix
from jaxbio.dynamics._rnea import inverse_dynamics, segment_wrenches
from jaxbio.dynamics import model_coordinates  # noqa: F401  (registers the functions' model-coordinate forms)

from jaxbio._lazy import attach  # noqa: E402

# contact and constrained dynamics are imported on first use (`jaxbio sprint` needs neither)
__getattr__, __dir__ = attach(
    __name__,
    globals(),
    submodules=("absolute", "constrained", "contact"),
    exports={
        **{
            name: "constrained"
            for name in (
                "augmented_multipliers",
                "constrained_forward_dynamics",
                "lagrange_multipliers",
                "planar_wrenches",
                "reactions_augmented",
                "reactions_lagrange",
                "reactions_recursion",
            )
        },
        "Contact": "contact",
        "contact_external": "contact",
        "contact_jacobian": "contact",
    },
)

__all__ = [
    "Contact",
    "SegmentMotion",
    "absolute",
    "augmented_multipliers",
    "bias_forces",
    "center_of_mass",
    "com_jacobians",
    "constrained",
    "constrained_forward_dynamics",
    "contact",
    "contact_external",
    "contact_jacobian",
    "forward_dynamics",
    "forward_kinematics",
    "gravity_forces",
    "inverse_dynamics",
    "kinetic_energy",
    "kinetic_energy_gradient",
    "lagrange_multipliers",
    "mass_matrix",
    "planar_wrenches",
    "point_jacobian",
    "point_loads",
    "potential_energy",
    "reactions_augmented",
    "reactions_lagrange",
    "reactions_recursion",
    "segment_coms",
    "segment_motion",
    "segment_wrenches",
]
