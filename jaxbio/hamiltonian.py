"""Dissipative, time- and fitness-dependent Hamiltonian dynamics (seed 000, Ivancevic).

On the cotangent bundle of a `SegmentTree` the Hamiltonian is

    H(q, p) = ½ pᵀ M(q)⁻¹ p + V(q)                                     (seed 000 eq. 9)

and the driven, dissipative Hamilton equations (seed 000 eqs. 10–12, time-dependent form
eqs. 26–27) are

    q̇ = ∂H/∂p = M⁻¹ p
    ṗ = F(t, q, p, f) − ∂H/∂q − ∂R/∂q̇                                  (R: Rayleigh dissipation)
    ḟ = d_H f = (∂_t + ∂ᵖH ∂_q − ∂_qH ∂ᵖ) f + s(t, q, p, f)            (fitness, with a source s)

A `HamiltonianSystem` composes four Equinox modules — the tree, a `Drive` (generalised forces F),
a `Dissipation` (Rayleigh function R(q, q̇)) and a `FitnessLaw` — each with a small protocol, so
muscle and actuator models plug in as drives. The state is the pytree
``{"q": (n,), "p": (n,), "f": (k,)}``.

∂H/∂q is computed without forming M⁻¹: with q̇ = M⁻¹p (one Cholesky solve),
``∂H/∂q|_p = −∂T(q, q̇)/∂q|_q̇ + ∂V/∂q`` (Legendre transform), i.e. one reverse-mode pass through
the forward kinematics plus the gravity vector of the wrench recursion. `jax.grad(H)` instead
differentiates through the Cholesky factorisation (see benchmarks/hamiltonian.py).
"""

from __future__ import annotations

import abc
from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import check_values
from jaxbio.dynamics import gravity_forces, kinetic_energy_gradient, mass_matrix, potential_energy
from jaxbio.tree import SegmentTree

__all__ = [
    "Drive",
        "FirstOrderActuator",
    "ZeroDrive",
    "ConstantDrive",
    "TimeFunctionDrive",
    "SpringDamperDrive",
    "Dissipation",
    "NoDissipation",
    "LinearDamping",
    "QuadraticDrag",
    "SumDissipation",
    "FitnessLaw",
    "ConstantFitness",
    "PowerDepletion",
    "ReserveFitness",
    "BracketFitness",
    "HamiltonianSystem",
    "hamiltonian",
    "velocities",
    "dH_dq",
]


# ---- protocols -------------------------------------------------------------------------------

class Drive(eqx.Module):
    """Generalised forces ``F(t, q, p, f)`` ``(n,)`` N·m / N acting on the coordinates.

    One protocol for every drive: ``__call__(t, q, qd, f, a=None) -> (n,)``, where ``qd = ∂H/∂p``
    (so drives need not solve with M themselves), ``f`` is the *fitness* the drive sees (the
    fitness law's `FitnessLaw.value` of its state; 1 = fresh) and ``a`` the drive's own ODE states
    ``(state_size,)`` (muscle activations, motor currents, …). A drive without states has
    ``state_size == 0`` (the default) and ignores ``a``; one with states overrides `state_size`,
    `state_rate` (``ȧ``) and, if zeros are not right, `initial_actuator_state`. The state pytree
    of a `HamiltonianSystem` gains the key ``"a"`` when ``state_size > 0``.
    """

    @property
    def state_size(self) -> int:
        """Number of internal ODE states (static); 0 for a drive without states."""
        return 0

    @abc.abstractmethod
    def __call__(self, t, q, qd, f, a=None) -> Array: ...

    def state_rate(self, t, q, qd, f, a) -> Array:
        """``ȧ`` ``(state_size,)``; a drive without states has none."""
        return jnp.zeros_like(a)

    def initial_actuator_state(self, dtype=None) -> Array:
        """Default ``a(0)`` ``(state_size,)``: zeros."""
        return jnp.zeros(self.state_size, dtype)


