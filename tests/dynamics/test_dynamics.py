"""Dynamics checks that need no other library: closed forms, identities, conservation,
finite differences, float32 against float64, vmap against a loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from tests._models import double_pendulum_dict, random_model_dict


def _trees():
    out = {name: jb.load_model(name, dtype=jnp.float64).tree for name in jb.shipped_models()}
    rng = np.random.default_rng(42)
    for n in (1, 4, 9):
        out[f"random{n}"] = jb.SegmentTree.from_dict(random_model_dict(rng, n), dtype=jnp.float64)
    out["chain6"] = jb.SegmentTree.from_dict(random_model_dict(rng, 6, chain=True), dtype=jnp.float64)
    return out


TREES = _trees()


def models(default):
    """All trees, those not in ``default`` marked slow (each tree costs its own compilations)."""
    return [n if n in default else pytest.param(n, marks=pytest.mark.slow) for n in sorted(TREES)]


def state(tree, seed=0):
    """``(q, qd, qdd, tau)``: ``q`` (``nq``) from `jb.configuration.random` (angles and slides in
    [−1, 1], uniform ball-joint rotations); ``qd``, ``qdd``, ``tau`` (``nv``) uniform in ±2, ±5, ±10."""
    q = jb.configuration.random(tree, jax.random.PRNGKey(seed), angle=1.0, distance=1.0)
    rng = np.random.default_rng(seed)
    return (q,) + tuple(jnp.asarray(rng.uniform(-s, s, tree.nv)) for s in (2.0, 5.0, 10.0))


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1.0)


# ---- Watanabe & Duarte's notebook: the double pendulum in closed form ------------------------------------------


def closed_form_double_pendulum(q, qd, m1=1.0, m2=1.0, l1=1.0, l2=0.5, g=9.81):
    """Watanabe & Duarte's notebook in absolute angles θ = A q, mapped to jaxbio's relative coordinates.

    M θ̈ = C + G + Q with G from the notebook's *equation* (m₂ g l₁ sin θ₁ in the first row; the
    notebook's code has m₂ g l₂, a typo). Relative coordinates: M_rel = Aᵀ M A, and the bias
    (left-hand side) −Aᵀ(C + G).
    """
    A = np.array([[1.0, 0.0], [1.0, 1.0]])
    th, thd = A @ q, A @ qd
    d = th[0] - th[1]
    M = np.array(
        [[m1 * l1**2 / 3 + m2 * l1**2, m2 * l1 * l2 * np.cos(d) / 2], [m2 * l1 * l2 * np.cos(d) / 2, m2 * l2**2 / 3]]
    )
    C = np.array([-m2 * l1 * l2 / 2 * thd[1] ** 2 * np.sin(d), m2 * l1 * l2 / 2 * thd[0] ** 2 * np.sin(d)])
    G = np.array([-m1 * g * l1 / 2 * np.sin(th[0]) - m2 * g * l1 * np.sin(th[0]), -m2 * g * l2 / 2 * np.sin(th[1])])
    return A.T @ M @ A, -A.T @ C, -A.T @ G


@pytest.mark.parametrize("seed", range(5))
def test_double_pendulum_closed_form(seed):
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    q, qd, _, _ = state(tree, seed)
    M, C, G = closed_form_double_pendulum(np.asarray(q), np.asarray(qd))
    np.testing.assert_allclose(jb.mass_matrix(tree, q), M, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jb.gravity_forces(tree, q), G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jb.bias_forces(tree, q, qd), C + G, rtol=1e-12, atol=1e-12)


# ---- identities on every model --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", models({"sagittal11", "random9"}))
def test_mass_matrix_spd_and_inverse_of_forward(name):
    tree = TREES[name]
    for seed in range(3):
        q, qd, _, tau = state(tree, seed)
        M = np.asarray(jb.mass_matrix(tree, q))
        np.testing.assert_allclose(M, M.T, atol=1e-14)
        assert np.linalg.eigvalsh(M)[0] > 0
        rng = np.random.default_rng(seed + 100)
        n = tree.n_segments
        ext = (jnp.asarray(rng.normal(size=(n, 3))), jnp.asarray(rng.normal(size=(n, 3))))
        qdd = jb.forward_dynamics(tree, q, qd, tau, external=ext)
        assert rel(jb.inverse_dynamics(tree, q, qd, qdd, external=ext), tau) < 1e-10
        # M from the Jacobians equals the columns of the recursion
        cols = jax.vmap(lambda e: jb.inverse_dynamics(tree, q, jnp.zeros_like(qd), e) - jb.gravity_forces(tree, q))(
            jnp.eye(tree.nv)
        )
        assert rel(cols.T, M) < 1e-12


@pytest.mark.parametrize("name", models({"arm7"}))
def test_energy_identities(name):
    tree = TREES[name]
    q, qd, _, tau = state(tree, 1)
    M = jb.mass_matrix(tree, q)
    assert rel(jb.kinetic_energy(tree, q, qd), 0.5 * qd @ M @ qd) < 1e-12
    # g(q) = ∂V/∂q, along q ⊕ dq (the velocity coordinates: ∂/∂q itself for axial trees)
    dV = jax.grad(lambda dq: jb.potential_energy(tree, jb.configuration.integrate(tree, q, dq)))(jnp.zeros_like(qd))
    assert rel(dV, jb.gravity_forces(tree, q)) < 1e-11
    # power balance along the motion: dE/dt = qdᵀ tau, with q̇ = G(q) qd
    qdd = jb.forward_dynamics(tree, q, qd, tau)
    energy = lambda q, qd: jb.kinetic_energy(tree, q, qd) + jb.potential_energy(tree, q)
    _, dE = jax.jvp(energy, (q, qd), (jb.configuration.velocity_to_qdot(tree, q, qd), qdd))
    np.testing.assert_allclose(dE, qd @ tau, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("name", models({"wholebody"}))
def test_root_wrench_is_global_newton(name):
    """Force through the root joints = Σ m (a_C − g) − Σ F_ext (whole-body Newton law)."""
    tree = TREES[name]
    q, qd, qdd, _ = state(tree, 2)
    rng = np.random.default_rng(7)
    ext = (jnp.asarray(rng.normal(size=(tree.n_segments, 3))), jnp.zeros((tree.n_segments, 3)))
    forces, moments = jb.segment_wrenches(tree, q, qd, qdd, external=ext)
    roots = [i for i, p in enumerate(tree.parents) if p < 0]
    qdot = lambda q, v: jb.configuration.velocity_to_qdot(tree, q, v)  # q̇ = G(q) v (= v for axial trees)
    com_vel = lambda q, v: jax.jvp(lambda q: jb.dynamics.segment_coms(tree, q), (q,), (qdot(q, v),))[1]
    com_acc = jax.jvp(com_vel, (q, qd), (qdot(q, qd), qdd))[1]  # d²c/dt²
    expect = jnp.sum(tree.masses[:, None] * (com_acc - tree.gravity), axis=0) - jnp.sum(ext[0], axis=0)
    assert rel(jnp.sum(forces[jnp.asarray(roots)], axis=0), expect) < 1e-10
    if not tree.is_axial:  # ball and free joints have no axis (their tau: test_pinocchio.py)
        return
    # tau is the axis component of the joint wrench
    tau = jb.inverse_dynamics(tree, q, qd, qdd, external=ext)
    _, att = jb.forward_kinematics(tree, q)
    axes = jb.quaternion.rotate(att, tree.axes)
    proj = jnp.where(jnp.asarray(tree.is_revolute), jnp.sum(axes * moments, 1), jnp.sum(axes * forces, 1))
    assert rel(proj, tau) < 1e-12


# ---- derivatives, precision, batching -------------------------------------------------------


def central_differences(f, x, eps=1e-6):
    """∂f/∂x ``(m, *x.shape)`` by central differences, all perturbations in one vmapped call."""
    basis = jnp.eye(x.size, dtype=x.dtype).reshape((x.size,) + x.shape)
    both = jax.jit(jax.vmap(lambda e: f(x + eps * e)))(jnp.concatenate([basis, -basis]))  # one compile
    d = (both[: x.size] - both[x.size :]) / (2 * eps)  # (x.size, *out)
    return jnp.moveaxis(d, 0, -1).reshape(d.shape[1:] + x.shape)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, with_forward",
    [
        ("double_pendulum", False),
        pytest.param("arm7", False, marks=pytest.mark.slow),
        pytest.param("double_pendulum", True, marks=pytest.mark.slow),
        pytest.param("arm7", True, marks=pytest.mark.slow),
        pytest.param("random9", True, marks=pytest.mark.slow),
        pytest.param("chain6", True, marks=pytest.mark.slow),
    ],
)
def test_gradients_against_finite_differences(name, with_forward):
    """jax.grad (reverse) and jax.jacfwd (forward) of the dynamics against central differences,
    with respect to the state and to the model's parameters."""
    tree = TREES[name]
    n = tree.nq
    q, qd, qdd, tau = state(tree, 3)
    x = jnp.concatenate([q, qd, qdd])
    w = jnp.asarray(np.random.default_rng(0).normal(size=n))
    inv = lambda x: jb.inverse_dynamics(tree, x[:n], x[n : 2 * n], x[2 * n :])
    fwd = lambda x: jb.forward_dynamics(tree, x[:n], x[n : 2 * n], x[2 * n :])
    for f in (inv, fwd) if with_forward else (inv,):
        fd = central_differences(f, x)
        assert rel(jax.jit(jax.jacfwd(f))(x), fd) < 1e-7
        assert rel(jax.jit(jax.grad(lambda x: w @ f(x)))(x), w @ fd) < 1e-7

    def id_params(p):
        m, c, i, o = p[:n], p[n : 4 * n].reshape(n, 3), p[4 * n : 13 * n].reshape(n, 3, 3), p[13 * n :].reshape(n, 3)
        return jb.inverse_dynamics(eqx_replace(tree, masses=m, coms=c, inertias=i, origins=o), q, qd, qdd)

    p = jnp.concatenate([tree.masses, tree.coms.ravel(), tree.inertias.ravel(), tree.origins.ravel()])
    fd = central_differences(id_params, p)
    assert rel(jax.jit(jax.grad(lambda p: w @ id_params(p)))(p), w @ fd) < 1e-7
    assert rel(jax.jit(jax.jacfwd(id_params))(p), fd) < 1e-7


