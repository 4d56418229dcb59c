"""OpenSim's wrap surfaces (jaxbio.muscles.wrapping) and wrapped muscle paths (geometry).

Independent references:

- live OpenSim 4.6 (the ``opensim`` Python bindings; tests skip without them): one segment
  between two free points over each surface, every quadrant and ellipsoid method, compared
  with ``GeometryPath.getLength``; small models (one body on a pin joint, PathActuators each
  with wrap objects on the ground or on the body) compared in length and moment arm
  (``computeMomentArm``, and central differences of OpenSim's own length); arm26 from the
  shared ``arm26.osim`` (a patched copy: OpenSim 4.6 refuses that 3.0-era file's Thelen
  ``minimum_activation`` 0 and ``min_control`` 1e-5).
- closed forms: a path in a plane normal to a cylinder's axis, through a sphere's centre and in
  an ellipsoid's principal plane (tangent lengths plus the arc, or OpenSim's polyline on it).
- central finite differences of the length, float32 against float64, finite gradients at
  degenerate inputs.

Measured agreement with OpenSim (float64; the assertions are looser than these; one larger run,
1000 random segments per quadrant, all quadrants): cylinder 5.6e-15 m (1725 of 5000 segments
wrapping), with OpenSim's multi-object slides 8e-13 (relative, on paths up to metres long),
sphere 2.5e-14 m, ellipsoid hybrid 1.5e-14 m and midpoint 3.2e-15 m on every segment OpenSim
returns a number for (≈0.2 % NaN there, finite here), axial 1e-12 m on 99.6 %: 25 segments at
≤ 1e-7 m and 2 on the other tangent point (0.27 m) — OpenSim's tangent point is a
Levenberg–Marquardt iterate stopped at a squared residual < 1e-8, emulated step for step, whose
stopping decision can flip with rounding (XLA's fused multiply-adds). Paths: pin-joint models
and all six arm26 muscles ≤ 1e-12 m.
"""

from __future__ import annotations

import re
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import quaternion as quat
from jaxbio.muscles import geometry, sets, wrapping
from jaxbio.muscles.geometry import MusclePaths
from jaxbio.spatial import norm
from jaxbio.tree import SegmentTree

#: the project's shared copy of OpenSim's arm26 (not in the package; the test skips without it)
# OpenSim 4.x arm26 as shipped with its example (a copy of ../shared/data/opensim/arm26/arm26.osim).
ARM26_OSIM = Path(__file__).resolve().parents[1] / "io" / "data" / "arm26_id" / "arm26.osim"


@pytest.fixture(scope="module")
def osim():
    opensim = pytest.importorskip("opensim")
    opensim.Logger.removeFileSink()  # no opensim.log in the working directory
    return opensim


# ---- one segment over each surface: live OpenSim ----------------------------------------------------

_DIMS = {"cylinder": (0.05, 0.3, 0.0), "sphere": (0.05, 0.0, 0.0), "ellipsoid": (0.06, 0.04, 0.05)}
_QUADRANTS = {
    "cylinder": ("all", "x", "-x", "y", "-y"),
    "sphere": ("all", "x", "-y", "z", "-z"),
    "ellipsoid": ("all", "x", "-x", "y", "-y", "z", "-z"),
}


def _free_points_model(osim, kind, quadrant, method, single):
    """Two free bodies carrying the path's two points, the wrap object on the ground (identity
    pose); with ``single`` False a second, far away sphere makes OpenSim treat the path as
    multi-wrap (no ``singleWrap`` shortcut for the cylinder)."""
    m = osim.Model()
    bodies = []
    for nm in "AB":
        b = osim.Body(nm, 1.0, osim.Vec3(0), osim.Inertia(0.1, 0.1, 0.1))
        m.addBody(b)
        m.addJoint(osim.FreeJoint("j" + nm, m.getGround(), b))
        bodies.append(b)
    d = _DIMS[kind]
    if kind == "cylinder":
        w = osim.WrapCylinder()
        w.set_radius(d[0])
        w.set_length(d[1])
    elif kind == "sphere":
        w = osim.WrapSphere()
        w.set_radius(d[0])
    else:
        w = osim.WrapEllipsoid()
        w.set_dimensions(osim.Vec3(*d))
    w.setName("w")
    w.set_quadrant(quadrant)
    m.getGround().addWrapObject(w)
    act = osim.PathActuator()
    act.setName("a")
    act.addNewPathPoint("p1", bodies[0], osim.Vec3(0))
    act.addNewPathPoint("p2", bodies[1], osim.Vec3(0))
    m.addForce(act)
    act.updGeometryPath().addPathWrap(w)
    act.updGeometryPath().updWrapSet().get(0).set_method(method)
    if not single:
        far = osim.WrapSphere()
        far.setName("far")
        far.set_radius(0.001)
        far.set_translation(osim.Vec3(50, 50, 50))
        m.getGround().addWrapObject(far)
        act.updGeometryPath().addPathWrap(far)
        act.updGeometryPath().updWrapSet().get(1).setName("pathwrap_far")
    return m, act, m.initSystem()


def _osim_segment_lengths(osim, kind, quadrant, method, single, P, S):
    m, act, s = _free_points_model(osim, kind, quadrant, method, single)
    cs = m.getCoordinateSet()
    out = []
    for p, q in zip(P, S):
        for nm, pt in (("A", p), ("B", q)):
            for k in range(3):  # FreeJoint coordinates 3..5 are the translations
                cs.get(f"j{nm}_coord_{3 + k}").setValue(s, float(pt[k]), False)
        m.realizePosition(s)
        out.append(act.getGeometryPath().getLength(s))
    return np.array(out)


