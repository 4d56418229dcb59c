"""Issue #17, simulation part: no bad input becomes a plausible number.

Every bad span, step, save time, initial state, key or parameter length gives a ``ValueError``
naming the argument (concrete input, checked before tracing), or NaN with an unsuccessful
``result`` (traced input with ``throw=False``), or an error naming the argument (traced input
with ``throw=True``) — never a finite number, a hang or an Equinox banner. One regression test
per reproduction of the issue, then hypothesis properties over whole classes of bad input.
The jitted functions are compiled once per module and reused by every example.
"""

import math
import sys

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import jaxbio as jb
from jaxbio import hamiltonian as ham
from jaxbio.simulation import SimulationError
from tests._models import double_pendulum_dict

NONFINITE = diffrax.RESULTS.nonfinite
PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _slider(drive=None, dissipation=None):
    tree = jb.SegmentTree.from_dict(
        {
            "gravity": [0, -9.81, 0],
            "segments": [
                {
                    "name": "body",
                    "parent": None,
                    "joint": {"type": "prismatic", "axis": [1, 0, 0]},
                    "mass": 2.0,
                    "com": [0, 0, 0],
                    "inertia": [[0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]],
                }
            ],
        },
        dtype=jnp.float64,
    )
    return jb.HamiltonianSystem(
        tree, drive=drive or ham.ConstantDrive(jnp.array([3.0])), dissipation=dissipation or ham.LinearDamping(0.5)
    )


SLIDER = _slider()
Y0 = SLIDER.initial_state(jnp.zeros(1))
PENDULUM_TREE = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)


def _nan_state(y0, key="q", index=0, value=np.nan):
    return {**y0, key: y0[key].at[index].set(value)}


def _all_nan(tr):
    return all(bool(jnp.all(jnp.isnan(x))) for x in (tr.q, tr.p, tr.qd, tr.f, tr.energy))


@pytest.fixture(scope="module")
def jitted():
    """Each path compiled once: traced span and state, throw=False."""
    return {
        "grid": jax.jit(
            lambda t0, t1, y: jb.simulate(SLIDER, y, t0, t1, throw=False, stepsize_controller=jb.FixedGrid(4))
        ),
        "adaptive": jax.jit(lambda t0, t1, y: jb.simulate(SLIDER, y, t0, t1, throw=False)),
        "fixed": jax.jit(lambda t0, t1, dt0: jb.simulate(SLIDER, Y0, t0, t1, dt0=dt0, throw=False)),
        "ts": jax.jit(lambda ts: jb.simulate(SLIDER, Y0, 0.0, 1.0, ts=ts, throw=False)),
    }


# ---- the reproductions ------------------------------------------------------------------


def test_nan_end_time_is_refused():
    """#5: simulate(system, y0, 0., nan) returned y0 with a successful result."""
    with pytest.raises(ValueError, match=r"simulate: t1 must be finite \(got t1=nan\)"):
        jb.simulate(SLIDER, Y0, 0.0, float("nan"))


def test_backward_span_under_jit_is_not_integrated(jitted):
    """#5: jax.jit(lambda a, b: simulate(system, y0, a, b))(2., 0.) integrated backwards, successfully."""
    with pytest.raises(Exception, match="t1 must be greater than t0"):
        jax.jit(lambda a, b: jb.simulate(SLIDER, Y0, a, b).q)(2.0, 0.0)
    tr = jitted["adaptive"](2.0, 0.0, Y0)
    assert tr.result == NONFINITE and _all_nan(tr)
    assert int(tr.solution.stats["num_steps"]) == 0
    tr = jitted["grid"](2.0, 0.0, Y0)
    assert tr.result == NONFINITE and _all_nan(tr)


def test_sde_zero_step_is_refused_before_running():
    """#10: simulate_sde(..., dt0=0.) hung (> 15 min, not interruptible): refused before anything runs."""
    system = jb.HamiltonianSystem(PENDULUM_TREE)
    y0 = system.initial_state(jnp.array([0.3, -0.8]))
    key, noise = jax.random.PRNGKey(0), jnp.array([0.1, 0.1])
    for dt0 in (0.0, -0.01, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="simulate_sde: dt0 must be positive and finite"):
            jb.simulate_sde(system, y0, 0.0, 1.0, key, noise, dt0=dt0)
    with pytest.raises(ValueError, match=r"simulate_sde: dt0 is too small.*max_steps=1000000"):
        jb.simulate_sde(system, y0, 0.0, 1.0, key, noise, dt0=1e-9)


