"""Joint reactions from muscle forces vs. net joint torques (Blajer et al. 2007, §3, closing remark).

On the inverse simulation's squat (`jaxbio.papers.blajer_body.squat_motion`: the right foot flat
on the ground, the right leg squats and rises in 1.5 s), the 18 muscle forces and two MTP torques
are identified (`jaxbio.estimation.inverse_simulate_motion`, eqs. 6–8), then the hip, knee and
ankle reactions are computed by the augmented joint-coordinate method (eq. 16) two ways:

- ``B u``: every muscle pulls on the bones it attaches to (its force pair, external wrenches);
- ``B′u′``: the same actuation as net joint torques, the muscles' pulls neglected.

The table lists, per joint, the reaction force on the distal segment from the proximal one
(world x, y, N) both ways and the resultant in body weights. The two differ at each joint by the
sum of the muscle forces crossing it (tests/estimation/test_joint_reactions.py).

Run: ``python examples/joint_reactions.py`` (float64).
"""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from jaxbio.estimation import inverse_simulate_motion, joint_reactions  # noqa: E402
from jaxbio.papers.blajer_body import SQUAT_CONTACTS, sagittal11_muscle_model, squat_motion  # noqa: E402

JOINTS = {
    "thigh_r": "hip R",
    "shank_r": "knee R",
    "foot_r": "ankle R",
    "thigh_l": "hip L",
    "shank_l": "knee L",
    "foot_l": "ankle L",
}

model = sagittal11_muscle_model()
t, q, qd, qdd = squat_motion(frames=5)  # 0, 0.375, 0.75 (deepest), 1.125, 1.5 s
res = inverse_simulate_motion(model, q, qd, qdd, contacts=SQUAT_CONTACTS)
u = np.concatenate([res.muscle_forces, res.torques], axis=1)
bw = float(np.sum(model.tree.masses)) * 9.81

print(f"body weight {bw:.1f} N; max |moment residual| {np.abs(res.moment_residual).max():.2g} N·m")
print(
    f"{'t s':>5} {'joint':<8}{'B u: Fx':>9}{'Fy':>9}{'|F| BW':>8}   {'B′u′: Fx':>9}{'Fy':>9}{'|F| BW':>8}   {'Mz N·m':>8}"
)
for i in (0, 1, 2):
    reactions = {}
    for actuation in ("muscles", "torques"):
        reactions[actuation] = np.asarray(
            joint_reactions(
                model,
                q[i],
                qd[i],
                qdd[i],
                u[i],
                contacts=SQUAT_CONTACTS,
                ground_reaction=res.ground_reaction[i],
                joints=tuple(JOINTS),
                actuation=actuation,
            )
        )
    for k, name in enumerate(JOINTS.values()):
        a, b = reactions["muscles"][k], reactions["torques"][k]
        print(
            f"{float(t[i]):5.3f} {name:<8}{a[0]:9.1f}{a[1]:9.1f}{np.hypot(a[0], a[1]) / bw:8.2f}   "
            f"{b[0]:9.1f}{b[1]:9.1f}{np.hypot(b[0], b[1]) / bw:8.2f}   {b[2]:8.1f}"
        )
print(
    "B u: muscle forces on the bones + MTP torques; B′u′: net joint torques only (Mz, the joint "
    "moment; with B u the hip, knee and ankle carry no moment themselves)."
)
