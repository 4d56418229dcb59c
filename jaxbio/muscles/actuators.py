"""Joint-level actuators of Ivancevic 2009 that plug into `jaxbio.hamiltonian`.

- `RayleighVanDerPol`: the synovial-joint dissipation ``R = ½ Σ q̇ᵢ² (αᵢ + βᵢ qᵢ²)``.
- `DCMotor`: the hybrid rotational actuator's D.C. motor (``l i̇ + R i + C q̇ = u``), a
  `jaxbio.hamiltonian.Drive` whose states are the armature currents and whose rotor inertia is
  added to the mass matrix.
- `MuscleDrive`: the impulse × Hill muscular drive ``F_musc = F_imp × F_Hill`` mapped to joints by
  a constant moment-arm matrix.

Ivancevic 2009 (§4.6) writes one generalised force per coordinate,
``F_i = F_i^musc + F_i^robo − ∂R/∂q̇_i + B_ij dW^j``: build it as
``HamiltonianSystem(tree, drive=SumDrive(MuscleDrive(...), DCMotor(...)),
dissipation=RayleighVanDerPol(α, β))`` and integrate with `jaxbio.simulate_sde` (``noise`` = ``B``)
or, without the stochastic torques, `jaxbio.simulate`.
"""

from __future__ import annotations

from typing import ClassVar
from collections.abc import Callable

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
    """Rayleigh–Van der Pol dissipation ``R(q, q̇) = ½ Σᵢ q̇ᵢ² (αᵢ + βᵢ qᵢ²)`` J/s (Ivancevic 2009).

    The joint torque ``∂R/∂q̇ᵢ = q̇ᵢ (αᵢ + βᵢ qᵢ²)`` is linear in ``q̇`` and quadratic in ``q``.

    - ``alpha``: ``(n,)`` or scalar, N·m·s/rad (N·s/m for prismatic joints), finite. ``α < 0``
      with ``β > 0`` is allowed: it is the Van der Pol case (energy fed in near ``q = 0``,
      removed for ``|q| > √(−α/β)``, giving a limit cycle), where ``R`` is not ≥ 0.
    - ``beta``: ``(n,)`` or scalar, N·m·s/rad³, ≥ 0.
    """

    alpha: Float[Array, ...]
    beta: Float[Array, ...]
    per_coordinate: ClassVar[tuple[str, ...]] = ("alpha", "beta")

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


