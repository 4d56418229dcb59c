"""Static optimisation of muscle forces (jaxbio.estimation._static_optimization).

Independent references: the KKT conditions written out by hand from the returned multipliers,
scipy's SLSQP on the same problems, central finite differences of the solution, the envelope
theorem (∂cost/∂τ = the moment multipliers), the muscle geometry (rᵀF recomputed with
`generalized_forces`, the Hill force at the returned activation), and the pseudoinverse route of
Blajer et al. 2007. arm26 (2 DOF, 6 muscles) for the default tests, gait10dof18musc (10 DOF, 18 muscles,
reserves on the pelvis and lumbar coordinates) in a slow test. Float64 (tests/conftest.py).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxbio as jb
from jaxbio.estimation._static_optimization import (  # _frames_solver: the compiled batch, shared
    StaticOptimizationResult,
    _frames_solver,
    check_feasible,
    muscle_force_components,
    static_optimization,
    static_optimization_motion,
)
from jaxbio.muscles import geometry, sets
from jaxbio.muscles.curves import HillMuscle

ARM_TREE, ARM_PATHS, ARM_PARAMS = sets.load_muscle_set("arm26", dtype=jnp.float64)
FMAX = ARM_PARAMS.max_isometric_force
FLEXORS = np.array([0, 0, 0, 1, 1, 1], float)  # BIClong, BICshort, BRA
EXTENSORS = 1.0 - FLEXORS

try:  # qpax is optional (p = 2 backend)
    import qpax  # noqa: F401

    HAVE_QPAX = True
except ImportError:
    HAVE_QPAX = False

CONFIGS = [(2, "interior_point"), (3, "interior_point"), (2, "active_set"), (3, "active_set")]
QPAX = pytest.param(2, "qpax", marks=[pytest.mark.slow, pytest.mark.skipif(not HAVE_QPAX, reason="qpax not installed")])


@jax.jit
@jax.vmap
def arm_geometry(q, qd, qdd):
    """Per frame of arm26, computed independently of the solver: ``τ`` (inverse dynamics), the
    moment arms ``(6, 2)``, the musculotendon lengths and lengthening velocities ``(6,)``."""
    return (
        jb.inverse_dynamics(ARM_TREE, q, qd, qdd),
        geometry.moment_arms(ARM_PATHS, ARM_TREE, q),
        geometry.lengths(ARM_PATHS, ARM_TREE, q),
        geometry.lengthening_velocity(ARM_PATHS, ARM_TREE, q, qd),
    )


def _arm_frames():
    """8 arm26 frames: moment arms ``(8, 6, 2)`` and moments ``(8, 2)`` — 4 from inverse dynamics
    of random states (light), 4 made by 85–95 % of the flexors' or extensors' full force
    (heavy: upper bounds become active at the optimum)."""
    rng = np.random.default_rng(3)
    q = np.column_stack([rng.uniform(-0.3, 1.2, 8), rng.uniform(0.3, 2.0, 8)])
    qd = rng.normal(0, 2, (8, 2))
    qdd = rng.normal(0, 20, (8, 2))
    tau, R, _, _ = arm_geometry(jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd))
    heavy = np.array([0.95 * FLEXORS, 0.9 * EXTENSORS, 0.85 * FLEXORS + 0.1 * EXTENSORS, 0.9 * EXTENSORS])
    tau_heavy = jnp.einsum("kmn,km->kn", R[4:], heavy * np.asarray(FMAX))
    return q, R, jnp.concatenate([tau[:4], tau_heavy])


Q_FRAMES, R_FRAMES, TAU_FRAMES = _arm_frames()


def batched(p, solver, R=None, tau=None, fmax=None, reserve=None):
    """8 frames through the compiled ``jit(vmap)`` that `static_optimization_motion` uses (default
    options; ``p`` is traced, so p = 2 and p = 3 share it). Tests batch their perturbations in
    eights to reuse it."""
    R = R_FRAMES if R is None else jnp.broadcast_to(R, (8, 6, 2))
    tau = TAU_FRAMES if tau is None else jnp.broadcast_to(tau, (8, 2))
    fmax = jnp.broadcast_to(FMAX if fmax is None else fmax, (8, 6))
    reserve = jnp.zeros((8, 2)) if reserve is None else jnp.broadcast_to(reserve, (8, 2))
    solve = _frames_solver(solver, 1e5, 1e-9, 60, 1e-6)
    return solve(R, tau, fmax, jnp.zeros((8, 6)), reserve, jnp.asarray(float(p), jnp.float64), None)


@functools.cache
def solved(p, solver):
    return batched(p, solver)


# ---- KKT conditions, moments, bounds ----------------------------------------------------------


@pytest.mark.parametrize("p,solver", CONFIGS + [QPAX])
def test_kkt_conditions(p, solver):
    r = solved(p, solver)
    x, lam, lo, up = (
        np.asarray(a) for a in (r.activations, r.moment_multipliers, r.lower_multipliers, r.upper_multipliers)
    )
    R, tau, F = np.asarray(R_FRAMES), np.asarray(TAU_FRAMES), np.asarray(FMAX)
    assert r.converged.all() and r.feasible.all()
    # primal feasibility: moments to 1e-8 N·m, 0 ≤ x ≤ 1, forces ≥ 0
    moments = np.einsum("kmn,km->kn", R, np.asarray(r.forces))
    np.testing.assert_allclose(moments, tau, atol=1e-8, rtol=0)
    np.testing.assert_allclose(np.asarray(r.residual), 0.0, atol=1e-8)
    assert (x >= 0).all() and (x <= 1).all() and (np.asarray(r.forces) >= 0).all()
    np.testing.assert_allclose(np.asarray(r.forces), x * F, rtol=1e-14)
    # stationarity: ∇ₓ Σ xᵖ − (r diag F)ᵀ... i.e. p x^{p−1} − F ⊙ (r λ) − ν_lo + ν_up = 0
    stat = p * x ** (p - 1) - F * np.einsum("kmn,kn->km", R, lam) - lo + up
    np.testing.assert_allclose(stat, 0.0, atol=1e-9)
    # dual feasibility and complementary slackness
    assert (lo >= 0).all() and (up >= 0).all()
    np.testing.assert_allclose(lo * x, 0.0, atol=1e-12)
    np.testing.assert_allclose(up * (1 - x), 0.0, atol=1e-12)
    # the frames exercise both bounds
    assert (x == 0).any() and (x == 1).any() and (up > 1e-3).any() and (lo > 1e-3).any()


def _slsqp(R, tau, F, p, reserve=None, bounds=None):
    m, n = R.shape
    S = np.zeros(n) if reserve is None else reserve
    A = np.hstack([R.T * F, np.diag(S)])
    scale = np.abs(A).max(axis=1)  # row scaling helps SLSQP; the solution does not change
    A, tau = A / scale[:, None], tau / scale
    k = m + n

    def f(v):
        return np.sum(np.abs(v[:m]) ** p) + np.sum(v[m:] ** 2)

    def g(v):
        return np.concatenate([p * np.sign(v[:m]) * np.abs(v[:m]) ** (p - 1), 2 * v[m:]])

    res = scipy.optimize.minimize(
        f,
        np.full(k, 0.1) * np.r_[np.ones(m), np.zeros(n)],
        jac=g,
        method="SLSQP",
        bounds=(list(zip(*bounds)) if bounds is not None else [(0, 1)] * m) + [(None, None)] * n,
        constraints=[{"type": "eq", "fun": lambda v: A @ v - tau, "jac": lambda v: A}],
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert res.success, res.message
    return res.x[:m], res.x[m:] * S, res.fun


@pytest.mark.parametrize("p,solver", CONFIGS)
def test_matches_scipy_slsqp(p, solver):
    r = solved(p, solver)
    worst = 0.0
    for k in (0, 2, 4, 5, 7):
        x_ref, _, cost_ref = _slsqp(np.asarray(R_FRAMES[k]), np.asarray(TAU_FRAMES[k]), np.asarray(FMAX), p)
        np.testing.assert_allclose(np.asarray(r.activations[k]), x_ref, atol=1e-6)
        np.testing.assert_allclose(float(r.cost[k]), cost_ref, rtol=1e-8, atol=1e-12)
        worst = max(worst, np.abs(np.asarray(r.activations[k]) - x_ref).max())
        assert float(r.cost[k]) <= cost_ref + 1e-12  # never worse than SLSQP
    assert worst < 1e-6


@pytest.mark.parametrize("p", [2, 3])
def test_activation_bounds_match_scipy_slsqp(p):
    """OpenSim's control bounds: a box [l, u] per muscle instead of [0, 1], against SLSQP on the
    same box (frame 0: BRA at its lower and TRImed at its upper bound; frame 2: two lower bounds)."""
    lower = np.array([0.0, 0.0, 0.0, 0.02, 0.0, 0.05])
    upper = np.array([0.95, 1.0, 0.85, 1.0, 1.0, 1.0])
    for k in (0, 2):
        R, tau = np.asarray(R_FRAMES[k]), np.asarray(TAU_FRAMES[k])
        r = static_optimization(R, tau, FMAX, p=p, activation_bounds=(lower, upper))
        x = np.asarray(r.activations)
        assert bool(r.feasible) and bool(r.converged)
        assert (x >= lower - 1e-12).all() and (x <= upper + 1e-12).all()
        assert np.isclose(x, lower, atol=1e-12).any() or np.isclose(x, upper, atol=1e-12).any()
        x_ref, _, cost_ref = _slsqp(R, tau, np.asarray(FMAX), p, bounds=(lower, upper))
        np.testing.assert_allclose(x, x_ref, atol=1e-6)
        assert float(r.cost) <= cost_ref + 1e-12
    with pytest.raises(ValueError, match="activation_bounds"):
        static_optimization(R, tau, FMAX, activation_bounds=(upper, lower))
    with pytest.raises(ValueError, match="activation_bounds"):
        static_optimization(R, tau, FMAX, activation_bounds=(lower[:3], upper))


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_QPAX, reason="qpax not installed")
def test_qpax_and_interior_point_agree():
    a, b = solved(2, "qpax"), solved(2, "interior_point")
    np.testing.assert_allclose(np.asarray(a.forces), np.asarray(b.forces), atol=1e-9)
    np.testing.assert_allclose(
        np.asarray(a.moment_multipliers), np.asarray(b.moment_multipliers), rtol=1e-7, atol=1e-12
    )


@pytest.mark.parametrize("p", [2, 3])
def test_active_set_matches_interior_point(p):
    """The primal–dual active-set solver and the interior point: the same forces, multipliers and
    flags on the 8 frames (upper and lower bounds active), and on the same frames asked for 3× and
    6× the moments (beyond the muscles: infeasible, the unmet moment reported the same way)."""
    a, b = solved(p, "active_set"), solved(p, "interior_point")
    assert a.converged.all() and (np.asarray(a.upper_multipliers) > 1e-3).any()
    for name in ("forces", "moment_multipliers", "lower_multipliers", "upper_multipliers", "cost"):
        np.testing.assert_allclose(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)), atol=1e-8, rtol=1e-8)
    taus = TAU_FRAMES * jnp.asarray([1.0, 3.0, 1.0, 6.0, 3.0, 1.0, 6.0, 3.0])[:, None]
    a, b = batched(p, "active_set", tau=taus), batched(p, "interior_point", tau=taus)
    feasible = np.asarray(a.feasible)
    np.testing.assert_array_equal(feasible, np.asarray(b.feasible))
    assert feasible.any() and not feasible.all()
    np.testing.assert_allclose(np.asarray(a.forces), np.asarray(b.forces), atol=1e-6)
    np.testing.assert_allclose(np.asarray(a.residual), np.asarray(b.residual), atol=1e-6)


@pytest.mark.slow
def test_active_set_fallback_in_buckets(monkeypatch):
    """Frames the active-set method does not verify (here: three steps allowed, enough for one
    frame of the 8) are solved again by the interior point in buckets (here of 2, in chunks of 5:
    8 frames, two chunks, the second padded), and come back with its answer; frames it verified
    keep theirs. (The default run reaches the fallback through the infeasible frames of
    `test_active_set_matches_interior_point`, where the active-set steps do not settle.)"""
    import jaxbio.estimation._static_optimization as so_module

    monkeypatch.setattr(so_module, "CHUNK", 5)
    monkeypatch.setattr(so_module, "FALLBACK_BUCKET", 2)
    monkeypatch.setattr(so_module, "ACTIVE_SET_STEPS", 3)
    solve = _frames_solver.__wrapped__("active_set", 1e5, 1e-9, 60, 1e-6)
    r = solve(
        R_FRAMES,
        TAU_FRAMES,
        jnp.broadcast_to(FMAX, (8, 6)),
        jnp.zeros((8, 6)),
        jnp.zeros((8, 2)),
        jnp.asarray(2.0),
        None,
    )
    ref = solved(2, "interior_point")
    it = np.asarray(r.iterations)
    assert (it <= 3).any() and (it > 3).sum() >= 5  # some verified in three steps, more than a bucket handed over
    assert r.converged.all()
    np.testing.assert_allclose(np.asarray(r.forces), np.asarray(ref.forces), atol=1e-8)
    np.testing.assert_allclose(np.asarray(r.moment_multipliers), np.asarray(ref.moment_multipliers), atol=1e-8)


ARM_JOINTS = sets.coordinate_names("arm26")


@functools.cache
def _checked_single():
    """One frame, jitted, with ``check=True`` (`equinox.error_if` on infeasible frames)."""
    return jax.jit(
        lambda R, t: static_optimization(R, t, FMAX, p=2, solver="interior_point", check=True, joint_names=ARM_JOINTS)
    )


def test_vmap_matches_single_frames():
    r = solved(2, "interior_point")
    for k in (1, 6):
        one = _checked_single()(R_FRAMES[k], TAU_FRAMES[k])
        for name in ("forces", "activations", "moment_multipliers", "residual", "cost"):
            np.testing.assert_allclose(
                np.asarray(getattr(one, name)), np.asarray(getattr(r, name)[k]), atol=1e-12, rtol=1e-10
            )


@pytest.mark.slow
def test_chunked_batch_matches_single_frames(monkeypatch):
    """`_frames_solver` in chunks (here of 3: the 8 frames are 3 chunks, the last padded with a
    repeated frame) returns each frame's own solution, and its gradient with respect to the
    moments is the single frames' (implicit differentiation through `jax.lax.map`)."""
    import jaxbio.estimation._static_optimization as so_module

    monkeypatch.setattr(so_module, "CHUNK", 3)
    solve = _frames_solver.__wrapped__("interior_point", 1e5, 1e-9, 60, 1e-6)
    fmax, zeros = jnp.broadcast_to(FMAX, (8, 6)), jnp.zeros((8, 6))

    def chunked(tau):
        return solve(R_FRAMES, tau, fmax, zeros, jnp.zeros((8, 2)), jnp.asarray(2.0), None)

    def single(tau):
        return jax.vmap(lambda R, t: static_optimization(R, t, FMAX, p=2, solver="interior_point"))(R_FRAMES, tau)

    r, ref = chunked(TAU_FRAMES), single(TAU_FRAMES)
    assert r.forces.shape == (8, 6) and r.converged.all()
    for name in ("forces", "moment_multipliers", "residual", "cost", "iterations"):
        np.testing.assert_allclose(np.asarray(getattr(r, name)), np.asarray(getattr(ref, name)), atol=1e-10)
    g, g_ref = (jax.grad(lambda t, f=f: jnp.sum(_functional(f(t))))(TAU_FRAMES) for f in (chunked, single))
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=1e-8, atol=1e-10)


