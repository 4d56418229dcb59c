"""OpenSim models, motion files, and OpenSim's processing of coordinates (``jb.io``).

Models: `load_model(path)` → `jaxbio.Model` (a jaxbio ``.json``, a shipped model, an ``.osim``)
and `save_model(model, path)`; `load_osim(path)` (the ``.osim`` reader, with OpenSim's force-set
options) → `jaxbio.Model`: the skeleton of an OpenSim 3.x/4.x model as a
`jaxbio.SegmentTree` plus a `jaxbio.coordinates.CoordinateMap` from OpenSim's coordinates
(`jaxbio.io.osim`), and its ForceSet's limits, springs and actuators (``Model.forces``, an
`OsimForces`; `jaxbio.forces._osim_forces`): `passive_forces(model, c, cd)` (CoordinateLimitForce,
SpringGeneralizedForce, PointToPointSpring, BushingForce, HuntCrossleyForce, PathSpring;
`path_spring_tensions(model, c, cd)`), `actuator_matrix(model, c)` ``B(c)`` and
`actuator_forces(model, c, controls)` (Coordinate-, Point-, Torque- and PathActuators), and
`applied_forces(model, forces_to_exclude)` (what OpenSim's InverseDynamicsTool applies);
`enforce_coordinates(model, c)`: clamped coordinates pulled into range, locked ones at their lock
value (with `jaxbio.forward_dynamics(model, ..., locked=model.locked)` for the dynamics).
Its Thelen2003 and Millard2012Equilibrium muscles (``Model.muscles``, an `OsimMuscles`;
`jaxbio.forces._osim_muscles`: paths with wrap objects, conditional and moving points), as functions
of OpenSim's coordinates ``c``: `muscle_lengths(model, c)`, `muscle_moment_arms(model, c)`
(``−∂l/∂c``), `muscle_lengthening_speeds(model, c, cd)`, `muscle_generalized_forces(model, c,
tensions)` and `muscle_static_optimization_forces(model, c, cd)` → ``(F̂, P)``.

Files (numpy, outside jit; every reader returns an immutable result with float64 read-only
arrays and raises ``ValueError`` naming the file, line and column of bad input):

- `read_storage(path)` → `Table`: OpenSim ``.mot``/``.sto`` (both header styles; degrees or
  radians decided as OpenSim does). `write_sto(path, table)`: OpenSim's ``.sto`` layout.
- `read_trc(path)` → `Markers`: ``.trc`` marker trajectories in metres.
- `read_c3d(path)` → `C3DData` (`Markers`, `AnalogChannels`): C3D through ezc3d (optional:
  ``pip install ezc3d``).

Processing (OpenSim's inverse-dynamics preparation, step for step):

- `process_coordinates(table, lowpass_hz=..., start=..., end=..., rotational=...)` →
  `ProcessedCoordinates` (``time``, ``q``, ``qd``, ``qdd``, ``spline``): pad, resample, filter,
  degrees → radians, quintic GCV splines and their derivatives, as ``InverseDynamicsTool``.
- `lowpass_iir(signal, dt, cutoff_hz)`: OpenSim's zero-phase 3rd-order Butterworth.
- `GCVSpline(x, y, degree=5, error_variance=0.0)`: Woltring's GCVSPL natural splines, as OpenSim
  fits and evaluates them.

External loads and tools:

- `read_external_loads(xml)` → `ExternalLoads`; `external_load_data(loads, times)`: OpenSim's
  ExternalForce data (identifiers by prefix, cubic spline in time, the frames they name).
- `inverse_dynamics_tool(model, motion, external_loads=..., lowpass_hz=..., start=..., end=...)`
  → `Table` of generalised forces labelled as OpenSim labels them: ``InverseDynamicsTool`` on
  jaxbio's dynamics, every frame in one ``jit(vmap)`` (command line: ``jaxbio inverse-dynamics``,
  ``jaxbio run-tool SETUP.xml``). The tools warn for motion columns that name no coordinate and
  coordinates without a column; `InputMatch` is what they matched (``jaxbio.tools.ToolRun.matched``).
- `static_optimization_tool(model, motion, external_loads=..., actuators=..., lowpass_hz=...,
  activation_exponent=..., use_muscle_physiology=...)` → `StaticOptimizationTables`
  (activations, forces): OpenSim's ``AnalyzeTool`` static optimisation, every frame in one
  ``jit(vmap)`` (``jaxbio static-optimization``, ``jaxbio run-tool``);
  `prepare_static_optimization` and `solve_static_optimization` (one frame, pure,
  differentiable), `static_optimization_problem`.
- `joint_reaction_tool(model, states=... | motion=..., forces_file=..., joint_names=...,
  on_bodies=..., in_frames=...)` → `Table` of reaction loads: OpenSim's ``AnalyzeTool``
  ``JointReaction`` analysis (``jaxbio run-tool``); `muscle_path_wrenches`: the loads muscles
  apply at their path points.

Scaling (OpenSim's ``ScaleTool``, numpy on the model's XML; ``jaxbio run-tool`` writes its files):
`scale_tool(setup)` → `ScaleResult` (a `ScaleSetup`, or its file through `read_scale_setup`):
`measurement_scale_factors` (marker-pair distances in the static trial over those in the model),
`scale_factors` (measurements and manual scales in the setup's order), `scale_osim` (the scaled
``.osim`` text: frames, geometry, markers, path points, wrap objects, joint functions, masses and
inertias as OpenSim scales them, muscles' fibre and tendon lengths by their path length) and
`place_markers` (the static pose by jaxbio's IK, the markers moved onto the trial).
Beyond OpenSim: `joint_fit` fits the scale factors, the marker offsets and every frame's
coordinates together (one least-squares problem over whole trials, regularised towards the
ScaleTool's result); `model_scaling` → `ModelScaling`, the scaled model as a pure,
differentiable function of per-body factors; `joint_fit_objective`, `fitted_osim` (the result as
an ``.osim``).

MuJoCo: `to_mjcf(tree)` → MJCF text of a `SegmentTree` (MuJoCo's ``mj_inverse`` on it equals
`jaxbio.inverse_dynamics`; massless hinge chains become one body with several joints);
`to_mujoco_state(tree, q, v, vdot)` → ``(qpos, qvel, qacc)`` and `from_mujoco_force(tree, q,
qfrc)` → jaxbio's generalised forces (jnp; a free root's linear parts change frame).

Example (OpenSim's arm26 inverse dynamics)::

    table = jb.io.read_storage("arm26_InverseKinematics.mot")          # degrees (old SIMM header)
    coords = table.select(["r_shoulder_elev", "r_elbow_flex"])
    p = jb.io.process_coordinates(coords, lowpass_hz=6.0, rotational=True)
    tau = jax.vmap(jb.inverse_dynamics, (None, 0, 0, 0))(jb.load_model("arm26"), p.q, p.qd, p.qdd)
"""

