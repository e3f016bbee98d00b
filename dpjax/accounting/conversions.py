"""Conversions between rho-zCDP and (epsilon, delta)-DP (host side, float64).

:func:`zcdp_to_epsilon` is the epsilon that rho-zCDP implies at ``delta``;
:func:`epsilon_to_zcdp` the largest rho that implies (epsilon, delta)-DP, its
inverse. The methods of :data:`METHODS`, loosest first:

* ``"paper"``: ``eps = 2 (rho + sqrt(rho (rho + log(1/delta))))`` (Ganesh et
  al. NeurIPS 2023, Sec. 3);
* ``"bun_steinke"``: ``eps = rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke
  2016, arXiv 1605.02065, Prop. 1.3);
* ``"cks"``: ``eps = min_alpha [rho alpha + log(1 - 1/alpha) - (log delta +
  log alpha) / (alpha - 1)]`` (Canonne, Kamath & Steinke 2020, arXiv
  2004.00010, Prop. 12), valid for any rho-zCDP mechanism;
* ``"gaussian"``: the exact privacy profile ``delta(eps) = Phi(-eps/mu + mu/2)
  - e^eps Phi(-eps/mu - mu/2)`` of mu-GDP with ``mu = sqrt(2 rho)`` (Balle &
  Wang 2018; Dong, Roth & Su 2019), valid only for compositions of
  non-subsampled Gaussian mechanisms.

:func:`_zcdp_epsilon_with_slack` also pays a total-variation slack ``T`` (the
floating-point-safe noise's, :func:`dpjax.mechanisms.noise.tv_slack`): the smallest eps
with ``delta_method(eps; rho) + (1 + e^eps) T <= delta``.
"""

from __future__ import annotations

import math
from typing import Any

from dpjax import _validate
from dpjax.accounting.numerics import _bracket, _brent_root, _erfcx, _erfcx_diff, _log1p_exp

__all__ = ["METHODS", "zcdp_to_epsilon", "epsilon_to_zcdp"]

METHODS = ("paper", "bun_steinke", "cks", "gaussian")

_SQRT2 = math.sqrt(2.0)
_LOG_HALF = math.log(0.5)


def _gaussian_log_delta(eps: float, mu: float) -> float:
  """``log delta(eps)`` of mu-GDP (Balle & Wang 2018, Thm 8; Dong, Roth & Su 2019).

  ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``. With
  ``x = eps/mu``, ``h = mu/2`` (so ``eps = 2 x h``):

  * ``x > h``: both terms share ``exp(-(x-h)^2/2)``, and
    ``delta = exp(-(x-h)^2/2) [erfcx((x-h)/sqrt2) - erfcx((x+h)/sqrt2)] / 2``,
    which neither overflows (large eps) nor underflows (tiny delta) in logs;
    the erfcx difference is integrated when the gap is small (tiny mu).
  * ``x <= h``, ``eps <= 1``: ``delta = [erf((h-x)/sqrt2) + erf((x+h)/sqrt2)] / 2
    - expm1(eps) erfc((x+h)/sqrt2) / 2`` (a sum of positives, then a small
    correction; no catastrophic cancellation for small mu).
  * ``x <= h``, ``eps > 1``: then ``mu > sqrt 2`` and ``delta > 0.2``, so the
    direct ``Phi(a) - exp(-(x-h)^2/2) erfcx((x+h)/sqrt2) / 2`` is accurate.
  """
  x = eps / mu
  h = 0.5 * mu
  if x > h:
    u = (x - h) / _SQRT2
    return _LOG_HALF - u * u + math.log(_erfcx_diff(u, _SQRT2 * h))
  a = (h - x) / _SQRT2
  b = (x + h) / _SQRT2
  if eps <= 1.0:
    val = 0.5 * (math.erf(a) + math.erf(b)) - 0.5 * math.expm1(eps) * math.erfc(b)
  else:  # mu > sqrt(2), delta > 0.2: no cancellation, and e^eps must not overflow.
    val = 0.5 * math.erfc(-a) - 0.5 * math.exp(-a * a) * _erfcx(b)
  return math.log(val) if val > 0.0 else -math.inf


def _bs_rho(eps: float, log_inv_delta: float) -> float:
  """Inverse of ``eps = rho + 2 sqrt(rho L)``: ``sqrt(rho) = eps/(sqrt(L) + sqrt(L+eps))``."""
  s = eps / (math.sqrt(log_inv_delta) + math.sqrt(log_inv_delta + eps))
  return s * s


