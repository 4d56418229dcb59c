"""A neural controller trained through the simulator (issue #19 item 2): the 7-DOF arm (shipped
``arm7``) reaches a target joint configuration from a random initial one, driven

1. by an MLP of (q − q*, q, q̇) producing joint torques (`jaxbio.learning.controllers.MLPDrive`), and
2. by an MLP producing the excitations of 14 Hill muscles (one agonist/antagonist pair per joint,
   constant moment arms; `MLPExcitationDrive` over `arm_muscles`) through activation dynamics,

each trained with optax (Adam) by backpropagating through fixed-grid rollouts of the arm's
equations (`jaxbio.learning.controllers.rollout`), in float32 on the CPU. Both are evaluated on
held-out initial states and targets and compared in the same run with PD + gravity compensation
and with computed torque (`jb.inverse_dynamics`), all with the same joint damping; the torque
controllers share the torque limits ``ARM_TORQUE_LIMIT``, the muscles are bounded by their own
strength instead (peak active moments F⁰r = 24, 24, 8, 24, 3, 4.5, 4.5 N·m, ``arm_muscles``).

    python examples/learning_controller.py [--steps 120] [--muscle-steps 80]

The muscle-driven arm needs a finer grid than the torque-driven one (2.5 ms against 20 ms): the
Hill force–velocity curve gives each co-contracting pair a damping of about
``5 F⁰ a r²/(v_max l_opt)`` per muscle, ≈ 0.17 N·m·s/rad for a wrist muscle at a = 0.5, on a
distal inertia of ~0.001–0.002 kg·m², i.e. a decay rate of several hundred 1/s — beyond the
stability limit of explicit Tsit5 at 10 ms (the untrained rollouts went NaN at t ≈ 0.5 s), and
stable with margin at 2.5 ms, where 4× finer steps change nothing visible (tested). The
activation dynamics (τ_act/2 = 7.5 ms at rest) are resolved at that step too.
"""

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxbio as jb
from jaxbio.hamiltonian import LinearDamping
from jaxbio.learning import controllers as C

HORIZON, STEPS, MUSCLE_STEPS = 1.0, 50, 400  # s, fixed grid steps (20 ms torques; 2.5 ms muscles: stiff, see above)
SPREAD = 0.4  # rad: initial states and targets uniform in ARM_POSTURE ± SPREAD
TOLERANCE = 0.15  # rad: the RMS final joint error the trained MLPs must reach on held-out states


def sample(key, batch):
    k1, k2 = jax.random.split(key)
    box = lambda k: C.ARM_POSTURE + jax.random.uniform(k, (batch, 7), jnp.float32, -SPREAD, SPREAD)
    return box(k1), box(k2)


def final_error(system, q0s, targets, steps):
    """RMS over joints of q(T) − q* (rad), per held-out case, and the final speed (rad/s)."""

    def one(q0, target):
        tr = C.rollout(system, q0, target, HORIZON, steps)
        return jnp.sqrt(jnp.mean((tr.q[-1] - target) ** 2)), jnp.linalg.norm(tr.qd[-1])

    return jax.jit(jax.vmap(one))(q0s, targets)


