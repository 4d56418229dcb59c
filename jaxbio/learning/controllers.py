"""Neural controllers as `jaxbio.hamiltonian.Drive`\\ s, trained by backpropagating through
`jaxbio.simulate` (issue #19 item 2), and the classical baselines they are compared with.

- `MLPDrive`: joint torques ``τ = τ_max ⊙ tanh(MLP(q − q*, q, s q̇))`` N·m (N on prismatic
  coordinates) from an `equinox.nn.MLP` of the state and a target configuration ``q*``.
- `MomentArmMuscles`: Hill muscles (`jaxbio.muscles.curves.HillMuscle`) acting through constant
  moment arms, with activation dynamics (`jaxbio.muscles.activation.ActivationDynamics`) as the
  drive's states — `jaxbio.muscles.MuscleActuatedDrive` with the path geometry replaced by
  ``l(q) = l_ref − Rᵀ q``. `agonist_antagonist` builds one flexor/extensor pair per coordinate.
- `MLPExcitationDrive`: state feedback through muscles: excitations
  ``u = sigmoid(MLP(q − q*, q, s q̇, a)) ∈ (0, 1)^m`` drive the activation dynamics of any muscle
  drive with activation states (a `MomentArmMuscles` or a `jaxbio.muscles.MuscleActuatedDrive`,
  whose own time-function excitation is then unused).
- Baselines: `pd_gravity_torque` (PD plus gravity compensation) and `computed_torque`
  (``M(q)(K_p e − K_d q̇) + C(q, q̇)q̇ + g(q)``, `jaxbio.inverse_dynamics`), as `FeedbackDrive`.
- Training helpers: `rollout` (fixed-grid Tsit5 steps of a drive towards a target; the
  equations of `jaxbio.HamiltonianSystem` in velocity form, whose reverse mode is cheaper) and
  `reaching_loss` (mean squared joint error over the horizon, batched over initial states and
  targets with `jax.vmap`).

Every drive is an Equinox module whose numbers are array leaves: ``eqx.filter_grad`` differentiates
the MLP weights, ``eqx.partition`` freezes any part, ``jax.vmap`` runs over targets (`with_target`).
Controllers ignore the fitness state (like motors); muscle drives scale activation by ``f[0]``.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float

from jaxbio._validate import as_float, check_values, coordinate_vector
from jaxbio.dynamics import gravity_forces, inverse_dynamics
from jaxbio.hamiltonian import Dissipation, Drive, HamiltonianSystem, NoPotential
from jaxbio.muscles.activation import ActivationDynamics
from jaxbio.muscles.curves import HillMuscle
from jaxbio.simulation import step_grid
from jaxbio.tree import SegmentTree

__all__ = [
    "MLPDrive",
    "MomentArmMuscles",
    "HeldExcitation",
    "agonist_antagonist",
    "arm_muscles",
    "ARM_POSTURE",
    "ARM_TORQUE_LIMIT",
    "ARM_MUSCLE_FORCE",
    "ARM_MOMENT_ARM",
    "ARM_DAMPING",
    "MLPExcitationDrive",
    "FeedbackDrive",
    "pd_gravity_torque",
    "computed_torque",
    "Rollout",
    "rollout",
    "reaching_loss",
]


def _features(q, qd, target, velocity_scale):
    """The controllers' input ``(q − q*, q, s q̇)`` ``(3n,)`` (rad, rad, rad for ``s`` in s)."""
    return jnp.concatenate([q - target, q, velocity_scale * qd])


def _mlp(n_in, n_out, width, depth, key, dtype):
    mlp = eqx.nn.MLP(n_in, n_out, width, depth, activation=jax.nn.tanh, key=key)
    # small last layer: the untrained policy starts near zero output (tanh/sigmoid mid-range)
    last = mlp.layers[-1]
    mlp = eqx.tree_at(lambda m: m.layers[-1].weight, mlp, 0.1 * last.weight)
    return jax.tree_util.tree_map(lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, mlp)


def _check_target(target, n, owner, like):
    target = as_float(target, f"{owner}: target", like=like)
    if target.shape != (n,):
        raise ValueError(f"{owner}: target has shape {target.shape}, expected ({n},) (one per coordinate)")
    return target


