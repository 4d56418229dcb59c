"""`jaxbio.simulation`: fixed-grid stepping, crossing times and Hermite interpolation, against
Diffrax's own stepping on the same grid, closed forms and finite differences; the library
dissipations and fitness laws the sprinter is built from; bad input."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

import jaxbio as jb
from jaxbio import hamiltonian as ham
from jaxbio.simulation import crossing_times, hermite
from tests._models import double_pendulum_dict, slider_dict


def _slider(mass=2.0, force=3.0, damping=0.5, drag=0.0, wind=0.0):
    """A mass on a horizontal slider pushed by a constant force against linear (and quadratic) drag."""
    tree = jb.SegmentTree.from_dict(
        {
            "gravity": [0, -9.81, 0],
            "segments": [
                {
                    "name": "body",
                    "parent": None,
                    "joint": {"type": "prismatic", "axis": [1, 0, 0]},
                    "mass": mass,
                    "com": [0, 0, 0],
                    "inertia": [[0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]],
                }
            ],
        },
        dtype=jnp.float64,
    )
    dissipation = ham.SumDissipation(ham.LinearDamping(damping), ham.QuadraticDrag(drag, wind))
    return jb.HamiltonianSystem(tree, drive=ham.ConstantDrive(jnp.array([force])), dissipation=dissipation)


def _closed_form(t, mass=2.0, force=3.0, damping=0.5):
    """x(t), v(t) from rest under F − c v: v = (F/c)(1 − e^{−ct/m})."""
    k = damping / mass
    vinf = force / damping
    return vinf * (t - (1 - np.exp(-k * t)) / k), vinf * (1 - np.exp(-k * t))


@pytest.mark.parametrize("spacing", ["uniform", "quadratic"])
def test_fixed_grid_against_closed_form(spacing):
    system = _slider()
    y0 = system.initial_state(jnp.zeros(1))
    tr = jb.simulate(system, y0, 0.0, 6.0, stepsize_controller=jb.FixedGrid(60, spacing=spacing))
    assert tr.ts.shape == (61,) and tr.q.shape == (61, 1) and tr.solution is None
    x, v = _closed_form(np.asarray(tr.ts))
    np.testing.assert_allclose(tr.q[:, 0], x, atol=1e-8)
    np.testing.assert_allclose(tr.qd[:, 0], v, atol=1e-8)
    u = np.linspace(0, 1, 61)
    np.testing.assert_allclose(tr.ts, 6.0 * (u**2 if spacing == "quadratic" else u), rtol=1e-15)


@pytest.mark.slow
def test_uniform_grid_equals_diffeqsolve_on_the_same_grid():
    """steps=N takes exactly the steps diffeqsolve takes with StepTo on the grid (a double pendulum)."""
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    system = jb.HamiltonianSystem(tree, dissipation=ham.LinearDamping(0.1))
    y0 = system.initial_state(jnp.array([0.3, -0.8]), jnp.array([1.0, 2.0]))
    grid = jnp.linspace(0.0, 2.0, 41)
    a = jb.simulate(system, y0, 0.0, 2.0, stepsize_controller=jb.FixedGrid(40))
    b = jb.simulate(system, y0, 0.0, 2.0, stepsize_controller=diffrax.StepTo(ts=grid), ts=grid)
    np.testing.assert_allclose(a.q, b.q, atol=1e-13)
    np.testing.assert_allclose(a.p, b.p, atol=1e-13)
    np.testing.assert_allclose(a.energy, b.energy, atol=1e-12)


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_crossing_times_and_gradient():
    values = jnp.array([1.0, 5.0, 12.0])
    t_exact = [brentq(lambda t: _closed_form(t)[0] - d, 1e-9, 30) for d in values]

    def crossings(force):
        system = _slider(force=force)
        tr = jb.simulate(
            system,
            system.initial_state(jnp.zeros(1)),
            0.0,
            8.0,
            stepsize_controller=jb.FixedGrid(80, spacing="quadratic"),
        )
        return crossing_times(tr, values)

    np.testing.assert_allclose(crossings(3.0), t_exact, atol=1e-7)
    h = 1e-5
    fd = (np.asarray(crossings(3.0 + h)) - np.asarray(crossings(3.0 - h))) / (2 * h)
    np.testing.assert_allclose(jax.jacfwd(crossings)(3.0), fd, rtol=1e-6)
    np.testing.assert_allclose(jax.jacrev(crossings)(3.0), fd, rtol=1e-6)
    # beyond the last saved point the last velocity is held
    system = _slider()
    tr = jb.simulate(system, system.initial_state(jnp.zeros(1)), 0.0, 2.0, stepsize_controller=jb.FixedGrid(20))
    far = float(tr.q[-1, 0]) + 3.0
    np.testing.assert_allclose(crossing_times(tr, jnp.array([far])), 2.0 + 3.0 / tr.qd[-1, 0], rtol=1e-12)


def test_hermite_is_exact_for_cubics():
    ts = jnp.array([0.0, 0.3, 1.0, 1.7])
    y, dy = ts**3 - 2 * ts, 3 * ts**2 - 2
    t = jnp.linspace(0.0, 1.7, 9)
    np.testing.assert_allclose(hermite(ts, y, dy, t), t**3 - 2 * t, atol=1e-13)


def test_quadratic_drag_and_sum():
    d = ham.QuadraticDrag(jnp.array([0.3, 0.1]), wind=jnp.array([1.0, -0.5]))
    q, qd = jnp.zeros(2), jnp.array([3.0, -2.0])
    np.testing.assert_allclose(d.force(q, qd), jax.grad(lambda v: d(q, v))(qd), rtol=1e-14)
    np.testing.assert_allclose(d.force(q, qd), [0.3 * 4.0, -0.1 * 1.5**2], rtol=1e-14)
    s = ham.SumDissipation(d, ham.LinearDamping(2.0))
    np.testing.assert_allclose(s.force(q, qd), d.force(q, qd) + 2.0 * qd, rtol=1e-14)
    np.testing.assert_allclose(s(q, qd), d(q, qd) + 0.5 * 2.0 * jnp.sum(qd**2), rtol=1e-14)
    with pytest.raises(ValueError, match="coefficients"):
        ham.QuadraticDrag(-1.0)
    with pytest.raises(ValueError, match="wind"):
        ham.QuadraticDrag(1.0, wind=float("nan"))
    with pytest.raises(ValueError, match="Dissipation"):
        ham.SumDissipation(1.0)


def test_reserve_fitness():
    law = ham.ReserveFitness(capacity=800.0, activation_power=100.0, half_saturation=0.1, recovery=0.02)
    np.testing.assert_allclose(law.value(jnp.array([1.0, 0.0, 0.1])), [1.0, 0.0, 0.1 * 1.1 / 0.2], rtol=1e-15)
    qd, F, e = jnp.array([5.0]), jnp.array([40.0]), jnp.array([0.5])
    expected = -(100.0 + 200.0) * 0.5 / 0.51 / 800.0 + 0.02 * 0.5
    np.testing.assert_allclose(law.rate(0.0, qd, qd, qd, e, F, F), [expected], rtol=1e-14)
    # the drive sees the fitness f(e), not the reserve
    seen = []

    class Probe(ham.Drive):
        def __call__(self, t, q, qd, f, a=None):
            seen.append(f)
            return jnp.zeros_like(q)

    system = jb.HamiltonianSystem(_slider().tree, drive=Probe(), fitness=law)
    system.vector_field(0.0, {"q": jnp.zeros(1), "p": jnp.zeros(1), "f": jnp.array([0.2])})
    np.testing.assert_allclose(seen[-1], law.value(jnp.array([0.2])), rtol=1e-15)
    for bad in (
        dict(capacity=0.0),
        dict(capacity=1.0, half_saturation=-1.0),
        dict(capacity=1.0, recovery=-0.1),
        dict(capacity=1.0, throttle=0.0),
    ):
        with pytest.raises(ValueError, match="ReserveFitness"):
            ham.ReserveFitness(**bad)


def test_fixed_grid_bad_input():
    system = _slider()
    y0 = system.initial_state(jnp.zeros(1))
    with pytest.raises(ValueError, match="excludes dt0"):
        jb.simulate(system, y0, 0.0, 1.0, dt0=0.1, stepsize_controller=jb.FixedGrid(10))
    with pytest.raises(ValueError, match="spacing"):
        jb.simulate(system, y0, 0.0, 1.0, stepsize_controller=jb.FixedGrid(10, spacing="log"))
    with pytest.raises(ValueError, match="steps"):
        jb.simulate(system, y0, 0.0, 1.0, stepsize_controller=jb.FixedGrid(0))
    with pytest.raises(ValueError, match="t1 must be finite"):
        jb.simulate(system, y0, 0.0, float("nan"), stepsize_controller=jb.FixedGrid(10))
    tr = jb.simulate(system, y0, 0.0, 1.0, stepsize_controller=jb.FixedGrid(10))
    with pytest.raises(ValueError, match=r"index must be an int in \[0, 1\)"):
        crossing_times(tr, jnp.array([0.5]), index=1)
    with pytest.raises(ValueError, match="at least two saved points"):
        crossing_times(jb.simulate(system, y0, 0.0, 1.0), jnp.array([0.5]))
    with pytest.raises(ValueError, match="hermite"):
        hermite(jnp.zeros(3), jnp.zeros(2), jnp.zeros(3), jnp.array([0.1]))


@pytest.mark.slow  # moved out of the default run (its ~10 min budget)
def test_fixed_grid_with_a_callable_drive_under_jit():
    """Systems holding Python callables (a TimeFunctionDrive) step on the fixed grid, eagerly and
    under jit, with the same numbers."""
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    system = jb.HamiltonianSystem(tree, drive=ham.TimeFunctionDrive(lambda t: jnp.sin(t) * jnp.ones(2)))
    y0 = system.initial_state(jnp.array([0.1, 0.2]))
    eager = jb.simulate(system, y0, 0.0, 1.0, stepsize_controller=jb.FixedGrid(20))
    jitted = jax.jit(lambda y: jb.simulate(system, y, 0.0, 1.0, stepsize_controller=jb.FixedGrid(20)).q)(y0)
    np.testing.assert_allclose(jitted, eager.q, rtol=0, atol=1e-15)


def test_fixed_grid_checkpoint_same_gradient_less_memory():
    """``checkpoint=True`` (jax.checkpoint of each grid step) gives the gradient of the plain scan to
    round-off, against central finite differences too, and XLA's compiled program for the batched
    gradient needs less temporary memory; it is refused for adaptive solves and non-bool values."""
    system = _slider(drag=0.2)

    def loss(q0, checkpoint):
        def one(q):
            tr = jb.simulate(
                system,
                system.initial_state(q, 1.0 + q),
                0.0,
                1.0,
                stepsize_controller=jb.FixedGrid(30, checkpoint=checkpoint),
            )
            return jnp.sum(tr.q[-1] ** 2) + jnp.mean(tr.energy)

        return jnp.sum(jax.vmap(one)(q0))

    q0 = jnp.array([[0.3], [1.0], [-0.5]])
    compiled = {c: jax.jit(jax.grad(loss), static_argnums=1).lower(q0, c).compile() for c in (False, True)}
    grads = {c: f(q0) for c, f in compiled.items()}
    np.testing.assert_allclose(grads[True], grads[False], rtol=1e-12, atol=1e-13)
    h = 1e-6
    e = jnp.zeros_like(q0).at[1, 0].set(h)
    value = jax.jit(loss, static_argnums=1)
    fd = (value(q0 + e, True) - value(q0 - e, True)) / (2 * h)
    np.testing.assert_allclose(grads[True][1, 0], fd, rtol=1e-6)
    temp = {c: f.memory_analysis().temp_size_in_bytes for c, f in compiled.items()}
    assert temp[True] < temp[False] / 2, temp
    y0 = system.initial_state(jnp.zeros(1))
    with pytest.raises(TypeError, match="checkpoint"):  # a FixedGrid option, not simulate's
        jb.simulate(system, y0, 0.0, 1.0, checkpoint=True)
    with pytest.raises(ValueError, match="checkpoint must be True or False"):
        jb.simulate(system, y0, 0.0, 1.0, stepsize_controller=jb.FixedGrid(10, checkpoint="yes"))


@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-5), (jnp.float64, 1e-8)])
def test_default_tolerances_follow_the_state_dtype(dtype, tol):
    """Without rtol/atol an adaptive solve takes the dtype's defaults: the same steps as the
    tolerances given explicitly, and a different solve from another tolerance (the damped slider
    under a constant force, closed form beside it)."""
    system = _slider()
    system = eqx.tree_at(lambda s: s.tree, system, system.tree.astype(dtype))
    y0 = jax.tree_util.tree_map(lambda x: x.astype(dtype), system.initial_state(jnp.zeros(1)))
    ts = np.linspace(0.0, 3.0, 7)
    default = jb.simulate(system, y0, 0.0, 3.0, ts=ts)
    explicit = jb.simulate(system, y0, 0.0, 3.0, ts=ts, rtol=tol, atol=tol)
    other = jb.simulate(system, y0, 0.0, 3.0, ts=ts, rtol=100 * tol, atol=100 * tol)
    assert default.q.dtype == dtype
    np.testing.assert_array_equal(default.q, explicit.q)
    assert not np.array_equal(default.q, other.q)
    x, _ = _closed_form(ts)
    np.testing.assert_allclose(default.q[:, 0], x, rtol=1e3 * tol, atol=1e3 * tol)


def test_a_tolerance_below_the_dtype_resolution_is_refused():
    """rtol = 1e-8 in float32 (eps 1.2e-7) cannot be met: refused eagerly naming rtol, and under
    jit (traced) through equinox.error_if, or NaN with throw=False."""
    system = jb.HamiltonianSystem(jb.SegmentTree.from_dict(slider_dict(), dtype=jnp.float32))
    y0 = system.initial_state(jnp.zeros(1, jnp.float32), jnp.ones(1, jnp.float32))
    with pytest.raises(
        ValueError, match=r"rtol is below the resolution of the state's float32.*default for float32 is 1e-05"
    ):
        jb.simulate(system, y0, 0.0, 1.0, rtol=1e-8)
    jb.simulate(system, y0, 0.0, 1.0, rtol=2e-7)  # at the resolution: accepted
    with pytest.raises(Exception, match="rtol is below the resolution"):
        jax.jit(lambda r: jb.simulate(system, y0, 0.0, 1.0, rtol=r).q)(jnp.float32(1e-8))
    tr = jax.jit(lambda r: jb.simulate(system, y0, 0.0, 1.0, rtol=r, throw=False))(jnp.float32(1e-8))
    assert np.all(np.isnan(tr.q))


def test_adaptive_solve_follows_the_state_dtype():
    """A float32 state gives a float32 adaptive solve under x64 with Python-float times (Diffrax
    would promote the state to the times' float64), close to the float64 solve."""
    system32 = jb.HamiltonianSystem(jb.SegmentTree.from_dict(slider_dict(), dtype=jnp.float32))
    tr = jb.simulate(
        system32,
        system32.initial_state(jnp.zeros(1, jnp.float32), jnp.ones(1, jnp.float32)),
        0.0,
        1.0,
        ts=np.linspace(0.0, 1.0, 5),
        rtol=1e-5,
        atol=1e-5,
    )
    assert tr.q.dtype == tr.energy.dtype == tr.ts.dtype == jnp.float32
    np.testing.assert_allclose(tr.q[:, 0], np.linspace(0.0, 1.0, 5), atol=1e-5)  # free slide at 1 m/s


@pytest.mark.slow
def test_velocity_form_equals_hamiltonian_form():
    """``form="velocity"`` integrates (q, q̇): the same trajectory as (q, p) — q, p, q̇, energy and
    a fitness state driven by the flow's ∂H/∂q (BracketFitness eq. 27) — on a damped, driven double pendulum with
    a time potential, adaptive to 1e-11, float64."""
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    system = jb.HamiltonianSystem(
        tree,
        drive=ham.SpringDamperDrive(jnp.array([3.0, 2.0]), jnp.array([0.2, 0.1]), jnp.array([0.1, -0.2])),
        dissipation=ham.LinearDamping(0.1),
        fitness=ham.BracketFitness(lambda t, q, p: jnp.sum(p**2), form="eq27"),
        potential=ham.TimeFunctionPotential(lambda t, q: 0.5 * jnp.sin(t) * q[0] ** 2),
    )
    y0 = system.initial_state(jnp.array([0.3, -0.8]), jnp.array([1.0, 2.0]))
    ts = jnp.linspace(0.0, 2.0, 11)
    a = jb.simulate(system, y0, 0.0, 2.0, ts=ts, rtol=1e-11, atol=1e-11)
    b = jb.simulate(system, y0, 0.0, 2.0, ts=ts, rtol=1e-11, atol=1e-11, form="velocity")
    for name in ("q", "p", "qd", "energy", "f"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), atol=1e-8, err_msg=name)
    assert float(jnp.abs(a.f[-1] - a.f[0]).max()) > 1e-3  # the fitness law did act
    g = jb.simulate(system, y0, 0.0, 2.0, form="velocity", stepsize_controller=jb.FixedGrid(200))
    np.testing.assert_allclose(g.q[::20], a.q, atol=1e-6)


