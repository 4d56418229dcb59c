"""Fast batched double pendulum (Watanabe & Duarte's notebook): `sincos`, `vector_field`, `simulate_batch` against
numpy, the closed-form `accelerations`, the existing Diffrax path and scipy's DOP853."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import jaxbio as jb
from jaxbio.papers import watanabe_pendulum as dp
from tests._models import notebook_euler

PAR = dp.Parameters()


def initial_states(n, seed=0):
    rng = np.random.default_rng(seed)
    th0, om0 = dp.NOTEBOOK_INITIAL_STATE
    return jnp.asarray(th0 + rng.uniform(-0.1, 0.1, (n, 2))), jnp.asarray(om0 * rng.uniform(0.5, 1.0, (n, 1)))


def test_sincos_matches_numpy():
    rng = np.random.default_rng(0)
    k = np.arange(-200, 201)
    x = np.concatenate(
        [
            rng.uniform(-4, 4, 20_000),
            rng.uniform(-1e6, 1e6, 20_000),
            k * np.pi / 2,
            k * np.pi / 2 + 1e-9,
            [0.0, -0.0, 1e-300],
        ]
    )
    s, c = jax.jit(dp.sincos)(jnp.asarray(x))
    assert np.max(np.abs(np.asarray(s) - np.sin(x))) < 3e-16
    assert np.max(np.abs(np.asarray(c) - np.cos(x))) < 3e-16
    # derivatives: d sin = cos, d cos = −sin
    xs = jnp.asarray(rng.uniform(-50, 50, 64))
    ds = jax.vmap(jax.grad(lambda v: dp.sincos(v)[0]))(xs)
    dc = jax.vmap(jax.grad(lambda v: dp.sincos(v)[1]))(xs)
    np.testing.assert_allclose(ds, np.cos(xs), atol=1e-15)
    np.testing.assert_allclose(dc, -np.sin(xs), atol=1e-15)


def test_vector_field_matches_accelerations():
    rng = np.random.default_rng(1)
    th, om = jnp.asarray(rng.uniform(-20, 20, (100, 2))), jnp.asarray(rng.uniform(-30, 30, (100, 2)))
    par = dp.Parameters(1.3, 0.7, 0.9, 0.6, 9.81)
    ref = jax.vmap(lambda a, b: dp.accelerations(par, a, b))(th, om)
    out = jax.jit(jax.vmap(lambda a, b: dp.vector_field(0.0, (a[0], a[1], b[0], b[1]), par)))(th, om)
    np.testing.assert_allclose(jnp.stack(out[2:], -1), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(jnp.stack(out[:2], -1), om)
    # batch-last arrays work elementwise too
    out2 = dp.vector_field(0.0, (th[:, 0], th[:, 1], om[:, 0], om[:, 1]), par)
    np.testing.assert_allclose(jnp.stack(out2[2:], -1), ref, rtol=1e-12, atol=1e-12)


def test_vector_field_equals_the_generic_forward_dynamics():
    """The tuned vector field (rule 13) against `jb.forward_dynamics` on the shipped
    ``double_pendulum`` tree (relative coordinates, zero torque)."""
    tree = jb.load_model("double_pendulum", dtype=jnp.float64).tree
    rng = np.random.default_rng(2)
    th, om = jnp.asarray(rng.uniform(-3, 3, (50, 2))), jnp.asarray(rng.uniform(-10, 10, (50, 2)))
    out = dp.vector_field(0.0, (th[:, 0], th[:, 1], om[:, 0], om[:, 1]), PAR)
    q, qd = jax.vmap(dp.to_relative)(th, om)
    qdd = jax.vmap(lambda a, b: jb.forward_dynamics(tree, a, b, jnp.zeros(2)))(q, qd)
    _, thdd = jax.vmap(dp.to_absolute)(q, qdd)  # absolute accelerations: (q̈₁, q̈₁ + q̈₂)
    np.testing.assert_allclose(jnp.stack(out[2:], -1), thdd, rtol=1e-10, atol=1e-10)


@pytest.fixture(scope="module")
def runs():
    """Eight 2-s trajectories at rtol = atol = 1e-10, by the fast path (vmap and chunks of 3) and
    by the existing Diffrax path (`accelerations`, Tsit5)."""
    th, om = initial_states(8)
    fast = jax.jit(lambda a, b: dp.simulate_batch(a, b, 2.0, rtol=1e-10, atol=1e-10))(th, om)
    chunked = dp.simulate_batch(th, om, 2.0, rtol=1e-10, atol=1e-10, chunk_size=3)

    def ref_one(a, b):
        term = diffrax.ODETerm(lambda t, y, _: (y[1], dp.accelerations(PAR, *y)))
        sol = diffrax.diffeqsolve(
            term,
            diffrax.Tsit5(),
            0.0,
            2.0,
            None,
            (a, b),
            max_steps=100_000,
            stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-10),
        )
        return sol.ys[0][-1], sol.ys[1][-1], sol.stats["num_steps"]

    ref = jax.jit(jax.vmap(ref_one))(th, om)
    return th, om, fast, chunked, ref


def test_simulate_batch_matches_existing_diffrax_path_and_scipy(runs):
    th, om, fast, chunked, ref = runs
    # same solver, same controller: same steps, states equal to well below the tolerance
    np.testing.assert_array_equal(fast[2], ref[2])
    np.testing.assert_allclose(fast[0], ref[0], atol=1e-9)
    np.testing.assert_allclose(fast[1], ref[1], atol=1e-8)
    # chunked = vmapped
    for a, b in zip(fast, chunked):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)

    # independent: scipy DOP853 at 1e-12 on the closed form (NumPy)
    m1, m2, l1, l2, g = PAR

    def f(t, y):
        th, w = y[:2], y[2:]
        d = th[0] - th[1]
        M = np.array(
            [
                [m1 * l1**2 / 3 + m2 * l1**2, m2 * l1 * l2 * np.cos(d) / 2],
                [m2 * l1 * l2 * np.cos(d) / 2, m2 * l2**2 / 3],
            ]
        )
        rhs = np.array(
            [
                -m2 * l1 * l2 * np.sin(d) * w[1] ** 2 / 2 - (m1 * l1 / 2 + m2 * l1) * g * np.sin(th[0]),
                m2 * l1 * l2 * np.sin(d) * w[0] ** 2 / 2 - m2 * g * l2 / 2 * np.sin(th[1]),
            ]
        )
        return np.concatenate([w, np.linalg.solve(M, rhs)])

    for i in range(2):
        sol = solve_ivp(f, (0, 2.0), np.concatenate([th[i], om[i]]), method="DOP853", rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(fast[0][i], sol.y[:2, -1], atol=1e-7)
        np.testing.assert_allclose(fast[1][i], sol.y[2:, -1], atol=1e-6)


def test_simulate_batch_conserves_energy_and_single_state(runs):
    th, om, fast, _, _ = runs
    E0 = jax.vmap(lambda a, b: dp.energy(PAR, a, b))(th, om)
    E1 = jax.vmap(lambda a, b: dp.energy(PAR, a, b))(fast[0], fast[1])
    assert np.max(np.abs(E1 - E0)) < 1e-8  # J; |E| ~ 0.2–10 J
    one = dp.simulate_batch(th[0], om[0], 2.0, rtol=1e-10, atol=1e-10)
    assert one[0].shape == (2,) and one[2].shape == ()
    np.testing.assert_allclose(one[0], fast[0][0], atol=1e-12)


def test_simulate_batch_gradient_matches_finite_differences():
    th, om = initial_states(1)
    th, om = th[0], om[0]

    def final_angle(a):
        return dp.simulate_batch(th + jnp.array([a, 0.0]), om, 0.5, rtol=1e-11, atol=1e-11)[0][1]

    g = jax.jit(jax.grad(final_angle))(0.0)
    h = 1e-5
    fd = jnp.dot(jax.jit(jax.vmap(final_angle))(jnp.array([h, -h])), jnp.array([1, -1])) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-5)


def test_simulate_batch_bad_input():
    th, om = initial_states(2)
    with pytest.raises(ValueError, match="theta0"):
        dp.simulate_batch(th, om[:, :1])
    with pytest.raises(ValueError, match="chunk_size"):
        dp.simulate_batch(th, om, chunk_size=0)
    with pytest.raises(ValueError, match="duration"):
        dp.simulate_batch(th, om, 0.0)


# ---- the notebook's own PID closed loop -----------------------------------------------------

G_, M1_, M2_, L1_, L2_ = 9.81, 1.0, 1.0, 1.0, 0.5
R_ = np.pi / 3


def _pid_rhs(t, y):
    """The notebook's closed loop in numpy for scipy: y = (θ₁, θ₂, ω₁, ω₂, ∫(r − θ₂)dt)."""
    th, w, integral = y[:2], y[2:4], y[4]
    d = th[0] - th[1]
    M = np.array(
        [
            [M1_ * L1_**2 / 3 + M2_ * L1_**2, M2_ * L1_ * L2_ * np.cos(d) / 2],
            [M2_ * L1_ * L2_ * np.cos(d) / 2, M2_ * L2_**2 / 3],
        ]
    )
    m12 = 30 * (R_ - th[1]) - 2 * w[1] + 3 * integral
    rhs = np.array(
        [
            -M2_ * L1_ * L2_ * np.sin(d) * w[1] ** 2 / 2 - (M1_ * L1_ / 2 + M2_ * L1_) * G_ * np.sin(th[0]) - m12,
            M2_ * L1_ * L2_ * np.sin(d) * w[0] ** 2 / 2 - M2_ * G_ * L2_ / 2 * np.sin(th[1]) + m12,
        ]
    )
    return np.concatenate([w, np.linalg.solve(M, rhs), [R_ - th[1]]])


