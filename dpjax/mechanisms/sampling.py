"""Fixed-shape Poisson subsampling for minibatch DP (DP-SGD; the minibatch Newton of Ganesh et al. 2023).

Poisson sampling includes each of the ``n`` examples independently with
probability ``q``, so the batch size is random (``Binomial(n, q)``). Under
``jit`` shapes are static, so :func:`sample` returns a fixed number ``cap`` of
slots: the indices of the first ``cap`` included examples, and a mask that is
False on the padding (index 0). Callers must make a masked slot contribute
exactly zero (multiply by the mask, or zero the row), and normalise by the
*expected* batch size ``q n`` (``PoissonSampler.expected_size``), never by the
realised count.

Privacy argument (add/remove neighbours, clip norm ``C``):

* With the normalisation by ``q n`` fixed in advance, the released sum
  ``sum_{i in batch} clip_C(g_i)`` changes by at most ``C`` when one example
  is added or removed, whether or not it was sampled: the sum's sensitivity is
  the clip norm, and noise ``N(0, (z C)^2 I)`` makes one step the
  Poisson-subsampled Gaussian mechanism with noise multiplier ``z``. (Dividing
  by the realised count would make the sensitivity data-dependent.)
* Poisson sampling amplifies privacy for add/remove neighbours: one step is
  RDP with the curve :func:`dpjax.accounting.subsampled_gaussian_rdp` ``(q,
  z)`` (Mironov, Talwar & Zhang 2019), charged with
  :func:`dpjax.accounting.charge_rdp`.
* The cap changes the mechanism only when more than ``cap`` examples are
  included. The capped and the uncapped mechanism share the Bernoulli draws,
  so they differ only on that overflow event, whose probability for a dataset
  of at most ``n + 1`` records (the data and its add-neighbour) is at most
  ``overflow_prob = P(Binomial(n + 1, q) > cap)``. Summed over the steps,
  this total-variation distance ``T`` is charged as the accountant's
  ``truncation``, and :func:`dpjax.accounting.epsilon_spent` reports an eps
  with ``delta_rdp + (1 + e^eps) T <= delta``. The default cap makes the
  per-step slack at most 1e-15.
* The inclusion test compares 64 random bits with ``floor(q 2^64)``, so the
  realised rate is ``floor(q 2^64) / 2^64``: at most ``q``, and within
  ``2^-64`` of it. The accounted curve is nondecreasing in ``q`` (``A_alpha``
  is convex in ``q`` with its minimum 1 at ``q = 0``), so accounting at ``q``
  is valid.

The binomial tail is computed exactly on the host in log space
(``math.lgamma``), with a margin for the rounding of the log-factorials and
a geometric bound on the terms past where the sum stops.
"""

from __future__ import annotations

import fractions
import math
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _common
from dpjax import _validate

__all__ = ["PoissonSampler", "poisson_sampler", "sample", "binomial_tail"]


class PoissonSampler(NamedTuple):
  """A fixed-shape Poisson sampler: static Python numbers only (close over it under ``jit``)."""

  n: int  # number of examples (public).
  sampling_rate: float  # q in (0, 1]: each example's inclusion probability.
  cap: int  # number of slots of a batch, 1 <= cap <= n.
  expected_size: float  # q n: the normaliser of a batch sum.
  overflow_prob: float  # P(Binomial(n + 1, q) > cap) (an upper bound): the per-step TV slack.


_LOG_MARGIN_ULPS = 2.0**-50


def _log_pmf(m: int, q: float, k: np.ndarray, log_fact_m: float) -> np.ndarray:
  lg = np.array([math.lgamma(float(x) + 1.0) + math.lgamma(float(m - x) + 1.0) for x in k])
  return log_fact_m - lg + k * math.log(q) + (m - k) * math.log1p(-q)