def _wrap(kind, P, S, quadrant="all", method="hybrid", single=True, dims=None):
    """Segments ``P[i] → S[i]`` over one surface: ``(length, r1, r2, wraps, arc)`` as numpy, through
    one jitted, vmapped kernel per surface kind (quadrant, method and dimensions are traced, so
    every test of a kind shares one compilation)."""
    axis, sign = wrapping.quadrant_axis_sign(quadrant)
    P, S = np.atleast_2d(P), np.atleast_2d(S)
    n = len(P)
    m = -(-n // _BATCH) * _BATCH  # padded to whole batches: one compiled shape
    P, S = (np.concatenate([x, np.repeat(x[-1:], m - n, axis=0)]) for x in (P, S))
    dims = np.broadcast_to(_DIMS[kind] if dims is None else dims, (m, 3))
    out = _wrap_fn(kind)(
        jnp.asarray(P),
        jnp.asarray(S),
        jnp.asarray(dims),
        jnp.full(m, axis),
        jnp.full(m, sign),
        jnp.full(m, wrapping.METHODS.index(method)),
        jnp.full(m, single),
    )
    return tuple(np.asarray(x)[:n] for x in out)


_FNS = {}
_BATCH = 150


def _one_segment(kind):
    """``(p, s, dims, axis, sign, method, single) -> (length, r1, r2, wraps, arc)`` of one kind."""
    kern = wrapping.segment_kernel(wrapping.KINDS.index(kind))

    def one(p, s, dims, axis, sign, method, single):
        _, wraps, r1, r2, arc = kern(p, s, dims, axis, sign, method, single)
        length = jnp.where(wraps, norm(r1 - p) + arc + norm(s - r2), norm(s - p))  # safe norms: finite gradients
        return length, r1, r2, wraps, arc

    return one


def _wrap_fn(kind):
    if kind not in _FNS:
        _FNS[kind] = jax.jit(jax.vmap(_one_segment(kind)))
    return _FNS[kind]


def _segment_lengths(kind, P, S, quadrant, method, single):
    return _wrap(kind, P, S, quadrant, method, single)[0]


def _random_segments(seed, n, kind):
    rng = np.random.default_rng(seed)
    P, S = rng.normal(size=(n, 3)) * 0.1, rng.normal(size=(n, 3)) * 0.1
    if kind == "cylinder":  # spread along the axis too, beyond the end caps
        P[:, 2] *= 2.0
        S[:, 2] *= 2.0
    return P, S


@pytest.mark.parametrize("kind,single", [("cylinder", True), ("cylinder", False), ("sphere", True)])
def test_cylinder_and_sphere_equal_opensim_on_random_segments(osim, kind, single):
    """Closed-form surfaces: every sampled segment (wrapping or not, every quadrant) within
    1e-12 m of OpenSim; the multi-wrap cylinder includes OpenSim's tangent-point slides, which
    sometimes run away along the axis to paths metres long (matched to 1e-12 relative)."""
    wrapped = 0
    for k, quadrant in enumerate(_QUADRANTS[kind]):
        P, S = _random_segments(10 * k + single, 150, kind)
        ref = _osim_segment_lengths(osim, kind, quadrant, "hybrid", single, P, S)
        got = _segment_lengths(kind, P, S, quadrant, "hybrid", single)
        straight = np.linalg.norm(S - P, axis=1)
        wrapped += np.sum(np.abs(ref - straight) > 1e-9)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12, err_msg=f"{kind} quadrant {quadrant}")
    assert wrapped > 60  # the samples do exercise the wrap


@pytest.mark.parametrize(
    "method", [m if m == "hybrid" else pytest.param(m, marks=pytest.mark.slow) for m in wrapping.METHODS]
)
def test_ellipsoid_equals_opensim_on_random_segments(osim, method):
    """OpenSim's iterative ellipsoid: ≥ 98 % of the sampled segments within 1e-12 m, all but
    0.5 % within 1e-7 m (the Levenberg–Marquardt stop; see the module docstring). Segments where
    OpenSim's polyline leaves the ellipsoid (its length is NaN, a long-way wrap forced by a
    quadrant) are counted, not compared: jaxbio stays finite there."""
    errs, nan = [], 0
    for k, quadrant in enumerate(_QUADRANTS["ellipsoid"]):
        P, S = _random_segments(100 + k, 150, "ellipsoid")
        ref = _osim_segment_lengths(osim, "ellipsoid", quadrant, method, True, P, S)
        got = _segment_lengths("ellipsoid", P, S, quadrant, method, True)
        assert np.all(np.isfinite(got))
        nan += np.sum(np.isnan(ref))
        errs.append(np.abs(got - ref)[~np.isnan(ref)])
    errs = np.concatenate(errs)
    assert np.mean(errs <= 1e-12) >= 0.98, np.sort(errs)[-10:]
    assert np.mean(errs > 1e-7) <= 0.005, np.sort(errs)[-10:]
    assert nan <= 0.02 * errs.size


# ---- closed forms --------------------------------------------------------------------------------


