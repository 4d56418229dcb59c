"""What OpenSim's Thelen2003Muscle and Millard2012EquilibriumMuscle share: parameter handling,
the fixed-width pennation model, first-order activation dynamics, the result of an equilibrium
solve, and the fiber–tendon equilibrium iteration of ``initMuscleState`` /
``estimateMuscleFiberState``.

Sources (read, not copied): ``OpenSim/Actuators/MuscleFixedWidthPennationModel.cpp``,
``MuscleFirstOrderActivationDynamicModel.cpp``, ``Thelen2003Muscle.cpp`` (``initMuscleState``),
``Millard2012EquilibriumMuscle.cpp`` (``estimateMuscleFiberState``), opensim-core 4.x.
"""

from __future__ import annotations

import inspect
import math
from typing import ClassVar, NamedTuple
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jaxbio._validate import check_precision, concrete
from jaxbio.muscles._inputs import activation_state, fraction, muscle_inputs
from jaxbio.spatial import safe_sqrt

_EPS64 = float(np.finfo(np.float64).eps)
#: ``SimTK::Eps``, ``SimTK::SqrtEps`` and ``SimTK::SignificantReal`` (``ε^(7/8)``), double precision,
#: as OpenSim uses them whatever the dtype here.
EPS = _EPS64
SQRT_EPS = math.sqrt(_EPS64)
SIGNIFICANT_REAL = _EPS64**0.875

#: ``status`` of `MuscleEquilibrium`.
CONVERGED, AT_MINIMUM_FIBER_LENGTH, NOT_CONVERGED = 0, 1, 2


# ---- parameters ----------------------------------------------------------------------------------


def require(ok, message: str) -> None:
    """``ValueError(message)`` unless every concrete entry of ``ok`` is true (traced: skipped)."""
    ok = concrete(ok)
    if ok is not None and not np.all(ok):
        raise ValueError(message)


def values_of(x) -> str:
    """Concrete values for an error message."""
    a = concrete(x)
    return "(traced)" if a is None else str(np.asarray(a).tolist())


def as_parameters(owner: str, fields: Mapping[str, object], *, vector: bool) -> dict[str, Array]:
    """The ``fields`` as floating arrays of one dtype, broadcast to one shape: ``()`` or ``(m,)``
    (``vector=True``: at least ``(m,)``). ``ValueError`` naming the field for other shapes."""
    # numpy when every field is a plain number or numpy array (a model read from a file: its
    # construction compiles nothing), else JAX arrays (traced or given as JAX arrays)
    xp = (
        jnp if any(isinstance(v, (jax.Array, jax.core.Tracer)) for v in jax.tree_util.tree_leaves(dict(fields))) else np
    )
    arrays = {name: xp.asarray(v) for name, v in fields.items()}
    for name, arr in arrays.items():
        check_precision(arr.dtype, f"{owner}: {name}")
        if arr.ndim > 1 or not (
            jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer) or arr.dtype == bool
        ):
            raise ValueError(
                f"{owner}: {name} must be a real scalar or a vector (m,), got shape {arr.shape}, dtype {arr.dtype}"
            )
    dtype = jnp.result_type(*arrays.values(), float)
    try:
        shape = jnp.broadcast_shapes(*(a.shape for a in arrays.values()), *(((1,),) if vector else ()))
    except ValueError:
        shapes = {n: a.shape for n, a in arrays.items()}
        raise ValueError(f"{owner}: parameter shapes do not broadcast to one (m,): {shapes}") from None
    return {n: xp.broadcast_to(a.astype(dtype), shape) for n, a in arrays.items()}


def check_positive(owner: str, **fields) -> None:
    """``ValueError`` naming the first field with a concrete entry that is not finite and > 0."""
    for name, x in fields.items():
        a = concrete(x)
        if a is not None and not np.all(np.isfinite(a) & (a > 0)):
            raise ValueError(f"{owner}: {name} must be finite and > 0, got {np.asarray(a).tolist()}")


