"""Tests for dpjax.transforms.dp_newton_minibatch: minibatch double-noise Newton (Ganesh et al., Fig. 4).

Kept cheap (CI runs the whole suite on 2 cores): XLA compilation dominates, so
each transform program is compiled once and shared (module-scoped fixtures),
the noise statistics come from one vmapped update over many keys, and only one
eager (un-jitted) step is run.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import Z_MAX, known_optima, scale_z, shared_data_file
import dpjax
from dpjax import accounting, data, training
from dpjax.mechanisms import sampling
from dpjax.problem import glm, solve, spectral
from dpjax.transforms import (
    DPNewtonMinibatchState,
    direction_sensitivity,
    dp_newton_minibatch,
    dp_newton_minibatch_step,
    minibatch_min_eigenvalue,
    minibatch_noise_multipliers,
    sampled_grad_and_curvature,
)


def rel(a, b):
  return abs(a - b) / abs(b)


def _jit_fast(fn):
  """``jax.jit(fn)``: one compiled program per call site (the file's runtime is compilation)."""
  return jax.jit(fn)


def _scan(tx, w0, x, y, steps, state0=None):
  """``steps`` updates from ``w0`` (traceable); returns (w, updates [steps, d], states [steps])."""
  def body(carry, _):
    w, state = carry
    u, state = tx.update(None, state, w, data=(x, y))
    return (optax.apply_updates(w, u), state), (u, state)

  state0 = tx.init(w0) if state0 is None else state0
  (w, _), (us, states) = jax.lax.scan(body, (w0, state0), None, length=steps)
  return w, us, states


# ----------------------------------------------------------------------------
# Sensitivity.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("b_h", [1, 7, 100, 2500])
@pytest.mark.parametrize("lam", [1e-4, 3e-3, 0.05, 2.0])
def test_sensitivity_formulas_match_spec(b_h, lam):
  # add: s = 1 / (4 B_H lam^2 + lam); clip: lam_c = max(lam, 1/B_H), s = 1/(4 B_H lam_c^2 - lam_c).
  lam_add = minibatch_min_eigenvalue(lam, curvature_batch_size=b_h, modification="add")
  assert lam_add == lam
  s_add = direction_sensitivity(lam_add, n=b_h, modification="add")
  assert rel(s_add, 1 / (4 * b_h * lam**2 + lam)) < 1e-13
  lam_c = minibatch_min_eigenvalue(lam, curvature_batch_size=b_h, modification="clip")
  assert lam_c == max(lam, 1 / b_h)
  s_clip = direction_sensitivity(lam_c, n=b_h, modification="clip")
  assert rel(s_clip, 1 / (4 * b_h * lam_c**2 - lam_c)) < 1e-13
  # The floor is 4 L1 / B_H for a general L1.
  assert minibatch_min_eigenvalue(lam, curvature_batch_size=b_h, curvature_norm_bound=1.0,
                                  modification="clip") == max(lam, 4 / b_h)


def _psi_solve(h, g, lam, modification):
  """Psi_lam(h)^{-1} g in float64 numpy (Definition 5.4)."""
  if modification == "add":
    return np.linalg.solve(h + lam * np.eye(h.shape[0]), g)
  evals, evecs = np.linalg.eigh(h)
  return evecs @ ((evecs.T @ g) / np.maximum(lam, evals))


def test_psi_solve_matches_spectral():
  rng = np.random.default_rng(1)
  a = rng.normal(size=(4, 4)) * 0.1
  h, g = a @ a.T, rng.normal(size=4)
  # lam = 0.02 lies inside h's spectrum, so clip and add differ; one compiled program for both.
  assert np.linalg.eigvalsh(h).min() < 0.02 < np.linalg.eigvalsh(h).max()
  both = _jit_fast(lambda h, g: [spectral.modified_solve(h, g, 0.02, m) for m in ("add", "clip")])
  got = both(jnp.asarray(h, jnp.float32), jnp.asarray(g, jnp.float32))
  for modification, out in zip(("add", "clip"), got):
    np.testing.assert_allclose(_psi_solve(h, g, 0.02, modification), out, rtol=2e-4)


@pytest.mark.parametrize("modification", ["add", "clip"])
def test_sensitivity_bounds_the_direction_change(modification):
  # ||Psi(H_S)^-1 g - Psi(H_S + c x x^T / B_H)^-1 g|| <= ||g|| s, on random and adversarial
  # rank-1 changes (c = 1/4, ||x|| = 1), at the clip floor lam_c = 1/B_H and above it.
  rng = np.random.default_rng(0)
  d, b_h = 6, 40
  worst = 0.0
  for lam in (1e-3, 0.05):
    lam = minibatch_min_eigenvalue(lam, curvature_batch_size=b_h, modification=modification)
    s = direction_sensitivity(lam, n=b_h, modification=modification)
    for _ in range(200):
      a = rng.normal(size=(d, 3)) * rng.uniform(0, 0.3)
      h = a @ a.T / 3
      v = np.linalg.eigh(h)[1][:, rng.integers(d)] if rng.random() < 0.5 else rng.normal(size=d)
      v /= np.linalg.norm(v)
      h2 = h + 0.25 * np.outer(v, v) / b_h
      g = rng.normal(size=d)
      if modification == "clip":
        evals, evecs = np.linalg.eigh(h)
        if rng.random() < 0.5:  # place an eigenvalue just below lam: the steepest region.
          evals[0] = lam - 0.1 / b_h
          h = (evecs * evals) @ evecs.T
          v = evecs[:, 0]
          h2 = h + 0.25 * np.outer(v, v) / b_h
          g = evecs[:, 0]
      d1, d2 = _psi_solve(h, g, lam, modification), _psi_solve(h2, g, lam, modification)
      worst = max(worst, np.linalg.norm(d1 - d2) / (np.linalg.norm(g) * s))
  assert worst <= 1 + 1e-4
  assert worst > 0.1  # the bound is not vacuous on these cases.


def test_transform_uses_the_clip_floor_and_its_sensitivity():
  n, b_h = 500, 50
  tx = dp_newton_minibatch(n=n, batch_size=50, curvature_batch_size=b_h, min_eigenvalue=1e-4,
                           noise_multiplier_grad=1.0, noise_multiplier_hess=1.0, key=0)
  state = tx.init(jnp.zeros(3))
  assert float(state.min_eigenvalue) == pytest.approx(1 / b_h, rel=1e-7)
  assert float(state.grad_noise_std) == pytest.approx(1.0 / 50, rel=1e-7)


# ----------------------------------------------------------------------------
# The sampled gradient and curvature.
# ----------------------------------------------------------------------------


def _batch(seed, n, d):
  x, y = data.synthetic(seed, n=n, d=d)
  return jnp.asarray(x), jnp.asarray(y)


def test_masked_slots_contribute_exactly_zero():
  n, d, cap = 60, 5, 12
  x, y = _batch(1, n, d)
  w = jnp.asarray(np.random.default_rng(0).normal(size=d), jnp.float32)
  idx = jnp.arange(cap) * 3
  mask = jnp.arange(cap) < 7
  curvatures = ("hessian", "qu")

  @_jit_fast
  def fn(w, x, idx, mask):  # both curvatures in one compiled program: [(g, H_S), (g, H_S)].
    return [sampled_grad_and_curvature(w, x, y, (idx, mask), (idx, mask), batch_size=10.0,
                                       curvature_batch_size=9.0, curvature=c) for c in curvatures]

  out = fn(w, x, idx, mask)
  # Masked slots pointing at other rows (or at a NaN row) change nothing, bit for bit.
  x_bad = x.at[n - 1].set(jnp.nan)
  idx2 = jnp.where(mask, idx, jnp.arange(cap) + 40).at[-1].set(n - 1)
  out2 = fn(w, x_bad, idx2, mask)
  # An empty sample gives exactly zero.
  out0 = fn(w, x, idx, jnp.zeros(cap, bool))
  # Against a float64 reference on the included rows, normalised by the expected sizes.
  xs = np.asarray(x, np.float64)[np.asarray(idx)[:7]]
  ys = np.asarray(y, np.float64)[np.asarray(idx)[:7]]
  m = xs @ np.asarray(w, np.float64)
  g_ref = (-ys / (1 + np.exp(ys * m))) @ xs / 10.0
  for curvature, (g, h), (g2, h2), (g0, h0) in zip(curvatures, out, out2, out0):
    np.testing.assert_array_equal(g, g2)
    np.testing.assert_array_equal(h, h2)
    assert not np.any(np.asarray(g0)) and not np.any(np.asarray(h0))
    # sigmoid(m) sigmoid(-m), or tanh(m/2) / (2m) (m != 0 here).
    c = 0.25 / np.cosh(m / 2) ** 2 if curvature == "hessian" else np.tanh(m / 2) / (2 * m)
    h_ref = (xs * c[:, None]).T @ xs / 9.0
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-7)
  assert not np.allclose(out[0][1], out[1][1])  # the two curvatures differ at this w.


