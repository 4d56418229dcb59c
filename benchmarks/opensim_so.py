"""OpenSim's arm26 static optimisation on jaxbio: every frame in one ``jit(vmap)`` against a
frame-by-frame loop of the same function and against OpenSim 4.6's own AnalyzeTool, timed in the
same run.

    python benchmarks/opensim_so.py                 # 61 frames
    python benchmarks/opensim_so.py --tile 10 --json out.json   # and 610 (the trial tiled 10×)

arm26 (tests/io/data/arm26_id: 2 coordinates, 6 Thelen2003 muscles over 4 wrap surfaces) prepared
as OpenSim's AnalyzeTool prepares it (`jaxbio.tools.prepare_static_optimization`: 6 Hz filter,
0.25–0.75 s, 61 frames). Float64, CPU. Rows:

- ``jaxbio jit(vmap)``: ``jax.jit(jax.vmap(jb.tools.solve_static_optimization, (None, 0)))`` on every
  frame at once (geometry with wrapping, F̂, inverse dynamics, the interior point and its polish),
  the reference of the ratios;
- ``jaxbio jit, Python loop``: ``jax.jit(jb.tools.solve_static_optimization)`` frame by frame, per frame;
- ``∂Σa/∂l⁰``: ``jax.jit(jax.grad(...))`` of the sum of all activations with respect to the six
  optimal fibre lengths (implicit differentiation through every frame's optimum);
- ``OpenSim AnalyzeTool``: ``AnalyzeTool(setup).run()`` on the 61 frames (reads, filters,
  splines, IPOPT per frame, writes), on a copy of the model with min_control and
  minimum_activation 0.01 (OpenSim 4.6 refuses the file's 0 and 1e-5), and
  ``jb.tools.static_optimization_tool`` on the same file (cold: compilation included; warm).

Times are best of 5 (at least 0.05 s each) after a warm-up; ``ratio`` is the row's time over the
reference's. Compare the ratios of one run; absolute times on a shared machine mean little.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jaxbio as jb  # noqa: E402
from _machine import REPEATS, best_time, finish, load_average, machine, opensim_or_none  # noqa: E402  (benchmarks/_machine.py)
from _machine import row as common_row  # noqa: E402

DATA = REPO / "tests" / "io" / "data" / "arm26_id"


def row(name, frames, seconds, reference=None, compile_s=None):
    return {
        "operation": name,
        "frames": frames,
        "seconds": seconds,
        "us_per_frame": 1e6 * seconds / frames,
        "ratio": None if reference is None else seconds / reference,
        "compile_s": compile_s,
    }


def print_rows(rows):
    print(f"  {'operation':52s} {'frames':>7s} {'time s':>9s} {'µs/frame':>9s} {'ratio':>8s} {'compile s':>9s}")
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3g}"
        comp = "" if r["compile_s"] is None else f"{r['compile_s']:.3g}"
        print(
            f"  {r['operation']:52s} {r['frames']:7d} {r['seconds']:9.4g} {r['us_per_frame']:9.4g} {ratio:>8s} "
            f"{comp:>9s}"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tile", type=int, default=1, help="also time the 61 frames repeated this many times")
    parser.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = parser.parse_args(argv)
    osim, versions = opensim_or_none()
    print("jaxbio OpenSim static optimisation benchmark —", machine(**versions), "float64")
    print("command: python benchmarks/opensim_so.py " + " ".join(sys.argv[1:] if argv is None else argv))
    print(f"load at start: {load_average()['uptime']}")
    out = {"machine": machine(**versions), "load_start": load_average(), "repeats": REPEATS}

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        text = (DATA / "arm26.osim").read_text()
        text = re.sub(
            r"<minimum_activation>[^<]*</minimum_activation>", "<minimum_activation>0.01</minimum_activation>", text
        )
        text = re.sub(r"<min_control>[^<]*</min_control>", "<min_control>0.01</min_control>", text)
        (work / "arm26.osim").write_text(text)
        for f in ("arm26_InverseKinematics.mot", "arm26_Setup_StaticOptimization.xml"):
            shutil.copy(DATA / f, work / f)
        model, inputs = jb.tools.prepare_static_optimization(
            work / "arm26.osim",
            work / "arm26_InverseKinematics.mot",
            lowpass_hz=6.0,
            start=0.25,
            end=0.75,
            dtype=jnp.float64,
        )
        batch = jax.jit(jax.vmap(jb.tools.solve_static_optimization, (None, 0)))
        one = jax.jit(jb.tools.solve_static_optimization)
        rows = []
        for k in sorted({1, args.tile}):
            trial = inputs if k == 1 else jax.tree_util.tree_map(lambda x: jnp.concatenate([x] * k), inputs)
            T = trial.n_frames
            t0 = time.perf_counter()
            jax.block_until_ready(batch(model, trial))
            first = time.perf_counter() - t0
            t_batch = best_time(lambda: jax.block_until_ready(batch(model, trial).activations))
            rows.append(row("jaxbio jit(vmap)", T, t_batch, t_batch, first - t_batch))
            if k == 1:
                frames = [inputs.frame(i) for i in range(T)]
                t0 = time.perf_counter()
                jax.block_until_ready(one(model, frames[0]))
                first = time.perf_counter() - t0
                t_loop = best_time(lambda: [jax.block_until_ready(one(model, f).activations) for f in frames])
                rows.append(row("jaxbio jit, Python loop", T, t_loop, t_batch, first))

                def total(lopt):
                    m = eqx.tree_at(lambda m: m.muscles.thelen.optimal_fiber_length, model, lopt)
                    return jnp.sum(jax.vmap(jb.tools.solve_static_optimization, (None, 0))(m, trial).activations)

                grad = jax.jit(jax.grad(total))
                lopt = model.muscles.thelen.optimal_fiber_length
                t0 = time.perf_counter()
                jax.block_until_ready(grad(lopt))
                first = time.perf_counter() - t0
                t_grad = best_time(lambda: jax.block_until_ready(grad(lopt)))
                rows.append(row("∂Σa/∂l⁰ (reverse mode, all frames)", T, t_grad, t_batch, first - t_grad))
                t0 = time.perf_counter()
                jb.tools.static_optimization_tool(
                    work / "arm26.osim",
                    work / "arm26_InverseKinematics.mot",
                    lowpass_hz=6.0,
                    start=0.25,
                    end=0.75,
                    dtype=jnp.float64,
                )
                cold = time.perf_counter() - t0
                t0 = time.perf_counter()
                tables = jb.tools.static_optimization_tool(
                    work / "arm26.osim",
                    work / "arm26_InverseKinematics.mot",
                    lowpass_hz=6.0,
                    start=0.25,
                    end=0.75,
                    dtype=jnp.float64,
                )
                warm = time.perf_counter() - t0
                tool_rows = []
                if osim is not None:
                    t_os = best_time(
                        lambda: osim.AnalyzeTool(str(work / "arm26_Setup_StaticOptimization.xml")).run(),
                        repeats=3,
                        min_time=0.0,
                    )
                    live = jb.io.read_storage(work / "Results" / "arm26_StaticOptimization_activation.sto")
                    diff = float(np.abs(live.select(tables.activations.labels).data - tables.activations.data).max())
                    tool_rows.append(row("OpenSim AnalyzeTool (StaticOptimization)", T, t_os, t_os))
                    out["max_abs_activation_diff_opensim"] = diff
                else:
                    t_os = None
                tool_rows.append(row("jb.tools.static_optimization_tool, cold", T, cold, t_os))
                tool_rows.append(row("jb.tools.static_optimization_tool, warm", T, warm, t_os))
            print(f"\narm26, {T} frames" + ("" if k == 1 else f" (the 61 frames × {k})"))
            print_rows(rows)
            out[f"frames_{T}"] = rows
            rows = []
    print(
        "\nthe tools from the files"
        + ("" if osim is None else f" (max |a_jaxbio − a_OpenSim| {out['max_abs_activation_diff_opensim']:.2g})")
    )
    print_rows(tool_rows)
    out["tools"] = tool_rows
    out["rows"] = [
        common_row(
            "static optimisation of a trial (jit(vmap))",
            "arm26.osim",
            r["frames"],
            r["seconds"] / r["frames"],
            unit="frame",
            compile_s=r["compile_s"],
        )
        for key in sorted(k for k in out if k.startswith("frames_"))
        for r in out[key]
        if r["operation"] == "jaxbio jit(vmap)"
    ]
    by = {r["operation"]: r for r in tool_rows}
    warm, peer = by["jb.tools.static_optimization_tool, warm"], by.get("OpenSim AnalyzeTool (StaticOptimization)")
    out["rows"].append(
        common_row(
            "static optimisation tool from the files, warm",
            "arm26.osim",
            warm["frames"],
            warm["seconds"] / warm["frames"],
            unit="frame",
            peer=None if peer is None else "OpenSim AnalyzeTool (StaticOptimization)",
            peer_seconds=None if peer is None else peer["seconds"] / peer["frames"],
        )
    )
    finish(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
