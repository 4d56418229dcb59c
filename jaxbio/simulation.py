"""Integration of a `HamiltonianSystem` with Diffrax: ODE (`simulate`) and SDE (`simulate_sde`),
events (`stop_when`), and the location of crossing times on a saved trajectory (`crossing_times`).

`jb.simulate`, `jb.simulate_sde` and `jb.Trajectory` are the daily names; this module is
`jb.simulation`.

Fixed-grid stepping (``simulate(..., stepsize_controller=FixedGrid(N))``) iterates the solver's step over a grid of ``N``
steps in a `jax.lax.scan` and saves every grid point: the same steps `diffrax.diffeqsolve` takes
with `diffrax.StepTo` on that grid, without its adaptive-loop machinery, which under `jax.vmap`
costs far more than the steps themselves (see benchmarks/sprint.py). With
``spacing="quadratic"`` the grid is ``t = t0 + (t1 − t0) u²`` for ``N`` equal steps in ``u``: the
solver integrates ``dy/du = 2 (t1 − t0) u · f(t(u), y)``, small steps where a drive switches on
at ``t0``, larger ones later (the sprinter's start).

Errors and NaN (`simulate` documents the rule in full): concrete arguments are checked before
tracing (``ValueError`` naming the argument and its value); the same checks on traced arguments
run on the device — ``throw=True``: one `equinox.error_if` naming the argument; ``throw=False``:
no step is taken, the outputs are NaN, ``result`` is ``RESULTS.nonfinite``. A solve stops at the
first NaN/inf state (``RESULTS.nonfinite``) instead of shrinking its step until ``max_steps``.
Failed solves raise `SimulationError` outside jit (one line, no Equinox banner).

Gradients: both functions are differentiable with respect to the initial state and every array
in the system (tree parameters, drive, dissipation, fitness law). The adjoints differentiate
the discretised solve exactly (discretise-then-optimise), so gradients match finite differences
of the same solver to round-off. `simulate` chooses by what the call is: a solve differentiated
in reverse mode (inside `jax.grad`, `jax.vjp`, `equinox.filter_value_and_grad`, with `jax.jit`
outside or not) runs, by default, `StoredAdjoint` — jaxbio's own Tsit5 loop, every step's stages
stored, the field traced once each way — wherever the solve options allow it (Tsit5, adaptive
steps, ``ts`` or ``t1`` saved, no event, no time differentiated), and then integrates the velocity
form where it applies: a value-and-gradient step costs a few forward passes
(benchmarks/learning.py). Any other solve — not differentiated, in forward mode, or on a fixed
grid — integrates the Hamiltonian form, the faster forward solve under `jax.vmap`: an adaptive
one on Diffrax's loop, differentiated (when it is) by Diffrax's `RecursiveCheckpointAdjoint`
(checkpointed memory). Both forms solve
the same equations: their values differ at the level of the tolerances (a chaotic system
amplifies that, as it does any change of step).
`BacksolveAdjoint` (continuous adjoint, O(1) memory) integrates the dynamics backwards in time,
which is ill-conditioned for the dissipative and chaotic systems of this package; pass it via
``adjoint=`` only for long, smooth, conservative runs.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from jaxbio import _tsit5
from jaxbio.configuration import normalize
from jaxbio._validate import (
    any_bad,
    as_count,
    as_real,
    as_scalar,
    check_choice,
    check_finite,
    check_flag,
    check_key,
    check_or_defer,
    raise_if,
)
from jaxbio.dynamics import potential_energy
from jaxbio.hamiltonian import FORMS, HamiltonianSystem, solver_field

__all__ = [
    "FixedGrid",
    "SimulationError",
    "StoredAdjoint",
    "Trajectory",
    "crossing_times",
    "hermite",
    "simulate",
    "simulate_sde",
    "stop_when",
]

SPACINGS = ("uniform", "quadratic")


class Trajectory(eqx.Module):
    """Result of `simulate`. Arrays have a leading time axis ``(T, ...)`` matching ``ts``.

    ``ts`` ``(T,)`` s; ``q`` ``(T, n)`` rad/m; ``p`` ``(T, n)`` conjugate momenta; ``qd``
    ``(T, n)`` = ∂H/∂p; ``f`` ``(T, k)`` fitness state; ``energy`` ``(T,)`` H in J; ``a``
    ``(T, s)`` drive states (None for a drive without states). With ``simulate(...,
    derived=False)`` the outputs not integrated are None: ``qd`` and ``energy`` (Hamiltonian
    form) or ``p`` and ``energy`` (velocity form).
    ``result``: Diffrax's `RESULTS`: ``successful``, or ``event_occurred`` for an event stop
    (both success); ``max_steps_reached``, ``nonfinite`` (the state became NaN/inf, or a traced
    argument was bad), ``dt_min_reached`` for a failure. With ``throw=True`` (default) a failure
    raises instead (`SimulationError` outside jit). NaN in any output means "not computed":
    the rows a failed solve did not reach, every row after a bad traced argument.
    ``solution``: the `diffrax.Solution` (dense interpolation via ``solution.evaluate(t)`` when
    ``dense=True``; with `StoredAdjoint` one that holds only ``stats``, the steps taken and
    accepted; None for fixed-grid stepping). Padding entries (times after an event stop) are
    ``inf`` in ``ts``.
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
    (located by a Newton root-find on the dense output).

    ``coordinate``: a key of the state (``"q"``, ``"p"``, ``"f"``, ``"a"``); ``index``: an int
    inside it (checked when the solve traces the event: JAX indexing would clamp an index out of
    range into another coordinate); ``value``: finite (checked now when concrete)."""
    check_choice(coordinate, ("q", "p", "f", "a"), "stop_when: coordinate")
    index = as_count(index, "stop_when: index", minimum=0)
    check_or_defer(
        [
            (
                lambda xp, v: ~xp.isfinite(v),
                "stop_when: value must be finite",
                {"value": as_scalar(value, "stop_when: value")},
            )
        ]
    )

    def cond(t, y, args, **kwargs):
        if coordinate not in y or index >= jnp.shape(y[coordinate])[0]:
            raise ValueError(
                f"stop_when: y[{coordinate!r}] has no entry {index} (the state's "
                f"{coordinate!r} has shape {jnp.shape(y.get(coordinate))})"
            )
        return y[coordinate][index] - value

    return diffrax.Event(cond, root_finder=optx.Newton(rtol=1e-10, atol=1e-10))


class SimulationError(RuntimeError):
    """A solve that failed at run time: the step budget ran out, the state became NaN or inf, the
    step size fell below ``dtmin``. `simulate` and `simulate_sde` raise it with ``throw=True``
    when they run outside jit (inside the caller's jit the same message arrives through
    `equinox.error_if`, wrapped by JAX's runtime error); with ``throw=False`` the failure is the
    trajectory's ``result`` instead."""


# What each failed diffrax result means for a jaxbio solve (the rest keep diffrax's message).
_FAILURES = {
    "max_steps_reached": "the step budget max_steps={max_steps} ran out before t1; increase max_steps, loosen "
    "rtol/atol, or look for a blow-up (a state that grows without bound needs ever smaller steps)",
    "nonfinite": "the state became NaN or inf: the system blew up, a fixed step is too large for it (take "
    "more steps or an adaptive solve), or its vector field is not finite there (a drive, "
    "dissipation or fitness law returning NaN/inf)",
    "dt_min_reached": "the step size fell below the step-size controller's dtmin",
}


def _raise(x, fn: str, result, deferred, ts, max_steps):
    """``x`` (the outputs) unchanged after the ``throw=True`` checks: a failed deferred argument
    check or a failed ``result``. All concrete: `SimulationError` now. Traced: one
    `equinox.branched_error_if` on the outputs (whatever output is read, the check runs before
    it), naming the first failed argument check, else the failure."""
    reasons = {name: reason.format(max_steps=max_steps) for name, reason in _FAILURES.items()}
    if not deferred and not result.is_traced():
        if bool(diffrax.is_okay(result)):
            return x
        reason = next(
            (r for name, r in reasons.items() if bool(result == getattr(diffrax.RESULTS, name))),
            diffrax.RESULTS[result],
        )
        reached = np.asarray(ts)[np.isfinite(np.asarray(ts))]
        where = f" (last time saved: t={reached.max():.6g})" if reached.size else ""
        raise SimulationError(f"{fn}: the solve failed{where}: {reason}")
    failures = [
        (result == getattr(diffrax.RESULTS, name), f"{fn}: the solve failed: {reason}")
        for name, reason in reasons.items()
    ]
    failures.append(
        (~diffrax.is_okay(result), f"{fn}: the solve failed (see the trajectory's result with throw=False)")
    )
    return raise_if(x, list(deferred) + failures)


def _all_finite(tree) -> Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def _stop_nonfinite(controller, t0, t1, y0, y1_candidate, keep, tprev, tnext, result, adaptive):
    """End the solve with ``RESULTS.nonfinite`` when the accepted state is NaN/inf, or when a
    step produced a NaN/inf candidate and cannot be retried smaller (a fixed step, or an
    adaptive step already shrunk to round-off of the time span)."""
    bad_candidate = ~_all_finite(y1_candidate)
    if adaptive:
        dtype = jnp.result_type(t0)
        tiny = 1e3 * jnp.finfo(dtype).eps * jnp.maximum(jnp.maximum(jnp.abs(t0), jnp.abs(t1)), controller.span)
        bad_candidate = bad_candidate & (jnp.abs(t1 - t0) <= tiny)
    stop = ~_all_finite(y0) | bad_candidate
    keep = keep & ~stop
    tprev = jnp.where(stop, t0, tprev)
    tnext = jnp.where(stop, t1, tnext)
    result = diffrax.RESULTS.where(stop & diffrax.is_okay(result), diffrax.RESULTS.nonfinite, result)
    return keep, tprev, tnext, result


class _StopNonfinite:
    """The methods shared by the two controller wrappers below: delegate to ``controller`` and end
    the solve with ``RESULTS.nonfinite`` at the first NaN/inf state (`_stop_nonfinite`)."""

    _adaptive = False

    def wrap(self, direction):
        return eqx.tree_at(lambda s: s.controller, self, self.controller.wrap(direction))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        keep, tprev, tnext, jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state
        )
        keep, tprev, tnext, result = _stop_nonfinite(
            self, t0, t1, y0, y1_candidate, keep, tprev, tnext, result, adaptive=self._adaptive
        )
        return keep, tprev, tnext, jump, state, result


