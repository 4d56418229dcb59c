"""Integration of a `HamiltonianSystem` with Diffrax: ODE (`simulate`) and SDE (`simulate_sde`).

Gradients: both functions are differentiable with respect to the initial state and every array
in the system (tree parameters, drive, dissipation, fitness law). The default adjoint is
Diffrax's `RecursiveCheckpointAdjoint`: it differentiates the discretised solve exactly
(discretise-then-optimise) with checkpointed memory, so gradients match finite differences of
the same solver to round-off. `BacksolveAdjoint` (continuous adjoint, O(1) memory) integrates
the dynamics backwards in time, which is ill-conditioned for the dissipative and chaotic
systems of this package; pass it via ``adjoint=`` only for long, smooth, conservative runs.
"""

from __future__ import annotations

from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array

from jaxbio.hamiltonian import HamiltonianSystem, hamiltonian, velocities

__all__ = ["Trajectory", "simulate", "simulate_sde", "stop_when"]


class Trajectory(NamedTuple):
    """Result of `simulate`. Arrays have a leading time axis ``(T, ...)`` matching ``ts``.

    ``q`` rad/m, ``p`` conjugate momenta, ``qd`` = ∂H/∂p, ``f`` fitness, ``energy`` H in J,
    ``a`` actuator states (None without a `StatefulDrive`).
    ``result``: Diffrax's `RESULTS` (``diffrax.RESULTS.successful`` when the solve completed; an
    event stop is ``diffrax.RESULTS.event_occurred``). With ``throw=True`` (default) a failed
    solve (``max_steps`` reached, step size collapsed, non-finite state) raises instead.
    ``solution``: the `diffrax.Solution` (dense interpolation via ``solution.evaluate(t)`` when
    ``dense=True``). Padding entries (times after an event stop) are ``inf`` in ``ts``.
    """

    ts: Array
    q: Array
    p: Array
    qd: Array
    f: Array
    energy: Array
    result: object
    solution: diffrax.Solution
    a: Array | None = None


def stop_when(index: int, value: float, *, coordinate: str = "q") -> diffrax.Event:
    """An event that stops the solve when ``y[coordinate][index]`` reaches ``value``
    (located by a Newton root-find on the dense output)."""

    def cond(t, y, args, **kwargs):
        return y[coordinate][index] - value

    return diffrax.Event(cond, root_finder=optx.Newton(rtol=1e-10, atol=1e-10))


def _check_span(t0, t1):
    try:
        bad = float(t1) <= float(t0)
    except (TypeError, jax.errors.ConcretizationTypeError):
        return
    if bad:
        raise ValueError(f"t1 ({float(t1)}) must be greater than t0 ({float(t0)})")


def _check_state(system: HamiltonianSystem, y0: dict):
    keys = {"q", "p", "f", "a"} if system.stateful else {"q", "p", "f"}
    if not isinstance(y0, dict) or set(y0) != keys:
        raise ValueError(f"y0 must be a dict with keys {sorted(keys)} (see HamiltonianSystem.initial_state)")
    n = system.nq
    shapes = {"q": (n,), "p": (n,), "f": (system.fitness.size,)}
    if system.stateful:
        shapes["a"] = (system.drive.state_size,)
    for key, shape in shapes.items():
        if jnp.shape(y0[key]) != shape:
            raise ValueError(f"y0[{key!r}] has shape {jnp.shape(y0[key])}, expected {shape}")


def _trajectory(system, sol, throw):
    ys = sol.ys
    finite = jnp.all(jnp.isfinite(jnp.where(jnp.isfinite(sol.ts)[:, None], ys["q"], 0.0)))
    if throw:
        ys = eqx.error_if(ys, ~finite, "the solution became non-finite (NaN/inf): the step size is "
                          "probably unstable for this system; use an adaptive controller or a smaller dt0")
    q, p, f = ys["q"], ys["p"], ys["f"]
    actuator = ys.get("a")
    valid = jnp.isfinite(sol.ts)
    safe_q = jnp.where(valid[:, None], q, 0.0)
    safe_p = jnp.where(valid[:, None], p, 0.0)
    qd = jax.vmap(velocities, in_axes=(None, 0, 0))(system.tree, safe_q, safe_p)
    energy = jax.vmap(hamiltonian, in_axes=(None, 0, 0))(system.tree, safe_q, safe_p)
    qd = jnp.where(valid[:, None], qd, jnp.inf)
    energy = jnp.where(valid, energy, jnp.inf)
    return Trajectory(sol.ts, q, p, qd, f, energy, sol.result, sol, actuator)