def _tangent_arc_2d(p, s, radius):
    """Planar path from ``p`` around a circle (centre 0) to ``s``, the short way: tangent
    lengths and the angle between the tangent points."""
    dp, ds = np.linalg.norm(p), np.linalg.norm(s)
    tp, ts = np.sqrt(dp**2 - radius**2), np.sqrt(ds**2 - radius**2)
    between = np.arccos(np.dot(p, s) / (dp * ds))
    theta = between - np.arccos(radius / dp) - np.arccos(radius / ds)
    return tp + ts + radius * theta, theta


def test_cylinder_sphere_closed_form_in_a_plane():
    """A path in a plane normal to the cylinder's axis (or through the sphere's centre) that
    crosses the surface: ``√(|P|²−R²) + √(|S|²−R²) + R θ``; symmetric end points give mirror
    tangent points. The same for OpenSim's multi-wrap cylinder (no slide is needed in a plane)."""
    R = 0.04
    P = np.array([(0.1, 0.03, 0.0), (0.07, -0.02, 0.0), (0.2, 0.01, 0.0)])
    S = np.array([(-0.12, 0.02, 0.0), (-0.05, 0.06, 0.0), (-0.2, 0.01, 0.0)])
    want, theta = np.transpose([_tangent_arc_2d(p, s, R) for p, s in zip(P, S)])
    up = np.array([0.0, 0.0, 0.01])
    for single in (True, False):
        length, r1, r2, wraps, arc = _wrap("cylinder", P + up, S + up, single=single, dims=(R, 0.1, 0.0))
        assert np.all(wraps)
        np.testing.assert_allclose(length, want, rtol=1e-13)
        np.testing.assert_allclose(arc, R * theta, rtol=1e-12)
        np.testing.assert_allclose(np.linalg.norm(r1[:, :2], axis=1), R, rtol=1e-13)
    length, r1, r2, wraps, _ = _wrap("sphere", P, S, dims=(R, 0.0, 0.0))
    np.testing.assert_allclose(length, want, rtol=1e-13)
    np.testing.assert_allclose(r1[2] * [-1, 1, 1], r2[2], atol=1e-15)  # symmetric end points
    # a segment that misses: the straight distance, r1 = P, r2 = S (the public function)
    miss = wrapping.wrap_sphere(np.array([0.1, 0.2, 0.0]), np.array([-0.1, 0.2, 0.0]), R)
    assert not bool(miss.wraps) and int(miss.status) == wrapping.NO_WRAP
    assert float(miss.length) == pytest.approx(0.2, abs=1e-15)
    np.testing.assert_array_equal(np.asarray(miss.r1), [0.1, 0.2, 0.0])


def _ellipse_polyline(p, s, a, b):
    """OpenSim's ellipsoid path in its principal plane z = 0, computed independently: tangent
    points from ``p`` and ``s`` to the ellipse (polar line ∩ ellipse, the pair facing each other),
    then ⌊|r1 r2| / 1 mm⌋ chords between rays from the centre at equal angles."""

    def tangents(q):
        # points (x, y) on the ellipse with q·(x/a², y/b²) = 1
        th = np.linspace(0, 2 * np.pi, 200001)
        f = q[0] * np.cos(th) / a + q[1] * np.sin(th) / b - 1.0
        roots = th[:-1][np.sign(f[:-1]) != np.sign(f[1:])]
        out = []
        for t0 in roots:
            for _ in range(50):  # Newton polish
                t0 -= (q[0] * np.cos(t0) / a + q[1] * np.sin(t0) / b - 1) / (
                    -q[0] * np.sin(t0) / a + q[1] * np.cos(t0) / b
                )
            out.append(np.array([a * np.cos(t0), b * np.sin(t0)]))
        return out

    best = None
    for r1 in tangents(p):
        for r2 in tangents(s):
            cand = np.linalg.norm(r1 - p) + np.linalg.norm(r2 - s) + np.linalg.norm(r1 - r2)
            if best is None or cand < best[0]:
                best = (cand, r1, r2)
    _, r1, r2 = best
    n = int(np.linalg.norm(r1 - r2) / 0.001)
    ang = np.arctan2(r1[1], r1[0]) + np.linspace(0, 1, n + 1) * np.angle(complex(*r2) / complex(*r1))
    rho = 1 / np.sqrt(np.cos(ang) ** 2 / a**2 + np.sin(ang) ** 2 / b**2)
    pts = np.stack([rho * np.cos(ang), rho * np.sin(ang)], 1)
    pts[0], pts[-1] = r1, r2
    return np.linalg.norm(r1 - p) + np.sum(np.linalg.norm(np.diff(pts, axis=0), axis=1)) + np.linalg.norm(s - r2)


@pytest.mark.parametrize(
    "method", [m if m == "hybrid" else pytest.param(m, marks=pytest.mark.slow) for m in wrapping.METHODS]
)
def test_ellipsoid_in_its_principal_plane(method):
    """Both points in the plane z = 0 (OpenSim's 2-d special cases of the closest-point solves):
    the wrapping plane is z = 0 and the length is the tangent pieces plus OpenSim's polyline on
    the ellipse, to 1e-9 m (the tangent iteration's tolerance)."""
    a, b = 0.06, 0.035
    P = np.array([(0.1, 0.02, 0.0), (0.09, -0.03, 0.0)])
    S = np.array([(-0.11, 0.01, 0.0), (-0.05, 0.06, 0.0)])
    length, r1, r2, wraps, _ = _wrap("ellipsoid", P, S, method=method, dims=(a, b, 0.05))
    assert np.all(wraps)
    assert np.all(np.abs(r1[:, 2]) < 1e-15) and np.all(np.abs(r2[:, 2]) < 1e-15)
    want = [_ellipse_polyline(p[:2], s[:2], a, b) for p, s in zip(P, S)]
    np.testing.assert_allclose(length, want, atol=1e-9)


