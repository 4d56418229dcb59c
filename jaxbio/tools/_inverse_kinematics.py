"""OpenSim's ``InverseKinematicsTool``: the coordinates that best fit measured markers, every
frame of a trial in one batched least-squares solve.

What OpenSim 4.6 solves at each frame (opensim-core ``InverseKinematicsTool::run`` and
``populateReferences``, ``InverseKinematicsSolver``, ``AssemblySolver``, ``MarkersReference``;
Simbody's ``Assembler``, ``Markers`` and ``QValue`` goals), and jaxbio with it:

    G(c) = Σ_i w_i |x_i(c) − m_i|² / (2 Σ_i w_i)  +  Σ_j w_j (c_j − v_j)² / 2

- ``x_i(c)``: model marker ``i`` in the ground (`marker_positions`), ``m_i`` its measurement in
  the frame (the ``.trc``, converted to metres from its ``Units``); the sums over ``i`` run over
  the markers with an applied ``IKMarkerTask`` that are both in the file and in the model, and
  *visible* in that frame: a marker that is NaN (occluded) in a frame is left out of that frame,
  numerator and denominator (Simbody ``Markers::calcGoal``). Markers in the file without an
  applied task are not tracked; without any marker task every marker of the file is tracked
  with weight 1 (``MarkersReference`` default weight).
- ``v_j``: the target of an applied ``IKCoordinateTask``: the coordinate's ``default_value``,
  the task's ``<value>`` (``manual_value``), or the coordinate file's column at that time
  (``from_file``: OpenSim's quintic GCV spline through the file's samples, degrees converted to
  radians for rotational coordinates).
- Coordinates: ``clamped`` ones stay within their range (Simbody ``Assembler::restrictQ``;
  jaxbio: ``c = lo + (hi − lo)(1 + sin u)/2``, so every iterate is in range), ``locked`` ones are
  held at their default value (their task, if any, is dropped, as OpenSim's
  ``AssemblySolver::setupGoals`` does), coupled ones are functions of their independent
  coordinate (`jaxbio.coordinates.CoordinateMap`). OpenSim 4.6 enforces constraints exactly
  whatever ``constraint_weight`` says (``InverseKinematicsSolver``'s constructor passes
  ``SimTK::Infinity`` on), and so does jaxbio.
- The frames: those of the marker file from the row nearest ``start`` to the row nearest ``end``
  (the time range clipped to the file's).

The errors reported per frame (``_ik_marker_errors.sto``) are OpenSim's: the total of the
unweighted squared distances of the tracked markers (0 for a marker missing in the frame), the
RMS over the number of tracked markers and the largest distance.

**Solve.** OpenSim assembles frame 0 from the model's default pose, then tracks frame by frame
from the previous solution (IPOPT, convergence tolerance ``accuracy``). jaxbio also starts from
the default pose and tracks frame by frame, each frame from the previous two frames' solutions
extrapolated (``2 c_{t−1} − c_{t−2}``, within the clamps' ranges: a start nearer the optimum,
fewer iterations), with Levenberg–Marquardt on the residual vector whose half squared norm is
``G`` (`inverse_kinematics_residuals`), its Jacobian from the point Jacobians of one kinematics
pass (`jaxbio.dynamics.point_jacobian`), every frame in one ``lax.scan``, each to a tolerance
far tighter than OpenSim's (the tool: the goal within a relative 1e-10 of its minimum). The program is small (one copy of the kinematics, no ``jax.jacfwd``):
it compiles in a few seconds. Everything is a pure function of the model's arrays:
`solve_inverse_kinematics` is jit-able, vmap-able (over trials or models) and differentiable
(forward and reverse mode, by the implicit function theorem at each frame's optimum).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import quaternion as quat
from jaxbio._text import listing
from jaxbio.io import Markers, read_trc
from jaxbio.io import Table

__all__ = [
    "read_ik_tasks",
    "CoordinateTask",
    "InverseKinematicsInputs",
    "InverseKinematicsResult",
    "inverse_kinematics_residuals",
    "inverse_kinematics_tool",
    "marker_errors",
    "prepare_inverse_kinematics",
    "solve_inverse_kinematics",
]

_VALUE_TYPES = ("default_value", "manual_value", "from_file")


@dataclasses.dataclass(frozen=True)
class CoordinateTask:
    """OpenSim's ``IKCoordinateTask``: hold a coordinate near a value with ``weight``.

    ``value_type``: ``"default_value"`` (the model's default), ``"manual_value"`` (``value``, rad
    or m) or ``"from_file"`` (the coordinate file's column of that name)."""

    weight: float = 1.0
    value_type: str = "default_value"
    value: float = 0.0

    def __post_init__(self):
        if self.value_type not in _VALUE_TYPES:
            raise ValueError(f"value_type must be one of {', '.join(_VALUE_TYPES)}, got {self.value_type!r}")
        if not (math.isfinite(float(self.weight)) and float(self.weight) >= 0):
            raise ValueError(f"weight must be a finite number ≥ 0, got {self.weight!r}")
        if not math.isfinite(float(self.value)):
            raise ValueError(f"value must be finite, got {self.value!r}")


class InverseKinematicsInputs(eqx.Module):
    """The measured trial, prepared for `solve_inverse_kinematics` (`prepare_inverse_kinematics`).

    - ``time``: ``(T,)`` s, the frames.
    - ``observed``: ``(T, k, 3)`` m, ground frame: the ``k`` tracked markers (0 where missing).
    - ``weights``: ``(T, k)``: each marker's task weight, 0 in the frames where it is missing.
    - ``targets``: ``(T, j)`` rad / m, the values of the ``j`` coordinate tasks;
      ``coordinate_weights``: ``(T, j)``, their weights (the same in every frame).
    - ``markers`` (static): the tracked markers' names; ``coordinates`` (static): the index in
      ``c`` of each coordinate task.
    """

    time: Float[Array, " T"]
    observed: Float[Array, "T k 3"]
    weights: Float[Array, "T k"]
    targets: Float[Array, "T j"]
    coordinate_weights: Float[Array, "T j"]
    markers: tuple[str, ...] = eqx.field(static=True)
    coordinates: tuple[int, ...] = eqx.field(static=True)

    @property
    def n_frames(self) -> int:
        return int(self.time.shape[0])

    def frame(self, i) -> InverseKinematicsInputs:
        """Frame ``i`` (the per-frame fields without their leading axis)."""
        return dataclasses.replace(
            self,
            time=self.time[i],
            observed=self.observed[i],
            weights=self.weights[i],
            targets=self.targets[i],
            coordinate_weights=self.coordinate_weights[i],
        )


@dataclasses.dataclass(frozen=True)
class InverseKinematicsResult:
    """What `inverse_kinematics_tool` computed.

    - ``coordinates``: `Table` of OpenSim's output motion (every coordinate of the model, rotational
      ones in degrees, ``inDegrees=yes``), as ``InverseKinematicsTool`` writes it.
    - ``errors``: `Table` ``total_squared_error`` (m²), ``marker_error_RMS``, ``marker_error_max``
      (m) per frame (OpenSim's ``<name>_ik_marker_errors.sto``).
    - ``c``: ``(T, nc)`` rad / m, the solution; ``objective``: ``(T,)`` OpenSim's goal ``G`` at it;
      ``converged``: ``(T,)`` bool, the solver met its tolerance.
    - ``markers``: the tracked markers; ``inputs``: the `InverseKinematicsInputs` solved.
    """

    coordinates: Table
    errors: Table
    c: np.ndarray
    objective: np.ndarray
    converged: np.ndarray
    markers: tuple[str, ...]
    inputs: InverseKinematicsInputs


# ---- the free coordinates -----------------------------------------------------------------------


def _free(model):
    """The unlocked coordinates (numpy indices), which of them are clamped with a finite range
    (a traced bool array: ranges are model arrays), and those ranges (safe values elsewhere)."""
    free = np.flatnonzero(~np.asarray(model.locked, dtype=bool))
    lo, hi = model.ranges[free, 0], model.ranges[free, 1]
    clamped = np.asarray(model.clamped, dtype=bool)[free]
    bounded = jnp.asarray(clamped) & jnp.isfinite(lo) & jnp.isfinite(hi) & (hi > lo)
    return free, bounded, jnp.where(bounded, lo, 0.0), jnp.where(bounded, hi, 1.0)


def _to_c(model, u):
    """OpenSim coordinates ``c`` from the free variables ``u`` (clamped coordinates through a sine)."""
    free, bounded, lo, hi = _free(model)
    squashed = lo + (hi - lo) * (1 + jnp.sin(u)) / 2
    return model.defaults.at[free].set(jnp.where(bounded, squashed, u))


def _to_u(model, c):
    free, bounded, lo, hi = _free(model)
    x = c[free]
    s = jnp.clip(2 * (jnp.where(bounded, x, lo) - lo) / (hi - lo) - 1, -1.0, 1.0)
    return jnp.where(bounded, jnp.arcsin(s), x)


# ---- the objective --------------------------------------------------------------------------------


def inverse_kinematics_residuals(model, inputs: InverseKinematicsInputs, c: Float[Array, " nc"]) -> Float[Array, " r"]:
    """The residuals ``r(c)`` of one frame whose ``½|r|²`` is OpenSim's goal ``G(c)`` (module
    docstring): ``√(w_i / Σw) (x_i(c) − m_i)`` for each tracked marker (zero where it is
    missing), then ``√w_j (c_j − v_j)`` for each coordinate task.

    - ``model``: the `Model`; ``inputs``: one frame of `InverseKinematicsInputs`
      (``inputs.frame(i)``); ``c``: ``(nc,)`` rad / m.

    Returns ``(3k + j,)``. Pure (vmap over frames, grad)."""
    from jaxbio.markers import tree_marker_positions as _marker_points
    from jaxbio import coordinates

    markers = model.markers.select(inputs.markers)
    x = _marker_points(model, markers, coordinates.to_tree(model.coordinates, c))
    total = jnp.sum(inputs.weights)
    scale = jnp.sqrt(inputs.weights / jnp.where(total > 0, total, 1.0))
    r_markers = (scale[:, None] * (x - inputs.observed)).reshape(-1)
    idx = np.asarray(inputs.coordinates, dtype=np.int32)
    r_coords = jnp.sqrt(inputs.coordinate_weights) * (c[idx] - inputs.targets)
    return jnp.concatenate([r_markers, r_coords])


def _residuals_and_jacobian(model, inputs: InverseKinematicsInputs, u):
    """`inverse_kinematics_residuals` at ``c = _to_c(model, u)``, their Jacobian ``∂r/∂u``
    ``(3k + j, nu)`` and ``(nu,)`` the curvature that the clamps' sine adds to the goal,
    from one forward-kinematics pass: each marker's rows are its point Jacobian
    (`jaxbio.dynamics.point_jacobian`: ``a × (x − O)`` per revolute coordinate moving it, ``a``
    per prismatic one), chained through the coordinate map (``∂q/∂c``, couplers) and the clamps'
    sine (``∂c/∂u``). Much smaller a program than ``jax.jacfwd`` of the kinematics.

    The curvature: ``∂²G/∂u² = (∂c/∂u)ᵀ ∂²G/∂c² (∂c/∂u) + diag(∂G/∂c ⊙ ∂²c/∂u²)``; Gauss–Newton
    keeps the first term (``JᵀJ``) and drops the second, which is all the curvature left where a
    clamped coordinate's optimum is on its bound (``∂c/∂u = 0`` there): without it the model
    there is flat, the steps overshoot, the damping grows without bound and every other
    coordinate crawls (Rajagopal's static pose: pronation at its limit). Returned clipped at 0,
    so that ``JᵀJ + diag(h)`` stays positive semi-definite."""
    from jaxbio import coordinates
    from jaxbio.dynamics.kinematics import point_jacobian, segment_motion

    free, bounded, lo, hi = _free(model)
    c = _to_c(model, u)
    dc_du = jnp.where(bounded, (hi - lo) * jnp.cos(u) / 2, 1.0)
    q = coordinates.to_tree(model.coordinates, c)
    dq_dc = coordinates.jacobian(model.coordinates, c)[:, free]  # (nq, nu)
    tree = model.tree
    mo = segment_motion(tree, q)
    markers = model.markers.select(inputs.markers)
    seg = np.asarray(markers.segments, dtype=np.int32)  # -1: on the ground
    in_segment = markers.frame_positions + quat.rotate(markers.frame_orientations, markers.locations)
    jv, _ = jax.vmap(lambda s, p: point_jacobian(tree, q, s, p, motion=mo))(np.maximum(seg, 0), in_segment)
    on_ground = jnp.asarray(seg < 0)
    pos = jnp.where(on_ground[:, None], 0.0, mo.position[np.maximum(seg, 0)])
    att = jnp.where(on_ground[:, None], jnp.array([1.0, 0.0, 0.0, 0.0], q.dtype), mo.attitude[np.maximum(seg, 0)])
    x = pos + quat.rotate(att, in_segment)
    jv = jnp.where(on_ground[:, None, None], 0.0, jv)  # (k, 3, nq)
    total = jnp.sum(inputs.weights)
    scale = jnp.sqrt(inputs.weights / jnp.where(total > 0, total, 1.0))
    r_markers = (scale[:, None] * (x - inputs.observed)).reshape(-1)
    J_markers_c = (scale[:, None, None] * jv).reshape(-1, tree.nv) @ dq_dc  # (3k, nu), ∂r/∂c
    J_markers = J_markers_c * dc_du
    idx = np.asarray(inputs.coordinates, dtype=np.int32)
    w = jnp.sqrt(inputs.coordinate_weights)
    r_coords = w * (c[idx] - inputs.targets)
    column = np.searchsorted(free, idx)  # coordinate tasks name unlocked coordinates only
    J_coords = (w * dc_du[column])[:, None] * jnp.asarray(np.eye(free.size)[column], u.dtype)
    # ∂G/∂c of the free coordinates (before the sine's chain) and the sine's second derivative
    g_c = r_markers @ J_markers_c + (w * r_coords) @ jnp.asarray(np.eye(free.size)[column], u.dtype)
    d2c_du2 = jnp.where(bounded, -(hi - lo) * jnp.sin(u) / 2, 0.0)
    h = jnp.maximum(g_c * d2c_du2, 0.0)
    return jnp.concatenate([r_markers, r_coords]), jnp.concatenate([J_markers, J_coords]), h


def marker_errors(model, inputs: InverseKinematicsInputs, c: Float[Array, " nc"]) -> Float[Array, " k"]:
    """Unweighted squared distances ``|x_i(c) − m_i|²`` (m²) of one frame's tracked markers, 0
    where a marker is missing (Simbody ``Markers::findCurrentMarkerErrorSquared``)."""
    from jaxbio.markers import tree_marker_positions as _marker_points
    from jaxbio import coordinates

    markers = model.markers.select(inputs.markers)
    x = _marker_points(model, markers, coordinates.to_tree(model.coordinates, c))
    d2 = jnp.sum((x - inputs.observed) ** 2, axis=-1)
    return jnp.where(inputs.weights > 0, d2, 0.0)


def _levenberg_marquardt(linearised, u0, rtol, atol, max_steps, goal_rtol=0.0):
    """Minimise ``½|r(u)|²`` from ``u0``, ``linearised(u) = (r(u), ∂r/∂u, h(u))``, ``h`` ``≥ 0`` a
    diagonal curvature added to Gauss–Newton's ``JᵀJ`` (`_residuals_and_jacobian`): Levenberg–Marquardt
    with Marquardt's scaling (``diag(JᵀJ + diag(h))``) and Nielsen's damping update, in one
    ``lax.while_loop`` whose body evaluates ``linearised`` once (its first pass at ``u0``, so that
    the program holds one copy of it). Stops as optimistix's ``LevenbergMarquardt`` does (its Cauchy criterion): after
    an accepted step with ``|δu| ≤ atol + rtol |u|`` and ``|Δf| ≤ atol + rtol f`` (RMS norms, ``f
    = ½|r|²``), or when the predicted decrease is below ``f``'s rounding (``4 ε f``), or after ``max_steps``;
    with ``goal_rtol > 0`` also after a step close to Gauss–Newton's (damping ``λ ≤ 1``) that
    lowered ``f`` by at most ``goal_rtol f``: the goal is then within about that of its minimum,
    where a poorly determined direction (a large residual, which Gauss–Newton converges to only
    linearly) would take many more steps to meet the step criterion.

    Returns ``(u, converged, r)``: the solution, whether it met the criterion, its residuals.

    Why not optimistix's ``LevenbergMarquardt`` itself (the tool used it, in a ``lax.scan`` and a
    ``vmap``, around ``jax.jacfwd`` of the kinematics): the measured trace and compile of that
    program, several times this loop's for the same goal at every frame to 9e-15, are in
    benchmarks/README.md, "Inverse kinematics, cold and warm"; and the clamps' curvature ``h`` has
    no place in its Gauss–Newton model."""

    dt = u0.dtype
    r_shape = jax.eval_shape(linearised, u0)[0]

    def rms(x):
        return jnp.sqrt(jnp.mean(x**2))

    def cond(state):
        return (~state[-1]) & (state[-2] <= max_steps)

    def body(state):
        u, r, J, h, lam, nu, k, _ = state
        first = k == 0
        g = J.T @ r
        A = J.T @ J + jnp.diag(h)
        d = jnp.diagonal(A)
        d = jnp.maximum(d, jnp.finfo(dt).eps * (1 + jnp.max(d)))
        step = jnp.where(first, 0.0, -jnp.linalg.solve(A + lam * jnp.diag(d), g))
        r_new, J_new, h_new = linearised(u + step)
        f, f_new = 0.5 * jnp.sum(r**2), 0.5 * jnp.sum(r_new**2)
        predicted = -(step @ g + 0.5 * step @ (A @ step))
        rho = (f - f_new) / jnp.where(predicted > 0, predicted, 1.0)
        accept = first | ((f_new <= f) & (predicted > 0) & (rho > 1e-4) & jnp.all(jnp.isfinite(r_new)))
        small = (rms(step) <= atol + rtol * rms(u)) & (jnp.abs(f - f_new) <= atol + rtol * f)
        small = small | ((lam <= 1) & (f - f_new <= goal_rtol * f))
        # or no decrease left that f's rounding could show (near the optimum a rounding-level rise
        # would reject every step and drive the damping to infinity)
        flat = ~(predicted > 4 * jnp.finfo(dt).eps * f)
        done = ~first & ((accept & small) | flat)
        lam = jnp.where(first, lam, jnp.where(accept, lam * jnp.maximum(1 / 3, 1 - (2 * rho - 1) ** 3), lam * nu))
        nu = jnp.where(accept, 2.0, 2 * nu)
        return (
            jnp.where(accept, u + step, u),
            jnp.where(accept, r_new, r),
            jnp.where(accept, J_new, J),
            jnp.where(accept, h_new, h),
            lam,
            nu,
            k + 1,
            done,
        )

    state = (
        u0,
        jnp.zeros(r_shape.shape, dt),
        jnp.zeros(r_shape.shape + u0.shape, dt),
        jnp.zeros(u0.shape, dt),
        jnp.asarray(1e-3, dt),
        jnp.asarray(2.0, dt),
        jnp.asarray(0),
        jnp.asarray(False),
    )
    u, r, _, _, _, _, _, done = jax.lax.while_loop(cond, body, state)
    return u, done, r


def _solve_frame(model, inputs, u0, rtol, atol, max_steps, goal_rtol=0.0):
    u, ok, r = _levenberg_marquardt(
        lambda u: _residuals_and_jacobian(model, inputs, u), u0, rtol, atol, max_steps, goal_rtol
    )
    return _at_optimum(jax.lax.stop_gradient(u), model, inputs), ok, r


def _goal_in_u(u, model, inputs):
    return 0.5 * jnp.sum(inverse_kinematics_residuals(model, inputs, _to_c(model, u)) ** 2)


@eqx.filter_custom_jvp
def _at_optimum(u, model, inputs):
    """``u``, a minimiser of the goal, with the derivatives of the implicit function theorem:
    ``u̇ = −H⁻¹ (∂∇_u G/∂θ) θ̇`` (``H`` the goal's Hessian in ``u``, a pseudo-inverse where it is
    singular: a clamped coordinate at its bound), so that the solve differentiates (forward and
    reverse mode) with respect to the model's arrays and the measurements without going through
    the iterations. Traced only when differentiated."""
    return u


@_at_optimum.def_jvp
def _at_optimum_jvp(primals, tangents):
    u, model, inputs = primals
    _, t_model, t_inputs = tangents

    def tangent(x, t):
        if t is None and eqx.is_inexact_array(x):
            return jnp.zeros_like(x)
        return t

    def leaf(x):
        return x is None

    theta = (model, inputs)
    t_theta = jax.tree_util.tree_map(tangent, theta, (t_model, t_inputs), is_leaf=leaf)
    t_theta = jax.tree_util.tree_map(lambda x, t: t if eqx.is_inexact_array(x) else None, theta, t_theta, is_leaf=leaf)
    _, g_dot = eqx.filter_jvp(lambda th: jax.grad(_goal_in_u)(u, *th), (theta,), (t_theta,))
    hessian = jax.hessian(_goal_in_u)(u, model, inputs)
    return u, -jnp.linalg.pinv(hessian, hermitian=True) @ g_dot


def solve_inverse_kinematics(
    model,
    inputs: InverseKinematicsInputs,
    c0: Float[Array, " nc"] | None = None,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 256,
) -> tuple[Float[Array, "T nc"], Float[Array, " T"]]:
    """Every frame's coordinates minimising OpenSim's IK goal (module docstring), pure and jit-able.

    - ``model``: the `Model` (with markers); ``inputs``: `InverseKinematicsInputs` of ``T`` frames.
    - ``c0``: ``(nc,)`` the start of frame 0 (default: the model's default pose, as OpenSim).
    - ``rtol``, ``atol``: the Levenberg–Marquardt tolerances (on the step and on the goal's change,
      as `optimistix.LevenbergMarquardt`'s); ``max_steps``: its iterations per frame at most.

    The frames are solved in turn (one ``lax.scan``), each from the previous two frames'
    solutions extrapolated (module docstring), as OpenSim tracks them from the previous one. Returns ``(c, converged)``: ``(T, nc)`` rad / m and ``(T,)`` bool. Locked
    coordinates are at their default, clamped ones within range."""
    c, ok, _ = _solve(model, inputs, c0, rtol, atol, max_steps)
    return c, ok


def _solve(model, inputs, c0, rtol, atol, max_steps, goal_rtol=0.0):
    """`solve_inverse_kinematics`, and ``(T, 3k + j)`` the residuals at the solution."""
    c0 = model.defaults if c0 is None else c0

    def step(carry, frame):
        c_prev, c_before = carry  # the start: extrapolated in c, within the clamps' ranges
        u, ok, r = _solve_frame(model, frame, _to_u(model, 2 * c_prev - c_before), rtol, atol, max_steps, goal_rtol)
        c = _to_c(model, u)
        return (c, c_prev), (u, ok, r)

    _, (u, ok, r) = jax.lax.scan(step, (c0, c0), inputs)
    return jax.vmap(lambda x: _to_c(model, x))(u), ok, r


# ---- preparing the trial --------------------------------------------------------------------------


def _nearest_row(time: np.ndarray, t: float) -> int:
    """``TimeSeriesTable::getNearestRowIndexForTime``."""
    i = int(np.searchsorted(time, t))
    if i >= time.size:
        return time.size - 1
    if i > 0 and abs(time[i - 1] - t) <= abs(time[i] - t):
        return i - 1
    return i


def _read_markers(markers) -> tuple[Markers, str]:
    if isinstance(markers, Markers):
        return markers, "markers"
    path = Path(markers)
    suffix = path.suffix.lower()
    if suffix == ".trc":
        return read_trc(path), str(path)
    if suffix == ".c3d":
        from jaxbio.io import read_c3d

        return read_c3d(path).markers, str(path)
    raise ValueError(f"{path}: a marker file must be .trc (or .c3d), got {suffix or 'no extension'!r}")


def prepare_inverse_kinematics(
    model,
    markers,
    *,
    marker_weights: Mapping[str, float] | None = None,
    coordinate_tasks: Mapping[str, CoordinateTask] | None = None,
    coordinate_file=None,
    start: float | None = None,
    end: float | None = None,
    dtype=None,
) -> InverseKinematicsInputs:
    """The frames of a trial as OpenSim's ``InverseKinematicsTool`` sets them up, outside jit.

    - ``model``: an `Model` with markers, or a ``.osim`` path.
    - ``markers``: a ``.trc`` (or ``.c3d``) path or `Markers` (metres: the file's ``Units``).
    - ``marker_weights``: the applied ``IKMarkerTask`` s, ``{name: weight}`` (None or empty: every
      marker of the file that the model has, weight 1, as OpenSim).
    - ``coordinate_tasks``: the applied ``IKCoordinateTask`` s, ``{name: CoordinateTask}``.
    - ``coordinate_file``: ``.mot``/``.sto`` for ``from_file`` tasks (a `Table` works too).
    - ``start``, ``end``: the time range, s (None: the file's).

    Warns, naming them, for task markers missing from the file or the model, file markers not
    tracked, tracked markers missing (occluded) in some frames, fewer than 4 markers. Raises
    ``ValueError`` for a model without markers, no tracked marker, a coordinate task naming no
    coordinate (or a dependent one), a ``from_file`` task without a file or its column, a NaN
    target, an empty time range."""
    from jaxbio.tools._inverse_dynamics import tool_model

    m = tool_model(model, dtype)
    data, where = _read_markers(markers)
    if m.markers is None:
        raise ValueError(f"{m.path}: the model has no markers (no <MarkerSet>); inverse kinematics needs them")
    in_model = set(m.markers.names)
    if not marker_weights:  # no marker task: every marker at MarkersReference's default weight 1
        tracked = [n for n in data.names if n in in_model]
        weights = {n: 1.0 for n in tracked}
        untracked = [n for n in data.names if n not in in_model]
        if untracked:
            warnings.warn(
                f"{where}: {len(untracked)} marker(s) of the file are not in the model ({m.path}) and are not "
                f"tracked: {listing(untracked, 12)}",
                stacklevel=2,
            )
    else:
        weights = {str(k): float(v) for k, v in marker_weights.items()}
        bad = [k for k, v in weights.items() if not (math.isfinite(v) and v >= 0)]
        if bad:
            raise ValueError(f"marker weights must be finite and ≥ 0: {listing(bad, 12)}")
        not_in_file = [n for n in weights if n not in data.names]
        not_in_model = [n for n in weights if n in data.names and n not in in_model]
        extra = [n for n in data.names if n not in weights]
        if not_in_file:
            warnings.warn(
                f"{where}: {len(not_in_file)} marker task(s) name markers the file does not have; they are not "
                f"tracked (as OpenSim): {listing(not_in_file, 12)}",
                stacklevel=2,
            )
        if not_in_model:
            warnings.warn(
                f"{where}: {len(not_in_model)} marker task(s) name markers the model ({m.path}) does not have; "
                f"they are not tracked (as OpenSim): {listing(not_in_model, 12)}",
                stacklevel=2,
            )
        if extra:
            warnings.warn(
                f"{where}: {len(extra)} marker(s) of the file have no applied marker task and are not tracked: "
                f"{listing(extra, 12)}",
                stacklevel=2,
            )
        tracked = [n for n in data.names if n in weights and n in in_model]
    if not tracked:
        raise ValueError(
            f"{where}: no marker of the file is both tracked and in the model ({m.path}); "
            f"file markers: {listing(data.names, 8)}; model markers: {listing(m.markers.names, 8)}"
        )
    if len(tracked) < 4:
        warnings.warn(f"{where}: only {len(tracked)} markers to track: {', '.join(tracked)}", stacklevel=2)

    # frames: the rows nearest the time range clipped to the file's
    t_all = data.time
    lo = t_all[0] if start is None else max(float(start), t_all[0])
    hi = t_all[-1] if end is None else min(float(end), t_all[-1])
    if not hi >= lo:
        raise ValueError(
            f"{where}: the time range {start}–{end} s has no frames in the file ({t_all[0]:g}–{t_all[-1]:g} s)"
        )
    rows = np.arange(_nearest_row(t_all, lo), _nearest_row(t_all, hi) + 1)
    time = t_all[rows]
    cols = [data.names.index(n) for n in tracked]
    observed = data.positions[np.ix_(rows, cols)]
    visible = ~np.isnan(observed[..., 0])
    w = np.asarray([weights[n] for n in tracked]) * visible
    gaps = [(n, int((~visible[:, k]).sum())) for k, n in enumerate(tracked) if not visible[:, k].all()]
    if gaps:
        warnings.warn(
            f"{where}: {len(gaps)} tracked marker(s) are missing (occluded) in some frames and left out of "
            f"those frames, as OpenSim: " + listing([f"{n} ({k} of {time.size} frames)" for n, k in gaps], 12),
            stacklevel=2,
        )
    empty = np.flatnonzero(w.sum(1) == 0)
    if empty.size:
        warnings.warn(
            f"{where}: {empty.size} frame(s) have no visible weighted marker (first t = {time[empty[0]]:g} s); "
            "there only the coordinate tasks act (OpenSim's goal is undefined there)",
            stacklevel=2,
        )

    # coordinate tasks
    tasks = dict(coordinate_tasks or {})
    names = m.coordinate_names
    index, target_rows, cw = [], [], []
    table = None
    for name, task in tasks.items():
        if not isinstance(task, CoordinateTask):
            raise ValueError(f"coordinate task {name!r}: expected a CoordinateTask, got {type(task).__name__}")
        if name not in names:
            extra = (
                " (a dependent coordinate of a CoordinateCouplerConstraint)" if name in m.dependent_coordinates else ""
            )
            raise ValueError(f"coordinate task {name!r}: the model ({m.path}) has no such coordinate{extra}")
        k = names.index(name)
        if m.locked[k]:
            continue  # OpenSim locks the coordinate and drops its task (AssemblySolver::setupGoals)
        if task.value_type == "default_value":
            values = np.full(time.size, float(m.defaults[k]))
        elif task.value_type == "manual_value":
            values = np.full(time.size, float(task.value))
        else:
            if coordinate_file is None:
                raise ValueError(
                    f"coordinate task {name!r} takes its value from_file but no coordinate file is given "
                    "(OpenSim: 'value for coordinate not found')"
                )
            if table is None:
                table = _coordinate_table(m, coordinate_file)
            if name not in table.labels:
                raise ValueError(
                    f"{coordinate_file}: no column {name!r} for its from_file coordinate task (columns: "
                    f"{listing(table.labels, 12)})"
                )
            from jaxbio.tools._gcvspl import GCVSpline

            try:
                values = np.asarray(GCVSpline(table.time, table.column(name), degree=5)(time), float)
            except ValueError as e:
                raise ValueError(f"{coordinate_file}: column {name!r}: {e}") from None
        if not np.all(np.isfinite(values)):
            raise ValueError(f"coordinate task {name!r}: its target is not finite")
        index.append(k)
        target_rows.append(values)
        cw.append(task.weight)
    dt = m.defaults.dtype
    targets = np.stack(target_rows, 1) if target_rows else np.zeros((time.size, 0))
    return InverseKinematicsInputs(
        time=jnp.asarray(time, dt),
        observed=jnp.asarray(np.nan_to_num(observed, nan=0.0), dt),
        weights=jnp.asarray(w, dt),
        targets=jnp.asarray(targets, dt),
        coordinate_weights=jnp.asarray(np.tile(np.asarray(cw, float), (time.size, 1)), dt),
        markers=tuple(tracked),
        coordinates=tuple(index),
    )


def _coordinate_table(m, coordinate_file) -> Table:
    """The coordinate file, rotational columns in radians (OpenSim's ``convertDegreesToRadians``)."""
    from jaxbio.io import read_storage

    table = coordinate_file if isinstance(coordinate_file, Table) else read_storage(coordinate_file)
    if table.in_degrees:
        data = np.array(table.data, dtype=float)
        for j, label in enumerate(table.labels):
            if label in m.coordinate_names and m.motion_types[m.coordinate_names.index(label)] == "rotational":
                data[:, j] = np.radians(data[:, j])
        table = dataclasses.replace(table, data=data, in_degrees=False)
    return table


def _trial(model, inputs):
    """The tool's solve and its reports (kept across processes by the command line, `jaxbio._aot`;
    the frames padded to a bucket of lengths, the last one repeated after the others: the frames
    are solved in turn, so the padding changes nothing before it)."""
    x64 = model.defaults.dtype == jnp.float64
    rtol, atol = (1e-10, 1e-12) if x64 else (1e-5, 1e-6)
    # stop also once the goal is within ``rtol`` of its minimum (`_levenberg_marquardt`): the
    # goal, not the poorly determined coordinates (the arms of a running trial), is what the
    # tool reports and what OpenSim's accuracy bounds
    c, ok, r = _solve(model, inputs, None, rtol, atol, 256, goal_rtol=rtol)
    # the goal and the marker errors from the residuals at the solution (no second kinematics):
    # ``r_i = √(w_i / Σw) (x_i − m_i)``, so ``|x_i − m_i|² = |r_i|² Σw / w_i`` where ``w_i > 0``
    goal = 0.5 * jnp.sum(r**2, axis=1)
    k = inputs.weights.shape[1]
    d2 = jnp.sum(r[:, : 3 * k].reshape(-1, k, 3) ** 2, axis=-1)
    total = jnp.sum(inputs.weights, axis=1, keepdims=True)
    seen = inputs.weights > 0
    errors = jnp.where(seen, d2 * total / jnp.where(seen, inputs.weights, 1.0), 0.0)
    return c, ok, goal, errors


def inverse_kinematics_tool(
    model,
    markers,
    *,
    marker_weights: Mapping[str, float] | None = None,
    coordinate_tasks: Mapping[str, CoordinateTask] | None = None,
    coordinate_file=None,
    start: float | None = None,
    end: float | None = None,
    accuracy: float = 1e-5,
    dtype=None,
    progress: Callable[[str], None] | None = None,
) -> InverseKinematicsResult:
    """OpenSim's ``InverseKinematicsTool`` (module docstring): the coordinates of every frame.

    Arguments as `prepare_inverse_kinematics`; ``accuracy``: OpenSim's ``<accuracy>`` (its
    optimiser's convergence tolerance). jaxbio solves to a tighter tolerance than any OpenSim
    accuracy (``rtol`` 1e-10): the solution is the optimum, and ``accuracy`` only needs to be a
    positive number. ``dtype``: the model's float type (float64 when x64 is enabled).

    Returns an `InverseKinematicsResult` (the motion and marker-error tables OpenSim writes, the
    coordinates in rad / m). Warns for frames where the solver did not meet its tolerance."""
    from jaxbio.tools._inverse_dynamics import tool_model
    from jaxbio.tools._inverse_dynamics import coordinates_table

    if not (isinstance(accuracy, (int, float)) and math.isfinite(accuracy) and accuracy > 0):
        raise ValueError(f"accuracy must be a finite number > 0, got {accuracy!r}")
    say = progress or (lambda message: None)
    say("loading the model")
    m = tool_model(model, dtype)
    say("reading the markers")
    inputs = prepare_inverse_kinematics(
        m,
        markers,
        marker_weights=marker_weights,
        coordinate_tasks=coordinate_tasks,
        coordinate_file=coordinate_file,
        start=start,
        end=end,
        dtype=dtype,
    )
    say(f"inverse kinematics of {inputs.n_frames} frames")
    from jaxbio import _aot

    c, ok, goal, errors = (np.asarray(x) for x in _aot.call_over_frames("inverse_kinematics", _trial, m, inputs))
    time = np.asarray(inputs.time, float)
    if not ok.all():
        bad = np.flatnonzero(~ok)
        warnings.warn(
            f"inverse kinematics: the solver did not meet its tolerance in {bad.size} of {time.size} frames "
            f"(first t = {time[bad[0]]:g} s); their coordinates are its last iterate",
            stacklevel=2,
        )
    nm = len(inputs.markers)
    total = errors.sum(1)
    table = coordinates_table(m, time, c, name="Coordinates")
    table = dataclasses.replace(
        table,
        description="Units are S.I. units (second, meters, Newtons, ...)\n"
        "If the header above contains a line with 'inDegrees', this indicates whether rotational values "
        "are in degrees (yes) or radians (no).",
    )
    err = Table(
        time=time,
        labels=("total_squared_error", "marker_error_RMS", "marker_error_max"),
        data=np.stack([total, np.sqrt(total / nm), np.sqrt(errors.max(1))], 1),
        in_degrees=False,
        name="Model Marker Errors from IK",
    )
    return InverseKinematicsResult(table, err, c, goal, ok, inputs.markers, inputs)


def read_ik_tasks(source, *, where: str = "") -> tuple[dict, dict]:
    """OpenSim's ``IKTaskSet`` (an element, or a file holding one) as ``(marker_weights,
    coordinate_tasks)``: the *applied* ``IKMarkerTask`` s ``{name: weight}`` and
    ``IKCoordinateTask`` s ``{name: jaxbio.tools.CoordinateTask}``, in file order (``apply``
    defaults to true, ``weight`` to 1, ``value_type`` to ``default_value``). An element with a
    ``file`` attribute reads that file (relative to ``where``'s folder). ``ValueError`` naming the
    task for a bad number, flag or value type."""
    import xml.etree.ElementTree as ET

    from jaxbio._text import read_xml
    from jaxbio._validate import echo

    if not isinstance(source, ET.Element):
        where = str(source)
        root = read_xml(source, "OpenSim IKTaskSet file")
        source = root if root.tag == "IKTaskSet" else root.find(".//IKTaskSet")
        if source is None:
            raise ValueError(f"{where}: no <IKTaskSet>")
    if source.get("file"):
        return read_ik_tasks(Path(where).parent / source.get("file") if where else source.get("file"))
    markers, coords = {}, {}
    for task in source.findall("objects/*"):
        name = task.get("name", "")
        here = f"{where}: {task.tag} {echo(name)}"
        apply = (_task_text(task, "apply") or "true").lower()
        if apply not in ("true", "false"):
            raise ValueError(f"{here}: <apply> must be true or false, got {echo(apply)}")
        if apply == "false":
            continue
        try:
            weight = float(_task_text(task, "weight") or "1")
        except ValueError:
            raise ValueError(f"{here}: <weight> must be a number, got {echo(_task_text(task, 'weight'))}") from None
        if task.tag == "IKMarkerTask":
            markers[name] = weight
        elif task.tag == "IKCoordinateTask":
            try:
                value = float(_task_text(task, "value") or "0")
            except ValueError:
                raise ValueError(f"{here}: <value> must be a number, got {echo(_task_text(task, 'value'))}") from None
            try:
                coords[name] = CoordinateTask(weight, (_task_text(task, "value_type") or "default_value"), value)
            except ValueError as e:
                raise ValueError(f"{here}: {e}") from None
        else:
            raise ValueError(f"{here}: not an IKMarkerTask or IKCoordinateTask")
    return markers, coords


def _task_text(el, tag: str):
    child = el.find(tag)
    return None if child is None or child.text is None or not child.text.strip() else child.text.strip()