def binomial_tail(m: int, q: float, c: int) -> float:
  """An upper bound (tight to ~1e-9 relative) on ``P(Binomial(m, q) > c)``.

  Terms ``C(m, k) q^k (1-q)^(m-k)`` in log space with ``math.lgamma``. Past the
  mode the terms decrease with ratio ``r_k = (m-k) q / ((k+1)(1-q))``, itself
  decreasing, so the sum stops once a term is 1e-40 of the total and the rest
  is bounded by ``term * r / (1 - r)``. Below the mode the tail is
  ``1 - P(X <= c)``, with the lower sum taken the same way downwards. The
  result is multiplied by ``exp(margin)`` (and the lower sum by
  ``exp(-margin)``), ``margin`` a bound on the rounding of the log terms.

  Args:
    m: number of trials, an int >= 1.
    q: success probability in (0, 1].
    c: threshold, an int (``c < 0`` gives 1, ``c >= m`` gives 0).

  Returns:
    The tail bound as a float in [0, 1].

  Examples:
    >>> from dpjax.mechanisms import sampling
    >>> round(sampling.binomial_tail(10, 0.5, 7), 12)  # (1 + 10 + 45) / 1024
    0.0546875
  """
  m = _validate.positive_int(m, "m")
  q = float(q)
  if not 0.0 < q <= 1.0:
    raise ValueError(f"q must be in (0, 1], got {q!r}.")
  c = int(c)
  if c < 0:
    return 1.0
  if c >= m:
    return 0.0
  if q == 1.0:
    return 1.0
  log_fact_m = math.lgamma(m + 1.0)
  margin = _LOG_MARGIN_ULPS * (3.0 * log_fact_m + m * (abs(math.log(q)) - math.log1p(-q)) + 10.0)
  mode = int(math.floor((m + 1) * q))
  ratio_const = q / (1.0 - q)
  chunk = 2048

  def directed_sum(start: int, stop: int, step: int) -> float:
    """Sum of pmf over k = start, start + step, ... (monotone decreasing terms), bounded."""
    logs: list[float] = []
    k = start
    while (k <= stop) if step > 0 else (k >= stop):
      end = min(stop, k + step * (chunk - 1)) if step > 0 else max(stop, k + step * (chunk - 1))
      ks = np.arange(k, end + step, step, dtype=np.float64)
      lp = _log_pmf(m, q, ks, log_fact_m)
      logs.extend(lp.tolist())
      total = _logsumexp(np.asarray(logs))
      if lp[-1] < total - 92.0:  # 1e-40 of the total: the rest is bounded below.
        last = float(ks[-1])
        r = (m - last) * ratio_const / (last + 1.0) if step > 0 else last * (1.0 - q) / (
            (m - last + 1.0) * q)
        if r < 1.0:
          return math.exp(total) + math.exp(float(lp[-1])) * r / (1.0 - r)
      k = int(end) + step
    return math.exp(_logsumexp(np.asarray(logs)))

  if c + 1 > mode:
    return min(1.0, directed_sum(c + 1, m, 1) * math.exp(margin))
  lower = directed_sum(c, 0, -1) * math.exp(-margin)
  return min(1.0, max(0.0, 1.0 - lower))


def _logsumexp(x: np.ndarray) -> float:
  top = float(np.max(x))
  if top == -math.inf:
    return -math.inf
  return top + math.log(float(np.sum(np.exp(x - top))))


def _int_arg(v: Any, name: str) -> int:
  if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
    raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}.")
  return int(v)


def poisson_sampler(
    n: int,
    *,
    sampling_rate: float | None = None,
    batch_size: float | None = None,
    cap: int | None = None,
    overflow_prob: float = 1e-15,
) -> PoissonSampler:
  """Builds a fixed-shape Poisson sampler (see the module docstring for the privacy argument).

  Args:
    n: number of examples, an int >= 1.
    sampling_rate: ``q`` in (0, 1]; or give ``batch_size`` instead.
    batch_size: the expected batch size ``B = q n``, ``1 <= B <= n``.
    cap: slots per batch, an int in [1, n]. Default: the smallest cap with
      ``P(Binomial(n + 1, q) > cap) <= overflow_prob``, at most ``n``. When
      even ``cap = n`` misses the target (``q^(n+1) > overflow_prob``, i.e.
      ``q`` within ~``-log(overflow_prob) / n`` of 1) the cap is ``n`` and the
      returned ``overflow_prob`` is the honest ``q^(n+1)``: at ``q = 1`` it is 1
      and the accountant reports ``epsilon = inf``; use a full-batch transform
      (``dp_gd``, ``dp_newton``) there.
    overflow_prob: the target per-step slack of the default cap, in (0, 1);
      only used when ``cap`` is None.

  Returns:
    A :class:`PoissonSampler` whose ``overflow_prob`` is the actual per-step
    slack ``P(Binomial(n + 1, q) > cap)`` (an upper bound) to charge as the
    accountant's truncation.

  Raises:
    TypeError: non-int ``n``/``cap`` or non-real rates.
    ValueError: out-of-range values, or both or neither of ``sampling_rate``
      and ``batch_size``.

  Examples:
    >>> from dpjax.mechanisms import sampling
    >>> s = sampling.poisson_sampler(10_000, batch_size=100)
    >>> s.sampling_rate, s.cap, s.expected_size, s.overflow_prob <= 1e-15
    (0.01, 189, 100.0, True)
  """
  n = _int_arg(n, "n")
  if n < 1:
    raise ValueError(f"n must be >= 1, got {n}.")
  if (sampling_rate is None) == (batch_size is None):
    raise ValueError(
        "pass exactly one of sampling_rate=<q in (0, 1]> or batch_size=<expected batch "
        "size q n>; got " + ("neither." if sampling_rate is None else "both."))
  if sampling_rate is not None:
    q = _validate.probability(sampling_rate, "sampling_rate")
  else:
    b = _validate.positive_float(batch_size, "batch_size")
    if not 1.0 <= b <= n:
      raise ValueError(
          f"batch_size (the expected batch size q n) must be in [1, n={n}], got {b!r}.")
    q = b / n
  if cap is None:
    target = _validate.float_in_open_interval(overflow_prob, "overflow_prob", 0.0, 1.0)
    lo, hi = 0, n  # invariant: tail(lo) > target; tail(hi) <= target unless hi == n
    if binomial_tail(n + 1, q, n) <= target:
      while hi - lo > 1:
        mid = (lo + hi) // 2
        if binomial_tail(n + 1, q, mid) <= target:
          hi = mid
        else:
          lo = mid
    cap_value = max(1, hi)
  else:
    cap_value = _int_arg(cap, "cap")
    if not 1 <= cap_value <= n:
      raise ValueError(f"cap must be an int in [1, n={n}], got {cap_value}.")
  return PoissonSampler(n=n, sampling_rate=q, cap=cap_value, expected_size=q * n,
                        overflow_prob=binomial_tail(n + 1, q, cap_value))


