"""The documentation site (mkdocs.yml, docs/).

- Every ```python block of docs/index.md, docs/*.md and docs/guides/*.md runs as written, on its
  own, in a fresh interpreter (working directory a temporary folder, PYTHONPATH the repository),
  unless the line just above its opening fence is ``<!-- no-test -->`` (slow: each block compiles
  its own models). The default run checks that every block parses and that each guide has at
  least one block that runs.
- The API reference (docs/api/*.md) is what docs/gen_api.py generates from the public modules'
  ``__all__``, so a new public name without a page fails; every public name is on a page.
- ``mkdocs build --strict`` passes (slow; skipped without mkdocs): a broken docstring, link or
  page fails the test suite too.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests._models import REPO

DOCS = REPO / "docs"
SKIP = "<!-- no-test -->"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)")


def pages() -> list[Path]:
    """The Markdown pages whose code blocks are tested (the API reference has none)."""
    return sorted({*DOCS.glob("*.md"), *(DOCS / "guides").glob("*.md")})


def code_blocks(text: str) -> list[tuple[int, str, bool]]:
    """``(line, source, skipped)`` of every fenced ``python`` block of a Markdown page."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = i + 1
        while end < len(lines):
            closing = _FENCE.match(lines[end])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence):
                if not lines[end].strip().strip(fence[0]):
                    break
            end += 1
        if opening["info"].lower() in ("python", "py", "python3"):
            body = "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end])
            skipped = i > 0 and lines[i - 1].strip() == SKIP
            blocks.append((i + 1, body + "\n", skipped))
        i = end + 1
    return blocks


def _name(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


BLOCKS = [(page, line, source, skipped) for page in pages() for line, source, skipped in code_blocks(page.read_text())]
RUNNABLE = [pytest.param(source, id=f"{_name(page)}:{line}") for page, line, source, skipped in BLOCKS if not skipped]


def test_code_blocks_found():
    text = "text\n\n```python\nx = 1\n```\n\n<!-- no-test -->\n```python\nimport nothing\n```\n\n- item\n\n    ```py\n    y = 2\n    ```\n````markdown\n```python\nnot a block of its own\n```\n````\n"
    assert code_blocks(text) == [(3, "x = 1\n", False), (8, "import nothing\n", True), (14, "y = 2\n", False)]


@pytest.mark.parametrize("page", sorted((DOCS / "guides").glob("*.md")), ids=_name)
def test_guide_has_runnable_code(page):
    assert any(not skipped for _, _, skipped in code_blocks(page.read_text())), (
        f"{_name(page)}: no runnable python block"
    )


@pytest.mark.parametrize("page", pages(), ids=_name)
def test_code_blocks_parse(page):
    for line, source, _ in code_blocks(page.read_text()):
        compile(source, f"{_name(page)}:{line}", "exec")


@pytest.mark.slow
@pytest.mark.parametrize("source", RUNNABLE)
def test_code_block_runs(source, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", source],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, f"the block failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def _gen_api():
    spec = importlib.util.spec_from_file_location("gen_api", DOCS / "gen_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_generated(tmp_path):
    _gen_api().write(tmp_path)
    expected = {path.name: path.read_text() for path in tmp_path.glob("*.md")}
    committed = {path.name: path.read_text() for path in (DOCS / "api").glob("*.md")}
    assert committed == expected, "docs/api/ is out of date: run `python docs/gen_api.py`"
    nav = (REPO / "mkdocs.yml").read_text()
    assert [name for name in sorted(expected) if f"api/{name}" not in nav] == [], "API pages missing from the nav"


def _sections() -> dict[str, str]:
    """``{module: its section of the reference}``: the text from its ``:::`` line to the next."""
    text = "\n".join(path.read_text() for path in sorted((DOCS / "api").glob("*.md")))
    parts = re.split(r"^::: (\S+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_api_reference_covers_every_public_name():
    gen = _gen_api()
    sections = _sections()
    missing = []
    for module_name in gen.public_modules():
        module = importlib.import_module(module_name)
        section = sections.get(module_name)
        if section is None:
            missing.append(module_name)
            continue
        for name in gen.public_names(module_name):
            member = re.search(rf"^ +- {re.escape(name)}$", section, re.M)
            link = f"[`{name}`][" in section
            submodule = inspect.ismodule(getattr(module, name)) and getattr(module, name).__name__ in sections
            if not (member or link or submodule):
                missing.append(f"{module_name}.{name}")
    assert missing == [], f"public names the reference does not document: {missing}"
    assert len(gen.public_modules()) > 30 and len(sections) == len(gen.public_modules())


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
