"""Per-muscle three-compartment fatigue (Xia & Frey-Law 2008, 3CC-r): the equations' analytic
steady states for constant target loads, scipy's solve_ivp of the same ODE written out in numpy,
and the law inside a `HamiltonianSystem`."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import jaxbio as jb
from jaxbio.muscles.fatigue import ThreeCompartmentFatigue, steady_state, three_compartment_rates


def solve(law, t1, ts, f0=None, rtol=1e-11, atol=1e-12):
    """The fitness law alone (its rate depends on t only) with Diffrax Tsit5."""
    f0 = jnp.ones(law.size) if f0 is None else f0
    term = diffrax.ODETerm(lambda t, f, _: law.rate(t, None, None, None, f, None, None))
    sol = diffrax.diffeqsolve(
        term,
        diffrax.Tsit5(),
        0.0,
        t1,
        None,
        f0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=100_000,
    )
    return jax.vmap(law.compartments)(sol.ys)


def numpy_rhs(tl_of_t, F, R, LD, LR, r):
    """Xia & Frey-Law's three equations as printed, state (M_A, M_R, M_F) stacked per muscle."""

    def rhs(t, y):
        MA, MR, MF = np.split(y, 3)
        TL = tl_of_t(t)
        C = np.select([(MA < TL) & (MR > TL - MA), MA < TL, MA >= TL], [LD * (TL - MA), LD * MR, LR * (TL - MA)])
        Rr = np.where(MA >= TL, r * R, R)
        return np.concatenate([C - F * MA, -C + Rr * MF, F * MA - Rr * MF])

    return rhs


def expected_steady_state(TL, F, R, LD):
    """Solve the linear system of the branch the muscle ends on (numpy), pick the consistent one."""
    out = []
    for tl, f, r, ld in zip(TL, F, R, LD):
        # development branch: C = LD (TL − MA); rows dMA = 0, dMF = 0, sum = 1
        A = np.array([[-ld - f, 0, 0], [f, 0, -r], [1, 1, 1]])
        x = np.linalg.solve(A, [-ld * tl, 0, 1])
        if not x[1] >= tl - x[0]:  # not enough resting units: C = LD MR
            A = np.array([[-f, ld, 0], [f, 0, -r], [1, 1, 1]])
            x = np.linalg.solve(A, [0, 0, 1])
        out.append(x)
    return np.array(out).T


def test_steady_states_for_constant_loads():
    """Constant TL per muscle: M_A → TL (a hair below, L_D TL/(L_D + F)) while sustainable, the
    fatigued steady state M_A = 1/(1 + F/L_D + F/R) otherwise; run for 30 time constants of the
    slowest mode (1/R = 500 s)."""
    TL = np.array([0.0, 0.1, 0.15, 0.6, 1.0])
    F, R, LD = np.full(5, 0.01), np.full(5, 0.002), np.full(5, 10.0)
    law = ThreeCompartmentFatigue(5, TL, fatigue=F, recovery=R, development=LD, relaxation=10.0, rest_recovery=3.0)
    ref = expected_steady_state(TL, F, R, LD)
    # which muscles are sustainable (M_A ≈ TL) and which fatigue (M_A ≈ 1/(1 + 0.001 + 5) ≈ 0.1666)
    np.testing.assert_allclose(ref[0, :3], TL[:3] * 10 / 10.01, rtol=1e-12)
    np.testing.assert_allclose(ref[0, 3:], 1 / (1 + 0.001 + 5), rtol=1e-12)
    np.testing.assert_allclose(np.stack(steady_state(TL, F, R, LD)), ref, atol=1e-14)
    MA, MR, MF = solve(law, 15000.0, jnp.array([0.0, 15000.0]))
    np.testing.assert_allclose(np.stack([MA[-1], MR[-1], MF[-1]]), ref, atol=1e-8)
    np.testing.assert_allclose(MA[0], 0.0) and np.testing.assert_allclose(MR[0], 1.0)


def test_matches_scipy_on_a_time_varying_load():
    """Three muscles, per-muscle parameters, two sinusoidal loads and a constant one, 3CC-r
    recovery while relaxing: Diffrax on the law against scipy's DOP853 on the printed equations."""
    F, R = np.array([0.05, 0.02, 0.00912]), np.array([0.01, 0.005, 0.00094])
    LD, LR, r = np.array([10.0, 5.0, 10.0]), np.array([10.0, 20.0, 10.0]), 4.0

    def tl_np(t):
        return np.array([0.3 + 0.25 * np.sin(2 * np.pi * t / 40), 0.7, 0.5 + 0.4 * np.sin(2 * np.pi * t / 25)])

    def tl_jax(t):
        return jnp.stack(
            [
                0.3 + 0.25 * jnp.sin(2 * jnp.pi * t / 40),
                jnp.asarray(0.7, float),
                0.5 + 0.4 * jnp.sin(2 * jnp.pi * t / 25),
            ]
        )

    law = ThreeCompartmentFatigue(3, tl_jax, fatigue=F, recovery=R, development=LD, relaxation=LR, rest_recovery=r)
    ts = np.linspace(0.0, 100.0, 41)
    MA, MR, MF = solve(law, 100.0, jnp.asarray(ts))
    y0 = np.concatenate([np.zeros(3), np.ones(3), np.zeros(3)])
    sol = solve_ivp(
        numpy_rhs(tl_np, F, R, LD, LR, r), (0, 100.0), y0, method="DOP853", rtol=1e-11, atol=1e-12, t_eval=ts
    )
    ref = sol.y.reshape(3, 3, -1)
    for name, ours, theirs in (("M_A", MA, ref[0]), ("M_R", MR, ref[1]), ("M_F", MF, ref[2])):
        np.testing.assert_allclose(np.asarray(ours).T, theirs, atol=1e-7, err_msg=name)
    # fractions stay in [0, 1] and the muscles fatigue
    for x in (MA, MR, MF):
        assert float(jnp.min(x)) > -1e-9 and float(jnp.max(x)) < 1 + 1e-9
    assert float(MF[-1, 1]) > 0.5


