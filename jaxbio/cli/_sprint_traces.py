"""``jaxbio sprint --csv TRACE``: the fit of speed traces (`jaxbio.sprint.trace`), table, JSON and
plot; called by `jaxbio.cli._sprint` when its ``--csv`` files are traces (column line
``time_s,speed_m_s``). Same exit codes and output policy as split files."""

from __future__ import annotations

import sys


def run_traces(args, traces, outputs, plot_format, notes) -> int:
    """Fit ``traces``, write ``outputs`` (checked `jaxbio._files.Output`), print the table; the
    exit code (0 valid fits, 1 a fit that is not a valid estimate or a baseline that failed)."""
    from jaxbio._files import write_outputs
    from jaxbio.cli._common import _progress, _write_json, exit_code
    from jaxbio.sprint.fitting import FREE, fit_problems
    from jaxbio.sprint.trace import SpeedTrace, check_traces, fit_trace_baseline, fit_traces

    check_traces(traces, len(FREE))
    for note in notes:
        print(note, file=sys.stderr)
    bar = _progress(2, args.no_progress)
    try:
        bar.set_description("fitting the sprinter model to the speed traces")
        res, noise = fit_traces(traces)
        bar.update()
        bar.set_description("fitting Furusawa-Hill-Keller and Tibshirani")
        data = SpeedTrace.from_traces(traces)
        fhk, tib = (fit_trace_baseline(kind, data) for kind in ("fhk", "tibshirani"))
        bar.update()
    finally:
        bar.close()
    problems = [fit_problems(res, i) for i in range(len(traces))]
    records = [_record(i, tr, res, noise, fhk, tib, problems[i]) for i, tr in enumerate(traces)]
    writers = {
        "--json": lambda f: _write_json(f, records[0] if len(records) == 1 else records),
        "--plot": lambda f: _plot(f, plot_format, traces, res, fhk, tib),
    }
    write_outputs([(out, writers[out.option]) for out in outputs])
    _print_table(traces, res, noise, fhk, tib, problems)
    return exit_code(traces, problems, (fhk, tib))


def _print_table(traces, res, noise, fhk, tib, problems):
    from jaxbio.cli._common import _fmt_pm
    from jaxbio.sprint.model import DEFAULTS

    heads = {"f0": ("F0/m", "N/kg", 2), "vmax": ("v_max", "m/s", 2), "energy": ("E", "J/kg", 0)}
    width = max(18, max(len(t.name) for t in traces) + 1)
    print(
        "Sprinter (fitness-dependent Hamiltonian model after Ivancevic 2009) fitted to speed traces (radar/laser), float64"
    )
    print(
        f"fixed: a/F0 = {DEFAULTS['hill_ratio']}, tau = {DEFAULTS['tau'] * 1e3:g} ms, "
        f"Rayleigh alpha = {DEFAULTS['rayleigh']} 1/s, drag = {DEFAULTS['drag']:.5f} 1/m, "
        f"P_act = {DEFAULTS['activation_power']:g} W/kg, K = {DEFAULTS['half_saturation']}, "
        f"recovery = {DEFAULTS['recovery']:.4f} 1/s; reaction time and wind from each file"
    )
    cols = "".join(f"{heads[n][0]} [{heads[n][1]}]".rjust(16) for n in res.names)
    print(
        "trace".ljust(width) + cols + "   top speed [m/s] @ [m]  lost [m/s]   RMSE [m/s]: model    FHK  Tibsh."
        "   noise [m/s]  lag-1 corr  samples  times from"
    )
    for i, tr in enumerate(traces):
        p = res.profile_of(i)
        vals = "".join(
            " " + _fmt_pm(res.values[i, j], res.std[i, j], heads[n][2], n in problems[i]).rjust(15)
            for j, n in enumerate(res.names)
        )
        print(
            tr.name.ljust(width) + vals + f"   {p.top_speed:6.2f} @ {p.top_speed_at:5.1f}{p.speed_lost:12.2f}"
            f"   {res.rmse[i]:17.3f} {fhk.rmse[i]:6.3f} {tib.rmse[i]:6.3f}"
            f"   {noise['sigma'][i]:11.3f}  {noise['rho'][i]:10.2f}  {tr.n:7d}  {tr.time_origin}"
        )
    print(
        "± is one Laplace standard deviation, with the speed noise estimated from the residuals and inflated by "
        "(1 + r)/(1 - r) for their lag-1 correlation r (radar samples are not independent)"
    )
    if any(problems):
        print("! not a valid estimate: see the message on stderr")
    unknown = [t.name for t in traces if not t.wind_known]
    if unknown:
        print(f"wind unknown (0 m/s assumed) for {', '.join(unknown)}")