def test_gradient_is_clipped_and_rows_scaled_into_the_ball():
  x = jnp.array([[3.0, 4.0], [0.0, 0.5]])  # row 0 has norm 5: scaled to norm 1 in-graph.
  y = jnp.array([1.0, -1.0])
  sample = (jnp.array([0, 1]), jnp.array([True, True]))
  g, h = _jit_fast(lambda w, x: sampled_grad_and_curvature(
      w, x, y, sample, sample, batch_size=1.0, curvature_batch_size=1.0,
      grad_norm_bound=0.1))(jnp.zeros(2), x)
  x_in = np.array([[0.6, 0.8], [0.0, 0.5]])
  np.testing.assert_allclose(g, 0.1 * (-x_in[0]) + 0.1 * x_in[1] / 0.5, rtol=1e-6)
  np.testing.assert_allclose(h, 0.25 * x_in.T @ x_in, rtol=1e-6)
  assert np.linalg.eigvalsh(np.asarray(h)).max() <= 2 * 0.25 + 1e-6


# ----------------------------------------------------------------------------
# Noise scales (statistical) and accounting.
# ----------------------------------------------------------------------------

_DRAWS = 2000  # independent one-step draws, one key each, in one vmapped call.
# Zero features: g = 0 and H_S = 0, so Psi_lam(H_S) = lam I and the output is
# -(g~ / lam + ||g~|| s z_H xi), g~ ~ N(0, (z_g / B_g)^2 I). (z_g, z_H, lam, modification):
_NOISE = {
    "grad": (2.0, 0.05, 0.5, "add"),  # direction noise variance ~1e-5 of the total.
    "add": (2.0, 1.5, 0.03, "add"),  # the two parts of the variance are comparable.
    "clip": (2.0, 1.5, 0.03, "clip"),  # lam = 0.03 is below the floor 1/B_H = 0.05.
}
_NOISE_N, _NOISE_D, _NOISE_B = 200, 6, 20
# Real data for the eager/jit/vmap agreement (same n and B, so the sampling is shared).
_AGREE = (1.0, 2.0, 0.05, "clip")


