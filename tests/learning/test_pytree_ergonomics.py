"""Every public model is a pytree that Equinox and JAX transformations handle (issue #19, item 6):
``eqx.filter_jit`` equals eager evaluation, ``eqx.filter_grad`` equals central finite
differences, ``eqx.partition`` trains one leaf and leaves the rest bit-for-bit frozen, ``jax.vmap``
over a stack of models equals a loop, and the whole table runs in float32 without x64 (a fresh
process), close to float64. The cases are in ``tests/learning/_pytree_cases.py``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.learning._pytree_cases import CASES

NAMES = list(CASES)
#: cases that compile for 5-30 s (a simulation, a muscle path, an OpenSim model): their checks run in
#: the slow stage; the cheap cases run by default
HEAVY = ("HamiltonianSystem", "Sprinter", "MusclePaths", "Model")
TRANSFORMED = [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in NAMES]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def models():
    return {name: build() for name, (build, _, _) in CASES.items()}


def _spec(model, trainable):
    """A filter spec: True at the ``trainable`` leaf only."""
    false = jax.tree_util.tree_map(lambda _: False, model)
    return eqx.tree_at(trainable, false, True)


def _direction(leaf, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(np.shape(leaf)), leaf.dtype)


@pytest.mark.parametrize("name", TRANSFORMED)
def test_pytree_round_trip_and_filter_jit(models, name):
    _, value, trainable = CASES[name]
    model = models[name]
    leaves, treedef = jax.tree_util.tree_flatten(model)
    assert any(eqx.is_inexact_array(x) for x in leaves)
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    eager = value(model)
    assert float(value(again)) == float(eager)
    np.testing.assert_allclose(eqx.filter_jit(value)(model), eager, rtol=1e-12)
    assert eqx.is_inexact_array(trainable(model))


@pytest.mark.parametrize("name", TRANSFORMED)
def test_filter_grad_matches_finite_differences(models, name):
    _, value, trainable = CASES[name]
    model = models[name]
    grads = eqx.filter_jit(eqx.filter_grad(value))(model)
    g = trainable(grads)
    assert g.shape == trainable(model).shape and np.all(np.isfinite(g))
    d = _direction(g)
    leaf = trainable(model)
    h = 1e-6 * max(1e-3, float(jnp.max(jnp.abs(leaf))))
    shifted = lambda s: value(eqx.tree_at(trainable, model, leaf + s * h * d))  # noqa: E731
    fd = (shifted(1.0) - shifted(-1.0)) / (2 * h)
    assert abs(float(fd)) > 1e-8  # the value depends on the leaf: the check is not vacuous
    np.testing.assert_allclose(jnp.sum(g * d), fd, rtol=1e-6, atol=1e-9 * max(1.0, abs(float(fd))))


@pytest.mark.parametrize("name", TRANSFORMED)
def test_partition_trains_one_leaf_and_freezes_the_rest(models, name):
    _, value, trainable = CASES[name]
    model = models[name]
    train, frozen = eqx.partition(model, _spec(model, trainable))
    assert len(jax.tree_util.tree_leaves(train)) == 1
    loss = lambda tr: value(eqx.combine(tr, frozen))  # noqa: E731
    grad = jax.grad(loss)(train)
    opt = optax.sgd(1e-3 / max(1e-12, float(optax.tree.norm(grad))))
    updates, _ = opt.update(grad, opt.init(train))
    new = eqx.combine(optax.apply_updates(train, updates), frozen)
    assert float(value(new)) < float(value(model))  # a small step down the gradient lowers the value
    before, after = jax.tree_util.tree_leaves(model), jax.tree_util.tree_leaves(new)
    changed = [not np.array_equal(a, b) for a, b in zip(before, after) if eqx.is_array(a)]
    assert sum(changed) == 1  # only the trained leaf moved
    assert not np.array_equal(trainable(new), trainable(model))


@pytest.mark.parametrize("name", TRANSFORMED)
def test_vmap_over_a_stack_of_models(models, name):
    _, value, trainable = CASES[name]
    model = models[name]
    leaf = trainable(model)
    variants = [eqx.tree_at(trainable, model, leaf * (1.0 + s)) for s in (-0.01, 0.0, 0.02)]
    train = [eqx.partition(m, _spec(m, trainable))[0] for m in variants]
    frozen = eqx.partition(model, _spec(model, trainable))[1]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *train)
    batched = jax.jit(jax.vmap(lambda tr: value(eqx.combine(tr, frozen))))(stacked)
    np.testing.assert_allclose(batched, [value(m) for m in variants], rtol=1e-10)


@pytest.mark.slow
def test_float32_without_x64_close_to_float64(models):
    """The same table in a fresh process without x64: every value float32, within 1e-3 of float64
    (relative)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-m", "tests.learning._pytree_cases"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    f32 = json.loads(out.stdout)
    assert set(f32) == set(NAMES)
    for name, (_, value, _) in CASES.items():
        v32, dtype = f32[name]
        assert dtype == "float32", name
        v64 = float(eqx.filter_jit(value)(models[name]))
        assert abs(v32 - v64) <= 1e-3 * max(abs(v64), 1e-3), (name, v32, v64)
