"""`Model`, the one model type, and the shipped models' files.

`jaxbio.load_model` reads a model (a jaxbio model ``.json``, a shipped model's name, an OpenSim
``.osim``) into a `Model`; `jaxbio.save_model` writes one as JSON (both in `jaxbio.io`, the
readers and writers)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

from jaxbio.tree import SegmentTree

if TYPE_CHECKING:  # for the annotations only: the model holds the io readers' results
    from jaxbio.coordinates import CoordinateMap
    from jaxbio.forces import OsimForces, OsimMuscles
    from jaxbio.markers import OsimMarkers

__all__ = ["Model", "model_path", "shipped_models", "tree_of"]


def shipped_models() -> list[str]:
    """Names of the models shipped inside the package (``jaxbio/models/*.json``)."""
    root = resources.files("jaxbio") / "models"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def model_path(name: str) -> Path:
    """File of a shipped model, e.g. ``model_path("arm7")``."""
    p = resources.files("jaxbio") / "models" / f"{name}.json"
    if not p.is_file():
        raise ValueError(f"no shipped model {name!r}; shipped models are {shipped_models()}")
    return Path(str(p))


class Model(eqx.Module):
    """A model: its tree, its own coordinates and their properties, bodies, forces, muscles and markers.

    The one model type: `jaxbio.load_model` returns it for a jaxbio model ``.json``, a shipped
    model name and an OpenSim ``.osim``, and every algorithm takes it, in the model's own
    coordinates ``c`` (``jb.inverse_dynamics(model, c, cd, cdd)``; a bare `jaxbio.SegmentTree`
    is accepted too, in its joint coordinates ``q``). A model read from JSON has one coordinate
    per joint DOF (``q = c``, ``coordinates.identity_map``) unless the file has coupled
    coordinates, bodies named after its segments, and no forces, muscles or markers.

    - ``tree``: the `jaxbio.SegmentTree` (for OpenSim models: revolute, prismatic and fixed
      joints only; segment frames are OpenSim's child joint frames, see `jaxbio.io.osim`).
    - ``coordinates``: the `jaxbio.coordinates.CoordinateMap` from the model's ``nc``
      coordinates ``c`` (rad / m, the order of ``coordinate_names``) to the tree's ``q``.
    - ``defaults``, ``default_speeds`` ``(nc,)``; ``ranges`` ``(nc, 2)`` (min, max);
      ``clamped``, ``locked``, ``prescribed`` (static bools) and ``motion_types`` (static:
      ``"rotational"``, ``"translational"``, ``"coupled"``), per coordinate.
    - ``bodies`` (static): the body names, the ground first; ``body_segments`` (static): the
      segment index each body is fixed to (``-1``: the ground, i.e. the world);
      ``body_positions`` ``(nb, 3)`` m and ``body_orientations`` ``(nb, 4)`` ``(w, x, y, z)``:
      the body frame's origin and orientation in that segment's frame (identity for the ground).
    - ``joints``, ``joint_types`` (static): the joint names and classes, in file order;
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
      ``load_model(..., strict=True)`` refuses a model where it is not empty.
    - ``path`` (static): the file read (the tree's name for a model built in memory).
    - ``forces``: the `jaxbio.io.OsimForces` imported from the ForceSet (coordinate limit forces,
      springs, coordinate, point and torque actuators; see `jaxbio.forces._osim_forces`); empty for
      a model read from ``.json``, ``None`` for one built by `Model.from_tree` (no forces).
    - ``muscles``: the `jaxbio.io.OsimMuscles` (Thelen2003Muscle and
      Millard2012EquilibriumMuscle: paths with wrap objects, conditional and moving points, and
      the muscle models; see `jaxbio.forces._osim_muscles`), or ``None`` when the file has none.
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
    forces: OsimForces | None = None
    muscles: OsimMuscles | None = None
    markers: OsimMarkers | None = None

    @classmethod
    def from_tree(
        cls,
        tree: SegmentTree,
        coordinates: CoordinateMap | None = None,
        *,
        defaults=None,
        default_speeds=None,
        ranges=None,
        clamped=None,
        locked=None,
        motion_types=None,
    ) -> Model:
        """A model of a tree and, optionally, its own coordinates (numpy; nothing compiled).

        Without ``coordinates`` the model's coordinates are the tree's ``q``
        (``identity_map``), named after the segments (a ball joint's quaternion ``seg_qw`` …
        ``seg_qz``, a free joint's ``seg_x`` … ``seg_z`` then its quaternion), their defaults
        the neutral configuration (`jaxbio.configuration.neutral`). With a
        `jaxbio.coordinates.CoordinateMap` (revolute, prismatic and fixed joints only) they are
        its ``c``. ``defaults``, ``default_speeds`` ``(nc,)`` (default 0), ``ranges`` ``(nc, 2)``
        (default unbounded), ``clamped``, ``locked`` (default False) and ``motion_types``
        (default: each coordinate's first tree DOF's, ``"rotational"`` or ``"translational"``)
        as in the class docstring. Bodies are the segments, with their frames; no forces,
        muscles or markers.
        """
        from jaxbio._validate import to_device
        from jaxbio.coordinates import CoordinateMap

        dt = tree.masses.dtype
        names, kinds, owner, neutral = [], [], [], []
        for i, (seg, t) in enumerate(zip(tree.names, tree.joint_types)):
            entries = {
                "revolute": [("", "rotational", 0.0)],
                "prismatic": [("", "translational", 0.0)],
                "spherical": [(f"_q{a}", "rotational", float(a == "w")) for a in "wxyz"],
                "free": [(f"_{a}", "translational", 0.0) for a in "xyz"]
                + [(f"_q{a}", "rotational", float(a == "w")) for a in "wxyz"],
            }.get(t, [])
            for suffix, kind, value in entries:
                names.append(seg + suffix)
                kinds.append(kind)
                owner.append(i)
                neutral.append(value)
        if coordinates is None:
            coordinates = CoordinateMap.identity(names, dtype=dt)
        else:
            if tree.nq != tree.nv or coordinates.nq != tree.nq:
                raise ValueError(
                    f"Model.from_tree: the coordinate map drives {coordinates.nq} tree coordinates, tree "
                    f"{tree.name!r} has {tree.nq} (coordinate maps need revolute, prismatic and fixed joints only)"
                )
            first = [coordinates.source.index(j) for j in range(coordinates.nc)]  # each one's first tree DOF
            kinds, owner = [kinds[k] for k in first], [owner[k] for k in first]
            neutral = [0.0] * coordinates.nc
        nc = coordinates.nc

        def flags(x, name):
            x = (False,) * nc if x is None else tuple(bool(v) for v in x)
            if len(x) != nc:
                raise ValueError(f"Model.from_tree: {name} has {len(x)} entries for {nc} coordinates")
            return x

        def numbers(x, shape, fill, name):
            a = np.full(shape, fill, dtype=float) if x is None else np.asarray(x, dtype=float)
            if a.shape != shape:
                raise ValueError(f"Model.from_tree: {name} has shape {a.shape}, expected {shape}")
            return to_device(a, dt)

        n = tree.n_segments
        return cls(
            tree=tree,
            coordinates=coordinates,
            defaults=numbers(neutral if defaults is None else defaults, (nc,), 0.0, "defaults"),
            default_speeds=numbers(default_speeds, (nc,), 0.0, "default_speeds"),
            ranges=to_device(np.tile([-np.inf, np.inf], (nc, 1)), dt)
            if ranges is None
            else numbers(ranges, (nc, 2), 0.0, "ranges"),
            body_positions=to_device(np.zeros((n + 1, 3)), dt),
            body_orientations=to_device(np.tile([1.0, 0, 0, 0], (n + 1, 1)), dt),
            clamped=flags(clamped, "clamped"),
            locked=flags(locked, "locked"),
            prescribed=(False,) * nc,
            motion_types=tuple(kinds) if motion_types is None else tuple(motion_types),
            bodies=("ground",) + tuple(tree.names),
            body_segments=(-1,) + tuple(range(n)),
            joints=tuple(tree.names),
            joint_types=tuple(tree.joint_types),
            coordinate_joints=tuple(owner),
            ignored=(),
            path=tree.name,
        )

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        """The model's coordinate names, the order of ``c``."""
        return self.coordinates.names

    def coordinate_index(self, name: str) -> int:
        """Position of coordinate ``name`` in ``c``."""
        return self.coordinates.index(name)

    def body_frame(self, name: str) -> tuple[int, Float[Array, 3], Float[Array, 4]]:
        """``(segment, position, orientation)`` of body ``name``'s frame (segment ``-1``:
        the world): a point ``p`` given in the body frame is ``position + R(orientation) p`` in
        the segment frame."""
        if name not in self.bodies:
            raise ValueError(f"{self.path}: no body {name!r}; bodies are {list(self.bodies)}")
        i = self.bodies.index(name)
        return self.body_segments[i], self.body_positions[i], self.body_orientations[i]


def tree_of(model, where: str = ""):
    """The `jaxbio.SegmentTree` of ``model``: a tree as it is, a `Model` whose coordinates are
    its tree's (``coordinates.identity_map``) its ``tree``; anything else unchanged (the caller's
    own check names it). ``ValueError`` (prefixed by ``where``) for a model with coupled
    coordinates, which a function of the tree's ``q`` cannot take."""
    if isinstance(model, Model):
        if not model.coordinates.identity_map:
            raise ValueError(
                f"{where}model {model.path!r} has coupled coordinates ({model.coordinates.nc} coordinates "
                f"driving {model.coordinates.nq} tree coordinates); this takes the tree's own coordinates: "
                "pass model.tree and q = jaxbio.coordinates.to_tree(model.coordinates, c)"
            )
        return model.tree
    return model
