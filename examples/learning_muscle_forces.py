"""An amortised muscle-force estimator: a network from (q, q̇, q̈) to the 18 activations of
gait10dof18musc, trained with no labels on the physics of static optimisation, checked on held-out
frames against the library's solver and timed against it in the same run.

    python examples/learning_muscle_forces.py [--steps 16000]

1. Frames: random swing-like motions of both legs (the motion of examples/static_optimization.py
   with random frequency 0.7–0.9 Hz, amplitudes ×0.8–1.1, offsets ±0.05 rad, phases ±0.2 rad);
   32768 training frames from 8192 motions; 1032 held-out frames: 992 from 32 other motions and the
   example's own 40-frame cycle. Reserve actuators (1000 N·m) on the pelvis and lumbar
   coordinates, which no muscle crosses, as in the static-optimisation example. Float32 throughout.
2. Training (`jaxbio.learning.estimators.train`, Adam, no labels): a dual network predicts the
   moment multipliers by maximising static optimisation's Lagrangian (objective + multipliers ×
   joint-moment residual, minimised in closed form over activations and reserves), and the
   activation network (a clipped MLP, activations in [0, 1] by construction) learns the
   activations that those multipliers give after two Newton steps on the same dual
   (``target_steps=2``, the default); width 128, 16000 steps of 512 frames.
3. Held-out check against `jaxbio.estimation.static_optimization` (interior point + active-set
   polish): the largest force error per muscle as % of the peak force; the joint-moment residual
   the network leaves (the solver leaves none); the physics loss of both.
4. The network's dual estimate refined on the frame's physics (`refined_activations`: 1–3
   semismooth Newton steps on static optimisation's dual from the dual network's multipliers,
   then the closed-form activations): force errors per frame against the solver.
5. Time per frame, batched and jitted, same run: the network; the refinement and the solver, both
   on precomputed frame data (inverse dynamics, moment arms, F̂, P) and both from (q, q̇, q̈) with
   that data computed. The network's activations need no frame data: from (q, q̇, q̈) they are the
   whole cost; its forces a F̂ + P need the muscle lengths and velocities (for F̂ and P).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio.estimation import static_optimization
from jaxbio.learning import estimators as est

RESERVES = {"pelvis_tx": 1000.0, "pelvis_ty": 1000.0, "pelvis": 1000.0, "torso": 1000.0}
AMP = np.array([0.0, 0.0, 0.03, 0.24, 0.3, 0.09, 0.24, 0.3, 0.09, 0.03])
OFF = np.array([0.0, 0.9, 0.0, 0.1, -0.6, 0.0, 0.1, -0.6, 0.0, 0.0])
PHASE = np.array([0, 0, 0, 0, -0.5 * np.pi, 0.3, np.pi, 0.5 * np.pi, np.pi + 0.3, 0])


def swing_frames(seed, motions, per_motion):
    """``(q, qd, qdd)`` ``(motions·per_motion, 10)``: random frames of random swing-like motions."""
    rng = np.random.default_rng(seed)
    w = 2 * np.pi * rng.uniform(0.7, 0.9, (motions, 1, 1))
    amp = AMP * rng.uniform(0.8, 1.1, (motions, 1, 10))
    off = OFF + rng.uniform(-0.05, 0.05, (motions, 1, 10)) * (AMP > 0)
    arg = 2 * np.pi * rng.uniform(0, 1, (motions, per_motion, 1)) + PHASE + rng.uniform(-0.2, 0.2, (motions, 1, 10))
    q, qd, qdd = off + amp * np.sin(arg), amp * w * np.cos(arg), -amp * w**2 * np.sin(arg)
    return tuple(x.reshape(-1, 10) for x in (q, qd, qdd))


def example_cycle(T=40, frequency=0.8):
    """The 40-frame cycle of examples/static_optimization.py."""
    w = 2 * np.pi * frequency
    arg = w * np.linspace(0.0, 1.0 / frequency, T)[:, None] + PHASE
    return OFF + AMP * np.sin(arg), AMP * w * np.cos(arg), -AMP * w**2 * np.sin(arg)


def best_time(fn, *args, repeats=20):
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return min(times)


def main(steps=16000, batch_size=512):
    f32 = jnp.float32
    print(
        f"# amortised static optimisation, gait10dof18musc, float32; backend {jax.default_backend()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    problem = est.MuscleProblem.from_muscle_set("gait10dof18musc", reserve_strength=RESERVES, dtype=f32)
    names = problem.paths.names
    train_frames = [jnp.asarray(x, f32) for x in swing_frames(0, 8192, 4)]
    held = [np.concatenate([a, b]) for a, b in zip(swing_frames(1, 32, 31), example_cycle())]
    q, qd, qdd = (jnp.asarray(x, f32) for x in held)
    T = q.shape[0]

    # 1–2. train with no labels
    net = est.AmortizedStaticOptimization.from_frames(
        *train_frames, n_muscles=problem.n_muscles, key=jax.random.key(0), width=128, depth=2, dtype=f32
    )
    t0 = time.perf_counter()
    net, losses = est.train(
        net,
        problem,
        *train_frames,
        key=jax.random.key(1),
        steps=steps,
        batch_size=batch_size,
        learning_rate=3e-3,
        progress=sys.stderr.isatty(),
    )
    jax.block_until_ready(losses)
    print(
        f"1. trained on {train_frames[0].shape[0]} frames, {steps} Adam steps of {batch_size} frames: "
        f"{time.perf_counter() - t0:.0f} s (compile included); training loss {float(losses[:50].mean()):.3f} "
        f"→ {float(losses[-50:].mean()):.3f}"
    )

    # 3. held-out frames against the solver
    data = est.frames_data(problem, q, qd, qdd)

    def solve(d):
        return static_optimization(
            d.moment_arms, d.tau, d.max_force, passive_force=d.passive_force, reserve_strength=problem.reserve_strength
        )

    solve_frames = jax.jit(jax.vmap(solve))
    so = solve_frames(data)
    print(
        f"2. {T} held-out frames (32 unseen motions + the example's cycle); the solver: "
        f"{int(so.feasible.sum())}/{T} feasible, {int(so.converged.sum())}/{T} converged"
    )
    network = jax.jit(jax.vmap(net))
    a = network(q, qd, qdd)
    a_dual = jax.jit(jax.vmap(lambda *x: net.dual_activations(problem, *x)))(q, qd, qdd)
    forces = a * data.max_force + data.passive_force
    forces_dual = a_dual * data.max_force + data.passive_force
    peak = float(so.forces.max())
    err = np.abs(np.asarray(forces - so.forces))
    err_dual = np.abs(np.asarray(forces_dual - so.forces))
    print(f"   activations in [{float(a.min()):.3f}, {float(a.max()):.3f}]; peak solver force {peak:.0f} N")
    print(f"   {'muscle':14s} {'peak F SO N':>11s} {'max |ΔF| N':>11s} {'% of peak':>10s}")
    for i, name in enumerate(names):
        print(
            f"   {name:14s} {float(so.forces[:, i].max()):11.1f} {err[:, i].max():11.1f} {100 * err[:, i].max() / peak:10.2f}"
        )
    print(
        f"   network: max |ΔF| {100 * err.max() / peak:.2f} % of peak ({err.max():.1f} N), "
        f"99th percentile over frames {100 * np.percentile(err.max(1), 99) / peak:.2f} %, "
        f"median {100 * np.median(err.max(1)) / peak:.2f} %  (target ≤ 5 %)"
    )
    print(
        f"   a(λ) of the dual network (with the frame's moment arms): max |ΔF| {100 * err_dual.max() / peak:.2f} % "
        f"of peak, median {100 * np.median(err_dual.max(1)) / peak:.2f} %"
    )
    terms = jax.vmap(lambda d, x: est.physics_terms(problem, d, x))(data, a)
    crossed = np.asarray(problem.reserve_strength) == 0
    res = np.abs(np.asarray(terms.residual))[:, crossed]
    tau = np.abs(np.asarray(data.tau))[:, crossed]
    print(
        f"   residual moments the network leaves at the muscle-driven joints: max {res.max():.2f} N·m, "
        f"mean {res.mean():.3f} N·m (|τ| there up to {tau.max():.0f} N·m, mean {tau.mean():.1f}); "
        f"the solver: max {float(jnp.abs(so.residual).max()):.1e} N·m"
    )
    print(
        f"   physics loss (Σa² + Σy² + {est.RESIDUAL_WEIGHT:g}·Σ(r/σ)²), mean per frame: network "
        f"{float(terms.loss().mean()):.4f}, solver {float(so.cost.mean()):.4f}"
    )

    # 4. refinement of the dual network's multipliers on the frame's physics
    us = lambda t: 1e6 * t / T  # noqa: E731
    print(
        "4. refined: k Newton steps on the dual from the dual network's λ, then a(λ); largest force error "
        "per frame, % of peak"
    )
    rows = [("network", err.max(1))]
    for k in (1, 2, 3):
        a_k = jax.jit(jax.vmap(lambda *x, k=k: net.refined_activations(problem, *x, steps=k)))(q, qd, qdd)
        rows.append((f"refine={k}", np.abs(np.asarray(a_k * data.max_force + data.passive_force - so.forces)).max(1)))
    for name, e in rows:
        print(
            f"   {name:10s} median {100 * np.median(e) / peak:6.3f} %, 99th pct {100 * np.percentile(e, 99) / peak:6.3f} %, "
            f"worst {100 * e.max() / peak:6.3f} %"
        )

    # 5. time per frame, same run, best of 20 after compiling
    t_net = best_time(network, q, qd, qdd)
    t_solve = best_time(solve_frames, data)
    t_data = best_time(jax.jit(lambda *x: est.frames_data(problem, *x)), q, qd, qdd)
    t_full = best_time(jax.jit(lambda *x: solve_frames(est.frames_data(problem, *x))), q, qd, qdd)
    print(
        f"5. µs per frame over {T} frames (jit(vmap), best of 20): network {us(t_net):.2f}; frame data "
        f"(inverse dynamics, moment arms, F̂, P) {us(t_data):.1f}"
    )
    print(
        f"   static_optimization: {us(t_solve):.1f} on precomputed frame data ({t_solve / t_net:.0f}× the "
        f"network), {us(t_full):.1f} from (q, q̇, q̈) ({t_full / t_net:.0f}× the network)"
    )
    t_forces = best_time(jax.jit(jax.vmap(lambda *x: net.forces(problem, *x))), q, qd, qdd)
    print(
        f"   the network's forces a F̂ + P from (q, q̇, q̈) (`forces`: F̂, P need the muscle lengths and "
        f"velocities, not the dynamics or moment arms): {us(t_forces):.1f} (solver {t_full / t_forces:.1f}× slower)"
    )
    for k in (1, 2, 3):
        on_data = jax.jit(jax.vmap(lambda d, *x, k=k: net.refined_activations(problem, *x, steps=k, data=d)))
        from_q = jax.jit(jax.vmap(lambda *x, k=k: net.refined_activations(problem, *x, steps=k)))
        t_k, t_kq = best_time(on_data, data, q, qd, qdd), best_time(from_q, q, qd, qdd)
        print(
            f"   refine={k}: {us(t_k):.1f} on precomputed frame data (solver {t_solve / t_k:.0f}× slower), "
            f"{us(t_kq):.1f} from (q, q̇, q̈) (solver {t_full / t_kq:.1f}× slower)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=16000, help="Adam steps (default 16000)")
    main(parser.parse_args().steps)
