"""jaxbio.plot: the stick figure against closed-form positions, and animations that open as what
they claim to be (frame count, size) — matplotlib is a test extra."""

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbio as jb
from jaxbio.plot import animate, stick_figure


def test_stick_figure_of_the_double_pendulum_is_its_closed_form():
    # rod1 pivots at the origin (COM 0.5 m down the rod, length 1 m), rod2 at rod1's end (COM
    # 0.25 m): angles counter-clockwise from hanging straight down
    with jax.enable_x64(True):
        tree = jb.load_model("double_pendulum", dtype=jnp.float64).tree
        a, b = 0.7, -1.9
        sf = stick_figure(tree, jnp.array([a, b]))
        down = lambda th: np.array([np.sin(th), -np.cos(th), 0.0])
        elbow = down(a)
        bones = np.asarray(sf.bones)
        # bone 0: world origin -> rod1's origin (both at 0); bone 1: rod1 -> rod2; bone 2: rod1's
        # origin -> its COM; bone 3: rod2 (a leaf) -> its tip at twice its COM
        assert bones.shape == (4, 2, 3)
        np.testing.assert_allclose(bones[1], [np.zeros(3), elbow], atol=1e-14)
        np.testing.assert_allclose(bones[2], [np.zeros(3), 0.5 * elbow], atol=1e-14)
        np.testing.assert_allclose(bones[3], [elbow, elbow + 0.5 * down(a + b)], atol=1e-14)
        np.testing.assert_allclose(np.asarray(sf.coms), [0.5 * elbow, elbow + 0.25 * down(a + b)], atol=1e-14)
        # vmap over a trajectory gives the same as one state at a time
        qs = jnp.array([[0.1, 0.2], [a, b]])
        batch = jax.vmap(stick_figure, in_axes=(None, 0))(tree, qs)
        np.testing.assert_allclose(np.asarray(batch.bones[1]), bones, atol=1e-14)


def test_a_free_root_draws_no_bone_from_the_world():
    tree = jb.load_model("wholebody").tree
    sf = stick_figure(tree, jb.configuration.neutral(tree))
    assert tree.joint_types[0] == "free" and sf.bones.shape == (2 * tree.n_segments - 1, 2, 3)


def test_animate_writes_a_gif_with_one_picture_per_frame(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    tree = jb.load_model("double_pendulum").tree
    t = np.linspace(0.0, 1.0, 101)
    q = np.stack([np.sin(2 * t), np.cos(3 * t)], 1)
    path = tmp_path / "dp.gif"
    seen = []
    n = animate(tree, t, q, path, fps=10, progress=lambda k, total: seen.append((k, total)))
    assert n == 11 and seen[-1] == (11, 11)
    with Image.open(path) as im:
        assert im.format == "GIF" and im.n_frames == 11
    buf = io.BytesIO()  # a file object: GIF
    assert animate(tree, t[:5], q[:5], buf, fps=100, view="3d") == 5
    assert buf.getvalue()[:6] in (b"GIF87a", b"GIF89a")


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(q=np.zeros((3, 3))), r"q must be \(T, nq\)"),
        (dict(time=np.array([0.0, 0.2, 0.1])), "strictly increasing"),
        (dict(q=np.array([[0.0, 0.0], [np.nan, 0.0], [0.0, 0.0]])), "finite"),
        (dict(view="side"), "view must be"),
        (dict(file="x.avi"), "gif or mp4"),
    ],
)
def test_animate_refuses_bad_input(tmp_path, bad, match):
    tree = jb.load_model("double_pendulum").tree
    args = dict(time=np.array([0.0, 0.1, 0.2]), q=np.zeros((3, 2)), file=str(tmp_path / "a.gif"), view="auto")
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        animate(tree, args["time"], args["q"], args["file"], view=args["view"])
