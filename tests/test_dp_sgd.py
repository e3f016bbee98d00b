"""dpjax.transforms.dp_sgd: Poisson-subsampled DP-SGD with an RDP accountant (Abadi et al. 2016).

Covers the per-example clip bound (batch of one, outliers), the noise scale
(statistical, fixed seed), GLM path == generic loss_fn path, the Poisson
sample and its mask (masked slots contribute exactly 0, also in
``minibatch.clipped_sum``), the accountant (calibration target and
dp_accounting's RDP accountant), the public ``dp_sgd_noise_multiplier`` (the
transform's own z; epsilon within the target), the budget gate, utility, bad input.
"""

from __future__ import annotations

import functools

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from dp_accounting import rdp as dp_rdp
from scipy import stats

from conftest import Z_MAX, maybe_jit, scale_z, unit_ball_batch
from dpjax import accounting, data
from dpjax.mechanisms import sampling
from dpjax.problem import glm, minibatch
from dpjax.transforms import DPSGDState, dp_sgd, dp_sgd_noise_multiplier, dp_sgd_step


def _logistic(w, example):
  x, y = example
  return jnp.logaddexp(0.0, -y * jnp.dot(w, x))


def _squares(w, example):
  x, y = example
  return 0.5 * (jnp.dot(w, x) - y) ** 2


def _affine_squares(p, example):
  """Least squares with a pytree of params: the generic path's own norm over all leaves."""
  x, y = example
  return 0.5 * (jnp.dot(p["w"], x) + p["b"] - y) ** 2


_GENERIC = {"logistic": _logistic, "least_squares": _squares}


