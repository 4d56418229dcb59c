"""`Model.muscles` (`jaxbio.forces._osim_muscles`) against live OpenSim 4.6 (the ``opensim``
Python bindings), float64.

At random states within the coordinate ranges of arm26 (Thelen muscles over cylinders and
ellipsoids), gait10dof18musc (Millard muscles, conditional and moving points) and subject01
(54 Thelen muscles, conditional and moving points, a 2.x file): path lengths vs
``Muscle.getLength``, moment arms vs ``computeMomentArm`` (wrapping muscles: vs central
differences of OpenSim's length, which ``computeMomentArm`` does not equal exactly), lengthening
speeds vs ``getLengtheningSpeed`` (wrapping muscles: vs differences of OpenSim's length along
the velocity), static-optimisation forces vs ``calcInextensibleTendonActiveFiberForce(s, 1)``.
The 3.x and 4.x files of one model give the same numbers. jit/vmap/grad, and the errors.
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
from jaxbio.io import (
    load_osim,
    muscle_generalized_forces,
    muscle_lengthening_speeds,
    muscle_lengths,
    muscle_moment_arms,
    muscle_static_optimization_forces,
)

DATA = Path(__file__).parent / "data"
ARM26, ARM26_3X = DATA / "arm26.osim", DATA / "arm26_3x.osim"
GAIT, GAIT_3X = DATA / "gait10dof18musc.osim", DATA / "gait10dof18musc_3x.osim"
SUBJECT01 = DATA / "subject01" / "subject01.osim"


_MODELS = {}


def _load(path):
    """The model of ``path`` (float64), loaded once: the jitted functions compile once per model."""
    if path not in _MODELS:
        with jax.enable_x64(True):
            _MODELS[path] = load_osim(path, dtype=jnp.float64)
    return _MODELS[path]


def _states(model, n, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(model.ranges).T
    return lo + (hi - lo) * rng.uniform(size=(n, len(lo))), rng.normal(size=(n, len(lo)))


class OpenSim:
    """A live OpenSim model and its muscles in jaxbio's order."""

    def __init__(self, path: Path, names):
        osim = pytest.importorskip("opensim")
        osim.Logger.removeFileSink()
        osim.Logger.setLevelString("error")
        self.model = osim.Model(str(path))
        self.state = self.model.initSystem()
        cs = self.model.getCoordinateSet()
        self.coordinates = [cs.get(i) for i in range(cs.getSize())]
        muscles = self.model.getMuscles()
        self.muscles = [muscles.get(n) for n in names]

    def set(self, c, cd=None):
        cd = np.zeros(len(c)) if cd is None else cd
        for coord, value, speed in zip(self.coordinates, c, cd):
            coord.setValue(self.state, float(value), False)
            coord.setSpeedValue(self.state, float(speed))
        self.model.realizeVelocity(self.state)

    def lengths(self, c):
        self.set(c)
        return np.array([m.getLength(self.state) for m in self.muscles])

    def speeds(self, c, cd):
        self.set(c, cd)
        return np.array([m.getLengtheningSpeed(self.state) for m in self.muscles])

    def moment_arms(self, c):
        self.set(c)
        return np.array([[m.computeMomentArm(self.state, k) for k in self.coordinates] for m in self.muscles])

    def fiber_forces(self, c, cd):
        self.set(c, cd)
        return np.array([m.calcInextensibleTendonActiveFiberForce(self.state, 1.0) for m in self.muscles])

    def length_derivative(self, c, direction, h=1e-5):
        """Central difference of OpenSim's lengths along ``direction``."""
        return (self.lengths(c + h * direction) - self.lengths(c - h * direction)) / (2 * h)


def _wrapping(model):
    w = model.muscles.paths.path_wraps
    return np.array([bool(x) for x in w]) if w else np.zeros(model.muscles.n_muscles, bool)


