"""OpenSim's own model library loads whole (issue #51): the classes of element its models use
that jaxbio used to refuse or leave out, each on a small file of ``tests/io/data`` or one written
here, compared with live OpenSim 4.x where numbers matter; and the conformance sweep over a whole
library folder (slow; ``JAXBIO_OSIM_LIBRARY``, default ``/work/om``; skipped when absent).

The rule: every model OpenSim loads, jaxbio loads whole (nothing that acts on the dynamics in
``Model.ignored``) or refuses with a ``ValueError`` naming an element that
``docs/opensim-support.md`` lists as unsupported."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import jax
import jax.numpy as jnp

import jaxbio as jb
import numpy as np
import pytest

from jaxbio import coordinates as jc
from jaxbio._text import parse_xml
from jaxbio.io import load_osim

DATA = Path(__file__).parent / "data"


def write(tmp_path: Path, text: str, name: str = "model.osim") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def opensim():
    osim = pytest.importorskip("opensim")
    osim.Logger.removeFileSink()
    osim.Logger.setLevelString("error")
    return osim


def model_text(bodies: str, joints: str, forces: str = "", constraints: str = "") -> str:
    return f"""<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="40000">
  <Model name="m">
    <Ground name="ground"/>
    <gravity>0 -9.80665 0</gravity>
    <BodySet name="bodyset"><objects>{bodies}</objects></BodySet>
    <JointSet name="jointset"><objects>{joints}</objects></JointSet>
    <ConstraintSet name="constraintset"><objects>{constraints}</objects></ConstraintSet>
    <ForceSet name="forceset"><objects>{forces}</objects></ForceSet>
  </Model>
</OpenSimDocument>
"""


def pin(name: str, parent: str, child: str, coordinate: str, offset: str = "0 0 0") -> str:
    return f"""<PinJoint name="{name}">
      <socket_parent_frame>{name}_offset</socket_parent_frame><socket_child_frame>{child}</socket_child_frame>
      <coordinates><Coordinate name="{coordinate}"><range>-2 2</range></Coordinate></coordinates>
      <frames><PhysicalOffsetFrame name="{name}_offset"><socket_parent>{parent}</socket_parent>
        <translation>{offset}</translation><orientation>0 0 0</orientation></PhysicalOffsetFrame></frames>
    </PinJoint>"""


def body(name: str, mass: float, inertia: str = "0.01 0.01 0.01 0 0 0", com: str = "0 -0.2 0") -> str:
    return f"<Body name='{name}'><mass>{mass}</mass><mass_center>{com}</mass_center><inertia>{inertia}</inertia></Body>"


# ---- the 4.0 betas' joints: connectors, offsets as properties, no <Ground> --------------------

BETA_JOINT = """<PinJoint name="{name}">
  <connectors>
    <Connector_PhysicalFrame_ name="parent_body"><connectee_name>{parent}</connectee_name></Connector_PhysicalFrame_>
    <Connector_PhysicalFrame_ name="child_body"><connectee_name>{child}</connectee_name></Connector_PhysicalFrame_>
  </connectors>
  <location_in_parent>{lp}</location_in_parent><orientation_in_parent>{op}</orientation_in_parent>
  <location_in_child>{lc}</location_in_child><orientation_in_child>0 0 0</orientation_in_child>
  <CoordinateSet><objects><Coordinate name="{name}_q"><range>-2 2</range></Coordinate></objects></CoordinateSet>
