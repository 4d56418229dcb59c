"""OpenSim's static optimisation (``AnalyzeTool`` with a ``StaticOptimization`` analysis) on an
imported model: every frame of a motion in one ``jit(vmap)``, differentiable.

What OpenSim does (``OpenSim/Analyses/StaticOptimization.cpp``, ``StaticOptimizationTarget.cpp``,
``OpenSim/Tools/AnalyzeTool.cpp``, opensim-core 4.x), and what `static_optimization_tool` does:

1. **Coordinates** as the ``AnalyzeTool`` processes them: padded, resampled and low-passed like
   the inverse dynamics tool (`jaxbio.io.process_coordinates`), quintic GCV splines give ``q`` and
   ``q̇`` at the samples; the accelerations are the derivative of a *second* quintic spline
   through those speeds (``GCVSplineSet(5, states).constructStorage(1)``), not ``q̈`` of the first.
   Frames: the samples from ``findIndex(start)`` to ``findIndex(end)``.
2. **Unknowns**: one control per ``ScalarActuator`` that applies force: every imported muscle
   (`jaxbio.io.OsimMuscles`, its activation ``a ∈ [min_control, max_control]``) and every
   ``CoordinateActuator`` of the model or of the tool's ``force_set_files`` (a reserve: control
   ``y``, force ``y · optimal_force``).
3. **Muscle force** ``a F̂`` along the tendon, with ``F̂`` = ``calcInextensibleTendonActiveFiberForce
   (s, 1)`` (force–length–velocity of the fibre on a rigid tendon, pennation) when
   ``use_muscle_physiology``, else ``max_isometric_force``. Passive fibre forces are left out, as
   OpenSim overrides the muscles' actuation with ``a F̂``; every other force of the model acts
   (gravity, external loads, coordinate limit forces, springs: `jaxbio.io.passive_forces`).
4. **Problem**: ``min Σ aᵢᵖ (+ Σ yⱼ²)`` s.t. the moments of the actuators equal the inverse
   dynamics moments of the unconstrained coordinates (OpenSim constrains their accelerations; with
   the muscles' forces linear in ``a`` the two are the same equations). Solved by
   `jaxbio.estimation.static_optimization` (interior point, active-set polish, implicit
   differentiation).

Differences from OpenSim, stated:

- Reserve actuators are ``CoordinateActuator`` s of rotational and translational coordinates with
  unbounded controls (OpenSim's default ``min_control = -inf``, ``max_control = inf``); their cost
  is ``y²`` for every exponent (OpenSim's is ``|y|ᵖ``, the same for ``p = 2``, the default; a
  warning says so for ``p ≠ 2``). Several on one coordinate share its moment as OpenSim's
  quadratic cost shares it. Point and torque actuators, bounded reserves and reserves on Ball/Free
  rotations are refused with an error naming them.
- Muscle moments are ``rᵀ F`` with ``r = −∂l/∂c`` (`jaxbio.io.muscle_moment_arms`); OpenSim
  applies the tension at the path points, which is the same for paths without wrap surfaces and
  differs by OpenSim's tangent-point heuristics (≈1e-4 relative) on wrapping ones.
- Coordinates that are locked or prescribed are not solved for (OpenSim drops their acceleration
  constraints); coordinate couplers are imported as coupled coordinates (`jaxbio.io.osim`).
- Frames the actuators cannot balance are reported (``feasible`` false, a warning naming the
  first such time and coordinate), with the unmet moment in ``residual``, and left out of the
  tables (no frame with a solution: ``ValueError``);
  OpenSim warns ("OPTIMIZATION FAILED") and writes IPOPT's last iterate, a point that is not a
  solution and depends on the optimizer's iteration limit (opensim-core's
  ``subject01_Setup_StaticOptimization.xml`` and ``UsingRelativePaths/Setup_SO.xml``: a model
  without reserve actuators, every frame).
"""

from __future__ import annotations

