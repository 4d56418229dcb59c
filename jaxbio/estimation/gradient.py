"""Gradient-based estimation through the simulator: muscle parameters and excitation time series.

Forward simulation of a `HamiltonianSystem` driven by a `MuscleActuatedDrive` (its Hamilton
equations, seed 000 eqs. 10–12, integrated by `diffrax.diffeqsolve` as `jaxbio.simulate` does)
maps muscle parameters and excitations to a motion ``q(t)``. Given a measured motion at the
sample times ``t`` (and optionally ``q̇``) this module minimises the least-squares misfit

    L = mean_{k,i} (q_sim(t_k) − q_meas(t_k))_i²  +  w_qd · mean_{k,i} (q̇_sim(t_k) − q̇_meas(t_k))_i²

(rad², ``w_qd`` in s²) with optax, differentiating through `diffrax.diffeqsolve`:

- `fit_muscle_parameters`: maximal isometric forces (or any positive `HillMuscle` constant) of
  chosen muscles, log-parameterised (``z = log F⁰``), so they stay positive and the steps are
  relative.
- `fit_excitations`: whole excitation time series ``u(t)`` of chosen muscles, piecewise linear on a
  grid of nodes (`PiecewiseLinearExcitation`), each node value logit-parameterised
  (``u = sigmoid(z)`` ∈ (0, 1)); the fitted muscle forces follow along the fitted trajectory.

Gradients (``gradient=``): ``"reverse"`` uses Diffrax's `RecursiveCheckpointAdjoint`, reverse
mode through the discretised solve, run time independent of the number of fitted numbers;
``"forward"`` uses `diffrax.ForwardMode`, one Jacobian-vector product per fitted number (in a
`lax.map`), and compiles about three times faster (on this project's 2-core CPU, arm26's elbow
with three muscles: ≈ 20 s against ≈ 60 s); ``"auto"`` (default) takes forward mode for up to
`AUTO_FORWARD_MAX` fitted numbers. Both differentiate the same fixed-step discretisation, so
they agree to round-off and match finite differences of the loss.

Optimisation: with ``optimizer=None`` (default) the direction is optax's L-BFGS
(`optax.scale_by_lbfgs`) and the step length comes from a backtracking (Armijo) line search run in
Python on the *same* compiled value-and-gradient function, so one fit compiles the simulator's
gradient exactly once (with `optax.lbfgs` the zoom line search would trace and compile the
simulation again inside the update). Any optax `GradientTransformation` may be passed instead
(``optax.adam(1e-2)``, ``optax.lbfgs()``, …); it then receives ``value``, ``grad`` and ``value_fn``
as extra arguments, as optax's line searches expect. Compilation is cached per system template
and data shapes: a second fit with the same template reuses it.

Compile time is the cost to plan for: reverse mode through a muscle-driven solve compiles in tens
of seconds on a CPU. Keep problems small (few degrees of freedom, fixed steps, short horizons):
`jaxbio.muscles.sets.elbow_arm26` gives arm26 with the shoulder locked (1 DOF, muscles of
choice) for that purpose.

Design choices: the initial state ``y0`` is known (state at ``t[0]``, e.g. from the measured
motion and a resting activation); solves use fixed steps ``dt0`` (smooth in the parameters, so
finite differences and gradients agree); a failed or non-finite simulation gives ``L = inf``, which
the line search rejects.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import concrete as _concrete
from jaxbio.dynamics import potential_energy
from jaxbio.hamiltonian import HamiltonianSystem, velocities
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.drive import MuscleActuatedDrive
from jaxbio.simulate import Trajectory

__all__ = [
    "PiecewiseLinearExcitation",
    "FitResult",
    "FITTABLE_PARAMETERS",
    "AUTO_FORWARD_MAX",
    "trajectory_loss",
    "fit_muscle_parameters",
    "fit_excitations",
    "muscle_forces",
]

#: `HillMuscle` fields `fit_muscle_parameters` can estimate (all strictly positive, so they are
#: log-parameterised).
FITTABLE_PARAMETERS = (
    "max_isometric_force",
    "optimal_fiber_length",
    "tendon_slack_length",
    "max_contraction_velocity",
    "curvature",
    "tendon_strain_at_one",
    "passive_strain_at_one",
)

_GRADIENTS = ("auto", "reverse", "forward")
#: ``gradient="auto"`` uses forward mode up to this many fitted numbers, reverse mode above.
AUTO_FORWARD_MAX = 8


# ---- excitation as an interpolant ------------------------------------------------------------

class PiecewiseLinearExcitation(eqx.Module):
    """Excitations ``u(t)`` ``(m,)`` linear between nodes, constant before the first and after the
    last node (`jnp.interp`).

    Fields: ``nodes`` ``(K,)`` s, strictly increasing (K ≥ 2); ``values`` ``(K, m)``
    dimensionless excitation at each node (in [0, 1] for a muscle). Both are array leaves, so
    ``jax.grad`` with respect to ``values`` works; `fit_excitations` fits ``values``.

    Example::

        >>> import jax.numpy as jnp
        >>> u = PiecewiseLinearExcitation(jnp.array([0.0, 0.1]), jnp.array([[0.0, 1.0], [1.0, 1.0]]))
        >>> u(0.05)            # (m,) = (2,): [0.5, 1.0]
    """

    nodes: Float[Array, " K"]
    values: Float[Array, "K m"]

    def __init__(self, nodes, values):
        nodes = jnp.asarray(nodes)
        values = jnp.asarray(values)
        dtype = jnp.result_type(nodes, values, float)
        self.nodes = nodes.astype(dtype)
        self.values = values.astype(dtype)
        if self.nodes.ndim != 1 or self.nodes.shape[0] < 2:
            raise ValueError(f"PiecewiseLinearExcitation: nodes must have shape (K,) with K ≥ 2, "
                             f"got {self.nodes.shape}")
        if self.values.ndim != 2 or self.values.shape[0] != self.nodes.shape[0]:
            raise ValueError(f"PiecewiseLinearExcitation: values must have shape (K, m) = ({self.nodes.shape[0]}, m), "
                             f"got {self.values.shape}")
        n = _concrete(self.nodes)
        if n is not None and not (np.all(np.isfinite(n)) and np.all(np.diff(n) > 0)):
            raise ValueError(f"PiecewiseLinearExcitation: nodes must be finite and strictly increasing, "
                             f"got {n.tolist()}")
        v = _concrete(self.values)
        if v is not None and not np.all(np.isfinite(v)):
            raise ValueError("PiecewiseLinearExcitation: values must be finite")

    @property
    def n_muscles(self) -> int:
        return self.values.shape[1]

    def __call__(self, t: Float[ArrayLike, ""]) -> Float[Array, " m"]:
        """``u(t)`` ``(m,)`` at time ``t`` s (scalar); same values as `jnp.interp` per muscle,
        written without a search loop (cheaper to compile inside a differentiated solve)."""
        t = jnp.asarray(t, self.nodes.dtype)
        nodes = self.nodes
        k = jnp.clip(jnp.sum(t >= nodes) - 1, 0, nodes.shape[0] - 2)
        w = jnp.clip((t - nodes[k]) / (nodes[k + 1] - nodes[k]), 0.0, 1.0)
        return (1 - w) * self.values[k] + w * self.values[k + 1]


class _PartlyFittedExcitation(eqx.Module):
    """``u(t)`` = the template's excitation with the muscles ``indices`` replaced by ``fitted(t)``."""

    base: Callable
    fitted: PiecewiseLinearExcitation
    indices: tuple[int, ...] = eqx.field(static=True)

    def __call__(self, t):
        fitted = self.fitted(t)
        base = jnp.asarray(self.base(t), fitted.dtype)
        return base.at[np.asarray(self.indices)].set(fitted)


