"""jaxbio's rigid-body algorithms against Pinocchio (float64).

Every comparison uses the norm-wise relative error ``||a - b|| / max(||b||, 1)`` (Frobenius norm over
the whole array, ``b`` the Pinocchio value) with tolerance ``RTOL = 1e-10``.

The first group of tests checks the Pinocchio reference itself (tests/pinocchio_ref.py) against closed
forms and hand-written kinematics, without jaxbio. The second group compares jaxbio's public API with
Pinocchio on every model shipped in jaxbio/models/*.json and on randomly generated trees.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pin = pytest.importorskip("pinocchio", reason="Pinocchio reference tests need `pip install pin`")

from tests import pinocchio_ref as ref  # noqa: E402
from tests._models import REPO, random_mixed_state  # noqa: E402

RTOL = 1e-10
MODEL_DIR = REPO / "jaxbio" / "models"
MODEL_FILES = sorted(MODEL_DIR.glob("*.json"))
N_STATES = 4


def relative_error(a, b) -> float:
    """``||a - b|| / max(||b||, 1)``, Frobenius norm over the whole array."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1.0))


def assert_close(a, b, what: str, rtol: float = RTOL):
    err = relative_error(a, b)
    assert err <= rtol, f"{what}: relative error {err:.3e} > {rtol:.0e}\n got  {np.asarray(a)}\n want {np.asarray(b)}"


# ---------------------------------------------------------------------------------------------------
# Model dicts
# ---------------------------------------------------------------------------------------------------


def double_pendulum_dict(m1=1.0, l1=1.0, m2=1.0, l2=0.5, g=9.81) -> dict:
    """Watanabe & Duarte's notebook double pendulum: planar rods hanging along -y, revolute +z joints, relative angles."""

    def rod(m, l):
        i = m * l * l / 12.0
        return [[i, 0.0, 0.0], [0.0, 1e-6, 0.0], [0.0, 0.0, i]]

    def joint(origin):
        return {"type": "revolute", "axis": [0, 0, 1], "origin": origin, "orientation": [1, 0, 0, 0]}

    return {
        "format": "jaxbio-model",
        "version": 1,
        "name": "double_pendulum",
        "gravity": [0.0, -g, 0.0],
        "segments": [
            {
                "name": "rod1",
                "parent": None,
                "joint": joint([0, 0, 0]),
                "mass": m1,
                "com": [0, -l1 / 2, 0],
                "inertia": rod(m1, l1),
            },
            {
                "name": "rod2",
                "parent": "rod1",
                "joint": joint([0, -l1, 0]),
                "mass": m2,
                "com": [0, -l2 / 2, 0],
                "inertia": rod(m2, l2),
            },
        ],
    }


def random_unit(rng, k=3) -> np.ndarray:
    v = rng.normal(size=k)
    return v / np.linalg.norm(v)


def random_rotation(rng) -> np.ndarray:
    return ref.quaternion_to_matrix(random_unit(rng, 4))


def random_tree_dict(n: int, seed: int) -> dict:
    """Random tree: parent uniform among earlier segments or world, random joint types, axes
    (some coordinate axes), origins, orientations, masses, COMs and SPD inertias that satisfy the
    triangle inequality (built from positive second moments, then rotated)."""
    rng = np.random.default_rng(seed)
    gravity = rng.normal(size=3)
    gravity = 9.81 * gravity / np.linalg.norm(gravity)
    segments = []
    for i in range(n):
        parent_index = int(rng.integers(-1, i))  # -1: world
        if rng.random() < 0.3:
            axis = np.zeros(3)
            axis[rng.integers(3)] = rng.choice([-1.0, 1.0])
        else:
            axis = random_unit(rng)
        orientation = random_unit(rng, 4)
        if rng.random() < 0.2:
            orientation = np.array([1.0, 0.0, 0.0, 0.0])
        mass = float(rng.uniform(0.2, 5.0))
        second_moments = mass * rng.uniform(0.002, 0.05, size=3)  # ∫ x², ∫ y², ∫ z² about the COM
        principal = np.array(
            [
                second_moments[1] + second_moments[2],
                second_moments[0] + second_moments[2],
                second_moments[0] + second_moments[1],
            ]
        )
        rot = random_rotation(rng)
        inertia = rot @ np.diag(principal) @ rot.T
        inertia = 0.5 * (inertia + inertia.T)
        segments.append(
            {
                "name": f"seg{i}",
                "parent": None if parent_index < 0 else f"seg{parent_index}",
                "joint": {
                    "type": "revolute" if rng.random() < 0.7 else "prismatic",
                    "axis": axis.tolist(),
                    "origin": rng.uniform(-0.5, 0.5, size=3).tolist(),
                    "orientation": orientation.tolist(),
                },
                "mass": mass,
                "com": rng.uniform(-0.3, 0.3, size=3).tolist(),
                "inertia": inertia.tolist(),
            }
        )
    return {
        "format": "jaxbio-model",
        "version": 1,
        "name": f"random{n}_{seed}",
        "gravity": gravity.tolist(),
        "segments": segments,
    }