def test_notebook_pid_torques():
    pid = dp.NotebookPID()
    th, om = jnp.array([0.2, 0.9]), jnp.array([1.5, -0.4])
    m12 = 30 * (np.pi / 3 - 0.9) - 2 * (-0.4) + 3 * 0.05
    np.testing.assert_allclose(pid(th, om, 0.05), [-m12, m12], rtol=1e-14)  # free shoulder: M₁ = 0
    for name, kw in (("kp", {"kp": -1.0}), ("ki", {"ki": -3.0}), ("target", {"target": (1.0, 2.0)})):
        with pytest.raises(ValueError, match=name):
            dp.NotebookPID(**kw)
    with pytest.raises(ValueError, match="pid"):
        dp.simulate_notebook_pid(dp.TwoJointPID())
    with pytest.raises(ValueError, match="pid"):
        dp.euler(pid=dp.TwoJointPID())


def test_notebook_pid_closed_loop_matches_scipy():
    """`simulate_notebook_pid` (Diffrax Tsit5, 1e-10, integral as an ODE state) against scipy's
    DOP853 at 1e-12 on the same loop written out in numpy, over the notebook's 20 s (measured:
    ≤ 2e-10 rad, 5e-10 rad/s)."""
    ts = np.linspace(0.0, 20.0, 81)
    t, th, om, integral = dp.simulate_notebook_pid(ts=ts)
    y0 = np.concatenate([*dp.NOTEBOOK_INITIAL_STATE, [0.0]])
    sol = solve_ivp(_pid_rhs, (0, 20), y0, method="DOP853", rtol=1e-12, atol=1e-12, t_eval=ts)
    np.testing.assert_allclose(th, sol.y[:2].T, atol=2e-9, rtol=0)
    np.testing.assert_allclose(om, sol.y[2:4].T, atol=1e-8, rtol=0)
    np.testing.assert_allclose(integral, sol.y[4], atol=1e-10, rtol=0)
    # the notebook's loop holds rod 2 near r = π/3 with a free swinging shoulder
    assert np.max(np.abs(np.asarray(th[40:, 1]) - np.pi / 3)) < 0.15


