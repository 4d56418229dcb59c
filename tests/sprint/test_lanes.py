"""The Levenberg–Marquardt solves run through a few lanes with refills (``_solve.lm_lanes``, the
large batches' path of ``fitting.fit_splits``) against one vmapped loop (``_solve.least_squares``,
the second method), and against the closed-form optimum of Rosenbrock's least-squares problem."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio.sprint as sprint
from jaxbio.sprint._solve import least_squares, lm_init, lm_lanes, lm_result, lm_resume
from jaxbio.sprint.fitting import fit_splits
from jaxbio.sprint.model import DEFAULTS, FREE

D10 = np.arange(10.0, 101.0, 10.0)


def _rosenbrock(t, a):
    """Residuals ``(a (y − x²), 1 − x)``: the minimum 0 at (1, 1) for every ``a`` > 0."""
    return jnp.array([a * (t[1] - t[0] ** 2), 1.0 - t[0]]), dict(x=t[0], a=a)


@pytest.mark.parametrize("full_share, lane_price", [(0.35, None), (1.0, None), (0.35, 0.0), (0.35, np.inf)])
def test_lanes_equal_one_vmapped_loop_problem_by_problem(full_share, lane_price):
    """37 problems of different difficulty (steps 3 to the cap) through 8 lanes in rounds of 3
    iterations, after full-width rounds while more than ``full_share`` are unfinished (1.0: lanes
    from the start), the stragglers in full-width rounds until they cost ``lane_price`` (0: lanes
    at once; inf: never): every problem's result, iteration count and status equal those of one
    vmapped ``least_squares`` — a problem's state written back to another's row would not."""
    rng = np.random.default_rng(0)
    N, cap = 37, 40
    a = rng.uniform(1.0, 100.0, N)
    starts = np.column_stack([rng.uniform(-2.0, 2.0, N), rng.uniform(-1.0, 3.0, N)])
    starts[0] = [1.0 + 1e-9, 1.0]  # all but solved
    ref = jax.jit(jax.vmap(lambda t0, a_: least_squares(_rosenbrock, t0, a_, max_steps=cap)))(starts, a)
    round_fn = jax.jit(jax.vmap(lambda st, a_, lim: lm_resume(_rosenbrock, st, a_, lim)))
    state = jax.vmap(lambda t0, a_: lm_init(_rosenbrock, t0, a_))(jnp.asarray(starts), jnp.asarray(a))
    final = lm_lanes(
        round_fn, state, a, max_steps=cap, width=8, round_steps=3, full_share=full_share, lane_price=lane_price
    )
    got = jax.vmap(lm_result)(jax.tree_util.tree_map(jnp.asarray, final))
    theta, r, J, aux, ok, steps = (jax.tree_util.tree_map(np.asarray, x) for x in got)
    np.testing.assert_array_equal(steps, np.asarray(ref[5]))
    np.testing.assert_array_equal(ok, np.asarray(ref[4]))
    np.testing.assert_allclose(theta, np.asarray(ref[0]), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(J, np.asarray(ref[2]), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(np.asarray(aux["a"]), a)  # each row's own problem
    assert steps.min() <= 3 and steps.max() >= 20  # a mix of easy and hard problems, refilled lanes
    conv = ok & (steps < cap)
    assert conv.sum() >= N // 2
    # the closed-form optimum (1, 1), to the solver's tolerance on the cost (decrement ≤ 1e-8)
    assert np.all(0.5 * np.sum(r[conv] ** 2, axis=1) < 1e-7)
    np.testing.assert_allclose(theta[conv], 1.0, atol=1e-3)


def test_stragglers_rent_full_rounds_until_the_lanes_are_bought():
    """The ski-rental rule between full-width rounds and a lane program: with a price of 0 the
    tail goes to the lanes at once, with an infinite price it stays in full-width rounds, and
    once a ``program``'s lanes were bought a later call uses them whatever the price."""
    rng = np.random.default_rng(1)
    N, cap = 24, 40
    a = rng.uniform(1.0, 100.0, N)
    starts = np.column_stack([rng.uniform(-2.0, 2.0, N), rng.uniform(-1.0, 3.0, N)])
    jitted = jax.jit(jax.vmap(lambda st, a_, lim: lm_resume(_rosenbrock, st, a_, lim)))
    state = jax.vmap(lambda t0, a_: lm_init(_rosenbrock, t0, a_))(jnp.asarray(starts), jnp.asarray(a))

    def widths(**kw):
        seen = []

        def round_fn(st, a_, lim):
            seen.append(lim.shape[0])
            return jitted(st, a_, lim)

        lm_lanes(round_fn, state, a, max_steps=cap, width=4, round_steps=3, full_share=0.5, **kw)
        return seen

    program, another = object(), object()  # names no other call's program
    never = widths(lane_price=np.inf, program=program)
    assert set(never) == {N}  # stragglers in full rounds only
    at_once = widths(lane_price=0.0, program=program)
    assert at_once[-1] == 4 and at_once.count(N) < len(never)
    assert widths(lane_price=np.inf, program=program) == at_once  # bought: lanes from now on
    assert set(widths(lane_price=np.inf, program=another)) == {N}


