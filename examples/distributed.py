"""One batch over several processes (JAX's multi-controller runtime, `jax.distributed`), on one
machine or many: inverse dynamics over frames and simulations over initial states, split by
`jb.batch` over every process's devices and gathered, then compared with one process.

    python examples/distributed.py                        # starts 2 worker processes on localhost
    python examples/distributed.py --num-processes 1      # the same work in this one process
    # on each of N machines (or N terminals), the same script with its own --process-id:
    python examples/distributed.py --coordinator HOST:PORT --num-processes N --process-id I

Every process runs this same script (multi-controller, SPMD): it calls
``jax.distributed.initialize`` (the coordinator's address, the number of processes, its own id)
before any other JAX call, builds the same full batch, and calls the same ``jb.batch`` function.
``jax.devices()`` is then every process's devices; each process computes its devices' share and
`jaxbio.batching.gather` assembles the whole result on every process. On CPU the processes talk
through gloo (``jax_cpu_collectives_implementation``, TCP). Without arguments this script is its
own launcher: it picks a free port and starts two workers on CPU, with a time limit.
``--local-devices K`` gives each process K CPU devices (``jax_num_cpu_devices``).
``--save PATH`` (process 0) writes the inputs and the gathered outputs to an ``.npz``
(tests/test_batching.py compares them with ``jax.jit(jax.vmap(...))`` in one process).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

FRAMES = 1001  # inverse dynamics frames (not a multiple of the device count: padded, sliced back)
STATES = 10  # initial states of the simulations
STEPS = 20  # fixed Tsit5 steps of each simulation
#: a 1 m uniform rod (1 kg) hinged at one end, hanging along −y: the simulated system
PENDULUM = {
    "name": "pendulum",
    "gravity": [0.0, -9.81, 0.0],
    "segments": [
        {
            "name": "rod",
            "parent": None,
            "joint": {"type": "revolute", "axis": [0, 0, 1]},
            "mass": 1.0,
            "com": [0.0, -0.5, 0.0],
            "inertia": [[1 / 12, 0, 0], [0, 1e-6, 0], [0, 0, 1 / 12]],
        }
    ],
}
WORKER_TIMEOUT_S = 300  # the launcher kills its workers after this (never hangs)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--coordinator", help="HOST:PORT of process 0's coordinator service")
    p.add_argument("--num-processes", type=int, default=None, help="processes in all (default 2: launch them here)")
    p.add_argument("--process-id", type=int, default=None, help="this process's id, 0 … N−1")
    p.add_argument("--local-devices", type=int, default=1, help="CPU devices per process (default 1)")
    p.add_argument("--save", metavar="PATH", help="process 0 writes inputs and outputs to this .npz")
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, n: int = 2) -> int:
    """Start ``n`` workers of this script on localhost (CPU) and wait for them (bounded)."""
    coordinator = f"127.0.0.1:{free_port()}"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    extra = ["--local-devices", str(args.local_devices)] + (["--save", args.save] if args.save else [])
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--coordinator",
                coordinator,
                "--num-processes",
                str(n),
                "--process-id",
                str(i),
                *extra,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(n)
    ]
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    outputs, codes = [], []
    for w in workers:
        try:
            out, _ = w.communicate(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            for v in workers:
                v.kill()
            out, _ = w.communicate()
            out += f"\n[killed after {WORKER_TIMEOUT_S} s]"
        outputs.append(out)
        codes.append(w.returncode)
    for i, (out, code) in enumerate(zip(outputs, codes)):
        if i == 0 or code != 0:
            print(f"--- process {i} (exit {code}) ---\n{out.rstrip()}")
    return max(abs(c) for c in codes)


def problems():
    """``(tree, (q, qd, qdd), simulate, q0)``: arm7 and ``FRAMES`` random states (float64, seeded,
    the same in every process); a damped pendulum's ``simulate(q0) -> q (STEPS + 1, 1)``
    from rest at ``q0`` and ``STATES`` random ``q0``."""
    import jax.numpy as jnp
    import numpy as np

    import jaxbio as jb
    from jaxbio import hamiltonian as ham

    tree = jb.load_model("arm7", dtype=jnp.float64).tree
    rng = np.random.default_rng(0)
    states = tuple(rng.uniform(-lim, lim, (FRAMES, tree.nv)) for lim in (1.0, 2.0, 5.0))
    pendulum = jb.SegmentTree.from_dict(PENDULUM, dtype=jnp.float64)
    system = jb.HamiltonianSystem(pendulum, dissipation=ham.LinearDamping(0.05))

    def simulate(q0):
        return jb.simulate(system, system.initial_state(q0), 0.0, 1.0, stepsize_controller=jb.FixedGrid(STEPS)).q

    return tree, states, simulate, rng.uniform(-1.0, 1.0, (STATES, pendulum.nq))


def work(args) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # the example's choice; the library never does this
    jax.config.update("jax_num_cpu_devices", args.local_devices)
    if args.num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives over TCP
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=120,
        )

    import numpy as np

    import jaxbio as jb
    from jaxbio.batching import gather

    me = jax.process_index()
    # the same inputs on every process (seeded); each process transfers only its devices' share
    tree, (q, qd, qdd), simulate, q0 = problems()

    t0 = time.perf_counter()
    tau = gather(jb.batch(jb.inverse_dynamics, in_axes=(None, 0, 0, 0))(tree, q, qd, qdd))
    t1 = time.perf_counter()
    qs = gather(jb.batch(simulate)(q0))
    t2 = time.perf_counter()

    if me == 0:
        print(
            f"{jax.process_count()} process(es), {jax.device_count()} device(s) in all "
            f"({jax.local_device_count()} here): {jax.devices()}"
        )
        print(f"inverse dynamics, arm7, {FRAMES} frames: tau {tau.shape} in {t1 - t0:.2f} s (with compile)")
        print(
            f"simulations, pendulum, {STATES} initial states × {STEPS} steps: q {qs.shape} in "
            f"{t2 - t1:.2f} s (with compile)"
        )
        # the single-process numbers: jit(vmap) on this process's first device
        here = lambda x: jax.device_put(x, jax.local_devices()[0])  # noqa: E731
        tau_1 = jax.jit(jax.vmap(jb.inverse_dynamics, in_axes=(None, 0, 0, 0)))(tree, *map(here, (q, qd, qdd)))
        qs_1 = jax.jit(jax.vmap(simulate))(here(q0))
        d_tau = float(np.max(np.abs(tau - np.asarray(tau_1))))
        d_q = float(np.max(np.abs(qs - np.asarray(qs_1))))
        print(f"max |difference| from one device: tau {d_tau:.1e} N·m, q {d_q:.1e} rad")
        if args.save:
            np.savez(
                args.save,
                q=q,
                qd=qd,
                qdd=qdd,
                tau=tau,
                q0=q0,
                qs=qs,
                processes=jax.process_count(),
                devices=jax.device_count(),
            )
        if max(d_tau, d_q) > 1e-9:
            print("the processes disagree with one device")
            return 1
    if args.num_processes > 1:
        jax.distributed.shutdown()
    return 0


def main(argv=None) -> int:
    args = parse(argv)
    if args.process_id is None and args.num_processes in (None, 2) and args.coordinator is None:
        return launch(args)
    if args.num_processes is None:
        args.num_processes = 2
    if args.num_processes > 1 and (args.coordinator is None or args.process_id is None):
        raise SystemExit("--num-processes > 1 needs --coordinator HOST:PORT and --process-id")
    if args.process_id is None:
        args.process_id = 0
    return work(args)


if __name__ == "__main__":
    raise SystemExit(main())