@pytest.mark.slow
def test_sde_zero_step_under_jit_does_not_hang():
    """#10 with a traced dt0: the Brownian tree would refine forever; the solve is zero-length and
    NaN instead. Run in a subprocess with a timeout, so a regression fails instead of hanging."""
    import subprocess
    import sys

    code = (
        "import jax, jax.numpy as jnp\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "import jaxbio as jb\n"
        "from tests._models import double_pendulum_dict\n"
        "s = jb.HamiltonianSystem(jb.SegmentTree.from_dict(double_pendulum_dict()))\n"
        "y0 = s.initial_state(jnp.array([0.3, -0.8]))\n"
        "f = jax.jit(lambda d: jb.simulate_sde(s, y0, 0., 1., jax.random.PRNGKey(0), jnp.array([.1, .1]),"
        " dt0=d, throw=False))\n"
        "for d in (0.0, -1.0, float('nan')):\n"
        "    tr = f(d)\n"
        "    assert bool(jnp.all(jnp.isnan(tr.q))) and tr.result == jb.simulation.diffrax.RESULTS.nonfinite\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(__import__("tests._models", fromlist=["REPO"]).REPO),
    )
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_nan_initial_state(jitted):
    """#13: a NaN initial state ran ~100k steps and said "increase max_steps"."""
    with pytest.raises(ValueError, match=r"simulate: y0\['q'\] contains NaN or inf \(first at index 0\)"):
        jb.simulate(SLIDER, _nan_state(Y0), 0.0, 1.0)
    with pytest.raises(ValueError, match=r"y0\['f'\] contains NaN or inf"):
        jb.simulate(SLIDER, _nan_state(Y0, "f", value=np.inf), 0.0, 1.0, stepsize_controller=jb.FixedGrid(3))
    # traced: stops at once (no step), NaN out, an unsuccessful result
    tr = jitted["adaptive"](0.0, 1.0, _nan_state(Y0))
    assert tr.result == NONFINITE and _all_nan(tr)
    assert int(tr.solution.stats["num_steps"]) == 0
    # traced with throw=True: an error naming the key
    with pytest.raises(Exception, match=r"simulate: y0\['p'\] contains NaN or inf"):
        jax.jit(lambda y: jb.simulate(SLIDER, y, 0.0, 1.0).q)(_nan_state(Y0, "p"))
    # under vmap only the bad sample is NaN
    batch = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), Y0, _nan_state(Y0))
    tr = jax.vmap(lambda y: jitted["adaptive"](0.0, 1.0, y))(batch)
    assert bool(jnp.all(jnp.isfinite(tr.q[0]))) and bool(jnp.all(jnp.isnan(tr.q[1])))


@pytest.mark.slow
def test_state_that_turns_nan_stops_the_solve_promptly():
    """A vector field that turns NaN at t = 0.5: the adaptive solve shrank its step until
    max_steps (100k steps); now it stops within a few hundred with RESULTS.nonfinite."""
    system = jb.HamiltonianSystem(
        PENDULUM_TREE, drive=ham.TimeFunctionDrive(lambda t: jnp.where(t > 0.5, jnp.nan, 0.0))
    )
    y0 = system.initial_state(jnp.array([0.3, -0.8]))
    ts = jnp.linspace(0.0, 1.0, 5)
    for kw in ({}, {"dt0": 0.01}):
        tr = jb.simulate(system, y0, 0.0, 1.0, ts=ts, throw=False, **kw)
        assert tr.result == NONFINITE
        assert int(tr.solution.stats["num_steps"]) < 1000
        assert bool(jnp.all(jnp.isfinite(tr.q[:2]))) and bool(jnp.all(jnp.isnan(tr.q[3:])))
        with pytest.raises(SimulationError, match=r"last time saved: t=0\.(25|5)\).*state became NaN or inf"):
            jb.simulate(system, y0, 0.0, 1.0, ts=ts, **kw)  # the same compiled solve, throw=True
    tr = jb.simulate(
        system, y0, 0.0, 1.0, throw=False, stepsize_controller=jb.FixedGrid(20)
    )  # fixed grid: NaN rows, nonfinite
    assert tr.result == NONFINITE and bool(jnp.all(jnp.isnan(tr.q[-1]))) and bool(jnp.all(jnp.isfinite(tr.q[0])))


