"""Blajer et al. 2007, §3, closing remark: joint reactions from the identified muscle forces (``B u``, the
muscles' force pairs on the bones) against those from the net joint torques (``B′u′``), on the
inverse simulation's squat (`jaxbio.papers.blajer_body.squat_motion`).

Independent reference: the muscle forces crossing each joint, summed in numpy from the world
path points (each straight piece with one end in the joint's distal subtree pulls that end
towards the other end with the muscle's tension), moments about the joint centre."""

import numpy as np
import pytest

import jaxbio as jb
from jaxbio.dynamics import reactions_recursion
from jaxbio.dynamics.contact import contact_external
from jaxbio.estimation import actuation_loads, inverse_simulate_motion, joint_reactions
from jaxbio.muscles.geometry import path_points_world
from jaxbio.papers.blajer_body import SQUAT_CONTACTS, sagittal11_muscle_model, squat_motion

LEGS = ("thigh_r", "shank_r", "foot_r", "thigh_l", "shank_l", "foot_l")  # hips, knees, ankles


@pytest.fixture(scope="module")
def model():
    return sagittal11_muscle_model()


@pytest.fixture(scope="module")
def squat():
    """``(q, qd, qdd)`` of 5 frames of the squat (0, 0.375, 0.75 = deepest, 1.125, 1.5 s)."""
    return squat_motion(5)[1:]


def _subtree(tree, i):
    """Segment ``i`` and its descendants (Python, from the parent list)."""
    out = {i}
    for j in range(len(tree.parents)):  # parents come before children
        if tree.parents[j] in out:
            out.add(j)
    return out


def _crossing_wrenches(model, q, F, joints):
    """``(k, 3)`` (Fx, Fy, Mz about the joint centre) of the muscle forces that cross each joint,
    acting on its distal side: numpy, piece by piece."""
    tree, paths = model.tree, model.paths
    W = np.asarray(path_points_world(paths, tree, q))
    seg, mask = paths.segment_index, paths.mask
    origins = np.asarray(jb.forward_kinematics(tree, q)[0])
    out = []
    for name in joints:
        i = tree.names.index(name)
        distal = _subtree(tree, i)
        total = np.zeros(3)
        for j in range(paths.n_muscles):
            for k in range(paths.max_points - 1):
                if not (mask[j, k] and mask[j, k + 1]):
                    continue
                a, b = seg[j, k], seg[j, k + 1]
                if (a in distal) == (b in distal):
                    continue  # the piece does not cross joint i
                here, there = (k, k + 1) if a in distal else (k + 1, k)
                d = W[j, there] - W[j, here]
                f = F[j] * d / np.linalg.norm(d)
                r = W[j, here] - origins[i]
                total += np.array([f[0], f[1], r[0] * f[1] - r[1] * f[0]])
        out.append(total)
    return np.array(out)


@pytest.mark.slow  # ≈ 15 s of CPU: the model, the squat and two reaction programs to compile
def test_difference_is_the_crossing_muscle_forces(model, squat):
    """Any controls (the identity is linear in ``f_u``): B u vs B′u′ reactions on three squat frames."""
    rng = np.random.default_rng(0)
    q, qd, qdd = squat
    ground = rng.normal(size=(5, 3)) * np.array([50.0, 700.0, 20.0])
    worst = 0.0
    for t in (1, 2, 4):
        u = np.concatenate([np.abs(rng.normal(size=model.n_muscles)) * 500.0, rng.normal(size=2) * 10.0])
        kw = dict(contacts=SQUAT_CONTACTS, ground_reaction=ground[t], joints=LEGS)
        mus = np.asarray(joint_reactions(model, q[t], qd[t], qdd[t], u, **kw))
        tor = np.asarray(joint_reactions(model, q[t], qd[t], qdd[t], u, actuation="torques", **kw))
        cross = _crossing_wrenches(model, np.asarray(q[t]), u[: model.n_muscles], LEGS)
        scale = np.abs(cross).max()
        assert scale > 1e3  # hundreds of N per muscle cross these joints
        np.testing.assert_allclose(tor - mus, cross, rtol=0, atol=1e-9 * scale)
        np.testing.assert_array_equal(mus[:, 2], 0.0)  # the muscle-driven joints carry no moment
        worst = max(worst, np.abs(tor - mus - cross).max())
    assert worst < 1e-8


