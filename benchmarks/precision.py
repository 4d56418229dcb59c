"""Float32 against float64 on the same inputs, for every operation the benchmarks time.

    python benchmarks/precision.py                  # batches of 10⁴ states, the sprint fit, ...
    python benchmarks/precision.py --quick          # batches of 10³ (about two minutes on a quiet 2-core machine)
    python benchmarks/precision.py --json out.json

Each operation runs twice on the same inputs: once with models built in float64 and float64
inputs, once with models built with ``dtype=float32`` and the inputs rounded to float32 ("dtype
follows inputs": no other switch). The float32 error therefore includes the rounding of the inputs,
as it would in a float32 program. Reported per operation: the largest absolute error
``max |x32 − x64|`` (in the output's unit) and the relative error ``max |x32 − x64| / max |x64|``
(over the whole output, so entries near zero do not blow it up). Rows:

- ``jb.inverse_dynamics``, ``jb.mass_matrix``, ``jb.forward_dynamics``, ``jb.segment_wrenches``
  (forces and moments) for ``arm7`` and ``wholebody`` under ``jit(vmap)`` over random states
  (``jb.configuration.random``, q̇ in ±2 rad/s, q̈ in ±5 rad/s², τ from the float64 inverse dynamics);
- a Hamiltonian simulation (`jb.simulate` of the double pendulum ``HamiltonianSystem``, Watanabe & Duarte's
  start ± 0.1 rad, 2 s, where chaos does not dominate yet): the same 400 fixed Tsit5 steps in both
  precisions (round-off only), and adaptive steps (float32 at rtol = atol = 1e-6 against float64
  at 1e-10: what a float32 user would run); the energy drift max_t |H(t) − H(0)| of the float32 run
  (the float64 drift in the note);
- the muscle kernels of benchmarks/muscles.py (``geometry.lengths``, ``geometry.moment_arms``,
  ``gait10dof18musc``);
- static optimisation (``static_optimization_motion`` on the swing-like frames of
  benchmarks/static_optimization.py: muscle forces);
- the sprint fit (benchmarks/sprint.py: ``fit_splits`` of bolt_2009): the fitted parameters and the
  predicted split times; the sprint code casts its inputs to Python ``float`` (JAX's default float),
  so its float32 run is the same call with ``jax.enable_x64(False)``;
- the learning environment step (``arm_env("torque")``: one ``env.step`` from the same states,
  next observation).

``jax_enable_x64`` is set by this script (never by the library).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import finish, load_average, machine  # noqa: E402  (benchmarks/_machine.py)

import jaxbio as jb  # noqa: E402

F32, F64 = jnp.float32, jnp.float64


def errors(x32, x64) -> tuple[float, float]:
    """``(max |x32 − x64|, that / max |x64|)`` over every entry (arrays or pytrees of arrays)."""
    a = np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree_util.tree_leaves(x32)])
    b = np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree_util.tree_leaves(x64)])
    err = float(np.max(np.abs(a - b)))
    return err, err / max(float(np.max(np.abs(b))), 1e-300)


def row(operation: str, model: str, batch: int, x32, x64, unit: str, note: str = "") -> dict:
    """One table row; the note says when the float32 run did not return float32 (dtype not followed)."""
    abs_err, rel_err = errors(x32, x64)
    dtypes = {
        np.asarray(x).dtype for x in jax.tree_util.tree_leaves(x32) if jnp.issubdtype(np.asarray(x).dtype, jnp.floating)
    }
    if dtypes and dtypes != {np.dtype(np.float32)}:
        note = (note + "; " if note else "") + f"float32 run returned {sorted(str(d) for d in dtypes)}"
    return {
        "operation": operation,
        "model": model,
        "batch": int(batch),
        "abs_error": abs_err,
        "rel_error": rel_err,
        "unit": unit,
        "note": note,
    }


def to32(x):
    """Every floating leaf of ``x`` cast to float32 (others unchanged)."""
    return jax.tree_util.tree_map(
        lambda v: v.astype(F32) if jnp.issubdtype(jnp.asarray(v).dtype, jnp.floating) else v, x
    )


def random_states(tree, batch: int, seed: int = 0):
    """``q`` ``(batch, nq)`` (`jb.configuration.random`: angles ±π, unit quaternions), ``qd`` in
    ±2 and ``qdd`` in ±5 ``(batch, nv)``, float64."""
    keys = jax.random.split(jax.random.key(seed), batch)
    q = jax.vmap(lambda k: jb.configuration.random(tree, k, dtype=F64))(keys)
    rng = np.random.default_rng(seed)
    return q, jnp.asarray(rng.uniform(-2, 2, (batch, tree.nv))), jnp.asarray(rng.uniform(-5, 5, (batch, tree.nv)))


def dynamics_rows(name: str, batch: int) -> list[dict]:
    """Inverse dynamics, mass matrix, forward dynamics and segment wrenches of model ``name``."""
    trees = {F64: jb.load_model(name, dtype=F64).tree, F32: jb.load_model(name, dtype=F32).tree}
    q, qd, qdd = random_states(trees[F64], batch)
    ops = {
        "inverse_dynamics": (lambda t, q, qd, qdd: jb.inverse_dynamics(t, q, qd, qdd), ("N·m (N)",)),
        "mass_matrix": (lambda t, q, qd, qdd: jb.mass_matrix(t, q), ("kg·m² (kg·m, kg)",)),
        "segment_wrenches": (lambda t, q, qd, qdd: jb.segment_wrenches(t, q, qd, qdd), ("N", "N·m")),
    }
    rows, out64 = [], {}
    for op, (f, units) in ops.items():
        fn = jax.jit(jax.vmap(f, in_axes=(None, 0, 0, 0)))
        x64 = out64[op] = fn(trees[F64], q, qd, qdd)
        x32 = fn(trees[F32], *to32((q, qd, qdd)))
        if len(units) == 1:
            rows.append(row(op, name, batch, x32, x64, units[0]))
        else:  # segment wrenches: forces, moments
            rows += [
                row(f"{op} {part}", name, batch, a, b, unit)
                for part, a, b, unit in zip(("force", "moment"), x32, x64, units)
            ]
    tau = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(trees[F64], q, qd, qdd)
    fd = jax.jit(jax.vmap(jb.forward_dynamics, in_axes=(None, 0, 0, 0)))
    x64 = fd(trees[F64], q, qd, tau)
    x32 = fd(trees[F32], *to32((q, qd, tau)))
    cond = np.linalg.cond(np.asarray(out64["mass_matrix"]))
    per_state = np.max(np.abs(np.asarray(x32, np.float64) - np.asarray(x64)), axis=1) / np.max(
        np.abs(np.asarray(x64)), axis=1
    )
    worst = int(np.argmax(per_state))
    rows.append(
        row(
            "forward_dynamics",
            name,
            batch,
            x32,
            x64,
            "rad/s² (m/s²)",
            f"τ = ID(q̈); float64 recovers q̈ to {errors(x64, qdd)[0]:.1e}; per-state rel. error median "
            f"{np.median(per_state):.1e}, worst {per_state[worst]:.1e} where cond(M) = {cond[worst]:.1e} "
            f"(cond(M) median {np.median(cond):.1e}, max {np.max(cond):.1e})",
        )
    )
    return rows


def pendulum_starts(batch: int, seed: int = 0):
    """Relative ``(q, q̇)`` ``(batch, 2)``: Watanabe & Duarte's start, angles ± 0.1 rad, rates × [0.5, 1]."""
    from jaxbio.papers import watanabe_pendulum as dp

    rng = np.random.default_rng(seed)
    th0, om0 = dp.NOTEBOOK_INITIAL_STATE
    th = jnp.asarray(th0 + rng.uniform(-0.1, 0.1, (batch, 2)))
    om = jnp.asarray(np.asarray(om0) * rng.uniform(0.5, 1.0, (batch, 1)))
    return jax.vmap(dp.to_relative)(th, om)


