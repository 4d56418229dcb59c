"""Markers in OpenSim models (`jaxbio.markers.marker_positions`) and OpenSim's InverseKinematicsTool
(`jaxbio.tools.inverse_kinematics_tool`, ``jaxbio run-tool``), against live OpenSim 4.6 where it is
installed and against synthetic markers of known poses."""

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.tools import CoordinateTask

DATA = Path(__file__).parent / "data"
G2354 = DATA / "gait2354_ik"
MODEL = G2354 / "subject01_simbody.osim"

#: a 4.x model: a slider along x, then a pin about z, a marker on a PhysicalOffsetFrame
TINY = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="40000">
<Model name="tiny">
 <Ground name="ground"/>
 <gravity>0 -9.81 0</gravity>
 <BodySet><objects>
  <Body name="cart"><mass>1</mass><mass_center>0 0 0</mass_center><inertia>0.1 0.1 0.1 0 0 0</inertia></Body>
  <Body name="arm"><mass>1</mass><mass_center>0 -0.5 0</mass_center><inertia>0.1 0.1 0.1 0 0 0</inertia>
   <components><PhysicalOffsetFrame name="tip"><socket_parent>..</socket_parent>
    <translation>0 -1 0</translation><orientation>0 0 0.3</orientation></PhysicalOffsetFrame></components>
  </Body>
 </objects></BodySet>
 <JointSet><objects>
  <SliderJoint name="slide"><socket_parent_frame>ground_offset</socket_parent_frame>
   <socket_child_frame>cart_offset</socket_child_frame>
   <coordinates><Coordinate name="x"><default_value>0</default_value><range>-2 2</range>
    <clamped>{clamped}</clamped></Coordinate></coordinates>
   <frames>
    <PhysicalOffsetFrame name="ground_offset"><socket_parent>/ground</socket_parent>
     <translation>0 1 0</translation><orientation>0 0 0</orientation></PhysicalOffsetFrame>
    <PhysicalOffsetFrame name="cart_offset"><socket_parent>/bodyset/cart</socket_parent>
     <translation>0 0 0</translation><orientation>0 0 0</orientation></PhysicalOffsetFrame>
   </frames></SliderJoint>
  <PinJoint name="pin"><socket_parent_frame>cart_offset</socket_parent_frame>
   <socket_child_frame>arm_offset</socket_child_frame>
   <coordinates><Coordinate name="angle"><default_value>0.1</default_value><range>-1 1</range>
    <clamped>{clamped}</clamped><locked>{locked}</locked></Coordinate></coordinates>
   <frames>
    <PhysicalOffsetFrame name="cart_offset"><socket_parent>/bodyset/cart</socket_parent>
     <translation>0.1 0 0</translation><orientation>0 0 0</orientation></PhysicalOffsetFrame>
    <PhysicalOffsetFrame name="arm_offset"><socket_parent>/bodyset/arm</socket_parent>
     <translation>0 0 0</translation><orientation>0 0 0</orientation></PhysicalOffsetFrame>
   </frames></PinJoint>
 </objects></JointSet>
 <MarkerSet><objects>
  <Marker name="cart"><socket_parent_frame>/bodyset/cart</socket_parent_frame><location>0 0.1 0.2</location></Marker>
  <Marker name="elbow"><socket_parent_frame>/bodyset/arm</socket_parent_frame><location>0.05 -0.5 0</location>
   <fixed>true</fixed></Marker>
  <Marker name="tip"><socket_parent_frame>/bodyset/arm/tip</socket_parent_frame><location>0.1 0 0</location></Marker>
  <Marker name="lab"><socket_parent_frame>/ground</socket_parent_frame><location>1 2 3</location></Marker>
 </objects></MarkerSet>
