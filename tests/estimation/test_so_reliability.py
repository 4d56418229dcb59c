"""Issue #17 for static optimisation: every input the solver cannot honour is refused by name
before tracing, gives NaN under jit, or is reported infeasible; a frame reported feasible meets
the residual tolerance, recomputed here with numpy from the returned forces and moment arms.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxbio.estimation import static_optimization, static_optimization_motion
from jaxbio.estimation._static_optimization import MAX_FORCE
from jaxbio.muscles import geometry, sets

TREE, PATHS, PARAMS = sets.load_muscle_set("arm26", dtype=jnp.float64)
F0 = np.asarray(PARAMS.max_isometric_force)
R0 = np.asarray(geometry.moment_arms(PATHS, TREE, jnp.array([0.3, 0.8])))  # (6, 2)
TAU0 = np.array([3.0, 10.0])


def numpy_residual(R, tau, forces, reserves):
    """``τ − rᵀF − S y`` and the tolerance scale ``max(1, |τ|, Σ|r F| + |S y|)``, in numpy."""
    R, forces = np.asarray(R, np.float64), np.asarray(forces, np.float64)
    res = np.asarray(tau) - np.einsum("...mn,...m->...n", R, forces) - np.asarray(reserves)
    size = np.maximum(
        np.maximum(np.abs(tau), np.einsum("...mn,...m->...n", np.abs(R), np.abs(forces)) + np.abs(reserves)), 1.0
    )
    return res, size


# ---- NaN in, NaN out under jit ------------------------------------------------------------------

_SOLVE = jax.jit(lambda a: static_optimization(**a))  # one compile for every case below
_CHECKED = jax.jit(lambda a: static_optimization(**a, check=True).forces)


@pytest.mark.parametrize("where", ["tau", "moment_arms", "max_force", "passive_force", "reserve_strength"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_traced_nan_gives_nan_forces_and_infeasible(where, value):
    """Issue #17, defect 9: NaN moments under jit gave finite forces (the interior point stopped on
    the first non-finite step and the polish returned its start)."""
    args = dict(
        moment_arms=R0.copy(),
        tau=TAU0.copy(),
        max_force=F0.copy(),
        passive_force=np.zeros(6),
        reserve_strength=np.zeros(2),
    )
    args[where] = args[where].copy()
    args[where].flat[1] = value
    r = _SOLVE(args)
    for field in (
        "forces",
        "activations",
        "reserves",
        "residual",
        "cost",
        "moment_multipliers",
        "lower_multipliers",
        "upper_multipliers",
    ):
        assert np.isnan(np.asarray(getattr(r, field))).all(), field
    assert not bool(r.feasible) and not bool(r.converged)
    with pytest.raises(ValueError, match=rf"^{where} contains NaN or inf"):  # eager: refused by name
        static_optimization(**args)
    with pytest.raises(Exception, match=f"{where} contains NaN or inf"):
        jax.block_until_ready(_CHECKED(args))


@pytest.mark.slow
def test_nan_frame_in_a_motion_under_jit_stays_in_its_frame():
    q = jnp.asarray(np.column_stack([np.linspace(0.1, 0.5, 4), np.linspace(0.6, 1.2, 4)]))
    want = static_optimization_motion(TREE, PATHS, PARAMS, q, 0 * q, q)  # eager, all finite
    r = jax.jit(lambda a, b, c: static_optimization_motion(TREE, PATHS, PARAMS, a, b, c))(
        q, 0 * q, q.at[2, 1].set(jnp.nan)
    )
    forces = np.asarray(r.forces)
    assert np.isnan(forces[2]).all() and not bool(r.feasible[2]) and not bool(r.converged[2])
    others = [0, 1, 3]
    np.testing.assert_allclose(forces[others], np.asarray(want.forces)[others], rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(np.asarray(r.feasible)[others], np.asarray(want.feasible)[others])


# ---- options and bounds, refused before tracing -----------------------------------------------

BAD_OPTIONS = [
    ("infeasibility_weight", 0.0, "must be positive"),
    ("infeasibility_weight", -1.0, "must be positive"),
    ("infeasibility_weight", np.nan, "must be finite"),
    ("infeasibility_weight", np.inf, "must be finite"),
    ("residual_tolerance", -1.0, "must be positive"),
    ("residual_tolerance", 0.0, "must be positive"),
    ("residual_tolerance", np.nan, "must be finite"),
    ("tol", 0.0, "must be positive"),
    ("tol", -1e-9, "must be positive"),
    ("max_iterations", 0, "must be positive"),
    ("max_iterations", 2.5, "must be an integer"),
    ("infeasibility_weight", "big", "must be a number"),
]


@pytest.mark.parametrize("option,value,message", BAD_OPTIONS)
def test_bad_options_are_refused_by_name(option, value, message):
    """Issue #17, defect 9: ``infeasibility_weight ≤ 0`` and a negative ``residual_tolerance`` were
    accepted (a feasible frame then came back infeasible)."""
    with pytest.raises(ValueError, match=rf"^{option} {message}"):
        static_optimization(R0, TAU0, F0, **{option: value})
    q = jnp.zeros((2, 2))
    with pytest.raises(ValueError, match=rf"^{option} {message}"):
        static_optimization_motion(TREE, PATHS, PARAMS, q, q, q, **{option: value})


def test_huge_max_force_is_refused_and_nan_under_jit():
    """Issue #17, defect 9: max_force 1e300 gave forces 0 and ``feasible=True`` with a 10 N·m
    residual (activations of 1e-298 are below any solver tolerance)."""
    with pytest.raises(ValueError, match=r"^max_force must be ≤ MAX_FORCE = 1e\+08 N"):
        static_optimization(R0, TAU0, np.full(6, 1e300))
    with pytest.raises(ValueError, match=r"^max_force must be ≥ 0"):
        static_optimization(R0, TAU0, -F0)
    r = jax.jit(static_optimization)(R0, TAU0, jnp.full(6, 1e300))
    assert np.isnan(np.asarray(r.forces)).all() and not bool(r.feasible)
    big = eqx.tree_at(lambda m: m.max_isometric_force, PARAMS, PARAMS.max_isometric_force * 1e300)
    q = jnp.zeros((2, 2))
    with pytest.raises(ValueError, match="max_isometric_force of parameters must be ≤ MAX_FORCE"):
        static_optimization_motion(TREE, PATHS, big, q, q, q)


@pytest.mark.parametrize("fmax", [1e3, 1e5, 1e7, MAX_FORCE])
def test_strong_muscles_up_to_the_bound_solve_exactly(fmax):
    """Equal strengths, p = 2: the optimal forces do not depend on the common strength (no bound
    active), so every ``fmax`` up to `MAX_FORCE` must give the same forces; before the tolerance
    was scaled to the demand, 1e8 N came back unconverged and 3× too strong."""
    want = np.asarray(static_optimization(R0, TAU0, np.full(6, 1e3)).forces)
    r = static_optimization(R0, TAU0, np.full(6, fmax))
    assert bool(r.converged) and bool(r.feasible)
    np.testing.assert_allclose(r.forces, want, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("scale", [1e-4, 1e-5, 1e-6, 1e-7, 1e-9, 0.0])
def test_tiny_moments_solve_exactly(p, scale):
    """Moments far below the muscles' capacity: for p = 2 the forces scale with τ (homogeneous
    problem, no bound active), checked against the full-size solution; p = 3 must meet the KKT
    conditions the result reports (independent check of stationarity)."""
    r = static_optimization(R0, TAU0 * scale, F0, p=p)
    assert bool(r.converged) and bool(r.feasible)
    res, size = numpy_residual(R0, TAU0 * scale, r.forces, r.reserves)
    assert (np.abs(res) <= 1e-6 * size).all()
    if p == 2 and scale:
        want = np.asarray(static_optimization(R0, TAU0, F0, p=2).forces)
        np.testing.assert_allclose(np.asarray(r.forces) / scale, want, rtol=1e-7, atol=1e-7)
    x, lam = np.asarray(r.activations), np.asarray(r.moment_multipliers)
    stat = p * x ** (p - 1) - F0 * (R0 @ lam) - np.asarray(r.lower_multipliers) + np.asarray(r.upper_multipliers)
    np.testing.assert_allclose(stat, 0.0, atol=1e-9)


# ---- zero muscles, zero coordinates, zero frames ---------------------------------------------


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_zero_muscles_zero_coordinates_zero_frames():
    """Issue #17, defect 11: these raised numpy's 'zero-size array to reduction operation'."""
    # no muscle: the reserves carry the moments
    r = static_optimization(np.zeros((0, 2)), TAU0, np.zeros(0), reserve_strength=np.array([100.0, 100.0]))
    assert r.forces.shape == (0,) and bool(r.feasible)
    np.testing.assert_allclose(r.reserves, TAU0, atol=1e-9)
    bare = static_optimization(np.zeros((0, 2)), TAU0, np.zeros(0))
    assert not bool(bare.feasible)
    np.testing.assert_allclose(bare.residual, TAU0, atol=1e-9)
    # no coordinate: nothing to reproduce, every activation 0, the passive forces remain
    r = static_optimization(np.zeros((3, 0)), np.zeros(0), np.ones(3), passive_force=np.array([1.0, 2.0, 0.0]))
    assert r.residual.shape == (0,) and bool(r.feasible) and bool(r.converged)
    np.testing.assert_array_equal(r.forces, [1.0, 2.0, 0.0])
    np.testing.assert_array_equal(r.activations, 0.0)
    assert static_optimization(np.zeros((0, 0)), np.zeros(0), np.zeros(0)).forces.shape == (0,)
    # zero frames: empty results with the shapes of one frame
    z = jnp.zeros((0, 2))
    one = static_optimization_motion(TREE, PATHS, PARAMS, jnp.zeros((1, 2)), jnp.zeros((1, 2)), jnp.zeros((1, 2)))
    r = static_optimization_motion(TREE, PATHS, PARAMS, z, z, z)
    for got, want in zip(jax.tree_util.tree_leaves(r), jax.tree_util.tree_leaves(one)):
        assert got.shape == (0,) + want.shape[1:]
    vm = jax.vmap(static_optimization, in_axes=(0, 0, None))(jnp.zeros((0, 6, 2)), z, F0)
    assert vm.forces.shape == (0, 6) and vm.feasible.shape == (0,)