# ---- result ------------------------------------------------------------------------------------

class FitResult(NamedTuple):
    """Result of `fit_muscle_parameters` / `fit_excitations`.

    - ``system``: the fitted `HamiltonianSystem` (simulate it, differentiate it further).
    - ``params``: dict of fitted values: ``{name: (m,)}`` (all muscles; the unfitted ones keep the
      template's values) for `fit_muscle_parameters`, ``{"excitation": (K, k)}`` node values of
      the ``k`` fitted muscles for `fit_excitations`.
    - ``z``: the fitted unconstrained vector (log of the parameters / logit of the node values).
    - ``loss``: final loss; ``loss_history`` ``(iterations + 1,)``: loss at the initial guess and
      after every iteration; ``grad_norm_history``: ∞-norm of ``∂L/∂z`` at the same iterates.
    - ``iterations``: optimiser iterations done; ``converged``: stopped by ``gtol``/``ftol`` (or, for
      the built-in L-BFGS, because no step length reduced the loss any further at a point where
      the gradient had already fallen by ``gtol_stall``) rather than by running out of ``steps``.
    - ``trajectory``: `jaxbio.simulate.Trajectory` of the fitted system at the sample times
      (``solution`` is None: the arrays come back with the last loss evaluation).
    - ``forces``: ``(T, m)`` N, muscle tensions along the fitted trajectory (`muscle_forces`).
    - ``excitation``: the fitted `PiecewiseLinearExcitation` (`fit_excitations` only, else None).
    - ``objective``: the compiled ``z -> (L, ∂L/∂z)`` used by the fit (reuse it for finite-
      difference checks or profiles without compiling again); ``from_z``: ``z -> system``.
    """

    system: HamiltonianSystem
    params: dict
    z: Array
    loss: float
    loss_history: np.ndarray
    grad_norm_history: np.ndarray
    iterations: int
    converged: bool
    trajectory: Trajectory
    forces: Array
    excitation: PiecewiseLinearExcitation | None
    objective: Callable
    from_z: Callable


