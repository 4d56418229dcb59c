"""`load_osim`: the skeleton of an OpenSim model (``.osim``, OpenSim 3.x and 4.x XML).

Reads bodies, the ground, gravity, joints and coordinates with `xml.etree` (outside jit, into
numpy) and builds a `jaxbio.SegmentTree` with the model builder (`jaxbio.models.build`) plus a
`jaxbio.coordinates.CoordinateMap` from OpenSim's coordinates to the tree's. Returns an
`Model`.

**Formats.** 4.x files (``<JointSet>``; each joint's ``socket_parent_frame`` /
``socket_child_frame`` names a body, the ground or a ``PhysicalOffsetFrame`` in the joint's
``<frames>``, a body's ``<components>`` or the model's ``<components>``; paths absolute or relative
to the joint) and 3.x / 2.x files (joints nested in ``<Body><Joint>``, with ``parent_body``,
``location_in_parent``/``orientation_in_parent`` on the parent and ``location``/``orientation``
on the child). Orientations are OpenSim's body-fixed X-Y-Z Euler angles (rad).

**Frames.** jaxbio's segment frame of each OpenSim body is the *child frame of its joint* (Simbody's
mobilized frame M), so the joint motion is the segment's joint motion; mass centre and inertia
(given by OpenSim in the body frame, the inertia about the mass centre) are transformed into it
(`jaxbio.models.build.transformed`). `Model.body_positions` / ``body_orientations`` give the
pose of each OpenSim body frame in its segment frame, for anything else body-fixed (markers;
muscle points and wrap objects are converted with it at load time). A welded body (``WeldJoint``,
or a CustomJoint whose six functions are constants) is a ``"fixed"`` segment, massless or not,
exactly where OpenSim has it.

**Joints**, each written as OpenSim's function-based mobilizer (Simbody's
``MobilizedBody::FunctionBased``): ``X_FM = Translation(Σ_i f_{3+i}(c) t_i) ·
Rotation(f_0(c), r_0) · Rotation(f_1(c), r_1) · Rotation(f_2(c), r_2)`` with the translation
axes ``t_i`` in the parent frame F and the rotations body-fixed (each about its axis in the frame
left by the previous one). jaxbio builds the same product as a chain of one-DOF segments: first a
prismatic segment per translation that moves, then a revolute segment per rotation that moves;
every segment but the last is massless (`jaxbio.models.build.virtual`, named
``<body>_<axis>`` with the axis ``rotation1`` … ``translation3``), the last is the body. Constant
axes are folded into the fixed offsets (constant translations into the first segment's origin, a
constant rotation into the orientation of the next moving segment; a trailing one into the last
segment's orientation, with its axis rotated back). The joint types are this product with fixed
axes and identity functions:

- ``PinJoint``: rotation about z; ``SliderJoint``: translation along x; ``WeldJoint``: nothing.
- ``UniversalJoint``: rotations about x, then y.
- ``PlanarJoint`` (coordinates rz, tx, ty): translations along x and y of the parent frame, then
  the rotation about z (Simbody's ``Planar``).
- ``BallJoint``, ``GimbalJoint``: rotations about x, y, z (body-fixed X-Y-Z Euler angles).
- ``FreeJoint`` (coordinates rx, ry, rz, tx, ty, tz): translations along the parent's x, y, z,
  then the X-Y-Z rotations.
- ``CustomJoint``: its ``SpatialTransform`` (``rotation1..3``, ``translation1..3``; each
  ``TransformAxis`` an axis, at most one coordinate and a function: ``LinearFunction``,
  ``Constant``, ``SimmSpline``/``NaturalCubicSpline``, ``PiecewiseLinearFunction``,
  ``PiecewiseConstantFunction``, ``PolynomialFunction``, ``MultiplierFunction``; see
  `jaxbio._osim_functions`).

**Ball and free joints.** OpenSim asks Simbody for Euler angles (``useEulerAngles``), so a
Ball/Free joint's *coordinates* — what motion files name and ``Coordinate.getValue`` returns — are
the X-Y-Z body-fixed angles (and, for Free, the translation in the parent frame), and jaxbio
uses exactly these as model coordinates (three revolute segments, like a Gimbal). OpenSim's
*speeds* of such a joint are not the angle rates, though: Simbody's generalised speeds are
``ω_FM`` expressed in F (Free: ``[ω_FM, v_FM]`` in F), and its generalised forces for them are
the moment (and force) in F. jaxbio's are the rates ``ċ`` of the angles and their conjugate
forces: ``u = E(c) ċ`` with ``E = [x, R_x y, R_x R_y z]`` (``R_x = R(x, c₀)``,
``R_y = R(y, c₁)``) and ``τ_c = Eᵀ τ_u`` — translational speeds and forces are the same. For every
other joint type OpenSim's speeds are the coordinate rates, and jaxbio's generalised forces are
OpenSim's.

**Agreement with OpenSim.** Body poses, the mass matrix and inverse dynamics equal OpenSim's to
round-off (tests/io/test_osim_opensim.py), except where Simbody's function-based mobilizer
(``MobilizedBody::FunctionBasedImpl``, OpenSim's CustomJoint) is not the derivative of its own
transform, and jaxbio (exact derivatives) differs from it: (1) its velocity Jacobian ``H``
evaluates only the functions that have a coordinate, so a *nonzero* ``Constant`` rotation counts
as zero in ``H`` (not in the transform): such a joint's velocities, mass matrix and generalised
forces in OpenSim do not match its positions; (2) its ``Ḣ`` takes the angular velocity of the
first rotation from the joint's first coordinate, so when that coordinate drives two or more of the
joint's rotations OpenSim's velocity-product terms (hence inverse dynamics, not the mass matrix)
differ. The tests check jaxbio against finite differences of OpenSim's positions and against
Lagrange's equations in those cases.

**Coordinates** (``c``, `Model.coordinates`): in OpenSim's order (``Model.getCoordinateSet``:
joints in file order, each joint's coordinates in its order; a CustomJoint's in order of first
use by rotation1 … translation3), with their default value, default speed, range, clamped,
locked, prescribed flags and motion type (rotational, translational or coupled, derived as
OpenSim does). Each tree coordinate is a function of one OpenSim coordinate
(`jaxbio.coordinates`): ``q = to_tree(cmap, c)``; the dynamics in OpenSim's coordinates are
`jaxbio.inverse_dynamics(model, c, cd, cdd)` and friends. What OpenSim does with the flags:
``locked`` coordinates are held at their default value by a constraint — in jaxbio
`jaxbio.forward_dynamics(model, ..., locked=model.locked)` (their accelerations are 0,
the others solve the reduced system) and `enforce_coordinates`; ``clamped`` coordinates are pulled
into their range when a value is set with constraints enforced (``Coordinate.setValue``) —
`enforce_coordinates`. OpenSim's inverse dynamics ignores both (``InverseDynamicsSolver``:
``calcResidualForceIgnoringConstraints``), and so does `jaxbio.tools.inverse_dynamics_tool`; its
static optimisation solves only the coordinates that are neither locked nor prescribed, and so
does `jaxbio.tools.static_optimization_tool`. Prescribed motion (``prescribed_function``) is
recorded, not imported.

**Forces** (`Model.forces`, `jaxbio.forces._osim_forces`): the ForceSet's CoordinateLimitForces,
SpringGeneralizedForces, PointToPointSprings, BushingForces, HuntCrossleyForces, PathSprings,
CoordinateActuators, PointActuators, TorqueActuators and PathActuators, with OpenSim's formulas
(`jaxbio.forces.passive_forces`, `jaxbio.forces.actuator_matrix`); paths as the muscles'
(`jaxbio.forces._osim_paths`).

**Muscles** (`Model.muscles`, `jaxbio.forces._osim_muscles`): the ForceSet's enabled
Thelen2003Muscles and Millard2012EquilibriumMuscles, with their paths (fixed, conditional and
moving points; the bodies' wrap objects and each path's PathWraps) on the tree, as functions of
OpenSim's coordinates (`jaxbio.forces.muscle_lengths`, ``muscle_moment_arms`` …).

**Markers** (`Model.markers`, `jaxbio.markers`): the MarkerSet's ``Marker`` s on
their frames (4.x ``socket_parent_frame``, 3.x ``body``); `jaxbio.markers.marker_positions`.

**Coordinate couplers** (``CoordinateCouplerConstraint``, one independent coordinate): the
dependent coordinate ``d = s · g(c_i)`` (``scale_factor`` ``s``, ``coupled_coordinates_function``
``g``) is removed from ``c`` (`Model.dependent_coordinates`) and each tree coordinate it
drives, ``f(d)``, becomes ``f(s · g(c_i))`` (`jaxbio._osim_functions.compose`: ``f`` or ``g``
must be a straight line), so that the dynamics in ``c`` are the constrained model's. OpenSim's
inverse dynamics ignores constraints and reports a force for the dependent coordinate; jaxbio's
generalised force of ``c_i`` includes it (virtual work).

**Inertia.** As OpenSim (``Body::getInertia`` keeps the file's moments), inertias that break the
triangle inequality and models without mass are accepted (`SegmentTree.from_dict` with
``physical=False``).

**Not imported yet** (listed in `Model.ignored` when present, never applied; those that act
on the dynamics also in `Model.not_imported`, and ``load_osim(..., strict=True)`` refuses
them): the other forces (``ForceSet``: other muscle classes, muscles whose parameters jaxbio
refuses, other actuators, ligaments, other contact; disabled forces), other
constraints (``ConstraintSet``), contact geometry, wrap objects when no imported muscle
or path force uses them, controllers and probes. Refused with a ``ValueError`` naming the element and the file:
a file that is not XML or not an OpenSim model, unknown joint types (Ellipsoid, Scapulothoracic,
ConstantCurvature …) and function types (GCVSpline, StepFunction, multi-variable functions …), a
function of more than one coordinate, collinear CustomJoint axes, a reversed joint (child frame on
the ground, ``reverse`` true), a missing body or frame, a body attached by no joint or by two (a
kinematic loop), a parent never connected to the ground. Joints may be listed in any order, as
OpenSim allows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Sequence

import numpy as np

from jaxbio import quaternion as quat
from jaxbio._files import read_bytes, text_encoding
from jaxbio._validate import model_dtype, to_device
from jaxbio.coordinates import CoordinateMap, Piecewise
from jaxbio import _osim_functions as fn
from jaxbio.model import Model
from jaxbio._osim_xml import euler_xyz
from jaxbio._osim_xml import (
    describe as _describe,
    child_flag as _flag,
    read_function as _function,
    function_element as _function_element,
    child_numbers as _numbers,
    child_text as _text,
)
from jaxbio.models.build import Body, model, segment, transformed, virtual
from jaxbio.tree import SegmentTree

if TYPE_CHECKING:
    pass

__all__ = ["Model", "load_osim"]

GRAVITY = (0.0, -9.80665, 0.0)  # OpenSim's default gravity, m/s²
DEFAULT_RANGE = (-10.0, 10.0)  # OpenSim's default coordinate range
AXIS_NAMES = ("rotation1", "rotation2", "rotation3", "translation1", "translation2", "translation3")
#: fixed-axis joints: (TransformAxis slot 0..5, unit axis, coordinate index within the joint)
_X, _Y, _Z = np.eye(3)
JOINT_AXES = {
    "WeldJoint": (),
    "PinJoint": ((0, _Z, 0),),
    "SliderJoint": ((3, _X, 0),),
    "UniversalJoint": ((0, _X, 0), (1, _Y, 1)),
    "BallJoint": ((0, _X, 0), (1, _Y, 1), (2, _Z, 2)),
    "GimbalJoint": ((0, _X, 0), (1, _Y, 1), (2, _Z, 2)),
    "PlanarJoint": ((0, _Z, 0), (3, _X, 1), (4, _Y, 2)),
    "FreeJoint": ((0, _X, 0), (1, _Y, 1), (2, _Z, 2), (3, _X, 3), (4, _Y, 4), (5, _Z, 5)),
}
JOINT_TYPES = tuple(JOINT_AXES) + ("CustomJoint",)
#: sets that are not imported yet (reported in Model.ignored when not empty)
IGNORED_SETS = (
    "ForceSet",
    "ConstraintSet",
    "MarkerSet",  # its Markers are imported (Model.markers); other objects are listed
    "ContactGeometrySet",
    "ControllerSet",
    "ProbeSet",
    "ComponentSet",
)


# ---- small numpy helpers --------------------------------------------------------------------


@dataclass(frozen=True)
class _Pose:
    """A frame's origin ``p`` (3,) and orientation ``q`` (w, x, y, z) in another frame."""

    p: np.ndarray = field(default_factory=lambda: np.zeros(3))
    q: np.ndarray = field(default_factory=lambda: np.array([1.0, 0.0, 0.0, 0.0]))

    def __mul__(self, other: _Pose) -> _Pose:
        return _Pose(self.p + quat.to_matrix(self.q) @ other.p, _unit_quaternion(quat.multiply(self.q, other.q)))

    def inverse(self) -> _Pose:
        conj = self.q * np.array([1.0, -1.0, -1.0, -1.0])
        return _Pose(-(quat.to_matrix(conj) @ self.p), conj)