class _FixedStopNonfinite(_StopNonfinite, diffrax.AbstractStepSizeController):
    """A fixed-step controller (``ConstantStepSize``, ``StepTo``) that ends the solve with
    ``RESULTS.nonfinite`` at the first NaN/inf state instead of stepping NaN on to ``t1``."""

    controller: diffrax.AbstractStepSizeController
    span: Array


class _AdaptiveStopNonfinite(_StopNonfinite, diffrax.AbstractAdaptiveStepSizeController):
    """An adaptive controller (``PIDController``, ``ClipStepSizeController``, …) that ends the
    solve with ``RESULTS.nonfinite`` when a NaN/inf candidate persists down to a step of
    round-off size (the controller alone shrinks the step on and on until ``max_steps``)."""

    controller: diffrax.AbstractAdaptiveStepSizeController
    span: Array
    _adaptive = True

    @property
    def rtol(self):
        return self.controller.rtol

    @property
    def atol(self):
        return self.controller.atol

    @property
    def norm(self):
        return self.controller.norm


def _stop_on_nonfinite(controller, span):
    if isinstance(controller, diffrax.AbstractAdaptiveStepSizeController):
        return _AdaptiveStopNonfinite(controller, span)
    return _FixedStopNonfinite(controller, span)


class StoredAdjoint(diffrax.AbstractAdjoint):
    """``simulate(..., adjoint=StoredAdjoint())`` (`simulate`'s default where it applies): jaxbio's
    own adaptive Tsit5 loop, whose reverse mode stores every accepted step's stages and runs
    their exact adjoint (`jaxbio._tsit5`). The same solve as Diffrax's (Tsit5, the PID controller with ``rtol``/``atol``, a first step of
    0.01 s, ``ts`` saved by the dense output: the states equal Diffrax's to round-off) and the same
    gradient as Diffrax's `RecursiveCheckpointAdjoint`, but the vector field is traced once
    forward and once in reverse instead of into every part of Diffrax's loop, and nothing is
    recomputed: the velocity form's reverse pass takes each stage's ``q̈`` and the Cholesky factor
    of ``M + J`` (kept per stage, up to 12 coordinates) from the forward pass. For training
    through batches of short solves, in the velocity form: the first value-and-gradient call
    and the step are faster than through Diffrax's loop (benchmarks/learning.py, path
    ``default`` against ``velocity``; benchmarks/README.md, "Measurements behind design choices").

    It excludes a ``solver`` other than Tsit5, ``dt0``, ``stepsize_controller``, ``saveat``,
    ``event`` and ``dense`` (``ValueError``); `Trajectory.solution` is None. Reverse mode only
    (``jax.jvp`` raises, as with `RecursiveCheckpointAdjoint`); ``t0``, ``t1`` and ``ts`` are not
    differentiated.

    ``steps``: the accepted steps kept for reverse mode (``simulate``'s ``max_steps`` bounds
    the steps taken). A differentiated solve that takes more has the same values, and its
    gradient raises naming this option (an `equinox.error_if`; NaN with ``throw=False``), never
    a wrong number: raise ``steps``, or pass Diffrax's `RecursiveCheckpointAdjoint` (memory
    of about ``sqrt(2·max_steps)`` states, more recomputation). Reverse mode stores ``8 ·
    steps`` numbers per state entry and trajectory, and in velocity form up to 12 coordinates
    ``7 · nv(nv+1)/2 · steps`` more for the factors (arm7's 15 states and 7 coordinates, 1024
    steps: 1.3 MB in float32), allocated on every differentiated call."""

    steps: int = eqx.field(static=True, default=1024)

    def __check_init__(self):
        as_count(self.steps, "StoredAdjoint: steps")

    def loop(self, **kwargs):
        raise ValueError(
            "StoredAdjoint runs jaxbio's own solve loop: pass it to jaxbio.simulate, not to diffrax.diffeqsolve"
        )


class FixedGrid(eqx.Module):
    """The step-size controller of fixed-grid stepping (``jb.simulate(...,
    stepsize_controller=FixedGrid(steps))``): exactly ``steps`` solver steps on a grid from ``t0``
    to ``t1``, every grid point saved (``T = steps + 1``), differentiated through the steps
    directly (forward and reverse mode). It excludes ``dt0``, ``saveat``/``ts``, ``event``,
    ``dense`` and ``adjoint`` (``ValueError``).

    - ``steps`` (static int ≥ 1): the number of steps.
    - ``spacing``: ``"uniform"`` or ``"quadratic"`` (``t = t0 + (t1 − t0) u²``, equal steps in
      ``u``; see the module doc).
    - ``checkpoint``: reverse mode keeps only the state at each grid point and recomputes each
      step's stages when differentiating (`jax.checkpoint` of the step; the same gradient, about
      one more forward solve of time). Without it reverse mode stores every stage's
      intermediates: ~60 kB per step per trajectory for the double pendulum (float64), so
      ``grad`` of 1,000 trajectories of 2,000 steps needs ~120 GB instead of ~0.2 GB
      (benchmarks/memory.py). No effect on forward mode.
    """

    steps: int = eqx.field(static=True)
    spacing: str = eqx.field(static=True, default="uniform")
    checkpoint: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        as_count(self.steps, "FixedGrid: steps")
        check_choice(self.spacing, SPACINGS, "FixedGrid: spacing")
        check_flag(self.checkpoint, "FixedGrid: checkpoint")


