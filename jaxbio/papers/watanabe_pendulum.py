"""Watanabe & Duarte, *Matrix formalism of the equations of movement* (BMClab notebook): the actuated
double pendulum ``M(q) q̈ = C(q, q̇) + G(q) + Q + E`` in the notebook's absolute angles.

Two uniform rods (``m₁ = m₂ = 1`` kg, ``l₁ = 1``, ``l₂ = 0.5`` m) hang from the origin; ``θ₁``,
``θ₂`` are each rod's angle from the downward vertical (counter-clockwise positive), ``M₁`` the
shoulder torque and ``M₁₂`` the torque rod 1 applies to rod 2, so ``Q = (M₁ − M₁₂, M₁₂)``.
``G`` follows the notebook's *equation* (first row ``−(m₁ l₁/2 + m₂ l₁) g sin θ₁``); the
notebook's code has ``m₂ g l₂`` there, a typo we do not reproduce.

Control: `NotebookPID` / `simulate_notebook_pid` is the notebook's own (commented-out) PID
closed loop — free shoulder, elbow torque on rod 2's absolute angle — with its integral as an
extra ODE state, and ``euler(pid=NotebookPID())`` its Euler loop as written; `TwoJointPID` /
`simulate_two_joint_pid` is jaxbio's own two-joint variant, not in the notebook.

The same system as a `SegmentTree` is the shipped ``double_pendulum`` model, whose coordinates
are relative (``q = (θ₁, θ₂ − θ₁)``); `to_relative`/`to_absolute` convert, and the tests check
that the tree's M, C, G equal these matrices.

Fast batched simulation: `simulate_batch` integrates many trajectories with Diffrax (one
``diffeqsolve``, vmapped, per-trajectory adaptive steps) using `vector_field`, the same
equations with the 2×2 solve written out and a vectorisable float64 `sincos`. On XLA's CPU
backend this is what makes the batched solve fast: `jnp.linalg.solve` on a 2×2 matrix is a
LAPACK call per matrix, libm's ``sin`` is a scalar call per element, and cheap elementwise
code that feeds several outputs gets duplicated by XLA's fusion unless it is materialised
(``lax.optimization_barrier``); see ``benchmarks/hamiltonian.py``.
"""

from __future__ import annotations

from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxbio._sincos import sincos  # noqa: F401  (re-exported: dp.sincos)
from jaxbio._validate import as_float, check_values

