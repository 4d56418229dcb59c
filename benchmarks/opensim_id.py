"""Whole-trial inverse dynamics of OpenSim's gait case subject01 on jaxbio, against a frame-by-frame
loop of the same function and against OpenSim 4.6 itself, timed in the same run.

    python benchmarks/opensim_id.py               # 67 frames, and 10,050 (the trial tiled 150×)
    python benchmarks/opensim_id.py --tile 30     # 67 and 2,010 frames
    python benchmarks/opensim_id.py --json out.json

subject01 (tests/io/data/subject01: 23 coordinates, spline-coupled knees, ground reactions under
both feet) prepared as OpenSim's InverseDynamicsTool prepares it (`jaxbio.tools.prepare_inverse_dynamics`:
6 Hz filter, 0.5–1.6 s, 67 frames); for the long trial the 67 frames are repeated (times too, so
that OpenSim's external forces see the same loads). Float64, CPU. Rows, per number of frames:

- ``jaxbio jit(vmap)``: ``jax.jit(jax.vmap(jb.tools.generalized_forces, (None, 0)))`` on every frame
  at once, the reference of the ratios;
- ``jaxbio jit, Python loop``: ``jax.jit(jb.tools.generalized_forces)`` called frame by frame (the
  per-frame inputs made beforehand), on at most ``--loop-frames`` frames, per frame;
- ``OpenSim InverseDynamicsSolver, Python loop``: OpenSim's own solver on the same frames, the
  model with its ExternalLoads and its muscles disabled (as the tool's ``forces_to_exclude``):
  per frame ``state.setTime``, ``setQ``, ``setU`` (vectors made beforehand), ``realizeVelocity``,
  ``solve(state, udot)``; OpenSim's ExternalForces evaluate their own splines at the state's time.
  The largest difference from jaxbio's generalised forces is printed;
- ``∂/∂masses``: ``jax.jit(jax.grad(...))`` of the sum of squared pelvis residuals with respect
  to every segment mass (reverse mode, one scalar), and ``jax.jit(jax.jacfwd(...))`` of every
  generalised force with respect to every mass (forward mode, ``(T, 23, 27)``);
- on the 67 frames, the two tools from the files: ``jb.tools.inverse_dynamics_tool`` (cold: the first
  call, compilation included; warm: again, the compiled code cached) and OpenSim's
  ``InverseDynamicsTool(setup).run()`` (reads, filters, splines, solves, writes its .sto).

Times are best of 5 (at least 0.05 s each) after a warm-up call, with ``jax.block_until_ready``;
jaxbio's tool is timed once cold and once warm, OpenSim's best of 3. ``compile`` is trace + lower
+ XLA compile of a fresh ``jax.jit`` ("cached": the same program was compiled for a row above, and
JAX reused it). ``ratio`` is the row's time over its reference's (jit(vmap) for the rows on
prepared frames, OpenSim's tool for the tool rows): above 1, slower than the reference.
Absolute times on a shared machine mean little; compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
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
from _machine import REPEATS, best_time, finish, load_average, machine, opensim_or_none, row  # noqa: E402  (benchmarks/_machine.py)

DATA = REPO / "tests" / "io" / "data" / "subject01"
MOTION, LOADS, SETUP = "subject01_walk1_ik.mot", "subject01_walk1_grf.xml", "subject01_Setup_InverseDynamics.xml"
LOOP_FRAMES = 2_000  # the Python loops run on at most this many frames (per-frame time)


def compile_seconds(fn, *args) -> float:
    """Trace + lower + compile of a fresh ``jax.jit`` function for these arguments."""
    t0 = time.perf_counter()
    fn.trace(*args).lower().compile()
    return time.perf_counter() - t0


def tiled(inputs, k: int):
    """The trial repeated ``k`` times (every leaf along its frame axis)."""
    return jax.tree_util.tree_map(lambda a: jnp.tile(a, (k,) + (1,) * (a.ndim - 1)), inputs)


def with_masses(model, masses):
    return eqx.tree_at(lambda m: m.tree.masses, model, masses)


# ---- OpenSim ----------------------------------------------------------------------------------


class OpenSimSolver:
    """OpenSim's subject01 with its ExternalLoads, muscles disabled, and the state's ``q``/``u``
    index of each coordinate (found by moving one coordinate at a time)."""

    def __init__(self, osim, work: Path, names):
        self.osim = osim
        self.model = osim.Model(str(work / "subject01.osim"))
        self.model.addModelComponent(osim.ExternalLoads(str(work / LOADS), True))
        s = self.state = self.model.initSystem()
        forces = self.model.getForceSet()
        for i in range(forces.getSize()):
            if osim.Muscle.safeDownCast(forces.get(i)) is not None:
                forces.get(i).setAppliesForce(s, False)
        cs = self.model.getCoordinateSet()
        coords = [cs.get(n) for n in names]
        self.q_index, self.u_index = [], []
        for c in coords:
            for other in coords:
                other.setSpeedValue(s, 0.0)
            c.setSpeedValue(s, 1.0)
            self.u_index.append(int(np.argmax(s.getU().to_numpy())))
            q0 = s.getQ().to_numpy().copy()
            c.setValue(s, c.getValue(s) + 0.1, False)
            self.q_index.append(int(np.argmax(np.abs(s.getQ().to_numpy() - q0))))
            c.setValue(s, c.getValue(s) - 0.1, False)
        self.solver = osim.InverseDynamicsSolver(self.model)

    def frames(self, inputs, n: int):
        """OpenSim vectors ``(t, Q, U, U̇)`` of the first ``n`` frames."""

        def vec(x, idx):
            v = np.zeros(len(idx))
            v[idx] = x
            return self.osim.Vector.createFromMat(v)

        t, c, cd, cdd = (np.asarray(x) for x in (inputs.time, inputs.c, inputs.cd, inputs.cdd))
        return [
            (float(t[i]), vec(c[i], self.q_index), vec(cd[i], self.u_index), vec(cdd[i], self.u_index))
            for i in range(n)
        ]

    def loop(self, frames) -> np.ndarray:
        """Generalised forces ``(n, nc)`` in the coordinates' order, frame by frame."""
        s, model, solver = self.state, self.model, self.solver
        out = []
        for t, q, u, udot in frames:
            s.setTime(t)
            s.setQ(q)
            s.setU(u)
            model.realizeVelocity(s)
            out.append(solver.solve(s, udot).to_numpy())
        return np.asarray(out)[:, self.u_index]


