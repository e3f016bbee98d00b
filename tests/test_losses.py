"""Tests for dpjax.problem.losses: constants, exact derivatives, clipping of outliers, optimum."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.problem import losses, solve

LOSS_ARGS = {
    "logistic": {},
    "l2_logistic": {"regularization": 0.05},
    "pseudo_huber": {"delta": 0.5},
    "poisson": {"radius": 1.0, "label_bound": 6.0},
}


def _get(name):
  return losses.get_loss(name, **LOSS_ARGS[name])


def _labels(name, rng, n):
  if name in ("logistic", "l2_logistic"):
    return np.where(rng.random(n) < 0.5, -1.0, 1.0)
  if name == "pseudo_huber":
    return 2 * rng.standard_normal(n)
  return rng.integers(0, 7, n).astype(float)


def test_registry_constants_and_errors():
  """The documented L0, L1, structure; bad parameters are refused with the fix."""
  assert _get("logistic")[2:6] == (1.0, 0.25, 0.0, "rank_one")
  assert _get("l2_logistic")[2:6] == (1.0, 0.25, 0.05, "rank_one")
  assert _get("pseudo_huber")[2:6] == (0.5, 1.0, 0.0, "general")
  p = _get("poisson")
  assert (p.grad_norm_bound, p.curvature_norm_bound) == (6.0, math.e)
  assert losses.get_loss("poisson", label_bound=1.0).grad_norm_bound == math.e
  with pytest.raises(ValueError, match="name must be one of"):
    losses.get_loss("hinge")
  with pytest.raises(TypeError, match="unknown parameter"):
    losses.get_loss("logistic", regularization=0.1)
  with pytest.raises(ValueError, match="regularization=mu > 0"):
    losses.get_loss("l2_logistic")
  with pytest.raises(ValueError, match="label_bound"):
    losses.get_loss("poisson")
  with pytest.raises(ValueError, match="delta must be > 0"):
    losses.get_loss("pseudo_huber", delta=0.0)
  with pytest.raises(TypeError, match="dpjax.problem.losses.Loss"):
    losses.newton_step_inputs("logistic", jnp.zeros(2), jnp.zeros((3, 2)), jnp.ones(3))
  with pytest.raises(ValueError, match="-1 and \\+1"):
    losses.newton_step_inputs(_get("logistic"), jnp.zeros(2), jnp.zeros((3, 2)), jnp.zeros(3))
  with pytest.raises(ValueError, match=">= 0"):
    losses.objective(_get("poisson"), jnp.zeros(2), jnp.zeros((3, 2)), -jnp.ones(3))


@pytest.mark.parametrize("name", list(LOSS_ARGS))
def test_derivatives_match_host_formulas_and_bounds(name, x64):
  """JAX grad/Hessian of the per-example loss equal the float64 host formulas,
  and on the data contract |phi'| <= L0, 0 <= phi'' <= L1 (the derivations)."""
  loss = _get(name)
  rng = np.random.default_rng(1)
  n, d = 200, 3
  x = rng.standard_normal((n, d))
  x /= np.linalg.norm(x, axis=1, keepdims=True) / rng.uniform(0.1, 1.0, (n, 1))
  y = _labels(name, rng, n)
  w = rng.standard_normal(d)
  if name == "poisson":  # both inside and outside the ball ||w|| <= R = 1
    w *= 3.0 / np.linalg.norm(w)
  z = x @ w
  phi, d1, d2 = loss.example_loss.host(z, y)
  f, g, h = _all_orders(loss.example_loss, jnp.asarray(w), (jnp.asarray(x), jnp.asarray(y)))
  np.testing.assert_allclose(f, phi, rtol=1e-13)
  np.testing.assert_allclose(g, d1[:, None] * x, rtol=1e-12, atol=1e-15)
  np.testing.assert_allclose(h, d2[:, None, None] * x[:, :, None] * x[:, None, :],
                             rtol=1e-12, atol=1e-15)
  # The constants: sup over a fine grid of the contract (|z| <= R for poisson).
  zz = np.linspace(-1.0, 1.0, 2001) * (loss.radius or 50.0)
  labels = {"logistic": [-1.0, 1.0], "l2_logistic": [-1.0, 1.0],
            "pseudo_huber": [-1e3, -1.0, 0.0, 2.0, 1e3], "poisson": [0.0, 3.0, 6.0]}[name]
  for yy in labels:
    _, s1, s2 = loss.example_loss.host(zz, np.full_like(zz, yy))
    assert np.max(np.abs(s1)) <= loss.grad_norm_bound * (1 + 1e-12)
    assert 0 <= np.min(s2) and np.max(s2) <= loss.curvature_norm_bound * (1 + 1e-12)
  if name == "pseudo_huber":  # both bounds are attained (tight constants)
    _, s1, s2 = loss.example_loss.host(np.array([1e9, 0.0]), np.zeros(2))
    np.testing.assert_allclose([s1[0], s2[1]], [0.5, 1.0], rtol=1e-12)


