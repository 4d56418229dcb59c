"""Spherical, free and fixed joints, massless frames and slender rods: jaxbio against Pinocchio.

The trees come from `tests._models.random_mixed_tree_dict` (every joint type, massless frames between
hinges, rods with a positive semi-definite inertia); the reference is tests/pinocchio_ref.py
(FreeFlyer and Spherical joints, fixed segments appended to their supporting joint with a BODY frame).
Tolerance and error measure as tests/dynamics/test_pinocchio.py: ``||a - b|| / max(||b||, 1)`` ≤ 1e-10
in float64.

The first group checks the reference itself, without jaxbio: a numpy forward kinematics written
from API.md, the velocity convention (finite differences of that kinematics along local-frame
velocities), each ball/free joint emulated by a chain of revolute/prismatic joints with massless links
(the 1-DOF reference that tests/dynamics/test_pinocchio.py checks against closed forms), and
Pinocchio's algorithms against each other. The second group compares jaxbio's public API, one state at
a time and under `jax.vmap` over states.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pin = pytest.importorskip("pinocchio", reason="Pinocchio reference tests need `pip install pin`")

from tests import pinocchio_ref as ref  # noqa: E402
from tests._models import (  # noqa: E402
    JOINT_NV,
    REPO,
    model_sizes,
    random_mixed_state,
    random_mixed_tree_dict,
)
from tests.dynamics.test_pinocchio import RTOL, assert_close  # noqa: E402

N_STATES = 3

#: the five trees of the jaxbio comparison: (id, generator seed, keyword arguments of
#: `random_mixed_tree_dict`); seeds picked so that together they cover every feature
#: (`test_generator_covers_the_features`)
TREE_SPECS = [
    ("kitchen_sink", 44, dict(n_segments=12, free_inner=True, p_massless=0.4, p_rod=0.3, p_world=0.15)),
    (
        "massless_gimbals",
        35,
        dict(
            n_segments=12, p_massless=0.6, weights={"revolute": 0.5, "prismatic": 0.1, "spherical": 0.25, "fixed": 0.15}
        ),
    ),
    ("free_root", 42, dict(n_segments=8)),
    ("grounded", 17, dict(n_segments=7, free_root=False, p_world=0.3)),
    ("rods_and_fixed", 16, dict(n_segments=9, free_inner=True, p_rod=0.5, p_massless=0.3, p_world=0.2)),
]
#: compared with jaxbio in the default run (≈15 s each: one compilation of every function, single
#: and batched); the others are marked slow
DEFAULT_TREES = ("kitchen_sink", "massless_gimbals")
TREE_IDS = [spec[0] for spec in TREE_SPECS]


def mixed_tree(which: str) -> dict:
    _, seed, kwargs = TREE_SPECS[TREE_IDS.index(which)]
    return random_mixed_tree_dict(np.random.default_rng(seed), name=f"mixed_{which}", **kwargs)


def mixed_states(d: dict, seed: int, n: int = N_STATES) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [random_mixed_state(rng, d) for _ in range(n)]


# ---------------------------------------------------------------------------------------------------
# Independent numpy kinematics (API.md) and the chain emulation of ball/free joints
# ---------------------------------------------------------------------------------------------------


def quat_multiply(p, q) -> np.ndarray:
    """Hamilton product ``p ⊗ q`` of ``(w, x, y, z)`` quaternions."""
    pw, px, py, pz = p
    qw, qx, qy, qz = q
    return np.array(
        [
            pw * qw - px * qx - py * qy - pz * qz,
            pw * qx + px * qw + py * qz - pz * qy,
            pw * qy - px * qz + py * qw + pz * qx,
            pw * qz + px * qy - py * qx + pz * qw,
        ]
    )


def quat_exp(omega) -> np.ndarray:
    """Unit quaternion of the rotation vector ``omega`` (rad)."""
    omega = np.asarray(omega, dtype=np.float64)
    angle = np.linalg.norm(omega)
    if angle < 1e-300:
        return np.array([1.0, 0.0, 0.0, 0.0])
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * omega / angle])


def _hom(rotation=None, translation=None) -> np.ndarray:
    t = np.eye(4)
    if rotation is not None:
        t[:3, :3] = rotation
    if translation is not None:
        t[:3, 3] = translation
    return t


def joint_motion(joint: dict, qi) -> np.ndarray:
    """Homogeneous transform of one joint's motion for its jaxbio coordinates ``qi``."""
    kind = joint["type"]
    if kind == "fixed":
        return np.eye(4)
    if kind == "spherical":
        return _hom(ref.quaternion_to_matrix(qi))
    if kind == "free":
        return _hom(ref.quaternion_to_matrix(qi[3:]), qi[:3])
    axis = np.asarray(joint["axis"], dtype=np.float64) / np.linalg.norm(joint["axis"])
    if kind == "prismatic":
        return _hom(translation=qi[0] * axis)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return _hom(np.eye(3) + np.sin(qi[0]) * k + (1 - np.cos(qi[0])) * k @ k)


