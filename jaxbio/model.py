"""Load and save models in the jaxbio JSON format (version 1), and the shipped models."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

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
    ``"wholebody"``, ``"double_pendulum"``). ``dtype`` defaults to JAX's default float type.
    Raises `ValueError` naming the file, segment and field of any defect.
    """
    p = Path(path)
    if not p.exists() and p.suffix == "" and p.name == str(path):
        p = model_path(str(path))
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"{p}: no such model file") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON (line {e.lineno}: {e.msg})") from None
    try:
        return SegmentTree.from_dict(d, dtype=dtype)
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from None


def save_model(tree: SegmentTree, path: str | os.PathLike) -> None:
    """Write ``tree`` as JSON (always with ``format`` and ``version``)."""
    Path(path).write_text(json.dumps(tree.to_dict(), indent=1) + "\n")
