"""``HuntCrossleyForce`` (on ``ContactSphere`` and ``ContactHalfSpace``) and ``BushingForce``
(`jaxbio.forces._osim_forces`) against live OpenSim 4.6.

OpenSim's generalised force of a force type is ``InverseDynamicsSolver.solve`` without any force
minus the same with that type (`tests.io.test_osim_forces.compare_types`), at states that put
spheres into the half-space and into each other, with speeds large enough that Simbody's
``HuntCrossleyForceImpl::calcForce`` meets a contact pulling (``f ≤ 0``) and returns, dropping the
later contacts of its list. A model written with OpenSim's API (two free bodies, four spheres,
two materials, a bushing between offset frames; default run) and opensim-models' ToyLanding and
BouncingBlock (contact and bushings on CustomJoints, locked coordinates; slow, where the library
is present).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbio import quaternion as quat
from jaxbio.coordinates import jacobian as coordinate_jacobian
from jaxbio.io import load_osim
from jaxbio.forces import passive_forces
from jaxbio.forces._osim_forces import _contacts, _on_tree, _world_attitudes, _world_points

osim = pytest.importorskip("opensim")
osim.Logger.removeFileSink()
osim.Logger.setLevelString("error")

from tests.io.test_osim_forces import assert_agree, compare_types  # noqa: E402

LIBRARY = Path(os.environ.get("JAXBIO_OSIM_LIBRARY", "/work/om"))


def write_contact_model(path: Path) -> Path:
    """Two free bodies over a tilted half-space on the ground: ``block`` with three spheres,
    ``ball`` with one sphere that reaches the block's; two materials; a bushing from an offset
    frame on the block to one on the ball."""
    m = osim.Model()
    m.setName("contact")
    ground = m.getGround()
    bodies = {}
    for name, mass in (("block", 2.0), ("ball", 0.5)):
        b = osim.Body(name, mass, osim.Vec3(0.01, -0.02, 0.0), osim.Inertia(0.02, 0.03, 0.025))
        m.addBody(b)
        m.addJoint(osim.FreeJoint(f"{name}_free", ground, b))
        bodies[name] = b
    floor = osim.ContactHalfSpace(osim.Vec3(0.1, -0.02, 0.0), osim.Vec3(0.05, 0.0, -np.pi / 2), ground, "floor")
    m.addContactGeometry(floor)
    spheres = [
        ("s1", "block", (0.15, -0.05, 0.1), 0.05),
        ("s2", "block", (-0.15, -0.05, 0.1), 0.04),
        ("s3", "block", (0.0, -0.05, -0.12), 0.06),
        ("s4", "ball", (0.0, 0.0, 0.0), 0.08),
    ]
    for name, body, at, r in spheres:
        m.addContactGeometry(osim.ContactSphere(r, osim.Vec3(*at), bodies[body], name))
    force = osim.HuntCrossleyForce()
    force.setName("contact")
    force.setTransitionVelocity(0.2)
    for g in ("floor", "s1", "s2"):
        force.addGeometry(g)
    force.setStiffness(2e6), force.setDissipation(1.0)
    force.setStaticFriction(0.8), force.setDynamicFriction(0.6), force.setViscousFriction(0.3)
    m.addForce(force)

    def offset(at, angles):
        R = osim.Rotation()
        R.setRotationToBodyFixedXYZ(osim.Vec3(*angles))
        return osim.Transform(R, osim.Vec3(*at))

    bushing = osim.BushingForce(
        "bushing",
        bodies["block"],
        offset((0.05, 0.1, -0.02), (0.1, -0.2, 0.3)),
        bodies["ball"],
        offset((-0.03, 0.02, 0.04), (-0.2, 0.1, 0.05)),
        osim.Vec3(300.0, 200.0, 400.0),  # translational stiffness, N/m
        osim.Vec3(20.0, 30.0, 10.0),  # rotational, N·m/rad
        osim.Vec3(5.0, 3.0, 4.0),
        osim.Vec3(0.5, 0.3, 0.8),
    )
    m.addForce(bushing)
    m.finalizeConnections()
    m.printToXML(str(path))
    # a second material (the bindings do not expose ContactParameters): no dynamic or viscous friction
    text = path.read_text()
    end = text.index("</HuntCrossleyForce::ContactParameters>") + len("</HuntCrossleyForce::ContactParameters>")
    second = (
        "<HuntCrossleyForce::ContactParameters><geometry>s3 s4</geometry><stiffness>500000</stiffness>"
        "<dissipation>0.6</dissipation><static_friction>0.5</static_friction><dynamic_friction>0</dynamic_friction>"
        "<viscous_friction>0</viscous_friction></HuntCrossleyForce::ContactParameters>"
    )
    path.write_text(text[:end] + second + text[end:])
    return path


def _depths(m, c):
    """Depth of every sphere of ``m`` in its force's first half-space (``(T, s)`` m, numpy)."""
    h = m.forces.contacts
    floor = h.halfspace.index(True)
    out = []
    for x in c:
        _, motion = _on_tree(m, jnp.asarray(x))
        X = np.asarray(_world_points(motion, h.segments, h.positions))
        R = np.asarray(quat.to_matrix(_world_attitudes(motion, h.segments, h.orientations)))
        out.append([float(h.radii[j] + (R[floor].T @ (X[j] - X[floor]))[0]) for j in range(len(X))])
    return np.array(out)


