"""The pieces of `jaxbio.forces` that the ``.osim`` reader (`jaxbio.io.osim`) and OpenSim's tools
(`jaxbio.tools`) build on; not user API (an empty ``__all__``: not counted, not documented).

- `read_forces`, `read_muscles`: the ForceSet's XML → `OsimForces`, `OsimMuscles` (numpy), called
  by `jaxbio.io.load_osim`.
- `force_coordinates(model, c, name)`, `to_opensim_speeds(blocks, c, cd)`: OpenSim's coordinates
  checked against a model, and its speeds ``u`` (``E ċ`` on Ball/Free rotations).
- `muscle_coordinates(model, c, name)`, `wrapped_lengths_and_moment_arms(model, c)`,
  `static_optimization_forces_at(muscles, lengths, speeds)`: static optimisation's muscle terms
  (`jaxbio.tools.static_optimization_tool`).
- `on_tree(model, c)`, `paths_at(paths, model, c)`, `path_moment_arms(paths, model, c)`: the
  tree state and the path points and moment arms the JointReaction analysis uses
  (`jaxbio.tools.joint_reaction_tool`).
"""

from jaxbio.forces._osim_forces import _coordinates as force_coordinates  # noqa: F401
from jaxbio.forces._osim_forces import _to_speeds as to_opensim_speeds  # noqa: F401
from jaxbio.forces._osim_forces import read_forces  # noqa: F401
from jaxbio.forces._osim_forces import _on_tree as on_tree  # noqa: F401
from jaxbio.forces._osim_paths import _paths_at as paths_at  # noqa: F401
from jaxbio.forces._osim_paths import path_moment_arms  # noqa: F401
from jaxbio.forces._osim_muscles import _coordinates as muscle_coordinates  # noqa: F401
from jaxbio.forces._osim_muscles import _forces_at as static_optimization_forces_at  # noqa: F401
from jaxbio.forces._osim_muscles import _wrapped_lengths_and_moment_arms as wrapped_lengths_and_moment_arms  # noqa: F401
from jaxbio.forces._osim_muscles import read_muscles  # noqa: F401

__all__: list[str] = []  # re-exports for jaxbio.io.osim and jaxbio.tools, not user API
