"""A learned fatigue term: a parametric fitness law plus a small neural residual (issue #19, item 4).

`NeuralResidualFitness` is a `jaxbio.hamiltonian.FitnessLaw` whose rate is a parametric law's
rate plus a bounded correction from an `equinox.nn.MLP`::

    ḟ = base.rate(t, q, p, q̇, f, F, flow) + c · tanh(MLP(f, q̇ / v₀, t / T)) · f / (f + ε)

with ``c`` = ``rate_scale`` 1/s, ``v₀`` = ``speed_scale`` m/s (or rad/s), ``T`` = ``time_scale``
s and ``ε`` = ``throttle``. The factor ``f/(f + ε)`` switches the correction off as the state
empties, as `ReserveFitness` does with its use, so a learned term cannot drive a reserve through
zero; ``tanh`` bounds it by ``c``. The drives see ``base.value(f)``. Built by
`NeuralResidualFitness.init`, the MLP's last layer is zero: the law *is* the parametric one until
it is trained.

For the sprint (`jaxbio.sprint`), the law plugs into `jaxbio.sprint.sprinter_system` (and
`simulate_race`, `split_times`, `fit`) through their ``fitness=`` hook, which receives the race's
`ReserveFitness`: ``sprinter_system(model, wind, fitness=law.on)``. `fit_residual` trains the shared
MLP over several races with optax through the differentiable split times, jointly with each race's
log-parameters (``f0``, ``v_max``, ``E`` by default). ``examples/learning_fatigue.py`` evaluates it
leave-one-race-out on the 60 m → 100 m forecast against the parametric law and the baselines.

Everything is a pytree: ``eqx.filter_jit``, ``eqx.filter_grad``, ``eqx.partition`` and
``jax.vmap`` apply; float32 works without ``jax_enable_x64``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from jaxbio.hamiltonian import FitnessLaw
from jaxbio.sprint.data import SIGMA_ROUND, Splits
from jaxbio.sprint.fitting import quick_jit
from jaxbio.sprint.model import FREE, PARAMETERS, Sprinter, split_times, sprinter_system

__all__ = ["NeuralResidualFitness", "sprint_residual", "split_loss", "fit_residual"]


def _positive(x, name):
    x = float(x)
    if not (np.isfinite(x) and x > 0):
        raise ValueError(f"NeuralResidualFitness: {name} must be positive and finite, got {x!r}")
    return x


class NeuralResidualFitness(FitnessLaw):
    """A parametric `FitnessLaw` ``base`` plus a learned, bounded correction of its rate (module
    docstring). Fields:

    - ``base``: the parametric law (its ``value`` is the fitness the drives see, its ``size`` ``k``);
    - ``mlp``: `equinox.nn.MLP` from the ``k + n + 1`` features ``(f (k,), q̇/v₀ (n,), t/T)`` to
      ``k`` outputs (``n`` the system's velocity coordinates);
    - ``time_scale`` ``T`` s, ``speed_scale`` ``v₀`` m/s or rad/s, ``rate_scale`` ``c`` 1/s,
      ``throttle`` ``ε`` (static floats, > 0).

    ``ValueError`` (at construction) for a ``base`` that is not a `FitnessLaw`, an ``mlp`` that
    is not an ``eqx.nn.MLP`` or whose output size is not ``k``, or a scale that is not positive;
    and (when a `HamiltonianSystem` is built) for an input size other than ``k + n + 1``.
    """

    base: FitnessLaw
    mlp: eqx.nn.MLP
    time_scale: float = eqx.field(static=True, default=10.0)
    speed_scale: float = eqx.field(static=True, default=10.0)
    rate_scale: float = eqx.field(static=True, default=0.1)
    throttle: float = eqx.field(static=True, default=0.01)

    def __init__(
        self, base: FitnessLaw, mlp: eqx.nn.MLP, *, time_scale=10.0, speed_scale=10.0, rate_scale=0.1, throttle=0.01
    ):
        if not isinstance(base, FitnessLaw):
            raise ValueError(
                f"NeuralResidualFitness: base must be a jaxbio.hamiltonian.FitnessLaw, got {type(base).__name__}"
            )
        if not isinstance(mlp, eqx.nn.MLP):
            raise ValueError(f"NeuralResidualFitness: mlp must be an equinox.nn.MLP, got {type(mlp).__name__}")
        out = 1 if mlp.out_size == "scalar" else mlp.out_size
        if mlp.out_size == "scalar" or out != base.size:
            raise ValueError(
                f"NeuralResidualFitness: mlp.out_size must be the fitness size {base.size} "
                f"(a vector output), got {mlp.out_size!r}"
            )
        self.base = base
        self.mlp = mlp
        self.time_scale = _positive(time_scale, "time_scale")
        self.speed_scale = _positive(speed_scale, "speed_scale")
        self.rate_scale = _positive(rate_scale, "rate_scale")
        self.throttle = _positive(throttle, "throttle")

    @classmethod
    def init(
        cls,
        base: FitnessLaw,
        key: PRNGKeyArray,
        *,
        n_velocities: int = 1,
        width: int = 8,
        depth: int = 2,
        dtype=None,
        **scales,
    ) -> NeuralResidualFitness:
        """A law equal to ``base``: an MLP of ``depth`` hidden layers of ``width`` tanh units
        whose last layer (weights and bias) is zero. ``n_velocities``: ``n``, the velocity
        coordinates of the system it will drive (1 for the sprinter); ``dtype`` of the weights
        (default JAX's float); ``scales``: ``time_scale``, ``speed_scale``, ``rate_scale``,
        ``throttle``."""
        for name, v in (("n_velocities", n_velocities), ("width", width), ("depth", depth)):
            if not (isinstance(v, (int, np.integer)) and v >= 1):
                raise ValueError(f"NeuralResidualFitness.init: {name} must be a positive integer, got {v!r}")
        if not isinstance(base, FitnessLaw):
            raise ValueError(
                f"NeuralResidualFitness.init: base must be a jaxbio.hamiltonian.FitnessLaw, got {type(base).__name__}"
            )
        k = base.size
        mlp = eqx.nn.MLP(
            k + n_velocities + 1, k, width, depth, activation=jnp.tanh, key=key, dtype=dtype or jnp.result_type(float)
        )
        last = mlp.layers[-1]
        mlp = eqx.tree_at(
            lambda m: (m.layers[-1].weight, m.layers[-1].bias),
            mlp,
            (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)),
        )
        return cls(base, mlp, **scales)

    @property
    def size(self) -> int:
        return self.base.size

    def check_size(self, n: int) -> None:
        self.base.check_size(n)
        expected = self.size + n + 1
        if self.mlp.in_size != expected:
            raise ValueError(
                f"NeuralResidualFitness: mlp.in_size is {self.mlp.in_size}, expected {expected} "
                f"(fitness {self.size} + velocities {n} + time 1)"
            )

    def on(self, base: FitnessLaw) -> NeuralResidualFitness:
        """The same correction on another parametric law (`jaxbio.sprint.sprinter_system`'s
        ``fitness=`` hook: ``fitness=law.on`` puts it on each race's `ReserveFitness`)."""
        return NeuralResidualFitness(
            base,
            self.mlp,
            time_scale=self.time_scale,
            speed_scale=self.speed_scale,
            rate_scale=self.rate_scale,
            throttle=self.throttle,
        )

    def value(self, f) -> Array:
        return self.base.value(f)

    def features(self, t, qd, f) -> Float[Array, " m"]:
        """``(k + n + 1,)`` network input ``(f, q̇/v₀, t/T)``."""
        dtype = jnp.result_type(f)
        t = jnp.reshape(jnp.asarray(t, dtype), (1,))
        return jnp.concatenate([f, qd / self.speed_scale, t / self.time_scale]).astype(dtype)

    def correction(self, t, qd, f) -> Float[Array, " k"]:
        """``(k,)`` 1/s: ``c · tanh(MLP(features)) · f/(f + ε)``, the learned part of ``ḟ``."""
        out = jnp.tanh(self.mlp(self.features(t, qd, f)))
        return self.rate_scale * out.astype(f.dtype) * f / (f + self.throttle)

    def rate(self, t, q, p, qd, f, drive_force, flow) -> Array:
        return self.base.rate(t, q, p, qd, f, drive_force, flow) + self.correction(t, qd, f)


def sprint_residual(
    key: PRNGKeyArray, *, width: int = 8, depth: int = 2, dtype=None, **scales
) -> NeuralResidualFitness:
    """A zero-initialised `NeuralResidualFitness` for the sprinter: on the default sprinter's
    `ReserveFitness` (``law.on`` moves it to each race's own), one velocity coordinate."""
    base = sprinter_system(Sprinter()).fitness
    return NeuralResidualFitness.init(base, key, n_velocities=1, width=width, depth=depth, dtype=dtype, **scales)


def _check_thetas(thetas, splits: Splits, names):
    thetas = jnp.asarray(thetas)
    B = splits.distances.shape[0]
    if thetas.shape != (B, len(names)):
        raise ValueError(
            f"thetas has shape {thetas.shape}, expected ({B}, {len(names)}): one row of log {names} per race of splits"
        )
    unknown = set(names) - set(PARAMETERS)
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)}; known: {PARAMETERS}")
    return thetas


def split_loss(
    law: NeuralResidualFitness | None,
    thetas: Float[Array, "B k"],
    splits: Splits,
    *,
    model: Sprinter | None = None,
    names=FREE,
    n_steps: int = 80,
) -> Float[Array, ""]:
    """Mean squared split-time error of ``B`` races in units of the rounding noise
    (``((predicted − measured)/SIGMA_ROUND)²``, weighted by ``splits.weights``, averaged over the
    fitted splits of all races); ``law`` ``None`` for the parametric law. ``thetas`` ``(B, k)``:
    each race's natural logs of ``names``, the rest of ``model`` (default ``Sprinter()``) shared.
    The races are simulated in one ``jax.vmap``; differentiable in ``law`` and ``thetas``."""
    model = Sprinter() if model is None else model
    names = tuple(names)
    thetas = _check_thetas(thetas, splits, names)
    hook = None if law is None else law.on

    def one(theta, sp):
        pred = split_times(
            model.with_log(names, theta),
            sp.distances,
            sp.reaction_time,
            sp.wind,
            sp.duration,
            n_steps=n_steps,
            fitness=hook,
        )
        return jnp.sum(sp.weights * ((pred - sp.times) / SIGMA_ROUND) ** 2)

    per_race = jax.vmap(one)(thetas, splits)
    return jnp.sum(per_race) / jnp.maximum(jnp.sum(splits.weights), 1.0)


def fit_residual(
    law: NeuralResidualFitness,
    splits: Splits,
    thetas: Float[Array, "B k"],
    *,
    model: Sprinter | None = None,
    names=FREE,
    steps: int = 300,
    learning_rate: float = 3e-3,
    theta_learning_rate: float = 1e-3,
    weight_decay: float = 1e-3,
    joint: bool = True,
    n_steps: int = 80,
):
    """Train ``law``'s MLP over the races of ``splits`` with optax (Adam) through the split times.

    Minimises `split_loss` plus ``weight_decay · ‖w‖²`` over the MLP's weights ``w``, and — with
    ``joint`` — each race's log-parameters ``thetas`` ``(B, k)`` (start them at the parametric
    fits, ``jaxbio.sprint.fit(...).theta``), at ``theta_learning_rate``. The base law inside
    ``law`` is not trained (``law.on`` puts the MLP on each race's own law). ``steps`` Adam steps
    in one ``lax.scan`` (one compilation).

    Returns ``(law, thetas, history)``: the trained law, the ``(B, k)`` log-parameters, and
    ``(steps,)`` the split loss before each step.
    ``ValueError`` for a ``law`` that is not a `NeuralResidualFitness`, ``thetas`` of the wrong
    shape, or non-positive ``steps`` / rates.
    """
    if not isinstance(law, NeuralResidualFitness):
        raise ValueError(f"fit_residual: law must be a NeuralResidualFitness, got {type(law).__name__}")
    if not (isinstance(steps, (int, np.integer)) and steps >= 1):
        raise ValueError(f"fit_residual: steps must be a positive integer, got {steps!r}")
    for name, v in (("learning_rate", learning_rate), ("theta_learning_rate", theta_learning_rate)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"fit_residual: {name} must be positive, got {v!r}")
    if not (np.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError(f"fit_residual: weight_decay must be ≥ 0, got {weight_decay!r}")
    model = Sprinter() if model is None else model
    names = tuple(names)
    thetas = _check_thetas(thetas, splits, names).astype(jnp.result_type(splits.times))
    arrays, static = eqx.partition((law, thetas, splits, model), eqx.is_array)
    config = (
        names,
        int(steps),
        float(learning_rate),
        float(theta_learning_rate),
        float(weight_decay),
        bool(joint),
        int(n_steps),
    )
    weights, thetas, history = _train(True, arrays, static=static, config=config)
    mlp_static = eqx.partition(law.mlp, eqx.is_array)[1]
    return eqx.tree_at(lambda l: l.mlp, law, eqx.combine(weights, mlp_static)), thetas, history


def _train_impl(arrays, *, static, config):
    """Adam on ``(MLP weights, thetas)`` in one ``lax.scan``; arrays in, arrays out (so that it
    compiles with ``jax.jit``'s compiler options: the static part is a hashable argument)."""
    law, thetas, splits, model = eqx.combine(arrays, static)
    names, steps, learning_rate, theta_learning_rate, weight_decay, joint, n_steps = config
    weights, mlp_static = eqx.partition(law.mlp, eqx.is_array)
    params = (weights, thetas)
    opt = optax.multi_transform(
        {"mlp": optax.adam(learning_rate), "theta": optax.adam(theta_learning_rate) if joint else optax.set_to_zero()},
        lambda p: (jax.tree_util.tree_map(lambda _: "mlp", p[0]), "theta"),
    )
    state = opt.init(params)

    def loss(params):
        w, th = params
        trained = eqx.tree_at(lambda l: l.mlp, law, eqx.combine(w, mlp_static))
        data = split_loss(trained, th, splits, model=model, names=names, n_steps=n_steps)
        decay = sum(jnp.sum(a**2) for a in jax.tree_util.tree_leaves(w))
        return data + weight_decay * decay, data

    def step(carry, _):
        params, state = carry
        (_, data), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, state = opt.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), data

    (params, _), history = jax.lax.scan(step, (params, state), None, length=steps)
    return params[0], params[1], history


#: compiled like the sprint fits: XLA's quick options on CPU (the training step through the
#: simulator compiles ~3× faster and runs ~1.6× slower; measured on 2 busy cores)
_train = quick_jit(_train_impl, ("static", "config"))
