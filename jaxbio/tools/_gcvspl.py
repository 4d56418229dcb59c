"""Woltring's GCVSPL natural smoothing splines, ported from the code OpenSim runs.

OpenSim's ``GCVSpline`` (``OpenSim/Common/GCVSpline.cpp``) fits through
``SimTK::SplineFitter::fitFromErrorVariance`` and evaluates through ``SimTK::Spline``; both call
Simbody's ``SimTKmath/Geometry/src/gcvspl.cpp`` (an f2c translation of Woltring's 1986 FORTRAN
package, the same algorithm as ``OpenSim/Common/gcvspl.c``): ``gcvspl`` with mode 3 (known error
variance) and ``splder``. This module is that code in Python, routine by routine (``basis``,
``prep``, ``splc``, ``bandet``, ``bansol``, ``trinv``, the smoothing-parameter search of
``gcvspl``, ``search``, ``splder``), with the same floating-point operations in the same order,
so the coefficients, values and derivatives are OpenSim's bit for bit (the tests compare with
``opensim.GCVSplineSet``). Two things are organised differently without changing a number: the
columns of a data set are fitted side by side, sharing the factorisation of ``B + p·WE``
between columns (and between trials of ``p`` below GCVSPL's clamp, which factor the same
matrix), and the trace term of ``splc`` is skipped when the error variance is 0, since the
FORTRAN multiplies it by 0.

Why a port and not scipy: the spline of degree ``2m-1`` that GCVSPL fits is the natural spline
(derivatives ``m … 2m-2`` zero at both ends, polynomial of degree ``m-1`` outside the data) that
minimises ``Σ (y_i - s(x_i))² + p ∫ (s⁽ᵐ⁾)²``, with ``p`` found by a search. With error variance
0 (OpenSim's setting) the search halves ``p`` until ``p·el`` reaches GCVSPL's ``1e-15`` clamp, or
until the residual criterion stops decreasing in rounding noise (then a golden-section search
ends it), so the fit is *almost* the interpolating natural spline: residuals ~1e-15 relative,
not 0, and a smoothing parameter that depends on rounding. scipy has no such fit:
``make_interp_spline(k=5, bc_type="natural")`` is refused (one condition per end is too few for
a quintic); the natural quintic interpolant itself is ``make_interp_spline(x, y, k=5,
bc_type=([(3, 0.0), (4, 0.0)], [(3, 0.0), (4, 0.0)]))``, which the tests use as an independent
check (it agrees to ~1e-14 relative in values, less in higher derivatives). The recurrences
(banded LDU factorisation, substitution, the divided differences of ``splder``) are sequential
and run on Python floats; a fit costs O(n m²) per trial ``p`` (50–80 trials per column).
"""

from __future__ import annotations

import math

import numpy as np

_EPS = 1e-15  # GCVSPL's clamp on p·el (``c_b6``)
_GOLDEN = 1.618033983
_HUGE = 999999999999999.88


def _basis(m: int, n: int, x: list[float]) -> tuple[list[list[float]], float]:
    """``BASIS``: the band of the B-spline Gram-like matrix, ``b[k + m - 1][i]`` for
    ``k = -(m-1) … m-1``, ``i = 1 … n`` (1-based ``x``), and its mean absolute value ``bl``."""
    mm1, mp1, m2 = m - 1, m + 1, 2 * m
    b = [[0.0] * (n + 1) for _ in range(2 * m - 1)]
    if m == 1:
        for i in range(1, n + 1):
            b[0][i] = 1.0
        return b, 1.0
    q = [0.0] * (2 * m)  # q(1-m : m) stored at q[j + mm1]
    o = mm1
    for ell in range(1, n + 1):
        for j in range(-mm1, m + 1):
            q[j + o] = 0.0
        q[mm1 + o] = 1.0
        if ell != 1 and ell != n:
            q[mm1 + o] = 1 / (x[ell + 1] - x[ell - 1])
        arg = x[ell]
        for i in range(3, m2 + 1):
            ir = mp1 - i
            v = q[ir + o]
            if ell < i:
                for j in range(ell + 1, i + 1):
                    u = v
                    v = q[ir + 1 + o]
                    q[ir + o] = u + (x[j] - arg) * v
                    ir += 1
            j1 = max(ell - i + 1, 1)
            j2 = min(ell - 1, n - i)
            if j1 <= j2:
                if i < m2:
                    for j in range(j1, j2 + 1):
                        y = x[i + j]
                        u = v
                        v = q[ir + 1 + o]
                        q[ir + o] = u + (v - u) * (y - arg) / (y - x[j])
                        ir += 1
                else:
                    for j in range(j1, j2 + 1):
                        u = v
                        v = q[ir + 1 + o]
                        q[ir + o] = (arg - x[j]) * u + (x[i + j] - arg) * v
                        ir += 1
            nmip1 = n - i + 1
            if nmip1 < ell:
                for j in range(nmip1, ell):
                    u = v
                    v = q[ir + 1 + o]
                    q[ir + o] = (arg - x[j]) * u + v
                    ir += 1
        for j in range(-mm1, mm1 + 1):
            b[j + o][ell] = q[j + o]
    for i in range(1, mm1 + 1):
        for k in range(i, mm1 + 1):
            b[-k + o][i] = 0.0
            b[k + o][n + 1 - i] = 0.0
    bl = 0.0
    for i in range(1, n + 1):
        for k in range(-mm1, mm1 + 1):
            bl += abs(b[k + o][i])
    return b, bl / n


