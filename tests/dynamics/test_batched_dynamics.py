"""Under `jax.vmap`, the Hamiltonian vector field's parts run on the batch-last kernels of
`jaxbio.dynamics.batch_last`: ``∂T/∂q`` by the momentum variant of the wrench recursion, ``M`` by the
composite-rigid-body algorithm, ``g`` by `inverse_dynamics`.

References, all independent of those kernels: ``jax.grad`` of `kinetic_energy`, the segment-Jacobian
mass matrix, ``jax.grad`` of `hamiltonian` through its Cholesky factorisation, single-state loops
and central differences.
"""

from __future__ import annotations

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import hamiltonian as ham
from jaxbio.dynamics import kinetic_energy_gradient
from jaxbio.dynamics.batch_last import mass_matrix_batch
from jaxbio.dynamics._mass_matrix import _jacobian_mass_matrix
from jaxbio.model import model_path
from tests._models import hinge_chains, random_mixed_state, random_mixed_tree_dict, random_model_dict

MODELS = ("double_pendulum", "arm7", "sagittal11", "wholebody", "arm26")
BATCH = 300  # two chunks on CPU, the second overlapping the first


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1.0))


def wholebody_hinges():
    """The shipped wholebody with its ball and free joints as hinge chains (`hinge_chains`): an
    axial tree of 28 segments, so that the batch-last kernels run on a whole body."""
    d = hinge_chains(json.loads(model_path("wholebody").read_text()))
    return jb.SegmentTree.from_dict(d, dtype=jnp.float64)


def trees():
    out = [(name, jb.load_model(name, dtype=jnp.float64).tree) for name in MODELS]
    out.append(("wholebody_hinges", wholebody_hinges()))
    for seed in (0, 1):  # several roots, revolute and prismatic joints
        d = random_model_dict(np.random.default_rng(200 + seed), 13)
        out.append((f"random{seed}", jb.SegmentTree.from_dict(d, dtype=jnp.float64)))
    return out


def states(tree, batch=BATCH, seed=0):
    """``batch`` configurations ``(batch, nq)`` (`jb.configuration.random`: angles and slides in
    [−2, 2], uniform ball-joint rotations) and velocities ``(batch, nv)`` in [−3, 3]."""
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    q = jax.vmap(lambda k: jb.configuration.random(tree, k, angle=2.0, distance=2.0))(keys)
    rng = np.random.default_rng(seed)
    return q, jnp.asarray(rng.uniform(-3, 3, (batch, tree.nv)))


def _reference_mass_matrices(tree, q):
    """``(B, nv, nv)`` mass matrices by the Jacobian route, one compiled vmap over the states."""
    return jax.jit(jax.vmap(lambda a: _jacobian_mass_matrix(tree, a)))(q)


#: exhaustive cases (default-run budget): arm7, sagittal11, wholebody and random1 keep the
#: chain, branched, ball/free and random-root kernels covered by default
_SLOW_TREES = ("double_pendulum", "arm26", "wholebody_hinges", "random0")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,tree",
    [pytest.param(n, t, marks=[pytest.mark.slow] if n in _SLOW_TREES else []) for n, t in trees()],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_vmapped_kinetic_energy_gradient_and_mass_matrix(name, tree):
    q, qd = states(tree)
    got = jax.jit(jax.vmap(lambda a, b: kinetic_energy_gradient(tree, a, b)))(q, qd)
    if tree.is_axial:
        want = jax.jit(jax.vmap(jax.grad(lambda a, b: jb.kinetic_energy(tree, a, b))))(q, qd)
    else:  # ball/free joints: Ṁ qd − C qd, not ∂T/∂q (kinetic_energy_gradient); single states
        one = jax.jit(lambda a, b: kinetic_energy_gradient(tree, a, b))
        want = np.stack([one(q[k], qd[k]) for k in range(len(q))])
    assert rel(got, want) < 1e-12
    M = jax.jit(jax.vmap(lambda a: jb.mass_matrix(tree, a)))(q)
    assert rel(M, _reference_mass_matrices(tree, q)) < 1e-12
    assert np.array_equal(M, np.swapaxes(M, 1, 2))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["arm7", "sagittal11"])
def test_vmapped_dH_dq_equals_the_gradient_of_H(name):
    tree = jb.load_model(name, dtype=jnp.float64).tree
    q, p = states(tree, 50, seed=3)
    qd = jax.jit(jax.vmap(lambda a, b: ham.velocities(tree, a, b)))(q, p)
    got = jax.jit(jax.vmap(lambda a, b: ham.dH_dq(tree, a, b)))(q, qd)
    want = jax.jit(jax.vmap(jax.grad(lambda a, b: ham.hamiltonian(tree, a, b))))(q, p)  # through Cholesky
    assert rel(got, want) < 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("which", ["sagittal11", "mixed"])
