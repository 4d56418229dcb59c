"""Batched Hamiltonian simulation vs scipy's solve_ivp, timed in the same run.

    python benchmarks/hamiltonian.py            # batch 10⁴ (a few minutes on 2 cores)
    python benchmarks/hamiltonian.py --quick    # batch 10³

Double pendulum of Watanabe & Duarte, 20 s, rtol = atol = 1e-8, float64. scipy: a Python loop of
`solve_ivp(DOP853)` on the closed form (NumPy), timed on a few trajectories. jaxbio, all Diffrax
solves with a `PIDController(rtol, atol)` (per-trajectory adaptive steps):

* `jit(vmap(simulate))` of the segment-tree `HamiltonianSystem` (Tsit5), at batch 1 and
  ``--tree-batch`` (default min(batch, 1000)); and the same by `jb.batch(..., chunk_size=)` on one
  device at the full batch (chunks of 250, or a quarter of a smaller batch, run one after another:
  at 10⁴ trajectories one `jit(vmap)` is slower per trajectory, its batched while loop's state no
  longer fits the caches), and by `jb.batch` on two CPU devices (half the batch each, in chunks);
* `jit(vmap(diffeqsolve))` of Watanabe & Duarte's closed form as written (`dp.accelerations`, Tsit5);
* `dp.simulate_batch` — the fast path: `dp.vector_field` (2×2 inverse written out, vectorisable
  `dp.sincos`, accelerations materialised), vmapped, chunked (``lax.map``), and sharded over two
  CPU devices (``jb.batch``, a ``shard_map``; this script asks XLA for 2 host devices before importing jax).

Each row prints compile time, run time per trajectory, the ratio to the solve_ivp loop, mean
steps, the max |Δθ| against scipy on the first trajectories (chaotic over 20 s: only a rough
check) and the max energy error |E(T) − E(0)| over the batch (the meaningful accuracy check).
Then the same measurement on the 7-DOF arm and the whole body (free root, ball joints; nq 34,
nv 28), 20 s from random states (angles within ±0.5 rad, velocities within ±1), rtol = atol = 1e-8,
float64: a Python loop of `solve_ivp(DOP853)` whose right-hand side is the *per-state* jitted
`HamiltonianSystem.vector_field` on the flattened state (per-state LAPACK Cholesky, autodiff
∂T/∂q; ~10 µs of Python and dispatch per call are part of what scipy costs) against
`jit(vmap(simulate))` of the same system at ``--model-batch`` (default 100) trajectories, ratio in
the same run (``--models ""`` skips them).
Last, the cost of one vector-field evaluation (tree vs closed form) and of ∂H/∂q routes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# Two host devices for the sharded rows: must be set before jax is imported (never in jaxbio).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

jax.config.update("jax_enable_x64", True)

import jaxbio as jb  # noqa: E402
from jaxbio.papers import watanabe_pendulum as dp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _machine import finish, machine, row  # noqa: E402  (benchmarks/_machine.py)

T, TOL = 20.0, 1e-8


def initial_states(n, seed=0):
    rng = np.random.default_rng(seed)
    th0, om0 = dp.NOTEBOOK_INITIAL_STATE
    return th0 + rng.uniform(-0.1, 0.1, (n, 2)), om0 * rng.uniform(0.5, 1.0, (n, 1))


def scipy_rhs(par):
    m1, m2, l1, l2, g = par

    def f(t, y):
        th, om = y[:2], y[2:]
        d = th[0] - th[1]
        M = np.array(
            [
                [m1 * l1**2 / 3 + m2 * l1**2, m2 * l1 * l2 * np.cos(d) / 2],
                [m2 * l1 * l2 * np.cos(d) / 2, m2 * l2**2 / 3],
            ]
        )
        C = np.array([-m2 * l1 * l2 * np.sin(d) * om[1] ** 2 / 2, m2 * l1 * l2 * np.sin(d) * om[0] ** 2 / 2])
        G = np.array([-(m1 * g * l1 / 2 + m2 * g * l1) * np.sin(th[0]), -m2 * g * l2 / 2 * np.sin(th[1])])
        return np.concatenate([om, np.linalg.solve(M, C + G)])

    return f


def time_scipy(th, om, k):
    """Per-trajectory time of the solve_ivp loop; final (θ, ω) (k, 4) and mean steps."""
    f = scipy_rhs(dp.Parameters())
    t0 = time.perf_counter()
    sols = [solve_ivp(f, (0, T), np.concatenate([th[i], om[i]]), method="DOP853", rtol=TOL, atol=TOL) for i in range(k)]
    per = (time.perf_counter() - t0) / k
    return per, np.array([s.y[:, -1] for s in sols]), np.mean([s.t.size - 1 for s in sols])


def energy_error(th0, om0, th1, om1):
    """max |E(T) − E(0)| J over the batch (NumPy, Watanabe & Duarte's energy)."""
    e = jax.jit(jax.vmap(lambda a, b: dp.energy(dp.Parameters(), a, b)))
    return float(np.max(np.abs(np.asarray(e(th1, om1)) - np.asarray(e(th0, om0)))))


def tree_solver(chunk_size=None, devices=1):
    """`jit(vmap(simulate))` of the segment-tree `HamiltonianSystem`; with ``chunk_size``, the same
    by `jb.batch` on the first ``devices`` CPU devices, ``chunk_size`` trajectories vmapped at a
    time on each (a `lax.map` over chunks: the batched while loop's state stays in cache)."""
    tree = jb.load_model("double_pendulum", dtype=jnp.float64).tree
    system = jb.HamiltonianSystem(tree)

    def one(th, om):
        q, qd = dp.to_relative(th, om)
        tr = jb.simulate(system, system.initial_state(q, qd), 0.0, T, rtol=TOL, atol=TOL, max_steps=200_000)
        th1, om1 = dp.to_absolute(tr.q[-1], tr.qd[-1])
        return th1, om1, tr.solution.stats["num_steps"]

    if chunk_size is None:
        return jax.jit(jax.vmap(one))
    return jb.batch(one, devices=jax.devices()[:devices], chunk_size=chunk_size)


def closed_form_solver():
    par = dp.Parameters()

    def one(th, om):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, a: (y[1], dp.accelerations(par, *y))),
            diffrax.Tsit5(),
            0.0,
            T,
            None,
            (th, om),
            stepsize_controller=diffrax.PIDController(rtol=TOL, atol=TOL),
            max_steps=200_000,
        )
        return sol.ys[0][-1], sol.ys[1][-1], sol.stats["num_steps"]

    return jax.jit(jax.vmap(one))


