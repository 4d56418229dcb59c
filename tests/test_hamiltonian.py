"""Hamiltonian dynamics (Ivancevic 2009) and Diffrax integration: conservation, power balance, the
Lagrangian flow, reversibility, an Ornstein–Uhlenbeck SDE, gradients, events, bad input."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from tests._models import notebook_euler, slider_dict
from jaxbio.papers import watanabe_pendulum as dp
from jaxbio import hamiltonian as ham
from jaxbio.simulation import stop_when


@pytest.fixture(scope="module")
def pendulum():
    tree = jb.load_model("double_pendulum", dtype=jnp.float64).tree
    q0, qd0 = dp.to_relative(*(jnp.asarray(x) for x in dp.NOTEBOOK_INITIAL_STATE))
    return tree, q0, qd0


def rel_drift(E):
    E = np.asarray(E)
    return np.max(np.abs(E - E[0])) / abs(E[0])


@pytest.mark.slow
def test_double_pendulum_conserves_energy_20s(pendulum):
    tree, q0, qd0 = pendulum
    system = jb.HamiltonianSystem(tree)
    tr = jb.simulate(
        system,
        system.initial_state(q0, qd0),
        0.0,
        20.0,
        solver=diffrax.Dopri8(),
        rtol=1e-12,
        atol=1e-12,
        ts=jnp.linspace(0, 20, 101),
    )
    assert rel_drift(tr.energy) < 1e-9
    # the energy is the notebook's closed-form energy, too
    th, om = dp.to_absolute(tr.q[-1], tr.qd[-1])
    np.testing.assert_allclose(tr.energy[-1], dp.energy(dp.Parameters(), th, om), rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("duration", [0.5, 5.0])
def test_sagittal_body_conserves_energy(duration):
    """The free 11-DOF body (falling and flailing): H constant to 1e-9 over 5 s (slow run) or 0.5 s."""
    tree = jb.load_model("sagittal11", dtype=jnp.float64).tree
    system = jb.HamiltonianSystem(tree)
    rng = np.random.default_rng(0)
    y0 = system.initial_state(jnp.asarray(rng.uniform(-0.3, 0.3, 11)), jnp.asarray(rng.uniform(-1, 1, 11)))
    tr = jb.simulate(
        system, y0, 0.0, duration, solver=diffrax.Dopri8(), rtol=1e-12, atol=1e-12, ts=jnp.linspace(0, duration, 11)
    )
    assert rel_drift(tr.energy) < 1e-9


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_dH_dq_matches_autodiff_and_power_balance():
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    rng = np.random.default_rng(1)
    q, p = jnp.asarray(rng.uniform(-1, 1, 7)), jnp.asarray(rng.uniform(-1, 1, 7))
    qd = jax.jit(ham.velocities)(tree, q, p)
    np.testing.assert_allclose(
        jax.jit(ham.dH_dq)(tree, q, qd),
        jax.jit(jax.grad(ham.hamiltonian, argnums=1))(tree, q, p),
        rtol=1e-11,
        atol=1e-12,
    )
    np.testing.assert_allclose(qd, jax.jit(jax.grad(ham.hamiltonian, argnums=2))(tree, q, p), rtol=1e-12, atol=1e-12)
    system = jb.HamiltonianSystem(
        tree,
        drive=ham.ConstantDrive(jnp.asarray(rng.normal(size=7))),
        dissipation=ham.LinearDamping(jnp.asarray(rng.uniform(0, 2, 7))),
    )
    y = {"q": q, "p": p, "f": jnp.ones(1)}

    @jax.jit
    def rates(y):  # dH/dt along the vector field, and the power balance
        dy = system.vector_field(0.3, y)
        dH = jax.jvp(lambda q, p: ham.hamiltonian(tree, q, p), (y["q"], y["p"]), (dy["q"], dy["p"]))[1]
        return dH, system.power_balance(0.3, y)

    dH, power = rates(y)
    np.testing.assert_allclose(dH, power, rtol=1e-11)


@pytest.mark.slow
def test_dissipative_energy_balance_along_trajectory(pendulum):
    """H(t) − H(0) = ∫ q̇ᵀ(F − ∂R/∂q̇) dt, the work integral computed from the saved trajectory."""
    tree, q0, qd0 = pendulum
    drive = ham.TimeFunctionDrive(lambda t: jnp.array([0.5 * jnp.sin(3 * t), -0.2]))
    system = jb.HamiltonianSystem(tree, drive=drive, dissipation=ham.LinearDamping(jnp.array([0.3, 0.1])))
    ts = jnp.linspace(0, 2, 4001)
    tr = jb.simulate(
        system, system.initial_state(q0, qd0), 0.0, 2.0, solver=diffrax.Dopri8(), rtol=1e-12, atol=1e-12, ts=ts
    )
    power = jax.vmap(lambda t, q, p, f: system.power_balance(t, {"q": q, "p": p, "f": f}))(ts, tr.q, tr.p, tr.f)
    work = np.trapezoid(np.asarray(power), np.asarray(ts))  # O(dt²) quadrature
    assert abs((tr.energy[-1] - tr.energy[0]) - work) < 1e-5 * abs(work)
    assert tr.energy[-1] < tr.energy[0]


@pytest.mark.slow
def test_hamiltonian_flow_equals_lagrangian_flow():
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    rng = np.random.default_rng(2)
    q0, qd0 = jnp.asarray(rng.uniform(-1, 1, 7)), jnp.asarray(rng.uniform(-1, 1, 7))
    tau = jnp.asarray(rng.normal(size=7))
    system = jb.HamiltonianSystem(tree, drive=ham.ConstantDrive(tau), dissipation=ham.LinearDamping(0.2))
    tr = jb.simulate(system, system.initial_state(q0, qd0), 0.0, 1.0, rtol=1e-11, atol=1e-11)

    def lagrange(t, y, args):
        q, qd = y
        return qd, jb.forward_dynamics(tree, q, qd, tau - 0.2 * qd)

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lagrange),
        diffrax.Tsit5(),
        0.0,
        1.0,
        None,
        (q0, qd0),
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-11),
    )
    np.testing.assert_allclose(tr.q[-1], sol.ys[0][-1], rtol=0, atol=1e-8)
    np.testing.assert_allclose(tr.qd[-1], sol.ys[1][-1], rtol=0, atol=1e-8)
    np.testing.assert_allclose(tr.p[-1], jb.mass_matrix(tree, sol.ys[0][-1]) @ sol.ys[1][-1], atol=1e-8)


@pytest.mark.slow
def test_time_reversibility(pendulum):
    tree, q0, qd0 = pendulum
    system = jb.HamiltonianSystem(tree)
    y0 = system.initial_state(q0, 0.2 * qd0)
    fwd = jb.simulate(system, y0, 0.0, 3.0, solver=diffrax.Dopri8(), rtol=1e-12, atol=1e-12)
    back = {"q": fwd.q[-1], "p": -fwd.p[-1], "f": fwd.f[-1]}
    rev = jb.simulate(system, back, 0.0, 3.0, solver=diffrax.Dopri8(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rev.q[-1], y0["q"], atol=1e-8)
    np.testing.assert_allclose(-rev.p[-1], y0["p"], atol=1e-8)


@pytest.mark.slow
def test_conservative_flow_is_symplectic(pendulum):
    """Ivancevic's (2009) conservative flow is a canonical map: its Jacobian ``J = ∂(q, p)(T)/∂(q, p)(0)``
    satisfies ``Jᵀ Ω J = Ω`` (``Ω = [[0, I], [−I, 0]]``) and ``det J = 1``; with damping it
    contracts phase volume instead (the same compiled flow, damping as an argument)."""
    tree, q0, qd0 = pendulum
    y0 = jb.HamiltonianSystem(tree).initial_state(q0, qd0)

    def flow(z, damping):
        system = jb.HamiltonianSystem(tree, dissipation=ham.LinearDamping(damping))
        tr = jb.simulate(
            system,
            dict(y0, q=z[:2], p=z[2:]),
            0.0,
            1.0,
            solver=diffrax.Dopri8(),
            rtol=1e-11,
            atol=1e-11,
            adjoint=diffrax.ForwardMode(),
        )
        return jnp.concatenate([tr.q[-1], tr.p[-1]])

    jacobian = jax.jit(jax.jacfwd(flow))
    z0 = jnp.concatenate([y0["q"], y0["p"]])
    omega = jnp.block([[jnp.zeros((2, 2)), jnp.eye(2)], [-jnp.eye(2), jnp.zeros((2, 2))]])
    J = jacobian(z0, jnp.zeros(2))
    assert np.abs(J.T @ omega @ J - omega).max() < 1e-8  # measured 5e-11
    assert abs(np.linalg.det(J) - 1) < 1e-8  # Liouville
    assert np.abs(J - np.eye(4)).max() > 1  # far from the identity map (25)
    Jd = jacobian(z0, jnp.array([0.3, 0.1]))
    assert np.abs(Jd.T @ omega @ Jd - omega).max() > 1  # measured 6.7
    assert np.linalg.det(Jd) < 0.5  # measured 0.11


def _slider(mass=2.0):
    return jb.SegmentTree.from_dict(slider_dict(mass), dtype=jnp.float64)


@pytest.mark.slow
def test_sde_matches_ornstein_uhlenbeck():
    """dp = −(c/m) p dt + σ dW: mean p₀e^{−θt}, variance σ²(1 − e^{−2θt})/(2θ), θ = c/m."""
    m, c, sigma, p0, T = 2.0, 3.0, 0.8, 1.5, 1.0
    system = jb.HamiltonianSystem(_slider(m), dissipation=ham.LinearDamping(jnp.array([c])))
    y0 = {"q": jnp.zeros(1), "p": jnp.array([p0]), "f": jnp.ones(1)}
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    run = jax.jit(jax.vmap(lambda k: jb.simulate_sde(system, y0, 0.0, T, k, jnp.array([sigma]), dt0=2e-3).p[-1, 0]))
    pT = np.asarray(run(keys))
    theta = c / m
    mean, var = p0 * np.exp(-theta * T), sigma**2 * (1 - np.exp(-2 * theta * T)) / (2 * theta)
    n = len(pT)
    assert abs(pT.mean() - mean) < 4 * np.sqrt(var / n)
    assert abs(pT.var() - var) < 4 * var * np.sqrt(2 / (n - 1))
    # reproducible from the key
    again = np.asarray(run(keys))  # same shape: no second compilation
    np.testing.assert_array_equal(again, pT)


@pytest.mark.slow
@pytest.mark.parametrize("calculus", ["ito", "stratonovich"])
def test_sde_with_state_and_time_dependent_noise_matches_geometric_brownian_motion(calculus):
    """Ivancevic's (2009) ``B[y, t] dW``: ``dp = −θ p dt + s(t) p dW`` with ``s(t) = σ(1 + t)``, θ = c/m, a
    geometric Brownian motion with closed-form moments. Itô: ``E p(T) = p₀ e^{−θT}``,
    ``E p(T)² = p₀² e^{−2θT + S}``, ``S = ∫₀ᵀ s² dt = σ²((1 + T)³ − 1)/3``; Stratonovich adds the
    drift ``s²/2``: ``E p(T) = p₀ e^{−θT + S/2}``, ``E p(T)² = p₀² e^{−2θT + 2S}``. Monte Carlo over
    2,000 paths, each moment within 4 standard errors."""
    m, c, sigma, p0, T = 2.0, 1.0, 0.3, 1.5, 1.0
    system = jb.HamiltonianSystem(_slider(m), dissipation=ham.LinearDamping(jnp.array([c])))
    y0 = {"q": jnp.zeros(1), "p": jnp.array([p0]), "f": jnp.ones(1)}

    def noise(t, y):  # (n,): one independent noise per coordinate, scaled by the momentum
        return sigma * (1 + t) * y["p"]

    keys = jax.random.split(jax.random.PRNGKey(1), 2000)
    run = jax.jit(
        jax.vmap(lambda k: jb.simulate_sde(system, y0, 0.0, T, k, noise, dt0=5e-3, calculus=calculus).p[-1, 0])
    )
    pT = np.asarray(run(keys))
    theta, S = c / m, sigma**2 * ((1 + T) ** 3 - 1) / 3
    extra = 0.0 if calculus == "ito" else S / 2
    mean = p0 * np.exp(-theta * T + extra)
    second = p0**2 * np.exp(-2 * theta * T + S + 2 * extra)
    n = len(pT)
    assert abs(pT.mean() - mean) < 4 * pT.std() / np.sqrt(n)
    assert abs((pT**2).mean() - second) < 4 * (pT**2).std() / np.sqrt(n)
    # the two calculi differ by more than the Monte Carlo error (the test can tell them apart)
    other = p0 * np.exp(-theta * T + (S / 2 if calculus == "ito" else 0.0))
    assert abs(pT.mean() - other) > 8 * pT.std() / np.sqrt(n)


def test_sde_noise_function_and_calculus_are_checked():
    system = jb.HamiltonianSystem(_slider())
    y0 = {"q": jnp.zeros(1), "p": jnp.ones(1), "f": jnp.ones(1)}
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"noise\(t, y\) returns \(3,\), expected \(1,\) or \(1, 1\)"):
        jb.simulate_sde(system, y0, 0.0, 1.0, key, lambda t, y: jnp.ones(3), dt0=0.1)
    with pytest.raises(ValueError, match="calculus must be one of 'ito', 'stratonovich', got 'ito-ish'"):
        jb.simulate_sde(system, y0, 0.0, 1.0, key, jnp.ones(1), dt0=0.1, calculus="ito-ish")
    with pytest.raises(ValueError, match="Heun does not converge to the ito solution"):
        jb.simulate_sde(system, y0, 0.0, 1.0, key, jnp.ones(1), dt0=0.1, solver=diffrax.Heun())


def test_sde_second_call_reuses_the_compiled_solve():
    """Outside a user's jit, a second `simulate_sde` call with another key and noise level (same
    structure) runs Diffrax's compiled solve again instead of compiling a new one."""
    from jax import monitoring

    system = jb.HamiltonianSystem(_slider(), dissipation=ham.LinearDamping(jnp.array([1.0])))
    y0 = {"q": jnp.zeros(1), "p": jnp.ones(1), "f": jnp.ones(1)}
    run = lambda k, s: jb.simulate_sde(system, y0, 0.0, 0.5, jax.random.PRNGKey(k), jnp.array([s]), dt0=0.05)
    first = run(0, 0.3)
    compiles = []

    def listen(event, duration, **kw):
        if event.endswith("backend_compile_duration"):
            compiles.append(kw.get("fun_name"))

    monitoring.register_event_duration_secs_listener(listen)
    try:
        second = run(1, 0.5)
    finally:
        monitoring.unregister_event_duration_listener(listen)
    assert not [name for name in compiles if name and "diffeqsolve" in name], compiles
    assert np.all(np.isfinite(second.p)) and not np.array_equal(first.p, second.p)


