"""The custom VJP of ``(q̇ = (M + J)⁻¹ p, ∂H/∂q)`` tried for issue #19 item 1 and not shipped
(benchmarks/README.md, ``learning.py``): ``learning.py --paths custom_vjp`` times it by swapping
`HamiltonianSystem._flow` for this module's `flow` while its case is traced.

Reverse rule, for cotangents ``x̄`` of ``q̇`` and ``w̄`` of ``G = ∂H/∂q(q, q̇)`` (axial trees, no
tree parameter differentiated; otherwise plain autodiff), with ``L(q, v) = T(q, v) − V(q)``:

    (h_q, h_v) = jvp(grad L, (q, q̇), (w̄, 0))      one Hessian-vector product
    v̄ = x̄ − h_v,  p̄ = u = (M + J)⁻¹ v̄               the saved Cholesky factor
    q̄ = −h_q − ½[∂T/∂q(q, u + q̇) − ∂T/∂q(q, u − q̇)]  (∂(uᵀ M q̇)/∂q, two forward kernel calls)

(``∂G/∂q`` is a Hessian, hence symmetric; ``(∂G/∂q̇)ᵀ w̄ = −(∂M/∂q · w̄) q̇ = −h_v``.)
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

import jaxbio.hamiltonian as H
from jaxbio.dynamics import kinetic_energy, kinetic_energy_gradient, potential_energy


def _plain(tree, q, p, J):
    M = H._inertia(tree, q, J)
    if tree.nv == 1:
        v, factor = p / M[0], None
    else:
        factor = jsl.cho_factor(M)
        v = jsl.cho_solve(factor, p)
    return v, H.dH_dq(tree, q, v), factor


@eqx.filter_custom_vjp
def velocities_and_gradient(args):
    """``(q̇, ∂H/∂q)`` ``(n,)`` each for ``args = (tree, q, p, added_inertia or None)``."""
    v, g, _ = _plain(*args)
    return v, g


@velocities_and_gradient.def_fwd
def _fwd(perturbed, args):
    v, g, factor = _plain(*args)
    return (v, g), (v, factor)


@velocities_and_gradient.def_bwd
def _bwd(residuals, cotangents, perturbed, args):
    tree, q, p, J = args
    v, factor = residuals
    vbar, gbar = (jnp.zeros_like(v) if c is None else c for c in cotangents)
    if not tree.is_axial or any(jax.tree_util.tree_leaves((perturbed[0], perturbed[3]))):
        _, vjp = jax.vjp(lambda a: _plain(*a)[:2], args)
        return vjp((vbar, gbar))[0]
    lagrangian = jax.grad(lambda x, y: kinetic_energy(tree, x, y) - potential_energy(tree, x), argnums=(0, 1))
    _, (h_q, h_v) = jax.jvp(lagrangian, (q, v), (gbar, jnp.zeros_like(v)))
    vbar = vbar - h_v
    u = vbar / H._inertia(tree, q, J)[0, 0] if factor is None else jsl.cho_solve(factor, vbar)
    qbar = -h_q - 0.5 * (kinetic_energy_gradient(tree, q, u + v) - kinetic_energy_gradient(tree, q, u - v))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, eqx.filter(tree, eqx.is_inexact_array))
    return zeros, qbar, u, None


def flow(self, t, y):
    """`HamiltonianSystem._flow` with `velocities_and_gradient` (Rayleigh dissipation, axial trees)."""
    q, p = y["q"], y["p"]
    dH_dp, g = velocities_and_gradient((self.tree, q, p, self.added_inertia(jnp.result_type(q))))
    gradient_q = g + H._output(self.potential.gradient(t, q), p.shape, "potential", self.potential, ".gradient")
    dq, dp = self.dissipation.phase_terms(q, p, dH_dp)
    qd = dH_dp + dq
    force = H._output(self.drive_force(t, y, qd), p.shape, "drive", self.drive)
    return (
        H.PhaseFlow(qd, force - gradient_q + dp, dH_dp, gradient_q, self.potential.time_rate(t, q)),
        force,
        qd,
        (dq, dp),
    )
