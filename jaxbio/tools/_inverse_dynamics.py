"""OpenSim's tools on jaxbio's dynamics: inverse dynamics of a motion file, with external loads,
giving OpenSim's result file (``InverseDynamicsTool``), every frame in one ``jit(vmap)`` call.

What `inverse_dynamics_tool` does, in OpenSim's order (opensim-core
``Tools/InverseDynamicsTool.cpp``, ``run``):

1. the model's coordinates found among the motion's columns are processed as OpenSim does
   (`process_coordinates`: pad, filter, degrees → radians for rotational coordinates only,
   quintic GCV splines, the frames of the time range); a coordinate the file lacks is held at
   its default value (zero speed and acceleration), as OpenSim does. Other columns (markers,
   another model's coordinates, a misspelt name) are not read. Both are warned about, naming
   each column and coordinate and the value used (OpenSim logs them), and returned as an
   `InputMatch` by the jobs of `jaxbio.tools` (``ToolRun.matched``).
2. the external loads (`read_external_loads`) are interpolated at those frames
   (`external_load_data`) and applied to the bodies they name: force at its point, plus the free
   torque, each rotated to the world from the frame it is expressed in.
3. generalised forces ``τ_c = J(c)ᵀ τ(q, q̇, q̈, external) − τ_forces(c, ċ)``
   (`jaxbio.inverse_dynamics` of the `jaxbio.Model`, `jaxbio.io.passive_forces`), every frame at once:
   OpenSim subtracts the generalised force of every model force it applies, i.e. every force of
   the ForceSet not excluded by ``forces_to_exclude`` (`jaxbio.io.applied_forces`: names, group
   names, ``all``, ``actuators``, ``muscles``; DynamicsTool::disableModelForces). Actuators have
   zero controls in the tool (no controller), hence no force; CoordinateLimitForces,
   SpringGeneralizedForces and PointToPointSprings act. A force OpenSim would apply that jaxbio
   does not import (a muscle not excluded, a ligament, contact …) is refused with a
   ``ValueError``, never left out. ``forces_to_exclude = "all"`` leaves the external loads on, as
   in OpenSim 4.6 (they are not in the ForceSet).
4. a `Table` labelled as OpenSim labels it: ``<coordinate>_moment`` for a rotational
   coordinate, ``<coordinate>_force`` otherwise, in the model's coordinate order.

Steps 1–2 (files, splines, numpy) and step 3 (pure, traced) are also public apart, so that the
whole trial can be differentiated with respect to the model: `prepare_inverse_dynamics` returns
the processed frames as an `InverseDynamicsInputs` pytree, and `generalized_forces(model,
inputs)` is step 3 for one frame, a pure function of the model's arrays (``jax.vmap`` over
frames; ``jax.grad``/``jax.jacfwd`` with respect to masses, COMs, inertias, joint frames or
coordinate-map coefficients). `inverse_dynamics_tool` is the two in sequence."""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import _aot, coordinates
from jaxbio import quaternion as quat
from jaxbio.dynamics import forward_kinematics, inverse_dynamics, point_loads
from jaxbio.tools._external_loads import ExternalLoads, external_load_data, read_external_loads
from jaxbio.tools._gcvspl import GCVSpline
from jaxbio.tools._processing import process_coordinates
from jaxbio.io import Table, read_storage
from jaxbio._text import listing
from jaxbio.io import load_model

__all__ = [
    "InputMatch",
    "InverseDynamicsInputs",
    "coordinates_table",
    "generalized_forces",
    "inverse_dynamics_tool",
    "prepare_inverse_dynamics",
]


def tool_model(model, dtype=None):
    """`load_model`'s `jaxbio.Model` for OpenSim's tools, whose motion files name one coordinate
    per column: ``ValueError`` for a tree with ball or free joints (their quaternions are no
    coordinates of a motion file)."""
    m = load_model(model, dtype=dtype)
    if m.tree.nq != m.tree.nv:
        bad = [n for n, t in zip(m.tree.names, m.tree.joint_types) if t in ("spherical", "free")]
        raise ValueError(
            f"model {m.tree.name!r}: motion files name one coordinate per joint; segments {bad} have "
            f"ball or free joints (import the model from its .osim file instead)"
        )
    return m


