"""Excitation and activation dynamics of muscles.

- Wilkie's active-state element (Ivancevic 2009; Wilkie 1956): ``μ̇ + Γμ = Γ S A``, and its impulse
  solutions ``F⁰(1 − e^{−t/τ})`` (stimulated) and ``F⁰ e^{−t/τ}`` (released), ``τ = 1/Γ``,
  ``F⁰ = S A``.
- First-order activation dynamics with separate activation and deactivation time constants
  (Thelen 2003; the smooth tanh blend of De Groote et al. 2016, eq. 1 — as in OpenSim's
  ``DeGrooteFregly2016Muscle``).

References
----------
- D. R. Wilkie (1956), The mechanical properties of muscle, Brit. Med. Bull. 12, 177–182
  (Ivancevic 2009, ref. [12]).
- D. G. Thelen (2003), J. Biomech. Eng. 125, 70–77 (``τ_act (0.5 + 1.5a)``, ``τ_deact/(0.5 + 1.5a)``).
- F. De Groote, A. L. Kinney, A. V. Rao, B. J. Fregly (2016), Ann. Biomed. Eng. 44, 2922–2936.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import check_precision
from jaxbio.muscles._inputs import activation_state, fraction
from jaxbio.muscles.curves import _check

__all__ = [
    "wilkie_active_state_rate",
    "impulse_rise",
    "impulse_decay",
    "ActivationDynamics",
]


def wilkie_active_state_rate(
    active_state: Float[ArrayLike, ...],
    stimulus: Float[ArrayLike, ...],
    max_tension: Float[ArrayLike, ...],
    gain: Float[ArrayLike, ...],
) -> Float[Array, ...]:
    """Wilkie's active-state equation ``μ̇ = Γ (S A − μ)`` (Ivancevic 2009; Wilkie 1956).

    - ``active_state``: ``(...)`` N, ``μ`` (the active state, in units of tension).
    - ``stimulus``: ``(...)`` dimensionless, ``S = S(r) ∈ (0, 1)``, the 'desired' active state as
      a function of the motor-unit stimulus rate.
    - ``max_tension``: ``(...)`` N, ``A``, the maximal tension the element develops.
    - ``gain``: ``(...)`` 1/s, ``Γ`` (> 0), the element gain.
    - returns ``(...)`` N/s, ``μ̇``.

    With constant ``S A`` and ``μ(0) = 0`` the solution is ``μ(t) = S A (1 − e^{−Γt})``, i.e.
    `impulse_rise` with ``F⁰ = S A`` and ``τ = 1/Γ``; with ``S = 0`` and ``μ(0) = F⁰`` it is
    `impulse_decay`.
    """
    mu = jnp.asarray(active_state)
    return jnp.asarray(gain) * (jnp.asarray(stimulus) * jnp.asarray(max_tension) - mu)


def impulse_rise(t: Float[ArrayLike, ...], f0: Float[ArrayLike, ...], tau: Float[ArrayLike, ...]) -> Float[Array, ...]:
    """Impulse force–time relation while stimulated: ``F = F⁰ (1 − e^{−t/τ})`` (Ivancevic 2009).

    - ``t``: ``(...)`` s since the stimulus onset; ``t < 0`` (before onset) gives 0.
    - ``f0``: ``(...)`` N (or N·m for a joint-equivalent actuator), maximal isometric force.
    - ``tau``: ``(...)`` s (> 0), time characteristic of the actuator.
    - returns ``(...)`` in the unit of ``f0``.
    """
    t = jnp.maximum(jnp.asarray(t), 0.0)
    return jnp.asarray(f0) * -jnp.expm1(-t / jnp.asarray(tau))


def impulse_decay(t: Float[ArrayLike, ...], f0: Float[ArrayLike, ...], tau: Float[ArrayLike, ...]) -> Float[Array, ...]:
    """Impulse force–time relation after the stimulus stops: ``F = F⁰ e^{−t/τ}`` (Ivancevic 2009).

    - ``t``: ``(...)`` s since the stimulus ended; ``t < 0`` gives ``F⁰``.
    - ``f0``: ``(...)`` N (or N·m), force at release.
    - ``tau``: ``(...)`` s (> 0).
    - returns ``(...)`` in the unit of ``f0``.
    """
    t = jnp.maximum(jnp.asarray(t), 0.0)
    return jnp.asarray(f0) * jnp.exp(-t / jnp.asarray(tau))


class ActivationDynamics(eqx.Module):
    """First-order activation dynamics with activation/deactivation asymmetry.

    ``ȧ = (e − a) [ f / (τ_act (0.5 + 1.5a)) + (1 − f)(0.5 + 1.5a) / τ_deact ]``,
    ``f = ½ + ½ tanh(b (e − a))`` (De Groote et al. 2016, eq. 1; the time constants scale with
    activation as in Thelen 2003: ``τ = τ_act (0.5 + 1.5a)`` while ``e > a``,
    ``τ = τ_deact / (0.5 + 1.5a)`` while ``e < a``; ``tanh`` blends the two smoothly).

    Fields (scalars or ``(m,)``, broadcast against the excitation):

    - ``tau_activation``: s (> 0), default 0.015.
    - ``tau_deactivation``: s (> 0), default 0.060.
    - ``smoothing``: ``b`` (> 0), sharpness of the switch. Default 10 (OpenSim's
      ``activation_dynamics_smoothing``); the paper's ``b = 0.1`` gives a nearly even blend of the
      two time constants over ``|e − a| ≤ 1``.

    Since ``ȧ`` is proportional to ``e − a``, ``a = e`` is the steady state for every ``e``.

    The time constants are evaluated at the activation clamped to [0, 1] (``0.5 + 1.5 a`` with
    ``a`` in [0, 1]; unchanged inside): an explicit step can overshoot below 0, and with the raw
    ``a`` the scale ``0.5 + 1.5a`` changes sign at ``a = −1/3``, below which the rate points away
    from ``e`` and the activation runs off to −∞ (it did at 20 ms Tsit5 steps: ``τ_act/2`` is
    7.5 ms). Clamped, ``e`` attracts ``a`` from every value.
    """

    tau_activation: Float[Array, ...]
    tau_deactivation: Float[Array, ...]
    smoothing: Float[Array, ...]

    def __init__(self, tau_activation=0.015, tau_deactivation=0.060, smoothing=10.0):
        for name, value in (
            ("tau_activation", tau_activation),
            ("tau_deactivation", tau_deactivation),
            ("smoothing", smoothing),
        ):
            check_precision(jnp.result_type(value), f"ActivationDynamics: {name}")
        self.tau_activation = jnp.asarray(tau_activation, dtype=jnp.result_type(tau_activation, float))
        self.tau_deactivation = jnp.asarray(tau_deactivation, dtype=self.tau_activation.dtype)
        self.smoothing = jnp.asarray(smoothing, dtype=self.tau_activation.dtype)
        own = "ActivationDynamics"
        _check(own, "tau_activation", self.tau_activation, positive=True)
        _check(own, "tau_deactivation", self.tau_deactivation, positive=True)
        _check(own, "smoothing", self.smoothing, positive=True)

    def rate(self, excitation: Float[ArrayLike, ...], activation: Float[ArrayLike, ...]) -> Float[Array, ...]:
        """``ȧ`` ``(...)`` 1/s from the neural ``excitation`` ``e`` and ``activation`` ``a``
        (both ``(...)``, dimensionless in [0, 1]).

        ``excitation`` must be finite and in [0, 1], ``activation`` (the ODE state, which an
        explicit step may push a little out of [0, 1]) finite (`jaxbio.muscles._inputs`): a
        ``ValueError`` naming the argument for concrete values, NaN under jit (an ``excitation(t)``
        of a drive that leaves [0, 1] makes the simulation's state NaN, not a plausible motion)."""
        e = jnp.asarray(fraction(excitation, "ActivationDynamics.rate: excitation"))
        a = jnp.asarray(activation_state(activation, "ActivationDynamics.rate: activation"))
        # clamp with `where` (not clip: clip halves the derivative at a = 0, the usual initial state)
        scale = 0.5 + 1.5 * jnp.where(a < 0.0, 0.0, jnp.where(a > 1.0, 1.0, a))
        blend = 0.5 + 0.5 * jnp.tanh(self.smoothing * (e - a))
        inv_tau = blend / (self.tau_activation * scale) + (1.0 - blend) * scale / self.tau_deactivation
        return (e - a) * inv_tau
