"""`jb.batch` on several host CPU devices against ``jax.jit(jax.vmap(...))`` on one, run in a fresh
interpreter (the device count is fixed when jax starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python -m tests._batch_check CASE ...

prints one JSON object ``{"devices": D, CASE: {"max_abs_diff": ..., "scale": ..., ...}, ...}``.
Each case computes the same batch twice, sharded and on one device, float64; tests/test_batching.py
asserts on the differences.
"""

from __future__ import annotations

import functools
import json
import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxbio as jb  # noqa: E402
from jaxbio import hamiltonian as ham  # noqa: E402


def _diff(ref, got) -> dict:
    """Largest |difference| and |value| over every leaf (bools and ints as floats), shapes checked."""
    ref_l, got_l = jax.tree.leaves(ref), jax.tree.leaves(got)
    assert len(ref_l) == len(got_l), (len(ref_l), len(got_l))
    diff, scale = 0.0, 0.0
    for a, b in zip(ref_l, got_l):
        a, b = np.asarray(a, float), np.asarray(b, float)
        assert a.shape == b.shape, (a.shape, b.shape)
        finite = np.isfinite(a)
        assert np.array_equal(finite, np.isfinite(b))
        if finite.any():
            diff = max(diff, float(np.max(np.abs(a[finite] - b[finite]))))
            scale = max(scale, float(np.max(np.abs(a[finite]))))
    return {"max_abs_diff": diff, "scale": scale, "leaves": len(ref_l)}


def _states(tree, batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(rng.uniform(-lim, lim, (batch, tree.nv)) for lim in (1.0, 2.0, 5.0))


def inverse_dynamics() -> dict:
    """arm7 over frames: an odd batch (padding), a divisible one in chunks of one, fewer frames than
    devices with the frames along axis 1."""
    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    ref_fn = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))
    out = {}
    for batch, chunk in ((1001, None), (8, 1)):
        q, qd, qdd = _states(tree, batch, seed=batch)
        got = jb.batch(jb.inverse_dynamics, in_axes=(None, 0, 0, 0), chunk_size=chunk)(tree, q, qd, qdd)
        out[f"B{batch}_chunk{chunk}"] = _diff(ref_fn(tree, q, qd, qdd), got)
    q, qd, qdd = _states(tree, 3, seed=3)
    got = jb.batch(jb.inverse_dynamics, in_axes=(None, 1, 1, 1))(tree, q.T, qd.T, qdd.T)
    out["B3_axis1"] = _diff(ref_fn(tree, q, qd, qdd), got)
    return out


def inverse_dynamics_grad() -> dict:
    """∂/∂q and ∂/∂(mass scale, broadcast) of Σ tau² through jb.batch against jit(vmap); and ∂/∂q
    alone (the tree constant: reverse mode runs the batch-last adjoint inside shard_map)."""
    import equinox as eqx

    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    q, qd, qdd = _states(tree, 13, seed=3)

    def per(scale, q, qd, qdd):
        return jb.inverse_dynamics(eqx.tree_at(lambda t: t.masses, tree, tree.masses * scale), q, qd, qdd)

    def loss(mapped):
        return lambda s, q: jnp.sum(mapped(s, q, qd, qdd) ** 2)

    ref = jax.jit(jax.grad(loss(jax.vmap(per, in_axes=(None, 0, 0, 0))), argnums=(0, 1)))(1.3, q)
    got = jax.grad(loss(jb.batch(per, in_axes=(None, 0, 0, 0))), argnums=(0, 1))(1.3, q)

    def states_loss(mapped):
        return lambda q: jnp.sum(mapped(q, qd, qdd) ** 2)

    def per_state(q, qd, qdd):
        return jb.inverse_dynamics(tree, q, qd, qdd)

    ref_q = jax.jit(jax.grad(states_loss(jax.vmap(per_state))))(q)
    got_q = jax.grad(states_loss(jb.batch(per_state)))(q)
    return {"grad": _diff(ref, got), "grad_q": _diff(ref_q, got_q)}


def _slider_tree():
    from tests._models import slider_dict

    return jb.SegmentTree.from_dict(slider_dict(), dtype=jnp.float64)


def _slider(tree, force=3.0, damping=0.5):
    return jb.HamiltonianSystem(
        tree, drive=ham.ConstantDrive(jnp.reshape(force, (1,))), dissipation=ham.LinearDamping(damping)
    )


def simulate() -> dict:
    """A slider (fixed grid, 10 Tsit5 steps) over 6 initial states (padded to 8) and over 5
    (force, damping) pairs (the system built inside the mapped function)."""
    tree = _slider_tree()
    system = _slider(tree)
    rng = np.random.default_rng(4)

    def from_state(q0, qd0):
        return jb.simulate(system, system.initial_state(q0, qd0), 0.0, 1.0, stepsize_controller=jb.FixedGrid(10))

    def from_parameters(force, damping):
        s = _slider(tree, force, damping)
        return jb.simulate(s, s.initial_state(jnp.zeros(1)), 0.0, 1.0, stepsize_controller=jb.FixedGrid(10)).q

    q0, qd0 = rng.uniform(-1, 1, (6, 1)), rng.uniform(-1, 1, (6, 1))
    force, damping = rng.uniform(1, 5, 5), rng.uniform(0.1, 1, 5)
    return {
        "states": _diff(jax.jit(jax.vmap(from_state))(q0, qd0), jb.batch(from_state)(q0, qd0)),
        "parameters": _diff(
            jax.jit(jax.vmap(from_parameters))(force, damping), jb.batch(from_parameters)(force, damping)
        ),
    }


