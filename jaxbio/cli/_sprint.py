"""``jaxbio sprint``: fit the sprinter (and the classical baselines) to 100 m split times.

With no arguments every race of the default embedded collection is fitted and a table printed.
``--race NAME`` / ``--csv PATH`` (repeatable) choose races, ``--races default|more|all`` adds an
embedded collection (`jaxbio.sprint.data.COLLECTIONS`); ``--fit-until D`` fits only the splits
≤ D m (with the hierarchical prior of `jaxbio.sprint.hierarchical`: the population of every free
parameter learned from the other races of the default collection) and predicts the rest with 68 %/95 % intervals,
and the final time stacked with FHK (`jaxbio.sprint.stacking`) beside the sprinter's;
``--plot FILE.png`` draws split mean speeds with uncertainty bands, split-time residuals, fitness
and force–velocity profiles; ``--json FILE`` writes the results.
``add_parser(subparsers)`` registers the subcommand on the ``jaxbio`` command line.
A ``--csv`` file whose column line is ``time_s,speed_m_s`` is a speed trace (radar/laser,
`jaxbio.sprint.trace`): traces are fitted on speed (`jaxbio.cli._sprint_traces`), in a run of their
own (with split files or ``--fit-until``: exit 2). Races up to 200 m (bend ignored).

Exit codes:

- 0: every race fitted to a valid estimate.
- 2: bad input — a split file ``read_csv`` refuses, a bad option, or an output path that is an
  input, named twice, a directory, in a missing or read-only directory, or an unknown plot format.
  One line on stderr (``jaxbio sprint: error: FILE:LINE: problem``); checked before any fitting,
  and nothing is written. Also a file that cannot be written at the end (then nothing is).
- 1: a fit that is not a valid estimate: it did not converge, a parameter is outside
  ``fitting.PLAUSIBLE`` or the splits do not determine it (flat Gauss–Newton direction: its std
  is "n/a", never "± 0"). One stderr line per such race naming the parameter; the table marks
  the values with ``!``; the outputs are written, the JSON with ``"converged": false`` and
  ``"problems"``. Also when a baseline did not converge.

The reader's warnings (unknown wind, a reaction time that is not one number, implausible reaction
time or wind) are one stderr line each
(``jaxbio sprint: warning: FILE:LINE: ...``), printed once the input is known to be good. Output
files are written all-or-nothing (``jaxbio._files``) *before* the table is printed, so a closed
stdout (``| head``) costs no file; its ``BrokenPipeError`` is left to the ``jaxbio`` entry point.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from jaxbio.cli._common import _fmt_pm, _json_number as _number, _progress, _setup_jax, _write_json, exit_code


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``sprint`` on an argparse ``subparsers`` object; sets ``func=run``."""
    p = subparsers.add_parser(
        "sprint",
        help="fit fatigue (fitness) parameters to 100 m split times",
        description="Fit Ivancevic's (2009) fitness-dependent Hamiltonian sprinter to 100 m split times "
        "(all embedded races by default) and compare with the Furusawa-Hill-Keller and "
        "Tibshirani (1997) models.",
    )
    p.add_argument("--race", action="append", metavar="NAME", help="an embedded race (repeatable; prefixes allowed)")
    p.add_argument(
        "--races",
        choices=("default", "more", "all"),
        metavar="SET",
        help="a collection of embedded races: default (the five elite men's 100 m races fitted "
        "without arguments), more (further public races: women's, 200 m with the bend ignored), "
        "or all; added to any --race/--csv",
    )
    p.add_argument(
        "--csv",
        action="append",
        metavar="PATH",
        help="a split file: '#' header lines incl. reaction_time_s (s or ms) and wind (m/s, km/h, mph; "
        "free text = unknown), then distance_m,time_s (or ';'-separated with decimal commas) (repeatable); "
        "or a speed trace (radar/laser): '# time_origin: gun|movement', then time_s,speed_m_s, "
        "recognised by that column line (traces and split files are fitted in separate runs)",
    )
    p.add_argument(
        "--fit-until",
        type=float,
        metavar="D",
        help="fit only splits at or before D m and predict the rest with 68%%/95%% intervals "
        "(hierarchical prior learned from the other embedded races)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="plot split mean speeds (model vs measured, 90%% Laplace bands), split-time residuals, fitness "
        "and force-velocity profiles (format from the "
        "extension: png, pdf, svg, ...; replaced atomically, never an input file)",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        help="write the results as JSON (an object for one race, else a list; "
        "replaced atomically, never an input file)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Run ``jaxbio sprint``; returns the exit code: 0 ok; 2 bad input (a bad split file, option
    or output path: nothing is fitted or written); 1 a fit that is not a valid estimate (did not
    converge, a parameter outside ``fitting.PLAUSIBLE`` or not determined by the splits) — the
    outputs are written, with ``"converged": false`` and ``"problems"`` in the JSON."""
    from jaxbio.sprint.data import SprintDataError

    try:
        return _run(args)
    except BrokenPipeError:
        raise  # stdout closed (``| head``): the ``jaxbio`` entry point handles it, not as bad input
    except (SprintDataError, ValueError, OSError) as e:
        from jaxbio.cli._common import one_line

        print(one_line(f"jaxbio sprint: error: {e}"), file=sys.stderr)
        return 2


def _read_warned(notes, read, *a, **kw):
    """``read(*a, **kw)``; each ``SprintDataWarning`` is added to ``notes`` as one line (printed
    once the input is known to be good: bad input gives one stderr line only)."""
    from jaxbio.sprint.data import SprintDataWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SprintDataWarning)
        race = read(*a, **kw)
    for w in caught:
        if issubclass(w.category, SprintDataWarning):
            notes.append(f"jaxbio sprint: warning: {w.message}")
        else:  # pragma: no cover — not expected from the reader
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return race


def _load(args):
    """The races, the files they were read from (those may never be outputs) and the readers'
    warnings (stderr lines)."""
    from jaxbio.sprint.data import embedded_file, embedded_races, load_race, read_csv
    from jaxbio.sprint.trace import is_trace_file, read_trace

    races, files, notes = [], [], []
    for name in args.race or []:
        races.append(_read_warned(notes, load_race, name))
    for path in args.csv or []:  # a speed trace is told by its column line 'time_s,speed_m_s'
        races.append(_read_warned(notes, read_trace if is_trace_file(path) else read_csv, path))
        files.append(path)
    if args.races is not None or not races:
        races += _read_warned(notes, embedded_races, args.races or "default")
    files += [str(embedded_file(r.name)) for r in races if r.path.startswith("jaxbio/sprint/data/")]
    if args.fit_until is not None and not np.isfinite(args.fit_until):
        raise ValueError(f"--fit-until must be a finite distance in m, got {args.fit_until}")
    return races, files, notes


def _plot_format(path: str) -> str:
    """The image format of ``--plot`` from its extension (png without one); ``ValueError`` if
    matplotlib is missing or does not write that format. Checked before fitting."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'jaxbio[plot]'") from None
    ext = os.path.splitext(path)[1][1:].lower() or "png"
    supported = Figure().canvas.get_supported_filetypes()
    if ext not in supported:
        raise ValueError(f"--plot {path}: unknown image format {ext!r}; use one of {', '.join(sorted(supported))}")
    return ext


