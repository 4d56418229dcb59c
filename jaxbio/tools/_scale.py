"""OpenSim's ``ScaleTool``: a generic model scaled to a subject and its markers placed on the
subject's static trial (numpy, outside jit; the model is edited as OpenSim scales it).

What OpenSim 4.6 does (opensim-core ``ScaleTool::run``, ``GenericModelMaker``, ``ModelScaler``,
``Measurement``, ``MarkerPlacer``, ``Model::scale`` and each component's ``extendScale``), and
jaxbio with it:

1. **Generic model.** The ``.osim`` file, its MarkerSet updated by the marker set file (a marker
   of the same name is replaced, the others appended); the model takes the tool's name.
2. **Scale factors** (`scale_factors`), one ``(3,)`` per physical frame (bodies, the ground,
   offset frames; 1 unless set), set in the ``scaling_order``:
   - ``measurements``: for each applied `Measurement`, the mean over its marker pairs of
     ``d_trial / d_model``: ``d_trial`` the pair's distance averaged over the static trial's
     frames from the last at or before the time range's start to the first at or after its end
     (``MarkerData::findFrameRange``), ``d_model`` the pair's distance in the generic model at its
     default pose. The factor goes to the named axes of the measurement's bodies.
   - ``manualScale``: each applied manual scale's three factors replace its body's.
3. **Scaling the model** (`scale_osim`; each component scaled by the factors of the body its
   frame is fixed to, ``ModelComponent::getScaleFactors``): body mass centres; attached geometry's
   ``scale_factors``; offset frames' translations (by their parent's body); markers, stations and
   path points' locations; moving path points' location functions and custom joints' translation
   functions (other than ``LinearFunction(1, 0)``, a degree of freedom) wrapped in a
   ``MultiplierFunction`` (the joint's by ``|axis| · s`` of its parent frame's body); ellipsoid
   joints' radii; translational coupler constraints' ``scale_factor``; wrap objects' translation
   and size (cylinder: radius by the mean of ``|R e_x ∘ s|`` and ``|R e_y ∘ s|``, length by
   ``|R e_z ∘ s|``, ``R`` the wrap frame's rotation; ellipsoid: each dimension by ``|R e_i ∘
   s|``; sphere: radius by ``mean(s)``; torus: both radii as a cylinder's radius). Then the
   inertial properties (``Body::scaleInertialProperties``): with equal factors the inertia
   scales by ``s²`` (and the mass by ``s³`` unless the mass distribution is preserved); with
   unequal ones the body is taken as a cylinder along its smallest principal moment, its radius
   and length scaled and the moments recomputed, the products scaled by ``s_i s_j``. With a
   subject mass, every body's mass and inertia are then multiplied by ``mass / Σ masses``.
   Last, each muscle's ``optimal_fiber_length`` and ``tendon_slack_length`` are multiplied by
   its path length in the scaled model over that in the generic model, both at the default pose
   (``Muscle::extendPostScale``; jaxbio's paths with their wrap objects, `muscle_lengths`).
4. **Marker placement** (`place_markers`): markers of the model absent from the static trial
   are deleted; the static pose is the mean of the trial's frames within the placer's time range
   (clipped to the data), solved by inverse kinematics with the placer's tasks (jaxbio's solver,
   `solve_inverse_kinematics`, at its optimum where OpenSim stops at its assembler's tolerance);
   then every marker not ``fixed`` is moved onto its measured position at that pose (the mean
   over the frames of ``findFrameRange``, ignoring frames where it is missing).

The scaled model is written by editing the generic model's XML (4.x files) as OpenSim edits its
properties, numbers printed to round-trip exactly, so that the file equals OpenSim's to rounding.
Not supported (``NotImplementedError`` naming them): OpenSim 3.x model files (convert them with
OpenSim first), path forces other than Thelen2003 and Millard2012Equilibrium muscles and plain
path actuators (their rest lengths are scaled by path lengths jaxbio does not compute),
ScapulothoracicJoint and ConstantCurvatureJoint.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import tempfile
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from jaxbio._text import listing, read_xml
from jaxbio.io import Markers, read_trc
from jaxbio._osim_xml import function_element as _function_element, child_numbers as _numbers, child_text as _text

__all__ = [
    "format_marker_set",
    "format_scale_set",
    "Measurement",
    "ScaleResult",
    "ScaleSetup",
    "measurement_scale_factors",
    "place_markers",
    "read_scale_setup",
    "scale_factors",
    "scale_osim",
    "scale_tool",
]

_AXES = {"x": 0, "y": 1, "z": 2}


@dataclasses.dataclass(frozen=True)
class Measurement:
    """OpenSim's ``Measurement``: the mean ratio of measured to model distances of its
    ``marker_pairs`` scales the ``bodies`` (``{body: axes}``, axes a string of ``X``, ``Y``,
    ``Z``)."""

    name: str
    marker_pairs: tuple[tuple[str, str], ...]
    bodies: Mapping[str, str]
    apply: bool = True

    def __post_init__(self):
        for pair in self.marker_pairs:
            if len(pair) != 2:
                raise ValueError(f"measurement {self.name!r}: a marker pair names two markers, got {pair!r}")
        for body, axes in self.bodies.items():
            bad = [a for a in axes.replace(" ", "") if a.lower() not in _AXES]
            if bad:
                raise ValueError(f"measurement {self.name!r}: body {body!r}: axes are X, Y, Z, got {axes!r}")


@dataclasses.dataclass(frozen=True)
class ScaleSetup:
    """An OpenSim ``ScaleTool`` setup (`read_scale_setup`); paths absolute or relative to the
    working directory, None where the setup names none (``Unassigned``).

    - ``name``: the subject (the scaled model's name); ``mass``: kg, the subject's mass (≤ 0: the
      masses are not normalised).
    - ``model_file``, ``marker_set_file``: the generic model and the markers replacing its own.
    - Scaling (``ModelScaler``): ``scale`` (its ``apply``), ``scaling_order`` (``"measurements"``,
      ``"manualScale"``), ``measurements``, ``manual_scales`` (``{body: (3,) factors}``, the
      applied ones), ``marker_file`` and ``time_range`` (s) of the measurements,
      ``preserve_mass_distribution``, ``output_model_file``, ``output_scale_file``.
    - Placement (``MarkerPlacer``): ``place`` (its ``apply``), ``marker_weights`` and
      ``coordinate_tasks`` (`jaxbio.tools.read_ik_tasks`), ``placer_marker_file``,
      ``coordinate_file``, ``placer_time_range``, ``output_motion_file``,
      ``output_placed_model_file``, ``output_marker_file``, ``max_marker_movement`` (m, < 0: no
      limit; movements above it are warned about), ``move_markers``.
    """

    name: str = ""
    mass: float = -1.0
    model_file: str | None = None
    marker_set_file: str | None = None
    scale: bool = True
    scaling_order: tuple[str, ...] = ("measurements",)
    measurements: tuple[Measurement, ...] = ()
    manual_scales: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    marker_file: str | None = None
    time_range: tuple[float, float] | None = None
    preserve_mass_distribution: bool = False
    output_model_file: str | None = None
    output_scale_file: str | None = None
    place: bool = True
    marker_weights: Mapping[str, float] = dataclasses.field(default_factory=dict)
    coordinate_tasks: Mapping = dataclasses.field(default_factory=dict)
    placer_marker_file: str | None = None
    coordinate_file: str | None = None
    placer_time_range: tuple[float, float] | None = None
    output_motion_file: str | None = None
    output_placed_model_file: str | None = None
    output_marker_file: str | None = None
    max_marker_movement: float = -1.0
    move_markers: bool = True

    def __post_init__(self):
        for order in self.scaling_order:
            if order not in ("measurements", "manualScale"):
                raise ValueError(
                    f"scaling_order: {order!r} is not 'measurements' or 'manualScale' (OpenSim: Unrecognized string)"
                )


@dataclasses.dataclass(frozen=True)
class ScaleResult:
    """What `scale_tool` computed.

    - ``factors``: ``{frame: (3,)}`` the scale factors of every physical frame (OpenSim's applied
      ScaleSet); ``measured``: ``{measurement: factor}`` of the measurements used.
    - ``scaled``: the scaled model's ``.osim`` text (None when the setup does not scale);
      ``placed``: the model's text after marker placement (None without placement).
    - ``model``: the final model loaded (`jaxbio.io.load_osim`): the placed one, else the scaled one.
    - ``static_pose``: ``(nc,)`` rad / m, the coordinates of the static pose (None without
      placement); ``marker_errors``: ``{marker: distance}`` m at that pose before the markers moved.
    """

    factors: dict
    measured: dict
    scaled: str | None
    placed: str | None
    model: object
    static_pose: np.ndarray | None = None
    marker_errors: dict | None = None


# ---- the setup ------------------------------------------------------------------------------------


def _child_text(el, tag):
    child = el.find(tag) if el is not None else None
    if child is None or child.text is None or not child.text.strip():
        return None
    return child.text.strip()


def read_scale_setup(path) -> ScaleSetup:
    """OpenSim's ``ScaleTool`` setup file as a `ScaleSetup` (file names relative to the setup's
    folder, as OpenSim reads them). ``ValueError`` naming the file and element for a bad value."""
    from jaxbio.tools._inverse_kinematics import read_ik_tasks

    path = Path(path)
    root = read_xml(path, "OpenSim ScaleTool setup file")
    tool = root if root.tag == "ScaleTool" else root.find("ScaleTool")
    if tool is None:
        raise ValueError(f"{path}: no <ScaleTool>")
    here = path.parent

    def where(*tags):
        return f"{path}: <{'><'.join(('ScaleTool',) + tags)}>"

    def file(el, tag):
        text = _child_text(el, tag)
        return None if text in (None, "Unassigned") else str(here / text)

    def flag(el, tag, default, *at):
        text = (_child_text(el, tag) or default).lower()
        if text not in ("true", "false"):
            raise ValueError(f"{where(*at, tag)} must be true or false, got {text!r}")
        return text == "true"

    def number(el, tag, default, *at):
        text = _child_text(el, tag)
        try:
            return float(text) if text is not None else default
        except ValueError:
            raise ValueError(f"{where(*at, tag)} must be a number, got {text!r}") from None

    def span(el, tag, *at):
        text = _child_text(el, tag)
        if text is None:
            return None
        try:
            values = [float(v) for v in text.split()]
        except ValueError:
            raise ValueError(f"{where(*at, tag)} must hold two times, got {text!r}") from None
        if len(values) != 2:
            raise ValueError(f"{where(*at, tag)} must hold two times, got {text!r}")
        return (values[0], values[1])

    maker = tool.find("GenericModelMaker")
    scaler = tool.find("ModelScaler")
    placer = tool.find("MarkerPlacer")
    kwargs: dict = dict(
        name=tool.get("name", ""),
        mass=number(tool, "mass", -1.0),
        model_file=file(maker, "model_file") if maker is not None else None,
        marker_set_file=file(maker, "marker_set_file") if maker is not None else None,
    )
    if scaler is None:
        kwargs["scale"] = False
    else:
        measurements = []
        for m in scaler.findall("MeasurementSet/objects/Measurement"):
            name = m.get("name", "")
            at = ("ModelScaler", f"Measurement name={name!r}")
            pairs = []
            for p in m.findall("MarkerPairSet/objects/MarkerPair"):
                names = (_child_text(p, "markers") or "").split()
                if len(names) != 2:
                    raise ValueError(f"{where(*at, 'MarkerPair', 'markers')} must name two markers, got {names}")
                pairs.append((names[0], names[1]))
            bodies = {
                b.get("name", ""): " ".join((_child_text(b, "axes") or "").split())
                for b in m.findall("BodyScaleSet/objects/BodyScale")
            }
            measurements.append(Measurement(name, tuple(pairs), bodies, flag(m, "apply", "true", *at)))
        manual = {}
        for s in scaler.findall("ScaleSet/objects/Scale"):
            segment = _child_text(s, "segment") or ""
            if not flag(s, "apply", "true", "ModelScaler", "Scale"):
                continue
            manual[segment] = _numbers(s, "scales", 3, where("ModelScaler", f"Scale segment={segment!r}"), [1, 1, 1])
        kwargs.update(
            scale=flag(scaler, "apply", "true", "ModelScaler"),
            scaling_order=tuple((_child_text(scaler, "scaling_order") or "").split()),
            measurements=tuple(measurements),
            manual_scales=manual,
            marker_file=file(scaler, "marker_file"),
            time_range=span(scaler, "time_range", "ModelScaler"),
            preserve_mass_distribution=flag(scaler, "preserve_mass_distribution", "false", "ModelScaler"),
            output_model_file=file(scaler, "output_model_file"),
            output_scale_file=file(scaler, "output_scale_file"),
        )
    if placer is None:
        kwargs["place"] = False
    else:
        tasks = placer.find("IKTaskSet")
        weights, coords = read_ik_tasks(tasks, where=str(path)) if tasks is not None else ({}, {})
        kwargs.update(
            place=flag(placer, "apply", "true", "MarkerPlacer"),
            marker_weights=weights,
            coordinate_tasks=coords,
            placer_marker_file=file(placer, "marker_file"),
            coordinate_file=file(placer, "coordinate_file"),
            placer_time_range=span(placer, "time_range", "MarkerPlacer"),
            output_motion_file=file(placer, "output_motion_file"),
            output_placed_model_file=file(placer, "output_model_file"),
            output_marker_file=file(placer, "output_marker_file"),
            max_marker_movement=number(placer, "max_marker_movement", -1.0, "MarkerPlacer"),
            move_markers=flag(placer, "move_model_markers", "true", "MarkerPlacer"),
        )
    try:
        return ScaleSetup(**kwargs)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


# ---- the model's XML ------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    """A number as OpenSim reads it back exactly (shortest round-trip form)."""
    x = float(x)
    return repr(x) if math.isfinite(x) else ("NaN" if math.isnan(x) else ("Inf" if x > 0 else "-Inf"))


def _set(elem: ET.Element, tag: str, values) -> None:
    child = elem.find(tag)
    if child is None:
        child = ET.SubElement(elem, tag)
    child.text = " ".join(_fmt(v) for v in np.atleast_1d(values))


class _Document:
    """A 4.x model document being scaled: its bodies, frames and the base body of each frame."""

    def __init__(self, root: ET.Element, where: str):
        from jaxbio.io.osim import Frames as _Frames

        self.where = where
        self.root = root
        self.model = root if root.tag == "Model" else root.find("Model")
        if self.model is None:
            raise ValueError(f"{where}: no <Model>")
        version = root.get("Version", "")
        if self.model.find("JointSet") is None or (version.isdigit() and int(version) < 30505):
            raise NotImplementedError(
                f"{where}: an OpenSim 3.x model file (Version {version or '?'}); jaxbio scales 4.x files: "
                "open and save it with OpenSim 4 first"
            )
        ground = self.model.find("Ground")
        self.ground = ground.get("name", "ground") if ground is not None else "ground"
        self.bodies = {b.get("name"): b for b in self.model.findall("BodySet/objects/Body")}
        self.frames = _Frames(self.model, self.ground, list(self.bodies))
        self.path_of = {id(item): p for p, (kind, item) in self.frames.paths.items() if kind == "frame"}
        self.parent = {id(c): p for p in self.model.iter() for c in p}

    def frame_names(self) -> list[str]:
        """Every physical frame's name (OpenSim's ScaleSet entries): the ground, the bodies, then
        the offset frames in file order."""
        out = [self.ground, *self.bodies]
        out += [item.get("name") for kind, item in self.frames.paths.values() if kind == "frame"]
        return out

    def base(self, path: str) -> str:
        return self.frames.pose(path, self.where)[0]

    def base_of_socket(self, elem: ET.Element, tag: str, owner: str = "/") -> str:
        text = _text(elem, tag)
        here = f"{self.where}: {elem.tag} {elem.get('name')!r}"
        if not text:
            raise ValueError(f"{here}: no <{tag}>")
        return self.base(self.frames.resolve(text, owner, here))

    def enclosing_frame(self, elem: ET.Element) -> str:
        """The base body of the frame (Body, Ground, PhysicalOffsetFrame) holding ``elem``."""
        p = self.parent.get(id(elem))
        while p is not None:
            if p.tag == "Body" and p.get("name") in self.bodies:
                return p.get("name")
            if p.tag == "Ground":
                return self.ground
            if p.tag == "PhysicalOffsetFrame" and id(p) in self.path_of:
                return self.base(self.path_of[id(p)])
            p = self.parent.get(id(p))
        raise ValueError(f"{self.where}: {elem.tag} {elem.get('name')!r} is not held by a frame")


def _multiply_function(holder: ET.Element, function: ET.Element, factor: float) -> None:
    """``function`` (a child of ``holder``) times ``factor``: a MultiplierFunction's scale is
    multiplied, any other function is wrapped in one (``MultiplierFunction``'s XML)."""
    if function.tag == "MultiplierFunction":
        scale = _numbers(function, "scale", 1, "MultiplierFunction", default=[1.0])[0]
        _set(function, "scale", scale * factor)
        return
    index = list(holder).index(function)
    wrapper = ET.Element("MultiplierFunction", {k: v for k, v in function.attrib.items() if k == "name"})
    inner = ET.SubElement(wrapper, "function")
    holder.remove(function)
    if "name" in function.attrib:
        function.set("name", "function")
    inner.append(function)
    ET.SubElement(wrapper, "scale").text = _fmt(factor)
    wrapper.tail, function.tail = function.tail, None
    holder.insert(index, wrapper)


def _rotation_xyz(angles) -> np.ndarray:
    """``SimTK::Rotation::setRotationToBodyFixedXYZ``: ``Rx(a) Ry(b) Rz(c)``."""
    a, b, c = angles
    rx = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])
    return rx @ ry @ rz