__all__ = [
    "Parameters",
    "NOTEBOOK_INITIAL_STATE",
    "matrices",
    "accelerations",
    "energy",
    "euler",
    "NotebookPID",
    "notebook_pid_field",
    "simulate_notebook_pid",
    "TwoJointPID",
    "simulate_two_joint_pid",
    "to_relative",
    "to_absolute",
    "sincos",
    "vector_field",
    "simulate_batch",
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


def euler(
    par: Parameters = Parameters(),
    theta0=None,
    omega0=None,
    dt: float = 1e-4,
    duration: float = 20.0,
    every: int = 100,
    pid: NotebookPID | None = None,
):
    """The notebook's explicit Euler run (``dt = 1e-4`` s, 20 s), as a `lax.scan`.

    Each step is the notebook's ``state[i] = state[i-1] + dt * f(state[i-1])``: angles advance
    with the old rates, rates with ``M⁻¹(C + G + Q)`` at the old state. With ``pid`` (a
    `NotebookPID`) the loop is the notebook's commented-out closed loop, its integral term taken
    as the notebook takes it, ``dt * np.trapz(r − θ₂[0:i])`` over the samples so far (kept as a
    running sum, so the run is O(steps) rather than the notebook's O(steps²)); without it
    ``Q = 0``.

    Returns ``(t, theta, omega)`` sampled every ``every`` steps: ``(T,)`` s, ``(T, 2)`` rad,
    ``(T, 2)`` rad/s. Explicit Euler gains energy on this conservative system (see `energy`).
    """
    theta0 = NOTEBOOK_INITIAL_STATE[0] if theta0 is None else theta0
    omega0 = NOTEBOOK_INITIAL_STATE[1] if omega0 is None else omega0
    n_steps = int(round(duration / dt))
    n_out = n_steps // every
    if pid is not None and not isinstance(pid, NotebookPID):
        raise ValueError(f"pid must be a NotebookPID or None, got {type(pid).__name__}")
    state0 = (jnp.asarray(theta0, float), jnp.asarray(omega0, float), jnp.zeros(()))
    e0 = 0.0 if pid is None else pid.target - state0[0][1]

    def step(state, _):
        th, om, total = state  # total = Σ (r − θ₂) over the samples before this one
        if pid is None:
            return (th + dt * om, om + dt * accelerations(par, th, om), total), None
        e = pid.target - th[1]
        total = total + e
        integral = dt * (total - (e0 + e) / 2)  # dt · np.trapz(e[0:i]) (unit spacing, times dt)
        return (th + dt * om, om + dt * accelerations(par, th, om, pid(th, om, integral)), total), None

    def chunk(state, _):
        state, _ = jax.lax.scan(step, state, None, length=every)
        return state, state[:2]

    _, (th, om) = jax.lax.scan(chunk, state0, None, length=n_out)
    t = dt * every * jnp.arange(1, n_out + 1)
    return (
        jnp.concatenate([jnp.zeros(1), t]),
        jnp.concatenate([state0[0][None], th]),
        jnp.concatenate([state0[1][None], om]),
    )


class NotebookPID(eqx.Module):
    """The notebook's own PID (commented out in its Euler loop), on rod 2 only.

    The notebook's line is ``M12 = 30*(r - state[3,i-1]) - 2*state[1,i-1] +
    3*np.trapz(r - state[3,0:i])*dt`` with ``state = (ω₁, ω₂, θ₁, θ₂)`` and ``M1 = 0``, i.e.

        M₁₂ = kp (r − θ₂) − kd ω₂ + ki ∫₀ᵗ (r − θ₂) dt,      Q = (M₁ − M₁₂, M₁₂),  M₁ = 0

    with the *absolute* angle ``θ₂`` of rod 2 from the downward vertical and its rate ``ω₂``: the
    elbow torque steers rod 2's absolute angle to ``r``, the shoulder is free (no torque).
    Fields (scalars): ``target`` ``r`` rad (notebook π/3), ``kp`` N·m/rad (30), ``kd``
    N·m·s/rad (2), ``ki`` N·m/(rad·s) (3). ``__call__(theta, omega, integral)`` returns
    ``Q`` ``(2,)`` N·m from ``theta``, ``omega`` ``(2,)`` (absolute, rad, rad/s) and the
    integral state ``∫(r − θ₂) dt`` rad·s.
    """

    target: jax.Array
    kp: jax.Array
    kd: jax.Array
    ki: jax.Array

    def __init__(self, target=np.pi / 3, kp=30.0, kd=2.0, ki=3.0):
        for name, value in (("target", target), ("kp", kp), ("kd", kd), ("ki", ki)):
            x = as_float(value, f"NotebookPID: {name}")
            if x.shape != ():
                raise ValueError(f"NotebookPID: {name} must be a scalar, got shape {x.shape}")
            check_values(x, f"NotebookPID: {name}", nonnegative=name != "target")
            setattr(self, name, x)

    def elbow_torque(self, theta, omega, integral):
        """``M₁₂`` N·m."""
        return self.kp * (self.target - theta[1]) - self.kd * omega[1] + self.ki * integral

    def __call__(self, theta, omega, integral):
        m12 = self.elbow_torque(theta, omega, integral)
        return jnp.stack([-m12, m12])  # Q = (M₁ − M₁₂, M₁₂) with M₁ = 0


def notebook_pid_field(t, y, args):
    """The notebook's closed loop as a first-order ODE (Diffrax's signature).

    ``y = (theta, omega, integral)``: ``(2,)`` rad, ``(2,)`` rad/s (absolute angles), ``()``
    rad·s, the PID's integral ``∫(r − θ₂) dt`` carried as an extra ODE state (the notebook sums
    it with ``np.trapz`` over its Euler samples). ``args = (pid, par)``: `NotebookPID`,
    `Parameters`. Returns ``(θ̇, ω̇, r − θ₂)``.
    """
    del t
    pid, par = args
    theta, omega, integral = y
    return omega, accelerations(par, theta, omega, pid(theta, omega, integral)), pid.target - theta[1]


def simulate_notebook_pid(
    pid: NotebookPID | None = None,
    par: Parameters = Parameters(),
    theta0=None,
    omega0=None,
    duration: float = 20.0,
    ts=None,
    rtol: float = 1e-10,
    atol: float = 1e-10,
    solver: diffrax.AbstractSolver | None = None,
):
    """The notebook's PID closed loop (`NotebookPID`, default gains), from the notebook's initial
    state, with Diffrax (default Tsit5, adaptive ``rtol``/``atol``).

    ``G`` follows the notebook's equation (see the module docstring). ``ts``: output times s
    (default 401 points over ``duration``). Returns ``(t, theta, omega, integral)``: ``(T,)`` s,
    ``(T, 2)`` rad, ``(T, 2)`` rad/s, ``(T,)`` rad·s.
    """
    pid = NotebookPID() if pid is None else pid
    if not isinstance(pid, NotebookPID):
        raise ValueError(f"pid must be a NotebookPID, got {type(pid).__name__}")
    if not float(duration) > 0:
        raise ValueError(f"duration must be > 0, got {duration}")
    theta0 = NOTEBOOK_INITIAL_STATE[0] if theta0 is None else theta0
    omega0 = NOTEBOOK_INITIAL_STATE[1] if omega0 is None else omega0
    ts = jnp.linspace(0.0, duration, 401) if ts is None else jnp.asarray(ts, float)
    y0 = (jnp.asarray(theta0, float), jnp.asarray(omega0, float), jnp.zeros(()))
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(notebook_pid_field),
        diffrax.Tsit5() if solver is None else solver,
        0.0,
        duration,
        None,
        y0,
        args=(pid, par),
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=400_000,
    )
    return sol.ts, sol.ys[0], sol.ys[1], sol.ys[2]


