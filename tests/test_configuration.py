"""`jb.configuration`: the configuration manifold (ball and free joints), against Pinocchio's
``integrate``/``difference``/``neutral`` (FreeFlyer, Spherical, Revolute/PrismaticUnaligned) and
by its own identities (inverse maps, derivatives, projections)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import jaxbio as jb
from jaxbio import configuration as cfg

TYPES = (
    "free",
    "revolute",
    "spherical",
    "prismatic",
    "fixed",
    "spherical",
    "free",
    "revolute",
    "fixed",
    "prismatic",
    "spherical",
)


def make_tree(types, parents=None, seed=0, name="mixed") -> jb.SegmentTree:
    """A tree with the given joint types (random parents, axes for the axial joints only)."""
    rng = np.random.default_rng(seed)
    n = len(types)
    if parents is None:
        parents = [-1] + [int(rng.integers(-1, i)) for i in range(1, n)]
    axes = np.zeros((n, 3))
    for i, t in enumerate(types):
        if t in ("revolute", "prismatic"):
            a = rng.normal(size=3)
            axes[i] = a / np.linalg.norm(a)
    return jb.SegmentTree(
        axes=jnp.asarray(axes),
        origins=jnp.asarray(rng.uniform(-0.5, 0.5, (n, 3))),
        orientations=jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
        masses=jnp.ones(n),
        coms=jnp.zeros((n, 3)),
        inertias=jnp.tile(0.1 * jnp.eye(3), (n, 1, 1)),
        gravity=jnp.array([0.0, 0.0, -9.81]),
        names=tuple(f"s{i}" for i in range(n)),
        parents=tuple(parents),
        joint_types=tuple(types),
        name=name,
    )


def pinocchio_model(tree: jb.SegmentTree) -> pin.Model:
    """The joints of ``tree`` in its segment order (fixed segments have no joint: their children
    hang from the nearest moving ancestor), so Pinocchio's q and v follow jaxbio's order."""
    model = pin.Model()
    ids = {-1: 0}
    for i, (t, p) in enumerate(zip(tree.joint_types, tree.parents)):
        if t == "fixed":
            ids[i] = ids[p]
            continue
        joint = {"free": pin.JointModelFreeFlyer, "spherical": pin.JointModelSpherical}.get(t)
        if joint is not None:
            joint = joint()
        else:
            axis = np.asarray(tree.axes[i], dtype=np.float64)
            joint = (pin.JointModelRevoluteUnaligned if t == "revolute" else pin.JointModelPrismaticUnaligned)(axis)
        placement = pin.SE3(np.eye(3), np.asarray(tree.origins[i], dtype=np.float64))
        ids[i] = model.addJoint(ids[p], joint, placement, tree.names[i])
    assert (model.nq, model.nv) == (tree.nq, tree.nv)
    return model


def to_pinocchio_order(tree: jb.SegmentTree) -> np.ndarray:
    """``perm`` with ``q_pin = q[perm]``: each quaternion ``(w, x, y, z)`` → ``(x, y, z, w)``."""
    perm = np.arange(tree.nq)
    for i, t in enumerate(tree.joint_types):
        if t in ("spherical", "free"):
            a = tree.q_start[i] + (3 if t == "free" else 0)
            perm[a : a + 4] = perm[a : a + 4][[1, 2, 3, 0]]
    return perm


def quaternion_rows(tree) -> np.ndarray:
    """``(nb, 4)`` q indices of the quaternions (w first)."""
    rows = [
        tree.q_start[i] + (3 if t == "free" else 0)
        for i, t in enumerate(tree.joint_types)
        if t in ("spherical", "free")
    ]
    return np.asarray(rows, int).reshape(-1, 1) + np.arange(4)


def same_sign(tree, q, ref) -> np.ndarray:
    """``q`` with each quaternion's sign chosen to match ``ref`` (the same rotation)."""
    q = np.array(q, dtype=np.float64)
    for rows in quaternion_rows(tree):
        if q[rows] @ np.asarray(ref)[rows] < 0:
            q[rows] *= -1
    return q


@pytest.fixture(scope="module")
def tree():
    return make_tree(TYPES)


@pytest.fixture(scope="module")
def model(tree):
    return pinocchio_model(tree)


@pytest.fixture(scope="module")
def perm(tree):
    return to_pinocchio_order(tree)


def random_q(tree, seed, **kwargs):
    return np.array(cfg.random(tree, jax.random.key(seed), distance=2.0, **kwargs))


def random_dq(tree, seed, scale=1.0):
    return scale * np.random.default_rng(seed).normal(size=tree.nv)


