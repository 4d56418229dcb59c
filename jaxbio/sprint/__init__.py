"""The 100 m sprint: a fitness-dependent Hamiltonian sprinter fitted to split times (Ivancevic 2009).

``jb.sprint.Sprinter`` holds the model's positive parameters (as logs); ``sprinter_system`` builds
it as a `jaxbio.HamiltonianSystem` from library parts, ``simulate_race`` integrates it and
``split_times`` gives the predicted split times, differentiable in every parameter; ``fit`` fits races (many at once, with
``jax.vmap``), with Laplace uncertainties and an optional hierarchical prior on the fatigue
parameters; ``fit_baseline`` fits the classical Furusawa–Hill–Keller and Tibshirani (1997)
models; ``split_time_profile`` / ``fit_profile`` / ``model_profile`` give the horizontal
force–velocity profile of sprint science (Samozino et al. 2016) from split times and from the
fitted sprinter (`jaxbio.sprint.fv_profile`); ``fit_selected`` (module ``selection``) chooses per
race how much freedom the splits support (a start offset, Hill's curvature, …) by Laplace
evidence, never fitting worse than a baseline; ``read_csv`` / ``load_race`` / ``embedded_races``
read split files (60–200 m); ``read_trace`` and ``fit_traces`` read and fit speed traces
(radar/laser, `jaxbio.sprint.trace`); `jaxbio.sprint.hierarchical.forecast` forecasts the rest of a
race from its first splits with a population prior and intervals, and the final time stacked with
FHK (`jaxbio.sprint.stacking`), both judged over every shipped race by `jaxbio.sprint.loo`. The command
``jaxbio sprint`` (``python -m jaxbio.sprint``) fits the embedded races and prints a table.
"""

from jaxbio.sprint.baselines import BaselineResult, fit_baseline
from jaxbio.sprint.data import Race, SprintDataError, embedded_names, embedded_races, load_race, read_csv
from jaxbio.sprint.fv_profile import (
    ForceVelocityProfile,
    fit_profile,
    mean_split_speeds,
    model_profile,
    split_time_profile,
)
from jaxbio.sprint.fitting import FitResult, Profile, fit, fit_splits, population_prior, splits_from_races
from jaxbio.sprint.model import (
    DEFAULTS,
    FATIGUE,
    FREE,
    PARAMETERS,
    UNITS,
    Sprinter,
    simulate_race,
    split_times,
    sprinter_system,
)
from jaxbio.sprint.data import SIGMA_ROUND, Splits
from jaxbio.sprint.selection import fit_selected
from jaxbio.sprint.trace import SpeedTrace, Trace, fit_traces, read_trace

__all__ = [
    "BaselineResult",
    "DEFAULTS",
    "FATIGUE",
    "FREE",
    "FitResult",
    "ForceVelocityProfile",
    "PARAMETERS",
    "Profile",
    "Race",
    "SIGMA_ROUND",
    "Splits",
    "SprintDataError",
    "Sprinter",
    "UNITS",
    "embedded_names",
    "embedded_races",
    "fit",
    "fit_baseline",
    "fit_profile",
    "fit_selected",
    "fit_splits",
    "load_race",
    "mean_split_speeds",
    "model_profile",
    "population_prior",
    "read_csv",
    "simulate_race",
    "split_time_profile",
    "split_times",
    "splits_from_races",
    "sprinter_system",
    "SpeedTrace",
    "Trace",
    "fit_traces",
    "read_trace",
]
