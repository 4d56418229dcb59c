"""`OsimModel`, the result of `jaxbio.io.load_osim` (re-exported by `jaxbio.io.osim`): below the
importer and the muscles' evaluation (`_osim_muscles`), which takes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
from jaxtyping import Array, Float

from jaxbio.coordinates import CoordinateMap
from jaxbio.tree import SegmentTree

if TYPE_CHECKING:
    from jaxbio.io._osim_forces import OsimForces
    from jaxbio.io._osim_markers import OsimMarkers
    from jaxbio.io._osim_muscles import OsimMuscles

__all__ = ["OsimModel"]


class OsimModel(eqx.Module):
    """An OpenSim model: a tree, OpenSim's coordinates and their properties, forces and muscles.

    - ``tree``: the `jaxbio.SegmentTree` (revolute, prismatic and fixed joints only; segment
      frames are OpenSim's child joint frames, see `jaxbio.io.osim`).
    - ``coordinates``: the `jaxbio.coordinates.CoordinateMap` from OpenSim's ``nc`` coordinates
      ``c`` (rad / m, the order of ``coordinate_names``) to the tree's ``q``.
    - ``defaults``, ``default_speeds`` ``(nc,)``; ``ranges`` ``(nc, 2)`` (min, max);
      ``clamped``, ``locked``, ``prescribed`` (static bools) and ``motion_types`` (static:
      ``"rotational"``, ``"translational"``, ``"coupled"``), per coordinate.
    - ``bodies`` (static): OpenSim's body names, the ground first; ``body_segments`` (static): the
      segment index each body is fixed to (``-1``: the ground, i.e. the world);
      ``body_positions`` ``(nb, 3)`` m and ``body_orientations`` ``(nb, 4)`` ``(w, x, y, z)``:
      the body frame's origin and orientation in that segment's frame (identity for the ground).
    - ``joints``, ``joint_types`` (static): OpenSim's joint names and classes, in file order;
      ``coordinate_joints`` (static): the index in ``joints`` of each coordinate's joint.
    - ``dependent_coordinates`` (static): OpenSim's coordinates that a
      ``CoordinateCouplerConstraint`` makes functions of others; not in ``c``: the tree
      coordinates they drive are functions of their independent coordinates in ``coordinates``.
    - ``ignored`` (static): the parts of the file that are not imported (e.g. ``"ForceSet: 6
      objects (DeGrooteFregly2016Muscle)"``: the ForceSet entries that are in neither ``forces``
      nor ``muscles``).
    - ``not_imported`` (static): the entries of ``ignored`` that act on the dynamics in OpenSim
      (forces and constraints of types jaxbio does not import, muscles whose parameters it
      refuses, other ``<components>``); empty when the model is loaded whole.
      ``load_osim(..., strict=True)`` refuses a model where it is not empty.
    - ``path`` (static): the file read.
    - ``forces``: the `jaxbio.io.OsimForces` imported from the ForceSet (coordinate limit forces,
      springs, coordinate, point and torque actuators; see `jaxbio.io._osim_forces`).
    - ``muscles``: the `jaxbio.io.OsimMuscles` (Thelen2003Muscle and
      Millard2012EquilibriumMuscle: paths with wrap objects, conditional and moving points, and
      the muscle models; see `jaxbio.io._osim_muscles`), or ``None`` when the file has none.
    - ``markers``: the `jaxbio.io.OsimMarkers` of the MarkerSet (names, frames, locations;
      `jaxbio.io.marker_positions` gives their world positions at ``c``), or ``None`` when the
      file has none.
    """

    tree: SegmentTree
    coordinates: CoordinateMap
    defaults: Float[Array, " nc"]
    default_speeds: Float[Array, " nc"]
    ranges: Float[Array, "nc 2"]
    body_positions: Float[Array, "nb 3"]
    body_orientations: Float[Array, "nb 4"]
    clamped: tuple[bool, ...] = eqx.field(static=True)
    locked: tuple[bool, ...] = eqx.field(static=True)
    prescribed: tuple[bool, ...] = eqx.field(static=True)
    motion_types: tuple[str, ...] = eqx.field(static=True)
    bodies: tuple[str, ...] = eqx.field(static=True)
    body_segments: tuple[int, ...] = eqx.field(static=True)
    joints: tuple[str, ...] = eqx.field(static=True)
    joint_types: tuple[str, ...] = eqx.field(static=True)
    coordinate_joints: tuple[int, ...] = eqx.field(static=True)
    ignored: tuple[str, ...] = eqx.field(static=True)
    dependent_coordinates: tuple[str, ...] = eqx.field(static=True, default=())
    not_imported: tuple[str, ...] = eqx.field(static=True, default=())
    path: str = eqx.field(static=True, default="")
    forces: OsimForces = eqx.field(default_factory=lambda: _no_forces())
    muscles: OsimMuscles | None = None
    markers: OsimMarkers | None = None

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        """OpenSim's coordinate names, the order of ``c``."""
        return self.coordinates.names

    def coordinate_index(self, name: str) -> int:
        """Position of OpenSim coordinate ``name`` in ``c``."""
        return self.coordinates.index(name)

    def body_frame(self, name: str) -> tuple[int, Float[Array, 3], Float[Array, 4]]:
        """``(segment, position, orientation)`` of OpenSim body ``name``'s frame (segment ``-1``:
        the world): a point ``p`` given in the body frame is ``position + R(orientation) p`` in
        the segment frame."""
        if name not in self.bodies:
            raise ValueError(f"{self.path}: no body {name!r}; bodies are {list(self.bodies)}")
        i = self.bodies.index(name)
        return self.body_segments[i], self.body_positions[i], self.body_orientations[i]


def _no_forces():
    from jaxbio.io._osim_forces import OsimForces

    return OsimForces.empty()
