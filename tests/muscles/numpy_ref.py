"""A NumPy reference for straight muscle paths, vectorised over frames (a Python loop over
segments and path points only): forward kinematics with rotation matrices (Rodrigues), lengths as
sums of piece lengths, moment arms by central differences. Independent of jaxbio's kinematics;
used by tests/muscles/test_batched_geometry.py and benchmarks/muscles.py."""

from __future__ import annotations

import numpy as np


def rodrigues(axis, angle):
    """``(B, 3, 3)`` rotation by ``angle`` ``(B,)`` about unit ``axis`` ``(3,)``."""
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    s, c = np.sin(angle)[:, None, None], np.cos(angle)[:, None, None]
    return np.eye(3) + s * K + (1 - c) * (K @ K)


def quat_matrix(q):
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


class NumpyModel:
    """``NumpyModel(tree, paths)`` of a tree of revolute and prismatic joints."""

    def __init__(self, tree, paths):
        self.parents = tree.parents
        self.rev = tree.is_revolute
        self.axes = np.asarray(tree.unit_axes)
        self.origins = np.asarray(tree.origins)
        self.orient = [quat_matrix(np.asarray(o)) for o in np.asarray(tree.unit_orientations)]
        self.seg = paths.segment_index
        self.pts = np.asarray(paths.points)
        self.mask = paths.piece_mask

    def fk(self, q):
        B = q.shape[0]
        R, p = [], []
        for i, par in enumerate(self.parents):
            Rp = np.broadcast_to(np.eye(3), (B, 3, 3)) if par < 0 else R[par]
            pp = np.zeros((B, 3)) if par < 0 else p[par]
            Rj = Rp @ self.orient[i]
            pj = pp + Rp @ self.origins[i]
            if self.rev[i]:
                Ri = Rj @ rodrigues(self.axes[i], q[:, i])
                pi = pj
            else:
                Ri = Rj
                pi = pj + (Rj @ self.axes[i]) * q[:, i : i + 1]
            R.append(Ri)
            p.append(pi)
        return np.stack(R, 1), np.stack(p, 1)  # (B, n, 3, 3), (B, n, 3)

    def lengths(self, q):
        R, p = self.fk(q)
        m, P = self.seg.shape
        world = np.empty((q.shape[0], m, P, 3))
        for k in range(P):  # loop over point slots; all muscles and frames at once
            s = self.seg[:, k]
            idx = np.maximum(s, 0)
            moving = np.einsum("bmij,mj->bmi", R[:, idx], self.pts[:, k]) + p[:, idx]
            world[:, :, k] = np.where((s < 0)[None, :, None], self.pts[:, k][None], moving)
        d = np.linalg.norm(np.diff(world, axis=2), axis=-1)
        return np.sum(np.where(self.mask[None], d, 0.0), axis=-1)

    def moment_arms(self, q, h=1e-6):
        out = []
        for j in range(q.shape[1]):
            e = np.zeros(q.shape[1])
            e[j] = h
            out.append(-(self.lengths(q + e) - self.lengths(q - e)) / (2 * h))
        return np.stack(out, axis=-1)  # (B, m, n)