class FirstOrderActuator(Drive):
    """Torque generators with first-order dynamics: ``F = gain · f · a``, ``τ_c ȧ = u(t) − a``.

    ``u(t)`` (dimensionless command, e.g. neural excitation) is any traceable function of time
    returning ``(n,)``; ``gain`` ``(n,)`` N·m or N; ``time_constant`` ``(n,)`` s > 0. With a step
    command the force rises as the seed-000 impulse ``F⁰(1 − e^{−t/τ})`` (Wilkie's active state).
    The force is scaled by the (first) fitness component ``f[0]``. States ``a`` ``(n,)``.
    """

    gain: Float[Array, " n"]
    time_constant: Float[Array, " n"]
    command: Callable

    def __init__(self, gain, time_constant, command):
        self.gain = jnp.asarray(gain)
        self.time_constant = jnp.asarray(time_constant)
        self.command = command
        check_values(self.time_constant, "FirstOrderActuator: time_constant", positive=True)

    @property
    def state_size(self) -> int:
        return int(jnp.size(self.gain))

    def __call__(self, t, q, qd, f, a=None):
        if a is None:
            raise ValueError("FirstOrderActuator has states: call it as drive(t, q, qd, f, a)")
        return self.gain * f[0] * a

    def state_rate(self, t, q, qd, f, a):
        return (jnp.asarray(self.command(t), a.dtype) - a) / self.time_constant


class ZeroDrive(Drive):
    """``F = 0`` (the free, conservative system)."""

    def __call__(self, t, q, qd, f, a=None):
        return jnp.zeros_like(q)


class ConstantDrive(Drive):
    """``F = tau`` ``(n,)``, constant."""

    tau: Float[Array, " n"]

    def __init__(self, tau):
        self.tau = jnp.asarray(tau)

    def __call__(self, t, q, qd, f, a=None):
        return jnp.broadcast_to(self.tau, q.shape).astype(q.dtype)


class TimeFunctionDrive(Drive):
    """``F = fn(t)``: any JAX-traceable function of time returning ``(n,)`` (e.g. an
    `equinox.Module` with array fields, so its parameters are differentiable)."""

    fn: Callable

    def __call__(self, t, q, qd, f, a=None):
        return jnp.asarray(self.fn(t), q.dtype) * jnp.ones_like(q)


class SpringDamperDrive(Drive):
    """Joint springs and dampers ``F = −k (q − q_rest) − c q̇`` (``k``, ``c`` ≥ 0, ``(n,)``).

    A PD controller towards ``q_rest`` when read as a controller; a linear spring otherwise.
    """

    stiffness: Float[Array, " n"]
    damping: Float[Array, " n"]
    rest: Float[Array, " n"]

    def __init__(self, stiffness, damping=0.0, rest=0.0):
        self.stiffness, self.damping, self.rest = (jnp.asarray(x) for x in (stiffness, damping, rest))
        for name in ("stiffness", "damping"):
            check_values(getattr(self, name), f"SpringDamperDrive: {name}", nonnegative=True)

    def __call__(self, t, q, qd, f, a=None):
        return -self.stiffness * (q - self.rest) - self.damping * qd


class Dissipation(eqx.Module):
    """Rayleigh dissipation function ``R(q, q̇) ≥ 0`` (J/s); the force is ``−∂R/∂q̇``."""

    @abc.abstractmethod
    def __call__(self, q, qd) -> Array: ...

    def force(self, q, qd):
        """``∂R/∂q̇`` ``(n,)``, by automatic differentiation unless a subclass knows it."""
        return jax.grad(lambda v: self(q, v))(qd)


class NoDissipation(Dissipation):
    """``R = 0``."""

    def __call__(self, q, qd):
        return jnp.zeros((), qd.dtype)

    def force(self, q, qd):
        return jnp.zeros_like(qd)


class LinearDamping(Dissipation):
    """``R = ½ Σ c_i q̇_i²`` with ``c`` ``(n,)`` (or a scalar) N·m·s/rad / N·s/m, ``c ≥ 0``."""

    coefficients: Float[Array, "..."]

    def __init__(self, coefficients):
        self.coefficients = jnp.asarray(coefficients)
        check_values(self.coefficients, "LinearDamping: coefficients", nonnegative=True)

    def __call__(self, q, qd):
        return 0.5 * jnp.sum(self.coefficients * qd**2)

    def force(self, q, qd):
        return self.coefficients * qd