def _run(args) -> int:
    from jaxbio._files import check_outputs, write_outputs

    races, inputs, notes = _load(args)  # input errors first, before JAX starts
    outputs = check_outputs([("--json", args.json), ("--plot", args.plot)], inputs)
    plot_format = _plot_format(args.plot) if args.plot else None
    from jaxbio.sprint.trace import Trace

    traces = [r for r in races if isinstance(r, Trace)]
    if traces and (len(traces) < len(races) or args.fit_until is not None):
        other = "split files" if len(traces) < len(races) else "--fit-until"
        raise ValueError(
            f"{traces[0].path}: a speed trace cannot be fitted with {other} in one run "
            "(fit traces and split files separately)"
        )
    _setup_jax()
    if traces:
        from jaxbio.cli._sprint_traces import run_traces

        return run_traces(args, traces, outputs, plot_format, notes)
    from jaxbio.sprint.baselines import fit_baseline
    from jaxbio.sprint.data import embedded_races
    from jaxbio.sprint.fitting import FREE, check_enough_splits, fit_problems, splits_from_races
    from jaxbio.sprint.selection import base_fit, fit_selected

    fit_until = args.fit_until
    n_prior = len(FREE) if fit_until is not None else 0  # every parameter gets a prior (hierarchical)
    check_enough_splits(races, max(len(FREE) - n_prior, 1), fit_until)
    for note in notes:  # the input is good: now its warnings
        print(note, file=sys.stderr)
    bar = _progress(4 if fit_until is not None else 3, args.no_progress)
    splits = splits_from_races(races, fit_until)
    late_notes = []  # warnings found while fitting (the shipped reference fits stale), printed after the bar

    def baselines():  # closed-form models, by scipy (no XLA compile), in a second thread
        return tuple(fit_baseline(kind, splits, backend="scipy").rows(len(races)) for kind in ("fhk", "tibshirani"))

    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            job = pool.submit(baselines)
            if fit_until is not None:
                from jaxbio.sprint.hierarchical import forecast, reference_fits, same_length
                from jaxbio.sprint.stacking import with_stacked

                bar.set_description("the embedded races' reference fits (for the population)")
                # shipped (data/reference_fits.json) unless they changed: then fitted, with one warning line
                ref = _read_warned(late_notes, reference_fits, embedded_races())
                ref, reference = _reference_for_lengths(races, ref, embedded_races())
                bar.update()
                bar.set_description(f"fitting splits ≤ {fit_until:g} m with the hierarchical prior")
                # with the sprinter stacked with FHK for the final time (nested forecasts shipped for the default
                # collection: data/nested_forecasts.json)
                res, fc, pops = _read_warned(
                    late_notes,
                    forecast,
                    races,
                    fit_until,
                    ref=ref,
                    pool=same_length(reference),
                )
                fc = with_stacked(fc, races, fit_until, res, ref, reference=reference, pool=same_length(reference))
            else:
                fc = pops = None
                bar.set_description("fitting the sprinter model")
                res = base_fit(races)  # fit(races), in the compiled function the model choice reuses
            bar.update()
            bar.set_description("fitting Furusawa-Hill-Keller and Tibshirani")
            fhk, tib = job.result()
            bar.update()
            if fit_until is None:  # how much freedom each race's splits support, never fitting worse than a
                # baseline (with --fit-until the aim is the prediction: freeing the start there made the
                # predicted last split worse, 0.038 s against 0.026 s mean |error| on the embedded races)
                bar.set_description("choosing the free parameters (start offset, force-velocity)")
                res = fit_selected(races, base=res, baselines=[fhk.rmse, tib.rmse])
            bar.update()
    finally:
        bar.close()
    for note in late_notes:
        print(note, file=sys.stderr)
    problems = [fit_problems(res, i) for i in range(len(races))]
    from jaxbio.sprint import fv_report as _fv_report

    fv_pairs = _fv_report.profiles(races, res, fhk)  # force-velocity profiles: model and split times
    records = [
        {**_record(i, r, res, fhk, tib, fit_until, problems[i], fc, pops), **_fv_report.record(res, i, fv_pairs[i])}
        for i, r in enumerate(races)
    ]
    # files before the table: a closed stdout (``| head``) must not cost the files
    writers = {
        "--json": lambda f: _write_json(f, records[0] if len(records) == 1 else records),
        "--plot": lambda f: _plot(f, plot_format, races, res, fhk, tib, fit_until, fv_pairs, fc),
    }
    write_outputs([(out, writers[out.option]) for out in outputs])
    _print_table(races, res, fhk, tib, fit_until, problems, fc, pops)
    _fv_report.print_table(races, res, fv_pairs, max(18, max(len(r.name) for r in races) + 1))
    return exit_code(races, problems, (fhk, tib))