def _cks_log_alpha_m1(rho: float, log_delta: float) -> float:
  """``t* = log(alpha* - 1)``, the minimiser of the CKS bound over alpha > 1.

  With ``g(alpha) = rho alpha + log(1 - 1/alpha) - (log delta + log alpha)/(alpha-1)``
  one finds ``g'(alpha) = rho + log(delta alpha) / (alpha - 1)^2``, so g is
  unimodal and ``alpha*`` is the unique root of the increasing function
  ``k(alpha) = rho (alpha-1)^2 + log delta + log alpha``, with ``k(1) < 0`` and
  ``k > 0`` at ``alpha = min(1 + sqrt(log(1/delta)/rho), 1/delta)``.
  """
  log_inv_delta = -log_delta
  log_rho = math.log(rho)

  def k(t: float) -> float:
    return math.exp(log_rho + 2.0 * t) + log_delta + _log1p_exp(t)

  # log(1/delta - 1) = L + log1p(-delta), written to avoid overflow.
  t_bs = 0.5 * (math.log(log_inv_delta) - log_rho)  # alpha = 1 + sqrt(L / rho)
  t_inv_delta = log_inv_delta + math.log1p(-math.exp(log_delta))  # alpha = 1 / delta
  t_hi = min(t_bs, t_inv_delta)
  t_hi, k_hi = _bracket(k, t_hi, 1.0, want_positive=True)
  t_lo, k_lo = _bracket(k, t_hi - 1.0, -1.0, want_positive=False)
  return _brent_root(k, t_lo, t_hi, k_lo, k_hi, xtol=1e-13)


def _cks_eps_at(t: float, rho: float, log_delta: float) -> float:
  """The CKS bound ``g(alpha)`` at ``alpha = 1 + e^t`` (CKS 2020, Prop. 12)."""
  log_alpha = _log1p_exp(t)
  return (
      rho + math.exp(math.log(rho) + t) + (t - log_alpha)
      - (log_delta + log_alpha) * math.exp(-t)
  )


def _cks_eps_raw(rho: float, log_delta: float) -> float:
  """``min_alpha g(alpha)`` for ``rho > 0``: increasing in rho, may be < 0."""
  return _cks_eps_at(_cks_log_alpha_m1(rho, log_delta), rho, log_delta)


def zcdp_to_epsilon(rho: Any, delta: Any, method: str = "cks") -> float:
  """Epsilon such that rho-zCDP implies (epsilon, delta)-DP.

  Methods, from loosest to tightest:

  * ``"paper"``: inverse of the paper's sufficient map
    ``rho = eps^2 / (4 log(1/delta) + 4 eps)`` (Ganesh et al. 2023, Sec. 3,
    after Bun & Steinke 2016, Lemma 3.5),
    ``eps = 2 (rho + sqrt(rho (rho + log(1/delta))))``.
  * ``"bun_steinke"``: ``eps = rho + 2 sqrt(rho log(1/delta))`` (Bun & Steinke
    2016, Prop. 1.3).
  * ``"cks"``: Canonne, Kamath & Steinke 2020 (arXiv 2004.00010), Prop. 12 /
    Cor. 13, minimised over continuous alpha > 1:
    ``eps = min_alpha [rho alpha + log(1 - 1/alpha) - (log delta + log alpha)/(alpha - 1)]``.
    The minimiser solves ``rho (alpha-1)^2 = -log(delta alpha)`` (bracketed).
    Valid for any rho-zCDP mechanism; the default.
  * ``"gaussian"``: exact conversion of mu-GDP with ``mu = sqrt(2 rho)``:
    ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` (Balle &
    Wang 2018; Dong, Roth & Su 2019), solved for eps by a bracketed root finder
    in log space. **Only valid when the whole run is an (adaptive) composition
    of non-subsampled Gaussian mechanisms** (DP-GD, double-noise DP-Newton);
    it is not a bound for a generic zCDP mechanism.

  ``rho = 0`` gives ``0.0`` for every method. The result is clipped at 0: when
  the bound would be negative (rho tiny next to delta), ``(0, delta)``-DP holds.

  Args:
    rho: total zCDP budget ``>= 0`` (Python/numpy float or concrete 0-d array).
    delta: in ``(0, 1)``.
    method: one of ``METHODS``.

  Returns:
    epsilon as a Python float (computed in float64 on the host).

  Raises:
    TypeError: a traced (jit) or non-scalar argument; call this outside jit.
    ValueError: ``rho < 0``, ``delta`` outside (0, 1), NaN/inf, unknown method.

  Examples:
    >>> from dpjax import accounting
    >>> [round(accounting.zcdp_to_epsilon(0.1, 1e-5, m), 4) for m in accounting.METHODS]
    [2.3553, 2.246, 1.9142, 1.7601]
  """
  rho = _validate.nonnegative_float(rho, "rho")
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  method = _validate.choice(method, "method", METHODS)
  if rho == 0.0:
    return 0.0
  log_delta = math.log(delta)
  log_inv_delta = -log_delta
  if method == "paper":
    return 2.0 * (rho + math.sqrt(rho * (rho + log_inv_delta)))
  eps_bs = rho + 2.0 * math.sqrt(rho * log_inv_delta)
  if method == "bun_steinke":
    return eps_bs
  if method == "cks":
    return max(0.0, _cks_eps_raw(rho, log_delta))
  # "gaussian": delta(eps) decreases from delta(0) = erf(mu / (2 sqrt 2)).
  mu = math.sqrt(2.0 * rho)
  delta0 = math.erf(mu / (2.0 * _SQRT2))
  if delta >= delta0:
    return 0.0

  def f(log_eps: float) -> float:  # decreasing in log_eps
    return _gaussian_log_delta(math.exp(log_eps), mu) - log_delta

  # Exact Gaussian eps <= Bun-Steinke eps (BS is valid for this mechanism).
  s_hi, f_hi = _bracket(lambda s: -f(s), math.log(eps_bs), 1.0, want_positive=True)
  s_lo, f_lo = _bracket(f, s_hi - 1.0, -1.0, want_positive=True)
  return math.exp(_brent_root(f, s_lo, s_hi, f_lo, -f_hi))


