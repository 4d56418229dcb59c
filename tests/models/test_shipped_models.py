"""The shipped model files (jaxbio/models/*.json), checked with json + numpy only (no jaxbio import).

Checks the format rules of API.md, the documented DOFs, body masses and sign conventions
(jaxbio/models/README.md), and that the files are what jaxbio/models/_build.py generates.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from tests._models import REPO

MODELS_DIR = REPO / "jaxbio" / "models"
BODY_MASS = 73.0  # kg, de Leva (1996) Table 4 reference male
STATURE = 1.741  # m
ANKLE_HEIGHT = 0.039 * STATURE
HIP_HEIGHT = 0.4222 + 0.4340 + ANKLE_HEIGHT  # thigh + shank (de Leva) + ankle height

# name -> (segment names in q order, gravity, anthropometric mass in kg, the virtual (massless) segments)
EXPECTED = {
    "double_pendulum": (["rod1", "rod2"], [0, -9.81, 0], 2.0, ()),
    "arm7": (
        ["shoulder_flexion", "shoulder_abduction", "upper_arm", "elbow_flexion", "forearm", "wrist_flexion", "hand"],
        [0, 0, -9.81],
        BODY_MASS * (2.71 + 1.62 + 0.61) / 100,  # upper arm + forearm + hand
        ("shoulder_flexion", "shoulder_abduction", "elbow_flexion", "wrist_flexion"),
    ),
    "sagittal11": (
        ["base_x", "base_y", "trunk"] + [f"{seg}_{s}" for s in "rl" for seg in ("thigh", "shank", "foot", "toes")],
        [0, -9.81, 0],
        BODY_MASS,
        ("base_x", "base_y"),
    ),
    "wholebody": (
        ["pelvis", "torso", "head"]
        + [f"{seg}_{s}" for s in "rl" for seg in ("upper_arm", "forearm")]
        + [f"{seg}_{s}" for s in "rl" for seg in ("thigh", "shank", "foot")],
        [0, 0, -9.81],
        BODY_MASS,
        (),
    ),
}
# configuration and velocity sizes (API.md: revolute/prismatic 1/1, spherical 4/3, free 7/6, fixed 0/0)
JOINT_NQ = {"revolute": 1, "prismatic": 1, "spherical": 4, "free": 7, "fixed": 0}
JOINT_NV = {"revolute": 1, "prismatic": 1, "spherical": 3, "free": 6, "fixed": 0}
NQ = {"double_pendulum": 2, "arm7": 7, "sagittal11": 11, "wholebody": 34}
NV = {"double_pendulum": 2, "arm7": 7, "sagittal11": 11, "wholebody": 28}
PLANAR = ("double_pendulum", "sagittal11")


def load(name: str) -> dict:
    return json.loads((MODELS_DIR / f"{name}.json").read_text())


def by_name(d: dict) -> dict:
    return {s["name"]: s for s in d["segments"]}


def axis_angle_matrix(axis, angle) -> np.ndarray:
    """Rodrigues: rotation by ``angle`` about unit ``axis`` (active)."""
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def quat_matrix(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def frames(d: dict, q: dict | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """World (position, rotation matrix) of every segment frame, API.md kinematics; ``q`` by segment
    name: an angle or slide (revolute/prismatic), a quaternion (w, x, y, z) (spherical), a pair
    (translation, quaternion) (free); missing names stay at the neutral configuration."""
    q = q or {}
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for s in d["segments"]:
        p0, R0 = out[s["parent"]] if s["parent"] is not None else (np.zeros(3), np.eye(3))
        j = s["joint"]
        p = p0 + R0 @ np.asarray(j["origin"], float)
        R = R0 @ quat_matrix(j["orientation"])
        if j["type"] == "revolute":
            R = R @ axis_angle_matrix(j["axis"], q.get(s["name"], 0.0))
        elif j["type"] == "prismatic":
            p = p + R @ (q.get(s["name"], 0.0) * np.asarray(j["axis"], float) / np.linalg.norm(j["axis"]))
        elif j["type"] == "spherical":
            R = R @ quat_matrix(q.get(s["name"], (1.0, 0.0, 0.0, 0.0)))
        elif j["type"] == "free":
            translation, quaternion = q.get(s["name"], ((0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0)))
            p = p + R @ np.asarray(translation, float)
            R = R @ quat_matrix(quaternion)
        else:
            assert j["type"] == "fixed", j["type"]
        out[s["name"]] = (p, R)
    return out


def world_com(d: dict, name: str, q: dict[str, float] | None = None) -> np.ndarray:
    p, R = frames(d, q)[name]
    return p + R @ np.asarray(by_name(d)[name]["com"], float)


# ---------------------------------------------------------------------------------------------
# Format rules (API.md)
# ---------------------------------------------------------------------------------------------


#: shipped models generated from OpenSim data by jaxbio/muscles/sets.py, not by models/_build.py
FROM_OPENSIM = {"arm26"}


def test_every_model_is_shipped_and_nothing_else():
    assert sorted(p.stem for p in MODELS_DIR.glob("*.json")) == sorted(set(EXPECTED) | FROM_OPENSIM)


@pytest.mark.parametrize("name", EXPECTED)
def test_header(name):
    d = load(name)
    assert d["format"] == "jaxbio-model"
    assert d["version"] == 1
    assert d["name"] == name
    np.testing.assert_array_equal(d["gravity"], EXPECTED[name][1])
    assert isinstance(d["segments"], list) and d["segments"]


@pytest.mark.parametrize("name", EXPECTED)
def test_segments_and_dof_order(name):
    d = load(name)
    names = [s["name"] for s in d["segments"]]
    assert names == EXPECTED[name][0]
    assert sum(JOINT_NQ[s["joint"]["type"]] for s in d["segments"]) == NQ[name]
    assert sum(JOINT_NV[s["joint"]["type"]] for s in d["segments"]) == NV[name]
    assert len(set(names)) == len(names)
    seen = set()
    for s in d["segments"]:
        assert set(s) >= {"name", "parent", "joint", "mass", "com", "inertia"}
        assert s["parent"] is None or s["parent"] in seen, f"{s['name']}: parent must be listed earlier"
        seen.add(s["name"])


@pytest.mark.parametrize("name", EXPECTED)
def test_joints(name):
    for s in load(name)["segments"]:
        j = s["joint"]
        assert j["type"] in JOINT_NQ, s["name"]
        assert np.shape(j["origin"]) == (3,) and np.shape(j["orientation"]) == (4,)
        assert np.all(np.isfinite(j["origin"]))
        if j["type"] in ("revolute", "prismatic"):
            assert np.shape(j["axis"]) == (3,)
            assert np.linalg.norm(j["axis"]) == pytest.approx(1.0, abs=1e-12), s["name"]
        else:  # spherical, free, fixed: no axis (API.md)
            assert "axis" not in j, s["name"]
        assert np.linalg.norm(j["orientation"]) == pytest.approx(1.0, abs=1e-9), s["name"]


@pytest.mark.parametrize("name", EXPECTED)
def test_inertial_parameters_are_a_rigid_body(name):
    """Every segment with mass is a rigid body with a positive-definite inertia; the virtual ones are
    massless frames (checked in `test_total_mass_is_the_anthropometric_mass`)."""
    for s in load(name)["segments"]:
        assert np.isfinite(s["mass"]) and s["mass"] >= 0, s["name"]
        assert np.shape(s["com"]) == (3,) and np.all(np.isfinite(s["com"]))
        inertia = np.asarray(s["inertia"], float)
        assert inertia.shape == (3, 3)
        np.testing.assert_array_equal(inertia, inertia.T, err_msg=s["name"])
        if s["name"] in EXPECTED[name][3]:
            continue
        assert s["mass"] > 0, s["name"]
        a, b, c = np.linalg.eigvalsh(inertia)
        assert a > 0, f"{s['name']}: not positive-definite"
        assert c <= a + b, f"{s['name']}: principal moments break the triangle inequality"


@pytest.mark.parametrize("name", EXPECTED)
def test_total_mass_is_the_anthropometric_mass(name):
    """The virtual links of a multi-DOF joint are massless frames (mass 0, COM at the origin, inertia
    0; README "Virtual segments"), every other segment carries mass, and the total is exactly the
    anthropometric mass."""
    d = load(name)
    _, _, body_mass, virtual = EXPECTED[name]
    massless = [s["name"] for s in d["segments"] if s["mass"] == 0]
    assert massless == list(virtual)
    for s in d["segments"]:
        if s["name"] in virtual:
            np.testing.assert_array_equal(s["com"], [0, 0, 0], err_msg=s["name"])
            np.testing.assert_array_equal(s["inertia"], np.zeros((3, 3)), err_msg=s["name"])
    total = sum(s["mass"] for s in d["segments"])
    assert total == pytest.approx(body_mass, rel=1e-6)


@pytest.mark.parametrize("name", PLANAR)
def test_planar_models_stay_in_the_plane(name):
    """Revolute axes +z, prismatic axes in the x-y plane, everything at z = 0, inertia decoupled
    from z so that motion about z never leaves the plane."""
    for s in load(name)["segments"]:
        j = s["joint"]
        if j["type"] == "revolute":
            np.testing.assert_array_equal(j["axis"], [0, 0, 1])
        else:
            assert j["axis"][2] == 0
        assert j["origin"][2] == 0 and s["com"][2] == 0
        np.testing.assert_array_equal(j["orientation"], [1, 0, 0, 0])
        inertia = np.asarray(s["inertia"])
        assert inertia[0, 2] == inertia[1, 2] == 0


# ---------------------------------------------------------------------------------------------
# Model contents
# ---------------------------------------------------------------------------------------------


def test_double_pendulum_numbers():
    """Watanabe & Duarte's notebook: uniform rods m1 = m2 = 1 kg, l1 = 1 m, l2 = 0.5 m, hanging along -y, axes +z."""
    rod1, rod2 = load("double_pendulum")["segments"]
    for s, parent, origin, m, length in ((rod1, None, [0, 0, 0], 1.0, 1.0), (rod2, "rod1", [0, -1, 0], 1.0, 0.5)):
        assert s["parent"] == parent
        assert s["joint"] == {"type": "revolute", "axis": [0, 0, 1], "origin": origin, "orientation": [1, 0, 0, 0]}
        assert s["mass"] == m
        assert s["com"] == [0, -length / 2, 0]
        assert s["inertia"] == [[m * length**2 / 12, 0, 0], [0, 1e-6, 0], [0, 0, m * length**2 / 12]]


