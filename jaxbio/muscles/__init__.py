"""Muscles and actuators (seeds 000, 001, 002).

- `jaxbio.muscles.curves`: Hill force–velocity (seed 000) with a smooth eccentric branch, the
  De Groote et al. 2016 force–length, passive and tendon curves, and `HillMuscle` (many muscles
  as arrays; rigid or compliant tendon).
- `jaxbio.muscles.activation`: Wilkie's active-state equation and its impulse solutions,
  first-order activation dynamics.
- `jaxbio.muscles.actuators`: Rayleigh–Van der Pol dissipation, the hybrid DC motor, and
  `MuscleDrive` (fitness × impulse × Hill, a `jaxbio.hamiltonian.Drive`).
- `jaxbio.muscles.geometry`: `MusclePaths` through points fixed in segment frames, optionally over
  OpenSim wrap surfaces; lengths, lengthening velocities, moment arms r = −∂l/∂q, generalised
  forces and the wrenches the muscles apply (`muscle_wrenches`).
- `jaxbio.muscles.wrapping`: OpenSim's WrapCylinder, WrapSphere and WrapEllipsoid on one path
  segment, `WrapObjects` on a model, and OpenSim's PathWrap algorithm over whole paths.
- `jaxbio.muscles.drive`: `MuscleActuatedDrive`, Hill muscles on paths with activation dynamics
  as a stateful drive (activations are ODE states of the Hamiltonian system).
- `jaxbio.muscles.fatigue`: per-muscle fatigue, the three-compartment model with recovery of Xia &
  Frey-Law (2008) (`ThreeCompartmentFatigue`, a `jaxbio.hamiltonian.FitnessLaw`).
- `jaxbio.muscles.sets`: `load_muscle_set("arm26" | "gait10dof18musc")` from OpenSim-derived data.
- `jaxbio.muscles.thelen`: OpenSim's `Thelen2003Muscle` (its curves, parameters, equilibrium and the
  forces its static optimisation uses).
- `jaxbio.muscles.millard`: OpenSim's `Millard2012EquilibriumMuscle` and its Bézier curves
  (`ActiveForceLengthCurve`, `ForceVelocityCurve`, `ForceVelocityInverseCurve`,
  `FiberForceLengthCurve`, `TendonForceLengthCurve`), built as OpenSim builds them.
- `MuscleEquilibrium`: the state both report after ``equilibrateMuscles``.
"""

from jaxbio.muscles import (
    activation,
    actuators,
    curves,
    drive,
    fatigue,
    geometry,
    millard,
    sets,
    thelen,
    wrapping,
)
from jaxbio.muscles._opensim_common import MuscleEquilibrium
from jaxbio.muscles.actuators import DCMotor, MuscleDrive, RayleighVanDerPol
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.drive import MuscleActuatedDrive
from jaxbio.muscles.fatigue import ThreeCompartmentFatigue
from jaxbio.muscles.geometry import MusclePaths
from jaxbio.muscles.millard import (
    ActiveForceLengthCurve,
    FiberForceLengthCurve,
    ForceVelocityCurve,
    ForceVelocityInverseCurve,
    Millard2012EquilibriumMuscle,
    TendonForceLengthCurve,
)
from jaxbio.muscles.sets import load_muscle_set
from jaxbio.muscles.thelen import Thelen2003Muscle
from jaxbio.muscles.wrapping import WrapObjects

__all__ = [
    "ActiveForceLengthCurve",
    "DCMotor",
    "FiberForceLengthCurve",
    "ForceVelocityCurve",
    "ForceVelocityInverseCurve",
    "HillMuscle",
    "Millard2012EquilibriumMuscle",
    "MuscleEquilibrium",
    "MuscleActuatedDrive",
    "MuscleDrive",
    "MusclePaths",
    "RayleighVanDerPol",
    "TendonForceLengthCurve",
    "ThreeCompartmentFatigue",
    "Thelen2003Muscle",
    "WrapObjects",
    "activation",
    "actuators",
    "curves",
    "drive",
    "geometry",
    "load_muscle_set",
    "millard",
    "sets",
    "thelen",
    "wrapping",
]
