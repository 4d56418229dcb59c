"""Scales, marker offsets and motion fitted together (`jaxbio.io.joint_fit`): the scaled model as
a function of the factors against OpenSim's scaling (`jaxbio.io.scale_osim` loaded), the
objective's gradient against finite differences, recovery of a known scaled model and offsets
from synthetic markers, and on Gait2354's walk the fit's marker RMS against Scale-then-IK."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
ARM = DATA / "arm26.osim"
GAIT = DATA / "gait2354_ik" / "subject01_simbody.osim"
LIBRARY = Path(os.environ.get("JAXBIO_OSIM_LIBRARY", "/work/om"))


def _load(text):
    from jaxbio.tools._scale import _load_text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _load_text(text, dtype=jnp.float64)


def _synthetic(model, c):
    """`Markers` of ``model``'s markers at the poses ``c`` ``(T, nc)``."""
    from jaxbio.io import Markers, marker_positions

    x = np.asarray(jax.vmap(lambda ci: marker_positions(model, ci))(jnp.asarray(c)))
    return Markers(time=np.arange(len(c)) * 0.01, names=model.markers.names, positions=x, rate=100.0)


def _inputs(model, markers):
    from jaxbio.io import prepare_inverse_kinematics

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return prepare_inverse_kinematics(model, markers, dtype=jnp.float64)


@pytest.mark.parametrize("path", [ARM, GAIT], ids=["arm26", "gait2354"])
def test_scaled_model_equals_opensims_scaling(path):
    """``scaling(s)`` against `scale_osim`'s file loaded (its muscles left out: their path
    lengths take long to compile and move no marker): the tree's joint frames and mass centres,
    every marker at a random pose."""
    from jaxbio.io import marker_positions, model_scaling, scale_osim
    from jaxbio.tools._joint_fit import _skeleton
    from jaxbio.tools._scale import _root

    with jax.enable_x64(True):
        scaling = model_scaling(path)
        rng = np.random.default_rng(1)
        s = rng.uniform(0.85, 1.2, (len(scaling.bodies), 3))
        direct = _load(scale_osim(_skeleton(_root(path)[0]), dict(zip(scaling.bodies, s))))
        ours = jax.jit(lambda f: scaling(f))(jnp.asarray(s))
        c = direct.defaults + rng.uniform(-0.2, 0.2, direct.defaults.shape)
        np.testing.assert_allclose(marker_positions(ours, c), marker_positions(direct, c), atol=1e-12)
        for a, b in ((ours.tree.origins, direct.tree.origins), (ours.tree.coms, direct.tree.coms)):
            np.testing.assert_allclose(a, b, atol=1e-12)


def test_objective_gradient_matches_finite_differences():
    """The envelope gradient of `joint_fit_objective` (no differentiation through IK) against
    central differences of the objective itself, re-solved at every point."""
    from jaxbio.io import joint_fit_objective, model_scaling

    with jax.enable_x64(True):
        scaling = model_scaling(ARM)
        nb, m = len(scaling.bodies), scaling.model.markers.n_markers
        truth = scaling(jnp.full((nb, 3), 1.1))
        rng = np.random.default_rng(2)
        c = truth.defaults + rng.uniform(-0.5, 0.5, (4, truth.defaults.size))
        trial = _inputs(scaling.model, _synthetic(truth, c))
        s = jnp.asarray(rng.uniform(0.95, 1.05, (nb, 3)))
        d = jnp.asarray(rng.normal(0, 0.01, (m, 3)))

        def f(s, d):
            return joint_fit_objective(
                scaling, trial, s, d, factors0=jnp.ones((nb, 3)), offsets0=jnp.zeros((m, 3)), scale_weight=1e-3
            )

        gs, gd = jax.jit(jax.grad(f, argnums=(0, 1)))(s, d)
        f_jit = jax.jit(f)
        assert float(jnp.max(jnp.abs(gs))) > 1e-4 and float(jnp.max(jnp.abs(gd))) > 1e-4
        h = 1e-6
        for which, x, g in (("factors", s, gs), ("offsets", d, gd)):
            for idx in np.ndindex(*x.shape):
                e = jnp.zeros_like(x).at[idx].set(h)
                plus = f_jit(s + e, d) if which == "factors" else f_jit(s, d + e)
                minus = f_jit(s - e, d) if which == "factors" else f_jit(s, d - e)
                fd = (float(plus) - float(minus)) / (2 * h)
                assert abs(fd - float(g[idx])) <= 1e-6 * (1 + abs(fd)), (which, idx, fd, float(g[idx]))


