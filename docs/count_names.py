"""The count of jaxbio's public names: the sum of ``__all__`` over every public module (no dotted
component starting with ``_``), with the top-level, ``jaxbio.io`` and ``jaxbio.dynamics`` shares.

Run: ``python docs/count_names.py`` (docs/architecture.md, "One way to do each thing").
"""

import importlib
import pkgutil
import warnings

import jaxbio


def counts() -> dict[str, int]:
    """``{module: len(__all__)}`` for every public module that declares ``__all__``."""
    out = {"jaxbio": len(jaxbio.__all__)}
    for info in pkgutil.walk_packages(jaxbio.__path__, "jaxbio."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(info.name)
        if hasattr(module, "__all__"):
            out[info.name] = len(module.__all__)
    return out


if __name__ == "__main__":
    c = counts()
    shares = ", ".join(f"{k} {c[k]}" for k in ("jaxbio", "jaxbio.io", "jaxbio.dynamics") if k in c)
    print(f"{sum(c.values())} public names ({shares})")