def _reference_for_lengths(races, ref, reference):
    """The reference fits for ``--fit-until``: the shipped ones of the default collection (100 m),
    plus full fits of the other embedded races of a length that a forecast race has and the
    default collection lacks (200 m): each race's population is learned from the races of its
    length (`hierarchical.same_length`; a 200 m race forecast from the 100 m population was
    seconds off). Returns ``(ReferenceFits, the reference races)``; the default request fits nothing."""
    from jaxbio.sprint.data import SprintDataWarning, embedded_races
    from jaxbio.sprint.hierarchical import reference_fits

    have = {float(r.distances[-1]) for r in reference}
    need = {float(r.distances[-1]) for r in races} - have
    if not need:
        return ref, list(reference)
    with warnings.catch_warnings():  # a reference race's unknown wind is not this run's input
        warnings.simplefilter("ignore", SprintDataWarning)
        extra = [r for r in embedded_races("more") if float(r.distances[-1]) in need]
    if not extra:
        return ref, list(reference)
    return ref.concatenate(reference_fits(extra, shipped=False)), list(reference) + extra


def _print_table(races, res, fhk, tib, fit_until, problems, fc=None, pops=None):
    from jaxbio.sprint.fitting import PLAUSIBLE
    from jaxbio.sprint.model import DEFAULTS, UNITS

    heads = {"f0": ("F0/m", "N/kg", 2), "vmax": ("v_max", "m/s", 2), "energy": ("E", "J/kg", 0)}
    shown = [n for n in res.names if n in heads]
    width = max(18, max(len(r.name) for r in races) + 1)
    print("Sprinter (fitness-dependent Hamiltonian model after Ivancevic 2009) fitted to split times, float64")
    fixed = (
        f"fixed: a/F0 = {DEFAULTS['hill_ratio']} (unless freed), tau = {DEFAULTS['tau'] * 1e3:g} ms, "
        f"Rayleigh alpha = {DEFAULTS['rayleigh']} 1/s, drag = {DEFAULTS['drag']:.5f} 1/m, "
        f"P_act = {DEFAULTS['activation_power']:g} W/kg, K = {DEFAULTS['half_saturation']}, "
        f"recovery = {DEFAULTS['recovery']:.4f} 1/s{_unless_freed(res, 'recovery')}; reaction time (plus RT where "
        f"freed) and wind from each file"
    )
    print(fixed)
    if fit_until is not None:
        print(
            f"fitted splits ≤ {fit_until:g} m; prior: the population of the other embedded races of the same length "
            f"(hierarchical, every parameter), split-time noise {pops[0].sigma:.4f} s estimated from their residuals"
        )
    cols = [f"{heads[n][0]} [{heads[n][1]}]".rjust(16) for n in shown]
    line = "race".ljust(width) + "".join(cols) + "  freed    " + "   top speed [m/s] @ [m]" + "  lost [m/s]"
    line += "   RMSE [s]: model     FHK  Tibsh."
    if fit_until is not None:
        line += "   last split [s]: measured   model (err)      FHK (err)      Tibsh. (err)"
    print(line)
    errs = []
    for i, r in enumerate(races):
        p = res.profile_of(i)
        vals = "".join(
            " " + _fmt_pm(res.values[i, j], res.std[i, j], heads[n][2], n in problems[i]).rjust(15)
            for j, n in enumerate(res.names)
            if n in heads
        )  # at least one space between wide cells
        freed = ",".join(_SHORT[n] for n in res.freed(i) if n not in heads) or "-"
        row = (
            r.name.ljust(width)
            + vals
            + f"  {freed:<9}"
            + f"   {p.top_speed:6.2f} @ {p.top_speed_at:5.1f}"
            + f"{p.speed_lost:12.2f}"
        )
        row += f"   {res.rmse[i]:14.4f} {fhk.rmse[i]:7.4f} {tib.rmse[i]:7.4f}"
        if fit_until is not None:
            j = r.n - 1
            e = [res.predicted[i, j] - r.times[j], fhk.predicted[i, j] - r.times[j], tib.predicted[i, j] - r.times[j]]
            errs.append(e)
            row += (
                f"   {r.distances[j]:4.0f} m {r.times[j]:6.2f}   {res.predicted[i, j]:6.3f} ({e[0]:+.3f})"
                f"  {fhk.predicted[i, j]:6.3f} ({e[1]:+.3f})  {tib.predicted[i, j]:6.3f} ({e[2]:+.3f})"
            )
        print(row)
    if fit_until is not None:
        m = np.mean(np.abs(np.array(errs)), axis=0)
        print(
            f"mean |error| of the predicted last split: model {m[0]:.3f} s, FHK {m[1]:.3f} s, Tibshirani {m[2]:.3f} s"
        )
        _print_forecast(races, fc, fit_until)
        _print_stacked(races, fc.stacked)
    else:
        print(
            f"RMSE over all races: model {np.sqrt(np.mean(res.rmse**2)):.4f} s, FHK {np.sqrt(np.mean(fhk.rmse**2)):.4f} s, "
            f"Tibshirani {np.sqrt(np.mean(tib.rmse**2)):.4f} s (data rounded to 0.01 s)"
        )
    if fit_until is not None:
        print(
            "± is one posterior standard deviation (Laplace, with the hierarchical prior and the estimated split noise)"
        )
    else:
        print(
            "± is one Laplace standard deviation (Gauss-Newton Hessian; noise = 0.01 s rounding, inflated by the "
            "residuals when larger)"
        )
    for line in _selection_notes(races, res):
        print(line)
    if any(n in p for p in problems for n in res.names):
        ranges = ", ".join(
            f"{heads[n][0] if n in heads else _SHORT.get(n, n)} {PLAUSIBLE[n][0]:g}–{PLAUSIBLE[n][1]:g} "
            f"{heads[n][1] if n in heads else UNITS[n]}"
            for n in res.names
            if n in PLAUSIBLE
        )
        print(
            f"! not a valid estimate: outside the plausible range ({ranges}), or not determined by the splits "
            "(± n/a); see the message on stderr"
        )
    unknown = [r.name for r in races if not r.wind_known]
    if unknown:
        print(f"wind unknown (0 m/s assumed) for {', '.join(unknown)}")
    unknown_rt = [r.name for r in races if not getattr(r, "reaction_time_known", True)]
    if unknown_rt:
        from jaxbio.sprint.data import ASSUMED_REACTION

        how = (
            "not fitted with --fit-until"
            if fit_until is not None
            else "the start offset RT fitted with its prior N(0, 0.05 s)"
        )
        print(f"reaction time unknown ({ASSUMED_REACTION:g} s assumed; {how}) for {', '.join(unknown_rt)}")
    long = [r.name for r in races if r.distances[-1] > 100.0 + 1e-9]
    if long:
        print(f"longer than 100 m: {', '.join(long)}; the model runs on a straight (the bend is ignored)")


