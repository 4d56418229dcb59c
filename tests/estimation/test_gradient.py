"""Gradient-based estimation through the simulator (issue #8 part 4): muscle parameters and
excitation time series recovered from synthetic motion (one subject, and several in one
``jax.vmap``), gradients against central finite differences, the interpolant against numpy, the
locked-shoulder arm against full arm26, the optimisation loop on closed-form objectives, bad input.

Compile budget: the synthetic motions come from `jaxbio.simulate` (a forward solve, cheap to
compile); each fit configuration (plain, jitted, vmapped, reverse mode) compiles the differentiated
solve once, 20–60 s each on the 2-core CI machine, more than the default run's budget for this
file, so the tests through the simulator are marked slow; the default run checks everything
around them (parameterisations, interpolant, model, optimiser loop, input validation).
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxbio as jb
from jaxbio.estimation import gradient as ge
from jaxbio.muscles import geometry
from jaxbio.muscles.activation import ActivationDynamics
from jaxbio.muscles.drive import MuscleActuatedDrive
from jaxbio.muscles.sets import elbow_arm26, load_muscle_set

NODES = np.linspace(0.0, 0.3, 4)  # s
#: true excitations of TRIlat, BICshort, BRA at the nodes (distinct time courses: F⁰ identifiable)
TRUE_U = np.array([[0.05, 0.3, 0.1], [0.4, 0.1, 0.3], [0.1, 0.5, 0.2], [0.3, 0.2, 0.6]])
T = np.linspace(0.0, 0.4, 41)  # s, sample times
DT = 5e-3  # s, fixed step
SCALE = np.array([0.7, 1.3, 0.8])  # initial guess of F⁰ relative to the truth


@pytest.fixture(scope="module")
def elbow():
    """arm26 with the shoulder locked: 1 DOF, 3 muscles, the true excitations, y0 at t = 0."""
    tree, paths, hill = elbow_arm26(dtype=jnp.float64)
    drive = MuscleActuatedDrive(tree, paths, hill, ActivationDynamics(), ge.PiecewiseLinearExcitation(NODES, TRUE_U))
    system = jb.HamiltonianSystem(tree, drive=drive)
    y0 = system.initial_state(jnp.array([0.6]), a=jnp.full(3, 0.05))
    return system, y0


class _Synthetic(NamedTuple):
    trajectory: object
    forces: object


def simulate_truth(system, y0):
    """The measured motion: ``system`` simulated with `jaxbio.simulate` on the fits' fixed steps."""
    return jb.simulate(system, y0, float(T[0]), float(T[-1]), dt0=DT, ts=jnp.asarray(T))


@pytest.fixture(scope="module")
def data(elbow):
    """Synthetic measurement: the true system's motion and muscle forces."""
    system, y0 = elbow
    trajectory = simulate_truth(system, y0)
    return _Synthetic(trajectory, ge.muscle_forces(system, trajectory))


def with_fmax(system, fmax):
    return eqx.tree_at(lambda s: s.drive.muscles.max_isometric_force, system, jnp.asarray(fmax))


# ---- the interpolant and the model helper (cheap) -----------------------------------------------


