"""OpenSim's Gait10dof18musc muscles mapped onto the 11-DOF sagittal body ``sagittal11`` (Blajer et al. 2007).

Blajer, Dziewiecki & Mazur 2007 (part II, §1) drive the hip, knee and ankle of its sagittal
body by muscle forces and the remaining joints by torques. Part I (its muscle data) is not
available, so the muscles here are the 18 of OpenSim's planar ``gait10dof18musc`` model (9 per
leg: hamstrings, bifemsh, glut_max, iliopsoas, rect_fem, vasti, gastroc, soleus, tib_ant; Delp et
al. 1990 geometry, CC BY 3.0, see ``jaxbio/muscles/data/README.md``), as parsed by
`jaxbio.muscles.load_muscle_set` (straight lines; conditional points at their reference-pose state;
moving points at knee angle 0; calcn and toes points already folded into the talus frame).

**Segment mapping** (OpenSim body → sagittal11 segment). Both models stand upright with every
coordinate at 0, so the frames are parallel at q = 0 and every point maps by a fixed transform
``p' = s R (p − c)`` in its own segment frame (R a rotation about z, s a scale, c a translation):

| OpenSim body | sagittal11 | transform |
|---|---|---|
| ``pelvis`` | ``trunk`` (HAT, origin MIDH) | translation only: ``p − h_side``, ``h_side`` = that leg's hip joint centre in the pelvis (−0.0707, −0.0661, ±0.0835) m. Each muscle belongs to one leg, so its pelvis points are placed relative to *its* hip centre, keeping their lateral (z) offset from the hip; sagittal11's two hips coincide at MIDH. Scale 1: the hips of both models are ±0.0835 m apart. |
| ``femur_*`` | ``thigh_*`` | similarity fixing the hip and mapping OpenSim's knee centre (−0.0045, −0.39582) m (the knee splines at knee angle 0) onto sagittal11's (0, −0.4222) m: rotation by 0.65° and s = 0.4222 / 0.39585 = 1.0666 (applied to z too). |
| ``tibia_*`` | ``shank_*`` | similarity fixing the knee, mapping the ankle (0, −0.43) onto (0, −0.434): s = 1.0093, no rotation. |
| ``talus_*`` (+ ``calcn_*``, ``toes_*``) | ``foot_*`` | identity about the ankle centre. Heel (calcn origin, 0.04877 m behind the ankle) and MTP (0.13003 m in front) have the same x in both models (sagittal11 took them from the same Delp model), so the scale is 1. sagittal11's sole is 0.0679 m below the ankle where OpenSim's calcn origin is 0.04195 m below it; the insertions (Achilles at 0.011 m, tib_ant at 0.024 m below the ankle) are kept where OpenSim has them relative to the ankle, so the ankle moment arms are OpenSim's. |
| ``toes_*`` | ``toes_*`` | none of the 18 muscles attaches to the toes. |
| ``torso`` | — | no muscle of the set attaches to it (lumbar joint absent in sagittal11). |

Consequences: at q = 0 the moment arms equal OpenSim's (same straight-line paths) up to the
segment scale factors (≤ 7 %, thigh); `tests/test_inverse_simulation.py` checks them against
``gait10dof18musc`` within that. The lateral (z) offsets of the points are kept, so a piece's
moment about the z axis is the 3D one, as in OpenSim's planar model.

**Torque actuators.** Blajer et al. 2007 drive ``k = 8`` joints: hip, knee, ankle of one lumped leg by
muscles and ``k − 3 = 5`` "other" joints by torques; reading its matrix B̄′ (eq. 1) these are the
MTP (toe) joint and four joints of the upper body (trunk/neck/shoulder/elbow of the arms and
head). sagittal11 has two independent legs and a rigid HAT, so its 8 joints are per leg hip,
knee, ankle and MTP: the six hip/knee/ankle joints carry the 18 muscles, and the torque actuators
are the two MTP joints (``toes_r``, ``toes_l``); the upper-body joints are frozen into the HAT and
need no actuator. The floating base (``base_x``, ``base_y`` and the absolute HAT angle ``trunk``)
is unactuated.

**The squat.** `squat_motion` is the support-phase motion of ``examples/inverse_simulation.py``
and ``examples/joint_reactions.py`` (right foot welded at `SOLE`, `SQUAT_CONTACTS`), on which the
paper's closing comparison — joint reactions from muscle forces ``B u`` vs. net torques ``B′u′`` —
is made with `jaxbio.estimation.joint_reactions`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxbio.dynamics.contact import Contact
from jaxbio.dynamics.kinematics import forward_kinematics
from jaxbio import quaternion

from jaxbio.io import load_model
from jaxbio.muscles.geometry import MusclePaths
from jaxbio.muscles.sets import MuscleParameters, load_muscle_set
from jaxbio.tree import SegmentTree

__all__ = [
    "SEGMENT_MAP",
    "DEFAULT_TORQUE_JOINTS",
    "sagittal11_muscles",
    "sagittal11_muscle_model",
    "SOLE",
    "SQUAT_CONTACTS",
    "squat_motion",
]

#: OpenSim (gait10dof18musc) segment → sagittal11 segment; ``{side}`` is ``r`` or ``l``.
SEGMENT_MAP = {
    "pelvis": "trunk",
    "femur_{side}": "thigh_{side}",
    "tibia_{side}": "shank_{side}",
    "talus_{side}": "foot_{side}",
}

#: Joints (coordinate = segment names) driven by torque actuators by default: the MTP joints.
DEFAULT_TORQUE_JOINTS = ("toes_r", "toes_l")

#: sagittal11 coordinates without an actuator: the floating base.
UNACTUATED = ("base_x", "base_y", "trunk")


def _similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3×3 matrix ``s R`` (R about z) mapping the in-plane vector ``a`` onto ``b``; z scaled by s."""
    s = np.hypot(b[0], b[1]) / np.hypot(a[0], a[1])
    ang = np.arctan2(b[1], b[0]) - np.arctan2(a[1], a[0])
    c, si = np.cos(ang), np.sin(ang)
    return s * np.array([[c, -si, 0.0], [si, c, 0.0], [0.0, 0.0, 1.0]])