def fast_solver(chunk_size=None, solver=None):
    return jax.jit(
        lambda th, om: dp.simulate_batch(th, om, T, rtol=TOL, atol=TOL, chunk_size=chunk_size, solver=solver)
    )


def sharded_solver(chunk_size=None):
    """`dp.simulate_batch` on each of two CPU devices (half the batch each): `jb.batch` of the
    already-batched function (``vectorized=True``), and the input sharding it splits to."""
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()[:2]
    f = jb.batch(
        lambda th, om: dp.simulate_batch(th, om, T, rtol=TOL, atol=TOL, chunk_size=chunk_size),
        devices=devices,
        vectorized=True,
    )
    mesh = jax.sharding.Mesh(np.array(devices), (jb.batching.AXIS,))
    return f, jax.sharding.NamedSharding(mesh, P(jb.batching.AXIS))


def time_jax(fn, th, om, sharding=None):
    """Compile time, run time per trajectory (first run after compiling) and the outputs. A
    function without ``lower`` (`jb.batch`): compile time = first call − second call."""
    if sharding is not None:
        th, om = jax.device_put(th, sharding), jax.device_put(om, sharding)
    if not hasattr(fn, "lower"):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(th, om))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(th, om))
        run = time.perf_counter() - t0
        return first - run, run / len(th), [np.asarray(x) for x in out]
    t0 = time.perf_counter()
    compiled = fn.lower(th, om).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(th, om))
    return compile_s, (time.perf_counter() - t0) / len(th), [np.asarray(x) for x in out]


