"""Biscarini's closed-form planar n-link chain (Biscarini 2021) against independent references (float64).

References:

- the wrench recursion ``jb.segment_wrenches`` / ``jb.inverse_dynamics`` on ``chain.to_tree()`` and
  Pinocchio's RNEA (tests/pinocchio_ref.py), with the muscle force pairs and contact forces built
  here in numpy and passed as external wrenches at their attachment points;
- literal transcriptions, with Python loops in the paper's 1-based indices, of eqs. 9, 10, 23 and 24
  as printed (the library evaluates the same sums factorised into prefix/suffix sums);
- Appendix A's 2-link (Zatsiorsky) and 3-link (Cesari) equations written out symbol by symbol, and
  the textbook joint-space equations of a two-rod arm (with its Coriolis terms);
- central finite differences for the gradients.

Errors are norm-wise relative, ``||a - b|| / max(||b||, 1)``, tolerance ``1e-10``.
"""

from __future__ import annotations


import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.papers.biscarini_chain import (
    BASE,
    ResistancePoints,
    LinearMuscles,
    PlanarChain,
    base_load_from_balance,
    chain_reactions,
    chain_torques,
    external_wrenches,
    joint_to_link_angles,
    link_to_joint_angles,
    muscle_joint_forces,
    muscle_torques,
)


RTOL = 1e-10
G = 9.81


def relative_error(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1.0))


def assert_close(a, b, what, rtol=RTOL):
    err = relative_error(a, b)
    assert err <= rtol, f"{what}: relative error {err:.3e} > {rtol:.0e}\n got  {np.asarray(a)}\n want {np.asarray(b)}"
    return err


# ---------------------------------------------------------------------------------------------------
# Random chains, muscles, contacts, frames
# ---------------------------------------------------------------------------------------------------


def random_chain(rng, n) -> PlanarChain:
    return PlanarChain(
        lengths=rng.uniform(0.2, 1.0, n),
        masses=rng.uniform(0.5, 5.0, n),
        com_distances=rng.uniform(0.0, 0.6, n),
        com_angles=rng.uniform(-1.0, 1.0, n),
        inertias=rng.uniform(0.01, 0.3, n),
        gravity=G,
    )


def random_muscles(rng, n, count) -> LinearMuscles:
    """Muscles spanning 1..n joints, some from the base, origin/insertion in random order."""
    prox = rng.integers(BASE, n - 1, count)
    dist = np.array([rng.integers(p + 1, n) for p in prox], dtype=int)
    swap = rng.random(count) < 0.5
    origins, insertions = np.where(swap, dist, prox), np.where(swap, prox, dist)
    return LinearMuscles(
        n, origins.tolist(), insertions.tolist(), rng.uniform(-0.3, 0.3, (count, 2)), rng.uniform(-0.3, 0.3, (count, 2))
    )


def random_contacts(rng, n, count) -> ResistancePoints:
    return ResistancePoints(n, rng.integers(0, n, count).tolist(), rng.uniform(-0.4, 0.4, (count, 2)))


def random_frames(rng, n, n_muscles, n_contacts, batch):
    theta = rng.uniform(-np.pi, np.pi, (batch, n))
    theta_dot = rng.uniform(-3.0, 3.0, (batch, n))
    theta_ddot = rng.uniform(-10.0, 10.0, (batch, n))
    tensions = rng.uniform(0.0, 300.0, (batch, n_muscles))
    contact_forces = rng.uniform(-60.0, 60.0, (batch, n_contacts, 2))
    return theta, theta_dot, theta_ddot, tensions, contact_forces


def params(chain):
    """numpy copies of the chain's arrays."""
    return {
        k: np.asarray(getattr(chain, k))
        for k in ("lengths", "masses", "com_distances", "com_angles", "inertias", "gravity")
    }


# ---------------------------------------------------------------------------------------------------
# Independent numpy geometry: attachment points, muscle forces, external wrenches
# ---------------------------------------------------------------------------------------------------


def np_joints(p, theta):
    u = np.stack([np.cos(theta), np.sin(theta)], -1)
    return np.concatenate([[[0.0, 0.0]], np.cumsum(p["lengths"][:, None] * u, axis=0)])


def np_point(p, theta, link, xy):
    """World position of the link-fixed point ``xy`` on ``link`` (world coordinates on the base)."""
    if link == BASE:
        return np.asarray(xy, float)
    J = np_joints(p, theta)
    u = np.array([np.cos(theta[link]), np.sin(theta[link])])
    w = np.array([-u[1], u[0]])
    return J[link] + xy[0] * u + xy[1] * w


def np_muscle_pairs(p, muscles, theta, tensions):
    """Per muscle: (origin link, origin point, force on origin, insertion link, point, force)."""
    out = []
    for m in range(muscles.count):
        o, s = muscles.origin_links[m], muscles.insertion_links[m]
        po = np_point(p, theta, o, np.asarray(muscles.origin_points[m]))
        ps = np_point(p, theta, s, np.asarray(muscles.insertion_points[m]))
        d = (po - ps) / np.linalg.norm(po - ps)
        out.append((o, po, -tensions[m] * d, s, ps, tensions[m] * d))  # each pulled towards the other
    return out


def np_external(p, theta, muscles=None, tensions=None, contacts=None, contact_forces=None):
    """``(forces (n, 3), moments (n, 3))`` world frame, moments about each link's joint centre."""
    n = len(theta)
    J = np_joints(p, theta)
    forces, moments = np.zeros((n, 3)), np.zeros((n, 3))

    def add(link, point, force):
        if link == BASE:
            return
        forces[link, :2] += force
        r = point - J[link]
        moments[link, 2] += r[0] * force[1] - r[1] * force[0]

    if muscles is not None:
        for o, po, fo, s, ps, fs in np_muscle_pairs(p, muscles, theta, tensions):
            add(o, po, fo)
            add(s, ps, fs)
    if contacts is not None:
        for c, link in enumerate(contacts.links):
            add(link, np_point(p, theta, link, np.asarray(contacts.points[c])), contact_forces[c])
    return forces, moments


