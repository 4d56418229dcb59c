"""Issue #17 for the rigid-body dynamics: no bad input becomes a plausible number.

Every public entry point, for every state argument: a wrong shape or a concrete NaN/inf is a
``ValueError`` naming the argument (before tracing); a traced NaN/inf reaches every output that
depends on it (dependence measured independently, by finite differences of the same compiled
function at a finite state) and no other state of a batch; ``jax.vmap`` over 0 states gives the
unbatched call's shapes with a leading 0. Tracing ``jit(vmap(inverse_dynamics))`` of a
1,000-segment chain (minutes before the schedule fix) is a slow test that checks the result.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxbio as jb
from jaxbio._topology import levels
from jaxbio.dynamics import _levels
from tests._models import random_model_dict
from tests.dynamics.test_batched_inverse_dynamics import check_schedule

TREE = jb.load_model("arm7", dtype=jnp.float64).tree
N = TREE.nq

#: name -> (function, its state arguments); every public dynamics function of one state
ENTRIES = {
    "inverse_dynamics": (jb.inverse_dynamics, ("q", "qd", "qdd")),
    "segment_wrenches": (jb.segment_wrenches, ("q", "qd", "qdd")),
    "mass_matrix": (jb.mass_matrix, ("q",)),
    "bias_forces": (jb.bias_forces, ("q", "qd")),
    "gravity_forces": (jb.gravity_forces, ("q",)),
    "forward_dynamics": (jb.forward_dynamics, ("q", "qd", "tau")),
    "kinetic_energy": (jb.kinetic_energy, ("q", "qd")),
    "kinetic_energy_gradient": (jb.dynamics.kinetic_energy_gradient, ("q", "qd")),
    "potential_energy": (jb.potential_energy, ("q",)),
    "center_of_mass": (jb.center_of_mass, ("q",)),
    "forward_kinematics": (jb.forward_kinematics, ("q",)),
}
#: the ones whose jax.vmap runs a batch-last kernel (jaxbio.dynamics.batch_last)
KERNELS = ("inverse_dynamics", "mass_matrix", "kinetic_energy_gradient", "bias_forces", "gravity_forces")


def one_segment_tree():
    d = random_model_dict(np.random.default_rng(4), 1)
    return jb.SegmentTree.from_dict(d, dtype=jnp.float64)


def base_state(n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.5, 1.5, n) for _ in range(k)]


def flat(out) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(out)])


# ---- empty batches --------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ENTRIES))
@pytest.mark.parametrize("tree_name", ["arm7", "one_segment"])
def test_vmap_over_zero_states_gives_empty_results(name, tree_name):
    """Issue #17, defect 11: ``vmap`` over 0 states crashed deep in `_batched`. The shapes are the
    unbatched call's (`jax.eval_shape`) with a leading 0, under vmap and jit(vmap)."""
    tree = TREE if tree_name == "arm7" else one_segment_tree()
    fn, args = ENTRIES[name]
    n = tree.nq
    want = jax.eval_shape(fn, tree, *[jnp.zeros(n)] * len(args))
    batched = jax.vmap(fn, in_axes=(None,) + (0,) * len(args))
    for f in (batched, jax.jit(batched)):
        got = f(tree, *[jnp.zeros((0, n))] * len(args))
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert g.shape == (0,) + w.shape and g.dtype == w.dtype


def test_empty_batches_external_nested_and_gradients():
    z = jnp.zeros((0, N))
    ext = (jnp.zeros((0, N, 3)), jnp.zeros((0, N, 3)))
    tau = jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0, 0))(TREE, z, z, z, ext)
    assert tau.shape == (0, N)
    # nested vmap with an empty inner or outer axis
    nested = jax.vmap(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)), in_axes=(None, 0, 0, 0))
    assert nested(TREE, *[jnp.zeros((3, 0, N))] * 3).shape == (3, 0, N)
    assert nested(TREE, *[jnp.zeros((0, 3, N))] * 3).shape == (0, 3, N)
    # a gradient through an empty batch is an empty gradient
    g = jax.grad(lambda q: jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0))(TREE, q, q, q).sum())(z)
    assert g.shape == (0, N)
    # the kernels themselves
    from jaxbio.dynamics.batch_last import inverse_dynamics_batch, mass_matrix_batch

    assert inverse_dynamics_batch(TREE, z, z, z).shape == (0, N)
    assert mass_matrix_batch(TREE, z).shape == (0, N, N)