# ---- Pinocchio ----------------------------------------------------------------------------------


def test_layout_and_neutral_match_pinocchio(tree, model, perm):
    assert (tree.nq, tree.nv) == (30, 25)
    q0 = cfg.neutral(tree)
    assert q0.shape == (tree.nq,) and q0.dtype == tree.origins.dtype
    np.testing.assert_array_equal(np.asarray(q0)[perm], pin.neutral(model))
    assert cfg.neutral(tree, jnp.float32).dtype == jnp.float32


@pytest.mark.parametrize("scale", [2.0, 1.0, 0.1 * (1 - 1e-6), 0.1 * (1 + 1e-6), 1e-4, 1e-9, 0.0])
def test_integrate_matches_pinocchio(tree, model, perm, scale):
    """Every size of step, including both sides of the small-angle branch (|ω| = 0.1) and
    |ω| > π (where Pinocchio flips the result's sign: compared up to sign)."""
    L = tree.joint_layout
    for seed in range(3):
        q, dq = random_q(tree, seed), random_dq(tree, seed, scale / np.sqrt(3))
        if scale in (0.1 * (1 - 1e-6), 0.1 * (1 + 1e-6)):  # every rotation vector of norm `scale`
            w = dq[L.quat_v]
            dq[L.quat_v] = scale * w / np.linalg.norm(w, axis=-1, keepdims=True)
        ref = pin.integrate(model, q[perm], dq)[np.argsort(perm)]  # back to jaxbio's order
        ours = np.asarray(cfg.integrate(tree, q, dq))
        np.testing.assert_allclose(same_sign(tree, ours, ref), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", ["independent", "near", "threshold", "equal", "negated"])
def test_difference_matches_pinocchio(tree, model, perm, case):
    L = tree.joint_layout
    for seed in range(3):
        q0 = random_q(tree, seed)
        if case == "independent":
            q1 = random_q(tree, seed + 100)
        elif case == "equal":
            q1 = q0.copy()
        elif case == "negated":  # the same rotations, written with −Q
            q1 = random_q(tree, seed + 100)
            q1[L.quat_q[::2]] *= -1
        else:
            dq = random_dq(tree, seed, 1e-5 if case == "near" else 1.0)
            if case == "threshold":  # relative rotations at both branch switches of the log
                w = dq[L.quat_v]
                angles = np.array(
                    [
                        0.1 * (1 - 1e-6),
                        0.1 * (1 + 1e-6),
                        2 * np.arctan(np.sqrt(1e-3)) * 1.000001,
                        2 * np.arctan(np.sqrt(1e-3)) * 0.999999,
                        3.0,
                    ]
                )[: len(w)]
                dq[L.quat_v] = angles[:, None] * w / np.linalg.norm(w, axis=-1, keepdims=True)
            q1 = pin.integrate(model, q0[perm], dq)[np.argsort(perm)]
        ours = np.asarray(cfg.difference(tree, q0, q1))
        ref = pin.difference(model, q0[perm], q1[perm])
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)
        if case == "negated":
            np.testing.assert_allclose(ours, cfg.difference(tree, q0, random_q(tree, seed + 100)), atol=1e-15)


# ---- identities ---------------------------------------------------------------------------------


def test_difference_inverts_integrate(tree):
    L = tree.joint_layout
    for seed in range(4):
        q, dq = random_q(tree, seed), random_dq(tree, seed)
        w = dq[L.quat_v]  # the log is the shortest rotation: keep |ω| < π
        dq[L.quat_v] = w * np.minimum(1, 3.0 / np.linalg.norm(w, axis=-1, keepdims=True))
        np.testing.assert_allclose(cfg.difference(tree, q, cfg.integrate(tree, q, dq)), dq, atol=1e-12)
        q1 = random_q(tree, seed + 50)
        back = np.asarray(cfg.integrate(tree, q, cfg.difference(tree, q, q1)))
        np.testing.assert_allclose(same_sign(tree, back, q1), q1, atol=1e-12)


def test_axial_tree_is_a_vector_space():
    tree = make_tree(("revolute", "prismatic", "revolute"))
    assert tree.nq == tree.nv == 3
    q, dq = jnp.array([0.3, -1.0, 4.0]), jnp.array([0.1, 0.2, 7.0])
    np.testing.assert_allclose(cfg.integrate(tree, q, dq), q + dq)
    np.testing.assert_allclose(cfg.difference(tree, q, q + dq), dq)
    np.testing.assert_allclose(cfg.velocity_to_qdot(tree, q, dq), dq)
    np.testing.assert_array_equal(cfg.neutral(tree), np.zeros(3))


