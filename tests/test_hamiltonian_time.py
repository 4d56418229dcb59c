"""Ivancevic 2009 as written (issue #20, items 1–3): an explicitly time-dependent ℋ(t, q, p) (eq. 26)
and its energy balance, eq. 27's bracket d_H f as printed next to the along-the-flow form, and
eqs. 10–11's phase-space dissipation R(q, p) next to the Rayleigh form R(q, q̇)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import simpson

import jaxbio as jb
from tests._models import slider_dict
from jaxbio import hamiltonian as ham


def _slider(mass=2.0):
    return jb.SegmentTree.from_dict(slider_dict(mass), dtype=jnp.float64)


@pytest.fixture(scope="module")
def pendulum():
    return jb.load_model("double_pendulum", dtype=jnp.float64).tree


def _potential(t, q):
    """A time-varying stiffness and a moving anchor: U(t, q) = ½ k(t) |q − r(t)|²."""
    k = 3.0 * (1.0 + 0.5 * jnp.sin(2.0 * t))
    r = jnp.array([0.4 * jnp.sin(3.0 * t), -0.2])
    return 0.5 * k * jnp.sum((q - r) ** 2)


def _hamiltonian_rates(system, t, y):
    """Independent of `vector_field`'s formulas: ∂ℋ/∂t, ∂ℋ/∂q, ∂ℋ/∂p by autodiff of ℋ(t, q, p)."""
    H = lambda t, q, p: system.hamiltonian(t, {"q": q, "p": p})
    return jax.grad(H, argnums=(0, 1, 2))(jnp.asarray(t, y["p"].dtype), y["q"], y["p"])


# ---- item 1: ℋ(t, q, p) ------------------------------------------------------------------------


def _energy_balance(system, tr):
    """ℋ(t₁) − ℋ(t₀) and ∫ dℋ/dt dt (Simpson's rule over the saved times; `power_balance` is
    ∂ℋ/∂t + q̇ᵀ(F − ∂R/∂q̇)) and ∫ ∂ℋ/∂t dt along a simulated trajectory."""

    @jax.jit
    def along(ts, q, p, f):
        ys = {"q": q, "p": p, "f": f}
        return (
            jax.vmap(system.hamiltonian)(ts, ys),
            jax.vmap(system.power_balance)(ts, ys),
            jax.vmap(system.potential.time_rate)(ts, q),
        )

    calH, rates, partial_t = (np.asarray(x) for x in along(tr.ts, tr.q, tr.p, tr.f))
    ts = np.asarray(tr.ts)
    return calH[-1] - calH[0], simpson(rates, x=ts), simpson(partial_t, x=ts), calH


def test_moving_spring_is_the_forced_oscillator():
    """U = ½ k (x − A sin ωt)² on a mass m from rest: x(t) = A ω₀²/(ω₀² − ω²) (sin ωt − (ω/ω₀) sin ω₀t);
    along it ℋ(t) − ℋ(0) = ∫ ∂ℋ/∂t dt (no drive, no dissipation)."""
    m, k, A, w = 2.0, 50.0, 0.1, 3.0
    w0 = np.sqrt(k / m)
    system = jb.HamiltonianSystem(_slider(m), potential=ham.MovingSpringPotential(k, lambda t: A * jnp.sin(w * t)))
    ts = jnp.linspace(0.0, 2.0, 401)
    tr = jb.simulate(system, system.initial_state(jnp.zeros(1)), 0.0, 2.0, ts=ts, rtol=1e-11, atol=1e-12)
    t = np.asarray(ts)
    x = A * w0**2 / (w0**2 - w**2) * (np.sin(w * t) - w / w0 * np.sin(w0 * t))
    np.testing.assert_allclose(tr.q[:, 0], x, atol=1e-9)
    change, work, partial_work, _ = _energy_balance(system, tr)
    assert abs(change) > 1e-2 and abs(change - work) < 1e-7 * abs(change)  # measured 3e-9 relative (Simpson, h = 5 ms)
    assert work == partial_work  # F = R = 0: dℋ/dt = ∂ℋ/∂t
    # the closed forms of MovingSpringPotential equal the autodiff defaults of the protocol
    U, q = system.potential, jnp.array([0.03])
    np.testing.assert_allclose(U.gradient(0.7, q), jax.grad(lambda x: U(0.7, x))(q), rtol=1e-14)
    np.testing.assert_allclose(U.time_rate(0.7, q), ham.TimePotential.time_rate(U, 0.7, q), rtol=1e-14)


