"""Tests for dpjax.mechanisms.sampling: the fixed-shape Poisson sampler and its overflow bound."""

from __future__ import annotations

import fractions
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import Z_MAX, maybe_jit
from dpjax.mechanisms import sampling
from dpjax.mechanisms.sampling import PoissonSampler, binomial_tail, poisson_sampler, sample

stats = pytest.importorskip("scipy.stats")


def _draw(sampler, seed, count, jit=True):
  keys = jax.random.split(jax.random.key(seed), count)
  fn = jax.vmap(lambda k: sample(sampler, k))
  idx, mask = maybe_jit(fn, jit)(keys)
  return np.asarray(idx), np.asarray(mask)


def test_inclusion_frequencies_match_q():
  n, q, draws = 60, 0.2, 3000
  sampler = poisson_sampler(n, sampling_rate=q, cap=n)  # cap = n: nothing is ever dropped
  idx, mask = _draw(sampler, 0, draws)
  counts = np.bincount(idx[mask], minlength=n).astype(np.float64)
  # Each count ~ Binomial(draws, q), independent across indices: chi-square on n dof.
  expected, var = draws * q, draws * q * (1 - q)
  chi2 = float(np.sum((counts - expected) ** 2 / var))
  assert stats.chi2.sf(chi2, n) > 1e-4, chi2
  assert np.max(np.abs(counts - expected) / math.sqrt(var)) < Z_MAX
  # Batch sizes ~ Binomial(n, q): mean within the sampling error.
  sizes = mask.sum(axis=1)
  z = (sizes.mean() - n * q) / math.sqrt(n * q * (1 - q) / draws)
  assert abs(z) < Z_MAX


def test_batch_structure_and_cap():
  n, q, cap, draws = 200, 0.1, 17, 2000  # mean 20 > cap: overflow is common
  full = poisson_sampler(n, sampling_rate=q, cap=n)
  capped = poisson_sampler(n, sampling_rate=q, cap=cap)
  idx_f, mask_f = _draw(full, 3, draws)
  idx_c, mask_c = _draw(capped, 3, draws)  # same keys: the same Bernoulli draws
  assert idx_c.shape == (draws, cap) and idx_c.dtype == np.int32 and mask_c.dtype == bool
  counts = mask_f.sum(axis=1)
  kept = mask_c.sum(axis=1)
  np.testing.assert_array_equal(kept, np.minimum(counts, cap))
  slot = np.arange(cap)[None, :]
  np.testing.assert_array_equal(mask_c, slot < kept[:, None])  # real slots first
  np.testing.assert_array_equal(idx_c[~mask_c], 0)  # masked slots are exactly padding
  assert idx_c.min() >= 0 and idx_c.max() < n
  # Real slots: strictly increasing (distinct), and the first `cap` included indices.
  increasing = np.diff(idx_c, axis=1) > 0
  assert np.all(increasing | ~mask_c[:, 1:])
  np.testing.assert_array_equal(np.where(mask_c, idx_c, -1), np.where(mask_c, idx_f[:, :cap], -1))
  # Overflow frequency matches P(Binomial(n, q) > cap).
  p = stats.binom.sf(cap, n, q)
  z = ((counts > cap).mean() - p) / math.sqrt(p * (1 - p) / draws)
  assert abs(z) < Z_MAX


@pytest.mark.parametrize("jit", [True, False])
def test_int_seed_and_typed_key_agree(jit):
  sampler = poisson_sampler(100, batch_size=10)
  a = sample(sampler, 5)
  b = maybe_jit(lambda k: sample(sampler, k), jit)(jax.random.key(5))
  np.testing.assert_array_equal(a[0], b[0])
  np.testing.assert_array_equal(a[1], b[1])


def test_rate_one_includes_everything():
  sampler = poisson_sampler(7, sampling_rate=1.0, cap=7)
  assert sampler.overflow_prob == 1.0  # the (n+1)-record neighbour always overflows cap = n
  idx, mask = sample(sampler, 0)
  np.testing.assert_array_equal(idx, np.arange(7))
  assert mask.all()
  # The default cap cannot meet the target at q = 1: it stops at n, with the honest slack.
  assert poisson_sampler(7, sampling_rate=1.0) == sampler
  near = poisson_sampler(40, sampling_rate=0.5)
  assert near.cap == 40 and near.overflow_prob == pytest.approx(0.5**41, rel=1e-9)


def test_realised_rate_is_at_most_q():
  for q in (1e-6, 0.01, 1 / 3, 0.999999):
    hi, lo = sampling._threshold_words(q)
    realised = fractions.Fraction((hi << 32) + lo, 1 << 64)
    assert realised <= fractions.Fraction(q) < realised + fractions.Fraction(1, 1 << 64)


