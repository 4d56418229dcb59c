"""Generate the model files shipped in ``jaxbio/models`` (numpy only, deterministic).

Run ``python -m jaxbio.models._build`` or ``python jaxbio/models/_build.py`` to (re)write
``double_pendulum.json``, ``arm7.json``, ``sagittal11.json`` and ``wholebody.json`` next to this file.
``--check`` writes nothing and exits with status 1 if a file on disk differs from what this script
builds. The models, their coordinates and every modelling choice are described in ``README.md``.

The segments are written with the model builder, `jaxbio.models.build` (format, `Body` algebra,
de Leva bodies); this file holds only what is particular to the four shipped models: their
geometry and the JSON layout of the files. Every frame built here has the world's orientation at
q = 0, so all ``orientation`` quaternions are the identity.

Frames. 3D models: x forward, y left, z up (gravity -z). Planar (sagittal) models: x forward,
y up, z to the subject's right (gravity -y, revolute axes +z, counter-clockwise positive).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DIGITS = 10  # significant digits written for the anthropometric models

# ---------------------------------------------------------------------------------------------
# Anthropometric data
# ---------------------------------------------------------------------------------------------
# de Leva (1996) Table 4, males, and its reference subject: the one anthropometric table of jaxbio.
if __package__:
    from jaxbio.models.anthropometrics import DE_LEVA_MALE, STATURE, DeLevaRow
    from jaxbio.models.build import (
        GRAVITY_3D,
        GRAVITY_PLANAR,
        X,
        Y,
        Z,
        Body,
        combine,
        deleva_body,
        model,
        moved,
        segment,
        subtract,
        virtual,
    )
else:  # run as a plain script (numpy only): the table and the builder are the modules next to this file
    from anthropometrics import DE_LEVA_MALE, STATURE, DeLevaRow  # type: ignore[no-redef]
    from build import (
        GRAVITY_3D,
        GRAVITY_PLANAR,
        X,
        Y,
        Z,
        Body,
        combine,
        deleva_body,
        model,  # type: ignore[no-redef]
        moved,
        segment,
        subtract,
        virtual,
    )

# Same table, trunk measured MIDS (mid-point of the shoulder joint centres) -> MIDH: 515.5 mm.
# Used only to place the shoulder joint centres above the mid-hip point.
SHOULDER_ABOVE_MIDH = 0.5155  # m

# ---- Geometry that de Leva's table does not give (all for the reference male above) ----
# Height of the ankle joint centre (taken at the lateral malleolus, de Leva's shank endpoint) above
# the sole: 0.039 x stature, Winter D.A. (2009) Biomechanics and Motor Control of Human Movement,
# 4th ed., Fig. 4.1 (segment lengths after Drillis & Contini 1966).
ANKLE_HEIGHT = 0.039 * STATURE
# Heel and metatarsophalangeal (MTP) joint along the sole, from the generic lower-limb model of
# Delp et al. (1990) as distributed with OpenSim (gait2392 / gait10dof18musc.osim, opensim-models):
# the calcaneus origin, taken as the heel point, lies 0.04877 m behind the ankle (subtalar joint
# location in the talus), and the MTP joint 0.1788 m in front of it (mtp joint location in calcn).
# We put both on de Leva's HEEL-TTIP line at sole level.
HEEL_BEHIND_ANKLE = 0.04877  # m
HEEL_TO_MTP = 0.1788  # m
# Share of the foot mass carried by the toes, same model: toes / (talus + calcn + toes) =
# 0.2166 / (0.1 + 1.25 + 0.2166) kg = 13.8 %. (A modelling assumption: de Leva gives one foot.)
TOES_MASS_FRACTION = 0.2166 / (0.1 + 1.25 + 0.2166)
# Lateral offset of each hip joint centre from MIDH: 0.0835 m, hip_r location in the pelvis of the
# same OpenSim gait model (Delp et al. 1990).
HIP_HALF_WIDTH = 0.0835  # m
# Lateral offset of each shoulder joint centre from the midline: 0.17 m, r_shoulder location in the
# thorax of OpenSim's arm26 model (after Holzbaur, Murray & Delp 2005).
SHOULDER_HALF_WIDTH = 0.17  # m
# Standing height of the hip joint centres: thigh + shank + ankle height (feet flat, sole at 0).
HIP_HEIGHT = (DE_LEVA_MALE["thigh"].length_mm + DE_LEVA_MALE["shank"].length_mm) / 1000 + ANKLE_HEIGHT

# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def double_pendulum() -> dict:
    """Watanabe & Duarte's BMClab notebook (*Matrix formalism of the equations of movement*): two uniform rods, m1 = m2 = 1 kg, l1 = 1 m,
    l2 = 0.5 m, hanging along -y; q1 absolute angle of rod1 from the downward vertical, q2 angle of
    rod2 relative to rod1, both counter-clockwise positive about +z."""

    def rod(name, parent, origin, mass, length):
        # uniform thin rod: I = m l^2 / 12 about the two transverse axes; the long axis (y) gets a
        # tiny 1e-6 kg m^2 so that the tensor is positive-definite (planar motion sees only Izz)
        inertia = np.diag([mass * length**2 / 12, 1e-6, mass * length**2 / 12])
        body = Body(mass, np.array([0.0, -length / 2, 0.0]), inertia)
        return segment(name, parent, "revolute", Z, body, origin)

    m1, m2, l1, l2 = 1.0, 1.0, 1.0, 0.5
    return model(
        "double_pendulum",
        GRAVITY_PLANAR,
        [rod("rod1", None, (0.0, 0.0, 0.0), m1, l1), rod("rod2", "rod1", (0.0, -l1, 0.0), m2, l2)],
    )


def _arm_bodies(ml) -> dict[str, Body]:
    """Right/left arm segments hanging along -z from their proximal joint (3D frames)."""
    dl = DE_LEVA_MALE
    return {
        "upper_arm": deleva_body(dl["upper_arm"], (0, 0, 0), -Z, ml),
        "forearm": deleva_body(dl["forearm"], (0, 0, 0), -Z, ml),
        "hand": deleva_body(dl["hand"], (0, 0, 0), -Z, ml),
    }


def arm7() -> dict:
    """Right arm, 7 DOF, 3D (x forward, y left, z up), hanging in the anatomical position at q = 0
    (palm forward). Shoulder joint centre at (0, 0, 1.4) m."""
    dl = DE_LEVA_MALE
    b = _arm_bodies(Y)
    upper_arm_length = dl["upper_arm"].length_mm / 1000
    forearm_length = dl["forearm"].length_mm / 1000
    return model(
        "arm7",
        GRAVITY_3D,
        [
            # shoulder: flexion (arm forward, +x) about -y, then abduction (arm outward, -y) about -x,
            # then internal rotation about the humerus' long axis (+z for the right arm)
            virtual("shoulder_flexion", None, "revolute", -Y, origin=(0.0, 0.0, 1.4)),
            virtual("shoulder_abduction", "shoulder_flexion", "revolute", -X),
            segment("upper_arm", "shoulder_abduction", "revolute", Z, b["upper_arm"]),
            # elbow flexion (forearm forward) about -y: virtual; the forearm mass rides on the
            # pronation link, which turns about the forearm's long axis (+z: pronation of a right arm)
            virtual("elbow_flexion", "upper_arm", "revolute", -Y, origin=(0.0, 0.0, -upper_arm_length)),
            segment("forearm", "elbow_flexion", "revolute", Z, b["forearm"]),
            # wrist: flexion (towards the palm, +x at q = 0) about -y, then ulnar deviation (towards the
            # little finger, medially, +y) about +x; the hand mass rides on the deviation link
            virtual("wrist_flexion", "forearm", "revolute", -Y, origin=(0.0, 0.0, -forearm_length)),
            segment("hand", "wrist_flexion", "revolute", X, b["hand"]),
        ],
    )


def _hat_body_planar() -> Body:
    """Head + arms + trunk of the sagittal model, in a frame at MIDH (x forward, y up, z right),
    standing upright with the arms hanging at the sides."""
    dl = DE_LEVA_MALE
    cerv = dl["trunk"].length_mm / 1000  # CERV above MIDH
    parts = [
        deleva_body(dl["trunk"], (0, cerv, 0), -Y, Z),
        deleva_body(dl["head"], (0, cerv + dl["head"].length_mm / 1000, 0), -Y, Z),
    ]
    for side in (+1.0, -1.0):  # right (+z) and left (-z) arm
        shoulder = np.array([0.0, SHOULDER_ABOVE_MIDH, side * SHOULDER_HALF_WIDTH])
        elbow = shoulder - dl["upper_arm"].length_mm / 1000 * Y
        wrist = elbow - dl["forearm"].length_mm / 1000 * Y
        parts += [
            deleva_body(dl["upper_arm"], shoulder, -Y, Z),
            deleva_body(dl["forearm"], elbow, -Y, Z),
            deleva_body(dl["hand"], wrist, -Y, Z),
        ]
    return combine(*parts)


def _foot_and_toes(forward, up, ml) -> tuple[Body, Body, np.ndarray]:
    """Rear foot (heel to MTP, in the ankle frame) and toes (in the MTP frame), plus the MTP position.

    At q = 0 the two together are exactly de Leva's foot (mass, COM and inertia). The toes carry
    TOES_MASS_FRACTION of the foot mass, their COM halfway between MTP and toe tip, and radii of
    gyration equal to de Leva's foot percentages of their own length (our assumption); the rear foot
    is the rest."""
    dl = DE_LEVA_MALE
    foot_length = dl["foot"].length_mm / 1000
    heel = -HEEL_BEHIND_ANKLE * forward - ANKLE_HEIGHT * up
    mtp = heel + HEEL_TO_MTP * forward
    whole = deleva_body(dl["foot"], heel, forward, ml)
    f = dl["foot"]
    toes_row = DeLevaRow(
        length_mm=f.length_mm - HEEL_TO_MTP * 1000,
        mass=f.mass * TOES_MASS_FRACTION,
        com=50.0,
        r_sagittal=f.r_sagittal,
        r_transverse=f.r_transverse,
        r_longitudinal=f.r_longitudinal,
    )
    assert toes_row.length_mm > 0 and foot_length > HEEL_TO_MTP
    toes = deleva_body(toes_row, mtp, forward, ml)
    rear = subtract(whole, toes)
    return rear, moved(toes, mtp), mtp


def sagittal11() -> dict:
    """Planar 11-DOF body (x forward, y up, z right): 2 virtual base translations, the HAT
    (head-arms-trunk) segment rotating about the mid-hip point, and per leg hip, knee, ankle, MTP."""
    dl = DE_LEVA_MALE
    thigh = deleva_body(dl["thigh"], (0, 0, 0), -Y, Z)
    shank = deleva_body(dl["shank"], (0, 0, 0), -Y, Z)
    foot, toes, mtp = _foot_and_toes(X, Y, Z)
    segments = [
        virtual("base_x", None, "prismatic", X, origin=(0.0, HIP_HEIGHT, 0.0)),
        virtual("base_y", "base_x", "prismatic", Y),
        segment("trunk", "base_y", "revolute", Z, _hat_body_planar()),
    ]
    for s in ("r", "l"):  # both legs hang from MIDH in the sagittal plane
        segments += [
            segment(f"thigh_{s}", "trunk", "revolute", Z, thigh),
            segment(f"shank_{s}", f"thigh_{s}", "revolute", Z, shank, origin=(0.0, -dl["thigh"].length_mm / 1000, 0.0)),
            segment(f"foot_{s}", f"shank_{s}", "revolute", Z, foot, origin=(0.0, -dl["shank"].length_mm / 1000, 0.0)),
            segment(f"toes_{s}", f"foot_{s}", "revolute", Z, toes, origin=mtp),
        ]
    return model("sagittal11", GRAVITY_PLANAR, segments)


def wholebody() -> dict:
    """3D whole body, 13 segments, nq = 34, nv = 28 (x forward, y left, z up), standing in the
    anatomical position at the neutral configuration (identity quaternions, zero angles) with the
    soles at z = 0: free-joint pelvis, spherical lumbar joint, 1-DOF neck, per arm spherical
    shoulder + elbow (forearm and hand lumped), per leg spherical hip + knee + ankle. No virtual
    links: every segment carries an anthropometric body."""
    dl = DE_LEVA_MALE
    L = {k: row.length_mm / 1000 for k, row in dl.items()}
    omph = L["lower_trunk"]  # OMPH above MIDH (pelvis frame)
    xyph = L["middle_trunk"]  # XYPH above OMPH (torso frame)
    cerv = xyph + L["upper_trunk"]  # CERV above OMPH (torso frame)

    pelvis = deleva_body(dl["lower_trunk"], (0, 0, omph), -Z, Y)
    torso = combine(
        deleva_body(dl["middle_trunk"], (0, 0, xyph), -Z, Y),
        deleva_body(dl["upper_trunk"], (0, 0, cerv), -Z, Y),
    )
    head = deleva_body(dl["head"], (0, 0, L["head"]), -Z, Y)
    arm = _arm_bodies(Y)
    forearm_hand = combine(arm["forearm"], moved(arm["hand"], (0, 0, L["forearm"])))
    thigh = deleva_body(dl["thigh"], (0, 0, 0), -Z, Y)
    shank = deleva_body(dl["shank"], (0, 0, 0), -Z, Y)
    foot = deleva_body(dl["foot"], -HEEL_BEHIND_ANKLE * X - ANKLE_HEIGHT * Z, X, Y)

    segments = [
        # floating base: a free joint at the mid-hip point, q = (x, y, z) displacement of MIDH from
        # standing (world axes) then the pelvis orientation quaternion (w, x, y, z)
        segment("pelvis", None, "free", None, pelvis, origin=(0.0, 0.0, HIP_HEIGHT)),
        # lumbar joint at OMPH: a ball joint carrying middle + upper trunk
        segment("torso", "pelvis", "spherical", None, torso, origin=(0.0, 0.0, omph)),
        # neck at CERV (C7): flexion (nodding forward, +y)
        segment("head", "torso", "revolute", Y, head, origin=(0.0, 0.0, cerv)),
    ]
    shoulder_z = SHOULDER_ABOVE_MIDH - omph  # in the torso frame
    for s, side in (("r", -1.0), ("l", +1.0)):  # side: sign of y, and of the mirrored axes
        segments += [
            # shoulder: a ball joint; elbow flexion (forearm forward) about -y
            segment(
                f"upper_arm_{s}",
                "torso",
                "spherical",
                None,
                arm["upper_arm"],
                origin=(0.0, side * SHOULDER_HALF_WIDTH, shoulder_z),
            ),
            segment(f"forearm_{s}", f"upper_arm_{s}", "revolute", -Y, forearm_hand, origin=(0.0, 0.0, -L["upper_arm"])),
        ]
    for s, side in (("r", -1.0), ("l", +1.0)):
        segments += [
            # hip: a ball joint; knee flexion positive about +y; ankle dorsiflexion about -y
            segment(f"thigh_{s}", "pelvis", "spherical", None, thigh, origin=(0.0, side * HIP_HALF_WIDTH, 0.0)),
            segment(f"shank_{s}", f"thigh_{s}", "revolute", Y, shank, origin=(0.0, 0.0, -L["thigh"])),
            segment(f"foot_{s}", f"shank_{s}", "revolute", -Y, foot, origin=(0.0, 0.0, -L["shank"])),
        ]
    return model("wholebody", GRAVITY_3D, segments)


MODELS = {"double_pendulum": double_pendulum, "arm7": arm7, "sagittal11": sagittal11, "wholebody": wholebody}

# ---------------------------------------------------------------------------------------------
# Checks and output
# ---------------------------------------------------------------------------------------------


def _check(d: dict) -> None:
    """The loader's rules (API.md), so that a bad model fails here rather than at load time."""
    seen: set[str] = set()
    for s in d["segments"]:
        where = f"{d['name']}/{s['name']}"
        assert s["name"] not in seen, f"{where}: duplicate name"
        assert s["parent"] is None or s["parent"] in seen, f"{where}: parent not listed before"
        seen.add(s["name"])
        assert s["mass"] >= 0, f"{where}: mass"
        inertia = np.asarray(s["inertia"])
        assert np.allclose(inertia, inertia.T, rtol=0, atol=1e-15), f"{where}: inertia not symmetric"
        a, b, c = np.linalg.eigvalsh(inertia)
        assert a >= 0 and c <= a + b, f"{where}: inertia not a rigid body's ({a}, {b}, {c})"
        if s["joint"]["type"] in ("revolute", "prismatic"):
            assert abs(np.linalg.norm(s["joint"]["axis"]) - 1) < 1e-12, f"{where}: axis"
        else:
            assert "axis" not in s["joint"], f"{where}: a {s['joint']['type']} joint has no axis"