# ---- derivatives through the optimum ----------------------------------------------------------

WEIGHTS = jnp.linspace(0.5, 1.5, 6)


def _functional(r):
    """A scalar of the solution: ``Σ wᵢ Fᵢ + 10 cost`` (N)."""
    return jnp.sum(WEIGHTS * r.forces, axis=-1) + 10.0 * r.cost


@functools.cache
def _grad_fn(p, solver="interior_point"):
    def value(fmax, tau, R):
        return _functional(static_optimization(R, tau, fmax, p=p, solver=solver))

    return jax.jit(jax.grad(value, argnums=(0, 1, 2)))


def _central_differences(p, k, which, indices, h, solver="interior_point"):
    """Central differences of `_functional` at frame ``k`` for 4 entries of one argument, all 8
    perturbed problems in one call of the shared compiled batch."""
    base = {"fmax": FMAX, "tau": TAU_FRAMES[k], "R": R_FRAMES[k]}
    x = base[which]
    steps = []
    for i in indices:
        e = jnp.zeros(x.size).at[i].set(h).reshape(x.shape)
        steps += [x + e, x - e]
    args = dict(base, **{which: jnp.stack(steps)})
    f = np.asarray(_functional(batched(p, solver, args["R"], args["tau"], args["fmax"])))
    return (f[0::2] - f[1::2]) / (2 * h)