def _one_step(key, x, y, w, z_g, z_h, lam, modification):
  """One update from init of a transform built for ``key`` (traced under vmap, or concrete)."""
  tx = dp_newton_minibatch(n=_NOISE_N, batch_size=_NOISE_B, curvature_batch_size=_NOISE_B,
                           min_eigenvalue=lam, modification=modification,
                           noise_multiplier_grad=z_g, noise_multiplier_hess=z_h, key=key)
  return tx.update(None, tx.init(w), w, data=(x, y))


@pytest.fixture(scope="module")
def one_step_draws():
  """One step for each of ``_DRAWS`` keys, for every config (one compiled program per config).

  ``{name: (u [draws, d], state [draws])}`` for the ``_NOISE`` configs (zero features) and
  "agree" (``_AGREE`` on real data); also the keys and the real data.
  """
  n, d = _NOISE_N, _NOISE_D
  zeros = (jnp.zeros((n, d), jnp.float32),
           jnp.where(jnp.arange(n) % 2 == 0, 1.0, -1.0).astype(jnp.float32), jnp.zeros(d))
  x, y = _batch(3, n, d)
  real = (x, y, jnp.linspace(-0.5, 0.5, d))
  configs = {**{name: (zeros, c) for name, c in _NOISE.items()}, "agree": (real, _AGREE)}
  keys = jax.random.split(jax.random.key(3), _DRAWS)
  # One compiled program per config, run one after the other: several independent batched
  # eigh/Cholesky kernels in ONE program may run concurrently on XLA:CPU, and that deadlocked a
  # 2-core test worker (killed by the suite's timeout after 900 s).
  out = {name: _jit_fast(lambda keys, a=args, c=c: jax.vmap(lambda k: _one_step(k, *a, *c))(keys))(keys)
         for name, (args, c) in configs.items()}
  return dict(out, keys=keys, real=real)


def _noise(draws, name):
  """(u [draws, d], direction_noise_std [draws]) in float64."""
  u, state = draws[name]
  return np.asarray(u, np.float64), np.asarray(state.direction_noise_std, np.float64)


def test_gradient_noise_std(one_step_draws):
  z_g, _, lam, _ = _NOISE["grad"]
  u, _ = _noise(one_step_draws, "grad")
  sigma = z_g / _NOISE_B
  assert abs(scale_z(u, (sigma / lam) ** 2)) < Z_MAX
  # The test has the power to reject a std 10% off either way.
  for wrong in (1.1, 1 / 1.1):
    assert abs(scale_z(u, (wrong * sigma / lam) ** 2)) > Z_MAX