def _unit_quaternion(q: np.ndarray) -> np.ndarray:
    return q / np.linalg.norm(q)


def _unit_axis(v: np.ndarray, where: str) -> np.ndarray:
    norm = np.linalg.norm(v)
    if not norm > 0:
        raise ValueError(f"{where}: <axis> is zero")
    return v / norm


# ---- the model's components ---------------------------------------------------------------------


@dataclass
class _Coordinate:
    name: str
    default: float = 0.0
    default_speed: float = 0.0
    range: tuple[float, float] = DEFAULT_RANGE
    clamped: bool = False
    locked: bool = False
    prescribed: bool = False
    motion_type: str = "rotational"


@dataclass
class _Axis:
    slot: int  # 0..5: rotation1..3, translation1..3
    axis: np.ndarray  # unit, in the joint's parent frame (translations) / the rotated frame (rotations)
    coordinate: int | None  # index within the joint's coordinates; None: a constant
    function: Piecewise

    @property
    def rotation(self) -> bool:
        return self.slot < 3


@dataclass
class _Joint:
    elem: ET.Element
    kind: str
    name: str
    coordinates: list[_Coordinate]
    axes: list[_Axis]
    parent_socket: str = ""  # 4.x: the sockets' paths, relative to the joint
    child_socket: str = ""
    parent: tuple[str, _Pose] | None = None  # (body, pose of the frame in it); 3.x: read, 4.x: resolved
    child: tuple[str, _Pose] | None = None
    # the 4.0 betas (Version 30500s): a JointSet joint's <location_in_parent>... offsets its sockets
    parent_offset: _Pose = field(default_factory=_Pose)
    child_offset: _Pose = field(default_factory=_Pose)

    @property
    def where(self) -> str:
        return _describe(self.elem)