_TYPES = {
    "system": HamiltonianSystem,
    "solver": diffrax.AbstractSolver,
    "stepsize_controller": (diffrax.AbstractStepSizeController, FixedGrid),
    "saveat": diffrax.SaveAt,
    "event": diffrax.Event,
    "adjoint": diffrax.AbstractAdjoint,
}


def _check_types(fn: str, **given) -> None:
    """``ValueError`` naming the argument when a module argument is not of its kind (None = default)."""
    for name, value in given.items():
        kind = _TYPES[name]
        if value is not None and not isinstance(value, kind):
            kinds = " or ".join(
                f"{k.__module__.split('.')[0]}.{k.__name__}" for k in (kind if isinstance(kind, tuple) else (kind,))
            )
            raise ValueError(f"{fn}: {name} must be a {kinds}, got {type(value).__name__}")


def _check_state(fn: str, system: HamiltonianSystem, y0, form: str = "hamiltonian") -> dict:
    """``y0`` with float leaves of the system's shapes; ``ValueError`` naming the key (and the
    first bad index, for a concrete NaN/inf). ``form="velocity"`` also takes velocities ``qd``
    instead of momenta ``p``."""
    motion = "qd" if form == "velocity" and isinstance(y0, dict) and "qd" in y0 else "p"
    keys = {"q", motion, "f", "a"} if system.stateful else {"q", motion, "f"}
    if not isinstance(y0, dict) or set(y0) != keys:
        got = sorted(y0) if isinstance(y0, dict) else type(y0).__name__
        also = "; with form='velocity', 'qd' instead of 'p'" if motion == "p" else ""
        raise ValueError(
            f"{fn}: y0 must be a dict with keys {sorted(keys)} (see HamiltonianSystem.initial_state{also}), got {got}"
        )
    shapes = {"q": (system.nq,), motion: (system.nv,), "f": (system.fitness.size,)}
    if system.stateful:
        shapes["a"] = (system.drive.state_size,)
    q = as_real(y0["q"], f"{fn}: y0['q']")
    model = jnp.result_type(system.tree.masses)
    if jnp.result_type(q, model) != q.dtype:  # the vector field would come back wider than the state
        raise ValueError(
            f"{fn}: y0['q'] has dtype {q.dtype}, narrower than the model's {model}; cast the state "
            f"to {model} or the model with system.tree.astype(jnp.{q.dtype}) (HamiltonianSystem"
            f"(tree.astype(...)))"
        )
    out = {}
    for key, shape in shapes.items():
        name = f"{fn}: y0[{key!r}]"
        x = as_real(y0[key], name, like=q)
        if x.shape != shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {shape}")
        out[key] = check_finite(x, name, check=False, locate=lambda idx, count: f" (first at index {idx[0]})")
    return out


def _state_checks(fn: str, y0: dict) -> list:
    return [
        (lambda xp, x: ~xp.all(xp.isfinite(x)), f"{fn}: y0[{key!r}] contains NaN or inf", {f"y0[{key!r}]": x})
        for key, x in y0.items()
    ]


def _span_checks(fn: str, t0, t1) -> list:
    return [
        (lambda xp, t0: ~xp.isfinite(t0), f"{fn}: t0 must be finite", {"t0": t0}),
        (lambda xp, t1: ~xp.isfinite(t1), f"{fn}: t1 must be finite", {"t1": t1}),
        # t1 − t0 at least the smallest normal number: XLA on CPU flushes subnormal numbers to 0, so
        # a subnormal span (t0 = −2e-313, t1 = 0) is empty under jit and must be refused eagerly too
        (
            lambda xp, t0, t1: ~(t1 - t0 >= xp.finfo(xp.result_type(t0, t1)).tiny),
            f"{fn}: t1 must be greater than t0 (the solve runs forward in time; by at least the smallest normal "
            f"number)",
            {"t0": t0, "t1": t1},
        ),
    ]


def _step_checks(fn: str, t0, t1, dt0, max_steps: int, fixed: bool) -> list:
    checks = [(lambda xp, dt0: ~(xp.isfinite(dt0) & (dt0 > 0)), f"{fn}: dt0 must be positive and finite", {"dt0": dt0})]
    if fixed:  # (t1 − t0)/dt0 fixed steps: refuse a budget that cannot reach t1 (no grinding)
        checks.append(
            (
                lambda xp, t0, t1, dt0: (t1 - t0) > max_steps * dt0,
                f"{fn}: dt0 is too small: (t1 - t0)/dt0 fixed steps exceed max_steps={max_steps}; "
                f"increase dt0 or max_steps",
                {"t0": t0, "t1": t1, "dt0": dt0},
            )
        )
    return checks


def _save_checks(fn: str, t0, t1, ts, name: str = "ts") -> list:
    if ts.ndim != 1 or ts.shape[0] < 1:
        raise ValueError(f"{fn}: {name} must be a non-empty vector of times, got shape {tuple(ts.shape)}")
    return [
        (lambda xp, ts: ~xp.all(xp.isfinite(ts)), f"{fn}: {name} must be finite", {name: ts}),
        (lambda xp, ts: xp.any(ts[1:] <= ts[:-1]), f"{fn}: {name} must be strictly increasing", {name: ts}),
        (
            lambda xp, t0, t1, ts: xp.any((ts < t0) | (ts > t1)),
            f"{fn}: {name} must lie in [t0, t1]",
            {"t0": t0, "t1": t1, name: ts},
        ),
    ]


#: an adaptive solve's default ``rtol`` and ``atol`` by the width of the state's dtype (bytes):
#: float64 1e-8; float32 1e-5, a hundred times its resolution (eps 1.2e-7)
DEFAULT_TOLERANCES = {8: 1e-8, 4: 1e-5}


def default_tolerance(dtype) -> float:
    """`simulate`'s default ``rtol`` and ``atol`` for a state of ``dtype`` (`DEFAULT_TOLERANCES`)."""
    return DEFAULT_TOLERANCES.get(jnp.dtype(dtype).itemsize, 1e-5)


def _tolerance_checks(fn: str, rtol, atol, dtype) -> list:
    eps = float(jnp.finfo(dtype).eps)
    return [
        (
            lambda xp, rtol: (rtol > 0) & (rtol < eps),
            f"{fn}: rtol is below the resolution of the state's {jnp.dtype(dtype).name} (eps {eps:.3g}), so no step can "
            f"meet it; give rtol ≥ {eps:.3g} (the default for {jnp.dtype(dtype).name} is {default_tolerance(dtype):g}) "
            f"or a float64 state",
            {"rtol": rtol},
        ),
        (lambda xp, rtol: ~(xp.isfinite(rtol) & (rtol >= 0)), f"{fn}: rtol must be finite and ≥ 0", {"rtol": rtol}),
        (lambda xp, atol: ~(xp.isfinite(atol) & (atol >= 0)), f"{fn}: atol must be finite and ≥ 0", {"atol": atol}),
        (
            lambda xp, rtol, atol: (rtol == 0) & (atol == 0),
            f"{fn}: rtol and atol must not both be 0",
            {"rtol": rtol, "atol": atol},
        ),
    ]


def _is_sub(s) -> bool:
    return isinstance(s, diffrax.SubSaveAt)


def _saveat_ts(saveat: diffrax.SaveAt) -> list:
    """The save times of every ``SubSaveAt`` in ``saveat`` that has some."""
    subs = jax.tree_util.tree_leaves(saveat.subs, is_leaf=_is_sub)
    return [s.ts for s in subs if _is_sub(s) and s.ts is not None]


def _saveat_checks(fn: str, t0, t1, saveat: diffrax.SaveAt) -> list:
    checks = []
    for i, ts in enumerate(_saveat_ts(saveat)):
        name = f"saveat.ts[{i}]" if i else "saveat.ts"
        checks += _save_checks(fn, t0, t1, as_real(ts, f"{fn}: {name}"), name=name)
    return checks


