"""The model builder (jaxbio/models/build.py) against closed forms: rigid-body inertias from radii of
gyration (uniform rod, point masses), lumping and its inverse, and a built dict loading as a tree."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxbio as jb
from jaxbio.models.build import (
    GRAVITY_PLANAR,
    X,
    Y,
    Z,
    Body,
    combine,
    gyration_inertia,
    model,
    moved,
    segment,
    subtract,
    transformed,
    virtual,
)


def test_gyration_inertia_of_a_uniform_rod():
    """A uniform rod of mass m and length L along x: m L²/12 about y and z, 0 about x; the radius
    about every transverse axis is 1/√12 of the length (also on traced JAX arrays, batched)."""
    m, L = 2.5, 0.8
    k = 1 / np.sqrt(12)
    principal = gyration_inertia(
        np.asarray(m),
        np.asarray(L),
        [np.asarray(k), np.asarray(k), np.asarray(0.0)],
        [np.outer(e, e) for e in (Y, Z, X)],
    )
    np.testing.assert_allclose(principal, np.diag([0.0, m * L**2 / 12, m * L**2 / 12]), rtol=1e-14, atol=0)

    # the same rod turned in the x-y plane, in the axisymmetric form (E − x̂x̂ᵀ, x̂x̂ᵀ), jit + vmap
    angles = jnp.array([0.0, 0.3, 1.2])

    def rod(a):
        x = jnp.stack([jnp.cos(a), jnp.sin(a), 0.0])
        xx = jnp.outer(x, x)
        return gyration_inertia(
            jnp.asarray(m), jnp.asarray(L), (jnp.asarray(k), jnp.asarray(0.0)), (jnp.eye(3) - xx, xx)
        )

    got = jax.jit(jax.vmap(rod))(angles)
    for a, inertia in zip(np.asarray(angles), np.asarray(got)):
        R = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
        np.testing.assert_allclose(inertia, R @ principal @ R.T, rtol=0, atol=1e-15)


def test_combine_point_masses_and_subtract():
    """Two point masses m1 at a and m2 at b: COM on the segment, inertia about it μ d² (E − d̂d̂ᵀ)
    with μ = m1 m2 / (m1 + m2), d = b − a; subtracting one gives the other back."""
    m1, m2 = 3.0, 1.0
    a, b = np.array([0.1, -0.2, 0.3]), np.array([0.5, 0.4, -0.1])
    zero = np.zeros((3, 3))
    lumped = combine(Body(m1, a, zero), Body(m2, b, zero))
    d = b - a
    mu = m1 * m2 / (m1 + m2)
    assert lumped.mass == m1 + m2
    np.testing.assert_allclose(lumped.com, (m1 * a + m2 * b) / (m1 + m2), rtol=1e-15)
    np.testing.assert_allclose(lumped.inertia, mu * (d @ d * np.eye(3) - np.outer(d, d)), rtol=0, atol=1e-15)
    rest = subtract(lumped, Body(m2, b, zero))
    assert np.isclose(rest.mass, m1)
    np.testing.assert_allclose(rest.com, a, rtol=0, atol=1e-15)
    np.testing.assert_allclose(rest.inertia, zero, rtol=0, atol=1e-15)
    np.testing.assert_allclose(moved(lumped, a).com, lumped.com - a, rtol=0, atol=0)


def test_built_dict_loads_as_a_tree():
    rod = Body(1.0, np.array([0.0, -0.5, 0.0]), np.diag([1 / 12, 1e-6, 1 / 12]))
    d = model(
        "pendulum",
        GRAVITY_PLANAR,
        [
            virtual("slide", None, "prismatic", X, origin=(0.0, 1.0, 0.0)),
            segment("rod", "slide", "revolute", Z, rod, orientation=(np.cos(0.2), 0.0, 0.0, np.sin(0.2))),
        ],
    )
    tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
    assert tree.names == ("slide", "rod") and tree.parents == (-1, 0)
    assert tree.joint_types == ("prismatic", "revolute")
    np.testing.assert_array_equal(tree.masses, [0.0, 1.0])  # a virtual link is a massless frame
    np.testing.assert_array_equal(tree.coms[0], np.zeros(3))
    np.testing.assert_array_equal(tree.inertias[0], np.zeros((3, 3)))
    np.testing.assert_array_equal(tree.origins[0], [0.0, 1.0, 0.0])
    np.testing.assert_allclose(tree.orientations[1], [np.cos(0.2), 0.0, 0.0, np.sin(0.2)], rtol=0, atol=0)


def test_transformed_body_is_the_same_body_in_another_frame():
    """A body expressed in a rotated, shifted frame: world COM and world inertia unchanged."""
    c, s = np.cos(0.7), np.sin(0.7)
    R = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])  # the new frame's axes, in the old frame
    origin = np.array([0.1, -0.2, 0.3])
    body = Body(2.0, np.array([0.0, -0.4, 0.05]), np.array([[0.3, 0.01, 0.0], [0.01, 0.1, 0.02], [0.0, 0.02, 0.25]]))
    new = transformed(body, R, origin)
    np.testing.assert_allclose(origin + R @ new.com, body.com, atol=1e-15)
    np.testing.assert_allclose(R @ new.inertia @ R.T, body.inertia, atol=1e-15)
    np.testing.assert_allclose(transformed(body, np.eye(3), origin).com, body.com - origin)
