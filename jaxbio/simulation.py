"""Integration of a `HamiltonianSystem` with Diffrax: ODE (`simulate`) and SDE (`simulate_sde`),
events (`stop_when`), and the location of crossing times on a saved trajectory (`crossing_times`).

`jb.simulate`, `jb.simulate_sde` and `jb.Trajectory` are the daily names; this module is
`jb.simulation`.

Fixed-grid stepping (``simulate(..., steps=N)``) iterates the solver's step over a grid of ``N``
steps in a `jax.lax.scan` and saves every grid point: the same steps `diffrax.diffeqsolve` takes
with `diffrax.StepTo` on that grid, without its adaptive-loop machinery, which under `jax.vmap`
costs far more than the steps themselves (see benchmarks/sprint.py). With
``spacing="quadratic"`` the grid is ``t = t0 + (t1 − t0) u²`` for ``N`` equal steps in ``u``: the
solver integrates ``dy/du = 2 (t1 − t0) u · f(t(u), y)``, small steps where a drive switches on
at ``t0``, larger ones later (the sprinter's start).

Gradients: both functions are differentiable with respect to the initial state and every array
in the system (tree parameters, drive, dissipation, fitness law). The default adjoint is
Diffrax's `RecursiveCheckpointAdjoint`: it differentiates the discretised solve exactly
(discretise-then-optimise) with checkpointed memory, so gradients match finite differences of
the same solver to round-off. `BacksolveAdjoint` (continuous adjoint, O(1) memory) integrates
the dynamics backwards in time, which is ill-conditioned for the dissipative and chaotic
systems of this package; pass it via ``adjoint=`` only for long, smooth, conservative runs.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from jaxbio.dynamics import potential_energy
from jaxbio.hamiltonian import HamiltonianSystem, velocities

__all__ = ["Trajectory", "crossing_times", "hermite", "simulate", "simulate_sde", "stop_when"]

SPACINGS = ("uniform", "quadratic")


class Trajectory(eqx.Module):
    """Result of `simulate`. Arrays have a leading time axis ``(T, ...)`` matching ``ts``.

    ``ts`` ``(T,)`` s; ``q`` ``(T, n)`` rad/m; ``p`` ``(T, n)`` conjugate momenta; ``qd``
    ``(T, n)`` = ∂H/∂p; ``f`` ``(T, k)`` fitness state; ``energy`` ``(T,)`` H in J; ``a``
    ``(T, s)`` drive states (None for a drive without states).
    ``result``: Diffrax's `RESULTS` (``diffrax.RESULTS.successful`` when the solve completed; an
    event stop is ``diffrax.RESULTS.event_occurred``). With ``throw=True`` (default) a failed
    solve (``max_steps`` reached, step size collapsed, non-finite state) raises instead.
    ``solution``: the `diffrax.Solution` (dense interpolation via ``solution.evaluate(t)`` when
    ``dense=True``; None for fixed-grid stepping). Padding entries (times after an event stop)
    are ``inf`` in ``ts``.
    """

    ts: Array
    q: Array
    p: Array
    qd: Array
    f: Array
    energy: Array
    result: object
    solution: diffrax.Solution | None
    a: Array | None = None


def stop_when(index: int, value: float, *, coordinate: str = "q") -> diffrax.Event:
    """An event that stops the solve when ``y[coordinate][index]`` reaches ``value``
    (located by a Newton root-find on the dense output)."""

    def cond(t, y, args, **kwargs):
        return y[coordinate][index] - value

    return diffrax.Event(cond, root_finder=optx.Newton(rtol=1e-10, atol=1e-10))


def _check_span(t0, t1):
    try:
        bad = not float(t1) > float(t0)  # NaN is bad too
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


def _trajectory(system, ts, ys, result, sol, throw):
    finite = jnp.all(jnp.isfinite(jnp.where(jnp.isfinite(ts)[:, None], ys["q"], 0.0)))
    if throw:
        ys = eqx.error_if(ys, ~finite, "the solution became non-finite (NaN/inf): the step size is "
                          "probably unstable for this system; use an adaptive controller or a smaller dt0")
    q, p, f = ys["q"], ys["p"], ys["f"]
    actuator = ys.get("a")
    valid = jnp.isfinite(ts)
    safe_q = jnp.where(valid[:, None], q, 0.0)
    safe_p = jnp.where(valid[:, None], p, 0.0)
    qd = jax.vmap(velocities, in_axes=(None, 0, 0))(system.tree, safe_q, safe_p)
    # H = ½ pᵀq̇ + V(q), with the q̇ just solved for (no second factorisation of M)
    energy = 0.5 * jnp.sum(safe_p * qd, axis=-1) + jax.vmap(potential_energy, in_axes=(None, 0))(system.tree, safe_q)
    qd = jnp.where(valid[:, None], qd, jnp.inf)
    energy = jnp.where(valid, energy, jnp.inf)
    return Trajectory(ts, q, p, qd, f, energy, result, sol, actuator)


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
    steps: int | None = None,
    spacing: str = "uniform",
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
        steps: fixed-grid stepping (static int ≥ 1): exactly ``steps`` solver steps on a grid
            from ``t0`` to ``t1``, every grid point saved (``T = steps + 1``), differentiated
            through the steps directly (forward and reverse mode). Excludes ``dt0``,
            ``stepsize_controller``, ``saveat``/``ts``, ``event``, ``dense`` and ``adjoint``.
        spacing: the fixed grid, ``"uniform"`` or ``"quadratic"`` (``t = t0 + (t1 − t0) u²``,
            equal steps in ``u``; see the module doc).

    Returns:
        a `Trajectory`.
    """
    _check_span(t0, t1)
    _check_state(system, y0)
    if steps is not None:
        given = dict(dt0=dt0, stepsize_controller=stepsize_controller, saveat=saveat, ts=ts, event=event,
                     adjoint=adjoint)
        clash = [k for k, v in given.items() if v is not None] + (["dense"] if dense else [])
        if clash:
            raise ValueError(f"simulate: steps= (fixed-grid stepping) excludes {', '.join(clash)}")
        return _simulate_grid(system, y0, t0, t1, steps, spacing, solver, throw)
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
    return _trajectory(system, sol.ts, sol.ys, sol.result, sol, throw)


