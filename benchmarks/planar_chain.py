"""Biscarini's closed-form planar chain (Biscarini 2021) against the wrench recursion, in one run.

    python benchmarks/planar_chain.py            # n = 2, 3, 5, 8, 12; 10^4 frames
    python benchmarks/planar_chain.py --quick    # n = 3, 8; 10^4 frames, fewer repeats
    python benchmarks/planar_chain.py --frames 100000 --json out.json

For random chains (non-slender links, ``n + 2`` muscles spanning 1..n joints, 2 contacts), float64,
``jax.jit(jax.vmap(...))`` over the same random frames, two comparisons per ``n``:

- **torques**: ``jb.papers.biscarini_chain.chain_torques`` (Biscarini 2021, eq. 23) against ``jb.inverse_dynamics`` on
  ``chain.to_tree()`` (joint-angle conversion and contact wrenches included);
- **reactions + torques**: ``chain_reactions`` (eq. 9, muscles and contacts) plus ``chain_torques``
  against one ``jb.segment_wrenches`` call with the muscle and contact forces as external wrenches
  (which gives the reactions and the net joint moments ``τ − τ_muscles``: the same information).

Steady-state time is the best of k repetitions (10, or 5 with ``--quick``; closed form and
recursion interleaved) after a warm-up call, with ``jax.block_until_ready``; compile time (lower + compile) is reported separately. Ratios are
recursion time / closed-form time (above 1: the closed form is faster). Before timing, the script
checks that both give the same numbers and prints the largest relative difference.
Absolute times on a shared machine mean little; compare the ratios measured in the same run.

``time_closed_form_vs_recursion(n_frames, ns=(3, 8))`` returns the rows, for other benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # the script's choice; the library never does this

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxbio as jb  # noqa: E402
from jaxbio.papers.biscarini_chain import (  # noqa: E402
    BASE,
    ResistancePoints,
    LinearMuscles,
    PlanarChain,
    chain_reactions,
    chain_torques,
    external_wrenches,
    link_to_joint_angles,
)

REPEATS = 10
MIN_REPEAT_S = 0.05


def best_times(fns, repeats: int = REPEATS, min_time: float = MIN_REPEAT_S) -> list[float]:
    """Best-of-``repeats`` seconds per call of each of ``fns`` (already warmed up), interleaved (one
    repetition of each in turn, so that a burst of load on a shared machine hits all of them); each
    repetition runs a function enough times to last at least ``min_time``."""
    inner = []
    for fn in fns:
        t0 = time.perf_counter()
        fn()
        inner.append(max(1, int(np.ceil(min_time / max(time.perf_counter() - t0, 1e-9)))))
    best = [np.inf] * len(fns)
    for _ in range(repeats):
        for j, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(inner[j]):
                fn()
            best[j] = min(best[j], (time.perf_counter() - t0) / inner[j])
    return [float(b) for b in best]


def random_problem(n: int, n_frames: int, seed: int = 0):
    """A random chain with ``n + 2`` muscles and 2 contacts, and ``n_frames`` random frames."""
    rng = np.random.default_rng(seed)
    chain = PlanarChain(
        rng.uniform(0.2, 1.0, n),
        rng.uniform(0.5, 5.0, n),
        rng.uniform(0.0, 0.6, n),
        rng.uniform(-1.0, 1.0, n),
        rng.uniform(0.01, 0.3, n),
    )
    count = n + 2
    prox = rng.integers(BASE, n - 1, count)
    dist = np.array([rng.integers(p + 1, n) for p in prox])
    muscles = LinearMuscles(
        chain, prox.tolist(), dist.tolist(), rng.uniform(-0.3, 0.3, (count, 2)), rng.uniform(-0.3, 0.3, (count, 2))
    )
    contacts = ResistancePoints(chain, [n - 1, int(rng.integers(0, n))], rng.uniform(-0.3, 0.3, (2, 2)))
    frames = (
        rng.uniform(-np.pi, np.pi, (n_frames, n)),
        rng.uniform(-3, 3, (n_frames, n)),
        rng.uniform(-10, 10, (n_frames, n)),
        rng.uniform(0, 300, (n_frames, count)),
        rng.uniform(-60, 60, (n_frames, 2, 2)),
    )
    return chain, muscles, contacts, tuple(jax.device_put(jnp.asarray(x)) for x in frames)


def _functions(chain, muscles, contacts):
    tree = chain.to_tree()

    def closed_torques(th, thd, thdd, T, R):
        return chain_torques(chain, th, thd, thdd, contacts, R)

    def recursion_torques(th, thd, thdd, T, R):
        q, qd, qdd = (link_to_joint_angles(x) for x in (th, thd, thdd))
        return jb.inverse_dynamics(tree, q, qd, qdd, external_wrenches(chain, th, None, None, contacts, R))

    def closed_both(th, thd, thdd, T, R):
        return (
            chain_reactions(chain, th, thd, thdd, muscles, T, contacts, R),
            chain_torques(chain, th, thd, thdd, contacts, R),
        )

    def recursion_both(th, thd, thdd, T, R):
        q, qd, qdd = (link_to_joint_angles(x) for x in (th, thd, thdd))
        return jb.segment_wrenches(tree, q, qd, qdd, external_wrenches(chain, th, muscles, T, contacts, R))

    return {"torques": (closed_torques, recursion_torques), "reactions + torques": (closed_both, recursion_both)}


def _compile(fn, args) -> tuple[object, float]:
    jitted = jax.jit(jax.vmap(fn))
    t0 = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    return compiled, time.perf_counter() - t0


def _rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1.0))


def time_closed_form_vs_recursion(
    n_frames: int = 10_000, ns=(3, 8), repeats: int = REPEATS, seed: int = 0
) -> list[dict]:
    """Rows ``{"n", "what", "n_frames", "closed_us_per_frame", "recursion_us_per_frame", "ratio",
    "closed_compile_s", "recursion_compile_s", "max_rel_diff"}`` (ratio = recursion / closed form),
    float64, ``jit(vmap)`` over ``n_frames`` random frames, for each chain size in ``ns``."""
    rows = []
    for n in ns:
        chain, muscles, contacts, args = random_problem(n, n_frames, seed + n)
        for what, (closed, recursion) in _functions(chain, muscles, contacts).items():
            c_fn, c_compile = _compile(closed, args)
            r_fn, r_compile = _compile(recursion, args)
            c_out = jax.block_until_ready(c_fn(*args))
            r_out = jax.block_until_ready(r_fn(*args))
            if what == "torques":
                diff = _rel(c_out, r_out)
            else:  # reaction on the proximal link = −(force on link r from its parent)
                diff = _rel(c_out[0], -r_out[0][..., :2])
            c_s, r_s = best_times(
                [lambda: jax.block_until_ready(c_fn(*args)), lambda: jax.block_until_ready(r_fn(*args))], repeats
            )
            rows.append(
                {
                    "n": n,
                    "what": what,
                    "n_frames": n_frames,
                    "closed_us_per_frame": 1e6 * c_s / n_frames,
                    "recursion_us_per_frame": 1e6 * r_s / n_frames,
                    "ratio": r_s / c_s,
                    "closed_compile_s": c_compile,
                    "recursion_compile_s": r_compile,
                    "max_rel_diff": diff,
                }
            )
    return rows


def common_rows(rows) -> list[dict]:
    """`rows` as rows of the common table (`_machine.row`): the recursion against the closed form."""
    from _machine import row

    return [
        row(
            f"planar chain {r['what']} (recursion)",
            f"{r['n']}-link chain",
            r["n_frames"],
            1e-6 * r["recursion_us_per_frame"],
            unit="frame",
            compile_s=r["recursion_compile_s"],
            peer="Biscarini 2021 closed form, same run",
            peer_seconds=1e-6 * r["closed_us_per_frame"],
        )
        for r in rows
    ]


def print_rows(rows) -> None:
    head = (
        f"{'n':>3} {'what':<20} {'frames':>7} {'closed µs/frame':>16} {'recursion µs/frame':>19} "
        f"{'ratio':>6} {'compile closed/rec s':>21} {'rel diff':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['n']:>3} {r['what']:<20} {r['n_frames']:>7} {r['closed_us_per_frame']:>16.3f} "
            f"{r['recursion_us_per_frame']:>19.3f} {r['ratio']:>6.2f} "
            f"{r['closed_compile_s']:>10.2f}/{r['recursion_compile_s']:<10.2f} {r['max_rel_diff']:>9.1e}"
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 3, 8 and 5 repeats")
    parser.add_argument("--frames", type=int, default=10_000, help="frames per jit(vmap) call (default 10^4)")
    parser.add_argument("--json", type=str, default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    ns = (3, 8) if args.quick else (2, 3, 5, 8, 12)
    repeats = 5 if args.quick else REPEATS
    print(
        f"jax {jax.__version__} on {jax.default_backend()} ({platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs), float64; load average {os.getloadavg()[0]:.2f}"
    )
    rows = time_closed_form_vs_recursion(args.frames, ns, repeats)
    print_rows(rows)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    worst = max(r["max_rel_diff"] for r in rows)
    if worst > 1e-10:
        raise SystemExit(f"closed form and recursion disagree: relative difference {worst:.2e}")
    if args.json:
        from _machine import machine

        out = {"machine": machine(), "chains": rows, "rows": common_rows(rows)}
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
