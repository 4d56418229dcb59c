"""OpenSim's coordinate processing: the GCVSPL port against closed forms, scipy's natural quintic
interpolant and OpenSim's own GCVSpline (bit for bit); the IIR filter against scipy's Butterworth
design and a scipy lfilter run with OpenSim's start-up; padding, resampling and the whole
pipeline against OpenSim's Storage (bit for bit where OpenSim is installed)."""

from pathlib import Path

import numpy as np
import pytest
from scipy import signal
from scipy.interpolate import make_interp_spline

from jaxbio.tools import GCVSpline, butterworth_coefficients, lowpass_iir, process_coordinates
from jaxbio.io import Table, read_storage
from jaxbio.tools._processing import _pad, _resample

DATA = Path(__file__).parent / "data" / "arm26_id"
MOT = DATA / "arm26_InverseKinematics.mot"
NAMES = ["r_shoulder_elev", "r_elbow_flex"]


def _samples(n=60, seed=0):
    """Non-uniform times and 4 columns of different shapes and scales (their smoothing-parameter
    searches take different paths: 52 to 68 trials)."""
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.uniform(0.005, 0.015, n))
    y = np.stack(
        [
            np.sin(7 * x) + 0.01 * rng.standard_normal(n),
            np.exp(x) * np.cos(3 * x),
            1e-3 * (x**2 + 0.01 * rng.standard_normal(n)),
            300.0 + 1e3 * np.sin(x),
        ],
        axis=1,
    )
    return x, y


# ---- GCVSpline ------------------------------------------------------------------------------


def test_spline_reproduces_a_quadratic():
    """A quadratic has s''' = s'''' = 0: it is its own natural quintic interpolant."""
    x = np.linspace(-1.0, 2.0, 13) ** 3
    s = GCVSpline(x, 3.0 * x**2 - x + 0.5)
    t = np.linspace(-2.0, 9.0, 50)  # inside and outside the knots (the natural extension)
    np.testing.assert_allclose(s(t), 3.0 * t**2 - t + 0.5, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s(t, 1), 6.0 * t - 1.0, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(s(t, 2), 6.0, rtol=1e-9)
    np.testing.assert_allclose(s(t, 6), 0.0)


def test_spline_is_the_natural_quintic_interpolant():
    """Error variance 0 drives p to GCVSPL's clamp (or to rounding noise): the spline
    interpolates, with third and fourth derivatives 0 at the ends, i.e. scipy's quintic with
    those end conditions (scipy's bc_type="natural" is refused for k = 5)."""
    x, y = _samples()
    s = GCVSpline(x, y)
    assert np.all(np.abs(s(x) - y) <= 1e-14 * np.abs(y).max(axis=0))
    ends = x[[0, -1]]
    scale = np.abs(s(x, 4)).max()
    assert np.abs(s(ends, 3)).max() < 1e-9 * scale and np.abs(s(ends, 4)).max() < 1e-9 * scale
    t = np.linspace(x[0], x[-1], 301)
    for j in range(4):
        ref = make_interp_spline(x, y[:, j], k=5, bc_type=([(3, 0.0), (4, 0.0)], [(3, 0.0), (4, 0.0)]))
        for d, tol in enumerate((1e-13, 1e-11, 1e-9, 1e-7)):  # rounding grows as h^-d
            np.testing.assert_allclose(s(t, d)[:, j], ref(t, d), rtol=0, atol=tol * np.abs(ref(t, d)).max())


@pytest.mark.parametrize("degree, variance", [(5, 0.0), (5, 1e-4), (3, 0.0), (1, 0.0), (7, 1e-3)])
def test_spline_equals_opensim(degree, variance):
    """Coefficients, values and derivatives bit for bit equal to OpenSim's GCVSplineSet (which
    fits with Simbody's gcvspl); variance > 0 runs GCVSPL's golden-section search."""
    opensim = pytest.importorskip("opensim")
    x, y = _samples(40, seed=degree)
    ours = GCVSpline(x, y, degree=degree, error_variance=variance)
    table = opensim.TimeSeriesTable()
    labels = opensim.StdVectorString(["a", "b", "c", "d"])
    table.setColumnLabels(labels)
    for xi, row in zip(x.tolist(), y.tolist()):
        table.appendRow(xi, opensim.RowVector(row))
    theirs = opensim.GCVSplineSet(table, labels, degree, variance)
    t = np.concatenate([x[::7], np.linspace(x[0], x[-1], 11)])
    for j in range(4):
        spline = opensim.GCVSpline.safeDownCast(theirs.get(j))
        for d in range(3):
            ref = [
                spline.calcValue(opensim.Vector(1, ti))
                if d == 0
                else spline.calcDerivative(opensim.StdVectorInt([0] * d), opensim.Vector(1, ti))
                for ti in t.tolist()
            ]
            np.testing.assert_array_equal(ours(t, d)[:, j], ref)
        coefficients = spline.getCoefficients()
        np.testing.assert_array_equal(ours.coefficients[:, j], [coefficients.get(i) for i in range(len(x))])


@pytest.mark.parametrize("seed", range(4))
def test_search_ahead_equals_the_rounds_bit_for_bit(seed):
    """The smoothing-parameter searches with every halving and doubling trial computed ahead, side
    by side (`_gcvspl_interpolating`) give the coefficients of the round-by-round search bit for
    bit, for every degree, smooth and rough data, small and large values."""
    from jaxbio.tools._gcvspl import _gcvspl

    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 120))
    x = [0.0] + np.sort(rng.uniform(0.0, 3.0, n)).tolist()
    y = np.cumsum(rng.normal(size=(n, int(rng.integers(1, 7)))), axis=0) * 10.0 ** rng.uniform(-4, 4)
    if seed % 2:
        y = y + rng.normal(size=y.shape) * 1e-3 * np.abs(y).max()  # rough
    for m in (1, 2, 3, 4):
        np.testing.assert_array_equal(_gcvspl(x, y, m, 0.0), _gcvspl(x, y, m, 0.0, ahead=False))


