"""Biscarini's planar n-link chain: closed-form joint reaction forces and joint torques (Biscarini 2021).

A planar chain of ``n`` rigid links of generic shape (centre of mass off the link axis), joined by
ideal revolute joints to each other and, at joint 1, to a fixed base; linear muscle actuators span
any 1 … n consecutive joints; contact external resistances act on the links. The paper derives, in
closed form and in the global frame,

- the joint reaction forces ``ϕ_{k,k+1}`` (eqs. 8–11, from the force equations 1–7), and
- the joint torques ``τ_k`` that the muscles spanning each joint must produce (eqs. 13, 20–24),

in which the link angular velocities appear only in centripetal ``θ̇²`` terms (no Coriolis products).

Conventions (shared by every function here):

- **Frames.** World: x forward, y up, z = k̂ out of the plane, gravity ``-g ŷ``; angles
  counter-clockwise positive. ``J_1`` (the base joint) is the world origin.
- **Links and joints.** Arrays are 0-based: index ``a = 0 … n-1`` is the paper's link ``a + 1`` and
  joint ``a`` is the paper's joint ``a + 1`` (centre ``J_{a+1}``), between link ``a - 1`` and link
  ``a``. The fixed base (the paper's link 0) is link index ``-1`` (`BASE`), as for ``SegmentTree``
  parents.
- **Angles.** ``theta`` are the paper's *absolute* link angles ``θ_i``: the angle of ``û_i`` (from
  ``J_i`` to ``J_{i+1}``) to the world x-axis. Joint angles (the ``q`` of ``PlanarChain.to_tree()``) are
  ``α_1 = θ_1``, ``α_i = θ_i − θ_{i−1}`` (`link_to_joint_angles`, `joint_to_link_angles`).
- **Link-fixed coordinates.** A point ``(x, y)`` on link ``a`` is ``J_{a+1} + x û_a + y ŵ_a`` with
  ``ŵ = k̂ × û``, i.e. ``l (cos ε, sin ε)`` for a point at distance ``l`` from the joint and angle
  ``ε`` from the link axis (the paper's ``l_R, ε_R``). On the base, ``(x, y)`` are world coordinates.
- **Muscles** pull: tension ``T ≥ 0`` N along the straight line between the two attachment points;
  the force on each attached link points towards the other attachment.
- **Reaction sign.** ``chain_reactions(...)[r]`` is the paper's ``ϕ_{r,r+1}`` (in the paper's link
  numbers, whose link ``r`` is our ``r - 1``): the force exerted through joint ``r`` *on the
  proximal link* (``r - 1``, or the base for ``r = 0``) *by the distal link* ``r``. The force on the distal link is its negative; that is what ``jb.segment_wrenches`` returns
  (force each segment receives from its parent), when the muscle and contact forces are passed to it
  as external wrenches (`external_wrenches`).
- **Torque sign.** ``τ_k`` (eq. 22) is the moment about ``J_k``, along +z, of the muscle forces
  acting on the links distal to joint ``k`` — the generalised force of ``jb.inverse_dynamics`` on
  ``chain.to_tree()`` (positive counter-clockwise on the distal link).

Every public function is a pure function of one frame (batch with `jax.vmap`), jitted, and
differentiable with respect to the chain parameters, the state and the loads.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio._validate import as_float, as_shape, check_choice, check_values, finite
from jaxbio.dynamics.kinematics import forward_kinematics
from jaxbio.papers import _biscarini_terms as terms
from jaxbio.spatial import norm, unit
from jaxbio.tree import SegmentTree

__all__ = [
    "BASE",
    "ResistancePoints",
    "LinearMuscles",
    "PlanarChain",
    "base_load_from_balance",
    "chain_reactions",
    "chain_torques",
    "external_wrenches",
    "joint_to_link_angles",
    "link_to_joint_angles",
    "muscle_forces",
    "muscle_joint_forces",
    "muscle_torques",
]

#: Link index of the fixed base (the paper's link 0).
BASE = -1

_FORMS = ("distal", "proximal")


# ---------------------------------------------------------------------------------------------------
# Validation helpers (run before tracing)
# ---------------------------------------------------------------------------------------------------


def _state(x, n: int, name: str, shape=None):
    return as_shape(x, (n,) if shape is None else shape, name, "; batch frames with jax.vmap")


def _link_indices(links, n_links: int, what: str, names, allow_base: bool) -> tuple[int, ...]:
    out = []
    lowest = BASE if allow_base else 0
    for j, a in enumerate(links):
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise ValueError(f"{what} {names[j]!r}: link index {a!r} is not an integer")
        a = int(a)
        if not lowest <= a < n_links:
            base = f" or {BASE} for the base" if allow_base else ""
            raise ValueError(
                f"{what} {names[j]!r}: link {a} does not exist; the chain has links 0..{n_links - 1}{base}"
                + ("" if allow_base or a != BASE else " (the base carries no contact: pass base_load)")
            )
        out.append(a)
    return tuple(out)


def _names(names, count: int, prefix: str) -> tuple[str, ...]:
    if names is None:
        return tuple(f"{prefix}{j}" for j in range(count))
    names = tuple(str(s) for s in names)
    if len(names) != count:
        raise ValueError(f"{len(names)} names given for {count} {prefix}s")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate {prefix} names: {names}")
    return names


def _n_links(chain_or_n) -> int:
    if isinstance(chain_or_n, PlanarChain):
        return chain_or_n.n
    if isinstance(chain_or_n, (int, np.integer)) and not isinstance(chain_or_n, bool) and chain_or_n >= 1:
        return int(chain_or_n)
    raise ValueError(f"expected a PlanarChain or a number of links >= 1, got {chain_or_n!r}")


def _points(points, count: int, name: str):
    p = as_shape(points, (count, 2), name, ": one link-frame (x, y) per entry")
    check_values(p, name)
    return p


# ---------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------


class PlanarChain(eqx.Module):
    """Biscarini's planar chain of ``n`` non-slender links (Biscarini 2021, §2.1, Figure 1).

    Array leaves (``(n,)`` each, index ``a`` = the paper's link ``a + 1``):

    - ``lengths``: m, ``l_i = |J_i J_{i+1}|``. For the last link ``J_{n+1}`` is any chosen point
      of it: it only fixes the direction ``û_n`` from which ``θ_n`` is measured (and the tip of
      ``to_tree``).
    - ``masses``: kg, ``m_i`` (> 0).
    - ``com_distances``: m, ``l_Ci = |J_i C_i|``.
    - ``com_angles``: rad, ``ε_Ci``, angle from ``û_i`` to ``J_i C_i`` (counter-clockwise).
    - ``inertias``: kg·m², ``I_Ci``, moment of inertia about the centre of mass (axis k̂).
    - ``gravity``: ``()`` m/s², magnitude ``g`` of the gravitational acceleration, along −y.

    Construct with ``PlanarChain(lengths, masses, com_distances, com_angles, inertias, gravity=9.81)``
    or `PlanarChain.slender_rods`. ``n`` is the (static) length of the arrays. Values are checked
    when concrete (lengths and masses positive, COM distances and inertias non-negative, all
    finite); under ``jax.vmap``/``jit`` only shapes are checked.

    Example (a two-rod arm, horizontal, at rest)::

        chain = PlanarChain.slender_rods([0.3, 0.25], [2.0, 1.5])
        tau = chain_torques(chain, jnp.zeros(2), jnp.zeros(2), jnp.zeros(2))
        # tau[1] = m₂ g l₂/2, tau[0] = m₁ g l₁/2 + m₂ g (l₁ + l₂/2)
    """

    lengths: Float[Array, " n"]
    masses: Float[Array, " n"]
    com_distances: Float[Array, " n"]
    com_angles: Float[Array, " n"]
    inertias: Float[Array, " n"]
    gravity: Float[Array, ""]

    def __init__(self, lengths, masses, com_distances, com_angles, inertias, gravity=9.81):
        lengths = as_float(lengths, "PlanarChain.lengths")
        if lengths.ndim != 1 or lengths.shape[0] < 1:
            raise ValueError(f"PlanarChain.lengths has shape {lengths.shape}, expected (n,) with n >= 1")
        n = lengths.shape[0]
        masses = as_float(masses, "PlanarChain.masses")
        fields = {
            "lengths": lengths,
            "masses": masses,
            "com_distances": as_float(com_distances, "PlanarChain.com_distances"),
            "com_angles": as_float(com_angles, "PlanarChain.com_angles"),
            "inertias": as_float(inertias, "PlanarChain.inertias"),
        }
        for name, value in fields.items():
            if value.shape != (n,):
                raise ValueError(f"PlanarChain.{name} has shape {value.shape}, expected ({n},) (one per link)")
        gravity = as_float(gravity, "PlanarChain.gravity")
        if gravity.shape != ():
            raise ValueError(
                f"PlanarChain.gravity has shape {gravity.shape}, expected () (magnitude g in m/s², along -y)"
            )
        check_values(fields["lengths"], "PlanarChain.lengths", positive=True)
        check_values(fields["masses"], "PlanarChain.masses", positive=True)
        check_values(fields["com_distances"], "PlanarChain.com_distances", nonnegative=True)
        check_values(fields["com_angles"], "PlanarChain.com_angles")
        check_values(fields["inertias"], "PlanarChain.inertias", nonnegative=True)
        check_values(gravity, "PlanarChain.gravity")
        for name, value in fields.items():
            setattr(self, name, value)
        self.gravity = gravity

    @property
    def n(self) -> int:
        """Number of links (static)."""
        return self.lengths.shape[-1]

    @property
    def joint_inertias(self) -> Float[Array, " n"]:
        """``(n,)`` kg·m²: ``I_Ji = I_Ci + m_i l_Ci²`` (Huygens–Steiner), about each link's joint."""
        return self.inertias + self.masses * self.com_distances**2

    @classmethod
    def slender_rods(cls, lengths, masses, gravity=9.81) -> PlanarChain:
        """Uniform slender rods (the Appendix A chains): COM at mid-length on the axis
        (``l_C = l/2``, ``ε_C = 0``) and ``I_C = m l²/12``, so ``I_J = m l²/3``."""
        lengths = as_float(lengths, "PlanarChain.lengths")
        masses = as_float(masses, "PlanarChain.masses")
        return cls(lengths, masses, lengths / 2, jnp.zeros_like(lengths), masses * lengths**2 / 12, gravity)

    def to_tree(self, name: str = "planar_chain", out_of_plane_inertia: ArrayLike | None = None) -> SegmentTree:
        """The same chain as a `jaxbio.SegmentTree` (planar convention: revolute axes +z, gravity
        ``(0, -g, 0)``), so that the wrench recursion (``jb.inverse_dynamics``,
        ``jb.segment_wrenches``) and Pinocchio can be compared with the closed forms.

        Segment ``a`` (named ``link{a+1}``) has its frame at ``J_{a+1}`` with its x-axis along
        ``û_a``: its coordinate is the *joint* angle ``q_a = α_{a+1}`` (`link_to_joint_angles`) and at
        ``q = 0`` the chain lies along +x. COM ``(l_C cos ε_C, l_C sin ε_C, 0)``; inertia about the COM
        ``diag(I_⊥, I_⊥, I_C)`` with ``I_⊥ = out_of_plane_inertia`` (default ``I_C``; it does not
        enter planar motion). Built directly (no ``from_dict`` validation), so it also works on traced
        chains; ``tree.to_dict()`` gives the JSON layout.
        """
        n = self.n
        dt = self.lengths.dtype
        zeros = jnp.zeros((n,), dt)
        origins = jnp.stack([jnp.concatenate([zeros[:1], self.lengths[:-1]]), zeros, zeros], axis=-1)
        coms = jnp.stack(
            [self.com_distances * jnp.cos(self.com_angles), self.com_distances * jnp.sin(self.com_angles), zeros],
            axis=-1,
        )
        perp = (
            self.inertias
            if out_of_plane_inertia is None
            else jnp.broadcast_to(jnp.asarray(out_of_plane_inertia, dt), (n,))
        )
        inertias = jnp.zeros((n, 3, 3), dt).at[:, 0, 0].set(perp).at[:, 1, 1].set(perp).at[:, 2, 2].set(self.inertias)
        return SegmentTree(
            axes=jnp.tile(jnp.asarray([0.0, 0.0, 1.0], dt), (n, 1)),
            origins=origins,
            orientations=jnp.tile(jnp.asarray([1.0, 0.0, 0.0, 0.0], dt), (n, 1)),
            masses=self.masses,
            coms=coms,
            inertias=inertias,
            gravity=jnp.stack([jnp.zeros((), dt), -self.gravity.astype(dt), jnp.zeros((), dt)]),
            names=tuple(f"link{a + 1}" for a in range(n)),
            parents=tuple(range(-1, n - 1)),
            joint_types=("revolute",) * n,
            name=name,
        )

    def _arrays(self):
        return (self.lengths, self.masses, self.com_distances, self.com_angles, self.inertias, self.gravity)


class LinearMuscles(eqx.Module):
    """Straight-line muscle actuators of a `PlanarChain` (Biscarini 2021: force ``F_ij^m`` on link ``i``
    from muscle ``m`` joining links ``i`` and ``j``).

    Muscle ``m`` joins ``origin_links[m]`` and ``insertion_links[m]`` (link indices ``0 … n-1``, or
    ``BASE = -1`` for the fixed base; they must differ) and spans every joint between them: a muscle
    from link ``p`` to link ``d > p`` spans joints ``p + 1 … d`` (0-based), ``d − p`` joints in all
    (1 … n). Its force pair is equal and opposite (``F_ij = −F_ji``), along the line between
    ``origin_points[m]`` and ``insertion_points[m]`` (``(M, 2)`` m, link-fixed coordinates of the
    respective links, world coordinates for the base; see the module docstring).

    Static: ``origin_links``, ``insertion_links``, ``n_links``, ``names``; array leaves: the points.
    """

    origin_points: Float[Array, "M 2"]
    insertion_points: Float[Array, "M 2"]
    origin_links: tuple[int, ...] = eqx.field(static=True)
    insertion_links: tuple[int, ...] = eqx.field(static=True)
    n_links: int = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        chain_or_n: PlanarChain | int,
        origin_links: Sequence[int],
        insertion_links: Sequence[int],
        origin_points,
        insertion_points,
        names=None,
    ):
        n = _n_links(chain_or_n)
        origin_links, insertion_links = tuple(origin_links), tuple(insertion_links)
        if len(origin_links) != len(insertion_links):
            raise ValueError(
                f"LinearMuscles: {len(origin_links)} origin links but {len(insertion_links)} insertion links"
            )
        count = len(origin_links)
        names = _names(names, count, "muscle")
        self.origin_links = _link_indices(origin_links, n, "muscle", names, allow_base=True)
        self.insertion_links = _link_indices(insertion_links, n, "muscle", names, allow_base=True)
        for j, (o, s) in enumerate(zip(self.origin_links, self.insertion_links)):
            if o == s:
                where = "the base" if o == BASE else f"link {o}"
                raise ValueError(
                    f"muscle {names[j]!r}: origin and insertion are both on {where}; a muscle must "
                    "join two different links and span at least one joint"
                )
        self.origin_points = _points(origin_points, count, "LinearMuscles.origin_points")
        self.insertion_points = _points(insertion_points, count, "LinearMuscles.insertion_points")
        self.n_links = n
        self.names = names

    @property
    def count(self) -> int:
        """Number of muscles ``M``."""
        return len(self.origin_links)

    @property
    def proximal_links(self) -> np.ndarray:
        """``(M,)`` int, static: the more proximal attached link (``-1`` for the base)."""
        return np.minimum(np.asarray(self.origin_links, int), np.asarray(self.insertion_links, int)).reshape(-1)

    @property
    def distal_links(self) -> np.ndarray:
        """``(M,)`` int, static: the more distal attached link."""
        return np.maximum(np.asarray(self.origin_links, int), np.asarray(self.insertion_links, int)).reshape(-1)

    @property
    def spans(self) -> np.ndarray:
        """``(n, M)`` bool, static: ``spans[r, m]`` is true when muscle ``m`` spans joint ``r``."""
        r = np.arange(self.n_links)[:, None]
        return (self.proximal_links[None, :] < r) & (r <= self.distal_links[None, :])