def _outliers(seed, n, d):
  """Rows with huge norms and, for least squares, huge labels (labels +-1 for logistic)."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d)) * np.logspace(-2, 3, n)[:, None]
  y_pm = np.where(rng.random(n) < 0.5, -1.0, 1.0)
  y_big = y_pm * np.logspace(0, 4, n)
  return (jnp.asarray(x, jnp.float32), jnp.asarray(y_pm, jnp.float32),
          jnp.asarray(y_big, jnp.float32))


# ----------------------------------------------------------------------------
# Per-example clipping: a batch of one (n = 1, q = 1) isolates one example.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["logistic", "least_squares", "loss_fn"])
def test_each_example_is_clipped_to_the_bound(path):
  clip, d, n_ex = 0.3, 4, 8
  x, y_pm, y_big = _outliers(0, n_ex, d)
  if path == "loss_fn":
    params = {"w": jnp.linspace(-1.0, 1.0, d), "b": jnp.array(0.5)}
    kw = {"loss": None, "loss_fn": _affine_squares}
    y = y_big
    raw = jax.vmap(jax.grad(_affine_squares), (None, 0))(params, (x, y))
    raw_norm = np.sqrt(np.sum(np.asarray(raw["w"]) ** 2, 1) + np.asarray(raw["b"]) ** 2)
  else:
    params = jnp.linspace(-1.0, 1.0, d)
    kw = {"loss": path}
    y = y_pm if path == "logistic" else y_big
    raw = jax.vmap(jax.grad(_GENERIC[path]), (None, 0))(params, (x, y))
    raw_norm = np.linalg.norm(np.asarray(raw), axis=1)
  # learning_rate 1 and q n = 1: the update is minus the example's clipped gradient.
  tx = dp_sgd(n=1, sampling_rate=1.0, cap=1, noise_multiplier=1.0, clip_norm=clip,
              learning_rate=1.0, key=0, disable_noise_for_testing=True, **kw)
  state = tx.init(params)
  step = jax.jit(lambda p, s, xi, yi: tx.update(None, s, p, data=(xi, yi))[0])
  for i in range(n_ex):
    out = step(params, state, x[i:i + 1], y[i:i + 1])
    leaves = [np.asarray(v, np.float64).ravel() for v in jax.tree.leaves(out)]
    norm = float(np.linalg.norm(np.concatenate(leaves)))
    assert norm <= clip * (1 + 1e-6), (i, norm)
    if raw_norm[i] > clip:  # the clip is active: exactly the bound, same direction.
      np.testing.assert_allclose(norm, clip, rtol=1e-5)
    else:
      np.testing.assert_allclose(norm, raw_norm[i], rtol=1e-5)
    factor = min(1.0, clip / raw_norm[i]) if raw_norm[i] > 0 else 1.0
    want = jax.tree.map(lambda r: -np.asarray(r[i]) * factor, raw)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7), out, want)
  assert np.max(raw_norm) > 100 * clip  # the outliers really are outliers.


# ----------------------------------------------------------------------------
# The Poisson sample and the mask.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["glm", "loss_fn"])
def test_clipped_sum_mask_drops_examples_exactly(path):
  x, y = unit_ball_batch(5, 16, 3, scale=3.0)
  keep = np.arange(16) % 3 != 0
  # Masked rows hold NaN / inf / huge values: nothing may leak from them.
  bad_x = np.asarray(x).copy()
  bad_y = np.asarray(y).copy()
  bad_x[0] = np.nan
  bad_x[3] = np.inf
  bad_x[6] = 1e30
  bad_y[9] = np.nan
  bad_x, bad_y = jnp.asarray(bad_x), jnp.asarray(bad_y)
  w = jnp.array([0.3, -0.2, 0.1])
  kw = {"loss": "logistic"} if path == "glm" else {"loss_fn": _logistic}
  for mask in (jnp.asarray(keep), jnp.asarray(keep, jnp.float32), jnp.asarray(keep, jnp.int32)):
    out = minibatch.clipped_sum(w, (bad_x, bad_y), bound=0.4, mask=mask, **kw)
    ref = minibatch.clipped_sum(w, (x[keep], y[keep]), bound=0.4, **kw)
    assert np.all(np.isfinite(np.asarray(out)))
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-6, atol=1e-7)
  jitted = jax.jit(lambda m: minibatch.clipped_sum(w, (bad_x, bad_y), bound=0.4, mask=m, **kw))
  np.testing.assert_array_equal(np.asarray(jitted(jnp.zeros(16, bool))), np.zeros(3))
  with pytest.raises(ValueError, match="mask has shape"):
    minibatch.clipped_sum(w, (x, y), bound=0.4, mask=jnp.ones(15, bool), **kw)
  with pytest.raises(ValueError, match="only 0/1"):
    minibatch.clipped_sum(w, (x, y), bound=0.4, mask=jnp.full(16, 0.5), **kw)
  with pytest.raises(TypeError, match="mask must be"):
    minibatch.clipped_sum(w, (x, y), bound=0.4, mask=[True] * 16, **kw)


@functools.lru_cache(maxsize=None)
def _first_step_sample(n, q, seed):
  """The sample dp_sgd's first step draws (its documented key use), as numpy."""
  sampler = sampling.poisson_sampler(n, sampling_rate=q)
  idx, mask = jax.jit(lambda k: sampling.sample(sampler, jax.random.split(k, 3)[1]))(
      jax.random.key(seed))
  return np.asarray(idx), np.asarray(mask), sampler.cap