def test_wrong_shapes_name_the_argument():
    with pytest.raises(ValueError, match=r"^tau has shape \(3,\), expected \(2,\)"):
        static_optimization(R0, np.zeros(3), F0)
    with pytest.raises(ValueError, match=r"^tau has shape \(4, 2\), expected \(2,\)"):
        static_optimization(R0, np.zeros((4, 2)), F0)
    with pytest.raises(ValueError, match=r"^moment_arms must be \(m, n\)"):
        static_optimization(R0[None], TAU0, F0)
    with pytest.raises(ValueError, match=r"^max_force has shape \(7,\), expected \(6,\)"):
        static_optimization(R0, TAU0, np.ones(7))
    with pytest.raises(ValueError, match=r"^passive_force has shape \(5,\), expected \(6,\)"):
        static_optimization(R0, TAU0, F0, passive_force=np.zeros(5))
    with pytest.raises(ValueError, match=r"^reserve_strength has shape \(3,\), expected \(2,\)"):
        static_optimization(R0, TAU0, F0, reserve_strength=np.zeros(3))
    q = jnp.zeros((4, 2))
    for arg in ("q", "qd", "qdd"):
        for bad in (jnp.zeros(2), jnp.zeros((4, 3)), jnp.zeros((4, 1))):
            kw = dict(q=q, qd=q, qdd=q)
            kw[arg] = bad
            with pytest.raises(ValueError, match=rf"^{arg} has shape .*expected \(T, 2\)"):
                static_optimization_motion(TREE, PATHS, PARAMS, kw["q"], kw["qd"], kw["qdd"])
    with pytest.raises(ValueError, match=r"^external forces contains NaN or inf"):
        ext = np.zeros((4, 2, 3))
        bad = ext.copy()
        bad[1, 0, 2] = np.inf
        static_optimization_motion(TREE, PATHS, PARAMS, q, q, q, external=(bad, ext))