def _prep(m: int, n: int, x: list[float], w: list[float]) -> tuple[list[list[float]], float]:
    """``PREP``: the band of the weighted divided-difference matrix, ``we[k + m][i]`` for
    ``k = -m … m``, and its mean absolute value ``el``."""
    m2, mp1, m2m1, m2p1, nm = 2 * m, m + 1, 2 * m - 1, 2 * m + 1, n - m
    we = [0.0] * (m2p1 * n + 1)  # WE(-M:M, N), flat and 1-based as in the FORTRAN
    f1 = -1.0
    if m != 1:
        for i in range(2, m + 1):
            f1 = -f1 * i
        for i in range(mp1, m2m1 + 1):
            f1 *= i
    i1, i2, jm = 1, m, mp1
    for j in range(1, n + 1):
        inc = m2p1
        if j > nm:
            f1 = -f1
            f = f1
        elif j < mp1:
            inc = 1
            f = f1
        else:
            f = f1 * (x[j + m] - x[j - m])
        if j > mp1:
            i1 += 1
        if i2 < n:
            i2 += 1
        jj = jm
        ff = f
        y = x[i1]
        i1p1 = i1 + 1
        for i in range(i1p1, i2 + 1):
            ff /= y - x[i]
        we[jj] = ff
        jj += m2
        i2m1 = i2 - 1
        if i1p1 <= i2m1:
            for ell in range(i1p1, i2m1 + 1):
                ff = f
                y = x[ell]
                for i in range(i1, ell):
                    ff /= y - x[i]
                for i in range(ell + 1, i2 + 1):
                    ff /= y - x[i]
                we[jj] = ff
                jj += m2
        ff = f
        y = x[i2]
        for i in range(i1, i2m1 + 1):
            ff /= y - x[i]
        we[jj] = ff
        jj += m2
        jm += inc
    kl = 1
    n2m = m2p1 * n + 1
    for i in range(1, m + 1):
        ku = kl + m - i
        for k in range(kl, ku + 1):
            we[k] = 0.0
            we[n2m - k] = 0.0
        kl += m2p1
    jj = 0
    el = 0.0
    for i in range(1, n + 1):
        wi = w[i]
        for _ in range(m2p1):
            jj += 1
            we[jj] /= wi
            el += abs(we[jj])
    band = [[0.0] * (n + 1) for _ in range(m2p1)]
    for i in range(1, n + 1):
        for k in range(-m, m + 1):
            band[k + m][i] = we[k + m + 1 + (i - 1) * m2p1]
    return band, el / n


def _bandet(e: list[list[float]], m: int, n: int) -> None:
    """``BANDET``: in-place LDU factorisation of the band matrix ``e[k + m][i]``."""
    if m <= 0:
        return
    for i in range(1, n + 1):
        di = e[m][i]
        mi = min(m, i - 1)
        if mi >= 1:
            for k in range(1, mi + 1):
                di -= e[-k + m][i] * e[k + m][i - k]
            e[m][i] = di
        lm = min(m, n - i)
        if lm >= 1:
            for ell in range(1, lm + 1):
                dl = e[-ell + m][i + ell]
                km = min(m - ell, i - 1)
                if km >= 1:
                    du = e[ell + m][i]
                    for k in range(1, km + 1):
                        du -= e[-k + m][i] * e[ell + k + m][i - k]
                        dl -= e[-ell - k + m][ell + i] * e[k + m][i - k]
                    e[ell + m][i] = du
                e[-ell + m][i + ell] = dl / di


def _bansol(e: list[list[float]], y: list[float], m: int, n: int) -> list[float]:
    """``BANSOL`` (``M > 1`` branch; also right for ``M = 1``), one right-hand side ``y``
    (1-based): solve with the factors of `_bandet`."""
    c = [0.0] * (n + 1)
    c[1] = y[1]
    for i in range(2, n + 1):
        d = y[i]
        for ell in range(1, min(m, i - 1) + 1):
            d -= e[-ell + m][i] * c[i - ell]
        c[i] = d
    c[n] /= e[m][n]
    for i in range(n - 1, 0, -1):
        d = c[i]
        for ell in range(1, min(m, n - i) + 1):
            d -= e[ell + m][i] * c[i + ell]
        c[i] = d / e[m][i]
    return c


def _bandet_batch(e: np.ndarray, m: int, n: int) -> None:
    """`_bandet` on ``B`` matrices at once, ``e`` ``(2m+1, n+1, B)`` in place: `_bandet`'s
    operations in its order, each an elementwise numpy operation over the last axis (an IEEE
    operation per element, as on a Python float: the same bits, tests/io/test_processing.py)."""
    for i in range(1, n + 1):
        di = e[m, i].copy()
        mi = min(m, i - 1)
        if mi >= 1:
            for k in range(1, mi + 1):
                di -= e[-k + m, i] * e[k + m, i - k]
            e[m, i] = di
        for ell in range(1, min(m, n - i) + 1):
            dl = e[-ell + m, i + ell].copy()
            km = min(m - ell, i - 1)
            if km >= 1:
                du = e[ell + m, i].copy()
                for k in range(1, km + 1):
                    du -= e[-k + m, i] * e[ell + k + m, i - k]
                    dl -= e[-ell - k + m, ell + i] * e[k + m, i - k]
                e[ell + m, i] = du
            e[-ell + m, i + ell] = dl / di