def vector_field_costs(batch=10_000):
    """ns per state of one vector-field evaluation, jit(vmap) over a batch of states."""
    from jaxbio import hamiltonian as ham

    tree = jb.load_model("double_pendulum", dtype=jnp.float64).tree
    system = jb.HamiltonianSystem(tree)
    th, om = (jnp.asarray(x) for x in initial_states(batch))
    ys = jax.vmap(lambda a, b: system.initial_state(*dp.to_relative(a, b)))(th, om)
    par = dp.Parameters()
    cases = {
        "tree HamiltonianSystem.vector_field": (lambda y: system.vector_field(0.0, y), (ys,)),
        "  of which the tree terms (one kernel)": (lambda y: ham._tree_terms(tree, y["q"], y["p"]), (ys,)),
        "  before: velocities (M, LAPACK Cholesky)": (lambda y: ham.velocities(tree, y["q"], y["p"]), (ys,)),
        "  before: dH_dq": (lambda y: ham.dH_dq(tree, y["q"], y["p"]), (ys,)),
        "  of which mass_matrix": (lambda y: jb.mass_matrix(tree, y["q"]), (ys,)),
        "closed form dp.accelerations (linalg.solve)": (lambda a, b: dp.accelerations(par, a, b), (th, om)),
        "closed form dp.vector_field (fast)": (lambda a, b: dp.vector_field(0.0, (*a, *b), par), (th, om)),
    }
    print(f"vector field, jit(vmap) over {batch} states (ns / state):")
    for label, (f, args) in cases.items():
        c = jax.jit(jax.vmap(f)).lower(*args).compile()
        jax.block_until_ready(c(*args))
        t0 = time.perf_counter()
        for _ in range(10):
            jax.block_until_ready(c(*args))
        print(f"  {label:46s} {(time.perf_counter() - t0) / 10 / batch * 1e9:9.1f}")


def _load(name):
    """A shipped model; ``wholebody_hinges``: the shipped wholebody with its free and ball joints as
    hinge chains and massless links (tests/_models.hinge_chains), the 28-DOF axial tree that the
    batch-last kernels run on (the per-state code's ``jax.grad`` of T is ∂T/∂q only for axial trees)."""
    if name != "wholebody_hinges":
        return jb.load_model(name, dtype=jnp.float64).tree
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from jaxbio.model import model_path
    from tests._models import hinge_chains

    d = hinge_chains(json.loads(model_path("wholebody").read_text()))
    return jb.SegmentTree.from_dict(d, dtype=jnp.float64)


def tree_vector_field_routes(batch=10_000):
    """ns per state of `HamiltonianSystem.vector_field` under jit(vmap) for several models: as
    jaxbio runs it (batch-last kernels for M, ∂T/∂q and g) and as ``vmap`` of the per-state code
    (segment-Jacobian M, ``jax.grad`` of T, per-state recursion for g), same Cholesky solve."""
    import jax.scipy.linalg as jsl

    from jaxbio.dynamics.energy import _plain_gradient
    from jaxbio.dynamics._mass_matrix import _jacobian_mass_matrix
    from jaxbio.dynamics._rnea import _plain_tau

    def per_state_field(tree, y):
        q, p = y["q"], y["p"]
        qd = jsl.cho_solve(jsl.cho_factor(_jacobian_mass_matrix(tree, q)), p)
        zero = jnp.zeros_like(q)
        return {"q": qd, "p": _plain_gradient(tree, q, qd) - _plain_tau(tree, q, zero, zero)}

    def per_call(f, y):
        c = jax.jit(jax.vmap(f)).lower(y).compile()
        jax.block_until_ready(c(y))
        best = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(3):
                jax.block_until_ready(c(y))
            best = min(best, (time.perf_counter() - t0) / 3)
        return best / batch * 1e9

    print(f"HamiltonianSystem.vector_field, jit(vmap) over {batch} states (ns / state):")
    for name in ("double_pendulum", "arm7", "sagittal11", "wholebody_hinges"):
        tree = _load(name)
        system = jb.HamiltonianSystem(tree)
        rng = np.random.default_rng(0)
        keys = jax.random.split(jax.random.PRNGKey(0), batch)
        q = jax.vmap(lambda k: jb.configuration.random(tree, k, angle=1.0, distance=1.0))(keys)  # (batch, nq)
        qd = jnp.asarray(rng.uniform(-1, 1, (batch, tree.nv)))
        ys = jax.vmap(lambda a, b: system.initial_state(a, b))(q, qd)
        fast = per_call(lambda y: system.vector_field(0.0, y), ys)
        slow = per_call(lambda y: per_state_field(tree, y), ys)
        print(
            f"  {name:16s} batched kernels {fast:9.1f}   vmap of per-state code {slow:9.1f}   ratio {slow / fast:5.1f}x"
        )


