"""TEMPORARY stand-in (replaced by the configuration module being written)."""
import jax
import jax.numpy as jnp

from jaxbio import quaternion as quat


def velocity_to_qdot(tree, q, v):
    out = []
    for t, i, j in zip(tree.joint_types, tree.q_start, tree.v_start):
        if t in ("revolute", "prismatic"):
            out.append(v[j:j + 1])
        elif t == "spherical":
            Q = q[i:i + 4]
            out.append(0.5 * quat.multiply(Q, jnp.concatenate([jnp.zeros(1, v.dtype), v[j:j + 3]])))
        elif t == "free":
            Q = q[i + 3:i + 7]
            out.append(quat.rotate(Q, v[j:j + 3]))
            out.append(0.5 * quat.multiply(Q, jnp.concatenate([jnp.zeros(1, v.dtype), v[j + 3:j + 6]])))
    return jnp.concatenate(out) if out else jnp.zeros(0, v.dtype)


def random(tree, key):
    out = []
    for t, k in zip(tree.joint_types, jax.random.split(key, tree.n_segments)):
        if t in ("revolute", "prismatic"):
            out.append(jax.random.uniform(k, (1,), minval=-3.0, maxval=3.0))
        elif t in ("spherical", "free"):
            x = jax.random.normal(k, (4,))
            x = x / jnp.linalg.norm(x)
            out.append(x if t == "spherical" else jnp.concatenate([jax.random.normal(k, (3,)), x]))
    return jnp.concatenate(out) if out else jnp.zeros(0)
