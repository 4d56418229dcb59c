"""Speed traces (radar or laser: time and speed) as a second kind of sprint data: reading,
validation, and the fit of the sprinter and of the baselines to them.

Format (``data/README.md``), consistent with the split files: ``#`` header lines ``# key: value``
(athlete, race, date, wind, reaction_time_s, ``time_origin``, source, …), then the column line
``time_s,speed_m_s`` and one row per sample. ``time_origin`` is required and says where the
times start:

- ``gun``: times from the gun (as split times); ``reaction_time_s`` is then required and the
  model's motion starts at it (samples before it are fitted to speed 0);
- ``movement``: times from the athlete's first movement (radar traces started by the athlete, in
  training): ``reaction_time_s`` is optional and only shifts the reported times.

The header values, the separators (``,`` or ``;``/tab with decimal commas), the encodings and the
numbers are read exactly as in split files (`jaxbio.sprint.data`, same helpers and messages).
Samples: times ≥ 0 s, strictly increasing, at most ``MAX_TIME`` s; speeds in [0, ``MAX_SPEED``]
m/s (15 m/s: faster is no human, or km/h); at least ``MIN_SAMPLES`` samples, at most
``MAX_SAMPLES``; a trace whose fastest sample is below ``MIN_TOP_SPEED`` is refused (not a
sprint, or not m/s). Every problem raises ``SprintDataError`` ``FILE:LINE: problem``.

The fit (`fit_traces`) uses the split fit's machinery (`jaxbio.sprint.fitting.fit_splits`: the
same batched Levenberg–Marquardt, starts and Laplace covariance) on residuals on speed: the
model's speed at each sample time — the cubic Hermite interpolant of the simulated speed and its
acceleration from the vector field, ~2e-4 m/s from a 4,000-step solution at 80 steps — minus the
measured one, divided by ``SIGMA_SPEED``. Radar noise is neither known nor independent (a radar
reads ~0.1–0.3 m/s of noise, plus the within-step speed oscillation the model does not have,
correlated over ~0.1 s), so the Laplace covariance is rescaled after the fit by the residuals:
``σ̂² = Σe²/(n − k)`` in place of ``SIGMA_SPEED²`` and the AR(1) variance inflation
``(1 + ρ̂)/(1 − ρ̂)`` (≥ 1) for the lag-1 autocorrelation ``ρ̂`` of the residuals (the effective
number of independent samples is ``n (1 − ρ̂)/(1 + ρ̂)``).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxbio._files import InputFileError, read_bytes
from jaxbio._validate import echo
from jaxbio.sprint.data import (
    MAX_SPEED,
    SprintDataError,
    SprintDataWarning,
    _SEPARATORS,
    _cell,
    _decode,
    _reaction_time_and_wind,
    header_label,
)
from jaxbio.sprint._speed_trace import SIGMA_SPEED, SpeedTrace, model_speed, speed_residuals  # noqa: F401

COLUMNS = ("time_s", "speed_m_s")
#: the accepted ``time_origin`` values
TIME_ORIGINS = ("gun", "movement")
#: latest accepted sample time, s (a 200 m race lasts < 30 s; ms would read as thousands)
MAX_TIME = 40.0
#: fewest and most samples: the fit has 3 parameters; radar at 47 Hz or laser at 100 Hz over a
#: 200 m race gives ≤ ~3,000 samples (the fit's cost grows with the samples: decimate beyond)
MIN_SAMPLES = 10
MAX_SAMPLES = 5000
#: a sprint trace reaches at least this speed, m/s (below: not a sprint, or not m/s)
MIN_TOP_SPEED = 3.0


@dataclasses.dataclass(frozen=True)
class Trace:
    """One speed trace (numpy, outside jit).

    ``times`` ``(n,)`` s as in the file (from the gun or from movement onset, ``time_origin``);
    ``speeds`` ``(n,)`` m/s; ``reaction_time`` s (None when a ``movement`` trace gives none);
    ``wind`` m/s (0 when unknown, ``wind_known`` False); ``lines`` ``(n,)`` file line of each
    sample; ``header``, ``path``, ``name`` as for `jaxbio.sprint.data.Race`.
    """

    name: str
    times: np.ndarray
    speeds: np.ndarray
    time_origin: str
    reaction_time: float | None
    wind: float
    header: dict
    path: str
    lines: np.ndarray
    wind_known: bool = True

    @property
    def n(self) -> int:
        return int(self.times.shape[0])

    @property
    def label(self) -> str:
        """Short description from the header: athlete and year."""
        return header_label(self.header, self.name)

    @property
    def since_reaction(self) -> np.ndarray:
        """``(n,)`` s: sample times from the start of the model's motion (the reaction)."""
        return self.times - self.reaction_time if self.time_origin == "gun" else self.times.copy()

    @property
    def gun_offset(self) -> float:
        """Seconds added to a time since the reaction for reported times: the reaction time (times
        from the gun), or 0 for a movement-onset trace without one (times from movement onset)."""
        return float(self.reaction_time or 0.0)


