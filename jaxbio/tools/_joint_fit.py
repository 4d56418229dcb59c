"""Scales, marker offsets and a trial's motion fitted together: one differentiable least-squares
problem where OpenSim solves three in turn (scale by marker-pair distances, place the markers on
one static pose, then inverse kinematics with everything else held).

**The scaled model as a function of the scale factors** (`ModelScaling`, `model_scaling`).
OpenSim scales every length of a body's frame componentwise by that body's factors ``s_b``
``(3,)`` (`jaxbio.io.scale_osim`: joint offset frames, mass centres, markers, joint translation
functions), so each length of jaxbio's `Model` (tree origins and mass centres, the coordinate
map's spline values, body and marker frames, marker locations) is a *linear* function of the
factors. `model_scaling` measures that map once, outside jit, by loading the model scaled by
``1 + e_k`` for every body axis ``k`` (OpenSim's own scaling, `jaxbio.io.scale_osim`), and checks
it at random factors against a direct scaling (``NotImplementedError`` where a model's scaling is
not linear, e.g. a translation axis oblique to its body's axes). `ModelScaling.__call__` is then
a pure function ``factors -> Model``: jit, vmap and grad go through it to marker positions.
Masses and inertias stay the generic model's (they do not move markers; `fitted_osim` writes a
file with OpenSim's scaled masses); the ForceSet (muscles) is not carried.

**The problem** (`joint_fit`). Parameters: ``s`` ``(nb, 3)`` the bodies' scale factors, ``δ``
``(m, 3)`` m each marker's offset from its scaled generic location (in the marker's frame: the
model's marker is at ``L_k(s) + δ_k``), and every frame's coordinates ``c_t``. Objective:

    J(s, δ) = (1/T) Σ_t min_{c_t} G_t(c_t; s, δ) + λ_δ (1/m) Σ_k |δ_k − δ⁰_k|² + λ_s (1/3nb) Σ (s − s⁰)²

with ``G_t`` OpenSim's IK goal of frame ``t`` (`jaxbio.io.inverse_kinematics_residuals`: the
trial's marker weights, coordinate tasks, clamps, locks and couplers), summed over the frames of
all trials given. ``s⁰``, ``δ⁰`` (the regularisation's targets and the start) are typically
OpenSim's ScaleTool result: its scale factors and its placed markers, so that the start is
Scale-then-IK and the fit can only lower ``J`` from there. The inner minimum is jaxbio's IK
(`jaxbio.io.solve_inverse_kinematics`, every frame tracked from the previous one), solved exactly
at each outer evaluation, so that by the envelope theorem ``∇J`` is the partial gradient of
``G_t`` at the solved ``c_t`` (no differentiation through the solver: this is variable
projection). The outer problem (``3nb + 3m`` numbers) is minimised with optimistix's ``BFGS``,
in units where it is well scaled (offsets in cm, scale factors in percent, ``J`` in cm²).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

__all__ = ["JointFitResult", "ModelScaling", "fitted_osim", "joint_fit", "joint_fit_objective", "model_scaling"]

#: leaves of a Model that scaling does not touch linearly (masses, inertias: kept at the generic's)
_KEPT = ("masses", "inertias")


class ModelScaling(eqx.Module):
    """A generic model's geometry as a linear function of per-body scale factors (`model_scaling`).

    - ``model``: the generic `jaxbio.Model` (all factors 1), without its ForceSet.
    - ``jacobians``: for each inexact array leaf of ``model`` (in ``jax.tree.leaves`` order of
      ``eqx.filter(model, eqx.is_inexact_array)``), ``(leaf.size, 3 nb)`` the change of the leaf
      per unit change of each factor, or None where the leaf does not depend on them.
    - ``bodies`` (static): the ``nb`` bodies whose factors are the rows of ``factors``.

    ``scaling(factors)``: ``factors`` ``(nb, 3)`` (x, y, z of each body's frame) → the scaled
    `jaxbio.Model` (what `jaxbio.io.load_osim` gives for `jaxbio.io.scale_osim`'s file, masses
    and inertias left as the generic's). Pure: jit, vmap and grad go through it."""

    model: object
    jacobians: tuple
    bodies: tuple[str, ...] = eqx.field(static=True)

    def __call__(self, factors: Float[Array, "nb 3"]):
        params, static = eqx.partition(self.model, eqx.is_inexact_array)
        leaves, treedef = jax.tree_util.tree_flatten(params)
        ds = (jnp.asarray(factors) - 1.0).reshape(-1)
        out = [
            leaf if J is None else leaf + (J @ ds.astype(J.dtype)).reshape(leaf.shape).astype(leaf.dtype)
            for leaf, J in zip(leaves, self.jacobians)
        ]
        return eqx.combine(jax.tree_util.tree_unflatten(treedef, out), static)

    def marker_offsets(self, model, factors: Float[Array, "nb 3"]) -> Float[Array, "m 3"]:
        """``(m, 3)`` m: ``model``'s marker locations (each in its frame, the markers of this
        generic model by name) less the scaled generic's at ``factors``: the offsets ``δ`` of
        `joint_fit` at which the scaled generic model has ``model``'s markers."""
        names = self.model.markers.names
        placed = model.markers.select(names).locations
        return jnp.asarray(placed) - self(factors).markers.locations


def _skeleton(root):
    """A copy of a model's XML without its forces (scaling them needs their path lengths; the
    markers do not depend on them)."""
    import copy

    root = copy.deepcopy(root)
    model = root if root.tag == "Model" else root.find("Model")
    for objects in model.findall("ForceSet/objects"):
        for force in list(objects):
            objects.remove(force)
    return root


def _difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a − b``, 0 where they are equal (the same infinity, or both NaN: padding)."""
    with np.errstate(invalid="ignore"):
        return np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, a - b)


def model_scaling(source, *, marker_set=None, bodies: Sequence[str] | None = None, dtype=None) -> ModelScaling:
    """`ModelScaling` of a generic OpenSim 4.x model, outside jit (``3 nb + 2`` scalings and loads).

    - ``source``: the generic ``.osim`` (path, text or ``ElementTree`` root).
    - ``marker_set``: a marker set file replacing the model's markers of the same name (the
      ScaleTool's ``<marker_set_file>``), or None.
    - ``bodies``: the bodies with factors (None: every body of the BodySet, in file order).
    - ``dtype``: the model's float type (default float64; the map is measured in float64).

    ``NotImplementedError`` when the model's scaling is not linear in the factors (checked at
    random factors to 1e-9 of the lengths); ``ValueError`` for a body the model does not have."""
    from jaxbio.tools._scale import _Document, _load_text, _root, _with_marker_set, scale_osim

    root, where = _root(source)
    if marker_set is not None:
        root = _with_marker_set(root, marker_set, where)
    root = _skeleton(root)
    known = list(_Document(root, where).bodies)
    bodies = tuple(known if bodies is None else bodies)
    bad = [b for b in bodies if b not in known]
    if bad:
        raise ValueError(f"{where}: no body {bad} (bodies: {known})")

    def load(factors):
        text = scale_osim(root, {b: factors[i] for i, b in enumerate(bodies)})
        with jax.enable_x64(True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = _load_text(text, dtype=jnp.float64)
        return m, [np.asarray(x) for x in jax.tree_util.tree_leaves(eqx.filter(m, eqx.is_inexact_array))]

    ones = np.ones((len(bodies), 3))
    base, leaves0 = load(ones)
    paths = [
        jax.tree_util.keystr(p)
        for p, _ in jax.tree_util.tree_flatten_with_path(eqx.filter(base, eqx.is_inexact_array))[0]
    ]
    columns = []
    for k in range(ones.size):
        f = ones.copy().reshape(-1)
        f[k] += 1.0
        columns.append(load(f.reshape(-1, 3))[1])
    jacobians = []
    for i, (path, leaf) in enumerate(zip(paths, leaves0)):
        J = np.stack([_difference(col[i], leaf).reshape(-1) for col in columns], 1)
        kept = any(path.endswith("." + name) for name in _KEPT)
        jacobians.append(None if kept or not np.any(J) else J)
    # linearity: the map at random factors against OpenSim's scaling there
    rng = np.random.default_rng(0)
    test = rng.uniform(0.8, 1.25, ones.shape)
    _, direct = load(test)
    for path, leaf, J, got in zip(paths, leaves0, jacobians, direct):
        if J is None:
            continue
        mapped = leaf.reshape(-1) + J @ (test - 1).reshape(-1)
        if not np.allclose(mapped, got.reshape(-1), rtol=1e-9, atol=1e-9, equal_nan=True):
            raise NotImplementedError(
                f"{where}: the scaled model's {path[1:]} is not linear in the scale factors (largest "
                f"difference {np.max(np.abs(mapped - got.reshape(-1))):.3g}); joint fitting needs a model whose "
                "scaling is (translation axes along their body's axes)"
            )
    dt = jnp.float64 if dtype is None else dtype
    with jax.enable_x64(dt == jnp.float64):
        base = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dt) if eqx.is_inexact_array(x) else x, base)
        jacobians = tuple(None if J is None else jnp.asarray(J, dt) for J in jacobians)
    return ModelScaling(base, jacobians, bodies)


@dataclasses.dataclass(frozen=True)
class JointFitResult:
    """What `joint_fit` found.

    - ``factors``: ``(nb, 3)`` the bodies' scale factors; ``offsets``: ``(m, 3)`` m, the markers'
      offsets from their scaled generic locations (marker frames); ``model``: the fitted
      `jaxbio.Model` (``scaling(factors)`` with the markers at ``L(s) + δ``).
    - ``c``: per trial ``(T, nc)`` rad / m, the coordinates (IK on the fitted model).
    - ``objective``: ``J`` at the solution (m²); ``start_objective``: at the start.
    - ``marker_rms``: per trial ``(T,)`` m, OpenSim's ``marker_error_RMS`` per frame
      (``√(Σ_i |x_i − m_i|² / k)`` over the tracked markers) on the fitted model;
      ``start_marker_rms``: the same at the start (Scale-then-IK when the start is the ScaleTool's).
    - ``steps``: BFGS iterations; ``converged``: optimistix met its tolerance.
    """

    factors: np.ndarray
    offsets: np.ndarray
    model: object
    c: tuple
    objective: float
    start_objective: float
    marker_rms: tuple
    start_marker_rms: tuple
    steps: int
    converged: bool


def _fitted(scaling: ModelScaling, factors, offsets):
    model = scaling(factors)
    return eqx.tree_at(lambda mo: mo.markers.locations, model, model.markers.locations + offsets)


def _no_gradient(tree):
    params, static = eqx.partition(tree, eqx.is_inexact_array)
    return eqx.combine(jax.lax.stop_gradient(params), static)


def _trial_goals(model, inputs, c):
    """``(T,)`` m² OpenSim's goal per frame at ``c`` ``(T, nc)``."""
    from jaxbio.tools._inverse_kinematics import inverse_kinematics_residuals

    return jax.vmap(lambda frame, ci: 0.5 * jnp.sum(inverse_kinematics_residuals(model, frame, ci) ** 2))(inputs, c)


def _trial_rms(model, inputs, c):
    """``(T,)`` m OpenSim's ``marker_error_RMS`` per frame."""
    from jaxbio.tools._inverse_kinematics import marker_errors

    d2 = jax.vmap(lambda frame, ci: marker_errors(model, frame, ci))(inputs, c)
    return jnp.sqrt(jnp.sum(d2, axis=1) / d2.shape[1])


def _trials(trials) -> tuple:
    return (trials,) if not isinstance(trials, (list, tuple)) else tuple(trials)


def _solve_trials(model, trials, starts, tolerances):
    from jaxbio.tools._inverse_kinematics import _solve

    rtol, atol = tolerances
    return tuple(_solve(model, t, c0, rtol, atol, 256)[0] for t, c0 in zip(trials, starts))


def joint_fit_objective(
    scaling: ModelScaling,
    trials,
    factors: Float[Array, "nb 3"],
    offsets: Float[Array, "m 3"],
    *,
    factors0: Float[Array, "nb 3"],
    offsets0: Float[Array, "m 3"],
    scale_weight: float = 1e-3,
    offset_weight: float = 0.1,
    starts=None,
    ik_tolerances: tuple[float, float] = (1e-10, 1e-12),
) -> Float[Array, ""]:
    """``J(s, δ)`` (module docstring), m²: each trial's IK solved on the model at ``factors``
    ``(nb, 3)`` and ``offsets`` ``(m, 3)`` m (frame 0 from ``starts``, one ``(nc,)`` per trial,
    None: the default pose), its mean goal over all frames plus the regularisation towards
    ``factors0`` and ``offsets0`` (arguments as `joint_fit`). Pure; its gradient in ``factors``
    and ``offsets`` is the envelope theorem's (the partial gradient at the solved coordinates,
    exact at the inner optimum), without differentiating the IK iterations."""
    trials = _trials(trials)
    starts = (None,) * len(trials) if starts is None else tuple(starts)
    n_frames = sum(t.n_frames for t in trials)
    model = _fitted(scaling, factors, offsets)
    cs = _solve_trials(_no_gradient(model), trials, starts, ik_tolerances)
    goal = sum(jnp.sum(_trial_goals(model, t, jax.lax.stop_gradient(c))) for t, c in zip(trials, cs))
    reg = offset_weight * jnp.mean(jnp.sum((offsets - offsets0) ** 2, axis=1))
    reg = reg + scale_weight * jnp.mean((factors - factors0) ** 2)
    return goal / n_frames + reg


def joint_fit(
    scaling: ModelScaling,
    trials,
    *,
    factors: Float[Array, "nb 3"] | None = None,
    offsets: Float[Array, "m 3"] | None = None,
    scale_weight: float = 1e-3,
    offset_weight: float = 0.1,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    max_steps: int = 200,
    ik_tolerances: tuple[float, float] = (1e-10, 1e-12),
) -> JointFitResult:
    """Scale factors, marker offsets and every frame's coordinates fitted together (module
    docstring): `joint_fit_objective` minimised by optimistix's ``BFGS``.

    - ``scaling``: the generic model's `ModelScaling` (`model_scaling`).
    - ``trials``: one `jaxbio.io.InverseKinematicsInputs` or a sequence of them (e.g. the static
      and the walking trial, `jaxbio.io.prepare_inverse_kinematics` on the generic model: their
      marker weights and coordinate tasks make each frame's goal ``G_t``).
    - ``factors``: ``(nb, 3)`` the start and the scales' regularisation target ``s⁰`` (default:
      ones, the generic model); ``offsets``: ``(m, 3)`` m, the start and target ``δ⁰`` of the
      markers' offsets (default: zeros; `ModelScaling.marker_offsets` of a placed model).
    - ``scale_weight``: ``λ_s`` m² per squared unit of factor; ``offset_weight``: ``λ_δ``
      (dimensionless: a mean squared offset change against the mean goal).
    - ``rtol``, ``atol``: optimistix ``BFGS``'s tolerances (on ``J`` in cm², the variables in
      cm and percent); ``max_steps``: its iterations at most; ``ik_tolerances``: the inner IK's
      ``(rtol, atol)``.

    Runs in float64 (``jax.enable_x64``). Returns a `JointFitResult`."""
    import optimistix as optx

    trials = _trials(trials)
    nb, m = len(scaling.bodies), scaling.model.markers.n_markers
    with jax.enable_x64(True):
        s0 = jnp.ones((nb, 3)) if factors is None else jnp.asarray(factors, jnp.float64)
        d0 = jnp.zeros((m, 3)) if offsets is None else jnp.asarray(offsets, jnp.float64)
        if s0.shape != (nb, 3):
            raise ValueError(f"factors: shape {s0.shape}, expected ({nb}, 3) for the bodies {scaling.bodies}")
        if d0.shape != (m, 3):
            raise ValueError(f"offsets: shape {d0.shape}, expected ({m}, 3)")
        cm, percent = 1e-2, 1e-2  # the solver's units: J in cm², offsets in cm, factors in percent

        def unpack(y):
            return s0 + percent * y[0], d0 + cm * y[1]

        def objective(y, starts):
            s, d = unpack(y)
            weights = dict(scale_weight=scale_weight, offset_weight=offset_weight, ik_tolerances=ik_tolerances)
            return (
                joint_fit_objective(scaling, trials, s, d, factors0=s0, offsets0=d0, starts=starts, **weights) / cm**2
            )

        model0 = _fitted(scaling, s0, d0)
        solve = jax.jit(lambda mo, starts: _solve_trials(mo, trials, starts, ik_tolerances))
        c_start = solve(model0, (None,) * len(trials))
        starts = tuple(c[0] for c in c_start)
        y0 = (jnp.zeros((nb, 3)), jnp.zeros((m, 3)))
        sol = optx.minimise(
            objective, optx.BFGS(rtol=rtol, atol=atol), y0, args=starts, max_steps=max_steps, throw=False
        )
        s, d = unpack(sol.value)
        model = _fitted(scaling, s, d)
        cs = solve(model, starts)
        rms = tuple(np.asarray(_trial_rms(model, t, c)) for t, c in zip(trials, cs))
        rms0 = tuple(np.asarray(_trial_rms(model0, t, c)) for t, c in zip(trials, c_start))
        return JointFitResult(
            factors=np.asarray(s),
            offsets=np.asarray(d),
            model=model,
            c=tuple(np.asarray(c) for c in cs),
            objective=float(objective(sol.value, starts)) * cm**2,
            start_objective=float(objective(y0, starts)) * cm**2,
            marker_rms=rms,
            start_marker_rms=rms0,
            steps=int(sol.stats["num_steps"]),
            converged=bool(sol.result == optx.RESULTS.successful),
        )


def fitted_osim(
    source,
    scaling: ModelScaling,
    result: JointFitResult,
    *,
    marker_set=None,
    mass: float | None = None,
    preserve_mass_distribution: bool = False,
    name: str | None = None,
) -> str:
    """The fitted model as ``.osim`` text: ``source`` (the generic model, with ``marker_set`` as
    for `model_scaling`) scaled by ``result.factors`` as OpenSim scales it (`jaxbio.io.scale_osim`:
    masses, inertias, muscles; ``mass`` kg the subject's), the markers moved to their fitted
    locations."""
    from jaxbio.tools._scale import _fmt, _root, _with_marker_set, scale_osim
    from jaxbio.tools._scale import _root as parse

    root, where = _root(source)
    if marker_set is not None:
        root = _with_marker_set(root, marker_set, where)
    factors = {b: np.asarray(result.factors[i]) for i, b in enumerate(scaling.bodies)}
    text = scale_osim(root, factors, mass=mass, preserve_mass_distribution=preserve_mass_distribution, name=name)
    root2, _ = parse(text)
    model = root2 if root2.tag == "Model" else root2.find("Model")
    locations = np.asarray(result.model.markers.locations)
    index = {n: k for k, n in enumerate(result.model.markers.names)}
    for marker in model.findall("MarkerSet/objects/Marker"):
        k = index.get(marker.get("name"))
        if k is not None:
            el = marker.find("location")
            el.text = " ".join(_fmt(v) for v in locations[k])
    from jaxbio.tools._scale import _tostring

    return _tostring(root2)