def test_quadrant_strings():
    assert wrapping.quadrant_axis_sign("all") == (0, 0)
    assert wrapping.quadrant_axis_sign("Unassigned") == (0, 0)
    assert wrapping.quadrant_axis_sign("-y") == (1, -1)
    assert wrapping.quadrant_axis_sign("+X") == (0, 1)
    with pytest.raises(ValueError, match="quadrant 'w'"):
        wrapping.quadrant_axis_sign("w")
    with pytest.raises(ValueError, match="method 'geodesic'"):
        wrapping.wrap_ellipsoid(np.ones(3), -np.ones(3), np.ones(3), method="geodesic")


def test_body_fixed_xyz_equals_opensim_rotation(osim):
    angles = np.array([1.37532, -0.294612, 2.43596])
    R = osim.Rotation()
    R.setRotationToBodyFixedXYZ(osim.Vec3(*angles))
    ref = np.array([[R.get(i, j) for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(quat.to_matrix(quat.from_body_fixed_xyz(angles)), ref, atol=1e-15)


# ---- gradients --------------------------------------------------------------------------------------

_CASES = [
    ("cylinder", lambda p, s: wrapping.wrap_cylinder(p, s, 0.04, 0.3, quadrant="x").length),
    (
        "cylinder, several objects",
        lambda p, s: wrapping.wrap_cylinder(p, s, 0.04, 0.3, quadrant="-y", single=False).length,
    ),
    ("sphere", lambda p, s: wrapping.wrap_sphere(p, s, 0.04, quadrant="y").length),
    ("ellipsoid", lambda p, s: wrapping.wrap_ellipsoid(p, s, jnp.array([0.06, 0.04, 0.05])).length),
]
#: the ellipsoid's cases compile for seconds: run with -m slow
_PARAMS = [
    pytest.param(name, f, id=name, marks=[pytest.mark.slow] if name == "ellipsoid" else []) for name, f in _CASES
]
#: the sphere by default, the rest with -m slow (compilation)
_SPHERE = [p if p.id == "sphere" else pytest.param(*p.values, id=p.id, marks=[pytest.mark.slow]) for p in _PARAMS]


@pytest.mark.parametrize("name,f", _SPHERE)
def test_length_derivative_equals_central_differences(name, f):
    """jax.grad of the wrapped length, along random directions, equals central differences at
    wrapping configurations away from the wrap/no-wrap switch (float64). The ellipsoid's length
    is OpenSim's tangent-point iterate (a squared residual < 1e-8), its derivative that of the
    exact tangent point: they agree to the iteration's tolerance (relative 1e-4)."""
    rng = np.random.default_rng(3)
    grad = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))

    def jvp(p, s, dp, ds):
        length, (gp, gs) = grad(p, s)
        return length, jnp.dot(gp, dp) + jnp.dot(gs, ds)

    fj = jax.jit(f)
    checked = 0
    for _ in range(40):
        p = np.array([0.12, 0.02, 0.01]) + rng.normal(size=3) * 0.02
        s = np.array([-0.12, 0.03, -0.02]) + rng.normal(size=3) * 0.02
        dp, ds = rng.normal(size=3), rng.normal(size=3)
        length, slope = jvp(p, s, dp, ds)
        h = 1e-6
        fd = (float(fj(p + h * dp, s + h * ds)) - float(fj(p - h * dp, s - h * ds))) / (2 * h)
        if abs(float(length) - np.linalg.norm(s - p)) < 1e-6:
            continue  # not wrapping
        checked += 1
        rtol = 1e-4 if name == "ellipsoid" else 1e-6
        np.testing.assert_allclose(float(slope), fd, rtol=rtol, atol=1e-7)
    assert checked >= 20


@pytest.mark.slow
@pytest.mark.parametrize("kind", wrapping.KINDS)
def test_gradients_finite_everywhere(kind):
    """jax.grad is finite for every input: points inside the surface, on its axis or centre,
    segments that miss, coincident points; constrained (a quadrant) or not, and for the cylinder
    with OpenSim's multi-object slides."""
    pts = np.array(
        [
            [0.0, 0.0, 0.0],
            [0.0, 0.0, 0.1],
            [0.01, 0.0, 0.0],
            [0.2, 0.0, 0.0],
            [0.1, 0.1, 0.1],
            [-0.2, 0.01, 0.0],
            [0.0, 0.3, 0.0],
        ]
    )
    pairs = [(p, s) for p in pts for s in pts]
    P = jnp.asarray([p for p, _ in pairs])
    S = jnp.asarray([s for _, s in pairs])
    n = len(pairs)
    one = _one_segment(kind)
    grads = jax.jit(jax.vmap(jax.grad(lambda *a: one(*a)[0], argnums=(0, 1, 2))))
    for sign, single in ((0, True), (1, False)):
        args = (
            jnp.broadcast_to(jnp.asarray(_DIMS[kind]), (n, 3)),
            jnp.full(n, 1),
            jnp.full(n, sign),
            jnp.zeros(n, int),
            jnp.full(n, single),
        )
        gp, gs, gd = grads(P, S, *args)
        assert bool(jnp.all(jnp.isfinite(gp)) & jnp.all(jnp.isfinite(gs)) & jnp.all(jnp.isfinite(gd)))


@pytest.mark.slow
@pytest.mark.parametrize("name,f", _CASES, ids=[c[0] for c in _CASES])
def test_float32_agrees_with_float64(name, f):
    rng = np.random.default_rng(4)
    P = np.array([0.12, 0.02, 0.01]) + rng.normal(size=(30, 3)) * 0.03
    S = np.array([-0.12, 0.03, -0.02]) + rng.normal(size=(30, 3)) * 0.03
    fn = jax.jit(jax.vmap(f))
    l64 = np.asarray(fn(jnp.asarray(P), jnp.asarray(S)))
    l32 = np.asarray(fn(jnp.asarray(P, jnp.float32), jnp.asarray(S, jnp.float32)))
    assert l32.dtype == np.float32
    np.testing.assert_allclose(l32, l64, atol=2e-6)


# ---- paths on a model: a pin joint -------------------------------------------------------------------

#: (name, wrap object properties (OpenSim's), method, range, ground point, body point[, middle body point])
_PIN_WRAPS = {
    "cyl": dict(
        type="WrapCylinder",
        frame="ground",
        translation=(0.01, 0.0, 0.0),
        xyz_body_rotation=(0.1, -0.05, 0.2),
        radius=0.04,
        length=0.5,
        quadrant="all",
    ),
    "cyl_y": dict(
        type="WrapCylinder",
        frame="b",
        translation=(0.0, 0.02, 0.0),
        xyz_body_rotation=(0.0, 0.0, 0.3),
        radius=0.03,
        length=0.4,
        quadrant="-y",
    ),
    "sph": dict(type="WrapSphere", frame="ground", translation=(0.0, 0.01, 0.0), radius=0.05, quadrant="all"),
    "sph_x": dict(
        type="WrapSphere",
        frame="b",
        translation=(0.02, 0.0, 0.01),
        xyz_body_rotation=(0.4, 0.1, 0.0),
        radius=0.04,
        quadrant="x",
    ),
    "ell": dict(
        type="WrapEllipsoid",
        frame="ground",
        translation=(0.0, 0.0, 0.01),
        xyz_body_rotation=(0.2, 0.3, -0.1),
        dimensions=(0.06, 0.04, 0.05),
        quadrant="all",
    ),
    "ell_mid": dict(
        type="WrapEllipsoid", frame="b", translation=(0.01, 0.0, 0.0), dimensions=(0.05, 0.035, 0.04), quadrant="-x"
    ),
    "ell_ax": dict(type="WrapEllipsoid", frame="ground", dimensions=(0.05, 0.04, 0.045), quadrant="z"),
}
_PIN_MUSCLES = {
    "a_cyl": ([("ground", (0.3, 0.12, 0.03)), ("b", (0.25, -0.1, -0.02))], [("cyl", "hybrid", (-1, -1))]),
    "a_cyl_y": ([("ground", (0.28, -0.15, 0.0)), ("b", (0.26, 0.11, 0.02))], [("cyl_y", "hybrid", (-1, -1))]),
    "a_sph": ([("ground", (0.3, 0.1, 0.02)), ("b", (0.27, -0.12, -0.01))], [("sph", "hybrid", (-1, -1))]),
    "a_sph_x": ([("ground", (-0.05, 0.3, 0.01)), ("b", (0.25, 0.05, 0.0))], [("sph_x", "hybrid", (-1, -1))]),
    "a_ell": ([("ground", (0.3, 0.11, 0.03)), ("b", (0.26, -0.1, -0.01))], [("ell", "hybrid", (-1, -1))]),
    "a_ell_mid": ([("ground", (-0.3, 0.05, 0.0)), ("b", (0.25, -0.08, 0.02))], [("ell_mid", "midpoint", (-1, -1))]),
    "a_ell_ax": ([("ground", (0.27, 0.14, -0.02)), ("b", (0.28, -0.1, 0.03))], [("ell_ax", "axial", (-1, -1))]),
    # three points, two objects with ranges: OpenSim's multi-object passes (and its cache quirk)
    "a_multi": (
        [("ground", (0.3, 0.1, 0.02)), ("b", (0.08, -0.12, 0.0)), ("b", (0.25, -0.1, 0.01))],
        [("sph", "hybrid", (1, 2)), ("cyl", "hybrid", (-1, -1))],
    ),
}


def _pin_tree():
    return SegmentTree.from_dict(
        {
            "name": "pin",
            "gravity": [0, -9.81, 0],
            "segments": [
                {
                    "name": "b",
                    "parent": None,
                    "joint": {
                        "type": "revolute",
                        "axis": [0, 0, 1],
                        "origin": [0, 0.02, 0],
                        "orientation": [1, 0, 0, 0],
                    },
                    "mass": 1.0,
                    "com": [0.1, 0, 0],
                    "inertia": np.diag([0.01, 0.01, 0.01]).tolist(),
                }
            ],
        },
        dtype=jnp.float64,
    )


def _pin_paths(tree, muscles):
    objs = {o: _PIN_WRAPS[o] for m in muscles for o, *_ in _PIN_MUSCLES[m][1]}
    return MusclePaths.from_points(
        tree,
        {m: _PIN_MUSCLES[m][0] for m in muscles},
        wrap_objects=objs,
        path_wraps={
            m: [{"wrap_object": o, "method": me, "range": r} for o, me, r in _PIN_MUSCLES[m][1]] for m in muscles
        },
        dtype=jnp.float64,
    )


def _pin_osim(osim, muscles):
    m = osim.Model()
    body = osim.Body("b", 1.0, osim.Vec3(0.1, 0, 0), osim.Inertia(0.01, 0.01, 0.01))
    m.addBody(body)
    m.addJoint(
        osim.PinJoint("pin", m.getGround(), osim.Vec3(0, 0.02, 0), osim.Vec3(0), body, osim.Vec3(0), osim.Vec3(0))
    )
    frames = {"ground": m.getGround(), "b": body}
    made = {}
    for name in {o for mu in muscles for o, *_ in _PIN_MUSCLES[mu][1]}:
        spec = _PIN_WRAPS[name]
        w = getattr(osim, spec["type"])()
        w.setName(name)
        w.set_quadrant(spec["quadrant"])
        w.set_translation(osim.Vec3(*spec.get("translation", (0, 0, 0))))
        w.set_xyz_body_rotation(osim.Vec3(*spec.get("xyz_body_rotation", (0, 0, 0))))
        if spec["type"] == "WrapEllipsoid":
            w.set_dimensions(osim.Vec3(*spec["dimensions"]))
        else:
            w.set_radius(spec["radius"])
            if spec["type"] == "WrapCylinder":
                w.set_length(spec["length"])
        frames[spec["frame"]].addWrapObject(w)
        made[name] = w
    acts = []
    for mu in muscles:
        act = osim.PathActuator()
        act.setName(mu)
        for k, (frame, xyz) in enumerate(_PIN_MUSCLES[mu][0]):
            act.addNewPathPoint(f"{mu}-P{k + 1}", frames[frame], osim.Vec3(*xyz))
        m.addForce(act)
        for k, (obj, method, rng) in enumerate(_PIN_MUSCLES[mu][1]):
            act.updGeometryPath().addPathWrap(made[obj])
            pw = act.updGeometryPath().updWrapSet().get(k)
            pw.setName(f"pathwrap_{obj}")
            pw.set_method(method)
            pw.set_range(0, rng[0])
            pw.set_range(1, rng[1])
        acts.append(act)
    return m, acts, m.initSystem()


def _osim_lengths_and_arms(m, acts, s, qs):
    c = m.getCoordinateSet().get(0)
    L, R, FD = [], [], []
    h = 1e-6

    def lengths(q):
        c.setValue(s, float(q), False)
        m.realizePosition(s)
        return np.array([a.getGeometryPath().getLength(s) for a in acts])

    for q in qs:
        lp, lm = lengths(q + h), lengths(q - h)
        L.append(lengths(q))
        R.append([a.getGeometryPath().computeMomentArm(s, c) for a in acts])
        FD.append(-(lp - lm) / (2 * h))
    return np.array(L), np.array(R), np.array(FD)


def _compare_pin(osim, muscles, n=60):
    tree = _pin_tree()
    paths = _pin_paths(tree, muscles)
    m, acts, s = _pin_osim(osim, muscles)
    qs = np.linspace(-2.6, 2.6, n) + 0.013
    L, R, FD = _osim_lengths_and_arms(m, acts, s, qs)
    # on a 1-DOF model moment_arms is this one directional derivative (r = −∂l/∂q): length and
    # arm from one compiled jvp (the arm26 test calls moment_arms itself)
    assert tree.nq == 1
    both = jax.jit(lambda q: jax.jvp(lambda x: geometry.lengths(paths, tree, x), (q,), (jnp.ones(1),)))
    lj, rj = (np.stack(x) for x in zip(*[[np.asarray(v) for v in both(jnp.array([q]))] for q in qs]))
    rj = -rj
    pts = [np.asarray(geometry.path_points_world(paths, tree, jnp.array([q]))) for q in qs]
    straight = np.stack(
        [[np.sum(np.linalg.norm(np.diff(p[i, :c], axis=0), axis=1)) for i, c in enumerate(paths.counts)] for p in pts]
    )
    return L, R, FD, lj, rj, straight


@pytest.mark.parametrize(
    "muscles", [["a_sph_x"], pytest.param(["a_cyl", "a_cyl_y", "a_sph", "a_multi"], marks=pytest.mark.slow)]
)
def test_pin_joint_paths_cylinder_and_sphere_equal_opensim(osim, muscles):
    """Lengths within 1e-12 m of OpenSim at every sampled angle (wrapping or not); moment arms
    (r = −∂l/∂q by autodiff) equal central differences of OpenSim's length (1e-9) and, for the
    sphere (exact tangent points), OpenSim's computeMomentArm (1e-9). OpenSim's own cylinder
    moment arm (computeMomentArm, from the force directions) differs from its length's
    derivative where its heuristic tangent points are not exact (measured: below 1e-7 for the
    single cylinders here, 0.02 for the quadrant-constrained one)."""
    L, R, FD, lj, rj, straight = _compare_pin(osim, muscles)
    np.testing.assert_allclose(lj, L, rtol=0, atol=1e-12)
    assert np.all(np.sum(np.abs(L - straight) > 1e-6, axis=0) >= 5)  # each path wraps somewhere …
    assert np.all(np.sum(np.abs(L - straight) < 1e-12, axis=0) >= 5)  # … and not everywhere
    np.testing.assert_allclose(rj, FD, atol=1e-9)
    sph = [i for i, m in enumerate(muscles) if m.startswith("a_sph")]
    np.testing.assert_allclose(rj[:, sph], R[:, sph], atol=1e-9)


@pytest.mark.slow
def test_pin_joint_paths_ellipsoid_equal_opensim(osim):
    """The three ellipsoid methods on a pin-jointed body: lengths within 1e-9 m of OpenSim
    (OpenSim's tangent iteration, emulated), moment arms equal OpenSim's length derivative."""
    muscles = ["a_ell", "a_ell_mid", "a_ell_ax"]
    L, R, FD, lj, rj, straight = _compare_pin(osim, muscles)
    np.testing.assert_allclose(lj, L, rtol=0, atol=1e-9)
    assert np.all(np.sum(np.abs(L - straight) > 1e-6, axis=0) >= 5)
    # the length is OpenSim's tangent iterate, the derivative the exact tangent point's
    assert np.median(np.abs(rj - FD)) < 1e-9
    np.testing.assert_allclose(rj, FD, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("muscles", [["a_sph_x"], ["a_sph", "a_multi"]])
def test_wrapped_paths_vmap_float32(muscles):
    """Wrapped lengths under vmap, and in float32 (agreeing with float64 to 1e-5 m)."""
    tree = _pin_tree()
    paths = _pin_paths(tree, muscles)
    qs = jnp.linspace(-2.5, 2.5, 21)[:, None]
    l64 = jax.vmap(lambda q: geometry.lengths(paths, tree, q))(qs)
    one = np.stack([np.asarray(geometry.lengths(paths, tree, q)) for q in qs])
    np.testing.assert_allclose(np.asarray(l64), one, rtol=0, atol=1e-15)
    tree32 = SegmentTree.from_dict(tree.to_dict(), dtype=jnp.float32)
    l32 = jax.vmap(lambda q: geometry.lengths(paths.astype(jnp.float32), tree32, q))(qs.astype(jnp.float32))
    assert l32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(l32), np.asarray(l64), atol=1e-5)


@pytest.mark.slow
def test_wrapped_paths_grad():
    """Reverse-mode gradients of wrapped lengths, with respect to q and to a wrap radius, equal
    central differences (float64)."""
    tree = _pin_tree()
    paths = _pin_paths(tree, ["a_sph", "a_multi"])
    q0 = jnp.array([-2.2])  # both paths wrap the sphere here
    g = jax.grad(lambda q: jnp.sum(geometry.lengths(paths, tree, q)))(q0)
    h = 1e-6
    fd = (jnp.sum(geometry.lengths(paths, tree, q0 + h)) - jnp.sum(geometry.lengths(paths, tree, q0 - h))) / (2 * h)
    np.testing.assert_allclose(np.asarray(g), [float(fd)], rtol=1e-7)

    def by_radius(r):
        p = eqx.tree_at(lambda p: p.wrap_objects.dimensions, paths, paths.wrap_objects.dimensions.at[0, 0].set(r))
        return jnp.sum(geometry.lengths(p, tree, q0))

    gr = jax.grad(by_radius)(jnp.asarray(paths.wrap_objects.dimensions[0, 0]))
    r0 = float(paths.wrap_objects.dimensions[0, 0])
    assert abs(float(by_radius(r0 + h)) - float(by_radius(r0))) > 1e-9  # the radius matters here
    np.testing.assert_allclose(float(gr), (float(by_radius(r0 + h)) - float(by_radius(r0 - h))) / (2 * h), rtol=1e-6)


@pytest.mark.slow
def test_muscle_wrenches_pull_at_the_tangent_points():
    """A sphere-wrapped path (exact tangent points, so the length is stationary in them): the
    wrenches at the tangent points reproduce the generalised force rᵀF through inverse dynamics."""
    tree = _pin_tree()
    paths = _pin_paths(tree, ["a_sph_x"])
    for q in (jnp.array([0.2]), jnp.array([1.1])):
        F = jnp.array([150.0])
        ext = geometry.muscle_wrenches(paths, tree, q, F)
        z = jnp.zeros(1)
        tau = jb.inverse_dynamics(tree, q, z, z, external=ext) - jb.inverse_dynamics(tree, q, z, z)
        np.testing.assert_allclose(
            np.asarray(tau), -np.asarray(geometry.generalized_forces(paths, tree, q, F)), atol=1e-10
        )


def test_bad_wrap_specifications_are_refused():
    tree = _pin_tree()
    pts = {"m": [("ground", (0.3, 0.1, 0.0)), ("b", (0.2, -0.1, 0.0))]}
    good = dict(type="WrapSphere", frame="ground", radius=0.05)
    for bad, msg in [
        (dict(good, type="WrapTorus"), "type 'WrapTorus'"),
        (dict(good, frame="femur"), "unknown frame 'femur'"),
        (dict(good, radius=-1.0), "radius must be positive"),
        (dict(good, quadrant="q"), "quadrant 'q'"),
        (dict(type="WrapEllipsoid", frame="b", dimensions=(0.1, 0.0, 0.1)), "dimensions must be positive"),
        (dict(good, colour=1), "unknown properties"),
    ]:
        with pytest.raises(ValueError, match=msg):
            MusclePaths.from_points(tree, pts, wrap_objects={"w": bad}, path_wraps={"m": ["w"]})
    for bad, msg in [
        (["v"], "no wrap object named 'v'"),
        ([{"wrap_object": "w", "method": "fast"}], "method 'fast'"),
        ([{"wrap_object": "w", "range": (1, 5)}], r"range \(1, 5\) is outside"),
    ]:
        with pytest.raises(ValueError, match=msg):
            MusclePaths.from_points(tree, pts, wrap_objects={"w": good}, path_wraps={"m": bad})
    with pytest.raises(ValueError, match="unknown muscles"):
        MusclePaths.from_points(tree, pts, wrap_objects={"w": good}, path_wraps={"x": ["w"]})


# ---- arm26 ------------------------------------------------------------------------------------------


def test_arm26_biclong_at_the_reference_state():
    """arm26's BIClong over the humeral-head ellipsoid (range 2–3, hybrid, quadrant −y) at
    q = (0.3, 1.2) rad: OpenSim's 0.38465 m (straight line: 0.38241 m)."""
    objects, path_wraps = sets._arm26_wraps()
    tree, paths, _ = sets.load_muscle_set("arm26", dtype=jnp.float64)
    i = paths.index("BIClong")
    pts = [
        (f, np.asarray(paths.points[i, k]), paths.point_names[i][k])
        for k, f in enumerate(["world"] * 2 + ["r_humerus"] * 6 + ["r_ulna_radius_hand"])
    ]
    one = MusclePaths.from_points(
        tree,
        {"BIClong": pts},
        frames={"base": (None, (0, 0.8, 0))},
        wrap_objects={"BIClonghh": objects["BIClonghh"]},
        path_wraps={"BIClong": path_wraps["BIClong"]},
        dtype=jnp.float64,
    )
    q = jnp.array([0.3, 1.2])
    assert float(geometry.lengths(one, tree, q)[0]) == pytest.approx(0.38465168699, abs=1e-10)
    assert float(geometry.lengths(paths, tree, q)[i]) == pytest.approx(0.38240546, abs=1e-8)


def _arm26_osim(osim, tmp_path):
    """The shared 3.0-era arm26.osim, patched in a copy: OpenSim 4.6 refuses its Thelen muscles'
    ``minimum_activation`` 0 and ``min_control`` 1e-5 (both become 0.01; neither affects a path)."""
    if not ARM26_OSIM.exists():
        pytest.skip(f"{ARM26_OSIM} not found")
    text = ARM26_OSIM.read_text()
    text = re.sub(
        r"<minimum_activation>[^<]*</minimum_activation>", "<minimum_activation>0.01</minimum_activation>", text
    )
    text = re.sub(r"<min_control>[^<]*</min_control>", "<min_control>0.01</min_control>", text)
    path = tmp_path / "arm26_patched.osim"
    path.write_text(text)
    model = osim.Model(str(path))
    return model, model.initSystem()


@pytest.mark.slow
def test_arm26_six_muscles_equal_opensim(osim, tmp_path):
    """All six arm26 muscles with ``load_muscle_set("arm26", wrapping=True)`` against live
    OpenSim at random states: lengths within 1e-12 m (TRIlong's three wrap objects included,
    OpenSim's stale-cache quirk emulated); elbow moment arms equal central differences of
    OpenSim's lengths (1e-8), and OpenSim's computeMomentArm exactly for BIClong, BICshort
    (ellipsoid, none) and within OpenSim's tangency heuristics for the cylinder-wrapped ones
    (measured ≤ 2e-4 m)."""
    model, s = _arm26_osim(osim, tmp_path)
    tree, paths, _ = sets.load_muscle_set("arm26", dtype=jnp.float64, wrapping=True)
    muscles = model.getMuscles()
    assert tuple(muscles.get(i).getName() for i in range(muscles.getSize())) == paths.names
    cs = model.getCoordinateSet()
    shoulder, elbow = cs.get("r_shoulder_elev"), cs.get("r_elbow_flex")

    def at(q):
        shoulder.setValue(s, float(q[0]), False)
        elbow.setValue(s, float(q[1]), False)
        model.realizePosition(s)
        return np.array([muscles.get(i).getGeometryPath().getLength(s) for i in range(6)])

    rng = np.random.default_rng(0)
    qs = np.stack([rng.uniform(-1.5, 3.0, 40), rng.uniform(0.0, 2.6, 40)], axis=1)
    L, R, FD = [], [], []
    h = 1e-6
    for q in qs:
        FD.append(-(at(q + [0, h]) - at(q - [0, h])) / (2 * h))
        L.append(at(q))
        R.append([muscles.get(i).getGeometryPath().computeMomentArm(s, elbow) for i in range(6)])
    L, R, FD = map(np.array, (L, R, FD))
    lj = np.stack([np.asarray(geometry.lengths(paths, tree, jnp.asarray(q))) for q in qs])
    rj = np.stack([np.asarray(geometry.moment_arms(paths, tree, jnp.asarray(q)))[:, 1] for q in qs])
    np.testing.assert_allclose(lj, L, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rj, FD, atol=1e-8)
    exact = [paths.index("BIClong"), paths.index("BICshort")]
    np.testing.assert_allclose(rj[:, exact], R[:, exact], atol=1e-12)
    assert np.max(np.abs(rj - R)) < 2e-4
    # the wraps matter: TRIlong, BIClong and the elbow muscles differ from straight lines
    straight = np.stack(
        [
            np.asarray(geometry.lengths(sets.load_muscle_set("arm26", dtype=jnp.float64)[1], tree, jnp.asarray(q)))
            for q in qs
        ]
    )
    assert np.all(np.max(np.abs(L - straight), axis=0)[[0, 1, 2, 3, 5]] > 1e-3)