def _compare(path, n, seed=0, force_tol=1e-9):
    """Largest differences to OpenSim over ``n`` random states (dict of errors)."""
    model = _load(path)
    ref = OpenSim(path, model.muscles.names)
    wrap = _wrapping(model)
    cs, cds = _states(model, n, seed)
    err = dict(length=0.0, arm=0.0, arm_fd=0.0, speed=0.0, speed_fd=0.0, force=0.0)
    with jax.enable_x64(True):
        for c, cd in zip(cs, cds):
            err["length"] = max(err["length"], np.abs(np.asarray(muscle_lengths(model, c)) - ref.lengths(c)).max())
            r = np.asarray(muscle_moment_arms(model, c))
            v = np.asarray(muscle_lengthening_speeds(model, c, cd))
            if (~wrap).any():
                err["arm"] = max(err["arm"], np.abs(r - ref.moment_arms(c))[~wrap].max())
                err["speed"] = max(err["speed"], np.abs(v - ref.speeds(c, cd))[~wrap].max())
            # OpenSim's getLengtheningSpeed is not dl/dt over a wrap: wrapping models at rest
            cd_f = 0.0 * cd if wrap.any() else cd
            f = ref.fiber_forces(c, cd_f)
            ours = np.asarray(muscle_static_optimization_forces(model, c, cd_f)[0])
            err["force"] = max(err["force"], (np.abs(ours - f) / (1 + np.abs(f))).max())
            if wrap.any():
                fd = np.stack([-ref.length_derivative(c, e) for e in np.eye(len(c))], axis=1)
                err["arm_fd"] = max(err["arm_fd"], np.abs(r - fd)[wrap].max())
                err["speed_fd"] = max(err["speed_fd"], np.abs(v - ref.length_derivative(c, cd))[wrap].max())
    return err


def _check(err, length_tol, force_tol=1e-9):
    assert err["length"] <= length_tol, err
    assert err["arm"] <= 1e-6, err
    assert err["speed"] <= 1e-6, err
    # wrapping: OpenSim's tangent points are iterates (ellipsoid: stop at a squared residual
    # 1e-8), so its length is smooth only to ~1e-8 m; with h = 1e-5 the differences carry that
    assert err["arm_fd"] <= 1e-4, err
    assert err["speed_fd"] <= 1e-4, err
    assert err["force"] <= force_tol, err


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_arm26_wrapping_against_opensim():
    """Default run: the wrapped lengths, and the Thelen models' forces at OpenSim's own lengths
    and speeds (every function of a wrapping model compiles OpenSim's wrap loops, ~15 s each:
    moment arms, speeds and the forces through the paths are in the slow sweep)."""
    model = _load(ARM26)
    ref = OpenSim(ARM26, model.muscles.names)
    cs, cds = _states(model, 3)
    with jax.enable_x64(True):
        for c, cd in zip(cs, cds):
            np.testing.assert_allclose(muscle_lengths(model, c), ref.lengths(c), rtol=0, atol=1e-9)
            ref.set(c, cd)
            length = np.array([m.getLength(ref.state) for m in ref.muscles])
            speed = np.array([m.getLengtheningSpeed(ref.state) for m in ref.muscles])
            f = ref.fiber_forces(c, cd)
            ours = np.asarray(model.muscles.thelen.static_optimization_forces(length, speed)[0])
            np.testing.assert_allclose(ours, f, rtol=1e-9, atol=1e-9)


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_gait10dof18musc_conditional_moving_against_opensim():
    _check(_compare(GAIT, 4), 1e-9)