import types
import warnings
from typing import NamedTuple
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import _aot
from jaxbio.estimation import StaticOptimizationResult
from jaxbio.estimation.one_frame import check_p as _check_p, solve_frame as _solve_frame, solver_options as _options
from jaxbio.tools._external_loads import ExternalLoads, read_external_loads
from jaxbio.io import Table
from jaxbio.tools._inverse_dynamics import tool_model
from jaxbio.tools._inverse_dynamics import InverseDynamicsInputs, _prepare, generalized_forces

__all__ = [
    "StaticOptimizationTables",
    "prepare_static_optimization",
    "static_optimization_problem",
    "solve_static_optimization",
    "static_optimization_tool",
]


class StaticOptimizationTables(NamedTuple):
    """`static_optimization_tool`'s results as OpenSim writes them: ``activations`` (muscle
    activations, then reserve controls) and ``forces`` (N or N·m: ``a F̂`` and ``y · optimal_force``),
    each a `jaxbio.io.Table` with OpenSim's column names; ``result``, the
    `jaxbio.estimation.StaticOptimizationResult` of every frame (``feasible``, ``residual``,
    multipliers)."""

    activations: Table
    forces: Table
    result: StaticOptimizationResult


#: the control bound given to an actuator without one (OpenSim's ±inf) where it is solved with the
#: muscles (`_general_actuators`): far beyond any control a reserve or residual reaches
_UNBOUNDED = 1e3


def _diagonal(model) -> np.ndarray:
    """Static: for each CoordinateActuator, whether it is a diagonal reserve (not on a Ball/Free
    rotation; `_check_reserve_bounds` refuses bounded ones), solved in closed form per coordinate;
    the others are general actuators."""
    forces = model.forces
    euler = {i for block in forces.euler_blocks for i in block}
    return np.asarray([c not in euler for c in forces.coordinate_actuators.coordinates], dtype=bool)


def _check_reserve_bounds(model) -> None:
    """``ValueError`` naming the CoordinateActuators with finite control bounds (outside jit)."""
    ca = model.forces.coordinate_actuators
    lo, hi = (np.asarray(getattr(ca, f), float) for f in ("min_control", "max_control"))
    for k, n in enumerate(ca.names):
        if np.isfinite(lo[k]) or np.isfinite(hi[k]):
            raise ValueError(
                f"{model.path}: CoordinateActuator {n!r} has finite control bounds "
                f"[{lo[k]:g}, {hi[k]:g}]; static optimisation supports unbounded reserves only "
                f"(min_control -inf, max_control inf)"
            )


def _general_actuators(model) -> np.ndarray:
    """Static: the positions in ``model.forces.actuator_names`` of the actuators solved with the
    muscles (a column of `jaxbio.io.actuator_matrix` each, control bounds ``min_control`` /
    ``max_control``, ±`_UNBOUNDED` where infinite, cost ``|y|ᵖ`` as in OpenSim): point, torque and path
    actuators, and CoordinateActuators on a Ball/Free rotation."""
    names = model.forces.actuator_names
    ca = model.forces.coordinate_actuators
    diagonal = dict(zip(ca.names, _diagonal(model)))
    return np.asarray([j for j, n in enumerate(names) if not diagonal.get(n, False)], dtype=np.int32)


def _reserves(model) -> tuple[np.ndarray, tuple[str, ...], np.ndarray, np.ndarray]:
    """Static: the diagonal reserve actuators (unbounded ``CoordinateActuator`` s) as
    ``(coordinate of each (k,), names, optimal forces (k,), strength per coordinate (nc,))``."""
    ca = model.forces.coordinate_actuators
    keep = _diagonal(model)
    coordinate = np.asarray(ca.coordinates, int)[keep]
    names = tuple(n for n, k in zip(ca.names, keep) if k)
    fopt = np.asarray(ca.optimal_force, float)[keep]
    return coordinate, names, fopt, np.asarray(_reserve_strength(model, jnp.float64))