def _replace_saveat_ts(saveat: diffrax.SaveAt, fn) -> diffrax.SaveAt:
    """``saveat`` with each ``SubSaveAt``'s times ``ts`` replaced by ``fn(ts)``."""

    def sub(s):
        return eqx.tree_at(lambda s: s.ts, s, fn(s.ts)) if _is_sub(s) and s.ts is not None else s

    return eqx.tree_at(
        lambda a: a.subs, saveat, jax.tree_util.tree_map(sub, saveat.subs, is_leaf=_is_sub), is_leaf=lambda x: x is None
    )


def _trajectory(fn, system, ts, ys, result, sol, throw, deferred=(), requested=None, max_steps=None, derived=True):
    """The `Trajectory` of a solve, with NaN wherever nothing valid was computed.

    ``ts`` ``(T,)``, ``ys`` the state dict with leaves ``(T, ·)``. A saved state that is NaN or
    inf turns an otherwise successful ``result`` into ``RESULTS.nonfinite`` and its row into NaN;
    a failed ``deferred`` argument check (traced, see `check_or_defer`) makes every output NaN
    with ``RESULTS.nonfinite``; ``requested`` (the save times asked for, when known) makes a
    failed solve's rows saved at other times NaN (diffrax saves the last state it reached for
    ``t1``). Rows after an event stop stay diffrax's padding (``ts`` inf). ``throw`` raises on
    failure (`_raise`). ``derived=False``: the outputs not integrated (``p`` or ``qd``, and
    ``energy``) are None and never traced.
    """
    # rows checked on the solved state itself, so that the outputs derived from it below (momenta
    # or velocities, energy) stay dead code, left out by XLA, for a caller who does not read them
    finite_rows = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x), axis=-1) for x in ys.values()]), axis=0)
    ys, solved_qd = _from_form(system, ys, momenta=derived)
    bad = any_bad(deferred)
    valid = jnp.isfinite(ts)
    result = diffrax.RESULTS.where(
        diffrax.is_okay(result) & ~jnp.all(finite_rows | ~valid), diffrax.RESULTS.nonfinite, result
    )
    nan_rows = valid & ~finite_rows
    if bad is not None:
        result = diffrax.RESULTS.where(bad, diffrax.RESULTS.nonfinite, result)
        nan_rows = nan_rows | bad
        ts = jnp.where(bad, jnp.nan, ts)
    if requested is not None:
        nan_rows = nan_rows | (~diffrax.is_okay(result) & (ts != requested))
    ys = {k: jnp.where(nan_rows[:, None], jnp.nan, x) for k, x in ys.items()}
    if not system.tree.is_axial:  # unit quaternions on output (see HamiltonianSystem)
        ys["q"] = jax.vmap(normalize, in_axes=(None, 0))(system.tree, ys["q"])
    if derived:
        qd, energy = _derived(system, ys, solved_qd, valid & ~nan_rows)
        qd = jnp.where(nan_rows[:, None], jnp.nan, jnp.where(valid[:, None], qd, jnp.inf))
        energy = jnp.where(nan_rows, jnp.nan, jnp.where(valid, energy, jnp.inf))
    else:
        qd = None if solved_qd is None else jnp.where(nan_rows[:, None], jnp.nan, solved_qd)
        energy = None
    out = (ts, ys["q"], ys.get("p"), qd, ys["f"], energy, ys.get("a"))
    if throw:
        out = _raise(out, fn, result, deferred, ts, max_steps)
    ts, q, p, qd, f, energy, a = out
    return Trajectory(ts, q, p, qd, f, energy, result, sol, a)


def _derived(system, ys: dict, solved_qd, ok_rows) -> tuple[Array, Array]:
    """``(qd, energy)`` at the saved rows ``ok_rows`` (others computed at ``q = p = 0``, to be
    masked): the velocities solved for or ``(M + J)⁻¹ p``, and ``H = ½ pᵀq̇ + V(q)`` (with the
    ``q̇`` just solved for: no second factorisation of ``M``)."""
    safe_q = jnp.where(ok_rows[:, None], ys["q"], 0.0)
    safe_p = jnp.where(ok_rows[:, None], ys["p"], 0.0)
    qd = (
        jax.vmap(system.velocities)(safe_q, safe_p)
        if solved_qd is None
        else jnp.where(ok_rows[:, None], solved_qd, 0.0)
    )
    energy = 0.5 * jnp.sum(safe_p * qd, axis=-1) + jax.vmap(potential_energy, in_axes=(None, 0))(system.tree, safe_q)
    return qd, energy


