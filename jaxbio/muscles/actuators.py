"""Joint-level actuators of seed 000 that plug into `jaxbio.hamiltonian`.

- `RayleighVanDerPol`: the synovial-joint dissipation ``R = ½ Σ q̇ᵢ² (αᵢ + βᵢ qᵢ²)``.
- `DCMotor`: the hybrid rotational actuator's D.C. motor (``l i̇ + R i + C q̇ = u``).
- `MuscleDrive`: the impulse × Hill muscular drive ``F_musc = F_imp × F_Hill`` mapped to joints by
  a constant moment-arm matrix.
"""

from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio.hamiltonian import Dissipation, Drive
from jaxbio.muscles.activation import impulse_decay, impulse_rise
from jaxbio._validate import as_float
from jaxbio._validate import concrete as _concrete
from jaxbio.muscles.curves import _check, hill_force_velocity_normalized

__all__ = ["RayleighVanDerPol", "DCMotor", "MuscleDrive"]


def _float(x, like=None):
    """`jaxbio._validate.as_float`, in ``like``'s dtype when given."""
    return as_float(x, like=like)


class RayleighVanDerPol(Dissipation):
    """Rayleigh–Van der Pol dissipation ``R(q, q̇) = ½ Σᵢ q̇ᵢ² (αᵢ + βᵢ qᵢ²)`` J/s (seed 000).

    The joint torque ``∂R/∂q̇ᵢ = q̇ᵢ (αᵢ + βᵢ qᵢ²)`` is linear in ``q̇`` and quadratic in ``q``.

    - ``alpha``: ``(n,)`` or scalar, N·m·s/rad (N·s/m for prismatic joints), finite. ``α < 0``
      with ``β > 0`` is allowed: it is the Van der Pol case (energy fed in near ``q = 0``,
      removed for ``|q| > √(−α/β)``, giving a limit cycle), where ``R`` is not ≥ 0.
    - ``beta``: ``(n,)`` or scalar, N·m·s/rad³, ≥ 0.
    """

    alpha: Float[Array, "..."]
    beta: Float[Array, "..."]

    def __init__(self, alpha, beta):
        self.alpha = _float(alpha)
        self.beta = _float(beta, self.alpha)
        _check("RayleighVanDerPol", "alpha", self.alpha)
        _check("RayleighVanDerPol", "beta", self.beta, nonnegative=True)

    def __call__(self, q, qd):
        """``R`` ``()`` J/s from ``q`` ``(n,)`` rad/m and ``qd`` ``(n,)`` rad/s, m/s."""
        return 0.5 * jnp.sum(qd**2 * (self.alpha + self.beta * q**2))

    def force(self, q, qd):
        """``∂R/∂q̇ = q̇ (α + β q²)`` ``(n,)`` N·m / N."""
        return qd * (self.alpha + self.beta * q**2)