class MLPDrive(Drive):
    """Joint torques from a multilayer perceptron of the state and a target configuration.

    ``τ = τ_max ⊙ tanh(MLP([q − q*, q, s·q̇]))`` ``(n,)`` N·m (N on prismatic coordinates), so
    ``|τ_i| < τ_max,i``. Fields: ``mlp`` (`equinox.nn.MLP`, ``3n → n``, tanh hidden layers),
    ``torque_limit`` ``τ_max`` ``(n,)`` N·m (> 0), ``target`` ``q*`` ``(n,)`` rad/m,
    ``velocity_scale`` ``s`` ``()`` s (scales ``q̇`` rad/s to the order of radians; default 0.2).
    For trees of 1-DOF joints (``nq == nv == n``). Stateless; ignores the fitness.

    Example::

        >>> tree = jb.load_model("double_pendulum")
        >>> drive = MLPDrive(2, torque_limit=20.0, key=jax.random.key(0))
        >>> system = jb.HamiltonianSystem(tree, drive.with_target(jnp.array([0.5, -0.3])))
    """

    mlp: eqx.nn.MLP
    torque_limit: Float[Array, " n"]
    target: Float[Array, " n"]
    velocity_scale: Float[Array, ""]

    def __init__(
        self, n: int, torque_limit, *, key, target=None, width: int = 64, depth: int = 2, velocity_scale=0.2, dtype=None
    ):
        n = int(n)
        if n < 1:
            raise ValueError(f"MLPDrive: n must be ≥ 1, got {n}")
        self.torque_limit = jnp.broadcast_to(coordinate_vector(torque_limit, "MLPDrive: torque_limit", n), (n,))
        if dtype is not None:
            self.torque_limit = self.torque_limit.astype(dtype)
        check_values(self.torque_limit, "MLPDrive: torque_limit", positive=True)
        dtype = self.torque_limit.dtype
        self.target = jnp.zeros(n, dtype) if target is None else _check_target(target, n, "MLPDrive", self.torque_limit)
        self.velocity_scale = jnp.asarray(velocity_scale, dtype)
        check_values(self.velocity_scale, "MLPDrive: velocity_scale", positive=True)
        self.mlp = _mlp(3 * n, n, width, depth, key, dtype)

    @property
    def n(self) -> int:
        return self.torque_limit.shape[0]

    def check_size(self, n):
        if self.n != n:
            raise ValueError(f"MLPDrive: built for {self.n} coordinates, the tree has {n}")

    def with_target(self, target) -> MLPDrive:
        """The same controller aiming at ``target`` ``(n,)`` rad/m (traceable: vmap over targets)."""
        return eqx.tree_at(lambda d: d.target, self, _check_target(target, self.n, "MLPDrive", self.torque_limit))

    def policy(self, q, qd, target) -> Float[Array, " n"]:
        """``τ`` ``(n,)`` N·m from ``q`` ``(n,)`` rad, ``qd`` ``(n,)`` rad/s, ``target`` ``(n,)`` rad."""
        if jnp.shape(q) != (self.n,) or jnp.shape(qd) != (self.n,) or jnp.shape(target) != (self.n,):
            raise ValueError(
                f"MLPDrive: q, qd and target must be ({self.n},), got {jnp.shape(q)}, "
                f"{jnp.shape(qd)}, {jnp.shape(target)}"
            )
        x = _features(q, qd, target, self.velocity_scale).astype(self.torque_limit.dtype)
        return self.torque_limit * jnp.tanh(self.mlp(x))

    def __call__(self, t, q, qd, f, a=None):
        """``τ`` ``(n,)`` N·m at the state ``(q, q̇)`` towards ``self.target``."""
        return self.policy(q, qd, self.target).astype(qd.dtype)


class HeldExcitation(eqx.Module):
    """A constant excitation ``u(t) = u`` ``(m,)`` in [0, 1]: the `excitation` of a muscle drive
    held over one control interval (what `jaxbio.learning.env` sets from an action)."""

    u: Float[Array, " m"]

    def __call__(self, t):
        return self.u


