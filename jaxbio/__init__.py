"""jaxbio: differentiable, batched human biomechanics in JAX.

Daily names (``import jaxbio as jb``): `Model` and `load_model` (a model from a ``.json``, a
shipped model's name or an OpenSim ``.osim``), `save_model`, `SegmentTree`,
`forward_kinematics`, `inverse_dynamics`, `segment_wrenches`, `mass_matrix`, `bias_forces`,
`gravity_forces`, `forward_dynamics`, `kinetic_energy`, `potential_energy`, `center_of_mass`,
and the `quaternion` and `configuration` (``q ⊕ dq`` for ball and free joints) modules;
`coordinates` (coupled model coordinates, `coordinates.CoordinateMap`); `jb.forces` (OpenSim's
ForceSet, muscles included, as functions of the coordinates) and `jb.markers` (a model's markers);
`jb.io` (imported on first use) reads and writes models (``io.load_osim``) and motion files
(.mot/.sto, .trc, C3D) in numpy; `jb.tools`, the top layer, holds OpenSim's tools (inverse
dynamics, static optimisation, inverse kinematics, scaling, the processing of coordinates) and
runs OpenSim's own setup files (``tools.run``: one, or a whole session of trials, as ``jaxbio
run-tool``). Every
function is a pure function of one sample; batch with `jax.vmap`, or with `batch` (``jb.batch``,
imported on first use), which also splits the batch over every device (`jaxbio.batching`). Importing jaxbio changes no
global JAX configuration: enable float64 yourself with ``jax.config.update("jax_enable_x64",
True)`` for validation work.
"""

from jaxbio import configuration, hamiltonian, muscles, quaternion, spatial
from jaxbio.dynamics import (
    bias_forces,
    center_of_mass,
    forward_dynamics,
    forward_kinematics,
    gravity_forces,
    inverse_dynamics,
    kinetic_energy,
    mass_matrix,
    potential_energy,
    segment_wrenches,
)
from jaxbio.hamiltonian import HamiltonianSystem
from jaxbio.model import Model, model_path, shipped_models
from jaxbio.tree import SegmentTree

__version__ = "0.1.0"

from jaxbio._lazy import attach  # noqa: E402

# imported on first use (keeps `jaxbio sprint` start-up short)
# (`simulation` loads Diffrax and Optimistix, ~0.5 s that OpenSim's tools never use)
__getattr__, __dir__ = attach(
    __name__,
    globals(),
    submodules=(
        "batching",
        "coordinates",
        "estimation",
        "forces",
        "io",
        "learning",
        "markers",
        "papers",
        "plot",
        "simulation",
        "tools",
    ),
    exports={
        "batch": "batching",
        "FixedGrid": "simulation",
        "load_model": "io",
        "save_model": "io",
        "simulate": "simulation",
        "simulate_sde": "simulation",
        "Trajectory": "simulation",
    },
)


__all__ = [
    "FixedGrid",
    "HamiltonianSystem",
    "Model",
    "model_path",
    "SegmentTree",
    "batch",
    "batching",
    "Trajectory",
    "hamiltonian",
    "simulate",
    "simulation",
    "simulate_sde",
    "bias_forces",
    "configuration",
    "coordinates",
    "estimation",
    "forces",
    "io",
    "learning",
    "muscles",
    "papers",
    "center_of_mass",
    "forward_dynamics",
    "forward_kinematics",
    "gravity_forces",
    "inverse_dynamics",
    "kinetic_energy",
    "load_model",
    "markers",
    "mass_matrix",
    "potential_energy",
    "quaternion",
    "save_model",
    "segment_wrenches",
    "shipped_models",
    "spatial",
    "tools",
]