class DCMotor(Drive):
    """Armature-controlled D.C. motors with gearboxes on joints (the hybrid rotational actuator of
    Ivancevic 2009, §4.6), a `Drive` whose states are the armature currents.

    Ivancevic 2009 writes, per motor ``k`` on coordinate ``y_k``,

        F_k^robo = i_k − J_k ÿ_k − B_k ẏ_k,        l_k i̇_k + R_k i_k + C_k ẏ_k = u_k,

    which, with the torque constant and a gearbox made explicit (the rotor turns at ``N q̇``), is

        L di/dt = V(t) − R i − k_e N q̇                                    (electrical, A/s · H)
        τ = N k_t i − N² B_m q̇ − N² J_m q̈                                 (at the joint, N·m)

    As a drive, ``__call__`` returns ``N k_t i − N² B_m q̇`` on the driven coordinates and the
    inertial term ``−N² J_m q̈`` enters the mass matrix: `added_inertia` is the reflected
    inertia ``N² J_m``, so `jaxbio.hamiltonian.HamiltonianSystem` uses ``M(q) + diag(N² J_m)``
    (momenta ``p = (M + N² J_m) q̇``, energy ``½ q̇ᵀ(M + N² J_m)q̇ + V``, i.e. the rotor's kinetic
    energy included). The motor ignores the fitness (machines do not tire).

    Fields (scalars or ``(k,)`` for ``k`` motors, broadcast together):

    - ``inductance``: H (> 0), ``L`` (Ivancevic's ``l``).
    - ``resistance``: Ω (> 0), ``R``.
    - ``torque_constant``: N·m/A (> 0), ``k_t``.
    - ``back_emf_constant``: V·s/rad (> 0), ``k_e`` (Ivancevic's ``C``; default ``k_t``, as for an
      ideal motor in SI units).
    - ``gear_ratio``: dimensionless (> 0), ``N`` = rotor speed / joint speed; default 1.
    - ``rotor_inertia``: kg·m² (≥ 0), ``J_m``; default 0.
    - ``viscous_damping``: N·m·s/rad (≥ 0), ``B_m`` on the rotor; default 0.
    - ``voltage``: V, the command ``u``: a constant (scalar or ``(k,)``) or a JAX-traceable
      ``V(t) -> ()`` or ``(k,)``; default 0 (a short-circuited motor, which brakes).
    - ``coordinates``: static tuple of the ``k`` velocity coordinates the motors drive (motor
      ``j`` on ``coordinates[j]``; a prismatic coordinate makes it a linear motor, N and m);
      default ``(0, …, k−1)``, which must then be all the system's coordinates.

    State ``a = i`` ``(k,)`` A, zero at rest by default.
    """

    inductance: Float[Array, ...]
    resistance: Float[Array, ...]
    torque_constant: Float[Array, ...]
    back_emf_constant: Float[Array, ...]
    gear_ratio: Float[Array, ...]
    rotor_inertia: Float[Array, ...]
    viscous_damping: Float[Array, ...]
    voltage: Callable | Float[Array, ...]
    coordinates: tuple[int, ...] | None = eqx.field(static=True)

    def __init__(
        self,
        inductance,
        resistance,
        torque_constant,
        back_emf_constant=None,
        gear_ratio=1.0,
        rotor_inertia=0.0,
        viscous_damping=0.0,
        voltage=0.0,
        coordinates=None,
    ):
        self.inductance = _float(inductance)
        like = self.inductance
        self.resistance = _float(resistance, like)
        self.torque_constant = _float(torque_constant, like)
        self.back_emf_constant = _float(torque_constant if back_emf_constant is None else back_emf_constant, like)
        self.gear_ratio = _float(gear_ratio, like)
        self.rotor_inertia = _float(rotor_inertia, like)
        self.viscous_damping = _float(viscous_damping, like)
        names = (
            "inductance",
            "resistance",
            "torque_constant",
            "back_emf_constant",
            "gear_ratio",
            "rotor_inertia",
            "viscous_damping",
        )
        for name in names[:5]:
            _check("DCMotor", name, getattr(self, name), positive=True)
        for name in names[5:]:
            _check("DCMotor", name, getattr(self, name), nonnegative=True)
        try:
            shape = jnp.broadcast_shapes(*(jnp.shape(getattr(self, name)) for name in names))
        except ValueError:
            raise ValueError(
                "DCMotor: the parameters must be scalars or (k,) for k motors, got shapes "
                + ", ".join(f"{name} {jnp.shape(getattr(self, name))}" for name in names)
            ) from None
        if len(shape) > 1:
            raise ValueError(f"DCMotor: the parameters must be scalars or (k,) for k motors, got shape {shape}")
        if coordinates is not None:
            if isinstance(coordinates, (int, np.integer)):
                coordinates = (coordinates,)
            try:
                coordinates = tuple(int(c) for c in coordinates)
            except (TypeError, ValueError):
                raise ValueError(
                    f"DCMotor: coordinates must be a tuple of coordinate indices, got {coordinates!r}"
                ) from None
            if not coordinates or min(coordinates) < 0 or len(set(coordinates)) != len(coordinates):
                raise ValueError(f"DCMotor: coordinates must be distinct indices ≥ 0, got {coordinates}")
            if shape not in ((), (len(coordinates),)):
                raise ValueError(
                    f"DCMotor: coordinates names {len(coordinates)} coordinates, the parameters have shape {shape}"
                )
        self.coordinates = coordinates
        k = self.state_size
        if callable(voltage):
            self.voltage = voltage
        else:
            self.voltage = _float(voltage, like)
            _check("DCMotor", "voltage", self.voltage)
            if self.voltage.shape not in ((), (k,)):
                raise ValueError(
                    f"DCMotor: voltage has shape {self.voltage.shape}, expected ({k},) (one per motor) or a scalar"
                )

    # ---- the Drive protocol --------------------------------------------------------------

    def _shape(self) -> tuple[int, ...]:
        return jnp.broadcast_shapes(
            *(
                jnp.shape(x)
                for x in (
                    self.inductance,
                    self.resistance,
                    self.torque_constant,
                    self.back_emf_constant,
                    self.gear_ratio,
                    self.rotor_inertia,
                    self.viscous_damping,
                )
            )
        )

    @property
    def state_size(self) -> int:
        """``k``, the number of motors (one current each); static."""
        if self.coordinates is not None:
            return len(self.coordinates)
        shape = self._shape()
        return shape[0] if shape else 1

    def _index(self) -> np.ndarray:
        """``(k,)`` the driven coordinates (numpy, static)."""
        return np.asarray(self.coordinates if self.coordinates is not None else range(self.state_size), np.int32)

    def check_size(self, n):
        k = self.state_size
        if self.coordinates is None and k != n:
            raise ValueError(
                f"DCMotor: coordinates not given, so the {k} motor(s) must drive all {n} "
                f"coordinates; name the driven ones with coordinates=(…)"
            )
        if self.coordinates is not None and max(self.coordinates) >= n:
            raise ValueError(f"DCMotor: coordinates {self.coordinates} out of range for {n} coordinates")

    def _voltage(self, t, dtype):
        v = jnp.asarray(self.voltage(t) if callable(self.voltage) else self.voltage, dtype)
        if v.shape not in ((), (self.state_size,)):
            raise ValueError(
                f"DCMotor: voltage(t) returns shape {v.shape}, expected ({self.state_size},) "
                "(one per motor) or a scalar"
            )
        return jnp.broadcast_to(v, (self.state_size,))

    def __call__(self, t, q, qd, f, a=None):
        """Generalised forces ``(n,)`` N·m / N: ``N k_t i − N² B_m q̇`` on the driven coordinates,
        0 elsewhere; ``a`` ``(k,)`` A, the currents (required). ``f`` is ignored."""
        if a is None:
            raise ValueError("DCMotor has states (currents): call it as drive(t, q, qd, f, a)")
        idx = self._index()
        tau = self.torque(a) - self.reflected_damping * qd[idx]
        return jnp.zeros_like(qd).at[idx].add(jnp.broadcast_to(tau, idx.shape).astype(qd.dtype))

    def state_rate(self, t, q, qd, f, a):
        """``di/dt`` ``(k,)`` A/s (the electrical equation, `current_rate`)."""
        return self.current_rate(t, a, qd[self._index()], self._voltage(t, a.dtype))

    def added_inertia(self, n, dtype=None):
        """``(n,)`` kg·m²: the reflected rotor inertia ``N² J_m`` on the driven coordinates."""
        idx = self._index()
        j = jnp.broadcast_to(self.reflected_inertia, idx.shape)
        return jnp.zeros(n, dtype if dtype is not None else j.dtype).at[idx].add(j)

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
        return (jnp.asarray(v) - self.resistance * i - self.back_emf_constant * self.gear_ratio * qd) / self.inductance

    def torque(self, i):
        """Electromagnetic torque at the joint ``N k_t i`` ``(...)`` N·m from the current ``i`` A."""
        return self.gear_ratio * self.torque_constant * i

    def joint_torque(self, i, qd, qdd=0.0):
        """Net torque delivered to the joint ``N k_t i − N² J_m q̈ − N² B_m q̇`` N·m
        (Ivancevic's (2009) ``F_robo``); ``qd`` rad/s, ``qdd`` rad/s²."""
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
    """Ivancevic's (2009) muscular drive, ``F_musc = F_imp(t) × F_Hill(v)`` per muscle, mapped to joints.

    Per muscle ``j`` (``m`` muscles, ``n`` joints):

        force_j = f · F_imp,j(t) · F_Hill,j(v_j) / F⁰_j      (N; the division keeps units of N —
                                                              Ivancevic 2009 writes the bare product)
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
            raise ValueError(
                f"MuscleDrive: moment_arms must be (n_joints, n_muscles), got shape {self.moment_arms.shape}"
            )
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
        imp = jnp.where(
            self.stimulated > 0.5, impulse_rise(t, f0, self.time_constant), impulse_decay(t, f0, self.time_constant)
        )
        v = self.moment_arms.T @ qd
        # F_Hill / F⁰ = hill_force_velocity_normalized(v / v_max, a/F⁰) with v_max = F⁰b/a
        # (guarded so a zero-force muscle gives 0, not NaN)
        k = self.hill_a / jnp.where(f0 > 0, f0, 1.0)
        hill = hill_force_velocity_normalized(v * (k / self.hill_b), k)
        return jnp.asarray(f) * imp * hill

    def __call__(self, t, q, qd, f, a=None):
        """Generalised forces ``(n,)`` N·m / N (no states: ``a`` is ignored)."""
        return self.moment_arms @ self.muscle_forces(t, q, qd, f)