def _print_forecast(races, fc, fit_until):
    """The predicted splits after ``fit_until`` with their predictive sd and 68 %/95 % intervals."""
    print(
        f"predicted splits after {fit_until:g} m: measured, model ± predictive sd (parameters and split noise), "
        "68 % and 95 % intervals (Student-t: population and noise learned from few races)"
    )
    width = max(18, max(len(r.name) for r in races) + 1)
    for i, r in enumerate(races):
        for j in np.flatnonzero(~r.until(fit_until)):
            lo68, hi68, lo95, hi95 = (
                fc.lower[0.68][i, j],
                fc.upper[0.68][i, j],
                fc.lower[0.95][i, j],
                fc.upper[0.95][i, j],
            )
            mark = "" if lo95 <= r.times[j] <= hi95 else "  outside 95 %"
            print(
                f"  {r.name.ljust(width)}{r.distances[j]:5.0f} m  {r.times[j]:6.2f}   {fc.mean[i, j]:6.3f} ± {fc.sd[i, j]:.3f}"
                f"   [{lo68:6.3f}, {hi68:6.3f}]   [{lo95:6.3f}, {hi95:6.3f}]{mark}"
            )


def _print_stacked(races, st):
    """The final times stacked with FHK (`jaxbio.sprint.stacking`): the two forecasts, the sprinter's
    weight, the stack with its sd and 68 %/95 % intervals; and the three forecasts' mean |error|."""
    if st is None:
        return
    width = max(18, max(len(r.name) for r in races) + 1)
    print(
        "final time stacked: the sprinter and FHK averaged with the sprinter's weight w, from both forecasts' "
        "errors on the other reference races (nested leave-one-out); ± its sd, 68 % and 95 % intervals"
    )
    print(
        "  "
        + "race".ljust(width)
        + "   dist  measured   sprinter ± sd       FHK     w    stacked ± sd      68 % interval      95 % interval"
    )
    errs = []
    for i, r in enumerate(races):
        j = r.n - 1
        head = f"  {r.name.ljust(width)}{r.distances[j]:5.0f} m  {r.times[j]:6.2f}   {st.model[i]:6.3f} ± {st.model_sd[i]:.3f}"
        if not st.available[i]:
            print(f"{head}  {st.fhk[i]:7.3f}     -    n/a ({st.reason[i]})")
            continue
        mark = "" if st.lower[0.95][i] <= r.times[j] <= st.upper[0.95][i] else "  outside 95 %"
        print(
            f"{head}  {st.fhk[i]:7.3f}  {st.weight[i]:4.2f}   {st.mean[i]:6.3f} ± {st.sd[i]:.3f}"
            f"   [{st.lower[0.68][i]:6.3f}, {st.upper[0.68][i]:6.3f}]   [{st.lower[0.95][i]:6.3f}, {st.upper[0.95][i]:6.3f}]{mark}"
        )
        errs.append([st.model[i] - r.times[j], st.mean[i] - r.times[j], st.fhk[i] - r.times[j]])
    if errs:
        m = np.mean(np.abs(np.array(errs)), axis=0)
        print(
            f"mean |error| of the final time where stacked ({len(errs)} race{'s' if len(errs) > 1 else ''}): "
            f"sprinter {m[0]:.3f} s, "
            f"stacked {m[1]:.3f} s, FHK {m[2]:.3f} s"
        )


