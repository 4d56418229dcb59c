"""jaxbio.learning.env: the functional reaching environments (float64 unless stated).

Independent references: scipy's solve_ivp of ``q̈ = jb.forward_dynamics`` (not the
HamiltonianSystem/jb.simulate path the env integrates with), the activation ODE alone, energy
conservation, and a Python loop for vmap."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import jaxbio as jb
from jaxbio.learning import env as E
from jaxbio.muscles.activation import ActivationDynamics


# one compiled step and reset for every environment of the same static configuration (the
# environment is an argument: its arrays are traced, its static fields key the cache)
_step = eqx.filter_jit(lambda env, state, action: env.step(state, action))
_reset = eqx.filter_jit(lambda env, key: env.reset(key))


@pytest.fixture(scope="module")
def pendulum():
    return E.double_pendulum_env(substeps=4)


@pytest.fixture(scope="module")
def pendulum_step():
    return _step


@pytest.mark.slow
def test_step_matches_forward_dynamics(pendulum, pendulum_step):
    obs, state = _reset(pendulum, jax.random.key(3))
    tau = jnp.array([4.0, -2.5])
    tree = pendulum.system.tree
    n = tree.nv

    qdd = jax.jit(lambda q, qd: jb.forward_dynamics(tree, q, qd, tau))

    def rhs(t, x):
        return np.concatenate([x[n:], np.asarray(qdd(x[:n], x[n:]))])

    x = np.concatenate([np.asarray(state.y["q"]), np.zeros(n)])
    for _ in range(3):
        obs, state, reward, done, info = pendulum_step(pendulum, state, tau)
        x = solve_ivp(rhs, (0, float(pendulum.control_dt)), x, rtol=1e-11, atol=1e-11).y[:, -1]
        np.testing.assert_allclose(obs[:n], x[:n], atol=2e-6)
        np.testing.assert_allclose(obs[n : 2 * n], x[n:], atol=2e-5)
    np.testing.assert_allclose(
        reward, -(np.linalg.norm(x[:n] - state.target) + 0.1 * np.mean((tau / np.array([20.0, 10.0])) ** 2)), atol=1e-5
    )
    np.testing.assert_allclose(float(state.time), 3 * 0.02)


@pytest.mark.slow
def test_energy_conserved_with_zero_action(pendulum):
    """No damping, zero torque: H is constant over a whole episode (100 control steps)."""
    obs, state = _reset(pendulum, jax.random.key(0))

    def body(s, _):
        _, s, _, done, _ = pendulum.step(s, jnp.zeros(2))
        return s, (pendulum.system.energy(s.y), done)

    _, (energy, done) = jax.jit(lambda s: jax.lax.scan(body, s, None, length=pendulum.episode_steps))(state)
    e0 = pendulum.system.energy(state.y)
    assert abs(float(e0)) > 1.0
    np.testing.assert_allclose(energy, e0, atol=1e-6 * abs(float(e0)))
    assert bool(done[-1]) and not bool(jnp.any(done[:-1]))


@pytest.mark.slow
def test_vmap_equals_loop(pendulum):
    keys = jax.random.split(jax.random.key(7), 3)
    actions = jnp.array([[1.0, 0.0], [-3.0, 2.0], [30.0, -30.0]])  # the last clipped to ±(20, 10)
    obs_b, states = jax.jit(jax.vmap(pendulum.reset))(keys)
    out_b = jax.jit(jax.vmap(pendulum.step))(states, actions)
    for i in range(3):
        obs, state = _reset(pendulum, keys[i])
        np.testing.assert_allclose(obs_b[i], obs, rtol=1e-12)
        out = _step(pendulum, state, actions[i])
        for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(out_b)):
            np.testing.assert_allclose(b[i], a, rtol=1e-10, atol=1e-12)
    clipped = _step(pendulum, _reset(pendulum, keys[2])[1], jnp.array([20.0, -10.0]))
    np.testing.assert_allclose(out_b[0][2], clipped[0], rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("auto_reset", [False, True])
def test_done_and_auto_reset(auto_reset):
    env = E.double_pendulum_env(time_limit=0.06, auto_reset=auto_reset, torque_limit=1e300)  # 3 control steps
    assert env.episode_steps == 3
    obs, state = _reset(env, jax.random.key(1))
    dones = []
    for _ in range(3):
        before = state
        obs, state, reward, done, info = _step(env, state, jnp.ones(2))
        dones.append(bool(done))
    assert dones == [False, False, True] and bool(info["truncated"]) and not bool(info["nonfinite"])
    if not auto_reset:
        assert int(state.steps) == 3 and "final_observation" not in info
        return
    # the new episode: reset from the carried key, the finished one's last observation in info
    assert int(state.steps) == 0 and float(state.time) == 0.0
    key, sub = jax.random.split(before.key)
    obs_reset, state_reset = _reset(env, sub)
    np.testing.assert_allclose(obs, obs_reset)
    np.testing.assert_array_equal(state.key, key)
    np.testing.assert_allclose(info["final_observation"][4:], before.target)  # (q, q̇, q*): the old target
    assert not np.allclose(state.target, before.target)


@pytest.mark.slow
def test_nonfinite_state_ends_the_episode():
    env = E.double_pendulum_env(time_limit=0.06, auto_reset=True, torque_limit=1e300)
    obs, state = _reset(env, jax.random.key(0))
    obs, state, reward, done, info = _step(env, state, jnp.array([1e300, -1e300]))
    assert bool(info["nonfinite"]) and bool(done) and float(reward) == -100.0
    assert np.all(np.isfinite(obs)) and int(state.steps) == 0  # reset to a fresh episode


@pytest.mark.slow
def test_muscle_activation_matches_its_ode():
    """Muscle env: the activations after a step with held excitations follow ȧ = rate(u, a) alone
    (activation dynamics do not depend on q), integrated by scipy."""
    env = E.double_pendulum_env("muscle", control_dt=0.0025, time_limit=0.25)  # 2 steps of 1.25 ms inside
    assert env.action_size == 4 and env.observation_size == 10
    obs, state = _reset(env, jax.random.key(2))
    u = jnp.array([1.0, 0.0, 0.3, 0.7])
    a = np.zeros(4)
    act = ActivationDynamics()
    for _ in range(4):
        obs, state, reward, done, info = _step(env, state, u)
        a = solve_ivp(lambda t, a: np.asarray(act.rate(u, a)), (0, 0.0025), a, rtol=1e-11, atol=1e-12).y[:, -1]
    np.testing.assert_allclose(obs[6:], a, atol=2e-4)
    np.testing.assert_allclose(info["effort"], np.mean(np.asarray(u) ** 2))


def test_bad_actions_are_refused():
    env = E.double_pendulum_env("muscle")
    _, state = _reset(env, jax.random.key(0))
    with pytest.raises(ValueError, match=r"action has shape \(3,\), expected \(4,\) muscle excitations"):
        env.step(state, jnp.zeros(3))
    with pytest.raises(ValueError, match=r"excitations must lie in \[0, 1\]"):
        env.step(state, jnp.array([0.0, 1.2, 0.0, 0.0]))
    with pytest.raises(Exception, match=r"excitations must lie in \[0, 1\]"):
        jax.block_until_ready(_step(env, state, jnp.array([0.0, -0.1, 0.0, 0.0])))
    torque = E.double_pendulum_env()
    _, state = _reset(torque, jax.random.key(0))
    with pytest.raises(ValueError, match=r"action has shape \(2, 1\), expected \(2,\) torques"):
        torque.step(state, jnp.zeros((2, 1)))
    with pytest.raises(ValueError, match="torques must be finite"):
        torque.step(state, jnp.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="actuation must be one of"):
        E.double_pendulum_env("motor")
    with pytest.raises(ValueError, match="key must be a PRNG key"):
        torque.reset(jnp.zeros(3))


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, actuation",
    [
        ("double_pendulum", "torque"),
        ("double_pendulum", "muscle"),
        pytest.param("arm7", "torque", marks=pytest.mark.slow),
        pytest.param("arm7", "muscle", marks=pytest.mark.slow),
    ],
)
def test_float32_batched(model, actuation):
    """float32 (no float64 leaking in under x64), vmapped and jitted."""
    make = E.arm_env if model == "arm7" else E.double_pendulum_env
    if True:
        env = make(actuation, dtype=jnp.float32)
        keys = jax.random.split(jax.random.key(0), 4)
        obs, states = jax.vmap(env.reset)(keys)
        actions = jnp.full((4, env.action_size), 0.2, jnp.float32)
        obs, states, reward, done, info = jax.jit(jax.vmap(env.step))(states, actions)
        assert obs.dtype == jnp.float32 and obs.shape == (4, env.observation_size)
        assert np.all(np.isfinite(obs)) and np.all(np.isfinite(reward)) and not np.any(done)
        assert reward.dtype == jnp.float32 and states.y["p"].dtype == jnp.float32
