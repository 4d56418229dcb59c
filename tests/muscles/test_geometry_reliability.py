"""Issue #17 for the muscle geometry: NaN stays NaN, paths refuse a tree they were not built for.

References: the moment arms at a finite state (which coordinates a muscle depends on), numpy
for the empty shapes, `jaxbio.spatial` checked against the definition of its guards.
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

import jaxbio as jb
from jaxbio import spatial
from jaxbio.muscles import geometry, sets
from jaxbio.muscles.activation import ActivationDynamics
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.drive import MuscleActuatedDrive

ARM_TREE, ARM_PATHS, ARM_PARAMS = sets.load_muscle_set("arm26", dtype=jnp.float64)
GAIT_TREE, GAIT_PATHS, _ = sets.load_muscle_set("gait10dof18musc", dtype=jnp.float64)
ARM7 = jb.load_model("arm7", dtype=jnp.float64).tree

#: every public function of (paths, tree, arrays...) and its array arguments
FUNCTIONS = {
    "path_points_world": (geometry.path_points_world, ("q",)),
    "lengths": (geometry.lengths, ("q",)),
    "lengthening_velocity": (geometry.lengthening_velocity, ("q", "qd")),
    "lengths_and_velocities": (geometry.lengths_and_velocities, ("q", "qd")),
    "moment_arms": (geometry.moment_arms, ("q",)),
    "generalized_forces": (geometry.generalized_forces, ("q", "forces")),
    "muscle_wrenches": (geometry.muscle_wrenches, ("q", "forces")),
}


def arrays(tree, paths, names, seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.uniform(-0.5, 0.5, tree.nq) + (0.6 if a == "q" else 0.0)
        if a != "forces"
        else rng.uniform(10, 200, paths.n_muscles)
        for a in names
    ]


# ---- the reproduction: NaN in q gave finite lengths -------------------------------------------


def test_nan_in_q_gives_nan_lengths_not_zeros():
    """Issue #17, defect 4: ``lengths`` with a NaN in ``q`` returned ``[0, 0, 0, 0.017, 0.032, 0]``
    (the length guard turned NaN into 0). Under jit (traced) every muscle crossing the coordinate
    is NaN; eagerly the NaN is refused by name."""
    q = jnp.array([jnp.nan, 0.3])
    got = np.asarray(jax.jit(geometry.lengths)(ARM_PATHS, ARM_TREE, q))
    assert np.isnan(got).all()
    with pytest.raises(ValueError, match=r"^q contains NaN or inf \(first at index \(0,\)\)"):
        geometry.lengths(ARM_PATHS, ARM_TREE, q)


def test_spatial_guards_keep_nan_and_finite_gradients_at_zero():
    nan = jnp.nan
    np.testing.assert_array_equal(spatial.safe_sqrt(jnp.array([4.0, 0.0, -1.0])), [2.0, 0.0, 0.0])
    assert np.isnan(spatial.safe_sqrt(jnp.array(nan)))
    assert np.isnan(spatial.norm(jnp.array([0.0, nan, 0.0])))
    assert np.isinf(spatial.norm(jnp.array([0.0, jnp.inf, 0.0])))
    assert np.isnan(spatial.unit(jnp.array([nan, 0.0, 0.0]), jnp.array([1.0, 0.0, 0.0]))).all()
    assert not np.isfinite(spatial.unit(jnp.array([jnp.inf, 0.0, 0.0]), jnp.array([1.0, 0.0, 0.0]))).all()
    np.testing.assert_array_equal(spatial.unit(jnp.zeros(3), jnp.array([0.0, 0.0, 1.0])), [0.0, 0.0, 1.0])
    # the guards' purpose: finite (zero) gradients at zero length
    assert float(jax.grad(spatial.safe_sqrt)(0.0)) == 0.0
    np.testing.assert_array_equal(jax.grad(spatial.norm)(jnp.zeros(3)), 0.0)
    assert np.isfinite(jax.jacfwd(lambda v: spatial.unit(v, jnp.zeros(3)))(jnp.zeros(3))).all()


# ---- paths built for another tree --------------------------------------------------------------


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_paths_refuse_another_tree_naming_both(name):
    """Issue #17, defect 4: arm26's paths on arm7's tree ran (and static optimisation on that pair
    returned ~6e37 N). Every function of ``(paths, tree)`` refuses it, eagerly and under jit."""
    fn, names = FUNCTIONS[name]
    xs = arrays(ARM7, ARM_PATHS, names)
    msg = r"muscle paths and tree do not match: the paths were built for model 'arm26' .* the tree is model 'arm7'"
    with pytest.raises(ValueError, match=msg):
        fn(ARM_PATHS, ARM7, *xs)
    with pytest.raises(ValueError, match=msg):
        jax.jit(fn)(ARM_PATHS, ARM7, *xs)


def test_static_optimization_and_drive_refuse_another_tree():
    q = jnp.zeros((3, ARM7.nq))
    with pytest.raises(ValueError, match="paths were built for model 'arm26'.*the tree is model 'arm7'"):
        jb.estimation.static_optimization_motion(ARM7, ARM_PATHS, ARM_PARAMS, q, q, q)
    hill = HillMuscle(
        ARM_PARAMS.max_isometric_force,
        ARM_PARAMS.optimal_fiber_length,
        ARM_PARAMS.tendon_slack_length,
        ARM_PARAMS.pennation_angle,
        ARM_PARAMS.max_contraction_velocity,
    )
    with pytest.raises(ValueError, match="paths were built for model 'arm26'"):
        MuscleActuatedDrive(ARM7, ARM_PATHS, hill, ActivationDynamics(), lambda t: jnp.zeros(6))


def test_same_topology_other_numbers_is_accepted_and_unknown_trees_are_range_checked():
    """A scaled subject (same segments, other numbers) is the point of building paths once."""
    heavy = eqx.tree_at(lambda t: t.masses, ARM_TREE, ARM_TREE.masses * 2.0)
    heavy = eqx.tree_at(lambda t: t.origins, heavy, heavy.origins * 1.1)
    q = jnp.array([0.2, 0.9])
    assert geometry.lengths(ARM_PATHS, heavy, q).shape == (6,)
    # over subjects (a batched tree): the topology check is static and passes
    trees = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), ARM_TREE, heavy)
    assert jax.vmap(geometry.lengths, in_axes=(None, 0, None))(ARM_PATHS, trees, q).shape == (2, 6)
    # paths made by the constructor record no tree: their segment indices are checked
    bare = geometry.MusclePaths(
        points=ARM_PATHS.points, segments=ARM_PATHS.segments, counts=ARM_PATHS.counts, names=ARM_PATHS.names
    )
    np.testing.assert_allclose(geometry.lengths(bare, ARM_TREE, q), geometry.lengths(ARM_PATHS, ARM_TREE, q))
    one = jb.SegmentTree.from_dict({**ARM_TREE.to_dict(), "segments": ARM_TREE.to_dict()["segments"][:1]})
    with pytest.raises(ValueError, match="is on segment index 1, but model 'arm26' has 1 segments"):
        geometry.lengths(bare, one, q[:1])
    with pytest.raises(ValueError, match="segment index 5 is neither -1"):
        geometry.MusclePaths(
            points=jnp.zeros((1, 2, 3)),
            segments=((0, 5),),
            counts=(2,),
            names=("m",),
            built_for=geometry.tree_topology(ARM_TREE),
        )
    # the elbow model built from arm26 records its own tree
    etree, epaths, _ = sets.elbow_arm26()
    assert epaths.built_for == geometry.tree_topology(etree)
    with pytest.raises(ValueError, match="built for model 'arm26_elbow'"):
        geometry.lengths(epaths, ARM_TREE, q)


# ---- shapes, concrete NaN/inf, empty batches ----------------------------------------------------


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_wrong_shapes_and_concrete_nan_name_the_argument(name):
    fn, names = FUNCTIONS[name]
    good = arrays(ARM_TREE, ARM_PATHS, names)
    for i, arg in enumerate(names):
        size = ARM_PATHS.n_muscles if arg == "forces" else ARM_TREE.nq
        for bad_shape in [(size - 1,), (size + 1,), (3, size), ()]:
            xs = list(good)
            xs[i] = np.zeros(bad_shape)
            with pytest.raises(ValueError, match=rf"^{arg} has shape .*expected \({size},\)"):
                fn(ARM_PATHS, ARM_TREE, *xs)
        for value in (np.nan, np.inf, -np.inf):
            xs = [x.copy() for x in good]
            xs[i][1] = value
            with pytest.raises(ValueError, match=rf"^{arg} contains NaN or inf \(first at index \(1,\)\)"):
                fn(ARM_PATHS, ARM_TREE, *xs)


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_vmap_over_zero_states_gives_empty_results(name):
    fn, names = FUNCTIONS[name]
    good = arrays(ARM_TREE, ARM_PATHS, names)
    want = jax.eval_shape(fn, ARM_PATHS, ARM_TREE, *good)
    empty = [np.zeros((0,) + x.shape) for x in good]
    got = jax.jit(jax.vmap(fn, in_axes=(None, None) + (0,) * len(names)))(ARM_PATHS, ARM_TREE, *empty)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert g.shape == (0,) + w.shape


# ---- traced NaN/inf reaches every dependent output (property test) ----------------------------

SETS = {"arm26": (ARM_TREE, ARM_PATHS), "gait10dof18musc": (GAIT_TREE, GAIT_PATHS)}


@functools.cache
def compiled(set_name: str, name: str):
    tree, paths = SETS[set_name]
    fn, _ = FUNCTIONS[name]
    return jax.jit(lambda *xs: jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(fn(paths, tree, *xs))]))


@functools.cache
def dependence(set_name: str, name: str, arg: int, j: int) -> np.ndarray:
    """Outputs that change with entry ``j`` of argument ``arg`` at the finite base state (central
    differences of the same compiled function)."""
    tree, paths = SETS[set_name]
    f = compiled(set_name, name)
    xs = arrays(tree, paths, FUNCTIONS[name][1])
    up, down = [x.copy() for x in xs], [x.copy() for x in xs]
    up[arg][j] += 1e-4
    down[arg][j] -= 1e-4
    return np.abs(np.asarray(f(*up)) - np.asarray(f(*down))) > 1e-10


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_traced_nan_or_inf_reaches_every_dependent_output(data):
    set_name = data.draw(st.sampled_from(list(SETS)), label="set")
    name = data.draw(st.sampled_from(list(FUNCTIONS)), label="function")
    tree, paths = SETS[set_name]
    names = FUNCTIONS[name][1]
    arg = data.draw(st.integers(0, len(names) - 1), label="argument")
    size = paths.n_muscles if names[arg] == "forces" else tree.nq
    j = data.draw(st.integers(0, size - 1), label="entry")
    value = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]), label="value")
    xs = arrays(tree, paths, names)
    xs[arg][j] = value
    out = np.asarray(compiled(set_name, name)(*xs))
    depends = dependence(set_name, name, arg, j)
    assert not np.isfinite(out[depends]).any(), (
        f"{set_name} {name}: {names[arg]}[{j}] = {value} left outputs {np.flatnonzero(depends & np.isfinite(out))} finite"
    )


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_drawn_shapes_are_refused_by_name_or_batched_to_empty(data):
    """Wrong shapes of any array argument: ``ValueError`` naming it and its expected shape;
    ``vmap`` over batch axes of which one is 0: the unbatched shapes with those axes in front."""
    name = data.draw(st.sampled_from(list(FUNCTIONS)), label="function")
    fn, names = FUNCTIONS[name]
    xs = arrays(ARM_TREE, ARM_PATHS, names)
    if data.draw(st.booleans(), label="wrong shape"):
        i = data.draw(st.integers(0, len(names) - 1), label="argument")
        size = ARM_PATHS.n_muscles if names[i] == "forces" else ARM_TREE.nq
        shape = data.draw(
            st.one_of(
                st.integers(1, 2).flatmap(lambda k: st.sampled_from([(size - k,), (size + k,)])),
                st.integers(2, 4).map(lambda b: (b, size)),
                st.just(()),
            ),
            label="shape",
        )
        xs[i] = np.zeros(shape)
        with pytest.raises(ValueError, match=rf"^{names[i]} has shape .*expected \({size},\)"):
            fn(ARM_PATHS, ARM_TREE, *xs)
        return
    outer = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=2).filter(lambda b: 0 in b), label="batch")
    f = fn
    for _ in outer:
        f = jax.vmap(f, in_axes=(None, None) + (0,) * len(names))
    got = f(ARM_PATHS, ARM_TREE, *[np.zeros(tuple(outer) + x.shape) for x in xs])
    want = jax.eval_shape(fn, ARM_PATHS, ARM_TREE, *xs)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert g.shape == tuple(outer) + w.shape
