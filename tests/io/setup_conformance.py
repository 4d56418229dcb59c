"""OpenSim's own tool setups run unedited by ``jaxbio run-tool`` and by live OpenSim, compared.

For every ``InverseDynamicsTool`` setup and every ``AnalyzeTool`` setup with an active
``InverseDynamics``, ``StaticOptimization`` or ``JointReaction`` analysis under the given folders: the folder that
holds the setup and its inputs is copied twice to a temporary directory, OpenSim runs the setup in
one copy (``opensim.InverseDynamicsTool(setup).run()`` / ``opensim.AnalyzeTool(setup).run()``, in a
subprocess) and ``jaxbio run-tool`` in the other (a subprocess too), and the result files OpenSim
wrote are compared with jaxbio's: names, columns, rows and times, and the largest differences
(inverse dynamics and joint reactions: relative to the largest |value| of the file; static
optimisation: activations and forces, absolute).

    python -m tests.io.setup_conformance /work/om/Pipelines opensim-core/Applications/Analyze/tests \
        [--markdown docs/_conformance.md]

``tests/io/test_setup_conformance.py`` runs it as a slow test over ``$JAXBIO_OPENSIM_SETUPS``
(``os.pathsep``-separated folders; default ``/work/om/Pipelines``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

_OPENSIM = """
import sys, opensim
opensim.Logger.removeFileSink()
tool = {"InverseDynamicsTool": opensim.InverseDynamicsTool, "AnalyzeTool": opensim.AnalyzeTool}[sys.argv[1]]
ok = tool(sys.argv[2]).run()
sys.exit(0 if ok else 3)
"""


def _tool(path: Path):
    """``(tool element, analyses)`` of a setup file, or None when it is not an ID or SO setup."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return None
    tool = root if root.tag != "OpenSimDocument" else next(iter(root), None)
    if tool is None or tool.tag not in ("InverseDynamicsTool", "AnalyzeTool"):
        return None
    if tool.tag == "InverseDynamicsTool":
        return tool, ["InverseDynamicsTool"]
    on = [
        a.tag
        for a in tool.iter()
        if a.tag in ("InverseDynamics", "StaticOptimization", "JointReaction")
        and (_text(a, "on") or "true").lower() == "true"
    ]
    return (tool, on) if on else None


def _text(el, tag):
    child = el.find(tag)
    return None if child is None or child.text is None or not child.text.strip() else child.text.strip()


def find_setups(folders) -> list[Path]:
    """Every ID / SO setup (see the module docstring) under ``folders``, sorted."""
    out = []
    for folder in folders:
        for p in sorted(Path(folder).rglob("*.xml")):
            if _tool(p) is not None:
                out.append(p)
    return out


def _inputs(setup: Path, tool) -> list[Path]:
    here = setup.parent
    out = []
    for tag in ("model_file", "coordinates_file", "external_loads_file", "states_file", "speeds_file"):
        t = _text(tool, tag)
        if t and t != "Unassigned":
            out.append(here / t)
    for t in (_text(tool, "force_set_files") or "").split():
        out.append(here / t)
    for a in tool.findall("AnalysisSet/objects/JointReaction"):
        t = _text(a, "forces_file")
        if t and t != "Unassigned":
            out.append(here / t.replace("\\", "/"))
    return out


def _root(setup: Path, inputs) -> Path:
    paths = [setup.parent.resolve()] + [p.resolve().parent for p in inputs]
    return Path(os.path.commonpath(paths))


def _outputs(tool, analyses) -> list[str]:
    name = tool.get("name", "")
    if tool.tag == "InverseDynamicsTool":
        out = _text(tool, "output_gen_force_file") or f"{name}_InverseDynamics"
        out = Path(out).name
        return [out if out.endswith(".sto") else out + ".sto"]
    files = []
    if "InverseDynamics" in analyses:
        files.append(f"{name}_InverseDynamics.sto")
    if "StaticOptimization" in analyses:
        files += [f"{name}_StaticOptimization_activation.sto", f"{name}_StaticOptimization_force.sto"]
    for a in tool.findall("AnalysisSet/objects/JointReaction"):
        if (_text(a, "on") or "true").lower() == "true":
            files.append(f"{name}_{a.get('name', 'JointReaction')}_ReactionLoads.sto")
    return files


@dataclasses.dataclass
class Row:
    """One setup's outcome: ``status`` ``"agrees"``, ``"differs"``, ``"no solution"`` (OpenSim's
    optimizer fails at every frame, jaxbio refuses), ``"jaxbio fails"``,
    ``"OpenSim fails"``, ``"inputs missing"``; ``notes``; per output file, its comparison."""

    setup: str
    kind: str
    status: str
    notes: str = ""
    files: dict = dataclasses.field(default_factory=dict)
    jaxbio_warnings: tuple = ()


