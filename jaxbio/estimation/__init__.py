"""Muscle-force estimation: seed 001's arm, seed 003's inverse simulation, static optimisation.

- `jaxbio.estimation.arm`: seed 001 §3 — the static arm holding a weight, biceps/triceps tensions
  that cancel the elbow moment (eqs. 4–5), the arm-with-hand tree, and the elbow inverse kinematics
  with its no-solution / single-point / circle cases (`elbow_position`).
- `jaxbio.estimation.pseudoinverse`: `clamped_pseudoinverse`, the min-norm H† = Hᵀ(HHᵀ)⁻¹ solution
  (seed 003 eq. 6) with negative muscle forces clamped and the solve repeated.
- `inverse_simulation` / `inverse_simulate_motion`: seed 003's inverse simulation — flying phase
  (uncontrolled-subspace residual eq. 2, controlled subspace eqs. 3–5) and support phase with foot
  constraints (eqs. 7–8) — on the 11-DOF sagittal body with OpenSim's gait10dof18musc muscles
  (`sagittal11_muscle_model`).
- `static_optimization` / `static_optimization_motion`: per-frame static optimisation, min Σ (F/F_max)ᵖ or Σ aᵖ
  with force–length–velocity, subject to the joint moments and 0 ≤ a ≤ 1; jitted, vmapped,
  differentiable through the optimum (implicit function theorem); infeasible frames reported.
- `jaxbio.estimation.gradient`: `fit_muscle_parameters` and `fit_excitations` recover muscle
  parameters (e.g. maximal isometric forces) or excitation series from motion, by optax through
  Diffrax (forward- or reverse-mode sensitivities).
"""

from jaxbio.estimation import arm, gradient, pseudoinverse, sagittal_muscles
from jaxbio.estimation._inverse_simulation import (
    InverseSimulationModel,
    InverseSimulationResult,
    inverse_simulate_motion,
    inverse_simulation,
    unproducible_moments,
)
from jaxbio.estimation.gradient import FitResult, PiecewiseLinearExcitation, fit_excitations, fit_muscle_parameters
from jaxbio.estimation.pseudoinverse import PseudoinverseSolution, clamped_pseudoinverse
from jaxbio.estimation._static_optimization import (
    StaticOptimizationResult,
    check_feasible,
    muscle_force_components,
    static_optimization,
    static_optimization_motion,
)
from jaxbio.estimation.sagittal_muscles import sagittal11_muscle_model, sagittal11_muscles

__all__ = [
    "FitResult",
    "PiecewiseLinearExcitation",
    "fit_excitations",
    "fit_muscle_parameters",
    "gradient",
    "InverseSimulationModel",
    "InverseSimulationResult",
    "PseudoinverseSolution",
    "arm",
    "clamped_pseudoinverse",
    "inverse_simulate_motion",
    "inverse_simulation",
    "pseudoinverse",
    "sagittal11_muscle_model",
    "sagittal11_muscles",
    "sagittal_muscles",
    "StaticOptimizationResult",
    "check_feasible",
    "muscle_force_components",
    "static_optimization",
    "static_optimization_motion",
    "unproducible_moments",
]
