"""The command line's shared helpers: the argparse parser with one-line errors and its numeric
argument types, float64 for the commands that validate models, the input error of the model and
motion commands; and the output helpers of the two runs of ``jaxbio sprint`` (split files,
`jaxbio.cli._sprint`; speed traces, `jaxbio.cli._sprint_traces`)."""

from __future__ import annotations

import argparse
import os
import json
import sys

import numpy as np


MAX_MESSAGE = 1000  # the longest error line printed, in characters


def one_line(message) -> str:
    """An error message as one line of at most `MAX_MESSAGE` characters: line breaks become
    spaces, and a longer message keeps its start and its end (where the reason usually is). The
    values inside are already cut by `jaxbio._validate.echo`; this is the last guard."""
    text = str(message).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    if len(text) > MAX_MESSAGE:
        text = f"{text[: MAX_MESSAGE * 2 // 3]} … {text[-(MAX_MESSAGE // 3 - 3) :]}"
    return text


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``jaxbio id: error: …`` on stderr, exit 2; no usage block)."""

    def error(self, message):
        self.exit(2, one_line(f"{self.prog}: error: {message} (see '{self.prog} --help')") + "\n")


def _number(kind: str, check, what: str):
    """An argparse ``type``: ``kind`` (``int``/``float``) that passes ``check``, else the error
    "must be ``what``, got …"."""
    from jaxbio._validate import echo

    def parse(text: str):
        try:
            value = int(text) if kind == "int" else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {echo(text)}") from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {echo(text)}")
        return value

    parse.__name__ = kind
    return parse


#: the persistent compilation cache of every ``jaxbio`` command: ``JAXBIO_JAX_CACHE`` (a folder; ``0``
#: turns it off), by default ``~/.cache/jaxbio/jax``
def cache_dir() -> str | None:
    """The folder of the command line's persistent XLA cache, or None when ``JAXBIO_JAX_CACHE=0``."""
    cache = os.environ.get("JAXBIO_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "jaxbio", "jax"))
    return cache if cache and cache != "0" else None


def _setup_jax():
    """What every ``jaxbio`` command sets before it computes (a process setting, made by the
    command line only; the library changes no global JAX configuration): float64 (the CLI
    validates in float64, API.md) and JAX's persistent compilation cache (`cache_dir`), every
    program cached however short its compile, so that the second run of a command compiles
    nothing: a cold ``jaxbio run-tool`` of a gait trial's ID traces its programs and reads them
    from the cache instead of compiling about 20 of them."""
    import jax

    jax.config.update("jax_enable_x64", True)
    cache = cache_dir()
    if cache is not None:
        try:
            jax.config.update("jax_compilation_cache_dir", cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
            from jaxbio import _aot

            _aot.CACHE["dir"] = os.path.join(cache, "exported")  # traced programs too (jaxbio._aot)
        except Exception:  # noqa: BLE001 — an unusable cache only costs time
            pass


class _InputError(ValueError):
    """Bad user input of ``jaxbio id``: printed as one line, exit 2 (a ``ValueError``, so that it
    is caught as one also where a module of the command line runs as ``__main__`` and the class
    exists twice)."""


def _progress(total, disable):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    if tqdm is None or disable:

        class _Null:
            def update(self, n=1):
                pass

            def set_description(self, d):
                pass

            def close(self):
                pass

        return _Null()
    return tqdm(total=total, file=sys.stderr, leave=False, bar_format="{desc} {bar} {n_fmt}/{total_fmt} [{elapsed}]")


def exit_code(items, problems, baselines) -> int:
    """Print one stderr line per item (race or trace) whose fit is not a valid estimate and one
    for baselines that did not converge; 1 if there is any, else 0."""
    for r, p in zip(items, problems):
        if p:
            print(f"jaxbio sprint: {r.name} ({r.path}): not a valid fit: {'; '.join(p.values())}", file=sys.stderr)
    bad = [f"{r.name} ({b.kind})" for b in baselines for i, r in enumerate(items) if not b.converged[i]]
    if bad:
        print(f"jaxbio sprint: the fit did not converge for {', '.join(bad)}", file=sys.stderr)
    return 1 if bad or any(problems) else 0


def _write_json(f, obj):
    # allow_nan=False: NaN is not JSON; _record writes null for a value that is not finite
    f.write((json.dumps(obj, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def _json_number(x):
    """A float for JSON, or None when not finite."""
    x = float(x)
    return x if np.isfinite(x) else None


def _value_text(v, digits):
    return f"{v:.{digits}f}" if np.isfinite(v) and abs(v) < 1e6 else f"{v:.3g}"


def _fmt_pm(v, s, digits, flagged=False):
    """``value ± std``; ``n/a`` for a std that is not a positive number (a parameter the splits
    do not determine: never ``± 0``); `` !`` after a parameter that is not a valid estimate."""
    std = f"{s:.{digits}f}" if np.isfinite(s) and s > 0 else "n/a"
    return f"{_value_text(v, digits)} ± {std}" + (" !" if flagged else "")
