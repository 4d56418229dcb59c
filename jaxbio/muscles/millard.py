"""OpenSim's ``Millard2012EquilibriumMuscle`` and its four curves, built as OpenSim builds them.

Each curve is an Equinox module whose fields are OpenSim's XML properties (scalars or ``(m,)``;
defaults as OpenSim's) and whose call evaluates the same segmented quintic Bézier curve that
``SmoothSegmentedFunctionFactory`` builds from them (``OpenSim/Common/SmoothSegmentedFunctionFactory.cpp``,
read, not copied; the evaluation is in `jaxbio.muscles._bezier`). The control points are computed
from the parameters on every call, so derivatives with respect to the parameters flow.

- `ActiveForceLengthCurve`: five corners through ``(l̃_min, y_min)`` → shallow ascending limb
  → plateau at ``(1, 1)`` → descending limb → ``(l̃_max, y_min)``; constant ``y_min`` outside.
- `ForceVelocityCurve` (and `ForceVelocityInverseCurve`, the same points with x and y swapped):
  four corners through ``(−1, 0)``, ``(−0.9, ·)``, ``(0, 1)``, ``(0.9, ·)``, ``(1, f_ecc)``;
  linear outside ``[−1, 1]`` with the slopes at ``v_max``.
- `FiberForceLengthCurve`: two corners from ``(1 + ε₀, 0)`` to ``(1 + ε₁, 1)``; 0 below, linear above.
- `TendonForceLengthCurve`: two corners from ``(1, 0)`` to the end of the toe region; linear above.

`Millard2012EquilibriumMuscle` adds ``fiber_damping``, the fixed-width pennation model,
``ignore_tendon_compliance`` and OpenSim's parameter adjustments (``extendFinalizeFromProperties``):
the damped model (``fiber_damping ≥ 0.001``) and the rigid tendon set the active force–length
minimum and the force–velocity slopes at ``v_max`` to 0; the undamped elastic model raises them
to at least 0.1 and half the near-``v_max`` slopes and needs ``minimum_activation ≥ 0.01``.

References
----------
- M. Millard, T. Uchida, A. Seth, S. L. Delp (2013), Flexing computational muscle: modeling and
  simulation of musculotendon dynamics, J. Biomech. Eng. 135, 021005.
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import concrete
from jaxbio._xp import xnp
from jaxbio.muscles._bezier import Curve, corner_control_points, corner_is_c_shaped, scale_curviness, stack_curves
from jaxbio.muscles._inputs import poisoned
from jaxbio.muscles._opensim_common import (
    NOT_CONVERGED,
    SIGNIFICANT_REAL,
    SQRT_EPS,
    MuscleEquilibrium,
    OpenSimMuscle,
    Pennation,
    as_parameters,
    as_rows,
    broadcast_inputs,
    clamp_activation,
    fiber_equilibrium,
    flag_values,
    force_tolerance,
    from_opensim_properties,
    require,
    signature_default as _signature_default,
    values_of,
)

__all__ = [
    "ActiveForceLengthCurve",
    "ForceVelocityCurve",
    "ForceVelocityInverseCurve",
    "FiberForceLengthCurve",
    "TendonForceLengthCurve",
    "Millard2012EquilibriumMuscle",
]


# ---- curves --------------------------------------------------------------------------------------


def _chain(points, curviness):
    """Control points ``(…, S, 6)`` of the corners joining consecutive ``(x, y, dy/dx)`` points,
    one (scaled) curviness per corner; all corners in one vectorised call."""
    # one dtype by JAX's promotion over every number (a Python float is weak: float32 parameters
    # keep the corners float32), which numpy alone would make float64
    dtype = jnp.result_type(*(v for p in points for v in p), *curviness)

    def stacked(values):
        values = xnp.broadcast_arrays(*(xnp.asarray(v, dtype) for v in values))
        return xnp.stack(values, axis=-1)

    x, y, d = (stacked([p[i] for p in points]) for i in range(3))
    c = stacked(curviness)
    return corner_control_points(x[..., :-1], y[..., :-1], d[..., :-1], x[..., 1:], y[..., 1:], d[..., 1:], c)


def _check_corners(owner: str, points) -> None:
    """OpenSim's 'C-shaped corner' check on concrete points."""
    values = [[concrete(v) for v in p] for p in points]
    if any(v is None for p in values for v in p):
        return
    for i, (p0, p1) in enumerate(zip(values[:-1], values[1:])):
        if not np.all(corner_is_c_shaped(*p0, *p1)):
            raise ValueError(
                f"{owner}: these parameters make Bézier corner {i} S-shaped, which OpenSim "
                "refuses (the tangents at its ends must meet between them)"
            )


class _SegmentedCurve(eqx.Module):
    """An OpenSim ``SmoothSegmentedFunction`` built from the module's fields (see `segments`)."""

    #: the fields, named as OpenSim's XML properties, in constructor order.
    OPENSIM_PROPERTIES: ClassVar[tuple[str, ...]] = ()

    def segments(self) -> Curve:
        """The built curve: control points ``(..., S, 6)`` of its ``S`` Bézier segments, domain,
        end values and end slopes (`jaxbio.muscles._bezier.Curve`)."""
        raise NotImplementedError

    def _points(self):
        raise NotImplementedError

    def value_and_derivative(self, x: Float[ArrayLike, ...]) -> tuple[Float[Array, ...], Float[Array, ...]]:
        """``(y, dy/dx)`` ``(...)`` (OpenSim's ``calcValue``, ``calcDerivative(x, 1)``); ``x``
        broadcasts against the parameters."""
        return _curve_value_and_derivative(self, x)

    def __call__(self, x: Float[ArrayLike, ...]) -> Float[Array, ...]:
        """The curve's value at ``x`` ``(...)`` (``calcValue``)."""
        return self.value_and_derivative(x)[0]

    def derivative(self, x: Float[ArrayLike, ...]) -> Float[Array, ...]:
        """``dy/dx`` at ``x`` (``calcDerivative(x, 1)``); higher orders by `jax.grad`."""
        return self.value_and_derivative(x)[1]

    @classmethod
    def from_opensim(cls, properties):
        """From OpenSim XML property names: one mapping or a sequence of mappings (one per muscle)."""
        return from_opensim_properties(cls, properties, {n: n for n in cls.OPENSIM_PROPERTIES})

    def _set(self, owner: str, fields: dict) -> None:
        for name, value in as_parameters(owner, fields, vector=False).items():
            setattr(self, name, value)


@eqx.filter_jit
def _curve_value_and_derivative(curve: _SegmentedCurve, x):
    """Jitted so that eager calls compile once per shape (not op by op)."""
    return curve.segments().value_and_derivative(x)


