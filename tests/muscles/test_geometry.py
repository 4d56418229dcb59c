"""Muscle path geometry (jaxbio.muscles.geometry) and the shipped muscle sets (jaxbio.muscles.sets).

Independent references: a closed-form two-point muscle over one revolute joint, central finite
differences of the lengths, the wrench route through `jaxbio.inverse_dynamics` (statics), and
left/right symmetry of the planar gait model. Float64 (tests/conftest.py) unless stated.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.model import model_path
from jaxbio.muscles import geometry, sets

SETS = {name: sets.load_muscle_set(name, dtype=jnp.float64) for name in sets.muscle_sets()}


def random_q(tree, rng, scale=1.0):
    q = rng.uniform(-scale, scale, tree.nq)
    # keep the planar gait model's prismatic pelvis translations small (m)
    q[~tree.is_revolute] *= 0.3
    return jnp.asarray(q)


# ---- closed form: one revolute joint, origin at distance a, insertion at distance b -------------


def _hinge_tree():
    """Two segments on the z axis at the world origin: ``seg0`` (holds the origin point) and
    ``seg1`` (holds the insertion), both revolute about +z through the same point."""
    seg = lambda name, parent: {
        "name": name,
        "parent": parent,
        "joint": {"type": "revolute", "axis": [0, 0, 1], "origin": [0, 0, 0]},
        "mass": 1.0,
        "com": [0, -0.1, 0],
        "inertia": np.diag([0.01, 0.01, 0.01]).tolist(),
    }
    return jb.SegmentTree.from_dict(
        {"gravity": [0, -9.81, 0], "segments": [seg("seg0", None), seg("seg1", "seg0")]}, dtype=jnp.float64
    )


@pytest.mark.parametrize("origin_frame", ["seg0", "ground"])
def test_two_point_closed_form(origin_frame):
    a, b, alpha = 0.3, 0.05, 0.4  # origin at angle alpha on the parent, insertion on the child's x axis
    theta0 = -alpha
    tree = _hinge_tree()
    paths = geometry.MusclePaths.from_points(
        tree,
        {"m": [(origin_frame, [a * np.cos(alpha), a * np.sin(alpha), 0.0]), ("seg1", [b, 0.0, 0.0])]},
        dtype=jnp.float64,
    )
    theta = np.linspace(-2.5, 2.5, 11)
    l = np.array([geometry.lengths(paths, tree, jnp.array([0.0, t]))[0] for t in theta])
    r = np.array([geometry.moment_arms(paths, tree, jnp.array([0.0, t]))[0] for t in theta])
    l_ref = np.sqrt(a**2 + b**2 - 2 * a * b * np.cos(theta + theta0))
    r_ref = -(a * b * np.sin(theta + theta0)) / l_ref  # −dl/dθ
    np.testing.assert_allclose(l, l_ref, rtol=1e-12)
    np.testing.assert_allclose(r[:, 1], r_ref, rtol=1e-10, atol=1e-14)
    # origin on seg0: q0 moves both points together; on the ground: l depends on q0 + q1
    np.testing.assert_allclose(r[:, 0], 0.0 if origin_frame == "seg0" else r_ref, atol=1e-12)


def test_two_point_origin_on_ground_moves_with_parent_joint():
    # origin on the ground: rotating seg0 (which carries seg1) changes the angle to the origin
    a, b, alpha = 0.3, 0.05, 0.4
    tree = _hinge_tree()
    paths = geometry.MusclePaths.from_points(
        tree,
        {"m": [("ground", [a * np.cos(alpha), a * np.sin(alpha), 0.0]), ("seg1", [b, 0.0, 0.0])]},
        dtype=jnp.float64,
    )
    q = jnp.array([0.7, -0.2])
    l = geometry.lengths(paths, tree, q)[0]
    np.testing.assert_allclose(l, np.sqrt(a**2 + b**2 - 2 * a * b * np.cos(0.5 - alpha)), rtol=1e-12)


def test_zero_length_at_run_time_has_finite_gradients():
    # a = b and θ + θ0 = 0: both points meet; length 0, moment arm and gradients finite (no NaN)
    tree = _hinge_tree()
    paths = geometry.MusclePaths.from_points(
        tree, {"m": [("seg0", [0.1, 0.0, 0.0]), ("seg1", [0.1, 0.0, 0.0])]}, dtype=jnp.float64
    )
    q = jnp.zeros(2)
    assert float(geometry.lengths(paths, tree, q)[0]) == 0.0
    assert np.all(np.isfinite(geometry.moment_arms(paths, tree, q)))
    g = jax.grad(lambda p: geometry.lengths(p, tree, q).sum())(paths)
    assert np.all(np.isfinite(g.points))


# ---- the shipped sets: finite differences, velocities, the wrench route -----------------------


def _random_3d_paths(rng):
    """A 3-D chain of 5 segments, revolute and prismatic joints about random axes with random
    origins and orientations, and 4 muscles of 2–5 points, on segments and on the ground."""
    segments = []
    for i, kind in enumerate(["revolute", "prismatic", "revolute", "revolute", "prismatic"]):
        o = rng.normal(size=4)
        segments.append(
            {
                "name": f"s{i}",
                "parent": None if i == 0 else f"s{i - 1}",
                "joint": {
                    "type": kind,
                    "axis": (rng.normal(size=3)).tolist(),
                    "origin": (0.3 * rng.normal(size=3)).tolist(),
                    "orientation": (o / np.linalg.norm(o)).tolist(),
                },
                "mass": 1.0,
                "com": [0.0, -0.1, 0.0],
                "inertia": (0.01 * np.eye(3)).tolist(),
            }
        )
    tree = jb.SegmentTree.from_dict({"gravity": [0, -9.81, 0], "segments": segments}, dtype=jnp.float64)
    frames = ["ground", "s0", "s1", "s2", "s3", "s4"]
    muscles = {
        f"m{k}": [
            (frames[j], (0.2 * rng.normal(size=3)).tolist()) for j in sorted(rng.choice(6, size=size, replace=False))
        ]
        for k, size in enumerate([2, 3, 4, 5])
    }
    return tree, geometry.MusclePaths.from_points(tree, muscles, dtype=jnp.float64)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gait10dof18musc", "random 3-D chain"])
def test_straight_moment_arms_equal_jacfwd(model):
    """`moment_arms` of straight paths on revolute/prismatic trees (virtual work from one
    forward-kinematics pass) against `jax.jacfwd` of the lengths, and its own derivative against
    the lengths' second derivatives; under `jax.vmap`. Slow (11–13 s each, the Hessians' compile);
    the default run checks the same route against central differences
    (`test_moment_arms_match_central_differences`)."""
    rng = np.random.default_rng(11)
    if model == "gait10dof18musc":
        tree, paths, _ = SETS[model]
        q = jnp.stack([random_q(tree, rng) for _ in range(8)])
    else:
        tree, paths = _random_3d_paths(rng)
        q = jnp.asarray(rng.uniform(-1.5, 1.5, (8, tree.nq)))
    assert tree.is_axial and not paths.path_wraps  # the virtual-work route
    length = lambda x: geometry.lengths(paths, tree, x)  # noqa: E731
    r = jax.jit(jax.vmap(lambda x: geometry.moment_arms(paths, tree, x)))(q)
    ref = jax.vmap(jax.jacfwd(length))(q)
    assert float(jnp.abs(ref).max()) > 1e-2  # the muscles do cross the coordinates
    np.testing.assert_allclose(r, -ref, rtol=1e-12, atol=1e-14)
    dr = jax.vmap(jax.jacfwd(lambda x: geometry.moment_arms(paths, tree, x)))(q)
    np.testing.assert_allclose(dr, -jax.vmap(jax.hessian(length))(q), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(SETS))
def test_moment_arms_match_central_differences(name):
    tree, paths, _ = SETS[name]
    rng = np.random.default_rng(0)
    h = 1e-6
    for _ in range(2):
        q = random_q(tree, rng)
        E = jnp.eye(tree.nq)
        f = lambda x: geometry.lengths(paths, tree, x)
        fd = jnp.stack([(f(q + h * E[j]) - f(q - h * E[j])) / (2 * h) for j in range(tree.nq)], axis=1)
        np.testing.assert_allclose(geometry.moment_arms(paths, tree, q), -fd, atol=1e-8)


def test_lengthening_velocity_is_minus_r_qd():
    tree, paths, _ = SETS["gait10dof18musc"]
    rng = np.random.default_rng(1)
    q, qd = random_q(tree, rng), jnp.asarray(rng.normal(size=tree.nq))
    v = geometry.lengthening_velocity(paths, tree, q, qd)
    np.testing.assert_allclose(v, -geometry.moment_arms(paths, tree, q) @ qd, rtol=1e-12, atol=1e-14)
    # and the finite difference along the motion
    h = 1e-6
    fd = (geometry.lengths(paths, tree, q + h * qd) - geometry.lengths(paths, tree, q - h * qd)) / (2 * h)
    np.testing.assert_allclose(v, fd, atol=1e-8)
    # both from one jvp: the same numbers, also under jit(vmap)
    l2, v2 = geometry.lengths_and_velocities(paths, tree, q, qd)
    np.testing.assert_array_equal(l2, geometry.lengths(paths, tree, q))
    np.testing.assert_allclose(v2, v, rtol=1e-14, atol=1e-16)
    lb, vb = jax.jit(jax.vmap(lambda a, b: geometry.lengths_and_velocities(paths, tree, a, b)))(q[None], qd[None])
    np.testing.assert_allclose(lb[0], l2, rtol=1e-14)
    np.testing.assert_allclose(vb[0], v, rtol=1e-12, atol=1e-15)
    # its gradient (power −F·v with respect to q̇ is F·r) and a wrong shape named
    F = jnp.linspace(10.0, 200.0, paths.n_muscles)
    g = jax.grad(lambda b: -F @ geometry.lengths_and_velocities(paths, tree, q, b)[1])(qd)
    np.testing.assert_allclose(g, geometry.moment_arms(paths, tree, q).T @ F, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"qd has shape \(9,\)"):
        geometry.lengths_and_velocities(paths, tree, q, qd[:9])


@pytest.mark.parametrize("name", list(SETS))
def test_wrench_route_equals_moment_arm_route(name):
    """The muscles' wrenches on the segments (Du 2021, §3.2) act like joint torques τ = rᵀF.

    `inverse_dynamics` returns the generalised force still needed from the joints; the external
    wrench already supplies τ_muscle = rᵀF, so with − without = −rᵀF (any q, qd = qdd = 0)."""
    tree, paths, params = SETS[name]
    rng = np.random.default_rng(2)
    z = jnp.zeros(tree.nq)
    for _ in range(2):
        q = random_q(tree, rng)
        F = params.max_isometric_force * jnp.asarray(rng.uniform(0.0, 1.0, paths.n_muscles))
        tau_muscle = geometry.moment_arms(paths, tree, q).T @ F  # = generalized_forces (tested below)
        ext = geometry.muscle_wrenches(paths, tree, q, F)
        diff = jb.inverse_dynamics(tree, q, z, z, external=ext) - jb.inverse_dynamics(tree, q, z, z)
        np.testing.assert_allclose(diff, -tau_muscle, atol=1e-9 * float(jnp.max(F)))


def test_wrenches_balance_for_muscles_between_two_segments():
    # arm26 BRA runs humerus → forearm only: equal and opposite forces on the two segments
    tree, paths, _ = SETS["arm26"]
    F = jnp.zeros(paths.n_muscles).at[paths.index("BRA")].set(100.0)
    f, _ = geometry.muscle_wrenches(paths, tree, jnp.array([0.3, 1.2]), F)
    np.testing.assert_allclose(f[0], -f[1], atol=1e-12)
    np.testing.assert_allclose(jnp.linalg.norm(f[0]), 100.0, rtol=1e-12)


def test_generalized_forces_do_the_muscles_power():
    # τ·q̇ = −F·l̇: the power the joints receive is what the tensions deliver while shortening
    tree, paths, params = SETS["gait10dof18musc"]
    rng = np.random.default_rng(3)
    q, qd = random_q(tree, rng), jnp.asarray(rng.normal(size=tree.nq))
    F = params.max_isometric_force * 0.5
    tau = geometry.generalized_forces(paths, tree, q, F)
    np.testing.assert_allclose(tau, geometry.moment_arms(paths, tree, q).T @ F, rtol=1e-12)
    np.testing.assert_allclose(tau @ qd, -F @ geometry.lengthening_velocity(paths, tree, q, qd), rtol=1e-10)


def test_gait_left_right_symmetric():
    tree, paths, _ = SETS["gait10dof18musc"]
    rng = np.random.default_rng(4)
    leg = rng.uniform(-1.0, 0.5, 3)
    q = jnp.zeros(tree.nq).at[3:6].set(leg).at[6:9].set(leg)
    r = geometry.moment_arms(paths, tree, q)
    l = geometry.lengths(paths, tree, q)
    np.testing.assert_allclose(l[:9], l[9:], rtol=1e-12)
    np.testing.assert_allclose(r[:9, 3:6], r[9:, 6:9], atol=1e-12)
    np.testing.assert_allclose(r[:9, 6:9], 0.0, atol=1e-12)


def test_gait_moment_arm_signs():
    # OpenSim conventions: hip flexion +, knee angle + = extension, ankle + = dorsiflexion
    tree, paths, _ = SETS["gait10dof18musc"]
    q = jnp.zeros(tree.nq).at[4].set(-0.5)
    r = dict(zip(paths.names, np.asarray(geometry.moment_arms(paths, tree, q))))
    hip, knee, ankle = 3, 4, 5
    assert r["iliopsoas_r"][hip] > 0 and r["glut_max_r"][hip] < 0 and r["hamstrings_r"][hip] < 0
    assert r["vasti_r"][knee] > 0 and r["rect_fem_r"][knee] > 0 and r["bifemsh_r"][knee] < 0
    assert r["tib_ant_r"][ankle] > 0 and r["soleus_r"][ankle] < 0 and r["gastroc_r"][ankle] < 0


# ---- arm26 ------------------------------------------------------------------------------------


def test_arm26_loads_and_matches_its_source():
    tree, paths, params = SETS["arm26"]
    assert tree.names == ("r_humerus", "r_ulna_radius_hand")
    assert sets.coordinate_names("arm26") == ("r_shoulder_elev", "r_elbow_flex")
    assert paths.names == ("TRIlong", "TRIlat", "TRImed", "BIClong", "BICshort", "BRA") == params.names
    assert paths.counts == (5, 5, 5, 9, 6, 2)
    np.testing.assert_allclose(params.max_isometric_force, [798.52, 624.3, 624.3, 624.3, 435.56, 987.26])
    np.testing.assert_allclose(params.pennation_angle[0], 0.20943951)
    # the shipped model file is exactly what sets.arm26_model_dict() builds from the copied tables
    assert json.loads(model_path("arm26").read_text()) == json.loads(json.dumps(sets.arm26_model_dict()))
    # points on OpenSim's base are fixed in the world at base + (0, 0.8, 0), whatever q is
    pts = geometry.path_points_world(paths, tree, jnp.array([1.0, 1.5]))
    np.testing.assert_allclose(pts[0, 0], [-0.05365, 0.8 - 0.01373, 0.14723], atol=1e-15)
    # the forearm hangs below the shoulder at q = 0
    pos, _ = jb.forward_kinematics(tree, jnp.zeros(2))
    np.testing.assert_allclose(pos[1], [-0.017545 + 0.0061, 0.793 - 0.2904, 0.17 - 0.0123], atol=1e-12)


def test_arm26_vmap_over_1000_frames():
    tree, paths, _ = SETS["arm26"]
    rng = np.random.default_rng(5)
    qs = jnp.asarray(np.stack([rng.uniform(-1.5, 3.1, 1000), rng.uniform(0.0, 2.26, 1000)], axis=1))
    both = jax.jit(jax.vmap(lambda q: (geometry.lengths(paths, tree, q), geometry.moment_arms(paths, tree, q))))
    l, r = both(qs)
    assert l.shape == (1000, 6) and r.shape == (1000, 6, 2)
    assert np.all(l > 0) and np.all(np.isfinite(r))
    for i in (0, 517, 999):
        np.testing.assert_allclose(l[i], geometry.lengths(paths, tree, qs[i]), rtol=1e-12)
    # elbow: triceps extend (r < 0), BRA and biceps flex (r > 0) in mid-flexion
    mid = np.asarray(geometry.moment_arms(paths, tree, jnp.array([0.0, 1.57])))[:, 1]
    assert np.all(mid[:3] < 0) and np.all(mid[3:] > 0)


def test_float32():
    tree, paths, _ = SETS["arm26"]
    t32, p32 = tree.astype(jnp.float32), paths.astype(jnp.float32)
    q = random_q(tree, np.random.default_rng(6))
    l32 = geometry.lengths(p32, t32, q.astype(jnp.float32))
    r32 = geometry.moment_arms(p32, t32, q.astype(jnp.float32))
    assert l32.dtype == jnp.float32 and r32.dtype == jnp.float32
    np.testing.assert_allclose(l32, geometry.lengths(paths, tree, q), rtol=1e-5)
    np.testing.assert_allclose(r32, geometry.moment_arms(paths, tree, q), atol=1e-5)


def test_grad_with_respect_to_attachment_points():
    # d(sum of lengths)/d(points) by jax.grad against a finite difference on one coordinate
    tree, paths, _ = SETS["arm26"]
    q = jnp.array([0.2, 0.9])
    f = lambda p: geometry.lengths(p, tree, q).sum()
    g = jax.grad(f)(paths).points
    assert np.all(np.isfinite(g))
    h = 1e-6
    bump = lambda s: eqx_tree_at_points(paths, paths.points.at[5, 4, 1].add(s))
    np.testing.assert_allclose(g[5, 4, 1], (f(bump(h)) - f(bump(-h))) / (2 * h), atol=1e-8)
    # padding rows receive no gradient
    assert np.all(g[5, 2:] == 0)


def eqx_tree_at_points(paths, points):
    import equinox as eqx

    return eqx.tree_at(lambda p: p.points, paths, points)


# ---- validation -------------------------------------------------------------------------------


def test_bad_inputs_name_muscle_and_point():
    tree = _hinge_tree()
    ok = ("seg0", [0.1, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"muscle 'm1', point 1 \('m1-P2'\): unknown segment 'femur'"):
        geometry.MusclePaths.from_points(tree, {"m1": [ok, ("femur", [0, 0, 0])]})
    with pytest.raises(ValueError, match=r"muscle 'short'.*at least 2 points"):
        geometry.MusclePaths.from_points(tree, {"good": [ok, ("seg1", [0, -1, 0])], "short": [ok]})
    with pytest.raises(ValueError, match=r"muscle 'dup', point 2 \('c'\) coincides with point 1 \('b'\)"):
        geometry.MusclePaths.from_points(
            tree, {"dup": [("ground", [0, 0, 0], "a"), ("seg1", [0.1, 0, 0], "b"), ("seg1", [0.1, 0, 0], "c")]}
        )
    with pytest.raises(ValueError, match=r"muscle 'nan', point 0"):
        geometry.MusclePaths.from_points(tree, {"nan": [("seg0", [np.nan, 0, 0]), ok]})
    # the same point on two different segments is allowed (they separate when the joint moves)
    geometry.MusclePaths.from_points(tree, {"m": [ok, ("seg1", [0.1, 0.0, 0.0])]})
    with pytest.raises(ValueError, match="no muscle set 'leg'"):
        sets.load_muscle_set("leg")
    with pytest.raises(ValueError, match=r"q has shape \(3,\)"):
        geometry.lengths(SETS["arm26"][1], SETS["arm26"][0], jnp.zeros(3))


@pytest.mark.slow
def test_muscle_driven_arm_energy_balance_closes():
    """arm26 driven by its six muscles (activations as ODE states): the change of H equals the
    muscles' work −∫ F·l̇ dt, and activations follow the excitation."""
    import diffrax

    import jaxbio as jb
    from jaxbio.muscles.activation import ActivationDynamics
    from jaxbio.muscles.curves import HillMuscle
    from jaxbio.muscles.drive import MuscleActuatedDrive

    tree, paths, par = sets.load_muscle_set("arm26", dtype=jnp.float64)
    muscles = HillMuscle(
        par.max_isometric_force,
        par.optimal_fiber_length,
        par.tendon_slack_length,
        par.pennation_angle,
        par.max_contraction_velocity,
    )
    excitation = lambda t: jnp.array([0.05, 0.05, 0.05, 0.6, 0.6, 0.6])  # biceps and brachialis on
    drive = MuscleActuatedDrive(tree, paths, muscles, ActivationDynamics(), excitation)
    system = jb.HamiltonianSystem(tree, drive=drive)
    y0 = system.initial_state(jnp.array([0.2, 0.8]), a=jnp.full(6, 0.05))
    ts = jnp.linspace(0.0, 0.2, 401)
    tr = jb.simulate(system, y0, 0.0, 0.2, solver=diffrax.Tsit5(), rtol=1e-10, atol=1e-10, ts=ts)
    power = jax.jit(jax.vmap(lambda t, q, qd, f, a: jnp.dot(qd, drive(t, q, qd, f, a))))(ts, tr.q, tr.qd, tr.f, tr.a)
    work = np.trapezoid(np.asarray(power), np.asarray(ts))
    dH = float(tr.energy[-1] - tr.energy[0])
    assert abs(dH - work) < 1e-4 * max(abs(work), 1e-3)
    # the muscles' power on the skeleton equals −F·l̇ at every saved state (τ = rᵀF)
    k = 200
    F = drive.tensions(tr.q[k], tr.qd[k], tr.f[k], tr.a[k])
    ldot = geometry.lengthening_velocity(paths, tree, tr.q[k], tr.qd[k])
    np.testing.assert_allclose(power[k], -jnp.dot(F, ldot), rtol=1e-10)
    assert float(tr.a[-1, 3]) > 0.5 and float(tr.q[-1, 1]) > 0.8  # biceps active, elbow flexes
