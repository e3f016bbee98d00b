"""zCDP privacy accounting: the accountant pytree, Gaussian budgets, conversions.

Privacy model (``spec-newton.md`` section 1): rho-zCDP (Bun & Steinke 2016,
arXiv 1605.02065) with add/remove neighbours. Rho composes additively, so the
accountant is a running sum that lives inside optimizer states; the noise scale
of every Gaussian mechanism is derived from its budget by :func:`gaussian_sigma`.

Two halves:

* In-graph (``jit``/``vmap``/``lax.scan`` safe): :class:`AccountantState`,
  :func:`init_accountant`, :func:`charge`, :func:`gaussian_zcdp`,
  :func:`gaussian_sigma`.
* Host side (float64, concrete inputs only): :func:`spent_rho`,
  :func:`epsilon_spent`, :func:`zcdp_to_epsilon`, :func:`epsilon_to_zcdp`,
  with the conversions of ``ecosystem.md`` section 3.2 (``METHODS``).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

__all__ = [
    "METHODS",
    "AccountantState",
    "init_accountant",
    "charge",
    "spent_rho",
    "epsilon_spent",
    "gaussian_zcdp",
    "gaussian_sigma",
    "zcdp_to_epsilon",
    "epsilon_to_zcdp",
    "resolve_budget",
]

METHODS = ("paper", "bun_steinke", "cks", "gaussian")

_ACCOUNTANT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


# ----------------------------------------------------------------------------
# Accountant state (in-graph).
# ----------------------------------------------------------------------------


class AccountantState(NamedTuple):
  """Running total of the zCDP budget spent: ``rho + rho_lo + rho_lo2`` exactly.

  A triple-word float (each word is a compensation term for the one before).
  Two float32 words hold only 48 bits, and the rounding of a repeated charge
  is biased, so a double-float drifts by ~n * 2^-50 after n charges (1e-12 at
  n = 1e4); the third word makes the per-step error ~2^-72 instead.

  Keep it inside a transform's NamedTuple state: ``optax.tree.get(state,
  "rho")`` then finds the leading word (a float32 reading, accurate to ~6e-8).
  Read the exact total with :func:`spent_rho`. Build it with
  :func:`init_accountant`, never by hand.
  """

  rho: jax.Array  # shape=() (or batch shape under vmap), float32/float64: leading word.
  rho_lo: jax.Array  # same shape/dtype: first compensation term, |rho_lo| <~ ulp(rho).
  rho_lo2: jax.Array  # same shape/dtype: second compensation term, |rho_lo2| <~ ulp(rho_lo).


def init_accountant(dtype: Any = None) -> AccountantState:
  """Returns an accountant with nothing spent.

  Args:
    dtype: ``float32`` or ``float64``; ``None`` means JAX's canonical float
      (``float32`` unless x64 is enabled). ``float64`` needs x64 enabled.

  Returns:
    ``AccountantState`` whose fields are 0-d zeros of ``dtype``.

  Examples:
    >>> from dpjax import accounting
    >>> state = accounting.init_accountant()
    >>> state.rho.dtype, accounting.spent_rho(state)
    (dtype('float32'), 0.0)
  """
  if dtype is None:
    dt = np.dtype(jax.dtypes.canonicalize_dtype(np.float64))
  else:
    try:
      dt = np.dtype(dtype)
    except TypeError as err:
      raise TypeError(
          f"dtype must be a numpy/jax float dtype such as jnp.float32, got {dtype!r}."
      ) from err
    if dt not in _ACCOUNTANT_DTYPES:
      raise ValueError(
          f"dtype must be float32 or float64, got {dt}; the accountant needs at "
          "least single precision."
      )
    if np.dtype(jax.dtypes.canonicalize_dtype(dt)) != dt:
      raise ValueError(
          f"dtype {dt} needs 64-bit JAX; enable it with "
          "jax.config.update('jax_enable_x64', True) or pass dtype=jnp.float32."
      )
  zero = jnp.zeros((), dt)
  return AccountantState(rho=zero, rho_lo=zero, rho_lo2=zero)


def _split3(x: Any, dtype: Any) -> tuple[Any, Any, Any]:
  """Splits a float array into three ``dtype`` words with ``w0 + w1 + w2 == x``.

  Exact when ``x`` is at most 3x wider than ``dtype`` (float64 into float32:
  24 + 24 + 24 >= 53 bits) and nothing underflows; each remainder is exact in
  the wide dtype (Sterbenz).
  """
  w0 = x.astype(dtype)
  r = x - w0.astype(x.dtype)
  w1 = r.astype(dtype)
  w2 = (r - w1.astype(x.dtype)).astype(dtype)
  return w0, w1, w2


def _split_charge(rho: Any, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[Any, Any, Any]:
  """Validates a charge and splits it exactly into three words of ``dtype``."""
  if isinstance(rho, jax.Array):
    if not jnp.issubdtype(rho.dtype, jnp.floating):
      raise TypeError(
          f"rho must be a floating array, got dtype {rho.dtype}; cast it with "
          "rho.astype(jnp.float32)."
      )
    if rho.shape not in ((), shape):
      raise ValueError(
          f"rho must be a scalar or have the accountant's shape {shape}, got shape "
          f"{rho.shape}."
      )
    if _validate.is_concrete(rho):
      host = np.asarray(jax.device_get(rho))
      _validate.check_finite(host, "rho")
      if np.any(host < 0):
        raise ValueError("rho must be >= 0: a privacy charge cannot be negative.")
    if np.dtype(rho.dtype).itemsize > dtype.itemsize:
      return _split3(rho, dtype)
    hi = rho.astype(dtype)
    zero = jnp.zeros_like(hi)
    return hi, zero, zero
  if isinstance(rho, (bool, np.bool_)) or not isinstance(rho, (numbers.Real, np.ndarray)):
    raise TypeError(f"rho must be a real number or float array, got {type(rho).__name__}.")
  arr = np.asarray(rho)
  if arr.dtype.kind not in "fiu":
    raise TypeError(f"rho must be a real number or float array, got dtype {arr.dtype}.")
  arr = arr.astype(np.float64)
  if arr.shape not in ((), shape):
    raise ValueError(
        f"rho must be a scalar or have the accountant's shape {shape}, got shape {arr.shape}."
    )
  _validate.check_finite(arr, "rho")
  if np.any(arr < 0):
    raise ValueError(f"rho must be >= 0: a privacy charge cannot be negative, got {rho!r}.")
  w0, w1, w2 = _split3(arr, dtype)
  return jnp.asarray(w0), jnp.asarray(w1), jnp.asarray(w2)


def _two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Knuth's branch-free TwoSum: ``s + e == a + b`` exactly, ``s = fl(a + b)``.

  ``s`` and ``s - a`` go through ``optimization_barrier`` so that no compiler
  rewrite such as ``(a + b) - a -> b`` can cancel the error term: with XLA's
  fast-math reassociation enabled, the unguarded version loses all
  compensation (1e-4 drift over 1e4 float32 charges); the guarded one stays exact.
  """
  s = jax.lax.optimization_barrier(a + b)
  b_virtual = jax.lax.optimization_barrier(s - a)
  a_virtual = s - b_virtual
  return s, (a - a_virtual) + (b - b_virtual)


