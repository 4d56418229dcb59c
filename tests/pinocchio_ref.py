"""Pinocchio reference for jaxbio's rigid-body algorithms (float64 numpy, test-only).

``build_pinocchio_model(d)`` builds the multibody described by a jaxbio model dict (the JSON format of
docs/design API.md) as a ``pinocchio.Model``; the ``pin_*`` helpers run Pinocchio's algorithms and
take and return quantities in jaxbio's conventions so the tests can compare them directly.

Joint types (jaxbio → Pinocchio):

- ``"revolute"`` / ``"prismatic"``: ``JointModelRevoluteUnaligned`` / ``JointModelPrismaticUnaligned``
  about/along the normalised axis;
- ``"spherical"``: ``JointModelSpherical``. jaxbio ``q = (qw, qx, qy, qz)``, Pinocchio stores
  ``(qx, qy, qz, qw)``; ``v = ω`` in the child (segment) frame in both;
- ``"free"``: ``JointModelFreeFlyer``. jaxbio ``q = (x, y, z, qw, qx, qy, qz)``, Pinocchio
  ``(x, y, z, qx, qy, qz, qw)``; the translation is in the joint placement frame and
  ``v = (v_origin, ω)`` in the child frame in both (Pinocchio's FreeFlyer motion subspace is the
  identity in the local frame), so the generalised force is the segment-frame ``(force, moment)``
  about the segment origin;
- ``"fixed"``: no Pinocchio joint. The segment's body is appended to its *supporting joint* (the
  nearest ancestor with a joint; the universe, joint 0, for a chain of fixed segments hanging from the
  world) with ``appendBodyToJoint`` at its placement in that joint's frame, and gets a
  ``FrameType.BODY`` frame at the same placement.

Every segment (fixed or not) has one ``BODY`` frame named after it whose pose is the segment frame:
for a segment with a joint it sits at the identity of its joint frame after the joint motion
(``data.oMi[joint]``), for a fixed one at its composed placement. ``model.jaxbio`` (a `JaxbioLayout`)
keeps the maps: supporting joint and frame of each segment, and the permutations between jaxbio's
``q``/``v`` (segment order, quaternion w first) and Pinocchio's (depth-first joint order, w last).

Depth-first order: Pinocchio's CRBA (and every algorithm using ``nvSubtree``) assumes that each
subtree's velocity indices form one contiguous block, i.e. joints added in depth-first pre-order.
jaxbio only requires parents before children (a breadth-first list is legal), so the segments are
visited in depth-first pre-order (which stays a pre-order of the joints once fixed segments are
merged into their supporting joint).

Two things Pinocchio does not do for fixed segments, done here:

- bodies fixed to the world (supporting joint 0) are ignored by Pinocchio's centre of mass and
  potential energy (they loop over joints ``1..``); `pin_center_of_mass` and `pin_potential_energy`
  add them (they contribute nothing to ``M``, ``tau``, or the kinetic energy);
- ``data.f[joint]`` after RNEA is the wrench transmitted into a joint's whole rigid body (the segment
  and its fixed descendants). The wrench a fixed segment receives from its parent is its own
  Newton–Euler wrench minus the external wrench on it plus what it passes on to its children
  (`pin_segment_wrenches`).

External wrenches and segment wrenches are world-frame force and moment about the segment origin.
Pinocchio is imported here only; it is a test dependency (``pip install pin``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from tests._models import JOINT_NQ, JOINT_NV, coordinate_offsets


def quaternion_to_matrix(quaternion) -> np.ndarray:
    """Rotation matrix of a unit quaternion ``(w, x, y, z)``; active: ``v_world = R @ v_body``."""
    w, x, y, z = np.asarray(quaternion, dtype=np.float64) / np.linalg.norm(quaternion)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrix_to_quaternion(rotation) -> np.ndarray:
    """Unit quaternion ``(w, x, y, z)`` with ``w >= 0`` of a rotation matrix (via Pinocchio)."""
    quat = pin.Quaternion(np.asarray(rotation, dtype=np.float64))
    out = np.array([quat.w, quat.x, quat.y, quat.z])
    out /= np.linalg.norm(out)
    return -out if out[0] < 0 else out


def _joint_model(joint: dict):
    kind = joint["type"]
    if kind == "spherical":
        return pin.JointModelSpherical()
    if kind == "free":
        return pin.JointModelFreeFlyer()
    if kind not in ("revolute", "prismatic"):
        raise ValueError(f"unknown joint type {kind!r}")
    axis = np.asarray(joint["axis"], dtype=np.float64)
    axis = axis / np.linalg.norm(axis)
    return pin.JointModelRevoluteUnaligned(axis) if kind == "revolute" else pin.JointModelPrismaticUnaligned(axis)


def depth_first_order(d: dict) -> list[int]:
    """Segment indices of a jaxbio model dict in depth-first pre-order (children in file order)."""
    segments = d["segments"]
    names = [s["name"] for s in segments]
    children: dict[int, list[int]] = {-1: []}
    for i, s in enumerate(segments):
        children[i] = []
        parent = s.get("parent")
        children[-1 if parent is None else names.index(parent)].append(i)
    order: list[int] = []
    stack = list(reversed(children[-1]))
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(reversed(children[i]))
    return order


@dataclass(frozen=True)
class JaxbioLayout:
    """How a jaxbio model maps onto the Pinocchio model built by `build_pinocchio_model`.

    Per segment ``i`` (jaxbio order): ``joint_types[i]``, ``parents[i]`` (``-1`` world),
    ``joint_ids[i]`` (its Pinocchio joint; for a fixed segment the supporting joint, 0 = universe),
    ``frame_ids[i]`` (its ``BODY`` frame), ``placements[i]`` (``SE3``: segment frame in the supporting
    joint's frame, identity for a segment with a joint), ``inertias[i]`` (``pin.Inertia`` in the
    segment frame). ``q_index[k]`` / ``v_index[k]``: position in Pinocchio's ``q`` / ``v`` of jaxbio's
    ``q[k]`` / ``v[k]``, so ``q_pin[q_index] = q_jaxbio`` and ``v_jaxbio = v_pin[v_index]``.
    ``q_start``/``v_start``: jaxbio's offsets, ``n_segments + 1`` long (the last is nq/nv).
    """

    joint_types: tuple[str, ...]
    parents: tuple[int, ...]
    joint_ids: np.ndarray
    frame_ids: np.ndarray
    placements: tuple
    inertias: tuple
    q_index: np.ndarray
    v_index: np.ndarray
    q_start: tuple[int, ...]
    v_start: tuple[int, ...]

    @property
    def n_segments(self) -> int:
        return len(self.joint_types)

    @property
    def nq(self) -> int:
        return self.q_start[-1]

    @property
    def nv(self) -> int:
        return self.v_start[-1]

    @property
    def children(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.parents]
        for i, p in enumerate(self.parents):
            if p >= 0:
                out[p].append(i)
        return out


def build_pinocchio_model(d: dict) -> pin.Model:
    """Pinocchio model of a jaxbio model dict.

    Each segment with a joint becomes one Pinocchio joint named after it, placed at
    ``SE3(R(orientation), origin)`` in its supporting parent joint's frame (composed with the
    placements of fixed segments in between), carrying the body inertia
    ``Inertia(mass, com, inertia_about_com)`` (COM and tensor in the segment frame; mass 0 and
    positive semi-definite tensors allowed). Fixed segments: see the module docstring.
    ``model.gravity.linear`` is the dict's gravity (default ``(0, 0, -9.81)``). ``model.jaxbio``
    (`JaxbioLayout`) and ``model.jaxbio_joint_ids`` (= ``model.jaxbio.joint_ids``) map segments to
    joints/frames and jaxbio's vectors to Pinocchio's; use the ``pin_*`` helpers, which apply them.
    """
    segments = d["segments"]
    names = [s["name"] for s in segments]
    n = len(segments)
    types = tuple(s["joint"]["type"] for s in segments)
    parents = tuple(-1 if s.get("parent") is None else names.index(s["parent"]) for s in segments)
    q_start, v_start = coordinate_offsets(types)

    model = pin.Model()
    model.name = str(d.get("name", "jaxbio"))
    joint_ids = np.zeros(n, dtype=int)
    frame_ids = np.zeros(n, dtype=int)
    placements: list = [None] * n
    inertias: list = [None] * n
    for i in depth_first_order(d):
        segment = segments[i]
        p = parents[i]
        joint = segment["joint"]
        placement = pin.SE3(
            quaternion_to_matrix(joint.get("orientation", [1.0, 0.0, 0.0, 0.0])),
            np.asarray(joint.get("origin", [0.0, 0.0, 0.0]), dtype=np.float64),
        )
        # the parent segment's frame in its supporting joint's frame (identity for the world)
        parent_joint = 0 if p < 0 else int(joint_ids[p])
        parent_frame = 0 if p < 0 else int(frame_ids[p])
        in_parent_joint = placement if p < 0 else placements[p] * placement
        inertia = pin.Inertia(
            float(segment["mass"]),
            np.asarray(segment["com"], dtype=np.float64),
            np.asarray(segment["inertia"], dtype=np.float64),
        )
        if types[i] == "fixed":
            joint_id = parent_joint
            body_placement = in_parent_joint
            if joint_id > 0:  # the universe's inertia is ignored by every algorithm: see the docstring
                model.appendBodyToJoint(joint_id, inertia, body_placement)
        else:
            joint_id = model.addJoint(parent_joint, _joint_model(joint), in_parent_joint, segment["name"])
            body_placement = pin.SE3.Identity()
            model.appendBodyToJoint(joint_id, inertia, body_placement)
        frame_ids[i] = model.addFrame(
            pin.Frame(segment["name"], joint_id, parent_frame, body_placement, pin.FrameType.BODY), False
        )
        joint_ids[i] = joint_id
        placements[i] = body_placement
        inertias[i] = inertia
    model.gravity.linear = np.asarray(d.get("gravity", [0.0, 0.0, -9.81]), dtype=np.float64)

    q_index = np.zeros(q_start[-1], dtype=int)
    v_index = np.zeros(v_start[-1], dtype=int)
    for i, t in enumerate(types):
        if t == "fixed":
            continue
        jm = model.joints[int(joint_ids[i])]
        assert (jm.nq, jm.nv) == (JOINT_NQ[t], JOINT_NV[t]), (t, jm.nq, jm.nv)
        iq, iv = jm.idx_q, jm.idx_v
        qs, vs = q_start[i], v_start[i]
        if t in ("revolute", "prismatic"):
            order = [0]
        elif t == "spherical":  # jaxbio (w, x, y, z) -> Pinocchio (x, y, z, w)
            order = [3, 0, 1, 2]
        else:  # free: (x, y, z, w, qx, qy, qz) -> (x, y, z, qx, qy, qz, w)
            order = [0, 1, 2, 6, 3, 4, 5]
        q_index[qs : qs + len(order)] = iq + np.asarray(order)
        v_index[vs : vs + jm.nv] = iv + np.arange(jm.nv)
    assert sorted(q_index.tolist()) == list(range(model.nq)), "q map is not a permutation"
    assert sorted(v_index.tolist()) == list(range(model.nv)), "v map is not a permutation"

    model.jaxbio = JaxbioLayout(
        types, parents, joint_ids, frame_ids, tuple(placements), tuple(inertias), q_index, v_index, q_start, v_start
    )
    model.jaxbio_joint_ids = joint_ids
    return model


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def layout(model) -> JaxbioLayout:
    """The `JaxbioLayout` of a model built by `build_pinocchio_model`."""
    out = getattr(model, "jaxbio", None)
    if out is None:
        raise ValueError("the pin_* helpers take a model built by build_pinocchio_model (it has no jaxbio layout)")
    return out


def joint_ids(model) -> np.ndarray:
    """Pinocchio joint id of each jaxbio segment (the supporting joint for a fixed segment; 0 for the
    world); identity order for a model not built here."""
    ids = getattr(model, "jaxbio_joint_ids", None)
    return np.arange(1, model.njoints) if ids is None else np.asarray(ids)


def _scatter(index, size: int, x) -> np.ndarray:
    """``out[..., index] = x`` for ``x`` ``(..., size)`` (one vector, or rows of states)."""
    x = _f64(x)
    x = x if x.ndim > 1 and x.shape[-1] == size else x.reshape(size)
    out = np.zeros(x.shape[:-1] + (size,))
    out[..., index] = x
    return out


def q_to_pin(model, q) -> np.ndarray:
    """jaxbio ``q`` (``nq``, segment order, quaternions w first; or ``(B, nq)`` rows) → Pinocchio's
    ``q``."""
    return _scatter(layout(model).q_index, model.nq, q)


def q_from_pin(model, q) -> np.ndarray:
    """Pinocchio's ``q`` (or ``(B, nq)`` rows) → jaxbio ``q``."""
    return _f64(q)[..., layout(model).q_index]


