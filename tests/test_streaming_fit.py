"""dpjax.fit with the streaming algorithms (dpjax.training.streaming): single pass, least squares, bad input."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpjax
from dpjax import accounting, training
from dpjax.training import streaming
from conftest import maybe_jit

_MU = {"otb-strongly-convex": {"mu": 0.05}}


def _ls_data(seed: int, n: int, d: int):
  """Least squares with ||x|| = 1, y = <w*, x> + U[-0.5, 0.5], ||w*|| = 0.5 (|y| <= 1)."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  w = rng.normal(size=d)
  w *= 0.5 / np.linalg.norm(w)
  y = x @ w + rng.uniform(-0.5, 0.5, size=n)
  return np.asarray(dpjax.data.clip_rows(x.astype(np.float32))), y.astype(np.float32)


@pytest.mark.parametrize("algorithm", streaming.ALGORITHMS)
def test_every_streaming_algorithm_spends_rho_and_is_reproducible(algorithm):
  ds = dpjax.synthetic(0, n=1024, d=4)
  kwargs = dict(epsilon=1.0, batch_size=32, repeats=2, seed=3, **_MU.get(algorithm, {}))
  res = dpjax.fit(ds, algorithm, **kwargs)
  assert res.algorithm == algorithm and res.steps == 32 and res.batch_size == 32
  assert res.params.shape == (2, 4) and res.losses.shape == (2, 33)
  np.testing.assert_allclose(res.rho_spent, res.rho, rtol=1e-9)
  assert res.rho == accounting.epsilon_to_zcdp(1.0, 1024.0**-2, "gaussian")
  assert np.all(np.linalg.norm(res.params, axis=1) <= 1.0 + 1e-5)  # the ball of radius 1
  assert np.all(np.isfinite(res.losses)) and np.all(res.guard_resets == 0)
  assert not np.allclose(res.params[0], res.params[1])  # repeats draw independent noise
  if algorithm == "otb":  # the same seed gives the same run
    np.testing.assert_array_equal(res.params, dpjax.fit(ds, algorithm, **kwargs).params)
  # The reported excess is the output's full-data loss minus the optimum, in float64.
  np.testing.assert_allclose(res.losses[:, -1] - res.loss_star, res.excess_losses, rtol=1e-5,
                             atol=1e-6)


def test_least_squares_converges_and_reports_against_the_lstsq_optimum():
  x, y = _ls_data(0, 20_000, 5)
  res = dpjax.fit((x, y), "otb", epsilon=8.0, batch_size=20, loss="least_squares", repeats=3,
                  seed=0)
  assert res.loss == "least_squares"
  w = np.linalg.lstsq(x.astype(np.float64), y.astype(np.float64), rcond=None)[0]
  loss_star = 0.5 * np.mean((x.astype(np.float64) @ w - y) ** 2)
  assert res.loss_star == pytest.approx(loss_star, rel=1e-9)
  at_zero = 0.5 * np.mean(np.square(y.astype(np.float64))) - loss_star
  # One private pass gets most of the way from w = 0 to the optimum.
  assert res.excess_loss_mean < 0.2 * at_zero
  # 1e-12: both float64 means over 20,000 rows and the lstsq optimum round at ~1e-16.
  assert np.all(res.excess_losses > -1e-12)


def test_otb_noiseless_single_pass_beats_the_noisy_one():
  # More privacy budget, less noise: the ordering a working calibration must show.
  ds = dpjax.synthetic(1, n=8192, d=5)
  lo = dpjax.fit(ds, "otb", epsilon=0.2, batch_size=64, repeats=8, seed=0)
  # eps = 20, not 50: the exact releases' TV slack is paid (1 + e^eps) times from
  # delta = n^-2, which caps the certifiable epsilon near 39 here (dpjax.mechanisms.noise).
  hi = dpjax.fit(ds, "otb", epsilon=20.0, batch_size=64, repeats=8, seed=0)
  assert hi.excess_loss_mean < lo.excess_loss_mean