def random_state(rng, n: int) -> dict:
    return {
        "q": rng.uniform(-1.0, 1.0, n),
        "qd": rng.uniform(-2.0, 2.0, n),
        "qdd": rng.uniform(-5.0, 5.0, n),
        "tau": rng.uniform(-10.0, 10.0, n),
        "force": rng.uniform(-20.0, 20.0, (n, 3)),
        "moment": rng.uniform(-5.0, 5.0, (n, 3)),
    }


# ---------------------------------------------------------------------------------------------------
# The reference itself (no jaxbio)
# ---------------------------------------------------------------------------------------------------


def _axis_motion(kind: str, axis, q):
    """Homogeneous transform of one joint's motion (Rodrigues rotation or translation)."""
    axis = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    t = np.eye(4)
    if kind == "revolute":
        k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
        t[:3, :3] = np.eye(3) + np.sin(q) * k + (1 - np.cos(q)) * k @ k
    else:
        t[:3, 3] = q * axis
    return t


def numpy_forward_kinematics(d: dict, q) -> np.ndarray:
    """Segment frames ``(n, 4, 4)`` straight from API.md: parent · T(origin) · R(orientation) · motion."""
    names = [s["name"] for s in d["segments"]]
    frames = []
    for i, s in enumerate(d["segments"]):
        parent = np.eye(4) if s["parent"] is None else frames[names.index(s["parent"])]
        placement = np.eye(4)
        placement[:3, :3] = ref.quaternion_to_matrix(s["joint"]["orientation"])
        placement[:3, 3] = s["joint"]["origin"]
        frames.append(parent @ placement @ _axis_motion(s["joint"]["type"], s["joint"]["axis"], q[i]))
    return np.array(frames)


@pytest.mark.parametrize("seed", range(5))
def test_reference_double_pendulum_closed_form(seed):
    """Pinocchio's M(q) and g(q) for Watanabe & Duarte's double pendulum equal the closed form."""
    m1, l1, m2, l2, g = 1.0, 1.0, 1.0, 0.5, 9.81
    model = ref.build_pinocchio_model(double_pendulum_dict(m1, l1, m2, l2, g))
    rng = np.random.default_rng(seed)
    q = rng.uniform(-np.pi, np.pi, 2)
    th1, th2 = q[0], q[0] + q[1]  # absolute angles from the downward vertical
    a = np.array([[1.0, 0.0], [1.0, 1.0]])  # θ = A q
    off = m2 * l1 * l2 * np.cos(th1 - th2) / 2
    mass_abs = np.array([[m1 * l1**2 / 3 + m2 * l1**2, off], [off, m2 * l2**2 / 3]])
    # Left-side generalised gravity (M q̈ + C + g = τ); Watanabe & Duarte's equation, with m2 g l1 in row 1.
    gravity_abs = np.array([(m1 * l1 / 2 + m2 * l1) * g * np.sin(th1), m2 * g * l2 / 2 * np.sin(th2)])
    # Inertia of the thin rods about their own axis (Iyy = 1e-6) does not enter: ω is along z.
    assert_close(ref.pin_mass_matrix(model, q), a.T @ mass_abs @ a, "M")
    assert_close(ref.pin_gravity_forces(model, q), a.T @ gravity_abs, "g")
    # Velocity terms: Lagrange's c_abs = m2 l1 l2/2 sin(θ1-θ2) (θ̇2², -θ̇1²) on the left side.
    qd = rng.uniform(-2, 2, 2)
    w1, w2 = qd[0], qd[0] + qd[1]
    s = m2 * l1 * l2 / 2 * np.sin(th1 - th2)
    coriolis_abs = np.array([s * w2**2, -s * w1**2])
    assert_close(ref.pin_bias_forces(model, q, qd), a.T @ (coriolis_abs + gravity_abs), "C + g")
    # Potential energy, V = -Σ m g·c with c the rod centres.
    c1 = np.array([l1 / 2 * np.sin(th1), -l1 / 2 * np.cos(th1), 0.0])
    c2 = np.array([l1 * np.sin(th1) + l2 / 2 * np.sin(th2), -l1 * np.cos(th1) - l2 / 2 * np.cos(th2), 0.0])
    gvec = np.array([0.0, -g, 0.0])
    assert_close(ref.pin_potential_energy(model, q), -(m1 * gvec @ c1 + m2 * gvec @ c2), "V")
    assert_close(ref.pin_center_of_mass(model, q), (m1 * c1 + m2 * c2) / (m1 + m2), "COM")


