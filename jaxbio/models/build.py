"""The model builder: segment and model dicts of the jaxbio model format, and rigid-body algebra.

Every model dict in jaxbio is written with these functions: the shipped anthropometric models
(`jaxbio/models/_build.py`), the OpenSim-derived muscle-set models (`jaxbio.muscles.sets`), the
OpenSim importer (`jaxbio.io.load_osim`), and any model a user assembles in Python. numpy only
(no JAX), so the build script runs without it.

Format: the jaxbio model format, version 1 (API.md, "Model file format"): segment frame =
parent frame · Translation(origin) · Rotation(orientation) · joint motion; ``com`` in the segment
frame; ``inertia`` about the COM in the segment frame; joint types revolute, prismatic (an axis),
spherical, free and fixed (no axis). Load a dict with
``jaxbio.SegmentTree.from_dict`` (which validates it) or write it with
``jaxbio.models._build.dumps``.

- `segment`, `virtual`, `model`: one entry of ``segments``, a massless link of a multi-DOF
  joint, the whole dict.
- `Body`: mass, COM and inertia in one frame; `combine` (lump rigidly), `subtract`, `moved`,
  `transformed` (into a rotated and shifted frame).
- `gyration_inertia`: the inertia of a body from its radii of gyration about principal axes, the
  form in which anthropometric tables give it (also on traced JAX arrays: Du's (2021) arm,
  `jaxbio.papers.du_arm`); `deleva_body`: one row of de Leva's table
  (`jaxbio.models.anthropometrics`) placed in a segment frame.

Example::

    from jaxbio.models.build import Body, GRAVITY_PLANAR, Z, model, segment
    rod = Body(1.0, np.array([0.0, -0.5, 0.0]), np.diag([1 / 12, 1e-6, 1 / 12]))
    d = model("pendulum", GRAVITY_PLANAR, [segment("rod", None, "revolute", Z, rod)])
    tree = jaxbio.SegmentTree.from_dict(d)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

if __package__:
    from jaxbio.models.anthropometrics import BODY_MASS, DeLevaRow
else:  # imported by _build.py run as a plain script (numpy only): the table is next to this file
    from anthropometrics import BODY_MASS, DeLevaRow  # type: ignore[no-redef]

__all__ = [
    "Body",
    "VIRTUAL_MASS",
    "VIRTUAL_INERTIA",
    "VIRTUAL_BODY",
    "GRAVITY_3D",
    "GRAVITY_PLANAR",
    "X",
    "Y",
    "Z",
    "AXIAL",
    "AXISLESS",
    "gyration_inertia",
    "deleva_body",
    "combine",
    "subtract",
    "moved",
    "transformed",
    "segment",
    "virtual",
    "model",
]

# A one-DOF link inside a multi-DOF joint written as a chain of one-DOF segments is a massless frame
# (mass 0, COM at its origin, inertia 0; the format accepts them): the mass rides on the last
# segment of the chain, so a model's total mass is its anthropometric mass (jaxbio/models/README.md,
# "Virtual segments"). The chain must end in a segment that carries mass, or the loader refuses the
# model (its mass matrix would be singular in every configuration).
VIRTUAL_MASS = 0.0  # kg
VIRTUAL_INERTIA = 0.0  # kg m^2, times the identity

GRAVITY_3D = (0.0, 0.0, -9.81)  # m/s^2; 3D models: x forward, y left, z up
GRAVITY_PLANAR = (0.0, -9.81, 0.0)  # m/s^2; planar (sagittal) models: x forward, y up, z right
X, Y, Z = np.eye(3)
# joint types of the format (API.md): one DOF about / along an axis, and the ones without an axis
AXIAL = ("revolute", "prismatic")
AXISLESS = ("spherical", "free", "fixed")


@dataclass(frozen=True)
class Body:
    """Inertial parameters in one segment frame: ``mass`` kg, ``com`` (3,) m, ``inertia`` (3, 3)
    kg m^2 about the COM."""

    mass: float
    com: np.ndarray
    inertia: np.ndarray


VIRTUAL_BODY = Body(VIRTUAL_MASS, np.zeros(3), VIRTUAL_INERTIA * np.eye(3))


def _unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v)


def gyration_inertia(mass, length, radii, projectors):
    """Inertia about the COM from radii of gyration: ``mass · Σ_k (r_k · length)² P_k``.

    ``radii``: a sequence of radii of gyration as fractions of ``length`` (m); ``projectors``: the
    same number of ``(..., 3, 3)`` matrices, the projector ``P_k`` of each radius (``e_k e_kᵀ`` for
    a principal axis ``e_k``; ``E − x̂x̂ᵀ`` for a radius shared by every axis transverse to ``x̂``).
    ``mass`` kg, ``length`` and the radii may carry a leading batch shape ``(...)``. Arithmetic
    only, so it runs on numpy arrays and on (traced) JAX arrays alike. Returns ``(..., 3, 3)``
    kg·m², in the frame of the projectors.
    """
    total = sum((r * length)[..., None, None] ** 2 * p for r, p in zip(radii, projectors))
    return mass[..., None, None] * total


# Axes of the radii of gyration. de Leva (after Zatsiorsky) names three principal axes: the
# longitudinal axis (along the segment), the "transverse" axis and the "sagittal" axis. We read them
# anatomically: the transverse (= frontal, side-to-side) axis is the mediolateral axis, about which
# sagittal-plane (flexion/extension) rotation happens; the sagittal axis lies in the sagittal plane,
# perpendicular to the long axis (antero-posterior for upright segments, vertical for the foot).
# The table itself supports this reading: the flat hand (palm in the frontal plane) has r_sag > r_trans
# (62.8 > 51.3), the head, longer than it is wide, has r_trans > r_sag (37.6 > 36.2), and the trunk,
# wider than it is deep, has r_sag > r_trans (37.2 > 34.7). Planar models therefore take Izz (the
# mediolateral axis) from r_transverse. Other codes read the columns the other way round; the
# difference is below 5 % except for the hand.
def deleva_body(row: DeLevaRow, start, direction, mediolateral, body_mass: float = BODY_MASS) -> Body:
    """Mass, COM and inertia of a de Leva segment, in a segment frame.

    ``start``: position (m, segment frame) of the row's origin endpoint; ``direction``: unit vector
    from the origin endpoint towards the other endpoint; ``mediolateral``: the segment's
    mediolateral axis (carries r_transverse; the sagittal axis is ``direction x mediolateral``).
    mass = body_mass * mass%; COM = start + com% * length * direction;
    inertia = mass * length^2 * sum_k r_k^2 e_k e_k^T over the three principal axes e_k
    (`gyration_inertia`).
    """
    length = row.length_mm / 1000.0
    mass = body_mass * row.mass / 100.0
    e_long = _unit(direction)
    e_ml = _unit(mediolateral)
    assert abs(e_long @ e_ml) < 1e-12, "mediolateral axis must be perpendicular to the segment"
    e_sag = np.cross(e_long, e_ml)
    com = np.asarray(start, dtype=float) + row.com / 100.0 * length * e_long
    radii = [np.asarray(r / 100.0) for r in (row.r_sagittal, row.r_transverse, row.r_longitudinal)]
    inertia = gyration_inertia(
        np.asarray(mass), np.asarray(length), radii, [np.outer(e, e) for e in (e_sag, e_ml, e_long)]
    )
    return Body(mass, com, inertia)


def _steiner(mass: float, d: np.ndarray) -> np.ndarray:
    """Parallel-axis term: inertia of a point mass at offset ``d`` from the reference point."""
    return mass * (d @ d * np.eye(3) - np.outer(d, d))


def combine(*bodies: Body) -> Body:
    """Rigidly lump bodies given in the same frame (parallel-axis theorem)."""
    mass = sum(b.mass for b in bodies)
    com = sum(b.mass * b.com for b in bodies) / mass
    inertia = sum(b.inertia + _steiner(b.mass, b.com - com) for b in bodies)
    return Body(mass, com, inertia)


def subtract(whole: Body, part: Body) -> Body:
    """The rest of ``whole`` once ``part`` (same frame) is taken away, so that
    ``combine(subtract(whole, part), part) == whole``."""
    mass = whole.mass - part.mass
    com = (whole.mass * whole.com - part.mass * part.com) / mass
    about_whole_com = whole.inertia - part.inertia - _steiner(part.mass, part.com - whole.com)
    return Body(mass, com, about_whole_com - _steiner(mass, com - whole.com))


def moved(body: Body, new_origin) -> Body:
    """The same body expressed in a parallel frame whose origin is at ``new_origin``."""
    return Body(body.mass, body.com - np.asarray(new_origin, dtype=float), body.inertia)


def transformed(body: Body, rotation, origin=(0.0, 0.0, 0.0)) -> Body:
    """The same body expressed in another frame: its origin at ``origin`` (3,) m and its axes the
    columns of ``rotation`` (3, 3), both given in the body's current frame. ``com`` becomes
    ``Rᵀ (com − origin)`` and the inertia ``Rᵀ I R`` (still about the COM)."""
    R = np.asarray(rotation, dtype=float)
    return Body(body.mass, R.T @ moved(body, origin).com, R.T @ body.inertia @ R)


def segment(
    name, parent, joint_type, axis, body: Body, origin=(0.0, 0.0, 0.0), orientation=(1.0, 0.0, 0.0, 0.0)
) -> dict:
    """One entry of ``segments``: ``name``, ``parent`` (a name or ``None`` for the world),
    ``joint_type`` (``"revolute"`` / ``"prismatic"``: one DOF about / along ``axis``, (3,) unit, in
    the joint frame; ``"spherical"`` / ``"free"`` / ``"fixed"``: no axis, pass ``axis=None``),
    ``body`` in the segment frame, joint ``origin`` (3,) m in the parent frame and joint frame
    ``orientation`` (w, x, y, z) in the parent frame (default the identity)."""
    if joint_type in AXIAL:
        if axis is None:
            raise ValueError(f"segment {name!r}: a {joint_type} joint needs an axis")
        joint = {"type": joint_type, "axis": [float(a) for a in axis]}
    elif joint_type in AXISLESS:
        if axis is not None:
            raise ValueError(f"segment {name!r}: a {joint_type} joint has no axis; pass axis=None")
        joint = {"type": joint_type}
    else:
        raise ValueError(f"segment {name!r}: unknown joint type {joint_type!r}; one of {', '.join(AXIAL + AXISLESS)}")
    joint["origin"] = [float(o) for o in origin]
    joint["orientation"] = [float(w) for w in orientation]
    return {
        "name": name,
        "parent": parent,
        "joint": joint,
        "mass": float(body.mass),
        "com": [float(c) for c in body.com],
        "inertia": [[float(x) for x in row] for row in body.inertia],
    }


def virtual(name, parent, joint_type, axis, origin=(0.0, 0.0, 0.0), orientation=(1.0, 0.0, 0.0, 0.0)) -> dict:
    """A massless link of a multi-DOF joint (`VIRTUAL_BODY`: mass 0, COM at the origin, inertia 0);
    ``origin`` and ``orientation`` as in `segment`."""
    return segment(name, parent, joint_type, axis, VIRTUAL_BODY, origin, orientation)


def model(name: str, gravity, segments: list[dict]) -> dict:
    """The model dict: ``name``, ``gravity`` (3,) m/s² (world frame) and the ``segments``
    (parents listed before their children)."""
    return {"format": "jaxbio-model", "version": 1, "name": name, "gravity": list(gravity), "segments": segments}