@pytest.mark.parametrize("path, jit", [("glm", False), ("glm", True), ("loss_fn", True)])
def test_step_sums_exactly_the_poisson_sample(path, jit):
  """Output = -eta/(q n) * clipped sum over the sampled examples; padded slots add nothing."""
  n, d, q, lr, clip = 200, 3, 0.05, 0.7, 0.5
  x, y = unit_ball_batch(6, n, d, scale=2.0)
  x = x.at[0].set(1e4)  # padded slots point at row 0: a leak would be huge.
  kw = {"loss": "logistic"} if path == "glm" else {"loss": None, "loss_fn": _logistic}
  # A seed whose first step does not sample example 0 (found, not assumed).
  for seed in range(50):
    idx, mask, cap = _first_step_sample(n, q, seed)
    if 0 not in set(idx[mask].tolist()):
      break
  else:
    pytest.fail("every seed sampled example 0")
  chosen = idx[mask]
  assert 0 < chosen.size < cap  # some slots are padding (index 0, masked).
  tx = dp_sgd(n=n, sampling_rate=q, noise_multiplier=1.0, clip_norm=clip, learning_rate=lr,
              key=seed, disable_noise_for_testing=True, **kw)
  w = jnp.array([0.2, -0.1, 0.3])
  out, state = maybe_jit(lambda w, s: tx.update(None, s, w, data=(x, y)), jit)(w, tx.init(w))
  ref = minibatch.clipped_sum(w, (x[chosen], y[chosen]), bound=clip, loss="logistic")
  np.testing.assert_allclose(np.asarray(out), -lr / (q * n) * np.asarray(ref), rtol=1e-5,
                             atol=1e-8)
  assert int(state.count) == 1 and not bool(state.budget_exhausted)


# ----------------------------------------------------------------------------
# The noise scale and the equivalence of the two paths.
# ----------------------------------------------------------------------------


def test_noise_std_matches():
  """noisy - noise-free with the same key: N(0, (eta z C / (q n))^2) on every coordinate.

  The noise is drawn by the same code on both paths (the next test checks that
  they agree with the noise on); the pytree params here hold 10^4 coordinates,
  i.i.d. draws of the noise on the averaged gradient, over two steps.
  """
  n, d, q, z, clip, lr = 100, 8, 0.2, 1.3, 0.5, 0.9
  x, y = unit_ball_batch(7, n, d, scale=2.0)
  params = {"w": jnp.linspace(-0.5, 0.5, d), "v": jnp.ones((4996,))}

  def loss_fn(p, example):
    return _squares(p["w"], example) + 0.1 * jnp.sum(p["v"] ** 2)

  def build(no_noise):
    return dp_sgd(n=n, sampling_rate=q, noise_multiplier=z, clip_norm=clip, learning_rate=lr,
                  loss=None, loss_fn=loss_fn, key=42, disable_noise_for_testing=no_noise)

  @jax.jit
  def noise_of_two_steps():
    out = []
    tx_noisy, tx_clean = build(False), build(True)
    s_noisy, s_clean = tx_noisy.init(params), tx_clean.init(params)
    for _ in range(2):
      u_noisy, s_noisy = tx_noisy.update(None, s_noisy, params, data=(x, y))
      u_clean, s_clean = tx_clean.update(None, s_clean, params, data=(x, y))
      out.append(jnp.concatenate([(a - b).ravel() for a, b in zip(
          jax.tree.leaves(u_noisy), jax.tree.leaves(u_clean))]))
    return jnp.stack(out), s_noisy.noise_std, s_clean.noise_std

  diff, std, std0 = noise_of_two_steps()
  want_std = z * clip / (q * n)
  np.testing.assert_allclose(float(std), want_std, rtol=1e-6)
  assert float(std0) == 0.0
  noise = np.asarray(diff, np.float64).reshape(-1, 1) / -lr  # the noise on the averaged gradient.
  assert noise.shape[0] == 2 * 5004
  assert abs(scale_z(noise, want_std**2)) < Z_MAX
  ks = stats.kstest(noise.ravel() / want_std, "norm")
  assert ks.pvalue > 1e-4, ks
  # The two steps draw fresh noise (keys split off the state key).
  assert abs(np.corrcoef(noise[:5004, 0], noise[5004:, 0])[0, 1]) < 0.1
  # A 10% error in the std would be rejected at this sample size (10^4 draws).
  assert abs(scale_z(noise, (1.1 * want_std) ** 2)) > Z_MAX
  assert abs(scale_z(noise, (0.9 * want_std) ** 2)) > Z_MAX


