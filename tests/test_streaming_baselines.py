"""dp_ftrl and single_pass_dp_sgd: updates, noise scales, accounting, refusals, bad input."""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dpjax
from conftest import Z_MAX, maybe_jit, scale_z, unit_ball_batch
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.problem import minibatch
from dpjax.mechanisms import tree_aggregation as ta
from dpjax.transforms import dp_ftrl, single_pass_dp_sgd

B, DIM = 16, 6
REPEATS = 2000


def _data(seed):
  return unit_ball_batch(seed, B, DIM)


def _flat_loss(w, example):
  """Zero gradient everywhere: the update is the noise alone."""
  del example
  return 0.0 * jnp.sum(w)


def _run(tx, steps, jit, w0=None):
  w = jnp.zeros(DIM) if w0 is None else w0
  state = tx.init(w)
  upd = maybe_jit(lambda s, w, bx, by: tx.update(None, s, w, batch=(bx, by)), jit)
  ws = []
  for t in range(steps):
    u, state = upd(state, w, *_data(t))
    w = optax.apply_updates(w, u)
    ws.append(np.asarray(w, np.float64))
  return state, np.stack(ws)


@pytest.mark.parametrize("jit", [False, True])
def test_ftrl_noiseless_is_the_closed_form(jit):
  tx = dp_ftrl(learning_rate=0.3, batch_size=B, clip_norm=0.5, steps=8, rho=1.0,
               loss="logistic", key=0, disable_noise_for_testing=True)
  _, ws = _run(tx, 8, jit)
  w, total = jnp.zeros(DIM), jnp.zeros(DIM)
  for t in range(8):
    total = total + minibatch.clipped_sum(w, _data(t), bound=0.5, loss="logistic")
    w = -0.3 * total / B
    np.testing.assert_allclose(ws[t], np.asarray(w), rtol=1e-5, atol=1e-7)


def test_ftrl_noise_is_the_tree_noise():
  c, clip, eta = 1.3, 0.7, 2.0

  def run(key):
    tx = dp_ftrl(learning_rate=eta, batch_size=B, clip_norm=clip, num_levels=4,
                 noise_multiplier=c, loss_fn=_flat_loss, key=key)
    state = tx.init(jnp.zeros(DIM))

    def body(carry, _):
      w, s = carry
      u, s = tx.update(None, s, w, batch=jnp.zeros((B, 1)))
      w = optax.apply_updates(w, u)
      return (w, s), w

    return jax.lax.scan(body, (jnp.zeros(DIM), state), None, length=8)[1]

  ws = np.asarray(jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), REPEATS)),
                  np.float64)
  for t in (1, 3, 7, 8):  # theta_t - theta_0 = -eta gamma_t / b
    var = bin(t).count("1") * (c * clip * eta / B) ** 2
    assert abs(scale_z(ws[:, t - 1], var)) < Z_MAX, t
  assert abs(scale_z(ws[:, 6], 1.0 * (c * clip * eta / B) ** 2)) > Z_MAX


def test_ftrl_accounting_and_projection():
  tx = dp_ftrl(learning_rate=5.0, batch_size=B, clip_norm=1.0, steps=12, rho=0.4,
               loss="logistic", key=0,
               projection=lambda w: jnp.clip(w, -0.1, 0.1))
  state, ws = _run(tx, 12, True)
  assert accounting.spent_rho(state.prefix.accountant) == pytest.approx(0.4, rel=1e-9)
  assert float(optax.tree.get(state, "rho")) == pytest.approx(0.4, rel=1e-6)
  assert np.all(np.abs(ws) <= 0.1 + 1e-7)
  c = ta.noise_multiplier_for(0.4, 4)
  state, _ = _run(tx, 3, False)
  assert accounting.spent_rho(state.prefix.accountant) == pytest.approx(ta.tree_rho(c, 3))


