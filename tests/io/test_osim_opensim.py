"""`jaxbio.io.load_osim` against live OpenSim (the ``opensim`` Python bindings, 4.x).

For each model: the same file loaded in OpenSim, random coordinate values (within range), speeds
and accelerations; compared are every body's origin and orientation in the ground frame, the
mass matrix (``SimbodyMatterSubsystem.calcM``) and the generalised forces of
``InverseDynamicsSolver.solve(state, udot)``, all in float64 to 1e-9. Models: arm26 and
gait10dof18musc (planar CustomJoints, SimmSpline-coupled knee translations) in their shipped 4.x
form and their last 3.x form (tests/io/data/README.md), and a synthetic 4.x model written here
with OpenSim's Python API (every joint type, a NaturalCubicSpline, a LinearFunction of slope ≠ 1,
a MultiplierFunction, piecewise functions). The ForceSet of every file is emptied in a copy
before OpenSim reads it, so that OpenSim's inverse dynamics hold gravity and inertia only (the
muscles' passive forces would add to them; some OpenSim versions also refuse arm26's Thelen
muscles with ``minimum_activation`` 0).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import coordinates as jc
from jaxbio.io import load_osim

osim = pytest.importorskip("opensim")
osim.Logger.removeFileSink()  # OpenSim would write opensim.log into the working directory
osim.Logger.setLevelString("error")

DATA = Path(__file__).parent / "data"
TOL = 1e-9
SHIPPED = ("arm26.osim", "arm26_3x.osim", "gait10dof18musc.osim", "gait10dof18musc_3x.osim")


# ---- OpenSim side -----------------------------------------------------------------------------


def _without_forces(src: Path, dst: Path) -> Path:
    from jaxbio._text import parse_xml

    tree = ET.ElementTree(parse_xml(Path(src).read_bytes()))  # OpenSim's "A::B" element names
    for objects in [*tree.getroot().iter("ForceSet"), *tree.getroot().iter("ControllerSet")]:  # their actuators
        for o in objects.findall("objects"):
            for child in list(o):
                o.remove(child)
    tree.write(dst)
    return dst


class OpenSimModel:
    """An OpenSim model (ForceSet removed) and its coordinates' mobility indices."""

    def __init__(self, path: Path):
        self.model = osim.Model(str(path))
        self.state = self.model.initSystem()
        cs = self.model.getCoordinateSet()
        self.coordinates = [cs.get(i) for i in range(cs.getSize())]
        self.names = [c.getName() for c in self.coordinates]
        s = self.state
        self.mobility = []  # u index of each coordinate
        for c in self.coordinates:
            for other in self.coordinates:
                other.setSpeedValue(s, 0.0)
            c.setSpeedValue(s, 1.0)
            u = np.array([s.getU().get(k) for k in range(s.getNU())])
            self.mobility.append(int(np.argmax(u)))
        self.mobility = np.array(self.mobility)
        assert sorted(self.mobility) == list(range(s.getNU()))

    def set(self, c, u):
        for coord, value, speed in zip(self.coordinates, c, u):
            coord.setValue(self.state, float(value), False)
            coord.setSpeedValue(self.state, float(speed))
        self.model.realizeAcceleration(self.state)

    def bodies(self, c, u=None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Origin and rotation matrix of every body in the ground frame."""
        self.set(c, np.zeros(len(c)) if u is None else u)
        out = {}
        for b in self.model.getBodySet():
            X = b.getTransformInGround(self.state)
            out[b.getName()] = (
                np.array([X.p().get(k) for k in range(3)]),
                np.array([[X.R().get(i, j) for j in range(3)] for i in range(3)]),
            )
        return out

    def mass_matrix(self, c) -> np.ndarray:
        """``M`` in coordinate order (OpenSim's speeds ``u``)."""
        self.set(c, np.zeros(len(c)))
        M = osim.Matrix()
        self.model.getMatterSubsystem().calcM(self.state, M)
        M = np.array([[M.get(i, j) for j in range(M.ncol())] for i in range(M.nrow())])
        return M[np.ix_(self.mobility, self.mobility)]

    def inverse_dynamics(self, c, u, udot) -> np.ndarray:
        self.set(c, u)
        ud = osim.Vector(self.state.getNU(), 0.0)
        for k, value in zip(self.mobility, udot):
            ud.set(int(k), float(value))
        tau = osim.InverseDynamicsSolver(self.model).solve(self.state, ud)
        return np.array([tau.get(int(k)) for k in self.mobility])


# ---- jaxbio side ------------------------------------------------------------------------------


def body_poses(m, c) -> dict[str, tuple[jnp.ndarray, jnp.ndarray]]:
    """Origin and rotation matrix of every OpenSim body, from the tree's forward kinematics."""
    positions, quaternions = jb.forward_kinematics(m.tree, jc.to_tree(m.coordinates, c))
    out = {}
    for name, seg in zip(m.bodies, m.body_segments):
        _, p, q = m.body_frame(name)
        if seg < 0:
            out[name] = (p, jb.quaternion.to_matrix(q))
            continue
        R = jb.quaternion.to_matrix(quaternions[seg])
        out[name] = (positions[seg] + R @ p, R @ jb.quaternion.to_matrix(q))
    return out


def euler_rates_to_speeds(m, c):
    """``T(c)`` ``(nc, nc)``: OpenSim's speeds ``u = T ċ``. Identity except for Ball and Free
    joints, whose rotational speeds are ``ω`` in the parent frame: ``E = [x, R_x y, R_x R_y z]``
    (the docstring of `jaxbio.io.osim`)."""
    T = jnp.eye(len(c), dtype=c.dtype)
    for k, kind in enumerate(m.joint_types):
        if kind not in ("BallJoint", "FreeJoint"):
            continue
        idx = [i for i, j in enumerate(m.coordinate_joints) if j == k][:3]  # rx, ry, rz
        x, y, z = jnp.eye(3, dtype=c.dtype)
        Rx = jb.quaternion.to_matrix(jb.quaternion.from_axis_angle(x, c[idx[0]]))
        Ry = jb.quaternion.to_matrix(jb.quaternion.from_axis_angle(y, c[idx[1]]))
        T = T.at[np.ix_(idx, idx)].set(jnp.stack([x, Rx @ y, Rx @ Ry @ z], axis=1))
    return T


def random_state(m, rng, limit=1.0):
    """Coordinates uniform in their range (clipped to ±``limit``: away from Euler singularities),
    speeds and accelerations standard normal."""
    r = np.asarray(m.ranges)
    c = rng.uniform(np.maximum(r[:, 0], -limit), np.minimum(r[:, 1], limit))
    return c, rng.normal(size=len(c)), rng.normal(size=len(c))


def compare(path: Path, tmp_path: Path, n_states: int = 2, seed: int = 0) -> dict[str, float]:
    """Max differences jaxbio − OpenSim over random states: positions (m), rotation matrices,
    mass matrix, generalised forces; each relative to 1 + the reference's largest entry."""
    ref = OpenSimModel(_without_forces(path, tmp_path / f"{path.stem}_no_forces.osim"))
    m = load_osim(path, dtype=jnp.float64)
    assert ref.names == list(m.coordinate_names)
    rng = np.random.default_rng(seed)
    err = dict(position=0.0, rotation=0.0, mass_matrix=0.0, inverse_dynamics=0.0)
    ID, MM = jb.inverse_dynamics, jb.mass_matrix
    for _ in range(n_states):
        c, cd, cdd = random_state(m, rng)
        c = jnp.asarray(c)
        T = euler_rates_to_speeds(m, c)
        u = T @ cd
        # u̇ = T c̈ + Ṫ ċ
        udot = T @ cdd + jax.jvp(lambda x: euler_rates_to_speeds(m, x) @ cd, (c,), (jnp.asarray(cd),))[1]
        ours = body_poses(m, c)
        for name, (p, R) in ref.bodies(c).items():
            err["position"] = max(err["position"], float(np.abs(ours[name][0] - p).max()))
            err["rotation"] = max(err["rotation"], float(np.abs(ours[name][1] - R).max()))
        M = ref.mass_matrix(c)
        err["mass_matrix"] = max(
            err["mass_matrix"], float(np.abs(MM(m, c) - T.T @ M @ T).max() / (1 + np.abs(M).max()))
        )
        tau = ref.inverse_dynamics(c, u, udot)
        ours_tau = ID(m, c, cd, cdd)
        err["inverse_dynamics"] = max(
            err["inverse_dynamics"], float(np.abs(ours_tau - T.T @ tau).max() / (1 + np.abs(tau).max()))
        )
    return err


# ---- the synthetic 4.x model --------------------------------------------------------------------


def write_synthetic(path: Path, variant: str = "exact") -> Path:
    """A 4.x model with every supported joint type, written with OpenSim's API.

    ``variant``: ``"exact"`` (constant rotations 0: OpenSim's dynamics are exact),
    ``"constant_rotations"`` (nonzero Constant rotations in two CustomJoints: Simbody's ``H``
    ignores them), ``"coupled_rotations"`` (the hip's first coordinate also drives rotation3:
    Simbody's ``Ḣ`` assumes it does not).
    """

    def vec(*v):
        return osim.Vec3(*v)

    m = osim.Model()
    m.setName(f"synthetic_{variant}")
    m.setGravity(vec(0.3, -9.81, 0.2))
    bodies = {}
    for name, mass, com, inertia in [
        ("pelvis", 10.0, (0.01, 0.05, -0.02), (0.1, 0.08, 0.12, 0.01, -0.02, 0.005)),
        ("torso", 20.0, (0.0, 0.3, 0.01), (0.9, 0.3, 0.8, 0.02, 0.01, -0.03)),
        ("head", 4.0, (0.02, 0.1, 0.0), (0.02, 0.015, 0.02, 0.001, 0.0, 0.002)),
        ("thigh", 7.0, (0.0, -0.2, 0.01), (0.1, 0.02, 0.1, 0.003, 0.0, 0.001)),
        ("shank", 3.0, (0.01, -0.2, 0.0), (0.04, 0.005, 0.04, 0.0, 0.001, 0.0)),
        ("foot", 1.0, (0.05, -0.02, 0.0), (0.002, 0.004, 0.004, 0.0002, 0.0, 0.0)),
        ("tag", 0.0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),  # massless, welded
        ("arm", 2.0, (0.0, -0.15, 0.02), (0.02, 0.003, 0.02, 0.0, 0.0, 0.001)),
        ("hand", 0.5, (0.01, -0.05, 0.0), (0.001, 0.0005, 0.001, 0.0, 0.0, 0.0)),
        ("box", 1.5, (0.02, 0.01, -0.03), (0.01, 0.02, 0.015, 0.001, -0.002, 0.0005)),
        ("disk", 0.8, (0.0, 0.0, 0.01), (0.003, 0.003, 0.005, 0.0, 0.0, 0.0)),
    ]:
        bodies[name] = osim.Body(name, mass, vec(*com), osim.Inertia(*inertia))
        m.addBody(bodies[name])
    bodies["ground"] = m.getGround()

    def joint(cls, name, parent, loc_p, ori_p, child, loc_c, ori_c, *extra):
        m.addJoint(cls(name, bodies[parent], vec(*loc_p), vec(*ori_p), bodies[child], vec(*loc_c), vec(*ori_c), *extra))

    def transform(*axes):
        st = osim.SpatialTransform()
        for i, (coords, axis, f) in enumerate(axes):
            ta = st.updTransformAxis(i)
            names = osim.ArrayStr()
            for c in coords:
                names.append(c)
            ta.setCoordinateNames(names)
            ta.setAxis(vec(*axis))
            ta.setFunction(f)
            f.thisown = False  # adopted by the TransformAxis
        return st

    constant = variant == "constant_rotations"
    spline = osim.SimmSpline()  # written as a NaturalCubicSpline below
    for x, y in [(-1.2, 0.01), (-0.6, 0.02), (0.0, 0.0), (0.4, -0.01), (0.9, 0.015), (1.5, 0.03)]:
        spline.addPoint(x, y)
    poly = osim.PolynomialFunction(osim.Vector([0.01, -0.02, 0.03, -0.4]))
    scaled = osim.MultiplierFunction(poly, 1.5)
    poly.thisown = False  # adopted by the MultiplierFunction
    if variant == "coupled_rotations":
        rotations = (
            (["hip_flexion"], (0, 0, 1), osim.LinearFunction(1.0, 0.0)),
            (["hip_rotation"], (1, 0, 0), osim.LinearFunction(1.0, 0.0)),
            (["hip_flexion"], (0.1, 1, 0), osim.LinearFunction(0.5, 0.1)),
        )
    else:
        rotations = (
            (["hip_flexion"], (0, 0, 1), osim.LinearFunction(1.0, 0.0)),
            ([], (1, 0, 0), osim.Constant(0.3 if constant else 0.0)),
            (["hip_rotation"], (0.1, 1, 0), osim.LinearFunction(0.5, 0.1)),
        )
    hip = transform(
        *rotations,
        (["hip_flexion"], (1, 0, 0), spline),
        (["hip_flexion"], (0, 1, 0), scaled),
        ([], (0, 0, 1), osim.Constant(0.02)),
    )
    linear_table = osim.PiecewiseLinearFunction()
    for x, y in [(-0.5, -0.1), (0.0, 0.05), (0.3, 0.0), (0.6, 0.2)]:
        linear_table.addPoint(x, y)
    steps = osim.PiecewiseConstantFunction()
    for x, y in [(-0.5, 0.0), (0.0, 0.01), (0.25, -0.01)]:
        steps.addPoint(x, y)
    box = transform(
        ([], (1, 0, 0), osim.Constant(0.2 if constant else 0.0)),
        ([], (0, 1, 0), osim.Constant(-0.3 if constant else 0.0)),
        (["box_spin"], (0, 0, 1), osim.LinearFunction(-1.0, 0.0)),
        (["box_slide"], (1, 0, 0), osim.LinearFunction(2.0, 0.05)),
        (["box_slide"], (0, 1, 0), linear_table),
        (["box_slide"], (0, 0, 1), steps),
    )

    joint(
        osim.FreeJoint,
        "free",
        "ground",
        (0.1, 0.9, -0.05),
        (0.1, -0.2, 0.3),
        "pelvis",
        (0.0, 0.02, 0.01),
        (-0.1, 0.05, 0.2),
    )
    joint(
        osim.BallJoint,
        "ball",
        "pelvis",
        (0.0, 0.1, 0.0),
        (0.0, 0.2, 0.0),
        "torso",
        (0.01, -0.02, 0.0),
        (0.1, 0.0, -0.1),
    )
    joint(
        osim.UniversalJoint,
        "universal",
        "torso",
        (0.0, 0.55, 0.01),
        (0.05, 0.0, 0.1),
        "head",
        (0.0, -0.05, 0.0),
        (0.0, 0.3, 0.0),
    )
    joint(
        osim.CustomJoint,
        "hip",
        "pelvis",
        (0.05, -0.05, 0.08),
        (0.0, 0.0, 0.1),
        "thigh",
        (0.0, 0.01, 0.0),
        (0.05, 0.0, 0.0),
        hip,
    )
    joint(
        osim.PinJoint, "knee", "thigh", (0.0, -0.4, 0.0), (0.0, 0.0, -0.05), "shank", (0.0, 0.0, 0.0), (0.0, 0.1, 0.0)
    )
    joint(
        osim.WeldJoint,
        "ankle",
        "shank",
        (0.0, -0.4, 0.01),
        (0.1, 0.0, 0.0),
        "foot",
        (-0.03, 0.02, 0.0),
        (0.0, 0.0, 0.2),
    )
    joint(osim.WeldJoint, "tag_weld", "foot", (0.1, 0.0, 0.0), (0.0, 0.5, 0.0), "tag", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    joint(
        osim.PlanarJoint, "planar", "torso", (0.0, 0.4, 0.2), (0.2, 0.1, 0.0), "arm", (0.0, 0.02, 0.0), (0.0, 0.0, 0.1)
    )
    joint(
        osim.SliderJoint, "slider", "arm", (0.0, -0.3, 0.0), (0.0, 0.0, -1.2), "hand", (0.01, 0.0, 0.0), (0.1, 0.0, 0.0)
    )
    joint(
        osim.CustomJoint,
        "box_joint",
        "torso",
        (0.1, 0.2, 0.0),
        (0.0, 0.0, 0.0),
        "box",
        (0.0, 0.0, 0.05),
        (0.0, 0.2, 0.0),
        box,
    )
    joint(
        osim.GimbalJoint, "gimbal", "ground", (1.0, 0.5, 0.0), (0.0, 0.0, 0.3), "disk", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)
    )
    m.finalizeConnections()
    m.printToXML(str(path))
    # the name the SimmSpline had before OpenSim 3.0; OpenSim still reads it (as a SimmSpline)
    text = path.read_text()
    assert text.count("<SimmSpline") == 1
    path.write_text(
        text.replace("<SimmSpline", "<NaturalCubicSpline").replace("</SimmSpline>", "</NaturalCubicSpline>")
    )
    return path


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    return {
        v: write_synthetic(root / f"synthetic_{v}.osim", v)
        for v in ("exact", "constant_rotations", "coupled_rotations")
    }


# ---- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("filename", SHIPPED)
def test_shipped_models_match_opensim(filename, tmp_path):
    with jax.enable_x64(True):
        err = compare(DATA / filename, tmp_path)
    assert max(err.values()) < TOL, err


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_synthetic_model_matches_opensim(synthetic, tmp_path):
    path = synthetic["exact"]
    assert 'Version="4' in path.read_text()[:200] and "<NaturalCubicSpline" in path.read_text()
    with jax.enable_x64(True):
        m = load_osim(path, dtype=jnp.float64)
        assert set(m.joint_types) == {
            "FreeJoint",
            "BallJoint",
            "UniversalJoint",
            "CustomJoint",
            "PinJoint",
            "WeldJoint",
            "PlanarJoint",
            "SliderJoint",
            "GimbalJoint",
        }
        err = compare(path, tmp_path, n_states=3, seed=1)
    assert max(err.values()) < TOL, err


def test_coordinate_properties_match_opensim(synthetic, tmp_path):
    motion = {
        osim.Coordinate.Rotational: "rotational",
        osim.Coordinate.Translational: "translational",
        osim.Coordinate.Coupled: "coupled",
    }
    for path in [synthetic["exact"], DATA / "gait10dof18musc.osim", DATA / "arm26_3x.osim"]:
        ref = OpenSimModel(_without_forces(path, tmp_path / f"{path.stem}_nf.osim"))
        m = load_osim(path)
        for i, c in enumerate(ref.coordinates):
            assert m.coordinate_names[i] == c.getName()
            assert m.motion_types[i] == motion[c.getMotionType()], c.getName()
            assert m.clamped[i] == c.getDefaultClamped() and m.locked[i] == c.getDefaultLocked()
            np.testing.assert_allclose(
                [m.defaults[i], m.default_speeds[i], *m.ranges[i]],
                [c.getDefaultValue(), c.getDefaultSpeedValue(), c.getRangeMin(), c.getRangeMax()],
                rtol=1e-6,
            )
    m = load_osim(synthetic["exact"])
    kinds = dict(zip(m.coordinate_names, m.motion_types))
    assert (kinds["hip_flexion"], kinds["hip_rotation"], kinds["box_spin"], kinds["box_slide"]) == (
        "rotational",
        "coupled",
        "rotational",
        "coupled",
    )


def test_nonzero_constant_rotations_follow_opensim_positions(synthetic, tmp_path):
    """Nonzero Constant rotations in CustomJoints: the poses equal OpenSim's, and jaxbio's body
    velocities are their derivative: central differences of OpenSim's own poses. (Simbody's
    FunctionBased ``H`` counts a constant rotation as 0, so OpenSim's velocities, mass matrix and
    inverse dynamics do not follow its positions here; not compared.)"""
    path = synthetic["constant_rotations"]
    ref = OpenSimModel(_without_forces(path, tmp_path / "constant_nf.osim"))
    with jax.enable_x64(True):
        m = load_osim(path, dtype=jnp.float64)
        c, cd, _ = random_state(m, np.random.default_rng(2))
        c, cd = jnp.asarray(c), jnp.asarray(cd)
        poses, rates = jax.jvp(lambda x: body_poses(m, x), (c,), (cd,))
        h = 1e-6
        plus, minus = ref.bodies(c + h * cd), ref.bodies(c - h * cd)
        for name, (p, R) in ref.bodies(c).items():
            np.testing.assert_allclose(poses[name][0], p, atol=1e-12)
            np.testing.assert_allclose(poses[name][1], R, atol=1e-12)
            np.testing.assert_allclose(rates[name][0], (plus[name][0] - minus[name][0]) / (2 * h), atol=1e-8)
            np.testing.assert_allclose(rates[name][1], (plus[name][1] - minus[name][1]) / (2 * h), atol=1e-8)


@pytest.mark.slow
def test_rotations_coupled_to_one_coordinate(synthetic, tmp_path):
    """One coordinate driving two rotations of a CustomJoint: poses and the mass matrix equal
    OpenSim's; inverse dynamics equal Lagrange's equations built from that mass matrix and the
    potential energy (OpenSim's ``Ḣ`` assumes the first coordinate drives rotation1 only)."""
    path = synthetic["coupled_rotations"]
    with jax.enable_x64(True):
        err = compare(path, tmp_path, n_states=1, seed=3)
        assert err["position"] < TOL and err["rotation"] < TOL and err["mass_matrix"] < TOL, err
        m = load_osim(path, dtype=jnp.float64)
        c, cd, cdd = (jnp.asarray(x) for x in random_state(m, np.random.default_rng(4)))
        tau = jb.inverse_dynamics(m, c, cd, cdd)
        np.testing.assert_allclose(tau, lagrange(m, c, cd, cdd), atol=1e-9 * (1 + np.abs(tau).max()))


def lagrange(m, c, cd, cdd):
    """``M c̈ + Ṁ ċ − ½ ∂(ċᵀ M ċ)/∂c + ∂V/∂c`` from `jaxbio.coordinates.mass_matrix` and the
    potential energy of the tree at ``q = to_tree(c)``."""

    def mass(x):
        return jb.mass_matrix(m, x)

    def energy(x):
        return 0.5 * cd @ mass(x) @ cd

    M, dM = jax.jvp(mass, (c,), (cd,))
    gravity = jax.grad(lambda x: jb.potential_energy(m.tree, jc.to_tree(m.coordinates, x)))(c)
    return M @ cdd + dM @ cd - jax.grad(energy)(c) + gravity


FUNCTION_POINTS = np.array([-2.0, -1.2, -1.19, -0.9, -0.6, -0.3, 0.0, 0.1, 0.4, 0.77, 0.9, 1.2, 1.5, 1.6, 3.0])


def _opensim_function(kind, points):
    f = getattr(osim, kind)()
    for x, y in points:
        f.addPoint(x, y)
    return f


@pytest.mark.parametrize(
    "kind, knots",
    [
        ("SimmSpline", [(-1.2, 0.01), (1.5, 0.03)]),
        ("SimmSpline", [(-1.2, 0.01), (0.0, -0.2), (1.5, 0.03)]),
        ("SimmSpline", [(-1.2, 0.01), (-0.6, 0.02), (0.4, -0.01), (1.5, 0.03)]),
        ("SimmSpline", [(-1.2, 0.01), (-0.6, 0.02), (0.0, 0.0), (0.4, -0.01), (0.9, 0.015), (1.5, 0.03)]),
        ("PiecewiseLinearFunction", [(-1.2, 0.01), (-0.6, 0.02), (0.4, -0.01), (1.5, 0.03)]),
        ("PiecewiseConstantFunction", [(-1.2, 0.01), (-0.6, 0.02), (0.4, -0.01), (1.5, 0.03)]),
    ],
)
def test_functions_match_opensim(kind, knots):
    """Value, first and second derivative of OpenSim's functions, inside, at and beyond the
    knots (OpenSim's linear extrapolation), through the public coordinate-map functions."""
    from jaxbio import _osim_functions as fn

    x, y = np.array(knots).T
    build = {
        "SimmSpline": fn.simm_spline,
        "PiecewiseLinearFunction": fn.piecewise_linear,
        "PiecewiseConstantFunction": fn.piecewise_constant,
    }[kind]
    ref = _opensim_function(kind, knots)
    expect_values = []
    for t in FUNCTION_POINTS:
        if kind == "PiecewiseConstantFunction" and np.any(np.isclose(t, x)):
            continue  # OpenSim's value at a step is either side's, by its binary search
        v = osim.Vector(1, float(t))
        expect_values.append(
            (
                t,
                ref.calcValue(v),
                ref.calcDerivative(osim.StdVectorInt([0]), v),
                ref.calcDerivative(osim.StdVectorInt([0, 0]), v),
            )
        )
    t, value, d1, d2 = np.array(expect_values).T
    with jax.enable_x64(True):
        cmap = jc.CoordinateMap.from_pieces(["x"], [0], [build(x, y)], dtype=jnp.float64)
        ours = jax.vmap(
            lambda s: jnp.stack(
                [
                    jc.to_tree(cmap, s[None])[0],
                    jc.tree_velocity(cmap, s[None], jnp.ones(1))[0],
                    jc.tree_acceleration(cmap, s[None], jnp.ones(1), jnp.zeros(1))[0],
                ]
            )
        )(jnp.asarray(t))
    inside_knot = np.array([np.any(np.isclose(s, x[1:-1])) for s in t])  # d² jumps at interior knots
    np.testing.assert_allclose(ours[:, 0], value, atol=1e-14)
    np.testing.assert_allclose(ours[:, 1], d1, atol=1e-12)
    np.testing.assert_allclose(ours[~inside_knot, 2], d2[~inside_knot], atol=1e-11)


def test_polynomial_and_multiplier_match_opensim():
    from jaxbio import _osim_functions as fn

    coefficients = [0.01, -0.02, 0.03, -0.4]
    poly = osim.PolynomialFunction(osim.Vector(coefficients))
    scaled = osim.MultiplierFunction(poly, 1.5)
    poly.thisown = False
    with jax.enable_x64(True):
        cmap = jc.CoordinateMap.from_pieces(["x"], [0], [fn.polynomial(coefficients).scaled(1.5)], dtype=jnp.float64)
        for t in FUNCTION_POINTS:
            v = osim.Vector(1, float(t))
            s = jnp.array([t])
            np.testing.assert_allclose(
                [
                    jc.to_tree(cmap, s)[0],
                    jc.tree_velocity(cmap, s, jnp.ones(1))[0],
                    jc.tree_acceleration(cmap, s, jnp.ones(1), jnp.zeros(1))[0],
                ],
                [
                    scaled.calcValue(v),
                    scaled.calcDerivative(osim.StdVectorInt([0]), v),
                    scaled.calcDerivative(osim.StdVectorInt([0, 0]), v),
                ],
                atol=1e-13,
            )