class ResistancePoints(eqx.Module):
    """Points of the links where contact external resistances ``R_i`` act (Biscarini 2021, Figure 1).

    ``links``: static, link index ``0 … n-1`` of each contact (several contacts may share a link:
    the paper's discussion reduces them to their resultant; the base takes no contact here — its
    load enters only the proximal form, as ``base_load``). ``points``: ``(C, 2)`` m, link-fixed
    coordinates ``(l_R cos ε_R, l_R sin ε_R)`` of ``P_Ri``. The forces themselves are per-frame inputs
    (``contact_forces``, ``(C, 2)`` N, world frame), so that a ground or hand reaction can vary.

    These are load points of the closed form, not constraints: a point held on the ground is a
    `jaxbio.dynamics.Contact`.
    """

    points: Float[Array, "C 2"]
    links: tuple[int, ...] = eqx.field(static=True)
    n_links: int = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, chain_or_n: PlanarChain | int, links: Sequence[int], points, names=None):
        n = _n_links(chain_or_n)
        links = tuple(links)
        names = _names(names, len(links), "contact")
        self.links = _link_indices(links, n, "contact", names, allow_base=False)
        self.points = _points(points, len(links), "ResistancePoints.points")
        self.n_links = n
        self.names = names

    @property
    def count(self) -> int:
        """Number of contacts ``C``."""
        return len(self.links)


