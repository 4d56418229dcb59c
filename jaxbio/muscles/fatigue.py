"""Per-muscle fatigue: the three-compartment model with recovery (3CC-r) as a `FitnessLaw`.

Xia & Frey-Law (2008), *A theoretical approach for modeling peripheral muscle fatigue and
recovery*, J. Biomech. 41(14):3046–3052: each muscle's motor units are split into active
``M_A``, fatigued ``M_F`` and resting ``M_R`` fractions (``M_A + M_F + M_R = 1``; the paper
uses % of maximum), and a controller ``C(t)`` moves units between resting and active so that
``M_A`` follows the target load ``TL`` (the required fraction of maximum force, here the
muscle's required activation) where it can:

    C = L_D (TL − M_A)     if M_A < TL and M_R > TL − M_A      (development)
    C = L_D M_R            if M_A < TL and M_R ≤ TL − M_A      (not enough resting units)
    C = L_R (TL − M_A)     if M_A ≥ TL                          (relaxation, C ≤ 0)

    dM_A/dt = C − F M_A
    dM_R/dt = −C + R M_F
    dM_F/dt = F M_A − R M_F

``F`` (1/s) fatigue and ``R`` (1/s) recovery rate, ``L_D``, ``L_R`` (1/s) force development and
relaxation rates (10 in Xia & Frey-Law 2008). The "-r" variant (Looft, Herkert & Frey-Law 2018,
J. Biomech. 77:16–25) multiplies ``R`` by ``r`` during rest; MyoSuite's ``CumulativeFatigue``
(3CC-r after Cheema et al. 2020, CHI) applies ``r R`` whenever ``M_A ≥ TL`` and defaults to the
elbow values of Frey-Law et al. (2012) ``F = 0.00912``, ``R = 0.00094`` (times 0.1, with
``r = 150``); the original user-in-the-box version used ``L_D = L_R = 10``. Here ``r`` is
``rest_recovery`` (default 1: Xia & Frey-Law's model). MyoSuite clips ``C`` so that its explicit
Euler step keeps the fractions in [0, 1]; the continuous equations keep them there by
themselves (each fraction's rate is ≥ 0 when it is 0), so no clipping is done here.

State layout (so that the `HamiltonianSystem` default fitness state, ones, is a fresh muscle
``M_A = M_F = 0``, ``M_R = 1``): ``f`` ``(2m,)`` = ``(M_R, 1 − M_F)`` per muscle, i.e. the
resting fraction and the *residual capacity* ``RC = M_A + M_R = 1 − M_F`` (Frey-Law et al.
2012's measure of the force still available). `ThreeCompartmentFatigue.compartments` returns
``(M_A, M_R, M_F)``.
"""

from __future__ import annotations

from typing import ClassVar
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxbio._validate import as_float, check_values
from jaxbio.hamiltonian import FitnessLaw
from jaxbio.muscles._inputs import fraction

__all__ = ["three_compartment_rates", "steady_state", "ThreeCompartmentFatigue"]


def three_compartment_rates(
    active, resting, fatigued, target_load, fatigue, recovery, development=10.0, relaxation=10.0, rest_recovery=1.0
):
    """Xia & Frey-Law (2008)'s equations: ``(dM_A/dt, dM_R/dt, dM_F/dt)`` 1/s.

    Args (broadcasting arrays, e.g. ``(m,)`` one per muscle, or scalars):
        active, resting, fatigued: ``M_A``, ``M_R``, ``M_F``, fractions of the muscle's motor units.
        target_load: ``TL`` in [0, 1], the required fraction of maximum force (activation).
        fatigue, recovery: ``F``, ``R`` 1/s.
        development, relaxation: ``L_D``, ``L_R`` 1/s.
        rest_recovery: ``r``; the recovery rate is ``r R`` while ``M_A ≥ TL`` (3CC-r as in
            MyoSuite), ``R`` otherwise.

    ``target_load`` out of [0, 1] or not finite: ``ValueError`` naming it when concrete, NaN
    under jit (`jaxbio.muscles._inputs.fraction`).
    """
    target_load = fraction(target_load, "three_compartment_rates: target_load")
    below = active < target_load
    control = jnp.where(
        below, development * jnp.minimum(target_load - active, resting), relaxation * (target_load - active)
    )
    rec = jnp.where(below, recovery, rest_recovery * recovery)
    nan = jnp.where(jnp.isnan(target_load), jnp.nan, 1.0)  # a load out of range (NaN under jit): every rate NaN
    return (
        nan * (control - fatigue * active),
        nan * (-control + rec * fatigued),
        nan * (fatigue * active - rec * fatigued),
    )