def epsilon_to_zcdp(epsilon: Any, delta: Any, method: str = "cks") -> float:
  """Largest rho such that rho-zCDP implies (epsilon, delta)-DP.

  The inverse of :func:`zcdp_to_epsilon` for the same ``method`` (see there
  for the formulas and for when ``"gaussian"`` is valid). ``"paper"`` and
  ``"bun_steinke"`` are closed forms; ``"cks"`` and ``"gaussian"`` use Brent's
  method on a log scale inside a bracket that provably contains the root
  (the Bun-Steinke rho is a lower end), so they cannot silently return a start
  point as the reference code's ``fsolve(x0=0.001)`` did for eps < 0.12
  (it then returned rho = 0.001 whatever eps was asked for). Round trips
  agree to ~1e-12 relative for eps in [1e-4, 1e3] and delta in [1e-30, 0.1).

  Args:
    epsilon: target epsilon ``> 0``.
    delta: target delta in ``(0, 1)``.
    method: one of ``METHODS``.

  Returns:
    rho as a Python float.

  Raises:
    TypeError: a traced (jit) or non-scalar argument; call this outside jit.
    ValueError: ``epsilon <= 0``, ``delta`` outside (0, 1), NaN/inf, unknown method.

  Examples:
    >>> from dpjax import accounting
    >>> rho = accounting.epsilon_to_zcdp(1.0, 1e-8, "paper")
    >>> round(rho, 6)
    0.012873
    >>> round(accounting.zcdp_to_epsilon(rho, 1e-8, "paper"), 12)
    1.0
  """
  eps = _validate.positive_float(epsilon, "epsilon")
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  method = _validate.choice(method, "method", METHODS)
  log_delta = math.log(delta)
  log_inv_delta = -log_delta
  if method == "paper":
    return eps * eps / (4.0 * log_inv_delta + 4.0 * eps)
  rho_bs = _bs_rho(eps, log_inv_delta)
  if method == "bun_steinke":
    return rho_bs
  if method == "cks":

    def k(log_rho: float) -> float:  # increasing
      return _cks_eps_raw(math.exp(log_rho), log_delta) - eps

    y_lo, k_lo = _bracket(k, math.log(rho_bs), -1.0, want_positive=False)
    y_hi, k_hi = _bracket(k, y_lo + 0.5, 0.5, want_positive=True)
    return math.exp(_brent_root(k, y_lo, y_hi, k_lo, k_hi))

  def g(log_mu: float) -> float:  # increasing in mu
    return _gaussian_log_delta(eps, math.exp(log_mu)) - log_delta

  m_lo, g_lo = _bracket(g, 0.5 * math.log(2.0 * rho_bs), -1.0, want_positive=False)
  m_hi, g_hi = _bracket(g, m_lo + 0.5, 0.5, want_positive=True)
  log_mu = _brent_root(g, m_lo, m_hi, g_lo, g_hi)
  return 0.5 * math.exp(2.0 * log_mu)


def _zcdp_epsilon_with_slack(rho: float, delta: float, method: str, slack: float) -> float:
  """Smallest eps with ``delta_method(eps; rho) + (1 + e^eps) slack <= delta``.

  ``slack == 0`` is :func:`zcdp_to_epsilon` itself. Otherwise the map
  ``eps -> zcdp_to_epsilon(rho, delta - (1 + e^eps) slack)`` is nondecreasing
  and its least fixed point is reached from below by iterating from
  ``delta - 2 slack`` (TV composition: a mechanism within TV ``slack`` of an
  (eps, delta')-DP one is (eps, delta' + (1 + e^eps) slack)-DP).
  """
  if slack == 0.0:
    return zcdp_to_epsilon(rho, delta, method)
  eps = None
  for _ in range(100):
    tv = slack * (1.0 + (1.0 if eps is None else math.exp(min(eps, 700.0))))
    if tv >= delta:
      return math.inf
    nxt = zcdp_to_epsilon(rho, delta - tv, method)
    if eps is not None and nxt <= eps:
      return eps
    eps = nxt
  return eps  # pragma: no cover - the iteration converges in a few steps.