# ---- validation --------------------------------------------------------------------------------

def _check_data(system: HamiltonianSystem, t, q_measured, qd_measured, y0):
    """Validate the measurement arrays before any tracing; returns them as arrays."""
    if not isinstance(system, HamiltonianSystem):
        raise ValueError(f"system must be a HamiltonianSystem, got {type(system).__name__}")
    t_np = _concrete(t)
    t = jnp.asarray(t)
    if t.ndim != 1 or t.shape[0] < 2:
        raise ValueError(f"t must be a 1-D array of at least 2 sample times, got shape {t.shape}")
    if t_np is not None and not (np.all(np.isfinite(t_np)) and np.all(np.diff(t_np) > 0)):
        raise ValueError("t must be finite and strictly increasing")
    n = system.nq
    out = []
    for name, x in (("q_measured", q_measured), ("qd_measured", qd_measured)):
        if x is None:
            out.append(None)
            continue
        x_np = _concrete(x)
        x = jnp.asarray(x)
        if x.ndim == 1 and n == 1:
            x = x[:, None]
        if x.shape != (t.shape[0], n):
            raise ValueError(f"{name} has shape {tuple(jnp.shape(x))}, expected (len(t), nq) = ({t.shape[0]}, {n})")
        if x_np is not None and not np.all(np.isfinite(x_np)):
            bad = np.argwhere(~np.isfinite(np.asarray(x_np).reshape(t.shape[0], -1)))
            raise ValueError(f"{name} contains NaN or inf (first at sample {int(bad[0, 0])}); "
                             "drop or interpolate missing samples before fitting")
        out.append(x)
    _check_y0(system, y0)
    return t, out[0], out[1]


def _muscle_drive(system: HamiltonianSystem) -> MuscleActuatedDrive:
    if not isinstance(system.drive, MuscleActuatedDrive):
        raise ValueError(f"system.drive must be a MuscleActuatedDrive, got {type(system.drive).__name__}")
    return system.drive


def _muscle_indices(drive: MuscleActuatedDrive, muscles) -> tuple[int, ...]:
    m = drive.paths.n_muscles
    if muscles is None:
        return tuple(range(m))
    if isinstance(muscles, (str, int, np.integer)):
        muscles = (muscles,)
    out = []
    for k in muscles:
        if isinstance(k, str):
            out.append(drive.paths.index(k))
        elif isinstance(k, (int, np.integer)) and -m <= int(k) < m:
            out.append(int(k) % m)
        else:
            raise ValueError(f"muscles: {k!r} is neither a muscle name nor an index in [0, {m})")
    if len(set(out)) != len(out) or not out:
        raise ValueError(f"muscles must name distinct muscles, got {list(muscles)}")
    return tuple(out)


def _check_options(gradient, dt0, qd_weight):
    if gradient not in _GRADIENTS:
        raise ValueError(f"gradient must be one of {_GRADIENTS}, got {gradient!r}")
    if dt0 is not None and not (math.isfinite(dt0) and dt0 > 0):
        raise ValueError(f"dt0 must be a positive step in s, got {dt0}")
    if not (math.isfinite(qd_weight) and qd_weight >= 0):
        raise ValueError(f"qd_weight must be finite and ≥ 0 (s²), got {qd_weight}")


def _default_dt0(t) -> float:
    """Half the shortest sampling interval (fixed steps)."""
    if isinstance(t, jax.core.Tracer):
        raise ValueError("pass dt0 explicitly when t is traced (under jit/vmap/grad)")
    return float(np.min(np.diff(np.asarray(t)))) / 2


# ---- the loss ----------------------------------------------------------------------------------

def _check_y0(system: HamiltonianSystem, y0) -> None:
    keys = {"q", "p", "f", "a"} if system.stateful else {"q", "p", "f"}
    if not isinstance(y0, dict) or set(y0) != keys:
        raise ValueError(f"y0 must be a dict with keys {sorted(keys)}, the state at t[0] "
                         "(see HamiltonianSystem.initial_state)")
    shapes = {"q": (system.nq,), "p": (system.nq,), "f": (system.fitness.size,)}
    if system.stateful:
        shapes["a"] = (system.drive.state_size,)
    for key, shape in shapes.items():
        if jnp.shape(y0[key]) != shape:
            raise ValueError(f"y0[{key!r}] has shape {jnp.shape(y0[key])}, expected {shape}")