@pytest.mark.parametrize(
    "name, rows",
    [
        ("subject01/subject01_walk1_ik.mot", slice(None)),
        ("subject01/subject01_walk1_grf.mot", slice(2000, 2300)),
        ("arm26_id/arm26_InverseKinematics.mot", slice(None)),
        ("arm26_id/std_Thelen2003Muscle_arm26_StaticOptimization_force.sto", slice(None)),
    ],
)
def test_golden_section_ahead_equals_the_rounds_bit_for_bit(name, rows):
    """OpenSim's own motion files take the search into its golden-section phase (the criterion
    stops falling in rounding noise), whose rounds `_gcvspl_interpolating` computes several at a
    time: the coefficients equal the round-by-round search bit for bit, and the phase is reached."""
    from jaxbio.tools import _gcvspl

    table = read_storage(DATA.parent / name)
    x = [0.0, *table.time[rows].tolist()]
    y = table.data[rows]
    reached = []
    original = _gcvspl._golden_ahead

    def spy(*args):
        reached.append(args)
        return original(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_gcvspl, "_golden_ahead", spy)
        fast = _gcvspl._gcvspl(x, y, 3, 0.0)
    assert reached
    np.testing.assert_array_equal(fast, _gcvspl._gcvspl(x, y, 3, 0.0, ahead=False))


