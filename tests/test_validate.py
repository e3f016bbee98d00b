"""Tests for dpjax._validate, the eager checks behind every public function."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import _validate


def test_as_float_array_accepts_and_returns_unchanged():
  x = np.ones((3, 2), np.float32)
  assert _validate.as_float_array(x, "x", ndim=2) is x
  j = jnp.ones(4)
  assert _validate.as_float_array(j, "w", ndim=1) is j


@pytest.mark.parametrize(
    "value,exc,match",
    [
        (np.ones((2, 2), np.int64), TypeError, "x must have a floating dtype"),
        ("abc", TypeError, "x must be a float array"),
        (None, TypeError, "x must be a float array"),
        (np.ones(3, np.float32), ValueError, r"x must have 2 dimension\(s\)"),
        (np.ones((0, 3), np.float32), ValueError, "x is empty"),
        (np.array([[1.0, np.nan]]), ValueError, r"x contains NaN or inf \(first at index \(0, 1\)\)"),
        (np.array([[np.inf, 1.0]]), ValueError, "x contains NaN or inf"),
    ],
)
def test_as_float_array_rejects(value, exc, match):
  with pytest.raises(exc, match=match):
    _validate.as_float_array(value, "x", ndim=2)


def test_scalar_nonfinite_message():
  with pytest.raises(ValueError, match="rho must be finite, got nan"):
    _validate.check_finite(np.float64("nan"), "rho")


def test_value_checks_skip_tracers_but_shape_checks_run():
  @jax.jit
  def f(x):
    _validate.as_float_array(x, "x", ndim=2)  # finiteness not checkable here
    _validate.check_labels(x[:, 0], "y")
    _validate.check_row_norms(x, "x")
    return x

  assert bool(jnp.isnan(f(jnp.full((2, 2), jnp.nan))).all())
  with pytest.raises(ValueError, match=r"x must have 2 dimension\(s\)"):
    jax.jit(lambda x: _validate.as_float_array(x, "x", ndim=2))(jnp.ones(3))


def test_labels_and_row_norms():
  _validate.check_labels(np.array([1.0, -1.0, 1.0]))
  with pytest.raises(ValueError, match=r"y must contain only the labels -1 and \+1; found \[0.0\]"):
    _validate.check_labels(np.array([1.0, 0.0]))
  _validate.check_row_norms(np.array([[0.6, 0.8], [0.0, 0.0]]))
  with pytest.raises(ValueError, match="x row 1 has L2 norm 1.41421356 > 1.*clip_rows"):
    _validate.check_row_norms(np.array([[0.6, 0.8], [1.0, 1.0]]))


def test_scalars_and_choices():
  assert _validate.positive_float(2, "eta") == 2.0
  assert _validate.nonnegative_float(0.0, "rho") == 0.0
  assert _validate.float_in_open_interval(1e-5, "delta", 0.0, 1.0) == 1e-5
  assert _validate.positive_int(np.int64(3), "steps") == 3
  assert _validate.choice("clip", "mode", ("clip", "add")) == "clip"
  with pytest.raises(ValueError, match="epsilon must be > 0, got 0.0"):
    _validate.positive_float(0.0, "epsilon")
  with pytest.raises(ValueError, match="rho must be >= 0"):
    _validate.nonnegative_float(-1e-9, "rho")
  with pytest.raises(ValueError, match=r"delta must be in the open interval \(0, 1\), got 1.0"):
    _validate.float_in_open_interval(1.0, "delta", 0.0, 1.0)
  with pytest.raises(ValueError, match="epsilon must be finite"):
    _validate.positive_float(float("inf"), "epsilon")
  with pytest.raises(TypeError, match="epsilon must be a real number, got bool"):
    _validate.positive_float(True, "epsilon")
  with pytest.raises(TypeError, match="epsilon must be a scalar"):
    _validate.positive_float(np.ones(2), "epsilon")
  with pytest.raises(TypeError, match="epsilon must be a concrete number"):
    jax.jit(lambda e: _validate.positive_float(e, "epsilon"))(1.0)
  with pytest.raises(TypeError, match="steps must be an integer, got float"):
    _validate.positive_int(3.0, "steps")
  with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
    _validate.positive_int(0, "steps")
  with pytest.raises(ValueError, match=r"mode must be one of \('clip', 'add'\), got 'cap'"):
    _validate.choice("cap", "mode", ("clip", "add"))
  with pytest.raises(TypeError, match="mode must be one of"):
    _validate.choice(3, "mode", ("clip", "add"))