def simulate(
    system: HamiltonianSystem,
    y0: dict,
    t0: float,
    t1: float,
    *,
    solver: diffrax.AbstractSolver | None = None,
    dt0: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
    saveat: diffrax.SaveAt | None = None,
    ts=None,
    event: diffrax.Event | None = None,
    dense: bool = False,
    max_steps: int = 100_000,
    adjoint: diffrax.AbstractAdjoint | None = None,
    throw: bool = True,
    form: str | None = None,
    derived: bool = True,
) -> Trajectory:
    """Integrate the Hamilton equations of ``system`` from ``y0`` over ``[t0, t1]`` (s).

    Args:
        system: the `HamiltonianSystem`.
        y0: ``{"q": (n,), "p": (n,), "f": (k,)}``, e.g. ``system.initial_state(q0, qd0)``; with
            ``form="velocity"`` also ``{"q", "qd", "f"}`` (``system.initial_state(q0, qd0,
            form="velocity")``: no mass matrix computed for the start).
        t0, t1: start and end time, s (``t1 > t0``). Times (``t0``, ``t1``, ``dt0``, ``ts``) are
            cast to the state's dtype: a float32 ``y0`` gives a float32 solve under x64 too.
        solver: any Diffrax ODE solver (default `diffrax.Tsit5`).
        dt0: initial (adaptive) or fixed step, s. With ``stepsize_controller=None`` and a
            ``dt0``, steps are fixed; without ``dt0`` a PID controller with ``rtol``/``atol``
            adapts them.
        stepsize_controller: any Diffrax controller, or `FixedGrid` (``FixedGrid(steps,
            spacing="uniform", checkpoint=False)``): fixed-grid stepping, every grid point saved
            (``T = steps + 1``), differentiated through the steps (excludes ``dt0``,
            ``saveat``/``ts``, ``event``, ``dense``, ``adjoint``).
        rtol, atol: the adaptive solve's tolerances; by default by the state's dtype
            (`default_tolerance`: 1e-8 for float64, 1e-5 for float32). An ``rtol`` below the
            dtype's resolution (``finfo(dtype).eps``: 1e-8 in float32) is refused, naming it.
        saveat / ts: what to save (default: the final state only); ``ts`` is a shortcut for
            ``SaveAt(ts=ts)``.
        event: a `diffrax.Event`, e.g. `stop_when` ``(index, value)``.
        dense: keep the dense interpolant (``trajectory.solution.evaluate(t)``).
        max_steps: step budget; reaching it raises (``throw=True``) or sets ``result``.
        adjoint: how gradients are computed. By default (None): `StoredAdjoint` (jaxbio's own
            Tsit5 loop, every step's stages kept for an exact reverse pass) when the solve is
            differentiated in reverse mode at this call and nothing excludes it (another
            ``solver``, ``dt0``, ``stepsize_controller``, ``saveat``, ``event``, ``dense``, a
            differentiated time ``t0``, ``t1`` or ``ts``); else Diffrax's
            `RecursiveCheckpointAdjoint` (see the module doc). The two give the same states to
            round-off and the same gradients. Any Diffrax adjoint may be given. Reverse mode is
            seen at the call when the system's arrays or ``y0`` are traced by it: under
            ``jax.grad(jax.jit(f))`` the jit hides it (the defaults are then the forward
            solve's, differentiated correctly but more slowly); put `jax.jit` outside.
        throw: raise on failure (max_steps, non-finite state); otherwise check ``result``.
        form: the state the solver integrates: ``"hamiltonian"`` (``(q, p)``, Ivancevic's
            (2009) equations) or ``"velocity"`` (``(q, q̇)``, `HamiltonianSystem.velocity_field`:
            ``q̈ = (M + J)⁻¹ (F − ∂R/∂q̇ − ∂U/∂q − C q̇ − g)``). The same trajectory up to the
            discretisation (the `Trajectory` is the same, ``p = (M + J) q̇`` at the saved
            times). By default (None): the velocity form when the default adjoint is
            `StoredAdjoint` (an adaptive solve differentiated in reverse mode at this call, see
            ``adjoint``) and the form applies (1-DOF joints and a Rayleigh dissipation) — its reverse mode differentiates the wrench recursion once instead of
            ``∂T/∂q`` (a second derivative), under `jax.vmap` by its batch-last adjoint —, else
            the Hamiltonian form, whose forward solve under `jax.vmap` runs a fused batch-last
            kernel (several times faster for the double pendulum). The adaptive solve's error
            control measures ``q̇`` or ``p``, so the steps taken (and the solution's round-off
            level) differ slightly between the two. A start from velocities (``initial_state(q0,
            qd0, form="velocity")``) skips the mass matrix of the start.
        derived: compute the outputs derived from the integrated state at the saved times: the
            velocities ``qd = (M + J)⁻¹ p`` (Hamiltonian form) or the momenta ``p = (M + J) q̇``
            (velocity form), and the ``energy``. ``False`` leaves those None (the integrated
            state, ``q``, ``f`` and ``a`` are unchanged): a loss that reads only the state then
            never traces their kernels, so its first compile is shorter (the double pendulum's
            value-and-gradient step in benchmarks/learning.py; benchmarks/README.md, "Measurements behind design choices"). The same solve.

    Returns:
        a `Trajectory`.

    Errors and NaN (the same rule for every check):

    - Arguments that are concrete (not traced) are checked before anything is traced, with a
      ``ValueError`` naming the argument and its value: ``t0``, ``t1`` (finite, ``t1 > t0``),
      ``dt0`` (finite, > 0; with fixed steps ``(t1 − t0)/dt0 ≤ max_steps``), ``ts`` and
      ``saveat`` times (finite, strictly increasing, inside ``[t0, t1]``), ``rtol``/``atol``
      (finite, ≥ 0, not both 0), ``max_steps`` (a static int ≥ 1), and ``y0`` (its
      keys and shapes, and NaN/inf, naming the key and index).
    - The same checks on traced values (``t1``, ``y0``, … inside the caller's `jax.jit`,
      `jax.vmap` or `jax.grad`) run on the device: with ``throw=True`` as an `equinox.error_if`
      naming the argument (JAX wraps its message in a ``JaxRuntimeError``, ``EQX_ON_ERROR``
      tunes it; the check costs one device-to-host predicate per call); with ``throw=False`` no
      error is raised: no step is taken, every output is NaN and ``result`` is
      ``diffrax.RESULTS.nonfinite``.
    - A failed solve (the same two ways): with ``throw=True`` a `SimulationError` outside jit
      (an `equinox.error_if` inside); with ``throw=False`` ``result`` says why:
      ``max_steps_reached``, ``nonfinite`` (the state became NaN/inf: the solve stops at the
      first such step instead of shrinking it until ``max_steps``) or ``dt_min_reached``, and
      every saved state the solve did not reach is NaN (its ``ts`` entry is the time reached
      for ``t1``, inf for ``ts`` not reached). ``successful`` and ``event_occurred`` are
      success. NaN in an output always means "not computed", never a number.
    """
    fn = "simulate"
    derived = check_flag(derived, f"{fn}: derived")
    _check_types(
        fn,
        system=system,
        solver=solver,
        stepsize_controller=stepsize_controller,
        saveat=saveat,
        event=event,
        adjoint=adjoint,
    )
    # an adaptive solve in reverse mode (detected at this call: a jax.grad, jax.vjp or
    # equinox.filter_value_and_grad around it, jit outside or not): the defaults become the stored
    # loop and the velocity form, whose reverse pass costs a few forward passes; elsewhere the
    # Hamiltonian form on Diffrax's loop, the faster forward solve (see the docstring)
    grid = stepsize_controller if isinstance(stepsize_controller, FixedGrid) else None
    stored = (
        adjoint is None
        and grid is None
        and _reverse_mode((system, y0))
        and _stored_applies(solver, dt0, stepsize_controller, saveat, event, dense, t0, t1, ts)
    )
    if form is None:
        form = "velocity" if stored and _velocity_form_applies(system) else "hamiltonian"
    check_choice(form, FORMS, f"{fn}: form")
    if form == "velocity":
        try:
            system.check_velocity_form()
        except ValueError as e:
            raise ValueError(f"{fn}: form='velocity': {str(e).removeprefix('velocity form: ')}") from None
    y0 = _check_state(fn, system, y0, form)
    t0, t1 = as_scalar(t0, f"{fn}: t0"), as_scalar(t1, f"{fn}: t1")
    max_steps = as_count(max_steps, f"{fn}: max_steps")
    checks = _span_checks(fn, t0, t1) + _state_checks(fn, y0)
    if grid is not None:
        clash = _given(
            dt0=dt0,
            saveat=saveat,
            ts=ts,
            event=event,
            adjoint=adjoint,
            dense=dense,
        )
        if clash:
            raise ValueError(f"{fn}: stepsize_controller=FixedGrid (fixed-grid stepping) excludes {', '.join(clash)}")
        return _simulate_grid(
            system,
            y0,
            t0,
            t1,
            grid.steps,
            grid.spacing,
            solver,
            throw,
            check_or_defer(checks),
            checkpoint=grid.checkpoint,
            form=form,
            derived=derived,
        )
    if saveat is not None and (ts is not None or dense):
        raise ValueError(f"{fn}: give saveat or ts/dense, not both")
    if isinstance(adjoint, StoredAdjoint):
        clash = _stored_excludes(solver, dt0, stepsize_controller, saveat, event, dense)
        if clash:
            raise ValueError(
                f"{fn}: adjoint=StoredAdjoint() runs jaxbio's own adaptive Tsit5 loop (ts= or t1 "
                f"saved, rtol/atol), which excludes {', '.join(clash)}"
            )
    if stepsize_controller is None:
        if dt0 is None:
            tol = default_tolerance(jnp.result_type(y0["q"]))
            rtol = as_scalar(tol if rtol is None else rtol, f"{fn}: rtol")
            atol = as_scalar(tol if atol is None else atol, f"{fn}: atol")
            checks += _tolerance_checks(fn, rtol, atol, jnp.result_type(y0["q"]))
    fixed = stepsize_controller is None or isinstance(stepsize_controller, diffrax.ConstantStepSize)
    if dt0 is not None:
        dt0 = as_scalar(dt0, f"{fn}: dt0")
        checks += _step_checks(fn, t0, t1, dt0, max_steps, fixed=fixed and event is None)
    if saveat is None:
        if ts is not None:
            ts = as_real(ts, f"{fn}: ts")
            checks += _save_checks(fn, t0, t1, ts)
    else:
        checks += _saveat_checks(fn, t0, t1, saveat)
    deferred = check_or_defer(checks)
    bad = any_bad(deferred)
    if bad is not None:  # traced and bad: a zero-length solve at a harmless time, outputs NaN
        t0 = jnp.where(bad, 0.0, t0)
        t1 = jnp.where(bad, t0, t1)
        dt0 = None if dt0 is None else jnp.where(bad, 1.0, dt0)
        if ts is not None:
            ts = jnp.where(bad, t0, ts)
        if saveat is not None:
            saveat = _replace_saveat_ts(saveat, lambda sts: jnp.where(bad, t0, sts))
        if stepsize_controller is None and dt0 is None:
            rtol, atol = jnp.where(bad, 1e-3, rtol), jnp.where(bad, 1e-3, atol)
    # times and tolerances in the state's dtype: Diffrax promotes the state to the dtype of
    # t0/t1/dt0, so Python floats under jax_enable_x64 would turn a float32 solve into float64
    time_dtype = jnp.result_type(y0["q"])
    if stepsize_controller is None:
        if dt0 is None:
            stepsize_controller = diffrax.PIDController(
                rtol=jnp.asarray(rtol, time_dtype), atol=jnp.asarray(atol, time_dtype)
            )
        else:
            stepsize_controller = diffrax.ConstantStepSize()
    t0, t1 = jnp.asarray(t0, time_dtype), jnp.asarray(t1, time_dtype)
    dt0 = None if dt0 is None else jnp.asarray(dt0, time_dtype)
    ts = None if ts is None else jnp.asarray(ts, time_dtype)
    requested = None
    if saveat is None:  # the times asked for: a failed solve's rows saved at others become NaN
        saveat = diffrax.SaveAt(ts=ts, dense=dense) if ts is not None else diffrax.SaveAt(t1=True, dense=dense)
        requested = ts if ts is not None else t1[None]
    y_start = _to_form(system, y0, form)
    if stored:
        adjoint = StoredAdjoint()
    if isinstance(adjoint, StoredAdjoint):
        return _simulate_stored(
            system, y_start, t0, t1, ts, rtol, atol, max_steps, adjoint.steps, form, throw, deferred, derived
        )
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(solver_field(system, form)),
        diffrax.Tsit5() if solver is None else solver,
        t0,
        t1,
        dt0,
        y_start,
        saveat=saveat,
        stepsize_controller=_stop_on_nonfinite(stepsize_controller, t1 - t0),
        event=event,
        max_steps=max_steps,
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
        throw=False,
    )
    return _trajectory(fn, system, sol.ts, sol.ys, sol.result, sol, throw, deferred, requested, max_steps, derived)


