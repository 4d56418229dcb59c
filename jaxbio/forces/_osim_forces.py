"""OpenSim's forces that matter for the tools: limits, springs, bushings, contact and actuators of a
``ForceSet``.

`jaxbio.io.load_osim` imports these ``ForceSet`` entries of OpenSim 3.x and 4.x files into
`OsimForces` (``Model.forces``), every number in SI units; Thelen and Millard muscles go to
``Model.muscles`` (`jaxbio.forces._osim_muscles`), every other type stays listed in
``Model.ignored``. The formulas are opensim-core's (``OpenSim/Simulation/Model``
and ``OpenSim/Actuators``, OpenSim 4.6), and the generalised forces equal live OpenSim's to
round-off (tests/io/test_osim_forces.py; bushings and contact: tests/io/test_osim_contact.py).

**Passive forces** (functions of the state, `passive_forces`):

- ``CoordinateLimitForce`` (``CoordinateLimitForce.cpp``): on coordinate ``q`` with speed ``u``,
  ``f = −K_up s_up (q − q_up) + K_low s_low (q_low − q) − D (s_up + s_low) u`` with Simbody's
  smooth step ``step(x) = x³(10 − 15x + 6x²)`` of ``x`` clamped to [0, 1]:
  ``s_up = step((q − q_up)/Δ)``, ``s_low = 1 − step((q − q_low + Δ)/Δ)`` (OpenSim's
  ``Function::Step`` stiffnesses divided by their plateaus). The file gives limits and the
  transition ``Δ`` in degrees, stiffnesses in N·m/degree and damping in N·m·s/degree for a
  rotational coordinate (m, N/m, N·s/m otherwise, coupled coordinates included); they are stored
  in rad, N·m/rad and N·m·s/rad. (OpenSim divides by a stiffness to get ``s``: a zero stiffness
  gives NaN there, a finite force here.)
- ``SpringGeneralizedForce`` (``SpringGeneralizedForce.cpp``): ``f = −k (q − rest_length) − c u``,
  all in the coordinate's own units (rad for an angle: no degrees).
- ``PointToPointSpring`` (Simbody's ``Force::TwoPointLinearSpring``): points ``p1`` on body1 and
  ``p2`` on body2, ``d = |p2 − p1|``, force ``k (d − rest_length) (p2 − p1)/d`` on ``p1`` and its
  opposite on ``p2`` (zero at ``d = 0``, where Simbody divides by zero).

- ``BushingForce`` (Simbody's ``Force::LinearBushing``): frames F (``frame1``) and M
  (``frame2``, bodies, the ground or offset frames, the force's own ``<frames>`` included); the
  deflections are the body-fixed X-Y-Z angles ``θ`` of ``R_FM`` and M's origin ``p`` in F, their
  rates ``θ̇ = N(θ) ω_FM`` (``ω`` in M, ``Rotation::calcNForBodyXYZInBodyFrame``) and ``ṗ`` (the
  derivative in F); ``f = −(K ⊙ (θ, p) + C ⊙ (θ̇, ṗ))`` with the rotational and translational
  stiffness and damping; M receives the moment ``R_GM N(θ)ᵀ f_θ`` and the force ``R_GF f_p`` at
  its origin, F their opposite at the same place.
- ``HuntCrossleyForce`` (Simbody's ``HuntCrossleyForce`` on a ``GeneralContactSubsystem`` contact
  set) on ``ContactSphere`` and ``ContactHalfSpace`` geometry (the solid ``x > 0`` of its frame;
  the geometry's ``location`` and body-fixed X-Y-Z ``orientation`` in its ``socket_frame``).
  Every pair of the force's surfaces on different segments is a candidate (two half-spaces have no
  contact algorithm). Sphere–half-space: depth ``r + x_c`` (``x_c`` the centre in the half-space
  frame), normal the frame's −x, radius ``r``; sphere–sphere: depth ``r₁ + r₂ − d``, normal
  from 1 to 2, radius ``r₁r₂/(r₁+r₂)``. Each surface's stiffness is stored as
  ``kᵢ = stiffnessᵢ^(2/3)``; ``s₁ = k₂/(k₁+k₂)``, ``k = k₁s₁``, ``c = c₁s₁ + c₂s₂``; the point
  moves by ``depth (½ − s₁)`` along the normal; ``f_H = 4/3 k depth √(R k depth)``, ``f = f_H (1
  + 3/2 c v_n)`` with ``v_n`` the normal velocity of body 1 relative to body 2; friction
  ``f (min(v/v_t, 1) (μ_d + 2(μ_s − μ_d)/(1 + (v/v_t)²)) + μ_v v)`` along the slip velocity ``v``
  (``v_t`` the ``transition_velocity``; each μ the harmonic mean ``2μ₁μ₂/(μ₁+μ₂)``, 0 when both
  are 0). **Simbody's early return**: the first contact of a force's list with ``f ≤ 0`` ends
  ``calcForce``, so it and every later contact of that force apply nothing; the list's order is
  that of ``GeneralContactSubsystem``'s sweep and prune (surfaces sorted by the start of their
  extent, half-spaces first, along the axis where the surfaces' centres vary most; pairs by the
  sorted positions of their two surfaces), reproduced here. A ``HuntCrossleyForce`` on other
  geometry (``ContactMesh`` …) is not imported and named in ``Model.not_imported``.
- ``PathSpring`` (``PathSpring.cpp``): tension ``T = stiffness · max(0, l − resting_length) ·
  (1 + dissipation · l̇)`` along its path (`jaxbio.forces._osim_paths`: the muscles' path reader and
  evaluator), generalised force ``−(∂l/∂c) T``, ``l̇ = (∂l/∂c) ċ``. OpenSim refuses a missing
  or negative ``resting_length``, ``stiffness`` or ``dissipation``, and so does jaxbio. Over a
  wrap object OpenSim's ``getLengtheningSpeed`` and applied force are its straight segments' at
  its tangent points, not the derivative of its length: there they differ (docs/opensim-support.md).

**Actuators** (``ScalarActuator``: actuation = control × ``optimal_force``; `actuator_matrix`
``B(c)`` gives the generalised force per unit actuation, so ``τ = B(c) (optimal_force ⊙
controls)``). ``min_control`` / ``max_control`` are kept for optimisers; OpenSim does not clamp
controls when it computes forces, and neither does `actuator_forces`.

- ``CoordinateActuator``: a generalised force on its coordinate.
- ``PointActuator``: a force along ``direction`` (unit; in the body frame, or the ground's with
  ``force_is_global``) at ``point`` (body frame, or a ground point with ``point_is_global``: the
  body's material point there).
- ``TorqueActuator``: a torque about ``axis`` (unit; the ground's frame with
  ``torque_is_global``, the default, else bodyA's frame) on bodyA and its opposite on bodyB.
- ``PathActuator``: a tension along its path (`jaxbio.forces._osim_paths`): column ``−∂l/∂c``.

**Coordinates.** A generalised force on an OpenSim coordinate acts on its Simbody speed; for the
rotational coordinates of a Ball or Free joint that speed is ``u = E(c) ċ`` (``ω`` in the parent
frame, not the angle rates), the force in jaxbio's coordinates is ``Eᵀ f`` (the convention of
`jaxbio.io.osim`, the same as `jaxbio.inverse_dynamics` of the model), and the "speed" that
damping multiplies (``Coordinate::getSpeedValue``) is that ``u``. Forces on bodies enter as
``J_cᵀ Σ J_vᵀ F`` (point forces) and ``J_cᵀ Σ J_ωᵀ T`` (torques), ``J_c = ∂q/∂c``.

**Bodies and frames.** PointActuator and PointToPointSpring name bodies (a PhysicalOffsetFrame is
refused: Simbody's two-point spring would read the point in the base body's frame); a
TorqueActuator's bodyA/bodyB may be any body, the ground or an offset frame (its axis is then in
that frame). Everything is converted at load time to the frames of jaxbio's tree segments.

**Disabled forces** (``appliesForce`` false, 3.x ``isDisabled`` true) are not imported: OpenSim
applies nothing for them. `applied_forces` selects the forces that OpenSim's
``InverseDynamicsTool`` applies (``forces_to_exclude``, OpenSim's ``disableModelForces``).
"""

from __future__ import annotations

import dataclasses
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio._validate import take_rows, to_device
from jaxbio.coordinates import jacobian as coordinate_jacobian
from jaxbio.dynamics.kinematics import point_jacobian, segment_motion
from jaxbio.forces._osim_paths import OsimPaths, path_lengths, path_moment_arms, read_paths
from jaxbio.spatial import norm, safe_sqrt, unit

__all__ = [
    "OsimForces",
    "CoordinateLimitForces",
    "SpringGeneralizedForces",
    "PointToPointSprings",
    "CoordinateActuators",
    "PointActuators",
    "TorqueActuators",
    "BushingForces",
    "HuntCrossleyForces",
    "PathActuators",
    "PathSprings",
    "passive_forces",
    "path_spring_tensions",
    "actuator_matrix",
    "actuator_forces",
    "applied_forces",
]

HIGHEST = jax.lax.Precision.HIGHEST
DEGREE = np.pi / 180.0  # SimTK_DEGREE_TO_RADIAN

