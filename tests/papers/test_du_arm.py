"""Du's static arm (Du 2021, §3.1–3.3): wrenches, biceps/triceps tensions, elbow inverse kinematics.

References: hand calculations by lever arms written out below, a numpy implementation of Du's
hierarchy-level recursion (§3.3.2), scipy's linear programme for the minimal tensions, dense
sampling of the elbow circle, central finite differences, and the package's own kinematics.
"""

import runpy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.spatial.transform import Rotation

import jaxbio as jb
from jaxbio.papers import du_arm as du
from tests._models import REPO

G = 9.81
LOAD = 5.0  # kg held in the hand (the text gives no number)
ORIGIN = np.zeros(3)

ARM2 = du.Arm.de_leva(hand=False, dtype=jnp.float64)
ARM3 = du.Arm.de_leva(hand=True, dtype=jnp.float64)
L1, L2, L3 = 0.2817, 0.2689, 0.0862  # de Leva mean lengths, m
M_U, M_F, M_H = 0.0271 * 73, 0.0162 * 73, 0.0061 * 73  # kg
C_U, C_F, C_H = 0.5772, 0.4574, 0.79  # COM fractions from the proximal end

WEIGHT_AT_WRIST = du.Weights(ratios=jnp.array([1.0]), masses=jnp.array([LOAD]), segments=(1,))
WEIGHT_IN_HAND = du.Weights(ratios=jnp.array([0.75]), masses=jnp.array([LOAD]), segments=(2,))  # Du's w = (3, 0.75)
MUSCLES = du.du_muscles(jnp.float64)
# Du's pair plus a brachialis-like muscle (upper arm at half length → forearm 0.07 from the elbow)
MUSCLES3 = du.ArmMuscles(
    distal_ratios=jnp.array([0.9, 1.1, 0.93]),
    proximal_ratios=jnp.array([1.0, 1.0, 0.5]),
    distal_segments=(1, 1, 1),
    proximal_segments=(0, 0, 0),
    names=("biceps", "triceps", "brachialis"),
)