def simulation_rows(batch: int, duration: float = 2.0, steps: int = 400) -> list[dict]:
    """The double pendulum over ``duration`` s: fixed grid (same steps) and adaptive steps."""
    systems = {d: jb.HamiltonianSystem(jb.load_model("double_pendulum", dtype=d)) for d in (F32, F64)}
    q0, qd0 = pendulum_starts(batch)
    ts = jnp.linspace(0.0, duration, 101)

    def run(dtype, **kw):
        system = systems[dtype]

        def one(q, qd):
            y0 = system.initial_state(q.astype(dtype), qd.astype(dtype))
            if "steps" in kw:
                tr = jb.simulate(system, y0, 0.0, duration, stepsize_controller=jb.FixedGrid(kw["steps"]))
            else:
                tr = jb.simulate(system, y0, 0.0, duration, ts=ts.astype(dtype), rtol=kw["tol"], atol=kw["tol"])
            return tr.q, tr.energy

        return jax.jit(jax.vmap(one))(q0, qd0)

    rows = []
    for label, kw32, kw64 in (
        ("fixed grid", dict(steps=steps), dict(steps=steps)),
        ("adaptive", dict(tol=1e-6), dict(tol=1e-10)),
    ):
        (q32, e32), (q64, e64) = run(F32, **kw32), run(F64, **kw64)
        how = f"{steps} Tsit5 steps both" if label == "fixed grid" else "float32 rtol=atol=1e-6, float64 1e-10"
        rows.append(row(f"simulate q(t), {label}", "double_pendulum", batch, q32, q64, "rad", f"{duration:g} s, {how}"))
        drift32 = np.max(np.abs(np.asarray(e32, np.float64) - np.asarray(e32[:, :1], np.float64)))
        drift64 = np.max(np.abs(np.asarray(e64) - np.asarray(e64[:, :1])))
        scale = float(np.max(np.abs(np.asarray(e64))))
        rows.append(
            {
                "operation": f"simulate energy drift, {label}",
                "model": "double_pendulum",
                "batch": batch,
                "abs_error": float(drift32),
                "rel_error": float(drift32) / scale,
                "unit": "J",
                "note": f"max_t |H(t) − H(0)| of the float32 run; float64 run: {drift64:.1e} J",
            }
        )
    return rows


