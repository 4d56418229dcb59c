"""Shipped muscle sets: a `SegmentTree`, the `MusclePaths` and a parameter table, from OpenSim data.

``load_muscle_set(name)`` for

- ``"arm26"``: OpenSim's Arm26 (2 DOF ``r_shoulder_elev``, ``r_elbow_flex``; 6 muscles TRIlong,
  TRIlat, TRImed, BIClong, BICshort, BRA), tree = the shipped model ``jaxbio/models/arm26.json``.
- ``"gait10dof18musc"``: OpenSim's planar Gait10dof18musc lower limb (10 coordinates; 18 muscles,
  9 per leg), tree built here from the body/joint tables.

The data are copied from ``opensim-org/opensim-models`` (CC BY 3.0; see
``jaxbio/muscles/data/README.md`` for the source, attribution and every approximation made).
Files are parsed with numpy/csv outside jit, once per call.

Approximations (all documented in the data README):

- arm26's wrapping surfaces (TRIlong, TRIlat, TRImed and BRA over the elbow cylinder ``TRI``,
  TRIlong also over the humeral-head ellipsoid ``TRIlonghh`` and the glenoid cylinder
  ``TRIlongglen``, BIClong over the ellipsoid ``BIClonghh``) come with ``wrapping=True``: then
  lengths and moment arms are OpenSim's (`jaxbio.muscles.wrapping`). By default the paths are
  straight lines through the path points, which cut through those surfaces (far cheaper to
  compile and evaluate, but the wrapped muscles' lengths and moment arms differ from OpenSim's).
- gait10dof18musc: conditional path points are fixed at their state in the reference pose (all
  coordinates 0; ``conditional="always"`` keeps all of them instead); moving path points (the rect_fem
  and vasti insertions) are fixed at their knee-angle-0 value; the knee is a pure hinge placed at
  the tibia translation splines' value at knee angle 0 (natural cubic spline through the knots).
"""

from __future__ import annotations

import csv
import io
import json
from importlib import resources
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio import quaternion as quat
from jaxbio._model_json import read_model_file
from jaxbio._validate import check_choice
from jaxbio.models.build import Z, Body, combine, model, moved, segment, virtual
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.geometry import MusclePaths, tree_topology
from jaxbio.tree import SegmentTree

__all__ = ["MuscleParameters", "load_muscle_set", "muscle_sets", "coordinate_names", "elbow_arm26"]

_SETS = ("arm26", "gait10dof18musc")

#: OpenSim coordinate name of each q, per set.
_COORDINATES = {
    "arm26": ("r_shoulder_elev", "r_elbow_flex"),
    "gait10dof18musc": (
        "pelvis_tx",
        "pelvis_ty",
        "pelvis_tilt",
        "hip_flexion_r",
        "knee_angle_r",
        "ankle_angle_r",
        "hip_flexion_l",
        "knee_angle_l",
        "ankle_angle_l",
        "lumbar_extension",
    ),
}


class MuscleParameters(eqx.Module):
    """Hill-type parameters of ``m`` muscles, one array ``(m,)`` each (OpenSim's names and units).

    - ``max_isometric_force``: N.
    - ``optimal_fiber_length``: m.
    - ``tendon_slack_length``: m.
    - ``pennation_angle``: rad, at optimal fibre length.
    - ``max_contraction_velocity``: optimal fibre lengths per second (``Lopt/s``), as in OpenSim.
    - ``names``: static, muscle names in the order of `MusclePaths.names`.
    """

    max_isometric_force: Float[Array, " m"]
    optimal_fiber_length: Float[Array, " m"]
    tendon_slack_length: Float[Array, " m"]
    pennation_angle: Float[Array, " m"]
    max_contraction_velocity: Float[Array, " m"]
    names: tuple[str, ...] = eqx.field(static=True)


def muscle_sets() -> tuple[str, ...]:
    """Names of the shipped muscle sets."""
    return _SETS


def coordinate_names(name: str) -> tuple[str, ...]:
    """OpenSim coordinate name of each generalised coordinate ``q[i]`` of set ``name``."""
    _check_name(name)
    return _COORDINATES[name]