def is_trace_text(text: str) -> bool:
    """True if the first line that is neither blank nor ``#`` is a trace's column line."""
    for raw in text.splitlines():
        line = raw.strip().lstrip("\ufeff")
        if line and not line.startswith("#"):
            return any(tuple(c.strip().lower() for c in line.split(sep)) == COLUMNS for sep in _SEPARATORS)
    return False


def is_trace_file(path) -> bool:
    """True if ``path`` is readable and its column line is ``time_s,speed_m_s`` (any problem
    reading it: False, and `jaxbio.sprint.data.read_csv` reports it)."""
    try:
        return is_trace_text(_decode(str(path), read_bytes(path, "trace file")))
    except (OSError, ValueError):
        return False


def read_trace(path, name: str | None = None, text: str | bytes | None = None) -> Trace:
    """Read and validate one speed-trace file (rules in the module docstring).

    ``text``: the contents (``str`` or ``bytes``) instead of reading ``path``. Returns a `Trace`;
    ``SprintDataError`` ``FILE:LINE: problem``; ``SprintDataWarning`` for an unknown wind or an
    implausible reaction time or wind (as split files).
    """
    path = str(path)
    if text is None:
        try:
            text = read_bytes(path, "trace file")
        except InputFileError as e:
            raise SprintDataError(path, 0, e.problem) from None
    if isinstance(text, (bytes, bytearray)):
        text = _decode(path, bytes(text))
    text = text.removeprefix("\ufeff")
    header: dict[str, str] = {}
    header_lines: dict[str, int] = {}
    columns_line, sep = None, ","
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
                header[key], header_lines[key] = value.strip(), lineno
            continue
        if columns_line is None:
            for sep in _SEPARATORS:
                if tuple(c.strip().lower() for c in line.split(sep)) == COLUMNS:
                    break
            else:
                raise SprintDataError(path, lineno, f"expected the column line 'time_s,speed_m_s', got {echo(line)}")
            columns_line = lineno
            continue
        cells = [c.strip() for c in line.split(sep)]
        if len(cells) != 2:
            hint = " (decimal commas? then separate the columns by ';')" if sep == "," and len(cells) in (3, 4) else ""
            raise SprintDataError(
                path, lineno, f"expected 2 values (time_s,speed_m_s), got {len(cells)}: {echo(line)}{hint}"
            )
        t, v = (_cell(path, lineno, c, sep != ",", line) for c in cells)
        if t < 0:
            raise SprintDataError(path, lineno, f"negative time: {echo(line)}")
        if t > MAX_TIME:
            raise SprintDataError(
                path,
                lineno,
                f"time {t:g} s is after {MAX_TIME:g} s, longer than a sprint "
                "(times in s? milliseconds must be converted)",
            )
        if v < 0:
            raise SprintDataError(path, lineno, f"negative speed {v:g} m/s: {echo(line)}")
        if v > MAX_SPEED:
            raise SprintDataError(
                path,
                lineno,
                f"speed {v:g} m/s is faster than any sprinter (> {MAX_SPEED:g} m/s; km/h or mph? convert to m/s)",
            )
        if rows and t <= rows[-1][0]:
            raise SprintDataError(
                path,
                lineno,
                f"times must increase: {t:g} s after {rows[-1][0]:g} s "
                f"(line {rows[-1][2]}); rows out of order are not sorted",
            )
        rows.append((t, v, lineno))
        if len(rows) > MAX_SAMPLES:
            raise SprintDataError(
                path,
                lineno,
                f"more than {MAX_SAMPLES} samples: decimate the trace "
                "(the fit's noise model allows for correlated samples)",
            )
    if columns_line is None:
        raise SprintDataError(path, 0, "missing the column line 'time_s,speed_m_s'")
    origin_line = header_lines.get("time_origin", 0)
    origin = header.get("time_origin", "").split("(")[0].strip().lower()
    if origin not in TIME_ORIGINS:
        got = f"got {echo(header['time_origin'])}" if "time_origin" in header else "missing"
        raise SprintDataError(
            path,
            origin_line,
            f"the header line '# time_origin: gun' or '# time_origin: movement' "
            f"(times from the gun or from movement onset) is {got}",
        )
    rt, wind, wind_known, notes = _reaction_time_and_wind(path, header, header_lines, required=origin == "gun")
    if len(rows) < MIN_SAMPLES:
        raise SprintDataError(
            path, rows[-1][2] if rows else columns_line, f"{len(rows)} sample(s); a trace needs at least {MIN_SAMPLES}"
        )
    top = max(r[1] for r in rows)
    if top < MIN_TOP_SPEED:
        raise SprintDataError(
            path,
            columns_line,
            f"the fastest sample is {top:g} m/s, below {MIN_TOP_SPEED:g} m/s: not a sprint, or speeds not in m/s",
        )
    if origin == "gun" and rows[-1][0] <= rt:
        raise SprintDataError(path, rows[-1][2], f"every sample is before the reaction time {rt:g} s")
    for note in notes:
        warnings.warn(SprintDataWarning(*note), stacklevel=2)
    arr = np.array(rows, dtype=float)
    return Trace(
        name=name or Path(path).stem,
        times=arr[:, 0],
        speeds=arr[:, 1],
        time_origin=origin,
        reaction_time=None if rt is None else float(rt),
        wind=float(wind),
        header=header,
        path=path,
        lines=arr[:, 2].astype(int),
        wind_known=wind_known,
    )


