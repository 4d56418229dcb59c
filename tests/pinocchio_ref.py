"""Pinocchio reference for jaxbio's rigid-body algorithms (float64 numpy, test-only).

``build_pinocchio_model(d)`` builds the multibody described by a jaxbio model dict (the JSON format of
docs/design API.md) as a ``pinocchio.Model``; the ``pin_*`` helpers run Pinocchio's algorithms and
return quantities in jaxbio's conventions so the tests can compare them directly:

- Pinocchio's CRBA (and every algorithm using ``nvSubtree``) assumes that each subtree's velocity
  indices form one contiguous block, i.e. joints added in depth-first pre-order. jaxbio only requires
  parents before children (a breadth-first list is legal), so the joints are added in depth-first
  order and ``model.jaxbio_joint_ids[i]`` is the Pinocchio joint of jaxbio segment ``i``. Every helper
  takes and returns vectors/matrices in jaxbio's segment order (``q[i]`` belongs to segment ``i``);
- the segment frame is Pinocchio's joint frame after the joint motion, ``data.oMi[joint_id]``;
- external wrenches and segment wrenches are world-frame force and moment about the segment origin.

Pinocchio is imported here only; it is a test dependency (``pip install pin``).
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin


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
    axis = np.asarray(joint["axis"], dtype=np.float64)
    axis = axis / np.linalg.norm(axis)
    kind = joint["type"]
    if kind == "revolute":
        return pin.JointModelRevoluteUnaligned(axis)
    if kind == "prismatic":
        return pin.JointModelPrismaticUnaligned(axis)
    raise ValueError(f"unknown joint type {kind!r}")


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


def build_pinocchio_model(d: dict) -> pin.Model:
    """Pinocchio model of a jaxbio model dict.

    Each segment becomes one joint named after it (revolute/prismatic, unaligned axis, normalised)
    placed at ``SE3(R(orientation), origin)`` in its parent's joint frame, carrying the body inertia
    ``Inertia(mass, com, inertia_about_com)`` (COM and tensor in the segment frame).
    ``model.gravity.linear`` is the dict's gravity (default ``(0, 0, -9.81)``). Joints are added in
    depth-first order (see the module docstring); ``model.jaxbio_joint_ids`` (``(n,)`` int) maps
    jaxbio segment ``i`` to its Pinocchio joint id. Use the ``pin_*`` helpers, which apply that map.
    """
    model = pin.Model()
    model.name = str(d.get("name", "jaxbio"))
    index = {}
    for i in depth_first_order(d):
        segment = d["segments"][i]
        name = segment["name"]
        parent = segment.get("parent")
        parent_id = 0 if parent is None else index[parent]
        joint = segment["joint"]
        placement = pin.SE3(
            quaternion_to_matrix(joint.get("orientation", [1.0, 0.0, 0.0, 0.0])),
            np.asarray(joint.get("origin", [0.0, 0.0, 0.0]), dtype=np.float64),
        )
        joint_id = model.addJoint(parent_id, _joint_model(joint), placement, name)
        inertia = pin.Inertia(
            float(segment["mass"]),
            np.asarray(segment["com"], dtype=np.float64),
            np.asarray(segment["inertia"], dtype=np.float64),
        )
        model.appendBodyToJoint(joint_id, inertia, pin.SE3.Identity())
        index[name] = joint_id
    model.gravity.linear = np.asarray(d.get("gravity", [0.0, 0.0, -9.81]), dtype=np.float64)
    model.jaxbio_joint_ids = np.array([index[s["name"]] for s in d["segments"]], dtype=int)
    return model


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def joint_ids(model) -> np.ndarray:
    """Pinocchio joint id of each jaxbio segment (identity order for a model not built here)."""
    ids = getattr(model, "jaxbio_joint_ids", None)
    return np.arange(1, model.njoints) if ids is None else np.asarray(ids)


def _v_index(model) -> np.ndarray:
    """Index into Pinocchio's q/v/tau vectors of each jaxbio segment's coordinate."""
    return np.array([model.joints[int(j)].idx_v for j in joint_ids(model)], dtype=int)


def _to_pin(model, x) -> np.ndarray:
    """A jaxbio-ordered ``(n,)`` vector in Pinocchio's order."""
    out = np.zeros(model.nv)
    out[_v_index(model)] = np.asarray(x, dtype=np.float64)
    return out


def _from_pin(model, x) -> np.ndarray:
    """A Pinocchio-ordered ``(n,)`` vector in jaxbio's order."""
    return np.asarray(x, dtype=np.float64)[_v_index(model)]


def _external_forces(model, data, q, ext_force=None, ext_moment=None):
    """Pinocchio ``fext`` (local joint frame, about the joint origin) from world-frame wrenches.

    ``ext_force``/``ext_moment``: ``(n, 3)`` world-frame force on segment ``i`` and moment about its
    origin. The moment is about the same point Pinocchio uses, so only a rotation is needed.
    Runs ``forwardKinematics`` for ``q`` (jaxbio order).
    """
    n = model.njoints - 1
    force = np.zeros((n, 3)) if ext_force is None else _f64(ext_force).reshape(n, 3)
    moment = np.zeros((n, 3)) if ext_moment is None else _f64(ext_moment).reshape(n, 3)
    pin.forwardKinematics(model, data, _to_pin(model, q))
    fext = pin.StdVec_Force()
    for _ in range(model.njoints):
        fext.append(pin.Force.Zero())
    for i, j in enumerate(joint_ids(model)):
        rotation = data.oMi[int(j)].rotation
        fext[int(j)] = pin.Force(rotation.T @ force[i], rotation.T @ moment[i])
    return fext


