"""The exact lattice sampler behind :mod:`dpjax.mechanisms.noise`: table, planning, integer noise.

The construction and the argument for it are in the docstring of
:mod:`dpjax.mechanisms.noise`, which is the only module that releases values
through it. Here: the alias table of the discrete Gaussian ``N_Z(0, s^2)``
built once in exact integer arithmetic, the public planning of the grid
``2^e`` and the multipliers ``(L1, L2)`` (on the host and, for traced budgets,
in the graph), the integer noise ``R = L1 A + L2 B + C`` from three table
draws, and the exact float release of ``gamma (round(v / gamma) + R)``
(Canonne, Kamath & Steinke, NeurIPS 2020, for the discrete Gaussian; Walker
1977 for the alias method).
"""

from __future__ import annotations

import decimal
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


__all__ = ["MAX_MULTIPLIER", "Plan", "S_MAX", "S_MIN", "TABLE_SIGMA", "Table", "draw_atoms",
           "integer_noise", "plan", "table", "tv_per_coordinate"]

TABLE_SIGMA = 682  # parameter s of the table's discrete Gaussian N_Z(0, s^2).
TABLE_BITS = 14  # 2^14 alias buckets.
THRESHOLD_BITS = 96  # each bucket's threshold, three 32-bit words.
TAIL = 11.5  # the table covers [-TAIL * s, TAIL * s]; every atom there has weight >= 8.
MAX_MULTIPLIER = TABLE_SIGMA // 2  # L1, L2 <= 341 keep every level smooth (s' >= 2).
_NUM_WORDS = 12  # random words per coordinate: (index, 3 threshold words) x 3 draws.
_HALF_WIDTH = int(TAIL * TABLE_SIGMA)  # 7843
_FIXED_BITS = 320  # fixed-point precision of the table construction.
# Relative margin on s^2 of the (float32) planning.
_GRAPH_MARGIN = 2.0**-14


# ----------------------------------------------------------------------------
# The alias table of N_Z(0, TABLE_SIGMA^2), built once in exact integer arithmetic.
# ----------------------------------------------------------------------------


class Table(NamedTuple):
  """The sampler's alias table and its exact distance from the discrete Gaussian."""

  rows: np.ndarray  # shape=(2^14, 4), uint32: threshold words (most significant first), alias.
  weights: tuple  # Python ints, length 2^14: bucket-atom weights, summing to 2^(14+96).
  tv: float  # upper bound on TV(table law, N_Z(0, s^2)) over all of Z (tails included).


def _fixed_point_gaussian(s: int, half_width: int, bits: int) -> list[int]:
  """``round(q^(r^2) 2^bits)`` for ``r = 0..half_width``, ``q = exp(-1/(2 s^2))``.

  ``q`` comes from ``decimal`` at 110 digits; the powers from the recurrence
  ``q^((r+1)^2) = q^(r^2) q^(2r+1)`` in ``bits``-bit fixed point, truncating at
  each product (at most ``4 half_width`` ulps of ``2^-bits``: negligible next to
  the table's ``2^-110`` resolution).
  """
  ctx = decimal.Context(prec=110)
  q = ctx.exp(ctx.divide(decimal.Decimal(-1), decimal.Decimal(2 * s * s)))
  one = 1 << bits
  qf = int(ctx.multiply(q, decimal.Decimal(one)).to_integral_value(rounding=decimal.ROUND_FLOOR))
  q2 = qf * qf >> bits
  p = [one]
  r = qf  # q^(2c+1) at c = 0
  for _ in range(half_width):
    p.append(p[-1] * r >> bits)
    r = r * q2 >> bits
  return p


