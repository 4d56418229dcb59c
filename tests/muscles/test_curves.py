"""Muscle and actuator laws: Hill force–velocity, De Groote 2016 curves, `HillMuscle` (rigid and
compliant tendon), Wilkie's active state and its impulse solutions, activation dynamics,
Rayleigh–Van der Pol dissipation, the D.C. motor and the muscular drive (Ivancevic 2009).

Each law is checked against something independent: its defining closed form, a Diffrax/scipy
integration of the ODE it solves, finite differences, or `jax.grad`.
"""

import math

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from jaxbio.muscles import activation, actuators, curves

F0, A, B = 1500.0, 375.0, 0.3  # N, N, m/s  -> v_max = F0 b / a = 1.2 m/s, curvature 0.25
VMAX = F0 * B / A


def _solve_scipy(rhs, y0, t1, ts):
    """Independent reference: scipy's DOP853 on a jitted right-hand side, sampled at ``ts``."""
    f = jax.jit(rhs)
    sol = solve_ivp(
        lambda t, y: np.asarray(f(t, jnp.asarray(y))),
        (0.0, t1),
        np.atleast_1d(y0),
        method="DOP853",
        t_eval=np.asarray(ts),
        rtol=1e-11,
        atol=1e-12,
    )
    assert sol.success
    return sol.y[0]


def _solve(rhs, y0, t1, dt0=1e-4, ts=None):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, args: rhs(t, y)),
        diffrax.Tsit5(),
        0.0,
        t1,
        dt0,
        y0,
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
        saveat=diffrax.SaveAt(ts=ts) if ts is not None else diffrax.SaveAt(t1=True),
        max_steps=100_000,
    )
    return sol.ys if ts is not None else sol.ys[0]


# ---- Hill force–velocity -----------------------------------------------------------------------


def test_hill_defining_points_and_hyperbola():
    hill = jax.jit(lambda v: curves.hill_force_velocity(v, F0, A, B))
    assert float(hill(0.0)) == pytest.approx(F0, rel=1e-14)
    assert abs(float(hill(VMAX))) < 1e-9
    # exactly Hill's hyperbola on the unsmoothed concentric range
    v = jnp.linspace(0.0, 0.95 * VMAX, 57)
    np.testing.assert_allclose(hill(v), (F0 * B - A * v) / (v + B), rtol=1e-13)
    # (F + a)(v + b) = const = (F0 + a) b  (Hill's characteristic equation)
    np.testing.assert_allclose((hill(v) + A) * (v + B), (F0 + A) * B, rtol=1e-13)
    # zero beyond v_max, plateau under fast lengthening
    np.testing.assert_allclose(hill(jnp.array([1.01, 2.0, 1e6]) * VMAX), 0.0, atol=1e-12)
    assert float(hill(-1e9)) == pytest.approx(1.8 * F0, rel=1e-6)
    # normalised version agrees
    np.testing.assert_allclose(curves.hill_force_velocity_normalized(v / VMAX, A / F0) * F0, hill(v), rtol=1e-13)


def test_hill_c1_at_zero_and_monotone():
    hill = jax.jit(lambda v: curves.hill_force_velocity(v, F0, A, B))
    slope = -(F0 + A) / B  # dF/dv of the hyperbola at v = 0
    for h in (1e-5, 1e-6):
        right = (float(hill(h)) - float(hill(0.0))) / h
        left = (float(hill(0.0)) - float(hill(-h))) / h
        assert right == pytest.approx(slope, rel=1e-3)
        assert left == pytest.approx(slope, rel=1e-3)
    assert float(jax.grad(hill)(0.0)) == pytest.approx(slope, rel=1e-12)
    # C¹ across the start of the smooth clamp (1 − δ) v_max and at v_max
    for v0 in (0.95 * VMAX, VMAX):
        g = jax.grad(hill)
        assert float(g(v0 - 1e-9)) == pytest.approx(float(g(v0 + 1e-9)), rel=1e-5, abs=1e-4)
    v = jnp.linspace(-20 * VMAX, 3 * VMAX, 200_001)
    F = hill(v)
    assert np.all(np.diff(np.asarray(F)) <= 1e-12)
    assert np.all((F >= 0) & (F <= 1.8 * F0))