def _rounded(value, digits):
    if isinstance(value, float):
        if abs(value) < 1e-15:  # round-off of symmetric sums, and -0.0
            return 0.0
        return float(f"{value:.{digits}g}") if digits else value
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    return value


def dumps(d: dict, digits: int | None = DIGITS) -> str:
    """Pretty JSON: one line per segment field, floats to ``digits`` significant digits
    (``None``: exact)."""
    d = _rounded(d, digits)
    head = [f'  "{k}": {json.dumps(d[k])}' for k in ("format", "version", "name", "gravity")]
    segs = [
        "    {\n" + ",\n".join(f'      "{k}": {json.dumps(v)}' for k, v in s.items()) + "\n    }" for s in d["segments"]
    ]
    return "{\n" + ",\n".join(head) + ',\n  "segments": [\n' + ",\n".join(segs) + "\n  ]\n}\n"


def build() -> dict[str, str]:
    """File name -> text of every shipped model."""
    out = {}
    for name, make in MODELS.items():
        d = make()
        _check(d)
        # the pendulum's numbers are written exactly; anthropometric ones to DIGITS digits
        out[f"{name}.json"] = dumps(d, None if name == "double_pendulum" else DIGITS)
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for filename, text in build().items():
        path = HERE / filename
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(filename)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run python -m jaxbio.models._build): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
