"""`SegmentTree`: the rigid-body model of jaxbio (topology static, numbers as arrays)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import _topology
from jaxbio._rigid_numpy import check_nonsingular
from jaxbio._validate import AXIAL, JOINT_TYPES  # noqa: F401  (their home is below the tree: the dict checks)

__all__ = ["SegmentTree"]

#: configuration size ``nq`` of each joint type: an angle or a slide; a unit quaternion
#: ``(w, x, y, z)``; a translation then a quaternion; nothing
JOINT_NQ = {"revolute": 1, "prismatic": 1, "spherical": 4, "free": 7, "fixed": 0}
#: velocity size ``nv``: ``q̇``; ``ω`` in the segment frame; ``[v, ω]`` in the segment frame; nothing
JOINT_NV = {"revolute": 1, "prismatic": 1, "spherical": 3, "free": 6, "fixed": 0}


class Dofs(NamedTuple):
    """Static per-velocity-coordinate tables (numpy, ``nv`` long) of a tree."""

    segment: np.ndarray  # (nv,) int: the segment whose joint owns the coordinate
    rotational: np.ndarray  # (nv,) bool: an angular velocity (revolute, or ω of a ball/free joint)
    unit_axis: np.ndarray  # (nv, 3): the segment-frame axis of a ball/free coordinate; zeros for axial
    axial: np.ndarray  # (nv,) bool: the coordinate of a revolute/prismatic joint (axis = tree.axes)


class SegmentTree(eqx.Module):
    """A tree of rigid segments, each attached to its parent by a joint.

    Kinematics are URDF-like: segment frame = parent frame · Translation(``origins[i]``) ·
    Rotation(``orientations[i]``) · joint motion. Joint types (``JOINT_NQ``/``JOINT_NV``):

    - ``"revolute"`` / ``"prismatic"``: one coordinate, a rotation by ``q`` rad about ``axes[i]``
      or a translation by ``q`` m along it; ``v = q̇``.
    - ``"spherical"``: ``q = (qw, qx, qy, qz)`` a unit quaternion, ``v = ω`` rad/s in the segment
      frame (3).
    - ``"free"``: ``q = (x, y, z, qw, qx, qy, qz)`` (translation in the joint frame, m, then the
      quaternion), ``v = (v, ω)``: the origin's velocity relative to the parent and the angular
      velocity, both in the segment frame (6; Pinocchio's FreeFlyer, quaternion w first).
      Allowed at any depth, not only on a root: the segment's 6-DOF motion relative to its parent
      (an object held in a hand, a marker cluster on a segment), as Pinocchio allows.
    - ``"fixed"``: no coordinate; the segment moves rigidly with its parent.

    So the configuration ``q`` has ``nq`` entries and the velocity ``v`` (``qd``), accelerations
    and generalised forces ``nv``; they are equal when every joint is revolute or prismatic
    (`is_axial`). Segment ``i``'s coordinates are ``q[q_start[i]:q_start[i] + nq_i]`` and
    ``v[v_start[i]:...]``; parents come before children. ``axes[i]`` is unused (zeros) for the
    joints without an axis.

    Static (topology, steers Python control flow): ``name``, ``names``, ``parents`` (parent index,
    ``-1`` for the world), ``joint_types``. Array leaves (so `jax.vmap` over subjects and
    `jax.grad` with respect to any of them work):

    - ``axes``: ``(n, 3)`` unit joint axes in the joint frame.
    - ``origins``: ``(n, 3)`` m, joint origin in the parent segment frame.
    - ``orientations``: ``(n, 4)`` unit quaternions ``(w, x, y, z)``, joint frame in parent frame.
    - ``masses``: ``(n,)`` kg.
    - ``coms``: ``(n, 3)`` m, centre of mass in the segment frame.
    - ``inertias``: ``(n, 3, 3)`` kg·m², inertia tensor about the COM in the segment frame.
    - ``gravity``: ``(3,)`` m/s², world frame (``(0, 0, -9.81)`` in 3D, ``(0, -9.81, 0)`` planar).

    Build one with `SegmentTree.from_dict` (validated, the JSON layout of `jaxbio.load_model`).
    The constructor itself checks shapes only, so that it also runs on traced arrays. It accepts
    leaves with extra leading axes (a batch of models, to be mapped over with `jax.vmap`); the
    algorithms take one model and refuse such a tree outside ``vmap`` (`check_unbatched`).
    """

    axes: Float[Array, "n 3"]
    origins: Float[Array, "n 3"]
    orientations: Float[Array, "n 4"]
    masses: Float[Array, " n"]
    coms: Float[Array, "n 3"]
    inertias: Float[Array, "n 3 3"]
    gravity: Float[Array, 3]
    names: tuple[str, ...] = eqx.field(static=True)
    parents: tuple[int, ...] = eqx.field(static=True)
    joint_types: tuple[str, ...] = eqx.field(static=True)
    name: str = eqx.field(static=True, default="model")

    def __check_init__(self):
        n = len(self.names)
        if len(self.parents) != n or len(self.joint_types) != n:
            raise ValueError(
                f"SegmentTree: names ({n}), parents ({len(self.parents)}) and joint_types "
                f"({len(self.joint_types)}) must have the same length"
            )
        for field, shape in self.leaf_shapes.items():
            got = jnp.shape(getattr(self, field))
            if got != shape and not _is_batched_leaf(got, shape):
                raise ValueError(f"SegmentTree.{field} has shape {got}, expected {shape}")
        for i, (p, jt) in enumerate(zip(self.parents, self.joint_types)):
            if not -1 <= p < i:
                raise ValueError(
                    f"segment {self.names[i]!r}: parent index {p} must be -1 (world) or an earlier segment"
                )
            if jt not in JOINT_TYPES:
                raise ValueError(f"segment {self.names[i]!r}: joint.type {jt!r} is not one of {JOINT_TYPES}")

    # ---- leaf shapes: one model, or a batch of models for jax.vmap ----------------------------
    @property
    def leaf_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of each array field for one model (``n`` segments), e.g. ``masses: (n,)``."""
        n = len(self.names)
        return {
            "axes": (n, 3),
            "origins": (n, 3),
            "orientations": (n, 4),
            "masses": (n,),
            "coms": (n, 3),
            "inertias": (n, 3, 3),
            "gravity": (3,),
        }

    def check_unbatched(self) -> SegmentTree:
        """``self`` if every array field has exactly one model's shape (`leaf_shapes`).

        A tree whose leaves carry extra leading axes (stacked subjects, or the output of
        `jax.vmap`) is a batch of models; the dynamics functions take one model, and without
        this check JAX broadcasting turns a batch into one plausible-looking answer. Raises
        ``ValueError`` "tree has a batch axis …; use jax.vmap(…, in_axes=(0, …))". Inside
        `jax.vmap` over the tree each model is seen unbatched, so the check passes there. Only
        shapes are looked at, so it costs nothing under `jax.jit`.
        """
        for field, shape in self.leaf_shapes.items():
            got = jnp.shape(getattr(self, field))
            if got == shape:
                continue
            if _is_batched_leaf(got, shape):
                raise ValueError(
                    f"tree has a batch axis: {self.name!r}.{field} has shape {got}, one model's is "
                    f"{shape} (batch shape {got[: len(got) - len(shape)]}); the dynamics take one "
                    "model: use jax.vmap(..., in_axes=(0, ...)) to map over the stacked models"
                )
            raise ValueError(f"SegmentTree.{field} has shape {got}, expected {shape} for {self.name!r}")
        return self

    # ---- topology helpers (static, numpy) -------------------------------------------------
    @property
    def n_segments(self) -> int:
        """Number of segments (rows of the per-segment arrays and of external wrenches)."""
        return len(self.names)

    @property
    def nq(self) -> int:
        """Length of the configuration ``q`` (sum of the joints' ``JOINT_NQ``)."""
        return _layout(self.joint_types)[0][-1]

    @property
    def nv(self) -> int:
        """Length of the velocity ``v`` (and of accelerations, forces, rows of ``M``)."""
        return _layout(self.joint_types)[1][-1]

    @property
    def q_start(self) -> tuple[int, ...]:
        """``(n_segments,)`` static: index of each segment's first entry in ``q``."""
        return _layout(self.joint_types)[0][:-1]

    @property
    def v_start(self) -> tuple[int, ...]:
        """``(n_segments,)`` static: index of each segment's first entry in ``v``."""
        return _layout(self.joint_types)[1][:-1]

    @property
    def is_axial(self) -> bool:
        """Whether every joint is revolute or prismatic (then ``nq = nv = n_segments`` and
        coordinate ``i`` belongs to segment ``i``)."""
        return all(t in AXIAL for t in self.joint_types)

    @property
    def joint_layout(self) -> JointLayout:
        """Static per-joint-type gathers into ``q`` and ``v`` (`JointLayout`)."""
        return _joint_layout(self.joint_types)

    @property
    def dofs(self) -> Dofs:
        """Static per-velocity-coordinate tables (`Dofs`)."""
        return _dofs(self.joint_types)

    @property
    def unit_axes(self) -> Float[Array, "n 3"]:
        """``axes / |axes|`` (zero rows stay zero): the joint axes the dynamics use. A loaded model's
        axes are unit already; normalising here keeps every algorithm (per state and batched)
        consistent for a tree whose axes were changed by hand or are traced (``jax.grad`` with
        respect to them is then tangent to the unit sphere)."""
        from jaxbio.spatial import unit

        return unit(self.axes, jnp.zeros_like(self.axes))

    @property
    def unit_orientations(self) -> Float[Array, "n 4"]:
        """``orientations / |orientations|`` (a zero row reads as the identity): the joint
        placements' rotations the dynamics use (see `unit_axes`)."""
        from jaxbio.spatial import unit

        identity = jnp.zeros_like(self.orientations).at[..., 0].set(1.0)
        return unit(self.orientations, identity)

    def dof_axes(self) -> Float[Array, "nv 3"]:
        """``(nv, 3)``: each velocity coordinate's axis in its segment's frame: ``axes[i]`` (made
        unit) for a revolute/prismatic joint, the frame's unit vectors for a ball/free joint."""
        d = self.dofs
        axes = jnp.asarray(self.unit_axes)[..., d.segment, :]
        return jnp.where(d.axial[:, None], axes, jnp.asarray(d.unit_axis, axes.dtype))

    @property
    def dof_ancestors(self) -> np.ndarray:
        """``(n_segments, nv)`` bool, static: ``A[k, j]`` is true when velocity coordinate ``j``
        moves segment ``k`` (its joint is ``k``'s or an ancestor's)."""
        return self.ancestors[:, self.dofs.segment]

    @property
    def levels(self) -> tuple[tuple[int, ...], ...]:
        """Segment indices by depth: ``levels[0]`` are children of the world."""
        return _topology.levels(self.parents)

    @property
    def is_revolute(self) -> np.ndarray:
        """``(n_segments,)`` bool, static: the joint is revolute."""
        return np.array([t == "revolute" for t in self.joint_types], dtype=bool)

    @property
    def ancestors(self) -> np.ndarray:
        """``(n, n)`` bool, static: ``A[k, j]`` is true when joint ``j`` moves segment ``k``
        (``j`` is ``k`` or one of its ancestors)."""
        n = self.n_segments
        A = np.zeros((n, n), dtype=bool)
        for k in range(n):
            j = k
            while j >= 0:
                A[k, j] = True
                j = self.parents[j]
        return A

    def index(self, name: str) -> int:
        """Index of the segment called ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"{self.name}: no segment named {name!r}; segments are {list(self.names)}") from None

    # ---- (de)serialisation ----------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any], *, dtype=None, physical: bool = True) -> SegmentTree:
        """Build and validate a tree from the JSON layout (``format: jaxbio-model``, v1).

        Raises `ValueError` naming the segment and field for every defect listed in API.md, for
        unknown fields (with a "did you mean" hint) and wrong JSON types, and for values that the
        cast to ``dtype`` spoils (overflow to inf, a mass underflowing, an inertia no longer
        positive-definite): the checks run on the float64 input and again on the cast arrays.
        ``dtype`` (a floating dtype) defaults to JAX's default float type (float32 unless x64 is
        enabled); integer, bool and complex dtypes are refused.

        ``physical=False`` accepts what OpenSim accepts and a physical body cannot be: inertias
        whose principal moments break the triangle inequality (OpenSim's model library has toes
        with two zero moments) and a mass matrix singular in every configuration (a kinematic
        model whose bodies have no mass, e.g. OpenSim's wrist model). Its dynamics are what those
        numbers give (forward dynamics of a singular model fails, as it does in OpenSim).
        """
        from jaxbio._validate import cast_model, model_dtype, validate_model_dict

        model_dtype(dtype)  # an argument error before any model error
        v = validate_model_dict(d, physical=physical)
        if physical:
            check_nonsingular(v)
        return cls(
            **cast_model(v, dtype, physical=physical),
            names=v["names"],
            parents=v["parents"],
            joint_types=v["joint_types"],
            name=v["name"],
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON layout (plain Python floats); inverse of `from_dict`. One model only
        (`check_unbatched`)."""
        self.check_unbatched()
        arr = {
            k: np.asarray(getattr(self, k), dtype=float)
            for k in ("axes", "origins", "orientations", "masses", "coms", "inertias", "gravity")
        }
        segments = []
        for i, name in enumerate(self.names):
            p = self.parents[i]
            segments.append(
                {
                    "name": name,
                    "parent": None if p < 0 else self.names[p],
                    "joint": {
                        "type": self.joint_types[i],
                        **({"axis": arr["axes"][i].tolist()} if self.joint_types[i] in AXIAL else {}),
                        "origin": arr["origins"][i].tolist(),
                        "orientation": arr["orientations"][i].tolist(),
                    },
                    "mass": float(arr["masses"][i]),
                    "com": arr["coms"][i].tolist(),
                    "inertia": arr["inertias"][i].tolist(),
                }
            )
        return {
            "format": "jaxbio-model",
            "version": 1,
            "name": self.name,
            "gravity": arr["gravity"].tolist(),
            "segments": segments,
        }

    def astype(self, dtype) -> SegmentTree:
        """The same tree with every array leaf cast to ``dtype`` (a floating dtype, e.g.
        ``jnp.float32``; others raise ``ValueError``). A concrete, unbatched tree is checked after
        the cast as `from_dict` does (overflow, masses underflowing, inertias)."""
        from jaxbio._validate import check_cast_model, model_dtype

        dt = model_dtype(dtype)
        with np.errstate(over="ignore", under="ignore"):  # refused below, naming the segment
            out = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dt), self)
        leaves = jax.tree_util.tree_leaves(out)
        unbatched = all(jnp.shape(getattr(out, f)) == s for f, s in out.leaf_shapes.items())
        if unbatched and not any(isinstance(x, jax.core.Tracer) for x in leaves):
            check_cast_model(
                {f: getattr(out, f) for f in out.leaf_shapes},
                out.names,
                out.name,
                before={f: getattr(self, f) for f in self.leaf_shapes},
            )
        return out


