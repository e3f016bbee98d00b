"""Empirical privacy lower bounds from a distinguishing test (Jagielski et al. 2020; Nasr et al. 2021).

An auditor runs a mechanism ``M`` many times on two neighbouring datasets
``D`` and ``D'`` and reduces each output to a scalar statistic ``s``. For any
rejection region ``S`` (here ``{s > t}`` and its complement ``{s <= t}``, for
every threshold ``t``), (epsilon, delta)-DP implies

    P[M(D') in S] <= e^epsilon P[M(D) in S] + delta,   and the same with D, D' swapped,

so every region gives the lower bound
``epsilon >= log((p1 - delta) / p0)`` with ``p1 = P[M(D') in S]``,
``p0 = P[M(D) in S]`` (and swapped). The probabilities are estimated from
the sample counts with exact Clopper-Pearson intervals: the numerator takes
the interval's lower end, the denominator its upper end, so each threshold's
bound holds with probability at least the ``confidence`` (each end is a
one-sided ``(1 - confidence) / 2`` bound). :func:`empirical_epsilon` returns
the largest bound over all thresholds and both regions, as in the papers
above. Taking the maximum over thresholds picked on the same samples is the
papers' practice; it is slightly optimistic for the auditor (a multiple
comparison), which makes a passing audit (lower bound <= claimed epsilon)
the conservative outcome. :func:`empirical_epsilon` with ``holdout=True``
picks the threshold on half of the samples and bounds it on the other half,
which is a valid 95% bound for the one threshold chosen.

The Clopper-Pearson ends are beta quantiles (``scipy.stats.beta.ppf``): the
audit is an assurance tool and needs the ``audit`` extra (scipy); the rest of
dpjax does not.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np

from dpjax import _validate

__all__ = ["EpsilonLowerBound", "clopper_pearson", "empirical_epsilon"]


class EpsilonLowerBound(NamedTuple):
  """The result of :func:`empirical_epsilon`."""

  epsilon: float  # the lower bound (0 when no region gives a positive one).
  threshold: float  # the threshold t of the best region (nan when epsilon is 0).
  region: str  # "above" ({s > t}) or "below" ({s <= t}).
  direction: str  # "D'|D": bounds P[M(D') in S] / P[M(D) in S]; "D|D'": the reverse.
  p_numerator: float  # the Clopper-Pearson lower end of the numerator's probability.
  p_denominator: float  # the Clopper-Pearson upper end of the denominator's probability.
  num_samples: tuple[int, int]  # (runs on D, runs on D').


def _beta_ppf():
  """``scipy.stats.beta.ppf``: the audit extra's one dependency (imported on use)."""
  try:
    from scipy import stats  # pylint: disable=import-outside-toplevel
  except ImportError as err:  # pragma: no cover - scipy is in the dev and audit extras.
    raise ImportError(
        "dpjax.audit needs scipy for the Clopper-Pearson quantiles: pip install 'dpjax[audit]' "
        "(or scipy).") from err
  return stats.beta.ppf


def clopper_pearson(counts: Any, trials: int, confidence: float = 0.95
                    ) -> tuple[np.ndarray, np.ndarray]:
  """Exact (Clopper-Pearson) two-sided interval for a binomial proportion.

  For ``k`` successes in ``n`` trials the interval is ``[B(alpha/2; k, n-k+1),
  B(1-alpha/2; k+1, n-k)]`` with ``B`` the beta quantile and ``alpha = 1 -
  confidence`` (the lower end is 0 at ``k = 0``, the upper end 1 at ``k = n``).

  Args:
    counts: integer array of success counts in ``[0, trials]``.
    trials: the number of trials ``n >= 1``.
    confidence: in (0, 1); 0.95 by default.

  Returns:
    ``(lower, upper)`` float64 arrays shaped like ``counts``.

  Examples:
    >>> from dpjax.audit import bounds
    >>> lo, hi = bounds.clopper_pearson([0, 5, 10], 10)
    >>> lo.round(4).tolist(), hi.round(4).tolist()
    ([0.0, 0.1871, 0.6915], [0.3085, 0.8129, 1.0])
  """
  trials = _validate.positive_int(trials, "trials")
  confidence = _validate.float_in_open_interval(confidence, "confidence", 0.0, 1.0)
  k = np.asarray(counts)
  if not np.issubdtype(k.dtype, np.integer):
    raise TypeError(f"counts must be integers, got dtype {k.dtype}.")
  if k.size and (k.min() < 0 or k.max() > trials):
    raise ValueError(f"counts must lie in [0, trials={trials}], got [{k.min()}, {k.max()}].")
  alpha = 1.0 - confidence
  kf = k.astype(np.float64)
  inner_lo = np.maximum(kf, 1.0)
  inner_hi = np.minimum(kf, trials - 1.0)
  ppf = _beta_ppf()
  lower = ppf(alpha / 2, inner_lo, trials - inner_lo + 1.0)
  upper = ppf(1.0 - alpha / 2, inner_hi + 1.0, trials - inner_hi)
  return np.where(k == 0, 0.0, lower), np.where(k == trials, 1.0, upper)