class InverseDynamicsInputs(eqx.Module):
    """A trial's inputs to inverse dynamics, processed as OpenSim's ``InverseDynamicsTool``
    processes them (`prepare_inverse_dynamics`): every frame's coordinates and external loads.

    Array leaves, the frame axis first (``T`` frames, ``nc`` model coordinates, ``k`` applied
    forces), so that ``jax.vmap(generalized_forces, (None, 0))`` maps over frames:

    - ``time`` ``(T,)`` s;
    - ``c``, ``cd``, ``cdd`` ``(T, nc)``: OpenSim's coordinates (rad / m, the model's order),
      their speeds and accelerations; a coordinate the motion lacks is held at its default;
    - ``forces`` ``(T, k, 3)`` N and ``torques`` ``(T, k, 3)`` N·m, each in the frame of body
      ``force_frames[i]``; ``points`` ``(T, k, 3)`` m, the point of application in the frame of
      body ``point_frames[i]`` (zero in the applied body's frame when the data give no point).

    Static: ``coordinate_names`` (must equal the model's), ``load_bodies``, ``force_frames``,
    ``point_frames`` (``k`` indices into the model's ``bodies``: the body each force acts on and
    the frames its data are expressed in; forces applied to the ground are dropped, they move
    nothing) and ``labels`` (OpenSim's result columns: ``<coordinate>_moment`` or ``_force``).
    The body frames themselves are read from the model at each call, so that derivatives with
    respect to ``body_positions``/``body_orientations`` are derivatives of the loads' lever arms.
    """

    time: Float[Array, " T"]
    c: Float[Array, "T nc"]
    cd: Float[Array, "T nc"]
    cdd: Float[Array, "T nc"]
    forces: Float[Array, "T k 3"]
    torques: Float[Array, "T k 3"]
    points: Float[Array, "T k 3"]
    coordinate_names: tuple[str, ...] = eqx.field(static=True)
    load_bodies: tuple[int, ...] = eqx.field(static=True)
    force_frames: tuple[int, ...] = eqx.field(static=True)
    point_frames: tuple[int, ...] = eqx.field(static=True)
    labels: tuple[str, ...] = eqx.field(static=True)

    @property
    def n_frames(self) -> int:
        """``T`` (the leading axis of the arrays)."""
        return int(jnp.shape(self.time)[0])

    def frame(self, i) -> InverseDynamicsInputs:
        """Frame ``i``'s inputs (every leaf indexed on its frame axis), for `generalized_forces`."""
        return jax.tree_util.tree_map(lambda a: a[i], self)


def _body_index(model, name: str, role: str, force_name: str, where: str, grounded: list | None = None) -> int:
    """The index in ``model.bodies`` of the body an ExternalForce names. ``applied_to_body`` must
    be a body (OpenSim throws); a frame (``force_expressed_in_body``, ``point_expressed_in_body``)
    that names none is the ground, with a warning, as in OpenSim (``ExternalForce::
    extendConnectToModel``); ``grounded`` collects those ``(force, role, name)``."""
    name = name.removeprefix("/bodyset/").removeprefix("./bodyset/")
    if name.lower() == "ground" or name in ("/ground", (model.bodies[0] if model.bodies else "ground")):
        return 0
    if name in model.bodies:
        return model.bodies.index(name)
    if role == "applied_to_body":
        raise ValueError(
            f"{where}: ExternalForce {force_name!r}: {role} {name!r} is not a body of the model "
            f"({model.path}); bodies are {list(model.bodies)}"
        )
    warnings.warn(
        f"{where}: ExternalForce {force_name!r}: {role} {name!r} is not a body of the model ({model.path}): "
        f"the ground frame is used, as OpenSim does",
        stacklevel=3,
    )
    if grounded is not None:
        grounded.append((force_name, role, name))
    return 0


def _load_arrays(model, loads: ExternalLoads, times: np.ndarray, grounded: list | None = None):
    """``(forces, torques, points)`` ``(T, k, 3)`` and the static body indices of `InverseDynamicsInputs`."""
    where = str(loads.path)
    zero = np.zeros((times.size, 3))
    forces, torques, points, bodies, force_frames, point_frames = [], [], [], [], [], []
    for d in external_load_data(loads, times):
        f = d.spec
        body = _body_index(model, f.body, "applied_to_body", f.name, where)
        if model.body_segments[body] < 0:
            continue  # a load on the ground moves nothing
        force_frame = _body_index(model, f.force_frame, "force_expressed_in_body", f.name, where, grounded)
        if d.point is None:  # the body's origin
            point_frame, point = body, zero
        else:
            point_frame = _body_index(model, f.point_frame, "point_expressed_in_body", f.name, where, grounded)
            point = d.point
        forces.append(zero if d.force is None else d.force)
        torques.append(zero if d.torque is None else d.torque)
        points.append(point)
        bodies.append(body)
        force_frames.append(force_frame)
        point_frames.append(point_frame)
    stack = lambda xs: np.stack(xs, 1) if xs else np.zeros((times.size, 0, 3))
    return (stack(forces), stack(torques), stack(points)), tuple(bodies), tuple(force_frames), tuple(point_frames)