def du_recursion(parents, starts, ends, masses, com_ratios, g, ext_f, ext_m):
    """Du §3.3.2 in numpy: hierarchy numbers h_i from ``segcons``; from the highest h down,
    F_i = −F_ext − m_i g + Σ_{p_j = i} F_j,  M_i = −M_ext − (c_i × m_i g) + Σ_{p_j = i} (d_i × F_j + M_j)
    (jaxbio's sign: the wrench each segment receives from its parent; children sit at the distal
    end d_i of their parent, as in Du's model)."""
    n = len(parents)
    h = [0 if p < 0 else None for p in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            h[i] = h[p] + 1
    F = np.zeros((n, 3))
    M = np.zeros((n, 3))
    for level in range(max(h), -1, -1):
        for i in (i for i in range(n) if h[i] == level):
            d = ends[i] - starts[i]
            w = masses[i] * g
            F[i] = -ext_f[i] - w
            M[i] = -ext_m[i] - np.cross(com_ratios[i] * d, w)
            for j in (j for j in range(n) if parents[j] == i):
                assert np.allclose(starts[j], ends[i])
                F[i] += F[j]
                M[i] += np.cross(d, F[j]) + M[j]
    return F, M


def planar_pose(upper_arm_up=False):
    """Upper arm vertical (down, or up), forearm horizontal forward (+x): the textbook arm."""
    s = 1.0 if upper_arm_up else -1.0
    return np.array([[0.0, 0.0, s * L1], [L2, 0.0, s * L1]])


@jax.jit
def recursion_with(ends, tensions):
    """A second pass built from the public pieces (tree, weight and muscle wrenches, jaxbio's
    recursion), independent of `arm_statics`'s batched shortcut."""
    root = jnp.zeros(3)
    tree = du.arm_tree(ARM2, root, ends)
    wf, wm = du.weight_wrenches(ARM2, root, ends, WEIGHT_AT_WRIST)
    mf, mm = du.muscle_wrenches(ARM2, root, ends, MUSCLES, tensions)
    z = jnp.zeros(2)
    return jb.segment_wrenches(tree, z, z, z, (wf + mf, wm + mm))


# ---------------------------------------------------------------------------------------------
# §3.1–3.2: two segments
# ---------------------------------------------------------------------------------------------
def test_static_arm_and_biceps_against_hand_calculation():
    ends = planar_pose()
    st = du.arm_statics(ARM2, ORIGIN, ends, WEIGHT_AT_WRIST, MUSCLES)
    # hand calculation, lever arms about the elbow (0, 0, −L1): forearm COM at x = C_F L2, load at
    # x = L2; gravity moment about +y is x·m·g, the joint must supply the opposite
    m_elbow = -G * (M_F * C_F * L2 + LOAD * L2)
    # about the shoulder the upper-arm COM has no lever (it hangs below the shoulder)
    m_shoulder = -G * (M_F * C_F * L2 + LOAD * L2 + M_U * 0.0)
    np.testing.assert_allclose(st.forces[1], [0, 0, G * (M_F + LOAD)], rtol=0, atol=1e-12)
    np.testing.assert_allclose(st.forces[0], [0, 0, G * (M_U + M_F + LOAD)], rtol=0, atol=1e-12)
    np.testing.assert_allclose(st.moments[1], [0, m_elbow, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(st.moments[0], [0, m_shoulder, 0], rtol=0, atol=1e-12)

    # biceps: from 0.1 L2 in front of the elbow to the shoulder; moment arm = distance from the
    # elbow to that line = r L1 / sqrt(r² + L1²); the triceps (behind the elbow) stays slack
    r = 0.1 * L2
    ell = np.hypot(r, L1)
    mu = abs(m_elbow) / (r * L1 / ell)
    np.testing.assert_allclose(st.muscles.tensions, [mu, 0.0], rtol=1e-12)
    assert bool(st.muscles.feasible)
    # recursion with the muscle pair: zero elbow moment, elbow force minus the pull μu,
    # shoulder wrench unchanged (the pull's other end is at the shoulder centre)
    u = np.array([-r, 0.0, L1]) / ell
    np.testing.assert_allclose(st.muscle_moments[1], 0.0, atol=1e-11)
    np.testing.assert_allclose(st.muscle_forces[1], st.forces[1] - mu * u, atol=1e-10)
    np.testing.assert_allclose(st.muscle_forces[0], st.forces[0], atol=1e-10)
    np.testing.assert_allclose(st.muscle_moments[0], st.moments[0], atol=1e-10)

    # the same numbers from a second pass through the public pieces: the recursion with the muscle
    # wrenches added gives zero elbow moment
    f0, m0 = recursion_with(jnp.asarray(ends), jnp.zeros(2))
    np.testing.assert_allclose(m0, st.moments, atol=1e-12)
    np.testing.assert_allclose(f0, st.forces, atol=1e-12)
    f1, m1 = recursion_with(jnp.asarray(ends), st.muscles.tensions)
    np.testing.assert_allclose(m1[1], 0.0, atol=1e-12)
    np.testing.assert_allclose(m1, st.muscle_moments, atol=1e-12)
    np.testing.assert_allclose(f1, st.muscle_forces, atol=1e-10)
    arms = du.muscle_moment_arms(ARM2, ORIGIN, ends, MUSCLES, 1)
    np.testing.assert_allclose(np.linalg.norm(arms, axis=1), [r * L1 / ell] * 2, rtol=1e-12)


def ratio_formulas(parents, root, ends, muscles, tensions, joint):
    """Du's ratio-attached muscles written out in numpy (Du 2021, eqs. 4–5, du_arm's own formulas
    before it used `jaxbio.muscles.geometry`): attachment points ``ends − r d``, direction ``u``
    distal → proximal, moment arm ``(p_d − joint centre) × u`` for the muscles spanning the joint,
    the pull ``±μ u`` at both ends with moments about each segment's proximal end."""
    par = np.asarray(parents)
    starts = np.where((par < 0)[:, None], root[None], ends[np.maximum(par, 0)])
    kd, kp = np.asarray(muscles.distal_segments), np.asarray(muscles.proximal_segments)
    pd = ends[kd] - np.asarray(muscles.distal_ratios)[:, None] * (ends[kd] - starts[kd])
    pp = ends[kp] - np.asarray(muscles.proximal_ratios)[:, None] * (ends[kp] - starts[kp])
    u = (pp - pd) / np.linalg.norm(pp - pd, axis=1)[:, None]

    def in_subtree(k):
        while k >= 0:
            if k == joint:
                return True
            k = parents[k]
        return False

    spans = np.array([in_subtree(a) and not in_subtree(b) for a, b in zip(kd, kp)])
    arms = np.where(spans[:, None], np.cross(pd - starts[joint], u), 0.0)
    f = np.asarray(tensions)[:, None] * u
    forces, moments = np.zeros_like(ends), np.zeros_like(ends)
    np.add.at(forces, kd, f)
    np.add.at(forces, kp, -f)
    np.add.at(moments, kd, np.cross(pd - starts[kd], f))
    np.add.at(moments, kp, np.cross(pp - starts[kp], -f))
    return pd, pp, u, arms, forces, moments


@pytest.mark.slow  # ≈22 s; the hand-calculated and 3-D lever-arm tests stay in the default run
def test_muscle_paths_route_equals_du_ratio_formulas_on_random_poses():
    """`muscle_points`, `muscle_moment_arms` and `muscle_wrenches` go through
    `jaxbio.muscles.geometry` (a `MusclePaths` with points fixed in the segment frames); on random
    poses they equal Du's ratio formulas to 1e-12, for Du's pair, a three-muscle set and muscles
    crossing two joints (hand → upper arm)."""
    rng = np.random.default_rng(16)
    cross_two = du.ArmMuscles(
        distal_ratios=jnp.array([0.3, 0.8]),
        proximal_ratios=jnp.array([0.4, 0.6]),
        distal_segments=(2, 2),
        proximal_segments=(0, 1),
        names=("long", "short"),
    )
    for arm, muscles in ((ARM2, MUSCLES), (ARM2, MUSCLES3), (ARM3, MUSCLES), (ARM3, MUSCLES3), (ARM3, cross_two)):
        for _ in range(1):  # one random pose per arrangement (each builds and compiles a new tree)
            root = rng.normal(size=3)
            ends = root + np.cumsum(rng.normal(size=(arm.n, 3)) * 0.3, axis=0)
            tensions = rng.uniform(0.0, 500.0, size=len(muscles.names))
            got = du.muscle_points(arm, root, ends, muscles)
            for joint in range(arm.n):
                ref = ratio_formulas(arm.parents, root, ends, muscles, tensions, joint)
                for a, b in zip(got, ref[:3]):
                    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
                np.testing.assert_allclose(
                    du.muscle_moment_arms(arm, root, ends, muscles, joint), ref[3], rtol=0, atol=1e-12
                )
            f, m = du.muscle_wrenches(arm, root, ends, muscles, tensions)
            np.testing.assert_allclose(f, ref[4], rtol=0, atol=1e-12 * tensions.max())
            np.testing.assert_allclose(m, ref[5], rtol=0, atol=1e-12 * tensions.max())
            # the public MusclePaths with the public tree: the core's lengths are |p_p − p_d|
            paths = du.muscle_paths(arm, root, ends, muscles)
            tree = du.arm_tree(arm, root, ends)
            np.testing.assert_allclose(
                jb.muscles.geometry.lengths(paths, tree, jnp.zeros(arm.n)),
                np.linalg.norm(ref[1] - ref[0], axis=1),
                rtol=1e-13,
            )


def test_eq5_as_printed_omits_the_proximal_half():
    """``form="distal_only"`` (eq. 5 as printed) differs from the force pair by exactly the omitted
    proximal half, ``−μ u`` at the proximal attachment (numpy, from Du's ratios); in the recursion
    the joints the muscles span are unchanged and the shoulder carries the pull."""
    rng = np.random.default_rng(21)
    root = rng.normal(size=3)
    ends = root + np.cumsum(rng.normal(size=(3, 3)) * 0.3, axis=0)
    tensions = np.array([310.0, 0.0, 140.0])
    pair = du.muscle_wrenches(ARM3, root, ends, MUSCLES3, tensions)
    printed = du.muscle_wrenches(ARM3, root, ends, MUSCLES3, tensions, form="distal_only")
    starts = np.concatenate([root[None], ends[:-1]])
    kp = np.asarray(MUSCLES3.proximal_segments)
    kd = np.asarray(MUSCLES3.distal_segments)
    pd = ends[kd] - np.asarray(MUSCLES3.distal_ratios)[:, None] * (ends[kd] - starts[kd])
    pp = ends[kp] - np.asarray(MUSCLES3.proximal_ratios)[:, None] * (ends[kp] - starts[kp])
    u = (pp - pd) / np.linalg.norm(pp - pd, axis=1)[:, None]
    half_f, half_m = np.zeros((3, 3)), np.zeros((3, 3))  # the proximal half of each pair
    np.add.at(half_f, kp, -tensions[:, None] * u)
    np.add.at(half_m, kp, np.cross(pp - starts[kp], -tensions[:, None] * u))
    assert np.abs(half_m).max() > 1.0  # the brachialis's upper-arm end is off the shoulder
    np.testing.assert_allclose(pair[0] - printed[0], half_f, rtol=0, atol=1e-12 * tensions.max())
    np.testing.assert_allclose(pair[1] - printed[1], half_m, rtol=0, atol=1e-12 * tensions.max())
    # eq. 5 as printed, term by term: [u μ ; (1 − r_d) d_{n_d} × u μ] on the distal segment
    lever = (1.0 - np.asarray(MUSCLES3.distal_ratios))[:, None] * (ends[kd] - starts[kd])
    np.testing.assert_allclose(printed[0][1], np.sum(tensions[:, None] * u, axis=0), atol=1e-12 * tensions.max())
    np.testing.assert_allclose(
        printed[1][1], np.sum(np.cross(lever, tensions[:, None] * u), axis=0), atol=1e-12 * tensions.max()
    )
    # Du's biceps on the planar arm: same tension, same elbow wrench; the shoulder force differs by
    # the pull μ u — as printed it is an external pull on the forearm that the shoulder no longer
    # has to supply (its proximal end sits on the shoulder centre: no moment there)
    ends2 = planar_pose()
    a = du.arm_statics(ARM2, ORIGIN, ends2, WEIGHT_AT_WRIST, MUSCLES)
    b = du.arm_statics(ARM2, ORIGIN, ends2, WEIGHT_AT_WRIST, MUSCLES, form="distal_only")
    np.testing.assert_allclose(b.muscles.tensions, a.muscles.tensions, rtol=1e-13)
    np.testing.assert_allclose(b.muscle_forces[1], a.muscle_forces[1], atol=1e-10)
    np.testing.assert_allclose(b.muscle_moments[1], a.muscle_moments[1], atol=1e-10)
    r = 0.1 * L2
    u_b = np.array([-r, 0.0, L1]) / np.hypot(r, L1)
    mu = float(a.muscles.tensions[0])
    assert mu > 100.0
    np.testing.assert_allclose(a.muscle_forces[0] - b.muscle_forces[0], mu * u_b, atol=1e-10)
    np.testing.assert_allclose(b.muscle_moments[0], a.muscle_moments[0], atol=1e-9)
    with pytest.raises(ValueError, match="form must be one of"):
        du.muscle_wrenches(ARM2, ORIGIN, ends2, MUSCLES, np.ones(2), form="distal")
    with pytest.raises(ValueError, match="form must be one of"):
        du.arm_statics(ARM2, ORIGIN, ends2, WEIGHT_AT_WRIST, MUSCLES, form="printed")


def test_muscle_paths_refuse_another_tree():
    """The paths record the arm's tree (`MusclePaths.built_for`): another model is refused by name."""
    paths = du.muscle_paths(ARM2, ORIGIN, planar_pose(upper_arm_up=True), MUSCLES)
    other = jb.load_model("arm7").tree
    with pytest.raises(ValueError, match="arm7"):
        jb.muscles.geometry.lengths(paths, other, jnp.zeros(other.nq))


def test_triceps_when_gravity_flexes_the_elbow():
    ends = planar_pose(upper_arm_up=True)
    st = du.arm_statics(ARM2, ORIGIN, ends, WEIGHT_AT_WRIST, MUSCLES)
    m_elbow = -G * (M_F * C_F * L2 + LOAD * L2)
    np.testing.assert_allclose(st.moments[1], [0, m_elbow, 0], atol=1e-12)
    r = 0.1 * L2
    mu = abs(m_elbow) / (r * L1 / np.hypot(r, L1))
    np.testing.assert_allclose(st.muscles.tensions, [0.0, mu], rtol=1e-12)
    np.testing.assert_allclose(st.muscle_moments[1], 0.0, atol=1e-11)
    np.testing.assert_allclose(recursion_with(jnp.asarray(ends), st.muscles.tensions)[1][1], 0.0, atol=1e-12)


def test_3d_pose_lever_arms_recursion_and_minimal_tensions():
    hand = np.array([0.25, 0.2, -0.3])
    sol = du.elbow_at_angle(ORIGIN, hand, L1, L2, 0.8)
    assert int(sol.case) == du.ElbowCase.CIRCLE
    E = np.asarray(sol.elbow)
    ends = np.stack([E, hand])
    st = du.arm_statics(ARM2, ORIGIN, ends, WEIGHT_AT_WRIST, MUSCLES)
    g = np.array([0.0, 0.0, -G])
    # moments by lever arms: each mass m at point P pulls m g; the joint supplies −Σ (P − J) × m g
    fore_com, up_com = E + C_F * (hand - E), C_U * E
    m_elbow = -(np.cross(fore_com - E, M_F * g) + np.cross(hand - E, LOAD * g))
    m_shoulder = -(np.cross(up_com, M_U * g) + np.cross(fore_com, M_F * g) + np.cross(hand, LOAD * g))
    np.testing.assert_allclose(st.moments[1], m_elbow, atol=1e-12)
    np.testing.assert_allclose(st.moments[0], m_shoulder, atol=1e-12)
    np.testing.assert_allclose(st.forces[0], -(M_U + M_F + LOAD) * g, atol=1e-12)

    # the muscles cancel the elbow moment along the arm-plane normal, and only that part
    n = np.cross(E, hand - E)
    n /= np.linalg.norm(n)
    np.testing.assert_allclose(np.asarray(st.muscles.axis) * np.sign(np.dot(st.muscles.axis, n)), n, atol=1e-12)
    assert abs(np.dot(st.muscle_moments[1], n)) < 1e-11
    inplane = m_elbow - np.dot(m_elbow, n) * n
    np.testing.assert_allclose(st.muscle_moments[1], inplane, atol=1e-10)

    m1 = recursion_with(jnp.asarray(ends), st.muscles.tensions)[1]
    assert abs(np.dot(m1[1], n)) < 1e-12

    # three muscles: minimal total tension vs scipy's linear programme, moment arms by hand:
    # insertion at elbow + (1 − r_d) d, origin at (1 − r_p) of the upper arm, u = origin − insertion
    M = np.asarray(st.moments[1])
    t3 = du.muscle_tensions(ARM2, ORIGIN, ends, MUSCLES3, M, 1)
    ins = E + (1 - np.array([0.9, 1.1, 0.93]))[:, None] * (hand - E)
    org = (1 - np.array([1.0, 1.0, 0.5]))[:, None] * E
    u = (org - ins) / np.linalg.norm(org - ins, axis=1, keepdims=True)
    b = np.cross(ins - E, u) @ n
    lp = linprog(np.ones(3), A_eq=b[None, :], b_eq=[M @ n], bounds=[(0, None)] * 3, method="highs")
    assert lp.status == 0
    np.testing.assert_allclose(t3.tensions, lp.x, rtol=1e-9, atol=1e-9)
    assert np.count_nonzero(np.asarray(t3.tensions)) == 1
    np.testing.assert_allclose(np.dot(t3.residual, n), 0.0, atol=1e-12)


def test_tension_edge_cases():
    # straight arm: every muscle lies along the arm, no moment arm → infeasible, zero, finite
    ends = np.array([[0.0, 0.0, -L1], [0.0, 0.0, -L1 - L2]])
    bent = np.array([[0.0, 0.0, -L1], [L2, 0.0, -L1]])
    sol = du.muscle_tensions(ARM2, ORIGIN, ends, MUSCLES3, jnp.array([0.0, -3.0, 0.0]), 1)
    assert not bool(sol.feasible) and np.all(np.asarray(sol.tensions) == 0)
    assert np.all(np.isfinite(np.asarray(sol.axis)))
    # no moment needed → zero tensions, feasible
    sol = du.muscle_tensions(ARM2, ORIGIN, bent, MUSCLES3, jnp.zeros(3), 1)
    assert bool(sol.feasible) and np.all(np.asarray(sol.tensions) == 0)
    # only the biceps given and a moment it cannot produce → infeasible
    biceps = du.ArmMuscles(
        distal_ratios=jnp.array([0.9]),
        proximal_ratios=jnp.array([1.0]),
        distal_segments=(1,),
        proximal_segments=(0,),
        names=("biceps",),
    )
    sol = du.muscle_tensions(ARM2, ORIGIN, bent, biceps, jnp.array([0.0, 3.0, 0.0]), 1)
    assert not bool(sol.feasible) and float(sol.tensions[0]) == 0
    with pytest.raises(ValueError, match="joint"):
        du.muscle_tensions(ARM2, ORIGIN, bent, MUSCLES3, jnp.zeros(3), 5)


# ---------------------------------------------------------------------------------------------
# §3.3: arm with hand, hierarchy levels, weights as wrenches
# ---------------------------------------------------------------------------------------------
def test_hand_tree_by_hierarchy_level_matches_du_recursion():
    grip = np.array([0.3, -0.1, -0.15])
    hand_x, hand_z = np.array([1.0, 0.0, 0.3]), np.array([-0.3, 0.0, 1.0])
    ends, sol = du.hand_arm_pose(ARM3, grip, hand_x, hand_z)
    assert bool(sol.valid) and int(sol.case) == du.ElbowCase.CIRCLE
    ends = np.asarray(ends)
    # Du's D₂ = grip − w₂ l₃ ĥ, D₃ = grip + (1 − w₂) l₃ ĥ
    h = hand_x / np.linalg.norm(hand_x)
    np.testing.assert_allclose(ends[1], grip - 0.75 * L3 * h, atol=1e-15)
    np.testing.assert_allclose(ends[2], grip + 0.25 * L3 * h, atol=1e-15)
    st = du.arm_statics(ARM3, ORIGIN, ends, WEIGHT_IN_HAND, MUSCLES)
    # Du's hierarchy numbers: one segment per level, processed deepest first
    assert jax.eval_shape(du.arm_tree, ARM3, ORIGIN, ends).levels == ((0,), (1,), (2,))
    starts = np.vstack([ORIGIN, ends[:-1]])
    g = np.array([0.0, 0.0, -G])
    # the weight wrench of §3.3.2: [m g ; (w₂ d_hand) × m g] on the hand
    ext_f = np.zeros((3, 3))
    ext_m = np.zeros((3, 3))
    ext_f[2] = LOAD * g
    ext_m[2] = np.cross(0.75 * (ends[2] - ends[1]), LOAD * g)
    F, M = du_recursion((-1, 0, 1), starts, ends, [M_U, M_F, M_H], [C_U, C_F, C_H], g, ext_f, ext_m)
    np.testing.assert_allclose(st.forces, F, atol=1e-12)
    np.testing.assert_allclose(st.moments, M, atol=1e-12)
    # tensions: elbow moment along the arm plane normal cancelled, the wrist untouched
    assert abs(float(jnp.dot(st.muscle_moments[1], st.muscles.axis))) < 1e-11
    np.testing.assert_allclose(st.muscle_moments[2], st.moments[2], atol=1e-12)
    np.testing.assert_allclose(st.muscle_moments[0], st.moments[0], atol=1e-10)


def test_branching_tree_two_fingers_by_level():
    """Du Fig. 3.3.1 (right): two 'fingers' on the hand; several weights on several segments."""
    arm = du.Arm(
        lengths=jnp.array([L1, L2, L3, 0.05, 0.04]),
        masses=jnp.array([M_U, M_F, M_H, 0.02, 0.015]),
        com_ratios=jnp.array([C_U, C_F, C_H, 0.5, 0.5]),
        gyration_ratios=jnp.tile(jnp.array([0.3, 0.2]), (5, 1)),
        gravity=jnp.array([0.0, 0.0, -G]),
        names=("upper_arm", "forearm", "hand", "finger_a", "finger_b"),
        parents=(-1, 0, 1, 2, 2),
    )
    ends = np.array(
        [[0.05, 0.02, -0.28], [0.3, 0.05, -0.25], [0.38, 0.06, -0.22], [0.42, 0.08, -0.21], [0.41, 0.03, -0.23]]
    )
    weights = du.Weights(ratios=jnp.array([0.75, 1.0, 0.3]), masses=jnp.array([2.0, 0.5, 1.0]), segments=(2, 3, 1))
    st = du.arm_statics(arm, ORIGIN, ends, weights)
    assert jax.eval_shape(du.arm_tree, arm, ORIGIN, ends).levels == ((0,), (1,), (2,), (3, 4))
    starts = np.vstack([ORIGIN, ends[[0, 1, 2, 2]]])  # Du's segcons: each starts at its parent's end
    g = np.array([0.0, 0.0, -G])
    ext_f = np.zeros((5, 3))
    ext_m = np.zeros((5, 3))
    for k, r, m in zip((2, 3, 1), (0.75, 1.0, 0.3), (2.0, 0.5, 1.0)):
        ext_f[k] += m * g
        ext_m[k] += np.cross(r * (ends[k] - starts[k]), m * g)
    F, M = du_recursion(arm.parents, starts, ends, np.asarray(arm.masses), np.asarray(arm.com_ratios), g, ext_f, ext_m)
    np.testing.assert_allclose(st.forces, F, atol=1e-12)
    np.testing.assert_allclose(st.moments, M, atol=1e-12)
    assert st.muscles is None


@pytest.mark.slow
def test_tree_geometry_and_model_validation():
    """The tree's origins, COMs and inertias where Du puts them; it passes the model validator."""
    ends = np.array([[0.05, 0.02, -0.28], [0.3, 0.05, -0.25], [0.38, 0.06, -0.22]])
    tree = du.arm_tree(ARM3, ORIGIN, ends)
    starts = np.asarray(du.segment_starts(ARM3, ORIGIN, ends))
    np.testing.assert_allclose(starts, np.vstack([ORIGIN, ends[:2]]), atol=0)
    pos, att = jb.forward_kinematics(tree, jnp.zeros(3))
    np.testing.assert_allclose(pos, starts, atol=1e-15)
    np.testing.assert_allclose(att, np.tile([1.0, 0, 0, 0], (3, 1)), atol=0)
    coms = jb.dynamics.segment_coms(tree, jnp.zeros(3))
    np.testing.assert_allclose(coms, starts + np.array([C_U, C_F, C_H])[:, None] * (ends - starts), atol=1e-15)
    # inertia: Du's segment-frame diag(k_l², k_t², k_t²) m L² rotated to the world
    for i in range(3):
        d = ends[i] - starts[i]
        L = np.linalg.norm(d)
        x = d / L
        y = np.cross([0, 0, 1.0], x)
        y /= np.linalg.norm(y)
        R = np.stack([x, y, np.cross(x, y)], axis=1)
        kt, kl = np.asarray(ARM3.gyration_ratios[i])
        I = R @ np.diag([kl**2, kt**2, kt**2]) @ R.T * float(ARM3.masses[i]) * L**2
        np.testing.assert_allclose(tree.inertias[i], I, atol=1e-15)
    again = jb.SegmentTree.from_dict(tree.to_dict(), dtype=jnp.float64)
    z = jnp.zeros(3)
    np.testing.assert_allclose(
        jb.segment_wrenches(again, z, z, z)[1], jb.segment_wrenches(tree, z, z, z)[1], atol=1e-12
    )
    pd, pp, u = du.muscle_points(ARM3, ORIGIN, ends, MUSCLES)
    np.testing.assert_allclose(pd, starts[1] + np.array([[0.1], [-0.1]]) * (ends[1] - starts[1]), atol=1e-15)
    np.testing.assert_allclose(pp, np.zeros((2, 3)), atol=1e-15)


# ---------------------------------------------------------------------------------------------
# §3.3.1: elbow inverse kinematics
# ---------------------------------------------------------------------------------------------
def circle_points(sol, k=20001):
    n = np.asarray(sol.axis)
    a = np.cross(n, [0.3, 0.5, 0.8])
    a /= np.linalg.norm(a)
    b = np.cross(n, a)
    t = np.linspace(0, 2 * np.pi, k)
    return np.asarray(sol.center) + float(sol.radius) * (np.cos(t)[:, None] * a + np.sin(t)[:, None] * b)


def bending(E, W, h):
    f = W - E
    c = (f @ h) / (np.linalg.norm(f, axis=-1) * np.linalg.norm(h))
    return np.arccos(np.clip(c, -1, 1))


def test_elbow_on_both_spheres_and_least_wrist_bending():
    rng = np.random.default_rng(1)
    shoulder = np.array([0.02, -0.17, 1.4])
    done = behind = 0
    while done < 8:
        W = shoulder + rng.uniform(-0.5, 0.5, 3)
        hx, hz = rng.normal(size=3), rng.normal(size=3)
        sol = du.elbow_position(shoulder, W, L1, L2, hx, hz)
        if int(sol.case) != du.ElbowCase.CIRCLE:
            assert int(sol.case) in (du.ElbowCase.OUT_OF_REACH, du.ElbowCase.TOO_CLOSE)
            continue
        E = np.asarray(sol.elbow)
        assert abs(np.linalg.norm(E - shoulder) - L1) < 1e-12
        assert abs(np.linalg.norm(W - E) - L2) < 1e-12
        best = float(du.wrist_bending(E, W, hx))
        np.testing.assert_allclose(best, bending(E, W, hx), atol=1e-12)
        sampled = bending(circle_points(sol), W, hx)
        assert best <= sampled.min() + 1e-12  # no sampled elbow bends less …
        assert best >= sampled.min() - 1e-6  # … and the sampling comes close (dense grid)
        # Du's construction (Fig. 3.3.5): the circle point towards the intersection X of the hand
        # line W − t ĥ with the circle's plane — the same point whenever X lies behind the wrist
        n, C, h = np.asarray(sol.axis), np.asarray(sol.center), hx / np.linalg.norm(hx)
        t = np.dot(W - C, n) / np.dot(h, n)
        X = W - t * h
        E_du = C + float(sol.radius) * (X - C) / np.linalg.norm(X - C)
        if t > 0:
            np.testing.assert_allclose(E, E_du, atol=1e-12)
            behind += 1
        done += 1
    assert behind >= 2


def test_elbow_cases():
    hx, hz = np.array([0.0, 0.0, -1.0]), np.array([1.0, 0.0, 0.0])
    C = du.ElbowCase

    def solve(W, l1=L1, l2=L2):
        return du.elbow_position(ORIGIN, np.asarray(W, float), l1, l2, hx, hz)

    far = solve([0.0, 0.3, -0.6])
    assert int(far.case) == C.OUT_OF_REACH and not bool(far.valid)
    near = solve([0.0, 0.005, 0.0])
    assert int(near.case) == C.TOO_CLOSE and not bool(near.valid)
    for s in (far, near):
        assert np.all(np.isfinite(np.asarray(s.elbow))) and abs(np.linalg.norm(s.elbow) - L1) < 1e-12
    # single points: stretched (l1 + l2) and folded (|l1 − l2|, either segment longer)
    n = np.array([0.6, 0.0, -0.8])
    for W, l1, l2, case, E in [
        ((L1 + L2) * n, L1, L2, C.STRETCHED, L1 * n),
        ((L1 - L2) * n, L1, L2, C.FOLDED, L1 * n),
        (0.1 * n, 0.2, 0.3, C.FOLDED, -0.2 * n),
    ]:
        s = solve(W, l1, l2)
        assert int(s.case) == case and bool(s.valid) and float(s.radius) == 0.0
        np.testing.assert_allclose(s.elbow, E, atol=1e-14)
        assert abs(np.linalg.norm(W - np.asarray(s.elbow)) - l2) < 1e-12
    # just inside/outside the tolerance band around full stretch
    assert int(solve((L1 + L2) * (1 + 1e-6) * n).case) == C.OUT_OF_REACH
    assert int(solve((L1 + L2) * (1 - 1e-6) * n).case) == C.CIRCLE
    # wrist on the shoulder with equal lengths: the sphere, forearm along the hand
    s = solve(ORIGIN, 0.25, 0.25)
    assert int(s.case) == C.SPHERE and bool(s.valid)
    np.testing.assert_allclose(s.elbow, -0.25 * hx, atol=1e-15)
    # hand along the shoulder → wrist axis: every elbow bends equally; Du's coplanar forward rule
    W = np.array([0.0, 0.0, -0.35])
    s = solve(W)
    assert int(s.case) == C.CIRCLE_AXIAL and bool(s.valid)
    E = np.asarray(s.elbow)
    assert abs(np.linalg.norm(E) - L1) < 1e-12 and abs(np.linalg.norm(W - E) - L2) < 1e-12
    assert abs(np.linalg.det(np.stack([E - W, hx, hz]))) < 1e-14  # forearm in the hand's x–z plane
    f = (W - E) / L2
    assert np.dot(hx - np.dot(hx, f) * f, hz) > 0  # bent towards +hand_z (forwards)
    sampled = bending(circle_points(s, 361), W, hx)
    assert np.ptp(sampled) < 1e-12  # all points tie
    # with the check flag a no-solution case raises (at run time, under jit)
    with pytest.raises(Exception, match="out of reach"):
        du.elbow_position(ORIGIN, np.array([0.0, 0.0, -0.7]), L1, L2, hx, hz, check=True)


def _independent_circle(W, l1, l2, k=20001):
    """The elbow circle written out (shoulder at the origin): centre, radius, axis and ``k`` points
    ``E(t)`` with their angles."""
    d = np.linalg.norm(W)
    n = W / d
    a = (d * d + l1 * l1 - l2 * l2) / (2 * d)
    rho = np.sqrt(l1 * l1 - a * a)
    e1 = np.cross(n, [0.3, 0.5, 0.8])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(n, e1)
    t = np.linspace(0, 2 * np.pi, k)
    point = lambda tt: a * n + rho * (np.cos(tt)[..., None] * e1 + np.sin(tt)[..., None] * e2)  # noqa: E731
    return point, t, a * n, rho, n


def _forward(E, W, hx, hz):
    """Du's forward bend: the hand, relative to the forearm line, turned towards +hand_z (> 0)."""
    f = (W - E) / np.linalg.norm(W - E, axis=-1)[..., None]
    h = hx / np.linalg.norm(hx)
    hzp = hz - np.dot(hz, h) * h
    return (h - (f @ h)[..., None] * f) @ hzp


def test_elbow_hand_parallel_to_circle_plane_follows_du_coplanar_rule():
    """§3.3.1, Fig. 3.3.4: the hand line parallel to the circle's plane is Du's first subcase: the
    forearm coplanar with the hand's x and z axes, bent forwards. Reference: the roots of
    ``det(W − E(t), h_x, h_z)`` on the independently parametrised circle (dense sign changes,
    refined by brentq), the forward one of the two."""
    from scipy.optimize import brentq

    rng = np.random.default_rng(5)
    C = du.ElbowCase
    for _ in range(4):
        n = rng.normal(size=3)
        n /= np.linalg.norm(n)
        W = rng.uniform(0.15, 0.4) * n  # circle radius ≥ 0.2 m
        hx = np.cross(n, rng.normal(size=3))  # ⊥ the shoulder → wrist axis: parallel to the plane
        h = hx / np.linalg.norm(hx)
        hx = h * rng.uniform(0.5, 2.0)
        point, t, centre, rho, _ = _independent_circle(W, L1, L2)
        # the palm plane contains ĥ, its normal tilted by ψ from n × ĥ towards n: a coplanar elbow
        # exists when tan ψ ≤ ρ / |W − C| (two of them)
        psi = rng.choice([-1, 1]) * rng.uniform(0.2, 0.9) * np.arctan(rho / np.linalg.norm(W - centre))
        m = np.cos(psi) * np.cross(n, h) + np.sin(psi) * n
        hz = np.cross(m, h) * rng.uniform(0.5, 2.0) + rng.normal() * h  # any length, any ĥ part
        g = np.linalg.det(
            np.stack([W - point(t), np.broadcast_to(hx, (len(t), 3)), np.broadcast_to(hz, (len(t), 3))], axis=1)
        )
        flips = np.nonzero(np.sign(g[:-1]) != np.sign(g[1:]))[0]
        assert len(flips) == 2
        det = lambda tt: np.linalg.det(np.stack([W - point(tt), hx, hz]))  # noqa: E731
        roots = [point(brentq(det, t[i], t[i + 1], xtol=1e-15)) for i in flips]
        fwd = [_forward(E, W, hx, hz) for E in roots]
        assert fwd[0] * fwd[1] < 0  # one forwards, one backwards
        want = roots[int(np.argmax(fwd))]
        s = du.elbow_position(ORIGIN, W, L1, L2, hx, hz)
        assert int(s.case) == C.CIRCLE_PARALLEL and bool(s.valid)
        np.testing.assert_allclose(s.elbow, want, atol=1e-10)
        # not the least-bending point C − ρĥ (the generic branch's answer, the dense minimum)
        E = np.asarray(s.elbow)
        E_min = centre - rho * hx / np.linalg.norm(hx)
        assert abs(bending(E_min, W, hx) - bending(point(t), W, hx).min()) < 1e-6
        assert np.linalg.norm(E - E_min) > 1e-2 * rho and bending(E, W, hx) > bending(E_min, W, hx) + 1e-6
        # tilt the hand out of the plane's direction by 1e-3: the generic case, least bending
        tilted = du.elbow_position(ORIGIN, W, L1, L2, hx / np.linalg.norm(hx) + 1e-3 * n, hz)
        assert int(tilted.case) == C.CIRCLE
    # a palm plane close to the circle's plane: no coplanar elbow; the elbow brings the forearm
    # closest to the palm plane (least |f · m| over the dense sample), forwards
    n = np.array([0.0, 0.0, -1.0])
    W = 0.45 * n
    hx, hz = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.05])
    point, t, _, _, _ = _independent_circle(W, L1, L2)
    m = np.cross(hx, hz - np.dot(hz, hx) * hx)
    m /= np.linalg.norm(m)
    off = np.abs((W - point(t)) @ m)
    assert off.min() > 1e-3  # really no coplanar elbow
    s = du.elbow_position(ORIGIN, W, L1, L2, hx, hz)
    assert int(s.case) == C.CIRCLE_PARALLEL
    E = np.asarray(s.elbow)
    assert abs(np.dot(W - E, m)) <= off.min() + 1e-12
    assert abs(np.linalg.norm(E) - L1) < 1e-12 and abs(np.linalg.norm(W - E) - L2) < 1e-12
    # without hand_z Du's rule is undefined: the least-bending point C − ρĥ
    s = du.elbow_position(ORIGIN, W, L1, L2, hx)
    assert int(s.case) == C.CIRCLE_PARALLEL
    np.testing.assert_allclose(s.elbow, np.asarray(s.center) - float(s.radius) * hx, atol=1e-14)


def test_elbow_at_angle_theta_zero_is_lowest_and_turns_right_handed():
    hand = np.array([0.25, 0.2, -0.3])
    s0 = du.elbow_at_angle(ORIGIN, hand, L1, L2, 0.0)
    pts = circle_points(s0)
    assert float(s0.elbow[2]) <= pts[:, 2].min() + 1e-12
    th = 0.8
    s1 = du.elbow_at_angle(ORIGIN, hand, L1, L2, th)
    rot = Rotation.from_rotvec(th * np.asarray(s0.axis))
    np.testing.assert_allclose(
        np.asarray(s1.elbow) - np.asarray(s1.center),
        rot.apply(np.asarray(s0.elbow) - np.asarray(s0.center)),
        atol=1e-14,
    )
    # the law of cosines of §3.1: cos(elbow angle) between d1 and d2
    E = np.asarray(s1.elbow)
    cos_t = (hand @ hand - L1**2 - L2**2) / (2 * L1 * L2)
    np.testing.assert_allclose(np.dot(E, hand - E) / (L1 * L2), cos_t, atol=1e-12)
    # vertical arm: θ = 0 by the secondary rule (minimal x)
    sv = du.elbow_at_angle(ORIGIN, np.array([0.0, 0.0, -0.4]), L1, L2, 0.0)
    assert float(sv.elbow[0]) < 0 and abs(float(sv.elbow[1])) < 1e-14


def test_vmap_over_wrist_positions():
    hx, hz = jnp.array([0.2, 0.1, -1.0]), jnp.array([1.0, 0.0, 0.0])
    n = np.array([0.6, 0.0, -0.8])
    wrists = np.array(
        [[0.0, 0.3, -0.6], [0.0, 0.005, 0.0], (L1 + L2) * n, [0.2, 0.1, -0.3], [0.1, -0.2, -0.25], [-0.3, 0.1, 0.1]]
    )
    f = jax.jit(jax.vmap(du.elbow_position, in_axes=(None, 0, None, None, None, None)))
    out = f(jnp.zeros(3), jnp.asarray(wrists), L1, L2, hx, hz)
    C = du.ElbowCase
    np.testing.assert_array_equal(out.case, [C.OUT_OF_REACH, C.TOO_CLOSE, C.STRETCHED, C.CIRCLE, C.CIRCLE, C.CIRCLE])
    np.testing.assert_array_equal(out.valid, [False, False, True, True, True, True])
    assert np.all(np.isfinite(np.asarray(out.elbow)))
    for k, W in enumerate(wrists):
        one = du.elbow_position(ORIGIN, W, L1, L2, hx, hz)
        np.testing.assert_allclose(out.elbow[k], one.elbow, atol=1e-14)


def test_elbow_gradient_matches_finite_differences():
    hz = jnp.array([0.0, 0.0, 1.0])

    def elbow(p):  # p = (wrist (3), l1, l2, hand_x (3))
        return du.elbow_position(jnp.zeros(3), p[:3], p[3], p[4], p[5:8], hz).elbow

    p0 = jnp.array([0.25, -0.1, -0.3, L1, L2, 0.9, 0.2, 0.3])
    assert int(du.elbow_position(ORIGIN, p0[:3], L1, L2, p0[5:8], hz).case) == du.ElbowCase.CIRCLE
    J = np.asarray(jax.jit(jax.jacfwd(elbow))(p0))
    eps = 1e-6
    fd = np.stack(
        [(np.asarray(elbow(p0.at[i].add(eps))) - np.asarray(elbow(p0.at[i].add(-eps)))) / (2 * eps) for i in range(8)],
        axis=1,
    )
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-8)
    assert np.abs(J).max() > 0.1  # not trivially zero