def test_checked_entry_points_still_compose_with_jit_vmap_and_lower():
    """The before-tracing checks wrap the jitted functions: ``jit(vmap(f)).lower`` (what the
    benchmarks time) must lower the batched function, and the docstring must survive."""
    q = jnp.zeros((4, N))
    f = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))
    assert f.lower(TREE, q, q, q).compile()(TREE, q, q, q).shape == (4, N)
    assert "wrench recursion" in jb.inverse_dynamics.__doc__
    assert jax.jit(jb.mass_matrix).lower(TREE, q[0]).compile()(TREE, q[0]).shape == (N, N)


@pytest.mark.slow
def test_motion_functions_with_zero_frames():
    """The ``*_motion`` functions run inverse dynamics under vmap: with T = 0 frames they crashed in
    `_batched`; now their results are empty, with one frame's shapes behind the 0."""
    from jaxbio.estimation import inverse_simulate_motion
    from jaxbio.papers.blajer_body import sagittal11_muscle_model

    model = sagittal11_muscle_model()
    n = model.tree.nq
    one = inverse_simulate_motion(model, *[jnp.zeros((1, n))] * 3)
    empty = inverse_simulate_motion(model, *[jnp.zeros((0, n))] * 3)
    for got, want in zip(jax.tree_util.tree_leaves(empty), jax.tree_util.tree_leaves(one)):
        assert got.shape == (0,) + want.shape[1:]


# ---- shapes and concrete NaN/inf: ValueError naming the argument, before tracing -------------


@pytest.mark.parametrize("name", list(ENTRIES))
def test_wrong_shapes_name_the_argument_and_the_expected_shape(name):
    fn, args = ENTRIES[name]
    good = base_state(N, len(args))
    for i, arg in enumerate(args):
        for bad_shape in [(N - 1,), (N + 1,), (2, N), (), (N, 1)]:
            xs = list(good)
            xs[i] = np.zeros(bad_shape)
            with pytest.raises(ValueError, match=rf"^{arg} has shape .*expected \({N},\) for model 'arm7'"):
                fn(TREE, *xs)


@pytest.mark.parametrize("name", list(ENTRIES))
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_concrete_nan_or_inf_names_the_argument(name, value):
    fn, args = ENTRIES[name]
    good = base_state(N, len(args))
    for i, arg in enumerate(args):
        xs = list(good)
        xs[i] = xs[i].copy()
        xs[i][3] = value
        with pytest.raises(ValueError, match=rf"^{arg} contains NaN or inf \(first at index \(3,\)\)"):
            fn(TREE, *xs)
    if name == "inverse_dynamics":
        f = np.zeros((N, 3))
        bad = f.copy()
        bad[2, 1] = value
        with pytest.raises(ValueError, match=r"external moments contains NaN or inf"):
            fn(TREE, *good, (f, bad))


def test_point_jacobian_checks_its_arguments():
    q = jnp.zeros(N)
    with pytest.raises(ValueError, match=r"q has shape \(6,\), expected \(7,\)"):
        jb.dynamics.point_jacobian(TREE, jnp.zeros(6), 2, jnp.zeros(3))
    with pytest.raises(ValueError, match=r"point has shape \(2,\), expected \(3,\)"):
        jb.dynamics.point_jacobian(TREE, q, 2, jnp.zeros(2))
    with pytest.raises(ValueError, match="segment must be a name or an index"):
        jb.dynamics.point_jacobian(TREE, q, 7, jnp.zeros(3))
    with pytest.raises(ValueError, match="no segment named 'foot'"):
        jb.dynamics.point_jacobian(TREE, q, "foot", jnp.zeros(3))
    # a traced index out of range reads NaN, not a clamped (plausible) other segment
    jv, _ = jax.jit(lambda k: jb.dynamics.point_jacobian(TREE, q, k, jnp.ones(3)))(9)
    assert np.isnan(np.asarray(jv)).any()
    jv_last, _ = jax.jit(lambda k: jb.dynamics.point_jacobian(TREE, q, k, jnp.ones(3)))(6)
    np.testing.assert_allclose(jv_last, jb.dynamics.point_jacobian(TREE, q, "hand", jnp.ones(3))[0])