@pytest.mark.parametrize("n,q", [(10_000, 0.01), (1000, 0.003), (100, 0.5), (50, 0.5),
                                 (1_000_000, 1e-4)])
def test_default_cap_against_scipy(n, q):
  target = 1e-15
  s = poisson_sampler(n, sampling_rate=q)
  assert s.n == n and s.sampling_rate == q and s.expected_size == q * n
  assert 1 <= s.cap <= n
  exact = stats.binom.sf(s.cap, n + 1, q)
  # An upper bound, tight to the log-factorial rounding margin.
  assert exact <= s.overflow_prob <= exact * (1 + 1e-6) + 1e-300
  assert s.overflow_prob <= target
  if s.cap > 1:
    assert stats.binom.sf(s.cap - 1, n + 1, q) > target  # the smallest such cap


def test_explicit_cap_and_overflow_target():
  s = poisson_sampler(1000, batch_size=50, cap=60)
  assert s.cap == 60 and s.sampling_rate == 0.05
  assert s.overflow_prob == pytest.approx(stats.binom.sf(60, 1001, 0.05), rel=1e-6)
  loose = poisson_sampler(1000, batch_size=50, overflow_prob=1e-3)
  tight = poisson_sampler(1000, batch_size=50)
  assert loose.cap < tight.cap and loose.overflow_prob <= 1e-3


def test_binomial_tail_against_scipy():
  for m, q in ((1, 0.3), (20, 0.5), (300, 0.02), (5000, 0.3), (100_000, 1e-3)):
    for c in sorted({0, 1, int(m * q) - 1, int(m * q), int(m * q + 3 * math.sqrt(m * q) + 2),
                     m - 1}):
      if c < 0:
        continue
      want = stats.binom.sf(c, m, q)
      got = binomial_tail(m, q, c)
      assert want <= got * (1 + 1e-12) and got <= want * (1 + 1e-6) + 1e-300, (m, q, c)
  assert binomial_tail(10, 0.3, -1) == 1.0 and binomial_tail(10, 0.3, 10) == 0.0


def test_poisson_sampler_bad_input():
  for bad in (0.0, -0.1, 1.5, math.nan):
    with pytest.raises(ValueError, match=r"sampling_rate must"):
      poisson_sampler(100, sampling_rate=bad)
  with pytest.raises(TypeError, match=r"sampling_rate must be a real number"):
    poisson_sampler(100, sampling_rate="0.1")
  for bad in (0.5, 101, 1e9):
    with pytest.raises(ValueError, match=r"batch_size \(the expected batch size q n\) must be"):
      poisson_sampler(100, batch_size=bad)
  with pytest.raises(ValueError, match=r"batch_size must be > 0"):
    poisson_sampler(100, batch_size=0)
  with pytest.raises(ValueError, match=r"exactly one of sampling_rate"):
    poisson_sampler(100)
  with pytest.raises(ValueError, match=r"exactly one of sampling_rate"):
    poisson_sampler(100, sampling_rate=0.1, batch_size=10)
  for bad in (0, -5, 101):
    with pytest.raises(ValueError, match=r"cap must be an int in \[1, n=100\]"):
      poisson_sampler(100, sampling_rate=0.1, cap=bad)
  with pytest.raises(TypeError, match=r"cap must be an int"):
    poisson_sampler(100, sampling_rate=0.1, cap=10.0)
  for bad in (100.0, "100", True, None):
    with pytest.raises(TypeError, match=r"n must be an int"):
      poisson_sampler(bad, sampling_rate=0.1)
  with pytest.raises(ValueError, match=r"n must be >= 1"):
    poisson_sampler(0, sampling_rate=0.1)
  for bad in (0.0, 1.0, -1e-3):
    with pytest.raises(ValueError, match=r"overflow_prob must be in the open interval"):
      poisson_sampler(100, sampling_rate=0.1, overflow_prob=bad)


def test_sample_bad_input():
  sampler = poisson_sampler(10, sampling_rate=0.5, cap=10)
  with pytest.raises(TypeError, match=r"sampler must be a PoissonSampler"):
    sample((10, 0.5, 5, 5.0, 0.0), 0)
  with pytest.raises(TypeError, match=r"close over the sampler"):
    jax.jit(sample)(sampler, jax.random.key(0))
  with pytest.raises(TypeError, match=r"key must be an int seed or a typed PRNG key"):
    sample(sampler, None)
  with pytest.raises(TypeError, match=r"key must be an int seed or a typed PRNG key"):
    sample(sampler, jnp.zeros(2, jnp.uint32))
  assert isinstance(sampler, PoissonSampler)