@pytest.mark.parametrize("loss", ["logistic", "least_squares"])
def test_glm_path_equals_loss_fn_path(loss):
  n, d, q, steps = 300, 4, 0.1, 3
  x, y_pm, y_big = _outliers(8, n, d)
  y = y_pm if loss == "logistic" else y_big
  common = dict(n=n, sampling_rate=q, noise_multiplier=0.8, clip_norm=0.5, learning_rate=0.3,
                key=jax.random.key(9), steps=steps)
  tx_glm = dp_sgd(loss=loss, **common)
  tx_gen = dp_sgd(loss=None, loss_fn=_GENERIC[loss], **common)

  @jax.jit
  def both(w_glm, s_glm, w_gen, s_gen):
    return tx_glm.update(None, s_glm, w_glm, data=(x, y)), tx_gen.update(None, s_gen, w_gen,
                                                                         data=(x, y))

  w_glm = w_gen = jnp.zeros(d)
  s_glm, s_gen = tx_glm.init(w_glm), tx_gen.init(w_gen)
  for _ in range(steps):
    (u_glm, s_glm), (u_gen, s_gen) = both(w_glm, s_glm, w_gen, s_gen)
    np.testing.assert_allclose(np.asarray(u_glm), np.asarray(u_gen), rtol=1e-4, atol=1e-6)
    assert float(jnp.linalg.norm(u_glm)) > 0
    w_glm, w_gen = optax.apply_updates(w_glm, u_glm), optax.apply_updates(w_gen, u_gen)
  # Same keys, counts, charges.
  np.testing.assert_array_equal(jax.random.key_data(s_glm.key), jax.random.key_data(s_gen.key))
  jax.tree.map(np.testing.assert_array_equal, s_glm._replace(key=0), s_gen._replace(key=0))


# ----------------------------------------------------------------------------
# Accounting and the budget gate.
# ----------------------------------------------------------------------------


def _run(tx, params, xy, steps):
  def body(carry, _):
    w, s = carry
    u, s = tx.update(None, s, w, data=xy)
    return (optax.apply_updates(w, u), s), None
  (w, state), _ = jax.lax.scan(body, (params, tx.init(params)), None, length=steps)
  return w, state


def _dp_accounting_epsilon(q, z, steps, delta):
  acc = dp_rdp.RdpAccountant(orders=list(accounting.RDP_ORDERS))
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
  return acc.get_epsilon(delta)


_N, _D, _B, _T, _EPS = 2000, 5, 100, 100, 1.0


@functools.lru_cache(maxsize=None)
def _synthetic_runs():
  """Three seeds of T = 100 steps at eps = 1, delta = n^-2 (default), q = 0.05 on synthetic data.

  Shared (one compilation) by the accounting and the utility tests.
  """
  x, y = data.synthetic(0, n=_N, d=_D)
  x, y = jnp.asarray(x), jnp.asarray(y)

  def run(seed):
    tx = dp_sgd(n=_N, batch_size=_B, epsilon=_EPS, steps=_T, key=seed)
    w, state = _run(tx, jnp.zeros(_D), (x, y), _T)
    return glm.logistic_loss(w, x, y), state

  losses, states = jax.jit(jax.vmap(run))(jnp.arange(3))
  return x, y, np.asarray(losses), states