def _bansol_batch(e: np.ndarray, y: np.ndarray, m: int, n: int) -> np.ndarray:
    """`_bansol` for ``B`` systems at once: factors ``e`` ``(2m+1, n+1, B)`` from `_bandet_batch`,
    right-hand sides ``y`` ``(n+1, B)`` (row 0 unused); `_bansol`'s operations, elementwise."""
    c = np.zeros_like(y)
    c[1] = y[1]
    for i in range(2, n + 1):
        d = y[i].copy()
        for ell in range(1, min(m, i - 1) + 1):
            d -= e[-ell + m, i] * c[i - ell]
        c[i] = d
    c[n] = c[n] / e[m, n]
    for i in range(n - 1, 0, -1):
        d = c[i].copy()
        for ell in range(1, min(m, n - i) + 1):
            d -= e[ell + m, i] * c[i + ell]
        c[i] = d / e[m, i]
    return c


def _trinv(b: list[list[float]], e: list[list[float]], m: int, n: int) -> float:
    """``TRINV``: the central ``2m+1`` bands of ``E⁻¹`` (in place) and ``trace(B E⁻¹)``."""
    e[m][n] = 1 / e[m][n]
    for i in range(n - 1, 0, -1):
        mi = min(m, n - i)
        dd = 1 / e[m][i]
        for k in range(1, mi + 1):
            e[k + m][n] = e[k + m][i] * dd
            e[-k + m][1] = e[-k + m][k + i]
        dd += dd
        for j in range(mi, 0, -1):
            du = 0.0
            dl = 0.0
            for k in range(1, mi + 1):
                du -= e[k + m][n] * e[j - k + m][i + k]
                dl -= e[-k + m][1] * e[k - j + m][i + j]
            e[j + m][i] = du
            e[-j + m][j + i] = dl
            dd -= e[j + m][n] * dl + e[-j + m][1] * du
        e[m][i] = dd / 2
    dd = 0.0
    for i in range(1, n + 1):
        mn = -min(m, i - 1)
        mp = min(m, n - i)
        for k in range(mn, mp + 1):
            dd += b[k + m][i] * e[-k + m][k + i]
    for k in range(1, m + 1):
        e[k + m][n] = 0.0
        e[-k + m][1] = 0.0
    return dd


class _Smoother:
    """GCVSPL's mode-3 criterion for one set of abscissae ``x`` (1-based list): the matrices B
    and WE (`_basis`, `_prep`) and, per smoothing parameter ``p``, the factorised ``B + p·WE``,
    shared by every data column fitted on these ``x`` (``SPLC`` factors it again per column
    and per call; the numbers are the same)."""

    def __init__(self, x: list[float], m: int, variance: float):
        n = len(x) - 1
        self.m, self.n, self.variance = m, n, variance
        self.b, bl = _basis(m, n, x)
        self.we, el = _prep(m, n, x, [1.0] * (n + 1))
        self.el = el / bl
        # B as (2m-1, n) for the residuals, zero outside each row's band (adding 0.0 changes nothing)
        band = np.zeros((2 * m - 1, n))
        i = np.arange(1, n + 1)
        for k in range(-(m - 1), m):
            inside = (i - 1 >= -k) & (n - i >= k)
            band[k + m - 1, inside] = np.asarray(self.b[k + m - 1][1:])[inside]
        self._band = band
        self._we_array = np.asarray(self.we)
        self._b_full = np.vstack([np.zeros((1, n + 1)), np.asarray(self.b), np.zeros((1, n + 1))])
        self._factors: dict[float, tuple] = {}

    def clamp(self, p: float) -> tuple[float, float]:
        """``SPLC``'s clamp: the ``dp`` it factors with (``p`` kept within GCVSPL's
        ``[1e-15, 1e15] / el``) and ``p`` as it reports it used (0 when clamped below)."""
        dp = p
        used = p
        pel = p * self.el
        if pel < _EPS:
            dp = _EPS / self.el
            used = 0.0
        if pel * _EPS > 1.0:
            dp = 1 / (self.el * _EPS)
            used = dp
        return dp, used

    def _factor(self, dp: float):
        """The factorised ``B + dp·WE`` and the trace term ``trn``, the latter only when the
        error variance is not 0 (it is multiplied by the variance). Cached by ``dp``: the
        search's trials below the clamp all share one."""
        if dp in self._factors:
            return self._factors[dp]
        m, n, we = self.m, self.n, self.we
        # B + dp·WE by rows (elementwise, the FORTRAN's operations); outside the band B and WE
        # are 0 and the factorisation never reads there
        bwe = (self._b_full + dp * self._we_array).tolist()
        bwe[0] = (dp * self._we_array[0]).tolist()
        bwe[2 * m] = (dp * self._we_array[2 * m]).tolist()
        _bandet(bwe, m, n)
        trn = None
        if self.variance != 0.0:  # trace(WE (B + p WE)⁻¹) p / n; TRINV overwrites a copy
            trn = _trinv(we, [row[:] for row in bwe], m, n) * dp / n
        self._factors[dp] = (bwe, trn)
        return self._factors[dp]

    def solve(self, dp: float, y: np.ndarray) -> np.ndarray:
        """The coefficients for the (clamped) smoothing parameter ``dp``, ``(n+1, g)`` (row 0
        unused)."""
        bwe = self._factor(dp)[0]
        return np.column_stack([_bansol(bwe, column, self.m, self.n) for column in y.T.tolist()])

    def criterion(self, dp: float, y: np.ndarray) -> np.ndarray:
        """``SPLC``'s return value for each column of ``y`` (``(n+1, g)``, row 0 unused):
        ``esn - variance·(2·trn - 1)``, where ``esn`` is the mean squared residual (summed in
        order, as the FORTRAN). With variance 0 the FORTRAN's ``0·(2·trn - 1)`` is 0, so
        ``trn`` is not computed."""
        trn = self._factor(dp)[1]
        c = self.solve(dp, y)
        m, n = self.m, self.n
        dt = -y[1:]
        for k in range(-(m - 1), m):  # dt += b(k, i)·c(i + k), k ascending
            lo, hi = max(1, 1 - k), min(n, n - k)
            shifted = np.zeros_like(dt)
            shifted[lo - 1 : hi] = c[lo + k : hi + k + 1]
            dt = dt + self._band[k + m - 1][:, None] * shifted
        esn = np.cumsum(dt * dt, axis=0)[-1] / n  # weights 1; cumsum adds in order
        return esn if trn is None else esn - self.variance * (trn * 2 - 1)

    def solve_many(self, dps: list[float], pairs: list[tuple[int, int]], y: np.ndarray) -> np.ndarray:
        """`solve` for many ``(index into dps, column of y)`` pairs at once, ``(n+1, len(pairs))``:
        every ``B + dp·WE`` factorised side by side (`_bandet_batch`), every pair solved side by
        side (`_bansol_batch`); the same numbers as `solve` pair by pair."""
        m, n = self.m, self.n
        d = np.asarray(dps, float)
        bwe = self._b_full[:, :, None] + d[None, None, :] * self._we_array[:, :, None]
        bwe[0] = d[None, :] * self._we_array[0][:, None]
        bwe[2 * m] = d[None, :] * self._we_array[2 * m][:, None]
        _bandet_batch(bwe, m, n)
        which, columns = (np.array(v, int) for v in zip(*pairs))
        return _bansol_batch(bwe[:, :, which], y[:, columns], m, n)

    def criteria(self, dps: list[float], pairs: list[tuple[int, int]], y: np.ndarray) -> np.ndarray:
        """`criterion` with error variance 0 for many ``(index into dps, column of y)`` pairs at
        once (`solve_many`); the same numbers as `criterion` pair by pair."""
        m, n = self.m, self.n
        c = self.solve_many(dps, pairs, y)
        rhs = y[:, [j for _, j in pairs]]
        dt = -rhs[1:]
        for k in range(-(m - 1), m):  # dt += b(k, i)·c(i + k), k ascending, as `criterion`
            lo, hi = max(1, 1 - k), min(n, n - k)
            shifted = np.zeros_like(dt)
            shifted[lo - 1 : hi] = c[lo + k : hi + k + 1]
            dt = dt + self._band[k + m - 1][:, None] * shifted
        return np.cumsum(dt * dt, axis=0)[-1] / n


