"""`jaxbio.dynamics._adjoint.inverse_dynamics_vjp_batch`, the hand-written batch-last reverse pass of
the wrench recursion, against ``jax.vjp`` of ``jax.vmap`` of the per-state recursion
(`jaxbio.dynamics.rnea._plain_tau`, plain autodiff), against central differences of the forward
kernel, and in float32 against float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.dynamics._adjoint import inverse_dynamics_vjp_batch
from jaxbio.dynamics._batched import inverse_dynamics_batch
from jaxbio.dynamics.rnea import _plain_tau
from tests.dynamics.test_batched_dynamics import wholebody_hinges


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1.0))


def _tree(name, dtype=jnp.float64):
    if name == "wholebody_hinges":
        tree = wholebody_hinges()
        return tree if dtype == jnp.float64 else jax.tree_util.tree_map(
            lambda x: x.astype(dtype) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x,
            tree)
    return jb.load_model(name, dtype=dtype)


def _inputs(tree, B, seed=0, dtype=jnp.float64):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.uniform(-2, 2, (B, tree.nv)), dtype) for _ in range(4))


def _reference(tree, q, qd, qdd, ct):
    f = jax.vmap(lambda a, b, c: _plain_tau(tree, a, b, c))
    return jax.jit(lambda *x: jax.vjp(f, *x[:3])[1](x[3]))(q, qd, qdd, ct)


def _check(tree, x, want, B, chunk, layout):
    got = jax.jit(lambda *a: inverse_dynamics_vjp_batch(tree, *a, chunk=chunk, layout=layout))(*(v[:B] for v in x))
    for g, w, what in zip(got, want, ("q", "qd", "qdd")):
        assert g.shape == (B, tree.nv)
        assert rel(g, w[:B]) < 1e-10, (B, chunk, layout, what, rel(g, w[:B]))


# (tree, batch of the reference, [(batch, chunk, layout)]): B = 1, a batch not a multiple of the
# chunk (the last chunk overlapping the one before), both layouts; wholebody_hinges has several
# phases, branches and children in later phases. The reference is computed once per tree (the
# cases take its first B states).
CASES = {
    "double_pendulum": (300, [(300, 256, "cpu"), (1, None, "cpu")]),
    "arm7": (40, [(40, None, "accelerator")]),
    "wholebody_hinges": (37, [(37, 16, "cpu")]),
}
SLOW_CASES = {
    "double_pendulum": (300, [(5, None, "accelerator")]),
    "arm7": (300, [(300, 128, "cpu"), (1, None, "cpu"), (7, None, "accelerator")]),
    "wholebody_hinges": (300, [(300, 256, "cpu"), (1, None, "cpu"), (6, None, "accelerator")]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_equals_autodiff(name):
    tree = _tree(name)
    B, cases = CASES[name]
    x = _inputs(tree, B, seed=B)
    want = _reference(tree, *x)
    for case in cases:
        _check(tree, x, want, *case)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_CASES))
def test_equals_autodiff_more(name):
    tree = _tree(name)
    B, cases = SLOW_CASES[name]
    x = _inputs(tree, B, seed=B + 1)
    want = _reference(tree, *x)
    for case in cases:
        _check(tree, x, want, *case)


def test_central_differences():
    """Independent of autodiff: ``⟨ct, ID(x + h v) − ID(x − h v)⟩ / 2h = ⟨vjp, v⟩``."""
    tree = _tree("arm7")
    q, qd, qdd, ct = _inputs(tree, 3, seed=7)
    vs = _inputs(tree, 3, seed=8)[:3]
    got = inverse_dynamics_vjp_batch(tree, q, qd, qdd, ct)
    h = 1e-6
    ID = jax.jit(lambda a, b, c: inverse_dynamics_batch(tree, a, b, c))
    for k in range(3):  # each input's directional derivative alone
        plus = [x + h * v if i == k else x for i, (x, v) in enumerate(zip((q, qd, qdd), vs))]
        minus = [x - h * v if i == k else x for i, (x, v) in enumerate(zip((q, qd, qdd), vs))]
        fd = jnp.sum(ct * (ID(*plus) - ID(*minus)), axis=1) / (2 * h)
        np.testing.assert_allclose(jnp.sum(got[k] * vs[k], axis=1), fd, rtol=1e-6, atol=1e-6)


def test_float32_close_to_float64():
    t64, t32 = _tree("arm7"), _tree("arm7", jnp.float32)
    x64 = _inputs(t64, 40, seed=3)
    x32 = tuple(x.astype(jnp.float32) for x in x64)
    got32 = inverse_dynamics_vjp_batch(t32, *x32, chunk=16, layout="cpu")
    got64 = inverse_dynamics_vjp_batch(t64, *x64, chunk=16, layout="cpu")
    for a, b in zip(got32, got64):
        assert a.dtype == jnp.float32
        assert rel(a, b) < 1e-4


def test_empty_batch_and_general_tree():
    tree = _tree("double_pendulum")
    out = inverse_dynamics_vjp_batch(tree, *_inputs(tree, 0))
    assert all(o.shape == (0, tree.nv) for o in out)
    body = jb.load_model("wholebody", dtype=jnp.float64)
    with pytest.raises(ValueError, match="revolute and prismatic"):
        inverse_dynamics_vjp_batch(body, jnp.zeros((2, body.nq)), *(jnp.zeros((2, body.nv)),) * 3)