def test_arm7_geometry_and_signs():
    d = load("arm7")
    f = frames(d)
    np.testing.assert_allclose(f["upper_arm"][0], [0, 0, 1.4])
    np.testing.assert_allclose(f["forearm"][0], [0, 0, 1.4 - 0.2817])
    np.testing.assert_allclose(f["hand"][0], [0, 0, 1.4 - 0.2817 - 0.2689])
    hand = world_com(d, "hand")
    elbow_flexed = {"elbow_flexion": np.pi / 2}
    t = 0.3
    assert world_com(d, "hand", {"shoulder_flexion": t})[0] > hand[0] + 0.1  # arm forward
    assert frames(d, {"shoulder_abduction": t})["forearm"][0][1] < -0.05  # right arm outward (-y)
    # internal rotation with the elbow at 90°: the forearm swings medially (+y)
    assert world_com(d, "hand", {**elbow_flexed, "upper_arm": t})[1] > 0.05
    assert world_com(d, "hand", elbow_flexed)[0] > 0.3  # elbow flexion: forearm forward
    # pronation from the anatomical position turns the palm normal (+x) medially (+y)
    palm = frames(d, {"forearm": t})["hand"][1] @ [1, 0, 0]
    assert palm[1] > 0.25
    assert world_com(d, "hand", {"wrist_flexion": t})[0] > 0.01  # towards the palm
    assert world_com(d, "hand", {"hand": t})[1] > 0.01  # ulnar deviation: medially