def numpy_forward_kinematics(d: dict, q) -> np.ndarray:
    """Segment frames ``(n, 4, 4)``: parent · T(origin) · R(orientation) · motion(q) (API.md)."""
    names = [s["name"] for s in d["segments"]]
    frames = []
    start = 0
    for s in d["segments"]:
        joint = s["joint"]
        nq = ref.JOINT_NQ[joint["type"]]
        parent = np.eye(4) if s["parent"] is None else frames[names.index(s["parent"])]
        placement = _hom(ref.quaternion_to_matrix(joint["orientation"]), joint["origin"])
        frames.append(parent @ placement @ joint_motion(joint, np.asarray(q[start : start + nq])))
        start += nq
    return np.array(frames)


def advance(d: dict, q, v, t: float) -> np.ndarray:
    """``q`` moved for time ``t`` along the velocity ``v`` (to first order, exact derivative at 0):
    axial ``q + t q̇``, ball ``Q ⊗ exp(t ω)`` (ω in the segment frame), free ``p + t R(Q) v_lin`` and
    ``Q ⊗ exp(t ω)`` (v_lin the origin's velocity in the segment frame)."""
    out = []
    iq = iv = 0
    for s in d["segments"]:
        kind = s["joint"]["type"]
        qi, vi = np.asarray(q[iq : iq + ref.JOINT_NQ[kind]]), np.asarray(v[iv : iv + JOINT_NV[kind]])
        if kind in ("revolute", "prismatic"):
            out.append(qi + t * vi)
        elif kind == "spherical":
            out.append(quat_multiply(qi, quat_exp(t * vi)))
        elif kind == "free":
            p = qi[:3] + t * ref.quaternion_to_matrix(qi[3:]) @ vi[:3]
            out.append(np.concatenate([p, quat_multiply(qi[3:], quat_exp(t * vi[3:]))]))
        iq += ref.JOINT_NQ[kind]
        iv += JOINT_NV[kind]
    return np.concatenate(out) if out else np.zeros(0)


def emulate_with_chains(d: dict, q) -> tuple[dict, np.ndarray]:
    """The same multibody at ``q`` with every ball joint replaced by three revolute joints about the
    segment's x, y, z axes and every free joint by prismatic x, y, z then revolute x, y, z, through
    massless links, all at zero angle: the first link's placement absorbs the ball/free coordinates,
    so every original segment sits where ``q`` puts it. The velocity coordinates keep their order
    (ω_x, ω_y, ω_z; v_x, v_y, v_z, ω_x, ω_y, ω_z: all in the segment frame, as the chain's axes are
    the segment's axes at zero angle). The last link keeps the segment's name and body.
    Returns ``(dict, q_chain)`` (``q_chain``: ``nv`` long, zeros on the chains)."""
    eye = np.eye(3)
    segments, q_chain = [], []
    iq = 0
    for s in d["segments"]:
        joint = s["joint"]
        kind = joint["type"]
        qi = np.asarray(q[iq : iq + ref.JOINT_NQ[kind]])
        iq += ref.JOINT_NQ[kind]
        if kind not in ("spherical", "free"):
            segments.append(s)
            q_chain.extend(qi.tolist())
            continue
        origin = np.asarray(joint["origin"], dtype=np.float64)
        orientation = np.asarray(joint["orientation"], dtype=np.float64)
        links = [("revolute", eye[k]) for k in range(3)]
        if kind == "free":
            origin = origin + ref.quaternion_to_matrix(orientation) @ qi[:3]
            qi = qi[3:]
            links = [("prismatic", eye[k]) for k in range(3)] + links
        orientation = quat_multiply(orientation, qi)
        parent = s["parent"]
        for k, (link_type, axis) in enumerate(links):
            last = k == len(links) - 1
            placement = (
                {"origin": origin.tolist(), "orientation": orientation.tolist()}
                if k == 0
                else {"origin": [0.0, 0.0, 0.0], "orientation": [1.0, 0.0, 0.0, 0.0]}
            )
            name = s["name"] if last else f"{s['name']}__link{k}"
            body = (
                {k2: s[k2] for k2 in ("mass", "com", "inertia")}
                if last
                else {"mass": 0.0, "com": [0.0, 0.0, 0.0], "inertia": np.zeros((3, 3)).tolist()}
            )
            segments.append(
                {
                    "name": name,
                    "parent": parent,
                    "joint": {"type": link_type, "axis": axis.tolist(), **placement},
                    **body,
                }
            )
            q_chain.append(0.0)
            parent = name
    return {**d, "segments": segments, "name": d.get("name", "model") + "_chains"}, np.asarray(q_chain)