#: OpenSim muscle properties that do not change the forces at a given activation, length and speed
#: (controls, defaults of state variables, the path): accepted and skipped by ``from_opensim``.
NON_MECHANICAL_PROPERTIES = frozenset(
    {
        "appliesForce",
        "isDisabled",
        "min_control",
        "max_control",
        "optimal_force",
        "default_activation",
        "default_fiber_length",
        "GeometryPath",
        "path",
        "ignore_activation_dynamics",
    }
)


def as_rows(properties) -> list[Mapping]:
    """One mapping (one muscle) or a sequence of mappings → a non-empty list of mappings."""
    rows = [properties] if isinstance(properties, Mapping) else list(properties)
    if not rows:
        raise ValueError("from_opensim: no muscles given")
    return rows


def flag_values(rows: list[Mapping], name: str) -> list[bool]:
    """The boolean OpenSim property ``name`` of each muscle (``true``/``false`` strings as in XML;
    False where absent, OpenSim's default)."""

    def truth(value) -> bool:
        if isinstance(value, str):
            if value.strip().lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"from_opensim: {name} must be true or false, got {value!r}")
            return value.strip().lower() in ("true", "1")
        return bool(value)

    return [truth(row.get(name, False)) for row in rows]


def from_opensim_properties(
    cls, properties, names: Mapping[str, str], nested: Mapping[str, type] | None = None, **overrides
):
    """Build ``cls`` from OpenSim XML property names: ``properties`` is one mapping (a muscle)
    or a sequence of mappings (one per muscle; missing entries take OpenSim's default).
    ``names`` maps XML names to constructor arguments; ``nested`` maps XML names of nested
    objects (Millard's curves) to their classes, each given as a mapping of its own properties;
    `NON_MECHANICAL_PROPERTIES` and the names in ``overrides`` are skipped."""
    rows = as_rows(properties)
    nested = nested or {}
    known = set(names) | set(nested)
    for i, row in enumerate(rows):
        unknown = set(row) - known - NON_MECHANICAL_PROPERTIES - set(overrides)
        if unknown:
            raise ValueError(
                f"{cls.__name__}.from_opensim: unknown OpenSim properties {sorted(unknown)} "
                f"(muscle {i}); known: {sorted(known)}"
            )
    kwargs = {}
    for xml, arg in names.items():
        present = [xml in row for row in rows]
        if any(present):
            if not all(present):
                default = _default_of(cls, arg)
                kwargs[arg] = np.array([row.get(xml, default) for row in rows], dtype=float)
            else:
                kwargs[arg] = np.array([row[xml] for row in rows], dtype=float)
    for xml, curve_cls in nested.items():
        if any(xml in row for row in rows):
            kwargs[names.get(xml, _snake(xml))] = curve_cls.from_opensim([row.get(xml, {}) for row in rows])
    kwargs.update(overrides)
    return cls(**kwargs)


def _default_of(cls, arg: str):
    """OpenSim's default of constructor argument ``arg`` (``cls._opensim_default`` where defined)."""
    if hasattr(cls, "_opensim_default"):
        return cls._opensim_default(arg)
    return signature_default(cls, arg)


def signature_default(cls, arg: str):
    """The default of ``cls.__init__``'s argument ``arg``; an optional property (default None) is
    NaN, unset. ``ValueError`` if there is none."""
    default = inspect.signature(cls.__init__).parameters[arg].default
    if default is inspect.Parameter.empty:
        raise ValueError(f"{cls.__name__}.from_opensim: {arg} must be given for every muscle or none")
    return np.nan if default is None else default


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


# ---- MuscleFixedWidthPennationModel ---------------------------------------------------------------