def test_piecewise_linear_excitation_matches_numpy_interp_under_vmap_and_jit():
    u = ge.PiecewiseLinearExcitation(NODES, TRUE_U)
    ts = np.concatenate([[-0.1], np.linspace(0.0, 0.3, 37), [0.3 + 1e-12, 0.5]])
    got = np.asarray(jax.jit(jax.vmap(u))(jnp.asarray(ts)))
    want = np.stack([np.interp(ts, NODES, TRUE_U[:, j]) for j in range(3)], axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    # d u(t) / d values: the hat-function weights (1 − w, w) at the bracketing nodes
    t = 0.16  # between nodes 1 (0.1) and 2 (0.2)
    g = jax.grad(lambda v: ge.PiecewiseLinearExcitation(NODES, v)(t)[1])(jnp.asarray(TRUE_U))
    w = (t - 0.1) / 0.1
    expected = np.zeros_like(TRUE_U)
    expected[1, 1], expected[2, 1] = 1 - w, w
    np.testing.assert_allclose(g, expected, atol=1e-14)


def test_elbow_arm26_equals_full_arm26_with_the_shoulder_held():
    """With the shoulder locked at 0.4 rad, the 1-DOF model's path points and forearm pose equal
    the full arm26's at (0.4, elbow angle), so lengths, moment arms, M and g do too."""
    tree, paths, _ = load_muscle_set("arm26", dtype=jnp.float64)
    etree, epaths, hill = elbow_arm26(("BIClong", "TRIlong", "BRA"), shoulder_angle=0.4, dtype=jnp.float64)
    sel = np.array([paths.index(n) for n in epaths.names])
    P = epaths.max_points
    np.testing.assert_allclose(hill.max_isometric_force, [624.3, 798.52, 987.26])
    np.testing.assert_allclose(hill.tendon_slack_length, [0.2723, 0.143, 0.0535])
    assert etree.nq == 1 and epaths.counts == (9, 5, 2)
    for qe in (0.2, 1.7):
        full = geometry.path_points_world(paths, tree, jnp.array([0.4, qe]))
        locked = geometry.path_points_world(epaths, etree, jnp.array([qe]))
        np.testing.assert_allclose(locked, full[sel, :P], atol=1e-14)
        pos, att = jb.forward_kinematics(tree, jnp.array([0.4, qe]))
        epos, eatt = jb.forward_kinematics(etree, jnp.array([qe]))
        np.testing.assert_allclose(epos[0], pos[1], atol=1e-14)
        np.testing.assert_allclose(eatt[0], att[1], atol=1e-14)
    for field in ("masses", "coms", "inertias"):
        np.testing.assert_array_equal(getattr(etree, field)[0], getattr(tree, field)[1])


# ---- parameterisations: z -> system (cheap, no solve) ------------------------------------------------


def test_parameterisations_map_z_to_systems(elbow):
    system, _ = elbow
    spec = ge._ParameterSpec(("max_isometric_force", "optimal_fiber_length"), (0, 2))
    z0 = spec.initial_z(system)
    F, L = system.drive.muscles.max_isometric_force, system.drive.muscles.optimal_fiber_length
    np.testing.assert_allclose(jnp.exp(z0), [F[0], F[2], L[0], L[2]], rtol=1e-15)
    doubled = spec.to_system(z0 + jnp.log(2.0), system).drive.muscles
    np.testing.assert_allclose(doubled.max_isometric_force, F * jnp.array([2.0, 1.0, 2.0]), rtol=1e-14)
    np.testing.assert_allclose(doubled.optimal_fiber_length, L * jnp.array([2.0, 1.0, 2.0]), rtol=1e-14)
    np.testing.assert_array_equal(doubled.tendon_slack_length, system.drive.muscles.tendon_slack_length)
    # excitation of BICshort (index 1) from logits; the others keep the template's time course
    espec = ge._ExcitationSpec((1,), 3)
    values = np.array([0.2, 0.9, 0.4, 0.7])
    fitted = espec.to_system(jnp.log(values / (1 - values)), system, jnp.asarray(NODES)).drive.excitation
    for t in (0.0, 0.05, 0.21, 0.35):
        want = [np.interp(t, NODES, TRUE_U[:, 0]), np.interp(t, NODES, values), np.interp(t, NODES, TRUE_U[:, 2])]
        np.testing.assert_allclose(fitted(t), want, atol=1e-14)


# ---- the optimisation loop on a closed-form objective (cheap) -----------------------------------


def rosenbrock(z):
    return (1 - z[0]) ** 2 + 100 * (z[1] - z[0] ** 2) ** 2


def quadratic(z):
    return jnp.sum(jnp.array([1.0, 10.0]) * (z - 1.0) ** 2)


def minimise(fn, optimizer, steps, callback=None, **kw):
    options = dict(gtol=1e-10, ftol=1e-20, gtol_stall=1e-5, max_linesearch=40) | kw
    return ge._minimise(
        lambda z, _: (fn(z), None),
        None,
        jnp.array([-1.2, 1.0]),
        None,
        optimizer=optimizer,
        steps=steps,
        callback=callback,
        **options,
    )


@pytest.mark.parametrize("optimizer", [None, "adam"])
def test_optimisation_loop_reaches_the_minimum(optimizer):
    """The loop behind both fits, on closed-form objectives: the built-in optimistix BFGS
    (backtracking Armijo) on Rosenbrock's valley, and an optax transformation (Adam) on a
    quadratic; the histories hold the loss at every iterate, then repeat the last one."""
    fn, opt, steps = {
        None: (rosenbrock, None, 200),
        "adam": (quadratic, optax.adam(optax.exponential_decay(0.1, 200, 0.3)), 800),
    }[optimizer]
    seen = []
    z, grad, _, losses, gnorms, iterations, converged = minimise(
        fn, opt, steps, callback=lambda i, f, z: seen.append(i)
    )
    np.testing.assert_allclose(z, [1.0, 1.0], atol=1e-6)
    assert losses.shape == gnorms.shape == (steps + 1,) and seen == list(range(1, int(iterations) + 1))
    assert losses[-1] < 1e-12 * losses[0] and float(losses[0]) == pytest.approx(float(fn(jnp.array([-1.2, 1.0]))))
    np.testing.assert_array_equal(losses[int(iterations) :], losses[-1])
    np.testing.assert_allclose(gnorms[int(iterations)], np.max(np.abs(grad)), rtol=1e-12)
    if optimizer is None:
        assert converged and iterations < 100
        assert np.all(np.diff(losses) <= 0)  # accepted steps only lower the loss


def test_optimisation_loop_jits_and_vmaps_over_problems():
    """One compiled loop, vmapped over two starting points and two shifted minima: each row equals
    its own run, and both reach their minimum."""

    def shifted(z, c):
        return (c[0] - z[0]) ** 2 + 100 * (z[1] - z[0] ** 2) ** 2 + 0 * c[1]

    def run(z0, c):
        return ge._minimise(
            lambda z, c: (shifted(z, c), None),
            c,
            z0,
            None,
            optimizer=None,
            steps=200,
            gtol=1e-10,
            ftol=1e-20,
            gtol_stall=1e-5,
            max_linesearch=40,
            callback=None,
        )

    z0 = jnp.array([[-1.2, 1.0], [0.5, -0.3]])
    c = jnp.array([[1.0, 0.0], [0.8, 0.0]])
    batch = jax.jit(jax.vmap(run))(z0, c)
    np.testing.assert_allclose(batch[0], [[1.0, 1.0], [0.8, 0.64]], atol=1e-6)
    for i in range(2):
        one = run(z0[i], c[i])
        np.testing.assert_allclose(batch[0][i], one[0], rtol=1e-10, atol=1e-12)
        assert int(batch[5][i]) == int(one[5]) and bool(batch[6][i]) and bool(one[6])


def test_optax_lbfgs_with_its_line_search_runs_in_the_loop():
    """optax.lbfgs (zoom line search: it calls ``value_fn`` inside its update) as ``optimizer``."""
    z, _, _, losses, _, iterations, converged = minimise(rosenbrock, optax.lbfgs(), 200, ftol=0.0)
    np.testing.assert_allclose(z, [1.0, 1.0], atol=1e-6)
    assert converged and iterations < 200


# ---- bad input -------------------------------------------------------------------------------------


def test_bad_input_raises_before_tracing(elbow):
    system, y0 = elbow
    q = np.zeros((len(T), 1))
    fit = ge.fit_muscle_parameters
    with pytest.raises(ValueError, match=r"q_measured contains NaN or inf \(first at sample 3\)"):
        fit(system, y0, T, np.where(np.arange(len(T))[:, None] == 3, np.nan, q))
    with pytest.raises(ValueError, match=r"q_measured has shape \(40, 1\), expected \(len\(t\), nq\) = \(41, 1\)"):
        fit(system, y0, T, q[:-1])
    with pytest.raises(ValueError, match=r"qd_measured has shape \(41, 2\)"):
        fit(system, y0, T, q, np.zeros((len(T), 2)))
    with pytest.raises(ValueError, match="qd_measured contains NaN"):
        fit(system, y0, T, q, np.full((len(T), 1), np.inf))
    with pytest.raises(ValueError, match="t must be finite and strictly increasing"):
        fit(system, y0, T[::-1], q)
    with pytest.raises(ValueError, match="t must be a 1-D array"):
        fit(system, y0, T[:1], q[:1])
    with pytest.raises(ValueError, match="cannot fit 'pennation_angle'"):
        fit(system, y0, T, q, parameters=("pennation_angle",))
    with pytest.raises(ValueError, match="no muscle named 'BIClong'"):
        fit(system, y0, T, q, muscles=("BIClong",))
    with pytest.raises(ValueError, match="gradient must be one of"):
        fit(system, y0, T, q, gradient="central")
    with pytest.raises(ValueError, match="dt0 must be a positive step"):
        fit(system, y0, T, q, dt0=-1e-3)
    with pytest.raises(ValueError, match="qd_weight must be finite and ≥ 0"):
        fit(system, y0, T, q, qd_weight=-1.0)
    with pytest.raises(ValueError, match="steps must be an integer ≥ 0"):
        fit(system, y0, T, q, steps=-1)
    with pytest.raises(ValueError, match="parameters must name distinct fields"):
        fit(system, y0, T, q, parameters=("curvature", "curvature"))
    with pytest.raises(ValueError, match=r"y0\['a'\] has shape \(2,\)"):
        fit(system, {**y0, "a": jnp.zeros(2)}, T, q)
    with pytest.raises(ValueError, match="drive must be a MuscleActuatedDrive"):
        fit(jb.HamiltonianSystem(system.tree), {k: y0[k] for k in ("q", "p", "f")}, T, q)
    with pytest.raises(ValueError, match="initial guesses of the fitted parameters must be > 0"):
        fit(with_fmax(system, jnp.array([0.0, 400.0, 900.0])), y0, T, q)
    exc = ge.fit_excitations
    with pytest.raises(ValueError, match="initial excitations must lie strictly between 0 and 1"):
        exc(system, y0, T, q, nodes=NODES, initial=0.0)
    with pytest.raises(ValueError, match=r"initial must be a scalar or have shape .* = \(4, 1\)"):
        exc(system, y0, T, q, nodes=NODES, muscles=("BRA",), initial=np.full((4, 3), 0.2))
    with pytest.raises(ValueError, match="nodes must be finite and strictly increasing"):
        exc(system, y0, T, q, nodes=NODES[::-1])
    with pytest.raises(ValueError, match="q_measured contains NaN"):
        exc(system, y0, T, np.full(len(T), np.nan), nodes=NODES)
    with pytest.raises(ValueError, match="q_measured has shape"):
        ge.trajectory_loss(system, y0, T, q[:10])
    with pytest.raises(ValueError, match=r"values must have shape \(K, m\) = \(4, m\)"):
        ge.PiecewiseLinearExcitation(NODES, TRUE_U[:3])


def test_bad_input_under_jit_and_vmap_raises_before_tracing(elbow):
    """Shapes and options are checked on the traced arrays too, with the same ValueErrors, before
    anything compiles; a traced ``t`` needs an explicit ``dt0``."""
    system, y0 = elbow
    fit = ge.fit_muscle_parameters
    with pytest.raises(ValueError, match=r"q_measured has shape \(40, 1\), expected \(len\(t\), nq\) = \(41, 1\)"):
        jax.vmap(lambda q: fit(system, y0, T, q, dt0=DT))(jnp.zeros((3, 40, 1)))
    with pytest.raises(ValueError, match="pass dt0 explicitly when t is traced"):
        jax.jit(lambda t, q: fit(system, y0, t, q))(jnp.asarray(T), jnp.zeros((len(T), 1)))
    with pytest.raises(ValueError, match="steps must be an integer ≥ 0"):
        jax.vmap(lambda q: fit(system, y0, T, q, dt0=DT, steps=2.5))(jnp.zeros((3, len(T), 1)))
    with pytest.raises(ValueError, match="initial excitations must lie strictly between 0 and 1"):
        jax.vmap(lambda q: ge.fit_excitations(system, y0, T, q, nodes=NODES, initial=1.5, dt0=DT))(
            jnp.zeros((2, len(T), 1))
        )


# ---- through the simulator: F⁰ (slow: one forward-mode compile, shared) -----------------------


@pytest.mark.slow
def test_loss_gradient_matches_central_differences(elbow, data):
    """∂L/∂log F⁰ (forward mode through diffeqsolve) against central differences of the same
    compiled loss, away from the optimum."""
    system, y0 = elbow
    truth = np.asarray(system.drive.muscles.max_isometric_force)
    guess = ge.fit_muscle_parameters(
        with_fmax(system, truth * SCALE), y0, T, data.trajectory.q, steps=0, dt0=DT, gradient="forward"
    )
    assert isinstance(guess, ge.MuscleFitResult) and isinstance(guess.objective, ge.FitObjective)
    z = guess.z
    value, grad = guess.objective(z)
    assert float(value) > 1e-4 and float(guess.loss) == pytest.approx(float(value))
    h = 1e-5
    fd = np.array(
        [(float(guess.objective(z + h * e)[0]) - float(guess.objective(z - h * e)[0])) / (2 * h) for e in np.eye(3)]
    )
    np.testing.assert_allclose(grad, fd, rtol=1e-7)


@pytest.mark.slow
def test_max_isometric_forces_recovered_from_motion(elbow, data):
    """F⁰ of all three muscles from ×0.7 / ×1.3 / ×0.8 back to the truth, by L-BFGS through the
    simulator (``gradient="auto"``: forward mode for 3 numbers);
    the fitted motion and muscle forces reproduce the synthetic ones."""
    system, y0 = elbow
    truth = np.asarray(system.drive.muscles.max_isometric_force)
    res = ge.fit_muscle_parameters(with_fmax(system, truth * SCALE), y0, T, data.trajectory.q, dt0=DT, steps=100)
    assert bool(res.converged) and int(res.iterations) < 100
    np.testing.assert_allclose(res.params["max_isometric_force"], truth, rtol=1e-6)
    np.testing.assert_allclose(res.trajectory.q, data.trajectory.q, atol=1e-8)
    np.testing.assert_allclose(res.forces, data.forces, rtol=0, atol=1e-5 * float(np.max(data.forces)))
    assert res.loss_history[0] > 1e-3 and res.loss < 1e-16
    assert res.loss_history.shape == (101,) and np.all(np.diff(res.loss_history) <= 0)
    assert float(res.loss_history[-1]) == float(res.loss) == float(res.loss_history[int(res.iterations)])
    # the fitted system is a plain HamiltonianSystem: its muscles carry the fitted F⁰
    np.testing.assert_allclose(res.system.drive.muscles.max_isometric_force, res.params["max_isometric_force"])
    # the synthetic data are a physical motion: the elbow flexes by about 1 rad
    assert 0.8 < float(data.trajectory.q[-1, 0] - data.trajectory.q[0, 0]) < 1.5


#: three subjects: true F⁰ relative to arm26's, and initial guesses relative to each truth
SUBJECTS = np.array([[1.0, 1.0, 1.0], [1.2, 0.85, 1.1], [0.8, 1.15, 0.9]])
GUESSES = np.array([[0.7, 1.3, 0.8], [1.25, 0.8, 1.2], [0.9, 1.1, 0.75]])


@pytest.mark.slow
def test_fit_vmapped_over_subjects_recovers_each_and_equals_single_fits(elbow):
    """Three subjects with different true F⁰ (synthetic motions from `jaxbio.simulate`), each from
    its own wrong guess, fitted in one ``jax.jit(jax.vmap(...))``: every subject's F⁰ comes back,
    and each row equals that subject's fit run alone."""
    system, y0 = elbow
    arm26 = np.asarray(system.drive.muscles.max_isometric_force)
    truths = arm26 * SUBJECTS
    q = jax.jit(jax.vmap(lambda f: simulate_truth(with_fmax(system, f), y0).q))(jnp.asarray(truths))
    assert np.max(np.ptp(np.asarray(q)[:, :, 0], axis=0)) > 1e-2  # the subjects move differently

    def fit_one(f0, q):
        return ge.fit_muscle_parameters(with_fmax(system, f0), y0, T, q, dt0=DT, steps=100)

    batch = jax.jit(jax.vmap(fit_one))(jnp.asarray(truths * GUESSES), q)
    assert batch.params["max_isometric_force"].shape == (3, 3) and batch.loss_history.shape == (3, 101)
    assert bool(np.all(batch.converged))
    np.testing.assert_allclose(batch.params["max_isometric_force"], truths, rtol=1e-6)
    np.testing.assert_allclose(batch.trajectory.q, q, atol=1e-8)
    for i in range(3):
        one = fit_one(jnp.asarray(truths[i] * GUESSES[i]), q[i])
        assert int(one.iterations) == int(batch.iterations[i]) and bool(one.converged)
        np.testing.assert_allclose(batch.params["max_isometric_force"][i], one.params["max_isometric_force"], rtol=1e-9)
        np.testing.assert_allclose(batch.loss_history[i], one.loss_history, rtol=1e-6, atol=1e-20)


@pytest.mark.slow
def test_jitted_fit_equals_the_plain_call(elbow, data):
    """``jax.jit`` around `fit_muscle_parameters` with the measurement and the initial guess traced:
    the same fit (F⁰ recovered, same iterations) as the plain call; NaN in a traced measurement is
    caught at run time with the same message as before tracing."""
    system, y0 = elbow
    truth = np.asarray(system.drive.muscles.max_isometric_force)
    q = data.trajectory.q

    def fit_one(f0, q):
        return ge.fit_muscle_parameters(with_fmax(system, f0), y0, T, q, dt0=DT, steps=100)

    jitted = jax.jit(fit_one)(jnp.asarray(truth * SCALE), q)
    plain = fit_one(jnp.asarray(truth * SCALE), q)
    assert bool(jitted.converged) and int(jitted.iterations) == int(plain.iterations)
    np.testing.assert_allclose(jitted.params["max_isometric_force"], truth, rtol=1e-6)
    np.testing.assert_allclose(jitted.z, plain.z, rtol=1e-9)
    with pytest.raises(Exception, match="q_measured contains NaN or inf"):
        jax.block_until_ready(jax.jit(fit_one)(jnp.asarray(truth * SCALE), q.at[3, 0].set(jnp.nan)).z)


# ---- through the simulator: excitation time series (slow: a reverse-mode compile) ---------------------


@pytest.mark.slow
def test_excitation_time_series_recovered_with_reverse_mode(elbow, data):
    """BICshort's excitation nodes from motion and velocities (TRIlat and BRA known), reverse mode
    through the solve (RecursiveCheckpointAdjoint); its gradient matches central differences; the
    fitted muscle forces reproduce the true force series."""
    system, y0 = elbow
    kw = dict(nodes=NODES, muscles=("BICshort",), dt0=DT, qd_weight=0.01)
    q, qd = data.trajectory.q, data.trajectory.qd  # velocities in the loss too
    res = ge.fit_excitations(system, y0, T, q, qd, initial=0.2, gradient="reverse", steps=200, **kw)
    assert res.converged
    np.testing.assert_allclose(res.params["excitation"][:, 0], TRUE_U[:, 1], atol=1e-6)
    np.testing.assert_allclose(res.trajectory.q, data.trajectory.q, atol=1e-8)
    np.testing.assert_allclose(res.forces, data.forces, rtol=0, atol=1e-5 * float(np.max(data.forces)))
    np.testing.assert_allclose(res.excitation(0.25), [0.5 * (TRUE_U[2, 1] + TRUE_U[3, 1])], atol=1e-6)
    # the fitted system keeps the other muscles' excitations
    np.testing.assert_allclose(res.system.drive.excitation(0.25), 0.5 * (TRUE_U[2] + TRUE_U[3]), atol=1e-6)

    z = jnp.log(jnp.full(4, 0.2) / 0.8)  # the initial guess: far from the optimum
    value, grad = res.objective(z)
    h = 1e-5
    fd = np.array(
        [(float(res.objective(z + h * e)[0]) - float(res.objective(z - h * e)[0])) / (2 * h) for e in np.eye(4)]
    )
    np.testing.assert_allclose(grad, fd, rtol=1e-7)
    assert float(value) > 1e-3
    # the public loss of the system built from z is the same number
    loss = ge.trajectory_loss(res.from_z(z), y0, T, q, qd, qd_weight=0.01, dt0=DT)
    assert float(loss) == pytest.approx(float(value), rel=1e-10)