def test_velocity_form_bad_input():
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    system = jb.HamiltonianSystem(tree)
    y0 = system.initial_state(jnp.zeros(2))
    with pytest.raises(ValueError, match="form"):
        jb.simulate(system, y0, 0.0, 1.0, form="lagrangian")
    phase = jb.HamiltonianSystem(tree, dissipation=ham.PhaseSpaceDissipation(lambda q, p: 0.1 * jnp.sum(p**2)))
    with pytest.raises(ValueError, match="form='velocity'.*Rayleigh"):
        jb.simulate(phase, phase.initial_state(jnp.zeros(2)), 0.0, 1.0, form="velocity")


def _equations(jaxpr) -> int:
    """Equations of ``jaxpr`` and of every jaxpr nested in it."""
    n = 0
    for eqn in jaxpr.eqns:
        n += 1
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    n += _equations(inner)
    return n


@pytest.mark.parametrize(
    "form, mode",
    [
        ("velocity", "diffrax"),
        ("velocity", "stored"),
        # 11-22 s each (the slow run has them)
        *(
            pytest.param(f, m, marks=pytest.mark.slow)
            for f, m in [
                ("velocity", "grid"),
                ("hamiltonian", "diffrax"),
                ("hamiltonian", "stored"),
                ("hamiltonian", "grid"),
            ]
        ),
    ],
)
def test_derived_false_leaves_out_the_outputs_not_integrated(form, mode):
    """``derived=False``: the integrated state (``q``, and ``p`` or ``q̇``) and ``f`` equal those of
    the default call, the outputs derived from them (``q̇`` or ``p``, ``energy``) are None, and
    the traced program is smaller by their kernels (the mass matrix at every saved time and the
    potential energy); a failed solve still gives NaN rows; bad values of the flag are refused."""
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    system = jb.HamiltonianSystem(tree, dissipation=ham.LinearDamping(0.1))
    y0 = system.initial_state(jnp.array([0.3, -0.8]), jnp.array([1.0, 2.0]))
    kwargs = {
        "diffrax": dict(ts=jnp.linspace(0.0, 1.0, 6), rtol=1e-9, atol=1e-9),
        "stored": dict(ts=jnp.linspace(0.0, 1.0, 6), rtol=1e-9, atol=1e-9, adjoint=jb.simulation.StoredAdjoint()),
        "grid": dict(stepsize_controller=jb.FixedGrid(50)),
    }[mode]

    def run(y0, derived):
        return jb.simulate(system, y0, 0.0, 1.0, form=form, derived=derived, **kwargs)

    full, state = run(y0, True), run(y0, False)
    solved, derived = ("p", "qd") if form == "hamiltonian" else ("qd", "p")
    for name in ("ts", "q", solved, "f"):
        np.testing.assert_array_equal(getattr(state, name), getattr(full, name), err_msg=name)
    assert getattr(state, derived) is None and state.energy is None
    assert bool(state.result == full.result)
    sizes = {d: _equations(jax.make_jaxpr(lambda y: run(y, d).q)(y0).jaxpr) for d in (True, False)}
    assert sizes[False] < 0.9 * sizes[True], sizes
    if mode != "grid":  # a failed solve (max_steps) still marks its rows
        bad = jb.simulate(system, y0, 0.0, 1.0, form=form, derived=False, max_steps=2, throw=False, **kwargs)
        assert not bool(bad.result == diffrax.RESULTS.successful)
        assert np.isnan(np.asarray(bad.q[-1])).all() and np.isnan(np.asarray(getattr(bad, solved)[-1])).all()
    with pytest.raises(ValueError, match="derived"):
        jb.simulate(system, y0, 0.0, 1.0, derived="no", **kwargs)