class ActiveForceLengthCurve(_SegmentedCurve):
    """OpenSim's ``ActiveForceLengthCurve``: ``f_L(l̃)`` of the normalised fiber length.

    Fields (XML name = field name; OpenSim's default):

    - ``min_norm_active_fiber_length`` (0.4441): where the ascending limb reaches ``minimum_value``.
    - ``transition_norm_fiber_length`` (0.73): end of the steep ascending limb.
    - ``max_norm_active_fiber_length`` (1.8123): where the descending limb reaches ``minimum_value``.
    - ``shallow_ascending_slope`` (0.8616): slope of the shallow ascending limb.
    - ``minimum_value`` (0.1): the curve's floor (a Millard muscle with damping or a rigid tendon
      sets it to 0).

    The plateau is at ``l̃ = 1`` with width ``0.05``, curviness 1 (``SmoothSegmentedFunctionFactory::
    createFiberActiveForceLengthCurve``).
    """

    min_norm_active_fiber_length: Float[Array, "*m"]
    transition_norm_fiber_length: Float[Array, "*m"]
    max_norm_active_fiber_length: Float[Array, "*m"]
    shallow_ascending_slope: Float[Array, "*m"]
    minimum_value: Float[Array, "*m"]

    OPENSIM_PROPERTIES: ClassVar[tuple[str, ...]] = (
        "min_norm_active_fiber_length",
        "transition_norm_fiber_length",
        "max_norm_active_fiber_length",
        "shallow_ascending_slope",
        "minimum_value",
    )

    def __init__(
        self,
        min_norm_active_fiber_length=0.47 - 0.0259,
        transition_norm_fiber_length=0.73,
        max_norm_active_fiber_length=1.8123,
        shallow_ascending_slope=0.8616,
        minimum_value=0.1,
    ):
        own = "ActiveForceLengthCurve"
        self._set(
            own,
            dict(
                min_norm_active_fiber_length=min_norm_active_fiber_length,
                transition_norm_fiber_length=transition_norm_fiber_length,
                max_norm_active_fiber_length=max_norm_active_fiber_length,
                shallow_ascending_slope=shallow_ascending_slope,
                minimum_value=minimum_value,
            ),
        )
        x0, x1, x3 = (
            self.min_norm_active_fiber_length,
            self.transition_norm_fiber_length,
            self.max_norm_active_fiber_length,
        )
        eps = SQRT_EPS
        require(
            (x0 >= 0) & (x1 > x0 + eps) & (1.0 > x1 + eps) & (x3 > 1.0 + eps),
            f"{own}: need 0 ≤ min_norm_active_fiber_length < transition_norm_fiber_length < 1 < "
            f"max_norm_active_fiber_length, got {values_of(x0)}, {values_of(x1)}, {values_of(x3)}",
        )
        require(self.minimum_value >= 0, f"{own}: minimum_value must be ≥ 0, got {values_of(self.minimum_value)}")
        upper = (1.0 - self.minimum_value) / (1.0 - x1)
        require(
            (self.shallow_ascending_slope >= 0) & (self.shallow_ascending_slope < upper),
            f"{own}: shallow_ascending_slope must be in [0, (1 − minimum_value)/(1 − "
            f"transition_norm_fiber_length)), got {values_of(self.shallow_ascending_slope)}",
        )
        _check_corners(own, self._points())

    def _points(self):
        x0, x1, x3 = (
            self.min_norm_active_fiber_length,
            self.transition_norm_fiber_length,
            self.max_norm_active_fiber_length,
        )
        x2 = 1.0
        slope, ylow = self.shallow_ascending_slope, self.minimum_value
        dx = 0.05 * x2
        xs = x2 - dx
        y1 = 1.0 - slope * (xs - x1)
        return [
            (x0, ylow, 0.0),
            (x0 + 0.5 * (x1 - x0), 0.5 * y1, 1.25 * y1 / (x1 - x0)),
            (x1 + 0.5 * (xs - x1), y1 + 0.5 * (1.0 - y1), slope),
            (x2, 1.0, 0.0),
            ((x2 + dx) + 0.5 * (x3 - (x2 + dx)), 0.5, -1.0 / ((x3 - dx) - (x2 + dx))),
            (x3, ylow, 0.0),
        ]

    def segments(self):
        c = scale_curviness(1.0)
        px, py = _chain(self._points(), [c] * 5)
        x0, x3, ylow = self.min_norm_active_fiber_length, self.max_norm_active_fiber_length, self.minimum_value
        zero = xnp.zeros_like(ylow)
        return Curve.build(px, py, x0, x3, ylow, ylow, zero, zero)

    @property
    def minimum_active_fiber_length(self):
        """``getMinActiveFiberLength``: ``min_norm_active_fiber_length``."""
        return self.min_norm_active_fiber_length