def test_natural_cubic_equals_scipy_and_the_port():
    """``exact=False`` (the external loads' spline): scipy's natural cubic interpolant inside the
    knots for the value and three derivatives, GCVSPL's port everywhere (its straight-line ends
    outside), and zero above the third derivative; only degree 3 and error variance 0."""
    x, y = _samples(60)
    fast = GCVSpline(x, y, degree=3, exact=False)
    natural = [(2, np.zeros(y.shape[1]))]
    scipy_spline = make_interp_spline(x, y, k=3, bc_type=(natural, natural))
    inside = np.linspace(x[0], x[-1], 301)
    outside = np.concatenate([x[0] - np.array([0.3, 0.01]), x[-1] + np.array([0.01, 0.3])])
    port = GCVSpline(x, y, degree=3)
    both = np.concatenate([inside, outside])
    # relative to each column's largest value; the noisy columns' second and third derivatives are
    # ill-conditioned (the port and scipy differ by 7e-11 there)
    for nu, tol in enumerate([1e-14, 1e-12, 1e-10, 1e-10]):
        scale = np.max(np.abs(scipy_spline(inside, nu=nu)), axis=0)
        np.testing.assert_allclose(fast(inside, nu) / scale, scipy_spline(inside, nu=nu) / scale, rtol=0, atol=tol)
        if nu < 3:  # the port takes the third derivative at the end knots from the linear end
            np.testing.assert_allclose(fast(both, nu) / scale, port(both, nu) / scale, rtol=0, atol=max(tol, 1e-13))
    left = fast(x[0], 0) + (outside[:2, None] - x[0]) * fast(x[0], 1)
    np.testing.assert_allclose(fast(outside[:2]), left, rtol=1e-13)
    np.testing.assert_array_equal(fast(outside, 2), np.zeros((4, y.shape[1])))
    np.testing.assert_array_equal(fast(inside, 4), np.zeros((301, y.shape[1])))
    assert fast(x[3], 0).shape == (y.shape[1],) and GCVSpline(x, y[:, 0], degree=3, exact=False)(x).shape == (60,)
    with pytest.raises(ValueError, match="degree must be 3"):
        GCVSpline(x, y, degree=5, exact=False)
    with pytest.raises(ValueError, match="error_variance must be 0"):
        GCVSpline(x, y, degree=3, error_variance=1e-3, exact=False)


def test_spline_shapes_and_errors():
    x, y = _samples(10)
    s = GCVSpline(x, y[:, 0])
    assert s(0.05).shape == () and s(x).shape == (10,) and s(x.reshape(2, 5), 1).shape == (2, 5)
    assert GCVSpline(x, y)(x).shape == (10, 4) and s.degree == 5 and s.coefficients.shape == (10, 1)
    with pytest.raises(ValueError, match="at least 6 samples"):
        GCVSpline(x[:5], y[:5])
    with pytest.raises(ValueError, match="strictly increasing"):
        GCVSpline(x[::-1], y)
    with pytest.raises(ValueError, match="odd integer"):
        GCVSpline(x, y, degree=4)
    with pytest.raises(ValueError, match="finite"):
        GCVSpline(x, np.where(x > 0.05, np.nan, 1.0))
    with pytest.raises(ValueError, match="derivative"):
        s(x, -1)
    with pytest.raises(AttributeError):
        s._x = x


# ---- filter, pad, resample --------------------------------------------------------------------


@pytest.mark.parametrize("dt, fc", [(1 / 120, 6.0), (0.01, 20.0), (0.001, 3.0)])
def test_butterworth_is_scipys_design(dt, fc):
    a, b = butterworth_coefficients(dt, fc)
    num, den = signal.butter(3, fc, fs=1 / dt)
    np.testing.assert_allclose(a, num, rtol=1e-12)
    np.testing.assert_allclose(b, den, rtol=1e-12, atol=1e-15)


