"""Muscle-force estimation: inverse simulation, static optimisation, parameter fitting.

Du's (2021) arm and Blajer et al.'s (2007) body are paper reproductions: `jaxbio.papers.du_arm`,
`jaxbio.papers.blajer_body`.

- `jaxbio.estimation.pseudoinverse`: `clamped_pseudoinverse`, the min-norm H† = Hᵀ(HHᵀ)⁻¹ solution
  (Blajer et al. 2007, eq. 6) with negative muscle forces clamped and the solve repeated.
- `inverse_simulation` / `inverse_simulate_motion`: Blajer et al.'s (2007) inverse simulation — flying phase
  (uncontrolled-subspace residual eq. 2, controlled subspace eqs. 3–5) and support phase with foot
  constraints (eqs. 7–8) — on any floating-base tree with muscles (Blajer et al.'s (2007) 11-DOF body is
  `jaxbio.papers.blajer_body.sagittal11_muscle_model`); `joint_reactions` / `actuation_loads`: the
  joint reactions from the identified muscle forces (``B u``) or net joint torques (``B′u′``).
- `static_optimization` / `static_optimization_motion`: per-frame static optimisation, min Σ (F/F_max)ᵖ or Σ aᵖ
  with force–length–velocity, subject to the joint moments and 0 ≤ a ≤ 1; jitted, vmapped,
  differentiable through the optimum (implicit function theorem); infeasible frames reported.
- `jaxbio.estimation.gradient`: `fit_muscle_parameters` and `fit_excitations` recover muscle
  parameters (e.g. maximal isometric forces) or excitation series from motion, by optimistix's
  L-BFGS through Diffrax (forward- or reverse-mode sensitivities); jittable and vmappable over
  subjects, results in a `MuscleFitResult`.
"""

from jaxbio.estimation import gradient, pseudoinverse
from jaxbio.estimation._inverse_simulation import (
    InverseSimulationModel,
    InverseSimulationResult,
    actuation_loads,
    inverse_simulate_motion,
    inverse_simulation,
    joint_reactions,
    unproducible_moments,
)
from jaxbio.estimation.gradient import (
    FitObjective,
    MuscleFitResult,
    PiecewiseLinearExcitation,
    fit_excitations,
    fit_muscle_parameters,
)
from jaxbio.estimation.pseudoinverse import PseudoinverseSolution, clamped_pseudoinverse
from jaxbio.estimation._static_optimization import (
    StaticOptimizationResult,
    check_feasible,
    muscle_force_components,
    static_optimization,
    static_optimization_motion,
)

__all__ = [
    "FitObjective",
    "MuscleFitResult",
    "PiecewiseLinearExcitation",
    "fit_excitations",
    "fit_muscle_parameters",
    "gradient",
    "InverseSimulationModel",
    "InverseSimulationResult",
    "PseudoinverseSolution",
    "clamped_pseudoinverse",
    "actuation_loads",
    "inverse_simulate_motion",
    "joint_reactions",
    "inverse_simulation",
    "pseudoinverse",
    "StaticOptimizationResult",
    "check_feasible",
    "muscle_force_components",
    "static_optimization",
    "static_optimization_motion",
    "unproducible_moments",
]