class _ForceVelocityParameters(_SegmentedCurve):
    """The eight parameters shared by `ForceVelocityCurve` and `ForceVelocityInverseCurve`."""

    concentric_slope_at_vmax: Float[Array, "*m"]
    concentric_slope_near_vmax: Float[Array, "*m"]
    isometric_slope: Float[Array, "*m"]
    eccentric_slope_at_vmax: Float[Array, "*m"]
    eccentric_slope_near_vmax: Float[Array, "*m"]
    max_eccentric_velocity_force_multiplier: Float[Array, "*m"]
    concentric_curviness: Float[Array, "*m"]
    eccentric_curviness: Float[Array, "*m"]

    OPENSIM_PROPERTIES: ClassVar[tuple[str, ...]] = (
        "concentric_slope_at_vmax",
        "concentric_slope_near_vmax",
        "isometric_slope",
        "eccentric_slope_at_vmax",
        "eccentric_slope_near_vmax",
        "max_eccentric_velocity_force_multiplier",
        "concentric_curviness",
        "eccentric_curviness",
    )

    #: whether the curve is the inverse (its slopes at v_max must then be > 0), and OpenSim's default
    #: for both slopes at v_max
    _INVERSE: ClassVar[bool] = False
    _SLOPE_AT_VMAX: ClassVar[float] = 0.0

    def __init__(
        self,
        concentric_slope_at_vmax=None,
        concentric_slope_near_vmax=0.25,
        isometric_slope=5.0,
        eccentric_slope_at_vmax=None,
        eccentric_slope_near_vmax=0.15,
        max_eccentric_velocity_force_multiplier=1.4,
        concentric_curviness=0.6,
        eccentric_curviness=0.9,
    ):
        own, inverse, at_vmax = type(self).__name__, self._INVERSE, self._SLOPE_AT_VMAX
        self._set(
            own,
            dict(
                concentric_slope_at_vmax=at_vmax if concentric_slope_at_vmax is None else concentric_slope_at_vmax,
                concentric_slope_near_vmax=concentric_slope_near_vmax,
                isometric_slope=isometric_slope,
                eccentric_slope_at_vmax=at_vmax if eccentric_slope_at_vmax is None else eccentric_slope_at_vmax,
                eccentric_slope_near_vmax=eccentric_slope_near_vmax,
                max_eccentric_velocity_force_multiplier=max_eccentric_velocity_force_multiplier,
                concentric_curviness=concentric_curviness,
                eccentric_curviness=eccentric_curviness,
            ),
        )
        fmax = self.max_eccentric_velocity_force_multiplier
        con, con_near = self.concentric_slope_at_vmax, self.concentric_slope_near_vmax
        ecc, ecc_near = self.eccentric_slope_at_vmax, self.eccentric_slope_near_vmax
        floor = SIGNIFICANT_REAL if inverse else 0.0
        require(fmax > 1, f"{own}: max_eccentric_velocity_force_multiplier must be > 1, got {values_of(fmax)}")
        require(
            ((con > floor) if inverse else (con >= 0)) & (con < 1),
            f"{own}: concentric_slope_at_vmax must be in {'(0' if inverse else '[0'}, 1), got {values_of(con)}",
        )
        require(
            (con_near > con) & ((con_near < 1) if inverse else (con_near <= 1)),
            f"{own}: concentric_slope_near_vmax must be in (concentric_slope_at_vmax, 1], got {values_of(con_near)}",
        )
        require(self.isometric_slope > 1, f"{own}: isometric_slope must be > 1, got {values_of(self.isometric_slope)}")
        require(
            ((ecc > floor) if inverse else (ecc >= 0)) & (ecc < fmax - 1),
            f"{own}: eccentric_slope_at_vmax must be in [0, max_eccentric_velocity_force_multiplier − 1), "
            f"got {values_of(ecc)}",
        )
        require(
            (ecc_near >= ecc) & (ecc_near < fmax - 1),
            f"{own}: eccentric_slope_near_vmax must be in [eccentric_slope_at_vmax, "
            f"max_eccentric_velocity_force_multiplier − 1), got {values_of(ecc_near)}",
        )
        for name in ("concentric_curviness", "eccentric_curviness"):
            c = getattr(self, name)
            require((c >= 0) & (c <= 1), f"{own}: {name} must be in [0, 1], got {values_of(c)}")
        _check_corners(own, self._points())

    def _points(self):
        con, con_near = self.concentric_slope_at_vmax, self.concentric_slope_near_vmax
        ecc, ecc_near = self.eccentric_slope_at_vmax, self.eccentric_slope_near_vmax
        fmax = self.max_eccentric_velocity_force_multiplier
        y_near_c = 0.5 * con_near * 0.1 + 0.5 * con * 0.1
        y_near_e = fmax + 0.5 * ecc_near * (-0.1) + 0.5 * ecc * (-0.1)
        return [
            (-1.0, 0.0, con),
            (-0.9, y_near_c, con_near),
            (0.0, 1.0, self.isometric_slope),
            (0.9, y_near_e, ecc_near),
            (1.0, fmax, ecc),
        ]

    @classmethod
    def _opensim_default(cls, name: str):
        return cls._SLOPE_AT_VMAX if name.endswith("_slope_at_vmax") else _signature_default(cls, name)

    def _velocity_segments(self):
        c_con = scale_curviness(self.concentric_curviness)
        c_ecc = scale_curviness(self.eccentric_curviness)
        return _chain(self._points(), [c_con, c_con, c_ecc, c_ecc])


class ForceVelocityCurve(_ForceVelocityParameters):
    """OpenSim's ``ForceVelocityCurve``: ``f_V(ṽ)`` of the normalised fiber velocity
    ``ṽ = l̇_M/(v_max l_opt)`` (lengthening positive; ``ṽ = −1`` at the maximal shortening velocity).

    Fields (XML name = field name; OpenSim's default): ``concentric_slope_at_vmax`` (0),
    ``concentric_slope_near_vmax`` (0.25), ``isometric_slope`` (5), ``eccentric_slope_at_vmax`` (0),
    ``eccentric_slope_near_vmax`` (0.15), ``max_eccentric_velocity_force_multiplier`` (1.4),
    ``concentric_curviness`` (0.6), ``eccentric_curviness`` (0.9). Linear outside ``[−1, 1]``
    with the slopes at ``v_max``.
    """

    def segments(self):
        px, py = self._velocity_segments()
        fmax = self.max_eccentric_velocity_force_multiplier
        lo, hi = -xnp.ones_like(fmax), xnp.ones_like(fmax)
        return Curve.build(
            px, py, lo, hi, xnp.zeros_like(fmax), fmax, self.concentric_slope_at_vmax, self.eccentric_slope_at_vmax
        )


class ForceVelocityInverseCurve(_ForceVelocityParameters):
    """OpenSim's ``ForceVelocityInverseCurve``: ``ṽ(f_V)``, the `ForceVelocityCurve` of the same
    parameters with x and y swapped (so the slopes at ``v_max`` must be > 0). Defaults as
    OpenSim's: the `ForceVelocityCurve` defaults except ``concentric_slope_at_vmax`` and
    ``eccentric_slope_at_vmax`` = 0.1. Linear outside ``[0, f_ecc]`` with slopes
    ``1/concentric_slope_at_vmax`` and ``1/eccentric_slope_at_vmax``.
    """

    _INVERSE: ClassVar[bool] = True
    _SLOPE_AT_VMAX: ClassVar[float] = 0.1

    def segments(self):
        px, py = self._velocity_segments()
        fmax = self.max_eccentric_velocity_force_multiplier
        return Curve.build(
            py,
            px,
            xnp.zeros_like(fmax),
            fmax,
            -xnp.ones_like(fmax),
            xnp.ones_like(fmax),
            1.0 / self.concentric_slope_at_vmax,
            1.0 / self.eccentric_slope_at_vmax,
        )


def _optional(value, like):
    """An optional OpenSim property: NaN (unset) when None."""
    return xnp.full_like(xnp.asarray(like, float), np.nan) if value is None else value


def _all_or_none_set(owner: str, names: tuple[str, ...], values) -> None:
    arrays = [concrete(v) for v in values]
    if any(a is None for a in arrays):
        return
    unset = np.broadcast_arrays(*[np.isnan(a) for a in arrays])
    if not np.all(np.all(unset, axis=0) | ~np.any(unset, axis=0)):
        raise ValueError(f"{owner}: the optional properties {', '.join(names)} must all be set or all be unset")


