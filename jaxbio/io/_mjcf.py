"""A `SegmentTree` as a MuJoCo model (MJCF), and states and forces between the two conventions.

`to_mjcf(tree)` writes the tree as MJCF text that ``mujoco.MjModel.from_xml_string`` compiles
(and ``mujoco.mjx.put_model`` puts on a device): one ``<body>`` per segment (a chain of
massless hinges merged into one body with several joints, see `to_mjcf`), nested as the tree,
placed at the joint's ``origin`` and ``orientation`` in its parent, with the segment's mass, COM
and inertia about the COM (``fullinertia``, segment frame) and its joint at the body frame's
origin — ``hinge`` (revolute), ``slide`` (prismatic), ``ball`` (spherical), ``free`` (free, root
segments only: MuJoCo allows no other) or none (fixed). No geoms, no contacts, no damping or
armature, MuJoCo's default options otherwise, and the tree's gravity. MuJoCo's inverse dynamics
(``mj_inverse``) of that model then equals `jaxbio.inverse_dynamics` to round-off (about 1e-15
of the largest torque on the shipped models; `tests/io/test_mjcf.py` allows 1e-10).

MuJoCo numbers its bodies depth-first (the XML's nesting), jaxbio in its own parent-first order,
and the two differ in one convention, the free joint's: MuJoCo's ``qpos`` is the world position
and orientation of the body, its ``qvel`` the origin's velocity in the *world* frame then ω in
the body frame, ``qacc`` their time derivatives; jaxbio's are the translation in the joint frame,
and ``v`` and ω both in the segment frame (Pinocchio's FreeFlyer). `to_mujoco_state` and
`from_mujoco_force` translate one state (`jax.vmap` them for a batch); both are jnp functions of
the tree, so they run under `jax.jit` and inside an MJX pipeline. Ball joints need no
translation: both write ``(w, x, y, z)`` and ω in the segment frame.
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

import jax.numpy as jnp
import numpy as np

from jaxbio import quaternion
from jaxbio._topology import children, depth_first
from jaxbio.tree import JOINT_NQ, JOINT_NV, SegmentTree

_MJ_JOINT = {"revolute": "hinge", "prismatic": "slide", "spherical": "ball", "free": "free"}


def _free_world(tree: SegmentTree, i: int, q):
    """World orientation (unit quaternion) of free root ``i`` at configuration ``q``: the joint
    frame's orientation, then the joint's own quaternion."""
    qs = tree.q_start[i]
    return quaternion.multiply(tree.orientations[i], q[qs + 3 : qs + 7])


def _numbers(x) -> str:
    return " ".join(repr(float(v)) for v in np.ravel(x))


def _check(tree: SegmentTree, what: str) -> None:
    if not isinstance(tree, SegmentTree):
        raise TypeError(f"{what}: expected a jaxbio.SegmentTree, got {type(tree).__name__}")
    tree.check_unbatched()
    for i, t in enumerate(tree.joint_types):
        if t == "free" and tree.parents[i] >= 0:
            raise ValueError(
                f"{what}: segment {tree.names[i]!r} has a free joint below segment "
                f"{tree.names[tree.parents[i]]!r}; MuJoCo allows free joints only on bodies of the world"
            )


def _merges(tree: SegmentTree, arr: dict, i: int) -> int | None:
    """The child that joins segment ``i``'s MuJoCo body, or None: ``i`` is massless with one
    child, and that child's joint is a hinge, a slide or fixed (see `to_mjcf`)."""
    kids = children(tree.parents)[i]
    if len(kids) != 1 or tree.joint_types[i] == "free" or arr["masses"][i] != 0.0 or np.any(arr["inertias"][i]):
        return None
    return kids[0] if tree.joint_types[kids[0]] in ("revolute", "prismatic", "fixed") else None


def to_mjcf(tree: SegmentTree) -> str:
    """The tree as MJCF text (see the module docstring for the mapping).

    MuJoCo refuses massless bodies that move. The usual massless segments of a biomechanical
    model, a chain of hinges that makes up one anatomical joint (arm7's shoulder, a planar
    model's base), become one MuJoCo body with several joints: a massless segment with one
    child whose joint is a hinge, a slide or fixed is merged with that child, each joint placed
    (``pos``, ``axis``) where the chain puts it, and what follows (the last segment's COM and
    inertia, its children's placements) expressed in the merged body's frame. The dynamics are
    the same; MuJoCo's joint order is still jaxbio's segment order, depth first. A massless
    segment that moves and cannot be merged is left to MuJoCo's compiler to refuse.

    Numbers are written to round-trip float64 exactly. Joint names are the segment names; a body
    is named after its segment, a merged chain after its last segment (the one with the mass).
    Raises `ValueError` for a free joint below another segment (MuJoCo allows none).
    """
    _check(tree, "to_mjcf")
    arr = {
        k: np.asarray(getattr(tree, k), dtype=np.float64)
        for k in ("axes", "origins", "orientations", "masses", "coms", "inertias", "gravity")
    }
    kids = children(tree.parents)

    def body(i: int, placement: tuple, indent: str) -> list[str]:
        inner = indent + "  "
        # the chain merged into this body; (t, r): the current segment's joint frame in the body frame
        t, r, k = np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]), i
        joints = []
        while True:
            kind = tree.joint_types[k]
            axis = quaternion.to_matrix(r) @ arr["axes"][k]
            if kind in ("revolute", "prismatic"):
                joints.append(
                    f'{inner}<joint name={quoteattr(tree.names[k])} type="{_MJ_JOINT[kind]}" '
                    f'pos="{_numbers(t)}" axis="{_numbers(axis)}"/>'
                )
            elif kind != "fixed":
                joints.append(f'{inner}<joint name={quoteattr(tree.names[k])} type="{_MJ_JOINT[kind]}"/>')
            nxt = _merges(tree, arr, k)
            if nxt is None:
                break
            k = nxt
            t, r = t + quaternion.to_matrix(r) @ arr["origins"][k], quaternion.multiply(r, arr["orientations"][k])
        pos, quat = placement
        lines = [f'{indent}<body name={quoteattr(tree.names[k])} pos="{_numbers(pos)}" quat="{_numbers(quat)}">']
        rot = quaternion.to_matrix(r)
        m = float(arr["masses"][k])
        if m > 0.0:
            inertia = rot @ arr["inertias"][k] @ rot.T
            full = [inertia[0, 0], inertia[1, 1], inertia[2, 2], inertia[0, 1], inertia[0, 2], inertia[1, 2]]
            lines.append(
                f'{inner}<inertial pos="{_numbers(t + rot @ arr["coms"][k])}" mass="{m!r}" '
                f'fullinertia="{_numbers(full)}"/>'
            )
        lines.extend(joints)
        for c in kids[k]:
            lines.extend(body(c, (t + rot @ arr["origins"][c], quaternion.multiply(r, arr["orientations"][c])), inner))
        lines.append(f"{indent}</body>")
        return lines

    out = [
        f"<mujoco model={quoteattr(tree.name)}>",
        '  <compiler angle="radian" inertiafromgeom="false" autolimits="true"/>',
        f'  <option gravity="{_numbers(arr["gravity"])}"/>',
        "  <worldbody>",
    ]
    for root in (i for i in range(tree.n_segments) if tree.parents[i] < 0):
        out.extend(body(root, (arr["origins"][root], arr["orientations"][root]), "    "))
    out += ["  </worldbody>", "</mujoco>", ""]
    return "\n".join(out)


