"""Names of a package imported on first use (PEP 562), so that ``import jaxbio`` and the
command line's start-up load only what they run: ``jaxbio sprint`` never loads the OpenSim
muscles, wrapping or the constrained solvers (a measurable part of the start-up; benchmarks/README.md, "Measurements behind design choices").

``__getattr__, __dir__ = attach(__name__, globals(), submodules=(...), exports={name: module})``
at the end of a package's ``__init__``: ``package.sub`` imports ``package.sub`` and
``package.Name`` imports ``package.<exports[Name]>`` and takes ``Name`` from it; ``from
package import Name`` works the same. Each value is cached in the package's namespace.
"""

from __future__ import annotations

import importlib


def attach(package: str, namespace: dict, *, submodules=(), exports: dict[str, str] | None = None):
    """``(__getattr__, __dir__)`` for ``package`` (its ``globals()`` is ``namespace``)."""
    exports = dict(exports or {})
    submodules = frozenset(submodules)

    def __getattr__(name):
        if name in exports:
            value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports) | submodules)

    return __getattr__, __dir__
