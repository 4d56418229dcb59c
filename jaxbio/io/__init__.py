"""Readers and writers (``jb.io``): models, motion files and marker files, in numpy (nothing is
compiled while reading).

Models: `load_model(path)` → `jaxbio.Model` (a jaxbio ``.json``, a shipped model, an ``.osim``)
and `save_model(model, path)`; `load_osim(path)` (the ``.osim`` reader, with OpenSim's force-set
options, `jaxbio.io.osim`) → `jaxbio.Model`: the skeleton of an OpenSim 3.x/4.x model as a
`jaxbio.SegmentTree` plus a `jaxbio.coordinates.CoordinateMap` from OpenSim's coordinates, its
ForceSet's limits, springs, actuators and muscles (``Model.forces``, ``Model.muscles``,
evaluated by `jaxbio.forces`) and its MarkerSet (``Model.markers``, `jaxbio.markers`).

Files (numpy, outside jit; every reader returns an immutable result with float64 read-only
arrays and raises ``ValueError`` naming the file, line and column of bad input):

- `read_storage(path)` → `Table`: OpenSim ``.mot``/``.sto`` (both header styles; degrees or
  radians decided as OpenSim does). `write_sto(path, table)`, `format_sto(table)`: OpenSim's
  ``.sto`` layout.
- `read_trc(path)` → `Markers`: ``.trc`` marker trajectories in metres.
- `read_c3d(path)` → `C3DData` (`Markers`, `AnalogChannels`): C3D through ezc3d (optional:
  ``pip install ezc3d``).

MuJoCo: `to_mjcf(tree)` → MJCF text of a `SegmentTree` (MuJoCo's ``mj_inverse`` on it equals
`jaxbio.inverse_dynamics`; massless hinge chains become one body with several joints);
`to_mujoco_state(tree, q, v, vdot)` → ``(qpos, qvel, qacc)`` and `from_mujoco_force(tree, q,
qfrc)` → jaxbio's generalised forces (jnp; a free root's linear parts change frame).

What evaluates a model lives below (`jaxbio.forces`: passive forces, actuators, muscles;
`jaxbio.markers`: marker positions; `jaxbio.coordinates.enforce_coordinates`), OpenSim's tools
above (`jaxbio.tools`: inverse dynamics, static optimisation, inverse kinematics, scaling,
``run-tool``, and OpenSim's processing of coordinates).

Example (OpenSim's arm26 inverse dynamics)::

    table = jb.io.read_storage("arm26_InverseKinematics.mot")          # degrees (old SIMM header)
    coords = table.select(["r_shoulder_elev", "r_elbow_flex"])
    p = jb.tools.process_coordinates(coords, lowpass_hz=6.0, rotational=True)
    tau = jax.vmap(jb.inverse_dynamics, (None, 0, 0, 0))(jb.load_model("arm26"), p.q, p.qd, p.qdd)
"""

#: public name -> the private module that defines it (imported on first use: `jaxbio sprint`
#: builds its command line without loading the OpenSim importer)
_EXPORTS = {
    "load_model": "_model_files",
    "save_model": "_model_files",
    "load_osim": "osim",
    "format_sto": "_storage",
    "read_storage": "_storage",
    "Table": "_storage",
    "write_sto": "_storage",
    "Markers": "_markers",
    "read_trc": "_markers",
    "AnalogChannels": "_c3d",
    "C3DData": "_c3d",
    "read_c3d": "_c3d",
    "from_mujoco_force": "_mjcf",
    "to_mjcf": "_mjcf",
    "to_mujoco_state": "_mjcf",
}


from jaxbio._lazy import attach  # noqa: E402

__getattr__, __dir__ = attach(__name__, globals(), submodules=("osim",), exports=_EXPORTS)

__all__ = sorted(_EXPORTS, key=str.lower)
