"""Regenerate the API reference, docs/api/*.md, from the public modules' ``__all__``.

    python docs/gen_api.py            # rewrite docs/api/ (and delete pages no module needs)
    python docs/gen_api.py OUT_DIR    # write the pages elsewhere (tests/test_docs.py compares)

Public modules: every module and package under ``jaxbio`` with no name part starting with an
underscore. One page per top-level public module or package (``docs/api/<name>.md``), holding
the module and then each public submodule below it; ``docs/api/index.md`` lists the names of
``jaxbio.__all__`` with a link to where each is documented.

Each module's section renders (``::: path`` with an explicit ``members`` list) the names of its
``__all__`` (a module without ``__all__``: the public names it defines, from its source) that
are not documented already: a name that a package re-exports from its submodule is documented
once, under the package (the first path a reader meets), and the submodule's section links to
it. Submodules in ``__all__`` get their own sections. Lazily exported names (`jaxbio._lazy`)
reach Griffe through docs/griffe_lazy.py. Raises if a public name ends up nowhere, so the
reference cannot miss one.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
API = REPO / "docs" / "api"
PACKAGE = "jaxbio"


def public_modules() -> list[str]:
    """Every public module under jaxbio (the package first, parents before children)."""
    package = importlib.import_module(PACKAGE)
    names = [
        info.name
        for info in pkgutil.walk_packages(package.__path__, PACKAGE + ".")
        if not any(part.startswith("_") for part in info.name.split("."))
    ]
    return [PACKAGE, *sorted(names)]


def public_names(module_name: str) -> list[str]:
    """``__all__``, or for a module without one the public names its source defines."""
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    tree = ast.parse(Path(inspect.getfile(module)).read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in dict.fromkeys(names) if not n.startswith("_")]


def _kind(value) -> str:
    if inspect.ismodule(value):
        return "module"
    if inspect.isclass(value):
        return "class"
    if callable(value):
        return "function"
    return "constant"


def _directive(path: str, members: list[str], heading_level: int) -> str:
    lines = [f"::: {path}", "    options:", f"      heading_level: {heading_level}"]
    if members:
        lines += ["      members:", *(f"        - {name}" for name in members)]
    else:
        lines.append("      members: false")
    return "\n".join(lines)


def pages() -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """``({file name: Markdown}, {(module, name): identifier it is documented under})``."""
    modules = public_modules()
    documented: dict[tuple[str, int], str] = {}  # (name, id(value)) -> identifier
    located: dict[tuple[str, str], str] = {}
    sections: dict[str, list[str]] = {}  # page -> sections
    for module_name in modules[1:]:
        top = module_name.split(".")[1]
        module = importlib.import_module(module_name)
        names = public_names(module_name)
        members, elsewhere = [], []
        for name in names:
            value = getattr(module, name)
            if inspect.ismodule(value):
                if value.__name__ not in modules:
                    raise ValueError(f"{module_name}.{name}: a module outside the public modules")
                located[module_name, name] = value.__name__
                continue
            key = (name, id(value))
            if key in documented:
                elsewhere.append(name)
                located[module_name, name] = documented[key]
            else:
                members.append(name)
                documented[key] = located[module_name, name] = f"{module_name}.{name}"
        text = _directive(module_name, members, 1 if module_name == f"{PACKAGE}.{top}" else 2)
        if elsewhere:
            links = ", ".join(f"[`{name}`][{located[module_name, name]}]" for name in elsewhere)
            text += f"\n\nAlso exported by `{module_name}`, documented above: {links}."
        sections.setdefault(top, []).append(text)

    texts = {f"{top}.md": "\n\n".join(parts) + "\n" for top, parts in sections.items()}
    package = importlib.import_module(PACKAGE)
    rows = []
    for name in package.__all__:
        value = getattr(package, name)
        if inspect.ismodule(value):
            target = located[PACKAGE, name] = value.__name__
        else:
            target = located[PACKAGE, name] = documented[name, id(value)]
        rows.append(f"| [`{name}`][{target}] | {_kind(value)} | `{target}` |")
    packages = [f"- [`{PACKAGE}.{top}`][{PACKAGE}.{top}]" for top in sections]
    texts["index.md"] = "\n".join(
        [
            "---\ntitle: API reference\n---\n",
            _directive(PACKAGE, [], 1),
            "",
            f"## Names of `{PACKAGE}`",
            "",
            f"Every name of `{PACKAGE}.__all__`, and where it is documented.",
            "",
            "| Name | Kind | Documented as |",
            "| --- | --- | --- |",
            *rows,
            "",
            "## Modules",
            "",
            *packages,
            "",
        ]
    )
    for module_name in modules:
        for name in public_names(module_name):
            if (module_name, name) not in located:
                raise ValueError(f"{module_name}.{name} is documented nowhere")
    return texts, located


def write(directory: Path) -> list[Path]:
    """Write the pages into ``directory`` (deleting other .md files there); their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    texts, _ = pages()
    for stale in directory.glob("*.md"):
        if stale.name not in texts:
            stale.unlink()
    written = []
    for name, text in texts.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    for path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else API):
        print(path)
