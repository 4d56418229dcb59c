"""Every command-line job from the shell, cold and warm, against OpenSim's own tool in the same run.

    python benchmarks/cli.py                 # 3 warm runs each, a session of 10 gait trials
    python benchmarks/cli.py --runs 5 --session 20 --json out.json

Each job runs as a user runs it: a fresh process from the shell, default settings, unpinned, on
OpenSim's own setup files unedited (copied from ``tests/io/data`` into a temporary folder):

- ``ID, gait trial``: ``jaxbio run-tool subject01_Setup_InverseDynamics.xml`` (OpenSim's gait
  case: 23 coordinates, ground reactions, 6 Hz filter) against ``opensim.InverseDynamicsTool(
  setup).run()`` in ``python -c``;
- ``SO, arm26``: ``jaxbio run-tool arm26_Setup_StaticOptimization.xml`` against
  ``opensim.AnalyzeTool(setup).run()`` (arm26's muscles as Millard2012EquilibriumMuscle, as
  OpenSim's own test renames them: OpenSim 4.6 refuses the file's Thelen muscles, whose
  ``minimum_activation`` is below its 0.01);
- ``IK, gait trial``: ``jaxbio run-tool subject01_Setup_IK.xml`` (gait2354's IK setup on the
  walking trial cut to 0.4–0.7 s in ``tests/io/data/gait2354_ik``: 31 marker tasks, 4 coordinate tasks)
  against ``opensim.InverseKinematicsTool(setup).run()``;
- ``ID, session of N``: N copies of the gait trial, ``jaxbio run-tool 't*/…xml'`` (one process)
  against one Python process running OpenSim's tool on the N setups in turn;
- ``sprint``: ``jaxbio sprint`` (no peer).

``cold`` is the first run after the persistent compilation cache was emptied (a fresh
``JAXBIO_JAX_CACHE`` folder: what a new user's first call costs); ``warm`` the median of
``--runs`` later runs from the shell (the cache filled; a new process each time). OpenSim has no
cache: its first and later runs are timed the same way. Memory is each process's peak resident
set (``os.wait4``). The breakdown of jaxbio's warm run comes from a separate process that times
``import jaxbio.tools``, then `jaxbio.tools.run_setup` with a progress callback that stamps each
stage (loading the model, processing the coordinates and external loads, the solve with its
compile or cache read), then the solve again in the same process (compute alone).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _machine import finish, load_average, machine, opensim_or_none, row  # noqa: E402  (benchmarks/_machine.py)

DATA = REPO / "tests" / "io" / "data"
ID_SETUP = "subject01_Setup_InverseDynamics.xml"
SO_SETUP = "arm26_Setup_StaticOptimization.xml"
IK_SETUP = "subject01_Setup_IK.xml"

BREAKDOWN = r"""
import json, sys, time
t0 = time.perf_counter()
import jaxbio.tools
stamps = [("import", time.perf_counter() - t0)]
t = time.perf_counter()
def say(message):
    stamps.append((message, time.perf_counter()))
start = time.perf_counter()
jaxbio.tools.run_setup(sys.argv[1], progress=say)
end = time.perf_counter()
again = time.perf_counter()
jaxbio.tools.run_setup(sys.argv[1])
again = time.perf_counter() - again
marks = stamps[1:] + [("end", end)]
stages = {"import": stamps[0][1]}
previous = start
for (message, at), (_, following) in zip(marks, marks[1:]):
    if message.startswith("loading"):
        key = "load"
    elif message.startswith(("processing", "reading")):
        key = "prepare"
    else:
        key = "solve (compile or cache)"
    stages[key] = stages.get(key, 0.0) + following - at
stages["whole run again, same process"] = again
print(json.dumps(stages))
"""


def timed(argv: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """Wall seconds and peak resident MB of one process (``os.wait4`` gives its own rusage)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} failed in {cwd}:\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def cold_and_warm(argv, cwd, env, runs: int) -> dict:
    cold = timed(argv, cwd, env)
    warm = [timed(argv, cwd, env) for _ in range(runs)]
    return {
        "cold_s": cold[0],
        "cold_mb": cold[1],
        "warm_s": statistics.median(w for w, _ in warm),
        "warm_all_s": [w for w, _ in warm],
        "warm_mb": max(m for _, m in warm),
    }


def opensim_script(kind: str, setups: list[str]) -> list[str]:
    tool = {"id": "InverseDynamicsTool", "so": "AnalyzeTool", "ik": "InverseKinematicsTool"}[kind]
    code = (
        "import os, sys, opensim\n"
        "opensim.Logger.setLevelString('error')\n"
        "for s in sys.argv[1:]:\n"
        "    os.chdir(os.path.dirname(os.path.abspath(s)))\n"  # OpenSim reads model_file from the cwd
        f"    opensim.{tool}(os.path.basename(s)).run()\n"
    )
    return [sys.executable, "-c", code, *setups]


