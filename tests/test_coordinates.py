"""Coupled coordinates (jaxbio.coordinates): a map from model coordinates to a tree's, and the
dynamics in the model's coordinates. References: automatic differentiation of `to_tree` (the
Jacobian and the chain rule), the dense products ``Jᵀ M J`` / ``Jᵀ τ``, Lagrange's equations from
the kinetic and potential energy, and forward dynamics undoing inverse dynamics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import coordinates as jc
from jaxbio.coordinates import CoordinateMap, Piecewise
from jaxbio.models.build import GRAVITY_PLANAR, X, Y, Z, Body, model, segment, virtual


def chain_tree(dtype=jnp.float64):
    """Planar: a virtual slide along x, a link about z, a slide along the link (y), a second link."""
    link = Body(1.5, np.array([0.0, -0.3, 0.01]), np.diag([0.05, 0.01, 0.05]))
    tip = Body(0.7, np.array([0.05, -0.1, 0.0]), np.diag([0.01, 0.004, 0.012]))
    return jb.SegmentTree.from_dict(
        model(
            "chain",
            GRAVITY_PLANAR,
            [
                virtual("base", None, "prismatic", X),
                segment("link", "base", "revolute", Z, link, origin=(0.0, 1.0, 0.0)),
                virtual("slide", "link", "prismatic", -Y, origin=(0.0, -0.6, 0.0)),
                segment("tip", "slide", "revolute", Z, tip),
            ],
        ),
        dtype=dtype,
    )


def coupled_map(dtype=jnp.float64):
    """Two model coordinates: ``x`` drives the base slide (slope 2); ``angle`` drives the link
    (identity), the slide (a two-piece cubic) and the tip (−0.5 angle + 0.1)."""
    cubic = Piecewise(
        np.array([0.2]), np.array([0.0, 0.2]), np.array([[0.05, 0.1, -0.2, 0.3], [0.06, 0.08, -0.02, 0.5]])
    )
    pieces = [Piecewise.polynomial([0.1, 2.0]), Piecewise.identity(), cubic, Piecewise.polynomial([0.1, -0.5])]
    return CoordinateMap.from_pieces(("x", "angle"), (0, 1, 1, 1), pieces, dtype=dtype)


STATES = np.random.default_rng(0).uniform(-0.8, 0.8, (3, 3, 2))  # (state, [c, cd, cdd], nc)


def test_piecewise_evaluation_and_derivatives_by_autodiff():
    cmap = coupled_map()
    for c, cd, cdd in STATES:
        c, cd, cdd = (jnp.asarray(x) for x in (c, cd, cdd))
        J = jax.jacfwd(lambda x: jc.to_tree(cmap, x))(c)
        np.testing.assert_allclose(jc.jacobian(cmap, c), J, atol=1e-14)
        np.testing.assert_allclose(jc.tree_velocity(cmap, c, cd), J @ cd, atol=1e-14)
        # q̈ = d/dt (J(c) ċ) along (ċ, c̈)
        _, qdd = jax.jvp(lambda x, v: jax.jvp(lambda y: jc.to_tree(cmap, y), (x,), (v,))[1], (c, cd), (cd, cdd))
        np.testing.assert_allclose(jc.tree_acceleration(cmap, c, cd, cdd), qdd, atol=1e-13)
    # the pieces: the cubic's second piece starts at 0.2, with its own origin
    q = jc.to_tree(cmap, jnp.array([0.3, 0.5]))
    np.testing.assert_allclose(q, [0.7, 0.5, 0.06 + 0.08 * 0.3 - 0.02 * 0.09 + 0.5 * 0.027, -0.15], atol=1e-15)


def test_identity_map_gives_the_tree_dynamics():
    tree = chain_tree()
    cmap = CoordinateMap.identity(["a", "b", "c", "d"])
    c, cd, cdd = (jnp.asarray(x) for x in np.random.default_rng(1).uniform(-1, 1, (3, 4)))
    np.testing.assert_allclose(
        jb.inverse_dynamics(jb.Model.from_tree(tree, cmap), c, cd, cdd),
        jb.inverse_dynamics(tree, c, cd, cdd),
        atol=1e-12,
    )
    np.testing.assert_allclose(jb.mass_matrix(jb.Model.from_tree(tree, cmap), c), jb.mass_matrix(tree, c), atol=1e-14)


def lagrange(tree, cmap, c, cd, cdd):
    """``d/dt ∂L/∂ċ − ∂L/∂c`` with ``T = ½ q̇ᵀ M(q) q̇`` and ``V(q)`` of the tree at ``q = to_tree(c)``."""

    def kinetic(x, v):
        return jb.kinetic_energy(tree, jc.to_tree(cmap, x), jc.tree_velocity(cmap, x, v))

    def potential(x):
        return jb.potential_energy(tree, jc.to_tree(cmap, x))

    dT_dv = jax.grad(kinetic, argnums=1)
    _, ddt = jax.jvp(dT_dv, (c, cd), (cd, cdd))
    return ddt - jax.grad(kinetic, argnums=0)(c, cd) + jax.grad(potential)(c)


def test_coupled_dynamics():
    tree, cmap = chain_tree(), coupled_map()
    for c, cd, cdd in STATES:
        c, cd, cdd = (jnp.asarray(x) for x in (c, cd, cdd))
        J = jc.jacobian(cmap, c)
        q = jc.to_tree(cmap, c)
        Mc = jb.mass_matrix(jb.Model.from_tree(tree, cmap), c)
        np.testing.assert_allclose(Mc, J.T @ jb.mass_matrix(tree, q) @ J, atol=1e-13)
        tau = jb.inverse_dynamics(jb.Model.from_tree(tree, cmap), c, cd, cdd)
        qd, qdd = jc.tree_velocity(cmap, c, cd), jc.tree_acceleration(cmap, c, cd, cdd)
        np.testing.assert_allclose(tau, J.T @ jb.inverse_dynamics(tree, q, qd, qdd), atol=1e-12)
        np.testing.assert_allclose(jb.forward_dynamics(jb.Model.from_tree(tree, cmap), c, cd, tau), cdd, atol=1e-10)


@pytest.mark.slow
def test_coupled_dynamics_are_lagrange_equations():
    tree, cmap = chain_tree(), coupled_map()
    for c, cd, cdd in STATES:
        c, cd, cdd = (jnp.asarray(x) for x in (c, cd, cdd))
        np.testing.assert_allclose(
            jb.inverse_dynamics(jb.Model.from_tree(tree, cmap), c, cd, cdd),
            lagrange(tree, cmap, c, cd, cdd),
            atol=1e-11,
        )


@pytest.mark.slow
def test_jit_vmap_grad_float32():
    tree, cmap = chain_tree(), coupled_map()
    c, cd, cdd = (jnp.asarray(STATES[:, k]) for k in range(3))
    batched = jax.jit(jax.vmap(lambda *x: jb.inverse_dynamics(jb.Model.from_tree(tree, cmap), *x)))(c, cd, cdd)
    for i in range(len(c)):
        np.testing.assert_allclose(
            batched[i], jb.inverse_dynamics(jb.Model.from_tree(tree, cmap), c[i], cd[i], cdd[i]), atol=1e-12
        )
    # gradient with respect to the map's coefficients (a parameter fit) and to the state
    g = jax.grad(lambda m: jb.inverse_dynamics(jb.Model.from_tree(tree, m), c[0], cd[0], cdd[0]).sum())(cmap)
    assert g.coefficients.shape == cmap.coefficients.shape and bool(jnp.all(jnp.isfinite(g.coefficients)))
    h = 1e-6
    e = jnp.zeros_like(cmap.coefficients).at[2, 1, 1].set(1.0)
    fd = (
        jb.inverse_dynamics(
            jb.Model.from_tree(tree, eqx_replace(cmap, cmap.coefficients + h * e)), c[0], cd[0], cdd[0]
        ).sum()
        - jb.inverse_dynamics(
            jb.Model.from_tree(tree, eqx_replace(cmap, cmap.coefficients - h * e)), c[0], cd[0], cdd[0]
        ).sum()
    ) / (2 * h)
    np.testing.assert_allclose(g.coefficients[2, 1, 1], fd, rtol=1e-6)
    tree32, cmap32 = chain_tree(jnp.float32), coupled_map(jnp.float32)
    tau32 = jb.inverse_dynamics(jb.Model.from_tree(tree32, cmap32), *(x[0].astype(jnp.float32) for x in (c, cd, cdd)))
    assert tau32.dtype == jnp.float32
    np.testing.assert_allclose(
        tau32, jb.inverse_dynamics(jb.Model.from_tree(tree, cmap), c[0], cd[0], cdd[0]), rtol=1e-4, atol=1e-4
    )


def eqx_replace(cmap, coefficients):
    return CoordinateMap(cmap.breakpoints, cmap.origins, coefficients, source=cmap.source, names=cmap.names)


def test_refusals():
    tree, cmap = chain_tree(), coupled_map()
    with pytest.raises(ValueError, match=r"c has shape \(3,\), expected \(2,\) \(the model coordinates x, angle\)"):
        jc.to_tree(cmap, jnp.zeros(3))
    with pytest.raises(ValueError, match="drives 2 tree coordinates, tree 'chain' has 4"):
        jb.mass_matrix(jb.Model.from_tree(tree, CoordinateMap.identity(["a", "b"])), jnp.zeros(2))
    ball = jb.SegmentTree.from_dict(
        model("ball", GRAVITY_PLANAR, [segment("b", None, "spherical", None, Body(1.0, np.zeros(3), np.eye(3)))])
    )
    with pytest.raises(ValueError, match="revolute, prismatic and fixed joints only"):
        jb.mass_matrix(jb.Model.from_tree(ball, CoordinateMap.identity(["a", "b", "c", "d"])), jnp.zeros(4))
    with pytest.raises(ValueError, match=r"source\[1\] = 2 is not a model coordinate"):
        CoordinateMap.from_pieces(["a", "b"], [0, 2], [Piecewise.identity()] * 2)
    with pytest.raises(ValueError, match="duplicate coordinate names"):
        CoordinateMap.identity(["a", "a"])
    with pytest.raises(ValueError, match="ascending"):
        Piecewise(np.array([1.0, 0.0]), np.zeros(3), np.zeros((3, 2)))
    assert cmap.index("angle") == 1
    with pytest.raises(ValueError, match="no coordinate 'knee'"):
        cmap.index("knee")