def _threshold_words(q: float) -> tuple[int, int] | None:
  """``floor(q 2^64)`` as two uint32 words, or None for ``q = 1`` (include all)."""
  if q >= 1.0:
    return None
  t = math.floor(fractions.Fraction(q) * (1 << 64))
  return t >> 32, t & 0xFFFFFFFF


def sample(sampler: PoissonSampler, key: Any) -> tuple[jax.Array, jax.Array]:
  """Draws one Poisson batch: ``(indices int32[cap], mask bool[cap])``.

  Each of the ``n`` examples is included independently with probability
  ``floor(q 2^64) / 2^64`` (64 random bits against a threshold; module
  docstring); the slots hold the first ``cap`` included indices in increasing
  order, then padding (index 0, mask False). If more than ``cap`` are
  included the rest are dropped (the overflow event, charged as truncation).
  Jittable and vmappable over keys; close over ``sampler`` (its fields are the
  static shapes), do not pass it as a ``jit`` argument.

  Args:
    sampler: from :func:`poisson_sampler`.
    key: a typed PRNG key (``jax.random.key``) or an int seed.

  Returns:
    ``indices``: int32 ``[cap]``; ``mask``: bool ``[cap]``, True on the
    ``min(count, cap)`` real slots.

  Examples:
    >>> import jax
    >>> from dpjax.mechanisms import sampling
    >>> s = sampling.poisson_sampler(1000, sampling_rate=0.01)
    >>> idx, mask = jax.jit(lambda k: sampling.sample(s, k))(jax.random.key(0))
    >>> idx.shape, mask.dtype, bool((idx[~mask] == 0).all())
    ((44,), dtype('bool'), True)
  """
  if not isinstance(sampler, PoissonSampler):
    raise TypeError(
        f"sampler must be a PoissonSampler from poisson_sampler(...), got "
        f"{type(sampler).__name__}.")
  if not all(isinstance(f, numbers.Number) for f in sampler):
    raise TypeError(
        "sampler fields must be concrete Python numbers (they fix the batch shape); close "
        "over the sampler in the jitted function instead of passing it as an argument.")
  key = _common.canonical_key(key)
  n, cap = sampler.n, sampler.cap
  words = _threshold_words(sampler.sampling_rate)
  if words is None:
    included = jnp.ones((n,), bool)
  else:
    bits = jax.random.bits(key, (2, n), jnp.uint32)
    t_hi, t_lo = jnp.uint32(words[0]), jnp.uint32(words[1])
    included = (bits[0] < t_hi) | ((bits[0] == t_hi) & (bits[1] < t_lo))
  (indices,) = jnp.nonzero(included, size=cap, fill_value=0)
  count = jnp.sum(included, dtype=jnp.int32)
  mask = jnp.arange(cap, dtype=jnp.int32) < count
  return indices.astype(jnp.int32), mask
