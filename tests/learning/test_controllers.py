"""jaxbio.learning.controllers (float64 unless stated).

Independent references: central finite differences (MLPDrive gradients), jb.simulate of the
Hamiltonian form (the velocity-form `rollout`), the closed-form error of computed torque
(critically damped), virtual work (muscle moments = −∂l/∂q · F), and a loss that must fall by a
stated factor in a bounded number of Adam steps."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxbio as jb
from jaxbio.learning import controllers as C


@pytest.fixture(scope="module")
def pendulum():
    return jb.load_model("double_pendulum").tree


@pytest.mark.slow
def test_mlp_drive_gradients_match_finite_differences():
    drive = C.MLPDrive(
        3, torque_limit=[5.0, 2.0, 1.0], key=jax.random.key(0), width=8, depth=2, target=[0.1, -0.2, 0.3]
    )
    q, qd = jnp.array([0.3, -0.1, 0.5]), jnp.array([1.0, -2.0, 0.5])
    call = eqx.filter_jit(lambda d, q, qd: d(0.0, q, qd, jnp.ones(1)))
    tau = call(drive, q, qd)
    assert tau.shape == (3,) and np.all(np.abs(tau) < np.array([5.0, 2.0, 1.0]))
    w = jnp.array([0.7, -1.3, 0.4])
    J = jax.jit(jax.jacobian(lambda q, qd: drive(0.0, q, qd, jnp.ones(1)), argnums=(0, 1)))(q, qd)
    h = 1e-6
    for k, (x, name) in enumerate([(q, "q"), (qd, "qd")]):
        for i in range(3):
            e = jnp.zeros(3).at[i].set(h)
            args_p = (x + e, qd) if k == 0 else (q, x + e)
            args_m = (x - e, qd) if k == 0 else (q, x - e)
            fd = (call(drive, *args_p) - call(drive, *args_m)) / (2 * h)
            np.testing.assert_allclose(J[k][:, i], fd, rtol=1e-6, atol=1e-9, err_msg=name)
    # with respect to the weights: the gradient of w·τ against a finite difference along a random direction
    params, static = eqx.partition(drive, eqx.is_inexact_array)
    g = jax.jit(jax.grad(lambda p: jnp.dot(w, call(eqx.combine(p, static), q, qd))))(params)
    direction = jax.tree_util.tree_map(lambda x: jax.random.normal(jax.random.key(x.size), x.shape), params)
    f = lambda s: jnp.dot(
        w, call(eqx.combine(jax.tree_util.tree_map(lambda p, d: p + s * d, params, direction), static), q, qd)
    )
    fd = (f(h) - f(-h)) / (2 * h)
    analytic = sum(jnp.vdot(a, b) for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(direction)))
    np.testing.assert_allclose(analytic, fd, rtol=1e-6)


def test_bad_controller_inputs():
    with pytest.raises(ValueError, match="torque_limit must be positive"):
        C.MLPDrive(2, torque_limit=[1.0, -1.0], key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"MLPDrive: target has shape \(3,\), expected \(2,\)"):
        C.MLPDrive(2, torque_limit=1.0, key=jax.random.key(0), target=[0.0, 0.0, 0.0])
    drive = C.MLPDrive(2, torque_limit=1.0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="built for 2 coordinates, the tree has 7"):
        jb.HamiltonianSystem(jb.load_model("arm7"), drive)
    with pytest.raises(ValueError, match="moment_arm must be positive"):
        C.agonist_antagonist([100.0, 100.0], [0.02, 0.0])
    with pytest.raises(ValueError, match="muscles must be a Drive with activation states"):
        C.MLPExcitationDrive(drive, 2, key=jax.random.key(0))


def test_muscle_moments_are_virtual_work():
    """τ = R F with l(q) = l_ref − Rᵀq, i.e. τ = −(∂l/∂q)ᵀ F (power q̇ᵀτ = −F·l̇)."""
    muscles = C.agonist_antagonist([600.0, 300.0], [0.04, 0.03])
    q, qd, a = jnp.array([0.3, -0.5]), jnp.array([0.4, 1.0]), jnp.array([0.8, 0.1, 0.5, 0.5])
    F = muscles.tensions(q, qd, jnp.ones(1), a)
    dl_dq = jax.jacobian(muscles.lengths)(q)
    np.testing.assert_allclose(muscles(0.0, q, qd, jnp.ones(1), a), -dl_dq.T @ F, rtol=1e-12)
    # the Hill curves of HillMuscle itself, at the lengths and velocities of the constant moment arms
    l, v = muscles.reference_lengths - muscles.moment_arms.T @ q, -muscles.moment_arms.T @ qd
    np.testing.assert_allclose(F, muscles.muscles.force(a, l, v), rtol=1e-12)
    assert F[0] > 0 and F[0] > F[1]  # the more active flexor pulls harder


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pd", "muscles"])
def test_rollout_matches_simulate(pendulum, kind):
    """The velocity-form rollout and jb.simulate's Hamiltonian form (same Tsit5 grid) converge to
    the same trajectory (no torque limit: a clipped torque's kink limits both to low order)."""
    q0, target = jnp.array([0.4, -0.3]), jnp.array([-0.2, 0.5])
    if kind == "pd":
        drive = C.pd_gravity_torque(pendulum, 30.0, 5.0)
    else:
        drive = C.MLPExcitationDrive(
            C.agonist_antagonist([600.0, 300.0], [0.04, 0.03]), 2, key=jax.random.key(1), width=8, depth=1
        )
    system = jb.HamiltonianSystem(pendulum, drive, jb.hamiltonian.LinearDamping(0.3))
    tr = C.rollout(system, q0, target, 0.5, 200)
    ref_system = eqx.tree_at(lambda s: s.drive, system, drive.with_target(target))
    ref = jb.simulate(ref_system, ref_system.initial_state(q0), 0.0, 0.5, stepsize_controller=jb.FixedGrid(200))
    np.testing.assert_allclose(tr.q, ref.q, atol=1e-7)
    np.testing.assert_allclose(tr.qd, ref.qd, atol=2e-6)
    if kind == "muscles":
        np.testing.assert_allclose(tr.a, ref.a, atol=1e-6)
        assert np.all((tr.a >= 0) & (tr.a <= 1))


@pytest.mark.slow
def test_computed_torque_closed_form(pendulum):
    """Unsaturated computed torque: every joint error is e(t) = e₀ (1 + ωt) e^{−ωt} (ζ = 1, q̇₀ = 0)."""
    omega = 6.0
    system = jb.HamiltonianSystem(pendulum, C.computed_torque(pendulum, omega, 1.0))
    q0, target = jnp.array([0.5, -0.4]), jnp.array([-0.1, 0.3])
    tr = C.rollout(system, q0, target, 1.0, 100)
    t = np.asarray(tr.ts)[:, None]
    expected = target + (q0 - target) * (1 + omega * t) * np.exp(-omega * t)
    np.testing.assert_allclose(tr.q, expected, atol=1e-7)


LR = 5e-3


def _train(system, steps, lr, batch=8, horizon=1.0, grid=20, seed=0):
    q0s = jax.random.uniform(jax.random.key(seed), (batch, 2), minval=-0.8, maxval=0.8)
    targets = jax.random.uniform(jax.random.key(seed + 1), (batch, 2), minval=-0.8, maxval=0.8)
    opt = optax.adam(lr)
    params, static = eqx.partition(system, eqx.is_inexact_array)
    mask = jax.tree_util.tree_map(lambda _: False, params)
    mask = eqx.tree_at(lambda s: s.drive.mlp, mask, jax.tree_util.tree_map(lambda _: True, params.drive.mlp))
    train, frozen = eqx.partition(params, mask)
    state = opt.init(train)

    @jax.jit
    def update(train, state):
        loss, g = jax.value_and_grad(
            lambda p: C.reaching_loss(eqx.combine(p, frozen, static), q0s, targets, horizon, grid)
        )(train)
        u, state = opt.update(g, state, train)
        return optax.apply_updates(train, u), state, loss

    losses = []
    for _ in range(steps):
        train, state, loss = update(train, state)
        losses.append(float(loss))
    return losses


@pytest.mark.slow
def test_torque_mlp_training_loss_falls(pendulum):
    """Double pendulum, 8 trajectories of 1 s (20 steps): the loss falls at least 3× in 60 Adam steps."""
    drive = C.MLPDrive(2, torque_limit=[20.0, 10.0], key=jax.random.key(0), width=16, depth=2)
    losses = _train(jb.HamiltonianSystem(pendulum, drive), 60, 2e-2)
    assert np.all(np.isfinite(losses))
    assert losses[-1] < losses[0] / 3, losses[::10]


@pytest.mark.slow
def test_excitation_mlp_training_loss_falls(pendulum):
    """Muscles (2 pairs) on the double pendulum: the loss falls at least 2× in 60 Adam steps
    (measured 0.407 -> 0.122). Before ActivationDynamics clamped its time-constant scale, the
    20 ms steps sent every activation to −∞ (clipped to 0 in the force: no control, no gradient)
    and the loss stayed flat (0.5007 -> 0.4969)."""
    drive = C.MLPExcitationDrive(
        C.agonist_antagonist([600.0, 300.0], [0.04, 0.03]), 2, key=jax.random.key(0), width=16, depth=2
    )
    losses = _train(jb.HamiltonianSystem(pendulum, drive, jb.hamiltonian.LinearDamping(0.2)), 60, LR, grid=50)
    assert np.all(np.isfinite(losses))
    assert losses[-1] < losses[0] / 2, losses[::10]


@pytest.mark.slow
def test_arm_muscle_rollout_grid_is_resolved():
    """The example's grid for the muscle-driven arm7 (2.5 ms; float32, untrained excitation MLP,
    co-contraction near 0.5): finite, and within 0.1 mrad / 5 mrad/s of a 4× finer grid (measured
    7e-6 rad, 4e-4 rad/s). The Hill force–velocity damping of the light distal joints is stiff:
    on the 10 ms grid this rollout goes NaN."""
    tree = jb.load_model("arm7", dtype=jnp.float32).tree
    drive = C.MLPExcitationDrive(C.arm_muscles(dtype=jnp.float32), 7, key=jax.random.key(3), width=16, depth=1)
    system = jb.HamiltonianSystem(tree, drive, jb.hamiltonian.LinearDamping(jnp.asarray(C.ARM_DAMPING, jnp.float32)))
    q0 = jnp.asarray(C.ARM_POSTURE + np.array([0.3, -0.3, 0.2, -0.3, 0.3, -0.3, 0.3]), jnp.float32)
    target = jnp.asarray(C.ARM_POSTURE - np.array([0.3, -0.3, 0.2, -0.3, 0.3, -0.3, 0.3]), jnp.float32)
    run = jax.jit(lambda steps: C.rollout(system, q0, target, 1.0, steps), static_argnums=0)
    coarse, fine = run(400), run(1600)
    assert np.all(np.isfinite(coarse.q)) and np.all(np.isfinite(coarse.a))
    assert np.all((coarse.a >= -1e-3) & (coarse.a <= 1 + 1e-3))
    np.testing.assert_allclose(coarse.q, fine.q[::4], atol=1e-4)
    np.testing.assert_allclose(coarse.qd, fine.qd[::4], atol=5e-3)


@pytest.mark.slow
def test_float32_drives():
    """float32 in, float32 out, without x64 arrays leaking in (the drives and the rollout)."""
    tree = jb.load_model("double_pendulum", dtype=jnp.float32).tree
    drive = C.MLPDrive(2, torque_limit=[20.0, 10.0], key=jax.random.key(0), width=8, depth=1, dtype=jnp.float32)
    muscles = C.MLPExcitationDrive(
        C.agonist_antagonist([600.0, 300.0], [0.04, 0.03], dtype=jnp.float32),
        2,
        key=jax.random.key(0),
        width=8,
        depth=1,
    )
    for d in (drive, muscles):
        tr = C.rollout(
            jb.HamiltonianSystem(tree, d),
            jnp.array([0.2, 0.1], jnp.float32),
            jnp.array([0.0, 0.5], jnp.float32),
            0.2,
            10,
        )
        assert tr.q.dtype == jnp.float32 and np.all(np.isfinite(tr.q))