def _search_p(el: float):
    """GCVSPL's search for the smoothing parameter (labels L20–L90 of ``GCVSPL``, mode > 0), as
    a generator: it yields each ``p`` to try, is sent ``(criterion, p as used)`` back, and
    returns the ``p`` to fit with (the FORTRAN's final ``SPLC`` call at L100)."""
    r1 = 1 / el
    r2 = r1 * 2
    gf2, used = yield r2
    while True:  # L40: decrease p while the criterion decreases
        gf1, used = yield r1
        if gf1 > gf2:
            break
        if used <= 0:
            return r1
        r2, gf2 = r1, gf1
        r1 /= 2.0
    r3 = r2 * 2  # L50: increase p while the criterion decreases
    while True:
        gf3, used = yield r3
        if gf3 > gf2:
            break
        if used >= _HUGE:
            return r1
        r2, gf2 = r3, gf3
        r3 *= 2.0
    r2, gf2 = r3, gf3  # L70: golden-section search in [r1, r2]
    alpha = (r2 - r1) / _GOLDEN
    r4 = r1 + alpha
    r3 = r2 - alpha
    gf3, _ = yield r3
    gf4, _ = yield r4
    while True:
        if gf3 <= gf4:
            r2, gf2 = r4, gf4
            err = (r2 - r1) / (r1 + r2)
            if err * err + 1 == 1 or err <= 1e-6:
                break
            r4, gf4 = r3, gf3
            alpha /= _GOLDEN
            r3 = r2 - alpha
            gf3, _ = yield r3
        else:
            r1, gf1 = r3, gf3
            err = (r2 - r1) / (r1 + r2)
            if err * err + 1 == 1 or err <= 1e-6:
                break
            r3, gf3 = r4, gf4
            alpha /= _GOLDEN
            r4 = r1 + alpha
            gf4, _ = yield r4
    return (r1 + r2) / 2  # L90


def _gcvspl(x: list[float], y: np.ndarray, m: int, variance: float, *, ahead: bool = True) -> np.ndarray:
    """``GCVSPL`` with ``MD = 3`` (known variance ``variance``) and unit weights, for each
    column of ``y`` (``(n, k)``) on its own, as OpenSim's ``GCVSplineSet`` fits them; returns the
    ``(n, k)`` coefficients. The columns' searches run side by side: the columns that ask for
    the same ``p`` in a round share one factorisation and are solved together (and every trial below GCVSPL's clamp on ``p`` is the same fit). With error variance 0 and ``ahead``
    the searches run through `_gcvspl_interpolating`."""
    smoother = _Smoother(x, m, variance)
    rhs = np.vstack([np.zeros((1, y.shape[1])), y])
    if variance == 0.0 and ahead:  # the same numbers as the rounds below (tests/io/test_processing.py)
        return _gcvspl_interpolating(smoother, rhs)
    searches = [_search_p(smoother.el) for _ in range(y.shape[1])]
    requests = {j: next(search) for j, search in enumerate(searches)}
    final: dict[float, list[int]] = {}
    while requests:
        groups: dict[tuple[float, float], list[int]] = {}
        for j, p in requests.items():
            groups.setdefault(smoother.clamp(p), []).append(j)
        requests = {}
        for (dp, used), columns in groups.items():
            values = smoother.criterion(dp, rhs[:, columns])
            for j, value in zip(columns, values.tolist()):
                try:
                    requests[j] = searches[j].send((value, used))
                except StopIteration as stop:
                    final.setdefault(smoother.clamp(stop.value)[0], []).append(j)
    out = np.empty_like(y)
    for dp, columns in final.items():
        out[:, columns] = smoother.solve(dp, rhs[:, columns])[1:]
    return out


