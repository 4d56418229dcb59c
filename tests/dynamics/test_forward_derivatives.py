"""Derivatives of forward dynamics (`jaxbio.dynamics.forward.accelerations`'s rule from the
inverse-dynamics identity) against Pinocchio's analytical ABA derivatives and against plain
autodiff of the solve ``M⁻¹ (tau − bias)`` (the mass matrix by its Jacobian route, the bias by
the recursion), for states, external wrenches, added inertia and the model's own parameters;
batched, second order and float32."""

from __future__ import annotations

import numpy as np
import pytest

pin = pytest.importorskip("pinocchio")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from tests import pinocchio_ref as ref  # noqa: E402
from tests._models import random_mixed_state, random_mixed_tree_dict, random_model_dict  # noqa: E402
from tests.dynamics.test_pinocchio import random_state, random_tree_dict  # noqa: E402

pytestmark = pytest.mark.usefixtures("_float64")


def _reference(tree, q, qd, tau, added, external):
    """``(M + diag(added))⁻¹ (tau − bias)`` by plain autodiff: no custom rule on the path."""
    from jaxbio.dynamics._mass_matrix import _jacobian_mass_matrix
    from jaxbio.dynamics._rnea import rnea

    M = _jacobian_mass_matrix(tree, q) + jnp.diag(added)
    return jnp.linalg.solve(M, tau - rnea(tree, q, qd, jnp.zeros_like(qd), external)[0])


def _close(a, b, what, tol=1e-9):
    a, b = np.asarray(a), np.asarray(b)
    err = np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b)))
    assert err < tol, f"{what}: relative error {err:.2e}"


@pytest.mark.parametrize("n, seed", [(3, 0), pytest.param(6, 1, marks=pytest.mark.slow)])
def test_jacobians_match_pinocchio_aba_derivatives(jb, n, seed):
    """``∂q̈/∂(q, q̇, tau)`` by forward and by reverse mode equal `pinocchio.computeABADerivatives`."""
    from jaxbio.dynamics.forward import accelerations

    d = random_tree_dict(n, seed)
    tree, model = jb.SegmentTree.from_dict(d), ref.build_pinocchio_model(d)
    s = random_state(np.random.default_rng(seed), n)
    q, qd, tau = (jnp.asarray(s[k]) for k in ("q", "qd", "tau"))
    data = model.createData()
    pin.computeABADerivatives(
        model, data, ref.q_to_pin(model, s["q"]), ref.v_to_pin(model, s["qd"]), ref.v_to_pin(model, s["tau"])
    )
    want = [ref.matrix_from_pin(model, np.asarray(m)) for m in (data.ddq_dq, data.ddq_dv, data.Minv)]
    want[2] = np.triu(want[2]) + np.triu(want[2], 1).T if not np.allclose(want[2], want[2].T) else want[2]
    f = lambda q, qd, tau: accelerations(tree, q, qd, tau)  # noqa: E731
    for mode in (jax.jacfwd, jax.jacrev):
        got = jax.jit(mode(f, argnums=(0, 1, 2)))(q, qd, tau)
        for g, w, name in zip(got, want, ("dq", "dqd", "dtau")):
            _close(g, w, f"{mode.__name__} {name}", 1e-8)


def _mixed_case(jb, seed):
    rng = np.random.default_rng(seed)
    d = random_mixed_tree_dict(rng, 5)
    tree = jb.SegmentTree.from_dict(d)
    s = random_mixed_state(rng, d)
    q, qd, tau = (jnp.asarray(s[k]) for k in ("q", "qd", "tau"))
    external = (jnp.asarray(s["force"]), jnp.asarray(s["moment"]))
    added = jnp.asarray(rng.uniform(0.0, 0.3, tree.nv))
    return tree, q, qd, tau, added, external