def v_to_pin(model, v) -> np.ndarray:
    """A jaxbio ``nv`` vector (velocity, acceleration, generalised force; or ``(B, nv)`` rows) in
    Pinocchio's order."""
    return _scatter(layout(model).v_index, model.nv, v)


def v_from_pin(model, v) -> np.ndarray:
    """A Pinocchio-ordered ``nv`` vector (or ``(B, nv)`` rows) in jaxbio's order."""
    return _f64(v)[..., layout(model).v_index]


def matrix_from_pin(model, m) -> np.ndarray:
    """A Pinocchio ``(nv, nv)`` matrix (rows and columns in Pinocchio's order) in jaxbio's order."""
    index = layout(model).v_index
    return _f64(m).reshape(model.nv, model.nv)[np.ix_(index, index)]


def _v_index(model) -> np.ndarray:
    """Index into Pinocchio's v/tau vectors of each jaxbio velocity coordinate (for one-DOF joints
    also the index into ``q``)."""
    return layout(model).v_index


def _to_pin(model, x) -> np.ndarray:
    """A jaxbio-ordered ``q`` (``nq`` long) or ``nv`` vector in Pinocchio's order; the two coincide
    unless the model has quaternions, and then ``nq != nv`` tells them apart."""
    x = _f64(x)
    return v_to_pin(model, x) if x.size == model.nv else q_to_pin(model, x)


