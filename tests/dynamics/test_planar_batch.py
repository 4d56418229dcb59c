"""The planar Hamiltonian-flow kernel (`jaxbio.dynamics.planar_batch`): what `jax.vmap` of the
vector field runs for a planar tree.

References: the per-state route (`jaxbio.hamiltonian._plain_tree_terms`: 3-D segment Jacobians,
LAPACK Cholesky, autodiff ∂T/∂q, gravity by the wrench recursion) one state at a time under
`jax.lax.map`, and the general 3-D batch kernel (`_batched._flow_chunk`); float64. The random
trees branch, mix revolute (``+z`` and ``−z``) and prismatic joints, turn joint frames about ``z``
and carry out-of-plane numbers (z of origins and COMs, products of inertia with z) that the planar
dynamics must ignore.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import hamiltonian as ham
from jaxbio.dynamics import batch_last as _batched, planar_batch as _planar_batch
from jaxbio.hamiltonian import solver_field
from jaxbio.tree import SegmentTree

BATCH = 300  # two chunks on CPU, the second overlapping the first


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1.0))


def planar_tree(n: int, seed: int) -> SegmentTree:
    """A random planar tree of ``n`` segments (see the module docstring)."""
    rng = np.random.default_rng(seed)
    angle = rng.uniform(0, 2 * np.pi)
    segments = []
    for i in range(n):
        parent = int(rng.integers(-1, i))
        revolute = i == 0 or rng.random() < 0.7
        if revolute:
            axis = [0.0, 0.0, float(rng.choice([-1.0, 1.0]))]
        else:
            a = rng.uniform(0, 2 * np.pi)
            axis = [float(np.cos(a)), float(np.sin(a)), 0.0]
        turn = rng.uniform(-np.pi, np.pi)
        mass = float(rng.uniform(0.2, 5.0))
        B = rng.normal(size=(3, 3))
        S = mass * 0.01 * (B @ B.T + 0.1 * np.eye(3))  # second moments ∫ r rᵀ dm about the COM
        inertia = np.trace(S) * np.eye(3) - S  # a rigid body's, products of inertia with z included
        segments.append(
            {
                "name": f"seg{i}",
                "parent": None if parent < 0 else f"seg{parent}",
                "joint": {
                    "type": "revolute" if revolute else "prismatic",
                    "axis": axis,
                    "origin": rng.uniform(-0.5, 0.5, 3).tolist(),
                    "orientation": [float(np.cos(turn / 2)), 0.0, 0.0, float(np.sin(turn / 2))],
                },
                "mass": mass,
                "com": rng.uniform(-0.3, 0.3, 3).tolist(),
                "inertia": inertia.tolist(),
            }
        )
    model = {
        "format": "jaxbio-model",
        "version": 1,
        "name": f"planar{n}_{seed}",
        "gravity": [9.81 * np.cos(angle), 9.81 * np.sin(angle), 0.0],
        "segments": segments,
    }
    return SegmentTree.from_dict(model, dtype=jnp.float64)


def states(tree, batch, seed):
    rng = np.random.default_rng(seed)
    return (
        jnp.asarray(rng.uniform(-2, 2, (batch, tree.nv))),
        jnp.asarray(rng.uniform(-3, 3, (batch, tree.nv))),
        jnp.asarray(rng.uniform(0.0, 0.5, (batch, tree.nv))),
    )


def per_state(tree, q, p, added):
    return jax.jit(lambda *s: jax.lax.map(lambda x: ham._plain_tree_terms(tree, *x), s))(q, p, added)


def general_kernel(tree, q, p, added, layout="cpu"):
    out = _batched.chunked(
        tree, _batched._flow_chunk, [q, p, added], None, chunk=None, layout=layout, schedule=None, width=2 * tree.nv
    )
    return out[:, : tree.nv], out[:, tree.nv :]


@pytest.mark.parametrize(
    "n, seed", [(2, 0), pytest.param(5, 1, marks=pytest.mark.slow), pytest.param(8, 2, marks=pytest.mark.slow)]
)
def test_planar_kernel_equals_the_per_state_route(n, seed):
    """Both layouts, two chunks, added inertia: the planar kernel against the per-state route and
    the general 3-D kernel."""
    tree = planar_tree(n, seed)
    assert _planar_batch.planar(tree) is True
    q, p, added = states(tree, BATCH, seed)
    want_qd, want_g = per_state(tree, q, p, added)
    for layout in ("cpu", "accelerator"):
        qd, g = jax.jit(lambda *s: _batched.hamiltonian_flow_batch(tree, *s, layout=layout))(q, p, added)
        assert rel(qd, want_qd) < 1e-12 and rel(g, want_g) < 1e-11, layout
    qd3, g3 = jax.jit(lambda *s: general_kernel(tree, *s))(q, p, added)
    assert rel(qd, qd3) < 1e-12 and rel(g, g3) < 1e-11


@pytest.mark.parametrize("name", ["double_pendulum", pytest.param("sagittal11", marks=pytest.mark.slow)])
def test_planar_models(name):
    """The embedded planar models (a hinge chain; a sagittal body with a prismatic root) take the
    planar kernel and agree with the per-state route."""
    tree = jb.load_model(name, dtype=jnp.float64).tree
    assert _planar_batch.planar(tree) is True
    q, p, added = states(tree, 40, 5)
    qd, g = jax.jit(lambda *s: _batched.hamiltonian_flow_batch(tree, *s))(q, p, added)
    want_qd, want_g = per_state(tree, q, p, added)
    assert rel(qd, want_qd) < 1e-12 and rel(g, want_g) < 1e-11


def test_which_trees_are_planar():
    """3-D and tilted trees are not; a traced tree is decided at run time (None); the deviation is
    the size of the tilt."""
    assert _planar_batch.planar(jb.load_model("arm7").tree) is False
    assert _planar_batch.planar(jb.load_model("wholebody").tree) is False
    tree = planar_tree(3, 4)
    tilted = eqx.tree_at(lambda t: t.axes, tree, tree.axes.at[0].set(jnp.asarray([1e-6, 0.0, 1.0])))
    assert _planar_batch.planar(tilted) is False
    assert abs(float(_planar_batch.deviation(tilted, np)) - 1e-6) < 1e-12
    assert float(_planar_batch.deviation(tree, np)) < 1e-15
    lifted = eqx.tree_at(lambda t: t.gravity, tree, tree.gravity.at[2].set(0.5))
    assert _planar_batch.planar(lifted) is False
    seen = []
    jax.jit(lambda t: seen.append(_planar_batch.planar(t)) or t.masses)(tree)
    assert seen == [None]


def test_traced_tree_picks_the_kernel_at_run_time():
    """With the tree an argument of `jax.jit` (as inside Diffrax's solve), the planar and the
    general kernel are both compiled and the tree's numbers choose: a planar tree and the same tree
    tilted out of the plane, each against the per-state route."""
    flow = jax.jit(lambda t, *s: jax.vmap(ham._tree_terms, in_axes=(None, 0, 0, 0))(t, *s))
    tree = planar_tree(4, 6)
    tilted = eqx.tree_at(lambda t: t.axes, tree, tree.axes.at[1].set(jnp.asarray([0.3, 0.0, 1.0])))
    for t in (tree, tilted):
        q, p, added = states(t, 8, 7)
        qd, g = flow(t, q, p, added)
        want_qd, want_g = per_state(t, q, p, added)
        assert rel(qd, want_qd) < 1e-12 and rel(g, want_g) < 1e-11, t.name


def test_planar_kernel_float32():
    """float32 against float64 (random planar tree)."""
    tree = planar_tree(5, 8)
    q, p, added = states(tree, 64, 9)
    qd, g = jax.jit(lambda *s: _batched.hamiltonian_flow_batch(tree, *s))(q, p, added)
    t32 = tree.astype(jnp.float32)
    qd32, g32 = jax.jit(lambda *s: _batched.hamiltonian_flow_batch(t32, *s))(
        *(x.astype(jnp.float32) for x in (q, p, added))
    )
    assert qd32.dtype == jnp.float32
    assert rel(qd32, qd) < 1e-4 and rel(g32, g) < 1e-4


def test_solver_field_decides_before_tracing(monkeypatch):
    """`jb.hamiltonian.solver_field` (what `jb.simulate` integrates) makes the kernel choice from
    the concrete tree, so the traced solve compiles one kernel and never asks the tree's tilt at
    run time; a system traced by the caller's jit keeps the run-time choice. Same numbers as
    `HamiltonianSystem.vector_field` either way."""
    system = jb.HamiltonianSystem(planar_tree(3, 10), dissipation=ham.LinearDamping(0.3))
    assert solver_field(system).planar is True
    assert solver_field(jb.HamiltonianSystem(jb.load_model("arm26", dtype=jnp.float64))).planar is False
    q, p, _ = states(system.tree, 16, 11)
    y = jax.vmap(system.initial_state)(q, p)
    want = jax.jit(jax.vmap(lambda s: system.vector_field(0.1, s)))(y)
    asked = []
    deviation = _planar_batch.deviation

    def spy(tree, xp=jnp):  # the run-time question: the tilt of traced numbers
        if xp is jnp:
            asked.append(tree)
        return deviation(tree, xp)

    monkeypatch.setattr(_planar_batch, "deviation", spy)

    def final(system, q0):
        return jb.simulate(system, system.initial_state(q0), 0.0, 0.2).q[-1]

    got = jax.jit(jax.vmap(lambda s: solver_field(system)(0.1, s)))(y)
    jax.jit(jax.vmap(lambda q0: final(system, q0)))(q)
    assert not asked
    for key in want:
        assert rel(got[key], want[key]) < 1e-13, key
    traced = jax.jit(lambda sys, s: jax.vmap(lambda x: solver_field(sys)(0.1, x))(s))(system, y)
    assert asked
    for key in want:
        assert rel(traced[key], want[key]) < 1e-13, key


def test_absolute_coordinates_refuse_a_small_tilt():
    """`jaxbio.dynamics.absolute` reads the same `deviation`: a hinge tilted by 1e-4 rad out of the
    plane is refused (the former test, ``1 − |s_z| ≤ 1e-6``, let tilts up to 1.4e-3 rad through),
    the planar tree itself is not."""
    from jaxbio.dynamics import absolute

    tree = planar_tree(3, 12)
    jax.block_until_ready(jax.jit(absolute.absolute_coordinates)(tree, jnp.zeros(tree.nq)))
    axis = jnp.asarray([np.sin(1e-4), 0.0, np.cos(1e-4)])
    tilted = eqx.tree_at(lambda t: t.axes, tree, tree.axes.at[0].set(axis))
    with pytest.raises(Exception, match="not planar"):
        jax.block_until_ready(jax.jit(absolute.absolute_coordinates)(tilted, jnp.zeros(tree.nq)))


def test_solver_field_bad_input():
    system = jb.HamiltonianSystem(planar_tree(2, 13))
    with pytest.raises(ValueError, match="HamiltonianSystem"):
        solver_field(system.tree)
    with pytest.raises(ValueError, match="form"):
        solver_field(system, "momentum")


@pytest.mark.parametrize("name", ["double_pendulum", pytest.param("sagittal11", marks=pytest.mark.slow)])
def test_velocity_form_kernels(name):
    """The velocity form's 2-D formulas (`planar_batch._inverse_dynamics`, `_accelerations_factored`)
    against the 3-D code: `jb.inverse_dynamics` and its Jacobians in ``q`` and ``qd`` (by
    `jax.jacfwd`), `jb.forward_dynamics` with an added inertia, the packed Cholesky factor of
    ``M + J``; one state and under `jax.vmap`."""
    from jaxbio._linalg import cholesky
    from jaxbio.dynamics.forward import accelerations, inertia

    tree = jb.load_model(name, dtype=jnp.float64).tree
    q, qd, added = states(tree, 6, 14)
    qdd = jnp.asarray(np.random.default_rng(15).normal(size=q.shape))
    want = jax.vmap(lambda *s: jb.inverse_dynamics(tree, *s))(q, qd, qdd)
    got = jax.vmap(lambda *s: _planar_batch._inverse_dynamics(tree, *s))(q, qd, qdd)
    assert rel(got, want) < 1e-13
    assert rel(_planar_batch._inverse_dynamics(tree, q[0], qd[0], qdd[0]), want[0]) < 1e-13
    for k in (0, 1):
        jac = jax.vmap(jax.jacfwd(lambda *s: _planar_batch._inverse_dynamics(tree, *s), k))(q, qd, qdd)
        ref = jax.vmap(jax.jacfwd(lambda *s: jb.inverse_dynamics(tree, *s), k))(q, qd, qdd)
        assert rel(jac, ref) < 1e-12, k
    a, L = jax.vmap(lambda *s: _planar_batch._accelerations_factored(tree, *s))(q, qd, qdd, added)
    assert rel(a, jax.vmap(lambda *s: accelerations(tree, *s))(q, qd, qdd, added)) < 1e-12
    assert rel(L, jax.vmap(lambda x, j: cholesky(inertia(tree, x, j)))(q, added)) < 1e-12


@pytest.mark.slow
def test_velocity_form_batch_gradient():
    """What `jb.simulate`'s default runs under reverse mode for a batch of a planar tree (the
    velocity form on the stored loop, its field in 2-D algebra under `jax.vmap`): the gradient of a
    loss over the saved states w.r.t. a drive's parameters and the initial states equals Diffrax's
    `RecursiveCheckpointAdjoint` gradient of the same velocity-form solve one state at a time (the
    3-D code, the same steps), and a wrong rule would fail it (rtol 1e-7; the gradient is O(1))."""
    import diffrax
    from jaxbio import _tsit5

    tree = jb.load_model("double_pendulum", dtype=jnp.float64).tree
    drive = ham.SpringDamperDrive(jnp.array([3.0, 2.0]), 0.5, 0.3)
    system = jb.HamiltonianSystem(tree, drive, ham.LinearDamping(jnp.full(2, 0.1)))
    assert solver_field(system, "velocity").planar is True
    q0 = jnp.array([[0.7, -0.4], [0.2, 0.5], [-0.3, 0.1]])
    ts = jnp.linspace(0.0, 1.0, 6)
    stored = dict(ts=ts, rtol=1e-9, atol=1e-9)  # the default: velocity form, StoredAdjoint
    ref = dict(
        ts=ts,
        dt0=_tsit5.FIRST_STEP,
        stepsize_controller=diffrax.PIDController(rtol=1e-9, atol=1e-9),
        form="velocity",
        adjoint=diffrax.RecursiveCheckpointAdjoint(),
    )

    def loss(kwargs, batched):
        def one(drive, q):
            s = eqx.tree_at(lambda s: s.drive, system, drive)
            return jnp.sum(jb.simulate(s, s.initial_state(q, form="velocity"), 0.0, 1.0, **kwargs).q ** 2)

        if batched:
            return lambda d, q: jnp.sum(jax.vmap(one, in_axes=(None, 0))(d, q))
        return lambda d, q: sum(one(d, q[i]) for i in range(q.shape[0]))

    got = jax.jit(jax.grad(loss(stored, True), (0, 1)))(drive, q0)
    want = jax.jit(jax.grad(loss(ref, False), (0, 1)))(drive, q0)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-7)
    for name in ("stiffness", "damping", "rest"):
        np.testing.assert_allclose(getattr(got[0], name), getattr(want[0], name), rtol=1e-7, err_msg=name)
