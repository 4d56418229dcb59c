"""Seed 004 (Watanabe & Duarte, *Matrix formalism of the equations of movement*): the actuated
double pendulum ``M(q) q̈ = C(q, q̇) + G(q) + Q + E`` in the notebook's absolute angles.

Two uniform rods (``m₁ = m₂ = 1`` kg, ``l₁ = 1``, ``l₂ = 0.5`` m) hang from the origin; ``θ₁``,
``θ₂`` are each rod's angle from the downward vertical (counter-clockwise positive), ``M₁`` the
shoulder torque and ``M₁₂`` the torque rod 1 applies to rod 2, so ``Q = (M₁ − M₁₂, M₁₂)``.
``G`` follows the notebook's *equation* (first row ``−(m₁ l₁/2 + m₂ l₁) g sin θ₁``); the
notebook's code has ``m₂ g l₂`` there, a typo we do not reproduce.

The same system as a `SegmentTree` is the shipped ``double_pendulum`` model, whose coordinates
are relative (``q = (θ₁, θ₂ − θ₁)``); `to_relative`/`to_absolute` convert, and the tests check
that the tree's M, C, G equal these matrices.
"""

from __future__ import annotations

from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "Parameters",
    "NOTEBOOK_INITIAL_STATE",
    "matrices",
    "accelerations",
    "energy",
    "euler",
    "PID",
    "simulate_pid",
    "to_relative",
    "to_absolute",
]

#: θ₁₀ = π/10, θ₂₀ = π/3, ω₁₀ = 2π, ω₂₀ = −6π (rad, rad/s), the notebook's initial state.
NOTEBOOK_INITIAL_STATE = (np.array([np.pi / 10, np.pi / 3]), np.array([2 * np.pi, -6 * np.pi]))


class Parameters(NamedTuple):
    """Rod masses (kg), lengths (m) and gravity (m/s²); defaults are the notebook's."""

    m1: float = 1.0
    m2: float = 1.0
    l1: float = 1.0
    l2: float = 0.5
    g: float = 9.81


def matrices(par: Parameters, theta, omega):
    """``M`` ``(2, 2)`` kg·m², ``C`` ``(2,)`` and ``G`` ``(2,)`` N·m of ``M θ̈ = C + G + Q``."""
    m1, m2, l1, l2, g = par
    d = theta[0] - theta[1]
    c, s = jnp.cos(d), jnp.sin(d)
    M = jnp.array([[m1 * l1**2 / 3 + m2 * l1**2, m2 * l1 * l2 * c / 2], [m2 * l1 * l2 * c / 2, m2 * l2**2 / 3]])
    C = jnp.array([-m2 * l1 * l2 * s * omega[1] ** 2 / 2, m2 * l1 * l2 * s * omega[0] ** 2 / 2])
    G = jnp.array([-(m1 * g * l1 / 2 + m2 * g * l1) * jnp.sin(theta[0]), -m2 * g * l2 / 2 * jnp.sin(theta[1])])
    return M, C, G


def accelerations(par: Parameters, theta, omega, Q=(0.0, 0.0)):
    """``θ̈ = M⁻¹ (C + G + Q)`` rad/s²."""
    M, C, G = matrices(par, theta, omega)
    return jnp.linalg.solve(M, C + G + jnp.asarray(Q))


def energy(par: Parameters, theta, omega):
    """Kinetic plus potential energy, J (potential zero at the pivot)."""
    m1, m2, l1, l2, g = par
    M, _, _ = matrices(par, theta, omega)
    T = 0.5 * omega @ M @ omega
    V = -m1 * g * l1 / 2 * jnp.cos(theta[0]) - m2 * g * (l1 * jnp.cos(theta[0]) + l2 / 2 * jnp.cos(theta[1]))
    return T + V