class MomentArmMuscles(Drive):
    """Hill muscles with constant moment arms and activation dynamics, a `Drive` with states.

    Per muscle ``j`` of ``m``, on ``n`` coordinates with moment arms ``R`` ``(n, m)`` m:

        l_j(q) = l_ref,j − Σ_i R_ij q_i          musculotendon length (m; R_ij > 0: shortens as q_i grows)
        l̇_j    = −Σ_i R_ij q̇_i                    (m/s, lengthening positive)
        F_j    = HillMuscle.force(f₀ a_j, l_j, l̇_j)    tension (N; De Groote curves, Hill force–velocity)
        τ      = R F                              (n,) N·m — the same virtual-work convention as
                                                  `jaxbio.muscles.MuscleDrive`
        ȧ      = ActivationDynamics.rate(u(t), a)

    — `jaxbio.muscles.MuscleActuatedDrive` with the path geometry replaced by constant moment
    arms. Fields: ``moment_arms`` ``(n, m)`` m, ``reference_lengths`` ``l_ref`` ``(m,)`` m (the
    lengths at ``q = 0``), ``muscles`` (`HillMuscle`, m muscles), ``activation``
    (`ActivationDynamics`), ``excitation`` ``u(t) -> (m,)`` in [0, 1] (default: `HeldExcitation`
    of zeros). State ``a`` ``(m,)`` activations in [0, 1].
    """

    moment_arms: Float[Array, "n m"]
    reference_lengths: Float[Array, " m"]
    muscles: HillMuscle
    activation: ActivationDynamics
    excitation: Callable

    def __init__(
        self,
        moment_arms,
        reference_lengths,
        muscles: HillMuscle,
        activation: ActivationDynamics | None = None,
        excitation: Callable | None = None,
    ):
        self.moment_arms = as_float(moment_arms, "MomentArmMuscles: moment_arms")
        if self.moment_arms.ndim != 2:
            raise ValueError(
                f"MomentArmMuscles: moment_arms must be (n_coordinates, n_muscles), got shape {self.moment_arms.shape}"
            )
        m = self.moment_arms.shape[1]
        self.reference_lengths = as_float(
            reference_lengths, "MomentArmMuscles: reference_lengths", like=self.moment_arms
        )
        if self.reference_lengths.shape != (m,):
            raise ValueError(
                f"MomentArmMuscles: reference_lengths has shape {self.reference_lengths.shape}, "
                f"expected ({m},) (one per muscle)"
            )
        if not isinstance(muscles, HillMuscle) or muscles.size != m:
            raise ValueError(
                f"MomentArmMuscles: muscles must be a HillMuscle with {m} muscles (the columns of "
                f"moment_arms), got {type(muscles).__name__}"
                + (f" with {muscles.size}" if isinstance(muscles, HillMuscle) else "")
            )
        check_values(self.moment_arms, "MomentArmMuscles: moment_arms")
        check_values(self.reference_lengths, "MomentArmMuscles: reference_lengths", positive=True)
        self.muscles = muscles
        self.activation = ActivationDynamics() if activation is None else activation
        self.excitation = HeldExcitation(jnp.zeros(m, self.moment_arms.dtype)) if excitation is None else excitation

    @property
    def n_muscles(self) -> int:
        return self.moment_arms.shape[1]

    @property
    def state_size(self) -> int:
        return self.n_muscles

    def check_size(self, n):
        if self.moment_arms.shape[0] != n:
            raise ValueError(
                f"MomentArmMuscles: moment_arms has {self.moment_arms.shape[0]} rows, the tree has {n} coordinates"
            )

    def lengths(self, q) -> Float[Array, " m"]:
        """Musculotendon lengths ``(m,)`` m."""
        return self.reference_lengths - self.moment_arms.T @ q

    def tensions(self, q, qd, f, a) -> Float[Array, " m"]:
        """Musculotendon tensions ``(m,)`` N (activations ``f[0]·a`` clipped to [0, 1])."""
        return self.muscles.force(jnp.clip(f[0] * a, 0.0, 1.0), self.lengths(q), -self.moment_arms.T @ qd)

    def __call__(self, t, q, qd, f, a=None):
        """Generalised forces ``R F`` ``(n,)`` N·m / N; ``a`` ``(m,)`` activations (required)."""
        if a is None:
            raise ValueError("MomentArmMuscles has states (activations): call it as drive(t, q, qd, f, a)")
        return (self.moment_arms @ self.tensions(q, qd, f, a)).astype(qd.dtype)

    def state_rate(self, t, q, qd, f, a):
        return self.activation.rate(jnp.asarray(self.excitation(t), a.dtype), a)


