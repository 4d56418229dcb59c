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

TREE = jb.load_model("sagittal11").tree
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


@pytest.mark.parametrize("model", ["sagittal11", "random"])
def test_generic_rows_are_point_jacobian_rows(model):
    """The contact-redundancy check ranks numpy rows (`contact._generic_rows`); they are
    `point_jacobian`'s rows at the same joint centres, slide axes and contact points (a motion with
    those positions, axes and identity attitudes), also with prismatic joints."""
    from jaxbio.dynamics.contact import _generic_rows
    from jaxbio.dynamics.kinematics import SegmentMotion, point_jacobian

    rng = np.random.default_rng(7)
    if model == "random":
        n = 8
        parents = tuple(int(rng.integers(-1, i)) if i else -1 for i in range(n))
        kinds = ("revolute", "prismatic", "revolute", "prismatic", "prismatic", "revolute", "revolute", "prismatic")
        tree = jb.SegmentTree(
            axes=jnp.zeros((n, 3)),
            origins=jnp.zeros((n, 3)),
            orientations=jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
            masses=jnp.ones(n),
            coms=jnp.zeros((n, 3)),
            inertias=jnp.tile(jnp.eye(3), (n, 1, 1)),
            gravity=jnp.zeros(3),
            names=tuple(f"s{i}" for i in range(n)),
            parents=parents,
            joint_types=kinds,
        )
    else:
        tree = jb.load_model("sagittal11", dtype=jnp.float64).tree
    n = tree.nq
    layout = ((n - 1, True), (n // 2, False), (n - 1, False))
    centres, points = rng.normal(size=(n, 2)), rng.normal(size=(len(layout), 2))
    slides = rng.normal(size=(n, 2))
    slides /= np.linalg.norm(slides, axis=1, keepdims=True)
    rows = _generic_rows(tree.parents, tree.joint_types, layout, centres, slides, points)

    z3 = jnp.zeros((n, 3))
    axes = np.where(tree.is_revolute[:, None], [0.0, 0.0, 1.0], np.concatenate([slides, np.zeros((n, 1))], 1))
    motion = SegmentMotion(
        attitude=jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
        position=jnp.asarray(np.concatenate([centres, np.zeros((n, 1))], 1)),
        axis=jnp.asarray(axes),
        omega=z3,
        velocity=z3,
        alpha=z3,
        acceleration=z3,
        offset=z3,
    )
    ref = []
    for (seg, weld), X in zip(layout, points):
        jv, jw = point_jacobian(tree, jnp.zeros(n), seg, jnp.append(X - centres[seg], 0.0), motion=motion)
        ref += [jv[0], jv[1]] + ([jw[2]] if weld else [])
    assert rows.shape == (7, n)
    np.testing.assert_allclose(rows, np.asarray(ref), rtol=0, atol=1e-14)