def test_streaming_seeds_fresh_by_default_explicit_ones_reproduce():
  # The data and settings of test_every_streaming_algorithm_spends_rho_and_is_reproducible[otb]:
  # its compiled program serves every call here.
  ds = dpjax.synthetic(0, n=1024, d=4)
  kw = dict(epsilon=1.0, batch_size=32, repeats=2)
  a, b = (dpjax.fit(ds, "otb", **kw) for _ in range(2))
  assert a.seed is None and b.seed is None
  assert not np.array_equal(a.params, b.params)  # fresh noise and a fresh order each call
  seed = 2**50 + 7
  c, again = (dpjax.fit(ds, "otb", seed=seed, **kw) for _ in range(2))
  assert c.seed == again.seed == seed
  np.testing.assert_array_equal(c.params, again.params)
  np.testing.assert_array_equal(c.losses, again.losses)
  low = dpjax.fit(ds, "otb", seed=7, **kw)  # the same low 32 bits
  assert not np.allclose(c.params, low.params)
  with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\)"):
    dpjax.fit(ds, "otb", seed=2**64, **kw)
  with pytest.raises(TypeError, match="seed must be None"):
    dpjax.fit(ds, "otb", seed=1.0, **kw)


def test_the_stream_uses_each_example_at_most_once():
  order = np.asarray(streaming.stream_order(jax.random.key(5), 1000, 33, 30))
  assert order.shape == (33, 30)
  assert len(np.unique(order)) == order.size and order.min() >= 0 and order.max() < 1000
  other = np.asarray(streaming.stream_order(jax.random.key(6), 1000, 33, 30))
  assert not np.array_equal(order, other)


def test_progressive_losses_are_the_batch_losses_before_each_step():
  ds = dpjax.synthetic(2, n=256, d=3)
  res = dpjax.fit(ds, "single-pass-dp-sgd", epsilon=1.0, batch_size=64, seed=7, average="none")
  key = jax.random.split(jax.random.key(7), 1)[0]
  order_key, tx_key = jax.random.split(key)
  order = np.asarray(streaming.stream_order(order_key, 256, 4, 64))
  tx = streaming.make_transform("single-pass-dp-sgd", d=3, batch_size=64, steps=4,
                                rho=res.rho, loss="logistic", key=tx_key)
  # One compiled step for the four (op by op, each of the step's ops compiles on its own).
  update = jax.jit(lambda state, w, batch: tx.update(None, state, w, batch=batch))
  w = jnp.zeros(3)
  state = tx.init(w)
  x, y = np.asarray(ds.x), np.asarray(ds.y)
  for t in range(4):
    batch = (x[order[t]], y[order[t]])
    expect = np.mean(np.logaddexp(0.0, -batch[1] * (batch[0] @ np.asarray(w, np.float64))))
    assert res.losses[0, t] == pytest.approx(expect, rel=1e-5)
    u, state = update(state, w, batch)
    w = w + u
  np.testing.assert_allclose(res.params[0], w, rtol=1e-5, atol=1e-6)


def _traced_rho_run(algorithm):
  """``run(rho)``: a 10-step least-squares single pass of ``algorithm`` at budget ``rho``."""
  x, y = _ls_data(3, 320, 4)

  def run(rho):
    tx = streaming.make_transform(algorithm, d=4, batch_size=32, steps=10, rho=rho,
                                  loss="least_squares", key=0, **_MU.get(algorithm, {}))
    return streaming.scan_fit(tx, jnp.zeros(4), 10, lambda t: (
        jax.lax.dynamic_slice_in_dim(x, t * 32, 32), jax.lax.dynamic_slice_in_dim(y, t * 32, 32)))[0]

  return run


@functools.lru_cache(maxsize=None)
def _concrete_rho_output(algorithm):
  """``_traced_rho_run(algorithm)(2.0)`` (host-planned budget), computed once for both jit cases."""
  return np.asarray(_traced_rho_run(algorithm)(2.0))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("algorithm", streaming.ALGORITHMS)