def breakdown(setup: Path, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", BREAKDOWN, str(setup)],
        cwd=setup.parent,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="warm runs per job (median)")
    parser.add_argument("--session", type=int, default=10, help="gait trials in the session job")
    parser.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = parser.parse_args(argv)
    opensim, versions = opensim_or_none()
    import jax

    out = {"machine": machine(jax=jax.__version__, **versions), "load_start": load_average(), "rows": [], "jobs": {}}
    print(out["machine"])
    jaxbio = shutil.which("jaxbio") or str(Path(sys.executable).with_name("jaxbio"))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = {**os.environ, "JAXBIO_JAX_CACHE": str(tmp / "cache")}
        gait, arm, ik = tmp / "gait", tmp / "arm26", tmp / "gait2354_ik"
        shutil.copytree(DATA / "subject01", gait)
        shutil.copytree(DATA / "gait2354_ik", ik)
        shutil.copytree(DATA / "arm26_id", arm)
        model = arm / "arm26.osim"  # OpenSim 4.6 refuses its Thelen muscles (minimum_activation < 0.01):
        text = re.sub(r"<(/?)Thelen2003Muscle\b", r"<\1Millard2012EquilibriumMuscle", model.read_text())
        model.write_text(text)  # its test renames them to Millard2012EquilibriumMuscle, so do we
        session = tmp / "session"
        for k in range(args.session):
            shutil.copytree(DATA / "subject01", session / f"t{k:02d}")
        session_setups = sorted(str(p) for p in session.glob(f"t*/{ID_SETUP}"))
        jobs = [
            (
                "ID, gait trial",
                "subject01",
                1,
                [jaxbio, "run-tool", ID_SETUP, "--no-progress"],
                gait,
                ("id", [str(gait / ID_SETUP)]),
            ),
            (
                "SO, arm26",
                "arm26",
                1,
                [jaxbio, "run-tool", SO_SETUP, "--no-progress"],
                arm,
                ("so", [str(arm / SO_SETUP)]),
            ),
            (
                "IK, gait trial",
                "gait2354",
                1,
                [jaxbio, "run-tool", IK_SETUP, "--no-progress"],
                ik,
                ("ik", [str(ik / IK_SETUP)]),
            ),
            (
                f"ID, session of {args.session}",
                "subject01",
                args.session,
                [jaxbio, "run-tool", str(session / "t*" / ID_SETUP), "--no-progress"],
                tmp,
                ("id", session_setups),
            ),
            ("sprint", "5 races", 1, [jaxbio, "sprint"], tmp, None),
        ]
        for name, model, trials, command, cwd, peer in jobs:
            ours = cold_and_warm(command, cwd, env, args.runs)
            theirs = cold_and_warm(opensim_script(*peer), cwd, env, args.runs) if peer and opensim else None
            job = {"jaxbio": ours, "opensim": theirs}
            if name.startswith(("ID, gait", "SO", "IK")):
                job["breakdown"] = breakdown(cwd / command[2], env)
            out["jobs"][name] = job
            for when in ("cold", "warm"):
                out["rows"].append(
                    row(
                        f"{name}, from the shell, {when}",
                        model,
                        trials,
                        ours[f"{when}_s"],
                        unit="command",
                        peer=None if theirs is None else "OpenSim 4.6 tool",
                        peer_seconds=None if theirs is None else theirs[f"{when}_s"],
                        note=f"{ours[f'{when}_mb']:.0f} MB"
                        + ("" if theirs is None else f" (OpenSim {theirs[f'{when}_mb']:.0f} MB)"),
                    )
                )
    print(f"\n{'job':<32}{'jaxbio cold':>12}{'warm':>8}{'OpenSim cold':>14}{'warm':>8}{'warm ratio':>12}{'MB':>14}")
    for name, job in out["jobs"].items():
        ours, theirs = job["jaxbio"], job["opensim"]
        peer = (
            ""
            if theirs is None
            else f"{theirs['cold_s']:14.2f}{theirs['warm_s']:8.2f}{ours['warm_s'] / theirs['warm_s']:11.1f}×"
        )
        peer = peer or f"{'-':>14}{'-':>8}{'-':>12}"
        mb = f"{ours['warm_mb']:.0f}" + ("" if theirs is None else f" / {theirs['warm_mb']:.0f}")
        print(f"{name:<32}{ours['cold_s']:12.2f}{ours['warm_s']:8.2f}{peer}{mb:>14}")
    print("\njaxbio's warm run, stage by stage (s):")
    for name, job in out["jobs"].items():
        if "breakdown" in job:
            print(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in job["breakdown"].items()))
    print("ratio: jaxbio's time over OpenSim's (below 1: jaxbio faster); MB: peak resident, jaxbio / OpenSim")
    finish(out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