@pytest.mark.parametrize("curv", [0.1, 0.25, 1.0])
def test_hill_gradients_finite_everywhere(curv):
    v = jnp.array([-1e300, -1e12, -1e3, -1.0, -1e-12, 0.0, 1e-12, 0.5, 0.95, 0.97, 1.0, 1.5, 1e12, 1e300])
    fv = lambda x, k: curves.hill_force_velocity_normalized(x, k)
    grads = jax.jit(jax.vmap(jax.grad(fv, argnums=(0, 1)), in_axes=(0, None)))(v, curv)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    # dimensional: gradient with respect to every argument
    dims = jax.jit(jax.vmap(jax.grad(curves.hill_force_velocity, argnums=(0, 1, 2, 3)), in_axes=(0, None, None, None)))(
        v * VMAX, F0, curv * F0, B
    )
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in dims)


def test_hill_float32_and_jit():
    v = jnp.linspace(-2.0, 2.0, 101, dtype=jnp.float32)
    f32 = jax.jit(curves.hill_force_velocity_normalized)(v, jnp.float32(0.25))
    assert f32.dtype == jnp.float32
    np.testing.assert_allclose(f32, curves.hill_force_velocity_normalized(v.astype(jnp.float64), 0.25), atol=1e-6)


def test_hill_bad_smoothing():
    with pytest.raises(ValueError, match="smoothing"):
        curves.hill_force_velocity_normalized(0.5, 0.25, smoothing=0.9)


# ---- De Groote 2016 curves -----------------------------------------------------------------------


def test_degroote_active_force_length():
    assert float(curves.active_force_length(1.0)) == pytest.approx(1.0, abs=1e-12)
    x = jnp.linspace(0.2, 2.0, 18_001)
    y = curves.active_force_length(x)
    assert abs(float(x[jnp.argmax(y)]) - 1.0) < 0.02
    assert float(y.max()) < 1.002
    assert float(curves.active_force_length(0.4)) < 0.05 and float(curves.active_force_length(1.8)) < 0.05
    # De Groote et al. (2016) eq. S2 with the coefficients as printed in the paper (b11…b43, three
    # Gaussians, 3 digits; the module uses the full-precision values of OpenSim's DeGrooteFregly2016Muscle)
    b = [(0.815, 1.055, 0.162, 0.063), (0.433, 0.717, -0.030, 0.200), (0.1, 1.0, 0.354, 0.0)]
    for lm in (0.5, 0.7, 1.0, 1.3):
        published = sum(b1 * np.exp(-0.5 * (lm - b2) ** 2 / (b3 + b4 * lm) ** 2) for b1, b2, b3, b4 in b)
        assert float(curves.active_force_length(lm)) == pytest.approx(published, abs=3e-3)  # 3-digit table


def test_degroote_passive_and_tendon():
    # passive: zero at slack, 1 at strain e0 = 0.6, exponential in between
    assert float(curves.passive_force_length(1.0)) == pytest.approx(0.0, abs=1e-15)
    assert float(curves.passive_force_length(1.6)) == pytest.approx(1.0, rel=1e-14)
    assert float(curves.passive_force_length(1.3)) == pytest.approx((math.exp(2) - 1) / (math.exp(4) - 1), rel=1e-14)
    assert float(curves.passive_force_length(0.2, min_length=0.2)) == pytest.approx(0.0, abs=1e-15)
    assert float(curves.passive_force_length(1.5, strain_at_one=0.5)) == pytest.approx(1.0, rel=1e-14)
    # tendon: 1 at 4.9 % strain, zero at c2 + ln(c3/c1)/kT
    assert float(curves.tendon_force_length(1.049)) == pytest.approx(1.0, rel=1e-13)
    kt = math.log(1.25 / 0.2) / (1.049 - 0.995)
    assert float(curves.tendon_force_length(0.995 + math.log(0.25 / 0.2) / kt)) == pytest.approx(0.0, abs=1e-14)
    assert float(curves.tendon_force_length(1.0)) < 0 < float(curves.tendon_force_length(1.002))
    # De Groote force–velocity (lengthening positive)
    assert float(curves.degroote_force_velocity(0.0)) == pytest.approx(1.0, abs=1e-3)
    assert abs(float(curves.degroote_force_velocity(-1.0))) < 0.01