def _from_pin(model, x) -> np.ndarray:
    """A Pinocchio-ordered ``nv`` vector in jaxbio's order."""
    return v_from_pin(model, x)


def _frame_poses(model, data) -> list:
    """``oMf`` of every segment's frame (after `pin.forwardKinematics`), jaxbio order."""
    pin.updateFramePlacements(model, data)
    return [data.oMf[int(f)] for f in layout(model).frame_ids]


def _external_forces(model, data, q, ext_force=None, ext_moment=None):
    """Pinocchio ``fext`` (local joint frame, about the joint origin) from world-frame wrenches.

    ``ext_force``/``ext_moment``: ``(n_segments, 3)`` world-frame force on segment ``i`` and moment
    about its origin. Each is moved to the supporting joint's origin (``m + (p_i - o_j) × f``),
    rotated into its frame and summed; wrenches on segments fixed to the world are dropped (the
    ground takes them). Runs ``forwardKinematics`` for ``q`` (jaxbio order).
    """
    lay = layout(model)
    n = lay.n_segments
    force = np.zeros((n, 3)) if ext_force is None else _f64(ext_force).reshape(n, 3)
    moment = np.zeros((n, 3)) if ext_moment is None else _f64(ext_moment).reshape(n, 3)
    pin.forwardKinematics(model, data, q_to_pin(model, q))
    poses = _frame_poses(model, data)
    fext = pin.StdVec_Force()
    for _ in range(model.njoints):
        fext.append(pin.Force.Zero())
    for i, j in enumerate(lay.joint_ids):
        j = int(j)
        if j == 0:
            continue
        joint_pose = data.oMi[j]
        about_joint = moment[i] + np.cross(poses[i].translation - joint_pose.translation, force[i])
        fext[j] = fext[j] + pin.Force(joint_pose.rotation.T @ force[i], joint_pose.rotation.T @ about_joint)
    return fext