def _solve(system, y0, t, solver, dt0, adjoint) -> diffrax.Solution:
    """The states at the sample times ``t`` from ``y0`` at ``t[0]``: the Hamilton equations of
    ``system`` (`HamiltonianSystem.vector_field`, as `jaxbio.simulate` integrates them) with fixed
    steps ``dt0``; never raises at run time (failures show in ``result``)."""
    try:
        span = float(t[-1] - t[0])
        max_steps = int(math.ceil(span / dt0 * (1 + 1e-9))) + 1
    except (TypeError, jax.errors.ConcretizationTypeError):
        max_steps = 100_000
    return diffrax.diffeqsolve(
        diffrax.ODETerm(system.vector_field), diffrax.Tsit5() if solver is None else solver, t[0], t[-1], dt0, y0,
        saveat=diffrax.SaveAt(ts=t), stepsize_controller=diffrax.ConstantStepSize(),
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
        max_steps=max_steps, throw=False)


def _misfit(system, sol, q_measured, qd_measured, qd_weight):
    q = sol.ys["q"]
    loss = jnp.mean((q - q_measured) ** 2)
    if qd_measured is not None and qd_weight > 0:
        qd = jax.vmap(velocities, in_axes=(None, 0, 0))(system.tree, q, sol.ys["p"])
        loss = loss + qd_weight * jnp.mean((qd - qd_measured) ** 2)
    ok = (sol.result == diffrax.RESULTS.successful) & jnp.isfinite(loss)
    return jnp.where(ok, loss, jnp.inf)


def trajectory_loss(
    system: HamiltonianSystem,
    y0: dict,
    t: Float[ArrayLike, " T"],
    q_measured: Float[ArrayLike, "T n"],
    qd_measured: Float[ArrayLike, "T n"] | None = None,
    *,
    qd_weight: float = 0.01,
    solver: diffrax.AbstractSolver | None = None,
    dt0: float | None = None,
    adjoint: diffrax.AbstractAdjoint | None = None,
) -> Float[Array, ""]:
    """Least-squares misfit between the simulated and the measured motion.

    ``L = mean (q_sim − q_meas)² + qd_weight · mean (q̇_sim − q̇_meas)²`` over all samples and
    coordinates, ``q_sim`` from integrating ``system`` (as `jaxbio.simulate` does) from ``y0`` at
    ``t[0]`` through ``t[-1]`` with fixed steps ``dt0`` (default: half the shortest sampling
    interval). Differentiable with respect to every array of ``system`` and ``y0``
    (``eqx.filter_grad``; ``eqx.filter_jit`` with ``dt0`` given). This is the loss the fits
    minimise.

    Args:
        system: the model (any drive).
        y0: its state at ``t[0]`` (``system.initial_state(...)``).
        t: ``(T,)`` s, strictly increasing sample times.
        q_measured: ``(T, n)`` rad/m (``(T,)`` for ``n = 1``), finite.
        qd_measured: optional ``(T, n)`` rad/s, m/s.
        qd_weight: s², weight of the velocity term (a Python float).
        solver: Diffrax solver (default `diffrax.Tsit5`).
        dt0: fixed step, s.
        adjoint: Diffrax adjoint (default `RecursiveCheckpointAdjoint`).

    Returns:
        ``()`` the loss, rad² (``inf`` if the simulation fails or is not finite).
    """
    t, q_measured, qd_measured = _check_data(system, t, q_measured, qd_measured, y0)
    _check_options("reverse", dt0, qd_weight)
    dt0 = _default_dt0(t) if dt0 is None else float(dt0)
    qd_weight = float(qd_weight)
    return _misfit(system, _solve(system, y0, t, solver, dt0, adjoint), q_measured, qd_measured, qd_weight)


def muscle_forces(system: HamiltonianSystem, trajectory: Trajectory) -> Float[Array, "T m"]:
    """Muscle–tendon tensions ``(T, m)`` N along a trajectory of a muscle-driven ``system``
    (`MuscleActuatedDrive.tensions` at every saved state)."""
    drive = _muscle_drive(system)
    if trajectory.a is None:
        raise ValueError("the trajectory has no activations (was it simulated with a MuscleActuatedDrive?)")
    return jax.vmap(drive.tensions)(trajectory.q, trajectory.qd, trajectory.f, trajectory.a)


# ---- parameterisations (static specs, hashable: they key the compilation cache) ------------------

class _ParameterSpec(NamedTuple):
    names: tuple[str, ...]
    indices: tuple[int, ...]

    def to_system(self, z, template: HamiltonianSystem) -> HamiltonianSystem:
        k = len(self.indices)
        idx = np.asarray(self.indices)
        muscles = template.drive.muscles
        new = []
        for j, name in enumerate(self.names):
            old = getattr(muscles, name)
            new.append(old.at[idx].set(jnp.exp(z[j * k:(j + 1) * k]).astype(old.dtype)))
        where = lambda s: tuple(getattr(s.drive.muscles, name) for name in self.names)  # noqa: E731
        return eqx.tree_at(where, template, tuple(new))

    def initial_z(self, template):
        muscles = template.drive.muscles
        idx = np.asarray(self.indices)
        return jnp.concatenate([jnp.log(getattr(muscles, name)[idx]) for name in self.names])

    def params(self, system):
        return {name: getattr(system.drive.muscles, name) for name in self.names}