@pytest.mark.slow
def test_failures_outside_jit_are_one_plain_error():
    """#14: errors arrived wrapped in a runtime error with an Equinox banner; now a SimulationError
    (a RuntimeError) whose message is one sentence naming the argument to change."""
    with pytest.raises(SimulationError) as info:
        jb.simulate(
            jb.HamiltonianSystem(PENDULUM_TREE),
            {"q": jnp.array([0.3, -0.8]), "p": jnp.array([1.0, 2.0]), "f": jnp.ones(1)},
            0.0,
            100.0,
            max_steps=10,
        )
    message = str(info.value)
    assert message.startswith("simulate: the solve failed (last time saved: t=") and "max_steps=10" in message
    assert "EQX_ON_ERROR" not in message and "equinox" not in message.lower()
    # throw=False: the result says it, and the state the solve did not reach is NaN (not the last one reached)
    tr = jb.simulate(
        jb.HamiltonianSystem(PENDULUM_TREE),
        {"q": jnp.array([0.3, -0.8]), "p": jnp.array([1.0, 2.0]), "f": jnp.ones(1)},
        0.0,
        100.0,
        max_steps=10,
        throw=False,
    )
    assert tr.result == diffrax.RESULTS.max_steps_reached
    assert float(tr.ts[-1]) < 100.0 and _all_nan(tr)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ham.ConstantDrive(jnp.ones(3)), r"drive ConstantDrive: tau has shape \(3,\), expected \(2,\)"),
        (
            lambda: ham.SpringDamperDrive(jnp.ones(2), damping=jnp.ones(1)),
            r"drive SpringDamperDrive: damping has shape \(1,\)",
        ),
        (lambda: ham.SpringDamperDrive(1.0, rest=jnp.zeros(4)), r"drive SpringDamperDrive: rest has shape \(4,\)"),
        (
            lambda: ham.FirstOrderActuator(jnp.ones(3), 0.1, lambda t: 1.0),
            r"drive FirstOrderActuator: gain has shape \(3,\)",
        ),
        (
            lambda: ham.LinearDamping(jnp.ones(3)),
            r"dissipation LinearDamping: coefficients has shape \(3,\), expected \(2,\)",
        ),
        (lambda: ham.QuadraticDrag(0.1, wind=jnp.zeros(1)), r"dissipation QuadraticDrag: wind has shape \(1,\)"),
        (
            lambda: ham.SumDissipation(ham.LinearDamping(1.0), ham.QuadraticDrag(jnp.ones(5))),
            r"dissipation QuadraticDrag: coefficients has shape \(5,\)",
        ),
    ],
)
def test_wrong_length_parameters_are_refused_by_the_system(make, match):
    """#14: wrong-length LinearDamping/ConstantDrive gave broadcasting errors that did not name
    the argument (and a length-1 array broadcast silently into a plausible force)."""
    component = make()
    role = "drive" if isinstance(component, ham.Drive) else "dissipation"
    with pytest.raises(ValueError, match=r"HamiltonianSystem: " + match + r".*the tree has 2 velocity coordinates"):
        jb.HamiltonianSystem(PENDULUM_TREE, **{role: component})


