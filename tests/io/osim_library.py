"""Status of every ``.osim`` under a folder (OpenSim's model library): loaded whole, loaded with
elements that act on the dynamics left out (``Model.not_imported``), or refused (the
message). Used by the conformance sweep of test_osim_library.py, and as a script::

    PYTHONPATH=. python -m tests.io.osim_library /work/om        # a Markdown table

Loading compiles nothing (numpy while parsing), so the sweep is quick.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxbio.io import load_osim


def status(path: Path) -> tuple[str, str]:
    """``("whole", "")``, ``("partial", what acts and is not imported)`` or ``("refused",
    message without the path)``."""
    try:
        m = load_osim(path)
    except ValueError as e:
        return "refused", str(e).removeprefix(f"{path}: ")
    if m.not_imported:
        return "partial", "; ".join(m.not_imported)
    return "whole", ""


def library_files(root: Path) -> list[Path]:
    return sorted(Path(root).rglob("*.osim"))


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "/work/om")
    print("| model | status | detail |\n|---|---|---|")
    for f in library_files(root):
        kind, detail = status(f)
        print(f"| {f.relative_to(root)} | {kind} | {detail[:200]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
