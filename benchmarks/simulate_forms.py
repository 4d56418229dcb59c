"""Forward solves of `jb.simulate` under `jax.vmap` by form and loop: why a solve that is not
differentiated keeps the Hamiltonian form on Diffrax's loop (issue #49 item 2).

    python benchmarks/simulate_forms.py double_pendulum 1000 10    # model, batch, seconds

`jit(vmap(simulate))` from random starts (``q ~ N(0, 0.5²)``, at rest), float64, ``rtol = atol
= 1e-8``, the final state saved; best of 5 of the process's CPU time (steadier than wall time
on a shared machine). Paths: the default (a forward solve: the Hamiltonian form on Diffrax's
loop), the Hamiltonian form on jaxbio's stored loop, the velocity form on each loop. Measured
2026-12-07 (AMD EPYC, 2 cores, load 4–6): 573 ms, 1,369 ms, 2,404 ms (Diffrax), 5,588 ms
(stored).
"""

import os
import sys
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _machine  # noqa: E402

import jaxbio as jb  # noqa: E402

jax.config.update("jax_enable_x64", True)
model, batch, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
tree = jb.load_model(model, dtype=jnp.float64).tree
system = jb.HamiltonianSystem(tree)
q0 = 0.5 * jax.random.normal(jax.random.key(0), (batch, tree.nv))
qd0 = jnp.zeros((batch, tree.nv))
stored, checkpointed = jb.simulation.StoredAdjoint(), diffrax.RecursiveCheckpointAdjoint()
PATHS = {
    "default (hamiltonian, diffrax)": {},
    "hamiltonian, stored": dict(form="hamiltonian", adjoint=stored),
    "velocity, diffrax": dict(form="velocity", adjoint=checkpointed),
    "velocity, stored": dict(form="velocity", adjoint=stored),
}


def solver(kwargs):
    def one(q, qd):
        tr = jb.simulate(system, system.initial_state(q, qd), 0.0, duration, rtol=1e-8, atol=1e-8, **kwargs)
        return tr.q[-1], tr.solution.stats["num_steps"]

    return jax.jit(jax.vmap(one))


print(_machine.machine())
for name, kwargs in PATHS.items():
    fn = solver(kwargs)
    q, steps = jax.block_until_ready(fn(q0, qd0))
    best = np.inf
    for _ in range(5):
        start = time.process_time()
        jax.block_until_ready(fn(q0, qd0))
        best = min(best, time.process_time() - start)
    print(f"{name:32s} CPU {1e3 * best:9.1f} ms   mean steps {float(np.mean(steps)):.0f}")
