"""Tests for dpjax.problem.per_example: chunked per-example grads/Hessians + clipping."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.problem import glm, per_example

N, D = 23, 4


def _logistic(w, ex):
  x, y = ex
  return jnp.logaddexp(0.0, -y * (x @ w))


def _data(n=N, d=D, dtype=np.float32, seed=0, x_scale=1.0):
  rng = np.random.default_rng(seed)
  x = x_scale * rng.standard_normal((n, d))
  y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
  w = rng.standard_normal(d)
  return jnp.asarray(w.astype(dtype)), (jnp.asarray(x.astype(dtype)), jnp.asarray(y.astype(dtype)))


def _per_example_reference(w, batch):
  """Unchunked per-example gradients and Hessians (n * d * d memory; tests only)."""
  g = jax.vmap(jax.grad(_logistic), in_axes=(None, 0))(w, batch)
  h = jax.vmap(jax.hessian(_logistic), in_axes=(None, 0))(w, batch)
  return g, h


def _call(jit, *args, **kw):
  f = functools.partial(per_example.mean_grad_and_hessian, _logistic, **kw)
  return jax.jit(f)(*args) if jit else f(*args)


@pytest.mark.parametrize("jit", [True, False])
def test_agrees_with_glm_path(jit):
  w, (x, y) = _data(x_scale=0.4)
  res = _call(jit, w, (x, y), chunk_size=5)
  ref = glm.logistic_grad_and_curvature(w, x, y, "hessian")
  np.testing.assert_allclose(res.loss, ref.loss, rtol=1e-6)
  np.testing.assert_allclose(res.grad, ref.grad, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(res.hessian, ref.matrix, rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(res.hessian, res.hessian.T)
  assert np.isinf(res.grad_norm_bound) and np.isinf(res.curvature_norm_bound)
  assert int(res.num_grad_clipped) == 0 and int(res.num_curvature_clipped) == 0


def test_agrees_with_glm_path_float64(x64):
  w, (x, y) = _data(dtype=np.float64, x_scale=0.4)
  res = per_example.mean_grad_and_hessian(_logistic, w, (x, y), chunk_size=7)
  ref = glm.logistic_grad_and_curvature(w, x, y, "hessian")
  assert res.hessian.dtype == jnp.float64
  np.testing.assert_allclose(res.grad, ref.grad, rtol=1e-12, atol=1e-15)
  np.testing.assert_allclose(res.hessian, ref.matrix, rtol=1e-12, atol=1e-15)


def test_chunk_size_does_not_change_result():
  w, batch = _data()
  ref = per_example.mean_grad_and_hessian(_logistic, w, batch, chunk_size=N,
                                          grad_norm_bound=0.5, curvature_norm_bound=0.2)
  for chunk_size in (1, 5, 22, 1024):  # divides n (1) or not; 1024 > n.
    got = per_example.mean_grad_and_hessian(_logistic, w, batch, chunk_size=chunk_size,
                                            grad_norm_bound=0.5, curvature_norm_bound=0.2)
    for a, b in zip(got, ref):
      np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("curvature_norm", per_example.CURVATURE_NORMS)
def test_clipping_enforces_bounds(jit, curvature_norm):
  w, batch = _data(x_scale=2.0)
  g_bound, h_bound = 0.7, 0.3
  res = _call(jit, w, batch, chunk_size=6, grad_norm_bound=g_bound,
              curvature_norm_bound=h_bound, curvature_norm=curvature_norm)
  g, h = _per_example_reference(w, batch)
  clip_g = jax.vmap(lambda v: per_example.clip_by_norm(v, g_bound))
  clip_h = jax.vmap(lambda v: per_example.clip_by_norm(v, h_bound, curvature_norm))
  gc, g_over = clip_g(g)
  hc, h_over = clip_h(h)
  # Every clipped per-example quantity satisfies its bound (up to rounding) ...
  g_norms = np.linalg.norm(np.asarray(gc, np.float64), axis=1)
  hc64 = np.asarray(hc, np.float64)
  if curvature_norm == "frobenius":
    h_norms = np.linalg.norm(hc64, axis=(1, 2))
  else:
    h_norms = np.abs(np.linalg.eigvalsh(hc64)).max(axis=1)
  assert np.all(g_norms <= g_bound * (1 + 1e-6))
  assert np.all(h_norms <= h_bound * (1 + 1e-6))
  # ... examples under the bound are untouched, those over it land on it ...
  raw_g = np.linalg.norm(np.asarray(g, np.float64), axis=1)
  np.testing.assert_allclose(g_norms[raw_g > g_bound], g_bound, rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(gc)[raw_g <= g_bound], np.asarray(g)[raw_g <= g_bound])
  assert 0 < int(np.sum(g_over)) < N and 0 < int(np.sum(h_over)) < N  # the test clips some.
  # ... and the chunked means equal the means of the clipped per-example values.
  np.testing.assert_allclose(res.grad, jnp.mean(gc, axis=0), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(res.hessian, jnp.mean(hc, axis=0), rtol=1e-5, atol=1e-7)
  assert int(res.num_grad_clipped) == int(np.sum(g_over))
  assert int(res.num_curvature_clipped) == int(np.sum(h_over))
  assert float(res.grad_norm_bound) == pytest.approx(g_bound)
  assert float(res.curvature_norm_bound) == pytest.approx(h_bound)
  # Sensitivity consequence: the mean's norm is within the bound too.
  assert float(jnp.linalg.norm(res.grad)) <= g_bound * (1 + 1e-6)


def test_loose_bounds_are_a_no_op():
  w, batch = _data()
  free = per_example.mean_grad_and_hessian(_logistic, w, batch, chunk_size=8)
  loose = per_example.mean_grad_and_hessian(_logistic, w, batch, chunk_size=8,
                                            grad_norm_bound=1e6, curvature_norm_bound=1e6)
  np.testing.assert_array_equal(free.grad, loose.grad)
  np.testing.assert_array_equal(free.hessian, loose.hessian)
  assert int(loose.num_grad_clipped) == 0 and int(loose.num_curvature_clipped) == 0


def test_vmap_over_params():
  w, batch = _data()
  ws = jnp.stack([w, -2 * w, jnp.zeros_like(w)])
  f = functools.partial(per_example.mean_grad_and_hessian, _logistic, chunk_size=5,
                        grad_norm_bound=0.5)
  batched = jax.vmap(f, in_axes=(0, None))(ws, batch)
  for k in range(3):
    single = f(ws[k], batch)
    np.testing.assert_allclose(batched.grad[k], single.grad, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(batched.hessian[k], single.hessian, rtol=1e-6, atol=1e-7)
    assert int(batched.num_grad_clipped[k]) == int(single.num_grad_clipped)


def test_without_hessian_and_dict_batch():
  w, (x, y) = _data()
  loss_fn = lambda p, ex: _logistic(p, (ex["x"], ex["y"]))  # noqa: E731
  res = per_example.mean_grad_and_hessian(loss_fn, w, {"x": x, "y": y},
                                          compute_hessian=False, chunk_size=10)
  assert res.hessian is None and res.num_curvature_clipped is None
  ref_loss, ref_grad = glm.logistic_loss_and_grad(w, x, y)
  np.testing.assert_allclose(res.loss, ref_loss, rtol=1e-6)
  np.testing.assert_allclose(res.grad, ref_grad, rtol=1e-5, atol=1e-7)


def test_clip_by_norm_vectors_and_matrices():
  v, over = per_example.clip_by_norm(jnp.array([3.0, 4.0]), 10.0)
  np.testing.assert_array_equal(v, [3.0, 4.0])
  assert not bool(over)
  m = jnp.array([[3.0, 0.0], [0.0, -4.0]])
  fro, _ = per_example.clip_by_norm(m, 1.0)
  np.testing.assert_allclose(fro, m / 5.0, rtol=1e-6)
  spec, _ = per_example.clip_by_norm(m, 1.0, "spectral")
  np.testing.assert_allclose(spec, m / 4.0, rtol=1e-6)
  zero, over = per_example.clip_by_norm(jnp.zeros(3), 1.0)
  assert np.all(np.isfinite(zero)) and not bool(over)


# ----------------------------------------------------------------- validation


def test_rejects_bad_inputs():
  w, batch = _data()
  f = per_example.mean_grad_and_hessian
  with pytest.raises(ValueError, match=r"chunk_size must be >= 1, got 0"):
    f(_logistic, w, batch, chunk_size=0)
  with pytest.raises(TypeError, match=r"chunk_size must be an integer"):
    f(_logistic, w, batch, chunk_size=2.0)
  with pytest.raises(ValueError, match=r"grad_norm_bound must be > 0, got -1.0"):
    f(_logistic, w, batch, grad_norm_bound=-1.0)
  with pytest.raises(ValueError, match=r"curvature_norm_bound must be > 0, got 0.0"):
    f(_logistic, w, batch, curvature_norm_bound=0.0)
  with pytest.raises(ValueError, match=r"grad_norm_bound must be finite"):
    f(_logistic, w, batch, grad_norm_bound=float("nan"))
  with pytest.raises(ValueError, match=r"params must have 1 dimension\(s\), got shape \(1, 4\)"):
    f(_logistic, w[None], batch)
  with pytest.raises(TypeError, match=r"params must have a floating dtype"):
    f(_logistic, jnp.arange(4), batch)
  with pytest.raises(ValueError, match=r"params contains NaN or inf"):
    f(_logistic, w.at[0].set(jnp.nan), batch)
  with pytest.raises(ValueError, match=r"curvature_norm must be one of \('frobenius', 'spectral'\)"):
    f(_logistic, w, batch, curvature_norm="nuclear")
  with pytest.raises(TypeError, match=r"loss_fn must be callable"):
    f("logistic", w, batch)
  with pytest.raises(ValueError, match=r"same leading size n, got \[22, 23\]"):
    f(_logistic, w, (batch[0], batch[1][:-1]))
  with pytest.raises(ValueError, match=r"batch is empty"):
    f(_logistic, w, (batch[0][:0], batch[1][:0]))
  with pytest.raises(ValueError, match=r"batch has no arrays"):
    f(_logistic, w, ())
  with pytest.raises(ValueError, match=r"leading example axis"):
    f(_logistic, w, (batch[0], jnp.float32(1.0)))
  with pytest.raises(TypeError, match=r"must return a float scalar for ONE example"):
    f(lambda p, ex: ex[0] * p, w, batch)
  with pytest.raises(TypeError, match=r"compute_hessian must be a bool"):
    f(_logistic, w, batch, compute_hessian=1)
  with pytest.raises(ValueError, match=r"curvature_norm_bound was given but compute_hessian=False"):
    f(_logistic, w, batch, curvature_norm_bound=1.0, compute_hessian=False)


def test_clip_by_norm_rejects_bad_inputs():
  with pytest.raises(ValueError, match=r"bound must be > 0"):
    per_example.clip_by_norm(jnp.ones(2), -1.0)
  with pytest.raises(ValueError, match=r"v must be a vector or a square matrix, got shape \(2, 3\)"):
    per_example.clip_by_norm(jnp.ones((2, 3)), 1.0)
  with pytest.raises(ValueError, match=r"norm must be one of"):
    per_example.clip_by_norm(jnp.ones((2, 2)), 1.0, "l1")


def test_memory_is_per_chunk_not_per_dataset():
  # The compiled temp buffers stay far below n * d * d floats for a small chunk
  # (and reach that size when the chunk is the whole dataset).
  n, d = 2000, 20
  w, batch = _data(n=n, d=d)
  full = n * d * d * 4

  def temp_bytes(chunk_size):
    f = jax.jit(lambda p, b: per_example.mean_grad_and_hessian(
        _logistic, p, b, chunk_size=chunk_size))
    analysis = f.lower(w, batch).compile().memory_analysis()
    if analysis is None:
      pytest.skip("backend gives no memory analysis")
    return analysis.temp_size_in_bytes

  assert temp_bytes(16) < full / 20
  assert temp_bytes(n) >= full