def muscle_rows(batch: int, name: str = "gait10dof18musc") -> list[dict]:
    """Muscle lengths and moment arms (benchmarks/muscles.py's kernels)."""
    from jaxbio.muscles import geometry, sets

    models = {d: sets.load_muscle_set(name, dtype=d)[:2] for d in (F32, F64)}
    tree = models[F64][0]
    rng = np.random.default_rng(0)
    q = rng.uniform(-1.0, 1.0, (batch, tree.nq))
    q[:, ~tree.is_revolute] *= 0.3
    q = jnp.asarray(q)
    rows = []
    for op, f, unit in (("muscle lengths", geometry.lengths, "m"), ("muscle moment arms", geometry.moment_arms, "m")):
        fn = jax.jit(jax.vmap(lambda tree, paths, x: f(paths, tree, x), in_axes=(None, None, 0)))
        x64 = fn(*models[F64], q)
        x32 = fn(*models[F32], to32(q))
        rows.append(row(op, name, batch, x32, x64, unit))
    return rows


def static_optimization_rows(frames: int, name: str = "gait10dof18musc") -> list[dict]:
    """Muscle forces of static optimisation on benchmarks/static_optimization.py's frames."""
    from static_optimization import RESERVES, motion  # benchmarks/static_optimization.py

    from jaxbio.estimation import static_optimization_motion
    from jaxbio.muscles import sets

    q, qd, qdd = motion(name, frames)
    out = {}
    for d in (F32, F64):
        tree, paths, params = sets.load_muscle_set(name, dtype=d)
        res = static_optimization_motion(
            tree, paths, params, *(x.astype(d) for x in (q, qd, qdd)), reserve_strength=RESERVES[name]
        )
        out[d] = res
    ok = np.asarray(out[F64].converged) & np.asarray(out[F32].converged)
    forces = {d: np.asarray(out[d].forces)[ok] for d in out}
    return [
        row(
            "static optimisation forces",
            name,
            frames,
            forces[F32],
            forces[F64],
            "N",
            f"p = 2, interior point; {ok.sum()}/{frames} frames converged in both "
            f"(float32 {np.mean(np.asarray(out[F32].converged)):.0%}, float64 "
            f"{np.mean(np.asarray(out[F64].converged)):.0%})",
        )
    ]