# The 7-DOF arm (shipped ``arm7``: shoulder flexion, abduction, rotation, elbow flexion, forearm
# rotation, wrist flexion, wrist deviation). A mid-range posture (rad), torque limits (N·m) and one
# agonist/antagonist muscle pair per joint: peak isometric forces (N) and constant moment arms (m),
# i.e. peak active moments F⁰ r = 24, 24, 8, 24, 3, 4.5, 4.5 N·m — round numbers of the order of
# adult arm muscles (deltoid/latissimus, rotator cuff, biceps/triceps, forearm muscles), not fitted.
ARM_POSTURE = np.array([0.4, 0.3, 0.0, 0.9, 0.0, 0.0, 0.0])
ARM_TORQUE_LIMIT = np.array([30.0, 30.0, 5.0, 15.0, 1.0, 2.0, 2.0])
ARM_MUSCLE_FORCE = np.array([800.0, 800.0, 400.0, 800.0, 200.0, 300.0, 300.0])
ARM_MOMENT_ARM = np.array([0.03, 0.03, 0.02, 0.03, 0.015, 0.015, 0.015])
# Joint viscous damping (N·m·s/rad) of the training task (and `arm_env(damping=ARM_DAMPING)`): it bounds the
# speed an untrained policy can reach (the distal joints move ~0.002 kg·m²), so that fixed steps
# of 20 ms stay stable; of the order of measured human joint damping.
ARM_DAMPING = np.array([1.0, 1.0, 0.3, 0.5, 0.05, 0.1, 0.1])


def arm_muscles(dtype=None) -> MomentArmMuscles:
    """The 14 muscles of the 7-DOF arm: `agonist_antagonist` with ``ARM_MUSCLE_FORCE`` N and
    ``ARM_MOMENT_ARM`` m (optimal fiber length 0.10 m, tendon slack length 0.20 m, rigid tendons,
    fibers optimal at ``q = 0``; activation 15 ms / deactivation 60 ms)."""
    return agonist_antagonist(ARM_MUSCLE_FORCE, ARM_MOMENT_ARM, dtype=dtype)


def agonist_antagonist(
    max_isometric_force,
    moment_arm,
    *,
    optimal_fiber_length=0.10,
    tendon_slack_length=0.20,
    max_contraction_velocity=10.0,
    activation: ActivationDynamics | None = None,
    dtype=None,
) -> MomentArmMuscles:
    """One flexor/extensor pair of Hill muscles per coordinate with constant moment arms.

    ``max_isometric_force`` ``(n,)`` N and ``moment_arm`` ``(n,)`` m (> 0): muscle ``2i`` pulls
    towards positive ``q_i`` (moment arm ``+r_i``), muscle ``2i + 1`` towards negative (``−r_i``),
    so each coordinate's peak active moment is ``±F⁰_i r_i`` N·m. Rigid tendons; fibers at their
    optimal length at ``q = 0`` (``l_ref = l_ts + l_opt``), so a joint excursion ``Δq`` changes the
    fiber length by ``r Δq / l_opt`` optimal lengths. ``optimal_fiber_length`` m,
    ``tendon_slack_length`` m and ``max_contraction_velocity`` (``l_opt``/s) are scalars or
    ``(n,)``, shared by the pair. Returns a `MomentArmMuscles` with ``m = 2n``.
    """
    force = jnp.atleast_1d(as_float(max_isometric_force, "agonist_antagonist: max_isometric_force"))
    if dtype is not None:
        force = force.astype(dtype)
    arm = jnp.atleast_1d(as_float(moment_arm, "agonist_antagonist: moment_arm", like=force))
    n = max(force.shape[0], arm.shape[0])
    if force.ndim != 1 or arm.ndim != 1 or force.shape[0] not in (1, n) or arm.shape[0] not in (1, n):
        raise ValueError(
            f"agonist_antagonist: max_isometric_force and moment_arm must be (n,) or scalars, got "
            f"{force.shape} and {arm.shape}"
        )
    check_values(force, "agonist_antagonist: max_isometric_force", positive=True)
    check_values(arm, "agonist_antagonist: moment_arm", positive=True)
    force, arm = jnp.broadcast_to(force, (n,)), jnp.broadcast_to(arm, (n,))

    def pair(x, name):
        x = jnp.broadcast_to(jnp.atleast_1d(as_float(x, f"agonist_antagonist: {name}", like=force)), (n,))
        return jnp.repeat(x, 2)

    l_opt, l_ts = pair(optimal_fiber_length, "optimal_fiber_length"), pair(tendon_slack_length, "tendon_slack_length")
    muscles = HillMuscle(
        max_isometric_force=jnp.repeat(force, 2),
        optimal_fiber_length=l_opt,
        tendon_slack_length=l_ts,
        max_contraction_velocity=pair(max_contraction_velocity, "max_contraction_velocity"),
    )
    moment_arms = jnp.zeros((n, 2 * n), force.dtype)
    idx = jnp.arange(n)
    moment_arms = moment_arms.at[idx, 2 * idx].set(arm).at[idx, 2 * idx + 1].set(-arm)
    if activation is None:  # the defaults of ActivationDynamics, in the muscles' dtype
        activation = ActivationDynamics(*(jnp.asarray(x, force.dtype) for x in (0.015, 0.060, 10.0)))
    return MomentArmMuscles(moment_arms, l_ts + l_opt, muscles, activation)