def train(system, n_steps, steps, lr, key, batch=16):
    # train only the MLP: everything else (tree, damping, muscles) is frozen
    mask = jax.tree_util.tree_map(lambda _: False, system)
    mask = eqx.tree_at(lambda s: s.drive.mlp, mask, jax.tree_util.tree_map(eqx.is_inexact_array, system.drive.mlp))
    mlp, rest = eqx.partition(system, mask)
    opt = optax.adam(optax.cosine_decay_schedule(lr, n_steps, 0.1))
    state = opt.init(mlp)

    @eqx.filter_jit
    def update(mlp, state, q0s, targets):
        loss, grads = eqx.filter_value_and_grad(
            lambda m: C.reaching_loss(eqx.combine(m, rest), q0s, targets, HORIZON, steps)
        )(mlp)
        updates, state = opt.update(grads, state, mlp)
        return eqx.apply_updates(mlp, updates), state, loss

    losses = []
    t0 = time.perf_counter()
    for i in range(n_steps):
        key, sub = jax.random.split(key)
        mlp, state, loss = update(mlp, state, *sample(sub, batch))
        losses.append(float(loss))
        if i == 0:
            compile_s = time.perf_counter() - t0
            t0 = time.perf_counter()
    return eqx.combine(mlp, rest), losses, compile_s, (time.perf_counter() - t0) / max(n_steps - 1, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120, help="Adam steps for the torque MLP")
    ap.add_argument("--muscle-steps", type=int, default=80, help="Adam steps for the excitation MLP (0: skip it)")
    args = ap.parse_args()

    tree = jb.load_model("arm7", dtype=jnp.float32).tree
    damping = LinearDamping(jnp.asarray(C.ARM_DAMPING, jnp.float32))
    limit = jnp.asarray(C.ARM_TORQUE_LIMIT, jnp.float32)
    q0_test, target_test = sample(jax.random.key(2026), 64)  # held out: never seen in training
    print(
        f"arm7 reaching, float32, {HORIZON} s horizon, initial states and targets uniform in posture ± {SPREAD} rad; "
        f"torque limits {C.ARM_TORQUE_LIMIT.tolist()} N·m, joint damping {C.ARM_DAMPING.tolist()} N·m·s/rad"
    )

    rows = []
    # PD gains scaled by each joint's effective inertia at the mid posture, m_i = 1/(M⁻¹)_ii
    # (kp = ω² m_i, kd = 2ω m_i, ω = 8 rad/s; with M_ii instead the distal joints are unstable at 20 ms steps)
    m_eff = 1.0 / jnp.diag(jnp.linalg.inv(jb.mass_matrix(tree, jnp.asarray(C.ARM_POSTURE, jnp.float32))))
    for name, drive in [
        ("PD + gravity comp. (ω 8 rad/s)", C.pd_gravity_torque(tree, 64 * m_eff, 16 * m_eff, limit)),
        ("computed torque (ω 8 rad/s, ζ 1)", C.computed_torque(tree, 8.0, 1.0, limit, damping=C.ARM_DAMPING)),
    ]:
        err, speed = final_error(jb.HamiltonianSystem(tree, drive, damping), q0_test, target_test, STEPS)
        rows.append((name, err, speed))

    mlp = C.MLPDrive(7, limit, key=jax.random.key(0), width=64, depth=2)
    system = jb.HamiltonianSystem(tree, mlp, damping)
    err0, _ = final_error(system, q0_test, target_test, STEPS)
    system, losses, compile_s, step_s = train(system, args.steps, STEPS, 3e-3, jax.random.key(1))
    print(
        f"torque MLP: {args.steps} Adam steps, batch 16: loss {losses[0]:.4f} -> {np.mean(losses[-10:]):.4f} rad² "
        f"(first step incl. compile {compile_s:.1f} s, then {step_s:.2f} s/step)"
    )
    err, speed = final_error(system, q0_test, target_test, STEPS)
    rows.append(("torque MLP (untrained)", err0, None))
    rows.append(("torque MLP (trained)", err, speed))

    if not args.muscle_steps:
        print("excitation MLP: skipped (--muscle-steps 0)")
    else:
        muscles = C.arm_muscles(dtype=jnp.float32)
        drive = C.MLPExcitationDrive(muscles, 7, key=jax.random.key(3), width=64, depth=2)
        msystem = jb.HamiltonianSystem(tree, drive, damping)
        merr0, _ = final_error(msystem, q0_test, target_test, MUSCLE_STEPS)
        msystem, mlosses, mcompile, mstep = train(
            msystem, args.muscle_steps, MUSCLE_STEPS, 1e-2, jax.random.key(4), batch=8
        )
        print(
            f"excitation MLP (14 muscles): {args.muscle_steps} Adam steps, batch 8: loss {mlosses[0]:.4f} -> "
            f"{np.mean(mlosses[-10:]):.4f} rad² (first step {mcompile:.1f} s, then {mstep:.2f} s/step)"
        )
        merr, mspeed = final_error(msystem, q0_test, target_test, MUSCLE_STEPS)
        rows.append(("excitation MLP (untrained)", merr0, None))
        rows.append(("excitation MLP (trained)", merr, mspeed))

    print(
        f"\nheld-out: 64 initial states and targets; final joint error at t = {HORIZON} s (RMS over the 7 joints, rad)"
    )
    print(f"  {'controller':42s} {'mean':>8s} {'median':>8s} {'max':>8s} {'final speed':>12s}")
    for name, e, s in rows:
        e = np.asarray(e)
        sp = "" if s is None else f"{float(np.mean(s)):9.3f} rad/s"
        print(f"  {name:42s} {e.mean():8.4f} {np.median(e):8.4f} {e.max():8.4f} {sp:>12s}")
    print()
    for name, e, _ in rows:
        if name.endswith("(trained)"):
            mean = float(np.asarray(e).mean())
            verdict = "within" if mean < TOLERANCE else "NOT within"
            print(f"{name} mean final error {mean:.4f} rad: {verdict} the stated tolerance {TOLERANCE} rad")


if __name__ == "__main__":
    main()
