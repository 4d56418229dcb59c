"""The one home of input checks (jaxbio._validate): messages name the argument, traced values pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbio import _validate as v


def test_as_float_promotes_and_refuses_complex():
    assert v.as_float(np.array([1, 2])).dtype == jnp.result_type(float)
    assert v.as_float(np.array([1, 2]), like=jnp.zeros(1, jnp.float32)).dtype == jnp.float32
    with pytest.raises(ValueError, match="x must be a real array"):
        v.as_float(np.array([1j]), "x")


def test_as_shape_names_argument_and_context():
    with pytest.raises(ValueError, match=r"q has shape \(2,\), expected \(3,\); batch"):
        v.as_shape(np.zeros(2), (3,), "q", "; batch")


@pytest.mark.parametrize(
    ("bounds", "value", "match"),
    [
        ({}, [1.0, np.nan], "m must be finite"),
        ({"positive": True}, [1.0, 0.0], r"m must be positive \(> 0\)"),
        ({"nonnegative": True}, [-1.0], r"m must be non-negative \(≥ 0\)"),
        ({"below": 1.0}, [1.0], "m must be < 1"),
    ],
)
def test_check_values(bounds, value, match):
    with pytest.raises(ValueError, match=match):
        v.check_values(np.asarray(value), "m", **bounds)
    jax.jit(lambda x: v.check_values(x, "m", **bounds) or x)(jnp.asarray(value))  # traced: skipped


def test_check_finite_locates_concrete_and_raises_under_jit():
    x = np.zeros((3, 2))
    x[2, 1] = np.inf
    with pytest.raises(ValueError, match=r"x contains NaN or inf \(first at index \(2, 1\)\)"):
        v.check_finite(x, "x")
    with pytest.raises(ValueError, match=r"x contains NaN or inf \(row 2\)"):
        v.check_finite(x, "x", locate=lambda idx, n: f" (row {idx[0]})")
    with pytest.raises(Exception, match="x contains NaN or inf"):
        jax.jit(lambda y: v.check_finite(y, "x"))(x)
    assert np.isinf(jax.jit(lambda y: v.check_finite(y, "x", check=False))(x)).any()


def test_check_eagerly_and_enforce_agree():
    checks = ((lambda xp, a: a <= 0, "a must be positive"),)
    with pytest.raises(ValueError, match="a must be positive"):
        v.check_eagerly(checks, np.array(-1.0))
    with pytest.raises(Exception, match="a must be positive"):
        jax.jit(lambda a: v.enforce(a, checks, a))(-1.0)
    assert float(jax.jit(lambda a: v.enforce(a, checks, a))(2.0)) == 2.0


def test_scalars_counts_vectors_and_keys():
    assert v.as_scalar(2, "t").dtype == jnp.result_type(float)
    with pytest.raises(ValueError, match=r"t must be a real scalar, got shape \(2,\)"):
        v.as_scalar(np.zeros(2), "t")
    with pytest.raises(ValueError, match="t must be real numbers"):
        v.as_scalar("soon", "t")
    assert v.as_count(np.int64(3), "n") == 3
    for bad in (0, True, 2.0, "3", None):
        with pytest.raises(ValueError, match=r"n must be a \(static\) int ≥ 1"):
            v.as_count(bad, "n")
    with pytest.raises(ValueError, match=r"n must be a \(static\) int ≥ 1"):
        jax.jit(lambda k: v.as_count(k, "n"))(3)
    assert v.coordinate_vector(1.0, "c", 3).shape == ()
    assert v.coordinate_vector([1.0, 2.0, 3.0], "c", 3).shape == (3,)
    with pytest.raises(
        ValueError, match=r"c has shape \(2,\), expected \(3,\) \(one entry per coordinate\) or a scalar"
    ):
        v.coordinate_vector([1.0, 2.0], "c", 3)
    with pytest.raises(ValueError, match="c must be a scalar or a vector"):
        v.coordinate_vector(np.zeros((2, 2)), "c")
    v.check_key(jax.random.key(0))
    v.check_key(jax.random.PRNGKey(0))
    jax.vmap(lambda k: v.check_key(k) or 0)(jax.random.split(jax.random.key(0), 2))  # one key per sample
    for bad in (0, np.zeros(2), jax.random.split(jax.random.PRNGKey(0), 2), "key"):
        with pytest.raises(ValueError, match="key must be one PRNG key"):
            v.check_key(bad)


def test_check_or_defer_raises_now_or_defers_to_one_error():
    checks = lambda a, b: [  # noqa: E731
        (lambda xp, a: ~xp.isfinite(a), "a must be finite", {"a": a}),
        (lambda xp, a, b: ~(b > a), "b must be greater than a", {"a": a, "b": b}),
    ]
    assert v.check_or_defer(checks(1.0, 2.0)) == []
    with pytest.raises(ValueError, match=r"^b must be greater than a \(got a=2.0, b=1.0\)$"):
        v.check_or_defer(checks(2.0, 1.0))
    with pytest.raises(ValueError, match=r"^a must be finite \(got a=nan\)$"):
        v.check_or_defer(checks(np.nan, 1.0))

    def run(a, b, throw):
        deferred = v.check_or_defer(checks(a, b))  # b traced: the second check is deferred
        assert len(deferred) == (1 if isinstance(a, float) else 2)
        if throw:
            return v.raise_if(b, deferred)
        return jnp.where(v.any_bad(deferred), jnp.nan, b)

    f = jax.jit(lambda b: run(2.0, b, True))
    assert float(f(3.0)) == 3.0
    with pytest.raises(Exception, match="b must be greater than a"):
        f(1.0)
    with pytest.raises(Exception, match="a must be finite"):  # the first failed check is the one named
        jax.jit(lambda a, b: run(a, b, True))(np.nan, -1.0)
    g = jax.jit(lambda b: run(2.0, b, False))
    assert np.isnan(g(1.0)) and float(g(3.0)) == 3.0
    assert v.any_bad([]) is None and v.raise_if(1.0, []) == 1.0