def _transforms(gait: SegmentTree, sag: SegmentTree) -> dict[str, tuple[str, np.ndarray, np.ndarray]]:
    """``{OpenSim segment: (sagittal11 segment, c (3,), A (3, 3))}`` with ``p' = A (p − c)``.

    The pelvis entry is per side (``pelvis_r``, ``pelvis_l``)."""
    go = np.asarray(gait.origins, float)
    so = np.asarray(sag.origins, float)
    gi, si = gait.names.index, sag.names.index
    out = {}
    for side in ("r", "l"):
        out[f"pelvis_{side}"] = ("trunk", go[gi(f"femur_{side}")], np.eye(3))
        out[f"femur_{side}"] = (
            f"thigh_{side}",
            np.zeros(3),
            _similarity(go[gi(f"tibia_{side}")], so[si(f"shank_{side}")]),
        )
        out[f"tibia_{side}"] = (
            f"shank_{side}",
            np.zeros(3),
            _similarity(go[gi(f"talus_{side}")], so[si(f"foot_{side}")]),
        )
        out[f"talus_{side}"] = (f"foot_{side}", np.zeros(3), np.eye(3))
    return out


def sagittal11_muscles(
    tree: SegmentTree | None = None, *, muscles: Sequence[str] | None = None, dtype=None
) -> tuple[SegmentTree, MusclePaths, MuscleParameters]:
    """The Gait10dof18musc muscles on sagittal11 (mapping in the module docstring).

    Args:
        tree: a sagittal11-like tree (same segment names; default ``jb.load_model("sagittal11")``).
            Points are mapped with *its* knee and ankle positions.
        muscles: names of the muscles to keep, in this order (default: all 18, OpenSim's order
            ``hamstrings_r … tib_ant_r, hamstrings_l … tib_ant_l``).
        dtype: float dtype of the arrays (default: JAX's default float type).

    Returns:
        ``(tree, paths, parameters)``: the tree, `MusclePaths` with points in sagittal11 segment
        frames (m), and OpenSim's Hill parameters of the kept muscles.

    Raises:
        ValueError: an unknown muscle name, or a tree lacking a sagittal11 segment.
    """
    sag = load_model("sagittal11", dtype=dtype).tree if tree is None else tree
    missing = [
        s for s in ("trunk", "thigh_r", "shank_r", "foot_r", "thigh_l", "shank_l", "foot_l") if s not in sag.names
    ]
    if missing:
        raise ValueError(f"tree {sag.name!r} lacks the sagittal11 segments {missing}")
    gait, gpaths, gparams = load_muscle_set("gait10dof18musc", dtype=dtype)
    names = list(gpaths.names) if muscles is None else [str(m) for m in muscles]
    unknown = [m for m in names if m not in gpaths.names]
    if unknown:
        raise ValueError(f"unknown muscles {unknown}; gait10dof18musc has {list(gpaths.names)}")
    if len(set(names)) != len(names):
        raise ValueError(f"muscles listed twice in {names}")
    tf = _transforms(gait, sag)
    pts = np.asarray(gpaths.points, float)
    seg = gpaths.segment_index
    spec = {}
    for name in names:
        i = gpaths.index(name)
        side = name.rsplit("_", 1)[-1]
        row = []
        for k in range(gpaths.counts[i]):
            gname = gait.names[seg[i, k]]
            key = f"pelvis_{side}" if gname == "pelvis" else gname
            if key not in tf:
                raise ValueError(f"muscle {name!r}: point on {gname!r}, which has no sagittal11 segment")
            target, c, A = tf[key]
            row.append((target, A @ (pts[i, k] - c), gpaths.point_names[i][k]))
        spec[name] = row
    paths = MusclePaths.from_points(sag, spec, dtype=dtype)
    idx = np.array([gpaths.index(m) for m in names])
    dt = paths.points.dtype
    params = MuscleParameters(
        max_isometric_force=jnp.asarray(np.asarray(gparams.max_isometric_force)[idx], dt),
        optimal_fiber_length=jnp.asarray(np.asarray(gparams.optimal_fiber_length)[idx], dt),
        tendon_slack_length=jnp.asarray(np.asarray(gparams.tendon_slack_length)[idx], dt),
        pennation_angle=jnp.asarray(np.asarray(gparams.pennation_angle)[idx], dt),
        max_contraction_velocity=jnp.asarray(np.asarray(gparams.max_contraction_velocity)[idx], dt),
        names=tuple(names),
    )
    return sag, paths, params


