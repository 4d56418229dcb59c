"""The learned fatigue term (jaxbio.learning.fatigue, issue #19 item 4).

Checked against independent references: the parametric sprinter (a zero last layer must give its
split times exactly), central finite differences (gradients with respect to the MLP weights), and
synthetic races generated with a *different* fatigue law (an extra speed-dependent depletion),
whose split-time loss the training must cut by a stated factor in a bounded number of steps.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import jaxbio.sprint as sprint
from jaxbio.hamiltonian import ConstantFitness, FitnessLaw
from jaxbio.learning import fatigue
from jaxbio.learning.fatigue import NeuralResidualFitness

from jaxbio.sprint.fitting import QUICK_COMPILE

D = np.arange(10.0, 101.0, 10.0)
RT, WIND = 0.15, 0.5


def _quick_jit(fn, like):
    """``fn`` jitted with the sprint fit's quick XLA options (compile time dominates these small
    tests); ``like``: a pytree shaped as ``fn``'s argument, whose non-array leaves are closed over."""
    static = eqx.partition(like, eqx.is_array)[1]
    jitted = jax.jit(lambda arrays: fn(eqx.combine(arrays, static)), compiler_options=QUICK_COMPILE)
    return lambda tree: jitted(eqx.partition(tree, eqx.is_array)[0])


def _with_last_layer(law, scale, key=jax.random.key(7)):
    """``law`` with a random last layer of size ``scale`` (a law that differs from the parametric one)."""
    k1, k2 = jax.random.split(key)
    last = law.mlp.layers[-1]
    new = (scale * jax.random.normal(k1, last.weight.shape), scale * jax.random.normal(k2, last.bias.shape))
    return eqx.tree_at(lambda l: (l.mlp.layers[-1].weight, l.mlp.layers[-1].bias), law, new)


def test_zero_last_layer_reproduces_the_parametric_split_times():
    model = sprint.Sprinter(f0=16.0, vmax=20.0, energy=1000.0)
    law = fatigue.sprint_residual(jax.random.key(0))
    assert np.all(np.asarray(law.mlp.layers[-1].weight) == 0) and np.any(np.asarray(law.mlp.layers[0].weight) != 0)
    times = _quick_jit(
        lambda law: jnp.stack(
            [sprint.split_times(model, D, RT, WIND), sprint.split_times(model, D, RT, WIND, fitness=law.on)]
        ),
        law,
    )
    plain, neural = np.asarray(times(law))
    np.testing.assert_allclose(neural, plain, rtol=0, atol=1e-10)
    # and the hook is really used: a non-zero last layer moves the late splits
    _, moved = np.asarray(times(_with_last_layer(law, 0.5)))
    assert np.max(np.abs(moved - plain)) > 1e-3


@pytest.mark.slow
def test_split_time_gradient_wrt_mlp_weights_matches_central_differences():
    model = sprint.Sprinter(f0=16.0, vmax=20.0, energy=1000.0)
    law = _with_last_layer(fatigue.sprint_residual(jax.random.key(1)), 0.05)
    # only the MLP's weights vary; the base law's parameters stay as they are
    weights, mlp_static = eqx.partition(law.mlp, eqx.is_inexact_array)
    w_mlp, unravel = ravel_pytree(weights)

    def times(w):
        trained = eqx.tree_at(lambda l: l.mlp, law, eqx.combine(unravel(w), mlp_static))
        return sprint.split_times(model, D[5:], RT, WIND, fitness=trained.on)  # 60-100 m, where fatigue shows

    weights_of_splits = jnp.linspace(1.0, 2.0, D[5:].size)
    f = _quick_jit(lambda w: jnp.dot(weights_of_splits, times(w)), w_mlp)
    grad = _quick_jit(jax.grad(lambda w: jnp.dot(weights_of_splits, times(w))), w_mlp)(w_mlp)  # reverse, as training
    rng = np.random.default_rng(0)
    h = 1e-4
    for _ in range(3):
        v = jnp.asarray(rng.normal(size=w_mlp.shape))
        fd = (f(w_mlp + h * v) - f(w_mlp - h * v)) / (2 * h)
        np.testing.assert_allclose(grad @ v, fd, rtol=1e-6, atol=1e-10)
    assert float(jnp.max(jnp.abs(grad))) > 1e-3  # a gradient that is really there


class _SpeedFatigue(FitnessLaw):
    """The synthetic truth: the reserve law plus an extra depletion ``k (v/10)² e/(e + 0.01)``."""

    base: FitnessLaw
    k: float = 0.02

    def value(self, f):
        return self.base.value(f)

    def rate(self, t, q, p, qd, f, drive_force, flow):
        return self.base.rate(t, q, p, qd, f, drive_force, flow) - self.k * (qd / 10.0) ** 2 * f / (f + 0.01)


