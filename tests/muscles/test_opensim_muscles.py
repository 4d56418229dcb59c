"""OpenSim's Thelen2003Muscle and Millard2012EquilibriumMuscle against live OpenSim (4.x bindings).

Reference: OpenSim itself, driven through its Python API — each curve object's ``calcValue`` /
``calcDerivative``, and one muscle between ground and a slider body (length and lengthening speed
set through the slider coordinate, ``equilibrateMuscles``, then OpenSim's getters and
``calcInextensibleTendonActiveFiberForce``).

Tolerances are OpenSim's own (measured maxima from ``python -m tests.muscles.opensim_agreement``):
- Bézier curves: OpenSim inverts ``x(u)`` to ``|x(u) − x| ≤ 100 ε`` (``UTOL``), so values agree to
  about ``|dy/dx| · 2e-14`` (measured ≤ 3e-13), slopes to ≤ 4e-11, second derivatives (by
  ``jax.grad`` of the slope) to ≤ 2e-12 relative.
- Thelen's closed forms agree to rounding; its force–velocity inverse (OpenSim: Newton to 1e-6 plus
  one step; here closed form) to ≤ 1e-11.
- Equilibria: the iteration is OpenSim's step for step, converged to ``|F_M cos α − F_T| < 1e-8 F⁰``.
  Millard agrees to ≤ 1e-12 (tendon force, F⁰) and ≤ 4e-12 (force–velocity multiplier); Thelen's
  velocity sharing evaluates ``calcfvInv`` with tolerance ``1e-8 F⁰`` inside, which moves the
  stopping point within OpenSim's force tolerance (tendon force ≤ 3e-9 F⁰, fiber length
  ≤ 2e-10 l_opt, f_V ≤ 6e-9 over 200 random states). Static optimisation's force ≤ 2e-11 F⁰.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxbio.muscles import (
    ActiveForceLengthCurve,
    FiberForceLengthCurve,
    ForceVelocityCurve,
    ForceVelocityInverseCurve,
    Millard2012EquilibriumMuscle,
    TendonForceLengthCurve,
    Thelen2003Muscle,
)

opensim = pytest.importorskip("opensim")
opensim.Logger.removeFileSink()  # no opensim.log in the working directory


# ---- OpenSim side -----------------------------------------------------------------------------------


def _one_muscle_model(muscle):
    """``muscle`` from the ground origin to a slider body's origin: its length is the slider
    coordinate, its lengthening speed the coordinate's speed."""
    model = opensim.Model()
    model.setGravity(opensim.Vec3(0, 0, 0))
    body = opensim.Body("slider", 1.0, opensim.Vec3(0), opensim.Inertia(1e-3))
    model.addBody(body)
    joint = opensim.SliderJoint("slide", model.getGround(), body)
    model.addJoint(joint)
    muscle.addNewPathPoint("origin", model.getGround(), opensim.Vec3(0, 0, 0))
    muscle.addNewPathPoint("insertion", body, opensim.Vec3(0, 0, 0))
    model.addForce(muscle)
    state = model.initSystem()
    muscle = type(muscle).safeDownCast(model.getMuscles().get(0))
    return model, state, joint.getCoordinate(), muscle


def _set(osm, length, speed, activation):
    model, s, coord, muscle = osm
    coord.setValue(s, float(length), False)
    coord.setSpeedValue(s, float(speed))
    muscle.setActivation(s, float(activation))
    model.realizeVelocity(s)


def _equilibrate(osm, length, speed, activation) -> dict:
    model, s, _, muscle = osm
    _set(osm, length, speed, activation)
    model.equilibrateMuscles(s)
    model.realizeDynamics(s)
    return dict(
        fiber_length=muscle.getFiberLength(s),
        tendon_force=muscle.getTendonForce(s),
        active_force_length_multiplier=muscle.getActiveForceLengthMultiplier(s),
        passive_force_length_multiplier=muscle.getPassiveForceMultiplier(s),
        force_velocity_multiplier=muscle.getForceVelocityMultiplier(s),
        fiber_velocity=muscle.getFiberVelocity(s),
        pennation_angle=muscle.getPennationAngle(s),
        tendon_length=muscle.getTendonLength(s),
        static_optimization_force=muscle.calcInextensibleTendonActiveFiberForce(s, 1.0),
    )


