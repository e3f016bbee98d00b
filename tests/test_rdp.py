"""Tests for the RDP half of dpjax.accounting: the Poisson-subsampled Gaussian curve,
the accountant's RDP fields, the conversion with a truncation slack, and calibration."""

from __future__ import annotations

import logging
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import maybe_jit
from dpjax import accounting
from dpjax.accounting import (
    RDP_ORDERS,
    calibrate_noise_multiplier,
    charge,
    charge_rdp,
    epsilon_spent,
    init_accountant,
    rdp_to_epsilon,
    spent_rdp,
    spent_rho,
    spent_truncation,
    subsampled_gaussian_rdp,
    zcdp_to_epsilon,
)

special = pytest.importorskip("scipy.special")
dpa = pytest.importorskip("dp_accounting")
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp  # noqa: E402

ORDERS = np.asarray(RDP_ORDERS)
INTEGER = np.array([a.is_integer() for a in RDP_ORDERS])
QS = (0.001, 0.01, 0.1)
ZS = (0.6, 1.0, 2.0)
STEPS = (1, 10, 100, 1000, 10_000)
DELTA = 1e-5


@pytest.fixture(autouse=True, scope="module")
def _quiet_dp_accounting():
  # dp-accounting logs a warning for every fractional order its series cannot sum.
  logging.disable(logging.WARNING)
  yield
  logging.disable(logging.NOTSET)


def _log_erfc(x):
  return math.log(2.0) + special.log_ndtr(-x * math.sqrt(2.0))


def _mtz_series_rdp(q, z, alpha, terms=8000):
  """Test oracle: the two-series formula of Mironov, Talwar & Zhang (2019, Sec. 3.3)
  with SIGNED generalized binomial coefficients (scipy), summed exactly (fsum)."""
  i = np.arange(terms, dtype=np.float64)
  j = alpha - i
  log_abs_binom = special.gammaln(alpha + 1) - special.gammaln(i + 1) - special.gammaln(j + 1)
  sign = special.gammasgn(j + 1)
  z0 = z * z * math.log(1 / q - 1) + 0.5
  log_s0 = (log_abs_binom + i * math.log(q) + j * math.log1p(-q) + (i * i - i) / (2 * z * z)
            + math.log(0.5) + _log_erfc((i - z0) / (math.sqrt(2) * z)))
  log_s1 = (log_abs_binom + j * math.log(q) + i * math.log1p(-q) + (j * j - j) / (2 * z * z)
            + math.log(0.5) + _log_erfc((z0 - j) / (math.sqrt(2) * z)))
  a = math.fsum(np.concatenate([sign * np.exp(log_s0), sign * np.exp(log_s1)]))
  return math.log(a) / (alpha - 1)


@pytest.fixture(scope="module")
def curves():
  """Per-step curves, computed once: ours, dp-accounting's, and the series oracle."""
  out = {}
  for q in QS:
    for z in ZS:
      ours = subsampled_gaussian_rdp(q, z)
      theirs = dpa_rdp._compute_rdp_poisson_subsampled_gaussian(q, z, RDP_ORDERS)
      oracle = np.array(theirs, np.float64)  # integer orders: dp-accounting's exact sum
      for k in np.flatnonzero(~INTEGER):
        oracle[k] = _mtz_series_rdp(q, z, RDP_ORDERS[k])
      out[q, z] = (ours, np.asarray(theirs, np.float64), oracle)
  return out


# ----------------------------------------------------------------------------
# The per-step curve.
# ----------------------------------------------------------------------------


def test_order_grid():
  assert 40 <= len(RDP_ORDERS) <= 80
  assert RDP_ORDERS[0] == 1.25 and RDP_ORDERS[-1] == 1024.0
  assert all(b > a for a, b in zip(RDP_ORDERS, RDP_ORDERS[1:]))
  assert max(b / a for a, b in zip(RDP_ORDERS[15:], RDP_ORDERS[16:])) <= 1.15


