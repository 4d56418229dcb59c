"""jaxbio's own adaptive Tsit5 loop and its stored-stage adjoint (`jaxbio._tsit5`, what
``jb.simulate(..., adjoint=jb.simulation.StoredAdjoint())`` runs), against independent references:

- Diffrax's own solve of the same field (`diffrax.diffeqsolve`, Tsit5, `PIDController`, first step
  0.01 s, saved at ``ts`` by its dense output): the same steps, so the same states to round-off;
  and its `RecursiveCheckpointAdjoint` gradient, the same discretised solve differentiated;
- central finite differences (tight tolerances: the step sequence is the same at ``θ ± h``);
- through `jb.simulate`: the default (Diffrax) path of the same system, both forms;
- failures (`max_steps`, NaN) and bad arguments as `simulate` documents them.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import _tsit5
from tests._models import double_pendulum_dict


class Toy(eqx.Module):
    """``ẋ = tanh(W x) + 0.1 sin(3t)``: time-dependent, nonlinear, with rejected steps at 1e-8."""

    W: jax.Array

    def __call__(self, t, x):
        return jnp.tanh(self.W @ x) + 0.1 * jnp.sin(3.0 * t)


D = 4
W = jax.random.normal(jax.random.key(0), (D, D), jnp.float64) * 1.5
X0 = jax.random.normal(jax.random.key(1), (D,), jnp.float64)
T0, T1 = 0.0, 5.0
# t0 itself, interior times (several inside one step, some on no step boundary) and t1
TS = jnp.concatenate([jnp.array([0.0]), jnp.linspace(0.3, 4.0, 11), jnp.array([4.001, 5.0])])
TOL = 1e-8


def ours(W, x0, ts=TS, max_steps=4096):
    ys, status, _ = _tsit5.solve((Toy(W), x0), jnp.asarray(T0), ts, jnp.asarray(T1), TOL, TOL, max_steps)
    return ys, status


def diffrax_solve(W, x0, ts=TS):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, x, a: Toy(W)(t, x)),
        diffrax.Tsit5(),
        T0,
        T1,
        _tsit5.FIRST_STEP,
        x0,
        saveat=diffrax.SaveAt(ts=ts),
        max_steps=4096,
        stepsize_controller=diffrax.PIDController(rtol=TOL, atol=TOL),
    )
    return sol.ys, sol.stats


def test_same_states_as_diffrax():
    """The same steps as Diffrax (rejections included): states equal to round-off."""
    ys, status = jax.jit(ours)(W, X0)
    ref, stats = jax.jit(diffrax_solve)(W, X0)
    assert int(status) == _tsit5.SUCCESSFUL
    assert int(stats["num_steps"]) > int(stats["num_accepted_steps"])  # the case has rejected steps
    n = jax.jit(
        lambda W, x0: _tsit5._forward(Toy(W), x0, jnp.asarray(T0), TS, jnp.asarray(T1), TOL, TOL, 4096, 4096)[3][0]
    )(W, X0)
    assert int(n) == int(stats["num_accepted_steps"])
    np.testing.assert_allclose(ys, ref, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ys[0], X0)


def test_gradient_equals_diffrax_adjoint(weights=np.arange(1.0, D + 1)):
    """Reverse mode w.r.t. the field's arrays and x0 equals Diffrax's `RecursiveCheckpointAdjoint`
    through the same steps (to 1e-10 of the largest entry), under `jax.vmap` too."""

    def loss(solve):
        return lambda W, x0: jnp.sum(jnp.sin(solve(W, x0)[0]) * weights)

    got = jax.jit(jax.grad(loss(ours), (0, 1)))(W, X0)
    ref = jax.jit(jax.grad(loss(diffrax_solve), (0, 1)))(W, X0)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-10 * np.abs(r).max())
    batch = jax.random.normal(jax.random.key(2), (3, D), jnp.float64)
    got = jax.jit(jax.grad(lambda W: jnp.sum(jax.vmap(lambda x: loss(ours)(W, x))(batch))))(W)
    ref = jax.jit(jax.grad(lambda W: jnp.sum(jax.vmap(lambda x: loss(diffrax_solve)(W, x))(batch))))(W)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_gradient_matches_central_differences():
    """∂loss/∂W along a random direction against the central difference (h = 1e-6)."""

    def loss(W):
        return jnp.sum(ours(W, X0)[0] ** 2)

    direction = jax.random.normal(jax.random.key(3), W.shape, jnp.float64)
    g = jnp.sum(jax.jit(jax.grad(loss))(W) * direction)
    jitted = jax.jit(loss)
    fd = (jitted(W + 1e-6 * direction) - jitted(W - 1e-6 * direction)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6)


@pytest.mark.slow
def test_only_the_end_saved_and_a_frozen_field():
    """``ts = [t1]``; a field whose arrays are not differentiated gets no VJP w.r.t. them (x0 alone)."""
    ts = jnp.array([T1])
    g = jax.jit(jax.grad(lambda x0: jnp.sum(ours(W, x0, ts)[0])))(X0)
    r = jax.jit(jax.grad(lambda x0: jnp.sum(diffrax_solve(W, x0, ts)[0])))(X0)
    np.testing.assert_allclose(g, r, rtol=0, atol=1e-10 * np.abs(r).max())


def test_failures():
    """The budget running out: MAX_STEPS, rows not reached NaN; a NaN field: NONFINITE."""
    ys, status = jax.jit(lambda W, x0: ours(W, x0, max_steps=20))(W, X0)
    assert int(status) == _tsit5.MAX_STEPS
    assert np.isnan(ys[-1]).all() and np.isfinite(ys[0]).all()

    class Blows(eqx.Module):
        def __call__(self, t, x):
            return jnp.where(t > 1.0, jnp.nan, 1.0) * x

    ys, status, _ = jax.jit(
        lambda x0: _tsit5.solve((Blows(), x0), jnp.asarray(0.0), TS, jnp.asarray(T1), TOL, TOL, 4096)
    )(X0)
    assert int(status) == _tsit5.NONFINITE
    assert np.isnan(ys[-1]).all()


def test_dense_weights():
    """Tsit5's continuous extension: ``b(0) = 0``, ``b(1)`` the step's weights (seventh 0)."""
    np.testing.assert_allclose(_tsit5.dense_weights(0.0), np.zeros(7), atol=1e-15)
    np.testing.assert_allclose(_tsit5.dense_weights(1.0), _tsit5._B, atol=1e-12)


# ---- through jb.simulate ---------------------------------------------------------------------


def _system(dtype=jnp.float64):
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=dtype)
    drive = jb.hamiltonian.SpringDamperDrive(jnp.full(2, 3.0, dtype), 0.5, 0.3)
    return jb.HamiltonianSystem(tree, drive, jb.hamiltonian.LinearDamping(jnp.full(2, 0.1, dtype)))


def _run(system, q0, kwargs):
    return jb.simulate(system, system.initial_state(q0), 0.0, 2.0, **kwargs)


def _pair(form, rtol=1e-9):
    """The `StoredAdjoint` solve and its Diffrax twin (the same first step and controller)."""
    ts = jnp.linspace(0.0, 2.0, 9)
    return (
        dict(ts=ts, rtol=rtol, atol=rtol, form=form, adjoint=jb.simulation.StoredAdjoint()),
        dict(ts=ts, dt0=_tsit5.FIRST_STEP, stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol), form=form),
    )


@pytest.mark.slow
@pytest.mark.parametrize("form", ["velocity", "velocity, no factor kept", "hamiltonian"])
def test_simulate_equals_diffrax_path(form, monkeypatch):
    """`jb.simulate` with `StoredAdjoint` equals its Diffrax path with the same first step
    (``dt0=0.01`` with a `PIDController`) to round-off, every output; the gradient of a loss over
    the saved states w.r.t. the initial state and the tree's masses (the recursion's per-state
    reverse route) equals Diffrax's adjoint. The velocity form keeps each stage's factor of
    ``M + J`` for the reverse pass, or (above ``UNROLL_MAX`` coordinates, here by lowering it)
    recomputes ``M``."""
    system = _system()
    if form.startswith("velocity"):
        if "no factor" in form:
            monkeypatch.setattr(jb.dynamics.forward, "UNROLL_MAX", 1)
        field = jb.hamiltonian.solver_field(system, "velocity")
        kept = field.aux_init(system.initial_state(jnp.zeros(2), form="velocity"))
        assert (kept is None) == ("no factor" in form)
        form = "velocity"
    stored, ref = _pair(form)
    q0 = jnp.array([0.7, -0.4])
    a = jax.jit(lambda s, q: _run(s, q, stored))(system, q0)
    b = jax.jit(lambda s, q: _run(s, q, ref))(system, q0)
    assert a.solution.interpolation is None and bool(diffrax.is_okay(a.result))  # stats only
    for key in ("num_steps", "num_accepted_steps"):
        assert int(a.solution.stats[key]) == int(b.solution.stats[key]), key
    for name in ("ts", "q", "p", "qd", "f", "energy"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0, atol=1e-11, err_msg=name)

    def loss(kwargs):
        return lambda s, q: jnp.sum(_run(s, q, kwargs).q ** 2)

    got = jax.jit(jax.grad(loss(stored), (0, 1)))(system, q0)
    want = jax.jit(jax.grad(loss(ref), (0, 1)))(system, q0)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-8)
    np.testing.assert_allclose(got[0].tree.masses, want[0].tree.masses, rtol=1e-8)
    np.testing.assert_allclose(got[0].drive.stiffness, want[0].drive.stiffness, rtol=1e-8)


def test_simulate_bad_arguments():
    """What the loop cannot do is a ``ValueError`` naming it, before anything is traced."""
    system = _system()
    y0 = system.initial_state(jnp.array([0.7, -0.4]))
    stored = jb.simulation.StoredAdjoint()
    for bad, match in [
        (dict(dt0=0.01), "dt0"),
        (dict(dense=True), "dense"),
        (dict(solver=diffrax.Dopri5()), "solver=Dopri5"),
        (dict(event=jb.simulation.stop_when(0, 1.0)), "event"),
        (dict(saveat=diffrax.SaveAt(t1=True)), "saveat"),
    ]:
        with pytest.raises(ValueError, match=f"StoredAdjoint.*excludes {match}"):
            jb.simulate(system, y0, 0.0, 2.0, adjoint=stored, **bad)
    with pytest.raises(ValueError, match="StoredAdjoint: steps"):
        jb.simulation.StoredAdjoint(steps=0)
    with pytest.raises(ValueError, match="pass it to jaxbio.simulate"):
        diffrax.diffeqsolve(diffrax.ODETerm(lambda t, y, a: -y), diffrax.Tsit5(), 0.0, 1.0, 0.1, 1.0, adjoint=stored)


@pytest.mark.slow
def test_simulate_failures():
    """A budget that runs out (``steps``) fails as Diffrax's does: ``max_steps_reached`` with
    ``throw=False`` (rows not reached NaN, their times inf), `SimulationError` otherwise; a traced
    bad ``t1`` gives NaN rows; ``ts`` omitted saves ``t1``."""
    system = _system()
    y0 = system.initial_state(jnp.array([0.7, -0.4]))
    ts = jnp.linspace(0.0, 2.0, 5)
    stored = jb.simulation.StoredAdjoint()
    traj = jb.simulate(system, y0, 0.0, 2.0, ts=ts, rtol=1e-9, atol=1e-9, adjoint=stored, max_steps=5, throw=False)
    assert traj.result == diffrax.RESULTS.max_steps_reached
    assert np.isnan(traj.q[-1]).all() and np.isinf(traj.ts[-1]) and np.isfinite(traj.q[0]).all()
    with pytest.raises(jb.simulation.SimulationError, match="max_steps=5"):
        jb.simulate(system, y0, 0.0, 2.0, ts=ts, rtol=1e-9, atol=1e-9, adjoint=stored, max_steps=5)
    traj = jax.jit(lambda t1: jb.simulate(system, y0, 0.0, t1, adjoint=stored, throw=False))(-1.0)
    assert traj.result == diffrax.RESULTS.nonfinite and np.isnan(traj.q).all()
    end = jb.simulate(system, y0, 0.0, 2.0, rtol=1e-9, atol=1e-9, adjoint=stored)  # t1 alone saved
    np.testing.assert_allclose(
        end.q[-1], jb.simulate(system, y0, 0.0, 2.0, ts=ts, rtol=1e-9, atol=1e-9, adjoint=stored).q[-1], rtol=1e-12
    )


@pytest.mark.slow
def test_simulate_float32_batch_gradient():
    """float32 without x64 semantics in the result: a batch under `jax.vmap`, the gradient
    w.r.t. the drive equals the float64 one within 1e-3 of its norm."""
    grads = []
    for dtype in (jnp.float32, jnp.float64):
        system = _system(dtype)
        q0 = jnp.asarray([[0.7, -0.4], [0.2, 0.5], [-0.3, 0.1]], dtype)
        stored, _ = _pair("velocity", 1e-6 if dtype == jnp.float32 else 1e-10)

        def loss(drive):
            s = eqx.tree_at(lambda s: s.drive, system, drive)
            return jnp.mean(jax.vmap(lambda q: _run(s, q, stored).q)(q0) ** 2)

        g = jax.jit(jax.grad(loss))(system.drive)
        assert g.stiffness.dtype == dtype
        grads.append(np.concatenate([np.ravel(g.stiffness), np.ravel(g.damping), np.ravel(g.rest)]))
    assert np.linalg.norm(grads[0] - grads[1]) <= 1e-3 * np.linalg.norm(grads[1])


# ---- the default of jb.simulate -------------------------------------------------------------


def test_defaults_forward_and_reverse():
    """`jb.simulate` with only ``ts``: a forward solve is the Hamiltonian form on Diffrax's loop
    (bit for bit); under reverse mode (``jit(value_and_grad)``, ``grad``, ``vmap(grad)``) the
    velocity form on the stored loop, bit for bit ``form="velocity", adjoint=StoredAdjoint()``,
    whose states equal Diffrax's velocity-form solve to round-off and whose gradient is Diffrax's
    `RecursiveCheckpointAdjoint` gradient; ``solution.stats`` counts the steps as Diffrax's."""
    system = _system()
    q0 = jnp.array([0.7, -0.4])
    stored, ref = _pair("velocity")
    ts = stored["ts"]
    default = dict(ts=ts, rtol=1e-9, atol=1e-9)
    old = dict(default, form="hamiltonian", adjoint=diffrax.RecursiveCheckpointAdjoint())
    a = jax.jit(lambda s, q: _run(s, q, default))(system, q0)
    b = jax.jit(lambda s, q: _run(s, q, old))(system, q0)
    for name in ("ts", "q", "p", "qd", "f", "energy"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)

    def loss(kwargs):
        return lambda s, q: jnp.sum(_run(s, q, kwargs).q ** 2)

    value, got = jax.jit(jax.value_and_grad(loss(default), (0, 1)))(system, q0)
    value_s, got_s = jax.jit(jax.value_and_grad(loss(stored), (0, 1)))(system, q0)
    want = jax.jit(jax.grad(loss(ref), (0, 1)))(system, q0)
    assert value == value_s and value != loss(old)(system, q0)  # the velocity form's solve
    np.testing.assert_array_equal(got[1], got_s[1])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-8)
    np.testing.assert_allclose(got[0].drive.stiffness, want[0].drive.stiffness, rtol=1e-8)
    np.testing.assert_array_equal(jax.grad(loss(default), 1)(system, q0), got[1])
    batch = jnp.stack([q0, -q0])
    rows = jax.vmap(jax.grad(loss(default), 1), in_axes=(None, 0))(system, batch)
    np.testing.assert_allclose(rows[0], got[1], rtol=1e-12)

    c = jax.jit(lambda s, q: _run(s, q, ref))(system, q0)

    def run(q):  # reverse mode at the call: the stored solve, its states and stats as aux
        traj = _run(system, q, default)
        return jnp.sum(traj.q**2), (traj.q, traj.solution.stats, traj.solution.interpolation)

    _, _, (q_saved, stats, interpolation) = jax.vjp(run, q0, has_aux=True)
    assert interpolation is None  # the stored loop's Solution holds its stats only
    np.testing.assert_allclose(q_saved, c.q, rtol=0, atol=1e-11)
    for key in ("num_steps", "num_accepted_steps"):
        assert int(stats[key]) == int(c.solution.stats[key]), key
    assert int(c.solution.stats["num_steps"]) > int(c.solution.stats["num_accepted_steps"]) > 10