def dH_dq_routes(batch=1000):
    """∂H/∂q by the Legendre route (−∂T/∂q at fixed q̇, jaxbio's) against jax.grad(H) through
    the Cholesky factorisation; µs per state, vmapped."""
    from jaxbio import hamiltonian as ham

    print(f"∂H/∂q, batch {batch}: jaxbio's route (−∂T/∂q|q̇ + g) vs jax.grad(H)")
    for name in ("double_pendulum", "arm7", "sagittal11"):
        tree = jb.load_model(name, dtype=jnp.float64).tree
        rng = np.random.default_rng(0)
        Q, QD = (jnp.asarray(rng.uniform(-1, 1, (batch, tree.nq))) for _ in range(2))
        routes = {
            "legendre": lambda q, qd: ham.dH_dq(tree, q, qd),
            "grad(H)": lambda q, qd: jax.grad(ham.hamiltonian, argnums=1)(tree, q, jb.mass_matrix(tree, q) @ qd),
        }
        res = {}
        for label, f in routes.items():
            c = jax.jit(jax.vmap(f)).lower(Q, QD).compile()
            out = jax.block_until_ready(c(Q, QD))
            t0 = time.perf_counter()
            for _ in range(5):
                jax.block_until_ready(c(Q, QD))
            res[label] = ((time.perf_counter() - t0) / 5 / batch * 1e6, np.asarray(out))
        err = np.max(np.abs(res["legendre"][1] - res["grad(H)"][1]))
        print(
            f"  {name:16s} legendre {res['legendre'][0]:8.3f} µs, grad(H) {res['grad(H)'][0]:8.3f} µs, "
            f"ratio {res['grad(H)'][0] / res['legendre'][0]:5.1f}×, max |Δ| {err:.1e}"
        )