def test_fixed_only_tree_has_no_coordinates():
    tree = make_tree(("fixed", "fixed"))
    assert cfg.neutral(tree).shape == cfg.random(tree, jax.random.key(0)).shape == (0,)
    assert cfg.integrate(tree, jnp.zeros(0), jnp.zeros(0)).shape == (0,)
    assert cfg.difference(tree, jnp.zeros(0), jnp.zeros(0)).shape == (0,)


@pytest.fixture(scope="module")
def jacobians(tree):
    """Compiled Jacobians: reverse mode of ``dq ↦ integrate(q, dq)`` (``(nq, nv)``) and forward
    mode of ``q1 ↦ difference(q0, q1)`` (``(nv, nq)``); compiled once for every test here."""
    integrate = jax.jit(jax.jacrev(lambda q, d: cfg.integrate(tree, q, d), argnums=1))
    difference = jax.jit(jax.jacfwd(lambda q0, q1: cfg.difference(tree, q0, q1), argnums=1))
    return integrate, difference


def central_differences(f, x, h=1e-6):
    return np.stack([(np.asarray(f(x + h * e)) - np.asarray(f(x - h * e))) / (2 * h) for e in np.eye(len(x))], axis=-1)


def test_derivatives_at_zero_step(tree, jacobians):
    """G(q) = ∂ integrate(q, dq)/∂dq at dq = 0, through the small-angle branches: finite, equal to
    central differences, to `velocity_to_qdot` and its transpose; `qdot_to_velocity` and the
    Jacobian of `difference` at q1 = q0 are its left inverses."""
    jac_integrate, jac_difference = jacobians
    rng = np.random.default_rng(3)
    for seed in range(2):
        q = random_q(tree, seed)
        G = np.asarray(jac_integrate(q, np.zeros(tree.nv)))
        assert np.all(np.isfinite(G))
        np.testing.assert_allclose(
            G, central_differences(lambda d: cfg.integrate(tree, q, d), np.zeros(tree.nv)), atol=1e-8
        )
        v, g = rng.normal(size=tree.nv), rng.normal(size=tree.nq)
        qdot = np.asarray(cfg.velocity_to_qdot(tree, q, v))
        np.testing.assert_allclose(qdot, G @ v, atol=1e-14)
        np.testing.assert_allclose(cfg.velocity_to_qdot_transpose(tree, q, g), G.T @ g, atol=1e-14)
        np.testing.assert_allclose(cfg.qdot_to_velocity(tree, q, qdot), v, atol=1e-13)
        D = np.asarray(jac_difference(q, q))
        assert np.all(np.isfinite(D))
        np.testing.assert_allclose(D @ G, np.eye(tree.nv), atol=1e-13)


def test_derivatives_away_from_zero(tree, jacobians):
    """At a finite step the Jacobians equal central differences; just below and above each
    small-angle threshold (|ω| = 0.1 and the log's atan series) they agree (no jump)."""
    jac_integrate, jac_difference = jacobians
    L = tree.joint_layout
    q, d = random_q(tree, 11), random_dq(tree, 11)
    np.testing.assert_allclose(
        jac_integrate(q, d), central_differences(lambda x: cfg.integrate(tree, q, x), d), atol=1e-8
    )
    q1 = random_q(tree, 12)
    np.testing.assert_allclose(
        jac_difference(q, q1), central_differences(lambda x: cfg.difference(tree, q, x), q1), atol=1e-7
    )
    w = d[L.quat_v] / np.linalg.norm(d[L.quat_v], axis=-1, keepdims=True)
    for angle in (0.1, 2 * np.arctan(np.sqrt(1e-3))):
        jac = []
        for a in (angle * (1 - 1e-9), angle * (1 + 1e-9)):
            d[L.quat_v] = a * w
            jac += [np.asarray(jac_integrate(q, d)), np.asarray(jac_difference(q, cfg.integrate(tree, q, d)))]
        np.testing.assert_allclose(jac[0], jac[2], atol=1e-7)
        np.testing.assert_allclose(jac[1], jac[3], atol=1e-7)


