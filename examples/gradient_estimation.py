"""Recover maximal isometric muscle forces from motion, by gradients through the simulator.

    python examples/gradient_estimation.py

arm26 with the shoulder locked (a 1-DOF elbow driven by TRIlat, BICshort and BRA, Hill muscles on
straight-line paths with activation dynamics) is simulated for 0.4 s with known excitations; the
elbow angle sampled every 10 ms is the "measurement". Starting from wrong F⁰ (×0.7, ×1.3, ×0.8),
`fit_muscle_parameters` fits log F⁰ by L-BFGS (optax) with gradients through `diffrax.diffeqsolve`.
Most of the run time (≈ 20–40 s on a laptop-class CPU) is compiling the differentiated solve once;
the fit itself takes a few seconds.
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

# 2. synthetic measurement: steps=0 evaluates (and compiles) the objective at the given values,
#    i.e. simulates the true system; the fit below reuses the same compiled function
start = time.perf_counter()
measured = ge.fit_muscle_parameters(truth, y0, t, jnp.zeros(t.shape), steps=0, dt0=dt0)
q_measured = measured.trajectory.q
print(f"simulated the truth (and compiled the objective) in {time.perf_counter() - start:.1f} s: "
      f"elbow {float(q_measured[0, 0]):.2f} → {float(q_measured[-1, 0]):.2f} rad")

# 3. start from wrong maximal isometric forces and fit them back
f_true = np.asarray(hill.max_isometric_force)
f_init = f_true * np.array([0.7, 1.3, 0.8])
guess = eqx.tree_at(lambda s: s.drive.muscles.max_isometric_force, truth, jnp.asarray(f_init))
start = time.perf_counter()
res = ge.fit_muscle_parameters(guess, y0, t, q_measured, dt0=dt0, steps=100)
print(f"fitted in {time.perf_counter() - start:.1f} s: {res.iterations} L-BFGS iterations, converged: {res.converged}")

f_fit = np.asarray(res.params["max_isometric_force"])
print(f"\n{'muscle':9s} {'true F0 [N]':>12s} {'initial':>10s} {'fitted':>14s} {'rel. error':>11s}")
for name, a, b, c in zip(paths.names, f_true, f_init, f_fit):
    print(f"{name:9s} {a:12.2f} {b:10.2f} {c:14.6f} {abs(c / a - 1):11.1e}")

h = res.loss_history
print(f"\nloss (mean squared elbow-angle error, rad²): initial {h[0]:.3e}, final {h[-1]:.3e}")
for k in sorted({0, 1, 2, 5, 10, 20, len(h) - 1} & set(range(len(h)))):
    print(f"  iteration {k:3d}: loss {h[k]:.3e}, |dL/dlogF0|_inf {res.grad_norm_history[k]:.2e}")
print(f"max |q_fit − q_measured| = {float(jnp.max(jnp.abs(res.trajectory.q - q_measured))):.1e} rad; "
      f"max muscle-force error = {float(jnp.max(jnp.abs(res.forces - measured.forces))):.1e} N "
      f"(peak force {float(jnp.max(measured.forces)):.0f} N)")
