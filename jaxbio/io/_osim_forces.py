"""OpenSim's forces that matter for the tools: limits, springs and actuators of a ``ForceSet``.

`jaxbio.io.load_osim` imports these ``ForceSet`` entries of OpenSim 3.x and 4.x files into
`OsimForces` (``Model.forces``), every number in SI units; Thelen and Millard muscles go to
``Model.muscles`` (`jaxbio.io._osim_muscles`), every other type stays listed in
``Model.ignored``. The formulas are opensim-core's (``OpenSim/Simulation/Model``
and ``OpenSim/Actuators``, OpenSim 4.6), and the generalised forces equal live OpenSim's to
round-off (tests/io/test_osim_forces.py).

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
from jaxbio._validate import to_device
from jaxbio.coordinates import jacobian as coordinate_jacobian
from jaxbio.dynamics.kinematics import point_jacobian, segment_motion
from jaxbio.spatial import norm, unit

__all__ = [
    "OsimForces",
    "CoordinateLimitForces",
    "SpringGeneralizedForces",
    "PointToPointSprings",
    "CoordinateActuators",
    "PointActuators",
    "TorqueActuators",
    "passive_forces",
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
            changes[f.name] = tuple(v[i] for i in idx) if isinstance(v, tuple) else v[idx]
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


_BATCHES = (
    ("coordinate_limits", "CoordinateLimitForce", CoordinateLimitForces),
    ("springs", "SpringGeneralizedForce", SpringGeneralizedForces),
    ("point_springs", "PointToPointSpring", PointToPointSprings),
    ("coordinate_actuators", "CoordinateActuator", CoordinateActuators),
    ("point_actuators", "PointActuator", PointActuators),
    ("torque_actuators", "TorqueActuator", TorqueActuators),
)
_ACTUATOR_FIELDS = ("coordinate_actuators", "point_actuators", "torque_actuators")


class OsimForces(eqx.Module):
    """The forces of an OpenSim model's ``ForceSet`` that jaxbio imports, one batch per type
    (module docstring), and what the ``InverseDynamicsTool`` needs to know about the rest.

    - ``coordinate_limits``, ``springs``, ``point_springs``: `CoordinateLimitForces`,
      `SpringGeneralizedForces`, `PointToPointSprings` (the passive forces);
      ``coordinate_actuators``, ``point_actuators``, ``torque_actuators``: `CoordinateActuators`,
      `PointActuators`, `TorqueActuators`.
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


def passive_forces(model, c: Float[ArrayLike, " nc"], cd: Float[ArrayLike, " nc"]) -> Float[Array, " nc"]:
    """Generalised force of the model's passive forces: ``CoordinateLimitForce``,
    ``SpringGeneralizedForce`` and ``PointToPointSpring`` (module docstring).

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
    return tau


def actuator_matrix(model, c: Float[ArrayLike, " nc"]) -> Float[Array, "nc na"]:
    """``B(c)`` ``(nc, na)``: column ``j`` is the generalised force (N·m / N per N or N·m of
    actuation) of actuator ``j`` of ``model.forces.actuator_names`` (file order), so that the
    actuators' generalised force is ``B(c) (optimal_force ⊙ controls)`` (`actuator_forces`).

    ``c``: ``(nc,)`` rad / m. ``CoordinateActuator``: a unit generalised force on its coordinate
    (``Eᵀ`` row on a Ball/Free rotation); ``PointActuator``: ``J_cᵀ J_v(X)ᵀ d`` (world direction
    ``d`` at the point ``X``); ``TorqueActuator``: ``J_cᵀ (J_ω(A) − J_ω(B))ᵀ a`` (world axis ``a``).
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
    from jaxbio.io._osim_xml import _text

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
    coordinates: Sequence[str],
    motion_types: Sequence[str],
    euler_blocks: Sequence[tuple[int, int, int]],
    frame: Callable[[str, str, str, bool], FramePose],
    dtype,
) -> tuple[OsimForces, set, set]:
    """The `OsimForces` of a ``<Model>`` element, the set of ForceSet elements imported and the
    set of those disabled (``appliesForce`` false: OpenSim applies nothing).

    ``frame(path, owner, where, body_only)`` resolves a body or frame name / path (relative to
    the component path ``owner``) to its pose in a tree segment, raising ``ValueError``."""
    from jaxbio.io._osim_xml import _describe, _flag, _numbers, _text

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

    rows: dict[str, list[dict]] = {t: [] for _, t, _ in _BATCHES}
    order: list[tuple[str, str]] = []
    imported, disabled = set(), set()
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
    forces = OsimForces(
        **{f: kind.build(rows[t], dt) for f, t, kind in _BATCHES},
        order=tuple(order),
        groups=groups,
        outside=tuple(outside),
        controllers=tuple(controllers),
        euler_blocks=tuple(tuple(int(i) for i in b) for b in euler_blocks),
    )
    return forces, imported, disabled