def np_spanning_forces(p, muscles, theta, tensions):
    """Seed eq. 12: per joint (0-based), sum of the forces of the spanning muscles on their distal link."""
    n = len(theta)
    out = np.zeros((n, 2))
    for o, _po, fo, s, _ps, fs in np_muscle_pairs(p, muscles, theta, tensions):
        prox, dist, f_dist = (o, s, fs) if s > o else (s, o, fo)
        for r in range(prox + 1, dist + 1):
            out[r] += f_dist
    return out


def polar_contacts(p, contacts, theta, contact_forces, n):
    """ResistancePoints in the paper's parametrisation, per 1-based link: list of (l_R, ε_R, γ_R, |R|)."""
    per_link = {k: [] for k in range(n + 1)}
    for c, link in enumerate(contacts.links):
        x, y = np.asarray(contacts.points[c])
        f = contact_forces[c]
        per_link[link + 1].append(
            (np.hypot(x, y), np.arctan2(y, x), np.arctan2(f[1], f[0]) - theta[link], np.hypot(*f))
        )
    return per_link


# ---------------------------------------------------------------------------------------------------
# Literal transcriptions of the paper's general equations (1-based, index 0 = base; Python loops)
# ---------------------------------------------------------------------------------------------------


def _padded(p, theta, theta_dot, theta_ddot):
    """1-based arrays with a base entry 0 (θ_0 = θ̇_0 = θ̈_0 = 0; l_0 arbitrary: its terms vanish)."""
    pad = lambda x, v=0.0: np.concatenate([[v], np.asarray(x, float)])  # noqa: E731
    s = {k: pad(v, 1.0) for k, v in p.items() if k != "gravity"}
    s.update(th=pad(theta), thd=pad(theta_dot), thdd=pad(theta_ddot), g=float(p["gravity"]))
    s["IJ"] = s["inertias"] + s["masses"] * s["com_distances"] ** 2
    return s


def eq23_literal(p, theta, theta_dot, theta_ddot, R):
    """Biscarini 2021, eq. 23 (eq. 13 for k* = n) as printed; R from `polar_contacts`. Returns (n,)."""
    s = _padded(p, theta, theta_dot, theta_ddot)
    n = len(theta)
    l, lC, eC, m, IJ, g = s["lengths"], s["com_distances"], s["com_angles"], s["masses"], s["IJ"], s["g"]
    th, thd, thdd = s["th"], s["thd"], s["thdd"]
    cos, sin = np.cos, np.sin
    Rm = lambda k: sum(Rk * lR * sin(gR - eR) for lR, eR, gR, Rk in R[k])  # noqa: E731
    M = lambda a, b: sum(m[j] for j in range(a, b + 1))  # noqa: E731  Σ_{j=a}^{b} m_j
    tau = np.zeros(n)
    for ks in range(1, n + 1):
        t = 0.0
        for k in range(ks, n + 1):
            t += m[k] * g * lC[k] * cos(th[k] + eC[k]) - Rm(k)
        for k in range(ks, n):
            for i in range(k + 1, n + 1):
                t += m[i] * g * l[k] * cos(th[k]) - sum(Ri * l[k] * sin(gR + th[i] - th[k]) for _, _, gR, Ri in R[i])
        for k in range(ks, n + 1):
            t += (
                m[k]
                * lC[k]
                * sum(
                    l[i] * (thdd[i] * cos(th[k] + eC[k] - th[i]) + thd[i] ** 2 * sin(th[k] + eC[k] - th[i]))
                    for i in range(0, k)
                )
            )
        for k in range(ks, n):
            t += (
                l[k]
                * M(k + 1, n)
                * sum(l[i] * (thdd[i] * cos(th[k] - th[i]) + thd[i] ** 2 * sin(th[k] - th[i])) for i in range(0, k))
            )
        for k in range(ks, n):
            t += (IJ[k] + M(k + 1, n) * l[k] ** 2) * thdd[k]
        t += IJ[n] * thdd[n]
        for k in range(ks, n):
            delta = 1.0 if k == n - 1 else 0.0
            t += (
                (1 - delta)
                * l[k]
                * sum(
                    M(i + 1, n) * l[i] * (thdd[i] * cos(th[i] - th[k]) - thd[i] ** 2 * sin(th[i] - th[k]))
                    for i in range(k + 1, n)
                )
            )
        for k in range(ks, n):
            t += l[k] * sum(
                m[i] * lC[i] * (thdd[i] * cos(th[i] + eC[i] - th[k]) - thd[i] ** 2 * sin(th[i] + eC[i] - th[k]))
                for i in range(k + 1, n + 1)
            )
        tau[ks - 1] = t
    return tau