#: OpenSim's Muscle classes (4.6, and the 3.x names OpenSim still reads)
MUSCLE_TYPES = frozenset(
    (
        "ActivationFiberLengthMuscle",
        "ActivationFiberLengthMuscle_Deprecated",
        "DeGrooteFregly2016Muscle",
        "Delp1990Muscle",
        "Delp1990Muscle_Deprecated",
        "MeyerFregly2016Muscle",
        "Millard2012AccelerationMuscle",
        "Millard2012EquilibriumMuscle",
        "RigidTendonMuscle",
        "Schutte1993Muscle",
        "Schutte1993Muscle_Deprecated",
        "Thelen2003Muscle",
        "Thelen2003Muscle_Deprecated",
    )
)
#: OpenSim's other Actuator classes (excluded by the keyword "actuators")
ACTUATOR_TYPES = frozenset(
    (
        "ActivationCoordinateActuator",
        "BodyActuator",
        "ClutchedPathSpring",
        "CoordinateActuator",
        "McKibbenActuator",
        "PathActuator",
        "PointActuator",
        "PointToPointActuator",
        "TorqueActuator",
    )
)
#: OpenSim's Force classes that are not actuators
OTHER_FORCE_TYPES = frozenset(
    (
        "Blankevoort1991Ligament",
        "CoordinateLimitForce",
        "CoordinateLinearStopForce",
        "ElasticFoundationForce",
        "ExponentialContactForce",
        "ExponentialCoordinateLimitForce",
        "ExpressionBasedCoordinateForce",
        "ExpressionBasedPathForce",
        "ExpressionBasedPointToPointForce",
        "ExternalForce",
        "HuntCrossleyForce",
        "Ligament",
        "MeyerFregly2016Force",
        "PathSpring",
        "PointToPointSpring",
        "PrescribedForce",
        "SmoothSphereHalfSpaceForce",
        "SpringGeneralizedForce",
        "ExternalLoads",
    )
)
FORCE_TYPES = MUSCLE_TYPES | ACTUATOR_TYPES | OTHER_FORCE_TYPES
#: the types jaxbio imports
IMPORTED_TYPES = (
    "CoordinateLimitForce",
    "SpringGeneralizedForce",
    "PointToPointSpring",
    "CoordinateActuator",
    "PointActuator",
    "TorqueActuator",
    "BushingForce",
    "HuntCrossleyForce",
    "PathActuator",
    "PathSpring",
)


# ---- batches of one force type ------------------------------------------------------------------


class _Batch(eqx.Module):
    """``n`` forces of one type: every field has one entry per force (array leaves along their
    first axis, static tuples)."""

    def __check_init__(self):
        n = len(self.names)
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if len(v) != n:
                raise ValueError(f"{type(self).__name__}: {f.name} has {len(v)} entries for {n} forces {self.names}")

    def __len__(self) -> int:
        return len(self.names)

    def take(self, index: Sequence[int]):
        """The forces at ``index`` (static), in that order."""
        idx = np.asarray(index, dtype=int).reshape(-1)
        changes = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            changes[f.name] = tuple(v[i] for i in idx) if isinstance(v, tuple) else take_rows(v, idx)
        return type(self)(**changes)

    @classmethod
    def build(cls, rows: Sequence[dict], dtype):
        """From one dict per force (numbers, vectors and static values by field name)."""
        out = {}
        for f in dataclasses.fields(cls):
            values = [r[f.name] for r in rows]
            if f.metadata.get("static", False):
                out[f.name] = tuple(values)
            else:
                trailing = cls._trailing.get(f.name, ())
                out[f.name] = to_device(np.array(values, dtype=float).reshape((len(rows),) + trailing), dtype)
        return cls(**out)

    _trailing = {}  # trailing shape of the array fields that are not one number per force


class CoordinateLimitForces(_Batch):
    """OpenSim's ``CoordinateLimitForce``\\ s, SI units (module docstring).

    ``upper_limit``, ``lower_limit``, ``transition`` ``(n,)`` rad / m; ``upper_stiffness``,
    ``lower_stiffness`` ``(n,)`` N·m/rad / N/m; ``damping`` ``(n,)`` N·m·s/rad / N·s/m; static
    ``coordinates`` (index in ``c``) and ``names``."""

    upper_limit: Float[Array, " n"]
    lower_limit: Float[Array, " n"]
    upper_stiffness: Float[Array, " n"]
    lower_stiffness: Float[Array, " n"]
    damping: Float[Array, " n"]
    transition: Float[Array, " n"]
    coordinates: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __call__(self, c: Float[Array, " nc"], u: Float[Array, " nc"]) -> Float[Array, " n"]:
        """Each force's generalised force on its coordinate ``(n,)`` N·m / N (OpenSim's
        ``calcLimitForce``) at coordinates ``c`` and OpenSim's coordinate speeds ``u`` ``(nc,)``
        (the rates ``ċ``, except on Ball/Free rotations: `passive_forces`)."""
        idx = np.asarray(self.coordinates, dtype=np.int32)
        q, u = c[idx], u[idx]
        up = _step((q - self.upper_limit) / self.transition)
        low = 1.0 - _step((q - self.lower_limit + self.transition) / self.transition)
        return (
            -self.upper_stiffness * up * (q - self.upper_limit)
            + self.lower_stiffness * low * (self.lower_limit - q)
            - self.damping * (up + low) * u
        )


class SpringGeneralizedForces(_Batch):
    """OpenSim's ``SpringGeneralizedForce``\\ s: ``stiffness`` ``(n,)`` N·m/rad / N/m,
    ``rest_length`` ``(n,)`` rad / m, ``viscosity`` ``(n,)`` N·m·s/rad / N·s/m; static
    ``coordinates`` and ``names``."""

    stiffness: Float[Array, " n"]
    rest_length: Float[Array, " n"]
    viscosity: Float[Array, " n"]
    coordinates: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __call__(self, c: Float[Array, " nc"], u: Float[Array, " nc"]) -> Float[Array, " n"]:
        """``−k (q − rest_length) − viscosity · u`` ``(n,)`` N·m / N (``u``: OpenSim's speeds)."""
        idx = np.asarray(self.coordinates, dtype=np.int32)
        return -self.stiffness * (c[idx] - self.rest_length) - self.viscosity * u[idx]


class PointToPointSprings(_Batch):
    """OpenSim's ``PointToPointSpring``\\ s: ``points1``, ``points2`` ``(n, 3)`` m in the frames
    of the tree segments ``segments1``, ``segments2`` (static; ``-1``: the world frame, for a
    body welded to the ground); ``stiffness`` ``(n,)`` N/m; ``rest_length`` ``(n,)`` m."""

    points1: Float[Array, "n 3"]
    points2: Float[Array, "n 3"]
    stiffness: Float[Array, " n"]
    rest_length: Float[Array, " n"]
    segments1: tuple[int, ...] = eqx.field(static=True)
    segments2: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    _trailing = {"points1": (3,), "points2": (3,)}


class CoordinateActuators(_Batch):
    """OpenSim's ``CoordinateActuator``\\ s: ``optimal_force`` ``(n,)`` N·m / N,
    ``min_control``, ``max_control`` ``(n,)`` (may be ∓inf); static ``coordinates`` and ``names``."""

    optimal_force: Float[Array, " n"]
    min_control: Float[Array, " n"]
    max_control: Float[Array, " n"]
    coordinates: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)


class PointActuators(_Batch):
    """OpenSim's ``PointActuator``\\ s on tree segments ``segments`` (static; ``-1``: the world).

    ``points`` ``(n, 3)`` m: in the segment frame, or the world frame where ``point_is_global``
    (static); ``directions`` ``(n, 3)`` unit: in the segment frame, or the world frame where
    ``force_is_global`` (static); ``optimal_force`` ``(n,)`` N; ``min_control``, ``max_control``
    ``(n,)``."""

    points: Float[Array, "n 3"]
    directions: Float[Array, "n 3"]
    optimal_force: Float[Array, " n"]
    min_control: Float[Array, " n"]
    max_control: Float[Array, " n"]
    segments: tuple[int, ...] = eqx.field(static=True)
    point_is_global: tuple[bool, ...] = eqx.field(static=True)
    force_is_global: tuple[bool, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    _trailing = {"points": (3,), "directions": (3,)}


class TorqueActuators(_Batch):
    """OpenSim's ``TorqueActuator``\\ s: a torque about ``axes`` ``(n, 3)`` (unit; in the frame of
    tree segment ``segments_a``, or the world where ``torque_is_global``) on segment
    ``segments_a`` and its opposite on ``segments_b`` (static; ``-1``: the world);
    ``optimal_force`` ``(n,)`` N·m; ``min_control``, ``max_control`` ``(n,)``."""

    axes: Float[Array, "n 3"]
    optimal_force: Float[Array, " n"]
    min_control: Float[Array, " n"]
    max_control: Float[Array, " n"]
    segments_a: tuple[int, ...] = eqx.field(static=True)
    segments_b: tuple[int, ...] = eqx.field(static=True)
    torque_is_global: tuple[bool, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    _trailing = {"axes": (3,)}


class PathActuators(_Batch):
    """OpenSim's ``PathActuator``\\ s: a tension ``optimal_force × control`` along path
    ``path_index`` (static) of ``OsimForces.paths``; ``optimal_force`` ``(n,)`` N,
    ``min_control``, ``max_control`` ``(n,)``."""

    optimal_force: Float[Array, " n"]
    min_control: Float[Array, " n"]
    max_control: Float[Array, " n"]
    path_index: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)


class PathSprings(_Batch):
    """OpenSim's ``PathSpring``\\ s along path ``path_index`` (static) of ``OsimForces.paths``:
    ``stiffness`` ``(n,)`` N/m, ``resting_length`` ``(n,)`` m, ``dissipation`` ``(n,)`` s/m
    (module docstring)."""

    stiffness: Float[Array, " n"]
    resting_length: Float[Array, " n"]
    dissipation: Float[Array, " n"]
    path_index: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)