def sprint_rows(race_name: str = "bolt_2009") -> list[dict]:
    """Fitted parameters and predicted split times of the sprint fit, float32 against float64."""
    import jaxbio.sprint as sprint
    from jaxbio.sprint.fitting import fit_splits
    from jaxbio.sprint.model import UNITS

    race = sprint.load_race(race_name)

    def fit():
        one = sprint.Splits.from_arrays([race.distances], [race.times], [race.reaction_time], [race.wind])
        res = fit_splits(one)
        return res, np.asarray(res.values), np.asarray(res.predicted)

    r64, v64, p64 = fit()
    with jax.enable_x64(False):
        r32, v32, p32 = fit()
    rows = []
    for j, name in enumerate(r64.names):
        rows.append(
            row(
                f"sprint fit {name}",
                race_name,
                1,
                v32[:, j].astype(np.float32),
                v64[:, j],
                UNITS[name],
                f"fitted value {v64[0, j]:.6g}; converged f32 {bool(r32.converged[0])}, f64 {bool(r64.converged[0])}",
            )
        )
    rows.append(
        row(
            "sprint predicted split times",
            race_name,
            1,
            p32.astype(np.float32),
            p64,
            "s",
            f"RMSE to the data f32 {float(r32.rmse[0]):.4f} s, f64 {float(r64.rmse[0]):.4f} s",
        )
    )
    return rows


def env_rows(batch: int) -> list[dict]:
    """One step of the arm7 torque reaching environment from the same states and actions."""
    from jaxbio.learning import env as E

    envs = {d: E.arm_env("torque", dtype=d) for d in (F32, F64)}
    keys = jax.random.split(jax.random.key(0), batch)
    _, states = jax.jit(jax.vmap(envs[F64].reset))(keys)
    acts = (
        jax.random.uniform(jax.random.key(1), (batch, envs[F64].action_size), F64, -1.0, 1.0) * envs[F64].torque_limit
    )
    out = {}
    for d in (F32, F64):
        s, a = (to32(states), acts.astype(F32)) if d == F32 else (states, acts)
        obs, _, reward, _, _ = jax.jit(jax.vmap(envs[d].step))(s, a)
        out[d] = (obs, reward)
    return [
        row(
            "env.step observation",
            "arm7 torque env",
            batch,
            out[F32][0],
            out[F64][0],
            "rad, rad/s (obs)",
            "20 ms, 2 Tsit5 steps",
        ),
        row("env.step reward", "arm7 torque env", batch, out[F32][1], out[F64][1], "-"),
    ]


SECTIONS = ("dynamics", "simulation", "muscles", "static_optimization", "sprint", "env")


def all_rows(quick: bool, sections=SECTIONS, log=print) -> list[dict]:
    batch = 1_000 if quick else 10_000
    rows = []
    plan = {
        "dynamics": lambda: dynamics_rows("arm7", batch) + dynamics_rows("wholebody", batch),
        "simulation": lambda: simulation_rows(100 if quick else 1_000),
        "muscles": lambda: muscle_rows(batch),
        "static_optimization": lambda: static_optimization_rows(200 if quick else 1_000),
        "sprint": lambda: sprint_rows(),
        "env": lambda: env_rows(100 if quick else 1_000),
    }
    for s in sections:
        t0 = time.perf_counter()
        new = plan[s]()
        rows += new
        for r in new:
            log(format_row(r))
        log(f"  ({s}: {time.perf_counter() - t0:.1f} s)")
    return rows


def format_row(r: dict) -> str:
    return (
        f"| {r['operation']} | {r['model']} | {r['batch']} | {r['abs_error']:.2e} | {r['rel_error']:.2e} | "
        f"{r['unit']} | {r['note']} |"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batches of 10³ (simulation 100, frames 200)")
    ap.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = {"machine": machine(), "load_start": load_average()}
    print(out["machine"])
    print(f"load at start: {out['load_start']['uptime']}\n")
    print("| operation | model | batch | max abs error | rel error | unit | note |")
    print("|---|---|---:|---:|---:|---|---|", flush=True)
    out["rows"] = all_rows(a.quick, a.sections, log=lambda s: print(s, flush=True))
    finish(out, a.json)


if __name__ == "__main__":
    main()