def test_curve_matches_dp_accounting_and_series_oracle(curves):
  worst_int = worst_frac = 0.0
  for (q, z), (ours, theirs, oracle) in curves.items():
    # Integer orders: the same exact binomial sum as dp-accounting.
    rel = np.abs(ours[INTEGER] / theirs[INTEGER] - 1)
    worst_int = max(worst_int, rel.max())
    # Fractional orders: the signed MTZ series; dp-accounting sums |terms| (an
    # upper bound, or inf when 1000 terms do not converge), so it is never below.
    rel = np.abs(ours[~INTEGER] / oracle[~INTEGER] - 1)
    worst_frac = max(worst_frac, rel.max())
    assert np.all(ours[~INTEGER] <= theirs[~INTEGER] * (1 + 1e-12)), (q, z)
  assert worst_int < 1e-9, worst_int
  assert worst_frac < 1e-8, worst_frac


def test_q_one_is_the_gaussian():
  for z in (0.3, 1.0, 7.5):
    np.testing.assert_array_equal(subsampled_gaussian_rdp(1.0, z), ORDERS / (2 * z * z))


def test_fractional_path_agrees_with_integer_sum():
  # The quadrature (used for fractional orders) and the binomial sum are
  # independent methods; at integer orders they must agree.
  for q in (1e-6, 1e-3, 0.5, 0.999):
    for z in (0.3, 1.0, 100.0):
      for alpha in (2, 7, 64, 1024):
        lam_int = accounting._log_a_minus_1_int(q, z, alpha)
        lam_quad = accounting._log_a_minus_1_quad(q, z, float(alpha))
        assert abs(lam_quad - lam_int) <= 1e-9 * max(1.0, abs(lam_int)), (q, z, alpha)


def test_curve_stable_and_monotone_on_the_whole_range():
  grid = {}
  for q in (1e-6, 1e-3, 0.3, 1.0):
    for z in (0.3, 3.0, 100.0):
      r = subsampled_gaussian_rdp(q, z)
      assert np.all(np.isfinite(r)) and np.all(r > 0), (q, z)
      assert np.all(np.diff(r) >= -1e-12 * r[1:]), (q, z)  # nondecreasing in the order
      grid[q, z] = r
  for z in (0.3, 3.0, 100.0):  # nondecreasing in q
    for lo, hi in ((1e-6, 1e-3), (1e-3, 0.3), (0.3, 1.0)):
      assert np.all(grid[lo, z] <= grid[hi, z] * (1 + 1e-12))
  for q in (1e-6, 1e-3, 0.3, 1.0):  # nonincreasing in z
    assert np.all(grid[q, 100.0] <= grid[q, 3.0]) and np.all(grid[q, 3.0] <= grid[q, 0.3])
  # Tiny q, large z: A - 1 ~ C(alpha, 2) q^2 (e^{1/z^2} - 1) is kept to full
  # relative accuracy (a plain log-sum-exp would return ~1e-16 noise here).
  small = ORDERS <= 64
  expected = 0.5 * ORDERS * 1e-12 * math.expm1(1e-4)
  np.testing.assert_allclose(grid[1e-6, 100.0][small], expected[small], rtol=1e-4)


def test_curve_bad_input():
  for bad in (0.0, -0.1, 1.5, math.nan):
    with pytest.raises(ValueError, match=r"sampling_rate must"):
      subsampled_gaussian_rdp(bad, 1.0)
  with pytest.raises(ValueError, match=r"noise_multiplier must be > 0"):
    subsampled_gaussian_rdp(0.1, 0.0)
  with pytest.raises(ValueError, match=r"noise_multiplier must be finite"):
    subsampled_gaussian_rdp(0.1, math.inf)
  with pytest.raises(TypeError, match=r"sampling_rate must be a real number"):
    subsampled_gaussian_rdp("0.1", 1.0)
  with pytest.raises(ValueError, match=r"orders must be finite Renyi orders > 1"):
    subsampled_gaussian_rdp(0.1, 1.0, orders=[1.0, 2.0])
  with pytest.raises(ValueError, match=r"orders must be a non-empty 1-d"):
    subsampled_gaussian_rdp(0.1, 1.0, orders=[])
  with pytest.raises(TypeError, match=r"orders must be a sequence"):
    subsampled_gaussian_rdp(0.1, 1.0, orders="2")


# ----------------------------------------------------------------------------
# Epsilon after `steps` in-graph charges vs dp-accounting.
# ----------------------------------------------------------------------------


@jax.jit
def _charge_many(vectors, steps):
  """vmap over privacy levels: traced float32 per-step curves, charged `steps` times."""

  def one(vec):
    return jax.lax.fori_loop(0, steps, lambda _, s: charge_rdp(s, vec), init_accountant())

  return jax.vmap(one)(vectors)