class BushingForces(_Batch):
    """OpenSim's ``BushingForce``\\ s (Simbody's ``Force::LinearBushing``) between frame F
    (``frame1``) and frame M (``frame2``): ``positions1``, ``orientations1`` ``(n, 3)`` m /
    ``(n, 4)`` quaternions, F's pose in the frame of tree segment ``segments1`` (static; ``-1``:
    the world), ``positions2``, ``orientations2``, ``segments2`` M's; ``rotational_stiffness``
    ``(n, 3)`` N·m/rad, ``translational_stiffness`` ``(n, 3)`` N/m, ``rotational_damping``
    ``(n, 3)`` N·m·s/rad, ``translational_damping`` ``(n, 3)`` N·s/m (about / along the
    deflection coordinates, module docstring)."""

    positions1: Float[Array, "n 3"]
    orientations1: Float[Array, "n 4"]
    positions2: Float[Array, "n 3"]
    orientations2: Float[Array, "n 4"]
    rotational_stiffness: Float[Array, "n 3"]
    translational_stiffness: Float[Array, "n 3"]
    rotational_damping: Float[Array, "n 3"]
    translational_damping: Float[Array, "n 3"]
    segments1: tuple[int, ...] = eqx.field(static=True)
    segments2: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    _trailing = {
        "positions1": (3,),
        "orientations1": (4,),
        "positions2": (3,),
        "orientations2": (4,),
        "rotational_stiffness": (3,),
        "translational_stiffness": (3,),
        "rotational_damping": (3,),
        "translational_damping": (3,),
    }