def _rows_by_name(d_from: dict, d_to: dict, x) -> np.ndarray:
    """Per-segment rows of ``d_to`` (``x``) picked in ``d_from``'s segment order, by name."""
    names = [s["name"] for s in d_to["segments"]]
    return np.asarray(x)[[names.index(s["name"]) for s in d_from["segments"]]]


def _spread_by_name(d_from: dict, d_to: dict, x) -> np.ndarray:
    """Per-segment rows ``x`` of ``d_from`` placed in ``d_to``'s order (zeros elsewhere)."""
    names = [s["name"] for s in d_from["segments"]]
    out = np.zeros((len(d_to["segments"]),) + np.shape(x)[1:])
    for k, s in enumerate(d_to["segments"]):
        if s["name"] in names:
            out[k] = x[names.index(s["name"])]
    return out


def _world_fixed(d: dict) -> list[int]:
    """Segments fixed to the world (a chain of fixed joints from the ground)."""
    out: list[int] = []
    for i, s in enumerate(d["segments"]):
        if s["joint"]["type"] == "fixed" and (
            s["parent"] is None or any(d["segments"][k]["name"] == s["parent"] for k in out)
        ):
            out.append(i)
    return out


# ---------------------------------------------------------------------------------------------------
# The reference itself (no jaxbio)
# ---------------------------------------------------------------------------------------------------

REFERENCE_CASES = [pytest.param(which, id=which) for which in TREE_IDS]


def _features(d: dict) -> set[str]:
    """What a model dict exercises: joint types, ``free_inner`` (a free joint below a segment),
    ``world_fixed``, ``fixed_on_fixed``, ``massless_<type>``, ``rod_<type>`` (PSD inertia),
    ``coincident`` (a massless hinge at the origin of a massless parent: a gimbal)."""
    by_name = {s["name"]: s for s in d["segments"]}
    out = {"world_fixed"} if _world_fixed(d) else set()
    for s in d["segments"]:
        kind = s["joint"]["type"]
        parent = by_name[s["parent"]] if s["parent"] is not None else None
        out.add(kind)
        if kind == "free" and parent is not None:
            out.add("free_inner")
        if kind == "fixed" and parent is not None and parent["joint"]["type"] == "fixed":
            out.add("fixed_on_fixed")
        if s["mass"] == 0.0:
            out.add(f"massless_{kind}")
            assert not np.any(np.array(s["inertia"])), "a massless frame has no inertia"
            if parent is not None and parent["mass"] == 0.0 and s["joint"]["origin"] == [0.0, 0.0, 0.0]:
                out.add("coincident")
        elif np.linalg.eigvalsh(np.array(s["inertia"]))[0] == 0.0:
            out.add(f"rod_{kind}")  # the rod along z: diag(I, I, 0), triangle inequality with equality
            assert np.array_equal(np.array(s["inertia"]), np.diag([s["inertia"][0][0]] * 2 + [0.0]))
    return out


def test_generator_covers_the_features():
    """The five test trees together exercise every joint type, a free joint below the root, fixed
    segments on the world and on fixed segments, massless frames with each kind of joint, rods on
    hinges, sliders and ball joints, and coincident massless hinges; nq - nv counts the quaternions."""
    dicts = [mixed_tree(which) for which in TREE_IDS]
    features = set().union(*(_features(d) for d in dicts))
    wanted = {
        "revolute",
        "prismatic",
        "spherical",
        "free",
        "fixed",
        "free_inner",
        "world_fixed",
        "fixed_on_fixed",
        "massless_revolute",
        "massless_prismatic",
        "massless_spherical",
        "massless_fixed",
        "coincident",
        "rod_revolute",
        "rod_prismatic",
        "rod_spherical",
        "rod_fixed",
    }
    assert wanted <= features, sorted(wanted - features)
    for d in dicts:
        nq, nv = model_sizes(d)
        assert nq - nv == sum(s["joint"]["type"] in ("spherical", "free") for s in d["segments"])