class FiberForceLengthCurve(_SegmentedCurve):
    """OpenSim's ``FiberForceLengthCurve``: the passive fiber force ``f_PE(l̃)``.

    Fields (XML name = field name; OpenSim's default):

    - ``strain_at_zero_force`` (0): ``ε₀``, the curve starts at ``l̃ = 1 + ε₀``.
    - ``strain_at_one_norm_force`` (0.7): ``ε₁``, ``f_PE(1 + ε₁) = 1``.
    - optional ``stiffness_at_low_force``, ``stiffness_at_one_norm_force``, ``curviness``:
      all given or all unset (NaN); unset, OpenSim uses ``0.2``, ``2/(ε₁ − ε₀)`` and ``0.75``
      (the ``*_in_use`` properties), which then follow the strains.
    """

    strain_at_zero_force: Float[Array, "*m"]
    strain_at_one_norm_force: Float[Array, "*m"]
    stiffness_at_low_force: Float[Array, "*m"]
    stiffness_at_one_norm_force: Float[Array, "*m"]
    curviness: Float[Array, "*m"]

    OPENSIM_PROPERTIES: ClassVar[tuple[str, ...]] = (
        "strain_at_zero_force",
        "strain_at_one_norm_force",
        "stiffness_at_low_force",
        "stiffness_at_one_norm_force",
        "curviness",
    )

    def __init__(
        self,
        strain_at_zero_force=0.0,
        strain_at_one_norm_force=0.7,
        stiffness_at_low_force=None,
        stiffness_at_one_norm_force=None,
        curviness=None,
    ):
        own = "FiberForceLengthCurve"
        self._set(
            own,
            dict(
                strain_at_zero_force=strain_at_zero_force,
                strain_at_one_norm_force=strain_at_one_norm_force,
                stiffness_at_low_force=_optional(stiffness_at_low_force, strain_at_zero_force),
                stiffness_at_one_norm_force=_optional(stiffness_at_one_norm_force, strain_at_zero_force),
                curviness=_optional(curviness, strain_at_zero_force),
            ),
        )
        _all_or_none_set(
            own,
            self.OPENSIM_PROPERTIES[2:],
            (self.stiffness_at_low_force, self.stiffness_at_one_norm_force, self.curviness),
        )
        e0, e1 = self.strain_at_zero_force, self.strain_at_one_norm_force
        require(e1 > e0, f"{own}: strain_at_one_norm_force must be > strain_at_zero_force, got {values_of(e1)}")
        k_iso, k_low, c = (
            self.stiffness_at_one_norm_force_in_use,
            self.stiffness_at_low_force_in_use,
            self.curviness_in_use,
        )
        require(
            k_iso > 1.0 / (e1 - e0), f"{own}: stiffness_at_one_norm_force must be > 1/(ε₁ − ε₀), got {values_of(k_iso)}"
        )
        require(
            (k_low > 0) & (k_low < 1.0 / (e1 - e0)),
            f"{own}: stiffness_at_low_force must be in (0, 1/(ε₁ − ε₀)), got {values_of(k_low)}",
        )
        require((c >= 0) & (c <= 1), f"{own}: curviness must be in [0, 1], got {values_of(c)}")
        _check_corners(own, self._points())

    @property
    def stiffness_at_one_norm_force_in_use(self):
        """``getStiffnessAtOneNormForceInUse``: the property, or ``2/(ε₁ − ε₀)`` if unset."""
        v = self.stiffness_at_one_norm_force
        return xnp.where(xnp.isnan(v), 2.0 / (self.strain_at_one_norm_force - self.strain_at_zero_force), v)

    @property
    def stiffness_at_low_force_in_use(self):
        """``getStiffnessAtLowForceInUse``: the property, or 0.2 if unset."""
        v = self.stiffness_at_low_force
        return xnp.where(xnp.isnan(v), 0.2, v)

    @property
    def curviness_in_use(self):
        """``getCurvinessInUse``: the property, or 0.75 if unset."""
        v = self.curviness
        return xnp.where(xnp.isnan(v), 0.75, v)

    def _points(self):
        k_iso, k_low = self.stiffness_at_one_norm_force_in_use, self.stiffness_at_low_force_in_use
        x_zero = 1.0 + self.strain_at_zero_force
        x_iso = 1.0 + self.strain_at_one_norm_force
        delta = xnp.minimum(0.1 / k_iso, 0.1 * (x_iso - x_zero))
        x_low = x_zero + delta
        x_foot = x_zero + 0.5 * (x_low - x_zero)
        y_low = k_low * (x_low - x_foot)
        return [(x_zero, 0.0, 0.0), (x_low, y_low, k_low), (x_iso, 1.0, k_iso)]

    def segments(self):
        c = scale_curviness(self.curviness_in_use)
        px, py = _chain(self._points(), [c, c])
        x_zero = 1.0 + self.strain_at_zero_force
        x_iso = 1.0 + self.strain_at_one_norm_force
        return Curve.build(
            px,
            py,
            x_zero,
            x_iso,
            xnp.zeros_like(x_zero),
            xnp.ones_like(x_zero),
            xnp.zeros_like(x_zero),
            self.stiffness_at_one_norm_force_in_use,
        )


