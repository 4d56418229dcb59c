"""Seed 004's double pendulum: the notebook's explicit Euler run next to an energy-conserving
Diffrax run of the same system as a jaxbio HamiltonianSystem, and the notebook's PID controller.

    python examples/double_pendulum.py [--plot docs/double_pendulum.png]
"""

import argparse

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxbio as jb  # noqa: E402
from jaxbio.papers import watanabe_pendulum as dp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plot", default=None, help="write a PNG figure here")
    args = ap.parse_args()
    par = dp.Parameters()

    t_e, th_e, om_e = jax.jit(dp.euler)()
    E_e = np.asarray(jax.vmap(lambda a, b: dp.energy(par, a, b))(th_e, om_e))

    tree = jb.load_model("double_pendulum", dtype=jnp.float64)
    system = jb.HamiltonianSystem(tree)
    q0, qd0 = dp.to_relative(*(jnp.asarray(x) for x in dp.NOTEBOOK_INITIAL_STATE))
    ts = jnp.linspace(0.0, 20.0, 401)
    tr = jb.simulate(system, system.initial_state(q0, qd0), 0.0, 20.0, solver=diffrax.Dopri8(),
                     rtol=1e-12, atol=1e-12, ts=ts)
    E_h = np.asarray(tr.energy)

    print("double pendulum (seed 004): m1 = m2 = 1 kg, l1 = 1 m, l2 = 0.5 m, 20 s")
    print(f"  explicit Euler, dt = 1e-4 s : energy {E_e[0]:.6f} J -> {E_e[-1]:.6f} J, "
          f"max drift {np.max(np.abs(E_e - E_e[0])) / abs(E_e[0]):.2e} (relative)")
    print(f"  jaxbio Hamiltonian, Dopri8  : energy {E_h[0]:.6f} J -> {E_h[-1]:.6f} J, "
          f"max drift {np.max(np.abs(E_h - E_h[0])) / abs(E_h[0]):.2e} (relative), "
          f"{int(tr.solution.stats['num_steps'])} steps")

    pid = dp.PID()
    t_p, th_p, om_p = dp.simulate_pid(pid)
    print(f"  PID to θ = {np.asarray(pid.target).round(4).tolist()} rad: after 20 s θ = "
          f"{np.asarray(th_p[-1]).round(5).tolist()} rad, ω = {np.asarray(om_p[-1]).round(5).tolist()} rad/s")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        ax[0].plot(t_e, E_e, label="explicit Euler, dt = 1e-4 s (notebook)")
        ax[0].plot(ts, E_h, label="jaxbio HamiltonianSystem, Dopri8 1e-12")
        ax[0].set(xlabel="t [s]", ylabel="energy [J]", title="Energy of the free double pendulum")
        ax[0].legend(fontsize=8)
        ax[1].plot(t_p, th_p[:, 0], label="θ₁")
        ax[1].plot(t_p, th_p[:, 1], label="θ₂")
        for r in np.asarray(pid.target):
            ax[1].axhline(r, color="gray", lw=0.6, ls="--")
        ax[1].set(xlabel="t [s]", ylabel="angle [rad]", title="PID to a target posture")
        ax[1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"  figure: {args.plot}")


if __name__ == "__main__":
    main()
