"""`jb.batch` on two host CPU devices against `jax.jit(jax.vmap)` on one, in one run.

    python benchmarks/batching.py                # arm7 inverse dynamics, batch 1e5, two rounds
    python benchmarks/batching.py --batch 10000 --rounds 3
    python benchmarks/batching.py --json out.json # also write the rows (python -m benchmarks)

Rows (µs per state, best of k per round; float64):

- ``jit(vmap)``, one device: the reference (uses about one core);
- ``jb.batch``, two devices, numpy inputs (the call copies them to the devices);
- ``jb.batch``, two devices, inputs already split over them (`jax.device_put` with the batch
  sharding), as the one-device row has its inputs on its device;
- ``jit`` with ``NamedSharding`` in/out shardings (XLA's automatic partitioner on the same vmap),
  the alternative to `jax.shard_map` that `jb.batch` was measured against.

The script asks XLA for 2 host devices before importing jax (a library never does). Each row is
checked against the reference (max |Δtau|). On a loaded machine the two-device rows cannot gain:
compare rows of the same round, and the load printed with them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import jaxbio as jb  # noqa: E402
from _machine import best_time, finish, load_average, row  # noqa: E402  (benchmarks/_machine.py)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="arm7")
    parser.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = parser.parse_args(argv)

    tree = jb.load_model(args.model, dtype=jnp.float64).tree
    rng = np.random.default_rng(0)
    # q (batch, nq): angles and slides in [−1, 1], uniform ball-joint rotations (jb.configuration.random)
    keys = jax.random.split(jax.random.PRNGKey(0), args.batch)
    q = np.asarray(jax.vmap(lambda k: jb.configuration.random(tree, k, angle=1.0, distance=1.0))(keys))
    qd, qdd = (rng.uniform(-1, 1, (args.batch, tree.nv)) for _ in range(2))
    devices = jax.devices()[:2]
    mesh = Mesh(np.array(devices), (jb.batching.AXIS,))
    split = NamedSharding(mesh, PartitionSpec(jb.batching.AXIS))
    on_one = [jax.device_put(x, devices[0]) for x in (q, qd, qdd)]
    on_two = [jax.device_put(x, split) for x in (q, qd, qdd)]

    one = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))
    two = jb.batch(jb.inverse_dynamics, in_axes=(None, 0, 0, 0), devices=devices)
    auto = jax.jit(
        jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)),
        in_shardings=(NamedSharding(mesh, PartitionSpec()), split, split, split),
        out_shardings=split,
    )
    rows = {
        "jit(vmap), 1 device": lambda: one(tree, *on_one),
        "jb.batch, 2 devices, numpy inputs": lambda: two(tree, q, qd, qdd),
        "jb.batch, 2 devices, inputs split": lambda: two(tree, *on_two),
        "jit + NamedSharding, 2 devices": lambda: auto(tree, *on_two),
    }
    ref = np.asarray(rows["jit(vmap), 1 device"]())
    out = {"load_start": load_average(), "batch": args.batch, "rounds": [], "rows": []}
    print(
        f"jb.batch benchmark — {args.model}, inverse dynamics, batch {args.batch}, float64, jax {jax.__version__}, "
        f"{len(jax.devices())} host devices, {os.cpu_count()} CPUs"
    )
    for name, f in rows.items():
        print(f"  {name:36s} max |Δtau| vs 1 device {np.max(np.abs(np.asarray(f()) - ref)):.1e}")
    for r in range(args.rounds):
        times = {name: best_time(lambda f=f: jax.block_until_ready(f())) for name, f in rows.items()}
        base = times["jit(vmap), 1 device"]
        out["rounds"].append({"load": os.getloadavg()[0], **{k: v / args.batch for k, v in times.items()}})
        print(f"round {r + 1} (load {os.getloadavg()[0]:.2f}):")
        for name, t in times.items():
            print(f"  {name:36s} {1e6 * t / args.batch:8.3f} µs/state   speed-up ×{base / t:.2f}")
    best = {k: min(r[k] for r in out["rounds"]) for k in rows}  # best over the rounds, per row
    for name in list(rows)[1:]:
        out["rows"].append(
            row(
                f"inverse dynamics, {name}",
                args.model,
                args.batch,
                best[name],
                peer="jit(vmap), 1 device",
                peer_seconds=best["jit(vmap), 1 device"],
                note="best over rounds",
            )
        )
    finish(out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