class Pennation(NamedTuple):
    """OpenSim's ``MuscleFixedWidthPennationModel``: the fiber keeps a constant 'height'
    ``h = l_opt sin α₀`` (m), so ``sin α = h / l_M``; ``α`` is capped at ``maximum_pennation_angle``,
    which also sets the shortest fiber ``h / sin α_max`` (``0.01 l_opt`` if ``α_max = 0``)."""

    height: Array
    pennation_angle_at_optimal: Array
    maximum_pennation_angle: Array
    minimum_fiber_length: Array
    minimum_fiber_length_along_tendon: Array

    @classmethod
    def of(cls, optimal_fiber_length, pennation_angle_at_optimal, maximum_pennation_angle) -> Pennation:
        h = optimal_fiber_length * jnp.sin(pennation_angle_at_optimal)
        sin_max = jnp.sin(maximum_pennation_angle)
        ok = maximum_pennation_angle > SIGNIFICANT_REAL
        shortest = jnp.where(ok, h / jnp.where(ok, sin_max, 1.0), 0.01 * optimal_fiber_length)
        return cls(
            h,
            pennation_angle_at_optimal,
            maximum_pennation_angle,
            shortest,
            shortest * jnp.cos(maximum_pennation_angle),
        )

    def angle(self, fiber_length):
        """``calcPennationAngle``: ``asin(h/l_M)``, ``α_max`` at or below the shortest fiber or
        where ``h/l_M ≥ sin α_max``; exactly 0 for ``α₀ ≤ ε``."""
        fiber_length = jnp.asarray(fiber_length)
        above = fiber_length > self.minimum_fiber_length
        sin_phi = self.height / jnp.where(above, fiber_length, 1.0)
        inside = above & (sin_phi < jnp.sin(self.maximum_pennation_angle))
        phi = jnp.where(inside, jnp.arcsin(jnp.where(inside, sin_phi, 0.0)), self.maximum_pennation_angle)
        return jnp.where(self.pennation_angle_at_optimal > EPS, phi, 0.0)

    def fiber_length(self, musculotendon_length, tendon_length):
        """``calcFiberLength``: ``√(h² + (l_MT − l_T)²)``, or the shortest fiber if the projection
        ``l_MT − l_T`` is below the shortest fiber's projection."""
        along = musculotendon_length - tendon_length
        ok = along >= self.minimum_fiber_length_along_tendon
        along = jnp.where(ok, along, self.minimum_fiber_length_along_tendon)
        # safe_sqrt: a parallel-fibered muscle (h = 0) at zero projection keeps a finite gradient
        return jnp.where(ok, safe_sqrt(self.height**2 + along**2), self.minimum_fiber_length)

    def d_angle_d_fiber_length(self, fiber_length):
        """``calc_DPennationAngle_DfiberLength``: ``−(h/l²)/√(1 − (h/l)²)``."""
        r = self.height / fiber_length
        return (-r / fiber_length) / jnp.sqrt(1.0 - r * r)


# ---- MuscleFirstOrderActivationDynamicModel -------------------------------------------------------


def clamp_activation(activation, minimum_activation):
    """``clampActivation``: ``a`` clipped to ``[minimum_activation, 1]``."""
    return jnp.clip(activation, minimum_activation, 1.0)


def activation_rate(excitation, activation, activation_time_constant, deactivation_time_constant, minimum_activation):
    """``MuscleFirstOrderActivationDynamicModel::calcDerivative``: ``ȧ = (u − a)/τ`` with
    ``a`` clamped to ``[a_min, 1]``, ``τ = τ_act (0.5 + 1.5a)`` while ``u > a`` and
    ``τ_deact/(0.5 + 1.5a)`` otherwise (a hard switch, as in OpenSim). ``excitation`` must be
    finite and in [0, 1], ``activation`` (the state) finite (`jaxbio.muscles._inputs`)."""
    a = clamp_activation(activation_state(activation, "activation_rate: activation"), minimum_activation)
    u = jnp.asarray(fraction(excitation, "activation_rate: excitation"))
    scale = 0.5 + 1.5 * a
    inv_tau = jnp.where(u > a, 1.0 / (activation_time_constant * scale), scale / deactivation_time_constant)
    return (u - a) * inv_tau


