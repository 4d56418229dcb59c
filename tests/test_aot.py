"""`jaxbio._aot`: programs kept across processes with `jax.export` (the command line's tools)
give the numbers of the plain jitted call; frame buckets; what cannot be exported runs plainly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbio import _aot


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setitem(_aot.CACHE, "dir", str(tmp_path))
    monkeypatch.setattr(_aot, "_PROGRAMS", {})
    return tmp_path


def _frames(n, rng):
    return {"q": rng.normal(size=(n, 3)), "w": rng.normal(size=(n,))}


def _per_frame(model, frames):
    return jax.vmap(lambda f: jnp.sin(model["a"] @ f["q"]) * f["w"] + model["b"])(frames)


def test_bucket_edges():
    assert [_aot.bucket(n) for n in (1, 64, 65, 73, 128, 129, 1000, 1501)] == [64, 64, 72, 80, 128, 144, 1024, 1536]
    for n in range(1, 5000, 37):
        b = _aot.bucket(n)
        assert n <= b <= max(64, 1.125 * n)


def test_kept_program_equals_the_plain_call(folder, monkeypatch):
    rng = np.random.default_rng(0)
    model = {"a": rng.normal(size=(2, 3)), "b": rng.normal(size=2)}
    frames = _frames(73, rng)
    expected = np.asarray(jax.jit(_per_frame)(model, frames))
    first = np.asarray(_aot.call_over_frames("toy", _per_frame, model, frames))  # exports
    assert [p.suffix for p in folder.iterdir()] == [".jaxexport"]
    monkeypatch.setattr(_aot, "_PROGRAMS", {})  # a new process: read back from the file
    longer = {k: np.concatenate([v, v[:2]]) for k, v in frames.items()}  # 75 frames, the first 73 the same
    second = np.asarray(_aot.call_over_frames("toy", _per_frame, model, longer))
    assert len(list(folder.iterdir())) == 1  # 73 and 75 frames share the bucket of 80
    np.testing.assert_array_equal(first, expected)
    assert first.shape == (73, 2) and second.shape == (75, 2)
    np.testing.assert_array_equal(second[:73], expected)
    monkeypatch.setitem(_aot.CACHE, "dir", None)
    np.testing.assert_array_equal(np.asarray(_aot.call_over_frames("toy", _per_frame, model, frames)), expected)


def test_another_structure_or_dtype_is_another_program(folder):
    rng = np.random.default_rng(1)
    model = {"a": rng.normal(size=(2, 3)), "b": rng.normal(size=2)}
    _aot.call_over_frames("toy", _per_frame, model, _frames(10, rng))
    _aot.call_over_frames("toy", _per_frame, {"a": model["a"][:1], "b": model["b"][:1]}, _frames(10, rng))
    _aot.call_over_frames(
        "toy", _per_frame, jax.tree_util.tree_map(lambda x: x.astype(np.float32), model), _frames(10, rng)
    )
    assert len(list(folder.glob("*.jaxexport"))) == 3


def test_what_cannot_be_exported_runs_plainly_and_is_not_tried_again(folder):
    import equinox as eqx

    def checked(model, frames):  # a host callback: jax.export refuses it
        out = _per_frame(model, frames)
        return eqx.error_if(out, jnp.any(jnp.isnan(out)), "nan")

    rng = np.random.default_rng(2)
    model = {"a": rng.normal(size=(2, 3)), "b": rng.normal(size=2)}
    frames = _frames(5, rng)
    out = _aot.call_over_frames("checked", checked, model, frames)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jax.jit(_per_frame)(model, frames)))
    assert [p.suffix for p in folder.iterdir()] == [".none"]
    _aot.call_over_frames("checked", checked, model, frames)
    assert [p.suffix for p in folder.iterdir()] == [".none"]


def test_jax_array_leaves_give_no_warning(folder):
    """Leaves that are JAX arrays (a model's) are keyed by their own dtype: no numpy deprecation
    warning per leaf and call (static optimisation printed 130 of them from the command line)."""
    import warnings

    rng = np.random.default_rng(1)
    model = {"a": jnp.asarray(rng.normal(size=(2, 3))), "b": jnp.asarray(rng.normal(size=2))}
    frames = _frames(9, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # exported, then read back
            out = _aot.call_over_frames("toy-jax", _per_frame, model, frames)
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.jit(_per_frame)(model, frames)), rtol=1e-6)


def test_the_64_bit_mode_is_part_of_the_key(folder, monkeypatch):
    """The same float32 arguments with 64-bit types off, then on (one session after a float32 run):
    two programs, each called in its own mode (one program reused across modes fails on its
    32- or 64-bit indices)."""
    rng = np.random.default_rng(2)
    model = {"a": rng.normal(size=(2, 3)).astype(np.float32), "b": rng.normal(size=2).astype(np.float32)}
    frames = {k: v.astype(np.float32) for k, v in _frames(10, rng).items()}
    with jax.enable_x64(False):
        off = np.asarray(_aot.call_over_frames("toy", _per_frame, model, frames))
    with jax.enable_x64(True):
        on = np.asarray(_aot.call_over_frames("toy", _per_frame, model, frames))
    assert len(list(folder.glob("*.jaxexport"))) == 2
    np.testing.assert_allclose(on, off, rtol=1e-6)