def to_mujoco_state(tree: SegmentTree, q, v=None, vdot=None):
    """One jaxbio state ``(q [nq], v [nv], v̇ [nv])`` as MuJoCo's ``(qpos, qvel, qacc)`` of
    `to_mjcf`'s model (``v``/``vdot`` None: zeros). A free root's translation becomes the world
    position (m), its quaternion the world orientation, ``v`` the world velocity of the origin
    (m/s) and ``v̇`` its world acceleration ``R (v̇ + ω × v)`` (m/s²); every other coordinate is
    copied into MuJoCo's order. One state: `jax.vmap` for a batch."""
    _check(tree, "to_mujoco_state")
    q = jnp.asarray(q)
    if q.shape != (tree.nq,):
        raise ValueError(f"to_mujoco_state: q must have shape ({tree.nq},) (one state), got {q.shape}")
    v = jnp.zeros(tree.nv, q.dtype) if v is None else jnp.asarray(v)
    vdot = jnp.zeros(tree.nv, q.dtype) if vdot is None else jnp.asarray(vdot)
    for x, label in ((v, "v"), (vdot, "vdot")):
        if x.shape != (tree.nv,):
            raise ValueError(f"to_mujoco_state: {label} must have shape ({tree.nv},), got {x.shape}")
    qpos, qvel, qacc = [], [], []
    for i in depth_first(tree.parents):
        t = tree.joint_types[i]
        qs, vs, nq, nv = tree.q_start[i], tree.v_start[i], JOINT_NQ[t], JOINT_NV[t]
        if t == "free":
            world = _free_world(tree, i, q)
            r = quaternion.to_matrix(world)
            lin, ang = v[vs : vs + 3], v[vs + 3 : vs + 6]
            qpos += [tree.origins[i] + quaternion.to_matrix(tree.orientations[i]) @ q[qs : qs + 3], world]
            qvel += [r @ lin, ang]
            qacc += [r @ (vdot[vs : vs + 3] + jnp.cross(ang, lin)), vdot[vs + 3 : vs + 6]]
        elif t != "fixed":
            qpos.append(q[qs : qs + nq])
            qvel.append(v[vs : vs + nv])
            qacc.append(vdot[vs : vs + nv])
    join = lambda parts: jnp.concatenate(parts) if parts else jnp.zeros(0, q.dtype)
    return join(qpos), join(qvel), join(qacc)


def from_mujoco_force(tree: SegmentTree, q, qfrc):
    """MuJoCo generalised forces ``qfrc [nv]`` of `to_mjcf`'s model (``qfrc_inverse``,
    ``qfrc_actuator``…) as jaxbio's ``[nv]`` at jaxbio's configuration ``q``: reordered, and a
    free root's world-frame force turned into the segment frame (N; moments in N·m are in the
    segment frame in both). One state: `jax.vmap` for a batch."""
    _check(tree, "from_mujoco_force")
    q, qfrc = jnp.asarray(q), jnp.asarray(qfrc)
    if q.shape != (tree.nq,) or qfrc.shape != (tree.nv,):
        raise ValueError(
            f"from_mujoco_force: q must have shape ({tree.nq},) and qfrc ({tree.nv},), got {q.shape} and {qfrc.shape}"
        )
    out = [None] * tree.n_segments
    k = 0
    for i in depth_first(tree.parents):
        t = tree.joint_types[i]
        nv = JOINT_NV[t]
        part = qfrc[k : k + nv]
        if t == "free":
            r = quaternion.to_matrix(_free_world(tree, i, q))
            part = jnp.concatenate([r.T @ part[:3], part[3:]])
        out[i] = part
        k += nv
    parts = [p for p in out if p is not None and p.shape[0]]
    return jnp.concatenate(parts) if parts else jnp.zeros(0, qfrc.dtype)
