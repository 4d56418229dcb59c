"""`SpeedTrace`, speed traces as padded arrays (the second data kind of `fitting.fit_splits`), and
the model's speed at their samples (`model_speed`, `speed_residuals`): below both the fit
(`jaxbio.sprint.fitting`) and the traces' reader and fits (`jaxbio.sprint.trace`, which
re-exports them), so that those two do not import each other."""

from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio.simulation import hermite
from jaxbio.sprint.model import sprinter_system

if TYPE_CHECKING:
    from jaxbio.sprint.trace import Trace

#: nominal noise of one radar/laser speed sample, m/s, which scales the residuals; the reported
#: uncertainty uses the noise estimated from the residuals instead (module docstring)
SIGMA_SPEED = 0.2


class SpeedTrace(eqx.Module):
    """A batch of speed traces as padded arrays, the second data kind of `fitting.fit_splits`.

    ``times`` ``(B, L)`` s since the reaction (the model's time), ``speeds`` ``(B, L)`` m/s,
    ``weights`` ``(B, L)`` (1 fitted, 0 padding), ``reaction_time`` ``(B,)`` s added to give the
    profile's times (0 for a movement-onset trace without one), ``wind`` ``(B,)`` m/s,
    ``duration`` ``(B,)`` s simulated. Padding repeats the last sample.
    """

    times: Float[Array, "B L"]
    speeds: Float[Array, "B L"]
    weights: Float[Array, "B L"]
    reaction_time: Float[Array, " B"]
    wind: Float[Array, " B"]
    duration: Float[Array, " B"]

    @staticmethod
    def from_traces(traces: list[Trace], length: int | None = None, pad_length: int = 64) -> SpeedTrace:
        """Pad ``traces`` to ``length`` samples (default the longest, rounded up to ``pad_length``)."""
        L = length or -(-max(t.n for t in traces) // pad_length) * pad_length
        B = len(traces)
        S, V, W = np.zeros((B, L)), np.zeros((B, L)), np.zeros((B, L))
        for i, tr in enumerate(traces):
            s, k = tr.since_reaction, tr.n
            S[i, :k], V[i, :k], W[i, :k] = s, tr.speeds, 1.0
            S[i, k:], V[i, k:] = s[-1], tr.speeds[-1]
        rt = np.array([tr.gun_offset for tr in traces])
        wind = np.array([tr.wind for tr in traces])
        duration = np.array([1.05 * max(tr.since_reaction[-1], 0.0) + 0.5 for tr in traces])
        return SpeedTrace(*(jnp.asarray(a) for a in (S, V, W, rt, wind, duration)))


def model_speed(model, traj, wind, s, fitness=None):
    """The model's speed [m/s] at times ``s`` ``(L,)`` since the reaction, from its simulated race
    ``traj`` (`model.simulate_race`): cubic Hermite in the saved speeds and the accelerations of the
    vector field; 0 before the reaction (``s < 0``)."""
    system = sprinter_system(model, wind, fitness)
    acc = jax.vmap(lambda t, y: system.vector_field(t, y)["p"][0])(traj.ts, {"q": traj.q, "p": traj.p, "f": traj.f})
    mass = model.value("mass") if hasattr(model, "value") else model.mass
    v = hermite(traj.ts, traj.p[:, 0] / mass, acc / mass, jnp.maximum(s, 0.0))
    return jnp.where(s > 0, v, 0.0)


def speed_residuals(model, traj, tr: SpeedTrace, fitness=None):
    """``(pred (L,) m/s, scaled residuals (L,))`` of one trace (`fitting._residuals`' second kind)."""
    pred = model_speed(model, traj, tr.wind, tr.times, fitness)
    return pred, tr.weights * (pred - tr.speeds) / SIGMA_SPEED
