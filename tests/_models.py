"""Model dicts built inside the tests (independent of the shipped JSON files)."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation


def double_pendulum_dict(m1=1.0, m2=1.0, l1=1.0, l2=0.5) -> dict:
    """Watanabe & Duarte's two uniform rods hanging along -y, planar (gravity -y, axes +z)."""

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


def notebook_euler(n_steps: int, every: int = 100, pid: bool = False) -> np.ndarray:
    """Watanabe & Duarte's explicit Euler loop as the notebook writes it (dt = 1e-4 s,
    ``np.linalg.inv(M) @ (C + G + Q)``, state ``(ω₁, ω₂, θ₁, θ₂)``), with ``G``'s first row as in
    its equation (``m₂ g l₁``; the notebook's code has ``m₂ g l₂``). ``pid``: its commented PID line
    uncommented (free shoulder, ``Q = (−M₁₂, M₁₂)``, ``M₁₂ = 30(r − θ₂) − 2ω₂ + 3∫(r − θ₂)dt`` with
    ``np.trapz`` over all samples each step, O(n²)); otherwise ``Q = 0``. Returns
    ``(4, n_steps // every + 1)``."""
    g, m1, m2, l1, l2, dt, r = 9.81, 1.0, 1.0, 1.0, 0.5, 1e-4, np.pi / 3
    trapezoid = np.trapezoid if hasattr(np, "trapezoid") else np.trapz
    state = np.zeros((4, n_steps + 1))
    state[:, 0] = np.array([2 * np.pi, -6 * np.pi, np.pi / 10, np.pi / 3])
    Q = np.zeros((2, 1))
    for i in range(1, n_steps + 1):
        thetaDiff = state[2, i - 1] - state[3, i - 1]
        M = np.array(
            [
                [m1 * l1**2 / 3 + m2 * l1**2, m2 * l1 * l2 * np.cos(thetaDiff) / 2],
                [m2 * l1 * l2 * np.cos(thetaDiff) / 2, m2 * l2**2 / 3],
            ]
        )
        C = np.array(
            [
                [-m2 * l1 * l2 * np.sin(thetaDiff) * state[1, i - 1] ** 2 / 2],
                [m2 * l1 * l2 * np.sin(thetaDiff) * state[0, i - 1] ** 2 / 2],
            ]
        )
        G = np.array(
            [
                [-m1 * g * l1 / 2 * np.sin(state[2, i - 1]) - m2 * g * l1 * np.sin(state[2, i - 1])],
                [-m2 * g * l2 / 2 * np.sin(state[3, i - 1])],
            ]
        )
        if pid:
            M12 = 30 * (r - state[3, i - 1]) - 2 * state[1, i - 1] + 3 * trapezoid(r - state[3, 0:i]) * 1e-4
            Q = np.array([[0 - M12], [M12]])
        dstatedt = np.vstack((np.linalg.inv(M) @ (C + G + Q), state[0, [i - 1]], state[1, [i - 1]]))
        state[:, [i]] = state[:, [i - 1]] + dt * dstatedt
    return state[:, ::every]


def slider_dict(mass=2.0) -> dict:
    """One horizontal prismatic segment: a point mass on a rail (gravity ⟂ rail)."""
    return {
        "name": "slider",
        "gravity": [0, 0, -9.81],
        "segments": [
            {
                "name": "cart",
                "parent": None,
                "joint": {"type": "prismatic", "axis": [1, 0, 0], "origin": [0, 0, 0], "orientation": [1, 0, 0, 0]},
                "mass": mass,
                "com": [0, 0, 0],
                "inertia": [[0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]],
            }
        ],
    }


def random_inertia(rng) -> np.ndarray:
    """SPD, triangle inequality satisfied, randomly rotated."""
    a, b = rng.uniform(0.01, 0.2, 2)
    c = rng.uniform(abs(a - b) + 1e-3, a + b)
    R = Rotation.random(random_state=int(rng.integers(1 << 31))).as_matrix()
    return R @ np.diag([a, b, c]) @ R.T


