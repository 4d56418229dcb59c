"""Fixtures of the jaxbio.io tests."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_opensim_log_file():
    """OpenSim opens ``opensim.log`` in the working directory (the repository) on its first
    message; the comparisons with OpenSim log to the console only."""
    try:
        import opensim
    except ImportError:
        return
    opensim.Logger.removeFileSink()
