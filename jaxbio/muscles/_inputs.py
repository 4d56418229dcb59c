"""The one place where every muscle model takes its per-sample inputs (activation, excitation,
musculotendon length and velocity): `HillMuscle`, `Thelen2003Muscle`, `Millard2012EquilibriumMuscle`
and the activation dynamics of `jaxbio.muscles.activation` and `jaxbio.muscles._opensim_common`.

Legal values (`jaxbio._validate.in_range`: a ``ValueError`` naming the argument for concrete
values, NaN in place of the entry under jit/vmap/grad):

- ``activation`` and ``excitation``: finite, in [0, 1] (values within `FRACTION_SLACK` = 10⁻⁵
  of it pass unchanged: rounding, and finite-difference probes of a derivative at a = 1 or 0, as
  `jax.test_util.check_grads` makes them). A model's floor (OpenSim's
  ``minimum_activation``, 0.01 by default) is applied *after* the check, as before: values in
  ``[0, minimum_activation)`` are legal and clamped up.
- ``musculotendon_length``: finite, ≥ 0 m. Shorter than the tendon slack length is legal: the
  tendon is slack and the muscle pulls with 0 N (it never pushes).
- ``musculotendon_velocity``: finite, m/s (either sign).
- an activation *state* of activation dynamics (`activation_state`): finite; an explicit
  integrator step may overshoot [0, 1] a little and the dynamics pull it back.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxbio._validate import any_traced, as_real, in_range


#: how far outside [0, 1] an activation or excitation may lie and still pass unchanged
FRACTION_SLACK = 1e-5


def fraction(x, name: str, dtype=None):
    """An activation or excitation: ``x`` checked to be finite and in [0, 1] (`in_range`)."""
    x = as_real(x, name)
    return in_range(x if dtype is None else x.astype(dtype), name, 0.0, 1.0, slack=FRACTION_SLACK)


def poisoned(result, *inputs):
    """``result`` (a pytree of ``(m,)`` arrays) with NaN in every floating leaf for the muscles
    whose checked input is NaN (`in_range` under jit): an iteration (an equilibrium solve) stops
    on NaN and would otherwise return a plausible number. Concrete inputs were checked
    already: ``result`` comes back as it is."""
    if not any_traced(*inputs):
        return result
    bad = jnp.zeros(jnp.shape(inputs[0]), bool)
    for x in inputs:
        bad = bad | jnp.isnan(x)

    def leaf(y):
        if not (hasattr(y, "dtype") and jnp.issubdtype(y.dtype, jnp.floating)):
            return y
        return y * jnp.where(bad, jnp.nan, 1.0).astype(y.dtype)  # derivatives through y: NaN there too

    return jax.tree_util.tree_map(leaf, result)


def activation_state(x, name: str):
    """An activation that is an ODE state: finite (`in_range`), any sign."""
    return in_range(as_real(x, name), name)


def muscle_inputs(owner: str, like, musculotendon_length, musculotendon_velocity, activation=None) -> tuple:
    """``(activation,) musculotendon_length, musculotendon_velocity`` checked (module docstring)
    and broadcast to ``like``'s shape and dtype (the muscle's ``(m,)`` parameters).
    ``activation=None``: only the length and velocity are returned (static optimisation's forces
    at full activation)."""
    dtype, shape = like.dtype, like.shape
    out = []
    if activation is not None:
        out.append(fraction(activation, f"{owner}: activation", dtype))
    out.append(
        in_range(
            as_real(musculotendon_length, f"{owner}: musculotendon_length").astype(dtype),
            f"{owner}: musculotendon_length",
            0.0,
        )
    )
    out.append(
        in_range(
            as_real(musculotendon_velocity, f"{owner}: musculotendon_velocity").astype(dtype),
            f"{owner}: musculotendon_velocity",
        )
    )
    return tuple(jnp.broadcast_to(jnp.asarray(x, dtype), shape) for x in out)