def test_accountant_hits_the_target_and_matches_dp_accounting():
  delta, q = 1.0 / _N**2, _B / _N
  _, _, _, states = _synthetic_runs()
  np.testing.assert_array_equal(np.asarray(states.count), _T)
  assert not np.any(np.asarray(states.budget_exhausted))
  sampler = sampling.poisson_sampler(_N, batch_size=_B)
  z = accounting.calibrate_noise_multiplier(_EPS, delta, steps=_T, sampling_rates=q,
                                            overflow_prob=sampler.overflow_prob)
  np.testing.assert_allclose(np.asarray(states.noise_std), z * 1.0 / _B, rtol=1e-6)  # z C/(q n)
  spent = accounting.epsilon_spent(states.accountant, delta)  # one per seed, all equal.
  assert np.all(spent <= _EPS * (1 + 1e-9)) and np.all(abs(spent - _EPS) < 1e-3), spent
  ref = _dp_accounting_epsilon(q, z, _T, delta)
  np.testing.assert_allclose(spent, ref, rtol=1e-3)
  # The charged RDP curve is T times one step's (host float64, triple-word exact),
  # and the truncation slack T times the sampler's.
  curve = accounting.subsampled_gaussian_rdp(q, z)
  one = jax.tree.map(lambda leaf: leaf[0], states.accountant)
  np.testing.assert_allclose(accounting.spent_rdp(one), _T * curve, rtol=1e-9)
  np.testing.assert_allclose(float(one.truncation), _T * sampler.overflow_prob, rtol=1e-5)
  assert float(one.rho) == 0.0  # nothing charged as zCDP.


def test_public_noise_multiplier_is_the_one_the_runs_used():
  """dp_sgd_noise_multiplier on the transform's own sampler: the runs' noise std and charge."""
  _, _, _, states = _synthetic_runs()
  sampler = sampling.poisson_sampler(_N, batch_size=_B)
  z = dp_sgd_noise_multiplier(epsilon=_EPS, steps=_T, sampler=sampler)  # delta: n^-2.
  np.testing.assert_array_equal(np.asarray(states.noise_std), np.float32(z * 1.0 / _B))
  one = jax.tree.map(lambda leaf: leaf[0], states.accountant)
  np.testing.assert_allclose(accounting.spent_rdp(one),
                             _T * accounting.subsampled_gaussian_rdp(_B / _N, z), rtol=1e-12)
  spent = accounting.epsilon_spent(states.accountant, 1.0 / _N**2)
  assert np.all(spent <= _EPS), spent


@pytest.mark.parametrize("sampling_args, budget", [
    (dict(sampling_rate=0.05), dict(epsilon=2.0, delta=1e-5, steps=30)),
    # A cap whose slack (1 + e^3) 20 P(overflow) is 15% of delta (z +0.4%).
    (dict(batch_size=40, cap=80), dict(epsilon=3.0, delta=1e-5, steps=20)),
    (dict(batch_size=25, overflow_prob=1e-9), dict(epsilon=0.5, steps=10)),  # delta = n^-2.
])
def test_public_noise_multiplier_is_what_dp_sgd_uses_and_meets_the_target(sampling_args, budget):
  n, d, clip = 1000, 3, 0.5
  x, y = unit_ball_batch(4, n, d)
  sampler = sampling.poisson_sampler(n, **sampling_args)
  z = dp_sgd_noise_multiplier(sampler=sampler, **budget)
  tx = dp_sgd(n=n, clip_norm=clip, key=0, **sampling_args, **budget)
  w, state = jax.jit(lambda w: _run(tx, w, (x, y), budget["steps"]))(jnp.zeros(d))
  assert bool(jnp.all(jnp.isfinite(w)))
  # The same z, bit for bit: noise std z C / (q n) and the charged curve T rdp(q, z).
  assert float(state.noise_std) == float(np.float32(z * clip / sampler.expected_size))
  np.testing.assert_allclose(
      accounting.spent_rdp(state.accountant),
      budget["steps"] * accounting.subsampled_gaussian_rdp(sampler.sampling_rate, z), rtol=1e-12)
  delta = budget.get("delta", 1.0 / n**2)
  spent = accounting.epsilon_spent(state.accountant, delta)
  assert spent <= budget["epsilon"] and spent > budget["epsilon"] * (1 - 1e-3), spent