class MLPExcitationDrive(Drive):
    """Muscle excitations from a multilayer perceptron of the state, the activations and a target.

    ``u = sigmoid(MLP([q − q*, q, s·q̇, a])) ∈ (0, 1)^m`` drives the activation dynamics of
    ``muscles`` — any muscle drive whose states are activations and which has an ``activation``
    (`ActivationDynamics`) field: `MomentArmMuscles` or `jaxbio.muscles.MuscleActuatedDrive`
    (their own ``excitation`` function is not used). The generalised forces are the muscles':
    ``τ = muscles(t, q, q̇, f, a)`` ``(n,)`` N·m. State ``a`` ``(m,)``. Fields: ``muscles``,
    ``mlp`` (``3n + m → m``), ``target`` ``(n,)`` rad, ``velocity_scale`` ``()`` s.
    """

    muscles: Drive
    mlp: eqx.nn.MLP
    target: Float[Array, " n"]
    velocity_scale: Float[Array, ""]

    def __init__(
        self, muscles: Drive, n: int, *, key, target=None, width: int = 64, depth: int = 2, velocity_scale=0.2
    ):
        if not isinstance(muscles, Drive) or muscles.state_size == 0 or not hasattr(muscles, "activation"):
            raise ValueError(
                "MLPExcitationDrive: muscles must be a Drive with activation states and an "
                f"'activation' field (MomentArmMuscles, MuscleActuatedDrive), got {type(muscles).__name__}"
            )
        self.muscles = muscles
        n = int(n)
        dtype = jnp.result_type(muscles.initial_actuator_state())
        self.target = (
            jnp.zeros(n, dtype)
            if target is None
            else _check_target(target, n, "MLPExcitationDrive", jnp.zeros((), dtype))
        )
        self.velocity_scale = jnp.asarray(velocity_scale, dtype)
        check_values(self.velocity_scale, "MLPExcitationDrive: velocity_scale", positive=True)
        m = muscles.state_size
        self.mlp = _mlp(3 * n + m, m, width, depth, key, dtype)

    @property
    def n(self) -> int:
        return self.target.shape[0]

    @property
    def state_size(self) -> int:
        return self.muscles.state_size

    def check_size(self, n):
        if self.n != n:
            raise ValueError(f"MLPExcitationDrive: built for {self.n} coordinates, the tree has {n}")
        self.muscles.check_size(n)

    def initial_actuator_state(self, dtype=None):
        return self.muscles.initial_actuator_state(dtype)

    def with_target(self, target) -> MLPExcitationDrive:
        """The same controller aiming at ``target`` ``(n,)`` rad."""
        return eqx.tree_at(
            lambda d: d.target, self, _check_target(target, self.n, "MLPExcitationDrive", self.velocity_scale)
        )

    def excitations(self, q, qd, a, target) -> Float[Array, " m"]:
        """``u`` ``(m,)`` in (0, 1) from ``q``, ``qd`` ``(n,)``, ``a`` ``(m,)`` and ``target`` ``(n,)``."""
        x = jnp.concatenate([_features(q, qd, target, self.velocity_scale), a]).astype(self.velocity_scale.dtype)
        return jax.nn.sigmoid(self.mlp(x))

    def __call__(self, t, q, qd, f, a=None):
        if a is None:
            raise ValueError("MLPExcitationDrive has states (activations): call it as drive(t, q, qd, f, a)")
        return self.muscles(t, q, qd, f, a)

    def state_rate(self, t, q, qd, f, a):
        u = self.excitations(q, qd, a, self.target).astype(a.dtype)
        return self.muscles.activation.rate(u, a)


