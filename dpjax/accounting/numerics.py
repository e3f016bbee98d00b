"""Host-side float64 numerics: erfcx, bracketed root finding, log-sum-exp.

Pure ``math`` and numpy, for concrete inputs only:

* :func:`_erfcx`, the scaled complementary error function ``exp(z^2)
  erfc(z)``, its slope :func:`_erfcx_slope` and the difference
  :func:`_erfcx_diff` without cancellation: the exact Gaussian conversion
  (:mod:`dpjax.accounting.conversions`) needs them deep in the tails;
* :func:`_brent_root` (Brent 1973) on a bracket found by :func:`_bracket`:
  each inverse conversion solves a monotone equation inside a bracket known
  to contain its root;
* :func:`_log1p_exp` (``log(1 + e^t)``) and :func:`_logsumexp`
  (``log sum_i e^{x_i}``), without overflow.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

_SQRT_PI = math.sqrt(math.pi)
_U = 2.0**-53  # unit roundoff of float64.


def _exp_square(z: float) -> float:
  """``exp(z*z)`` with the square formed exactly (Veltkamp split of z)."""
  c = 134217729.0 * z  # 2**27 + 1
  z_hi = c - (c - z)
  z_lo = z - z_hi
  return math.exp(z_hi * z_hi) * math.exp(z_lo * (2.0 * z_hi + z_lo))


def _erfcx(z: float) -> float:
  """Scaled complementary error function ``exp(z^2) erfc(z)`` for ``z >= 0``.

  ``z < 10``: the product, with ``exp(z^2)`` formed from an exact square and
  libm's ``erfc`` (accurate in the tail). ``z >= 10``: the asymptotic series
  ``1/(z sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2z^2)^k``, whose terms shrink below
  1e-17 long before they start to grow (the smallest term is ~exp(-z^2)).
  """
  if z < 10.0:
    return _exp_square(z) * math.erfc(z)
  inv = 1.0 / (2.0 * z * z)
  term, total, k = 1.0, 1.0, 1
  while abs(term) > 1e-17:
    term *= -(2 * k - 1) * inv
    total += term
    k += 1
  return total / (z * _SQRT_PI)


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(10)


def _erfcx_slope(s: float) -> float:
  """``-erfcx'(s) = 2/sqrt(pi) - 2 s erfcx(s) > 0`` for ``s >= 0``.

  Direct for ``s < 10`` (relative error ~1e-16 * 2 s^2); for ``s >= 10`` from
  the asymptotic series ``(1/(sqrt(pi) s^2)) sum_k (-1)^k (2k+1)!! / (2 s^2)^k``,
  free of the cancellation.
  """
  if s < 10.0:
    return 2.0 / _SQRT_PI - 2.0 * s * _erfcx(s)
  inv = 1.0 / (2.0 * s * s)
  term, total, k = 1.0, 1.0, 1
  while abs(term) > 1e-17:
    term *= -(2 * k + 1) * inv
    total += term
    k += 1
  return total / (_SQRT_PI * s * s)


def _erfcx_diff(u: float, d: float) -> float:
  """``erfcx(u) - erfcx(u + d)`` for ``u >= 0``, ``d > 0``, without cancellation.

  For ``d < 0.25`` it integrates ``-erfcx'`` over ``[u, u + d]`` with 10-point
  Gauss-Legendre (the integrand is entire and varies on a scale >= 1, so the
  rule is exact to rounding); for wider gaps the plain difference is accurate.
  """
  if d >= 0.25:
    return _erfcx(u) - _erfcx(u + d)
  half = 0.5 * d
  mid = u + half
  total = 0.0
  for node, weight in zip(_GL_NODES, _GL_WEIGHTS):
    total += float(weight) * _erfcx_slope(mid + half * float(node))
  return half * total


def _brent_root(
    f: Callable[[float], float],
    a: float,
    b: float,
    fa: float,
    fb: float,
    xtol: float = 1e-15,
    maxiter: int = 500,
) -> float:
  """Brent's bracketed root finder (Brent 1973, ch. 4) on ``[a, b]``.

  Requires ``fa`` and ``fb`` of opposite signs (or one of them zero). Combines
  inverse quadratic interpolation, secant and bisection; the bracket always
  contains a sign change, so it cannot wander off like an unbracketed solver.
  Stops when the bracket is below ``4 u |b| + xtol``.
  """
  if fa == 0.0:
    return a
  if fb == 0.0:
    return b
  if (fa > 0) == (fb > 0):
    raise RuntimeError(f"internal error: root not bracketed by [{a}, {b}] ({fa}, {fb}).")
  c, fc = a, fa
  d = e = b - a
  for _ in range(maxiter):
    if (fb > 0) == (fc > 0):
      c, fc = a, fa
      d = e = b - a
    if abs(fc) < abs(fb):
      a, b, c = b, c, b
      fa, fb, fc = fb, fc, fb
    tol = 4.0 * _U * abs(b) + 0.5 * xtol
    m = 0.5 * (c - b)
    if abs(m) <= tol or fb == 0.0:
      return b
    if abs(e) >= tol and abs(fa) > abs(fb):
      s = fb / fa
      if a == c:  # secant
        p = 2.0 * m * s
        q = 1.0 - s
      else:  # inverse quadratic interpolation
        q = fa / fc
        r = fb / fc
        p = s * (2.0 * m * q * (q - r) - (b - a) * (r - 1.0))
        q = (q - 1.0) * (r - 1.0) * (s - 1.0)
      if p > 0:
        q = -q
      else:
        p = -p
      if 2.0 * p < min(3.0 * m * q - abs(tol * q), abs(e * q)):
        e, d = d, p / q
      else:
        d = e = m
    else:
      d = e = m
    a, fa = b, fb
    b += d if abs(d) > tol else math.copysign(tol, m)
    fb = f(b)
  raise RuntimeError("internal error: Brent's method did not converge.")  # pragma: no cover


def _bracket(
    f: Callable[[float], float], x: float, step: float, want_positive: bool
) -> tuple[float, float]:
  """Walks from ``x`` by ``step`` (doubling) until ``f`` has the wanted sign."""
  fx = f(x)
  for _ in range(200):
    if (fx > 0) == want_positive and fx != 0.0:
      return x, fx
    x += step
    step *= 2.0
    fx = f(x)
  raise RuntimeError("internal error: could not bracket the root.")  # pragma: no cover


def _log1p_exp(t: float) -> float:
  """``log(1 + e^t)`` without overflow."""
  return t + math.log1p(math.exp(-t)) if t > 0 else math.log1p(math.exp(t))


def _logsumexp(x: np.ndarray) -> float:
  m = float(np.max(x)) if x.size else -math.inf
  if m == -math.inf:
    return -math.inf
  return m + math.log(float(np.sum(np.exp(x - m))))
