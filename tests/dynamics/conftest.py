"""Fixtures shared by the Pinocchio comparisons (tests/dynamics/test_pinocchio.py and
test_joints_pinocchio.py)."""

import pytest


@pytest.fixture(scope="module")
def jb():
    jaxbio = pytest.importorskip("jaxbio")
    if getattr(jaxbio, "__file__", None) is None:  # bare directory, no jaxbio/__init__.py yet
        pytest.skip("jaxbio is not importable yet")
    return jaxbio


@pytest.fixture
def _float64():
    """Run in float64 whether or not tests/conftest.py already enabled it (no global change)."""
    import jax

    with jax.enable_x64(True):
        yield