# ---- what both muscles share -------------------------------------------------------------------------

#: OpenSim properties every muscle here has (``Muscle``, the pennation and activation models); the
#: XML name is the field name.
COMMON_PROPERTIES = (
    "max_isometric_force",
    "optimal_fiber_length",
    "tendon_slack_length",
    "pennation_angle_at_optimal",
    "max_contraction_velocity",
    "maximum_pennation_angle",
    "activation_time_constant",
    "deactivation_time_constant",
    "minimum_activation",
)


class OpenSimMuscle(eqx.Module):
    """The fields and methods `Thelen2003Muscle` and `Millard2012EquilibriumMuscle` share: OpenSim's
    ``Muscle`` properties (all ``(m,)``), the fixed-width pennation model and first-order activation
    dynamics. Subclasses add their curves and ``equilibrium``."""

    max_isometric_force: Float[Array, " m"]
    optimal_fiber_length: Float[Array, " m"]
    tendon_slack_length: Float[Array, " m"]
    pennation_angle_at_optimal: Float[Array, " m"]
    max_contraction_velocity: Float[Array, " m"]
    maximum_pennation_angle: Float[Array, " m"]
    activation_time_constant: Float[Array, " m"]
    deactivation_time_constant: Float[Array, " m"]
    minimum_activation: Float[Array, " m"]

    OPENSIM_PROPERTIES: ClassVar[dict[str, str]] = {name: name for name in COMMON_PROPERTIES}

    def _set_parameters(self, owner: str, fields: dict, shape_only: dict | None = None) -> tuple:
        """Set ``fields`` as ``(m,)`` arrays of one dtype (``shape_only`` joins the broadcast and
        dtype but is not set) and check the shared ones; returns ``(shape, dtype)``."""
        arrays = as_parameters(owner, {**fields, **(shape_only or {})}, vector=True)
        for name in fields:
            setattr(self, name, arrays[name])
        require(
            self.max_isometric_force >= 0,
            f"{owner}: max_isometric_force must be ≥ 0, got {values_of(self.max_isometric_force)}",
        )
        check_positive(
            owner,
            optimal_fiber_length=self.optimal_fiber_length,
            tendon_slack_length=self.tendon_slack_length,
            max_contraction_velocity=self.max_contraction_velocity,
        )
        require(
            (self.pennation_angle_at_optimal >= 0)
            & (self.pennation_angle_at_optimal <= math.pi / 2 - SIGNIFICANT_REAL),
            f"{owner}: pennation_angle_at_optimal must be in [0, π/2), got "
            f"{values_of(self.pennation_angle_at_optimal)}",
        )
        require(
            (self.maximum_pennation_angle >= 0) & (self.maximum_pennation_angle <= math.pi / 2),
            f"{owner}: maximum_pennation_angle must be in [0, π/2], got {values_of(self.maximum_pennation_angle)}",
        )
        require(
            (self.activation_time_constant >= SIGNIFICANT_REAL) & (self.deactivation_time_constant >= SIGNIFICANT_REAL),
            f"{owner}: activation_time_constant and deactivation_time_constant must be > 0",
        )
        return self.max_isometric_force.shape, self.max_isometric_force.dtype

    @property
    def size(self) -> int:
        """Number of muscles ``m``."""
        return self.max_isometric_force.shape[0]

    @property
    def pennation(self) -> Pennation:
        """The ``MuscleFixedWidthPennationModel`` of each muscle."""
        return Pennation.of(self.optimal_fiber_length, self.pennation_angle_at_optimal, self.maximum_pennation_angle)

    def equilibrium(self, activation, musculotendon_length, musculotendon_velocity=0.0) -> MuscleEquilibrium:
        raise NotImplementedError

    def force(
        self,
        activation: Float[ArrayLike, " m"],
        musculotendon_length: Float[ArrayLike, " m"],
        musculotendon_velocity: Float[ArrayLike, " m"] = 0.0,
    ) -> Float[Array, " m"]:
        """Tendon force ``(m,)`` N at the state of ``equilibrium`` (``getTendonForce``)."""
        return self.equilibrium(activation, musculotendon_length, musculotendon_velocity).tendon_force

    def activation_rate(
        self, excitation: Float[ArrayLike, " m"], activation: Float[ArrayLike, " m"]
    ) -> Float[Array, " m"]:
        """``ȧ`` ``(m,)`` 1/s of OpenSim's first-order activation dynamics (`activation_rate`) from
        the excitation and activation ``(m,)``."""
        return activation_rate(
            excitation,
            activation,
            self.activation_time_constant,
            self.deactivation_time_constant,
            self.minimum_activation,
        )