def test_fit_recovers_known_scales_and_offsets():
    """Markers of Gait2354 with its femurs and shanks lengthened or shortened and thigh markers
    moved, at random poses: from the unscaled model, the fit reproduces the markers and finds
    those factors and offsets (the other factors and offsets, not moved, stay near their
    start: the weak directions are held by the regularisation)."""
    from jaxbio.io import joint_fit, model_scaling

    with jax.enable_x64(True):
        scaling = model_scaling(GAIT)
        bodies, names = scaling.bodies, scaling.model.markers.names
        s_true = np.ones((len(bodies), 3))
        s_true[bodies.index("femur_r"), 1] = 1.06
        s_true[bodies.index("tibia_r"), 1] = 0.95
        s_true[bodies.index("femur_l"), 1] = 0.97
        d_true = np.zeros((len(names), 3))
        for name, v in (("R.Thigh.Upper", (0.01, 0, -0.005)), ("L.Thigh.Rear", (0, 0.008, 0.004))):
            d_true[names.index(name)] = v
        truth = scaling(jnp.asarray(s_true))
        import equinox as eqx

        truth = eqx.tree_at(lambda mo: mo.markers.locations, truth, truth.markers.locations + d_true)
        rng = np.random.default_rng(3)
        free = ~np.asarray(truth.locked)
        lo, hi = np.asarray(truth.ranges).T
        c = np.asarray(truth.defaults) + free * rng.uniform(-0.3, 0.3, (6, truth.defaults.size))
        c = np.clip(c, np.where(np.isfinite(lo), lo + 0.05, -np.inf), np.where(np.isfinite(hi), hi - 0.05, np.inf))
        trial = _inputs(scaling.model, _synthetic(truth, c))
        fit = joint_fit(scaling, trial, scale_weight=1e-9, offset_weight=1e-7, rtol=1e-10, atol=1e-12, max_steps=400)
    assert fit.start_marker_rms[0].mean() > 3e-3
    assert fit.marker_rms[0].max() < 1e-5  # the synthetic markers, reproduced
    # the factors that were changed, and the moved markers (in their frames), found; the
    # directions the markers hardly see (e.g. a femur's width) stay near their start
    for body in ("femur_r", "tibia_r", "femur_l"):
        i = bodies.index(body)
        np.testing.assert_allclose(fit.factors[i, 1], s_true[i, 1], atol=1e-3)
    np.testing.assert_allclose(fit.model.markers.locations, truth.markers.locations, atol=1e-3)
    np.testing.assert_allclose(fit.offsets, d_true, atol=1e-3)
    np.testing.assert_allclose(fit.factors, s_true, atol=5e-3)


@pytest.mark.slow
def test_fit_lowers_scale_then_ik_marker_rms_on_gait2354_walk(tmp_path):
    """Gait2354's subject01: OpenSim's ScaleTool (jaxbio's, equal to OpenSim's) then IK of the
    walk's first frames, against the joint fit started there: lower objective and marker RMS."""
    from jaxbio.io import joint_fit, model_scaling, prepare_inverse_kinematics, scale_tool
    from jaxbio.io import read_ik_tasks

    src = LIBRARY / "Pipelines" / "Gait2354_Simbody"
    generic = LIBRARY / "Models" / "Gait2354_Simbody" / "gait2354_simbody.osim"
    if not (src.is_dir() and generic.is_file()):
        pytest.skip(f"opensim-models not found at {LIBRARY}")
    for f in ("subject01_Setup_Scale.xml", "gait2354_Scale_MarkerSet.xml", "subject01_static.trc"):
        shutil.copy(src / f, tmp_path / f)
    shutil.copy(generic, tmp_path / generic.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaled = scale_tool(tmp_path / "subject01_Setup_Scale.xml")
    with jax.enable_x64(True):
        scaling = model_scaling(tmp_path / generic.name, marker_set=tmp_path / "gait2354_Scale_MarkerSet.xml")
        s0 = np.stack([scaled.factors[b] for b in scaling.bodies])
        d0 = scaling.marker_offsets(scaled.model, s0)
        weights, tasks = read_ik_tasks(src / "subject01_Setup_IK.xml")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = prepare_inverse_kinematics(
                scaling.model,
                src / "subject01_walk1.trc",
                marker_weights=weights,
                coordinate_tasks=tasks,
                start=0.4,
                end=0.5,
                dtype=jnp.float64,
            )
        fit = joint_fit(scaling, trial, factors=s0, offsets=d0, max_steps=15)
    assert fit.objective < fit.start_objective
    assert fit.marker_rms[0].mean() <= fit.start_marker_rms[0].mean()
    # the start is Scale-then-IK: IK on the ScaleTool's model gives the same RMS
    from jaxbio.io import inverse_kinematics_tool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ik = inverse_kinematics_tool(
            scaled.model,
            src / "subject01_walk1.trc",
            marker_weights=weights,
            coordinate_tasks=tasks,
            start=0.4,
            end=0.5,
        )
    np.testing.assert_allclose(fit.start_marker_rms[0], ik.errors.column("marker_error_RMS"), atol=1e-8)