@pytest.mark.slow
def test_subject01_against_opensim():
    # OpenSim 4.6 rounds this 2.x file's joint offsets (location_in_parent) to 6 significant
    # digits when it converts them to frames (-0.06772454 -> -0.0677245); jaxbio reads the file's
    # numbers, so body origins differ by up to 3e-7 m (rotations to 1e-15). The path lengths
    # inherit that, and the forces (steep force-length curves of short fibres) ~1e-5 relative
    _check(_compare(SUBJECT01, 2), 1e-6, force_tol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("path, tol, force_tol", [(ARM26, 1e-9, 1e-9), (GAIT, 1e-9, 1e-9), (SUBJECT01, 1e-6, 1e-4)])
def test_sweep_against_opensim(path, tol, force_tol):
    """20 states per model."""
    _check(_compare(path, 20, seed=1), tol, force_tol)


@pytest.mark.parametrize("new, old", [(ARM26, ARM26_3X), pytest.param(GAIT, GAIT_3X, marks=pytest.mark.slow)])
def test_3x_and_4x_files_agree(new, old):
    """The 3.x and 4.x files of one model import the same muscles: equal paths, wrap objects,
    conditional and moving points and muscle parameters, hence the same numbers."""
    a, b = _load(new), _load(old)
    assert a.muscles.names == b.muscles.names and a.muscles.types == b.muscles.types
    assert a.coordinate_names == b.coordinate_names
    pa, pb = a.muscles.paths, b.muscles.paths
    assert (pa.segments, pa.counts, pa.path_wraps) == (pb.segments, pb.counts, pb.path_wraps)
    assert (a.muscles.conditional, a.muscles.moving) == (b.muscles.conditional, b.muscles.moving)
    leaves_a, tree_a = jax.tree_util.tree_flatten(eqx_arrays(a.muscles))
    leaves_b, tree_b = jax.tree_util.tree_flatten(eqx_arrays(b.muscles))
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)
    if new == GAIT:  # no wrapping: cheap to compile
        cs, cds = _states(a, 2)
        with jax.enable_x64(True):
            for c, cd in zip(cs, cds):
                np.testing.assert_allclose(muscle_lengths(a, c), muscle_lengths(b, c), atol=1e-12)
                np.testing.assert_allclose(
                    muscle_static_optimization_forces(a, c, cd)[0],
                    muscle_static_optimization_forces(b, c, cd)[0],
                    rtol=1e-9,
                    atol=1e-9,
                )


def eqx_arrays(tree):
    return eqx.filter(tree, eqx.is_array)


def test_structure_and_ignored():
    arm = _load(ARM26)
    assert arm.muscles.names == ("TRIlong", "TRIlat", "TRImed", "BIClong", "BICshort", "BRA")
    assert arm.muscles.thelen_index == tuple(range(6)) and arm.muscles.millard is None
    assert not any("ForceSet" in s or "WrapObjectSet" in s for s in arm.ignored)
    gait = _load(GAIT)
    assert set(gait.muscles.types) == {"Millard2012EquilibriumMuscle"} and gait.muscles.thelen is None
    assert len(gait.muscles.conditional) == 8 and len(gait.muscles.moving) == 4
    np.testing.assert_allclose(gait.muscles.min_control, 0.0)
    np.testing.assert_allclose(gait.muscles.max_control, 1.0)


def test_conditional_point_switches_off():
    """A conditional point outside its range leaves the path: the length is the straight path
    over the other points (checked against the same muscle with the point removed)."""
    gait = _load(GAIT)
    i, k, j = gait.muscles.conditional[0]
    lo, hi = np.asarray(gait.muscles.conditional_ranges[0])
    c = np.asarray(gait.defaults).copy()
    with jax.enable_x64(True):
        c[j] = lo - 0.1 if lo - 0.1 >= gait.ranges[j, 0] else hi + 0.1
        off = float(muscle_lengths(gait, c)[i])
        from jaxbio.coordinates import to_tree
        from jaxbio.muscles.geometry import path_points_world

        pts = np.asarray(path_points_world(gait.muscles.paths, gait.tree, to_tree(gait.coordinates, c))[i])
    assert not any(mi == i for mi, _ in gait.muscles.moving)
    keep = [p for p in range(gait.muscles.paths.counts[i]) if p != k]
    assert off == pytest.approx(np.linalg.norm(np.diff(pts[keep], axis=0), axis=1).sum(), abs=1e-12)
    assert off < float(muscle_lengths(gait, np.where(np.arange(len(c)) == j, (lo + hi) / 2, c))[i]) + 1.0