class HuntCrossleyForces(eqx.Module):
    """OpenSim's ``HuntCrossleyForce``\\ s (Simbody's ``HuntCrossleyForce`` on a contact set),
    ``n`` forces, ``s`` contact surfaces (each force's ``ContactSphere``\\ s and
    ``ContactHalfSpace``\\ s, in the order of its parameter sets and their ``geometry`` lists),
    ``p`` pairs of surfaces of one force that Simbody can bring into contact (sphere–half-space,
    sphere–sphere).

    Surfaces: ``positions`` ``(s, 3)`` m and ``orientations`` ``(s, 4)``, the geometry frame in the
    frame of tree segment ``segments`` (static; ``-1``: the world); ``radii`` ``(s,)`` m (0 for a
    half-space); static ``halfspace`` (a half-space: the solid ``x > 0`` of its frame) and
    ``surface_forces`` (the force each belongs to).

    Pairs (static ``first``, ``second``: surface indices, the half-space first, else file order;
    ``pair_forces``): the combined material of Simbody's ``HuntCrossleyForceImpl::calcForce``,
    computed at load time: ``stiffness`` ``(p,)`` ``k₁s₁`` (N/m²)^(2/3), with each surface's
    ``kᵢ = stiffnessᵢ^(2/3)`` (stiffness in N/m²) and ``s₁ = k₂/(k₁+k₂)``,
    ``share`` ``(p,)`` that ``s₁``, ``dissipation`` ``(p,)`` s/m ``c₁s₁ + c₂s₂``, friction
    coefficients ``static_friction``, ``dynamic_friction`` ``(p,)`` and ``viscous_friction``
    ``(p,)`` s/m (each ``2μ₁μ₂/(μ₁+μ₂)``, 0 when both are 0), ``transition_velocity`` ``(p,)``
    m/s (the force's). ``names`` (static): the forces.
    """

    positions: Float[Array, "s 3"]
    orientations: Float[Array, "s 4"]
    radii: Float[Array, " s"]
    stiffness: Float[Array, " p"]
    share: Float[Array, " p"]
    dissipation: Float[Array, " p"]
    static_friction: Float[Array, " p"]
    dynamic_friction: Float[Array, " p"]
    viscous_friction: Float[Array, " p"]
    transition_velocity: Float[Array, " p"]
    segments: tuple[int, ...] = eqx.field(static=True)
    halfspace: tuple[bool, ...] = eqx.field(static=True)
    surface_forces: tuple[int, ...] = eqx.field(static=True)
    first: tuple[int, ...] = eqx.field(static=True)
    second: tuple[int, ...] = eqx.field(static=True)
    pair_forces: tuple[int, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __check_init__(self):
        s, p = len(self.segments), len(self.first)
        for f in ("positions", "orientations", "radii"):
            if len(getattr(self, f)) != s:
                raise ValueError(f"HuntCrossleyForces: {f} has {len(getattr(self, f))} entries for {s} surfaces")
        for f in ("stiffness", "share", "dissipation", "static_friction", "dynamic_friction", "viscous_friction"):
            if len(getattr(self, f)) != p:
                raise ValueError(f"HuntCrossleyForces: {f} has {len(getattr(self, f))} entries for {p} pairs")

    def __len__(self) -> int:
        return len(self.names)

    def take(self, index: Sequence[int]) -> HuntCrossleyForces:
        """The forces at ``index`` (static), in that order, with their surfaces and pairs."""
        keep = [int(i) for i in np.asarray(index, dtype=int).reshape(-1)]
        new_force = {f: k for k, f in enumerate(keep)}
        surfaces = [i for f in keep for i, g in enumerate(self.surface_forces) if g == f]
        new_surface = {i: k for k, i in enumerate(surfaces)}
        pairs = [i for f in keep for i, g in enumerate(self.pair_forces) if g == f]
        s, p = np.asarray(surfaces, dtype=int), np.asarray(pairs, dtype=int)
        return HuntCrossleyForces(
            positions=take_rows(self.positions, s),
            orientations=take_rows(self.orientations, s),
            radii=take_rows(self.radii, s),
            **{
                f: take_rows(getattr(self, f), p)
                for f in (
                    "stiffness",
                    "share",
                    "dissipation",
                    "static_friction",
                    "dynamic_friction",
                    "viscous_friction",
                    "transition_velocity",
                )
            },
            segments=tuple(self.segments[i] for i in surfaces),
            halfspace=tuple(self.halfspace[i] for i in surfaces),
            surface_forces=tuple(new_force[self.surface_forces[i]] for i in surfaces),
            first=tuple(new_surface[self.first[i]] for i in pairs),
            second=tuple(new_surface[self.second[i]] for i in pairs),
            pair_forces=tuple(new_force[self.pair_forces[i]] for i in pairs),
            names=tuple(self.names[f] for f in keep),
        )

    @classmethod
    def build(cls, rows: Sequence[dict], dtype) -> HuntCrossleyForces:
        """From one dict per force: ``name``, ``transition_velocity`` and ``surfaces``, a list of
        dicts (``segment``, ``position``, ``orientation``, ``radius``, ``halfspace``,
        ``stiffness``, ``dissipation``, ``static_friction``, ``dynamic_friction``,
        ``viscous_friction``)."""
        surfaces, pairs = [], []
        for f, row in enumerate(rows):
            start = len(surfaces)
            surfaces += [dict(sf, force=f) for sf in row["surfaces"]]
            for i in range(start, len(surfaces)):
                for j in range(i + 1, len(surfaces)):
                    if surfaces[i]["halfspace"] and surfaces[j]["halfspace"]:
                        continue  # Simbody has no algorithm for two half-spaces
                    if surfaces[i]["segment"] == surfaces[j]["segment"]:
                        continue  # one rigid segment: no net force, and never the end of the list
                    one, two = (j, i) if surfaces[j]["halfspace"] else (i, j)
                    pairs.append((one, two, f, row["transition_velocity"], _combined(surfaces[one], surfaces[two])))

        def arr(values, *trailing):
            return to_device(np.array(values, dtype=float).reshape((len(values),) + trailing), dtype)

        return cls(
            positions=arr([s["position"] for s in surfaces], 3),
            orientations=arr([s["orientation"] for s in surfaces], 4),
            radii=arr([s["radius"] for s in surfaces]),
            **{k: arr([p[4][k] for p in pairs]) for k in _COMBINED},
            transition_velocity=arr([p[3] for p in pairs]),
            segments=tuple(int(s["segment"]) for s in surfaces),
            halfspace=tuple(bool(s["halfspace"]) for s in surfaces),
            surface_forces=tuple(s["force"] for s in surfaces),
            first=tuple(p[0] for p in pairs),
            second=tuple(p[1] for p in pairs),
            pair_forces=tuple(p[2] for p in pairs),
            names=tuple(r["names"] for r in rows),
        )


_COMBINED = ("stiffness", "share", "dissipation", "static_friction", "dynamic_friction", "viscous_friction")


def _combined(a: dict, b: dict) -> dict:
    """Simbody's combination of the materials of surface1 ``a`` and surface2 ``b`` (numpy)."""

    def harmonic(key):  # HuntCrossleyForceImpl: 0 when neither surface has this friction
        x, y = a[key], b[key]
        return 0.0 if (x == 0 and y == 0) else 2 * x * y / (x + y)

    # Simbody stores each surface's stiffness to the power 2/3 (HuntCrossleyForceImpl::Parameters)
    k1, k2 = np.float64(a["stiffness"]) ** (2.0 / 3.0), np.float64(b["stiffness"]) ** (2.0 / 3.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        s1 = k2 / (k1 + k2)
    return dict(
        stiffness=k1 * s1,
        share=s1,
        dissipation=a["dissipation"] * s1 + b["dissipation"] * (1 - s1),
        static_friction=harmonic("static_friction"),
        dynamic_friction=harmonic("dynamic_friction"),
        viscous_friction=harmonic("viscous_friction"),
    )


_BATCHES = (
    ("coordinate_limits", "CoordinateLimitForce", CoordinateLimitForces),
    ("springs", "SpringGeneralizedForce", SpringGeneralizedForces),
    ("point_springs", "PointToPointSpring", PointToPointSprings),
    ("coordinate_actuators", "CoordinateActuator", CoordinateActuators),
    ("point_actuators", "PointActuator", PointActuators),
    ("torque_actuators", "TorqueActuator", TorqueActuators),
    ("bushings", "BushingForce", BushingForces),
    ("contacts", "HuntCrossleyForce", HuntCrossleyForces),
    ("path_actuators", "PathActuator", PathActuators),
    ("path_springs", "PathSpring", PathSprings),
)
_ACTUATOR_FIELDS = ("coordinate_actuators", "point_actuators", "torque_actuators", "path_actuators")


class OsimForces(eqx.Module):
    """The forces of an OpenSim model's ``ForceSet`` that jaxbio imports, one batch per type
    (module docstring), and what the ``InverseDynamicsTool`` needs to know about the rest.

    - ``coordinate_limits``, ``springs``, ``point_springs``, ``bushings``, ``contacts``,
      ``path_springs``: `CoordinateLimitForces`, `SpringGeneralizedForces`,
      `PointToPointSprings`, `BushingForces`, `HuntCrossleyForces`, `PathSprings` (the passive
      forces); ``coordinate_actuators``, ``point_actuators``, ``torque_actuators``,
      ``path_actuators``: `CoordinateActuators`, `PointActuators`, `TorqueActuators`,
      `PathActuators`.
    - ``paths``: the `jaxbio.forces._osim_paths.OsimPaths` of the path actuators and springs (one
      path each, ForceSet order; ``None`` without them); `select` keeps them all.
    - ``order`` (static): ``(type, name)`` of every force applied by OpenSim (``appliesForce``
      true) in file order, imported or not; ``groups`` (static): the ForceSet's groups,
      ``(name, members)``; ``outside`` (static): forces elsewhere in the model (``<components>``),
      which no ``forces_to_exclude`` reaches; ``controllers`` (static): enabled controllers.
    - ``euler_blocks`` (static): the coordinate indices (rx, ry, rz) of each Ball/Free joint.
    """

    coordinate_limits: CoordinateLimitForces
    springs: SpringGeneralizedForces
    point_springs: PointToPointSprings
    coordinate_actuators: CoordinateActuators
    point_actuators: PointActuators
    torque_actuators: TorqueActuators
    bushings: BushingForces
    contacts: HuntCrossleyForces
    path_actuators: PathActuators
    path_springs: PathSprings
    paths: OsimPaths | None = None
    order: tuple[tuple[str, str], ...] = eqx.field(static=True, default=())
    groups: tuple[tuple[str, tuple[str, ...]], ...] = eqx.field(static=True, default=())
    outside: tuple[str, ...] = eqx.field(static=True, default=())
    controllers: tuple[str, ...] = eqx.field(static=True, default=())
    euler_blocks: tuple[tuple[int, int, int], ...] = eqx.field(static=True, default=())

    @classmethod
    def empty(cls, dtype=None) -> OsimForces:
        """No forces (arrays of ``dtype``, default JAX's float type)."""
        dt = np.dtype(jax.dtypes.canonicalize_dtype(np.float64 if dtype is None else dtype))
        return cls(**{f: kind.build([], dt) for f, _, kind in _BATCHES})

    @property
    def not_imported(self) -> tuple[tuple[str, str], ...]:
        """``(type, name)`` of the applied ForceSet entries jaxbio does not import (muscles …)."""
        imported = {n for f, _, _ in _BATCHES for n in getattr(self, f).names}
        return tuple((t, n) for t, n in self.order if n not in imported)

    @property
    def actuator_names(self) -> tuple[str, ...]:
        """The imported actuators in file order: the columns of `actuator_matrix`."""
        return tuple(n for n, _ in self._actuators())

    def _actuators(self) -> list[tuple[str, int]]:
        """``(name, position in the concatenation coordinate | point | torque actuators)``, file order."""
        names = [n for f in _ACTUATOR_FIELDS for n in getattr(self, f).names]
        at = {n: k for k, n in enumerate(names)}
        return [(n, at[n]) for _, n in self.order if n in at]

    def _actuator_field(self, name: str) -> Array:
        cat = jnp.concatenate([getattr(getattr(self, f), name) for f in _ACTUATOR_FIELDS])
        return cat[np.asarray([k for _, k in self._actuators()], dtype=np.int32)]

    @property
    def optimal_force(self) -> Float[Array, " na"]:
        """``(na,)`` N / N·m, of the actuators in `actuator_names` order."""
        return self._actuator_field("optimal_force")

    @property
    def min_control(self) -> Float[Array, " na"]:
        """``(na,)`` lower control bounds (``-inf``: none), `actuator_names` order."""
        return self._actuator_field("min_control")

    @property
    def max_control(self) -> Float[Array, " na"]:
        """``(na,)`` upper control bounds (``inf``: none), `actuator_names` order."""
        return self._actuator_field("max_control")

    def select(self, names: Iterable[str]) -> OsimForces:
        """The same forces restricted to ``names`` (the rest removed, ``order`` too)."""
        keep = set(names)
        out = {
            f: getattr(self, f).take([k for k, n in enumerate(getattr(self, f).names) if n in keep])
            for f, _, _ in _BATCHES
        }
        return dataclasses.replace(self, **out, order=tuple((t, n) for t, n in self.order if n in keep))


# ---- generalised forces -------------------------------------------------------------------------


def _step(x):
    """Simbody's ``stepUp`` of ``x`` clamped to [0, 1]: ``x³(10 − 15x + 6x²)``."""
    x = jnp.clip(x, 0.0, 1.0)
    return x * x * x * (10.0 + x * (6.0 * x - 15.0))


def _speed_matrices(blocks, c):
    """``E`` ``(nb, 3, 3)`` of each Ball/Free joint: Simbody's speeds ``ω_FM`` (parent frame) are
    ``E ċ`` of the X-Y-Z angles' rates, ``E = [x, R_x y, R_x R_y z]`` (columns)."""
    a = c[np.asarray(blocks, dtype=np.int32)]
    ca, sa, cb, sb = jnp.cos(a[:, 0]), jnp.sin(a[:, 0]), jnp.cos(a[:, 1]), jnp.sin(a[:, 1])
    one, zero = jnp.ones_like(ca), jnp.zeros_like(ca)
    return jnp.stack(
        [jnp.stack([one, zero, sb], -1), jnp.stack([zero, ca, -sa * cb], -1), jnp.stack([zero, sa, ca * cb], -1)], -2
    )


def _to_speeds(blocks, c, cd):
    """OpenSim's coordinate speeds ``u`` ``(nc,)``: ``E ċ`` on each Ball/Free rotation, ``ċ`` elsewhere."""
    if not blocks:
        return cd
    b = np.asarray(blocks, dtype=np.int32)
    return cd.at[b].set(jnp.einsum("bik,bk->bi", _speed_matrices(blocks, c), cd[b], precision=HIGHEST))


def _from_speeds(blocks, c, f):
    """OpenSim's generalised forces ``f`` ``(nc, ...)`` (conjugate to its speeds) in jaxbio's
    coordinates: ``Eᵀ f`` on each Ball/Free joint's rotations, unchanged elsewhere."""
    if not blocks:
        return f
    b = np.asarray(blocks, dtype=np.int32)
    return f.at[b].set(jnp.einsum("bki,bk...->bi...", _speed_matrices(blocks, c), f[b], precision=HIGHEST))


def _on_tree(model, c):
    from jaxbio.coordinates import to_tree

    q = to_tree(model.coordinates, c)
    return q, segment_motion(model.tree, q)


def _world_points(motion, segments, points):
    """World positions ``(k, 3)`` of points given in the frames of ``segments`` (-1: the world)."""
    seg = np.asarray(segments, dtype=np.int32)
    on = seg >= 0
    s = np.where(on, seg, 0)
    X = motion.position[s] + quat.rotate(motion.attitude[s], points)
    return jnp.where(jnp.asarray(on)[:, None], X, points)


def _jacobians(model, q, motion, segments, points):
    """``(J_v, J_ω)`` ``(k, 3, nv)`` of points fixed on ``segments`` (given in their frames);
    zero on the world (``-1``)."""
    seg = np.asarray(segments, dtype=np.int32)
    on = seg >= 0
    jv, jw = jax.vmap(lambda s, p: point_jacobian(model.tree, q, s, p, motion=motion))(
        jnp.asarray(np.where(on, seg, 0)), points
    )
    mask = jnp.asarray(on)[:, None, None]
    return jnp.where(mask, jv, 0.0), jnp.where(mask, jw, 0.0)


def _to_coordinates(model, c, tau_q):
    """``J_cᵀ τ_q``: tree generalised forces ``(nq, ...)`` in the model's coordinates ``(nc, ...)``."""
    J = coordinate_jacobian(model.coordinates, c)
    return jnp.einsum("qc,q...->c...", J, tau_q, precision=HIGHEST)


def _forces_of(model) -> OsimForces:
    """``model.forces``; the empty set for a model without any (`jaxbio.Model.from_tree`)."""
    return OsimForces.empty(model.tree.masses.dtype) if model.forces is None else model.forces


def _coordinates(model, c, name):
    from jaxbio.coordinates import as_coordinates

    return as_coordinates(model.coordinates, c, name)


def _world_attitudes(motion, segments, orientations):
    """World attitudes ``(k, 4)`` of frames with ``orientations`` in the frames of ``segments``."""
    seg = np.asarray(segments, dtype=np.int32)
    on = seg >= 0
    att = quat.multiply(motion.attitude[np.where(on, seg, 0)], orientations)
    return jnp.where(jnp.asarray(on)[:, None], att, orientations)


def _local_points(motion, segments, points):
    """World points ``(k, 3)`` in the frames of ``segments`` (-1: the world, unchanged)."""
    seg = np.asarray(segments, dtype=np.int32)
    on = seg >= 0
    s = np.where(on, seg, 0)
    local = quat.rotate(quat.conjugate(motion.attitude[s]), points - motion.position[s])
    return jnp.where(jnp.asarray(on)[:, None], local, points)


def _body_fixed_xyz(R):
    """Body-fixed X-Y-Z angles ``(k, 3)`` rad of rotation matrices ``R`` ``(k, 3, 3)``
    (``R = R_x(a) R_y(b) R_z(c)``, ``b`` in [−π/2, π/2]; Simbody's
    ``convertRotationToBodyFixedXYZ``)."""
    a = jnp.arctan2(-R[:, 1, 2], R[:, 2, 2])
    b = jnp.arctan2(R[:, 0, 2], jnp.sqrt(R[:, 0, 0] ** 2 + R[:, 0, 1] ** 2))
    c = jnp.arctan2(-R[:, 0, 1], R[:, 0, 0])
    return jnp.stack([a, b, c], -1)


def _bushing_forces(model, q, motion, qd, b: BushingForces):
    """Tree generalised force ``(nq,)`` of Simbody's ``Force::LinearBushing``
    (``LinearBushingImpl::ensureForceCacheValid``): deflections ``(θ, p)`` of M in F (body-fixed
    X-Y-Z angles, origin in F), their rates ``(N(θ) ω_FM^M, ṗ^F)``, ``f = −(K ⊙ deflection + C ⊙
    rate)``; M receives the moment ``R_GM Nᵀ f_θ`` and the force ``R_GF f_p`` at its origin, F
    their opposite at the same place."""
    n = len(b)
    pF = _world_points(motion, b.segments1, b.positions1)
    pM = _world_points(motion, b.segments2, b.positions2)
    RGF = quat.to_matrix(_world_attitudes(motion, b.segments1, b.orientations1))
    RGM = quat.to_matrix(_world_attitudes(motion, b.segments2, b.orientations2))
    RFM = jnp.einsum("kji,kjl->kil", RGF, RGM, precision=HIGHEST)
    pFM_G = pM - pF
    pFM = jnp.einsum("kji,kj->ki", RGF, pFM_G, precision=HIGHEST)
    theta = _body_fixed_xyz(RFM)
    jv, jw = _jacobians(model, q, motion, b.segments1 + b.segments2, jnp.concatenate([b.positions1, b.positions2]))
    v = jnp.einsum("kin,n->ki", jv, qd, precision=HIGHEST)
    w = jnp.einsum("kin,n->ki", jw, qd, precision=HIGHEST)
    w1, w2, vF, vM = w[:n], w[n:], v[:n], v[n:]
    w_FM = jnp.einsum("kji,kj->ki", RGF, w2 - w1, precision=HIGHEST)
    pFM_dot = jnp.einsum("kji,kj->ki", RGF, vM - vF - jnp.cross(w1, pFM_G), precision=HIGHEST)
    w_FM_M = jnp.einsum("kji,kj->ki", RFM, w_FM, precision=HIGHEST)
    c1, s1, c2, s2 = jnp.cos(theta[:, 1]), jnp.sin(theta[:, 1]), jnp.cos(theta[:, 2]), jnp.sin(theta[:, 2])
    zero, one = jnp.zeros_like(c1), jnp.ones_like(c1)
    N = jnp.stack(  # Rotation::calcNForBodyXYZInBodyFrame: θ̇ = N ω (ω in M)
        [
            jnp.stack([c2 / c1, -s2 / c1, zero], -1),
            jnp.stack([s2, c2, zero], -1),
            jnp.stack([-s1 * c2 / c1, s1 * s2 / c1, one], -1),
        ],
        -2,
    )
    theta_dot = jnp.einsum("kij,kj->ki", N, w_FM_M, precision=HIGHEST)
    f_rot = -(b.rotational_stiffness * theta + b.rotational_damping * theta_dot)
    f_tr = -(b.translational_stiffness * pFM + b.translational_damping * pFM_dot)
    m_G = jnp.einsum("kij,kj->ki", RGM, jnp.einsum("kji,kj->ki", N, f_rot, precision=HIGHEST), precision=HIGHEST)
    f_G = jnp.einsum("kij,kj->ki", RGF, f_tr, precision=HIGHEST)
    # M: m_G and f_G at its origin; F: −(m_G + p_FM × f_G) and −f_G at its origin
    torques = jnp.concatenate([-(m_G + jnp.cross(pFM_G, f_G)), m_G])
    forces = jnp.concatenate([-f_G, f_G])
    return jnp.einsum("kin,ki->n", jw, torques, precision=HIGHEST) + jnp.einsum(
        "kin,ki->n", jv, forces, precision=HIGHEST
    )


def _contact_forces(model, q, motion, qd, h: HuntCrossleyForces):
    """Tree generalised force ``(nq,)`` of Simbody's ``HuntCrossleyForce`` (module docstring)."""
    jv, force, *_ = _contacts(model, q, motion, qd, h)
    return jnp.einsum("kin,ki->n", jv, jnp.concatenate([-force, force]), precision=HIGHEST)


def _contacts(model, q, motion, qd, h: HuntCrossleyForces):
    """``(J_v, F, exists, stop, applied)`` of each pair: ``J_v`` ``(2p, 3, nq)`` of the contact
    point on the first surfaces' segments then on the second's, the force ``F`` ``(p, 3)`` N
    (world) on the second (its opposite on the first), and ``(p,)`` masks: in contact, pulling
    (``f ≤ 0``: Simbody stops there) and applied."""
    S, nf = len(h.segments), len(h)
    X = _world_points(motion, h.segments, h.positions)
    R = quat.to_matrix(_world_attitudes(motion, h.segments, h.orientations))
    hs = np.asarray(h.halfspace, dtype=bool)
    sf = np.asarray(h.surface_forces, dtype=np.int32)
    a, b = np.asarray(h.first, dtype=np.int32), np.asarray(h.second, dtype=np.int32)
    # GeneralContactSubsystem's sweep and prune orders the contacts: surfaces sorted by the start of
    # their extent (half-spaces: −inf) along the axis where their centres vary most
    count = np.bincount(sf, minlength=nf).astype(float)
    mean = jax.ops.segment_sum(X, sf, nf) / jnp.asarray(count, X.dtype)[:, None]
    var = jax.ops.segment_sum(jnp.abs(X - mean[sf]), sf, nf)
    axis = jnp.where(var[:, 0] > var[:, 1], 0, 1)
    axis = jnp.where(var[:, 2] > jnp.take_along_axis(var, axis[:, None], 1)[:, 0], 2, axis)
    start = jnp.take_along_axis(X, axis[sf][:, None], 1)[:, 0] - h.radii
    start = jnp.where(jnp.asarray(hs), -jnp.inf, start)
    index = np.arange(S)
    before = (start[None, :] < start[:, None]) | (
        (start[None, :] == start[:, None]) & (index[None, :] < index[:, None])
    )
    rank = jnp.sum(jnp.asarray(sf[None, :] == sf[:, None]) & before, axis=1)
    key = jnp.minimum(rank[a], rank[b]) * S + jnp.maximum(rank[a], rank[b])
    # the contacts (CollisionDetectionAlgorithm::HalfSpaceSphere, ::SphereSphere)
    Ra, Xa, Xb, ra, rb = R[a], X[a], X[b], h.radii[a], h.radii[b]
    inside = jnp.einsum("kji,kj->ki", Ra, Xb - Xa, precision=HIGHEST)  # sphere centre in the half-space
    depth_h = rb + inside[:, 0]
    at_h = Xa + jnp.einsum("kij,kj->ki", Ra, inside.at[:, 0].set(depth_h / 2), precision=HIGHEST)
    delta = Xb - Xa
    dist = norm(delta)
    depth_s = ra + rb - dist
    normal_s = unit(delta, jnp.zeros_like(delta))
    on_h = jnp.asarray(hs[a])
    exists = jnp.where(on_h, depth_h > 0, (depth_s > 0) & (dist != 0))
    depth = jnp.where(exists, jnp.where(on_h, depth_h, depth_s), 0.0)
    normal = jnp.where(on_h[:, None], -Ra[:, :, 0], normal_s)
    at = jnp.where(on_h[:, None], at_h, Xa + (ra - depth_s / 2)[:, None] * normal_s)
    rsum = ra + rb
    radius = jnp.where(on_h, rb, ra * rb / jnp.where(rsum > 0, rsum, 1.0))
    # HuntCrossleyForceImpl::calcForce
    at = at + (depth * (0.5 - h.share))[:, None] * normal
    k = h.stiffness
    f_hertz = (4.0 / 3.0) * k * depth * safe_sqrt(radius * k * depth)
    segs = h.segments
    ends = tuple(segs[i] for i in a) + tuple(segs[i] for i in b)
    points = _local_points(motion, ends, jnp.concatenate([at, at]))
    jv, _ = _jacobians(model, q, motion, ends, points)
    P = len(a)
    v = jnp.einsum("kin,n->ki", jv, qd, precision=HIGHEST)
    v = v[:P] - v[P:]
    vn = jnp.sum(v * normal, -1)
    vt = v - vn[:, None] * normal
    f = f_hertz * (1.0 + 1.5 * h.dissipation * vn)
    stop = exists & (f <= 0)  # Simbody returns here: this force applies no later contact
    pf = np.asarray(h.pair_forces, dtype=np.int32)
    earlier = jnp.asarray(pf[:, None] == pf[None, :]) & (key[None, :] < key[:, None])
    applied = exists & ~stop & ~jnp.any(earlier & stop[None, :], axis=1)
    slip = norm(vt)
    rel = slip / h.transition_velocity
    friction = f * (
        jnp.minimum(rel, 1.0) * (h.dynamic_friction + 2 * (h.static_friction - h.dynamic_friction) / (1 + rel * rel))
        + h.viscous_friction * slip
    )
    force = f[:, None] * normal + friction[:, None] * unit(vt, jnp.zeros_like(vt))
    return jv, jnp.where(applied[:, None], force, 0.0), exists, stop, applied


def passive_forces(model, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"]) -> Float[Array, " nc"]:
    """Generalised force of the model's passive forces: ``CoordinateLimitForce``,
    ``SpringGeneralizedForce``, ``PointToPointSpring``, ``BushingForce``, ``HuntCrossleyForce``
    and ``PathSpring`` (module docstring).

    Args:
        model: an `Model` (its ``forces``; `applied_forces` selects a subset).
        c, cd: ``(nc,)`` rad / m and rad/s / m/s, OpenSim's coordinates and their rates.

    Returns:
        ``(nc,)`` N·m / N in OpenSim's coordinates (jaxbio's convention for Ball/Free joints):
        what these forces add to the equations of motion, so OpenSim's inverse dynamics with
        them is ``jaxbio.inverse_dynamics(model, …) − passive_forces(…)``.
    """
    c = _coordinates(model, c, "c")
    cd = _coordinates(model, cd, "cd").astype(c.dtype)
    F = _forces_of(model)
    nc = c.shape[0]
    mobility = jnp.zeros(nc, c.dtype)
    u = _to_speeds(F.euler_blocks, c, cd)  # what OpenSim's Coordinate::getSpeedValue returns
    for batch in (F.coordinate_limits, F.springs):
        if len(batch):
            mobility = mobility.at[np.asarray(batch.coordinates, dtype=np.int32)].add(batch(c, u))
    tau = _from_speeds(F.euler_blocks, c, mobility)
    s = F.point_springs
    if len(s):
        q, motion = _on_tree(model, c)
        r = _world_points(motion, s.segments2, s.points2) - _world_points(motion, s.segments1, s.points1)
        f1 = (s.stiffness * (norm(r) - s.rest_length))[:, None] * unit(r, jnp.zeros_like(r))
        jv, _ = _jacobians(model, q, motion, s.segments1 + s.segments2, jnp.concatenate([s.points1, s.points2]))
        tau_q = jnp.einsum("kin,ki->n", jv, jnp.concatenate([f1, -f1]), precision=HIGHEST)
        tau = tau + _to_coordinates(model, c, tau_q)
    if len(F.bushings) or F.contacts.first:  # (a HuntCrossleyForce whose surfaces cannot touch: nothing)
        q, motion = _on_tree(model, c)
        qd = jnp.einsum("qc,c->q", coordinate_jacobian(model.coordinates, c), cd, precision=HIGHEST)
        tau_q = jnp.zeros(q.shape[0], c.dtype)
        if len(F.bushings):
            tau_q = tau_q + _bushing_forces(model, q, motion, qd, F.bushings)
        if F.contacts.first:
            tau_q = tau_q + _contact_forces(model, q, motion, qd, F.contacts)
        tau = tau + _to_coordinates(model, c, tau_q)
    ps = F.path_springs
    if len(ps):
        idx = np.asarray(ps.path_index, dtype=np.int32)
        length = path_lengths(F.paths, model, c)[idx]
        r = path_moment_arms(F.paths, model, c)[idx]  # −∂l/∂c (k, nc)
        speed = -jnp.einsum("kc,c->k", r, cd, precision=HIGHEST)
        stretch = jnp.maximum(length - ps.resting_length, 0.0)
        tension = ps.stiffness * stretch * (1.0 + ps.dissipation * speed)
        tau = tau + jnp.einsum("kc,k->c", r, tension, precision=HIGHEST)
    return tau


def path_spring_tensions(model, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"]) -> Float[Array, " k"]:
    """``(k,)`` N, the tension of each ``PathSpring`` (``model.forces.path_springs.names``
    order; OpenSim's ``PathSpring::getTension``) at OpenSim's coordinates ``c`` and their rates
    ``cd`` ``(nc,)`` rad / m, rad/s / m/s."""
    c = _coordinates(model, c, "c")
    cd = _coordinates(model, cd, "cd").astype(c.dtype)
    F = _forces_of(model)
    ps = F.path_springs
    if not len(ps):
        return jnp.zeros(0, c.dtype)
    idx = np.asarray(ps.path_index, dtype=np.int32)
    length, speed = jax.jvp(lambda x: path_lengths(F.paths, model, x)[idx], (c,), (cd,))
    return ps.stiffness * jnp.maximum(length - ps.resting_length, 0.0) * (1.0 + ps.dissipation * speed)


def actuator_matrix(model, c: Float[ArrayLike, " nc"]) -> Float[Array, "nc na"]:
    """``B(c)`` ``(nc, na)``: column ``j`` is the generalised force (N·m / N per N or N·m of
    actuation) of actuator ``j`` of ``model.forces.actuator_names`` (file order), so that the
    actuators' generalised force is ``B(c) (optimal_force ⊙ controls)`` (`actuator_forces`).

    ``c``: ``(nc,)`` rad / m. ``CoordinateActuator``: a unit generalised force on its coordinate
    (``Eᵀ`` row on a Ball/Free rotation); ``PointActuator``: ``J_cᵀ J_v(X)ᵀ d`` (world direction
    ``d`` at the point ``X``); ``TorqueActuator``: ``J_cᵀ (J_ω(A) − J_ω(B))ᵀ a`` (world axis ``a``);
    ``PathActuator``: its path's moment arms ``−∂l/∂c`` (`jaxbio.forces._osim_paths`).
    """
    c = _coordinates(model, c, "c")
    F = _forces_of(model)
    nc = c.shape[0]
    cols = []
    ca = F.coordinate_actuators
    if len(ca):
        onehot = np.zeros((nc, len(ca)))
        onehot[np.asarray(ca.coordinates), np.arange(len(ca))] = 1.0
        cols.append(_from_speeds(F.euler_blocks, c, jnp.asarray(onehot, c.dtype)))
    pa, ta = F.point_actuators, F.torque_actuators
    if len(pa) or len(ta):
        q, motion = _on_tree(model, c)
    if len(pa):
        seg = np.asarray(pa.segments, dtype=np.int32)
        s = np.where(seg >= 0, seg, 0)
        att, pos = motion.attitude[s], motion.position[s]
        local = jnp.where(
            jnp.asarray(pa.point_is_global)[:, None], quat.rotate(quat.conjugate(att), pa.points - pos), pa.points
        )
        d = jnp.where(jnp.asarray(pa.force_is_global)[:, None], pa.directions, quat.rotate(att, pa.directions))
        jv, _ = _jacobians(model, q, motion, pa.segments, local)
        cols.append(_to_coordinates(model, c, jnp.einsum("kin,ki->nk", jv, d, precision=HIGHEST)))
    if len(ta):
        seg = np.asarray(ta.segments_a, dtype=np.int32)
        on = jnp.asarray(seg >= 0)[:, None]
        att = motion.attitude[np.where(seg >= 0, seg, 0)]
        a = jnp.where(jnp.asarray(ta.torque_is_global)[:, None] | ~on, ta.axes, quat.rotate(att, ta.axes))
        zeros = jnp.zeros((2 * len(ta), 3), c.dtype)
        _, jw = _jacobians(model, q, motion, ta.segments_a + ta.segments_b, zeros)
        jw = jw[: len(ta)] - jw[len(ta) :]
        cols.append(_to_coordinates(model, c, jnp.einsum("kin,ki->nk", jw, a, precision=HIGHEST)))
    if len(F.path_actuators):
        idx = np.asarray(F.path_actuators.path_index, dtype=np.int32)
        cols.append(path_moment_arms(F.paths, model, c)[idx].T)
    if not cols:
        return jnp.zeros((nc, 0), c.dtype)
    B = jnp.concatenate(cols, axis=1)
    return B[:, np.asarray([k for _, k in F._actuators()], dtype=np.int32)]


def actuator_forces(model, c: Float[ArrayLike, " nc"], controls: Float[ArrayLike, " na"]) -> Float[Array, " nc"]:
    """Generalised force ``(nc,)`` N·m / N of the imported actuators at controls ``(na,)``
    (`OsimForces.actuator_names` order, not clamped): ``B(c) (optimal_force ⊙ controls)``."""
    B = actuator_matrix(model, c)
    u = jnp.asarray(controls, B.dtype)
    if u.shape != (B.shape[1],):
        raise ValueError(
            f"controls must be ({B.shape[1]},), one per actuator {list(_forces_of(model).actuator_names)}; "
            f"got shape {u.shape}"
        )
    return jnp.sum(B * (_forces_of(model).optimal_force.astype(B.dtype) * u)[None, :], axis=1)


# ---- forces_to_exclude -----------------------------------------------------------------------------


def _exclusion_list(forces_to_exclude) -> list[str]:
    if forces_to_exclude is None:
        return []
    if isinstance(forces_to_exclude, str):
        return forces_to_exclude.split()
    items = list(forces_to_exclude)
    if not all(isinstance(x, str) for x in items):
        raise ValueError(f"forces_to_exclude must be names (str), got {forces_to_exclude!r}")
    return [w for x in items for w in x.split()]


def excluded_names(forces: OsimForces, forces_to_exclude) -> tuple[set[str], list[str]]:
    """The ForceSet entries OpenSim's ``DynamicsTool::disableModelForces`` switches off for
    ``forces_to_exclude`` (names, group names, or the keywords ``all``, ``actuators``,
    ``muscles`` in any case), and the words that matched nothing.

    As in OpenSim 4.6: keywords first; then, if the ForceSet has groups, a word is looked up
    among the group names only (a force's own name then matches nothing), else among the force
    names."""
    out: set[str] = set()
    unmatched = []
    group_names = [g for g, _ in forces.groups]
    for word in _exclusion_list(forces_to_exclude):
        key = word.upper()
        if key == "ALL":
            return {n for _, n in forces.order}, unmatched
        if key == "ACTUATORS":
            out |= {n for t, n in forces.order if t in MUSCLE_TYPES or t in ACTUATOR_TYPES}
        elif key == "MUSCLES":
            out |= {n for t, n in forces.order if t in MUSCLE_TYPES}
        elif group_names:
            if word in group_names:
                out |= set(dict(forces.groups)[word])
            else:
                unmatched.append(word)
        elif word in {n for _, n in forces.order}:
            out.add(word)
        else:
            unmatched.append(word)
    return out, unmatched


def applied_forces(model, forces_to_exclude=("muscles",)):
    """``model`` with only the forces OpenSim's ``InverseDynamicsTool`` applies when it excludes
    ``forces_to_exclude`` (`excluded_names`: names, ForceSet group names, or the keywords
    ``"all"``, ``"actuators"``, ``"muscles"``; a string is split at white space, as the setup
    file's ``<forces_to_exclude>``). A word that matches nothing is ignored with a warning, as
    OpenSim does.

    Raises ``ValueError`` (naming the file and the forces) where OpenSim would apply a force
    jaxbio does not compute: a ForceSet entry of a type not imported (a muscle, a ligament,
    contact …) that is not excluded, a force outside the ForceSet, or an enabled controller
    while an actuator is applied (OpenSim's controls would then not be zero). Actuators without
    controllers have zero controls in OpenSim's tools, hence no force.
    """
    forces: OsimForces = _forces_of(model)
    where = getattr(model, "path", "") or "model"
    excluded, unmatched = excluded_names(forces, forces_to_exclude)
    for word in unmatched:
        warnings.warn(
            f"{where}: forces_to_exclude: no force or group named {word!r}"
            + (" (with ForceSet groups, OpenSim looks up group names only)" if forces.groups else ""),
            stacklevel=2,
        )
    applied = forces.select(n for _, n in forces.order if n not in excluded)
    missing = applied.not_imported
    if missing:
        listed = ", ".join(f"{t} {n!r}" for t, n in missing[:6]) + (" …" if len(missing) > 6 else "")
        hint = 'exclude them with forces_to_exclude ("muscles", "actuators", "all", a group or their names)'
        raise ValueError(
            f"{where}: OpenSim's inverse dynamics would apply {len(missing)} force(s) that jaxbio does "
            f"not import: {listed}; {hint}"
        )
    if forces.outside:
        raise ValueError(
            f"{where}: forces outside the ForceSet ({', '.join(forces.outside)}) are applied by OpenSim "
            "and cannot be excluded; jaxbio does not import them"
        )
    acts = [n for t, n in applied.order if t in ACTUATOR_TYPES or t in MUSCLE_TYPES]
    if forces.controllers and acts:
        raise ValueError(
            f"{where}: controllers {list(forces.controllers)} would drive the actuators "
            f"{acts[:6]} in OpenSim's tools; jaxbio does not import controllers (exclude the actuators "
            'with forces_to_exclude "actuators")'
        )
    return dataclasses.replace(model, forces=applied)


# ---- reading a ForceSet ----------------------------------------------------------------------------

#: (segment, position, orientation) of a frame in its segment's frame
FramePose = tuple[int, np.ndarray, np.ndarray]


def read_control(elem: ET.Element, tag: str, where: str, default: float) -> float:
    """A control bound (``min_control``, ``max_control``) of an actuator or muscle element: a
    number, ±inf allowed, ``default`` when absent; ``ValueError`` naming ``where`` otherwise."""
    from jaxbio._osim_xml import child_text as _text

    text = _text(elem, tag)
    if text is None or text == "":
        return default
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{where}: <{tag}> is not a number: {text!r}") from None
    if np.isnan(v):
        raise ValueError(f"{where}: <{tag}> is NaN")
    return v


def read_forces(
    model_elem: ET.Element,
    tree,
    coordinates: Sequence[str],
    motion_types: Sequence[str],
    euler_blocks: Sequence[tuple[int, int, int]],
    frame: Callable[[str, str, str, bool], FramePose],
    dtype,
) -> tuple[OsimForces, set, set, tuple[str, ...]]:
    """The `OsimForces` of a ``<Model>`` element, the set of ForceSet elements imported, the
    set of those disabled (``appliesForce`` false: OpenSim applies nothing) and notes on forces
    of an imported type left out (``Model.ignored``: a HuntCrossleyForce on a ContactMesh).

    ``frame(path, owner, where, body_only)`` resolves a body or frame name / path (relative to
    the component path ``owner``) to its pose in a tree segment, raising ``ValueError``; the
    paths of path forces are points on ``tree`` (`jaxbio.forces._osim_paths.read_paths`)."""
    from jaxbio._osim_xml import (
        describe as _describe,
        child_flag as _flag,
        child_numbers as _numbers,
        child_text as _text,
    )
    from jaxbio._osim_xml import euler_xyz

    def number(elem, tag, where, default):
        return float(_numbers(elem, tag, 1, where, default=[default])[0])

    control = read_control

    def vector(elem, tag, where, default):
        return np.asarray(_numbers(elem, tag, 3, where, default=default), dtype=float)

    def direction(elem, tag, where, default):
        v = vector(elem, tag, where, default)
        n = np.linalg.norm(v)
        if not n > 0:
            raise ValueError(f"{where}: <{tag}> is zero")
        return v / n

    def coordinate(elem, where):
        name = _text(elem, "coordinate")
        if not name:
            raise ValueError(f"{where}: no <coordinate>")
        if name not in coordinates:
            raise ValueError(f"{where}: no coordinate {name!r} in the model; coordinates are {list(coordinates)}")
        return list(coordinates).index(name)

    def socket(elem, which, legacy):
        for tag in (f"socket_{which}", f"socket_{which}_connectee_name", f"connector_{which}_connectee_name", legacy):
            text = _text(elem, tag)
            if text:
                return text
        return None

    def rotated(pose, v):  # numpy: a frame's vector in its segment's frame
        return np.asarray(quat.to_matrix(np.asarray(pose[2], dtype=float))) @ v

    def enabled(elem, where):
        if elem.find("appliesForce") is not None:
            return _flag(elem, "appliesForce", where)
        return not _flag(elem, "isDisabled", where)

    geometries = {
        g.get("name", ""): g for cs in model_elem.findall("ContactGeometrySet") for g in cs.findall("objects/*")
    }

    def contact_row(o, name, where):
        """A HuntCrossleyForce's row for `HuntCrossleyForces.build`, or ``(None, note)`` when it
        touches geometry jaxbio cannot import (a ContactMesh …)."""
        surfaces = []
        sets = [e for e in o if e.tag.split("::")[-1] == "ContactParametersSet"]
        for params in (p for cs in sets for objs in cs.findall("objects") for p in objs):
            material = {
                k: number(params, k, where, 0.0)
                for k in ("stiffness", "dissipation", "static_friction", "dynamic_friction", "viscous_friction")
            }
            for g in (_text(params, "geometry") or "").split():
                geom = geometries.get(g.rstrip("/").split("/")[-1])
                if geom is None:
                    raise ValueError(f"{where}: no contact geometry {g!r} in the ContactGeometrySet")
                if geom.tag not in ("ContactSphere", "ContactHalfSpace"):
                    return None, (
                        f"HuntCrossleyForce {name!r}: not imported, its contact geometry {g!r} is a {geom.tag} "
                        "(jaxbio: ContactSphere and ContactHalfSpace)"
                    )
                here = _describe(geom)
                path = socket(geom, "frame", "body_name")
                if not path:
                    raise ValueError(f"{here}: no <socket_frame> (or <body_name>)")
                seg, p, r = frame(path, f"/contactgeometryset/{geom.get('name', '')}", here, False)
                radius = number(geom, "radius", here, 0.0) if geom.tag == "ContactSphere" else 0.0
                surfaces.append(
                    dict(
                        material,
                        segment=seg,
                        position=p + rotated((seg, p, r), vector(geom, "location", here, np.zeros(3))),
                        orientation=quat.multiply(
                            np.asarray(r, dtype=float), euler_xyz(vector(geom, "orientation", here, np.zeros(3)))
                        ),
                        radius=radius,
                        halfspace=geom.tag == "ContactHalfSpace",
                    )
                )
        return dict(transition_velocity=number(o, "transition_velocity", where, 0.01), surfaces=surfaces), None

    notes: list[str] = []
    rows: dict[str, list[dict]] = {t: [] for _, t, _ in _BATCHES}
    order: list[tuple[str, str]] = []
    imported, disabled = set(), set()
    path_elems: list[ET.Element] = []
    force_sets = model_elem.findall("ForceSet")
    names_seen: dict[str, str] = {}
    for o in (o for s in force_sets for o in s.findall("objects/*")):
        kind, name = o.tag, o.get("name", "")
        where = _describe(o)
        if not enabled(o, where):
            disabled.add(o)
            continue
        if name in names_seen:
            raise ValueError(f"{where}: the force name is also used by a {names_seen[name]}")
        names_seen[name] = kind
        order.append((kind, name))
        if kind not in IMPORTED_TYPES:
            continue
        owner = f"/forceset/{name}"
        if kind == "CoordinateLimitForce":
            k = coordinate(o, where)
            w = DEGREE if motion_types[k] == "rotational" else 1.0
            transition = number(o, "transition", where, 0.1)
            if transition == 0:
                raise ValueError(f"{where}: <transition> is 0 (OpenSim refuses a zero-length switching interval)")
            row = dict(
                upper_limit=w * number(o, "upper_limit", where, 0.0),
                lower_limit=w * number(o, "lower_limit", where, 0.0),
                upper_stiffness=number(o, "upper_stiffness", where, 1.0) / w,
                lower_stiffness=number(o, "lower_stiffness", where, 1.0) / w,
                damping=number(o, "damping", where, 0.001) / w,
                transition=w * transition,
                coordinates=k,
            )
        elif kind == "SpringGeneralizedForce":
            row = dict(
                stiffness=number(o, "stiffness", where, 0.0),
                rest_length=number(o, "rest_length", where, 0.0),
                viscosity=number(o, "viscosity", where, 0.0),
                coordinates=coordinate(o, where),
            )
        elif kind == "PointToPointSpring":
            ends = []
            for i in (1, 2):
                path = socket(o, f"body{i}", f"body{i}")
                if not path:
                    raise ValueError(f"{where}: no <socket_body{i}> (or <body{i}>)")
                seg, p, r = frame(path, owner, where, True)
                ends.append((seg, p + rotated((seg, p, r), vector(o, f"point{i}", where, np.zeros(3)))))
            row = dict(
                points1=ends[0][1],
                points2=ends[1][1],
                segments1=ends[0][0],
                segments2=ends[1][0],
                stiffness=number(o, "stiffness", where, 1.0),
                rest_length=number(o, "rest_length", where, 0.0),
            )
        elif kind == "BushingForce":
            row = dict(
                zip(
                    ("rotational_stiffness", "translational_stiffness", "rotational_damping", "translational_damping"),
                    (
                        vector(o, tag, where, np.zeros(3))
                        for tag in (
                            "rotational_stiffness",
                            "translational_stiffness",
                            "rotational_damping",
                            "translational_damping",
                        )
                    ),
                )
            )
            for i in (1, 2):
                path = socket(o, f"frame{i}", f"body_{i}")
                if not path:
                    raise ValueError(f"{where}: no <socket_frame{i}> (or <body_{i}>)")
                seg, p, r = frame(path, owner, where, False)
                if o.find(f"socket_frame{i}") is None and o.find(f"body_{i}") is not None:  # 3.x: an offset
                    offset_q = euler_xyz(vector(o, f"orientation_body_{i}", where, np.zeros(3)))
                    p = p + rotated((seg, p, r), vector(o, f"location_body_{i}", where, np.zeros(3)))
                    r = quat.multiply(np.asarray(r, dtype=float), offset_q)
                row.update({f"positions{i}": p, f"orientations{i}": r, f"segments{i}": seg})
        elif kind == "HuntCrossleyForce":
            row, note = contact_row(o, name, where)
            if note:
                notes.append(note)
                continue
        elif kind == "PathSpring":
            row = dict(path_index=len(path_elems))
            for tag in ("resting_length", "stiffness", "dissipation"):  # PathSpring::extendFinalizeFromProperties
                v = number(o, tag, where, np.nan)
                if not v >= 0:
                    raise ValueError(f"{where}: <{tag}> must be a number ≥ 0 (OpenSim refuses {v:g})")
                row[tag] = v
            path_elems.append(o)
        elif kind == "PathActuator":
            row = dict(
                optimal_force=number(o, "optimal_force", where, 1.0),
                min_control=control(o, "min_control", where, -np.inf),
                max_control=control(o, "max_control", where, np.inf),
                path_index=len(path_elems),
            )
            path_elems.append(o)
        else:
            bounds = dict(
                optimal_force=number(o, "optimal_force", where, 1.0),
                min_control=control(o, "min_control", where, -np.inf),
                max_control=control(o, "max_control", where, np.inf),
            )
            if kind == "CoordinateActuator":
                row = dict(bounds, coordinates=coordinate(o, where))
            elif kind == "PointActuator":
                body = _text(o, "body")
                if not body:
                    raise ValueError(f"{where}: no <body>")
                pose = frame(body, owner, where, True)
                point_global = _flag(o, "point_is_global", where)
                force_global = _flag(o, "force_is_global", where)
                p = vector(o, "point", where, np.zeros(3))
                d = direction(o, "direction", where, [1.0, 0.0, 0.0])
                row = dict(
                    bounds,
                    points=p if point_global else pose[1] + rotated(pose, p),
                    directions=d if force_global else rotated(pose, d),
                    segments=pose[0],
                    point_is_global=point_global,
                    force_is_global=force_global,
                )
            else:  # TorqueActuator
                paths = [_text(o, "bodyA"), _text(o, "bodyB")]
                if not all(paths):
                    raise ValueError(f"{where}: needs <bodyA> and <bodyB> (OpenSim refuses a missing one)")
                a, b = (frame(p, owner, where, False) for p in paths)
                torque_global = True if o.find("torque_is_global") is None else _flag(o, "torque_is_global", where)
                axis = direction(o, "axis", where, [0.0, 0.0, 1.0])
                row = dict(
                    bounds,
                    axes=axis if torque_global else rotated(a, axis),
                    segments_a=a[0],
                    segments_b=b[0],
                    torque_is_global=torque_global,
                )
        rows[kind].append(dict(row, names=name))
        imported.add(o)
    if any(row["segments1"] == row["segments2"] for row in rows["PointToPointSpring"]):
        bad = next(r["names"] for r in rows["PointToPointSpring"] if r["segments1"] == r["segments2"])
        raise ValueError(
            f"PointToPointSpring {bad!r}: both ends are on one rigid segment (OpenSim refuses bodies "
            "with the same base frame)"
        )
    groups = tuple(
        (g.get("name", ""), tuple((_text(g, "members") or "").split()))
        for s in force_sets
        for g in s.findall("groups/ObjectGroup")
    )
    outside = []
    for parent in [model_elem] + model_elem.findall("BodySet/objects/Body"):
        for holder in parent.findall("components") + parent.findall("ComponentSet/objects"):
            outside += [_describe(e) for e in holder if e.tag in FORCE_TYPES]
    controllers = [
        _describe(e)
        for e in model_elem.findall("ControllerSet/objects/*")
        if (
            _flag(e, "enabled", _describe(e))
            if e.find("enabled") is not None
            else not _flag(e, "isDisabled", _describe(e))
        )
    ]
    dt = np.dtype(jax.dtypes.canonicalize_dtype(np.float64 if dtype is None else dtype))
    paths = (
        OsimPaths(**read_paths(model_elem, path_elems, tree, coordinates, frame, dt, "path forces"))
        if path_elems
        else None
    )
    forces = OsimForces(
        **{f: kind.build(rows[t], dt) for f, t, kind in _BATCHES},
        paths=paths,
        order=tuple(order),
        groups=groups,
        outside=tuple(outside),
        controllers=tuple(controllers),
        euler_blocks=tuple(tuple(int(i) for i in b) for b in euler_blocks),
    )
    return forces, imported, disabled, tuple(notes)