@functools.lru_cache(maxsize=1)
def table() -> Table:
  """The alias table (built on first use, ~50 ms) with its exact TV bound.

  Atoms ``c = -7843..7843`` (11.5 std) sit in buckets ``c + 7843``; the 697
  spare buckets hold weight 0. Every atom has weight at least 8, so the
  support is exactly that interval. Integer weights ``w_c`` summing to ``2^110`` are the
  discrete Gaussian's probabilities rounded by largest remainders; Vose's
  alias construction on these integers is exact, so the sampler's law is
  ``w_c / 2^110`` exactly. ``tv`` bounds ``1/2 sum_c |w_c/2^110 - P(c)|``
  over all of Z for ``P = N_Z(0, 682^2)``: the rounding (computed) plus the
  mass beyond 12 std (bounded by a geometric series).

  Examples:
    >>> from dpjax.mechanisms import noise
    >>> t = noise.table()
    >>> t.rows.shape, sum(t.weights) == 2 ** 110, t.tv < 1e-29
    ((16384, 4), True, True)
  """
  n_buckets, cap_bits = 1 << TABLE_BITS, THRESHOLD_BITS
  s, m = TABLE_SIGMA, _HALF_WIDTH
  p = _fixed_point_gaussian(s, m, _FIXED_BITS)
  atoms = [p[abs(c)] for c in range(-m, m + 1)]
  z = sum(atoms)
  total = 1 << (TABLE_BITS + cap_bits)
  w = [a * total // z for a in atoms]
  order = sorted(range(len(atoms)), key=lambda i: -((atoms[i] * total) % z))
  for i in order[: total - sum(w)]:
    w[i] += 1
  assert min(w) >= 8, "an atom of the table would be impossible"
  w += [0] * (n_buckets - len(w))
  # Vose's alias method, exact in integers: each bucket holds 2^96.
  cap = 1 << cap_bits
  thr, alias, left = [0] * n_buckets, list(range(n_buckets)), list(w)
  small = [i for i in range(n_buckets) if left[i] < cap]
  large = [i for i in range(n_buckets) if left[i] >= cap]
  while small and large:
    i, j = small.pop(), large.pop()
    thr[i], alias[i] = left[i], j
    left[j] -= cap - left[i]
    (small if left[j] < cap else large).append(j)
  for i in small + large:  # exactly full: always the bucket's own atom.
    thr[i], alias[i] = 0, i
  rows = np.zeros((n_buckets, 4), np.uint32)
  for i in range(n_buckets):
    rows[i] = ((thr[i] >> 64) & 0xFFFFFFFF, (thr[i] >> 32) & 0xFFFFFFFF, thr[i] & 0xFFFFFFFF,
               alias[i])
  # TV against the truncated discrete Gaussian (exact rational), then its tail.
  rounding = sum(abs(wi * z - a * total) for wi, a in zip(w, atoms)) / (2 * z * total)
  q = math.exp(-1.0 / (2 * s * s))
  tail_mass = 2 * q ** ((m + 1) ** 2) / (1 - q ** (2 * m + 3)) / (z / (1 << _FIXED_BITS))
  tv = (rounding + tail_mass + 2.0**-250) * (1 + 1e-9)
  return Table(rows=rows, weights=tuple(w), tv=tv)


def _s_equiv_squared_max() -> float:
  l = MAX_MULTIPLIER
  return float(TABLE_SIGMA**2 * (l * l * (l * l + 1) + 1))


# Largest continuous-equivalent std the sampler produces (~7.93e7), and the
# smallest any plan uses: a minimal grid puts s above half the maximum.
S_MAX = math.sqrt(_s_equiv_squared_max()) * (1 - 1e-6)
S_MIN = S_MAX / 4


@functools.lru_cache(maxsize=1)
def tv_per_coordinate() -> float:
  """``tau``: TV distance of one released integer from ``round(N(0, s^2))``, any plan.

  Three table draws, two lattice levels (theta factor, ``s' >= 2``), and the
  discrete-versus-rounded Gaussian gap at the smallest ``s`` a plan uses
  (``S_MIN``), with the 11.5-std tails of both.

  Examples:
    >>> from dpjax.mechanisms import noise
    >>> 0 < noise.tv_per_coordinate() < 2e-28
    True
  """
  t = table()
  s_prime_sq = TABLE_SIGMA**2 / (MAX_MULTIPLIER**2 + 1)
  eps_theta = math.exp(-2 * math.pi**2 * s_prime_sq) / (1 - math.exp(-6 * math.pi**2 * s_prime_sq))
  conv = 2 * eps_theta / (1 - 2 * eps_theta)
  gauss_tail = math.erfc(TAIL / math.sqrt(2))
  rounded = TAIL**4 / (1000 * S_MIN**4) + 2 * gauss_tail
  return (3 * t.tv + 2 * conv + rounded) * (1 + 1e-6)


# ----------------------------------------------------------------------------
# Planning: the grid 2^e and the multipliers (L1, L2), from public values only.
# ----------------------------------------------------------------------------


class Plan(NamedTuple):
  """A host-side plan for one release (all public)."""

  exponent: int  # e: the grid is gamma = 2^e.
  l1: int  # inner lattice multiplier, 1..341.
  l2: int  # outer lattice multiplier, 1..341.
  std: float  # gamma * s_R: the std of the noise actually added (>= noise_std).


def _plan_core(xp: Any, sigma: Any, delta: Any, size: int):
  """``(e, L1, L2, feasible)`` in float32 arithmetic, identically for ``xp = numpy`` and ``jax.numpy``.

  One algorithm serves concrete budgets (numpy, on the host) and traced ones
  (in the graph), so that a release does not depend on whether its budget was
  traced: every step is a correctly rounded float32 operation, in the same
  order, and the exponent comes from the bits of a float32 (exact), not ``log2``.
  Privacy needs only that the chosen ``(e, L1, L2)`` give ``s_c >= sigma /
  2^e + sqrt(size) sigma / delta`` in exact arithmetic; the relative margin
  ``2^-14`` on ``s^2`` covers every float32 rounding here (each ``<= 2^-24``).
  """
  f32 = np.float32
  sigma = xp.asarray(sigma, dtype=f32)
  delta = xp.asarray(delta, dtype=f32)
  s_max = f32(S_MAX * (1 - 2.0**-12))
  c = f32(math.sqrt(size)) * sigma / delta
  feasible = (c < f32(0.5) * s_max) & (sigma > f32(0)) & (sigma < f32(np.inf))
  room = xp.where(feasible, s_max - c, s_max)
  e = _ceil_log2_xp(xp, xp.where(feasible, sigma, f32(1)) / room)
  e = xp.clip(e, -117, 117)
  e = xp.where(sigma * _pow2_xp(xp, -e) + c > s_max, e + 1, e)
  e = xp.where(sigma * _pow2_xp(xp, 1 - e) + c <= s_max, e - 1, e)
  s_needed = sigma * _pow2_xp(xp, -e) + c
  feasible = feasible & (s_needed >= f32(S_MIN))
  q = xp.maximum(s_needed * s_needed * f32(1 + _GRAPH_MARGIN) / f32(TABLE_SIGMA**2), f32(1))
  l1 = xp.arange(1, MAX_MULTIPLIER + 1, dtype=f32)
  base = l1 * l1 + f32(1)
  l2 = xp.maximum(xp.ceil(xp.sqrt(q / base)), f32(1))
  l2 = xp.where(l2 * l2 * base < q, l2 + f32(1), l2)
  p = xp.where(l2 <= f32(MAX_MULTIPLIER), l2 * l2 * base, f32(np.inf))
  i = xp.argmin(p)
  return e, l1[i].astype(np.int32), l2[i].astype(np.int32), feasible


def _ceil_log2_xp(xp: Any, x: Any) -> Any:
  """``ceil(log2(x))`` as int32, exactly, for a positive normal float32 ``x`` (numpy or jax).

  From the bits: the unbiased exponent, plus one unless the fraction is zero
  (``x`` a power of two). A subnormal ``x`` gives ``-127`` or ``-126``,
  which the caller clips to ``-117`` like any ``x < 2^-117``.
  """
  if xp is np:
    bits = np.asarray(x, np.float32).view(np.int32)
  else:
    bits = jax.lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.int32)
  biased = (bits >> np.int32(23)) & np.int32(0xFF)
  inexact = (bits & np.int32(0x7FFFFF)) != 0
  return (biased - np.int32(127) + inexact.astype(np.int32)).astype(np.int32)