def pin_forward_kinematics(model, q):
    """World pose of every segment frame (fixed ones included):
    ``(positions (n, 3), quaternions (n, 4) wxyz, w >= 0)``."""
    data = model.createData()
    pin.forwardKinematics(model, data, q_to_pin(model, q))
    poses = _frame_poses(model, data)
    positions = np.array([m.translation for m in poses]).reshape(len(poses), 3)
    quaternions = np.array([matrix_to_quaternion(m.rotation) for m in poses]).reshape(len(poses), 4)
    return positions, quaternions


def pin_rotations(model, q) -> np.ndarray:
    """World rotation matrices of the segment frames, ``(n, 3, 3)``."""
    data = model.createData()
    pin.forwardKinematics(model, data, q_to_pin(model, q))
    return np.array([m.rotation for m in _frame_poses(model, data)])


def pin_segment_velocities(model, q, qd):
    """World-frame linear velocity of every segment origin and angular velocity, ``(n, 3)`` each."""
    data = model.createData()
    pin.forwardKinematics(model, data, q_to_pin(model, q), v_to_pin(model, qd))
    pin.updateFramePlacements(model, data)
    frame = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
    twists = [pin.getFrameVelocity(model, data, int(f), frame) for f in layout(model).frame_ids]
    return np.array([t.linear for t in twists]), np.array([t.angular for t in twists])


