"""Times `jaxbio.dynamics._adjoint.inverse_dynamics_vjp_batch` (the batch-last reverse pass of the
wrench recursion) against the forward kernel and ``jax.vjp`` of ``jax.vmap(_plain_tau)``
(forward + backward: the per-state route that ``jax.grad`` through ``vmap(inverse_dynamics)`` ran
before `jaxbio.dynamics.batch_last.vmapped_by` routed reverse mode to the adjoint).

Each case is a jitted `jax.lax.fori_loop` of ``REPS`` dependent calls (the next call's input reads
the last output); best of 10 runs, µs per call; compile time of the loop in seconds.

    PYTHONPATH=. python benchmarks/_adjoint_bench.py [--models arm7,double_pendulum] [--batches 32,10000]

``--models`` may name ``wholebody_hinges`` (the test suite's axial whole body). The machine line
is printed first. Measured 2026-11-30, Intel Xeon (avx2, fma, avx512f, avx512_bf16, amx_tile),
2 cores, jax/jaxlib 0.10.2, another process busy on the machine (load 3–4); float32, µs per call
(compile s):

=================  ======  ==============  ===================  ==========================
model              batch   forward kernel  VJP kernel (fwd+bwd) jax.vjp(vmap(_plain_tau))
=================  ======  ==============  ===================  ==========================
arm7               32      19.9 (2.1 s)    81.7 (3.7 s)         342.9 (6.7 s)
arm7               10⁴     4,818 (2.0 s)   20,205 (3.8 s)       42,848 (6.9 s)
double_pendulum    32      3.5 (1.8 s)     13.6 (3.3 s)         48.7 (7.1 s)
double_pendulum    10⁴     1,462 (1.9 s)   4,487 (4.1 s)        6,144 (6.1 s)
wholebody_hinges   32      64.1 (3.0 s)    378 (6.4 s)          1,715 (8.3 s)
wholebody_hinges   2,000   3,757 (3.6 s)   15,963 (8.2 s)       130,877 (6.9 s)
=================  ======  ==============  ===================  ==========================
"""

from __future__ import annotations

import argparse
import time

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _machine  # noqa: E402  (benchmarks/_machine.py)

import jaxbio as jb  # noqa: E402
from jaxbio.dynamics._adjoint import inverse_dynamics_vjp_batch  # noqa: E402
from jaxbio.dynamics.batch_last import inverse_dynamics_batch  # noqa: E402
from jaxbio.dynamics._rnea import _plain_tau  # noqa: E402


def _cases(tree):
    def forward(q, qd, qdd, ct):
        return (inverse_dynamics_batch(tree, q, qd, qdd),)

    def kernel(q, qd, qdd, ct):
        return inverse_dynamics_vjp_batch(tree, q, qd, qdd, ct)

    def autodiff(q, qd, qdd, ct):
        f = jax.vmap(lambda a, b, c: _plain_tau(tree, a, b, c))
        return jax.vjp(f, q, qd, qdd)[1](ct)

    return {"forward kernel": forward, "vjp kernel (fwd+bwd)": kernel, "jax.vjp(vmap(_plain_tau))": autodiff}


def _time(f, args, reps):
    def loop(q, qd, qdd, ct):
        def body(_, q):
            outs = f(q, qd, qdd, ct)
            return q + 1e-30 * sum(o for o in outs)

        return lax.fori_loop(0, reps, body, q)

    t0 = time.perf_counter()
    compiled = jax.jit(loop).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    compiled(*args).block_until_ready()
    best = np.inf
    for _ in range(10):
        t0 = time.perf_counter()
        compiled(*args).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return best / reps * 1e6, compile_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="arm7,double_pendulum")
    ap.add_argument("--batches", default="32,10000")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    dt = jnp.dtype(args.dtype)
    if dt == jnp.float64:
        jax.config.update("jax_enable_x64", True)
    print(_machine.machine())
    print(f"{'model':16s} {'batch':>6s} {'case':28s} {'us/call':>10s} {'compile s':>9s}")
    for name in args.models.split(","):
        if name == "wholebody_hinges":
            from tests.dynamics.test_batched_dynamics import wholebody_hinges  # noqa: PLC0415

            tree = jax.tree_util.tree_map(
                lambda x: x.astype(dt) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x,
                wholebody_hinges(),
            )
        else:
            tree = jb.load_model(name, dtype=dt).tree
        for B in (int(b) for b in args.batches.split(",")):
            rng = np.random.default_rng(0)
            xs = tuple(jnp.asarray(rng.uniform(-2, 2, (B, tree.nv)), dt) for _ in range(4))
            reps = max(2, min(200, 200_000 // B))
            for case, f in _cases(tree).items():
                us, cs = _time(f, xs, reps)
                print(f"{name:16s} {B:6d} {case:28s} {us:10.1f} {cs:9.2f}", flush=True)


if __name__ == "__main__":
    main()
