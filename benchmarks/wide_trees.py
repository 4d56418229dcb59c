"""Wide and bushy trees (issue #49 item 5): load, compile and run time and peak memory of
``jax.jit(jax.vmap(jb.inverse_dynamics))`` on trees of a few thousand segments, each case in a
fresh process.

    python benchmarks/wide_trees.py                    # every case below, batch 256
    python benchmarks/wide_trees.py --quick            # chain 2000, star 1500, one tree of each kind
    python benchmarks/wide_trees.py --root A B         # jaxbio from A/jaxbio, then B/jaxbio, case by case
    python benchmarks/wide_trees.py --json out.json

Cases (random joints, masses and inertias from `tests._models.random_model_dict`): a chain of 2,000
segments (the reference: narrow and deep), a star of 1,500 leaves on one root (the widest tree), random
recursive trees of 2,000 segments (each segment's parent uniform among the earlier ones: levels
hundreds wide, a few children each) and "bushy" trees of 2,000 (preferential attachment: up to about
a hundred children on one segment); ``--kinematics`` adds ``jax.vmap(jb.forward_kinematics)`` and
``--grad`` the batched gradient ``jax.vmap(jax.grad(Σ tau²))`` in the states.

Per case, in a subprocess (so that ``resource.getrusage(RUSAGE_SELF).ru_maxrss``, the peak resident
set, is its own): the seconds to build the `SegmentTree` from its dict (``load``), to trace and lower
(``trace``), to compile (``compile``), and the best-of-k steady-state milliseconds per call of the
batch (``run``). A case that passes ``--limit-gb`` of resident memory (default 6) or ``--timeout``
seconds (default 300) is stopped and reported as such. Float64 on CPU. Compare numbers of one run
only: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

CASES = {
    "chain2000": ("chain", 2000, 0),
    "star1500": ("star", 1500, 0),
    **{f"random2000_s{s}": ("uniform", 2000, s) for s in range(3)},
    **{f"bushy2000_s{s}": ("bushy", 2000, s) for s in range(3)},
}
QUICK = ("chain2000", "star1500", "random2000_s0", "bushy2000_s0")
BATCH = 256


def parents_of(kind: str, n: int, seed: int):
    import numpy as np

    from tests._models import bushy_parents, star_parents, uniform_parents

    rng = np.random.default_rng(seed)
    if kind == "chain":
        return tuple(range(-1, n - 1))
    if kind == "star":
        return star_parents(n)
    return (uniform_parents if kind == "uniform" else bushy_parents)(rng, n)


def child(case: str, batch: int, what: list[str]) -> dict:
    """Runs one case in this process; returns its numbers."""
    import resource

    import jax

    jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this
    import jax.numpy as jnp
    import numpy as np

    import jaxbio as jb
    from tests._models import random_model_dict

    sys.path.insert(0, str(HERE))
    from _machine import best_time

    kind, n, seed = CASES[case]
    parents = parents_of(kind, n, seed)
    d = random_model_dict(np.random.default_rng(seed), len(parents), parents=parents)
    t0 = time.perf_counter()
    tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    out = {"case": case, "segments": tree.n_segments, "load_s": time.perf_counter() - t0}
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.uniform(-2, 2, (batch, tree.nq)))
    qd = jnp.asarray(rng.uniform(-3, 3, (batch, tree.nv)))
    qdd = jnp.asarray(rng.uniform(-10, 10, (batch, tree.nv)))

    def tau_sq(q, qd, qdd):
        return jnp.sum(jb.inverse_dynamics(tree, q, qd, qdd) ** 2)

    fns = {
        "id": (jax.vmap(lambda q, qd, qdd: jb.inverse_dynamics(tree, q, qd, qdd)), (q, qd, qdd)),
        "kinematics": (jax.vmap(lambda q: jb.forward_kinematics(tree, q)), (q,)),
        "grad": (jax.vmap(jax.grad(tau_sq, argnums=(0, 1, 2))), (q, qd, qdd)),
    }
    for name in what:
        fn, args = fns[name]
        t0 = time.perf_counter()
        lowered = jax.jit(fn).lower(*args)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        run = best_time(lambda: jax.block_until_ready(compiled(*args)), repeats=3)
        out[name] = {"trace_s": t1 - t0, "compile_s": t2 - t1, "run_ms": 1e3 * run}
    out["maxrss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return out


def _rss_gb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def run_case(case: str, root: str, args) -> dict:
    """``case`` in a fresh process (importing jaxbio from ``root``), stopped past the limits."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(root).resolve()), str(REPO)]))
    cmd = [sys.executable, __file__, "--child", case, "--batch", str(args.batch), "--what", *args.what]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0, peak, why = time.perf_counter(), 0.0, None
    while proc.poll() is None:
        peak = max(peak, _rss_gb(proc.pid))
        if peak > args.limit_gb:
            why = f"over {args.limit_gb:g} GB"
        elif time.perf_counter() - t0 > args.timeout:
            why = f"over {args.timeout:g} s"
        if why:
            proc.kill()
            proc.wait()
            return {"case": case, "root": root, "failed": why, "wall_s": time.perf_counter() - t0}
        time.sleep(0.1)
    stdout, stderr = proc.communicate()
    if proc.returncode:
        return {"case": case, "root": root, "failed": f"exit {proc.returncode}: {stderr.strip()[-300:]}"}
    res = json.loads(stdout.strip().splitlines()[-1])
    res["root"], res["wall_s"] = root, time.perf_counter() - t0
    return res


def table(results: list[dict], what: list[str]) -> str:
    head = f"{'case':<16} {'jaxbio':<14} {'load s':>7}"
    for w in what:
        head += f" | {w + ' trace s':>14} {'compile s':>9} {'run ms':>8}"
    lines = [head + f" | {'peak GB':>7}"]
    for r in results:
        root = Path(r["root"]).name[:14]
        if "failed" in r:
            lines.append(f"{r['case']:<16} {root:<14} failed: {r['failed']}")
            continue
        line = f"{r['case']:<16} {root:<14} {r['load_s']:7.2f}"
        for w in what:
            x = r[w]
            line += f" | {x['trace_s']:14.2f} {x['compile_s']:9.2f} {x['run_ms']:8.1f}"
        lines.append(line + f" | {r['maxrss_gb']:7.2f}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="chain, star and one random tree of each kind")
    parser.add_argument("--cases", nargs="*", choices=sorted(CASES), help="these cases only")
    parser.add_argument(
        "--root",
        nargs="+",
        default=[str(REPO)],
        help="directories to import jaxbio from, in turn (default: this checkout)",
    )
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--what", nargs="*", default=["id"], choices=["id", "kinematics", "grad"])
    parser.add_argument("--limit-gb", type=float, default=6.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.batch, args.what)))
        return
    sys.path.insert(0, str(HERE))
    from _machine import finish, load_average, machine

    print(machine())
    print("load:", load_average()["uptime"])
    roots = [str(Path(r).resolve()) for r in args.root]
    print(f"jaxbio from {', '.join(roots)} (alternated case by case); batch {args.batch}")
    cases = args.cases or (QUICK if args.quick else list(CASES))
    results = []
    for case in cases:
        for root in roots:
            results.append(run_case(case, root, args))
            print(json.dumps(results[-1]), flush=True)
    print(table(results, args.what))
    finish({"roots": roots, "batch": args.batch, "results": results}, args.json)


if __name__ == "__main__":
    main()