# ---------------------------------------------------------------------------------------------------
# Angles
# ---------------------------------------------------------------------------------------------------


def joint_to_link_angles(q: Float[ArrayLike, "... n"]) -> Float[Array, "... n"]:
    """Absolute link angles ``θ_k = Σ_{i≤k} α_i`` (rad) from joint angles ``α`` (the ``q`` of
    ``PlanarChain.to_tree()``), along the last axis. Linear, so it also maps velocities and
    accelerations (``θ̇ = cumsum(q̇)``, ``θ̈ = cumsum(q̈)``). Biscarini 2021, Appendix A: ``θ_k = Σ_{i=1}^k α_i``."""
    return jnp.cumsum(jnp.asarray(q), axis=-1)


def link_to_joint_angles(theta: Float[ArrayLike, "... n"]) -> Float[Array, "... n"]:
    """Joint angles ``α_1 = θ_1``, ``α_k = θ_k − θ_{k−1}`` (rad) from absolute link angles, along
    the last axis; the inverse of `joint_to_link_angles` (also for rates)."""
    theta = jnp.asarray(theta)
    return jnp.diff(theta, axis=-1, prepend=jnp.zeros_like(theta[..., :1]))


# ---------------------------------------------------------------------------------------------------
# Loads
# ---------------------------------------------------------------------------------------------------