def _reserve_strength(model, dtype) -> Float[Array, " nc"]:
    """``(nc,)`` the reserve strength of every coordinate, ``√(Σ optimal_force²)`` over its
    CoordinateActuators (0: none); traceable (``optimal_force`` may be traced)."""
    ca = model.forces.coordinate_actuators
    nc = len(model.coordinate_names)
    keep = _diagonal(model) if len(ca) else np.zeros(0, bool)
    if not keep.any():
        return jnp.zeros(nc, dtype)
    squares = jax.ops.segment_sum(
        jnp.asarray(ca.optimal_force, dtype)[keep] ** 2,
        jnp.asarray(np.asarray(ca.coordinates)[keep]),
        num_segments=nc,
    )
    return jnp.sqrt(squares)


def _solved_coordinates(model) -> np.ndarray:
    """Static: the coordinates whose moment equations are solved (neither locked nor prescribed)."""
    return np.asarray(
        [k for k in range(len(model.coordinate_names)) if not (model.locked[k] or model.prescribed[k])], dtype=np.int32
    )


def static_optimization_problem(model, inputs: InverseDynamicsInputs, *, use_muscle_physiology: bool = True):
    """One frame's problem in `jaxbio.estimation.static_optimization`'s terms: ``(moment_arms
    (m, k), tau (k,), max_force (m,))`` over the ``k`` solved coordinates (neither locked nor
    prescribed): the muscles' moment arms ``−∂l/∂c`` (m/rad, m/m), the generalised forces the
    actuators must supply (`jaxbio.io.generalized_forces`: inverse dynamics with the external
    loads, less the model's passive forces), and ``F̂`` (N).

    Pure and differentiable (jit, vmap over frames with ``in_axes=(None, 0)``, grad with respect to
    the model's arrays: segment masses, optimal fibre lengths, path points …)."""
    if model.muscles is None:
        raise ValueError(f"{model.path}: the model has no muscles jaxbio imports (ignored: {list(model.ignored)})")
    return _problem(model, inputs, _muscle_terms(model, inputs.c, inputs.cd, use_muscle_physiology))


def _muscle_terms(model, c, cd, use_muscle_physiology: bool):
    """One frame's ``(moment arms (m, nc), F̂ (m,))`` of the muscles (`static_optimization_problem`).
    Paths that wrap: the lengths and moment arms from one pass of directional derivatives
    (`jaxbio.forces._osim_muscles._wrapped_lengths_and_moment_arms`), the lengthening speeds
    ``(∂l/∂c) ċ = −r ċ`` from those moment arms, not from another pass through the wrapping
    (which cost as much again: benchmarks/README.md, "Static optimisation with wrapping")."""
    from jaxbio.forces import internals as muscles
    from jaxbio.forces import muscle_moment_arms, muscle_static_optimization_forces

    if model.muscles.paths.path_wraps:
        c = muscles.muscle_coordinates(model, c, "c")
        cd = muscles.muscle_coordinates(model, cd, "cd").astype(c.dtype)
        lengths, R = muscles.wrapped_lengths_and_moment_arms(model, c)
        if not use_muscle_physiology:
            return R, model.muscles.max_isometric_force.astype(R.dtype)
        speeds = -jnp.dot(R, cd, precision="highest")
        return R, muscles.static_optimization_forces_at(model.muscles, lengths, speeds)[0].astype(R.dtype)
    R = muscle_moment_arms(model, c)
    if use_muscle_physiology:
        fmax = muscle_static_optimization_forces(model, c, cd)[0]
    else:
        fmax = model.muscles.max_isometric_force
    return R, fmax.astype(R.dtype)


def _problem(model, inputs: InverseDynamicsInputs, muscle_terms):
    """`static_optimization_problem` from the frame's `_muscle_terms`."""
    from jaxbio.forces import actuator_matrix

    rows = _solved_coordinates(model)
    tau = generalized_forces(model, inputs)[rows]
    R, fmax = muscle_terms
    R = R[:, rows]
    general = _general_actuators(model)
    if general.size:  # rows after the muscles': generalised force per unit control (as y⁺ and y⁻), optimal force
        B = actuator_matrix(model, inputs.c)[rows][:, general].T.astype(R.dtype)
        R = jnp.concatenate([R, B, -B])
        fopt = model.forces.optimal_force[general].astype(R.dtype)
        fmax = jnp.concatenate([fmax, fopt, fopt])
    return R, tau, fmax