def random_model_dict(rng, n: int, chain: bool = False, parents=None) -> dict:
    """A random tree: parents among earlier segments, mixed joint types, arbitrary axes/frames.
    ``parents``: the parent index of each segment (``-1`` the world; ``n`` of them) instead of
    random ones (`star_parents`, `bushy_parents`)."""
    segs = []
    for i in range(n):
        if parents is not None:
            parent = None if parents[i] < 0 else f"s{parents[i]}"
        else:
            parent = (
                None if i == 0 else (f"s{i - 1}" if chain else (None if rng.random() < 0.1 else f"s{rng.integers(i)}"))
            )
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
                    "orientation": Rotation.random(random_state=int(rng.integers(1 << 31)))
                    .as_quat()[[3, 0, 1, 2]]
                    .tolist(),
                },
                "mass": float(rng.uniform(0.5, 5.0)),
                "com": rng.uniform(-0.3, 0.3, 3).tolist(),
                "inertia": random_inertia(rng).tolist(),
            }
        )
    return {"name": f"random{n}", "gravity": [0, 0, -9.81], "segments": segs}


def star_parents(leaves: int) -> tuple[int, ...]:
    """One root with ``leaves`` children (the widest tree of its size)."""
    return (-1,) + (0,) * leaves


def bushy_parents(rng, n: int) -> tuple[int, ...]:
    """A random tree by preferential attachment: segment ``i`` picks an earlier segment with
    probability proportional to its children + 1 (the world: one root), so that a few segments get
    tens to hundreds of children (a uniform choice gives each about ``log n``)."""
    parents, weight = [-1], [1.0]
    for i in range(1, n):
        w = np.asarray(weight)
        p = int(rng.choice(i, p=w / w.sum()))
        parents.append(p)
        weight[p] += 1.0
        weight.append(1.0)
    return tuple(parents)


def uniform_parents(rng, n: int) -> tuple[int, ...]:
    """A random recursive tree: segment ``i`` picks its parent uniformly among the earlier ones."""
    return (-1,) + tuple(int(rng.integers(i)) for i in range(1, n))


# ---- trees with every joint type (spherical, free, fixed), massless frames and slender rods ----

#: configuration / velocity size of each joint type (API.md; restated here, independent of jaxbio)
JOINT_NQ = {"revolute": 1, "prismatic": 1, "spherical": 4, "free": 7, "fixed": 0}
JOINT_NV = {"revolute": 1, "prismatic": 1, "spherical": 3, "free": 6, "fixed": 0}
#: default joint-type weights of `random_mixed_tree_dict` (``"free"`` only with ``free_inner``)
MIXED_WEIGHTS = {"revolute": 0.3, "prismatic": 0.15, "spherical": 0.25, "fixed": 0.2, "free": 0.1}