@pytest.mark.parametrize("jit", [False, True])
def test_single_pass_noiseless_step(jit):
  tx = single_pass_dp_sgd(learning_rate=0.3, batch_size=B, clip_norm=0.5, rho=1.0,
                          loss="logistic", key=0, disable_noise_for_testing=True)
  _, ws = _run(tx, 5, jit)
  w = jnp.zeros(DIM)
  for t in range(5):
    w = w - 0.3 * minibatch.clipped_sum(w, _data(t), bound=0.5, loss="logistic") / B
    np.testing.assert_allclose(ws[t], np.asarray(w), rtol=1e-5, atol=1e-7)


def test_single_pass_noise_scale_and_one_charge():
  rho, clip, eta = 0.3, 0.8, 1.5
  s = clip / math.sqrt(2 * rho)

  def run(key):
    tx = single_pass_dp_sgd(learning_rate=eta, batch_size=B, clip_norm=clip, rho=rho,
                            loss_fn=_flat_loss, key=key)
    state = tx.init(jnp.zeros(DIM))
    u, state = tx.update(None, state, jnp.zeros(DIM), batch=jnp.zeros((B, 1)))
    return u

  us = np.asarray(jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(1), REPEATS)),
                  np.float64)
  assert abs(scale_z(us, (eta * s / B) ** 2)) < Z_MAX
  assert abs(scale_z(us, (eta * s / B) ** 2 * 1.1)) > Z_MAX
  tx = single_pass_dp_sgd(learning_rate=eta, batch_size=B, clip_norm=clip, rho=rho,
                          loss="logistic", key=0)
  state, _ = _run(tx, 7, True)
  assert accounting.spent_rho(state.accountant) == pytest.approx(rho, rel=1e-12)
  assert float(state.noise_std) == pytest.approx(s, rel=1e-6)


def test_single_pass_refuses_past_steps():
  tx = single_pass_dp_sgd(learning_rate=0.1, batch_size=B, clip_norm=1.0, rho=1.0, steps=2,
                          loss="logistic", key=0)
  state, _ = _run(tx, 2, False)
  with pytest.raises(ValueError, match="budget exhausted"):
    tx.update(None, state, jnp.zeros(DIM), batch=_data(0))
  upd = jax.jit(lambda s, w, bx, by: tx.update(None, s, w, batch=(bx, by)))
  u, s2 = upd(state, jnp.zeros(DIM), *_data(0))
  assert bool(s2.budget_exhausted) and float(jnp.abs(u).sum()) == 0.0


@pytest.mark.parametrize("factory, kwargs, match", [
    (dp_ftrl, {"clip_norm": 0.0}, "clip_norm"),
    (dp_ftrl, {"batch_size": 0}, "batch_size"),
    (dp_ftrl, {"loss": None}, "loss"),
    (dp_ftrl, {"learning_rate": -1.0}, "learning_rate"),
    (single_pass_dp_sgd, {"rho": 0.0}, "rho"),
    (single_pass_dp_sgd, {"steps": 0}, "steps"),
    (single_pass_dp_sgd, {"projection": 3}, "projection"),
])
def test_bad_arguments(factory, kwargs, match):
  base = {"learning_rate": 0.1, "batch_size": B, "clip_norm": 1.0, "rho": 1.0,
          "loss": "logistic", "key": 0}
  if factory is dp_ftrl:
    base["steps"] = 8
  base.update(kwargs)
  with pytest.raises((ValueError, TypeError), match=match):
    factory(**base)


def test_batch_size_is_checked():
  for tx in (dp_ftrl(learning_rate=0.1, batch_size=B, clip_norm=1.0, steps=4, rho=1.0,
                     loss="logistic", key=0),
             single_pass_dp_sgd(learning_rate=0.1, batch_size=B, clip_norm=1.0, rho=1.0,
                                loss="logistic", key=0)):
    x, y = _data(0)
    with pytest.raises(ValueError, match="batch_size"):
      tx.update(None, tx.init(jnp.zeros(DIM)), jnp.zeros(DIM), batch=(x[:3], y[:3]))


