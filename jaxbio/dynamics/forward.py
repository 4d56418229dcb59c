"""Forward dynamics ``qdd = M(q)⁻¹ (tau − C(q, qd) qd − g(q) + J(q)ᵀ w_ext)``."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio._linalg import spd_solve
from jaxbio.dynamics._checks import public, as_external, as_state, finite
from jaxbio.dynamics.mass_matrix import mass_matrix
from jaxbio.dynamics.rnea import External, rnea
from jaxbio.tree import SegmentTree

__all__ = ["forward_dynamics"]


@public
def forward_dynamics(
    tree: SegmentTree,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    tau: Float[ArrayLike, " n"],
    external: External = None,
    *,
    check: bool = False,
) -> Float[Array, " n"]:
    """Generalised accelerations ``qdd`` ``(nv,)`` rad/s² / m/s² (time derivatives of the
    velocity ``qd``, ``(nv,)``; ``q`` ``(nq,)``).

    The bias (Coriolis, centrifugal, gravity and external wrenches) comes from the wrench
    recursion with ``qdd = 0``; ``M(q)`` from `mass_matrix`; the solve is a Cholesky
    factorisation. Arguments as in `inverse_dynamics`, with ``tau`` ``(nv,)`` N·m / N.
    """
    q = as_state(tree, q, "q", check)
    qd = as_state(tree, qd, "qd", check)
    tau = as_state(tree, tau, "tau", check)
    external = as_external(tree, external, check)
    bias = rnea(tree, q, qd, jnp.zeros_like(qd), external)[0]
    M = mass_matrix(tree, q)
    qdd = spd_solve(M, tau - bias)
    return finite(qdd, "forward_dynamics result") if check else qdd