#: the smoothing parameters tried ahead of the search (error variance 0): ``(1/el)·2^j`` for
#: ``|j| ≤ _AHEAD``, the values its halving and doubling phases reach (``p·el`` from 1 down to
#: GCVSPL's 1e-15 clamp is 50 halvings)
_AHEAD = 52


def _golden_step(state: tuple, smaller: bool):
    """One round of GCVSPL's golden-section search (label L70 on), as `_search_p` runs it: from
    ``state = (r1, r2, r3, r4, alpha)`` with both ``gf3`` and ``gf4`` known and ``smaller = gf3 <=
    gf4``, either ``(None, p)``, the search ended with ``p``, or ``(state', slot)``: the next round
    needs the criterion at ``state'[slot]`` (slot 2: a new ``r3``, whose value becomes ``gf3``
    after ``gf4 = gf3``; slot 3: a new ``r4``, ``gf4`` after ``gf3 = gf4``). The same operations as
    `_search_p`, so the same bits."""
    r1, r2, r3, r4, alpha = state
    if smaller:
        r2 = r4
        err = (r2 - r1) / (r1 + r2)
        if err * err + 1 == 1 or err <= 1e-6:
            return None, (r1 + r2) / 2
        r4 = r3
        alpha /= _GOLDEN
        r3 = r2 - alpha
        return (r1, r2, r3, r4, alpha), 2
    r1 = r3
    err = (r2 - r1) / (r1 + r2)
    if err * err + 1 == 1 or err <= 1e-6:
        return None, (r1 + r2) / 2
    r3 = r4
    alpha /= _GOLDEN
    r4 = r1 + alpha
    return (r1, r2, r3, r4, alpha), 3


def _replay(el: float, lookup):
    """GCVSPL's search for one column (`_search_p`'s trials, operations and order) run on the
    criteria known so far: ``lookup(p)`` is ``(criterion, p as used)`` or None when not computed.
    Returns ``("done", p)`` (the ``p`` to fit with), ``("need", [p])`` when a halving or doubling
    trial is missing, or ``("golden", state, slot)`` when the golden-section phase waits for the
    trial ``state[slot]`` (``slot`` None: it waits for both first trials ``r3`` and ``r4``)."""
    r1 = 1 / el
    r2 = r1 * 2
    known = lookup(r2)
    if known is None:
        return ("need", [r2])
    gf2, used = known
    while True:  # L40
        known = lookup(r1)
        if known is None:
            return ("need", [r1])
        gf1, used = known
        if gf1 > gf2:
            break
        if used <= 0:
            return ("done", r1)
        r2, gf2 = r1, gf1
        r1 /= 2.0
    r3 = r2 * 2  # L50
    while True:
        known = lookup(r3)
        if known is None:
            return ("need", [r3])
        gf3, used = known
        if gf3 > gf2:
            break
        if used >= _HUGE:
            return ("done", r1)
        r2, gf2 = r3, gf3
        r3 *= 2.0
    r2, gf2 = r3, gf3  # L70
    alpha = (r2 - r1) / _GOLDEN
    r4 = r1 + alpha
    r3 = r2 - alpha
    state = (r1, r2, r3, r4, alpha)
    first, second = lookup(r3), lookup(r4)
    if first is None or second is None:
        return ("golden", state, None)
    gf3, gf4 = first[0], second[0]
    while True:
        state, slot = _golden_step(state, gf3 <= gf4)
        if state is None:
            return ("done", slot)
        known = lookup(state[slot])
        if known is None:
            return ("golden", state, slot)
        if slot == 2:
            gf4, gf3 = gf3, known[0]
        else:
            gf3, gf4 = gf4, known[0]


def _golden_ahead(state: tuple, slot: int | None, depth: int) -> list[float]:
    """The trials the golden-section search can ask for in its next ``depth`` rounds from a
    `_replay` wait: the awaited trial(s), then both outcomes of each comparison (``2^depth - 1``
    trials, fewer where the search ends)."""
    if slot is None:
        wanted = [state[2], state[3]]
        branches = [state]
    else:
        wanted = [state[slot]]
        branches = [state]
        depth -= 1
    for _ in range(depth):
        following = []
        for branch in branches:
            for smaller in (True, False):
                after, next_slot = _golden_step(branch, smaller)
                if after is not None:
                    wanted.append(after[next_slot])
                    following.append(after)
        branches = following
    return wanted


#: rounds of the golden-section search computed together (`_golden_ahead`: up to 2^depth - 1
#: trials per column and call); the rounds are sequential, so each call replaces ``depth`` of them
_GOLDEN_DEPTH = 5