def _coordinate(elem: ET.Element) -> _Coordinate:
    where = _describe(elem)
    lo, hi = _numbers(elem, "range", 2, where, default=DEFAULT_RANGE)
    return _Coordinate(
        name=elem.get("name", ""),
        default=float(_numbers(elem, "default_value", 1, where, default=[0.0])[0]),
        default_speed=float(_numbers(elem, "default_speed_value", 1, where, default=[0.0])[0]),
        range=(float(lo), float(hi)),
        clamped=_flag(elem, "clamped", where),
        locked=_flag(elem, "locked", where),
        prescribed=_flag(elem, "prescribed", where),
    )


def _coordinate_elements(joint: ET.Element) -> list[ET.Element]:
    # 4.x: <coordinates><Coordinate/>…; 3.x: <CoordinateSet><objects><Coordinate/>…
    out = list(joint.findall("coordinates/Coordinate")) + list(joint.findall("CoordinateSet/objects/Coordinate"))
    names = [c.get("name") for c in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{_describe(joint)}: coordinate {dup[0]!r} is defined twice")
    return out


def _joint_axes(joint: ET.Element, kind: str) -> tuple[list[_Coordinate], list[_Axis]]:
    """The joint's coordinates and its six TransformAxes (fixed-axis joints: the moving ones)."""
    where = _describe(joint)
    given = [_coordinate(c) for c in _coordinate_elements(joint)]
    if kind != "CustomJoint":
        axes_spec = JOINT_AXES[kind]
        n = len(axes_spec)
        if len(given) > n:
            raise ValueError(
                f"{where}: a {kind} has {n} coordinates, the file gives {len(given)} "
                f"({', '.join(c.name for c in given)})"
            )
        name = joint.get("name", "")
        coords = given + [_Coordinate(f"{name}_coord_{i}") for i in range(len(given), n)]
        for c, (slot, _, _) in zip(coords, axes_spec):
            c.motion_type = "rotational" if slot < 3 else "translational"
        axes = [_Axis(slot, axis, j, Piecewise.identity()) for slot, axis, j in axes_spec]
        return coords, axes

    st = joint.find("SpatialTransform")
    if st is None:
        raise ValueError(f"{where}: a CustomJoint needs a <SpatialTransform>")
    if joint.find("TransformAxisSet") is not None:
        raise ValueError(f"{where}: <TransformAxisSet> (OpenSim 1.x files) is not supported")
    by_name = {c.name: c for c in given}
    for c in given:
        c.motion_type = ""  # derived below from the TransformAxes that use it
    order: list[str] = []
    axes = []
    for slot, axis_name in enumerate(AXIS_NAMES):
        found = [t for t in st.findall("TransformAxis") if t.get("name") == axis_name]
        if len(found) > 1:
            raise ValueError(f"{where}: TransformAxis {axis_name!r} is given twice")
        here = f"{where}: TransformAxis {axis_name!r}"
        if not found:  # OpenSim's default: a constant 0 about x, y, z
            axes.append(_Axis(slot, np.eye(3)[slot % 3], None, fn.constant(0.0)))
            continue
        t = found[0]
        names = (_text(t, "coordinates") or "").split()
        axis = _unit_axis(_numbers(t, "axis", 3, here, default=np.eye(3)[slot % 3]), here)
        f_elem = _function_element(t, ("coordinates", "axis"), here)
        if len(names) > 1:
            raise ValueError(f"{here}: a function of {len(names)} coordinates ({', '.join(names)}) is not supported")
        if f_elem is None:
            if names:
                raise ValueError(f"{here}: coordinate {names[0]!r} but no function")
            f = fn.constant(0.0)
        else:
            f = _function(f_elem, here)
        if not names:
            if f.constant_value() is None:
                raise ValueError(f"{here}: a {f_elem.tag} needs a coordinate")
            axes.append(_Axis(slot, axis, None, f))
            continue
        if names[0] not in order:
            order.append(names[0])
        j = order.index(names[0])
        axes.append(_Axis(slot, axis, None if f.constant_value() is not None else j, f))
        # OpenSim's motion type: rotational/translational if some axis moves with slope ±1,
        # else coupled (CustomJoint::constructCoordinates)
        c = by_name.setdefault(names[0], _Coordinate(names[0], motion_type=""))
        is_pure = (
            f_elem is not None
            and f_elem.tag == "LinearFunction"
            and abs(float(_numbers(f_elem, "coefficients", 2, here, default=[1.0, 0.0])[0])) == 1.0
        )
        if is_pure:
            c.motion_type = "rotational" if slot < 3 else "translational"
        elif c.motion_type in ("", "coupled"):
            c.motion_type = "coupled"
    unused = [c.name for c in given if c.name not in order]
    if unused:
        raise ValueError(f"{where}: coordinate {unused[0]!r} is used by no TransformAxis")
    for start in (0, 3):  # OpenSim refuses collinear axes (CustomJoint::extendFinalizeFromProperties)
        for a in range(start, start + 3):
            for b in range(a + 1, start + 3):
                if np.linalg.norm(np.cross(axes[a].axis, axes[b].axis)) < 1e-5:
                    raise ValueError(f"{where}: TransformAxes {AXIS_NAMES[a]!r} and {AXIS_NAMES[b]!r} are collinear")
    return [by_name[n] for n in order], axes


def _socket(joint: ET.Element, which: str) -> str | None:
    """The path in a joint's ``parent_frame`` / ``child_frame`` socket (4.x and the 4.0 betas)."""
    for tag in (
        f"socket_{which}_frame",
        f"socket_{which}_frame_connectee_name",
        f"connector_{which}_frame_connectee_name",
    ):
        text = _text(joint, tag)
        if text:
            return text
    for conn in joint.findall("connectors/Connector_PhysicalFrame_"):
        if conn.get("name") in (f"{which}_frame", f"{which}_body"):
            text = _text(conn, "connectee_name")
            if text:
                return text
    return None


class Frames:
    """Bodies, the ground and PhysicalOffsetFrames by absolute component path (4.x), and the
    pose of any of them in its base body's frame."""

    def __init__(self, model_elem: ET.Element, ground: str, bodies: list[str]):
        self.paths: dict[str, tuple[str, ET.Element | str]] = {f"/{ground}": ("body", ground)}
        for b in bodies:
            self.paths[f"/bodyset/{b}"] = ("body", b)
        for body in model_elem.findall("BodySet/objects/Body"):
            self._add_frames(body.findall("components/PhysicalOffsetFrame"), f"/bodyset/{body.get('name')}")
        for joint in model_elem.findall("JointSet/objects/*"):
            self._add_frames(joint.findall("frames/PhysicalOffsetFrame"), f"/jointset/{joint.get('name')}")
        for force in model_elem.findall("ForceSet/objects/*"):  # a BushingForce's own frames
            self._add_frames(force.findall("frames/PhysicalOffsetFrame"), f"/forceset/{force.get('name')}")
        self._add_frames(model_elem.findall("components/PhysicalOffsetFrame"), "")

    def _add_frames(self, frames, owner: str):
        for f in frames:
            self.paths[f"{owner}/{f.get('name')}"] = ("frame", f)

    def resolve(self, path: str, owner: str, where: str) -> str:
        """Absolute path of the component ``path`` names, seen from the component at ``owner``."""
        parts = path.split("/") if path.startswith("/") else owner.split("/") + path.split("/")
        stack: list[str] = []
        for part in parts:
            if part in ("", "."):
                continue
            if part == "..":
                if stack:
                    stack.pop()
                continue
            stack.append(part)
        full = "/" + "/".join(stack)
        if full in self.paths:
            return full
        name = path.rstrip("/").split("/")[-1]  # 4.0 betas: a bare name
        matches = [p for p in self.paths if p.split("/")[-1] == name]
        local = [p for p in matches if p.startswith(owner + "/")]
        if len(local) == 1:
            return local[0]
        if len(matches) == 1:
            return matches[0]
        raise ValueError(f"{where}: no body or frame {path!r}")

    def pose(self, path: str, where: str, seen: tuple[str, ...] = ()) -> tuple[str, _Pose]:
        """``(body, pose of the frame in that body's frame)`` of the component at ``path``."""
        kind, item = self.paths[path]
        if kind == "body":
            return item, _Pose()
        if path in seen:
            raise ValueError(f"{where}: frame {path!r} is its own parent")
        here = f"{where}: {_describe(item)}"
        parent = next(
            (
                t
                for t in (
                    _text(item, "socket_parent"),
                    _text(item, "socket_parent_connectee_name"),
                    _text(item, "connector_parent_connectee_name"),
                )
                if t
            ),
            None,
        )
        if parent is None:
            raise ValueError(f"{here}: no <socket_parent>")
        body, base = self.pose(self.resolve(parent, path, here), here, seen + (path,))
        offset = _Pose(
            _numbers(item, "translation", 3, here, default=np.zeros(3)),
            euler_xyz(_numbers(item, "orientation", 3, here, default=np.zeros(3))),
        )
        return body, base * offset


def _read_joint(elem: ET.Element, enclosing_body: str | None) -> _Joint:
    kind = elem.tag
    where = _describe(elem)
    if kind not in JOINT_TYPES:
        raise ValueError(f"{where}: joint type {kind!r} is not supported; supported: {', '.join(JOINT_TYPES)}")
    if _flag(elem, "reverse", where):
        raise ValueError(f"{where}: reversed joints (<reverse>true</reverse>) are not supported")
    coords, axes = _joint_axes(elem, kind)
    name = elem.get("name", "")
    # 2.x/3.x joints and the 4.0 betas' JointSet joints place their frames by these properties
    parent_offset = _Pose(
        _numbers(elem, "location_in_parent", 3, where, default=np.zeros(3)),
        euler_xyz(_numbers(elem, "orientation_in_parent", 3, where, default=np.zeros(3))),
    )
    loc = "location" if elem.find("location") is not None else "location_in_child"
    ori = "orientation" if elem.find("orientation") is not None else "orientation_in_child"
    child_offset = _Pose(
        _numbers(elem, loc, 3, where, default=np.zeros(3)),
        euler_xyz(_numbers(elem, ori, 3, where, default=np.zeros(3))),
    )
    if enclosing_body is not None:  # 2.x/3.x: nested in the child body
        parent = _text(elem, "parent_body") or _socket(elem, "parent")
        if not parent:
            raise ValueError(f"{where}: no <parent_body>")
        return _Joint(
            elem,
            kind,
            name,
            coords,
            axes,
            parent=(parent.split("/")[-1], parent_offset),
            child=(enclosing_body, child_offset),
        )
    parent, child = _socket(elem, "parent"), _socket(elem, "child")
    if not parent or not child:
        raise ValueError(f"{where}: needs a <socket_parent_frame> and a <socket_child_frame>")
    return _Joint(
        elem,
        kind,
        name,
        coords,
        axes,
        parent_socket=parent,
        child_socket=child,
        parent_offset=parent_offset,
        child_offset=child_offset,
    )


def _body(elem: ET.Element) -> Body:
    where = _describe(elem)
    mass = _numbers(elem, "mass", 1, where)[0]
    if not mass >= 0:
        raise ValueError(f"{where}: <mass> must be >= 0, got {mass}")
    com = _numbers(elem, "mass_center", 3, where, default=np.zeros(3))
    if elem.find("inertia") is not None:
        xx, yy, zz, xy, xz, yz = _numbers(elem, "inertia", 6, where)
    else:  # 2.x/3.x
        xx, yy, zz, xy, xz, yz = (
            float(_numbers(elem, f"inertia_{k}", 1, where, default=[0.0])[0])
            for k in ("xx", "yy", "zz", "xy", "xz", "yz")
        )
    return Body(float(mass), com, np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]]))


