"""100 m split-time files: reading, validation and the races embedded in the package.

Format (API.md, ``data/README.md``): ``#`` header lines ``# key: value`` (athlete, race, date,
result, wind, reaction_time_s, source, …), then the column line ``distance_m,time_s`` and one
row per split. Times are from the gun (reaction time included); an optional ``0,0.00`` row is the
gun. ``reaction_time_s`` is required; ``wind`` (m/s, tail wind positive) defaults to 0.

Every problem raises ``SprintDataError`` (a ``ValueError``) whose message is one line
``FILE:LINE: problem``. Parsing is numpy only, outside jit.
"""

from __future__ import annotations

import dataclasses
import math
import re
from importlib import resources
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

COLUMNS = ("distance_m", "time_s")
_NUMBER = re.compile(r"^\s*([+\-−]?\d+(?:\.\d*)?(?:[eE][+\-]?\d+)?|[+\-−]?\.\d+)")


class SprintDataError(ValueError):
    """A bad split-time file: ``str(err)`` is ``FILE:LINE: problem`` (``LINE`` 0 if none)."""

    def __init__(self, path, line: int, problem: str):
        self.path, self.line, self.problem = str(path), int(line), problem
        super().__init__(f"{self.path}:{self.line}: {problem}")


@dataclasses.dataclass(frozen=True)
class Race:
    """One race's splits (numpy, outside jit).

    ``distances`` ``(n,)`` m and ``times`` ``(n,)`` s from the gun, the splits after the start
    (the ``0,0`` row is dropped); ``reaction_time`` s; ``wind`` m/s (tail wind positive);
    ``lines`` ``(n,)`` the file line of each split (for error messages); ``header`` the ``#``
    key/value pairs; ``path`` where it was read from; ``name`` the file stem.
    """

    name: str
    distances: np.ndarray
    times: np.ndarray
    reaction_time: float
    wind: float
    header: dict
    path: str
    lines: np.ndarray

    @property
    def n(self) -> int:
        return int(self.distances.shape[0])

    @property
    def label(self) -> str:
        """Short description from the header: athlete, race/date, result."""
        athlete = self.header.get("athlete", self.name).split("(")[0].strip()
        date = self.header.get("date", "")[:4]
        return f"{athlete} {date}".strip()

    def until(self, distance: float) -> np.ndarray:
        """Boolean mask ``(n,)`` of the splits at or before ``distance`` m."""
        return self.distances <= distance + 1e-9


def _leading_number(text: str):
    m = _NUMBER.match(text)
    if not m:
        return None
    return float(m.group(1).replace("−", "-"))