def simulate(
    system: HamiltonianSystem,
    y0: dict,
    t0: float,
    t1: float,
    *,
    solver: diffrax.AbstractSolver | None = None,
    dt0: float | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
    saveat: diffrax.SaveAt | None = None,
    ts=None,
    event: diffrax.Event | None = None,
    dense: bool = False,
    max_steps: int = 100_000,
    adjoint: diffrax.AbstractAdjoint | None = None,
    throw: bool = True,
) -> Trajectory:
    """Integrate the Hamilton equations of ``system`` from ``y0`` over ``[t0, t1]`` (s).

    Args:
        system: the `HamiltonianSystem`.
        y0: ``{"q": (n,), "p": (n,), "f": (k,)}``, e.g. ``system.initial_state(q0, qd0)``.
        t0, t1: start and end time, s (``t1 > t0``).
        solver: any Diffrax ODE solver (default `diffrax.Tsit5`).
        dt0: initial (adaptive) or fixed step, s. With ``stepsize_controller=None`` and a
            ``dt0``, steps are fixed; without ``dt0`` a PID controller with ``rtol``/``atol``
            adapts them.
        saveat / ts: what to save (default: the final state only); ``ts`` is a shortcut for
            ``SaveAt(ts=ts)``.
        event: a `diffrax.Event`, e.g. `stop_when` ``(index, value)``.
        dense: keep the dense interpolant (``trajectory.solution.evaluate(t)``).
        max_steps: step budget; reaching it raises (``throw=True``) or sets ``result``.
        adjoint: Diffrax adjoint for gradients (default `RecursiveCheckpointAdjoint`, see module doc).
        throw: raise on failure (max_steps, non-finite state); otherwise check ``result``.

    Returns:
        a `Trajectory`.
    """
    _check_span(t0, t1)
    _check_state(system, y0)
    solver = diffrax.Tsit5() if solver is None else solver
    if stepsize_controller is None:
        if dt0 is None:
            stepsize_controller = diffrax.PIDController(rtol=rtol, atol=atol)
        else:
            stepsize_controller = diffrax.ConstantStepSize()
    if saveat is None:
        saveat = diffrax.SaveAt(ts=ts, dense=dense) if ts is not None else diffrax.SaveAt(t1=True, dense=dense)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(system.vector_field),
        solver,
        t0,
        t1,
        dt0,
        y0,
        saveat=saveat,
        stepsize_controller=stepsize_controller,
        event=event,
        max_steps=max_steps,
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
        throw=throw,
    )
    return _trajectory(system, sol, throw)


def simulate_sde(
    system: HamiltonianSystem,
    y0: dict,
    t0: float,
    t1: float,
    key: Array,
    noise: Array,
    *,
    dt0: float,
    solver: diffrax.AbstractSolver | None = None,
    saveat: diffrax.SaveAt | None = None,
    ts=None,
    max_steps: int = 1_000_000,
    throw: bool = True,
) -> Trajectory:
    """Stochastic torques (seed 000): ``dp = (F − ∂H/∂q − ∂R/∂q̇) dt + B dW``.

    ``noise``: ``B``, ``(n,)`` (independent torque noise per coordinate, N·m/√s) or ``(n, n)``.
    ``key``: a PRNG key; the same key reproduces the same Brownian path (Diffrax
    `VirtualBrownianTree`). Fixed step ``dt0``; default solver Euler–Maruyama (`diffrax.Euler`;
    additive noise, strong order 1). Other arguments as in `simulate`.
    """
    _check_span(t0, t1)
    _check_state(system, y0)
    n = system.nq
    B = jnp.asarray(noise)
    if B.shape == (n,):
        B = jnp.diag(B)
    if B.shape != (n, n):
        raise ValueError(f"noise has shape {jnp.shape(noise)}, expected ({n},) or ({n}, {n})")
    dtype = jnp.result_type(y0["q"])
    k = system.fitness.size
    # Brownian motion with the state's structure; only its "p" part drives the system.
    sizes = {"q": n, "p": n, "f": k}
    if system.stateful:
        sizes["a"] = system.drive.state_size
    shape = {key: jax.ShapeDtypeStruct((m,), dtype) for key, m in sizes.items()}
    brownian = diffrax.VirtualBrownianTree(t0, t1, tol=dt0 / 4, shape=shape, key=key)

    def diffusion(t, y, args):
        return {key: B.astype(dtype) if key == "p" else jnp.zeros((m, m), dtype) for key, m in sizes.items()}

    terms = diffrax.MultiTerm(diffrax.ODETerm(system.vector_field), diffrax.ControlTerm(diffusion, brownian))
    if saveat is None:
        saveat = diffrax.SaveAt(ts=ts) if ts is not None else diffrax.SaveAt(t1=True)
    sol = diffrax.diffeqsolve(
        terms, diffrax.Euler() if solver is None else solver, t0, t1, dt0, y0,
        saveat=saveat, max_steps=max_steps, throw=throw,
    )
    return _trajectory(system, sol, throw)
