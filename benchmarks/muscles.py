"""Speed of jaxbio's forward kinematics, muscle lengths and moment arms against a NumPy reference.

    python benchmarks/muscles.py                  # gait10dof18musc (18 muscles, 10 DOF), 1e5 frames
    python benchmarks/muscles.py --set arm26 --frames 10000

jaxbio: ``jax.jit(jax.vmap(jb.forward_kinematics))`` (the batch-last pose kernel),
``jax.jit(jax.vmap(geometry.lengths))`` and ``jax.jit(jax.vmap(geometry.moment_arms))`` over random frames, float64 on the default backend; compile time
(lower + compile) reported separately, steady state best of 3 with ``jax.block_until_ready``.

Reference, in the same run on the same frames: NumPy, vectorised over frames (a Python loop over
segments and path points only): forward kinematics with rotation matrices (Rodrigues), lengths
as sums of piece lengths, moment arms by central finite differences (2n + 1 length evaluations,
step 1e-6). The script first checks that both give the same numbers. Ratios are NumPy time /
jaxbio time (above 1: jaxbio faster). Absolute times on a shared machine mean little.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxbio as jb  # noqa: E402
from jaxbio.quaternion import to_matrix  # noqa: E402

from jaxbio.muscles import geometry, sets  # noqa: E402
from _machine import finish, machine, row  # noqa: E402  (benchmarks/_machine.py)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.muscles.numpy_ref import NumpyModel  # noqa: E402


def best_of(f, k=3):
    times = []
    for _ in range(k):
        t = time.perf_counter()
        out = f()
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t)
    return min(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="gait10dof18musc", choices=sets.muscle_sets())
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = ap.parse_args()
    B = args.frames

    tree, paths, _ = sets.load_muscle_set(args.set, dtype=jnp.float64)
    rng = np.random.default_rng(0)
    q = rng.uniform(-1.0, 1.0, (B, tree.nq))
    q[:, ~tree.is_revolute] *= 0.3
    qj = jnp.asarray(q)
    print(
        f"set {args.set}: {paths.n_muscles} muscles, {tree.nq} coordinates, {B} frames, "
        f"backend {jax.default_backend()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    )

    fk = jax.jit(jax.vmap(lambda x: jb.forward_kinematics(tree, x)))
    lengths = jax.jit(jax.vmap(lambda x: geometry.lengths(paths, tree, x)))
    arms = jax.jit(jax.vmap(lambda x: geometry.moment_arms(paths, tree, x)))
    compile_s = {}
    for name, f in (("forward_kin", fk), ("lengths", lengths), ("moment_arms", arms)):
        t = time.perf_counter()
        f.lower(qj).compile()
        compile_s[name] = time.perf_counter() - t
        print(f"  compile {name:12s} {compile_s[name]:8.2f} s")
        jax.block_until_ready(f(qj))  # warm-up

    ref = NumpyModel(tree, paths)
    sub = slice(0, min(B, 2000))
    np.testing.assert_allclose(lengths(qj[sub]), ref.lengths(q[sub]), rtol=1e-12, atol=1e-14)
    err = np.max(np.abs(np.asarray(arms(qj[sub])) - ref.moment_arms(q[sub])))
    print(f"  check: lengths agree to 1e-12; moment arms, max |jaxbio − NumPy FD| = {err:.1e} m")
    assert err < 1e-7

    ref_R, ref_p = ref.fk(q[sub])
    pos, att = fk(qj[sub])
    np.testing.assert_allclose(pos, ref_p, rtol=0, atol=1e-12)
    np.testing.assert_allclose(to_matrix(att), ref_R, rtol=0, atol=1e-12)
    tf, _ = best_of(lambda: fk(qj))
    nf, _ = best_of(lambda: ref.fk(q), k=1)
    tl, _ = best_of(lambda: lengths(qj))
    ta, _ = best_of(lambda: arms(qj))
    nl, _ = best_of(lambda: ref.lengths(q), k=1)
    na, _ = best_of(lambda: ref.moment_arms(q), k=1)
    print(f"  {'':22s} {'jaxbio':>10s} {'NumPy':>10s} {'ratio':>8s}")
    print(f"  {'forward kinematics':22s} {tf:9.3f}s {nf:9.3f}s {nf / tf:8.1f}")
    print(f"  {'lengths':22s} {tl:9.3f}s {nl:9.3f}s {nl / tl:8.1f}")
    print(f"  {'moment arms (n=' + str(tree.nq) + ')':22s} {ta:9.3f}s {na:9.3f}s {na / ta:8.1f}")
    print(
        f"  per frame: forward kinematics {tf / B * 1e6:.2f} µs, lengths {tl / B * 1e6:.2f} µs, moment arms {ta / B * 1e6:.2f} µs (jaxbio); "
        f"load {os.getloadavg()[0]:.2f}"
    )
    peer = "NumPy, whole batch (moment arms by central differences)"
    out = {
        "machine": machine(),
        "rows": [
            row(
                "forward kinematics",
                args.set,
                B,
                tf / B,
                unit="frame",
                compile_s=compile_s["forward_kin"],
                peer="NumPy, whole batch (rotation matrices)",
                peer_seconds=nf / B,
            ),
            row(
                "muscle-tendon lengths",
                args.set,
                B,
                tl / B,
                unit="frame",
                compile_s=compile_s["lengths"],
                peer=peer,
                peer_seconds=nl / B,
            ),
            row(
                "moment arms",
                args.set,
                B,
                ta / B,
                unit="frame",
                compile_s=compile_s["moment_arms"],
                peer=peer,
                peer_seconds=na / B,
            ),
        ],
    }
    finish(out, args.json)


if __name__ == "__main__":
    main()