def test_sagittal11_stands_upright_and_signs():
    d = load("sagittal11")
    f = frames(d)
    np.testing.assert_allclose(f["trunk"][0], [0, HIP_HEIGHT, 0])
    for s in "rl":
        np.testing.assert_allclose(f[f"foot_{s}"][0], [0, ANKLE_HEIGHT, 0], atol=1e-12)
        assert f[f"toes_{s}"][0][1] == pytest.approx(0, abs=1e-12)  # MTP on the sole line
        assert f[f"toes_{s}"][0][0] > 0.1  # forward of the ankle
    assert world_com(d, "trunk")[1] > HIP_HEIGHT + 0.2
    t = 0.3
    assert world_com(d, "trunk", {"trunk": t})[0] < -0.05  # positive trunk angle leans backward
    assert f["shank_r"][0][0] == 0 and frames(d, {"thigh_r": t})["shank_r"][0][0] > 0.1  # hip flexion
    assert frames(d, {"shank_r": -t})["foot_r"][0][0] < -0.1  # knee flexion is negative
    assert frames(d, {"foot_r": t})["toes_r"][0][1] > 0.03  # dorsiflexion lifts the MTP
    assert world_com(d, "toes_r", {"toes_r": t})[1] > 0.005  # toe extension lifts the toes
    assert frames(d, {"base_x": 0.2, "base_y": -0.1})["trunk"][0] == pytest.approx([0.2, HIP_HEIGHT - 0.1, 0])


