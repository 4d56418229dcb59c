"""OpenSim's ``Thelen2003Muscle``, with OpenSim's curves, parameters and equilibrium.

`Thelen2003Muscle` holds ``m`` muscles as array leaves (jit/vmap/grad over the parameters) and
reproduces OpenSim 4.x (``OpenSim/Actuators/Thelen2003Muscle.cpp``, read, not copied):

- active force–length ``f_L(l̃) = exp(−(l̃ − 1)²/γ)``, ``γ = KshapeActive``;
- passive force–length ``f_PE(l̃) = (exp(k_PE (l̃ − 1)/ε₀ᴹ) − 1)/(exp(k_PE) − 1)`` for ``l̃ > 1``,
  else 0 (``k_PE = KshapePassive``, ``ε₀ᴹ = FmaxMuscleStrain``);
- tendon force–length: exponential toe up to ``ε_toe = 99 ε₀ e³/(166 e³ − 67)`` (force
  ``F_toe = 0.33``, ``k_toe = 3``), then linear with ``k_lin = 0.67/(ε₀ − ε_toe)``
  (``ε₀ = FmaxTendonStrain``), 0 below slack; OpenSim's exact ``ε_toe``, not the paper's 0.609 ε₀;
- force–velocity: Thelen 2003 eqs. 6–7, written as the normalised fiber velocity for a given
  multiplier (``calcdlceN``): ``ṽ = (0.25 + 0.75a)(f_V − 1)/b``, ``b = 1 + f_V/A_f`` while
  shortening, ``b = (2 + 2/A_f)(F_len − f_V)/(F_len − 1)`` while lengthening, extended linearly
  below ``f_V = 0`` and above ``f_V = fv_linear_extrap_threshold · F_len``. OpenSim inverts it by
  Newton's method (``calcfvInv``, tolerance 10⁻⁶ in ``ṽ``, clipped at 0); each branch is a
  Möbius map, so here the inverse is in closed form. ``f_V`` depends on the activation through
  ``0.25 + 0.75a`` (maximal shortening velocity grows with activation), not on ``f_L``;
- pennation: ``MuscleFixedWidthPennationModel`` (constant fiber height ``l_opt sin α₀``, angle
  capped at ``maximum_pennation_angle``);
- activation dynamics: ``MuscleFirstOrderActivationDynamicModel``.

References
----------
- D. G. Thelen (2003), Adjustment of muscle mechanics model parameters to simulate dynamic
  contractions in older adults, J. Biomech. Eng. 125, 70–77.
- OpenSim Thelen2003Muscle documentation (opensim-core ``Thelen2003Muscle.h``).
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio.muscles._inputs import poisoned
from jaxbio.muscles._opensim_common import (
    MuscleEquilibrium,
    OpenSimMuscle,
    as_rows,
    broadcast_inputs,
    check_positive,
    clamp_activation,
    fiber_equilibrium,
    flag_values,
    from_opensim_properties,
    require,
    values_of,
)

__all__ = ["Thelen2003Muscle"]

_K_TOE = 3.0
_F_TOE = 0.33


class Thelen2003Muscle(OpenSimMuscle):
    """``m`` OpenSim ``Thelen2003Muscle`` s (fields ``(m,)``, broadcast at construction).

    Fields, with OpenSim's XML property name and default:

    - ``max_isometric_force`` (``max_isometric_force``, 1000): N, ``F⁰``.
    - ``optimal_fiber_length`` (``optimal_fiber_length``, 0.1): m, ``l_opt``.
    - ``tendon_slack_length`` (``tendon_slack_length``, 0.2): m, ``l_ts``.
    - ``pennation_angle_at_optimal`` (``pennation_angle_at_optimal``, 0): rad, ``α₀ ∈ [0, π/2)``.
    - ``max_contraction_velocity`` (``max_contraction_velocity``, 10): optimal fiber lengths/s.
    - ``fmax_tendon_strain`` (``FmaxTendonStrain``, 0.04): tendon strain at ``F⁰``.
    - ``fmax_muscle_strain`` (``FmaxMuscleStrain``, 0.6): passive fiber strain at ``F⁰``.
    - ``kshape_active`` (``KshapeActive``, 0.45): ``γ`` of the active force–length Gaussian.
    - ``kshape_passive`` (``KshapePassive``, 5): ``k_PE`` of the passive exponential.
    - ``af`` (``Af``, 0.25): force–velocity shape factor ``A_f``.
    - ``flen`` (``Flen``, 1.4): maximal lengthening force ``F_len`` (> 1).
    - ``fv_linear_extrap_threshold`` (``fv_linear_extrap_threshold``, 0.95): fraction of
      ``F_len`` above which ``f_V`` is extended linearly (> 1/F_len).
    - ``maximum_pennation_angle`` (``maximum_pennation_angle``, acos 0.1): rad.
    - ``activation_time_constant`` (0.015), ``deactivation_time_constant`` (0.050): s.
    - ``minimum_activation`` (``minimum_activation``, 0.01): in [0, 1). OpenSim 4.x refuses
      < 0.01; OpenSim 3.x files carry 0 (arm26's), which OpenSim 3.x accepted and which is
      accepted here so that such files import as they are (static optimisation does not use it;
      a muscle's activation dynamics and equilibrium clamp at it).

    `Thelen2003Muscle.from_opensim` takes the XML names. Its tendon is always elastic: OpenSim
    refuses ``ignore_tendon_compliance`` (and ``ignore_activation_dynamics``) for this muscle
    ("flag is not currently implemented"), and so does `from_opensim`. Static optimisation uses
    the rigid-tendon force of `static_optimization_forces`.

    Example::

        >>> from jaxbio.muscles.thelen import Thelen2003Muscle
        >>> m = Thelen2003Muscle(max_isometric_force=[1000.0, 500.0], optimal_fiber_length=0.1,
        ...                      tendon_slack_length=0.2, pennation_angle_at_optimal=[0.0, 0.3])
        >>> m.equilibrium(1.0, [0.3, 0.31]).tendon_force.shape
        (2,)
    """

    fmax_tendon_strain: Float[Array, " m"]
    fmax_muscle_strain: Float[Array, " m"]
    kshape_active: Float[Array, " m"]
    kshape_passive: Float[Array, " m"]
    af: Float[Array, " m"]
    flen: Float[Array, " m"]
    fv_linear_extrap_threshold: Float[Array, " m"]

    #: OpenSim XML property name → field.
    OPENSIM_PROPERTIES: ClassVar[dict[str, str]] = {
        **OpenSimMuscle.OPENSIM_PROPERTIES,
        "FmaxTendonStrain": "fmax_tendon_strain",
        "FmaxMuscleStrain": "fmax_muscle_strain",
        "KshapeActive": "kshape_active",
        "KshapePassive": "kshape_passive",
        "Af": "af",
        "Flen": "flen",
        "fv_linear_extrap_threshold": "fv_linear_extrap_threshold",
    }

    def __init__(
        self,
        max_isometric_force=1000.0,
        optimal_fiber_length=0.1,
        tendon_slack_length=0.2,
        pennation_angle_at_optimal=0.0,
        max_contraction_velocity=10.0,
        fmax_tendon_strain=0.04,
        fmax_muscle_strain=0.6,
        kshape_active=0.45,
        kshape_passive=5.0,
        af=0.25,
        flen=1.4,
        fv_linear_extrap_threshold=0.95,
        maximum_pennation_angle=math.acos(0.1),
        activation_time_constant=0.015,
        deactivation_time_constant=0.050,
        minimum_activation=0.01,
    ):
        own = "Thelen2003Muscle"
        fields = dict(locals())
        del fields["self"], fields["own"]
        self._set_parameters(own, fields)
        check_positive(
            own,
            fmax_tendon_strain=self.fmax_tendon_strain,
            fmax_muscle_strain=self.fmax_muscle_strain,
            kshape_active=self.kshape_active,
            kshape_passive=self.kshape_passive,
            af=self.af,
        )
        require(self.flen > 1, f"{own}: flen (Flen) must be > 1, got {values_of(self.flen)}")
        require(
            self.fv_linear_extrap_threshold > 1 / self.flen,
            f"{own}: fv_linear_extrap_threshold must be > 1/flen, got {values_of(self.fv_linear_extrap_threshold)}",
        )
        require(
            (self.minimum_activation >= 0) & (self.minimum_activation < 1),
            f"{own}: minimum_activation must be in [0, 1), got {values_of(self.minimum_activation)}",
        )

    @classmethod
    def from_opensim(cls, properties) -> Thelen2003Muscle:
        """From OpenSim XML property names (`OPENSIM_PROPERTIES`): one mapping, or a sequence of
        mappings (one muscle each; a property missing from a muscle takes OpenSim's default;
        properties without effect on the forces, `NON_MECHANICAL_PROPERTIES`, are skipped).
        ``NotImplementedError`` for ``ignore_tendon_compliance`` or ``ignore_activation_dynamics``
        true, which OpenSim refuses for this muscle."""
        rows = as_rows(properties)
        for flag in ("ignore_tendon_compliance", "ignore_activation_dynamics"):
            if any(flag_values(rows, flag)):
                raise NotImplementedError(
                    f'Thelen2003Muscle: {flag} = true is refused by OpenSim ("flag is not currently implemented")'
                )
        rows = [{k: v for k, v in row.items() if k != "ignore_tendon_compliance"} for row in rows]
        return from_opensim_properties(cls, rows, cls.OPENSIM_PROPERTIES)

    @property
    def minimum_fiber_length(self) -> Float[Array, " m"]:
        """m, the shortest fiber (``getMinimumFiberLength``): the pennation model's,
        ``l_opt sin α₀ / sin α_max`` (0 for a parallel-fibered muscle)."""
        return self.pennation.minimum_fiber_length

    # -- curves (normalised) --

    def active_force_length_multiplier(
        self, normalized_fiber_length: Float[ArrayLike, "... m"]
    ) -> Float[Array, "... m"]:
        """``f_L(l̃) = exp(−(l̃ − 1)²/γ)`` (``calcfal``); ``l̃ = l_M/l_opt`` ``(..., m)``."""
        x = jnp.asarray(normalized_fiber_length) - 1.0
        return jnp.exp(-x * x / self.kshape_active)

    def passive_force_length_multiplier(
        self, normalized_fiber_length: Float[ArrayLike, "... m"]
    ) -> Float[Array, "... m"]:
        """``f_PE(l̃)`` (``calcfpe``): ``(exp(k_PE (l̃ − 1)/ε₀ᴹ) − 1)/(exp(k_PE) − 1)`` above
        ``l̃ = 1``, 0 below."""
        x = jnp.asarray(normalized_fiber_length) - 1.0
        stretched = x > 0
        x = jnp.where(stretched, x, 0.0)
        kpe = self.kshape_passive
        return jnp.where(stretched, jnp.expm1(kpe * x / self.fmax_muscle_strain) / jnp.expm1(kpe), 0.0)

    def _toe(self):
        e3 = math.exp(_K_TOE)
        e_toe = 99.0 * self.fmax_tendon_strain * e3 / (166.0 * e3 - 67.0)
        k_lin = 0.67 / (self.fmax_tendon_strain - e_toe)
        return e_toe, k_lin

    def tendon_force_length_multiplier(
        self, normalized_tendon_length: Float[ArrayLike, "... m"]
    ) -> Float[Array, "... m"]:
        """``f_T(l̃_T)`` (``calcfse``) of the tendon strain ``ε = l̃_T − 1``: 0 for ``ε ≤ 0``,
        ``F_toe (exp(k_toe ε/ε_toe) − 1)/(exp(k_toe) − 1)`` up to ``ε_toe``, then
        ``F_toe + k_lin (ε − ε_toe)``."""
        x = jnp.asarray(normalized_tendon_length) - 1.0
        e_toe, k_lin = self._toe()
        linear = x > e_toe
        toe = (x > 0) & ~linear
        xt = jnp.where(toe, x, 0.0)
        f_toe = _F_TOE / math.expm1(_K_TOE) * jnp.expm1(_K_TOE * xt / e_toe)
        return jnp.where(linear, k_lin * (x - e_toe) + _F_TOE, jnp.where(toe, f_toe, 0.0))

    def _fv_constants(self, activation):
        """``k = 0.25 + 0.75a``, ``c = 2 + 2/A_f``, the extrapolation threshold ``f_t``, its
        velocity ``ṽ_t`` and slope ``dṽ/df_V`` there."""
        k = 0.25 + 0.75 * jnp.asarray(activation)
        af, flen = self.af, self.flen
        c = 2.0 + 2.0 / af
        f_t = self.fv_linear_extrap_threshold * flen
        b_t = c * (flen - f_t) / (flen - 1.0)
        v_t = k * (f_t - 1.0) / b_t
        slope_t = k / b_t + k * (f_t - 1.0) * c / ((flen - 1.0) * b_t * b_t)
        return k, c, f_t, v_t, slope_t

    def normalized_fiber_velocity(
        self, force_velocity_multiplier: Float[ArrayLike, "... m"], activation: Float[ArrayLike, "... m"]
    ) -> Float[Array, "... m"]:
        """Thelen 2003 eqs. 6–7 as OpenSim writes them (``calcdlceN``): the normalised fiber
        velocity ``ṽ = l̇_M/(v_max l_opt)`` (lengthening positive) at which the fiber develops
        ``f_V`` ``(..., m)`` at activation ``a`` ``(..., m)``; linear below ``f_V = 0`` and above
        the threshold ``fv_linear_extrap_threshold · F_len``."""
        f = jnp.asarray(force_velocity_multiplier)
        k, c, f_t, v_t, slope_t = self._fv_constants(activation)
        af, flen = self.af, self.flen
        low = f <= 0.0
        high = f >= f_t
        con = ~low & (f <= 1.0)
        ecc = ~low & ~high & ~con
        fc = jnp.where(con, f, 1.0)
        fe = jnp.where(ecc, f, 0.5 * (1.0 + f_t))
        v_con = k * (fc - 1.0) / (1.0 + fc / af)
        v_ecc = k * (fe - 1.0) * (flen - 1.0) / (c * (flen - fe))
        v_low = -k + k * (1.0 + 1.0 / af) * f
        v_high = v_t + slope_t * (f - f_t)
        return jnp.where(low, v_low, jnp.where(con, v_con, jnp.where(ecc, v_ecc, v_high)))

    def force_velocity_multiplier(
        self, normalized_fiber_velocity: Float[ArrayLike, "... m"], activation: Float[ArrayLike, "... m"]
    ) -> Float[Array, "... m"]:
        """``f_V(ṽ; a)`` ``(..., m)``, the inverse of `normalized_fiber_velocity` (OpenSim's
        ``calcfvInv``, here in closed form): ``(k + ṽ)/(k − ṽ/A_f)`` while shortening
        (``k = 0.25 + 0.75a``; 0 at and beyond ``ṽ = −k``, as OpenSim clips at 0),
        ``(ṽ c F_len + k(F_len − 1))/(ṽ c + k(F_len − 1))`` while lengthening
        (``c = 2 + 2/A_f``), linear beyond the threshold.

        - ``normalized_fiber_velocity``: ``l̇_M/(v_max l_opt)``, lengthening positive.
        - ``activation``: in [0, 1] (OpenSim clamps it to ``[minimum_activation, 1]`` first).
        """
        v = jnp.asarray(normalized_fiber_velocity)
        k, c, f_t, v_t, slope_t = self._fv_constants(activation)
        af, flen = self.af, self.flen
        con = v <= 0.0
        high = v >= v_t
        vc = jnp.where(con, jnp.maximum(v, -k), 0.0)
        ve = jnp.where(con | high, 0.5 * v_t, v)
        f_con = (k + vc) / (k - vc / af)
        g = k * (flen - 1.0)
        f_ecc = (ve * c * flen + g) / (ve * c + g)
        f_high = f_t + (jnp.where(high, v, v_t) - v_t) / slope_t
        return jnp.where(con, f_con, jnp.where(high, f_high, f_ecc))

    # -- the pieces the shared equilibrium iteration calls (per muscle) --

    def _multipliers_and_slopes(self, lce_n, tl_n):
        """``(f_L, f_L', f_PE, f_PE', f_T, f_T')`` (``calcDfalDlceN``, ``calcDfpeDlceN``,
        ``calcDfseDtlN``)."""
        fal = self.active_force_length_multiplier(lce_n)
        dfal = -2.0 * (lce_n - 1.0) / self.kshape_active * fal
        kpe, e0 = self.kshape_passive, self.fmax_muscle_strain
        stretched = lce_n > 1.0
        x = jnp.where(stretched, lce_n - 1.0, 0.0)
        fpe = jnp.where(stretched, jnp.expm1(kpe * x / e0) / jnp.expm1(kpe), 0.0)
        dfpe = jnp.where(stretched, kpe / e0 * jnp.exp(kpe * x / e0) / jnp.expm1(kpe), 0.0)
        fse = self.tendon_force_length_multiplier(tl_n)
        e_toe, k_lin = self._toe()
        t = tl_n - 1.0
        linear = t > e_toe
        toe = (t > 0) & ~linear
        tt = jnp.where(toe, t, 0.0)
        dfse = jnp.where(
            linear,
            k_lin,
            jnp.where(toe, _F_TOE / math.expm1(_K_TOE) * _K_TOE / e_toe * jnp.exp(_K_TOE * tt / e_toe), 0.0),
        )
        return fal, dfal, fpe, dfpe, fse, dfse

    def _fiber_force_normalized(self, activation, fal, fv, fpe, normalized_fiber_velocity):
        return activation * fal * fv + fpe

    def _force_velocity_of(self, activation, normalized_fiber_velocity):
        return self.force_velocity_multiplier(normalized_fiber_velocity, activation)

    # -- muscle quantities --

    def equilibrium(
        self,
        activation: Float[ArrayLike, " m"],
        musculotendon_length: Float[ArrayLike, " m"],
        musculotendon_velocity: Float[ArrayLike, " m"] = 0.0,
    ) -> MuscleEquilibrium:
        """The state OpenSim's ``equilibrateMuscles`` gives (``computeInitialFiberEquilibrium``).

        - ``activation``: ``(m,)`` in [0, 1], clamped up to ``minimum_activation``. Out of [0, 1],
          NaN/inf, a negative length: ``ValueError`` naming the argument when concrete, NaN under
          jit (`jaxbio.muscles._inputs`; OpenSim would clamp 1.5 to 1).
        - ``musculotendon_length``: ``(m,)`` m; ``musculotendon_velocity``: ``(m,)`` m/s,
          lengthening positive.

        The fiber length is found by OpenSim's own iteration (see
        `jaxbio.muscles._opensim_common.fiber_equilibrium`): Thelen's ``initMuscleState`` shares the
        path's lengthening speed between fiber and tendon by their stiffnesses, so the solution
        depends on ``musculotendon_velocity``. The force–velocity multiplier reported is OpenSim's
        ``(f_T/cos α − f_PE)/(a f_L)``, the fiber velocity its ``calcdlceN`` of that (0, with
        ``f_V = 1``, for a fiber at its shortest length and shortening). Returns `MuscleEquilibrium`.
        """
        a, l, v = broadcast_inputs(self, musculotendon_length, musculotendon_velocity, activation)
        return poisoned(_equilibrium(self, a, l, v), a, l, v)

    def _state(self, a, l, lce_state, status) -> MuscleEquilibrium:
        pen = self.pennation
        lce = jnp.maximum(lce_state, pen.minimum_fiber_length)
        phi = pen.angle(lce)
        cos = jnp.cos(phi)
        tl = l - lce * cos
        lce_n = lce / self.optimal_fiber_length
        fal, _, fpe, _, fse, _ = self._multipliers_and_slopes(lce_n, tl / self.tendon_slack_length)
        afal = a * fal
        fv = (fse / cos - fpe) / jnp.where(afal > 0, afal, 1.0)
        dlce_n = self.normalized_fiber_velocity(fv, a)
        clamped = (lce_state <= pen.minimum_fiber_length) & (dlce_n <= 0)
        dlce_n = jnp.where(clamped, 0.0, dlce_n)
        fv = jnp.where(clamped, 1.0, fv)
        return MuscleEquilibrium(
            fiber_length=lce,
            pennation_angle=phi,
            tendon_length=tl,
            tendon_force=fse * self.max_isometric_force,
            active_force_length_multiplier=fal,
            passive_force_length_multiplier=fpe,
            force_velocity_multiplier=fv,
            fiber_velocity=dlce_n * self.max_contraction_velocity * self.optimal_fiber_length,
            status=status,
        )

    def static_optimization_forces(
        self,
        musculotendon_length: Float[ArrayLike, " m"],
        musculotendon_velocity: Float[ArrayLike, " m"] = 0.0,
    ) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
        """``(F̂, P)`` ``(m,)`` N, the forces along the tendon OpenSim's static optimisation
        works with (``use_muscle_physiology``), on a rigid tendon of slack length:

        - ``F̂``: ``calcInextensibleTendonActiveFiberForce(s, 1)``, the active fiber force at
          full activation, ``F⁰ f_L(l̃) f_V(ṽ; a = 1) cos α``, with ``l_M`` from the pennation
          model at ``l_T = l_ts``, ``l̇_M = l̇_MT cos α``; 0 at or below the shortest fiber.
          OpenSim's ``StaticOptimizationTarget`` applies ``a F̂`` (linear in ``a``, although
          Thelen's ``f_V`` depends on ``a``).
        - ``P``: the passive elastic force ``F⁰ f_PE(l̃) cos α`` at the same fiber length. OpenSim's
          static optimisation leaves it out (the actuation is overridden with ``a F̂``); give it
          to `jaxbio.estimation` to include it.

        ``musculotendon_length`` ``(m,)`` m, ``musculotendon_velocity`` ``(m,)`` m/s (lengthening
        positive).
        """
        l, v = broadcast_inputs(self, musculotendon_length, musculotendon_velocity)
        return poisoned(_static_optimization_forces(self, l, v), l, v)


@eqx.filter_jit
def _equilibrium(muscle: Thelen2003Muscle, a, l, v) -> MuscleEquilibrium:
    """`Thelen2003Muscle.equilibrium` on ``(m,)`` inputs (jitted: eager calls reuse the compiled loops)."""
    a = clamp_activation(a, muscle.minimum_activation)
    lce, status = fiber_equilibrium(muscle, "thelen", a, l, v, static=False, max_iterations=20)
    return muscle._state(a, l, lce, status)


@eqx.filter_jit
def _static_optimization_forces(muscle: Thelen2003Muscle, l, v):
    """`Thelen2003Muscle.static_optimization_forces` on ``(m,)`` inputs."""
    pen = muscle.pennation
    lce = pen.fiber_length(l, muscle.tendon_slack_length)
    ok = lce > pen.minimum_fiber_length
    cos = jnp.cos(pen.angle(lce))
    lce_n = lce / muscle.optimal_fiber_length
    dlce_n = v * cos / (muscle.optimal_fiber_length * muscle.max_contraction_velocity)
    fal = muscle.active_force_length_multiplier(lce_n)
    fv = muscle.force_velocity_multiplier(dlce_n, jnp.ones_like(dlce_n))
    active = jnp.where(ok, muscle.max_isometric_force * fal * fv * cos, 0.0)
    passive = muscle.max_isometric_force * muscle.passive_force_length_multiplier(lce_n) * cos
    return active, passive