def test_component_construction_and_output_shapes():
    with pytest.raises(ValueError, match=r"LinearDamping: coefficients must be a scalar or a vector"):
        ham.LinearDamping(jnp.ones((2, 2)))
    with pytest.raises(ValueError, match=r"PowerDepletion: depletion must be a scalar"):
        ham.PowerDepletion(jnp.ones(2))
    with pytest.raises(ValueError, match=r"ReserveFitness: capacity must be a scalar"):
        ham.ReserveFitness(jnp.ones(3))
    with pytest.raises(ValueError, match=r"FirstOrderActuator: time_constant has shape \(3,\)"):
        ham.FirstOrderActuator(jnp.ones(2), jnp.ones(3), lambda t: 1.0)
    with pytest.raises(ValueError, match=r"ConstantDrive: tau must be finite"):
        ham.ConstantDrive(jnp.array([1.0, np.nan]))
    with pytest.raises(ValueError, match=r"HamiltonianSystem: dissipation must be a jaxbio.hamiltonian.Dissipation"):
        jb.HamiltonianSystem(PENDULUM_TREE, dissipation=0.1)
    y0 = jb.HamiltonianSystem(PENDULUM_TREE).initial_state(jnp.zeros(2))
    # a time function of the wrong length would have broadcast; it is refused while tracing
    wrong = jb.HamiltonianSystem(PENDULUM_TREE, drive=ham.TimeFunctionDrive(lambda t: jnp.ones(3)))
    with pytest.raises(ValueError, match=r"TimeFunctionDrive: fn\(t\) returns shape \(3,\), expected \(2,\)"):
        jb.simulate(wrong, y0, 0.0, 1.0, stepsize_controller=jb.FixedGrid(2))

    class OneForce(ham.Drive):  # a user drive returning one force for two coordinates
        def __call__(self, t, q, qd, f, a=None):
            return jnp.ones(1)

    with pytest.raises(ValueError, match=r"HamiltonianSystem: drive OneForce returned shape \(1,\), expected \(2,\)"):
        jb.simulate(
            jb.HamiltonianSystem(PENDULUM_TREE, drive=OneForce()), y0, 0.0, 1.0, stepsize_controller=jb.FixedGrid(2)
        )
    system = jb.HamiltonianSystem(PENDULUM_TREE)
    with pytest.raises(ValueError, match=r"initial_state: q contains NaN or inf \(first at index 1\)"):
        system.initial_state(jnp.array([0.0, np.inf]))
    with pytest.raises(ValueError, match=r"initial_state: f has shape \(3,\), expected \(1,\)"):
        system.initial_state(jnp.zeros(2), f=jnp.ones(3))


@pytest.mark.slow
def test_other_argument_checks():
    with pytest.raises(ValueError, match=r"simulate: t1 must be a real scalar, got shape \(1,\)"):
        jb.simulate(SLIDER, Y0, 0.0, jnp.ones(1))
    with pytest.raises(ValueError, match=r"simulate: t0 must be real numbers"):
        jb.simulate(SLIDER, Y0, "0", 1.0)
    with pytest.raises(ValueError, match=r"simulate: max_steps must be a \(static\) int ≥ 1"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, max_steps=None)
    with pytest.raises(ValueError, match=r"simulate: rtol and atol must not both be 0"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, rtol=0.0, atol=0.0)
    with pytest.raises(ValueError, match=r"simulate: atol must be finite and ≥ 0"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, atol=-1e-8)
    with pytest.raises(
        ValueError, match=r"simulate: dt0 is too small: \(t1 - t0\)/dt0 fixed steps exceed max_steps=10"
    ):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, dt0=0.01, max_steps=10)
    with pytest.raises(ValueError, match=r"simulate: give saveat or ts/dense, not both"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, ts=jnp.ones(1), saveat=diffrax.SaveAt(t1=True))
    with pytest.raises(ValueError, match=r"simulate: saveat.ts must lie in \[t0, t1\]"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, saveat=diffrax.SaveAt(ts=jnp.array([0.5, 2.0])))
    with pytest.raises(ValueError, match=r"simulate: y0 must be a dict with keys \['f', 'p', 'q'\]"):
        jb.simulate(SLIDER, (Y0["q"], Y0["p"]), 0.0, 1.0)
    with pytest.raises(ValueError, match=r"simulate_sde: key must be one PRNG key"):
        jb.simulate_sde(SLIDER, Y0, 0.0, 1.0, 0, jnp.ones(1), dt0=0.01)
    with pytest.raises(ValueError, match=r"simulate_sde: key must be one PRNG key"):
        jb.simulate_sde(SLIDER, Y0, 0.0, 1.0, jax.random.split(jax.random.PRNGKey(0), 3), jnp.ones(1), dt0=0.01)
    with pytest.raises(ValueError, match=r"simulate_sde: noise must be finite"):
        jb.simulate_sde(SLIDER, Y0, 0.0, 1.0, jax.random.key(0), jnp.array([np.nan]), dt0=0.01)
    with pytest.raises(ValueError, match=r"simulate_sde: noise has shape \(2,\), expected \(1,\) or \(1, 1\)"):
        jb.simulate_sde(SLIDER, Y0, 0.0, 1.0, jax.random.key(0), jnp.ones(2), dt0=0.01)
    # a good SDE call still runs (typed key)
    tr = jb.simulate_sde(SLIDER, Y0, 0.0, 0.1, jax.random.key(0), jnp.ones(1), dt0=0.01)
    assert tr.result == diffrax.RESULTS.successful and bool(jnp.all(jnp.isfinite(tr.q)))