def charge(state: AccountantState, rho: Any) -> AccountantState:
  """Composes a rho-zCDP mechanism: returns ``state`` with ``rho`` added.

  zCDP composes additively (Bun & Steinke 2016, Lemma 2.3). The sum is an
  error-free (TwoSum) triple-word addition: the only rounding is at the level
  of the third word, ~2^-72 of the total per charge for float32, so 1e5
  charges of a non-representable amount stay within ~1e-15 of the exact
  float64 total (plain float32 drifts by ~1e-4).

  Args:
    state: the accountant (possibly batched under ``vmap``).
    rho: the charge, ``>= 0``. A Python/numpy float (the usual case: charges are
      computed on the host) or an array wider than the accountant is split
      exactly into three words; a same-width jax array (e.g. a traced value)
      has zero lower words. Concrete charges are validated eagerly. Close over
      host-side amounts rather than passing them as ``jit`` arguments: a jit
      argument arrives as a float32 tracer, already rounded.

  Returns:
    The new ``AccountantState``.

  Raises:
    TypeError: ``state`` is not an ``AccountantState`` or ``rho`` is not real.
    ValueError: a concrete ``rho`` is negative, NaN or inf, or has a bad shape.

  Examples:
    >>> import jax
    >>> from dpjax import accounting
    >>> state = accounting.init_accountant()
    >>> step = jax.jit(lambda s: accounting.charge(s, 0.1))
    >>> naive = jax.numpy.float32(0.0)
    >>> for _ in range(10):
    ...   state, naive = step(state), naive + jax.numpy.float32(0.1)
    >>> float(naive), accounting.spent_rho(state)
    (1.0000001192092896, 1.0)
  """
  if not isinstance(state, AccountantState):
    raise TypeError(
        f"state must be an AccountantState (from init_accountant()), got "
        f"{type(state).__name__}."
    )
  dtype = np.dtype(state.rho.dtype)
  b0, b1, b2 = _split_charge(rho, dtype, tuple(state.rho.shape))
  s0, e0 = _two_sum(state.rho, b0)
  s1, e1 = _two_sum(state.rho_lo, b1)
  s1, e2 = _two_sum(s1, e0)
  s2 = (state.rho_lo2 + b2) + (e1 + e2)  # the only rounded sum: third-word level.
  # Renormalise (error-free) so that each word is below the ulp of the previous.
  t1, t2 = _two_sum(s1, s2)
  r0, x = _two_sum(s0, t1)
  r1, r2 = _two_sum(x, t2)
  return AccountantState(rho=r0, rho_lo=r1, rho_lo2=r2)