# ---- results ----------------------------------------------------------------------------------------


class MuscleEquilibrium(eqx.Module):
    """A muscle state after OpenSim's ``Model::equilibrateMuscles`` (all fields ``(m,)``), the
    quantities OpenSim's getters report:

    - ``fiber_length``: m (``getFiberLength``), clamped at the muscle's shortest fiber.
    - ``pennation_angle``: rad (``getPennationAngle``).
    - ``tendon_length``: m (``getTendonLength``).
    - ``tendon_force``: N along the tendon, tension positive (``getTendonForce``).
    - ``active_force_length_multiplier``, ``passive_force_length_multiplier``,
      ``force_velocity_multiplier``: dimensionless (``getActiveForceLengthMultiplier``,
      ``getPassiveForceMultiplier``, ``getForceVelocityMultiplier``).
    - ``fiber_velocity``: m/s, lengthening positive (``getFiberVelocity``).
    - ``status``: int32, 0 converged; 1 the fiber hit its shortest length (OpenSim warns and
      keeps that length); 2 no convergence within OpenSim's iteration limit (OpenSim throws
      ``MuscleCannotEquilibrate``; the last iterate is returned). The force tolerance is
      OpenSim's ``10⁻⁸ F⁰``, raised to ``100 ε F⁰`` in float32.

    Derivatives (``jax.grad`` etc.) of every field are those of the equilibrium itself (implicit
    function theorem at the solution), not of the iteration.
    """

    fiber_length: Float[Array, " m"]
    pennation_angle: Float[Array, " m"]
    tendon_length: Float[Array, " m"]
    tendon_force: Float[Array, " m"]
    active_force_length_multiplier: Float[Array, " m"]
    passive_force_length_multiplier: Float[Array, " m"]
    force_velocity_multiplier: Float[Array, " m"]
    fiber_velocity: Float[Array, " m"]
    status: Int[Array, " m"]


# ---- the fiber–tendon equilibrium iteration ---------------------------------------------------------


def force_tolerance(relative: float, max_isometric_force):
    """OpenSim's force tolerance ``max(relative · F⁰, 10 ε^(7/8))`` (N), raised to ``100 ε F⁰``
    for the dtype at hand: in float32 OpenSim's 10⁻⁸ F⁰ is below the rounding of the forces."""
    eps = float(jnp.finfo(jnp.asarray(max_isometric_force).dtype).eps)
    return jnp.maximum(max(relative, 100.0 * eps) * max_isometric_force, SIGNIFICANT_REAL * 10)


class _Point(NamedTuple):
    lce: Array
    cos: Array
    sin: Array
    tl: Array
    lce_n: Array
    tl_n: Array
    fal: Array
    dfal: Array
    fpe: Array
    dfpe: Array
    fse: Array
    dfse: Array


