"""Du's static arm (Du 2021, §3.1–3.3): joint wrenches, biceps/triceps tensions, elbow IK.

    python examples/arm_statics.py

1. §3.1–3.2: upper arm hanging, forearm horizontal, a 5 kg weight in the hand (wrist); the joint
   wrenches of jaxbio's recursion and the biceps tension that cancels the elbow moment.
2. §3.3: the arm with a hand holding the weight at 3/4 of the hand; the elbow placed on its circle
   where the wrist bends least; wrenches and tensions in that pose.
3. The three inverse-kinematics cases over a few wrist positions (vmap).
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxbio.papers import du_arm as du  # noqa: E402

np.set_printoptions(precision=4, suppress=True)


def main():
    load = 5.0  # kg held (our choice; the text gives no numbers)
    muscles = du.du_muscles()

    # --- §3.1–3.2: two segments, weight at the forearm's distal end -------------------------------
    arm2 = du.Arm.de_leva(hand=False)
    l1, l2 = (float(x) for x in arm2.lengths)
    ends = jnp.array([[0.0, 0.0, -l1], [l2, 0.0, -l1]])  # elbow, wrist; shoulder at the origin
    weights = du.Weights(ratios=jnp.array([1.0]), masses=jnp.array([load]), segments=(1,))
    st = du.arm_statics(arm2, jnp.zeros(3), ends, weights, muscles)
    print(f"§3.1 upper arm down, forearm forward, {load:.1f} kg at the wrist (de Leva 73 kg male)")
    for i, name in enumerate(arm2.names):
        print(f"  {name:9s} joint force {np.asarray(st.forces[i])} N, moment {np.asarray(st.moments[i])} N·m")
    print(
        "§3.2 tensions (N):",
        dict(zip(muscles.names, np.round(np.asarray(st.muscles.tensions), 2).tolist())),
        "| elbow moment with muscles:",
        np.asarray(st.muscle_moments[1]),
        "N·m",
    )

    # --- §3.3: with a hand, elbow by inverse kinematics ------------------------------------------
    arm3 = du.Arm.de_leva(hand=True)
    grip = jnp.array([0.30, -0.10, -0.15])  # held object, m (shoulder at the origin, z up)
    hand_x = jnp.array([1.0, 0.0, 0.3])  # hand long axis (wrist → fingers)
    hand_z = jnp.array([-0.3, 0.0, 1.0])  # outward palm normal (palm up)
    ends3, sol = du.hand_arm_pose(arm3, grip, hand_x, hand_z)
    bend = du.wrist_bending(sol.elbow, ends3[1], hand_x)
    print(f"\n§3.3 grip {np.asarray(grip)} m -> case {du.ElbowCase.NAMES[int(sol.case)]!r}, valid {bool(sol.valid)}")
    print(
        f"  elbow {np.asarray(sol.elbow)} m (circle centre {np.asarray(sol.center)}, "
        f"radius {float(sol.radius):.4f} m), wrist {np.asarray(ends3[1])} m, "
        f"wrist bending {np.degrees(float(bend)):.2f} deg"
    )
    w3 = du.Weights(ratios=jnp.array([0.75]), masses=jnp.array([load]), segments=(2,))
    st3 = du.arm_statics(arm3, jnp.zeros(3), ends3, w3, muscles)
    print("  joint moments (N·m):", {n: np.asarray(m).round(3).tolist() for n, m in zip(arm3.names, st3.moments)})
    print(
        "  tensions (N):",
        dict(zip(muscles.names, np.round(np.asarray(st3.muscles.tensions), 2).tolist())),
        "| elbow moment along the arm-plane normal with muscles:",
        f"{float(jnp.dot(st3.muscle_moments[1], st3.muscles.axis)):.2e} N·m",
    )

    # --- IK cases over a batch of wrists --------------------------------------------------------
    wrists = jnp.array(
        [[0.0, 0.0, -0.70], [0.0, 0.0, -(l1 + l2)], [0.0, 0.0, -0.005], [0.2, 0.1, -0.3], [0.0, 0.0, -0.35]]
    )
    batch = jax.vmap(du.elbow_position, in_axes=(None, 0, None, None, None, None))(
        jnp.zeros(3), wrists, l1, l2, jnp.array([0.0, 0.0, -1.0]), jnp.array([1.0, 0.0, 0.0])
    )
    print(f"\nIK cases (upper arm {l1:.4f} m, forearm {l2:.4f} m):")
    for w, c, v, e in zip(np.asarray(wrists), np.asarray(batch.case), np.asarray(batch.valid), np.asarray(batch.elbow)):
        print(f"  wrist {w} -> {du.ElbowCase.NAMES[c]:20s} valid={bool(v)!s:5s} elbow {e}")


if __name__ == "__main__":
    main()