class InputMatch(NamedTuple):
    """How a tool matched its input files to the model (`jaxbio.tools.ToolRun.matched`); every
    mismatch is also a warning that names it and the value used, as OpenSim logs it.

    - ``coordinates``: the model's coordinates read from a column of the motion (model order);
    - ``defaults``: the model's coordinates the motion has no column for, each with the value it
      is held at (its default value, rad or m; zero speed and acceleration), as in OpenSim;
    - ``ignored_columns``: the motion's columns that name no coordinate of the model (not read);
    - ``external_forces``: each applied ``ExternalForce`` by name, with the data columns its
      force, point and torque identifiers found (``{"force": (...), "point": (...), "torque":
      (...)}``, absent keys: not given);
    - ``ground_frames``: ``(force, property, name)`` for each ExternalForce frame that names no
      body of the model: the ground is used, as in OpenSim."""

    coordinates: tuple[str, ...]
    defaults: dict
    ignored_columns: tuple[str, ...]
    external_forces: dict
    ground_frames: tuple[tuple[str, str, str], ...] = ()


#: while set (by `recording_matches`), a list to which `_prepare` appends its `InputMatch`
_MATCHES: contextvars.ContextVar = contextvars.ContextVar("jaxbio_input_matches", default=None)


@contextlib.contextmanager
def recording_matches():
    """A list that collects the `jaxbio.io.InputMatch` of the inputs prepared in the block (what
    `jaxbio.tools`' jobs return as ``ToolRun.matched``)."""
    found: list = []
    token = _MATCHES.set(found)
    try:
        yield found
    finally:
        _MATCHES.reset(token)


def _match_motion(m, table, where: str, zero: bool = False):
    """``(present, defaults, ignored)`` of `InputMatch`, warning once for the columns that name
    no coordinate and once for the coordinates without a column (with the values used: the
    coordinate's default value, or 0 when ``zero``, as OpenSim's ``AnalyzeTool`` fills them,
    ``SimbodyEngine::formCompleteStorages``)."""
    names = m.coordinate_names
    present = [n for n in names if n in table.labels]
    ignored = tuple(label for label in table.labels if label not in names)
    defaults = {n: 0.0 if zero else float(m.defaults[k]) for k, n in enumerate(names) if n not in table.labels}
    if present and ignored:
        warnings.warn(
            f"{where}: {len(ignored)} column(s) name no coordinate of the model ({m.path}) and are not read: "
            f"{listing(ignored, 12)}",
            stacklevel=4,
        )
    if present and defaults:
        unit = lambda n: "rad" if m.motion_types[names.index(n)] == "rotational" else "m"
        held = ", ".join(f"{n} = {v:g} {unit(n)}" for n, v in defaults.items())
        warnings.warn(
            f"{where}: {len(defaults)} coordinate(s) of the model ({m.path}) have no column and are held at "
            f"{'0' if zero else 'their default values'} (zero speed and acceleration), as OpenSim does: {held}",
            stacklevel=4,
        )
    return present, defaults, ignored


def _load_match(loads: ExternalLoads, model) -> dict:
    """`InputMatch.external_forces`: the columns each applied force's identifiers found."""
    from jaxbio.tools._external_loads import identifier_columns

    table = read_storage(loads.datafile)
    out = {}
    for f in loads.forces:
        found = {}
        for key, ident in (
            ("force", f.force_identifier),
            ("point", f.point_identifier),
            ("torque", f.torque_identifier),
        ):
            if ident is not None and not (key == "point" and f.force_identifier is None):
                found[key] = tuple(
                    table.labels[i] for i in identifier_columns(table.labels, ident, where=str(loads.datafile))
                )
        out[f.name] = found
    return out


