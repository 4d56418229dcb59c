"""The numpy mass matrix that model reading uses (`jaxbio._rigid_numpy`, for `check_nonsingular`)
against the JAX kernel and against Pinocchio: two independent methods on random trees of every
joint type, with massless frames and slender rods."""

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio import _rigid_numpy
from jaxbio._validate import validate_model_dict
from tests._models import random_mixed_tree_dict


@pytest.mark.parametrize("seed", range(3))
def test_numpy_mass_matrix_equals_the_kernel(seed):
    rng = np.random.default_rng(seed)
    d = random_mixed_tree_dict(rng, 7, free_root=seed % 2 == 0, free_inner=seed % 3 == 0)
    v = validate_model_dict(d)
    with jax.enable_x64(True):
        tree = jb.SegmentTree.from_dict(d, dtype=jnp.float64)
        for _ in range(2):
            q = _rigid_numpy.random_configuration(v["joint_types"], rng)
            expected = np.asarray(jb.mass_matrix(tree, jnp.asarray(q)))
            got = _rigid_numpy.mass_matrix(v, q)
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


def test_numpy_mass_matrix_equals_pinocchio():
    pin = pytest.importorskip("pinocchio")
    from tests.pinocchio_ref import build_pinocchio_model, matrix_from_pin, q_to_pin

    rng = np.random.default_rng(11)
    d = random_mixed_tree_dict(rng, 6, free_root=True)
    v = validate_model_dict(d)
    model = build_pinocchio_model(d)
    q = _rigid_numpy.random_configuration(v["joint_types"], rng)
    expected = pin.crba(model, model.createData(), q_to_pin(model, q))
    expected = matrix_from_pin(model, np.triu(expected) + np.triu(expected, 1).T)
    np.testing.assert_allclose(_rigid_numpy.mass_matrix(v, q), expected, rtol=1e-12, atol=1e-12)


def _compilations(fn):
    """The XLA compilations that ``fn()`` starts (JAX's compile log), with JAX's caches emptied
    first so that an earlier test's program cannot hide one."""
    jax.clear_caches()
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            fn()
    finally:
        logger.removeHandler(handler)
    return [r.getMessage()[:80] for r in records if r.getMessage().startswith("Compiling")]


def test_reading_a_model_compiles_nothing():
    """arm7 has massless frames, so `check_nonsingular` evaluates M while it is read: in numpy."""
    assert float(jb.load_model("arm7").tree.masses.min()) == 0.0
    assert _compilations(lambda: jb.load_model("arm7")) == []
    assert _compilations(lambda: jb.load_model("wholebody", dtype=jnp.float32)) == []


@pytest.mark.parametrize("name, dtype", [("arm26.osim", jnp.float64), ("gait10dof18musc.osim", jnp.float32)])
def test_reading_an_opensim_model_compiles_nothing(name, dtype):
    """An ``.osim`` with Thelen muscles and wrap objects (arm26) and one with Millard muscles and a
    coupled knee (gait10dof18musc): its skeleton, forces, muscles and paths are built in numpy."""
    from pathlib import Path

    import jaxbio.io

    path = Path(__file__).parent / "io" / "data" / name
    assert _compilations(lambda: jaxbio.io.load_osim(path, dtype=dtype)) == []


def test_selecting_an_opensim_models_forces_compiles_nothing():
    """`OsimForces.select` (what the tools run before every trial) cuts concrete arrays on the host
    (`jaxbio._validate.take_rows`): no program compiled, the same rows as indexing them."""
    from pathlib import Path

    import jaxbio.io

    path = Path(__file__).parent / "io" / "data" / "so_spring" / "subject01_adjusted_spring.osim"
    forces = jaxbio.io.load_osim(path).forces  # Gait2354's reserves, limit forces and a spring
    names = [n for _, n in forces.order]
    kept = names[1::3]
    assert kept
    selected = _compilations(lambda: forces.select(kept)) == [] and forces.select(kept)
    assert selected and [n for _, n in selected.order] == kept
    batches = [f.name for f in dataclasses.fields(forces) if hasattr(getattr(forces, f.name), "take")]
    checked = 0
    for field in batches:
        before, after = getattr(forces, field), getattr(selected, field)
        if field == "contacts" or not len(before):  # contacts re-index their surfaces and pairs
            continue
        checked += 1
        rows = [k for k, n in enumerate(before.names) if n in set(kept)]
        for f in dataclasses.fields(before):
            v, w = getattr(before, f.name), getattr(after, f.name)
            if isinstance(v, tuple):
                assert w == tuple(v[i] for i in rows)
            else:
                np.testing.assert_array_equal(np.asarray(w), np.asarray(v)[rows])
    assert checked
