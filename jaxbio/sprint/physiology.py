"""Physiological priors on the sprinter's reserve and its resupply (issue #54, an experiment).

The population prior of `jaxbio.sprint.hierarchical` is learned from races only: five men's 100 m
races for the command line. A woman's race (Fraser 2009) is forecast from it with a reserve that
empties before the line. The issue's idea: priors from physiology, per kg, that do not depend on
which races were shipped. Two, fixed from the literature before any leave-one-out was run:

- ``energy`` (E, the reserve per kg in the units of the model's use ``P_act + F v / m``): the
  phosphagen store. Muscle holds ~20–25 mmol/kg wet weight of phosphocreatine plus ~6 of ATP
  (Hultman & Sjöholm 1983; Harris et al. 1974), muscle is ~40–45 % of an elite male sprinter's
  mass (fewer per kg in women), and ~40–60 kJ/mol are released per ~P: about 0.45–0.6 kJ/kg of body
  mass. Fast glycolysis supplies about as much again within 10 s (Gastin 2001; Gaitanos et al.
  1993), so the reserve a 100 m can draw on is ~0.5–1.2 kJ/kg: log-normal centred on 800 J/kg
  with log-sd 0.5 (a factor 1.6 either way).
- ``recovery`` (r, the reserve's resupply rate): phosphocreatine resynthesis, half-time ~20–60 s
  after maximal exercise (Harris et al. 1976, fast component ~21 s; Bogdanis et al. 1995, ~57 s):
  log-normal centred on the model's ``ln 2 / 30 s`` with log-sd 0.5. ``recovery`` is fixed in
  the default fits (`model.FREE`); with this prior it is freed in the forecast.

`with_priors` multiplies them into a population's predictive (`hierarchical.Population`): a
parameter the population has gets the product of the two Gaussians (in log space), one it lacks
is appended with the physiological prior alone. Measured in `jaxbio.sprint.loo`
(``leave_one_out(physio=...)``, ``benchmarks/sprint_forecast.py --all-races --physio``); the
result is in ``docs/sprint.md``.
"""

from __future__ import annotations

import numpy as np

from jaxbio.sprint.hierarchical import Population

#: ``name: (log mean, log sd)`` of each physiological prior (module docstring)
PRIORS = {
    "energy": (float(np.log(800.0)), 0.5),
    "recovery": (float(np.log(np.log(2.0) / 30.0)), 0.5),
}


def with_priors(pop, priors: dict):
    """The population ``pop`` (a predictive: ``mean_cov`` zero or ``None``) times independent
    log-normal ``priors`` (``{name: (log mean, log sd)}``): for a name of ``pop`` the Gaussian
    product ``C = (Σ⁻¹ + D)⁻¹``, ``m = C (Σ⁻¹ μ + D μ₀)`` with ``D`` the priors' precisions on
    those names; names ``pop`` lacks are appended, uncorrelated, with the prior alone. Returns a
    `hierarchical.Population` (degrees of freedom, noise and races as ``pop``'s)."""
    names = tuple(pop.names) + tuple(n for n in priors if n not in pop.names)
    k0, k = len(pop.names), len(names)
    cov = np.zeros((k, k))
    mean = np.zeros(k)
    cov[:k0, :k0], mean[:k0] = pop.cov, pop.mean
    for n in names[k0:]:
        i = names.index(n)
        mean[i], cov[i, i] = priors[n][0], priors[n][1] ** 2
    d = np.zeros(k)
    m0 = np.zeros(k)
    for n in priors:
        if n in pop.names:
            i = names.index(n)
            d[i], m0[i] = 1.0 / priors[n][1] ** 2, priors[n][0]
    prec = np.linalg.inv(cov)
    new_cov = np.linalg.inv(prec + np.diag(d))
    new_cov = 0.5 * (new_cov + new_cov.T)
    new_mean = new_cov @ (prec @ mean + d * m0)
    R = pop.shrinkage.shape[0]
    pad = lambda a: np.concatenate([a, np.zeros((R, k - k0))], axis=1)  # noqa: E731
    return Population(
        names=names,
        race_names=pop.race_names,
        mean=new_mean,
        cov=new_cov,
        sigma=pop.sigma,
        shrinkage=pad(pop.shrinkage),
        posterior_mean=pad(pop.posterior_mean),
        iterations=pop.iterations,
        mean_cov=np.zeros((k, k)),
        dof=pop.dof,
        sigma_dof=pop.sigma_dof,
    )


__all__ = ["PRIORS", "with_priors"]