@pytest.mark.parametrize("which", REFERENCE_CASES)
def test_reference_kinematics_against_numpy(which):
    """Pinocchio's frame of every segment (fixed ones included) equals API.md's composition with
    jaxbio's q layout (quaternions w first): checks the q conversion and the fixed-segment frames."""
    d = mixed_tree(which)
    model = ref.build_pinocchio_model(d)
    nq, nv = model_sizes(d)
    assert (model.nq, model.nv) == (nq, nv)
    for s in mixed_states(d, 1):
        frames = numpy_forward_kinematics(d, s["q"])
        positions, quaternions = ref.pin_forward_kinematics(model, s["q"])
        assert positions.shape == (len(d["segments"]), 3)
        assert_close(positions, frames[:, :3, 3], "positions")
        assert_close(np.array([ref.quaternion_to_matrix(x) for x in quaternions]), frames[:, :3, :3], "rotations")
        assert np.all(quaternions[:, 0] >= 0)
        assert_close(ref.pin_rotations(model, s["q"]), frames[:, :3, :3], "pin_rotations")
        # q round trip through Pinocchio's layout (w last)
        assert_close(ref.q_from_pin(model, ref.q_to_pin(model, s["q"])), s["q"], "q round trip")


@pytest.mark.parametrize("which", REFERENCE_CASES)
def test_reference_velocities_are_local(which):
    """Velocities: Pinocchio's frame velocities for jaxbio's v equal central differences of the numpy
    kinematics along `advance` (ω of a ball joint and (v, ω) of a free joint in the segment frame)."""
    d = mixed_tree(which)
    model = ref.build_pinocchio_model(d)
    h = 1e-6
    for s in mixed_states(d, 2):
        plus = numpy_forward_kinematics(d, advance(d, s["q"], s["qd"], h))
        minus = numpy_forward_kinematics(d, advance(d, s["q"], s["qd"], -h))
        now = numpy_forward_kinematics(d, s["q"])
        linear = (plus[:, :3, 3] - minus[:, :3, 3]) / (2 * h)
        rdot = (plus[:, :3, :3] - minus[:, :3, :3]) / (2 * h)
        skew = np.einsum("nij,nkj->nik", rdot, now[:, :3, :3])
        angular = np.stack([skew[:, 2, 1], skew[:, 0, 2], skew[:, 1, 0]], axis=1)
        pin_linear, pin_angular = ref.pin_segment_velocities(model, s["q"], s["qd"])
        assert_close(pin_linear, linear, "origin velocities", rtol=1e-7)
        assert_close(pin_angular, angular, "angular velocities", rtol=1e-7)


@pytest.mark.parametrize("which", REFERENCE_CASES)
def test_reference_matches_axial_chain_emulation(which):
    """Each ball joint as three hinges and each free joint as three sliders and three hinges (massless
    links, zero angles, the ball/free coordinates in the first placement): same frames, velocities,
    M(q), g(q), kinetic energy; at q̇ = 0 the same inverse dynamics, segment wrenches and forward
    dynamics with external wrenches. The chain model has one-DOF joints only (the reference that
    tests/dynamics/test_pinocchio.py checks against closed forms), so this checks the ball/free
    conversions of q, v, tau and M, and the fixed-segment wrench recursion."""
    d = mixed_tree(which)
    model = ref.build_pinocchio_model(d)
    for s in mixed_states(d, 3):
        d2, q2 = emulate_with_chains(d, s["q"])
        model2 = ref.build_pinocchio_model(d2)
        assert model2.nq == model2.nv == model.nv
        names = lambda x: _rows_by_name(d, d2, x)  # noqa: E731
        force2, moment2 = (_spread_by_name(d, d2, s[k]) for k in ("force", "moment"))

        positions, quaternions = ref.pin_forward_kinematics(model, s["q"])
        positions2, quaternions2 = ref.pin_forward_kinematics(model2, q2)
        assert_close(names(positions2), positions, "positions")
        assert_close(np.abs(np.sum(names(quaternions2) * quaternions, axis=1)), np.ones(len(positions)), "attitudes")
        for got, want, what in zip(
            ref.pin_segment_velocities(model2, q2, s["qd"]),
            ref.pin_segment_velocities(model, s["q"], s["qd"]),
            ("linear", "angular"),
        ):
            assert_close(names(got), want, f"{what} velocities")
        assert_close(ref.pin_mass_matrix(model2, q2), ref.pin_mass_matrix(model, s["q"]), "M")
        assert_close(ref.pin_gravity_forces(model2, q2), ref.pin_gravity_forces(model, s["q"]), "g")
        assert_close(ref.pin_kinetic_energy(model2, q2, s["qd"]), ref.pin_kinetic_energy(model, s["q"], s["qd"]), "T")
        assert_close(ref.pin_potential_energy(model2, q2), ref.pin_potential_energy(model, s["q"]), "V")
        assert_close(ref.pin_center_of_mass(model2, q2), ref.pin_center_of_mass(model, s["q"]), "COM")

        zero = np.zeros(model.nv)
        tau = ref.pin_inverse_dynamics(model, s["q"], zero, s["qdd"], s["force"], s["moment"])
        assert_close(ref.pin_inverse_dynamics(model2, q2, zero, s["qdd"], force2, moment2), tau, "tau at q̇ = 0")
        wrenches = ref.pin_segment_wrenches(model, s["q"], zero, s["qdd"], s["force"], s["moment"])
        wrenches2 = ref.pin_segment_wrenches(model2, q2, zero, s["qdd"], force2, moment2)
        for got, want, what in zip(wrenches2, wrenches, ("forces", "moments")):
            assert_close(names(got), want, f"segment wrench {what} at q̇ = 0")
        assert_close(
            ref.pin_forward_dynamics(model2, q2, zero, s["tau"], force2, moment2),
            ref.pin_forward_dynamics(model, s["q"], zero, s["tau"], s["force"], s["moment"]),
            "q̈ at q̇ = 0",
        )