@pytest.mark.parametrize("z, q, steps", [(1.1, 0.01, 50), (0.6, 0.02, 100)])
def test_given_noise_multiplier_is_accounted_like_dp_accounting(z, q, steps):
  n, delta = 1000, 1e-5
  x, y = unit_ball_batch(10, n, 3)
  tx = dp_sgd(n=n, sampling_rate=q, noise_multiplier=z, key=1)
  state = tx.init(jnp.zeros(3))
  step = jax.jit(lambda s: tx.update(None, s, jnp.zeros(3), data=(x, y))[1])
  for _ in range(steps):
    state = step(state)
  np.testing.assert_allclose(accounting.epsilon_spent(state.accountant, delta),
                             _dp_accounting_epsilon(q, z, steps, delta), rtol=1e-3)
  np.testing.assert_allclose(float(state.noise_std), z / (q * n), rtol=1e-6)


def test_budget_gate_eager_raises_and_traced_refuses():
  """Also: inside optax.chain, extra update arguments are forwarded and ignored."""
  n = 50
  x, y = unit_ball_batch(11, n, 2)
  tx = optax.chain(dp_sgd(n=n, batch_size=10, noise_multiplier=1.0, steps=2, key=3),
                   optax.identity())
  w = jnp.zeros(2)
  state = tx.init(w)
  step = jax.jit(lambda s: tx.update(None, s, w, data=(x, y), value=1.0, unused=None))
  for _ in range(2):
    _, state = step(state)
  with pytest.raises(ValueError, match="budget exhausted"):
    tx.update(None, state, w, data=(x, y))  # eager: raises before any work.
  out, refused = step(state)  # traced: refused.
  np.testing.assert_array_equal(np.asarray(out), 0.0)
  assert isinstance(refused[0], DPSGDState)
  assert bool(refused[0].budget_exhausted) and int(refused[0].count) == 2
  jax.tree.map(np.testing.assert_array_equal, refused[0].accountant, state[0].accountant)
  assert float(optax.tree.get(refused, "rho")) == 0.0  # the accountant is findable by name.
  assert np.all(accounting.spent_rdp(refused[0].accountant) > 0)  # two steps were charged.


def test_dp_sgd_decreases_the_logistic_loss():
  x, y, losses, _ = _synthetic_runs()  # eps = 1, delta = n^-2, B = 100, T = 100, eta = 4
  start = float(glm.logistic_loss(jnp.zeros(_D), x, y))
  # The non-private reference: full-batch GD with the same step 4, many steps.
  w_ref = jax.jit(lambda: jax.lax.fori_loop(
      0, 300, lambda _, w: w - 4.0 * glm.logistic_loss_and_grad(w, x, y)[1], jnp.zeros(_D)))()
  best = float(glm.logistic_loss(w_ref, x, y))
  assert np.all(losses < start - 0.5 * (start - best)), (losses, start, best)
  # 1e-6: `best` (300 GD steps) is 1.2e-7 above the float64 optimum, and these float32
  # losses round at a few 1e-8.
  assert np.all(losses > best - 1e-6)


# ----------------------------------------------------------------------------
# dp_sgd_step: the update's body, with traceable learning rate and noise std.
# ----------------------------------------------------------------------------

_STEP_N, _STEP_B, _STEP_D = 300, 40, 6


def _step_case(lr=8.0, z=1.7, **kwargs):
  """``(tx, sampler, w, key, data)``: a transform and the same step's static arguments."""
  x, y = (jnp.asarray(a) for a in data.synthetic(0, n=_STEP_N, d=_STEP_D))
  key = jax.random.key(3)
  tx = dp_sgd(n=_STEP_N, batch_size=_STEP_B, noise_multiplier=z, learning_rate=lr, key=key,
              **kwargs)
  sampler = sampling.poisson_sampler(_STEP_N, batch_size=_STEP_B)
  return tx, sampler, jnp.linspace(-1.0, 1.0, _STEP_D), key, (x, y)