class DCMotor(eqx.Module):
    """Armature-controlled D.C. motor with an optional gearbox (seed 000's hybrid actuator).

    Electrical equation (seed 000: ``l i̇ + R i + C q̇ = u``):

        L di/dt + R i + k_e N q̇ = V(t)

    and the mechanical side, referred to the joint (seed 000: ``F_robo = i − J q̈ − B q̇`` with the
    torque constant made explicit):

        τ_joint = N k_t i − N² J_m q̈ − N² B_m q̇.

    ``q`` is the joint angle; the rotor turns at ``N q̇``. Fields (scalars or ``(k,)`` for ``k``
    motors, broadcast together):

    - ``inductance``: H (> 0), ``L``.
    - ``resistance``: Ω (> 0), ``R``.
    - ``torque_constant``: N·m/A (> 0), ``k_t``.
    - ``back_emf_constant``: V·s/rad (> 0), ``k_e`` (``= k_t`` in SI for an ideal motor).
    - ``gear_ratio``: dimensionless (> 0), ``N`` = rotor speed / joint speed; default 1.
    - ``rotor_inertia``: kg·m² (≥ 0), ``J_m``; default 0.
    - ``viscous_damping``: N·m·s/rad (≥ 0), ``B_m`` on the rotor; default 0.
    """

    inductance: Float[Array, "..."]
    resistance: Float[Array, "..."]
    torque_constant: Float[Array, "..."]
    back_emf_constant: Float[Array, "..."]
    gear_ratio: Float[Array, "..."]
    rotor_inertia: Float[Array, "..."]
    viscous_damping: Float[Array, "..."]

    def __init__(self, inductance, resistance, torque_constant, back_emf_constant=None,
                 gear_ratio=1.0, rotor_inertia=0.0, viscous_damping=0.0):
        self.inductance = _float(inductance)
        like = self.inductance
        self.resistance = _float(resistance, like)
        self.torque_constant = _float(torque_constant, like)
        self.back_emf_constant = _float(torque_constant if back_emf_constant is None else back_emf_constant, like)
        self.gear_ratio = _float(gear_ratio, like)
        self.rotor_inertia = _float(rotor_inertia, like)
        self.viscous_damping = _float(viscous_damping, like)
        for name in ("inductance", "resistance", "torque_constant", "back_emf_constant", "gear_ratio"):
            _check("DCMotor", name, getattr(self, name), positive=True)
        for name in ("rotor_inertia", "viscous_damping"):
            _check("DCMotor", name, getattr(self, name), nonnegative=True)

    @property
    def reflected_inertia(self):
        """``N² J_m`` kg·m², rotor inertia seen at the joint."""
        return self.gear_ratio**2 * self.rotor_inertia

    @property
    def reflected_damping(self):
        """``N² B_m`` N·m·s/rad, rotor damping seen at the joint."""
        return self.gear_ratio**2 * self.viscous_damping

    def current_rate(self, t, i, qd, voltage: Callable | ArrayLike):
        """``di/dt = (V(t) − R i − k_e N q̇)/L`` A/s.

        - ``t``: ``()`` s.
        - ``i``: ``(...)`` A, armature current.
        - ``qd``: ``(...)`` rad/s, joint velocity.
        - ``voltage``: V, an array ``(...)`` or a JAX-traceable callable ``V(t)``.
        """
        v = voltage(t) if callable(voltage) else voltage
        return (jnp.asarray(v) - self.resistance * i
                - self.back_emf_constant * self.gear_ratio * qd) / self.inductance

    def torque(self, i):
        """Electromagnetic torque at the joint ``N k_t i`` ``(...)`` N·m from the current ``i`` A."""
        return self.gear_ratio * self.torque_constant * i

    def joint_torque(self, i, qd, qdd=0.0):
        """Net torque delivered to the joint ``N k_t i − N² J_m q̈ − N² B_m q̇`` N·m
        (seed 000's ``F_robo``); ``qd`` rad/s, ``qdd`` rad/s²."""
        return self.torque(i) - self.reflected_inertia * qdd - self.reflected_damping * qd

    def steady_state(self, voltage, load_torque):
        """Steady current and joint speed for constant ``voltage`` V and ``load_torque`` N·m.

        Setting ``di/dt = 0`` and ``(N²J_m + J_load) q̈ = N k_t i − N² B_m q̇ − τ_load = 0``:

            q̇ = (N k_t V / R − τ_load) / (N² B_m + N² k_t k_e / R),   i = (V − k_e N q̇) / R.

        Returns ``(current A, joint speed rad/s)``, each shaped like the broadcast inputs.
        """
        v = jnp.asarray(voltage)
        load = jnp.asarray(load_torque)
        n, r, kt, ke = self.gear_ratio, self.resistance, self.torque_constant, self.back_emf_constant
        speed = (n * kt * v / r - load) / (self.reflected_damping + n**2 * kt * ke / r)
        current = (v - ke * n * speed) / r
        return current, speed