def _check_name(name: str) -> None:
    if name not in _SETS:
        raise ValueError(f"no muscle set {name!r}; shipped sets are {list(_SETS)}")


def _read_text(filename: str) -> str:
    return (resources.files("jaxbio.muscles") / "data" / filename).read_text(encoding="utf-8")


def _read_csv(filename: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(_read_text(filename))))


def _body(row: dict[str, str]) -> Body:
    """The `Body` of one row of an OpenSim body table (mass, COM and inertia in the body frame)."""
    ixx, iyy, izz, ixy, ixz, iyz = (
        float(row[k]) for k in ("Ixx_kgm2", "Iyy_kgm2", "Izz_kgm2", "Ixy_kgm2", "Ixz_kgm2", "Iyz_kgm2")
    )
    return Body(
        float(row["mass_kg"]),
        np.array([float(row[k]) for k in ("com_x_m", "com_y_m", "com_z_m")]),
        np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]]),
    )


# ---- arm26 -----------------------------------------------------------------------------------

_ARM26_BASE = np.array([0.0, 0.8, 0.0])  # base welded to the ground at (0, 0.8, 0), no rotation


def arm26_model_dict() -> dict:
    """The jaxbio model dict of Arm26 (what ``jaxbio/models/arm26.json`` holds), from the copied
    OpenSim tables with the model builder (`jaxbio.models.build`): the massless ``base`` (welded
    to the ground at (0, 0.8, 0)) is folded into the world by offsetting the shoulder origin; each
    CustomJoint is one revolute joint about its (slightly tilted) ``rotation1`` axis, zero child
    offsets."""
    jdata = json.loads(_read_text("arm26_joints.json"))
    joints = {j["joint"]: j for j in jdata["joints"]}
    bodies = {r["body"]: r for r in _read_csv("arm26_bodies.csv")}
    segs = []
    for body, jname, parent in (("r_humerus", "r_shoulder", None), ("r_ulna_radius_hand", "r_elbow", "r_humerus")):
        j = joints[jname]
        axis = np.asarray(j["spatial_transform"][0]["axis"], float)
        origin = np.asarray(j["parent_frame"]["translation_m"], float)
        if parent is None:
            origin = origin + _ARM26_BASE
        segs.append(segment(body, parent, "revolute", axis / np.linalg.norm(axis), _body(bodies[body]), origin))
    return model("arm26", jdata["gravity"], segs)


# ---- gait10dof18musc ----------------------------------------------------------------------------


def _natural_cubic_spline(x: np.ndarray, y: np.ndarray, t: float) -> float:
    """Natural cubic spline through ``(x, y)`` evaluated at ``t`` (numpy, build time only)."""
    n = len(x)
    h = np.diff(x)
    A = np.zeros((n, n))
    b = np.zeros(n)
    A[0, 0] = A[-1, -1] = 1.0
    for i in range(1, n - 1):
        A[i, i - 1], A[i, i], A[i, i + 1] = h[i - 1], 2 * (h[i - 1] + h[i]), h[i]
        b[i] = 3 * ((y[i + 1] - y[i]) / h[i] - (y[i] - y[i - 1]) / h[i - 1])
    c = np.linalg.solve(A, b)
    i = int(np.clip(np.searchsorted(x, t) - 1, 0, n - 2))
    dx = t - x[i]
    bi = (y[i + 1] - y[i]) / h[i] - h[i] * (2 * c[i] + c[i + 1]) / 3
    di = (c[i + 1] - c[i]) / (3 * h[i])
    return float(y[i] + bi * dx + c[i] * dx**2 + di * dx**3)


