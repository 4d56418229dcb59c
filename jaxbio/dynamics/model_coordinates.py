"""The dynamics of a `jaxbio.Model` in its own coordinates ``c`` (coupled coordinates).

`jaxbio.inverse_dynamics`, `jaxbio.mass_matrix`, `jaxbio.forward_dynamics` and the other public
functions of `jaxbio.dynamics` take a `jaxbio.Model` as their first argument and the state in
the model's coordinates. A model whose coordinates are its tree's own (``q = c``:
``model.coordinates.identity_map``, e.g. every model read from a ``.json`` without coordinate
sections) runs on its tree directly. Any other (OpenSim's CustomJoints, whose one coordinate
moves a knee along splines, or coordinate couplers) runs the forms here, registered in
`jaxbio.dynamics._checks.MODEL_FORMS`: the tree's state by the chain rule through the map
(`jaxbio.coordinates.tree_state`),

    ``q = f(c)``,   ``q̇ = J ċ``,   ``q̈ = J c̈ + f''(c) ċ²``,

and generalised forces and matrices projected back by virtual work (the ``Hᵀ`` projection that
Simbody's function-based mobilizer applies):

    ``τ_c = Jᵀ τ(q, q̇, q̈)``,   ``M_c = Jᵀ M(q) J``.

Each form is one `jax.jit` (inlined in a caller's own jit); `jax.vmap` and `jax.grad` work
through it. The tree must have revolute, prismatic and fixed joints only (``nq = nv``; every
model `jaxbio.io.load_osim` builds is such a tree).
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio import coordinates as cm
from jaxbio._linalg import spd_solve
from jaxbio.dynamics._checks import MODEL_FORMS
from jaxbio.dynamics._mass_matrix import bias_forces, gravity_forces, mass_matrix
from jaxbio.dynamics._rnea import inverse_dynamics, segment_wrenches
from jaxbio.dynamics.energy import center_of_mass, kinetic_energy, kinetic_energy_gradient, potential_energy
from jaxbio.dynamics.forward import forward_dynamics
from jaxbio.dynamics.kinematics import forward_kinematics

__all__ = ["check_model"]


def check_model(model) -> None:
    """``ValueError`` unless ``model``'s tree has revolute, prismatic and fixed joints only and its
    coordinate map drives every tree coordinate."""
    tree, cmap = model.tree, model.coordinates
    if tree.nq != tree.nv:
        raise ValueError(
            f"coordinate maps need a tree of revolute, prismatic and fixed joints only (nq = nv); "
            f"{tree.name!r} has joint types {sorted(set(tree.joint_types))}"
        )
    if tree.nq != cmap.nq:
        raise ValueError(f"the coordinate map drives {cmap.nq} tree coordinates, tree {tree.name!r} has {tree.nq}")


def _form(public_fn):
    """Register the decorated function as ``public_fn``'s form in model coordinates, jitted."""

    def register(form):
        static = [a for a in ("check", "locked") if a in inspect.signature(form).parameters]
        jitted = jax.jit(form, static_argnames=static)

        @functools.wraps(public_fn)
        def call(model, *args, **kwargs):
            check_model(model)
            if isinstance(kwargs.get("locked"), (list, np.ndarray)):
                kwargs["locked"] = tuple(np.asarray(kwargs["locked"]).tolist())
            return jitted(model, *args, **kwargs)

        MODEL_FORMS[public_fn.__name__] = call
        return form

    return register


def _state(model, c, cd=None, cdd=None):
    cmap = model.coordinates
    c = cm.as_coordinates(cmap, c, "c")
    zero = jnp.zeros_like(c)
    return cm.tree_state(cmap, c, zero if cd is None else cd, zero if cdd is None else cdd)


@_form(inverse_dynamics)
def _inverse_dynamics(model, c, cd, cdd, external=None, *, check=False):
    q, qd, qdd, df = _state(model, c, cd, cdd)
    return cm.project(model.coordinates, df, inverse_dynamics(model.tree, q, qd, qdd, external, check=check))


@_form(segment_wrenches)
def _segment_wrenches(model, c, cd, cdd, external=None, *, check=False):
    q, qd, qdd, _ = _state(model, c, cd, cdd)
    return segment_wrenches(model.tree, q, qd, qdd, external, check=check)


@_form(mass_matrix)
def _mass_matrix(model, c, *, check=False):
    q, _, _, df = _state(model, c)
    return cm.project_matrix(model.coordinates, df, mass_matrix(model.tree, q, check=check))


@_form(bias_forces)
def _bias_forces(model, c, cd, *, check=False):
    q, qd, qdd, df = _state(model, c, cd)  # qdd = f''(c) ċ², the coupling's own acceleration
    return cm.project(model.coordinates, df, inverse_dynamics(model.tree, q, qd, qdd, check=check))


@_form(gravity_forces)
def _gravity_forces(model, c, *, check=False):
    q, _, _, df = _state(model, c)
    return cm.project(model.coordinates, df, gravity_forces(model.tree, q, check=check))


@_form(forward_dynamics)
def _forward_dynamics(model, c, cd, tau, external=None, *, check=False, locked=None):
    """``M_c c̈ = tau − τ_c(c, ċ, 0)`` (Cholesky); ``locked`` (static: ``nc`` bools such as
    ``model.locked``, or coordinate names): those coordinates' accelerations are 0 and the free
    ones solve ``M_ff c̈_f = (tau − bias)_f`` (OpenSim's lock, a Simbody ``PrescribedMotion`` at a
    constant value; its reaction is ``inverse_dynamics(model, c, cd, c̈)[locked] − tau[locked]``)."""
    cmap = model.coordinates
    mask = cm.locked_mask(cmap, locked)
    tau = cm.as_coordinates(cmap, tau, "tau")
    bias = _inverse_dynamics(model, c, cd, jnp.zeros_like(tau), external, check=check)
    M = _mass_matrix(model, c, check=check)
    if not mask.any():
        return spd_solve(M, tau - bias)
    if mask.all():
        return jnp.zeros_like(tau - bias)
    free = np.flatnonzero(~mask)
    x = spd_solve(M[np.ix_(free, free)], (tau - bias)[free])
    return jnp.zeros_like(tau).at[free].set(x)


@_form(kinetic_energy)
def _kinetic_energy(model, c, cd, *, check=False):
    q, qd, _, _ = _state(model, c, cd)
    return kinetic_energy(model.tree, q, qd, check=check)


@_form(kinetic_energy_gradient)
def _kinetic_energy_gradient(model, c, cd, *, check=False):
    """``∂T/∂c`` at fixed ``ċ``."""
    cd = cm.as_coordinates(model.coordinates, cd, "cd")
    return jax.grad(lambda c: _kinetic_energy(model, c, cd, check=check))(cm.as_coordinates(model.coordinates, c, "c"))


@_form(potential_energy)
def _potential_energy(model, c, *, check=False):
    return potential_energy(model.tree, _state(model, c)[0], check=check)


@_form(center_of_mass)
def _center_of_mass(model, c, *, check=False):
    return center_of_mass(model.tree, _state(model, c)[0], check=check)


@_form(forward_kinematics)
def _forward_kinematics(model, c, *, check=False):
    return forward_kinematics(model.tree, _state(model, c)[0], check=check)