def test_epsilon_matches_dp_accounting(curves):
  keys = list(curves)
  vectors = jnp.asarray(np.stack([curves[k][0] for k in keys]), jnp.float32)
  vec32 = np.asarray(vectors, np.float64)  # what the traced charges add, exactly
  worst_oracle = worst_grid = 0.0
  for steps in STEPS:
    states = _charge_many(vectors, steps)
    assert states.rdp.shape == (len(keys), len(RDP_ORDERS))
    np.testing.assert_allclose(spent_rdp(states), steps * vec32, rtol=1e-13)
    eps = epsilon_spent(states, DELTA)
    assert eps.shape == (len(keys),)
    for b, (q, z) in enumerate(keys):
      ours, theirs, oracle = curves[q, z]
      # dp-accounting's conversion on the exact curve (its integer orders, the
      # series oracle at fractional ones): what RdpAccountant returns once its
      # fractional orders are summed with signs.
      ref, _ = dpa_rdp.compute_epsilon(RDP_ORDERS, steps * oracle, DELTA)
      worst_oracle = max(worst_oracle, abs(eps[b] / ref - 1))
      # dp-accounting's RdpAccountant itself (its own fractional-order bound):
      # ours is never above it, and equal where our optimal order is an integer.
      grid, _ = dpa_rdp.compute_epsilon(RDP_ORDERS, steps * theirs, DELTA)
      assert eps[b] <= grid * (1 + 1e-6), (q, z, steps)
      _, order = dpa_rdp.compute_epsilon(RDP_ORDERS, steps * vec32[b], DELTA)
      if float(order).is_integer():
        worst_grid = max(worst_grid, abs(eps[b] / grid - 1))
  assert worst_oracle < 1e-3, worst_oracle
  assert worst_grid < 1e-3, worst_grid


def test_rdp_accountant_literal_composition(curves):
  # The compute_epsilon shortcut above is what RdpAccountant does; check it literally.
  for q, z, steps in ((0.01, 1.0, 1000), (0.1, 2.0, 100)):
    acc = dpa.rdp.RdpAccountant(orders=list(RDP_ORDERS))
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps)
    step_rdp = curves[q, z][0]
    state = jax.jit(lambda s, r=step_rdp, t=steps: jax.lax.scan(
        lambda c, _: (charge_rdp(c, r), None), s, None, length=t)[0])(init_accountant())
    # Closed over as float64: split exactly, so the sum is exact.
    np.testing.assert_allclose(spent_rdp(state), [math.fsum([v] * steps) for v in step_rdp],
                               rtol=1e-14)
    assert epsilon_spent(state, DELTA) == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)


def test_mixed_zcdp_and_rdp(curves):
  q, z, steps, rho = 0.01, 1.0, 500, 0.05
  acc = dpa.rdp.RdpAccountant(orders=list(RDP_ORDERS))
  acc.compose(dpa.ZCDpEvent(rho))
  acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps)
  step_rdp = curves[q, z][0]

  @jax.jit
  def run(state):
    state = charge(state, rho)
    return jax.lax.fori_loop(0, steps, lambda _, s: charge_rdp(s, step_rdp), state)

  state = run(init_accountant())
  assert spent_rho(state) == rho
  eps = epsilon_spent(state, DELTA)
  direct = rdp_to_epsilon(ORDERS * rho + steps * step_rdp, DELTA)
  assert eps == pytest.approx(direct, rel=1e-12)
  assert eps == pytest.approx(acc.get_epsilon(DELTA), rel=1e-3)
  # The subsampled part really counts: more than the zCDP part alone.
  assert eps > zcdp_to_epsilon(rho, DELTA) + 0.1


def test_float32_accountant_1e4_charges_stay_exact():
  rng = np.random.default_rng(7)
  vec = 10.0 ** rng.uniform(-9, -1, len(RDP_ORDERS)) / 3  # not representable in float32
  steps = 10_000
  state = jax.jit(lambda s: jax.lax.scan(lambda c, _: (charge_rdp(c, vec), None), s, None,
                                         length=steps)[0])(init_accountant(jnp.float32))
  assert state.rdp.dtype == jnp.float32
  exact = np.array([math.fsum([v] * steps) for v in vec])
  assert np.max(np.abs(spent_rdp(state) / exact - 1)) < 1e-9
  # Teeth: a plain float32 running sum drifts by far more.
  naive = jax.lax.scan(lambda c, _: (c + jnp.asarray(vec, jnp.float32), None),
                       jnp.zeros(len(vec), jnp.float32), None, length=steps)[0]
  assert np.max(np.abs(np.asarray(naive, np.float64) / exact - 1)) > 1e-7