def spent_rho(state: AccountantState) -> float | np.ndarray:
  """Host-side float64 total ``rho + rho_lo + rho_lo2`` of an accountant.

  Args:
    state: a concrete ``AccountantState`` (call this outside ``jit``).

  Returns:
    A Python float, or a float64 numpy array for a batched state.

  Raises:
    TypeError: ``state`` is not an ``AccountantState``, or is traced.

  Examples:
    >>> from dpjax import accounting
    >>> state = accounting.charge(accounting.init_accountant(), 1e-5 / 3)
    >>> float(state.rho) == 1e-5 / 3, accounting.spent_rho(state) == 1e-5 / 3
    (False, True)
  """
  if not isinstance(state, AccountantState):
    raise TypeError(
        f"state must be an AccountantState (from init_accountant()), got "
        f"{type(state).__name__}."
    )
  if not all(_validate.is_concrete(w) for w in state):
    raise TypeError(
        "spent_rho needs a concrete state, not a traced value; call it outside jit "
        "(e.g. on the state returned by the compiled step)."
    )
  w0, w1, w2 = (np.asarray(jax.device_get(w), np.float64) for w in state)
  total = w0 + (w1 + w2)  # smallest first; float64 rounding only.
  return float(total) if total.ndim == 0 else total


def epsilon_spent(
    state: AccountantState, delta: Any, method: str = "cks"
) -> float | np.ndarray:
  """The (epsilon, delta) guarantee of everything charged to ``state`` so far.

  ``zcdp_to_epsilon(spent_rho(state), delta, method)``, elementwise for a
  batched state. Host side: call it outside ``jit``.

  Args:
    state: a concrete ``AccountantState``.
    delta: in ``(0, 1)``.
    method: one of ``METHODS`` (see :func:`zcdp_to_epsilon`; ``"gaussian"`` only
      when every charge came from a non-subsampled Gaussian mechanism).

  Returns:
    epsilon as a Python float, or a float64 array for a batched state.

  Examples:
    >>> from dpjax import accounting
    >>> state = accounting.charge(accounting.init_accountant(), 0.1)
    >>> round(accounting.epsilon_spent(state, 1e-5, "bun_steinke"), 4)
    2.246
  """
  _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  _validate.choice(method, "method", METHODS)
  total = spent_rho(state)
  if isinstance(total, float):
    return zcdp_to_epsilon(total, delta, method)
  return np.vectorize(lambda r: zcdp_to_epsilon(float(r), delta, method), otypes=[np.float64])(
      total
  )


# ----------------------------------------------------------------------------
# Gaussian mechanism: the one place where noise scales are derived.
# ----------------------------------------------------------------------------


def _check_positive(x: Any, name: str) -> None:
  """Eagerly checks that a concrete number or array is finite and > 0."""
  if isinstance(x, (bool, np.bool_)) or x is None:
    raise TypeError(f"{name} must be a positive number or array, got {type(x).__name__}.")
  if isinstance(x, jax.Array):
    if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer)):
      raise TypeError(f"{name} must be a real array, got dtype {x.dtype}.")
    if not _validate.is_concrete(x):
      return
    arr = np.asarray(jax.device_get(x))
  elif isinstance(x, (numbers.Real, np.ndarray)):
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
      raise TypeError(f"{name} must be a real number or array, got dtype {arr.dtype}.")
  else:
    raise TypeError(f"{name} must be a positive number or array, got {type(x).__name__}.")
  _validate.check_finite(arr, name)
  if np.any(arr <= 0):
    raise ValueError(f"{name} must be > 0, got {x!r}.")


def _sqrt(x: Any) -> Any:
  if isinstance(x, jax.Array):
    return jnp.sqrt(x)
  if isinstance(x, np.ndarray):
    return np.sqrt(x)
  return math.sqrt(x)