# ---- feasible means the residual, recomputed, is within the tolerance (property) -------------


@functools.cache
def batch_solver(p):
    return jax.jit(
        jax.vmap(lambda a, b, c, d, e: static_optimization(a, b, c, p=p, passive_force=d, reserve_strength=e))
    )


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    p=st.sampled_from([2, 3]),
    log_tau=st.floats(-12, 4),
    log_fmax=st.floats(0, 8),
    log_r=st.floats(-6, 1),
    reserve_on=st.booleans(),
)
def test_feasible_frames_meet_the_recomputed_residual(seed, p, log_tau, log_fmax, log_r, reserve_on):
    """Random frames over many orders of magnitude (moments 1e-12 … 1e4 N·m, strengths 1 … 1e8 N,
    moment arms 1e-6 … 10 m): the reported residual is ``τ − rᵀF − S y`` recomputed with numpy from
    the returned forces, and every frame reported feasible meets the tolerance; the forces are ≥ 0
    and at most ``max_force + passive``."""
    rng = np.random.default_rng(seed)
    B = 8
    R = rng.normal(size=(B, 6, 2)) * 10.0**log_r
    tau = rng.normal(size=(B, 2)) * 10.0**log_tau
    fmax = rng.uniform(0.2, 1.0, (B, 6)) * 10.0**log_fmax
    passive = rng.uniform(0, 0.1, (B, 6)) * fmax * rng.integers(0, 2, (B, 1))
    reserve = np.full((B, 2), 10.0**log_tau) * reserve_on
    r = batch_solver(p)(R, tau, fmax, passive, reserve)
    forces, reserves = np.asarray(r.forces), np.asarray(r.reserves)
    assert np.isfinite(forces).all() and np.isfinite(np.asarray(r.residual)).all()
    res, size = numpy_residual(R, tau, forces, reserves)
    np.testing.assert_allclose(np.asarray(r.residual), res, rtol=1e-12, atol=1e-12 * size.max())
    feasible = np.asarray(r.feasible)
    assert (np.abs(res[feasible]) <= 1e-6 * size[feasible]).all()
    assert (forces >= -1e-12 * fmax).all() and (forces <= fmax + passive + 1e-9 * fmax).all()