@pytest.mark.parametrize("n", [1, 5, 12])
@pytest.mark.parametrize("seed", range(3))
def test_reference_kinematics_and_energies(n, seed):
    """Pinocchio frames equal API.md's composition; V, T, COM and aba/rnea/crba are consistent."""
    d = random_tree_dict(n, 100 + seed)
    model = ref.build_pinocchio_model(d)
    rng = np.random.default_rng(seed)
    for _ in range(N_STATES):
        s = random_state(rng, n)
        frames = numpy_forward_kinematics(d, s["q"])
        positions, quaternions = ref.pin_forward_kinematics(model, s["q"])
        assert_close(positions, frames[:, :3, 3], "positions")
        rotations = np.array([ref.quaternion_to_matrix(qq) for qq in quaternions])
        assert_close(rotations, frames[:, :3, :3], "rotations from quaternions")
        assert np.all(quaternions[:, 0] >= 0)

        masses = np.array([seg["mass"] for seg in d["segments"]])
        coms = np.einsum("nij,nj->ni", frames[:, :3, :3], np.array([seg["com"] for seg in d["segments"]]))
        coms += frames[:, :3, 3]
        assert_close(ref.pin_segment_coms(model, s["q"]), coms, "segment COMs")
        gravity = np.array(d["gravity"])
        # Pinocchio's potential energy convention is V = -Σ m_i g·c_i, as API.md's.
        assert_close(ref.pin_potential_energy(model, s["q"]), -np.sum(masses * (coms @ gravity)), "V")
        assert_close(ref.pin_center_of_mass(model, s["q"]), masses @ coms / masses.sum(), "COM")

        mass = ref.pin_mass_matrix(model, s["q"])
        assert_close(mass, mass.T, "M symmetric")
        # CRBA against RNEA columns (catches a DOF ordering that breaks Pinocchio's subtree blocks).
        zero = np.zeros(n)
        g = ref.pin_inverse_dynamics(model, s["q"], zero, zero)
        columns = np.array([ref.pin_inverse_dynamics(model, s["q"], zero, e) - g for e in np.eye(n)]).T
        assert_close(mass, columns, "M vs RNEA columns")
        assert np.all(np.linalg.eigvalsh(mass) > 0)
        assert_close(ref.pin_kinetic_energy(model, s["q"], s["qd"]), 0.5 * s["qd"] @ mass @ s["qd"], "T")
        zero = np.zeros(n)
        assert_close(ref.pin_inverse_dynamics(model, s["q"], zero, zero), ref.pin_gravity_forces(model, s["q"]), "g")
        assert_close(
            ref.pin_inverse_dynamics(model, s["q"], s["qd"], zero), ref.pin_bias_forces(model, s["q"], s["qd"]), "bias"
        )
        tau = ref.pin_inverse_dynamics(model, s["q"], s["qd"], s["qdd"], s["force"], s["moment"])
        assert_close(
            ref.pin_forward_dynamics(model, s["q"], s["qd"], tau, s["force"], s["moment"]), s["qdd"], "aba∘rnea"
        )


