"""Reading OpenSim models (issue #49 item 1: "no XLA compilation while parsing; gait2392's
``.osim`` in under 0.3 s"): ``jb.load_model(path)`` against OpenSim 4.6's ``Model(path)`` plus
``initSystem()`` (what OpenSim needs before it can compute anything), in the same process, after
both libraries are imported and one other model has been read (imports and first-use costs
excluded: the cold command line is `benchmarks/cli.py`'s table). jaxbio's in-process parse cache
is cleared before each read; the XLA compilations during jaxbio's read are counted (they must be 0).

    python benchmarks/loading.py                           # the models below, from /work/om or $JAXBIO_OSIM_LIBRARY
    python benchmarks/loading.py --library PATH --json out.json

Best of ``--repeats`` (default 5) wall seconds per model; ratio = OpenSim's time / jaxbio's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import load_average, machine, opensim_or_none  # noqa: E402

MODELS = (
    "Arm26/arm26.osim",
    "Gait10dof18musc/gait10dof18musc.osim",
    "Gait2354_Simbody/gait2354_simbody.osim",
    "Gait2392_Simbody/gait2392_thelen2003muscle.osim",
    "Gait2392_Simbody/gait2392_millard2012muscle.osim",
    "Rajagopal/RajagopalLaiUhlrich2023.osim",
)


class _Compilations(logging.Handler):
    def __init__(self):
        super().__init__()
        self.count = 0

    def emit(self, record):
        if "Finished XLA compilation" in record.getMessage() or "Compiling" in record.getMessage():
            self.count += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", default=os.environ.get("JAXBIO_OSIM_LIBRARY", "/work/om"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()

    import jax

    import jaxbio as jb
    from jaxbio.io import osim as reader

    opensim, versions = opensim_or_none()
    models = [Path(args.library) / "Models" / m for m in MODELS]
    models = [m for m in models if m.exists()]
    print(machine(**versions))
    print(load_average())
    jb.load_model(models[0])  # first use of the readers' modules
    handler = _Compilations()
    jax.config.update("jax_log_compiles", True)
    logging.getLogger("jax").addHandler(handler)
    rows = []
    print(f"{'model':<36} {'jaxbio s':>9} {'OpenSim s':>10} {'ratio':>6} {'compiles':>9}")
    for path in models:
        ours, compiles = float("inf"), 0
        for _ in range(args.repeats):
            reader._PARSED.clear()
            before = handler.count
            t = time.perf_counter()
            jb.load_model(path)
            ours = min(ours, time.perf_counter() - t)
            compiles = max(compiles, handler.count - before)
        theirs = float("nan")
        if opensim is not None:
            theirs = float("inf")
            for _ in range(args.repeats):
                t = time.perf_counter()
                opensim.Model(str(path)).initSystem()
                theirs = min(theirs, time.perf_counter() - t)
        rows.append(dict(model=path.name, jaxbio_s=ours, opensim_s=theirs, compilations=compiles))
        print(f"{path.name:<36} {ours:9.3f} {theirs:10.3f} {theirs / ours:6.2f} {compiles:9d}")
    print(load_average())
    if args.json:
        Path(args.json).write_text(json.dumps(dict(machine=machine(**versions), rows=rows), indent=1))


if __name__ == "__main__":
    main()
