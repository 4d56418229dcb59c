"""Every script in ``examples/`` runs to the end from a fresh interpreter (slow: ~70 s in all, plus
11–21 s for opensim_mass_estimation.py and the learning examples' training: learning_fatigue.py
~2 min; hence the 900 s bound). Two run with fewer Adam steps (`ARGS`): learning_controller.py,
whose full training took 12 min in CI's slow run on a 2-core Intel Xeon (6–10 min on the AMD
machine before), close to the bound, and learning_muscle_forces.py, whose full training (77 s here)
tests/learning/test_estimators.py repeats and checks. The trained errors they report are the full
runs', in docs/guides/learning.md.

The examples are what a new user copies first; their numbers are checked where the library's
functions are tested, so this only guards against an example that no longer runs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests._models import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.py"))
# arguments for a shorter run of the same script (every code path, fewer training steps)
ARGS = {
    "learning_controller.py": ["--steps", "15", "--muscle-steps", "10"],
    "learning_muscle_forces.py": ["--steps", "300"],
}


def test_examples_found():
    assert len(EXAMPLES) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    done = subprocess.run(
        [sys.executable, str(script), *ARGS.get(script.name, [])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.stdout.strip(), f"{script.name} printed nothing"