# ---- properties ---------------------------------------------------------------------------------

_specials = st.sampled_from([math.nan, math.inf, -math.inf])
_times = st.one_of(st.floats(-10.0, 10.0, allow_nan=False), _specials)


@PROPERTY
@given(t0=_times, t1=_times)
def test_property_spans(jitted, t0, t1):
    """Any (t0, t1): a good span runs and is finite; a bad one is refused naming t0/t1 (concrete)
    or gives NaN with RESULTS.nonfinite (traced, throw=False)."""
    good = math.isfinite(t0) and math.isfinite(t1) and t1 - t0 >= sys.float_info.min  # a normal span
    assume(not good or t1 - t0 < 5.0)
    traced = jitted["grid"](t0, t1, Y0)
    if good:
        tr = jb.simulate(SLIDER, Y0, t0, t1, stepsize_controller=jb.FixedGrid(4))
        assert bool(jnp.all(jnp.isfinite(tr.q))) and tr.result == diffrax.RESULTS.successful
        np.testing.assert_allclose(traced.q, tr.q, rtol=1e-10, atol=1e-12)
        return
    with pytest.raises(ValueError, match=r"simulate: t[01] must be (finite|greater than t0)"):
        jb.simulate(SLIDER, Y0, t0, t1, stepsize_controller=jb.FixedGrid(4))
    assert traced.result == NONFINITE and _all_nan(traced) and bool(jnp.all(jnp.isnan(traced.ts)))


@PROPERTY
@given(dt0=st.one_of(st.floats(-1.0, 0.0), st.floats(1e-12, 1e-6), _specials))
def test_property_fixed_steps(jitted, dt0):
    """dt0 ≤ 0, NaN, inf, or so small that (t1 − t0)/dt0 exceeds max_steps: refused up front."""
    with pytest.raises(ValueError, match=r"simulate: dt0 (must be positive and finite|is too small)"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, dt0=dt0)
    tr = jitted["fixed"](0.0, 1.0, dt0)
    assert tr.result == NONFINITE and _all_nan(tr) and int(tr.solution.stats["num_steps"]) == 0


@PROPERTY
@given(steps=st.one_of(st.integers(-5, 0), st.booleans(), st.floats(0.5, 50.0), st.none().map(lambda _: "10")))
def test_property_step_counts(steps):
    with pytest.raises(ValueError, match=r"FixedGrid: steps must be a \(static\) int ≥ 1"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, stepsize_controller=jb.FixedGrid(steps))


@PROPERTY
@given(key=st.sampled_from(["q", "p", "f"]), value=_specials, traced=st.booleans())
def test_property_nonfinite_initial_state(jitted, key, value, traced):
    y0 = _nan_state(Y0, key, 0, value)
    if not traced:
        with pytest.raises(ValueError, match=rf"simulate: y0\['{key}'\] contains NaN or inf \(first at index 0\)"):
            jb.simulate(SLIDER, y0, 0.0, 1.0)
        return
    for path in ("adaptive", "grid"):
        tr = jitted[path](0.0, 1.0, y0)
        assert tr.result == NONFINITE and _all_nan(tr)


@PROPERTY
@given(
    drop=st.sampled_from(["q", "p", "f", None]),
    extra=st.sampled_from([None, "a", "x"]),
    shape=st.sampled_from([(), (2,), (1, 1), (3,)]),
    key=st.sampled_from(["q", "p", "f"]),
)
def test_property_malformed_initial_state(drop, extra, shape, key):
    """Missing or extra keys, and leaves of the wrong shape, are named."""
    y0 = {k: v for k, v in Y0.items() if k != drop}
    if extra is not None:
        y0[extra] = jnp.zeros(1)
    if drop is not None or extra is not None:
        with pytest.raises(ValueError, match=r"simulate: y0 must be a dict with keys"):
            jb.simulate(SLIDER, y0, 0.0, 1.0)
        return
    y0[key] = jnp.zeros(shape)
    with pytest.raises(ValueError, match=rf"simulate: y0\['{key}'\] has shape"):
        jb.simulate(SLIDER, y0, 0.0, 1.0)