def _matmul(a: np.ndarray, x):
    """Static ``(p, q)`` numpy matrix times ``(q, ...)`` array (full precision on every backend)."""
    return jnp.tensordot(jnp.asarray(a, x.dtype), x, axes=1, precision=jax.lax.Precision.HIGHEST)


def _onehot(links, n: int) -> np.ndarray:
    """``(n, K)`` float: ``[a, j] = 1`` where ``links[j] == a`` (rows for links ``0 … n-1`` only)."""
    links = np.asarray(links, dtype=int).reshape(-1)
    return np.asarray(links[None, :] == np.arange(n)[:, None], dtype=float)


def _link_frames(chain: PlanarChain, theta):
    """World origins ``J_1 … J_n`` ``(n, 3)`` m and attitudes ``(n, 4)`` of the links: jaxbio's
    forward kinematics on ``chain.to_tree()`` (link ``a``'s frame at ``J_{a+1}``, x along ``û_a``)
    at the joint angles `link_to_joint_angles` ``(theta)``."""
    return forward_kinematics(chain.to_tree(), link_to_joint_angles(theta))


def _world_points(frames, links: np.ndarray, points):
    """``(K, 2)`` m, world positions of link-fixed ``points`` ``(K, 2)`` on ``links`` (static,
    ``-1`` = base, whose points are world points); ``frames`` from `_link_frames`."""
    positions, attitudes = frames
    idx = np.maximum(links, 0)
    local = jnp.concatenate([points, jnp.zeros_like(points[:, :1])], axis=-1)
    on_link = (positions[idx] + quat.rotate(attitudes[idx], local))[:, :2]
    return jnp.where(np.asarray(links < 0)[:, None], points, on_link)