def sagittal11_muscle_model(
    *,
    muscles: Sequence[str] | None = None,
    torque_joints: Sequence[str] = DEFAULT_TORQUE_JOINTS,
    tree: SegmentTree | None = None,
    dtype=None,
):
    """The hybrid-actuated sagittal body of Blajer et al. 2007: an `InverseSimulationModel` of sagittal11 with
    the mapped Gait10dof18musc muscles, torque actuators at ``torque_joints`` (default the two MTP
    joints) and the floating base (``base_x``, ``base_y``, ``trunk``) unactuated.

    Args:
        muscles: names of the muscles to keep (default all 18).
        torque_joints: coordinate (segment) names with a torque actuator.
        tree: default ``jb.load_model("sagittal11")``.
        dtype: float dtype.
    """
    from jaxbio.estimation import InverseSimulationModel

    sag, paths, params = sagittal11_muscles(tree, muscles=muscles, dtype=dtype)
    return InverseSimulationModel.build(
        sag, paths, torque_joints=tuple(torque_joints), unactuated=UNACTUATED, parameters=params
    )


#: A point of the sole under the right ankle (``foot_r`` frame, m): the squat's contact point.
SOLE = (0.0, -0.067899, 0.0)

#: The squat's support: the right foot flat on the ground (a weld at `SOLE`).
SQUAT_CONTACTS = (Contact("foot_r", SOLE, weld=True),)


def _squat_joints(t):
    """Joint angles (hip, knee, ankle, MTP) × (r, l) at time t (s), a squat of period 1.5 s."""
    s = 0.5 * (1 - jnp.cos(2 * jnp.pi * t / 1.5))  # 0 → 1 → 0
    return jnp.array(
        [
            0.7 * s,
            -1.1 * s,
            0.35 * s,
            0.0,  # right: squat
            0.3 + 0.4 * jnp.sin(2 * jnp.pi * t / 1.5),
            -0.6,
            0.1,
            0.0,
        ]
    )  # left: swing


def squat_motion(frames: int = 300, duration: float = 1.5, *, tree: SegmentTree | None = None):
    """The synthetic one-legged squat of the inverse-simulation example (Blajer et al. 2007, support phase).

    The right foot lies flat on the ground (`SQUAT_CONTACTS`), the right leg squats and rises
    (hip 0 → 0.7 → 0 rad, knee 0 → −1.1 → 0, ankle 0 → 0.35 → 0 over 1.5 s, a raised cosine), the
    left leg swings; the HAT angle closes the chain (foot angle 0) and the base translations put
    the sole point `SOLE` at the world origin, so the motion keeps the contact by construction.
    Velocities and accelerations are exact (forward-mode derivatives of ``q(t)``).

    Args:
        frames: number of frames ``T`` (evenly spaced on ``[0, duration]``).
        duration: s (1.5 s is one full squat).
        tree: a sagittal11-like tree (default ``jb.load_model("sagittal11")``).

    Returns:
        ``(t (T,) s, q (T, 11) rad/m, qd (T, 11), qdd (T, 11))``.

    Raises:
        ValueError: ``frames < 1`` or ``duration <= 0``.
    """
    if int(frames) < 1:
        raise ValueError(f"frames must be ≥ 1, got {frames}")
    if not float(duration) > 0:
        raise ValueError(f"duration must be > 0 s, got {duration}")
    tree = load_model("sagittal11").tree if tree is None else tree
    t = jnp.linspace(0.0, float(duration), int(frames))
    return (t, *_squat_states(tree, t))


@jax.jit
def _squat_states(tree: SegmentTree, t):
    foot = tree.names.index("foot_r")

    def q_of(time):
        th = _squat_joints(time)
        trunk = -(th[0] + th[1] + th[2])  # foot angle = trunk + hip + knee + ankle = 0
        q0 = jnp.concatenate([jnp.zeros(2, th.dtype), trunk[None], th])
        pos, att = forward_kinematics(tree, q0)
        p = pos[foot] + quaternion.rotate(att[foot], jnp.asarray(SOLE, th.dtype))
        return q0.at[:2].set(-p[:2])  # base translations that put the sole point at (0, 0)

    qd_of = jax.jacfwd(q_of)
    qdd_of = jax.jacfwd(qd_of)
    return jax.vmap(q_of)(t), jax.vmap(qd_of)(t), jax.vmap(qdd_of)(t)
