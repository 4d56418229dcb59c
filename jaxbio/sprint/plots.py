"""Figures of ``jaxbio sprint --plot``, and the numbers drawn in them.

`predictive_samples` propagates the Laplace uncertainty of a fit (``FitResult.cov_log``) to the
split times, the speed and the fitness by sampling the log-parameters from their Gaussian and
simulating each sample (one vmapped, jitted call; the fit's own residual and profile code);
`band` turns samples into a central interval. `race_figure` draws, for every race:

- speed against distance: the model's *mean speed over each split* (from its predicted split
  times, with the band) next to the measured split means (`fv_profile.mean_split_speeds` for
  both), and the model's instantaneous speed as a thin line — an instantaneous speed is not a
  split mean, and over the first 10 m the two differ by metres per second;
- split-time residuals (predicted − measured) of the model and both baselines, one panel per race;
- fitness against distance with its band;
- the horizontal force–velocity panel (`fv_profile`): the model's ``F_H(v)`` and, as sprint
  science reads it, each race's linear profile (Samozino et al. 2016: F0, V0, Pmax of the
  model's speed curve; the split-times method's line beside it).

The races are named once, by athlete and year, in a legend above the panels; each panel's key
explains its line styles; the fitness panel says what fitness is (``FITNESS_CAPTION``).

matplotlib is imported only when drawing.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from jaxbio.sprint import fv_profile as fv
from jaxbio.sprint.fitting import quick_jit

#: samples of the parameters per race for the bands, and the central probability of a band
N_SAMPLES = 200
LEVEL = 0.9


def _simulate_samples_impl(base, splits, thetas, *, names, n_steps, n_grid):
    from jaxbio.sprint.fitting import _profile, _residuals

    k = len(names)

    def one(theta, sp):
        _, aux = _residuals(
            theta, (base, sp, jnp.zeros(k, theta.dtype), jnp.zeros((k, k), theta.dtype)), names=names, n_steps=n_steps
        )
        prof = _profile(base, theta, sp, aux, names=names, n_grid=n_grid)
        return aux["pred"], prof["v"], prof["f"]

    per_race = jax.vmap(one, in_axes=(0, None))  # samples of one race
    return jax.vmap(per_race)(thetas, splits)


_STATIC = ("names", "n_steps", "n_grid")
_run_samples = quick_jit(_simulate_samples_impl, _STATIC)  # quick: compile time dominates here


def predictive_samples(res, n_samples: int = N_SAMPLES, seed: int = 0, *, n_grid: int | None = None) -> dict:
    """Split times, speed and fitness of ``n_samples`` parameter draws per race of ``res`` (a
    `jaxbio.sprint.FitResult`, B races), the log-parameters drawn from ``N(theta, cov_log)``.

    Returns numpy arrays: ``theta`` ``(B, S, k)``; ``predicted`` ``(B, S, L)`` split times [s]
    from the gun at ``res.splits.distances``; ``v`` ``(B, S, n)`` m/s and ``f`` ``(B, S, n)``
    fitness at ``res.profile["x"]`` (``n = n_grid``, default the profile's). A race whose
    covariance is not finite gets NaN. ``ValueError`` for ``n_samples < 2``.
    """
    from jaxbio.sprint.fitting import N_STEPS

    if int(n_samples) < 2:
        raise ValueError(f"n_samples must be ≥ 2, got {n_samples}")
    theta = np.asarray(res.theta, dtype=float)
    cov = np.asarray(res.cov_log, dtype=float)
    B, k = theta.shape
    ok = np.all(np.isfinite(cov), axis=(1, 2)) & np.all(np.isfinite(theta), axis=1)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((B, int(n_samples), k))
    draws = np.repeat(theta[:, None], n_samples, axis=1)
    for b in np.flatnonzero(ok):
        w, V = np.linalg.eigh(0.5 * (cov[b] + cov[b].T))
        root = V * np.sqrt(np.clip(w, 0.0, None))  # cov = root rootᵀ, flat directions dropped
        draws[b] = theta[b] + z[b] @ root.T
    n_grid = res.profile["x"].shape[-1] if n_grid is None else int(n_grid)
    pred, v, f = _run_samples(
        True, res.model, res.splits, jnp.asarray(draws), names=tuple(res.names), n_steps=N_STEPS, n_grid=n_grid
    )
    out = {"theta": draws, "predicted": np.array(pred), "v": np.array(v), "f": np.array(f)}
    for key in ("predicted", "v", "f"):
        out[key][~ok] = np.nan
    return out


def band(samples, level: float = LEVEL, axis: int = 1):
    """``(low, high)``: the central ``level`` interval of ``samples`` along ``axis`` (quantiles)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    q = np.quantile(np.asarray(samples, dtype=float), [(1 - level) / 2, (1 + level) / 2], axis=axis)
    return q[0], q[1]


def split_speed_samples(races, predicted) -> list[np.ndarray]:
    """Per race ``(S, n)``: the mean speed over each split [m/s] of each sample's predicted split
    times (``predicted`` ``(B, S, L)``, `predictive_samples`)."""
    out = []
    for i, r in enumerate(races):
        out.append(np.stack([fv.mean_split_speeds(r.distances, t[: r.n], r.reaction_time)[1] for t in predicted[i]]))
    return out


#: what the fitness panel says fitness is (a caption in the figure: a coach reads it there)
FITNESS_CAPTION = (
    "fitness f: the share of the fresh muscle force the sprinter can still produce\n"
    "(1 = fresh, 0 = none; no unit). It falls as the phosphagen reserve (fast energy,\n"
    "E J/kg fitted per race) is spent: f(e) = e(1+K)/(e+K), e the reserve left."
)
#: labels of the force–velocity panel's lines (``race_figure``)
FV_MODEL = "model: horizontal force F_H(v) of its run"
FV_LINE = "linear F-v profile of the model's speed curve (Samozino et al. 2016): F0 at v = 0, V0 at F = 0"
FV_SPLITS = "linear F-v profile from the split times (standard method on the FHK fit)"


def race_figure(races, res, fhk, tib, fit_until=None, samples=None, fv_pairs=None, stacked=None):
    """The figure of the module docstring (a matplotlib ``Figure``; the caller saves and closes
    it). ``samples``: `predictive_samples` of ``res`` (None: no bands); ``fv_pairs``: per race
    ``(model, splits)`` `fv_profile.ForceVelocityProfile` (None: computed here); ``stacked``: the
    final times stacked with FHK (`jaxbio.sprint.stacking.StackedForecast`), drawn in the residual
    panels at the last split with their 95 % interval (None: not drawn).

    Made to be read: one figure legend names the races by athlete and year (colour) above the
    panels, each panel's key says what its line styles mean and sits outside its data (the
    speed key in the empty region below the curves, the others beside their axes), fonts are 8.5
    pt or more, the fitness panel carries ``FITNESS_CAPTION``, and the force–velocity panel shows
    each race's linear profile of sprint science (Samozino et al. 2016; ``fv_pairs``: the line
    from ``(0, F0)`` to ``(V0, 0)``, its F0, V0 and Pmax written beside it) over the model's
    own ``F_H(v)`` curve it is the regression of."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    R = len(races)
    if fv_pairs is None:
        from jaxbio.sprint.fv_report import profiles

        fv_pairs = profiles(races, res, fhk)
    labels = [r.label or r.name for r in races]
    if len(set(labels)) < R:
        labels = [r.name for r in races]
    fig = plt.figure(figsize=(max(15.0, 2.9 * R), 15.0), layout="constrained")
    gs = fig.add_gridspec(3, 2 * R, height_ratios=[3.0, 2.8, 1.6])
    ax_v = fig.add_subplot(gs[0, :])
    ax_f = fig.add_subplot(gs[1, :R])
    ax_fv = fig.add_subplot(gs[1, R:])
    ax_r = [fig.add_subplot(gs[2, 2 * i : 2 * i + 2]) for i in range(R)]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    speeds = split_speed_samples(races, samples["predicted"]) if samples is not None else None
    pct = f"{100 * LEVEL:g} %"
    race_handles, fv_text = [], []
    for i, r in enumerate(races):
        c = colors[i % len(colors)]
        p = res.profile_of(i)
        d = np.concatenate([[0.0], r.distances])
        mid, measured = fv.mean_split_speeds(r.distances, r.times, r.reaction_time)
        _, model = fv.mean_split_speeds(r.distances, res.predicted[i, : r.n], r.reaction_time)
        race_handles.append(Line2D([], [], color=c, lw=2.5, label=f"{labels[i]} (RMSE {1e3 * res.rmse[i]:.1f} ms)"))
        ax_v.plot(p.x, p.v, color=c, lw=0.8, alpha=0.45)
        ax_v.stairs(model, d, baseline=None, color=c, lw=1.8)
        ax_v.plot(mid, measured, "o", color=c, ms=5.5, mfc="white", mew=1.5)
        if speeds is not None and np.all(np.isfinite(speeds[i])):
            lo, hi = band(speeds[i], axis=0)
            ax_v.stairs(hi, d, baseline=lo, fill=True, color=c, alpha=0.2)
            flo, fhi = band(samples["f"][i], axis=0)
            ax_f.fill_between(p.x, flo, fhi, color=c, alpha=0.2, lw=0)
        ax_f.plot(p.x, p.fitness, color=c, lw=1.8)
        # force-velocity: the model's F_H(v) and the linear profiles (Samozino et al. 2016)
        m_prof, s_prof = fv_pairs[i]
        run = res.profile
        _, vm, am = fv.run_motion(run["run_s"][i], run["run_v"][i], run["run_a"][i])
        ax_fv.plot(vm, fv.horizontal_force(vm, am, wind=r.wind), color=c, lw=1.8, gid="fv-model")
        if m_prof is not None:
            ax_fv.plot([0.0, m_prof.v0], [m_prof.f0, 0.0], color=c, lw=1.4, ls="--", marker="o", ms=5, gid="fv-linear")
            fv_text.append(
                Line2D(
                    [],
                    [],
                    color=c,
                    lw=1.4,
                    ls="--",
                    marker="o",
                    ms=5,
                    label=f"{labels[i]}: F0 {m_prof.f0:.1f} N/kg, V0 {m_prof.v0:.1f} m/s, Pmax {m_prof.pmax:.0f} W/kg",
                )
            )
        if s_prof is not None:
            ax_fv.plot([0.0, s_prof.v0], [s_prof.f0, 0.0], color=c, lw=1.0, ls=":", gid="fv-splits")
        # split-time residuals: model and both baselines
        ax = ax_r[i]
        fitted = r.until(fit_until) if fit_until is not None else np.ones(r.n, bool)
        for pred, label, mk, ls in (
            (res.predicted[i, : r.n], "model", "o", "-"),
            (fhk.predicted[i, : r.n], "FHK", "s", "--"),
            (tib.predicted[i, : r.n], "Tibshirani", "^", ":"),
        ):
            e = 1e3 * (pred - r.times)
            col = "0.4" if label != "model" else c
            ax.plot(r.distances, e, ls, color=col, lw=1, marker=mk, ms=4, label=label)
            ax.plot(r.distances[~fitted], e[~fitted], mk, color=col, ms=4, mfc="white")
        if samples is not None and np.all(np.isfinite(samples["predicted"][i])):
            lo, hi = band(1e3 * (samples["predicted"][i][:, : r.n] - r.times), axis=0)
            ax.fill_between(r.distances, lo, hi, color=c, alpha=0.2, lw=0)
        if stacked is not None and stacked.available[i]:
            t = r.times[-1]
            e = 1e3 * (stacked.mean[i] - t)
            err = 1e3 * np.array(
                [[stacked.mean[i] - stacked.lower[0.95][i]], [stacked.upper[0.95][i] - stacked.mean[i]]]
            )
            ax.errorbar(
                [r.distances[-1] + 2.0],
                [e],
                yerr=err,
                fmt="D",
                color="k",
                ms=4.5,
                capsize=2,
                lw=1,
                label="stacked (95 %)",
            )
        ax.axhspan(-5, 5, color="0.9", zorder=0)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_title(labels[i], fontsize=10, color=c)
        ax.set_xlabel("distance [m]", fontsize=9)
        ax.tick_params(labelsize=8.5)
        ax.grid(alpha=0.3)
    fig.legend(
        handles=race_handles,
        loc="outside upper center",
        ncol=min(R, 5),
        fontsize=10.5,
        frameon=False,
        title="races (colour); RMSE: the model's split-time error",
        title_fontsize=10,
    )
    ax_r[0].set_ylabel("predicted − measured\nsplit time [ms]\n(grey: ±5 ms, the 0.01 s rounding)", fontsize=9)
    ax_r[-1].legend(fontsize=8.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, title="residuals")
    band_note = f"; shaded: {pct} band of the fit's uncertainty" if samples is not None else ""
    if fit_until is not None:
        for ax in [ax_v, ax_f] + ax_r:
            ax.axvline(fit_until, color="k", lw=0.8, ls="--")
        ax_v.text(
            fit_until,
            0.98,
            f" fitted ≤ {fit_until:g} m; predicted after",
            va="top",
            fontsize=9,
            transform=ax_v.get_xaxis_transform(),
        )
    key = [
        Line2D([], [], color="k", marker="o", mfc="white", ls="none", label="measured: mean speed over each split"),
        Line2D([], [], color="k", lw=1.8, drawstyle="steps-mid", label="model: mean speed over each split"),
        Line2D([], [], color="k", lw=0.8, alpha=0.45, label="model: instantaneous speed"),
    ]
    if samples is not None:
        key.append(Patch(color="k", alpha=0.2, label=f"{pct} band (the fit's uncertainty)"))
    ax_v.legend(handles=key, fontsize=10, loc="lower right", title="line styles (colour = race)", title_fontsize=10)
    ax_v.set_title("speed over the race: measured split means and the model", fontsize=12)
    ax_v.set_ylabel("speed [m/s]", fontsize=11)
    ax_v.set_xlabel("distance [m]", fontsize=11)
    ax_v.set_ylim(0, 1.06 * ax_v.get_ylim()[1])  # room for the fit_until note above the curves
    ax_v.grid(alpha=0.3)
    ax_f.set_title(f"fitness against distance{band_note}", fontsize=11)
    ax_f.set_xlabel("distance [m]", fontsize=10)
    ax_f.set_ylabel("fitness f (1 = fresh)", fontsize=10)
    ax_f.set_ylim(0, 1.05)
    ax_f.grid(alpha=0.3)
    ax_f.text(
        0.02,
        0.03,
        FITNESS_CAPTION,
        transform=ax_f.transAxes,
        fontsize=8.5,
        va="bottom",
        ha="left",
        bbox=dict(boxstyle="round", facecolor="white", edgecolor="0.7", alpha=0.95),
    )
    ax_fv.set_title("horizontal force against speed, per kg (first 6 s of the run)", fontsize=11)
    ax_fv.set_xlabel("speed v [m/s]", fontsize=10)
    ax_fv.set_ylabel("F_H / m [N/kg]", fontsize=10)
    ax_fv.set_xlim(left=0)
    ax_fv.grid(alpha=0.3)
    fv_key = [
        Line2D([], [], color="k", lw=1.8, label=FV_MODEL),
        Line2D([], [], color="k", lw=1.4, ls="--", marker="o", ms=5, label=FV_LINE.replace(": ", ":\n")),
        Line2D([], [], color="k", lw=1.0, ls=":", label=FV_SPLITS),
    ]
    top = max([ln.get_ydata().max() for ln in ax_fv.get_lines()] + [1.0])
    ax_fv.set_ylim(0, 1.95 * top)  # headroom: the key and the profiles' numbers sit above the curves
    ax_fv.legend(
        handles=fv_key + fv_text,
        fontsize=8.5,
        loc="upper right",
        title="line styles; each race's linear profile (its colour)",
        title_fontsize=9,
    )
    return fig


def write_figure(
    f, fmt, races, res, fhk, tib, fit_until=None, *, n_samples: int = N_SAMPLES, fv_pairs=None, stacked=None
) -> None:
    """`race_figure` with `predictive_samples` bands, saved to the binary file ``f`` as ``fmt``."""
    import matplotlib.pyplot as plt

    samples = predictive_samples(res, n_samples) if n_samples else None
    fig = race_figure(races, res, fhk, tib, fit_until, samples, fv_pairs, stacked)
    try:
        fig.savefig(f, format=fmt, dpi=110)
    finally:
        plt.close(fig)
