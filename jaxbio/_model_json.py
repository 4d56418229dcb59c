"""The jaxbio model format's reader (JSON → `jaxbio.SegmentTree` and coordinate sections, numpy;
nothing is compiled): the one path by which a model ``.json`` or a shipped model is read, for
`jaxbio.load_model` (`jaxbio.io`) and for the core's own users of the shipped models
(`jaxbio.muscles.sets.load_muscle_set`)."""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import os
from pathlib import Path

from jaxbio._files import read_bytes, text_encoding
from jaxbio._validate import model_dtype
from jaxbio.model import model_path, shipped_models
from jaxbio.tree import SegmentTree

__all__ = ["read_json", "read_model_file"]


def read_model_file(path, dtype=None):
    """``(tree, coordinates, markers)``: the tree of a model ``.json`` (or a shipped model's name),
    the file's validated coupled-coordinate sections (`jaxbio._validate.validate_coordinates_dict`)
    and its validated markers (`jaxbio._validate.validate_markers_dict`); each None when the file
    has none."""
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
    d = read_json(p)
    try:
        tree = SegmentTree.from_dict(d, dtype=dtype)
        checked = validate_model_dict(d) if ("coordinates" in d or "markers" in d) else {}
        return tree, checked.get("coordinates"), checked.get("markers")
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


def read_json(p: Path):
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