# ---- rows -------------------------------------------------------------------------------------


def bench_frames(model, inputs, solver, loop_frames: int) -> dict:
    T = inputs.n_frames
    rows = []
    batched = jax.jit(jax.vmap(jb.tools.generalized_forces, (None, 0)))
    compile_s = compile_seconds(batched, model, inputs)
    tau = np.asarray(jax.block_until_ready(batched(model, inputs)))
    t_vmap = best_time(lambda: jax.block_until_ready(batched(model, inputs)))
    rows.append(("jaxbio jit(vmap(generalized_forces))", T, t_vmap, compile_s, 1.0))

    n = min(T, loop_frames)
    one = jax.jit(jb.tools.generalized_forces)
    compile_s = compile_seconds(one, model, inputs.frame(0))
    frames = [jax.device_put(inputs.frame(i)) for i in range(n)]

    def jax_loop():
        for f in frames:
            out = one(model, f)
        jax.block_until_ready(out)

    jax_loop()
    per = best_time(jax_loop) / n
    rows.append((f"jaxbio jit(generalized_forces), Python loop ({n} frames)", T, per * T, compile_s, per * T / t_vmap))

    check = None
    if solver is not None:
        vectors = solver.frames(inputs, n)
        tau_osim = solver.loop(vectors)
        check = float(np.abs(tau_osim - tau[:n]).max())
        per = best_time(lambda: solver.loop(vectors)) / n
        rows.append((f"OpenSim InverseDynamicsSolver, Python loop ({n} frames)", T, per * T, None, per * T / t_vmap))

    pelvis = np.array([i for i, name in enumerate(model.coordinate_names) if name.startswith("pelvis_")])
    grad = jax.jit(
        jax.grad(
            lambda m, x: jnp.sum(
                jax.vmap(jb.tools.generalized_forces, (None, 0))(with_masses(model, m), x)[:, pelvis] ** 2
            )
        )
    )
    args = (model.tree.masses, inputs)
    compile_s = compile_seconds(grad, *args)
    jax.block_until_ready(grad(*args))
    t = best_time(lambda: jax.block_until_ready(grad(*args)))
    rows.append(("∂/∂masses: jit(grad(Σ pelvis residual²))", T, t, compile_s, t / t_vmap))

    jac = jax.jit(jax.jacfwd(lambda m, x: jax.vmap(jb.tools.generalized_forces, (None, 0))(with_masses(model, m), x)))
    compile_s = compile_seconds(jac, *args)
    jax.block_until_ready(jac(*args))
    t = best_time(lambda: jax.block_until_ready(jac(*args)))
    rows.append(
        (f"∂/∂masses: jit(jacfwd(τ)), ({T}, {tau.shape[1]}, {model.tree.masses.shape[0]})", T, t, compile_s, t / t_vmap)
    )
    return {"frames": T, "rows": rows, "max_abs_diff_opensim": check, "max_abs_tau": float(np.abs(tau).max())}


