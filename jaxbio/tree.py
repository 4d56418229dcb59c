"""`SegmentTree`: the rigid-body model of jaxbio (topology static, numbers as arrays)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import _topology

__all__ = ["SegmentTree"]

JOINT_TYPES = ("revolute", "prismatic")


class SegmentTree(eqx.Module):
    """A tree of rigid segments, each attached to its parent by a one-DOF joint.

    Kinematics are URDF-like: segment frame = parent frame · Translation(``origins[i]``) ·
    Rotation(``orientations[i]``) · joint motion (rotation by ``q[i]`` about ``axes[i]`` for a
    revolute joint, translation by ``q[i]`` along it for a prismatic one). ``q[i]`` belongs to
    segment ``i``; parents come before children.

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
    gravity: Float[Array, "3"]
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
                    f"segment {self.names[i]!r}: parent index {p} must be -1 (world) or an "
                    "earlier segment"
                )
            if jt not in JOINT_TYPES:
                raise ValueError(f"segment {self.names[i]!r}: joint.type {jt!r} is not one of {JOINT_TYPES}")

    # ---- leaf shapes: one model, or a batch of models for jax.vmap ----------------------------
    @property
    def leaf_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of each array field for one model (``n`` segments), e.g. ``masses: (n,)``."""
        n = len(self.names)
        return {"axes": (n, 3), "origins": (n, 3), "orientations": (n, 4), "masses": (n,),
                "coms": (n, 3), "inertias": (n, 3, 3), "gravity": (3,)}

    def check_unbatched(self) -> "SegmentTree":
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
    def nq(self) -> int:
        """Number of generalised coordinates (= number of segments)."""
        return len(self.names)

    @property
    def levels(self) -> tuple[tuple[int, ...], ...]:
        """Segment indices by depth: ``levels[0]`` are children of the world."""
        return _topology.levels(self.parents)

    @property
    def is_revolute(self) -> np.ndarray:
        """``(n,)`` bool, static."""
        return np.array([t == "revolute" for t in self.joint_types], dtype=bool)

    @property
    def ancestors(self) -> np.ndarray:
        """``(n, n)`` bool, static: ``A[k, j]`` is true when joint ``j`` moves segment ``k``
        (``j`` is ``k`` or one of its ancestors)."""
        n = self.nq
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
    def from_dict(cls, d: dict[str, Any], *, dtype=None) -> "SegmentTree":
        """Build and validate a tree from the JSON layout (``format: jaxbio-model``, v1).

        Raises `ValueError` naming the segment and field for every defect listed in API.md, for
        unknown fields (with a "did you mean" hint) and wrong JSON types, and for values that the
        cast to ``dtype`` spoils (overflow to inf, a mass underflowing, an inertia no longer
        positive-definite): the checks run on the float64 input and again on the cast arrays.
        ``dtype`` (a floating dtype) defaults to JAX's default float type (float32 unless x64 is
        enabled); integer, bool and complex dtypes are refused.
        """
        from jaxbio._validate import cast_model, model_dtype, validate_model_dict

        model_dtype(dtype)  # an argument error before any model error
        v = validate_model_dict(d)
        return cls(
            **cast_model(v, dtype),
            names=v["names"],
            parents=v["parents"],
            joint_types=v["joint_types"],
            name=v["name"],
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON layout (plain Python floats); inverse of `from_dict`. One model only
        (`check_unbatched`)."""
        self.check_unbatched()
        arr = {k: np.asarray(getattr(self, k), dtype=float) for k in
               ("axes", "origins", "orientations", "masses", "coms", "inertias", "gravity")}
        segments = []
        for i, name in enumerate(self.names):
            p = self.parents[i]
            segments.append(
                {
                    "name": name,
                    "parent": None if p < 0 else self.names[p],
                    "joint": {
                        "type": self.joint_types[i],
                        "axis": arr["axes"][i].tolist(),
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

    def astype(self, dtype) -> "SegmentTree":
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
            check_cast_model({f: getattr(out, f) for f in out.leaf_shapes}, out.names, out.name,
                             before={f: getattr(self, f) for f in self.leaf_shapes})
        return out


def _is_batched_leaf(got: tuple, shape: tuple) -> bool:
    # The constructor allows a tree whose leaves carry leading batch axes (stacked subjects, to
    # be mapped over with jax.vmap); the algorithms take one model and refuse it
    # (`SegmentTree.check_unbatched`).
    return len(got) > len(shape) and got[len(got) - len(shape):] == shape