def _record(i, tr, res, noise, fhk, tib, problems=None):
    from jaxbio.cli._common import _json_number as _number
    from jaxbio.sprint.model import DEFAULTS, UNITS

    p = res.profile_of(i)
    n = tr.n
    rec = {
        "race": tr.name,
        "label": tr.label,
        "source": tr.path,
        "kind": "speed_trace",
        "time_origin": tr.time_origin,
        "reaction_time_s": tr.reaction_time,
        "wind_mps": tr.wind if tr.wind_known else None,
        **({} if tr.wind_known else {"wind_assumed_mps": tr.wind}),
        "parameters": {
            name: {"value": _number(res.values[i, j]), "std": _number(res.std[i, j]), "unit": UNITS[name]}
            for j, name in enumerate(res.names)
        },
        "fixed_parameters": {
            k: {"value": float(v), "unit": UNITS[k]} for k, v in DEFAULTS.items() if k not in res.names
        },
        "rmse_mps": _number(res.rmse[i]),
        "noise_mps": _number(noise["sigma"][i]),
        "residual_lag1_correlation": _number(noise["rho"][i]),
        "variance_inflation": _number(noise["inflation"][i]),
        "converged": bool(res.converged[i]) and not problems,
        "top_speed_mps": _number(p.top_speed),
        "top_speed_at_m": _number(p.top_speed_at),
        "speed_lost_mps": _number(p.speed_lost),
        "distance_covered_m": _number(p.x[-1]),
        "finish_fitness": _number(p.fitness[-1]),
        "samples": {
            "time_s": [float(t) for t in tr.times],
            "measured_mps": [float(v) for v in tr.speeds],
            "predicted_mps": [_number(v) for v in res.predicted[i, :n]],
        },
        "baselines": {},
    }
    if problems:
        rec["problems"] = dict(problems)
    for b in (fhk, tib):
        rec["baselines"][b.kind] = {
            "parameters": {
                name: {"value": _number(b.values[i, j]), "unit": b.units[j]} for j, name in enumerate(b.names)
            },
            "rmse_mps": _number(b.rmse[i]),
            "converged": bool(b.converged[i]),
        }
    return rec


def _plot(f, fmt, traces, res, fhk, tib):
    """Speed against time: the samples, the sprinter and the baselines; fitness below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_v, ax_f) = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, tr in enumerate(traces):
        c = colors[i % len(colors)]
        n = tr.n
        ax_v.plot(tr.times, tr.speeds, ".", color=c, ms=2, alpha=0.5, label=f"{tr.name}: measured")
        ax_v.plot(
            tr.times, res.predicted[i, :n], color=c, lw=1.8, label=f"{tr.name}: model (RMSE {res.rmse[i]:.3f} m/s)"
        )
        if len(traces) <= 2:
            for b, ls in ((fhk, "--"), (tib, ":")):
                ax_v.plot(
                    tr.times,
                    b.predicted[i, :n],
                    ls,
                    color=c,
                    lw=1,
                    label=f"{tr.name}: {b.kind} (RMSE {b.rmse[i]:.3f} m/s)",
                )
        p = res.profile_of(i)
        ax_f.plot(p.t + (0.0 if tr.time_origin == "gun" else -tr.gun_offset), p.fitness, color=c, lw=1.8)
    ax_v.set_ylabel("speed [m/s]")
    ax_v.set_ylim(bottom=0)
    ax_v.grid(alpha=0.3)
    ax_v.legend(fontsize=7, loc="lower right")
    ax_v.set_title("speed against time, measured (radar/laser) and fitted (sprinter after Ivancevic 2009)")
    ax_f.set_ylabel("fitness f(e)")
    ax_f.set_xlabel("time [s] (from the gun or movement onset, as in the file)")
    ax_f.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(f, format=fmt, dpi=120)
    finally:
        plt.close(fig)