def steady_state(target_load, fatigue, recovery, development=10.0):
    """Steady state ``(M_A, M_R, M_F)`` of the equations for a constant ``TL`` > 0.

    Sustainable (development branch): ``M_A = L_D TL / (L_D + F)`` (just below ``TL``),
    ``M_F = F M_A / R``, ``M_R = 1 − M_A − M_F``, valid while ``M_R ≥ TL − M_A``. Otherwise the
    muscle settles on the fatigued branch ``C = L_D M_R``: ``M_A = 1 / (1 + F/L_D + F/R)``,
    ``M_R = F M_A / L_D``, ``M_F = F M_A / R``. Arguments broadcast as in
    `three_compartment_rates`; ``M_A < TL`` at both, so ``r`` plays no part (for ``TL = 0`` the
    first branch gives the rested state ``(0, 1, 0)``).
    """
    target_load = fraction(target_load, "steady_state: target_load")
    tl, f, r, ld = (jnp.asarray(x) for x in (target_load, fatigue, recovery, development))
    active = ld * tl / (ld + f)
    fatigued = f * active / r
    resting = 1.0 - active - fatigued
    sustainable = resting >= tl - active
    active_f = 1.0 / (1.0 + f / ld + f / r)
    return (
        jnp.where(sustainable, active, active_f),
        jnp.where(sustainable, resting, f * active_f / ld),
        jnp.where(sustainable, fatigued, f * active_f / r),
    )