def eq24_literal(p, theta, theta_dot, theta_ddot, R, m0, R0):
    """Biscarini 2021, eq. 24 as printed, with the base (link 0) of mass ``m0`` loaded by the contact force
    ``R0`` (world 2-vector; θ_0 = 0 so γ_R0 is its world angle)."""
    s = _padded(p, theta, theta_dot, theta_ddot)
    n = len(theta)
    l, lC, eC, m, IJ, g = s["lengths"], s["com_distances"], s["com_angles"], s["masses"], s["IJ"], s["g"]
    m = m.copy()
    m[0] = m0
    th, thd, thdd = s["th"], s["thd"], s["thdd"]
    R = dict(R)
    R[0] = [(0.0, 0.0, np.arctan2(R0[1], R0[0]), np.hypot(*R0))]
    cos, sin = np.cos, np.sin
    Rm = lambda k: sum(Rk * lR * sin(gR - eR) for lR, eR, gR, Rk in R[k])  # noqa: E731
    M = lambda a, b: sum(m[j] for j in range(a, b + 1))  # noqa: E731
    tau = np.zeros(n)
    for ks in range(1, n + 1):
        t = 0.0
        for k in range(ks, n + 1):
            t += m[k] * g * lC[k] * cos(th[k] + eC[k]) - Rm(k)
        for k in range(ks, n):
            for i in range(0, k + 1):
                t -= m[i] * g * l[k] * cos(th[k]) - sum(Ri * l[k] * sin(gR + th[i] - th[k]) for _, _, gR, Ri in R[i])
        for k in range(ks, n + 1):
            t += (
                m[k]
                * lC[k]
                * sum(
                    l[i] * (thdd[i] * cos(th[k] + eC[k] - th[i]) + thd[i] ** 2 * sin(th[k] + eC[k] - th[i]))
                    for i in range(0, k)
                )
            )
        for k in range(ks, n):
            t -= l[k] * sum(
                M(i + 1, k) * l[i] * (thdd[i] * cos(th[k] - th[i]) + thd[i] ** 2 * sin(th[k] - th[i]))
                for i in range(0, k)
            )
        for k in range(ks, n + 1):
            t += IJ[k] * thdd[k]
        for k in range(ks, n):
            t -= l[k] * sum(
                m[i] * lC[i] * (thdd[i] * cos(th[k] - th[i] - eC[i]) + thd[i] ** 2 * sin(th[k] - th[i] - eC[i]))
                for i in range(1, k + 1)
            )
        tau[ks - 1] = t
    return tau


def _eq5_pieces(s, i):
    """(θ̈_i l_i ŵ_i − θ̇_i² l_i û_i, θ̈_i l_Ci ŵ_Ci − θ̇_i² l_Ci û_Ci), the brackets of eq. 5."""
    th, thd, thdd = s["th"][i], s["thd"][i], s["thdd"][i]
    u = np.array([np.cos(th), np.sin(th)])
    phi = th + s["com_angles"][i]
    uc = np.array([np.cos(phi), np.sin(phi)])
    w, wc = np.array([-u[1], u[0]]), np.array([-uc[1], uc[0]])
    return (
        thdd * s["lengths"][i] * w - thd**2 * s["lengths"][i] * u,
        thdd * s["com_distances"][i] * wc - thd**2 * s["com_distances"][i] * uc,
    )


def eq9_literal(p, theta, theta_dot, theta_ddot, link_R, FM):
    """Biscarini 2021, eqs. 8 (second form), 9 and 11 (first form) as printed: ϕ_{k,k+1}, k = 0..n-1.
    ``link_R``: (n + 1, 2), contact force per 1-based link; ``FM``: (n, 2), eq. 12 per joint."""
    s = _padded(p, theta, theta_dot, theta_ddot)
    n = len(theta)
    m, g = s["masses"], np.array([0.0, -s["g"]])
    M = lambda a, b: sum(m[j] for j in range(a, b + 1))  # noqa: E731
    out = np.zeros((n, 2))
    for k in range(0, n):
        phi = sum(m[i] * g + link_R[i] for i in range(k + 1, n + 1)) + FM[k]
        phi = phi - M(k + 1, n) * sum(_eq5_pieces(s, i)[0] for i in range(0, k + 1))
        delta = 1.0 if k == n - 1 else 0.0
        phi = phi - (1 - delta) * sum((M(i + 1, n) * _eq5_pieces(s, i)[0] for i in range(k + 1, n)), np.zeros(2))
        phi = phi - sum(m[i] * _eq5_pieces(s, i)[1] for i in range(k + 1, n + 1))
        out[k] = phi
    return out


def eq10_literal(p, theta, theta_dot, theta_ddot, link_R, FM, m0, R0):
    """Biscarini 2021, eqs. 8 (first form), 10 and 11 (second form) as printed, base of mass m0 with contact R0."""
    s = _padded(p, theta, theta_dot, theta_ddot)
    n = len(theta)
    m = s["masses"].copy()
    m[0] = m0
    g = np.array([0.0, -s["g"]])
    link_R = np.array(link_R, float)
    link_R[0] = R0
    M = lambda a, b: sum(m[j] for j in range(a, b + 1))  # noqa: E731
    out = np.zeros((n, 2))
    for k in range(0, n):
        phi = -sum(m[i] * g + link_R[i] for i in range(0, k + 1)) + FM[k]
        phi = phi + sum((M(i + 1, k) * _eq5_pieces(s, i)[0] for i in range(0, k)), np.zeros(2))
        phi = phi + sum((m[i] * _eq5_pieces(s, i)[1] for i in range(1, k + 1)), np.zeros(2))
        out[k] = phi
    return out


# ---------------------------------------------------------------------------------------------------
# 1. Closed form = recursion = Pinocchio = literal equations, random chains
# ---------------------------------------------------------------------------------------------------


def np_muscle_torques(p, muscles, theta, tensions):
    """Biscarini 2021, eq. 22 in numpy: per joint, moment about J_k of the spanning muscles' distal forces."""
    J = np_joints(p, theta)
    out = np.zeros(len(theta))
    for o, po, fo, s, ps, fs in np_muscle_pairs(p, muscles, theta, tensions):
        prox, dist, p_dist, f_dist = (o, s, ps, fs) if s > o else (s, o, po, fo)
        for r in range(prox + 1, dist + 1):
            arm = p_dist - J[r]
            out[r] += arm[0] * f_dist[1] - arm[1] * f_dist[0]
    return out