def read_csv(path, name: str | None = None, text: str | None = None) -> Race:
    """Read and validate one split-time file; ``SprintDataError`` naming file and line on error.

    ``text`` may give the contents directly (``path`` is then only used in messages).
    """
    path = str(path)
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SprintDataError(path, 0, "no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise SprintDataError(path, 0, f"cannot read the file ({e.__class__.__name__}: {e})") from None
    header: dict[str, str] = {}
    header_lines: dict[str, int] = {}
    columns_line = None
    rows: list[tuple[float, float, int]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep:
                header[key.strip().lower()] = value.strip()
                header_lines[key.strip().lower()] = lineno
            continue
        cells = [c.strip() for c in line.split(",")]
        if columns_line is None:
            if tuple(c.lower() for c in cells) != COLUMNS:
                raise SprintDataError(path, lineno, f"expected the column line 'distance_m,time_s', got {line!r}")
            columns_line = lineno
            continue
        if len(cells) != 2:
            raise SprintDataError(path, lineno, f"expected 2 values (distance_m,time_s), got {len(cells)}: {line!r}")
        try:
            d, t = float(cells[0]), float(cells[1])
        except ValueError:
            raise SprintDataError(path, lineno, f"not a number: {line!r}") from None
        if not (math.isfinite(d) and math.isfinite(t)):
            raise SprintDataError(path, lineno, f"NaN or infinite value: {line!r}")
        if d < 0 or t < 0:
            raise SprintDataError(path, lineno, f"negative distance or time: {line!r}")
        rows.append((d, t, lineno))
    if columns_line is None:
        raise SprintDataError(path, 0, "missing the column line 'distance_m,time_s'")
    if "reaction_time_s" not in header:
        raise SprintDataError(path, 0, "missing the header line '# reaction_time_s: <seconds>'")
    rt_line = header_lines["reaction_time_s"]
    rt = _leading_number(header["reaction_time_s"])
    if rt is None or not math.isfinite(rt) or not 0 <= rt < 1:
        raise SprintDataError(path, rt_line, f"reaction_time_s must be a number in [0, 1) s, got {header['reaction_time_s']!r}")
    wind = 0.0
    if "wind" in header:
        w = _leading_number(header["wind"])
        if w is None or not math.isfinite(w) or abs(w) > 20:
            raise SprintDataError(path, header_lines["wind"], f"wind must start with a number in m/s, got {header['wind']!r}")
        wind = w
    if rows and rows[0][0] == 0.0:
        if rows[0][1] != 0.0:
            raise SprintDataError(path, rows[0][2], "the 0 m row is the gun and must have time 0 (times are from the gun)")
        rows = rows[1:]
    if not rows:
        raise SprintDataError(path, columns_line, "no splits after the column line")
    for (d0, t0, _), (d1, t1, ln) in zip(rows[:-1], rows[1:]):
        if d1 <= d0:
            raise SprintDataError(path, ln, f"distances must increase: {d1:g} m after {d0:g} m")
        if t1 <= t0:
            raise SprintDataError(path, ln, f"times must increase: {t1:g} s at {d1:g} m after {t0:g} s at {d0:g} m")
    if rows[0][1] <= rt:
        raise SprintDataError(path, rows[0][2], f"first split time {rows[0][1]:g} s is not after the reaction time {rt:g} s")
    arr = np.array(rows, dtype=float)
    return Race(name=name or Path(path).stem, distances=arr[:, 0], times=arr[:, 1], reaction_time=float(rt),
                wind=float(wind), header=header, path=path, lines=arr[:, 2].astype(int))


def _data_dir():
    return resources.files("jaxbio.sprint") / "data"


def embedded_names() -> list[str]:
    """Names (file stems) of the races shipped with jaxbio, sorted."""
    return sorted(p.name[:-4] for p in _data_dir().iterdir() if p.name.endswith(".csv"))


def load_race(name: str) -> Race:
    """An embedded race by name (``embedded_names()``); ``ValueError`` for an unknown name."""
    names = embedded_names()
    if name not in names:
        matches = [n for n in names if n.startswith(name)]
        if len(matches) != 1:
            raise ValueError(f"unknown race {name!r}; embedded races: {', '.join(names)}")
        name = matches[0]
    f = _data_dir() / f"{name}.csv"
    return read_csv(f"jaxbio/sprint/data/{name}.csv", name=name, text=f.read_text(encoding="utf-8"))


def embedded_races() -> list[Race]:
    """All embedded races, sorted by name."""
    return [load_race(n) for n in embedded_names()]


# ---- races as padded arrays (what the fits take) ----------------------------------------------

#: standard deviation of a split time rounded to 0.01 s (uniform rounding error), s
SIGMA_ROUND = 0.01 / np.sqrt(12.0)


class Splits(eqx.Module):
    """A batch of races as padded arrays (pure data; ``jax.vmap`` over the leading axis).

    ``distances`` ``(B, L)`` m, ``times`` ``(B, L)`` s from the gun, ``weights`` ``(B, L)``
    (1 for a split that is fitted, 0 for padding or for a split only predicted),
    ``reaction_time`` ``(B,)`` s, ``wind`` ``(B,)`` m/s, ``duration`` ``(B,)`` s simulated after
    the reaction. Padding repeats the last split.
    """

    distances: Float[Array, "B L"]
    times: Float[Array, "B L"]
    weights: Float[Array, "B L"]
    reaction_time: Float[Array, " B"]
    wind: Float[Array, " B"]
    duration: Float[Array, " B"]

    @staticmethod
    def from_arrays(distances, times, reaction_time, wind=None, weights=None, length: int | None = None) -> "Splits":
        """From lists of per-race arrays (numpy); pads to ``length`` (default the longest race)."""
        n = [len(d) for d in distances]
        L = length or max(n)
        B = len(distances)
        D = np.zeros((B, L)); T = np.zeros((B, L)); W = np.zeros((B, L))
        for i, (d, t) in enumerate(zip(distances, times)):
            k = len(d)
            D[i, :k], T[i, :k] = d, t
            D[i, k:], T[i, k:] = d[-1], t[-1]
            W[i, :k] = 1.0 if weights is None else np.asarray(weights[i], dtype=float)
        rt = np.asarray(reaction_time, dtype=float).reshape(B)
        wind = np.zeros(B) if wind is None else np.asarray(wind, dtype=float).reshape(B)
        last_t = np.array([t[-1] for t in times])
        duration = 1.3 * (last_t - rt) + 1.0
        return Splits(*(jnp.asarray(a) for a in (D, T, W, rt, wind, duration)))

    def race(self, i: int) -> "Splits":
        return jax.tree_util.tree_map(lambda a: a[i], self)