#: entries of Model.ignored that act on the dynamics (OpenSim applies them): enabled forces
#: and constraints not imported, muscles whose parameters were refused, other <components>
_ACTING = re.compile(
    r"^(ForceSet|ConstraintSet): \d+ objects|^components: |^\w+: \d+ muscles not imported|^\w+ '[^']*': not imported"
)


def _acts(entry: str) -> bool:
    return bool(_ACTING.match(entry))


def _ignored(
    model_elem: ET.Element, imported=frozenset(), disabled=frozenset(), wraps_imported=False
) -> tuple[str, ...]:
    out = []
    for tag in IGNORED_SETS:
        for s in model_elem.findall(tag):
            objs = [o for o in s.findall("objects/*") if o not in imported and o not in disabled]
            if objs:
                kinds = sorted({o.tag for o in objs})
                out.append(f"{tag}: {len(objs)} objects ({', '.join(kinds)})")
            off = [o for o in s.findall("objects/*") if o in disabled]
            if off:
                out.append(f"{tag}: {len(off)} disabled objects ({', '.join(sorted({o.tag for o in off}))})")
    wraps = sum(len(b.findall("WrapObjectSet/objects/*")) for b in model_elem.findall("BodySet/objects/Body"))
    wraps += sum(len(g.findall("WrapObjectSet/objects/*")) for g in model_elem.findall("Ground"))
    if wraps and not wraps_imported:
        out.append(f"WrapObjectSet: {wraps} wrap objects")
    comps = model_elem.findall("components/*")
    other = sorted({c.tag for c in comps if c.tag != "PhysicalOffsetFrame"})
    if other:
        out.append(f"components: {', '.join(other)}")
    return tuple(out)