def _mean_one_z(q):
  """z-score of H0: E[q] = 1 over independent q (CLT, empirical standard error)."""
  return (q.mean() - 1.0) / (q.std(ddof=1) / np.sqrt(q.size))


@pytest.mark.parametrize("modification", ["add", "clip"])
def test_direction_noise_std(modification, one_step_draws):
  z_g, z_h, lam, _ = _NOISE[modification]
  u, dir_std = _noise(one_step_draws, modification)
  b, d = _NOISE_B, _NOISE_D
  lam_u = minibatch_min_eigenvalue(lam, curvature_batch_size=b, modification=modification)
  s = direction_sensitivity(lam_u, n=b, modification=modification)
  sigma = z_g / b
  # dir_std = ||g~|| s z_H with E ||g~||^2 = d sigma^2.
  g_norm2 = (dir_std / (s * z_h)) ** 2
  assert abs(scale_z(dir_std / (s * z_h), d * sigma**2)) < Z_MAX
  # Total per-coordinate variance of the output.
  var = sigma**2 / lam_u**2 + (s * z_h) ** 2 * d * sigma**2
  assert abs(scale_z(u, var)) < Z_MAX
  # The direction noise given g~: ||u||^2 = ||g~||^2 / lam^2 + 2 dir_std <g~, xi> / lam
  # + dir_std^2 ||xi||^2, so (||u||^2 - ||g~||^2 / lam^2) / (d dir_std^2) has mean 1.
  def direction_z(std_factor):
    return _mean_one_z((np.sum(u**2, 1) - g_norm2 / lam_u**2) / (d * (std_factor * dir_std) ** 2))

  assert abs(direction_z(1.0)) < Z_MAX
  # The tests have the power to reject a std 10% off either way, in each part.
  for wrong in (1.1, 1 / 1.1):
    assert abs(scale_z(dir_std / (s * z_h), wrong**2 * d * sigma**2)) > Z_MAX
    assert abs(scale_z(u, wrong**2 * var)) > Z_MAX
    assert abs(direction_z(wrong)) > Z_MAX


# One calibrated private run on synthetic data, shared by the convergence, accounting,
# budget-gate and eager/jit tests: two keys, vmapped, `steps + 1` steps (the last one past
# the budget), and the same run without noise, in ONE compiled program.
_SYN = dict(n=10_000, d=20, batch_size=1000, curvature_batch_size=500, min_eigenvalue=0.05,
            epsilon=1.0, steps=10)


def _syn_tx(**kw):
  c = _SYN
  return dp_newton_minibatch(n=c["n"], batch_size=c["batch_size"],
                             curvature_batch_size=c["curvature_batch_size"],
                             min_eigenvalue=c["min_eigenvalue"], epsilon=c["epsilon"],
                             delta=c["n"] ** -2.0, steps=c["steps"], key=0, **kw)


@pytest.fixture(scope="module")
def synthetic():
  c = _SYN
  x, y = _batch(0, c["n"], c["d"])
  loss_star, _ = training.optimum_loss(x, y)
  tx, tx_noiseless = _syn_tx(), _syn_tx(disable_noise_for_testing=True)
  w0 = jnp.zeros(c["d"])
  keys = jnp.stack([tx.init(w0).key, jax.random.key(1)])  # key 0 is the transform's own.

  @_jit_fast
  def run(keys):
    private = jax.vmap(lambda key: _scan(tx, w0, x, y, c["steps"] + 1,
                                         tx.init(w0)._replace(key=key)))(keys)
    # The same samples as key 0 (the same key), no noise.
    noiseless = _scan(tx_noiseless, w0, x, y, c["steps"])[0]
    return private, noiseless

  (w, us, states), w_noiseless = run(keys)
  return dict(x=x, y=y, loss_star=loss_star, tx=tx, w0=w0, w=w, us=us, states=states,
              w_noiseless=w_noiseless)


def _at(states, k, t):
  """The state of key ``k`` after step ``t + 1`` (0-based index into the scan outputs)."""
  return jax.tree.map(lambda a: a[k, t], states)


