"""Steps per second of the functional reaching environments (`jaxbio.learning.env`), float32.

    python benchmarks/rl_env.py                 # batches 1, 10³, 10⁴ (a few minutes on 2 cores)
    python benchmarks/rl_env.py --batches 1 1000 --json out.json

For each environment — arm7 with joint torques, arm7 with 14 muscle excitations, the double
pendulum with joint torques (control interval 20 ms, 2 Tsit5 steps inside) — it times
``jax.jit(jax.vmap(env.step))`` on a batch of environments (random actions: torques uniform in
the limits, excitations uniform in [0, 1]) and prints the compile time, the time per batched step
and the environment steps per second (batch / time). Auto-reset is on, so the timed step includes
the reset branch that a training loop runs. A second column times a 20-step rollout
under `jax.lax.scan` inside the jit (what an RL loop does), as steps per second.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import best_time, finish, load_average, machine  # noqa: E402
from _machine import row as common_row  # noqa: E402

from jaxbio.learning import env as E  # noqa: E402

ENVS = {
    "arm7, torques": lambda: E.arm_env("torque", dtype=jnp.float32, auto_reset=True),
    "arm7, muscles": lambda: E.arm_env("muscle", dtype=jnp.float32, auto_reset=True),
    "double pendulum, torques": lambda: E.double_pendulum_env("torque", dtype=jnp.float32, auto_reset=True),
}
SCAN = 20


def actions(env, key, batch):
    if env.actuation == "muscle":
        return jax.random.uniform(key, (batch, env.action_size), jnp.float32)
    return jax.random.uniform(key, (batch, env.action_size), jnp.float32, -1.0, 1.0) * env.torque_limit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 1_000, 10_000])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    print(machine())
    print(f"load at start: {load_average()['uptime']}\n")
    out = {"machine": machine(), "envs": [], "rows": []}
    print(
        f"{'environment':26s} {'batch':>7s} {'compile s':>10s} {'step ms':>10s} {'steps/s':>12s} {'scan steps/s':>13s}"
    )
    for name, make in ENVS.items():
        env = make()
        for batch in args.batches:
            keys = jax.random.split(jax.random.key(0), batch)
            _, states = jax.jit(jax.vmap(env.reset))(keys)
            acts = actions(env, jax.random.key(1), batch)
            step = jax.jit(jax.vmap(env.step))
            t0 = time.perf_counter()
            jax.block_until_ready(step(states, acts))
            compile_s = time.perf_counter() - t0
            per_step = best_time(lambda: jax.block_until_ready(step(states, acts)), repeats=3, min_time=0.2)

            @jax.jit
            def rollout(states, acts):
                def body(s, _):
                    _, s, r, _, _ = jax.vmap(env.step)(s, acts)
                    return s, r

                return jax.lax.scan(body, states, None, length=SCAN)[1]

            jax.block_until_ready(rollout(states, acts))
            per_scan = best_time(lambda: jax.block_until_ready(rollout(states, acts)), repeats=1, min_time=0.0)
            row = {
                "env": name,
                "batch": batch,
                "compile_s": compile_s,
                "step_s": per_step,
                "steps_per_s": batch / per_step,
                "scan_steps_per_s": batch * SCAN / per_scan,
            }
            out["envs"].append(row)
            out["rows"].append(
                common_row(
                    "RL environment step (jit(vmap(env.step)))",
                    name,
                    batch,
                    per_step / batch,
                    unit="step",
                    compile_s=compile_s,
                    note=f"{row['scan_steps_per_s']:.0f} steps/s inside a {SCAN}-step scan",
                )
            )
            print(
                f"{name:26s} {batch:7d} {compile_s:10.1f} {per_step * 1e3:10.3f} {row['steps_per_s']:12.0f} "
                f"{row['scan_steps_per_s']:13.0f}",
                flush=True,
            )
    finish(out, args.json)


if __name__ == "__main__":
    main()