def _check_gradients(p, k, solver="interior_point"):
    g_f, g_t, g_r = (np.asarray(g).ravel() for g in _grad_fn(p, solver)(FMAX, TAU_FRAMES[k], R_FRAMES[k]))
    fi, ri = [0, 1, 3, 5], [1, 6, 7, 9]
    fd_f = _central_differences(p, k, "fmax", fi, 1e-3, solver)
    fd_t = _central_differences(p, k, "tau", [0, 1, 0, 1], 1e-5, solver)[:2]
    fd_r = _central_differences(p, k, "R", ri, 1e-7, solver)
    np.testing.assert_allclose(g_f[fi], fd_f, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(g_t, fd_t, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(g_r[ri], fd_r, rtol=1e-5, atol=1e-5)
    assert np.abs(fd_f).max() > 1e-4 and np.abs(fd_t).max() > 1e-2  # the test can see something


@pytest.mark.parametrize("k", [1, 4])
def test_gradients_match_finite_differences_p2(k):
    _check_gradients(2, k)


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 4])
def test_gradients_match_finite_differences_p3(k):
    _check_gradients(3, k)


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_active_set_gradients_match_finite_differences():
    """The default solver for p = 2 (active set, interior point as its fallback): implicit
    gradients at a frame with upper bounds active (frame 4) against central differences."""
    _check_gradients(2, 4, "active_set")