def test_notebook_pid_euler_is_the_notebooks_loop():
    """`dp.euler(pid=NotebookPID())` against the notebook's loop run literally (``np.trapz`` over
    all samples each step) over its first 1 s, to round-off (measured ≤ 1e-15 rad)."""
    t, th, om = jax.jit(lambda: dp.euler(pid=dp.NotebookPID(), duration=1.0))()
    lit = notebook_euler(10_000, pid=True)
    assert th.shape == (101, 2)
    np.testing.assert_allclose(th, lit[2:].T, atol=1e-13, rtol=0)
    np.testing.assert_allclose(om, lit[:2].T, atol=1e-12, rtol=0)


@pytest.mark.slow
def test_notebook_pid_euler_over_20_s():
    """The notebook's closed-loop Euler run over its 20 s against a scalar loop with the trapezoid
    integral updated step by step (the notebook's ``np.trapz`` each step is O(n²): hours), and
    within 0.06 rad of the adaptive solve of the same loop."""
    t, th, om = jax.jit(lambda: dp.euler(pid=dp.NotebookPID()))()
    dt, n = 1e-4, 200_000
    a1, a2, w1, w2 = np.pi / 10, np.pi / 3, 2 * np.pi, -6 * np.pi
    integral, e_prev, out = 0.0, None, [(a1, a2)]
    k = M2_ * L1_ * L2_ / 2
    A, D = M1_ * L1_**2 / 3 + M2_ * L1_**2, M2_ * L2_**2 / 3
    for i in range(1, n + 1):
        e = R_ - a2
        if e_prev is not None:
            integral += dt * (e_prev + e) / 2
        e_prev = e
        m12 = 30 * e - 2 * w2 + 3 * integral
        s, c = np.sin(a1 - a2), np.cos(a1 - a2)
        r1 = -k * s * w2**2 - (M1_ * L1_ / 2 + M2_ * L1_) * G_ * np.sin(a1) - m12
        r2 = k * s * w1**2 - M2_ * G_ * L2_ / 2 * np.sin(a2) + m12
        B = k * c
        det = A * D - B * B
        a1, a2, w1, w2 = (
            a1 + dt * w1,
            a2 + dt * w2,
            w1 + dt * (D * r1 - B * r2) / det,
            w2 + dt * (A * r2 - B * r1) / det,
        )
        if i % 100 == 0:
            out.append((a1, a2))
    np.testing.assert_allclose(th, np.array(out), atol=1e-10, rtol=0)
    ts = np.asarray(t[::50])
    _, th_ode, _, _ = dp.simulate_notebook_pid(ts=ts, rtol=1e-8, atol=1e-8)
    assert np.max(np.abs(np.asarray(th[::50]) - np.asarray(th_ode))) < 0.06
