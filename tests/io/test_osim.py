"""`jaxbio.io.load_osim` without OpenSim: the shipped arm26 model, a hand-written pendulum in
closed form, the importer's reading of the files, and every refusal (naming element and file).
The comparisons with live OpenSim are in test_osim_opensim.py."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.io import load_osim

DATA = Path(__file__).parent / "data"

TINY = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="40000">
  <Model name="tiny">
    <Ground name="ground"/>
    <gravity>0 -9.81 0</gravity>
    <BodySet name="bodyset">
      <objects>
        <Body name="rod"><mass>2</mass><mass_center>0 -0.5 0</mass_center><inertia>0.3 0.02 0.3 0 0 0</inertia></Body>
        <Body name="tip"><mass>0.5</mass><mass_center>0.1 0 0</mass_center><inertia>0.01 0.01 0.01 0 0 0</inertia></Body>
      </objects>
    </BodySet>
    <JointSet name="jointset">
      <objects>
        <PinJoint name="pin">
          <socket_parent_frame>/ground</socket_parent_frame>
          <socket_child_frame>rod_offset</socket_child_frame>
          <coordinates><Coordinate name="angle"><default_value>0.1</default_value><range>-2 2</range></Coordinate></coordinates>
          <frames>
            <PhysicalOffsetFrame name="rod_offset">
              <socket_parent>/bodyset/rod</socket_parent>
              <translation>0 0 0</translation><orientation>0 0 0</orientation>
            </PhysicalOffsetFrame>
          </frames>
        </PinJoint>
        <CustomJoint name="slide">
          <socket_parent_frame>/bodyset/rod</socket_parent_frame>
          <socket_child_frame>/bodyset/tip</socket_child_frame>
          <coordinates><Coordinate name="stretch"><range>0 1</range><clamped>true</clamped></Coordinate></coordinates>
          <SpatialTransform>
            <TransformAxis name="rotation1"><coordinates></coordinates><axis>1 0 0</axis><Constant name="function"><value>0</value></Constant></TransformAxis>
            <TransformAxis name="rotation2"><coordinates></coordinates><axis>0 1 0</axis><Constant name="function"><value>0</value></Constant></TransformAxis>
            <TransformAxis name="rotation3"><coordinates></coordinates><axis>0 0 1</axis><Constant name="function"><value>0</value></Constant></TransformAxis>
            <TransformAxis name="translation1"><coordinates></coordinates><axis>1 0 0</axis><Constant name="function"><value>0</value></Constant></TransformAxis>
            <TransformAxis name="translation2"><coordinates>stretch</coordinates><axis>0 1 0</axis><LinearFunction name="function"><coefficients>-2 -1</coefficients></LinearFunction></TransformAxis>
            <TransformAxis name="translation3"><coordinates></coordinates><axis>0 0 1</axis><Constant name="function"><value>0</value></Constant></TransformAxis>
          </SpatialTransform>
        </CustomJoint>
      </objects>
    </JointSet>
  </Model>
</OpenSimDocument>
"""


def write(tmp_path: Path, text: str, name: str = "model.osim") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_tiny_model_closed_form(tmp_path):
    """A pin joint at the origin carrying a rod (COM 0.5 m below) and a point-like tip sliding
    along the rod, y = −(2 s + 1): the mass matrix and gravity torques in closed form."""
    with jax.enable_x64(True):
        m = load_osim(write(tmp_path, TINY), dtype=jnp.float64)
        assert m.coordinate_names == ("angle", "stretch") and m.motion_types == ("rotational", "coupled")
        assert m.tree.names == ("rod", "tip") and m.tree.joint_types == ("revolute", "prismatic")
        assert m.clamped == (False, True) and m.joints == ("pin", "slide")
        np.testing.assert_allclose(m.defaults, [0.1, 0.0])
        np.testing.assert_allclose(m.ranges, [[-2, 2], [0, 1]])
        theta, s = 0.3, 0.4
        c = jnp.array([theta, s])
        r = 2 * s + 1  # tip origin below the pin, m
        m_rod, m_tip, d = 2.0, 0.5, np.array([0.1, 0.0])  # tip COM offset in its frame
        tip_com = np.array([0.1, -r])
        M = np.array(
            [[0.3 + m_rod * 0.25 + 0.01 + m_tip * tip_com @ tip_com, -m_tip * 0.1 * 2], [-m_tip * 0.1 * 2, m_tip * 4.0]]
        )
        np.testing.assert_allclose(jb.mass_matrix(m, c), M, atol=1e-12)
        # gravity: V = g (m_rod y_rod + m_tip y_tip), y = world height of each COM
        g = 9.81
        sin, cos = np.sin(theta), np.cos(theta)
        dV = np.array([g * (m_rod * 0.5 * sin + m_tip * (r * sin + d[0] * cos)), g * m_tip * (-2 * cos)])
        tau = jb.inverse_dynamics(m, c, jnp.zeros(2), jnp.zeros(2))
        np.testing.assert_allclose(tau, dV, atol=1e-12)