@pytest.mark.slow
def test_active_set_gradients_match_finite_differences_p3():
    _check_gradients(3, 4, "active_set")


@pytest.mark.parametrize("p,solver", CONFIGS)
def test_envelope_theorem(p, solver):
    """∂cost*/∂τ equals the moment multipliers (central differences of the optimal cost)."""
    k, h = 5, 1e-4
    taus = jnp.stack([TAU_FRAMES[k] + s * h * e for e in jnp.eye(2) for s in (1, -1)] * 2)
    r = batched(p, solver, R=R_FRAMES[k], tau=taus)
    fd = (r.cost[0:4:2] - r.cost[1:4:2]) / (2 * h)
    np.testing.assert_allclose(np.asarray(solved(p, solver).moment_multipliers[k]), np.asarray(fd), rtol=1e-6)


@pytest.mark.slow
def test_forward_mode_jacobian():
    """`jax.jacfwd` (forward mode through the implicit step) equals reverse mode."""
    f = lambda t: static_optimization(R_FRAMES[5], t, FMAX, p=2, solver="interior_point").forces  # noqa: E731
    jf = jax.jacfwd(f)(TAU_FRAMES[5])
    jr = jax.jacrev(f)(TAU_FRAMES[5])
    np.testing.assert_allclose(np.asarray(jf), np.asarray(jr), atol=1e-12)
    # the forces of the free muscles move, the bound ones do not
    x = np.asarray(solved(2, "interior_point").activations[5])
    bound = (x == 0) | (x == 1)
    np.testing.assert_allclose(np.asarray(jf)[bound], 0.0, atol=1e-14)