def _timed_system(tree):
    return jb.HamiltonianSystem(
        tree,
        drive=ham.TimeFunctionDrive(lambda t: jnp.array([0.5 * jnp.sin(3 * t), -0.2])),
        dissipation=ham.LinearDamping(jnp.array([0.3, 0.1])),
        potential=ham.TimeFunctionPotential(_potential),
    )


@pytest.mark.slow
def test_time_dependent_power_balance_pointwise(pendulum):
    """dℋ/dt = ∂ℋ/∂t + q̇ᵀ(F − ∂R/∂q̇) against jax.jvp of ℋ(t, q, p) along the vector field, and
    eq. 26 (q̇ = ∂ℋ/∂p, ṗ = F − ∂ℋ/∂q − ∂R/∂q̇) against autodiff of ℋ."""
    system = _timed_system(pendulum)

    @jax.jit
    def check(t, y):
        dy = system.vector_field(t, y)
        H = lambda t, q, p: system.hamiltonian(t, {**y, "q": q, "p": p})
        dH = jax.jvp(H, (t, y["q"], y["p"]), (jnp.ones_like(t), dy["q"], dy["p"]))[1]
        dH_dt, dH_dq, dH_dp = _hamiltonian_rates(system, t, y)
        qd = jnp.linalg.solve(jb.mass_matrix(pendulum, y["q"]), y["p"])
        force = jnp.array([0.5 * jnp.sin(3 * t), -0.2]) - jnp.array([0.3, 0.1]) * qd
        return dH, system.power_balance(t, y), dy, dH_dt, dH_dq, dH_dp, force

    rng = np.random.default_rng(5)
    for t in (0.4, 1.3):
        y = {"q": jnp.asarray(rng.uniform(-1, 1, 2)), "p": jnp.asarray(rng.uniform(-1, 1, 2)), "f": jnp.ones(1)}
        dH, power, dy, dH_dt, dH_dq, dH_dp, force = check(jnp.asarray(t), y)
        np.testing.assert_allclose(dH, power, rtol=1e-12)
        np.testing.assert_allclose(dy["q"], dH_dp, rtol=1e-12)
        np.testing.assert_allclose(dy["p"], force - dH_dq, rtol=1e-12, atol=1e-12)
        assert abs(float(dH_dt)) > 0.1  # ℋ depends on t explicitly here


