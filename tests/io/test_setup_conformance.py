"""Every InverseDynamicsTool and static-optimisation AnalyzeTool setup under the folders of
``$JAXBIO_OPENSIM_SETUPS`` (``os.pathsep``-separated; default opensim-models' ``/work/om/Pipelines``)
run unedited by ``jaxbio run-tool`` and by live OpenSim, compared (`tests.io.setup_conformance`).
Slow (minutes per static optimisation); skipped when the folders or OpenSim are absent. A setup
whose inputs an earlier pipeline step writes (scaled models, IK, RRA results) is skipped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.io.setup_conformance import compare, find_setups

FOLDERS = [Path(p) for p in os.environ.get("JAXBIO_OPENSIM_SETUPS", "/work/om/Pipelines").split(os.pathsep) if p]
SETUPS = find_setups([f for f in FOLDERS if f.is_dir()])


@pytest.mark.slow
@pytest.mark.parametrize("setup", SETUPS or [None], ids=lambda s: "none" if s is None else str(s))
def test_setup_runs_and_agrees_with_opensim(setup):
    if setup is None:
        pytest.skip(f"no OpenSim setups under {FOLDERS} (set JAXBIO_OPENSIM_SETUPS)")
    pytest.importorskip("opensim")
    row = compare(setup)
    if row.status in ("inputs missing", "OpenSim fails"):
        pytest.skip(f"{row.status}: {row.notes}")
    assert row.status == "agrees", (row.status, row.notes, row.files)