class TendonForceLengthCurve(_SegmentedCurve):
    """OpenSim's ``TendonForceLengthCurve``: ``f_T(l̃_T)`` of the normalised tendon length.

    Fields (XML name = field name; OpenSim's default):

    - ``strain_at_one_norm_force`` (0.049): ``ε₀``, ``f_T(1 + ε₀) = 1``.
    - optional ``stiffness_at_one_norm_force``, ``norm_force_at_toe_end``, ``curviness``: all given
      or all unset (NaN); unset, OpenSim uses ``1.375/ε₀``, ``2/3`` and ``0.5``.

    Zero below slack length, two Bézier corners through the toe region, linear (slope
    ``stiffness_at_one_norm_force``) past the toe's end.
    """

    strain_at_one_norm_force: Float[Array, "*m"]
    stiffness_at_one_norm_force: Float[Array, "*m"]
    norm_force_at_toe_end: Float[Array, "*m"]
    curviness: Float[Array, "*m"]

    OPENSIM_PROPERTIES: ClassVar[tuple[str, ...]] = (
        "strain_at_one_norm_force",
        "stiffness_at_one_norm_force",
        "norm_force_at_toe_end",
        "curviness",
    )

    def __init__(
        self,
        strain_at_one_norm_force=0.049,
        stiffness_at_one_norm_force=None,
        norm_force_at_toe_end=None,
        curviness=None,
    ):
        own = "TendonForceLengthCurve"
        like = strain_at_one_norm_force
        self._set(
            own,
            dict(
                strain_at_one_norm_force=strain_at_one_norm_force,
                stiffness_at_one_norm_force=_optional(stiffness_at_one_norm_force, like),
                norm_force_at_toe_end=_optional(norm_force_at_toe_end, like),
                curviness=_optional(curviness, like),
            ),
        )
        _all_or_none_set(
            own,
            self.OPENSIM_PROPERTIES[1:],
            (self.stiffness_at_one_norm_force, self.norm_force_at_toe_end, self.curviness),
        )
        e0, k, f_toe, c = (
            self.strain_at_one_norm_force,
            self.stiffness_at_one_norm_force_in_use,
            self.norm_force_at_toe_end_in_use,
            self.curviness_in_use,
        )
        require(e0 > 0, f"{own}: strain_at_one_norm_force must be > 0, got {values_of(e0)}")
        require((f_toe > 0) & (f_toe < 1), f"{own}: norm_force_at_toe_end must be in (0, 1), got {values_of(f_toe)}")
        require(
            k > 1.0 / e0, f"{own}: stiffness_at_one_norm_force must be > 1/strain_at_one_norm_force, got {values_of(k)}"
        )
        require((c >= 0) & (c <= 1), f"{own}: curviness must be in [0, 1], got {values_of(c)}")
        _check_corners(own, self._points())

    @property
    def stiffness_at_one_norm_force_in_use(self):
        """``getStiffnessAtOneNormForceInUse``: the property, or ``1.375/ε₀`` if unset."""
        v = self.stiffness_at_one_norm_force
        return xnp.where(xnp.isnan(v), 1.375 / self.strain_at_one_norm_force, v)

    @property
    def norm_force_at_toe_end_in_use(self):
        """``getNormForceAtToeEndInUse``: the property, or 2/3 if unset."""
        v = self.norm_force_at_toe_end
        return xnp.where(xnp.isnan(v), 2.0 / 3.0, v)

    @property
    def curviness_in_use(self):
        """``getCurvinessInUse``: the property, or 0.5 if unset."""
        v = self.curviness
        return xnp.where(xnp.isnan(v), 0.5, v)

    def _toe_end(self):
        k, y_toe = self.stiffness_at_one_norm_force_in_use, self.norm_force_at_toe_end_in_use
        return (y_toe - 1.0) / k + 1.0 + self.strain_at_one_norm_force, y_toe

    def _points(self):
        k = self.stiffness_at_one_norm_force_in_use
        x_iso = 1.0 + self.strain_at_one_norm_force
        x_toe, y_toe = self._toe_end()
        x_foot = 1.0 + (x_toe - 1.0) / 10.0
        y_mid = 0.5 * y_toe
        x_mid = (y_mid - 1.0) / k + x_iso
        slope_mid = y_mid / (x_mid - x_foot)
        x_ctrl = x_foot + 0.5 * (x_mid - x_foot)
        y_ctrl = slope_mid * (x_ctrl - x_foot)
        return [(1.0, 0.0, 0.0), (x_ctrl, y_ctrl, slope_mid), (x_toe, y_toe, k)]

    def segments(self):
        c = scale_curviness(self.curviness_in_use)
        px, py = _chain(self._points(), [c, c])
        x_toe, y_toe = self._toe_end()
        return Curve.build(
            px,
            py,
            xnp.ones_like(x_toe),
            x_toe,
            xnp.zeros_like(x_toe),
            y_toe,
            xnp.zeros_like(x_toe),
            self.stiffness_at_one_norm_force_in_use,
        )


# ---- the muscle -------------------------------------------------------------------------------------


def _broadcast_curve(curve, shape, dtype):
    return jax.tree_util.tree_map(lambda x: xnp.broadcast_to(xnp.asarray(x, dtype), shape), curve)