@pytest.mark.parametrize("path", ["glm", "loss_fn"])
def test_step_is_the_update_bit_for_bit(path):
  kw = {} if path == "glm" else {"loss": None, "loss_fn": _logistic}
  tx, sampler, w, key, xy = _step_case(**kw)
  run = (lambda f: f) if path == "glm" else jax.jit  # eager once; the vmapped path jitted.
  u, state = run(lambda w, s: tx.update(None, s, w, data=xy))(w, tx.init(w))
  u2, new_key = run(lambda w, k: dp_sgd_step(w, k, xy, 8.0, 1.7, sampler=sampler, **kw))(w, key)
  np.testing.assert_array_equal(u2, u)
  assert np.any(np.asarray(u) != 0)
  np.testing.assert_array_equal(jax.random.key_data(new_key), jax.random.key_data(state.key))


def test_step_takes_traced_hyper_parameters_under_jit_and_vmap():
  grid = [(8.0, 1.7), (2.0, 0.6)]  # (learning rate, z C) with C = 1.
  refs = []
  for lr, z in grid:
    tx, sampler, w, key, xy = _step_case(lr, z)
    refs.append(jax.jit(lambda w, s, tx=tx: tx.update(None, s, w, data=xy))(w, tx.init(w))[0])
  step = lambda lr, z: dp_sgd_step(w, key, xy, lr, z, sampler=sampler)[0]
  traced = jax.jit(step)
  for (lr, z), ref in zip(grid, refs):
    np.testing.assert_array_equal(traced(jnp.float32(lr), jnp.float32(z)), ref)
  batched = jax.jit(jax.vmap(step))(*(jnp.array(v, jnp.float32) for v in zip(*grid)))
  np.testing.assert_array_equal(batched, jnp.stack(refs))
  assert not np.allclose(refs[0], refs[1])


@pytest.mark.parametrize("change, err, match", [
    (dict(sampler=(300, 0.1)), TypeError, "PoissonSampler"),
    (dict(clip_norm=0.0), ValueError, "clip_norm"),
    (dict(loss="hinge"), ValueError, "loss"),
    (dict(loss=None), ValueError, "exactly one of loss"),
    (dict(loss_fn=_logistic), ValueError, "exactly one of loss"),
    (dict(exact=1), TypeError, "exact must be True or False"),
    (dict(sampler=sampling.poisson_sampler(200, batch_size=40)), ValueError, "leading axis n=200"),
])
def test_step_rejects_bad_static_arguments(change, err, match):
  _, sampler, w, key, xy = _step_case()
  with pytest.raises(err, match=match):
    dp_sgd_step(w, key, xy, 1.0, 1.0, **{"sampler": sampler, **change})


# ----------------------------------------------------------------------------
# Bad input.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(sampling_rate=0.0, noise_multiplier=1.0), ValueError, "sampling_rate"),
    (dict(sampling_rate=1.5, noise_multiplier=1.0), ValueError, "sampling_rate"),
    (dict(batch_size=101, noise_multiplier=1.0), ValueError, "batch_size"),
    (dict(batch_size=0, noise_multiplier=1.0), ValueError, "batch_size"),
    (dict(batch_size=10, sampling_rate=0.1, noise_multiplier=1.0), ValueError, "batch_size"),
    (dict(noise_multiplier=1.0), ValueError, "batch_size|sampling_rate"),
    (dict(batch_size=10, noise_multiplier=1.0, epsilon=1.0, steps=5), ValueError, "both"),
    (dict(batch_size=10), ValueError, "neither"),
    (dict(batch_size=10, epsilon=1.0), ValueError, "steps"),
    (dict(batch_size=10, noise_multiplier=1.0, delta=1e-5), ValueError, "delta"),
    (dict(batch_size=10, epsilon=1.0, steps=5, delta=1.0), ValueError, "delta"),
    (dict(batch_size=10, noise_multiplier=-1.0), ValueError, "noise_multiplier"),
    (dict(batch_size=10, noise_multiplier=1.0, clip_norm=0.0), ValueError, "clip_norm"),
    (dict(batch_size=10, noise_multiplier=1.0, loss="least_squares"), TypeError,
     "learning_rate is required"),
    (dict(batch_size=10, noise_multiplier=1.0, loss=None, loss_fn=_logistic), TypeError,
     "learning_rate is required"),
    (dict(batch_size=10, noise_multiplier=1.0, loss_fn=_logistic, learning_rate=1.0),
     ValueError, "loss=None"),
    (dict(batch_size=10, noise_multiplier=1.0, loss="hinge"), ValueError, "loss"),
    (dict(batch_size=10, noise_multiplier=1.0, learning_rate=-1.0), ValueError,
     "learning_rate"),
    (dict(batch_size=10, noise_multiplier=1.0, steps=0), ValueError, "steps"),
    (dict(batch_size=10, noise_multiplier=1.0, disable_noise_for_testing=1), TypeError,
     "disable_noise_for_testing"),
    (dict(batch_size=10, noise_multiplier=1.0, key=None), TypeError, "key"),
])
def test_bad_construction_raises(kwargs, err, match):
  kwargs = {"n": 100, "key": 0, **kwargs}
  with pytest.raises(err, match=match):
    dp_sgd(**kwargs)


