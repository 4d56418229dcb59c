"""Rewrite the generated tables of docs/benchmarks.md from ``python -m benchmarks --json`` files.

    python docs/gen_benchmarks.py benchmarks/results/cpu_quick_2026-12-07.json [MORE.json ...]
    python docs/gen_benchmarks.py --check FILE.json ...   # exit 1 if the page differs from the JSON

Each JSON (written by ``python -m benchmarks --json FILE``, or by one script of ``benchmarks/`` with
``--json``: both put their rows in ``out["rows"]`` and the machine line in ``out["machine"]``)
becomes one subsection: the file, the command and machine line, the speed table printed by
``benchmarks/run.py``'s own `format_table` (Markdown), the float32 precision rows by its
`format_precision`, and the suites that were skipped or failed. Everything between
``<!-- generated: begin -->`` and ``<!-- generated: end -->`` of the page is replaced; the
narrative around it is left alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "benchmarks.md"
BEGIN = "<!-- generated: begin -->"
END = "<!-- generated: end -->"

sys.path.insert(0, str(REPO))
from benchmarks.run import format_precision, format_table  # noqa: E402


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def section(path: Path) -> str:
    """The Markdown of one JSON file's results."""
    out = json.loads(path.read_text(encoding="utf-8"))
    lines = [f"### `{_relative(path)}`", ""]
    command = out.get("command")
    lines.append(f"`{command}`" if command else "Written by one script of `benchmarks/` with `--json`.")
    lines += ["", f"Machine: {out.get('machine', 'not recorded')}."]
    load_end = out.get("load_end")
    if isinstance(load_end, dict) and load_end.get("uptime"):
        lines[-1] += f" Load at the end: {load_end['uptime'].strip()}."
    rows = out.get("rows", [])
    speed = [r for r in rows if "seconds" in r]
    precision = [r for r in rows if "rel_error" in r]
    if speed:
        lines += ["", format_table(speed, markdown=True)]
    if precision:
        lines += ["", "float32 against float64, same inputs (`benchmarks/precision.py`):", ""]
        lines.append(format_precision(precision, markdown=True))
    notes = [s for s in out.get("suites", []) if s.get("status") != "ok"]
    if notes:
        lines += ["", "Suites without rows in this run:", ""]
        for s in notes:
            why = s.get("why") or "; ".join(s.get("tail", [])[-1:]) or ""
            lines.append(f"- `{s['name']}`: {s['status']}" + (f" ({why})" if why and why not in s["status"] else ""))
    return "\n".join(lines)


def generated(paths: list[Path]) -> str:
    """The whole generated region, markers included."""
    head = (
        "<!-- Do not edit by hand: regenerate with "
        f"python docs/gen_benchmarks.py {' '.join(_relative(p) for p in paths)} -->"
    )
    return "\n\n".join([BEGIN, head, *(section(p) for p in paths), END])


def rewrite(text: str, paths: list[Path], page: Path = PAGE) -> str:
    """``text`` with its generated region replaced (``ValueError`` without exactly one region)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{page}: needs exactly one {BEGIN} … {END} region")
    before, rest = text.split(BEGIN)
    after = rest.split(END, 1)[1]
    return before + generated(paths) + after


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", type=Path, help="JSON files of python -m benchmarks --json")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page to rewrite (default: docs/benchmarks.md)")
    parser.add_argument("--check", action="store_true", help="only check that the page is up to date")
    args = parser.parse_args(argv)
    text = args.page.read_text(encoding="utf-8")
    new = rewrite(text, args.json, args.page)
    if args.check:
        if new != text:
            print(f"{args.page} is not what {', '.join(map(str, args.json))} give; rerun without --check")
            return 1
        return 0
    if new != text:
        args.page.write_text(new, encoding="utf-8")
        print(f"rewrote the generated region of {args.page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