def pin_inverse_dynamics(model, q, qd, qdd, ext_force=None, ext_moment=None) -> np.ndarray:
    """``tau (nv,)`` by RNEA; external wrenches as in ``_external_forces`` (world frame)."""
    data = model.createData()
    fext = _external_forces(model, data, q, ext_force, ext_moment)
    tau = pin.rnea(model, data, q_to_pin(model, q), v_to_pin(model, qd), v_to_pin(model, qdd), fext)
    return v_from_pin(model, tau)


def _newton_euler(model, data, i, gravity) -> pin.Force:
    """World-frame wrench (about the world origin) that segment ``i``'s body needs for its motion:
    ``I a + v ×* I v - I g`` in its frame, after ``forwardKinematics(q, v, a)``."""
    lay = layout(model)
    j = int(lay.joint_ids[i])
    x = lay.placements[i]
    pose = data.oMi[j] * x
    v = x.actInv(data.v[j])
    a = x.actInv(data.a[j])
    g = pin.Motion(pose.rotation.T @ gravity, np.zeros(3))
    inertia = lay.inertias[i]
    return pose.act(inertia * (a - g) + v.cross(inertia * v))


def pin_segment_wrenches(model, q, qd, qdd, ext_force=None, ext_moment=None, *, method: str = "rnea"):
    """Wrench each segment receives from its parent through its joint.

    Returns world-frame ``(forces (n, 3), moments (n, 3))``, moments about the segment origin.

    ``method="rnea"``: for a segment with a joint, ``data.f[joint]`` after Pinocchio's RNEA (the
    spatial force transmitted from the parent, in the joint frame, about its origin, which is the
    segment origin); for a fixed segment, its own Newton–Euler wrench minus the external wrench on it
    plus the wrenches its children receive from it (children before parents).
    ``method="newton_euler"``: that recursion for every segment (to check it against RNEA).
    """
    if method not in ("rnea", "newton_euler"):
        raise ValueError(f"unknown method {method!r}")
    lay = layout(model)
    n = lay.n_segments
    force = np.zeros((n, 3)) if ext_force is None else _f64(ext_force).reshape(n, 3)
    moment = np.zeros((n, 3)) if ext_moment is None else _f64(ext_moment).reshape(n, 3)
    data = model.createData()
    fext = _external_forces(model, data, q, force, moment)
    pin.rnea(model, data, q_to_pin(model, q), v_to_pin(model, qd), v_to_pin(model, qdd), fext)
    transmitted = [pin.Force(f) for f in data.f]  # copies: forwardKinematics below leaves data.f alone

    kin = model.createData()
    pin.forwardKinematics(model, kin, q_to_pin(model, q), v_to_pin(model, qd), v_to_pin(model, qdd))
    poses = _frame_poses(model, kin)
    gravity = np.asarray(model.gravity.linear)
    children = lay.children
    wrench: list = [None] * n  # world frame, about the world origin
    for i in reversed(range(n)):  # children come after parents
        if method == "rnea" and lay.joint_types[i] != "fixed":
            wrench[i] = kin.oMi[int(lay.joint_ids[i])].act(transmitted[int(lay.joint_ids[i])])
            continue
        p = poses[i].translation
        total = _newton_euler(model, kin, i, gravity) - pin.Force(force[i], moment[i] + np.cross(p, force[i]))
        for c in children[i]:
            total = total + wrench[c]
        wrench[i] = total
    forces = np.array([w.linear for w in wrench]).reshape(n, 3)
    moments = np.array([w.angular - np.cross(poses[i].translation, w.linear) for i, w in enumerate(wrench)])
    return forces, moments.reshape(n, 3)


def pin_mass_matrix(model, q) -> np.ndarray:
    """``M(q) (nv, nv)`` by CRBA (Pinocchio fills the upper triangle; symmetrised here)."""
    data = model.createData()
    mass = np.array(pin.crba(model, data, q_to_pin(model, q))).reshape(model.nv, model.nv)
    mass = np.triu(mass) + np.triu(mass, 1).T
    return matrix_from_pin(model, mass)