def _generalised_from_wrench(model, d, q, forces, moments) -> np.ndarray:
    """Each joint's share of the wrench its segment receives (world force, moment about the origin):
    the axis component for a hinge/slider, the segment-frame moment for a ball, the segment-frame
    (force, moment) for a free joint (API.md's generalised forces)."""
    rotations = ref.pin_rotations(model, q)
    out = []
    for i, s in enumerate(d["segments"]):
        kind = s["joint"]["type"]
        local_f, local_m = rotations[i].T @ forces[i], rotations[i].T @ moments[i]
        if kind in ("revolute", "prismatic"):
            axis = np.asarray(s["joint"]["axis"]) / np.linalg.norm(s["joint"]["axis"])
            out.append([axis @ (local_m if kind == "revolute" else local_f)])
        elif kind == "spherical":
            out.append(local_m)
        elif kind == "free":
            out.append(np.concatenate([local_f, local_m]))
    return np.concatenate(out)


@pytest.mark.parametrize("which", REFERENCE_CASES)
def test_reference_self_consistency(which):
    """Pinocchio against itself with the conversions: CRBA = RNEA columns (finite difference in q̈,
    exact as RNEA is affine in it), M symmetric positive-definite, T = ½ vᵀMv, g and the bias from
    RNEA, ABA∘RNEA = identity, external wrenches = -Σ Jᵀw (frame Jacobians), the segment-wrench
    recursion = RNEA's transmitted wrenches, generalised forces = the joints' share of the segment
    wrenches, COM and V as explicit sums (segments fixed to the world included), Newton for the whole
    tree."""
    d = mixed_tree(which)
    model = ref.build_pinocchio_model(d)
    n, nv = len(d["segments"]), model.nv
    masses = np.array([s["mass"] for s in d["segments"]])
    gravity = np.array(d["gravity"])
    for s in mixed_states(d, 4):
        q, qd, qdd = s["q"], s["qd"], s["qdd"]
        zero = np.zeros(nv)
        mass = ref.pin_mass_matrix(model, q)
        assert_close(mass, mass.T, "M symmetric")
        g = ref.pin_inverse_dynamics(model, q, zero, zero)
        step = 0.5
        columns = np.array([(ref.pin_inverse_dynamics(model, q, zero, step * e) - g) / step for e in np.eye(nv)]).T
        assert_close(mass, columns, "M vs RNEA columns")
        assert np.linalg.eigvalsh(mass)[0] > 0
        assert np.linalg.cond(mass) < 1e6
        assert_close(ref.pin_kinetic_energy(model, q, qd), 0.5 * qd @ mass @ qd, "T")
        assert_close(ref.pin_gravity_forces(model, q), g, "g")
        assert_close(ref.pin_bias_forces(model, q, qd), ref.pin_inverse_dynamics(model, q, qd, zero), "bias")
        tau = ref.pin_inverse_dynamics(model, q, qd, qdd, s["force"], s["moment"])
        assert_close(ref.pin_forward_dynamics(model, q, qd, tau, s["force"], s["moment"]), qdd, "aba∘rnea")
        assert_close(
            mass @ qdd
            + ref.pin_bias_forces(model, q, qd)
            - sum(
                ref.pin_jacobian(model, q, i)[:3].T @ s["force"][i]
                + ref.pin_jacobian(model, q, i)[3:].T @ s["moment"][i]
                for i in range(n)
            ),
            tau,
            "M q̈ + bias - Σ Jᵀw",
        )

        forces, moments = ref.pin_segment_wrenches(model, q, qd, qdd, s["force"], s["moment"])
        for got, want, what in zip(
            ref.pin_segment_wrenches(model, q, qd, qdd, s["force"], s["moment"], method="newton_euler"),
            (forces, moments),
            ("forces", "moments"),
        ):
            assert_close(got, want, f"segment wrench {what}: Newton–Euler recursion vs RNEA")
        assert_close(_generalised_from_wrench(model, d, q, forces, moments), tau, "joint share of segment wrenches")

        frames = numpy_forward_kinematics(d, q)
        coms = np.einsum("nij,nj->ni", frames[:, :3, :3], np.array([x["com"] for x in d["segments"]]))
        coms += frames[:, :3, 3]
        assert_close(ref.pin_segment_coms(model, q), coms, "segment COMs")
        assert_close(ref.pin_potential_energy(model, q), -np.sum(masses * (coms @ gravity)), "V")
        assert_close(ref.pin_center_of_mass(model, q), masses @ coms / masses.sum(), "COM")

        # Newton: Σ root forces + Σ external forces + m g = Σ m a_com (world-fixed bodies: a = 0)
        data = model.createData()
        pin.centerOfMass(model, data, *(ref._to_pin(model, x) for x in (q, qd, qdd)))
        roots = [i for i, x in enumerate(d["segments"]) if x["parent"] is None]
        lhs = forces[roots].sum(axis=0) + s["force"].sum(axis=0) + masses.sum() * gravity
        assert_close(lhs, data.mass[0] * np.array(data.acom[0]), "Newton, whole tree")