# ---- infeasible frames and bad input ---------------------------------------------------------


def test_too_weak_is_reported_with_frame_and_joint():
    tau = TAU_FRAMES.at[6].set(TAU_FRAMES[6] * 3.0)  # 3 × 90 % of the extensors: out of reach
    r = batched(2, "interior_point", tau=tau)
    feasible = np.asarray(r.feasible)
    assert not feasible[6] and feasible[np.arange(8) != 6].all()
    assert r.converged.all()
    # the unmet moment is what the muscles cannot give: forces at their limits, not a wrong answer
    assert np.abs(np.asarray(r.residual[6])).max() > 10.0
    moments = np.einsum("mn,m->n", np.asarray(R_FRAMES[6]), np.asarray(r.forces[6]))
    np.testing.assert_allclose(moments + np.asarray(r.residual[6]), np.asarray(tau[6]), atol=1e-8)
    with pytest.raises(ValueError, match=r"frame 6, joint '(r_shoulder_elev|r_elbow_flex)'"):
        check_feasible(r, ARM_JOINTS)
    check_feasible(jax.tree.map(lambda a: a[:6], r))  # the feasible frames pass


def test_joint_without_muscles_needs_a_reserve():
    """No muscle crosses the elbow (its moment arms zeroed) but it carries 2.5 N·m: infeasible at
    that joint; a reserve actuator there makes it feasible and leaves the shoulder solution alone."""
    R = R_FRAMES[0].at[:, 1].set(0.0)
    tau = TAU_FRAMES[0].at[1].set(2.5)
    r = batched(2, "interior_point", R=R, tau=tau, reserve=jnp.array([[0.0, 0.0]] * 4 + [[0.0, 10.0]] * 4))
    bare, fixed = jax.tree.map(lambda a: a[0], r), jax.tree.map(lambda a: a[4], r)
    assert not bool(bare.feasible) and bool(bare.converged)
    np.testing.assert_allclose(np.asarray(bare.residual), [0.0, 2.5], atol=1e-9)
    with pytest.raises(ValueError, match="joint 'r_elbow_flex'"):
        check_feasible(bare, ARM_JOINTS)
    assert bool(fixed.feasible)
    np.testing.assert_allclose(np.asarray(fixed.reserves), [0.0, 2.5], atol=1e-9)
    np.testing.assert_allclose(np.asarray(fixed.forces), np.asarray(bare.forces), atol=1e-9)
    np.testing.assert_allclose(np.asarray(R[:, 0] @ fixed.forces), float(tau[0]), atol=1e-9)
    # the same frame checked under jit (check=True): an equinox runtime error naming the joint
    with pytest.raises(Exception, match="r_elbow_flex"):
        jax.block_until_ready(_checked_single()(R, tau).forces)


