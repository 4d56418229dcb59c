"""The horizontal force–velocity profile of sprint science (Samozino et al. 2016), from split times
and from the fitted sprinter, defined the same way for both.

The method (Samozino, Rabita, Dorel, Slawinski, Peyrot, Saez de Villarreal & Morin 2016, "A simple
method for measuring power, force, velocity properties, and mechanical effectiveness in sprint
running", Scand J Med Sci Sports 26:648–658, doi:10.1111/sms.12490), as implemented by Morin and
Samozino's split-time spreadsheet and by the R package ``shorts`` (Jovanović & Vescovi;
``make_FV_profile`` and ``get_air_resistance``, read on GitHub, mladenjovanovic/shorts):

1. the speed ``v(s)`` and acceleration ``a(s)`` of the centre of mass, ``s`` the time since
   movement onset (here: since the reaction), sampled at ``RATE`` = 100 Hz over the acceleration
   phase ``0 < s ≤ WINDOW`` = 6 s (``shorts``' default; Samozino et al. analysed 30–40 m sprints);
   from split times it is the mono-exponential ``v = v_max (1 − e^{−s/τ})``,
   ``a = (v_max/τ) e^{−s/τ}`` — the Furusawa–Hill–Keller fit of `jaxbio.sprint.baselines`;
2. the net horizontal ground force ``F_H = m a + F_aero`` with the air friction
   ``F_aero = k (v − w)|v − w|`` (``w`` the wind, tail wind positive) and
   ``k = ½ ρ A_f C_d``: frontal area ``A_f = 0.266 · 0.2025 h^0.725 m^0.425`` m² (body surface of
   Du Bois times 0.266), ``C_d = 0.9``, air density ``ρ = 1.293 (p / 101325 Pa)(273.15 K / T)``
   kg/m³ (Arsac & Locatelli 2002, as cited by Samozino et al.);
3. ``F0`` and the slope ``S_FV`` from the least-squares line ``F_H = F0 + S_FV v``;
   ``V0 = −F0/S_FV``; ``Pmax = F0 V0 / 4`` (the top of the parabola ``P = F_H v``);
4. the ratio of forces ``RF = F_H / sqrt(F_H² + (m g)²)`` (vertical force = body weight on
   average over a step); ``RF_max`` = the largest ``RF`` at ``s > 0.3 s`` and ``D_RF`` the slope
   of the least-squares line ``RF = RF0 + D_RF v`` over ``s > 0.3 s`` (``RF_CUTOFF``).

Everything is reported per kg of body mass, as sprint science does: ``F0`` N/kg, ``Pmax`` W/kg.
Only the air friction depends on ``m`` and ``h``; split files give neither, so the defaults are
``DEFAULT_MASS`` = 80 kg (the sprinter model's) and ``DEFAULT_HEIGHT`` = 1.80 m, with sea-level
pressure 101325 Pa and 20 °C (``DEFAULT_PRESSURE``, ``DEFAULT_TEMPERATURE``).

The fitted sprinter's profile (`model_profile`, `fit_profile`) applies steps 2–4 to the model's own
simulated ``v(s)`` and ``a(s)`` on the same samples, cut at its top speed when that comes before
6 s (past it ``F_H(v)`` turns back). The model's force rises from 0 within its impulse time
constant (5 ms) and its Hill force falls faster than linearly with speed, so its linear profile
differs from its Hill parameters ``f0``/``vmax``: that difference is what the two columns show.

All functions are NumPy (no compilation), except `model_profile`, which simulates the sprinter.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: standard gravity, m/s²
G = 9.81
#: acceleration phase analysed, s after movement onset (``shorts::make_FV_profile``'s 6 s)
WINDOW = 6.0
#: samples per second of the analysed phase (the spreadsheet's and ``shorts``' 100 Hz)
RATE = 100.0
#: RF_max and D_RF use only the samples after this time, s (Samozino et al. 2016)
RF_CUTOFF = 0.3
#: body mass [kg] and stature [m] used when the race file gives none (air friction only)
DEFAULT_MASS = 80.0
DEFAULT_HEIGHT = 1.80
#: air pressure [Pa] and temperature [K] of the air-density formula
DEFAULT_PRESSURE = 101325.0
DEFAULT_TEMPERATURE = 293.15
#: drag coefficient and frontal-area factor of Samozino et al. (2016)
DRAG_COEFFICIENT = 0.9
FRONTAL_FACTOR = 0.266

#: units of the ``ForceVelocityProfile`` fields, for tables and JSON
FV_UNITS = {
    "f0": "N/kg",
    "v0": "m/s",
    "pmax": "W/kg",
    "slope": "N·s/(m·kg)",
    "rf_max": "-",
    "d_rf": "s/m",
    "window": "s",
}


class ForceVelocityProfile(NamedTuple):
    """A horizontal force–velocity profile, per kg of body mass (floats).

    ``f0`` N/kg: theoretical maximal horizontal force at zero speed; ``v0`` m/s: theoretical speed
    at zero force; ``pmax`` W/kg: ``f0 · v0 / 4``; ``slope`` N·s/(m·kg): ``−f0/v0``; ``rf_max``:
    the largest ratio of forces after 0.3 s (fraction, not %); ``d_rf`` s/m: the slope of RF
    against speed (fraction per m/s, negative); ``window`` s: the phase analysed (from movement onset).
    """

    f0: float
    v0: float
    pmax: float
    slope: float
    rf_max: float
    d_rf: float
    window: float

    def as_dict(self) -> dict:
        """``{name: {"value": float or None, "unit": str}}`` (None where not finite), for JSON."""
        return {
            k: {"value": float(v) if np.isfinite(v) else None, "unit": FV_UNITS[k]} for k, v in self._asdict().items()
        }


def _positive(name: str, x) -> float:
    x = float(x)
    if not (np.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return x


def air_friction(
    mass=DEFAULT_MASS, height=DEFAULT_HEIGHT, pressure=DEFAULT_PRESSURE, temperature=DEFAULT_TEMPERATURE
) -> float:
    """``k = ½ ρ A_f C_d`` [kg/m] of Samozino et al. (2016) (module docstring, step 2), so that the
    air friction is ``k (v − w)|v − w|`` N. ``mass`` kg, ``height`` (stature) m, ``pressure`` Pa (0: no air),
    ``temperature`` K. ``ValueError`` for a non-finite argument or a non-positive mass, height or
    temperature, or a negative pressure."""
    m, h = _positive("mass", mass), _positive("height", height)
    p, T = float(pressure), _positive("temperature", temperature)
    if not (np.isfinite(p) and p >= 0):
        raise ValueError(f"pressure must be a finite number ≥ 0 Pa, got {p!r}")
    rho = 1.293 * (p / 101325.0) * (273.15 / T)
    area = FRONTAL_FACTOR * 0.2025 * h**0.725 * m**0.425
    return 0.5 * rho * area * DRAG_COEFFICIENT


def _line(x, y):
    """Least-squares intercept and slope of ``y = c0 + c1 x``."""
    A = np.stack([np.ones_like(x), x], axis=1)
    (c0, c1), *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(c0), float(c1)


def horizontal_force(
    v,
    a,
    *,
    mass=DEFAULT_MASS,
    height=DEFAULT_HEIGHT,
    wind=0.0,
    pressure=DEFAULT_PRESSURE,
    temperature=DEFAULT_TEMPERATURE,
) -> np.ndarray:
    """Net horizontal ground force per kg, ``F_H/m = a + k (v − w)|v − w| / m`` [N/kg], at speeds
    ``v`` m/s and accelerations ``a`` m/s² (same shape); the other arguments as in
    `profile_from_motion`."""
    k = air_friction(mass, height, pressure, temperature)
    rel = np.asarray(v, dtype=float) - float(wind)
    return np.asarray(a, dtype=float) + k * rel * np.abs(rel) / float(mass)


def profile_from_motion(
    s,
    v,
    a,
    *,
    mass=DEFAULT_MASS,
    height=DEFAULT_HEIGHT,
    wind=0.0,
    pressure=DEFAULT_PRESSURE,
    temperature=DEFAULT_TEMPERATURE,
) -> ForceVelocityProfile:
    """Steps 2–4 of the module docstring on sampled motion.

    ``s`` ``(n,)`` s since movement onset (increasing; the samples of the regressions, equally
    spaced in the standard method), ``v`` ``(n,)`` m/s and ``a`` ``(n,)`` m/s² the centre of
    mass's speed and acceleration there; ``mass`` kg and ``height`` m of the runner (air friction
    only), ``wind`` m/s (tail wind positive), ``pressure`` Pa (0: no air friction), ``temperature`` K.
    Returns a `ForceVelocityProfile` per kg (``window`` = the last ``s``). ``ValueError`` for bad
    shapes, fewer than 3 samples after ``RF_CUTOFF``, non-finite values, or a non-positive
    mass, height or temperature (`air_friction`).
    """
    s, v, a = (np.asarray(x, dtype=float) for x in (s, v, a))
    if not (s.ndim == 1 and s.shape == v.shape == a.shape):
        raise ValueError(f"s, v and a must be 1-D arrays of one length, got shapes {s.shape}, {v.shape}, {a.shape}")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(v)) and np.all(np.isfinite(a)) and np.isfinite(wind)):
        raise ValueError("s, v, a and wind must be finite")
    late = s > RF_CUTOFF
    if np.count_nonzero(late) < 3:
        raise ValueError(f"need at least 3 samples after {RF_CUTOFF} s, got {np.count_nonzero(late)}")
    fh = horizontal_force(v, a, mass=mass, height=height, wind=wind, pressure=pressure, temperature=temperature)
    f0, slope = _line(v, fh)
    v0 = -f0 / slope if slope < 0 else np.inf
    rf = fh / np.hypot(fh, G)  # per kg: F_H / sqrt(F_H² + (m g)²)
    _, d_rf = _line(v[late], rf[late])
    return ForceVelocityProfile(
        f0=f0,
        v0=float(v0),
        pmax=f0 * float(v0) / 4.0,
        slope=slope,
        rf_max=float(np.max(rf[late])),
        d_rf=d_rf,
        window=float(s[-1]),
    )


def samples(window=WINDOW, rate=RATE) -> np.ndarray:
    """``(n,)`` the sample times [s] of the method: ``1/rate, 2/rate, …, window``. Not the onset
    ``s = 0`` itself: there a drive that rises from zero (the sprinter's impulse) has no force yet,
    and that one point, at the far end of the speed axis, would tilt the line (by 2 % of ``F0``
    for a step impulse); the mono-exponential's profile is a line either way."""
    window, rate = _positive("window", window), _positive("rate", rate)
    return np.arange(1, int(np.floor(window * rate + 1e-9)) + 1) / rate


def split_time_profile(vmax, tau, *, window=WINDOW, rate=RATE, **air) -> ForceVelocityProfile:
    """The standard method from split times: the profile of the mono-exponential
    ``v = vmax (1 − e^{−s/τ})`` (``vmax`` m/s, ``tau`` s, e.g. a Furusawa–Hill–Keller fit
    `jaxbio.sprint.fit_baseline("fhk", …)`, whose ``values`` are ``(vmax, tau)``), sampled at
    `samples`. ``air``: ``mass``, ``height``, ``wind``, ``pressure``, ``temperature`` of
    `profile_from_motion`. Without air friction ``F0 = vmax/τ`` and ``V0 = vmax`` exactly."""
    return profile_from_motion(*split_time_motion(vmax, tau, window=window, rate=rate), **air)


def split_time_motion(vmax, tau, *, window=WINDOW, rate=RATE):
    """``(s, v, a)`` ``(n,)`` each: the mono-exponential's speed [m/s] and acceleration [m/s²] at
    `samples` [s] (the regressions' data of `split_time_profile`)."""
    vmax, tau = _positive("vmax", vmax), _positive("tau", tau)
    s = samples(window, rate)
    decay = np.exp(-s / tau)
    return s, vmax * (1.0 - decay), vmax / tau * decay


def _hermite_with_slope(ts, y, dy, t):
    """Cubic Hermite interpolant of ``y(t)`` (values ``y`` and slopes ``dy`` at the increasing
    ``ts``) and its derivative, at ``t`` (numpy; the same cubic as `jaxbio.simulation.hermite`)."""
    idx = np.clip(np.searchsorted(ts, t, side="right") - 1, 0, len(ts) - 2)
    h = ts[idx + 1] - ts[idx]
    u = np.clip((t - ts[idx]) / h, 0.0, 1.0)
    y0, y1, d0, d1 = y[idx], y[idx + 1], dy[idx], dy[idx + 1]
    val = (
        (2 * u**3 - 3 * u**2 + 1) * y0
        + (u**3 - 2 * u**2 + u) * h * d0
        + (-2 * u**3 + 3 * u**2) * y1
        + (u**3 - u**2) * h * d1
    )
    der = (6 * u**2 - 6 * u) * (y0 - y1) / h + (3 * u**2 - 4 * u + 1) * d0 + (3 * u**2 - 2 * u) * d1
    return val, der


def profile_from_run(ts, v, a, *, window=WINDOW, rate=RATE, **air) -> ForceVelocityProfile:
    """The profile of a simulated run: ``ts`` ``(T,)`` s since the reaction (increasing, from 0),
    ``v`` ``(T,)`` m/s and ``a`` ``(T,)`` m/s² at those times (the solver's steps). The run is
    resampled at `samples` up to ``window`` or its top speed, whichever comes first, by the cubic
    Hermite interpolant of ``v`` (from ``v`` and ``a``) and its derivative, then
    `profile_from_motion` (``air``: its keyword arguments)."""
    return profile_from_motion(*run_motion(ts, v, a, window=window, rate=rate), **air)


def run_motion(ts, v, a, *, window=WINDOW, rate=RATE):
    """``(s, v, a)`` ``(n,)`` each: a simulated run (see `profile_from_run`) resampled at
    `samples` [s] up to ``window`` or its top speed (the regressions' data of `profile_from_run`)."""
    ts, v, a = (np.asarray(x, dtype=float) for x in (ts, v, a))
    if not (ts.ndim == 1 and ts.shape == v.shape == a.shape and ts.size >= 2):
        raise ValueError(
            f"ts, v and a must be 1-D arrays of one length ≥ 2, got shapes {ts.shape}, {v.shape}, {a.shape}"
        )
    s = samples(window, rate)
    s = s[s <= ts[-1] + 1e-12]
    vs, as_ = _hermite_with_slope(ts, v, a, s)
    top = int(np.argmax(vs))
    keep = slice(0, top + 1) if top < len(s) - 1 else slice(None)
    return s[keep], vs[keep], as_[keep]


def model_profile(
    model, wind=0.0, *, window=WINDOW, rate=RATE, n_steps: int = 640, fitness=None, **air
) -> ForceVelocityProfile:
    """The profile of the sprinter ``model`` (`jaxbio.sprint.Sprinter`) in a race with ``wind``
    m/s: `jaxbio.sprint.simulate_race` for ``window`` s with ``n_steps`` steps, the acceleration
    from its vector field, then `profile_from_run`. ``fitness``: `sprinter_system`'s hook.
    ``air``: ``mass``, ``height``, ``pressure``, ``temperature`` (the air friction of the standard
    method; the model's own drag acts in the simulation). Compiles the simulation (JAX)."""
    import jax

    from jaxbio.sprint.model import simulate_race, sprinter_system

    traj = simulate_race(model, window, wind, n_steps=n_steps, fitness=fitness)
    system = sprinter_system(model, wind, fitness)
    y = {"q": traj.q, "p": traj.p, "f": traj.f}
    dp = jax.vmap(lambda t, yy: system.vector_field(t, yy)["p"][0])(traj.ts, y)
    acc = np.asarray(dp / model.mass)
    return profile_from_run(
        np.asarray(traj.ts), np.asarray(traj.qd[:, 0]), acc, window=window, rate=rate, wind=wind, **air
    )


def fit_profile(res, i: int, wind=None, **kw) -> ForceVelocityProfile:
    """The profile of race ``i`` of a `jaxbio.sprint.FitResult`, from the simulated run the fit
    kept at its optimum (``res.profile``'s ``run_s``, ``run_v``, ``run_a``: no new simulation);
    ``wind`` m/s: the race's (default ``res.splits.wind[i]``). ``kw``: `profile_from_run`'s."""
    p = res.profile
    if "run_s" not in p:
        raise ValueError("this FitResult has no simulated run (fitted with n_grid=0?)")
    if wind is None:
        wind = float(np.broadcast_to(np.asarray(res.splits.wind, dtype=float), (len(res.theta),))[i])
    return profile_from_run(p["run_s"][i], p["run_v"][i], p["run_a"][i], wind=wind, **kw)


def mean_split_speeds(distances, times, reaction_time):
    """Mean speed over each split: ``(mid [m], speed [m/s])``, both ``(n,)``, for splits at
    ``distances`` ``(n,)`` m reached at ``times`` ``(n,)`` s from the gun, the first split
    counted from the reaction (``reaction_time`` s, when the runner leaves 0 m). Use it for
    measured and predicted split times alike: a model's mean speed over a split is what its
    predicted split times give, not its speed at the split's middle."""
    d = np.concatenate([[0.0], np.asarray(distances, dtype=float)])
    t = np.concatenate([[float(reaction_time)], np.asarray(times, dtype=float)])
    if d.shape != t.shape:
        raise ValueError(f"distances and times must have one length, got {d.size - 1} and {t.size - 1}")
    return 0.5 * (d[1:] + d[:-1]), np.diff(d) / np.diff(t)


__all__ = [
    "DEFAULT_HEIGHT",
    "DEFAULT_MASS",
    "DEFAULT_PRESSURE",
    "DEFAULT_TEMPERATURE",
    "FV_UNITS",
    "ForceVelocityProfile",
    "RATE",
    "RF_CUTOFF",
    "WINDOW",
    "air_friction",
    "fit_profile",
    "horizontal_force",
    "mean_split_speeds",
    "model_profile",
    "profile_from_motion",
    "profile_from_run",
    "run_motion",
    "samples",
    "split_time_motion",
    "split_time_profile",
]
