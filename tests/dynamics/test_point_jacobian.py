"""The one point Jacobian (jaxbio.dynamics.point_jacobian) against jax.jacfwd of forward kinematics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import quaternion as quat
from jaxbio.dynamics import com_jacobians, point_jacobian


def _point_world(tree, q, seg, point):
    pos, att = jb.forward_kinematics(tree, q)
    return pos[seg] + quat.rotate(att[seg], point)


@pytest.mark.parametrize("name", ["arm7", pytest.param("sagittal11", marks=pytest.mark.slow)])
def test_point_jacobian_equals_jacfwd_of_forward_kinematics(name):
    tree = jb.load_model(name).tree
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.uniform(-0.5, 0.5, tree.nq))
    point = jnp.asarray([0.03, -0.05, 0.01])
    for seg in (1, tree.nq - 1):
        jv, jw = point_jacobian(tree, q, tree.names[seg], point)
        ref = jax.jacfwd(lambda x: _point_world(tree, x, seg, point))(q)
        np.testing.assert_allclose(jv, ref, atol=1e-12)
        # angular part: ω = J_ω q̇ against the attitude derivative, ω = 2 vec(q̇uat ⊗ conj(quat))
        qd = jnp.asarray(rng.normal(size=tree.nq))
        att, datt = jax.jvp(lambda x: jb.forward_kinematics(tree, x)[1][seg], (q,), (qd,))
        omega = 2.0 * quat.multiply(datt, quat.conjugate(att))[1:]
        np.testing.assert_allclose(jw @ qd, omega, atol=1e-12)


def test_com_jacobians_are_point_jacobians_of_the_coms():
    tree = jb.load_model("arm7").tree
    q = jnp.linspace(-0.3, 0.4, tree.nq)
    jv, jw, _ = com_jacobians(tree, q)
    for k in range(tree.nq):
        ref = jax.jacfwd(lambda x: _point_world(tree, x, k, tree.coms[k]))(q)
        np.testing.assert_allclose(jv[k].T, ref, atol=1e-12)
