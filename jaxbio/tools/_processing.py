"""OpenSim's coordinate processing for inverse dynamics, reproduced step by step.

What ``InverseDynamicsTool::run`` (``OpenSim/Tools/InverseDynamicsTool.cpp``) does to a
coordinates file before solving, and what `process_coordinates` does in the same order:

1. **Pad** (only when filtering): ``Storage::pad(n / 2)`` (integer division) prepends and appends
   ``n/2`` samples to every column *and to time* by point reflection about the end samples
   (``Signal::Pad``: ``2·x[0] - x[j]`` before, ``2·x[n-1] - x[n-1-j]`` after), which keeps
   value and slope continuous at the ends.
2. **Resample** (only when filtering, and only if the padded sampling is not uniform:
   ``avg Δt - min Δt > machine ε``, which is the case for most files whose times are printed
   with a few decimals, e.g. 0.00833333): ``Storage::resample(min Δt, 5)`` fits a GCV quintic
   spline per column (`GCVSpline`) and samples it from the first time, stepping by accumulating
   ``t += Δt`` while ``t <= last time`` (``GCVSplineSet::constructStorage``); the accumulated
   rounding is why OpenSim's arm26 results sit at t = -2e-7, 0.00833313, …
3. **Low-pass** ``Storage::lowpassIIR(fc)``: `lowpass_iir` on every column with ``T = min Δt``.
4. **Degrees → radians** (``SimbodyEngine::convertDegreesToRadians``) for the columns of
   rotational coordinates only, when the file is in degrees.
5. **Splines**: ``GCVSplineSet(5, storage)``, a quintic GCV spline per column with error
   variance 0 (`GCVSpline`); q, q̇, q̈ are its value and first two derivatives.
6. **Frames**: the (padded, resampled) samples from ``findIndex(start)`` to ``findIndex(end)``,
   where ``findIndex(t)`` is the last sample at or before ``t`` (so the first frame may lie just
   before ``start``), ``start = max(first time, time_range[0])`` and ``end = min(last time,
   time_range[1])``.

Everything is numpy outside jit (file processing); the results feed `jaxbio.inverse_dynamics`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import numpy as np

from jaxbio._validate import static_number
from jaxbio.tools._gcvspl import GCVSpline
from jaxbio.io import Table
from jaxbio._text import known_names

#: SimTK_DEGREE_TO_RADIAN (a long double literal in Simbody, passed to OpenSim as a double)
_DEGREE = 1.745329251994329576923690768488612713442871888541725456097191440e-2
_MACHINE_EPS = 2.220446049250313e-16  # SimTK::Eps
_MAX_RESAMPLE_SIZE = 100000  # Storage::MAX_RESAMPLE_SIZE

#: the highest cutoff accepted, as a fraction of the Nyquist frequency ``1/(2 Δt)``. Closer to
#: Nyquist the 3rd-order Butterworth's poles approach z = -1 (radius 0.85 here, 0.95 at 0.967,
#: 0.99 at 0.995): OpenSim's start-up rule makes them ring at Nyquist, the "filtered" signal
#: moves away from the raw one (arm26: 0.25° at 0.9, 2° at 0.999) and the splines' accelerations
#: grow 10-1000 times (thousands of N·m). OpenSim silently lowers a cutoff at or above Nyquist to
#: 0.98 × Nyquist; jaxbio refuses every cutoff above this fraction.
MAX_CUTOFF_FRACTION = 0.9


def check_cutoff(cutoff_hz, dt: float, name: str = "cutoff_hz") -> float:
    """``cutoff_hz`` as a float when ``0 < cutoff_hz ≤ MAX_CUTOFF_FRACTION / (2 dt)``; else
    ``ValueError`` naming ``name``, the Nyquist frequency and the largest cutoff accepted (a cutoff
    at or just below Nyquist makes the filter ring, see `MAX_CUTOFF_FRACTION`)."""
    fc = static_number(cutoff_hz, name, positive=True)
    nyquist = 0.5 / dt
    if not fc <= MAX_CUTOFF_FRACTION * nyquist:
        where = "at or above" if fc >= nyquist else "too close to"
        raise ValueError(
            f"{name} = {fc:g} Hz is {where} the Nyquist frequency of the samples, {nyquist:g} Hz "
            f"(Δt = {dt:g} s): it must be at most {MAX_CUTOFF_FRACTION:g} × Nyquist = "
            f"{MAX_CUTOFF_FRACTION * nyquist:g} Hz (nearer, the Butterworth filter rings and the "
            "accelerations are meaningless)"
        )
    return fc


def _reflect(values: np.ndarray, pad: int) -> np.ndarray:
    """``Signal::Pad(pad, x)`` along axis 0 (rows), for ``0 < pad < len(x)``: ``2·x[0] - x[pad…1]``
    before, ``2·x[n-1] - x[n-2…n-1-pad]`` after."""
    n = values.shape[0]
    j = np.arange(pad)
    before = 2.0 * values[0] - values[pad - j]
    after = 2.0 * values[n - 1] - values[n - 2 - j]
    return np.concatenate([before, values, after])


def _pad(time: np.ndarray, data: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """``Storage::pad(pad)``: time and every column reflected by `_reflect`; a pad as long as
    the signal or longer is applied in steps, as ``Signal::Pad(int, Array&)`` does."""
    if pad <= 0:
        return time, data
    target = time.shape[0] + 2 * pad
    step = pad
    while time.shape[0] < target:
        size = time.shape[0]
        if step >= size:
            step = size - 1
        time, data = _reflect(time, step), _reflect(data, step)
        step = (target - time.shape[0]) // 2
    return time, data


def _resample(time: np.ndarray, data: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray, float]:
    """``Storage::resample(dt, 5)``: quintic GCV splines through each column, sampled at
    ``t0, t0 + dt, …`` (accumulated) up to the last time; returns the new time, data and ``dt``."""
    if (time[-1] - time[0]) / dt > _MAX_RESAMPLE_SIZE:
        dt = (time[-1] - time[0]) / _MAX_RESAMPLE_SIZE
    spline = GCVSpline(time, data, degree=5)
    times = []
    t = float(time[0])
    last = float(time[-1])
    while t <= last:
        times.append(t)
        t += dt
    new_time = np.asarray(times)
    return new_time, spline(new_time), dt


def butterworth_coefficients(dt: float, cutoff_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """The 3rd-order Butterworth low-pass of ``Signal::LowpassIIR`` (bilinear transform with
    the cutoff pre-warped, ``wa = tan(π fc T)``): numerator ``a (4,)`` and denominator
    ``b (4,)``, ``b[0] = 1``, for ``y[i] = Σ a[j] x[i-j] - Σ_{j≥1} b[j] y[i-j]``."""
    wc = 2 * math.pi * cutoff_hz
    wa = math.tan(wc * dt / 2.0)
    wa2 = wa * wa
    wa3 = wa * wa * wa
    denom = (wa + 1) * (wa * wa + wa + 1.0)
    a = np.array([wa3 / denom, 3 * wa3 / denom, 3 * wa3 / denom, wa3 / denom])
    b = np.array(
        [
            1.0,
            (3 * wa3 + 2 * wa2 - 2 * wa - 3) / denom,
            (3 * wa3 - 2 * wa2 - 2 * wa + 3) / denom,
            (wa - 1) * (wa2 - wa + 1) / denom,
        ]
    )
    return a, b


def lowpass_iir(signal, dt: float, cutoff_hz: float) -> np.ndarray:
    """OpenSim's zero-phase low-pass filter, ``Signal::LowpassIIR`` (``OpenSim/Common/Signal.cpp``).

    A 3rd-order Butterworth (`butterworth_coefficients`) run forward, then backward over the
    reversed result. Its start-up rule is OpenSim's own: in each pass the first three outputs are
    the first three inputs unchanged, and the recursion starts at sample 3 with those as the
    past outputs. ``scipy.signal.filtfilt`` starts differently (odd extension and steady-state
    initial conditions), and ``lfilter`` with ``lfiltic`` gives the same numbers only up to
    rounding (another order of operations); so the recursion is written out here, vectorised over
    columns, with OpenSim's operations in OpenSim's order.

    - ``signal``: ``(n,)`` or ``(n, k)`` samples (columns filtered independently), ``n >= 4``.
    - ``dt``: sample interval in s (> 0). ``cutoff_hz``: cutoff in Hz, ``0 < cutoff_hz ≤ 0.9/(2 dt)``
      (`MAX_CUTOFF_FRACTION` of the Nyquist frequency: nearer, the filter rings; OpenSim silently
      lowers a cutoff at or above Nyquist to 0.49/dt; here any cutoff above the bound is an error).
      A cutoff below about ``2 / (n dt)`` is legal but mostly returns the start-up: the output
      then extrapolates the first three samples (arm26, 1 s: 0.1 Hz leaves 2.4 rad of a 1.6 rad
      swing), so pick it well above the signal's duration's inverse.

    Returns the filtered samples, same shape, float64.
    """
    x = np.asarray(signal, dtype=np.float64)
    dt = static_number(dt, "dt", positive=True)
    fc = check_cutoff(cutoff_hz, dt)
    if x.ndim not in (1, 2) or x.shape[0] < 4:
        raise ValueError(f"signal must be (n,) or (n, k) with n >= 4 samples, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("signal contains NaN or inf")
    a, b = (c.tolist() for c in butterworth_coefficients(dt, fc))

    def one_pass(s: np.ndarray) -> np.ndarray:
        f = s.copy()  # f[0..2] = s[0..2]; the loop overwrites from 3 on
        for i in range(3, s.shape[0]):
            f[i] = (
                a[0] * s[i]
                + a[1] * s[i - 1]
                + a[2] * s[i - 2]
                + a[3] * s[i - 3]
                - b[1] * f[i - 1]
                - b[2] * f[i - 2]
                - b[3] * f[i - 3]
            )
        return f

    return one_pass(one_pass(x)[::-1])[::-1].copy()


@dataclasses.dataclass(frozen=True, eq=False)
class ProcessedCoordinates:
    """Coordinates processed as OpenSim's inverse dynamics does (`process_coordinates`).

    - ``time``: ``(n,)`` s, the frames OpenSim solves at.
    - ``labels``: the ``k`` coordinate names (the table's columns, in order).
    - ``q``, ``qd``, ``qdd``: ``(n, k)`` values, first and second time derivatives of the
      splines at ``time``: rad, rad/s, rad/s² for rotational columns; for the others the
      file's unit (m, m/s, m/s² for translational coordinates).
    - ``spline``: the `GCVSpline` through all columns (in those units), for other times:
      ``spline(t, 1)`` is ``q̇(t)``, ``(len(t), k)``.
    - ``filtered``: the `Table` the splines were fitted to (padded, resampled and low-passed
      when filtering; rotational columns in radians, so ``in_degrees`` is False).
    """

    time: np.ndarray
    labels: tuple[str, ...]
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    spline: GCVSpline
    filtered: Table


def _rotational_mask(table: Table, rotational) -> np.ndarray:
    k = len(table.labels)
    if rotational is None:
        if table.in_degrees:
            raise ValueError(
                f"table {table.name!r} is in degrees, and which columns are angles depends on the model: "
                f"pass rotational=True (every column is a rotational coordinate), rotational=False, or the "
                f"names of the rotational columns"
            )
        return np.zeros(k, bool)
    if rotational is True or rotational is False:
        return np.full(k, rotational)
    names = known_names(rotational, table.labels, f"rotational: table {table.name!r}")
    return np.array([label in names for label in table.labels])


def _time_bound(value, name: str, default: float) -> float:
    if value is None:
        return default
    try:
        bound = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a time in s (a number, or ±inf), got {value!r}") from None
    if math.isnan(bound):
        raise ValueError(f"{name} must be a time in s, got NaN")
    return bound


def process_coordinates(
    table: Table,
    *,
    lowpass_hz: float | None = None,
    start: float | None = None,
    end: float | None = None,
    rotational: bool | Iterable[str] | None = None,
) -> ProcessedCoordinates:
    """Filter, convert and differentiate coordinates exactly as OpenSim's ``InverseDynamicsTool``
    (the steps are in this module's docstring).

    - ``table``: the coordinates, one column each (e.g. ``read_storage(path).select(names)``);
      at least 6 samples.
    - ``lowpass_hz``: ``lowpass_cutoff_frequency_for_coordinates`` in Hz, or None for no
      filtering (then no padding and no resampling either, as in OpenSim).
    - ``start``, ``end``: OpenSim's ``time_range`` in s; None: the table's first / last time
      (OpenSim's default range is unbounded, which includes the padded samples: pass
      ``-inf``/``inf`` for that).
    - ``rotational``: which columns are rotational coordinates, converted from degrees to
      radians when ``table.in_degrees``: True (all), False (none), or a collection of names.
      Required for a table in degrees (the file cannot say which columns are angles).

    Returns `ProcessedCoordinates` (``time``, ``labels``, ``q``, ``qd``, ``qdd``, ``spline``,
    ``filtered``). ``ValueError`` for a bad cutoff (≤ 0, or above 0.9 × the Nyquist frequency of
    the padded, resampled samples: `check_cutoff`), a time range
    that misses the samples (OpenSim would solve at one end sample), too few samples, a table
    in degrees without ``rotational``, or unknown rotational names.
    """
    if not isinstance(table, Table):
        raise ValueError(f"table must be a jaxbio.io.Table, got {type(table).__name__}")
    rot = _rotational_mask(table, rotational)
    time = table.time.copy()
    data = table.data.copy()
    t0 = _time_bound(start, "start", float(time[0]))
    t1 = _time_bound(end, "end", float(time[-1]))
    if not t0 <= t1:
        raise ValueError(f"start = {t0!r} s is after end = {t1!r} s")
    if time.shape[0] < 6:
        raise ValueError(f"table {table.name!r} has {time.shape[0]} samples; the quintic splines need at least 6")
    if lowpass_hz is not None:
        fc = static_number(lowpass_hz, "lowpass_hz", positive=True)
        time, data = _pad(time, data, time.shape[0] // 2)
        steps = np.diff(time)
        dt = float(np.min(steps))
        average = (time[-1] - time[0]) / (time.shape[0] - 1)
        if average - dt > _MACHINE_EPS:
            time, data, dt = _resample(time, data, dt)
        fc = check_cutoff(fc, dt, "lowpass_hz")
        data = lowpass_iir(data, dt, fc)
    if table.in_degrees:
        data[:, rot] = data[:, rot] * _DEGREE  # Storage::multiplyColumn: x *= factor
    filtered = dataclasses.replace(table, time=time, data=data, in_degrees=False)
    spline = GCVSpline(time, data, degree=5)
    if t0 > time[-1] or t1 < time[0]:  # OpenSim would solve at one end sample
        raise ValueError(
            f"the time range [{t0!r}, {t1!r}] s does not overlap the samples "
            f"({float(time[0])!r} to {float(time[-1])!r} s)"
        )
    lo = max(float(time[0]), t0)  # InverseDynamicsTool: start_time, final_time
    hi = min(float(time[-1]), t1)
    i0 = max(int(np.searchsorted(time, lo, side="right")) - 1, 0)  # Storage::findIndex
    i1 = max(int(np.searchsorted(time, hi, side="right")) - 1, 0)
    frames = time[i0 : i1 + 1]
    q, qd, qdd = (spline(frames, d) for d in range(3))
    return ProcessedCoordinates(time=frames, labels=table.labels, q=q, qd=qd, qdd=qdd, spline=spline, filtered=filtered)
