"""Amortised static optimisation: a network from a frame's kinematics ``(q, q̇, q̈)`` to muscle
activations, trained with no labels on the physics of `jaxbio.estimation.static_optimization`.

Static optimisation solves an optimisation problem per frame (an interior-point solve). An
amortised estimator learns the map from the frame to the solution once, over a distribution of
frames, and then answers a new frame with one network evaluation — no dynamics, no solver.

The problem (one frame; ``m`` muscles, ``n`` coordinates; the one of
`jaxbio.estimation.static_optimization`)::

    minimise  Σ aᵢᵖ + Σ y_j²   s.t.  Rᵀ(a F̂ + P) + S y = τ,   0 ≤ a ≤ 1

with ``τ = jaxbio.inverse_dynamics(tree, q, q̇, q̈)``, ``R = jaxbio.muscles.geometry.moment_arms``
``(m, n)``, ``F̂``, ``P`` the active (at full activation) and passive forces of the rigid-tendon Hill
model (`jaxbio.estimation.muscle_force_components`) — the per-frame data of
`jaxbio.estimation.static_optimization_motion`, computed by the same function — and reserve
actuators of strength ``S``.

Two label-free losses, both from this physics:

- **Physics loss** (`physics_terms`, `physics_loss`), of activations ``a``: with the residual
  ``r = τ − Rᵀ(a F̂ + P)``, the reserves take what the muscles leave (``y_j = r_j / S_j`` where
  ``S_j > 0``, the constraint solved exactly) and the residual elsewhere is penalised,
  ``Σ aᵖ + Σ y² + w Σ_{S_j=0} (r_j/σ_j)²`` (``σ``: `moment_scale`, the solver's row scaling). At the
  solver's solution it equals the solver's cost (tested). It is what the estimator is judged by;
  trained on directly (``method="penalty"``) it stalls: its curvature is 2 along the null space of
  the moment constraints and ``2w`` across it; Adam on gait10dof18musc (1000–5000 steps, a
  sigmoid output then) left held-out force errors of 6–10 % of the peak force on the median frame,
  against 1.7 % by the dual loss below.
- **Dual loss** (`dual_terms`, `training_loss`, the default of `train`): static optimisation's
  Lagrangian — objective plus multipliers × joint-moment residual — minimised over activations and
  reserves in closed form (``aᵢ = clip((F̂ᵢ (Rλ)ᵢ / p)^{1/(p−1)}, 0, 1)``, ``y = Sλ/2``): the dual
  function ``g(λ)``, concave, with its maximum at the optimal multipliers where ``a(λ)`` is the
  solver's solution (strong duality; tested against the solver's own multipliers). A second
  network predicts ``λ`` and is trained by maximising ``g``; the activation network learns
  ``a(λ)`` by a quadratic regression on its unclipped output, with ``λ`` first improved by
  ``target_steps`` Newton steps on the same dual (`refine_multipliers`; default 2): the dual
  network reaches the dual's maximum only approximately (alone, its ``a(λ)`` missed the solver by
  up to 8 % of the peak force in the example), and the activation network learns the better target.

`AmortizedStaticOptimization` is an Equinox module holding both `equinox.nn.MLP` s and the input
normalisation: ``a = clip(mlp(x̃), 0, 1)``, in ``[0, 1]`` by construction, with exact zeros for
inactive muscles. `train` fits it with optax's Adam on minibatches (the per-frame data are
computed once: they do not depend on the network). ``examples/learning_muscle_forces.py`` checks
held-out frames against the solver and times both.

Trained as in ``examples/learning_muscle_forces.py`` (32768 frames, width 128, 16000 Adam steps of
512), the network alone misses the solver by at most 3.5 % of the peak force on 1032 held-out
frames (median 0.8 %), in a small fraction of the solver's time per frame from the same
``(q, q̇, q̈)``. Its forces ``a F̂ + P`` need ``F̂`` and ``P``, i.e. the muscle lengths and
velocities, which cost more than the network itself (timings: benchmarks/README.md, "Measurements behind design choices").

**Refinement** (`refine_multipliers`, `AmortizedStaticOptimization.refined_activations`,
``forces(..., refine=k)``): a fixed number ``k`` (1–3) of safeguarded semismooth Newton steps on
the concave dual, started from the dual network's multipliers, then the closed-form ``a(λ)``,
brings the network to the solver's answer (worst 0.4 % with 3 steps) at the cost of the frame's
data (inverse dynamics, moment arms) and an ``n × n`` Cholesky solve per step — still no
iterative solver, jit/vmap friendly.

Example::

    >>> import jax, jax.numpy as jnp
    >>> from jaxbio.learning import estimators as est
    >>> problem = est.MuscleProblem.from_muscle_set(
    ...     "gait10dof18musc", reserve_strength={"pelvis_tx": 1000.0, "pelvis_ty": 1000.0,
    ...                                          "pelvis": 1000.0, "torso": 1000.0})
    >>> q = qd = qdd = jnp.zeros((8, 10))
    >>> net = est.AmortizedStaticOptimization.from_frames(q, qd, qdd, n_muscles=18,
    ...                                                   key=jax.random.key(0))
    >>> net(q[0], qd[0], qdd[0]).shape                    # activations of one frame
    (18,)
    >>> net, losses = est.train(net, problem, q, qd, qdd, steps=10, batch_size=8, key=jax.random.key(1))
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxbio._validate import as_float, check_choice, check_key, static_number
from jaxbio.estimation.one_frame import as_hill as _as_hill, check_p as _check_p, frame_problem, reserve_vector
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.geometry import MusclePaths, check_tree
from jaxbio.tree import SegmentTree

__all__ = [
    "MuscleProblem",
    "FrameData",
    "PhysicsTerms",
    "AmortizedStaticOptimization",
    "DualTerms",
    "moment_scale",
    "physics_terms",
    "dual_terms",
    "physics_loss",
    "training_loss",
    "frames_data",
    "refine_multipliers",
    "train",
    "RESIDUAL_WEIGHT",
    "REFINE_RIDGE",
    "REFINE_STEP_SIZES",
    "TARGET_STEPS",
    "NO_MOMENT_ARM",
]

#: m (m/m for prismatic coordinates): a moment arm this small counts as none (`train`'s closed-form
#: multipliers of coordinates that no muscle crosses).
NO_MOMENT_ARM = 1e-6

#: ridge of `refine_multipliers`' Newton steps: ``REFINE_RIDGE · clip(‖r/σ‖, 1e-6, 1)`` is added to
#: the scaled Hessian ``σ⁻¹Hσ⁻¹``.
REFINE_RIDGE = 1e-3

#: the step lengths `refine_multipliers` tries along each Newton direction (0: stay).
REFINE_STEP_SIZES = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.0)

#: default ``w``: weight of the squared scaled moment residual on coordinates without reserves.
RESIDUAL_WEIGHT = 1e3

#: default ``target_steps`` of `train` and `training_loss`: Newton steps on the dual
#: (`refine_multipliers`) that improve the activation network's target ``a(λ)`` during training.
#: Measured on gait10dof18musc (examples/learning_muscle_forces.py's frames, width 256): at 2000
#: Adam steps of 1024 frames, 2 target steps took the network's worst held-out force error from
#: 11.6 to 7.4 % of the peak force (1 step: 5.1 % where 2 gave 4.4 %, at 4000 steps on 32768
#: frames); 3 gained nothing over 2 (3.2 against 3.0 %, 8000 steps of 512). 2 steps make a
#: training step 1.5× as long as none (39 against 25 s for those 2000 steps, 2-core Intel Xeon).
TARGET_STEPS = 2


# ---- the problem ------------------------------------------------------------------------------


class FrameData(eqx.Module):
    """One frame's static-optimisation data (a leading ``T`` axis when batched).

    - ``moment_arms``: ``(m, n)`` m/rad, ``R = −∂l/∂q``.
    - ``tau``: ``(n,)`` N·m (N for prismatic coordinates), joint moments by inverse dynamics.
    - ``max_force``: ``(m,)`` N, ``F̂ = F⁰ f_L f_V cos α``, the active force at full activation.
    - ``passive_force``: ``(m,)`` N, ``P ≥ 0``.
    """

    moment_arms: Float[Array, "*T m n"]
    tau: Float[Array, "*T n"]
    max_force: Float[Array, "*T m"]
    passive_force: Float[Array, "*T m"]


class MuscleProblem(eqx.Module):
    """A musculoskeletal model with the options of its static optimisation.

    Fields:

    - ``tree``: the `jaxbio.SegmentTree` (``n = tree.nq`` coordinates).
    - ``paths``: `jaxbio.muscles.MusclePaths` of the ``m`` muscles.
    - ``muscle``: a rigid-tendon `jaxbio.muscles.curves.HillMuscle` (``m`` muscles).
    - ``reserve_strength``: ``(n,)`` N·m per unit, ``S``; 0 = no reserve on that coordinate.
    - ``p``: static, exponent of the effort ``Σ aᵖ`` (≥ 2; 2 by default).
    - ``objective``: static, ``"activation"`` (``F = a F̂ + P`` with force–length–velocity) or
      ``"force"`` (``F = a F⁰``), as in `jaxbio.estimation.static_optimization_motion`.
    """

    tree: SegmentTree
    paths: MusclePaths
    muscle: HillMuscle
    reserve_strength: Float[Array, " n"]
    p: float = eqx.field(static=True, default=2.0)
    objective: str = eqx.field(static=True, default="activation")

    def __init__(
        self, tree, paths, parameters, *, reserve_strength=None, p: float = 2.0, objective: str = "activation"
    ):
        """``parameters``: `jaxbio.muscles.sets.MuscleParameters` or a rigid-tendon `HillMuscle`;
        ``reserve_strength``: ``(n,)`` or ``{segment name: N·m}`` (see
        `jaxbio.estimation.static_optimization_motion`). ``ValueError`` for paths of another tree,
        a muscle count that differs, an unknown objective or segment, ``p < 2``."""
        check_tree(paths, tree)
        check_choice(objective, ("activation", "force"), "objective")
        muscle = _as_hill(parameters)
        if muscle.size != paths.n_muscles:
            raise ValueError(f"parameters describe {muscle.size} muscles, the paths {paths.n_muscles}")
        if objective == "activation" and muscle.tendon != "rigid":
            raise ValueError("MuscleProblem needs a rigid-tendon HillMuscle (force linear in activation)")
        self.tree = tree
        self.paths = paths
        self.muscle = muscle
        self.reserve_strength = reserve_vector(tree, reserve_strength, muscle.max_isometric_force.dtype)
        self.p = _check_p(p)
        self.objective = objective

    @classmethod
    def from_muscle_set(
        cls, name: str, *, reserve_strength=None, p: float = 2.0, objective: str = "activation", dtype=None
    ) -> MuscleProblem:
        """The problem of a shipped muscle set (`jaxbio.muscles.sets.load_muscle_set`), e.g.
        ``"gait10dof18musc"`` with reserves on the pelvis and lumbar coordinates."""
        from jaxbio.muscles.sets import load_muscle_set

        tree, paths, parameters = load_muscle_set(name, dtype=dtype)
        return cls(tree, paths, parameters, reserve_strength=reserve_strength, p=p, objective=objective)

    @property
    def n_coordinates(self) -> int:
        return self.tree.nq

    @property
    def n_muscles(self) -> int:
        return self.paths.n_muscles

    def frame(self, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"], qdd: Float[ArrayLike, " n"]) -> FrameData:
        """`FrameData` of one frame (``q, qd, qdd``: ``(n,)`` rad, rad/s, rad/s²; m for prismatic
        coordinates). Batch with `jax.vmap`."""
        q, qd, qdd = (_state(x, name, self.n_coordinates) for x, name in ((q, "q"), (qd, "qd"), (qdd, "qdd")))
        return FrameData(*frame_problem(self.tree, self.paths, self.muscle, q, qd, qdd, objective=self.objective))


def _state(x, name: str, n: int):
    x = as_float(x, name)
    if x.shape != (n,):
        raise ValueError(f"{name} has shape {x.shape}, expected ({n},) (one frame; batch frames with jax.vmap)")
    return x


def _frames(x, name: str, n: int):
    x = as_float(x, name)
    if x.ndim != 2 or x.shape[1] != n:
        raise ValueError(f"{name} has shape {x.shape}, expected (T, {n}) (frames × coordinates)")
    return x


def moment_scale(problem: MuscleProblem, data: FrameData) -> Float[Array, " n"]:
    """``σ`` ``(n,)`` N·m: per coordinate, the largest single actuator moment
    ``max(maxᵢ |Rᵢⱼ F̂ᵢ|, S_j)`` (1 where there is none) — static optimisation's row scaling, used
    to scale residuals and multipliers to O(1). Not differentiated (`jax.lax.stop_gradient`)."""
    sigma = jnp.max(jnp.abs(data.moment_arms * data.max_force[..., :, None]), axis=-2, initial=0.0)
    sigma = jnp.maximum(sigma, jnp.abs(problem.reserve_strength))
    return jax.lax.stop_gradient(jnp.where(sigma > 0, sigma, 1.0))


class PhysicsTerms(eqx.Module):
    """The parts of one frame's physics loss (`physics_terms`).

    - ``effort``: ``()`` ``Σ aᵢᵖ``.
    - ``reserve_cost``: ``()`` ``Σ y_j²`` over the coordinates with reserves.
    - ``reserves``: ``(n,)`` N·m, reserve moments ``S y`` (0 where ``S = 0``).
    - ``residual``: ``(n,)`` N·m, moment left unmet on the coordinates without reserve
      (0 where ``S > 0``: the reserve takes it).
    - ``penalty``: ``()`` ``Σ (residual_j / σ_j)²`` (unweighted; ``σ``: `moment_scale`).
    - ``forces``: ``(m,)`` N, muscle forces ``a F̂ + P``.
    """

    effort: Float[Array, ""]
    reserve_cost: Float[Array, ""]
    reserves: Float[Array, " n"]
    residual: Float[Array, " n"]
    penalty: Float[Array, ""]
    forces: Float[Array, " m"]

    def loss(self, residual_weight: float = RESIDUAL_WEIGHT) -> Float[Array, ""]:
        """``effort + reserve_cost + w · penalty``."""
        return self.effort + self.reserve_cost + residual_weight * self.penalty


def _check_activations(problem, a, name="activations"):
    a = as_float(a, name)
    if a.shape != (problem.n_muscles,):
        raise ValueError(f"{name} has shape {a.shape}, expected ({problem.n_muscles},) (one per muscle)")
    return a


def physics_terms(problem: MuscleProblem, data: FrameData, activations: Float[ArrayLike, " m"]) -> PhysicsTerms:
    """The physics of one frame for the activations ``a`` ``(m,)`` (any values; the estimator's
    lie in ``[0, 1]``): the moment balance with the reserves solved for, and the costs (see the
    module docstring). ``data`` from `MuscleProblem.frame`. Batch with `jax.vmap`."""
    a = _check_activations(problem, activations)
    R, tau, fhat, passive = data.moment_arms, data.tau, data.max_force, data.passive_force
    forces = a * fhat + passive
    r = tau - R.T @ forces
    S = problem.reserve_strength
    has_reserve = S > 0
    y = jnp.where(has_reserve, r / jnp.where(has_reserve, S, 1.0), 0.0)
    residual = jnp.where(has_reserve, 0.0, r)
    return PhysicsTerms(
        effort=jnp.sum(jnp.abs(a) ** problem.p),
        reserve_cost=jnp.sum(y**2),
        reserves=S * y,
        residual=residual,
        penalty=jnp.sum((residual / moment_scale(problem, data)) ** 2),
        forces=forces,
    )


class DualTerms(eqx.Module):
    """Static optimisation's Lagrangian minimised over the activations and reserves for given
    moment multipliers (`dual_terms`).

    - ``value``: ``()`` the dual function ``g(λ)``; ``≤`` static optimisation's cost for every
      ``λ``, equal to it at the optimal multipliers (strong duality of the convex problem).
    - ``activations``: ``(m,)`` in ``[0, 1]``, ``a(λ)``: the minimiser over the box.
    - ``reserves``: ``(n,)`` N·m, ``S y(λ)`` with ``y = S λ / 2``.
    - ``residual``: ``(n,)`` N·m, ``τ − Rᵀ(a F̂ + P) − S y`` at ``a(λ), y(λ)`` (``= ∂g/∂λ``).
    """

    value: Float[Array, ""]
    activations: Float[Array, " m"]
    reserves: Float[Array, " n"]
    residual: Float[Array, " n"]


def dual_terms(problem: MuscleProblem, data: FrameData, multipliers: Float[ArrayLike, " n"]) -> DualTerms:
    """The dual of one frame's static optimisation at the moment multipliers ``λ`` ``(n,)`` per N·m
    (the convention of `jaxbio.estimation.StaticOptimizationResult.moment_multipliers`,
    ``∂cost/∂τ``).

    ``g(λ) = min_{0≤a≤1, y} Σ aᵖ + Σ y² + λᵀ(τ − Rᵀ(a F̂ + P) − S y)``, in closed form:
    ``aᵢ = clip((F̂ᵢ (R λ)ᵢ / p)^{1/(p−1)}, 0, 1)`` (KKT stationarity of the static optimisation,
    its module docstring), ``y = S λ / 2``. Concave in ``λ``, with gradient ``residual``
    (`refine_multipliers` takes Newton steps on it).
    Batch with `jax.vmap`."""
    lam = as_float(multipliers, "multipliers")
    if lam.shape != (problem.n_coordinates,):
        raise ValueError(f"multipliers has shape {lam.shape}, expected ({problem.n_coordinates},) (one per coordinate)")
    R, tau, fhat, passive = data.moment_arms, data.tau, data.max_force, data.passive_force
    p = problem.p
    z = fhat * (R @ lam)
    positive = z > 0
    zp = jnp.where(positive, z, 1.0)  # double where: no NaN gradient of z^(1/(p-1)) at 0
    a = jnp.clip(jnp.where(positive, (zp / p) ** (1.0 / (p - 1.0)), 0.0), 0.0, 1.0)
    S = problem.reserve_strength
    y = 0.5 * S * lam
    residual = tau - R.T @ (a * fhat + passive) - S * y
    value = jnp.sum(a**p) + jnp.sum(y**2) + jnp.dot(lam, residual)
    return DualTerms(value=value, activations=a, reserves=S * y, residual=residual)


def refine_multipliers(
    problem: MuscleProblem, data: FrameData, multipliers: Float[ArrayLike, " n"], *, steps: int = 2
) -> Float[Array, " n"]:
    """``steps`` safeguarded semismooth Newton steps on the concave dual ``g(λ)`` (`dual_terms`)
    from the moment multipliers ``λ`` ``(n,)`` per N·m: the moment multipliers, improved.

    Each step: the dual's gradient is the moment residual ``r(λ) = τ − Rᵀ(a(λ) F̂ + P) − S y(λ)``;
    its generalised Hessian is ``−H`` with ``H = Rᵀ diag(wᵢ) R + diag(S²)/2``, ``wᵢ = ∂(aᵢF̂ᵢ)/∂(Rλ)ᵢ``
    on the muscles that ``a(λ)`` leaves unclipped (``0 < aᵢ < 1``; ``F̂ᵢ²/2`` for ``p = 2``) and 0
    on the others (the active set of ``a(λ)``). The direction ``d = H⁻¹ r`` is solved in scaled
    multipliers (``σ``: `moment_scale`) with a Levenberg–Marquardt ridge
    ``REFINE_RIDGE · clip(‖r/σ‖, 1e-6, 1)`` — damped far from the optimum, a Newton step near it,
    and well posed when every muscle crossing a coordinate is clipped — by a Cholesky solve of the
    ``(n, n)`` matrix; of the step lengths
    `REFINE_STEP_SIZES` (0 included, so a step never makes it worse) the one with the smallest
    scaled residual ``Σ (r_j/σ_j)²`` is taken. A fixed number of steps, no loop on a tolerance:
    jit/vmap/grad friendly and a fixed cost (``steps · (1 + 7)`` evaluations of ``a(λ)`` and one
    ``n × n`` solve per step). Where ``λ`` is already the optimum, ``r = 0`` and it stays.

    Started from `AmortizedStaticOptimization`'s dual network, 1–3 steps bring ``a(λ)`` to the
    solver's activations on most frames (see `AmortizedStaticOptimization.refined_activations`).
    Batch with `jax.vmap`. ``ValueError`` for a wrong shape or a negative ``steps``."""
    lam = as_float(multipliers, "multipliers")
    if lam.shape != (problem.n_coordinates,):
        raise ValueError(f"multipliers has shape {lam.shape}, expected ({problem.n_coordinates},) (one per coordinate)")
    steps = static_number(steps, "steps", nonnegative=True, integer=True)
    R, fhat, S, p = data.moment_arms, data.max_force, problem.reserve_strength, problem.p
    sigma = moment_scale(problem, data)
    lengths = jnp.asarray(REFINE_STEP_SIZES, lam.dtype)
    ridge = REFINE_RIDGE * jnp.eye(problem.n_coordinates, dtype=lam.dtype)

    def evaluate(l):  # a(λ), the scaled residual and its squared norm (the merit)
        dual = dual_terms(problem, data, l)
        rs = dual.residual / sigma
        m = jnp.sum(rs**2)
        return dual.activations, rs, jnp.where(jnp.isnan(m), jnp.inf, m)  # a NaN candidate is never taken

    a, rs, _ = evaluate(lam)
    for _ in range(steps):
        z = fhat * (R @ lam)
        free = (a > 0) & (a < 1)
        w = jnp.where(free, fhat**2 * a / ((p - 1.0) * jnp.where(free, z, 1.0)), 0.0)  # ∂(a F̂)/∂(Rλ)
        H = R.T @ (w[:, None] * R) + jnp.diag(0.5 * S**2)
        # Levenberg–Marquardt ridge ∝ ‖r/σ‖ (in [1e-6, 1] × REFINE_RIDGE): damped far from the
        # optimum, Newton near it, positive definite always (Cholesky)
        Hs = H / (sigma[:, None] * sigma) + jnp.clip(jnp.linalg.norm(rs), 1e-6, 1.0) * ridge
        direction = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(Hs), rs) / sigma
        candidates = lam + lengths[:, None] * direction
        ac, rc, mc = jax.vmap(evaluate)(candidates)
        best = jnp.argmin(mc)
        lam, a, rs = candidates[best], ac[best], rc[best]
    return lam


# ---- the estimator ----------------------------------------------------------------------------


class AmortizedStaticOptimization(eqx.Module):
    """A network ``(q, q̇, q̈) ↦ a``: static optimisation's activations, amortised.

    ``a = clip(mlp(x̃), 0, 1)`` with ``x̃ = ((q, q̇, q̈) − input_mean) / input_scale`` ``(3n,)``, so every
    activation lies in ``[0, 1]`` by construction (inactive muscles exactly 0); inference is this
    one MLP, no dynamics.

    A second network, ``dual_mlp``, predicts the scaled moment multipliers ``λ̃ = σ λ`` ``(n,)``
    (``σ``: `moment_scale`) of the same frame. It is what makes label-free training converge
    (`train`, ``method="dual"``): ``λ`` is trained by maximising the dual `dual_terms`, and ``a(λ)``
    — exact at the optimal ``λ`` — is the target of ``mlp``. `dual_activations` gives ``a(λ)``
    itself (needs the frame's moment arms: slower, but on the KKT structure exactly), and
    `refined_activations` refines those multipliers with a few Newton steps on the dual first
    (static optimisation's accuracy at a fraction of its cost).

    Fields:

    - ``mlp``: `equinox.nn.MLP`, ``3n → m`` (the activations before the clip).
    - ``dual_mlp``: `equinox.nn.MLP`, ``3n → n`` (scaled multipliers).
    - ``input_mean``, ``input_scale``: ``(3n,)`` the normalisation of ``(q, q̇, q̈)`` (rad, rad/s,
      rad/s²), e.g. the training frames' mean and standard deviation (`from_frames`).
    - ``n_coordinates``, ``n_muscles``: static sizes.
    """

    mlp: eqx.nn.MLP
    dual_mlp: eqx.nn.MLP
    input_mean: Float[Array, " k"]
    input_scale: Float[Array, " k"]
    n_coordinates: int = eqx.field(static=True)
    n_muscles: int = eqx.field(static=True)

    def __init__(
        self,
        n_coordinates: int,
        n_muscles: int,
        *,
        key: PRNGKeyArray,
        width: int = 128,
        depth: int = 2,
        activation: Callable = jax.nn.silu,
        input_mean=None,
        input_scale=None,
        initial_activation: float = 0.05,
        dtype=None,
    ):
        """Args:
        n_coordinates, n_muscles: ``n`` and ``m``.
        key: JAX PRNG key for the weights.
        width, depth: hidden width and number of hidden layers of both MLPs.
        activation: hidden nonlinearity (default SiLU: smooth, so the loss is smooth).
        input_mean, input_scale: ``(3n,)`` normalisation (default 0 and 1).
        initial_activation: in ``(0, 1)``, the activations of the untrained network (the output
            bias; the last layer's weights are scaled by 0.1), small as static optimisation's
            typically are.
        dtype: float dtype of the weights (default JAX's default float).
        """
        n = static_number(n_coordinates, "n_coordinates", positive=True, integer=True)
        m = static_number(n_muscles, "n_muscles", positive=True, integer=True)
        width = static_number(width, "width", positive=True, integer=True)
        depth = static_number(depth, "depth", nonnegative=True, integer=True)
        if not 0.0 < float(initial_activation) < 1.0:
            raise ValueError(f"initial_activation must be in (0, 1), got {initial_activation}")
        check_key(key)
        dtype = jnp.zeros(0, dtype).dtype
        k1, k2 = jax.random.split(key)
        mlp = eqx.nn.MLP(3 * n, m, width, depth, activation=activation, key=k1, dtype=dtype)
        mlp = eqx.tree_at(
            lambda f: (f.layers[-1].weight, f.layers[-1].bias),
            mlp,
            (0.1 * mlp.layers[-1].weight, jnp.full((m,), float(initial_activation), dtype)),
        )
        dual = eqx.nn.MLP(3 * n, n, width, depth, activation=activation, key=k2, dtype=dtype)
        dual = eqx.tree_at(
            lambda f: (f.layers[-1].weight, f.layers[-1].bias),
            dual,
            (0.1 * dual.layers[-1].weight, jnp.zeros((n,), dtype)),
        )
        self.mlp = mlp
        self.dual_mlp = dual
        self.input_mean = (
            jnp.zeros(3 * n, dtype) if input_mean is None else _vector(input_mean, "input_mean", 3 * n, dtype)
        )
        self.input_scale = (
            jnp.ones(3 * n, dtype) if input_scale is None else _vector(input_scale, "input_scale", 3 * n, dtype)
        )
        scale = np.asarray(self.input_scale)
        if not np.all(scale > 0):
            raise ValueError(f"input_scale must be > 0, got {scale.tolist()}")
        self.n_coordinates = n
        self.n_muscles = m

    @classmethod
    def from_frames(
        cls,
        q: Float[ArrayLike, "T n"],
        qd: Float[ArrayLike, "T n"],
        qdd: Float[ArrayLike, "T n"],
        *,
        n_muscles: int,
        key: PRNGKeyArray,
        **kwargs,
    ) -> AmortizedStaticOptimization:
        """An untrained estimator normalised to the frames ``(T, n)``: mean and standard deviation
        of each input (a constant input gets scale 1). ``kwargs`` as in the constructor."""
        if jnp.ndim(q) != 2:
            raise ValueError(f"q has shape {jnp.shape(q)}, expected (T, n) (frames × coordinates)")
        n = jnp.shape(q)[1]
        x = np.concatenate(
            [np.asarray(_frames(v, name, n)) for v, name in ((q, "q"), (qd, "qd"), (qdd, "qdd"))], axis=1
        )
        std = x.std(axis=0)
        return cls(
            n, n_muscles, key=key, input_mean=x.mean(axis=0), input_scale=np.where(std > 1e-8, std, 1.0), **kwargs
        )

    def _features(self, q, qd, qdd):
        n = self.n_coordinates
        q, qd, qdd = (_state(x, name, n) for x, name in ((q, "q"), (qd, "qd"), (qdd, "qdd")))
        x = jnp.concatenate([q, qd, qdd]).astype(self.input_mean.dtype)
        return (x - self.input_mean) / self.input_scale

    def __call__(
        self, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"], qdd: Float[ArrayLike, " n"]
    ) -> Float[Array, " m"]:
        """Activations ``(m,)`` in ``[0, 1]`` of one frame (``q, qd, qdd``: ``(n,)`` rad, rad/s,
        rad/s²). Batch with `jax.vmap`."""
        return jnp.clip(self.activation_logits(q, qd, qdd), 0.0, 1.0)

    def activation_logits(self, q, qd, qdd) -> Float[Array, " m"]:
        """``z`` ``(m,)``, the MLP's output before the clip to ``[0, 1]``."""
        return self.mlp(self._features(q, qd, qdd))

    def scaled_multipliers(self, q, qd, qdd) -> Float[Array, " n"]:
        """``λ̃ = σ λ`` ``(n,)`` (dimensionless), the dual network's moment multipliers of one frame."""
        return self.dual_mlp(self._features(q, qd, qdd))

    def dual_activations(self, problem: MuscleProblem, q, qd, qdd) -> Float[Array, " m"]:
        """Activations ``a(λ)`` ``(m,)`` in ``[0, 1]`` from the dual network's multipliers and the
        frame's moment arms (`dual_terms`): slower than ``__call__`` (it evaluates the muscle
        geometry), exact where ``λ`` is."""
        self._check_problem(problem)
        data = problem.frame(q, qd, qdd)
        lam = _free_multipliers(problem, data, self.scaled_multipliers(q, qd, qdd) / moment_scale(problem, data))
        return dual_terms(problem, data, lam).activations

    def refined_activations(
        self, problem: MuscleProblem, q, qd, qdd, *, steps: int = 2, data: FrameData | None = None
    ) -> Float[Array, " m"]:
        """Activations ``(m,)`` in ``[0, 1]`` of one frame refined on its physics: the dual
        network's multipliers, ``steps`` Newton steps on the dual (`refine_multipliers`), then
        the closed-form ``a(λ)`` (`dual_terms`). Needs the frame's data (inverse dynamics, moment
        arms, ``F̂``, ``P``), so it costs more than ``__call__`` but stays far below the solver;
        ``steps=0`` is `dual_activations`. ``data``: the frame's `FrameData` if already computed
        (`MuscleProblem.frame`; the refinement alone is then cheap). Batch with `jax.vmap`.

        Measured by ``examples/learning_muscle_forces.py`` (float32, 1032 held-out frames; the
        largest force error of each frame against `jaxbio.estimation.static_optimization`, % of
        the peak force; the times per frame of the same run: benchmarks/README.md, "Measurements behind design choices")::

                       median   99th pct   worst
            network    0.77 %   2.5 %      3.5 %
            steps=1    0.000 %  1.6 %      2.9 %
            steps=2    0.000 %  0.43 %     0.78 %
            steps=3    0.000 %  0.000 %    0.44 %

        From ``(q, q̇, q̈)`` the frame data (inverse dynamics, moment arms, ``F̂``, ``P``) are most
        of the cost; on precomputed data (e.g. from a pipeline that has them) the refinement is
        cheaper than the solver.
        """
        self._check_problem(problem)
        if data is None:
            data = problem.frame(q, qd, qdd)
        elif not isinstance(data, FrameData) or data.tau.shape != (problem.n_coordinates,):
            raise ValueError("data must be the FrameData of this one frame (problem.frame(q, qd, qdd))")
        return self._refined(problem, data, q, qd, qdd, steps)

    def _refined(self, problem, data, q, qd, qdd, steps):
        lam = _free_multipliers(problem, data, self.scaled_multipliers(q, qd, qdd) / moment_scale(problem, data))
        return dual_terms(problem, data, refine_multipliers(problem, data, lam, steps=steps)).activations

    def forces(self, problem: MuscleProblem, q, qd, qdd, *, refine: int = 0) -> Float[Array, " m"]:
        """Muscle forces ``a F̂ + P`` ``(m,)`` N of one frame (``F̂``, ``P`` from ``problem``):
        ``refine=0`` the network's activations (``__call__``), ``refine=k > 0`` those of
        `refined_activations` with ``steps=k`` (more accurate, see there)."""
        self._check_problem(problem)
        refine = static_number(refine, "refine", nonnegative=True, integer=True)
        data = problem.frame(q, qd, qdd)
        a = self(q, qd, qdd) if refine == 0 else self._refined(problem, data, q, qd, qdd, refine)
        return a * data.max_force + data.passive_force

    def _check_problem(self, problem: MuscleProblem) -> None:
        if not isinstance(problem, MuscleProblem):
            raise ValueError(f"problem must be a MuscleProblem, got {type(problem).__name__}")
        if (problem.n_coordinates, problem.n_muscles) != (self.n_coordinates, self.n_muscles):
            raise ValueError(
                f"the estimator maps {self.n_coordinates} coordinates to {self.n_muscles} muscles, "
                f"the problem has {problem.n_coordinates} coordinates and {problem.n_muscles} muscles"
            )


def _vector(x, name, size, dtype):
    x = as_float(x, name)
    if x.shape != (size,):
        raise ValueError(f"{name} has shape {x.shape}, expected ({size},) (q, qd, qdd concatenated)")
    return x.astype(dtype)


# ---- losses and training ----------------------------------------------------------------------

METHODS = ("dual", "penalty")


def _frame_losses(estimator, problem, q, qd, qdd, data, residual_weight, method, target_steps=0):
    """Per-frame training losses ``(T,)`` on precomputed `FrameData`."""

    def one(q_t, qd_t, qdd_t, d):
        a = estimator(q_t, qd_t, qdd_t)
        if method == "penalty":
            return physics_terms(problem, d, a).loss(residual_weight)
        lam = _free_multipliers(problem, d, estimator.scaled_multipliers(q_t, qd_t, qdd_t) / moment_scale(problem, d))
        dual = dual_terms(problem, d, lam)
        target = dual.activations
        if target_steps:
            better = refine_multipliers(problem, d, jax.lax.stop_gradient(lam), steps=target_steps)
            target = dual_terms(problem, d, better).activations
        return -dual.value + _activation_regression(
            estimator.activation_logits(q_t, qd_t, qdd_t), jax.lax.stop_gradient(target)
        )

    return jax.vmap(one)(q, qd, qdd, data)


def _free_multipliers(problem, data, lam):
    """``λ`` with the multiplier of every coordinate that no muscle crosses in this frame (all
    ``|Rᵢⱼ| ≤ NO_MOMENT_ARM``; rounding leaves ~1e-8 m where a floating base rotates a whole
    muscle path rigidly) and that has a reserve set to its optimum ``2 τⱼ' / S_j²`` (``τ'`` net of passive
    forces): there the dual is separable, ``−S²λ²/4 + λτ'``, and maximised in closed form, so the
    network's output is not needed (and not trained) for those coordinates."""
    S = problem.reserve_strength
    alone = jnp.all(jnp.abs(data.moment_arms) <= NO_MOMENT_ARM, axis=0) & (S > 0)
    b = data.tau - data.moment_arms.T @ data.passive_force
    return jnp.where(alone, 2 * b / jnp.where(alone, S, 1.0) ** 2, lam)


def _activation_regression(z, target):
    """``Σ dist(zᵢ, {z : clip(z, 0, 1) = tᵢ})²``: squared distance of the unclipped output to the
    set that clips to the target — ``(z − t)²`` inside ``(0, 1)``, ``max(z, 0)²`` for a target 0,
    ``max(1 − z, 0)²`` for a target 1. Quadratic (well conditioned), zero exactly where the clipped
    activation equals the target, so exact zeros (inactive muscles) are learnable."""
    lo = jnp.where(target > 0, target, -jnp.inf)
    hi = jnp.where(target < 1, target, jnp.inf)
    return jnp.sum((z - jnp.clip(z, lo, hi)) ** 2)


def _check_frames(estimator, problem, q, qd, qdd):
    estimator._check_problem(problem)
    n = problem.n_coordinates
    q, qd, qdd = (_frames(x, name, n) for x, name in ((q, "q"), (qd, "qd"), (qdd, "qdd")))
    if not (q.shape == qd.shape == qdd.shape):
        raise ValueError(f"q, qd, qdd must have the same shape, got {q.shape}, {qd.shape}, {qdd.shape}")
    return q, qd, qdd


def physics_loss(
    estimator: AmortizedStaticOptimization,
    problem: MuscleProblem,
    q: Float[ArrayLike, "T n"],
    qd: Float[ArrayLike, "T n"],
    qdd: Float[ArrayLike, "T n"],
    *,
    residual_weight: float = RESIDUAL_WEIGHT,
    data: FrameData | None = None,
) -> Float[Array, ""]:
    """The label-free physics loss of the estimator's activations, averaged over ``T`` frames:
    ``Σ aᵖ + Σ y² + w Σ (r/σ)²`` (`PhysicsTerms.loss`: static optimisation's objective with the
    reserves taking what the muscles leave, plus the weighted moment residual on the other
    coordinates). Pure; differentiate with `equinox.filter_grad` with respect to ``estimator``.

    ``q, qd, qdd``: ``(T, n)`` rad, rad/s, rad/s². ``data``: the frames' `FrameData` if already
    computed (`frames_data`; it does not depend on the estimator), else computed here.
    ``ValueError`` for wrong shapes, an estimator of other sizes than ``problem``, a negative
    ``residual_weight``."""
    q, qd, qdd = _check_frames(estimator, problem, q, qd, qdd)
    w = static_number(residual_weight, "residual_weight", nonnegative=True)
    data = _data(problem, q, qd, qdd, data)
    return jnp.mean(_frame_losses(estimator, problem, q, qd, qdd, data, w, "penalty"))


def _data(problem, q, qd, qdd, data):
    if data is None:
        return jax.vmap(problem.frame)(q, qd, qdd)
    if not isinstance(data, FrameData) or data.tau.shape != q.shape:
        raise ValueError(f"data must be the FrameData of the {q.shape[0]} frames (frames_data(problem, q, qd, qdd))")
    return data


def training_loss(
    estimator: AmortizedStaticOptimization,
    problem: MuscleProblem,
    q: Float[ArrayLike, "T n"],
    qd: Float[ArrayLike, "T n"],
    qdd: Float[ArrayLike, "T n"],
    *,
    method: str = "dual",
    residual_weight: float = RESIDUAL_WEIGHT,
    target_steps: int = TARGET_STEPS,
    data: FrameData | None = None,
) -> Float[Array, ""]:
    """What `train` minimises, averaged over ``T`` frames ``(T, n)``.

    - ``method="penalty"``: `physics_loss`.
    - ``method="dual"`` (default): ``−g(λ) + Σᵢ dist(zᵢ, {z : clip(z, 0, 1) = aᵢ(λ)})²`` with
      ``λ`` from ``dual_mlp``, ``z`` the activation network's output before its clip, and ``a(λ)``
      held fixed (`jax.lax.stop_gradient`). The first term is static optimisation's Lagrangian —
      its objective plus the multipliers times the joint-moment residual — at its minimiser over
      activations and reserves (`dual_terms`); it trains ``dual_mlp`` (concave in ``λ``, maximal
      at the optimal multipliers, where ``a(λ)`` is static optimisation's solution). On
      coordinates that no muscle crosses (``|R| ≤ NO_MOMENT_ARM``) and that have a reserve, ``λ``
      is set to its closed-form optimum ``2τ'/S²`` instead of the network's. The second term
      trains ``mlp`` towards ``a(λ)``: quadratic, and zero wherever the clipped activation equals
      the target, so inactive muscles can be exactly 0. With ``target_steps = k > 0`` the target
      is ``a(λ_k)``, ``λ_k`` the dual network's ``λ`` after ``k`` Newton steps on the same dual
      (`refine_multipliers`, the refinement of `AmortizedStaticOptimization.refined_activations`):
      the activation network then learns where the dual's maximum is, not where the dual network
      has got to (which it reaches only approximately). No labels: every term comes from the
      frame's physics.

    ``target_steps``: ``k ≥ 0`` (``method="dual"`` only; default `TARGET_STEPS`). ``data``: as in
    `physics_loss`.
    """
    check_choice(method, METHODS, "method")
    q, qd, qdd = _check_frames(estimator, problem, q, qd, qdd)
    w = static_number(residual_weight, "residual_weight", nonnegative=True)
    k = static_number(target_steps, "target_steps", nonnegative=True, integer=True)
    data = _data(problem, q, qd, qdd, data)
    return jnp.mean(_frame_losses(estimator, problem, q, qd, qdd, data, w, method, k))


def train(
    estimator: AmortizedStaticOptimization,
    problem: MuscleProblem,
    q: Float[ArrayLike, "T n"],
    qd: Float[ArrayLike, "T n"],
    qdd: Float[ArrayLike, "T n"],
    *,
    key: PRNGKeyArray,
    steps: int = 2000,
    batch_size: int = 256,
    learning_rate: float = 3e-3,
    method: str = "dual",
    residual_weight: float = RESIDUAL_WEIGHT,
    target_steps: int = TARGET_STEPS,
    optimizer: optax.GradientTransformation | None = None,
    chunk: int = 100,
    progress: bool = False,
) -> tuple[AmortizedStaticOptimization, Float[Array, " steps"]]:
    """Fit ``estimator`` to the frames ``(T, n)`` by minimising `training_loss` on random
    minibatches (no labels).

    The per-frame data (inverse dynamics, moment arms, ``F̂``, ``P``) are computed once; then
    ``steps`` optimiser steps run in compiled ``lax.scan`` chunks of ``chunk`` steps. Minibatches
    are consecutive slices of one random permutation of the frames per epoch (every frame once
    per epoch; the last ``T mod batch_size`` frames of an epoch's order are left out of it).

    Args:
        estimator: the `AmortizedStaticOptimization` to train (its MLPs are trained,
            ``input_mean``/``input_scale`` kept).
        problem: the `MuscleProblem`.
        q, qd, qdd: ``(T, n)`` rad, rad/s, rad/s², the training frames.
        key: PRNG key for the minibatches.
        steps, batch_size: optimiser steps and frames per step (``batch_size ≤ T``).
        learning_rate: peak of the default schedule (Adam, cosine decay from ``learning_rate`` to
            1 % of it over ``steps``). Ignored if ``optimizer`` is given.
        method: ``"dual"`` (default) or ``"penalty"``, see `training_loss`. The penalty loss is
            ill-conditioned (curvature ``2`` along the moment constraints' null space against
            ``2w`` across it) and stalls far from the solution; the dual one converges.
        residual_weight: ``w`` of the penalty (``method="penalty"`` only).
        target_steps: Newton steps that improve the activation network's target (``method="dual"``
            only), see `training_loss`. Each costs about 8 dual evaluations and an ``n × n``
            Cholesky solve per frame (`refine_multipliers`); measured on gait10dof18musc (see
            `TARGET_STEPS`), they buy more accuracy than as many more Adam steps.
        optimizer: any optax transformation instead of the default.
        chunk: steps per compiled chunk (and per progress-bar update).
        progress: show a tqdm progress bar (for terminals; the library is silent by default).

    Returns:
        ``(trained estimator, losses (steps,))``, the minibatch training loss before each step.
    """
    check_choice(method, METHODS, "method")
    q, qd, qdd = _check_frames(estimator, problem, q, qd, qdd)
    T = q.shape[0]
    steps = static_number(steps, "steps", positive=True, integer=True)
    batch_size = static_number(batch_size, "batch_size", positive=True, integer=True)
    chunk = static_number(chunk, "chunk", positive=True, integer=True)
    if batch_size > T:
        raise ValueError(f"batch_size {batch_size} exceeds the {T} training frames")
    w = static_number(residual_weight, "residual_weight", nonnegative=True)
    k_target = static_number(target_steps, "target_steps", nonnegative=True, integer=True)
    check_key(key)
    if optimizer is None:
        lr = static_number(learning_rate, "learning_rate", positive=True)
        optimizer = optax.adam(optax.cosine_decay_schedule(lr, steps, alpha=0.01))

    data = frames_data(problem, q, qd, qdd)
    params, static = _partition(estimator)
    opt_state = optimizer.init(params)

    @eqx.filter_jit
    def run(params, opt_state, indices):
        def step(carry, idx):
            params, opt_state = carry
            batch = jax.tree_util.tree_map(lambda x: x[idx], (q, qd, qdd, data))

            def loss_fn(p):
                return jnp.mean(_frame_losses(eqx.combine(p, static), problem, *batch, w, method, k_target))

            loss, grads = jax.value_and_grad(loss_fn)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        return jax.lax.scan(step, (params, opt_state), indices)

    losses, orders = [], {}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, desc="training", unit="step")
    for start in range(0, steps, chunk):
        indices = _minibatches(key, T, batch_size, start, min(start + chunk, steps), orders)
        (params, opt_state), chunk_losses = run(params, opt_state, indices)
        losses.append(chunk_losses)
        if bar is not None:
            bar.update(len(chunk_losses))
            bar.set_postfix(loss=f"{float(chunk_losses[-1]):.4g}")
    if bar is not None:
        bar.close()
    return eqx.combine(params, static), jnp.concatenate(losses)


@eqx.filter_jit
def frames_data(
    problem: MuscleProblem, q: Float[ArrayLike, "T n"], qd: Float[ArrayLike, "T n"], qdd: Float[ArrayLike, "T n"]
) -> FrameData:
    """`MuscleProblem.frame` over ``T`` frames (``(T, n)`` each), compiled: `FrameData` with a
    leading ``T`` axis."""
    return jax.vmap(problem.frame)(q, qd, qdd)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _epoch_orders(keys, T, batch_size):
    """``(E, T // batch_size, batch_size)``: the minibatches of ``E`` epochs, one permutation each."""
    orders = jax.vmap(lambda k: jax.random.permutation(k, T))(keys)
    return orders[:, : T - T % batch_size].reshape(len(keys), -1, batch_size)


def _minibatches(key, T, batch_size, start, stop, cache=None):
    """Frame indices ``(stop − start, batch_size)`` of optimiser steps ``start … stop − 1``: step
    ``s`` takes the ``s mod E``-th slice of epoch ``s // E``'s permutation (``E = T // batch_size``
    slices per epoch; epoch ``e``'s permutation from ``fold_in(key, e)``).

    One permutation per epoch, not per step: ``jax.random.choice(..., replace=False)`` per step
    permutes all ``T`` frames every step — about half of a training step at ``T = 32768``
    (benchmarks/README.md, "Measurements behind design choices"). ``cache``: a dict ``{epoch: its slices}`` kept between the
    calls of one training run, so that an epoch split between two chunks is permuted once
    (the example's 160 chunks)."""
    per_epoch = T // batch_size
    epochs = range(start // per_epoch, (stop - 1) // per_epoch + 1)
    cache = {} if cache is None else cache
    new = [e for e in epochs if e not in cache]
    if new:
        keys = jax.vmap(lambda e: jax.random.fold_in(key, e))(jnp.asarray(new))
        cache.update(zip(new, _epoch_orders(keys, T, batch_size)))
    for old in [e for e in cache if e < epochs[0]]:
        del cache[old]
    orders = jnp.stack([cache[e] for e in epochs])
    steps = np.arange(start, stop)
    return orders[steps // per_epoch - epochs[0], steps % per_epoch]


def _partition(estimator):
    """Trainable leaves (the MLPs' arrays) and the rest (normalisation constants, static)."""
    spec = jax.tree_util.tree_map(lambda _: False, estimator)
    spec = eqx.tree_at(
        lambda e: (e.mlp, e.dual_mlp),
        spec,
        replace=(
            jax.tree_util.tree_map(eqx.is_inexact_array, estimator.mlp),
            jax.tree_util.tree_map(eqx.is_inexact_array, estimator.dual_mlp),
        ),
    )
    return eqx.partition(estimator, spec)