def test_sagittal11_foot_plus_toes_is_de_levas_foot():
    """At q = 0 the split foot has de Leva's foot mass, COM (44.15 % of HEEL-TTIP) and inertia."""
    d = load("sagittal11")
    segs = by_name(d)
    foot, toes = segs["foot_r"], segs["toes_r"]
    m = foot["mass"] + toes["mass"]
    assert m == pytest.approx(0.0137 * BODY_MASS, rel=1e-9)
    toes_com = np.asarray(toes["joint"]["origin"]) + toes["com"]  # foot frame
    com = (foot["mass"] * np.asarray(foot["com"]) + toes["mass"] * toes_com) / m
    heel = np.array([-0.04877, -ANKLE_HEIGHT, 0])
    np.testing.assert_allclose(com, heel + [0.4415 * 0.2581, 0, 0], atol=1e-9)

    def about(s, c, point):
        d_ = c - point
        return np.asarray(s["inertia"]) + s["mass"] * (d_ @ d_ * np.eye(3) - np.outer(d_, d_))

    inertia = about(foot, np.asarray(foot["com"]), com) + about(toes, toes_com, com)
    radii = np.array([0.124, 0.257, 0.245]) * 0.2581  # long (x), sagittal (y, vertical), transverse (z)
    np.testing.assert_allclose(inertia, np.diag(m * radii**2), rtol=1e-8, atol=1e-12)


def test_wholebody_stands_and_is_symmetric():
    d = load("wholebody")
    f = frames(d)
    segs = by_name(d)
    np.testing.assert_allclose(f["pelvis"][0], [0, 0, HIP_HEIGHT])
    for s, y in (("r", -1), ("l", 1)):
        np.testing.assert_allclose(f[f"thigh_{s}"][0], [0, y * 0.0835, HIP_HEIGHT])
        np.testing.assert_allclose(f[f"foot_{s}"][0], [0, y * 0.0835, ANKLE_HEIGHT], atol=1e-12)
        assert f[f"upper_arm_{s}"][0][1] == pytest.approx(y * 0.17)
    # mirror symmetry of the two sides
    mirror = np.diag([1, -1, 1])
    for name in segs:
        if name.endswith("_r"):
            r, l = segs[name], segs[name[:-2] + "_l"]
            assert r["mass"] == l["mass"]
            np.testing.assert_allclose(mirror @ r["com"], l["com"])
            np.testing.assert_allclose(mirror @ np.asarray(r["inertia"]) @ mirror, l["inertia"])
            np.testing.assert_allclose(mirror @ f[name][0], f[name[:-2] + "_l"][0])
    # whole-body COM of a standing adult: about 55-57 % of stature (e.g. Winter 2009)
    total = sum(s["mass"] for s in d["segments"])
    com = sum(s["mass"] * world_com(d, n) for n, s in segs.items()) / total
    assert 0.53 * STATURE < com[2] < 0.59 * STATURE
    assert abs(com[0]) < 0.03 and abs(com[1]) < 1e-9


def rotation(axis, angle) -> tuple[float, float, float, float]:
    """The quaternion (w, x, y, z) of a rotation by ``angle`` about the unit ``axis``."""
    return (np.cos(angle / 2), *(np.sin(angle / 2) * np.asarray(axis, float)))