# ---- the tree -----------------------------------------------------------------------------------


def _chain(
    joint: _Joint, parent_segment: str | None, placement: _Pose, body_name: str, body: Body, taken: set[str]
) -> list[tuple[dict, int | None, Piecewise | None]]:
    """The segments of one joint, proximal first: ``(segment dict, joint coordinate index,
    function)``; the last one is the body (``body`` in the joint's child frame)."""
    moving_t = [a for a in joint.axes if not a.rotation and a.coordinate is not None]
    constant_t = sum(
        (a.function.constant_value() * a.axis for a in joint.axes if not a.rotation and a.coordinate is None),
        np.zeros(3),
    )
    head = placement * _Pose(constant_t, np.array([1.0, 0.0, 0.0, 0.0]))
    links = []  # (type, axis, origin, orientation, coordinate, function, axis name)
    origin, orientation = head.p, head.q
    for a in moving_t:
        links.append(["prismatic", a.axis, origin, orientation, a.coordinate, a.function, AXIS_NAMES[a.slot]])
        origin, orientation = np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0])
    pending = np.array([1.0, 0.0, 0.0, 0.0])  # constant rotations since the last moving one
    for a in (a for a in joint.axes if a.rotation):
        if a.coordinate is None:
            pending = quat.multiply(pending, quat.from_axis_angle(a.axis, np.asarray(a.function.constant_value())))
            continue
        links.append(
            [
                "revolute",
                a.axis,
                origin,
                quat.multiply(orientation, pending),
                a.coordinate,
                a.function,
                AXIS_NAMES[a.slot],
            ]
        )
        origin, orientation, pending = np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]), np.array([1.0, 0.0, 0.0, 0.0])
    if not links:
        return [
            (
                segment(
                    body_name,
                    parent_segment,
                    "fixed",
                    None,
                    body,
                    origin,
                    _unit_quaternion(quat.multiply(orientation, pending)),
                ),
                None,
                None,
            )
        ]
    # a trailing constant rotation R: motion(axis) · R = R · motion(Rᵀ axis)
    last = links[-1]
    last[3] = quat.multiply(last[3], pending)
    last[1] = quat.to_matrix(pending).T @ last[1]
    out = []
    parent = parent_segment
    for k, (jtype, axis, o, q, j, f, axis_name) in enumerate(links):
        q = _unit_quaternion(np.asarray(q, dtype=float))
        if k == len(links) - 1:
            seg = segment(body_name, parent, jtype, axis, body, o, q)
        else:
            name = f"{body_name}_{axis_name}"
            while name in taken:
                name += "_"
            taken.add(name)
            seg = virtual(name, parent, jtype, axis, o, q)
        out.append((seg, j, f))
        parent = seg["name"]
    return out