def test_generalized_forces_are_moment_arms_times_tensions():
    gait = _load(GAIT)
    c = _states(gait, 1)[0][0]
    F = np.linspace(10.0, 500.0, gait.muscles.n_muscles)
    with jax.enable_x64(True):
        tau = muscle_generalized_forces(gait, c, F)
        np.testing.assert_allclose(tau, np.asarray(muscle_moment_arms(gait, c)).T @ F, atol=1e-10)


@pytest.mark.slow
def test_jit_vmap_grad():
    gait = _load(GAIT)
    cs, cds = _states(gait, 3)
    with jax.enable_x64(True):
        batch = jax.jit(jax.vmap(muscle_lengths, (None, 0)))(gait, cs)
        np.testing.assert_allclose(batch[1], muscle_lengths(gait, cs[1]), atol=1e-14)
        speeds = jax.vmap(muscle_lengthening_speeds, (None, 0, 0))(gait, cs, cds)
        assert speeds.shape == (3, 18) and np.all(np.isfinite(speeds))

        # d(active force)/d(optimal fibre length), against central differences
        def force(lopt, c):
            g = eqx.tree_at(lambda m: m.muscles.millard.optimal_fiber_length, gait, lopt)
            return muscle_static_optimization_forces(g, c, jnp.zeros_like(c))[0].sum()

        lopt = gait.muscles.millard.optimal_fiber_length
        c = cs[0]
        g = jax.grad(force)(lopt, c)
        e = jnp.zeros_like(lopt).at[2].set(1e-6)
        fd = (force(lopt + e, c) - force(lopt - e, c)) / 2e-6
        assert np.all(np.isfinite(g)) and float(g[2]) == pytest.approx(float(fd), rel=1e-5, abs=1e-6)

        # d(length)/d(point coordinates), against central differences (conditional points included)
        def length(points, c):
            m = eqx.tree_at(lambda m: m.muscles.paths.points, gait, points)
            return muscle_lengths(m, c)[gait.muscles.conditional[0][0]]

        pts = gait.muscles.paths.points
        gp = jax.grad(length)(pts, c)
        assert np.all(np.isfinite(gp))
        i = gait.muscles.conditional[0][0]
        d = jnp.zeros_like(pts).at[i, 0, 1].set(1e-6)
        fd = (length(pts + d, c) - length(pts - d, c)) / 2e-6
        assert float(gp[i, 0, 1]) == pytest.approx(float(fd), rel=1e-6, abs=1e-9)
        # gradient through an inactive conditional point: finite (zero-length pieces)
        i, k, j = gait.muscles.conditional[0]
        lo = float(gait.muscles.conditional_ranges[0, 0])
        c_off = c.copy()
        c_off[j] = max(lo - 0.2, float(gait.ranges[j, 0]))
        g_off = jax.grad(length)(pts, c_off)
        assert np.all(np.isfinite(g_off))
        assert np.all(np.isfinite(jax.jacfwd(muscle_lengths, 1)(gait, c_off)))


@pytest.mark.slow
def test_wrapped_moment_arms_jit():
    arm = _load(ARM26)
    c = np.asarray(arm.defaults) + 0.3
    with jax.enable_x64(True):
        r = jax.jit(muscle_moment_arms)(arm, c)
    assert r.shape == (6, 2) and np.all(np.isfinite(r))


def test_argument_errors():
    gait = _load(GAIT)
    with jax.enable_x64(True):
        with pytest.raises(ValueError, match="c"):
            muscle_lengths(gait, np.zeros(3))
        bad = np.asarray(gait.defaults).copy()
        bad[0] = np.nan
        with pytest.raises(ValueError, match="c"):
            muscle_lengths(gait, bad)
        with pytest.raises(ValueError, match="cd"):
            muscle_lengthening_speeds(gait, gait.defaults, np.zeros(2))
        with pytest.raises(ValueError, match="tensions"):
            muscle_generalized_forces(gait, gait.defaults, np.ones(3))
        with pytest.raises(ValueError, match="Model"):
            muscle_lengths(gait.tree, gait.defaults)
        nomuscle = jb.load_model("arm7")  # a jaxbio tree as a Model: no muscles
        assert nomuscle.muscles is None
        with pytest.raises(ValueError, match="no imported muscles"):
            muscle_lengths(nomuscle, nomuscle.defaults)