@jax.jit
def _everything(chain, muscles, contacts, theta, theta_dot, theta_ddot, tensions, contact_forces, ext):
    """All closed-form outputs and the recursion on the same frames (jit(vmap), one compile per case).
    ``ext``: the numpy-built external wrenches of the muscles and contacts, per frame."""
    tree = chain.to_tree()

    def one(th, thd, thdd, T, R, ext_f, ext_m):
        q, qd, qdd = link_to_joint_angles(th), link_to_joint_angles(thd), link_to_joint_angles(thdd)
        b = base_load_from_balance(chain, th, thd, thdd, contacts, R)
        forces, moments = jb.segment_wrenches(tree, q, qd, qdd, (ext_f, ext_m))
        return {
            "phi": chain_reactions(chain, th, thd, thdd, muscles, T, contacts, R),
            "phi_prox": chain_reactions(chain, th, thd, thdd, muscles, T, contacts, R, form="proximal", base_load=b),
            "tau": chain_torques(chain, th, thd, thdd, contacts, R),
            "tau_prox": chain_torques(chain, th, thd, thdd, contacts, R, form="proximal", base_load=b),
            "tau_muscles": muscle_torques(chain, muscles, th, T),
            "FM": muscle_joint_forces(chain, muscles, th, T),
            "balance": b,
            "ext_all": jnp.concatenate(external_wrenches(chain, th, muscles, T, contacts, R), -1),
            "rec_forces": forces,
            "rec_moments": moments,
        }

    return jax.vmap(one)(theta, theta_dot, theta_ddot, tensions, contact_forces, *ext)


def run_random_case(seed, n, n_muscles, n_contacts, batch):
    """Every check on ``batch`` random frames of a random chain; returns the worst error per check."""
    pytest.importorskip("pinocchio")
    from tests import pinocchio_ref as ref

    rng = np.random.default_rng(seed)
    chain = random_chain(rng, n)
    muscles = random_muscles(rng, n, n_muscles)
    contacts = random_contacts(rng, n, n_contacts)
    th, thd, thdd, T, R = random_frames(rng, n, n_muscles, n_contacts, batch)
    m0 = rng.uniform(1.0, 10.0)
    p = params(chain)
    ext = [np_external(p, th[f], muscles, T[f], contacts, R[f]) for f in range(batch)]
    ext_f, ext_m = np.stack([e[0] for e in ext]), np.stack([e[1] for e in ext])
    out = {
        k: np.asarray(v) for k, v in _everything(chain, muscles, contacts, th, thd, thdd, T, R, (ext_f, ext_m)).items()
    }
    model = ref.build_pinocchio_model(chain.to_tree().to_dict())
    worst = {}

    def record(name, a, b):
        worst[name] = max(worst.get(name, 0.0), assert_close(a, b, f"n={n} seed={seed} {name}"))

    for f in range(batch):
        q = np.asarray(link_to_joint_angles(th[f]))
        qd = np.asarray(link_to_joint_angles(thd[f]))
        qdd = np.asarray(link_to_joint_angles(thdd[f]))
        ext_cf, ext_cm = np_external(p, th[f], None, None, contacts, R[f])
        tau_muscles = np_muscle_torques(p, muscles, th[f], T[f])
        record("external_wrenches", out["ext_all"][f], np.concatenate([ext_f[f], ext_m[f]], -1))
        record("eq. 22 muscle torques", out["tau_muscles"][f], tau_muscles)
        # joint reaction: force on link r from its parent = -ϕ_{r,r+1}; no out-of-plane components
        record("reactions vs recursion", -out["phi"][f], out["rec_forces"][f][:, :2])
        # net joint moment left to the joint once the muscles act: τ (eq. 23) − τ_muscles (eq. 22)
        record("torques - muscle torques vs recursion", out["tau"][f] - tau_muscles, out["rec_moments"][f][:, 2])
        assert np.abs(out["rec_forces"][f][:, 2]).max() < 1e-12 and np.abs(out["rec_moments"][f][:, :2]).max() < 1e-12
        pin_tau = ref.pin_inverse_dynamics(model, q, qd, qdd, ext_cf, ext_cm)
        pin_f, pin_m = ref.pin_segment_wrenches(model, q, qd, qdd, ext_f[f], ext_m[f])
        record("torques vs Pinocchio rnea", out["tau"][f], pin_tau)
        record("reactions vs Pinocchio", -out["phi"][f], pin_f[:, :2])
        record("torques - muscle torques vs Pinocchio", out["tau"][f] - tau_muscles, pin_m[:, 2])
        # literal transcriptions of the paper's equations
        polar = polar_contacts(p, contacts, th[f], R[f], n)
        link_R = np.zeros((n + 1, 2))
        for c, link in enumerate(contacts.links):
            link_R[link + 1] += R[f][c]
        FM = np_spanning_forces(p, muscles, th[f], T[f])
        record("eq. 12 muscle joint forces", out["FM"][f], FM)
        record("eq. 23 literal", out["tau"][f], eq23_literal(p, th[f], thd[f], thdd[f], polar))
        record("eq. 9 literal", out["phi"][f], eq9_literal(p, th[f], thd[f], thdd[f], link_R, FM))
        R0 = out["balance"][f] - m0 * np.array([0.0, -G])  # base_load = m0 g + R0
        record("eq. 24 literal", out["tau_prox"][f], eq24_literal(p, th[f], thd[f], thdd[f], polar, m0, R0))
        record("eq. 10 literal", out["phi_prox"][f], eq10_literal(p, th[f], thd[f], thdd[f], link_R, FM, m0, R0))
        # the two forms agree when the base load satisfies eq. 4
        record("eq. 10 = eq. 9", out["phi_prox"][f], out["phi"][f])
        record("eq. 24 = eq. 23", out["tau_prox"][f], out["tau"][f])
        # eq. 4's base load against eq. 8: m0 g + R0 = -ϕ_01 + Σ_j F_j0 (the base's muscles)
        record("eq. 4 vs eq. 8", out["balance"][f], -out["phi"][f][0] + FM[0])
    return worst


@pytest.mark.parametrize("n, n_muscles, n_contacts", [(8, 12, 6)])
def test_closed_form_matches_recursion_pinocchio_and_literal_equations(n, n_muscles, n_contacts):
    """n = 8, the largest of the issue (every n = 1 … 8, two seeds each, under -m slow)."""
    pytest.importorskip("pinocchio")
    worst = run_random_case(100 + n, n, n_muscles, n_contacts, batch=3)
    assert max(worst.values()) <= RTOL