class _ExcitationSpec(NamedTuple):
    indices: tuple[int, ...]
    n_muscles: int

    def to_system(self, z, template: HamiltonianSystem, nodes) -> HamiltonianSystem:
        k = len(self.indices)
        values = jax.nn.sigmoid(z.reshape(nodes.shape[0], k))
        fitted = PiecewiseLinearExcitation(nodes, values)
        if self.indices == tuple(range(self.n_muscles)):
            excitation = fitted
        else:
            excitation = _PartlyFittedExcitation(template.drive.excitation, fitted, self.indices)
        return eqx.tree_at(lambda s: s.drive.excitation, template, excitation)


def _objective_value(z, template, spec, extra, y0, t, q_measured, qd_measured, qd_weight, solver, dt0, adjoint,
                     with_aux=False):
    system = spec.to_system(z, template) if extra is None else spec.to_system(z, template, extra)
    sol = _solve(system, y0, t, solver, dt0, adjoint)
    loss = _misfit(system, sol, q_measured, qd_measured, qd_weight)
    if not with_aux:
        return loss
    # the fitted motion and forces come back with the loss (no second compilation for them);
    # computed from stopped states, so no derivative of them is traced
    ys = jax.tree.map(jax.lax.stop_gradient, sol.ys)
    system = jax.tree.map(lambda x: jax.lax.stop_gradient(x) if eqx.is_array(x) else x, system)
    qd = jax.vmap(velocities, in_axes=(None, 0, 0))(system.tree, ys["q"], ys["p"])
    # H = ½ pᵀq̇ + V (seed 000 eq. 9), reusing q̇ = M⁻¹p
    energy = 0.5 * jnp.sum(ys["p"] * qd, axis=-1) + jax.vmap(potential_energy, in_axes=(None, 0))(system.tree, ys["q"])
    forces = jax.vmap(system.drive.tensions)(ys["q"], qd, ys["f"], ys["a"])
    return loss, {**ys, "qd": qd, "energy": energy, "forces": forces}


@eqx.filter_jit
def _value_and_grad(z, template, spec, extra, y0, t, q_measured, qd_measured, qd_weight, solver, dt0, gradient):
    """``(L, ∂L/∂z, aux)`` with the fitted trajectory and forces in ``aux``; compiled once per
    (template, spec, data shapes, options)."""
    def f(z, adjoint):
        return _objective_value(z, template, spec, extra, y0, t, q_measured, qd_measured, qd_weight, solver, dt0,
                                adjoint, with_aux=True)

    if gradient == "forward":
        # one JVP per parameter in a `lax.map` (not `jacfwd`'s vmap: batching the tangents through
        # the solve's loops doubles the compile time, while recomputing the primal is cheap here)
        def directional(e):
            (value, aux), (dvalue, _) = jax.jvp(lambda z: f(z, diffrax.ForwardMode()), (z,), (e,))
            return value, dvalue, aux

        values, grad, aux = jax.lax.map(directional, jnp.eye(z.size, dtype=z.dtype))
        return values[0], grad, jax.tree.map(lambda x: x[0], aux)
    (value, aux), grad = jax.value_and_grad(lambda z: f(z, diffrax.RecursiveCheckpointAdjoint()), has_aux=True)(z)
    return value, grad, aux


_LBFGS = optax.scale_by_lbfgs()


@eqx.filter_jit
def _lbfgs_direction(grad, state, z):
    return _LBFGS.update(grad, state, z)


@eqx.filter_jit
def _optax_update(opt, grad, state, z, value, value_fn):
    if isinstance(opt, optax.GradientTransformationExtraArgs):
        updates, state = opt.update(grad, state, z, value=value, grad=grad, value_fn=value_fn)
    else:
        updates, state = opt.update(grad, state, z)
    return optax.apply_updates(z, updates), state


# ---- the optimisation loop ----------------------------------------------------------------------

