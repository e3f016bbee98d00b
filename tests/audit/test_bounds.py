"""Clopper-Pearson intervals and the empirical epsilon lower bound (dpjax.audit.bounds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpjax import accounting
from dpjax.audit import bounds


def test_clopper_pearson_matches_scipy_beta_quantiles():
  n = 20_000
  k = np.arange(n + 1)
  lo, hi = bounds.clopper_pearson(k, n)
  for j in (1, 7, 50, 10_000, n - 1):
    assert lo[j] == pytest.approx(stats.beta.ppf(0.025, j, n - j + 1), rel=1e-12)
    assert hi[j] == pytest.approx(stats.beta.ppf(0.975, j + 1, n - j), rel=1e-12)
    # scipy's own exact interval (found by root finding, so to its tolerance).
    ci = stats.binomtest(int(j), n).proportion_ci(0.95, method="exact")
    assert lo[j] == pytest.approx(ci.low, rel=1e-3)
    assert hi[j] == pytest.approx(ci.high, rel=1e-3)
  assert lo[0] == 0.0 and hi[n] == 1.0
  assert np.all(np.diff(lo) > 0) and np.all(np.diff(hi) > 0)


def test_clopper_pearson_coverage():
  """The exact interval covers p at least 95% of the time (it is conservative)."""
  rng = np.random.default_rng(1)
  n, p = 200, 0.03
  counts = rng.binomial(n, p, size=4000)
  lo, hi = bounds.clopper_pearson(counts, n)
  assert np.mean((lo <= p) & (p <= hi)) >= 0.95


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_gaussian_mechanism_bound_below_claim_and_detects_a_third_of_the_noise(epsilon):
  """mu-GDP samples: the bound stays below the exact epsilon, and exceeds it at 3 mu."""
  mu = math.sqrt(2 * accounting.epsilon_to_zcdp(epsilon, 1e-5, "gaussian"))
  rng = np.random.default_rng(0)
  s0 = rng.normal(size=20_000)
  ok = bounds.empirical_epsilon(s0, rng.normal(size=20_000) + mu, 1e-5)
  assert 0.2 * epsilon < ok.epsilon <= epsilon
  bad = bounds.empirical_epsilon(s0, rng.normal(size=20_000) + 3 * mu, 1e-5)
  assert bad.epsilon > epsilon
  # The reported test reproduces the bound.
  assert bad.epsilon == pytest.approx(math.log((bad.p_numerator - 1e-5) / bad.p_denominator))


def test_bound_is_symmetric_in_the_sign_and_order_of_the_shift():
  rng = np.random.default_rng(2)
  s0, s1 = rng.normal(size=5000), rng.normal(size=5000) + 1.5
  a = bounds.empirical_epsilon(s0, s1, 1e-5)
  b = bounds.empirical_epsilon(-s0, -s1, 1e-5)
  c = bounds.empirical_epsilon(s1, s0, 1e-5)
  assert a.epsilon == pytest.approx(b.epsilon) == pytest.approx(c.epsilon)
  assert b.region == "below" and c.direction == "D|D'"


def test_identical_distributions_give_no_positive_bound():
  rng = np.random.default_rng(3)
  r = bounds.empirical_epsilon(rng.normal(size=5000), rng.normal(size=5000), 1e-5)
  assert r.epsilon < 0.2
  same = bounds.empirical_epsilon(np.zeros(100), np.zeros(100), 0.0)
  assert same.epsilon == 0.0 and math.isnan(same.threshold)


def test_holdout_bound_is_valid_and_weaker():
  rng = np.random.default_rng(4)
  s0, s1 = rng.normal(size=20_000), rng.normal(size=20_000) + 1.5
  full = bounds.empirical_epsilon(s0, s1, 1e-5)
  held = bounds.empirical_epsilon(s0, s1, 1e-5, holdout=True)
  assert 0.0 < held.epsilon <= full.epsilon
  assert held.num_samples == (10_000, 10_000)


@pytest.mark.parametrize("bad, match", [
    (dict(stats=[1.0]), "at least 2"),
    (dict(stats=[[1.0, 2.0]]), "1-D"),
    (dict(stats=[1, 2, 3]), "floats"),
    (dict(stats=[0.0, np.nan]), "non-finite"),
    (dict(delta=1.0), "delta"),
    (dict(confidence=1.0), "confidence"),
])
def test_bad_inputs_are_rejected(bad, match):
  kwargs = dict(stats=[0.0, 1.0, 2.0], stats_neighbour=[0.5, 1.5, 2.5], delta=1e-5)
  kwargs.update(bad)
  with pytest.raises((ValueError, TypeError), match=match):
    bounds.empirical_epsilon(kwargs.pop("stats"), kwargs.pop("stats_neighbour"), **kwargs)


def test_clopper_pearson_rejects_bad_counts():
  with pytest.raises(ValueError, match="counts must lie"):
    bounds.clopper_pearson([11], 10)
  with pytest.raises(TypeError, match="integers"):
    bounds.clopper_pearson([1.5], 10)


def test_holdout_bound_exceeds_the_true_epsilon_rarely():
  """The held-out bound is a valid 95% lower bound: over 300 audits of an exact 1-GDP
  pair it exceeds the true epsilon(delta = 0.1) = 1.16 in at most 5% of them."""
  true_eps = accounting.zcdp_to_epsilon(0.5, 0.1, "gaussian")  # mu = 1
  rng = np.random.default_rng(5)
  above = 0
  for _ in range(300):
    s0, s1 = rng.normal(size=1000), rng.normal(size=1000) + 1.0
    above += bounds.empirical_epsilon(s0, s1, 0.1, holdout=True).epsilon > true_eps
  assert above <= 15