# ---- fits of traces (as padded arrays, `_speed_trace.SpeedTrace`) ---------------------------------


def check_traces(traces: list[Trace], n_params: int) -> None:
    """``SprintDataError`` if a trace has fewer samples after the reaction than ``n_params``."""
    for tr in traces:
        if int(np.sum(tr.since_reaction > 0)) < max(n_params, MIN_SAMPLES):
            raise SprintDataError(
                tr.path, int(tr.lines[-1]), f"fewer than {max(n_params, MIN_SAMPLES)} samples after the reaction"
            )


def noise_estimate(res, data: SpeedTrace, n_params: int):
    """``(sigma (B,) m/s, rho (B,), inflation (B,))`` from the fit's residuals: the residual
    standard deviation, the lag-1 autocorrelation of the residuals and the AR(1) variance
    inflation ``max(1, (1 + ρ)/(1 − ρ))`` (ρ capped at 0.99)."""
    e = np.asarray(res.predicted) - np.asarray(data.speeds)
    w = np.asarray(data.weights)
    sig, rho, infl = [], [], []
    for ei, wi in zip(e, w):
        r = ei[wi > 0]
        n = r.size
        s2 = float(np.sum(r * r) / max(n - n_params, 1))
        c = r - r.mean()
        den = float(np.sum(c * c))
        p = float(np.sum(c[1:] * c[:-1]) / den) if den > 0 and n > 2 else 0.0
        p = min(p, 0.99)
        sig.append(math.sqrt(s2))
        rho.append(p)
        infl.append(max(1.0, (1 + p) / (1 - p)))
    return np.array(sig), np.array(rho), np.array(infl)


