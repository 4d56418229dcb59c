"""Pictures of any segment tree: a stick figure per configuration, and its animation (GIF/MP4).

``stick_figure(tree, q)`` is a pure function (jit/vmap-able) giving the 3D points to draw;
``animate(tree, time, q, file)`` draws them with matplotlib (an optional dependency:
``pip install 'jaxbio[plot]'``), imported only when called.

What is drawn, for every segment: a *bone* from its parent's origin (the world origin for a root)
to its own origin (the joint centre) — except across the translations that place a floating base
(a free joint, or sliders from the world and sliders on them: a bone there would be a line from
the world origin, not a limb) — and its centre of
mass as a dot sized by the mass, joined to its origin by a line (a trunk whose children hang from
its base shows this way). A segment with no child has no distal joint to end at, so that line goes
on to twice its COM from its origin (where a uniform rod with that COM would end; a massless leaf's
has zero length). Massless segments (frames between the axes of a multi-axis joint) share their parent's
origin in most models and draw nothing of their own.
"""

from __future__ import annotations

import os
import tempfile
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxbio import quaternion as quat
from jaxbio.dynamics.kinematics import forward_kinematics
from jaxbio.tree import SegmentTree

__all__ = ["StickFigure", "stick_figure", "animate", "VIEWS"]

#: ``view`` values of `animate` besides ``"auto"``: the world axes drawn horizontally and vertically
#: (2D projections), or ``"3d"``.
VIEWS = ("xy", "yx", "xz", "zx", "yz", "zy", "3d")


class StickFigure(NamedTuple):
    """World points of one configuration (`stick_figure`); a leading batch axis under `jax.vmap`.

    ``bones`` ``(n_bones, 2, 3)`` m: start and end of each line; ``coms`` ``(n_segments, 3)`` m.
    """

    bones: Float[Array, "b 2 3"]
    coms: Float[Array, "n 3"]


