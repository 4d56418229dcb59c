"""Closed-form terms of Biscarini's planar n-link chain (Biscarini 2021), on plain arrays.

Everything here is a pure function of one frame, written with the paper's symbols on 0-based arrays:
array index ``a = 0 … n-1`` is the paper's link ``a + 1``; the paper's base (link 0) never moves
(θ̇₀ = θ̈₀ = 0) so its terms vanish and it has no array entry. Joint ``r`` (0-based) is the paper's
joint ``r + 1``, between link ``r - 1`` (the base for ``r = 0``) and link ``r``; its centre is ``J[r]``.

Notation (per link ``a``, world frame, 2-vectors in the chain's plane, SI units):

- ``u_a = (cos θ_a, sin θ_a)``, ``w_a = k̂ × u_a``; ``uC_a``, ``wC_a`` the same at ``θ_a + ε_Ca``.
- ``e_a = θ̈_a l_a w_a − θ̇_a² l_a u_a`` (m/s²): acceleration of ``J_{a+1}`` relative to ``J_a``, and
  ``c_a = θ̈_a l_Ca wC_a − θ̇_a² l_Ca uC_a``: of ``C_a`` relative to ``J_a`` (the brackets of eq. 5).
- ``v_a = l_a (θ̈_a u_a + θ̇_a² w_a)`` and ``vC_a = l_Ca (θ̈_a uC_a + θ̇_a² wC_a)`` (m/s²): ``e_a`` and
  ``c_a`` turned by −90°, so that for any unit vector ``x̂ = (cos φ, sin φ)``

      x̂ · v_i = l_i [θ̈_i cos(φ − θ_i) + θ̇_i² sin(φ − θ_i)],

  the bracket that recurs in the paper's moment equations 13 and 17–24.
- ``M⁺_a = Σ_{j>a} m_j`` (kg), the mass distal to link ``a`` (zero for the last link).

**How the double sums are evaluated.** The paper's torque equations (17)–(24) are double sums over
pairs of links of terms like ``m_j l_k l_i [θ̈_i cos(θ_k − θ_i) + θ̇_i² sin(θ_k − θ_i)]``. With the
identity above each such term is ``l_k û_k · v_i`` and the inner sum over ``i`` factors out of the
outer one, e.g. ``Σ_{i<k} l_i[θ̈_i cos(θ_k − θ_i) + θ̇_i² sin(θ_k − θ_i)] = û_k · Σ_{i<k} v_i``: every
double sum becomes a prefix or suffix sum over the links, ``O(n)`` per frame and with ``2n`` sines
and cosines instead of ``O(n²)``. The equations are unchanged term by term; the tests compare them
with a literal transcription of eqs. 9, 10, 23 and 24 and of Appendix A.

No Python loop runs over links; the functions trace once per ``n``.
"""

from __future__ import annotations

import jax.numpy as jnp


def cross2(a, b):
    """z-component of ``a × b`` for ``(..., 2)`` arrays (N·m when ``a`` is m and ``b`` is N)."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def dot2(a, b):
    """``a · b`` over the last axis of ``(..., 2)`` arrays."""
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1]


def directions(angle):
    """``(u, w)``, each ``(n, 2)``: unit vectors at ``angle`` ``(n,)`` rad and ``k̂ × u``."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([c, s], -1), jnp.stack([-s, c], -1)


def prefix(x):
    """Exclusive prefix sum along axis 0: ``out[k] = Σ_{i<k} x[i]``."""
    return jnp.cumsum(x, axis=0) - x


def suffix(x):
    """Exclusive suffix sum along axis 0: ``out[k] = Σ_{i>k} x[i]``."""
    return jnp.cumsum(x[::-1], axis=0)[::-1] - x


