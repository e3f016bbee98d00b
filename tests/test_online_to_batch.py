"""dpjax.online_to_batch: invariants, clipping, noise reaching the learner, accounting, errors."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dpjax
from conftest import Z_MAX, maybe_jit, scale_z, unit_ball_batch
from dpjax import accounting, online
from dpjax.mechanisms import noise
from dpjax.mechanisms import tree_aggregation as ta
from dpjax.transforms.online_to_batch import difference_clip_bound, online_to_batch

B, DIM = 8, 4


def _data(seed=0, n=B):
  return unit_ball_batch(seed, n, DIM)


def _logistic(w, example):
  x, y = example
  return jnp.logaddexp(0.0, -y * jnp.dot(w, x))


@jax.jit
def _mean_grad(w, x, y):  # the reference (jitted once per shape: it is called at every step)
  return jax.grad(lambda v: jnp.mean(jax.vmap(_logistic, (None, 0))(v, (x, y))))(w)


class _RecState(NamedTuple):
  inputs: jax.Array  # [T, d]
  t: jax.Array


def _recording_learner(steps):
  """A learner that never moves and records what it is shown (the released u_t)."""
  def init(params):
    return _RecState(jnp.zeros((steps, params.shape[0])), jnp.zeros((), jnp.int32))

  def update(u, state, params=None, **extra):
    del extra
    return jnp.zeros_like(params), _RecState(state.inputs.at[state.t].set(u), state.t + 1)

  return optax.GradientTransformationExtraArgs(init, update)


def _run(tx, steps, batches, w0, jit=False):
  state = tx.init(w0)
  upd = maybe_jit(lambda s, p, bx, by: tx.update(None, s, p, batch=(bx, by)), jit)
  p, plays, averages = w0, [], []
  for t in range(steps):
    plays.append(np.asarray(state.play, np.float64))
    bx, by = batches(t)
    u, state = upd(state, p, bx, by)
    p = optax.apply_updates(p, u)
    averages.append(np.asarray(p, np.float64))
  return state, np.stack(plays), np.stack(averages)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("k", [1.0, 2.0])
def test_average_is_the_beta_weighted_mean_of_the_plays(jit, k):
  x, y = _data()
  steps = 20 if jit else 6  # each eager step dispatches op by op
  tx = online_to_batch(online.ogd(radius=1.0), batch_size=B, steps=20, rho=1.0, k=k,
                           clip_norm=10.0, loss="logistic", key=1)
  _, plays, averages = _run(tx, steps, lambda t: (x, y), jnp.zeros(DIM), jit=jit)
  beta = np.arange(1, steps + 1, dtype=np.float64) ** k
  for t in range(1, steps + 1):
    want = (beta[:t, None] * plays[:t]).sum(0) / beta[:t].sum()
    np.testing.assert_allclose(averages[t - 1], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("path", ["glm", "generic"])
@pytest.mark.parametrize("k", [1.0, 3.0])
def test_noiseless_deterministic_sum_is_the_gradient_at_x_t(path, k):
  """g_t = beta_t grad L(x_t): the learner sees the mean gradient at x_t (telescoping)."""
  x, y = _data(3)
  steps = 12
  kw = {"loss": "logistic"} if path == "glm" else {"loss_fn": _logistic}
  # ogd moves the plays (so x_t moves), the recorder keeps what the learner was shown.
  rec = _recording_learner(steps)

  class _Both(NamedTuple):
    a: Any
    b: Any

  inner = online.ogd(radius=2.0)

  def init(p):
    return _Both(inner.init(p), rec.init(p))

  def update(u, s, p=None, **extra):
    step, sa = inner.update(u, s.a, p, **extra)
    _, sb = rec.update(u, s.b, p)
    return step, _Both(sa, sb)

  both = optax.GradientTransformationExtraArgs(init, update)
  tx = online_to_batch(both, batch_size=B, steps=steps, rho=1.0, k=k, clip_norm=1e6, key=0,
                       projection=lambda w: w, disable_noise_for_testing=True, **kw)
  state, _, averages = _run(tx, steps, lambda t: (x, y), jnp.full(DIM, 0.3))
  seen = np.asarray(state.learner.b.inputs)
  for t in range(steps):
    want = np.asarray(_mean_grad(jnp.asarray(averages[t], jnp.float32), x, y))
    np.testing.assert_allclose(seen[t], want, rtol=2e-4, atol=2e-6)


def test_clipping_is_a_no_op_within_the_smoothness_bound():
  """C_0 = k G + (k+1) D H with G = 1, H = 1/4 (logistic, ||x|| <= 1), D = 2R: nothing is clipped."""
  radius, steps = 1.0, 30
  xs, ys = (jnp.stack(a) for a in zip(*[_data(100 + t) for t in range(steps)]))

  def averages(k, clip):
    """The averages after each of `steps` updates on fresh batches, in one lax.scan."""
    tx = online_to_batch(online.ogd(radius=radius), batch_size=B, steps=steps, rho=1.0, k=k,
                         clip_norm=clip, loss="logistic", key=2, disable_noise_for_testing=True)

    def body(carry, batch):
      p, s = carry
      u, s = tx.update(None, s, p, batch=batch)
      p = optax.apply_updates(p, u)
      return (p, s), p

    w0 = jnp.zeros(DIM)
    return jax.lax.scan(body, (w0, tx.init(w0)), (xs, ys))[1]

  ks = (1.0, 2.0)
  c0s = [difference_clip_bound(k, 1.0, 0.25, 2 * radius) for k in ks]
  # Every run in one compiled program: (at C_0, unclipped, far below C_0) for each k.
  runs = jax.jit(lambda: [[averages(k, clip) for clip in (c0, 1e9, 0.01 * c0)]
                          for k, c0 in zip(ks, c0s)])()
  for at_c0, unclipped, below in runs:
    at_c0, unclipped, below = (np.asarray(a, np.float64) for a in (at_c0, unclipped, below))
    np.testing.assert_allclose(at_c0, unclipped, rtol=1e-5, atol=1e-7)
    # Negative control: a clip bound far below C_k changes the trajectory.
    assert np.max(np.abs(below - unclipped)) > 1e-3


def test_the_learner_sees_only_tree_noised_sums():
  """u_t - exact = gamma_t / (beta_t b), Var = popcount(t) (c C_0)^2 / (t b)^2 for k = 1."""
  x, y = _data(5)
  steps, c, c0 = 8, 1.5, 2.0

  def released(key):
    tx = online_to_batch(_recording_learner(steps), batch_size=B, steps=steps,
                         noise_multiplier=c, clip_norm=c0, loss="logistic", key=key,
                         projection=lambda w: w)
    state = tx.init(jnp.zeros(DIM))

    def body(s, _):
      _, s = tx.update(None, s, jnp.zeros(DIM), batch=(x, y))
      return s, None

    return jax.lax.scan(body, state, None, length=steps)[0].learner.inputs

  out = np.asarray(jax.jit(jax.vmap(released))(jax.random.split(jax.random.key(3), 3000)),
                   np.float64)
  exact = np.asarray(_mean_grad(jnp.zeros(DIM), x, y), np.float64)  # x_t = 0 throughout
  for t in (1, 3, 7, 8):
    noise = out[:, t - 1] - exact
    var = bin(t).count("1") * (c * c0 / (t * B)) ** 2
    assert abs(scale_z(noise, var)) < Z_MAX, t
  assert abs(scale_z(out[:, 6] - exact, (c * c0 / (7 * B)) ** 2)) > Z_MAX  # not a fresh leaf


def test_accounting_is_the_tree_cost():
  x, y = _data()
  tx = online_to_batch(online.ogd(radius=1.0), batch_size=B, steps=15, rho=0.7,
                           clip_norm=2.0, loss="logistic", key=0)
  state, _, _ = _run(tx, 15, lambda t: (x, y), jnp.zeros(DIM), jit=True)
  assert accounting.spent_rho(state.accountant) == pytest.approx(0.7, rel=1e-9)
  c = ta.noise_multiplier_for(0.7, 4)
  state, _, _ = _run(tx, 5, lambda t: (x, y), jnp.zeros(DIM))
  assert accounting.spent_rho(state.accountant) == pytest.approx(ta.tree_rho(c, 5), rel=1e-9)
  assert float(optax.tree.get(state, "rho")) == pytest.approx(ta.tree_rho(c, 5), rel=1e-6)


def test_single_pass_least_squares_converges():
  rng = np.random.default_rng(7)
  w_star = rng.normal(size=DIM)
  w_star *= 0.5 / np.linalg.norm(w_star)
  n = 4096
  xs = rng.normal(size=(n, DIM))
  xs /= np.maximum(1.0, np.linalg.norm(xs, axis=1))[:, None]
  ys = xs @ w_star + 0.05 * rng.normal(size=n)
  xs, ys = jnp.asarray(xs, jnp.float32), jnp.asarray(ys, jnp.float32)
  b = 16
  steps = n // b
  c0 = difference_clip_bound(1.0, 2.0, 1.0, 2.0)  # |residual| <= 2 on the unit ball, H = 1
  tx = online_to_batch(online.ogd(radius=1.0), batch_size=b, steps=steps, rho=8.0,
                           clip_norm=c0, loss="least_squares", key=0)

  def excess(w):
    r = xs @ w - ys
    r0 = xs @ jnp.asarray(w_star, jnp.float32) - ys
    return float(0.5 * jnp.mean(r * r) - 0.5 * jnp.mean(r0 * r0))

  _, _, averages = _run(tx, steps, lambda t: (xs[t * b:(t + 1) * b], ys[t * b:(t + 1) * b]),
                        jnp.zeros(DIM), jit=True)
  early, late = excess(jnp.asarray(averages[15], jnp.float32)), excess(
      jnp.asarray(averages[-1], jnp.float32))
  assert late < early / 4 and late < 0.02, (early, late)


def test_plain_optax_learner_with_a_projection():
  x, y = _data()
  proj = lambda w: online.project_ball(w, jnp.zeros(DIM), 0.5)  # noqa: E731
  tx = online_to_batch(optax.sgd(1.0), batch_size=B, steps=10, rho=1.0, clip_norm=2.0,
                           loss="logistic", projection=proj, key=0)
  state, plays, _ = _run(tx, 10, lambda t: (x, y), jnp.zeros(DIM))
  assert np.all(np.linalg.norm(plays, axis=1) <= 0.5 + 1e-6)
  assert np.linalg.norm(np.asarray(state.play)) <= 0.5 + 1e-6


@pytest.mark.parametrize("kwargs, match", [
    ({"k": 0.5}, "sensitivity"),
    ({"k": 1.0, "clip_norm": None}, "clip_norm"),
    ({"batch_size": 0}, "batch_size"),
    ({"steps": None}, "steps"),
    ({"rho": None}, "rho"),
    ({"loss": "hinge"}, "loss"),
    ({"loss": None}, "loss"),
    ({"clip_norm": 1.0, "sensitivity": lambda t: t}, "not both"),
    ({"clip_norm": None, "sensitivity": lambda t: 2.0 + jnp.cos(t.astype(jnp.float32))},
     "monotone"),
])
def test_bad_arguments(kwargs, match):
  base = {"batch_size": B, "steps": 8, "rho": 1.0, "clip_norm": 1.0, "loss": "logistic", "key": 0}
  base.update(kwargs)
  with pytest.raises((ValueError, TypeError), match=match):
    online_to_batch(online.ogd(radius=1.0), **base)


def test_k_below_one_with_a_schedule_is_accepted():
  tx = online_to_batch(online.ogd(radius=1.0), batch_size=B, steps=4, rho=1.0, k=0.0,
                           sensitivity=lambda t: 2.0 / t.astype(jnp.float32), loss="logistic",
                           key=0)
  x, y = _data()
  state, _, _ = _run(tx, 4, lambda t: (x, y), jnp.zeros(DIM))
  assert int(state.count) == 4


def test_learner_without_projection_is_refused():
  with pytest.raises(ValueError, match="projection"):
    online_to_batch(optax.sgd(0.1), batch_size=B, steps=8, rho=1.0, clip_norm=1.0,
                        loss="logistic", key=0)


def test_capacity_and_batch_checks():
  x, y = _data()
  tx = online_to_batch(online.ogd(radius=1.0), batch_size=B, num_levels=2, rho=1.0,
                           clip_norm=1.0, loss="logistic", key=0)
  state = tx.init(jnp.zeros(DIM))
  for _ in range(3):
    _, state = tx.update(None, state, jnp.zeros(DIM), batch=(x, y))
  with pytest.raises(ValueError, match="capacity"):
    tx.update(None, state, jnp.zeros(DIM), batch=(x, y))
  with pytest.raises(ValueError, match="batch_size"):
    tx.update(None, tx.init(jnp.zeros(DIM)), jnp.zeros(DIM), batch=(x[:3], y[:3]))
  with pytest.raises(ValueError, match="batch="):
    tx.update(None, tx.init(jnp.zeros(DIM)), jnp.zeros(DIM))


def test_clip_bound():
  assert difference_clip_bound(1.0, 1.0, 0.25, 2.0) == pytest.approx(2.0)
  assert difference_clip_bound(3.0, 1.0, 0.25, 2.0) == pytest.approx(5.0)
  with pytest.raises(ValueError, match="k >= 1"):
    difference_clip_bound(0.5, 1.0, 0.25, 2.0)
  assert math.isfinite(difference_clip_bound(2.0, 1.0, 1.0, 1.0))


def test_float32_matches_float64(x64):
  """The normalized recursion keeps float32 close to float64 even with t^k large (k = 3)."""
  x, y = _data(11)

  def run(dtype):
    tx = online_to_batch(online.ogd(radius=1.0), batch_size=B, steps=200, rho=1.0, k=3.0,
                         clip_norm=10.0, loss="logistic", key=0, disable_noise_for_testing=True)
    xs, ys = x.astype(dtype), y.astype(dtype)
    state = tx.init(jnp.zeros(DIM, dtype))

    def body(s, _):
      u, s = tx.update(None, s, s.average, batch=(xs, ys))
      return s, None

    return np.asarray(jax.jit(lambda s: jax.lax.scan(body, s, None, length=200)[0])(state).average,
                      np.float64)

  np.testing.assert_allclose(run(jnp.float32), run(jnp.float64), rtol=2e-3, atol=2e-4)


@pytest.mark.parametrize("mode", ta.MODES)
def test_tree_modes_and_vmap_over_privacy_levels(mode):
  x, y = _data(12)

  def run(rho):
    tx = online_to_batch(online.optimistic_ogd(radius=1.0), batch_size=B, steps=16, rho=rho,
                         clip_norm=2.0, loss="logistic", key=0, mode=mode)
    state = tx.init(jnp.zeros(DIM))

    def body(s, _):
      _, s = tx.update(None, s, s.average, batch=(x, y))
      return s, None

    return jax.lax.scan(body, state, None, length=16)[0]

  rhos = jnp.array([0.1, 1.0, 10.0])
  states = jax.jit(jax.vmap(run))(rhos)
  np.testing.assert_allclose(np.asarray(states.accountant.rho), np.asarray(rhos), rtol=1e-6)
  assert np.all(np.isfinite(np.asarray(states.average)))
  # More budget, less noise: the three runs differ.
  assert not np.allclose(np.asarray(states.average[0]), np.asarray(states.average[2]))


def test_kt_learner_in_the_conversion():
  """The parameter-free variant (k = 3, KT betting on a ball) runs and stays in its ball."""
  x, y = _data(13)
  tx = online_to_batch(online.kt_betting(radius=1.0, scale=4.0), batch_size=B, steps=32,
                       rho=1.0, k=3.0, clip_norm=difference_clip_bound(3.0, 1.0, 0.25, 2.0),
                       loss="logistic", key=0)
  state, plays, averages = _run(tx, 32, lambda t: (x, y), jnp.zeros(DIM), jit=True)
  assert np.all(np.linalg.norm(plays, axis=1) <= 1.0 + 1e-5)
  assert np.all(np.linalg.norm(averages, axis=1) <= 1.0 + 1e-5)


def test_replace_one_doubles_the_node_noise():
  x, y = _data(14)
  out = []
  for nb in ("zero-out", "replace-one"):
    tx = online_to_batch(_recording_learner(4), batch_size=B, steps=4, noise_multiplier=1.0,
                         clip_norm=2.0, loss="logistic", key=5, projection=lambda w: w,
                         neighbouring=nb)
    state = tx.init(jnp.zeros(DIM))
    for _ in range(4):
      _, state = tx.update(None, state, jnp.zeros(DIM), batch=(x, y))
    out.append(np.asarray(state.learner.inputs))
  exact = np.asarray(_mean_grad(jnp.zeros(DIM), x, y))
  np.testing.assert_allclose(out[1] - exact, 2 * (out[0] - exact), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ta.MODES)
def test_tree_releases_are_charged_their_tv_slack(mode):
  """Every node release adds K tau (K = d coordinates): T nodes (buffered), 2T - popcount(T) (honaker)."""
  x, y = _data()
  steps = 6
  tx = online_to_batch(online.ogd(radius=1.0), batch_size=B, steps=steps, rho=1.0,
                       clip_norm=2.0, loss="logistic", key=0, mode=mode)
  state, _, _ = _run(tx, steps, lambda t: (x, y), jnp.zeros(DIM), jit=True)
  nodes = steps if mode == "buffered" else 2 * steps - bin(steps).count("1")
  assert accounting.spent_truncation(state.accountant) == pytest.approx(
      nodes * DIM * noise.tv_per_coordinate(), rel=1e-6)
  assert accounting.spent_rho(state.accountant) == pytest.approx(
      ta.tree_rho(ta.noise_multiplier_for(1.0, 3), steps), rel=1e-9)


def test_unsafe_float_noise_and_the_removed_regenerate_mode():
  x, y = _data()
  kw = dict(batch_size=B, steps=4, rho=1.0, clip_norm=2.0, loss="logistic", key=0)
  with pytest.warns(dpjax.PrivacyLeakWarning, match="online_to_batch"):
    tx = online_to_batch(online.ogd(radius=1.0), unsafe_float_noise=True, **kw)
  state, _, averages = _run(tx, 4, lambda t: (x, y), jnp.zeros(DIM), jit=True)
  assert accounting.spent_truncation(state.accountant) == 0.0  # no exact release, no slack
  assert np.all(np.isfinite(averages))
  with pytest.raises(ValueError, match="mode='buffered'"):
    online_to_batch(online.ogd(radius=1.0), mode="regenerate", **kw)
