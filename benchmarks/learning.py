"""Gradients through `jb.simulate` in a learning loop (issue #19, item 1): forward and
value-and-gradient time of an `equinox.nn.MLP` torque controller, one run, several paths.

    python benchmarks/learning.py                       # double pendulum and arm7, every path
    python benchmarks/learning.py --models double_pendulum --paths default,backsolve,grid
    python benchmarks/learning.py --json out.json       # also dump every number as JSON

The case of the issue: an MLP (width 32, depth 2, tanh) maps ``(q, q̇)`` to joint torques (a
`jb.hamiltonian.Drive`), joints damped by ``0.1 N·m·s/rad``; a batch of 32 initial states
(``q ~ N(0, 0.5²)`` rad, at rest) is simulated for 2 s in float32 under `jax.vmap`, 21 states
saved, and the loss is the mean of ``q²`` over the saved trajectory. ``forward`` is the jitted
loss, ``value+grad`` the jitted `equinox.filter_value_and_grad` of it w.r.t. the MLP; each is
timed best-of-5 after its first call, and ``compile`` is that first call (trace + XLA compile +
one run). The paths (``--paths``):

- ``default``: the default of `jb.simulate` (adaptive Tsit5, PID controller ``rtol = atol =
  1e-5``, Diffrax's `RecursiveCheckpointAdjoint` with its default checkpoints);
- ``backsolve``: the same solve with Diffrax's `BacksolveAdjoint` (continuous adjoint);
- ``custom_vjp``: ``default`` with the vector field's ``(q̇, ∂H/∂q)`` given a hand-written reverse
  rule (benchmarks/_learning_vjp.py; tried, not shipped);
- ``grid``: fixed-grid stepping ``steps=200`` (`lax.scan`, reverse mode through the scan; its
  loss is over the 201 grid states, so its ``loss`` column differs);
- ``velocity``: ``default`` with ``form="velocity"`` (the solver integrates ``(q, q̇)``,
  `HamiltonianSystem.velocity_field`: reverse mode differentiates the wrench recursion once
  instead of ``∂T/∂q``);
- ``velocity_ckpt``: ``velocity`` with ``max_steps=256`` and
  ``RecursiveCheckpointAdjoint(checkpoints=256)``: one checkpoint per step (these solves take
  ≤ 186 steps), so the reverse pass recomputes nothing.

No path reaches the issue's target (value-and-grad ≤ 4× forward, first compile < 10 s);
``velocity`` / ``velocity_ckpt`` come closest (arm7 at load 2–3: value+grad 1.20 / 1.16 s against
1.44 s, gradient compile 25 / 23 s against 57 s); the README's section says where the time goes.

The machine and the load at start and end are printed: timings of one run are comparable
with each other only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _machine  # noqa: E402  (benchmarks/_machine.py)

import jaxbio as jb  # noqa: E402

BATCH, DURATION, SAVED = 32, 2.0, 21
PATHS = ("default", "backsolve", "custom_vjp", "grid", "velocity", "velocity_ckpt")


class MLPDrive(jb.hamiltonian.Drive):
    """Joint torques ``mlp(concat(q, q̇))`` ``(n,)`` N·m (the learning case's controller)."""

    mlp: eqx.nn.MLP

    def __call__(self, t, q, qd, f, a=None):
        return self.mlp(jnp.concatenate([q, qd]))


def solve_kwargs(path: str, ts) -> dict:
    """`jb.simulate` keywords of each path."""
    adaptive = dict(ts=ts, rtol=1e-5, atol=1e-5, throw=False)
    if path in ("default", "custom_vjp"):
        return adaptive
    if path == "backsolve":
        return dict(adaptive, adjoint=diffrax.BacksolveAdjoint())
    if path == "grid":
        return dict(steps=200, throw=False)
    if path == "velocity":
        return dict(adaptive, form="velocity")
    if path == "velocity_ckpt":
        return dict(adaptive, form="velocity", max_steps=256,
                    adjoint=diffrax.RecursiveCheckpointAdjoint(checkpoints=256))
    raise ValueError(f"unknown path {path!r}, expected one of {PATHS}")


def case(model: str, path: str, dtype=jnp.float32):
    """``(loss, mlp)``: the loss of the batch as a function of the MLP, and the MLP."""
    tree = jb.load_model(model, dtype=dtype)
    n = tree.nv
    mlp = eqx.nn.MLP(2 * n, n, 32, 2, activation=jnp.tanh, key=jax.random.key(0), dtype=dtype)
    q0 = 0.5 * jax.random.normal(jax.random.key(1), (BATCH, n), dtype)
    ts = jnp.linspace(0.0, DURATION, SAVED, dtype=dtype)
    kwargs = solve_kwargs(path, ts)

    def one(mlp, q0):
        system = jb.HamiltonianSystem(tree, MLPDrive(mlp), jb.hamiltonian.LinearDamping(jnp.full(n, 0.1, dtype)))
        return jb.simulate(system, system.initial_state(q0), 0.0, DURATION, **kwargs).q

    def loss(mlp):
        return jnp.mean(jax.vmap(one, in_axes=(None, 0))(mlp, q0) ** 2)

    return loss, mlp


def timed(fn, arg, repeats: int = 5):
    """``(first call s, best of repeats s, output)``."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(arg))
    first = time.perf_counter() - t0
    best = min(_once(fn, arg) for _ in range(repeats))
    return first, best, out


def _once(fn, arg):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(arg))
    return time.perf_counter() - t0


def measure(model: str, path: str) -> dict:
    loss, mlp = case(model, path)
    flow = jb.HamiltonianSystem._flow
    if path == "custom_vjp":  # only while this case is traced (its first calls below)
        import _learning_vjp

        jb.HamiltonianSystem._flow = _learning_vjp.flow
    try:
        c_fwd, t_fwd, value = timed(eqx.filter_jit(loss), mlp)
        c_vg, t_vg, (value2, grad) = timed(eqx.filter_jit(eqx.filter_value_and_grad(loss)), mlp)
    finally:
        jb.HamiltonianSystem._flow = flow
    flat = jnp.concatenate([x.ravel() for x in jax.tree_util.tree_leaves(eqx.filter(grad, eqx.is_array))])
    return {"model": model, "path": path, "forward_ms": 1e3 * t_fwd, "value_grad_ms": 1e3 * t_vg,
            "ratio": t_vg / t_fwd, "compile_forward_s": c_fwd, "compile_value_grad_s": c_vg,
            "loss": float(value), "grad_norm": float(jnp.linalg.norm(flat)), "load": os.getloadavg()[0]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="double_pendulum,arm7")
    parser.add_argument("--paths", default="default,backsolve,grid")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    out = {"machine": _machine.machine(diffrax=diffrax.__version__, equinox=eqx.__version__),
           "load_start": _machine.load_average(), "cases": [], "rows": []}
    print(out["machine"])
    print(f"load at start: {out['load_start']['uptime']}")
    print(f"batch {BATCH}, {DURATION} s, float32, MLP 2n→32→32→n tanh; times best of 5, compile = first call\n")
    header = (f"{'model':16s} {'path':10s} {'forward ms':>10s} {'value+grad ms':>13s} {'ratio':>6s} "
              f"{'compile fwd s':>13s} {'compile v+g s':>13s} {'loss':>10s} {'|grad|':>10s} {'load':>5s}")
    print(header)
    for model in args.models.split(","):
        for path in args.paths.split(","):
            r = measure(model, path)
            out["cases"].append(r)
            out["rows"].append(_machine.row(f"value_and_grad of a batched simulation ({path})", model, BATCH,
                                            r["value_grad_ms"] / 1e3, unit="batch",
                                            compile_s=r["compile_value_grad_s"], peer="its forward pass, same run",
                                            peer_seconds=r["forward_ms"] / 1e3,
                                            note=f"gradient / forward = {r['ratio']:.2f}"))
            print(f"{model:16s} {path:10s} {r['forward_ms']:10.1f} {r['value_grad_ms']:13.1f} {r['ratio']:6.2f} "
                  f"{r['compile_forward_s']:13.1f} {r['compile_value_grad_s']:13.1f} {r['loss']:10.6f} "
                  f"{r['grad_norm']:10.6f} {r['load']:5.1f}", flush=True)
    _machine.finish(out, args.json)


if __name__ == "__main__":
    main()
