"""Muscle-force estimation: seed 001's arm, seed 003's inverse simulation, static optimisation.

- `jaxbio.estimation.arm`: seed 001 §3 — the static arm holding a weight, biceps/triceps tensions
  that cancel the elbow moment (eqs. 4–5), the arm-with-hand tree, and the elbow inverse kinematics
  with its no-solution / single-point / circle cases (`elbow_position`).
"""

from jaxbio.estimation import arm

__all__ = ["arm"]
