"""Joint reaction forces of the sagittal body three ways (Blajer et al. 2007, §3), timed in one run.

    python benchmarks/reactions.py            # 10⁴ frames
    python benchmarks/reactions.py --quick    # 2·10³ frames, fewer repeats

For ``sagittal11`` (11 DOF) in float64 on CPU it times ``jax.jit(jax.vmap(...))`` over a batch of
random frames of

- (a) ``reactions_recursion`` — d'Alembert / Newton–Euler recursion (the reference of each phase);
- (b) ``reactions_lagrange`` — Lagrange multipliers in absolute coordinates (Blajer eq. 10);
- (c) ``reactions_augmented`` — augmented joint coordinates (eq. 16), all 11 joints and only the
  right hip, knee and ankle (``joints=``);

in flight (no contacts) and in support (right foot welded flat + left toe tip pinned: (b) with
the contacts as constraints, (a) and (c) with the ground reactions as given external forces), and
the constrained forward dynamics that produces the support-phase ``q̈`` and ground reactions.
Before timing it checks that the schemes agree (largest difference printed). Times are the best
of k repetitions after a warm-up call (compile time printed separately); ratios are scheme time /
recursion time in the same run (above 1: slower than the recursion). Then Biscarini 2021's closed-form
chain against the recursion (``benchmarks/planar_chain.py``, n = 3 and 8) over the same number of
frames. Absolute times on a shared machine mean little; compare the ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxbio as jb  # noqa: E402
from jaxbio.dynamics import Contact, contact_external  # noqa: E402
from jaxbio.dynamics import constrained as rx  # noqa: E402

HEEL = (-0.04877, -0.0679)
TOE_TIP = (0.2093 - 0.13003, 0.0)
LEG = ("thigh_r", "shank_r", "foot_r")


def best_time(fn, repeats: int) -> float:
    """Best-of-``repeats`` seconds of one call (already compiled)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def timed(name, f, args, repeats, rows, reference=None):
    jf = jax.jit(jax.vmap(f))
    t0 = time.perf_counter()
    out = jax.block_until_ready(jf(*args))
    compile_s = time.perf_counter() - t0
    per = best_time(lambda: jf(*args), repeats) / args[0].shape[0] * 1e6
    rows.append((name, per, compile_s, reference))
    return out, per


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2e3 frames, 3 repeats")
    parser.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = parser.parse_args(argv)
    frames = 2_000 if args.quick else 10_000
    repeats = 3 if args.quick else 7

    tree = jb.load_model("sagittal11", dtype=jnp.float64).tree
    n = tree.nq
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.uniform(-0.6, 0.6, (frames, n)))
    qd = jnp.asarray(rng.normal(0.0, 1.0, (frames, n)))
    tau = jnp.asarray(rng.normal(0.0, 30.0, (frames, n))).at[:, :3].set(0.0)
    support = (Contact("foot_r", jnp.array(HEEL), weld=True), Contact("toes_l", jnp.array(TOE_TIP)))

    print(
        f"jaxbio joint reactions, sagittal11 ({n} DOF), float64, {jax.default_backend()}, "
        f"{jax.device_count()} device(s), {frames} frames, best of {repeats}"
    )
    rows: list = []

    # ---- flight -----------------------------------------------------------------------------
    qdd = jax.jit(jax.vmap(lambda a, b, c: jb.forward_dynamics(tree, a, b, c)))(q, qd, tau)
    a, t_a = timed(
        "flight (a) recursion", lambda x, v, acc: rx.reactions_recursion(tree, x, v, acc), (q, qd, qdd), repeats, rows
    )
    b, _ = timed(
        "flight (b) Lagrange eq. 10",
        lambda x, v, u: rx.reactions_lagrange(tree, x, v, u)[0],
        (q, qd, tau),
        repeats,
        rows,
        t_a,
    )
    c, _ = timed(
        "flight (c) augmented eq. 16, 11 joints",
        lambda x, v, acc, u: rx.reactions_augmented(tree, x, v, acc, u),
        (q, qd, qdd, tau),
        repeats,
        rows,
        t_a,
    )
    c3, _ = timed(
        "flight (c) augmented, hip+knee+ankle",
        lambda x, v, acc, u: rx.reactions_augmented(tree, x, v, acc, u, joints=LEG),
        (q, qd, qdd, tau),
        repeats,
        rows,
        t_a,
    )
    idx = [tree.index(s) for s in LEG]
    flight_err = max(
        float(jnp.max(jnp.abs(b - a))), float(jnp.max(jnp.abs(c - a))), float(jnp.max(jnp.abs(c3 - a[:, idx])))
    )

    # ---- support ----------------------------------------------------------------------------
    (qdd_s, ground), _ = timed(
        "support: constrained forward dynamics",
        lambda x, v, u: rx.constrained_forward_dynamics(tree, x, v, u, support),
        (q, qd, tau),
        repeats,
        rows,
    )
    ext = jax.jit(jax.vmap(lambda x, g: contact_external(tree, x, support, g)))(q, ground)
    a_s, t_as = timed(
        "support (a) recursion, given ground forces",
        lambda x, v, acc, f, m: rx.reactions_recursion(tree, x, v, acc, (f, m)),
        (q, qd, qdd_s, *ext),
        repeats,
        rows,
    )
    b_s, _ = timed(
        "support (b) Lagrange, contacts as constraints",
        lambda x, v, u: rx.reactions_lagrange(tree, x, v, u, support)[0],
        (q, qd, tau),
        repeats,
        rows,
        t_as,
    )
    c_s, _ = timed(
        "support (c) augmented, given ground forces",
        lambda x, v, acc, u, f, m: rx.reactions_augmented(tree, x, v, acc, u, (f, m)),
        (q, qd, qdd_s, tau, *ext),
        repeats,
        rows,
        t_as,
    )
    support_err = max(float(jnp.max(jnp.abs(b_s - a_s))), float(jnp.max(jnp.abs(c_s - a_s))))

    print(
        f"largest difference from the recursion: flight {flight_err:.2e} N, support {support_err:.2e} N "
        f"(largest reaction {float(jnp.max(jnp.abs(a_s))):.0f} N)"
    )
    print()
    print(f"{'scheme':<48} {'µs/frame':>9} {'× recursion':>12} {'compile s':>10}")
    for name, per, compile_s, ref in rows:
        ratio = f"{per / ref:12.2f}" if ref else f"{'(ref)' if 'recursion' in name else '':>12}"
        print(f"{name:<48} {per:9.2f} {ratio} {compile_s:10.2f}")

    # ---- Biscarini 2021's closed-form chain against the same recursion, same run ---------------------
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from planar_chain import common_rows, print_rows, time_closed_form_vs_recursion

    print("\nBiscarini 2021 closed-form planar chain (random non-slender links, muscles, contacts) vs the recursion:")
    chain_rows = time_closed_form_vs_recursion(frames, ns=(3, 8))
    print_rows(chain_rows)
    from _machine import finish, machine, row

    common = [
        row(
            f"joint reactions: {name}",
            "sagittal11",
            frames,
            1e-6 * per,
            unit="frame",
            compile_s=compile_s,
            peer="the recursion (a), same run" if ref else None,
            peer_seconds=1e-6 * ref if ref else None,
        )
        for name, per, compile_s, ref in rows
    ]
    finish({"machine": machine(), "rows": common + common_rows(chain_rows)}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
