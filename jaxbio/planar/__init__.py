"""Biscarini's planar n-link chain (seed 002).

- `jaxbio.planar.chain`: Biscarini's non-slender n-link chain (seed 002) — `PlanarChain`,
  `LinearMuscles`, `Contacts`, the closed-form joint reactions `chain_reactions` (eqs. 8–11) and
  joint torques `chain_torques` (eqs. 13, 20–24), and `PlanarChain.to_tree()` for the recursion.
Generic planar algorithms (absolute coordinates, contacts, joint reactions three ways, the
support phase) live in `jaxbio.dynamics` (`absolute`, `contact`, `constrained`).
"""

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

__all__ = [
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