def library_states(m, lift: str, n: int, seed: int):
    """Random states within the ranges (locked coordinates at their defaults), ``lift`` moved so
    that the deepest sphere is 2–20 mm into the half-space."""
    r = np.asarray(m.ranges)
    rng = np.random.default_rng(seed)
    c = rng.uniform(np.maximum(r[:, 0], -0.6), np.minimum(r[:, 1], 0.6), (n, len(r)))
    locked = np.asarray(m.locked)
    c[:, locked] = np.asarray(m.defaults)[locked]
    spheres = [i for i, x in enumerate(m.forces.contacts.halfspace) if not x]
    c[:, m.coordinate_index(lift)] += _depths(m, c)[:, spheres].max(1) - rng.uniform(0.002, 0.02, n)
    cd = 0.5 * rng.normal(size=c.shape)
    cd[:, locked] = 0.0
    return c, cd


def _events(m, c, cd):
    """``(contacts, contacts that pull, contacts dropped after one)`` over the states (jaxbio)."""
    h = m.forces.contacts
    totals = np.zeros(3, int)
    for x, xd in zip(c, cd):
        q, motion = _on_tree(m, jnp.asarray(x))
        qd = coordinate_jacobian(m.coordinates, jnp.asarray(x)) @ jnp.asarray(xd)
        _, _, exists, stop, applied = _contacts(m, q, motion, qd, h)
        totals += [int(exists.sum()), int(stop.sum()), int((exists & ~stop & ~applied).sum())]
    return totals


@pytest.fixture(scope="module")
def contact_model(tmp_path_factory):
    return write_contact_model(tmp_path_factory.mktemp("contact") / "contact.osim")


def contact_states(m, n: int = 12, seed: int = 0):
    """The block resting on its spheres (1–15 mm deep), the ball on sphere s3 (up to 15 mm deep
    where it touches), fast (the contacts both push and pull)."""
    rng = np.random.default_rng(seed)
    nc = len(m.coordinate_names)
    c = np.zeros((n, nc))
    c[:, 0:3] = rng.uniform(-0.3, 0.3, (n, 3))  # block rotations
    c[:, 3:6] = rng.uniform(-0.2, 0.2, (n, 3))
    c[:, 6:9] = rng.uniform(-0.5, 0.5, (n, 3))  # ball rotations
    d = _depths(m, c)
    c[:, 4] += d[:, :3].max(1) - rng.uniform(0.001, 0.015, n)  # block ty: its deepest sphere in
    h = m.forces.contacts
    s3 = [i for i, x in enumerate(h.halfspace) if not x][2]
    for t in range(n):
        _, motion = _on_tree(m, jnp.asarray(c[t]))
        X = np.asarray(_world_points(motion, h.segments, h.positions))[s3]
        direction = rng.normal(size=3)
        direction[1] = abs(direction[1]) + 1.0  # above the block's sphere
        gap = (0.06 + 0.08) - (rng.uniform(0.0, 0.015) if t % 3 else -0.01)  # every third apart
        c[t, 9:12] = X + gap * direction / np.linalg.norm(direction)
    cd = 2.0 * rng.normal(size=c.shape)
    return c, cd