def _is_numerically_equal(a: float, b: float) -> bool:
    """``SimTK::isNumericallyEqual`` at its default tolerance (``SignificantReal``)."""
    tol = np.finfo(float).eps ** 0.875
    scale = max(abs(a), abs(b), 1.0)
    return abs(a - b) <= scale * tol


def _scale_inertia(mass0: float, mass: float, inertia: np.ndarray, s: np.ndarray, scale_mass: bool) -> np.ndarray:
    """``Body::scaleInertialProperties``: the 3×3 inertia scaled by ``s`` (``mass0`` the mass
    before, ``mass`` after its scaling)."""
    inertia = inertia.copy()
    m3 = abs(s[0] * s[1] * s[2])
    if mass <= np.finfo(float).eps:
        return inertia * 0.0
    if _is_numerically_equal(s[0], s[1]) and _is_numerically_equal(s[1], s[2]):
        if scale_mass:
            inertia = inertia * m3
        return inertia * (s[0] * s[0])
    d = inertia.diagonal()
    if d[0] <= d[1]:
        axis = 0 if d[0] <= d[2] else 2
    else:
        axis = 1 if d[1] <= d[2] else 2
    term = 2.0 * inertia[axis, axis] / mass0
    radius = 0.0 if term < 0.0 else math.sqrt(term)
    oa = 1 if axis == 0 else 0
    term = 12.0 * (inertia[oa, oa] - 0.25 * mass0 * radius * radius) / mass0
    length = 0.0 if term < 0.0 else math.sqrt(term)
    length *= s[axis]
    i, j = [k for k in range(3) if k != axis]
    rad_sqr = radius * s[i] * radius * s[j]
    for k in range(3):
        inertia[k, k] = 0.5 * mass * rad_sqr if k == axis else mass * ((length * length / 12.0) + 0.25 * rad_sqr)
    for a in range(3):
        for b in range(3):
            if a != b:
                inertia[a, b] *= s[a] * s[b]
                if scale_mass:
                    inertia[a, b] *= m3
    return inertia