def solve_static_optimization(
    model, inputs: InverseDynamicsInputs, *, activation_exponent: float = 2.0, use_muscle_physiology: bool = True
) -> StaticOptimizationResult:
    """OpenSim's static optimisation of one frame (module docstring): the activations of the
    imported muscles within their control bounds and the reserve controls that minimise
    ``Σ aᵖ + Σ y²`` while producing the frame's generalised forces.

    - ``model``: an `Model` with muscles (any array leaf may be traced).
    - ``inputs``: one frame of `InverseDynamicsInputs` (``prepare_static_optimization(...).frame(i)``),
      or map over a trial with ``jax.vmap(solve_static_optimization, (None, 0))``.
    - ``activation_exponent``: ``p`` (static, ≥ 2); ``use_muscle_physiology``: static.

    Returns the `jaxbio.estimation.StaticOptimizationResult` of the frame: ``activations`` (m,),
    ``forces`` (m,) N, ``reserves`` (k,) N·m / N per solved coordinate (``k``: the coordinates
    neither locked nor prescribed), ``residual``, ``feasible`` …
    """
    p = _check_p(activation_exponent)
    return _solve(
        model, inputs, p, static_optimization_problem(model, inputs, use_muscle_physiology=use_muscle_physiology)
    )


def _solve(model, inputs, p, problem) -> StaticOptimizationResult:
    """`solve_static_optimization` of one frame's ``problem`` (`static_optimization_problem`)."""
    R, tau, fmax = problem
    rows = _solved_coordinates(model)
    strength = _reserve_strength(model, R.dtype)[rows]
    bounds = (model.muscles.min_control.astype(R.dtype), model.muscles.max_control.astype(R.dtype))
    general = _general_actuators(model)
    if general.size:  # y = y⁺ − y⁻, both ≥ 0: the optimum has one of them 0, so the cost is y² (p = 2)
        lo, hi = (getattr(model.forces, f)[general].astype(R.dtype) for f in ("min_control", "max_control"))
        zero = jnp.zeros_like(lo)
        bounds = (
            jnp.concatenate([bounds[0], zero, zero]),
            jnp.concatenate([bounds[1], jnp.clip(hi, 0.0, _UNBOUNDED), jnp.clip(-lo, 0.0, _UNBOUNDED)]),
        )
    return _solve_frame(
        R,
        tau,
        fmax,
        jnp.zeros_like(fmax),
        strength,
        p,
        bounds,
        solver="interior_point",
        **_options(1e5, None, 60, None, R.dtype),
    )


def _check_bounds(model) -> None:
    lo, hi = (np.asarray(getattr(model.muscles, f), float) for f in ("min_control", "max_control"))
    bad = [n for n, a, b in zip(model.muscles.names, lo, hi) if not (np.isfinite(a) and np.isfinite(b) and 0 <= a <= b)]
    if bad:
        raise ValueError(
            f"{model.path}: muscles {bad} need finite control bounds 0 ≤ min_control ≤ max_control for "
            f"static optimisation"
        )


#: the fields of each frame's `StaticOptimizationResult` that the tool writes
_TRIAL_FIELDS = ("activations", "forces", "reserves", "residual", "feasible")


def _trial(model, inputs, p, use_muscle_physiology):
    """Every frame's `solve_static_optimization` (``jit(vmap)``; kept across processes by the
    command line, `jaxbio._aot`): a namespace of `_TRIAL_FIELDS`, each ``(T, …)``."""

    def solve(model, inputs):
        def muscle_terms(i):
            return _muscle_terms(model, i.c, i.cd, use_muscle_physiology)

        if model.muscles.paths.path_wraps:
            # wrapped paths frame by frame: under vmap their loops run the most iterations of any
            # frame and every skipped step runs (benchmarks/README.md, "Static optimisation with
            # wrapping"); the solver batched
            terms = jax.lax.map(muscle_terms, inputs)
        else:
            terms = jax.vmap(muscle_terms)(inputs)
        result = jax.vmap(lambda i, t: _solve(model, i, p, _problem(model, i, t)))(inputs, terms)
        return {f: getattr(result, f) for f in _TRIAL_FIELDS}

    name = f"static_optimization-p{float(p)!r}-{'physiology' if use_muscle_physiology else 'ideal'}"
    return types.SimpleNamespace(**_aot.call_over_frames(name, solve, model, inputs))


