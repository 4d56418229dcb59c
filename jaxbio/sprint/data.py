"""Sprint split-time files (60–200 m): reading, validation and the races embedded in the package.

Format (API.md, ``data/README.md``): ``#`` header lines ``# key: value`` (athlete, race, date,
result, wind, reaction_time_s, source, …), then the column line ``distance_m,time_s`` and one
row per split. Times are from the gun (reaction time included); an optional ``0,0.00`` row is the
gun. ``reaction_time_s`` is required; ``wind`` (tail wind positive) may be missing or free text.

What is accepted (everything else is refused, never guessed):

- Text: UTF-8 (a byte-order mark is skipped) or UTF-16 with a byte-order mark; LF, CRLF or CR
  line ends; blank lines and ``#`` lines without ``:`` are comments.
- Header values are ``NUMBER [UNIT] [(remark)]``: the number may use a decimal point or a decimal
  comma (``0,146``), a sign ``+``, ``-``, ``−`` (U+2212) or ``–`` (U+2013); anything after the
  number and unit must be a remark in parentheses. ``reaction_time_s`` in s (no unit, ``s``) or
  ``ms``; ``wind`` in m/s (no unit, ``m/s``), ``km/h`` or ``mph``, converted to m/s. Each key at
  most once (a repeated key is refused with both lines).
- ``reaction_time_s`` that cannot be read as one number as above — two numbers
  (``RT 0.146 / 0.152``), text (``n/a``, ``not given``), text after the number outside parentheses
  — is *unknown*: ``ASSUMED_REACTION`` (0.15 s) is assumed, ``Race.reaction_time_known`` is False
  and a ``SprintDataWarning`` says so; the model choice (`jaxbio.sprint.selection.fit_selected`,
  what ``jaxbio sprint`` runs) then always fits the start offset ``rt_offset`` with its prior
  N(0, 0.05 s) around it. A readable number out of range is still refused (below), and so is a
  missing ``reaction_time_s`` line.
- ``wind`` whose value (before any remark) has no digit — missing, empty, ``n/a``, ``unknown``,
  ``not given in the sources seen`` — is *unknown*: 0 m/s is assumed, ``Race.wind_known`` is
  False and a ``SprintDataWarning`` says so.
- Impossible values are refused: reaction time < 0 s or ≥ 1 s, |wind| > 20 m/s. Implausible ones
  are accepted with a ``SprintDataWarning``: reaction time outside 0.08–0.5 s, |wind| > 10 m/s.
- Columns are separated by ``,`` (then numbers take a decimal point), or by ``;`` or a tab (then
  a decimal comma is also read), as the column line shows. Numbers are plain decimals
  (``12``, ``1.88``, ``1.5e1``): no NaN, infinity, thousands separators or units.
- Splits: distances in (0, 200] m (the model is for sprints up to 200 m, the race length being
  the last split; a 200 m race's bend is ignored: the model runs on a straight), strictly
  increasing (rows out of order or repeated are refused, not sorted), at least 1 m apart; times
  strictly increasing, after the reaction time, and between 1.5 and 15 m/s over every split
  (faster: no human; slower: times not in seconds, or a typo).

Every problem raises ``SprintDataError`` (a ``ValueError``) whose message is one line
``FILE:LINE: problem``. Parsing is numpy only, outside jit.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
import re
import warnings
from importlib import resources
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio._files import InputFileError, read_bytes, text_encoding
from jaxbio._validate import check_choice, echo

COLUMNS = ("distance_m", "time_s")
#: the longest race the model is for, m: 60 m (indoor), 100 m and 200 m. The model runs on a
#: straight (a 200 m race's bend is ignored) and its fatigue is the phosphagen reserve alone, which
#: does not describe the glycolytic 300–400 m
MAX_DISTANCE = 200.0
#: closest accepted splits, m: the fit treats each split as an independent reading rounded to
#: 0.01 s, and a sprinter covers ~0.12 m in 0.01 s, so denser "splits" are a resampled curve
MIN_SPACING = 1.0
#: fastest accepted mean speed over a split, m/s (the fastest 10 m ever timed: ~12.5 m/s; 1 m
#: splits rounded to 0.01 s can read up to ~14.3 m/s)
MAX_SPEED = 15.0
#: slowest accepted mean speed over a split, m/s: even a 1 m first split from the blocks is run at
#: ~2 m/s; slower means times not in seconds (ms, 1/100 s) or a typo such as 19.58 for 9.58
MIN_SPEED = 1.5
#: reaction times outside this range (s) are accepted with a warning; below 0 or from 1 s refused
PLAUSIBLE_REACTION = (0.08, 0.5)
#: reaction time [s] assumed when the file's cannot be read as one number (``Race.reaction_time_known``
#: False): a typical elite sprinter's (the embedded races: 0.133–0.165 s); the start offset fitted
#: by the model choice (prior sd 0.05 s) moves it
ASSUMED_REACTION = 0.15
#: |wind| above this (m/s) is accepted with a warning; above ``MAX_WIND`` refused
PLAUSIBLE_WIND = 10.0
MAX_WIND = 20.0

_MINUS = "-−–"  # hyphen-minus, U+2212 minus sign, U+2013 en dash (printed results use it)
_HEADER_NUMBER = re.compile(
    rf"^(?P<sign>[+{re.escape(_MINUS)}]?)(?P<num>\d+(?:[.,]\d+)?|[.,]\d+)(?P<rest>.*)$", re.S | re.A
)
_CELL_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$", re.A)
_NAN_INF = {"nan", "inf", "infinity"}
#: accepted units: lower-cased spelling -> (multiply, divide) to SI (a division keeps ``146 ms`` and
#: ``3.2 km/h`` exactly the correctly rounded 146/1000 and 3.2/3.6)
_UNITS = {
    "reaction_time_s": ({"": (1, 1), "s": (1, 1), "sec": (1, 1), "ms": (1, 1000), "msec": (1, 1000)}, "s, ms"),
    "wind": (
        {
            "": (1, 1),
            "m/s": (1, 1),
            "m s-1": (1, 1),
            "m s⁻¹": (1, 1),
            "m·s⁻¹": (1, 1),
            "m·s-1": (1, 1),
            "km/h": (1, 3.6),
            "kph": (1, 3.6),
            "mph": (0.44704, 1),
        },
        "m/s, km/h, mph",
    ),
}
_SEPARATORS = {",": "a comma", ";": "a semicolon", "\t": "a tab"}


class SprintDataError(ValueError):
    """A bad split-time file: ``str(err)`` is ``FILE:LINE: problem`` (``LINE`` 0 if none)."""

    def __init__(self, path, line: int, problem: str):
        self.path, self.line, self.problem = str(path), int(line), problem
        super().__init__(f"{self.path}:{self.line}: {problem}")


class SprintDataWarning(UserWarning):
    """A split-time file that is read but looks wrong or lacks something (implausible reaction time
    or wind, unknown wind): ``str(w)`` is ``FILE:LINE: problem``."""

    def __init__(self, path, line: int, problem: str):
        self.path, self.line, self.problem = str(path), int(line), problem
        super().__init__(f"{self.path}:{self.line}: {problem}")


@dataclasses.dataclass(frozen=True)
class Race:
    """One race's splits (numpy, outside jit).

    ``distances`` ``(n,)`` m and ``times`` ``(n,)`` s from the gun, the splits after the start
    (the ``0,0`` row is dropped); ``reaction_time`` s; ``wind`` m/s (tail wind positive; 0 when
    unknown); ``lines`` ``(n,)`` the file line of each split (for error messages); ``header`` the
    ``#`` key/value pairs; ``path`` where it was read from; ``name`` the file stem;
    ``wind_known`` False when the file gives no wind (0 m/s assumed); ``reaction_time_known``
    False when the file's reaction time cannot be read as one number (``ASSUMED_REACTION`` assumed,
    the start offset fitted by the model choice).
    """

    name: str
    distances: np.ndarray
    times: np.ndarray
    reaction_time: float
    wind: float
    header: dict
    path: str
    lines: np.ndarray
    wind_known: bool = True
    reaction_time_known: bool = True

    @property
    def n(self) -> int:
        return int(self.distances.shape[0])

    @property
    def label(self) -> str:
        """Short description from the header: athlete and year."""
        return header_label(self.header, self.name)

    def until(self, distance: float) -> np.ndarray:
        """Boolean mask ``(n,)`` of the splits at or before ``distance`` m."""
        return self.distances <= distance + 1e-9


def race_sex(race) -> str | None:
    """``"female"`` or ``"male"`` from a race's header (a ``sex`` line, else the word "women" or
    "men" in its ``race`` line, as the embedded files write it), ``None`` when neither says."""
    header = getattr(race, "header", {}) or {}
    sex = header.get("sex", "").strip().lower()
    if sex in ("female", "f", "women", "woman"):
        return "female"
    if sex in ("male", "m", "men", "man"):
        return "male"
    words = re.findall(r"[a-z]+", header.get("race", "").lower())
    if "women" in words or "womens" in words:
        return "female"
    if "men" in words or "mens" in words:
        return "male"
    return None


def header_label(header: dict, name: str) -> str:
    """``"athlete year"`` from a file's header (the athlete without a bracketed country; ``name``
    when the header names no athlete): the short label of a race or a trace."""
    athlete = header.get("athlete", name).split("(")[0].strip()
    return f"{athlete} {header.get('date', '')[:4]}".strip()


def _decode(path: str, data: bytes) -> str:
    """Bytes to text: UTF-16 with a byte-order mark, else UTF-8 (BOM skipped); else refused with
    the line of the first undecodable byte, or the encoding for UTF-32 and UTF-16 without a mark."""
    encoding = text_encoding(data)
    if encoding and not encoding.startswith("UTF-16") or encoding and "without" in encoding:
        raise SprintDataError(
            path, 0, f"the file is {encoding} encoded; save it as UTF-8 (or UTF-16 with a byte-order mark)"
        )
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise SprintDataError(
                path, 0, "not valid UTF-16 text although it starts with a UTF-16 byte-order mark"
            ) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = len((data[: e.start].decode("utf-8-sig") + "x").splitlines())  # counted as read_csv does
        raise SprintDataError(
            path, line, f"not UTF-8 text (byte 0x{data[e.start]:02x}); save the file as UTF-8"
        ) from None


def _header_quantity(path: str, lineno: int, key: str, value: str):
    """``NUMBER [UNIT] [(remark)]`` → value in SI units, or None when the value (before any remark)
    has no digit (free text such as ``n/a``); ``SprintDataError`` for anything else."""
    main = value.split("(", 1)[0].strip()
    has_digit = lambda s: any(c.isdecimal() for c in s)  # noqa: E731
    if not has_digit(main) and (main or not has_digit(value)):  # free text, possibly with a remark
        return None
    units, names = _UNITS[key]
    how = f"write a number, an optional unit ({names}) and any remark in parentheses, e.g. " + (
        "'0.146 s (official)'" if key == "reaction_time_s" else "'+0.9 m/s (official)'"
    )
    m = _HEADER_NUMBER.match(main)
    if not m:
        raise SprintDataError(path, lineno, f"{key}: cannot read {echo(value)}; {how}")
    rest = m["rest"].strip()
    if m["rest"][:1] in (".", ",") or m["rest"][:1].isdigit():
        raise SprintDataError(
            path,
            lineno,
            f"{key}: cannot read the number in {echo(value)} (one decimal mark, no thousands separator); {how}",
        )
    unit = rest.lower()
    if unit not in units:
        raise SprintDataError(
            path, lineno, f"{key}: unknown unit or text {echo(rest)} after the number in {echo(value)}; {how}"
        )
    mul, div = units[unit]
    x = float(m["num"].replace(",", ".")) * mul / div
    return (-x if m["sign"] and m["sign"] in _MINUS else x) + 0.0  # + 0.0: no -0.0


def _cell(path: str, lineno: int, cell: str, decimal_comma: bool, line: str) -> float:
    c = cell.replace("−", "-")
    if c.lower().lstrip("+-") in _NAN_INF:
        raise SprintDataError(path, lineno, f"NaN or infinite value: {echo(line)}")
    if decimal_comma:
        if "," in c and "." in c:
            raise SprintDataError(path, lineno, f"both a decimal comma and a point in {echo(cell)}: {echo(line)}")
        c = c.replace(",", ".")
    if not _CELL_NUMBER.match(c):
        raise SprintDataError(path, lineno, f"not a number: {echo(cell)} in {echo(line)}")
    x = float(c)
    if not math.isfinite(x):
        raise SprintDataError(path, lineno, f"NaN or infinite value: {echo(line)}")
    return x


def _reaction_time_and_wind(
    path: str, header: dict, header_lines: dict, required: bool = True, unreadable_ok: bool = False
):
    """The header's reaction time [s] and wind [m/s], checked as the module docstring says:
    ``(rt, wind, wind_known, notes)``, ``notes`` the warnings to give once the file is accepted.
    A missing ``reaction_time_s`` is refused if ``required``, else ``rt`` is None. With
    ``unreadable_ok`` a value that cannot be read as one number (text, two numbers) gives ``rt``
    None and a warning (the caller assumes ``ASSUMED_REACTION``); else it is refused."""
    notes: list[tuple] = []  # warnings, given only if the file is accepted
    rt = None
    if "reaction_time_s" not in header and required:
        similar = [f"{echo(k)} (line {header_lines[k]})" for k in header if "reaction" in k or k in ("rt", "rt_s")]
        hint = f"; found {', '.join(similar)}, the key must be 'reaction_time_s'" if similar else ""
        raise SprintDataError(path, 0, f"missing the header line '# reaction_time_s: <seconds>'{hint}")
    if "reaction_time_s" in header:
        rt_line = header_lines["reaction_time_s"]
        value = header["reaction_time_s"]
        try:
            rt = _header_quantity(path, rt_line, "reaction_time_s", value)
        except SprintDataError:
            if not unreadable_ok:
                raise
            rt = None
        if rt is None and unreadable_ok:  # text or two numbers: unknown, assumed, the start offset fitted
            notes.append(
                (
                    path,
                    rt_line,
                    f"reaction_time_s {echo(value)} is not one number in s or ms: reaction time unknown, "
                    f"{ASSUMED_REACTION:g} s assumed and the start offset fitted with its prior "
                    "(write one number, e.g. '0.146 s (official)', to use it)",
                )
            )
        else:
            if rt is None or not 0 <= rt < 1:
                got = f"{echo(value)}" + ("" if rt is None else f" = {rt:g} s")
                hint = " (milliseconds? write the unit: '146 ms')" if rt is not None and rt >= 1 else ""
                raise SprintDataError(path, rt_line, f"reaction_time_s must be a number in [0, 1) s, got {got}{hint}")
            lo, hi = PLAUSIBLE_REACTION
            if not lo <= rt <= hi:
                notes.append(
                    (path, rt_line, f"reaction time {rt:g} s is outside the usual {lo:g}–{hi:g} s; check the file")
                )
    wind, wind_known = 0.0, True
    wind_line = header_lines.get("wind", 0)
    w = _header_quantity(path, wind_line, "wind", header["wind"]) if "wind" in header else None
    if w is None:
        wind_known = False
        given = f"wind {echo(header['wind'])}" if "wind" in header else "no '# wind:' line"
        notes.append((path, wind_line, f"{given}: wind unknown, 0 m/s assumed"))
    else:
        if abs(w) > MAX_WIND:
            raise SprintDataError(
                path,
                wind_line,
                f"wind {echo(header['wind'])} = {w:g} m/s is impossible for a race (|wind| ≤ {MAX_WIND:g} m/s)",
            )
        if abs(w) > PLAUSIBLE_WIND:
            notes.append(
                (
                    path,
                    wind_line,
                    f"wind {w:g} m/s is beyond ±{PLAUSIBLE_WIND:g} m/s; check the file (km/h? then write the unit)",
                )
            )
        wind = w
    return rt, wind, wind_known, notes


def read_csv(path, name: str | None = None, text: str | bytes | None = None) -> Race:
    """Read and validate one split-time file (rules in the module docstring).

    ``text`` may give the contents directly, as ``str`` or as the file's ``bytes`` (``path`` is
    then only used in messages). Returns a ``Race``; raises ``SprintDataError`` naming file and
    line; warns ``SprintDataWarning`` (``warnings.warn``) for implausible or unknown values.
    """
    path = str(path)
    if text is None:
        try:
            text = read_bytes(path, "split file")
        except InputFileError as e:
            raise SprintDataError(path, 0, e.problem) from None
    if isinstance(text, (bytes, bytearray)):
        text = _decode(path, bytes(text))
    if text.startswith("\ufeff"):
        text = text[1:]
    header: dict[str, str] = {}
    header_lines: dict[str, int] = {}
    columns_line = None
    sep = ","
    rows: list[tuple[float, float, int]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            key, colon, value = line[1:].partition(":")
            if colon:
                key = key.strip().lower()
                if key in header:
                    raise SprintDataError(
                        path,
                        lineno,
                        f"header key {echo(key)} given twice (lines {header_lines[key]} and {lineno}); keep one",
                    )
                header[key] = value.strip()
                header_lines[key] = lineno
            continue
        if columns_line is None:
            for sep in _SEPARATORS:
                if tuple(c.strip().lower() for c in line.split(sep)) == COLUMNS:
                    break
            else:
                raise SprintDataError(path, lineno, f"expected the column line 'distance_m,time_s', got {echo(line)}")
            columns_line = lineno
            continue
        cells = [c.strip() for c in line.split(sep)]
        if len(cells) != 2:
            hint = ""
            if sep == "," and len(cells) in (3, 4):
                hint = " (decimal commas? then separate the columns by ';': 'distance_m;time_s', '10;1,88')"
            elif len(cells) == 1 and any(s in line for s in _SEPARATORS if s != sep):
                hint = f" (the column line uses {_SEPARATORS[sep]} between the columns)"
            raise SprintDataError(
                path, lineno, f"expected 2 values (distance_m,time_s), got {len(cells)}: {echo(line)}{hint}"
            )
        d, t = (_cell(path, lineno, c, sep != ",", line) for c in cells)
        if d < 0 or t < 0:
            raise SprintDataError(path, lineno, f"negative distance or time: {echo(line)}")
        rows.append((d, t, lineno))
    if columns_line is None:
        raise SprintDataError(path, 0, "missing the column line 'distance_m,time_s'")
    rt, wind, wind_known, notes = _reaction_time_and_wind(path, header, header_lines, unreadable_ok=True)
    rt_known = rt is not None
    rt = ASSUMED_REACTION if rt is None else rt
    if rows and rows[0][0] == 0.0:
        if rows[0][1] != 0.0:
            raise SprintDataError(
                path, rows[0][2], "the 0 m row is the gun and must have time 0 (times are from the gun)"
            )
        rows = rows[1:]
    if not rows:
        raise SprintDataError(path, columns_line, "no splits after the column line")
    for d, _t, ln in rows:
        if d > MAX_DISTANCE + 1e-9:
            raise SprintDataError(
                path,
                ln,
                f"split at {d:g} m is beyond {MAX_DISTANCE:g} m: the sprinter model is "
                f"for sprints up to {MAX_DISTANCE:g} m, not longer ones",
            )
    for (d0, t0, l0), (d1, t1, ln) in zip(rows[:-1], rows[1:]):
        if d1 == d0:
            raise SprintDataError(path, ln, f"distance {d1:g} m given twice (lines {l0} and {ln})")
        if d1 < d0:
            raise SprintDataError(
                path,
                ln,
                f"distances must increase: {d1:g} m after {d0:g} m (line {l0}); rows out of order are not sorted",
            )
        if d1 - d0 < MIN_SPACING - 1e-9:
            raise SprintDataError(
                path,
                ln,
                f"splits {d1 - d0:g} m apart ({d0:g} m and {d1:g} m): at least "
                f"{MIN_SPACING:g} m apart, as timed splits are",
            )
        if t1 <= t0:
            raise SprintDataError(path, ln, f"times must increase: {t1:g} s at {d1:g} m after {t0:g} s at {d0:g} m")
    if rows[0][1] <= rt:
        raise SprintDataError(
            path,
            rows[0][2],
            f"first split time {rows[0][1]:g} s is not after the reaction time {rt:g} s"
            + ("" if rt_known else " (assumed: the file's is not one number)"),
        )
    for (d0, t0), (d1, t1, ln) in zip([(0.0, rt)] + [r[:2] for r in rows[:-1]], rows):
        speed = (d1 - d0) / (t1 - t0)
        if speed > MAX_SPEED:
            raise SprintDataError(
                path,
                ln,
                f"{d0:g}–{d1:g} m in {t1 - t0:.3g} s is {speed:.1f} m/s, "
                f"faster than any sprinter (> {MAX_SPEED:g} m/s)",
            )
        if speed < MIN_SPEED:
            raise SprintDataError(
                path,
                ln,
                f"{d0:g}–{d1:g} m in {t1 - t0:.3g} s is {speed:.2g} m/s, slower than a "
                f"sprint (< {MIN_SPEED:g} m/s): times in seconds from the gun?",
            )
    for note in notes:
        warnings.warn(SprintDataWarning(*note), stacklevel=2)
    arr = np.array(rows, dtype=float)
    return Race(
        name=name or Path(path).stem,
        distances=arr[:, 0],
        times=arr[:, 1],
        reaction_time=float(rt),
        wind=float(wind),
        header=header,
        path=path,
        lines=arr[:, 2].astype(int),
        wind_known=wind_known,
        reaction_time_known=rt_known,
    )


def _data_dir():
    return resources.files("jaxbio.sprint") / "data"


#: the embedded collections: ``default`` (``data/``, what ``jaxbio sprint`` fits and what the
#: ``--fit-until`` population is learned from: elite men's 100 m races) and ``more`` (``data/more/``:
#: further public races with their sources, women's races and 200 m races with the bend ignored,
#: kept apart so that they change no default number); ``all`` is both
COLLECTIONS = ("default", "more", "all")
_SUBDIRS = {"default": (), "more": ("more",)}


def _collection_dirs(collection: str):
    check_choice(collection, COLLECTIONS, "race collection")
    keys = ("default", "more") if collection == "all" else (collection,)
    return [(k, _data_dir().joinpath(*_SUBDIRS[k])) for k in keys]


def embedded_names(collection: str = "default") -> list[str]:
    """Names (file stems) of the races shipped with jaxbio in ``collection`` (``COLLECTIONS``),
    sorted within each collection (``all``: the default ones first)."""
    return [
        n
        for _, d in _collection_dirs(collection)
        for n in sorted(p.name[:-4] for p in d.iterdir() if p.name.endswith(".csv"))
    ]


def _find(name: str):
    """``(path in the repository, importlib.resources file)`` of the embedded race ``name``
    (exact name, any collection); ``ValueError`` for an unknown name."""
    for key, d in _collection_dirs("all"):
        if name in embedded_names(key):
            return "/".join(("jaxbio/sprint/data",) + _SUBDIRS[key] + (f"{name}.csv",)), d / f"{name}.csv"
    raise ValueError(f"unknown race {echo(name)}; embedded races: {', '.join(embedded_names('all'))}")


def embedded_file(name: str):
    """The file (an ``importlib.resources`` path) of the embedded race ``name`` (exact name, any
    collection); ``ValueError`` for an unknown name."""
    return _find(name)[1]


def load_race(name: str) -> Race:
    """An embedded race by name (``embedded_names("all")``), or by a prefix that names one race
    of the default collection, else one of all; ``ValueError`` for an unknown name."""
    names = embedded_names("all")
    if name not in names:
        matches = [n for n in embedded_names() if n.startswith(name)]
        if len(matches) != 1:
            matches = matches or [n for n in names if n.startswith(name)]
        if len(matches) != 1:
            raise ValueError(f"unknown race {echo(name)}; embedded races: {', '.join(names)}")
        name = matches[0]
    rel, f = _find(name)
    return read_csv(rel, name=name, text=f.read_bytes())


def embedded_races(collection: str = "default") -> list[Race]:
    """The embedded races of ``collection`` (``COLLECTIONS``; default: the five elite men's 100 m
    races of ``data/``), sorted by name within each collection."""
    return [load_race(n) for n in embedded_names(collection)]


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
    def from_arrays(distances, times, reaction_time, wind=None, weights=None, length: int | None = None) -> Splits:
        """From lists of per-race arrays (numpy); pads to ``length`` (default the longest race)."""
        n = [len(d) for d in distances]
        L = length or max(n)
        B = len(distances)
        D = np.zeros((B, L))
        T = np.zeros((B, L))
        W = np.zeros((B, L))
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

    def race(self, i: int) -> Splits:
        return jax.tree_util.tree_map(lambda a: a[i], self)