def test_bad_input_raises():
    R, tau = R_FRAMES[0], TAU_FRAMES[0]
    with pytest.raises(ValueError, match="tau contains NaN"):
        static_optimization(R, tau.at[1].set(jnp.nan), FMAX)
    with pytest.raises(ValueError, match="tau has shape"):
        static_optimization(R, jnp.ones(3), FMAX)
    with pytest.raises(ValueError, match="max_force has shape"):
        static_optimization(R, tau, FMAX[:5])
    with pytest.raises(ValueError, match="max_force must be ≥ 0"):
        static_optimization(R, tau, -FMAX)
    with pytest.raises(ValueError, match="p must be ≥ 2"):
        static_optimization(R, tau, FMAX, p=1)
    with pytest.raises(ValueError, match="solver 'qpax' solves quadratic"):
        static_optimization(R, tau, FMAX, p=3, solver="qpax")
    q = jnp.asarray(Q_FRAMES)
    with pytest.raises(ValueError, match="tau has 7 frames but q has 8"):
        static_optimization_motion(ARM_TREE, ARM_PATHS, ARM_PARAMS, q, q, q, tau=TAU_FRAMES[:7])
    with pytest.raises(ValueError, match="qd has 5 frames but q has 8"):
        static_optimization_motion(ARM_TREE, ARM_PATHS, ARM_PARAMS, q, q[:5], q)
    with pytest.raises(ValueError, match=r"qdd contains NaN or inf \(first at frame 3, coordinate 1\)"):
        static_optimization_motion(ARM_TREE, ARM_PATHS, ARM_PARAMS, q, q, q.at[3, 1].set(jnp.nan))
    with pytest.raises(ValueError, match="no segment 'pelvis'"):
        static_optimization_motion(ARM_TREE, ARM_PATHS, ARM_PARAMS, q, q, q, reserve_strength={"pelvis": 1.0})
    with pytest.raises(ValueError, match="objective"):
        static_optimization_motion(ARM_TREE, ARM_PATHS, ARM_PARAMS, q, q, q, objective="energy")