def fit_traces(traces: list[Trace], **kw):
    """Fit the sprinter to speed traces (one vmapped call, `fitting.fit_splits` on `SpeedTrace`).

    Returns ``(FitResult, noise)``: the fit, ``predicted`` ``(B, L)`` model speeds [m/s] at the
    samples, ``rmse`` m/s, and ``cov_log``/``std`` rescaled by the noise estimated from the
    residuals (module docstring); ``noise`` a dict of ``(B,)`` arrays ``sigma`` (m/s), ``rho``
    (lag-1 autocorrelation) and ``inflation``. ``**kw``: `fit_splits`' options (``model``,
    ``names``, ``starts``, ``n_steps``, ``max_steps``, ``n_grid``, ``fitness``, ``devices``).
    """
    from jaxbio.sprint.fitting import FREE, N_STEPS, fit_splits, flat_parameters

    names = tuple(kw.pop("names", FREE))
    check_traces(traces, len(names))
    # as `fitting.steps_for`: N_STEPS per ~100 m (12 s) of running
    last = max(float(tr.since_reaction[-1]) for tr in traces)
    kw.setdefault("n_steps", N_STEPS * max(1, int(np.ceil(last / 12.0))))
    data = SpeedTrace.from_traces(traces)
    res = fit_splits(data, names=names, **kw)
    sigma, rho, infl = noise_estimate(res, data, len(names))
    n = np.asarray(data.weights).sum(1)
    chi2 = (sigma / SIGMA_SPEED) ** 2 * np.maximum(n - len(names), 1)
    s2_used = np.maximum(1.0, chi2 / np.maximum(n - len(names), 1))  # what `laplace` applied
    scale = (sigma / SIGMA_SPEED) ** 2 / s2_used * infl
    cov = res.cov_log * scale[:, None, None]
    std = np.exp(res.theta) * np.sqrt(np.maximum(np.diagonal(cov, axis1=1, axis2=2), 0.0))
    std = np.where(flat_parameters(cov), np.nan, std)
    res = eqx.tree_at(lambda r: (r.cov_log, r.std), res, (cov, std))
    return res, dict(sigma=sigma, rho=rho, inflation=infl)


# ---- baselines on a trace ------------------------------------------------------------------------


def fit_trace_baseline(kind: str, data: SpeedTrace, max_steps: int = 100):
    """Fit a classical model's speed ``v(s)`` (`baselines.MOTION`: Furusawa–Hill–Keller or
    Tibshirani) to each trace of ``data`` by `scipy.optimize.least_squares` (NumPy, same starts as
    on splits); a `baselines.BaselineResult` with ``predicted`` speeds [m/s] and ``rmse`` m/s."""
    from scipy.optimize import least_squares

    from jaxbio.sprint.baselines import MODELS, MOTION, BaselineResult, values

    spec = MODELS[kind]
    S, V, W = (np.asarray(a, dtype=float) for a in (data.times, data.speeds, data.weights))
    theta, pred, ok = [], [], []
    for s, v, w in zip(S, V, W):
        speed = lambda th: np.where(s > 0, MOTION[kind](th, s, np)[1], 0.0)  # noqa: E731
        fun = lambda th: w * (speed(th) - v) / SIGMA_SPEED  # noqa: E731
        best = min(
            (
                least_squares(
                    fun, np.array(x0, float), method="lm", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=50 * max_steps
                )
                for x0 in spec["starts"]
            ),
            key=lambda r: r.cost,
        )
        theta.append(best.x)
        pred.append(speed(best.x))
        ok.append(bool(best.success) and bool(np.all(np.isfinite(best.x))))
    theta, pred = np.array(theta), np.array(pred)
    rmse = np.sqrt(np.sum(W * (pred - V) ** 2, axis=1) / np.maximum(W.sum(1), 1))
    return BaselineResult(
        kind=kind,
        names=spec["names"],
        units=spec["units"],
        theta=theta,
        values=values(kind, theta),
        predicted=pred,
        rmse=rmse,
        converged=np.array(ok),
    )


def synthetic_trace(
    model,
    *,
    reaction_time: float = 0.15,
    wind: float = 0.0,
    rate: float = 20.0,
    distance: float = 100.0,
    noise: float = 0.0,
    rho: float = 0.0,
    seed: int = 0,
    n_steps: int = 400,
):
    """``(times from the gun (n,) s, speeds (n,) m/s)``: the speed of ``model`` sampled at ``rate``
    Hz from the gun until it reaches ``distance`` m, plus AR(1) Gaussian noise of standard
    deviation ``noise`` m/s and lag-1 correlation ``rho`` (``seed``). For tests and examples."""
    from jaxbio.sprint.model import simulate_race

    duration = 1.3 * distance / 8.0 + 1.0
    traj = simulate_race(model, duration, wind, n_steps=n_steps)
    q, ts = np.asarray(traj.q[:, 0]), np.asarray(traj.ts)
    t_end = float(np.interp(distance, q, ts))
    t = np.arange(1, int(math.floor((reaction_time + t_end) * rate)) + 1) / rate
    v = np.asarray(model_speed(model, traj, wind, jnp.asarray(t - reaction_time)))
    rng = np.random.default_rng(seed)
    z = rng.normal(size=t.size)
    e = np.empty_like(z)
    e[0] = z[0]
    for i in range(1, z.size):
        e[i] = rho * e[i - 1] + math.sqrt(1 - rho * rho) * z[i]
    return t, v + noise * e
