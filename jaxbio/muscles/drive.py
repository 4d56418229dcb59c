"""Muscles as a stateful drive of a `HamiltonianSystem`: activations are ODE states.

``ȧ = ActivationDynamics.rate(u(t), a)``; the tensions ``F = HillMuscle.force(f·a, l(q), l̇(q, q̇))``
along `MusclePaths` (straight or wrapped); the generalised forces ``τ = r(q)ᵀ F`` (r = −∂l/∂q), so the
muscles' power on the skeleton is ``q̇ᵀτ = −F·l̇``. The fitness ``f[0]`` scales activation
(Ivancevic 2009: fitness-dependent muscular drives).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from jaxbio.hamiltonian import Drive
from jaxbio.muscles.activation import ActivationDynamics
from jaxbio.muscles.curves import HillMuscle
from jaxbio.muscles.geometry import MusclePaths, check_tree, generalized_forces, lengths_and_velocities
from jaxbio.tree import SegmentTree

__all__ = ["MuscleActuatedDrive"]


class MuscleActuatedDrive(Drive):
    """Hill muscles on paths, with activation dynamics, as a `Drive` with states.

    Fields: ``tree`` (the same `SegmentTree` as the system, for the path geometry), ``paths``
    (`MusclePaths`, m muscles), ``muscles`` (`HillMuscle` with m muscles), ``activation``
    (`ActivationDynamics`), ``excitation``: a traceable ``u(t) -> (m,)`` in [0, 1].
    State ``a`` ``(m,)``: activations.
    """

    tree: SegmentTree
    paths: MusclePaths
    muscles: HillMuscle
    activation: ActivationDynamics
    excitation: Callable

    def __check_init__(self):
        check_tree(self.paths, self.tree)  # paths built for another tree: ValueError naming both
        m = self.paths.n_muscles
        if self.muscles.max_isometric_force.shape != (m,):
            raise ValueError(
                f"MuscleActuatedDrive: muscles has {self.muscles.max_isometric_force.shape} "
                f"max_isometric_force entries, paths has {m} muscles"
            )

    @property
    def state_size(self) -> int:
        return self.paths.n_muscles

    def tensions(self, q, qd, f, a):
        """Muscle–tendon tensions ``(m,)`` N."""
        l_mt, v_mt = lengths_and_velocities(self.paths, self.tree, q, qd)
        return self.muscles.force(jnp.clip(f[0] * a, 0.0, 1.0), l_mt, v_mt)

    def __call__(self, t, q, qd, f, a=None):
        """Generalised forces ``(n,)`` N·m / N; ``a`` ``(m,)`` activations (required)."""
        if a is None:
            raise ValueError("MuscleActuatedDrive has states (activations): call it as drive(t, q, qd, f, a)")
        return generalized_forces(self.paths, self.tree, q, self.tensions(q, qd, f, a))

    def state_rate(self, t, q, qd, f, a):
        return self.activation.rate(jnp.asarray(self.excitation(t), a.dtype), a)