@pytest.mark.slow
def test_time_dependent_energy_balance_along_trajectory(pendulum):
    """ℋ(t₁) − ℋ(t₀) = ∫ (∂ℋ/∂t + q̇ᵀ(F − ∂R/∂q̇)) dt along a driven, damped double pendulum with a
    time-varying spring (≈ 40 s on a loaded 2-core machine: marked slow)."""
    system = _timed_system(pendulum)
    y0 = system.initial_state(jnp.array([0.8, -0.4]), jnp.array([1.0, 0.5]))
    tr = jb.simulate(system, y0, 0.0, 1.0, rtol=1e-11, atol=1e-11, ts=jnp.linspace(0.0, 1.0, 401))
    change, work, partial_work, calH = _energy_balance(system, tr)
    assert abs(change - work) < 1e-8 * abs(change)  # measured 1e-9 relative
    assert abs(partial_work) > 0.1 * abs(change)  # leaving ∂ℋ/∂t out fails the balance
    np.testing.assert_allclose(calH - tr.energy, jax.vmap(_potential)(tr.ts, tr.q), rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_time_dependent_power_balance_with_ball_and_free_joints():
    """On the whole body (free pelvis, ball joints; nq 34, nv 28) ∂U/∂q enters ṗ as G(q)ᵀ∇U, so
    that dℋ/dt along the vector field (jax.jvp of ℋ(t, q, p) with q̇ = G v) is `power_balance`."""
    tree = jb.load_model("wholebody", dtype=jnp.float64).tree
    system = jb.HamiltonianSystem(
        tree,
        drive=ham.ConstantDrive(0.3),
        dissipation=ham.LinearDamping(0.2),
        potential=ham.TimeFunctionPotential(lambda t, q: jnp.sin(t) * jnp.sum(q**2)),
    )
    q = jb.configuration.random(tree, jax.random.PRNGKey(0), angle=0.5, distance=0.3)
    y = system.initial_state(q, jnp.asarray(np.random.default_rng(0).uniform(-1, 1, tree.nv)))

    @jax.jit
    def check(t, y):
        dy = system.vector_field(t, y)
        dH = jax.jvp(
            lambda t, q, p: system.hamiltonian(t, {"q": q, "p": p}),
            (t, y["q"], y["p"]),
            (jnp.ones_like(t), dy["q"], dy["p"]),
        )[1]
        return dH, system.power_balance(t, y)

    dH, power = check(jnp.asarray(0.7), y)
    np.testing.assert_allclose(power, dH, rtol=1e-11)  # measured 3e-14 relative


# ---- item 2: eq. 27 as printed ---------------------------------------------------------------


def _phi(t, q, p):
    return jnp.sin(q[0]) * p[1] + 0.3 * p[0] ** 2 + 0.2 * t * q[1]


@pytest.mark.parametrize("driven", [False, True])
def test_bracket_fitness_forms(pendulum, driven):
    """'eq27' is ∂_tφ + ∂ℋ/∂p·∂φ/∂q − ∂ℋ/∂q·∂φ/∂p (ℋ's gradients by autodiff); 'along_flow'
    equals it when F = R = 0 and exceeds it by exactly (F − ∂R/∂q̇)·∂φ/∂p otherwise."""
    tau, c = jnp.array([0.7, -0.4]), jnp.array([0.3, 0.2])
    kw = dict(drive=ham.ConstantDrive(tau), dissipation=ham.LinearDamping(c)) if driven else {}
    potential = ham.TimeFunctionPotential(_potential)
    along = jb.HamiltonianSystem(pendulum, fitness=ham.BracketFitness(_phi), potential=potential, **kw)
    printed = jb.HamiltonianSystem(pendulum, fitness=ham.BracketFitness(_phi, form="eq27"), potential=potential, **kw)

    @jax.jit
    def rates(t, y):
        dH_dt, dH_dq, dH_dp = _hamiltonian_rates(along, t, y)
        dphi_dt, dphi_dq, dphi_dp = jax.grad(_phi, argnums=(0, 1, 2))(t, y["q"], y["p"])
        eq27 = printed.vector_field(t, y)["f"][0]
        return (
            eq27,
            dphi_dt + dH_dp @ dphi_dq - dH_dq @ dphi_dp,
            along.vector_field(t, y)["f"][0] - eq27,
            (tau - c * dH_dp) @ dphi_dp,
        )

    rng = np.random.default_rng(4)
    t = jnp.asarray(0.6)
    for _ in range(3):
        y = {"q": jnp.asarray(rng.uniform(-1, 1, 2)), "p": jnp.asarray(rng.uniform(-1, 1, 2)), "f": jnp.ones(1)}
        eq27, bracket, gap, expected = rates(t, y)
        np.testing.assert_allclose(eq27, bracket, rtol=1e-12)
        if driven:
            assert abs(float(expected)) > 1e-2
            np.testing.assert_allclose(gap, expected, rtol=1e-11)
        else:
            assert abs(float(gap)) < 1e-13


def test_eq27_tracks_its_function_on_solutions_of_eq26():
    """s* d_H f = d/dt (f ∘ s): with F = R = 0 and a time-dependent ℋ (a moving spring),
    f(t) = φ(t, q(t), p(t)) for 'eq27'; with a drive, 'eq27' misses ∫ F·∂φ/∂p dt."""
    phi = lambda t, q, p: jnp.sin(q[0]) * p[0] + 0.3 * p[0] ** 2 + 0.2 * t * q[0]
    potential = ham.MovingSpringPotential(20.0, lambda t: 0.1 * jnp.sin(2.0 * t))
    ts = jnp.array([0.0, 0.5, 1.0])
    for tau in (0.0, 1.5):
        system = jb.HamiltonianSystem(
            _slider(),
            drive=ham.ConstantDrive(jnp.array([tau])),
            fitness=ham.BracketFitness(phi, form="eq27"),
            potential=potential,
        )
        y0 = system.initial_state(jnp.array([0.2]), jnp.array([0.3]))
        y0 = {**y0, "f": jnp.atleast_1d(phi(0.0, y0["q"], y0["p"]))}
        tr = jb.simulate(system, y0, 0.0, 1.0, rtol=1e-11, atol=1e-12, ts=ts)
        miss = np.abs(np.asarray(tr.f[:, 0] - jax.vmap(phi)(tr.ts, tr.q, tr.p))).max()
        assert miss < 1e-8 if tau == 0.0 else miss > 1e-2


def test_bracket_fitness_bad_form():
    with pytest.raises(ValueError, match="form must be one of"):
        ham.BracketFitness(_phi, form="printed")
    with pytest.raises(ValueError, match="phi must be a function"):
        ham.BracketFitness(1.0)


# ---- item 3: eqs. 10–11 with R(q, p) -----------------------------------------------------------


def _phase_field(system, R, t, y, force):
    """Eqs. 10–11 from autodiff of ℋ and R: q̇ = ∂ℋ/∂p + ∂R/∂p, ṗ = F − ∂ℋ/∂q + ∂R/∂q."""
    _, dH_dq, dH_dp = _hamiltonian_rates(system, t, y)
    dR_dq, dR_dp = jax.grad(R, argnums=(0, 1))(y["q"], y["p"])
    return dH_dp + dR_dp, force - dH_dq + dR_dq


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_phase_space_dissipation_is_eqs_10_11(pendulum):
    """The vector field and the energy balance dℋ/dt = ∂ℋ/∂t + ∂ℋ/∂p·F + ∇ℋ·∇R, against autodiff."""
    R = lambda q, p: -0.4 * jnp.dot(q, p) + 0.1 * jnp.sum(q**2 * p**2)
    tau = jnp.array([0.3, -0.2])
    system = jb.HamiltonianSystem(
        pendulum,
        drive=ham.ConstantDrive(tau),
        dissipation=ham.PhaseSpaceDissipation(R),
        potential=ham.TimeFunctionPotential(_potential),
    )
    y = {"q": jnp.array([0.4, -0.7]), "p": jnp.array([0.9, 0.2]), "f": jnp.ones(1)}

    @jax.jit
    def check(t, y):
        dy = system.vector_field(t, y)
        dH = jax.jvp(
            lambda t, q, p: system.hamiltonian(t, {"q": q, "p": p}),
            (t, y["q"], y["p"]),
            (jnp.ones_like(t), dy["q"], dy["p"]),
        )[1]
        return dy, _phase_field(system, R, t, y, tau), dH, system.power_balance(t, y)

    dy, (qdot, pdot), dH, power = check(jnp.asarray(0.3), y)
    np.testing.assert_allclose(dy["q"], qdot, rtol=1e-12)
    np.testing.assert_allclose(dy["p"], pdot, rtol=1e-12)
    np.testing.assert_allclose(power, dH, rtol=1e-12)


class _GradientRayleigh1(ham.Dissipation):
    """Rayleigh R̃(q, q̇) = φ'(q) q̇ on one coordinate: velocity-linear, force ∂R̃/∂q̇ = φ'(q)
    (φ(q) = `_phi_q` of (q, 0)); no damping."""

    def __call__(self, q, qd):
        return jnp.dot(jax.grad(lambda x: _phi_q(jnp.append(x, 0.0)))(q), qd)


def _phi_q(q):
    return 0.3 * jnp.cos(q[0]) + 0.2 * q[1] ** 2


def test_phase_space_and_rayleigh_forms_coincide_only_without_velocity_dependence():
    """They coincide iff ∂R/∂p = 0 and ∂R/∂q = −∂R̃/∂q̇ (so R̃ is linear in q̇): R(q, p) = −φ(q)
    and R̃ = ∇φ·q̇ give the same trajectory; linear damping and its nearest R(q, p) do not."""
    m, tau = 2.0, 0.3
    slider = _slider(m)
    drive = ham.ConstantDrive(jnp.array([tau]))
    start = {"q": jnp.array([0.6]), "p": jnp.array([1.0]), "f": jnp.ones(1)}
    t = np.linspace(0.0, 1.0, 5)
    run = lambda dissipation: jb.simulate(
        jb.HamiltonianSystem(slider, drive=drive, dissipation=dissipation),
        start,
        0.0,
        1.0,
        ts=jnp.asarray(t),
        rtol=1e-11,
        atol=1e-12,
    )
    phase = run(ham.PhaseSpaceDissipation(lambda q, p: -_phi_q(jnp.append(q, 0.0))))
    rayleigh = run(_GradientRayleigh1())
    np.testing.assert_allclose(phase.q, rayleigh.q, atol=1e-10)
    np.testing.assert_allclose(phase.p, rayleigh.p, atol=1e-10)
    driven_only = 0.6 + 0.5 * t + tau * t**2 / (2 * m)  # the closed form without the term
    assert np.abs(phase.q[:, 0] - driven_only).max() > 1e-2  # the term does act

    # Linear damping c (Rayleigh ½cq̇², force cq̇) and R(q, p) = −½c|p|² (the same c, written on p):
    # on a free mass m the closed forms differ — p = p₀e^{−ct/m} against p = p₀, x = (1/m − c)p₀t.
    c, p0 = 0.5, 1.2
    start = {"q": jnp.zeros(1), "p": jnp.array([p0]), "f": jnp.ones(1)}
    damped = jb.simulate(
        jb.HamiltonianSystem(slider, dissipation=ham.LinearDamping(c)),
        start,
        0.0,
        1.0,
        ts=jnp.asarray(t),
        rtol=1e-11,
        atol=1e-12,
    )
    on_p = jb.simulate(
        jb.HamiltonianSystem(slider, dissipation=ham.PhaseSpaceDissipation(lambda q, p: -0.5 * c * jnp.sum(p**2))),
        start,
        0.0,
        1.0,
        ts=jnp.asarray(t),
        rtol=1e-11,
        atol=1e-12,
    )
    np.testing.assert_allclose(damped.p[:, 0], p0 * np.exp(-c * t / m), rtol=1e-9)
    np.testing.assert_allclose(on_p.p[:, 0], p0, rtol=1e-12)
    np.testing.assert_allclose(on_p.q[:, 0], (1 / m - c) * p0 * t, atol=1e-10)
    assert np.abs(damped.q - on_p.q).max() > 0.1


def test_phase_space_dissipation_and_potential_bad_input(pendulum):
    with pytest.raises(ValueError, match="PhaseSpaceDissipation: fn must be a function"):
        ham.PhaseSpaceDissipation(0.5)
    with pytest.raises(ValueError, match="must return a scalar"):
        ham.PhaseSpaceDissipation(lambda q, p: q * p)(jnp.ones(2), jnp.ones(2))
    with pytest.raises(ValueError, match="TimeFunctionPotential: fn must be a function"):
        ham.TimeFunctionPotential("U")
    with pytest.raises(ValueError, match="must return a scalar"):
        ham.TimeFunctionPotential(lambda t, q: q)(0.0, jnp.ones(2))
    with pytest.raises(ValueError, match="stiffness"):
        ham.MovingSpringPotential(-1.0, lambda t: 0.0)
    with pytest.raises(ValueError, match="rest must be a function"):
        ham.MovingSpringPotential(1.0, 0.0)
    with pytest.raises(ValueError, match="potential must be a jaxbio.hamiltonian.TimePotential"):
        jb.HamiltonianSystem(pendulum, potential=lambda t, q: 0.0)
    with pytest.raises(ValueError, match="potential MovingSpringPotential: stiffness"):
        jb.HamiltonianSystem(pendulum, potential=ham.MovingSpringPotential(jnp.ones(3), lambda t: 0.0))
    with pytest.raises(ValueError, match="Dissipation or jaxbio.hamiltonian.PhaseSpaceDissipation"):
        jb.HamiltonianSystem(pendulum, dissipation=lambda q, p: 0.0)
    with pytest.raises(ValueError, match="PhaseSpaceDissipation needs canonical coordinates"):
        jb.HamiltonianSystem(
            jb.load_model("wholebody", dtype=jnp.float64), dissipation=ham.PhaseSpaceDissipation(lambda q, p: 0.0)
        )
    with pytest.raises(ValueError, match="form='eq27' needs canonical coordinates"):
        ham.BracketFitness(lambda t, q, p: q[0], form="eq27").rate(
            0.0,
            jnp.ones(4),
            jnp.ones(3),
            jnp.ones(3),
            jnp.ones(1),
            jnp.ones(3),
            ham.PhaseFlow(jnp.ones(4), jnp.ones(3), jnp.ones(3), jnp.ones(3), jnp.zeros(())),
        )