@pytest.mark.slow  # 113 s of the default run (its 25 slowest, 2026-12-08)
def test_default_differentiates_the_times():
    """A differentiated ``t1`` (which the stored loop does not differentiate) keeps Diffrax's
    loop: the derivative equals a central difference of the solve."""
    system = _system()
    y0 = system.initial_state(jnp.array([0.7, -0.4]))

    def end(t1, y0=y0):
        return jb.simulate(system, y0, 0.0, t1, rtol=1e-11, atol=1e-11).q[-1, 0]

    h = 1e-4
    np.testing.assert_allclose(jax.grad(end)(1.5), (end(1.5 + h) - end(1.5 - h)) / (2 * h), rtol=1e-6)
    both = jax.grad(lambda t1, y: end(t1, y), (0, 1))(1.5, y0)  # the times and the state at once
    np.testing.assert_allclose(both[0], jax.grad(end)(1.5), rtol=1e-9)


def test_default_form_by_system():
    """Under reverse mode the velocity form where it applies; a ball joint (``nq != nv``) keeps
    the Hamiltonian form (and `simulate` then takes only momenta)."""
    d = double_pendulum_dict()
    d["segments"][1]["joint"] = {"type": "spherical", "origin": [0, -1, 0], "orientation": [1, 0, 0, 0]}
    d["segments"][1]["inertia"] = [[0.02, 0, 0], [0, 0.01, 0], [0, 0, 0.02]]
    ball = jb.HamiltonianSystem(jb.SegmentTree.from_dict(d), dissipation=jb.hamiltonian.LinearDamping(0.1))
    y0 = ball.initial_state(jnp.array([0.3, 1.0, 0.0, 0.0, 0.0]))
    g = jax.grad(lambda y: jnp.sum(jb.simulate(ball, y, 0.0, 0.5, rtol=1e-9, atol=1e-9).q))(y0)
    h = jax.grad(lambda y: jnp.sum(jb.simulate(ball, y, 0.0, 0.5, rtol=1e-9, atol=1e-9, form="hamiltonian").q))(y0)
    np.testing.assert_allclose(g["p"], h["p"], rtol=1e-10)
    with pytest.raises(ValueError, match="'qd' instead of 'p'"):
        jb.simulate(ball, {"q": y0["q"], "qd": jnp.zeros(4), "f": y0["f"]}, 0.0, 0.5)


