"""`load_model` and `save_model`: a `jaxbio.Model` from a file (a jaxbio model ``.json``, a
shipped model's name, an OpenSim ``.osim``) or from a tree, and back to JSON (numpy; nothing is
compiled while reading)."""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import os
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxbio._files import read_bytes, text_encoding
from jaxbio._validate import model_dtype
from jaxbio.model import Model, model_path, shipped_models
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
    tree, section = _read_model_file(model, dtype)
    return _tree_model(tree, section)


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


def _with_forces(model: Model) -> Model:
    """``model`` with an empty force set where it has none (`Model.from_tree`)."""
    from jaxbio.forces import OsimForces

    empty = OsimForces.empty(model.tree.masses.dtype)
    return eqx.tree_at(lambda m: m.forces, model, empty, is_leaf=lambda x: x is None)


def _read_model_file(path, dtype=None):
    """``(tree, coordinates)``: the tree of a model ``.json`` (or a shipped model's name) and the
    file's validated coupled-coordinate sections (`jaxbio._validate.validate_coordinates_dict`;
    None when it has none)."""
    from jaxbio._validate import validate_model_dict

    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"model path must be a str or os.PathLike, got {type(path).__name__} {path!r}")
    model_dtype(dtype)  # an argument error, not the file's
    if os.fspath(path) == "":
        raise ValueError(
            f"model path is empty: give a model .json file or a shipped model name ({', '.join(shipped_models())})"
        )
    p = Path(path)
    if not p.exists() and p.suffix == "" and p.name == str(path):
        p = model_path(str(path))
    d = _read_json(p)
    try:
        tree = SegmentTree.from_dict(d, dtype=dtype)
        return tree, (validate_model_dict(d)["coordinates"] if "coordinates" in d else None)
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str, line: int):
        super().__init__(
            f"duplicate key {key!r} in the JSON object starting at line {line} "
            "(a JSON reader would silently keep one of the two values)"
        )


def _object_without_duplicates(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None, *args):
    """`json.decoder.JSONObject` that refuses a key given twice in one object (with its line)."""
    s, start = s_and_end
    pairs, end = json.decoder.JSONObject(s_and_end, strict, scan_once, None, list, memo, *args)
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(key, s.count("\n", 0, start) + 1)
        seen.add(key)
    return dict(pairs), end


def _parse_json(text: str):
    decoder = json.JSONDecoder()
    decoder.parse_object = _object_without_duplicates
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # the C scanner ignores parse_object
    return decoder.decode(text)


def _read_json(p: Path):
    """The JSON value in file ``p``; ``ValueError`` "``p``: problem" for anything unreadable."""
    raw = read_bytes(p, "model file")
    if not raw.strip():
        raise ValueError(f"{p}: empty file (expected a JSON model object)")
    encoding = text_encoding(raw)
    if encoding:
        raise ValueError(f"{p}: the file is {encoding} encoded; save it as UTF-8 (model files are UTF-8 JSON)")
    if raw.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        raise ValueError(
            f"{p}: is an XML document (an OpenSim .osim model?), not a jaxbio model .json; an .osim "
            "model is read by jaxbio.io.load_osim (on the command line: with --motion)"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{p}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}, line {line}); "
            "model files are UTF-8 JSON"
        ) from None
    try:
        return _parse_json(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except _DuplicateKey as e:
        raise ValueError(f"{p}: {e}") from None
    except RecursionError:
        raise ValueError(f"{p}: not valid model JSON (nested too deeply)") from None
    except ValueError as e:  # e.g. an integer literal with more digits than Python converts
        raise ValueError(f"{p}: not valid JSON ({e})") from None


def save_model(model, path: str | os.PathLike) -> None:
    """Write ``model`` as JSON (always with ``format`` and ``version``).

    ``model``: a `jaxbio.Model` (e.g. from `load_model`) or a bare `jaxbio.SegmentTree`. A
    model whose coordinates are the tree's own (``coordinates.identity_map``, e.g. one read from
    a ``.json`` without coordinate sections) is written as its tree; any other as its tree plus the sections ``"coordinates"`` (OpenSim's coordinates: name,
    default value and speed, range, clamped, locked, motion type) and ``"coordinate_functions"``
    (each tree coordinate as a piecewise polynomial of one coordinate, `jaxbio.coordinates`), so
    that `load_model` reads back the same coupled coordinates. A model's forces,
    muscles and OpenSim body frames are not part of the format: a `UserWarning` names what is
    left out.

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