class Frame:
    """Per-frame link quantities shared by the closed forms (plain container, not a pytree)."""

    def __init__(self, chain_arrays, theta, theta_dot, theta_ddot):
        lengths, masses, lc, eps, inertias, g = chain_arrays
        self.lengths, self.masses, self.lc, self.inertias, self.g = lengths, masses, lc, inertias, g
        self.theta, self.theta_ddot = theta, theta_ddot
        self.u, self.w = directions(theta)
        # û_C, ŵ_C at θ + ε_C: û turned by ε_C (the cos/sin of ε_C do not depend on the frame)
        ce, se = jnp.cos(eps)[:, None], jnp.sin(eps)[:, None]
        self.uc, self.wc = ce * self.u + se * self.w, ce * self.w - se * self.u
        sq = theta_dot**2
        self.e = (lengths * theta_ddot)[:, None] * self.w - (lengths * sq)[:, None] * self.u
        self.c = (lc * theta_ddot)[:, None] * self.wc - (lc * sq)[:, None] * self.uc
        self.v = (lengths * theta_ddot)[:, None] * self.u + (lengths * sq)[:, None] * self.w
        self.vc = (lc * theta_ddot)[:, None] * self.uc + (lc * sq)[:, None] * self.wc
        self.distal_mass = suffix(masses)  # M⁺_a = Σ_{j>a} m_j
        self.gravity_vec = jnp.stack([jnp.zeros_like(g), -g])

    def loads(self, link_forces):
        """``(n, 2)`` N: ``m_i g + R_i`` per link (weight plus contact forces)."""
        return self.masses[:, None] * self.gravity_vec + link_forces


def com_accelerations(f: Frame):
    """``(n, 2)`` m/s²: ``a_Ca = Σ_{b<a} e_b + c_a`` (Biscarini 2021, eq. 5; ``a_J1 = 0``)."""
    return prefix(f.e) + f.c


def distal_inertial_sums(f: Frame):
    """``(n, 2)`` N: ``Σ_{a≥r} m_a a_Ca`` for every joint ``r``, Biscarini 2021, eq. 6:

        (Σ_{j≥r} m_j) Σ_{i<r} e_i + Σ_{i≥r} (Σ_{j>i} m_j) e_i + Σ_{i≥r} m_i c_i

    (the paper's ``(Σ_{j>k} m_j) Σ_{i≤k} e_i + (1 − δ_{k,n−1}) Σ_{k<i<n} (Σ_{j>i} m_j) e_i + Σ_{i>k} m_i c_i``
    in its 1-based indices, ``k = r``)."""
    weighted = f.distal_mass[:, None] * f.e + f.masses[:, None] * f.c
    inclusive = suffix(weighted) + weighted
    return (f.distal_mass + f.masses)[:, None] * prefix(f.e) + inclusive


def proximal_inertial_sums(f: Frame):
    """``(n, 2)`` N: ``Σ_{a<r} m_a a_Ca`` for every joint ``r``, Biscarini 2021, eq. 7:

        Σ_{i<r} (Σ_{j=i+1}^{r−1} m_j) e_i + Σ_{a<r} m_a c_a,

    zero for ``r = 0``. With ``S_i = Σ_{j≤i} m_j`` the weight is ``S_{r−1} − S_i``."""
    s_incl = jnp.cumsum(f.masses)
    s_excl = s_incl - f.masses  # S_{r-1} = Σ_{j<r} m_j
    return s_excl[:, None] * prefix(f.e) - prefix(s_incl[:, None] * f.e) + prefix(f.masses[:, None] * f.c)


def own_link_terms(f: Frame, contact_moments, sum_v_before):
    """``(n,)`` N·m: the terms of Biscarini 2021, eqs. 20/21 that involve link ``k``'s own loads and COM
    (the same in both forms):

        m_k g l_Ck cos(θ_k + ε_Ck) − R_k l_Rk sin(γ_Rk − ε_Rk)
        + m_k l_Ck Σ_{i<k} l_i [θ̈_i cos(θ_k + ε_Ck − θ_i) + θ̇_i² sin(θ_k + ε_Ck − θ_i)]   (eq. 17)
        + I_Jk θ̈_k,   I_Jk = I_Ck + m_k l_Ck² (Huygens–Steiner)

    ``contact_moments``: ``(n,)`` N·m, moment about ``J_k`` of the contact forces on link ``k``;
    ``sum_v_before``: ``(n, 2)``, ``Σ_{i<k} v_i``."""
    weight = f.masses * f.g * f.lc * f.uc[:, 0]
    inertial = f.masses * f.lc * dot2(f.uc, sum_v_before)
    i_joint = f.inertias + f.masses * f.lc**2
    return weight - contact_moments + inertial + i_joint * f.theta_ddot


