"""Load and save models in the jaxbio JSON format (version 1), and the shipped models."""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import os
from importlib import resources
from pathlib import Path

from jaxbio._files import read_bytes, text_encoding
from jaxbio._validate import model_dtype
from jaxbio.tree import SegmentTree

__all__ = ["load_model", "save_model", "shipped_models", "model_path"]


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


def load_model(path: str | os.PathLike, *, dtype=None) -> SegmentTree:
    """Read a model file (JSON, ``format: jaxbio-model``) into a validated `SegmentTree`.

    ``path`` is a file path or the name of a shipped model (``"arm7"``, ``"sagittal11"``,
    ``"wholebody"``, ``"double_pendulum"``, ``"arm26"``). ``dtype`` (a floating dtype) defaults to
    JAX's default float type.

    Raises `ValueError` starting with the file's path for every defect: a missing file, a
    directory, no permission, an empty file, bytes that are not UTF-8 (with the line), invalid
    JSON (with the line), a key given twice in one object (with the object's line), and every
    model defect of `SegmentTree.from_dict` (naming the segment and field: ``NaN``/``Infinity``
    literals, unknown fields, wrong types …), including the checks after the cast to ``dtype``.
    An empty path or a non-floating ``dtype`` is an argument error (no path prefix).

    A file with coupled coordinates (the optional ``"coordinates"`` and ``"coordinate_functions"``
    sections, written by `save_model` from a `jaxbio.io.OsimModel`) is validated whole; the tree
    returned here is driven by its own joint coordinates ``q``. `jaxbio.io.load_any_model` (and
    the command line's ``--model``) reads the model with its coordinates ``c`` and the map
    ``q = f(c)``.
    """
    return _load(path, dtype)[0]


def _load(path, dtype=None):
    """``(tree, coordinates)``: `load_model`'s tree and the file's validated coupled-coordinate
    sections (`jaxbio._validate.validate_coordinates_dict`; None when it has none)."""
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

    ``model``: a `SegmentTree`, or a `jaxbio.io.OsimModel` (e.g. from `jaxbio.io.load_osim`),
    written as its tree plus the sections ``"coordinates"`` (OpenSim's coordinates: name,
    default value and speed, range, clamped, locked, motion type) and ``"coordinate_functions"``
    (each tree coordinate as a piecewise polynomial of one coordinate, `jaxbio.coordinates`), so
    that `jaxbio.io.load_any_model` reads back the same coupled coordinates. An OsimModel's forces,
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
    elif isinstance(getattr(model, "tree", None), SegmentTree) and hasattr(model, "coordinates"):
        from jaxbio.coordinates import coordinate_sections

        d = model.tree.to_dict()
        d.update(coordinate_sections(model))
        _warn_left_out(model)
    else:
        raise ValueError(f"save_model: expected a SegmentTree or an OsimModel, got {type(model).__name__}")
    validate_model_dict(d)
    data = (json.dumps(d, indent=1, allow_nan=False) + "\n").encode("utf-8")
    (out,) = _files.check_outputs([("model file", path)])
    _files.write_outputs([(out, lambda f: f.write(data))])


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