BASE = dict(
    max_isometric_force=1000.0, optimal_fiber_length=0.1, tendon_slack_length=0.2, pennation_angle_at_optimal=0.0
)
CUSTOM = dict(
    max_isometric_force=800.0,
    optimal_fiber_length=0.08,
    tendon_slack_length=0.25,
    pennation_angle_at_optimal=0.3,
    max_contraction_velocity=8.0,
)
THELEN_CUSTOM = dict(
    CUSTOM,
    FmaxTendonStrain=0.033,
    FmaxMuscleStrain=0.5,
    KshapeActive=0.5,
    KshapePassive=4.0,
    Af=0.3,
    Flen=1.8,
    fv_linear_extrap_threshold=0.9,
    maximum_pennation_angle=1.3,
    minimum_activation=0.02,
)
CURVES_CUSTOM = dict(
    ActiveForceLengthCurve=(0.5, 0.8, 1.7, 0.5, 0.05),
    ForceVelocityCurve=(0.05, 0.3, 4.0, 0.1, 0.2, 1.6, 0.4, 0.7),
    FiberForceLengthCurve=(0.05, 0.6, 0.3, 5.0, 0.6),
    TendonForceLengthCurve=(0.04, 40.0, 0.6, 0.7),
)
CURVE_CLASSES = dict(
    ActiveForceLengthCurve=ActiveForceLengthCurve,
    ForceVelocityCurve=ForceVelocityCurve,
    FiberForceLengthCurve=FiberForceLengthCurve,
    TendonForceLengthCurve=TendonForceLengthCurve,
)


def _thelen(properties):
    """(OpenSim model parts, jaxbio muscle) for Thelen2003Muscle with these XML properties."""
    muscle = opensim.Thelen2003Muscle(
        "m",
        properties["max_isometric_force"],
        properties["optimal_fiber_length"],
        properties["tendon_slack_length"],
        properties["pennation_angle_at_optimal"],
    )
    for name, value in properties.items():
        getattr(muscle, "set_" + name)(value)
    muscle.setMinControl(properties.get("minimum_activation", 0.01))
    return _one_muscle_model(muscle), Thelen2003Muscle.from_opensim(properties)


def _millard(properties, curves, rigid=False):
    muscle = opensim.Millard2012EquilibriumMuscle(
        "m",
        properties["max_isometric_force"],
        properties["optimal_fiber_length"],
        properties["tendon_slack_length"],
        properties["pennation_angle_at_optimal"],
    )
    for name, value in properties.items():
        getattr(muscle, "set_" + name)(value)
    nested = {}
    for name, args in curves.items():
        getattr(muscle, "set" + name)(getattr(opensim, name)(*args))
        nested[name] = dict(zip(CURVE_CLASSES[name].OPENSIM_PROPERTIES, args))
    muscle.set_ignore_tendon_compliance(rigid)
    jm = Millard2012EquilibriumMuscle.from_opensim({**properties, **nested, "ignore_tendon_compliance": rigid})
    return _one_muscle_model(muscle), jm


CASES = {
    "thelen-default": lambda: _thelen(BASE),
    "thelen-custom": lambda: _thelen(THELEN_CUSTOM),
    "millard-default": lambda: _millard(BASE, {}),
    "millard-custom": lambda: _millard(CUSTOM, CURVES_CUSTOM),
    "millard-undamped": lambda: _millard(dict(CUSTOM, fiber_damping=0.0), CURVES_CUSTOM),
    "millard-rigid": lambda: _millard(CUSTOM, CURVES_CUSTOM, rigid=True),
}


def _batch(module, n):
    """The one-muscle ``module`` repeated ``n`` times (one compiled call for ``n`` states)."""
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n,) + x.shape[1:]), module)


def _states(module, n, seed):
    rng = np.random.default_rng(seed)
    lopt = float(module.optimal_fiber_length[0])
    vmax = float(module.max_contraction_velocity[0])
    length = float(module.tendon_slack_length[0]) + lopt * rng.uniform(0.6, 1.5, n)
    speed = lopt * vmax * rng.uniform(-0.5, 0.5, n)
    activation = rng.uniform(0.05, 1.0, n)
    return length, speed, activation


# ---- curves ------------------------------------------------------------------------------------------

CURVE_CASES = {
    "ActiveForceLengthCurve": ((), (0.5, 0.8, 1.7, 0.5, 0.05), (0.2, 2.1)),
    "ForceVelocityCurve": ((), (0.05, 0.3, 4.0, 0.1, 0.2, 1.6, 0.4, 0.7), (-1.3, 1.3)),
    "ForceVelocityInverseCurve": ((), (0.08, 0.3, 4.0, 0.12, 0.2, 1.6, 0.4, 0.7), (-0.2, 1.8)),
    "FiberForceLengthCurve": ((), (0.05, 0.6, 0.3, 5.0, 0.6), (0.8, 1.8)),
    "TendonForceLengthCurve": ((), (0.04, 40.0, 0.6, 0.7), (0.97, 1.08)),
}
JAX_CURVES = dict(CURVE_CLASSES, ForceVelocityInverseCurve=ForceVelocityInverseCurve)


