"""Recover segment masses from the pelvis residuals of inverse dynamics, by gradient descent.

    python examples/opensim_mass_estimation.py

OpenSim's gait case subject01 (23 coordinates, ground reactions under both feet, 67 frames) as
`jaxbio.tools.inverse_dynamics_tool` runs it, split into `prepare_inverse_dynamics` (files and
splines, once) and `generalized_forces` (pure, differentiable in the model). The six pelvis
coordinates are unactuated: their generalised forces are the *residuals*, the wrench the
ground reactions fail to explain, which OpenSim's RRA reduces by adjusting the torso's mass.

The "true" subject is the model with its torso 25 % heavier and its thighs 10 % lighter (mass and
inertia scaled together), walking the same motion. Its ground reactions are taken to be those that
balance it (the file's plus the pelvis residual it leaves), so the true model has no residual; a
little force-plate noise (2 N, 0.5 N·m) is added. The nominal model, fitted to those reactions,
starts with residuals of tens of newtons; L-BFGS (optax) on the log mass factors, gradients by
`jax.value_and_grad` through the whole trial, brings them back to the noise in a few steps.
"""

import time

start = time.perf_counter()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # validation precision; jaxbio never sets it for you

from pathlib import Path  # noqa: E402

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import jaxbio as jb  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "io" / "data" / "subject01"

# 1. the model and the trial's frames (coordinates filtered at 6 Hz, ground reactions at each frame)
model = jb.io.load_osim(DATA / "subject01.osim")
inputs = jb.tools.prepare_inverse_dynamics(
    model,
    DATA / "subject01_walk1_ik.mot",
    external_loads=DATA / "subject01_walk1_grf.xml",
    lowpass_hz=6.0,
    start=0.5,
    end=1.6,
)
pelvis = [i for i, name in enumerate(model.coordinate_names) if name.startswith("pelvis_")]
print(
    f"subject01: {inputs.n_frames} frames, {len(model.coordinate_names)} coordinates, "
    f"{float(jnp.sum(model.tree.masses)):.1f} kg; residuals: {', '.join(inputs.labels[i] for i in pelvis)}"
)

# 2. the masses to estimate: a factor per group of bodies, mass and inertia scaled together
groups = {"torso": ["torso"], "thighs": ["femur_r", "femur_l"]}
segments = [np.array([model.body_segments[model.bodies.index(b)] for b in bodies]) for bodies in groups.values()]


def scaled(log_factors):
    """The model with each group's masses and inertias times ``exp(log_factors)``."""
    factor = jnp.ones_like(model.tree.masses)
    for seg, f in zip(segments, jnp.exp(log_factors)):
        factor = factor.at[seg].set(f)
    return eqx.tree_at(
        lambda m: (m.tree.masses, m.tree.inertias),
        model,
        (model.tree.masses * factor, model.tree.inertias * factor[:, None, None]),
    )


trial = jax.vmap(jb.tools.generalized_forces, (None, 0))  # (frames, coordinates) N·m / N


def residuals(log_factors):
    return trial(scaled(log_factors), inputs)[:, pelvis]  # (frames, 6): 3 moments N·m, 3 forces N


# 3. the true subject's residuals with the file's reactions (what the balancing reactions remove),
#    and force-plate noise
truth = np.log([1.25, 0.90])
rng = np.random.default_rng(0)
noise = rng.normal(size=(inputs.n_frames, 6)) * np.array([0.5, 0.5, 0.5, 2.0, 2.0, 2.0])
target = jax.jit(residuals)(jnp.asarray(truth)) - noise
weight = jnp.asarray([1.0, 1.0, 1.0, 0.1, 0.1, 0.1])  # 1 N·m counts as much as 10 N


def loss(log_factors):
    """Mean square of the residuals left with the true subject's ground reactions."""
    return jnp.mean(jnp.sum((weight * (residuals(log_factors) - target)) ** 2, axis=1))


def rms(log_factors):
    r = np.asarray(jax.jit(residuals)(log_factors) - target)
    return np.sqrt(np.mean(r[:, 3:] ** 2)), np.sqrt(np.mean(r[:, :3] ** 2))  # N, N·m


# 4. L-BFGS on the log factors, from the nominal model (factors 1)
optimizer = optax.lbfgs()
value_and_grad = optax.value_and_grad_from_state(loss)


@jax.jit
def step(params, state):
    value, grad = value_and_grad(params, state=state)
    updates, state = optimizer.update(grad, state, params, value=value, grad=grad, value_fn=loss)
    return optax.apply_updates(params, updates), state, value, jnp.linalg.norm(grad)


params = jnp.zeros(len(groups))
state = optimizer.init(params)
state = jax.tree_util.tree_map(lambda x: jnp.asarray(x, x.dtype), state)  # strong types: one compilation
before = rms(params)
fit_start = time.perf_counter()
for k in range(30):
    params, state, value, gnorm = step(params, state)
    if k == 0:
        first_s = time.perf_counter() - fit_start  # mostly compiling the step
    done = gnorm < 1e-9
    if k < 3 or k % 5 == 4 or done:
        print(
            f"  step {k + 1:2d}: loss {float(value):10.4g}, |grad| {float(gnorm):.2e}, "
            f"factors {', '.join(f'{f:.4f}' for f in np.exp(np.asarray(params)))}"
        )
    if done:
        break
fit_s = time.perf_counter() - fit_start
after = rms(params)

print(f"\n{'group':8s} {'true factor':>12s} {'recovered':>10s} {'error':>9s}")
for name, t, p in zip(groups, np.exp(truth), np.exp(np.asarray(params))):
    print(f"{name:8s} {t:12.4f} {p:10.4f} {p / t - 1:9.1e}")
masses = {name: float(model.tree.masses[seg].sum()) for name, seg in zip(groups, segments)}
print(
    "masses: "
    + ", ".join(
        f"{n} {masses[n]:.2f} → {masses[n] * f:.2f} kg (true {masses[n] * t:.2f})"
        for n, f, t in zip(groups, np.exp(np.asarray(params)), np.exp(truth))
    )
)
print(
    f"pelvis residuals (RMS over the trial): {before[0]:.1f} N, {before[1]:.1f} N·m with the nominal model; "
    f"{after[0]:.2f} N, {after[1]:.2f} N·m fitted (the noise: 2 N, 0.5 N·m)"
)
print(
    f"fit {fit_s:.1f} s: first step (compiling it) {first_s:.1f} s, the other {k} steps "
    f"{1e3 * (fit_s - first_s):.0f} ms; wall time {time.perf_counter() - start:.1f} s"
)