def _bone_table(tree: SegmentTree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Static: for each bone, the segment it starts at (-1: world origin), the segment it ends at,
    and, for the bones from each segment's origin (the last ``n_segments``), whether it ends at
    the doubled COM (a leaf) or at the COM."""
    parents = np.asarray(tree.parents)
    has_child = np.zeros(tree.n_segments, bool)
    has_child[parents[parents >= 0]] = True
    base = np.zeros(tree.n_segments, bool)  # moved from the world by translations only
    start, end, tip = [], [], []
    for i, p in enumerate(parents):
        base[i] = tree.joint_types[i] in ("prismatic", "free") and (p < 0 or base[p])
        if not base[i]:
            start.append(p), end.append(i), tip.append(False)
    for i in range(tree.n_segments):
        start.append(i), end.append(i), tip.append(not has_child[i])
    return np.asarray(start), np.asarray(end), np.asarray(tip)


def stick_figure(tree: SegmentTree, q: Float[ArrayLike, " nq"]) -> StickFigure:
    """The lines and COM dots of the tree at ``q`` ``(nq,)`` (rad / m, generalised coordinates):
    see the module docstring for what is drawn. Pure; ``jax.vmap`` over ``q`` for a trajectory."""
    start, end, tip = _bone_table(tree)
    pos, att = forward_kinematics(tree, q)
    R = quat.to_matrix(att)
    coms = pos + jnp.einsum("nij,nj->ni", R, tree.coms)
    origin = jnp.concatenate([pos, jnp.zeros((1, 3), pos.dtype)])  # index -1 reads the world origin
    a = origin[start]
    own = np.arange(start.size) >= start.size - tree.n_segments  # the origin -> COM bones
    b = jnp.where(own[:, None], pos[end] + jnp.where(tip[:, None], 2.0, 1.0) * (coms[end] - pos[end]), pos[end])
    return StickFigure(jnp.stack([a, b], axis=1), coms)


def _view_axes(tree: SegmentTree, points: np.ndarray, view: str) -> tuple[int, int] | None:
    """World axes ``(horizontal, vertical)`` of a 2D view, None for ``"3d"``. ``"auto"``: vertical
    is the axis of gravity (y for the y-up planar and OpenSim models, z for z-up ones), horizontal
    the other axis along which the figure spans most over the whole motion."""
    if view == "3d":
        return None
    if view != "auto":
        return "xyz".index(view[0]), "xyz".index(view[1])
    g = np.abs(np.asarray(tree.gravity, float))
    up = int(np.argmax(g)) if np.any(g > 0) else 1
    others = [k for k in range(3) if k != up]
    span = np.ptp(points.reshape(-1, 3)[:, others], axis=0)
    return others[int(np.argmax(span))], up


def animate(
    tree: SegmentTree,
    time: Float[ArrayLike, " T"],
    q: Float[ArrayLike, "T nq"],
    file,
    *,
    format: str | None = None,
    fps: float = 25.0,
    view: str = "auto",
    title: str | None = None,
    progress=None,
) -> int:
    """Write a stick-figure animation of the motion ``q`` ``(T, nq)`` at ``time`` ``(T,)`` s
    (increasing) to ``file`` (a path or a binary file object), played in real time at ``fps``
    frames per second (each picture shows the sample nearest its instant). ``format``:
    ``"gif"`` (Pillow, which matplotlib installs) or ``"mp4"`` (needs ``ffmpeg`` on the PATH);
    by default the path's extension, GIF for a file object. ``view``: ``"auto"`` (the plane of gravity and
    the widest horizontal extent), one of `VIEWS`. ``progress(k, n)``, if given, is called after
    each picture. Returns the number of pictures.

    Raises ``ValueError`` naming the problem for mismatched shapes, non-finite or decreasing
    times, non-finite ``q``, an unknown view or format, and a missing matplotlib or ffmpeg.
    """
    t = np.asarray(time, float)
    qs = np.asarray(q, float)
    if t.ndim != 1 or t.size < 1:
        raise ValueError(f"time must be a non-empty 1-D array, got shape {t.shape}")
    if qs.shape != (t.size, tree.nq):
        raise ValueError(f"q must be (T, nq) = ({t.size}, {tree.nq}), got shape {qs.shape}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(qs))):
        raise ValueError("time and q must be finite (NaN or inf found)")
    if np.any(np.diff(t) <= 0):
        raise ValueError("time must be strictly increasing")
    if view not in VIEWS + ("auto",):
        raise ValueError(f"view must be 'auto' or one of {VIEWS}, got {view!r}")
    if not (np.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a finite number > 0, got {fps!r}")
    path = os.fspath(file) if isinstance(file, (str, os.PathLike)) else None
    fmt = format or ("gif" if path is None else os.path.splitext(path)[1].lower().lstrip("."))
    if fmt not in ("gif", "mp4"):
        raise ValueError(
            f"{path or 'file'}: animation format must be gif or mp4 (from the extension, or format=), got {fmt!r}"
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import animation
    except ImportError:
        raise ValueError("animate needs matplotlib: pip install 'jaxbio[plot]'") from None
    if fmt == "mp4" and not animation.writers.is_available("ffmpeg"):
        raise ValueError(f"{path}: writing MP4 needs ffmpeg on the PATH; write a .gif instead")

    # the samples shown: one per 1/fps s of the motion, the nearest in time
    n = max(1, int(np.floor((t[-1] - t[0]) * fps + 1e-9)) + 1)
    idx = np.clip(np.searchsorted(t, t[0] + np.arange(n) / fps), 0, t.size - 1)
    prev = np.clip(idx - 1, 0, t.size - 1)
    idx = np.where(
        np.abs(t[prev] - (t[0] + np.arange(n) / fps)) < np.abs(t[idx] - (t[0] + np.arange(n) / fps)), prev, idx
    )
    fig_q = jnp.asarray(qs[idx], tree.masses.dtype)
    sf = jax.jit(jax.vmap(stick_figure, in_axes=(None, 0)))(tree, fig_q)
    bones, coms = np.asarray(sf.bones), np.asarray(sf.coms)
    axes = _view_axes(tree, np.concatenate([bones.reshape(n, -1, 3), coms], 1), view)
    masses = np.asarray(tree.masses, float)
    sizes = 10 + 60 * masses / max(masses.max(), 1e-12)

    fig = plt.figure(figsize=(5, 5), dpi=80)
    pts = np.concatenate([bones.reshape(-1, 3), coms.reshape(-1, 3)])
    lo, hi = pts.min(0), pts.max(0)
    centre, half = (lo + hi) / 2, max(float((hi - lo).max()) / 2, 1e-3) * 1.1
    if axes is None:
        ax = fig.add_subplot(projection="3d")
        for k, set_lim in enumerate((ax.set_xlim, ax.set_ylim, ax.set_zlim)):
            set_lim(centre[k] - half, centre[k] + half)
        ax.set_xlabel("x (m)"), ax.set_ylabel("y (m)"), ax.set_zlabel("z (m)")
    else:
        ax = fig.add_subplot()
        h, v = axes
        ax.set_xlim(centre[h] - half, centre[h] + half)
        ax.set_ylim(centre[v] - half, centre[v] + half)
        ax.set_aspect("equal")
        ax.set_xlabel(f"{'xyz'[h]} (m)"), ax.set_ylabel(f"{'xyz'[v]} (m)")
        ax.grid(alpha=0.3)
    label = ax.set_title("")

    def draw(k):
        for artist in list(ax.lines) + list(ax.collections):
            artist.remove()
        b, c = bones[k], coms[k]
        if axes is None:
            for seg in b:
                ax.plot(seg[:, 0], seg[:, 1], seg[:, 2], "-", color="0.2", lw=2)
            ax.scatter(c[:, 0], c[:, 1], c[:, 2], s=sizes, color="tab:red")
        else:
            for seg in b:
                ax.plot(seg[:, h], seg[:, v], "-", color="0.2", lw=2)
            ax.scatter(c[:, h], c[:, v], s=sizes, color="tab:red", zorder=3)
        label.set_text(f"{title + '   ' if title else ''}t = {t[idx[k]]:.3f} s")

    writer = animation.PillowWriter(fps=fps) if fmt == "gif" else animation.FFMpegWriter(fps=fps)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, f"animation.{fmt}")
        with writer.saving(fig, out, dpi=80):
            for k in range(n):
                draw(k)
                writer.grab_frame()
                if progress is not None:
                    progress(k + 1, n)
        plt.close(fig)
        with open(out, "rb") as f:
            data = f.read()
    if path is None:
        file.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)
    return n