@pytest.mark.slow
@pytest.mark.parametrize("n", range(1, 9))
def test_closed_form_random_sweep(n):
    """More seeds, more frames, more muscles and contacts (several per link) per ``n``."""
    pytest.importorskip("pinocchio")
    for seed in range(2):
        rng = np.random.default_rng(1000 * n + seed)
        worst = run_random_case(
            1000 * n + seed, n, int(rng.integers(1, 3 * n + 2)), int(rng.integers(1, 2 * n + 2)), batch=6
        )
        assert max(worst.values()) <= RTOL


# ---------------------------------------------------------------------------------------------------
# 2. Appendix A: the 2-link and 3-link equations symbol by symbol
# ---------------------------------------------------------------------------------------------------


def appendix_two_link(s, th, thd, thdd, R):
    """Biscarini 2021, Appendix A, n = 2. ``s``: dict of 1-based symbols; ``R[k] = (l_Rk, ε_Rk, γ_Rk, R_k)``."""
    l1 = s["l"][1]
    lC1, lC2 = s["lC"][1], s["lC"][2]
    eC1, eC2 = s["eC"][1], s["eC"][2]
    m1, m2 = s["m"][1], s["m"][2]
    IJ1, IJ2 = s["IJ"][1], s["IJ"][2]
    g = s["g"]
    th1, th2 = th
    thd1, thd2 = thd
    thdd1, thdd2 = thdd
    (lR1, eR1, gR1, R1), (lR2, eR2, gR2, R2) = R[1], R[2]
    cos, sin = np.cos, np.sin
    tau2 = (
        m2 * g * lC2 * cos(th2 + eC2)
        - R2 * lR2 * sin(gR2 - eR2)
        + m2 * lC2 * l1 * (thdd1 * cos(th2 + eC2 - th1) + thd1**2 * sin(th2 + eC2 - th1))
        + IJ2 * thdd2
    )
    tau1 = (
        (m1 * g * lC1 * cos(th1 + eC1) - R1 * lR1 * sin(gR1 - eR1))
        + (m2 * g * lC2 * cos(th2 + eC2) - R2 * lR2 * sin(gR2 - eR2))
        + (m2 * g * l1 * cos(th1) - R2 * l1 * sin(gR2 + th2 - th1))
        + m2 * lC2 * l1 * (thdd1 * cos(th2 + eC2 - th1) + thd1**2 * sin(th2 + eC2 - th1))
        + (IJ1 + m2 * l1**2) * thdd1
        + IJ2 * thdd2
        + l1 * m2 * lC2 * (thdd2 * cos(th2 + eC2 - th1) - thd2**2 * sin(th2 + eC2 - th1))
    )
    return np.array([tau1, tau2])


def appendix_three_link(s, th, thd, thdd, R):
    """Biscarini 2021, Appendix A, n = 3 (Cesari et al. in the global frame)."""
    l1, l2 = s["l"][1], s["l"][2]
    lC, eC, m, IJ, g = s["lC"], s["eC"], s["m"], s["IJ"], s["g"]
    th1, th2, th3 = th
    thd1, thd2, thd3 = thd
    thdd1, thdd2, thdd3 = thdd
    tht, thdt, thddt = (0.0, *th), (0.0, *thd), (0.0, *thdd)  # 1-based access θ_i
    lR, eR, gR, Rm = ({k: R[k][j] for k in (1, 2, 3)} for j in range(4))
    ll = {1: l1, 2: l2}
    cos, sin = np.cos, np.sin

    def own(k):
        return m[k] * g * lC[k] * cos(tht[k] + eC[k]) - Rm[k] * lR[k] * sin(gR[k] - eR[k])

    def b3(i):  # l_i [θ̈_i cos(θ_3 + ε_C3 − θ_i) + θ̇_i² sin(θ_3 + ε_C3 − θ_i)]
        return ll[i] * (thddt[i] * cos(th3 + eC[3] - tht[i]) + thdt[i] ** 2 * sin(th3 + eC[3] - tht[i]))

    tau3 = own(3) + m[3] * lC[3] * (b3(1) + b3(2)) + IJ[3] * thdd3
    tau2 = (
        own(2)
        + own(3)
        + (m[3] * g * l2 * cos(th2) - Rm[3] * l2 * sin(gR[3] + th3 - th2))
        + m[2] * lC[2] * l1 * (thdd1 * cos(th2 + eC[2] - th1) + thd1**2 * sin(th2 + eC[2] - th1))
        + m[3] * lC[3] * (b3(1) + b3(2))
        + l2 * m[3] * l1 * (thdd1 * cos(th2 - th1) + thd1**2 * sin(th2 - th1))
        + (IJ[2] + m[3] * l2**2) * thdd2
        + IJ[3] * thdd3
        + l2 * m[3] * lC[3] * (thdd3 * cos(th3 + eC[3] - th2) - thd3**2 * sin(th3 + eC[3] - th2))
    )
    tau1 = (
        own(1)
        + own(2)
        + own(3)
        + sum(m[i] * g * l1 * cos(th1) - Rm[i] * l1 * sin(gR[i] + tht[i] - th1) for i in (2, 3))
        + m[3] * g * l2 * cos(th2)
        - Rm[3] * l2 * sin(gR[3] + th3 - th2)
        + m[2] * lC[2] * l1 * (thdd1 * cos(th2 + eC[2] - th1) + thd1**2 * sin(th2 + eC[2] - th1))
        + m[3] * lC[3] * (b3(1) + b3(2))
        + l2 * m[3] * l1 * (thdd1 * cos(th2 - th1) + thd1**2 * sin(th2 - th1))
        + (IJ[1] + (m[2] + m[3]) * l1**2) * thdd1
        + (IJ[2] + m[3] * l2**2) * thdd2
        + IJ[3] * thdd3
        + l1 * m[3] * l2 * (thdd2 * cos(th2 - th1) - thd2**2 * sin(th2 - th1))
        + l1
        * sum(
            m[i] * lC[i] * (thddt[i] * cos(tht[i] + eC[i] - th1) - thdt[i] ** 2 * sin(tht[i] + eC[i] - th1))
            for i in (2, 3)
        )
        + l2 * m[3] * lC[3] * (thdd3 * cos(th3 + eC[3] - th2) - thd3**2 * sin(th3 + eC[3] - th2))
    )
    return np.array([tau1, tau2, tau3])