@pytest.mark.parametrize("jit", [True, False])
def test_charge_rdp_keeps_the_other_fields(jit):
  vec = subsampled_gaussian_rdp(0.05, 1.5)
  state = maybe_jit(lambda s: charge_rdp(charge(s, 0.2), vec, truncation=1e-12), jit)(
      init_accountant())
  assert spent_rho(state) == 0.2
  np.testing.assert_allclose(spent_rdp(state), vec, rtol=1e-15)
  assert 1e-12 <= spent_truncation(state) <= 1e-12 * (1 + 1e-6)
  state = maybe_jit(lambda s: charge(s, 0.1), jit)(state)
  np.testing.assert_allclose(spent_rdp(state), vec, rtol=1e-15)
  assert spent_rho(state) == pytest.approx(0.3, rel=1e-15)


def test_truncation_is_never_rounded_down():
  # 1e4 charges of a non-representable slack: the float32 total is an upper bound.
  t = 1e-15 / 3
  state = jax.jit(lambda s: jax.lax.fori_loop(
      0, 10_000, lambda _, c: charge_rdp(c, np.zeros(len(RDP_ORDERS)), truncation=t), s))(
          init_accountant())
  exact = math.fsum([t] * 10_000)
  assert exact <= spent_truncation(state) <= exact * (1 + 1e-2)


def test_vmap_batched_states_and_host_broadcast():
  vecs = np.stack([subsampled_gaussian_rdp(q, 1.0) for q in (0.01, 0.02, 0.05)])
  states = jax.vmap(lambda _: init_accountant())(jnp.arange(3))
  assert states.rdp.shape == (3, len(RDP_ORDERS)) and states.truncation.shape == (3,)
  states = jax.jit(jax.vmap(charge_rdp))(states, jnp.asarray(vecs, jnp.float32))
  states = charge_rdp(states, vecs[0])  # (K,) broadcasts over the batch
  states = charge_rdp(states, vecs, truncation=np.array([0.0, 1e-9, 0.0]))  # full shape
  expected = np.asarray(jnp.asarray(vecs, jnp.float32), np.float64) + vecs[0] + vecs
  np.testing.assert_allclose(spent_rdp(states), expected, rtol=1e-14)
  eps = epsilon_spent(states, DELTA)
  assert eps.shape == (3,)
  for b in range(3):
    assert eps[b] == rdp_to_epsilon(expected[b], DELTA,
                                    truncation=float(spent_truncation(states)[b]))
  assert eps[0] < eps[1] < eps[2]
  with pytest.raises(ValueError, match=rf"rdp must have shape \({len(RDP_ORDERS)},\)"):
    charge_rdp(states, vecs[:2])


# ----------------------------------------------------------------------------
# The truncation slack in the conversion.
# ----------------------------------------------------------------------------


def test_truncation_slack_in_epsilon(curves):
  curve = 1000 * curves[0.01, 1.0][0]
  base = rdp_to_epsilon(curve, DELTA)
  for slack in (1e-12, 1e-9, 1e-7):
    eps = rdp_to_epsilon(curve, DELTA, truncation=slack)
    assert eps > base
    # Feasible: delta_rdp(eps) + (1 + e^eps) T <= delta (dp-accounting's
    # compute_delta is the same CKS bound, computed independently).
    d_rdp, _ = dpa_rdp.compute_delta(RDP_ORDERS, curve, eps)
    assert d_rdp + (1 + math.exp(eps)) * slack <= DELTA * (1 + 1e-9)
    # Tight: a slightly smaller eps is infeasible.
    d_rdp, _ = dpa_rdp.compute_delta(RDP_ORDERS, curve, eps * (1 - 1e-6))
    assert d_rdp + (1 + math.exp(eps * (1 - 1e-6))) * slack > DELTA
  # No finite eps: the slack leaves too little of delta for the RDP curve.
  assert rdp_to_epsilon(curve, DELTA, truncation=1e-6) == math.inf
  assert rdp_to_epsilon(curve, DELTA, truncation=DELTA / 2) == math.inf
  # Through the accountant: zero slack leaves the plain conversion.
  state = charge_rdp(init_accountant(), curve)
  assert epsilon_spent(state, DELTA) == pytest.approx(base, rel=1e-12)
  state = charge_rdp(state, np.zeros(len(RDP_ORDERS)), truncation=1e-8)
  assert epsilon_spent(state, DELTA) == pytest.approx(
      rdp_to_epsilon(curve, DELTA, truncation=1e-8), rel=1e-6)