def _minimise(objective, z0, *, optimizer, steps, gtol, ftol, gtol_stall, max_linesearch, callback, value_fn):
    """Minimise ``objective: z -> (L, ∂L/∂z, aux)`` from ``z0``. Returns
    ``(z, aux, loss_history, grad_norm_history, iterations, converged)``."""
    z = z0
    f, g, aux = objective(z)
    f = float(f)
    if not math.isfinite(f):
        raise ValueError("the simulation at the initial guess fails or is not finite; start from other values "
                         "or use a smaller dt0")
    gn0 = float(jnp.max(jnp.abs(g)))
    losses, gnorms = [f], [gn0]
    converged = False
    iterations = 0

    def done(f, gn):
        return gn <= gtol * max(gn0, 1e-300) or f <= ftol

    if done(f, gn0):
        return z, aux, np.array(losses), np.array(gnorms), 0, True

    if optimizer is None:
        state = _LBFGS.init(z)
        for it in range(1, steps + 1):
            direction, new_state = _lbfgs_direction(g, state, z)
            slope = float(jnp.vdot(g, direction))  # L decreases along −direction when slope > 0
            if not slope > 0:  # lost positive curvature: restart from steepest descent
                state = _LBFGS.init(z)
                direction, new_state = _lbfgs_direction(g, state, z)
                slope = float(jnp.vdot(g, direction))
            alpha, accepted = 1.0, False
            for _ in range(max_linesearch):  # backtracking with the Armijo condition
                z_try = z - alpha * direction
                f_try, g_try, aux_try = objective(z_try)
                f_try = float(f_try)
                if math.isfinite(f_try) and f_try <= f - 1e-4 * alpha * slope and bool(jnp.all(jnp.isfinite(g_try))):
                    accepted = True
                    break
                alpha *= 0.5
            if not accepted:
                # no step length lowers L: the minimum is resolved to round-off (or the search is stuck)
                converged = gnorms[-1] <= gtol_stall * max(gn0, 1e-300)
                break
            s, y = z_try - z, g_try - g
            state = new_state
            if not float(jnp.vdot(s, y)) > 1e-12 * float(jnp.linalg.norm(s) * jnp.linalg.norm(y)):
                state = _LBFGS.init(z_try)  # a pair without positive curvature would spoil the L-BFGS update
            z, f, g, aux = z_try, f_try, g_try, aux_try
            iterations = it
            gn = float(jnp.max(jnp.abs(g)))
            losses.append(f)
            gnorms.append(gn)
            if callback is not None:
                callback(it, f, z)
            if done(f, gn):
                converged = True
                break
    else:
        state = optimizer.init(z)
        for it in range(1, steps + 1):
            z, state = _optax_update(optimizer, g, state, z, jnp.asarray(f, z.dtype), value_fn)
            f, g, aux = objective(z)
            f = float(f)
            if not math.isfinite(f):
                raise ValueError(f"the simulation failed at iteration {it} (loss {f}); lower the learning rate")
            iterations = it
            gn = float(jnp.max(jnp.abs(g)))
            losses.append(f)
            gnorms.append(gn)
            if callback is not None:
                callback(it, f, z)
            if done(f, gn):
                converged = True
                break
    return z, aux, np.array(losses), np.array(gnorms), iterations, converged


def _fit(template, spec, extra, z0, y0, t, q_measured, qd_measured, *, qd_weight, solver, dt0, gradient,
         optimizer, steps, gtol, ftol, gtol_stall, max_linesearch, callback):
    if gradient == "auto":
        gradient = "forward" if z0.size <= AUTO_FORWARD_MAX else "reverse"
    data = (y0, t, q_measured, qd_measured, qd_weight, solver, dt0)

    def objective(z):
        return _value_and_grad(z, template, spec, extra, *data, gradient)

    def value_and_grad(z):
        value, grad, _ = objective(jnp.asarray(z, z0.dtype))
        return value, grad

    def from_z(z):
        return spec.to_system(z, template) if extra is None else spec.to_system(z, template, extra)

    value_fn = jax.tree_util.Partial(_objective_value, template=template, spec=spec, extra=extra, y0=y0, t=t,
                                     q_measured=q_measured, qd_measured=qd_measured, qd_weight=qd_weight,
                                     solver=solver, dt0=dt0, adjoint=diffrax.RecursiveCheckpointAdjoint())
    z, aux, losses, gnorms, iterations, converged = _minimise(
        objective, z0, optimizer=optimizer, steps=steps, gtol=gtol, ftol=ftol, gtol_stall=gtol_stall,
        max_linesearch=max_linesearch, callback=callback, value_fn=value_fn)
    trajectory = Trajectory(t, aux["q"], aux["p"], aux["qd"], aux["f"], aux["energy"], diffrax.RESULTS.successful,
                            None, aux["a"])
    return from_z(z), z, losses, gnorms, iterations, converged, trajectory, aux["forces"], value_and_grad, from_z


