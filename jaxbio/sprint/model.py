"""The sprinter: a 1-DOF body in Ivancevic's (2009) time & fitness-dependent dissipative Hamiltonian form.

State ``y = (q, p, e)``: forward position ``q`` [m], momentum ``p = m v`` [kg·m/s] and the
phosphagen (fitness) reserve ``e`` [-] (1 at the start, > 0 always). With ``H = p²/(2m)``
(Ivancevic 2009, eq. 7 for one DOF: ``g^{11} = 1/m``) the equations are Ivancevic 2009, eqs. (9)–(11) and the
time & fitness-dependent system of §4.6 (eqs. 26–27 with ``F = F(t, y, p, f)``)::

    q̇ = ∂H/∂p = p / m
    ṗ = F_drive(s, p, f) − ∂R/∂q̇ − F_drag − ∂H/∂q          (∂H/∂q = 0: no potential on the flat)
    ė = −(P_act + F_drive q̇ / m) e/(e + ε) / E + r (1 − e)     (depletion with power, recovery)

- ``s = t − RT`` is the time since the athlete reacted to the gun (reaction time ``RT`` from the
  race file; before it nothing moves).
- Drive (Ivancevic 2009, §4.6, 2): ``F_drive = f(e) · F_imp(s) · F_Hill(v) / F⁰`` with the excitation
  impulse ``F_imp = F⁰ (1 − e^{−s/τ})`` and Hill's hyperbola ``F_Hill = (F⁰ b − a v)/(v + b)``;
  ``b = (a/F⁰) v_max`` so that the force vanishes at ``v_max``.
- Fitness ``f(e) = e (1 + K) / (e + K) ∈ (0, 1]``: the drive follows the reserve with
  Michaelis–Menten kinetics (half-saturation ``K``), so fitness stays near 1 until the reserve runs
  low and then falls — the slow-down after ~70 m of Ivancevic's (2009) introduction.
- Reserve: used at the drive's metabolic power — an activation cost ``P_act`` of the maximally
  stimulated muscles plus the mechanical power of the drive — with capacity ``E``; the factor
  ``e/(e + ε)``, ``ε = 0.01``, only stops the use when the reserve is empty, so that ``e > 0``;
  recovery at rate ``r`` towards 1.
- Rayleigh dissipation (Ivancevic 2009, §4.6, 1, with β = 0): ``R = ½ m α q̇²``, ``∂R/∂q̇ = m α v``.
- Aerodynamic drag with the race's wind ``w`` (tail wind positive):
  ``F_drag = m k_d (v − w)|v − w|`` with ``k_d = ½ ρ C_d A / m``.

The parameters are per unit mass (``Sprinter``); split times do not depend on ``m``.

The model is built from the library (`sprinter_system`): a `jaxbio.HamiltonianSystem` on a
one-segment prismatic tree with a one-muscle `jaxbio.muscles.MuscleDrive`, `LinearDamping` +
`QuadraticDrag` and a `ReserveFitness`, integrated by `jaxbio.simulate` with fixed steps on a
quadratic grid (`simulate_race`); split times are crossing times of the simulated race.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxbio.hamiltonian import (
    FitnessLaw,
    HamiltonianSystem,
    LinearDamping,
    QuadraticDrag,
    ReserveFitness,
    SumDissipation,
)
from jaxbio.muscles.actuators import MuscleDrive
from jaxbio.simulation import FixedGrid, Trajectory, crossing_times, simulate
from jaxbio.tree import SegmentTree

#: names of the positive parameters, in the order used by ``Sprinter.values`` and the fits
PARAMETERS = (
    "f0",
    "vmax",
    "energy",
    "hill_ratio",
    "tau",
    "rayleigh",
    "drag",
    "activation_power",
    "half_saturation",
    "recovery",
    "mass",
)

#: units of each parameter, for tables and JSON
UNITS = {
    "f0": "N/kg",
    "vmax": "m/s",
    "energy": "J/kg",
    "hill_ratio": "-",
    "tau": "s",
    "rayleigh": "1/s",
    "drag": "1/m",
    "activation_power": "W/kg",
    "half_saturation": "-",
    "recovery": "1/s",
    "mass": "kg",
    "rt_offset": "s",
}

#: fitted quantities of any sign, with their defaults: ``rt_offset`` [s] is added to the race
#: file's reaction time (the start the splits imply may differ from the recorded reaction: a
#: different timing convention, a transcribed or misread first split). They are ``Sprinter``
#: fields as they are (not logs), and the fits use them as they are.
OFFSETS = {"rt_offset": 0.0}

#: default values. f0, vmax and energy (the fitted ones) are typical elite-male values (about the
#: median of the fits to the embedded races); the others are fixed population constants.
DEFAULTS = {
    # F⁰/m: maximal isometric propulsive force per kg of the Hill curve (fitted; ~14–16 N/kg on the
    # embedded races — higher than the ~9 N/kg of linear force–velocity profiles because Hill's
    # hyperbola falls faster at low speed)
    "f0": 15.0,
    # v_max: speed at which Hill's force vanishes, F⁰ b / a (fitted; ~20–23 m/s)
    "vmax": 21.0,
    # E: the reserve per kg in units of work (fitted; ~1000 J/kg with P_act = 100 W/kg)
    "energy": 1000.0,
    # a/F⁰ = 0.25: Hill (1938), the classic ratio for vertebrate muscle
    "hill_ratio": 0.25,
    # τ: time constant of the excitation impulse (Ivancevic 2009, §4.6 2a). The split times prefer an
    # almost immediate rise (the neural delay is already in the reaction time; τ = 20 ms costs
    # ~0.001 s of RMSE on Bolt 2008), so 5 ms
    "tau": 0.005,
    # α: Rayleigh (viscous) dissipation per kg, R = ½ m α v² (population constant)
    "rayleigh": 0.1,
    # k_d = ½ ρ C_d A / m with ρ = 1.2 kg/m³, C_d A = 0.24 m², m = 80 kg
    "drag": 0.5 * 1.2 * 0.24 / 80.0,
    # P_act: reserve cost of keeping the muscles maximally activated, per kg (population constant)
    "activation_power": 100.0,
    # K: Michaelis–Menten half-saturation of fitness in the reserve (population constant)
    "half_saturation": 0.1,
    # r: recovery rate of the reserve; phosphocreatine resynthesis half-time ~30 s → ln 2 / 30 s
    "recovery": float(np.log(2.0) / 30.0),
    # m: body mass (kg); only scales p and H, not the split times
    "mass": 80.0,
}

#: the reserve-use throttle e/(e + ε) keeps the reserve positive
RESERVE_EPS = 0.01

#: parameters a fit estimates by default (the others stay at the model's values)
FREE = ("f0", "vmax", "energy")

#: the fatigue parameters among PARAMETERS
FATIGUE = ("energy", "activation_power", "half_saturation", "recovery")


def _field(name: str) -> str:
    """The ``Sprinter`` field of a fitted quantity: ``log_<name>``, or ``name`` for an offset."""
    if name in OFFSETS:
        return name
    if name not in PARAMETERS:
        raise ValueError(f"Sprinter: unknown parameter {name!r}; known: {PARAMETERS + tuple(OFFSETS)}")
    return f"log_{name}"


def to_values(names, theta) -> np.ndarray:
    """SI values ``(..., k)`` of the fits' coordinates ``theta`` ``(..., k)`` of ``names`` (numpy):
    ``exp`` of the logs, offsets as they are."""
    theta = np.asarray(theta, dtype=float)
    lin = np.array([n in OFFSETS for n in names], dtype=bool)
    return np.where(lin, theta, np.exp(np.where(lin, 0.0, theta)))


def _log(x) -> Array:
    return jnp.log(jnp.asarray(x, dtype=float))


class Sprinter(eqx.Module):
    """Parameters of the sprinter model; every one positive by construction.

    Fields are the natural logarithms of the parameters (``log_f0`` …); the properties of the same
    name without ``log_`` give the positive values in SI units (see ``UNITS``). Construct with
    values: ``Sprinter(f0=15.0, vmax=21.0)`` (unspecified ones take ``DEFAULTS``), or from logs with
    ``Sprinter.from_log(...)``. ``rt_offset`` [s] (default 0, any sign; ``OFFSETS``) is added to
    the race's reaction time by ``split_times``. A pytree of scalar leaves: ``jax.vmap`` over a batch of sprinters
    by stacking, ``jax.grad`` with respect to the log-parameters.

    ``ValueError`` at construction for a non-positive or non-finite value.
    """

    log_f0: Float[Array, ""]
    log_vmax: Float[Array, ""]
    log_energy: Float[Array, ""]
    log_hill_ratio: Float[Array, ""]
    log_tau: Float[Array, ""]
    log_rayleigh: Float[Array, ""]
    log_drag: Float[Array, ""]
    log_activation_power: Float[Array, ""]
    log_half_saturation: Float[Array, ""]
    log_recovery: Float[Array, ""]
    log_mass: Float[Array, ""]
    rt_offset: Float[Array, ""]

    def __init__(self, **values):
        unknown = set(values) - set(PARAMETERS) - set(OFFSETS)
        if unknown:
            raise ValueError(f"Sprinter: unknown parameter(s) {sorted(unknown)}; known: {PARAMETERS + tuple(OFFSETS)}")
        for name, default in OFFSETS.items():
            v = values.get(name, default)
            if not isinstance(v, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(v, dtype=float))):
                raise ValueError(f"Sprinter: {name} must be finite, got {v!r}")
            setattr(self, name, jnp.asarray(v, dtype=float))
        for name in PARAMETERS:
            v = values.get(name, DEFAULTS[name])
            if not isinstance(v, jax.core.Tracer):
                a = np.asarray(v, dtype=float)
                if not np.all(np.isfinite(a)) or np.any(a <= 0):
                    raise ValueError(f"Sprinter: {name} must be positive and finite, got {v!r}")
            setattr(self, f"log_{name}", _log(v))

    @classmethod
    def from_log(cls, **logs) -> Sprinter:
        """Build from natural logs of the parameters (unspecified ones take ``DEFAULTS``)."""
        unknown = set(logs) - set(PARAMETERS)
        if unknown:
            raise ValueError(f"Sprinter.from_log: unknown parameter(s) {sorted(unknown)}")
        model = cls()
        for name, v in logs.items():
            model = eqx.tree_at(lambda m, n=name: getattr(m, f"log_{n}"), model, jnp.asarray(v, dtype=float))
        return model

    def with_log(self, names: tuple[str, ...], theta: Float[Array, " k"]) -> Sprinter:
        """A copy with ``log_<names[i]> = theta[i]`` (the fits' unconstrained vector); an offset
        (``OFFSETS``, e.g. ``rt_offset``) is set to ``theta[i]`` itself."""
        return eqx.tree_at(
            lambda m: [getattr(m, _field(n)) for n in names], self, [theta[i] for i in range(len(names))]
        )

    def log_values(self, names: tuple[str, ...] = FREE) -> Float[Array, " k"]:
        """``(k,)`` the fits' coordinates of the named parameters: natural logs, offsets as they are."""
        return jnp.stack([getattr(self, _field(n)) for n in names])

    def value(self, name: str) -> Array:
        """Value of parameter ``name`` in SI units (``UNITS[name]``)."""
        return getattr(self, name) if name in OFFSETS else jnp.exp(getattr(self, f"log_{name}"))

    f0 = property(lambda self: jnp.exp(self.log_f0), doc="F⁰/m, N/kg")
    vmax = property(lambda self: jnp.exp(self.log_vmax), doc="Hill's unloaded speed, m/s")
    energy = property(lambda self: jnp.exp(self.log_energy), doc="reserve capacity E, J/kg")
    hill_ratio = property(lambda self: jnp.exp(self.log_hill_ratio), doc="Hill's a/F⁰, -")
    tau = property(lambda self: jnp.exp(self.log_tau), doc="impulse time constant τ, s")
    rayleigh = property(lambda self: jnp.exp(self.log_rayleigh), doc="Rayleigh α, 1/s")
    drag = property(lambda self: jnp.exp(self.log_drag), doc="k_d = ½ρC_dA/m, 1/m")
    activation_power = property(lambda self: jnp.exp(self.log_activation_power), doc="P_act, W/kg")
    half_saturation = property(lambda self: jnp.exp(self.log_half_saturation), doc="K, -")
    recovery = property(lambda self: jnp.exp(self.log_recovery), doc="r, 1/s")
    mass = property(lambda self: jnp.exp(self.log_mass), doc="m, kg")

    @property
    def hill_b(self) -> Array:
        """Hill's b = (a/F⁰) v_max, m/s."""
        return self.hill_ratio * self.vmax

    def positive(self) -> Values:
        """All parameter values at once (``Values``), for use inside loops: the exponentials are
        taken once instead of at every vector-field evaluation."""
        return Values(**{n: jnp.exp(getattr(self, f"log_{n}")) for n in PARAMETERS})


class Values(eqx.Module):
    """Positive parameter values in SI units (the attributes of ``Sprinter`` without the logs).
    Every function below accepts a ``Sprinter`` or a ``Values``."""

    f0: Array
    vmax: Array
    energy: Array
    hill_ratio: Array
    tau: Array
    rayleigh: Array
    drag: Array
    activation_power: Array
    half_saturation: Array
    recovery: Array
    mass: Array

    @property
    def hill_b(self) -> Array:
        return self.hill_ratio * self.vmax

    def positive(self) -> Values:
        return self


# ---- the sprinter on the library's Hamiltonian stack ---------------------------------------


def _body(mass) -> SegmentTree:
    """One segment of ``mass`` kg (a point mass) on a prismatic joint along the track (x): the
    coordinate is the distance run [m], its momentum ``p = m v``. Planar convention (y up): the
    track is level, so gravity does no work."""
    dtype = jnp.result_type(mass)
    z3 = jnp.zeros(3, dtype)
    return SegmentTree(
        axes=jnp.array([[1.0, 0.0, 0.0]], dtype),
        origins=z3[None],
        orientations=jnp.array([[1.0, 0.0, 0.0, 0.0]], dtype),
        masses=jnp.reshape(mass, (1,)),
        coms=z3[None],
        inertias=jnp.zeros((1, 3, 3), dtype),
        gravity=jnp.array([0.0, -9.81, 0.0], dtype),
        names=("body",),
        parents=(-1,),
        joint_types=("prismatic",),
        name="sprinter",
    )


def sprinter_system(model: Sprinter | Values, wind=0.0, fitness=None) -> HamiltonianSystem:
    """The sprinter of the module docstring built from library parts, time ``s`` from the reaction:

    - tree: one prismatic segment of mass ``m`` (``H = p²/2m``, Ivancevic 2009, eq. 7);
    - drive: `jaxbio.muscles.MuscleDrive` with one muscle of moment arm 1 — ``F⁰ = m f0``,
      impulse time constant ``τ``, Hill's ``a = (a/F⁰) F⁰`` and ``b = (a/F⁰) v_max``;
    - dissipation: `LinearDamping` (``m α``) + `QuadraticDrag` (``m k_d``, the race's ``wind``
      [m/s], tail wind positive);
    - fitness: `ReserveFitness` with capacity ``m E`` J, activation power ``m P_act`` W,
      half-saturation ``K``, recovery ``r`` and throttle ``RESERVE_EPS``.

    ``fitness``: ``None``, or a function ``ReserveFitness -> FitnessLaw`` applied to that law —
    the hook for a modified fatigue law built on the parametric one (e.g.
    `jaxbio.learning.fatigue.NeuralResidualFitness.on`, which adds a learned correction); make it
    a pytree (an Equinox module or bound method) so that its parameters are traced and
    differentiable. ``ValueError`` if it is not callable or does not return a `FitnessLaw`.

    The state is ``{"q": distance (1,), "p": momentum (1,), "f": reserve (1,)}``.
    """
    v = model.positive()
    m = v.mass
    f0 = m * v.f0
    drive = MuscleDrive(
        max_isometric_force=jnp.reshape(f0, (1,)),
        time_constant=v.tau,
        hill_a=v.hill_ratio * f0,
        hill_b=v.hill_b,
        moment_arms=jnp.ones((1, 1), jnp.result_type(m)),
    )
    dissipation = SumDissipation(LinearDamping(m * v.rayleigh), QuadraticDrag(m * v.drag, wind))
    reserve = ReserveFitness(
        capacity=m * v.energy,
        activation_power=m * v.activation_power,
        half_saturation=v.half_saturation,
        recovery=v.recovery,
        throttle=RESERVE_EPS,
    )
    return HamiltonianSystem(_body(m), drive, dissipation, _modified(reserve, fitness))


def _modified(reserve: ReserveFitness, fitness) -> FitnessLaw:
    """``reserve``, or ``fitness(reserve)`` for a `sprinter_system` hook (checked)."""
    if fitness is None:
        return reserve
    if not callable(fitness):
        raise ValueError(
            f"sprinter_system: fitness must be a function ReserveFitness -> FitnessLaw, got {type(fitness).__name__}"
        )
    law = fitness(reserve)
    if not isinstance(law, FitnessLaw):
        raise ValueError(
            f"sprinter_system: fitness(reserve) must return a jaxbio.hamiltonian.FitnessLaw, got {type(law).__name__}"
        )
    return law


def simulate_race(model: Sprinter, duration, wind=0.0, *, n_steps: int = 80, fitness=None) -> Trajectory:
    """Integrate the sprinter from rest for ``duration`` [s] after the reaction: ``jaxbio.simulate``
    with ``n_steps`` fixed Tsit5 steps on the quadratic grid ``s = duration · u²`` (small steps
    while the impulse rises). Split times are within ~1e-5 s of a converged solution at 80 steps
    (1000× below the data's 0.01 s). Returns a `jaxbio.Trajectory` (``ts`` s since the reaction,
    ``q`` m, ``p`` kg·m/s, ``qd`` m/s, ``f`` the reserve) with ``n_steps + 1`` points. Pure;
    jit/vmap/grad (forward and reverse mode) work. ``fitness``: `sprinter_system`'s hook.
    """
    system = sprinter_system(model, wind, fitness)
    dtype = jnp.result_type(float)
    y0 = {"q": jnp.zeros(1, dtype), "p": jnp.zeros(1, dtype), "f": jnp.ones(1, dtype)}
    return simulate(
        system,
        y0,
        0.0,
        jnp.asarray(duration, dtype),
        form="hamiltonian",
        throw=False,
        stepsize_controller=FixedGrid(n_steps, spacing="quadratic"),
    )


def split_times(
    model: Sprinter,
    distances: Float[Array, " k"],
    reaction_time,
    wind=0.0,
    duration=None,
    *,
    n_steps: int = 80,
    fitness=None,
) -> Float[Array, " k"]:
    """Predicted split times from the gun [s] at ``distances`` [m] (reaction time included).

    ``reaction_time`` [s] from the race file (plus the model's ``rt_offset``); ``wind`` [m/s]; ``duration`` [s] of the simulation
    after the reaction (default ``1.3 · max(distances)/8 + 1`` s, more than any sprinter needs).
    The crossing times are located on the simulated race (`jaxbio.simulation.crossing_times`).
    Differentiable with respect to every parameter of ``model`` (forward and reverse mode), and
    of ``fitness`` (`sprinter_system`'s hook, default the parametric `ReserveFitness`).
    """
    distances = jnp.asarray(distances, dtype=float)
    if duration is None:
        duration = 1.3 * jnp.max(distances) / 8.0 + 1.0
    traj = simulate_race(model, duration, wind, n_steps=n_steps, fitness=fitness)
    return reaction_time + model.rt_offset + crossing_times(traj, distances)