_SAMPLER = sampling.poisson_sampler(100, batch_size=10)


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(epsilon=0.0), ValueError, "epsilon"),
    (dict(epsilon=-1.0), ValueError, "epsilon"),
    (dict(epsilon=float("nan")), ValueError, "epsilon"),
    (dict(epsilon="1"), TypeError, "epsilon"),
    (dict(steps=None), ValueError, "steps"),
    (dict(steps=0), ValueError, "steps"),
    (dict(steps=2.5), TypeError, "steps"),
    (dict(delta=0.0), ValueError, "delta"),
    (dict(delta=1.0), ValueError, "delta"),
    (dict(sampler=None), TypeError, "sampler"),
    (dict(sampler=(100, 0.1)), TypeError, "sampler"),
    # A cap whose overflow slack (20% a step) leaves nothing of delta.
    (dict(sampler=sampling.poisson_sampler(100, batch_size=10, cap=12)), ValueError,
     "overflow_prob"),
])
def test_public_noise_multiplier_rejects_bad_arguments(kwargs, err, match):
  kwargs = {"epsilon": 1.0, "delta": 1e-5, "steps": 5, "sampler": _SAMPLER, **kwargs}
  with pytest.raises(err, match=match):
    dp_sgd_noise_multiplier(**kwargs)


def test_public_noise_multiplier_is_keyword_only():
  with pytest.raises(TypeError):
    dp_sgd_noise_multiplier(1.0, 5, _SAMPLER)  # pylint: disable=too-many-function-args


def test_bad_update_raises():
  x, y = unit_ball_batch(12, 20, 3)
  tx = dp_sgd(n=20, batch_size=2, noise_multiplier=1.0, key=0)
  w = jnp.zeros(3)
  state = tx.init(w)
  with pytest.raises(TypeError, match="data"):
    tx.update(None, state, w)
  with pytest.raises(ValueError, match="n=20"):
    tx.update(None, state, w, data=(x[:10], y[:10]))
  with pytest.raises(ValueError, match="labels"):
    tx.update(None, state, w, data=(x, 2 * y))
  with pytest.raises(ValueError, match="shape"):
    tx.update(None, state, jnp.zeros(4), data=(x, y))
  with pytest.raises(TypeError, match="params"):
    tx.update(None, state, None, data=(x, y))
  with pytest.raises(TypeError, match="DPSGDState"):
    tx.update(None, (), w, data=(x, y))
  assert isinstance(state, DPSGDState)
  gen = dp_sgd(n=20, batch_size=2, noise_multiplier=1.0, loss=None, loss_fn=_logistic,
               learning_rate=1.0, key=0)
  with pytest.raises(ValueError, match="leading axis n=20"):
    gen.update(None, gen.init(w), w, data=(x, y[:10]))