class ThreeCompartmentFatigue(FitnessLaw):
    """Per-muscle 3CC(-r) fatigue (Xia & Frey-Law 2008) as a `jaxbio.hamiltonian.FitnessLaw`.

    Fields:
        n_muscles: ``m`` (static).
        target_load: the target load ``TL(t)`` of each muscle, in [0, 1]: a traceable
            ``t -> (m,)`` (e.g. a `MuscleActuatedDrive`'s ``excitation``, the activation the task
            requires) or a constant ``(m,)`` array or scalar.
        fatigue, recovery: ``F``, ``R`` 1/s (≥ 0), ``(m,)`` or scalars. Default: Frey-Law et
            al. (2012)'s elbow values 0.00912 and 0.00094.
        development, relaxation: ``L_D``, ``L_R`` 1/s (> 0), ``(m,)`` or scalars; default 10.
        rest_recovery: ``r`` (≥ 0), recovery multiplier while ``M_A ≥ TL``; default 1.

    The fitness state is ``(2m,)`` = ``(M_R, 1 − M_F)`` (see the module docstring); its rate
    depends on ``t`` only, not on the mechanics. `value` gives the drives the residual capacity
    ``1 − M_F`` ``(m,)`` per muscle (1 = fresh; a drive that reads ``f[0]``, such as
    `MuscleActuatedDrive`, sees the first muscle's). `compartments` and `active` give
    ``M_A`` for drives that use the active fraction as the delivered activation (as MyoSuite does).
    """

    n_muscles: int = eqx.field(static=True)
    target_load: Callable | Float[Array, " m"]
    fatigue: Float[Array, " m"]
    recovery: Float[Array, " m"]
    development: Float[Array, " m"]
    relaxation: Float[Array, " m"]
    rest_recovery: Float[Array, " m"]
    per_muscle: ClassVar[tuple[str, ...]] = ("fatigue", "recovery", "development", "relaxation", "rest_recovery")

    def __init__(
        self,
        n_muscles,
        target_load,
        fatigue=0.00912,
        recovery=0.00094,
        development=10.0,
        relaxation=10.0,
        rest_recovery=1.0,
    ):
        if isinstance(n_muscles, bool) or int(n_muscles) != n_muscles or n_muscles < 1:
            raise ValueError(f"ThreeCompartmentFatigue: n_muscles must be a positive integer, got {n_muscles}")
        self.n_muscles = int(n_muscles)
        if callable(target_load):
            self.target_load = target_load
        else:
            self.target_load = self._per_muscle(target_load, "target_load")
            check_values(self.target_load, "ThreeCompartmentFatigue: target_load", nonnegative=True, below=1.0 + 1e-12)
        values = dict(
            fatigue=fatigue,
            recovery=recovery,
            development=development,
            relaxation=relaxation,
            rest_recovery=rest_recovery,
        )
        for name in self.per_muscle:
            x = self._per_muscle(values[name], name)
            positive = name in ("development", "relaxation")
            check_values(x, f"ThreeCompartmentFatigue: {name}", positive=positive, nonnegative=not positive)
            setattr(self, name, x)

    def _per_muscle(self, x, name):
        x = as_float(x, f"ThreeCompartmentFatigue: {name}")
        if x.shape not in ((), (self.n_muscles,)):
            raise ValueError(
                f"ThreeCompartmentFatigue: {name} has shape {x.shape}, expected ({self.n_muscles},) or a scalar"
            )
        return x

    @property
    def size(self) -> int:
        return 2 * self.n_muscles

    def load(self, t) -> Float[Array, " m"]:
        """``TL(t)`` ``(m,)`` in [0, 1]: a callable's value out of [0, 1] (or NaN/inf) is a
        ``ValueError`` naming ``target_load`` when concrete and NaN under jit
        (`jaxbio.muscles._inputs.fraction`), not clipped into a plausible load. (The clip that
        follows only rounds the `jaxbio.muscles._inputs.FRACTION_SLACK` band.)"""
        tl = self.target_load(t) if callable(self.target_load) else self.target_load
        tl = jnp.asarray(fraction(tl, "ThreeCompartmentFatigue: target_load"))
        if tl.shape not in ((), (self.n_muscles,)):
            raise ValueError(
                f"ThreeCompartmentFatigue: target_load returned shape {tl.shape}, expected "
                f"({self.n_muscles},) or a scalar"
            )
        return jnp.clip(jnp.broadcast_to(tl, (self.n_muscles,)), 0.0, 1.0)

    def compartments(self, f):
        """``(M_A, M_R, M_F)``, each ``(m,)``, from the state ``f`` ``(2m,)``."""
        resting, capacity = f[: self.n_muscles], f[self.n_muscles :]
        return capacity - resting, resting, 1.0 - capacity

    @staticmethod
    def state(active, resting, fatigued):
        """The state ``f`` ``(2m,)`` of given compartments (each ``(m,)``; they should sum to 1)."""
        return jnp.concatenate([jnp.asarray(resting), 1.0 - jnp.asarray(fatigued)])

    def active(self, f) -> Float[Array, " m"]:
        """``M_A`` ``(m,)``: the active fraction, the activation the fatigued muscle delivers."""
        return self.compartments(f)[0]

    def value(self, f) -> Float[Array, " m"]:
        """Residual capacity ``1 − M_F`` ``(m,)`` (1 = fresh)."""
        return f[self.n_muscles :]

    def rate(self, t, q, p, qd, f, drive_force, flow):
        """``ḟ`` ``(2m,)`` = ``(dM_R/dt, −dM_F/dt)`` from `three_compartment_rates` at ``TL(t)``."""
        active, resting, fatigued = self.compartments(f)
        _, d_resting, d_fatigued = three_compartment_rates(
            active,
            resting,
            fatigued,
            self.load(t),
            self.fatigue,
            self.recovery,
            self.development,
            self.relaxation,
            self.rest_recovery,
        )
        return jnp.concatenate([d_resting, -d_fatigued])
