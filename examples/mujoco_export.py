"""A jaxbio model in MuJoCo: write arm7 and the whole body as MJCF, load them in MuJoCo, and check
MuJoCo's inverse dynamics (and MJX's, batched, when mujoco-mjx is installed) against jaxbio's on
the same states.

    pip install mujoco mujoco-mjx
    python examples/mujoco_export.py          # writes arm7.xml and wholebody.xml here
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402

import jaxbio as jb  # noqa: E402


def main():
    for name in ("arm7", "wholebody"):
        tree = jb.load_model(name).tree
        xml = jb.io.to_mjcf(tree)
        Path(f"{name}.xml").write_text(xml)
        model = mujoco.MjModel.from_xml_string(xml)
        print(
            f"{name}: {tree.n_segments} segments -> {model.nbody - 1} MuJoCo bodies, nq {model.nq}, "
            f"nv {model.nv}; written to {name}.xml"
        )

        # a few random states, in jaxbio's conventions, translated to MuJoCo's
        keys = jax.random.split(jax.random.PRNGKey(0), 100)
        q = jax.vmap(lambda k: jb.configuration.random(tree, k))(keys)
        v, vdot = (jax.random.normal(k, (100, tree.nv)) for k in jax.random.split(jax.random.PRNGKey(1)))
        qpos, qvel, qacc = jax.vmap(lambda q, v, a: jb.io.to_mujoco_state(tree, q, v, a))(q, v, vdot)
        tau = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(tree, q, v, vdot)

        data = mujoco.MjData(model)
        qfrc = np.empty((100, model.nv))
        for i in range(100):
            data.qpos[:], data.qvel[:], data.qacc[:] = qpos[i], qvel[i], qacc[i]
            mujoco.mj_inverse(model, data)
            qfrc[i] = data.qfrc_inverse
        tau_mj = jax.vmap(lambda q, f: jb.io.from_mujoco_force(tree, q, f))(q, qfrc)
        scale = float(jnp.max(jnp.abs(tau)))
        print(
            f"  mj_inverse vs jb.inverse_dynamics, 100 states: max |Δτ| {float(jnp.max(jnp.abs(tau_mj - tau))):.1e} "
            f"(max |τ| {scale:.3g} N·m / N)"
        )

        try:
            from mujoco import mjx
        except ImportError:
            print("  (mujoco-mjx not installed: the batched MJX check is skipped)")
            continue
        mx = mjx.put_model(model)
        d0 = mjx.make_data(mx)
        batched = jax.jit(jax.vmap(lambda p, w, a: mjx.inverse(mx, d0.replace(qpos=p, qvel=w, qacc=a)).qfrc_inverse))
        tau_mjx = jax.vmap(lambda q, f: jb.io.from_mujoco_force(tree, q, f))(q, batched(qpos, qvel, qacc))
        print(
            f"  mjx.inverse (jit, vmap) vs jb.inverse_dynamics: max |Δτ| {float(jnp.max(jnp.abs(tau_mjx - tau))):.1e}"
        )


if __name__ == "__main__":
    main()