def test_traced_rho_matches_concrete_rho(algorithm, jit):
  run = _traced_rho_run(algorithm)
  batched = jax.vmap(maybe_jit(run, jit))(jnp.asarray([0.05, 2.0], jnp.float32))
  # A traced budget plans the exact sampler in float32 with a margin (dpjax.mechanisms.noise), which may
  # pick other lattice multipliers than the host plan: the same law, noise ~1e-3 apart.
  np.testing.assert_allclose(batched[1], _concrete_rho_output(algorithm), rtol=2e-3, atol=1e-4)
  assert not np.allclose(batched[0], batched[1])  # the traced budget sets the noise


def test_default_steps_and_kt_scale_are_public_formulas():
  # The default step of single-pass DP-SGD: D / sqrt(T (G^2 + d (s/b)^2)).
  rho, b, steps, d = 0.3, 16, 50, 7
  s = accounting.gaussian_sigma(1.0, rho)
  want = 2.0 / np.sqrt(steps * (1.0 + d * (s / b) ** 2))
  got = streaming.baseline_learning_rate("single-pass-dp-sgd", d=d, batch_size=b, steps=steps,
                                         rho=rho, loss="logistic")
  assert got == pytest.approx(want, rel=1e-12)
  assert streaming.loss_constants("least_squares", radius=2.0, label_bound=3.0) == (5.0, 1.0)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(batch_size=-3), ValueError, "batch_size"),
    (dict(batch_size=1025), ValueError, "larger than the n=1024"),
    (dict(), ValueError, "pass batch_size"),
    (dict(batch_size=100, steps=11), ValueError, "single pass has only n=1024"),
    (dict(batch_size=8, loss="hinge"), ValueError, "loss"),
    (dict(batch_size=8, momentum=0.9), TypeError, "unknown option"),
    (dict(batch_size=8, init="random-unit"), ValueError, "start at w = 0"),
    (dict(batch_size=8, guard_radius=5.0), ValueError, "guard_radius"),
    (dict(batch_size=8, radius=-1.0), ValueError, "radius"),
    (dict(batch_size=8, epsilon=-1.0), ValueError, "epsilon"),
])
def test_bad_streaming_arguments(kwargs, error, match):
  ds = dpjax.synthetic(0, n=1024, d=3)
  kwargs = {"epsilon": 1.0, **kwargs}
  with pytest.raises(error, match=match):
    dpjax.fit(ds, "otb", **kwargs)


def test_strongly_convex_needs_mu_and_least_squares_labels_need_a_bound():
  ds = dpjax.synthetic(0, n=256, d=3)
  with pytest.raises(ValueError, match="needs mu"):
    dpjax.fit(ds, "otb-strongly-convex", epsilon=1.0, batch_size=8)
  x, y = _ls_data(0, 256, 3)
  with pytest.raises(ValueError, match="label_bound"):
    dpjax.fit((x, 3.0 * y), "otb", epsilon=1.0, batch_size=8, loss="least_squares")
  res = dpjax.fit((x, 3.0 * y), "otb", epsilon=1.0, batch_size=8, loss="least_squares",
                  label_bound=3.0)
  assert np.all(np.isfinite(res.params))
  with pytest.raises(ValueError, match="NaN|finite"):
    dpjax.fit((x, np.where(np.arange(256) == 3, np.nan, y).astype(np.float32)), "otb",
              epsilon=1.0, batch_size=8, loss="least_squares")
  with pytest.raises(ValueError, match="labels"):  # logistic still needs +-1 labels
    dpjax.fit((x, y), "otb", epsilon=1.0, batch_size=8)


def test_full_batch_algorithms_refuse_streaming_arguments():
  ds = dpjax.synthetic(0, n=256, d=3)
  with pytest.raises(TypeError, match="batch_size applies to the streaming"):
    dpjax.fit(ds, "dp-gd", epsilon=1.0, steps=3, batch_size=8)
  with pytest.raises(ValueError, match="fits logistic regression"):
    dpjax.fit(ds, "dp-gd", epsilon=1.0, steps=3, loss="least_squares")
  assert set(training.STREAMING_ALGORITHMS).isdisjoint(training.ALGORITHMS)
