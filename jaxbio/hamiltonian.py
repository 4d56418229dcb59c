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

from jaxbio.dynamics import gravity_forces, kinetic_energy_gradient, mass_matrix, potential_energy
from jaxbio.tree import SegmentTree

__all__ = [
    "Drive",
    "StatefulDrive",
    "FirstOrderActuator",
    "ZeroDrive",
    "ConstantDrive",
    "TimeFunctionDrive",
    "SpringDamperDrive",
    "Dissipation",
    "NoDissipation",
    "LinearDamping",
    "FitnessLaw",
    "ConstantFitness",
    "PowerDepletion",
    "BracketFitness",
    "HamiltonianSystem",
    "hamiltonian",
    "velocities",
    "dH_dq",
]


# ---- protocols -------------------------------------------------------------------------------

class Drive(eqx.Module):
    """Generalised forces ``F(t, q, p, f)`` ``(n,)`` N·m / N acting on the coordinates.

    Subclasses implement ``__call__(t, q, qd, f) -> (n,)``; ``qd = ∂H/∂p`` is passed so drives
    need not solve with M themselves. Drives may depend on the fitness ``f`` (fatigue).
    """

    @abc.abstractmethod
    def __call__(self, t, q, qd, f) -> Array: ...


class StatefulDrive(Drive):
    """A drive with internal ODE states ``a`` ``(state_size,)`` that the system carries (muscle
    activations, motor currents, …): ``F = force(t, q, qd, f, a)`` and ``ȧ = state_rate(…)``.

    The state pytree of a `HamiltonianSystem` with a stateful drive gains the key ``"a"``.
    """

    @property
    @abc.abstractmethod
    def state_size(self) -> int: ...

    @abc.abstractmethod
    def force(self, t, q, qd, f, a) -> Array: ...

    @abc.abstractmethod
    def state_rate(self, t, q, qd, f, a) -> Array: ...

    def initial_actuator_state(self, dtype=None) -> Array:
        """Default ``a(0)``: zeros."""
        return jnp.zeros(self.state_size, dtype)

    def __call__(self, t, q, qd, f):
        raise TypeError("a StatefulDrive needs its state: call force(t, q, qd, f, a)")


class FirstOrderActuator(StatefulDrive):
    """Torque generators with first-order dynamics: ``F = gain · f · a``, ``τ_c ȧ = u(t) − a``.

    ``u(t)`` (dimensionless command, e.g. neural excitation) is any traceable function of time
    returning ``(n,)``; ``gain`` ``(n,)`` N·m or N; ``time_constant`` ``(n,)`` s > 0. With a step
    command the force rises as the seed-000 impulse ``F⁰(1 − e^{−t/τ})`` (Wilkie's active state).
    The force is scaled by the (first) fitness component ``f[0]``.
    """

    gain: Float[Array, " n"]
    time_constant: Float[Array, " n"]
    command: Callable

    def __init__(self, gain, time_constant, command):
        self.gain = jnp.asarray(gain)
        self.time_constant = jnp.asarray(time_constant)
        self.command = command
        tc = self.time_constant
        if not isinstance(tc, jax.core.Tracer) and bool(jnp.any(~(tc > 0))):
            raise ValueError(f"FirstOrderActuator: time_constant must be > 0, got {tc}")

    @property
    def state_size(self) -> int:
        return int(jnp.size(self.gain))

    def force(self, t, q, qd, f, a):
        return self.gain * f[0] * a

    def state_rate(self, t, q, qd, f, a):
        return (jnp.asarray(self.command(t), a.dtype) - a) / self.time_constant


class ZeroDrive(Drive):
    """``F = 0`` (the free, conservative system)."""

    def __call__(self, t, q, qd, f):
        return jnp.zeros_like(q)


class ConstantDrive(Drive):
    """``F = tau`` ``(n,)``, constant."""

    tau: Float[Array, " n"]

    def __init__(self, tau):
        self.tau = jnp.asarray(tau)

    def __call__(self, t, q, qd, f):
        return jnp.broadcast_to(self.tau, q.shape).astype(q.dtype)


class TimeFunctionDrive(Drive):
    """``F = fn(t)``: any JAX-traceable function of time returning ``(n,)`` (e.g. an
    `equinox.Module` with array fields, so its parameters are differentiable)."""

    fn: Callable

    def __call__(self, t, q, qd, f):
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
            x = getattr(self, name)
            if not isinstance(x, jax.core.Tracer) and bool(jnp.any(x < 0)):
                raise ValueError(f"SpringDamperDrive: {name} must be ≥ 0, got {x}")

    def __call__(self, t, q, qd, f):
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
        c = self.coefficients
        if not isinstance(c, jax.core.Tracer) and bool(jnp.any(~jnp.isfinite(c) | (c < 0))):
            raise ValueError(f"LinearDamping: coefficients must be finite and ≥ 0, got {c}")

    def __call__(self, q, qd):
        return 0.5 * jnp.sum(self.coefficients * qd**2)

    def force(self, q, qd):
        return self.coefficients * qd