class TwoJointPID(eqx.Module):
    """jaxbio's own two-joint PID variant (not the notebook's: see `NotebookPID`), on both
    absolute angles.

    ``u_i = kp_i (r_i − θ_i) − kd_i ω_i + ki_i ∫ (r_i − θ_i) dt``; the shoulder torque is
    ``M₁ = u₁ + M₁₂`` and ``M₁₂ = u₂`` so that ``Q = (u₁, u₂)``. Unlike the notebook (free
    shoulder, rod-2 gains kp = 30, kd = 2, ki = 3), it also drives the shoulder to ``r₁`` and
    uses ki = 10 on rod 2. Fields ``(2,)``: ``target`` rad, ``kp`` N·m/rad, ``kd`` N·m·s/rad,
    ``ki`` N·m/(rad·s).
    """

    target: jax.Array
    kp: jax.Array
    kd: jax.Array
    ki: jax.Array

    def __init__(self, target=(0.0, np.pi / 3), kp=(60.0, 30.0), kd=(6.0, 2.0), ki=(20.0, 10.0)):
        self.target, self.kp, self.kd, self.ki = (jnp.asarray(x, float) for x in (target, kp, kd, ki))
        for name in ("kp", "kd", "ki"):
            check_values(getattr(self, name), f"TwoJointPID: {name}", nonnegative=True)

    def __call__(self, theta, omega, integral):
        return self.kp * (self.target - theta) - self.kd * omega + self.ki * integral


def simulate_two_joint_pid(
    pid: TwoJointPID,
    par: Parameters = Parameters(),
    theta0=None,
    omega0=None,
    duration: float = 20.0,
    ts=None,
    rtol=1e-8,
    atol=1e-8,
):
    """`TwoJointPID` closed loop with Diffrax (Tsit5, adaptive). Returns ``(t, theta, omega)``:
    ``(T,)`` s, ``(T, 2)`` rad, ``(T, 2)`` rad/s."""
    theta0 = NOTEBOOK_INITIAL_STATE[0] if theta0 is None else theta0
    omega0 = NOTEBOOK_INITIAL_STATE[1] if omega0 is None else omega0
    ts = jnp.linspace(0.0, duration, 401) if ts is None else ts

    def field(t, y, args):
        th, om, integral = y
        Q = pid(th, om, integral)
        return om, accelerations(par, th, om, Q), pid.target - th

    y0 = (jnp.asarray(theta0, float), jnp.asarray(omega0, float), jnp.zeros(2))
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Tsit5(),
        0.0,
        duration,
        None,
        y0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=200_000,
    )
    return sol.ts, sol.ys[0], sol.ys[1]


