"""Inverse simulation of a hybrid muscle/torque-actuated floating-base body (Blajer et al. 2007, §2).

Given a measured motion ``q, q̇, q̈`` find the controls ``u = [F₁ … F_mF, τ₁ … τ_mτ]`` (muscle
forces ≥ 0 and joint torques) that force the body through it (Blajer, Dziewiecki & Mazur, part II).
The equations of motion in jaxbio's form are

    M(q) q̈ + bias(q, q̇) = B(q) u + Cᵀ(q) λ,      B = [Rᵀ | E_τ],

with ``bias = C(q,q̇)q̇ + g(q)`` (`jaxbio.bias_forces`; Blajer et al. 2007 write ``d̄ − f̄_g``), ``R`` the
muscle moment arms (`jaxbio.muscles.geometry.moment_arms`, ``r = −∂l/∂q``), ``E_τ`` unit columns
for the torque-actuated coordinates and ``λ`` the ground reactions (support phase only). Write
``f = M q̈ + bias``, ``J`` the actuated (joint) coordinates and ``U`` the unactuated base ones. Since
muscles and joint torques are internal, ``B = B̄′ S`` with ``B̄′ = [e_j]_{j∈J}`` (Blajer et al.'s (2007) B̄′:
here the joint coordinates are relative angles, so B̄′ is a selection and its orthogonal complement
Ā′ selects the base coordinates ``U``) and ``S = B[J]`` the joint-moment matrix.

**Flying phase** (no contacts):

- uncontrolled subspace (Blajer et al. 2007, eq. 2): ``a = Ā′ f = f[U]`` must vanish (the mass centre moves
  on a parabola and the angular momentum about it is constant); it is the consistency check of
  the measured motion and is returned as ``uncontrolled_residual`` (N, N, N·m for sagittal11).
- controlled subspace (eqs. 3–5): ``H′ = B̄′ᵀM⁻¹B̄′``, ``h = B̄′ᵀq̈ + B̄′ᵀM⁻¹ bias``, the joint
  moments ``u′ = H′⁻¹h`` (``required_moments``), which reproduce the measured *joint* accelerations
  exactly even when ``a ≠ 0``; for a consistent motion they equal inverse dynamics' joint moments.
- redundancy (eqs. 4, 6): ``H = B̄′ᵀM⁻¹B̄ = H′S``, ``u = H†h``. It is computed on eq. 4
  premultiplied by ``H′⁻¹`` (eq. 5), i.e. ``S u = u′``: the same solution set, hence the same
  minimum-norm and clamped solutions, without the ``M⁻¹`` row scaling (toes vs. trunk: 10⁴).

**Support phase** (``contacts``: segments fixed to the ground, no slip): the contact Jacobian
``C`` (r × n; per contact the world x, y velocity of its point and, for a welded contact, the
segment's angular velocity) and ``D̄`` (n × k, k = n − r, orthonormal, ``C D̄ = 0``, the basis of
the unconstrained subspace of eq. I.9), then eqs. 7–8: ``H′ = D̄ᵀB̄′``, ``h = D̄ᵀf``,
``H = D̄ᵀB̄ = H′S`` and ``u = H†h`` (eq. 6). The ground reactions ``λ = (CCᵀ)⁻¹C(f − Bu)`` (the
role of eq. I.16) and the contact acceleration ``C q̈ + Ċq̇`` (must vanish for a consistent motion)
are returned. With one foot welded (flat), ``r = 3`` and ``k = 8`` equals the number of joints (as in Blajer et al.
2007), so the joint moments ``u′ = H′⁻¹h`` are unique; with both feet down they are not and
``required_moments`` is the least-norm one.

Redundancy and the sign of muscle forces: `jaxbio.estimation.pseudoinverse.clamped_pseudoinverse`
(eq. 6, negative muscle forces clamped and the solve repeated; torques are never clamped).
``moment_residual`` is the joint moment the controls fail to produce (produced − required, N·m);
`unproducible_moments` turns it into a list of (frame, joint) for a motion.

Joint reactions both ways (Blajer et al. 2007, §3, closing remark). With the controls identified, the hip,
knee and ankle reactions follow from eq. 16 (`jaxbio.dynamics.reactions_augmented`) with either
actuation: ``f_u = B u`` — every muscle force applied as its force pair on the segments it
attaches to (`jaxbio.muscles.geometry.muscle_wrenches`, external wrenches) plus the remaining
torques — or ``f_u = B′u′`` — the same generalised force as net joint torques only, the muscles'
pulls on the bones neglected. `actuation_loads` builds both, `joint_reactions` evaluates them.
The joint moments agree; the reaction forces of a joint differ by the muscle forces crossing it.

D̄ is differentiable: a basis ``V₀`` of the null space of ``C`` from an SVD (no gradient) is carried
along by the projector ``P(q) = I − Cᵀ(CCᵀ)⁻¹C``, ``D̄ = P(q) V₀`` (equal to ``V₀`` at q). The
controls do not depend on which basis is used, so their derivatives are exact.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio._linalg import spd_solve
from jaxbio._validate import check_choice, check_finite, concrete, is_concrete
from jaxbio.dynamics.contact import Contact, check_contacts, contact_external, contact_terms, contact_wrenches
from jaxbio.dynamics import bias_forces, mass_matrix
from jaxbio.estimation.pseudoinverse import PseudoinverseSolution, clamped_pseudoinverse
from jaxbio.dynamics.constrained import reactions_augmented
from jaxbio.muscles.geometry import MusclePaths, moment_arms, muscle_wrenches
from jaxbio.tree import SegmentTree

__all__ = [
    "InverseSimulationModel",
    "InverseSimulationResult",
    "actuation_loads",
    "control_matrix",
    "joint_reactions",
    "inverse_simulation",
    "inverse_simulate_motion",
    "unproducible_moments",
]


class InverseSimulationModel(eqx.Module):
    """A floating-base tree with muscles and torque actuators (Blajer et al.'s (2007) hybrid control).

    - ``tree``: the `SegmentTree` (``n`` coordinates).
    - ``paths``: `MusclePaths` of the ``m_F`` muscles on ``tree``.
    - ``torque_coordinates``: static, the coordinates with a torque actuator (``m_τ`` of them).
    - ``unactuated``: static, the base coordinates with no actuator (Blajer et al.'s (2007) uncontrolled
      subspace, ``Ā′``). Every other coordinate is a joint (``B̄′``).
    - ``parameters``: optional muscle parameters (carried along, not used here).

    Controls are ordered ``u = [muscle forces (N), torques (N·m)]``. Build with `build` (names).
    """

    tree: SegmentTree
    paths: MusclePaths
    torque_coordinates: tuple[int, ...] = eqx.field(static=True)
    unactuated: tuple[int, ...] = eqx.field(static=True)
    parameters: object = None

    def __check_init__(self):
        n = len(self.tree.names)
        for field in ("torque_coordinates", "unactuated"):
            idx = getattr(self, field)
            if any(not 0 <= i < n for i in idx) or len(set(idx)) != len(idx):
                raise ValueError(f"InverseSimulationModel.{field} = {idx}: indices must be distinct and in [0, {n})")
        both = set(self.torque_coordinates) & set(self.unactuated)
        if both:
            raise ValueError(
                f"coordinates {[self.tree.names[i] for i in sorted(both)]} are both torque-actuated and unactuated"
            )
        if not self.joints:
            raise ValueError("InverseSimulationModel: every coordinate is unactuated")

    @classmethod
    def build(
        cls,
        tree: SegmentTree,
        paths: MusclePaths,
        *,
        torque_joints: Sequence[str] = (),
        unactuated: Sequence[str] = (),
        parameters=None,
    ) -> InverseSimulationModel:
        """From coordinate (segment) names; ValueError naming an unknown one."""

        def idx(names, what):
            out = []
            for nm in names:
                if nm not in tree.names:
                    raise ValueError(
                        f"{what}: no coordinate {nm!r} in model {tree.name!r}; coordinates are {list(tree.names)}"
                    )
                out.append(tree.names.index(nm))
            return tuple(out)

        return cls(tree, paths, idx(torque_joints, "torque_joints"), idx(unactuated, "unactuated"), parameters)

    @property
    def joints(self) -> tuple[int, ...]:
        """Static: the actuated (joint) coordinates ``J``, in coordinate order."""
        return tuple(i for i in range(len(self.tree.names)) if i not in self.unactuated)

    @property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(self.tree.names[i] for i in self.joints)

    @property
    def n_muscles(self) -> int:
        return self.paths.n_muscles

    @property
    def n_controls(self) -> int:
        return self.paths.n_muscles + len(self.torque_coordinates)

    @property
    def control_names(self) -> tuple[str, ...]:
        return tuple(self.paths.names) + tuple(f"torque_{self.tree.names[i]}" for i in self.torque_coordinates)

    @property
    def nonnegative(self) -> np.ndarray:
        """``(m,)`` bool, static: true for the muscle forces."""
        return np.arange(self.n_controls) < self.n_muscles


class InverseSimulationResult(eqx.Module):
    """Controls and residuals of one frame (leading frame axis after `inverse_simulate_motion`).

    - ``muscle_forces``: ``(m_F,)`` N, ≥ 0.
    - ``torques``: ``(m_τ,)`` N·m, the torque actuators.
    - ``joint_moments``: ``(k_J,)`` N·m (N for a prismatic joint), ``S u``, the moments the controls
      produce at the joints ``model.joints``.
    - ``required_moments``: ``(k_J,)`` N·m, ``u′`` of Blajer et al. 2007, eq. 5 (flying phase) or its support
      analogue (eq. 7; least-norm when not unique).
    - ``moment_residual``: ``(k_J,)`` N·m, the joint moment the controls fail to produce (produced
      − required; ~0 unless a joint lacks the actuators for its load).
    - ``uncontrolled_residual``: ``(len(unactuated),)`` generalised forces on the base coordinates
      left unexplained (flying: Blajer et al. 2007, eq. 2, ``Ā′(M̄q̈ + d̄ − f̄_g)``; support: after the ground
      reactions); ~0 for a consistent motion. N (prismatic) / N·m (revolute).
    - ``ground_reaction``: ``(r,)`` the contact reactions on the body, per contact world Fx, Fy (N)
      at the contact point and, for a welded contact, the moment Mz about it (N·m); empty in flight.
    - ``constraint_residual``: ``(r,)`` ``C q̈ + Ċ q̇``, acceleration of the contacts (m/s², rad/s²);
      ~0 when the motion keeps the contacts fixed.
    - ``solution``: the `PseudoinverseSolution` of eq. 6 (``active``, ``iterations``, ``converged``).
    """

    muscle_forces: Float[Array, " mF"]
    torques: Float[Array, " mT"]
    joint_moments: Float[Array, " kJ"]
    required_moments: Float[Array, " kJ"]
    moment_residual: Float[Array, " kJ"]
    uncontrolled_residual: Float[Array, " r0"]
    ground_reaction: Float[Array, " r"]
    constraint_residual: Float[Array, " r"]
    solution: PseudoinverseSolution


def control_matrix(model: InverseSimulationModel, q: Float[ArrayLike, " n"]) -> Float[Array, "n m"]:
    """``B(q)`` ``(n, m)``: generalised force per unit control, ``[Rᵀ | E_τ]`` (Blajer et al.'s (2007) B̄).

    Muscle columns are the moment arms ``r = −∂l/∂q`` (m/rad; m/m on prismatic coordinates),
    torque columns unit vectors."""
    R = moment_arms(model.paths, model.tree, q)  # (mF, n)
    n = model.tree.nq
    E = np.zeros((n, len(model.torque_coordinates)))
    E[list(model.torque_coordinates), np.arange(len(model.torque_coordinates))] = 1.0
    return jnp.concatenate([R.T, jnp.asarray(E, R.dtype)], axis=1)


def _check_contacts(tree: SegmentTree, contacts) -> tuple[Contact, ...]:
    """`jaxbio.dynamics.Contact` s, a segment name standing for a weld at the segment's origin."""
    if contacts is None:
        return ()
    if isinstance(contacts, (str, Contact)):
        contacts = (contacts,)
    for c in contacts:
        if not isinstance(c, (str, Contact)):
            raise ValueError(f"contacts must be Contact objects or segment names, got {c!r}")
        if isinstance(c, str) and c not in tree.names:
            raise ValueError(f"contact segment {c!r} is not in model {tree.name!r}; segments are {list(tree.names)}")
    return check_contacts(tree, tuple(Contact(c, weld=True) if isinstance(c, str) else c for c in contacts))


def _null_basis(C):
    """Orthonormal ``D̄`` ``(n, n − r)`` with ``C D̄ = 0``, differentiable (see module docstring)."""
    r, n = C.shape
    _, sv, vt = jnp.linalg.svd(jax.lax.stop_gradient(C), full_matrices=True)
    V0 = vt[r:].T
    C = eqx.error_if(
        C,
        sv[-1] <= 1e3 * jnp.finfo(C.dtype).eps * sv[0],
        "contact constraints are dependent (a contact listed twice, or a singular pose)",
    )
    P = jnp.eye(n, dtype=C.dtype) - C.T @ jnp.linalg.solve(C @ C.T, C)
    return P @ V0


def inverse_simulation(
    model: InverseSimulationModel,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    *,
    contacts: Sequence[Contact | str] = (),
) -> InverseSimulationResult:
    """Controls that make ``model`` follow ``q, q̇, q̈`` at one instant (Blajer et al. 2007, §2).

    Args:
        model: `InverseSimulationModel` (e.g. `jaxbio.papers.blajer_body.sagittal11_muscle_model`).
        q: ``(n,)`` rad / m, generalised coordinates.
        qd: ``(n,)`` rad/s / m/s.
        qdd: ``(n,)`` rad/s² / m/s².
        contacts: empty for the flying phase (eqs. 2–6), else the contacts of the support
            phase (eqs. 7–8): `jaxbio.dynamics.Contact` objects or segment names (a name = a weld at the
            segment's origin).

    Returns:
        `InverseSimulationResult`. Pure and jittable (``contacts`` a pytree argument: segments and
        pin/weld are its static structure, the points array leaves; segment names are static); batch frames with
        `jax.vmap` or use `inverse_simulate_motion`.
    """
    tree = model.tree
    contacts = _check_contacts(tree, contacts)
    n = tree.nq
    q, qd, qdd = (jnp.asarray(x) for x in (q, qd, qdd))
    for name, x in (("q", q), ("qd", qd), ("qdd", qdd)):
        if x.shape != (n,):
            raise ValueError(
                f"{name} has shape {x.shape}, expected {(n,)} for model {tree.name!r}; "
                "batch with jax.vmap or use inverse_simulate_motion"
            )
    dtype = jnp.result_type(q, qd, qdd, float)
    q, qd, qdd = (x.astype(dtype) for x in (q, qd, qdd))
    J = np.asarray(model.joints)
    U = np.asarray(model.unactuated, dtype=np.int64)
    nonneg = jnp.asarray(model.nonnegative)
    M = mass_matrix(tree, q)
    bias = bias_forces(tree, q, qd)
    f = M @ qdd + bias
    B = control_matrix(model, q).astype(dtype)
    S = B[J]  # (k_J, m) joint moment per unit control
    mF = model.n_muscles
    if not contacts:
        # M⁻¹ once, then products: independent LAPACK solves under vmap can deadlock XLA's CPU
        # pool (`jaxbio._linalg`); H′ is a principal block of M⁻¹, so positive-definite
        Minv = spd_solve(M, jnp.eye(n, dtype=dtype))
        Hp = Minv[np.ix_(J, J)]  # H′ = B̄′ᵀ M⁻¹ B̄′ (eq. 3)
        h = qdd[J] + (Minv @ bias)[J]  # h of eq. 5
        required = spd_solve(Hp, h)  # u′ = H′⁻¹ h (eq. 5)
        sol = clamped_pseudoinverse(S, required, nonnegative=nonneg)  # eqs. 4, 6 (× H′⁻¹)
        u = sol.x
        moment_residual = S @ u - required
        uncontrolled = f[U]  # a = Ā′(M̄q̈ + d̄ − f̄_g) (eq. 2)
        reaction = jnp.zeros((0,), dtype)
        constraint = jnp.zeros((0,), dtype)
    else:
        C, gamma = contact_terms(tree, q, qd, contacts)
        C, gamma = C.astype(dtype), gamma.astype(dtype)
        D = _null_basis(C)  # D̄ (eq. I.9)
        Hp = D[J].T  # H′ = D̄ᵀ B̄′ (k × k_J)
        h = D.T @ f  # h = D̄ᵀ(M̄q̈ + d̄ − f̄_g) (eq. 7)
        H = Hp @ S  # H = D̄ᵀ B̄ (eq. 8)
        sol = clamped_pseudoinverse(H, h, nonnegative=nonneg)  # eq. 6
        u = sol.x
        if Hp.shape[0] == Hp.shape[1]:
            required = jnp.linalg.solve(Hp, h)
            moment_residual = S @ u - required
        else:
            Hpp = jnp.linalg.pinv(Hp)
            required = Hpp @ h
            moment_residual = Hpp @ sol.residual
        reaction = jnp.linalg.solve(C @ C.T, C @ (f - B @ u))  # λ (role of eq. I.16)
        uncontrolled = (f - B @ u - C.T @ reaction)[U]
        constraint = C @ qdd - gamma  # C q̈ + Ċ q̇
    return InverseSimulationResult(
        muscle_forces=u[:mF],
        torques=u[mF:],
        joint_moments=S @ u,
        required_moments=required,
        moment_residual=moment_residual,
        uncontrolled_residual=uncontrolled,
        ground_reaction=reaction,
        constraint_residual=constraint,
        solution=sol,
    )


@jax.jit
def _motion(model, q, qd, qdd, contacts):
    """``contacts``: a tuple of `Contact` (a pytree: segment and weld static, points traced)."""
    return jax.vmap(lambda a, b, c: inverse_simulation(model, a, b, c, contacts=contacts))(q, qd, qdd)


def inverse_simulate_motion(
    model: InverseSimulationModel,
    q: Float[ArrayLike, "T n"],
    qd: Float[ArrayLike, "T n"],
    qdd: Float[ArrayLike, "T n"],
    *,
    contacts: Sequence[Contact | str] = (),
    strict: bool = False,
    tol: float = 1e-6,
) -> InverseSimulationResult:
    """`inverse_simulation` of every frame of a motion (one phase: the same ``contacts`` throughout),
    jitted and vmapped.

    Args:
        q, qd, qdd: ``(T, n)`` the measured motion, one row per frame.
        contacts: as in `inverse_simulation` (empty: flying phase).
        strict: if true, raise ValueError when some joint moment cannot be produced (see
            `unproducible_moments`, with ``tol``).
        tol: relative tolerance for ``strict``.

    Returns:
        `InverseSimulationResult` with a leading frame axis ``T``.

    Raises:
        ValueError: arrays that are not ``(T, n)``, frame counts that differ between ``q``, ``qd``
        and ``qdd`` (naming them), NaN/inf (naming the array, first frame and coordinate), and with
        ``strict`` the frames and joints whose moments the actuators cannot produce.
    """
    tree = model.tree
    n = tree.nq
    arrs = {}
    for name, x in (("q", q), ("qd", qd), ("qdd", qdd)):
        x = concrete(x) if is_concrete(x) else x
        if x.ndim != 2 or x.shape[1] != n:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected (frames, {n}) for model {tree.name!r}")
        arrs[name] = x
    counts = {k: v.shape[0] for k, v in arrs.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(
            "q, qd and qdd must have the same number of frames, got "
            + ", ".join(f"{k}: {v}" for k, v in counts.items())
        )
    for name, x in arrs.items():
        check_finite(
            x,
            name,
            check=False,
            locate=lambda idx, count: f" ({count} entries; first at frame {idx[0]}, coordinate {tree.names[idx[1]]!r})",
        )
    contacts = _check_contacts(tree, contacts)
    res = _motion(model, jnp.asarray(arrs["q"]), jnp.asarray(arrs["qd"]), jnp.asarray(arrs["qdd"]), contacts)
    if strict:
        issues = unproducible_moments(model, res, tol=tol)
        if issues:
            lines = [f"frame {fr}, joint {j!r}: {v:+.4g} N·m missing" for fr, j, v in issues[:10]]
            more = f" (and {len(issues) - 10} more)" if len(issues) > 10 else ""
            raise ValueError("the actuators cannot produce the required joint moments: " + "; ".join(lines) + more)
    return res


def unproducible_moments(
    model: InverseSimulationModel, result: InverseSimulationResult, *, tol: float = 1e-6
) -> list[tuple[int, str, float]]:
    """Frames and joints whose required moment the controls do not produce (Python, outside jit).

    A joint ``j`` of frame ``t`` is reported when ``|moment_residual[t, j]| > tol · max(1, max_j
    |required_moments[t, j]|)``; the value is the missing moment (required − produced, N·m).
    Accepts one frame (no frame axis; reported as frame 0) or a motion.

    Returns:
        ``[(frame, joint name, missing moment), ...]`` sorted by frame, empty if none.
    """
    res = np.asarray(result.moment_residual)
    req = np.asarray(result.required_moments)
    if res.ndim == 1:
        res, req = res[None], req[None]
    scale = np.maximum(1.0, np.max(np.abs(req), axis=1, keepdims=True))
    bad = np.abs(res) > tol * scale
    names = model.joint_names
    return [(int(t), names[int(j)], float(-res[t, j])) for t, j in np.argwhere(bad)]


ACTUATIONS = ("muscles", "torques")


def _check_actuation(actuation: str) -> str:
    check_choice(actuation, ACTUATIONS, "actuation")
    return actuation


def actuation_loads(
    model: InverseSimulationModel,
    q: Float[ArrayLike, " n"],
    u: Float[ArrayLike, " m"],
    *,
    actuation: str = "muscles",
) -> tuple[Float[Array, " n"], tuple[Float[Array, "n 3"], Float[Array, "n 3"]]]:
    """The controls ``u`` as joint torques plus external wrenches, two ways (Blajer et al. 2007, §3, last remark).

    - ``actuation="muscles"`` (``f_u = B u``): each muscle force ``F_j`` acts as its force pair on
      the segments its path attaches to (`jaxbio.muscles.geometry.muscle_wrenches`: ``+F`` along
      each piece on its proximal point, ``−F`` on its distal one); the torque actuators stay
      joint torques. Returns ``tau = E_τ u_τ`` (zero on the muscle-driven joints) and the muscle
      wrenches.
    - ``actuation="torques"`` (``f_u = B′u′``): the whole generalised force ``B u = Rᵀ F + E_τ u_τ``
      as joint torques, no external wrench (the internal tensile forces on the bones neglected).

    Both have the same generalised force (``Jᵀ`` of the muscle wrenches is ``Rᵀ F``), hence the same
    motion and ground reactions; only the joint reaction forces differ.

    Args:
        model: the `InverseSimulationModel`.
        q: ``(n,)`` rad / m, generalised coordinates.
        u: ``(m,)`` controls ``[muscle forces (N), torques (N·m)]`` (``model.control_names``).
        actuation: ``"muscles"`` or ``"torques"``.

    Returns:
        ``tau`` ``(n,)`` N·m / N along each coordinate, and ``external = (forces (n, 3) N,
        moments (n, 3) N·m)``, world frame, moments about each segment's origin (the ``external``
        of `jaxbio.dynamics.reactions_augmented`).

    Raises:
        ValueError: an unknown ``actuation`` or ``u`` not of shape ``(m,)``.
    """
    _check_actuation(actuation)
    tree = model.tree
    n, mF = tree.nq, model.n_muscles
    q = jnp.asarray(q)
    u = jnp.asarray(u)
    if q.shape != (n,):
        raise ValueError(f"q has shape {q.shape}, expected {(n,)} for model {tree.name!r}")
    if u.shape != (model.n_controls,):
        raise ValueError(f"u has shape {u.shape}, expected ({model.n_controls},): controls {model.control_names}")
    dtype = jnp.result_type(q, u, float)
    q, u = q.astype(dtype), u.astype(dtype)
    if actuation == "torques":
        zero = jnp.zeros((n, 3), dtype)
        return control_matrix(model, q).astype(dtype) @ u, (zero, zero)
    tau = jnp.zeros((n,), dtype).at[np.asarray(model.torque_coordinates, dtype=np.int64)].set(u[mF:])
    return tau, muscle_wrenches(model.paths, tree, q, u[:mF])


def joint_reactions(
    model: InverseSimulationModel,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    u: Float[ArrayLike, " m"],
    *,
    contacts: Sequence[Contact | str] = (),
    ground_reaction: Float[ArrayLike, " r"] | None = None,
    joints: Sequence[str] | None = None,
    actuation: str = "muscles",
) -> Float[Array, "k 3"]:
    """Joint reactions from identified controls, with muscle forces (``B u``) or net joint torques
    (``B′u′``) (Blajer et al. 2007, eq. 16 and its closing remark).

    ``λ* = Eᵀ[f_g + f_u − M(D q̈ + γ)]`` with ``f_u`` from `actuation_loads` and the ground
    reactions as external forces, by `jaxbio.dynamics.reactions_augmented`.

    Args:
        model: the `InverseSimulationModel`.
        q, qd, qdd: ``(n,)`` the motion at one instant (rad, rad/s, rad/s²; m, m/s, m/s²).
        u: ``(m,)`` the controls (``InverseSimulationResult`` ``muscle_forces`` then ``torques``).
        contacts: the support-phase contacts of `inverse_simulation` (empty in flight).
        ground_reaction: ``(r,)`` the contact reactions, ``InverseSimulationResult.ground_reaction``
            (per contact Fx, Fy N at the contact point and, for a weld, Mz N·m about it); required
            when ``contacts`` is not empty.
        joints: static segment names whose joints are returned (default all), e.g.
            ``("thigh_r", "shank_r", "foot_r")`` for the right hip, knee and ankle.
        actuation: ``"muscles"`` (``B u``: muscle force pairs on the segments) or ``"torques"``
            (``B′u′``: net joint torques only).

    Returns:
        ``(k, 3)`` per joint ``(Fx, Fy)`` N and ``Mz`` N·m about the joint centre, world frame, on
        the segment from its parent through the joint (`jaxbio.dynamics.reactions_augmented`). With
        ``"muscles"`` ``Mz`` of a muscle-driven joint is 0 (the joint itself carries no moment);
        with ``"torques"`` it is the net joint moment. The forces of the two differ at each joint by
        the sum of the muscle forces that cross it, acting on its distal side.

    Raises:
        ValueError: an unknown ``actuation`` or joint, wrong shapes, contacts without
        ``ground_reaction``.
    """
    _check_actuation(actuation)
    tree = model.tree
    contacts = _check_contacts(tree, contacts)
    n = tree.nq
    for name, x in (("q", q), ("qd", qd), ("qdd", qdd)):
        if jnp.shape(x) != (n,):
            raise ValueError(f"{name} has shape {jnp.shape(x)}, expected {(n,)} for model {tree.name!r}")
    if jnp.shape(u) != (model.n_controls,):
        raise ValueError(f"u has shape {jnp.shape(u)}, expected ({model.n_controls},): controls {model.control_names}")
    rows = sum(c.rows for c in contacts)
    if contacts:
        if ground_reaction is None:
            raise ValueError("ground_reaction is required with contacts (InverseSimulationResult.ground_reaction)")
        if jnp.shape(ground_reaction) != (rows,):
            raise ValueError(
                f"ground_reaction has shape {jnp.shape(ground_reaction)}, expected ({rows},) for "
                f"contacts {[c.segment for c in contacts]}"
            )
    elif ground_reaction is not None and jnp.size(ground_reaction):
        raise ValueError("ground_reaction given without contacts")
    else:
        ground_reaction = jnp.zeros((0,))
    joints = None if joints is None else (joints,) if isinstance(joints, str) else tuple(joints)
    return _joint_reactions(model, q, qd, qdd, u, contacts, ground_reaction, joints, actuation)


@functools.partial(jax.jit, static_argnames=("joints", "actuation"))
def _joint_reactions(model, q, qd, qdd, u, contacts, ground_reaction, joints, actuation):
    tree = model.tree
    tau, (ext_f, ext_m) = actuation_loads(model, q, u, actuation=actuation)
    dtype = tau.dtype
    if contacts:
        wrenches = contact_wrenches(jnp.asarray(ground_reaction, dtype), contacts)
        gf, gm = contact_external(tree, q.astype(dtype), contacts, wrenches)
        ext_f, ext_m = ext_f + gf, ext_m + gm
    return reactions_augmented(
        tree, q.astype(dtype), qd.astype(dtype), qdd.astype(dtype), tau, (ext_f, ext_m), joints=joints
    )