@pytest.mark.slow
def test_gradients_of_final_state_against_finite_differences(pendulum):
    tree, q0, qd0 = pendulum

    def final(q0, masses, damping):
        t = eqx.tree_at(lambda t: t.masses, tree, masses)
        system = jb.HamiltonianSystem(t, dissipation=ham.LinearDamping(damping))
        y0 = system.initial_state(q0, 0.3 * qd0)
        tr = jb.simulate(system, y0, 0.0, 1.0, solver=diffrax.Dopri5(), dt0=2e-3)  # fixed steps: smooth in the inputs
        return jnp.concatenate([tr.q[-1], tr.p[-1]])

    args = (q0, tree.masses, jnp.array([0.1, 0.2]))
    jac = jax.jit(jax.jacrev(final, argnums=(0, 1, 2)))(*args)
    f = jax.jit(final)
    for k, x in enumerate(args):
        eps = 1e-6
        fd = jnp.stack(
            [
                (
                    f(*[a + eps * e if i == k else a for i, a in enumerate(args)])
                    - f(*[a - eps * e if i == k else a for i, a in enumerate(args)])
                )
                / (2 * eps)
                for e in jnp.eye(x.size)
            ],
            axis=1,
        )
        np.testing.assert_allclose(jac[k], fd, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_gradient_wrt_damping_against_finite_differences(pendulum):
    """Default-run version of the test above: d q₁(T) / d c for a scalar damping c, in forward
    mode (`diffrax.ForwardMode`, cheap to compile for few inputs)."""
    tree, q0, qd0 = pendulum

    @jax.jit
    def final(c):
        system = jb.HamiltonianSystem(tree, dissipation=ham.LinearDamping(c))
        return jb.simulate(
            system,
            system.initial_state(q0, 0.3 * qd0),
            0.0,
            0.5,
            solver=diffrax.Dopri5(),
            dt0=5e-3,
            adjoint=diffrax.ForwardMode(),
        ).q[-1, 0]

    c, eps = jnp.asarray(0.2), 1e-6
    fd = (final(c + eps) - final(c - eps)) / (2 * eps)
    np.testing.assert_allclose(jax.jit(jax.jacfwd(final))(c), fd, rtol=1e-6)


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_event_stops_when_coordinate_reaches_value(pendulum):
    tree, _, _ = pendulum
    system = jb.HamiltonianSystem(tree)
    y0 = system.initial_state(jnp.array([1.0, 0.0]))  # released from 1 rad, swings down
    tr = jb.simulate(system, y0, 0.0, 5.0, event=stop_when(0, 0.0), rtol=1e-10, atol=1e-10, dense=True)
    assert tr.result == diffrax.RESULTS.event_occurred
    assert abs(float(tr.q[-1, 0])) < 1e-8 and 0.1 < float(tr.ts[-1]) < 1.5


def test_bracket_fitness_tracks_its_function(pendulum):
    """f = φ(q, p) = p₀ evolves by Ivancevic's (2009) d_H f, so f(t) = p₀(t)."""
    tree, q0, qd0 = pendulum
    system = jb.HamiltonianSystem(
        tree,
        drive=ham.ConstantDrive(jnp.array([0.3, -0.1])),
        fitness=ham.BracketFitness(lambda t, q, p: p[0] + 0.1 * t + q[1]),
    )
    y0 = system.initial_state(q0, 0.2 * qd0)
    y0 = {**y0, "f": jnp.array([y0["p"][0] + y0["q"][1]])}
    tr = jb.simulate(system, y0, 0.0, 1.0, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(tr.f[-1, 0], tr.p[-1, 0] + 0.1 * 1.0 + tr.q[-1, 1], atol=1e-8)


def test_power_depletion_fitness_decreases_with_work():
    system = jb.HamiltonianSystem(
        _slider(), drive=ham.ConstantDrive(jnp.array([4.0])), fitness=ham.PowerDepletion(0.05)
    )
    tr = jb.simulate(
        system, system.initial_state(jnp.zeros(1)), 0.0, 1.0, ts=jnp.linspace(0, 1, 11), rtol=1e-10, atol=1e-10
    )
    # closed form: constant force F on mass m from rest: work W(t) = F² t² / (2 m); f = exp(−k W)
    W = 16.0 * np.linspace(0, 1, 11) ** 2 / 4.0
    np.testing.assert_allclose(tr.f[:, 0], np.exp(-0.05 * W), rtol=1e-8)


@pytest.mark.slow
def test_vmap_over_initial_states_and_parameters(pendulum):
    tree, q0, qd0 = pendulum
    Q = q0 + 0.1 * jnp.arange(8)[:, None]
    run = lambda q, c: jb.simulate(
        jb.HamiltonianSystem(tree, dissipation=ham.LinearDamping(c)),
        jb.HamiltonianSystem(tree).initial_state(q, qd0),
        0.0,
        0.5,
    ).q[-1]
    batched = jax.jit(jax.vmap(run))(Q, jnp.linspace(0, 1, 8))
    for k in (0, 5):
        np.testing.assert_allclose(batched[k], run(Q[k], jnp.linspace(0, 1, 8)[k]), rtol=1e-7, atol=1e-9)


def test_seed004_matrices_equal_the_tree(pendulum):
    tree, _, _ = pendulum
    rng = np.random.default_rng(3)
    A = jnp.array([[1.0, 0.0], [1.0, 1.0]])  # θ = A q
    for _ in range(5):
        q, qd = jnp.asarray(rng.uniform(-2, 2, 2)), jnp.asarray(rng.uniform(-5, 5, 2))
        th, om = dp.to_absolute(q, qd)
        M, C, G = dp.matrices(dp.Parameters(), th, om)
        np.testing.assert_allclose(jb.mass_matrix(tree, q), A.T @ M @ A, atol=1e-12)
        np.testing.assert_allclose(jb.bias_forces(tree, q, qd), -A.T @ (C + G), atol=1e-12)
        np.testing.assert_allclose(jb.gravity_forces(tree, q), -A.T @ G, atol=1e-12)


def test_seed004_euler_reproduces_the_notebook_and_drifts(pendulum):
    """`dp.euler` is the notebook's explicit Euler run (dt = 1e-4 s, 20 s): equal to the
    notebook's own loop in numpy (the seed prints no values) to round-off over the first 3 s.
    The pendulum is chaotic, so round-off differences grow (measured: 4e-15 rad at 1 s, 2e-14 at
    2 s, 3e-11 at 5 s, 8e-8 at 10 s, 0.6 rad at 20 s); the comparison stops at 3 s. Over 20 s the
    Euler run gains ≈ 11 % energy, which Diffrax's Hamiltonian run (docs/guides/dynamics.md) does not."""
    t, th, om = jax.jit(dp.euler)()
    assert float(t[-1]) == pytest.approx(20.0) and th.shape == (2001, 2)
    ref = notebook_euler(30_000)  # 3 s, sampled every 100 steps (0.01 s) like dp.euler
    np.testing.assert_allclose(t[:301], np.arange(301) * 0.01, atol=1e-12)
    for time, atol in ((0.5, 1e-13), (1.0, 1e-13), (2.0, 1e-12), (3.0, 1e-10)):
        k = int(round(time / 0.01))
        np.testing.assert_allclose(th[k], ref[2:, k], atol=atol, rtol=0, err_msg=f"theta at {time} s")
        np.testing.assert_allclose(om[k], ref[:2, k], atol=20 * atol, rtol=0, err_msg=f"omega at {time} s")
    E = jax.vmap(lambda a, b: dp.energy(dp.Parameters(), a, b))(th, om)
    assert 0.05 < rel_drift(E) < 0.2  # explicit Euler gains energy (≈ 11 % over 20 s)


def test_seed004_two_joint_pid_reaches_target_posture():
    """jaxbio's own two-joint variant (not the notebook's loop, see tests/papers)."""
    pid = dp.TwoJointPID()
    ts, th, om = dp.simulate_two_joint_pid(pid)
    np.testing.assert_allclose(th[-1], pid.target, atol=2e-3)
    np.testing.assert_allclose(om[-1], 0.0, atol=2e-3)
    with pytest.raises(ValueError, match="kp"):
        dp.TwoJointPID(kp=(-1.0, 1.0))


def test_bad_input(pendulum):
    tree, q0, qd0 = pendulum
    system = jb.HamiltonianSystem(tree)
    y0 = system.initial_state(q0, qd0)
    with pytest.raises(ValueError, match="t1"):
        jb.simulate(system, y0, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"y0\['q'\] has shape"):
        jb.simulate(system, {**y0, "q": jnp.zeros(3)}, 0.0, 1.0)
    with pytest.raises(ValueError, match="keys"):
        jb.simulate(system, {"q": q0}, 0.0, 1.0)
    with pytest.raises(ValueError, match="qd has shape"):
        system.initial_state(q0, jnp.zeros(5))
    with pytest.raises(ValueError, match="≥ 0"):
        ham.LinearDamping(jnp.array([0.1, -0.1]))
    with pytest.raises(ValueError, match="≥ 0"):
        ham.PowerDepletion(-1.0)
    with pytest.raises(ValueError, match="noise has shape"):
        jb.simulate_sde(system, y0, 0.0, 1.0, jax.random.PRNGKey(0), jnp.ones(3), dt0=0.01)
    # an unstable fixed step: explicit Euler on a stiff spring blows up -> a clear error
    stiff = jb.HamiltonianSystem(_slider(), drive=ham.SpringDamperDrive(jnp.array([1e6])))
    with pytest.raises(jb.simulation.SimulationError, match="state became NaN or inf"):
        jb.simulate(stiff, stiff.initial_state(jnp.ones(1)), 0.0, 10.0, solver=diffrax.Euler(), dt0=0.01)
    # running out of steps raises instead of returning a truncated trajectory ...
    with pytest.raises(jb.simulation.SimulationError, match="max_steps=10 ran out"):
        jb.simulate(system, y0, 0.0, 20.0, max_steps=10)
    # ... or, with throw=False, is reported in the result flag
    tr = jb.simulate(system, y0, 0.0, 20.0, max_steps=10, throw=False)
    assert tr.result == diffrax.RESULTS.max_steps_reached


def test_first_order_actuator_gives_the_seed000_impulse():
    """Step command u = 1 on a point mass: F = F⁰(1 − e^{−t/τ}) (Wilkie's active state), so
    p(t) = F⁰ (t − τ (1 − e^{−t/τ})), and with fitness 0.5 half of it."""
    F0, tau = 30.0, 0.05
    drive = ham.FirstOrderActuator(jnp.array([F0]), jnp.array([tau]), lambda t: jnp.ones(1))
    system = jb.HamiltonianSystem(_slider(), drive=drive)
    ts = jnp.linspace(0, 0.5, 11)
    for fit in (1.0, 0.5):
        tr = jb.simulate(system, system.initial_state(jnp.zeros(1), f=fit), 0.0, 0.5, ts=ts, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(tr.a[:, 0], 1 - np.exp(-np.asarray(ts) / tau), atol=1e-9)
        expect = fit * F0 * (ts - tau * (1 - jnp.exp(-ts / tau)))
        np.testing.assert_allclose(tr.p[:, 0], expect, rtol=1e-8, atol=1e-9)
    with pytest.raises(ValueError, match="time_constant"):
        ham.FirstOrderActuator(jnp.array([1.0]), jnp.array([0.0]), lambda t: jnp.ones(1))
    with pytest.raises(ValueError, match="keys"):
        jb.simulate(system, {"q": jnp.zeros(1), "p": jnp.zeros(1), "f": jnp.ones(1)}, 0.0, 1.0)


def test_momenta_are_the_mass_matrix_times_the_velocities_and_invert_velocities():
    """`HamiltonianSystem.momenta`: ``(M(q) + J) q̇`` with the drive's added inertia, against
    `jb.mass_matrix` directly, and `velocities` of it gives ``q̇`` back."""
    tree = jb.load_model("double_pendulum", dtype=jnp.float64).tree
    J = jnp.array([0.3, 0.05])

    class Inertial(ham.Drive):
        def __call__(self, t, q, qd, f, a=None):
            return jnp.zeros_like(qd)

        def added_inertia(self, n, dtype=None):
            return J

    system = jb.HamiltonianSystem(tree, Inertial())
    q, qd = jnp.array([0.4, -1.1]), jnp.array([0.7, 2.0])
    p = system.momenta(q, qd)
    np.testing.assert_allclose(p, (jb.mass_matrix(tree, q) + jnp.diag(J)) @ qd, rtol=1e-14)
    np.testing.assert_allclose(system.velocities(q, p), qd, rtol=1e-12)