#: public name -> the private module that defines it (imported on first use: `jaxbio sprint`
#: builds its command line without loading the OpenSim importer)
_EXPORTS = {
    "AnalogChannels": "_c3d",
    "C3DData": "_c3d",
    "enforce_coordinates": "osim",
    "format_sto": "_storage",
    "from_mujoco_force": "_mjcf",
    "load_model": "_model_files",
    "save_model": "_model_files",
    "load_osim": "osim",
    "Markers": "_markers",
    "read_c3d": "_c3d",
    "read_storage": "_storage",
    "read_trc": "_markers",
    "Table": "_storage",
    "to_mjcf": "_mjcf",
    "to_mujoco_state": "_mjcf",
    "write_sto": "_storage",
}

#: names that moved out of jb.io (to jaxbio.forces, jaxbio.markers, jaxbio.tools): forwarded until
#: their callers are updated (the next commit removes this)
_MOVED = {
    "joint_reaction_tool": "jaxbio.tools._analyses",
    "muscle_path_wrenches": "jaxbio.tools._analyses",
    "CoordinateTask": "jaxbio.tools._inverse_kinematics",
    "InverseKinematicsInputs": "jaxbio.tools._inverse_kinematics",
    "InverseKinematicsResult": "jaxbio.tools._inverse_kinematics",
    "inverse_kinematics_residuals": "jaxbio.tools._inverse_kinematics",
    "inverse_kinematics_tool": "jaxbio.tools._inverse_kinematics",
    "marker_errors": "jaxbio.tools._inverse_kinematics",
    "prepare_inverse_kinematics": "jaxbio.tools._inverse_kinematics",
    "solve_inverse_kinematics": "jaxbio.tools._inverse_kinematics",
    "actuator_forces": "jaxbio.forces._osim_forces",
    "actuator_matrix": "jaxbio.forces._osim_forces",
    "applied_forces": "jaxbio.forces._osim_forces",
    "butterworth_coefficients": "jaxbio.tools._processing",
    "CoordinateActuators": "jaxbio.forces._osim_forces",
    "CoordinateLimitForces": "jaxbio.forces._osim_forces",
    "coordinates_table": "jaxbio.tools._inverse_dynamics",
    "external_load_data": "jaxbio.tools._external_loads",
    "ExternalForce": "jaxbio.tools._external_loads",
    "ExternalForceData": "jaxbio.tools._external_loads",
    "ExternalLoads": "jaxbio.tools._external_loads",
    "GCVSpline": "jaxbio.tools._gcvspl",
    "generalized_forces": "jaxbio.tools._inverse_dynamics",
    "inverse_dynamics_tool": "jaxbio.tools._inverse_dynamics",
    "InputMatch": "jaxbio.tools._inverse_dynamics",
    "InverseDynamicsInputs": "jaxbio.tools._inverse_dynamics",
    "lowpass_iir": "jaxbio.tools._processing",
    "marker_positions": "jaxbio.markers",
    "OsimMarkers": "jaxbio.markers",
    "muscle_generalized_forces": "jaxbio.forces._osim_muscles",
    "muscle_lengthening_speeds": "jaxbio.forces._osim_muscles",
    "muscle_lengths": "jaxbio.forces._osim_muscles",
    "muscle_moment_arms": "jaxbio.forces._osim_muscles",
    "muscle_static_optimization_forces": "jaxbio.forces._osim_muscles",
    "OsimForces": "jaxbio.forces._osim_forces",
    "BushingForces": "jaxbio.forces._osim_forces",
    "HuntCrossleyForces": "jaxbio.forces._osim_forces",
    "OsimMuscles": "jaxbio.forces._osim_muscles",
    "passive_forces": "jaxbio.forces._osim_forces",
    "path_spring_tensions": "jaxbio.forces._osim_forces",
    "PointActuators": "jaxbio.forces._osim_forces",
    "PointToPointSprings": "jaxbio.forces._osim_forces",
    "prepare_inverse_dynamics": "jaxbio.tools._inverse_dynamics",
    "process_coordinates": "jaxbio.tools._processing",
    "ProcessedCoordinates": "jaxbio.tools._processing",
    "read_external_loads": "jaxbio.tools._external_loads",
    "recording_matches": "jaxbio.tools._inverse_dynamics",
    "prepare_static_optimization": "jaxbio.tools._static_optimization",
    "solve_static_optimization": "jaxbio.tools._static_optimization",
    "SpringGeneralizedForces": "jaxbio.forces._osim_forces",
    "static_optimization_problem": "jaxbio.tools._static_optimization",
    "static_optimization_tool": "jaxbio.tools._static_optimization",
    "StaticOptimizationTables": "jaxbio.tools._static_optimization",
    "TorqueActuators": "jaxbio.forces._osim_forces",
    "format_marker_set": "jaxbio.tools._scale",
    "format_scale_set": "jaxbio.tools._scale",
    "read_ik_tasks": "jaxbio.tools._inverse_kinematics",
    "Measurement": "jaxbio.tools._scale",
    "ScaleResult": "jaxbio.tools._scale",
    "ScaleSetup": "jaxbio.tools._scale",
    "measurement_scale_factors": "jaxbio.tools._scale",
    "place_markers": "jaxbio.tools._scale",
    "read_scale_setup": "jaxbio.tools._scale",
    "scale_factors": "jaxbio.tools._scale",
    "scale_osim": "jaxbio.tools._scale",
    "scale_tool": "jaxbio.tools._scale",
    "JointFitResult": "jaxbio.tools._joint_fit",
    "ModelScaling": "jaxbio.tools._joint_fit",
    "fitted_osim": "jaxbio.tools._joint_fit",
    "joint_fit": "jaxbio.tools._joint_fit",
    "joint_fit_objective": "jaxbio.tools._joint_fit",
    "model_scaling": "jaxbio.tools._joint_fit",
}


