"""Hill-type muscle curves and the `HillMuscle` model.

Pure, smooth (at least C¹), jit/vmap/grad-able curves, each with a normalised input and a
normalised output, and an Equinox module that holds many muscles as array leaves.

Sign convention of the force–velocity curves: **shortening velocity is positive** (Hill 1938,
Ivancevic 2009: ``F = (F⁰b − a v)/(v + b)``, ``v ≥ 0`` while the muscle shortens, ``v < 0`` while it is
stretched). Musculotendon and fiber *lengths* and their time derivatives (``musculotendon_velocity``)
are geometric, i.e. lengthening positive; `HillMuscle` converts.

References
----------
- A. V. Hill (1938), The heat of shortening and the dynamic constants of muscle,
  Proc. R. Soc. B 126, 136–195 (Ivancevic 2009, ref. [13]).
- B. Katz (1939), The relation between force and speed in muscular contraction, J. Physiol. 96,
  45–64 (lengthening force saturates near 1.5–1.8 F⁰).
- R. FitzHugh (1977), A model of optimal voluntary muscular control, J. Math. Biol. 4, 203–236
  (hyperbolic eccentric branch with a plateau).
- D. G. Thelen (2003), Adjustment of muscle mechanics model parameters to simulate dynamic
  contractions in older adults, J. Biomech. Eng. 125, 70–77 (eccentric plateau ``f_len = 1.8``).
- F. De Groote, A. L. Kinney, A. V. Rao, B. J. Fregly (2016), Evaluation of direct collocation
  optimal control problem formulations for solving the muscle redundancy problem,
  Ann. Biomed. Eng. 44, 2922–2936, supplementary eqs. S1–S4; constants as in OpenSim's
  ``DeGrooteFregly2016Muscle`` (full-precision values from simtk.org/projects/optcntrlmuscle).
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio._validate import check_choice, check_precision, check_values, concrete
from jaxbio.muscles._inputs import muscle_inputs, poisoned
from jaxbio.spatial import safe_sqrt

__all__ = [
    "hill_force_velocity",
    "hill_force_velocity_normalized",
    "active_force_length",
    "passive_force_length",
    "tendon_force_length",
    "degroote_force_velocity",
    "HillMuscle",
]


# ---- helpers ---------------------------------------------------------------------------------


def _check(owner: str, name: str, x, **bounds) -> None:
    """`jaxbio._validate.check_values` naming ``owner: name``."""
    check_values(x, f"{owner}: {name}", **bounds)


# ---- Hill force–velocity ---------------------------------------------------------------------


def hill_force_velocity_normalized(
    v: Float[ArrayLike, ...],
    curvature: Float[ArrayLike, ...] = 0.25,
    eccentric_plateau: Float[ArrayLike, ...] = 1.8,
    smoothing: float = 0.05,
) -> Float[Array, ...]:
    """Normalised Hill force–velocity curve ``F/F⁰`` as a function of ``ṽ = v / v_max``.

    Arguments (broadcast together):

    - ``v``: ``(...)`` dimensionless, shortening velocity divided by the maximal shortening
      velocity ``v_max = F⁰b/a`` (**shortening positive**, lengthening negative).
    - ``curvature``: ``k = a/F⁰`` (dimensionless, > 0; ≈ 0.25 for human muscle, Hill 1938).
    - ``eccentric_plateau``: ``f_ecc > 1``, the force reached under fast lengthening
      (Katz 1939: 1.5–1.8; Thelen 2003: 1.8).
    - ``smoothing``: ``δ ∈ (0, 0.4]``, width (in units of ``v_max``) of the smooth clamp below
      ``v_max``; static Python float.

    Returns ``(...)`` dimensionless ``F/F⁰``. Branches:

    - Concentric, ``0 ≤ ṽ ≤ 1 − δ``: Hill's hyperbola (Ivancevic 2009) ``f = (1 − ṽ)/(1 + ṽ/k)``,
      i.e. ``F = (F⁰b − a v)/(v + b)`` with ``v = ṽ v_max``. ``f(0) = 1``, ``f'(0) = −(1 + 1/k)``.
    - Smooth clamp, ``1 − δ < ṽ ≤ 1``: the cubic Hermite interpolant from the hyperbola's value
      and slope at ``1 − δ`` to ``f = 0, f' = 0`` at ``ṽ = 1``. It is monotone for ``δ ≤ 0.4``
      (Fritsch–Carlson; the hyperbola is convex), so ``f ≥ 0`` and ``f(1) = 0`` exactly.
    - Beyond ``v_max`` (``ṽ > 1``): ``f = 0`` (an active fiber cannot push), joined C¹.
    - Eccentric, ``ṽ < 0`` (FitzHugh 1977 style hyperbola with a plateau):
      ``f = 1 + (f_ecc − 1) u/(u + c)``, ``u = −ṽ``, with ``c = (f_ecc − 1) k/(k + 1)`` chosen so the
      slope at ``ṽ = 0`` equals the concentric one (C¹ there; Katz's steeper eccentric slope is
      traded for smoothness). ``f → f_ecc`` as ``ṽ → −∞``.

    The curve is C¹ everywhere, non-increasing in ``ṽ``, bounded in ``[0, f_ecc]``, and its
    gradient is finite for every finite ``ṽ`` (each branch is evaluated on a clipped argument,
    the double-``where`` trick).
    """
    if not (0.0 < float(smoothing) <= 0.4):
        raise ValueError(f"hill_force_velocity_normalized: smoothing must be in (0, 0.4], got {smoothing}")
    v = jnp.asarray(v)
    k = jnp.asarray(curvature, dtype=jnp.result_type(v, float))
    f_ecc = jnp.asarray(eccentric_plateau, dtype=k.dtype)
    v, k, f_ecc = jnp.broadcast_arrays(v.astype(k.dtype), k, f_ecc)
    return _hill_fv(float(smoothing), v, k, f_ecc)


def _hill_fv_parts(delta: float, v, k, f_ecc, partials=False):
    """The curve ``f`` and, with ``partials`` (three bools: which of ``(∂f/∂ṽ, ∂f/∂k, ∂f/∂f_ecc)``
    are wanted, or False), those partial derivatives in closed form (same shapes, None for the
    others; the formulas are in the comments)."""
    x0 = 1.0 - delta
    # Written as one division N/D, numerator and denominator chosen per branch: this curve sits
    # inside every muscle drive's vector field, where its cost counts (each division and its
    # tangents are recomputed in every consumer fusion under jacfwd; see benchmarks/README.md,
    # "The sprinter on the library's Hamiltonian stack"). Each branch is evaluated on its own
    # domain (`where`, not `clip`: clip halves the gradient at its bounds, e.g. at ṽ = 0), so the
    # unused branches keep finite values and gradients.
    ecc = v < 0.0
    con = v <= x0
    # concentric on [0, 1 − δ]: f = (1 − x)/(1 + x/k) = k (1 − x)/(k + x)
    x_con = jnp.where(ecc, 0.0, jnp.where(con, v, x0))
    # smooth clamp on [1 − δ, 1] (s ∈ [0, 1]): the Hermite cubic from the hyperbola's value
    # y0 = k (1 − x0)/(k + x0) and slope per unit s m0 = −(k + 1) δ y0/(k + x0) at 1 − δ to (0, 0)
    # at ṽ = 1: y0 (1 − s)² (1 + 2s − s (k + 1)/(k + x0))
    #     = k (1 − x0) (1 − s)² B / K²,  K = k + x0,  B = (1 + 2s) K − s (k + 1) = K + s (k + 2x0 − 1)
    s = jnp.where(con, 0.0, jnp.where(v > 1.0, 1.0, (v - x0) * (1.0 / delta)))
    kx0 = k + x0
    one_s = 1.0 - s
    b_clamp = kx0 + s * (k + (2.0 * x0 - 1.0))
    n_clamp = k * delta * one_s * one_s * b_clamp
    # eccentric: 1 + (f_ecc − 1) u/(u + c), c = (f_ecc − 1) k/(k + 1) (slope continuous at ṽ = 0);
    # with w = u (k + 1) and c' = (f_ecc − 1) k: (f_ecc w + c')/(w + c')
    g = f_ecc - 1.0
    w = jnp.where(ecc, -v, 0.0) * (k + 1.0)
    c = g * k
    den = jnp.where(ecc, w + c, jnp.where(con, k + x_con, kx0 * kx0))
    num = jnp.where(ecc, f_ecc * w + c, jnp.where(con, k * (1.0 - x_con), n_clamp))
    inv = 1.0 / den
    f = num * inv
    if not partials:
        return f
    want_v, want_k, want_f = partials
    d_v = d_k = d_f = None
    # the branches' derivatives share the denominator: (w + c')², (k + x)², and K² for the clamp,
    # where den is already K²
    inv2 = jnp.where(con, inv * inv, inv)
    if want_v:
        # ∂f/∂ṽ: concentric −k (k + 1)/(k + x)²; eccentric −(k + 1) g c'/(w + c')²;
        # clamp (1/δ) k (1 − x0) (1 − s) [(1 − s)(k + 2x0 − 1) − 2B]/K² (zero beyond ṽ = 1, s = 1)
        d_v = (
            jnp.where(
                ecc,
                -(k + 1.0) * g * c,
                jnp.where(con, -k * (k + 1.0), k * one_s * (one_s * (k + (2.0 * x0 - 1.0)) - 2.0 * b_clamp)),
            )
            * inv2
        )
    if want_k:
        # ∂f/∂k: concentric x (1 − x)/(k + x)²; eccentric −g² u/(w + c')²;
        # clamp δ (1 − s)² [B + k (1 + s) − 2kB/K]/K²
        u = jnp.where(ecc, -v, 0.0)
        d_k = (
            jnp.where(
                ecc,
                -g * g * u,
                jnp.where(
                    con,
                    x_con * (1.0 - x_con),
                    delta * one_s * one_s * (b_clamp + k * (1.0 + s) - 2.0 * k * b_clamp * kx0 * inv),
                ),
            )
            * inv2
        )
    if want_f:
        # ∂f/∂f_ecc: eccentric w²/(w + c')², zero elsewhere
        wi = w * inv
        d_f = jnp.where(ecc, wi * wi, 0.0)
    return f, (d_v, d_k, d_f)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _hill_fv(delta: float, v, k, f_ecc):
    """`hill_force_velocity_normalized` on broadcast arrays, with a closed-form JVP.

    The closed form matters under ``jacfwd``: each tangent costs three multiply-adds with partials
    computed once, where autodiff through the branches carries every branch's tangent. A tangent
    that is symbolically zero (a constant curvature or eccentric plateau, as in most drives) costs
    nothing: its partial is not computed."""
    return _hill_fv_parts(delta, v, k, f_ecc, partials=False)


def _hill_fv_jvp(delta, primals, tangents):
    nonzero = tuple(not isinstance(t, jax.custom_derivatives.SymbolicZero) for t in tangents)
    f, partials = _hill_fv_parts(delta, *primals, partials=nonzero)
    terms = [d * t for d, t, nz in zip(partials, tangents, nonzero) if nz]
    tangent = sum(terms[1:], terms[0]) if terms else jnp.zeros_like(f)
    return f, tangent


_hill_fv.defjvp(_hill_fv_jvp, symbolic_zeros=True)


def hill_force_velocity(
    v: Float[ArrayLike, ...],
    f0: Float[ArrayLike, ...],
    a: Float[ArrayLike, ...],
    b: Float[ArrayLike, ...],
    eccentric_plateau: Float[ArrayLike, ...] = 1.8,
    smoothing: float = 0.05,
) -> Float[Array, ...]:
    """Hill's force–velocity relation ``F = (F⁰b − a v)/(v + b)`` (Hill 1938; Ivancevic 2009), N.

    - ``v``: ``(...)`` m/s (or rad/s, any unit consistent with ``b``), **shortening velocity,
      positive while the muscle shortens**, negative while it is stretched.
    - ``f0``: ``(...)`` N, maximal isometric force ``F⁰`` (force at ``v = 0``).
    - ``a``: ``(...)`` N, Hill's force constant (heat of shortening coefficient), > 0.
    - ``b``: ``(...)`` m/s, Hill's velocity constant, > 0.
    - ``eccentric_plateau``, ``smoothing``: see `hill_force_velocity_normalized`.

    Returns ``(...)`` N. Exactly Hill's hyperbola for ``0 ≤ v ≤ (1 − δ) v_max`` with
    ``v_max = F⁰b/a`` (``F(0) = F⁰``, ``F(v_max) = 0``); smoothly clamped to 0 at and beyond
    ``v_max``; a C¹ eccentric branch saturating at ``eccentric_plateau · F⁰`` for ``v < 0``.
    This is ``F⁰ · hill_force_velocity_normalized(v/v_max, a/F⁰, ...)``.
    """
    f0 = jnp.asarray(f0)
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    v_max = f0 * b / a
    return f0 * hill_force_velocity_normalized(v / v_max, a / f0, eccentric_plateau, smoothing)


# ---- De Groote et al. 2016 curves -------------------------------------------------------------

# Active force–length: sum of three Gaussian-like terms (De Groote 2016 eq. S2), coefficients
# (b1i, b2i, b3i, b4i) as in OpenSim DeGrooteFregly2016Muscle (b11 adjusted so that f(1) = 1).
_ACTIVE_FL = np.array(
    [
        [0.8150671134243542, 1.055033428970575, 0.162384573599574, 0.063303448465465],
        [0.433004984392647, 0.716775413397760, -0.029947116970696, 0.200356847296188],
        [0.1, 1.0, 0.5 * math.sqrt(0.5), 0.0],
    ]
)
# Force–velocity (eq. S4), lengthening positive: d1 asinh(d2 ṽ + d3) + d4.
_D1, _D2, _D3, _D4 = -0.3211346127989808, -8.149, -0.374, 0.8825327733249912
# Tendon (eq. S1): c1 exp(kT (l̃ − c2)) − c3.
_C1, _C2, _C3 = 0.200, 0.995, 0.250
_KPE = 4.0


def active_force_length(normalized_fiber_length: Float[ArrayLike, ...]) -> Float[Array, ...]:
    """Active force–length multiplier ``f_L(l̃)`` (De Groote et al. 2016, eq. S2).

    ``f_L(l̃) = Σ_{i=1}^{3} b1i exp(−½ (l̃ − b2i)² / (b3i + b4i l̃)²)``, constants as in OpenSim's
    ``DeGrooteFregly2016Muscle`` (``b11 = 0.81507…, b21 = 1.05503…, b31 = 0.16238…,
    b41 = 0.06330…; b12 = 0.43300…, b22 = 0.71678…, b32 = −0.02995…, b42 = 0.20036…;
    b13 = 0.1, b23 = 1, b33 = ½√½, b43 = 0``).

    - ``normalized_fiber_length``: ``(...)`` fiber length / optimal fiber length.
    - returns ``(...)`` dimensionless; ``f_L(1) = 1`` (to 1e-12; the peak, ≈ 1.001, lies at
      ``l̃ ≈ 1.013``), ``f_L → 0`` far from 1 (``f_L(0.4) ≈ 0.026``, ``f_L(1.8) ≈ 0.031``).
    """
    x = jnp.asarray(normalized_fiber_length)
    c = jnp.asarray(_ACTIVE_FL, dtype=jnp.result_type(x, float))
    b1, b2, b3, b4 = (c[:, i] for i in range(4))
    xe = x[..., None]
    return jnp.sum(b1 * jnp.exp(-0.5 * (xe - b2) ** 2 / (b3 + b4 * xe) ** 2), axis=-1)


def passive_force_length(
    normalized_fiber_length: Float[ArrayLike, ...],
    strain_at_one: Float[ArrayLike, ...] = 0.6,
    min_length: Float[ArrayLike, ...] = 1.0,
) -> Float[Array, ...]:
    """Passive fiber force–length multiplier ``f_PE(l̃)`` (De Groote et al. 2016, eq. S3).

    ``f_PE = (exp(k_PE (l̃ − 1)/e₀) − exp(k_PE (l̃_min − 1)/e₀)) / (exp(k_PE) − exp(k_PE (l̃_min − 1)/e₀))``
    with ``k_PE = 4`` and ``e₀ = strain_at_one`` (0.6). With ``min_length = 1`` (default) this is
    the paper's ``(exp(k_PE(l̃ − 1)/e₀) − 1)/(exp(k_PE) − 1)``: zero at the slack length ``l̃ = 1``,
    ``f_PE(1 + e₀) = 1``, and slightly negative (≥ −1/(e⁴ − 1) ≈ −0.019) below slack. OpenSim's
    ``DeGrooteFregly2016Muscle`` uses ``min_length = 0.2`` (zero at ``l̃ = 0.2`` instead).

    - ``normalized_fiber_length``: ``(...)`` fiber length / optimal fiber length.
    - ``strain_at_one``: ``e₀`` (> 0), passive strain at which ``f_PE = 1``.
    - ``min_length``: ``l̃_min``, the normalised length at which ``f_PE = 0``.
    - returns ``(...)`` dimensionless.
    """
    x = jnp.asarray(normalized_fiber_length)
    e0 = jnp.asarray(strain_at_one, dtype=jnp.result_type(x, float))
    offset = jnp.exp(_KPE * (jnp.asarray(min_length, e0.dtype) - 1.0) / e0)
    return (jnp.exp(_KPE * (x - 1.0) / e0) - offset) / (jnp.exp(_KPE) - offset)


def tendon_force_length(
    normalized_tendon_length: Float[ArrayLike, ...],
    strain_at_one: Float[ArrayLike, ...] = 0.049,
) -> Float[Array, ...]:
    """Tendon force–length multiplier ``f_T(l̃_T)`` (De Groote et al. 2016, eq. S1).

    ``f_T = c1 exp(k_T (l̃_T − c2)) − c3`` with ``c1 = 0.2, c2 = 0.995, c3 = 0.25`` and, as in
    OpenSim, ``k_T = ln((1 + c3)/c1) / (1 + ε₀ − c2)`` so that ``f_T(1 + ε₀) = 1``
    (``ε₀ = 0.049`` gives ``k_T ≈ 33.94``; the paper rounds to 35).
    ``f_T = 0`` at ``l̃_T = c2 + ln(c3/c1)/k_T ≈ 1.0016`` and ``f_T → −0.25`` for a slack tendon
    (the curve is smooth; it is not clipped).

    - ``normalized_tendon_length``: ``(...)`` tendon length / tendon slack length.
    - ``strain_at_one``: ``ε₀`` (> 0), tendon strain at which ``f_T = 1``.
    - returns ``(...)`` dimensionless.
    """
    x = jnp.asarray(normalized_tendon_length)
    eps = jnp.asarray(strain_at_one, dtype=jnp.result_type(x, float))
    k_t = math.log((1.0 + _C3) / _C1) / (1.0 + eps - _C2)
    return _C1 * jnp.exp(k_t * (x - _C2)) - _C3


def degroote_force_velocity(normalized_lengthening_velocity: Float[ArrayLike, ...]) -> Float[Array, ...]:
    """Force–velocity multiplier of De Groote et al. 2016 (eq. S4), for comparison.

    ``f_V(ṽ) = d1 ln(d2 ṽ + d3 + √((d2 ṽ + d3)² + 1)) + d4`` with OpenSim's constants
    ``d1 = −0.32113…, d2 = −8.149, d3 = −0.374, d4 = 0.88253…``.

    - ``normalized_lengthening_velocity``: ``(...)`` fiber velocity / (v_max · l_opt),
      **lengthening positive** (the opposite sign of `hill_force_velocity_normalized`),
      meaningful on ``[−1, 1]``.
    - returns ``(...)`` dimensionless; ``f_V(0) = 1``, ``f_V(−1) ≈ 0``; grows like a logarithm
      (no plateau) under fast lengthening.
    """
    x = jnp.asarray(normalized_lengthening_velocity)
    return _D1 * jnp.arcsinh(_D2 * x + _D3) + _D4


# ---- the muscle model ------------------------------------------------------------------------

TENDON_MODELS = ("rigid", "compliant")


class HillMuscle(eqx.Module):
    """A set of ``m`` Hill-type musculotendon units (De Groote et al. 2016 curves, Hill 1938
    force–velocity), held as array leaves so one module describes many muscles and `jax.vmap`
    over subjects / `jax.grad` with respect to any parameter work.

    Fields (all ``(m,)``, broadcast together at construction):

    - ``max_isometric_force``: N, ``F⁰`` (≥ 0).
    - ``optimal_fiber_length``: m, ``l_opt`` (> 0).
    - ``tendon_slack_length``: m, ``l_ts`` (> 0).
    - ``pennation_angle``: rad, pennation at optimal fiber length ``α₀ ∈ [0, π/2)``.
    - ``max_contraction_velocity``: optimal fiber lengths per second, ``v_max`` (> 0; ≈ 10).
    - ``curvature``: Hill's ``a/F⁰`` (> 0; default 0.25).
    - ``eccentric_plateau``: lengthening force limit in ``F⁰`` (> 1; default 1.8).
    - ``tendon_strain_at_one``: ``ε₀`` of `tendon_force_length` (> 0; default 0.049).
    - ``passive_strain_at_one``: ``e₀`` of `passive_force_length` (> 0; default 0.6).
    - ``tendon``: static, ``"rigid"`` (default) or ``"compliant"``.

    Fiber force (along the fiber), normalised by ``F⁰``:
    ``f_M = a · f_L(l̃_M) · f_V(ṽ_M) + f_PE(l̃_M)`` with ``f_V`` = `hill_force_velocity_normalized`
    of the shortening velocity ``ṽ_M = −l̇_M / (v_max l_opt)``. The force along the tendon is
    ``F⁰ f_M cos α``. Pennation keeps the fiber's thickness constant:
    ``l_M sin α = l_opt sin α₀ = h``.

    Example::

        >>> import jax.numpy as jnp
        >>> from jaxbio.muscles.curves import HillMuscle
        >>> m = HillMuscle(max_isometric_force=[1000.0, 600.0], optimal_fiber_length=[0.10, 0.05],
        ...                tendon_slack_length=[0.20, 0.30], pennation_angle=[0.0, 0.2],
        ...                tendon="compliant")
        >>> m.force(jnp.array([1.0, 0.5]), jnp.array([0.30, 0.35])).shape   # N along the tendon
        (2,)
    """

    max_isometric_force: Float[Array, " m"]
    optimal_fiber_length: Float[Array, " m"]
    tendon_slack_length: Float[Array, " m"]
    pennation_angle: Float[Array, " m"]
    max_contraction_velocity: Float[Array, " m"]
    curvature: Float[Array, " m"]
    eccentric_plateau: Float[Array, " m"]
    tendon_strain_at_one: Float[Array, " m"]
    passive_strain_at_one: Float[Array, " m"]
    tendon: str = eqx.field(static=True)

    def __init__(
        self,
        max_isometric_force,
        optimal_fiber_length,
        tendon_slack_length,
        pennation_angle=0.0,
        max_contraction_velocity=10.0,
        curvature=0.25,
        eccentric_plateau=1.8,
        tendon_strain_at_one=0.049,
        passive_strain_at_one=0.6,
        tendon: str = "rigid",
    ):
        check_choice(tendon, TENDON_MODELS, "HillMuscle: tendon")
        self.tendon = tendon
        names = (
            "max_isometric_force",
            "optimal_fiber_length",
            "tendon_slack_length",
            "pennation_angle",
            "max_contraction_velocity",
            "curvature",
            "eccentric_plateau",
            "tendon_strain_at_one",
            "passive_strain_at_one",
        )
        values = (
            max_isometric_force,
            optimal_fiber_length,
            tendon_slack_length,
            pennation_angle,
            max_contraction_velocity,
            curvature,
            eccentric_plateau,
            tendon_strain_at_one,
            passive_strain_at_one,
        )
        arrays = [jnp.asarray(v) for v in values]
        dtype = jnp.result_type(*arrays, float)
        for name, arr in zip(names, arrays):
            check_precision(arr.dtype, f"HillMuscle: {name}")
            if arr.ndim > 1:
                raise ValueError(f"HillMuscle: {name} must be a scalar or a vector (m,), got shape {arr.shape}")
        try:
            shape = jnp.broadcast_shapes(*(a.shape for a in arrays), (1,))
        except ValueError:
            shapes = {n: a.shape for n, a in zip(names, arrays)}
            raise ValueError(f"HillMuscle: parameter shapes do not broadcast to one (m,): {shapes}") from None
        for name, arr in zip(names, arrays):
            setattr(self, name, jnp.broadcast_to(arr.astype(dtype), shape))

        own = "HillMuscle"
        _check(own, "max_isometric_force", self.max_isometric_force, nonnegative=True)
        _check(own, "optimal_fiber_length", self.optimal_fiber_length, positive=True)
        _check(own, "tendon_slack_length", self.tendon_slack_length, positive=True)
        _check(own, "pennation_angle", self.pennation_angle, nonnegative=True, below=math.pi / 2)
        _check(own, "max_contraction_velocity", self.max_contraction_velocity, positive=True)
        _check(own, "curvature", self.curvature, positive=True)
        _check(own, "tendon_strain_at_one", self.tendon_strain_at_one, positive=True)
        _check(own, "passive_strain_at_one", self.passive_strain_at_one, positive=True)
        ecc = concrete(self.eccentric_plateau)
        if ecc is not None and not np.all(np.isfinite(ecc) & (ecc > 1)):
            raise ValueError(f"HillMuscle: eccentric_plateau must be finite and > 1, got {ecc.tolist()}")

    @property
    def size(self) -> int:
        """Number of muscles ``m``."""
        return self.max_isometric_force.shape[0]

    # -- building blocks (normalised) --

    def _thickness(self):
        """``h = l_opt sin α₀`` (m), constant fiber 'height' of the pennation model."""
        return self.optimal_fiber_length * jnp.sin(self.pennation_angle)

    def _fiber_geometry(self, along):
        """Fiber length and ``cos α`` from the fiber's projection ``along`` the tendon (m)."""
        h = self._thickness()
        # a fiber cannot have zero projected length; keeps sqrt/divide differentiable
        along = jnp.maximum(along, 1e-6 * self.optimal_fiber_length)
        fiber = jnp.sqrt(along**2 + h**2)
        return fiber, along / fiber

    def fiber_force_normalized(self, activation, normalized_fiber_length, normalized_shortening_velocity):
        """``f_M = a f_L(l̃) f_V(ṽ) + f_PE(l̃)`` ``(m,)`` in units of ``F⁰``, along the fiber.

        ``activation`` ``(m,)`` in [0, 1]; ``normalized_fiber_length`` ``(m,)`` = ``l_M/l_opt``;
        ``normalized_shortening_velocity`` ``(m,)`` = ``−l̇_M/(v_max l_opt)``.
        """
        fl = active_force_length(normalized_fiber_length)
        fv = hill_force_velocity_normalized(normalized_shortening_velocity, self.curvature, self.eccentric_plateau)
        fpe = passive_force_length(normalized_fiber_length, self.passive_strain_at_one)
        return activation * fl * fv + fpe

    def _residual_along(self, along, activation, mt_length, mt_velocity):
        """Normalised equilibrium residual ``f_T(l̃_T) − f_M cos α`` ``(m,)`` as a function of
        the fiber's projection on the tendon line ``along = l_M cos α`` (m)."""
        h = self._thickness()
        fiber = jnp.sqrt(along**2 + h**2)
        cos_a = along / fiber
        v_fiber = mt_velocity * cos_a
        f_m = self.fiber_force_normalized(
            activation,
            fiber / self.optimal_fiber_length,
            -v_fiber / (self.max_contraction_velocity * self.optimal_fiber_length),
        )
        f_t = tendon_force_length((mt_length - along) / self.tendon_slack_length, self.tendon_strain_at_one)
        return f_t - f_m * cos_a

    def fiber_length(
        self,
        activation: Float[ArrayLike, " m"],
        musculotendon_length: Float[ArrayLike, " m"],
        musculotendon_velocity: Float[ArrayLike, " m"] = 0.0,
    ) -> Float[Array, " m"]:
        """Fiber length ``l_M`` ``(m,)`` m.

        - Rigid tendon: the tendon stays at slack length, ``l_M cos α = l_MT − l_ts`` and
          ``l_M = √((l_MT − l_ts)² + h²)``.
        - Compliant tendon: the root of the force equilibrium
          ``F⁰ f_T((l_MT − l_M cos α)/l_ts) = F⁰ f_M(l_M, l̇_M) cos α``. The unknown is the
          fiber's projection ``x = l_M cos α`` on the tendon line, found per muscle (elementwise,
          no ``m × m`` Jacobian) by a bracketed, safeguarded Newton iteration ("rtsafe": a Newton
          step when it stays inside the sign-change bracket ``[10⁻³ l_opt, l_MT − 0.9 l_ts]``,
          bisection otherwise) in a ``lax.while_loop`` until the step is below ``8 eps · l_opt``.
          The loop is not differentiated: the result is returned as
          ``x − (r(x, θ) − stop_gradient(r))/stop_gradient(∂r/∂x)``, whose value is ``x`` and
          whose derivative is exactly the implicit function theorem's
          ``dx/dθ = −(∂r/∂x)⁻¹ ∂r/∂θ`` (first derivatives).
          Choice for the fiber velocity: the tendon length is taken as momentarily constant,
          ``l̇_M = l̇_MT cos α`` — exact in the static case ``l̇_MT = 0`` (OpenSim's
          ``computeInitialFiberEquilibrium`` makes the same isometric assumption); for a
          moving muscle with a stiff tendon it is the usual quasi-static approximation.
          If ``l_MT`` is so short that even a vanishing fiber leaves the tendon below its
          zero-force length there is no root; the shortest fiber of the bracket is returned
          (the tendon is slack: `force` gives 0 N there).

        Arguments: ``activation`` ``(m,)`` in [0, 1]; ``musculotendon_length`` ``(m,)`` m;
        ``musculotendon_velocity`` ``(m,)`` m/s, lengthening positive.
        """
        activation, mt_length, mt_velocity = self._inputs(activation, musculotendon_length, musculotendon_velocity)
        if self.tendon == "rigid":
            return self._fiber_geometry(mt_length - self.tendon_slack_length)[0]
        along = poisoned(
            _equilibrium_along(self, activation, mt_length, mt_velocity), activation, mt_length, mt_velocity
        )
        return jnp.sqrt(along**2 + self._thickness() ** 2)

    def _inputs(self, activation, mt_length, mt_velocity):
        """Checked and broadcast (`jaxbio.muscles._inputs.muscle_inputs`): activation in [0, 1],
        length ≥ 0, all finite; ``ValueError`` when concrete, NaN under jit."""
        return muscle_inputs("HillMuscle", self.max_isometric_force, mt_length, mt_velocity, activation)

    def force(
        self,
        activation: Float[ArrayLike, " m"],
        musculotendon_length: Float[ArrayLike, " m"],
        musculotendon_velocity: Float[ArrayLike, " m"] = 0.0,
    ) -> Float[Array, " m"]:
        """Musculotendon force along the tendon ``(m,)`` N (tension positive).

        - ``activation``: ``(m,)`` in [0, 1].
        - ``musculotendon_length``: ``(m,)`` m, origin-to-insertion path length ``l_MT``.
        - ``musculotendon_velocity``: ``(m,)`` m/s, ``l̇_MT`` (lengthening positive).

        Rigid tendon: ``F = F⁰ f_M(l_M, l̇_M) cos α`` with ``l̇_M = l̇_MT cos α`` (exact for a
        rigid tendon and constant-thickness pennation). Compliant tendon: ``F = F⁰ f_T(l̃_T)`` at
        the equilibrium fiber length of `fiber_length` (equal to the fiber side to solver
        tolerance).

        A slack tendon does not push: as OpenSim's tendon force is 0 below the tendon slack
        length, the force is 0 N (derivative 0) where the tendon is slack — rigid tendon:
        ``l_MT ≤ l_ts`` (was a pushing fiber, e.g. −16 N for ``F⁰`` = 900 N); compliant tendon:
        where De Groote's tendon curve is negative (``l̃_T`` below ≈ 1.0016, down to −0.25 F⁰
        unclipped). One dip is kept: with a rigid tendon at ``l_MT ≥ l_ts``, the passive fiber
        curve of De Groote et al. is slightly negative for fibers shorter than optimal
        (≥ −0.019 F⁰ cos α, `passive_force_length`), the published curve, on which static
        optimisation's ``F = a F̂ + P`` (`jaxbio.estimation.muscle_force_components`) is built.

        Inputs are checked (`jaxbio.muscles._inputs`): ``activation`` in [0, 1],
        ``musculotendon_length`` ≥ 0, all finite. Concrete values out of range raise
        ``ValueError`` naming the argument and the first bad entry; traced ones (jit, vmap, grad)
        give NaN for that muscle.
        """
        activation, mt_length, mt_velocity = self._inputs(activation, musculotendon_length, musculotendon_velocity)
        force = self._curves_force(activation, mt_length, mt_velocity)
        slack = (mt_length <= self.tendon_slack_length) if self.tendon == "rigid" else (force < 0)
        return jnp.where(slack, jnp.zeros_like(force), force)

    def _signed_force(self, activation, musculotendon_length, musculotendon_velocity=0.0):
        """`force` without the slack tendon's 0 (the curves' own sign; inputs checked): for the
        decomposition ``F = a F̂ + P`` of static optimisation, which needs the raw curves."""
        return self._curves_force(*self._inputs(activation, musculotendon_length, musculotendon_velocity))

    def _curves_force(self, activation, mt_length, mt_velocity):
        l_opt = self.optimal_fiber_length
        if self.tendon == "rigid":
            fiber, cos_a = self._fiber_geometry(mt_length - self.tendon_slack_length)
            v_fiber = mt_velocity * cos_a
            f_m = self.fiber_force_normalized(
                activation, fiber / l_opt, -v_fiber / (self.max_contraction_velocity * l_opt)
            )
            return self.max_isometric_force * f_m * cos_a
        along = poisoned(
            _equilibrium_along(self, activation, mt_length, mt_velocity), activation, mt_length, mt_velocity
        )
        return self.max_isometric_force * tendon_force_length(
            (mt_length - along) / self.tendon_slack_length, self.tendon_strain_at_one
        )

    def equilibrium_residual(
        self, activation, musculotendon_length, fiber_length, musculotendon_velocity=0.0
    ) -> Float[Array, " m"]:
        """``f_T(l̃_T) − f_M cos α`` ``(m,)`` (units of ``F⁰``) at a given ``fiber_length``
        ``(m,)`` m: zero at the compliant-tendon equilibrium."""
        activation, mt_length, mt_velocity = self._inputs(activation, musculotendon_length, musculotendon_velocity)
        fiber = jnp.asarray(fiber_length)
        along = safe_sqrt(fiber**2 - self._thickness() ** 2)  # 0 below the thickness, finite gradient
        return self._residual_along(along, activation, mt_length, mt_velocity)


