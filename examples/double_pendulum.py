"""Watanabe & Duarte's double pendulum: the notebook's explicit Euler run next to an energy-conserving
Diffrax run of the same system as a jaxbio HamiltonianSystem; the notebook's own PID closed loop
(free shoulder, elbow torque on rod 2's absolute angle, kp = 30, kd = 2, ki = 3, r = π/3), and
jaxbio's own two-joint PID variant (not in the notebook).

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

    tree = jb.load_model("double_pendulum", dtype=jnp.float64).tree
    system = jb.HamiltonianSystem(tree)
    q0, qd0 = dp.to_relative(*(jnp.asarray(x) for x in dp.NOTEBOOK_INITIAL_STATE))
    ts = jnp.linspace(0.0, 20.0, 401)
    tr = jb.simulate(
        system, system.initial_state(q0, qd0), 0.0, 20.0, solver=diffrax.Dopri8(), rtol=1e-12, atol=1e-12, ts=ts
    )
    E_h = np.asarray(tr.energy)

    print("double pendulum (Watanabe & Duarte): m1 = m2 = 1 kg, l1 = 1 m, l2 = 0.5 m, 20 s")
    print(
        f"  explicit Euler, dt = 1e-4 s : energy {E_e[0]:.6f} J -> {E_e[-1]:.6f} J, "
        f"max drift {np.max(np.abs(E_e - E_e[0])) / abs(E_e[0]):.2e} (relative)"
    )
    print(
        f"  jaxbio Hamiltonian, Dopri8  : energy {E_h[0]:.6f} J -> {E_h[-1]:.6f} J, "
        f"max drift {np.max(np.abs(E_h - E_h[0])) / abs(E_h[0]):.2e} (relative), "
        f"{int(tr.solution.stats['num_steps'])} steps"
    )

    t_n, th_n, om_n, _ = dp.simulate_notebook_pid()
    late = np.asarray(th_n[200:, 1])  # t ≥ 10 s
    print(
        f"  notebook's PID (rod 2 to r = π/3, free shoulder): θ₂ in [{late.min():.4f}, {late.max():.4f}] rad "
        f"over 10–20 s; after 20 s θ = {np.asarray(th_n[-1]).round(5).tolist()} rad"
    )

    pid = dp.TwoJointPID()
    t_p, th_p, om_p = dp.simulate_two_joint_pid(pid)
    print(
        f"  jaxbio's two-joint PID variant to θ = {np.asarray(pid.target).round(4).tolist()} rad: after 20 s θ = "
        f"{np.asarray(th_p[-1]).round(5).tolist()} rad, ω = {np.asarray(om_p[-1]).round(5).tolist()} rad/s"
    )

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 3, figsize=(15, 3.6))
        ax[0].plot(t_e, E_e, label="explicit Euler, dt = 1e-4 s (notebook)")
        ax[0].plot(ts, E_h, label="jaxbio HamiltonianSystem, Dopri8 1e-12")
        ax[0].set(xlabel="t [s]", ylabel="energy [J]", title="Energy of the free double pendulum")
        ax[0].legend(fontsize=8)
        ax[1].plot(t_n, th_n[:, 0], label="θ₁ (free)")
        ax[1].plot(t_n, th_n[:, 1], label="θ₂")
        ax[1].axhline(np.pi / 3, color="gray", lw=0.6, ls="--")
        ax[1].set(xlabel="t [s]", ylabel="angle [rad]", title="The notebook's PID (elbow only, r = π/3)")
        ax[1].legend(fontsize=8)
        ax[2].plot(t_p, th_p[:, 0], label="θ₁")
        ax[2].plot(t_p, th_p[:, 1], label="θ₂")
        for r in np.asarray(pid.target):
            ax[2].axhline(r, color="gray", lw=0.6, ls="--")
        ax[2].set(xlabel="t [s]", ylabel="angle [rad]", title="jaxbio's two-joint PID variant")
        ax[2].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"  figure: {args.plot}")


if __name__ == "__main__":
    main()