@pytest.mark.slow
def test_actuation_loads_same_generalized_force(model, squat):
    """Muscle force pairs and net torques: one generalised force (inverse dynamics of both); the
    B u reactions of eq. 16 equal those of the d'Alembert recursion given the same loads."""
    rng = np.random.default_rng(1)
    q, qd, qdd = squat
    u = np.concatenate([np.abs(rng.normal(size=model.n_muscles)) * 300.0, [5.0, -3.0]])
    ground = np.array([30.0, 650.0, -12.0])
    mus = np.asarray(joint_reactions(model, q[1], qd[1], qdd[1], u, contacts=SQUAT_CONTACTS, ground_reaction=ground))
    tau, (ef, em) = actuation_loads(model, q[1], u)
    gf, gm = contact_external(model.tree, q[1], SQUAT_CONTACTS, ground[None])
    rec = np.asarray(reactions_recursion(model.tree, q[1], qd[1], qdd[1], (ef + gf, em + gm)))
    # the leg joints (the floating base's prismatic links are not in equilibrium with a made-up
    # ground reaction, so their along-slide force differs: the recursion reports what is needed)
    idx = [model.tree.names.index(j) for j in LEGS]
    np.testing.assert_allclose(rec[idx, :2], mus[idx, :2], rtol=0, atol=1e-9 * np.abs(mus).max())
    assert np.abs(mus[idx, :2]).max() > 1e3
    tau_m, ext = actuation_loads(model, q[1], u)
    tau_t, (zf, zm) = actuation_loads(model, q[1], u, actuation="torques")
    assert np.all(np.asarray(zf) == 0) and np.all(np.asarray(zm) == 0)
    need_m = jb.inverse_dynamics(model.tree, q[1], qd[1], qdd[1], ext) - tau_m
    need_t = jb.inverse_dynamics(model.tree, q[1], qd[1], qdd[1]) - tau_t
    np.testing.assert_allclose(need_m, need_t, rtol=0, atol=1e-9 * np.abs(tau_t).max())


def test_bad_arguments(model):
    q = qd = qdd = np.zeros((1, model.tree.nq))
    u = np.ones(model.n_controls)
    with pytest.raises(ValueError, match="actuation must be one of"):
        joint_reactions(model, q[0], qd[0], qdd[0], u, actuation="bones")
    with pytest.raises(ValueError, match="ground_reaction is required"):
        joint_reactions(model, q[0], qd[0], qdd[0], u, contacts=SQUAT_CONTACTS)
    with pytest.raises(ValueError, match="ground_reaction has shape"):
        joint_reactions(model, q[0], qd[0], qdd[0], u, contacts=SQUAT_CONTACTS, ground_reaction=np.ones(2))
    with pytest.raises(ValueError, match="u has shape"):
        actuation_loads(model, q[0], u[:-1])
    with pytest.raises(ValueError, match="qdd has shape"):
        joint_reactions(model, q[0], qd[0], qdd[0, :5], u)
    with pytest.raises(ValueError, match="frames must be"):
        squat_motion(0)


@pytest.mark.slow
def test_squat_reactions_from_identified_muscle_forces(model, squat):
    """The paper's comparison on the identified controls of the squat (inverse simulation)."""
    q, qd, qdd = squat
    res = inverse_simulate_motion(model, q, qd, qdd, contacts=SQUAT_CONTACTS)
    assert np.all(res.solution.converged) and np.abs(res.moment_residual).max() < 1e-8
    u = np.concatenate([res.muscle_forces, res.torques], axis=1)
    for t in (0, 2):
        kw = dict(contacts=SQUAT_CONTACTS, ground_reaction=res.ground_reaction[t], joints=LEGS)
        mus = np.asarray(joint_reactions(model, q[t], qd[t], qdd[t], u[t], **kw))
        tor = np.asarray(joint_reactions(model, q[t], qd[t], qdd[t], u[t], actuation="torques", **kw))
        cross = _crossing_wrenches(model, np.asarray(q[t]), np.asarray(res.muscle_forces[t]), LEGS)
        np.testing.assert_allclose(tor - mus, cross, rtol=0, atol=1e-9 * max(1.0, np.abs(cross).max()))
        # B′u′'s Mz is the joint moment the muscles produce (inverse simulation's S u)
        J = list(model.joints)
        sign = np.array([float(np.sign(np.asarray(model.tree.axes)[model.tree.names.index(j), 2])) for j in LEGS])
        produced = np.asarray(res.joint_moments[t])[[J.index(model.tree.names.index(j)) for j in LEGS]]
        np.testing.assert_allclose(tor[:, 2], sign * produced, rtol=1e-10, atol=1e-8)
    # at the deepest squat the right knee's compressive force with the muscles is several times
    # the torque-only one (the quadriceps pull the shank onto the femur)
    t = 2
    kw = dict(contacts=SQUAT_CONTACTS, ground_reaction=res.ground_reaction[t], joints=("shank_r",))
    mus = np.asarray(joint_reactions(model, q[t], qd[t], qdd[t], u[t], **kw))[0]
    tor = np.asarray(joint_reactions(model, q[t], qd[t], qdd[t], u[t], actuation="torques", **kw))[0]
    assert np.hypot(*mus[:2]) > 3 * np.hypot(*tor[:2])