def test_velocity_form_initial_state():
    """``initial_state(..., form="velocity")`` gives ``{"q", "qd", "f"}``, and `simulate` with
    ``form="velocity"`` from it follows the same trajectory as from ``{"q", "p", "f"}`` (to the
    round-off of ``M⁻¹ M q̇``); the Hamiltonian form refuses a velocity state, naming the keys."""
    tree = jb.SegmentTree.from_dict(double_pendulum_dict(), dtype=jnp.float64)
    system = jb.HamiltonianSystem(tree, dissipation=ham.LinearDamping(0.1))
    q0, qd0 = jnp.array([0.3, -0.8]), jnp.array([1.0, 2.0])
    yv = system.initial_state(q0, qd0, form="velocity")
    assert set(yv) == {"q", "qd", "f"}
    np.testing.assert_array_equal(yv["qd"], qd0)
    ts = jnp.linspace(0.0, 1.0, 6)
    kwargs = dict(ts=ts, rtol=1e-10, atol=1e-10, form="velocity")
    a = jb.simulate(system, system.initial_state(q0, qd0), 0.0, 1.0, **kwargs)
    b = jb.simulate(system, yv, 0.0, 1.0, **kwargs)
    for name in ("q", "p", "qd", "energy"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), atol=1e-12, err_msg=name)
    with pytest.raises(ValueError, match=r"keys \['f', 'p', 'q'\].*'qd' instead of 'p'"):
        jb.simulate(system, yv, 0.0, 1.0, ts=ts, form="hamiltonian")
    with pytest.raises(ValueError, match="initial_state: form"):
        system.initial_state(q0, form="lagrangian")