def test_normalize_projects_quaternions_only(tree):
    L = tree.joint_layout
    q = random_q(tree, 5)
    scaled = q.copy()
    scaled[L.quat_q] *= np.array([0.5, 2.0, 1.0, 3.0, 0.9])[: len(L.quat_q), None]
    scaled[L.quat_q[1]] = 0.0  # a zero quaternion becomes the identity
    once = np.asarray(cfg.normalize(tree, scaled))
    np.testing.assert_allclose(np.linalg.norm(once[L.quat_q], axis=-1), 1.0, atol=1e-15)
    np.testing.assert_array_equal(once[L.quat_q[1]], [1, 0, 0, 0])
    np.testing.assert_array_equal(np.delete(once, L.quat_q.ravel()), np.delete(scaled, L.quat_q.ravel()))
    np.testing.assert_allclose(cfg.normalize(tree, once), once, atol=1e-15)
    np.testing.assert_allclose(cfg.normalize(tree, q), q, atol=1e-15)


def test_unchecked_quaternions_are_read_as_rotations(tree):
    """Without check: integrate keeps |Q|, difference and the free translation ignore it."""
    L = tree.joint_layout
    q0, q1, dq = random_q(tree, 1), random_q(tree, 2), random_dq(tree, 1)
    s0, s1 = q0.copy(), q1.copy()
    s0[L.quat_q] *= 1.5
    s1[L.quat_q] *= 0.7
    np.testing.assert_allclose(cfg.difference(tree, s0, s1), cfg.difference(tree, q0, q1), atol=1e-13)
    out = np.asarray(cfg.integrate(tree, s0, dq))
    ref = np.asarray(cfg.integrate(tree, q0, dq))
    np.testing.assert_allclose(np.linalg.norm(out[L.quat_q], axis=-1), 1.5, atol=1e-13)
    np.testing.assert_allclose(cfg.normalize(tree, out), ref, atol=1e-13)


def test_random(tree):
    L = tree.joint_layout
    a = random_q(tree, 0)
    np.testing.assert_array_equal(a, random_q(tree, 0))
    assert not np.allclose(a, random_q(tree, 1))
    np.testing.assert_allclose(np.linalg.norm(a[L.quat_q], axis=-1), 1.0, atol=1e-14)
    qs = np.asarray(
        jax.vmap(lambda k: cfg.random(tree, k, angle=0.5, distance=0.2))(jax.random.split(jax.random.key(3), 200))
    )
    angles = qs[:, L.axial_q[L.revolute]]
    slides = np.concatenate([qs[:, L.axial_q[~L.revolute]].ravel(), qs[:, L.trans_q].ravel()])
    assert np.abs(angles).max() <= 0.5 and np.abs(angles).max() > 0.45
    assert np.abs(slides).max() <= 0.2 and np.abs(slides).max() > 0.18
    # uniform rotations: E[Q_k²] = 1/4 for each component of a uniform quaternion on S³
    np.testing.assert_allclose((qs[:, L.quat_q] ** 2).mean(axis=(0, 1)), 0.25, atol=0.03)
    q32 = cfg.random(tree, jax.random.key(0), dtype=jnp.float32)
    assert q32.dtype == jnp.float32
    np.testing.assert_allclose(np.linalg.norm(np.asarray(q32)[L.quat_q], axis=-1), 1.0, atol=1e-6)


def test_float32(tree):
    q, dq = random_q(tree, 0), random_dq(tree, 0)
    q32, dq32 = jnp.asarray(q, jnp.float32), jnp.asarray(dq, jnp.float32)
    out = cfg.integrate(tree, q32, dq32)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, cfg.integrate(tree, q, dq), atol=1e-5)
    d = cfg.difference(tree, q32, out)
    assert d.dtype == jnp.float32
    np.testing.assert_allclose(d, cfg.difference(tree, q, cfg.integrate(tree, q, dq)), atol=1e-4)
    assert cfg.integrate(tree, q32, jnp.zeros(tree.nv, jnp.float32)).dtype == jnp.float32


def test_jit_and_vmap(tree):
    qs = jnp.stack([random_q(tree, seed) for seed in range(5)])
    dqs = jnp.asarray(np.random.default_rng(9).normal(size=(5, tree.nv)))
    batched = jax.jit(jax.vmap(lambda q, d: cfg.integrate(tree, q, d)))(qs, dqs)
    for i in range(5):
        np.testing.assert_allclose(batched[i], cfg.integrate(tree, qs[i], dqs[i]), atol=1e-14)
    qdot = jax.jit(jax.vmap(lambda q, v: cfg.velocity_to_qdot(tree, q, v, check=True)))(qs, dqs)
    np.testing.assert_allclose(qdot[2], cfg.velocity_to_qdot(tree, qs[2], dqs[2]), atol=1e-14)


# ---- bad input ----------------------------------------------------------------------------------