#: short names of the parameters the model choice may free (the table's "freed" column)
_SHORT = {"rt_offset": "RT", "hill_ratio": "a/F0", "tau": "tau", "recovery": "r"}


def _unless_freed(res, name: str) -> str:
    """`` (unless freed)`` where some race of ``res`` freed ``name`` (the fixed-parameter line)."""
    freed = res.selection is not None and any(name in s["freed"] for s in res.selection)
    return " (unless freed)" if freed else ""


def _selection_notes(races, res):
    """One line per race whose fit freed more than the base parameters or that still fits worse
    than a baseline: what was freed (value ± std), and why (``selection``)."""
    if res.selection is None:
        return []
    from jaxbio.sprint.model import UNITS

    labels = [r.label for r in races]  # by label, so that a table row is the only line starting with a race's name
    if len(set(labels)) < len(labels):
        labels = [r.name for r in races]
    out = [
        "freed: parameters fitted besides F0/m, v_max, E, each with a prior (RT: offset added to the file's "
        "reaction time, N(0, 0.05 s); a/F0: Hill's curvature, log-normal around 0.25"
        + (
            "; r: the reserve's resupply rate, log-normal around its resting value, sd 1 in log"
            if _unless_freed(res, "recovery")
            else ""
        )
        + "), chosen per race by Laplace evidence and never fitting worse than a baseline"
    ]
    for i, _r in enumerate(races):
        sel = res.selection[i]
        if not sel["freed"] and sel["beats_baselines"] is not False:
            continue
        vals = ", ".join(
            f"{_SHORT.get(n, n)} = {res.values[i, res.names.index(n)]:+.3f} ± "
            f"{res.std[i, res.names.index(n)]:.3f}" + ("" if UNITS[n] == "-" else f" {UNITS[n]}")
            for n in sel["freed"]
        )
        ev = next(c["log_evidence"] for c in sel["candidates"] if c["freed"] == sel["freed"])
        base = sel["candidates"][0]["rmse_s"]
        out.append(
            f"  {labels[i]}: {vals or 'nothing freed'} ({sel['reason']}; log evidence {ev:+.1f} over the base "
            f"model, RMSE {base:.4f} -> {res.rmse[i]:.4f} s)"
        )
    return out if len(out) > 1 else []