def _gcvspl_interpolating(smoother: _Smoother, rhs: np.ndarray) -> np.ndarray:
    """`_gcvspl`'s searches with error variance 0 (OpenSim's setting), the same trials and the same
    numbers, fast: every column's criterion at every ``p`` the halving and doubling phases can
    reach is computed at once (`_Smoother.criteria`, `_AHEAD`), and the golden-section phase
    computes every trial its next `_GOLDEN_DEPTH` rounds can ask for, all columns side by side
    (`_golden_ahead`); each column's search is then replayed on the known criteria (`_replay`).
    The final fits are factorised side by side too. Equal to the round-by-round search of
    `_gcvspl` (``ahead=False``) bit for bit (tests/io/test_processing.py), and faster
    (benchmarks/README.md, "Measurements behind design choices", GCVSPL)."""
    known: dict[tuple[float, int], tuple[float, float]] = {}
    clamps: dict[float, tuple[float, float]] = {}

    def clamp(p: float) -> tuple[float, float]:
        if p not in clamps:
            clamps[p] = smoother.clamp(p)
        return clamps[p]

    def compute(wanted: set[tuple[float, int]]) -> None:
        wanted = sorted(wanted - known.keys())
        if not wanted:
            return
        dps = sorted({dp for dp, _ in wanted})
        where = {dp: i for i, dp in enumerate(dps)}
        values = smoother.criteria(dps, [(where[dp], j) for dp, j in wanted], rhs)
        known.update(zip(wanted, values.tolist()))

    ahead = []
    p = 1 / smoother.el
    for _ in range(_AHEAD + 1):  # the halvings, r1 /= 2.0 as `_search_p` computes them
        ahead.append(p)
        p /= 2.0
    p = 1 / smoother.el
    for _ in range(_AHEAD):  # the doublings
        p *= 2.0
        ahead.append(p)
    columns = range(rhs.shape[1])
    compute({(clamp(p)[0], j) for p in ahead for j in columns})
    final: dict[float, list[int]] = {}
    pending = list(columns)
    while pending:
        wanted: set[tuple[float, int]] = set()
        waiting = []
        for j in pending:

            def lookup(p: float, j: int = j):
                dp, used = clamp(p)
                value = known.get((dp, j))
                return None if value is None else (value, used)

            outcome = _replay(smoother.el, lookup)
            if outcome[0] == "done":
                final.setdefault(clamp(outcome[1])[0], []).append(j)
                continue
            waiting.append(j)
            trials = outcome[1] if outcome[0] == "need" else _golden_ahead(outcome[1], outcome[2], _GOLDEN_DEPTH)
            wanted.update((clamp(p)[0], j) for p in trials)
        compute(wanted)
        pending = waiting
    dps = sorted(final)
    pairs = [(i, j) for i, dp in enumerate(dps) for j in final[dp]]
    out = np.empty((rhs.shape[0] - 1, rhs.shape[1]))
    out[:, [j for _, j in pairs]] = smoother.solve_many(dps, pairs, rhs)[1:]
    return out


def _search(n: int, x: list[float], t: float, ell: int) -> int:
    """``SEARCH``: the interval ``ell`` with ``x[ell] <= t < x[ell+1]`` (1-based; 0 before the
    first knot, ``n`` at or after the last), starting from the guess ``ell``."""
    if t < x[1]:
        return 0
    if t >= x[n]:
        return n
    ell = max(ell, 1)
    if ell >= n:
        ell = n - 1
    if t >= x[ell]:
        if t < x[ell + 1]:
            return ell
        ell += 1
        if t < x[ell + 1]:
            return ell
        il, iu = ell + 1, n
    else:
        ell -= 1
        if t >= x[ell]:
            return ell
        il, iu = 1, ell
    while True:  # bisection (labels L3/L4)
        ell = (il + iu) // 2
        if iu - il <= 1:
            return ell
        if t < x[ell]:
            iu = ell
        else:
            il = ell


def _splder(ider: int, m: int, n: int, t: float, x: list[float], c: np.ndarray, ell: int):
    """``SPLDER``: derivative ``ider`` at ``t`` of the spline with coefficients ``c`` (rows
    ``1 … n`` of a ``(n+1, k)`` array: every column is evaluated at once, with the same
    operations per column as the scalar FORTRAN)."""
    m2 = 2 * m
    k = m2 - ider
    if k < 1:
        return np.zeros(c.shape[1])
    ell = _search(n, x, t, ell)
    zero = np.zeros(c.shape[1])
    q = [zero] * (m2 + 2)  # q(1 : 2m), 1-based; entries are column vectors
    tt = t
    mp1, npm, m2m1 = m + 1, n + m, m2 - 1
    k1, nk = k - 1, n - k
    lk1 = ell - k + 1
    jl, ju = ell + 1, ell + m2
    ii = n - m2
    ml = -ell
    for j in range(jl, ju + 1):
        q[j + ml] = c[j - m] if mp1 <= j <= npm else zero
    if ider > 0:
        jl -= m2
        ml += m2
        for i in range(1, ider + 1):
            jl += 1
            ii += 1
            j1 = max(1, jl)
            j2 = min(ell, ii)
            mi = m2 - i
            j = j2 + 1
            if j1 <= j2:
                for _ in range(j1, j2 + 1):
                    j -= 1
                    jm = ml + j
                    q[jm] = (q[jm] - q[jm - 1]) / (x[j + mi] - x[j])
            if jl >= 1:
                continue
            i1 = i + 1
            j = ml + 1
            if i1 <= ml:
                for _ in range(i1, ml + 1):
                    j -= 1
                    q[j] = -q[j - 1]
        for j in range(1, k + 1):
            q[j] = q[j + ider]
    if k1 >= 1:
        for i in range(1, k1 + 1):
            nki = nk + i
            ir = k
            jj = ell
            ki = k - i
            nki1 = nki + 1
            if ell >= nki1:
                for _ in range(nki1, ell + 1):
                    q[ir] = q[ir - 1] + (tt - x[jj]) * q[ir]
                    jj -= 1
                    ir -= 1
            lk1i = lk1 + i
            j1 = max(1, lk1i)
            j2 = min(ell, nki)
            if j1 <= j2:
                for _ in range(j1, j2 + 1):
                    xjki = x[jj + ki]
                    z = q[ir]
                    q[ir] = z + (xjki - tt) * (q[ir - 1] - z) / (xjki - x[jj])
                    ir -= 1
                    jj -= 1
            if lk1i <= 0:
                jj = ki
                for _ in range(1, 1 - lk1i + 1):
                    q[ir] = q[ir] + (x[jj] - tt) * q[ir - 1]
                    jj -= 1
                    ir -= 1
    z = q[k]
    if ider > 0:
        for j in range(k, m2m1 + 1):
            z = z * j
    return z