class FitnessLaw(eqx.Module):
    """Evolution of the fitness state ``f`` ``(k,)``: ``ḟ = rate(t, q, p, qd, f, F)``.

    ``k = size`` (static; 1 unless a subclass says otherwise). The default initial fitness is 1
    (fresh).
    """

    @property
    def size(self) -> int:
        return 1

    @abc.abstractmethod
    def rate(self, t, q, p, qd, f, drive_force) -> Array: ...


class ConstantFitness(FitnessLaw):
    """``ḟ = 0``."""

    def rate(self, t, q, p, qd, f, drive_force):
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
            x = getattr(self, name)
            if not isinstance(x, jax.core.Tracer) and bool(jnp.any(x < 0)):
                raise ValueError(f"PowerDepletion: {name} must be ≥ 0, got {x}")

    def rate(self, t, q, p, qd, f, drive_force):
        power = jnp.maximum(jnp.dot(qd, drive_force), 0.0)
        return -self.depletion * power * f + self.recovery * (1.0 - f)


class BracketFitness(FitnessLaw):
    """Fitness as a function ``φ(t, q, p)`` evolving by seed 000's total derivative

        d_H φ = ∂_t φ + ∂_q φ · ∂H/∂p − ∂_p φ · ∂H/∂q            (+ the drive's work on p)

    plus an optional ``source(t, q, p, f)``. The state ``f`` then tracks ``φ`` along the flow
    (a consistency check: ``f(t) = φ(t, q(t), p(t))`` when the source is zero and ``f(0) = φ``).
    """

    phi: Callable
    source: Callable | None = None

    def rate(self, t, q, p, qd, f, drive_force, dHdq=None, pdot=None):
        dphi_dt, dphi_dq, dphi_dp = jax.grad(self.phi, argnums=(0, 1, 2))(t, q, p)
        rate = dphi_dt + dphi_dq @ qd + dphi_dp @ pdot
        out = jnp.broadcast_to(rate, f.shape)
        if self.source is not None:
            out = out + self.source(t, q, p, f)
        return out


# ---- the Hamiltonian and its gradients --------------------------------------------------------

def velocities(tree: SegmentTree, q, p) -> Float[Array, " n"]:
    """``q̇ = ∂H/∂p = M(q)⁻¹ p`` (Cholesky solve)."""
    return jsl.cho_solve(jsl.cho_factor(mass_matrix(tree, q)), p)


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
    ``"a": (s,)`` when the drive is a `StatefulDrive`; build one with `initial_state`. ``vector_field(t, y, args)`` has Diffrax's signature.
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
        """Whether the drive carries actuator states (the state's key ``"a"``)."""
        return isinstance(self.drive, StatefulDrive)

    def initial_state(self, q, qd=None, f=None, a=None) -> dict:
        """State from coordinates ``q`` and *velocities* ``qd`` (momenta ``p = M(q) qd``);
        ``f`` fitness (default 1) and, for a `StatefulDrive`, actuator states ``a``."""
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
        """Generalised drive forces ``F`` ``(n,)`` at state ``y`` (``qd = ∂H/∂p``)."""
        if self.stateful:
            return self.drive.force(t, y["q"], qd, y["f"], y["a"])
        return self.drive(t, y["q"], qd, y["f"])

    def energy(self, y) -> Float[Array, ""]:
        """``H`` J at state ``y``."""
        return hamiltonian(self.tree, y["q"], y["p"])

    def vector_field(self, t, y, args=None) -> dict:
        """Seed 000 eqs. 10–12: ``(q̇, ṗ, ḟ)``."""
        q, p, f = y["q"], y["p"], y["f"]
        qd = velocities(self.tree, q, p)
        force = self.drive_force(t, y, qd)
        pdot = force - dH_dq(self.tree, q, qd) - self.dissipation.force(q, qd)
        if isinstance(self.fitness, BracketFitness):
            fdot = self.fitness.rate(t, q, p, qd, f, force, pdot=pdot)
        else:
            fdot = self.fitness.rate(t, q, p, qd, f, force)
        out = {"q": qd, "p": pdot, "f": fdot}
        if self.stateful:
            out["a"] = self.drive.state_rate(t, q, qd, f, y["a"])
        return out

    def power_balance(self, t, y) -> Float[Array, ""]:
        """``dH/dt = q̇ᵀ (F − ∂R/∂q̇)`` W, the rate at which drives and dissipation change H."""
        q, p = y["q"], y["p"]
        qd = velocities(self.tree, q, p)
        return jnp.dot(qd, self.drive_force(t, y, qd) - self.dissipation.force(q, qd))


def _check_vector(x, n, name):
    if jnp.shape(x) != (n,):
        raise ValueError(f"{name} has shape {jnp.shape(x)}, expected ({n},)")