def distal_torque_differences(f: Frame, link_forces, contact_moments):
    """``(n,)`` N·m: ``τ_k − τ_{k+1}`` from Biscarini 2021, eq. 20 (data distal to each joint), with the
    inertial factors of eqs. 17 and 18; summing from the tip gives eq. 23 (eq. 13 for ``k = n``).

    ``link_forces``: ``(n, 2)`` N, sum of the contact forces on each link (world frame). Besides
    `own_link_terms`, the ``l_k`` terms (the paper's 1-based ``k``) are

        Σ_{i>k} [m_i g l_k cos θ_k − R_i l_k sin(γ_Ri + θ_i − θ_k)]
        + l_k (Σ_{j>k} m_j) Σ_{i<k} l_i [θ̈_i cos(θ_k − θ_i) + θ̇_i² sin(θ_k − θ_i)]
        + (Σ_{j>k} m_j) l_k² θ̈_k
        + (1 − δ_{k,n−1}) l_k Σ_{k<i<n} (Σ_{j>i} m_j) l_i [θ̈_i cos(θ_i − θ_k) − θ̇_i² sin(θ_i − θ_k)]
        + l_k Σ_{i>k} m_i l_Ci [θ̈_i cos(θ_i + ε_Ci − θ_k) − θ̇_i² sin(θ_i + ε_Ci − θ_k)]

    i.e. ``l_k û_k · [M⁺_k Σ_{i≤k} v_i + Σ_{i>k} (M⁺_i v_i + m_i vC_i)]`` plus the load moments; all
    vanish for the last link (no distal mass or load)."""
    before = prefix(f.v)
    own = own_link_terms(f, contact_moments, before)
    later = suffix(jnp.concatenate([f.distal_mass[:, None] * f.v + f.masses[:, None] * f.vc, link_forces], axis=1))
    later_inertial, later_forces = later[:, :2], later[:, 2:]  # Σ_{i>k} (M⁺_i v_i + m_i vC_i), Σ_{i>k} R_i
    transfer = f.distal_mass * f.g * f.lengths * f.u[:, 0] - f.lengths * cross2(f.u, later_forces)
    inertial = f.lengths * dot2(f.u, f.distal_mass[:, None] * (before + f.v) + later_inertial)
    return own + transfer + inertial


def proximal_torque_differences(f: Frame, link_forces, contact_moments, base_load):
    """``(n,)`` N·m: ``τ_k − τ_{k+1}`` from Biscarini 2021, eq. 21 (data proximal to each joint), with the
    inertial factors of eqs. 17 and 19; summing from the tip gives eq. 24.

    ``base_load``: ``(2,)`` N, ``m₀g + R₀`` (weight and contact force of the base, world frame).
    Besides `own_link_terms`, the ``l_k`` terms, present for ``k < n`` only (the paper's 1-based ``k``;
    there is no joint beyond the tip), are

        − Σ_{i=0}^{k} [m_i g l_k cos θ_k − R_i l_k sin(γ_Ri + θ_i − θ_k)]
        − l_k Σ_{i<k} (Σ_{j=i+1}^{k} m_j) l_i [θ̈_i cos(θ_k − θ_i) + θ̇_i² sin(θ_k − θ_i)]
        − l_k Σ_{i≤k} m_i l_Ci [θ̈_i cos(θ_k − θ_i − ε_Ci) + θ̇_i² sin(θ_k − θ_i − ε_Ci)]

    where the ``i = 0`` (base) term of the first line is the moment of ``base_load`` about ``J_k``
    (``Σ_{i=0}^{k} l_k û_k × (m_i g + R_i)``). With ``S_k = Σ_{j≤k} m_j`` the middle weight is
    ``S_k − S_i``."""
    before = prefix(f.v)
    own = own_link_terms(f, contact_moments, before)
    s_incl = jnp.cumsum(f.masses)
    running = jnp.cumsum(
        jnp.concatenate([s_incl[:, None] * f.v, f.masses[:, None] * f.vc, f.loads(link_forces)], axis=1), axis=0
    )
    sv_before = running[:, :2] - s_incl[:, None] * f.v  # Σ_{i<k} S_i v_i
    mvc_upto, loads_upto = running[:, 2:4], running[:, 4:]  # Σ_{i≤k} m_i vC_i, Σ_{i≤k} (m_i g + R_i)
    transfer = f.lengths * cross2(f.u, base_load + loads_upto)
    inertial = -f.lengths * dot2(f.u, s_incl[:, None] * before - sv_before + mvc_upto)
    not_tip = jnp.arange(f.masses.shape[0]) < f.masses.shape[0] - 1
    return own + jnp.where(not_tip, transfer + inertial, 0.0)


def sum_from_tip(differences):
    """``τ_k = Σ_{j≥k} (τ_j − τ_{j+1})`` with ``τ_{n+1} = 0`` (Biscarini 2021, eqs. 20/21 → 23/24)."""
    return jnp.cumsum(differences[::-1])[::-1]