def _record(i, race, res, fhk, tib, fit_until, problems=None, fc=None, pops=None):
    from jaxbio.sprint.model import DEFAULTS, FREE, OFFSETS, UNITS

    p = res.profile_of(i)
    n = race.n
    freed = res.freed(i)
    fitted = race.until(fit_until) if fit_until is not None else np.ones(n, bool)
    rec = {
        "race": race.name,
        "label": race.label,
        "source": race.path,
        "reaction_time_s": race.reaction_time if race.reaction_time_known else None,  # null: not one number
        **({} if race.reaction_time_known else {"reaction_time_assumed_s": race.reaction_time}),
        "wind_mps": race.wind if race.wind_known else None,  # null: the file gives no wind
        **({} if race.wind_known else {"wind_assumed_mps": race.wind}),  # what the fit assumed then
        "fit_until_m": fit_until,
        "parameters": {
            name: {"value": _number(res.values[i, j]), "std": _number(res.std[i, j]), "unit": UNITS[name]}
            for j, name in enumerate(res.names)
            if name in FREE
        },
        "fixed_parameters": {
            k: {"value": float(v), "unit": UNITS[k]} for k, v in {**DEFAULTS, **OFFSETS}.items() if k not in freed
        },
        "rmse_s": _number(res.rmse[i]),
        "converged": bool(res.converged[i]) and not problems,
        "top_speed_mps": _number(p.top_speed),
        "top_speed_at_m": _number(p.top_speed_at),
        "speed_lost_mps": _number(p.speed_lost),
        "finish_fitness": _number(p.fitness[-1]),
        "splits": [
            {
                "distance_m": float(race.distances[j]),
                "measured_s": float(race.times[j]),
                "predicted_s": _number(res.predicted[i, j]),
                "fitted": bool(fitted[j]),
                **(_interval(fc, i, j) if fc is not None else {}),
            }
            for j in range(n)
        ],
        "baselines": {},
    }
    if fc is not None and fc.stacked is not None:
        rec["stacked_final_time"] = _stacked_record(fc.stacked, i)
    if pops is not None:
        pop = pops[i]
        rec["prior"] = {
            "kind": "hierarchical",
            "learned_from": list(pop.race_names),
            "split_noise_s": _number(pop.sigma),
            "population": {
                name: {"log_mean": _number(pop.mean[j]), "log_sd": _number(pop.sd[j])}
                for j, name in enumerate(pop.names)
            },
            "shrinkage": {name: _number(fc.shrinkage[i, j]) for j, name in enumerate(pop.names)},
        }
    if problems:
        rec["problems"] = dict(problems)
    if res.selection is not None:  # what the model choice freed (values of the extras) and why (selection.select)
        rec["selection"] = {
            **res.selection[i],
            "parameters": {
                name: {"value": _number(res.values[i, j]), "std": _number(res.std[i, j]), "unit": UNITS[name]}
                for j, name in enumerate(res.names)
                if name in freed and name not in FREE
            },
        }
    for b in (fhk, tib):
        rec["baselines"][b.kind] = {
            "parameters": {
                name: {"value": _number(b.values[i, j]), "unit": b.units[j]} for j, name in enumerate(b.names)
            },
            "rmse_s": _number(b.rmse[i]),
            "converged": bool(b.converged[i]),
            "predicted_s": [_number(b.predicted[i, j]) for j in range(n)],
        }
    return rec