# ---- HillMuscle -----------------------------------------------------------------------------------


def _muscles(tendon="rigid", **kw):
    return curves.HillMuscle(
        max_isometric_force=[1000.0, 600.0, 3000.0],
        optimal_fiber_length=[0.10, 0.05, 0.06],
        tendon_slack_length=[0.20, 0.30, 0.25],
        pennation_angle=[0.0, 0.2, 0.4],
        max_contraction_velocity=10.0,
        tendon=tendon,
        **kw,
    )


def test_rigid_tendon_against_hand_computation():
    m = _muscles()
    act = jnp.array([0.3, 0.7, 1.0])
    lmt = jnp.array([0.305, 0.352, 0.31])
    F = m.force(act, lmt, 0.0)
    for j in range(3):
        lopt, lts, a0 = [0.10, 0.05, 0.06][j], [0.20, 0.30, 0.25][j], [0.0, 0.2, 0.4][j]
        h = lopt * math.sin(a0)
        lm = math.hypot(float(lmt[j]) - lts, h)
        cos_a = math.cos(math.asin(h / lm))
        f = float(act[j]) * float(curves.active_force_length(lm / lopt)) + float(curves.passive_force_length(lm / lopt))
        assert float(F[j]) == pytest.approx([1000.0, 600.0, 3000.0][j] * f * cos_a, rel=1e-12)
        assert float(m.fiber_length(act, lmt)[j]) == pytest.approx(lm, rel=1e-14)
    # shortening lowers the force, lengthening raises it (Hill)
    F_short = m.force(act, lmt, -0.2)
    F_long = m.force(act, lmt, 0.2)
    assert np.all(F_short < F) and np.all(F_long > F)


def test_compliant_tendon_equilibrium_and_gradient():
    m = _muscles("compliant")
    act = jnp.array([0.3, 0.7, 1.0])
    lmt = jnp.array([0.305, 0.352, 0.31])
    lm = m.fiber_length(act, lmt)
    residual = jax.jit(lambda fiber: m.equilibrium_residual(act, lmt, fiber))
    assert float(jnp.max(jnp.abs(residual(lm)))) < 1e-10
    # an independent scalar root finder on the same residual
    for j in range(3):

        def r(x, j=j):
            return float(residual(lm.at[j].set(x))[j])

        root = brentq(r, float(lm[j]) * 0.8, float(lm[j]) * 1.2, xtol=1e-15, rtol=1e-15)
        assert float(lm[j]) == pytest.approx(root, rel=1e-10)
    # the tendon force equals the fiber force along the tendon
    F = m.force(act, lmt)
    cos_a = jnp.sqrt(1.0 - (m.optimal_fiber_length * jnp.sin(m.pennation_angle) / lm) ** 2)
    fiber_side = m.max_isometric_force * m.fiber_force_normalized(act, lm / m.optimal_fiber_length, 0.0) * cos_a
    np.testing.assert_allclose(F, fiber_side, rtol=1e-10)
    # implicit-function gradients against finite differences
    check_grads(
        jax.jit(lambda a, l: m.force(a, l)), (act, lmt), order=1, modes=("rev",), atol=1e-6, rtol=1e-6, eps=1e-6
    )
    total = eqx.filter_jit(lambda mm: jnp.sum(mm.force(act, lmt)))
    grads = eqx.filter_grad(total)(m)
    h = 1e-6
    for field in ("optimal_fiber_length", "tendon_slack_length", "pennation_angle"):
        base = getattr(m, field)
        plus = eqx.tree_at(lambda mm: getattr(mm, field), m, base + h)
        minus = eqx.tree_at(lambda mm: getattr(mm, field), m, base - h)
        fd_total = (float(total(plus)) - float(total(minus))) / (2 * h)
        assert float(jnp.sum(getattr(grads, field))) == pytest.approx(fd_total, rel=1e-6, abs=1e-3)


