"""Inverse simulation (Blajer et al. 2007) of a synthetic one-legged squat and a short flight.

The sagittal11 body carries the 18 Gait10dof18musc muscles (hip, knee, ankle) and torque
actuators at the two MTP joints. Two phases, each a smooth prescribed joint motion:

1. support (300 frames, 1.5 s): the right foot lies flat on the ground; the right leg squats and
   rises, the left leg swings. The floating base follows from the foot constraint, so the motion
   is consistent by construction.
2. flight (100 frames, 0.25 s): the joints move, the floating base (x, y, HAT angle) is integrated
   from the flight dynamics (Blajer et al. 2007, eq. 2: no external force but gravity).

Run: ``python examples/inverse_simulation.py`` (float64). Prints a summary of the muscle forces,
MTP torques, ground reaction and the residuals of each phase.
"""

import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxbio as jb  # noqa: E402
from jaxbio.estimation import inverse_simulate_motion  # noqa: E402
from jaxbio.papers.blajer_body import SQUAT_CONTACTS, sagittal11_muscle_model, squat_motion  # noqa: E402

model = sagittal11_muscle_model()
tree = model.tree


def support_motion(T=300, duration=1.5):
    """The squat of `jaxbio.papers.blajer_body.squat_motion`: t, q, qd, qdd."""
    return squat_motion(T, duration, tree=tree)


def flight_motion(q0, qd0, T=100, duration=0.25):
    """Prescribed joint motion, base integrated (RK4) from the flight equations
    q̈_U = −M_UU⁻¹(M_UJ q̈_J + bias_U)."""
    U, J = np.array(model.unactuated), np.array(model.joints)
    dt = duration / (T - 1)

    def joints(t):  # tuck: hips and knees flex, ankles plantarflex
        s = jnp.sin(0.5 * jnp.pi * t / duration)
        return q0[J] + jnp.array([0.8, -1.2, -0.4, 0.2, 0.8, -1.2, -0.4, 0.2]) * s * s

    jd = jax.jacfwd(joints)
    jdd = jax.jacfwd(jd)

    @jax.jit
    def qdd_of(t, qu, qdu):
        q = jnp.zeros(11).at[U].set(qu).at[J].set(joints(t))
        qd = jnp.zeros(11).at[U].set(qdu).at[J].set(jd(t))
        M = jb.mass_matrix(tree, q)
        bias = jb.bias_forces(tree, q, qd)
        a = -jnp.linalg.solve(M[np.ix_(U, U)], M[np.ix_(U, J)] @ jdd(t) + bias[U])
        return q, qd, jnp.zeros(11).at[U].set(a).at[J].set(jdd(t))

    def f(t, x, v):
        return v, qdd_of(t, x, v)[2][U]

    qu, qdu = q0[U], qd0[U]
    frames = []
    for i in range(T):  # RK4, one compiled right-hand side
        t = i * dt
        frames.append(qdd_of(t, qu, qdu))
        k1 = f(t, qu, qdu)
        k2 = f(t + dt / 2, qu + dt / 2 * k1[0], qdu + dt / 2 * k1[1])
        k3 = f(t + dt / 2, qu + dt / 2 * k2[0], qdu + dt / 2 * k2[1])
        k4 = f(t + dt, qu + dt * k3[0], qdu + dt * k3[1])
        qu = qu + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        qdu = qdu + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    q, qd, qdd = (jnp.stack(x) for x in zip(*frames))
    return jnp.arange(T) * dt, q, qd, qdd


def summary(name, res, seconds):
    F = np.asarray(res.muscle_forces)
    print(f"\n== {name}: {F.shape[0]} frames, {seconds:.1f} s (compile included) ==")
    print(f"{'muscle':<14}{'mean N':>9}{'max N':>9}{'active %':>10}")
    for i, m in enumerate(model.paths.names):
        print(f"{m:<14}{F[:, i].mean():9.1f}{F[:, i].max():9.1f}{100 * np.mean(F[:, i] > 1e-9):10.0f}")
    tq = np.asarray(res.torques)
    for i, c in enumerate(model.control_names[model.n_muscles :]):
        print(f"{c:<14} range [{tq[:, i].min():8.2f}, {tq[:, i].max():8.2f}] N·m")
    print(f"min muscle force            {F.min():.3g} N (must be ≥ 0)")
    print(f"max |moment residual|       {np.abs(res.moment_residual).max():.3g} N·m")
    print(f"max |uncontrolled residual| {np.abs(res.uncontrolled_residual).max():.3g} (eq. 2, N / N·m)")
    if res.ground_reaction.shape[1]:
        gr = np.asarray(res.ground_reaction)
        bw = float(np.sum(tree.masses)) * 9.81
        print(f"max |contact acceleration|  {np.abs(res.constraint_residual).max():.3g}")
        print(f"vertical ground reaction    {gr[:, 1].min() / bw:.2f} … {gr[:, 1].max() / bw:.2f} body weights")
    print(
        f"pseudoinverse: converged in every frame: {bool(np.all(res.solution.converged))}, "
        f"max {int(np.max(res.solution.iterations))} solves"
    )


if __name__ == "__main__":
    t0 = time.perf_counter()
    _, q, qd, qdd = support_motion()
    res = inverse_simulate_motion(model, q, qd, qdd, contacts=SQUAT_CONTACTS)
    jax.block_until_ready(res)
    summary("support phase (right foot flat)", res, time.perf_counter() - t0)

    t0 = time.perf_counter()
    # take off from the last support frame with an upward push of the base
    _, q, qd, qdd = flight_motion(q[-1], qd[-1].at[1].add(1.5))
    res = inverse_simulate_motion(model, q, qd, qdd)
    jax.block_until_ready(res)
    summary("flight phase", res, time.perf_counter() - t0)