def fiber_equilibrium(
    muscle, variant: str, activation, musculotendon_length, musculotendon_velocity, static: bool, max_iterations: int
):
    """Fiber length ``(m,)`` m and status ``(m,)`` of OpenSim's equilibrium iteration, per muscle
    (vmapped over the ``(m,)`` leaves of ``muscle``: a `Thelen2003Muscle`, ``variant="thelen"``, or
    the built curves of a `Millard2012EquilibriumMuscle`, ``variant="millard"``; both provide
    ``_multipliers_and_slopes``, ``_fiber_force_normalized``, ``_force_velocity_of``, ``pennation``,
    ``minimum_fiber_length`` and the scalar parameters).

    The iteration is OpenSim's, step for step (``Thelen2003Muscle::initMuscleState``,
    ``Millard2012EquilibriumMuscle::estimateMuscleFiberState``): start from a tendon 1 % past slack;
    Newton on the force error ``F_M cos α − F_T`` with backtracking (halving the step until the
    error drops, down to √ε); fiber length clamped at the shortest fiber; stop when
    ``|F_M cos α − F_T| < max(10⁻⁸ F⁰, 10 ε^(7/8))`` or after ``max_iterations``. Unless
    ``static`` (Millard's case), each iteration shares the path's lengthening speed between fiber and tendon in
    proportion to their stiffnesses (``l̇_T = K_M/(K_M + K_T) l̇_MT`` along the tendon, OpenSim's
    heuristic) and evaluates the force–velocity multiplier there, lagged by one iteration as in
    OpenSim.

    The loop runs on stopped gradients; the returned length carries the implicit-function
    derivative at the solution: of the static force balance, or, with velocity sharing, of the
    fixed point of force balance and velocity sharing in ``(l_M, ṽ_M)`` (the limit of OpenSim's
    lagged iteration).
    """

    def one(mus, a, ml, dml):
        live = (mus, a, ml, dml)
        frozen = jax.lax.stop_gradient(live)
        lce, dlce_n, status = _iterate(*frozen, variant, static, max_iterations)
        if static:
            # value lce, derivative −(∂r/∂θ)/(∂r/∂l_M) of the static residual r
            r, slope = _static_error(*live, variant, lce)
            slope = jax.lax.stop_gradient(slope)
            implicit = lce - (r - jax.lax.stop_gradient(r)) / jnp.where(slope != 0, slope, 1.0)
        else:
            # the fixed point G(l_M, ṽ) = 0 of force balance and velocity sharing: 2 × 2 implicit derivative
            z = jnp.stack([lce, dlce_n])
            g = _moving_system(*live, variant, z)
            jac = jax.lax.stop_gradient(jax.jacfwd(lambda y: _moving_system(*frozen, variant, y))(z))
            det = jac[0, 0] * jac[1, 1] - jac[0, 1] * jac[1, 0]
            dg = g - jax.lax.stop_gradient(g)
            implicit = lce - (jac[1, 1] * dg[0] - jac[0, 1] * dg[1]) / jnp.where(det != 0, det, 1.0)
        lce = jnp.where(
            status == CONVERGED, implicit, jnp.where(status == AT_MINIMUM_FIBER_LENGTH, mus.minimum_fiber_length, lce)
        )
        return lce, status

    return jax.vmap(one)(muscle, activation, musculotendon_length, musculotendon_velocity)


def _point(mus, ml, lce) -> _Point:
    pen = mus.pennation
    phi = pen.angle(lce)
    cos, sin = jnp.cos(phi), jnp.sin(phi)
    tl = ml - lce * cos
    lce_n = lce / mus.optimal_fiber_length
    tl_n = tl / mus.tendon_slack_length
    fal, dfal, fpe, dfpe, fse, dfse = mus._multipliers_and_slopes(lce_n, tl_n)
    return _Point(lce, cos, sin, tl, lce_n, tl_n, fal, dfal, fpe, dfpe, fse, dfse)