def test_compliant_tendon_moving_and_batched():
    m = _muscles("compliant")
    act = jnp.array([0.5, 0.5, 0.5])
    lmt = jnp.array([0.305, 0.352, 0.31])
    lm = m.fiber_length(act, lmt, 0.1)
    assert float(jnp.max(jnp.abs(m.equilibrium_residual(act, lmt, lm, 0.1)))) < 1e-10
    # vmap over states (activations), jit
    acts = jnp.linspace(0.0, 1.0, 5)[:, None] * jnp.ones(3)
    F = jax.jit(jax.vmap(lambda a: m.force(a, lmt)))(acts)
    assert F.shape == (5, 3) and np.all(np.diff(np.asarray(F), axis=0) > 0)


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_isometric_force", -1.0),
        ("optimal_fiber_length", 0.0),
        ("tendon_slack_length", -0.1),
        ("pennation_angle", 1.6),
        ("max_contraction_velocity", 0.0),
        ("eccentric_plateau", 0.9),
    ],
)
def test_hill_muscle_rejects_bad_parameters(field, value):
    kw = dict(max_isometric_force=1000.0, optimal_fiber_length=0.1, tendon_slack_length=0.2)
    kw[field] = value
    with pytest.raises(ValueError, match=field):
        curves.HillMuscle(**kw)


def test_hill_muscle_rejects_bad_tendon_and_shapes():
    with pytest.raises(ValueError, match="tendon"):
        curves.HillMuscle(1000.0, 0.1, 0.2, tendon="elastic")
    with pytest.raises(ValueError, match="shape"):
        curves.HillMuscle([1000.0, 2.0], [0.1, 0.1, 0.1], 0.2)


# ---- Wilkie's active state, impulse solutions, activation dynamics -------------------------------