@pytest.fixture(scope="module")
def batch():
    """12 synthetic races (the model's own split times, rounded), some made hard to fit: a first
    split 0.1 s late, a last split 0.15 s late."""
    rng = np.random.default_rng(5)
    n = 12
    base = sprint.Sprinter()
    truth = np.log([DEFAULTS[k] for k in FREE])[None] + rng.normal(0.0, 0.05, (n, len(FREE)))
    rt, wind = rng.uniform(0.12, 0.18, n), rng.uniform(-1.0, 1.5, n)
    times = jax.jit(jax.vmap(lambda th, r, w: sprint.split_times(base.with_log(FREE, th), D10, r, w, 14.0)))(
        jnp.asarray(truth), jnp.asarray(rt), jnp.asarray(wind)
    )
    times = np.round(np.asarray(times), 2)
    times[::4, 0] += 0.10
    times[1::4, -1] += 0.15
    return sprint.Splits.from_arrays([D10] * n, list(times), rt, wind)


def test_fit_in_lanes_equals_one_vmapped_call(batch):
    """``fit_splits`` through 8 lanes (12 races × 4 starts = 48 solves, refilled) gives every race
    the parameters, cost, steps and profile of the one vmapped call."""
    one = fit_splits(batch, lanes=False, quick_compile=True, n_grid=21)
    lanes = fit_splits(batch, lanes=8, quick_compile=True, n_grid=21)
    assert np.ptp(one.theta[:, 0]) > 1e-2 and len(set(one.steps.tolist())) > 1  # races differ
    np.testing.assert_allclose(lanes.theta, one.theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(lanes.cost, one.cost, rtol=1e-9)
    np.testing.assert_array_equal(lanes.steps, one.steps)
    np.testing.assert_array_equal(lanes.converged, one.converged)
    np.testing.assert_allclose(lanes.profile["v"], one.profile["v"], rtol=1e-9)


@pytest.mark.slow
def test_model_choice_in_lanes_equals_one_vmapped_loop():
    """``selection.fit_selected`` (base fit, candidates and — forced by an unreachable baseline —
    the escalation's wider models, up to 200 steps) through 16 lanes chooses the same model for
    every noisy variant of the embedded races, with the same parameters, as one vmapped loop (to
    1e-6 relative: XLA's code for another batch width may round differently, which moves a
    converged parameter within the solver's tolerance, ~1e-8 relative here)."""
    from tests.sprint.test_selection import _noisy_variants

    from jaxbio.sprint import selection

    races = _noisy_variants()[:12]
    bound = [np.full(len(races), 1e-4)]
    one = selection.fit_selected(races, baselines=bound, lanes=False)
    lanes = selection.fit_selected(races, baselines=bound, lanes=16)
    assert all(len(s["candidates"]) == len(selection.CANDIDATES) + len(selection.ESCALATION) for s in lanes.selection)
    assert [s["freed"] for s in lanes.selection] == [s["freed"] for s in one.selection]
    assert len({tuple(s["freed"]) for s in one.selection}) > 1  # different races, different choices
    np.testing.assert_allclose(lanes.theta, one.theta, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(lanes.rmse, one.rmse, rtol=1e-6)


@pytest.mark.parametrize("lanes", [1, -3, 2.5, "many"])
def test_bad_lanes_are_refused_by_name(lanes):
    race = sprint.embedded_races()[0]
    with pytest.raises(ValueError, match="fit_splits: lanes"):
        fit_splits([race], lanes=lanes)