class MuscleDrive(Drive):
    """Seed 000's muscular drive, ``F_musc = F_imp(t) × F_Hill(v)`` per muscle, mapped to joints.

    Per muscle ``j`` (``m`` muscles, ``n`` joints):

        force_j = f · F_imp,j(t) · F_Hill,j(v_j) / F⁰_j      (N; the division keeps units of N —
                                                              seed 000 writes the bare product)
        F = moment_arms @ force                                (n,) N·m / N
        v = moment_armsᵀ q̇                                     (m,) shortening velocity, m/s

    with ``F_imp`` = `impulse_rise` (``stimulated = 1``) or `impulse_decay` (``stimulated = 0``),
    ``F_Hill`` = `hill_force_velocity`, and ``f`` the fitness state (shape ``(1,)`` or ``(m,)``,
    broadcast; 1 = fresh). A positive moment arm means the muscle shortens as ``q`` grows
    (virtual work: ``δl_j = −Σᵢ r_ij δqᵢ``) and pulls towards positive ``q``.

    Fields: ``max_isometric_force`` ``(m,)`` N (≥ 0), ``time_constant`` ``(m,)`` s (> 0),
    ``hill_a`` ``(m,)`` N (> 0), ``hill_b`` ``(m,)`` m/s (> 0), ``moment_arms`` ``(n, m)`` m,
    ``stimulated`` ``(m,)`` 0/1 (array leaf; default 1).
    """

    max_isometric_force: Float[Array, " m"]
    time_constant: Float[Array, " m"]
    hill_a: Float[Array, " m"]
    hill_b: Float[Array, " m"]
    moment_arms: Float[Array, "n m"]
    stimulated: Float[Array, " m"]

    def __init__(self, max_isometric_force, time_constant, hill_a, hill_b, moment_arms, stimulated=1.0):
        self.moment_arms = _float(moment_arms)
        like = self.moment_arms
        if self.moment_arms.ndim != 2:
            raise ValueError(f"MuscleDrive: moment_arms must be (n_joints, n_muscles), got shape {self.moment_arms.shape}")
        m = self.moment_arms.shape[1]
        names = ("max_isometric_force", "time_constant", "hill_a", "hill_b", "stimulated")
        for name, value in zip(names, (max_isometric_force, time_constant, hill_a, hill_b, stimulated)):
            x = _float(value, like)
            if x.ndim > 1 or (x.ndim == 1 and x.shape[0] not in (1, m)):
                raise ValueError(f"MuscleDrive: {name} must be a scalar or ({m},), got shape {x.shape}")
            setattr(self, name, jnp.broadcast_to(x, (m,)))
        _check("MuscleDrive", "moment_arms", self.moment_arms)
        _check("MuscleDrive", "max_isometric_force", self.max_isometric_force, nonnegative=True)
        _check("MuscleDrive", "time_constant", self.time_constant, positive=True)
        _check("MuscleDrive", "hill_a", self.hill_a, positive=True)
        _check("MuscleDrive", "hill_b", self.hill_b, positive=True)
        s = _concrete(self.stimulated)
        if s is not None and not np.all((s == 0) | (s == 1)):
            raise ValueError(f"MuscleDrive: stimulated must be 0 or 1, got {s.tolist()}")

    def muscle_forces(self, t, q, qd, f) -> Float[Array, " m"]:
        """Muscle tensions ``(m,)`` N at time ``t`` s, joint state ``q``, ``qd`` ``(n,)``,
        fitness ``f``."""
        f0 = self.max_isometric_force
        imp = jnp.where(self.stimulated > 0.5, impulse_rise(t, f0, self.time_constant),
                        impulse_decay(t, f0, self.time_constant))
        v = self.moment_arms.T @ qd
        # F_Hill / F⁰ = hill_force_velocity_normalized(v / v_max, a/F⁰) with v_max = F⁰b/a
        # (guarded so a zero-force muscle gives 0, not NaN)
        k = self.hill_a / jnp.where(f0 > 0, f0, 1.0)
        hill = hill_force_velocity_normalized(v * (k / self.hill_b), k)
        return jnp.asarray(f) * imp * hill

    def __call__(self, t, q, qd, f, a=None):
        """Generalised forces ``(n,)`` N·m / N (no states: ``a`` is ignored)."""
        return self.moment_arms @ self.muscle_forces(t, q, qd, f)