SO_ARGS = ("moment_arms", "tau", "max_force", "passive_force", "reserve_strength")


@functools.cache
def jitted_frame():
    return jax.jit(lambda a: static_optimization(**a))


def so_args():
    return dict(
        moment_arms=R0.copy(),
        tau=TAU0.copy(),
        max_force=F0.copy(),
        passive_force=np.zeros(6),
        reserve_strength=np.zeros(2),
    )


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_drawn_bad_inputs_follow_the_contract(data):
    """A NaN/inf anywhere in any array: refused by name eagerly, every output NaN and the frame
    infeasible under jit. A wrong shape of any array: refused by name with the expected shape.
    An empty batch of frames: empty results with one frame's shapes."""
    kind = data.draw(st.sampled_from(["nan", "shape", "empty"]), label="kind")
    args = so_args()
    if kind == "nan":
        name = data.draw(st.sampled_from(SO_ARGS), label="argument")
        k = data.draw(st.integers(0, args[name].size - 1), label="entry")
        args[name].flat[k] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]), label="value")
        with pytest.raises(ValueError, match=rf"^{name} contains NaN or inf"):
            static_optimization(**args)
        r = jitted_frame()(args)
        assert np.isnan(np.asarray(r.forces)).all() and np.isnan(np.asarray(r.residual)).all()
        assert not bool(r.feasible) and not bool(r.converged)
    elif kind == "shape":
        name = data.draw(st.sampled_from(SO_ARGS[1:]), label="argument")
        good = args[name].shape[0]
        bad = data.draw(st.sampled_from([(good - 1,), (good + 1,), (3, good), ()]), label="shape")
        args[name] = np.zeros(bad)
        with pytest.raises(ValueError, match=rf"^{name} has shape .*expected \({good},\)"):
            static_optimization(**args)
    else:
        outer = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=2).filter(lambda b: 0 in b))
        f = lambda R, t: static_optimization(R, t, F0)  # noqa: E731
        for _ in outer:
            f = jax.vmap(f)
        r = f(np.zeros(tuple(outer) + R0.shape), np.zeros(tuple(outer) + TAU0.shape))
        one = static_optimization(R0, TAU0, F0)
        for got, want in zip(jax.tree_util.tree_leaves(r), jax.tree_util.tree_leaves(one)):
            assert got.shape == tuple(outer) + want.shape
