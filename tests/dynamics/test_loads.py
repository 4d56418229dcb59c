"""`jaxbio.dynamics.point_loads`: point forces on segments as ``external`` wrenches.

References: the virtual work of the forces by central finite differences of the points' world
positions (from `forward_kinematics`), and a weight at a segment's COM against the same mass added
to the segment (gravity through the recursion itself).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import quaternion as quat
from jaxbio.dynamics import point_loads
from tests._models import random_model_dict


def world_points(tree, q, segments, points):
    pos, att = jb.forward_kinematics(tree, q)
    seg = np.asarray(segments)
    return pos[seg] + quat.rotate(att[seg], points)


def test_point_loads_do_the_virtual_work_of_the_forces():
    rng = np.random.default_rng(7)
    tree = jb.SegmentTree.from_dict(random_model_dict(rng, 6), dtype=jnp.float64)
    q = jnp.asarray(rng.normal(size=tree.nq))
    segments = (0, 3, 3, 5, tree.names[2])
    idx = (0, 3, 3, 5, 2)
    points = jnp.asarray(rng.normal(size=(5, 3)) * 0.3)
    forces = jnp.asarray(rng.normal(size=(5, 3)) * 20.0)
    external = point_loads(tree, q, segments, points, forces)
    z = jnp.zeros(tree.nq)
    tau = jb.inverse_dynamics(tree, q, z, z, external=external) - jb.inverse_dynamics(tree, q, z, z)
    # generalised force of the loads = ∂(Σ f·X(q))/∂q, by central differences
    h = 1e-6
    work = lambda x: float(jnp.sum(forces * world_points(tree, x, idx, points)))  # noqa: E731
    fd = np.array([(work(q + h * e) - work(q - h * e)) / (2 * h) for e in np.eye(tree.nq)])
    np.testing.assert_allclose(tau, -fd, atol=1e-7)
    # jit and vmap over poses
    qs = jnp.asarray(rng.normal(size=(3, tree.nq)))
    batch = jax.vmap(lambda x: point_loads(tree, x, segments, points, forces))(qs)
    np.testing.assert_allclose(batch[1][1], point_loads(tree, qs[1], segments, points, forces)[1], atol=1e-13)


def test_a_weight_at_the_com_equals_added_segment_mass():
    rng = np.random.default_rng(3)
    d = random_model_dict(rng, 4, chain=True)
    tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    extra = 2.5
    d["segments"][2]["mass"] += extra
    heavier = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    q = jnp.asarray(rng.normal(size=tree.nq))
    z = jnp.zeros(tree.nq)
    ext = point_loads(tree, q, (2,), tree.coms[2][None], extra * tree.gravity[None])
    np.testing.assert_allclose(
        jb.inverse_dynamics(tree, q, z, z, external=ext), jb.inverse_dynamics(heavier, q, z, z), atol=1e-10
    )
    assert all(np.all(np.asarray(a) == 0) for a in point_loads(tree, q, (), jnp.zeros((0, 3)), jnp.zeros((0, 3))))


def test_point_loads_errors():
    tree = jb.SegmentTree.from_dict(random_model_dict(np.random.default_rng(0), 3), dtype=jnp.float64)
    q = jnp.zeros(3)
    with pytest.raises(ValueError, match="not a segment index"):
        point_loads(tree, q, (3,), jnp.zeros((1, 3)), jnp.zeros((1, 3)))
    with pytest.raises(ValueError, match="unknown segment 'hand'"):
        point_loads(tree, q, ("hand",), jnp.zeros((1, 3)), jnp.zeros((1, 3)))
    with pytest.raises(ValueError, match="forces has shape"):
        point_loads(tree, q, (1,), jnp.zeros((1, 3)), jnp.zeros((2, 3)))