def _attachments(frames, muscles: LinearMuscles):
    """World ``(origin, insertion)`` attachment points, each ``(M, 2)`` m."""
    return (
        _world_points(frames, np.asarray(muscles.origin_links), muscles.origin_points),
        _world_points(frames, np.asarray(muscles.insertion_links), muscles.insertion_points),
    )


def _distal_muscle_forces(frames, muscles: LinearMuscles, tensions, check: bool):
    """``(P_d, F_d)``, each ``(M, 2)``: world attachment point on the distal link, and the force the
    muscle exerts on it (towards the proximal attachment), ``F_{j2 j1}^m`` of Biscarini 2021."""
    p_org, p_ins = _attachments(frames, muscles)
    ins_distal = np.asarray(muscles.insertion_links) > np.asarray(muscles.origin_links)
    p_dist = jnp.where(ins_distal[:, None], p_ins, p_org)
    p_prox = jnp.where(ins_distal[:, None], p_org, p_ins)
    # Always checked (also under jit/vmap): a muscle whose attachment points coincide has no line
    # of action, and a zero force would be a plausible wrong number.
    d = p_prox - p_dist
    d = eqx.error_if(d, ~jnp.all(norm(d) > 0), "a muscle has zero length (its attachment points coincide)")
    forces = tensions[:, None] * unit(d, jnp.zeros_like(d))  # NaN-free, finite gradients at zero length
    return p_dist, (_finite(forces, "muscle forces", True) if check else forces)


def _contact_terms(chain: PlanarChain, contacts: ResistancePoints | None, theta, contact_forces):
    """``(link_forces (n, 2) N, contact_moments (n,) N·m)``: per link, the sum of its contact forces
    and their moment about its own joint ``J_k`` (``R_k l_Rk sin(γ_Rk − ε_Rk)`` in the paper)."""
    n = chain.n
    dt = theta.dtype
    if contacts is None or contacts.count == 0:
        return jnp.zeros((n, 2), dt), jnp.zeros((n,), dt)
    links = np.asarray(contacts.links)
    u, w = terms.directions(theta)
    arm = contacts.points[:, :1] * u[links] + contacts.points[:, 1:] * w[links]
    per_contact = jnp.concatenate([contact_forces, terms.cross2(arm, contact_forces)[:, None]], axis=1)
    summed = _matmul(_onehot(links, n), per_contact)  # (n, 3)
    return summed[:, :2], summed[:, 2]


def _check_muscles(chain, muscles, tensions, dtype):
    if muscles is None:
        if tensions is not None:
            raise ValueError("tensions given without muscles")
        return None
    if not isinstance(muscles, LinearMuscles):
        raise ValueError(f"muscles must be a LinearMuscles, got {type(muscles).__name__}")
    if muscles.n_links != chain.n:
        raise ValueError(f"muscles were built for {muscles.n_links} links, the chain has {chain.n}")
    if tensions is None:
        raise ValueError(f"muscles given without tensions: expected ({muscles.count},) N")
    return _state(tensions, muscles.count, "tensions").astype(dtype)


def _check_contacts(chain, contacts, contact_forces, dtype):
    if contacts is None:
        if contact_forces is not None:
            raise ValueError("contact_forces given without contacts")
        return None
    if not isinstance(contacts, ResistancePoints):
        raise ValueError(f"contacts must be a ResistancePoints, got {type(contacts).__name__}")
    if contacts.n_links != chain.n:
        raise ValueError(f"contacts were built for {contacts.n_links} links, the chain has {chain.n}")
    if contact_forces is None:
        raise ValueError(f"contacts given without contact_forces: expected ({contacts.count}, 2) N")
    return _state(contact_forces, None, "contact_forces", (contacts.count, 2)).astype(dtype)


def _kinematics(chain, theta, theta_dot, theta_ddot):
    n = chain.n
    theta = _state(theta, n, "theta")
    theta_dot = _state(theta_dot, n, "theta_dot")
    theta_ddot = _state(theta_ddot, n, "theta_ddot")
    return theta, theta_dot, theta_ddot