def _pow2_xp(xp: Any, e: Any) -> Any:
  """``2^e`` in float32 from its bits, for an int32 ``e`` in the normal range (numpy or jax)."""
  bits = (xp.asarray(e, dtype=np.int32) + np.int32(127)) << np.int32(23)
  if xp is np:
    return np.asarray(bits, np.int32).view(np.float32)
  return jax.lax.bitcast_convert_type(bits, jnp.float32)


@functools.lru_cache(maxsize=4096)
def plan(noise_std: float, sensitivity: float, size: int) -> Plan:
  """The grid and multipliers for a release of ``size`` coordinates (host).

  ``c = sqrt(size) noise_std / sensitivity`` is the rounding's cost in integer
  units; ``e`` is the smallest exponent with ``noise_std / 2^e + c <= S_MAX``
  (the finest grid the sampler affords), and ``(L1, L2)`` give the smallest
  ``s_R`` whose matched continuous std exceeds ``noise_std / 2^e + c`` with a
  ``2^-14`` relative margin: the same float32 computation as for a traced
  budget (:func:`_plan_core`), so a release never depends on whether its
  budget was traced.

  Raises:
    ValueError: the release needs more integer resolution than the sampler has
      (``c >= S_MAX / 2``: an enormous ``size`` at a tiny budget), or
      ``noise_std`` is outside ``[2^-90, 2^90]``.

  Examples:
    >>> from dpjax.mechanisms import noise
    >>> p = noise.plan(0.02, 1e-3, 3)
    >>> p.exponent, 0.02 <= p.std < 0.02 * 1.0001
    (-31, True)
  """
  sigma, delta = float(noise_std), float(sensitivity)
  if not (2.0**-90 <= sigma <= 2.0**90):
    raise ValueError(
        f"noise_std must be in [2^-90, 2^90] for the exact sampler, got {sigma!r}."
    )
  c = math.sqrt(size) * sigma / delta
  if c >= 0.5 * S_MAX * (1 - 2.0**-10):
    raise ValueError(
        f"an exact Gaussian release of {size} coordinates with noise_std/sensitivity = "
        f"{sigma / delta:.3g} needs more integer resolution than the sampler has "
        f"(sqrt(size) * noise_std / sensitivity = {c:.3g} >= {0.5 * S_MAX:.3g}); "
        "release fewer coordinates at a time or spend a larger budget per release."
    )
  e, l1, l2, feasible = _plan_core(np, sigma, delta, size)
  if not bool(feasible):  # pragma: no cover - excluded by the checks above
    raise ValueError(f"no exact plan for noise_std={sigma!r}, sensitivity={delta!r}.")
  e, l1, l2 = int(e), int(l1), int(l2)
  s_r = math.sqrt(TABLE_SIGMA**2 * (l2 * l2 * (l1 * l1 + 1) + 1))
  return Plan(exponent=e, l1=l1, l2=l2, std=math.ldexp(s_r, e))


