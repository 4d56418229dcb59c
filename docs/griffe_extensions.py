"""Griffe extensions for the API reference (``mkdocs.yml`` loads both).

`LazyExports`: the names jaxbio's packages export lazily. jaxbio's packages import some of their names on first use (`jaxbio._lazy.attach`, PEP 562
``__getattr__``), so Griffe's static analysis does not see them: ``jaxbio.batch``,
``jaxbio.io.load_osim`` or ``jaxbio.muscles.MusclePaths`` are in ``__all__`` but bound nowhere
in the package's source. This extension imports each package, and for every name of its
``__all__`` that Griffe did not find adds an alias to the object the name is bound to at run time
(its defining module and qualified name; a name bound in the module itself in a way Griffe does
not read, such as tuple unpacking, becomes a plain attribute), so that ``::: jaxbio.io.load_osim`` renders the
function defined in ``jaxbio.io.osim`` under its public path. It also sets each module's exports
to its run-time ``__all__`` (``jaxbio.learning`` computes its own).

`MarkdownSections`: jaxbio's docstrings are Markdown, most of them free-form (bullet lists such as
``- ``q``: (nq,) rad``), some with Google-style ``Args:``, ``Returns:``, ``Raises:`` or ``Fields:``
sections whose entries are prose (``q, qd, qdd: ...``, ``ValueError (before tracing): ...``)
that Griffe's Google parser would drop or misread. The reference renders docstrings unparsed
(``docstring_style: null``), and this extension rewrites those sections as Markdown first: a bold
title, and for arguments and fields one bullet per entry with its names in code.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import griffe

# the jaxbio that Griffe reads (mkdocs.yml's paths: ["."]), not another installed copy
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _target(package: str, name: str, value: Any) -> str | None:
    """The path Griffe knows ``value`` by (``package.name`` bound at run time), or None."""
    if inspect.ismodule(value):
        return value.__name__
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if module and qualname and module.startswith("jaxbio"):
        return f"{module}.{qualname}"
    # a constant: the loaded jaxbio module that binds the same object under the same name
    for module_name, module in sorted(sys.modules.items()):
        if (
            module_name.startswith("jaxbio.")
            and module_name != package
            and getattr(module, name, None) is value
            and name in vars(module)
        ):
            return f"{module_name}.{name}"
    return None


class LazyExports(griffe.Extension):
    """Aliases for the lazily exported names of every jaxbio module (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.path != "jaxbio":
            return
        modules = [pkg]
        while modules:
            module = modules.pop()
            modules.extend(m for m in module.modules.values() if not m.is_alias)
            self._add_aliases(module)

    @staticmethod
    def _add_aliases(module: griffe.Module) -> None:
        if any(part.startswith("_") for part in module.path.split(".")):
            return
        runtime = importlib.import_module(module.path)
        names = getattr(runtime, "__all__", None)
        if names is None:
            return
        module.exports = list(names)
        for name in names:
            if name in module.members:
                continue
            if name in vars(runtime) and _target(module.path, name, vars(runtime)[name]) is None:
                # bound here in a way Griffe does not read (``X, Y, Z = np.eye(3)``)
                module.set_member(name, griffe.Attribute(name, parent=module))
                continue
            target = _target(module.path, name, getattr(runtime, name))
            if target is None:
                raise ValueError(f"{module.path}.{name}: cannot find where it is defined")
            module.set_member(name, griffe.Alias(name, target, parent=module))


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Fields|Returns|Yields|Raises):\s*$")
_ENTRY = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)(\s*\([^)]*\))?:\s+(.*)$")
_TITLES = {"Args": "Arguments", "Parameters": "Arguments"}
_LISTS = {"Args", "Arguments", "Parameters", "Fields"}


def markdown_sections(text: str) -> str:
    """``text`` with each Google-style section (a title line, then an indented block) as Markdown."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _SECTION.match(lines[i])
        if not match or i + 1 >= len(lines) or not lines[i + 1].startswith((" ", "\t")):
            out.append(lines[i])
            i += 1
            continue
        end = i + 1
        while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
            end += 1
        while not lines[end - 1].strip():
            end -= 1
        block = textwrap.dedent("\n".join(lines[i + 1 : end])).split("\n")
        title = match.group(1)
        if out and out[-1].strip():
            out.append("")
        out += [f"**{_TITLES.get(title, title)}:**", ""]
        for line in block:
            if title not in _LISTS:
                out.append(line)
            elif line[:1] not in (" ", "\t", ""):
                entry = _ENTRY.match(line)
                if entry:
                    names = ", ".join(f"``{name.strip()}``" for name in entry.group(1).split(","))
                    out.append(f"- {names}{entry.group(2) or ''}: {entry.group(3)}")
                else:
                    out.append(f"- {line}")
            else:
                out.append("  " + line.strip() if line.strip() else "")
        if end < len(lines) and lines[end].strip():
            out.append("")
        i = end
    return "\n".join(out)


class MarkdownSections(griffe.Extension):
    """Google-style sections of every docstring as Markdown (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_sections(obj.docstring.value)
