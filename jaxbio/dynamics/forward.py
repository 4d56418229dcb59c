"""Forward dynamics ``qdd = M(q)⁻¹ (tau − C(q, qd) qd − g(q) + J(q)ᵀ w_ext)``.

Its derivatives are not those of the solve: `accelerations` has a `jax.custom_jvp` rule from the
identity ``ID(q, qd, qdd) = tau`` (``ID`` the wrench recursion, `jaxbio.inverse_dynamics`):

    d qdd = M⁻¹ (d tau − ∂ID/∂(q, qd, model, external) · d(q, qd, model, external))   at fixed ``qdd``

(Carpentier & Mansard 2018, "Analytical derivatives of rigid body dynamics algorithms"). Reverse
mode then transposes one recursion and one Cholesky solve with the factor already computed, instead
of differentiating ``M(q)``, its factorisation and the bias separately. Measured
with `python benchmarks/learning.py --field`: a VJP of `jaxbio.HamiltonianSystem.velocity_field`
under `jax.vmap`, relative to its forward pass, costs about half of plain autodiff's with this rule,
and a value-and-gradient step through `jaxbio.simulate(..., form="velocity")` less than half
(benchmarks/README.md, "Measurements behind design choices").

When the tree and the external loads are not differentiated (the rule sees their tangents as
symbolic zeros), they are left out of the inner ``jvp``, so that under `jax.vmap` reverse mode
transposes the recursion by its batch-last adjoint (`jaxbio.dynamics._adjoint`, routed by
`jaxbio.dynamics.batch_last.vmapped_by`): the vector field's VJP and the value-and-gradient step through the solve
became about twice as fast (benchmarks/README.md, "Reverse mode through a batch-last adjoint").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxbio._linalg import UNROLL_MAX, cholesky, factor_solve, spd_solve
from jaxbio._linear import dense, is_zero
from jaxbio.dynamics._checks import public, as_external, as_state, finite
from jaxbio.dynamics._mass_matrix import mass_matrix
from jaxbio.dynamics._rnea import External, _tau
from jaxbio.dynamics.batch_last import vmapped_by
from jaxbio.dynamics import planar_batch as _planar
from jaxbio.tree import SegmentTree

__all__ = ["forward_dynamics"]  # `accelerations` is the unchecked core (internal)


def accelerations(tree: SegmentTree, q, qd, tau, added_inertia=None, external=None, *, planar: bool = False):
    """Unchecked core of `forward_dynamics`: ``qdd = (M(q) + diag(added_inertia))⁻¹ (tau − bias)``
    ``(nv,)``, the bias from the wrench recursion at ``qdd = 0`` (with ``external``). Under
    `jax.vmap` both ``M`` and the bias run the batch-last kernels; derivatives by the rule of the
    module docstring. ``added_inertia`` ``(nv,)``: a drive's diagonal inertia (default none).
    ``planar``: the tree is planar (`jaxbio.dynamics.planar_batch.planar`, decided by the caller
    while its numbers were concrete) and ``external`` None: under `jax.vmap` (the states batched,
    the tree not) ``M``, the bias and the rule's recursion run in 2-D algebra
    (`jaxbio.dynamics.planar_batch`'s `_accelerations_factored` and `_inverse_dynamics`, each
    operation on the whole batch), one state at a time the 3-D code as without it (`_PLANAR`)."""
    planar = _planar_applies(planar, external)
    return _ACCELERATIONS[planar](tree, q, qd, tau, _added(tau, added_inertia), *(external or ()))


def accelerations_at(
    tree: SegmentTree, q, qd, tau, qdd, added_inertia=None, external=None, factor=None, *, planar: bool = False
):
    """`accelerations` at a state where their value ``qdd`` ``(nv,)`` is already known (a solver's
    stored stage, say): the value is ``qdd`` as given, unchecked, and the derivatives are those of
    `accelerations` at that point (the module docstring's rule at ``qdd``), so that a derivative
    needs the mass matrix and one tangent recursion but not the bias recursion. ``factor``: the
    packed Cholesky factor of ``M(q) + diag(added_inertia)`` at this state, kept from the forward
    pass (`accelerations_factored`); then a derivative needs neither ``M`` nor its factorisation.
    ``qdd`` and ``factor`` are not differentiated. What `jaxbio._tsit5`'s reverse pass linearises
    the velocity form with. ``planar``: as in `accelerations`."""
    planar = _planar_applies(planar, external)
    return _GIVEN[planar](tree, q, qd, tau, _added(tau, added_inertia), qdd, factor, *(external or ()))


def factor_size(tree: SegmentTree) -> int | None:
    """Length ``nv(nv+1)/2`` of the packed factor `accelerations_factored` keeps for ``tree``;
    None above `jaxbio._linalg.UNROLL_MAX` coordinates, where it keeps none."""
    return None if tree.nv > UNROLL_MAX else tree.nv * (tree.nv + 1) // 2


def accelerations_factored(tree: SegmentTree, q, qd, tau, added_inertia=None, external=None, *, planar: bool = False):
    """``(qdd, factor)``: `accelerations` ``(nv,)`` and the packed Cholesky factor of
    ``M(q) + diag(added_inertia)`` that solved for them (`jaxbio._linalg.cholesky`,
    ``(nv(nv+1)/2,)``), for `accelerations_at` to take later. Up to `jaxbio._linalg.UNROLL_MAX`
    coordinates; above, ``factor`` is None (a factor of ``nv²`` numbers per state costs more memory
    than recomputing it costs time). Not differentiable by the module docstring's rule: a solver's
    pass that is not differentiated (`jaxbio._tsit5`'s stored forward pass) calls it. ``planar``:
    as in `accelerations` (one set of placements for ``M`` and the bias,
    `jaxbio.dynamics.planar_batch._accelerations_factored`)."""
    if factor_size(tree) is None:
        return accelerations(tree, q, qd, tau, added_inertia, external, planar=planar), None
    if _planar_applies(planar, external):
        return _factored_planar(tree, q, qd, tau, _added(tau, added_inertia))
    L = cholesky(inertia(tree, q, _added(tau, added_inertia)))
    return factor_solve(L, tau - _bias(tree, q, qd, external or ())), L


def inertia(tree: SegmentTree, q, added_inertia=None) -> Float[Array, "n n"]:
    """``M(q) + diag(added_inertia)`` ``(nv, nv)``: the tree's mass matrix plus a drive's diagonal
    inertia ``(nv,)`` kg·m² / kg (none by default)."""
    M = mass_matrix(tree, q)
    return M if added_inertia is None else M + jnp.diag(jnp.broadcast_to(added_inertia, M.shape[:1]))


def solve(M, b):
    """``M⁻¹ b`` for a mass matrix ``M`` ``(nv, nv)``: a division for one coordinate, else `spd_solve`."""
    return b / M[0] if M.shape[0] == 1 else spd_solve(M, b)


def _added(tau, added_inertia):
    """A drive's diagonal inertia ``(nv,)`` (zeros for None) in ``tau``'s shape and dtype."""
    added = jnp.zeros_like(tau) if added_inertia is None else jnp.broadcast_to(added_inertia, jnp.shape(tau))
    return added.astype(jnp.result_type(tau))


def _bias(tree, q, qd, external):
    """The wrench recursion at ``qdd = 0``: Coriolis, centrifugal, gravity and external loads."""
    return _tau(tree, q, qd, jnp.zeros_like(qd), *external)


def _planar_applies(planar: bool, external) -> bool:
    return bool(planar) and not external


# ---- planar trees under jax.vmap (`accelerations`' ``planar``) ----------------------------------
# One state: the 3-D code, bit for bit as without ``planar`` (a state's gradient is the same
# number under `jax.jit` and op by op). Under `jax.vmap` (`vmapped_by`): the 2-D formulas of
# `jaxbio.dynamics.planar_batch` on the batch, and reverse mode of the recursion by `jax.vjp` of
# them (plain JAX, each operation on the batch): a double pendulum's velocity-form field costs
# about what the Hamiltonian form's planar kernel costs, its VJP about an MLP drive's
# (benchmarks/README.md, "learning_defaults").


def _factored_general(tree, q, qd, tau, added):
    L = cholesky(inertia(tree, q, added))
    return factor_solve(L, tau - _bias(tree, q, qd, ())), L


def _factored_planar_batch(tree, q, qd, tau, added):
    return jax.vmap(functools.partial(_planar._accelerations_factored, tree))(q, qd, tau, added)


_factored_planar = vmapped_by(_factored_planar_batch)(_factored_general)


def _tau_general(tree, q, qd, qdd):
    return _tau(tree, q, qd, qdd)


def _tau_planar_batch(tree, q, qd, qdd):
    return jax.vmap(functools.partial(_planar._inverse_dynamics, tree))(q, qd, qdd)


class _PlanarTauAdjoint:
    """The VJP of `_tau_planar` in ``(q, qd, qdd)`` for ``(B, ·)`` states (`vmapped_by`): `jax.vjp`
    of the 2-D recursion on the batch."""

    n_states = 3

    def supports(self, tree) -> bool:
        return True

    def __call__(self, tree, q, qd, qdd, ct):
        return jax.vjp(functools.partial(_tau_planar_batch, tree), q, qd, qdd)[1](ct)


_tau_planar = vmapped_by(_tau_planar_batch, adjoint=_PlanarTauAdjoint())(_tau_general)


def _solved(tree, q, qd, tau, added, external, planar: bool = False):
    """``(solve_with, qdd)``: ``solve_with(b) = (M + diag(added))⁻¹ b`` and the accelerations."""
    if planar:
        qdd, L = _factored_planar(tree, q, qd, tau, added)
        return functools.partial(factor_solve, L), qdd
    M = inertia(tree, q, added)
    return functools.partial(solve, M), solve(M, tau - _bias(tree, q, qd, external))


def _accelerations_rule(planar: bool):
    """`accelerations`' `jax.custom_jvp` (``planar``: see `accelerations`)."""

    @jax.custom_jvp
    def run(tree, q, qd, tau, added, *external):
        return _solved(tree, q, qd, tau, added, external, planar)[1]

    def jvp(primals, tangents):
        tree, q, qd, tau, added, *external = primals
        solve_with, qdd = _solved(tree, q, qd, tau, added, external, planar)
        return qdd, _tangent(solve_with, qdd, primals, tangents, planar)

    run.defjvp(jvp, symbolic_zeros=True)
    return run


def _given_rule(planar: bool):
    """`accelerations_at`'s `jax.custom_jvp` (``planar``: see `accelerations`)."""

    @jax.custom_jvp
    def run(tree, q, qd, tau, added, qdd, factor, *external):
        return qdd

    def jvp(primals, tangents):
        tree, q, qd, tau, added, qdd, factor, *external = primals
        d_tree, dq, dqd, dtau, dadded, _, _, *d_external = tangents  # qdd, factor: given, not differentiated
        if factor is not None:
            solve_with = functools.partial(factor_solve, factor)
        elif planar:
            solve_with = _solved(tree, q, qd, tau, added, external, planar)[0]
        else:
            solve_with = functools.partial(solve, inertia(tree, q, added))
        return qdd, _tangent(
            solve_with, qdd, (tree, q, qd, tau, added, *external), (d_tree, dq, dqd, dtau, dadded, *d_external), planar
        )

    run.defjvp(jvp, symbolic_zeros=True)
    return run


_ACCELERATIONS = {planar: _accelerations_rule(planar) for planar in (False, True)}
_GIVEN = {planar: _given_rule(planar) for planar in (False, True)}


def _tangent(solve_with, qdd, primals, tangents, planar: bool = False):
    """The rule of the module docstring: ``d qdd = M⁻¹ (d tau − d added · qdd − dID)`` at ``qdd``
    (``primals``, ``tangents``: those of `accelerations`' rule; ``solve_with(b)``: ``M⁻¹ b``).
    ``planar``: ``dID`` in the states by `_tau_planar` (under `jax.vmap`, the 2-D recursion)."""
    tree, q, qd, tau, added, *external = primals
    d_tree, dq, dqd, dtau, dadded, *d_external = tangents
    fixed = all(is_zero(t) for t in jax.tree_util.tree_leaves((d_tree, d_external), is_leaf=is_zero))
    if planar:  # (no external loads)
        d_id = _tau_planar.tangent(tree, (q, qd, qdd), (dq, dqd, None))
        if not fixed:
            # the tree's share by the 3-D recursion: its out-of-plane numbers have derivatives the
            # planar formulas drop (the states' share above is the same whether the tree moves or not)
            d_tree = jax.tree_util.tree_map(dense, d_tree, is_leaf=is_zero)
            d_id = d_id + jax.jvp(lambda tr: _tau(tr, q, qd, qdd), (tree,), (d_tree,))[1]
    elif fixed:
        # the tree and the external loads not differentiated: left out of the inner jvp, so that
        # reverse mode under jax.vmap transposes the batch-last adjoint (`vmapped_by`)
        d_id = _tau.tangent(tree, (q, qd, qdd, *external), (dq, dqd, None, *(None for _ in external)))
    else:
        _, d_id = jax.jvp(
            lambda tr, a, b, *ext: _tau(tr, a, b, qdd, *ext),
            (tree, q, qd, *external),
            jax.tree_util.tree_map(dense, (d_tree, dq, dqd, *d_external), is_leaf=is_zero),
        )
    return solve_with(dense(dtau) - dense(dadded) * qdd - d_id)


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
    Derivatives (``jvp``, ``grad``, w.r.t. the model too) by the inverse-dynamics identity of the
    module docstring: one recursion and one solve.
    """
    q = as_state(tree, q, "q", check)
    qd = as_state(tree, qd, "qd", check)
    tau = as_state(tree, tau, "tau", check)
    external = as_external(tree, external, check)
    qdd = accelerations(tree, q, qd, tau, external=external)
    return finite(qdd, "forward_dynamics result") if check else qdd
