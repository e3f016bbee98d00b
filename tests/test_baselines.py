"""Tests of dpjax.baselines: the Fig. 2 / Fig. 3 baselines (Ganesh et al. NeurIPS 2023, Sec. 6).

Whole runs go through the internal ``dpjax.baselines._run.run`` (which
``dpjax.fit`` calls; it takes typed keys and reports the privacy statement);
:func:`test_fit_returns_the_internal_run` ties the two together.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpjax
from conftest import Z_MAX, maybe_jit, scale_z
from dpjax import accounting, baselines, data
from dpjax.baselines import _run
from dpjax.mechanisms import noise
from dpjax.problem import glm, solve


@pytest.fixture(scope="module")
def small():
  return data.synthetic(0, n=400, d=4)


@pytest.fixture(scope="module")
def medium():
  ds = data.synthetic(1, n=2000, d=5)
  return ds.x, ds.y, solve.logistic_optimum(ds.x, ds.y).loss


def _excess(w, x, y, loss_star):
  a = np.asarray(y, np.float64)[:, None] * np.asarray(x, np.float64)
  return float(np.mean(np.logaddexp(0.0, -(a @ np.asarray(w, np.float64))))) - loss_star


# ----------------------------------------------------------------------------
# Privacy flags, determinism, keys.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", baselines.BASELINES)
def test_runs_with_right_privacy_flag(small, name):
  x, y = small
  steps = None if name == "aop" else 3
  keys = jax.random.split(jax.random.key(3), 2)
  params, losses, private, epsilon, delta, rho, info = _run.run(
      name, x, y, epsilon=2.0, steps=steps, key=keys)
  assert private is {"aop": True, "damped-newton": False, "damped-newton-private": True,
                     "dp-gd-oracle": False}[name]
  assert params.shape == (2, 4) and np.all(np.isfinite(params))
  assert not np.array_equal(params[0], params[1])  # different keys differ
  assert delta == pytest.approx(400.0**-2) and epsilon == 2.0
  assert ("NOT private" in info["why"]) is (not private)
  again = _run.run(name, x, y, epsilon=2.0, steps=steps, key=keys)[0]
  np.testing.assert_array_equal(again, params)  # deterministic for fixed keys
  if name == "aop":  # one key == that member of the batch
    single = _run.run(name, x, y, epsilon=2.0, steps=steps, key=keys[1])[0]
    np.testing.assert_allclose(single, params[1], rtol=1e-4, atol=1e-5)
  if name == "aop":
    assert rho is None and losses is None
  else:
    assert rho == pytest.approx(accounting.epsilon_to_zcdp(2.0, 400.0**-2, "gaussian"))
    np.testing.assert_allclose(info["rho_spent"], rho, rtol=1e-12)  # charged
    assert losses.shape == (2, 4)


@pytest.mark.parametrize("name", baselines.BASELINES)
def test_fit_returns_the_internal_run(small, name):
  """``dpjax.fit`` on a baseline is the internal run with ``split(key(seed), repeats)``."""
  x, y = small
  steps = None if name == "aop" else 3
  res = dpjax.fit((x, y), name, epsilon=2.0, steps=steps, repeats=2, seed=3)
  params, losses, private, epsilon, delta, rho, info = _run.run(
      name, x, y, epsilon=2.0, steps=steps, key=jax.random.split(jax.random.key(3), 2))
  assert isinstance(res, dpjax.FitResult) and res.algorithm == name
  np.testing.assert_array_equal(res.params, params)
  assert (res.private, res.epsilon, res.delta, res.rho) == (private, epsilon, delta, rho)
  if name == "aop":
    assert res.steps == 0 and res.losses.shape == (2, 1)
    np.testing.assert_array_equal(res.rho_spent, 0.0)
  else:
    np.testing.assert_array_equal(res.losses, losses)
    np.testing.assert_array_equal(res.rho_spent, info["rho_spent"])
    np.testing.assert_array_equal(res.guard_resets, info["guard_resets"])


# ----------------------------------------------------------------------------
# AOP.
# ----------------------------------------------------------------------------


def test_aop_calibration_uses_true_l_and_beta():
  n, eps, delta = 5000, 1.0, 1e-8
  for lip in (1.0, math.sqrt(2.0)):
    c = baselines.aop_calibration(n, eps, delta, row_norm_bound=lip)
    assert c.lipschitz == lip and c.smoothness == pytest.approx(lip**2 / 4)
    eps_out, eps_obj = 0.01 * eps, 0.99 * eps
    eps_p, eps_j = 0.9 * eps_obj, 0.1 * eps_obj
    d_out = 0.01 * delta
    d_obj = 0.99 * delta * math.exp(-eps_out)
    lam = 2 * (lip**2 / 4) / eps_j
    gamma = 1.0 / n**2
    assert (c.eps_out, c.eps_p, c.eps_jacobian) == pytest.approx((eps_out, eps_p, eps_j))
    assert c.eps_out + c.eps_p + c.eps_jacobian == pytest.approx(eps, rel=1e-14)
    assert (c.delta_out, c.delta_obj) == pytest.approx((d_out, d_obj))
    assert c.delta_out + c.delta_obj * math.exp(c.eps_out) == pytest.approx(delta, rel=1e-14)
    assert c.big_lambda == pytest.approx(lam)
    assert c.sigma_obj == pytest.approx(
        (2 * lip / n) * (1 + math.sqrt(2 * math.log(1 / d_obj))) / eps_p)
    assert c.sigma_out == pytest.approx(
        (2 * n * gamma / lam) * (1 + math.sqrt(2 * math.log(1 / d_out))) / eps_out)
    assert not c.reallocated
  # The reference's constants (L = 1, beta = 1) on sqrt(2)-norm rows would give a smaller
  # Lambda-to-beta margin and a smaller sigma_obj: ours are strictly larger.
  c2 = baselines.aop_calibration(n, eps, delta, row_norm_bound=math.sqrt(2.0))
  c1 = baselines.aop_calibration(n, eps, delta)
  assert c2.sigma_obj == pytest.approx(math.sqrt(2.0) * c1.sigma_obj)


def test_aop_large_epsilon_reallocates_instead_of_zero(small):
  x, y = small
  c = baselines.aop_calibration(400, 12.0, 1e-9)
  assert c.reallocated and c.eps_jacobian == pytest.approx(0.999)
  assert c.eps_frac_used > 0.9
  assert c.eps_out + c.eps_p + c.eps_jacobian == pytest.approx(12.0, rel=1e-14)
  theta, info = baselines.aop(x, y, epsilon=12.0, delta=1e-9, key=0)
  assert info["reallocated"] and np.linalg.norm(theta) > 0.1  # the reference returned 0
  with pytest.raises(ValueError, match="too large for AOP"):
    baselines.aop_calibration(400, 40.0, 1e-9)


def _perturbed_grad(a, ridge, b):
  n = a.shape[0]
  # Recomputed independently; 1 / (1 + e^m) = (1 - tanh(m / 2)) / 2 without overflow.
  return lambda t: -(a.T @ (0.5 - 0.5 * np.tanh(0.5 * (a @ t)))) / n + ridge * t + b


def test_aop_minimiser_reaches_gamma(small):
  x, y = small
  a = np.asarray(y, np.float64)[:, None] * np.asarray(x, np.float64)
  b = np.array([0.3, -0.2, 0.1, 0.05])
  gamma = 1.0 / 400**2
  grad = _perturbed_grad(a, 0.01, b)
  for max_iter in (100, 1):  # Newton alone; one Newton step, then the backstop
    theta, certified = baselines._minimize_perturbed(a, 0.01, b, gamma, max_iter, 0.25)
    assert certified and np.linalg.norm(grad(theta)) <= 0.5 * gamma


@pytest.mark.parametrize("b_scale", [1.0, 30.0])
def test_aop_backstop_certifies_from_any_start(small, b_scale):
  # Nesterov's method alone, from 0 and from a far point, with b large enough that
  # ||theta*|| ~ ||b|| / ridge is in the hundreds to thousands: its step count is
  # derived from the strong convexity and smoothness only, and it certifies.
  x, y = small
  a = np.asarray(y, np.float64)[:, None] * np.asarray(x, np.float64)
  ridge, gamma = 0.0126, 1.0 / 400**2
  b = b_scale * np.array([3.0, -2.0, 1.0, 0.5])
  grad = _perturbed_grad(a, ridge, b)
  for start in (np.zeros(4), np.full(4, 50.0)):
    theta, certified = baselines._accelerated_backstop(
        grad, start, gamma, strong_convexity=ridge, smoothness=0.25 + ridge)
    assert certified and np.linalg.norm(grad(theta)) <= 0.5 * gamma
    assert np.linalg.norm(theta) > 100.0  # far from both starts: it really ran


def test_aop_info_is_public_and_it_never_raises_after_drawing(small):
  x, y = small
  theta, info = baselines.aop(x, y, epsilon=1.0, key=1, max_iter=1)
  assert info == {**baselines.aop_calibration(400, 1.0)._asdict(), "max_iter": 1,
                  "private": True}  # nothing that depends on the data
  # A gamma no float64 gradient can certify (rounding is ~1e-17): the release is the
  # data-independent fallback, the start 0 plus the same output noise u, not an error.
  gamma = 1e-30
  released, _ = baselines.aop(x, y, epsilon=1.0, key=1, gamma=gamma)
  cal = baselines.aop_calibration(400, 1.0, gamma=gamma)
  _, key_out = jax.random.split(jax.random.key(1))
  with jax.enable_x64(True):
    u = np.asarray(noise.add_gaussian(key_out, jnp.zeros(4, jnp.float64),
                                      sensitivity=2 * 400 * gamma / cal.big_lambda,
                                      noise_std=cal.sigma_out))
  np.testing.assert_array_equal(released, u)
  info = _run.run("aop", x, y, epsilon=1.0, key=jax.random.split(jax.random.key(2), 2))[-1]
  assert "grad_norm" not in info and "iterations" not in info


def test_aop_excess_loss_decreases_with_epsilon(medium):
  x, y, loss_star = medium
  keys = jax.random.split(jax.random.key(7), 12)
  medians = []
  for eps in (0.1, 1.0, 10.0):
    params = _run.run("aop", x, y, epsilon=eps, key=keys)[0]
    medians.append(np.median([_excess(w, x, y, loss_star) for w in params]))
  # At eps = 10 the output noise (its std does not depend on eps for gamma = 1/n^2)
  # is most of what is left, hence the smaller last ratio.
  assert medians[0] > 3 * medians[1] and medians[1] > 1.5 * medians[2] > 0, medians


# ----------------------------------------------------------------------------
# Damped Newton.
# ----------------------------------------------------------------------------


def test_damped_newton_noise_scales():
  n, rho_t = 3000, 0.02
  for lip in (1.0, math.sqrt(2.0)):
    sg, sh = baselines.damped_newton_noise(n, rho_t, grad_frac=0.7, row_norm_bound=lip)
    assert sg == pytest.approx((lip / n) / math.sqrt(2 * 0.7 * rho_t))
    assert sh == pytest.approx((lip**2 / (4 * n)) / math.sqrt(2 * 0.3 * rho_t))
  tx = baselines.damped_newton_private(n=n, rho=0.1, steps=5, grad_frac=0.7, key=0)
  state = tx.init(jnp.zeros(3))
  sg, sh = baselines.damped_newton_noise(n, 0.02)
  assert float(state.grad_noise_std) == pytest.approx(sg, rel=1e-6)
  assert float(state.hessian_noise_std) == pytest.approx(sh, rel=1e-6)


def test_damped_newton_gradient_noise_scale():
  # With H = c I for a large c the step is -(g~ + O(sigma_H/c)) / c: read g~ back.
  n, d, c = 500, 4, 1e4
  g = jnp.array([0.1, -0.2, 0.05, 0.0])
  sg, _ = baselines.damped_newton_noise(n, 0.01)

  def noise(k):
    tx = baselines.damped_newton_private(n=n, rho_per_step=0.01, step_size=1.0, key=k)
    u, _ = tx.update(g, tx.init(jnp.zeros(d)), curvature_matrix=c * jnp.eye(d))
    return -c * u - g

  z = jax.jit(jax.vmap(noise))(jax.random.split(jax.random.key(5), 2000))
  assert abs(scale_z(z, sg**2)) < Z_MAX
  assert abs(scale_z(z, 1.5 * sg**2)) > Z_MAX


@pytest.mark.parametrize("jit", [False, True])
def test_damped_newton_step_sizes(small, jit):
  x, y = small
  w = jnp.array([0.5, -0.3, 0.2, 0.1])
  _, g, h = glm.logistic_grad_and_curvature(w, x, y)
  beta = np.linalg.norm(np.linalg.solve(np.asarray(h, np.float64), np.asarray(g, np.float64)))
  expected = min(1.0, math.log1p(beta) / beta)
  # (a) non-private: eta from the noise-free Newton step, whatever the noise.
  tx = baselines.damped_newton(n=400, rho=0.01, steps=1, key=0)
  update = maybe_jit(lambda g, s, w, h: tx.update(g, s, w, curvature_matrix=h), jit)
  u, state = update(g, tx.init(w), w, h)
  assert float(state.step_size) == pytest.approx(expected, rel=1e-4)
  # (b) private: eta from the noisy direction (here noise-free for the check).
  tx = baselines.damped_newton_private(n=400, rho=0.01, steps=1, key=0,
                                       disable_noise_for_testing=True)
  update = maybe_jit(lambda g, s, w, h: tx.update(g, s, w, curvature_matrix=h), jit)
  u, state = update(g, tx.init(w), w, h)
  assert float(state.step_size) == pytest.approx(expected, rel=1e-4)
  np.testing.assert_allclose(u, -expected * np.linalg.solve(h, g), rtol=1e-4)
  if not jit:
    with pytest.raises(ValueError, match="budget exhausted"):
      tx.update(g, state, w, curvature_matrix=h)
  else:  # traced: the step is refused, nothing is charged
    u, state2 = update(g, state, w, h)
    assert bool(state2.budget_exhausted) and np.all(np.asarray(u) == 0)
    assert accounting.spent_rho(state2.accountant) == accounting.spent_rho(state.accountant)


# ----------------------------------------------------------------------------
# DP-GD-Oracle.
# ----------------------------------------------------------------------------


def test_oracle_line_search(small):
  x, y = small
  w = jnp.zeros(4)
  loss, g = glm.logistic_loss_and_grad(w, x, y)
  tx = baselines.dp_gd_oracle(n=400, rho=1.0, steps=2, key=0, disable_noise_for_testing=True)
  u, state = tx.update(g, tx.init(w), w, x=x, y=y)
  eta = float(state.step_size)
  assert 1e-6 <= eta <= 100.0
  assert float(glm.logistic_loss(w + u, x, y)) < float(loss) - 0.4 * eta * float(g @ g)
  # The previous trial step (eta / 0.95) was rejected by the Armijo rule.
  assert (float(glm.logistic_loss(w - (eta / 0.95) * g, x, y))
          >= float(loss) - 0.4 * (eta / 0.95) * float(g @ g)) or eta == 100.0
  # Noise-dominated gradients: where -g~ is an ascent direction no step is taken
  # (eta = 0, the argmin over eta >= 0); elsewhere the true loss decreases.
  def one(k):
    tx = baselines.dp_gd_oracle(n=400, rho_per_step=1e-4, key=k)
    u, state = tx.update(g, tx.init(w), w, x=x, y=y)
    return u, state.step_size, glm.logistic_loss(w + u, x, y)

  u, eta, new_loss = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(2), 16))
  zero = np.asarray(eta) == 0
  assert 0 < zero.sum() < 16
  assert np.all(np.asarray(u)[zero] == 0)
  assert np.all(np.asarray(new_loss)[~zero] < float(loss))
  tx = baselines.dp_gd_oracle(n=400, rho_per_step=0.02, key=0)
  assert float(tx.init(w).noise_std) == pytest.approx((1 / 400) / math.sqrt(0.04), rel=1e-6)


# ----------------------------------------------------------------------------
# Bad input.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", baselines.BASELINES)
def test_bad_input(small, name):
  x, y = small
  steps = None if name == "aop" else 2
  kw = dict(steps=steps, key=0)
  with pytest.raises(ValueError, match="epsilon"):
    _run.run(name, x, y, epsilon=0.0, **kw)
  with pytest.raises(ValueError, match="epsilon"):
    _run.run(name, x, y, epsilon=-1.0, **kw)
  for delta in (0.0, 1.0, 1.5):
    with pytest.raises(ValueError, match="delta"):
      _run.run(name, x, y, epsilon=1.0, delta=delta, **kw)
  big = np.asarray(x).copy()
  big[3] *= 1.5 / np.linalg.norm(big[3])
  with pytest.raises(ValueError, match="norm"):
    _run.run(name, big, y, epsilon=1.0, **kw)
  bad_y = np.asarray(y).copy()
  bad_y[0] = 0.0
  with pytest.raises(ValueError, match="labels"):
    _run.run(name, x, bad_y, epsilon=1.0, **kw)


def test_bad_names_steps_and_bound(small):
  x, y = small
  with pytest.raises(ValueError, match="name"):
    _run.run("aop2", x, y, epsilon=1.0, key=0)
  with pytest.raises(TypeError, match="not iterative"):
    _run.run("aop", x, y, epsilon=1.0, steps=3, key=0)
  with pytest.raises(ValueError, match="steps"):
    _run.run("damped-newton", x, y, epsilon=1.0, key=0)
  with pytest.raises(TypeError, match="unknown option"):
    _run.run("aop", x, y, epsilon=1.0, key=0, learning_rate=1.0)
  with pytest.raises(ValueError, match="step_size"):
    baselines.damped_newton_private(n=10, rho=1.0, steps=1, key=0, step_size=2.0)
  # Rows of norm sqrt(2) (an intercept appended after normalisation) need the true bound.
  x2 = np.concatenate([np.ones((400, 1), np.float32), np.asarray(x)], axis=1)
  x2 /= np.maximum(1.0, np.linalg.norm(x2, axis=1) / math.sqrt(2.0))[:, None]
  with pytest.raises(ValueError, match="norm"):
    baselines.aop(x2, y, epsilon=1.0, key=0)
  _, info = baselines.aop(x2, y, epsilon=1.0, key=0, row_norm_bound=math.sqrt(2.0) + 1e-6)
  assert info["smoothness"] == pytest.approx(0.5, rel=1e-5)


# ----------------------------------------------------------------------------
# Neighbouring relations: zero-out (default) and replace-one.
# ----------------------------------------------------------------------------


def test_replace_one_noise_of_the_iterative_baselines():
  n, rho_t = 3000, 0.02
  for lip in (1.0, math.sqrt(2.0)):
    sg, sh = baselines.damped_newton_noise(n, rho_t, row_norm_bound=lip)
    sg2, sh2 = baselines.damped_newton_noise(n, rho_t, row_norm_bound=lip,
                                             neighbouring="replace-one")
    assert sg2 == 2 * sg  # two gradients differ by <= 2L
    assert sh2 == pytest.approx(math.sqrt(2) * sh, rel=1e-15)  # two PSD terms: sqrt(2), not 2
  w = jnp.zeros(3)
  for factory in (baselines.damped_newton_private, baselines.damped_newton):
    z = factory(n=n, rho=0.1, steps=5, key=0).init(w)
    r = factory(n=n, rho=0.1, steps=5, key=0, neighbouring="replace-one").init(w)
    assert float(r.grad_noise_std) == 2 * float(z.grad_noise_std)
    assert float(r.hessian_noise_std) == pytest.approx(
        math.sqrt(2) * float(z.hessian_noise_std), rel=1e-6)
  z = baselines.dp_gd_oracle(n=n, rho=0.1, steps=5, key=0).init(w)
  r = baselines.dp_gd_oracle(n=n, rho=0.1, steps=5, key=0, neighbouring="replace-one").init(w)
  assert float(r.noise_std) == 2 * float(z.noise_std)
  for factory in (baselines.damped_newton_private, baselines.damped_newton,
                  baselines.dp_gd_oracle):
    with pytest.raises(ValueError, match="neighbouring must be one of"):
      factory(n=n, rho=0.1, steps=5, key=0, neighbouring="add-remove")


def test_replace_one_hessian_change_is_within_the_stated_frobenius_sensitivity():
  """Swapping a unit row at margin 0 for one on an orthogonal direction moves the mean
  Hessian by sqrt(2) L^2 / (4n) in Frobenius norm: the replace-one sensitivity, attained."""
  n, rho_t, d = 16, 0.02, 3
  x, y = data.synthetic(4, n=n, d=d)
  xa, xb = np.array(x), np.array(x)
  xa[0], xb[0] = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0)
  w = jnp.zeros(d)
  h = [np.asarray(glm.logistic_grad_and_curvature(w, jnp.asarray(v), y)[2], np.float64)
       for v in (xa, xb)]
  change = np.linalg.norm(h[0] - h[1])
  rho_h = 0.3 * rho_t
  stated = {rel: baselines.damped_newton_noise(n, rho_t, neighbouring=rel)[1]
            * math.sqrt(2 * rho_h) for rel in ("zero-out", "replace-one")}
  assert change == pytest.approx(stated["replace-one"], rel=1e-5)
  assert change > 1.4 * stated["zero-out"]