class QuadraticDrag(Dissipation):
    """Aerodynamic (quadratic) drag in a moving medium: ``∂R/∂q̇ = c (q̇ − w)|q̇ − w|``.

    ``R = Σ c_i |q̇_i − w_i|³ / 3`` with ``coefficients`` ``c`` ``(n,)`` or a scalar, kg/m for a
    translation (``½ ρ C_d A``) or kg·m² for a rotation, ``c ≥ 0``, and ``wind`` ``w`` ``(n,)`` or a
    scalar: the medium's velocity along each coordinate (m/s; a tail wind is positive). With
    ``w ≠ 0`` the medium can also push (``q̇ < w``), so ``R`` is then not a loss alone.
    """

    coefficients: Float[Array, "..."]
    wind: Float[Array, "..."]

    def __init__(self, coefficients, wind=0.0):
        self.coefficients = jnp.asarray(coefficients)
        self.wind = jnp.asarray(wind)
        check_values(self.coefficients, "QuadraticDrag: coefficients", nonnegative=True)
        check_values(self.wind, "QuadraticDrag: wind")

    def __call__(self, q, qd):
        return jnp.sum(self.coefficients * jnp.abs(qd - self.wind) ** 3) / 3.0

    def force(self, q, qd):
        rel = qd - self.wind
        return self.coefficients * rel * jnp.abs(rel)


class SumDissipation(Dissipation):
    """Several dissipations at once: ``R = Σ_k R_k``, ``∂R/∂q̇ = Σ_k ∂R_k/∂q̇``.

    ``terms``: a tuple of `Dissipation` modules (e.g. `LinearDamping` and `QuadraticDrag`).
    """

    terms: tuple

    def __init__(self, *terms):
        if not terms or not all(isinstance(d, Dissipation) for d in terms):
            raise ValueError("SumDissipation: give one or more Dissipation modules")
        self.terms = tuple(terms)

    def __call__(self, q, qd):
        return sum(d(q, qd) for d in self.terms)

    def force(self, q, qd):
        return sum(d.force(q, qd) for d in self.terms)


class FitnessLaw(eqx.Module):
    """Evolution of the fitness state ``f`` ``(k,)`` and the fitness the drives see.

    - ``rate(t, q, p, qd, f, drive_force, pdot) -> (k,)``: ``ḟ`` from the time ``t`` s, the
      coordinates ``q``, momenta ``p``, velocities ``qd = ∂H/∂p``, the fitness state ``f``, the
      drive's generalised forces ``drive_force`` ``(n,)`` and the momentum rate ``pdot`` ``(n,)``
      (seed 000 eq. 27's bracket needs it; most laws ignore it).
    - ``value(f) -> (k,)``: the fitness passed to drives (1 = fresh); the state itself by default,
      a map ``f(e)`` for laws whose state is a reserve (`ReserveFitness`).
    - ``size`` (static): ``k``, 1 unless a subclass says otherwise. The initial state is 1 (fresh).
    """

    @property
    def size(self) -> int:
        return 1

    def value(self, f) -> Array:
        return f

    @abc.abstractmethod
    def rate(self, t, q, p, qd, f, drive_force, pdot) -> Array: ...


class ConstantFitness(FitnessLaw):
    """``ḟ = 0``."""

    def rate(self, t, q, p, qd, f, drive_force, pdot):
        return jnp.zeros_like(f)


class PowerDepletion(FitnessLaw):
    """Fatigue by mechanical work: ``ḟ = −k · max(q̇ᵀF, 0) · f + r (1 − f)``.

    ``k`` 1/J (depletion per joule of positive work), ``r`` 1/s (recovery rate). This is the
    source term of seed 000's ``d_H f``; the bracket term vanishes because ``f`` is carried as
    its own state rather than as a function of ``(q, p)`` (see `BracketFitness` for that form).
    """

    depletion: Float[Array, ""]
    recovery: Float[Array, ""]

    def __init__(self, depletion, recovery=0.0):
        self.depletion = jnp.asarray(depletion)
        self.recovery = jnp.asarray(recovery)
        for name in ("depletion", "recovery"):
            check_values(getattr(self, name), f"PowerDepletion: {name}", nonnegative=True)

    def rate(self, t, q, p, qd, f, drive_force, pdot):
        power = jnp.maximum(jnp.dot(qd, drive_force), 0.0)
        return -self.depletion * power * f + self.recovery * (1.0 - f)