def test_rates_are_the_published_branches():
    # one muscle per branch: development, not enough resting units, relaxation (with r R)
    MA, MR, MF = jnp.array([0.2, 0.2, 0.6]), jnp.array([0.7, 0.1, 0.3]), jnp.array([0.1, 0.7, 0.1])
    TL = jnp.array([0.5, 0.5, 0.4])
    dA, dR, dF = three_compartment_rates(MA, MR, MF, TL, 0.1, 0.02, 8.0, 12.0, 5.0)
    C = np.array([8.0 * 0.3, 8.0 * 0.1, 12.0 * (0.4 - 0.6)])
    Rr = np.array([0.02, 0.02, 0.1])
    np.testing.assert_allclose(dA, C - 0.1 * MA, rtol=1e-14)
    np.testing.assert_allclose(dR, -C + Rr * MF, rtol=1e-14)
    np.testing.assert_allclose(dF, 0.1 * MA - Rr * MF, rtol=1e-14)
    np.testing.assert_allclose(dA + dR + dF, 0.0, atol=1e-15)


def test_state_layout_and_fitness_value():
    law = ThreeCompartmentFatigue(2, 0.3)
    f = law.state(jnp.array([0.2, 0.1]), jnp.array([0.5, 0.6]), jnp.array([0.3, 0.3]))
    np.testing.assert_allclose(jnp.stack(law.compartments(f)), [[0.2, 0.1], [0.5, 0.6], [0.3, 0.3]], atol=1e-15)
    np.testing.assert_allclose(law.value(f), [0.7, 0.7])
    np.testing.assert_allclose(law.active(f), [0.2, 0.1], atol=1e-15)
    fresh = law.compartments(jnp.ones(4))  # the HamiltonianSystem's default fitness state
    np.testing.assert_allclose(jnp.stack(fresh), [[0, 0], [1, 1], [0, 0]])


def test_inside_a_hamiltonian_system():
    """The law as the fitness of a mass on a rail: the system's f equals the law solved alone."""
    d = {
        "name": "slider",
        "gravity": [0, 0, -9.81],
        "segments": [
            {
                "name": "cart",
                "parent": None,
                "joint": {"type": "prismatic", "axis": [1, 0, 0], "origin": [0, 0, 0], "orientation": [1, 0, 0, 0]},
                "mass": 2.0,
                "com": [0, 0, 0],
                "inertia": [[0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]],
            }
        ],
    }
    tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    law = ThreeCompartmentFatigue(
        3, lambda t: jnp.array([0.2, 0.5, 0.9]) * jnp.minimum(t, 1.0), fatigue=0.05, recovery=0.01
    )
    system = jb.HamiltonianSystem(tree, fitness=law)
    y0 = system.initial_state(jnp.array([0.3]), jnp.array([0.5]))
    assert y0["f"].shape == (6,)
    ts = jnp.linspace(0.0, 2.0, 5)
    tr = jb.simulate(system, y0, 0.0, 2.0, ts=ts, rtol=1e-10, atol=1e-10)
    alone = solve(law, 2.0, ts)
    np.testing.assert_allclose(jnp.stack(jax.vmap(law.compartments)(tr.f)), jnp.stack(alone), atol=1e-8)
    assert float(alone[0][-1, 2]) > 0.8  # M_A follows TL = 0.9 within 2 s


def test_bad_arguments():
    for kw, name in (
        ({"fatigue": -0.1}, "fatigue"),
        ({"recovery": np.ones(3)}, "recovery"),
        ({"development": 0.0}, "development"),
        ({"rest_recovery": -1.0}, "rest_recovery"),
    ):
        with pytest.raises(ValueError, match=name):
            ThreeCompartmentFatigue(2, 0.5, **kw)
    with pytest.raises(ValueError, match="n_muscles"):
        ThreeCompartmentFatigue(0, 0.5)
    with pytest.raises(ValueError, match="target_load"):
        ThreeCompartmentFatigue(2, [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="target_load"):
        ThreeCompartmentFatigue(2, 1.5)
    law = ThreeCompartmentFatigue(2, lambda t: jnp.ones(3))
    with pytest.raises(ValueError, match="target_load"):
        law.rate(0.0, None, None, None, jnp.ones(4), None, None)