@lru_cache(maxsize=256)
def _layout(joint_types: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Cumulative ``q`` and ``v`` offsets, each ``n_segments + 1`` long (the last is the size)."""
    q, v = [0], [0]
    for t in joint_types:
        q.append(q[-1] + JOINT_NQ[t])
        v.append(v[-1] + JOINT_NV[t])
    return tuple(q), tuple(v)


@lru_cache(maxsize=256)
def _dofs(joint_types: tuple[str, ...]) -> Dofs:
    seg, rot, axis, axial = [], [], [], []
    eye = np.eye(3)
    for i, t in enumerate(joint_types):
        if t in AXIAL:
            seg.append(i)
            rot.append(t == "revolute")
            axis.append(np.zeros(3))
            axial.append(True)
        elif t == "spherical":
            for k in range(3):
                seg.append(i)
                rot.append(True)
                axis.append(eye[k])
                axial.append(False)
        elif t == "free":
            for k in range(6):
                seg.append(i)
                rot.append(k >= 3)
                axis.append(eye[k % 3])
                axial.append(False)
    return Dofs(
        np.asarray(seg, np.int32),
        np.asarray(rot, bool),
        np.asarray(axis, float).reshape(-1, 3),
        np.asarray(axial, bool),
    )


class JointLayout(NamedTuple):
    """Static (numpy) gathers of a tree's joints, one group per joint type: where each group's
    coordinates sit in ``q`` and ``v``, and which segments own them (`SegmentTree.joint_layout`;
    used by `jaxbio.configuration` and the kinematics)."""

    axial_q: np.ndarray  # (na,) q index of each revolute/prismatic coordinate
    axial_v: np.ndarray  # (na,) its v index
    revolute: np.ndarray  # (na,) bool: an angle (else a slide)
    axial_segment: np.ndarray  # (na,) the segment owning it
    quat_q: np.ndarray  # (nb, 4) q indices of the quaternion of each ball or free joint
    quat_v: np.ndarray  # (nb, 3) v indices of its ω
    quat_segment: np.ndarray  # (nb,) the segment owning it
    free: np.ndarray  # (nf,) rows of the quaternion group that are free joints
    trans_q: np.ndarray  # (nf, 3) q indices of each free joint's translation
    trans_v: np.ndarray  # (nf, 3) v indices of its linear velocity
    q_order: np.ndarray  # (nq,) q = concat(axial, quat.ravel(), trans.ravel())[q_order]
    v_order: np.ndarray  # (nv,) v = concat(axial, ω.ravel(), v_lin.ravel())[v_order]


@lru_cache(maxsize=256)
def _joint_layout(joint_types: tuple[str, ...]) -> JointLayout:
    axial_q, axial_v, revolute, axial_segment = [], [], [], []
    quat_q, quat_v, quat_segment, free, trans_q, trans_v = [], [], [], [], [], []
    iq = iv = 0
    for i, t in enumerate(joint_types):
        if t in AXIAL:
            axial_q.append(iq)
            axial_v.append(iv)
            revolute.append(t == "revolute")
            axial_segment.append(i)
        elif t == "spherical":
            quat_q.append(range(iq, iq + 4))
            quat_v.append(range(iv, iv + 3))
            quat_segment.append(i)
        elif t == "free":
            free.append(len(quat_q))
            trans_q.append(range(iq, iq + 3))
            trans_v.append(range(iv, iv + 3))
            quat_q.append(range(iq + 3, iq + 7))
            quat_v.append(range(iv + 3, iv + 6))
            quat_segment.append(i)
        iq += JOINT_NQ[t]
        iv += JOINT_NV[t]

    def ints(x, *shape):
        out = np.asarray(x, np.int32).reshape(-1, *shape)
        out.setflags(write=False)  # cached and shared by every call
        return out

    axial_q, axial_v = ints(axial_q), ints(axial_v)
    quat_q, quat_v, trans_q, trans_v = ints(quat_q, 4), ints(quat_v, 3), ints(trans_q, 3), ints(trans_v, 3)
    q_order = ints(np.argsort(np.concatenate([axial_q, quat_q.ravel(), trans_q.ravel()])))
    v_order = ints(np.argsort(np.concatenate([axial_v, quat_v.ravel(), trans_v.ravel()])))
    assert len(q_order) == iq and len(v_order) == iv
    revolute = np.asarray(revolute, bool)
    revolute.setflags(write=False)
    return JointLayout(
        axial_q,
        axial_v,
        revolute,
        ints(axial_segment),
        quat_q,
        quat_v,
        ints(quat_segment),
        ints(free),
        trans_q,
        trans_v,
        q_order,
        v_order,
    )


def _is_batched_leaf(got: tuple, shape: tuple) -> bool:
    # The constructor allows a tree whose leaves carry leading batch axes (stacked subjects, to
    # be mapped over with jax.vmap); the algorithms take one model and refuse it
    # (`SegmentTree.check_unbatched`).
    return len(got) > len(shape) and got[len(got) - len(shape) :] == shape