def _inertia_matrix(v: np.ndarray) -> np.ndarray:
    xx, yy, zz, xy, xz, yz = v
    return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])


_UNSUPPORTED_JOINTS = ("ScapulothoracicJoint", "ConstantCurvatureJoint")
_PATH_MUSCLES = ("Thelen2003Muscle", "Millard2012EquilibriumMuscle")
_WRAPS = ("WrapCylinder", "WrapEllipsoid", "WrapSphere", "WrapTorus")


def _coordinate_motion(model: ET.Element, name: str):
    """``(joint element, translational?)`` of the coordinate ``name`` (None if not found)."""
    for joint in model.findall("JointSet/objects/*"):
        coords = [c.get("name") for c in joint.findall("coordinates/Coordinate")]
        if name not in coords:
            continue
        k = coords.index(name)
        if joint.tag == "CustomJoint":
            rot = trans = False
            for axis in joint.findall("SpatialTransform/TransformAxis"):
                names = (_text(axis, "coordinates") or "").split()
                if name in names:
                    rot |= axis.get("name", "").startswith("rotation")
                    trans |= axis.get("name", "").startswith("translation")
            return joint, trans and not rot
        translational = {"SliderJoint": (0,), "PlanarJoint": (1, 2), "FreeJoint": (3, 4, 5)}.get(joint.tag, ())
        return joint, k in translational
    return None, False


