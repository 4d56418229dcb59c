"""Batched Hamiltonian simulation vs scipy's solve_ivp, timed in the same run.

    python benchmarks/hamiltonian.py            # batch 10⁴ (a few minutes on 2 cores)
    python benchmarks/hamiltonian.py --quick    # batch 10³

Double pendulum of seed 004, 20 s, rtol = atol = 1e-8. jaxbio: `jit(vmap(simulate))` of the
segment-tree `HamiltonianSystem` (Tsit5, adaptive), and, for reference, the same Diffrax solve of
the seed-004 closed-form matrices. scipy: a Python loop of `solve_ivp(DOP853)` on the closed form
(NumPy), timed on a few trajectories. Compile time is reported separately from run time.
"""

from __future__ import annotations

import argparse
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

jax.config.update("jax_enable_x64", True)

import jaxbio as jb  # noqa: E402
from jaxbio import double_pendulum as dp  # noqa: E402

T, TOL = 20.0, 1e-8


def initial_states(n, seed=0):
    rng = np.random.default_rng(seed)
    th0, om0 = dp.NOTEBOOK_INITIAL_STATE
    return th0 + rng.uniform(-0.1, 0.1, (n, 2)), om0 * rng.uniform(0.5, 1.0, (n, 1))


def scipy_rhs(par):
    m1, m2, l1, l2, g = par

    def f(t, y):
        th, om = y[:2], y[2:]
        d = th[0] - th[1]
        M = np.array([[m1 * l1**2 / 3 + m2 * l1**2, m2 * l1 * l2 * np.cos(d) / 2], [m2 * l1 * l2 * np.cos(d) / 2, m2 * l2**2 / 3]])
        C = np.array([-m2 * l1 * l2 * np.sin(d) * om[1] ** 2 / 2, m2 * l1 * l2 * np.sin(d) * om[0] ** 2 / 2])
        G = np.array([-(m1 * g * l1 / 2 + m2 * g * l1) * np.sin(th[0]), -m2 * g * l2 / 2 * np.sin(th[1])])
        return np.concatenate([om, np.linalg.solve(M, C + G)])

    return f


def time_scipy(th, om, k):
    f = scipy_rhs(dp.Parameters())
    t0 = time.perf_counter()
    finals = [solve_ivp(f, (0, T), np.concatenate([th[i], om[i]]), method="DOP853", rtol=TOL, atol=TOL).y[:2, -1]
              for i in range(k)]
    return (time.perf_counter() - t0) / k, np.array(finals)


def tree_solver():
    tree = jb.load_model("double_pendulum", dtype=jnp.float64)
    system = jb.HamiltonianSystem(tree)

    def one(th, om):
        q, qd = dp.to_relative(th, om)
        tr = jb.simulate(system, system.initial_state(q, qd), 0.0, T, rtol=TOL, atol=TOL, max_steps=200_000)
        return dp.to_absolute(tr.q[-1], tr.qd[-1])[0]

    return jax.jit(jax.vmap(one))


def closed_form_solver():
    par = dp.Parameters()

    def one(th, om):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(lambda t, y, a: (y[1], dp.accelerations(par, *y))), diffrax.Tsit5(),
                                  0.0, T, None, (th, om), stepsize_controller=diffrax.PIDController(rtol=TOL, atol=TOL),
                                  max_steps=200_000)
        return sol.ys[0][-1]

    return jax.jit(jax.vmap(one))


def time_jax(fn, th, om):
    t0 = time.perf_counter()
    compiled = fn.lower(th, om).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(th, om))
    return compile_s, (time.perf_counter() - t0) / len(th), np.asarray(out)


def dH_dq_routes(batch=1000):
    """∂H/∂q by the Legendre route (−∂T/∂q at fixed q̇, jaxbio's) against jax.grad(H) through
    the Cholesky factorisation; µs per state, vmapped."""
    from jaxbio import hamiltonian as ham

    print(f"∂H/∂q, batch {batch}: jaxbio's route (−∂T/∂q|q̇ + g) vs jax.grad(H)")
    for name in ("double_pendulum", "arm7", "sagittal11"):
        tree = jb.load_model(name, dtype=jnp.float64)
        rng = np.random.default_rng(0)
        Q, QD = (jnp.asarray(rng.uniform(-1, 1, (batch, tree.nq))) for _ in range(2))
        routes = {
            "legendre": lambda q, qd: ham.dH_dq(tree, q, qd),
            "grad(H)": lambda q, qd: jax.grad(ham.hamiltonian, argnums=1)(tree, q, jb.mass_matrix(tree, q) @ qd),
        }
        res = {}
        for label, f in routes.items():
            c = jax.jit(jax.vmap(f)).lower(Q, QD).compile()
            out = jax.block_until_ready(c(Q, QD))
            t0 = time.perf_counter()
            for _ in range(5):
                jax.block_until_ready(c(Q, QD))
            res[label] = ((time.perf_counter() - t0) / 5 / batch * 1e6, np.asarray(out))
        err = np.max(np.abs(res["legendre"][1] - res["grad(H)"][1]))
        print(f"  {name:16s} legendre {res['legendre'][0]:8.3f} µs, grad(H) {res['grad(H)'][0]:8.3f} µs, "
              f"ratio {res['grad(H)'][0] / res['legendre'][0]:5.1f}×, max |Δ| {err:.1e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="batch 10³ instead of 10⁴")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--scipy-trajectories", type=int, default=5)
    args = ap.parse_args()
    n = args.batch or (1_000 if args.quick else 10_000)
    th, om = initial_states(n)
    print(f"double pendulum (seed 004), {T:.0f} s, rtol = atol = {TOL:g}, float64, backend {jax.default_backend()}")
    k = args.scipy_trajectories
    t_sp, ref = time_scipy(th, om, k)
    print(f"scipy solve_ivp DOP853 loop ({k} trajectories): {t_sp * 1e3:9.2f} ms / trajectory")
    rows = []
    for name, fn in (("jaxbio HamiltonianSystem (tree), Tsit5", tree_solver()),
                     ("Diffrax on the closed form, Tsit5", closed_form_solver())):
        for batch in (1, n):
            c, per, out = time_jax(fn, jnp.asarray(th[:batch]), jnp.asarray(om[:batch]))
            err = np.max(np.abs(np.angle(np.exp(1j * (out[:k] - ref[: min(k, batch)]))))) if batch >= 1 else np.nan
            rows.append((name, batch, c, per))
            print(f"{name:42s} batch {batch:6d}: compile {c:6.2f} s, {per * 1e3:9.3f} ms / trajectory, "
                  f"{t_sp / per:7.1f}× solve_ivp   (max |Δθ| vs scipy on {min(k, batch)}: {err:.1e} rad, chaotic)")
    dH_dq_routes()
    return rows


if __name__ == "__main__":
    main()
