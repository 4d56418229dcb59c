"""Recover maximal isometric muscle forces from motion, by gradients through the simulator.

    python examples/gradient_estimation.py

arm26 with the shoulder locked (a 1-DOF elbow driven by TRIlat, BICshort and BRA, Hill muscles on
straight-line paths with activation dynamics) is simulated for 0.4 s with known excitations; the
elbow angle sampled every 10 ms is the "measurement". Starting from wrong F⁰ (×0.7, ×1.3, ×0.8),
`fit_muscle_parameters` fits log F⁰ by BFGS (optimistix) with gradients through
`diffrax.diffeqsolve`. Then three subjects with different F⁰ are fitted in one `jax.vmap`.
Most of the run time (tens of seconds on a laptop-class CPU) is compiling the differentiated
solve, once for the single fit and once for the batch; the fits themselves take seconds.
"""

import time

import jax

jax.config.update("jax_enable_x64", True)  # validation precision; jaxbio never sets it for you

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxbio as jb  # noqa: E402
from jaxbio.estimation import gradient as ge  # noqa: E402
from jaxbio.muscles.activation import ActivationDynamics  # noqa: E402
from jaxbio.muscles.drive import MuscleActuatedDrive  # noqa: E402
from jaxbio.muscles.sets import elbow_arm26  # noqa: E402

# 1. the model and the known excitations (piecewise linear, one column per muscle)
tree, paths, hill = elbow_arm26(("TRIlat", "BICshort", "BRA"))
excitation = ge.PiecewiseLinearExcitation(
    nodes=jnp.array([0.0, 0.1, 0.2, 0.3]),  # s
    values=jnp.array([[0.05, 0.3, 0.1], [0.4, 0.1, 0.3], [0.1, 0.5, 0.2], [0.3, 0.2, 0.6]]),
)
truth = jb.HamiltonianSystem(tree, drive=MuscleActuatedDrive(tree, paths, hill, ActivationDynamics(), excitation))
y0 = truth.initial_state(jnp.array([0.6]), a=jnp.full(3, 0.05))  # elbow at 0.6 rad, at rest
t = jnp.linspace(0.0, 0.4, 41)  # s, sample times
dt0 = 5e-3  # s, fixed integration step

# 2. synthetic measurement: the true system simulated on the fit's fixed steps
start = time.perf_counter()
trajectory = jb.simulate(truth, y0, 0.0, 0.4, dt0=dt0, ts=t)
q_measured, forces_measured = trajectory.q, ge.muscle_forces(truth, trajectory)
print(
    f"simulated the truth in {time.perf_counter() - start:.1f} s: "
    f"elbow {float(q_measured[0, 0]):.2f} → {float(q_measured[-1, 0]):.2f} rad"
)

# 3. start from wrong maximal isometric forces and fit them back
f_true = np.asarray(hill.max_isometric_force)
f_init = f_true * np.array([0.7, 1.3, 0.8])
guess = eqx.tree_at(lambda s: s.drive.muscles.max_isometric_force, truth, jnp.asarray(f_init))
start = time.perf_counter()
res = ge.fit_muscle_parameters(guess, y0, t, q_measured, dt0=dt0, steps=100)
print(
    f"fitted (compile + run) in {time.perf_counter() - start:.1f} s: {int(res.iterations)} BFGS iterations, "
    f"converged: {bool(res.converged)}"
)

f_fit = np.asarray(res.params["max_isometric_force"])
print(f"\n{'muscle':9s} {'true F0 [N]':>12s} {'initial':>10s} {'fitted':>14s} {'rel. error':>11s}")
for name, a, b, c in zip(paths.names, f_true, f_init, f_fit):
    print(f"{name:9s} {a:12.2f} {b:10.2f} {c:14.6f} {abs(c / a - 1):11.1e}")

h = res.loss_history
print(f"\nloss (mean squared elbow-angle error, rad²): initial {h[0]:.3e}, final {h[-1]:.3e}")
for k in sorted({0, 1, 2, 5, 10, 20, int(res.iterations)} & set(range(int(res.iterations) + 1))):
    print(f"  iteration {k:3d}: loss {h[k]:.3e}, |dL/dlogF0|_inf {res.grad_norm_history[k]:.2e}")
print(
    f"max |q_fit − q_measured| = {float(jnp.max(jnp.abs(res.trajectory.q - q_measured))):.1e} rad; "
    f"max muscle-force error = {float(jnp.max(jnp.abs(res.forces - forces_measured))):.1e} N "
    f"(peak force {float(jnp.max(forces_measured)):.0f} N)"
)

# 4. several subjects in one call: different true F0, each fitted from its own wrong guess
scales = jnp.array([[1.0, 1.0, 1.0], [1.2, 0.85, 1.1], [0.8, 1.15, 0.9]])
truths = f_true * scales
with_fmax = lambda f0: eqx.tree_at(lambda s: s.drive.muscles.max_isometric_force, truth, f0)  # noqa: E731
q_subjects = jax.jit(jax.vmap(lambda f0: jb.simulate(with_fmax(f0), y0, 0.0, 0.4, dt0=dt0, ts=t).q))(truths)
start = time.perf_counter()
batch = jax.jit(jax.vmap(lambda f0, q: ge.fit_muscle_parameters(with_fmax(f0), y0, t, q, dt0=dt0, steps=100)))(
    truths * jnp.array([0.7, 1.3, 0.8]), q_subjects
)
print(
    f"\n3 subjects in one jax.vmap: fitted (compile + run) in {time.perf_counter() - start:.1f} s, "
    f"converged {np.asarray(batch.converged).tolist()}"
)
for i in range(3):
    rel = np.abs(np.asarray(batch.params["max_isometric_force"][i]) / np.asarray(truths[i]) - 1)
    print(
        f"  subject {i}: true F0 {np.round(np.asarray(truths[i]), 1).tolist()} N, "
        f"max rel. error {rel.max():.1e}, {int(batch.iterations[i])} iterations"
    )