def _curve_pair(name, args):
    return getattr(opensim, name)(*args), JAX_CURVES[name](*args)


def _curve_grid(curve, lo, hi):
    """400 points across the Bézier domain and the linear extensions, and every segment joint."""
    knots = np.asarray(curve.segments().coeff_x[..., 0]).ravel()
    return np.concatenate([np.linspace(lo, hi, 400), knots, [float(curve.segments().x_hi)]])


@pytest.mark.parametrize("which", [0, 1], ids=["default", "custom"])
@pytest.mark.parametrize("name", sorted(CURVE_CASES))
def test_curves_match_opensim(name, which):
    """Value and slope against OpenSim's calcValue / calcDerivative(x, 1)."""
    args = CURVE_CASES[name][which]
    ref, curve = _curve_pair(name, args)
    x = _curve_grid(curve, *CURVE_CASES[name][2])
    y, dy = curve.value_and_derivative(x)
    y_ref = np.array([ref.calcValue(float(v)) for v in x])
    dy_ref = np.array([ref.calcDerivative(float(v), 1) for v in x])
    scale = max(1.0, np.abs(dy_ref).max())
    np.testing.assert_allclose(y, y_ref, rtol=0, atol=2e-13 * scale)
    np.testing.assert_allclose(dy, dy_ref, rtol=0, atol=5e-12 * scale)


@pytest.mark.slow
@pytest.mark.parametrize("which", [0, 1], ids=["default", "custom"])
@pytest.mark.parametrize("name", sorted(CURVE_CASES))
def test_curve_second_derivatives_match_opensim(name, which):
    """``jax.grad`` of the slope (through the custom JVP of the Bézier inversion) against
    OpenSim's calcDerivative(x, 2)."""
    args = CURVE_CASES[name][which]
    ref, curve = _curve_pair(name, args)
    x = _curve_grid(curve, *CURVE_CASES[name][2])
    d2y = jax.vmap(jax.grad(curve.derivative))(jnp.asarray(x))
    d2y_ref = np.array([ref.calcDerivative(float(v), 2) for v in x])
    np.testing.assert_allclose(d2y, d2y_ref, rtol=0, atol=1e-10 * max(1.0, np.abs(d2y_ref).max()))


def test_curve_defaults_match_opensim():
    """Default properties (and OpenSim's fitted optional ones, the ``*_in_use`` values)."""
    for name, cls in JAX_CURVES.items():
        ref, curve = getattr(opensim, name)(), cls()
        for prop in cls.OPENSIM_PROPERTIES:
            if prop in ("stiffness_at_low_force", "stiffness_at_one_norm_force", "norm_force_at_toe_end", "curviness"):
                assert ref.getPropertyByName(prop).size() == 0 and np.isnan(getattr(curve, prop))
                getter = "get" + "".join(w.capitalize() for w in prop.split("_")) + "InUse"
                np.testing.assert_allclose(getattr(curve, prop + "_in_use"), getattr(ref, getter)(), rtol=1e-15)
            else:
                np.testing.assert_allclose(
                    getattr(curve, prop), getattr(ref, "get_" + prop)(), rtol=1e-15, err_msg=f"{name}.{prop}"
                )


def test_fitted_curve_follows_its_strains():
    """Unset optional properties follow the strains, as OpenSim recomputes its fitted values."""
    curve = TendonForceLengthCurve()
    stiffer = eqx.tree_at(lambda c: c.strain_at_one_norm_force, curve, jnp.asarray(0.03))
    ref = opensim.TendonForceLengthCurve(0.03)
    x = np.array([1.005, 1.02, 1.05])
    np.testing.assert_allclose(stiffer(x), [ref.calcValue(v) for v in x], atol=1e-13)


def test_curves_refuse_what_opensim_refuses():
    for bad in [
        lambda: ActiveForceLengthCurve(0.5, 0.4),
        lambda: ForceVelocityCurve(max_eccentric_velocity_force_multiplier=0.9),
        lambda: ForceVelocityInverseCurve(concentric_slope_at_vmax=0.0),
        lambda: FiberForceLengthCurve(0.3, 0.2),
        lambda: FiberForceLengthCurve(stiffness_at_low_force=0.2),
        lambda: TendonForceLengthCurve(0.049, 10.0, 0.5, 0.5),
    ]:
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(Exception):  # noqa: B017 (OpenSim raises its own exception type)
        opensim.TendonForceLengthCurve(0.049, 10.0, 0.5, 0.5).calcValue(1.01)