#: the training must cut the synthetic races' split loss at least this much in ``STEPS - 1`` Adam steps
FACTOR, STEPS = 20.0, 40


@pytest.mark.slow
def test_training_on_races_with_a_different_fatigue_law_lowers_the_loss():
    thetas = jnp.stack(
        [
            sprint.Sprinter(f0=16.0, vmax=20.0, energy=1100.0).log_values(),
            sprint.Sprinter(f0=15.0, vmax=21.0, energy=1200.0).log_values(),
        ]
    )
    truth = _quick_jit(
        jax.vmap(
            lambda th: sprint.split_times(
                sprint.Sprinter().with_log(sprint.FREE, th), D, RT, 0.0, fitness=_SpeedFatigue
            )
        ),
        thetas,
    )(thetas)
    splits = sprint.Splits.from_arrays([D, D], list(np.asarray(truth)), [RT, RT], [0.0, 0.0])
    law0 = fatigue.sprint_residual(jax.random.key(0))
    # parameters known: only the MLP learns (joint=False); the truth is ~0.14-0.22 s slower at 100 m
    law, thetas_out, history = fatigue.fit_residual(
        law0, splits, thetas, steps=STEPS, learning_rate=3e-2, weight_decay=0.0, joint=False
    )
    np.testing.assert_array_equal(np.asarray(thetas_out), np.asarray(thetas))
    before, after = float(history[0]), float(history[-1])  # the loss at the start and after STEPS - 1 steps
    assert before > 100.0  # the parametric law misses the truth by far more than the rounding noise
    assert after < before / FACTOR, (before, after)
    # what it learned is extra fatigue: a negative correction of the reserve rate at race speeds
    assert float(law.correction(5.0, jnp.array([11.0]), jnp.array([0.5]))[0]) < 0


def test_bad_inputs_raise_clear_errors():
    base = sprint.sprinter_system(sprint.Sprinter()).fitness
    law = fatigue.sprint_residual(jax.random.key(0))
    mlp = law.mlp
    with pytest.raises(ValueError, match="base must be a jaxbio.hamiltonian.FitnessLaw"):
        NeuralResidualFitness("reserve", mlp)
    with pytest.raises(ValueError, match="mlp must be an equinox.nn.MLP"):
        NeuralResidualFitness(base, lambda x: x)
    with pytest.raises(ValueError, match="out_size"):
        NeuralResidualFitness(base, eqx.nn.MLP(3, 2, 4, 1, key=jax.random.key(0)))
    with pytest.raises(ValueError, match="out_size"):
        NeuralResidualFitness(base, eqx.nn.MLP(3, "scalar", 4, 1, key=jax.random.key(0)))
    with pytest.raises(ValueError, match="rate_scale must be positive"):
        NeuralResidualFitness(base, mlp, rate_scale=0.0)
    with pytest.raises(ValueError, match="time_scale must be positive"):
        NeuralResidualFitness(base, mlp, time_scale=float("nan"))
    with pytest.raises(ValueError, match="width must be a positive integer"):
        NeuralResidualFitness.init(base, jax.random.key(0), width=0)
    # an MLP sized for two velocity coordinates on the one-coordinate sprinter
    two = NeuralResidualFitness.init(ConstantFitness(), jax.random.key(0), n_velocities=2)
    with pytest.raises(ValueError, match="mlp.in_size is 4, expected 3"):
        sprint.sprinter_system(sprint.Sprinter(), fitness=two.on)
    with pytest.raises(ValueError, match="fitness must be a function ReserveFitness -> FitnessLaw"):
        sprint.sprinter_system(sprint.Sprinter(), fitness=law)  # the law itself, not law.on
    with pytest.raises(ValueError, match="must return a jaxbio.hamiltonian.FitnessLaw"):
        sprint.sprinter_system(sprint.Sprinter(), fitness=lambda reserve: 1.0)
    splits = sprint.Splits.from_arrays([D], [D / 10.0 + RT], [RT])
    with pytest.raises(ValueError, match=r"thetas has shape \(2, 3\), expected \(1, 3\)"):
        fatigue.fit_residual(law, splits, jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        fatigue.fit_residual(law, splits, jnp.zeros((1, 3)), steps=0)
    with pytest.raises(ValueError, match="learning_rate must be positive"):
        fatigue.fit_residual(law, splits, jnp.zeros((1, 3)), learning_rate=-1.0)
    with pytest.raises(ValueError, match="law must be a NeuralResidualFitness"):
        fatigue.fit_residual(base, splits, jnp.zeros((1, 3)))
    with pytest.raises(ValueError, match="unknown parameter"):
        fatigue.split_loss(law, jnp.zeros((1, 1)), splits, names=("speed",))