@eqx.filter_jit
def _field(system, t, y):
    """The vector field behind one jit boundary: traced once per fixed-grid solve, however many
    times the solver, `jax.jacfwd` and `jax.vmap` transform it (the sprint fit traced ~1.4x
    longer without it)."""
    return system.vector_field(t, y)


def _simulate_grid(system, y0, t0, t1, steps, spacing, solver, throw) -> Trajectory:
    """Fixed-grid stepping: ``steps`` solver steps in a `lax.scan` (see the module doc)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"simulate: steps must be an int ≥ 1, got {steps!r}")
    if spacing not in SPACINGS:
        raise ValueError(f"simulate: spacing must be one of {SPACINGS}, got {spacing!r}")
    dtype = jnp.result_type(y0["q"])
    t0 = jnp.asarray(t0, dtype)
    span = jnp.asarray(t1, dtype) - t0
    grid = jnp.linspace(0.0, 1.0, steps + 1, dtype=dtype)  # u
    # the solver steps one flat vector: its stage combinations are then one operation each,
    # not one per leaf of the state (a small system's step is mostly these)
    flat0, unravel = ravel_pytree(y0)
    if spacing == "quadratic":
        def rhs(u, x, args):
            return ravel_pytree(_field(system, t0 + span * u * u, unravel(x)))[0] * (2.0 * span * u)

        times = t0 + span * grid**2
    else:
        def rhs(u, x, args):
            return ravel_pytree(_field(system, t0 + span * u, unravel(x)))[0] * span

        times = t0 + span * grid
    solver = diffrax.Tsit5(scan_kind="bounded") if solver is None else solver
    term = diffrax.ODETerm(rhs)
    state = solver.init(term, grid[0], grid[1], flat0, None)

    def step(carry, i):
        x, st = carry
        x1, _, _, st, _ = solver.step(term, grid[i], grid[i + 1], x, None, st, made_jump=False)
        return (x1, st), x1

    _, xs = jax.lax.scan(step, (flat0, state), jnp.arange(steps))
    ys = jax.vmap(unravel)(jnp.concatenate([flat0[None], xs]))
    return _trajectory(system, times, ys, diffrax.RESULTS.successful, None, throw)


def hermite(ts: Float[Array, " T"], y: Float[Array, " T"], dydt: Float[Array, " T"],
            t: Float[ArrayLike, " k"]) -> Float[Array, " k"]:
    """Cubic Hermite interpolation of ``y(t)`` from values ``y`` and slopes ``dydt`` at the
    increasing times ``ts`` (``T ≥ 2``), at ``t`` ``(k,)``; clamped to the first and last interval.
    Differentiable (the interval index is piecewise constant)."""
    if not (jnp.ndim(ts) == 1 and jnp.shape(ts) == jnp.shape(y) == jnp.shape(dydt) and jnp.shape(ts)[0] >= 2):
        raise ValueError(f"hermite: ts, y and dydt must be (T,) with T ≥ 2, got shapes "
                         f"{jnp.shape(ts)}, {jnp.shape(y)}, {jnp.shape(dydt)}")
    idx, h, u = _interval(ts, t)
    return _hermite(h, y[idx], y[idx + 1], dydt[idx], dydt[idx + 1], u)


def _interval(ts, t):
    n = ts.shape[0] - 1
    idx = jnp.clip(jnp.searchsorted(ts, t, side="right", method="compare_all") - 1, 0, n - 1)
    h = ts[idx + 1] - ts[idx]
    return idx, h, jnp.clip((t - ts[idx]) / h, 0.0, 1.0)


def _hermite(h, y0, y1, d0, d1, u):
    """Cubic Hermite on ``[0, 1]`` with values ``y0, y1`` and end slopes ``d0, d1`` (per unit t)."""
    u2, u3 = u * u, u * u * u
    return ((2 * u3 - 3 * u2 + 1) * y0 + (u3 - 2 * u2 + u) * h * d0
            + (-2 * u3 + 3 * u2) * y1 + (u3 - u2) * h * d1)


def crossing_times(traj: Trajectory, values: Float[ArrayLike, " k"], index: int = 0, *,
                   newton_steps: int = 5) -> Float[Array, " k"]:
    """Times [s] at which coordinate ``q[index]`` of a saved trajectory first reaches each of
    ``values`` (its unit), for a coordinate that does not decrease (a runner's distance).

    Event location on the dense output, after the solve: the cubic Hermite interpolant of
    ``q[index](t)`` from its values and velocities ``qd[index]`` at the saved times (a 1-DOF
    joint's ``q̇`` is its ``qd``) is inverted by ``newton_steps`` Newton steps inside the saved
    interval that brackets each value. Beyond the last saved point the last velocity is held.
    Differentiable: the derivative is the implicit one, ``∂t/∂θ = −(∂q/∂θ)/q̇``. Use it with
    ``simulate(..., steps=N)`` (every step saved); for one stop during the solve use `stop_when`.
    """
    n = traj.q.shape[-1]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise ValueError(f"crossing_times: index must be an int in [0, {n}), got {index!r}")
    if traj.ts.shape[0] < 2:
        raise ValueError("crossing_times: the trajectory needs at least two saved points (simulate(..., steps=N))")
    values = jnp.asarray(values)
    q, v, ts = traj.q[:, index], traj.qd[:, index], traj.ts
    n = q.shape[0] - 1
    idx = jnp.clip(jnp.searchsorted(q, values, side="right", method="compare_all") - 1, 0, n - 1)
    h = ts[idx + 1] - ts[idx]
    x0, x1, v0, v1 = q[idx], q[idx + 1], v[idx], v[idx + 1]
    u = jnp.clip((values - x0) / jnp.maximum(x1 - x0, 1e-12), 0.0, 1.0)
    for _ in range(newton_steps):
        u2 = u * u
        x = _hermite(h, x0, x1, v0, v1, u)
        dx = (6 * u2 - 6 * u) * x0 + (3 * u2 - 4 * u + 1) * h * v0 + (-6 * u2 + 6 * u) * x1 + (3 * u2 - 2 * u) * h * v1
        u = jnp.clip(u - (x - values) / jnp.maximum(dx, 1e-9), 0.0, 1.0)
    t_inside = ts[idx] + u * h
    t_past = ts[-1] + (values - q[-1]) / jnp.maximum(v[-1], 0.1)
    return jnp.where(values > q[-1], t_past, t_inside)


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
    return _trajectory(system, sol.ts, sol.ys, sol.result, sol, throw)
