"""Every benchmark of this folder in one run, one table and one JSON file.

    python -m benchmarks                      # all of them, full sizes (about an hour on 2 cores)
    python -m benchmarks --quick              # the quick sizes (about 15 minutes on 2 cores)
    python -m benchmarks --only inverse_dynamics,sprint --json results.json
    python -m benchmarks --list               # the suites, their arguments and what they need
    python benchmarks/run.py ...              # the same

Each suite is one script of this folder, run as a user would run it (a fresh Python process, default
settings, nothing pinned) with ``--json``; every script puts its rows in ``out["rows"]``, in the
form of `_machine.row`: operation, model, batch, jaxbio's seconds per item, throughput, compile
time, the peer timed in the same run and the ratio peer / jaxbio (above 1: jaxbio faster). The
table is printed once at the end under the machine line (CPU model and ISA flags, cores, load,
python/jax/jaxlib versions); ``--markdown`` prints it as a Markdown table (docs/benchmarks.md's
tables are generated from the JSON by docs/gen_benchmarks.py). A suite whose optional peer is not
installed (OpenSim) is skipped and says so; a suite that fails is reported with its last lines and
the run goes on (exit status 1 at the end).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import load_average, machine  # noqa: E402


class Suite(NamedTuple):
    name: str  # the script benchmarks/<name>.py
    full: tuple[str, ...]  # its arguments for the full run
    quick: tuple[str, ...]  # and for --quick
    needs: tuple[str, ...] = ()  # importable modules it needs beyond the test extras
    timeout_s: int = 3600


SUITES = (
    Suite("inverse_dynamics", (), ("--quick",)),
    Suite("hamiltonian", (), ("--quick",)),
    Suite("batching", (), ("--batch", "10000")),
    Suite("static_optimization", (), ("--quick",)),
    Suite("muscles", (), ("--frames", "10000")),
    Suite("reactions", (), ("--quick",)),
    Suite("planar_chain", (), ("--quick",)),
    Suite("sprint", (), ("--n", "100", "--cold-runs", "1")),
    Suite("sprint_solver", (), ("--n", "100", "--repeats", "1")),
    Suite("rl_env", (), ("--batches", "1", "1000")),
    Suite("learning", (), ("--models", "double_pendulum", "--paths", "default,grid,stored_state")),
    Suite("precision", (), ("--quick",)),
    # real runs of the adaptive gradient only: a fixed-grid gradient of >= 100 trials has stalled
    # inside XLA's CPU runtime (benchmarks/README.md, "Precision and memory")
    Suite("memory", ("--modes", "adaptive"), ("--quick", "--modes", "adaptive")),
    Suite("opensim_id", (), ("--tile", "1"), needs=("opensim",)),
    Suite("opensim_so", (), ("--tile", "1"), needs=("opensim",)),
    # MJX as the peer; 10⁶ states and 10⁵ trajectories are sized for a GPU (benchmarks/README.md)
    Suite("gpu", (), ("--quick",), needs=("mujoco.mjx",)),
)


def missing(suite: Suite) -> list[str]:
    """The modules of ``suite.needs`` that are not importable here."""
    return [m for m in suite.needs if importlib.util.find_spec(m) is None]


def run_suite(suite: Suite, quick: bool, log_dir: Path) -> dict:
    """Run one script in a fresh process; ``{"name", "status", "wall_s", "rows", "log", ...}``."""
    result = {"name": suite.name, "rows": []}
    script = HERE / f"{suite.name}.py"
    if not script.exists():
        return dict(result, status="absent")
    if missing(suite):
        return dict(result, status="skipped", why=f"needs {', '.join(missing(suite))}")
    json_path = log_dir / f"{suite.name}.json"
    log_path = log_dir / f"{suite.name}.log"
    argv = [sys.executable, str(script), *(suite.quick if quick else suite.full), "--json", str(json_path)]
    result["command"] = " ".join(["python", f"benchmarks/{suite.name}.py", *argv[2:-2]])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=HERE.parent, env=env, timeout=suite.timeout_s
            )
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    result.update(wall_s=time.perf_counter() - t0, log=str(log_path))
    if code != 0 or not json_path.exists():
        tail = log_path.read_text().splitlines()[-8:]
        why = "exit 0 but no JSON written" if code == 0 else f"exit {code}"
        return dict(result, status=f"failed ({why})", tail=tail)
    out = json.loads(json_path.read_text())
    result.update(status="ok", rows=[dict(r, suite=suite.name) for r in out.get("rows", [])])
    return result


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _rate(per_second: float | None) -> str:
    if per_second is None:
        return "—"
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_second >= scale:
            return f"{per_second / scale:.3g}{unit}"
    return f"{per_second:.3g}"


def _md(cell: str) -> str:
    """A Markdown table cell: ``|`` escaped (norms such as ``|H(t) − H(0)|`` would split the row)."""
    return cell.replace("|", "\\|")


COLUMNS = ("operation", "model", "batch", "jaxbio / item", "items/s", "compile", "peer (same run)", "ratio")


def table_rows(rows: list[dict]) -> list[tuple[str, ...]]:
    """The printed cells of each row (see `COLUMNS`)."""
    cells = []
    for r in rows:
        ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.3g}×"
        cells.append(
            (
                r["operation"],
                r["model"],
                f"{r['batch']:,}",
                f"{_time(r['seconds'])}/{r['unit']}",
                _rate(r.get("per_second")),
                _time(r.get("compile_s")),
                r.get("peer") or "—",
                ratio,
            )
        )
    return cells


def format_table(rows: list[dict], markdown: bool = False) -> str:
    """The common table: plain columns, or a Markdown table."""
    cells = table_rows(rows)
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(_md(x) for x in c) + " |" for c in cells]
        return "\n".join(lines)
    widths = [max(len(COLUMNS[k]), *(len(c[k]) for c in cells)) for k in range(len(COLUMNS))]
    fmt = lambda c: "  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(COLUMNS), "  ".join("-" * w for w in widths), *(fmt(c) for c in cells)])


PRECISION_COLUMNS = ("operation", "model", "batch", "max |float32 − float64|", "relative", "note")


def format_precision(rows: list[dict], markdown: bool = False) -> str:
    """The precision rows of ``precision.py`` (float32 against float64) as a table."""
    cells = [
        (
            r["operation"],
            r["model"],
            f"{r['batch']:,}",
            f"{r['abs_error']:.2g} {r['unit']}",
            f"{r['rel_error']:.2g}",
            r.get("note") or "",
        )
        for r in rows
    ]
    if markdown:
        return "\n".join(
            ["| " + " | ".join(_md(x) for x in PRECISION_COLUMNS) + " |", "|" + "---|" * len(PRECISION_COLUMNS)]
            + ["| " + " | ".join(_md(x) for x in c) + " |" for c in cells]
        )
    widths = [max(len(PRECISION_COLUMNS[k]), *(len(c[k]) for c in cells)) for k in range(len(PRECISION_COLUMNS))]
    fmt = lambda c: "  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(PRECISION_COLUMNS), "  ".join("-" * w for w in widths), *(fmt(c) for c in cells)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each suite's quick sizes")
    parser.add_argument("--only", default=None, help="comma-separated suite names (default: all)")
    parser.add_argument(
        "--json",
        metavar="PATH",
        default="benchmark-results.json",
        help="where to write every row, the machine and each suite's status",
    )
    parser.add_argument("--logs", metavar="DIR", default=None, help="keep each suite's output here")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    args = parser.parse_args(argv)
    names = [s.name for s in SUITES]
    if args.list:
        for s in SUITES:
            extra = f"  (needs {', '.join(s.needs)})" if s.needs else ""
            print(f"{s.name:20s} full: {' '.join(s.full) or '(defaults)':24s} quick: {' '.join(s.quick)}{extra}")
        return 0
    chosen = names if args.only is None else [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in names]
    if unknown:
        print(f"error: unknown suite(s) {', '.join(unknown)}; known: {', '.join(names)}", file=sys.stderr)
        return 2

    line = machine()
    print(line, flush=True)
    out = {
        "machine": line,
        "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
        "load_start": load_average(),
        "suites": [],
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(args.logs) if args.logs else Path(tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        for suite in (s for s in SUITES if s.name in chosen):
            print(f"{suite.name} ...", end=" ", flush=True)
            res = run_suite(suite, args.quick, log_dir)
            print(
                f"{res['status']}"
                + (f" in {res['wall_s']:.0f} s" if "wall_s" in res else "")
                + (f": {res['why']}" if "why" in res else ""),
                flush=True,
            )
            for t in res.get("tail", []):
                print(f"    {t}")
            out["suites"].append({k: v for k, v in res.items() if k != "rows"})
            out["rows"] += res["rows"]
    out["load_end"] = load_average()
    print(f"\n{line}\nload at end: {out['load_end']['uptime']}\n")
    speed = [r for r in out["rows"] if "seconds" in r]
    precision = [r for r in out["rows"] if "rel_error" in r]
    print(format_table(speed, markdown=args.markdown))
    if precision:
        print("\nfloat32 against float64, same inputs (precision.py):\n")
        print(format_precision(precision, markdown=args.markdown))
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nevery number written to {args.json}")
    return 0 if all(s["status"] in ("ok", "skipped") for s in out["suites"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