</Model>
</OpenSimDocument>
"""


def _tiny(tmp_path, clamped="false", locked="false"):
    path = tmp_path / f"tiny_{clamped}_{locked}.osim"
    path.write_text(TINY.format(clamped=clamped, locked=locked))
    return jb.io.load_osim(path, dtype=jnp.float64), path


def _trc(path, time, names, xyz, unit="m"):
    """A .trc of ``xyz`` (T, m, 3) in metres (NaN: an empty cell), written in ``unit``."""
    scale = {"m": 1.0, "mm": 1000.0}[unit]
    lines = [
        f"PathFileType\t4\t(X/Y/Z)\t{path.name}",
        "DataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\tOrigDataRate\tOrigDataStartFrame\tOrigNumFrames",
        f"100\t100\t{len(time)}\t{len(names)}\t{unit}\t100\t1\t{len(time)}",
        "Frame#\tTime\t" + "\t\t\t".join(names),
        "\t\t" + "\t".join(f"{a}{k + 1}" for k in range(len(names)) for a in "XYZ"),
        "",
    ]
    for i, t in enumerate(time):
        cells = ["" if np.isnan(v) else repr(float(v) * scale) for v in np.asarray(xyz[i]).reshape(-1)]
        lines.append(f"{i + 1}\t{t}\t" + "\t".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


# ---- markers in the model ---------------------------------------------------------------------


def test_markers_are_imported_from_3x_and_4x_files(tmp_path):
    m4 = jb.io.load_osim(MODEL)
    m3 = jb.io.load_osim(DATA / "subject01" / "subject01.osim")
    for m in (m3, m4):
        assert m.markers.n_markers == 39
        assert m.markers.names[0] == "Sternum" and m.markers.bodies[0] == "torso"
        assert not any(e.startswith("MarkerSet") for e in m.ignored)
    tiny, _ = _tiny(tmp_path)
    assert tiny.markers.names == ("cart", "elbow", "tip", "lab")
    assert tiny.markers.bodies == ("cart", "arm", "arm", "ground")
    assert tiny.markers.fixed == (False, True, False, False)
    assert tiny.markers.segments[-1] == -1


def test_marker_positions_vmap_and_gradients(tmp_path):
    with jax.enable_x64(True):
        tiny, _ = _tiny(tmp_path)
        x, a = 0.3, 0.4
        p = np.asarray(jb.markers.marker_positions(tiny, jnp.array([x, a])))
        rot = lambda t: np.array([[np.cos(t), -np.sin(t), 0], [np.sin(t), np.cos(t), 0], [0, 0, 1]])  # noqa: E731
        base = np.array([x, 1.0, 0.0])
        np.testing.assert_allclose(p[0], base + [0, 0.1, 0.2], atol=1e-15)
        np.testing.assert_allclose(p[1], base + [0.1, 0, 0] + rot(a) @ [0.05, -0.5, 0], atol=1e-15)
        np.testing.assert_allclose(
            p[2], base + [0.1, 0, 0] + rot(a) @ ([0, -1, 0] + rot(0.3) @ [0.1, 0, 0]), atol=1e-15
        )
        np.testing.assert_allclose(p[3], [1, 2, 3], atol=0)
        cs = jnp.array([[0.1, 0.2], [0.3, -0.4]])
        batch = jax.vmap(jb.markers.marker_positions, (None, 0))(tiny, cs)
        np.testing.assert_allclose(batch[1], jb.markers.marker_positions(tiny, cs[1]), atol=1e-15)
        J = jax.jacfwd(jb.markers.marker_positions, 1)(tiny, jnp.array([x, a]))
        h = 1e-6
        fd = (
            jb.markers.marker_positions(tiny, jnp.array([x, a + h]))
            - jb.markers.marker_positions(tiny, jnp.array([x, a - h]))
        ) / (2 * h)
        np.testing.assert_allclose(J[..., 1], fd, atol=1e-9)
        g = jax.grad(lambda mm: jnp.sum(jb.markers.marker_positions(mm, jnp.array([x, a])) ** 2))(tiny)
        assert np.all(np.isfinite(g.markers.locations)) and np.any(g.markers.locations != 0)


def test_marker_positions_equal_live_opensim():
    opensim = pytest.importorskip("opensim")
    with jax.enable_x64(True):
        m = jb.io.load_osim(MODEL, dtype=jnp.float64)
        om = opensim.Model(str(MODEL))
        s = om.initSystem()
        cs = om.getCoordinateSet()
        rng = np.random.default_rng(0)
        f = jax.jit(jax.vmap(jb.markers.marker_positions, (None, 0)))
        poses, refs = [], []
        for _ in range(4):
            c = np.array(m.defaults)
            for k, name in enumerate(m.coordinate_names):
                lo, hi = np.asarray(m.ranges[k])
                c[k] = rng.uniform(max(lo, -1.5), min(hi, 1.5))
                cs.get(name).setValue(s, c[k], False)
            om.realizePosition(s)
            ms = om.getMarkerSet()
            refs.append([[ms.get(n).getLocationInGround(s)[i] for i in range(3)] for n in m.markers.names])
            poses.append(c)
        np.testing.assert_allclose(f(m, jnp.asarray(np.array(poses))), np.array(refs), rtol=0, atol=1e-9)


# ---- inverse kinematics ----------------------------------------------------------------------------


@pytest.mark.slow
def test_ik_recovers_known_poses_with_gaps_units_and_clamps(tmp_path):
    with jax.enable_x64(True):
        tiny, _ = _tiny(tmp_path, clamped="true")
        T = 6
        c_true = np.stack([np.linspace(-0.5, 0.8, T), np.linspace(0.2, 0.9, T)], 1)
        c_true[-1, 1] = 1.3  # beyond the clamped range [-1, 1]
        xyz = np.array(jax.vmap(jb.markers.marker_positions, (None, 0))(tiny, jnp.asarray(c_true)))
        xyz[2, 2] = np.nan  # the tip occluded in frame 2
        trc = _trc(tmp_path / "t.trc", np.arange(T) * 0.01, tiny.markers.names, xyz, unit="mm")
        with pytest.warns(UserWarning, match=r"tip \(1 of 6 frames\)"):
            r = jb.tools.inverse_kinematics_tool(tiny, trc, marker_weights={"cart": 1, "elbow": 2, "tip": 1, "lab": 1})
        assert r.converged.all()
        np.testing.assert_allclose(r.c[:-1], c_true[:-1], atol=1e-9)
        assert r.c[-1, 1] <= 1.0 + 1e-12 and r.c[-1, 1] > 0.99  # the range holds
        np.testing.assert_allclose(r.errors.data[:-1, 0], 0, atol=1e-12)
        assert r.coordinates.labels == ("x", "angle") and r.coordinates.in_degrees
        np.testing.assert_allclose(r.coordinates.data[:-1, 1], np.degrees(c_true[:-1, 1]), atol=1e-7)


@pytest.mark.slow
def test_ik_coordinate_tasks_and_locks(tmp_path):
    with jax.enable_x64(True):
        tiny, _ = _tiny(tmp_path)
        time = np.arange(8) * 0.01
        c_true = np.stack([0.3 + time, 0.5 + 2 * time], 1)
        xyz = np.array(jax.vmap(jb.markers.marker_positions, (None, 0))(tiny, jnp.asarray(c_true)))
        trc = _trc(tmp_path / "t.trc", time, ("elbow",), xyz[:, 1:2])
        # one marker, the slider held at 0.3 by a heavy manual-value task: the angle follows
        with pytest.warns(UserWarning, match="only 1 markers"):
            r = jb.tools.inverse_kinematics_tool(
                tiny, trc, coordinate_tasks={"x": CoordinateTask(1e6, "manual_value", 0.3)}, end=0.0
            )
        np.testing.assert_allclose(r.c[0], c_true[0], atol=1e-6)
        # from_file: the coordinate file's column (degrees → radians for the angle)
        mot = tmp_path / "c.mot"
        jb.io.write_sto(mot, jb.tools.coordinates_table(tiny, time, c_true))
        with pytest.warns(UserWarning):
            r = jb.tools.inverse_kinematics_tool(
                tiny, trc, coordinate_tasks={"angle": CoordinateTask(1e6, "from_file")}, coordinate_file=mot
            )
        np.testing.assert_allclose(r.c, c_true, atol=1e-6)
        locked, _ = _tiny(tmp_path, locked="true")
        with pytest.warns(UserWarning):
            r = jb.tools.inverse_kinematics_tool(locked, trc, coordinate_tasks={"angle": CoordinateTask(1.0)})
        np.testing.assert_allclose(r.c[:, 1], 0.1, atol=0)  # held at its default, its task dropped


@pytest.mark.slow
def test_ik_solve_differentiates_by_the_implicit_function_theorem(tmp_path):
    """Forward and reverse mode through `solve_inverse_kinematics` (with respect to the
    measurements) against central finite differences of the solve, noisy markers (a nonzero
    residual, so that the Hessian's second-order term matters)."""
    import dataclasses

    with jax.enable_x64(True):
        tiny, _ = _tiny(tmp_path)
        T = 3
        c_true = np.stack([np.linspace(-0.2, 0.3, T), np.linspace(0.2, 0.6, T)], 1)
        xyz = np.array(jax.vmap(jb.markers.marker_positions, (None, 0))(tiny, jnp.asarray(c_true)))
        xyz += 0.01 * np.random.default_rng(0).standard_normal(xyz.shape)
        trc = _trc(tmp_path / "t.trc", np.arange(T) * 0.01, tiny.markers.names, xyz)
        inputs = jb.tools.prepare_inverse_kinematics(tiny, trc)

        @jax.jit
        def solve(observed):
            return jb.tools.solve_inverse_kinematics(tiny, dataclasses.replace(inputs, observed=observed))[0]

        obs = inputs.observed
        v = jnp.asarray(np.random.default_rng(1).standard_normal(obs.shape))
        _, jv = jax.jvp(solve, (obs,), (v,))
        h = 1e-4  # the solve stops at its tolerance (~1e-10): the differences are good to ~1e-6
        fd = (solve(obs + h * v) - solve(obs - h * v)) / (2 * h)
        np.testing.assert_allclose(jv, fd, atol=1e-5 * float(jnp.abs(fd).max()))
        w = jnp.asarray(np.random.default_rng(2).standard_normal(jv.shape))
        g = jax.grad(lambda o: jnp.sum(w * solve(o)))(obs)
        np.testing.assert_allclose(jnp.sum(g * v), jnp.sum(w * jv), rtol=1e-10)


def test_ik_bad_input_is_named(tmp_path):
    tiny, path = _tiny(tmp_path)
    xyz = np.zeros((2, 1, 3))
    trc = _trc(tmp_path / "t.trc", [0.0, 0.01], ("nothere",), xyz)
    with pytest.raises(ValueError, match="no marker of the file is both tracked and in the model"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jb.tools.prepare_inverse_kinematics(tiny, trc)
    trc = _trc(tmp_path / "u.trc", [0.0, 0.01], ("tip", "extra"), np.zeros((2, 2, 3)))
    with pytest.warns(UserWarning) as caught:
        jb.tools.prepare_inverse_kinematics(tiny, trc, marker_weights={"tip": 1.0, "elbow": 1.0, "ghost": 1.0})
    text = " | ".join(str(w.message) for w in caught)
    assert "ghost" in text and "elbow" in text and "extra" in text
    with pytest.raises(ValueError, match="no such coordinate"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jb.tools.prepare_inverse_kinematics(tiny, trc, coordinate_tasks={"knee": CoordinateTask()})
    with pytest.raises(ValueError, match="no coordinate file"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jb.tools.prepare_inverse_kinematics(tiny, trc, coordinate_tasks={"x": CoordinateTask(1, "from_file")})
    with pytest.raises(ValueError, match="has no frames"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jb.tools.prepare_inverse_kinematics(tiny, trc, start=5.0, end=6.0)
    with pytest.raises(ValueError, match="value_type"):
        CoordinateTask(1.0, "from_somewhere")
    bare = tmp_path / "bare.osim"
    bare.write_text(path.read_text().split("<MarkerSet>")[0] + "</Model>\n</OpenSimDocument>\n")
    with pytest.raises(ValueError, match="has no markers"):
        jb.tools.prepare_inverse_kinematics(bare, trc)
    from jaxbio.cli import main

    assert main(["inverse-kinematics", "--model", str(bare), "--markers", str(trc), "--no-progress"]) == 2


def test_ik_tasks_are_read_from_setups():
    from jaxbio.tools import read_ik_tasks
    import xml.etree.ElementTree as ET

    root = ET.parse(G2354 / "subject01_Setup_IK.xml").getroot()
    markers, coords = read_ik_tasks(root.find(".//IKTaskSet"))
    assert len(markers) == 31 and markers["R.ASIS"] == 10 and markers["Top.Head"] == 0.1
    assert list(coords) == ["subtalar_angle_r", "mtp_angle_r", "subtalar_angle_l", "mtp_angle_l"]
    assert coords["mtp_angle_r"] == CoordinateTask(1000.0, "default_value", 0.0)


@pytest.mark.slow
def test_run_tool_ik_matches_live_opensim(tmp_path):
    """gait2354's IK setup on 0.4–0.7 s: jaxbio's goal at every frame is no larger than OpenSim
    4.6's (both evaluated by jaxbio, whose markers equal OpenSim's); the coordinates agree where
    the goal is well determined (OpenSim stops at its accuracy on the flat ones)."""
    pytest.importorskip("opensim")
    ours, theirs = tmp_path / "jaxbio", tmp_path / "opensim"
    for d in (ours, theirs):
        shutil.copytree(G2354, d)
    from jaxbio.cli import main

    assert main(["run-tool", str(ours / "subject01_Setup_IK.xml"), "--no-progress"]) == 0
    live = (  # in a subprocess, as tests/io/test_tool_setups_opensim.py (the tool changes directory)
        "import sys, opensim; opensim.Logger.removeFileSink(); opensim.Logger.setLevelString('error'); "
        "sys.exit(0 if opensim.InverseKinematicsTool(sys.argv[1]).run() else 3)"
    )
    r = subprocess.run(
        [sys.executable, "-c", live, "subject01_Setup_IK.xml"], cwd=theirs, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    a = jb.io.read_storage(ours / "subject01_walk1_ik.mot")
    b = jb.io.read_storage(theirs / "subject01_walk1_ik.mot")
    assert a.labels == b.labels and a.in_degrees and b.in_degrees
    np.testing.assert_allclose(a.time, b.time, atol=1e-12)
    with jax.enable_x64(True):
        m = jb.io.load_osim(MODEL, dtype=jnp.float64)
        from jaxbio.tools import read_ik_tasks
        import xml.etree.ElementTree as ET

        mw, ct = read_ik_tasks(ET.parse(G2354 / "subject01_Setup_IK.xml").getroot().find(".//IKTaskSet"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inputs = jb.tools.prepare_inverse_kinematics(
                m, G2354 / "subject01_walk1_cut.trc", marker_weights=mw, coordinate_tasks=ct, start=0.4, end=0.7
            )
        rot = np.array([t == "rotational" for t in m.motion_types])

        def radians(table):
            x = table.select(m.coordinate_names).data.copy()
            x[:, rot] = np.radians(x[:, rot])
            return jnp.asarray(x)

        goal = jax.vmap(lambda f, c: 0.5 * jnp.sum(jb.tools.inverse_kinematics_residuals(m, f, c) ** 2))
        ga, gb = np.asarray(goal(inputs, radians(a))), np.asarray(goal(inputs, radians(b)))
    assert np.all(ga <= gb + 1e-9), (ga - gb).max()
    diff = np.abs(np.asarray(radians(a)) - np.asarray(radians(b)))
    assert diff[:, ~rot].max() < 1e-4
    assert diff[:, rot].max() < 5e-3  # lumbar rotation: flat, OpenSim stops at accuracy 1e-5
    ea = jb.io.read_storage(ours / "subject01_ik_marker_errors.sto")
    eb = jb.io.read_storage(theirs / "subject01_ik_marker_errors.sto")
    assert ea.labels == eb.labels
    np.testing.assert_allclose(ea.data, eb.data, atol=5e-4)


@pytest.mark.slow
def test_inverse_kinematics_subcommand_equals_the_tool(tmp_path):
    """``jaxbio inverse-kinematics`` (gait2354's IKTaskSet from its setup, 0.4–0.45 s) writes
    the motion and marker errors of `jaxbio.tools.inverse_kinematics_tool` on the same trial."""
    from jaxbio.cli import main
    from jaxbio.tools import read_ik_tasks

    mot, sto = tmp_path / "ik.mot", tmp_path / "errors.sto"
    setup, trc = G2354 / "subject01_Setup_IK.xml", G2354 / "subject01_walk1_cut.trc"
    args = ["--model", str(MODEL), "--markers", str(trc), "--tasks", str(setup), "--start", "0.4", "--end", "0.45"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            main(["inverse-kinematics", *args, "--output", str(mot), "--output-errors", str(sto), "--no-progress"]) == 0
        )
        mw, ct = read_ik_tasks(setup)
        with jax.enable_x64(True):
            r = jb.tools.inverse_kinematics_tool(
                jb.io.load_osim(MODEL, dtype=jnp.float64),
                trc,
                marker_weights=mw,
                coordinate_tasks=ct,
                start=0.4,
                end=0.45,
            )
    a, e = jb.io.read_storage(mot), jb.io.read_storage(sto)
    assert a.labels == r.coordinates.labels and a.in_degrees and a.time.size == r.c.shape[0] >= 4
    np.testing.assert_allclose(a.data, r.coordinates.data, rtol=0, atol=1e-7)  # the file's printed digits
    assert e.labels == r.errors.labels
    np.testing.assert_allclose(e.data, r.errors.data, rtol=1e-6, atol=1e-12)