def vector_field(t, y, args=None):
    """The unactuated equations of Watanabe & Duarte's notebook as a first-order ODE with Diffrax's signature.

    ``y = (θ₁, θ₂, ω₁, ω₂)`` (a tuple of four scalars, or of four equally shaped arrays for a
    batch-last layout), absolute angles rad and rates rad/s; ``args``: `Parameters` (default
    the notebook's). Returns ``(ω₁, ω₂, θ̈₁, θ̈₂)`` with ``θ̈ = M⁻¹ (C + G)`` — `accelerations`
    with the 2×2 inverse written out, ``sin``/``cos`` from `sincos`, and the accelerations
    materialised (``lax.optimization_barrier``) so XLA does not recompute them in every consumer.
    """
    del t
    m1, m2, l1, l2, g = Parameters() if args is None else args
    th1, th2, om1, om2 = y
    s1, c1 = sincos(th1)
    s2, c2 = sincos(th2)
    s, c = s1 * c2 - c1 * s2, c1 * c2 + s1 * s2  # sin, cos of θ₁ − θ₂
    k = m2 * l1 * l2 / 2
    a, b, d = m1 * l1**2 / 3 + m2 * l1**2, k * c, m2 * l2**2 / 3  # M = [[a, b], [b, d]]
    r1 = -k * s * om2**2 - (m1 * g * l1 / 2 + m2 * g * l1) * s1  # C + G
    r2 = k * s * om1**2 - m2 * g * l2 / 2 * s2
    inv_det = 1.0 / (a * d - b * b)
    acc1, acc2 = jax.lax.optimization_barrier(((d * r1 - b * r2) * inv_det, (a * r2 - b * r1) * inv_det))
    return om1, om2, acc1, acc2


def simulate_batch(
    theta0,
    omega0,
    duration: float = 20.0,
    *,
    par: Parameters = Parameters(),
    solver: diffrax.AbstractSolver | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-8,
    chunk_size: int | None = None,
    max_steps: int = 200_000,
    throw: bool = True,
):
    """Final states of many free double pendulums, one adaptive Diffrax solve per trajectory.

    Args:
        theta0, omega0: ``(N, 2)`` (or ``(2,)``) initial absolute angles rad and rates rad/s.
        duration: s.
        par: `Parameters`.
        solver: Diffrax solver (default `diffrax.Tsit5`); steps adapt per trajectory with a
            `diffrax.PIDController(rtol, atol)`.
        chunk_size: ``None`` vmaps the whole batch (one batched while-loop); an integer runs
            chunks of that many trajectories one after another (``lax.map(batch_size=…)``), so
            a chunk stops at its own slowest trajectory.
        max_steps, throw: as in `diffrax.diffeqsolve`.

    Returns:
        ``(theta, omega, num_steps)``: ``(N, 2)`` rad, ``(N, 2)`` rad/s at ``t = duration``
        and the number of steps (accepted + rejected) of each trajectory ``(N,)``.
    """
    theta0, omega0 = jnp.asarray(theta0), jnp.asarray(omega0)
    if theta0.shape != omega0.shape or theta0.shape[-1:] != (2,) or theta0.ndim not in (1, 2):
        raise ValueError(f"theta0 and omega0 must both be (N, 2) or (2,), got {theta0.shape} and {omega0.shape}")
    if chunk_size is not None and (int(chunk_size) != chunk_size or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size}")
    if not float(duration) > 0:
        raise ValueError(f"duration must be > 0, got {duration}")
    solver = diffrax.Tsit5() if solver is None else solver
    controller = diffrax.PIDController(rtol=rtol, atol=atol)

    def one(y):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field),
            solver,
            0.0,
            duration,
            None,
            (y[0], y[1], y[2], y[3]),
            args=par,
            stepsize_controller=controller,
            saveat=diffrax.SaveAt(t1=True),
            max_steps=max_steps,
            throw=throw,
        )
        return jnp.stack([leaf[-1] for leaf in sol.ys]), sol.stats["num_steps"]

    y0 = jnp.concatenate([theta0, omega0], axis=-1)
    if y0.ndim == 1:
        y, steps = one(y0)
    elif chunk_size is None:
        y, steps = jax.vmap(one)(y0)
    else:
        y, steps = jax.lax.map(one, y0, batch_size=int(chunk_size))
    return y[..., :2], y[..., 2:], steps


def to_relative(theta, omega):
    """Absolute angles/rates → the segment tree's relative coordinates ``(θ₁, θ₂ − θ₁)``."""
    A = jnp.array([[1.0, 0.0], [-1.0, 1.0]])
    return A @ theta, A @ omega


def to_absolute(q, qd):
    """Relative coordinates → absolute angles ``(q₁, q₁ + q₂)``."""
    A = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    return A @ q, A @ qd