</PinJoint>"""


def test_beta_joints_with_offset_properties_and_no_ground_match_opensim(tmp_path):
    """OpenSim 4.0 beta files (Version 30501, opensim-models' Tutorial 3 double pendulum): joints in
    the JointSet with connectors and ``location_in_parent``/``location_in_child`` properties, and
    no ``<Ground>`` (the model's own ground is meant): body poses equal to live OpenSim's."""
    joints = BETA_JOINT.format(
        name="pin1", parent="../ground", child="../rod1", lp="0.1 0 0", op="0 0 0.3", lc="0 0.5 0"
    )
    joints += BETA_JOINT.format(name="pin2", parent="rod1", child="rod2", lp="0 -0.2 0.05", op="0.2 0 0", lc="0 0.4 0")
    text = f"""<?xml version="1.0" encoding="UTF-8"?>
<OpenSimDocument Version="30501"><Model name="beta"><gravity>0 -9.80665 0</gravity>
  <BodySet><objects>{body("rod1", 1.0)}{body("rod2", 2.0)}</objects></BodySet>
  <JointSet><objects>{joints}</objects></JointSet></Model></OpenSimDocument>"""
    path = write(tmp_path, text)
    m = load_osim(path, dtype=jnp.float64, strict=True)
    assert m.tree.nq == 2
    osim = opensim()
    from tests.io.test_osim_opensim import body_poses

    ref = osim.Model(str(path))
    state = ref.initSystem()
    c = np.array([0.4, -0.7])
    for k, name in enumerate(["pin1_q", "pin2_q"]):
        ref.getCoordinateSet().get(name).setValue(state, float(c[k]))
    ref.realizePosition(state)
    with jax.enable_x64(True):
        ours = body_poses(m, jnp.asarray(c))
    for name in ("rod1", "rod2"):
        X = ref.getBodySet().get(name).getTransformInGround(state)
        p = np.array([X.p().get(i) for i in range(3)])
        R = np.array([[X.R().get(i, j) for j in range(3)] for i in range(3)])
        np.testing.assert_allclose(ours[name][0], p, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ours[name][1], R, rtol=0, atol=1e-12)


# ---- OpenSim's element names with '::' --------------------------------------------------------

LEGACY_FORCE = """<HuntCrossleyForce name="contact">
  <appliesForce>false</appliesForce>
  <HuntCrossleyForce::ContactParametersSet name="contact_parameters"><objects>
    <HuntCrossleyForce::ContactParameters><geometry>a b</geometry><stiffness>1e6</stiffness></HuntCrossleyForce::ContactParameters>
  </objects></HuntCrossleyForce::ContactParametersSet>
</HuntCrossleyForce>"""


def test_element_names_with_double_colons_are_read():
    """Python's parser reads ``:`` as a namespace separator and refused the 9 library models that
    hold OpenSim's nested class names; the elements keep OpenSim's names."""
    root = parse_xml(LEGACY_FORCE.encode())
    assert [e.tag for e in root.iter()][:3] == [
        "HuntCrossleyForce",
        "appliesForce",
        "HuntCrossleyForce::ContactParametersSet",
    ]
    (stiffness,) = [e.text for e in root.iter("stiffness")]  # (ElementPath reads ':' too: no find)
    assert stiffness == "1e6"
    assert parse_xml(b"<a><!-- x::y --><b>c::d</b></a>").find("b").text == "c::d"  # text untouched


def test_model_with_double_colon_elements_loads(tmp_path):
    text = model_text(body("rod", 1.0), pin("p", "/ground", "/bodyset/rod", "q"), forces=LEGACY_FORCE)
    m = load_osim(write(tmp_path, text))
    assert m.coordinate_names == ("q",)
    assert m.ignored == ("ForceSet: 1 disabled objects (HuntCrossleyForce)",)


# ---- inertias and masses that OpenSim accepts ---------------------------------------------------


def test_inertia_without_triangle_inequality_and_massless_models_load(tmp_path):
    """OpenSim keeps a body's inertia as the file gives it (the toes of leg6dof9musc, leg39,
    gait2354's descendants: two zero principal moments) and loads a model without mass (the wrist
    model): jaxbio's physical checks of its own models do not apply to imported ones."""
    toes = body("toes", 0.2, "0 0 0.0009 0 0 0")
    m = load_osim(write(tmp_path, model_text(toes, pin("p", "/ground", "/bodyset/toes", "q"))), dtype=jnp.float64)
    np.testing.assert_array_equal(np.diag(np.asarray(m.tree.inertias[0])), [0.0, 0.0, 0.0009])
    massless = body("a", 0.0, "0 0 0 0 0 0") + body("b", 0.0, "0 0 0 0 0 0")
    joints = pin("p", "/ground", "/bodyset/a", "q1") + pin("p2", "/bodyset/a", "/bodyset/b", "q2", "0 -1 0")
    m = load_osim(write(tmp_path, model_text(massless, joints), "massless.osim"), dtype=jnp.float64)
    with jax.enable_x64(True):
        assert float(jnp.abs(jb.mass_matrix(m, jnp.array([0.3, 0.2]))).max()) == 0.0
    with pytest.raises(ValueError, match="triangle inequality"):  # jaxbio's own models stay checked
        jb.SegmentTree.from_dict(
            {
                "format": "jaxbio-model",
                "version": 1,
                "name": "x",
                "gravity": [0, 0, -9.81],
                "segments": [
                    {
                        "name": "s",
                        "parent": None,
                        "joint": {"type": "revolute", "axis": [0, 0, 1]},
                        "mass": 1.0,
                        "com": [0, 0, 0],
                        "inertia": [[0, 0, 0], [0, 0, 0], [0, 0, 1]],
                    }
                ],
            }
        )


def test_toes_inertia_matches_opensim(tmp_path):
    """The mass matrix of a leg whose toes have two zero principal moments, against OpenSim."""
    from tests.io.test_osim_opensim import OpenSimModel

    opensim()
    toes = body("foot", 1.0) + body("toes", 0.2, "0 0 0.0009 0 0 0", "0.03 0.01 0.02")
    joints = pin("p", "/ground", "/bodyset/foot", "q1") + pin(
        "p2", "/bodyset/foot", "/bodyset/toes", "q2", "0.1 -0.3 0"
    )
    path = write(tmp_path, model_text(toes, joints))
    ref = OpenSimModel(path)
    with jax.enable_x64(True):
        m = load_osim(path, dtype=jnp.float64)
        for c in np.random.default_rng(0).uniform(-1, 1, (3, 2)):
            M = ref.mass_matrix(c)
            np.testing.assert_allclose(jb.mass_matrix(m, jnp.asarray(c)), M, rtol=1e-12, atol=1e-15)


# ---- muscles: OpenSim's defaults for properties a file leaves empty; rigid and elastic tendons ----

TUG = DATA / "Tug_of_War_Millard.osim"


def _tug(tmp_path, rigid: tuple[bool, bool]) -> Path:
    """Tug_of_War_Millard with each muscle's ``ignore_tendon_compliance`` set, and no fiber
    damping (the undamped model adjusts its curves one way with an elastic tendon, another with a
    rigid one: a muscle in the wrong module shows)."""
    text = TUG.read_text()
    parts = text.split("<ignore_tendon_compliance>false</ignore_tendon_compliance>")
    assert len(parts) == 3  # RightMuscle, LeftMuscle
    text = parts[0]
    for flag, rest in zip(rigid, parts[1:]):
        text += f"<ignore_tendon_compliance>{str(flag).lower()}</ignore_tendon_compliance>"
        text += "<fiber_damping>0</fiber_damping>" + rest
    assert text.count("<fiber_damping>0</fiber_damping>") == 2
    return write(tmp_path, text, "tug.osim")


def test_empty_curve_properties_take_opensim_defaults():
    """Tug_of_War_Millard leaves FiberForceLengthCurve's stiffness and curviness empty (OpenSim's
    optional properties, then derived from the strains): its muscles are imported."""
    m = load_osim(TUG)
    assert m.ignored == () and m.muscles.names == ("RightMuscle", "LeftMuscle")
    assert bool(jnp.isnan(m.muscles.millard.fiber_force_length_curve.curviness).all())  # unset: derived


@pytest.mark.parametrize("rigid", [(True, False), (False, True), (True, True)])
def test_rigid_and_elastic_tendons_in_one_model_match_opensim(rigid, tmp_path):
    from tests.io.test_osim_muscles import OpenSim

    from jaxbio.forces import muscle_lengths, muscle_static_optimization_forces

    path = _tug(tmp_path, rigid)
    with jax.enable_x64(True):
        m = load_osim(path, dtype=jnp.float64)
        mus = m.muscles
        assert m.ignored == () and mus.n_muscles == 2
        expected_rigid = tuple(i for i, r in enumerate(rigid) if r)
        if len(set(rigid)) == 2:
            assert mus.millard_rigid_index == expected_rigid and mus.millard_rigid.ignore_tendon_compliance
            assert not mus.millard.ignore_tendon_compliance
        else:
            assert mus.millard_rigid is None and mus.millard.ignore_tendon_compliance == rigid[0]
        ref = OpenSim(path, mus.names)
        rng = np.random.default_rng(1)
        lo, hi = np.asarray(m.ranges).T
        for _ in range(3):
            c = lo + (hi - lo) * rng.uniform(size=len(lo))
            cd = 0.1 * rng.normal(size=len(lo))
            np.testing.assert_allclose(muscle_lengths(m, c), ref.lengths(c), rtol=0, atol=1e-12)
            f = ref.fiber_forces(c, cd)
            ours = muscle_static_optimization_forces(m, c, cd)[0]
            np.testing.assert_allclose(ours, f, rtol=1e-9, atol=1e-9)


# ---- CoordinateCouplerConstraint --------------------------------------------------------------


def _coupled_reference(osim, path, m, c, cd, cdd):
    """OpenSim's body poses, and its mass matrix and inverse dynamics (which ignore constraints)
    reduced to the independent coordinates: ``c_full`` with each dependent coordinate at
    OpenSim's coupler function of its independent one, ``J = ∂c_full/∂c``, ``M_c = Jᵀ M J``,
    ``τ_c = Jᵀ τ(c_full, J ċ, J c̈ + J̇ ċ)`` (derivatives from OpenSim's ``Function``)."""
    from tests.io.test_osim_opensim import OpenSimModel

    ref = OpenSimModel(path)  # without its ForceSet: gravity and inertia only
    names = ref.names
    J = np.zeros((len(names), len(c)))
    bias = np.zeros(len(names))
    full = np.zeros(len(names))
    for k, n in enumerate(names):
        if n in m.coordinate_names:
            J[k, m.coordinate_index(n)] = 1.0
            full[k] = c[m.coordinate_index(n)]
    cs = ref.model.getConstraintSet()
    for i in range(cs.getSize()):
        con = osim.CoordinateCouplerConstraint.safeDownCast(cs.get(i))
        f, s = con.getFunction(), float(con.getPropertyByName("scale_factor").toString())
        j = m.coordinate_index(con.getIndependentCoordinateNames().get(0))
        x = osim.Vector(1, float(c[j]))
        d = names.index(con.getDependentCoordinateName())
        full[d] = s * f.calcValue(x)
        slope = s * f.calcDerivative(osim.StdVectorInt([0]), x)
        J[d, j] = slope
        bias[d] = s * f.calcDerivative(osim.StdVectorInt([0, 0]), x) * cd[j] ** 2
    M = ref.mass_matrix(full)
    tau = ref.inverse_dynamics(full, J @ cd, J @ cdd + bias)
    return ref.bodies(full), J.T @ M @ J, J.T @ tau


def test_coordinate_coupler_matches_opensim(tmp_path):
    """leg6dof9musc: the patella's ``CoordinateCouplerConstraint`` (a SimmSpline of the knee
    angle); poses, the mass matrix and inverse dynamics in the independent coordinates equal
    OpenSim's reduced by the constraint to 1e-9 relative."""
    from tests.io.test_osim_opensim import _without_forces, body_poses

    osim = opensim()
    path = DATA / "leg6dof9musc.osim"
    bare = _without_forces(path, tmp_path / "leg_no_forces.osim")
    with jax.enable_x64(True):
        m = load_osim(path, dtype=jnp.float64)
        assert m.dependent_coordinates and not any(d in m.coordinate_names for d in m.dependent_coordinates)
        assert not any("Constraint" in s for s in m.ignored), m.ignored
        rng = np.random.default_rng(0)
        lo, hi = np.asarray(m.ranges).T
        for _ in range(2):
            c = rng.uniform(np.maximum(lo, -1), np.minimum(hi, 1))
            cd, cdd = rng.normal(size=len(c)), rng.normal(size=len(c))
            poses, M, tau = _coupled_reference(osim, bare, m, c, cd, cdd)
            ours = body_poses(m, jnp.asarray(c))
            for name, (p, R) in poses.items():
                np.testing.assert_allclose(ours[name][0], p, rtol=0, atol=1e-12)
                np.testing.assert_allclose(ours[name][1], R, rtol=0, atol=1e-12)
            Mc = jb.mass_matrix(m, jnp.asarray(c))
            assert float(np.abs(Mc - M).max() / (1 + np.abs(M).max())) < 1e-9
            tc = jb.inverse_dynamics(m, jnp.asarray(c), jnp.asarray(cd), jnp.asarray(cdd))
            assert float(np.abs(tc - tau).max() / (1 + np.abs(tau).max())) < 1e-9


@pytest.mark.parametrize("slope", [2.0, -0.5, 0.0])
def test_composition_of_a_curve_and_a_line(slope):
    """`compose` (a joint's function of a dependent coordinate after the coupling, or the
    coupling after a linear joint function) against evaluating one after the other."""
    from jaxbio import _osim_functions as fn

    spline = fn.simm_spline([-1.0, 0.0, 0.5, 1.5], [0.2, -0.1, 0.3, 0.0])
    line = fn.linear(slope, 0.3)
    x = jnp.linspace(-3.0, 3.0, 41)

    def value(f, x):
        cmap = jc.CoordinateMap.from_pieces(["x"], [0], [f], dtype=jnp.float64)
        return jax.vmap(lambda v: jc.to_tree(cmap, v[None])[0])(x)

    with jax.enable_x64(True):
        x = x.astype(jnp.float64)
        np.testing.assert_allclose(value(fn.compose(spline, line, "t"), x), value(spline, value(line, x)), atol=1e-14)
        np.testing.assert_allclose(value(fn.compose(line, spline, "t"), x), value(line, value(spline, x)), atol=1e-14)
    with pytest.raises(ValueError, match="t: both functions are curves"):
        fn.compose(spline, spline, "t")


# ---- the conformance sweep over a library folder ----------------------------------------------

LIBRARY = Path(os.environ.get("JAXBIO_OSIM_LIBRARY", "/work/om"))
SUPPORT = Path(__file__).parents[2] / "docs" / "opensim-support.md"


def _library():
    from tests.io.osim_library import library_files

    return library_files(LIBRARY) if LIBRARY.is_dir() else []


@pytest.mark.slow
@pytest.mark.parametrize("path", _library(), ids=lambda p: str(p.relative_to(LIBRARY)))
def test_library_model_loads_whole_or_is_refused_naming_a_listed_element(path, tmp_path):
    """Every model of the library: ``load_osim(strict=True)`` loads it whole, or refuses it naming
    element classes that docs/opensim-support.md lists; a model loaded whole has OpenSim's body
    poses and (without Ball/Free joints) its mass matrix, reduced by the coordinate couplers, at
    a random pose."""
    import re

    try:
        m = load_osim(path, dtype=jnp.float64, strict=True)
    except ValueError as e:
        message = str(e)
        assert message.startswith(f"{path}: "), message
        classes = re.findall(r"\(([A-Za-z0-9_, ]+)\)", message.split("not imported: ", 1)[-1])
        names = {n.strip() for group in classes for n in group.split(",")} - {""}
        assert names, message
        docs = SUPPORT.read_text()
        assert all(f"`{n}`" in docs for n in names), (names, message)
        return
    assert not m.not_imported
    if importlib.util.find_spec("opensim") is None:
        return
    from tests.io.test_osim_opensim import _without_forces, body_poses

    osim = opensim()
    bare = _without_forces(path, tmp_path / path.name)
    rng = np.random.default_rng(0)
    lo, hi = np.asarray(m.ranges).T
    with jax.enable_x64(True):
        c = rng.uniform(np.maximum(lo, -1), np.minimum(hi, 1))
        c = np.where(m.locked, np.asarray(m.defaults), c)  # OpenSim's locked coordinates keep their value
        zeros = np.zeros_like(c)
        poses, M, _ = _coupled_reference(osim, bare, m, c, zeros, zeros)
        ours = body_poses(m, jnp.asarray(c))
        for name, (p, R) in poses.items():
            np.testing.assert_allclose(ours[name][0], p, rtol=0, atol=1e-6)  # 2.x files: OpenSim rounds offsets
            np.testing.assert_allclose(ours[name][1], R, rtol=0, atol=1e-9)
        if not {"BallJoint", "FreeJoint"} & set(m.joint_types):
            Mc = jb.mass_matrix(m, jnp.asarray(c))
            assert float(np.abs(Mc - M).max() / (1 + np.abs(M).max())) < 1e-6


def test_strict_refuses_what_acts_and_is_not_imported(tmp_path):
    text = model_text(body("rod", 1.0), pin("p", "/ground", "/bodyset/rod", "q"), forces=LEGACY_FORCE)
    text = text.replace("<appliesForce>false</appliesForce>", "<appliesForce>true</appliesForce>")
    path = write(tmp_path, text.replace("HuntCrossleyForce", "ElasticFoundationForce"))
    m = load_osim(path)
    assert m.not_imported == ("ForceSet: 1 objects (ElasticFoundationForce)",)
    with pytest.raises(ValueError, match=r"not imported: ForceSet: 1 objects \(ElasticFoundationForce\)"):
        load_osim(path, strict=True)
    with pytest.raises(ValueError, match="no contact geometry 'a'"):  # OpenSim cannot connect it either
        load_osim(write(tmp_path, text, "contact.osim"))
    assert load_osim(DATA / "leg6dof9musc.osim", strict=True).not_imported == ()


@pytest.mark.parametrize("name", ["leg6dof9musc.osim", "Tug_of_War_Millard.osim"])
def test_reading_the_new_classes_compiles_nothing(name):
    """Couplers and muscle groups are built in numpy while the file is read."""
    from tests.test_rigid_numpy import _compilations

    assert _compilations(lambda: load_osim(DATA / name, dtype=jnp.float64)) == []
