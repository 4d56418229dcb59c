"""Small symmetric positive-definite solves without LAPACK, for code that runs under `jax.vmap`.

`jax.numpy.linalg.solve` or `jax.scipy.linalg.cho_factor` on a batch of small matrices is one
LAPACK call per matrix on CPU, and jaxlib (0.10) spreads that batch over XLA's intra-op thread
pool from *inside* a pool worker (``jax::ParallelBatchMap``): when two such calls run at once
(independent thunks of one program) every worker waits for sub-tasks that no worker is free to
run, and the program never finishes. Observed on a 2-core machine, jax/jaxlib 0.10.2: the
sprint's Levenberg–Marquardt vmapped over 4,000 solves hung on its first round (both
``tf_XLAEigen`` threads in ``LuDecomposition::Kernel`` → ``ParallelBatchMap`` →
``BlockingCounter::Wait``, per ``gdb``). Here the factorisation is elementwise arithmetic that
`jax.vmap` vectorises over the batch: no call per matrix, nothing to deadlock.

Its one sibling is the static optimisation's `jaxbio.estimation._static_optimization._spd_inverse`
(a sweep operator in a `jax.lax.fori_loop`, also LAPACK-free): for its 10–22-variable Newton
systems this unrolled form compiled twice as slowly (benchmarks/README.md, "Measurements behind design choices").
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax


def cholesky_solve(M, b, keep=lambda x: x):
    """``x = M⁻¹ b`` for symmetric positive-definite ``M`` ``(n, n, ...)`` and ``b`` ``(n, ...)``
    (trailing batch axes, e.g. ``(n, n, C)`` and ``(n, C)``; none for one system under `jax.vmap`).

    ``M = L Lᵀ`` column by column, then the two triangular solves: ~n³/6 multiply-adds written
    out, so meant for small ``n``. ``keep``: applied to each column of ``L`` (the batch kernels
    pass their materialisation barrier). A matrix that is not positive-definite gives NaN (the
    square root of a non-positive pivot), never an exception. `cholesky` and `factor_solve` are
    its two halves, for a factor kept and used later."""
    return _substitute(_columns(M, keep), b)


def cholesky(M, keep=lambda x: x):
    """The Cholesky factor ``L`` of ``M = L Lᵀ`` (``M`` ``(n, n, ...)`` as in `cholesky_solve`)
    packed by columns, ``(n(n+1)/2, ...)``: ``L[k:, k]`` for ``k = 0 … n − 1`` one after the other.
    ``keep`` as in `cholesky_solve`."""
    return jnp.concatenate(_columns(M, keep), 0)


def factor_solve(L, b):
    """``M⁻¹ b`` from ``M``'s packed factor ``L`` (`cholesky`) and ``b`` ``(n, ...)``: the forward
    and back substitutions written out (~n² multiply-adds)."""
    n = b.shape[0]
    starts = [k * n - k * (k - 1) // 2 for k in range(n)]
    return _substitute([L[s : s + n - k] for k, s in enumerate(starts)], b)


def _columns(M, keep):
    """``[L[k:, k] for k < n]``: `cholesky`, unrolled over ``n``, each step vectorised over the
    rows below the diagonal and the trailing axes."""
    n = M.shape[0]
    cols = []
    for j in range(n):
        v = M[j:, j]
        for k in range(j):
            v = v - cols[k][j - k :] * cols[k][j - k]
        cols.append(keep(v * lax.rsqrt(v[0])))
    return cols


def _substitute(cols, b):
    """``M⁻¹ b`` from ``M``'s factor as `_columns`: ``L y = b``, then ``Lᵀ x = y``."""
    n = b.shape[0]
    y = []
    for j in range(n):
        acc = b[j]
        for k in range(j):
            acc = acc - cols[k][j - k] * y[k]
        y.append(acc / cols[j][0])
    x = [None] * n
    for j in reversed(range(n)):
        acc = y[j]
        for k in range(j + 1, n):
            acc = acc - cols[j][k - j] * x[k]
        x[j] = acc / cols[j][0]
    return jnp.stack(x)


#: largest ``n`` that `spd_solve` factorises unrolled (≈ n³/6 multiply-adds in the program)
UNROLL_MAX = 12


def spd_solve(M, b):
    """``M⁻¹ b`` for one symmetric positive-definite ``M`` ``(n, n)`` and ``b`` ``(n,)`` or
    ``(n, k)``: `cholesky_solve` up to ``UNROLL_MAX`` coordinates (no LAPACK call under `jax.vmap`,
    so no per-matrix call and no pool deadlock), LAPACK's Cholesky above (a program that grows as
    n³ would cost more to compile than the call costs to run)."""
    if M.shape[0] > UNROLL_MAX:
        return jsl.cho_solve(jsl.cho_factor(M), b)
    # ``+ 0·b`` ties the result's layout to ``b``'s: without it, the batch axis of a vmapped solve
    # inside a differentiated ``lax.scan`` came out trailing, (n, B) against (B, n), and the
    # scan's linearisation failed (tests/test_linalg.py, the slow scan-gradient test)
    return cholesky_solve(M, b) + 0.0 * b
