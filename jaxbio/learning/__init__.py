"""jaxbio inside learning pipelines (issue #19): neural drives and controllers trained through
`jb.simulate`, amortised muscle-force estimators with a physics loss, learned fatigue terms, and
functional reinforcement-learning environments (pure ``reset(key)`` / ``step(state, action)``).

Everything here is an Equinox module or a pure function over pytrees: ``eqx.filter_jit``,
``eqx.filter_grad``, ``eqx.partition`` and ``jax.vmap`` apply, and everything runs in float32
without ``jax_enable_x64``. Submodules are imported on first use; the guide is ``docs/guides/learning.md``.
"""

from jaxbio._lazy import attach

_SUBMODULES = ("controllers", "env", "estimators", "fatigue")
__getattr__, __dir__ = attach(__name__, globals(), submodules=_SUBMODULES)

__all__ = list(_SUBMODULES)
