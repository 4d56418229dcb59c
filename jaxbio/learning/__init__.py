"""jaxbio inside learning pipelines (issue #19): neural drives and controllers trained through
`jb.simulate`, amortised muscle-force estimators with a physics loss, learned fatigue terms, and
functional reinforcement-learning environments (pure ``reset(key)`` / ``step(state, action)``).

Everything here is an Equinox module or a pure function over pytrees: ``eqx.filter_jit``,
``eqx.filter_grad``, ``eqx.partition`` and ``jax.vmap`` apply, and everything runs in float32
without ``jax_enable_x64``. Submodules are imported on first use; the guide is ``docs/learning.md``.
"""

_SUBMODULES = ("controllers", "env", "estimators", "fatigue")


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"jaxbio.learning.{name}")
    raise AttributeError(f"module 'jaxbio.learning' has no attribute {name!r}")


__all__ = list(_SUBMODULES)
