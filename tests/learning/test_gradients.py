"""Gradients of a trajectory loss through `jb.simulate` w.r.t. a neural drive (issue #19, item 1).

The case of benchmarks/learning.py, small: an `equinox.nn.MLP` maps ``(q, q̇)`` to joint torques,
a few initial states are simulated under `jax.vmap`, the loss is the mean of ``q²`` over the
saved states. Checked against independent references:

- central finite differences of the same loss (float64) along a random direction of the MLP's
  parameters, for the adaptive default (tight tolerances, so that the step sequence is the same
  at ``θ ± h``) and for fixed-grid stepping (``stepsize_controller=jb.FixedGrid(N)``);
- (slow) the paths against each other: the adaptive default with `BacksolveAdjoint` vs the default
  adjoint, and fixed-grid stepping vs the adaptive default (both converge to the ODE's gradient);
- float32 against float64 (the same parameters, cast).

The default run uses a single pendulum (closed-form dynamics, the quickest to compile); the double
pendulum's versions are ``slow``. Compiling reverse mode through `jb.simulate` is the expensive part
(benchmarks/learning.py).
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from tests._models import double_pendulum_dict

DURATION = 0.5


class MLPDrive(jb.hamiltonian.Drive):
    """Joint torques ``mlp(concat(q, q̇))`` N·m."""

    mlp: eqx.nn.MLP

    def __call__(self, t, q, qd, f, a=None):
        return self.mlp(jnp.concatenate([q, qd]))


def pendulum_dict():
    return {
        "gravity": [0, -9.81, 0],
        "segments": [
            {
                "name": "rod",
                "parent": None,
                "joint": {"type": "revolute", "axis": [0, 0, 1], "origin": [0, 0, 0], "orientation": [1, 0, 0, 0]},
                "mass": 1.0,
                "com": [0, -0.5, 0],
                "inertia": [[1 / 12, 0, 0], [0, 1e-6, 0], [0, 0, 1 / 12]],
            }
        ],
    }


def make_case(model_dict, dtype, batch=2):
    tree = jb.SegmentTree.from_dict(model_dict, dtype=dtype)
    n = tree.nv
    mlp = eqx.nn.MLP(2 * n, n, 8, 1, activation=jnp.tanh, key=jax.random.key(0), dtype=dtype)
    # torques of a few N·m, so that the controller matters against gravity
    mlp = jax.tree_util.tree_map(lambda x: 4.0 * x if eqx.is_inexact_array(x) else x, mlp)
    q0 = jnp.asarray(np.random.default_rng(1).normal(0.0, 0.5, (batch, n)), dtype)
    return tree, mlp, q0


def loss_fn(tree, q0, **kwargs):
    n = tree.nv
    dtype = q0.dtype
    ts = jnp.linspace(0.0, DURATION, 5, dtype=dtype)
    if "stepsize_controller" not in kwargs and "ts" not in kwargs:
        kwargs = dict(ts=ts, **kwargs)
    start = kwargs.pop("start", "hamiltonian")  # the initial state's form

    def one(mlp, q):
        system = jb.HamiltonianSystem(tree, MLPDrive(mlp), jb.hamiltonian.LinearDamping(jnp.full(n, 0.1, dtype)))
        return jb.simulate(system, system.initial_state(q, form=start), 0.0, DURATION, **kwargs).q

    def loss(mlp):
        return jnp.mean(jax.vmap(one, in_axes=(None, 0))(mlp, q0) ** 2)

    return loss


def flat_grad(loss, mlp):
    value, grad = eqx.filter_jit(eqx.filter_value_and_grad(loss))(mlp)
    leaves = jax.tree_util.tree_leaves(eqx.filter(grad, eqx.is_inexact_array))
    return float(value), np.concatenate([np.ravel(x) for x in leaves])


def directional_fd(loss, mlp, direction, h):
    """Central difference of ``loss`` along ``direction`` (a flat vector over the MLP's arrays)."""
    params, static = eqx.partition(mlp, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    sizes = np.cumsum([0] + [x.size for x in leaves])
    step = [jnp.asarray(direction[a:b].reshape(x.shape), x.dtype) for a, b, x in zip(sizes[:-1], sizes[1:], leaves)]

    jitted = eqx.filter_jit(loss)

    def at(s):
        moved = jax.tree_util.tree_unflatten(treedef, [x + s * d for x, d in zip(leaves, step)])
        return float(jitted(eqx.combine(moved, static)))

    return (at(h) - at(-h)) / (2 * h)


PATHS = {
    "adaptive default": dict(rtol=1e-10, atol=1e-10),
    "fixed grid": dict(stepsize_controller=jb.FixedGrid(100)),
    "stored adjoint": dict(rtol=1e-10, atol=1e-10, form="velocity", adjoint=jb.simulation.StoredAdjoint()),
    # the training recipe of docs/guides/learning.md: velocity-form start, no derived outputs
    "training recipe": dict(
        rtol=1e-10, atol=1e-10, form="velocity", adjoint=jb.simulation.StoredAdjoint(), derived=False, start="velocity"
    ),
}


def _check_fd(model_dict, path):
    tree, mlp, q0 = make_case(model_dict, jnp.float64)
    loss = loss_fn(tree, q0, **PATHS[path])
    _, g = flat_grad(loss, mlp)
    direction = np.random.default_rng(2).normal(size=g.shape)
    direction /= np.linalg.norm(direction)
    fd = directional_fd(loss, mlp, direction, 1e-5)
    assert abs(g @ direction) > 1e-4  # not a vanishing derivative
    np.testing.assert_allclose(g @ direction, fd, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("path", list(PATHS))
def test_gradient_matches_central_differences(path):
    """∂loss/∂θ along a random direction equals the central difference (h = 1e-5), float64."""
    _check_fd(pendulum_dict(), path)


@pytest.mark.slow
@pytest.mark.parametrize("path", list(PATHS))
def test_gradient_matches_central_differences_double_pendulum(path):
    _check_fd(double_pendulum_dict(), path)


def _check_paths_agree(model_dict):
    tree, mlp, q0 = make_case(model_dict, jnp.float64)
    v_ref, g_ref = flat_grad(loss_fn(tree, q0, rtol=1e-10, atol=1e-10), mlp)
    v_bs, g_bs = flat_grad(
        loss_fn(
            tree,
            q0,
            rtol=1e-10,
            atol=1e-10,
            adjoint=diffrax.BacksolveAdjoint(stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-10)),
        ),
        mlp,
    )
    v_grid, g_grid = flat_grad(loss_fn(tree, q0, stepsize_controller=jb.FixedGrid(100)), mlp)
    # the default under reverse mode is the velocity form on the stored loop; Backsolve solves the
    # Hamiltonian form forward on Diffrax's loop, the same values as that form's checkpointed solve
    hamiltonian = dict(rtol=1e-10, atol=1e-10, form="hamiltonian", adjoint=diffrax.RecursiveCheckpointAdjoint())
    v_ham, g_ham = flat_grad(loss_fn(tree, q0, **hamiltonian), mlp)
    assert v_bs == v_ham
    np.testing.assert_allclose(v_ham, v_ref, rtol=1e-8)
    np.testing.assert_allclose(g_ham, g_ref, rtol=1e-5, atol=1e-7 * np.abs(g_ref).max())
    # the continuous adjoint and the discretised solve converge to the same gradient
    # (measured on the double pendulum: 3e-8 of the largest entry; the pendulum agrees to 1e-8)
    np.testing.assert_allclose(g_bs, g_ref, rtol=1e-5, atol=1e-7 * np.abs(g_ref).max())
    # the grid saves 101 states, not 5: compare its gradient with the same loss on the adaptive path
    _, g_dense = flat_grad(loss_fn(tree, q0, ts=jnp.linspace(0.0, DURATION, 101), rtol=1e-10, atol=1e-10), mlp)
    # (100 fixed Tsit5 steps against rtol = atol = 1e-10: a discretisation error of ~1e-7 of the largest entry)
    np.testing.assert_allclose(g_grid, g_dense, rtol=1e-5, atol=1e-6 * np.abs(g_dense).max())
    assert np.isfinite(v_grid)


@pytest.mark.slow
def test_adjoints_and_grid_agree():
    """`BacksolveAdjoint` and fixed-grid stepping give the default path's gradient (float64)."""
    _check_paths_agree(pendulum_dict())


@pytest.mark.slow
def test_adjoints_and_grid_agree_double_pendulum():
    _check_paths_agree(double_pendulum_dict())


def _to32(x):
    return x.astype(jnp.float32) if eqx.is_inexact_array(x) else x


def _check_float32(model_dict, tolerance, **solve):
    """The same parameters and states cast to float32 (float64 solved to 1e-10 when adaptive)."""
    tree64, mlp64, q64 = make_case(model_dict, jnp.float64)
    tree32 = jb.SegmentTree.from_dict(model_dict, dtype=jnp.float32)
    mlp32, q32 = jax.tree_util.tree_map(_to32, mlp64), q64.astype(jnp.float32)
    tight = solve if "steps" in solve else dict(solve, rtol=1e-10, atol=1e-10)
    v64, g64 = flat_grad(loss_fn(tree64, q64, **tight), mlp64)
    v32, g32 = flat_grad(loss_fn(tree32, q32, **solve), mlp32)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(v32, v64, rtol=tolerance)
    # the whole gradient vector, relative to its norm
    assert np.linalg.norm(g32 - g64) <= tolerance * np.linalg.norm(g64)


@pytest.mark.slow
def test_float32_matches_float64():
    """Fixed grid (100 steps): the float32 loss and gradient are the float64 ones within 1e-4
    (the gradient relative to its norm)."""
    _check_float32(pendulum_dict(), 1e-4, stepsize_controller=jb.FixedGrid(100))


@pytest.mark.slow
def test_float32_matches_float64_adaptive():
    """The adaptive default in float32 (rtol = atol = 1e-6) against float64 (1e-10): within 1e-3."""
    _check_float32(pendulum_dict(), 1e-3, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_float32_matches_float64_double_pendulum():
    _check_float32(double_pendulum_dict(), 1e-3, rtol=1e-6, atol=1e-6)


# ---- simulate(..., form="velocity"): the (q, q̇) integration, the cheaper gradient -------------


@pytest.mark.slow
@pytest.mark.parametrize("model_dict", [pendulum_dict, double_pendulum_dict])
def test_velocity_form_gradient_matches_differences_and_default(model_dict):
    """``form="velocity"``: the gradient equals its own central difference (float64, h = 1e-5)
    and the Hamiltonian form's gradient (both solved to 1e-10: they agree up to the two
    discretisations)."""
    tree, mlp, q0 = make_case(model_dict(), jnp.float64)
    tight = dict(rtol=1e-10, atol=1e-10)
    loss = loss_fn(tree, q0, form="velocity", **tight)
    v, g = flat_grad(loss, mlp)
    direction = np.random.default_rng(2).normal(size=g.shape)
    direction /= np.linalg.norm(direction)
    assert abs(g @ direction) > 1e-4
    np.testing.assert_allclose(g @ direction, directional_fd(loss, mlp, direction, 1e-5), rtol=1e-6)
    v_ref, g_ref = flat_grad(loss_fn(tree, q0, **tight), mlp)
    np.testing.assert_allclose(v, v_ref, rtol=1e-8)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-7 * np.abs(g_ref).max())


@pytest.mark.slow
def test_velocity_form_float32_matches_float64_double_pendulum():
    """``form="velocity"`` in float32 (rtol = atol = 1e-6) against float64 (1e-10): within 1e-3."""
    _check_float32(double_pendulum_dict(), 1e-3, rtol=1e-6, atol=1e-6, form="velocity")


@pytest.mark.slow
def test_velocity_form_fixed_grid_gradient_matches_hamiltonian_form():
    """Fixed grid (``jb.FixedGrid(40)``), single pendulum, float64: the velocity form's loss and gradient
    are the Hamiltonian form's up to the discretisation (Tsit5, h = 12.5 ms: ~1e-7)."""
    tree, mlp, q0 = make_case(pendulum_dict(), jnp.float64)
    v, g = flat_grad(loss_fn(tree, q0, stepsize_controller=jb.FixedGrid(40), form="velocity"), mlp)
    v_ref, g_ref = flat_grad(loss_fn(tree, q0, stepsize_controller=jb.FixedGrid(40)), mlp)
    assert abs(v - v_ref) <= 1e-6 * abs(v_ref)
    assert np.linalg.norm(g - g_ref) <= 1e-5 * np.linalg.norm(g_ref)