def _interval(fc, i, j):
    """A split's predictive sd and 68 %/95 % intervals for the JSON."""
    return {
        "predicted_sd_s": _number(fc.sd[i, j]),
        "predictive_dof": _number(fc.dof[i, j]),
        "interval_68_s": [_number(fc.lower[0.68][i, j]), _number(fc.upper[0.68][i, j])],
        "interval_95_s": [_number(fc.lower[0.95][i, j]), _number(fc.upper[0.95][i, j])],
    }


def _stacked_record(st, i):
    """A race's stacked final time for the JSON (`jaxbio.sprint.stacking.StackedForecast`)."""
    if not st.available[i]:
        return {"available": False, "reason": st.reason[i]}
    return {
        "available": True,
        "predicted_s": _number(st.mean[i]),
        "sd_s": _number(st.sd[i]),
        "dof": _number(st.dof[i]),
        "interval_68_s": [_number(st.lower[0.68][i]), _number(st.upper[0.68][i])],
        "interval_95_s": [_number(st.lower[0.95][i]), _number(st.upper[0.95][i])],
        "weight_model": _number(st.weight[i]),
        "weight_fhk": _number(1.0 - st.weight[i]),
        "model_s": _number(st.model[i]),
        "model_sd_s": _number(st.model_sd[i]),
        "fhk_s": _number(st.fhk[i]),
        "learned_from": list(st.learned_from[i]),
        "nested_from": st.nested_from[i],
    }


def _plot(f, fmt, races, res, fhk, tib, fit_until, fv_pairs=None, fc=None):
    """Draw the figure of `jaxbio.sprint.plots` (speed as split means with Laplace bands, split-time
    residuals of the model and both baselines and the stacked final time, fitness, force–velocity
    profiles) into the binary file ``f`` as ``fmt`` (png, pdf, …)."""
    from jaxbio.sprint.plots import write_figure

    stacked = fc.stacked if fc is not None else None
    write_figure(f, fmt, races, res, fhk, tib, fit_until, fv_pairs=fv_pairs, stacked=stacked)
