"""Ground contacts: the one contact type of jaxbio and its constraint rows.

A `Contact` holds a point of a segment fixed on the ground (no slip) in the sagittal (x–y) plane:
a **pin** fixes the point's world x and y (2 rows), a **weld** also the segment's angle about z
(3 rows, e.g. a foot flat on the ground). Its multipliers are the ground reaction on the segment:
the force ``(Fx, Fy)`` N at the point and, for a weld, the moment ``Mz`` N·m about it.

Every algorithm with contacts takes a sequence of them: the support-phase dynamics and the
joint-reaction schemes (`jaxbio.dynamics.constrained`), the absolute-coordinate constraints
(`jaxbio.dynamics.absolute`) and Blajer et al.'s (2007) inverse simulation (`jaxbio.estimation`). The rows of
the contact Jacobian (`contact_jacobian`) come from the one point Jacobian,
`jaxbio.dynamics.point_jacobian`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import _soa as soa
from jaxbio.dynamics._checks import as_state
from jaxbio.dynamics.kinematics import point_jacobian, segment_motion
from jaxbio.tree import SegmentTree

__all__ = ["Contact", "contact_jacobian", "contact_external", "contact_wrenches", "contact_rows", "contact_points"]


class Contact(eqx.Module):
    """A point of a segment held fixed on the ground (a support-phase constraint).

    Fields:
        segment: name of the segment (static).
        point: ``(3,)`` m (or ``(2,)``; z does not enter), the contact point in the segment frame
            (e.g. the heel ``(−0.04877, −0.0679)`` of ``foot_r`` in ``sagittal11``); default the
            segment's origin.
        weld: static; ``False`` (a pin: the point's x and y are fixed, 2 constraints) or ``True``
            (also the segment's angle is fixed, e.g. a foot flat on the ground: 3 constraints).
    """

    segment: str = eqx.field(static=True)
    point: Float[Array, " 3"] = eqx.field(converter=jnp.asarray, default=(0.0, 0.0, 0.0))
    weld: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if not isinstance(self.segment, str):
            raise ValueError(f"Contact.segment must be a segment name (str), got {self.segment!r}")
        if not isinstance(self.weld, bool):
            raise ValueError(f"Contact.weld must be a bool, got {self.weld!r}")
        shape = jnp.shape(self.point)
        if len(shape) < 1 or shape[-1] not in (2, 3):
            raise ValueError(f"Contact.point must have shape (2,) or (3,) (segment frame, m), got {shape}")
        if not isinstance(self.point, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(self.point))):
            raise ValueError(f"Contact {self.segment!r}: point must be finite, got {np.asarray(self.point).tolist()}")

    @property
    def rows(self) -> int:
        """Number of constraint rows (2 for a pin, 3 for a weld)."""
        return 3 if self.weld else 2

    def point3(self, dtype) -> Array:
        """The point as ``(3,)`` (z = 0 when given in-plane)."""
        p = jnp.asarray(self.point, dtype)
        return jnp.concatenate([p, jnp.zeros((1,), dtype)]) if p.shape[-1] == 2 else p


Contacts = Sequence[Contact]


def contact_rows(tree: SegmentTree, contacts: Contacts) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Static layout of the contact constraints: segment index ``(k,)``, the kept rows of the
    ``(k, 3)`` table ``[x, y, θ]`` (flat indices) and the row count of each contact. Unknown
    segment names raise `ValueError` (before tracing)."""
    for c in contacts:
        if not isinstance(c, Contact):
            raise ValueError(f"contacts must be jaxbio.dynamics.Contact objects, got {type(c).__name__}")
    seg = np.asarray([tree.index(c.segment) for c in contacts], dtype=np.int32)
    keep = [3 * k + j for k, c in enumerate(contacts) for j in range(c.rows)]
    return seg, np.asarray(keep, dtype=np.int32), tuple(c.rows for c in contacts)


def contact_points(contacts: Contacts, dtype) -> Array:
    """``(k, 2)`` contact points in their segment frames (in-plane part)."""
    if not contacts:
        return jnp.zeros((0, 2), dtype)
    return jnp.stack([jnp.asarray(c.point, dtype)[:2] for c in contacts])


def _generic_rows(
    parents: tuple[int, ...],
    joint_types: tuple[str, ...],
    layout: tuple,
    centres: np.ndarray,
    slides: np.ndarray,
    points: np.ndarray,
) -> np.ndarray:
    """Rows ``(r, n)`` of the planar contact Jacobian for world joint centres ``centres`` ``(n, 2)``,
    unit slide axes ``slides`` ``(n, 2)`` and contact points ``points`` ``(k, 2)`` (world), one
    per ``(segment, weld)`` of ``layout``: `point_jacobian`'s column rule in the plane (revolute
    ancestor ``j``: ``ẑ × (X − O_j)``, and 1 on the angle; prismatic: ``s_j``). numpy, so that
    checking contacts compiles nothing; tests/dynamics/test_contact.py checks these rows against
    `point_jacobian` at the same numbers."""
    n = len(parents)
    rev = np.asarray([t == "revolute" for t in joint_types])
    rows = []
    for (seg, weld), X in zip(layout, points):
        moves = np.zeros(n, dtype=bool)  # joints that move the segment: itself and its ancestors
        j = seg
        while j >= 0:
            moves[j] = True
            j = parents[j]
        lever = X - centres
        rows += [
            np.where(moves, np.where(rev, -lever[:, 1], slides[:, 0]), 0.0),
            np.where(moves, np.where(rev, lever[:, 0], slides[:, 1]), 0.0),
        ]
        if weld:
            rows.append(np.where(moves & rev, 1.0, 0.0))
    return np.asarray(rows)


@functools.lru_cache(maxsize=256)
def _generic_contact_rank(parents: tuple[int, ...], joint_types: tuple[str, ...], layout: tuple) -> int:
    """Structural (generic) rank of the contact Jacobian ``∂(contact rows)/∂q`` of a planar tree
    with this topology and contacts ``layout`` (``(segment, weld)`` pairs): the larger rank of two
    random draws of `_generic_rows`. No forward kinematics is needed: the joint centres, slide
    axes and contact points can each be placed anywhere by the tree's free numbers (a joint's
    origin, its frame's angle, the contact point), so independent random draws reach the same
    generic rank as random trees in random poses."""
    rng = np.random.default_rng(12345)
    n = len(parents)
    best = 0
    for _ in range(2):
        slides = rng.normal(size=(n, 2))
        slides /= np.linalg.norm(slides, axis=1, keepdims=True)
        rows = _generic_rows(
            parents, joint_types, layout, rng.normal(size=(n, 2)), slides, rng.normal(size=(len(layout), 2))
        )
        best = max(best, int(np.linalg.matrix_rank(rows)))
    return best


def check_contacts(tree: SegmentTree, contacts) -> tuple[Contact, ...]:
    """Static checks before tracing; returns ``contacts`` as a tuple (one `Contact` is accepted).

    Raises ``ValueError`` for a contact on an unknown segment, more constraint rows than degrees of
    freedom, or contacts that are redundant in every configuration (e.g. two points or a point and
    a weld on one segment)."""
    if contacts is None:
        return ()
    if isinstance(contacts, Contact):
        contacts = (contacts,)
    contacts = tuple(contacts)
    seg, _, rows = contact_rows(tree, contacts)  # ValueError on unknown segments
    if not contacts:
        return contacts
    total = sum(rows)
    names = ", ".join(f"{c.segment} ({'weld' if c.weld else 'pin'})" for c in contacts)
    if total > tree.nv:
        raise ValueError(
            f"contacts [{names}] impose {total} constraints on model {tree.name!r} with only "
            f"{tree.nv} degrees of freedom: the constraint set over-constrains the body"
        )
    layout = tuple((int(s), c.weld) for s, c in zip(seg, contacts))
    rank = _generic_contact_rank(tuple(tree.parents), tuple(tree.joint_types), layout)
    if rank < total:
        raise ValueError(
            f"contacts [{names}] impose {total} constraints but only {rank} are independent for any "
            f"configuration of model {tree.name!r} (e.g. two points or a point and a weld on one "
            "segment, or more constraints on a chain than it has joints): the multipliers would not be "
            "unique. Remove the redundant contacts"
        )
    return contacts


def _contact_points3(contacts: Contacts, dtype) -> Array:
    pts = contact_points(contacts, dtype)
    return jnp.concatenate([pts, jnp.zeros_like(pts[:, :1])], axis=-1)


def contact_terms(tree: SegmentTree, q, qd, contacts: Contacts):
    """``G = ∂φ/∂q`` ``(lc, n)`` and ``γ_G = −Ġ q̇`` ``(lc,)`` of the contact rows (world x, y of
    each point, and the segment angle for a weld), from the 3D kinematic recursion: ``G`` by
    `point_jacobian`, ``γ_G`` minus the acceleration of the contact point (and the angular
    acceleration) at ``q̈ = 0``. Contacts already checked (`check_contacts`)."""
    seg, keep, _ = contact_rows(tree, contacts)
    mo = segment_motion(tree, q, qd)
    pts3 = _contact_points3(contacts, q.dtype)
    att = mo.attitude[seg]
    lever = jnp.stack(soa.qrot(tuple(att[:, i] for i in range(4)), soa.split(pts3, 3)), -1)  # X − O_s
    lin, ang = jax.vmap(lambda s, x: point_jacobian(tree, q, s, x, motion=mo))(jnp.asarray(seg), pts3)
    G = jnp.concatenate([lin[:, :2], ang[:, 2:]], axis=1)  # (k, 3, n)
    G = G.reshape(3 * len(seg), tree.nv)[keep]
    w, al = mo.omega[seg], mo.alpha[seg]
    acc = mo.acceleration[seg] + jnp.cross(al, lever) + jnp.cross(w, jnp.cross(w, lever))
    gamma = -jnp.concatenate([acc[:, :2], al[:, 2:]], axis=-1).reshape(-1)[keep]
    return G, gamma


def contact_jacobian(tree: SegmentTree, q: Float[ArrayLike, " n"], contacts: Contacts) -> Float[Array, "r n"]:
    """Constraint Jacobian ``C(q)`` ``(r, n)`` of the contacts: per contact the world x and y
    velocity of its point per unit ``q̇`` and, for a weld, the angular velocity about z."""
    contacts = check_contacts(tree, contacts)
    q = jnp.asarray(q)
    if not contacts:
        return jnp.zeros((0, tree.nv), q.dtype)
    return contact_terms(tree, q, jnp.zeros(tree.nv, q.dtype), contacts)[0]


@jax.jit
def contact_wrenches(values: Float[ArrayLike, " r"], contacts: Contacts) -> Float[Array, "k 3"]:
    """Packed contact reactions ``(r,)`` (``r = Σ c.rows``: per contact ``Fx, Fy`` N and, for a
    weld, ``Mz`` N·m about the contact point, the layout of `contact_jacobian`'s rows) → wrenches
    ``(k, 3)`` ``(Fx, Fy, Mz)`` (``Mz`` 0 for a pinned point), the input of `contact_external`."""
    values = jnp.asarray(values)
    out, i = [], 0
    for c in contacts:  # static Python over contacts (a handful), not over segments
        w = values[i : i + c.rows]
        out.append(jnp.concatenate([w, jnp.zeros((3 - c.rows,), values.dtype)]) if c.rows < 3 else w)
        i += c.rows
    if not out:
        return jnp.zeros((0, 3), values.dtype)
    return jnp.stack(out)


def contact_external(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    contacts: Contacts,
    wrenches: Float[ArrayLike, "k 3"],
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """Ground wrenches at contact points → ``external`` ``(forces (n, 3), moments (n, 3))``: world
    frame, moments about each segment's origin, summed per segment (the format of
    `jaxbio.inverse_dynamics` and `jaxbio.dynamics.constrained.reactions_recursion`).

    ``wrenches`` ``(k, 3)``: ``(Fx, Fy, Mz about the contact point)`` on each contact's segment
    (e.g. from `jaxbio.dynamics.constrained_forward_dynamics` or a force plate).
    """
    contacts = check_contacts(tree, contacts)
    q = as_state(tree, q, "q", False)
    wrenches = jnp.asarray(wrenches, q.dtype)
    k = len(contacts)
    if wrenches.shape != (k, 3):
        raise ValueError(f"wrenches has shape {wrenches.shape}, expected ({k}, 3) for {k} contacts")
    n = tree.n_segments
    if k == 0:
        z = jnp.zeros((n, 3), q.dtype)
        return z, z
    seg, _, _ = contact_rows(tree, contacts)
    mo = segment_motion(tree, q)
    pts3 = _contact_points3(contacts, q.dtype)
    att = mo.attitude[seg]
    X = mo.position[seg] + jnp.stack(soa.qrot(tuple(att[:, i] for i in range(4)), soa.split(pts3, 3)), -1)
    lever = (X - mo.position[seg])[:, :2]
    F = wrenches[:, :2]
    Mz = wrenches[:, 2] + lever[:, 0] * F[:, 1] - lever[:, 1] * F[:, 0]
    zero = jnp.zeros_like(Mz)
    forces = jax.ops.segment_sum(jnp.stack([F[:, 0], F[:, 1], zero], -1), jnp.asarray(seg), num_segments=n)
    moments = jax.ops.segment_sum(jnp.stack([zero, zero, Mz], -1), jnp.asarray(seg), num_segments=n)
    return forces, moments