# ---- model + motion ---------------------------------------------------------------------------


def _arm_motion(T=8):
    t = np.linspace(0.0, 1.0, T)[:, None]
    w = np.array([2.0, 3.0])
    amp, off = np.array([0.4, 0.6]), np.array([0.4, 1.2])
    return (
        jnp.asarray(off + amp * np.sin(w * t)),
        jnp.asarray(amp * w * np.cos(w * t)),
        jnp.asarray(-amp * w**2 * np.sin(w * t)),
    )


def test_motion_activation_objective_reproduces_inverse_dynamics():
    """arm26 with force–length–velocity; a weak reserve at the shoulder, which the straight-line
    TRIlong (stretched, passive) and BIClong alone cannot always balance (OpenSim's arm26 usually
    locks that joint)."""
    q, qd, qdd = _arm_motion()
    r = static_optimization_motion(
        ARM_TREE, ARM_PATHS, ARM_PARAMS, q, qd, qdd, p=2, objective="activation", reserve_strength={"r_humerus": 10.0}
    )
    assert isinstance(r, StaticOptimizationResult) and r.forces.shape == (8, 6)
    check_feasible(r, ARM_JOINTS)
    assert r.converged.all() and (np.asarray(r.forces) >= 0).all()
    tau, R, l, v = arm_geometry(q, qd, qdd)
    np.testing.assert_allclose(np.asarray(r.tau), np.asarray(tau), atol=1e-12)
    moments = np.einsum("kmn,km->kn", np.asarray(R), np.asarray(r.forces))
    np.testing.assert_allclose(moments + np.asarray(r.reserves), np.asarray(tau), atol=1e-8)
    np.testing.assert_allclose(np.asarray(r.reserves[:, 1]), 0.0, atol=1e-14)
    assert (np.abs(np.asarray(r.reserves[:, 0])) > 0.1).any()  # the reserve is needed somewhere
    # F = a F̂ + P with the rigid-tendon Hill model at the returned activation (the slightly negative
    # passive force below slack length clipped at 0)
    hill = HillMuscle(
        ARM_PARAMS.max_isometric_force,
        ARM_PARAMS.optimal_fiber_length,
        ARM_PARAMS.tendon_slack_length,
        ARM_PARAMS.pennation_angle,
        ARM_PARAMS.max_contraction_velocity,
    )
    a = np.asarray(r.activations)
    hill_force = jax.jit(jax.vmap(hill.force))
    f_a, f_0, f_1 = (np.asarray(hill_force(jnp.broadcast_to(a, (8, 6)), l, v)) for a in (r.activations, 0.0, 1.0))
    np.testing.assert_allclose(np.asarray(r.forces), f_a - f_0 + np.maximum(f_0, 0.0), rtol=1e-12, atol=1e-9)
    assert ((f_1 - f_0) < 0.95 * np.asarray(FMAX)).any()  # force–length–velocity matters here
    assert ((a > 0) & (a < 1)).any()


