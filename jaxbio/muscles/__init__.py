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
- `jaxbio.muscles.sets`: `load_muscle_set("arm26" | "gait10dof18musc")` from OpenSim-derived data.
"""

from jaxbio.muscles import activation, actuators, curves, drive, geometry, sets, wrapping
from jaxbio.muscles.actuators import DCMotor, MuscleDrive, RayleighVanDerPol
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.drive import MuscleActuatedDrive
from jaxbio.muscles.geometry import MusclePaths
from jaxbio.muscles.sets import load_muscle_set
from jaxbio.muscles.wrapping import WrapObjects

__all__ = [
    "DCMotor",
    "HillMuscle",
    "MuscleActuatedDrive",
    "MuscleDrive",
    "MusclePaths",
    "RayleighVanDerPol",
    "WrapObjects",
    "activation",
    "actuators",
    "curves",
    "drive",
    "geometry",
    "load_muscle_set",
    "sets",
    "wrapping",
]