@pytest.mark.parametrize("which", REFERENCE_CASES[:2])
def test_reference_integrate(which):
    """`pin_integrate` in jaxbio's layout: a ball joint's Q ⊗ exp(ω), a free joint's pose times the
    SE(3) exponential of the segment-frame twist, hinges and sliders q + v (for jb.configuration)."""
    from scipy.linalg import expm

    d = mixed_tree(which)
    model = ref.build_pinocchio_model(d)
    for s in mixed_states(d, 5, n=2):
        got = ref.pin_integrate(model, s["q"], s["qd"])
        iq = iv = 0
        for seg in d["segments"]:
            kind = seg["joint"]["type"]
            qi, vi, gi = (
                s["q"][iq : iq + ref.JOINT_NQ[kind]],
                s["qd"][iv : iv + JOINT_NV[kind]],
                got[iq : iq + ref.JOINT_NQ[kind]],
            )
            if kind in ("revolute", "prismatic"):
                want = qi + vi
            elif kind == "spherical":
                want = quat_multiply(qi, quat_exp(vi))
            elif kind == "free":
                w = vi[3:]
                twist = np.zeros((4, 4))
                twist[:3, :3] = [[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]]
                twist[:3, 3] = vi[:3]
                pose = _hom(ref.quaternion_to_matrix(qi[3:]), qi[:3]) @ expm(twist)
                want = np.concatenate([pose[:3, 3], quat_multiply(qi[3:], quat_exp(w))])
            else:
                want = np.zeros(0)
            if kind in ("spherical", "free"):  # either sign of the quaternion
                sign = np.sign(np.dot(gi[-4:], want[-4:]))
                want = np.concatenate([want[:-4], sign * want[-4:]])
            assert_close(gi, want, f"integrate {seg['name']}")
            iq += ref.JOINT_NQ[kind]
            iv += JOINT_NV[kind]
        assert_close(ref.pin_difference(model, s["q"], got), s["qd"], "difference ∘ integrate")


# ---------------------------------------------------------------------------------------------------
# jaxbio against Pinocchio
# ---------------------------------------------------------------------------------------------------


# fixtures `jb` and `_float64`: tests/dynamics/conftest.py
pytestmark = pytest.mark.usefixtures("_float64")


def build_tree(jb, d):
    """The jaxbio tree of a model dict (float64)."""
    import jax.numpy as jnp

    return jb.SegmentTree.from_dict(d, dtype=jnp.float64)


_CASES: dict = {}


def case(jb, which: str):
    """``(d, tree, model, states)`` of a test tree, built once per session."""
    if which not in _CASES:
        d = mixed_tree(which)
        _CASES[which] = (
            d,
            build_tree(jb, d),
            ref.build_pinocchio_model(d),
            mixed_states(d, 100 + TREE_IDS.index(which)),
        )
    return _CASES[which]


def _rotations(quaternions) -> np.ndarray:
    return np.array([ref.quaternion_to_matrix(x) for x in np.asarray(quaternions)])


def _external(s):
    import jax.numpy as jnp

    return (jnp.asarray(s["force"]), jnp.asarray(s["moment"]))