def _compare_file(ours: Path, theirs: Path, kind: str) -> dict:
    sys.path.insert(0, str(REPO))
    from jaxbio.io import read_storage

    a, b = read_storage(ours), read_storage(theirs)
    out = {
        "rows": (a.time.size, b.time.size),
        "missing_columns": [c for c in b.labels if c not in a.labels],
        "extra_columns": [c for c in a.labels if c not in b.labels],
    }
    n = min(a.time.size, b.time.size)
    common = [c for c in b.labels if c in a.labels]
    if not n or not common:
        return out
    # rows matched by time (the nearest of jaxbio's rows to each of OpenSim's); OpenSim's rows that
    # jaxbio left out (no solution: OpenSim's optimizer failed there too, see `compare`) are not compared
    idx = np.asarray([int(np.argmin(np.abs(a.time - t))) for t in b.time])
    ok = np.abs(a.time[idx] - b.time) <= 1e-9
    out["left_out_times"] = sorted({round(float(t), 9) for t in b.time[~ok]})
    if not ok.any():
        return out
    out["time_diff"] = float(np.max(np.abs(a.time[idx][ok] - b.time[ok])))
    d = a.select(common).data[idx][ok] - b.select(common).data[ok]
    scale = float(np.max(np.abs(b.select(common).data[ok]))) or 1.0
    worst = int(np.argmax(np.max(np.abs(d), axis=0)))
    out["max_abs"] = float(np.max(np.abs(d)))
    out["rms"] = float(np.sqrt(np.mean(d**2)))
    out["relative"] = out["max_abs"] / scale
    out["worst_column"] = common[worst]
    return out


def _agrees(kind: str, files: dict) -> bool:
    for name, f in files.items():
        if "max_abs" not in f or f["missing_columns"] or f["extra_columns"]:
            return False
        if f["rows"][0] != f["rows"][1] and not f.get("left_out_times"):  # frames without a solution
            return False
        if f["time_diff"] > 1e-9:
            return False
        if name.endswith("_activation.sto"):
            ok = f["max_abs"] <= 0.01
        elif name.endswith("_force.sto"):
            ok = f["max_abs"] <= 3.0 or f["relative"] <= 1e-3  # OpenSim's own tests: 3-5 N
        else:
            ok = f["relative"] <= 1e-6
        if not ok:
            return False
    return True


def compare(setup, *, timeout: float = 900, keep: Path | None = None) -> Row:
    """Run ``setup`` with OpenSim and with ``jaxbio run-tool`` (module docstring) and compare."""
    setup = Path(setup)
    tool, analyses = _tool(setup)
    kind = "SO" if "StaticOptimization" in analyses else ("JR" if "JointReaction" in analyses else "ID")
    inputs = _inputs(setup, tool)
    missing = [str(p) for p in inputs if not p.exists()]
    if missing:
        return Row(str(setup), kind, "inputs missing", f"{', '.join(missing)} (an earlier pipeline step writes it)")
    root = _root(setup, inputs)
    rel = setup.resolve().relative_to(root)
    tmp = Path(tempfile.mkdtemp(prefix="jaxbio-conformance-", dir=keep))
    try:
        runs = {}
        for who in ("opensim", "jaxbio"):
            shutil.copytree(root, tmp / who, symlinks=True)
            s = tmp / who / rel
            results = s.parent / (_text(tool, "results_directory") or ".")
            for f in _outputs(tool, analyses):  # stale reference results shipped with the setup
                (results / f).unlink(missing_ok=True)
            if who == "opensim":
                cmd = [sys.executable, "-c", _OPENSIM, tool.tag, s.name]
            else:
                cmd = [sys.executable, "-c", "import sys; from jaxbio.cli import main; sys.exit(main())"]
                cmd += ["run-tool", s.name]
            env = dict(os.environ, PYTHONPATH=str(REPO))
            try:
                p = subprocess.run(cmd, cwd=s.parent, capture_output=True, text=True, timeout=timeout, env=env)
                runs[who] = (p.returncode, (p.stdout + p.stderr).strip(), results)
            except subprocess.TimeoutExpired:
                runs[who] = (-1, f"timed out after {timeout:g} s", results)
        rc, log, results = runs["opensim"]
        if rc != 0:
            lines = [ln for ln in log.splitlines() if "rror" in ln or "xception" in ln] or log.splitlines()[-3:]
            return Row(str(setup), kind, "OpenSim fails", " / ".join(lines[-3:])[:300])
        jrc, jlog, jresults = runs["jaxbio"]
        warns = tuple(ln for ln in jlog.splitlines() if ln.startswith("warning:"))
        failed = sorted(
            {
                round(float(t), 9)
                for t in re.findall(r"could not find a solution at time = ([-+0-9.eE]+?)\.?$", log, re.M)
            }
        )
        if jrc != 0:
            last = [ln for ln in jlog.splitlines() if ln.strip()][-1:] or ["(no output)"]
            if "has no solution" in last[0] and failed:
                note = (
                    f"OpenSim's optimizer fails at {len(failed)} frame(s) and writes its last iterate; jaxbio refuses"
                )
                return Row(str(setup), kind, "no solution", f"{note}: {last[0][:300]}", jaxbio_warnings=warns)
            return Row(str(setup), kind, "jaxbio fails", last[0][:400], jaxbio_warnings=warns)
        files = {}
        for f in _outputs(tool, analyses):
            if not (results / f).exists():
                continue
            files[f] = (
                _compare_file(jresults / f, results / f, kind)
                if (jresults / f).exists()
                else {"missing": True, "rows": (0, 0), "missing_columns": [], "extra_columns": []}
            )
        left = sorted({t for f in files.values() for t in f.get("left_out_times", ())})
        notes = ""
        if failed or left:
            notes = f"OpenSim's optimizer fails at {len(failed)} frame(s); jaxbio leaves out {len(left)}"
            if failed != left:
                notes += " (not the same frames)"
        if failed != left:
            status = "differs"
        else:
            status = "agrees" if files and _agrees(kind, files) else "differs"
        return Row(str(setup), kind, status, notes, files=files, jaxbio_warnings=warns)
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _summary(row: Row) -> str:
    parts = []
    for name, f in row.files.items():
        short = name.rsplit("_", 1)[-1].removesuffix(".sto") if row.kind != "ID" else "ID"
        if f.get("missing"):
            parts.append(f"{short}: not written")
            continue
        bits = []
        if f["rows"][0] != f["rows"][1]:
            bits.append(f"rows {f['rows'][0]} vs {f['rows'][1]}")
        if f["missing_columns"]:
            bits.append(f"lacks {f['missing_columns']}")
        if f["extra_columns"]:
            bits.append(f"extra {f['extra_columns']}")
        if "max_abs" in f:
            if name.endswith("_ReactionLoads.sto"):
                bits.append(f"max {f['relative']:.1e} rel ({f['max_abs']:.2g}, {f['worst_column']})")
            elif row.kind == "ID":
                bits.append(f"max {f['relative']:.1e} rel ({f['max_abs']:.2g} N·m, {f['worst_column']})")
            else:
                bits.append(f"max {f['max_abs']:.3g}, RMS {f['rms']:.3g} ({f['worst_column']})")
        parts.append(f"{short}: " + ", ".join(bits))
    return "; ".join(p for p in (row.notes, *parts) if p)