# ---- traced NaN/inf flows to every dependent output (property test) --------------------------


@functools.cache
def compiled(name: str, route: str):
    fn, args = ENTRIES[name]
    if route == "single":
        return jax.jit(lambda *xs: flat_jax(fn(TREE, *xs)))
    return jax.jit(jax.vmap(lambda *xs: flat_jax(fn(TREE, *xs))))


def flat_jax(out):
    return jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(out)])


@functools.cache
def dependence(name: str, arg: int, j: int) -> np.ndarray:
    """Outputs that change when argument ``arg``'s entry ``j`` changes at the finite base state
    (central differences of the compiled function: independent of how NaN would travel)."""
    f = compiled(name, "single")
    xs = base_state(N, len(ENTRIES[name][1]))
    up, down = [x.copy() for x in xs], [x.copy() for x in xs]
    up[arg][j] += 1e-4
    down[arg][j] -= 1e-4
    return np.abs(np.asarray(f(*up)) - np.asarray(f(*down))) > 1e-9


def _property(route, data):
    name = data.draw(st.sampled_from(list(ENTRIES) if route == "single" else list(KERNELS)), label="entry")
    args = ENTRIES[name][1]
    arg = data.draw(st.integers(0, len(args) - 1), label="argument")
    j = data.draw(st.integers(0, N - 1), label="coordinate")
    value = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]), label="value")
    xs = base_state(N, len(args))
    xs[arg] = xs[arg].copy()
    xs[arg][j] = value
    depends = dependence(name, arg, j)
    if route == "single":
        out = np.asarray(compiled(name, route)(*xs))
    else:  # the bad state in the middle of a batch of three finite ones
        batch = [np.stack([b, x, b]) for b, x in zip(base_state(N, len(args), seed=1), xs)]
        out3 = np.asarray(compiled(name, route)(*batch))
        assert np.isfinite(out3[[0, 2]]).all(), "a NaN/inf leaked into another state of the batch"
        out = out3[1]
    assert not np.isfinite(out[depends]).any(), (
        f"{name}: {args[arg]}[{j}] = {value} gave finite outputs {np.flatnonzero(depends & np.isfinite(out))}"
    )


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_traced_nan_or_inf_reaches_every_dependent_output(data):
    _property("single", data)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_traced_nan_or_inf_in_a_batch_stays_in_its_state(data):
    _property("batched", data)


# ---- tracing time of large trees (issue #17, defect 15) -------------------------------------