def _form_and_base(form, base_load, dtype):
    check_choice(form, _FORMS, "form")
    if form == "distal":
        if base_load is not None:
            raise ValueError("base_load is used by form='proximal' only (eqs. 10, 24)")
        return None
    if base_load is None:
        raise ValueError("form='proximal' needs base_load = m0 g + R0, (2,) N (see base_load_from_balance)")
    return _state(base_load, None, "base_load", (2,)).astype(dtype)


def _finite(x, name, check):
    return finite(x, name) if check else x


_public = functools.partial(jax.jit, static_argnames=("form", "check"))


# ---------------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("check",))
def muscle_forces(
    chain: PlanarChain,
    muscles: LinearMuscles,
    theta: Float[ArrayLike, " n"],
    tensions: Float[ArrayLike, " M"],
    *,
    check: bool = False,
) -> tuple[Float[Array, "M 2"], Float[Array, "M 2"]]:
    """World-frame muscle forces on the insertion and origin links.

    Args:
        chain, muscles: the model.
        theta: ``(n,)`` rad, absolute link angles.
        tensions: ``(M,)`` N, muscle tensions (positive pulls the attachments together).
        check: if true, NaN/inf in the forces raise (`equinox.error_if`, also under jit). A muscle
            of zero length (attachment points coincide: no line of action) always raises.

    Returns:
        ``(on_insertion, on_origin)``, each ``(M, 2)`` N, world frame, equal and opposite.
    """
    theta = _state(theta, chain.n, "theta")
    tensions = _check_muscles(chain, muscles, tensions, theta.dtype)
    return _insertion_origin_forces(_link_frames(chain, theta), muscles, tensions, check)


def _insertion_origin_forces(frames, muscles, tensions, check):
    _, f_dist = _distal_muscle_forces(frames, muscles, tensions, check)
    ins_distal = (np.asarray(muscles.insertion_links) > np.asarray(muscles.origin_links))[:, None]
    on_insertion = jnp.where(ins_distal, f_dist, -f_dist)
    return on_insertion, -on_insertion


@functools.partial(jax.jit, static_argnames=("check",))
def muscle_joint_forces(
    chain: PlanarChain,
    muscles: LinearMuscles,
    theta: Float[ArrayLike, " n"],
    tensions: Float[ArrayLike, " M"],
    *,
    check: bool = False,
) -> Float[Array, "n 2"]:
    """``F^M_{k,k+1}`` (Biscarini 2021, eq. 12): for each joint, the sum of the forces that the muscles
    spanning it exert on their distal link, independent of where they attach. ``(n, 2)`` N, world
    frame; row ``r`` is joint ``r``. Arguments as in `muscle_forces`."""
    theta = _state(theta, chain.n, "theta")
    tensions = _check_muscles(chain, muscles, tensions, theta.dtype)
    _, f_dist = _distal_muscle_forces(_link_frames(chain, theta), muscles, tensions, check)
    return _spanning_sum(muscles, f_dist)


def _spanning_sum(muscles, per_muscle):
    """``(n, ...)``: for each joint, the sum of ``per_muscle`` ``(M, ...)`` over the muscles spanning it."""
    return _matmul(np.asarray(muscles.spans, dtype=float), per_muscle)


@functools.partial(jax.jit, static_argnames=("check",))
def muscle_torques(
    chain: PlanarChain,
    muscles: LinearMuscles,
    theta: Float[ArrayLike, " n"],
    tensions: Float[ArrayLike, " M"],
    *,
    check: bool = False,
) -> Float[Array, " n"]:
    """Joint torques produced by the muscles, Biscarini 2021, eq. 22:

        τ_k = Σ_{muscles m spanning joint k} (J_k P_{j2 j1}^m × F_{j2 j1}^m) · k̂,

    the moment about ``J_k`` of the force each spanning muscle exerts on its distal link ``j2``.
    ``(n,)`` N·m, positive counter-clockwise on the distal links. The equation of motion of the
    muscle-driven chain is ``muscle_torques(...) == chain_torques(...)``. Arguments as in
    `muscle_forces`.
    """
    theta = _state(theta, chain.n, "theta")
    tensions = _check_muscles(chain, muscles, tensions, theta.dtype)
    frames = _link_frames(chain, theta)
    p_dist, f_dist = _distal_muscle_forces(frames, muscles, tensions, check)
    J = frames[0][:, :2]
    summed = _spanning_sum(muscles, jnp.concatenate([f_dist, terms.cross2(p_dist, f_dist)[:, None]], axis=1))
    return summed[:, 2] - terms.cross2(J, summed[:, :2])  # Σ (P − J_k) × F