def euler(par: Parameters = Parameters(), theta0=None, omega0=None, dt: float = 1e-4, duration: float = 20.0,
          every: int = 100):
    """The notebook's explicit Euler run (``dt = 1e-4`` s, 20 s), as a `lax.scan`.

    Returns ``(t, theta, omega)`` sampled every ``every`` steps: ``(T,)`` s, ``(T, 2)`` rad,
    ``(T, 2)`` rad/s. Explicit Euler gains energy on this conservative system (see `energy`).
    """
    theta0 = NOTEBOOK_INITIAL_STATE[0] if theta0 is None else theta0
    omega0 = NOTEBOOK_INITIAL_STATE[1] if omega0 is None else omega0
    n_steps = int(round(duration / dt))
    n_out = n_steps // every

    def step(state, _):
        th, om = state
        return (th + dt * om, om + dt * accelerations(par, th, om)), None

    def chunk(state, _):
        state, _ = jax.lax.scan(step, state, None, length=every)
        return state, state

    state0 = (jnp.asarray(theta0, float), jnp.asarray(omega0, float))
    _, (th, om) = jax.lax.scan(chunk, state0, None, length=n_out)
    t = dt * every * jnp.arange(1, n_out + 1)
    return (jnp.concatenate([jnp.zeros(1), t]), jnp.concatenate([state0[0][None], th]),
            jnp.concatenate([state0[1][None], om]))


class PID(eqx.Module):
    """Joint PID controller left commented in the notebook, on both absolute angles.

    ``u_i = kp_i (r_i − θ_i) − kd_i ω_i + ki_i ∫ (r_i − θ_i) dt``; the shoulder torque is
    ``M₁ = u₁ + M₁₂`` and ``M₁₂ = u₂`` so that ``Q = (u₁, u₂)``. The notebook's gains for rod 2 are
    ``kp = 30``, ``kd = 2``, ``ki = 3`` with target ``r₂ = π/3``; our defaults keep its kp, kd
    for rod 2, raise ki to 10 (the notebook's 3 leaves a ~0.01 rad error after 20 s), and add
    gains for the shoulder.
    """

    target: jax.Array
    kp: jax.Array
    kd: jax.Array
    ki: jax.Array

    def __init__(self, target=(0.0, np.pi / 3), kp=(60.0, 30.0), kd=(6.0, 2.0), ki=(20.0, 10.0)):
        self.target, self.kp, self.kd, self.ki = (jnp.asarray(x, float) for x in (target, kp, kd, ki))
        if bool(jnp.any(self.kp < 0) | jnp.any(self.kd < 0) | jnp.any(self.ki < 0)):
            raise ValueError("PID gains must be ≥ 0")

    def __call__(self, theta, omega, integral):
        return self.kp * (self.target - theta) - self.kd * omega + self.ki * integral


def simulate_pid(pid: PID, par: Parameters = Parameters(), theta0=None, omega0=None, duration: float = 20.0,
                 ts=None, rtol=1e-8, atol=1e-8):
    """Closed-loop run with Diffrax (Tsit5, adaptive). Returns ``(t, theta, omega)``."""
    theta0 = NOTEBOOK_INITIAL_STATE[0] if theta0 is None else theta0
    omega0 = NOTEBOOK_INITIAL_STATE[1] if omega0 is None else omega0
    ts = jnp.linspace(0.0, duration, 401) if ts is None else ts

    def field(t, y, args):
        th, om, integral = y
        Q = pid(th, om, integral)
        return om, accelerations(par, th, om, Q), pid.target - th

    y0 = (jnp.asarray(theta0, float), jnp.asarray(omega0, float), jnp.zeros(2))
    sol = diffrax.diffeqsolve(diffrax.ODETerm(field), diffrax.Tsit5(), 0.0, duration, None, y0,
                              saveat=diffrax.SaveAt(ts=ts), stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
                              max_steps=200_000)
    return sol.ts, sol.ys[0], sol.ys[1]


def to_relative(theta, omega):
    """Absolute angles/rates → the segment tree's relative coordinates ``(θ₁, θ₂ − θ₁)``."""
    A = jnp.array([[1.0, 0.0], [-1.0, 1.0]])
    return A @ theta, A @ omega


def to_absolute(q, qd):
    """Relative coordinates → absolute angles ``(q₁, q₁ + q₂)``."""
    A = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    return A @ q, A @ qd