class FeedbackDrive(Drive):
    """A stateless feedback law ``τ = law(tree, q, q̇, target, gains)`` ``(n,)`` N·m as a `Drive`
    (the classical baselines below). ``gains``: a pytree of arrays (differentiable)."""

    tree: SegmentTree
    target: Float[Array, " n"]
    gains: dict
    law: Callable = eqx.field(static=True)

    def with_target(self, target) -> FeedbackDrive:
        return eqx.tree_at(lambda d: d.target, self, _check_target(target, self.tree.nv, "FeedbackDrive", self.target))

    def __call__(self, t, q, qd, f, a=None):
        return self.law(self.tree, q, qd, self.target, self.gains).astype(qd.dtype)


def _pd_gravity(tree, q, qd, target, gains):
    tau = gains["kp"] * (target - q) - gains["kd"] * qd + gravity_forces(tree, q)
    return jnp.clip(tau, -gains["torque_limit"], gains["torque_limit"])


def _computed_torque(tree, q, qd, target, gains):
    qdd = gains["kp"] * (target - q) - gains["kd"] * qd
    tau = inverse_dynamics(tree, q, qd, qdd) + gains["damping"] * qd  # M(q) q̈_des + C(q, q̇) q̇ + g(q) + c q̇
    return jnp.clip(tau, -gains["torque_limit"], gains["torque_limit"])


def _gains(tree, torque_limit, **named):
    """``named`` gains and ``torque_limit`` as ``(nv,)`` arrays in the tree's dtype."""
    dtype = tree.masses.dtype
    out = {
        name: jnp.broadcast_to(coordinate_vector(value, f"gains: {name}", tree.nv), (tree.nv,)).astype(dtype)
        for name, value in dict(named, torque_limit=torque_limit).items()
    }
    check_values(out["torque_limit"], "torque_limit", finite=False, positive=True)
    return out


def pd_gravity_torque(tree: SegmentTree, kp, kd, torque_limit=jnp.inf, target=None) -> FeedbackDrive:
    """PD with gravity compensation: ``τ = clip(K_p (q* − q) − K_d q̇ + g(q), ±τ_max)`` ``(n,)``
    N·m (``g`` = `jaxbio.gravity_forces`). ``kp`` N·m/rad, ``kd`` N·m·s/rad, ``torque_limit``
    N·m: ``(n,)`` or scalars."""
    gains = _gains(tree, torque_limit, kp=kp, kd=kd)
    target = jnp.zeros(tree.nv, gains["kp"].dtype) if target is None else target
    return FeedbackDrive(tree, jnp.asarray(target, gains["kp"].dtype), gains, _pd_gravity)


def computed_torque(
    tree: SegmentTree, omega=8.0, zeta=1.0, torque_limit=jnp.inf, target=None, damping=0.0
) -> FeedbackDrive:
    """Computed torque (inverse dynamics feedback linearisation):
    ``τ = clip(M(q)(ω² (q* − q) − 2ζω q̇) + C(q, q̇)q̇ + g(q) + c q̇, ±τ_max)`` ``(n,)`` N·m, by
    `jaxbio.inverse_dynamics`; without saturation every joint error obeys
    ``ë + 2ζω ė + ω² e = 0``. ``omega`` rad/s, ``zeta`` (1 = critical damping), ``damping`` ``c``
    N·m·s/rad: the joints' known viscous damping, compensated (scalar or ``(n,)``)."""
    omega = jnp.asarray(omega)
    gains = _gains(tree, torque_limit, kp=omega**2, kd=2.0 * zeta * omega, damping=damping)
    target = jnp.zeros(tree.nv, gains["kp"].dtype) if target is None else target
    return FeedbackDrive(tree, jnp.asarray(target, gains["kp"].dtype), gains, _computed_torque)


class Rollout(eqx.Module):
    """Result of `rollout`: ``ts`` ``(T,)`` s, ``q`` ``(T, n)`` rad, ``qd`` ``(T, n)`` rad/s and
    ``a`` ``(T, s)`` drive states (``(T, 0)`` for a drive without states)."""

    ts: Array
    q: Array
    qd: Array
    a: Array