@_public
def chain_reactions(
    chain: PlanarChain,
    theta: Float[ArrayLike, " n"],
    theta_dot: Float[ArrayLike, " n"],
    theta_ddot: Float[ArrayLike, " n"],
    muscles: LinearMuscles | None = None,
    tensions: Float[ArrayLike, " M"] | None = None,
    contacts: ResistancePoints | None = None,
    contact_forces: Float[ArrayLike, "C 2"] | None = None,
    *,
    form: str = "distal",
    base_load: Float[ArrayLike, 2] | None = None,
    check: bool = False,
) -> Float[Array, "n 2"]:
    """Closed-form joint reaction forces of the chain (Biscarini 2021, eqs. 8–11).

    ``form="distal"`` (eq. 9, and eq. 8's second form for joint 1, eq. 11's first for joint n):

        ϕ_{k,k+1} = Σ_{i>k} (m_i g + R_i) + F^M_{k,k+1} − Σ_{i>k} m_i a_Ci,

    with the inertial sum in closed form (eq. 6: link angles, ``θ̇²`` and ``θ̈`` only) and ``F^M`` the
    forces of the muscles spanning the joint (eq. 12). ``form="proximal"`` (eq. 10, eq. 8's first
    form): ``ϕ_{k,k+1} = −Σ_{i=0}^{k} (m_i g + R_i) + F^M_{k,k+1} + Σ_{i≤k} m_i a_Ci`` (eq. 7), using the
    base load ``m₀g + R₀`` and the loads proximal to each joint. The two agree when ``base_load``
    satisfies the whole-chain balance eq. 4 (`base_load_from_balance`).

    Args:
        chain: the model.
        theta, theta_dot, theta_ddot: ``(n,)`` rad, rad/s, rad/s², absolute link angles and their
            rates (the paper's ``θ_i``, ``θ̇_i``, ``θ̈_i``; `joint_to_link_angles` converts).
        muscles, tensions: optional `LinearMuscles` and their ``(M,)`` N tensions.
        contacts, contact_forces: optional `ResistancePoints` and their ``(C, 2)`` N world-frame forces.
        form: ``"distal"`` or ``"proximal"`` (static).
        base_load: ``(2,)`` N, world frame, ``m₀g + R₀`` (proximal form only).
        check: if true, NaN/inf in the result raise (`equinox.error_if`); a zero-length muscle
            always raises.

    Returns:
        ``(n, 2)`` N, world frame: row ``r`` is ``ϕ_{r,r+1}`` (the paper's 1-based indices), the force
        through joint ``r`` on the proximal link (``r − 1``, or the base for ``r = 0``) from the
        distal link ``r``. Its negative acts on link ``r`` and equals the planar part of
        ``jb.segment_wrenches(chain.to_tree(), ...)[0][r]`` when the muscle and contact forces are
        passed as external wrenches (`external_wrenches`).
    """
    theta, theta_dot, theta_ddot = _kinematics(chain, theta, theta_dot, theta_ddot)
    dt = theta.dtype
    tensions = _check_muscles(chain, muscles, tensions, dt)
    contact_forces = _check_contacts(chain, contacts, contact_forces, dt)
    base_load = _form_and_base(form, base_load, dt)

    f = terms.Frame(chain._arrays(), theta, theta_dot, theta_ddot)
    link_forces, _ = _contact_terms(chain, contacts, theta, contact_forces)
    loads = f.loads(link_forces)  # m_i g + R_i
    if muscles is None or muscles.count == 0:
        spanning = jnp.zeros_like(loads)
    else:
        _, f_dist = _distal_muscle_forces(_link_frames(chain, theta), muscles, tensions, check)
        spanning = _spanning_sum(muscles, f_dist)  # eq. 12
    if form == "distal":  # eq. 9 with eq. 6
        out = terms.suffix(loads) + loads + spanning - terms.distal_inertial_sums(f)
    else:  # eq. 10 with eq. 7
        out = -base_load - terms.prefix(loads) + spanning + terms.proximal_inertial_sums(f)
    return _finite(out, "chain_reactions result", check)