def _given(dense: bool, **options) -> list[str]:
    """The names of the ``options`` given (not None), then ``"dense"`` if ``dense``: what a mode
    of `simulate` that excludes them names in its ``ValueError``."""
    return [k for k, v in options.items() if v is not None] + (["dense"] if dense else [])


def _to_form(system, y0: dict, form: str) -> dict:
    """``y0`` (``q, p, …``) as the state the solver integrates: itself, or ``p`` replaced by the
    velocities ``qd`` for ``form="velocity"`` (a ``y0`` with ``qd`` given as it is)."""
    if form != "velocity" or "qd" in y0:
        return y0
    y = {k: v for k, v in y0.items() if k != "p"}
    y["qd"] = system.velocities(y0["q"], y0["p"])
    return y


def _from_form(system, ys: dict, momenta: bool = True) -> tuple[dict, Array | None]:
    """``(ys with "p", qd or None)``: a saved velocity-form trajectory (leaves ``(T, ·)``) back
    to momenta ``p = (M + J) q̇`` (rows that are not finite are kept out of ``M``); with
    ``momenta=False`` only ``qd`` split off (no ``"p"``)."""
    if "qd" not in ys:
        return ys, None
    q, qd = ys["q"], ys["qd"]
    if not momenta:
        return {k: v for k, v in ys.items() if k != "qd"}, qd
    ok = jnp.all(jnp.isfinite(q), -1, keepdims=True) & jnp.all(jnp.isfinite(qd), -1, keepdims=True)
    p = jax.vmap(system.momenta)(jnp.where(ok, q, 0.0), jnp.where(ok, qd, 0.0))
    out = {k: v for k, v in ys.items() if k != "qd"}
    out["p"] = jnp.where(ok, p, jnp.nan)
    return out, qd


@eqx.filter_jit
def _field(field, t, y):
    """``field(t, y)`` (a `solver_field`) behind one jit boundary: traced once per fixed-grid solve,
    however many times the solver, `jax.jacfwd` and `jax.vmap` transform it (the sprint fit traced
    ~1.4x longer without it)."""
    return field(t, y)


class _FlatField(eqx.Module):
    """A `solver_field` on the flat state vector ``x`` ``(d,)`` of `jax.flatten_util.ravel_pytree`."""

    field: Callable
    unravel: Callable = eqx.field(static=True)

    def __call__(self, t, x):
        return ravel_pytree(self.field(t, self.unravel(x)))[0]

    def with_aux(self, t, x):
        """``(value, aux)``: the value ``(d,)`` and what the wrapped field keeps for its
        linearisation (`jaxbio._tsit5._with_aux` of it: None when it keeps nothing)."""
        value, aux = _tsit5._with_aux(self.field, t, self.unravel(x))
        return ravel_pytree(value)[0], aux

    def aux_init(self, x):
        """Zeros like the wrapped field's ``aux`` (`jaxbio._tsit5._aux_init` of it), or None."""
        return _tsit5._aux_init(self.field, self.unravel(x))

    def at_output(self, k, aux=None) -> _FlatField:
        """The field linearised where its value ``k`` ``(d,)`` (and ``aux``, from `with_aux`) is
        known: `jaxbio._tsit5._at` of the wrapped field (`jaxbio.hamiltonian.solver_field`'s
        velocity form offers it; other fields are themselves)."""
        return _FlatField(_tsit5._at(self.field, self.unravel(k), aux), self.unravel)


def _velocity_form_applies(system: HamiltonianSystem) -> bool:
    """Whether `HamiltonianSystem.velocity_field` applies (1-DOF joints, a Rayleigh dissipation)."""
    try:
        system.check_velocity_form()
    except ValueError:
        return False
    return True


def _tracer_kinds(x) -> set[str]:
    """The class names of the tracers in ``x``'s leaves, `jax.vmap`'s looked through (a
    ``BatchTracer`` holds the value it batches): ``LinearizeTracer`` under reverse mode
    (`jax.grad`, `jax.vjp`), ``JVPTracer`` under forward mode, ``DynamicJaxprTracer`` for a
    `jax.jit` trace (which hides whether an outer transformation differentiates it)."""
    kinds = set()
    stack = list(jax.tree_util.tree_leaves(x))
    while stack:
        v = stack.pop()
        if isinstance(v, jax.core.Tracer):
            kind = type(v).__name__
            kinds.add(kind)
            if kind == "BatchTracer":
                stack.append(v.val)
    return kinds


def _reverse_mode(x) -> bool:
    """Whether ``x`` is differentiated in reverse mode at this call (and not in forward mode)."""
    kinds = _tracer_kinds(x)
    return "LinearizeTracer" in kinds and "JVPTracer" not in kinds


def _times_differentiated(x) -> bool:
    """Whether a time may carry a derivative: any tracer but `jax.jit`'s and `jax.vmap`'s."""
    return bool(_tracer_kinds(x) - {"BatchTracer", "DynamicJaxprTracer"})


def _stored_excludes(solver, dt0, controller, saveat, event, dense) -> list[str]:
    """What the call asks for that jaxbio's own Tsit5 loop (`StoredAdjoint`) lacks, by name: a
    solver other than Tsit5 itself (the loop runs its own tableau), ``dt0``, a step-size
    controller, ``saveat``, an event, the dense interpolant."""
    clash = _given(dt0=dt0, stepsize_controller=controller, saveat=saveat, event=event, dense=dense)
    if solver is not None and type(solver) is not diffrax.Tsit5:
        clash.insert(0, f"solver={type(solver).__name__}")
    return clash


def _stored_applies(solver, dt0, controller, saveat, event, dense, t0, t1, ts) -> bool:
    """Whether the stored loop can run the call (`_stored_excludes` names nothing) and no time is
    differentiated."""
    return not _stored_excludes(solver, dt0, controller, saveat, event, dense) and not _times_differentiated(
        (t0, t1, ts)
    )