class ReserveFitness(FitnessLaw):
    """An energy reserve ``e`` (1 = full) spent by the drive, recovering at rest (seed 000's
    fitness as a phosphagen store), with the fitness ``f(e)`` the drives see.

        ė = −(P_act + q̇ᵀF) / E · e/(e + ε) + r (1 − e)
        f(e) = e (1 + K) / (e + K)                               (Michaelis–Menten, f(1) = 1)

    ``capacity`` ``E`` J (> 0): the reserve in units of work; ``activation_power`` ``P_act`` W
    (≥ 0): the cost of keeping the drive's muscles activated; ``half_saturation`` ``K`` (> 0):
    fitness stays near 1 until the reserve runs low, then falls; ``recovery`` ``r`` 1/s (≥ 0);
    ``throttle`` ``ε`` (static, default 0.01): ``e/(e + ε)`` stops the use only when the
    reserve is empty, so ``e > 0``. The work term is the drive's mechanical power ``q̇ᵀF``
    (seed 000's sprinter: the drive pushes forward, so it is positive; a braking drive would
    refill the reserve — use `PowerDepletion`'s positive-work form for such motions).
    """

    capacity: Float[Array, ""]
    activation_power: Float[Array, ""]
    half_saturation: Float[Array, ""]
    recovery: Float[Array, ""]
    throttle: float = eqx.field(static=True, default=0.01)

    def __init__(self, capacity, activation_power=0.0, half_saturation=0.1, recovery=0.0, throttle=0.01):
        self.capacity = jnp.asarray(capacity)
        self.activation_power = jnp.asarray(activation_power)
        self.half_saturation = jnp.asarray(half_saturation)
        self.recovery = jnp.asarray(recovery)
        self.throttle = float(throttle)
        for name, positive in (("capacity", True), ("activation_power", False),
                               ("half_saturation", True), ("recovery", False)):
            check_values(getattr(self, name), f"ReserveFitness: {name}", positive=positive, nonnegative=not positive)
        if not self.throttle > 0:
            raise ValueError(f"ReserveFitness: throttle must be > 0, got {throttle}")

    def value(self, f):
        k = self.half_saturation
        return f * (1.0 + k) / (f + k)

    def rate(self, t, q, p, qd, f, drive_force, pdot):
        use = (self.activation_power + jnp.dot(qd, drive_force)) * f / (f + self.throttle)
        return -use / self.capacity + self.recovery * (1.0 - f)


class BracketFitness(FitnessLaw):
    """Fitness as a function ``φ(t, q, p)`` evolving by seed 000's total derivative

        d_H φ = ∂_t φ + ∂_q φ · ∂H/∂p − ∂_p φ · ∂H/∂q            (+ the drive's work on p)

    plus an optional ``source(t, q, p, f)``. The state ``f`` then tracks ``φ`` along the flow
    (a consistency check: ``f(t) = φ(t, q(t), p(t))`` when the source is zero and ``f(0) = φ``).
    """

    phi: Callable
    source: Callable | None = None

    def rate(self, t, q, p, qd, f, drive_force, pdot):
        dphi_dt, dphi_dq, dphi_dp = jax.grad(self.phi, argnums=(0, 1, 2))(t, q, p)
        rate = dphi_dt + dphi_dq @ qd + dphi_dp @ pdot
        out = jnp.broadcast_to(rate, f.shape)
        if self.source is not None:
            out = out + self.source(t, q, p, f)
        return out


# ---- the Hamiltonian and its gradients --------------------------------------------------------

def velocities(tree: SegmentTree, q, p) -> Float[Array, " n"]:
    """``q̇ = ∂H/∂p = M(q)⁻¹ p`` (Cholesky solve; a division for one coordinate)."""
    M = mass_matrix(tree, q)
    if tree.nq == 1:
        return p / M[0]
    return jsl.cho_solve(jsl.cho_factor(M), p)


def hamiltonian(tree: SegmentTree, q: Float[ArrayLike, " n"], p: Float[ArrayLike, " n"]) -> Float[Array, ""]:
    """``H(q, p) = ½ pᵀ M(q)⁻¹ p + V(q)`` J (seed 000 eq. 9); ``p`` ``(n,)`` the conjugate
    momenta (kg·m²/s or kg·m/s)."""
    q = jnp.asarray(q)
    p = jnp.asarray(p)
    return 0.5 * jnp.dot(p, velocities(tree, q, p)) + potential_energy(tree, q)