def bench_tools(osim, work: Path, model_path: Path) -> list:
    """The two tools from the files (67 frames)."""
    rows = []
    setup = dict(external_loads=DATA / LOADS, lowpass_hz=6.0, start=0.5, end=1.6)
    t0 = time.perf_counter()
    table = jb.tools.inverse_dynamics_tool(model_path, DATA / MOTION, **setup)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    jb.tools.inverse_dynamics_tool(model_path, DATA / MOTION, **setup)
    warm = time.perf_counter() - t0
    ref = None
    if osim is not None:
        here = os.getcwd()
        os.chdir(work)  # OpenSim reads the setup's files relative to the working directory
        sys.stdout.flush()
        stdout = os.dup(1)
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)  # the tool prints the model's summary from C++ on every run
        try:
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                osim.InverseDynamicsTool(str(work / SETUP)).run()
                times.append(time.perf_counter() - t0)
        finally:
            os.dup2(stdout, 1)
            os.close(stdout)
            os.chdir(here)
        ref = min(times)
        rows.append(("OpenSim InverseDynamicsTool(setup).run()", table.time.size, ref, None, 1.0))
    ratio = (lambda t: t / ref) if ref else (lambda t: None)
    rows.append(("jb.tools.inverse_dynamics_tool, first call (compiles)", table.time.size, cold, None, ratio(cold)))
    rows.append(("jb.tools.inverse_dynamics_tool, again (compiled)", table.time.size, warm, None, ratio(warm)))
    return rows


def print_rows(rows, reference: str) -> None:
    print(f"  {'operation':60s} {'frames':>7s} {'time s':>9s} {'µs/frame':>9s} {'ratio':>8s} {'compile s':>9s}")
    for name, T, t, compile_s, ratio in rows:
        compiled = "" if compile_s is None else "cached" if compile_s < 0.05 else f"{compile_s:.2f}"
        print(
            f"  {name:60s} {T:7d} {t:9.4g} {1e6 * t / T:9.4g} {'' if ratio is None else f'{ratio:.3g}':>8s} "
            f"{compiled:>9s}"
        )
    print(f"  (ratio: time / {reference})")


def common_rows(sizes: list, tools: list) -> list[dict]:
    """The common table's rows (`_machine.row`): batched inverse dynamics per frame against OpenSim's
    solver in a loop, and the tool from the files against OpenSim's tool (per frame)."""

    def find(rows, start):
        return next((r for r in rows if r[0].startswith(start)), None)

    common = []
    for size in sizes:
        mine, peer = find(size["rows"], "jaxbio jit(vmap"), find(size["rows"], "OpenSim InverseDynamicsSolver")
        T = size["frames"]
        common.append(
            row(
                "inverse dynamics of a trial (jit(vmap))",
                "subject01.osim",
                T,
                mine[2] / T,
                unit="frame",
                compile_s=mine[3],
                peer=None if peer is None else "OpenSim InverseDynamicsSolver, loop",
                peer_seconds=None if peer is None else peer[2] / T,
            )
        )
    mine, peer = find(tools, "jb.tools.inverse_dynamics_tool, again"), find(tools, "OpenSim InverseDynamicsTool")
    if mine is not None:
        common.append(
            row(
                "inverse dynamics tool from the files, warm",
                "subject01.osim",
                mine[1],
                mine[2] / mine[1],
                unit="frame",
                peer=None if peer is None else "OpenSim InverseDynamicsTool",
                peer_seconds=None if peer is None else peer[2] / peer[1],
            )
        )
    return common


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tile", type=int, default=150, help="repeat the 67 frames this many times (150: 10,050)")
    parser.add_argument("--loop-frames", type=int, default=LOOP_FRAMES, help="frames of the Python loops")
    parser.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = parser.parse_args(argv)

    osim, versions = opensim_or_none()
    print("jaxbio OpenSim inverse dynamics benchmark —", machine(**versions), "float64")
    print("command: python benchmarks/opensim_id.py " + " ".join(sys.argv[1:] if argv is None else argv))
    print(f"load at start: {load_average()['uptime']}")
    if osim is None:
        print("OpenSim's Python bindings (opensim) are not importable: its rows are skipped")

    out = {"machine": machine(**versions), "load_start": load_average(), "repeats": REPEATS, "sizes": []}
    model = jb.io.load_osim(DATA / "subject01.osim", dtype=jnp.float64)
    inputs = jb.tools.prepare_inverse_dynamics(
        model, DATA / MOTION, external_loads=DATA / LOADS, lowpass_hz=6.0, start=0.5, end=1.6
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "subject01"
        shutil.copytree(DATA, work)
        solver = None if osim is None else OpenSimSolver(osim, work, model.coordinate_names)
        for k in (1, args.tile):
            trial = inputs if k == 1 else tiled(inputs, k)
            result = bench_frames(model, trial, solver, args.loop_frames)
            print(
                f"\nsubject01, {result['frames']} frames"
                + ("" if k == 1 else f" (the 67 frames × {k})")
                + (
                    ""
                    if result["max_abs_diff_opensim"] is None
                    else f"; max |τ_jaxbio − τ_OpenSim| {result['max_abs_diff_opensim']:.1e} N·m / N"
                    f" (max |τ| {result['max_abs_tau']:.3g})"
                )
            )
            print_rows(result["rows"], "jit(vmap)")
            out["sizes"].append(result)
        tools = bench_tools(osim, work, DATA / "subject01.osim")
    print("\nthe tools from the files (read, filter, splines, inverse dynamics; OpenSim also writes its .sto)")
    print_rows(tools, "OpenSim's tool" if osim is not None else "—")
    out["tools"] = tools
    out["rows"] = common_rows(out["sizes"], tools)
    finish(out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
