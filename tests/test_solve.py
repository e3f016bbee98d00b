"""Tests for dpjax.problem.solve (the exact optimum and the excess loss)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from conftest import shared_data_file

import dpjax
from dpjax import data
from dpjax.problem import solve


def _grad(w, x, y, ridge=0.0):
  x = np.asarray(x, np.float64)
  y = np.asarray(y, np.float64)
  m = y * (x @ w)
  return -(x.T @ (y / (1 + np.exp(m)))) / len(y) + ridge * w


def _loss(w, x, y):
  x = np.asarray(x, np.float64)
  return float(np.mean(np.logaddexp(0, -np.asarray(y, np.float64) * (x @ w))))


def _overlapping(seed, n=200, d=5):
  """Non-separable data: labels drawn from a logistic model (noisy)."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)) / np.sqrt(d)
  y = np.where(rng.random(n) < 1 / (1 + np.exp(-x @ np.ones(d))), 1.0, -1.0)
  return x, y


def test_synthetic_optimum():
  ds = data.synthetic(0)
  w, loss = solve.logistic_optimum(ds.x, ds.y)
  assert w.dtype == np.float64 and w.shape == (100,)
  assert np.linalg.norm(_grad(w, ds.x, ds.y)) <= 1e-9
  assert loss == pytest.approx(_loss(w, ds.x, ds.y), rel=1e-15)


def test_agrees_with_scipy():
  x, y = _overlapping(0)
  w, loss = solve.logistic_optimum(x, y)
  res = scipy.optimize.minimize(
      _loss, np.zeros(x.shape[1]), args=(x, y), jac=_grad, method="BFGS",
      options={"gtol": 1e-10})
  np.testing.assert_allclose(w, res.x, atol=1e-6)
  assert loss <= res.fun + 1e-14
  assert loss == pytest.approx(res.fun, abs=1e-12)
  assert np.linalg.norm(_grad(w, x, y)) <= 1e-9


def test_duplicated_rows_invariance():
  x, y = _overlapping(1)
  w1, l1 = solve.logistic_optimum(x, y)
  w2, l2 = solve.logistic_optimum(np.vstack([x, x]), np.concatenate([y, y]))
  np.testing.assert_allclose(w2, w1, atol=1e-8)
  assert l2 == pytest.approx(l1, abs=1e-14)


@pytest.mark.parametrize("kind", ["zero_column", "duplicate_column", "low_rank_d_gt_n"])
def test_singular_designs(kind):
  x, y = _overlapping(2, n=60, d=3)
  w_ref, l_ref = solve.logistic_optimum(x, y)
  if kind == "zero_column":
    xs = np.hstack([x, np.zeros((60, 1))])
  elif kind == "duplicate_column":
    xs = np.hstack([x, x[:, :1]])
  else:  # 60 rows spanning 3 dims embedded in 80 dims: d > n, rank 3
    q, _ = np.linalg.qr(np.random.default_rng(3).normal(size=(80, 3)))
    xs = x @ q.T
  w, loss = solve.logistic_optimum(xs, y)
  assert np.linalg.norm(_grad(w, xs, y)) <= 1e-9
  assert loss == pytest.approx(l_ref, abs=1e-13)
  np.testing.assert_allclose(xs @ w, x @ w_ref, atol=1e-7)  # same margins
  # Least-norm solution: no component in the null space of xs.
  null = np.linalg.svd(xs)[2][np.linalg.matrix_rank(xs):]
  np.testing.assert_allclose(null @ w, 0.0, atol=1e-8)


def test_zero_design():
  w, loss = solve.logistic_optimum(np.zeros((4, 3)), np.array([1.0, -1, 1, 1]))
  np.testing.assert_array_equal(w, 0.0)
  assert loss == pytest.approx(np.log(2), rel=1e-15)


def test_float32_input_matches_float64_data():
  x, y = _overlapping(4, n=300, d=6)
  x32 = x.astype(np.float32)
  w, loss = solve.logistic_optimum(x32, y.astype(np.float32))
  assert np.linalg.norm(_grad(w, x32, y)) <= 1e-9
  w64, _ = solve.logistic_optimum(x32.astype(np.float64), y)
  np.testing.assert_allclose(w, w64, atol=1e-9)


def test_float32_rounding_noise_directions_are_not_fitted():
  # Columns 0..2 sum exactly to zero (like standardized one-hot groups); in
  # float32 that null direction becomes rounding noise of size ~1e-8.
  x, y = _overlapping(5, n=400, d=4)
  x = np.hstack([x[:, :2], -(x[:, :1] + x[:, 1:2]), x[:, 2:]]) / 2
  x32 = x.astype(np.float32)
  w, loss = solve.logistic_optimum(x32, y.astype(np.float32))
  assert np.linalg.norm(_grad(w, x32, y)) <= 1e-9
  assert np.linalg.norm(w) < 100  # not ~1e7 along the noise direction
  _, loss64 = solve.logistic_optimum(x, y)
  assert loss == pytest.approx(loss64, abs=1e-6)


@pytest.mark.parametrize("case", ["d_gt_n", "constant_label", "quasi"])
def test_separable_raises_and_ridge_solves(case):
  rng = np.random.default_rng(6)
  if case == "d_gt_n":
    x = rng.normal(size=(20, 50)) / 8
    y = np.where(rng.random(20) < 0.5, 1.0, -1.0)
  elif case == "constant_label":
    x = np.hstack([np.ones((30, 1)), rng.normal(size=(30, 3))]) / 3
    y = np.ones(30)
  else:  # overlapping data plus a feature seen only in 3 negatives
    x, y = _overlapping(7, n=100, d=3)
    extra = np.zeros((100, 1))
    neg = np.flatnonzero(y < 0)[:3]
    extra[neg] = 0.5
    x = np.hstack([x, extra])
  with pytest.raises(ValueError, match=r"no minimiser.*\(quasi-\)separable.*ridge"):
    solve.logistic_optimum(x, y)
  w, loss = solve.logistic_optimum(x, y, ridge=1e-3)
  assert np.linalg.norm(_grad(w, x, y, ridge=1e-3)) <= 1e-9
  assert loss == pytest.approx(_loss(w, x, y), rel=1e-14)  # reported without ridge


