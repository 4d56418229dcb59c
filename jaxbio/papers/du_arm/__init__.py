"""Du's static arm (Du 2021, §3.1–3.3): weights, biceps/triceps tensions, elbow inverse kinematics.

Du 2021 (*Quaternion-based analytical inverse dynamics for the human body*, after Dumas et al.
2004) builds three static arms of one-dimensional segments, shoulder fixed:

- §3.1: upper arm + forearm, a point weight at the end of the forearm; the elbow lies on a circle
  around the shoulder–hand line (angle ``θ_input``, 0 at the lowest elbow); the joint wrenches
  follow from the distal → proximal recursion (Du 2021, eq. 3, the static form of eq. 2).
- §3.2: a biceps and a triceps, each a tension between the shoulder and a point of the forearm
  given by a ratio (0.9 and 1.1) of the forearm vector; the tension that cancels the elbow moment
  normal to the arm plane (Du 2021, eqs. 4–5; only one of the two muscles pulls). The muscles act as
  force pairs on both attachments; eq. 5 as printed (only the distal half) is
  ``muscle_wrenches(…, form="distal_only")``.
- §3.3: a hand (third segment), segments numbered proximal → distal and processed by hierarchy
  level of the segment tree, weights as their own wrenches (Du 2021, §3.3.2), and an inverse kinematics
  that puts the elbow on its circle where the wrist bends least (Du 2021, §3.3.1).

Here the recursion is jaxbio's (`jaxbio.segment_wrenches`, already level-synchronous) on a
`SegmentTree` built from the segment end points (`arm_tree`); weights and muscles enter it as
``external`` wrenches (`weight_wrenches`, `muscle_wrenches`), built by the core: the weights by
`jaxbio.dynamics.point_loads`, the muscles as `jaxbio.muscles.geometry.MusclePaths`
(`muscle_paths`: points fixed in the segment frames) by `jaxbio.muscles.geometry`.

**Frames and units.** World frame (Du's ICS): z up, gravity ``(0, 0, −9.81)`` m/s² by default
(``Arm.gravity``), positions in m, forces in N, moments in N·m. A *pose* is ``root`` ``(3,)`` (the
proximal end of the root segment: the shoulder) and ``ends`` ``(n, 3)``, the distal end of every
segment; segment ``i`` runs from ``starts[i]`` (its parent's distal end, or ``root``) to
``ends[i]``: Du's ``d_i = ends[i] − starts[i]``. Segment indices are jaxbio's, proximal → distal
(0 upper arm, 1 forearm, 2 hand), i.e. Du's §3.3 numbering minus one.

**Sign of the joint wrenches.** `jaxbio.segment_wrenches` returns the force and the moment (about
the joint centre) that each segment *receives from its parent*: statically, the wrench that holds
the segment and everything distal to it against gravity, weights and muscles. Du's eq. 3 writes the
same recursion with the opposite sign for some terms (the extraction mixes ``m g`` and ``−m g``);
jaxbio's convention is used throughout, and the tension solve below is written for it.

**Ratios.** Two conventions, both Du's: muscle attachments use ``r`` *from the distal end* (the
point ``ends − r d = starts + (1 − r) d``, lever ``(1 − r_d) d`` of eqs. 4–5, so 0.9 is near the
elbow and 1.1 lies behind it); weights use ``w₂`` *from the proximal end* (the point
``starts + w₂ d``: Du's ``D₂ = grip − w₂ l₃ h_x`` and the weight lever ``d_i w₂(j)``; the text's
"from the distal end" for weights contradicts its own formulas, which are followed).

Anthropometry: the text gives no masses or lengths; `Arm.de_leva` uses de Leva (1996), the source
of jaxbio's shipped models (`jaxbio/models/README.md`).

The package: `_model` (parameters, pose → tree), `_statics` (weights, muscles, tensions, the
recursion at rest), `_inverse_kinematics` (elbow, hand); every public name is importable from
``jaxbio.papers.du_arm``.
"""

from jaxbio.papers.du_arm._inverse_kinematics import (
    ElbowCase,
    ElbowSolution,
    elbow_at_angle,
    elbow_position,
    hand_arm_pose,
    hand_points,
    wrist_bending,
)
from jaxbio.papers.du_arm._model import Arm, ArmMuscles, Weights, arm_tree, du_muscles, segment_starts
from jaxbio.papers.du_arm._statics import (
    MUSCLE_WRENCH_FORMS,
    ArmStatics,
    MuscleTensions,
    arm_statics,
    muscle_moment_arms,
    muscle_paths,
    muscle_points,
    muscle_tensions,
    muscle_wrenches,
    weight_wrenches,
)

__all__ = [
    "MUSCLE_WRENCH_FORMS",
    "Arm",
    "Weights",
    "ArmMuscles",
    "MuscleTensions",
    "ArmStatics",
    "ElbowCase",
    "ElbowSolution",
    "du_muscles",
    "segment_starts",
    "arm_tree",
    "weight_wrenches",
    "muscle_paths",
    "muscle_points",
    "muscle_moment_arms",
    "muscle_wrenches",
    "muscle_tensions",
    "arm_statics",
    "hand_points",
    "elbow_at_angle",
    "elbow_position",
    "wrist_bending",
    "hand_arm_pose",
]