def _path_forces(model: ET.Element):
    """The ForceSet's forces with a GeometryPath, as ``(element, enabled)``."""
    out = []
    for f in model.findall("ForceSet/objects/*"):
        if f.find("GeometryPath") is not None or f.find("path/GeometryPath") is not None:
            out.append(f)
    return out


def scale_osim(
    source,
    factors: Mapping[str, Sequence[float]],
    *,
    preserve_mass_distribution: bool = False,
    mass: float | None = None,
    name: str | None = None,
) -> str:
    """OpenSim's ``Model::scale`` on a 4.x ``.osim`` (module docstring, step 3): the scaled
    model's XML text.

    - ``source``: the generic model: a ``.osim`` path, its text, or an ``ElementTree`` root
      (not modified).
    - ``factors``: ``{frame: (3,)}`` scale factors by body (or offset frame) name; frames not
      named keep 1 (`scale_factors` gives OpenSim's).
    - ``preserve_mass_distribution``: masses are not scaled by the segments' volume change.
    - ``mass``: kg, the subject's total mass (None or ≤ 0: the masses are not normalised).
    - ``name``: the scaled model's name (None: unchanged).

    Computes in float64 (the muscles' path lengths inside ``jax.enable_x64``). ``ValueError``
    for a factor that is not three finite numbers, or naming no frame of the model;
    ``NotImplementedError`` for what the module docstring lists as unsupported."""
    root, where = _root(source)
    root = copy.deepcopy(root)
    doc = _Document(root, where)
    known = set(doc.frame_names())
    s_of: dict[str, np.ndarray] = {}
    for frame, f in factors.items():
        v = np.asarray(f, dtype=float)
        if v.shape != (3,) or not np.all(np.isfinite(v)):
            raise ValueError(f"scale factors of {frame!r}: need three finite numbers, got {f!r}")
        if frame not in known:
            raise ValueError(f"{where}: scale factors name {frame!r}, which is no body or frame of the model")
        s_of[frame] = v
    one = np.ones(3)

    def s(body: str) -> np.ndarray:
        return s_of.get(body, one)

    model = doc.model
    bad = [f"{j.tag} {j.get('name')!r}" for j in model.findall("JointSet/objects/*") if j.tag in _UNSUPPORTED_JOINTS]
    bad += [f"{f.tag} {f.get('name')!r}" for f in _path_forces(model) if f.tag not in _PATH_MUSCLES + ("PathActuator",)]
    if bad:
        raise NotImplementedError(f"{where}: scaling {listing(bad, 8)} is not supported")

    generic_lengths = _default_path_lengths(root, where) if _path_forces(model) else {}

    # frames: geometry, mass centres, offset translations
    for body_name, body in doc.bodies.items():
        f = s(body_name)
        _set(body, "mass_center", _numbers(body, "mass_center", 3, where, default=np.zeros(3)) * f)
    frame_elems = [(b, n) for n, b in doc.bodies.items()]
    ground = model.find("Ground")
    if ground is not None:
        frame_elems.append((ground, doc.ground))
    for path, (kind, item) in doc.frames.paths.items():
        if kind == "frame":
            frame_elems.append((item, doc.base(path)))
            parent = doc.frames.resolve(
                _text(item, "socket_parent") or "", path, f"{where}: PhysicalOffsetFrame {item.get('name')!r}"
            )
            t = _numbers(item, "translation", 3, where, default=np.zeros(3))
            _set(item, "translation", t * s(doc.base(parent)))
    for frame, body_name in frame_elems:
        for geometry in frame.findall("attached_geometry/*"):
            sf = _numbers(geometry, "scale_factors", 3, where, default=np.ones(3))
            _set(geometry, "scale_factors", sf * s(body_name))

    # stations, markers, path points
    for tag in ("Marker", "Station", "PathPoint", "ConditionalPathPoint"):
        for el in model.iter(tag):
            owner = f"/markerset/{el.get('name')}" if tag == "Marker" else "/"
            body_name = doc.base_of_socket(el, "socket_parent_frame", owner)
            _set(el, "location", _numbers(el, "location", 3, where, default=np.zeros(3)) * s(body_name))
    for el in model.iter("MovingPathPoint"):
        f = s(doc.base_of_socket(el, "socket_parent_frame"))
        for k, c in enumerate("xyz"):
            if not _text(el, f"socket_{c}_coordinate"):
                continue
            holder = el.find(f"{c}_location")
            function = next((ch for ch in holder if isinstance(ch.tag, str)), None) if holder is not None else None
            if function is not None:
                _multiply_function(holder, function, float(f[k]))

    # joints and constraints
    for joint in model.findall("JointSet/objects/*"):
        owner = f"/jointset/{joint.get('name')}"
        if joint.tag == "CustomJoint":
            f = s(doc.base_of_socket(joint, "socket_parent_frame", owner))
            for axis in joint.findall("SpatialTransform/TransformAxis"):
                if not axis.get("name", "").startswith("translation"):
                    continue
                function = _function_element(axis, ("coordinates", "axis"), where)
                if function is None:
                    continue
                if function.tag == "LinearFunction":
                    coefficients = _numbers(function, "coefficients", 2, where, default=[1.0, 0.0])
                    if coefficients[0] == 1.0 and coefficients[1] == 0.0:
                        continue
                direction = _numbers(axis, "axis", 3, where, default=[1.0, 0.0, 0.0])
                holder = axis if function in list(axis) else axis.find("function")
                _multiply_function(holder, function, float(np.abs(direction) @ f))
        elif joint.tag == "EllipsoidJoint":
            f = s(doc.base_of_socket(joint, "socket_parent_frame", owner))
            _set(joint, "radii_x_y_z", _numbers(joint, "radii_x_y_z", 3, where) * f)
    for constraint in model.findall("ConstraintSet/objects/CoordinateCouplerConstraint"):
        dependent = _text(constraint, "dependent_coordinate_name")
        joint, translational = _coordinate_motion(model, dependent or "")
        if joint is None or not translational:
            continue
        f = s(doc.base_of_socket(joint, "socket_parent_frame", f"/jointset/{joint.get('name')}"))
        if f[0] != f[1] or f[0] != f[2]:
            raise ValueError(
                f"{where}: CoordinateCouplerConstraint {constraint.get('name')!r}: non-uniform scaling of a "
                "translational coupler is not implemented (OpenSim refuses it too)"
            )
        _set(constraint, "scale_factor", _numbers(constraint, "scale_factor", 1, where, default=[1.0]) * f[0])

    # wrap objects
    for wrap_set in model.iter("WrapObjectSet"):
        for wrap in wrap_set.findall("objects/*"):
            f = s(doc.enclosing_frame(wrap_set))
            here = f"{where}: {wrap.tag} {wrap.get('name')!r}"
            _set(wrap, "translation", _numbers(wrap, "translation", 3, here, default=np.zeros(3)) * f)
            R = _rotation_xyz(_numbers(wrap, "xyz_body_rotation", 3, here, default=np.zeros(3)))
            local = [np.linalg.norm(R[:, k] * f) for k in range(3)]
            if wrap.tag == "WrapCylinder":
                _set(
                    wrap, "radius", _numbers(wrap, "radius", 1, here, default=[1.0])[0] * ((local[0] + local[1]) * 0.5)
                )
                _set(wrap, "length", _numbers(wrap, "length", 1, here, default=[1.0])[0] * local[2])
            elif wrap.tag == "WrapEllipsoid":
                dims = _numbers(wrap, "dimensions", 3, here, default=np.ones(3))
                _set(wrap, "dimensions", [dims[k] * local[k] for k in range(3)])
            elif wrap.tag == "WrapSphere":
                _set(wrap, "radius", _numbers(wrap, "radius", 1, here, default=[0.05])[0] * (f.sum() / 3.0))
            elif wrap.tag == "WrapTorus":
                average = (local[0] + local[1]) * 0.5
                _set(wrap, "inner_radius", _numbers(wrap, "inner_radius", 1, here, default=[0.01])[0] * average)
                _set(wrap, "outer_radius", _numbers(wrap, "outer_radius", 1, here, default=[0.05])[0] * average)

    # inertial properties, then the subject's mass
    scale_mass = not preserve_mass_distribution
    for body_name, body in doc.bodies.items():
        here = f"{where}: Body {body_name!r}"
        f = s(body_name)
        m0 = float(_numbers(body, "mass", 1, here)[0])
        m = m0 * abs(f[0] * f[1] * f[2]) if scale_mass else m0
        inertia = _inertia_matrix(_numbers(body, "inertia", 6, here, default=np.zeros(6)))
        inertia = _scale_inertia(m0, m, inertia, f, scale_mass)
        _set(body, "mass", m)
        _set(
            body, "inertia", [inertia[0, 0], inertia[1, 1], inertia[2, 2], inertia[0, 1], inertia[0, 2], inertia[1, 2]]
        )
    if mass is not None and mass > 0:
        total = sum(float(_numbers(b, "mass", 1, where)[0]) for b in doc.bodies.values())
        if total > 0:
            ratio = mass / total
            for body in doc.bodies.values():
                _set(body, "mass", float(_numbers(body, "mass", 1, where)[0]) * ratio)
                _set(body, "inertia", ratio * _numbers(body, "inertia", 6, where))

    # muscles: optimal fibre and tendon slack lengths with the path length at the default pose
    if generic_lengths:
        scaled_lengths = _default_path_lengths(root, where)
        for force in _path_forces(model):
            name_ = force.get("name")
            if force.tag not in _PATH_MUSCLES or not generic_lengths.get(name_, 0.0) > 0.0:
                continue
            ratio = scaled_lengths[name_] / generic_lengths[name_]
            for tag in ("optimal_fiber_length", "tendon_slack_length"):
                _set(force, tag, _numbers(force, tag, 1, f"{where}: {force.tag} {name_!r}")[0] * ratio)
    if name is not None:
        model.set("name", name)
    return _tostring(root)