def test_wrong_lengths_name_nq_and_nv(tree):
    q, v = cfg.neutral(tree), jnp.zeros(tree.nv)
    msg = r"q has 29 entries; model 'mixed' has nq = 30 \(configuration\) and nv = 25 \(velocity\)"
    with pytest.raises(ValueError, match=msg):
        cfg.integrate(tree, q[:-1], v)
    with pytest.raises(ValueError, match=r"q has 25 entries; .*q must have nq = 30"):
        cfg.velocity_to_qdot(tree, v, v)
    with pytest.raises(ValueError, match=r"dq has 30 entries; .*dq must have nv = 25"):
        cfg.integrate(tree, q, q)
    with pytest.raises(ValueError, match=r"q1 has shape \(2, 30\).*jax.vmap"):
        cfg.difference(tree, q, jnp.stack([q, q]))
    with pytest.raises(ValueError, match="q has 29 entries"):
        jax.jit(lambda x: cfg.normalize(tree, x))(q[:-1])


def test_non_unit_quaternion_is_refused_with_check(tree):
    q = np.array(cfg.neutral(tree))
    a = tree.q_start[5]  # the second ball joint, segment 's5'
    q[a : a + 4] = [1.0, 0.1, 0.0, 0.0]
    v = jnp.zeros(tree.nv)
    msg = rf"q\[{a}:{a + 4}\], the quaternion of segment 's5' \(spherical joint\), is not a unit"
    with pytest.raises(ValueError, match=msg):
        cfg.integrate(tree, q, v, check=True)
    with pytest.raises(ValueError, match=msg):
        cfg.check_unit(tree, q)
    with pytest.raises(ValueError, match=r"q1\[.*segment 's5'"):
        cfg.difference(tree, cfg.neutral(tree), q, check=True)
    nan = np.array(cfg.neutral(tree))
    nan[tree.q_start[0] + 4] = np.nan  # the free root's quaternion
    with pytest.raises(ValueError, match="segment 's0' \\(free joint\\)"):
        cfg.check_unit(tree, nan)
    # traced: the same message from equinox at run time
    with pytest.raises((eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError), match="segment 's5'"):
        jax.jit(lambda x: cfg.integrate(tree, x, v, check=True))(jnp.asarray(q))
    # unchecked, the quaternion is used as given
    assert np.all(np.isfinite(cfg.integrate(tree, q, v)))
    cfg.check_unit(tree, cfg.normalize(tree, q))


def test_bad_random_arguments(tree):
    with pytest.raises(ValueError, match="key must be one PRNG key"):
        cfg.random(tree, 0)
    with pytest.raises(ValueError, match="angle must be non-negative"):
        cfg.random(tree, jax.random.key(0), angle=-1.0)


def test_exported():
    assert jb.configuration is cfg
    assert "configuration" in jb.__all__


@pytest.mark.slow
def test_dynamics_with_a_non_unit_quaternion():
    """Without ``check`` the dynamics use ``Q/|Q|`` (the normalised configuration's results); with
    ``check=True`` a non-unit quaternion is an error naming the segment: ValueError for a concrete
    ``q``, a run-time error under jit and vmap."""
    tree = jb.load_model("wholebody", dtype=jnp.float64).tree
    q = np.asarray(jb.configuration.random(tree, jax.random.PRNGKey(3)))
    v = np.random.default_rng(3).normal(size=tree.nv)
    scaled = q.copy()
    scaled[3:7] *= 1.5  # the pelvis (free joint) quaternion
    np.testing.assert_allclose(
        jb.inverse_dynamics(tree, scaled, v, v), jb.inverse_dynamics(tree, q, v, v), rtol=1e-12, atol=1e-10
    )
    np.testing.assert_allclose(
        jax.vmap(lambda x: jb.mass_matrix(tree, x))(scaled[None])[0], jb.mass_matrix(tree, q), rtol=1e-12, atol=1e-12
    )
    jb.inverse_dynamics(tree, q, v, v, check=True)  # unit: accepted
    with pytest.raises(ValueError, match=r"q\[3:7\], the quaternion of segment 'pelvis' \(free joint\).*norm is 1.5"):
        jb.inverse_dynamics(tree, scaled, v, v, check=True)
    jitted = jax.jit(lambda x: jb.inverse_dynamics(tree, x, v, v, check=True))
    vmapped = jax.jit(jax.vmap(lambda x: jb.mass_matrix(tree, x, check=True)))
    for call in (lambda: jitted(scaled), lambda: vmapped(np.stack([q, scaled]))):
        with pytest.raises(Exception, match="quaternion of segment 'pelvis'"):
            jax.block_until_ready(call())