@functools.partial(jax.jit, static_argnums=0)
def _all_orders(fn, w, ex):
  """Per-example value, gradient and Hessian (n x d x d: tests only, small n)."""
  return tuple(jax.vmap(f, (None, 0))(w, ex) for f in (fn, jax.grad(fn), jax.hessian(fn)))


def _per_example_f32_f64(fn, w, x, y):
  out = []
  for dt in (jnp.float32, jnp.float64):
    args = (jnp.asarray(w, dt), (jnp.asarray(x, dt), jnp.asarray(y, dt)))
    out.append([np.asarray(v, np.float64) for v in _all_orders(fn, *args)])
  return out


def test_float32_matches_float64_near_singular_points(x64):
  """Pseudo-Huber at r -> 0 and |r| -> inf, the softplus at large margins:
  float32 value, gradient and Hessian agree with float64 to float32 rounding."""
  r = np.array([0.0, 1e-7, -1e-4, 3e-3, 0.7, -40.0, 1e6, -1e30])  # r = <0, x> - y = -y exactly
  f32, f64 = _per_example_f32_f64(_get("pseudo_huber").example_loss, np.zeros(1),
                                  np.ones((8, 1)), -r)
  for a, b in zip(f32, f64):
    np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-37)
  assert f32[0][2] > 0  # delta^2 (sqrt(1 + (r/delta)^2) - 1) would round to 0 in float32
  m = np.array([0.0, 1e-6, -5.0, 17.0, 30.0, -30.0, 80.0, -80.0])
  f32, f64 = _per_example_f32_f64(_get("logistic").example_loss, np.ones(1), m[:, None],
                                  np.ones(8))
  for a, b in zip(f32, f64):
    np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-37)
  assert f32[2][4] > 0  # sigma(30) sigma(-30) = 9.4e-14, not 1 - sigma(30) = 0


@pytest.mark.parametrize("name", list(LOSS_ARGS))
def test_outliers_are_clipped_to_the_public_bounds(name):
  """Huge rows / labels / iterates: every example's clipped gradient has norm
  <= L0 and its Hessian Frobenius norm <= L1, so removing one example moves
  the SUMS by at most L0 and L1 (the sensitivities of the privacy proof)."""
  loss = _get(name)
  rng = np.random.default_rng(2)
  n, d = 40, 4
  x = rng.standard_normal((n, d)) * 0.2
  y = _labels(name, rng, n)
  w = rng.standard_normal(d) * (50.0 if name == "poisson" else 1.0)
  x[0] = rng.standard_normal(d)
  x[0] = 5e3 * (x[0] - (x[0] @ w) / (w @ w) * w) / np.linalg.norm(x[0])  # huge, <x0, w> ~ 0
  x[1] = 10.0  # another big row
  if name in ("pseudo_huber", "poisson"):
    y[0] = 3.0  # phi'(0, 3) != 0
    y[2] = 1e7  # a huge label
  w = jnp.asarray(w, jnp.float32)
  x, y = x.astype(np.float32), y.astype(np.float32)
  full = losses.newton_step_inputs(loss, w, x, y, chunk_size=16)
  assert int(full.num_grad_clipped) >= 1 and int(full.num_curvature_clipped) >= 1
  mu = loss.regularization
  for i in (0, 2):
    one = losses.newton_step_inputs(loss, w, x[i:i + 1], y[i:i + 1])
    g = np.asarray(one.grad, np.float64) - mu * np.asarray(w, np.float64)
    h = np.asarray(one.hessian, np.float64) - mu * np.eye(d)
    assert np.all(np.isfinite(g)) and np.all(np.isfinite(h))
    assert np.linalg.norm(g) <= loss.grad_norm_bound * (1 + 1e-5)
    assert np.linalg.norm(h) <= loss.curvature_norm_bound * (1 + 1e-5)
    rest = losses.newton_step_inputs(loss, w, np.delete(x, i, 0), np.delete(y, i, 0))
    dg = n * np.asarray(full.grad, np.float64) - (n - 1) * np.asarray(rest.grad, np.float64)
    dh = n * np.asarray(full.hessian, np.float64) - (n - 1) * np.asarray(rest.hessian, np.float64)
    np.testing.assert_allclose(dg - mu * np.asarray(w), g, atol=2e-4 * loss.grad_norm_bound)
    np.testing.assert_allclose(dh - mu * np.eye(d), h, atol=2e-4 * loss.curvature_norm_bound)
  # The huge row is clipped exactly to the bound (not merely below it).
  one = losses.newton_step_inputs(loss, w, x[:1], y[:1])
  g0 = np.asarray(one.grad, np.float64) - mu * np.asarray(w, np.float64)
  np.testing.assert_allclose(np.linalg.norm(g0), loss.grad_norm_bound, rtol=1e-5)