class Millard2012EquilibriumMuscle(OpenSimMuscle):
    """``m`` OpenSim ``Millard2012EquilibriumMuscle`` s (fields ``(m,)``, broadcast at construction).

    Fields, with OpenSim's XML property name and default:

    - ``max_isometric_force`` (1000) N, ``optimal_fiber_length`` (0.1) m, ``tendon_slack_length``
      (0.2) m, ``pennation_angle_at_optimal`` (0) rad, ``max_contraction_velocity`` (10) l_opt/s.
    - ``fiber_damping`` (0.1): ``β``, damping force ``β F⁰ ṽ`` parallel to the fiber; below 0.001
      OpenSim (and this module) sets it to 0 and uses the undamped ("classic Hill") model.
    - ``minimum_activation`` (0.01), ``maximum_pennation_angle`` (acos 0.1) rad,
      ``activation_time_constant`` (0.010) s, ``deactivation_time_constant`` (0.040) s.
    - ``active_force_length_curve`` (``ActiveForceLengthCurve``), ``force_velocity_curve``
      (``ForceVelocityCurve``), ``fiber_force_length_curve`` (``FiberForceLengthCurve``),
      ``tendon_force_length_curve`` (``TendonForceLengthCurve``): curve modules, their fields
      ``(m,)``; stored *after* OpenSim's adjustments (see the module docstring).
    - ``ignore_tendon_compliance`` (static, False): rigid tendon.

    Fiber force ``F⁰ (a f_L f_V + f_PE + β ṽ)``, along the tendon ``× cos α``; the shortest fiber is
    ``max(min_norm_active_fiber_length · l_opt, pennation model's shortest fiber)``.

    Example::

        >>> from jaxbio.muscles.millard import Millard2012EquilibriumMuscle
        >>> m = Millard2012EquilibriumMuscle(max_isometric_force=[1000.0, 500.0], pennation_angle_at_optimal=0.2)
        >>> m.equilibrium(0.5, [0.3, 0.31]).tendon_force.shape
        (2,)
    """

    fiber_damping: Float[Array, " m"]
    active_force_length_curve: ActiveForceLengthCurve
    force_velocity_curve: ForceVelocityCurve
    fiber_force_length_curve: FiberForceLengthCurve
    tendon_force_length_curve: TendonForceLengthCurve
    ignore_tendon_compliance: bool = eqx.field(static=True)

    #: OpenSim XML property name → field (the four curves are nested objects of their own properties).
    OPENSIM_PROPERTIES: ClassVar[dict[str, str]] = {
        **OpenSimMuscle.OPENSIM_PROPERTIES,
        "fiber_damping": "fiber_damping",
    }
    OPENSIM_CURVES: ClassVar[dict[str, type]] = {
        "ActiveForceLengthCurve": ActiveForceLengthCurve,
        "ForceVelocityCurve": ForceVelocityCurve,
        "FiberForceLengthCurve": FiberForceLengthCurve,
        "TendonForceLengthCurve": TendonForceLengthCurve,
    }

    def __init__(
        self,
        max_isometric_force=1000.0,
        optimal_fiber_length=0.1,
        tendon_slack_length=0.2,
        pennation_angle_at_optimal=0.0,
        max_contraction_velocity=10.0,
        fiber_damping=0.1,
        minimum_activation=0.01,
        maximum_pennation_angle=math.acos(0.1),
        activation_time_constant=0.010,
        deactivation_time_constant=0.040,
        active_force_length_curve: ActiveForceLengthCurve | None = None,
        force_velocity_curve: ForceVelocityCurve | None = None,
        fiber_force_length_curve: FiberForceLengthCurve | None = None,
        tendon_force_length_curve: TendonForceLengthCurve | None = None,
        ignore_tendon_compliance: bool = False,
    ):
        own = "Millard2012EquilibriumMuscle"
        self.ignore_tendon_compliance = bool(ignore_tendon_compliance)
        afl = ActiveForceLengthCurve() if active_force_length_curve is None else active_force_length_curve
        fvc = ForceVelocityCurve() if force_velocity_curve is None else force_velocity_curve
        fpe = FiberForceLengthCurve() if fiber_force_length_curve is None else fiber_force_length_curve
        fse = TendonForceLengthCurve() if tendon_force_length_curve is None else tendon_force_length_curve
        scalars = dict(
            max_isometric_force=max_isometric_force,
            optimal_fiber_length=optimal_fiber_length,
            tendon_slack_length=tendon_slack_length,
            pennation_angle_at_optimal=pennation_angle_at_optimal,
            max_contraction_velocity=max_contraction_velocity,
            fiber_damping=fiber_damping,
            minimum_activation=minimum_activation,
            maximum_pennation_angle=maximum_pennation_angle,
            activation_time_constant=activation_time_constant,
            deactivation_time_constant=deactivation_time_constant,
        )
        curve_leaves = jax.tree_util.tree_leaves((afl, fvc, fpe, fse))
        shape, dtype = self._set_parameters(own, scalars, {f"curve{i}": x for i, x in enumerate(curve_leaves)})
        afl, fvc, fpe, fse = (_broadcast_curve(c, shape, dtype) for c in (afl, fvc, fpe, fse))
        require(self.fiber_damping >= 0, f"{own}: fiber_damping must be ≥ 0, got {values_of(self.fiber_damping)}")
        require(
            (fvc.concentric_slope_near_vmax >= SQRT_EPS) & (fvc.eccentric_slope_near_vmax >= SQRT_EPS),
            f"{own}: the force–velocity slopes near v_max must be ≥ √ε",
        )

        # OpenSim's extendFinalizeFromProperties adjustments
        damped = self.fiber_damping >= 0.001
        self.fiber_damping = xnp.where(damped, self.fiber_damping, 0.0)
        classic = ~damped & (not self.ignore_tendon_compliance)
        require(
            ~classic | (self.minimum_activation >= 0.01),
            f"{own}: minimum_activation must be ≥ 0.01 for the undamped model with an elastic tendon, "
            f"got {values_of(self.minimum_activation)}",
        )
        self.minimum_activation = xnp.where(
            classic, self.minimum_activation, xnp.clip(self.minimum_activation, 0.0, 1.0)
        )
        require(
            (self.minimum_activation >= 0) & (self.minimum_activation < 1),
            f"{own}: minimum_activation must be in [0, 1), got {values_of(self.minimum_activation)}",
        )
        afl = eqx.tree_at(
            lambda c: c.minimum_value,
            afl,
            xnp.where(classic, xnp.maximum(afl.minimum_value, 0.1), xnp.minimum(afl.minimum_value, 0.0)),
        )
        con, ecc = fvc.concentric_slope_at_vmax, fvc.eccentric_slope_at_vmax
        con = xnp.where(classic, xnp.maximum(con, 0.5 * fvc.concentric_slope_near_vmax), xnp.minimum(con, 0.0))
        ecc = xnp.where(classic, xnp.maximum(ecc, 0.5 * fvc.eccentric_slope_near_vmax), xnp.minimum(ecc, 0.0))
        fvc = eqx.tree_at(lambda c: (c.concentric_slope_at_vmax, c.eccentric_slope_at_vmax), fvc, (con, ecc))
        self.active_force_length_curve = afl
        self.force_velocity_curve = fvc
        self.fiber_force_length_curve = fpe
        self.tendon_force_length_curve = fse

    @classmethod
    def from_opensim(cls, properties) -> Millard2012EquilibriumMuscle:
        """From OpenSim XML property names (`OPENSIM_PROPERTIES`, ``ignore_tendon_compliance``;
        the curves as nested mappings under ``ActiveForceLengthCurve``, ``ForceVelocityCurve``,
        ``FiberForceLengthCurve``, ``TendonForceLengthCurve``): one mapping or a sequence of
        mappings (one per muscle; missing properties take OpenSim's defaults; properties without
        effect on the forces, `NON_MECHANICAL_PROPERTIES`, are skipped). ``ignore_tendon_compliance``
        is static here, so all muscles must agree on it (``ValueError`` otherwise: build two modules)."""
        rows = as_rows(properties)
        rigid = flag_values(rows, "ignore_tendon_compliance")
        if len(set(rigid)) > 1:
            raise ValueError(
                "Millard2012EquilibriumMuscle.from_opensim: ignore_tendon_compliance differs between "
                "muscles; build one module for the rigid and one for the elastic tendons"
            )
        return from_opensim_properties(
            cls, rows, cls.OPENSIM_PROPERTIES, cls.OPENSIM_CURVES, ignore_tendon_compliance=rigid[0]
        )

    @property
    def minimum_fiber_length(self) -> Float[Array, " m"]:
        """m, ``getMinimumFiberLength``: ``max(ε^(7/8), min_norm_active_fiber_length · l_opt,
        pennation model's shortest fiber)``."""
        active = self.active_force_length_curve.min_norm_active_fiber_length * self.optimal_fiber_length
        return jnp.maximum(SIGNIFICANT_REAL, jnp.maximum(active, self.pennation.minimum_fiber_length))

    @property
    def force_velocity_inverse_curve(self) -> ForceVelocityInverseCurve:
        """The inverse curve OpenSim builds from `force_velocity_curve` (slopes at ``v_max`` half
        the slopes near it, so that it is invertible)."""
        fv = self.force_velocity_curve
        return ForceVelocityInverseCurve(
            concentric_slope_at_vmax=0.5 * fv.concentric_slope_near_vmax,
            concentric_slope_near_vmax=fv.concentric_slope_near_vmax,
            isometric_slope=fv.isometric_slope,
            eccentric_slope_at_vmax=0.5 * fv.eccentric_slope_near_vmax,
            eccentric_slope_near_vmax=fv.eccentric_slope_near_vmax,
            max_eccentric_velocity_force_multiplier=fv.max_eccentric_velocity_force_multiplier,
            concentric_curviness=fv.concentric_curviness,
            eccentric_curviness=fv.eccentric_curviness,
        )

    def _prepare(self) -> _Kernel:
        """The built curves and pennation model (computed once per call, differentiably)."""
        return _Kernel(
            max_isometric_force=self.max_isometric_force,
            optimal_fiber_length=self.optimal_fiber_length,
            tendon_slack_length=self.tendon_slack_length,
            max_contraction_velocity=self.max_contraction_velocity,
            fiber_damping=self.fiber_damping,
            pennation=self.pennation,
            minimum_fiber_length=self.minimum_fiber_length,
            lengths=stack_curves(
                [
                    self.active_force_length_curve.segments(),
                    self.fiber_force_length_curve.segments(),
                    self.tendon_force_length_curve.segments(),
                ]
            ),
            force_velocity=self.force_velocity_curve.segments(),
            force_velocity_inverse=self.force_velocity_inverse_curve.segments(),
        )

    # -- muscle quantities --

    def equilibrium(
        self,
        activation: Float[ArrayLike, " m"],
        musculotendon_length: Float[ArrayLike, " m"],
        musculotendon_velocity: Float[ArrayLike, " m"] = 0.0,
    ) -> MuscleEquilibrium:
        """The state after OpenSim's ``equilibrateMuscles`` (``computeFiberEquilibrium``).

        - ``activation``: ``(m,)`` in [0, 1], clamped up to ``minimum_activation`` (as
          ``setActivation``). Out of [0, 1], NaN/inf, a negative length: ``ValueError`` naming the
          argument when concrete, NaN under jit (`jaxbio.muscles._inputs`; OpenSim would clamp 1.5 to 1).
        - ``musculotendon_length``: ``(m,)`` m; ``musculotendon_velocity``: ``(m,)`` m/s,
          lengthening positive.

        Elastic tendon: the fiber length solves the *static* equilibrium (zero fiber and tendon
        velocity) whatever the path speed, as in OpenSim 4.x: ``equilibrateMuscles`` calls
        ``computeFiberEquilibrium(s, false)``, which passes a zero path speed, and
        ``computeFiberEquilibrium(s, true)`` hands its flag to ``estimateMuscleFiberState`` as
        ``staticSolution``, so both are static. The iteration is OpenSim's
        (`jaxbio.muscles._opensim_common.fiber_equilibrium`, at most 200 Newton steps). The fiber
        velocity then is what OpenSim's state reports: with damping the root of
        ``F⁰ (a f_L f_V(ṽ) + f_PE + β ṽ) cos α = F_T`` by OpenSim's Newton iteration
        (``calcDampedNormFiberVelocity``, tolerance ``max(10⁻¹⁰ F⁰, 100 ε^(7/8))``, started from the
        inverse curve), without damping ``ṽ = f_V⁻¹((f_T/cos α − f_PE)/(a f_L))``; both ≈ 0 at a
        static equilibrium. Rigid tendon (``ignore_tendon_compliance``): the closed-form state with
        ``l̇_M = l̇_MT cos α`` and the fiber force clipped at 0. A fiber at its shortest length and
        shortening reports ``f_V = 1`` and zero velocity. Returns `MuscleEquilibrium`.
        """
        a, l, v = broadcast_inputs(self, musculotendon_length, musculotendon_velocity, activation)
        return poisoned(_equilibrium(self, a, l, v), a, l, v)

    def static_optimization_forces(
        self,
        musculotendon_length: Float[ArrayLike, " m"],
        musculotendon_velocity: Float[ArrayLike, " m"] = 0.0,
    ) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
        """``(F̂, P)`` ``(m,)`` N, the forces along the tendon OpenSim's static optimisation
        works with (``use_muscle_physiology``), on a rigid tendon of slack length:

        - ``F̂``: ``calcInextensibleTendonActiveFiberForce(s, 1)`` =
          ``F⁰ f_L(l̃) f_V(ṽ) cos α̂`` with ``l_M`` from the pennation model at ``l_T = l_ts`` and
          ``l̇_M = l̇_MT cos α``; 0 at or below the shortest fiber. As in OpenSim 4.x,
          ``α̂ = calcPennationAngle(l̃)`` is evaluated at the *normalised* fiber length
          (``Millard2012EquilibriumMuscle::calcActiveFiberForceAlongTendon``), which makes
          ``cos α̂`` close to 1 for short fibers; reproduced so that the numbers match OpenSim.
          Static optimisation applies ``a F̂``.
        - ``P``: the passive elastic force ``F⁰ f_PE(l̃) cos α`` (true ``α``, fiber length clamped
          at the shortest fiber), which OpenSim's static optimisation leaves out.

        ``musculotendon_length`` ``(m,)`` m, ``musculotendon_velocity`` ``(m,)`` m/s (lengthening
        positive).
        """
        l, v = broadcast_inputs(self, musculotendon_length, musculotendon_velocity)
        return poisoned(_static_optimization_forces(self, l, v), l, v)


