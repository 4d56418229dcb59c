"""One call that spreads a batch over every device: `batch` (``jb.batch``) and `gather`.

``jb.batch(fn, in_axes)`` is ``jax.jit(jax.vmap(fn, in_axes))`` with the batch split into one
contiguous chunk per device (`jax.shard_map` over a one-axis mesh named ``"batch"``): each device
runs the same vmapped program on its chunk, with no communication. On one device it *is*
``jit(vmap)``. Devices are host CPU devices (ask XLA for them before importing jax:
``XLA_FLAGS=--xla_force_host_platform_device_count=4``, or ``jax.config.update(
"jax_num_cpu_devices", 4)`` before first use), GPUs, or, after `jax.distributed.initialize`, the
devices of every process (multi-controller: each process runs the same script; see
``docs/guides/batching.md`` and ``examples/distributed.py``).

The per-sample function keeps jaxbio's rule "algorithms are functions of one sample"; this module
only decides where the samples run. Nothing here changes JAX's configuration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxbio._validate import as_count

AXIS = "batch"  #: the mesh axis name (usable in collectives inside ``fn``, e.g. ``jax.lax.psum``)


def _is_axis(a) -> bool:
    return a is None or (isinstance(a, (int, np.integer)) and not isinstance(a, bool))


def _check_in_axes(in_axes):
    """``in_axes`` as a tuple per positional argument (each an int, None or a pytree prefix of
    ints/None), or the single int/None for every argument."""
    if _is_axis(in_axes):
        return in_axes
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not isinstance(in_axes, tuple):
        raise ValueError(
            f"batch: in_axes must be an int, None or a tuple (one entry per positional argument), "
            f"got {type(in_axes).__name__} {in_axes!r}"
        )
    for i, a in enumerate(in_axes):
        bad = [x for x in jax.tree.leaves(a, is_leaf=lambda x: x is None) if not _is_axis(x)]
        if bad:
            raise ValueError(f"batch: in_axes[{i}] holds {bad[0]!r}; every entry must be an int axis or None")
    return in_axes


def _leaf_axes(in_axes, args: tuple) -> list:
    """The mapped axis (non-negative int) or None of every leaf of ``args``, flattened."""
    if _is_axis(in_axes):
        per_arg = (in_axes,) * len(args)
    elif len(in_axes) != len(args):
        raise ValueError(
            f"batch: in_axes has {len(in_axes)} entries but the function got {len(args)} positional arguments"
        )
    else:
        per_arg = in_axes
    axes = []
    for i, (a, arg) in enumerate(zip(per_arg, args)):
        try:
            full = jax.tree.broadcast(a, arg, is_leaf=lambda x: x is None)
        except (ValueError, TypeError) as e:
            raise ValueError(
                f"batch: in_axes[{i}] = {a!r} is not a prefix of argument {i}'s structure {jax.tree.structure(arg)}"
            ) from e
        for leaf, ax in zip(jax.tree.leaves(arg), jax.tree.leaves(full, is_leaf=lambda x: x is None)):
            if ax is not None:
                if not eqx.is_array(leaf):
                    raise ValueError(
                        f"batch: in_axes maps a leaf of argument {i} that is not an array "
                        f"({type(leaf).__name__}); give it in_axes None"
                    )
                nd = np.ndim(leaf)
                if not -nd <= ax < nd:
                    raise ValueError(
                        f"batch: in_axes {ax} is out of range for a leaf of argument {i} with shape {np.shape(leaf)}"
                    )
                ax = ax % nd
            axes.append(ax)
    return axes


def _pad(x, axis: int, n: int):
    """``x`` with its last entry along ``axis`` repeated up to length ``n``: padding rows are copies
    of a real sample, so ``fn`` sees only valid inputs (no zero quaternion, no NaN raised)."""
    extra = n - x.shape[axis]
    if extra == 0:
        return x
    xp = jnp if isinstance(x, jax.Array) else np
    last = xp.take(x, xp.asarray([x.shape[axis] - 1]), axis=axis)
    return xp.concatenate([x, xp.repeat(last, extra, axis=axis)], axis=axis)


def _chunks(per_device: int, chunk_size: int | None) -> tuple[int, int]:
    """``(k, c)``: ``k`` sequential chunks of ``c`` samples per device, ``k c ≥ per_device``."""
    if chunk_size is None or chunk_size >= per_device:
        return 1, per_device
    k = -(-per_device // chunk_size)
    return k, -(-per_device // k)


def _devices(devices) -> tuple:
    if devices is None:
        return tuple(jax.devices())  # every process's devices after jax.distributed.initialize
    devices = tuple(devices)
    if not devices or not all(isinstance(d, jax.Device) for d in devices):
        raise ValueError(f"batch: devices must be a non-empty sequence of jax devices, got {devices!r}")
    return devices


def batch(
    fn: Callable,
    in_axes: int | None | Sequence = 0,
    *,
    devices: Sequence[jax.Device] | None = None,
    chunk_size: int | None = None,
    vectorized: bool = False,
) -> Callable:
    """``fn`` mapped over a batch like ``jax.jit(jax.vmap(fn, in_axes))``, the batch split over devices.

    Args:
        fn: a function of one sample (positional arguments; bind keywords with
            `functools.partial` or a lambda), returning a pytree of arrays (scalars are batched like
            arrays; other leaves, e.g. an Equinox module's static fields, are passed through).
        in_axes: as in `jax.vmap`: an int or None for every argument, or a tuple with one entry
            per positional argument, each an int, None or a pytree prefix of that argument. ``None``
            broadcasts (e.g. the `SegmentTree` shared by all states: ``in_axes=(None, 0, 0, 0)``).
            Mapped leaves must agree on the batch size ``B``. Non-array leaves of broadcast
            arguments (Python numbers, strings, functions) are static, as in `equinox.filter_jit`:
            one compile per value; pass arrays to trace them.
        devices: the devices to split over (default `jax.devices()`: every local device, and after
            `jax.distributed.initialize` every process's devices). With one device ``batched`` is
            ``jit(vmap)`` on it (no shard_map).
        chunk_size: at most this many samples vmapped at once on a device (the device's share runs
            as a `jax.lax.map` over chunks): bounds memory for large batches, and keeps a batched
            adaptive solve's while-loop state in cache (10⁴ double-pendulum `simulate` calls ran
            faster per trajectory in chunks of 128–250 than as one ``jit(vmap)``;
            benchmarks/README.md). Default: the whole share.
        vectorized: ``fn`` already takes and returns a batch along the mapped axes (a function
            that vmaps itself, like the sprint fit's core); it is split over devices, not vmapped.

    Returns:
        ``batched(*args)`` (jitted; one compile per argument shapes): every output leaf has the
        batch axis first, ``(B, ...)``, equal to ``jax.jit(jax.vmap(fn, in_axes))(*args)`` up to
        round-off. On ``D`` devices the batch is padded to ``D·k·c ≥ B`` samples (``k`` chunks of
        ``c`` per device) by repeating its last sample, so any ``B`` works, and the outputs are
        sliced back to ``B``. Outputs are `jax.Array` s sharded over the devices; in a
        multi-process run call `gather` to get them as numpy on every process.

    Multi-process (after `jax.distributed.initialize`): every process calls ``batched`` with the
    same full batch (numpy or local arrays; each process transfers only its devices' share), or
    with global `jax.Array` s (e.g. `jax.make_array_from_process_local_data`), which pass as they are.

    Differentiable: `jax.grad` of a loss of the outputs goes through (shard_map's transpose sums
    the cotangent of broadcast arguments over devices); tested against ``jit(vmap)`` for inverse
    dynamics and fixed-grid simulations (``jb.simulate(..., stepsize_controller=jb.FixedGrid(N))``). Not on several devices:
    reverse mode through an *adaptive* Diffrax solve (Equinox's checkpointed while loop rejects
    the shard_map types: diffrax issue #765, equinox PR #1261); use ``steps=`` or one device.
    Inside ``fn`` the mesh axis ``"batch"`` (`AXIS`) is bound, so collectives over devices are
    possible, but ``fn`` is meant to be a function of one sample.

    Example (four host CPU devices, ``XLA_FLAGS=--xla_force_host_platform_device_count=4``)::

        tree = jb.load_model("arm7").tree
        q, qd, qdd = ...                          # (100_001, 7) each
        id_batch = jb.batch(jb.inverse_dynamics, in_axes=(None, 0, 0, 0))
        tau = id_batch(tree, q, qd, qdd)          # (100_001, 7), a quarter of the frames per device

    ``ValueError`` for an ``in_axes`` that is not an int/None/tuple, does not match the arguments,
    maps a non-array leaf or an axis out of range, maps nothing, or mapped leaves of different
    sizes; for a bad ``chunk_size`` or ``devices``.
    """
    in_axes = _check_in_axes(in_axes)
    chunk_size = None if chunk_size is None else as_count(chunk_size, "batch: chunk_size")
    if devices is not None:
        devices = _devices(devices)
    if not callable(fn):
        raise ValueError(f"batch: fn must be callable, got {type(fn).__name__}")
    jitted = {}  # static structure -> (jitted function, output's static part)

    def make(plan):
        treedef, static, axes, n, n_pad, mesh, k = plan
        out_static = []
        dyn_axes = [a for a, s in zip(axes, static) if s is None]

        def call(dyn):  # fn over a (chunk of the) batch; dyn: the array leaves, mapped axes in place
            def one(*leaves):
                full = [l if s is None else s.value for s, l in zip(static, _fill(leaves, static))]
                out = fn(*jax.tree.unflatten(treedef, full))
                arrays, rest = eqx.partition(out, _is_value)
                out_static[:] = [rest]
                return arrays

            if vectorized:
                return one(*dyn)
            return jax.vmap(one, in_axes=tuple(dyn_axes))(*dyn)

        def local(*dyn):  # one device's share; mapped leaves have n_pad / D along their axis
            if k == 1:
                return call(dyn)
            front = [x if a is None else jnp.moveaxis(x, a, 0) for x, a in zip(dyn, dyn_axes)]
            split = [x if a is None else x.reshape((k, x.shape[0] // k) + x.shape[1:]) for x, a in zip(front, dyn_axes)]
            mapped = [x for x, a in zip(split, dyn_axes) if a is not None]

            def step(xs):
                it = iter(xs)
                cur = [next(it) if a is not None else x for x, a in zip(front, dyn_axes)]
                cur = [x if a is None else jnp.moveaxis(x, 0, a) for x, a in zip(cur, dyn_axes)]
                return call(cur)

            out = jax.lax.map(step, mapped)
            return jax.tree.map(lambda y: y.reshape((-1,) + y.shape[2:]), out)

        def run(*dyn):
            dyn = [x if a is None else _pad(x, a, n_pad) for x, a in zip(dyn, dyn_axes)]
            if mesh is None:
                out = local(*dyn)
            else:
                specs = tuple(PartitionSpec() if a is None else PartitionSpec(*([None] * a), AXIS) for a in dyn_axes)
                out = jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=PartitionSpec(AXIS), check_vma=False)(
                    *dyn
                )
            return jax.tree.map(lambda y: y[:n], out) if n_pad != n else out

        return jax.jit(run), out_static

    @functools.wraps(fn)
    def batched(*args, **kwargs):
        if kwargs:
            raise ValueError(
                f"batch: pass arguments positionally (in_axes maps positional arguments); got keywords "
                f"{sorted(kwargs)}: bind them with functools.partial"
            )
        axes = _leaf_axes(in_axes, args)
        leaves, treedef = jax.tree.flatten(args)
        sizes = {int(np.shape(x)[a]) for x, a in zip(leaves, axes) if a is not None}
        if not sizes:
            raise ValueError("batch: in_axes maps no argument (every entry None); nothing to batch over")
        if len(sizes) > 1:
            raise ValueError(f"batch: mapped arguments have different batch sizes {sorted(sizes)}")
        n = sizes.pop()
        if n == 0:
            raise ValueError("batch: the batch is empty")
        devs = _devices(devices) if devices is None else devices
        d = len(devs)
        k, c = _chunks(-(-n // d), chunk_size)
        n_pad = d * k * c
        mesh = Mesh(np.array(devs), (AXIS,)) if d > 1 else None
        static = tuple(None if (eqx.is_array(x) or a is not None) else _Static(x) for x, a in zip(leaves, axes))
        plan = (treedef, static, tuple(axes), n, n_pad, mesh, k)
        if plan not in jitted:
            jitted[plan] = make(plan)
        fn_jit, out_static = jitted[plan]
        dyn = [x for x, s in zip(leaves, static) if s is None]
        concrete = not any(isinstance(x, jax.core.Tracer) for x in dyn)
        if mesh is not None and concrete and not _fully_addressable(mesh):
            dyn = [_global(x, a, n_pad, mesh) for x, a in zip(dyn, [a for a, s in zip(axes, static) if s is None])]
        elif mesh is None and devices is not None and concrete:  # the one device asked for
            dyn = jax.device_put(dyn, devs[0])
        out = fn_jit(*dyn)
        return eqx.combine(out, out_static[0])

    return batched


class _Static:
    """A non-array leaf held static (hashed into the compile key), like `equinox.filter_jit`."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        try:
            return hash((type(self.value), self.value))
        except TypeError:  # unhashable: one compile per object
            return id(self.value)

    def __eq__(self, other):
        if not isinstance(other, _Static) or type(other.value) is not type(self.value):
            return False
        try:
            return bool(other.value == self.value)
        except Exception:  # noqa: BLE001  (e.g. an ambiguous array comparison)
            return other.value is self.value


def _is_value(x) -> bool:
    """An output leaf that is batched (arrays and Python/numpy scalars, as `jax.vmap` returns them)."""
    return eqx.is_array(x) or isinstance(x, (bool, int, float, complex, np.generic))


def _fill(leaves, static):
    it = iter(leaves)
    return [None if s is not None else next(it) for s in static]


def _fully_addressable(mesh: Mesh) -> bool:
    return all(d.process_index == jax.process_index() for d in mesh.devices.flat)


def _global(x, axis, n_pad: int, mesh: Mesh):
    """A global array over ``mesh`` from the full value ``x`` (the same on every process): mapped
    leaves padded and split along ``axis``, others replicated; each process copies only its share."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return x  # already global
    x = np.asarray(x)
    if axis is None:
        spec = PartitionSpec()
    else:
        x = _pad(x, axis, n_pad)
        spec = PartitionSpec(*([None] * axis), AXIS)
    return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda index: x[index])


def gather(tree: Any) -> Any:
    """Every array leaf of ``tree`` as numpy, the whole value on every process (`jax.Array` s of a
    multi-process `batch` are gathered with `jax.experimental.multihost_utils.process_allgather`;
    other leaves are converted or passed through). Every process must call it (it communicates)."""

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x) if eqx.is_array(x) else x

    return jax.tree.map(one, tree)


def device_count(devices: Sequence[jax.Device] | None = None) -> int:
    """How many devices `batch` splits over (``len(jax.devices())`` by default)."""
    return len(_devices(devices))


__all__ = ["AXIS", "batch", "device_count", "gather"]