def test_chained_offset_frames_and_relative_paths(tmp_path):
    """A joint frame whose parent is a frame in the body's <components> (relative socket paths,
    a bare legacy name): the same tree as one offset frame holding the composed pose."""
    chained = (
        TINY.replace(
            "<socket_parent>/bodyset/rod</socket_parent>\n              <translation>0 0 0</translation>",
            "<socket_parent>../../../bodyset/rod/inner</socket_parent>\n              <translation>0 0.2 0</translation>",
        )
        .replace(
            '<Body name="rod"><mass>2</mass>',
            '<Body name="rod"><components><PhysicalOffsetFrame name="inner"><socket_parent>..</socket_parent>'
            "<translation>0.1 0 0</translation><orientation>0 0 0.5</orientation></PhysicalOffsetFrame>"
            "</components><mass>2</mass>",
        )
        .replace(
            "<socket_parent_frame>/ground</socket_parent_frame>", "<socket_parent_frame>ground</socket_parent_frame>"
        )
    )
    p = np.array([0.1 - 0.2 * np.sin(0.5), 0.2 * np.cos(0.5), 0.0])
    single = TINY.replace(
        "<translation>0 0 0</translation><orientation>0 0 0</orientation>\n            </PhysicalOffsetFrame>",
        f"<translation>{float(p[0])!r} {float(p[1])!r} 0</translation><orientation>0 0 0.5</orientation>\n"
        "            </PhysicalOffsetFrame>",
    )
    assert chained != TINY and single != TINY
    with jax.enable_x64(True):
        a = load_osim(write(tmp_path, chained, "chained.osim"), dtype=jnp.float64)
        b = load_osim(write(tmp_path, single, "single.osim"), dtype=jnp.float64)
        for field in ("origins", "orientations", "masses", "coms", "inertias", "axes"):
            np.testing.assert_allclose(getattr(a.tree, field), getattr(b.tree, field), atol=1e-14)
        np.testing.assert_allclose(a.body_positions, b.body_positions, atol=1e-14)
        # the rod's COM in the segment (joint child) frame: Rᵀ (com − p)
        R = np.array([[np.cos(0.5), -np.sin(0.5), 0], [np.sin(0.5), np.cos(0.5), 0], [0, 0, 1]])
        np.testing.assert_allclose(a.tree.coms[0], R.T @ (np.array([0.0, -0.5, 0.0]) - p), atol=1e-14)


@pytest.mark.parametrize("filename", ["arm26.osim", "arm26_3x.osim"])
def test_arm26_equals_the_shipped_model(filename):
    """The shipped jaxbio/models/arm26.json (base folded into the world) and the imported file
    (base a massless welded segment) have the same dynamics."""
    with jax.enable_x64(True):
        m = load_osim(DATA / filename, dtype=jnp.float64)
        shipped = jb.load_model("arm26", dtype=jnp.float64).tree
        assert m.coordinate_names == ("r_shoulder_elev", "r_elbow_flex")
        assert m.tree.names == ("base", "r_humerus", "r_ulna_radius_hand") and m.tree.joint_types[0] == "fixed"
        assert m.coordinates.source == (0, 1)
        assert m.ignored == ()  # muscles and wraps: m.muscles; markers: m.markers
        assert m.markers.n_markers == 3
        assert len(m.muscles.names) == 6 and len(m.muscles.paths.wrap_objects.names) == 4
        seg, p, _ = m.body_frame("base")
        np.testing.assert_allclose(jb.forward_kinematics(m.tree, jnp.zeros(2))[0][seg] + p, [0, 0.8, 0])
        rng = np.random.default_rng(0)
        for _ in range(3):
            c, cd, cdd = (jnp.asarray(rng.uniform(-1.5, 1.5, 2)) for _ in range(3))
            np.testing.assert_allclose(
                jb.inverse_dynamics(m, c, cd, cdd),
                jb.inverse_dynamics(shipped, c, cd, cdd),
                rtol=1e-12,
                atol=1e-12,
            )
            np.testing.assert_allclose(jb.mass_matrix(m, c), jb.mass_matrix(shipped, c), rtol=1e-12, atol=1e-14)