def _plan_in_graph(sigma: jax.Array, delta: jax.Array, size: int):
  """:func:`_plan_core` in the graph (traced budgets)."""
  return _plan_core(jnp, sigma, delta, size)


# ----------------------------------------------------------------------------
# Sampling.
# ----------------------------------------------------------------------------


def _draws(bits: jax.Array) -> jax.Array:
  """Three alias draws per element from 12 words: ``(3, *shape)`` int32 atoms.

  Word ``j`` of draw ``i`` is ``bits[3 j + i]``: word 0 picks the bucket, words
  1-3 are a 96-bit uniform compared with the bucket's threshold; below it the
  bucket's atom, else its alias. One gather serves the three draws.
  """
  b = bits.reshape((4, 3) + bits.shape[1:])
  idx = (b[0] & jnp.uint32((1 << TABLE_BITS) - 1)).astype(jnp.int32)
  rows = jnp.asarray(table().rows).at[idx].get(mode="promise_in_bounds")  # (3, *shape, 4)
  t0, t1, t2, al = rows[..., 0], rows[..., 1], rows[..., 2], rows[..., 3]
  lt = (b[1] < t0) | ((b[1] == t0) & ((b[2] < t1) | ((b[2] == t1) & (b[3] < t2))))
  return jnp.where(lt, idx, al.astype(jnp.int32)) - _HALF_WIDTH


def integer_noise(key: jax.Array, shape: tuple[int, ...], l1: Any, l2: Any) -> jax.Array:
  """``R = L2 (L1 C + F1) + F2``: int32 noise, law within ``tau`` of ``round(N(0, s^2))``.

  ``C, F1, F2`` are three alias-table draws (12 random 32-bit words per
  element). ``|R| <= 341 * 342 * 7843 + 7843 < 2^31``.

  Examples:
    >>> import jax
    >>> from dpjax.mechanisms import noise
    >>> r = noise.integer_noise(jax.random.key(0), (4,), 2, 3)
    >>> r.dtype, r.shape
    (dtype('int32'), (4,))
  """
  size = int(np.prod(shape, dtype=np.int64))
  return _combine(draw_atoms(key, size).reshape((3,) + tuple(shape)), l1, l2)