def test_wholebody_joints():
    """No dummy segments: a free pelvis at the root, ball joints where the anatomy has three
    rotations (lumbar, shoulders, hips), hinges elsewhere, and every segment an anthropometric body
    (nothing below 1e-3 kg; the model has no deliberate massless frames), summing to de Leva's 73 kg."""
    d = load("wholebody")
    segs = by_name(d)
    types = {n: s["joint"]["type"] for n, s in segs.items()}
    assert [n for n, s in segs.items() if s["parent"] is None] == ["pelvis"]
    assert types["pelvis"] == "free"
    balls = {"torso"} | {f"{b}_{s}" for s in "rl" for b in ("upper_arm", "thigh")}
    assert {n for n, t in types.items() if t == "spherical"} == balls
    assert all(t == "revolute" for n, t in types.items() if n not in balls | {"pelvis"})
    assert all(s["mass"] >= 1e-3 for s in segs.values()), {n: s["mass"] for n, s in segs.items()}
    assert sum(s["mass"] for s in segs.values()) == pytest.approx(BODY_MASS, rel=1e-9)
    for s in segs.values():  # no dummy inertia either
        assert np.linalg.eigvalsh(s["inertia"])[0] > 1e-5, s["name"]


def test_wholebody_signs():
    """Each joint moved alone from the neutral configuration; a ball joint by a rotation about one
    of the axes of the old hinge chain (the anatomical names of the README)."""
    d = load("wholebody")
    t = 0.3
    X, Y, Z = np.eye(3)

    def moved(name, segment, q, point="frame"):
        qq = {segment: ((0.0, 0.0, 0.0), q) if segment == "pelvis" else q}
        get = (lambda x: frames(d, x)[name][0]) if point == "frame" else (lambda x: world_com(d, name, x))
        return get(qq) - get({})

    assert moved("torso", "pelvis", rotation(Y, t), point="com")[0] > 0.01  # anterior tilt: trunk forward
    assert moved("thigh_l", "pelvis", rotation(X, t))[2] > 0.01  # list: left hip up
    assert moved("thigh_r", "pelvis", rotation(Z, t))[0] > 0.01  # rotation to the left: right hip forward
    shifted = frames(d, {"pelvis": ((0.2, -0.1, 0.05), (1.0, 0.0, 0.0, 0.0))})["pelvis"][0]
    np.testing.assert_allclose(shifted, [0.2, -0.1, HIP_HEIGHT + 0.05])  # free-joint translation
    assert moved("head", "torso", rotation(Y, t))[0] > 0.05  # lumbar flexion: forward bending
    assert moved("head", "torso", rotation(X, t))[1] < -0.05  # bending to the right
    assert moved("upper_arm_r", "torso", rotation(Z, t))[0] > 0.03  # axial rotation to the left
    assert moved("head", "head", t, point="com")[0] > 0.02  # nodding forward
    for s, y in (("r", -1), ("l", 1)):
        assert moved(f"forearm_{s}", f"upper_arm_{s}", rotation(-Y, t))[0] > 0.05  # shoulder flexion
        assert y * moved(f"forearm_{s}", f"upper_arm_{s}", rotation(y * X, t))[1] > 0.05  # abduction: outward
        assert moved(f"forearm_{s}", f"forearm_{s}", t, point="com")[0] > 0.03  # elbow flexion
        assert moved(f"shank_{s}", f"thigh_{s}", rotation(-Y, t))[0] > 0.1  # hip flexion
        assert -y * moved(f"shank_{s}", f"thigh_{s}", rotation(-y * X, t))[1] > 0.1  # adduction: towards the midline
        # hip internal rotation: toes in
        assert -y * moved(f"foot_{s}", f"thigh_{s}", rotation(-y * Z, t), point="com")[1] > 0.01
        assert moved(f"foot_{s}", f"shank_{s}", t)[0] < -0.1  # knee flexion: ankle backward
        assert moved(f"foot_{s}", f"foot_{s}", t, point="com")[2] > 0.005  # dorsiflexion: forefoot up


def test_files_match_the_build_script():
    """jaxbio/models/_build.py is numpy-only and runs as a plain script; --check compares."""
    script = MODELS_DIR / "_build.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