@pytest.mark.slow  # 86 s of the default run
def test_gradient_beyond_the_kept_steps():
    """A differentiated solve longer than the steps kept for reverse mode has its values (the
    step budget is ``max_steps``), and its gradient raises, naming the remedy; NaN with
    ``throw=False``, never a wrong number."""
    system = _system()
    q0 = jnp.array([0.7, -0.4])
    ts = jnp.linspace(0.0, 2.0, 5)
    short = dict(ts=ts, rtol=1e-9, atol=1e-9, adjoint=jb.simulation.StoredAdjoint(steps=5))
    full = dict(ts=ts, rtol=1e-9, atol=1e-9, adjoint=jb.simulation.StoredAdjoint())
    np.testing.assert_array_equal(_run(system, q0, short).q, _run(system, q0, full).q)
    with pytest.raises(Exception, match=r"more than the 5 steps kept for reverse mode.*StoredAdjoint\(steps=N\)"):
        jax.block_until_ready(jax.jit(jax.grad(lambda q: jnp.sum(_run(system, q, short).q)))(q0))
    g = jax.jit(jax.grad(lambda q: jnp.sum(_run(system, q, dict(short, throw=False)).q)))(q0)
    assert np.isnan(g).all()
    g = jax.jit(jax.grad(lambda q: jnp.sum(_run(system, q, full).q)))(q0)
    assert np.isfinite(g).all()
