"""Measure the agreement of jaxbio's OpenSim muscles with live OpenSim (prints a table).

    PYTHONPATH=$PWD python -m tests.muscles.opensim_agreement

Same references as ``test_opensim_muscles.py`` (whose tolerances these numbers justify): every
Bézier curve at 400+ points (default and custom parameters), Thelen's closed-form curves through
OpenSim's state, and 200 random equilibrium states per muscle case. Errors are absolute, forces
in units of F⁰, lengths in l_opt, velocities in v_max l_opt.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from tests.muscles import test_opensim_muscles as t  # noqa: E402


def curves() -> None:
    print("curve                        params    value      d/dx       d²/dx²")
    for name, (default, custom, (lo, hi)) in sorted(t.CURVE_CASES.items()):
        for label, args in (("default", default), ("custom", custom)):
            ref, curve = t._curve_pair(name, args)
            x = t._curve_grid(curve, lo, hi)
            y, dy = curve.value_and_derivative(x)
            d2y = jax.vmap(jax.grad(curve.derivative))(x)
            errors = [
                np.abs(np.asarray(ours) - [ref.calcDerivative(float(v), k) for v in x]).max()
                for k, ours in enumerate((y, dy, d2y))
            ]
            print(f"{name:28s} {label:8s} " + "  ".join(f"{e:.1e}" for e in errors))


def equilibria(n: int = 200) -> None:
    keys = (
        "fiber_length",
        "tendon_force",
        "active_force_length_multiplier",
        "passive_force_length_multiplier",
        "force_velocity_multiplier",
        "fiber_velocity",
        "static_optimization_force",
    )
    print("\ncase              " + "  ".join(k[:10] for k in keys))
    for case, build in t.CASES.items():
        osm, jm = build()
        length, speed, activation = t._states(jm, n, seed=1)
        batch = t._batch(jm, n)
        ours = batch.equilibrium(activation, length, speed)
        so, _ = batch.static_optimization_forces(length, speed)
        ref = [t._equilibrate(osm, *row) for row in zip(length, speed, activation)]
        lopt, fiso = float(jm.optimal_fiber_length[0]), float(jm.max_isometric_force[0])
        vel = lopt * float(jm.max_contraction_velocity[0])
        scale = dict(fiber_length=lopt, tendon_force=fiso, fiber_velocity=vel, static_optimization_force=fiso)
        values = {k: getattr(ours, k, None) for k in keys}
        values["static_optimization_force"] = so
        errors = [np.abs(np.asarray(values[k]) - [r[k] for r in ref]).max() / scale.get(k, 1.0) for k in keys]
        print(
            f"{case:17s} "
            + "  ".join(f"{e:10.1e}" for e in errors)
            + f"   (status ≠ 0: {int(np.sum(ours.status != 0))})"
        )


if __name__ == "__main__":
    curves()
    equilibria()