@pytest.mark.parametrize("n", [1, 5, 12])
@pytest.mark.parametrize("seed", range(3))
def test_reference_external_wrenches(n, seed):
    """The world→local fext conversion: an external wrench adds -Jᵀw to RNEA's tau, with J the
    world-aligned Jacobian of the segment origin; segment wrenches balance Newton–Euler per body."""
    d = random_tree_dict(n, 200 + seed)
    model = ref.build_pinocchio_model(d)
    rng = np.random.default_rng(seed)
    s = random_state(rng, n)
    generalised = np.zeros(n)
    for i in range(n):
        jac = ref.pin_jacobian(model, s["q"], i)
        generalised += jac[:3].T @ s["force"][i] + jac[3:].T @ s["moment"][i]
    with_ext = ref.pin_inverse_dynamics(model, s["q"], s["qd"], s["qdd"], s["force"], s["moment"])
    without = ref.pin_inverse_dynamics(model, s["q"], s["qd"], s["qdd"])
    assert_close(with_ext, without - generalised, "tau with external wrenches")

    # Segment wrenches: the joint's share along its axis is tau (world axis, moment about the origin).
    forces, moments = ref.pin_segment_wrenches(model, s["q"], s["qd"], s["qdd"], s["force"], s["moment"])
    rotations = ref.pin_rotations(model, s["q"])
    projected = []
    for i, seg in enumerate(d["segments"]):
        axis = np.asarray(seg["joint"]["axis"]) / np.linalg.norm(seg["joint"]["axis"])
        world_axis = rotations[i] @ axis
        projected.append(world_axis @ (moments[i] if seg["joint"]["type"] == "revolute" else forces[i]))
    assert_close(np.array(projected), with_ext, "axis projection of segment wrenches")

    # Newton's law for the whole tree: Σ root joint forces + Σ external forces + M g = Σ m a_com.
    data = model.createData()
    pin.centerOfMass(model, data, *(ref._to_pin(model, s[key]) for key in ("q", "qd", "qdd")))
    total_mass = sum(seg["mass"] for seg in d["segments"])
    roots = [i for i, seg in enumerate(d["segments"]) if seg["parent"] is None]
    lhs = forces[roots].sum(axis=0) + s["force"].sum(axis=0) + total_mass * np.array(d["gravity"])
    assert_close(lhs, total_mass * np.array(data.acom[0]), "Newton, whole body")


# ---------------------------------------------------------------------------------------------------
# jaxbio against Pinocchio
# ---------------------------------------------------------------------------------------------------


# fixtures `jb` and `_float64`: tests/dynamics/conftest.py
pytestmark = pytest.mark.usefixtures("_float64")