def test_gait_model_reading():
    m4 = load_osim(DATA / "gait10dof18musc.osim")
    m3 = load_osim(DATA / "gait10dof18musc_3x.osim")
    for m in (m4, m3):
        assert m.coordinate_names == (
            "pelvis_tilt",
            "pelvis_tx",
            "pelvis_ty",
            "hip_flexion_r",
            "knee_angle_r",
            "ankle_angle_r",
            "hip_flexion_l",
            "knee_angle_l",
            "ankle_angle_l",
            "lumbar_extension",
        )
        assert m.tree.nq == 14  # the knees' two spline translations each
        knee = m.coordinate_index("knee_angle_r")
        assert m.coordinates.source.count(knee) == 3
        assert m.ignored == () and len(m.muscles.millard_index) == 18
        assert m.tree.joint_types.count("fixed") == 4  # subtalar and mtp welds
        np.testing.assert_allclose(m.defaults[2], 0.95)
        np.testing.assert_allclose(m.tree.gravity, [0, -9.80665, 0])
        assert m.bodies[0] == "ground" and m.body_segments[0] == -1
    for field in ("origins", "orientations", "masses", "coms", "inertias", "axes"):
        np.testing.assert_allclose(getattr(m3.tree, field), getattr(m4.tree, field), atol=1e-7)
    assert m3.tree.names == m4.tree.names


def test_float32():
    with jax.enable_x64(True):
        m64 = load_osim(DATA / "arm26.osim", dtype=jnp.float64)
        m32 = load_osim(DATA / "arm26.osim", dtype=jnp.float32)
        assert m32.tree.masses.dtype == jnp.float32 and m32.coordinates.coefficients.dtype == jnp.float32
        assert m32.body_positions.dtype == m32.defaults.dtype == jnp.float32
        c, cd, cdd = np.random.default_rng(1).uniform(-1, 1, (3, 2))
        f64 = jb.inverse_dynamics(m64, c, cd, cdd)
        f32 = jb.inverse_dynamics(m32, *(jnp.asarray(x, jnp.float32) for x in (c, cd, cdd)))
        assert f32.dtype == jnp.float32
        np.testing.assert_allclose(f32, f64, rtol=1e-4, atol=1e-5)


# ---- refusals --------------------------------------------------------------------------------

