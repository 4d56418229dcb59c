"""Inverse dynamics of the whole-body model over a batch of frames and a population of
subjects, and the sensitivity of the joint torques to segment masses — jit, vmap and grad.

    python examples/inverse_dynamics.py
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxbio as jb  # noqa: E402


def main():
    tree = jb.load_model("wholebody").tree
    n = tree.nv  # q has nq entries (the pelvis and the ball joints are quaternions), the rest nv
    rng = np.random.default_rng(0)
    frames = 1000
    keys = jax.random.split(jax.random.PRNGKey(0), frames)
    q = jax.vmap(lambda k: jb.configuration.random(tree, k, angle=0.5, distance=0.5))(keys)
    qd, qdd = (jnp.asarray(rng.uniform(-s, s, (frames, n))) for s in (1.0, 3.0))

    # one subject, many frames
    per_frame = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))
    tau = per_frame(tree, q, qd, qdd)
    print(
        f"{tree.name}: {n} DOF (nq = {tree.nq}), {frames} frames -> tau {tau.shape}; "
        f"peak |tau| {float(jnp.max(jnp.abs(tau))):.1f} (N·m / N)"
    )

    # many subjects (body mass scaled 0.8–1.2), one frame: vmap over model parameters
    scale = jnp.linspace(0.8, 1.2, 5)
    with_masses = lambda m: eqx.tree_at(lambda t: t.masses, tree, m)
    per_subject = jax.vmap(lambda s: jb.inverse_dynamics(with_masses(s * tree.masses), q[0], qd[0], qdd[0]))
    # the right hip is a ball joint: its moment is tau[k:k + 3] in the thigh frame; hip flexion
    # turns the thigh about its -y axis
    k = tree.v_start[tree.index("thigh_r")] + 1
    print(
        "hip flexion moment (right) by body-mass scale:",
        dict(zip(np.round(np.asarray(scale), 2).tolist(), np.round(-np.asarray(per_subject(scale)[:, k]), 2).tolist())),
    )

    # d tau / d masses: which segment's mass matters for which joint
    J = jax.jacfwd(lambda m: jb.inverse_dynamics(with_masses(m), q[0], qd[0], qdd[0]))(tree.masses)
    top = np.argsort(-np.abs(np.asarray(J[k])))[:3]
    print("d (right hip flexion moment) / d mass:", {tree.names[i]: round(-float(J[k, i]), 3) for i in top}, "(N·m/kg)")


if __name__ == "__main__":
    main()
