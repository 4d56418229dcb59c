"""``jaxbio sprint``'s force–velocity block: the table below the fit table and the JSON entries
(NumPy only: the CLI's cold start does not grow)."""

from __future__ import annotations

import numpy as np

from jaxbio.sprint import fv_profile as fv

#: distances [m] at which the table shows the model's fitness (the last column: the finish)
FITNESS_AT = (60.0, 80.0)


def profiles(races, res, fhk) -> list[tuple]:
    """``[(model, splits)]`` per race: `fv_profile.fit_profile` of the fitted sprinter and
    `fv_profile.split_time_profile` of the Furusawa–Hill–Keller fit (None where it cannot be
    computed, e.g. a fit that ran off)."""
    out = []
    for i, r in enumerate(races):
        pair = []
        for make in (
            lambda: fv.fit_profile(res, i, wind=r.wind),
            lambda: fv.split_time_profile(*fhk.values[i], wind=r.wind),
        ):
            try:
                p = make()
                pair.append(p if np.all(np.isfinite(p)) else None)
            except ValueError:
                pair.append(None)
        out.append(tuple(pair))
    return out


def fitness_at(profile, distances) -> np.ndarray:
    """The model's fitness at ``distances`` [m] (`fitting.Profile`; clamped to its range)."""
    return np.interp(np.asarray(distances, dtype=float), profile.x, profile.fitness)


def _cell(p, name, scale, digits):
    return "n/a" if p is None else f"{getattr(p, name) * scale:.{digits}f}"


def print_table(races, res, pairs, width) -> None:
    """The block "force–velocity profile" (per kg): model vs split-times method, and fitness.
    Rows name the race by its label (athlete and year; the file name where labels repeat),
    indented, so that a row of the first table is the only line that starts with a race's name."""
    labels = [r.label for r in races]
    if len(set(labels)) < len(labels):
        labels = [r.name for r in races]
    width = max(width, max(len(x) for x in labels) + 3)
    cols = (
        ("F0 [N/kg]", "f0", 1, 2),
        ("V0 [m/s]", "v0", 1, 2),
        ("Pmax [W/kg]", "pmax", 1, 1),
        ("RF_max [%]", "rf_max", 100, 1),
        ("D_RF [%/(m/s)]", "d_rf", 100, 2),
    )
    print()
    print(
        f"force-velocity profile per kg (Samozino et al. 2016): 'model' = the fitted sprinter's run, "
        f"'splits' = the standard method on the Furusawa-Hill-Keller fit; first {fv.WINDOW:g} s after the "
        f"reaction (model: up to its top speed); air friction for m = {fv.DEFAULT_MASS:g} kg, "
        f"h = {fv.DEFAULT_HEIGHT:.2f} m, 101.3 kPa, 20 C, the race's wind"
    )
    print(
        "".ljust(width)
        + "".join(f"{h:>17}" for h, *_ in cols)
        + "   model fitness at "
        + " / ".join(f"{d:g}" for d in FITNESS_AT)
        + " m / finish"
    )
    print("".ljust(width) + "     model splits" * len(cols))
    for i, _r in enumerate(races):
        m, s = pairs[i]
        row = ("  " + labels[i]).ljust(width) + "".join(
            f"{_cell(m, n, k, dg):>10}{_cell(s, n, k, dg):>7}" for _, n, k, dg in cols
        )
        p = res.profile_of(i)
        f = fitness_at(p, FITNESS_AT + (p.x[-1],))
        row += "   " + " / ".join(f"{x:.2f}" for x in f)
        print(row)


def _round(a, digits=4):
    return [None if not np.isfinite(x) else round(float(x), digits) for x in np.asarray(a, dtype=float)]


def record(res, i, pair) -> dict:
    """JSON entries of race ``i``: ``force_velocity`` (both profiles, the method and the assumed
    body and air) and ``profile`` (the model's time, speed and fitness against distance)."""
    p = res.profile_of(i)
    return {
        "force_velocity": {
            "method": "Samozino et al. 2016 (Scand J Med Sci Sports 26:648-658), per kg of body mass",
            "model": None if pair[0] is None else pair[0].as_dict(),
            "split_times": None if pair[1] is None else pair[1].as_dict(),
            "assumed": {
                "mass_kg": fv.DEFAULT_MASS,
                "height_m": fv.DEFAULT_HEIGHT,
                "pressure_pa": fv.DEFAULT_PRESSURE,
                "temperature_k": fv.DEFAULT_TEMPERATURE,
            },
        },
        "profile": {
            "distance_m": _round(p.x, 2),
            "time_s": _round(p.t),
            "speed_mps": _round(p.v),
            "fitness": _round(p.fitness),
        },
    }
