"""What every benchmark here records beside its numbers, and how it times a call (one home for the
scripts of this folder; run them from the repository root, ``python benchmarks/<name>.py``).

- `machine(**versions)`: one line naming the machine: date, CPU model and its vector ISA flags, core
  count, whether the process was pinned (`threads`), load average, python/jax/jaxlib versions,
  backend (plus any library versions given).
- `load_average()`: ``uptime``'s line and ``os.getloadavg()``, to print at the start and the end.
- `best_time(fn)`: best-of-k seconds per call of an already warmed-up ``fn``.
- `finish(out, json_path)`: the closing load line, and every number as JSON when asked.
- `opensim_or_none()`: OpenSim's Python module (quiet: errors only, no log file) and its version
  for `machine`, or ``(None, {})`` where it is not installed.
- `row(...)`: one line of the common table that ``python -m benchmarks`` prints: every script puts
  its rows in ``out["rows"]`` of the JSON it writes with ``--json``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

REPEATS = 5  # best-of-k
MIN_REPEAT_S = 0.05  # each repetition runs the call enough times to last at least this long
ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


def best_time(fn, repeats: int = REPEATS, min_time: float = MIN_REPEAT_S) -> float:
    """Best-of-``repeats`` seconds per call of ``fn`` (already warmed up).

    A repetition calls ``fn`` ``inner`` times, ``inner`` chosen once so that a repetition lasts at
    least ``min_time`` (so that a call of a few µs is not timed on its own).
    """
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    inner = max(1, int(np.ceil(min_time / max(once, 1e-9))))
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return float(best)


def load_average() -> dict:
    """``uptime``'s line and ``os.getloadavg()`` (1, 5, 15 min)."""
    try:
        line = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        line = ""
    return {"uptime": line, "loadavg": list(os.getloadavg())}


def cpu() -> tuple[str, str]:
    """``(model name, the vector ISA flags of ISA_FLAGS it has)`` from ``/proc/cpuinfo`` (``"?"``
    where unknown)."""
    name, flags = platform.processor() or "?", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name in ("?", "x86_64", ""):
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = " ".join(x for x in ISA_FLAGS if x in have)
                    break
    except OSError:
        pass
    return name, flags or "?"


def threads() -> str:
    """How the process may use the cores: ``"unpinned"``, or ``"pinned to k of n cores"`` (CPU
    affinity, e.g. ``taskset``), plus ``PJRT_NPROC``/``NPROC`` where set (they size XLA's CPU thread
    pool, which otherwise has one thread per core the process may use)."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = os.cpu_count()
    text = "unpinned" if allowed == os.cpu_count() else f"pinned to {allowed} of {os.cpu_count()} cores"
    for var in ("PJRT_NPROC", "NPROC"):
        if os.environ.get(var):
            text += f", {var}={os.environ[var]}"
    return text


def machine(**versions: str) -> str:
    """The machine line: date, CPU (flags), cores, whether the process is pinned (`threads`), load
    average, python, jax, jaxlib, backend, and ``versions`` (``name=version``) of the other libraries
    a benchmark times."""
    import jax
    import jaxlib

    name, flags = cpu()
    extra = "".join(f", {k} {v}" for k, v in versions.items())
    return (
        f"{datetime.date.today().isoformat()}, {name} (flags: {flags}), {os.cpu_count()} cores "
        f"({threads()}), load average {os.getloadavg()[0]:.1f}; python {platform.python_version()}, "
        f"jax {jax.__version__}, jaxlib {jaxlib.__version__}{extra}, backend {jax.default_backend()}"
    )


def row(
    operation: str,
    model: str,
    batch: int,
    seconds: float,
    *,
    unit: str = "state",
    compile_s: float | None = None,
    peer: str | None = None,
    peer_seconds: float | None = None,
    note: str = "",
) -> dict:
    """One row of the common table (``python -m benchmarks``).

    ``seconds``: jaxbio's seconds per ``unit`` (a state, a frame, a trajectory, a race, a step),
    steady state; ``compile_s``: its compile time (s); ``peer``: what it is compared with, timed in
    the same run, ``peer_seconds`` the peer's seconds per ``unit``; ``ratio`` = peer / jaxbio (above
    1: jaxbio faster). ``batch``: the items per call."""
    seconds = float(seconds)
    peer_s = None if peer_seconds is None else float(peer_seconds)
    return {
        "operation": operation,
        "model": model,
        "batch": int(batch),
        "unit": unit,
        "seconds": seconds,
        "per_second": 1.0 / seconds if seconds > 0 else None,
        "compile_s": None if compile_s is None else float(compile_s),
        "peer": peer,
        "peer_seconds": peer_s,
        "ratio": peer_s / seconds if peer_s and seconds > 0 else None,
        "note": note,
    }


def finish(out: dict, json_path: str | None) -> None:
    """Print the load at the end (stored in ``out["load_end"]``); write ``out`` to ``json_path``."""
    out.setdefault("machine", machine())
    out["load_end"] = load_average()
    print(f"\nload at end: {out['load_end']['uptime']}")
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=1) + "\n")
        print(f"numbers written to {json_path}")


def opensim_or_none():
    """``(opensim, {"opensim": version})`` with OpenSim's logging quiet (errors only, no log file),
    or ``(None, {})`` where the bindings are not importable."""
    try:
        import opensim
    except ImportError:
        return None, {}
    opensim.Logger.removeFileSink()
    opensim.Logger.setLevelString("error")
    return opensim, {"opensim": opensim.__version__}