def _prepare(m, motion, external_loads, lowpass_hz, start, end, say, speed_splines: bool = False):
    """`InverseDynamicsInputs` in the model's float type, and the `ProcessedCoordinates` (the
    frames' times in float64, the processed samples).

    ``speed_splines``: the accelerations as OpenSim's ``AnalyzeTool`` analyses (static
    optimisation) get them: the derivative of a second quintic GCV spline, fitted to the speeds
    ``q̇`` at every (padded, filtered) sample (``StaticOptimization::begin``:
    ``GCVSplineSet(5, states).constructStorage(1)``), instead of ``q̈`` of the coordinates' spline
    (``InverseDynamicsTool``); and a coordinate the motion lacks is held at 0, not at its default
    (``SimbodyEngine::formCompleteStorages``)."""
    table = motion if isinstance(motion, Table) else read_storage(motion)
    names = m.coordinate_names
    where = str(motion) if not isinstance(motion, Table) else table.name or "motion"
    present, defaults, ignored = _match_motion(m, table, where, zero=speed_splines)
    if not present:  # OpenSim would run on, every coordinate held: almost surely the wrong file
        raise ValueError(
            f"{where}: none of the model's coordinates {list(names)} is a column (columns: {listing(table.labels, 12)})"
        )
    rotational = [n for n in present if m.motion_types[names.index(n)] == "rotational"]
    say("processing the coordinates")
    p = process_coordinates(table.select(present), lowpass_hz=lowpass_hz, start=start, end=end, rotational=rotational)
    T = p.time.size
    c = np.tile(np.asarray([defaults.get(n, 0.0) for n in names], float), (T, 1))
    cd, cdd = np.zeros((T, len(names))), np.zeros((T, len(names)))
    cols = np.asarray([names.index(n) for n in present])
    c[:, cols], cd[:, cols], cdd[:, cols] = p.q, p.qd, p.qdd
    if speed_splines:
        samples = p.filtered.time
        cdd[:, cols] = GCVSpline(samples, p.spline(samples, 1), degree=5)(p.time, 1)

    arrays, bodies, force_frames, point_frames = (np.zeros((T, 0, 3)),) * 3, (), (), ()
    grounded, load_match = [], {}
    if external_loads is not None:
        say("reading the external loads")
        loads = external_loads if isinstance(external_loads, ExternalLoads) else read_external_loads(external_loads)
        arrays, bodies, force_frames, point_frames = _load_arrays(m, loads, p.time, grounded)
        if _MATCHES.get() is not None:
            load_match = _load_match(loads, m)
    record = _MATCHES.get()
    if record is not None:
        record.append(InputMatch(tuple(present), defaults, ignored, load_match, tuple(grounded)))
    dt = m.tree.masses.dtype
    as_dt = lambda x: jnp.asarray(x, dt)
    labels = tuple(n + ("_moment" if t == "rotational" else "_force") for n, t in zip(names, m.motion_types))
    inputs = InverseDynamicsInputs(
        time=as_dt(p.time),
        c=as_dt(c),
        cd=as_dt(cd),
        cdd=as_dt(cdd),
        forces=as_dt(arrays[0]),
        torques=as_dt(arrays[1]),
        points=as_dt(arrays[2]),
        coordinate_names=tuple(names),
        load_bodies=bodies,
        force_frames=force_frames,
        point_frames=point_frames,
        labels=labels,
    )
    return inputs, p


def prepare_inverse_dynamics(
    model,
    motion,
    *,
    external_loads=None,
    lowpass_hz: float | None = None,
    start: float | None = None,
    end: float | None = None,
    dtype=None,
    progress: Callable[[str], None] | None = None,
) -> InverseDynamicsInputs:
    """Steps 1–2 of OpenSim's ``InverseDynamicsTool`` (module docstring), outside jit: the
    motion's coordinates processed and the external loads interpolated at its frames.

    Arguments as `inverse_dynamics_tool`. Returns an `InverseDynamicsInputs` of ``T`` frames in
    the model's float type (``dtype``, as `load_model`), the argument of `generalized_forces`::

        model = jb.io.load_osim("subject01.osim")
        inputs = jb.io.prepare_inverse_dynamics(model, "walk_ik.mot", external_loads="grf.xml",
                                                lowpass_hz=6.0, start=0.5, end=1.6)
        trial = jax.jit(jax.vmap(jb.io.generalized_forces, (None, 0)))
        tau = trial(model, inputs)                                    # (T, nc) N·m / N
        dmass = jax.grad(lambda m: jnp.sum(trial(m, inputs)[:, :6] ** 2))(model).tree.masses

    Raises ``ValueError`` as `inverse_dynamics_tool`.
    """
    say = progress or (lambda message: None)
    return _prepare(tool_model(model, dtype), motion, external_loads, lowpass_hz, start, end, say)[0]