def zatsiorsky_joint_space(s, alpha, alpha_d, alpha_dd):
    """Textbook joint-space equations of a two-link arm (COM on the link axes, no contacts), with
    joint angles α and the Coriolis term 2 α̇₁α̇₂ that the global-frame form avoids."""
    l1, r1, r2 = s["l"][1], s["lC"][1], s["lC"][2]
    m1, m2, I1, I2, g = s["m"][1], s["m"][2], s["IJ"][1], s["IJ"][2], s["g"]
    a1, a2 = alpha
    ad1, ad2 = alpha_d
    add1, add2 = alpha_dd
    h = m2 * l1 * r2
    tau1 = (
        (I1 + I2 + m2 * l1**2 + 2 * h * np.cos(a2)) * add1
        + (I2 + h * np.cos(a2)) * add2
        - h * np.sin(a2) * (2 * ad1 * ad2 + ad2**2)
        + (m1 * r1 + m2 * l1) * g * np.cos(a1)
        + m2 * r2 * g * np.cos(a1 + a2)
    )
    tau2 = I2 * (add1 + add2) + h * (np.cos(a2) * add1 + np.sin(a2) * ad1**2) + m2 * r2 * g * np.cos(a1 + a2)
    return np.array([tau1, tau2])


def _symbols(chain):
    p = params(chain)
    one = lambda x: np.concatenate([[np.nan], x])  # noqa: E731  1-based; the base entry is unused
    return {
        "l": one(p["lengths"]),
        "lC": one(p["com_distances"]),
        "eC": one(p["com_angles"]),
        "m": one(p["masses"]),
        "IJ": one(p["inertias"] + p["masses"] * p["com_distances"] ** 2),
        "g": float(p["gravity"]),
    }


_torques = jax.jit(jax.vmap(chain_torques, in_axes=(None, 0, 0, 0, None, 0)))


@pytest.mark.parametrize("n", [2, 3])
def test_appendix_a_non_slender_with_contacts(n):
    """Appendix A as printed (generic ε_C, one contact per link with its l_R, ε_R, γ_R, R) = eq. 23."""
    rng = np.random.default_rng(7 + n)
    chain = random_chain(rng, n)
    lR, eR, gR, Rmag = (
        rng.uniform(0.05, 0.5, n),
        rng.uniform(-1, 1, n),
        rng.uniform(-np.pi, np.pi, n),
        rng.uniform(0, 80, n),
    )
    contacts = ResistancePoints(chain, list(range(n)), np.stack([lR * np.cos(eR), lR * np.sin(eR)], -1))
    th, thd, thdd, _, _ = random_frames(rng, n, 0, 0, 4)
    angle = th + gR  # γ_R is measured from û_i: the world direction moves with the link
    forces = Rmag[None, :, None] * np.stack([np.cos(angle), np.sin(angle)], -1)
    tau = np.asarray(_torques(chain, th, thd, thdd, contacts, forces))
    s = _symbols(chain)
    printed = appendix_two_link if n == 2 else appendix_three_link
    R = {k: (lR[k - 1], eR[k - 1], gR[k - 1], Rmag[k - 1]) for k in range(1, n + 1)}
    for f in range(th.shape[0]):
        assert_close(tau[f], printed(s, th[f], thd[f], thdd[f], R), f"Appendix A n={n} frame {f}")


@pytest.mark.parametrize("n", [2, 3])
def test_appendix_a_slender_rods_joint_space(n):
    """The slender-rod special case (ε_C = ε_R = γ_R = 0, R = 0, θ_k = Σ_{i≤k} α_i): Appendix A = eq. 23
    and, for n = 2, Zatsiorsky's joint-space form in the joint angles α of ``chain.to_tree()``."""
    rng = np.random.default_rng(3 + n)
    chain = PlanarChain.slender_rods(rng.uniform(0.3, 0.9, n), rng.uniform(1.0, 8.0, n))
    np.testing.assert_allclose(chain.joint_inertias, chain.masses * chain.lengths**2 / 3, rtol=1e-14)
    alpha, alpha_d, alpha_dd = (rng.uniform(-2, 2, (4, n)) for _ in range(3))
    th, thd, thdd = (np.asarray(joint_to_link_angles(x)) for x in (alpha, alpha_d, alpha_dd))
    np.testing.assert_allclose(link_to_joint_angles(th), alpha, rtol=0, atol=1e-14)
    # zero contact forces on the contact layout of the test above: same compiled function
    contacts = ResistancePoints(chain, list(range(n)), np.full((n, 2), 0.1))
    tau = np.asarray(_torques(chain, th, thd, thdd, contacts, np.zeros((4, n, 2))))
    s = _symbols(chain)
    zero = {k: (0.0, 0.0, 0.0, 0.0) for k in range(1, n + 1)}
    printed = appendix_two_link if n == 2 else appendix_three_link
    for f in range(4):
        assert_close(tau[f], printed(s, th[f], thd[f], thdd[f], zero), f"slender Appendix A n={n}")
        if n == 2:
            assert_close(tau[f], zatsiorsky_joint_space(s, alpha[f], alpha_d[f], alpha_dd[f]), "Zatsiorsky")


# ---------------------------------------------------------------------------------------------------
# 3. vmap over frames and over chains; gradients; float32; a static property
# ---------------------------------------------------------------------------------------------------


def _small_case(seed=11, n=4, n_muscles=5, n_contacts=3):
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, n)
    return rng, chain, random_muscles(rng, n, n_muscles), random_contacts(rng, n, n_contacts)


