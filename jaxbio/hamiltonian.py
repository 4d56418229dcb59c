"""Dissipative, time- and fitness-dependent Hamiltonian dynamics (Ivancevic 2009).

On the cotangent bundle of a `SegmentTree` the Hamiltonian is

    H(q, p) = ½ pᵀ M(q)⁻¹ p + V(q)                                     (Ivancevic 2009, eq. 9)

extended by an optional explicitly time-dependent potential U(t, q) to Ivancevic's (2009)
ℋ(t, q, p) = H(q, p) + U(t, q) (eqs. 23–26). The driven, dissipative Hamilton equations
(Ivancevic 2009, eqs. 10–12, time-dependent form eqs. 26–27) come in two dissipation forms:

    Rayleigh form, R(q, q̇) (`Dissipation`):           q̇ = ∂ℋ/∂p,          ṗ = F − ∂ℋ/∂q − ∂R/∂q̇
    phase-space form, R(q, p) (`PhaseSpaceDissipation`, eqs. 10–11 as printed):
                                                        q̇ = ∂ℋ/∂p + ∂R/∂p,  ṗ = F − ∂ℋ/∂q + ∂R/∂q
    fitness (`FitnessLaw`), e.g. `BracketFitness`:      ḟ = d_H f = (∂_t + ∂ᵖℋ ∂_q − ∂_qℋ ∂ᵖ) f (eq. 27)

A `HamiltonianSystem` composes five Equinox modules — the tree, a `Drive` (generalised forces F),
a dissipation, a `FitnessLaw` and a `TimePotential` (U, zero by default) — each with a small
protocol, so muscle and actuator models plug in as drives. The state is the pytree
``{"q": (n,), "p": (n,), "f": (k,)}``.

∂H/∂q is computed without forming M⁻¹: with q̇ = M⁻¹p (one Cholesky solve),
``∂H/∂q|_p = −∂T(q, q̇)/∂q|_q̇ + ∂V/∂q`` (Legendre transform), i.e. one reverse-mode pass through
the forward kinematics plus the gravity vector of the wrench recursion. `jax.grad(H)` instead
differentiates through the Cholesky factorisation (see benchmarks/hamiltonian.py).
"""

from __future__ import annotations

import abc
import functools
from typing import ClassVar, NamedTuple
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import (
    as_float,
    check_choice,
    check_finite,
    check_model_precision,
    check_values,
    coordinate_vector,
)
from jaxbio.configuration import velocity_to_qdot, velocity_to_qdot_transpose
from jaxbio.dynamics import (
    gravity_forces,
    kinetic_energy_gradient,
    one_segment as _one_segment,
    planar_batch as _planar_batch,
    potential_energy,
)
from jaxbio.dynamics.forward import accelerations, accelerations_at, accelerations_factored, factor_size, inertia, solve
from jaxbio.dynamics.batch_last import hamiltonian_flow_batch, vmapped_by
from jaxbio.tree import SegmentTree
from jaxbio.model import tree_of

__all__ = [
    "Drive",
    "FirstOrderActuator",
    "ZeroDrive",
    "ConstantDrive",
    "TimeFunctionDrive",
    "SpringDamperDrive",
    "SumDrive",
    "Dissipation",
    "NoDissipation",
    "LinearDamping",
    "QuadraticDrag",
    "SumDissipation",
    "PhaseSpaceDissipation",
    "TimePotential",
    "NoPotential",
    "TimeFunctionPotential",
    "MovingSpringPotential",
    "PhaseFlow",
    "FitnessLaw",
    "ConstantFitness",
    "PowerDepletion",
    "ReserveFitness",
    "BracketFitness",
    "HamiltonianSystem",
    "hamiltonian",
    "velocities",
    "dH_dq",
    "solver_field",
]


# ---- protocols -------------------------------------------------------------------------------


class _Component(eqx.Module):
    """What drives, dissipations and fitness laws share: `check_size`.

    ``per_coordinate`` (class attribute): names of the array fields that hold one entry per
    coordinate (or one scalar for all); ``scalars``: names of the fields that must be scalars.
    """

    per_coordinate: ClassVar[tuple[str, ...]] = ()
    scalars: ClassVar[tuple[str, ...]] = ()

    def check_size(self, n: int) -> None:
        """``ValueError`` naming the component, the field and the expected length unless every
        per-coordinate field is ``(n,)`` or a scalar and every scalar field a scalar;
        `HamiltonianSystem` calls it with its tree's ``n``. Subclasses with other shapes
        extend it."""
        owner = type(self).__name__
        for name in self.per_coordinate:
            coordinate_vector(getattr(self, name), f"{owner}: {name}", n)
        for name in self.scalars:
            shape = jnp.shape(getattr(self, name))
            if shape != ():
                raise ValueError(f"{owner}: {name} must be a scalar, got shape {shape}")