def _root(source) -> tuple[ET.Element, str]:
    if isinstance(source, ET.Element):
        return source, "model"
    if isinstance(source, (str, os.PathLike)) and not str(source).lstrip().startswith("<"):
        return read_xml(source, "OpenSim model file"), str(source)
    from jaxbio._text import parse_xml

    return parse_xml(str(source).encode()), "model"


def _tostring(root: ET.Element) -> str:
    from jaxbio._text import _COLONS

    text = ET.tostring(root, encoding="unicode")
    text = text.replace(_COLONS.decode(), "::")
    return '<?xml version="1.0" encoding="UTF-8" ?>\n' + text + "\n"


def _load_text(text: str, stem: str = "model", **kwargs):
    """`load_osim` of a model's XML text (through a temporary file)."""
    from jaxbio.io.osim import load_osim

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"{stem}.osim"
        p.write_text(text)
        return load_osim(p, **kwargs)


def _default_path_lengths(root: ET.Element, where: str) -> dict[str, float]:
    """``{muscle: path length}`` m at the model's default pose, every Thelen2003 and
    Millard2012Equilibrium muscle (disabled ones too: OpenSim scales them)."""
    import jax
    import jax.numpy as jnp

    from jaxbio.forces import muscle_lengths

    root = copy.deepcopy(root)
    model = root if root.tag == "Model" else root.find("Model")
    for force in _path_forces(model):
        for tag in ("appliesForce", "isDisabled"):
            el = force.find(tag)
            if el is not None:
                el.text = "true" if tag == "appliesForce" else "false"
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = _load_text(_tostring(root), dtype=jnp.float64)
        if m.muscles is None:
            return {}
        lengths = np.asarray(muscle_lengths(m, m.defaults), dtype=float)
    return dict(zip(m.muscles.names, lengths.tolist()))