def test_vmapped_vector_field_equals_single_states(which):
    """The vector field under vmap (the kernels) against single states (the per-state recursions),
    on a hinge model and on a tree with a free root, ball and fixed joints."""
    rng = np.random.default_rng(4)
    if which == "mixed":
        d = random_mixed_tree_dict(np.random.default_rng(42), 8)
        tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
        rows = [random_mixed_state(rng, d) for _ in range(40)]
        q, qd = (jnp.asarray(np.stack([r[k] for r in rows])) for k in ("q", "qd"))
    else:
        tree = jb.load_model(which, dtype=jnp.float64).tree
        q, qd = states(tree, 40, seed=4)
    nv = tree.nv
    system = jb.HamiltonianSystem(
        tree,
        drive=ham.ConstantDrive(jnp.asarray(rng.normal(size=nv))),
        dissipation=ham.LinearDamping(jnp.asarray(rng.uniform(0, 2, nv))),
    )
    y = jax.vmap(lambda a, b: system.initial_state(a, b))(q, qd)
    got = jax.jit(jax.vmap(lambda s: system.vector_field(0.2, s)))(y)
    one = jax.jit(lambda s: system.vector_field(0.2, s))
    for k in (0, 17, 39):
        want = one(jax.tree_util.tree_map(lambda x: x[k], y))
        for key in want:
            assert rel(got[key][k], want[key]) < 1e-11


@pytest.mark.slow
def test_derivatives_of_vmapped_paths_against_central_differences():
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    q, qd = states(tree, 3, seed=5)
    w = jnp.asarray(np.random.default_rng(6).normal(size=(3, 7, 7)))

    @jax.jit
    def scalar(x):  # a weighted sum of both vmapped quantities
        M = jax.vmap(lambda a: jb.mass_matrix(tree, a))(x)
        g = jax.vmap(lambda a, b: kinetic_energy_gradient(tree, a, b))(x, qd)
        return jnp.sum(w * M) + jnp.sum(w[:, 0] * g)

    grad = jax.jit(jax.grad(scalar))(q)
    h = 1e-6
    for i, j in [(0, 0), (1, 3), (2, 6)]:
        e = jnp.zeros_like(q).at[i, j].set(h)
        fd = (scalar(q + e) - scalar(q - e)) / (2 * h)
        assert abs(float(grad[i, j] - fd)) < 1e-7 * max(1.0, abs(float(fd)))


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_vmap_over_subjects_uses_each_tree():
    base = jb.load_model("arm7", dtype=jnp.float64).tree
    subjects = [eqx.tree_at(lambda t: t.masses, base, s * base.masses) for s in (0.8, 1.0, 1.3)]
    batch_tree = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *subjects)
    q, qd = states(base, 3, seed=7)
    M = eqx.filter_jit(jax.vmap(jb.mass_matrix))(batch_tree, q)
    g = eqx.filter_jit(jax.vmap(kinetic_energy_gradient))(batch_tree, q, qd)

    @eqx.filter_jit
    def reference(t, a, b):  # one subject at a time, by the Jacobian route and autodiff
        return _jacobian_mass_matrix(t, a), jax.grad(lambda x: jb.kinetic_energy(t, x, b))(a)

    for k, tree_k in enumerate(subjects):
        M_k, g_k = reference(tree_k, q[k], qd[k])
        assert rel(M[k], M_k) < 1e-12
        assert rel(g[k], g_k) < 1e-12


def test_accelerator_mass_matrix_layout():
    """The accelerator layout of the batched mass matrix (one chunk, no multi-output fusions),
    run here on the CPU: the Jacobian route's matrices."""
    tree = wholebody_hinges()
    q, _ = states(tree, 20, seed=8)
    got = jax.jit(lambda a: mass_matrix_batch(tree, a, layout="accelerator"))(q)
    assert rel(got, _reference_mass_matrices(tree, q)) < 1e-12