# ---- Thelen's closed-form curves ------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["thelen-default", "thelen-custom"])
def test_thelen_curves_match_opensim(case):
    """f_L, f_PE, f_T and the force–velocity relation through OpenSim's state: fiber lengths set
    directly (covering f_V's extrapolated branches), and calcActiveFiberForceAlongTendon for
    f_V(ṽ; a) over activations and velocities."""
    osm, jm = CASES[case]()
    model, s, _, muscle = osm
    lopt, lts = float(jm.optimal_fiber_length[0]), float(jm.tendon_slack_length[0])
    fiso, vmax = float(jm.max_isometric_force[0]), float(jm.max_contraction_velocity[0])
    rows = []
    for length in lts + lopt * np.linspace(0.7, 1.6, 7):
        for lce_n in np.linspace(0.45, 1.7, 12):
            for a in (0.1, 0.6):
                _set(osm, length, 0.0, a)
                muscle.setFiberLength(s, float(lce_n * lopt))
                model.realizeDynamics(s)
                rows.append(
                    (
                        muscle.getNormalizedFiberLength(s),
                        muscle.getTendonLength(s) / lts,
                        a,
                        muscle.getActiveForceLengthMultiplier(s),
                        muscle.getPassiveForceMultiplier(s),
                        muscle.getTendonForce(s) / fiso,
                        muscle.getForceVelocityMultiplier(s),
                        muscle.getNormalizedFiberVelocity(s),
                    )
                )
    lce_n, tl_n, a, fal, fpe, fse, fv, v = np.array(rows).T
    np.testing.assert_allclose(jm.active_force_length_multiplier(lce_n), fal, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(jm.passive_force_length_multiplier(lce_n), fpe, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(jm.tendon_force_length_multiplier(tl_n), fse, rtol=1e-13, atol=1e-15)
    clamped = (v == 0) & (fv == 1)
    assert np.unique(np.sign(v[~clamped])).size == 2  # both branches (and extrapolations) seen
    np.testing.assert_allclose(jm.normalized_fiber_velocity(fv, a)[~clamped], v[~clamped], rtol=1e-12, atol=1e-13)

    velocities = np.linspace(-1.3, 1.3, 53)
    activations = np.array([0.05, 0.3, 1.0])
    vv, aa = np.meshgrid(velocities, activations)
    lce = lopt * 0.95
    cos = math.cos(float(jm.pennation.angle(jnp.asarray(lce))[0]))
    fal1 = float(jm.active_force_length_multiplier(0.95)[0])
    ref = np.array(
        [
            muscle.calcActiveFiberForceAlongTendon(float(ai), lce, float(vi) * lopt * vmax)
            for vi, ai in zip(vv.ravel(), aa.ravel())
        ]
    )
    a_clamped = np.maximum(aa.ravel(), float(jm.minimum_activation[0]))
    ours = fiso * a_clamped * fal1 * np.asarray(jm.force_velocity_multiplier(vv.ravel(), a_clamped)) * cos
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-11 * fiso)


# ---- equilibria and static optimisation ---------------------------------------------------------------

#: relative tolerances (fiber length / l_opt, forces / F⁰, multipliers, velocity / (v_max l_opt))
TOLERANCES = {
    "thelen": dict(fiber_length=1e-9, tendon_force=1e-8, multiplier=1e-12, force_velocity=1e-7, fiber_velocity=1e-8),
    "millard": dict(
        fiber_length=1e-12, tendon_force=1e-11, multiplier=1e-12, force_velocity=1e-10, fiber_velocity=1e-11
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_equilibrium_matches_opensim(case):
    """Random states (length, speed, activation): equilibrateMuscles, then fiber length, tendon
    force and length, pennation, the three multipliers, fiber velocity and OpenSim's static
    optimisation force calcInextensibleTendonActiveFiberForce(s, 1)."""
    osm, jm = CASES[case]()
    n = 24
    length, speed, activation = _states(jm, n, seed=len(case))
    batch = _batch(jm, n)
    ours = batch.equilibrium(activation, length, speed)
    so_active, so_passive = batch.static_optimization_forces(length, speed)
    ref = [_equilibrate(osm, *row) for row in zip(length, speed, activation)]
    ref = {k: np.array([r[k] for r in ref]) for k in ref[0]}
    tol = TOLERANCES[case.split("-")[0]]
    lopt, fiso = float(jm.optimal_fiber_length[0]), float(jm.max_isometric_force[0])
    vel = lopt * float(jm.max_contraction_velocity[0])
    assert np.all(ours.status == 0)
    np.testing.assert_allclose(ours.fiber_length, ref["fiber_length"], rtol=0, atol=tol["fiber_length"] * lopt)
    np.testing.assert_allclose(ours.tendon_length, ref["tendon_length"], rtol=0, atol=tol["fiber_length"] * lopt)
    np.testing.assert_allclose(ours.pennation_angle, ref["pennation_angle"], rtol=0, atol=tol["fiber_length"])
    np.testing.assert_allclose(ours.tendon_force, ref["tendon_force"], rtol=0, atol=tol["tendon_force"] * fiso)
    for name in ("active_force_length_multiplier", "passive_force_length_multiplier"):
        np.testing.assert_allclose(
            getattr(ours, name), ref[name], rtol=0, atol=max(tol["multiplier"], tol["fiber_length"] * 20)
        )
    np.testing.assert_allclose(
        ours.force_velocity_multiplier, ref["force_velocity_multiplier"], rtol=0, atol=tol["force_velocity"]
    )
    np.testing.assert_allclose(ours.fiber_velocity, ref["fiber_velocity"], rtol=0, atol=tol["fiber_velocity"] * vel)
    np.testing.assert_allclose(so_active, ref["static_optimization_force"], rtol=0, atol=1e-11 * fiso)
    assert np.all(np.asarray(so_passive) >= 0)


def test_equilibrium_at_the_shortest_fiber():
    """Too short for an equilibrium: OpenSim warns and keeps the shortest fiber (status 1 here),
    with zero force and f_V = 1."""
    osm, jm = _thelen(dict(BASE, pennation_angle_at_optimal=0.3))
    ref = _equilibrate(osm, 0.19, 0.1, 1.0)
    ours = _batch(jm, 24).equilibrium(1.0, 0.19, 0.1)  # the batch size of the test above: no new compile
    assert np.all(ours.status == 1)
    np.testing.assert_allclose(ours.fiber_length, ref["fiber_length"], rtol=1e-14)
    np.testing.assert_allclose(ours.force_velocity_multiplier, 1.0)
    np.testing.assert_allclose(ours.tendon_force, ref["tendon_force"], atol=1e-12)


def test_millard_static_optimization_uses_normalised_length_for_pennation():
    """OpenSim 4.x evaluates cos α at l_M / l_opt in Millard's calcActiveFiberForceAlongTendon;
    reproduced (and it matters: the true cos α differs)."""
    osm, jm = _millard(dict(CUSTOM, pennation_angle_at_optimal=0.5), {})
    _set(osm, 0.33, 0.2, 1.0)
    ref = osm[3].calcInextensibleTendonActiveFiberForce(osm[1], 1.0)
    active, _ = _batch(jm, 24).static_optimization_forces(0.33, 0.2)
    np.testing.assert_allclose(active, ref, rtol=1e-13)
    pen = jm.pennation
    lce = pen.fiber_length(0.33, jm.tendon_slack_length)
    assert abs(float(jnp.cos(pen.angle(lce))[0]) - float(jnp.cos(pen.angle(lce / jm.optimal_fiber_length))[0])) > 0.05


# ---- parameters, defaults, activation --------------------------------------------------------------------


def test_muscle_defaults_and_property_names_match_opensim():
    ref = opensim.Thelen2003Muscle()
    ours = Thelen2003Muscle()
    for xml, field in Thelen2003Muscle.OPENSIM_PROPERTIES.items():
        np.testing.assert_allclose(getattr(ours, field), getattr(ref, "get_" + xml)(), rtol=1e-15, err_msg=xml)
    ref = opensim.Millard2012EquilibriumMuscle()
    ref.finalizeFromProperties()  # applies the damped model's curve adjustments
    ours = Millard2012EquilibriumMuscle()
    for xml, field in Millard2012EquilibriumMuscle.OPENSIM_PROPERTIES.items():
        np.testing.assert_allclose(getattr(ours, field), getattr(ref, "get_" + xml)(), rtol=1e-15, err_msg=xml)
    fields = {
        "ActiveForceLengthCurve": "active_force_length_curve",
        "ForceVelocityCurve": "force_velocity_curve",
        "FiberForceLengthCurve": "fiber_force_length_curve",
        "TendonForceLengthCurve": "tendon_force_length_curve",
    }
    for xml, cls in Millard2012EquilibriumMuscle.OPENSIM_CURVES.items():
        curve_ref, curve = getattr(ref, "get_" + xml)(), getattr(ours, fields[xml])
        for prop in cls.OPENSIM_PROPERTIES:
            if curve_ref.getPropertyByName(prop).size():
                np.testing.assert_allclose(
                    getattr(curve, prop), getattr(curve_ref, "get_" + prop)(), rtol=1e-15, err_msg=f"{xml}.{prop}"
                )
    np.testing.assert_allclose(ours.minimum_fiber_length, ref.getMinimumFiberLength(), rtol=1e-15)


@pytest.mark.parametrize("case", ["millard-custom", "millard-undamped", "millard-rigid"])
def test_millard_adjusts_its_curves_as_opensim(case):
    """extendFinalizeFromProperties: damped / rigid → curve floor and slopes at v_max 0; undamped
    elastic → at least 0.1 and half the near-v_max slopes."""
    osm, jm = CASES[case]()
    ref = osm[3]  # owned by the model osm[0], which must stay alive
    pairs = [
        (jm.active_force_length_curve.minimum_value, ref.get_ActiveForceLengthCurve().get_minimum_value()),
        (jm.force_velocity_curve.concentric_slope_at_vmax, ref.get_ForceVelocityCurve().get_concentric_slope_at_vmax()),
        (jm.force_velocity_curve.eccentric_slope_at_vmax, ref.get_ForceVelocityCurve().get_eccentric_slope_at_vmax()),
        (jm.fiber_damping, ref.get_fiber_damping()),
        (jm.minimum_fiber_length, ref.getMinimumFiberLength()),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours, theirs, rtol=1e-15)


def test_from_opensim_fills_missing_properties_with_defaults():
    m = Millard2012EquilibriumMuscle.from_opensim(
        [
            {
                "max_isometric_force": 500.0,
                "ForceVelocityCurve": {"concentric_slope_near_vmax": 0.3},
                "min_control": 0.01,
                "ignore_tendon_compliance": "false",
            },
            {"fiber_damping": 0.0},
        ]
    )
    assert m.ignore_tendon_compliance is False
    np.testing.assert_allclose(m.max_isometric_force, [500.0, 1000.0])
    np.testing.assert_allclose(m.force_velocity_curve.concentric_slope_near_vmax, [0.3, 0.25])
    # the second muscle is undamped: its slope at v_max is raised to half the near-v_max slope
    np.testing.assert_allclose(m.force_velocity_curve.concentric_slope_at_vmax, [0.0, 0.125])
    assert np.all(np.isnan(m.tendon_force_length_curve.curviness))
    with pytest.raises(ValueError, match="ignore_tendon_compliance differs"):
        Millard2012EquilibriumMuscle.from_opensim([{"ignore_tendon_compliance": True}, {}])


def test_minimum_activation_range():
    """OpenSim 4.6 refuses Thelen's minimum_activation < 0.01; OpenSim 3.x files carry 0, which
    jaxbio imports as it is (outside [0, 1) is refused). At 0 the equilibrium of a fully
    deactivated muscle is still found (passive fibre against the tendon)."""
    for bad in (-0.01, 1.0):
        with pytest.raises(ValueError, match="minimum_activation"):
            Thelen2003Muscle(minimum_activation=bad)
    muscle = Thelen2003Muscle(minimum_activation=0.0)
    eq = muscle.equilibrium(0.0, 0.1 + 0.2 * 1.05, 0.0)  # default l⁰ 0.1 m, l_ts 0.2 m
    assert np.all(np.isfinite(np.asarray(eq.fiber_length)))
    muscle = opensim.Thelen2003Muscle()
    muscle.set_minimum_activation(0.005)
    muscle.setMinControl(0.005)
    with pytest.raises(Exception):  # noqa: B017 (OpenSim raises its own exception type)
        muscle.finalizeFromProperties()
    with pytest.raises(ValueError, match="unknown OpenSim properties"):
        Thelen2003Muscle.from_opensim({"FmaxTendonStrain": 0.04, "fiber_damping": 0.1})
    # as OpenSim ("flag is not currently implemented" for ActivationFiberLengthMuscle)
    with pytest.raises(NotImplementedError, match="ignore_tendon_compliance"):
        Thelen2003Muscle.from_opensim({"ignore_tendon_compliance": "true"})
    muscle = opensim.Thelen2003Muscle("m", 1000.0, 0.1, 0.2, 0.0)
    muscle.set_ignore_tendon_compliance(True)
    with pytest.raises(Exception, match="not currently implemented"):
        _one_muscle_model(muscle)


def test_activation_rate_matches_opensim():
    for cls, ref in [
        (Thelen2003Muscle, opensim.Thelen2003Muscle()),
        (Millard2012EquilibriumMuscle, opensim.Millard2012EquilibriumMuscle()),
    ]:
        ref.finalizeFromProperties()
        model = ref.getActivationModel()
        ours = cls()
        for a, u in [(0.3, 0.8), (0.8, 0.3), (0.0, 0.5), (1.0, 1.0), (0.5, 0.0)]:
            np.testing.assert_allclose(ours.activation_rate(u, a), model.calcDerivative(a, u), rtol=1e-14)


# ---- differentiability, float32, batching ------------------------------------------------------------------


@pytest.mark.slow
def test_curve_gradients_with_respect_to_parameters():
    """d y/d θ of each curve by the implicit-function JVP vs central differences of OpenSim's
    curve rebuilt with θ ± h."""
    for name, (_, args, (lo, hi)) in CURVE_CASES.items():
        cls = JAX_CURVES[name]
        x = np.linspace(lo + 0.05, hi - 0.05, 7)
        grads = jax.jacfwd(lambda p: cls(*p)(x))(jnp.asarray(args))
        for i in range(len(args)):
            h = 1e-6 * max(1.0, abs(args[i]))
            up = list(args)
            down = list(args)
            up[i] += h
            down[i] -= h
            ref_up, ref_down = getattr(opensim, name)(*up), getattr(opensim, name)(*down)
            fd = np.array([(ref_up.calcValue(float(v)) - ref_down.calcValue(float(v))) / (2 * h) for v in x])
            np.testing.assert_allclose(grads[:, i], fd, rtol=1e-5, atol=1e-6, err_msg=f"{name} parameter {i}")


@eqx.filter_jit
def _reference_tendon_force(jm, a, length):
    """Tendon force ``(m,)`` N at a tightly converged static equilibrium (100 bisection steps on
    the force balance): the independent reference for the equilibrium's derivatives."""
    kernel = jm._prepare() if isinstance(jm, Millard2012EquilibriumMuscle) else jm
    pen = jm.pennation

    def balance(lce):
        cos = jnp.cos(pen.angle(lce))
        fal, _, fpe, _, fse, _ = kernel._multipliers_and_slopes(
            lce / jm.optimal_fiber_length, (length - lce * cos) / jm.tendon_slack_length
        )
        return (a * fal + fpe) * cos - fse, fse  # increases with the fiber length

    def bisect(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        above = balance(mid)[0] > 0
        return jnp.where(above, lo, mid), jnp.where(above, mid, hi)

    bracket = (jm.minimum_fiber_length * 1.0001, length - 0.9 * jm.tendon_slack_length)
    lo, hi = jax.lax.fori_loop(0, 100, bisect, bracket)
    return jm.max_isometric_force * balance(0.5 * (lo + hi))[1]


@pytest.mark.slow
@pytest.mark.parametrize("cls", [Thelen2003Muscle, Millard2012EquilibriumMuscle])
def test_equilibrium_gradients(cls):
    """∂F_T/∂(l_MT, a, F⁰, l_ts, l_opt, α₀) of the static equilibrium vs central differences of a
    bisection-converged root; Thelen's velocity sharing vs differences of the iteration itself."""
    jm = cls(1000.0, 0.1, 0.2, 0.25)

    def force(m, a, l, v=0.0):
        return m.equilibrium(a, l, v).tendon_force[0]

    def reference_force(m, a, l):
        return float(_reference_tendon_force(m, a, l)[0])

    a, l = 0.6, 0.29
    g_m, g_a, g_l = jax.grad(force, argnums=(0, 1, 2))(jm, a, l)
    h = 1e-6
    np.testing.assert_allclose(
        g_l, (reference_force(jm, a, l + h) - reference_force(jm, a, l - h)) / (2 * h), rtol=1e-6
    )
    np.testing.assert_allclose(
        g_a, (reference_force(jm, a + h, l) - reference_force(jm, a - h, l)) / (2 * h), rtol=1e-6
    )
    for name in ("max_isometric_force", "tendon_slack_length", "optimal_fiber_length", "pennation_angle_at_optimal"):
        x0 = float(getattr(jm, name)[0])
        step = h * max(1.0, x0)
        shifted = [eqx.tree_at(lambda m: getattr(m, name), jm, jnp.array([x0 + d])) for d in (step, -step)]
        fd = (reference_force(shifted[0], a, l) - reference_force(shifted[1], a, l)) / (2 * step)
        np.testing.assert_allclose(getattr(g_m, name)[0], fd, rtol=1e-6, err_msg=name)
    if cls is Thelen2003Muscle:  # moving: the fixed point of force balance and velocity sharing
        g = jax.grad(force, argnums=2)(jm, a, l, 0.3)
        fd = (force(jm, a, l + h, 0.3) - force(jm, a, l - h, 0.3)) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-6)


@pytest.mark.parametrize("cls", [Thelen2003Muscle, pytest.param(Millard2012EquilibriumMuscle, marks=pytest.mark.slow)])
def test_static_optimization_force_gradients(cls):
    jm = cls(1000.0, 0.1, 0.2, 0.25)
    check_grads(
        lambda l, v: jm.static_optimization_forces(l, v),
        (jnp.array([0.29]), jnp.array([0.2])),
        order=1,
        modes=("fwd", "rev"),
        eps=1e-6,
        rtol=1e-5,
    )


@pytest.mark.parametrize("cls", [Thelen2003Muscle, pytest.param(Millard2012EquilibriumMuscle, marks=pytest.mark.slow)])
def test_float32(cls):
    """float32 in, float32 out, within float32 accuracy of float64 (24 muscles: the float64 size
    compiled above)."""
    base = (
        Thelen2003Muscle.from_opensim(THELEN_CUSTOM)
        if cls is Thelen2003Muscle
        else Millard2012EquilibriumMuscle.from_opensim(CUSTOM)
    )
    m64 = _batch(base, 24)
    m32 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), m64)
    l, v, a = _states(m64, 24, seed=7)
    r64 = m64.equilibrium(a, l, v)
    r32 = m32.equilibrium(a.astype(np.float32), l.astype(np.float32), v.astype(np.float32))
    assert r32.tendon_force.dtype == jnp.float32 and np.all(r32.status == 0)
    fiso = float(base.max_isometric_force[0])
    np.testing.assert_allclose(r32.tendon_force, r64.tendon_force, rtol=0, atol=1e-4 * fiso)
    np.testing.assert_allclose(r32.fiber_length, r64.fiber_length, rtol=1e-5)
    so64 = m64.static_optimization_forces(l, v)
    so32 = m32.static_optimization_forces(l.astype(np.float32), v.astype(np.float32))
    assert so32[0].dtype == jnp.float32
    np.testing.assert_allclose(so32[0], so64[0], rtol=0, atol=1e-5 * fiso)
    np.testing.assert_allclose(so32[1], so64[1], rtol=0, atol=1e-5 * fiso)


@pytest.mark.parametrize(
    "name",
    ["TendonForceLengthCurve"]
    + [pytest.param(n, marks=pytest.mark.slow) for n in sorted(CURVE_CASES) if n != "TendonForceLengthCurve"],
)
def test_float32_curves(name):
    """float32 Bézier curves within float32 accuracy (values ≤ 2e-6 · max|dy/dx|)."""
    _, args, (lo, hi) = CURVE_CASES[name]
    cls = JAX_CURVES[name]
    x = np.linspace(lo, hi, 51)
    y64, d64 = cls(*args).value_and_derivative(x)
    y32, d32 = cls(*np.float32(args)).value_and_derivative(x.astype(np.float32))
    assert y32.dtype == jnp.float32 and np.all(np.isfinite(d32))
    scale = max(1.0, float(np.abs(d64).max()))
    np.testing.assert_allclose(y32, y64, atol=2e-6 * scale)
    np.testing.assert_allclose(d32, d64, atol=2e-4 * scale)


def test_vmap_over_models_and_states():
    """``filter_vmap`` over a batch of muscle models (subjects) and of states equals the per-model
    calls (which run jitted)."""
    jm = _batch(Thelen2003Muscle.from_opensim(THELEN_CUSTOM), 24)  # the compiled size of the tests above
    length, speed, activation = _states(jm, 24, seed=3)
    models = jax.tree_util.tree_map(lambda x: jnp.stack([x, x, x]), jm)
    models = eqx.tree_at(
        lambda m: m.max_isometric_force, models, models.max_isometric_force * jnp.array([[1.0], [1.2], [0.8]])
    )
    lengths = jnp.stack([length, length * 1.02, length * 0.98])
    batched = eqx.filter_vmap(lambda m, l: m.equilibrium(activation, l, speed).tendon_force)(models, lengths)
    for i in range(3):
        one = jax.tree_util.tree_map(lambda x: x[i], models)
        np.testing.assert_allclose(batched[i], one.equilibrium(activation, lengths[i], speed).tendon_force, rtol=1e-13)
