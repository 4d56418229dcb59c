"""Every Python block of docs/guides/learning.md runs as written, from a fresh interpreter, in float32
without x64 (slow: each block compiles its own models)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tests._models import REPO

BLOCKS = re.findall(
    r"```python\n(.*?)```", (REPO / "docs" / "guides" / "learning.md").read_text(encoding="utf-8"), re.S
)


def test_guide_has_code():
    assert len(BLOCKS) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_guide_block_runs(index, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, f"block {index} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.stdout.strip()