def _check_inputs(model, inputs: InverseDynamicsInputs) -> None:
    if tuple(inputs.coordinate_names) != tuple(model.coordinate_names):
        raise ValueError(
            f"inputs: prepared for coordinates {list(inputs.coordinate_names)}, the model "
            f"({model.path}) has {list(model.coordinate_names)}"
        )
    nb = len(model.bodies)
    for field in ("load_bodies", "force_frames", "point_frames"):
        bad = [b for b in getattr(inputs, field) if not 0 <= b < nb]
        if bad:
            raise ValueError(f"inputs.{field}: {bad} are not body indices of the model ({model.path}, {nb} bodies)")


def body_poses(model, q, bodies, *, ground_only: bool = False):
    """World poses of ``model.bodies[bodies]`` at tree coordinates ``q``: ``(attitudes (k, 4),
    positions (k, 3))``, each body's segment pose composed with the body's own frame (the ground:
    identity). ``ground_only`` (static): every body is the ground (no kinematics computed)."""
    dt = q.dtype
    ground = jnp.array([[1.0, 0, 0, 0]], dt), jnp.zeros((1, 3), dt)
    if ground_only:
        attitudes, positions = ground  # data in the ground frame (force plates): no kinematics needed here
    else:  # every body's world pose: its segment's pose (the appended row for the ground) · its own frame
        positions, attitudes = forward_kinematics(model.tree, q)
        attitudes = jnp.concatenate([attitudes, ground[0]])
        positions = jnp.concatenate([positions, ground[1]])
    bodies = np.asarray(bodies, dtype=np.int32)
    seg = np.asarray([model.body_segments[b] for b in bodies], dtype=np.int32)  # -1: the last row
    att = attitudes[seg]
    return (
        quat.multiply(att, model.body_orientations[bodies]),
        positions[seg] + quat.rotate(att, model.body_positions[bodies]),
    )


def _external(model, q, inputs: InverseDynamicsInputs):
    """World-frame wrenches of the applied forces on the tree's segments (one frame), or None."""
    if not inputs.load_bodies:
        return None
    frames = inputs.force_frames + inputs.point_frames
    att, pos = body_poses(model, q, frames, ground_only=all(model.body_segments[b] < 0 for b in frames))
    k = len(inputs.force_frames)
    rf, rp, op = att[:k], att[k:], pos[k:]
    forces, torques = quat.rotate(rf, inputs.forces), quat.rotate(rf, inputs.torques)
    points = op + quat.rotate(rp, inputs.points)
    segments = tuple(model.body_segments[b] for b in inputs.load_bodies)
    return point_loads(model.tree, q, segments, points, forces, torques, world_points=True)


def generalized_forces(model, inputs: InverseDynamicsInputs) -> Float[Array, " nc"]:
    """Step 3 of OpenSim's ``InverseDynamicsTool`` for one frame: ``τ_c = J(c)ᵀ τ(q, q̇, q̈,
    external)`` (`jaxbio.inverse_dynamics` of the model) with the external loads rotated to the
    world and applied at their points (`jaxbio.dynamics.point_loads`).

    - ``model``: the `Model` the inputs were prepared for (any of its array leaves may be
      traced: masses, COMs, inertias, joint frames of ``model.tree``, the coefficients of
      ``model.coordinates``, the body frames).
    - ``inputs``: one frame of `InverseDynamicsInputs` (``c`` ``(nc,)``, ``forces`` ``(k, 3)``, …):
      ``inputs.frame(i)``, or map over the whole trial with ``jax.vmap(generalized_forces, (None, 0))``.

    Returns ``(nc,)`` N·m (rotational) / N, OpenSim's generalised forces in the model's
    coordinate order (``inputs.labels``), less the model's imported passive forces
    (`jaxbio.io.passive_forces`: coordinate limits, springs; select them with
    `jaxbio.io.applied_forces`). Pure: jit, vmap (over frames, or over models), grad and
    jacfwd work.
    """
    from jaxbio.forces import passive_forces

    _check_inputs(model, inputs)
    q = coordinates.to_tree(model.coordinates, inputs.c)
    tau = inverse_dynamics(model, inputs.c, inputs.cd, inputs.cdd, _external(model, q, inputs))
    return tau - passive_forces(model, inputs.c, inputs.cd)


