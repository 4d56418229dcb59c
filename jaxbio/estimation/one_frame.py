"""One frame of static optimisation, for the packages that build on it: OpenSim's tool
(`jaxbio.tools.static_optimization_tool`) and the learned estimators (`jaxbio.learning.estimators`).

Everything here is defined in `jaxbio.estimation._static_optimization` (beside the batched solver
that uses the same pieces); this module is their public name outside `jaxbio.estimation`:

- `frame_problem(tree, paths, muscle, q, qd, qdd, ...)`: one frame's ``(R, τ, F̂, P)``.
- `solve_frame(R, τ, F̂, P, reserve_strength, p, bounds, *, solver, ...)`: its solution.
- `solver_options(infeasibility_weight, tol, max_iterations, residual_tolerance, dtype)`: the
  solver's static options, checked.
- `check_p(p)`: the cost's exponent, a number ≥ 2.
- `reserve_vector(tree, reserve_strength, dtype)`: ``(n,)`` reserve strengths.
- `as_hill(parameters)`: muscle parameters as a rigid-tendon `jaxbio.muscles.curves.HillMuscle`.
"""

from jaxbio.estimation._static_optimization import (
    _as_hill as as_hill,
    _check_p as check_p,
    _options as solver_options,
    _solve_frame as solve_frame,
    frame_problem,
    reserve_vector,
)

__all__ = ["as_hill", "check_p", "frame_problem", "reserve_vector", "solve_frame", "solver_options"]