def prepare_static_optimization(
    model,
    motion,
    *,
    external_loads=None,
    actuators=None,
    lowpass_hz=None,
    start=None,
    end=None,
    dtype=None,
    progress: Callable[[str], None] | None = None,
    step_interval: int = 1,
):
    """``(model, inputs)``: the model with the actuator files' forces appended (as `load_osim`'s
    ``force_set_files``) and the motion processed as OpenSim's ``AnalyzeTool`` does (module
    docstring, step 1), for `solve_static_optimization`. Arguments as `static_optimization_tool`."""
    from jaxbio.io.osim import Model, load_osim

    say = progress or (lambda message: None)
    say("loading the model")
    files = (
        ()
        if actuators is None
        else (
            (actuators,)
            if isinstance(actuators, (str, bytes)) or hasattr(actuators, "__fspath__")
            else tuple(actuators)
        )
    )
    if files and isinstance(model, Model):
        model = model.path  # re-read with the actuators appended
    if files:
        m = load_osim(model, dtype=dtype, force_set_files=files)
    else:
        m = tool_model(model, dtype)
    if not isinstance(m, Model) or m.muscles is None:
        raise ValueError(
            f"{getattr(m, 'path', model)}: static optimisation needs an OpenSim model with muscles "
            f"(Thelen2003Muscle, Millard2012EquilibriumMuscle)"
        )
    missing = [f"{t} {n!r}" for t, n in m.forces.not_imported if n not in m.muscles.names]
    if missing:  # OpenSim would apply them: solving without them is another model
        raise ValueError(
            f"{m.path}: forces that OpenSim's static optimisation applies are not imported by jaxbio: "
            f"{', '.join(missing)} (see Model.ignored)"
        )
    _check_bounds(m)
    _check_reserve_bounds(m)
    if isinstance(step_interval, bool) or not isinstance(step_interval, (int, np.integer)) or step_interval < 1:
        raise ValueError(f"step_interval must be a whole number ≥ 1, got {step_interval!r}")
    inputs, p = _prepare(m, motion, external_loads, lowpass_hz, start, end, say, speed_splines=True)
    if step_interval > 1:
        keep = _analysis_frames(p, int(step_interval))
        inputs = jax.tree_util.tree_map(lambda x: x[keep], inputs)
    return m, inputs


def _analysis_frames(p, interval: int) -> np.ndarray:
    """The frames an OpenSim analysis with ``step_interval`` records (``AnalyzeTool::run``: the
    first (``begin``), those whose index ``i`` in the tool's states storage is a multiple of the
    interval (``step``: ``Analysis::proceed``), and the last (``end``))."""
    first = int(np.searchsorted(p.filtered.time, p.time[0]))  # the first frame's index in the storage
    i = first + np.arange(p.time.size)
    keep = i % interval == 0
    keep[0] = keep[-1] = True
    return np.flatnonzero(keep)


def _limit_potential_energy(batch, c) -> np.ndarray:
    """``(T, n)`` J: OpenSim's ``CoordinateLimitForce::computePotentialEnergy`` of each limit
    force of ``batch`` at coordinates ``c`` ``(T, nc)`` (SI units, numpy)."""
    q = np.asarray(c, float)[:, np.asarray(batch.coordinates, dtype=np.int64)]
    up, low = np.asarray(batch.upper_limit, float), np.asarray(batch.lower_limit, float)
    k_up, k_low = np.asarray(batch.upper_stiffness, float), np.asarray(batch.lower_stiffness, float)
    trans = np.asarray(batch.transition, float)
    above, below = q > up, q < low
    K = np.where(above, k_up, np.where(below, k_low, 0.0))
    delta = np.where(above, q - up, np.where(below, low - q, 0.0))
    x = delta / trans
    inside = K * x**3 * (2.0 - 2.5 * x + (6.0 / 7.0) * x * x) * delta * delta
    beyond = K * ((-2.0 / 14.0) * trans * trans + 0.5 * delta * delta)
    return np.where(delta >= trans, beyond, inside)


