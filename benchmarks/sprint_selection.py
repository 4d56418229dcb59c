"""The per-race model choice (`jaxbio.sprint.selection`) on the embedded races and their noisy
variants (a transcribed first split, one bad split, segments that do not sum, re-rounded noise):
RMSE of the base model (F0/m, v_max, E free) and of the chosen one against both baselines.

    python benchmarks/sprint_selection.py

The races are those of the test ``tests/sprint/test_selection.py`` (``_noisy_variants``); a ✗
marks an RMSE above a baseline's. CPU, float64.
"""

import os
import sys

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.sprint import test_selection as T  # noqa: E402


def main():
    races = T._noisy_variants()
    base, res, fhk, tib = T._fit_with_baselines(races)
    best = np.minimum(fhk.rmse, tib.rmse)
    print("| race | base model RMSE [s] | chosen model RMSE [s] | FHK | Tibshirani | freed |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(races):
        sel = res.selection[i]
        vals = " ".join(f"{n} = {res.values[i, res.names.index(n)]:+.3f}" for n in sel["freed"])
        mark = lambda x: "" if x <= best[i] else " ✗"  # noqa: E731
        print(
            f"| {r.name} | {base.rmse[i]:.4f}{mark(base.rmse[i])} | {res.rmse[i]:.4f}{mark(res.rmse[i])} | "
            f"{fhk.rmse[i]:.4f} | {tib.rmse[i]:.4f} | {vals or '-'} |"
        )
    print(
        f"\n{len(races)} races: the base model fits worse than a baseline on {int(np.sum(base.rmse > best))}, "
        f"the chosen model on {int(np.sum(res.rmse > best))}"
    )


if __name__ == "__main__":
    main()