def _common_checks(system, y0, t, q_measured, qd_measured, gradient, dt0, qd_weight, steps):
    t, q_measured, qd_measured = _check_data(system, t, q_measured, qd_measured, y0)
    _check_options(gradient, dt0, qd_weight)
    if not (isinstance(steps, (int, np.integer)) and steps >= 0):
        raise ValueError(f"steps must be an integer ≥ 0, got {steps!r}")
    dtype = jnp.result_type(y0["q"])
    t = t.astype(dtype)
    q_measured = q_measured.astype(dtype)
    qd_measured = None if qd_measured is None else qd_measured.astype(dtype)
    dt0 = _default_dt0(t) if dt0 is None else float(dt0)
    return t, q_measured, qd_measured, dt0, float(qd_weight)


def fit_muscle_parameters(
    system: HamiltonianSystem,
    y0: dict,
    t: Float[ArrayLike, " T"],
    q_measured: Float[ArrayLike, "T n"],
    qd_measured: Float[ArrayLike, "T n"] | None = None,
    *,
    parameters: Sequence[str] = ("max_isometric_force",),
    muscles: Sequence[str | int] | None = None,
    qd_weight: float = 0.01,
    solver: diffrax.AbstractSolver | None = None,
    dt0: float | None = None,
    gradient: str = "auto",
    optimizer: optax.GradientTransformation | None = None,
    steps: int = 100,
    gtol: float = 1e-9,
    ftol: float = 0.0,
    gtol_stall: float = 1e-5,
    max_linesearch: int = 30,
    callback: Callable[[int, float, Array], Any] | None = None,
) -> FitResult:
    """Estimate muscle parameters (default: maximal isometric forces ``F⁰``) from a motion that
    the muscles produced with known excitations.

    The excitations, the skeleton and every other parameter are those of ``system`` (whose drive
    must be a `MuscleActuatedDrive`); the values of the fitted parameters in ``system`` are the
    initial guess. Parameters are fitted as ``z = log p`` (positive; relative steps).

    Args:
        system: the model with initial guesses, ``drive`` a `MuscleActuatedDrive`.
        y0: its state at ``t[0]`` (``system.initial_state(q0, qd0, a=a0)``).
        t: ``(T,)`` s, strictly increasing sample times.
        q_measured: ``(T, n)`` rad/m, the measured coordinates (finite; ``(T,)`` if ``n = 1``).
        qd_measured: optional ``(T, n)`` rad/s, measured velocities (weighted by ``qd_weight`` s²).
        parameters: `HillMuscle` fields to fit, from `FITTABLE_PARAMETERS`.
        muscles: names or indices of the muscles whose parameters are fitted (default: all).
        solver, dt0: Diffrax solver (default `diffrax.Tsit5`) and fixed step in s (default: half
            the shortest sampling interval).
        gradient: ``"reverse"`` (`RecursiveCheckpointAdjoint`), ``"forward"`` (`ForwardMode`, one
            JVP per fitted number) or ``"auto"``: forward for up to `AUTO_FORWARD_MAX` fitted
            numbers, reverse above (see the module doc for the compile-time trade-off).
        optimizer: None for L-BFGS with a backtracking line search (see the module doc), or any
            optax transformation (e.g. ``optax.adam(0.02)``).
        steps: maximum number of iterations.
        gtol: stop when ``‖∂L/∂z‖∞ ≤ gtol · ‖∂L/∂z(z₀)‖∞``; ftol: stop when ``L ≤ ftol``.
        gtol_stall: (L-BFGS) a failed line search counts as converged if the gradient has fallen by
            this factor.
        max_linesearch: (L-BFGS) step halvings before giving up.
        callback: called as ``callback(iteration, loss, z)`` after each iteration (e.g. to drive a
            progress bar); the library itself prints nothing.

    Returns:
        a `FitResult`; ``params[name]`` ``(m,)`` holds all muscles' values.

    Example::

        >>> res = fit_muscle_parameters(guess_system, y0, t, q_measured, muscles=("BICshort", "BRA"))
        >>> res.params["max_isometric_force"], res.loss_history[-1]
    """
    drive = _muscle_drive(system)
    t, q_measured, qd_measured, dt0, qd_weight = _common_checks(system, y0, t, q_measured, qd_measured, gradient,
                                                                dt0, qd_weight, steps)
    if isinstance(parameters, str):
        parameters = (parameters,)
    parameters = tuple(parameters)
    if not parameters or len(set(parameters)) != len(parameters):
        raise ValueError(f"parameters must name distinct fields, got {list(parameters)}")
    for name in parameters:
        if name not in FITTABLE_PARAMETERS:
            raise ValueError(f"cannot fit {name!r}; fittable parameters are {list(FITTABLE_PARAMETERS)}")
    indices = _muscle_indices(drive, muscles)
    spec = _ParameterSpec(parameters, indices)
    z0 = spec.initial_z(system)
    if not bool(jnp.all(jnp.isfinite(z0))):
        raise ValueError("the initial guesses of the fitted parameters must be > 0")
    fitted = _fit(system, spec, None, z0, y0, t, q_measured, qd_measured, qd_weight=qd_weight, solver=solver, dt0=dt0,
                  gradient=gradient, optimizer=optimizer, steps=int(steps), gtol=gtol, ftol=ftol,
                  gtol_stall=gtol_stall, max_linesearch=max_linesearch, callback=callback)
    fsys, z, losses, gnorms, iterations, converged, trajectory, forces, objective, from_z = fitted
    return FitResult(fsys, spec.params(fsys), z, float(losses[-1]), losses, gnorms, iterations, converged,
                     trajectory, forces, None, objective, from_z)