def _compare_all(jb, tree, model, seed: int, n_states: int = N_STATES, d: dict | None = None):
    """Compare every public rigid-body function of jaxbio with Pinocchio at random states.

    Axial trees (revolute/prismatic only) draw states with `random_state`; a tree with ball, free or
    fixed joints needs its model dict ``d`` and draws them with `tests._models.random_mixed_state`
    (unit quaternions in ``q``, ``nv``-long velocities).
    """
    import jax.numpy as jnp

    assert (tree.nq, tree.nv) == (model.nq, model.nv)
    axial = all(t in ("revolute", "prismatic") for t in tree.joint_types)
    assert axial or d is not None, "a tree with ball, free or fixed joints needs its model dict"
    n = tree.n_segments
    rng = np.random.default_rng(seed)
    for k in range(n_states):
        s = random_state(rng, n) if axial else random_mixed_state(rng, d)
        q, qd, qdd, tau = (jnp.asarray(s[key]) for key in ("q", "qd", "qdd", "tau"))
        external = (jnp.asarray(s["force"]), jnp.asarray(s["moment"]))
        tag = f"state {k}"

        positions, quaternions = jb.forward_kinematics(tree, q)
        positions, quaternions = np.asarray(positions), np.asarray(quaternions)
        ref_positions, ref_quaternions = ref.pin_forward_kinematics(model, s["q"])
        assert_close(positions, ref_positions, f"{tag}: forward_kinematics positions")
        assert_close(np.linalg.norm(quaternions, axis=1), np.ones(n), f"{tag}: quaternion norms")
        canonical = quaternions * np.where(quaternions[:, :1] < 0, -1.0, 1.0)
        assert_close(canonical, ref_quaternions, f"{tag}: forward_kinematics quaternions (w >= 0)")

        assert_close(
            jb.inverse_dynamics(tree, q, qd, qdd),
            ref.pin_inverse_dynamics(model, s["q"], s["qd"], s["qdd"]),
            f"{tag}: inverse_dynamics",
        )
        assert_close(
            jb.inverse_dynamics(tree, q, qd, qdd, external=external),
            ref.pin_inverse_dynamics(model, s["q"], s["qd"], s["qdd"], s["force"], s["moment"]),
            f"{tag}: inverse_dynamics with external wrenches",
        )
        forces, moments = jb.segment_wrenches(tree, q, qd, qdd, external=external)
        ref_forces, ref_moments = ref.pin_segment_wrenches(model, s["q"], s["qd"], s["qdd"], s["force"], s["moment"])
        assert_close(forces, ref_forces, f"{tag}: segment_wrenches forces")
        assert_close(moments, ref_moments, f"{tag}: segment_wrenches moments")

        assert_close(jb.mass_matrix(tree, q), ref.pin_mass_matrix(model, s["q"]), f"{tag}: mass_matrix")
        assert_close(jb.bias_forces(tree, q, qd), ref.pin_bias_forces(model, s["q"], s["qd"]), f"{tag}: bias_forces")
        assert_close(jb.gravity_forces(tree, q), ref.pin_gravity_forces(model, s["q"]), f"{tag}: gravity_forces")
        assert_close(
            jb.forward_dynamics(tree, q, qd, tau),
            ref.pin_forward_dynamics(model, s["q"], s["qd"], s["tau"]),
            f"{tag}: forward_dynamics",
        )
        assert_close(
            jb.forward_dynamics(tree, q, qd, tau, external=external),
            ref.pin_forward_dynamics(model, s["q"], s["qd"], s["tau"], s["force"], s["moment"]),
            f"{tag}: forward_dynamics with external wrenches",
        )
        assert_close(
            jb.kinetic_energy(tree, q, qd), ref.pin_kinetic_energy(model, s["q"], s["qd"]), f"{tag}: kinetic_energy"
        )
        assert_close(jb.potential_energy(tree, q), ref.pin_potential_energy(model, s["q"]), f"{tag}: potential_energy")
        assert_close(jb.center_of_mass(tree, q), ref.pin_center_of_mass(model, s["q"]), f"{tag}: center_of_mass")


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [p if p.stem in ("arm7", "wholebody") else pytest.param(p, marks=pytest.mark.slow) for p in MODEL_FILES],
    ids=[p.stem for p in MODEL_FILES],
)
def test_model_files_match_pinocchio(jb, path):
    d = json.loads(path.read_text())
    tree = jb.load_model(path).tree
    model = ref.build_pinocchio_model(d)
    assert list(tree.names) == [s["name"] for s in d["segments"]]
    _compare_all(jb, tree, model, seed=len(d["segments"]), d=d)


@pytest.mark.parametrize(
    "n, seed",
    [(1, 0), pytest.param(5, 0, marks=pytest.mark.slow), pytest.param(12, 0, marks=pytest.mark.slow)]
    + [pytest.param(n, s, marks=pytest.mark.slow) for n in (1, 5, 12) for s in (1, 2)],
)
def test_random_trees_match_pinocchio(jb, n, seed):
    d = random_tree_dict(n, seed)
    tree = jb.SegmentTree.from_dict(d)
    model = ref.build_pinocchio_model(d)
    _compare_all(jb, tree, model, seed=1000 + seed, n_states=3)


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_double_pendulum_matches_pinocchio(jb):
    d = double_pendulum_dict()
    _compare_all(jb, jb.SegmentTree.from_dict(d), ref.build_pinocchio_model(d), seed=4)
