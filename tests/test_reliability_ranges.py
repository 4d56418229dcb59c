"""Issue #50, third pass: inputs out of range, half precision, a transposed moment-arm matrix.

- A. Muscle inputs (`jaxbio.muscles._inputs`): an activation or excitation outside [0, 1], a
  negative or non-finite length is a ``ValueError`` naming the argument when concrete and NaN
  under jit, for every muscle model and the activation dynamics; a musculotendon length below
  the tendon slack length is legal and the muscle never pushes (force ≥ 0).
- B. Half precision (`jaxbio._validate.check_precision`): float16 and bfloat16 inputs are refused
  by every public entry with a ``ValueError`` naming the argument and the dtype.
- C. `jaxbio.estimation.static_optimization` names ``moment_arms`` (and says it looks
  transposed) when its shape is the transpose of the layout ``tau`` and ``max_force`` imply.

The jitted functions are compiled once per module (fixtures) and reused by every example.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxbio as jb
from jaxbio.estimation import static_optimization
from jaxbio.muscles.activation import ActivationDynamics
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.fatigue import ThreeCompartmentFatigue, three_compartment_rates
from jaxbio.muscles.millard import Millard2012EquilibriumMuscle
from jaxbio.muscles.thelen import Thelen2003Muscle
from tests._models import double_pendulum_dict

PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
HALF = [jnp.float16, jnp.bfloat16]
SLACK = 0.2  # m, tendon slack length of every muscle below
PARAMETERS = dict(max_isometric_force=900.0, optimal_fiber_length=0.1, tendon_slack_length=SLACK)

#: one muscle of each model (all take ``force(activation, length, velocity)``)
MUSCLES = {
    "hill_rigid": HillMuscle(**PARAMETERS),
    "hill_compliant": HillMuscle(**PARAMETERS, tendon="compliant"),
    "thelen": Thelen2003Muscle(**PARAMETERS),
    "millard": Millard2012EquilibriumMuscle(**PARAMETERS),
}
OWNER = {
    "hill_rigid": "HillMuscle",
    "hill_compliant": "HillMuscle",
    "thelen": "Thelen2003Muscle",
    "millard": "Millard2012EquilibriumMuscle",
}
#: the models, OpenSim's (seconds to compile their equilibrium) marked slow for the property tests;
#: `test_every_model_fast` covers them in the default run
MODELS = [
    pytest.param(name, marks=pytest.mark.slow) if name in ("thelen", "millard") else name for name in sorted(MUSCLES)
]

#: activations out of [0, 1] by more than the rounding slack (10⁻⁵), and non-finite ones
OUT_OF_UNIT = st.one_of(
    st.floats(-1e6, -1e-4), st.floats(1.0001, 1e6), st.sampled_from([math.nan, math.inf, -math.inf])
)
NOT_A_LENGTH = st.one_of(st.floats(-10.0, -1e-9), st.sampled_from([math.nan, math.inf, -math.inf]))


@pytest.fixture(scope="module")
def jitted_force():
    """``force(activation, length, velocity)`` of each muscle, compiled once."""
    return {name: jax.jit(lambda a, l, v, m=m: m.force(a, l, v)) for name, m in MUSCLES.items()}


# ---- A. muscle inputs out of range ----------------------------------------------------------------


def test_issue_reproductions():
    """HillMuscle: activation 1.5 gave 1,350 N, −0.2 gave −180 N, a path shorter than the
    tendon slack length a pushing muscle (−16 N)."""
    m = MUSCLES["hill_rigid"]
    for a in (1.5, -0.2):
        with pytest.raises(ValueError, match=r"HillMuscle: activation must be finite and in \[0, 1\], got"):
            m.force(a, 0.3)
    for length in (0.15, SLACK, 0.0):
        assert float(m.force(0.5, length)[0]) == 0.0  # a slack tendon: no force
    assert float(m.force(1.0, 0.3)[0]) == pytest.approx(900.0, rel=1e-12)  # legal input: unchanged


@pytest.mark.parametrize("name", MODELS)
@PROPERTY
@given(a=OUT_OF_UNIT)
def test_activation_out_of_range_refused_or_nan(name, a, jitted_force):
    with pytest.raises(ValueError, match=f"{OWNER[name]}: activation must be finite and in"):
        MUSCLES[name].force(a, 0.3)
    assert np.isnan(np.asarray(jitted_force[name](a, 0.3, 0.0))).all()


@pytest.mark.parametrize("name", MODELS)
@PROPERTY
@given(length=NOT_A_LENGTH)
def test_bad_length_refused_or_nan(name, length, jitted_force):
    with pytest.raises(ValueError, match=f"{OWNER[name]}: musculotendon_length must be finite and in"):
        MUSCLES[name].force(0.5, length)
    assert np.isnan(np.asarray(jitted_force[name](0.5, length, 0.0))).all()


@pytest.mark.parametrize("name", MODELS)
@PROPERTY
@given(velocity=st.sampled_from([math.nan, math.inf, -math.inf]))
def test_nonfinite_velocity_refused_or_nan(name, velocity, jitted_force):
    with pytest.raises(ValueError, match=f"{OWNER[name]}: musculotendon_velocity must be finite"):
        MUSCLES[name].force(0.5, 0.3, velocity)
    assert np.isnan(np.asarray(jitted_force[name](0.5, 0.3, velocity))).all()


@pytest.mark.parametrize("name", MODELS)
@PROPERTY
@given(a=st.floats(0.0, 1.0), fraction=st.floats(0.0, 1.0), velocity=st.floats(-1.0, 1.0))
def test_muscle_never_pushes_below_slack_length(name, a, fraction, velocity, jitted_force):
    """A path no longer than the tendon slack length is legal: the muscle is slack, 0 ≤ F."""
    length = fraction * SLACK
    for force in (MUSCLES[name].force(a, length, velocity), jitted_force[name](a, length, velocity)):
        f = np.asarray(force)
        assert np.all(np.isfinite(f)) and np.all(f >= 0.0), (a, length, velocity, f)


@pytest.mark.parametrize("name", sorted(MUSCLES))
def test_every_model_fast(name):
    """Each model, one compile: a batch of bad activations, lengths and velocities gives NaN under
    jit (vmap), each of them a ValueError eagerly, and lengths below slack a force ≥ 0."""
    m = MUSCLES[name]
    bad_a = [1.5, -0.2, 1.0001, -1e-4, 1e6, math.nan, math.inf, -math.inf]
    bad_l = [-0.3, -1e-9, math.nan, math.inf]
    slack = list(np.linspace(0.0, SLACK, 6))  # at and below the tendon slack length
    legal = [0.0, 1.0, 1.0 + 1e-6, -1e-6]  # the bounds, and finite-difference probes 10⁻⁶ past them
    a = jnp.array(bad_a + [0.5] * len(bad_l) + [0.0, 1.0, 0.3, 0.7, 1.0, 0.5] + legal + [0.5])
    length = jnp.array([0.3] * len(bad_a) + bad_l + slack + [0.3] * len(legal) + [0.3])
    velocity = jnp.array([0.0] * (len(bad_a) + len(bad_l) + len(slack) + len(legal)) + [math.nan])
    force = np.asarray(jax.jit(jax.vmap(lambda a, l, v: m.force(a, l, v)))(a, length, velocity))[:, 0]
    n_bad = len(bad_a) + len(bad_l)
    assert np.isnan(force[:n_bad]).all() and np.isnan(force[-1])
    assert np.all(force[n_bad : n_bad + len(slack)] >= 0.0), force[n_bad : n_bad + len(slack)]
    eager = np.concatenate([np.asarray(m.force(x, 0.3)) for x in legal])
    np.testing.assert_allclose(force[-1 - len(legal) : -1], eager, rtol=1e-9)
    for x in bad_a:
        with pytest.raises(ValueError, match=f"{OWNER[name]}: activation must be finite and in"):
            m.force(x, 0.3)
    for x in bad_l:
        with pytest.raises(ValueError, match=f"{OWNER[name]}: musculotendon_length must be finite and in"):
            m.force(0.5, x)
    with pytest.raises(ValueError, match=f"{OWNER[name]}: musculotendon_velocity must be finite"):
        m.force(0.5, 0.3, math.nan)


@pytest.mark.parametrize("name", MODELS)
def test_gradient_inside_range_is_finite_and_nan_outside(name):
    """Derivatives through an input out of range are NaN too (not 0, not a slope)."""
    m = MUSCLES[name]
    grad = jax.jit(jax.grad(lambda a, l: m.force(a, l)[0], argnums=(0, 1)))
    inside = np.asarray(grad(0.5, 0.31))
    assert np.all(np.isfinite(inside)) and inside[0] > 0
    assert np.isnan(np.asarray(grad(1.5, 0.31))).all()
    assert np.isnan(np.asarray(grad(0.5, -0.31))).all()


def test_first_bad_entry_is_named():
    m = HillMuscle(max_isometric_force=[900.0, 500.0, 300.0], optimal_fiber_length=0.1, tendon_slack_length=SLACK)
    with pytest.raises(
        ValueError, match=r"activation must be finite and in \[0, 1\], got 2\.0 \(first at index 1; 2 out"
    ):
        m.force([0.5, 2.0, 3.0], 0.3)


@PROPERTY
@given(e=OUT_OF_UNIT)
def test_excitation_out_of_range_refused_or_nan(e):
    dyn = ActivationDynamics()
    thelen = MUSCLES["thelen"]
    with pytest.raises(ValueError, match="ActivationDynamics.rate: excitation must be finite and in"):
        dyn.rate(e, 0.5)
    with pytest.raises(ValueError, match="activation_rate: excitation must be finite and in"):
        thelen.activation_rate(e, 0.5)
    assert np.isnan(float(_jitted_rate(e, 0.5)))
    assert np.isnan(np.asarray(_jitted_opensim_rate(e, 0.5))).all()


_jitted_rate = jax.jit(lambda e, a: ActivationDynamics().rate(e, a))
_jitted_opensim_rate = jax.jit(lambda e, a: MUSCLES["millard"].activation_rate(e, a))


def test_activation_state_may_overshoot_but_not_be_nonfinite():
    """The activation *state* of the dynamics may leave [0, 1] a little (an explicit step's
    overshoot, pulled back by the dynamics): legal; NaN/inf is not."""
    dyn = ActivationDynamics()
    assert float(dyn.rate(0.0, -0.05)) > 0 and float(dyn.rate(1.0, 1.05)) < 0
    with pytest.raises(ValueError, match="ActivationDynamics.rate: activation must be finite"):
        dyn.rate(0.5, math.inf)


@PROPERTY
@given(load=OUT_OF_UNIT)
def test_fatigue_target_load_out_of_range(load):
    with pytest.raises(ValueError, match="three_compartment_rates: target_load must be finite and in"):
        three_compartment_rates(0.2, 0.8, 0.0, load, 0.01, 0.001)
    law = ThreeCompartmentFatigue(1, lambda t: jnp.full(1, load))
    with pytest.raises(ValueError, match="ThreeCompartmentFatigue: target_load must be finite and in"):
        law.load(0.0)  # was clipped into a plausible load


def test_fatigue_target_load_under_jit_is_nan():
    law = ThreeCompartmentFatigue(1, lambda t: 1.0 + t)  # leaves [0, 1] after t = 0
    rate = jax.jit(lambda t: law.rate(t, None, None, None, jnp.array([0.9, 1.0]), None, None))
    assert np.all(np.isfinite(np.asarray(rate(0.0))))
    assert np.isnan(np.asarray(rate(0.5))).all()


# ---- B. half precision, one rule for every public entry -------------------------------------------

TREE = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
SYSTEM = jb.HamiltonianSystem(TREE)
Y0 = SYSTEM.initial_state(jnp.array([0.1, -0.2]))
Z = jnp.zeros(2)
R3 = jnp.array([[0.03, 0.01], [-0.02, 0.02], [0.01, -0.03]])  # (muscles, coordinates)


def _half_state(dt):
    return {k: v.astype(dt) for k, v in Y0.items()}


def _arm26(dtype=jnp.float64):
    from jaxbio.muscles import sets

    return sets.load_muscle_set("arm26", dtype=dtype)


def _lengths(tree, paths, q):
    from jaxbio.muscles import geometry

    return geometry.lengths(paths, tree, q)


#: (entry, argument named in the error, call with half-precision input of dtype dt)
ENTRIES = [
    ("muscle path lengths", "q", lambda dt: _lengths(*_arm26()[:2], Z.astype(dt))),
    ("muscle paths of a half model", "model 'arm26'", lambda dt: _lengths(*_arm26(dt)[:2], Z)),
    ("half muscle paths", "paths", lambda dt: _lengths(_arm26()[0], _arm26(dt)[1], Z)),
    (
        "simulate",
        "simulate: y0['q']",
        lambda dt: jb.simulate(SYSTEM, _half_state(dt), 0.0, 0.1, stepsize_controller=jb.FixedGrid(2)),
    ),
    (
        "simulate_sde",
        "simulate_sde: y0['q']",
        lambda dt: jb.simulate_sde(SYSTEM, _half_state(dt), 0.0, 0.1, jax.random.key(0), 0.1, dt0=0.05),
    ),
    ("initial_state", "initial_state: q", lambda dt: SYSTEM.initial_state(Z.astype(dt))),
    ("inverse_dynamics", "qdd", lambda dt: jb.inverse_dynamics(TREE, Z, Z, Z.astype(dt))),
    ("inverse_dynamics under jit", "q", lambda dt: jax.jit(lambda q: jb.inverse_dynamics(TREE, q, Z, Z))(Z.astype(dt))),
    ("forward_dynamics", "tau", lambda dt: jb.forward_dynamics(TREE, Z, Z, Z.astype(dt))),
    ("mass_matrix", "q", lambda dt: jb.mass_matrix(TREE, Z.astype(dt))),
    ("forward_kinematics", "q", lambda dt: jb.forward_kinematics(TREE, Z.astype(dt))),
    ("half model, dynamics", "model 'double_pendulum_test'", lambda dt: jb.inverse_dynamics(TREE.astype(dt), Z, Z, Z)),
    ("half model, system", "HamiltonianSystem: model", lambda dt: jb.HamiltonianSystem(TREE.astype(dt))),
    (
        "static_optimization moment_arms",
        "moment_arms",
        lambda dt: static_optimization(R3.astype(dt), jnp.array([1.0, 0.5]), jnp.full(3, 500.0)),
    ),
    (
        "static_optimization tau",
        "tau",
        lambda dt: static_optimization(R3, jnp.array([1.0, 0.5], dt), jnp.full(3, 500.0)),
    ),
    (
        "static_optimization max_force",
        "max_force",
        lambda dt: static_optimization(R3, jnp.array([1.0, 0.5]), jnp.full(3, 500.0, dt)),
    ),
    (
        "HillMuscle parameters",
        "HillMuscle: max_isometric_force",
        lambda dt: HillMuscle(jnp.full(1, 900.0, dt), 0.1, SLACK),
    ),
    ("HillMuscle.force", "HillMuscle: activation", lambda dt: MUSCLES["hill_rigid"].force(jnp.full(1, 0.5, dt), 0.3)),
    (
        "Thelen2003Muscle parameters",
        "Thelen2003Muscle: optimal_fiber_length",
        lambda dt: Thelen2003Muscle(
            max_isometric_force=900.0, optimal_fiber_length=jnp.asarray(0.1, dt), tendon_slack_length=SLACK
        ),
    ),
    (
        "Thelen2003Muscle.force",
        "Thelen2003Muscle: musculotendon_length",
        lambda dt: MUSCLES["thelen"].force(0.5, jnp.full(1, 0.3, dt)),
    ),
    (
        "Millard2012EquilibriumMuscle.force",
        "Millard2012EquilibriumMuscle: musculotendon_velocity",
        lambda dt: MUSCLES["millard"].force(0.5, 0.3, jnp.zeros(1, dt)),
    ),
    ("ActivationDynamics", "ActivationDynamics: tau_activation", lambda dt: ActivationDynamics(jnp.asarray(0.01, dt))),
    (
        "ActivationDynamics.rate",
        "ActivationDynamics.rate: excitation",
        lambda dt: ActivationDynamics().rate(jnp.asarray(0.5, dt), 0.2),
    ),
]


@pytest.mark.parametrize("dtype", HALF, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize(("entry", "argument", "call"), ENTRIES, ids=[e[0] for e in ENTRIES])
def test_half_precision_refused_naming_argument_and_dtype(entry, argument, call, dtype):
    with pytest.raises(ValueError) as err:
        call(dtype)
    message = str(err.value)
    assert argument in message and jnp.dtype(dtype).name in message, message
    assert "float32 or" in message, message


def test_half_precision_models_still_load():
    """Storing a model in half precision stays allowed (`load_model(dtype=)`); computing needs a cast."""
    t16 = TREE.astype(jnp.float16)
    np.testing.assert_allclose(
        jb.inverse_dynamics(t16.astype(jnp.float32), Z, Z, Z),
        jb.inverse_dynamics(TREE.astype(jnp.float32), Z, Z, Z),
        rtol=1e-2,
        atol=1e-3,
    )


def test_float32_entries_still_work():
    tau = jb.inverse_dynamics(
        TREE.astype(jnp.float32), Z.astype(jnp.float32), Z.astype(jnp.float32), Z.astype(jnp.float32)
    )
    assert tau.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(tau)))
    res = static_optimization(
        R3.astype(jnp.float32), jnp.array([1.0, 0.5], jnp.float32), jnp.full(3, 500.0, jnp.float32)
    )
    assert bool(res.feasible) and res.forces.dtype == jnp.float32


@pytest.mark.parametrize("fn", ["simulate", "simulate_sde"])
def test_state_narrower_than_model_is_named(fn):
    """A float32 state with a float64 model failed inside Equinox (``buffer.at[i].set``)."""
    y32 = {k: v.astype(jnp.float32) for k, v in Y0.items()}
    with pytest.raises(ValueError, match=rf"{fn}: y0\['q'\] has dtype float32, narrower than the model's float64"):
        if fn == "simulate":
            jb.simulate(SYSTEM, y32, 0.0, 0.1, stepsize_controller=jb.FixedGrid(2))
        else:
            jb.simulate_sde(SYSTEM, y32, 0.0, 0.1, jax.random.key(0), 0.1, dt0=0.05)


# ---- C. a transposed moment-arm matrix is named -----------------------------------------------------


def test_transposed_moment_arms_reproduction():
    with pytest.raises(ValueError, match=r"moment_arms has shape \(2, 3\), expected \(3, 2\).*looks transposed"):
        static_optimization(R3.T, jnp.array([1.0, 0.5]), jnp.full(3, 500.0))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 6), n=st.integers(1, 6))
def test_transposed_moment_arms_named(m, n):
    tau, fmax = jnp.ones(n), jnp.full(m, 100.0)
    arms = jnp.full((n, m), 0.02)  # the transpose of the (m, n) layout
    if m == n:
        return  # a square transpose has the right shape: nothing to detect
    with pytest.raises(ValueError, match=rf"moment_arms has shape \({n}, {m}\), expected \({m}, {n}\).*transposed"):
        static_optimization(arms, tau, fmax)


def test_shape_errors_still_name_tau_and_max_force():
    with pytest.raises(ValueError, match=r"tau has shape \(3,\), expected \(2,\)"):
        static_optimization(R3, jnp.ones(3), jnp.full(3, 500.0))
    with pytest.raises(ValueError, match=r"max_force has shape \(2,\), expected \(3,\)"):
        static_optimization(R3, jnp.ones(2), jnp.full(2, 500.0))
    with pytest.raises(ValueError, match=r"moment_arms has shape \(3, 2\), expected \(5, 4\)"):
        static_optimization(R3, jnp.ones(4), jnp.full(5, 500.0))


@pytest.mark.slow
def test_simulation_with_excitation_out_of_range_is_not_plausible():
    """A drive whose excitation u(t) leaves [0, 1] (a traced value inside the solve): the
    trajectory is NaN (or the solve raises), never a motion driven by 150 % excitation."""
    from jaxbio.learning.controllers import agonist_antagonist

    muscles = agonist_antagonist([600.0, 300.0], [0.04, 0.03])
    drive = eqx.tree_at(lambda d: d.excitation, muscles, lambda t: jnp.full(4, 1.5))
    system = jb.HamiltonianSystem(TREE, drive)
    y0 = system.initial_state(jnp.array([0.1, -0.2]))
    try:
        tr = jb.simulate(system, y0, 0.0, 0.05, throw=False, stepsize_controller=jb.FixedGrid(4))
    except Exception:  # noqa: BLE001 (an error is one of the two allowed answers)
        return
    assert np.isnan(np.asarray(tr.q[-1])).all()