def _couplers(model_elem: ET.Element, names: list[str]) -> tuple[dict[int, tuple[int, Piecewise]], set, set]:
    """The enforced ``CoordinateCouplerConstraint`` s of the ConstraintSet: ``{dependent:
    (independent, g)}`` (coordinate indices in ``names``; ``c[dependent] = g(c[independent])``,
    OpenSim's ``scale_factor`` times its ``coupled_coordinates_function``), resolved so that no
    independent coordinate is itself dependent; and the elements imported and disabled."""
    found: dict[int, tuple[int, Piecewise, str]] = {}
    imported, disabled = set(), set()
    for elem in (o for cs in model_elem.findall("ConstraintSet") for o in cs.findall("objects/*")):
        if elem.tag != "CoordinateCouplerConstraint":
            continue
        where = _describe(elem)
        enforced = _flag(elem, "isEnforced", where) if _text(elem, "isEnforced") else True
        if not enforced or _flag(elem, "isDisabled", where):
            disabled.add(elem)
            continue
        independent = (_text(elem, "independent_coordinate_names") or "").split()
        dependent = (_text(elem, "dependent_coordinate_name") or "").strip()
        if len(independent) != 1:
            raise ValueError(
                f"{where}: {len(independent)} independent coordinates ({', '.join(independent)}); "
                "only couplers of one independent coordinate are supported"
            )
        for n in independent + [dependent]:
            if n not in names:
                raise ValueError(f"{where}: no coordinate {n!r} in the model")
        holder = elem.find("coupled_coordinates_function")
        inner = None if holder is None else _function_element(holder, (), where)
        if inner is None:
            raise ValueError(f"{where}: no <coupled_coordinates_function>")
        scale = float(_numbers(elem, "scale_factor", 1, where, default=[1.0])[0])
        d = names.index(dependent)
        if d in found:
            raise ValueError(f"{where}: coordinate {dependent!r} is already the dependent one of {found[d][2]}")
        found[d] = (names.index(independent[0]), _function(inner, where).scaled(scale), where)
        imported.add(elem)
    # chains (the independent coordinate of one is the dependent of another): substitute
    resolved: dict[int, tuple[int, Piecewise]] = {}
    for d in found:
        i, g, where = found[d]
        seen = {d}
        while i in found:
            if i in seen:
                raise ValueError(f"{where}: its coordinates are coupled in a cycle")
            seen.add(i)
            i_next, h, _ = found[i]
            g = fn.compose(g, h, where)
            i = i_next
        resolved[d] = (i, g)
    return resolved, imported, disabled


def _force_set_file(path) -> ET.Element:
    """The ``<ForceSet>`` of an OpenSim force set file (``force_set_files``: reserve and residual
    actuators), ``ValueError`` naming the file otherwise."""
    from jaxbio._text import read_xml

    root = read_xml(Path(path), "OpenSim force set file")
    fs = root if root.tag == "ForceSet" else root.find("ForceSet")
    if fs is None:
        raise ValueError(f"{path}: not an OpenSim force set file (no <ForceSet> under <{root.tag}>)")
    return fs


def _without_repeated_forces(raw: bytes, force_sets, files, replace: bool) -> list:
    """The force set files' ``<ForceSet>`` s without the forces whose names the model (or an earlier
    file) already has: OpenSim's ``ForceSet::append`` (``AbstractTool::updateModelForces``) skips
    them, so the model's own force of that name stays. A warning names them."""
    import copy
    import warnings

    if not force_sets:
        return force_sets
    try:
        root = ET.fromstring(raw)
    except ET.ParseError:
        return force_sets  # `_parse` names the problem
    model = root.find("Model") if root.tag == "OpenSimDocument" else root
    names = set() if replace or model is None else {f.get("name") for f in model.findall("ForceSet/objects/*")}
    out = []
    for fs, file in zip(force_sets, files):
        fs = copy.deepcopy(fs)
        objects = fs.find("objects")
        repeated = []
        for f in list(objects if objects is not None else ()):  # one by one: a file may repeat a name too
            if f.get("name") in names:
                objects.remove(f)
                repeated.append(f.get("name"))
            else:
                names.add(f.get("name"))
        if repeated:
            warnings.warn(
                f"{file}: the model already has forces named {repeated}: they are not appended (the first of "
                f"each name is used), as OpenSim's ForceSet::append does",
                stacklevel=3,
            )
        out.append(fs)
    return out


