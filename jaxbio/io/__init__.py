"""OpenSim models, motion files, and OpenSim's processing of coordinates (``jb.io``).

Models: `load_osim(path)` → `OsimModel`: the skeleton of an OpenSim 3.x/4.x model as a
`jaxbio.SegmentTree` plus a `jaxbio.coordinates.CoordinateMap` from OpenSim's coordinates
(`jaxbio.io.osim`), and its ForceSet's limits, springs and actuators (``OsimModel.forces``, an
`OsimForces`; `jaxbio.io._osim_forces`): `passive_forces(model, c, cd)` (CoordinateLimitForce,
SpringGeneralizedForce, PointToPointSpring), `actuator_matrix(model, c)` ``B(c)`` and
`actuator_forces(model, c, controls)` (Coordinate-, Point- and TorqueActuators), and
`applied_forces(model, forces_to_exclude)` (what OpenSim's InverseDynamicsTool applies).

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
  ``jaxbio run-tool SETUP.xml``).
from jaxbio.io._tools import (InverseDynamicsInputs, coordinates_table, generalized_forces, inverse_dynamics_tool,
                              load_any_model, prepare_inverse_dynamics)

Example (OpenSim's arm26 inverse dynamics)::

    table = jb.io.read_storage("arm26_InverseKinematics.mot")          # degrees (old SIMM header)
    coords = table.select(["r_shoulder_elev", "r_elbow_flex"])
    p = jb.io.process_coordinates(coords, lowpass_hz=6.0, rotational=True)
    tau = jax.vmap(jb.inverse_dynamics, (None, 0, 0, 0))(jb.load_model("arm26"), p.q, p.qd, p.qdd)
"""

from jaxbio.io._c3d import AnalogChannels, C3DData, read_c3d
from jaxbio.io._external_loads import ExternalForce, ExternalForceData, ExternalLoads, external_load_data, read_external_loads
from jaxbio.io._gcvspl import GCVSpline
from jaxbio.io._markers import Markers, read_trc
from jaxbio.io._osim_forces import (CoordinateActuators, CoordinateLimitForces, OsimForces, PointActuators,
                                    PointToPointSprings, SpringGeneralizedForces, TorqueActuators, actuator_forces,
                                    actuator_matrix, applied_forces, passive_forces)
from jaxbio.io._processing import ProcessedCoordinates, butterworth_coefficients, lowpass_iir, process_coordinates
from jaxbio.io._storage import Table, format_sto, read_storage, write_sto
from jaxbio.io._tools import (InverseDynamicsInputs, coordinates_table, generalized_forces, inverse_dynamics_tool,
                              load_any_model, prepare_inverse_dynamics)
from jaxbio.io.osim import OsimModel, load_osim

__all__ = [
    "actuator_forces",
    "actuator_matrix",
    "applied_forces",
    "AnalogChannels",
    "CoordinateActuators",
    "CoordinateLimitForces",
    "OsimForces",
    "passive_forces",
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
    "load_any_model",
    "read_external_loads",
    "GCVSpline",
    "InverseDynamicsInputs",
    "Markers",
    "OsimModel",
    "ProcessedCoordinates",
    "Table",
    "butterworth_coefficients",
    "load_osim",
    "lowpass_iir",
    "prepare_inverse_dynamics",
    "process_coordinates",
    "read_c3d",
    "read_storage",
    "read_trc",
    "write_sto",
]