def _gait_frames_and_tree() -> tuple[dict, dict]:
    bodies = {r["body"]: r for r in _read_csv("gait10dof18musc_bodies.csv")}
    jdata = json.loads(_read_text("gait10dof18musc_joints.json"))
    joints = {j["joint"]: j for j in jdata["joints"]}

    def loc(jname):
        return np.asarray(joints[jname]["parent_frame"]["translation_m"], float)

    def real(body, parent, origin, inertial=None):
        return segment(body, parent, "revolute", Z, _body(bodies[body]) if inertial is None else inertial, origin)

    segs = [
        virtual("pelvis_tx", None, "prismatic", (1, 0, 0)),
        virtual("pelvis_ty", "pelvis_tx", "prismatic", (0, 1, 0)),
        real("pelvis", "pelvis_ty", (0, 0, 0)),
    ]
    frames = {}
    for side in ("r", "l"):
        knee = {t["name"]: t["function"] for t in joints[f"knee_{side}"]["spatial_transform"]}
        kx, ky = (
            _natural_cubic_spline(np.asarray(knee[t]["x"], float), np.asarray(knee[t]["y"], float), 0.0)
            for t in ("translation1", "translation2")
        )
        # foot = talus + calcn + toes (welded in this model), in the talus frame: the calcn and toes
        # bodies are moved from their frames (origins at calcn_o, toes_o) into it
        calcn_o = loc(f"subtalar_{side}")
        toes_o = calcn_o + loc(f"mtp_{side}")
        foot = combine(
            *(
                moved(_body(bodies[b]), -o)
                for b, o in ((f"talus_{side}", np.zeros(3)), (f"calcn_{side}", calcn_o), (f"toes_{side}", toes_o))
            )
        )
        segs += [
            real(f"femur_{side}", "pelvis", loc(f"hip_{side}")),
            real(f"tibia_{side}", f"femur_{side}", (kx, ky, 0.0)),
            real(f"talus_{side}", f"tibia_{side}", loc(f"ankle_{side}"), foot),
        ]
        frames[f"calcn_{side}"] = (f"talus_{side}", calcn_o)
        frames[f"toes_{side}"] = (f"talus_{side}", toes_o)
    segs.append(real("torso", "pelvis", loc("back")))
    return model("gait10dof18musc", jdata["gravity"], segs), frames


def gait10dof18musc_model_dict() -> dict:
    """The jaxbio model dict of the planar Gait10dof18musc lower limb (10 DOF, q order
    `coordinate_names`): virtual prismatic ``pelvis_tx``, ``pelvis_ty`` (massless), ``pelvis``
    (tilt), then per leg ``femur``, ``tibia`` (hinge at the knee splines' knee-angle-0 position)
    and ``talus`` (talus + calcn + toes lumped rigidly), and ``torso``. All axes +z."""
    return _gait_frames_and_tree()[0]


# ---- muscles ---------------------------------------------------------------------------------


def _arm26_wraps() -> tuple[dict, dict]:
    """arm26's wrap objects and path wraps (``data/arm26_wrap.json``) in the form of
    `MusclePaths.from_points`."""
    data = json.loads(_read_text("arm26_wrap.json"))
    objects = {}
    for w in data["wrap_objects"]:
        spec = {
            k: w[k]
            for k in ("type", "translation", "xyz_body_rotation", "quadrant", "radius", "length", "dimensions")
            if k in w
        }
        objects[w["name"]] = dict(spec, frame=w["body"])
    return objects, data["path_wraps"]


def _muscles(
    prefix: str, tree: SegmentTree, frames: dict, dtype, conditional: str, wraps: tuple[dict, dict] = ({}, {})
) -> tuple[MusclePaths, MuscleParameters]:
    rows = _read_csv(f"{prefix}_muscles.csv")
    points: dict[str, list] = {r["muscle"]: [] for r in rows}
    for r in _read_csv(f"{prefix}_muscle_pathpoints.csv"):
        if r["point_type"] == "ConditionalPathPoint" and conditional == "reference":
            # keep the point only if it is active with its coordinate at 0 (the reference pose)
            if not float(r["range_min_rad"]) <= 0.0 <= float(r["range_max_rad"]):
                continue
        xyz = [float(r[k]) for k in ("x_m", "y_m", "z_m")]
        points[r["muscle"]].append((int(r["point_index"]), (r["body"], xyz, r["point_name"])))
    muscles = {name: [p for _, p in sorted(pts, key=lambda t: t[0])] for name, pts in points.items()}
    paths = MusclePaths.from_points(
        tree, muscles, frames=frames, wrap_objects=wraps[0] or None, path_wraps=wraps[1] or None, dtype=dtype
    )
    dt = dtype if dtype is not None else jnp.zeros(()).dtype

    def col(key):
        return jnp.asarray(np.array([float(r[key]) for r in rows]), dt)

    params = MuscleParameters(
        max_isometric_force=col("max_isometric_force_N"),
        optimal_fiber_length=col("optimal_fiber_length_m"),
        tendon_slack_length=col("tendon_slack_length_m"),
        pennation_angle=col("pennation_angle_rad"),
        max_contraction_velocity=col("max_contraction_velocity_Lopt_per_s"),
        names=tuple(r["muscle"] for r in rows),
    )
    return paths, params


