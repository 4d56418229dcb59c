"""Classical 100 m models fitted to the same splits, for comparison.

- **Furusawa–Hill–Keller** (Furusawa, Hill & Parkinson 1927; Keller 1973): constant propulsion
  against a resistance proportional to speed, ``v = v_max (1 − e^{−s/τ})``,
  ``x = v_max (s − τ (1 − e^{−s/τ}))``. Parameters ``v_max`` [m/s], ``τ`` [s] (positive, logs).
- **Tibshirani (1997)**: a linearly decreasing propulsive force ``f − c s`` against ``k v``:
  ``v = A (1 − e^{−k s}) − (c/k) s`` with ``A = f/k + c/k²``,
  ``x = A (s − (1 − e^{−k s})/k) − c s²/(2k)``. Parameters ``f`` [m/s²], ``c`` [m/s³] and
  ``k`` [1/s], all positive (logs; ``c → 0`` is Furusawa–Hill–Keller).

``s = t − RT`` is the time since the reaction (the race file's reaction time, as for the sprinter).
Both are fitted on the same scaled split-time residuals as the sprinter: by the same
Levenberg–Marquardt batched with ``jax.vmap`` (``backend="jax"``), or by
`scipy.optimize.least_squares` in NumPy (``backend="scipy"``, no compilation: the CLI's choice).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxbio.sprint._solve import batched_best_of_starts, converged
from jaxbio.sprint.data import SIGMA_ROUND, Splits

#: parameter names, units and starts (in the fitted, unconstrained coordinates) of each baseline
MODELS = {
    "fhk": dict(
        names=("vmax", "tau"), units=("m/s", "s"), starts=((np.log(12.0), np.log(1.2)), (np.log(11.0), np.log(0.8)))
    ),
    "tibshirani": dict(
        names=("f", "c", "k"),
        units=("m/s²", "m/s³", "1/s"),
        starts=((np.log(9.0), np.log(0.05), np.log(0.8)), (np.log(12.0), np.log(0.3), np.log(1.1))),
    ),
}


def fhk_motion(theta, s, xp=jnp):
    """Furusawa–Hill–Keller ``(x [m], v [m/s])`` at ``s`` [s] after the reaction;
    ``theta = (log v_max, log τ)``. ``xp``: ``jax.numpy`` (default) or ``numpy``."""
    vmax, tau = xp.exp(theta[0]), xp.exp(theta[1])
    s = xp.maximum(s, 0.0)
    decay = -xp.expm1(-s / tau)
    return vmax * (s - tau * decay), vmax * decay


def tibshirani_motion(theta, s, xp=jnp):
    """Tibshirani (1997) ``(x [m], v [m/s])`` at ``s`` [s] after the reaction;
    ``theta = (log f, log c, log k)``. ``xp``: ``jax.numpy`` (default) or ``numpy``."""
    f, c, k = xp.exp(theta[0]), xp.exp(theta[1]), xp.exp(theta[2])
    s = xp.maximum(s, 0.0)
    A = f / k + c / k**2
    decay = -xp.expm1(-k * s)
    return A * (s - decay / k) - c * s**2 / (2 * k), A * decay - c / k * s


MOTION = {"fhk": fhk_motion, "tibshirani": tibshirani_motion}


def values(kind: str, theta):
    """Parameter values in SI units from the fitted log-coordinates ``theta`` ``(..., k)``."""
    return np.exp(np.asarray(theta))


def time_at(kind: str, theta, distances, newton_steps: int = 40):
    """Time after the reaction [s] at which the model reaches each of ``distances`` [m].

    Newton's method (without gradient) from ``d / 9 + 1`` s, then one differentiable Newton step,
    which gives the implicit derivative ``∂s/∂θ = −(∂x/∂θ)/v``. Where the model never reaches the
    distance (Tibshirani with a large ``c``), the speed used is floored at 0.1 m/s, so the time
    grows smoothly instead of failing.
    """
    motion = MOTION[kind]

    def newton(s, th):
        x, v = motion(th, s)
        return jnp.maximum(s - (x - distances) / jnp.maximum(v, 0.1), 0.0)

    th0 = jax.lax.stop_gradient(theta)
    s = jax.lax.fori_loop(0, newton_steps, lambda i, s: newton(s, th0), distances / 9.0 + 1.0)
    return newton(jax.lax.stop_gradient(s), theta)


def _residuals(theta, args, *, kind):
    sp = args
    pred = sp.reaction_time + time_at(kind, theta, sp.distances)
    return sp.weights * (pred - sp.times) / SIGMA_ROUND, pred


@functools.partial(jax.jit, static_argnames=("kind", "max_steps"))
def _fit_core(splits, starts, *, kind, max_steps):
    res = functools.partial(_residuals, kind=kind)
    L = splits.distances.shape[-1]
    template = (jnp.zeros(L, starts.dtype), jnp.zeros(L, starts.dtype))

    B = splits.distances.shape[0]
    per_race = jnp.broadcast_to(starts, (B,) + starts.shape)
    theta, r, J, pred, ok, steps = batched_best_of_starts(res, per_race, splits, max_steps=max_steps, template=template)
    return theta, pred, ok & jax.vmap(converged)(r, J)


class BaselineResult(eqx.Module):
    """Fits of one baseline to B races (numpy): ``kind``, ``names``, ``units``, ``theta``
    ``(B, k)`` fitted coordinates, ``values`` ``(B, k)`` SI, ``predicted`` ``(B, L)`` split times
    [s], ``rmse`` ``(B,)`` s over the fitted splits, ``converged`` ``(B,)``."""

    kind: str = eqx.field(static=True)
    names: tuple = eqx.field(static=True)
    units: tuple = eqx.field(static=True)
    theta: np.ndarray
    values: np.ndarray
    predicted: np.ndarray
    rmse: np.ndarray
    converged: np.ndarray

    def parameters(self, i: int) -> dict:
        return {n: float(self.values[i, j]) for j, n in enumerate(self.names)}

    def rows(self, n: int) -> BaselineResult:
        cut = lambda a: a[:n]  # noqa: E731
        return BaselineResult(
            self.kind,
            self.names,
            self.units,
            theta=cut(self.theta),
            values=cut(self.values),
            predicted=cut(self.predicted),
            rmse=cut(self.rmse),
            converged=cut(self.converged),
        )


def fit_baseline(kind: str, splits: Splits, *, max_steps: int = 100, backend: str = "jax") -> BaselineResult:
    """Fit baseline ``kind`` (``"fhk"`` or ``"tibshirani"``) to every race of ``splits`` (splits
    with weight 0 are predicted, not fitted).

    ``backend="jax"``: one vmapped, jitted Levenberg–Marquardt call (for many races; compiles in
    about a second per model). ``backend="scipy"``: `scipy.optimize.least_squares` race by race on
    the same residuals, in NumPy — no compilation, which is what a few races need (the CLI).
    Both start from the same points and keep the lowest cost; the tests check they agree.
    """
    if kind not in MODELS:
        raise ValueError(f"unknown baseline {kind!r}; known: {sorted(MODELS)}")
    if backend not in ("jax", "scipy"):
        raise ValueError(f"unknown backend {backend!r}; use 'jax' or 'scipy'")
    spec = MODELS[kind]
    if backend == "jax":
        starts = jnp.asarray(np.array(spec["starts"], dtype=float))
        theta, pred, ok = map(np.asarray, _fit_core(splits, starts, kind=kind, max_steps=max_steps))
    else:
        theta, pred, ok = _fit_scipy(kind, splits, np.array(spec["starts"], dtype=float), max_steps)
    w = np.asarray(splits.weights)
    rmse = np.sqrt(np.sum(w * (pred - np.asarray(splits.times)) ** 2, axis=1) / np.maximum(w.sum(1), 1))
    return BaselineResult(
        kind=kind,
        names=spec["names"],
        units=spec["units"],
        theta=theta,
        values=values(kind, theta),
        predicted=pred,
        rmse=rmse,
        converged=ok,
    )


def _time_at_numpy(kind, theta, distances, newton_steps: int = 40):
    """`time_at` in NumPy (same Newton iteration and speed floor)."""
    s = distances / 9.0 + 1.0
    with np.errstate(over="ignore", invalid="ignore"):  # trial steps far out give inf/NaN: a large cost
        for _ in range(newton_steps):
            x, v = MOTION[kind](theta, s, np)
            s = np.maximum(s - (x - distances) / np.maximum(v, 0.1), 0.0)
    return s


def _fit_scipy(kind, splits, starts, max_steps):
    from scipy.optimize import least_squares

    D, T, W = (np.asarray(a, dtype=float) for a in (splits.distances, splits.times, splits.weights))
    RT = np.broadcast_to(np.asarray(splits.reaction_time, dtype=float), D.shape[:1])
    theta, pred, ok = [], [], []
    for d, t, w, rt in zip(D, T, W, RT):
        fun = lambda th: w * (rt + _time_at_numpy(kind, th, d) - t) / SIGMA_ROUND  # noqa: E731
        best = min(
            (
                least_squares(fun, x0, method="lm", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=50 * max_steps)
                for x0 in starts
            ),
            key=lambda r: r.cost,
        )
        theta.append(best.x)
        pred.append(rt + _time_at_numpy(kind, best.x, d))
        ok.append(bool(best.success) and np.all(np.isfinite(best.x)))
    return np.array(theta), np.array(pred), np.array(ok)
