"""`jax.vmap(jb.inverse_dynamics)` runs a separate batch-last kernel (`jaxbio.dynamics.batch_last`).

It must give what the per-state recursion gives, state by state, under every way a user batches
and differentiates it, and what Pinocchio gives. References: a Python loop of unbatched calls,
`pin.rnea` state by state, finite differences.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.dynamics.batch_last import CPU_CHUNK, chunk_size, inverse_dynamics_batch
from jaxbio.dynamics._levels import schedule
from jaxbio.model import model_path
from tests._models import hinge_chains, random_model_dict

MODELS = ("double_pendulum", "arm7", "sagittal11", "wholebody", "arm26")
BATCH = CPU_CHUNK * 2 + 37  # three chunks on CPU, the last one overlapping the second


def states(tree, batch: int, seed: int = 0):
    """numpy arrays: configurations ``(batch, nq)`` (`jb.configuration.random`, angles and slides
    in [−2, 2]), velocities and accelerations ``(batch, nv)``, external forces and moments
    ``(batch, segments, 3)``."""
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    q = np.array(jax.vmap(lambda k: jb.configuration.random(tree, k, angle=2.0, distance=2.0))(keys))
    rng = np.random.default_rng(seed)
    nv, n = tree.nv, tree.n_segments
    qd = rng.uniform(-3.0, 3.0, (batch, nv))
    qdd = rng.uniform(-10.0, 10.0, (batch, nv))
    fext = rng.normal(size=(batch, n, 3)) * 20.0
    mext = rng.normal(size=(batch, n, 3)) * 5.0
    return q, qd, qdd, fext, mext


def wholebody_dict(hinges: bool = True) -> dict:
    """The shipped wholebody; with ``hinges`` its ball and free joints as hinge chains
    (`hinge_chains`: 28 segments, nq = nv = 28, the tree the batch-last kernel runs on)."""
    d = json.loads(model_path("wholebody").read_text())
    return hinge_chains(d) if hinges else d


def wholebody_hinges():
    return jb.SegmentTree.from_dict(wholebody_dict(), dtype=jnp.float64)


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1.0))


def batched(tree, *args, in_axes=(None, 0, 0, 0)):
    return jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=in_axes))(tree, *args)


@pytest.mark.parametrize(
    "name", [n if n not in ("sagittal11", "wholebody") else pytest.param(n, marks=pytest.mark.slow) for n in MODELS]
)
def test_vmap_equals_loop_of_single_states(name):
    tree = jb.load_model(name, dtype=jnp.float64).tree
    q, qd, qdd, fext, mext = states(tree, BATCH)
    one = jax.jit(jb.inverse_dynamics)
    one_ext = jax.jit(lambda t, a, b, c, f, m: jb.inverse_dynamics(t, a, b, c, (f, m)))
    want = np.stack([one(tree, q[i], qd[i], qdd[i]) for i in range(BATCH)])
    want_ext = np.stack([one_ext(tree, q[i], qd[i], qdd[i], fext[i], mext[i]) for i in range(BATCH)])
    got = batched(tree, q, qd, qdd)
    got_ext = jax.jit(jax.vmap(lambda a, b, c, f, m: jb.inverse_dynamics(tree, a, b, c, (f, m))))(
        q, qd, qdd, fext, mext
    )
    assert rel(got, want) < 1e-12
    assert rel(got_ext, want_ext) < 1e-12
    assert np.abs(np.asarray(got_ext) - np.asarray(got)).max() > 1e-3  # the external wrench is used


@pytest.mark.parametrize("chunk", [pytest.param(1, marks=pytest.mark.slow), 5, 64, None])
def test_every_chunk_size_gives_the_same_result(chunk):
    tree = wholebody_hinges()
    q, qd, qdd, fext, mext = states(tree, 150, seed=1)
    want = np.asarray(batched(tree, q, qd, qdd))
    got = jax.jit(lambda *a: inverse_dynamics_batch(tree, *a, chunk=chunk))(q, qd, qdd)
    assert rel(got, want) < 1e-13


def test_chunk_size_rule():
    assert chunk_size(10, "cpu") == 10
    assert chunk_size(10**5, "cpu") == CPU_CHUNK
    assert chunk_size(10**5, "gpu") == 10**5


def test_vmap_against_pinocchio():
    pin = pytest.importorskip("pinocchio")
    from tests import pinocchio_ref as ref

    for name in ("arm7", "wholebody_hinges"):  # the shipped wholebody: tests/dynamics/test_pinocchio.py
        d = wholebody_dict() if name == "wholebody_hinges" else json.loads(model_path(name).read_text())
        tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
        model = ref.build_pinocchio_model(d)
        q, qd, qdd, fext, mext = states(tree, 40, seed=2)
        got = jax.jit(jax.vmap(lambda a, b, c, f, m: jb.inverse_dynamics(tree, a, b, c, (f, m))))(
            q, qd, qdd, fext, mext
        )
        want = np.stack([ref.pin_inverse_dynamics(model, q[i], qd[i], qdd[i], fext[i], mext[i]) for i in range(len(q))])
        assert rel(got, want) < 1e-10, name
    del pin


def test_partly_batched_arguments_and_nested_vmap():
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    q, qd, qdd, _, _ = states(tree, 60, seed=3)
    want = np.asarray(batched(tree, q, np.broadcast_to(qd[0], q.shape), qdd))
    got = batched(tree, q, qd[0], qdd, in_axes=(None, 0, None, 0))
    assert rel(got, want) < 1e-14
    nested = jax.vmap(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)), in_axes=(None, 0, 0, 0))
    got2 = nested(tree, q.reshape(3, 20, -1), qd.reshape(3, 20, -1), qdd.reshape(3, 20, -1))
    assert rel(np.asarray(got2).reshape(60, -1), batched(tree, q, qd, qdd)) < 1e-14


def test_vmap_over_subjects_uses_each_tree():
    tree = jb.load_model("sagittal11", dtype=jnp.float64).tree
    q, qd, qdd, _, _ = states(tree, 3, seed=4)
    scale = jnp.asarray([0.8, 1.0, 1.3])
    trees = jax.vmap(lambda s: jax.tree_util.tree_map(lambda x: x * s, tree))(scale)
    got = jax.vmap(jb.inverse_dynamics)(trees, q, qd, qdd)
    for i in range(3):
        t = jax.tree_util.tree_map(lambda x: x * scale[i], tree)
        assert rel(got[i], jb.inverse_dynamics(t, q[i], qd[i], qdd[i])) < 1e-13


@pytest.mark.slow
def test_gradients_through_vmap_match_finite_differences():
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    q, qd, qdd, _, _ = states(tree, 20, seed=5)
    w = np.random.default_rng(6).normal(size=(20, tree.nq))

    @jax.jit
    def loss(masses, q):
        t = jax.tree_util.tree_map(lambda x: x, tree)
        t = jb.SegmentTree(
            axes=t.axes,
            origins=t.origins,
            orientations=t.orientations,
            masses=masses,
            coms=t.coms,
            inertias=t.inertias,
            gravity=t.gravity,
            names=t.names,
            parents=t.parents,
            joint_types=t.joint_types,
            name=t.name,
        )
        return jnp.sum(w * jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0))(t, q, qd, qdd))

    gm, gq = jax.jit(jax.grad(loss, argnums=(0, 1)))(tree.masses, jnp.asarray(q))
    h = 1e-6
    for k in (0, 3, 6):
        dm = np.zeros(tree.nq)
        dm[k] = h
        fd = (loss(tree.masses + dm, q) - loss(tree.masses - dm, q)) / (2 * h)
        assert abs(gm[k] - fd) <= 1e-6 * max(1.0, abs(fd))
    dq = np.zeros_like(q)
    dq[4, 2] = h
    fd = (loss(tree.masses, q + dq) - loss(tree.masses, q - dq)) / (2 * h)
    assert abs(gq[4, 2] - fd) <= 1e-6 * max(1.0, abs(fd))
    # vmap of jacfwd (batched forward mode) equals jacfwd state by state
    J = jax.vmap(jax.jacfwd(jb.inverse_dynamics, argnums=1), in_axes=(None, 0, 0, 0))(tree, q[:3], qd[:3], qdd[:3])
    for i in range(3):
        assert rel(J[i], jax.jacfwd(jb.inverse_dynamics, argnums=1)(tree, q[i], qd[i], qdd[i])) < 1e-13


def test_float32_batch_close_to_float64():
    tree = wholebody_hinges()
    q, qd, qdd, _, _ = states(tree, 200, seed=7)
    x32 = [jnp.asarray(x, jnp.float32) for x in (q, qd, qdd)]
    got = batched(tree.astype(jnp.float32), *x32)
    assert got.dtype == jnp.float32
    want = batched(tree, *[np.asarray(x, np.float64) for x in x32])
    err = np.linalg.norm(np.asarray(got, np.float64) - want, axis=1) / np.maximum(np.linalg.norm(want, axis=1), 1.0)
    assert err.max() < 1e-4


def test_nan_state_gives_nan_unchecked_and_raises_checked():
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    q, qd, qdd, _, _ = states(tree, 10, seed=8)
    q[3, 2] = np.nan
    tau = np.asarray(batched(tree, q, qd, qdd))
    assert np.all(np.isnan(tau[3, 2:]))  # the NaN reaches that state's torques, never a plausible number
    assert np.all(np.isfinite(np.delete(tau, 3, axis=0)))  # and no other state's
    f = jax.jit(jax.vmap(lambda a, b, c: jb.inverse_dynamics(tree, a, b, c, check=True)))
    with pytest.raises(Exception, match="q contains NaN or inf"):
        jax.block_until_ready(f(q, qd, qdd))


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_first_state_stays_in_its_row(value):
    """The chained table writes (`_batched._write`) read one number of each written table, the
    chunk's first state's: a non-finite one must not reach the other states (without the guard,
    44 of 300 rows of the whole body as hinges came out non-finite)."""
    tree = jb.SegmentTree.from_dict(hinge_chains(json.loads(model_path("wholebody").read_text())), dtype=jnp.float64)
    q, qd, qdd, _, _ = states(tree, 300, seed=9)
    for k in range(3):
        args = [q.copy(), qd.copy(), qdd.copy()]
        args[k][0, :] = value
        tau = np.asarray(batched(tree, *args))
        assert not np.all(np.isfinite(tau[0]))
        assert np.all(np.isfinite(tau[1:])), (k, int(np.sum(~np.isfinite(tau[1:]).all(axis=1))))  # q, qd, qdd


def check_schedule(parents, sched) -> None:
    """Every table of a `schedule` against the tree itself: each segment in one slot, each slot's
    parent row holding its parent (or the world), computed in an earlier step or phase; each
    segment's children found exactly once, in later steps or phases."""
    n = len(parents)
    seg_of_row = {0: -1}  # global row -> segment (0: the world)
    start = 1
    for ph in sched.phases:
        S, K = ph.members.shape
        for t in range(S):
            for k in range(K):
                if k == 0 or ph.members[t, k] != ph.members[t, 0]:
                    seg_of_row[start + t * K + k] = int(ph.members[t, k])
        start += S * K
    assert sorted(v for v in seg_of_row.values() if v >= 0) == list(range(n))
    assert all(seg_of_row[int(sched.slot[i]) + 1] == i for i in range(n))
    start = 1
    for ph in sched.phases:
        S, K = ph.members.shape
        E = len(ph.extern)
        assert all(g < start for g in ph.extern.tolist())  # the world or an earlier phase
        kids = {}
        for t in range(S):
            for k in range(K):
                i, r = int(ph.members[t, k]), int(ph.parent_row[t, k])
                if r < E:
                    assert seg_of_row[int(ph.extern[r])] == parents[i]
                else:
                    assert (r - E) // K < t and seg_of_row[start + r - E] == parents[i]
                if seg_of_row.get(start + t * K + k) != i:
                    continue  # a padded slot
                inner = [int(c) for c in ph.child_rows[t, :, k] if c < S * K]
                later = [int(g) for g in ph.later_children[:, t * K + k] if g > 0]
                assert all(c // K > t for c in inner) and all(g >= start + S * K for g in later)
                kids[i] = sorted([seg_of_row[start + c] for c in inner] + [seg_of_row[g] for g in later])
        for i, got in kids.items():
            assert got == [c for c in range(n) if parents[c] == i]
        start += S * K


@pytest.mark.slow
@pytest.mark.parametrize("phase_cost,step_cost", [(0, 0.75), (6, 0.75), (1000, 0.75), (1000, 0.0), (6, 100.0)])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_trees_every_phase_layout(phase_cost, step_cost, seed):
    """Random trees (several roots, mixed joints) under every kind of schedule: many phases or a
    single one, steps that are tree levels or mix them (``step_cost`` 0: fewest slots, 100:
    fewest steps). The schedule's tables describe the tree, and the batched torques equal a loop
    of single states."""
    rng = np.random.default_rng(100 + seed)
    tree = jb.SegmentTree.from_dict(random_model_dict(rng, 17), dtype=jnp.float64)
    sched = schedule(tree.parents, phase_cost=phase_cost, step_cost=step_cost)
    check_schedule(tree.parents, sched)
    if phase_cost == 1000:
        assert len(sched.phases) == 1
    q, qd, qdd, fext, mext = states(tree, 50, seed=seed)
    one = jax.jit(lambda a, b, c, f, m: jb.inverse_dynamics(tree, a, b, c, (f, m)))
    want = np.stack([one(q[i], qd[i], qdd[i], fext[i], mext[i]) for i in range(50)])
    got = jax.jit(lambda *a: inverse_dynamics_batch(tree, *a[:3], (a[3], a[4]), chunk=16, schedule=sched))(
        q, qd, qdd, fext, mext
    )
    assert rel(got, want) < 1e-12


def test_schedules_of_the_shipped_models():
    """The tables of every shipped model's schedule describe its tree; the whole body's limbs
    share steps across tree levels (its hinge-chain form: 30 slots for 28 segments, against 41 level by level)."""
    for name in MODELS:
        tree = jb.load_model(name).tree
        check_schedule(tree.parents, schedule(tree.parents))
    hinges = wholebody_hinges()
    sched = schedule(hinges.parents)
    assert sum(p.members.size for p in sched.phases) == 30
    depth = {}
    for i, p in enumerate(hinges.parents):
        depth[i] = 0 if p < 0 else depth[p] + 1
    assert any(len({depth[int(i)] for i in step}) > 1 for ph in sched.phases for step in ph.members)


def test_accelerator_layout_on_cpu():
    """The layout an accelerator gets (the whole batch as one chunk, no multi-output fusions,
    XLA's own sin/cos), run here on the CPU: the same torques as a loop of single states."""
    tree = wholebody_hinges()
    q, qd, qdd, fext, mext = states(tree, 300, seed=5)
    text = jax.jit(lambda *a: inverse_dynamics_batch(tree, *a, layout="accelerator")).lower(q, qd, qdd).as_text()
    # no _keep fusions (reductions over the batch); the level scans remain. (The only reductions
    # left are over the model's own numbers: the axes made unit, SegmentTree.unit_axes.)
    assert "while" in text
    assert not [line for line in text.splitlines() if "stablehlo.reduce" in line and "300" in line]
    got = jax.jit(lambda *a: inverse_dynamics_batch(tree, *a[:3], (a[3], a[4]), layout="accelerator"))(
        q, qd, qdd, fext, mext
    )
    one = jax.jit(lambda a, b, c, f, m: jb.inverse_dynamics(tree, a, b, c, (f, m)))
    want = np.stack([one(q[i], qd[i], qdd[i], fext[i], mext[i]) for i in range(0, 300, 7)])
    assert rel(np.asarray(got)[::7], want) < 1e-12


def test_layout_is_checked_and_schedules_are_cached_and_bounded():
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    q = np.zeros((4, tree.nq))
    with pytest.raises(ValueError, match="layout must be one of"):
        inverse_dynamics_batch(tree, q, q, q, layout="gpu")
    assert schedule(tree.parents) is schedule(tree.parents)
    assert schedule.cache_info().maxsize is not None


@pytest.mark.slow
@pytest.mark.parametrize("which", ["hinges", "ball_and_free"])
def test_inside_shard_map(which):
    """`jax.shard_map` (checked varying axes, the default) accepts the per-state recursion and the
    batched kernel, on one-DOF joints and on ball and free joints: their scans start from the
    state's zeros, not from constants."""
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:1]), ("batch",))
    spec = PartitionSpec("batch")
    tree = wholebody_hinges() if which == "hinges" else jb.load_model("wholebody", dtype=jnp.float64).tree
    q, qd, qdd, _, _ = states(tree, 20, seed=9)
    want = np.asarray(batched(tree, q, qd, qdd))
    vm = jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0))
    got = jax.jit(jax.shard_map(lambda a, b, c: vm(tree, a, b, c), mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(
        q, qd, qdd
    )
    assert rel(got, want) < 1e-14
    one = jax.jit(
        jax.shard_map(
            lambda a, b, c: jb.inverse_dynamics(tree, a[0], b[0], c[0])[None],
            mesh=mesh,
            in_specs=(PartitionSpec(),) * 3,
            out_specs=PartitionSpec(),
        )
    )
    assert rel(one(q[:1], qd[:1], qdd[:1])[0], want[0]) < 1e-12