from jaxbio._lazy import attach  # noqa: E402

__getattr__, __dir__ = attach(__name__, globals(), submodules=("osim",), exports=_EXPORTS)
_attached = __getattr__


def __getattr__(name):  # noqa: F811
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    return _attached(name)


__all__ = [
    "format_marker_set",
    "format_scale_set",
    "read_ik_tasks",
    "CoordinateTask",
    "InverseKinematicsInputs",
    "InverseKinematicsResult",
    "inverse_kinematics_residuals",
    "inverse_kinematics_tool",
    "marker_errors",
    "prepare_inverse_kinematics",
    "solve_inverse_kinematics",
    "actuator_forces",
    "actuator_matrix",
    "applied_forces",
    "AnalogChannels",
    "CoordinateActuators",
    "CoordinateLimitForces",
    "BushingForces",
    "HuntCrossleyForces",
    "OsimForces",
    "OsimMuscles",
    "muscle_generalized_forces",
    "muscle_lengthening_speeds",
    "muscle_lengths",
    "muscle_moment_arms",
    "muscle_static_optimization_forces",
    "passive_forces",
    "path_spring_tensions",
    "PointActuators",
    "PointToPointSprings",
    "SpringGeneralizedForces",
    "TorqueActuators",
    "C3DData",
    "coordinates_table",
    "ExternalForce",
    "ExternalForceData",
    "ExternalLoads",
    "external_load_data",
    "format_sto",
    "generalized_forces",
    "inverse_dynamics_tool",
    "load_model",
    "save_model",
    "read_external_loads",
    "GCVSpline",
    "InputMatch",
    "InverseDynamicsInputs",
    "Markers",
    "marker_positions",
    "OsimMarkers",
    "ProcessedCoordinates",
    "Table",
    "butterworth_coefficients",
    "load_osim",
    "enforce_coordinates",
    "lowpass_iir",
    "prepare_inverse_dynamics",
    "process_coordinates",
    "read_c3d",
    "read_storage",
    "read_trc",
    "recording_matches",
    "prepare_static_optimization",
    "joint_reaction_tool",
    "muscle_path_wrenches",
    "solve_static_optimization",
    "static_optimization_problem",
    "static_optimization_tool",
    "StaticOptimizationTables",
    "to_mjcf",
    "to_mujoco_state",
    "from_mujoco_force",
    "write_sto",
    "Measurement",
    "ScaleResult",
    "ScaleSetup",
    "measurement_scale_factors",
    "place_markers",
    "read_scale_setup",
    "scale_factors",
    "scale_osim",
    "scale_tool",
    "JointFitResult",
    "ModelScaling",
    "fitted_osim",
    "joint_fit",
    "joint_fit_objective",
    "model_scaling",
]
