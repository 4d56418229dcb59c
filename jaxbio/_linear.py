"""A linear map with its own transpose that every JAX transformation accepts: `linear_map`.

Why it exists. `jaxbio.dynamics.batch_last.vmapped_by` sends `jax.vmap` of a per-state function to a
batch-last kernel, but derivatives went to the per-state code, and under reverse mode the
transposed per-state recursion is slow (the VJP of `jax.vmap` of the wrench recursion costs many
times the kernel's forward pass; benchmarks/README.md, "Measurements behind design choices"). A
derivative rule that sends the *transpose* of the linearised map to a batch-last adjoint kernel
needs a linear operation whose transpose is ours and which can be batched again, differentiated
again and sharded. What JAX offers falls short:

- `jax.custom_vjp` inside a `jax.custom_jvp` rule: ``NotImplementedError: Transpose rule for
  'custom_vjp_call'`` under `jax.grad`, and no forward mode at all;
- `jax.custom_derivatives.linear_call`: a custom transpose, but no batching rule, so
  ``jax.jacrev(jax.vmap(f))`` (a vmapped pullback) fails;
- `jax.custom_batching.custom_vmap` on the tangents: staged as an opaque call that cannot be
  transposed.

So this module defines one primitive, ``jaxbio_linear``: ``apply(*residuals, *linear)`` is linear
in ``linear``; ``transpose(*residuals, *cotangents)`` is its transpose. Its rules: evaluation and
lowering call ``apply``; the JVP is the map itself on the linear tangents plus ``jax.jvp`` of
``apply`` in the residuals (so second derivatives are exact); the transpose binds the primitive
with ``apply`` and ``transpose`` swapped (transposing twice gives the map back); batching binds it
with both callables batched, by their own ``vmapped(in_axes, size)`` when they have one (the
point: a per-state transpose becomes a batch-last kernel) and by `jax.vmap` otherwise. Both
callables must be hashable (frozen dataclasses) and return lists of arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

_linear_p = Primitive("jaxbio_linear")
_linear_p.multiple_results = True


def linear_map(apply: Callable, transpose: Callable, residuals: Sequence, linear: Sequence) -> list:
    """``apply(*residuals, *linear)`` (a list of arrays), a map linear in ``linear`` whose transpose
    ``transpose(*residuals, *cotangents)`` (a list shaped like ``linear``) JAX uses in reverse mode
    (see the module docstring). ``apply``/``transpose``: hashable callables; each may define
    ``vmapped(in_axes, size, summed)``, the callable to use under `jax.vmap` (``in_axes``: 0 or
    None per argument; ``summed``: per output, whether to sum it over the batch), as `Vmapped`."""
    residuals, linear = [jnp.asarray(r) for r in residuals], [jnp.asarray(x) for x in linear]
    out_avals = tuple(jax.make_jaxpr(lambda *a: _call(apply, a))(*residuals, *linear).out_avals)
    return _linear_p.bind(
        *residuals, *linear, apply=apply, transpose=transpose, n_res=len(residuals), out_avals=out_avals
    )


@dataclasses.dataclass(frozen=True)
class Vmapped:
    """``jax.vmap(fn, in_axes, axis_size=size)`` as a hashable callable: outputs batched at 0,
    except those flagged in ``summed`` (summed over the batch: the cotangent of an input that
    every batch member shares)."""

    fn: Any
    in_axes: tuple
    size: int
    summed: tuple

    def __call__(self, *args):
        out = jax.vmap(self.fn, in_axes=self.in_axes, axis_size=self.size)(*args)
        return [x.sum(0) if s else x for x, s in zip(out, self.summed)]


def is_zero(t) -> bool:
    """Whether a tangent given to a ``symbolic_zeros=True`` `jax.custom_jvp` rule is a symbolic zero."""
    return isinstance(t, jax.custom_derivatives.SymbolicZero)


def dense(t):
    """A tangent as an array: a symbolic zero instantiated (`is_zero`), anything else as it is."""
    return jnp.zeros(t.shape, t.dtype) if is_zero(t) else t


def _call(fn, args):
    return list(fn(*args))


def _jvp(primals, tangents, *, apply, transpose, n_res, out_avals):
    params = dict(apply=apply, transpose=transpose, n_res=n_res, out_avals=out_avals)
    out = _linear_p.bind(*primals, **params)
    res, lin = primals[:n_res], primals[n_res:]
    d_out = _linear_p.bind(*res, *[ad.instantiate_zeros(t) for t in tangents[n_res:]], **params)
    d_res = tangents[:n_res]
    if any(type(t) is not ad.Zero for t in d_res):  # the map's own dependence on the residuals
        d_res = [ad.instantiate_zeros(t) for t in d_res]
        extra = jax.jvp(lambda *r: _call(apply, (*r, *lin)), tuple(res), tuple(d_res))[1]
        d_out = [a + b for a, b in zip(d_out, extra)]
    return out, d_out


def _transpose(cts, *args, apply, transpose, n_res, out_avals):
    res = args[:n_res]
    if any(ad.is_undefined_primal(r) for r in res):
        raise ValueError("jaxbio_linear: a residual of the linear map was itself a linear input")
    cts = [jnp.zeros(a.shape, a.dtype) if type(c) is ad.Zero else c for c, a in zip(cts, out_avals)]
    lin_avals = tuple(a.aval for a in args[n_res:])
    return [None] * n_res + list(
        _linear_p.bind(*res, *cts, apply=transpose, transpose=apply, n_res=n_res, out_avals=lin_avals)
    )


def _batched(fn, in_axes, size, summed):
    return fn.vmapped(in_axes, size, summed) if hasattr(fn, "vmapped") else Vmapped(fn, in_axes, size, summed)


def _batch(args, dims, *, apply, transpose, n_res, out_avals):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    args = [a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]
    in_axes = tuple(None if d is None else 0 for d in dims)
    res_axes, lin_axes = in_axes[:n_res], in_axes[n_res:]
    # the transpose maps (residuals, batched cotangents) to the linear inputs' cotangents, summed
    # over the batch for an input the batch shares
    out = _linear_p.bind(
        *args,
        apply=_batched(apply, in_axes, size, (False,) * len(out_avals)),
        transpose=_batched(transpose, res_axes + (0,) * len(out_avals), size, tuple(a is None for a in lin_axes)),
        n_res=n_res,
        out_avals=tuple(a.update(shape=(size,) + a.shape) for a in out_avals),
    )
    return out, [0] * len(out)


_linear_p.def_impl(lambda *args, apply, transpose, n_res, out_avals: _call(apply, args))
_linear_p.def_abstract_eval(lambda *args, apply, transpose, n_res, out_avals: list(out_avals))
mlir.register_lowering(
    _linear_p,
    mlir.lower_fun(lambda *args, apply, transpose, n_res, out_avals: _call(apply, args), multiple_results=True),
)
ad.primitive_jvps[_linear_p] = _jvp
ad.primitive_transposes[_linear_p] = _transpose
batching.primitive_batchers[_linear_p] = _batch