def test_epsilon_spent_method_guard():
  state = charge_rdp(init_accountant(), subsampled_gaussian_rdp(0.01, 1.0))
  for method in ("gaussian", "bun_steinke", "paper"):
    with pytest.raises(ValueError, match=r"use method='cks'"):
      epsilon_spent(state, DELTA, method)
  # A zCDP-only state keeps every method.
  zstate = charge(init_accountant(), 0.1)
  assert epsilon_spent(zstate, DELTA, "gaussian") == zcdp_to_epsilon(0.1, DELTA, "gaussian")


def test_charge_rdp_bad_input():
  state = init_accountant()
  k = len(RDP_ORDERS)
  with pytest.raises(ValueError, match=r"rdp must be >= 0"):
    charge_rdp(state, -np.ones(k))
  with pytest.raises(ValueError, match=r"rdp contains NaN or inf"):
    charge_rdp(state, np.full(k, np.nan))
  with pytest.raises(ValueError, match=r"rdp must be >= 0"):
    charge_rdp(state, -jnp.ones(k))
  with pytest.raises(TypeError, match=r"rdp must be a floating array"):
    charge_rdp(state, jnp.ones(k, jnp.int32))
  with pytest.raises(ValueError, match=rf"rdp must have shape \({len(RDP_ORDERS)},\)"):
    charge_rdp(state, np.ones(3))
  with pytest.raises(TypeError, match=r"rdp must be a real number or float array"):
    charge_rdp(state, "x")
  with pytest.raises(ValueError, match=r"truncation must be a probability"):
    charge_rdp(state, np.zeros(k), truncation=1.5)
  with pytest.raises(ValueError, match=r"truncation must be >= 0"):
    charge_rdp(state, np.zeros(k), truncation=-1e-9)
  with pytest.raises(TypeError, match=r"state must be an AccountantState"):
    charge_rdp(tuple(state), np.zeros(k))
  with pytest.raises(TypeError, match=r"spent_rdp needs a concrete state"):
    jax.jit(spent_rdp)(state)


def test_rdp_to_epsilon_bad_input():
  k = len(RDP_ORDERS)
  with pytest.raises(ValueError, match=r"delta must be in the open interval"):
    rdp_to_epsilon(np.ones(k), 0.0)
  with pytest.raises(ValueError, match=r"rdp must have one value per order"):
    rdp_to_epsilon(np.ones(3), DELTA)
  with pytest.raises(ValueError, match=r"rdp must be >= 0"):
    rdp_to_epsilon(-np.ones(k), DELTA)
  with pytest.raises(ValueError, match=r"truncation must be a probability"):
    rdp_to_epsilon(np.ones(k), DELTA, truncation=2.0)


# ----------------------------------------------------------------------------
# Calibration.
# ----------------------------------------------------------------------------


def _eps_of(z, steps, rates, ratios=None, overflow=0.0):
  ratios = ratios or [1.0] * len(rates)
  curve = sum(subsampled_gaussian_rdp(q, z * r) for q, r in zip(rates, ratios))
  return rdp_to_epsilon(steps * curve, DELTA, truncation=steps * overflow)


@pytest.mark.parametrize(
    "eps,steps,rates,ratios,overflow",
    [(1.0, 976, [1024 / 100_000], None, 0.0),
     (0.5, 2000, [0.01], None, 1e-15),
     (2.0, 100, [0.1], None, 0.0),
     (8.0, 10_000, [0.005], None, 0.0),
     (1.0, 300, [0.02, 0.05], [1.0, 2.5], 2e-15)])
def test_calibration_hits_target(eps, steps, rates, ratios, overflow):
  z = calibrate_noise_multiplier(eps, DELTA, steps=steps, sampling_rates=rates,
                                 multiplier_ratios=ratios, overflow_prob=overflow)
  got = _eps_of(z, steps, rates, ratios, overflow)
  assert eps * (1 - 1e-3) <= got <= eps


