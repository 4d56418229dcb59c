"""OpenSim's ``JointReaction`` analysis (``AnalyzeTool``).

`joint_reaction_tool` does what OpenSim 4.6's ``AnalyzeTool`` does with a ``JointReaction``
analysis (opensim-core ``Tools/AnalyzeTool.cpp`` ``run``, ``Analyses/JointReaction.cpp``
``record``):

1. **States.** From a ``states_file``: its rows as they are (no interpolation), from the last
   row at or before ``initial_time`` to the last at or before ``final_time``
   (``Storage::findIndex``); each coordinate's value and speed from the column OpenSim's
   ``Model::formStateStorage`` maps to it (``/jointset/<joint>/<coordinate>/value`` and
   ``/speed``, or the 3.x names ``<coordinate>`` and ``<coordinate>_u``); a coordinate without a
   column is held at its default value and speed, with a warning. From a ``coordinates_file``:
   processed as for static optimisation (`jaxbio.tools.process_coordinates`: the quintic GCV
   spline's value and first derivative at the file's times, a missing coordinate held at 0).
2. **Accelerations** are the model's forward dynamics at those states
   (``Model::realizeAcceleration``), not the motion's: ``c̈ = jb.forward_dynamics(model, c, ċ,
   τ_passive + τ_actuators, external loads, locked=model.locked)``, where the actuators' forces
   come from ``forces_file`` (``ScalarActuator::overrideActuation``: the file's value,
   linearly interpolated at the frame's time, for every actuator the file names; as in OpenSim,
   a file that lacks one of the model's actuators is not used, with a warning) or are zero
   (no controller: zero controls). Muscles pull with the file's tensions where OpenSim's
   ``GeometryPath::produceForces`` applies them (`muscle_path_wrenches`): each straight piece
   between points on two bodies pulls both ends, at wrap objects' tangent points too, and a
   moving path point adds its generalised force; a forces file that lacks a muscle is refused
   (OpenSim would compute the muscles' forces from their states).
3. **Reaction loads.** The wrench the joint transmits (Simbody's mobilizer reaction, which
   includes the joint's own mobility forces): `jaxbio.segment_wrenches` of the joint's child
   segment, its moment moved to the origin of the joint's child frame (``apply_on_bodies``
   ``child``, ``Joint::calcReactionOnChildExpressedInGround``) or, negated, to the origin of
   its parent frame (``parent``); force and moment expressed in ``express_in_frame`` (a body,
   ``ground``, a frame path such as ``pin1/rod1_offset``, or the keywords ``child`` / ``parent``:
   the joint's child or parent body), and the point of application (the frame's origin) given in
   that frame. Columns ``<joint>_on_<body>_in_<frame>_fx fy fz mx my mz px py pz``.

The frames recorded are those of OpenSim's analyses (``step_interval``: the first, the last,
and those whose storage index is a multiple of it). A force that acts at points of bodies
changes reaction loads in a way its generalised force does not show: the muscles (with a forces
file) and the point and torque actuators act on their bodies (`muscle_path_wrenches`, a
``PointActuator``'s force at its point, a ``TorqueActuator``'s torque on its two bodies); other
such forces are not applied here (path actuators and springs, point springs, bushings, contact),
so a model where one acts is refused naming it (``ValueError``), as is one with muscles and no
forces file.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import coordinates
from jaxbio import quaternion as quat
from jaxbio._text import listing
from jaxbio.io import Table, read_storage

__all__ = [
    "ReactionFrames",
    "joint_reaction_loads",
    "joint_reaction_tool",
    "muscle_path_wrenches",
    "read_reaction_frames",
]


class ReactionFrames(eqx.Module):
    """The ``k`` reaction loads a ``JointReaction`` analysis reports (`read_reaction_frames`).

    Static: ``labels`` (``k`` label roots ``<joint>_on_<body>_in_<frame>``), ``child_bodies``,
    ``parent_bodies``, ``frame_bodies`` (indices into ``Model.bodies``: each joint's child and
    parent body, and the body of the frame its loads are expressed in), ``on_child`` (the load
    on the child at its frame, else on the parent at its frame). Arrays, in the body's own frame
    (m; ``(w, x, y, z)``): ``child_positions`` ``(k, 3)`` (the joint's child frame origin),
    ``parent_positions`` ``(k, 3)``, ``frame_positions`` ``(k, 3)`` and
    ``frame_orientations`` ``(k, 4)``."""

    child_positions: Float[Array, "k 3"]
    parent_positions: Float[Array, "k 3"]
    frame_positions: Float[Array, "k 3"]
    frame_orientations: Float[Array, "k 4"]
    labels: tuple[str, ...] = eqx.field(static=True)
    child_bodies: tuple[int, ...] = eqx.field(static=True)
    parent_bodies: tuple[int, ...] = eqx.field(static=True)
    frame_bodies: tuple[int, ...] = eqx.field(static=True)
    on_child: tuple[bool, ...] = eqx.field(static=True)


def _joint_frames(model_path, model):
    """``{joint: ((child body, X_child), (parent body, X_parent))}`` and ``{frame path: (body,
    X)}`` of the ``.osim`` file, each ``X`` the frame's pose in its body's frame (``_Pose``)."""
    from jaxbio._files import read_bytes
    from jaxbio._text import parse_xml
    from jaxbio.io.osim import Frames
    from jaxbio.io.osim import read_joint as _read_joint

    raw = read_bytes(model_path, "model file")
    root = parse_xml(raw)
    model_elem = root.find("Model") if root.tag == "OpenSimDocument" else root
    ground = model.bodies[0]
    bodies = list(model.bodies[1:])
    frames = Frames(model_elem, ground, bodies)
    named = {}  # frame path (no leading slash) → (body, pose)
    for p in frames.paths:
        named[p.lstrip("/")] = frames.pose(p, str(model_path))
    joints = {}
    for b in model_elem.findall("BodySet/objects/Body"):  # 3.x: the offsets OpenSim 4 makes frames of
        for j in b.findall("Joint/*"):
            jt = _read_joint(j, b.get("name"))
            joints[jt.name] = (jt.child, jt.parent)
            named[f"jointset/{jt.name}/{jt.parent[0]}_offset"] = jt.parent
            named[f"jointset/{jt.name}/{jt.child[0]}_offset"] = jt.child
    for j in model_elem.findall("JointSet/objects/*"):
        jt = _read_joint(j, None)
        owner = f"/jointset/{jt.name}"
        joints[jt.name] = (
            frames.pose(frames.resolve(jt.child_socket, owner, jt.where), jt.where),
            frames.pose(frames.resolve(jt.parent_socket, owner, jt.where), jt.where),
        )
    return joints, named


def read_reaction_frames(
    model,
    joint_names: Sequence[str] = ("ALL",),
    on_bodies: Sequence[str] = ("child",),
    in_frames: Sequence[str] = ("ground",),
    *,
    where: str = "JointReaction",
) -> ReactionFrames:
    """The `ReactionFrames` of a ``JointReaction`` analysis on ``model`` (a `jaxbio.Model` read
    from an ``.osim`` file: its joints' frames are read from ``model.path``), as OpenSim's
    ``JointReaction::setupReactionList`` makes them: ``joint_names`` (``ALL``: every joint, in
    the model's order; a name that is no joint is left out with a warning, as OpenSim),
    ``on_bodies`` (``child`` / ``parent``) and ``in_frames`` (a frame: ``ground``, a body, a frame
    path; or ``child`` / ``parent``) one entry for all joints or one per joint. ``ValueError``
    naming the property for other lengths and values."""
    joints, named = _joint_frames(model.path, model)
    names = list(joint_names) or ["ALL"]
    if names[0].upper() == "ALL":
        names = list(model.joints)
    on_bodies = list(on_bodies) or ["child"]
    in_frames = list(in_frames) or ["ground"]
    for prop, values in (("apply_on_bodies", on_bodies), ("express_in_frame", in_frames)):
        if len(values) not in (1, len(names)):
            raise ValueError(
                f"{where}: <{prop}> has {len(values)} entries; it must have 1 or one per joint ({len(names)})"
            )
    bodies = list(model.bodies)
    rows = []
    for i, name in enumerate(names):
        if name not in joints:
            warnings.warn(
                f"{where}: {name!r} is not a joint of the model ({model.path}): left out, as OpenSim does", stacklevel=2
            )
            continue
        (cb, xc), (pb, xp) = joints[name]
        on = (on_bodies[i] if len(on_bodies) > 1 else on_bodies[0]).lower()
        if on not in ("child", "parent"):
            raise ValueError(f"{where}: <apply_on_bodies> must be child or parent, got {on!r}")
        frame = in_frames[i] if len(in_frames) > 1 else in_frames[0]
        found = None
        for key in (frame, f"bodyset/{frame}", f"jointset/{frame}"):
            if key.lstrip("/") in named:
                found = named[key.lstrip("/")]
                break
        if found is None and frame.lower() in ("child", "parent"):
            from jaxbio.io.osim import Pose as _Pose

            found = (cb if frame.lower() == "child" else pb, _Pose())
            frame = found[0]
        if found is None:
            raise ValueError(
                f"{where}: <express_in_frame> {frame!r} is neither a frame of the model ({model.path}) nor "
                "the keyword child or parent"
            )
        fb, xf = found
        rows.append(
            (
                f"{name}_on_{cb if on == 'child' else pb}_in_{frame.rstrip('/').split('/')[-1]}",
                bodies.index(cb),
                bodies.index(pb),
                bodies.index(fb),
                on == "child",
                xc.p,
                xp.p,
                xf.p,
                xf.q,
            )
        )
    if not rows:
        raise ValueError(f"{where}: none of <joint_names> {names} is a joint of the model ({model.path})")
    dt = model.tree.masses.dtype
    col = lambda k: jnp.asarray(np.array([r[k] for r in rows], float), dt)
    return ReactionFrames(
        child_positions=col(5),
        parent_positions=col(6),
        frame_positions=col(7),
        frame_orientations=col(8),
        labels=tuple(r[0] for r in rows),
        child_bodies=tuple(r[1] for r in rows),
        parent_bodies=tuple(r[2] for r in rows),
        frame_bodies=tuple(r[3] for r in rows),
        on_child=tuple(r[4] for r in rows),
    )


def joint_reaction_loads(
    model,
    frames: ReactionFrames,
    c: Float[Array, " nc"],
    cd: Float[Array, " nc"],
    cdd: Float[Array, " nc"],
    external=None,
) -> Float[Array, "k 9"]:
    """One frame's reaction loads of ``frames`` (module docstring, step 3).

    - ``model``: the `jaxbio.Model`; ``c``, ``cd``, ``cdd`` ``(nc,)``: its coordinates (rad / m),
      speeds and accelerations; ``external``: world-frame wrenches on the tree's segments
      (forces ``(n, 3)`` N, moments ``(n, 3)`` N·m about each segment's origin), or None.

    Returns ``(k, 9)``: force (N), moment (N·m, about the joint frame's origin) and that origin
    (m), each expressed in the frame of ``frames``. Pure: jit, vmap and grad work."""
    from jaxbio.dynamics import forward_kinematics, segment_wrenches

    forces, moments = segment_wrenches(model, c, cd, cdd, external)
    q = coordinates.to_tree(model.coordinates, c)
    seg_pos, seg_att = forward_kinematics(model.tree, q)
    seg = np.asarray([model.body_segments[b] for b in frames.child_bodies], np.int32)
    F, M = forces[seg], moments[seg]
    # every body's world pose: its segment's (the appended row: the ground) · its own frame
    k = len(frames.labels)
    bodies = np.asarray(frames.child_bodies + frames.parent_bodies + frames.frame_bodies, np.int32)
    rows = np.asarray([model.body_segments[b] for b in bodies], np.int32)  # -1: the last row
    pos = jnp.concatenate([seg_pos, jnp.zeros((1, 3), seg_pos.dtype)])[rows]
    att = jnp.concatenate([seg_att, jnp.asarray([[1.0, 0, 0, 0]], seg_att.dtype)])[rows]
    b_att = quat.multiply(att, model.body_orientations[bodies])
    b_pos = pos + quat.rotate(att, model.body_positions[bodies])
    att_c, att_p, att_f = b_att[:k], b_att[k : 2 * k], b_att[2 * k :]
    pos_c, pos_p, pos_f = b_pos[:k], b_pos[k : 2 * k], b_pos[2 * k :]
    p_child = pos_c + quat.rotate(att_c, frames.child_positions)
    p_parent = pos_p + quat.rotate(att_p, frames.parent_positions)
    M_child = M + jnp.cross(seg_pos[seg] - p_child, F)
    on = np.asarray(frames.on_child)[:, None]
    force = jnp.where(on, F, -F)
    moment = jnp.where(on, M_child, -(M_child + jnp.cross(p_child - p_parent, F)))
    point = jnp.where(on, p_child, p_parent)
    e_att = quat.multiply(att_f, frames.frame_orientations)
    e_pos = pos_f + quat.rotate(att_f, frames.frame_positions)
    inv = quat.conjugate(e_att)
    return jnp.concatenate([quat.rotate(inv, force), quat.rotate(inv, moment), quat.rotate(inv, point - e_pos)], -1)


def _point_forces(m, muscles: bool = True) -> list[str]:
    """The model's forces that act at points of bodies (module docstring) and that jaxbio does not
    apply here (the muscles too, unless ``muscles`` is false: their tensions come from a forces
    file)."""
    out = []
    f = m.forces
    if f is not None:
        for field in (
            "point_springs",
            "bushings",
            "contacts",
            "path_actuators",
            "path_springs",
        ):
            out += [f"{type(getattr(f, field)).__name__.rstrip('s')} {n!r}" for n in getattr(f, field).names]
    if muscles and m.muscles is not None:
        out += [f"muscle {n!r}" for n in m.muscles.names]
    return out


def muscle_path_wrenches(model, c: Float[Array, " nc"], tensions: Float[Array, " k"]):
    """The loads the muscles of ``model`` apply with ``tensions`` ``(k,)`` N
    (``model.muscles.names`` order) at coordinates ``c`` ``(nc,)`` rad / m, as OpenSim's
    ``GeometryPath::addInEquivalentForces`` applies them: ``(forces (n, 3) N, moments (n, 3) N·m,
    tau (nc,) N·m / N)``, the world-frame wrenches on the tree's ``n`` segments (moments about
    each segment's origin: the ``external`` argument of `jaxbio.inverse_dynamics`;
    `muscle_path_wrenches_only`) and the generalised forces of moving path points
    (`_with_moving_points`). Together their generalised force is the muscles' ``rᵀT``."""
    return _with_moving_points(model, c, tensions, muscle_path_wrenches_only(model, c, tensions))


def muscle_path_wrenches_only(model, c: Float[Array, " nc"], tensions: Float[Array, " k"]):
    """The wrenches the muscles of ``model`` apply to the tree's segments with ``tensions``
    ``(k,)`` N (``model.muscles.names`` order) at coordinates ``c`` ``(nc,)``: OpenSim's
    ``GeometryPath::addInEquivalentForces``, each straight piece between points on two bodies
    pulling both ends towards each other with the tension. Moving points sit where ``c`` puts
    them; a conditional point outside its range is not on the path (its neighbours pull each
    other). Returns world-frame ``(forces (n, 3) N, moments (n, 3) N·m about each segment's
    origin)``, the ``external`` argument of `jaxbio.inverse_dynamics`. Paths with wrap objects
    pull at their tangent points (`jaxbio.muscles.geometry.muscle_wrenches`)."""
    from jaxbio.dynamics import forward_kinematics
    from jaxbio.forces.internals import paths_at as _paths_at
    from jaxbio.muscles.geometry import muscle_wrenches, path_points_world
    from jaxbio.spatial import unit

    paths, active = _paths_at(model.muscles, model, c)
    q = coordinates.to_tree(model.coordinates, c)
    tensions = jnp.asarray(tensions, c.dtype)
    if active is None:
        return muscle_wrenches(paths, model.tree, q, tensions)
    # conditional points (never on wrapped paths): each point stands for the last active one at
    # or before it (the first active one where none precedes), on that point's segment
    conditional = np.zeros(paths.n_muscles, bool)
    conditional[[i for i, _, _ in model.muscles.conditional]] = True
    f_wrap, m_wrap = muscle_wrenches(paths, model.tree, q, jnp.where(conditional, 0.0, tensions))
    k = jnp.arange(paths.max_points)
    previous = jax.lax.cummax(jnp.where(active, k, -1), axis=1)
    source = jnp.where(previous < 0, jnp.argmax(active, axis=1)[:, None], previous)
    pts = jnp.take_along_axis(path_points_world(paths, model.tree, q), source[..., None], axis=1)
    seg = jnp.take_along_axis(jnp.asarray(paths.segment_index), source, axis=1)
    d = pts[:, 1:] - pts[:, :-1]
    pull = jnp.asarray(paths.piece_mask) & (seg[:, 1:] != seg[:, :-1]) & jnp.asarray(conditional)[:, None]
    f = jnp.where(pull[..., None], unit(d, jnp.zeros_like(d)), 0.0) * tensions[:, None, None]
    n = len(model.tree.names)  # segments (fixed ones too)
    seg_pos = forward_kinematics(model.tree, q)[0]
    origin = jnp.concatenate([seg_pos, jnp.zeros((1, 3), seg_pos.dtype)])  # bin n: the ground, dropped
    f_all = jnp.concatenate([f, -f], axis=1)
    p_all = jnp.concatenate([pts[:, :-1], pts[:, 1:]], axis=1)
    s_all = jnp.concatenate([seg[:, :-1], seg[:, 1:]], axis=1)
    bins = jnp.where(s_all < 0, n, s_all)
    m_all = jnp.cross(p_all - origin[bins], f_all)
    seg_f = jax.ops.segment_sum(f_all.reshape(-1, 3), bins.reshape(-1), num_segments=n + 1)[:n]
    seg_m = jax.ops.segment_sum(m_all.reshape(-1, 3), bins.reshape(-1), num_segments=n + 1)[:n]
    return f_wrap + seg_f, m_wrap + seg_m


def _with_moving_points(model, c, tensions, wrenches):
    """``(forces, moments, τ)``: the muscles' segment wrenches and the generalised forces ``τ``
    ``(nc,)`` that their moving points add (``GeometryPath::addInEquivalentForces``: the tension
    along each piece dotted with ``∂p/∂c`` of a ``MovingPathPoint`` in its body, a mobility force):
    for the muscles with moving points (never on wrapped paths), ``rᵀT − Jᵀw``, the part of
    their generalised force ``rᵀT`` (`jaxbio.forces._osim_paths.path_moment_arms`, ``−∂l/∂c``) that
    the wrenches ``w`` at the points do not give."""
    from jaxbio.dynamics import inverse_dynamics
    from jaxbio.forces.internals import path_moment_arms

    muscles = model.muscles
    if not muscles.moving:
        return (*wrenches, jnp.zeros_like(c))
    moving = np.zeros(muscles.n_paths, bool)
    moving[[i for i, _ in muscles.moving]] = True
    t = jnp.where(moving, tensions, 0.0)
    w = muscle_path_wrenches_only(model, c, t)
    z = jnp.zeros_like(c)
    jtw = inverse_dynamics(model, c, z, z) - inverse_dynamics(model, c, z, z, w)  # Jᵀw
    return (*wrenches, path_moment_arms(muscles, model, c).T @ t - jtw)


def _actuator_wrenches(model, c, forces):
    """World-frame wrenches ``(forces (n, 3), moments (n, 3))`` on the tree's ``n`` segments of the
    point and torque actuators with ``forces`` ``(na,)`` N / N·m (``model.forces.actuator_names``
    order; the other actuators' entries are not read): a ``PointActuator``'s force along its
    direction at its point, a ``TorqueActuator``'s torque on its first body and the opposite on
    its second (moments about each segment's origin; loads on the ground are dropped)."""
    from jaxbio.forces.internals import on_tree as _on_tree

    F = model.forces
    n = len(model.tree.names)
    q, motion = _on_tree(model, c)
    origin = jnp.concatenate([motion.position, jnp.zeros((1, 3), c.dtype)])
    attitude = jnp.concatenate([motion.attitude, jnp.asarray([[1.0, 0, 0, 0]], c.dtype)])
    index = {name: k for k, name in enumerate(F.actuator_names)}
    out_f, out_m = jnp.zeros((n + 1, 3), c.dtype), jnp.zeros((n + 1, 3), c.dtype)
    pa, ta = F.point_actuators, F.torque_actuators
    if len(pa):
        seg = np.where(np.asarray(pa.segments) < 0, n, pa.segments)
        att, pos = attitude[seg], origin[seg]
        X = jnp.where(jnp.asarray(pa.point_is_global)[:, None], pa.points, pos + quat.rotate(att, pa.points))
        d = jnp.where(jnp.asarray(pa.force_is_global)[:, None], pa.directions, quat.rotate(att, pa.directions))
        f = forces[np.asarray([index[k] for k in pa.names])][:, None] * d
        out_f = out_f.at[seg].add(f)
        out_m = out_m.at[seg].add(jnp.cross(X - pos, f))
    if len(ta):
        sa = np.where(np.asarray(ta.segments_a) < 0, n, ta.segments_a)
        sb = np.where(np.asarray(ta.segments_b) < 0, n, ta.segments_b)
        a = jnp.where(jnp.asarray(ta.torque_is_global)[:, None], ta.axes, quat.rotate(attitude[sa], ta.axes))
        t = forces[np.asarray([index[k] for k in ta.names])][:, None] * a
        out_m = out_m.at[sa].add(t).at[sb].add(-t)
    return out_f[:n], out_m[:n]


def _state_columns(m, table: Table, where: str):
    """``(c, cd)`` ``(T, nc)`` of a states file (module docstring, step 1)."""
    T = table.time.size
    c = np.tile(np.asarray(m.defaults, float), (T, 1))
    cd = np.tile(np.asarray(m.default_speeds, float), (T, 1))
    used, held = set(), []
    for k, n in enumerate(m.coordinate_names):
        joint = m.joints[m.coordinate_joints[k]]
        for out, keys in (
            (c, (f"/jointset/{joint}/{n}/value", f"{joint}/{n}/value", n)),
            (cd, (f"/jointset/{joint}/{n}/speed", f"{joint}/{n}/speed", f"{n}_u")),
        ):
            key = next((x for x in keys if x in table.labels), None)
            if key is None:
                held.append(keys[0])
                continue
            used.add(key)
            x = table.column(key)
            if out is c and table.in_degrees and m.motion_types[k] == "rotational":
                x = np.deg2rad(x)
            out[:, k] = x
    if not used:
        raise ValueError(
            f"{where}: no column is a coordinate or speed of the model ({m.path}): {listing(table.labels, 12)}"
        )
    if held:
        warnings.warn(
            f"{where}: {len(held)} state(s) of the model ({m.path}) have no column and are held at their default "
            f"values: {listing(held, 12)}",
            stacklevel=3,
        )
    other = [x for x in table.labels if x not in used]
    if other:
        warnings.warn(
            f"{where}: {len(other)} column(s) are not read by jaxbio's JointReaction (states other than the "
            f"coordinates' values and speeds): {listing(other, 12)}",
            stacklevel=3,
        )
    return c, cd


def _find_index(time: np.ndarray, t: float) -> int:
    """OpenSim's ``Storage::findIndex``: the last row at or before ``t`` (the first row before the
    data, the last after)."""
    return int(np.clip(np.searchsorted(time, t, side="right") - 1, 0, time.size - 1))


def joint_reaction_tool(
    model,
    *,
    states=None,
    motion=None,
    external_loads=None,
    forces_file=None,
    joint_names: Sequence[str] = ("ALL",),
    on_bodies: Sequence[str] = ("child",),
    in_frames: Sequence[str] = ("ground",),
    lowpass_hz: float | None = None,
    start: float | None = None,
    end: float | None = None,
    step_interval: int = 1,
    dtype=None,
    progress: Callable[[str], None] | None = None,
) -> Table:
    """OpenSim's ``AnalyzeTool`` with a ``JointReaction`` analysis (module docstring).

    - ``model``: an ``.osim`` path or a `jaxbio.Model` read from one (with a setup's
      ``force_set_files`` appended: `jaxbio.io.load_osim`).
    - ``states``: a states ``.sto`` (``states_file``), or ``motion``: a coordinates ``.mot`` /
      ``.sto`` (``coordinates_file``); one of the two.
    - ``external_loads``: an ExternalLoads ``.xml`` (or None); ``forces_file``: a ``.sto`` of the
      actuators' forces (N, N·m; e.g. static optimisation's ``_force.sto``), or None.
    - ``joint_names``, ``on_bodies``, ``in_frames``: the analysis's properties (`read_reaction_frames`).
    - ``lowpass_hz``, ``start``, ``end``: the tool's ``lowpass_cutoff_frequency_for_coordinates``
      (coordinates file only), ``initial_time`` and ``final_time`` (s); ``step_interval``: the
      analysis's.

    Returns a `Table` named ``Joint Reaction Loads`` (``time`` ``(T,)``; nine columns per load).
    ``ValueError`` naming the file or property for bad input, and for a model with forces that
    act at points of bodies (module docstring)."""
    from jaxbio.dynamics import forward_dynamics
    from jaxbio.forces import actuator_matrix, passive_forces
    from jaxbio.tools._static_optimization import _analysis_frames
    from jaxbio.tools._inverse_dynamics import InverseDynamicsInputs, _external, _load_arrays, _prepare, tool_model
    from jaxbio.io.osim import Model

    say = progress or (lambda message: None)
    say("loading the model")
    m = model if isinstance(model, Model) else tool_model(model, dtype)
    where = f"JointReaction on {m.path}"
    if (states is None) == (motion is None):
        raise ValueError(f"{where}: give one of a states file or a coordinates file")
    if isinstance(step_interval, bool) or not isinstance(step_interval, (int, np.integer)) or step_interval < 1:
        raise ValueError(f"step_interval must be a whole number ≥ 1, got {step_interval!r}")
    point = _point_forces(m, muscles=forces_file is None)
    if point:
        raise ValueError(
            f"{where}: forces that act at points of bodies change the reaction loads beyond their generalised "
            f"forces, and jaxbio's JointReaction does not apply them yet: {listing(point, 8)}"
        )
    imported = set(m.muscles.names) if m.muscles is not None else set()
    missing = [f"{t} {n!r}" for t, n in m.forces.not_imported if n not in imported] if m.forces is not None else []
    if missing:
        raise ValueError(f"{where}: forces OpenSim applies are not imported by jaxbio: {', '.join(missing)}")
    frames = read_reaction_frames(m, joint_names, on_bodies, in_frames, where=where)
    dt = m.tree.masses.dtype
    if states is not None:
        table = read_storage(states)
        i0 = _find_index(table.time, -np.inf if start is None else start)
        i1 = _find_index(table.time, np.inf if end is None else end)
        c, cd = _state_columns(m, table, str(states))
        rows = np.arange(i0, i1 + 1)
        keep = rows[(rows % step_interval == 0) | (rows == i0) | (rows == i1)]
        time = table.time[keep]
        arrays, bodies, ff, pf = (np.zeros((time.size, 0, 3)),) * 3, (), (), ()
        if external_loads is not None:
            from jaxbio.tools._external_loads import read_external_loads

            arrays, bodies, ff, pf = _load_arrays(m, read_external_loads(external_loads), time)
        a = lambda x: jnp.asarray(x, dt)
        inputs = InverseDynamicsInputs(
            time=a(time),
            c=a(c[keep]),
            cd=a(cd[keep]),
            cdd=a(np.zeros_like(c[keep])),
            forces=a(arrays[0]),
            torques=a(arrays[1]),
            points=a(arrays[2]),
            coordinate_names=tuple(m.coordinate_names),
            load_bodies=bodies,
            force_frames=ff,
            point_frames=pf,
            labels=(),
        )
    else:
        inputs, p = _prepare(m, motion, external_loads, lowpass_hz, start, end, say, speed_splines=True)
        keep = _analysis_frames(p, int(step_interval))
        inputs = jax.tree_util.tree_map(lambda x: x[keep], inputs)
        time = np.asarray(p.time)[keep]
    names = m.forces.actuator_names if m.forces is not None else ()
    muscle_names = m.muscles.names if m.muscles is not None else ()
    forces = np.zeros((time.size, len(names) + len(muscle_names)))
    if forces_file is not None and (names or muscle_names):
        given = read_storage(forces_file)
        lacking = [n for n in (*muscle_names, *names) if n not in given.labels]
        if lacking and muscle_names:  # OpenSim would take the muscles' forces from their states
            raise ValueError(
                f"{forces_file}: the actuators {listing(lacking, 8)} are not columns; OpenSim would then compute "
                "every muscle's force from its states, which jaxbio's JointReaction does not"
            )
        if lacking:
            warnings.warn(
                f"{forces_file}: the actuators {listing(lacking, 8)} are not columns: the file is not used and "
                "the actuators' forces come from the states (zero controls), as OpenSim does",
                stacklevel=2,
            )
        else:
            forces = np.stack([np.interp(time, given.time, given.column(n)) for n in (*names, *muscle_names)], 1)
    say("computing the reaction loads")
    body_actuators = set(m.forces.point_actuators.names) | set(m.forces.torque_actuators.names) if names else set()
    at_points = np.asarray([n in body_actuators for n in names], bool)

    def frame(x, f):
        q = coordinates.to_tree(m.coordinates, x.c)
        ext = _external(m, q, x)
        tau = passive_forces(m, x.c, x.cd)
        if at_points.any():  # point and torque actuators act on their bodies, not as generalised forces
            fa, ma = _actuator_wrenches(m, x.c, f[: len(names)])
            ext = (fa, ma) if ext is None else (ext[0] + fa, ext[1] + ma)
        if muscle_names:
            fm, mm, tm = muscle_path_wrenches(m, x.c, f[len(names) :])
            ext = (fm, mm) if ext is None else (ext[0] + fm, ext[1] + mm)
            tau = tau + tm
        if names:
            tau = tau + actuator_matrix(m, x.c) @ jnp.where(at_points, 0.0, f[: len(names)])
        cdd = forward_dynamics(m, x.c, x.cd, tau, ext, locked=m.locked)
        return joint_reaction_loads(m, frames, x.c, x.cd, cdd, ext).reshape(-1)

    loads = np.asarray(jax.jit(jax.vmap(frame))(inputs, jnp.asarray(forces, dt)))
    labels = tuple(f"{r}_{s}" for r in frames.labels for s in ("fx", "fy", "fz", "mx", "my", "mz", "px", "py", "pz"))
    description = (
        "\nThis file contains the reaction forces and moments\napplied to the specified body of a joint pair "
        "and expressed  in the specified reference frame.\n\nUnits are S.I. units (seconds, meters, Newtons, ...)"
    )
    return Table(
        time=time, labels=labels, data=loads, in_degrees=False, name="Joint Reaction Loads", description=description
    )
