"""`Model.forces` (`jaxbio.forces._osim_forces`) and the InverseDynamicsTool's model forces,
against live OpenSim 4.6 (the ``opensim`` Python bindings).

Models written with OpenSim's API (``printToXML``): a planar arm with every imported force type
and a muscle (default tests), the synthetic model of tests/io/test_osim_opensim.py (every joint
type: Free, Ball, Universal, CustomJoints with coupled coordinates, Pin, Weld, Planar, Slider,
Gimbal) with forces on each kind of coordinate (slow), and arm26's OpenSim 3.x file with a 3.x
ForceSet. At states that put the limited coordinates inside, within the transitions and beyond
both limits, OpenSim's generalised force of each force type is ``InverseDynamicsSolver.solve``
with every force disabled minus the same with only that type enabled (actuators: random
controls); jaxbio's is `passive_forces` / `actuator_forces` of the same file. Ball/Free
rotations: OpenSim's forces are conjugate to its speeds, jaxbio's are ``Tᵀ`` of them (the
convention of `jaxbio.io.osim`). The InverseDynamicsTool is run live by OpenSim and by
``jaxbio run-tool`` on the same setup files.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.cli import main
from jaxbio.io import actuator_forces, applied_forces, inverse_dynamics_tool, load_osim, passive_forces

osim = pytest.importorskip("opensim")
osim.Logger.removeFileSink()
osim.Logger.setLevelString("error")

from tests.io.test_osim_opensim import OpenSimModel, euler_rates_to_speeds, write_synthetic  # noqa: E402

DATA = Path(__file__).parent / "data"
TOL = 1e-9  # relative to 1 + the largest generalised force
PASSIVE_TYPES = ("CoordinateLimitForce", "SpringGeneralizedForce", "PointToPointSpring")
ACTUATOR_TYPES = ("CoordinateActuator", "PointActuator", "TorqueActuator", "PathActuator")
KINDS = PASSIVE_TYPES + ("actuators",)


# ---- OpenSim's side ----------------------------------------------------------------------------------


class Reference(OpenSimModel):
    """OpenSim's generalised forces of a model's forces, some types at a time."""

    def __init__(self, path: Path):
        super().__init__(path)
        fs = self.model.getForceSet()
        self.forces = [fs.get(i) for i in range(fs.getSize())]
        self.enabled = [f.get_appliesForce() for f in self.forces]

    def _solve(self, c, u, kinds, controls):
        s = self.state
        for f, on in zip(self.forces, self.enabled):
            f.setAppliesForce(s, on and f.getConcreteClassName() in kinds)
        for coord, value, speed in zip(self.coordinates, c, u):
            coord.setValue(s, float(value), False)
            coord.setSpeedValue(s, float(speed))
        self.model.realizeVelocity(s)
        vec = osim.Vector(self.model.getNumControls(), 0.0)
        acts = self.model.getActuators()
        for name, value in (controls or {}).items():
            acts.get(name).setControls(osim.Vector(1, float(value)), vec)
        self.model.setControls(s, vec)
        tau = osim.InverseDynamicsSolver(self.model).solve(s, osim.Vector(s.getNU(), 0.0))
        return np.array([tau.get(int(k)) for k in self.mobility])

    def generalized_forces(self, c, u, kinds, controls=None):
        """OpenSim's generalised force (conjugate to its speeds) of the forces of ``kinds``:
        inverse dynamics without any force minus inverse dynamics with them."""
        return self._solve(c, u, (), None) - self._solve(c, u, kinds, controls)


def compare_types(path: Path, c, cd, kinds=KINDS, seed: int = 0) -> dict[str, tuple[float, float]]:
    """``{kind: (max |jaxbio − OpenSim|, max |OpenSim|)}`` over the states ``c``, ``cd``
    ``(T, nc)`` for each passive force type of ``kinds``, all of them (``"passive"``) and all
    actuators (``"actuators"``, random controls)."""
    ref = Reference(path)
    with jax.enable_x64(True):
        m = load_osim(path, dtype=jnp.float64)
        c, cd = jnp.asarray(c), jnp.asarray(cd)
        T = np.asarray(jax.vmap(lambda x: euler_rates_to_speeds(m, x))(c))
        u = np.einsum("tij,tj->ti", T, cd)
        types = {k: {"actuators": ACTUATOR_TYPES, "passive": PASSIVE_TYPES}.get(k, (k,)) for k in kinds}
        names = {k: [n for t, n in m.forces.order if t in types[k]] for k in kinds}
        parts = {k: dataclasses.replace(m, forces=m.forces.select(names[k])) for k in kinds}
        acts = m.forces.actuator_names
        controls = np.random.default_rng(seed).uniform(-1.0, 2.0, (c.shape[0], len(acts)))
        driven = {k: set(types[k]) <= set(ACTUATOR_TYPES) for k in kinds}

        def ours(c, cd, controls):  # one compilation for every kind
            return {
                k: actuator_forces(
                    parts[k], c, controls[np.asarray([acts.index(n) for n in parts[k].forces.actuator_names], int)]
                )
                if driven[k]
                else passive_forces(parts[k], c, cd)
                for k in kinds
            }

        ours = jax.jit(jax.vmap(ours))(c, cd, controls)
    out = {}
    for k in kinds:
        given = [dict(zip(acts, x)) for x in controls] if driven[k] else [None] * len(c)
        theirs = np.array([ref.generalized_forces(c[i], u[i], types[k], given[i]) for i in range(len(c))])
        theirs = np.einsum("tji,tj->ti", T, theirs)  # Tᵀ: jaxbio's coordinates
        out[k] = (float(np.abs(np.asarray(ours[k]) - theirs).max()), float(np.abs(theirs).max()))
    return out


def assert_agree(errors: dict[str, tuple[float, float]], minimum: float = 1.0) -> None:
    for kind, (err, scale) in errors.items():
        assert scale > minimum, (kind, scale)  # the forces act
        assert err / (1.0 + scale) < TOL, (kind, err, scale)


# ---- the planar arm (default tests) ---------------------------------------------------------------


def write_pendulum(path: Path) -> Path:
    """A planar arm (shoulder and elbow pins, a sleeve sliding on the forearm) with two
    CoordinateLimitForces, a SpringGeneralizedForce, two PointToPointSprings (one to the ground),
    two CoordinateActuators, two PointActuators (body-frame, and global point and direction), two
    TorqueActuators (bodyA's frame between two bodies; global against the ground) and a
    Thelen2003Muscle; the ForceSet group ``limits`` holds the two limits."""
    m = osim.Model()
    m.setName("pendulum")
    upper = osim.Body("upper", 2.0, osim.Vec3(0, -0.3, 0), osim.Inertia(0.02, 0.005, 0.02))
    lower = osim.Body("lower", 1.5, osim.Vec3(0, -0.25, 0), osim.Inertia(0.015, 0.004, 0.015))
    sleeve = osim.Body("sleeve", 0.5, osim.Vec3(0.01, 0, 0), osim.Inertia(0.001, 0.001, 0.001))
    for b in (upper, lower, sleeve):
        m.addBody(b)
    z = osim.Vec3(0, 0, 0)
    joints = (
        osim.PinJoint("shoulder", m.getGround(), osim.Vec3(0, 1.5, 0), z, upper, z, z),
        osim.PinJoint("elbow", upper, osim.Vec3(0, -0.6, 0), z, lower, z, z),
        osim.SliderJoint("slide", lower, osim.Vec3(0, -0.3, 0), osim.Vec3(0, 0, -1.2), sleeve, z, z),
    )
    for j, name in zip(joints, ("shoulder_angle", "elbow_angle", "slide_x")):
        j.updCoordinate().setName(name)
        m.addJoint(j)
    for f in (
        osim.CoordinateLimitForce("shoulder_angle", 40.0, 2.0, -30.0, 3.0, 0.5, 10.0),
        osim.CoordinateLimitForce("elbow_angle", 120.0, 1.0, 0.0, 1.5, 0.1, 5.0),
    ):
        f.setName(f.get_coordinate().split("_")[0] + "_limit")
        m.addForce(f)
    spring = osim.SpringGeneralizedForce("slide_x")
    spring.setName("slide_spring"), spring.setStiffness(200.0), spring.setRestLength(0.05), spring.setViscosity(3.0)
    m.addForce(spring)
    tether = osim.PointToPointSpring(m.getGround(), osim.Vec3(0.3, 1.2, 0), lower, osim.Vec3(0, -0.2, 0), 150.0, 0.3)
    tether.setName("tether")
    m.addForce(tether)
    strap = osim.PointToPointSpring(upper, osim.Vec3(0.05, -0.2, 0.01), sleeve, osim.Vec3(0.0, 0.02, 0.0), 80.0, 0.25)
    strap.setName("strap")
    m.addForce(strap)
    motor = osim.CoordinateActuator("elbow_angle")
    motor.setName("elbow_motor"), motor.setOptimalForce(50.0)
    m.addForce(motor)
    push = osim.CoordinateActuator("slide_x")
    push.setName("slide_motor"), push.setOptimalForce(20.0)
    m.addForce(push)
    for name, body, point, point_global, direction, force_global in (
        ("hand_push", lower, (0.02, -0.5, 0.01), False, (1.0, 0.5, 0.0), False),
        ("sleeve_pull", sleeve, (0.3, 0.5, 0.0), True, (0.2, -1.0, 0.0), True),
    ):
        a = osim.PointActuator(body.getName())
        a.setName(name), a.set_point(osim.Vec3(*point)), a.set_point_is_global(point_global)
        a.set_direction(osim.Vec3(*direction)), a.set_force_is_global(force_global), a.setOptimalForce(40.0)
        m.addForce(a)
    for name, a_body, b_body, axis, global_ in (
        ("elbow_torque", lower, upper, (0.1, 0.2, 1.0), False),
        ("shoulder_torque", upper, m.getGround(), (0.0, 0.0, 1.0), True),
    ):
        a = osim.TorqueActuator(a_body, b_body, osim.Vec3(*axis), global_)
        a.setName(name), a.setOptimalForce(15.0)
        m.addForce(a)
    muscle = osim.Thelen2003Muscle("flexor", 300.0, 0.2, 0.25, 0.0)
    muscle.addNewPathPoint("origin", upper, osim.Vec3(0.02, -0.1, 0))
    muscle.addNewPathPoint("insertion", lower, osim.Vec3(0.02, -0.1, 0))
    m.addForce(muscle)
    m.finalizeConnections()
    m.printToXML(str(path))
    text = path.read_text()
    at = text.rindex("<groups />", 0, text.index("</ForceSet>"))  # the ForceSet's own
    groups = '<groups><ObjectGroup name="limits"><members>shoulder_limit elbow_limit</members></ObjectGroup></groups>'
    path.write_text(text[:at] + groups + text[at + len("<groups />") :])
    return path


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    """A folder with pendulum.osim and motion.mot: the shoulder from −45° to 55° (limits −30°,
    40°, transition 10°), the elbow from −10° to 130° (limits 0°, 120°, transition 5°), the
    sleeve ±0.1 m."""
    work = tmp_path_factory.mktemp("pendulum")
    write_pendulum(work / "pendulum.osim")
    t = np.linspace(0.0, 1.0, 101)
    c = np.stack(
        [
            np.radians(5.0 + 50.0 * np.sin(2 * np.pi * t)),
            np.radians(60.0 + 70.0 * np.sin(2 * np.pi * t + 1)),
            0.1 * np.sin(3 * t),
        ],
        1,
    )
    with jax.enable_x64(True):
        m = load_osim(work / "pendulum.osim", dtype=jnp.float64)
    jb.io.write_sto(work / "motion.mot", jb.io.coordinates_table(m, t, c))
    return work


def pendulum_states():
    """Shoulder and elbow inside, in the transitions and beyond both limits; random speeds."""
    shoulder = np.radians([0.0, -35.0, -45.0, 38.0, 45.0, 55.0, 20.0, -25.0])
    elbow = np.radians([60.0, 3.0, -8.0, 118.0, 123.0, 130.0, 2.0, 125.0])
    slide = np.array([0.0, 0.05, -0.1, 0.08, -0.03, 0.1, 0.02, -0.07])
    return np.stack([shoulder, elbow, slide], 1), np.random.default_rng(2).normal(size=(8, 3))


def test_forces_are_imported_with_their_units(pendulum):
    with jax.enable_x64(True):
        m = load_osim(pendulum / "pendulum.osim", dtype=jnp.float64)
    f = m.forces
    assert f.coordinate_limits.names == ("shoulder_limit", "elbow_limit")
    assert not any(s.startswith("ForceSet") for s in m.ignored) and m.muscles.names == ("flexor",)
    assert f.not_imported == (("Thelen2003Muscle", "flexor"),)
    np.testing.assert_allclose(f.coordinate_limits.upper_limit, np.radians([40.0, 120.0]), rtol=1e-7)
    np.testing.assert_allclose(f.coordinate_limits.upper_stiffness, np.degrees([2.0, 1.0]), rtol=1e-7)
    np.testing.assert_allclose(f.coordinate_limits.damping, np.degrees([0.5, 0.1]), rtol=1e-7)
    np.testing.assert_allclose(f.springs.rest_length, [0.05])  # metres stay metres
    assert f.point_springs.segments1[0] == -1  # the ground
    assert f.actuator_names == (
        "elbow_motor",
        "slide_motor",
        "hand_push",
        "sleeve_pull",
        "elbow_torque",
        "shoulder_torque",
    )
    np.testing.assert_allclose(f.optimal_force, [50.0, 20.0, 40.0, 40.0, 15.0, 15.0])
    assert np.all(np.isinf(f.min_control)) and np.all(f.min_control < 0) and np.all(np.isinf(f.max_control))
    assert f.point_actuators.point_is_global == (False, True) and f.torque_actuators.torque_is_global == (False, True)
    assert f.groups == (("limits", ("shoulder_limit", "elbow_limit")),)


@pytest.mark.parametrize("kind", KINDS)
def test_generalized_forces_match_opensim(pendulum_errors, kind):
    assert_agree({kind: pendulum_errors[kind]})


@pytest.fixture(scope="module")
def pendulum_errors(pendulum):
    return compare_types(pendulum / "pendulum.osim", *pendulum_states())


def test_forces_in_float32_and_their_derivatives(pendulum):
    with jax.enable_x64(True):
        m64 = load_osim(pendulum / "pendulum.osim", dtype=jnp.float64)
        m32 = load_osim(pendulum / "pendulum.osim", dtype=jnp.float32)
        names = ("shoulder_limit", "elbow_limit", "slide_spring")  # the coordinate forces (cheap to compile)
        m64, m32 = (dataclasses.replace(m, forces=m.forces.select(names)) for m in (m64, m32))
        c, cd = (jnp.asarray(x) for x in pendulum_states())
        f = jax.jit(jax.vmap(passive_forces, (None, 0, 0)))
        ref = f(m64, c, cd)
        got = f(m32, c.astype(jnp.float32), cd.astype(jnp.float32))
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(got, ref, atol=1e-4 * (1 + float(np.abs(ref).max())))
        # ∂f/∂(c, ċ) (forward mode) against central differences, through the limits' transitions
        J = jax.jit(jax.vmap(jax.jacfwd(passive_forces, argnums=(1, 2)), (None, 0, 0)))(m64, c, cd)
        h, E = 1e-6, 1e-6 * jnp.eye(3)
        fd_c = jnp.stack([(f(m64, c + E[j], cd) - f(m64, c - E[j], cd)) / (2 * h) for j in range(3)], -1)
        fd_cd = jnp.stack([(f(m64, c, cd + E[j]) - f(m64, c, cd - E[j])) / (2 * h) for j in range(3)], -1)
        for got, fd in zip(J, (fd_c, fd_cd)):
            np.testing.assert_allclose(got, fd, atol=1e-6 * (1 + float(np.abs(fd).max())))
        assert float(jnp.abs(J[0]).max()) > 100.0  # the limits are stiff


# ---- every joint type (slow) and an OpenSim 3.x file -----------------------------------------------


def write_forces_model(path: Path) -> Path:
    """The synthetic model of tests/io/test_osim_opensim.py plus forces on each kind of coordinate
    (rotational, translational, coupled, Ball and Free rotations) and body (welded, massless)."""
    base = write_synthetic(path.with_name(path.stem + "_base.osim"))
    m = osim.Model(str(base))

    def add(force):
        m.addForce(force)
        return force

    add(osim.CoordinateLimitForce("knee_coord_0", 25.0, 3.0, -20.0, 5.0, 0.2, 8.0))  # N·m/deg, deg
    add(osim.CoordinateLimitForce("slider_coord_0", 0.04, 800.0, -0.05, 500.0, 3.0, 0.02))  # N/m, m
    ball = add(osim.CoordinateLimitForce("ball_coord_1", 10.0, 2.0, -15.0, 1.5, 0.05, 5.0))
    ball.setName("ball_limit")
    coupled = add(osim.CoordinateLimitForce("box_slide", 0.1, 300.0, -0.2, 200.0, 1.0, -0.05))  # negative transition
    coupled.setName("box_slide_limit")
    off = add(osim.CoordinateLimitForce("hip_flexion", 0.0, 50.0, 0.0, 50.0, 1.0, 1.0))
    off.setName("disabled_limit")
    off.set_appliesForce(False)
    spring = add(osim.SpringGeneralizedForce("hip_flexion"))
    spring.setStiffness(40.0), spring.setRestLength(0.3), spring.setViscosity(2.0)
    spring = add(osim.SpringGeneralizedForce("free_coord_4"))  # translational, of a Free joint
    spring.setName("free_spring"), spring.setStiffness(100.0), spring.setRestLength(0.8), spring.setViscosity(5.0)
    spring = add(osim.SpringGeneralizedForce("free_coord_1"))  # a Free joint's rotation
    (
        spring.setName("free_rotation_spring"),
        spring.setStiffness(7.0),
        spring.setRestLength(0.1),
        spring.setViscosity(0.4),
    )
    bodies = m.getBodySet()
    add(
        osim.PointToPointSpring(
            bodies.get("thigh"),
            osim.Vec3(0.02, -0.1, 0.01),
            bodies.get("shank"),
            osim.Vec3(-0.01, -0.15, 0.02),
            900.0,
            0.2,
        )
    )
    p2p = add(
        osim.PointToPointSpring(
            m.getGround(), osim.Vec3(0.3, 1.5, 0.1), bodies.get("hand"), osim.Vec3(0.01, -0.02, 0.0), 250.0, 0.1
        )
    )
    p2p.setName("ground_to_hand")
    for name, coord, force in (
        ("knee_motor", "knee_coord_0", 30.0),
        ("ball_motor", "ball_coord_2", 12.0),
        ("free_motor", "free_coord_0", 50.0),
        ("slide_motor", "box_slide", 80.0),
        ("free_push", "free_coord_3", 200.0),
    ):
        a = add(osim.CoordinateActuator(coord))
        a.setName(name), a.setOptimalForce(force), a.setMinControl(-1.0), a.setMaxControl(2.0)
    for name, body, point, pg, direction, fg in (
        ("push_local", "torso", (0.02, 0.3, -0.05), False, (1.0, 2.0, -0.5), False),
        ("push_global_point", "hand", (0.3, 0.6, 0.25), True, (0.0, 1.0, 0.0), False),
        ("push_global_force", "shank", (0.0, -0.2, 0.03), False, (0.3, -1.0, 0.2), True),
        ("push_global_both", "box", (0.5, 1.2, 0.1), True, (-1.0, 0.0, 2.0), True),
        ("push_welded", "foot", (0.1, -0.02, 0.01), False, (0.0, 0.0, 1.0), False),
    ):
        a = add(osim.PointActuator(body))
        a.setName(name), a.set_point(osim.Vec3(*point)), a.set_point_is_global(pg)
        a.set_direction(osim.Vec3(*direction)), a.set_force_is_global(fg), a.setOptimalForce(40.0)
    for name, a_body, b_body, axis, global_ in (
        ("twist_global", "torso", "pelvis", (0.2, 1.0, 0.1), True),
        ("twist_local", "head", "ground", (1.0, 0.0, 0.5), False),
        ("twist_disk", "disk", "box", (0.0, 0.3, 1.0), False),
    ):
        frame_a = m.getGround() if a_body == "ground" else bodies.get(a_body)
        frame_b = m.getGround() if b_body == "ground" else bodies.get(b_body)
        a = add(osim.TorqueActuator(frame_a, frame_b, osim.Vec3(*axis), global_))
        a.setName(name), a.setOptimalForce(15.0)
    m.finalizeConnections()
    m.printToXML(str(path))
    return path


@pytest.mark.slow
def test_generalized_forces_match_opensim_on_every_joint_type(tmp_path):
    path = write_forces_model(tmp_path / "forces.osim")
    m = load_osim(path)
    assert "disabled_limit" not in [n for _, n in m.forces.order]
    assert m.ignored[0] == "ForceSet: 1 disabled objects (CoordinateLimitForce)"
    np.testing.assert_allclose(m.forces.coordinate_limits.transition[3], -0.05, rtol=1e-7)  # coupled: file's unit
    r = np.asarray(m.ranges)
    rng = np.random.default_rng(3)
    c = rng.uniform(np.maximum(r[:, 0], -1.0), np.minimum(r[:, 1], 1.0), (8, len(r)))
    c[:, m.coordinate_index("knee_coord_0")] = np.radians([0.0, 22.0, 30.0, 40.0, -15.0, -24.0, -35.0, 27.0])
    c[:, m.coordinate_index("slider_coord_0")] = [0.0, 0.05, 0.07, -0.06, -0.08, 0.045, -0.055, 0.01]
    assert_agree(compare_types(path, c, rng.normal(size=c.shape), PASSIVE_TYPES + ACTUATOR_TYPES), minimum=10.0)


FORCESET_3X = """<ForceSet name="forces"><objects>
  <CoordinateLimitForce name="elbow_limit"><isDisabled>false</isDisabled><coordinate>r_elbow_flex</coordinate>
    <upper_stiffness>2</upper_stiffness><upper_limit>100</upper_limit><lower_stiffness>3</lower_stiffness>
    <lower_limit>10</lower_limit><damping>0.05</damping><transition>15</transition></CoordinateLimitForce>
  <CoordinateLimitForce name="off"><isDisabled>true</isDisabled><coordinate>r_shoulder_elev</coordinate>
  </CoordinateLimitForce>
  <SpringGeneralizedForce name="shoulder_spring"><coordinate>r_shoulder_elev</coordinate><stiffness>5</stiffness>
    <rest_length>0.2</rest_length><viscosity>0.3</viscosity></SpringGeneralizedForce>
  <PointToPointSpring name="tendon"><body1>r_humerus</body1><body2>r_ulna_radius_hand</body2>
    <point1>0.01 -0.1 0</point1><point2>0.02 -0.12 0.01</point2><stiffness>400</stiffness>
    <rest_length>0.15</rest_length></PointToPointSpring>
  <CoordinateActuator name="elbow_motor"><coordinate>r_elbow_flex</coordinate><optimal_force>20</optimal_force>
    <min_control>-2</min_control><max_control>3</max_control></CoordinateActuator>
  <PointActuator name="hand_push"><body>r_ulna_radius_hand</body><point>0.01 -0.2 0.02</point>
    <point_is_global>false</point_is_global><direction>1 0.5 0</direction><force_is_global>false</force_is_global>
    <optimal_force>30</optimal_force></PointActuator>
  <TorqueActuator name="shoulder_torque"><bodyA>r_humerus</bodyA><bodyB>ground</bodyB>
    <torque_is_global>false</torque_is_global><axis>0 0.3 1</axis><optimal_force>10</optimal_force></TorqueActuator>
</objects><groups/></ForceSet>"""


def test_an_opensim_3x_force_set_matches_opensim(tmp_path):
    text = (DATA / "arm26_3x.osim").read_text()
    start, end = text.index("<ForceSet>"), text.index("</ForceSet>") + len("</ForceSet>")
    path = tmp_path / "arm26_3x_forces.osim"
    path.write_text(text[:start] + FORCESET_3X + text[end:])
    with jax.enable_x64(True):
        m = load_osim(path, dtype=jnp.float64)  # as compare_types loads it (one compilation)
    assert [n for _, n in m.forces.order] == [
        "elbow_limit",
        "shoulder_spring",
        "tendon",
        "elbow_motor",
        "hand_push",
        "shoulder_torque",
    ]
    assert m.ignored[0] == "ForceSet: 1 disabled objects (CoordinateLimitForce)"  # isDisabled
    np.testing.assert_allclose([m.forces.min_control[0], m.forces.max_control[0]], [-2.0, 3.0])
    rng = np.random.default_rng(1)
    c = np.stack([rng.uniform(-0.5, 2.0, 6), np.radians([0.0, 5.0, 20.0, 95.0, 108.0, 130.0])], 1)
    assert_agree(compare_types(path, c, rng.normal(size=c.shape), ("passive", "actuators")), minimum=0.5)


# ---- the InverseDynamicsTool ----------------------------------------------------------------------

SETUP = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="40000">
  <InverseDynamicsTool name="pendulum">
    <results_directory>Results</results_directory>
    <model_file>pendulum.osim</model_file>
    <time_range> 0 1</time_range>
    <forces_to_exclude>{exclude}</forces_to_exclude>
    <coordinates_file>motion.mot</coordinates_file>
    <lowpass_cutoff_frequency_for_coordinates>-1</lowpass_cutoff_frequency_for_coordinates>
    <output_gen_force_file>{output}</output_gen_force_file>
  </InverseDynamicsTool>
</OpenSimDocument>
"""


def run_opensim(work: Path, exclude: str, name: str) -> jb.io.Table:
    """OpenSim's InverseDynamicsTool, live, on a setup excluding ``exclude``."""
    (work / f"{name}_opensim.xml").write_text(SETUP.format(exclude=exclude, output=f"{name}_opensim.sto"))
    cwd = Path.cwd()
    try:  # OpenSim 4.6 reads the setup's model_file relative to the working directory
        os.chdir(work)
        assert osim.InverseDynamicsTool(str(work / f"{name}_opensim.xml")).run()
    finally:
        os.chdir(cwd)
    return jb.io.read_storage(work / "Results" / f"{name}_opensim.sto")


def run_jaxbio(work: Path, exclude: str, name: str) -> jb.io.Table:
    """``jaxbio run-tool`` on the same setup."""
    (work / f"{name}_jaxbio.xml").write_text(SETUP.format(exclude=exclude, output=f"{name}_jaxbio.sto"))
    assert main(["run-tool", str(work / f"{name}_jaxbio.xml"), "--no-progress"]) == 0
    return jb.io.read_storage(work / "Results" / f"{name}_jaxbio.sto")


def assert_same_table(ours, live, tol=1e-9):  # measured 5e-9 N·m: OpenSim's .sto has 8 decimals
    assert ours.labels == live.labels == ("shoulder_angle_moment", "elbow_angle_moment", "slide_x_force")
    np.testing.assert_allclose(ours.time, live.time, atol=1e-12)
    err = np.abs(ours.data - live.data).max()
    assert err < tol * (1 + np.abs(live.data).max()), err


def test_inverse_dynamics_tool_applies_the_model_forces_as_opensim(pendulum):
    # muscles excluded: the limits, the spring and the tethers act, the actuators have no controls
    live = run_opensim(pendulum, "Muscles", "muscles")
    assert_same_table(run_jaxbio(pendulum, "Muscles", "muscles"), live)
    live_all = run_opensim(pendulum, "All", "all")  # gravity and inertia only
    assert np.abs(live.data - live_all.data).max() > 10.0  # the forces matter (the limits: ≈ 60 N·m)


def test_forces_to_exclude_follows_opensim_with_groups(pendulum):
    # with ForceSet groups OpenSim looks a word up among the group names only: "limits" excludes
    # both limits, "tether" (a force's name) matches nothing and the tether stays
    live = run_opensim(pendulum, "muscles limits tether", "groups")
    with pytest.warns(UserWarning, match="'tether'"):
        assert_same_table(run_jaxbio(pendulum, "muscles limits tether", "groups"), live)
    with jax.enable_x64(True):
        m = load_osim(pendulum / "pendulum.osim", dtype=jnp.float64)
    assert [n for _, n in applied_forces(m, "actuators").forces.order] == [
        "shoulder_limit",
        "elbow_limit",
        "slide_spring",
        "tether",
        "strap",
    ]
    with pytest.warns(UserWarning):
        kept = applied_forces(m, ["MUSCLES", "limits", "tether"]).forces
    assert [n for _, n in kept.order][:3] == ["slide_spring", "tether", "strap"]
    assert applied_forces(m, "all").forces.order == ()


# ---- bad input -------------------------------------------------------------------------------------


def _edited(pendulum: Path, tmp_path: Path, old: str, new: str) -> Path:
    text = (pendulum / "pendulum.osim").read_text()
    assert old in text, old
    path = tmp_path / "edited.osim"
    path.write_text(text.replace(old, new, 1))
    return path


FIRST_FORCE = "<objects>\n\t\t\t\t<CoordinateLimitForce"
EXPRESSION = (
    '<ExpressionBasedCoordinateForce name="expr"><coordinate>elbow_angle</coordinate>'
    "<expression>-2*q</expression></ExpressionBasedCoordinateForce>"
)


def test_forces_opensim_would_apply_are_refused_unless_excluded(pendulum, tmp_path, capsys):
    motion = pendulum / "motion.mot"
    with pytest.raises(ValueError, match=r"pendulum\.osim: .*Thelen2003Muscle 'flexor'"):
        inverse_dynamics_tool(pendulum / "pendulum.osim", motion, forces_to_exclude=())
    assert (
        main(
            [
                "id",
                "--model",
                str(pendulum / "pendulum.osim"),
                "--motion",
                str(motion),
                "--forces-to-exclude",
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Thelen2003Muscle 'flexor'" in err[0], err
    path = _edited(pendulum, tmp_path, FIRST_FORCE, FIRST_FORCE.replace("<objects>", "<objects>" + EXPRESSION))
    m = load_osim(path)
    assert "ForceSet: 1 objects (ExpressionBasedCoordinateForce)" in m.ignored
    with pytest.raises(ValueError, match=r"edited\.osim: .*ExpressionBasedCoordinateForce 'expr'"):
        inverse_dynamics_tool(path, motion)
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="'expr'"):
        applied_forces(m, "muscles expr")  # the file has groups: a force's name matches nothing
    text = path.read_text()
    at = text.index("<groups><ObjectGroup")
    path.write_text(text[:at] + "<groups/>" + text[text.index("</groups>", at) + len("</groups>") :])
    applied_forces(load_osim(path), "muscles expr")  # no groups: excluded by its name
    controlled = _edited(
        pendulum,
        tmp_path,
        '<ControllerSet name="controllerset">\n\t\t\t<objects />',
        '<ControllerSet name="controllerset"><objects><PrescribedController name="drive">'
        "</PrescribedController></objects>",
    )
    with pytest.raises(ValueError, match="controllers"):
        applied_forces(load_osim(controlled), "muscles")
    applied_forces(load_osim(controlled), "actuators")


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "<coordinate>shoulder_angle</coordinate>",
            "<coordinate>nope</coordinate>",
            r"edited\.osim: CoordinateLimitForce 'shoulder_limit': no coordinate 'nope'",
        ),
        (
            "<socket_body2>/bodyset/lower</socket_body2>",
            "<socket_body2>/bodyset/nobody</socket_body2>",
            r"edited\.osim: PointToPointSpring 'tether': no body or frame '/bodyset/nobody'",
        ),
        (
            "<transition>5</transition>",
            "<transition>0</transition>",
            r"CoordinateLimitForce 'elbow_limit': <transition>",
        ),
        (
            "<coordinate>slide_x</coordinate>",
            "<coordinate></coordinate>",
            r"SpringGeneralizedForce 'slide_spring': no <coordinate>",
        ),
        (
            FIRST_FORCE,
            FIRST_FORCE.replace("<objects>", '<objects><PointActuator name="p"><body>nobody</body></PointActuator>'),
            r"edited\.osim: PointActuator 'p': no body or frame 'nobody'",
        ),
        (
            FIRST_FORCE,
            FIRST_FORCE.replace("<objects>", '<objects><TorqueActuator name="t"><bodyA>upper</bodyA></TorqueActuator>'),
            r"TorqueActuator 't': needs <bodyA> and <bodyB>",
        ),
        (
            FIRST_FORCE,
            FIRST_FORCE.replace(
                "<objects>",
                '<objects><PointActuator name="p"><body>upper</body><direction>0 0 0</direction></PointActuator>',
            ),
            r"PointActuator 'p': <direction> is zero",
        ),
        (
            FIRST_FORCE,
            FIRST_FORCE.replace(
                "<objects>",
                '<objects><PointToPointSpring name="s"><socket_body1>'
                "/bodyset/upper</socket_body1><socket_body2>/bodyset/upper"
                "</socket_body2></PointToPointSpring>",
            ),
            r"PointToPointSpring 's': both ends are on one rigid segment",
        ),
    ],
)
def test_bad_forces_are_refused_naming_element_and_file(pendulum, tmp_path, old, new, message):
    with pytest.raises(ValueError, match=message):
        load_osim(_edited(pendulum, tmp_path, old, new))