def eqx_replace(tree, **kw):
    import equinox as eqx

    return eqx.tree_at(lambda t: [getattr(t, k) for k in kw], tree, list(kw.values()))


@pytest.mark.parametrize("name", models({"random9"}))
def test_float32_close_to_float64(name):
    tree = TREES[name]
    t32 = tree.astype(jnp.float32)
    q, qd, qdd, tau = state(tree, 4)
    f64 = jb.inverse_dynamics(tree, q, qd, qdd)
    f32 = jb.inverse_dynamics(t32, *(x.astype(jnp.float32) for x in (q, qd, qdd)))
    assert f32.dtype == jnp.float32
    assert rel(f32, f64) < 1e-4
    M64, M32 = jb.mass_matrix(tree, q), jb.mass_matrix(t32, q.astype(jnp.float32))
    assert M32.dtype == jnp.float32 and rel(M32, M64) < 1e-4


def test_vmap_over_states_and_parameters():
    tree = TREES["random9"]
    rng = np.random.default_rng(5)
    Q, QD, QDD = (jnp.asarray(rng.uniform(-1, 1, (16, tree.nq))) for _ in range(3))
    batched = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(tree, Q, QD, QDD)
    loop = jnp.stack([jb.inverse_dynamics(tree, *x) for x in zip(Q, QD, QDD)])
    np.testing.assert_allclose(batched, loop, rtol=1e-12, atol=1e-12)
    # a population of subjects: stacked masses and COMs, same topology
    scale = jnp.asarray(rng.uniform(0.8, 1.2, (16, 1)))
    subjects = eqx_replace(tree, masses=scale * tree.masses, coms=scale[:, :, None] * tree.coms)
    per_subject = lambda m, c: jb.inverse_dynamics(eqx_replace(tree, masses=m, coms=c), Q[0], QD[0], QDD[0])
    out = jax.vmap(per_subject)(subjects.masses, subjects.coms)
    for k in (0, 7, 15):
        one = eqx_replace(tree, masses=subjects.masses[k], coms=subjects.coms[k])
        np.testing.assert_allclose(out[k], jb.inverse_dynamics(one, Q[0], QD[0], QDD[0]), rtol=1e-12, atol=1e-12)
    M = jax.vmap(lambda m, c: jb.mass_matrix(eqx_replace(tree, masses=m, coms=c), Q[0]))(subjects.masses, subjects.coms)
    assert M.shape == (16, tree.nq, tree.nq)
