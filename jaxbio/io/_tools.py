"""OpenSim's tools on jaxbio's dynamics: inverse dynamics of a motion file, with external loads,
giving OpenSim's result file (``InverseDynamicsTool``), every frame in one ``jit(vmap)`` call.

What `inverse_dynamics_tool` does, in OpenSim's order (opensim-core
``Tools/InverseDynamicsTool.cpp``, ``run``):

1. the model's coordinates found among the motion's columns are processed as OpenSim does
   (`process_coordinates`: pad, filter, degrees → radians for rotational coordinates only,
   quintic GCV splines, the frames of the time range); a coordinate the file lacks is held at
   its default value (zero speed and acceleration), as OpenSim does (it logs it). Other columns
   (markers, another model's coordinates) are ignored.
2. the external loads (`read_external_loads`) are interpolated at those frames
   (`external_load_data`) and applied to the bodies they name: force at its point, plus the free
   torque, each rotated to the world from the frame it is expressed in.
3. generalised forces ``τ_c = J(c)ᵀ τ(q, q̇, q̈, external) − τ_forces(c, ċ)``
   (`jaxbio.coordinates.inverse_dynamics`, `jaxbio.io.passive_forces`), every frame at once:
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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio.io._external_loads import ExternalLoads, external_load_data, read_external_loads
from jaxbio.io._processing import process_coordinates
from jaxbio.io._storage import Table, read_storage

__all__ = ["inverse_dynamics_tool", "load_any_model", "coordinates_table"]


def load_any_model(model, *, dtype=None):
    """An `OsimModel` from a ``.osim`` path, a shipped model name or a model ``.json`` path (as an
    `OsimModel`-like pair: its tree with one coordinate per 1-DOF joint, named after the
    segment), or the model itself (an `OsimModel` or a `jaxbio.SegmentTree`)."""
    from jaxbio.io.osim import OsimModel, load_osim
    from jaxbio.model import load_model
    from jaxbio.tree import SegmentTree

    if isinstance(model, OsimModel):
        return model
    if isinstance(model, (str, os.PathLike)):
        if Path(model).suffix.lower() == ".osim":
            return load_osim(model, dtype=dtype)
        model = load_model(model, dtype=dtype)
    if isinstance(model, SegmentTree):
        return _tree_model(model)
    raise ValueError(f"model must be an OsimModel, a SegmentTree, or a path, got {type(model).__name__}")


def _tree_model(tree):
    """A jaxbio tree as an `OsimModel` (identity coordinates named after the segments)."""
    from jaxbio.coordinates import CoordinateMap
    from jaxbio.io.osim import OsimModel

    if not tree.is_axial:
        bad = [n for n, t in zip(tree.names, tree.joint_types) if t not in ("revolute", "prismatic")]
        raise ValueError(f"model {tree.name!r}: motion files name one coordinate per joint; segments {bad} have "
                         f"ball, free or fixed joints (import the model from its .osim file instead)")
    nc = tree.nq
    dt = tree.masses.dtype
    return OsimModel(
        tree=tree, coordinates=CoordinateMap.identity(tree.names), defaults=jnp.zeros(nc, dt),
        default_speeds=jnp.zeros(nc, dt), ranges=jnp.tile(jnp.array([-jnp.inf, jnp.inf], dt), (nc, 1)),
        body_positions=jnp.zeros((tree.n_segments + 1, 3), dt),
        body_orientations=jnp.tile(jnp.array([1.0, 0, 0, 0], dt), (tree.n_segments + 1, 1)),
        clamped=(False,) * nc, locked=(False,) * nc, prescribed=(False,) * nc,
        motion_types=tuple("rotational" if t == "revolute" else "translational" for t in tree.joint_types),
        bodies=("ground",) + tuple(tree.names), body_segments=(-1,) + tuple(range(tree.n_segments)),
        joints=tuple(tree.names), joint_types=tuple(tree.joint_types), coordinate_joints=tuple(range(nc)),
        ignored=(), path=tree.name)


def _external(model, loads: ExternalLoads, times: np.ndarray):
    """Static segment indices and the per-frame arrays of every applied force, plus a pure
    function ``(q_tree, arrays) -> external`` that rotates them to the world."""
    from jaxbio import quaternion as quat
    from jaxbio.dynamics.kinematics import segment_motion
    from jaxbio.dynamics.loads import point_loads

    data = external_load_data(loads, times)
    where = str(loads.path)

    def frame(name, role, force_name):
        if name.lower() == "ground" or name == (model.bodies[0] if model.bodies else "ground"):
            return -1, np.zeros(3), np.array([1.0, 0, 0, 0])
        if name not in model.bodies:
            raise ValueError(f"{where}: ExternalForce {force_name!r}: {role} {name!r} is not a body of the model "
                             f"({model.path}); bodies are {list(model.bodies)}")
        seg, pos, ori = model.body_frame(name)
        return seg, np.asarray(pos, float), np.asarray(ori, float)

    forces, segments = [], []
    for d in data:
        f = d.spec
        seg, pos, ori = frame(f.body, "applied_to_body", f.name)
        if seg < 0:
            continue  # a load on the ground moves nothing
        zero = np.zeros((times.size, 3))
        forces.append(dict(
            force=zero if d.force is None else d.force, torque=zero if d.torque is None else d.torque,
            point=None if d.point is None else d.point,
            force_frame=frame(f.force_frame, "force_expressed_in_body", f.name),
            point_frame=frame(f.point_frame, "point_expressed_in_body", f.name) if d.point is not None else None,
            body=(seg, pos, ori)))
        segments.append(seg)
    segments = tuple(segments)

    def world(q, arrays):
        """Per force: world force, world point of application, world torque (one frame)."""
        motion = segment_motion(model.tree, q)
        dt = q.dtype

        def pose(fr):  # world rotation (quaternion) and origin of a frame (segment, pos, ori)
            seg, pos, ori = fr
            if seg < 0:
                return jnp.asarray(ori, dt), jnp.asarray(pos, dt)
            att = motion.attitude[seg]
            return quat.multiply(att, jnp.asarray(ori, dt)), motion.position[seg] + quat.rotate(att, jnp.asarray(pos, dt))

        F, X, T = [], [], []
        for spec, a in zip(forces, arrays):
            rf, _ = pose(spec["force_frame"])
            F.append(quat.rotate(rf, a["force"]))
            T.append(quat.rotate(rf, a["torque"]))
            if spec["point_frame"] is None:  # the body's origin
                X.append(pose(spec["body"])[1])
            else:
                rp, op = pose(spec["point_frame"])
                X.append(op + quat.rotate(rp, a["point"]))
        return jnp.stack(F), jnp.stack(X), jnp.stack(T)

    def external(q, arrays):
        if not segments:
            return None
        F, X, T = world(q, arrays)
        return point_loads(model.tree, q, segments, X, F, T, world_points=True)

    per_frame = [{k: spec[k] for k in ("force", "torque")} | {"point": spec["point"] if spec["point"] is not None
                 else np.zeros((times.size, 3))} for spec in forces]
    return external, per_frame


def inverse_dynamics_tool(model, motion, *, external_loads=None, forces_to_exclude=("muscles",),
                          lowpass_hz: float | None = None, start: float | None = None, end: float | None = None,
                          dtype=None, progress: Callable[[str], None] | None = None) -> Table:
    """OpenSim's ``InverseDynamicsTool`` (module docstring): generalised forces of a motion.

    - ``model``: an `OsimModel`, a ``.osim`` / model ``.json`` path or shipped model name, or a
      `jaxbio.SegmentTree` (see `load_any_model`).
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
    from jaxbio.io._osim_forces import applied_forces, passive_forces

    say = progress or (lambda message: None)
    say("loading the model")
    m = applied_forces(load_any_model(model, dtype=dtype), forces_to_exclude)
    table = motion if isinstance(motion, Table) else read_storage(motion)
    names = m.coordinate_names
    present = [n for n in names if n in table.labels]
    if not present:
        raise ValueError(f"{motion if not isinstance(motion, Table) else table.name or 'motion'}: none of the model's coordinates {list(names)} is a column "
                         f"(columns: {list(table.labels)[:12]}{' …' if len(table.labels) > 12 else ''})")
    rotational = [n for n in present if m.motion_types[names.index(n)] == "rotational"]
    say("processing the coordinates")
    p = process_coordinates(table.select(present), lowpass_hz=lowpass_hz, start=start, end=end,
                            rotational=rotational)
    dt = m.tree.masses.dtype
    T = p.time.size
    cols = np.asarray([names.index(n) for n in present])
    c = np.tile(np.asarray(m.defaults, float), (T, 1))
    cd, cdd = np.zeros((T, len(names))), np.zeros((T, len(names)))
    c[:, cols], cd[:, cols], cdd[:, cols] = p.q, p.qd, p.qdd

    from jaxbio import coordinates

    if external_loads is not None:
        say("reading the external loads")
        loads = external_loads if isinstance(external_loads, ExternalLoads) else read_external_loads(external_loads)
        external, arrays = _external(m, loads, p.time)
    else:
        external, arrays = (lambda q, a: None), []

    def frame(c, cd, cdd, arrays):
        q = coordinates.to_tree(m.coordinates, c)
        tau = coordinates.inverse_dynamics(m.tree, m.coordinates, c, cd, cdd, external(q, arrays))
        return tau - passive_forces(m, c, cd)

    say(f"inverse dynamics of {T} frames")
    as_dt = lambda x: jax.tree_util.tree_map(lambda a: jnp.asarray(a, dt), x)
    tau = jax.jit(jax.vmap(frame))(as_dt(c), as_dt(cd), as_dt(cdd), as_dt(arrays))
    labels = tuple(n + ("_moment" if t == "rotational" else "_force") for n, t in zip(names, m.motion_types))
    return Table(time=p.time, labels=labels, data=np.asarray(tau, float), in_degrees=False,
                 name="Inverse Dynamics Generalized Forces")