def test_real_a1a_t():
  with pytest.warns(dpjax.PrivacyLeakWarning):  # the paper's (non-private) preprocessing
    ds = data.load_libsvm(shared_data_file("a1a.t.bz2"), n_features=123, preprocess="paper")
  w, loss = solve.logistic_optimum(ds.x, ds.y)
  assert np.linalg.norm(_grad(w, ds.x, ds.y)) <= 1e-9
  assert loss == pytest.approx(0.3254823847, abs=1e-9)  # float64-data optimum


def test_real_w8a_with_ridge():
  with pytest.warns(dpjax.PrivacyLeakWarning):  # the paper's (non-private) preprocessing
    ds = data.load_libsvm(shared_data_file("w8a.bz2"), n_features=300, preprocess="paper")
  # w8a after the paper preprocessing is quasi-separable (an LP finds v with
  # y_i <x_i, v> >= 0 for all rows, > 0 for 4,245), so it needs a ridge.
  w, loss = solve.logistic_optimum(ds.x, ds.y, ridge=1e-9)
  assert np.linalg.norm(_grad(w, ds.x, ds.y, ridge=1e-9)) <= 1e-9
  assert 0.0414 < loss < 0.0417


def test_bad_input():
  x, y = _overlapping(0, n=10, d=2)
  with pytest.raises(TypeError, match="x must have a floating dtype"):
    solve.logistic_optimum(x.astype(int), y)
  with pytest.raises(ValueError, match="y must have 1 dimension"):
    solve.logistic_optimum(x, y[:, None])
  with pytest.raises(ValueError, match="x has 10 rows but y has 9 labels"):
    solve.logistic_optimum(x, y[:9])
  with pytest.raises(ValueError, match=r"y must contain only the labels -1 and \+1"):
    solve.logistic_optimum(x, (y + 1) / 2)
  with pytest.raises(ValueError, match="x contains NaN"):
    solve.logistic_optimum(np.where(x > 0, np.nan, x), y)
  with pytest.raises(ValueError, match="tol must be > 0"):
    solve.logistic_optimum(x, y, tol=0.0)
  with pytest.raises(ValueError, match="ridge must be >= 0"):
    solve.logistic_optimum(x, y, ridge=-1.0)
  with pytest.raises(TypeError, match="max_iter must be an integer"):
    solve.logistic_optimum(x, y, max_iter=2.5)
  with pytest.raises(ValueError, match="did not converge in max_iter=1"):
    solve.logistic_optimum(x, y, max_iter=1)
  with pytest.raises(TypeError, match="outside jit"):
    jax.jit(solve.logistic_optimum)(jnp.asarray(x), jnp.asarray(y))


# --- excess_loss ----------------------------------------------------------------


def test_excess_loss_zero_at_optimum_positive_nearby(x64):
  x, y = _overlapping(8)
  w, loss = solve.logistic_optimum(x, y)
  assert float(solve.excess_loss(jnp.asarray(w), x, y, loss)) == pytest.approx(0.0, abs=1e-15)
  rng = np.random.default_rng(9)
  for scale in (1e-4, 1e-2, 1.0):
    dw = scale * rng.normal(size=w.shape)
    # -1e-14: the float64 losses over 8 rows round at ~1e-16, while the excess at the
    # smallest step (1e-4) is ~1e-9, so positivity is still what is tested.
    assert float(solve.excess_loss(jnp.asarray(w + dw), x, y, loss)) >= -1e-14


@pytest.mark.parametrize("jit", [True, False])
def test_excess_loss_jit_vmap(jit):
  x, y = _overlapping(10)
  w, loss = solve.logistic_optimum(x, y)
  x32, y32 = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
  ws = jnp.asarray(w, jnp.float32)[None] + jnp.asarray(
      np.random.default_rng(0).normal(size=(5, w.size)), jnp.float32) * jnp.arange(5.0)[:, None]
  fn = jax.vmap(solve.excess_loss, in_axes=(0, None, None, None))
  if jit:
    fn = jax.jit(fn)
  out = fn(ws, x32, y32, loss)
  assert out.shape == (5,) and out.dtype == jnp.float32
  expected = np.array([_loss(np.asarray(wi, np.float64), x32, y32) for wi in ws]) - loss
  # float32 loss: a few 1e-8 relative rounding.
  np.testing.assert_allclose(np.asarray(out), expected, atol=1e-6)
  assert abs(float(out[0])) < 1e-6 and (np.asarray(out[1:]) > 0).all()


def test_excess_loss_shape_errors():
  x, y = jnp.ones((3, 2)), jnp.ones(3)
  with pytest.raises(ValueError, match="w must have 1 dimension"):
    solve.excess_loss(jnp.ones((1, 2)), x, y, 0.0)
  with pytest.raises(ValueError, match=r"x must be \[n, d\] and y \[n\]"):
    solve.excess_loss(jnp.ones(2), jnp.ones(3), y, 0.0)
  with pytest.raises(ValueError, match="shapes do not match"):
    solve.excess_loss(jnp.ones(3), x, y, 0.0)
  with pytest.raises(ValueError, match="loss_star must be a scalar"):
    solve.excess_loss(jnp.ones(2), x, y, jnp.ones(2))