def _parse(
    path: Path, raw: bytes, dtype, force_sets: Sequence[ET.Element] = (), replace_force_set: bool = False
) -> Model:
    from jaxbio._text import parse_xml

    try:
        root = parse_xml(raw)
    except ET.ParseError as e:
        encoding = text_encoding(raw)
        raise ValueError(
            f"the file is {encoding} encoded; save it as UTF-8" if encoding else f"not an XML file ({e})"
        ) from None
    model_elem = root.find("Model") if root.tag == "OpenSimDocument" else (root if root.tag == "Model" else None)
    if model_elem is None:
        raise ValueError(
            f"not an OpenSim model: the root element is <{root.tag}>, expected <OpenSimDocument> holding a <Model>"
        )
    if replace_force_set:  # AbstractTool::updateModelForces: the files' forces replace the model's
        for fs in model_elem.findall("ForceSet"):
            model_elem.remove(fs)
    for fs in force_sets:  # ... or are appended to them
        model_elem.append(fs)
    version = root.get("Version", "")
    if version.isdigit() and int(version) < 10901:
        raise ValueError(f"OpenSimDocument Version {version} (OpenSim 1.x) is not supported")
    gravity = _numbers(model_elem, "gravity", 3, _describe(model_elem), default=GRAVITY)

    # bodies and the ground: 4.x <Ground>; 2.x/3.x a body called "ground" in the BodySet
    body_elems = model_elem.findall("BodySet/objects/Body")
    ground_elem = model_elem.find("Ground")
    if ground_elem is not None:
        ground = ground_elem.get("name", "ground")
    else:  # a body called "ground" (2.x/3.x), or none: OpenSim's Model has its own Ground "ground"
        ground = "ground"
    bodies: dict[str, ET.Element] = {}
    for b in body_elems:
        name = b.get("name", "")
        if name in bodies or name == ground and ground_elem is not None:
            raise ValueError(f"{_describe(b)}: the body name is used twice")
        bodies[name] = b
    moving = [b for b in bodies if b != ground]

    # joints in file order: nested in bodies (2.x/3.x), then the JointSet (4.x)
    joints = [_read_joint(j, b.get("name")) for b in body_elems for j in b.findall("Joint/*")]
    joints += [_read_joint(j, None) for j in model_elem.findall("JointSet/objects/*")]
    names = [j.name for j in joints]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise ValueError(f"{joints[i].where}: the joint name is used twice")
    frames = Frames(model_elem, ground, moving)

    # each joint: parent and child frames as (body, pose in the body frame)
    for j in joints:
        if j.parent is not None:  # 3.x
            if j.parent[0] not in bodies:
                raise ValueError(f"{j.where}: parent body {j.parent[0]!r} is not in the BodySet")
        else:
            owner = f"/jointset/{j.name}"
            body, pose = frames.pose(frames.resolve(j.parent_socket, owner, j.where), j.where)
            j.parent = (body, pose * j.parent_offset)
            body, pose = frames.pose(frames.resolve(j.child_socket, owner, j.where), j.where)
            j.child = (body, pose * j.child_offset)
        if j.child[0] == ground:
            raise ValueError(
                f"{j.where}: its child frame is on the ground {ground!r} (a reversed joint); not supported"
            )
        if j.parent[0] == j.child[0]:
            raise ValueError(f"{j.where}: parent and child frames are on the same body {j.child[0]!r}")
    child_of: dict[str, _Joint] = {}
    for j in joints:
        if j.child[0] in child_of:
            raise ValueError(
                f"{j.where}: body {j.child[0]!r} is already the child of {child_of[j.child[0]].where} "
                "(a kinematic loop); not supported"
            )
        child_of[j.child[0]] = j
    for b in moving:
        if b not in child_of:
            raise ValueError(f"{_describe(bodies[b])}: attached to the model by no joint")

    # coordinates: OpenSim's order (joints in file order)
    coords: list[_Coordinate] = []
    first: dict[int, int] = {}
    for k, j in enumerate(joints):
        first[k] = len(coords)
        coords += j.coordinates
    cnames = [c.name for c in coords]
    coordinate_joint = [k for k, j in enumerate(joints) for _ in j.coordinates]
    for i, n in enumerate(cnames):
        if cnames.index(n) != i:
            raise ValueError(
                f"{joints[coordinate_joint[i]].where}: coordinate name {n!r} is already used by "
                f"{joints[coordinate_joint[cnames.index(n)]].where}"
            )

    # segments, parents first (joints may be listed in any order)
    placed: dict[str, tuple[str | None, _Pose]] = {ground: (None, _Pose())}  # body -> (segment, X_SB)
    segments: list[dict] = []
    source: list[int] = []
    pieces: list[Piecewise] = []
    taken = set(bodies)
    todo = list(range(len(joints)))
    while todo:  # the first joint (in file order) whose parent is placed
        k = next((k for k in todo if joints[k].parent[0] in placed), None)
        if k is None:
            j = joints[todo[0]]
            raise ValueError(f"{j.where}: its parent body {j.parent[0]!r} is not connected to the ground")
        todo.remove(k)
        j = joints[k]
        (pbody, p_in_pbody), (cbody, c_in_cbody) = j.parent, j.child
        pseg, pbody_in_pseg = placed[pbody]
        body = transformed(_body(bodies[cbody]), quat.to_matrix(c_in_cbody.q), c_in_cbody.p)
        for seg, jc, f in _chain(j, pseg, pbody_in_pseg * p_in_pbody, cbody, body, taken):
            segments.append(seg)
            if jc is not None:
                source.append(first[k] + jc)
                pieces.append(f)
        placed[cbody] = (cbody, c_in_cbody.inverse())

    # coordinate couplers: a dependent coordinate is a function of an independent one, so the
    # tree coordinates it drives are functions of that one and it is not a coordinate of c
    couplers, constraints_imported, constraints_disabled = _couplers(model_elem, cnames)
    if couplers:
        for k, src in enumerate(source):
            if src in couplers:
                i, g = couplers[src]
                where = f"CoordinateCouplerConstraint of {cnames[src]!r}"
                pieces[k] = fn.compose(pieces[k], g, f"{where} (its joint's function of it and the coupling)")
                source[k] = i
        kept = [k for k in range(len(coords)) if k not in couplers]
        for k, j in enumerate(joints):
            if j.kind in ("BallJoint", "FreeJoint") and any(first[k] + i in couplers for i in range(3)):
                raise ValueError(f"{j.where}: a rotation of a {j.kind} is the dependent coordinate of a coupler")
        renumber = {old: new for new, old in enumerate(kept)}
        source = [renumber[s_] for s_ in source]
        coords = [coords[k] for k in kept]
        coordinate_joint = [coordinate_joint[k] for k in kept]
        dependent_names = tuple(cnames[d] for d in sorted(couplers))
        cnames = [cnames[k] for k in kept]
        first = {k: (renumber[v] if v in renumber else v) for k, v in first.items()}
    else:
        dependent_names = ()

    name = model_elem.get("name", path.stem)
    try:
        # OpenSim checks neither (Body::getInertia keeps the file's moments; a model without mass
        # loads): accept what it accepts
        tree = SegmentTree.from_dict(model(name, gravity, segments), dtype=dtype, physical=False)
    except ValueError as e:
        raise ValueError(f"the model built from it is refused: {e}") from None
    dt = model_dtype(dtype)
    seg_index = {s["name"]: i for i, s in enumerate(segments)}

    def frame_pose(path_or_name: str, owner: str, where: str, body_only: bool):
        """(segment, position, orientation) of a body or frame in its segment's frame."""
        full = frames.resolve(path_or_name, owner, where)
        if body_only and frames.paths[full][0] != "body":
            raise ValueError(f"{where}: {path_or_name!r} is a frame, not a body; only bodies are supported here")
        body, pose = frames.pose(full, where)
        seg, X_SB = placed[body]
        X = X_SB * pose
        return -1 if seg is None else seg_index[seg], X.p, X.q

    from jaxbio.forces.internals import read_forces

    euler = [
        tuple(first[k] + i for i in range(3)) for k, j in enumerate(joints) if j.kind in ("BallJoint", "FreeJoint")
    ]
    forces, imported, disabled, force_notes = read_forces(
        model_elem, tree, cnames, [c.motion_type for c in coords], euler, frame_pose, dt
    )
    from jaxbio.forces.internals import read_muscles

    muscles, imported_muscles, muscle_notes = read_muscles(model_elem, tree, cnames, disabled, frame_pose, dt)
    from jaxbio.io._osim_markers import read_markers

    def frame_body(path_or_name: str, owner: str, where: str) -> str:
        return frames.pose(frames.resolve(path_or_name, owner, where), where)[0]

    markers, imported_markers = read_markers(model_elem, frame_pose, frame_body, dt)
    imported = imported | imported_muscles | constraints_imported | imported_markers
    disabled = disabled | constraints_disabled
    ignored = (
        _ignored(
            model_elem,
            imported,
            disabled,
            any(p is not None and p.paths.wrap_objects is not None for p in (muscles, forces.paths)),
        )
        + force_notes
        + muscle_notes
    )
    body_names = [ground] + moving
    poses = [placed[b][1] for b in body_names]
    return Model(
        tree=tree,
        coordinates=CoordinateMap.from_pieces(cnames, source, pieces, dtype=dtype),
        defaults=to_device([c.default for c in coords], dt),
        default_speeds=to_device([c.default_speed for c in coords], dt),
        ranges=to_device(np.array([c.range for c in coords], dtype=float).reshape(-1, 2), dt),
        body_positions=to_device([p.p for p in poses], dt),
        body_orientations=to_device([p.q for p in poses], dt),
        clamped=tuple(c.clamped for c in coords),
        locked=tuple(c.locked for c in coords),
        prescribed=tuple(c.prescribed for c in coords),
        motion_types=tuple(c.motion_type for c in coords),
        bodies=tuple(body_names),
        body_segments=tuple(-1 if placed[b][0] is None else seg_index[placed[b][0]] for b in body_names),
        joints=tuple(j.name for j in joints),
        joint_types=tuple(j.kind for j in joints),
        coordinate_joints=tuple(coordinate_joint),
        dependent_coordinates=dependent_names,
        ignored=ignored,
        not_imported=tuple(e for e in ignored if _acts(e)),
        path=str(path),
        forces=forces,
        muscles=muscles,
        markers=markers,
    )