def pin_forward_kinematics(model, q):
    """World pose of every segment frame: ``(positions (n, 3), quaternions (n, 4) wxyz, w >= 0)``."""
    data = model.createData()
    pin.forwardKinematics(model, data, _to_pin(model, q))
    ids = joint_ids(model)
    positions = np.array([data.oMi[int(j)].translation for j in ids]).reshape(len(ids), 3)
    quaternions = np.array([matrix_to_quaternion(data.oMi[int(j)].rotation) for j in ids])
    return positions, quaternions.reshape(len(ids), 4)


def pin_rotations(model, q) -> np.ndarray:
    """World rotation matrices of the segment frames, ``(n, 3, 3)``."""
    data = model.createData()
    pin.forwardKinematics(model, data, _to_pin(model, q))
    return np.array([data.oMi[int(j)].rotation for j in joint_ids(model)])


def pin_inverse_dynamics(model, q, qd, qdd, ext_force=None, ext_moment=None) -> np.ndarray:
    """``tau (n,)`` by RNEA; external wrenches as in ``_external_forces`` (world frame)."""
    data = model.createData()
    fext = _external_forces(model, data, q, ext_force, ext_moment)
    tau = pin.rnea(model, data, _to_pin(model, q), _to_pin(model, qd), _to_pin(model, qdd), fext)
    return _from_pin(model, tau)


def pin_segment_wrenches(model, q, qd, qdd, ext_force=None, ext_moment=None):
    """Wrench each segment receives from its parent through its joint.

    After RNEA, ``data.f[int(j)]`` is the spatial force transmitted from the parent to body ``j``, in the
    joint frame, about the joint-frame origin. Returns world-frame ``(forces (n, 3), moments (n, 3))``,
    moments about the segment origin.
    """
    data = model.createData()
    fext = _external_forces(model, data, q, ext_force, ext_moment)
    pin.rnea(model, data, _to_pin(model, q), _to_pin(model, qd), _to_pin(model, qdd), fext)
    ids = joint_ids(model)
    forces = np.array([data.oMi[int(j)].rotation @ data.f[int(j)].linear for j in ids]).reshape(len(ids), 3)
    moments = np.array([data.oMi[int(j)].rotation @ data.f[int(j)].angular for j in ids]).reshape(len(ids), 3)
    return forces, moments


def pin_mass_matrix(model, q) -> np.ndarray:
    """``M(q) (n, n)`` by CRBA (Pinocchio fills the upper triangle; symmetrised here)."""
    data = model.createData()
    mass = np.array(pin.crba(model, data, _to_pin(model, q))).reshape(model.nv, model.nv)
    mass = np.triu(mass) + np.triu(mass, 1).T
    index = _v_index(model)
    return mass[np.ix_(index, index)]


def pin_bias_forces(model, q, qd) -> np.ndarray:
    """``C(q, q̇) q̇ + g(q) (n,)``, so ``M q̈ + bias = tau``."""
    data = model.createData()
    return _from_pin(model, pin.nonLinearEffects(model, data, _to_pin(model, q), _to_pin(model, qd)))


def pin_gravity_forces(model, q) -> np.ndarray:
    """``g(q) (n,)``: generalised gravity on the left side of ``M q̈ + C q̇ + g = tau``."""
    data = model.createData()
    return _from_pin(model, pin.computeGeneralizedGravity(model, data, _to_pin(model, q)))


def pin_forward_dynamics(model, q, qd, tau, ext_force=None, ext_moment=None) -> np.ndarray:
    """``q̈ (n,)`` by ABA with world-frame external wrenches (converted to Pinocchio's local fext)."""
    data = model.createData()
    fext = _external_forces(model, data, q, ext_force, ext_moment)
    qdd = pin.aba(model, data, _to_pin(model, q), _to_pin(model, qd), _to_pin(model, tau), fext)
    return _from_pin(model, qdd)


def pin_kinetic_energy(model, q, qd) -> float:
    """``T = ½ q̇ᵀ M q̇`` (J)."""
    data = model.createData()
    pin.forwardKinematics(model, data, _to_pin(model, q), _to_pin(model, qd))
    return float(pin.computeKineticEnergy(model, data))


def pin_potential_energy(model, q) -> float:
    """``V = -Σ m_i g · c_i`` (J), zero at the world origin.

    Pinocchio's ``computePotentialEnergy`` uses exactly this convention (checked against the explicit
    sum in tests/test_pinocchio.py).
    """
    data = model.createData()
    return float(pin.computePotentialEnergy(model, data, _to_pin(model, q)))


def pin_center_of_mass(model, q) -> np.ndarray:
    """Whole-body centre of mass, world frame, ``(3,)`` m."""
    data = model.createData()
    return np.array(pin.centerOfMass(model, data, _to_pin(model, q)))


def pin_segment_coms(model, q) -> np.ndarray:
    """World position of each segment's COM, ``(n, 3)`` (for the explicit potential-energy sum)."""
    data = model.createData()
    pin.forwardKinematics(model, data, _to_pin(model, q))
    return np.array([data.oMi[int(j)].act(model.inertias[int(j)].lever) for j in joint_ids(model)])


def pin_jacobian(model, q, segment: int) -> np.ndarray:
    """``(6, n)`` world-aligned Jacobian of segment ``segment``'s origin: rows linear velocity of the
    origin, then angular velocity, world frame; columns in jaxbio order."""
    data = model.createData()
    pin.computeJointJacobians(model, data, _to_pin(model, q))
    jac = pin.getJointJacobian(model, data, int(joint_ids(model)[segment]), pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)
    return np.asarray(jac).reshape(6, model.nv)[:, _v_index(model)]