@pytest.mark.slow  # 80 s: compiles the mixed tree's recursions in reverse and forward mode twice
@pytest.mark.parametrize("seed", [0, 1])
def test_gradients_equal_autodiff_of_the_solve(jb, seed):
    """Ball and free joints, external wrenches, added inertia and the model's masses, centres of mass
    and inertias: ``jvp`` and ``grad`` equal plain autodiff of the solve, and ``forward_dynamics``
    uses the same rule."""
    from jaxbio.dynamics.forward import accelerations

    tree, q, qd, tau, added, external = _mixed_case(jb, seed)
    w = jnp.asarray(np.random.default_rng(seed + 10).normal(size=tree.nv))
    args = (tree, q, qd, tau, added, external)
    for fn, name in ((accelerations, "rule"), (_reference, "reference")):
        assert np.all(np.isfinite(np.asarray(fn(*args)))), name
    _close(accelerations(*args), _reference(*args), "value", 1e-10)
    loss = lambda fn: lambda *a: jnp.dot(w, fn(*a))  # noqa: E731
    got = jax.jit(jax.grad(loss(accelerations), argnums=(0, 1, 2, 3, 4, 5)))(*args)
    want = jax.jit(jax.grad(loss(_reference), argnums=(0, 1, 2, 3, 4, 5)))(*args)
    for part in ("masses", "coms"):
        _close(getattr(got[0], part), getattr(want[0], part), f"grad {part}")
    # inertias enter as symmetric matrices; the two routes differ off the symmetric subspace
    # (the Jacobian route symmetrises M), so compare the symmetric parts
    sym = lambda g: 0.5 * (g + np.swapaxes(g, -1, -2))  # noqa: E731
    _close(sym(np.asarray(got[0].inertias)), sym(np.asarray(want[0].inertias)), "grad inertias (symmetric part)")
    for g, wnt, name in zip(got[1:], want[1:], ("q", "qd", "tau", "added", "external")):
        for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(wnt)):
            _close(a, b, f"grad {name}")
    tangents = tuple(
        jax.tree_util.tree_map(lambda x: jnp.asarray(np.random.default_rng(3).normal(size=x.shape)), a)
        for a in (q, qd, tau, added, external)
    )
    jv = lambda fn: jax.jit(lambda *a: jax.jvp(lambda *a: fn(tree, *a), a, tangents)[1])(*args[1:])  # noqa: E731
    _close(jv(accelerations), jv(_reference), "jvp")
    fd = jax.jit(jax.grad(lambda q: jnp.dot(w, jb.forward_dynamics(tree, q, qd, tau, external))))(q)
    fd_want = jax.jit(jax.grad(lambda q: jnp.dot(w, _reference(tree, q, qd, tau, jnp.zeros_like(tau), external))))(q)
    _close(fd, fd_want, "forward_dynamics grad q")


@pytest.mark.slow  # 70 s
def test_batched_and_second_order(jb):
    """``grad`` of a vmapped sum (the batch-last kernels forward, the rule backward) equals the
    per-state gradients, and a Hessian (``jacfwd`` of ``jacrev``) equals plain autodiff's."""
    from jaxbio.dynamics.forward import accelerations

    tree = jb.load_model("arm7").tree
    rng = np.random.default_rng(4)
    q, qd, tau = (jnp.asarray(rng.uniform(-1, 1, (16, tree.nv))) for _ in range(3))
    zero = jnp.zeros(tree.nv)
    batched = jax.jit(jax.grad(lambda q: jnp.sum(jax.vmap(lambda *a: accelerations(tree, *a))(q, qd, tau) ** 2)))(q)
    one_grad = jax.jit(jax.grad(lambda x, v, t: jnp.sum(_reference(tree, x, v, t, zero, None) ** 2)))
    one = [one_grad(q[k], qd[k], tau[k]) for k in range(3)]
    _close(batched[:3], np.stack(one), "vmapped grad")
    h = jax.jit(jax.jacfwd(jax.jacrev(lambda x: jnp.sum(accelerations(tree, x, qd[0], tau[0]) ** 2))))(q[0])
    h_want = jax.jit(jax.hessian(lambda x: jnp.sum(_reference(tree, x, qd[0], tau[0], zero, None) ** 2)))(q[0])
    _close(h, h_want, "hessian", 1e-8)


def test_float32_gradients_agree_with_float64(jb):
    """The rule in float32 agrees with float64 within float32's round-off."""
    from jaxbio.dynamics.forward import accelerations

    rng = np.random.default_rng(5)
    state = [rng.uniform(-1, 1, 7) for _ in range(3)]
    out = {}
    for dtype in (jnp.float32, jnp.float64):
        tree = jb.load_model("arm7", dtype=dtype).tree
        q, qd, tau = (jnp.asarray(x, dtype) for x in state)
        out[dtype] = jax.jit(jax.grad(lambda q: jnp.sum(accelerations(tree, q, qd, tau) ** 2)))(q)
        assert out[dtype].dtype == dtype
    _close(out[jnp.float32], out[jnp.float64], "float32 vs float64", 2e-3)