def load_osim(
    path: str | os.PathLike,
    *,
    dtype=None,
    force_set_files: Sequence[str | os.PathLike] = (),
    replace_force_set: bool = False,
    strict: bool = False,
) -> Model:
    """Read the skeleton of an OpenSim model file (``.osim``, OpenSim 3.x or 4.x).

    Args:
        path: the ``.osim`` file.
        dtype: floating dtype of every array (default: JAX's default float type; use float64,
            with ``jax.enable_x64``, to reproduce OpenSim's numbers).
        force_set_files: OpenSim force set files (``<ForceSet>``: e.g. the reserve and residual
            actuators of a static optimisation), whose forces are appended to the model's, as
            OpenSim's tools do with their ``<force_set_files>``.
        replace_force_set: the files' forces replace the model's ForceSet (OpenSim's
            ``<replace_force_set>``).
        strict: refuse a model with an element that acts on the dynamics and is not imported
            (``Model.not_imported``: a force or constraint of a type jaxbio does not
            import, muscles whose parameters jaxbio refuses, other ``<components>``). Without
            it such elements are listed, a warning names them, and the tools refuse to run
            where OpenSim would apply them (inverse dynamics may exclude unsupported forces,
            e.g. muscles).

    Returns:
        `Model`: ``tree`` (a `jaxbio.SegmentTree`), ``coordinates`` (the
        `jaxbio.coordinates.CoordinateMap` from OpenSim's coordinates to the tree's) and the
        coordinates' and bodies' properties. Modelling choices (frames, Ball and Free joints,
        CustomJoints, what is not imported) are in the docstring of `jaxbio.io.osim`.

    Raises:
        ValueError: starting with the file's path, naming the element (type and name) for every
            defect and every unsupported feature listed in `jaxbio.io.osim`.
    """
    if not isinstance(path, (str, os.PathLike)) or os.fspath(path) == "":
        raise ValueError(f"load_osim: path must be a non-empty str or os.PathLike, got {path!r}")
    model_dtype(dtype)
    p = Path(path)
    if not os.path.lexists(p):
        raise ValueError(f"{p}: no such file")
    raw = read_bytes(p, "OpenSim model file")  # a regular file of bounded size, or a named error
    if isinstance(force_set_files, (str, os.PathLike)):
        force_set_files = (force_set_files,)
    extra = [_force_set_file(f) for f in force_set_files]  # errors name their own file
    extra = _without_repeated_forces(raw, extra, force_set_files, bool(replace_force_set))
    key = (
        hashlib.sha256(raw).hexdigest(),
        p.stem,
        str(model_dtype(dtype)),
        tuple(ET.tostring(e) for e in extra),
        bool(replace_force_set),
    )
    model = _PARSED.get(key)
    if model is None:
        try:
            model = _parse(p, raw, dtype, extra, bool(replace_force_set))
        except ValueError as e:
            raise ValueError(f"{p}: {e}") from None
        _PARSED[key] = model
        while len(_PARSED) > _PARSED_MAX:
            del _PARSED[next(iter(_PARSED))]
    if model.not_imported:
        what = f"elements that act on the dynamics are not imported: {'; '.join(model.not_imported)}"
        if strict:
            raise ValueError(f"{p}: {what} (docs/opensim-support.md lists what is supported)")
        warnings.warn(
            f"{p}: {what}; the tools refuse to run where OpenSim would apply them, and "
            "load_osim(..., strict=True) refuses the model",
            stacklevel=2,
        )
    return model if model.path == str(p) else dataclasses.replace(model, path=str(p))


#: models read by `load_osim`, by the file's bytes, name, dtype and force sets: a session of
#: trials (``jaxbio run-tool A.xml B.xml …``, or a loop in Python) whose setups name copies of one
#: model parses it once (models are immutable); the oldest is dropped beyond ``_PARSED_MAX``
_PARSED: dict[tuple, Model] = {}
_PARSED_MAX = 8


#: the joint reader and a frame's pose, public for OpenSim's JointReaction analysis (`jaxbio.tools`)
Pose = _Pose
read_joint = _read_joint
