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


@pytest.mark.parametrize(("bounds", "value", "match"), [
    ({}, [1.0, np.nan], "m must be finite"),
    ({"positive": True}, [1.0, 0.0], r"m must be positive \(> 0\)"),
    ({"nonnegative": True}, [-1.0], r"m must be non-negative \(≥ 0\)"),
    ({"below": 1.0}, [1.0], "m must be < 1"),
])
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
