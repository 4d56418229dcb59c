"""Joint reaction forces of the sagittal body three ways (Blajer et al. 2007, §3), float64.

References:

- the three schemes against each other (d'Alembert recursion, Lagrange multipliers in absolute
  coordinates — eq. 10, augmented joint coordinates — eq. 16) on random states of ``sagittal11``,
  in flight (``q̈`` from Pinocchio's ABA, so not from jaxbio) and in support (``q̈`` and the ground
  reactions from `constrained_forward_dynamics` in joint coordinates); the multipliers of eq. 10
  and eq. 16 are the same numbers;
- Pinocchio's RNEA transmitted forces ``data.f`` with the ground reactions as external forces;
- Newton's law for the right leg with COM accelerations by central differences of Pinocchio's COM
  positions along ``q(t) = q + t q̇ + ½ t² q̈``;
- the absolute-coordinate pieces: ``p``, ``ṗ``, ``p̈`` (from jaxbio's 3D quaternion recursion)
  against the closed-form planar kinematics written here with rotation matrices and differentiated
  by forward mode, the analytic ``C`` against ``jax.jacfwd`` of the constraint functions, ``C D = 0``,
  ``C E = I`` (eq. 14), ``B = (∂q/∂p)ᵀ``;
- eq. 10 both ways: with ``M⁻¹`` diagonal (every body massive) and with ``M̃ = M + α CᵀC`` where
  ``M`` is singular (sagittal11's massless virtual base links; point masses), the latter raising
  at run time in a pose where the mass matrix is singular;
- a gradient against central finite differences.

Agreement tolerance of the schemes: 1e-9 N (N·m), absolute; reactions are O(100 N).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.dynamics import Contact, contact_external
from jaxbio.dynamics import absolute as ab
from jaxbio.dynamics import constrained as rx

pin = pytest.importorskip("pinocchio")
from tests import pinocchio_ref as ref  # noqa: E402

TREE = jb.load_model("sagittal11", dtype=jnp.float64).tree
N = TREE.nq
HEEL = (-0.04877, -0.0679)  # foot frame
TOE_TIP = (0.2093 - 0.13003, 0.0)  # toes frame (origin at the MTP joint)
# single stance on the right foot flat, left toe tip touching: 5 constraint rows
SUPPORT = (Contact("foot_r", jnp.array(HEEL), weld=True), Contact("toes_l", jnp.array(TOE_TIP)))
LEG_R = ("thigh_r", "shank_r", "foot_r", "toes_r")
TOL = 1e-9


def random_states(seed: int, batch: int, unactuated_base: bool):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-0.6, 0.6, (batch, N))
    qd = rng.normal(0.0, 1.0, (batch, N))
    tau = rng.normal(0.0, 30.0, (batch, N))
    if unactuated_base:
        tau[:, :3] = 0.0  # a physical motion: the floating base is driven by nothing
    return q, qd, tau


@pytest.fixture(scope="module")
def pin_model():
    return ref.build_pinocchio_model(TREE.to_dict())


# ---------------------------------------------------------------------------------------------
# the absolute-coordinate formulation
# ---------------------------------------------------------------------------------------------


def planar_coordinates(tree, q):
    """``p = g(q)`` ``(3N,)`` by closed-form planar kinematics with 2×2 rotations (independent of
    jaxbio's quaternion recursion): ``θ = Anc · (β + sign q)`` (revolute ``q`` only), joint
    centres ``O = Anc · d`` with ``d_j = R(θ_parent) o_j + q_j R(θ_parent + β_j) s_j`` (the slide
    for prismatic joints only), COMs ``r = O + R(θ) c``."""
    pp = ab.planar_params(tree)
    rev = jnp.asarray(pp.revolute)
    anc = jnp.asarray(tree.ancestors, q.dtype)

    def rot(angle, v):
        c, s = jnp.cos(angle), jnp.sin(angle)
        return jnp.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], axis=-1)

    th = anc @ (pp.beta + jnp.where(rev, pp.sign * q, 0.0))
    thp = jnp.concatenate([th, jnp.zeros((1,), q.dtype)])[pp.parent]  # the world (index n) has angle 0
    d = rot(thp, pp.origin) + jnp.where(rev, 0.0, q)[:, None] * rot(thp + pp.beta, pp.axis)
    r = anc @ d + rot(th, pp.com)
    return jnp.concatenate([r, th[:, None]], axis=-1).reshape(-1)


@pytest.mark.slow
def test_absolute_coordinates_pieces():
    """p, ṗ, p̈ (eq. 9) against the closed-form planar kinematics and its forward-mode derivatives;
    the analytic C against autodiff of the constraint functions; C D = 0; C E = I (eq. 14);
    B = (∂q/∂p)ᵀ against the closed-form actuation. (Eager, hence slow; the default tests check all
    of it end to end.)"""
    rng = np.random.default_rng(0)
    q, qd, qdd, u = (jnp.asarray(rng.normal(size=N)) for _ in range(4))
    q = q.at[2].set(4.0)  # the trunk beyond π: θ is the unwrapped sum of the joint angles
    p, pd, pdd = ab.absolute_motion(TREE, q, qd, qdd)

    def g(x):
        return planar_coordinates(TREE, x)

    def g_dot(x):
        return jax.jvp(g, (x,), (qd,))[1]

    p_ref, pd_ref = jax.jvp(g, (q,), (qd,))
    pdd_ref = jax.jvp(g, (q,), (qdd,))[1] + jax.jvp(g_dot, (q,), (qd,))[1]
    assert np.max(np.abs(p - p_ref)) < 1e-12
    assert np.max(np.abs(pd - pd_ref)) < 1e-12
    assert np.max(np.abs(pdd - pdd_ref)) < 1e-12
    assert np.max(np.abs(ab.absolute_coordinates(TREE, q) - p_ref)) < 1e-12
    assert np.max(np.abs(ab.absolute_motion(TREE, q, qd)[2] - jax.jvp(g_dot, (q,), (qd,))[1])) < 1e-12  # γ
    assert np.max(np.abs(ab.joint_coordinates(TREE, p) - q)) < 1e-12
    assert np.max(np.abs(ab.joint_constraints(TREE, p))) < 1e-12
    C, gamma = ab.constraint_jacobian(TREE, p, pd, SUPPORT)

    def phi(x):
        return jnp.concatenate([ab.joint_constraints(TREE, x), ab.contact_constraints(TREE, x, SUPPORT)])

    assert np.max(np.abs(C - jax.jacfwd(phi)(p))) < 1e-12
    assert np.max(np.abs((C @ pdd - gamma)[: 2 * N])) < 1e-12  # joint rows hold; contacts not enforced here
    assert np.max(np.abs(C[: 2 * N] @ ab.velocity_map(TREE, q))) < 1e-12
    E = ab.open_constraint_matrix(TREE, q)
    assert np.max(np.abs(C[: 2 * N] @ E - np.eye(2 * N))) < 1e-12
    B = ab.actuation_matrix(TREE, p)
    assert np.max(np.abs(B @ u - ab.actuation_forces(TREE, p, u))) < 1e-12
    assert B[3 * TREE.index("thigh_r") + 2, TREE.index("thigh_r")] == 1.0
    assert B[3 * TREE.index("trunk") + 2, TREE.index("thigh_r")] == -1.0


# ---------------------------------------------------------------------------------------------
# the three schemes
# ---------------------------------------------------------------------------------------------


@jax.jit
@jax.vmap
def _flight(q, qd, qdd, tau, force, moment):
    external = (force, moment)
    a = rx.reactions_recursion(TREE, q, qd, qdd, external)
    b, ground = rx.reactions_lagrange(TREE, q, qd, tau, (), external)
    c = rx.reactions_augmented(TREE, q, qd, qdd, tau, external)
    return a, b, c, ground


def test_three_schemes_agree_in_flight(pin_model):
    """No contacts; q̈ from Pinocchio's ABA for random (q, q̇, u), u on all 11 coordinates.
    Frames 0–2 without external forces (flight), frames 3–5 with given random in-plane external
    forces and moments on the feet and toes (measured ground forces)."""
    batch = 6
    q, qd, tau = random_states(1, batch, unactuated_base=False)
    rng = np.random.default_rng(11)
    force, moment = np.zeros((batch, N, 3)), np.zeros((batch, N, 3))
    feet = [TREE.index(s) for s in ("foot_r", "toes_r", "foot_l", "toes_l")]
    force[3:, feet, :2] = rng.normal(0.0, 200.0, (3, 4, 2))
    moment[3:, feet, 2] = rng.normal(0.0, 20.0, (3, 4))
    qdd = np.stack([ref.pin_forward_dynamics(pin_model, *s) for s in zip(q, qd, tau, force, moment)])
    a, b, c, ground = _flight(q, qd, qdd, tau, force, moment)
    assert ground.shape == (batch, 0, 3)
    assert np.max(np.abs(a)) > 50.0  # not trivially small
    np.testing.assert_allclose(b, a, rtol=0, atol=TOL)
    np.testing.assert_allclose(c, a, rtol=0, atol=TOL)
    # Mz of the revolute joints is the joint torque
    np.testing.assert_allclose(a[:, 2:, 2], tau[:, 2:], rtol=0, atol=TOL)


def _with_masses(tree, masses, inertias):
    return eqx.tree_at(lambda t: (t.masses, t.inertias), tree, (jnp.asarray(masses), jnp.asarray(inertias)))


def _point_mass_pendulum(first_at_origin: bool = False):
    """The double pendulum with its rods replaced by point masses at their COMs (``I = 0``); with
    ``first_at_origin`` the first point mass sits on its joint axis, so that the mass matrix is
    singular when the pendulum is straight (``q[1] = 0``) and regular elsewhere."""
    d = jb.load_model("double_pendulum", dtype=jnp.float64).tree.to_dict()
    for s in d["segments"]:
        s["inertia"] = np.zeros((3, 3)).tolist()
    if first_at_origin:
        d["segments"][0]["com"] = [0.0, 0.0, 0.0]
    return jb.SegmentTree.from_dict(d, dtype=jnp.float64)


@pytest.mark.parametrize("variant", ["every body massive", "point masses"])
def test_lagrange_scheme_with_and_without_a_singular_mass_diagonal(variant):
    """Eq. 10 as printed (every body has mass and I_zz: ``M⁻¹`` diagonal; sagittal11 with its two
    virtual base links given 0.1 g and 1e-7 kg·m² back) and in the ``M̃ = M + α CᵀC`` form (a
    double pendulum of two point masses, ``I_zz = 0``; sagittal11 itself, with massless base links,
    is the other tests' case) against the recursion with Pinocchio's ``q̈``."""
    if variant == "every body massive":
        tree = _with_masses(TREE, TREE.masses.at[:2].set(1e-4), TREE.inertias.at[:2].set(1e-7 * jnp.eye(3)))
        assert np.all(np.asarray(ab.mass_diagonal(tree)) > 0)
    else:
        tree = _point_mass_pendulum()
        assert np.all(np.asarray(ab.mass_diagonal(tree))[2::3] == 0)
    model = ref.build_pinocchio_model(tree.to_dict())
    rng = np.random.default_rng(12)
    for _ in range(3):
        q, qd, tau = rng.uniform(-1.0, 1.0, tree.nq), rng.normal(0.0, 1.0, tree.nq), rng.normal(0.0, 10.0, tree.nq)
        qdd = ref.pin_forward_dynamics(model, q, qd, tau)
        a = rx.reactions_recursion(tree, q, qd, qdd)
        b, _ = rx.reactions_lagrange(tree, q, qd, tau)
        assert np.max(np.abs(a)) > 1.0
        np.testing.assert_allclose(b, a, rtol=0, atol=TOL)


def test_singular_mass_matrix_raises_at_run_time():
    """A point mass on its own joint axis and a second one beyond: the mass matrix is singular only
    when the pendulum is straight (the loader, which samples random configurations, accepts the
    model); there ``M̃`` of eq. 10 is singular and the run-time check says so."""
    tree = _point_mass_pendulum(first_at_origin=True)
    z = jnp.zeros(2)
    b, _ = rx.reactions_lagrange(tree, jnp.array([0.3, 0.5]), z, z)
    assert np.all(np.isfinite(b))
    with pytest.raises(Exception, match="mass matrix is singular in this configuration"):
        jax.block_until_ready(rx.reactions_lagrange(tree, jnp.array([0.3, 0.0]), z, z))


@jax.jit
@jax.vmap
def _support(q, qd, tau):
    qdd, ground = rx.constrained_forward_dynamics(TREE, q, qd, tau, SUPPORT)
    external = contact_external(TREE, q, SUPPORT, ground)
    a = rx.reactions_recursion(TREE, q, qd, qdd, external)
    b, ground_b = rx.reactions_lagrange(TREE, q, qd, tau, SUPPORT)
    c = rx.reactions_augmented(TREE, q, qd, qdd, tau, external, joints=LEG_R)
    return qdd, ground, external, a, b, ground_b, c


@pytest.fixture(scope="module")
def support_batch():
    q, qd, tau = random_states(2, 6, unactuated_base=True)
    out = _support(q, qd, tau)
    return (q, qd, tau), [np.asarray(x) for x in out[:2]] + [tuple(np.asarray(e) for e in out[2])] + [
        np.asarray(x) for x in out[3:]
    ]


def test_three_schemes_agree_in_support(support_batch):
    """Right foot flat + left toe tip on the ground: the recursion and eq. 16 (right-leg joints only,
    ``joints=``) with the ground reactions of the constrained forward dynamics as external
    forces, and eq. 10 with the contacts as constraints (its multipliers are the ground reactions)."""
    _, (qdd, ground, external, a, b, ground_b, c) = support_batch
    assert np.max(np.abs(ground[:, :, 1])) > 50.0
    np.testing.assert_allclose(ground[:, 1, 2], 0.0, atol=0)  # pin: no moment
    np.testing.assert_allclose(ground_b, ground, rtol=0, atol=TOL)
    np.testing.assert_allclose(b, a, rtol=0, atol=TOL)
    np.testing.assert_allclose(c, a[:, [TREE.index(s) for s in LEG_R]], rtol=0, atol=TOL)
    # unactuated base: the virtual base segments are massless, so their joints transmit nothing
    np.testing.assert_allclose(a[:, :2], 0.0, rtol=0, atol=TOL)
    np.testing.assert_allclose(b[:, :2], 0.0, rtol=0, atol=TOL)


def test_support_reactions_against_pinocchio(support_batch, pin_model):
    """Pinocchio's RNEA with the ground reactions as external forces: data.f (world frame)."""
    (q, qd, _), (qdd, _, (force, moment), _, b, *_rest) = support_batch
    for k in range(2):
        forces, moments = ref.pin_segment_wrenches(pin_model, q[k], qd[k], qdd[k], force[k], moment[k])
        np.testing.assert_allclose(b[k, :, :2], forces[:, :2], rtol=0, atol=1e-8)
        np.testing.assert_allclose(b[k, :, 2], moments[:, 2], rtol=0, atol=1e-8)


def test_hip_reaction_is_newtons_law_for_the_leg(support_batch, pin_model):
    """F_hip = Σ_leg m (a_C − g) − F_ground on the leg, with the COM accelerations by central
    differences of Pinocchio's COM positions (no jaxbio dynamics involved)."""
    (q, qd, _), (qdd, ground, _, _, b, *_rest) = support_batch
    legs = [TREE.index(s) for s in LEG_R]
    masses = np.asarray(TREE.masses)[legs]
    g = np.asarray(TREE.gravity)
    for k in range(2):

        def coms(t):
            return ref.pin_segment_coms(pin_model, q[k] + t * qd[k] + 0.5 * t * t * qdd[k])[legs]

        def second_difference(h):
            return (coms(h) - 2.0 * coms(0.0) + coms(-h)) / h**2

        acc = (4.0 * second_difference(1e-4) - second_difference(2e-4)) / 3.0  # Richardson, O(h⁴)
        f_hip = np.sum(masses[:, None] * (acc - g), axis=0)[:2] - ground[k, 0, :2]  # foot_r weld
        np.testing.assert_allclose(b[k, TREE.index("thigh_r"), :2], f_hip, rtol=0, atol=1e-5 * np.abs(f_hip).max())


def _gradient_check(scheme: int):
    """d/dq of a weighted sum of one scheme's reactions (flight, given external forces) vs central
    differences evaluated with the already compiled `_flight`."""
    q, qd, tau = random_states(3, 6, unactuated_base=False)
    qdd = np.random.default_rng(7).normal(size=(6, N))
    rng = np.random.default_rng(4)
    w = rng.normal(size=(N, 3))
    force, moment = np.zeros((6, N, 3)), np.zeros((6, N, 3))
    force[:, TREE.index("foot_r"), :2] = rng.normal(0.0, 100.0, 2)
    direction = np.random.default_rng(5).normal(size=N)
    ext = (force[0], moment[0])
    if scheme == 1:

        def f(x):
            return jnp.sum(w * rx.reactions_lagrange(TREE, x, qd[0], tau[0], (), ext)[0])
    else:

        def f(x):
            return jnp.sum(w * rx.reactions_augmented(TREE, x, qd[0], qdd[0], tau[0], ext))

    grad = jax.jit(jax.grad(f))(q[0])
    h = 1e-5
    shifted = q.copy()
    shifted[0], shifted[1] = q[0] + h * direction, q[0] - h * direction
    qd[1], tau[1], qdd[1] = qd[0], tau[0], qdd[0]
    out = np.asarray(_flight(shifted, qd, qdd, tau, force, moment)[scheme])
    fd = (np.sum(w * out[0]) - np.sum(w * out[1])) / (2 * h)
    assert abs(float(grad @ direction) - fd) < 1e-6 * max(1.0, abs(fd)), (float(grad @ direction), fd)


@pytest.mark.slow
def test_gradient_against_finite_differences():
    """jax.grad of the augmented scheme (eq. 16) with respect to q."""
    _gradient_check(scheme=2)


@pytest.mark.slow
def test_gradient_of_lagrange_scheme_against_finite_differences():
    """jax.grad through eq. 10 (Cholesky solve and the run-time rank check)."""
    _gradient_check(scheme=1)


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------


def test_redundant_or_unknown_contacts_raise_before_tracing():
    z = jnp.zeros(N)
    two_pins = (Contact("foot_r", jnp.array(HEEL)), Contact("foot_r", jnp.array([0.2, -0.0679])))
    weld_and_toe = (Contact("foot_r", jnp.array(HEEL), weld=True), Contact("toes_r", jnp.array(TOE_TIP)))
    too_many = tuple(Contact(s, jnp.zeros(2), weld=True) for s in ("foot_r", "foot_l", "toes_r", "toes_l"))
    for contacts, match in (
        (two_pins, "only 3 are independent"),
        (weld_and_toe, "only 4 are independent"),
        (too_many, "over-constrains"),
    ):
        with pytest.raises(ValueError, match=match):
            rx.reactions_lagrange(TREE, z, z, z, contacts)
        with pytest.raises(ValueError, match=match):
            rx.constrained_forward_dynamics(TREE, z, z, z, contacts)
    with pytest.raises(ValueError, match="no segment named 'heel'"):
        rx.reactions_lagrange(TREE, z, z, z, (Contact("heel", jnp.zeros(2)),))
    with pytest.raises(ValueError, match="no segment named 'knee'"):
        rx.reactions_augmented(TREE, z, z, z, z, joints=("knee",))
    with pytest.raises(ValueError, match="shape"):
        Contact("foot_r", jnp.zeros(4))


def test_singular_constraint_set_raises_at_run_time(support_batch):
    """The support contacts (right foot flat, left toe tip pinned) with straight legs and the left
    foot pointing down so that the MTP joint and the toe tip lie on the line of the hip, knees and
    ankles: the toe tip can then only move horizontally, the five rows have rank 4. Structure
    alone does not show it; the run-time check does (same compiled function as the support test,
    one singular frame in the batch)."""
    (q, qd, tau), _ = support_batch
    mtp = np.array([0.13003, -0.067899])
    ankle = -np.pi / 2 - np.arctan2(mtp[1], mtp[0])  # turn the MTP joint straight below the ankle
    q = q.copy()
    q[2] = 0.0
    q[2, TREE.index("foot_l")] = ankle
    q[2, TREE.index("toes_l")] = -np.pi / 2 - ankle  # toes pointing straight down
    with pytest.raises(Exception, match="singular"):
        jax.block_until_ready(_support(q, qd, tau))


def test_non_planar_tree_raises():
    arm = jb.load_model("arm7", dtype=jnp.float64).tree
    with pytest.raises(Exception, match="not planar"):
        jax.block_until_ready(jax.jit(ab.absolute_coordinates)(arm, jnp.zeros(arm.nq)))
