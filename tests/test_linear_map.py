"""`jaxbio._linear.linear_map` (a linear map with its own transpose) and the reverse-mode route it
gives `vmapped_by` (`jaxbio.dynamics.batch_last`): under `jax.vmap`, reverse mode of the wrench
recursion runs the batch-last adjoint kernel; every transformation and every combination of them
gives what plain autodiff of the per-state recursion gives."""

from __future__ import annotations

import dataclasses
import importlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxbio as jb
from jaxbio._linear import linear_map

rnea = importlib.import_module("jaxbio.dynamics._rnea")
forward = importlib.import_module("jaxbio.dynamics.forward")


# ---- the primitive on a toy: y = sin(x) x, with a transpose that records where it ran -------------

CALLS = []


def _toy(x):
    return jnp.sin(x) * x


@dataclasses.dataclass(frozen=True)
class _Apply:
    def __call__(self, x, dx):
        return [jax.jvp(_toy, (x,), (dx,))[1]]


@dataclasses.dataclass(frozen=True)
class _Transpose:
    batched: bool = False

    def __call__(self, x, ct):
        CALLS.append("batched" if self.batched else "one")
        return [(jnp.cos(x) * x + jnp.sin(x)) * ct]

    def vmapped(self, in_axes, size, summed):
        if in_axes == (0, 0) and summed == (False,):
            return _Transpose(True)
        from jaxbio._linear import Vmapped

        return Vmapped(self, in_axes, size, summed)


@jax.custom_jvp
def _f(x):
    return _toy(x)


@_f.defjvp
def _f_jvp(p, t):
    return _f(p[0]), linear_map(_Apply(), _Transpose(), [p[0]], [t[0]])[0]


X = jnp.linspace(0.1, 1.0, 5)
D1 = jax.vmap(jax.grad(_toy))(X)
D2 = jax.vmap(jax.grad(jax.grad(_toy)))(X)


def _sum_vmap(x):
    return jax.vmap(_f)(x).sum()


TOY_CASES = {
    "vmap(grad)": (lambda: jax.vmap(jax.grad(_f))(X), D1, None),  # cotangent unbatched: the generic vmap
    "grad(vmap)": (lambda: jax.grad(_sum_vmap)(X), D1, "batched"),
    "jit(grad(vmap))": (lambda: jax.jit(jax.grad(_sum_vmap))(X), D1, "batched"),
    "jacrev(vmap)": (lambda: jnp.diag(jax.jacrev(jax.vmap(_f))(X)), D1, "batched"),
    "jacfwd(vmap)": (lambda: jnp.diag(jax.jacfwd(jax.vmap(_f))(X)), D1, None),
    "linearize(vmap)": (lambda: jax.linearize(jax.vmap(_f), X)[1](jnp.ones(5)), D1, None),
    "hessian(vmap)": (lambda: jnp.diag(jax.hessian(_sum_vmap)(X)), D2, "batched"),
    "grad(grad(vmap))": (lambda: jax.grad(lambda x: jax.grad(_sum_vmap)(x).sum())(X), D2, "batched"),
    "vmap(vmap)": (lambda: jax.grad(lambda x: jax.vmap(jax.vmap(_f))(x).sum())(jnp.stack([X, X]))[1], D1, None),
    "shared tangent": (lambda: jax.grad(lambda s: jax.vmap(lambda x: _f(x + s))(X).sum())(0.0), D1.sum(), None),
    "one state": (lambda: jax.grad(_f)(X[2]), D1[2], "one"),
}


@pytest.mark.parametrize("name", list(TOY_CASES))
def test_linear_map_under_every_transformation(name):
    fn, want, where = TOY_CASES[name]
    CALLS.clear()
    got = fn()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    if where is not None:
        assert where in CALLS, CALLS  # the custom transpose ran (batched where vmapped)


