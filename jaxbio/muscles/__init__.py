"""Muscles and actuators (Ivancevic 2009, Du 2021 and Biscarini 2021).

- `jaxbio.muscles.curves`: Hill force–velocity (Ivancevic 2009) with a smooth eccentric branch, the
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

from jaxbio._lazy import attach
from jaxbio.muscles import activation, actuators, curves, fatigue  # noqa: F401  (submodules as attributes)
from jaxbio.muscles.actuators import DCMotor, MuscleDrive, RayleighVanDerPol
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.fatigue import ThreeCompartmentFatigue

# paths, wrapping and OpenSim's muscles are imported on first use (`jaxbio sprint` needs none)
__getattr__, __dir__ = attach(
    __name__,
    globals(),
    submodules=("drive", "geometry", "millard", "sets", "thelen", "wrapping"),
    exports={
        "MuscleEquilibrium": "_opensim_common",
        "MuscleActuatedDrive": "drive",
        "MusclePaths": "geometry",
        "ActiveForceLengthCurve": "millard",
        "FiberForceLengthCurve": "millard",
        "ForceVelocityCurve": "millard",
        "ForceVelocityInverseCurve": "millard",
        "Millard2012EquilibriumMuscle": "millard",
        "TendonForceLengthCurve": "millard",
        "load_muscle_set": "sets",
        "Thelen2003Muscle": "thelen",
        "WrapObjects": "wrapping",
    },
)

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