@PROPERTY
@given(ts=st.lists(st.one_of(st.floats(-2.0, 3.0, allow_nan=False), _specials), min_size=2, max_size=2))
def test_property_save_times(jitted, ts):
    """Save times must be finite, strictly increasing and inside [t0, t1] = [0, 1]."""
    ts = np.asarray(ts)
    good = bool(np.all(np.isfinite(ts)) and ts[1] > ts[0] and ts[0] >= 0.0 and ts[1] <= 1.0)
    tr = jitted["ts"](jnp.asarray(ts))
    if good:
        assert bool(jnp.all(jnp.isfinite(tr.q))) and tr.result == diffrax.RESULTS.successful
        return
    with pytest.raises(ValueError, match=r"simulate: ts must (be finite|be strictly increasing|lie in \[t0, t1\])"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, ts=ts)
    assert tr.result == NONFINITE and _all_nan(tr)


@PROPERTY
@given(length=st.integers(0, 6), which=st.sampled_from(["tau", "stiffness", "damping", "coefficients", "wind"]))
def test_property_parameter_lengths(length, which):
    """A per-coordinate parameter of any length but the tree's 2 (or a scalar) is refused by the system."""
    value = jnp.ones(length)
    make = {
        "tau": lambda: {"drive": ham.ConstantDrive(value)},
        "stiffness": lambda: {"drive": ham.SpringDamperDrive(value)},
        "damping": lambda: {"drive": ham.SpringDamperDrive(1.0, damping=value)},
        "coefficients": lambda: {"dissipation": ham.LinearDamping(value)},
        "wind": lambda: {"dissipation": ham.QuadraticDrag(1.0, wind=value)},
    }[which]
    if length == 2:
        jb.HamiltonianSystem(PENDULUM_TREE, **make())
        return
    with pytest.raises(
        ValueError, match=rf"HamiltonianSystem: \w+ \w+: {which} has shape \({length},\), expected \(2,\)"
    ):
        jb.HamiltonianSystem(PENDULUM_TREE, **make())


def test_events_and_argument_kinds():
    """An event index out of range would be clamped by JAX indexing into another coordinate."""
    with pytest.raises(ValueError, match=r"stop_when: y\['q'\] has no entry 3"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, event=jb.simulation.stop_when(3, 1.0))
    with pytest.raises(ValueError, match=r"stop_when: value must be finite"):
        jb.simulation.stop_when(0, float("nan"))
    with pytest.raises(ValueError, match=r"stop_when: coordinate must be one of"):
        jb.simulation.stop_when(0, 1.0, coordinate="v")
    with pytest.raises(ValueError, match=r"simulate: solver must be a diffrax.AbstractSolver, got str"):
        jb.simulate(SLIDER, Y0, 0.0, 1.0, solver="tsit5")
    with pytest.raises(ValueError, match=r"simulate: system must be a jaxbio.HamiltonianSystem"):
        jb.simulate(SLIDER.tree, Y0, 0.0, 1.0)


def test_a_subnormal_span_is_refused_as_under_jit(jitted):
    """t0 = −2.2e-313, t1 = 0: XLA on the CPU flushes the subnormal t0 to 0, so under jit the span
    is empty (NaN, RESULTS.nonfinite); eagerly the same span is refused, naming t1 and t0."""
    traced = jitted["grid"](-2.2250738585e-313, 0.0, Y0)
    assert np.all(np.isnan(traced.q)) and traced.result == diffrax.RESULTS.nonfinite
    with pytest.raises(ValueError, match="t1 must be greater than t0"):
        jb.simulate(SLIDER, Y0, -2.2250738585e-313, 0.0, stepsize_controller=jb.FixedGrid(4))
    jb.simulate(
        SLIDER, Y0, -2.2250738585072014e-308, 0.0, stepsize_controller=jb.FixedGrid(4)
    )  # the smallest normal span runs
