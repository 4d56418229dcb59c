"""Fit the fitness-dependent sprinter (after Ivancevic 2009) to Bolt's 9.58 (Berlin 2009) and look at the result.

    python examples/sprint_fit.py

Shows the library API behind ``jaxbio sprint``: reading a race, fitting with Laplace uncertainty,
the speed/fitness profile, a gradient of a split time with respect to the fatigue parameter, a
prediction from the first 60 m with the hierarchical prior, and the classical baselines.
"""

import jax

jax.config.update("jax_enable_x64", True)  # validation precision; jaxbio never sets it for you

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxbio.sprint as sprint  # noqa: E402

race = sprint.load_race("bolt_2009")  # or sprint.read_csv("my_race.csv")
print(f"{race.label}: {race.n} splits, reaction time {race.reaction_time} s, wind {race.wind:+} m/s")

# 1. fit (one race here; a list of races is fitted in one vmapped call)
res = sprint.fit([race])
for name, (value, std) in res.parameters(0).items():
    print(f"  {name:7s} = {value:9.3f} ± {std:.3f} {sprint.UNITS[name]}")
print(f"  split-time RMSE {res.rmse[0]:.4f} s, converged {bool(res.converged[0])}")
p = res.profile_of(0)
print(
    f"  top speed {p.top_speed:.2f} m/s at {p.top_speed_at:.1f} m, {p.speed_lost:.2f} m/s lost by the finish, "
    f"fitness at the finish {p.fitness[-1]:.2f}"
)

# 2. the fitted model is an Equinox module: simulate it, differentiate split times
model = res.sprinter(0)
t = sprint.split_times(model, race.distances, race.reaction_time, race.wind)
dt_dE = jax.jacfwd(
    lambda logE: sprint.split_times(
        model.with_log(("energy",), logE[None]), race.distances, race.reaction_time, race.wind
    )
)(model.log_energy)
print("  residuals [s]:", np.round(np.asarray(t) - race.times, 3))
print(
    "  d t_100 / d log E =",
    f"{float(dt_dE[-1]):.3f} s (a 1 % larger reserve saves {-0.01 * float(dt_dE[-1]) * 1e3:.1f} ms)",
)

# 3. predict the 100 m from the splits up to 60 m, with the prior learned from the other races
pred = sprint.fit([race], fit_until=60.0, prior="population")
print(f"  from ≤ 60 m: predicted 100 m {pred.predicted[0, race.n - 1]:.3f} s (measured {race.times[-1]:.2f} s)")

# 4. the baselines on the same splits
splits = sprint.splits_from_races([race])
for kind in ("fhk", "tibshirani"):
    b = sprint.fit_baseline(kind, splits).rows(1)
    print(f"  {kind:10s} RMSE {b.rmse[0]:.4f} s, parameters {b.parameters(0)}")

# 5. a synthetic race from known parameters, rounded like real data, fitted back
truth = sprint.Sprinter(f0=16.0, vmax=20.0, energy=980.0)
d = jnp.arange(10.0, 101.0, 10.0)
times = np.round(np.asarray(sprint.split_times(truth, d, 0.15, 0.0)), 2)
back = sprint.fit_splits(sprint.Splits.from_arrays([np.asarray(d)], [times], [0.15], [0.0]))
print("  synthetic round trip:", {k: round(v[0], 1) for k, v in back.parameters(0).items()}, "(true 16, 20, 980)")