@eqx.filter_jit
def _equilibrium_along(self: HillMuscle, activation, mt_length, mt_velocity, max_iterations: int = 100):
    """Compliant-tendon equilibrium: the fiber projection ``x = l_M cos α`` ``(m,)`` m (see
    `HillMuscle.fiber_length`). Jitted (cached on the module's structure) so eager calls do
    not re-trace the loop."""
    args = (activation, mt_length, mt_velocity)
    dtype = self.optimal_fiber_length.dtype
    tol = 8.0 * float(jnp.finfo(dtype).eps)

    def residual_and_slope(x, params):
        module, a = params
        return jax.jvp(lambda y: module._residual_along(y, *a), (x,), (jnp.ones_like(x),))

    frozen = jax.lax.stop_gradient((self, args))
    lo = 1e-3 * frozen[0].optimal_fiber_length
    hi = jnp.maximum(frozen[1][1] - 0.9 * frozen[0].tendon_slack_length, 2.0 * lo)
    rigid = frozen[1][1] - frozen[0].tendon_slack_length
    x0 = jnp.clip(rigid, lo, hi)
    step0 = jnp.full_like(x0, jnp.inf)

    def cond(state):
        i, x, lo, hi, step = state
        return (i < max_iterations) & jnp.any(jnp.abs(step) > tol * frozen[0].optimal_fiber_length)

    def body(state):
        i, x, lo, hi, _ = state
        r, d = residual_and_slope(x, frozen)
        # r decreases with x: r > 0 means the root lies above x
        lo = jnp.where(r > 0, x, lo)
        hi = jnp.where(r > 0, hi, x)
        newton = x - r / jnp.where(d < 0, d, -1.0)
        ok = (d < 0) & (newton > lo) & (newton < hi)
        x_new = jnp.where(ok, newton, 0.5 * (lo + hi))
        x_new = jnp.where(r == 0, x, x_new)
        return i + 1, x_new, lo, hi, x_new - x

    _, x, _, _, _ = jax.lax.while_loop(cond, body, (0, x0, lo, hi, step0))
    x = jax.lax.stop_gradient(x)
    # implicit differentiation: x* = x − (r(x, θ) − r(x, θ̄))/∂r/∂x — the value stays x (also when
    # no root exists), the derivative is −(∂r/∂x)⁻¹ ∂r/∂θ
    r = self._residual_along(x, *args)
    _, d = residual_and_slope(x, frozen)
    d = jnp.where(d < 0, d, -1.0)
    return x - (r - jax.lax.stop_gradient(r)) / jax.lax.stop_gradient(d)