class _Kernel(eqx.Module):
    """What the Millard muscle's equilibrium needs, with its curves built once: the interface the
    shared iteration of `jaxbio.muscles._opensim_common` calls (per muscle, under `jax.vmap`)."""

    max_isometric_force: Array
    optimal_fiber_length: Array
    tendon_slack_length: Array
    max_contraction_velocity: Array
    fiber_damping: Array
    pennation: Pennation
    minimum_fiber_length: Array
    lengths: Curve  # active force–length, fiber force–length, tendon force–length, stacked
    force_velocity: Curve
    force_velocity_inverse: Curve

    def _multipliers_and_slopes(self, lce_n, tl_n):
        """``(f_L, f_L', f_PE, f_PE', f_T, f_T')``, the three curves in one evaluation."""
        lce_n, tl_n = jnp.broadcast_arrays(lce_n, tl_n)
        y, dy = self.lengths.value_and_derivative(jnp.stack([lce_n, lce_n, tl_n], axis=-1))
        return y[..., 0], dy[..., 0], y[..., 1], dy[..., 1], y[..., 2], dy[..., 2]

    def _fiber_force_normalized(self, activation, fal, fv, fpe, normalized_fiber_velocity):
        return activation * fal * fv + fpe + self.fiber_damping * normalized_fiber_velocity

    def _force_velocity_of(self, activation, normalized_fiber_velocity):
        return self.force_velocity(normalized_fiber_velocity)


@eqx.filter_jit
def _equilibrium(muscle: Millard2012EquilibriumMuscle, a, l, v) -> MuscleEquilibrium:
    """`Millard2012EquilibriumMuscle.equilibrium` on ``(m,)`` inputs (jitted: eager calls reuse the
    compiled loops)."""
    a = clamp_activation(a, muscle.minimum_activation)
    k = muscle._prepare()
    if muscle.ignore_tendon_compliance:
        return _rigid_state(k, a, l, v)
    lce, status = fiber_equilibrium(k, "millard", a, l, jnp.zeros_like(v), static=True, max_iterations=200)
    return _elastic_state(k, a, l, lce, status)