def test_float32():
    hx = jnp.array([0.9, 0.2, 0.3], jnp.float32)
    W = jnp.array([0.25, -0.1, -0.3], jnp.float32)
    s = du.elbow_position(jnp.zeros(3, jnp.float32), W, jnp.float32(L1), jnp.float32(L2), hx)
    assert s.elbow.dtype == jnp.float32 and int(s.case) == du.ElbowCase.CIRCLE
    assert abs(float(jnp.linalg.norm(s.elbow)) - L1) < 1e-6
    assert abs(float(jnp.linalg.norm(W - s.elbow)) - L2) < 1e-6


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
def test_bad_input_raises():
    hx = np.array([1.0, 0.0, 0.0])
    W = np.array([0.2, 0.1, -0.3])
    with pytest.raises(ValueError, match="positive"):
        du.elbow_position(ORIGIN, W, -0.28, L2, hx)
    with pytest.raises(ValueError, match="positive"):
        du.elbow_position(ORIGIN, W, L1, 0.0, hx)
    with pytest.raises(ValueError, match="finite"):
        du.elbow_position(ORIGIN, np.array([np.nan, 0.0, 0.0]), L1, L2, hx)
    with pytest.raises(ValueError, match="hand_x"):
        du.elbow_position(ORIGIN, W, L1, L2, np.zeros(3))
    with pytest.raises(ValueError, match="parallel"):
        du.elbow_position(ORIGIN, W, L1, L2, hx, 2 * hx)
    with pytest.raises(ValueError, match="shape"):
        du.elbow_position(ORIGIN, np.zeros(2), L1, L2, hx)
    with pytest.raises(ValueError, match="theta"):
        du.elbow_at_angle(ORIGIN, W, L1, L2, np.inf)
    with pytest.raises(ValueError, match="hand_length"):
        du.hand_points(W, hx, -1.0)
    # zero-length segment, NaN pose
    with pytest.raises(ValueError, match="zero length"):
        du.arm_tree(ARM2, ORIGIN, np.array([[0.0, 0.0, 0.0], [0.2, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="zero length"):
        du.arm_statics(ARM2, ORIGIN, np.array([[0.0, 0.0, -L1], [0.0, 0.0, -L1]]), WEIGHT_AT_WRIST)
    with pytest.raises(ValueError, match="NaN"):
        du.arm_statics(ARM2, ORIGIN, np.array([[0.0, 0.0, -L1], [np.nan, 0.0, -L1]]), WEIGHT_AT_WRIST)
    with pytest.raises(ValueError, match="shape"):
        du.arm_statics(ARM2, ORIGIN, np.zeros((3, 3)), WEIGHT_AT_WRIST)
    with pytest.raises(ValueError, match="out of range"):
        du.weight_wrenches(ARM2, ORIGIN, planar_pose(), WEIGHT_IN_HAND)
    # bad models
    with pytest.raises(ValueError, match="lengths"):
        du.Arm(
            lengths=jnp.array([-0.3, 0.27]),
            masses=jnp.array([2.0, 1.0]),
            com_ratios=jnp.array([0.5, 0.5]),
            gyration_ratios=jnp.full((2, 2), 0.3),
            gravity=jnp.array([0.0, 0.0, -G]),
            names=("a", "b"),
            parents=(-1, 0),
        )
    with pytest.raises(ValueError, match="masses"):
        du.Weights(ratios=jnp.array([0.5]), masses=jnp.array([-1.0]), segments=(1,))
    with pytest.raises(ValueError, match="distal and proximal"):
        du.ArmMuscles(
            distal_ratios=jnp.array([0.9]),
            proximal_ratios=jnp.array([1.0]),
            distal_segments=(1,),
            proximal_segments=(1,),
            names=("m",),
        )
    # inside jit the same checks raise at run time (equinox.error_if), never a silent NaN
    f = jax.jit(lambda w: du.elbow_position(jnp.zeros(3), w, L1, L2, jnp.asarray(hx)).elbow)
    with pytest.raises(Exception, match="finite"):
        jax.block_until_ready(f(jnp.array([jnp.nan, 0.0, 0.0])))


# ---------------------------------------------------------------------------------------------
# the example
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_example_runs(capsys):
    runpy.run_path(str(REPO / "examples" / "arm_statics.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "biceps" in out and "elbow" in out and "out of reach" in out and "stretched" in out


@pytest.mark.slow
def test_tension_gradient_through_ik_and_recursion():
    """d(biceps tension)/d(grip) through the IK, the tree and both recursions vs finite differences."""
    hx, hz = jnp.array([1.0, 0.0, 0.3]), jnp.array([-0.3, 0.0, 1.0])

    def tension(grip):
        ends, _ = du.hand_arm_pose(ARM3, grip, hx, hz)
        return du.arm_statics(ARM3, jnp.zeros(3), ends, WEIGHT_IN_HAND, MUSCLES).muscles.tensions[0]

    g0 = jnp.array([0.3, -0.1, -0.15])
    grad = np.asarray(jax.jit(jax.grad(tension))(g0))
    f = jax.jit(tension)
    eps = 1e-6
    fd = np.array([(float(f(g0.at[i].add(eps))) - float(f(g0.at[i].add(-eps)))) / (2 * eps) for i in range(3)])
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)
    # vmap over grips: the same tensions as one grip at a time
    grips = g0 + jnp.array([[0.0, 0.0, 0.0], [0.05, 0.02, -0.03], [-0.04, 0.05, 0.02]])
    np.testing.assert_allclose(jax.jit(jax.vmap(tension))(grips), [float(f(x)) for x in grips], rtol=1e-12)


def test_de_leva_arm_reads_the_one_anthropometric_table():
    from jaxbio.models.anthropometrics import DE_LEVA_MALE

    arm = du.Arm.de_leva(hand=True, body_mass=80.0, dtype=jnp.float64)
    rows = [DE_LEVA_MALE[k] for k in ("upper_arm", "forearm", "hand")]
    np.testing.assert_allclose(arm.lengths, [r.length_mm / 1000 for r in rows], rtol=1e-15)
    np.testing.assert_allclose(arm.masses, [80.0 * r.mass / 100 for r in rows], rtol=1e-15)
    np.testing.assert_allclose(arm.com_ratios, [r.com / 100 for r in rows], rtol=1e-15)