def _check_statistics(s: Any, name: str) -> np.ndarray:
  a = np.asarray(jax.device_get(s))
  if a.ndim != 1 or a.size < 2:
    raise ValueError(f"{name} must be a 1-D array of at least 2 statistics, got shape {a.shape}.")
  if not np.issubdtype(a.dtype, np.floating):
    raise TypeError(f"{name} must be floats, got dtype {a.dtype}.")
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{name} has {int(np.sum(~np.isfinite(a)))} non-finite statistics; a "
                     "mechanism that released NaN or inf cannot be audited.")
  return a.astype(np.float64)


def _region_counts(s0: np.ndarray, s1: np.ndarray, thresholds: np.ndarray):
  """Counts of ``{s > t}`` on each sample, for every threshold."""
  above0 = s0.size - np.searchsorted(np.sort(s0), thresholds, side="right")
  above1 = s1.size - np.searchsorted(np.sort(s1), thresholds, side="right")
  return above0, above1


def _all_bounds(s0, s1, thresholds, delta, confidence):
  """Every (region, direction) lower bound at every threshold: ``[4, len(thresholds)]``."""
  n0, n1 = s0.size, s1.size
  lo0, hi0 = clopper_pearson(np.arange(n0 + 1), n0, confidence)
  lo1, hi1 = clopper_pearson(np.arange(n1 + 1), n1, confidence)
  a0, a1 = _region_counts(s0, s1, thresholds)
  b0, b1 = n0 - a0, n1 - a1  # {s <= t}
  with np.errstate(divide="ignore", invalid="ignore"):
    cases = [  # (numerator lower end, denominator upper end)
        (lo1[a1], hi0[a0]), (lo0[a0], hi1[a1]),  # above: D'|D, D|D'
        (lo1[b1], hi0[b0]), (lo0[b0], hi1[b1]),  # below: D'|D, D|D'
    ]
    eps = np.stack([np.log(np.maximum(num - delta, 0.0) / den) for num, den in cases])
  return eps, cases


_LABELS = [("above", "D'|D"), ("above", "D|D'"), ("below", "D'|D"), ("below", "D|D'")]


def empirical_epsilon(stats: Any, stats_neighbour: Any, delta: float, *,
                      confidence: float = 0.95, holdout: bool = False) -> EpsilonLowerBound:
  """The empirical epsilon lower bound at ``delta`` over all thresholds (module docstring).

  Args:
    stats: the statistic of each run on ``D`` (1-D float array).
    stats_neighbour: the statistic of each run on ``D'``.
    delta: the delta of the claimed guarantee, in [0, 1).
    confidence: the Clopper-Pearson confidence of each probability (0.95).
    holdout: pick the threshold, region and direction on the first half of
      each sample and bound them on the second half (a valid lower bound for
      the chosen test, at the cost of half the samples).

  Returns:
    An :class:`EpsilonLowerBound`; ``epsilon`` is 0 when no threshold gives a
    positive bound.

  Examples:
    >>> import numpy as np
    >>> from dpjax.audit import bounds
    >>> rng = np.random.default_rng(0)
    >>> s0, s1 = rng.normal(size=20000), rng.normal(size=20000) + 2.0  # 2-GDP
    >>> r = bounds.empirical_epsilon(s0, s1, 1e-5)
    >>> 2.0 < r.epsilon < 10.0, r.region, r.direction  # 2-GDP is (10.0, 1e-5)-DP
    (True, 'above', "D'|D")
  """
  s0 = _check_statistics(stats, "stats")
  s1 = _check_statistics(stats_neighbour, "stats_neighbour")
  delta = float(delta)
  if not (math.isfinite(delta) and 0.0 <= delta < 1.0):
    raise ValueError(f"delta must be in [0, 1), got {delta}.")
  confidence = _validate.float_in_open_interval(confidence, "confidence", 0.0, 1.0)
  if holdout:
    h0, h1 = s0.size // 2, s1.size // 2
    pick = empirical_epsilon(s0[:h0], s1[:h1], delta, confidence=confidence)
    if pick.epsilon <= 0.0:
      return pick._replace(num_samples=(s0.size - h0, s1.size - h1))
    row = _LABELS.index((pick.region, pick.direction))
    eps, cases = _all_bounds(s0[h0:], s1[h1:], np.asarray([pick.threshold]), delta, confidence)
    return _result(eps, cases, row, 0, np.asarray([pick.threshold]), (s0.size - h0,
                                                                        s1.size - h1))
  thresholds = np.unique(np.concatenate([s0, s1]))
  eps, cases = _all_bounds(s0, s1, thresholds, delta, confidence)
  row, col = np.unravel_index(np.argmax(eps), eps.shape)
  return _result(eps, cases, int(row), int(col), thresholds, (s0.size, s1.size))


def _result(eps, cases, row, col, thresholds, sizes) -> EpsilonLowerBound:
  region, direction = _LABELS[row]
  value = float(eps[row, col])
  if not value > 0.0:
    return EpsilonLowerBound(0.0, float("nan"), region, direction, 0.0, 1.0, sizes)
  num, den = cases[row]
  return EpsilonLowerBound(value, float(thresholds[col]), region, direction,
                           float(num[col]), float(den[col]), sizes)