def test_linear_map_inside_shard_map():
    mesh = jax.make_mesh((1,), ("d",))
    x = jax.device_put(X, NamedSharding(mesh, P("d")))
    inner = jax.jit(jax.shard_map(lambda y: jax.grad(_sum_vmap)(y), mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    np.testing.assert_allclose(inner(x), D1, rtol=1e-12)


# ---- the wrench recursion: reverse mode under vmap runs the adjoint kernel -------------------------


def _states(tree, B=6, seed=0):
    ks = jax.random.split(jax.random.key(seed), 4)
    q = jax.vmap(lambda k: jb.configuration.random(tree, k))(jax.random.split(ks[0], B))
    return q, *(jax.random.normal(k, (B, tree.nv)) for k in ks[1:])


def _per_state_vjp(tree, q, qd, qdd, w):
    return jax.vmap(lambda a, b, c, u: jax.vjp(lambda *x: rnea._plain_tau(tree, *x), a, b, c)[1](u))(q, qd, qdd, w)


@pytest.fixture
def kernel_calls(monkeypatch):
    calls = []
    call = rnea._TauAdjoint.__call__

    def spy(self, *args):
        calls.append(args[1].shape)
        return call(self, *args)

    monkeypatch.setattr(rnea._TauAdjoint, "__call__", spy)
    return calls


@pytest.mark.parametrize("model", ["double_pendulum", pytest.param("arm7", marks=pytest.mark.slow)])
def test_reverse_mode_under_vmap_runs_the_adjoint(model, kernel_calls):
    tree = jb.load_model(model).tree
    q, qd, qdd, w = _states(tree)
    ID = jax.vmap(lambda a, b, c: jb.inverse_dynamics(tree, a, b, c))
    want = jax.jit(_per_state_vjp)(tree, q, qd, qdd, w)
    got = jax.jit(jax.grad(lambda *x: jnp.sum(w * ID(*x)), argnums=(0, 1, 2)))(q, qd, qdd)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-11, atol=1e-11)
    assert kernel_calls == [(6, tree.nv)]
    # forward dynamics: its derivative rule transposes the same kernel
    kernel_calls.clear()
    tau = ID(q, qd, qdd)
    FD = jax.vmap(lambda a, b, t: forward.accelerations(tree, a, b, t))
    g = jax.jit(jax.grad(lambda *x: jnp.sum(w * FD(*x)), argnums=(0, 1, 2)))(q, qd, tau)
    assert len(kernel_calls) == 1
    one = jax.jit(
        jax.grad(
            lambda a, b, t, u: jnp.sum(u * forward._solved(tree, a, b, t, jnp.zeros_like(t), ())[1]), argnums=(0, 1, 2)
        )
    )  # one state: plain autodiff of the solve
    for i in range(q.shape[0]):
        for a, b in zip(g, one(q[i], qd[i], tau[i], w[i])):
            np.testing.assert_allclose(a[i], b, rtol=1e-9, atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["double_pendulum", "arm7"])
def test_per_example_gradients_and_jacobians(model, kernel_calls):
    """``vmap(grad)`` and ``jacrev(vmap)`` transpose the kernel too; the same numbers."""
    tree = jb.load_model(model).tree
    q, qd, qdd, w = _states(tree, seed=5)
    ID = jax.vmap(lambda a, b, c: jb.inverse_dynamics(tree, a, b, c))
    per = jax.jit(jax.vmap(jax.grad(lambda a, b, c, u: jnp.sum(u * jb.inverse_dynamics(tree, a, b, c)))))(q, qd, qdd, w)
    np.testing.assert_allclose(per, jax.jit(_per_state_vjp)(tree, q, qd, qdd, w)[0], rtol=1e-11, atol=1e-11)
    J = jax.jit(jax.jacrev(lambda a: ID(a, qd, qdd)))(q)
    np.testing.assert_allclose(J, jax.jit(jax.jacfwd(lambda a: ID(a, qd, qdd)))(q), rtol=1e-11, atol=1e-11)
    assert len(kernel_calls) == 2


@pytest.mark.slow
@pytest.mark.parametrize("model", ["double_pendulum", "arm7"])
def test_second_order_through_the_route(model):
    """Forward-over-reverse (a Hessian-vector product) differentiates the adjoint's call by the
    per-state route; equal to the per-state second derivatives."""
    tree = jb.load_model(model).tree
    q, qd, qdd, w = _states(tree, B=4, seed=1)
    ID = jax.vmap(lambda a, b, c: jb.inverse_dynamics(tree, a, b, c))
    hvp = jax.jit(lambda v: jax.jvp(jax.grad(lambda a: jnp.sum(w * ID(a, qd, qdd))), (q,), (v,))[1])(qd)
    want = jax.jit(
        jax.vmap(
            lambda a, b, c, u, v: jax.jvp(jax.grad(lambda x: jnp.sum(u * rnea._plain_tau(tree, x, b, c))), (a,), (v,))[
                1
            ]
        )
    )(q, qd, qdd, w, qd)
    np.testing.assert_allclose(hvp, want, rtol=1e-10, atol=1e-10)


def test_other_derivatives_keep_the_per_state_route(kernel_calls):
    """Derivatives in the tree (masses) or with external loads are plain autodiff of the
    per-state recursion, as before (the adjoint kernel differentiates the states only)."""
    tree = jb.load_model("double_pendulum").tree
    q, qd, qdd, w = _states(tree, B=3, seed=2)

    @jax.jit
    def masses_loss(m):
        t = eqx.tree_at(lambda t: t.masses, tree, m)
        return jnp.sum(w * jax.vmap(lambda a, b, c: jb.inverse_dynamics(t, a, b, c))(q, qd, qdd))

    g = jax.jit(jax.grad(masses_loss))(tree.masses)
    eps = 1e-6
    fd = [
        (masses_loss(tree.masses.at[i].add(eps)) - masses_loss(tree.masses.at[i].add(-eps))) / (2 * eps)
        for i in range(tree.masses.shape[0])
    ]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)
    ext = (jax.random.normal(jax.random.key(4), (3, tree.n_segments, 3)), jnp.zeros((3, tree.n_segments, 3)))
    ID = jax.vmap(lambda a, b, c, f, m: jb.inverse_dynamics(tree, a, b, c, (f, m)))
    got = jax.jit(jax.grad(lambda a: jnp.sum(w * ID(a, qd, qdd, *ext))))(q)
    one = jax.jit(jax.grad(lambda a, b, c, f, u: jnp.sum(u * rnea._plain_tau(tree, a, b, c, f, jnp.zeros_like(f)))))
    for i in range(3):
        np.testing.assert_allclose(got[i], one(q[i], qd[i], qdd[i], ext[0][i], w[i]), rtol=1e-11, atol=1e-11)
    assert kernel_calls == []


@pytest.mark.slow
def test_ball_and_free_joints_keep_the_per_state_route(kernel_calls):
    body = jb.load_model("wholebody").tree
    q, qd, qdd, w = _states(body, B=3, seed=3)
    got = jax.jit(
        jax.grad(lambda a: jnp.sum(w * jax.vmap(lambda a, b, c: jb.inverse_dynamics(body, a, b, c))(a, qd, qdd)))
    )(q)
    np.testing.assert_allclose(got, jax.jit(_per_state_vjp)(body, q, qd, qdd, w)[0], rtol=1e-10, atol=1e-10)
    assert kernel_calls == []