def coordinate_offsets(joint_types) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Cumulative ``q`` and ``v`` offsets, ``n_segments + 1`` long (the last entries are nq and nv)."""
    q, v = [0], [0]
    for t in joint_types:
        q.append(q[-1] + JOINT_NQ[t])
        v.append(v[-1] + JOINT_NV[t])
    return tuple(q), tuple(v)


def model_sizes(d: dict) -> tuple[int, int]:
    """``(nq, nv)`` of a model dict."""
    q, v = coordinate_offsets([s["joint"]["type"] for s in d["segments"]])
    return q[-1], v[-1]


def _random_quaternion(rng) -> np.ndarray:
    """Uniform unit quaternion ``(w, x, y, z)`` (either sign of ``w``)."""
    x = rng.normal(size=4)
    return x / np.linalg.norm(x)


def random_mixed_tree_dict(
    rng,
    n_segments: int,
    *,
    free_root: bool = True,
    free_inner: bool = False,
    weights: dict | None = None,
    p_massless: float = 0.25,
    p_rod: float = 0.2,
    p_world: float = 0.1,
    gravity=None,
    name: str | None = None,
) -> dict:
    """A random tree mixing every joint type, massless frames and slender rods (a model dict, the
    layout of `SegmentTree.to_dict`: no ``axis`` on spherical, free and fixed joints).

    Topology: segment 0 is a root; each later one hangs from the world with probability ``p_world``,
    else from a uniformly chosen earlier segment. Joint types: segment 0 is ``"free"`` when
    ``free_root``; the others are drawn with ``weights`` (default `MIXED_WEIGHTS`), ``"free"`` only
    when ``free_inner`` (a free joint deeper in the tree, or a second floating root). Placements:
    origin uniform in [-0.5, 0.5]³ (zero for half of the massless hinges hanging from a massless
    hinge: coincident hinges, a gimbal), a random orientation (identity one time in five); axes random unit vectors,
    a coordinate axis three times in ten. Gravity: ``gravity`` or 9.81 m/s² in a random direction.

    Bodies, chosen so that ``M(q)`` is non-singular for every ``q`` but a measure-zero set:

    - massless frames (mass 0, zero inertia, a random COM that must not matter), with probability
      ``p_massless``, only for (a) fixed segments, or (b) revolute, prismatic or spherical segments
      with at least one child, at most 3 DOF in a run of massless segments (a gimbal of three
      hinges, or one ball joint); the children of such a segment then get revolute or prismatic
      joints (drawn with the hinge/slider ``weights``). So a massless segment with a DOF is never a
      leaf, never carries a spherical, free or fixed child (a ball under a massless ball spins about
      the line joining their centres for free; a free joint absorbs any motion), and every run of
      massless segments ends in bodies with mass;
    - slender rods, with probability ``p_rod``: mass m, length L, inertia ``diag(I, I, 0)`` with
      ``I = m L²/12`` (positive semi-definite, the rod along the segment z axis, triangle inequality
      with equality), only on fixed, revolute and prismatic joints (the axis at least 37° from z) and
      on spherical joints whose COM is at least 0.1 m off the z axis through the joint (so the rod
      cannot spin about its own line); never on a free joint;
    - otherwise a full body: mass in [0.2, 5] kg, COM in [-0.3, 0.3]³ m, `random_inertia`.
    """
    weights = dict(MIXED_WEIGHTS if weights is None else weights)
    if not free_inner:
        weights.pop("free", None)
    kinds, probs = list(weights), np.array(list(weights.values()), dtype=float)
    probs /= probs.sum()

    parents = [-1] + [(-1 if rng.random() < p_world else int(rng.integers(i))) for i in range(1, n_segments)]
    children: list[list[int]] = [[] for _ in range(n_segments)]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    hinges = [k for k in kinds if k in ("revolute", "prismatic")] or ["revolute"]
    hinge_probs = np.array([weights.get(k, 1.0) for k in hinges], dtype=float)
    hinge_probs /= hinge_probs.sum()

    # joint types and body kinds top-down (parents first): a massless segment with a joint decides
    # its children's joint types (revolute or prismatic) and the run of massless DOFs is known
    types = [""] * n_segments
    body = ["full"] * n_segments
    run = [0] * n_segments  # DOFs in the run of massless segments with a joint ending at i
    for i in range(n_segments):
        p = parents[i]
        under_massless = p >= 0 and body[p] == "massless" and types[p] != "fixed"
        if i == 0 and free_root:
            t = "free"
        elif under_massless:
            t = str(hinges[rng.choice(len(hinges), p=hinge_probs)])
        else:
            t = str(kinds[rng.choice(len(kinds), p=probs)])
        types[i] = t
        above = run[p] if under_massless else 0
        if rng.random() < p_massless:
            if t == "fixed":
                body[i] = "massless"
            elif t in ("revolute", "prismatic", "spherical") and children[i] and above + JOINT_NV[t] <= 3:
                body[i] = "massless"
                run[i] = above + JOINT_NV[t]
        if body[i] == "full" and t != "free" and rng.random() < p_rod:
            body[i] = "rod"

    segments = []
    for i in range(n_segments):
        t, p = types[i], parents[i]
        axis = np.zeros(3)
        if t in ("revolute", "prismatic"):
            while True:
                if rng.random() < 0.3:
                    axis = np.zeros(3)
                    axis[rng.integers(3)] = rng.choice([-1.0, 1.0])
                else:
                    axis = rng.normal(size=3)
                    axis /= np.linalg.norm(axis)
                if body[i] != "rod" or abs(axis[2]) <= 0.8:
                    break
        origin = rng.uniform(-0.5, 0.5, 3)
        if (
            p >= 0
            and body[p] == "massless"
            and types[p] in ("revolute", "prismatic")
            and body[i] == "massless"
            and rng.random() < 0.5
        ):
            origin = np.zeros(3)  # coincident massless hinges (at most 3 in a run): a gimbal
        orientation = np.array([1.0, 0.0, 0.0, 0.0]) if rng.random() < 0.2 else _random_quaternion(rng)
        if body[i] == "massless":
            mass, com, inertia = 0.0, rng.uniform(-0.3, 0.3, 3), np.zeros((3, 3))
        elif body[i] == "rod":
            mass, length = float(rng.uniform(0.2, 3.0)), float(rng.uniform(0.2, 1.0))
            moment = mass * length**2 / 12.0
            inertia = np.diag([moment, moment, 0.0])
            phi = rng.uniform(0, 2 * np.pi)
            radius = rng.uniform(0.1, 0.3) if t == "spherical" else rng.uniform(0.0, 0.2)
            com = np.array([radius * np.cos(phi), radius * np.sin(phi), rng.uniform(-0.5, 0.5)])
        else:
            mass, com, inertia = float(rng.uniform(0.2, 5.0)), rng.uniform(-0.3, 0.3, 3), random_inertia(rng)
        segments.append(
            {
                "name": f"{body[i]}{i}_{t}",
                "parent": None if p < 0 else segments[p]["name"],
                "joint": {
                    "type": t,
                    "origin": origin.tolist(),
                    "orientation": orientation.tolist(),
                    **({"axis": axis.tolist()} if t in ("revolute", "prismatic") else {}),
                },
                "mass": float(mass),
                "com": np.asarray(com, dtype=float).tolist(),
                "inertia": np.asarray(inertia, dtype=float).tolist(),
            }
        )
    if gravity is None:
        gravity = rng.normal(size=3)
        gravity = 9.81 * gravity / np.linalg.norm(gravity)
    return {
        "format": "jaxbio-model",
        "version": 1,
        "name": name or f"mixed{n_segments}",
        "gravity": np.asarray(gravity, dtype=float).tolist(),
        "segments": segments,
    }


def random_mixed_state(rng, d: dict) -> dict:
    """A random state of a model dict (numpy float64): ``q (nq,)`` (revolute/prismatic in [-1, 1],
    free translations in [-1, 1]³ m, uniform unit quaternions w first, either sign of w),
    ``qd``, ``qdd``, ``tau`` ``(nv,)``, and external world-frame ``force``, ``moment``
    ``(n_segments, 3)`` (the moment about the segment origin)."""
    q = []
    for s in d["segments"]:
        t = s["joint"]["type"]
        if t in ("revolute", "prismatic"):
            q.append(rng.uniform(-1.0, 1.0, 1))
        elif t == "spherical":
            q.append(_random_quaternion(rng))
        elif t == "free":
            q.append(np.concatenate([rng.uniform(-1.0, 1.0, 3), _random_quaternion(rng)]))
    nq, nv = model_sizes(d)
    n = len(d["segments"])
    q = np.concatenate(q) if q else np.zeros(0)
    assert q.shape == (nq,)
    return {
        "q": q,
        "qd": rng.uniform(-2.0, 2.0, nv),
        "qdd": rng.uniform(-5.0, 5.0, nv),
        "tau": rng.uniform(-10.0, 10.0, nv),
        "force": rng.uniform(-20.0, 20.0, (n, 3)),
        "moment": rng.uniform(-5.0, 5.0, (n, 3)),
    }


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
    links = {
        "spherical": [("rx", "revolute", 0), ("ry", "revolute", 1)],
        "free": [
            ("tx", "prismatic", 0),
            ("ty", "prismatic", 1),
            ("tz", "prismatic", 2),
            ("rx", "revolute", 0),
            ("ry", "revolute", 1),
        ],
    }
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
            segs.append(
                {
                    "name": name,
                    "parent": parent,
                    "joint": {"type": jtype, "axis": eye[k].tolist(), **joint},
                    "mass": 0.0,
                    "com": [0.0, 0.0, 0.0],
                    "inertia": np.zeros((3, 3)).tolist(),
                }
            )
            parent, joint = name, {"origin": [0.0, 0.0, 0.0], "orientation": [1.0, 0.0, 0.0, 0.0]}
        jtype, k = last[j["type"]]
        segs.append({**s, "parent": parent, "joint": {"type": jtype, "axis": eye[k].tolist(), **joint}})
    return {**d, "name": f"{d['name']}_hinges", "segments": segs}