def test_contact_and_bushing_match_opensim(contact_model):
    with jax.enable_x64(True):
        m = load_osim(contact_model, dtype=jnp.float64)
        h = m.forces.contacts
        assert h.names == ("contact",) and len(h.segments) == 5
        assert sorted(zip(h.first, h.second)) == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 4), (2, 4), (3, 4)]
        c, cd = contact_states(m)
        contacts, pulling, dropped = _events(m, c, cd)
    assert contacts > 20 and pulling > 2 and dropped > 0  # Simbody's early return is exercised
    assert_agree(compare_types(contact_model, c, cd, ("HuntCrossleyForce", "BushingForce")), minimum=10.0)


@pytest.mark.slow  # 87 s of the default run (its 25 slowest, 2026-12-08)
def test_contact_forces_are_differentiable_in_float32(contact_model):
    with jax.enable_x64(True):
        m64 = load_osim(contact_model, dtype=jnp.float64)
        c, cd = contact_states(m64, n=4, seed=1)
        f64 = jax.vmap(lambda x, xd: passive_forces(m64, x, xd))(c, cd)
        J = jax.jacfwd(lambda x: passive_forces(m64, x, cd[0]))(jnp.asarray(c[0]))
        h = 1e-7
        fd = np.stack(
            [
                (
                    np.asarray(passive_forces(m64, c[0] + h * e, cd[0]))
                    - np.asarray(passive_forces(m64, c[0] - h * e, cd[0]))
                )
                / (2 * h)
                for e in np.eye(c.shape[1])
            ],
            1,
        )
    assert np.all(np.isfinite(np.asarray(J)))
    np.testing.assert_allclose(np.asarray(J), fd, atol=1e-4 * (1 + np.abs(fd).max()))
    m32 = load_osim(contact_model, dtype=jnp.float32)
    f32 = jax.vmap(lambda x, xd: passive_forces(m32, x, xd))(jnp.asarray(c, jnp.float32), jnp.asarray(cd, jnp.float32))
    np.testing.assert_allclose(np.asarray(f32), np.asarray(f64), atol=2e-3 * (1 + np.abs(np.asarray(f64)).max()))


def test_contact_geometry_that_cannot_be_imported_is_named(contact_model, tmp_path):
    text = contact_model.read_text()
    start = text.index('<ContactSphere name="s4"')
    end = text.index("</ContactSphere>", start) + len("</ContactSphere>")
    mesh = (
        '<ContactMesh name="s4"><socket_frame>/bodyset/ball</socket_frame><filename>ball.obj</filename></ContactMesh>'
    )
    path = tmp_path / "mesh.osim"
    path.write_text(text[:start] + mesh + text[end:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_osim(path)
    assert len(m.forces.contacts) == 0
    note = "HuntCrossleyForce 'contact': not imported, its contact geometry 's4' is a ContactMesh"
    assert any(e.startswith(note) for e in m.not_imported), m.not_imported
    with pytest.raises(ValueError, match="ContactMesh"):
        load_osim(path, strict=True)


def test_reading_contact_and_bushings_compiles_nothing(contact_model):
    from tests.test_rigid_numpy import _compilations

    assert _compilations(lambda: load_osim(contact_model, dtype=jnp.float64)) == []


LIBRARY_MODELS = [
    ("Models/ToyLanding/ToyLandingModel_AFO.osim", "pelvis_ty", ("HuntCrossleyForce", "BushingForce")),
    ("Models/BouncingBlock/bouncing_block.osim", "yTranslation", ("HuntCrossleyForce", "BushingForce")),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, lift, kinds", LIBRARY_MODELS, ids=[n for n, _, _ in LIBRARY_MODELS])
def test_library_contact_and_bushings_match_opensim(name, lift, kinds):
    path = LIBRARY / name
    if not path.is_file():
        pytest.skip(f"no {path} (set JAXBIO_OSIM_LIBRARY)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BouncingBlock's PointOnLineConstraint: ID ignores constraints
        with jax.enable_x64(True):
            m = load_osim(path, dtype=jnp.float64)
            c, cd = library_states(m, lift, n=6, seed=0)
        assert_agree(compare_types(path, c, cd, kinds), minimum=1.0)
