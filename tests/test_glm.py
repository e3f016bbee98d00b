"""Tests for dpjax.problem.glm: fused logistic loss, gradient and curvature."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from dpjax import data
from dpjax.problem import glm

N, D = 37, 5


def _data(n=N, d=D, dtype=np.float32, seed=0, w_scale=3.0):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, d))
  x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0)
  y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
  w = w_scale * rng.standard_normal(d)
  return tuple(jnp.asarray(a.astype(dtype)) for a in (w, x, y))


# The autodiff references, jitted (one program per shape and dtype) rather than dispatched op
# by op: they are the references, not the code under test (whose eager path stays eager).
_autodiff_grad = jax.jit(jax.grad(glm.logistic_loss))
_autodiff_hess = jax.jit(jax.hessian(glm.logistic_loss))
_autodiff_value_and_grad = jax.jit(jax.value_and_grad(glm.logistic_loss))
# The unbatched function as the reference of the batching rules (called once per member).
_single_ref = jax.jit(glm.logistic_grad_and_curvature, static_argnums=(3,),
                      static_argnames=("chunk_size",))


def _rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.max(np.abs(a - b)) / np.max(np.abs(b))


def _call(fn, jit, *args, **kw):
  f = functools.partial(fn, **kw)
  return jax.jit(f)(*args) if jit else f(*args)


def _qu_reference(w, x):
  """mean_i tanh(z_i/2)/(2 z_i) x_i x_i^T from the definition, in numpy float64."""
  w, x = np.asarray(w, np.float64), np.asarray(x, np.float64)
  z = x @ w
  assert np.all(z != 0)
  c = np.tanh(z / 2) / (2 * z)
  return np.einsum("n,ni,nj->ij", c, x, x) / x.shape[0]


def _mp_qu(z):
  z = mpmath.mpf(float(z))
  return mpmath.mpf(1) / 4 if z == 0 else mpmath.tanh(z / 2) / (2 * z)


def _mp_hess(z):
  z = mpmath.mpf(float(z))
  return 1 / (4 * mpmath.cosh(z / 2) ** 2)


# ---------------------------------------------------------------- correctness


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("chunk_size", [None, 8])
def test_hessian_matches_autodiff_float32(jit, chunk_size):
  w, x, y = _data()
  loss, grad, hess = _call(glm.logistic_grad_and_curvature, jit, w, x, y,
                           curvature="hessian", chunk_size=chunk_size)
  assert loss.dtype == grad.dtype == hess.dtype == jnp.float32
  assert _rel(loss, glm.logistic_loss(w, x, y)) < 1e-5
  assert _rel(grad, _autodiff_grad(w, x, y)) < 1e-5
  assert _rel(hess, _autodiff_hess(w, x, y)) < 1e-5


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("chunk_size", [None, 8])
def test_hessian_matches_autodiff_float64(x64, jit, chunk_size):
  w, x, y = _data(dtype=np.float64)
  loss, grad, hess = _call(glm.logistic_grad_and_curvature, jit, w, x, y,
                           curvature="hessian", chunk_size=chunk_size)
  assert hess.dtype == jnp.float64
  assert _rel(loss, glm.logistic_loss(w, x, y)) < 1e-10
  assert _rel(grad, _autodiff_grad(w, x, y)) < 1e-10
  assert _rel(hess, _autodiff_hess(w, x, y)) < 1e-10


@pytest.mark.parametrize("jit", [True, False])
def test_qu_matches_definition(jit):
  w, x, y = _data()
  loss, grad, mat = _call(glm.logistic_grad_and_curvature, jit, w, x, y, curvature="qu")
  assert mat.dtype == jnp.float32
  assert _rel(mat, _qu_reference(w, x)) < 1e-5
  assert _rel(grad, _autodiff_grad(w, x, y)) < 1e-5
  assert _rel(loss, glm.logistic_loss(w, x, y)) < 1e-5


@pytest.mark.parametrize("jit", [True, False])
def test_qu_matches_definition_float64(x64, jit):
  w, x, y = _data(dtype=np.float64)
  _, _, mat = _call(glm.logistic_grad_and_curvature, jit, w, x, y, curvature="qu", chunk_size=10)
  assert mat.dtype == jnp.float64
  assert _rel(mat, _qu_reference(w, x)) < 1e-10


@pytest.mark.parametrize("curvature", glm.CURVATURES)
def test_float32_accumulation_matches_float64(x64, curvature):
  # Many blocks (chunk_size=64 over n=3000) accumulate without float32 drift.
  w, x, y = _data(n=3000, d=7, dtype=np.float64, seed=3)
  ref = glm.logistic_grad_and_curvature(w, x, y, curvature, chunk_size=64)
  got = glm.logistic_grad_and_curvature(
      w.astype(jnp.float32), x.astype(jnp.float32), y.astype(jnp.float32), curvature,
      chunk_size=64)
  assert got.matrix.dtype == jnp.float32 and ref.matrix.dtype == jnp.float64
  for a, b in zip(got, ref):
    assert _rel(a, b) < 1e-5


def test_qu_is_a_global_quadratic_upper_bound(x64):
  # f(v + D) <= f(v) + <g, D> + D^T H_qu(v) D / 2 (Ganesh et al. 2023, Lemma 5.1) at random
  # points and directions of widely varying size, in float64.
  w, x, y = _data(n=50, d=4, dtype=np.float64, seed=1)
  rng = np.random.default_rng(2)
  f = jax.jit(glm.logistic_loss)
  soi = jax.jit(functools.partial(glm.logistic_grad_and_curvature, curvature="qu"))
  worst = -np.inf
  for _ in range(200):
    v = jnp.asarray(rng.standard_normal(4) * 10 ** rng.uniform(-2, 1.5))
    step = jnp.asarray(rng.standard_normal(4) * 10 ** rng.uniform(-3, 1.5))
    loss, grad, h = soi(v, x, y)
    bound = loss + grad @ step + 0.5 * step @ h @ step
    worst = max(worst, float(f(v + step, x, y) - bound))
  assert worst <= 1e-12
  # The bound is not vacuous: the Hessian in place of H_qu violates it somewhere.
  v = jnp.zeros(4)
  loss, grad, h = glm.logistic_grad_and_curvature(v, x, y, "hessian")
  step = 20.0 * jnp.asarray(np.linalg.eigh(np.asarray(h))[1][:, -1])
  assert f(v + step, x, y) < loss + grad @ step + 0.5 * step @ h @ step
  big = 1.5 * jnp.asarray(np.linalg.eigh(np.asarray(h))[1][:, -1])
  assert f(v + big, x, y) < loss + grad @ big + 0.5 * big @ h @ big


def test_matrix_is_exactly_symmetric():
  w, x, y = _data(n=300, d=9)
  for curvature in glm.CURVATURES:
    m = np.asarray(glm.logistic_grad_and_curvature(w, x, y, curvature, chunk_size=64).matrix)
    np.testing.assert_array_equal(m, m.T)


def test_chunk_size_does_not_change_result():
  w, x, y = _data(n=101, d=6)
  ref = glm.logistic_grad_and_curvature(w, x, y, chunk_size=101)
  for chunk_size in (1, 3, 50, 1000):
    got = glm.logistic_grad_and_curvature(w, x, y, chunk_size=chunk_size)
    for a, b in zip(got, ref):
      np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("jit", [True, False])
def test_wide_data_d_greater_than_n(jit):
  w, x, y = _data(n=4, d=11)
  loss, grad, hess = _call(glm.logistic_grad_and_curvature, jit, w, x, y)
  assert hess.shape == (11, 11)
  assert _rel(grad, _autodiff_grad(w, x, y)) < 1e-5
  assert _rel(hess, _autodiff_hess(w, x, y)) < 1e-5
  h = np.asarray(hess, np.float64)
  assert np.linalg.matrix_rank(h, tol=1e-5 * np.abs(h).max()) == 4


@pytest.mark.parametrize("curvature", glm.CURVATURES)
def test_vmap_over_w(curvature):
  w, x, y = _data(n=40)
  ws = jnp.stack([w, 0.1 * w, -w])
  fn = functools.partial(glm.logistic_grad_and_curvature, curvature=curvature, chunk_size=16)
  batched = jax.vmap(fn, in_axes=(0, None, None))(ws, x, y)
  for k in range(3):
    single = fn(ws[k], x, y)
    for a, b in zip(batched, single):
      np.testing.assert_allclose(a[k], b, rtol=1e-6, atol=1e-7)


def test_vmap_over_datasets():
  w, x, y = _data(n=40)
  xs = jnp.stack([x, x[::-1]])
  ys = jnp.stack([y, y[::-1]])
  fn = functools.partial(glm.logistic_grad_and_curvature, chunk_size=8)
  batched = jax.vmap(fn, in_axes=(None, 0, 0))(w, xs, ys)
  single = fn(w, x, y)
  np.testing.assert_allclose(batched.matrix[1], single.matrix, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("jit", [True, False])
def test_loss_and_grad_matches_autodiff(jit):
  w, x, y = _data(n=90)
  loss, grad = _call(glm.logistic_loss_and_grad, jit, w, x, y, chunk_size=32)
  ref_loss, ref_grad = _autodiff_value_and_grad(w, x, y)
  assert _rel(loss, ref_loss) < 1e-5 and _rel(grad, ref_grad) < 1e-5
  batched = jax.vmap(glm.logistic_loss_and_grad, in_axes=(0, None, None))(
      jnp.stack([w, 2 * w]), x, y)
  assert _rel(batched[1][1], _autodiff_grad(2 * w, x, y)) < 1e-5


def test_loss_and_grad_float64(x64):
  w, x, y = _data(dtype=np.float64)
  loss, grad = glm.logistic_loss_and_grad(w, x, y)
  assert grad.dtype == jnp.float64
  assert _rel(grad, _autodiff_grad(w, x, y)) < 1e-12


@pytest.mark.parametrize("curvature", glm.CURVATURES)
def test_extreme_margins_stay_finite(curvature):
  # Margins y<x, w> of -1e4 (badly wrong) and +1e4 (very right).
  x = jnp.array([[1.0, 0.0], [0.0, 1.0]])
  y = jnp.array([1.0, 1.0])
  w = jnp.array([-1e4, 1e4])
  loss, grad, mat = glm.logistic_grad_and_curvature(w, x, y, curvature)
  assert np.isfinite(loss) and np.all(np.isfinite(grad)) and np.all(np.isfinite(mat))
  np.testing.assert_allclose(loss, 1e4 / 2, rtol=1e-6)
  np.testing.assert_allclose(grad, [-0.5, 0.0], atol=1e-7)
  expected = 0.0 if curvature == "hessian" else 1 / (2 * 1e4) / 2
  np.testing.assert_allclose(np.diag(mat), [expected, expected], rtol=1e-6, atol=1e-30)
  assert np.isfinite(glm.logistic_loss(w, x, y))
  assert np.all(np.isfinite(glm.logistic_loss_and_grad(w, x, y)[1]))


# --------------------------------------------------------------- coefficients

_Z = np.concatenate([[0.0], np.logspace(-9, 4, 300)])


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float64, 1e-14)])
def test_qu_coefficient_accuracy(x64, dtype, tol):
  z = _Z.astype(dtype)
  ref = np.array([float(_mp_qu(v)) for v in z])
  for sign in (1, -1):
    got = np.asarray(glm.qu_coefficient(jnp.asarray(sign * z)))
    assert got.dtype == dtype
    assert np.all(np.isfinite(got))
    assert np.max(np.abs(got - ref) / ref) < tol
  assert float(glm.qu_coefficient(jnp.asarray(0.0, dtype))) == 0.25


def test_qu_coefficient_grad_finite_at_zero():
  g = jax.grad(glm.qu_coefficient)(0.0)
  assert np.isfinite(g) and g == 0.0
  for z in (0.01, 1.0, -3.0):
    ref = float(mpmath.diff(lambda t: mpmath.tanh(t / 2) / (2 * t), z))
    np.testing.assert_allclose(jax.grad(glm.qu_coefficient)(z), ref, rtol=1e-5)


@pytest.mark.parametrize("dtype,tol,zmax", [(np.float32, 1e-6, 80.0), (np.float64, 1e-14, 700.0)])
def test_hessian_coefficient_accuracy(x64, dtype, tol, zmax):
  z = np.concatenate([[0.0], np.logspace(-9, np.log10(zmax), 300)]).astype(dtype)
  ref = np.array([float(_mp_hess(v)) for v in z])
  for sign in (1, -1):
    got = np.asarray(glm.hessian_coefficient(jnp.asarray(sign * z)))
    assert got.dtype == dtype
    assert np.max(np.abs(got - ref) / ref) < tol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_coefficients_finite_for_huge_margins(x64, dtype):
  big = np.finfo(dtype).max
  z = jnp.asarray(np.array([1e4, -1e4, 1e30, -1e30, big, -big], dtype))
  h = np.asarray(glm.hessian_coefficient(z))
  q = np.asarray(glm.qu_coefficient(z))
  assert np.all(np.isfinite(h)) and np.all(h >= 0) and np.all(h[:2] < 1e-300 + 1e-30)
  assert np.all(np.isfinite(q)) and np.all(q >= 0)
  np.testing.assert_allclose(q[:2], 1 / (2 * 1e4), rtol=1e-6)


def test_coefficients_bounded_by_quarter_and_ordered():
  # Both are <= 1/4 (L1 = 1/4) and c_hess <= c_qu.
  z = jnp.linspace(-50, 50, 2001)
  h, q = glm.hessian_coefficient(z), glm.qu_coefficient(z)
  assert float(jnp.max(h)) <= 0.25 and float(jnp.max(q)) <= 0.25
  assert bool(jnp.all(h <= q + 1e-7))


# ----------------------------------------------------------------- validation


def test_rejects_unknown_curvature():
  w, x, y = _data()
  with pytest.raises(ValueError, match=r"curvature must be one of \('hessian', 'qu'\)"):
    glm.logistic_grad_and_curvature(w, x, y, "newton")
  with pytest.raises(TypeError, match="curvature must be one of"):
    glm.logistic_grad_and_curvature(w, x, y, 1)


@pytest.mark.parametrize("fn", [glm.logistic_grad_and_curvature, glm.logistic_loss_and_grad])
def test_rejects_bad_shapes_and_values(fn):
  w, x, y = _data()
  with pytest.raises(ValueError, match=r"w must have 1 dimension"):
    fn(w[None], x, y)
  with pytest.raises(ValueError, match=r"x must have 2 dimension"):
    fn(w, x[0], y)
  with pytest.raises(ValueError, match=r"y must have 1 dimension"):
    fn(w, x, y[:, None])
  with pytest.raises(ValueError, match=r"w has 4 entries but x has 5 columns"):
    fn(w[:4], x, y)
  with pytest.raises(ValueError, match=r"y has 36 entries but x has 37 rows"):
    fn(w, x, y[:-1])
  with pytest.raises(TypeError, match=r"x must have a floating dtype, got int32"):
    fn(w, x.astype(jnp.int32), y)
  with pytest.raises(ValueError, match=r"x contains NaN or inf"):
    fn(w, x.at[3, 1].set(jnp.nan), y)
  with pytest.raises(ValueError, match=r"w contains NaN or inf"):
    fn(w.at[0].set(jnp.inf), x, y)
  with pytest.raises(ValueError, match=r"y must contain only the labels -1 and \+1"):
    fn(w, x, (y + 1) / 2)
  with pytest.raises(ValueError, match=r"x is empty"):
    fn(w, x[:0], y[:0])
  with pytest.raises(ValueError, match=r"chunk_size must be >= 1"):
    fn(w, x, y, chunk_size=0)
  with pytest.raises(TypeError, match=r"chunk_size must be an integer"):
    fn(w, x, y, chunk_size=2.5)


def test_shape_checks_run_under_jit():
  w, x, y = _data()
  with pytest.raises(ValueError, match=r"w has 4 entries but x has 5 columns"):
    jax.jit(glm.logistic_grad_and_curvature)(w[:4], x, y)


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("jit", [True, False])
def test_loss_and_grad_batching_rule_matches_loop(batch, jit):
  """The custom vmap rule (margins kept as (n, B)) equals a loop over w."""
  rng = np.random.default_rng(11)
  x = (rng.normal(size=(300, 6)) / 3).astype(np.float32)
  y = np.where(rng.random(300) < 0.5, -1.0, 1.0).astype(np.float32)
  ws = (3 * rng.normal(size=(batch, 6))).astype(np.float32)
  fn = jax.vmap(lambda w: glm.logistic_loss_and_grad(w, x, y))
  loss, grad = (jax.jit(fn) if jit else fn)(ws)
  for k in range(batch):
    ref_loss, ref_grad = glm.logistic_loss_and_grad(ws[k], x, y)
    np.testing.assert_allclose(loss[k], ref_loss, rtol=1e-6)
    np.testing.assert_allclose(grad[k], ref_grad, rtol=1e-5, atol=1e-7)
  # Nested vmap and a batched dataset take the generic path.
  nested = jax.vmap(fn)(np.stack([ws, 2 * ws]))
  np.testing.assert_allclose(nested[1][0], grad, rtol=1e-5, atol=1e-7)
  xs = np.stack([x, x[::-1]])
  per_x = jax.vmap(lambda xx: glm.logistic_loss_and_grad(ws[0], xx, y))(xs)
  np.testing.assert_allclose(per_x[1][0], grad[0], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(
      per_x[1][1], glm.logistic_loss_and_grad(ws[0], x[::-1], y)[1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("curvature", glm.CURVATURES)
@pytest.mark.parametrize("batch,n", [(3, 1000), (glm._PACKED_MIN_BATCH, 1000),
                                     (glm._PACKED_MIN_BATCH, 1003)])
@pytest.mark.parametrize("jit", [True, False])
def test_batching_rule_matches_loop(curvature, batch, n, jit):
  # d = 20: batch 3 takes the per-member map, batch _PACKED_MIN_BATCH the
  # packed triangle; n = 1003 also exercises the ragged tail block.
  x, y = data.synthetic(0, n=n, d=20)
  x, y = jnp.asarray(x), jnp.asarray(y)
  ws = 0.5 * jax.random.normal(jax.random.key(1), (batch, 20))
  fn = lambda w: glm.logistic_grad_and_curvature(w, x, y, curvature)  # noqa: E731
  vfn = jax.vmap(fn)
  batched = (jax.jit(vfn) if jit else vfn)(ws)
  assert np.array_equal(batched.matrix, np.swapaxes(batched.matrix, 1, 2))
  for k in range(batch):
    single = _single_ref(ws[k], x, y, curvature, chunk_size=n)
    for a, b in zip(batched, single):
      np.testing.assert_allclose(a[k], b, rtol=2e-5, atol=1e-7)


def test_packed_rule_float64(x64):
  x, y = data.synthetic(0, n=500, d=6, dtype=np.float64)
  ws = jax.random.normal(jax.random.key(2), (glm._PACKED_MIN_BATCH, 6), jnp.float64)
  batched = jax.vmap(lambda w: glm.logistic_grad_and_curvature(w, x, y, "hessian"))(ws)
  assert batched.matrix.dtype == jnp.float64
  for k in range(0, glm._PACKED_MIN_BATCH, 9):
    ref = _autodiff_hess(ws[k], jnp.asarray(x), jnp.asarray(y))
    np.testing.assert_allclose(batched.matrix[k], ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("jit", [True, False])
def test_loss_and_grad_blocked_batching_rule(jit):
  """Past the cache sizes the rule walks row blocks (and a ragged tail)."""
  n, d, batch = 30_011, 5, 80  # n * batch > glm._BATCHED_MARGINS_IN_CACHE
  assert n * batch > glm._BATCHED_MARGINS_IN_CACHE
  assert n % max(glm._MIN_BLOCK_ROWS, glm._BATCHED_BLOCK_ELEMENTS // (batch + d)) != 0
  rng = np.random.default_rng(12)
  x = (rng.normal(size=(n, d)) / 3).astype(np.float32)
  y = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float32)
  ws = (2 * rng.normal(size=(batch, d))).astype(np.float32)
  fn = jax.vmap(lambda w: glm.logistic_loss_and_grad(w, x, y))
  loss, grad = (jax.jit(fn) if jit else fn)(ws)
  margins = y[:, None] * (x.astype(np.float64) @ ws.T.astype(np.float64))  # (n, B)
  ref_loss = np.logaddexp(0.0, -margins).mean(axis=0)
  ref_grad = (-y[:, None] / (1 + np.exp(margins))).T @ x / n
  np.testing.assert_allclose(loss, ref_loss, rtol=2e-5)
  np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=2e-7)


@pytest.mark.parametrize("d", [130, 300])
@pytest.mark.parametrize("curvature", glm.CURVATURES)
def test_block_triangle_matches_autodiff_float64(x64, d, curvature):
  """At d >= 112 only the upper block triangle is multiplied; the assembled
  matrix is the full, exactly symmetric one."""
  assert len(glm._triangle_cuts(d)) > 2
  x, y = data.synthetic(3, n=700, d=d, dtype=np.float64)
  w = 0.3 * jax.random.normal(jax.random.key(4), (d,), jnp.float64)
  out = glm.logistic_grad_and_curvature(w, x, y, curvature)
  assert np.array_equal(out.matrix, out.matrix.T)
  z = np.asarray(x) @ np.asarray(w)
  c = np.asarray(glm._COEFFICIENTS[curvature](jnp.asarray(z)))
  np.testing.assert_allclose(out.matrix, (np.asarray(x) * c[:, None]).T @ np.asarray(x) / 700,
                             rtol=1e-12, atol=1e-16)
  np.testing.assert_allclose(out.grad, _autodiff_grad(w, jnp.asarray(x),
                                                                   jnp.asarray(y)),
                             rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("jit", [True, False])
def test_loss_and_grad_blocked_single_w(jit):
  """An x past the cache size takes row blocks also for a single w."""
  n, d = 84_011, 101
  assert n * d > glm._BATCHED_X_IN_CACHE
  rng = np.random.default_rng(13)
  x = (rng.normal(size=(n, d)) / 10).astype(np.float32)
  y = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float32)
  w = rng.normal(size=d).astype(np.float32)
  fn = functools.partial(glm.logistic_loss_and_grad, x=x, y=y)
  loss, grad = (jax.jit(fn) if jit else fn)(w)
  one = jax.vmap(fn)(w[None])
  margins = y * (x.astype(np.float64) @ w.astype(np.float64))
  np.testing.assert_allclose(loss, np.logaddexp(0.0, -margins).mean(), rtol=2e-5)
  np.testing.assert_allclose(grad, (-y / (1 + np.exp(margins))) @ x / n, rtol=1e-4, atol=2e-7)
  np.testing.assert_allclose(one[1][0], grad, rtol=1e-5, atol=1e-8)