def _simulate_stored(
    system, y_start, t0, t1, ts, rtol, atol, max_steps, stored_steps, form, throw, deferred, derived=True
) -> Trajectory:
    """`simulate` with ``adjoint=StoredAdjoint()``: `jaxbio._tsit5.solve` on the flat state, saving
    ``ts`` (or ``t1``); ``Trajectory.solution`` holds its ``stats`` (steps accepted and taken)."""
    dtype = jnp.result_type(t0)
    save = t1[None] if ts is None else ts
    flat0, unravel = ravel_pytree(y_start)
    xs, status, (accepted, attempted) = _tsit5.solve(
        (_FlatField(solver_field(system, form), unravel), flat0),
        t0,
        save,
        t1,
        jnp.asarray(rtol, dtype),
        jnp.asarray(atol, dtype),
        max_steps,
        stored_steps,
        throw,
    )
    result = diffrax.RESULTS.where(
        status == _tsit5.SUCCESSFUL,
        diffrax.RESULTS.successful,
        diffrax.RESULTS.where(status == _tsit5.MAX_STEPS, diffrax.RESULTS.max_steps_reached, diffrax.RESULTS.nonfinite),
    )
    reached = jnp.all(jnp.isfinite(xs), axis=-1)
    stats = {
        "num_steps": attempted,
        "num_accepted_steps": accepted,
        "num_rejected_steps": attempted - accepted,
        "max_steps": max_steps,
    }
    solution = diffrax.Solution(
        t0=t0,
        t1=t1,
        ts=None,
        ys=None,
        interpolation=None,
        stats=stats,
        result=result,
        solver_state=None,
        controller_state=None,
        made_jump=None,
        event_mask=None,
    )
    return _trajectory(
        "simulate",
        system,
        jnp.where(reached, save, jnp.inf),
        jax.vmap(unravel)(xs),
        result,
        solution,
        throw,
        deferred,
        save,
        max_steps,
        derived,
    )


def _simulate_grid(
    system, y0, t0, t1, steps, spacing, solver, throw, deferred, checkpoint=False, form="hamiltonian", derived=True
) -> Trajectory:
    """Fixed-grid stepping: ``steps`` solver steps in a `lax.scan` (see the module doc)."""
    bad = any_bad(deferred)
    dtype = jnp.result_type(y0["q"])
    t0 = jnp.asarray(t0, dtype)
    span = jnp.asarray(t1, dtype) - t0
    if bad is not None:  # traced and bad: steps of zero length, outputs NaN
        t0, span = jnp.where(bad, 0.0, t0), jnp.where(bad, 0.0, span)
    grid = jnp.linspace(0.0, 1.0, steps + 1, dtype=dtype)  # u
    # the solver steps one flat vector: its stage combinations are then one operation each,
    # not one per leaf of the state (a small system's step is mostly these)
    flat0, unravel = ravel_pytree(_to_form(system, y0, form))
    field = solver_field(system, form)
    if spacing == "quadratic":

        def rhs(u, x, args):
            return ravel_pytree(_field(field, t0 + span * u * u, unravel(x)))[0] * (2.0 * span * u)

        times = t0 + span * grid**2
    else:

        def rhs(u, x, args):
            return ravel_pytree(_field(field, t0 + span * u, unravel(x)))[0] * span

        times = t0 + span * grid
    ys = jax.vmap(unravel)(step_grid(rhs, grid, flat0, solver, checkpoint=checkpoint))
    return _trajectory(
        "simulate", system, times, ys, diffrax.RESULTS.successful, None, throw, deferred, derived=derived
    )


def step_grid(
    rhs, grid: Float[Array, " T"], x0: Float[Array, " d"], solver=None, *, checkpoint: bool = False
) -> Float[Array, "T d"]:
    """``x`` at every point of ``grid`` ``(T,)``: ``T − 1`` steps of ``solver`` (default
    ``diffrax.Tsit5(scan_kind="bounded")``, whose stage loop reverse mode can differentiate) on
    ``dx/du = rhs(u, x, args)`` from ``x0`` ``(d,)`` at ``grid[0]``, iterated in a `jax.lax.scan`
    without Diffrax's adaptive-loop machinery. The one fixed-grid stepper of `simulate`'s
    `FixedGrid` stepping and of `jaxbio.learning.controllers.rollout`. ``checkpoint``: wrap each step
    in `jax.checkpoint` (reverse mode stores the carry per step, not the stages; see `simulate`)."""
    solver = diffrax.Tsit5(scan_kind="bounded") if solver is None else solver
    term = diffrax.ODETerm(rhs)
    state = solver.init(term, grid[0], grid[1], x0, None)

    def step(carry, i):
        x, st = carry
        x1, _, _, st, _ = solver.step(term, grid[i], grid[i + 1], x, None, st, made_jump=False)
        return (x1, st), x1

    if checkpoint:
        step = jax.checkpoint(step)
    _, xs = jax.lax.scan(step, (x0, state), jnp.arange(grid.shape[0] - 1))
    return jnp.concatenate([x0[None], xs])


def hermite(
    ts: Float[Array, " T"], y: Float[Array, " T"], dydt: Float[Array, " T"], t: Float[ArrayLike, " k"]
) -> Float[Array, " k"]:
    """Cubic Hermite interpolation of ``y(t)`` from values ``y`` and slopes ``dydt`` at the
    increasing times ``ts`` (``T ≥ 2``), at ``t`` ``(k,)``; clamped to the first and last interval.
    Differentiable (the interval index is piecewise constant)."""
    if not (jnp.ndim(ts) == 1 and jnp.shape(ts) == jnp.shape(y) == jnp.shape(dydt) and jnp.shape(ts)[0] >= 2):
        raise ValueError(
            f"hermite: ts, y and dydt must be (T,) with T ≥ 2, got shapes "
            f"{jnp.shape(ts)}, {jnp.shape(y)}, {jnp.shape(dydt)}"
        )
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
    return (2 * u3 - 3 * u2 + 1) * y0 + (u3 - 2 * u2 + u) * h * d0 + (-2 * u3 + 3 * u2) * y1 + (u3 - u2) * h * d1


def crossing_times(
    traj: Trajectory, values: Float[ArrayLike, " k"], index: int = 0, *, newton_steps: int = 5
) -> Float[Array, " k"]:
    """Times [s] at which coordinate ``q[index]`` of a saved trajectory first reaches each of
    ``values`` (its unit), for a coordinate that does not decrease (a runner's distance).

    Event location on the dense output, after the solve: the cubic Hermite interpolant of
    ``q[index](t)`` from its values and velocities ``qd[index]`` at the saved times (a 1-DOF
    joint's ``q̇`` is its ``qd``) is inverted by ``newton_steps`` Newton steps inside the saved
    interval that brackets each value. Beyond the last saved point the last velocity is held.
    Differentiable: the derivative is the implicit one, ``∂t/∂θ = −(∂q/∂θ)/q̇``. Use it with
    ``simulate(..., stepsize_controller=FixedGrid(N))`` (every step saved); for one stop during the solve use `stop_when`.
    """
    n = traj.q.shape[-1]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise ValueError(f"crossing_times: index must be an int in [0, {n}), got {index!r}")
    if traj.ts.shape[0] < 2:
        raise ValueError(
            "crossing_times: the trajectory needs at least two saved points (simulate(..., stepsize_controller=FixedGrid(N)))"
        )
    values = jnp.asarray(values)
    q, v, ts = traj.q[:, index], traj.qd[:, index], traj.ts
    n = q.shape[0] - 1
    idx = jnp.clip(jnp.searchsorted(q, values, side="right", method="compare_all") - 1, 0, n - 1)
    h = ts[idx + 1] - ts[idx]
    x0, x1, v0, v1 = q[idx], q[idx + 1], v[idx], v[idx + 1]

    def newton(u, h, x0, x1, v0, v1, values):
        u2 = u * u
        x = _hermite(h, x0, x1, v0, v1, u)
        dx = (6 * u2 - 6 * u) * x0 + (3 * u2 - 4 * u + 1) * h * v0 + (-6 * u2 + 6 * u) * x1 + (3 * u2 - 2 * u) * h * v1
        return jnp.clip(u - (x - values) / jnp.maximum(dx, 1e-9), 0.0, 1.0)

    # All Newton steps but the last run on constants (`stop_gradient`); the last one, from the
    # converged u*, carries the derivatives: ∂u/∂θ = −(∂x/∂θ)/(∂x/∂u) at u*, the implicit one.
    # The same values as differentiating every step, at the cost of one step's tangents instead
    # of newton_steps' (the sprint fit's Jacobian traces, lowers and compiles this per split).
    def start(h, x0, x1, v0, v1, values):
        return jnp.clip((values - x0) / jnp.maximum(x1 - x0, 1e-12), 0.0, 1.0)

    live = (h, x0, x1, v0, v1, values)
    if newton_steps == 0:
        u = start(*live)
    else:
        fixed = jax.lax.stop_gradient(live)
        u = start(*fixed)
        for _ in range(newton_steps - 1):
            u = newton(u, *fixed)
        u = newton(u, *live)
    t_inside = ts[idx] + u * h
    t_past = ts[-1] + (values - q[-1]) / jnp.maximum(v[-1], 0.1)
    return jnp.where(values > q[-1], t_past, t_inside)


