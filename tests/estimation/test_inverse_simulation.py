"""The inverse simulation of Blajer et al. 2007: clamped pseudoinverse (eq. 6), flying (eqs. 2–5) and support
(eqs. 7–8) phases on sagittal11 with the mapped Gait10dof18musc muscles.

Round trips: controls u → q̈ by `jb.forward_dynamics` (flight) or the constrained KKT solve
(support) → inverse simulation → u (non-redundant) or the same joint moments (redundant)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize as so

import jaxbio as jb
from jaxbio.dynamics import Contact, constrained_forward_dynamics, contact_jacobian
from jaxbio.estimation._inverse_simulation import (
    control_matrix,
    inverse_simulate_motion,
    inverse_simulation,
    unproducible_moments,
)
from jaxbio.estimation.pseudoinverse import clamped_pseudoinverse
from jaxbio.papers.blajer_body import sagittal11_muscle_model
from jaxbio.muscles.geometry import moment_arms
from jaxbio.muscles.sets import load_muscle_set

FOOT_R = (Contact("foot_r", (0.0, -0.067899, 0.0), weld=True),)


# ---- clamped pseudoinverse ------------------------------------------------------------------

_batched_pinv = jax.jit(jax.vmap(lambda H, b, mask: clamped_pseudoinverse(H, b, nonnegative=mask)))


def _random_problems(rng, N=24, k=6, m=15):
    H = rng.normal(size=(N, k, m))
    mask = rng.random((N, m)) < 0.7
    x0 = rng.normal(size=(N, m))
    x0 = np.where(mask, np.abs(x0) * (rng.random((N, m)) < 0.6), x0)  # feasible, some zeros
    b = np.einsum("nkm,nm->nk", H, x0)
    return H, b, mask


def test_pseudoinverse_kkt_and_scipy():
    rng = np.random.default_rng(0)
    H, b, mask = _random_problems(rng)
    s = _batched_pinv(H, b, mask)
    x, nu = np.asarray(s.x), np.asarray(s.multipliers)
    assert np.all(s.converged)
    for n in range(len(H)):
        act = np.asarray(s.active[n])
        w = H[n].T @ nu[n]
        np.testing.assert_allclose(H[n] @ x[n], b[n], atol=1e-10)  # primal feasibility
        assert np.all(x[n][mask[n]] >= 0)
        np.testing.assert_allclose(x[n][act], w[act], atol=1e-10)  # stationarity on the free set
        assert np.all(x[n][~act] == 0)  # complementary slackness: clamped entries vanish…
        assert np.all(w[~act] <= 1e-9)  # …and their multipliers −(Hᵀν) are ≥ 0
        assert np.all(mask[n][~act])  # torques (mask false) are never clamped
    # an independent QP solver agrees (SLSQP, a few problems)
    for n in range(6):
        r = so.minimize(
            lambda y: 0.5 * y @ y,
            np.where(mask[n], 1.0, 0.0),
            jac=lambda y: y,
            constraints=[{"type": "eq", "fun": lambda y: H[n] @ y - b[n], "jac": lambda y: H[n]}],
            bounds=[(0, None) if mk else (None, None) for mk in mask[n]],
            method="SLSQP",
            options={"ftol": 1e-15, "maxiter": 500},
        )
        assert r.success
        np.testing.assert_allclose(x[n], r.x, atol=1e-6)


def test_pseudoinverse_blajer_formula_and_infeasible():
    rng = np.random.default_rng(1)
    H, b, _ = _random_problems(rng)
    # no sign constraint: exactly H†b = Hᵀ(HHᵀ)⁻¹b (Blajer et al. 2007, eq. 6), one solve
    s = _batched_pinv(H, b, np.zeros(b.shape[:1] + H.shape[2:], bool))
    for n in range(3):
        np.testing.assert_allclose(s.x[n], H[n].T @ np.linalg.solve(H[n] @ H[n].T, b[n]), rtol=1e-10, atol=1e-12)
        assert s.iterations[n] == 1
    # all non-negative and b out of reach: the non-negative least-squares residual (scipy nnls)
    Hn = np.abs(H)
    bn = -np.abs(b) + 0.5 * np.abs(b).mean()
    s = _batched_pinv(Hn, bn, np.ones(b.shape[:1] + H.shape[2:], bool))
    for n in range(6):
        _, rn = so.nnls(Hn[n], bn[n])
        np.testing.assert_allclose(np.linalg.norm(s.residual[n]), rn, rtol=1e-8)
        assert not s.converged[n] and np.all(s.x[n] >= 0)


@pytest.mark.slow
def test_pseudoinverse_grad_and_errors():
    rng = np.random.default_rng(2)
    H, b, mask = _random_problems(rng, N=1, k=4, m=9)
    H, b = H[0], b[0] + 0.1
    f = jax.jit(lambda bb: jnp.sum(clamped_pseudoinverse(H, bb).x ** 2))
    g = jax.grad(f)(jnp.asarray(b))
    e = 1e-6
    fd = np.array([(f(b + e * np.eye(4)[i]) - f(b - e * np.eye(4)[i])) / (2 * e) for i in range(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8)
    with pytest.raises(ValueError, match="b has shape"):
        clamped_pseudoinverse(np.ones((3, 5)), np.ones(4))
    with pytest.raises(ValueError, match="nonnegative"):
        clamped_pseudoinverse(np.ones((3, 5)), np.ones(3), nonnegative=np.ones(4, bool))
    with pytest.raises(ValueError, match="H must be"):
        clamped_pseudoinverse(np.ones(5), np.ones(3))


# ---- muscle mapping --------------------------------------------------------------------------


@pytest.mark.slow
def test_sagittal_muscles_match_opensim_moment_arms():
    model = sagittal11_muscle_model()
    gt, gp, _ = load_muscle_set("gait10dof18musc")
    # OpenSim hip, knee, ankle (r, l) = gait q[3:9]; sagittal11 = q[3,4,5,7,8,9]
    rng = np.random.default_rng(3)
    worst = 0.0
    for _ in range(3):
        legs = rng.uniform([-0.5, -1.2, -0.4], [1.0, 0.0, 0.4], size=(2, 3)).ravel()
        qs = np.zeros(11)
        qs[[3, 4, 5, 7, 8, 9]] = legs
        qg = np.zeros(10)
        qg[3:9] = legs
        R = np.asarray(moment_arms(model.paths, model.tree, qs))
        Rg = np.asarray(moment_arms(gp, gt, qg))
        assert np.abs(R[:, :3]).max() < 1e-12  # muscles are internal: nothing on the floating base
        d = np.abs(R[:, [3, 4, 5, 7, 8, 9]] - Rg[:, 3:9])
        # same paths up to the segment scale factors (≤ 7 %, thigh) and the knee offset
        assert np.all(d <= 0.1 * np.abs(Rg[:, 3:9]) + 2e-3)
        worst = max(worst, d.max())
    assert worst < 6e-3


# ---- inverse simulation ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_model():
    return sagittal11_muscle_model()


@pytest.fixture(scope="module")
def small_model():
    # as many controls as joints: per leg hamstrings, vasti, gastroc (triangular over hip, knee,
    # ankle) + the two MTP torques → S is 8 × 8 and invertible
    return sagittal11_muscle_model(
        muscles=["hamstrings_r", "vasti_r", "gastroc_r", "hamstrings_l", "vasti_l", "gastroc_l"]
    )


def _states(rng, T):
    q = rng.normal(size=(T, 11)) * 0.25
    q[:, [4, 8]] = -np.abs(q[:, [4, 8]])  # knees flexed (anatomical range)
    qd = rng.normal(size=(T, 11))
    return q, qd


def _controls(rng, model, T):
    u = np.abs(rng.normal(size=(T, model.n_controls))) * 400.0
    u[:, model.n_muscles :] = rng.normal(size=(T, model.n_controls - model.n_muscles)) * 20.0
    return u


_B = jax.jit(jax.vmap(control_matrix, in_axes=(None, 0)))
_fd = jax.jit(jax.vmap(jb.forward_dynamics, in_axes=(None, 0, 0, 0)))
_id = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))
_cfd = jax.jit(jax.vmap(constrained_forward_dynamics, in_axes=(None, 0, 0, 0, None)))


def _flying_data(rng, model, T):
    q, qd = _states(rng, T)
    u = _controls(rng, model, T)
    B = np.asarray(_B(model, q))
    qdd = np.asarray(_fd(model.tree, q, qd, np.einsum("tnm,tm->tn", B, u)))
    return q, qd, qdd, u, B


def _support_data(rng, model, T, contacts):
    q, _ = _states(rng, T)
    # velocities that keep the contacts still: in the null space of C
    C = np.asarray(jax.jit(jax.vmap(contact_jacobian, in_axes=(None, 0, None)))(model.tree, q, contacts))
    V = np.linalg.svd(C)[2][:, C.shape[1] :]  # (T, n − r, n)
    qd = np.einsum("tkn,tk->tn", V, rng.normal(size=V.shape[:2]))
    u = _controls(rng, model, T)
    B = np.asarray(_B(model, q))
    qdd, ground = _cfd(model.tree, q, qd, np.einsum("tnm,tm->tn", B, u), contacts)
    lam = np.concatenate([np.asarray(ground)[:, i, : c.rows] for i, c in enumerate(contacts)], axis=1)
    return q, qd, np.asarray(qdd), u, B, lam


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_nonredundant_flying_round_trip(small_model):
    rng = np.random.default_rng(4)
    J = list(small_model.joints)
    T = 8
    q, qd, qdd, u, B = _flying_data(rng, small_model, T)
    qdd_bad = qdd.copy()
    qdd_bad[4:6, 1] += 2.0  # frames 4, 5: vertical base acceleration off by 2 m/s²
    u_neg = u.copy()
    u_neg[6:, 0] = -300.0  # frames 6, 7: hamstrings_r would have to push
    Bn = np.einsum("tnm,tm->tn", B, u_neg)
    qdd_neg = np.asarray(_fd(small_model.tree, q, qd, Bn))
    qdd_in = np.where(np.arange(T)[:, None] < 6, qdd_bad, qdd_neg)
    res = inverse_simulate_motion(small_model, q, qd, qdd_in)  # vmapped over frames
    got = np.concatenate([res.muscle_forces, res.torques], axis=1)
    np.testing.assert_allclose(got[:4], u[:4], rtol=1e-8, atol=1e-8)  # exactly the controls
    assert np.all(res.muscle_forces >= 0)
    # u′ of eq. 5 equals the joint moments of the independent wrench recursion (RNEA)
    np.testing.assert_allclose(
        res.required_moments[:4], np.asarray(_id(small_model.tree, q, qd, qdd))[:4, J], rtol=1e-9, atol=1e-8
    )
    # uncontrolled-subspace residual (eq. 2): ~0 when consistent, reported when not: the missing
    # vertical force = mass moved by base_y × 2 m/s²
    assert np.abs(np.asarray(res.uncontrolled_residual)[[0, 1, 2, 3, 6, 7]]).max() < 1e-8
    moved = float(np.sum(small_model.tree.masses[1:]))
    np.testing.assert_allclose(res.uncontrolled_residual[4:6, 1], moved * 2.0, rtol=1e-9)
    # eq. 3: the controls reproduce the measured *joint* accelerations of the perturbed frames
    np.testing.assert_allclose(got[4:6], u[4:6], rtol=1e-8, atol=1e-8)
    qdd_back = np.asarray(_fd(small_model.tree, q, qd, np.einsum("tnm,tm->tn", B, got)))
    np.testing.assert_allclose(qdd_back[4:6][:, J], qdd_bad[4:6][:, J], rtol=1e-8, atol=1e-8)
    assert np.abs(qdd_back[4:6, 1] - qdd_bad[4:6, 1]).min() > 1.0
    # frames 6, 7 need a hip flexion moment only a pushing hamstrings could give: reported
    issues = unproducible_moments(small_model, res)
    assert {t for t, _, _ in issues} == {6, 7}
    assert {j for _, j, _ in issues} <= {"thigh_r", "shank_r", "foot_r"}
    assert "thigh_r" in {j for _, j, _ in issues}
    assert res.muscle_forces[6, 0] == 0.0 and not np.any(res.solution.converged[6:])


@pytest.mark.slow
def test_nonredundant_support_round_trip(small_model):
    rng = np.random.default_rng(8)
    q, qd, qdd, u, B, lam = _support_data(rng, small_model, 6, FOOT_R)
    res = inverse_simulate_motion(small_model, q, qd, qdd, contacts=FOOT_R)
    got = np.concatenate([res.muscle_forces, res.torques], axis=1)
    np.testing.assert_allclose(got, u, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(res.ground_reaction, lam, rtol=1e-8, atol=1e-7)  # eliminated reactions back
    assert np.abs(res.constraint_residual).max() < 1e-9
    assert np.abs(res.uncontrolled_residual).max() < 1e-7
    assert unproducible_moments(small_model, res) == []


@pytest.mark.slow
def test_redundant_flying_consistency_and_perturbation(full_model):
    rng = np.random.default_rng(5)
    J = list(full_model.joints)
    q, qd, qdd, u, B = _flying_data(rng, full_model, 8)
    qdd_bad = qdd.copy()
    qdd_bad[4:, 1] += 2.0  # vertical base acceleration off by 2 m/s² in frames 4..7
    res = inverse_simulate_motion(full_model, q, qd, qdd_bad)
    assert np.all(res.solution.converged)
    assert np.all(res.muscle_forces >= 0)
    S = B[:, J]
    # moments reproduced (consistent frames: the ones of the known controls)
    np.testing.assert_allclose(res.joint_moments[:4], np.einsum("tkm,tm->tk", S, u)[:4], rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(res.torques[:4], u[:4, full_model.n_muscles :], atol=1e-8)
    # uncontrolled-subspace residual (eq. 2): ~0 when consistent, reported when not
    assert np.abs(res.uncontrolled_residual[:4]).max() < 1e-8
    total_mass = float(np.sum(full_model.tree.masses))
    np.testing.assert_allclose(
        res.uncontrolled_residual[4:, 1], (total_mass - float(full_model.tree.masses[0])) * 2.0, rtol=1e-9
    )
    # eq. 3: the controls reproduce the measured *joint* accelerations of the perturbed frames
    u_got = np.concatenate([res.muscle_forces, res.torques], axis=1)
    qdd_back = np.asarray(_fd(full_model.tree, q, qd, np.einsum("tnm,tm->tn", B, u_got)))
    np.testing.assert_allclose(qdd_back[:, J], qdd_bad[:, J], rtol=1e-8, atol=1e-8)
    assert np.abs(qdd_back[4:, 1] - qdd_bad[4:, 1]).min() > 1.0
    # one frame through the single-frame function equals the vmapped result
    one = jax.jit(inverse_simulation)(full_model, q[5], qd[5], qdd_bad[5])
    np.testing.assert_allclose(one.muscle_forces, res.muscle_forces[5], rtol=1e-10, atol=1e-9)


@pytest.mark.slow
def test_redundant_support_phase(full_model):
    rng = np.random.default_rng(6)
    J = list(full_model.joints)
    q, qd, qdd, u, B, lam = _support_data(rng, full_model, 6, FOOT_R)
    res = inverse_simulate_motion(full_model, q, qd, qdd, contacts=FOOT_R)
    assert np.all(res.muscle_forces >= 0) and np.all(res.solution.converged)
    np.testing.assert_allclose(res.joint_moments, np.einsum("tkm,tm->tk", B[:, J], u), rtol=1e-10, atol=1e-8)
    # same joint moments → the same ground reaction
    np.testing.assert_allclose(res.ground_reaction, lam, rtol=1e-8, atol=1e-7)
    assert np.abs(res.uncontrolled_residual).max() < 1e-7


@pytest.mark.slow
def test_unproducible_moment_is_reported(small_model):
    # drop the torque actuator at the left MTP: its load cannot be carried
    model = type(small_model)(
        small_model.tree, small_model.paths, small_model.torque_coordinates[:1], small_model.unactuated
    )
    rng = np.random.default_rng(7)
    q, qd, qdd, u, B = _flying_data(rng, small_model, 6)
    res = inverse_simulate_motion(model, q, qd, qdd)
    issues = unproducible_moments(model, res)
    assert {j for _, j, _ in issues} == {"toes_l"}
    assert sorted({t for t, _, _ in issues}) == list(range(6))
    with pytest.raises(ValueError, match=r"frame 0, joint 'toes_l'"):
        inverse_simulate_motion(model, q, qd, qdd, strict=True)


def test_bad_motion_input(small_model):
    q = np.zeros((5, 11))
    with pytest.raises(ValueError, match="same number of frames.*qd: 4"):
        inverse_simulate_motion(small_model, q, np.zeros((4, 11)), q)
    bad = q.copy()
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match=r"qdd contains NaN.*frame 3, coordinate 'foot_r'"):
        inverse_simulate_motion(small_model, q, q, bad)
    with pytest.raises(ValueError, match="expected \\(frames, 11\\)"):
        inverse_simulate_motion(small_model, q[:, :10], q, q)
    with pytest.raises(ValueError, match="contact segment 'heel'"):
        inverse_simulate_motion(small_model, q, q, q, contacts=("heel",))
    with pytest.raises(ValueError, match="unknown muscles"):
        sagittal11_muscle_model(muscles=["biceps"])