def fit_excitations(
    system: HamiltonianSystem,
    y0: dict,
    t: Float[ArrayLike, " T"],
    q_measured: Float[ArrayLike, "T n"],
    qd_measured: Float[ArrayLike, "T n"] | None = None,
    *,
    nodes: Float[ArrayLike, " K"],
    muscles: Sequence[str | int] | None = None,
    initial: Float[ArrayLike, "..."] = 0.2,
    qd_weight: float = 0.01,
    solver: diffrax.AbstractSolver | None = None,
    dt0: float | None = None,
    gradient: str = "auto",
    optimizer: optax.GradientTransformation | None = None,
    steps: int = 200,
    gtol: float = 1e-9,
    ftol: float = 0.0,
    gtol_stall: float = 1e-5,
    max_linesearch: int = 30,
    callback: Callable[[int, float, Array], Any] | None = None,
) -> FitResult:
    """Estimate excitation time series ``u(t)`` of chosen muscles from a motion (forward-dynamic
    tracking through the simulator); the muscle forces follow from the fitted simulation.

    The fitted muscles' excitations are piecewise linear between ``nodes`` (constant outside),
    each node value ``u = sigmoid(z)`` ∈ (0, 1); the other muscles keep ``system``'s excitation.
    Identifiability: the motion of ``n`` coordinates determines at most ``n`` independent drive
    time series, so fit no more muscles than the data can separate (e.g. one per coordinate,
    the others known), or expect one of many equivalent solutions.

    Args:
        system, y0, t, q_measured, qd_measured: as in `fit_muscle_parameters`.
        nodes: ``(K,)`` s, strictly increasing grid of the interpolant (K ≥ 2).
        muscles: names or indices of the fitted muscles (default: all).
        initial: initial node values in (0, 1): a scalar or ``(K, k)`` for ``k`` fitted muscles.
        other arguments: as in `fit_muscle_parameters`.

    Returns:
        a `FitResult`; ``params["excitation"]`` ``(K, k)``, ``excitation`` the fitted
        `PiecewiseLinearExcitation`, ``forces`` ``(T, m)`` N the muscle tensions.
    """
    drive = _muscle_drive(system)
    t, q_measured, qd_measured, dt0, qd_weight = _common_checks(system, y0, t, q_measured, qd_measured, gradient,
                                                                dt0, qd_weight, steps)
    dtype = t.dtype
    if np.ndim(nodes) != 1:
        raise ValueError(f"nodes must be a 1-D array (K,) of node times in s, got shape {np.shape(nodes)}")
    nodes = PiecewiseLinearExcitation(nodes, jnp.zeros((np.shape(nodes)[0], 1))).nodes.astype(dtype)
    indices = _muscle_indices(drive, muscles)
    K, k = nodes.shape[0], len(indices)
    initial = jnp.asarray(initial, dtype)
    if initial.ndim == 0:
        initial = jnp.full((K, k), initial)
    if initial.shape != (K, k):
        raise ValueError(f"initial must be a scalar or have shape (len(nodes), n_fitted_muscles) = ({K}, {k}), "
                         f"got {initial.shape}")
    init_np = np.asarray(initial)
    if not np.all((init_np > 0) & (init_np < 1)):
        raise ValueError("initial excitations must lie strictly between 0 and 1 (they are logit-parameterised)")
    spec = _ExcitationSpec(indices, drive.paths.n_muscles)
    z0 = jnp.log(initial / (1 - initial)).reshape(-1)
    fitted = _fit(system, spec, nodes, z0, y0, t, q_measured, qd_measured, qd_weight=qd_weight, solver=solver,
                  dt0=dt0, gradient=gradient, optimizer=optimizer, steps=int(steps), gtol=gtol, ftol=ftol,
                  gtol_stall=gtol_stall, max_linesearch=max_linesearch, callback=callback)
    fsys, z, losses, gnorms, iterations, converged, trajectory, forces, objective, from_z = fitted
    excitation = PiecewiseLinearExcitation(nodes, jax.nn.sigmoid(z.reshape(K, k)))
    return FitResult(fsys, {"excitation": excitation.values}, z, float(losses[-1]), losses, gnorms, iterations,
                     converged, trajectory, forces, excitation, objective, from_z)
