"""Every public model of jaxbio as an ML user meets it: a builder, a scalar function of the model
that exercises its physics, and the leaf a user would train (issue #19, item 6).

Each case is ``(build() -> model, value(model) -> scalar, trainable(model) -> array leaf)``. The
builders follow JAX's default float type, so the same table runs in float64 (the tests, x64 on)
and in float32 (a subprocess with x64 off: ``python -m tests.learning._pytree_cases``, which
prints ``{case: value}`` as JSON with each value's dtype).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import jaxbio as jb

DATA = Path(__file__).resolve().parents[1] / "io" / "data"


def _float():
    return jnp.result_type(float)


def _state(n, seed):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.uniform(-0.5, 0.5, n), _float()) for _ in range(3)]


# ---- builders and values ------------------------------------------------------------------


def _tree():
    return jb.load_model("arm7", dtype=_float()).tree


def _tree_value(tree):
    q, qd, qdd = _state(tree.nq, 0)
    return jnp.sum(jb.inverse_dynamics(tree, q, qd, qdd) ** 2)


def _system():
    from jaxbio.hamiltonian import LinearDamping, ReserveFitness, SpringDamperDrive

    tree = jb.load_model("double_pendulum", dtype=_float()).tree
    return jb.HamiltonianSystem(
        tree,
        SpringDamperDrive(3.0, 0.2),
        LinearDamping([0.3, 0.2]),
        ReserveFitness(capacity=50.0, activation_power=1.0, recovery=0.1),
    )


def _system_value(system):
    y = system.initial_state(jnp.asarray([0.4, -0.3], _float()), jnp.asarray([0.5, 0.2], _float()))
    dy = system.vector_field(0.3, {**y, "f": 0.8 * y["f"]})
    return jnp.sum(dy["q"] ** 2) + jnp.sum(dy["p"]) + jnp.sum(dy["f"])


def _sprinter():
    import jaxbio.sprint

    return jaxbio.sprint.Sprinter()


def _sprinter_value(model):
    import jaxbio.sprint

    return jnp.sum(jaxbio.sprint.split_times(model, jnp.arange(10.0, 101.0, 30.0), 0.15, 0.5))


def _muscle_set():
    from jaxbio.muscles import sets

    return sets.load_muscle_set("arm26", dtype=_float())


def _hill():
    from jaxbio.muscles import HillMuscle

    _, _, p = _muscle_set()
    return HillMuscle(
        p.max_isometric_force,
        p.optimal_fiber_length,
        p.tendon_slack_length,
        p.pennation_angle,
        p.max_contraction_velocity,
    )


def _hill_value(hill):
    m = hill.max_isometric_force.shape[0]
    act = jnp.linspace(0.2, 0.9, m, dtype=_float())
    lmt = hill.optimal_fiber_length + hill.tendon_slack_length * jnp.linspace(0.95, 1.05, m, dtype=_float())
    return jnp.sum(hill.force(act, lmt, jnp.full(m, -0.1, _float()))) / 1e3


def _paths():
    tree, paths, _ = _muscle_set()
    return (tree, paths)


def _paths_value(model):
    from jaxbio.muscles.geometry import moment_arms

    tree, paths = model
    return jnp.sum(moment_arms(paths, tree, jnp.asarray([0.3, 1.0], _float())) ** 2)


def _muscle_drive():
    from jaxbio.muscles import MuscleDrive

    return MuscleDrive(
        max_isometric_force=[900.0, 600.0],
        time_constant=0.05,
        hill_a=[200.0, 150.0],
        hill_b=[2.0, 2.5],
        moment_arms=[[0.04, -0.02], [0.0, 0.03]],
    )


def _drive_value(drive):
    q, qd, _ = _state(2, 1)
    return jnp.sum(drive(0.2, q, qd, jnp.ones(1, _float())) ** 2) / 1e3


def _motor():
    from jaxbio.muscles import DCMotor

    return DCMotor(
        inductance=2e-2,
        resistance=1.2,
        torque_constant=0.05,
        back_emf_constant=0.06,
        gear_ratio=20.0,
        rotor_inertia=2e-5,
        viscous_damping=1e-5,
        voltage=3.0,
    )


def _motor_value(motor):
    q, qd, _ = _state(1, 2)
    return jnp.sum(motor(0.1, q, qd, jnp.ones(1, _float()), jnp.asarray([0.5], _float())) ** 2)


def _fatigue():
    from jaxbio.muscles import ThreeCompartmentFatigue

    return ThreeCompartmentFatigue(2, jnp.asarray([0.4, 0.7], _float()), fatigue=jnp.asarray([0.01, 0.02], _float()))


def _fatigue_value(law):
    f = law.state(
        jnp.asarray([0.3, 0.5], _float()), jnp.asarray([0.5, 0.4], _float()), jnp.asarray([0.2, 0.1], _float())
    )
    z = jnp.zeros(1, _float())
    return jnp.sum(law.rate(0.5, z, z, z, f, z, None) ** 2) + jnp.sum(law.value(f))


def _osim():
    return jb.io.load_osim(DATA / "arm26.osim", dtype=_float())


def _osim_value(model):
    c, cd, cdd = _state(model.coordinates.nc, 3)
    return jnp.sum(jb.inverse_dynamics(model, c, cd, cdd) ** 2)


def _mlp():
    from jaxbio.learning.controllers import MLPDrive

    # weights from numpy (the network's own initialisation draws different numbers in float32
    # and float64), so that both runs hold the same network
    drive = MLPDrive(2, torque_limit=[5.0, 2.0], key=jax.random.key(0), width=8, depth=2)
    params, static = eqx.partition(drive.mlp, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    rng = np.random.default_rng(5)
    leaves = [jnp.asarray(0.5 * rng.standard_normal(x.shape), _float()) for x in leaves]
    return eqx.tree_at(lambda d: d.mlp, drive, eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static))


def _mlp_value(drive):
    q, qd, _ = _state(2, 1)
    return jnp.sum(drive(0.2, q, qd, jnp.ones(1, _float())) ** 2)


CASES = {
    "SegmentTree": (_tree, _tree_value, lambda m: m.masses),
    "HamiltonianSystem": (_system, _system_value, lambda m: m.dissipation.coefficients),
    "Sprinter": (_sprinter, _sprinter_value, lambda m: m.log_f0),
    "HillMuscle": (_hill, _hill_value, lambda m: m.max_isometric_force),
    "MusclePaths": (_paths, _paths_value, lambda m: m[1].points),
    "MuscleDrive": (_muscle_drive, _drive_value, lambda m: m.hill_b),
    "DCMotor": (_motor, _motor_value, lambda m: m.torque_constant),
    "ThreeCompartmentFatigue": (_fatigue, _fatigue_value, lambda m: m.fatigue),
    "Model": (_osim, _osim_value, lambda m: m.tree.masses),
    "MLPDrive": (_mlp, _mlp_value, lambda m: m.mlp.layers[-1].weight),
}


def values() -> dict:
    """``{case: [value, dtype name]}`` of every case, each built and evaluated under ``jax.jit``."""
    out = {}
    for name, (build, value, _) in CASES.items():
        v = eqx.filter_jit(value)(build())
        out[name] = [float(v), str(v.dtype)]
    return out


if __name__ == "__main__":  # float32 run: x64 is off in a fresh process
    json.dump(values(), sys.stdout)
