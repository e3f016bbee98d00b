"""Tests for dpjax.transforms.averaging: tail averaging of any transform's iterates."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import maybe_jit
from dpjax import accounting, data
from dpjax.problem import glm
from dpjax.transforms import dp_gd, dp_newton
from dpjax.transforms.averaging import (
    AVERAGES,
    averaged_params,
    tail_average,
)

Z_MIN = 4.0  # a paired improvement must exceed 4 standard errors (one-sided p ~ 3e-5).


def _window(steps, average):
  return {"none": 1, "last-half": math.ceil(steps / 2), "last-quarter": math.ceil(steps / 4)}[
      average
  ]


def _run(tx, w0, grad_fn, num, jit, **extra):
  """``num`` updates from ``w0``; returns the final state and the iterates w_1..w_num."""

  def step(w, state):
    u, state = tx.update(grad_fn(w), state, w, **extra)
    return optax.apply_updates(w, u), state

  step = maybe_jit(step, jit)
  state, w, iterates = tx.init(w0), w0, []
  for _ in range(num):
    w, state = step(w, state)
    iterates.append(jax.tree.map(np.asarray, w))
  return state, iterates


_TARGET = jnp.array([1.0, -2.0, 0.5])


def _quadratic_grad(w):
  return w - _TARGET


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("average", AVERAGES)
@pytest.mark.parametrize("steps", [1, 2, 3, 7, 10])
def test_average_is_the_mean_of_the_tail_iterates(steps, average, jit):
  inner = dp_gd(n=10, rho=1.0, steps=steps, learning_rate=0.3, key=0,
                disable_noise_for_testing=True)
  tx = tail_average(inner, steps=steps, average=average)
  state, iterates = _run(tx, jnp.zeros(3), _quadratic_grad, steps, jit)
  k = _window(steps, average)
  expected = np.mean(np.asarray(iterates, np.float64)[steps - k:], axis=0)
  assert len({tuple(w) for w in iterates}) == steps  # distinct iterates: the window matters.
  np.testing.assert_allclose(averaged_params(state), expected, rtol=1e-6, atol=1e-7)
  assert int(state.num_iterates) == steps


def test_updates_pass_through_and_average_before_inside_and_after_the_window():
  """T = 8, last half: w_0, then the latest iterate, then partial means; frozen after T."""
  inner = optax.sgd(0.3)  # no budget: it keeps going past T, the average must not.
  tx = tail_average(inner, steps=8)
  w0 = jnp.array([4.0, 0.0, -1.0])
  state = tx.init(w0)
  np.testing.assert_array_equal(averaged_params(state), w0)
  inner_state, w, iterates = inner.init(w0), w0, []
  for t in range(1, 12):
    u, state = tx.update(_quadratic_grad(w), state, w)
    u_inner, inner_state = inner.update(_quadratic_grad(w), inner_state, w)
    np.testing.assert_array_equal(u, u_inner)  # the wrapper changes no update.
    w = optax.apply_updates(w, u)
    iterates.append(np.asarray(w, np.float64))
    got = np.asarray(averaged_params(state))
    if t <= 4:
      np.testing.assert_array_equal(got, iterates[-1])
    else:
      np.testing.assert_allclose(got, np.mean(iterates[4:min(t, 8)], axis=0), rtol=1e-6)
  assert not np.allclose(iterates[-1], np.mean(iterates[4:8], axis=0))


@pytest.mark.parametrize("jit", [True, False])
def test_pytree_params_with_mixed_dtypes(jit, x64):
  params = {
      "w": jnp.zeros((2, 3), jnp.float32),
      "b": jnp.zeros((), jnp.float64),
      "nested": (jnp.ones(4, jnp.float32),),
  }
  targets = {
      "w": jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3),
      "b": jnp.asarray(-3.0, jnp.float64),
      "nested": (jnp.full(4, 7.0, jnp.float32),),
  }
  grad_fn = lambda p: jax.tree.map(lambda a, b: a - b, p, targets)
  tx = tail_average(optax.sgd(0.25), steps=7, average="last-quarter")
  state, iterates = _run(tx, params, grad_fn, 7, jit)
  avg = averaged_params(state)
  assert jax.tree.structure(avg) == jax.tree.structure(params)
  for leaf, ref in zip(jax.tree.leaves(avg), jax.tree.leaves(params)):
    assert leaf.dtype == ref.dtype and leaf.shape == ref.shape
  expected = jax.tree.map(lambda *ws: np.mean(np.asarray(ws[5:], np.float64), axis=0),
                          *iterates)
  jax.tree.map(lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-6), avg, expected)


def _recording_inner():
  """Scales the updates by the keyword-only extra arg ``scale`` and stores its sum."""

  def init(params):
    del params
    return jnp.zeros(())

  def update(updates, state, params=None, *, scale):
    del params
    return jax.tree.map(lambda u: -scale * u, updates), state + scale

  return optax.GradientTransformationExtraArgs(init, update)


@pytest.mark.parametrize("jit", [True, False])
def test_extra_args_are_forwarded(jit):
  tx = tail_average(_recording_inner(), steps=3)
  state, iterates = _run(tx, jnp.zeros(2), lambda w: jnp.ones(2), 3, jit, scale=0.5)
  assert float(state.inner_state) == 1.5
  np.testing.assert_allclose(iterates[-1], [-1.5, -1.5])
  with pytest.raises(TypeError, match="scale"):
    tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), jnp.zeros(2))

  # A plain GradientTransformation ignores the extra args.
  sgd = optax.sgd(0.5)
  plain = optax.GradientTransformation(sgd.init, lambda u, s, p=None: sgd.update(u, s, p))
  tx = tail_average(plain, steps=2)
  out, _ = maybe_jit(tx.update, jit)(jnp.ones(2), tx.init(jnp.zeros(2)), jnp.zeros(2),
                                      curvature_matrix=jnp.eye(2))
  np.testing.assert_allclose(out, [-0.5, -0.5])


@pytest.mark.parametrize("jit", [True, False])
def test_dp_newton_curvature_matrix_is_forwarded(jit):
  x, y = data.synthetic(2, n=500, d=4)
  x, y = jnp.asarray(x), jnp.asarray(y)
  make = lambda: dp_newton(n=500, rho=1.0, steps=3, min_eigenvalue=0.01, key=0,
                           disable_noise_for_testing=True)
  tx, plain = tail_average(make(), steps=3), make()

  def step(w, state, plain_state):
    _, g, h = glm.logistic_grad_and_curvature(w, x, y, "hessian")
    u, state = tx.update(g, state, w, curvature_matrix=h)
    u_plain, plain_state = plain.update(g, plain_state, w, curvature_matrix=h)
    return u, u_plain, state, plain_state

  step = maybe_jit(step, jit)
  w = jnp.zeros(4)
  state, plain_state = tx.init(w), plain.init(w)
  for _ in range(3):
    u, u_plain, state, plain_state = step(w, state, plain_state)
    np.testing.assert_array_equal(u, u_plain)
    w = optax.apply_updates(w, u)
  assert float(jnp.linalg.norm(w)) > 0.1  # Newton steps were taken.
  with pytest.raises(TypeError, match="needs the curvature"):
    tx.update(jnp.zeros(4), tx.init(jnp.zeros(4)), jnp.zeros(4))


@pytest.mark.parametrize("jit", [True, False])
def test_accountant_is_reachable_and_unchanged(jit):
  rho, steps = 0.0143935, 13
  tx = tail_average(dp_gd(n=1000, rho=rho, steps=steps, key=7), steps=steps)
  plain = dp_gd(n=1000, rho=rho, steps=steps, key=7)
  update, plain_update = maybe_jit(tx.update, jit), maybe_jit(plain.update, jit)
  w = jnp.zeros(2)
  state, plain_state = tx.init(w), plain.init(w)
  for _ in range(steps):
    u, state = update(jnp.ones(2), state, w)
    u_plain, plain_state = plain_update(jnp.ones(2), plain_state, w)
    np.testing.assert_array_equal(u, u_plain)  # same noise, unchanged updates.
    w = optax.apply_updates(w, u)
  assert accounting.spent_rho(state.inner_state.accountant) == accounting.spent_rho(
      plain_state.accountant)
  assert abs(accounting.spent_rho(state.inner_state.accountant) - rho) <= 1e-9 * rho
  got = optax.tree.get(state, "rho")
  assert got is not None and float(got) == float(optax.tree.get(plain_state, "rho"))
  assert int(optax.tree.get(state, "count")) == steps  # the inner count, no ambiguity.
  np.testing.assert_array_equal(optax.tree.get(state, "average"), averaged_params(state))
  assert isinstance(averaged_params((optax.EmptyState(), state)), jax.Array)  # found nested.
  # state.accountant reads through to the inner accountant (not a pytree field).
  assert state.accountant is state.inner_state.accountant
  assert len(jax.tree.leaves(state)) == len(jax.tree.leaves(plain_state)) + 3
  sgd_tx = tail_average(optax.sgd(0.1), steps=2)
  with pytest.raises(AttributeError, match="no accountant"):
    _ = sgd_tx.init(w).accountant


@pytest.mark.parametrize("jit", [True, False])
def test_scan_and_vmap_over_keys_stop_averaging_at_steps(jit):
  x, y = data.synthetic(0, n=1000, d=5)
  x, y = jnp.asarray(x), jnp.asarray(y)
  steps, extra = 9, 3
  k = _window(steps, "last-quarter")

  def run(key):
    tx = tail_average(dp_gd(n=1000, rho=0.5, steps=steps, key=key), steps=steps,
                      average="last-quarter")

    def body(carry, _):
      w, s = carry
      u, s = tx.update(glm.logistic_loss_and_grad(w, x, y)[1], s, w)
      w = optax.apply_updates(w, u)
      return (w, s), w

    w0 = jnp.zeros(5)
    (_, s), ws = jax.lax.scan(body, (w0, tx.init(w0)), None, length=steps + extra)
    return averaged_params(s), ws, s

  keys = jax.random.split(jax.random.key(1), 4)
  avg, ws, state = maybe_jit(jax.vmap(run), jit)(keys)
  ws = np.asarray(ws, np.float64)
  np.testing.assert_allclose(avg, ws[:, steps - k:steps].mean(axis=1), rtol=1e-5, atol=1e-6)
  # Past the budget dp_gd refuses (zero updates) and nothing more is averaged.
  np.testing.assert_array_equal(ws[:, steps:], np.repeat(ws[:, steps - 1:steps], extra, axis=1))
  assert np.all(np.asarray(state.num_iterates) == steps + extra)
  assert np.all(np.asarray(state.inner_state.budget_exhausted))
  assert not np.allclose(avg[0], avg[1])  # independent noise per key.
  one, _, _ = jax.jit(run)(keys[2])
  np.testing.assert_allclose(avg[2], one, rtol=1e-5, atol=1e-6)


def test_float32_running_mean_is_exact_over_10000_iterates():
  """The last half of 20,000 float32 iterates against their float64 mean: within 1 ulp.

  The data is hard enough to matter: an uncompensated float32 running mean
  on the same iterates is off by several ulps (checked below).
  """
  steps, d = 20_000, 8
  rng = np.random.default_rng(0)
  centers = np.array([1.0, -2.5, 1e3, 3e-3, 0.1, -70.0, 5.0, 1e-6])
  iterates = (centers * (1 + 1e-2 * rng.standard_normal((steps, d)))).astype(np.float32)
  tx = tail_average(optax.identity(), steps=steps)

  def body(carry, target):
    w, s = carry
    u, s = tx.update(target - w, s, w)
    w = optax.apply_updates(w, u)
    return (w, s), w

  w0 = jnp.zeros(d, jnp.float32)
  (_, state), ws = jax.jit(lambda t: jax.lax.scan(body, (w0, tx.init(w0)), t))(iterates)
  np.testing.assert_array_equal(ws, iterates)  # w_t is exactly the target.
  tail = iterates[steps // 2:]
  exact = tail.astype(np.float64).mean(axis=0)
  ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
  got = np.asarray(averaged_params(state), np.float64)
  assert np.all(np.abs(got - exact) <= ulp), (got - exact) / ulp

  naive = tail[0].copy()
  for j in range(2, tail.shape[0] + 1):
    naive += (tail[j - 1] - naive) / np.float32(j)
  assert np.max(np.abs(naive.astype(np.float64) - exact) / ulp) > 4


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(average="last_half"), ValueError,
         r"average must be one of \('none', 'last-half', 'last-quarter'\), got 'last_half'"),
        (dict(average=None), TypeError, "average must be one of"),
        (dict(steps=0), ValueError, "steps must be >= 1"),
        (dict(steps=4.0), TypeError, "steps must be an integer"),
        (dict(inner="sgd"), TypeError, "inner must be an optax.GradientTransformation"),
    ],
)
def test_constructor_rejects_bad_input(kwargs, error, match):
  with pytest.raises(error, match=match):
    tail_average(**{"inner": optax.sgd(0.1), "steps": 4, **kwargs})


def test_init_update_and_read_reject_bad_input():
  with pytest.raises(TypeError, match="steps"):
    tail_average(optax.sgd(0.1))  # pylint: disable=missing-kwoa
  tx = tail_average(optax.sgd(0.1), steps=4)
  state = tx.init(jnp.zeros(2))
  with pytest.raises(TypeError, match=r"update needs params \(the current iterate"):
    tx.update(jnp.ones(2), state)
  with pytest.raises(TypeError, match=r"update needs params"):
    jax.jit(lambda g, s: tx.update(g, s))(jnp.ones(2), state)
  with pytest.raises(TypeError, match="state must be a TailAverageState"):
    tx.update(jnp.ones(2), optax.sgd(0.1).init(jnp.zeros(2)), jnp.zeros(2))
  with pytest.raises(TypeError, match="averages float parameters"):
    tx.init(jnp.zeros(2, jnp.int32))
  with pytest.raises(TypeError, match=r"init\(params\) needs the parameters"):
    tx.init(None)
  with pytest.raises(TypeError, match="averaged_params needs the state of a tail_average"):
    averaged_params(optax.sgd(0.1).init(jnp.zeros(2)))


def test_tail_average_reduces_the_excess_loss_of_dp_gd():
  """DP-GD at a small budget, 40 repeats: the last-half mean beats the last iterate.

  Paired over the same noise: the mean loss difference must exceed Z_MIN
  standard errors of the 40 differences.
  """
  n, d, steps, rho, repeats = 2000, 10, 60, 0.02, 40
  x, y = data.synthetic(0, n=n, d=d)
  x, y = jnp.asarray(x), jnp.asarray(y)

  def run(key):
    tx = tail_average(dp_gd(n=n, rho=rho, steps=steps, key=key), steps=steps)

    def body(carry, _):
      w, s = carry
      u, s = tx.update(glm.logistic_loss_and_grad(w, x, y)[1], s, w)
      return (optax.apply_updates(w, u), s), None

    w0 = jnp.zeros(d)
    (w, s), _ = jax.lax.scan(body, (w0, tx.init(w0)), None, length=steps)
    return glm.logistic_loss(w, x, y), glm.logistic_loss(averaged_params(s), x, y)

  keys = jax.random.split(jax.random.key(0), repeats)
  last, avg = (np.asarray(a, np.float64) for a in jax.jit(jax.vmap(run))(keys))
  diff = last - avg
  se = diff.std(ddof=1) / math.sqrt(repeats)
  assert diff.mean() > Z_MIN * se, (last.mean(), avg.mean(), se)