def _with_marker_set(root: ET.Element, marker_set, where: str) -> ET.Element:
    """``Model::updateMarkerSet``: the markers of ``marker_set`` (a file) replace the model's of
    the same name, the others are appended. 2.x/3.x markers (``<body>``) become 4.x ones."""
    root = copy.deepcopy(root)
    model = root if root.tag == "Model" else root.find("Model")
    other = read_xml(marker_set, "OpenSim marker set file")
    mset = other if other.tag == "MarkerSet" else other.find(".//MarkerSet")
    if mset is None:
        raise ValueError(f"{marker_set}: no <MarkerSet>")
    ground = model.find("Ground")
    ground_name = ground.get("name", "ground") if ground is not None else "ground"
    target = model.find("MarkerSet")
    if target is None:
        target = ET.SubElement(model, "MarkerSet", {"name": "markerset"})
    objects = target.find("objects")
    if objects is None:
        objects = ET.SubElement(target, "objects")
    for marker in mset.findall("objects/Marker"):
        new = ET.Element("Marker", {"name": marker.get("name", "")})
        frame = _text(marker, "socket_parent_frame")
        if not frame:
            body = _text(marker, "body")
            if not body:
                raise ValueError(f"{marker_set}: Marker {marker.get('name')!r} names no frame or body")
            frame = f"/{ground_name}" if body == ground_name else f"/bodyset/{body}"
        ET.SubElement(new, "socket_parent_frame").text = frame
        ET.SubElement(new, "location").text = " ".join(
            _fmt(v) for v in _numbers(marker, "location", 3, str(marker_set), default=np.zeros(3))
        )
        ET.SubElement(new, "fixed").text = (_text(marker, "fixed") or "false").lower()
        for old in objects.findall("Marker"):
            if old.get("name") == new.get("name"):
                objects.remove(old)
        objects.append(new)
    return root


# ---- scale factors ---------------------------------------------------------------------------------


def _frame_range(time: np.ndarray, start: float, end: float, where: str) -> tuple[int, int]:
    """``MarkerData::findFrameRange`` (the last frame at or before ``start``, the first at or
    after ``end``), refusing a range that misses the data."""
    if not start <= end:
        raise ValueError(f"{where}: the time range {start:g}–{end:g} s ends before it starts")
    if end < time[0] or start > time[-1]:
        raise ValueError(
            f"{where}: the time range {start:g}–{end:g} s is outside the data ({time[0]:g}–{time[-1]:g} s)"
        )
    before = np.flatnonzero(time <= start)
    first = int(before[-1]) if before.size else 0
    after = np.flatnonzero(time[first:] >= end)
    last = first + int(after[0]) if after.size else time.size - 1
    return first, last


def _read_markers(markers) -> tuple[Markers, str]:
    if isinstance(markers, Markers):
        return markers, "markers"
    return read_trc(markers), str(markers)


def measurement_scale_factors(
    model, markers, measurements: Sequence[Measurement], time_range: tuple[float, float]
) -> dict[str, float]:
    """Each applied measurement's factor (``ModelScaler::computeMeasurementScaleFactor``): the
    mean over its marker pairs of the pair's distance in the trial (averaged over the frames of
    the time range, s) over its distance in ``model`` at the default pose.

    - ``model``: a `jaxbio.Model` with markers (or a ``.osim`` path); ``markers``: a ``.trc`` path
      or `Markers`.

    ``ValueError`` naming them for markers missing from the model or the trial and for a time
    range outside the trial. A measurement without marker pairs, or with a pair missing (NaN) in
    a frame of the range, is left out with a warning (OpenSim: "measurement not used")."""
    from jaxbio.markers import marker_positions
    from jaxbio.tools._inverse_dynamics import tool_model

    m = tool_model(model)
    data, where = _read_markers(markers)
    applied = [x for x in measurements if x.apply]
    model_names = set(m.markers.names) if m.markers is not None else set()
    missing_model = sorted({n for x in applied for p in x.marker_pairs for n in p if n not in model_names})
    missing_data = sorted({n for x in applied for p in x.marker_pairs for n in p if n not in data.names})
    problems = []
    if missing_model:
        problems.append(f"not in the model ({m.path}): {listing(missing_model, 20)}")
    if missing_data:
        problems.append(f"not in the marker file ({where}): {listing(missing_data, 20)}")
    if problems:
        raise ValueError("markers named in the measurements are " + "; ".join(problems))
    if not applied:
        return {}
    if time_range is None:
        raise ValueError("the measurements need the marker file's time range (<time_range>)")
    first, last = _frame_range(data.time, float(time_range[0]), float(time_range[1]), where)
    x = np.asarray(marker_positions(m, m.defaults), dtype=float)
    index = {n: i for i, n in enumerate(m.markers.names)}
    out = {}
    for meas in applied:
        if not meas.marker_pairs:
            warnings.warn(f"measurement {meas.name!r} has no marker pairs; it is not used", stacklevel=2)
            continue
        total, ok = 0.0, True
        for a, b in meas.marker_pairs:
            model_length = float(np.linalg.norm(x[index[a]] - x[index[b]]))
            pa = data.positions[first : last + 1, data.names.index(a)]
            pb = data.positions[first : last + 1, data.names.index(b)]
            trial = float(np.sum(np.linalg.norm(pb - pa, axis=1))) / (last - first + 1)
            if not (math.isfinite(trial) and math.isfinite(model_length)):
                warnings.warn(
                    f"measurement {meas.name!r}: markers {a}, {b} are missing in frames of {where} within "
                    f"{data.time[first]:g}–{data.time[last]:g} s; the measurement is not used (as OpenSim)",
                    stacklevel=2,
                )
                ok = False
                break
            total += trial / model_length
        if ok:
            out[meas.name] = total / len(meas.marker_pairs)
    return out