def pin_bias_forces(model, q, qd) -> np.ndarray:
    """``C(q, q̇) q̇ + g(q) (nv,)``, so ``M q̈ + bias = tau``."""
    data = model.createData()
    return v_from_pin(model, pin.nonLinearEffects(model, data, q_to_pin(model, q), v_to_pin(model, qd)))


def pin_gravity_forces(model, q) -> np.ndarray:
    """``g(q) (nv,)``: generalised gravity on the left side of ``M q̈ + C q̇ + g = tau``."""
    data = model.createData()
    return v_from_pin(model, pin.computeGeneralizedGravity(model, data, q_to_pin(model, q)))


def pin_forward_dynamics(model, q, qd, tau, ext_force=None, ext_moment=None) -> np.ndarray:
    """``q̈ (nv,)`` by ABA with world-frame external wrenches (converted to Pinocchio's local fext)."""
    data = model.createData()
    fext = _external_forces(model, data, q, ext_force, ext_moment)
    qdd = pin.aba(model, data, q_to_pin(model, q), v_to_pin(model, qd), v_to_pin(model, tau), fext)
    return v_from_pin(model, qdd)


def pin_kinetic_energy(model, q, qd) -> float:
    """``T = ½ vᵀ M v`` (J)."""
    data = model.createData()
    pin.forwardKinematics(model, data, q_to_pin(model, q), v_to_pin(model, qd))
    return float(pin.computeKineticEnergy(model, data))


def _world_fixed(model) -> list[int]:
    """Segments whose supporting joint is the universe (fixed to the world)."""
    return [i for i, j in enumerate(layout(model).joint_ids) if int(j) == 0]


def pin_potential_energy(model, q) -> float:
    """``V = -Σ m_i g · c_i`` (J), zero at the world origin.

    Pinocchio's ``computePotentialEnergy`` uses exactly this convention (checked against the explicit
    sum in tests/dynamics/test_pinocchio.py); segments fixed to the world are added here.
    """
    data = model.createData()
    energy = float(pin.computePotentialEnergy(model, data, q_to_pin(model, q)))
    fixed = _world_fixed(model)
    if fixed:
        coms = pin_segment_coms(model, q)
        gravity = np.asarray(model.gravity.linear)
        energy -= sum(layout(model).inertias[i].mass * float(gravity @ coms[i]) for i in fixed)
    return energy


def pin_center_of_mass(model, q) -> np.ndarray:
    """Whole-body centre of mass, world frame, ``(3,)`` m (segments fixed to the world included)."""
    data = model.createData()
    com = np.array(pin.centerOfMass(model, data, q_to_pin(model, q), False))
    fixed = _world_fixed(model)
    if not fixed:
        return com
    mass = float(data.mass[0])
    coms = pin_segment_coms(model, q)
    moment = mass * com if mass > 0 else np.zeros(3)
    for i in fixed:
        m = layout(model).inertias[i].mass
        moment = moment + m * coms[i]
        mass += m
    return moment / mass


def pin_segment_coms(model, q) -> np.ndarray:
    """World position of each segment's COM, ``(n, 3)`` (for the explicit potential-energy sum)."""
    data = model.createData()
    pin.forwardKinematics(model, data, q_to_pin(model, q))
    poses = _frame_poses(model, data)
    return np.array([m.act(inertia.lever) for m, inertia in zip(poses, layout(model).inertias)])


def pin_jacobian(model, q, segment: int) -> np.ndarray:
    """``(6, nv)`` world-aligned Jacobian of segment ``segment``'s origin: rows linear velocity of the
    origin, then angular velocity, world frame; columns in jaxbio order."""
    data = model.createData()
    pin.computeJointJacobians(model, data, q_to_pin(model, q))
    pin.updateFramePlacements(model, data)
    frame = int(layout(model).frame_ids[segment])
    jac = pin.getFrameJacobian(model, data, frame, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
    return np.asarray(jac).reshape(6, model.nv)[:, layout(model).v_index]


def pin_integrate(model, q, v) -> np.ndarray:
    """``q ⊕ v`` by ``pin.integrate`` (jaxbio order and quaternion convention)."""
    return q_from_pin(model, pin.integrate(model, q_to_pin(model, q), v_to_pin(model, v)))


def pin_difference(model, q0, q1) -> np.ndarray:
    """``v`` with ``q0 ⊕ v = q1`` by ``pin.difference`` (jaxbio order)."""
    return v_from_pin(model, pin.difference(model, q_to_pin(model, q0), q_to_pin(model, q1)))