def _force(mus, a, p: _Point, fv, dlce_n):
    """``(F_M, F_M cos α − F_T)`` in N."""
    fiso = mus.max_isometric_force
    fm = fiso * mus._fiber_force_normalized(a, p.fal, fv, p.fpe, dlce_n)
    return fm, fm * p.cos - p.fse * fiso


def _partials(mus, variant, a, p: _Point, fv, fm):
    """``(∂F_MAT/∂l_M, ∂F_MAT/∂l_MAT, ∂F_T/∂l_T, ∂F_T/∂l_M)`` (N/m), as each muscle writes them."""
    fiso = mus.max_isometric_force
    h = mus.pennation.height
    lce = p.lce
    dfm = fiso * (a * fv * p.dfal + p.dfpe) / mus.optimal_fiber_length
    ratio = h / lce
    root = jnp.sqrt(1.0 - ratio * ratio)
    dphi = -ratio / lce / root
    if variant == "thelen":
        dcos = h * h / (lce * lce * lce * root)
        dfmat = dfm * p.cos + fm * dcos
        dfmat_at = dfmat * p.cos
    else:
        dfmat = dfm * p.cos + fm * (-p.sin * dphi)
        dfmat_at = dfmat / (p.cos - lce * p.sin * dphi)
    dft_dtl = p.dfse * fiso / mus.tendon_slack_length
    dft_dlce = dft_dtl * (lce * p.sin * dphi - p.cos)
    return dfmat, dfmat_at, dft_dtl, dft_dlce


def _velocity(mus, variant, a, dml, p: _Point, parts, fv, dlce_n, static: bool):
    """OpenSim's velocity sharing: ``(f_V, ṽ_M)`` at ``p`` (unchanged if ``static``)."""
    if static:
        return fv, dlce_n
    _, dfmat_at, dft_dtl, _ = parts
    taut = p.tl > mus.tendon_slack_length  # Millard's (never used: its solution is static) reads tlN > 1
    total = dfmat_at + dft_dtl
    share = (jnp.abs(total) > SIGNIFICANT_REAL) & taut
    dtl = jnp.where(share, dfmat_at / jnp.where(share, total, 1.0) * dml, dml)
    dlce = (dml - dtl) * p.cos
    dlce_n = dlce / (mus.max_contraction_velocity * mus.optimal_fiber_length)
    return mus._force_velocity_of(a, dlce_n), dlce_n


def _static_error(mus, a, ml, dml, variant, lce):
    """The static force error at ``lce`` (N; ``f_V = 1``, ``ṽ = 0``) and its slope
    ``∂F_MAT/∂l_M − ∂F_T/∂l_M`` (N/m)."""
    p = _point(mus, ml, lce)
    fv = jnp.ones_like(lce)
    dlce_n = jnp.zeros_like(lce)
    fm, err = _force(mus, a, p, fv, dlce_n)
    dfmat, _, _, dft_dlce = _partials(mus, variant, a, p, fv, fm)
    return err, dfmat - dft_dlce


def _moving_system(mus, a, ml, dml, variant, z):
    """``G(l_M, ṽ) = (F_M cos α − F_T, ṽ − sharing(l_M, ṽ))`` with ``f_V = f_V(ṽ)``, OpenSim's
    velocity sharing evaluated at ``(l_M, ṽ)``: zero at the converged iteration."""
    lce, v = z[0], z[1]
    p = _point(mus, ml, lce)
    fv = mus._force_velocity_of(a, v)
    fm, err = _force(mus, a, p, fv, v)
    parts = _partials(mus, variant, a, p, fv, fm)
    _, v_shared = _velocity(mus, variant, a, dml, p, parts, fv, v, static=False)
    return jnp.stack([err, v - v_shared])


