"""The ``jaxbio`` command line.

``jaxbio sprint`` (the main job, also ``jaxbio`` with no arguments) fits the fitness-dependent
Hamiltonian sprinter to 100 m split times; ``jaxbio id`` shows inverse dynamics of a shipped model
for a short motion (a table of joint torques). Errors in user input print one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys


def _enable_x64():
    import jax

    jax.config.update("jax_enable_x64", True)  # the CLI validates in float64 (API.md)


def cmd_id(args) -> int:
    _enable_x64()
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxbio as jb

    tree = jb.load_model(args.model, dtype=jnp.float64)
    n = tree.nq
    t = np.linspace(0.0, args.duration, args.frames)
    # a smooth motion: every joint swings ±amplitude at its own frequency
    freq = 0.5 + 0.25 * np.arange(n)
    amp = np.where(tree.is_revolute, args.amplitude, 0.05)
    phase = 2 * np.pi * freq[None, :] * t[:, None]
    q = amp * np.sin(phase)
    qd = amp * 2 * np.pi * freq * np.cos(phase)
    qdd = -amp * (2 * np.pi * freq) ** 2 * np.sin(phase)
    tau = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(tree, q, qd, qdd)
    tau = np.asarray(tau)
    units = ["N·m" if r else "N" for r in tree.is_revolute]
    print(f"Inverse dynamics of {tree.name!r} ({n} DOF, {float(np.sum(tree.masses)):.2f} kg), "
          f"wrench recursion, float64")
    print(f"motion: q_i(t) = A_i sin(2π f_i t), A = {args.amplitude} rad (revolute) / 0.05 m, "
          f"f_i = 0.5 + 0.25 i Hz, {args.frames} frames over {args.duration} s")
    width = max(max(len(s) for s in tree.names), 10) + 2  # names, and numbers such as -1234.567
    head = "t [s]".rjust(7) + "".join(name[: width - 1].rjust(width) for name in tree.names)
    cols = list(range(n))
    if args.columns and n > args.columns:
        cols = cols[: args.columns]
        head = "t [s]".rjust(7) + "".join(tree.names[i][: width - 1].rjust(width) for i in cols) + "  …"
    print(head)
    print("".rjust(7) + "".join(f"[{units[i]}]".rjust(width) for i in cols))
    for k in range(len(t)):
        print(f"{t[k]:7.3f}" + "".join(f"{tau[k, i]:{width}.3f}" for i in cols))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxbio", description="Differentiable biomechanics in JAX.")
    sub = p.add_subparsers(dest="command")
    pid = sub.add_parser("id", help="inverse dynamics of a shipped or given model over a short motion")
    pid.add_argument("--model", default="arm7", help="shipped model name or a model .json file (default arm7)")
    pid.add_argument("--frames", type=int, default=6, help="number of frames (default 6)")
    pid.add_argument("--duration", type=float, default=1.0, help="motion duration in s (default 1)")
    pid.add_argument("--amplitude", type=float, default=0.5, help="joint amplitude in rad (default 0.5)")
    pid.add_argument("--columns", type=int, default=8, help="at most this many joint columns (default 8)")
    pid.set_defaults(func=cmd_id)
    from jaxbio.sprint._cli import add_parser as add_sprint

    add_sprint(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["sprint"] + (argv or []))
    if args.command != "id":
        return args.func(args)
    try:
        if args.frames < 1 or args.duration <= 0:
            raise ValueError("--frames must be ≥ 1 and --duration > 0")
        return args.func(args)
    except ValueError as e:
        print(f"jaxbio: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
