"""`load_model` and `save_model`: a `jaxbio.Model` from a file (a jaxbio model ``.json``, a
shipped model's name, an OpenSim ``.osim``) or from a tree, and back to JSON (numpy; nothing is
compiled while reading)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxbio._model_json import read_model_file
from jaxbio._validate import model_dtype
from jaxbio.model import Model
from jaxbio.tree import SegmentTree

__all__ = ["load_model", "save_model"]


def load_model(model, *, dtype=None, strict: bool = False) -> Model:
    """A `jaxbio.Model` from a file, a shipped model's name, or a model in memory.

    Args:
        model: a path — a jaxbio model ``.json`` (``format: jaxbio-model``) or an OpenSim
            ``.osim`` (read by `jaxbio.io.load_osim`, whose docstring lists what is imported) —
            or the name of a shipped model (``"arm7"``, ``"sagittal11"``, ``"wholebody"``,
            ``"double_pendulum"``, ``"arm26"``), or a `jaxbio.Model` (returned as it is, cast to
            ``dtype`` when one is given) or a bare `jaxbio.SegmentTree` (wrapped, with one
            coordinate per joint DOF named after its segment).
        dtype: floating dtype of every array (default: JAX's default float type; float64, with
            ``jax.enable_x64``, to reproduce another program's numbers).
        strict: an ``.osim`` with an element that acts on the dynamics and is not imported is
            refused (`jaxbio.io.load_osim`).

    Returns:
        the `jaxbio.Model`. A ``.json`` without coordinate sections gives ``q = c`` (one
        coordinate per joint DOF, named after its segment; ``coordinates.identity_map``), its
        segments as bodies, zero defaults, unbounded ranges and no forces, muscles or markers; a
        file with coupled coordinates (``"coordinates"`` and ``"coordinate_functions"``, as
        `save_model` writes a model read from ``.osim``) gives those coordinates, their map,
        defaults, ranges and flags.

    Raises:
        ValueError: starting with the file's path for every defect: a missing file, a directory,
            no permission, an empty file, bytes that are not UTF-8 (with the line), invalid JSON
            (with the line), a key given twice in one object (with the object's line), and every
            model defect of `jaxbio.SegmentTree.from_dict` (naming the segment and field:
            ``NaN``/``Infinity`` literals, unknown fields, wrong types …), including the checks
            after the cast to ``dtype``; for an ``.osim``, those of `jaxbio.io.load_osim`. An
            empty path or a non-floating ``dtype`` is an argument error (no path prefix).
    """
    if isinstance(model, Model):
        model = model if dtype is None else _cast(model, dtype)
        return _with_forces(model) if model.forces is None else model
    if isinstance(model, SegmentTree):
        return _tree_model(model if dtype is None else model.astype(dtype))
    if isinstance(model, (str, os.PathLike)) and Path(model).suffix.lower() == ".osim":
        from jaxbio.io.osim import load_osim

        return load_osim(model, dtype=dtype, strict=strict)
    tree, section, markers = read_model_file(model, dtype)
    return _with_markers(_tree_model(tree, section), markers)


def _cast(model: Model, dtype) -> Model:
    """``model`` with every floating array in ``dtype``: its tree by `SegmentTree.astype` (with its
    checks after the cast: overflow, masses underflowing, inertias), the other arrays cast."""
    import jax

    dt = model_dtype(dtype)

    def cast(x):
        if isinstance(x, SegmentTree):
            return x.astype(dt)
        return x.astype(dt) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x

    return jax.tree_util.tree_map(cast, model, is_leaf=lambda x: isinstance(x, SegmentTree) or eqx.is_array(x))


def _tree_model(tree, section=None):
    """A jaxbio tree as a `Model` (`Model.from_tree`), with the coordinates of a model file's
    ``"coordinates"`` section (`jaxbio._validate.validate_coordinates_dict`'s result) when given."""
    if section is None:
        return _with_forces(Model.from_tree(tree))
    from jaxbio.coordinates import from_sections

    model = Model.from_tree(
        tree,
        from_sections(section, dtype=tree.masses.dtype),
        defaults=section["defaults"],
        default_speeds=section["speeds"],
        ranges=np.reshape(section["ranges"], (-1, 2)),
        clamped=section["clamped"],
        locked=section["locked"],
        motion_types=section["motion_types"],
    )
    return _with_forces(model)


def _with_markers(model: Model, markers) -> Model:
    """``model`` with a model file's markers (`jaxbio._validate.validate_markers_dict`'s result;
    None: none), each fixed to its segment's frame (or the world) at its location there."""
    if markers is None:
        return model
    from jaxbio._validate import to_device
    from jaxbio.markers import OsimMarkers

    dtype = model.tree.masses.dtype
    m = len(markers["names"])
    frames = tuple("ground" if k < 0 else model.tree.names[k] for k in markers["segments"])
    value = OsimMarkers(
        locations=to_device(markers["locations"], dtype),
        frame_positions=to_device(np.zeros((m, 3)), dtype),
        frame_orientations=to_device(np.tile([1.0, 0.0, 0.0, 0.0], (m, 1)), dtype),
        names=markers["names"],
        frames=frames,
        bodies=frames,
        segments=markers["segments"],
        fixed=markers["fixed"],
    )
    return eqx.tree_at(lambda mo: mo.markers, model, value, is_leaf=lambda x: x is None)


def _marker_section(model: Model) -> list[dict]:
    """The ``"markers"`` section of ``model``'s markers: each at its location in its segment's
    frame (its frame's pose in the segment composed with its location in the frame), exactly what
    `jaxbio.markers.marker_positions` places in the world."""
    from jaxbio._rigid_numpy import rotation

    mk = model.markers
    offsets = np.asarray(mk.frame_positions, dtype=float)
    turns = np.asarray(mk.frame_orientations, dtype=float)
    points = np.asarray(mk.locations, dtype=float)
    out = []
    for k, name in enumerate(mk.names):
        seg = mk.segments[k]
        location = offsets[k] + rotation(turns[k]) @ points[k]
        out.append(
            {
                "name": name,
                "segment": None if seg < 0 else model.tree.names[seg],
                "location": [float(x) for x in location],
                "fixed": bool(mk.fixed[k]),
            }
        )
    return out


def _with_forces(model: Model) -> Model:
    """``model`` with an empty force set where it has none (`Model.from_tree`)."""
    from jaxbio.forces import OsimForces

    empty = OsimForces.empty(model.tree.masses.dtype)
    return eqx.tree_at(lambda m: m.forces, model, empty, is_leaf=lambda x: x is None)


def save_model(model, path: str | os.PathLike) -> None:
    """Write ``model`` as JSON (always with ``format`` and ``version``).

    ``model``: a `jaxbio.Model` (e.g. from `load_model`) or a bare `jaxbio.SegmentTree`. A
    model whose coordinates are the tree's own (``coordinates.identity_map``, e.g. one read from
    a ``.json`` without coordinate sections) is written as its tree; any other as its tree plus the sections ``"coordinates"`` (OpenSim's coordinates: name,
    default value and speed, range, clamped, locked, motion type) and ``"coordinate_functions"``
    (each tree coordinate as a piecewise polynomial of one coordinate, `jaxbio.coordinates`), so
    that `load_model` reads back the same coupled coordinates; its markers as the section
    ``"markers"`` (each fixed to a segment, or the world, at its location in that segment's frame:
    the same world positions, `jaxbio.markers.marker_positions`). A model's forces, muscles and
    OpenSim body frames are not part of the format: a `UserWarning` names what is left out.

    The model is validated first as `load_model` would read it back (``ValueError`` naming the
    segment and field, e.g. for a NaN mass after an optimisation step), the path is checked
    (``ValueError`` for a directory, a missing directory, a read-only file), and the file is
    written all-or-nothing (`jaxbio._files`: a temporary file, then `os.replace`), so an existing
    file is never left half-written.
    """
    from jaxbio import _files
    from jaxbio._validate import validate_model_dict

    if isinstance(model, SegmentTree):
        d = model.to_dict()
    elif isinstance(model, Model):
        from jaxbio.coordinates import coordinate_sections

        d = model.tree.to_dict()
        if not _tree_only(model):
            d.update(coordinate_sections(model))
        if model.markers is not None and model.markers.n_markers:
            d["markers"] = _marker_section(model)
        _warn_left_out(model)
    else:
        raise ValueError(f"save_model: expected a jaxbio.Model or a SegmentTree, got {type(model).__name__}")
    validate_model_dict(d)
    data = (json.dumps(d, indent=1, allow_nan=False) + "\n").encode("utf-8")
    (out,) = _files.check_outputs([("model file", path)])
    _files.write_outputs([(out, lambda f: f.write(data))])


def _tree_only(model: Model) -> bool:
    """True when ``model`` holds nothing beyond its tree: what `load_model` makes of a tree
    (coordinates its joints', named after the segments, zero defaults, no ranges or flags)."""
    r = np.asarray(model.ranges, dtype=float)
    plain = _tree_model(model.tree)
    return (
        model.coordinates.identity_map
        and model.coordinate_names == plain.coordinate_names
        and np.array_equal(np.asarray(model.defaults, dtype=float), np.asarray(plain.defaults, dtype=float))
        and not np.any(np.asarray(model.default_speeds, dtype=float))
        and not np.any(np.isfinite(r))
        and not any(model.clamped + model.locked)
    )


def _warn_left_out(model) -> None:
    import warnings

    n = len(getattr(getattr(model, "forces", None), "order", ()))
    if n or getattr(model, "muscles", None) is not None:
        warnings.warn(
            f"save_model: the forces of {model.tree.name!r} ({n} in its ForceSet, muscles included) are not "
            "part of the jaxbio model format and are not written",
            UserWarning,
            stacklevel=3,
        )