class _Diffusion(eqx.Module):
    """``B(t, y)`` on the state dict, zero outside its ``p`` block. A module, not a closure, so
    Diffrax's compiled solve is reused by the next `simulate_sde` call with the same system
    structure and noise function (a fresh closure per call recompiled every call)."""

    B: Array | None
    noise_fn: Callable | None = eqx.field(static=True)
    sizes: tuple = eqx.field(static=True)
    dtype: object = eqx.field(static=True)

    def __call__(self, t, y, args):
        if self.noise_fn is None:
            b = self.B.astype(self.dtype)
        else:
            b = jnp.asarray(self.noise_fn(t, y), self.dtype)
            b = jnp.diag(b) if b.ndim == 1 else b
        return {name: b if name == "p" else jnp.zeros((m, m), self.dtype) for name, m in self.sizes}


def simulate_sde(
    system: HamiltonianSystem,
    y0: dict,
    t0: float,
    t1: float,
    key: Array,
    noise,
    *,
    dt0: float,
    solver: diffrax.AbstractSolver | None = None,
    calculus: str = "ito",
    saveat: diffrax.SaveAt | None = None,
    ts=None,
    max_steps: int = 1_000_000,
    throw: bool = True,
) -> Trajectory:
    """Stochastic torques (Ivancevic 2009): ``dp = (F − ∂H/∂q − ∂R/∂q̇) dt + B dW``.

    ``noise``: ``B``, either constant — ``(n,)`` (independent torque noise per coordinate,
    N·m/√s) or ``(n, n)`` — or, as Ivancevic's (2009) ``B_ij[y, t] dW`` writes it, a function
    ``noise(t, y)`` of the time and the state (the dict ``y``: ``q``, ``p``, ``f`` and ``a``)
    returning ``(n,)`` or ``(n, n)`` (multiplicative, state- and time-dependent noise; a pure
    JAX function). ``calculus``: ``"ito"`` (default; solver `diffrax.Euler`, Euler–Maruyama) or
    ``"stratonovich"`` (default solver `diffrax.Heun`); a given ``solver`` must converge to that
    calculus (Diffrax's Itô or Stratonovich solver classes), else ``ValueError``. With constant
    ``B`` the two agree. ``key``: one PRNG key (``jax.random.key`` or ``jax.random.PRNGKey``); the
    same key reproduces the same Brownian path (Diffrax `VirtualBrownianTree`, resolved to
    ``dt0/4``). Fixed step ``dt0`` s (> 0, finite, ``(t1 − t0)/dt0 ≤ max_steps``: a step that
    cannot reach ``t1`` within the budget is refused before anything runs). Other arguments,
    the checks, NaN and ``result`` as in `simulate`.
    """
    fn = "simulate_sde"
    _check_types(fn, system=system, solver=solver, saveat=saveat)
    check_choice(calculus, ("ito", "stratonovich"), f"{fn}: calculus")
    wanted = diffrax.AbstractItoSolver if calculus == "ito" else diffrax.AbstractStratonovichSolver
    if solver is None:
        solver = diffrax.Euler() if calculus == "ito" else diffrax.Heun()
    elif not isinstance(solver, wanted):
        raise ValueError(
            f"{fn}: {type(solver).__name__} does not converge to the {calculus} solution "
            f"(give a {wanted.__name__[8:]}, e.g. {'Euler' if calculus == 'ito' else 'Heun'})"
        )
    y0 = _check_state(fn, system, y0)
    t0, t1 = as_scalar(t0, f"{fn}: t0"), as_scalar(t1, f"{fn}: t1")
    dt0 = as_scalar(dt0, f"{fn}: dt0")
    max_steps = as_count(max_steps, f"{fn}: max_steps")
    check_key(key, f"{fn}: key")
    n = system.nv
    if callable(noise):
        out = jax.eval_shape(noise, jax.ShapeDtypeStruct((), jnp.result_type(y0["q"])), y0)
        if getattr(out, "shape", None) not in ((n,), (n, n)):
            raise ValueError(
                f"{fn}: noise(t, y) returns {getattr(out, 'shape', type(out).__name__)}, expected "
                f"({n},) or ({n}, {n}) for a system of {n} coordinates"
            )
        noise_fn = noise
        noise_checks = []
    else:
        noise = as_real(noise, f"{fn}: noise", like=y0["q"])
        if noise.shape not in ((n,), (n, n)):
            raise ValueError(
                f"{fn}: noise has shape {noise.shape}, expected ({n},) or ({n}, {n}) for a system "
                f"of {n} coordinates, or a function noise(t, y)"
            )
        noise_fn = None
        noise_checks = [
            (lambda xp, noise: ~xp.all(xp.isfinite(noise)), f"{fn}: noise must be finite", {"noise": noise})
        ]
    if saveat is not None and ts is not None:
        raise ValueError(f"{fn}: give saveat or ts, not both")
    checks = (
        _span_checks(fn, t0, t1)
        + _state_checks(fn, y0)
        + _step_checks(fn, t0, t1, dt0, max_steps, fixed=True)
        + noise_checks
    )
    B = None if noise_fn is not None else (jnp.diag(noise) if noise.shape == (n,) else jnp.asarray(noise))
    if saveat is None and ts is not None:
        ts = as_real(ts, f"{fn}: ts")
        checks += _save_checks(fn, t0, t1, ts)
    elif saveat is not None:
        checks += _saveat_checks(fn, t0, t1, saveat)
    deferred = check_or_defer(checks)
    bad = any_bad(deferred)
    if bad is not None:  # traced and bad: a zero-length solve (the Brownian tree needs dt0 > 0)
        t0 = jnp.where(bad, 0.0, t0)
        t1 = jnp.where(bad, t0, t1)
        dt0 = jnp.where(bad, 1.0, dt0)
        if B is not None:
            B = jnp.where(bad, 0.0, B)
        if ts is not None:
            ts = jnp.where(bad, t0, ts)
        if saveat is not None:
            saveat = _replace_saveat_ts(saveat, lambda sts: jnp.where(bad, t0, sts))
    dtype = jnp.result_type(y0["q"])
    k = system.fitness.size
    # Brownian motion with the state's structure; only its "p" part drives the system.
    sizes = {"q": system.nq, "p": n, "f": k}
    if system.stateful:
        sizes["a"] = system.drive.state_size
    shape = {name: jax.ShapeDtypeStruct((m,), dtype) for name, m in sizes.items()}
    brownian = diffrax.VirtualBrownianTree(t0, jnp.maximum(t1, t0 + dt0), tol=dt0 / 4, shape=shape, key=key)

    diffusion = _Diffusion(B, noise_fn, tuple(sizes.items()), dtype)
    terms = diffrax.MultiTerm(diffrax.ODETerm(solver_field(system)), diffrax.ControlTerm(diffusion, brownian))
    requested = None
    if saveat is None:
        saveat = diffrax.SaveAt(ts=ts) if ts is not None else diffrax.SaveAt(t1=True)
        requested = ts if ts is not None else t1[None]
    sol = diffrax.diffeqsolve(
        terms,
        solver,
        t0,
        t1,
        dt0,
        y0,
        saveat=saveat,
        stepsize_controller=_stop_on_nonfinite(diffrax.ConstantStepSize(), t1 - t0),
        max_steps=max_steps,
        throw=False,
    )
    return _trajectory(fn, system, sol.ts, sol.ys, sol.result, sol, throw, deferred, requested, max_steps)