def _edited(tmp_path, path, old, new, count=1):
    text = path.read_text()
    assert old in text, old
    out = tmp_path / path.name
    out.write_text(text.replace(old, new, count))
    return out


def test_file_errors(tmp_path):
    f = _edited(
        tmp_path,
        GAIT,
        "<socket_parent_frame>/bodyset/tibia_r</socket_parent_frame>",
        "<socket_parent_frame>/bodyset/nowhere</socket_parent_frame>",
    )
    with pytest.raises(ValueError, match=re.escape(str(f)) + ".*Millard2012EquilibriumMuscle 'hamstrings_r'.*nowhere"):
        load_osim(f)
    f = _edited(
        tmp_path,
        GAIT,
        "<socket_coordinate>/jointset/hip_r/hip_flexion_r</socket_coordinate>",
        "<socket_coordinate>/jointset/hip_r/no_such_angle</socket_coordinate>",
    )
    with pytest.raises(ValueError, match=re.escape(str(f)) + ".*ConditionalPathPoint 'psoas_r-P3'.*no_such_angle"):
        load_osim(f)
    f = _edited(tmp_path, GAIT_3X, "<coordinate>hip_flexion_r</coordinate>", "<coordinate>nope</coordinate>")
    with pytest.raises(ValueError, match=re.escape(str(f)) + ".*ConditionalPathPoint.*nope"):
        load_osim(f)


def test_disabled_and_unsupported_muscles(tmp_path):
    f = _edited(tmp_path, GAIT, "<appliesForce>true</appliesForce>", "<appliesForce>false</appliesForce>")
    m = _load(f)
    assert "hamstrings_r" not in m.muscles.names and m.muscles.n_muscles == 17
    text = GAIT.read_text()
    start = text.index('<Millard2012EquilibriumMuscle name="bifemsh_r">')
    end = text.index("</Millard2012EquilibriumMuscle>", start) + len("</Millard2012EquilibriumMuscle>")
    block = text[start:end].replace("Millard2012EquilibriumMuscle", "DeGrooteFregly2016Muscle")
    g = tmp_path / "other.osim"
    g.write_text(text[:start] + block + text[end:])
    m = _load(g)
    assert "bifemsh_r" not in m.muscles.names and m.muscles.n_muscles == 17
    assert any("DeGrooteFregly2016Muscle" in s for s in m.ignored)


def test_wrapped_path_with_conditional_point_is_refused(tmp_path):
    old = """<PathPoint name="TRIlong-P2">
									<!--Path to a Component that satisfies the Socket 'parent_frame' of type PhysicalFrame (description: The frame in which this path point is defined.).-->
									<socket_parent_frame>/bodyset/r_humerus</socket_parent_frame>
									<!--The fixed location of the path point expressed in its parent frame.-->
									<location>-0.027140000000000001 -0.11441 -0.0066400000000000001</location>
								</PathPoint>"""
    new = (
        '<ConditionalPathPoint name="TRIlong-P2"><socket_parent_frame>/bodyset/r_humerus</socket_parent_frame>'
        "<location>-0.02714 -0.11441 -0.00664</location><socket_coordinate>/jointset/r_elbow/r_elbow_flex"
        "</socket_coordinate><range>0 1</range></ConditionalPathPoint>"
    )
    f = _edited(tmp_path, ARM26, old, new)
    with pytest.raises(ValueError, match=re.escape(str(f)) + ".*Thelen2003Muscle 'TRIlong'.*conditional"):
        load_osim(f)


def test_float32():
    """The float32 import gives float32 results close to float64's."""
    gait64 = _load(GAIT)
    gait32 = load_osim(GAIT, dtype=jnp.float32)
    c = _states(gait64, 1)[0][0]
    l32 = muscle_lengths(gait32, c.astype(np.float32))
    assert l32.dtype == jnp.float32
    with jax.enable_x64(True):
        l64 = muscle_lengths(gait64, c)
    np.testing.assert_allclose(l32, l64, atol=2e-6)