def _iterate(mus, a, ml, dml, variant, static, max_iterations):
    fiso = mus.max_isometric_force
    dtype = ml.dtype
    tol = force_tolerance(1e-8, fiso)
    shortest = mus.minimum_fiber_length
    lce = mus.pennation.fiber_length(ml, 1.01 * mus.tendon_slack_length)
    if variant == "millard":
        lce = jnp.maximum(lce, shortest)
    p = _point(mus, ml, lce)
    fv = jnp.ones((), dtype)
    dlce_n = jnp.zeros((), dtype)
    # Thelen's first stiffness estimate sees F_M = 0 (its Fm is computed after it); Millard's
    # sees the static fiber force
    fm = jnp.zeros((), dtype) if variant == "thelen" else _force(mus, a, p, fv, dlce_n)[0]
    parts = _partials(mus, variant, a, p, fv, fm)
    fv, dlce_n = _velocity(mus, variant, a, dml, p, parts, fv, dlce_n, static)
    fm, ferr = _force(mus, a, p, fv, dlce_n)
    parts = _partials(mus, variant, a, p, fv, fm)

    def outer_cond(s):
        i, p, fm, ferr, parts, fv, dlce_n = s
        return (jnp.abs(ferr) > tol) & (i < max_iterations)

    def outer_body(s):
        i, p_prev, fm, ferr_prev, parts, fv, dlce_n = s
        dfmat, _, _, dft_dlce = parts
        dferr = dfmat - dft_dlce

        def inner_cond(t):
            first, done, h, p, fm, ferr = t
            return ~done & (first | (jnp.abs(ferr) >= jnp.abs(ferr_prev)))

        def inner_body(t):
            _, _, h, _, _, _ = t
            delta = jnp.where(dferr != 0, -h * ferr_prev / jnp.where(dferr != 0, dferr, 1.0), 0.0)
            big = jnp.abs(delta) > SIGNIFICANT_REAL
            lce = jnp.where(big, p_prev.lce + delta, p_prev.lce - jnp.sign(delta) * SQRT_EPS)
            h = jnp.where(big, h, 0.0)
            lce = jnp.maximum(lce, shortest)
            p = _point(mus, ml, lce)
            fm, ferr = _force(mus, a, p, fv, dlce_n)
            done = h <= SQRT_EPS
            return jnp.zeros((), bool), done, jnp.where(done, h, 0.5 * h), p, fm, ferr

        t0 = (jnp.ones((), bool), jnp.zeros((), bool), jnp.ones((), dtype), p_prev, fm, ferr_prev)
        _, _, _, p, fm, ferr = jax.lax.while_loop(inner_cond, inner_body, t0)
        parts = _partials(mus, variant, a, p, fv, fm)
        fv, dlce_n = _velocity(mus, variant, a, dml, p, parts, fv, dlce_n, static)
        return i + 1, p, fm, ferr, parts, fv, dlce_n

    state = (jnp.zeros((), jnp.int32), p, fm, ferr, parts, fv, dlce_n)
    _, p, _, ferr, _, _, dlce_n = jax.lax.while_loop(outer_cond, outer_body, state)
    converged = jnp.abs(ferr) < tol
    at_min = ~converged & (p.lce <= shortest)
    status = jnp.where(converged, CONVERGED, jnp.where(at_min, AT_MINIMUM_FIBER_LENGTH, NOT_CONVERGED))
    return p.lce, dlce_n, status.astype(jnp.int32)


def broadcast_inputs(muscle, musculotendon_length, musculotendon_velocity, activation=None) -> tuple:
    """``(activation,) musculotendon_length, musculotendon_velocity`` checked and broadcast to the
    muscle's ``(m,)`` shape and dtype (`jaxbio.muscles._inputs.muscle_inputs`: activation in
    [0, 1], length ≥ 0, all finite; ``ValueError`` naming the argument when concrete, NaN under
    jit)."""
    return muscle_inputs(
        type(muscle).__name__, muscle.max_isometric_force, musculotendon_length, musculotendon_velocity, activation
    )