def _elastic_state(k: _Kernel, a, l, lce, status) -> MuscleEquilibrium:
    pen = k.pennation
    shortest = k.minimum_fiber_length
    lce = jnp.maximum(lce, shortest)
    phi = pen.angle(lce)
    cos = jnp.cos(phi)
    tl = l - lce * cos
    lce_n = lce / k.optimal_fiber_length
    fal, _, fpe, _, fse, _ = k._multipliers_and_slopes(lce_n, tl / k.tendon_slack_length)
    damped = k.fiber_damping > 0
    # undamped: f_V from the equilibrium, ṽ from the inverse curve; damped: Newton on ṽ
    afal = a * fal
    fv_classic = (fse / cos - fpe) / jnp.where(afal > 0, afal, 1.0)
    v_classic = k.force_velocity_inverse(fv_classic)
    v_damped, fv_damped, converged = _damped_fiber_velocity(k, a, fal, fpe, fse, cos)
    dlce_n = jnp.where(damped, v_damped, v_classic)
    fv = jnp.where(damped, fv_damped, fv_classic)
    status = jnp.where(damped & ~converged, NOT_CONVERGED, status)
    clamped = (lce <= shortest) & (dlce_n <= 0)
    dlce_n = jnp.where(clamped, 0.0, dlce_n)
    fv = jnp.where(clamped, 1.0, fv)
    return MuscleEquilibrium(
        fiber_length=lce,
        pennation_angle=phi,
        tendon_length=tl,
        tendon_force=fse * k.max_isometric_force,
        active_force_length_multiplier=fal,
        passive_force_length_multiplier=fpe,
        force_velocity_multiplier=fv,
        fiber_velocity=dlce_n * k.max_contraction_velocity * k.optimal_fiber_length,
        status=status,
    )


def _damped_fiber_velocity(k: _Kernel, a, fal, fpe, fse, cos):
    """OpenSim's ``calcDampedNormFiberVelocity``: ``(ṽ, f_V(ṽ), converged)`` ``(m,)``; the root
    carries the implicit-function derivative."""
    fiso = k.max_isometric_force
    tol = jnp.maximum(force_tolerance(1e-10, fiso), SIGNIFICANT_REAL * 100)
    beta = jnp.where(k.fiber_damping > 0, k.fiber_damping, 1.0)

    def error(v, args):
        a_, fal_, fpe_, fse_, cos_, fiso_, beta_, curve = args
        fv, dfv = curve.value_and_derivative(v)
        err = fiso_ * (a_ * fal_ * fv + fpe_ + beta_ * v) * cos_ - fse_ * fiso_
        return err, fiso_ * (a_ * fal_ * dfv + beta_) * cos_, fv, dfv

    args = (a, fal, fpe, fse, cos, fiso, beta, k.force_velocity)
    frozen = jax.lax.stop_gradient(args)
    a0, fal0, fpe0, fse0, cos0 = frozen[:5]
    guess = (fse0 / jnp.maximum(cos0, 0.01) - fpe0) / (jnp.maximum(a0, 0.01) * jnp.maximum(fal0, 0.01))
    v = jnp.clip(jax.lax.stop_gradient(k.force_velocity_inverse)(guess), -1.0, 1.0)

    def step(_, state):
        v, done = state
        err, derr, _, _ = error(v, frozen)
        done = done | (jnp.abs(err) <= tol)
        move = ~done & (jnp.abs(derr) > SIGNIFICANT_REAL)
        return jnp.where(move, v - err / jnp.where(move, derr, 1.0), v), done

    v, _ = jax.lax.fori_loop(0, 20, step, (v, jnp.zeros(v.shape, bool)))
    err, derr, fv, dfv = error(v, args)
    converged = jnp.abs(jax.lax.stop_gradient(err)) <= tol
    derr = jax.lax.stop_gradient(derr)
    # implicit derivative of the root (value v): dv = −(∂err/∂θ)/(∂err/∂ṽ); f_V(v) follows it
    dv = -(err - jax.lax.stop_gradient(err)) / jnp.where(derr != 0, derr, 1.0)
    return v + dv, fv + jax.lax.stop_gradient(dfv) * dv, converged


def _rigid_state(k: _Kernel, a, l, v) -> MuscleEquilibrium:
    pen = k.pennation
    shortest = k.minimum_fiber_length
    lce = jnp.maximum(pen.fiber_length(l, k.tendon_slack_length), shortest)
    phi = pen.angle(lce)
    cos = jnp.cos(phi)
    tl = l - lce * cos
    lce_n = lce / k.optimal_fiber_length
    fal, _, fpe, _, _, _ = k._multipliers_and_slopes(lce_n, lce_n)
    buckling = tl < k.tendon_slack_length - SIGNIFICANT_REAL
    dlce = jnp.where(buckling, 0.0, v * cos)
    dlce_n = dlce / (k.optimal_fiber_length * k.max_contraction_velocity)
    fv = jnp.where(buckling, 1.0, k.force_velocity(dlce_n))
    clamped = ((lce <= shortest) & (dlce <= 0)) | (lce < shortest)
    dlce_n = jnp.where(clamped, 0.0, dlce_n)
    fv = jnp.where(clamped, 1.0, fv)
    fm = k.max_isometric_force * (a * fal * fv + fpe + k.fiber_damping * dlce_n)
    fm = jnp.where(clamped, 0.0, jnp.maximum(fm, 0.0))
    return MuscleEquilibrium(
        fiber_length=lce,
        pennation_angle=phi,
        tendon_length=tl,
        tendon_force=fm * cos,
        active_force_length_multiplier=fal,
        passive_force_length_multiplier=fpe,
        force_velocity_multiplier=fv,
        fiber_velocity=dlce_n * k.max_contraction_velocity * k.optimal_fiber_length,
        status=jnp.zeros(lce.shape, jnp.int32),
    )


@eqx.filter_jit
def _static_optimization_forces(muscle: Millard2012EquilibriumMuscle, l, v):
    """`Millard2012EquilibriumMuscle.static_optimization_forces` on ``(m,)`` inputs."""
    k = muscle._prepare()
    pen = k.pennation
    lce = pen.fiber_length(l, k.tendon_slack_length)
    ok = lce > k.minimum_fiber_length
    cos = jnp.cos(pen.angle(lce))
    lce_n = lce / k.optimal_fiber_length
    dlce_n = v * cos / (k.optimal_fiber_length * k.max_contraction_velocity)
    lce_c = jnp.maximum(lce, k.minimum_fiber_length)
    # f_L at l̃, f_PE at the clamped l̃ (and an unused f_T), in one evaluation
    y = k.lengths(jnp.stack([lce_n, lce_c / k.optimal_fiber_length, lce_n], axis=-1))
    fal, fpe = y[..., 0], y[..., 1]
    fv = k.force_velocity(dlce_n)
    cos_quirk = jnp.cos(pen.angle(lce_n))
    active = jnp.where(ok, k.max_isometric_force * fal * fv * cos_quirk, 0.0)
    passive = k.max_isometric_force * fpe * jnp.cos(pen.angle(lce_c))
    return active, passive
