"""Tests for dpjax.transforms.dp_gd: full-batch DP-GD."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import Z_MAX, maybe_jit, scale_z
from dpjax import accounting, data
from dpjax.problem import glm, solve
from dpjax.transforms import DPGDState, dp_gd

_OK = dict(n=1000, rho=1.0, steps=5, key=0)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(rho_per_step=0.1), ValueError, "exactly one budget.*got both"),
        (dict(rho=None, steps=None), ValueError, "no privacy budget given"),
        (dict(rho=None), ValueError, "no privacy budget given"),
        (dict(steps=None), ValueError, "rho is a total budget and needs steps"),
        (dict(rho=0.0), ValueError, "rho must be > 0"),
        (dict(rho=math.inf), ValueError, "rho must be finite"),
        (dict(rho="1"), TypeError, "rho must be a real number"),
        (dict(rho=None, steps=None, rho_per_step=-0.1), ValueError, "rho_per_step must be > 0"),
        (dict(steps=0), ValueError, "steps must be >= 1"),
        (dict(steps=5.0), TypeError, "steps must be an integer"),
        (dict(n=0), ValueError, "n must be >= 1"),
        (dict(n=10.0), TypeError, "n must be an integer"),
        (dict(learning_rate=0.0), ValueError, "learning_rate must be > 0"),
        (dict(grad_norm_bound=0.0), ValueError, "grad_norm_bound must be > 0"),
        (dict(key=None), TypeError, "key must be an int seed or a typed PRNG key"),
        (dict(key="seed"), TypeError, "key must be an int seed"),
        (dict(key=jax.random.PRNGKey(0)), TypeError, "wrap a legacy uint32 key"),
        (dict(key=jax.random.split(jax.random.key(0), 3)), ValueError,
         r"single typed PRNG key \(shape \(\)\), got shape \(3,\)"),
        (dict(disable_noise_for_testing="no"), TypeError,
         "disable_noise_for_testing must be True or False"),
        (dict(neighbouring="add-remove"), ValueError,
         r"neighbouring must be one of \('zero-out', 'replace-one'\), got 'add-remove'"),
        (dict(neighbouring=None), TypeError, "neighbouring must be one of"),
    ],
)
def test_constructor_rejects_bad_input(kwargs, error, match):
  with pytest.raises(error, match=match):
    dp_gd(**{**_OK, **kwargs})


def test_missing_key_is_a_clear_error():
  with pytest.raises(TypeError, match="key"):
    dp_gd(n=10, rho=1.0, steps=1)  # pylint: disable=missing-kwoa


def test_update_validation():
  tx = dp_gd(**_OK)
  state = tx.init(jnp.zeros(3))
  with pytest.raises(ValueError, match="updates must have 1 dimension"):
    tx.update(jnp.zeros((3, 1)), state)
  with pytest.raises(TypeError, match="updates must have a floating dtype"):
    tx.update(jnp.zeros(3, jnp.int32), state)
  with pytest.raises(TypeError, match="state must be a DPGDState"):
    tx.update(jnp.zeros(3), ())
  with pytest.raises(TypeError, match="init\\(params\\) needs the parameters"):
    tx.init(None)


@pytest.mark.parametrize("jit", [True, False])
def test_noise_scale(jit):
  """Zero gradient: out / -lr is the noise; its std is (L0/n)/sqrt(2 rho_t)."""
  n, d, k, rho, steps, lr = 500, 50, 2000, 0.3, 3, 2.5

  def draw(key):
    tx = dp_gd(n=n, rho=rho, steps=steps, learning_rate=lr, key=key)
    out, state = tx.update(jnp.zeros(d), tx.init(jnp.zeros(d)))
    return out, state.noise_std

  keys = jax.random.split(jax.random.key(5), k)
  out, noise_std = maybe_jit(jax.vmap(draw), jit)(keys)
  sigma = (1 / n) / math.sqrt(2 * rho / steps)
  np.testing.assert_allclose(noise_std, sigma, rtol=1e-6)
  noise = np.asarray(out) / -lr
  assert abs(scale_z(noise, sigma**2)) < Z_MAX
  assert abs(scale_z(noise, (1.1 * sigma) ** 2)) > Z_MAX  # a 10% wrong std is rejected
  assert abs(scale_z(noise, (sigma / 1.1) ** 2)) > Z_MAX
  assert np.all(np.abs(noise.mean(axis=0)) < Z_MAX * sigma / math.sqrt(k))
  # Coordinates are uncorrelated: the sample correlation of two of them.
  r = np.corrcoef(noise[:, 0], noise[:, 1])[0, 1]
  assert abs(r) < Z_MAX / math.sqrt(k)


def test_noise_is_fresh_each_step_and_deterministic_per_key():
  tx = dp_gd(n=100, rho_per_step=0.1, key=3)
  zero = jnp.zeros(4)
  a1, s = tx.update(zero, tx.init(zero))
  a2, _ = tx.update(zero, s)
  assert not np.allclose(a1, a2)
  b1, _ = dp_gd(n=100, rho_per_step=0.1, key=3).update(zero, tx.init(zero))
  np.testing.assert_array_equal(a1, b1)
  c1, _ = dp_gd(n=100, rho_per_step=0.1, key=jax.random.key(3)).update(zero, tx.init(zero))
  np.testing.assert_array_equal(a1, c1)  # int seed == jax.random.key(seed)
  tx4 = dp_gd(n=100, rho_per_step=0.1, key=4)
  d1, _ = tx4.update(zero, tx4.init(zero))
  assert not np.allclose(a1, d1)


@pytest.mark.parametrize("jit", [True, False])
def test_accountant_total_and_tree_get(jit):
  rho, steps = 0.0143935, 13
  tx = dp_gd(n=1000, rho=rho, steps=steps, key=0)
  step = maybe_jit(tx.update, jit)
  state = tx.init(jnp.zeros(2))
  for _ in range(steps):
    _, state = step(jnp.ones(2), state)
  assert abs(accounting.spent_rho(state.accountant) - rho) <= 1e-9 * rho
  assert abs(float(optax.tree.get(state, "rho")) - rho) <= 1e-6 * rho
  assert int(state.count) == steps and not bool(state.budget_exhausted)


def test_rho_per_step_without_steps_has_no_limit():
  tx = dp_gd(n=10, rho_per_step=1e-3 / 3, key=0)
  state = tx.init(jnp.zeros(2))
  state, _ = jax.lax.scan(lambda s, _: (tx.update(jnp.ones(2), s)[1], None), state, None,
                          length=300)
  assert abs(accounting.spent_rho(state.accountant) - 0.1) <= 1e-9 * 0.1
  assert int(state.count) == 300


@pytest.mark.parametrize("jit", [True, False])
def test_budget_exhaustion(jit):
  tx = dp_gd(n=10, rho=1.0, steps=2, rho_per_step=None, key=0)
  step = maybe_jit(tx.update, jit)
  state = tx.init(jnp.zeros(2))
  for _ in range(2):
    _, state = step(jnp.ones(2), state)
  if not jit:
    with pytest.raises(ValueError, match="privacy budget exhausted: dp_gd was built for steps=2"):
      step(jnp.ones(2), state)
    return
  out, after = step(jnp.full(2, jnp.nan), state)
  np.testing.assert_array_equal(out, np.zeros(2))
  assert bool(after.budget_exhausted) and int(after.count) == 2
  assert accounting.spent_rho(after.accountant) == accounting.spent_rho(state.accountant)


def test_no_noise_converges_to_the_optimum(x64):
  """Noise off: plain gradient descent with eta = 1/L1 = 4 reaches w*."""
  x, y = data.synthetic(3, n=500, d=3, dtype=np.float64)
  opt = solve.logistic_optimum(x, y)
  tx = dp_gd(n=500, rho_per_step=1.0, key=0, disable_noise_for_testing=True)
  x, y = jnp.asarray(x), jnp.asarray(y)

  def body(carry, _):
    w, s = carry
    _, g = glm.logistic_loss_and_grad(w, x, y)
    u, s = tx.update(g, s)
    return (optax.apply_updates(w, u), s), None

  w0 = jnp.zeros(3, jnp.float64)
  (w, state), _ = jax.jit(lambda w: jax.lax.scan(body, (w, tx.init(w)), None, length=1000))(w0)
  np.testing.assert_allclose(w, opt.w, atol=1e-8)
  assert float(state.noise_std) == 0.0


def test_float32_and_float64_states():
  with jax.enable_x64(True):
    tx = dp_gd(**_OK, disable_noise_for_testing=True)
    g = jnp.array([0.1, -0.2], jnp.float64)
    out64, s64 = tx.update(g, tx.init(jnp.zeros(2, jnp.float64)))
    assert out64.dtype == jnp.float64 and s64.noise_std.dtype == jnp.float64
  tx = dp_gd(**_OK, disable_noise_for_testing=True)
  out32, s32 = tx.update(g.astype(jnp.float32), tx.init(jnp.zeros(2, jnp.float32)))
  assert out32.dtype == jnp.float32 and isinstance(s32, DPGDState)
  np.testing.assert_allclose(out32, np.asarray(out64), rtol=1e-6)
  np.testing.assert_allclose(out32, [-0.4, 0.8], rtol=1e-6)


# ----------------------------------------------------------------------------
# Neighbouring relations: zero-out (default) and replace-one.
# ----------------------------------------------------------------------------


def test_replace_one_doubles_the_noise_std_and_the_released_noise():
  default = dp_gd(**_OK)
  zero_out = dp_gd(**_OK, neighbouring="zero-out")
  replace = dp_gd(**_OK, neighbouring="replace-one")
  w = jnp.zeros(4)
  sz, sr = zero_out.init(w), replace.init(w)
  assert float(default.init(w).noise_std) == float(sz.noise_std)
  rho_t = _OK["rho"] / _OK["steps"]
  assert float(sz.noise_std) == np.float32(accounting.gaussian_sigma(1 / _OK["n"], rho_t))
  assert float(sr.noise_std) == 2 * float(sz.noise_std)  # 2 L0 / n: exact in binary.
  # The update draws the same noise from the same key, at twice the scale.
  uz, _ = zero_out.update(jnp.zeros(4), sz)
  ur, _ = replace.update(jnp.zeros(4), sr)
  np.testing.assert_array_equal(np.asarray(ur), 2 * np.asarray(uz))


def _opposite_gradient_pair(n: int):
  """A replace-one pair at ``w = R e_2`` whose swapped rows have nearly opposite gradients.

  Row 0 of D is ``(cos a, -sin a)`` with ``y = +1`` (margin ``-R sin a = -100``:
  gradient ~ ``-x``); in D' it is ``(cos a, sin a)`` with ``y = -1`` (margin
  ``+100``, label -1: gradient ~ ``+x'``). Their difference has norm
  ``2 cos a ~ 2``, twice L0. The other rows are shared.
  """
  a, radius = 0.01, 100.0 / math.sin(0.01)
  x, y = data.synthetic(1, n=n, d=2)
  x, y = np.array(x, np.float64), np.array(y, np.float64)
  xp, yp = x.copy(), y.copy()
  x[0], y[0] = (math.cos(a), -math.sin(a)), 1.0
  xp[0], yp[0] = (math.cos(a), math.sin(a)), -1.0
  return np.array([0.0, radius]), (x, y), (xp, yp)


def _mean_logistic_grad(w, x, y):
  m = x @ w  # -y sigma(-y m) x, sigma(-t) = (1 - tanh(t / 2)) / 2 (no overflow).
  return (-y * 0.5 * (1.0 - np.tanh(0.5 * y * m))) @ x / len(y)  # float64 reference.


def test_replace_one_sensitivity_covers_an_adversarial_pair():
  """The mean-gradient change of an adversarial replace-one pair is within the stated
  sensitivity ``noise_std sqrt(2 rho_t)`` under replace-one, and exceeds the zero-out one."""
  n, rho_t = 20, 0.5
  w, (x, y), (xp, yp) = _opposite_gradient_pair(n)
  change = np.linalg.norm(_mean_logistic_grad(w, x, y) - _mean_logistic_grad(w, xp, yp))
  stated = {rel: float(dp_gd(n=n, rho_per_step=rho_t, key=0, neighbouring=rel)
                       .init(jnp.zeros(2)).noise_std) * math.sqrt(2 * rho_t)
            for rel in ("zero-out", "replace-one")}
  assert change <= stated["replace-one"] * (1 + 1e-6)
  assert change > 1.99 / n > stated["zero-out"]  # zero-out's noise would be too small here.
  # Zero-out: replacing row 0 by the null row x = 0 moves the mean by ||g_0|| / n <= L0 / n.
  x0 = x.copy()
  x0[0] = 0.0
  change0 = np.linalg.norm(_mean_logistic_grad(w, x, y) - _mean_logistic_grad(w, x0, y))
  assert 0.99 / n < change0 <= stated["zero-out"] * (1 + 1e-6)


def test_replace_one_audit_of_one_step_stays_under_the_claim():
  """An empirical audit (dpjax.audit.bounds) of one released step on the adversarial
  replace-one pair: at or below the claimed epsilon = 2 with the replace-one calibration;
  above it with the zero-out calibration (the noise of a mislabelled relation)."""
  from dpjax.audit import bounds  # pylint: disable=g-import-not-at-top
  n, eps, delta, k = 20, 2.0, 1e-5, 20_000
  w, (x, y), (xp, yp) = _opposite_gradient_pair(n)
  g0, g1 = _mean_logistic_grad(w, x, y), _mean_logistic_grad(w, xp, yp)
  u = jnp.asarray((g1 - g0) / np.linalg.norm(g1 - g0), jnp.float32)
  rho = accounting.epsilon_to_zcdp(eps, delta, "gaussian")
  keys = jax.random.split(jax.random.key(11), 2 * k)
  lower = {}
  for rel in ("replace-one", "zero-out"):

    def release(key, g, rel=rel):
      tx = dp_gd(n=n, rho_per_step=rho, learning_rate=1.0, key=key, neighbouring=rel)
      update, state = tx.update(g, tx.init(jnp.zeros(2)))
      return update @ u, state.accountant

    run = jax.jit(jax.vmap(release, in_axes=(0, None)))
    s0, acc = run(keys[:k], jnp.asarray(g0, jnp.float32))
    s1, _ = run(keys[k:], jnp.asarray(g1, jnp.float32))
    claim = accounting.epsilon_spent(jax.tree.map(lambda a: a[0], acc), delta, "gaussian")
    assert claim == pytest.approx(eps, rel=1e-9)
    lower[rel] = bounds.empirical_epsilon(np.asarray(s0), np.asarray(s1), delta).epsilon
  assert lower["replace-one"] <= eps
  assert lower["zero-out"] > eps
