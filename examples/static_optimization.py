"""Static optimisation of muscle forces over a motion, and how it shares the load compared with the
pseudoinverse of Blajer et al. 2007.

    python examples/static_optimization.py

1. gait10dof18musc (18 muscles, 10 DOF): a swing-like motion of both legs in the air; joint moments
   by inverse dynamics; reserve torque actuators on the pelvis and lumbar coordinates, which no
   muscle crosses. Static optimisation with force–length–velocity (Σ aᵖ, p = 2 and p = 3).
2. The same frames with the F/F⁰ objective (p = 2) against `clamped_pseudoinverse` (min Σ F², the
   forces clamped at zero and the solve repeated; Blajer et al. 2007, eq. 6): both reproduce the moments, but
   the pseudoinverse ignores how strong each muscle is.
3. An infeasible frame (a knee moment the muscles cannot produce) reported by `check_feasible`.
4. A derivative through the optimum: how the summed muscle force changes with each muscle's
   maximal isometric force (implicit differentiation, `jax.grad`).
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)  # the example's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxbio.estimation import (  # noqa: E402
    check_feasible,
    static_optimization,
    static_optimization_motion,
)
from jaxbio.muscles import geometry, sets  # noqa: E402

RESERVES = {"pelvis_tx": 1000.0, "pelvis_ty": 1000.0, "pelvis": 1000.0, "torso": 1000.0}


def gait_motion(T=40, frequency=0.8):
    """One cycle of a swing-like motion (rad, rad/s, rad/s²; m for the pelvis translations)."""
    w = 2 * np.pi * frequency
    amp = np.array([0.0, 0.0, 0.03, 0.24, 0.3, 0.09, 0.24, 0.3, 0.09, 0.03])
    off = np.array([0.0, 0.9, 0.0, 0.1, -0.6, 0.0, 0.1, -0.6, 0.0, 0.0])
    phase = np.array([0, 0, 0, 0, -0.5 * np.pi, 0.3, np.pi, 0.5 * np.pi, np.pi + 0.3, 0])
    t = np.linspace(0.0, 1.0 / frequency, T)[:, None]
    arg = w * t + phase
    return (
        jnp.asarray(off + amp * np.sin(arg)),
        jnp.asarray(amp * w * np.cos(arg)),
        jnp.asarray(-amp * w**2 * np.sin(arg)),
    )


def main():
    tree, paths, params = sets.load_muscle_set("gait10dof18musc", dtype=jnp.float64)
    coords = sets.coordinate_names("gait10dof18musc")
    q, qd, qdd = gait_motion()
    names = paths.names

    # 1. activations with force–length–velocity, p = 2 and 3
    print("1. gait10dof18musc, 40 frames, activation objective with force–length–velocity")
    res = {}
    for p in (2, 3):
        r = static_optimization_motion(
            tree, paths, params, q, qd, qdd, p=p, objective="activation", reserve_strength=RESERVES
        )
        check_feasible(r, coords)
        res[p] = r
        print(
            f"   p = {p}: all frames feasible, max |residual| {float(jnp.max(jnp.abs(r.residual))):.1e} N·m, "
            f"interior-point iterations ≤ {int(r.iterations.max())}"
        )
    print(f"   {'muscle':14s} {'mean a (p=2)':>13s} {'mean a (p=3)':>13s} {'peak F (p=2) N':>15s}")
    for i, name in enumerate(names[:9]):
        print(
            f"   {name:14s} {float(res[2].activations[:, i].mean()):13.3f} {float(res[3].activations[:, i].mean()):13.3f}"
            f" {float(res[2].forces[:, i].max()):15.1f}"
        )
    print(
        "   p = 3 spreads the load: activations more even (max "
        f"{float(res[3].activations.max()):.3f} vs {float(res[2].activations.max()):.3f} for p = 2)"
    )
    idx = [tree.names.index(k) for k in RESERVES]
    print(
        "   reserves carry the pelvis/lumbar moments (peak N·m / N):",
        ", ".join(f"{coords[j]} {float(jnp.abs(res[2].reserves[:, j]).max()):.1f}" for j in idx),
    )

    # 2. versus the clamped pseudoinverse (F/F⁰ objective, p = 2)
    print("\n2. static optimisation (min Σ (F/F⁰)²) vs clamped pseudoinverse (min Σ F²), same frames")
    so = static_optimization_motion(tree, paths, params, q, qd, qdd, p=2, objective="force", reserve_strength=RESERVES)
    try:
        from jaxbio.estimation.pseudoinverse import clamped_pseudoinverse
    except ImportError:
        print("   jaxbio.estimation.pseudoinverse not available: comparison skipped")
    else:
        R = jax.vmap(lambda x: geometry.moment_arms(paths, tree, x))(q)
        strength = np.zeros(tree.nq)
        strength[idx] = 1000.0
        # controls: 18 muscle forces (N, ≥ 0) and 10 reserve torques (N·m, free sign), H u = τ
        H = jnp.concatenate(
            [jnp.swapaxes(R, 1, 2), jnp.broadcast_to(jnp.diag(jnp.asarray(strength)), (len(q), 10, 10))], 2
        )
        nonneg = jnp.asarray(np.r_[np.ones(18, bool), np.zeros(10, bool)])
        pi = jax.vmap(lambda h, b: clamped_pseudoinverse(h, b, nonnegative=nonneg))(H, so.tau)
        f_pi = np.asarray(pi.x[:, :18])
        f_so = np.asarray(so.forces)
        fmax = np.asarray(params.max_isometric_force)
        print(
            f"   moments reproduced: static opt max |residual| {float(jnp.abs(so.residual).max()):.1e}, "
            f"pseudoinverse {float(jnp.abs(pi.residual).max()):.1e} N·m"
        )
        print(
            f"   {'muscle':14s} {'F⁰ N':>7s} {'mean F SO':>10s} {'mean F pinv':>12s} {'max F/F⁰ SO':>12s} {'max F/F⁰ pinv':>14s}"
        )
        for i, name in enumerate(names[:9]):
            print(
                f"   {name:14s} {fmax[i]:7.0f} {f_so[:, i].mean():10.1f} {f_pi[:, i].mean():12.1f} "
                f"{(f_so[:, i] / fmax[i]).max():12.3f} {(f_pi[:, i] / fmax[i]).max():14.3f}"
            )
        print(
            f"   Σ F² (N²) mean per frame: SO {np.mean(np.sum(f_so**2, 1)):.4g}, pinv {np.mean(np.sum(f_pi**2, 1)):.4g}"
            f"  |  Σ (F/F⁰)²: SO {np.mean(np.sum((f_so / fmax) ** 2, 1)):.4g}, pinv {np.mean(np.sum((f_pi / fmax) ** 2, 1)):.4g}"
        )
        print("   each method wins on its own criterion; the pseudoinverse loads muscles by moment arm alone")
        print(
            f"   (strong and weak alike), static optimisation in proportion to strength; mean |ΔF| "
            f"{np.abs(f_so - f_pi).mean():.1f} N, max {np.abs(f_so - f_pi).max():.1f} N"
        )

    # 3. an infeasible frame
    print("\n3. an impossible frame: 5× the knee moment of frame 10")
    tau = so.tau.at[10, 4].multiply(5.0).at[10, 4].add(-200.0)
    r = static_optimization_motion(
        tree, paths, params, q, qd, qdd, tau=tau, p=2, objective="activation", reserve_strength=RESERVES
    )
    try:
        check_feasible(r, coords)
    except ValueError as err:
        print(f"   ValueError: {err}")

    # 4. derivative through the optimum
    print("\n4. d(Σ F)/dF⁰ at frame 10 (activation-free F/F⁰ objective, p = 2), by implicit differentiation")
    R10 = geometry.moment_arms(paths, tree, q[10])
    strength = jnp.zeros(10).at[jnp.asarray(idx)].set(1000.0)

    def total_force(fmax):
        return jnp.sum(static_optimization(R10, so.tau[10], fmax, reserve_strength=strength).forces)

    g = jax.grad(total_force)(params.max_isometric_force)
    h = 1e-3
    e = jnp.zeros(18).at[0].set(h)
    fd = (total_force(params.max_isometric_force + e) - total_force(params.max_isometric_force - e)) / (2 * h)
    print("   " + ", ".join(f"{n} {float(v):+.4f}" for n, v in zip(names[:9], g[:9])))
    print(f"   check against central differences for {names[0]}: {float(g[0]):+.6f} vs {float(fd):+.6f}")


if __name__ == "__main__":
    main()
