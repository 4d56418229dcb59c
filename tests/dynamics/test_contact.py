"""The one contact type (jaxbio.dynamics.Contact) on the cases of the three it replaced: a pinned
point given in-plane (old planar GroundContact), a weld given as a (3,) point (old estimation
Contact, flat=True) and a segment name in inverse simulation (a weld at the origin)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import quaternion as quat
from jaxbio.dynamics import Contact, contact_jacobian
from jaxbio.estimation._inverse_simulation import _check_contacts

TREE = jb.load_model("sagittal11")
HEEL = (-0.04877, -0.0679)


def _rows(tree, q, seg, point, weld):
    """World x, y of the point and (weld) the segment angle about z, from forward kinematics."""
    pos, att = jb.forward_kinematics(tree, q)
    X = pos[seg] + quat.rotate(att[seg], point)
    angle = 2.0 * jnp.arctan2(att[seg, 3], att[seg, 0])
    return jnp.concatenate([X[:2], angle[None]]) if weld else X[:2]


@pytest.mark.parametrize("weld", [False, True])
@pytest.mark.parametrize("point", [HEEL, HEEL + (0.0,)])
def test_contact_jacobian_rows_equal_jacfwd(point, weld):
    c = Contact("foot_r", jnp.asarray(point), weld=weld)
    assert c.rows == (3 if weld else 2)
    q = jnp.asarray(np.random.default_rng(1).uniform(-0.4, 0.4, TREE.nq))
    G = contact_jacobian(TREE, q, (c,))
    seg = TREE.names.index("foot_r")
    ref = jax.jacfwd(lambda x: _rows(TREE, x, seg, c.point3(x.dtype), weld))(q)
    np.testing.assert_allclose(G, ref, atol=1e-12)


def test_segment_name_is_a_weld_at_the_origin_and_bad_contacts_raise():
    (c,) = _check_contacts(TREE, ("foot_r",))
    assert c.weld and c.rows == 3 and np.all(np.asarray(c.point) == 0)
    with pytest.raises(ValueError, match="point must have shape"):
        Contact("foot_r", jnp.zeros(4))
    with pytest.raises(ValueError, match="finite"):
        Contact("foot_r", (np.nan, 0.0, 0.0))
    with pytest.raises(ValueError, match="not in model"):
        _check_contacts(TREE, ("heel",))