@_public
def chain_torques(
    chain: PlanarChain,
    theta: Float[ArrayLike, " n"],
    theta_dot: Float[ArrayLike, " n"],
    theta_ddot: Float[ArrayLike, " n"],
    contacts: ResistancePoints | None = None,
    contact_forces: Float[ArrayLike, "C 2"] | None = None,
    *,
    form: str = "distal",
    base_load: Float[ArrayLike, 2] | None = None,
    check: bool = False,
) -> Float[Array, " n"]:
    """Closed-form joint torques of the chain (Biscarini 2021, eqs. 13, 20–24).

    ``τ_k`` is the moment about ``J_k`` that the muscles spanning joint ``k`` must exert on the links
    distal to it (eq. 22) for the given motion and loads; the muscle forces themselves do not appear.
    ``form="distal"``: eq. 23 (eq. 13 for the last joint), the sum from the tip of the per-link
    moment equations 20 with the inertial factors of eqs. 17–18: weights and contact forces of the
    links distal to each joint, and only ``θ̈_i`` and centripetal ``θ̇_i²`` terms (no Coriolis
    products). ``form="proximal"``: eq. 24 from eqs. 21 and 19, using ``base_load = m₀g + R₀`` and the
    loads proximal to each joint instead of those distal to it.

    Args:
        chain: the model.
        theta, theta_dot, theta_ddot: ``(n,)`` rad, rad/s, rad/s², absolute link angles and rates.
        contacts, contact_forces: optional `ResistancePoints` and their ``(C, 2)`` N world-frame forces.
        form: ``"distal"`` or ``"proximal"`` (static).
        base_load: ``(2,)`` N, world frame, ``m₀g + R₀`` (proximal form only).
        check: if true, NaN/inf in the result raise (`equinox.error_if`).

    Returns:
        ``(n,)`` N·m, positive counter-clockwise (+z) on the distal link: equal to
        ``jb.inverse_dynamics(chain.to_tree(), q, q̇, q̈, external)`` with ``q`` the joint angles and
        the contact forces as external wrenches.
    """
    theta, theta_dot, theta_ddot = _kinematics(chain, theta, theta_dot, theta_ddot)
    dt = theta.dtype
    contact_forces = _check_contacts(chain, contacts, contact_forces, dt)
    base_load = _form_and_base(form, base_load, dt)
    link_forces, contact_moments = _contact_terms(chain, contacts, theta, contact_forces)
    f = terms.Frame(chain._arrays(), theta, theta_dot, theta_ddot)
    if form == "distal":
        diff = terms.distal_torque_differences(f, link_forces, contact_moments)
    else:
        diff = terms.proximal_torque_differences(f, link_forces, contact_moments, base_load)
    return _finite(terms.sum_from_tip(diff), "chain_torques result", check)


@jax.jit
def base_load_from_balance(
    chain: PlanarChain,
    theta: Float[ArrayLike, " n"],
    theta_dot: Float[ArrayLike, " n"],
    theta_ddot: Float[ArrayLike, " n"],
    contacts: ResistancePoints | None = None,
    contact_forces: Float[ArrayLike, "C 2"] | None = None,
) -> Float[Array, 2]:
    """``m₀g + R₀`` ``(2,)`` N, world frame, from the force equation of the whole system (Biscarini 2021
    eq. 4, ``Σ_{i=0}^{n} (m_i g + R_i) = Σ_i m_i a_Ci`` with ``a_C0 = 0``): the base load that makes the
    proximal forms (eqs. 10, 24) agree with the distal ones. Muscle forces are internal and cancel.
    Arguments as in `chain_torques`."""
    theta, theta_dot, theta_ddot = _kinematics(chain, theta, theta_dot, theta_ddot)
    contact_forces = _check_contacts(chain, contacts, contact_forces, theta.dtype)
    f = terms.Frame(chain._arrays(), theta, theta_dot, theta_ddot)
    link_forces, _ = _contact_terms(chain, contacts, theta, contact_forces)
    return terms.distal_inertial_sums(f)[0] - jnp.sum(f.loads(link_forces), axis=0)


@jax.jit
def external_wrenches(
    chain: PlanarChain,
    theta: Float[ArrayLike, " n"],
    muscles: LinearMuscles | None = None,
    tensions: Float[ArrayLike, " M"] | None = None,
    contacts: ResistancePoints | None = None,
    contact_forces: Float[ArrayLike, "C 2"] | None = None,
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """The muscle and contact forces as the ``external`` argument of ``jb.inverse_dynamics`` /
    ``jb.segment_wrenches`` on ``chain.to_tree()``: ``(forces (n, 3) N, moments (n, 3) N·m)``,
    world frame, moments about each link's joint centre ``J_k`` (z-components only in the plane).

    Each muscle puts its equal and opposite force pair on its two links at their attachment points
    (the share on the base, if any, is dropped: the base is the world). Arguments as in
    `chain_reactions`.
    """
    theta = _state(theta, chain.n, "theta")
    dt = theta.dtype
    tensions = _check_muscles(chain, muscles, tensions, dt)
    contact_forces = _check_contacts(chain, contacts, contact_forces, dt)
    n = chain.n
    frames = _link_frames(chain, theta)
    J = frames[0][:, :2]
    forces = jnp.zeros((n, 2), dt)
    moments = jnp.zeros((n,), dt)
    if contacts is not None and contacts.count:
        link_forces, contact_moments = _contact_terms(chain, contacts, theta, contact_forces)
        forces, moments = forces + link_forces, moments + contact_moments
    if muscles is not None and muscles.count:
        p_org, p_ins = _attachments(frames, muscles)
        on_ins, on_org = _insertion_origin_forces(frames, muscles, tensions, False)
        for links, p, f in ((muscles.insertion_links, p_ins, on_ins), (muscles.origin_links, p_org, on_org)):
            onehot = _onehot(links, n)  # a base attachment has no row
            summed = _matmul(onehot, jnp.concatenate([f, terms.cross2(p, f)[:, None]], axis=1))
            forces = forces + summed[:, :2]
            moments = moments + summed[:, 2] - terms.cross2(J, summed[:, :2])  # about J_k
    zeros = jnp.zeros((n, 1), dt)
    return (jnp.concatenate([forces, zeros], axis=1), jnp.concatenate([zeros, zeros, moments[:, None]], axis=1))