# Each check: (jaxbio call on one state, Pinocchio value) -> list of (what, got, want).
# `call(jb, tree, s)` takes one state dict of jnp arrays (or, batched, stacked arrays).


def _fk(jb, tree, s):
    positions, quaternions = jb.forward_kinematics(tree, s["q"])
    return {"positions": positions, "quaternions": quaternions}


def _fk_ref(model, s):
    positions, quaternions = ref.pin_forward_kinematics(model, s["q"])
    return {"positions": positions, "quaternions": quaternions}


def _sw(jb, tree, s, external):
    forces, moments = jb.segment_wrenches(tree, s["q"], s["qd"], s["qdd"], external=_external(s) if external else None)
    return {"forces": forces, "moments": moments}


def _sw_ref(model, s, external):
    args = (s["force"], s["moment"]) if external else ()
    forces, moments = ref.pin_segment_wrenches(model, s["q"], s["qd"], s["qdd"], *args)
    return {"forces": forces, "moments": moments}


CHECKS = {
    "forward_kinematics": (_fk, _fk_ref),
    "inverse_dynamics": (
        lambda jb, t, s: jb.inverse_dynamics(t, s["q"], s["qd"], s["qdd"]),
        lambda m, s: ref.pin_inverse_dynamics(m, s["q"], s["qd"], s["qdd"]),
    ),
    "inverse_dynamics_external": (
        lambda jb, t, s: jb.inverse_dynamics(t, s["q"], s["qd"], s["qdd"], external=_external(s)),
        lambda m, s: ref.pin_inverse_dynamics(m, s["q"], s["qd"], s["qdd"], s["force"], s["moment"]),
    ),
    "segment_wrenches": (lambda jb, t, s: _sw(jb, t, s, False), lambda m, s: _sw_ref(m, s, False)),
    "segment_wrenches_external": (lambda jb, t, s: _sw(jb, t, s, True), lambda m, s: _sw_ref(m, s, True)),
    "mass_matrix": (lambda jb, t, s: jb.mass_matrix(t, s["q"]), lambda m, s: ref.pin_mass_matrix(m, s["q"])),
    "bias_forces": (
        lambda jb, t, s: jb.bias_forces(t, s["q"], s["qd"]),
        lambda m, s: ref.pin_bias_forces(m, s["q"], s["qd"]),
    ),
    "gravity_forces": (lambda jb, t, s: jb.gravity_forces(t, s["q"]), lambda m, s: ref.pin_gravity_forces(m, s["q"])),
    "forward_dynamics": (
        lambda jb, t, s: jb.forward_dynamics(t, s["q"], s["qd"], s["tau"]),
        lambda m, s: ref.pin_forward_dynamics(m, s["q"], s["qd"], s["tau"]),
    ),
    "forward_dynamics_external": (
        lambda jb, t, s: jb.forward_dynamics(t, s["q"], s["qd"], s["tau"], external=_external(s)),
        lambda m, s: ref.pin_forward_dynamics(m, s["q"], s["qd"], s["tau"], s["force"], s["moment"]),
    ),
    "kinetic_energy": (
        lambda jb, t, s: jb.kinetic_energy(t, s["q"], s["qd"]),
        lambda m, s: ref.pin_kinetic_energy(m, s["q"], s["qd"]),
    ),
    "potential_energy": (
        lambda jb, t, s: jb.potential_energy(t, s["q"]),
        lambda m, s: ref.pin_potential_energy(m, s["q"]),
    ),
    "center_of_mass": (lambda jb, t, s: jb.center_of_mass(t, s["q"]), lambda m, s: ref.pin_center_of_mass(m, s["q"])),
}


def _compare(what: str, got, want):
    """Compare one output; quaternions as rotation matrices (either sign) plus their norms."""
    if isinstance(want, dict):
        for key in want:
            _compare(f"{what} {key}", got[key], want[key])
        return
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if what.endswith("quaternions"):
        assert got.shape == want.shape, (what, got.shape, want.shape)
        assert_close(np.linalg.norm(got, axis=-1), np.ones(got.shape[:-1]), f"{what}: norms")
        assert_close(_rotations(got), _rotations(want), f"{what} (as rotation matrices)")
        return
    assert_close(got, want, what, rtol=RTOL)


def _jnp_state(s):
    import jax.numpy as jnp

    return {k: jnp.asarray(v) for k, v in s.items()}