def test_calibrated_epsilon_is_spent(synthetic):
  c, steps = _SYN, _SYN["steps"]
  delta = c["n"] ** -2.0
  state = _at(synthetic["states"], 0, steps - 1)
  assert int(state.count) == steps
  eps = accounting.epsilon_spent(state.accountant, delta)
  assert rel(eps, c["epsilon"]) < 2e-3
  assert eps <= c["epsilon"] * (1 + 1e-9)
  # Both subsampled Gaussians, with the calibrated common multiplier, were charged every step.
  z = float(state.grad_noise_std) * c["batch_size"]
  assert (z, z) == pytest.approx(minibatch_noise_multipliers(
      n=c["n"], batch_size=c["batch_size"], curvature_batch_size=c["curvature_batch_size"],
      epsilon=c["epsilon"], delta=delta, steps=steps), rel=1e-6)
  q_g, q_h = c["batch_size"] / c["n"], c["curvature_batch_size"] / c["n"]
  rdp = steps * (accounting.subsampled_gaussian_rdp(q_g, z)
                 + accounting.subsampled_gaussian_rdp(q_h, z))
  np.testing.assert_allclose(accounting.spent_rdp(state.accountant), rdp, rtol=1e-5)
  # Both samples' truncation slack, every step.
  p = sum(sampling.poisson_sampler(c["n"], batch_size=b).overflow_prob
          for b in (c["batch_size"], c["curvature_batch_size"]))
  assert p > 0
  np.testing.assert_allclose(accounting.spent_truncation(state.accountant), steps * p, rtol=1e-6)
  assert accounting.spent_truncation(state.accountant) >= steps * p
  # Key 1 spent the same.
  np.testing.assert_array_equal(_at(synthetic["states"], 1, steps - 1).accountant.rdp,
                                state.accountant.rdp)


def test_epsilon_matches_dp_accounting(synthetic):
  dp_accounting = pytest.importorskip("dp_accounting")
  c, steps = _SYN, _SYN["steps"]
  state = _at(synthetic["states"], 0, steps - 1)
  z = float(state.grad_noise_std) * c["batch_size"]
  q_g, q_h = c["batch_size"] / c["n"], c["curvature_batch_size"] / c["n"]
  event = dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent([
      dp_accounting.PoissonSampledDpEvent(q_g, dp_accounting.GaussianDpEvent(z)),
      dp_accounting.PoissonSampledDpEvent(q_h, dp_accounting.GaussianDpEvent(z))]), steps)
  acct = dp_accounting.rdp.RdpAccountant(list(accounting.RDP_ORDERS))
  acct.compose(event)
  delta = c["n"] ** -2.0
  assert rel(accounting.epsilon_spent(state.accountant, delta), acct.get_epsilon(delta)) < 1e-3


def test_budget_gate_refuses_past_steps(synthetic):
  steps = _SYN["steps"]
  states, us = synthetic["states"], synthetic["us"]
  for k in range(2):
    last, past = _at(states, k, steps - 1), _at(states, k, steps)
    assert not bool(last.budget_exhausted) and np.any(np.asarray(us[k, steps - 1]))
    # Traced gate (inside the jitted scan): zeros, no charge, count kept, flag set.
    assert not np.any(np.asarray(us[k, steps])) and bool(past.budget_exhausted)
    assert int(past.count) == steps
    np.testing.assert_array_equal(past.accountant.rdp, last.accountant.rdp)
    np.testing.assert_array_equal(past.accountant.truncation, last.accountant.truncation)
  # Eager gate: raises.
  tx = synthetic["tx"]
  with pytest.raises(ValueError, match="budget exhausted"):
    tx.update(None, _at(states, 0, steps - 1), synthetic["w"][0],
              data=(synthetic["x"], synthetic["y"]))


