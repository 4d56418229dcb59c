"""Reproductions of the source papers: each paper's specific system, built from the core.

One module per source paper:

| module | paper | what it reproduces |
|---|---|---|
| `du_arm` | Du 2021 (after Dumas et al. 2004), §3 | the static arm holding a weight, biceps/triceps tensions (eqs. 4–5), the arm with a hand, the elbow inverse kinematics (§3.3.1) |
| `biscarini_chain` | Biscarini 2021 | the non-slender planar n-link chain: closed-form joint reactions (eqs. 8–11) and torques (eqs. 13, 20–24), linear muscles, external resistances |
| `blajer_body` | Blajer, Dziewiecki & Mazur 2007 | the 11-DOF sagittal body ``sagittal11`` with the 18 Gait10dof18musc muscles, its inverse-simulation model and the synthetic squat (`squat_motion`) |
| `watanabe_pendulum` | Watanabe & Duarte, *Matrix formalism of the equations of movement* (notebook) | the notebook's actuated double pendulum (M, C, G; explicit Euler; PID) and a benchmark-tuned batched vector field tested equal to the generic path |

The generic algorithms they use (kinematics, the wrench recursion, constrained dynamics and
contacts, muscles, estimation) live in `jaxbio.dynamics`, `jaxbio.muscles` and
`jaxbio.estimation`. ``jaxbio.papers`` is imported on first use (``jb.papers``).
"""

from jaxbio.papers import biscarini_chain, blajer_body, du_arm, watanabe_pendulum

__all__ = ["biscarini_chain", "blajer_body", "du_arm", "watanabe_pendulum"]