def scale_factors(
    frames: Sequence[str],
    *,
    scaling_order: Sequence[str] = ("measurements",),
    measurements: Sequence[Measurement] = (),
    measured: Mapping[str, float] | None = None,
    manual_scales: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, np.ndarray]:
    """OpenSim's applied ScaleSet: ``{frame: (3,)}`` for every name of ``frames`` (1 unless set),
    the steps of ``scaling_order`` in turn: ``"measurements"`` puts each measurement's factor
    (``measured``, `measurement_scale_factors`) on the named axes of its bodies;
    ``"manualScale"`` copies each manual scale's factors to its body."""
    out = {f: np.ones(3) for f in frames}
    for step in scaling_order:
        if step == "measurements":
            for meas in measurements:
                if not meas.apply or meas.name not in (measured or {}):
                    continue
                for body, axes in meas.bodies.items():
                    if body in out:
                        v = out[body].copy()
                        for a in axes.replace(" ", ""):
                            v[_AXES[a.lower()]] = measured[meas.name]
                        out[body] = v
        elif step == "manualScale":
            for body, f in (manual_scales or {}).items():
                if body in out:
                    out[body] = np.asarray(f, dtype=float).copy()
        else:
            raise ValueError(f"scaling_order: {step!r} is not 'measurements' or 'manualScale'")
    return out


def format_scale_set(factors: Mapping[str, np.ndarray]) -> str:
    """OpenSim's ScaleSet file of the applied factors."""
    lines = [
        '<?xml version="1.0" encoding="UTF-8" ?>',
        '<OpenSimDocument Version="40600">',
        '\t<ScaleSet name="ScaleSet">',
        "\t\t<objects>",
    ]
    for frame, f in factors.items():
        lines += [
            "\t\t\t<Scale>",
            f"\t\t\t\t<scales> {' '.join(_fmt(v) for v in f)}</scales>",
            f"\t\t\t\t<segment>{frame}</segment>",
            "\t\t\t\t<apply>true</apply>",
            "\t\t\t</Scale>",
        ]
    lines += ["\t\t</objects>", "\t\t<groups />", "\t</ScaleSet>", "</OpenSimDocument>", ""]
    return "\n".join(lines)


def format_marker_set(model_text: str) -> str:
    """``Model::writeMarkerFile``: the model's MarkerSet as a document of its own."""
    root, _ = _root(model_text)
    model = root if root.tag == "Model" else root.find("Model")
    markers = model.find("MarkerSet")
    doc = ET.Element("OpenSimDocument", {"Version": root.get("Version", "40000")})
    doc.append(copy.deepcopy(markers) if markers is not None else ET.Element("MarkerSet", {"name": "markerset"}))
    return _tostring(doc)


# ---- marker placement -----------------------------------------------------------------------------

#: m: a tracked marker farther than this from the trial's at the static pose is warned about
MARKER_FIT_WARNING = 0.1


def place_markers(
    source,
    markers,
    *,
    time_range: tuple[float, float] | None = None,
    marker_weights: Mapping[str, float] | None = None,
    coordinate_tasks: Mapping | None = None,
    coordinate_file=None,
    max_marker_movement: float = -1.0,
    move_markers: bool = True,
    static_pose=None,
) -> tuple[str, np.ndarray, dict, object]:
    """OpenSim's ``MarkerPlacer`` (module docstring, step 4) on a 4.x model.

    - ``source``: the (scaled) model: a ``.osim`` path, its text or an ``ElementTree`` root.
    - ``markers``: the static trial (a ``.trc`` path or `Markers`); ``time_range``: s, the
      frames averaged (None: all; clipped to the data, ``ValueError`` when outside it).
    - ``marker_weights``, ``coordinate_tasks``, ``coordinate_file``: the IK tasks, as
      `jaxbio.tools.prepare_inverse_kinematics` takes them.
    - ``max_marker_movement``: m; a marker moving more within the range is warned about (< 0: no
      check). ``move_markers``: False solves the pose and leaves the markers.
    - ``static_pose``: ``(nc,)`` rad / m, the static pose's coordinates to use instead of
      solving for them (e.g. OpenSim's).

    Returns ``(text, c, errors, inputs)``: the model's XML with the markers moved, the static
    pose ``(nc,)`` rad / m, ``{marker: distance}`` m between model and trial markers at that pose
    (before moving), and the `InverseKinematicsInputs` solved. Warns, naming them, when tracked
    markers are more than ``MARKER_FIT_WARNING`` (0.1 m) from the trial's at the static pose: a
    static trial that does not fit the model (its units, its names, another subject)."""
    import jax
    import jax.numpy as jnp

    from jaxbio import quaternion as quat
    from jaxbio import coordinates
    from jaxbio.dynamics.kinematics import segment_motion
    from jaxbio.tools._inverse_kinematics import _solve, prepare_inverse_kinematics

    root, where = _root(source)
    root = copy.deepcopy(root)
    doc = _Document(root, where)
    data, data_where = _read_markers(markers)
    t = data.time
    t0, t1 = (t[0], t[-1]) if time_range is None else (float(time_range[0]), float(time_range[1]))
    if not t0 <= t1:
        raise ValueError(f"{data_where}: the marker placer's time range {t0:g}–{t1:g} s ends before it starts")
    if t1 < t[0] or t0 > t[-1]:
        raise ValueError(
            f"{data_where}: the marker placer's time range {t0:g}–{t1:g} s is outside the data ({t[0]:g}–{t[-1]:g} s)"
        )
    t0, t1 = max(t0, t[0]), min(t1, t[-1])
    # the IK's target: TimeSeriesTable::averageRow, the rows within [t0, t1] (a gap stays NaN)
    rows = (t >= t0) & (t <= t1)
    if not rows.any():
        raise ValueError(f"{data_where}: no frame within {t0:g}–{t1:g} s")
    pose = data.positions[rows].mean(axis=0)
    # the markers' new places: MarkerData::averageFrames, the frames of findFrameRange, gaps left out
    first, last = _frame_range(t, t0, t1, data_where)
    window = data.positions[first : last + 1]
    seen = ~np.isnan(window[..., 0])
    counts = seen.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        placed = np.where(counts[:, None] > 0, np.nansum(window, axis=0) / counts[:, None], np.nan)
    if max_marker_movement > 0:
        spread = np.nanmax(window, axis=0) - np.nanmin(window, axis=0)
        moved = [
            f"{n} ({np.nanmax(spread[k]):.4g} m)"
            for k, n in enumerate(data.names)
            if counts[k] and np.nanmax(spread[k]) > max_marker_movement
        ]
        if moved:
            warnings.warn(
                f"{data_where}: markers move more than {max_marker_movement:g} m within {t0:g}–{t1:g} s: "
                f"{listing(moved, 12)}",
                stacklevel=2,
            )

    # Model::deleteUnusedMarkers: the model's markers absent from the trial are deleted
    model = doc.model
    objects = model.find("MarkerSet/objects")
    if objects is not None:
        for marker in objects.findall("Marker"):
            if marker.get("name") not in data.names:
                objects.remove(marker)
    text = _tostring(root)
    static = Markers(time=np.array([t0]), names=data.names, positions=pose[None], rate=data.rate, header=data.header)
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not imported.*")
        m = _load_text(text, stem=model.get("name") or "model", dtype=jnp.float64)
    with jax.enable_x64(True):
        inputs = prepare_inverse_kinematics(
            m,
            static,
            marker_weights=marker_weights or None,
            coordinate_tasks=coordinate_tasks,
            coordinate_file=coordinate_file,
            dtype=jnp.float64,
        )
        if static_pose is None:
            c, ok, _ = _solve(m, inputs, None, 1e-10, 1e-12, 256)  # the IK tool's tolerances
            c = np.asarray(c[0], dtype=float)
            if not bool(ok[0]):
                warnings.warn("marker placement: the static pose's IK did not meet its tolerance", stacklevel=2)
        else:
            c = np.asarray(static_pose, dtype=float)
            if c.shape != (len(m.coordinate_names),):
                raise ValueError(f"static_pose: need {len(m.coordinate_names)} coordinates, got shape {c.shape}")
        q = coordinates.to_tree(m.coordinates, jnp.asarray(c))
        mo = segment_motion(m.tree, q)
        from jaxbio.markers import marker_positions

        x = np.asarray(marker_positions(m, jnp.asarray(c)), dtype=float)
        pos = np.asarray(mo.position, dtype=float)
        att = np.asarray(mo.attitude, dtype=float)
    mk = m.markers
    errors = {}
    for k, n in enumerate(mk.names):
        j = data.names.index(n)
        if not np.isnan(pose[j, 0]):
            errors[n] = float(np.linalg.norm(x[k] - pose[j]))
    tracked = {n: errors[n] for n in inputs.markers if n in errors}
    far = {n: d for n, d in tracked.items() if d > MARKER_FIT_WARNING}
    if far:  # OpenSim only prints these errors; a trial this far off moves markers silently
        rms = math.sqrt(sum(d * d for d in tracked.values()) / len(tracked))
        warnings.warn(
            f"{data_where}: the static trial does not fit the model ({where}): at the static pose "
            f"{len(far)} tracked marker(s) are more than {MARKER_FIT_WARNING:g} m from the trial's "
            f"(RMS {rms:.3g} m): {listing([f'{n} ({d:.3g} m)' for n, d in far.items()], 12)}; check the "
            "trial's units, its marker names and the subject",
            stacklevel=2,
        )
    if move_markers:
        by_name = {el.get("name"): el for el in (objects.findall("Marker") if objects is not None else [])}
        for k, n in enumerate(mk.names):
            if mk.fixed[k]:
                continue
            target = placed[data.names.index(n)]
            if np.isnan(target[0]):
                warnings.warn(
                    f"marker {n} has no valid coordinates in {data_where} within {t0:g}–{t1:g} s; it is not moved",
                    stacklevel=2,
                )
                continue
            seg = mk.segments[k]
            if seg < 0:
                in_segment = target
            else:
                in_segment = np.asarray(quat.rotate(quat.conjugate(att[seg]), target - pos[seg]))
            fq = np.asarray(mk.frame_orientations[k], dtype=float)
            location = np.asarray(quat.rotate(quat.conjugate(fq), in_segment - np.asarray(mk.frame_positions[k])))
            _set(by_name[n], "location", location)
        text = _tostring(root)
    return text, c, errors, inputs