def test_eager_jit_and_vmapped_keys_agree(one_step_draws):
  # One eager step (no jit, concrete key) equals the jitted, vmapped step for that key.
  keys, (x, y, w) = one_step_draws["keys"], one_step_draws["real"]
  us, states = one_step_draws["agree"]
  u, state = _one_step(keys[0], x, y, w, *_AGREE)
  jitted = jax.tree.map(lambda a: a[0], states)
  assert np.any(np.asarray(u))
  np.testing.assert_allclose(u, us[0], rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(state.direction_noise_std, jitted.direction_noise_std, rtol=2e-5)
  np.testing.assert_array_equal(state.accountant.rdp, jitted.accountant.rdp)
  assert int(state.count) == int(jitted.count) == 1
  np.testing.assert_array_equal(jax.random.key_data(state.key), jax.random.key_data(jitted.key))
  # Fresh samples and noise per key.
  assert not np.allclose(us[0], us[1])


# ----------------------------------------------------------------------------
# dp_newton_minibatch_step: the update's body, with traceable lambda and noise.
# ----------------------------------------------------------------------------

_STEP_N, _STEP_D, _STEP_BG, _STEP_BH = 300, 6, 30, 45


def _step_case(lam=0.05, z_g=1.3, z_h=0.9, modification="clip", curvature="hessian"):
  """``(tx, args, kwargs)``: a transform and the step's arguments (the values it uses)."""
  x, y = _batch(0, _STEP_N, _STEP_D)
  key = jax.random.key(3)
  tx = dp_newton_minibatch(n=_STEP_N, batch_size=_STEP_BG, curvature_batch_size=_STEP_BH,
                           min_eigenvalue=lam, noise_multiplier_grad=z_g,
                           noise_multiplier_hess=z_h, key=key, modification=modification,
                           curvature=curvature)
  lam_c = minibatch_min_eigenvalue(lam, curvature_batch_size=_STEP_BH, modification=modification)
  sens = direction_sensitivity(lam_c, n=_STEP_BH, modification=modification)
  w = jnp.linspace(-1.0, 1.0, _STEP_D)
  kwargs = dict(grad_sampler=sampling.poisson_sampler(_STEP_N, batch_size=_STEP_BG),
                curvature_sampler=sampling.poisson_sampler(_STEP_N, batch_size=_STEP_BH),
                batch_size=_STEP_BG, curvature_batch_size=_STEP_BH,
                modification=modification, curvature=curvature)
  return tx, (w, key, (x, y), lam_c, z_g / _STEP_BG, sens, z_h), kwargs


@pytest.mark.parametrize("modification, curvature, jit", [
    ("clip", "hessian", False), ("add", "qu", True)])
def test_step_is_the_update_bit_for_bit(modification, curvature, jit):
  tx, args, kwargs = _step_case(lam=0.002, modification=modification, curvature=curvature)
  run = jax.jit if jit else (lambda f: f)
  w, key, xy = args[:3]
  u, state = run(lambda w, s: tx.update(None, s, w, data=xy))(w, tx.init(w))
  u2, new_key, dir_std = run(lambda w, k: dp_newton_minibatch_step(w, k, *args[2:], **kwargs))(
      w, key)
  np.testing.assert_array_equal(u2, u)
  assert np.any(np.asarray(u) != 0)
  np.testing.assert_array_equal(dir_std, state.direction_noise_std)
  np.testing.assert_array_equal(jax.random.key_data(new_key), jax.random.key_data(state.key))
  assert float(state.min_eigenvalue) == pytest.approx(float(args[3]))


def test_step_takes_traced_hyper_parameters_under_jit_and_vmap():
  grid = [(0.002, 1.3, 0.9), (0.05, 0.7, 1.1)]  # (lambda, z_g, z_H); 0.002 < the clip floor.
  refs, hypers = [], []
  for lam, z_g, z_h in grid:
    tx, args, kwargs = _step_case(lam, z_g, z_h)
    w, key, xy = args[:3]
    refs.append(jax.jit(lambda w, s, tx=tx: tx.update(None, s, w, data=xy))(w, tx.init(w))[0])
    hypers.append(args[3:])
  step = lambda *h: dp_newton_minibatch_step(w, key, xy, *h, **kwargs)[0]
  traced = jax.jit(step)
  for h, ref in zip(hypers, refs):
    np.testing.assert_array_equal(traced(*(jnp.float32(v) for v in h)), ref)
  batched = jax.jit(jax.vmap(step))(*(jnp.array(v, jnp.float32) for v in zip(*hypers)))
  np.testing.assert_array_equal(batched, jnp.stack(refs))
  assert not np.allclose(refs[0], refs[1])


@pytest.mark.parametrize("change, error, match", [
    (dict(grad_sampler=(300, 0.1)), TypeError, "grad_sampler must be a PoissonSampler"),
    (dict(batch_size=31), ValueError, "batch_size=31.0 is not the expected size"),
    (dict(curvature_batch_size=0), ValueError, "curvature_batch_size must be > 0"),
    (dict(curvature_sampler=sampling.poisson_sampler(200, batch_size=45)), ValueError,
     "both sample the same n"),
    (dict(grad_norm_bound=-1.0), ValueError, "grad_norm_bound must be > 0"),
    (dict(modification="shift"), ValueError, "modification must be one of"),
    (dict(curvature="newton"), ValueError, "curvature must be one of"),
    (dict(exact="yes"), TypeError, "exact must be True or False"),
])
def test_step_rejects_bad_static_arguments(change, error, match):
  _, args, kwargs = _step_case()
  with pytest.raises(error, match=match):
    dp_newton_minibatch_step(*args, **{**kwargs, **change})


def test_step_rejects_misshaped_params_and_data():
  _, (w, key, (x, y), *hypers), kwargs = _step_case()
  with pytest.raises(ValueError, match="params must be a vector"):
    dp_newton_minibatch_step(w[None], key, (x, y), *hypers, **kwargs)
  with pytest.raises(TypeError, match="data must be a pair"):
    dp_newton_minibatch_step(w, key, x, *hypers, **kwargs)
  with pytest.raises(ValueError, match=r"must be \(300, 6\) and \(300,\)"):
    dp_newton_minibatch_step(w, key, (x[:, :5], y), *hypers, **kwargs)


# ----------------------------------------------------------------------------
# Convergence.
# ----------------------------------------------------------------------------


def test_noiseless_full_sample_converges_to_optimum(x64):
  # q = 1 (B = n) and no noise: the modified Newton method on the full data, for
  # (hessian, clip) and (qu, add), both in one compiled program.
  n, d = 600, 5
  x, y = data.synthetic(2, n=n, d=d, dtype=np.float64)
  configs = [("hessian", "clip"), ("qu", "add")]
  txs = [dp_newton_minibatch(n=n, batch_size=n, curvature_batch_size=n, min_eigenvalue=1e-6,
                             curvature=curvature, modification=modification, grad_cap=n,
                             curvature_cap=n, noise_multiplier_grad=1.0,
                             noise_multiplier_hess=1.0, key=0, disable_noise_for_testing=True)
         for curvature, modification in configs]
  ws = _jit_fast(lambda w0, x, y: [_scan(tx, w0, x, y, 12)[0] for tx in txs])(
      jnp.zeros(d), jnp.asarray(x), jnp.asarray(y))
  w_star, loss_star = solve.logistic_optimum(x, y)
  for config, w in zip(configs, ws):
    assert w.dtype == jnp.float64
    assert float(glm.logistic_loss(w, x, y)) - loss_star < 1e-12, config
    np.testing.assert_allclose(w, w_star, atol=1e-5, err_msg=str(config))


def test_private_converges_on_synthetic(synthetic):
  c = _SYN
  x, y, loss_star = synthetic["x"], synthetic["y"], synthetic["loss_star"]
  loss0 = float(glm.logistic_loss(synthetic["w0"], x, y)) - loss_star
  for w in synthetic["w"]:  # both keys.
    excess = float(glm.logistic_loss(w, x, y)) - loss_star
    assert excess < 0.08 * loss0, (excess, loss0)
  # No noise, same samples (key 0): the stochastic Newton iterate is closer still.
  w_noiseless = synthetic["w_noiseless"]
  assert float(glm.logistic_loss(w_noiseless, x, y)) - loss_star < 0.04 * loss0


@pytest.fixture(scope="module")
def a1a():
  with pytest.warns(dpjax.PrivacyLeakWarning):  # the paper's (non-private) preprocessing
    x, y = data.load_libsvm(shared_data_file("a1a.t.bz2"), n_features=123, preprocess="paper")
  with known_optima():  # its float64 optimum is test_solve.py::test_real_a1a_t's
    loss_star, _ = training.optimum_loss(x, y)
  return jnp.asarray(x), jnp.asarray(y), loss_star


def test_private_converges_on_a1a(a1a):
  x, y, loss_star = a1a
  n, d = x.shape
  loss0 = float(glm.logistic_loss(jnp.zeros(d), x, y)) - loss_star
  tx = dp_newton_minibatch(n=n, batch_size=3000, curvature_batch_size=3000, min_eigenvalue=0.02,
                           epsilon=5.0, delta=float(n) ** -2, steps=15, key=0)
  w = _jit_fast(lambda w0: _scan(tx, w0, x, y, 15)[0])(jnp.zeros(d))
  excess = float(glm.logistic_loss(w, x, y)) - loss_star
  assert excess < 0.2 * loss0, (excess, loss0)


# ----------------------------------------------------------------------------
# Bad input.
# ----------------------------------------------------------------------------

_OK = dict(n=100, batch_size=10, curvature_batch_size=10, min_eigenvalue=0.1,
           noise_multiplier_grad=1.0, noise_multiplier_hess=1.0, key=0)


@pytest.mark.parametrize("change,error,match", [
    (dict(batch_size=101), ValueError, "batch_size=101 exceeds n=100"),
    (dict(curvature_batch_size=200), ValueError, "curvature_batch_size=200 exceeds"),
    (dict(batch_size=0), ValueError, "batch_size must be >= 1"),
    (dict(curvature_batch_size=2.5), TypeError, "curvature_batch_size must be an integer"),
    (dict(min_eigenvalue=0.0), ValueError, "min_eigenvalue must be > 0"),
    (dict(min_eigenvalue=-1.0, modification="clip"), ValueError, "min_eigenvalue must be > 0"),
    (dict(min_eigenvalue=None), TypeError, "min_eigenvalue must be a real number"),
    (dict(noise_multiplier_grad=0.0), ValueError, "noise_multiplier_grad must be > 0"),
    (dict(noise_multiplier_hess=None), ValueError, "pass both noise_multiplier_grad"),
    (dict(epsilon=1.0), ValueError, "exactly one budget form"),
    (dict(noise_multiplier_grad=None, noise_multiplier_hess=None), ValueError,
     "no privacy budget"),
    (dict(noise_multiplier_grad=None, noise_multiplier_hess=None, epsilon=1.0, delta=1e-4),
     ValueError, "needs delta= and steps="),
    (dict(noise_multiplier_grad=None, noise_multiplier_hess=None, epsilon=1.0, delta=1.5,
          steps=3), ValueError, "delta must be in the open interval"),
    (dict(noise_multiplier_grad=None, noise_multiplier_hess=None, epsilon=-1.0, delta=1e-4,
          steps=3), ValueError, "epsilon must be > 0"),
    (dict(curvature="newton"), ValueError, "curvature must be one of"),
    (dict(modification="shift"), ValueError, "modification must be one of"),
    (dict(curvature_norm_bound=0.1), ValueError, "below 1/4"),
    (dict(grad_norm_bound=0.0), ValueError, "grad_norm_bound must be > 0"),
    (dict(grad_cap=0), ValueError, "grad_cap must be >= 1"),
    (dict(overflow_prob=1.0), ValueError, "overflow_prob must be in the open interval"),
    (dict(key=None), TypeError, "key must be an int seed"),
    (dict(disable_noise_for_testing=1), TypeError, "disable_noise_for_testing must be True"),
])
def test_constructor_rejects_bad_input(change, error, match):
  with pytest.raises(error, match=match):
    dp_newton_minibatch(**{**_OK, **change})


def test_update_rejects_bad_calls():
  tx = dp_newton_minibatch(**_OK)
  x, y = _batch(0, 100, 3)
  w = jnp.zeros(3)
  state = tx.init(w)
  with pytest.raises(TypeError, match="updates=None"):
    tx.update(jnp.zeros(3), state, w, data=(x, y))
  with pytest.raises(TypeError, match="needs the full data set"):
    tx.update(None, state, w)
  with pytest.raises(TypeError, match="needs params"):
    tx.update(None, state, None, data=(x, y))
  with pytest.raises(ValueError, match=r"must be \(100, 3\)"):
    tx.update(None, state, w, data=(x[:50], y[:50]))
  with pytest.raises(ValueError, match="labels -1 and \\+1"):
    tx.update(None, state, w, data=(x, jnp.zeros(100)))
  with pytest.raises(ValueError, match="L2 norm"):
    tx.update(None, state, w, data=(2 * x, y))
  with pytest.raises(TypeError, match="DPNewtonMinibatchState"):
    tx.update(None, (), w, data=(x, y))


def test_state_fields_and_rho_lookup():
  tx = dp_newton_minibatch(**_OK)
  state = tx.init(jnp.zeros(3))
  assert isinstance(state, DPNewtonMinibatchState)
  assert state._fields == ("count", "key", "accountant", "min_eigenvalue", "grad_noise_std",
                           "direction_noise_std", "budget_exhausted")
  assert float(optax.tree.get(state, "rho")) == 0.0


def test_default_caps_keep_the_truncation_slack_small_at_large_epsilon():
  # (1 + e^10) * 400 steps * 1e-15 would exceed delta = n^-2; the default caps tighten.
  n = 30_000
  z_g, z_h = minibatch_noise_multipliers(n=n, batch_size=300, curvature_batch_size=300,
                                         epsilon=10.0, delta=float(n) ** -2, steps=400)
  assert 0 < z_g == z_h
  # Explicit caps are used as given: a cap with a large overflow slack is refused.
  with pytest.raises(ValueError, match="overflow slack"):
    minibatch_noise_multipliers(n=n, batch_size=300, curvature_batch_size=300, epsilon=10.0,
                                delta=float(n) ** -2, steps=400, grad_cap=320)
