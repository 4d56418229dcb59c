"""Functional reinforcement-learning environments: reaching with the 7-DOF arm and the double
pendulum, driven by joint torques or muscle excitations (issue #19 item 5).

Convention — gymnax's return values with brax's purity: an environment is an Equinox module
(its parameters are its fields, so there is no separate ``params`` argument) with

    obs, state = env.reset(key)
    obs, state, reward, done, info = env.step(state, action)

both pure functions of pytrees: ``jax.jit``, ``jax.vmap`` (over thousands of environments:
``jax.vmap(env.reset)(keys)``, ``jax.vmap(env.step)(states, actions)``) and ``jax.grad`` apply.
Unlike gymnax's ``step(key, state, action, params)`` no key is passed to ``step``: the
`EnvState` carries its own PRNG key, used only by the optional auto-reset.

Dynamics: each ``step`` holds the action for one control interval ``control_dt`` s and integrates
the environment's `jaxbio.HamiltonianSystem` with `jaxbio.simulate` on a fixed grid of
``substeps`` Tsit5 steps — torques as a `jaxbio.hamiltonian.ConstantDrive` (clipped to
``±torque_limit``), excitations as the `jaxbio.learning.controllers.HeldExcitation` of a muscle
drive with activation states (`jaxbio.learning.controllers.MomentArmMuscles`).

Reward: ``r = −(|q − q*| + w · effort)`` per control interval, with ``|q − q*|`` the Euclidean
joint-space distance (rad) to the episode's target ``q*`` after the step and ``effort`` the mean
of ``(τ/τ_max)²`` (torques) or of ``u²`` (excitations). ``done`` when the episode reaches its
time limit (``info["truncated"]``) or the state stops being finite (``info["nonfinite"]``; the
reward is then ``−failure_penalty``). With ``auto_reset=True`` a finished episode is replaced by a
fresh one from the state's key (gymnax's convention: the returned ``obs`` and ``state`` are the new
episode's, ``reward``/``done``/``info`` the finished step's, ``info["final_observation"]`` the
last observation of the finished episode).

Observation ``(q, q̇, q*)`` ``(3n,)`` rad, rad/s, rad, plus the activations ``a`` ``(m,)`` with
muscles.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio._validate import as_float, check_choice, concrete
from jaxbio.hamiltonian import ConstantDrive, HamiltonianSystem, LinearDamping, NoDissipation, ZeroDrive
from jaxbio.learning.controllers import ARM_POSTURE, ARM_TORQUE_LIMIT, HeldExcitation, agonist_antagonist
from jaxbio.io import load_model
from jaxbio.simulation import FixedGrid, simulate

__all__ = ["EnvState", "ReachingEnv", "arm_env", "double_pendulum_env"]

ACTUATIONS = ("torque", "muscle")


class EnvState(eqx.Module):
    """One environment's state: ``y`` (the `jaxbio.HamiltonianSystem` state ``{"q", "p", "f"}``
    plus ``"a"`` with muscles), ``target`` ``(n,)`` rad, ``time`` ``()`` s since the episode
    began, ``steps`` ``()`` int32 control steps taken, ``key`` ``(2,)`` uint32 PRNG key data (for
    the auto-reset)."""

    y: dict
    target: Array
    time: Array
    steps: Array
    key: Array


def _key_data(key):
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    if key.dtype != jnp.uint32 or key.shape != (2,):
        raise ValueError(
            f"reset: key must be a PRNG key (jax.random.key or jax.random.PRNGKey), got dtype "
            f"{key.dtype}, shape {key.shape}"
        )
    return key


class ReachingEnv(eqx.Module):
    """Reach a random target configuration from a random initial one (see the module doc).

    Fields: ``system`` (`jaxbio.HamiltonianSystem`: tree, dissipation and, for
    ``actuation="muscle"``, a muscle drive with activation states and an ``excitation`` field;
    with torques its drive is replaced at every step), ``initial_low``/``initial_high`` ``(n,)``
    rad (uniform initial ``q``; ``q̇ = 0``, activations 0), ``target_low``/``target_high`` ``(n,)``
    rad, ``torque_limit`` ``(n,)`` N·m, ``control_dt`` ``()`` s, ``effort_weight`` ``()``,
    ``failure_penalty`` ``()``; static: ``substeps`` (integrator steps per control interval),
    ``episode_steps`` (control steps per episode: the time limit is ``episode_steps ·
    control_dt``), ``actuation`` (``"torque"`` or ``"muscle"``), ``auto_reset``.
    """

    system: HamiltonianSystem
    initial_low: Float[Array, " n"]
    initial_high: Float[Array, " n"]
    target_low: Float[Array, " n"]
    target_high: Float[Array, " n"]
    torque_limit: Float[Array, " n"]
    control_dt: Float[Array, ""]
    effort_weight: Float[Array, ""]
    failure_penalty: Float[Array, ""]
    substeps: int = eqx.field(static=True)
    episode_steps: int = eqx.field(static=True)
    actuation: str = eqx.field(static=True)
    auto_reset: bool = eqx.field(static=True)

    def __check_init__(self):
        check_choice(self.actuation, ACTUATIONS, "ReachingEnv: actuation")
        if self.actuation == "muscle" and not (self.system.stateful and hasattr(self.system.drive, "excitation")):
            raise ValueError(
                "ReachingEnv: actuation='muscle' needs a system whose drive has activation states and an "
                "'excitation' field (e.g. jaxbio.learning.controllers.MomentArmMuscles)"
            )
        if self.system.nq != self.system.nv:
            raise ValueError("ReachingEnv: the tree must have 1-DOF joints only (nq == nv)")
        n = self.system.nv
        for name in ("initial_low", "initial_high", "target_low", "target_high", "torque_limit"):
            if jnp.shape(getattr(self, name)) != (n,):
                raise ValueError(f"ReachingEnv: {name} has shape {jnp.shape(getattr(self, name))}, expected ({n},)")
        if self.substeps < 1 or self.episode_steps < 1:
            raise ValueError(
                f"ReachingEnv: substeps and episode_steps must be ≥ 1, got {self.substeps}, {self.episode_steps}"
            )
        dt = concrete(self.control_dt)
        if dt is not None and not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"ReachingEnv: control_dt must be positive and finite, got {dt}")

    @property
    def n(self) -> int:
        """Number of coordinates."""
        return self.system.nv

    @property
    def action_size(self) -> int:
        """``n`` torques or ``m`` excitations."""
        return self.n if self.actuation == "torque" else self.system.drive.state_size

    @property
    def observation_size(self) -> int:
        return 3 * self.n + (self.action_size if self.actuation == "muscle" else 0)

    @property
    def time_limit(self) -> float:
        """Episode length, s."""
        return self.episode_steps * float(self.control_dt)

    def observation(self, state: EnvState) -> Float[Array, " obs"]:
        """``(q, q̇, q*)`` ``(3n,)`` (plus activations ``(m,)`` with muscles)."""
        y = state.y
        qd = self.system.velocities(y["q"], y["p"])
        parts = [y["q"], qd, state.target] + ([y["a"]] if self.actuation == "muscle" else [])
        return jnp.concatenate(parts)

    def reset(self, key) -> tuple[Array, EnvState]:
        """``(obs, state)`` of a new episode: ``q`` and the target uniform in their boxes, at rest.
        ``key``: a PRNG key (``jax.random.key`` or ``jax.random.PRNGKey``)."""
        key = _key_data(key)
        keys = jax.random.split(key, 3)
        dtype = self.initial_low.dtype
        q0 = jax.random.uniform(keys[0], (self.n,), dtype, self.initial_low, self.initial_high)
        target = jax.random.uniform(keys[1], (self.n,), dtype, self.target_low, self.target_high)
        y = self.system.initial_state(q0)
        state = EnvState(y, target, jnp.zeros((), dtype), jnp.zeros((), jnp.int32), keys[2])
        return self.observation(state), state

    def _check_action(self, action):
        action = as_float(action, "step: action", like=self.control_dt)
        if action.shape != (self.action_size,):
            what = "torques (N·m)" if self.actuation == "torque" else "muscle excitations in [0, 1]"
            raise ValueError(f"step: action has shape {action.shape}, expected ({self.action_size},) {what}")
        if self.actuation == "muscle":
            u = concrete(action)
            if u is not None and not np.all((u >= 0) & (u <= 1)):
                raise ValueError(f"step: muscle excitations must lie in [0, 1], got {u.tolist()}")
            action = eqx.error_if(
                action, ~jnp.all((action >= 0) & (action <= 1)), "step: muscle excitations must lie in [0, 1]"
            )
        else:
            u = concrete(action)
            if u is not None and not np.all(np.isfinite(u)):
                raise ValueError(f"step: torques must be finite, got {u.tolist()}")
            action = eqx.error_if(action, ~jnp.all(jnp.isfinite(action)), "step: torques must be finite")
        return action

    def step(self, state: EnvState, action) -> tuple[Array, EnvState, Array, Array, dict]:
        """Hold ``action`` for ``control_dt`` s: ``(obs, state, reward, done, info)``.

        ``action``: ``(n,)`` torques N·m (clipped to ``±torque_limit``) or ``(m,)`` excitations
        in [0, 1] (outside: ``ValueError`` for a concrete action, an `equinox.error_if` inside
        jit; a wrong shape is a ``ValueError`` while tracing). ``info``: ``distance`` (rad),
        ``effort``, ``truncated``, ``nonfinite`` and, with auto-reset, ``final_observation``.
        """
        action = self._check_action(action)
        if self.actuation == "torque":
            tau = jnp.clip(action, -self.torque_limit, self.torque_limit)
            system = eqx.tree_at(lambda s: s.drive, self.system, ConstantDrive(tau))
            effort = jnp.mean((tau / self.torque_limit) ** 2)
        else:
            system = eqx.tree_at(lambda s: s.drive.excitation, self.system, HeldExcitation(action))
            effort = jnp.mean(action**2)
        t0 = state.time
        traj = simulate(
            system,
            state.y,
            t0,
            t0 + self.control_dt,
            form="hamiltonian",
            throw=False,
            stepsize_controller=FixedGrid(self.substeps),
        )
        y = {"q": traj.q[-1], "p": traj.p[-1], "f": traj.f[-1]}
        if self.actuation == "muscle":
            y["a"] = traj.a[-1]
        nonfinite = ~jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in y.values()]))
        steps = state.steps + 1
        next_state = EnvState(y, state.target, t0 + self.control_dt, steps, state.key)
        distance = jnp.linalg.norm(y["q"] - state.target)
        reward = jnp.where(nonfinite, -self.failure_penalty, -(distance + self.effort_weight * effort))
        truncated = steps >= self.episode_steps
        done = truncated | nonfinite
        obs = jnp.concatenate([y["q"], traj.qd[-1], state.target] + ([y["a"]] if self.actuation == "muscle" else []))
        info = {"distance": distance, "effort": effort, "truncated": truncated, "nonfinite": nonfinite}
        if self.auto_reset:
            key, sub = jax.random.split(state.key)
            obs_reset, state_reset = self.reset(sub)
            state_reset = eqx.tree_at(lambda s: s.key, state_reset, key)
            info["final_observation"] = obs
            next_state = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state_reset, next_state)
            obs = jnp.where(done, obs_reset, obs)
        return obs, next_state, reward, done, info


def _vector(x, n, dtype, name):
    x = jnp.asarray(x, dtype)
    return jnp.broadcast_to(x, (n,)) if x.ndim == 0 else x


def _env(
    tree,
    actuation,
    muscles,
    torque_limit,
    initial,
    target,
    control_dt,
    substeps,
    time_limit,
    effort_weight,
    damping,
    auto_reset,
    failure_penalty,
):
    check_choice(actuation, ACTUATIONS, "actuation")
    dtype = tree.masses.dtype
    n = tree.nv
    episode_steps = int(round(float(time_limit) / float(control_dt)))
    if episode_steps < 1:
        raise ValueError(f"time_limit {time_limit} s is shorter than one control interval {control_dt} s")
    dissipation = LinearDamping(jnp.asarray(damping, dtype)) if np.any(np.asarray(damping) != 0) else NoDissipation()
    drive = muscles if actuation == "muscle" else ZeroDrive()
    system = HamiltonianSystem(tree, drive, dissipation)
    (il, ih), (tl, th) = initial, target
    return ReachingEnv(
        system,
        *(_vector(x, n, dtype, "") for x in (il, ih, tl, th, torque_limit)),
        jnp.asarray(control_dt, dtype),
        jnp.asarray(effort_weight, dtype),
        jnp.asarray(failure_penalty, dtype),
        int(substeps),
        episode_steps,
        actuation,
        bool(auto_reset),
    )


def arm_env(
    actuation: str = "torque",
    *,
    dtype=None,
    control_dt: float = 0.02,
    substeps: int = 2,
    time_limit: float = 2.0,
    effort_weight: float = 0.1,
    damping=0.0,
    spread: float = 0.5,
    auto_reset: bool = False,
    failure_penalty: float = 100.0,
) -> ReachingEnv:
    """The shipped 7-DOF ``arm7`` reaching from and to configurations uniform in
    ``ARM_POSTURE ± spread`` rad. Torques limited to `ARM_TORQUE_LIMIT` N·m; muscles: the 14
    `agonist_antagonist` muscles of `jaxbio.learning.controllers.arm_muscles`. ``damping``: joint
    viscous damping N·m·s/rad (scalar or ``(7,)``; default none). Control at ``1/control_dt``
    Hz with ``substeps`` Tsit5 steps inside, episodes of ``time_limit`` s."""
    from jaxbio.learning.controllers import arm_muscles

    tree = load_model("arm7", dtype=dtype).tree
    box = (ARM_POSTURE - spread, ARM_POSTURE + spread)
    muscles = arm_muscles(dtype=tree.masses.dtype) if actuation == "muscle" else None
    return _env(
        tree,
        actuation,
        muscles,
        ARM_TORQUE_LIMIT,
        box,
        box,
        control_dt,
        substeps,
        time_limit,
        effort_weight,
        damping,
        auto_reset,
        failure_penalty,
    )


def double_pendulum_env(
    actuation: str = "torque",
    *,
    dtype=None,
    control_dt: float = 0.02,
    substeps: int = 2,
    time_limit: float = 2.0,
    effort_weight: float = 0.1,
    damping=0.0,
    spread: float = 1.0,
    torque_limit=(20.0, 10.0),
    auto_reset: bool = False,
    failure_penalty: float = 100.0,
) -> ReachingEnv:
    """The shipped ``double_pendulum`` (Watanabe & Duarte's notebook: rods of 1 kg, 1 m and 1 kg, 0.5 m, hanging at
    ``q = 0``) reaching between configurations uniform in ``±spread`` rad. Torques limited to
    ``torque_limit`` N·m; muscles: one `agonist_antagonist` pair per joint, 600 N / 300 N at
    4 cm / 3 cm (peak moments 24 and 9 N·m)."""
    tree = load_model("double_pendulum", dtype=dtype).tree
    box = (-spread * np.ones(2), spread * np.ones(2))
    muscles = (
        agonist_antagonist([600.0, 300.0], [0.04, 0.03], dtype=tree.masses.dtype) if actuation == "muscle" else None
    )
    return _env(
        tree,
        actuation,
        muscles,
        torque_limit,
        box,
        box,
        control_dt,
        substeps,
        time_limit,
        effort_weight,
        damping,
        auto_reset,
        failure_penalty,
    )