def gaussian_zcdp(sensitivity: Any, sigma: Any) -> Any:
  """zCDP budget of the Gaussian mechanism: ``rho = Delta^2 / (2 sigma^2)``.

  Bun & Steinke 2016, Proposition 1.6: adding ``N(0, sigma^2 I)`` to a query of
  L2 sensitivity ``Delta`` is ``Delta^2 / (2 sigma^2)``-zCDP.

  Args:
    sensitivity: L2 sensitivity ``Delta > 0`` (float or array).
    sigma: noise standard deviation ``> 0`` (float or array).

  Returns:
    ``rho``: a Python float for Python inputs, else an array (jit/vmap safe).
    Concrete inputs are validated eagerly; traced ones are not.

  Examples:
    >>> from dpjax import accounting
    >>> accounting.gaussian_zcdp(1.0, 5.0)
    0.02
  """
  _check_positive(sensitivity, "sensitivity")
  _check_positive(sigma, "sigma")
  return (sensitivity * sensitivity) / (2 * (sigma * sigma))


def gaussian_sigma(sensitivity: Any, rho: Any) -> Any:
  """Noise std for a rho-zCDP Gaussian mechanism: ``sigma = Delta / sqrt(2 rho)``.

  The inverse of :func:`gaussian_zcdp` (Bun & Steinke 2016, Prop. 1.6).

  Args:
    sensitivity: L2 sensitivity ``Delta > 0`` (float or array).
    rho: the budget given to this mechanism, ``> 0`` (a zero budget would need
      infinite noise).

  Returns:
    ``sigma``: a Python float for Python inputs, else an array.

  Examples:
    >>> from dpjax import accounting
    >>> accounting.gaussian_sigma(1.0, 0.02)
    5.0
  """
  _check_positive(sensitivity, "sensitivity")
  _check_positive(rho, "rho")
  return sensitivity / _sqrt(2 * rho)


# ----------------------------------------------------------------------------
# Host-side numerics: erfcx, bracketed root finding.
# ----------------------------------------------------------------------------

_SQRT2 = math.sqrt(2.0)
_SQRT_PI = math.sqrt(math.pi)
_LOG_HALF = math.log(0.5)
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


# ----------------------------------------------------------------------------
# Conversions.
# ----------------------------------------------------------------------------


def _bs_rho(eps: float, log_inv_delta: float) -> float:
  """Inverse of ``eps = rho + 2 sqrt(rho L)``: ``sqrt(rho) = eps/(sqrt(L) + sqrt(L+eps))``."""
  s = eps / (math.sqrt(log_inv_delta) + math.sqrt(log_inv_delta + eps))
  return s * s


def _log1p_exp(t: float) -> float:
  """``log(1 + e^t)`` without overflow."""
  return t + math.log1p(math.exp(-t)) if t > 0 else math.log1p(math.exp(t))


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

  Methods (``ecosystem.md`` section 3.2), from loosest to tightest:

  * ``"paper"``: inverse of the paper's sufficient map
    ``rho = eps^2 / (4 log(1/delta) + 4 eps)`` (``spec-newton.md`` section 1),
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
  (``spec-newton.md`` section 1). Round trips agree to ~1e-12 relative for
  eps in [1e-4, 1e3] and delta in [1e-30, 0.1).

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


def resolve_budget(
    n: int,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    method: str = "gaussian",
) -> tuple[float, float, float]:
  """The ``(rho, epsilon, delta)`` of a run given exactly one of ``epsilon`` and ``rho``.

  ``delta`` defaults to ``n**-2``. ``epsilon`` is converted to zCDP with
  :func:`epsilon_to_zcdp` (``method``); a given ``rho`` is reported as the
  epsilon of :func:`zcdp_to_epsilon`. Every argument is checked first, with
  a message that names it (``method`` as ``accounting``, the name the
  callers use).

  Examples:
    >>> from dpjax import accounting
    >>> rho, eps, delta = accounting.resolve_budget(10_000, epsilon=1.0)
    >>> round(rho, 6), eps, delta
    (0.019221, 1.0, 1e-08)
  """
  method = _validate.choice(method, "accounting", METHODS)
  if delta is None:
    delta = 1.0 / _validate.positive_int(n, "n") ** 2
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  if (epsilon is None) == (rho is None):
    raise ValueError(
        "pass exactly one privacy budget: epsilon=<eps> (converted to zCDP with "
        f"accounting={method!r} at delta) or rho=<total zCDP rho>; got "
        + ("neither." if epsilon is None else "both.")
    )
  if epsilon is not None:
    epsilon = _validate.positive_float(epsilon, "epsilon")
    rho = epsilon_to_zcdp(epsilon, delta, method)
  else:
    rho = _validate.positive_float(rho, "rho")
    epsilon = zcdp_to_epsilon(rho, delta, method)
  return rho, epsilon, delta