# ---- the tool --------------------------------------------------------------------------------------


def scale_tool(setup, *, progress: Callable[[str], None] | None = None) -> ScaleResult:
    """OpenSim's ``ScaleTool`` (module docstring): ``setup`` a `ScaleSetup` or a setup file's
    path (`read_scale_setup`). Writes nothing (`jaxbio.tools.run_setup` writes the setup's
    outputs); returns a `ScaleResult`.

    ``ValueError`` naming them for markers of the measurements missing from the model or the
    trial, a time range outside the trial, no model file; ``NotImplementedError`` for what
    `scale_osim` does not scale."""
    if not isinstance(setup, ScaleSetup):
        setup = read_scale_setup(setup)
    say = progress or (lambda message: None)
    if setup.model_file is None:
        raise ValueError("the ScaleTool setup names no generic model (<GenericModelMaker><model_file>)")
    say("loading the generic model")
    root, where = _root(setup.model_file)
    if setup.marker_set_file is not None:
        root = _with_marker_set(root, setup.marker_set_file, where)
    doc = _Document(root, where)
    if setup.name:
        doc.model.set("name", setup.name)
    factors, measured, scaled = {}, {}, None
    text = _tostring(root)
    if setup.scale:
        applied = [x for x in setup.measurements if x.apply]
        if "measurements" in setup.scaling_order and applied:
            if setup.marker_file is None:
                raise ValueError("the measurements need a marker file (<ModelScaler><marker_file>)")
            say("measuring")
            import jax
            import jax.numpy as jnp

            with jax.enable_x64(True), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*not imported.*")
                generic = _load_text(text, stem=setup.name or "model", dtype=jnp.float64)
                measured = measurement_scale_factors(generic, setup.marker_file, applied, setup.time_range)
        factors = scale_factors(
            doc.frame_names(),
            scaling_order=setup.scaling_order,
            measurements=setup.measurements,
            measured=measured,
            manual_scales=setup.manual_scales,
        )
        say("scaling the model")
        scaled = scale_osim(
            root,
            factors,
            preserve_mass_distribution=setup.preserve_mass_distribution,
            mass=setup.mass,
            name=setup.name or None,
        )
        text = scaled
    placed, c, errors = None, None, None
    if setup.place:
        if setup.placer_marker_file is None:
            raise ValueError("the marker placer needs a marker file (<MarkerPlacer><marker_file>)")
        say("placing the markers")
        placed, c, errors, _ = place_markers(
            text,
            setup.placer_marker_file,
            time_range=setup.placer_time_range,
            marker_weights=setup.marker_weights,
            coordinate_tasks=setup.coordinate_tasks,
            coordinate_file=setup.coordinate_file,
            max_marker_movement=setup.max_marker_movement,
            move_markers=setup.move_markers,
        )
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        final = _load_text(placed or text, stem=setup.name or "model", dtype=jnp.float64)
    return ScaleResult(factors, measured, scaled, placed, final, c, errors)