def coordinates_table(model, time, c, *, degrees: bool = True, name: str = "jaxbio motion") -> Table:
    """A motion of ``model``'s coordinates as a `Table` for a ``.mot`` file that OpenSim (its GUI,
    ``TimeSeriesTable``, the tools) plays on the same model: ``time`` ``(T,)`` s, ``c`` ``(T, nc)``
    rad / m in the model's coordinate order (`OsimModel.coordinate_names`; for a jaxbio tree of
    1-DOF joints, its ``q``, named after the segments). Rotational coordinates are written in
    degrees with ``inDegrees=yes`` unless ``degrees`` is False. Write it with ``write_sto(path,
    table)`` (any extension; ``.mot`` is what OpenSim's GUI lists as a motion).

    A trajectory of a simulation (``jb.simulate``) on the tree of an `OsimModel` is in tree
    coordinates ``q``; for an identity `CoordinateMap` (no coupled coordinates) ``c = q``."""
    m = load_any_model(model)
    t = np.asarray(time, float)
    x = np.array(c, dtype=float)
    names = m.coordinate_names
    if t.ndim != 1 or x.shape != (t.size, len(names)):
        raise ValueError(f"c must be (T, nc) = ({t.size}, {len(names)}) with time (T,), got c {x.shape}, time {t.shape}")
    if degrees:
        rot = np.asarray([k == "rotational" for k in m.motion_types])
        x[:, rot] = np.degrees(x[:, rot])
    return Table(time=t, labels=tuple(names), data=x, in_degrees=bool(degrees), name=name)