def draw_atoms(key: jax.Array, size: int) -> jax.Array:
  """``(3, size)`` int32: the three table draws ``C, F1, F2`` of ``size`` released coordinates.

  They do not depend on the plan, so a transform that makes several releases
  in one step may draw the atoms of all of them at once (one sampler in the
  program instead of several) and pass each release its slice
  (``add_gaussian(..., atoms=...)``). Every slice must be used once.

  Examples:
    >>> import jax
    >>> from dpjax.mechanisms import noise
    >>> noise.draw_atoms(jax.random.key(0), 5).shape
    (3, 5)
  """
  # Drawn flat and reshaped: the same words, and XLA compiles this form faster.
  bits = jax.random.bits(key, (_NUM_WORDS * int(size),), jnp.uint32)
  return _draws(bits.reshape((_NUM_WORDS, int(size))))


def _combine(atoms: jax.Array, l1: Any, l2: Any) -> jax.Array:
  l1 = jnp.asarray(l1, jnp.int32)
  l2 = jnp.asarray(l2, jnp.int32)
  return l2 * (l1 * atoms[0] + atoms[1]) + atoms[2]


def _pow2(e: Any, dtype: Any) -> Any:
  """``2^e`` exactly: a Python float for a host exponent, else built from its bits (normal range)."""
  if isinstance(e, int):
    return float(2.0**e)
  if np.dtype(dtype) == np.float64:
    bits = (jnp.asarray(e, jnp.int64) + 1023) << 52
    return jax.lax.bitcast_convert_type(bits, jnp.float64)
  bits = (jnp.asarray(e, jnp.int32) + 127) << 23
  return jax.lax.bitcast_convert_type(bits, jnp.float32)


# |v / gamma| is clipped here (public, 1-Lipschitz): at least ~5e7 noise stds in float32
# (the exact split needs |a| < 2^53), ~5e10 in float64.
_CLAMP = 2.0**52
_CLAMP64 = 2.0**62
_SPLIT = 1.5 * 2.0**54  # fl(a + _SPLIT) - _SPLIT rounds a to a multiple of 2^31 (|a| < 2^53).


def _release_leaf(key, v, e, l1, l2, atoms=None):
  """``gamma * (round(v / gamma) + R)`` with the integer sum exact; in ``v``'s dtype.

  float32: ``a = a_hi + a_lo`` exactly, ``a_hi`` a multiple of ``2^31`` (the
  magic-number split, exact for ``|a| < 2^53``) and ``|a_lo| <= 2^30``; then
  ``t = a_lo + R`` is exact in int32 (``|R| < 2^30``), and ``m = A + t_lo`` with
  ``A = a_hi + 2^31 k`` and ``t_lo = t - 2^31 k`` in ``[-2^30, 2^30)``: the unique
  centred decomposition of the exact integer ``m``, so the output ``fl(A +
  t_lo)`` is a function of ``m`` alone, within ``2^-24`` of ``m`` relative.
  float64: ``a + R`` is exact.
  """
  out_dtype = v.dtype
  wide = out_dtype == jnp.float64
  work = jnp.float64 if wide else jnp.float32
  x = v.astype(work) * _pow2(-e, work)  # exact: a power-of-two scaling
  clamp = _CLAMP64 if wide else _CLAMP
  x = jnp.where(jnp.isnan(x), 0.0, jnp.clip(x, -clamp, clamp))
  a = jnp.round(x)
  if atoms is None:
    r = integer_noise(key, v.shape, l1, l2)
  else:
    r = _combine(atoms.reshape((3,) + v.shape), l1, l2)
  up = _pow2(e, work)
  if wide:  # both exact; the sum is correctly rounded, a function of a + r alone
    return ((a + r.astype(jnp.float64)) * up).astype(out_dtype)
  return (_exact_sum_f32(a, r) * up).astype(out_dtype)


def _exact_sum_f32(a: jax.Array, r: jax.Array) -> jax.Array:
  """A float32 function of the exact integer ``a + r`` alone (``|a| <= 2^52`` integral, ``|r| < 2^30``)."""
  split = jnp.float32(_SPLIT)
  a_hi = jax.lax.optimization_barrier(a + split) - split  # the barrier keeps (a + C) - C
  t = (a - a_hi).astype(jnp.int32) + r  # exact: |a - a_hi| <= 2^30, |r| < 2^30
  # m = a_hi + t = A + t_lo with A in 2^31 Z, t_lo in [-2^30, 2^30): the unique
  # centred decomposition of m; k = floor((t + 2^30) / 2^31), without overflow.
  k = ((t >> 1) + jnp.int32(2**29)) >> 30
  t_lo = (t - (k << 30)) - (k << 30)
  return (a_hi + k.astype(jnp.float32) * jnp.float32(2.0**31)) + t_lo.astype(jnp.float32)
