"""Gradients through `jb.simulate` in a learning loop (issue #19, item 1): forward and
value-and-gradient time of an `equinox.nn.MLP` torque controller, one run, several paths.

    python benchmarks/learning.py                       # double pendulum and arm7, the default paths
    python benchmarks/learning.py --models double_pendulum --paths default,backsolve,grid
    python benchmarks/learning.py --json out.json       # also dump every number as JSON
    python benchmarks/learning.py --field --models double_pendulum,arm7   # the vector field alone
    python benchmarks/learning.py --paths velocity,stored_velocity --rounds 4  # paths timed in turn

The case of the issue: an MLP (width 32, depth 2, tanh) maps ``(q, q̇)`` to joint torques (a
`jb.hamiltonian.Drive`), joints damped by ``0.1 N·m·s/rad``; a batch of 32 initial states
(``q ~ N(0, 0.5²)`` rad, at rest) is simulated for 2 s in float32 under `jax.vmap`, 21 states
saved, and the loss is the mean of ``q²`` over the saved trajectory. ``forward`` is the jitted
loss, ``value+grad`` the jitted `equinox.filter_value_and_grad` of it w.r.t. the MLP; each is
timed best-of-5 after its first call, and ``compile`` is that first call (trace + XLA compile +
one run), made cold: JAX's caches are cleared before each (`jax.clear_caches`), so that no call
reuses the traces of an earlier path or call (the value-and-grad first, as a training loop's
first step). The paths (``--paths``):

- ``default``: the defaults of `jb.simulate` (since 2026-12-07: the velocity form and
  `StoredAdjoint`, i.e. ``stored_velocity``; adaptive Tsit5, PID controller ``rtol = atol =
  1e-5``);
- ``diffrax``: the default before 2026-12-07: the Hamiltonian form through Diffrax's loop and its
  `RecursiveCheckpointAdjoint` with its default checkpoints;
- ``backsolve``: the same solve with Diffrax's `BacksolveAdjoint` (continuous adjoint);
- ``custom_vjp``: ``diffrax`` with the vector field's ``(q̇, ∂H/∂q)`` given a hand-written reverse
  rule (benchmarks/_learning_vjp.py; tried, not shipped);
- ``grid``: fixed-grid stepping ``steps=200`` in the Hamiltonian form (`lax.scan`, reverse mode
  through the scan; its loss is over the 201 grid states, so its ``loss`` column differs);
- ``velocity``: ``diffrax`` with ``form="velocity"`` (the solver integrates ``(q, q̇)``,
  `HamiltonianSystem.velocity_field`: reverse mode differentiates the wrench recursion once
  instead of ``∂T/∂q``);
- ``velocity_ckpt``: ``velocity`` with ``max_steps=256`` and
  ``RecursiveCheckpointAdjoint(checkpoints=256)``: one checkpoint per step (these solves take
  ≤ 186 steps), so the reverse pass recomputes nothing;
- ``stored``: ``diffrax`` with ``adjoint=jb.simulation.StoredAdjoint()`` (jaxbio's own Tsit5
  loop, every step's stages stored, their exact adjoint; `jaxbio._tsit5`);
- ``stored_velocity``: ``velocity`` with ``StoredAdjoint()``;
- ``stored_state``: ``stored_velocity`` as a training loop would write it: the initial state in
  velocity form (``initial_state(q0, form="velocity")``, no mass matrix for the start) and
  ``derived=False`` (the loss reads ``q`` only: the momenta and energy at the saved times are
  never traced).

``default`` (and ``stored_state``) meet the target (value-and-grad ≤ 4× forward, first compile < 10 s): forward
dynamics is differentiated by the inverse-dynamics identity (`jaxbio.dynamics.forward`), under
`jax.vmap` its reverse pass runs the batch-last adjoint of the wrench recursion
(`jaxbio.dynamics._adjoint`), the solve's loop traces the field once each way and linearises it at
the stored stages with the Cholesky factor kept there, and nothing the loss does not read is
traced. Measured (Intel Xeon, 2 cores, no other job, ``--rounds 3``, 2026-11-30): 2.8× the forward
pass for the double pendulum and 2.5× for arm7, first value-and-grad call 5.6 and 7.0 s
(``velocity``: 5.1×, 3.5×, 23.7 and 29.7 s). benchmarks/README.md says where the time goes.
``--field`` times the velocity-form vector field and its VJP alone.

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
PATHS = (
    "default",
    "diffrax",
    "backsolve",
    "custom_vjp",
    "grid",
    "velocity",
    "velocity_ckpt",
    "stored",
    "stored_velocity",
    "stored_state",
)


class MLPDrive(jb.hamiltonian.Drive):
    """Joint torques ``mlp(concat(q, q̇))`` ``(n,)`` N·m (the learning case's controller)."""

    mlp: eqx.nn.MLP

    def __call__(self, t, q, qd, f, a=None):
        return self.mlp(jnp.concatenate([q, qd]))


def solve_kwargs(path: str, ts) -> dict:
    """`jb.simulate` keywords of each path."""
    adaptive = dict(ts=ts, rtol=1e-5, atol=1e-5, throw=False)
    checkpointed = diffrax.RecursiveCheckpointAdjoint()
    if path == "default":
        return adaptive
    if path in ("diffrax", "custom_vjp"):
        return dict(adaptive, form="hamiltonian", adjoint=checkpointed)
    if path == "backsolve":
        return dict(adaptive, form="hamiltonian", adjoint=diffrax.BacksolveAdjoint())
    if path == "grid":
        return dict(stepsize_controller=jb.FixedGrid(200), form="hamiltonian", throw=False)
    if path == "velocity":
        return dict(adaptive, form="velocity", adjoint=checkpointed)
    if path == "velocity_ckpt":
        return dict(
            adaptive, form="velocity", max_steps=256, adjoint=diffrax.RecursiveCheckpointAdjoint(checkpoints=256)
        )
    if path == "stored":
        return dict(adaptive, form="hamiltonian", adjoint=jb.simulation.StoredAdjoint())
    if path == "stored_velocity":
        return dict(adaptive, form="velocity", adjoint=jb.simulation.StoredAdjoint())
    if path == "stored_state":
        return dict(adaptive, form="velocity", adjoint=jb.simulation.StoredAdjoint(), derived=False)
    raise ValueError(f"unknown path {path!r}, expected one of {PATHS}")


def case(model: str, path: str, dtype=jnp.float32):
    """``(loss, mlp)``: the loss of the batch as a function of the MLP, and the MLP."""
    tree = jb.load_model(model, dtype=dtype).tree
    n = tree.nv
    mlp = eqx.nn.MLP(2 * n, n, 32, 2, activation=jnp.tanh, key=jax.random.key(0), dtype=dtype)
    q0 = 0.5 * jax.random.normal(jax.random.key(1), (BATCH, n), dtype)
    ts = jnp.linspace(0.0, DURATION, SAVED, dtype=dtype)
    kwargs = solve_kwargs(path, ts)
    start = "velocity" if path == "stored_state" else "hamiltonian"  # the initial state's form

    def one(mlp, q0):
        system = jb.HamiltonianSystem(tree, MLPDrive(mlp), jb.hamiltonian.LinearDamping(jnp.full(n, 0.1, dtype)))
        return jb.simulate(system, system.initial_state(q0, form=start), 0.0, DURATION, **kwargs).q

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
    """The first calls (compile) of the jitted forward and value-and-grad, and their best of 5;
    ``"calls"`` keeps both callables and the MLP for `retime`."""
    loss, mlp = case(model, path)
    flow = jb.HamiltonianSystem._flow
    if path == "custom_vjp":  # only while this case is traced (its first calls below)
        import _learning_vjp

        jb.HamiltonianSystem._flow = _learning_vjp.flow
    forward, value_grad = eqx.filter_jit(loss), eqx.filter_jit(eqx.filter_value_and_grad(loss))
    try:  # each first call cold: no trace of an earlier path or call reused (JAX's caches cleared)
        jax.clear_caches()
        c_vg, t_vg, (value2, grad) = timed(value_grad, mlp)
        jax.clear_caches()
        c_fwd, t_fwd, value = timed(forward, mlp)
    finally:
        jb.HamiltonianSystem._flow = flow
    flat = jnp.concatenate([x.ravel() for x in jax.tree_util.tree_leaves(eqx.filter(grad, eqx.is_array))])
    return {
        "model": model,
        "path": path,
        "forward_ms": 1e3 * t_fwd,
        "value_grad_ms": 1e3 * t_vg,
        "ratio": t_vg / t_fwd,
        "compile_forward_s": c_fwd,
        "compile_value_grad_s": c_vg,
        "loss": float(value),
        "grad_norm": float(jnp.linalg.norm(flat)),
        "load": os.getloadavg()[0],
        "calls": (forward, value_grad, mlp),
    }


def retime(r: dict) -> None:
    """Time ``r``'s compiled forward and value-and-grad again (best of 5 each) and keep the best
    of every round: with ``--rounds R`` the paths are timed in turn R times, so that a change of
    the machine's speed during the run reaches them all alike."""
    forward, value_grad, mlp = r["calls"]
    r["forward_ms"] = min(r["forward_ms"], 1e3 * min(_once(forward, mlp) for _ in range(5)))
    r["value_grad_ms"] = min(r["value_grad_ms"], 1e3 * min(_once(value_grad, mlp) for _ in range(5)))
    r["ratio"] = r["value_grad_ms"] / r["forward_ms"]
    r["load"] = max(r["load"], os.getloadavg()[0])


def field_cost(model: str, evaluations: int = 100, dtype=jnp.float32) -> dict:
    """The velocity-form vector field alone (``HamiltonianSystem.velocity_field`` with the MLP drive,
    `jax.vmap` over the batch): µs per evaluation of its forward pass and of its VJP (forward plus
    reverse, w.r.t. the MLP and the state), each inside one jitted `jax.lax.fori_loop` of
    ``evaluations`` dependent calls (so that dispatch is not timed), best of 20."""
    tree = jb.load_model(model, dtype=dtype).tree
    n = tree.nv
    mlp = eqx.nn.MLP(2 * n, n, 32, 2, activation=jnp.tanh, key=jax.random.key(0), dtype=dtype)
    q = 0.5 * jax.random.normal(jax.random.key(1), (BATCH, n), dtype)
    qd = 0.3 * jax.random.normal(jax.random.key(2), (BATCH, n), dtype)
    w = jax.random.normal(jax.random.key(3), (BATCH, n), dtype)

    def field(mlp, q, qd):
        system = jb.HamiltonianSystem(tree, MLPDrive(mlp), jb.hamiltonian.LinearDamping(jnp.full(n, 0.1, dtype)))
        return system.velocity_field(0.0, {"q": q, "qd": qd, "f": jnp.zeros((1,), dtype)})["qd"]

    batched = jax.vmap(field, in_axes=(None, 0, 0))

    def forward(mlp):
        return jax.lax.fori_loop(
            0, evaluations, lambda i, c: c + 1e-3 * batched(mlp, q + 1e-3 * c, qd), jnp.zeros_like(q)
        )

    def reverse(mlp):
        def body(i, c):
            out, pull = eqx.filter_vjp(batched, mlp, q + 1e-3 * c, qd)
            _, dq, dqd = pull(w + 1e-3 * c)
            return c + 1e-3 * (out + dq + dqd)

        return jax.lax.fori_loop(0, evaluations, body, jnp.zeros_like(q))

    c_fwd, t_fwd, _ = timed(eqx.filter_jit(forward), mlp, repeats=20)
    c_rev, t_rev, _ = timed(eqx.filter_jit(reverse), mlp, repeats=20)
    return {
        "model": model,
        "forward_us": 1e6 * t_fwd / evaluations,
        "vjp_us": 1e6 * t_rev / evaluations,
        "ratio": t_rev / t_fwd,
        "compile_forward_s": c_fwd,
        "compile_vjp_s": c_rev,
        "load": os.getloadavg()[0],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="double_pendulum,arm7")
    parser.add_argument("--paths", default="default,diffrax,backsolve,grid,stored_state")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="time every compiled path again R − 1 times, in turn, keeping each one's best",
    )
    parser.add_argument(
        "--field", action="store_true", help="time the velocity-form vector field and its VJP alone (field_cost)"
    )
    args = parser.parse_args(argv)
    out = {
        "machine": _machine.machine(diffrax=diffrax.__version__, equinox=eqx.__version__),
        "load_start": _machine.load_average(),
        "cases": [],
        "rows": [],
    }
    print(out["machine"])
    print(f"load at start: {out['load_start']['uptime']}")
    if args.field:
        print(f"velocity_field under jax.vmap, batch {BATCH}, float32, µs per evaluation inside a jitted loop\n")
        print(
            f"{'model':16s} {'forward us':>10s} {'vjp us':>8s} {'ratio':>6s} {'compile fwd s':>13s} "
            f"{'compile vjp s':>13s} {'load':>5s}"
        )
        for model in args.models.split(","):
            r = field_cost(model)
            out["cases"].append(r)
            print(
                f"{model:16s} {r['forward_us']:10.1f} {r['vjp_us']:8.1f} {r['ratio']:6.2f} "
                f"{r['compile_forward_s']:13.1f} {r['compile_vjp_s']:13.1f} {r['load']:5.1f}",
                flush=True,
            )
        _machine.finish(out, args.json)
        return
    print(f"batch {BATCH}, {DURATION} s, float32, MLP 2n→32→32→n tanh; times best of 5, compile = first call\n")
    header = (
        f"{'model':16s} {'path':15s} {'forward ms':>10s} {'value+grad ms':>13s} {'ratio':>6s} "
        f"{'compile fwd s':>13s} {'compile v+g s':>13s} {'loss':>10s} {'|grad|':>10s} {'load':>5s}"
    )
    print(header)
    cases = [measure(model, path) for model in args.models.split(",") for path in args.paths.split(",")]
    for _ in range(args.rounds - 1):
        for r in cases:
            retime(r)
    for r in cases:
        r.pop("calls")
        model, path = r["model"], r["path"]
        out["cases"].append(r)
        out["rows"].append(
            _machine.row(
                f"value_and_grad of a batched simulation ({path})",
                model,
                BATCH,
                r["value_grad_ms"] / 1e3,
                unit="batch",
                compile_s=r["compile_value_grad_s"],
                peer="its forward pass, same run",
                peer_seconds=r["forward_ms"] / 1e3,
                note=f"gradient / forward = {r['ratio']:.2f}",
            )
        )
        print(
            f"{model:16s} {path:15s} {r['forward_ms']:10.1f} {r['value_grad_ms']:13.1f} {r['ratio']:6.2f} "
            f"{r['compile_forward_s']:13.1f} {r['compile_value_grad_s']:13.1f} {r['loss']:10.6f} "
            f"{r['grad_norm']:10.6f} {r['load']:5.1f}",
            flush=True,
        )
    _machine.finish(out, args.json)


if __name__ == "__main__":
    main()