@pytest.mark.slow  # 67 s: the mixed tree's recursions in reverse and forward mode, twice
@pytest.mark.parametrize("seed", [0])
def test_accelerations_at_a_known_value(jb, seed):
    """`accelerations_at` (the value given, as a solver's stored stage gives it): its value is the
    given ``qdd`` and its ``jvp`` and ``grad`` in every argument (the model's parameters and the
    external wrenches included) equal those of `accelerations` at that point; under `jax.vmap` on
    arm7 (the batch-last adjoint in reverse mode) too."""
    from jaxbio.dynamics.forward import accelerations, accelerations_at

    tree, q, qd, tau, added, external = _mixed_case(jb, seed)
    qdd = accelerations(tree, q, qd, tau, added, external)
    w = jnp.asarray(np.random.default_rng(seed + 10).normal(size=tree.nv))
    known = lambda tr, q, qd, tau, added, external: accelerations_at(tr, q, qd, tau, qdd, added, external)  # noqa: E731
    args = (tree, q, qd, tau, added, external)
    np.testing.assert_array_equal(known(*args), qdd)
    loss = lambda fn: lambda *a: jnp.dot(w, fn(*a))  # noqa: E731
    got = jax.jit(jax.grad(loss(known), argnums=(0, 1, 2, 3, 4, 5)))(*args)
    want = jax.jit(jax.grad(loss(accelerations), argnums=(0, 1, 2, 3, 4, 5)))(*args)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        _close(a, b, "grad", 1e-12)
    tangents = tuple(
        jax.tree_util.tree_map(lambda x: jnp.asarray(np.random.default_rng(3).normal(size=x.shape)), a)
        for a in (q, qd, tau, added, external)
    )
    jv = lambda fn: jax.jit(lambda *a: jax.jvp(lambda *a: fn(tree, *a), a, tangents)[1])(*args[1:])  # noqa: E731
    _close(jv(known), jv(accelerations), "jvp", 1e-12)

    arm = jb.load_model("arm7").tree
    rng = np.random.default_rng(5)
    qs, qds, taus = (jnp.asarray(rng.uniform(-1, 1, (8, arm.nv))) for _ in range(3))
    qdds = jax.vmap(lambda *a: accelerations(arm, *a))(qs, qds, taus)

    def batched(fn):
        return jax.jit(jax.grad(lambda x, v: jnp.sum(jax.vmap(fn)(x, v, taus, qdds) ** 2), argnums=(0, 1)))(qs, qds)

    got = batched(lambda x, v, t, a: accelerations_at(arm, x, v, t, a))
    want = batched(lambda x, v, t, a: accelerations(arm, x, v, t))
    for a, b in zip(got, want):
        _close(a, b, "vmapped grad", 1e-12)


def test_accelerations_at_with_the_kept_factor(jb):
    """`accelerations_factored` (what a solver's stored pass keeps) on arm7 under `jax.vmap`: the
    accelerations equal `accelerations`', the factor is numpy's Cholesky factor of ``M + J``
    (packed by columns); `accelerations_at` given that factor has the gradient of `accelerations`
    (batch-last adjoint in reverse mode, no mass matrix); above ``UNROLL_MAX`` coordinates no
    factor is kept."""
    from jaxbio.dynamics.forward import accelerations, accelerations_at, accelerations_factored, factor_size, inertia

    arm = jb.load_model("arm7").tree
    rng = np.random.default_rng(6)
    qs, qds, taus = (jnp.asarray(rng.uniform(-1, 1, (8, arm.nv))) for _ in range(3))
    added = jnp.asarray(rng.uniform(0.0, 0.3, arm.nv))
    qdds = jax.vmap(lambda *a: accelerations(arm, *a, added))(qs, qds, taus)
    got, factors = jax.jit(jax.vmap(lambda *a: accelerations_factored(arm, *a, added)))(qs, qds, taus)
    _close(got, qdds, "factored accelerations", 1e-12)
    L = np.linalg.cholesky(np.asarray(jax.vmap(lambda x: inertia(arm, x, added))(qs)))
    assert factor_size(arm) == 28
    _close(factors, np.concatenate([L[:, k:, k] for k in range(arm.nv)], axis=1), "factor", 1e-12)

    def grad(fn):
        return jax.jit(jax.grad(lambda x, v, t: jnp.sum(jax.vmap(fn)(x, v, t, qdds, factors) ** 2), argnums=(0, 1, 2)))(
            qs, qds, taus
        )

    want = grad(lambda x, v, t, a, f: accelerations(arm, x, v, t, added))
    for a, b in zip(grad(lambda x, v, t, a, f: accelerations_at(arm, x, v, t, a, added, factor=f)), want):
        _close(a, b, "vmapped grad with the factor", 1e-11)
    chain = jb.SegmentTree.from_dict(random_model_dict(np.random.default_rng(0), 13, chain=True))
    assert factor_size(chain) is None
    assert accelerations_factored(chain, *(jnp.zeros(13) for _ in range(3)))[1] is None