def _evaluate(jb, tree, states: list[dict], batched: bool) -> dict:
    """Every check's jaxbio output for each state (numpy pytrees), or the exception it raised.

    All checks are traced into one `jax.jit` (single states: one call per state; batched: one call of
    `jax.vmap` over the stacked states), which compiles far faster than one program per function. If
    that fails, each check runs on its own (eagerly, or under `jax.vmap`), so that one failing
    function fails only its own tests.
    """
    import jax
    import jax.numpy as jnp

    def run(checks, wrap):
        fn = wrap(lambda s: {name: CHECKS[name][0](jb, tree, s) for name in checks})
        if batched:
            stacked = {k: jnp.asarray(np.stack([s[k] for s in states])) for k in states[0]}
            out = jax.tree_util.tree_map(np.asarray, fn(stacked))
            return [jax.tree_util.tree_map(lambda x: x[k], out) for k in range(len(states))]
        return [jax.tree_util.tree_map(np.asarray, fn(_jnp_state(s))) for s in states]

    try:
        rows = run(list(CHECKS), lambda f: jax.jit(jax.vmap(f) if batched else f))
        return {name: [row[name] for row in rows] for name in CHECKS}
    except Exception:  # noqa: BLE001 - attributed to the failing check below
        pass
    results = {}
    for name in CHECKS:
        try:
            rows = run([name], lambda f: jax.vmap(f) if batched else f)
            results[name] = [row[name] for row in rows]
        except Exception as err:  # noqa: BLE001 - re-raised by that check's tests
            results[name] = err
    return results


_RESULTS: dict = {}


def jaxbio_results(jb, which: str, batched: bool):
    """``(d, model, states, results)`` for a test tree, jaxbio evaluated once per tree and mode."""
    d, tree, model, states = case(jb, which)
    assert (tree.nq, tree.nv, tree.n_segments) == (model.nq, model.nv, len(d["segments"]))
    if (which, batched) not in _RESULTS:
        _RESULTS[which, batched] = _evaluate(jb, tree, states, batched)
    return d, model, states, _RESULTS[which, batched]


def _check_results(label: str, model, states, results, check: str):
    got = results[check]
    if isinstance(got, Exception):
        raise got
    for k, s in enumerate(states):
        _compare(f"{label} state {k}: {check}", got[k], CHECKS[check][1](model, s))


TREE_PARAMS = [
    pytest.param(which, id=which, marks=() if which in DEFAULT_TREES else pytest.mark.slow) for which in TREE_IDS
]


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("which", TREE_PARAMS)
def test_mixed_tree_matches_pinocchio(jb, which, check):
    """One state at a time: every public rigid-body function of jaxbio against Pinocchio."""
    _, model, states, results = jaxbio_results(jb, which, batched=False)
    _check_results(which, model, states, results, check)


@pytest.mark.slow
@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("which", TREE_PARAMS)
def test_mixed_tree_matches_pinocchio_vmapped(jb, which, check):
    """The batched path: the same functions under `jax.vmap` over the states."""
    _, model, states, results = jaxbio_results(jb, which, batched=True)
    _check_results(f"{which} vmapped", model, states, results, check)


@pytest.mark.slow
def test_axial_mixed_tree_matches_pinocchio(jb):
    """The harness on a tree today's jaxbio already handles (revolute/prismatic only, every mass
    positive, no rods): every check passes, single and vmapped."""
    d = random_mixed_tree_dict(
        np.random.default_rng(0),
        6,
        free_root=False,
        p_massless=0.0,
        p_rod=0.0,
        weights={"revolute": 0.7, "prismatic": 0.3},
    )
    tree, model = build_tree(jb, d), ref.build_pinocchio_model(d)
    states = mixed_states(d, 7)
    for batched in (False, True):
        results = _evaluate(jb, tree, states, batched)
        for check in CHECKS:
            _check_results(f"axial{' vmapped' if batched else ''}", model, states, results, check)


@pytest.mark.slow
def test_shipped_wholebody_matches_pinocchio_vmapped(jb):
    """The shipped wholebody (free pelvis, ball lumbar joint, shoulders and hips) under `jax.vmap`
    over states: every check against Pinocchio (one state at a time:
    tests/dynamics/test_pinocchio.py::test_model_files_match_pinocchio)."""
    import jax.numpy as jnp

    d = json.loads((REPO / "jaxbio" / "models" / "wholebody.json").read_text())
    tree, model = jb.load_model("wholebody", dtype=jnp.float64).tree, ref.build_pinocchio_model(d)
    assert (tree.nq, tree.nv, tree.n_segments) == (model.nq, model.nv, len(d["segments"])) == (34, 28, 13)
    states = mixed_states(d, 13)
    results = _evaluate(jb, tree, states, batched=True)
    for check in CHECKS:
        _check_results("wholebody vmapped", model, states, results, check)