def _trial(model, inputs):
    """Every frame's `generalized_forces` (``jit(vmap)``; kept across processes by the command
    line, `jaxbio._aot`)."""
    return _aot.call_over_frames("inverse_dynamics", jax.vmap(generalized_forces, in_axes=(None, 0)), model, inputs)


def inverse_dynamics_tool(
    model,
    motion,
    *,
    external_loads=None,
    forces_to_exclude=("muscles",),
    lowpass_hz: float | None = None,
    start: float | None = None,
    end: float | None = None,
    dtype=None,
    progress: Callable[[str], None] | None = None,
) -> Table:
    """OpenSim's ``InverseDynamicsTool`` (module docstring): generalised forces of a motion.

    - ``model``: an `Model`, a ``.osim`` / model ``.json`` path or shipped model name, or a
      `jaxbio.SegmentTree` (see `load_model`).
    - ``motion``: a `Table` or a ``.mot``/``.sto`` path of coordinates (IK output; degrees as the
      file says).
    - ``external_loads``: an ExternalLoads ``.xml`` path or `ExternalLoads`, or None.
    - ``forces_to_exclude``: the model forces OpenSim leaves out (`jaxbio.io.applied_forces`; a
      string is split at white space like the setup file's ``<forces_to_exclude>``). Default
      ``("muscles",)``, what OpenSim's GUI and its example setups use (an InverseDynamicsTool
      whose setup has no ``<forces_to_exclude>`` excludes nothing; ``jaxbio run-tool`` follows
      the setup file).
    - ``lowpass_hz``: ``lowpass_cutoff_frequency_for_coordinates`` (None: no filtering);
      ``start``, ``end``: the time range in s (None: the motion's).
    - ``dtype``: the floating type of the computation (default float64 when x64 is enabled,
      else JAX's default); ``progress``: called with a short message before each stage.

    Returns a `Table` (``time`` ``(T,)`` s; ``data`` ``(T, nc)`` N·m or N; OpenSim's labels).
    Raises ``ValueError`` naming the file and column: a motion with none of the model's
    coordinates, a NaN in a used column, external loads naming unknown bodies or columns, or
    not covering the time range; and naming the forces, a model force OpenSim would apply that
    jaxbio does not import (`jaxbio.io.applied_forces`).
    """
    from jaxbio.forces import applied_forces

    say = progress or (lambda message: None)
    say("loading the model")
    m = applied_forces(tool_model(model, dtype), forces_to_exclude)
    inputs, processed = _prepare(m, motion, external_loads, lowpass_hz, start, end, say)
    time = processed.time
    say(f"inverse dynamics of {time.size} frames")
    tau = _trial(m, inputs)
    return Table(
        time=time,
        labels=inputs.labels,
        data=np.asarray(tau, float),
        in_degrees=False,
        name="Inverse Dynamics Generalized Forces",
    )


def coordinates_table(model, time, c, *, degrees: bool = True, name: str = "jaxbio motion") -> Table:
    """A motion of ``model``'s coordinates as a `Table` for a ``.mot`` file that OpenSim (its GUI,
    ``TimeSeriesTable``, the tools) plays on the same model: ``time`` ``(T,)`` s, ``c`` ``(T, nc)``
    rad / m in the model's coordinate order (`Model.coordinate_names`; for a jaxbio tree of
    1-DOF joints, its ``q``, named after the segments). Rotational coordinates are written in
    degrees with ``inDegrees=yes`` unless ``degrees`` is False. Write it with ``write_sto(path,
    table)`` (any extension; ``.mot`` is what OpenSim's GUI lists as a motion).

    A trajectory of a simulation (``jb.simulate``) on the tree of an `Model` is in tree
    coordinates ``q``; for an identity `CoordinateMap` (no coupled coordinates) ``c = q``."""
    m = tool_model(model)
    t = np.asarray(time, float)
    x = np.array(c, dtype=float)
    names = m.coordinate_names
    if t.ndim != 1 or x.shape != (t.size, len(names)):
        raise ValueError(
            f"c must be (T, nc) = ({t.size}, {len(names)}) with time (T,), got c {x.shape}, time {t.shape}"
        )
    if degrees:
        rot = np.asarray([k == "rotational" for k in m.motion_types])
        x[:, rot] = np.degrees(x[:, rot])
    return Table(time=t, labels=tuple(names), data=x, in_degrees=bool(degrees), name=name)