def _reported_forces(m, inputs, loads, actuation: dict) -> tuple[tuple[str, ...], np.ndarray, list[str]]:
    """The columns of OpenSim's ``_force.sto`` (its ``ForceReporter``: every force of the model
    that applies force, in the ForceSet's order, each with its ``getRecordLabels``, then the
    external loads OpenSim adds to the model) at every frame: ``(labels, data (T, n), left out)``.

    - muscles and actuators: ``actuation`` (name → ``(T,)`` N / N·m);
    - ``CoordinateLimitForce``: its force (``name``) and ``PotentialEnergy``;
    - ``SpringGeneralizedForce``: ``name_Force``; ``PathSpring``: ``name_tension``;
    - each ``ExternalForce`` of ``loads``: ``<body>_<name>_Fx/Fy/Fz`` (ground frame), ``_px/py/pz``
      (in the applied body's frame), ``_Tx/Ty/Tz`` (ground frame), as ``ExternalForce::
      getRecordValues``;
    - ``left out`` names the forces whose columns are not written (``PointToPointSpring``, forces
      in ``<components>``).
    """
    from jaxbio.forces import path_spring_tensions
    from jaxbio.forces.internals import force_coordinates as _coordinates, to_opensim_speeds as _to_speeds
    from jaxbio.tools._inverse_dynamics import _body_index, body_poses
    from jaxbio.coordinates import to_tree
    from jaxbio import quaternion as quat
    from jaxbio.tools._external_loads import external_load_data

    F = m.forces
    c = jax.vmap(lambda x: _coordinates(m, x, "c"))(inputs.c)
    cd = jax.vmap(lambda x: _coordinates(m, x, "cd"))(inputs.cd).astype(c.dtype)
    u = jax.vmap(lambda a, b: _to_speeds(F.euler_blocks, a, b))(c, cd)
    limits = np.asarray(jax.vmap(F.coordinate_limits)(c, u), float) if len(F.coordinate_limits) else None
    springs = np.asarray(jax.vmap(F.springs)(c, u), float) if len(F.springs) else None
    energy = _limit_potential_energy(F.coordinate_limits, c) if len(F.coordinate_limits) else None
    tensions = (
        np.asarray(jax.vmap(lambda a, b: path_spring_tensions(m, a, b))(c, cd), float) if len(F.path_springs) else None
    )
    labels, columns, left_out = [], [], [f"{n} (in <components>)" for n in F.outside]
    for kind, name in F.order:
        if name in actuation:
            labels.append(name)
            columns.append(actuation[name])
        elif name in F.coordinate_limits.names:
            k = F.coordinate_limits.names.index(name)
            energy_label = "PotentialEnergy" if "PotentialEnergy" not in labels else f"{name}_PotentialEnergy"
            if energy_label != "PotentialEnergy":  # OpenSim repeats the label; a Table's are unique
                left_out.append(f"CoordinateLimitForce {name!r} (its PotentialEnergy is labelled {energy_label})")
            labels += [name, energy_label]
            columns += [limits[:, k], energy[:, k]]
        elif name in F.springs.names:
            labels.append(f"{name}_Force")
            columns.append(springs[:, F.springs.names.index(name)])
        elif name in F.path_springs.names:
            labels.append(f"{name}_tension")
            columns.append(tensions[:, F.path_springs.names.index(name)])
        else:
            left_out.append(f"{kind} {name!r}")
    if loads is not None and loads.forces:
        time = np.asarray(inputs.time, float)
        where = str(loads.path)
        data = external_load_data(loads, time)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # said once already, when the inputs were prepared
            frames = [
                (
                    _body_index(m, d.spec.body, "applied_to_body", d.spec.name, where),
                    _body_index(m, d.spec.force_frame, "force_expressed_in_body", d.spec.name, where),
                    _body_index(m, d.spec.point_frame, "point_expressed_in_body", d.spec.name, where),
                )
                for d in data
            ]
        bodies = [b for fr in frames for b in fr]
        att, pos = jax.vmap(lambda x: body_poses(m, to_tree(m.coordinates, x), bodies))(inputs.c)
        att, pos = np.asarray(att, float), np.asarray(pos, float)

        def rotate(q, v, inverse=False):
            q = quat.conjugate(q) if inverse else q
            return np.asarray(quat.rotate(jnp.asarray(q), jnp.asarray(v)), float)

        for k, d in enumerate(data):
            stem = f"{d.spec.body}_{d.spec.name}"
            body, force_frame, point_frame = (3 * k + j for j in range(3))
            if d.force is not None:
                labels += [f"{stem}_F{a}" for a in "xyz"]
                columns += list(rotate(att[:, force_frame], d.force).T)
                if d.point is not None:
                    world = pos[:, point_frame] + rotate(att[:, point_frame], d.point)
                    local = rotate(att[:, body], world - pos[:, body], inverse=True)
                    labels += [f"{stem}_p{a}" for a in "xyz"]
                    columns += list(local.T)
            if d.torque is not None:
                labels += [f"{stem}_T{a}" for a in "xyz"]
                columns += list(rotate(att[:, force_frame], d.torque).T)
    T = np.asarray(inputs.time).size
    data = np.stack(columns, 1) if columns else np.zeros((T, 0))
    return tuple(labels), data, left_out