def _literal_outputs(chain, muscles, contacts, th, thd, thdd, T, R):
    """eq. 9 reactions and eq. 23 torques of one frame, from the literal numpy transcriptions."""
    p = params(chain)
    n = chain.n
    link_R = np.zeros((n + 1, 2))
    for c, link in enumerate(contacts.links):
        link_R[link + 1] += R[c]
    phi = eq9_literal(p, th, thd, thdd, link_R, np_spanning_forces(p, muscles, th, T))
    return phi, eq23_literal(p, th, thd, thdd, polar_contacts(p, contacts, th, R, n))


def test_vmap_over_frames_and_chains():
    """jit(vmap) over 64 frames, and vmap over a batch of chains (parameters as a batched pytree),
    each against the literal equations frame by frame / chain by chain."""
    rng, chain, muscles, contacts = _small_case()
    th, thd, thdd, T, R = random_frames(rng, chain.n, muscles.count, contacts.count, 64)
    batched = jax.jit(
        jax.vmap(
            lambda a, b, c, t, r: (
                chain_reactions(chain, a, b, c, muscles, t, contacts, r),
                chain_torques(chain, a, b, c, contacts, r),
            )
        )
    )
    phi, tau = batched(th, thd, thdd, T, R)
    assert phi.shape == (64, chain.n, 2) and tau.shape == (64, chain.n)
    for f in (0, 17, 63):
        want_phi, want_tau = _literal_outputs(chain, muscles, contacts, th[f], thd[f], thdd[f], T[f], R[f])
        assert_close(phi[f], want_phi, "vmap over frames: reactions")
        assert_close(tau[f], want_tau, "vmap over frames: torques")

    chains = [random_chain(rng, chain.n) for _ in range(3)]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *chains)
    per_chain = jax.jit(jax.vmap(lambda ch: chain_torques(ch, th[0], thd[0], thdd[0], contacts, R[0])))(stacked)
    for j, ch in enumerate(chains):
        want = _literal_outputs(ch, muscles, contacts, th[0], thd[0], thdd[0], T[0], R[0])[1]
        assert_close(per_chain[j], want, "vmap over chains: torques")


def test_gradients_match_finite_differences():
    """jax.grad of scalar functions of the closed forms, with respect to the state, the chain
    parameters and the loads, against central differences (h = 1e-6)."""
    rng, chain, muscles, contacts = _small_case(seed=5, n=3, n_muscles=3, n_contacts=2)
    th, thd, thdd, T, R = (x[0] for x in random_frames(rng, chain.n, muscles.count, contacts.count, 1))
    wt, wp = rng.normal(size=chain.n), rng.normal(size=(chain.n, 2))

    def loss(x):
        ch = PlanarChain(chain.lengths, x["masses"], chain.com_distances, x["com_angles"], chain.inertias)
        tau = chain_torques(ch, x["theta"], x["theta_dot"], thdd, contacts, x["R"])
        phi = chain_reactions(ch, x["theta"], x["theta_dot"], thdd, muscles, x["T"], contacts, x["R"])
        return jnp.dot(wt, tau) + jnp.sum(wp * phi)

    x0 = {
        "masses": chain.masses,
        "com_angles": chain.com_angles,
        "theta": jnp.asarray(th),
        "theta_dot": jnp.asarray(thd),
        "T": jnp.asarray(T),
        "R": jnp.asarray(R),
    }
    value_and_grad = jax.jit(jax.value_and_grad(loss))  # one compile for both
    grad = value_and_grad(x0)[1]
    f = lambda x: value_and_grad(x)[0]  # noqa: E731
    h = 1e-6
    for key, value in x0.items():
        flat = np.asarray(value, float).ravel()
        fd = np.zeros_like(flat)
        for j in range(flat.size):
            plus, minus = flat.copy(), flat.copy()
            plus[j] += h
            minus[j] -= h
            fd[j] = (
                float(f({**x0, key: jnp.asarray(plus.reshape(np.shape(value)))}))
                - float(f({**x0, key: jnp.asarray(minus.reshape(np.shape(value)))}))
            ) / (2 * h)
        assert_close(np.asarray(grad[key]).ravel(), fd, f"d loss / d {key}", rtol=1e-7)


def test_float32_close_to_float64():
    rng, chain, muscles, contacts = _small_case(seed=9)
    th, thd, thdd, T, R = (x[0] for x in random_frames(rng, chain.n, muscles.count, contacts.count, 1))

    @jax.jit
    def both(chain, muscles, contacts, th, thd, thdd, T, R):
        return (
            chain_reactions(chain, th, thd, thdd, muscles, T, contacts, R),
            chain_torques(chain, th, thd, thdd, contacts, R),
        )

    args64 = (chain, muscles, contacts, th, thd, thdd, T, R)
    phi32, tau32 = both(*jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), args64))
    assert phi32.dtype == jnp.float32 and tau32.dtype == jnp.float32
    # against the float64 literal equations, evaluated on the float32-rounded inputs
    rounded = [np.asarray(np.asarray(x, np.float32), np.float64) for x in (th, thd, thdd, T, R)]
    chain_r = jax.tree_util.tree_map(lambda x: jnp.asarray(jnp.asarray(x, jnp.float32), jnp.float64), chain)
    phi64, tau64 = _literal_outputs(chain_r, muscles, contacts, *rounded)
    assert_close(phi32, phi64, "float32 phi", rtol=1e-5)
    assert_close(tau32, tau64, "float32 tau", rtol=1e-5)


def test_static_muscle_loads_only_the_joints_it_spans():
    """Biscarini 2021, §3: with θ̇ = θ̈ = 0, a muscle's force changes the reaction only at the joints it
    spans (by exactly its force on the distal link), and never the torques of eq. 23."""
    rng = np.random.default_rng(21)
    n = 5
    chain = random_chain(rng, n)
    muscles = LinearMuscles(chain, [1, BASE], [3, 2], rng.uniform(-0.2, 0.2, (2, 2)), rng.uniform(-0.2, 0.2, (2, 2)))
    th, zero = rng.uniform(-1, 1, n), np.zeros(n)
    f = jax.jit(jax.vmap(lambda T: chain_reactions(chain, th, zero, zero, muscles, T)))
    base, more = f(np.array([[0.0, 50.0], [400.0, 50.0]]))
    on_ins = np_muscle_pairs(params(chain), muscles, th, np.array([400.0, 0.0]))[0][5]  # on link 3
    spanned = np.array([False, False, True, True, False])  # links 1 → 3 span joints 2 and 3
    change = np.asarray(more - base)
    assert np.abs(change[~spanned]).max() < 1e-12
    assert_close(change[spanned], np.tile(on_ins, (2, 1)), "change at the spanned joints")