def _natural_cubic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The natural cubic spline through ``(x_i, y_i)`` (``x`` ``(n,)`` increasing, ``y`` ``(n, k)``,
    ``n >= 4``): returns ``(y, M)`` with ``M`` ``(n, k)`` the second derivatives at the knots (zero
    at both ends), from the symmetric, diagonally dominant tridiagonal system
    ``h_{i-1} M_{i-1} + 2 (h_{i-1} + h_i) M_i + h_i M_{i+1} = 6 (s_i - s_{i-1})`` with ``s_i`` the
    slope of interval ``i``, solved by elimination (Thomas) over all columns at once."""
    h = np.diff(x)
    slope = np.diff(y, axis=0) / h[:, None]
    n = x.shape[0]
    rhs = 6.0 * np.diff(slope, axis=0)  # (n-2, k): rows 1..n-2
    diag = 2.0 * (h[:-1] + h[1:])
    off = h[1:-1]  # coupling of rows i and i+1
    second = np.zeros_like(y)
    d = diag.copy()
    r = rhs.copy()
    for i in range(1, n - 2):
        w = off[i - 1] / d[i - 1]
        d[i] -= w * off[i - 1]
        r[i] -= w * r[i - 1]
    second[n - 2] = r[-1] / d[-1]
    for i in range(n - 4, -1, -1):
        second[i + 1] = (r[i] - off[i] * second[i + 2]) / d[i]
    return y.copy(), second


def _natural_cubic_at(x: np.ndarray, fit: tuple[np.ndarray, np.ndarray], t: np.ndarray, derivative: int) -> np.ndarray:
    """`_natural_cubic`'s spline (or its ``derivative``-th derivative) at the times ``t`` ``(m,)``:
    ``(m, k)``. Beyond the end knots the natural spline continues as the straight line of its end
    value and slope (GCVSPL's ``splder`` for degree 3)."""
    y, second = fit
    n = x.shape[0]
    i = np.clip(np.searchsorted(x, t, side="right") - 1, 0, n - 2)
    h = (x[i + 1] - x[i])[:, None]
    s = (np.clip(t, x[0], x[-1]) - x[i])[:, None]
    b = (y[i + 1] - y[i]) / h - h * (2.0 * second[i] + second[i + 1]) / 6.0
    c = 0.5 * second[i]
    d = (second[i + 1] - second[i]) / (6.0 * h)
    if derivative == 0:
        out = y[i] + s * (b + s * (c + s * d))
    elif derivative == 1:
        out = b + s * (2.0 * c + 3.0 * s * d)
    elif derivative == 2:
        out = 2.0 * c + 6.0 * s * d
    elif derivative == 3:
        out = np.broadcast_to(6.0 * d, b.shape).copy()
    else:
        out = np.zeros_like(b)
    outside = (t < x[0]) | (t > x[-1])
    if np.any(outside) and derivative != 1:
        # ``s`` is clipped, so ``out`` holds the end knot's value (or slope, unchanged here);
        # beyond it the value continues along the end slope and higher derivatives vanish
        if derivative == 0:
            beyond = (t - np.clip(t, x[0], x[-1]))[:, None]
            line = out + beyond * (b + s * (2.0 * c + 3.0 * s * d))
        else:
            line = np.zeros_like(b)
        out = np.where(outside[:, None], line, out)
    return out


class GCVSpline:
    """Natural smoothing splines of odd degree through samples ``(x_i, y_i)``, one per column,
    fitted and evaluated exactly as OpenSim's ``GCVSpline`` (Woltring's GCVSPL, mode 3).

    ``GCVSpline(x, y, degree=5, error_variance=0.0)``:

    - ``x``: ``(n,)`` strictly increasing sample abscissae (for coordinates: time in s).
    - ``y``: ``(n,)`` or ``(n, k)`` samples (one spline per column, each fitted on its own as
      OpenSim's ``GCVSplineSet`` does); ``n >= degree + 1``.
    - ``degree``: odd, 1–7 (OpenSim: 5, a quintic). ``error_variance``: the variance of the
      noise in ``y`` (OpenSim's tools use 0: the smoothing parameter is driven to GCVSPL's lower
      clamp and the spline interpolates the samples to ~1e-15 relative).

    ``spline(t, derivative=0)`` evaluates the value (``derivative=0``) or a derivative at the
    times ``t`` (scalar or ``(m,)``): shape ``t.shape`` for a 1-D ``y``, ``t.shape + (k,)``
    otherwise, in ``y``'s unit per ``x``'s unit to the ``derivative``-th power. Outside
    ``[x[0], x[-1]]`` the natural spline continues as a polynomial of degree ``(degree-1)/2``.
    Derivatives of order ``degree + 1`` and above are zero.

    Fitting runs in numpy/Python (outside jit); evaluation too. Immutable after construction.

    ``exact=False`` (degree 3, error variance 0 only) fits the interpolating natural cubic spline
    directly (its second derivatives from the tridiagonal system, `_natural_cubic`) instead of the
    port: the same spline to rounding (tests/io/test_processing.py checks it against the port and
    against scipy's ``make_interp_spline``), and much faster — the port is slow on the thousands of
    rows of a force-plate file, which is what it is for (benchmarks/README.md, "Measurements behind
    design choices"). ``coefficients`` is then unavailable.
    """

    __slots__ = ("_x", "_coefficients", "_half_order", "_scalar", "_cubic")

    def __init__(self, x, y, degree: int = 5, error_variance: float = 0.0, *, exact: bool = True):
        xs = np.asarray(x, dtype=np.float64)
        ys = np.asarray(y, dtype=np.float64)
        if (
            isinstance(degree, bool)
            or not isinstance(degree, (int, np.integer))
            or degree < 1
            or degree > 7
            or degree % 2 == 0
        ):
            raise ValueError(f"degree must be an odd integer from 1 to 7, got {degree!r}")
        variance = float(error_variance)
        if not (math.isfinite(variance) and variance >= 0):
            raise ValueError(f"error_variance must be finite and >= 0, got {error_variance!r}")
        if xs.ndim != 1:
            raise ValueError(f"x must be a vector, got shape {xs.shape}")
        scalar = ys.ndim == 1
        ys2 = ys[:, None] if scalar else ys
        if ys2.ndim != 2 or ys2.shape[0] != xs.shape[0]:
            raise ValueError(f"y has shape {ys.shape}, expected ({xs.shape[0]},) or ({xs.shape[0]}, k)")
        m = (degree + 1) // 2
        n = xs.shape[0]
        if n < 2 * m:
            raise ValueError(f"a degree-{degree} spline needs at least {2 * m} samples, got {n}")
        if not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys2))):
            raise ValueError("x and y must be finite (they contain NaN or inf)")
        steps = np.diff(xs)
        if np.any(steps <= 0):
            i = int(np.argmax(steps <= 0))
            raise ValueError(f"x must be strictly increasing: x[{i + 1}] = {xs[i + 1]!r} <= x[{i}] = {xs[i]!r}")
        cubic = None
        if exact:
            coefficients = np.zeros((n + 1, ys2.shape[1]))
            coefficients[1:] = _gcvspl([0.0] + xs.tolist(), ys2, m, variance)
            coefficients.flags.writeable = False
        elif variance != 0.0:
            raise ValueError("exact=False fits the interpolating spline: error_variance must be 0")
        elif degree != 3:
            raise ValueError(f"exact=False fits the natural cubic spline: degree must be 3, got {degree}")
        else:
            cubic = _natural_cubic(xs, ys2)
            coefficients = np.zeros((0, ys2.shape[1]))
        xs = xs.copy()
        xs.flags.writeable = False
        object.__setattr__(self, "_x", xs)
        object.__setattr__(self, "_coefficients", coefficients)
        object.__setattr__(self, "_half_order", m)
        object.__setattr__(self, "_scalar", scalar)
        object.__setattr__(self, "_cubic", cubic)

    def __setattr__(self, name, value):
        raise AttributeError("GCVSpline is immutable")

    @property
    def degree(self) -> int:
        """The spline degree ``2m - 1``."""
        return 2 * self._half_order - 1

    @property
    def x(self) -> np.ndarray:
        """``(n,)`` the knots (the sample abscissae), read-only."""
        return self._x

    @property
    def coefficients(self) -> np.ndarray:
        """``(n, k)`` GCVSPL's spline coefficients (OpenSim's ``getCoefficients``), read-only."""
        if self._cubic is not None:
            raise ValueError("a GCVSpline fitted with exact=False has no GCVSPL coefficients")
        return self._coefficients[1:]

    def __call__(self, t, derivative: int = 0) -> np.ndarray:
        if isinstance(derivative, bool) or not isinstance(derivative, (int, np.integer)) or derivative < 0:
            raise ValueError(f"derivative must be an integer >= 0, got {derivative!r}")
        ts = np.asarray(t, dtype=np.float64)
        if not np.all(np.isfinite(ts)):
            raise ValueError("t must be finite (contains NaN or inf)")
        if self._cubic is not None:
            out = _natural_cubic_at(self._x, self._cubic, ts.reshape(-1), int(derivative))
            out = out.reshape(ts.shape + (self._coefficients.shape[1],))
            return out[..., 0] if self._scalar else out
        flat = ts.reshape(-1)
        x1 = [0.0] + self._x.tolist()
        n = self._x.shape[0]
        span = x1[n] - x1[1]
        out = np.empty((flat.shape[0], self._coefficients.shape[1]))
        for i, ti in enumerate(flat.tolist()):
            # Simbody's first guess of the interval (GCVSPLUtil::splder)
            guess = int(math.ceil(n * (ti - x1[1]) / span))
            out[i] = _splder(int(derivative), self._half_order, n, ti, x1, self._coefficients, guess)
        out = out.reshape(ts.shape + (self._coefficients.shape[1],))
        return out[..., 0] if self._scalar else out

    def __repr__(self) -> str:
        k = self._coefficients.shape[1]
        return (
            f"GCVSpline(degree={self.degree}, samples={self._x.shape[0]}, columns={k}, "
            f"x=[{self._x[0]:g}, {self._x[-1]:g}])"
        )