def simulate_adaptive() -> dict:
    """The double pendulum, adaptive Tsit5 (error checks on the device), over 5 (damping, initial
    state) pairs; and the gradient of the final positions of a slider with respect to a damping per
    state through a fixed-grid solve. (Reverse mode through an *adaptive* solve inside
    `jax.shard_map` fails in Equinox's checkpointed while loop: diffrax issue #765.)"""
    from tests._models import double_pendulum_dict

    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    rng = np.random.default_rng(5)

    def run(c, q0):
        s = jb.HamiltonianSystem(tree, dissipation=ham.LinearDamping(c))
        return jb.simulate(s, s.initial_state(q0), 0.0, 0.5, rtol=1e-9, atol=1e-9)

    c, q0 = rng.uniform(0.0, 0.5, (5, 2)), rng.uniform(-1, 1, (5, 2))
    out = {"states": _diff(jax.jit(jax.vmap(run))(c, q0), jb.batch(run)(c, q0))}
    slider = _slider_tree()

    def fixed(c, qd0):
        s = _slider(slider, 3.0, c)
        return jb.simulate(s, s.initial_state(jnp.zeros(1), qd0), 0.0, 1.0, stepsize_controller=jb.FixedGrid(10)).q

    c, qd0 = rng.uniform(0.1, 1.0, 5), rng.uniform(-1, 1, (5, 1))

    def loss(mapped):
        return lambda c: jnp.sum(mapped(c, qd0) ** 2)

    out["grad_fixed_grid"] = _diff(jax.jit(jax.grad(loss(jax.vmap(fixed))))(c), jax.grad(loss(jb.batch(fixed)))(c))
    return out


def sprint_fit() -> dict:
    """Three embedded races (padded to 4), one start, 40 steps: `fit_splits` on one device and
    on every device (its ``devices=``)."""
    from jaxbio.sprint import fitting
    from jaxbio.sprint.data import embedded_races

    races = embedded_races()[:3]
    splits = fitting.splits_from_races(races, pad_batch=4)
    kw = dict(
        starts=fitting.default_starts(fitting.Sprinter(), n=1), n_steps=40, max_steps=20, n_grid=11, quick_compile=False
    )
    ref = fitting.fit_splits(splits, **kw)
    got = fitting.fit_splits(splits, devices=jax.devices(), **kw)
    pick = lambda r: (r.theta, r.cost, r.converged, r.steps, r.cov_log, r.predicted, r.profile)  # noqa: E731
    return {"races": _diff(pick(ref), pick(got))}


def static_optimization() -> dict:
    """arm26 over 9 frames (padded to 12 on 4 devices): per-frame `static_optimization` of
    `frame_problem`, and `static_optimization_motion` split as a vectorized function."""
    from jaxbio.estimation import static_optimization, static_optimization_motion
    from jaxbio.estimation._static_optimization import _as_hill, frame_problem
    from jaxbio.muscles import sets

    tree, paths, params = sets.load_muscle_set("arm26", dtype=jnp.float64)
    t = np.linspace(0.0, 1.0, 9)[:, None]
    q = np.hstack([0.3 + 0.2 * np.sin(3 * t), 1.0 + 0.5 * np.sin(2 * t)])
    qd = np.hstack([0.6 * np.cos(3 * t), 1.0 * np.cos(2 * t)])
    qdd = np.hstack([-1.8 * np.sin(3 * t), -2.0 * np.sin(2 * t)])
    motion = functools.partial(static_optimization_motion, tree, paths, params)
    out = {"motion": _diff(jax.jit(motion)(q, qd, qdd), jb.batch(motion, vectorized=True)(q, qd, qdd))}
    hill = _as_hill(params)

    def frame(q, qd, qdd):
        moment_arms, tau, max_force, passive = frame_problem(tree, paths, hill, q, qd, qdd)
        return static_optimization(moment_arms, tau, max_force, passive_force=passive)

    out["frames"] = _diff(jax.jit(jax.vmap(frame))(q, qd, qdd), jb.batch(frame)(q, qd, qdd))
    return out


CASES = {
    f.__name__: f
    for f in (inverse_dynamics, inverse_dynamics_grad, simulate, simulate_adaptive, sprint_fit, static_optimization)
}


def main(argv) -> int:
    import time

    out = {"devices": len(jax.devices())}
    for name in argv or CASES:
        t0 = time.perf_counter()
        out[name] = CASES[name]()
        out[name + "_s"] = time.perf_counter() - t0
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