def models_vs_scipy(names=("arm7", "wholebody"), batch=100, k=2, duration=T, peer_device=None):
    """Rows of the arm and the whole body: a solve_ivp loop on the per-state vector field against
    jit(vmap(simulate)), ms per trajectory and the ratio, same run. ``peer_device``: where the
    loop's per-state field runs (default: JAX's default device; a CPU device on a GPU machine)."""
    from jax.flatten_util import ravel_pytree

    rows = []
    for name in names:
        tree = jb.load_model(name, dtype=jnp.float64).tree
        system = jb.HamiltonianSystem(tree)
        keys = jax.random.split(jax.random.PRNGKey(1), batch)
        q0 = jax.vmap(lambda key: jb.configuration.random(tree, key, angle=0.5, distance=0.1))(keys)
        qd0 = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (batch, tree.nv)))
        y0 = jax.vmap(system.initial_state)(q0, qd0)
        flat0, unravel = ravel_pytree(jax.tree_util.tree_map(lambda x: x[0], y0))
        peer = system if peer_device is None else jax.device_put(system, peer_device)
        rhs = jax.jit(lambda y: ravel_pytree(peer.vector_field(0.0, unravel(y)))[0])
        if peer_device is not None:
            flat0 = jax.device_put(flat0, peer_device)
        jax.block_until_ready(rhs(flat0))
        t0 = time.perf_counter()
        place = (lambda y: y) if peer_device is None else (lambda y: jax.device_put(y, peer_device))
        sols = [
            solve_ivp(
                lambda t, y: np.asarray(rhs(place(y))),
                (0, duration),
                np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda x, i=i: x[i], y0))[0]),
                method="DOP853",
                rtol=TOL,
                atol=TOL,
            )
            for i in range(k)
        ]
        t_sp = (time.perf_counter() - t0) / k
        sp_steps = np.mean([s.t.size - 1 for s in sols])

        def one(y):
            tr = jb.simulate(system, y, 0.0, duration, rtol=TOL, atol=TOL, max_steps=1_000_000)
            return tr.q[-1], tr.energy[-1], tr.solution.stats["num_steps"]

        fn = jax.jit(jax.vmap(one))
        t0 = time.perf_counter()
        compiled = fn.lower(y0).compile()
        c = time.perf_counter() - t0
        t0 = time.perf_counter()
        qT, eT, steps = (np.asarray(x) for x in jax.block_until_ready(compiled(y0)))
        per = (time.perf_counter() - t0) / batch
        e0 = np.asarray(jax.vmap(system.energy)(y0))
        dq = np.max(np.abs(qT[:k] - np.array([s.y[: tree.nq, -1] for s in sols])))
        print(
            f"{name:10s} scipy solve_ivp DOP853 loop (per-state jitted field), {k} traj.: {t_sp * 1e3:9.1f} ms / "
            f"trajectory, {sp_steps:6.0f} steps",
            flush=True,
        )
        print(
            f"{name:10s} jaxbio jit(vmap(simulate)), Tsit5, batch {batch}: compile {c:5.1f} s, {per * 1e3:9.2f} ms / "
            f"trajectory, {t_sp / per:7.1f}× solve_ivp, {np.mean(steps):6.0f} steps, max |Δq| vs scipy {dq:.1e}, "
            f"max |ΔE| {np.max(np.abs(eT - e0)):.1e} J",
            flush=True,
        )
        rows.append((name, batch, c, per, t_sp / per))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="batch 10³ instead of 10⁴")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--tree-batch", type=int, default=None, help="batch of the tree rows (default min(batch, 1000))")
    ap.add_argument("--scipy-trajectories", type=int, default=5)
    ap.add_argument(
        "--models",
        default="arm7,wholebody",
        help="comma-separated models for the rows against solve_ivp on the per-state field ('' for none)",
    )
    ap.add_argument("--model-batch", type=int, default=100)
    ap.add_argument("--only-models", action="store_true", help="only the model rows")
    ap.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    if args.only_models:
        rows = models_vs_scipy(models, args.model_batch)
        finish({"machine": machine(), "rows": common_rows(rows, models, None)}, args.json)
        return rows
    n = args.batch or (1_000 if args.quick else 10_000)
    n_tree = args.tree_batch or min(n, 1_000)
    th, om = initial_states(n)
    print(
        f"double pendulum (Watanabe & Duarte), {T:.0f} s, rtol = atol = {TOL:g}, float64, backend {jax.default_backend()}, "
        f"{len(jax.devices())} devices, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"
    )
    k = args.scipy_trajectories
    t_sp, ref, sp_steps = time_scipy(th, om, k)
    e_sp = energy_error(th[:k], om[:k], ref[:, :2], ref[:, 2:])
    print(
        f"{'scipy solve_ivp DOP853 loop':44s} batch {k:6d}: {'':15s} {t_sp * 1e3:9.3f} ms / trajectory, "
        f"{1.0:7.1f}× solve_ivp, {sp_steps:6.0f} steps, {'':10s} max |ΔE| {e_sp:.1e} J"
    )
    chunk = 1_000 if n >= 2_000 else max(1, n // 4)
    tree_chunk = min(250, max(1, n // 4))  # 128–250 measured best at 10⁴ (benchmarks/README.md)
    rows = []
    cases = [
        ("jaxbio HamiltonianSystem (tree), Tsit5", tree_solver(), None, (1, n_tree)),
        (f"tree, Tsit5, jb.batch chunks of {tree_chunk}", tree_solver(tree_chunk), None, (n,)),
        ("Diffrax on the closed form, Tsit5", closed_form_solver(), None, (1, n)),
        ("dp.simulate_batch (fast), Tsit5", fast_solver(), None, (1, n)),
        (f"dp.simulate_batch, Tsit5, chunks of {chunk}", fast_solver(chunk), None, (n,)),
        ("dp.simulate_batch (fast), Dopri8", fast_solver(solver=diffrax.Dopri8()), None, (n,)),
    ]
    if len(jax.devices()) >= 2:
        cases.append(
            (
                f"tree, Tsit5, jb.batch on 2 devices, chunks of {tree_chunk}",
                tree_solver(tree_chunk, 2),
                None,
                (n - n % 2,),
            )
        )
        f2, sharding = sharded_solver()
        cases.append(("dp.simulate_batch, Tsit5, 2 devices", f2, sharding, (n - n % 2,)))
        f2c, sharding = sharded_solver(chunk // 2)
        cases.append((f"dp.simulate_batch, Tsit5, 2 dev., chunks {chunk // 2}", f2c, sharding, (n - n % 2,)))
    for name, fn, sharding, batches in cases:
        for batch in batches:
            c, per, (th1, om1, steps) = time_jax(fn, jnp.asarray(th[:batch]), jnp.asarray(om[:batch]), sharding)
            m = min(k, batch)
            err = np.max(np.abs(np.angle(np.exp(1j * (th1[:m] - ref[:m, :2])))))
            e_err = energy_error(th[:batch], om[:batch], th1, om1)
            rows.append((name, batch, c, per, t_sp / per))
            print(
                f"{name:44s} batch {batch:6d}: compile {c:5.2f} s, {per * 1e3:9.3f} ms / trajectory, "
                f"{t_sp / per:7.1f}× solve_ivp, {np.mean(steps):6.0f} steps, max |Δθ| {err:.1e} rad, "
                f"max |ΔE| {e_err:.1e} J",
                flush=True,
            )
    if models:
        rows += models_vs_scipy(models, args.model_batch)
    vector_field_costs()
    tree_vector_field_routes()
    dH_dq_routes()
    finish({"machine": machine(), "rows": common_rows(rows, models, t_sp)}, args.json)
    return rows


def common_rows(rows, models, t_scipy) -> list[dict]:
    """The common table's rows (`_machine.row`) of ``(name, batch, compile s, s per trajectory,
    ratio)``: the double-pendulum rows against the closed-form solve_ivp loop (``t_scipy`` s per
    trajectory), the model rows against solve_ivp on their per-state vector field."""
    out = []
    for name, batch, compile_s, per, ratio in rows:
        if name in models:
            out.append(
                row(
                    f"{T:.0f} s simulation, jit(vmap(jb.simulate))",
                    name,
                    batch,
                    per,
                    unit="trajectory",
                    compile_s=compile_s,
                    peer="solve_ivp DOP853 on the per-state jitted field",
                    peer_seconds=per * ratio,
                )
            )
        else:
            out.append(
                row(
                    f"{T:.0f} s simulation: {name}",
                    "double pendulum (Watanabe & Duarte)",
                    batch,
                    per,
                    unit="trajectory",
                    compile_s=compile_s,
                    peer="solve_ivp DOP853 loop, closed form (NumPy)",
                    peer_seconds=t_scipy,
                )
            )
    return out


if __name__ == "__main__":
    main()