def load_muscle_set(
    name: str, *, dtype=None, conditional: str = "reference", wrapping: bool = False
) -> tuple[SegmentTree, MusclePaths, MuscleParameters]:
    """A shipped muscle set: ``(tree, paths, parameters)``.

    Args:
        name: ``"arm26"`` (2 DOF, 6 muscles) or ``"gait10dof18musc"`` (10 DOF, 18 muscles).
        dtype: float dtype of every array (default: JAX's default float type).
        conditional: what to do with OpenSim's ``ConditionalPathPoint`` s (gait10dof18musc only;
            their activity depends on a coordinate, which a fixed path cannot follow):
            ``"reference"`` (default) keeps each one that is active with its coordinate at 0
            (iliopsoas P3, gastroc P2) and drops the others (the rect_fem and vasti points over
            the femoral condyles, active only in deep knee flexion, below −1.42 rad);
            ``"always"`` keeps every one. With ``"always"`` the quadriceps pass over the condyle
            points even with the knee straight and get a knee moment arm of the wrong sign near
            knee angle 0.
        wrapping: arm26 only: give the paths OpenSim's wrap objects (see the module docstring),
            so that lengths and moment arms are OpenSim's. Off by default: OpenSim's wrapping
            algorithm (iterations, several passes for TRIlong) costs orders of magnitude more to
            compile and to evaluate than straight paths, which the simulations and fits built
            on this set use. gait10dof18musc has no wrap objects.

    Returns:
        tree: the `SegmentTree` (q order: `coordinate_names(name)`).
        paths: `MusclePaths` through OpenSim's path points (with arm26's wrap objects if
            ``wrapping``); points and wrap objects on OpenSim bodies that are not segments here
            are mapped rigidly (arm26 ``base`` → world at (0, 0.8, 0); gait
            ``calcn_*``/``toes_*`` → the ``talus_*`` segment).
        parameters: `MuscleParameters`, in the order of ``paths.names``.
    """
    _check_name(name)
    check_choice(conditional, ("reference", "always"), "conditional")
    if wrapping not in (True, False):
        raise ValueError(f"wrapping must be True or False, got {wrapping!r}")
    if name == "arm26":
        tree, _, _ = read_model_file("arm26", dtype)  # the model format's one reader (`jaxbio.load_model`'s)
        frames = {"base": (None, _ARM26_BASE)}
    else:
        if wrapping:
            raise ValueError("gait10dof18musc has no wrap objects; wrapping=True applies to arm26 only")
        d, frames = _gait_frames_and_tree()
        tree = SegmentTree.from_dict(d, dtype=dtype)
    paths, params = _muscles(name, tree, frames, dtype, conditional, _arm26_wraps() if wrapping else ({}, {}))
    return tree, paths, params


# ---- arm26 with the shoulder locked: a 1-DOF elbow for gradient fits ------------------------------