def static_optimization_tool(
    model,
    motion,
    *,
    external_loads=None,
    actuators=None,
    lowpass_hz=None,
    start=None,
    end=None,
    activation_exponent: float = 2.0,
    use_muscle_physiology: bool = True,
    dtype=None,
    progress: Callable[[str], None] | None = None,
    step_interval: int = 1,
) -> StaticOptimizationTables:
    """OpenSim's ``AnalyzeTool`` with a ``StaticOptimization`` analysis (module docstring).

    - ``model``: an `Model` or a ``.osim`` path (with Thelen2003 or Millard2012 muscles).
    - ``motion``: a `Table` or a ``.mot``/``.sto`` path of coordinates (IK output).
    - ``external_loads``: an ExternalLoads ``.xml`` path or `ExternalLoads`, or None.
    - ``actuators``: an OpenSim force set file (or several) of reserve actuators, appended to the
      model's forces (the setup's ``force_set_files``).
    - ``lowpass_hz``: ``lowpass_cutoff_frequency_for_coordinates`` (None: no filtering); ``start``,
      ``end``: s (None: the motion's).
    - ``activation_exponent``: ``p`` of ``Σ aᵖ`` (≥ 2); ``use_muscle_physiology``: ``F̂`` from the
      force–length–velocity curves (True) or ``max_isometric_force``.
    - ``dtype``: float type (default float64 when x64 is enabled); ``progress``: called with a
      short message before each stage.
    - ``step_interval``: the analysis's ``step_interval``: the frames OpenSim solves (the first,
      the last, and those whose index in the processed motion is a multiple of it).

    Returns `StaticOptimizationTables` (``activations``, ``forces``: ``time`` ``(T,)``; columns the
    muscles in file order, then the reserve actuators). Warns for frames the actuators cannot
    balance. Raises ``ValueError`` naming the file, element or column (as
    `jaxbio.io.inverse_dynamics_tool`, and for models without imported muscles, with forces OpenSim
    would apply that jaxbio does not import, or with actuators static optimisation cannot use).
    """
    p = _check_p(activation_exponent)
    say = progress or (lambda message: None)
    m, inputs = prepare_static_optimization(
        model,
        motion,
        external_loads=external_loads,
        actuators=actuators,
        lowpass_hz=lowpass_hz,
        start=start,
        end=end,
        dtype=dtype,
        progress=say,
        step_interval=step_interval,
    )
    coordinate, reserve_names, fopt, strength = _reserves(m)
    general = _general_actuators(m)
    if general.size and p != 2:
        raise ValueError(
            f"{m.path}: static optimisation with point, torque or bounded actuators "
            f"({[m.forces.actuator_names[j] for j in general]}) needs activation exponent 2, got {p:g}"
        )
    if reserve_names and p != 2:
        warnings.warn(
            f"static optimisation with reserve actuators and activation exponent {p:g}: jaxbio's cost of "
            f"a reserve is y², OpenSim's |y|^{p:g}",
            stacklevel=2,
        )
    say(f"static optimisation of {inputs.n_frames} frames")
    result = _trial(m, inputs, p, bool(use_muscle_physiology))
    time = np.asarray(inputs.time, float)
    rows = _solved_coordinates(m)
    # each reserve's control: its share y_k = F_k · Y / S² of the coordinate's reserve moment Y
    position = {int(j): r for r, j in enumerate(rows)}
    moment = np.asarray(result.reserves, float)  # (T, k solved coordinates)
    controls = np.zeros((time.size, len(reserve_names)))
    for k, j in enumerate(coordinate):
        if j in position:
            controls[:, k] = fopt[k] * moment[:, position[j]] / strength[j] ** 2
    nm = len(m.muscles.names)
    solved_a, solved_f = np.asarray(result.activations, float), np.asarray(result.forces, float)
    by_name = {n: (controls[:, k], controls[:, k] * fopt[k]) for k, n in enumerate(reserve_names)}
    names = m.forces.actuator_names
    g = general.size
    signed_a = solved_a[:, nm : nm + g] - solved_a[:, nm + g : nm + 2 * g]  # y⁺ − y⁻
    signed_f = solved_f[:, nm : nm + g] - solved_f[:, nm + g : nm + 2 * g]
    by_name.update({names[j]: (signed_a[:, r], signed_f[:, r]) for r, j in enumerate(general)})
    by_name.update({n: (solved_a[:, k], solved_f[:, k]) for k, n in enumerate(m.muscles.names)})
    # columns: the actuators in the ForceSet's order (OpenSim's getActuators(), muscles included)
    labels = tuple(n for _, n in m.forces.order if n in by_name)
    labels += tuple(n for n in m.muscles.names if n not in labels)  # not in `order`: a hand-made model
    a = np.stack([by_name[n][0] for n in labels], axis=1)
    actuation = {n: by_name[n][1] for n in labels}
    loads = external_loads
    if loads is not None and not isinstance(loads, ExternalLoads):
        loads = read_external_loads(loads)
    force_labels, f, left_out = _reported_forces(m, inputs, loads, actuation)
    missing = [n for n in labels if n not in force_labels]
    if missing:  # actuators outside the ForceSet's order (a hand-made model): after the ForceSet's
        force_labels = force_labels + tuple(missing)
        f = np.concatenate([f, np.stack([actuation[n] for n in missing], 1)], axis=1)
    if left_out:
        warnings.warn(
            f"static optimisation: the forces table lacks the columns OpenSim's ForceReporter writes for "
            f"{', '.join(left_out)}",
            stacklevel=2,
        )
    bad = ~np.asarray(result.feasible)
    if bad.any():
        # no solution there: no row rather than a plausible number (OpenSim's IPOPT fails there
        # too, "OPTIMIZATION FAILED", and writes its last iterate, which is not a solution)
        i = int(np.argmax(bad))
        j = int(np.argmax(np.abs(np.asarray(result.residual[i]))))
        why = (
            f"the muscles and actuators cannot produce the joint moments at {int(bad.sum())} of {time.size} "
            f"frames (first t = {time[i]:.4f} s, worst {m.coordinate_names[rows[j]]}: "
            f"{float(result.residual[i, j]):.4g} unmet). OpenSim's optimizer fails there too (\"OPTIMIZATION "
            f'FAILED") and writes its last iterate, which is not a solution; add reserve actuators (e.g. '
            f"residuals on the pelvis) through force_set_files"
        )
        if bad.all():
            raise ValueError(f"{m.path}: static optimisation has no solution: {why}")
        warnings.warn(f"static optimisation: {why}; those frames are left out of the tables", stacklevel=2)
    keep = ~bad
    return StaticOptimizationTables(
        activations=Table(time=time[keep], labels=labels, data=a[keep], in_degrees=False, name="Static Optimization"),
        forces=Table(time=time[keep], labels=force_labels, data=f[keep], in_degrees=False, name="Static Optimization"),
        result=result,
    )
