"""`jaxbio.dynamics._adjoint.inverse_dynamics_vjp_batch`, the hand-written batch-last reverse pass of
the wrench recursion, against ``jax.vjp`` of ``jax.vmap`` of the per-state recursion
(`jaxbio.dynamics._rnea._plain_tau`, plain autodiff), against central differences of the forward
kernel, and in float32 against float64."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.dynamics._adjoint import inverse_dynamics_vjp_batch
from jaxbio.dynamics.batch_last import inverse_dynamics_batch
from jaxbio.dynamics._rnea import _plain_tau
from tests._models import random_model_dict
from tests.dynamics.test_batched_dynamics import wholebody_hinges


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1.0))


def _tree(name, dtype=jnp.float64):
    if name.startswith("random"):  # several roots, revolute and prismatic joints
        d = random_model_dict(np.random.default_rng(200 + int(name[6:])), 13)
        return jb.SegmentTree.from_dict(d, dtype=dtype)
    if name == "wholebody_hinges":
        tree = wholebody_hinges()
        return (
            tree
            if dtype == jnp.float64
            else jax.tree_util.tree_map(
                lambda x: x.astype(dtype) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x,
                tree,
            )
        )
    return jb.load_model(name, dtype=dtype).tree


def _inputs(tree, B, seed=0, dtype=jnp.float64):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.uniform(-2, 2, (B, tree.nv)), dtype) for _ in range(4))


def _reference(tree, q, qd, qdd, ct):
    f = jax.vmap(lambda a, b, c: _plain_tau(tree, a, b, c))
    return jax.jit(lambda *x: jax.vjp(f, *x[:3])[1](x[3]))(q, qd, qdd, ct)


@functools.cache
def _case(name, B, seed):
    """The float64 tree, states and reference cotangents of one case (computed once)."""
    tree = _tree(name)
    x = _inputs(tree, B, seed=seed)
    return tree, x, _reference(tree, *x)


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
    "double_pendulum": (300, [(300, 256, "cpu")]),
    "arm7": (40, [(40, None, "accelerator")]),
    "wholebody_hinges": (37, [(37, 16, "cpu")]),
    "random1": (20, [(20, 8, "cpu"), (1, None, "cpu")]),
}
SLOW_CASES = {
    "double_pendulum": (300, [(1, None, "cpu"), (5, None, "accelerator")]),
    "arm7": (300, [(300, 128, "cpu"), (1, None, "cpu"), (7, None, "accelerator")]),
    "wholebody_hinges": (300, [(300, 256, "cpu"), (1, None, "cpu"), (6, None, "accelerator")]),
    "random0": (20, [(20, 8, "cpu"), (3, None, "accelerator")]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_equals_autodiff(name):
    B, cases = CASES[name]
    tree, x, want = _case(name, B, B)
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
    """float32 (inputs and tree) against float64 autodiff, relative to the largest entry."""
    _, x64, want = _case("arm7", 40, 40)  # test_equals_autodiff[arm7]'s
    t32 = _tree("arm7", jnp.float32)
    got32 = jax.jit(lambda *a: inverse_dynamics_vjp_batch(t32, *a, chunk=16, layout="cpu"))(
        *(x.astype(jnp.float32) for x in x64)
    )
    for a, b in zip(got32, want):
        assert a.dtype == jnp.float32
        assert rel(a, b) < 1e-4, rel(a, b)


def test_empty_batch_and_general_tree():
    tree = _tree("double_pendulum")
    out = inverse_dynamics_vjp_batch(tree, *_inputs(tree, 0))
    assert all(o.shape == (0, tree.nv) for o in out)
    body = jb.load_model("wholebody", dtype=jnp.float64).tree
    with pytest.raises(ValueError, match="revolute and prismatic"):
        inverse_dynamics_vjp_batch(body, jnp.zeros((2, body.nq)), *(jnp.zeros((2, body.nv)),) * 3)