@pytest.mark.parametrize("layout", ["cpu", pytest.param("accelerator", marks=pytest.mark.slow)])
def test_kernels_on_ball_free_and_fixed_joints(layout):
    """The three kernels on a tree mixing every joint type (an inner free joint, massless frames,
    rods), two chunks, quaternions of any norm (the dynamics use ``Q/|Q|``): the per-state
    recursion, the Jacobian mass matrix and ``Ṁ qd − C qd`` by two recursions, vmapped."""
    from importlib import import_module

    from jaxbio.dynamics import batch_last as _batched
    from jaxbio.dynamics.energy import _momentum_rate

    rnea = import_module("jaxbio.dynamics._rnea").rnea
    d = random_mixed_tree_dict(np.random.default_rng(44), 12, free_inner=True, p_massless=0.4, p_rod=0.3)
    tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    assert {"free", "spherical", "fixed"} <= set(tree.joint_types)
    rng = np.random.default_rng(10)
    rows = [random_mixed_state(rng, d) for _ in range(BATCH)]
    q, qd, qdd, f, m = (jnp.asarray(np.stack([r[k] for r in rows])) for k in ("q", "qd", "qdd", "force", "moment"))
    quat = tree.joint_layout.quat_q
    q = q.at[:, quat].multiply(jnp.asarray(rng.uniform(0.5, 2.0, (BATCH, len(quat), 1))))
    kw = dict(layout=layout, chunk=None if layout == "accelerator" else 256)
    tau = _batched.inverse_dynamics_batch(tree, q, qd, qdd, (f, m), **kw)
    assert rel(tau, jax.jit(jax.vmap(lambda *s: rnea(tree, *s[:3], s[3:])[0]))(q, qd, qdd, f, m)) < 1e-12
    g = _batched.kinetic_energy_gradient_batch(tree, q, qd, **kw)
    assert rel(g, jax.jit(jax.vmap(lambda a, b: _momentum_rate(tree, a, b)))(q, qd)) < 1e-12
    M = _batched.mass_matrix_batch(tree, q, **kw)
    assert M.shape == (BATCH, tree.nv, tree.nv)
    assert rel(M, _reference_mass_matrices(tree, q)) < 1e-12


def test_kinetic_energy_gradient_bad_input():
    """Wrong shapes raise before tracing; NaN raises with ``check=True`` (also under vmap) and
    stays NaN, never a plausible number, without it."""
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    with pytest.raises(ValueError, match=r"qd has shape \(6,\), expected \(7,\)"):
        kinetic_energy_gradient(tree, jnp.zeros(7), jnp.zeros(6))
    with pytest.raises(ValueError, match=r"q has shape \(7, 2\)"):
        kinetic_energy_gradient(tree, jnp.zeros((7, 2)), jnp.zeros(7))
    q, qd = states(tree, 4, seed=9)
    qd = qd.at[2, 1].set(jnp.nan)
    out = np.asarray(jax.jit(jax.vmap(lambda a, b: kinetic_energy_gradient(tree, a, b)))(q, qd))
    assert np.isnan(out[2]).any() and np.isfinite(np.delete(out, 2, axis=0)).all()
    checked = jax.jit(jax.vmap(lambda a, b: kinetic_energy_gradient(tree, a, b, check=True)))
    with pytest.raises(Exception, match="qd contains NaN or inf"):
        jax.block_until_ready(checked(q, qd))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [1, 2, 3, 5])
def test_chained_scan_equals_lax_scan(length, reverse):
    """`_batched._scan` (a ``while_loop`` whose stages, writes and counter form one chain, with
    unsigned indices) against `jax.lax.scan` on the same step: carry, stacked outputs, integer
    scanned inputs, a NaN in the carry that must stay in its own entries, forward and reversed."""
    from jaxbio.dynamics.batch_last import _Chained, _scan, _write

    rng = np.random.default_rng(length)
    table = {"a": jnp.asarray(rng.normal(size=(length + 1, 4))), "b": jnp.asarray(rng.normal(size=(length + 1, 4)))}
    table["a"] = table["a"].at[0, 1].set(jnp.nan)
    xs = (jnp.asarray(rng.normal(size=(length, 1, 4))), np.arange(length), rng.integers(0, length + 1, length))

    def step(table, x, chained=False):
        row, t, parent = x
        keep = _Chained(lambda z: z) if chained else (lambda z: z)
        new = keep({"a": jnp.sin(table["a"][parent][None] + row[0]), "b": table["b"][parent][None] * row[0]})
        out = keep((new["a"][0, :2] - new["b"][0, 2:], t * 2.0))
        if chained:
            return _write(table, new, t + 1, after=keep.last), out
        return tree_at_rows(table, new, t + 1), out

    def tree_at_rows(table, rows, start):
        return {k: jax.lax.dynamic_update_slice_in_dim(table[k], rows[k], start, 0) for k in table}

    got = jax.jit(lambda tb: _scan(lambda c, x: step(c, x, chained=True), tb, xs, reverse=reverse))(table)
    want = jax.jit(lambda tb: jax.lax.scan(step, tb, jax.tree_util.tree_map(jnp.asarray, xs), reverse=reverse))(table)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