def test_replace_one_doubles_the_noise():
  zero = single_pass_dp_sgd(learning_rate=1.0, batch_size=B, clip_norm=1.0, rho=0.5,
                            loss="logistic", key=0)
  repl = single_pass_dp_sgd(learning_rate=1.0, batch_size=B, clip_norm=1.0, rho=0.5,
                            loss="logistic", key=0, neighbouring="replace-one")
  assert float(repl.init(jnp.zeros(DIM)).noise_std) == pytest.approx(
      2 * float(zero.init(jnp.zeros(DIM)).noise_std))
  runs = []
  for nb in ("zero-out", "replace-one"):
    tx = dp_ftrl(learning_rate=1.0, batch_size=B, clip_norm=1.0, steps=4, rho=1.0,
                 loss_fn=_flat_loss, key=3, neighbouring=nb)
    u, _ = tx.update(None, tx.init(jnp.zeros(DIM)), jnp.zeros(DIM), batch=jnp.zeros((B, 1)))
    runs.append(np.asarray(u))
  np.testing.assert_allclose(runs[1], 2 * runs[0], rtol=1e-6)
  with pytest.raises(ValueError, match="neighbouring"):
    single_pass_dp_sgd(learning_rate=1.0, batch_size=B, clip_norm=1.0, rho=0.5,
                       loss="logistic", key=0, neighbouring="add-remove")


def test_ftrl_charges_the_tree_slack_and_offers_the_float_opt_out():
  kw = dict(learning_rate=0.5, batch_size=B, clip_norm=1.0, steps=5, rho=1.0, loss="logistic",
            key=0)
  state, ws = _run(dp_ftrl(**kw), 5, True)
  # One node of DIM coordinates released per step, each within DIM tau of the exact mechanism.
  assert accounting.spent_truncation(state.prefix.accountant) == pytest.approx(
      5 * DIM * noise.tv_per_coordinate(), rel=1e-6)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    unsafe = dp_ftrl(unsafe_float_noise=True, **kw)
  leaks = [w for w in caught if issubclass(w.category, dpjax.PrivacyLeakWarning)]
  assert len(leaks) == 1 and "dp_ftrl" in str(leaks[0].message), [str(w.message) for w in caught]
  state, unsafe_ws = _run(unsafe, 5, True)
  assert accounting.spent_truncation(state.prefix.accountant) == 0.0
  assert accounting.spent_rho(state.prefix.accountant) == pytest.approx(1.0, rel=1e-9)
  assert np.all(np.isfinite(unsafe_ws)) and not np.array_equal(unsafe_ws, ws)


@pytest.mark.parametrize("neighbouring", ["zero-out", "replace-one"])
def test_default_steps_use_the_mechanisms_own_noise(neighbouring):
  """The baselines' default step sizes read the noise their transform draws, from the mechanism."""
  from dpjax import transforms  # pylint: disable=g-import-not-at-top
  from dpjax.training import streaming  # pylint: disable=g-import-not-at-top
  d, b, steps, rho = 6, 32, 40, 0.3
  tx = streaming.make_transform("single-pass-dp-sgd", d=d, batch_size=b, steps=steps, rho=rho,
                                loss="logistic", key=0, neighbouring=neighbouring)
  drawn = float(tx.init(jnp.zeros(d)).noise_std)
  _, s = transforms.single_pass_noise_scale(clip_norm=1.0, rho=rho, neighbouring=neighbouring)
  np.testing.assert_allclose(drawn, s, rtol=1e-6)
  for algorithm, noise_std in [("single-pass-dp-sgd", s),
                               ("dp-ftrl", ta.prefix_noise_scale(
                                   steps=steps, rho=rho,
                                   sensitivity=minibatch.sensitivity_factor(neighbouring)))]:
    lr = streaming.baseline_learning_rate(algorithm, d=d, batch_size=b, steps=steps, rho=rho,
                                          loss="logistic", neighbouring=neighbouring)
    expected = streaming.default_learning_rate(diameter=2.0, lipschitz=1.0, noise_std=noise_std,
                                               batch_size=b, steps=steps, d=d)
    assert lr == expected
  # The tree's prefix-sum scale is c Delta sqrt(L) per coordinate: its node noise times sqrt(L).
  levels, c = ta.calibrate(num_levels=None, steps=steps, rho=rho, noise_multiplier=None)
  assert ta.prefix_noise_scale(steps=steps, rho=rho, sensitivity=2.0, dim=d) == pytest.approx(
      c * 2.0 * math.sqrt(d * levels), rel=1e-12)