def dH_dq(tree: SegmentTree, q, qd) -> Float[Array, " n"]:
    """``∂H/∂q`` at fixed ``p`` from ``q̇ = M⁻¹p``: ``−∂T(q, q̇)/∂q + g(q)`` (no M⁻¹ formed,
    no differentiation through the factorisation). Under `jax.vmap` both terms run the
    batch-last kernels (`jaxbio.dynamics.kinetic_energy_gradient`, `gravity_forces`)."""
    return -kinetic_energy_gradient(tree, q, qd) + gravity_forces(tree, q)


class HamiltonianSystem(eqx.Module):
    """Driven, dissipative, fitness-dependent Hamiltonian system of a segment tree.

    Fields: ``tree`` (`SegmentTree`), ``drive`` (`Drive`), ``dissipation`` (`Dissipation`),
    ``fitness`` (`FitnessLaw`). The state is ``{"q": (n,), "p": (n,), "f": (k,)}``, plus
    ``"a": (s,)`` when the drive has ``s = drive.state_size > 0`` states; build one with
    `initial_state`. ``vector_field(t, y, args)`` has Diffrax's signature.
    """

    tree: SegmentTree
    drive: Drive = ZeroDrive()
    dissipation: Dissipation = NoDissipation()
    fitness: FitnessLaw = ConstantFitness()

    @property
    def nq(self) -> int:
        return self.tree.nq

    @property
    def stateful(self) -> bool:
        """Whether the drive carries states (the state's key ``"a"``); static."""
        return self.drive.state_size > 0

    def initial_state(self, q, qd=None, f=None, a=None) -> dict:
        """State from coordinates ``q`` and *velocities* ``qd`` (momenta ``p = M(q) qd``);
        ``f`` fitness state (default 1) and, for a drive with states, its states ``a``."""
        q = jnp.asarray(q)
        qd = jnp.zeros_like(q) if qd is None else jnp.asarray(qd, q.dtype)
        _check_vector(q, self.nq, "q")
        _check_vector(qd, self.nq, "qd")
        p = mass_matrix(self.tree, q) @ qd
        f = jnp.ones(self.fitness.size, q.dtype) if f is None else jnp.broadcast_to(jnp.asarray(f, q.dtype), (self.fitness.size,))
        y = {"q": q, "p": p, "f": f}
        if self.stateful:
            y["a"] = self.drive.initial_actuator_state(q.dtype) if a is None else jnp.asarray(a, q.dtype)
            _check_vector(y["a"], self.drive.state_size, "a")
        return y

    def drive_force(self, t, y, qd):
        """Generalised drive forces ``F`` ``(n,)`` at state ``y`` (``qd = ∂H/∂p``); the drive sees
        the fitness ``self.fitness.value(y["f"])``."""
        return self.drive(t, y["q"], qd, self.fitness.value(y["f"]), y.get("a"))

    def energy(self, y) -> Float[Array, ""]:
        """``H`` J at state ``y``."""
        return hamiltonian(self.tree, y["q"], y["p"])

    def vector_field(self, t, y, args=None) -> dict:
        """Seed 000 eqs. 10–12: ``(q̇, ṗ, ḟ)`` (and ``ȧ`` for a drive with states)."""
        q, p, f = y["q"], y["p"], y["f"]
        qd = velocities(self.tree, q, p)
        force = self.drive_force(t, y, qd)
        pdot = force - dH_dq(self.tree, q, qd) - self.dissipation.force(q, qd)
        out = {"q": qd, "p": pdot, "f": self.fitness.rate(t, q, p, qd, f, force, pdot)}
        if self.stateful:
            out["a"] = self.drive.state_rate(t, q, qd, self.fitness.value(f), y["a"])
        return out

    def power_balance(self, t, y) -> Float[Array, ""]:
        """``dH/dt = q̇ᵀ (F − ∂R/∂q̇)`` W, the rate at which drives and dissipation change H."""
        q, p = y["q"], y["p"]
        qd = velocities(self.tree, q, p)
        return jnp.dot(qd, self.drive_force(t, y, qd) - self.dissipation.force(q, qd))


def _check_vector(x, n, name):
    if jnp.shape(x) != (n,):
        raise ValueError(f"{name} has shape {jnp.shape(x)}, expected ({n},)")
