"""Traced programs kept across processes (`jax.export`), for the command line's tools.

JAX's persistent compilation cache skips XLA's compile in a later process, but not the tracing
before it: for a cold ``jaxbio run-tool`` of a gait trial's inverse dynamics, tracing
``jit(vmap(generalized_forces))`` (the batch-last kernels) costs several times as much as reading
its compiled program. `call` keeps the traced, lowered program itself: the first process exports it
(`jax.export.export`) into the cache folder, later ones deserialize it and run it, so that
neither traces. The deserialized program's first call is much faster than a traced one, and its
numbers are equal bit for bit (measurements: benchmarks/README.md, "Measurements behind design choices").

The key of a program: a name, the structure of the arguments (`jax.tree_util` tree definition,
which holds a model's static topology), every array's shape and dtype, the JAX version and
backend, whether 64-bit types are enabled (a program traced without them has 32-bit indices
inside, and called with them fails on a dtype mismatch), and a fingerprint of jaxbio's own source, so that a changed jaxbio never runs an old
program. Off unless a folder is set (`CACHE`; the command line sets it beside JAX's cache, the
library alone never writes files). Anything that cannot be exported (a host callback, an
argument structure whose description holds a memory address) runs as a plain call, and the
miss is remembered in the folder so that it is not tried again.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from jaxbio._validate import take_rows

#: the folder of exported programs (None: `call` is a plain call); set by ``jaxbio.cli``
CACHE: dict[str, str | None] = {"dir": None}

_SOURCE: list[str] = []
#: this process's programs: a name's `equinox.filter_jit` of its function (so that a second call
#: with the same name reuses the trace), and each deserialized `jax.export.Exported` by its file
_PROGRAMS: dict = {}


def _jitted(name: str, fn):
    """The process's `equinox.filter_jit` of ``fn`` under ``name`` (the first ``fn`` given: a name
    stands for one computation)."""
    if name not in _PROGRAMS:
        _PROGRAMS[name] = eqx.filter_jit(fn)
    return _PROGRAMS[name]


def _source_fingerprint() -> str:
    """SHA-256 of every jaxbio source file's path and bytes (computed once per process)."""
    if not _SOURCE:
        root = Path(__file__).parent
        h = hashlib.sha256()
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
        _SOURCE.append(h.hexdigest())
    return _SOURCE[0]


def _dtype(x) -> np.dtype:
    """A leaf's dtype (an array's own; ``np.result_type`` of a JAX array would read the array as
    a dtype, which numpy deprecates, once per leaf and call)."""
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.result_type(x)


def _key(name: str, treedef, leaves) -> str | None:
    described = repr(treedef)
    if " at 0x" in described:  # a function or object by address: not the same in another process
        return None
    h = hashlib.sha256()
    for part in (
        name,
        described,
        jax.__version__,
        jax.default_backend(),
        f"x64={bool(jax.config.jax_enable_x64)}",  # the program's own index and default dtypes follow it
        _source_fingerprint(),
        *(f"{np.shape(x)}:{_dtype(x)}" for x in leaves),
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def call(name: str, fn, *args):
    """``fn(*args)``, with ``fn``'s program for these arguments kept in `CACHE` (module doc):
    ``fn`` is a pure function of pytrees of arrays whose static parts live in their structure
    (Equinox modules' static fields). The same values as ``eqx.filter_jit(fn)(*args)``."""
    folder = CACHE["dir"]
    if folder is None:
        return _jitted(name, fn)(*args)
    leaves, treedef = jax.tree_util.tree_flatten(args)
    key = _key(name, treedef, leaves)
    if key is None:
        return _jitted(name, fn)(*args)
    path = Path(folder) / f"{name}-{key}.jaxexport"
    missed = path.with_suffix(".none")
    if missed.exists():
        return _jitted(name, fn)(*args)
    from jax import export

    try:
        if path in _PROGRAMS:
            exported = _PROGRAMS[path]
        elif path.exists():
            exported = _PROGRAMS[path] = export.deserialize(bytearray(path.read_bytes()))
        else:

            def flat(*xs):
                return fn(*jax.tree_util.tree_unflatten(treedef, list(xs)))

            specs = [jax.ShapeDtypeStruct(np.shape(x), _dtype(x)) for x in leaves]
            exported = _PROGRAMS[path] = export.export(jax.jit(flat))(*specs)
            _write(path, exported.serialize())
        return exported.call(*leaves)
    except Exception:  # noqa: BLE001 — not exportable here: a plain call, and never tried again
        try:
            _write(missed, b"")
        except OSError:
            pass
        return _jitted(name, fn)(*args)


def _write(path: Path, data: bytes) -> None:
    """``data`` into ``path`` atomically (a temporary beside it, then renamed): processes that
    run at once never read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def bucket(frames: int) -> int:
    """The number of frames a trial of ``frames`` is padded to by `call_over_frames`: at least 64,
    else rounded up to eight steps per doubling (73 → 80, 1,000 → 1,024, 1,100 → 1,152), at most
    12.5 % more frames, so that trials of similar lengths share one program."""
    frames = int(frames)
    if frames <= 64:
        return 64
    step = 1 << (frames.bit_length() - 4)
    return -(-frames // step) * step


def call_over_frames(name: str, fn, model, frames):
    """``fn(model, frames)`` for ``fn`` mapped over the leading (frame) axis of every leaf of
    ``frames``, through `call`. The frames are padded to `bucket` of their number (the last frame
    repeated) and the result cut back, with or without a cache folder, so that the numbers never
    depend on the cache and trials of similar lengths share one kept program."""
    counts = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(frames)}
    if len(counts) != 1 or None in counts or 0 in counts:
        return _jitted(name, fn)(model, frames)
    (count,) = counts
    index = np.minimum(np.arange(bucket(count)), count - 1)
    padded = jax.tree_util.tree_map(lambda x: np.take(np.asarray(x), index, axis=0), frames)
    out = call(name, fn, model, padded)
    # cut on the host: an eager slice of a device array compiles a program of its own
    return jax.tree_util.tree_map(lambda x: take_rows(x, slice(count)), out)