def test_impulse_solutions_solve_wilkie():
    gain, tension = 25.0, 800.0  # 1/s, N
    ts = jnp.linspace(0.0, 0.3, 31)

    # stimulated from rest (S = 0.6, μ(0) = 0) and released (S = 0, μ(0) = 480 N)
    rise = _solve_scipy(lambda t, mu: activation.wilkie_active_state_rate(mu, 0.6, tension, gain), 0.0, 0.3, ts)
    decay = _solve_scipy(lambda t, mu: activation.wilkie_active_state_rate(mu, 0.0, tension, gain), 480.0, 0.3, ts)
    np.testing.assert_allclose(rise, activation.impulse_rise(ts, 0.6 * tension, 1.0 / gain), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(decay, activation.impulse_decay(ts, 480.0, 1.0 / gain), rtol=1e-7, atol=1e-7)
    # before onset
    assert float(activation.impulse_rise(-1.0, 480.0, 0.04)) == 0.0
    assert float(activation.impulse_decay(-1.0, 480.0, 0.04)) == 480.0


def test_activation_dynamics_steady_state_and_asymmetry():
    dyn = activation.ActivationDynamics(0.015, 0.060)
    e = jnp.linspace(0.0, 1.0, 11)
    np.testing.assert_allclose(dyn.rate(e, e), 0.0, atol=1e-15)
    # relax to e = 0.3 from 0.9; rise 0 -> e = 1; fall 1 -> e = 0
    ts = np.linspace(0.0, 1.0, 5001)
    relax, up, down = (
        _solve_scipy(lambda t, a, e=e: dyn.rate(e, a), a0, 1.0, ts) for e, a0 in ((0.3, 0.9), (1.0, 0.0), (0.0, 1.0))
    )
    assert relax[-1] == pytest.approx(0.3, abs=1e-8)
    # rising is faster than falling: time to cross 0.5
    t_up = float(ts[np.argmax(up >= 0.5)])
    t_down = float(ts[np.argmax(down <= 0.5)])
    assert 0 < t_up < t_down
    assert float(dyn.rate(0.6, 0.5)) > -float(dyn.rate(0.4, 0.5)) > 0
    # smooth and differentiable in both arguments
    g = jax.grad(dyn.rate, argnums=(0, 1))(0.5, 0.5)
    assert all(np.isfinite(float(x)) for x in g)


def test_activation_dynamics_attracts_from_outside_the_unit_interval():
    """An explicit step may overshoot a below 0; e must still attract a (the raw Thelen scale
    0.5 + 1.5a changes sign at a = −1/3 and sent a to −∞ at 20 ms Tsit5 steps, issue #19)."""
    dyn = activation.ActivationDynamics(0.015, 0.060)
    e = 0.5
    for a in (-0.2, -1.0 / 3.0, -0.5, -3.0, 1.5):
        assert np.sign(float(dyn.rate(e, a))) == np.sign(e - a), a
    # inside [0, 1] the rate is the published formula (closed form, independent of the code)
    a = np.linspace(0.0, 1.0, 7)
    scale = 0.5 + 1.5 * a
    blend = 0.5 + 0.5 * np.tanh(10.0 * (e - a))
    np.testing.assert_allclose(
        dyn.rate(e, a), (e - a) * (blend / (0.015 * scale) + (1 - blend) * scale / 0.060), rtol=1e-12
    )
    # 50 fixed Tsit5 steps of 20 ms from rest (a = 0) to a held excitation: a settles at e
    from jaxbio.simulation import step_grid

    a0 = jnp.zeros(3)
    es = jnp.array([0.2, 0.5, 1.0])
    traj = step_grid(lambda t, a, _: dyn.rate(es, a), jnp.linspace(0.0, 1.0, 51), a0)
    assert np.all(np.isfinite(traj)) and np.all(traj > -0.5)
    np.testing.assert_allclose(traj[-1], es, atol=1e-6)


@pytest.mark.parametrize("field", ["tau_activation", "tau_deactivation", "smoothing"])
def test_activation_dynamics_rejects_bad(field):
    kw = {field: 0.0}
    with pytest.raises(ValueError, match=field):
        activation.ActivationDynamics(**kw)


# ---- actuators ------------------------------------------------------------------------------------


def test_rayleigh_van_der_pol_force_is_gradient():
    d = actuators.RayleighVanDerPol(alpha=jnp.array([0.5, -0.2, 1.0]), beta=jnp.array([2.0, 1.0, 0.0]))
    q = jnp.array([0.3, -1.2, 2.0])
    qd = jnp.array([1.5, 0.4, -0.7])
    np.testing.assert_allclose(d.force(q, qd), jax.grad(lambda v: d(q, v))(qd), rtol=1e-14)
    expected = 0.5 * np.sum(np.asarray(qd) ** 2 * (np.asarray(d.alpha) + np.asarray(d.beta) * np.asarray(q) ** 2))
    assert float(d(q, qd)) == pytest.approx(expected, rel=1e-14)
    with pytest.raises(ValueError, match="beta"):
        actuators.RayleighVanDerPol(0.1, -1.0)
    with pytest.raises(ValueError, match="alpha"):
        actuators.RayleighVanDerPol(float("nan"), 1.0)


def test_dc_motor_steady_state_by_integration():
    motor = actuators.DCMotor(
        inductance=2e-3,
        resistance=1.2,
        torque_constant=0.05,
        back_emf_constant=0.05,
        gear_ratio=20.0,
        rotor_inertia=2e-5,
        viscous_damping=1e-5,
    )
    load_inertia, load, voltage = 0.01, 0.8, 24.0  # kg m², N m, V
    J = motor.reflected_inertia + load_inertia

    def rhs(t, y):
        i, w = y
        di = motor.current_rate(t, i, w, lambda s: voltage)
        dw = (motor.joint_torque(i, w) - load) / J
        return jnp.stack([di, dw])

    y_end = _solve(rhs, jnp.zeros(2), 5.0)
    i_ss, w_ss = motor.steady_state(voltage, load)
    assert float(y_end[0]) == pytest.approx(float(i_ss), rel=1e-7)
    assert float(y_end[1]) == pytest.approx(float(w_ss), rel=1e-7)
    # torque balance at steady state
    assert float(motor.torque(i_ss) - motor.reflected_damping * w_ss) == pytest.approx(load, rel=1e-12)
    with pytest.raises(ValueError, match="resistance"):
        actuators.DCMotor(1e-3, 0.0, 0.05)
    with pytest.raises(ValueError, match="gear_ratio"):
        actuators.DCMotor(1e-3, 1.0, 0.05, gear_ratio=-2.0)


def test_muscle_drive_impulse_times_hill():
    arms = jnp.array([[0.04, -0.03], [0.0, 0.02]])  # (n_joints, n_muscles) m
    f0, tau, a, b = jnp.array([800.0, 600.0]), jnp.array([0.05, 0.08]), jnp.array([200.0, 150.0]), jnp.array([0.4, 0.5])
    drive = actuators.MuscleDrive(f0, tau, a, b, arms)
    t, q, qd, fit = 0.07, jnp.zeros(2), jnp.array([1.0, 2.0]), jnp.array([0.9])  # both shortening
    v = arms.T @ qd
    expected = 0.9 * f0 * (1 - jnp.exp(-t / tau)) * (f0 * b - a * v) / (v + b) / f0
    forces = eqx.filter_jit(lambda d, *xs: (d.muscle_forces(*xs), d(*xs)))
    muscle, joint = forces(drive, t, q, qd, fit)
    np.testing.assert_allclose(muscle, expected, rtol=1e-13)
    np.testing.assert_allclose(joint, arms @ expected, rtol=1e-13)
    released = actuators.MuscleDrive(f0, tau, a, b, arms, stimulated=0.0)
    assert np.all(np.asarray(forces(released, 10.0, q, jnp.zeros(2), fit)[0]) < 1e-50)
    g = jax.jit(jax.grad(lambda qd: jnp.sum(drive(t, q, qd, fit))))(qd)
    assert np.all(np.isfinite(g))
    with pytest.raises(ValueError, match="time_constant"):
        actuators.MuscleDrive(f0, -1.0, a, b, arms)
    with pytest.raises(ValueError, match="moment_arms"):
        actuators.MuscleDrive(f0, tau, a, b, jnp.ones(2))


def test_actuators_plug_into_hamiltonian_system():
    from jaxbio.hamiltonian import HamiltonianSystem
    from jaxbio.tree import SegmentTree
    from tests._models import double_pendulum_dict

    tree = SegmentTree.from_dict(double_pendulum_dict())
    drive = actuators.MuscleDrive(
        [800.0, 600.0], [0.05, 0.08], [200.0, 150.0], [0.4, 0.5], [[0.04, -0.03], [0.0, 0.02]]
    )
    system = HamiltonianSystem(tree, drive=drive, dissipation=actuators.RayleighVanDerPol(0.1, 0.5))
    q, qd = jnp.array([0.3, -0.2]), jnp.array([0.5, 0.1])
    y = {"q": q, "p": jnp.zeros(2), "f": jnp.ones(1)}
    np.testing.assert_allclose(system.drive_force(0.1, y, qd), drive(0.1, q, qd, y["f"]), rtol=1e-15)
    np.testing.assert_allclose(system.dissipation.force(q, qd), qd * (0.1 + 0.5 * q**2), rtol=1e-15)


def test_muscle_float32_and_parameter_vmap():
    kw = dict(
        max_isometric_force=[1000.0, 600.0, 3000.0],
        optimal_fiber_length=[0.10, 0.05, 0.06],
        tendon_slack_length=[0.20, 0.30, 0.25],
        pennation_angle=[0.0, 0.2, 0.4],
    )
    act, lmt = jnp.array([0.3, 0.7, 1.0]), jnp.array([0.305, 0.352, 0.31])
    for tendon in ("rigid", "compliant"):
        m64 = curves.HillMuscle(**kw, tendon=tendon)
        m32 = curves.HillMuscle(**{k: np.asarray(v, np.float32) for k, v in kw.items()}, tendon=tendon)
        F32 = m32.force(act.astype(jnp.float32), lmt.astype(jnp.float32))
        assert F32.dtype == jnp.float32
        np.testing.assert_allclose(F32, m64.force(act, lmt), rtol=2e-4)
    # a batch of subjects: vmap over the module's array leaves (scaled strength)
    m = curves.HillMuscle(**kw)
    batch = jax.vmap(lambda s: eqx.tree_at(lambda mm: mm.max_isometric_force, m, m.max_isometric_force * s))(
        jnp.array([0.5, 1.0, 2.0])
    )
    F = eqx.filter_jit(eqx.filter_vmap(lambda mm: mm.force(act, lmt)))(batch)
    np.testing.assert_allclose(F, jnp.array([0.5, 1.0, 2.0])[:, None] * m.force(act, lmt)[None], rtol=1e-13)


def test_hill_closed_form_jvp_matches_finite_differences():
    """The curve's hand-written JVP (∂f/∂ṽ, ∂f/∂k, ∂f/∂f_ecc per branch) against central
    differences in each argument, on every branch and near the joins."""
    rng = np.random.default_rng(3)
    v = np.concatenate([rng.uniform(-4.0, 1.5, 400), [-1e-3, 1e-3, 0.5, 0.949, 0.951, 0.99, 0.999]])
    v = v[np.min(np.abs(v[:, None] - np.array([0.0, 0.95, 1.0])), axis=1) > 2e-5]  # off the C¹ joins
    for k, f_ecc in ((0.1, 1.5), (0.25, 1.8), (0.6, 1.8)):
        args = [jnp.asarray(v), jnp.full(v.shape, k), jnp.full(v.shape, f_ecc)]
        for i in range(3):
            tangent = [jnp.zeros(v.shape)] * 3
            tangent[i] = jnp.ones(v.shape)
            _, d = jax.jvp(curves.hill_force_velocity_normalized, tuple(args), tuple(tangent))
            h = 1e-6
            up, down = list(args), list(args)
            up[i], down[i] = args[i] + h, args[i] - h
            fd = (curves.hill_force_velocity_normalized(*up) - curves.hill_force_velocity_normalized(*down)) / (2 * h)
            np.testing.assert_allclose(d, fd, atol=2e-7, rtol=1e-6)
        # reverse mode goes through the same rule
        g = jax.vmap(jax.grad(curves.hill_force_velocity_normalized, argnums=(0, 1)))(args[0], args[1])
        _, d0 = jax.jvp(lambda x: curves.hill_force_velocity_normalized(x, args[1]), (args[0],), (jnp.ones(v.shape),))
        np.testing.assert_allclose(g[0], d0, rtol=1e-14, atol=1e-15)
        # constant arguments reach the rule as symbolic zeros (their partials are skipped): the
        # tangent in one argument alone equals the full rule's column
        _, d_k = jax.jvp(
            lambda kk: curves.hill_force_velocity_normalized(args[0], kk, f_ecc), (args[1],), (jnp.ones(v.shape),)
        )
        _, d_k_full = jax.jvp(
            curves.hill_force_velocity_normalized,
            tuple(args),
            (jnp.zeros(v.shape), jnp.ones(v.shape), jnp.zeros(v.shape)),
        )
        np.testing.assert_allclose(d_k, d_k_full, rtol=1e-14, atol=1e-15)