# ---------------------------------------------------------------------------------------------------
# 4. Bad input
# ---------------------------------------------------------------------------------------------------


def test_bad_models_raise_value_error():
    chain = PlanarChain.slender_rods([0.5, 0.4, 0.3], [2.0, 1.5, 1.0])
    pts = np.zeros((1, 2))
    with pytest.raises(ValueError, match="link 3 does not exist"):
        LinearMuscles(chain, [0], [3], pts, pts)
    with pytest.raises(ValueError, match="link -2 does not exist"):
        LinearMuscles(chain, [-2], [1], pts, pts)
    with pytest.raises(ValueError, match="both on link 1"):
        LinearMuscles(chain, [1], [1], pts, pts)
    with pytest.raises(ValueError, match="both on the base"):
        LinearMuscles(chain, [BASE], [BASE], pts, pts)
    with pytest.raises(ValueError, match="not an integer"):
        LinearMuscles(chain, [0.5], [1], pts, pts)
    with pytest.raises(ValueError, match="origin_points has shape"):
        LinearMuscles(chain, [0], [1], np.zeros((1, 3)), pts)
    with pytest.raises(ValueError, match="2 origin links but 1 insertion"):
        LinearMuscles(chain, [0, 1], [1], pts, pts)
    with pytest.raises(ValueError, match="link 5 does not exist"):
        ResistancePoints(chain, [5], pts)
    with pytest.raises(ValueError, match="base carries no contact"):
        ResistancePoints(chain, [BASE], pts)
    with pytest.raises(ValueError, match="ResistancePoints.points has shape"):
        ResistancePoints(chain, [0, 1], pts)
    with pytest.raises(ValueError, match="masses has shape"):
        PlanarChain([0.5, 0.4], [1.0], [0.2, 0.2], [0.0, 0.0], [0.1, 0.1])
    with pytest.raises(ValueError, match="masses must be positive"):
        PlanarChain([0.5, 0.4], [1.0, -1.0], [0.2, 0.2], [0.0, 0.0], [0.1, 0.1])
    with pytest.raises(ValueError, match="gravity has shape"):
        PlanarChain([0.5, 0.4], [1.0, 1.0], [0.2, 0.2], [0.0, 0.0], [0.1, 0.1], gravity=[0.0, -9.81])
    with pytest.raises(ValueError, match="lengths must be positive"):
        PlanarChain([0.5, 0.0], [1.0, 1.0], [0.2, 0.2], [0.0, 0.0], [0.1, 0.1])


def test_bad_calls_raise_value_error():
    chain = PlanarChain.slender_rods([0.5, 0.4, 0.3], [2.0, 1.5, 1.0])
    muscles = LinearMuscles(chain, [BASE, 0], [2, 1], np.full((2, 2), 0.1), np.full((2, 2), 0.1))
    contacts = ResistancePoints(chain, [2], np.array([[0.3, 0.0]]))
    z = np.zeros(3)
    with pytest.raises(ValueError, match=r"theta has shape \(4,\), expected \(3,\)"):
        chain_torques(chain, np.zeros(4), z, z)
    with pytest.raises(ValueError, match=r"theta_ddot has shape"):
        chain_torques(chain, z, z, np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"tensions has shape \(3,\), expected \(2,\)"):
        chain_reactions(chain, z, z, z, muscles, np.ones(3))
    with pytest.raises(ValueError, match="muscles given without tensions"):
        chain_reactions(chain, z, z, z, muscles)
    with pytest.raises(ValueError, match=r"contact_forces has shape \(1, 3\), expected \(1, 2\)"):
        chain_torques(chain, z, z, z, contacts, np.ones((1, 3)))
    with pytest.raises(ValueError, match="contact_forces given without contacts"):
        chain_torques(chain, z, z, z, None, np.ones((1, 2)))
    with pytest.raises(ValueError, match="built for 2 links, the chain has 3"):
        chain_reactions(chain, z, z, z, LinearMuscles(2, [0], [1], np.zeros((1, 2)), np.ones((1, 2))), np.ones(1))
    with pytest.raises(ValueError, match="form must be one of"):
        chain_torques(chain, z, z, z, form="sideways")
    with pytest.raises(ValueError, match="needs base_load"):
        chain_torques(chain, z, z, z, form="proximal")
    with pytest.raises(ValueError, match="used by form='proximal' only"):
        chain_reactions(chain, z, z, z, base_load=np.zeros(2))


def test_zero_length_muscle_raises_under_jit():
    """Attachment points that coincide leave the muscle without a line of action: a runtime error,
    also inside jit(vmap), never a silent zero or NaN."""
    chain = PlanarChain.slender_rods([0.5, 0.4], [2.0, 1.5])
    # origin on the base at J_2 = (0.5, 0) when θ_1 = 0; insertion at J_2 on link 1 (x = 0 on link 1)
    muscles = LinearMuscles(chain, [BASE], [1], np.array([[0.5, 0.0]]), np.array([[0.0, 0.0]]))
    z = np.zeros((2, 2))
    f = jax.jit(jax.vmap(lambda th: chain_reactions(chain, th, z[0], z[0], muscles, np.ones(1))))
    with pytest.raises((eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError), match="zero length"):
        jax.block_until_ready(f(z))
    assert np.all(np.isfinite(f(np.array([[0.3, 0.1], [0.2, 0.0]]))))
