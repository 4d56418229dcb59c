"""The reference fits of the embedded races, shipped with the package (``data/reference_fits.json``).

``jaxbio sprint --fit-until`` learns its population prior from full fits of the embedded races
(`jaxbio.sprint.hierarchical.reference_fits`). Those fits depend only on the races and on the
fit's settings, so they are computed once and shipped; ``reference_fits`` loads them when their
``fingerprint`` equals the one of the races and settings asked for, and fits otherwise.

The fingerprint is a SHA-256 of everything the fits depend on that can change without the code
of the solver changing: each race as parsed (name, distances, times, reaction time, wind: what
the fit reads, so a parser change counts too, a comment in a file does not), the free
parameters' names, every field of the fixed model (`Sprinter`), the fit's defaults
(``settings``: ``fit_splits``' keyword defaults, ``N_STEPS``, ``START_FACTORS``, gathered by
`jaxbio.sprint.hierarchical.reference_fingerprint`, as this module must not import the fit),
``SIGMA_ROUND`` and ``FIT_VERSION``. The solver's code is not hashed: bump ``FIT_VERSION`` when a change to the fit
(``fitting``, ``_solve``, the model's dynamics, ``split_jacobian``) moves its estimates, then
regenerate the file with ``python -m jaxbio.sprint.hierarchical --write-reference``. The tests
fail when the shipped fingerprint differs from the current one (``tests/sprint/test_reference.py``)
and, in the slow set, when a fresh fit differs from the shipped numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib import resources

import jax
import numpy as np

from jaxbio.sprint.data import SIGMA_ROUND
from jaxbio.sprint.model import Sprinter

#: version of the fit's code as far as the reference fits are concerned: bump it when a change
#: to the solver or the model moves the fitted estimates (then regenerate the shipped file)
FIT_VERSION = 1
#: the shipped file, in ``jaxbio/sprint/data/``
FILENAME = "reference_fits.json"
#: the arrays of a `ReferenceFits`, in the file as nested lists of float64 (``repr``: exact)
ARRAYS = ("theta", "gauss_newton", "rss", "n_splits", "converged")


def fingerprint(races, model: Sprinter | None, names, settings: dict) -> str | None:
    """SHA-256 (hex) of what full fits of ``races`` with ``model`` (``None``: ``Sprinter()``),
    free ``names`` and the fit's default ``settings`` (a JSON-able dict) depend on (see the module
    docstring); ``None`` when ``model`` has a leaf that is not a concrete number (traced): such
    fits are never looked up."""
    model = Sprinter() if model is None else model
    try:
        # 12 significant digits: the fields are logs computed by XLA, whose last bit may differ by device
        fixed = {
            f.name: [float(f"{v:.12g}") for v in np.ravel(np.asarray(getattr(model, f.name), dtype=float))]
            for f in dataclasses.fields(model)
        }
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return None
    payload = {
        "fit_version": FIT_VERSION,
        "names": list(names),
        "model": fixed,
        "settings": settings,
        "sigma_round": float(SIGMA_ROUND),
        "races": [
            {
                "name": r.name,
                "distances": np.asarray(r.distances, dtype=float).tolist(),
                "times": np.asarray(r.times, dtype=float).tolist(),
                "reaction_time": float(r.reaction_time),
                "wind": float(r.wind),
            }
            for r in races
        ],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def shipped_file():
    """The shipped file (an ``importlib.resources`` path; it may be missing)."""
    return resources.files("jaxbio.sprint") / "data" / FILENAME


def read(path=None) -> dict | None:
    """The shipped file's content: ``{"fingerprint", "race_names", "names", "theta", …}`` with
    the ``ARRAYS`` as numpy (``converged`` bool); ``None`` when the file is missing or not readable
    as such (then the fits are computed)."""
    path = shipped_file() if path is None else path
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        out = {
            "fingerprint": str(raw["fingerprint"]),
            "race_names": tuple(raw["race_names"]),
            "names": tuple(raw["names"]),
        }
        for key in ARRAYS:
            out[key] = np.asarray(raw[key], dtype=bool if key == "converged" else float)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return out


def _float64() -> bool:
    return bool(jax.config.jax_enable_x64)


def lookup(races, key: str | None) -> dict | None:
    """The shipped reference fits (``read``) if their fingerprint is ``key`` (``fingerprint`` of
    ``races`` and the settings asked for) and they are of ``races``, computed in float64 (the file's; with JAX in float32
    a fit differs, so it is computed); else ``None``."""
    if not _float64():
        return None
    shipped = read()
    if shipped is None or shipped["race_names"] != tuple(r.name for r in races):
        return None
    if key is None or shipped["fingerprint"] != key:
        return None
    return shipped


def write(path, ref, key: str) -> None:
    """Write the `ReferenceFits` ``ref`` to ``path`` (JSON) with its fingerprint ``key``."""
    out = {
        "fingerprint": str(key),
        "fit_version": FIT_VERSION,
        "generated_by": "python -m jaxbio.sprint.hierarchical --write-reference",
        "race_names": list(ref.race_names),
        "names": list(ref.names),
    }
    for key in ARRAYS:
        a = np.asarray(getattr(ref, key))
        out[key] = a.astype(bool).tolist() if key == "converged" else a.astype(float).tolist()
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