def _check_trainable(system: HamiltonianSystem) -> None:
    if not isinstance(system, HamiltonianSystem):
        raise ValueError(f"rollout: system must be a jaxbio.HamiltonianSystem, got {type(system).__name__}")
    if not system.tree.is_axial or system.nq != system.nv:
        raise ValueError("rollout: the tree must have 1-DOF joints only (nq == nv)")
    if not isinstance(system.dissipation, Dissipation):
        raise ValueError(
            "rollout: the dissipation must be a Rayleigh jaxbio.hamiltonian.Dissipation R(q, q̇), got "
            f"{type(system.dissipation).__name__}"
        )
    if not isinstance(system.potential, NoPotential):
        raise ValueError(f"rollout: a time potential is not supported, got {type(system.potential).__name__}")


def _velocity_field(system: HamiltonianSystem, t, y):
    """``(q̇, q̈, ȧ)`` of the system in velocity form (`HamiltonianSystem.velocity_field`), the
    fitness held at its initial value (``ḟ = 0``); ``a`` is ``(0,)`` for a drive without states."""
    state = {"q": y["q"], "qd": y["qd"], "f": y["f"], **({"a": y["a"]} if system.stateful else {})}
    out = system.velocity_field(t, state)
    return {"q": out["q"], "qd": out["qd"], "a": out.get("a", y["a"]), "f": jnp.zeros_like(y["f"])}


def rollout(system: HamiltonianSystem, q0, target, horizon: float, steps: int, qd0=None) -> Rollout:
    """Simulate ``system`` (its drive a controller with ``with_target``) from ``q0`` ``(n,)`` rad
    (velocities ``qd0``, default 0; drive states at `Drive.initial_actuator_state`) towards
    ``target`` ``(n,)`` rad for ``horizon`` s: ``steps`` Tsit5 steps of a fixed grid (Diffrax's
    solver, stepped in a `jax.lax.scan`), every grid point saved (``steps + 1`` rows).

    The equations are those of `jaxbio.HamiltonianSystem` written in velocity form,
    ``q̈ = (M(q) + J)⁻¹ (F − ∂R/∂q̇ − C(q, q̇)q̇ − g(q))`` with ``F`` the drive, ``R`` a Rayleigh
    dissipation and ``J`` the drive's added inertia (the fitness is held at its initial value; no
    time potential; 1-DOF joints). The same trajectory as `jaxbio.simulate` (``steps=``) up to
    the discretisation (tested), but reverse mode through it compiles and runs much faster than
    through the Hamiltonian form, which is why training uses it (benchmarks/README.md, "Measurements behind design choices").
    """
    _check_trainable(system)
    steps = int(steps)
    if steps < 1:
        raise ValueError(f"rollout: steps must be ≥ 1, got {steps}")
    system = eqx.tree_at(lambda s: s.drive, system, system.drive.with_target(target))
    y = system.initial_state(q0, qd0, form="velocity")
    dtype = y["q"].dtype
    y = {**y, "a": y.get("a", jnp.zeros(0, dtype))}
    horizon = jnp.asarray(horizon, dtype)
    dt = horizon / steps
    flat0, unravel = ravel_pytree(y)
    ts = dt * jnp.arange(steps + 1, dtype=dtype)
    ys = jax.vmap(unravel)(
        step_grid(lambda t, x, args: ravel_pytree(_velocity_field(system, t, unravel(x)))[0], ts, flat0)
    )
    return Rollout(ts, ys["q"], ys["qd"], ys["a"])


def reaching_loss(
    system: HamiltonianSystem, q0s, targets, horizon: float, steps: int, velocity_weight: float = 0.01
) -> Float[Array, ""]:
    """Mean over the batch and the grid of ``|q(t) − q*|² + w |q̇(t)|²`` (rad², ``w`` s²) for the
    rollouts from ``q0s`` ``(B, n)`` to ``targets`` ``(B, n)`` (`rollout`, vmapped): the training
    loss of the example and the tests. Differentiable in every array of ``system``."""

    def one(q0, target):
        traj = rollout(system, q0, target, horizon, steps)
        return jnp.mean(jnp.sum((traj.q - target) ** 2, -1) + velocity_weight * jnp.sum(traj.qd**2, -1))

    return jnp.mean(jax.vmap(one)(q0s, targets))