def _shown(path, base=None, aliases=()) -> str:
    """``path`` relative to ``base``, its leading folders renamed by ``aliases`` (``(folder, label)``)."""
    for folder, label in aliases:
        folder = str(Path(folder).resolve())
        if str(Path(path).resolve()).startswith(folder + os.sep):
            return label + "/" + os.path.relpath(Path(path).resolve(), folder)
    return os.path.relpath(path, base) if base else str(path)


def markdown(rows, base=None, aliases=()) -> str:
    lines = ["| setup | tool | status | largest differences from OpenSim 4.6 |", "|---|---|---|---|"]
    for r in rows:
        name = _shown(r.setup, base, aliases)
        text = _summary(r) if r.files else r.notes
        for folder, label in aliases:
            text = text.replace(str(Path(folder).resolve()) + "/", label + "/")
        lines.append(f"| `{name}` | {r.kind} | {r.status} | {text.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def page(rows, folders, base=None, aliases=()) -> str:
    """A docs page: a heading, how it was generated (command, OpenSim's version, counts) and the
    `markdown` table."""
    try:
        import opensim

        version = opensim.__version__
    except ImportError:  # pragma: no cover - the comparison needs it
        version = "?"
    counts = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    where = " ".join(_shown(f + "/.", base, aliases).removesuffix("/.") for f in folders)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda x: -x[1]))
    return (
        "# Conformance with OpenSim's own setups (generated)\n\n"
        "Every InverseDynamicsTool setup and every AnalyzeTool setup with an InverseDynamics, "
        "StaticOptimization or JointReaction analysis under the folders below, run unedited by "
        f"`jaxbio run-tool` and by OpenSim {version} in copies of their folders, the files compared "
        "(`tests/io/setup_conformance.py`; the criteria are in its docstring). Generated by "
        f"`python -m tests.io.setup_conformance {where} --markdown PAGE`: {len(rows)} setups, {summary}. "
        "See [Supported OpenSim features](opensim-support.md) for what each status means and why.\n\n"
        + markdown(rows, base, aliases)
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--base", help="setup paths relative to this folder in the table")
    ap.add_argument(
        "--alias", action="append", default=[], help="FOLDER=LABEL: paths under FOLDER shown as LABEL/… in the table"
    )
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args(argv)
    rows = []
    for s in find_setups(args.folders):
        r = compare(s, timeout=args.timeout)
        rows.append(r)
        print(f"{r.status:15s} {r.kind} {s}: {_summary(r) if r.files else r.notes}", flush=True)
        for w in r.jaxbio_warnings:
            print(f"    {w[:300]}", flush=True)
    if args.markdown:
        aliases = [tuple(a.split("=", 1)) for a in args.alias]
        Path(args.markdown).write_text(page(rows, args.folders, args.base, aliases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