def elbow_arm26(
    muscles: Sequence[str] = ("TRIlat", "BICshort", "BRA"),
    *,
    shoulder_angle: float = 0.0,
    dtype=None,
) -> tuple[SegmentTree, MusclePaths, HillMuscle]:
    """arm26 (`load_muscle_set`) with the shoulder locked: a 1-DOF elbow.

    The forearm (``r_ulna_radius_hand``) hangs from the world at the elbow's position and
    orientation for ``r_shoulder_elev = shoulder_angle`` rad; path points on the humerus and on
    the base become world points, so lengths, moment arms and the elbow dynamics equal the full
    model's at ``(shoulder_angle, q_elbow)`` with the shoulder held. Small enough that gradients
    through a muscle-driven simulation compile in seconds rather than minutes
    (`jaxbio.estimation.gradient`).

    Args:
        muscles: arm26 muscle names (``TRIlong, TRIlat, TRImed, BIClong, BICshort, BRA``).
        shoulder_angle: rad, the locked shoulder elevation.
        dtype: float dtype (default JAX's default float).

    Returns:
        ``(tree, paths, hill)``: the 1-segment `SegmentTree` (q = elbow flexion, rad), the
        `MusclePaths` of the chosen muscles (padded to the longest of them) and their
        `HillMuscle` (rigid tendon, OpenSim's constants).
    """
    tree, paths, par = load_muscle_set("arm26", dtype=dtype)
    if isinstance(muscles, str):
        muscles = (muscles,)
    muscles = tuple(muscles)
    if not muscles or len(set(muscles)) != len(muscles):
        raise ValueError(f"muscles must name distinct arm26 muscles, got {list(muscles)}")
    idx = [paths.index(name) for name in muscles]
    humerus, forearm = tree.index("r_humerus"), tree.index("r_ulna_radius_hand")
    # poses with numpy (no compilation): humerus = T(o_h) R(orient_h) Rot(axis_h, shoulder),
    # forearm at elbow angle 0 = humerus · T(o_f) R(orient_f)   (URDF-like, jaxbio/tree.py)
    origins, orientations, axes = (np.asarray(x, float) for x in (tree.origins, tree.orientations, tree.axes))
    half = 0.5 * float(shoulder_angle)
    q_h = quat.multiply(orientations[humerus], np.concatenate([[np.cos(half)], np.sin(half) * axes[humerus]]))
    R_h = quat.to_matrix(q_h / np.linalg.norm(q_h))
    p_h = origins[humerus]
    q_f = quat.multiply(q_h, orientations[forearm])
    p_f = p_h + R_h @ origins[forearm]
    fa = tree.to_dict()["segments"][forearm]
    seg = segment(
        fa["name"],
        None,
        fa["joint"]["type"],
        fa["joint"]["axis"],
        Body(fa["mass"], np.asarray(fa["com"]), np.asarray(fa["inertia"])),
        origin=p_f,
        orientation=q_f / np.linalg.norm(q_f),
    )
    etree = SegmentTree.from_dict(model("arm26_elbow", np.asarray(tree.gravity, float), [seg]), dtype=dtype)
    seg_index = paths.segment_index
    pts = np.asarray(paths.points, float)
    world = np.where((seg_index == humerus)[..., None], p_h + pts @ R_h.T, pts)  # humerus → world
    P = max(paths.counts[i] for i in idx)
    points = np.zeros((len(idx), P, 3))
    segments = []
    for k, i in enumerate(idx):
        row = []
        for j in range(P):
            jj = min(j, paths.counts[i] - 1)  # padding repeats the last active point
            if paths.segments[i][jj] == forearm:
                points[k, j] = pts[i, jj]
                row.append(0)
            else:  # on the (locked) humerus or in the world
                points[k, j] = world[i, jj]
                row.append(-1)
        segments.append(tuple(row))
    epaths = MusclePaths(
        points=jnp.asarray(points, etree.origins.dtype),
        segments=tuple(segments),
        counts=tuple(paths.counts[i] for i in idx),
        names=muscles,
        point_names=tuple(paths.point_names[i] for i in idx) if paths.point_names else (),
        built_for=tree_topology(etree),
    )
    sel = np.asarray(idx)
    hill = HillMuscle(
        par.max_isometric_force[sel],
        par.optimal_fiber_length[sel],
        par.tendon_slack_length[sel],
        par.pennation_angle[sel],
        par.max_contraction_velocity[sel],
    )
    return etree, epaths, hill