def test_compare_with_pseudoinverse():
    """Blajer et al.'s (2007) clamped pseudoinverse (min Σ F²) vs static optimisation (min Σ (F/F⁰)²) on the same
    frames: both reproduce the moments; the sharing differs (the pseudoinverse ignores strength)."""
    pinv = pytest.importorskip("jaxbio.estimation.pseudoinverse")
    r = solved(2, "interior_point")
    sol = jax.jit(jax.vmap(lambda H, b: pinv.clamped_pseudoinverse(H, b, nonnegative=jnp.ones(6, bool))))(
        jnp.swapaxes(R_FRAMES, 1, 2), TAU_FRAMES
    )
    moments = np.einsum("kmn,km->kn", np.asarray(R_FRAMES), np.asarray(sol.x))
    np.testing.assert_allclose(moments, np.asarray(TAU_FRAMES), atol=1e-8)
    f_so, f_pi, F = np.asarray(r.forces)[:4], np.asarray(sol.x)[:4], np.asarray(FMAX)
    assert (f_pi >= 0).all()
    # light frames (the pseudoinverse has no upper bound on force): each is optimal for its own
    # criterion, and the two sharings differ
    assert (np.sum(f_pi**2, axis=1) <= np.sum(f_so**2, axis=1) + 1e-9).all()
    assert (np.sum((f_so / F) ** 2, axis=1) <= np.sum((f_pi / F) ** 2, axis=1) + 1e-12).all()
    assert np.abs(f_so - f_pi).max() > 1.0


# ---- gait10dof18musc with reserves (slow: compiles the 10-DOF model) ---------------------------


def gait_motion(T=30, frequency=0.8):
    """A swing-like motion of the planar gait model (pelvis held up by a reserve, no ground)."""
    t = np.linspace(0.0, 1.0 / frequency, T)[:, None]
    w = 2 * np.pi * frequency
    amp = np.array([0.0, 0.0, 0.03, 0.24, 0.3, 0.09, 0.24, 0.3, 0.09, 0.03])
    off = np.array([0.0, 0.9, 0.0, 0.1, -0.6, 0.0, 0.1, -0.6, 0.0, 0.0])
    phase = np.array([0, 0, 0, 0, -0.5 * np.pi, 0.3, np.pi, 0.5 * np.pi, np.pi + 0.3, 0])
    arg = w * t + phase
    return (
        jnp.asarray(off + amp * np.sin(arg)),
        jnp.asarray(amp * w * np.cos(arg)),
        jnp.asarray(-amp * w**2 * np.sin(arg)),
    )


GAIT_RESERVES = {"pelvis_tx": 1000.0, "pelvis_ty": 1000.0, "pelvis": 1000.0, "torso": 1000.0}


@pytest.mark.slow
@pytest.mark.parametrize("p", [2, 3])
def test_gait_with_reserves(p):
    tree, paths, params = sets.load_muscle_set("gait10dof18musc", dtype=jnp.float64)
    q, qd, qdd = gait_motion()
    r = static_optimization_motion(
        tree,
        paths,
        params,
        q,
        qd,
        qdd,
        p=p,
        objective="activation",
        reserve_strength=GAIT_RESERVES,
        solver="interior_point",
    )
    check_feasible(r, sets.coordinate_names("gait10dof18musc"))
    assert r.converged.all()
    moments = jax.vmap(lambda x, f: geometry.generalized_forces(paths, tree, x, f))(q, r.forces)
    np.testing.assert_allclose(np.asarray(moments + r.reserves), np.asarray(r.tau), atol=1e-8)
    # reserves only on the unactuated coordinates, and there they carry everything
    idx = [tree.names.index(k) for k in GAIT_RESERVES]
    others = np.setdiff1d(np.arange(10), idx)
    np.testing.assert_allclose(np.asarray(r.reserves)[:, others], 0.0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(r.reserves)[:, idx], np.asarray(r.tau)[:, idx], atol=1e-8)
    # SLSQP on two frames
    R = jax.vmap(lambda x: geometry.moment_arms(paths, tree, x))(q)
    hill = HillMuscle(
        params.max_isometric_force,
        params.optimal_fiber_length,
        params.tendon_slack_length,
        params.pennation_angle,
        params.max_contraction_velocity,
    )
    strength = np.zeros(10)
    strength[idx] = 1000.0
    for k in (5, 17):
        l = geometry.lengths(paths, tree, q[k])
        v = geometry.lengthening_velocity(paths, tree, q[k], qd[k])
        fhat, passive = muscle_force_components(hill, l, v)
        b = np.asarray(r.tau[k] - R[k].T @ passive)
        x_ref, _, _ = _slsqp(np.asarray(R[k]), b, np.asarray(fhat), p, strength)
        np.testing.assert_allclose(np.asarray(r.activations[k]), x_ref, atol=1e-5)
