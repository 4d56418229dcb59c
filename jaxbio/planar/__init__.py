"""Planar (sagittal) closed forms and joint-reaction schemes (seeds 002 and 003 §3).

- `jaxbio.planar.chain`: Biscarini's non-slender n-link chain (seed 002) — `PlanarChain`,
  `LinearMuscles`, `Contacts`, the closed-form joint reactions `chain_reactions` (eqs. 8–11) and
  joint torques `chain_torques` (eqs. 13, 20–24), and `PlanarChain.to_tree()` for the recursion.
- `jaxbio.planar.absolute`: any planar `SegmentTree` in absolute coordinates (each body's COM x, y
  and angle): D = ∂p/∂q, M = diag(m, m, I), joint and ground-contact constraints (`GroundContact`).
- `jaxbio.planar.reactions`: joint reactions three ways (Blajer et al., seed 003 §3) — the
  d'Alembert recursion `reactions_recursion`, Lagrange multipliers in absolute coordinates
  `reactions_lagrange` (eq. 10), the augmented joint-coordinate method `reactions_augmented`
  (eqs. 11–16) — and `constrained_forward_dynamics` for the support phase.
"""

from jaxbio.planar import absolute
from jaxbio.planar.absolute import GroundContact

from jaxbio.planar.chain import (
    BASE,
    Contacts,
    LinearMuscles,
    PlanarChain,
    base_load_from_balance,
    chain_reactions,
    chain_torques,
    external_wrenches,
    joint_to_link_angles,
    link_to_joint_angles,
    muscle_forces,
    muscle_joint_forces,
    muscle_torques,
)
from jaxbio.planar.reactions import (
    augmented_multipliers,
    constrained_forward_dynamics,
    contact_external,
    lagrange_multipliers,
    planar_wrenches,
    reactions_augmented,
    reactions_lagrange,
    reactions_recursion,
)

__all__ = [
    "GroundContact",
    "absolute",
    "augmented_multipliers",
    "constrained_forward_dynamics",
    "contact_external",
    "lagrange_multipliers",
    "planar_wrenches",
    "reactions_augmented",
    "reactions_lagrange",
    "reactions_recursion",
    "BASE",
    "Contacts",
    "LinearMuscles",
    "PlanarChain",
    "base_load_from_balance",
    "chain_reactions",
    "chain_torques",
    "external_wrenches",
    "joint_to_link_angles",
    "link_to_joint_angles",
    "muscle_forces",
    "muscle_joint_forces",
    "muscle_torques",
]