def test_ridge_is_public_and_unclipped():
  """l2_logistic: grad = clipped data mean + mu w (mu w may exceed L0: it is
  data-independent), Hessian = clipped mean + mu I; objective adds mu/2 ||w||^2."""
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.standard_normal((30, 3)) * 0.3, jnp.float32)
  y = jnp.asarray(np.where(rng.random(30) < 0.5, -1.0, 1.0), jnp.float32)
  w = jnp.array([40.0, -30.0, 0.0])
  reg, bare = losses.get_loss("l2_logistic", regularization=0.1), _get("logistic")
  a = losses.newton_step_inputs(reg, w, x, y)
  b = losses.newton_step_inputs(bare, w, x, y)
  np.testing.assert_allclose(a.grad, b.grad + 0.1 * w, rtol=1e-6)
  np.testing.assert_allclose(a.hessian, b.hessian + 0.1 * jnp.eye(3), rtol=1e-6)
  np.testing.assert_allclose(a.objective, b.objective + 0.05 * 2500.0, rtol=1e-6)
  np.testing.assert_allclose(a.objective, losses.objective(reg, w, x, y), rtol=1e-6)
  assert float(jnp.linalg.norm(a.grad)) > 4.0  # > L0 = 1: the ridge is not clipped
  assert a.hessian is not None
  assert losses.newton_step_inputs(reg, w, x, y, compute_hessian=False).hessian is None


@pytest.mark.parametrize("name", ["logistic", "pseudo_huber"])
def test_qu_soi(name, x64):
  """curvature='qu': same gradient as 'hessian', SOI = mean c x x^T with the
  documented c, a global upper bound of the loss, and <= L1 per example."""
  loss = _get(name)
  rng = np.random.default_rng(4)
  n, d = 50, 3
  x = rng.standard_normal((n, d))
  x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))  # the contract: no clipping
  y = _labels(name, rng, n)
  w = rng.standard_normal(d)
  args = (loss, jnp.asarray(w), jnp.asarray(x), jnp.asarray(y))
  qu, he = losses.newton_step_inputs(*args, curvature="qu"), losses.newton_step_inputs(*args)
  np.testing.assert_allclose(qu.grad, he.grad, rtol=1e-13)
  np.testing.assert_allclose(qu.objective, he.objective, rtol=1e-13)
  z = x @ w
  c = np.tanh(y * z / 2) / (y * z) / 2 if name == "logistic" else 0.5 / np.hypot(0.5, z - y)
  np.testing.assert_allclose(qu.hessian, (x.T * c) @ x / n, rtol=1e-12)
  assert np.max(c) <= loss.curvature_norm_bound
  # F(w + D) <= F(w) + <g, D> + D' H_qu D / 2 for steps D of all sizes.
  steps = rng.standard_normal((30, d)) * np.repeat([0.1, 1.0, 10.0], 10)[:, None]
  upper = (float(he.objective) + steps @ np.asarray(he.grad)
           + 0.5 * np.einsum("kd,de,ke->k", steps, np.asarray(qu.hessian), steps))
  value = jax.vmap(lambda v: losses.objective(loss, v, args[2], args[3]))(w + steps)
  assert np.all(np.asarray(value) <= upper + 1e-12)
  with pytest.raises(ValueError, match="quadratic upper bound only"):
    losses.newton_step_inputs(_get("poisson"), args[1], args[2], jnp.abs(args[3]), curvature="qu")


@pytest.mark.parametrize("name", list(LOSS_ARGS))
def test_optimum_is_stationary(name, x64):
  """The host Newton optimum has a float64 gradient ~0 under the JAX code too
  (independent implementations agree), and the reported value is F(w*)."""
  loss = _get(name)
  rng = np.random.default_rng(5)
  x = rng.standard_normal((300, 4))
  x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
  y = _labels(name, rng, 300)
  w_star, f_star = losses.optimum(loss, x, y)
  assert w_star.dtype == np.float64
  s = losses.newton_step_inputs(loss, jnp.asarray(w_star), jnp.asarray(x), jnp.asarray(y))
  assert float(jnp.linalg.norm(s.grad)) < 1e-12
  np.testing.assert_allclose(float(s.objective), f_star, rtol=1e-14)
  if name == "logistic":
    np.testing.assert_allclose(f_star, solve.logistic_optimum(x, y).loss, rtol=1e-13)


def test_optimum_errors():
  x = np.array([[1.0], [0.5]])
  with pytest.raises(RuntimeError, match="did not converge"):
    losses.optimum(_get("logistic"), x, np.array([1.0, -1.0]), max_steps=1)
  custom = _get("logistic")._replace(example_loss=lambda w, ex: jnp.sum(w))
  with pytest.raises(TypeError, match="registered loss"):
    losses.optimum(custom, x, np.array([1.0, -1.0]))


def test_dp_options():
  """Clip only for the bare logistic SOI; DP-GD's step is 1 / (L1 + mu)."""
  assert losses.newton_options(_get("logistic"), "clip")["curvature_structure"] == "rank_one"
  for name in ("l2_logistic", "pseudo_huber", "poisson"):
    with pytest.raises(ValueError, match="clip stays logistic-only"):
      losses.newton_options(_get(name), "clip")
    opts = losses.newton_options(_get(name))
    assert opts["modification"] == "add"
  assert losses.newton_options(_get("pseudo_huber"))["curvature_structure"] == "general"
  assert losses.gd_options(_get("l2_logistic")) == {"grad_norm_bound": 1.0,
                                                    "learning_rate": 1 / 0.3}
  assert losses.gd_options(_get("pseudo_huber"))["grad_norm_bound"] == 0.5