def test_calibration_reference_and_monotone():
  # Google's dp-accounting RdpAccountant (default orders) gives 1.527 here.
  z = calibrate_noise_multiplier(1.0, DELTA, steps=976, sampling_rates=1024 / 100_000)
  assert z == pytest.approx(1.527, rel=5e-3)
  acc = dpa.rdp.RdpAccountant(orders=list(RDP_ORDERS))
  acc.compose(dpa.PoissonSampledDpEvent(1024 / 100_000, dpa.GaussianDpEvent(z)), 976)
  assert acc.get_epsilon(DELTA) <= 1.0 + 1e-9
  zs = [calibrate_noise_multiplier(e, DELTA, steps=500, sampling_rates=0.01)
        for e in (0.5, 1.0, 2.0, 4.0)]
  assert all(a > b for a, b in zip(zs, zs[1:]))  # more budget, less noise
  by_steps = [calibrate_noise_multiplier(1.0, DELTA, steps=t, sampling_rates=0.01)
              for t in (10, 100, 1000)]
  assert all(a < b for a, b in zip(by_steps, by_steps[1:]))
  by_rate = [calibrate_noise_multiplier(1.0, DELTA, steps=100, sampling_rates=q)
             for q in (0.001, 0.01, 0.1)]
  assert all(a < b for a, b in zip(by_rate, by_rate[1:]))


def test_calibration_bad_input():
  kw = dict(steps=100, sampling_rates=0.01)
  for bad in (0.0, -1.0):
    with pytest.raises(ValueError, match=r"epsilon must be > 0"):
      calibrate_noise_multiplier(bad, DELTA, **kw)
  with pytest.raises(ValueError, match=r"epsilon must be finite"):
    calibrate_noise_multiplier(math.nan, DELTA, **kw)
  for bad in (0.0, 1.0, 1.5):
    with pytest.raises(ValueError, match=r"delta must be in the open interval"):
      calibrate_noise_multiplier(1.0, bad, **kw)
  with pytest.raises(ValueError, match=r"steps must be >= 1"):
    calibrate_noise_multiplier(1.0, DELTA, steps=0, sampling_rates=0.01)
  with pytest.raises(TypeError, match=r"steps must be an integer"):
    calibrate_noise_multiplier(1.0, DELTA, steps=10.0, sampling_rates=0.01)
  for bad in (0.0, -0.1, 1.5, math.nan):
    with pytest.raises(ValueError, match=r"sampling_rates"):
      calibrate_noise_multiplier(1.0, DELTA, steps=10, sampling_rates=bad)
  with pytest.raises(ValueError, match=r"sampling_rates\[1\] must be in \(0, 1\]"):
    calibrate_noise_multiplier(1.0, DELTA, steps=10, sampling_rates=[0.1, 2.0])
  with pytest.raises(TypeError, match=r"sampling_rates must be a rate"):
    calibrate_noise_multiplier(1.0, DELTA, steps=10, sampling_rates=[])
  with pytest.raises(ValueError, match=r"multiplier_ratios must have one entry per"):
    calibrate_noise_multiplier(1.0, DELTA, steps=10, sampling_rates=[0.1, 0.2],
                               multiplier_ratios=[1.0])
  with pytest.raises(ValueError, match=r"multiplier_ratios\[0\] must be > 0"):
    calibrate_noise_multiplier(1.0, DELTA, steps=10, sampling_rates=[0.1],
                               multiplier_ratios=[0.0])
  with pytest.raises(ValueError, match=r"leaves nothing of delta"):
    calibrate_noise_multiplier(1.0, DELTA, steps=10, sampling_rates=0.1, overflow_prob=1e-6)
  with pytest.raises(ValueError, match=r"target is too small"):
    calibrate_noise_multiplier(1e-9, 1e-12, steps=10, sampling_rates=1.0)
  with pytest.raises(ValueError, match=r"pass a smaller epsilon"):
    calibrate_noise_multiplier(500.0, DELTA, steps=1, sampling_rates=1e-3)
  with pytest.raises(TypeError, match=r"steps must be"):
    calibrate_noise_multiplier(1.0, DELTA, sampling_rates=0.1, steps=None)
