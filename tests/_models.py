"""Model dicts built inside the tests (independent of the shipped JSON files)."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation


def double_pendulum_dict(m1=1.0, m2=1.0, l1=1.0, l2=0.5) -> dict:
    """Seed 004's two uniform rods hanging along -y, planar (gravity -y, axes +z)."""

    def rod(name, parent, origin, m, length):
        return {
            "name": name,
            "parent": parent,
            "joint": {"type": "revolute", "axis": [0, 0, 1], "origin": origin, "orientation": [1, 0, 0, 0]},
            "mass": m,
            "com": [0, -length / 2, 0],
            "inertia": [[m * length**2 / 12, 0, 0], [0, 1e-6, 0], [0, 0, m * length**2 / 12]],
        }

    return {
        "format": "jaxbio-model",
        "version": 1,
        "name": "double_pendulum_test",
        "gravity": [0, -9.81, 0],
        "segments": [rod("rod1", None, [0, 0, 0], m1, l1), rod("rod2", "rod1", [0, -l1, 0], m2, l2)],
    }


def random_inertia(rng) -> np.ndarray:
    """SPD, triangle inequality satisfied, randomly rotated."""
    a, b = rng.uniform(0.01, 0.2, 2)
    c = rng.uniform(abs(a - b) + 1e-3, a + b)
    R = Rotation.random(random_state=int(rng.integers(1 << 31))).as_matrix()
    return R @ np.diag([a, b, c]) @ R.T


def random_model_dict(rng, n: int, chain: bool = False) -> dict:
    """A random tree: parents among earlier segments, mixed joint types, arbitrary axes/frames."""
    segs = []
    for i in range(n):
        parent = None if i == 0 else (f"s{i - 1}" if chain else (None if rng.random() < 0.1 else f"s{rng.integers(i)}"))
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        segs.append(
            {
                "name": f"s{i}",
                "parent": parent,
                "joint": {
                    "type": "prismatic" if rng.random() < 0.25 else "revolute",
                    "axis": axis.tolist(),
                    "origin": rng.uniform(-0.5, 0.5, 3).tolist(),
                    "orientation": Rotation.random(random_state=int(rng.integers(1 << 31))).as_quat()[[3, 0, 1, 2]].tolist(),
                },
                "mass": float(rng.uniform(0.5, 5.0)),
                "com": rng.uniform(-0.3, 0.3, 3).tolist(),
                "inertia": random_inertia(rng).tolist(),
            }
        )
    return {"name": f"random{n}", "gravity": [0, 0, -9.81], "segments": segs}


#: the repository root (tests live in sub-folders that mirror the package)
REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def hinge_chains(d: dict) -> dict:
    """``d`` with every ball joint as three revolute links (about the joint frame's x, y, z, a
    body-fixed sequence) and every free joint as three prismatic links (x, y, z) then three
    revolute ones; the added links are massless frames named ``<segment>_tx`` … ``<segment>_ry``
    and the last link of each chain is the original segment. Fixed joints are left as they are.

    An axial tree (``nq == nv``) with the same bodies: applied to the shipped ``wholebody`` it has
    the 28 segments and the topology of the pre-quaternion model (6-link floating base, 3-link
    lumbar, shoulders and hips), so it exercises the batch-last kernels that only axial trees run.
    """
    links = {"spherical": [("rx", "revolute", 0), ("ry", "revolute", 1)],
             "free": [("tx", "prismatic", 0), ("ty", "prismatic", 1), ("tz", "prismatic", 2),
                      ("rx", "revolute", 0), ("ry", "revolute", 1)]}
    last = {"spherical": ("revolute", 2), "free": ("revolute", 2)}
    eye = np.eye(3)
    segs = []
    for s in d["segments"]:
        j = s["joint"]
        if j["type"] not in links:
            segs.append(s)
            continue
        parent, joint = s["parent"], {"origin": list(j["origin"]), "orientation": list(j["orientation"])}
        for suffix, jtype, k in links[j["type"]]:
            name = f"{s['name']}_{suffix}"
            segs.append({"name": name, "parent": parent,
                         "joint": {"type": jtype, "axis": eye[k].tolist(), **joint},
                         "mass": 0.0, "com": [0.0, 0.0, 0.0], "inertia": np.zeros((3, 3)).tolist()})
            parent, joint = name, {"origin": [0.0, 0.0, 0.0], "orientation": [1.0, 0.0, 0.0, 0.0]}
        jtype, k = last[j["type"]]
        segs.append({**s, "parent": parent, "joint": {"type": jtype, "axis": eye[k].tolist(), **joint}})
    return {**d, "name": f"{d['name']}_hinges", "segments": segs}
