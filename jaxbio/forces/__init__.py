"""OpenSim's ForceSet as functions of the coordinates (``jb.forces``): springs, limits, bushings,
contact, actuators and muscles of a `jaxbio.Model` read from an ``.osim`` file.

Forces (``Model.forces``, an `OsimForces`; `jaxbio.forces._osim_forces`):
`passive_forces(model, c, cd)` (CoordinateLimitForce, SpringGeneralizedForce,
PointToPointSpring, BushingForce, HuntCrossleyForce, PathSpring; `path_spring_tensions(model, c,
cd)`), `actuator_matrix(model, c)` ``B(c)`` and `actuator_forces(model, c, controls)`
(Coordinate-, Point-, Torque- and PathActuators), and `applied_forces(model, forces_to_exclude)`
(what OpenSim's InverseDynamicsTool applies).

Muscles (``Model.muscles``, an `OsimMuscles`: Thelen2003Muscle and
Millard2012EquilibriumMuscle on paths with wrap objects, conditional and moving points;
`jaxbio.forces._osim_muscles`), as functions of OpenSim's coordinates ``c``:
`muscle_lengths(model, c)`, `muscle_moment_arms(model, c)` (``−∂l/∂c``),
`muscle_lengthening_speeds(model, c, cd)`, `muscle_generalized_forces(model, c, tensions)` and
`muscle_static_optimization_forces(model, c, cd)` → ``(F̂, P)``.

A muscle is one of OpenSim's forces (a ``ForceSet`` entry), and its path is shared with the path
actuators and springs: both live here. The Hill-type muscle models themselves are
`jaxbio.muscles.thelen` and `jaxbio.muscles.millard`. Everything here is pure, jit/vmap/grad-able
in the coordinates and in the model's numbers; `jaxbio.tools` builds OpenSim's tools on it.
"""

from jaxbio._lazy import attach

#: public name -> the private module that defines it (imported on first use)
_EXPORTS = {
    "OsimForces": "_osim_forces",
    "CoordinateLimitForces": "_osim_forces",
    "SpringGeneralizedForces": "_osim_forces",
    "PointToPointSprings": "_osim_forces",
    "BushingForces": "_osim_forces",
    "HuntCrossleyForces": "_osim_forces",
    "CoordinateActuators": "_osim_forces",
    "PointActuators": "_osim_forces",
    "TorqueActuators": "_osim_forces",
    "passive_forces": "_osim_forces",
    "path_spring_tensions": "_osim_forces",
    "actuator_matrix": "_osim_forces",
    "actuator_forces": "_osim_forces",
    "applied_forces": "_osim_forces",
    "OsimMuscles": "_osim_muscles",
    "muscle_lengths": "_osim_muscles",
    "muscle_moment_arms": "_osim_muscles",
    "muscle_lengthening_speeds": "_osim_muscles",
    "muscle_generalized_forces": "_osim_muscles",
    "muscle_static_optimization_forces": "_osim_muscles",
}

__getattr__, __dir__ = attach(__name__, globals(), submodules=("internals",), exports=_EXPORTS)

__all__ = sorted(_EXPORTS, key=str.lower)