def test_estimate_is_the_list_schedule_step_count():
    """`_levels._estimate` (the closed form the large-tree schedule is costed with) equals the
    number of steps `_steps` produces, on every run of levels of random trees at several widths."""
    rng = np.random.default_rng(0)
    checked = 0
    for n, locality in [(40, 3), (120, 10), (200, 200)]:
        parents = tuple([-1] + [int(rng.integers(max(0, i - locality), i)) for i in range(1, n)])
        groups = [list(g) for g in levels(parents)]
        widths = np.asarray([len(g) for g in groups])
        for a in range(len(groups)):
            for b in range(a + 1, min(len(groups), a + 6) + 1):
                segs = sorted(i for g in groups[a:b] for i in g)
                W = int(widths[a:b].max())
                for K in sorted({1, 2, 3, max(1, W // 2), W}):
                    steps = _levels._steps(parents, segs, K)
                    deeper = np.cumsum(widths[a:b][::-1])[::-1]
                    assert len(steps) == max(j + -(-int(deeper[j]) // K) for j in range(b - a))
                    checked += 1
    assert checked > 300


@pytest.mark.parametrize("shape", ["chain", "random", "binary", "caterpillar"])
def test_large_tree_schedules_are_valid_and_fast(shape):
    """Trees above `EXHAUSTIVE_SEGMENTS` segments: the schedule's tables describe the tree, and
    building them is cheap (a 1,000-segment chain took minutes; this asserts no time, only that
    400-segment trees of every shape come through the same checks)."""
    n = 400
    rng = np.random.default_rng(1)
    parents = {
        "chain": tuple(range(-1, n - 1)),
        "random": tuple([-1] + [int(rng.integers(i)) for i in range(1, n)]),
        "binary": tuple([-1] + [(i - 1) // 2 for i in range(1, n)]),
        "caterpillar": tuple(-1 if i == 0 else (i - 1 if i % 2 else i - 2) for i in range(n)),
    }[shape]
    _levels.schedule.cache_clear()
    check_schedule(parents, _levels.schedule(parents))
    if shape == "chain":
        assert [p.members.shape for p in _levels.schedule(parents).phases] == [(n, 1)]


def test_large_random_tree_batched_equals_single_states():
    """A 90-segment random tree (the large-tree schedule): the batched kernel's torques equal a
    loop of single states."""
    tree = jb.SegmentTree.from_dict(random_model_dict(np.random.default_rng(7), 90), dtype=jnp.float64)
    assert tree.nq > _levels.EXHAUSTIVE_SEGMENTS
    rng = np.random.default_rng(2)
    q, qd, qdd = (rng.uniform(-1, 1, (5, tree.nq)) for _ in range(3))
    got = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(tree, q, qd, qdd)
    one = jax.jit(jb.inverse_dynamics)
    want = np.stack([one(tree, q[i], qd[i], qdd[i]) for i in range(5)])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


@pytest.mark.slow
def test_thousand_segment_chain_traces_and_matches_the_single_state_path():
    """Issue #17, defect 15: ``jit(vmap(inverse_dynamics))`` of a 1,000-segment chain spent minutes
    tracing (an O(n³) schedule search). No timing is asserted; the batched result must equal the
    per-state recursion."""
    tree = jb.SegmentTree.from_dict(random_model_dict(np.random.default_rng(0), 1000, chain=True), dtype=jnp.float64)
    rng = np.random.default_rng(3)
    q, qd, qdd = (rng.uniform(-0.2, 0.2, (3, tree.nq)) for _ in range(3))
    got = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(tree, q, qd, qdd)
    one = jax.jit(jb.inverse_dynamics)
    want = np.stack([one(tree, q[i], qd[i], qdd[i]) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8 * np.abs(want).max())


# ---- wrong shapes and empty batches, drawn (property test) -----------------------------------


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_drawn_shapes_are_refused_by_name_or_batched_to_empty(data):
    """Any state argument of any entry point given a wrong shape (a length off by 1…3, a batch
    axis without vmap, a trailing axis, a scalar) is a ``ValueError`` naming it and ``(7,)``;
    ``vmap`` over batch axes of which one is 0 gives the unbatched shapes with those axes in front."""
    name = data.draw(st.sampled_from(list(ENTRIES)), label="entry")
    fn, args = ENTRIES[name]
    xs = base_state(N, len(args))
    if data.draw(st.booleans(), label="wrong shape"):
        arg = data.draw(st.integers(0, len(args) - 1), label="argument")
        shape = data.draw(
            st.one_of(
                st.integers(1, 3).flatmap(lambda k: st.sampled_from([(N - k,), (N + k,)])),
                st.integers(2, 5).map(lambda b: (b, N)),
                st.integers(1, 3).map(lambda b: (N, b)),
                st.just(()),
            ),
            label="shape",
        )
        xs[arg] = np.zeros(shape)
        with pytest.raises(
            ValueError,
            match=rf"^{args[arg]} has shape \({', '.join(map(str, shape))},?\), "
            rf"expected \({N},\)",
        ):
            fn(TREE, *xs)
        return
    outer = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=2).filter(lambda b: 0 in b), label="batch")
    f = fn
    for _ in outer:
        f = jax.vmap(f, in_axes=(None,) + (0,) * len(args))
    got = f(TREE, *[np.zeros(tuple(outer) + (N,))] * len(args))
    want = jax.eval_shape(fn, TREE, *[jnp.zeros(N)] * len(args))
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert g.shape == tuple(outer) + w.shape