def test_lowpass_start_up_rule():
    """Each pass copies the first three samples and recurses from the fourth: the same result as
    scipy's lfilter started with lfiltic on those three samples (to rounding)."""
    rng = np.random.default_rng(3)
    x = np.cumsum(rng.standard_normal((200, 3)), axis=0)
    dt, fc = 0.01, 6.0
    a, b = butterworth_coefficients(dt, fc)

    def one_pass(s):
        out = s.copy()
        for j in range(s.shape[1]):
            zi = signal.lfiltic(a, b, y=s[2::-1, j], x=s[2::-1, j])
            out[3:, j] = signal.lfilter(a, b, s[3:, j], zi=zi)[0]
        return out

    expected = one_pass(one_pass(x)[::-1])[::-1]
    np.testing.assert_allclose(lowpass_iir(x, dt, fc), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(lowpass_iir(x[:, 0], dt, fc), lowpass_iir(x, dt, fc)[:, 0])
    # the first and last samples: unfiltered in the backward / forward pass respectively
    assert not np.allclose(signal.filtfilt(*signal.butter(3, fc, fs=1 / dt), x, axis=0), expected)


def test_lowpass_errors():
    x = np.zeros(10)
    with pytest.raises(ValueError, match="Nyquist"):
        lowpass_iir(x, 0.01, 50.0)
    with pytest.raises(ValueError, match="cutoff_hz must be positive"):
        lowpass_iir(x, 0.01, 0.0)
    with pytest.raises(ValueError, match="n >= 4"):
        lowpass_iir(x[:3], 0.01, 5.0)


def test_pad_reflects_and_negates():
    t = np.array([0.0, 1.0, 3.0, 4.0])
    tp, yp = _pad(t, np.array([[1.0], [2.0], [5.0], [4.0]]), 2)
    np.testing.assert_array_equal(tp, [-3.0, -1.0, 0.0, 1.0, 3.0, 4.0, 5.0, 7.0])
    np.testing.assert_array_equal(yp[:, 0], [-3.0, 0.0, 1.0, 2.0, 5.0, 4.0, 3.0, 6.0])
    tp, _ = _pad(t, np.zeros((4, 1)), 5)  # longer than the signal: in steps, as Signal::Pad
    assert tp.shape == (14,) and np.all(np.diff(tp) > 0)


def _opensim_columns(opensim, storage, names):
    n = storage.getSize()
    time = opensim.ArrayDouble()
    storage.getTimeColumn(time)
    t = np.array([time.get(i) for i in range(n)])
    columns = []
    for name in names:
        col = opensim.ArrayDouble()
        storage.getDataColumn(name, col, float(t[0]))
        columns.append([col.get(i) for i in range(col.getSize())])
    return t, np.array(columns).T


def test_pad_and_resample_equal_opensim():
    opensim = pytest.importorskip("opensim")
    table = read_storage(MOT).select(NAMES)
    storage = opensim.Storage(str(MOT))
    storage.pad(storage.getSize() // 2)
    t, y = _opensim_columns(opensim, storage, NAMES)
    tp, yp = _pad(table.time, table.data, table.time.shape[0] // 2)
    np.testing.assert_array_equal(tp, t)
    np.testing.assert_array_equal(yp, y)
    dt = float(np.min(np.diff(tp)))
    storage.resample(dt, 5)
    t, y = _opensim_columns(opensim, storage, NAMES)
    tr, yr, _ = _resample(tp, yp, dt)
    np.testing.assert_array_equal(tr, t)
    np.testing.assert_array_equal(yr, y)


# ---- the pipeline -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def arm26():
    table = read_storage(MOT).select(NAMES)
    return table, process_coordinates(table, lowpass_hz=6.0, start=0.0, end=1.0, rotational=True)


def test_pipeline_frames(arm26):
    """121 frames from t = -2e-7 s (the last resampled sample at or before 0, the accumulated
    0.00833333 steps from -0.5), as in OpenSim's results."""
    table, p = arm26
    std = read_storage(DATA / "std_arm26_InverseDynamics.sto")
    assert p.time.shape == (121,) and p.q.shape == p.qd.shape == p.qdd.shape == (121, 2)
    np.testing.assert_allclose(p.time, std.time, rtol=0, atol=1e-18)
    assert p.labels == tuple(NAMES) and not p.filtered.in_degrees
    assert p.filtered.time.shape == (241,) and p.filtered.time[0] == -0.5
    np.testing.assert_array_equal(p.spline(p.time, 1), p.qd)
    # radians, filtered: close to the raw degrees at the samples
    raw = np.deg2rad(np.interp(p.time, table.time, table.data[:, 1]))
    assert np.abs(p.q[:, 1] - raw).max() < 0.02


def test_pipeline_equals_opensim(arm26):
    """Pad, lowpassIIR (with its resample), degrees → radians, GCVSplineSet(5): OpenSim 4.x's own
    calls, and the splines' values and derivatives at the frames, bit for bit."""
    opensim = pytest.importorskip("opensim")
    _, p = arm26
    storage = opensim.Storage(str(MOT))
    storage.pad(storage.getSize() // 2)
    storage.lowpassIIR(6.0)
    labels = storage.getColumnLabels()
    for name in NAMES:  # SimbodyEngine::convertDegreesToRadians multiplies the rotational columns
        storage.multiplyColumn(labels.findIndex(name) - 1, 1.745329251994329576923690768488612713e-2)
    t, y = _opensim_columns(opensim, storage, NAMES)
    np.testing.assert_array_equal(p.filtered.time, t)
    np.testing.assert_array_equal(p.filtered.data, y)
    splines = opensim.GCVSplineSet(5, storage)
    for j, name in enumerate(NAMES):
        spline = splines.get(name)
        for d, ours in enumerate((p.q, p.qd, p.qdd)):
            ref = [
                spline.calcValue(opensim.Vector(1, ti))
                if d == 0
                else spline.calcDerivative(opensim.StdVectorInt([0] * d), opensim.Vector(1, ti))
                for ti in p.time.tolist()
            ]
            np.testing.assert_array_equal(ours[:, j], ref)


def test_pipeline_without_filter():
    """No cutoff: no padding, no resampling; the frames are the file's samples in the range."""
    table = read_storage(MOT).select(NAMES)
    p = process_coordinates(table, start=0.1, end=0.5, rotational=["r_elbow_flex"])
    in_range = (table.time >= 0.1 - 1e-12) & (table.time <= 0.5)
    first = np.flatnonzero(table.time <= 0.1)[-1]
    np.testing.assert_array_equal(p.time, table.time[first : np.flatnonzero(in_range)[-1] + 1])
    i = np.searchsorted(table.time, p.time)
    np.testing.assert_allclose(p.q[:, 0], table.data[i, 0], atol=1e-12)  # shoulder left in degrees
    np.testing.assert_allclose(p.q[:, 1], np.deg2rad(table.data[i, 1]), atol=1e-12)
    whole = process_coordinates(table, start=-np.inf, end=np.inf, rotational=True)
    np.testing.assert_array_equal(whole.time, table.time)


def test_pipeline_errors():
    table = read_storage(MOT).select(NAMES)
    with pytest.raises(ValueError, match="is in degrees.*rotational=True"):
        process_coordinates(table)
    with pytest.raises(ValueError, match=r"no column 'r_elbow' \(did you mean 'r_elbow_flex'\?\)"):
        process_coordinates(table, rotational=["r_elbow"])
    with pytest.raises(ValueError, match="Nyquist"):
        process_coordinates(table, lowpass_hz=61.0, rotational=True)
    with pytest.raises(ValueError, match="lowpass_hz must be positive"):
        process_coordinates(table, lowpass_hz=-6.0, rotational=True)
    with pytest.raises(ValueError, match="start = 0.5 s is after end = 0.2 s"):
        process_coordinates(table, start=0.5, end=0.2, rotational=True)
    with pytest.raises(
        ValueError, match=r"the time range \[2.0, 3.0\] s does not overlap the samples \(0.0 to 1.0 s\)"
    ):
        process_coordinates(table, start=2.0, end=3.0, rotational=True)
    with pytest.raises(ValueError, match="at least 6"):
        process_coordinates(Table(time=np.arange(5.0), labels=("a",), data=np.zeros((5, 1))))
    with pytest.raises(ValueError, match="start must be a time"):
        process_coordinates(table, start="zero", rotational=True)