class Drive(_Component):
    """Generalised forces ``F(t, q, p, f)`` ``(n,)`` N·m / N acting on the coordinates.

    One protocol for every drive: ``__call__(t, q, qd, f, a=None) -> (n,)``, where ``qd`` is the
    generalised velocity ``∂ℋ/∂p`` (plus ``∂R/∂p`` with a `PhaseSpaceDissipation`; so drives need
    not solve with M themselves), ``f`` is the *fitness* the drive sees (the
    fitness law's `FitnessLaw.value` of its state; 1 = fresh) and ``a`` the drive's own ODE states
    ``(state_size,)`` (muscle activations, motor currents, …). A drive without states has
    ``state_size == 0`` (the default) and ignores ``a``; one with states overrides `state_size`,
    `state_rate` (``ȧ``) and, if zeros are not right, `initial_actuator_state`. The state pytree
    of a `HamiltonianSystem` gains the key ``"a"`` when ``state_size > 0``.

    A drive with inertia of its own (a motor's rotor, Ivancevic's (2009) ``−J ÿ`` term) returns it from
    `added_inertia`; `HamiltonianSystem` then uses ``M(q) + diag(added_inertia)`` wherever it
    uses the mass matrix, so the term is exact (implicit in ``q̈``) rather than a force.
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

    def added_inertia(self, n: int, dtype=None) -> Array | None:
        """Diagonal inertia ``(n,)`` kg·m² / kg the drive adds to ``M(q)`` on the ``n`` velocity
        coordinates (constant in ``q``, so ``∂H/∂q`` is unchanged); ``None`` (the default) for
        none."""
        return None


class FirstOrderActuator(Drive):
    """Torque generators with first-order dynamics: ``F = gain · f · a``, ``τ_c ȧ = u(t) − a``.

    ``u(t)`` (dimensionless command, e.g. neural excitation) is any traceable function of time
    returning ``(n,)``; ``gain`` ``(n,)`` N·m or N; ``time_constant`` ``(n,)`` s > 0. With a step
    command the force rises as Ivancevic's (2009) impulse ``F⁰(1 − e^{−t/τ})`` (Wilkie's active state).
    The force is scaled by the (first) fitness component ``f[0]``. States ``a`` ``(n,)``.
    """

    gain: Float[Array, " n"]
    time_constant: Float[Array, " n"]
    command: Callable

    def __init__(self, gain, time_constant, command):
        self.gain = coordinate_vector(gain, "FirstOrderActuator: gain")
        self.time_constant = coordinate_vector(time_constant, "FirstOrderActuator: time_constant")
        self.command = command
        check_values(self.gain, "FirstOrderActuator: gain")
        check_values(self.time_constant, "FirstOrderActuator: time_constant", positive=True)
        if self.time_constant.shape not in ((), self.gain.shape):
            raise ValueError(
                f"FirstOrderActuator: time_constant has shape {self.time_constant.shape}, expected "
                f"{self.gain.shape} (one per actuator, as gain) or a scalar"
            )

    def check_size(self, n):
        if self.gain.shape != (n,) and not (n == 1 and self.gain.shape == ()):
            raise ValueError(
                f"FirstOrderActuator: gain has shape {self.gain.shape}, expected ({n},) (one actuator per coordinate)"
            )

    @property
    def state_size(self) -> int:
        return int(jnp.size(self.gain))

    def __call__(self, t, q, qd, f, a=None):
        if a is None:
            raise ValueError("FirstOrderActuator has states: call it as drive(t, q, qd, f, a)")
        return self.gain * f[0] * a

    def state_rate(self, t, q, qd, f, a):
        u = jnp.asarray(self.command(t), a.dtype)
        if u.shape not in ((), a.shape):
            raise ValueError(
                f"FirstOrderActuator: command(t) returns shape {u.shape}, expected {a.shape} "
                f"(one per actuator) or a scalar"
            )
        return (u - a) / self.time_constant


class ZeroDrive(Drive):
    """``F = 0`` (the free, conservative system)."""

    def __call__(self, t, q, qd, f, a=None):
        return jnp.zeros_like(qd)


class ConstantDrive(Drive):
    """``F = tau`` ``(n,)`` N·m / N (or a scalar for every coordinate), constant."""

    tau: Float[Array, " n"]
    per_coordinate: ClassVar[tuple[str, ...]] = ("tau",)

    def __init__(self, tau):
        self.tau = coordinate_vector(tau, "ConstantDrive: tau")
        check_values(self.tau, "ConstantDrive: tau")

    def __call__(self, t, q, qd, f, a=None):
        return jnp.broadcast_to(self.tau, qd.shape).astype(qd.dtype)


class TimeFunctionDrive(Drive):
    """``F = fn(t)``: any JAX-traceable function of time returning ``(n,)`` (e.g. an
    `equinox.Module` with array fields, so its parameters are differentiable)."""

    fn: Callable

    def __call__(self, t, q, qd, f, a=None):
        force = jnp.asarray(self.fn(t), qd.dtype)
        if force.shape not in ((), qd.shape):
            raise ValueError(
                f"TimeFunctionDrive: fn(t) returns shape {force.shape}, expected {qd.shape} "
                f"(one per velocity coordinate) or a scalar"
            )
        return force * jnp.ones_like(qd)


class SpringDamperDrive(Drive):
    """Joint springs and dampers ``F = −k (q − q_rest) − c q̇`` (``k``, ``c`` ≥ 0, ``(n,)``).

    A PD controller towards ``q_rest`` when read as a controller; a linear spring otherwise.
    """

    stiffness: Float[Array, " n"]
    damping: Float[Array, " n"]
    rest: Float[Array, " n"]
    per_coordinate: ClassVar[tuple[str, ...]] = ("stiffness", "damping", "rest")

    def __init__(self, stiffness, damping=0.0, rest=0.0):
        self.stiffness, self.damping, self.rest = (
            coordinate_vector(x, f"SpringDamperDrive: {name}")
            for x, name in ((stiffness, "stiffness"), (damping, "damping"), (rest, "rest"))
        )
        for name in ("stiffness", "damping"):
            check_values(getattr(self, name), f"SpringDamperDrive: {name}", nonnegative=True)
        check_values(self.rest, "SpringDamperDrive: rest")

    def __call__(self, t, q, qd, f, a=None):
        return -self.stiffness * (q - self.rest) - self.damping * qd


class SumDrive(Drive):
    """Several drives at once: ``F = Σ_k F_k`` ``(n,)`` N·m / N (Ivancevic's (2009) single generalised
    force ``F_i = F_i^musc + F_i^robo + …``; the joint dissipation ``−∂R/∂q̇`` is the system's
    `Dissipation` and the stochastic torques ``B dW`` are `jaxbio.simulate_sde`'s ``noise``).

    ``terms``: a tuple of `Drive` modules (e.g. `jaxbio.muscles.MuscleDrive` and
    `jaxbio.muscles.DCMotor`). States: the terms' states concatenated in order,
    ``a = (a_1, a_2, …)`` ``(Σ_k state_size_k,)``; each term sees its own slice (or ``None`` when
    it has none). Added inertias sum (`added_inertia`). Each term sees the same fitness.
    """

    terms: tuple

    def __init__(self, *terms):
        if not terms or not all(isinstance(d, Drive) for d in terms):
            raise ValueError(
                f"SumDrive: terms must be one or more Drive modules, got {[type(d).__name__ for d in terms]}"
            )
        self.terms = tuple(terms)

    def check_size(self, n):
        for d in self.terms:
            d.check_size(n)

    @property
    def state_size(self) -> int:
        return sum(d.state_size for d in self.terms)

    def _slices(self, a):
        """Each term's states: a static slice of ``a``, or ``None`` for a term without states."""
        out, start = [], 0
        for d in self.terms:
            size = d.state_size
            out.append(None if size == 0 or a is None else a[start : start + size])
            start += size
        return out

    def __call__(self, t, q, qd, f, a=None):
        if a is None and self.state_size > 0:
            raise ValueError("SumDrive has states (its terms' states): call it as drive(t, q, qd, f, a)")
        return sum(d(t, q, qd, f, s) for d, s in zip(self.terms, self._slices(a)))

    def state_rate(self, t, q, qd, f, a):
        rates = [d.state_rate(t, q, qd, f, s) for d, s in zip(self.terms, self._slices(a)) if s is not None]
        return jnp.concatenate(rates) if rates else jnp.zeros_like(a)

    def initial_actuator_state(self, dtype=None):
        parts = [d.initial_actuator_state(dtype) for d in self.terms if d.state_size > 0]
        return jnp.concatenate(parts) if parts else jnp.zeros(0, dtype)

    def added_inertia(self, n, dtype=None):
        parts = [j for j in (d.added_inertia(n, dtype) for d in self.terms) if j is not None]
        return sum(parts) if parts else None


class Dissipation(_Component):
    """Rayleigh dissipation function ``R(q, q̇) ≥ 0`` (J/s); the force is ``−∂R/∂q̇``."""

    @abc.abstractmethod
    def __call__(self, q, qd) -> Array: ...

    def force(self, q, qd):
        """``∂R/∂q̇`` ``(n,)``, by automatic differentiation unless a subclass knows it."""
        return jax.grad(lambda v: self(q, v))(qd)

    def phase_terms(self, q, p, dH_dp) -> tuple[Array, Array]:
        """What the dissipation adds to the Hamiltonian flow, ``(Δq̇, Δṗ)``: for a Rayleigh
        function ``(0, −∂R/∂q̇)`` at ``q̇ = ∂ℋ/∂p`` (`PhaseSpaceDissipation` adds eqs. 10–11's
        ``(∂R/∂p, ∂R/∂q)``). ``Δṗ``'s shape is checked (``ValueError`` naming the component)."""
        resistance = _output(self.force(q, dH_dp), jnp.shape(p), "dissipation", self, ".force")
        return jnp.zeros_like(dH_dp), -resistance


class NoDissipation(Dissipation):
    """``R = 0``."""

    def __call__(self, q, qd):
        return jnp.zeros((), qd.dtype)

    def force(self, q, qd):
        return jnp.zeros_like(qd)


class LinearDamping(Dissipation):
    """``R = ½ Σ c_i q̇_i²`` with ``c`` ``(n,)`` (or a scalar) N·m·s/rad / N·s/m, ``c ≥ 0``."""

    coefficients: Float[Array, ...]
    per_coordinate: ClassVar[tuple[str, ...]] = ("coefficients",)

    def __init__(self, coefficients):
        self.coefficients = coordinate_vector(coefficients, "LinearDamping: coefficients")
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

    coefficients: Float[Array, ...]
    wind: Float[Array, ...]
    per_coordinate: ClassVar[tuple[str, ...]] = ("coefficients", "wind")

    def __init__(self, coefficients, wind=0.0):
        self.coefficients = coordinate_vector(coefficients, "QuadraticDrag: coefficients")
        self.wind = coordinate_vector(wind, "QuadraticDrag: wind")
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

    def check_size(self, n):
        for d in self.terms:
            d.check_size(n)

    def __call__(self, q, qd):
        return sum(d(q, qd) for d in self.terms)

    def force(self, q, qd):
        return sum(d.force(q, qd) for d in self.terms)


class PhaseSpaceDissipation(_Component):
    """Ivancevic's (2009) dissipation ``R(q, p)`` on phase space, entering eqs. 10–11 as printed:

        q̇ = ∂ℋ/∂p + ∂R/∂p,        ṗ = F − ∂ℋ/∂q + ∂R/∂q            (Ivancevic 2009, eqs. 10–11)

    ``fn(q, p) -> ()`` is any traceable scalar function, J/s (``q``, ``p`` ``(n,)``); `gradients`
    gives ``(∂R/∂q, ∂R/∂p)`` by automatic differentiation. Eqs. 10–11 are written in canonical
    coordinates, so a `HamiltonianSystem` accepts it only on trees of 1-DOF joints (with ball or
    free joints ``(q, p)`` are not canonical: ``ValueError``). Use it as a `HamiltonianSystem`'s
    ``dissipation`` in place of a Rayleigh `Dissipation` ``R(q, q̇)`` (``q̇ = ∂ℋ/∂p``,
    ``ṗ = F − ∂ℋ/∂q − ∂R/∂q̇``). Example, a contraction of phase space towards the origin:
    ``PhaseSpaceDissipation(lambda q, p: -0.1 * jnp.dot(q, p))`` (``q̇ −= 0.1 q``, ``ṗ −= 0.1 p``).

    Energy: along eqs. 10–11, ``dℋ/dt = ∂ℋ/∂t + ∂ℋ/∂p·F + ∇ℋ·∇R`` with
    ``∇ℋ·∇R = ∂ℋ/∂q·∂R/∂p + ∂ℋ/∂p·∂R/∂q`` — ``R`` adds a *gradient* flow ``(∂R/∂p, ∂R/∂q)`` to
    the Hamiltonian one ``(∂ℋ/∂p, −∂ℋ/∂q)``, and it dissipates only where ``∇ℋ·∇R < 0`` (e.g.
    ``R = −γ ℋ`` gives ``−γ|∇ℋ|²``); unlike a Rayleigh function, ``R ≥ 0`` is no condition.

    When the two forms coincide (same ``(q(t), p(t))`` from every initial state, for the printed
    ``+`` sign). Subtracting the right-hand sides, they agree iff for all ``(q, p)``
    (i) ``∂R/∂p = 0``: ``R = R(q)`` depends on the configuration alone, and
    (ii) ``∂R/∂q(q) = −∂R̃/∂q̇(q, M⁻¹p)`` for the Rayleigh function ``R̃``. The left side of (ii)
    does not depend on ``p``, so neither may the Rayleigh force: ``R̃ = −∇R(q)·q̇ + c(q)`` —
    a Rayleigh function *linear* in the velocities whose force ``−∇R(q)`` is a gradient field, i.e.
    ``−R`` acts as an extra potential and neither form dissipates. Hence no genuinely
    velocity-dependent damping (``LinearDamping`` with ``c > 0``, ``QuadraticDrag``, Ivancevic's (2009)
    Rayleigh–Van der Pol function) has a phase-space ``R(q, p)`` with the same trajectories, and
    any ``R`` that depends on ``p`` changes the kinematic equation ``q̇ = ∂ℋ/∂p``. With the other
    sign convention (``ṗ = F − ∂ℋ/∂q − ∂R/∂q``) condition (ii) reads ``∂R/∂q = +∂R̃/∂q̇``.
    """

    fn: Callable

    def __init__(self, fn):
        if not callable(fn):
            raise ValueError(f"PhaseSpaceDissipation: fn must be a function R(q, p), got {type(fn).__name__}")
        self.fn = fn

    def __call__(self, q, p) -> Array:
        """``R(q, p)`` J/s, a scalar (``ValueError`` otherwise)."""
        value = jnp.asarray(self.fn(q, p))
        if value.shape != ():
            raise ValueError(f"PhaseSpaceDissipation: fn(q, p) must return a scalar, got shape {value.shape}")
        return value

    def gradients(self, q, p) -> tuple[Array, Array]:
        """``(∂R/∂q, ∂R/∂p)``, both ``(n,)``, J/s per unit coordinate / momentum."""
        return jax.grad(self, argnums=(0, 1))(q, p)

    def phase_terms(self, q, p, dH_dp) -> tuple[Array, Array]:
        """``(Δq̇, Δṗ) = (∂R/∂p, ∂R/∂q)``, eqs. 10–11 (the `Dissipation.phase_terms` protocol)."""
        dR_dq, dR_dp = self.gradients(q, p)
        return dR_dp, dR_dq


class TimePotential(_Component):
    """An explicitly time-dependent potential ``U(t, q)`` J added to the tree's energy, so that
    the system's Hamiltonian is Ivancevic's (2009) ``ℋ(t, q, p) = H(q, p) + U(t, q)`` (eqs. 23–26;
    time-varying springs, moving anchors, a time-varying field). ``∂ℋ/∂t = ∂U/∂t`` is what
    makes ℋ change along the conservative flow: ``dℋ/dt = ∂ℋ/∂t`` when ``F = R = 0``.

    Protocol: ``__call__(t, q) -> ()`` J with ``t`` s and ``q`` ``(nq,)``; `gradient` ``∂U/∂q``
    ``(nq,)`` and `time_rate` ``∂U/∂t`` W by automatic differentiation unless a subclass knows them.
    """

    @abc.abstractmethod
    def __call__(self, t, q) -> Array: ...

    def gradient(self, t, q) -> Array:
        """``∂U/∂q`` ``(nq,)`` J per unit coordinate."""
        return jax.grad(lambda x: self(t, x))(q)

    def time_rate(self, t, q) -> Array:
        """``∂U/∂t`` W (forward mode in ``t``)."""
        t = jnp.asarray(t, q.dtype)
        return jax.jvp(lambda s: self(s, q), (t,), (jnp.ones_like(t),))[1]


class NoPotential(TimePotential):
    """``U = 0``: ℋ is the tree's ``H(q, p)`` (the default)."""

    def __call__(self, t, q):
        return jnp.zeros((), q.dtype)

    def gradient(self, t, q):
        return jnp.zeros_like(q)

    def time_rate(self, t, q):
        return jnp.zeros((), q.dtype)


class TimeFunctionPotential(TimePotential):
    """``U = fn(t, q)`` J: any traceable scalar function of time ``t`` s and ``q`` ``(nq,)``
    (e.g. an `equinox.Module` with array fields, so its parameters are differentiable)."""

    fn: Callable

    def __init__(self, fn):
        if not callable(fn):
            raise ValueError(f"TimeFunctionPotential: fn must be a function U(t, q), got {type(fn).__name__}")
        self.fn = fn

    def __call__(self, t, q):
        value = jnp.asarray(self.fn(t, q))
        if value.shape != ():
            raise ValueError(f"TimeFunctionPotential: fn(t, q) must return a scalar, got shape {value.shape}")
        return value


class MovingSpringPotential(TimePotential):
    """Springs to a moving rest position: ``U = ½ Σ k_i (q_i − r_i(t))²`` J.

    ``stiffness`` ``k`` ``(n,)`` or a scalar, N·m/rad or N/m, ``≥ 0``; ``rest`` ``r(t)``: a
    traceable function of time returning ``(n,)`` or a scalar (rad, m) — a moving anchor, or a
    tracked reference posture. Closed forms: ``∂U/∂q = k (q − r)``,
    ``∂U/∂t = −Σ k_i (q_i − r_i) ṙ_i`` (``ṙ`` by forward mode). Coordinates are 1-DOF (axial).
    """

    stiffness: Float[Array, ...]
    rest: Callable
    per_coordinate: ClassVar[tuple[str, ...]] = ("stiffness",)

    def __init__(self, stiffness, rest):
        self.stiffness = coordinate_vector(stiffness, "MovingSpringPotential: stiffness")
        check_values(self.stiffness, "MovingSpringPotential: stiffness", nonnegative=True)
        if not callable(rest):
            raise ValueError(f"MovingSpringPotential: rest must be a function r(t), got {type(rest).__name__}")
        self.rest = rest

    def _rest(self, t, q):
        r = jnp.asarray(self.rest(t), q.dtype)
        if r.shape not in ((), q.shape):
            raise ValueError(f"MovingSpringPotential: rest(t) returns shape {r.shape}, expected {q.shape} or a scalar")
        return r

    def __call__(self, t, q):
        return 0.5 * jnp.sum(self.stiffness * (q - self._rest(t, q)) ** 2)

    def gradient(self, t, q):
        return self.stiffness * (q - self._rest(t, q))

    def time_rate(self, t, q):
        t = jnp.asarray(t, q.dtype)
        r, rdot = jax.jvp(lambda s: self._rest(s, q), (t,), (jnp.ones_like(t),))
        return -jnp.sum(self.stiffness * (q - r) * rdot)


class PhaseFlow(NamedTuple):
    """The rates a `FitnessLaw` may need at one state, all from `HamiltonianSystem.vector_field`:

    - ``qdot`` ``(nq,)``: the configuration rate ``q̇`` the solver integrates (driven, dissipative);
    - ``pdot`` ``(nv,)``: the momentum rate ``ṗ`` (driven, dissipative);
    - ``dH_dp`` ``(nv,)``: ``∂ℋ/∂p = M⁻¹p`` (rad/s, m/s);
    - ``dH_dq`` ``(nv,)``: ``∂ℋ/∂q`` (N·m, N; ``−ṗ`` of the conservative system; velocity
      coordinates on trees with ball or free joints);
    - ``dH_dt`` ``()``: ``∂ℋ/∂t`` W (`TimePotential.time_rate`).
    """

    qdot: Array
    pdot: Array
    dH_dp: Array
    dH_dq: Array
    dH_dt: Array


class FitnessLaw(_Component):
    """Evolution of the fitness state ``f`` ``(k,)`` and the fitness the drives see.

    - ``rate(t, q, p, qd, f, drive_force, flow) -> (k,)``: ``ḟ`` from the time ``t`` s, the
      coordinates ``q``, momenta ``p``, the generalised velocities ``qd`` ``(n,)`` (``∂ℋ/∂p``,
      plus ``∂R/∂p`` with a `PhaseSpaceDissipation`), the fitness state ``f``, the drive's
      generalised forces ``drive_force`` ``(n,)`` and the `PhaseFlow` ``flow`` (``q̇``, ``ṗ``,
      ``∂ℋ/∂p``, ``∂ℋ/∂q``, ``∂ℋ/∂t``; the bracket of Ivancevic 2009, eq. 27 needs them, most laws ignore it).
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
    def rate(self, t, q, p, qd, f, drive_force, flow) -> Array: ...


class ConstantFitness(FitnessLaw):
    """``ḟ = 0``."""

    def rate(self, t, q, p, qd, f, drive_force, flow):
        return jnp.zeros_like(f)


class PowerDepletion(FitnessLaw):
    """Fatigue by mechanical work: ``ḟ = −k · max(q̇ᵀF, 0) · f + r (1 − f)``.

    ``k`` 1/J (depletion per joule of positive work), ``r`` 1/s (recovery rate). This is the
    source term of Ivancevic's (2009) ``d_H f``; the bracket term vanishes because ``f`` is carried as
    its own state rather than as a function of ``(q, p)`` (see `BracketFitness` for that form).
    """

    depletion: Float[Array, ""]
    recovery: Float[Array, ""]
    scalars: ClassVar[tuple[str, ...]] = ("depletion", "recovery")

    def __init__(self, depletion, recovery=0.0):
        self.depletion = as_float(depletion, "PowerDepletion: depletion")
        self.recovery = as_float(recovery, "PowerDepletion: recovery")
        self.check_size(1)
        for name in ("depletion", "recovery"):
            check_values(getattr(self, name), f"PowerDepletion: {name}", nonnegative=True)

    def rate(self, t, q, p, qd, f, drive_force, flow):
        power = jnp.maximum(jnp.dot(qd, drive_force), 0.0)
        return -self.depletion * power * f + self.recovery * (1.0 - f)


class ReserveFitness(FitnessLaw):
    """An energy reserve ``e`` (1 = full) spent by the drive, recovering at rest (Ivancevic's (2009)
    fitness as a phosphagen store), with the fitness ``f(e)`` the drives see.

        ė = −(P_act + q̇ᵀF) / E · e/(e + ε) + r (1 − e)
        f(e) = e (1 + K) / (e + K)                               (Michaelis–Menten, f(1) = 1)

    ``capacity`` ``E`` J (> 0): the reserve in units of work; ``activation_power`` ``P_act`` W
    (≥ 0): the cost of keeping the drive's muscles activated; ``half_saturation`` ``K`` (> 0):
    fitness stays near 1 until the reserve runs low, then falls; ``recovery`` ``r`` 1/s (≥ 0);
    ``throttle`` ``ε`` (static, default 0.01): ``e/(e + ε)`` stops the use only when the
    reserve is empty, so ``e > 0``. The work term is the drive's mechanical power ``q̇ᵀF``
    (Ivancevic's (2009) sprinter: the drive pushes forward, so it is positive; a braking drive would
    refill the reserve — use `PowerDepletion`'s positive-work form for such motions).
    """

    capacity: Float[Array, ""]
    activation_power: Float[Array, ""]
    half_saturation: Float[Array, ""]
    recovery: Float[Array, ""]
    throttle: float = eqx.field(static=True, default=0.01)
    scalars: ClassVar[tuple[str, ...]] = ("capacity", "activation_power", "half_saturation", "recovery")

    def __init__(self, capacity, activation_power=0.0, half_saturation=0.1, recovery=0.0, throttle=0.01):
        self.capacity = as_float(capacity, "ReserveFitness: capacity")
        self.activation_power = as_float(activation_power, "ReserveFitness: activation_power")
        self.half_saturation = as_float(half_saturation, "ReserveFitness: half_saturation")
        self.recovery = as_float(recovery, "ReserveFitness: recovery")
        self.throttle = float(throttle)
        self.check_size(1)
        for name, positive in (
            ("capacity", True),
            ("activation_power", False),
            ("half_saturation", True),
            ("recovery", False),
        ):
            check_values(getattr(self, name), f"ReserveFitness: {name}", positive=positive, nonnegative=not positive)
        if not self.throttle > 0:
            raise ValueError(f"ReserveFitness: throttle must be > 0, got {throttle}")

    def value(self, f):
        k = self.half_saturation
        return f * (1.0 + k) / (f + k)

    def rate(self, t, q, p, qd, f, drive_force, flow):
        use = (self.activation_power + jnp.dot(qd, drive_force)) * f / (f + self.throttle)
        return -use / self.capacity + self.recovery * (1.0 - f)


class BracketFitness(FitnessLaw):
    """Fitness as a scalar function ``φ(t, q, p)`` of time and phase space, evolved by a total
    derivative (Ivancevic 2009, eq. 27), plus an optional ``source(t, q, p, f) -> (k,)``.

    ``form`` (static) picks which derivative:

    - ``"eq27"`` — eq. 27 exactly as printed, the bracket with ℋ alone:

          d_H φ = (∂_t + ∂ᵖℋ ∂_q − ∂_qℋ ∂ᵖ) φ = ∂_t φ + ∂ℋ/∂p · ∂φ/∂q − ∂ℋ/∂q · ∂φ/∂p

      (with a `PhaseSpaceDissipation` ``∂ᵖℋ`` is still ``∂ℋ/∂p``, not the dissipative ``q̇``).
      On solutions of eq. 26 (``F = 0``, no dissipation) this is ``d/dt φ(t, q(t), p(t))``.
    - ``"along_flow"`` (default) — the derivative of ``φ`` along the driven, dissipative flow
      the system actually follows, ``∂_t φ + q̇ · ∂φ/∂q + ṗ · ∂φ/∂p``: eq. 27 with ``−∂_qℋ``
      replaced by the full ``ṗ``, so that ``f(t) = φ(t, q(t), p(t))`` exactly when the source is
      zero and ``f(0) = φ``. The two forms agree when ``F = R = 0``; in the Rayleigh form they
      differ by ``(F − ∂R/∂q̇) · ∂φ/∂p`` (``ṗ + ∂ℋ/∂q``).

    ``phi(t, q, p) -> ()`` (t s, ``q`` ``(nq,)``, ``p`` ``(nv,)``); the state ``f`` is ``(k,)``
    and every component receives the same rate. ``"eq27"`` needs canonical coordinates
    (``nq == nv``, trees of 1-DOF joints).
    """

    phi: Callable
    source: Callable | None = None
    form: str = eqx.field(static=True, default="along_flow")
    forms: ClassVar[tuple[str, ...]] = ("along_flow", "eq27")

    def __check_init__(self):
        check_choice(self.form, self.forms, "BracketFitness: form")
        if not callable(self.phi):
            raise ValueError(f"BracketFitness: phi must be a function φ(t, q, p), got {type(self.phi).__name__}")

    def rate(self, t, q, p, qd, f, drive_force, flow):
        dphi_dt, dphi_dq, dphi_dp = jax.grad(self.phi, argnums=(0, 1, 2))(jnp.asarray(t, p.dtype), q, p)
        if self.form == "eq27":
            if dphi_dq.shape != flow.dH_dp.shape:
                raise ValueError(
                    f"BracketFitness: form='eq27' needs canonical coordinates (nq == nv); "
                    f"q has shape {dphi_dq.shape}, p {flow.dH_dp.shape}"
                )
            rate = dphi_dt + dphi_dq @ flow.dH_dp - dphi_dp @ flow.dH_dq
        else:
            rate = dphi_dt + dphi_dq @ flow.qdot + dphi_dp @ flow.pdot
        out = jnp.broadcast_to(rate, f.shape)
        if self.source is not None:
            out = out + self.source(t, q, p, f)
        return out


# ---- the Hamiltonian and its gradients --------------------------------------------------------


def velocities(tree: SegmentTree, q, p, added_inertia=None) -> Float[Array, " n"]:
    """``q̇ = ∂H/∂p = (M(q) + J)⁻¹ p`` (Cholesky solve; a division for one coordinate);
    ``added_inertia`` ``J`` ``(n,)`` kg·m² / kg, a drive's diagonal inertia (`Drive.added_inertia`),
    default none."""
    return solve(inertia(tree, q, added_inertia), p)


def hamiltonian(
    tree: SegmentTree, q: Float[ArrayLike, " n"], p: Float[ArrayLike, " n"], added_inertia=None
) -> Float[Array, ""]:
    """``H(q, p) = ½ pᵀ M(q)⁻¹ p + V(q)`` J (Ivancevic 2009, eq. 9); ``p`` ``(n,)`` the conjugate
    momenta (kg·m²/s or kg·m/s); ``added_inertia`` as in `velocities` (``M + J`` for ``M``)."""
    q = jnp.asarray(q)
    p = jnp.asarray(p)
    return 0.5 * jnp.dot(p, velocities(tree, q, p, added_inertia)) + potential_energy(tree, q)


def dH_dq(tree: SegmentTree, q, qd) -> Float[Array, " n"]:
    """``∂H/∂q`` at fixed ``p`` from ``q̇ = M⁻¹p``: ``−∂T(q, q̇)/∂q + g(q)`` (no M⁻¹ formed,
    no differentiation through the factorisation). Under `jax.vmap` both terms run the
    batch-last kernels (`jaxbio.dynamics.kinetic_energy_gradient`, `gravity_forces`)."""
    return -kinetic_energy_gradient(tree, q, qd) + gravity_forces(tree, q)


def _plain_tree_terms(tree: SegmentTree, q, p, added_inertia):
    dH_dp = velocities(tree, q, p, added_inertia)
    return dH_dp, dH_dq(tree, q, dH_dp)


def _routed_tree_terms(planar: bool | None):
    """`_plain_tree_terms`; under `jax.vmap` the one-pass kernel
    `jaxbio.dynamics.batch_last.hamiltonian_flow_batch` with its ``planar`` choice (derivatives: the
    per-state route's)."""

    @vmapped_by(functools.partial(hamiltonian_flow_batch, planar=planar))
    def terms(tree, q, p, added_inertia):
        return _plain_tree_terms(tree, q, p, added_inertia)

    return terms


_BATCHED_TREE_TERMS = {planar: _routed_tree_terms(planar) for planar in (None, True, False)}


def _tree_terms(tree: SegmentTree, q, p, added_inertia=None, planar: bool | None = None) -> tuple[Array, Array]:
    """``(∂H/∂p, ∂H/∂q)`` ``(nv,)`` each, with ``H`` built on ``M(q) + diag(added_inertia)``: one
    state by `velocities` and `dH_dq`; under `jax.vmap` (states batched, tree not) one batch-last
    kernel computes ``M``, gravity, the Cholesky solve and ``∂T/∂q`` for the whole batch
    (`hamiltonian_flow_batch`; ``planar``: its kernel choice, see `solver_field`). A one-segment
    tree keeps its closed forms."""
    if _one_segment.applies(tree):
        return _one_segment.hamiltonian_terms(tree, q, p, added_inertia)
    added = jnp.zeros_like(p) if added_inertia is None else jnp.broadcast_to(added_inertia, p.shape).astype(p.dtype)
    return _BATCHED_TREE_TERMS[planar](tree, q, p, added)


#: the states a solver may integrate (`solver_field`, `jaxbio.simulate`): ``(q, p)`` or ``(q, q̇)``
FORMS = ("hamiltonian", "velocity")


def solver_field(system: HamiltonianSystem, form: str = "hamiltonian") -> Callable:
    """``system.vector_field`` (``form="velocity"``: ``system.velocity_field``) for a solver that
    traces the system, as Diffrax's solve does: the batch kernel's planar choice
    (`jaxbio.dynamics.planar_batch`) is made now, from the tree's numbers while they are concrete,
    so that the traced solve compiles one kernel instead of both behind a run-time ``lax.cond``
    (a planar double pendulum's solve compiles faster; benchmarks/README.md, "Measurements behind design choices"). What `jaxbio.simulate` integrates.
    ``ValueError`` for a ``system`` that is not a `HamiltonianSystem` or another ``form``."""
    if not isinstance(system, HamiltonianSystem):
        raise ValueError(f"solver_field: system must be a HamiltonianSystem, got {type(system).__name__}")
    check_choice(form, FORMS, "solver_field: form")
    planar = _planar_batch.planar(system.tree)
    if form == "velocity":
        return _VelocityField(system, planar=planar is True)
    return system.vector_field if planar is None else _PlanarChoice(system, planar)


class _PlanarChoice(eqx.Module):
    """`HamiltonianSystem.vector_field` with a static kernel choice (`solver_field`)."""

    system: HamiltonianSystem
    planar: bool = eqx.field(static=True)

    def __call__(self, t, y, args=None):
        return self.system._vector_field(t, y, self.planar)


class _VelocityField(eqx.Module):
    """`HamiltonianSystem.velocity_field` for a solver (`solver_field`), with what
    `jaxbio._tsit5`'s stored-stage adjoint asks of a field: ``with_aux(t, y)`` is ``(value,
    factor)``, the value and the packed Cholesky factor of ``M + J`` that solved for ``q̈``
    (`jaxbio.dynamics.forward.accelerations_factored`; None above ``UNROLL_MAX`` coordinates,
    ``aux_init(y)`` its zeros), kept per stage by the forward pass; ``at_output(out, factor)``
    gives the same field linearised where its value ``out`` is known: ``q̈`` taken from
    ``out["qd"]`` and solved with ``factor`` (`jaxbio.dynamics.forward.accelerations_at`: neither
    the bias recursion nor the mass matrix is run again). ``planar``: the tree is planar (decided by
    `solver_field` from its concrete numbers): ``M``, the bias and the derivative rule's recursion
    in 2-D algebra (`jaxbio.dynamics.planar_batch._accelerations_factored`, `_inverse_dynamics`;
    the `forward` functions' ``planar``)."""

    system: HamiltonianSystem
    known: Array | None = None
    factor: Array | None = None
    planar: bool = eqx.field(static=True, default=False)

    def __call__(self, t, y, args=None):
        return self.system._velocity_field(t, y, self.known, self.factor, planar=self.planar)

    def with_aux(self, t, y):
        return self.system._velocity_field(t, y, factored=True, planar=self.planar)

    def aux_init(self, y):
        size = factor_size(self.system.tree)
        return None if size is None else jnp.zeros((size,), jnp.result_type(y["qd"]))

    def at_output(self, out: dict, factor=None) -> _VelocityField:
        return _VelocityField(self.system, out["qd"], factor, self.planar)


class HamiltonianSystem(eqx.Module):
    """Driven, dissipative, fitness-dependent Hamiltonian system of a segment tree.

    Fields: ``tree`` (`SegmentTree`), ``drive`` (`Drive`), ``dissipation`` (a Rayleigh
    `Dissipation` ``R(q, q̇)`` or the `PhaseSpaceDissipation` ``R(q, p)`` of Ivancevic 2009, eqs. 10–11),
    ``fitness`` (`FitnessLaw`) and ``potential`` (`TimePotential` ``U(t, q)``, default none):
    the system's Hamiltonian is ``ℋ(t, q, p) = H(q, p) + U(t, q)`` (Ivancevic 2009, eq. 26), its value
    `hamiltonian`, its balance `power_balance`. The state is ``{"q": (nq,), "p": (nv,), "f": (k,)}``, plus
    ``"a": (s,)`` when the drive has ``s = drive.state_size > 0`` states; build one with
    `initial_state`. ``vector_field(t, y, args)`` has Diffrax's signature.

    Ball and free joints (``nq ≠ nv``): ``p = M(q) v`` is conjugate to the velocity ``v``
    (segment-frame ``ω``, ``v``), not to ``q̇``; ``q`` is advanced with ``q̇ = G(q) v``
    (`jaxbio.configuration.velocity_to_qdot`: ``Q̇ = ½ Q ⊗ (0, ω)``) and ``ṗ`` carries the
    momentum-rate term of `jaxbio.dynamics.kinetic_energy_gradient` (Euler's gyroscopic
    ``p × ω`` for one body). Unit quaternions are kept by construction and by projection: the
    exact flow of ``½ Q ⊗ (0, ω)`` keeps ``|Q|``, the dynamics use the rotation of ``Q/|Q|`` so
    the integrator's drift of ``|Q|`` has no effect on them, and `jaxbio.simulate` projects the
    trajectory's quaternions to unit length on output (`jaxbio.configuration.normalize`).
    Drives and dissipations act on the ``nv`` velocity coordinates.
    """

    tree: SegmentTree = eqx.field(converter=lambda m: tree_of(m, "HamiltonianSystem: "))
    drive: Drive = ZeroDrive()
    dissipation: Dissipation | PhaseSpaceDissipation = NoDissipation()
    fitness: FitnessLaw = ConstantFitness()
    potential: TimePotential = NoPotential()

    def __check_init__(self):
        """Each component of the right kind, its per-coordinate parameters as long as the tree
        has coordinates (``ValueError`` naming the component, the field and the length)."""
        if not isinstance(self.tree, SegmentTree):
            raise ValueError(f"HamiltonianSystem: tree must be a SegmentTree, got {type(self.tree).__name__}")
        check_model_precision(self.tree, "HamiltonianSystem: ")
        for role, kinds in (
            ("drive", (Drive,)),
            ("dissipation", (Dissipation, PhaseSpaceDissipation)),
            ("fitness", (FitnessLaw,)),
            ("potential", (TimePotential,)),
        ):
            component = getattr(self, role)
            if not isinstance(component, kinds):
                names = " or ".join(f"jaxbio.hamiltonian.{kind.__name__}" for kind in kinds)
                raise ValueError(f"HamiltonianSystem: {role} must be a {names}, got {type(component).__name__}")
            if isinstance(component, PhaseSpaceDissipation) and not self.tree.is_axial:
                raise ValueError(
                    "HamiltonianSystem: dissipation PhaseSpaceDissipation needs canonical coordinates "
                    "(Ivancevic 2009, eqs. 10–11); this tree has ball or free joints (nq ≠ nv or "
                    "quaternions) — use a Rayleigh Dissipation R(q, q̇)"
                )
            try:
                component.check_size(self.nq if role == "potential" else self.nv)
            except ValueError as e:
                raise ValueError(
                    f"HamiltonianSystem: {role} {e} (the tree has {self.nv} velocity coordinates)"
                ) from None

    @property
    def nq(self) -> int:
        """Configuration size (``q``)."""
        return self.tree.nq

    @property
    def nv(self) -> int:
        """Velocity and momentum size (``p``, drive and dissipation forces)."""
        return self.tree.nv

    @property
    def stateful(self) -> bool:
        """Whether the drive carries states (the state's key ``"a"``); static."""
        return self.drive.state_size > 0

    def added_inertia(self, dtype=None) -> Array | None:
        """The drive's diagonal inertia ``J`` ``(nv,)`` (`Drive.added_inertia`) or ``None``: the
        system's mass matrix is ``M(q) + diag(J)`` in `velocities`, `energy` and `initial_state`."""
        return self.drive.added_inertia(self.nv, dtype)

    def velocities(self, q, p) -> Float[Array, " nv"]:
        """``∂H/∂p = (M(q) + J)⁻¹ p`` ``(nv,)`` with the drive's added inertia ``J``."""
        return velocities(self.tree, q, p, self.added_inertia(jnp.result_type(q)))

    def momenta(self, q, qd) -> Float[Array, " nv"]:
        """``p = (M(q) + J) q̇`` ``(nv,)`` from the velocities ``qd`` ``(nv,)``: the inverse of
        `velocities`."""
        return inertia(self.tree, q, self.added_inertia(jnp.result_type(q))) @ qd

    def initial_state(self, q, qd=None, f=None, a=None, *, form: str = "hamiltonian") -> dict:
        """State from coordinates ``q`` ``(nq,)`` and *velocities* ``qd`` ``(nv,)`` (default 0):
        ``{"q", "p", "f"}`` with momenta ``p = (M(q) + J) qd`` (``J`` the drive's
        `added_inertia`), or for ``form="velocity"`` ``{"q", "qd", "f"}``, the state
        ``jaxbio.simulate(..., form="velocity")`` integrates (no mass matrix computed); ``f``
        fitness state (default 1) and, for a drive with states, its states ``a``."""
        check_choice(form, FORMS, "initial_state: form")
        q = _vector(q, self.nq, "q")
        qd = jnp.zeros(self.nv, q.dtype) if qd is None else _vector(qd, self.nv, "qd", like=q)
        motion = {"p": self.momenta(q, qd)} if form == "hamiltonian" else {"qd": qd}
        k = self.fitness.size
        if f is None:
            f = jnp.ones(k, q.dtype)
        else:
            f = as_float(f, "initial_state: f", like=q)
            f = jnp.broadcast_to(f, (k,)) if f.shape == () else _vector(f, k, "f", like=q)
        y = {"q": q, **motion, "f": f}
        if self.stateful:
            y["a"] = (
                self.drive.initial_actuator_state(q.dtype)
                if a is None
                else _vector(a, self.drive.state_size, "a", like=q)
            )
        return y

    def drive_force(self, t, y, qd):
        """Generalised drive forces ``F`` ``(n,)`` at state ``y`` (``qd`` the velocity); the drive sees
        the fitness ``self.fitness.value(y["f"])``."""
        return self.drive(t, y["q"], qd, self.fitness.value(y["f"]), y.get("a"))

    def energy(self, y) -> Float[Array, ""]:
        """``H(q, p)`` J at state ``y``: the tree's kinetic (with the drive's `added_inertia`) and
        gravitational energy (what `jaxbio.simulate` reports as ``Trajectory.energy``), without
        the ``potential``."""
        return hamiltonian(self.tree, y["q"], y["p"], self.added_inertia(jnp.result_type(y["q"])))

    def hamiltonian(self, t, y) -> Float[Array, ""]:
        """Ivancevic's (2009) ``ℋ(t, q, p) = H(q, p) + U(t, q)`` J at time ``t`` s and state ``y``
        (eqs. 23–26; equals `energy` when ``potential`` is `NoPotential`)."""
        return self.energy(y) + self.potential(t, y["q"])

    def vector_field(self, t, y, args=None) -> dict:
        """Ivancevic 2009, eqs. 10–12 and 26–27: ``(q̇, ṗ, ḟ)`` (and ``ȧ`` for a drive with states).

        With ``ℋ = H + U(t, q)``: ``q̇ = ∂ℋ/∂p``, ``ṗ = F − ∂ℋ/∂q − ∂R/∂q̇`` for a Rayleigh
        `Dissipation`; ``q̇ = ∂ℋ/∂p + ∂R/∂p``, ``ṗ = F − ∂ℋ/∂q + ∂R/∂q`` for a
        `PhaseSpaceDissipation`. Drives see the velocity ``q̇`` (as ``qd``).

        Each component's output shape is checked while tracing (no run-time cost): a drive or
        dissipation force of another shape than ``q`` (which would broadcast into a plausible
        wrong force) raises ``ValueError`` naming the component."""
        return self._vector_field(t, y)

    def _vector_field(self, t, y, planar: bool | None = None) -> dict:
        """`vector_field`, its batch kernel's planar choice given (`solver_field`)."""
        q, p, f = y["q"], y["p"], y["f"]
        flow, force, qd, _ = self._flow(t, y, planar)
        out = {
            "q": flow.qdot,
            "p": flow.pdot,
            "f": _output(self.fitness.rate(t, q, p, qd, f, force, flow), f.shape, "fitness", self.fitness, ".rate"),
        }
        if self.stateful:
            out["a"] = _output(
                self.drive.state_rate(t, q, qd, self.fitness.value(f), y["a"]),
                y["a"].shape,
                "drive",
                self.drive,
                ".state_rate",
            )
        return out

    def velocity_field(self, t, y, args=None) -> dict:
        """The same equations in velocity form, on the state ``{"q", "qd", "f"(, "a")}``
        (``qd`` ``(nv,)`` the velocities instead of the momenta): ``q̇ = qd``,
        ``q̈ = (M(q) + J)⁻¹ (F − ∂R/∂q̇ − ∂U/∂q − C(q, q̇) q̇ − g(q))`` (one wrench recursion
        for ``C q̇ + g``, one Cholesky solve: `jaxbio.dynamics.forward.accelerations`, whose
        derivatives transpose one recursion at the solved ``q̈``), ``ḟ`` and ``ȧ`` as in `vector_field`.

        What `jaxbio.simulate` integrates with ``form="velocity"``: the same trajectory as the
        Hamiltonian form up to the discretisation, but reverse mode through it differentiates
        the recursion once instead of ``∂T/∂q`` (a second derivative of the kinetic energy), which
        makes gradients several times cheaper to compile and run (benchmarks/learning.py). Needs
        1-DOF joints and a Rayleigh `Dissipation` (``ValueError`` otherwise). A fitness law other
        than `ConstantFitness` sees the same `PhaseFlow` as in `vector_field` (its ``∂H/∂q``
        computed from ``q̇``)."""
        return self._velocity_field(t, y)

    def _velocity_field(self, t, y, known_qdd=None, factor=None, *, factored: bool = False, planar: bool = False):
        """`velocity_field`; with ``known_qdd`` (its ``q̈`` at ``y``, already computed) that value,
        differentiated without the bias recursion, and with ``factor`` (the Cholesky factor of
        ``M + J`` at ``y``) without the mass matrix (`_VelocityField.at_output`). ``factored``:
        ``(value, factor)`` (`_VelocityField.with_aux`). ``planar``: see `_VelocityField`."""
        self.check_velocity_form()
        q, qd, f = y["q"], y["qd"], y["f"]
        a = y.get("a")
        force = _output(self.drive(t, q, qd, self.fitness.value(f), a), qd.shape, "drive", self.drive)
        resistance = _output(self.dissipation.force(q, qd), qd.shape, "dissipation", self.dissipation, ".force")
        potential_force = _output(self.potential.gradient(t, q), qd.shape, "potential", self.potential, ".gradient")
        added = self.added_inertia(jnp.result_type(q))
        tau = force - resistance - potential_force
        if factored:
            qdd, factor = accelerations_factored(self.tree, q, qd, tau, added, planar=planar)
        elif known_qdd is None:
            qdd = accelerations(self.tree, q, qd, tau, added, planar=planar)
        else:
            qdd = accelerations_at(self.tree, q, qd, tau, known_qdd, added, factor=factor, planar=planar)
        if isinstance(self.fitness, ConstantFitness):
            rate = jnp.zeros_like(f)
        else:
            gradient_q = dH_dq(self.tree, q, qd) + potential_force
            p = inertia(self.tree, q, added) @ qd
            flow = PhaseFlow(qd, force - gradient_q - resistance, qd, gradient_q, self.potential.time_rate(t, q))
            rate = _output(self.fitness.rate(t, q, p, qd, f, force, flow), f.shape, "fitness", self.fitness, ".rate")
        out = {"q": qd, "qd": qdd, "f": rate}
        if self.stateful:
            out["a"] = _output(
                self.drive.state_rate(t, q, qd, self.fitness.value(f), a), a.shape, "drive", self.drive, ".state_rate"
            )
        return (out, factor) if factored else out

    def check_velocity_form(self) -> None:
        """``ValueError`` unless `velocity_field` applies: 1-DOF joints (``nq == nv``) and a
        Rayleigh `Dissipation`."""
        if not self.tree.is_axial or self.nq != self.nv:
            raise ValueError(
                "velocity form: the tree must have 1-DOF joints only (nq == nv); ball or free "
                "joints integrate in the Hamiltonian form"
            )
        if not isinstance(self.dissipation, Dissipation):
            raise ValueError(
                "velocity form: the dissipation must be a Rayleigh jaxbio.hamiltonian.Dissipation "
                f"R(q, q̇), got {type(self.dissipation).__name__}"
            )

    def _flow(self, t, y, planar: bool | None = None) -> tuple[PhaseFlow, Array, Array, tuple[Array, Array]]:
        """The `PhaseFlow` at ``(t, y)``, the drive force ``F`` ``(nv,)``, the generalised
        velocity ``(nv,)`` (``∂ℋ/∂p``, plus ``∂R/∂p`` with a `PhaseSpaceDissipation`) and the
        dissipation's ``(Δq̇, Δṗ)`` (`Dissipation.phase_terms`); ``planar``: see `_tree_terms`."""
        q, p = y["q"], y["p"]
        dH_dp, gradient_q = _tree_terms(self.tree, q, p, self.added_inertia(jnp.result_type(q)), planar)
        potential_force = self.potential.gradient(t, q)
        if not self.tree.is_axial:
            potential_force = velocity_to_qdot_transpose(self.tree, q, potential_force)
        gradient_q = gradient_q + _output(potential_force, p.shape, "potential", self.potential, ".gradient")
        dq, dp = self.dissipation.phase_terms(q, p, dH_dp)
        qd = dH_dp + dq
        force = _output(self.drive_force(t, y, qd), p.shape, "drive", self.drive)
        pdot = force - gradient_q + dp
        qdot = qd if self.tree.is_axial else velocity_to_qdot(self.tree, q, qd)
        return PhaseFlow(qdot, pdot, dH_dp, gradient_q, self.potential.time_rate(t, q)), force, qd, (dq, dp)

    def power_balance(self, t, y) -> Float[Array, ""]:
        """``dℋ/dt`` W along the vector field: ``∂ℋ/∂t + q̇ᵀ (F − ∂R/∂q̇)`` for a Rayleigh
        `Dissipation` (Ivancevic 2009, eq. 26 with drive and dissipation), ``∂ℋ/∂t + ∂ℋ/∂pᵀ F +
        ∂ℋ/∂q·∂R/∂p + ∂ℋ/∂p·∂R/∂q`` for a `PhaseSpaceDissipation` (eqs. 10–11). ``∂ℋ/∂t`` is
        the `TimePotential`'s ``∂U/∂t``."""
        flow, force, _, (dq, dp) = self._flow(t, y)
        # ∂ℋ/∂t + ∂ℋ/∂q·q̇ + ∂ℋ/∂p·ṗ with q̇ = ∂ℋ/∂p + Δq̇, ṗ = F − ∂ℋ/∂q + Δṗ: the Hamiltonian parts cancel
        return flow.dH_dt + jnp.dot(flow.dH_dp, force + dp) + jnp.dot(flow.dH_dq, dq)


def _vector(x, n, name, like=None):
    """``x`` as a finite float ``(n,)`` vector; ``ValueError`` naming ``name`` (NaN/inf only for
    concrete values)."""
    x = as_float(x, f"initial_state: {name}", like=like)
    if x.shape != (n,):
        raise ValueError(f"initial_state: {name} has shape {x.shape}, expected ({n},)")
    return check_finite(
        x, f"initial_state: {name}", check=False, locate=lambda idx, count: f" (first at index {idx[0]})"
    )


def _output(x, shape, role, component, method=""):
    """``x`` if it has ``shape`` (checked while tracing); ``ValueError`` naming the component."""
    if jnp.shape(x) != shape:
        raise ValueError(
            f"HamiltonianSystem: {role} {type(component).__name__}{method} returned shape "
            f"{jnp.shape(x)}, expected {shape}"
        )
    return x
