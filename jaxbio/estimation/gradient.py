"""Gradient-based estimation through the simulator: muscle parameters and excitation time series.

Forward simulation of a `HamiltonianSystem` driven by a `MuscleActuatedDrive` (its Hamilton
equations, Ivancevic 2009, eqs. 10–12, integrated by `diffrax.diffeqsolve` as `jaxbio.simulate` does)
maps muscle parameters and excitations to a motion ``q(t)``. Given a measured motion at the
sample times ``t`` (and optionally ``q̇``) this module minimises the least-squares misfit

    L = mean_{k,i} (q_sim(t_k) − q_meas(t_k))_i²  +  w_qd · mean_{k,i} (q̇_sim(t_k) − q̇_meas(t_k))_i²

(rad², ``w_qd`` in s²) with optimistix's BFGS, differentiating through `diffrax.diffeqsolve`:

- `fit_muscle_parameters`: maximal isometric forces (or any positive `HillMuscle` constant) of
  chosen muscles, log-parameterised (``z = log F⁰``), so they stay positive and the steps are
  relative.
- `fit_excitations`: whole excitation time series ``u(t)`` of chosen muscles, piecewise linear on a
  grid of nodes (`PiecewiseLinearExcitation`), each node value logit-parameterised
  (``u = sigmoid(z)`` ∈ (0, 1)); the fitted muscle forces follow along the fitted trajectory.

Gradients (``gradient=``): ``"reverse"`` uses Diffrax's `RecursiveCheckpointAdjoint`, reverse
mode through the discretised solve, run time independent of the number of fitted numbers;
``"forward"`` uses `diffrax.ForwardMode`, one Jacobian-vector product per fitted number (in a
`lax.map`), and compiles several times faster (benchmarks/README.md, "Measurements behind design choices"); ``"auto"`` (default) takes forward mode for up to
`AUTO_FORWARD_MAX` fitted numbers. Both differentiate the same fixed-step discretisation, so
they agree to round-off and match finite differences of the loss.

Optimisation: with ``optimizer=None`` (default) `optimistix.BFGS` (dense inverse-Hessian
update, backtracking Armijo line search; the fitted vectors are small) is stepped inside one
`lax.while_loop`, each step evaluating ``L`` and ``∂L/∂z`` once at a trial point, the gradient in
the chosen mode (a custom JVP hands the optimiser ``FitObjective.value_grad_aux``), so one fit
traces and compiles the simulator's gradient exactly once. Any optax `GradientTransformation`
may be passed instead (``optax.adam(1e-2)``, ``optax.lbfgs()``, …); it then receives ``value``,
``grad`` and ``value_fn`` as extra arguments, as optax's line searches expect. The whole fit is
pure JAX: `jax.jit` it, or `jax.vmap` it over subjects (a batch of measured motions, initial
guesses or templates fitted in one call; every field of the `MuscleFitResult` gains the batch
axis). Input checks that need values run before tracing where the inputs are concrete and
through `eqx.error_if` otherwise. The fit is compiled once per template structure, data shapes
and options (``steps``, tolerances, ``optimizer``, ``callback`` are static): a second fit with the
same template and options reuses it.

Compile time is the cost to plan for: reverse mode through a muscle-driven solve compiles in tens
of seconds on a CPU. Keep problems small (few degrees of freedom, fixed steps, short horizons):
`jaxbio.muscles.sets.elbow_arm26` gives arm26 with the shoulder locked (1 DOF, muscles of
choice) for that purpose.

Design choices: the initial state ``y0`` is known (state at ``t[0]``, e.g. from the measured
motion and a resting activation); solves use fixed steps ``dt0`` (smooth in the parameters, so
finite differences and gradients agree); a failed or non-finite simulation gives ``L = inf``, which
the line search rejects (at the initial guess it is an error).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple
from collections.abc import Callable, Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxbio._validate import check_choice
from jaxbio._validate import concrete as _concrete
from jaxbio.dynamics import potential_energy
from jaxbio.hamiltonian import HamiltonianSystem, solver_field, velocities
from jaxbio.muscles.drive import MuscleActuatedDrive
from jaxbio.simulation import Trajectory

__all__ = [
    "PiecewiseLinearExcitation",
    "MuscleFitResult",
    "FitObjective",
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
            raise ValueError(
                f"PiecewiseLinearExcitation: nodes must have shape (K,) with K ≥ 2, got {self.nodes.shape}"
            )
        if self.values.ndim != 2 or self.values.shape[0] != self.nodes.shape[0]:
            raise ValueError(
                f"PiecewiseLinearExcitation: values must have shape (K, m) = ({self.nodes.shape[0]}, m), "
                f"got {self.values.shape}"
            )
        n = _concrete(self.nodes)
        if n is not None and not (np.all(np.isfinite(n)) and np.all(np.diff(n) > 0)):
            raise ValueError(
                f"PiecewiseLinearExcitation: nodes must be finite and strictly increasing, got {n.tolist()}"
            )
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


class MuscleFitResult(eqx.Module):
    """Result of `fit_muscle_parameters` / `fit_excitations` (an Equinox module: arrays only, so
    a fit can run under `jax.jit` and `jax.vmap`; under ``vmap`` every array gains the batch axis).

    - ``system``: the fitted `HamiltonianSystem` (simulate it, differentiate it further).
    - ``params``: dict of fitted values: ``{name: (m,)}`` (all muscles; the unfitted ones keep the
      template's values) for `fit_muscle_parameters`, ``{"excitation": (K, k)}`` node values of
      the ``k`` fitted muscles for `fit_excitations`.
    - ``z``: ``(p,)`` the fitted unconstrained vector (log of the parameters / logit of the node
      values).
    - ``loss``: ``()`` final loss, rad²; ``loss_history`` ``(steps + 1,)``: loss at the initial
      guess and after every iteration, entries past ``iterations`` repeating the final loss;
      ``grad_norm_history`` ``(steps + 1,)``: ∞-norm of ``∂L/∂z`` at the same iterates.
    - ``iterations``: ``()`` int, optimiser iterations done; ``converged``: ``()`` bool, stopped
      by ``gtol``/``ftol`` (or, for the built-in BFGS, because no step length reduced the loss
      any further at a point where the gradient had already fallen by ``gtol_stall``) rather than
      by running out of ``steps``.
    - ``trajectory``: `jaxbio.Trajectory` of the fitted system at the sample times
      (``solution`` is None: the arrays come back with the last loss evaluation).
    - ``forces``: ``(T, m)`` N, muscle tensions along the fitted trajectory (`muscle_forces`).
    - ``excitation``: the fitted `PiecewiseLinearExcitation` (`fit_excitations` only, else None).
    - ``objective``: the `FitObjective` ``z -> (L, ∂L/∂z)`` used by the fit (jitted; reuse it for
      finite-difference checks or profiles); ``from_z(z)``: the system of ``z``.
    """

    system: HamiltonianSystem
    params: dict
    z: Float[Array, " p"]
    loss: Float[Array, ""]
    loss_history: Float[Array, " steps_plus_1"]
    grad_norm_history: Float[Array, " steps_plus_1"]
    iterations: Int[Array, ""]
    converged: Bool[Array, ""]
    trajectory: Trajectory
    forces: Float[Array, "T m"]
    excitation: PiecewiseLinearExcitation | None
    objective: FitObjective

    def from_z(self, z: Float[ArrayLike, " p"]) -> HamiltonianSystem:
        """The `HamiltonianSystem` with the fitted numbers set from ``z`` ``(p,)``."""
        return self.objective.to_system(z)


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
        message = f"{name} contains NaN or inf"
        hint = "drop or interpolate missing samples before fitting"
        if x_np is not None and not np.all(np.isfinite(x_np)):
            bad = np.argwhere(~np.isfinite(np.asarray(x_np).reshape(t.shape[0], -1)))
            raise ValueError(f"{message} (first at sample {int(bad[0, 0])}); {hint}")
        if x_np is None:  # traced (under jit/vmap): checked at run time
            x = eqx.error_if(x, ~jnp.all(jnp.isfinite(x)), f"{message}; {hint}")
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
    check_choice(gradient, _GRADIENTS, "gradient")
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
        raise ValueError(
            f"y0 must be a dict with keys {sorted(keys)}, the state at t[0] (see HamiltonianSystem.initial_state)"
        )
    shapes = {"q": (system.nq,), "p": (system.nq,), "f": (system.fitness.size,)}
    if system.stateful:
        shapes["a"] = (system.drive.state_size,)
    for key, shape in shapes.items():
        if jnp.shape(y0[key]) != shape:
            raise ValueError(f"y0[{key!r}] has shape {jnp.shape(y0[key])}, expected {shape}")


def _solve(system, y0, t, solver, dt0, adjoint) -> diffrax.Solution:
    """The states at the sample times ``t`` from ``y0`` at ``t[0]``: the Hamilton equations of
    ``system`` (`jaxbio.hamiltonian.solver_field`, as `jaxbio.simulate` integrates them) with fixed
    steps ``dt0``; never raises at run time (failures show in ``result``)."""
    try:
        span = float(t[-1] - t[0])
        max_steps = int(math.ceil(span / dt0 * (1 + 1e-9))) + 1
    except (TypeError, jax.errors.ConcretizationTypeError):
        max_steps = 100_000
    return diffrax.diffeqsolve(
        diffrax.ODETerm(solver_field(system)),
        diffrax.Tsit5() if solver is None else solver,
        t[0],
        t[-1],
        dt0,
        y0,
        saveat=diffrax.SaveAt(ts=t),
        stepsize_controller=diffrax.ConstantStepSize(),
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
        max_steps=max_steps,
        throw=False,
    )


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
            new.append(old.at[idx].set(jnp.exp(z[j * k : (j + 1) * k]).astype(old.dtype)))
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


def _objective_value(
    z, template, spec, extra, y0, t, q_measured, qd_measured, qd_weight, solver, dt0, adjoint, with_aux=False
):
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
    # H = ½ pᵀq̇ + V (Ivancevic 2009, eq. 9), reusing q̇ = M⁻¹p
    energy = 0.5 * jnp.sum(ys["p"] * qd, axis=-1) + jax.vmap(potential_energy, in_axes=(None, 0))(system.tree, ys["q"])
    forces = jax.vmap(system.drive.tensions)(ys["q"], qd, ys["f"], ys["a"])
    return loss, {**ys, "qd": qd, "energy": energy, "forces": forces}


class FitObjective(eqx.Module):
    """The loss a fit minimises as a function of its unconstrained vector ``z`` (log parameters
    or logit excitation nodes): ``objective(z) -> (L, ∂L/∂z)``.

    A pytree (the template system and the data are array leaves; the parameterisation, weights,
    step and gradient mode static), so it comes back from `jax.jit` / `jax.vmap` inside a
    `MuscleFitResult` and its call is compiled once per template and data shapes: reuse it for
    finite-difference checks or profiles. ``to_system(z)`` builds the `HamiltonianSystem` of ``z``.
    """

    template: HamiltonianSystem
    extra: Array | None  # excitation nodes (K,) s, or None for parameter fits
    y0: dict
    t: Float[Array, " T"]
    q_measured: Float[Array, "T n"]
    qd_measured: Float[Array, "T n"] | None
    solver: diffrax.AbstractSolver | None
    spec: Any = eqx.field(static=True)
    qd_weight: float = eqx.field(static=True)
    dt0: float = eqx.field(static=True)
    gradient: str = eqx.field(static=True)  # "forward" or "reverse"

    def to_system(self, z: Float[ArrayLike, " p"]) -> HamiltonianSystem:
        """The template with the fitted numbers set from ``z`` ``(p,)``."""
        z = jnp.asarray(z)
        return (
            self.spec.to_system(z, self.template)
            if self.extra is None
            else self.spec.to_system(z, self.template, self.extra)
        )

    def _value(self, z, adjoint, with_aux):
        return _objective_value(
            z,
            self.template,
            self.spec,
            self.extra,
            self.y0,
            self.t,
            self.q_measured,
            self.qd_measured,
            self.qd_weight,
            self.solver,
            self.dt0,
            adjoint,
            with_aux=with_aux,
        )

    def value_and_aux(self, z):
        """``(L, aux)`` without a derivative (aux: the saved states, ``qd``, ``energy``, ``forces``)."""
        return self._value(z, diffrax.RecursiveCheckpointAdjoint(), True)

    def value_grad_aux(self, z):
        """``(L, ∂L/∂z, aux)`` by forward mode (``diffrax.ForwardMode``, one JVP per entry of
        ``z`` in a `lax.map`) or reverse mode (``RecursiveCheckpointAdjoint``)."""
        if self.gradient == "forward":
            # one JVP per parameter in a `lax.map` (not `jacfwd`'s vmap: batching the tangents through
            # the solve's loops doubles the compile time, while recomputing the primal is cheap here)
            def directional(e):
                (value, aux), (dvalue, _) = jax.jvp(lambda z: self._value(z, diffrax.ForwardMode(), True), (z,), (e,))
                return value, dvalue, aux

            values, grad, aux = jax.lax.map(directional, jnp.eye(z.size, dtype=z.dtype))
            return values[0], grad, jax.tree.map(lambda x: x[0], aux)
        (value, aux), grad = jax.value_and_grad(
            lambda z: self._value(z, diffrax.RecursiveCheckpointAdjoint(), True), has_aux=True
        )(z)
        return value, grad, aux

    @eqx.filter_jit
    def __call__(self, z: Float[ArrayLike, " p"]) -> tuple[Float[Array, ""], Float[Array, " p"]]:
        """``(L, ∂L/∂z)``: the loss (rad²) and its gradient ``(p,)`` at ``z``."""
        value, grad, _ = self.value_grad_aux(jnp.asarray(z, self.t.dtype))
        return value, grad


@eqx.filter_custom_jvp
def _loss_with_aux(z, objective):
    """``(L, aux)`` whose derivative in ``z`` is ``FitObjective.value_grad_aux``'s gradient: the
    optimiser differentiates this, so the simulation is differentiated in the chosen mode and
    traced once (inside the rule)."""
    return objective.value_and_aux(z)


@_loss_with_aux.def_jvp
def _loss_with_aux_jvp(primals, tangents):
    z, objective = primals
    tz, tobjective = tangents
    if any(x is not None for x in jax.tree.leaves(tobjective, is_leaf=lambda x: x is None)):
        raise NotImplementedError("fits are differentiable in z only (not in the data or the template)")
    value, grad, aux = objective.value_grad_aux(z)
    dvalue = jnp.zeros_like(value) if tz is None else jnp.vdot(grad, tz)
    return (value, aux), (dvalue, jax.tree.map(jnp.zeros_like, aux))


# ---- the optimisation loop ----------------------------------------------------------------------


class _LoopState(eqx.Module):
    z: Array  # last accepted iterate
    solver_state: Any
    grad: Array
    aux: Any
    losses: Array  # (steps + 1,)
    grad_norms: Array  # (steps + 1,)
    iteration: Array  # accepted iterations after the initial point (−1 before it is evaluated)
    rejected: Array  # consecutive rejected line-search trials
    done: Array
    converged: Array


def _call_back(callback, accepted, iteration, loss, z):
    if bool(accepted):
        callback(int(iteration), float(loss), np.asarray(z))


def _minimise(fn, args, z0, aux_struct, *, optimizer, steps, gtol, ftol, gtol_stall, max_linesearch, callback):
    """Minimise ``fn(z, args) -> (L, aux)`` from ``z0`` in one `lax.while_loop` (jit- and
    vmap-able). ``optimizer=None``: `optimistix.LBFGS` stepped here (each step evaluates ``L`` and
    ``∂L/∂z`` once at a trial point; its backtracking Armijo search accepts or shrinks the step);
    else an optax transformation, one update per step. Stops when ``‖∂L/∂z‖∞ ≤ gtol ‖∂L/∂z(z₀)‖∞``
    or ``L ≤ ftol`` (converged), after ``steps`` accepted iterations, or after ``max_linesearch``
    rejected trials in a row (converged if the gradient had fallen by ``gtol_stall``).

    Returns ``(z, grad, aux, losses (steps+1,), grad_norms (steps+1,), iterations, converged)``;
    history entries past ``iterations`` repeat the last value.
    """
    dtype = z0.dtype
    hist = jnp.full(steps + 1, jnp.nan, dtype)
    aux0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), aux_struct)
    if optimizer is None:
        # rtol = atol = 0: optimistix's own (Cauchy) termination never fires; the gradient test does
        solver = optx.BFGS(rtol=0.0, atol=0.0)
        f_struct = jax.ShapeDtypeStruct((), dtype)
        solver_state = solver.init(fn, z0, args, {}, f_struct, aux_struct, frozenset())
    else:
        solver_state = optimizer.init(z0)

        def value_fn(z):
            return fn(z, args)[0]

    # the loop carries the state's arrays; the rest (e.g. the jaxpr of L-BFGS's inverse-Hessian
    # operator) is the same at every step, as in optimistix's own loop
    dynamic_state, static_state = eqx.partition(solver_state, eqx.is_array)

    def step(st: _LoopState):
        """One trial: returns (z, solver_state, f, grad, aux, accepted)."""
        previous = eqx.combine(st.solver_state, static_state)
        if optimizer is None:
            z, state, _ = solver.step(fn, st.z, args, {}, previous, frozenset())
            info = state.f_info
            accepted = state.num_accepted_steps > previous.num_accepted_steps
            return z, eqx.filter(state, eqx.is_array), info.f, info.grad, state.aux, accepted
        first = st.iteration < 0

        def update(_):
            if isinstance(optimizer, optax.GradientTransformationExtraArgs):
                updates, state = optimizer.update(
                    st.grad, previous, st.z, value=st.losses[st.iteration], grad=st.grad, value_fn=value_fn
                )
            else:
                updates, state = optimizer.update(st.grad, previous, st.z)
            return optax.apply_updates(st.z, updates), eqx.filter(state, eqx.is_array)

        z, state = jax.lax.cond(first, lambda _: (st.z, st.solver_state), update, None)
        (f, aux), grad = jax.value_and_grad(fn, has_aux=True)(z, args)
        return z, state, f, grad, aux, jnp.asarray(True)

    def body(st: _LoopState) -> _LoopState:
        z, state, f, grad, aux, accepted = step(st)
        k = st.iteration + accepted.astype(st.iteration.dtype)
        gnorm = jnp.max(jnp.abs(grad))
        losses = jnp.where(accepted, st.losses.at[k].set(f), st.losses)
        grad_norms = jnp.where(accepted, st.grad_norms.at[k].set(gnorm), st.grad_norms)
        gn0 = grad_norms[0]
        reached = (gnorm <= gtol * jnp.maximum(gn0, 1e-300)) | (f <= ftol)
        rejected = jnp.where(accepted, 0, st.rejected + 1)
        stalled = rejected >= max_linesearch
        stall_ok = grad_norms[jnp.maximum(k, 0)] <= gtol_stall * jnp.maximum(gn0, 1e-300)
        failed = accepted & (k == 0) & ~jnp.isfinite(f)  # the initial guess does not simulate
        done = (accepted & (reached | (k >= steps) | ~jnp.isfinite(f))) | stalled | failed
        converged = (accepted & reached & jnp.isfinite(f)) | (stalled & stall_ok)
        if callback is not None:
            jax.debug.callback(functools.partial(_call_back, callback), accepted & (k > 0), k, f, z)
        return _LoopState(
            z=z,
            solver_state=state,
            grad=jnp.where(accepted, grad, st.grad),
            aux=jax.tree.map(lambda a, b: jnp.where(accepted, a, b), aux, st.aux),
            losses=losses,
            grad_norms=grad_norms,
            iteration=k,
            rejected=rejected,
            done=done,
            converged=converged,
        )

    st0 = _LoopState(
        z=z0,
        solver_state=dynamic_state,
        grad=jnp.zeros_like(z0),
        aux=aux0,
        losses=hist,
        grad_norms=hist,
        iteration=jnp.asarray(-1),
        rejected=jnp.asarray(0),
        done=jnp.asarray(False),
        converged=jnp.asarray(False),
    )
    st = jax.lax.while_loop(lambda st: ~st.done, body, st0)
    it = jnp.maximum(st.iteration, 0)
    pad = jnp.arange(steps + 1) > it
    losses = jnp.where(pad, st.losses[it], st.losses)
    grad_norms = jnp.where(pad, st.grad_norms[it], st.grad_norms)
    return st.z, st.grad, st.aux, losses, grad_norms, it, st.converged


@eqx.filter_jit
def _fit(objective: FitObjective, z0, *, optimizer, steps, gtol, ftol, gtol_stall, max_linesearch, callback):
    aux_struct = eqx.filter_eval_shape(lambda: objective.value_and_aux(z0)[1])
    z, _, aux, losses, gnorms, iterations, converged = _minimise(
        _loss_with_aux,
        objective,
        z0,
        aux_struct,
        optimizer=optimizer,
        steps=steps,
        gtol=gtol,
        ftol=ftol,
        gtol_stall=gtol_stall,
        max_linesearch=max_linesearch,
        callback=callback,
    )
    z = eqx.error_if(
        z,
        ~jnp.isfinite(losses[0]),
        "the simulation at the initial guess fails or is not finite; start from other values or use a smaller dt0",
    )
    trajectory = Trajectory(
        objective.t, aux["q"], aux["p"], aux["qd"], aux["f"], aux["energy"], diffrax.RESULTS.successful, None, aux["a"]
    )
    return z, losses, gnorms, iterations, converged, trajectory, aux["forces"]


def _run(
    template,
    spec,
    extra,
    z0,
    y0,
    t,
    q_measured,
    qd_measured,
    *,
    qd_weight,
    solver,
    dt0,
    gradient,
    optimizer,
    steps,
    gtol,
    ftol,
    gtol_stall,
    max_linesearch,
    callback,
):
    if gradient == "auto":
        gradient = "forward" if z0.size <= AUTO_FORWARD_MAX else "reverse"
    objective = FitObjective(template, extra, y0, t, q_measured, qd_measured, solver, spec, qd_weight, dt0, gradient)
    out = _fit(
        objective,
        z0,
        optimizer=optimizer,
        steps=steps,
        gtol=float(gtol),
        ftol=float(ftol),
        gtol_stall=float(gtol_stall),
        max_linesearch=int(max_linesearch),
        callback=callback,
    )
    return (objective, *out)


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
) -> MuscleFitResult:
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
        optimizer: None for `optimistix.BFGS` with a backtracking line search (see the module
            doc), or any optax transformation (e.g. ``optax.adam(0.02)``).
        steps: maximum number of iterations (static: the length of the histories).
        gtol: stop when ``‖∂L/∂z‖∞ ≤ gtol · ‖∂L/∂z(z₀)‖∞``; ftol: stop when ``L ≤ ftol``.
        gtol_stall: (BFGS) a failed line search counts as converged if the gradient has fallen by
            this factor.
        max_linesearch: (BFGS) step halvings before giving up.
        callback: called as ``callback(iteration, loss, z)`` after each iteration (through
            `jax.debug.callback`, also under jit/vmap: once per subject) e.g. to drive a progress
            bar; the library itself prints nothing. Part of the compiled fit: pass the same
            function to reuse the compilation.

    Returns:
        a `MuscleFitResult`; ``params[name]`` ``(m,)`` holds all muscles' values.

    Example::

        >>> res = fit_muscle_parameters(guess_system, y0, t, q_measured, muscles=("BICshort", "BRA"))
        >>> res.params["max_isometric_force"], res.loss_history[-1]
        >>> # several subjects' motions (S, T, n) and initial guesses (S, m) in one call:
        >>> fit_one = lambda f0, q: fit_muscle_parameters(
        ...     eqx.tree_at(lambda s: s.drive.muscles.max_isometric_force, guess_system, f0), y0, t, q, dt0=5e-3)
        >>> batch = jax.jit(jax.vmap(fit_one))(f0_guesses, q_subjects)   # batch.params[...] (S, m)
    """
    drive = _muscle_drive(system)
    t, q_measured, qd_measured, dt0, qd_weight = _common_checks(
        system, y0, t, q_measured, qd_measured, gradient, dt0, qd_weight, steps
    )
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
    z0_np = _concrete(z0)
    if z0_np is not None and not np.all(np.isfinite(z0_np)):
        raise ValueError("the initial guesses of the fitted parameters must be > 0")
    z0 = eqx.error_if(z0, ~jnp.all(jnp.isfinite(z0)), "the initial guesses of the fitted parameters must be > 0")
    objective, z, losses, gnorms, iterations, converged, trajectory, forces = _run(
        system,
        spec,
        None,
        z0,
        y0,
        t,
        q_measured,
        qd_measured,
        qd_weight=qd_weight,
        solver=solver,
        dt0=dt0,
        gradient=gradient,
        optimizer=optimizer,
        steps=int(steps),
        gtol=gtol,
        ftol=ftol,
        gtol_stall=gtol_stall,
        max_linesearch=max_linesearch,
        callback=callback,
    )
    fsys = objective.to_system(z)
    return MuscleFitResult(
        fsys,
        spec.params(fsys),
        z,
        losses[-1],
        losses,
        gnorms,
        iterations,
        converged,
        trajectory,
        forces,
        None,
        objective,
    )


def fit_excitations(
    system: HamiltonianSystem,
    y0: dict,
    t: Float[ArrayLike, " T"],
    q_measured: Float[ArrayLike, "T n"],
    qd_measured: Float[ArrayLike, "T n"] | None = None,
    *,
    nodes: Float[ArrayLike, " K"],
    muscles: Sequence[str | int] | None = None,
    initial: Float[ArrayLike, ...] = 0.2,
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
) -> MuscleFitResult:
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
        a `MuscleFitResult`; ``params["excitation"]`` ``(K, k)``, ``excitation`` the fitted
        `PiecewiseLinearExcitation`, ``forces`` ``(T, m)`` N the muscle tensions.
    """
    drive = _muscle_drive(system)
    t, q_measured, qd_measured, dt0, qd_weight = _common_checks(
        system, y0, t, q_measured, qd_measured, gradient, dt0, qd_weight, steps
    )
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
        raise ValueError(
            f"initial must be a scalar or have shape (len(nodes), n_fitted_muscles) = ({K}, {k}), got {initial.shape}"
        )
    init_np = _concrete(initial)
    message = "initial excitations must lie strictly between 0 and 1 (they are logit-parameterised)"
    if init_np is not None and not np.all((init_np > 0) & (init_np < 1)):
        raise ValueError(message)
    initial = eqx.error_if(initial, ~jnp.all((initial > 0) & (initial < 1)), message)
    spec = _ExcitationSpec(indices, drive.paths.n_muscles)
    z0 = jnp.log(initial / (1 - initial)).reshape(-1)
    objective, z, losses, gnorms, iterations, converged, trajectory, forces = _run(
        system,
        spec,
        nodes,
        z0,
        y0,
        t,
        q_measured,
        qd_measured,
        qd_weight=qd_weight,
        solver=solver,
        dt0=dt0,
        gradient=gradient,
        optimizer=optimizer,
        steps=int(steps),
        gtol=gtol,
        ftol=ftol,
        gtol_stall=gtol_stall,
        max_linesearch=max_linesearch,
        callback=callback,
    )
    excitation = PiecewiseLinearExcitation(nodes, jax.nn.sigmoid(z.reshape(K, k)))
    return MuscleFitResult(
        objective.to_system(z),
        {"excitation": excitation.values},
        z,
        losses[-1],
        losses,
        gnorms,
        iterations,
        converged,
        trajectory,
        forces,
        excitation,
        objective,
    )