CUSTOM_ROTATION1 = (
    '<TransformAxis name="rotation1"><coordinates></coordinates><axis>1 0 0</axis>'
    '<Constant name="function"><value>0</value></Constant></TransformAxis>'
)
BAD = {
    "not XML": ("just text", None, "not an XML file"),
    "not OpenSim": ("<Scene><Model/></Scene>", None, "not an OpenSim model"),
    "joint type": (TINY.replace("PinJoint", "EllipsoidJoint"), "EllipsoidJoint 'pin'", "not supported"),
    "function type": (
        TINY.replace("LinearFunction", "StepFunction"),
        "TransformAxis 'translation2'",
        "function type 'StepFunction' is not supported",
    ),
    "GCVSpline": (TINY.replace("LinearFunction", "GCVSpline"), "CustomJoint 'slide'", "GCVSpline"),
    "two coordinates": (
        TINY.replace("<coordinates>stretch</coordinates>", "<coordinates>stretch angle</coordinates>"),
        "CustomJoint 'slide': TransformAxis 'translation2'",
        "function of 2 coordinates",
    ),
    "missing body": (
        TINY.replace("/bodyset/tip</socket_child_frame>", "/bodyset/tipp</socket_child_frame>"),
        "CustomJoint 'slide'",
        "no body or frame '/bodyset/tipp'",
    ),
    "missing frame body": (
        TINY.replace("<socket_parent>/bodyset/rod", "<socket_parent>/bodyset/nothing"),
        "PhysicalOffsetFrame 'rod_offset'",
        "no body or frame '/bodyset/nothing'",
    ),
    "parent never placed": (
        TINY.replace(
            "<socket_parent_frame>/ground</socket_parent_frame>",
            "<socket_parent_frame>/bodyset/tip</socket_parent_frame>",
        ),
        "PinJoint 'pin'",
        "parent body 'tip' is not connected to the ground",
    ),
    "no joint": (
        TINY.replace(
            "</objects>\n    </BodySet>", "<Body name='loose'><mass>1</mass></Body></objects>\n    </BodySet>"
        ),
        "Body 'loose'",
        "attached to the model by no joint",
    ),
    "loop": (
        TINY.replace("/bodyset/tip</socket_child_frame>", "/bodyset/rod</socket_child_frame>"),
        "CustomJoint 'slide'",
        "parent and child frames are on the same body 'rod'",
    ),
    "two joints": (
        TINY.replace(
            "<socket_parent_frame>/bodyset/rod</socket_parent_frame>\n          "
            "<socket_child_frame>/bodyset/tip</socket_child_frame>",
            "<socket_parent_frame>/ground</socket_parent_frame>\n          "
            "<socket_child_frame>/bodyset/rod</socket_child_frame>",
        ),
        "CustomJoint 'slide'",
        "kinematic loop",
    ),
    "reversed": (
        TINY.replace("<socket_child_frame>/bodyset/tip", "<socket_child_frame>/ground"),
        "CustomJoint 'slide'",
        "reversed joint",
    ),
    "collinear": (
        TINY.replace(CUSTOM_ROTATION1, CUSTOM_ROTATION1.replace("1 0 0", "0 0 2")),
        "CustomJoint 'slide'",
        "'rotation1' and 'rotation3' are collinear",
    ),
    "no mass": (TINY.replace("<mass>0.5</mass>", ""), "Body 'tip'", "missing <mass>"),
    "negative mass": (TINY.replace("<mass>0.5</mass>", "<mass>-0.5</mass>"), "Body 'tip'", "must be >= 0"),
    "bad number": (
        TINY.replace("<range>0 1</range>", "<range>0 one</range>"),
        "Coordinate 'stretch'",
        "<range> is not a list of numbers",
    ),
    "duplicate coordinate": (
        TINY.replace('"stretch"', '"angle"').replace(">stretch<", ">angle<"),
        "CustomJoint 'slide'",
        "coordinate name 'angle' is already used by PinJoint 'pin'",
    ),
    "spline knots": (
        TINY.replace(
            '<LinearFunction name="function"><coefficients>-2 -1</coefficients></LinearFunction>',
            '<SimmSpline name="function"><x>0 1 0.5</x><y>0 1 2</y></SimmSpline>',
        ),
        "SimmSpline 'function'",
        "x must be strictly increasing",
    ),
    "no function": (
        TINY.replace('<LinearFunction name="function"><coefficients>-2 -1</coefficients></LinearFunction>', ""),
        "TransformAxis 'translation2'",
        "coordinate 'stretch' but no function",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_are_refused_naming_element_and_file(case, tmp_path):
    text, element, message = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        load_osim(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg
    assert message in msg, msg
    if element is not None:
        assert element in msg, msg


def test_refusals_of_3x_files_and_paths(tmp_path):
    text = (DATA / "arm26_3x.osim").read_text()
    path = write(tmp_path, text.replace("<reverse>false</reverse>", "<reverse>true</reverse>", 2))
    with pytest.raises(ValueError, match=r"WeldJoint 'offset': reversed joints"):
        load_osim(path)
    path = write(tmp_path, text.replace("<parent_body>base</parent_body>", "<parent_body>bass</parent_body>"))
    with pytest.raises(ValueError, match=r"CustomJoint 'r_shoulder': parent body 'bass' is not in the BodySet"):
        load_osim(path)
    with pytest.raises(ValueError, match="no such file"):
        load_osim(tmp_path / "missing.osim")
    with pytest.raises(ValueError, match="non-empty"):
        load_osim("")


def test_copies_of_a_model_are_parsed_once_and_keep_their_own_path(tmp_path):
    """A session of setups naming copies of one model reads it once: a copy gives the same arrays
    under its own path; an edited copy is read anew, and each dtype has its own model."""
    import jaxbio.io.osim as osim

    text = (DATA / "arm26.osim").read_text(encoding="utf-8")
    first, second = tmp_path / "a" / "arm26.osim", tmp_path / "b" / "arm26.osim"
    for p in (first, second):
        p.parent.mkdir()
        p.write_text(text, encoding="utf-8")
    calls = []
    original = osim._parse
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(osim, "_PARSED", {})  # this process's earlier tests read arm26 too
        a = load_osim(first, dtype=jnp.float32)
        patch.setattr(osim, "_parse", lambda *args: calls.append(args) or original(*args))
        b = load_osim(second, dtype=jnp.float32)
        assert calls == [] and b.tree is a.tree and (a.path, b.path) == (str(first), str(second))
        c = load_osim(second, dtype=jnp.float64 if jax.config.jax_enable_x64 else jnp.float16)
        assert len(calls) == 1 and c.tree.masses.dtype != a.tree.masses.dtype
        second.write_text(text.replace("<mass>1.8645719999999999</mass>", "<mass>2.5</mass>", 1), encoding="utf-8")
        d = load_osim(second, dtype=jnp.float32)
        assert len(calls) == 2
    assert not np.array_equal(np.asarray(d.tree.masses), np.asarray(a.tree.masses))
