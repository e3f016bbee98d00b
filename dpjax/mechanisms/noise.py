"""Floating-point-safe Gaussian noise: the one place every Gaussian draw of dpjax goes through.

Why a module of its own
-----------------------
``g + sigma * jax.random.normal(...)`` is not the Gaussian mechanism once it
is computed in floating point. In float32, ``jax.random.normal`` returns one
of about 2^23 values (``sqrt(2) erfinv(u)`` on a 23-bit grid of ``u``), and
the rounding of ``fl(g + sigma z)`` leaves gaps whose positions depend on
``g``: on a one-step DP-GD release most outputs possible under one dataset are
impossible under its neighbour (Mironov 2012, "On significance of the least
significant bits for differential privacy", CCS; the same attack class as the
floating-point attacks of Jin, McMurtry, Rubinstein & Ohrimenko 2022, IEEE S&P,
and the precision-based attacks of Haney, Desfontaines, Hartman, Shrestha &
Hay 2022, arXiv 2207.13793).

The construction
----------------
Every release ``add_gaussian(key, v, sensitivity=D, noise_std=sigma)`` is

1. **Grid.** A public power of two ``gamma = 2^e`` is chosen from ``sigma``,
   ``D`` and the number ``k`` of released coordinates (never from the data).
2. **Rounding.** ``a = round(v / gamma)``: an exact integer (dividing by a
   power of two is exact; ``round`` is exact). Rounding moves each coordinate
   by at most 1/2, so neighbouring inputs give integer vectors at L2 distance
   at most ``D / gamma + sqrt(k)``.
3. **Integer noise.** ``m = a + R`` with ``R`` an integer vector whose law is,
   up to a total-variation distance ``tau`` per coordinate, that of
   ``round(N(0, s^2))``, the continuous Gaussian rounded to the integers, with
   ``s >= sigma / gamma + sqrt(k) sigma / D``. The sum is computed exactly (in
   float64, or in float32 with a two-word 64-bit integer).
4. **Post-processing.** The output is ``gamma * m`` converted to the value's
   dtype: a deterministic function of the exact integer ``m``.

Privacy. For an integer vector ``a``, ``a + round(N(0, s^2 I)) = round(a +
N(0, s^2 I))``, a post-processing of the continuous Gaussian mechanism on ``a``
with L2 sensitivity ``D/gamma + sqrt(k)`` and std ``s``. Its zCDP parameter is
``(D/gamma + sqrt(k))^2 / (2 s^2) <= D^2 / (2 sigma^2)`` by the choice of
``s``: **exactly the charge of the continuous Gaussian mechanism with
sensitivity ``D`` and std ``sigma``** (Bun & Steinke 2016), and every other
property of that mechanism carries over by post-processing: its Renyi curve,
its mu-GDP trade-off curve (Dong, Roth & Su 2019), Poisson-subsampled RDP
(Mironov, Talwar & Zhang 2019). The rounding is paid for in noise, never in
privacy: the added std is ``gamma s >= sigma (1 + sqrt(k) gamma / D)``.
The sampler's distance ``tau`` from ``round(N(0, s^2))`` is the only
approximation: a run that draws ``K`` noise coordinates is within total
variation ``K tau`` of the exact mechanism, hence ``(eps, delta + (1 + e^eps)
K tau)``-DP whenever the exact one is ``(eps, delta)``-DP. Each transform adds
``K tau`` (:func:`tv_slack`) to the accountant's TV slack where it draws, and
:func:`dpjax.accounting.epsilon_spent` adds ``(1 + e^eps)`` times the slack
to delta; ``tau < 2e-28``, so this is invisible for any run that fits in
memory, but it is counted.

The sampler. ``R = L2 (L1 C + F1) + F2`` with ``C, F1, F2`` i.i.d. discrete
Gaussians ``N_Z(0, 682^2)`` (Canonne, Kamath & Steinke 2020, "The discrete
Gaussian for differential privacy", NeurIPS) drawn from one alias table
(Walker 1977) of 2^14 buckets with 96-bit thresholds built once in exact
integer arithmetic, and public integers ``1 <= L1, L2 <= 341``. Three facts
bound ``tau`` (each is checked numerically in ``tests/test_noise.py``):

* the table's law is within ``~2^-97`` of ``N_Z(0, 682^2)`` (computed
  exactly when the table is built, tail beyond 11.5 std included);
* ``L Y + F`` with ``Y ~ N_Z(0, t^2)`` and ``F ~ N_Z(0, 682^2)`` has law
  ``N_Z(0, L^2 t^2 + 682^2)`` times a Jacobi theta factor within
  ``1 +- 2 exp(-2 pi^2 s'^2)`` of constant, ``s' = 682 t / sqrt(L^2 t^2 +
  682^2) >= 682 / sqrt(L^2 + 1) >= 2`` (complete the square, then Poisson
  summation): ``< 1e-34`` per level;
* ``N_Z(0, s_R^2)`` is within ``t^4 / (1000 s^4)`` (plus the 12-std tails) of
  ``round(N(0, s^2))`` for the matched ``s`` (``1/s_R^2 = 1/s^2 -
  m_2 / s^4``, ``m_2 ~ 1/12`` the second moment of the rounding error): the
  log-ratio of the two pmfs is ``O((r / s^2)^4)``, and ``s >= 2e7`` always
  (11.5-std tails included).

Why this construction (the alternatives studied):

* Snapping (Mironov 2012) clamps and rounds a Laplace sample's output to a
  power-of-two grid; it is proven for Laplace noise and float64 uniforms with
  an exact-uniform sampler, not for the Gaussian mechanism and zCDP that the
  whole library composes in.
* Google's secure noise generation (Google differential-privacy library,
  "Secure Noise Generation", 2020) rounds the input to a granularity grid and
  adds integer noise from a binomial approximation of the Gaussian, with the
  approximation charged to delta. This module follows the same plan (grid,
  rounded input, integer noise, TV charged) but makes the integer noise
  exactly the rounded Gaussian up to ``tau``, so the continuous Gaussian's
  guarantees (GDP, RDP, subsampled RDP) hold verbatim.
* The exact discrete Gaussian sampler of Canonne, Kamath & Steinke 2020 needs
  rational arithmetic and rejection loops of random length: data-independent,
  but a ``while_loop`` per coordinate on an accelerator, and its (eps, delta)
  curve is not the Gaussian's. Its three-level lattice decomposition here
  keeps the cost at 12 random words, three table lookups and integer adds per
  coordinate, with no loop.
* Opacus ``secure_mode`` (a CSPRNG and the sum of two Gaussians, after Holohan
  & Braghin 2021, "Secure random sampling in differential privacy", ESORICS)
  thickens the float grid of the noise but gives no statement about which
  outputs remain impossible; it does not resist the attack above by proof.

Attacks. The released values are ``gamma`` times integers ``m`` whose law is
(up to ``tau``) a shifted rounded Gaussian of huge integer std (``s >=
2e7``): every integer in a window of +-11.5 s is possible under both
neighbours, and no gap depends on the data (Mironov 2012, Jin et al. 2022).
Nothing is sampled with data-dependent precision or timing: the grid, the
table and the three lookups depend only on public values, so neither the
precision-based attacks of Haney et al. 2022 nor timing attacks on rejection
samplers (Jin et al. 2022) apply. What remains outside this module: the
sensitivity ``D`` is that of the exactly computed statistic; the float rounding
of the data pass that computes it (a sum of ``n`` terms) is not charged
(Casacuberta et al. 2022, "Widespread underestimation of sensitivity in
differentially private libraries and how to fix it", CCS); float64 makes it
negligible.

Opt-out. ``exact=False`` adds ``noise_std * jax.random.normal(...)`` in the
value's dtype (the historical path), for measuring what exactness costs. It is
not private; transforms expose it only as ``unsafe_float_noise=True``, which
issues :class:`dpjax.PrivacyLeakWarning`, and results made with it say
``private=False``.

Examples:
  >>> import jax, jax.numpy as jnp
  >>> from dpjax.mechanisms import noise
  >>> g = jnp.zeros(3)
  >>> out = noise.add_gaussian(jax.random.key(0), g, sensitivity=1e-3, noise_std=0.02)
  >>> out.shape, out.dtype
  ((3,), dtype('float32'))
  >>> 0.02 <= noise.effective_std(g, sensitivity=1e-3, noise_std=0.02) < 0.02 * 1.001
  True
  >>> noise.tv_slack(g) < 1e-27
  True
"""

from __future__ import annotations

import contextlib
import decimal
import functools
import math
import numbers
from typing import Any, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import compiled

__all__ = [
    "TABLE_SIGMA",
    "MAX_MULTIPLIER",
    "add_gaussian",
    "add_gaussian_symmetric",
    "perturbation_vector",
    "effective_std",
    "tv_slack",
    "tv_per_coordinate",
    "table",
    "Plan",
    "plan",
    "integer_noise",
    "draw_atoms",
    "random_direction",
]

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


# ----------------------------------------------------------------------------
# Public API.
# ----------------------------------------------------------------------------

_AUDIT_SCALE = [1.0]


@contextlib.contextmanager
def broken_noise_for_audit(factor: float) -> Iterator[None]:
  """Test-only bug injection: every release traced inside adds ``factor`` x the noise.

  The accountant is charged as before, so ``factor < 1`` is a mechanism that
  claims more privacy than it has: the broken twin an audit must flag. Read at
  trace time (build and trace the mechanism inside the ``with`` block).

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax.mechanisms import noise
    >>> with noise.broken_noise_for_audit(0.5):
    ...   half = noise.add_gaussian(jax.random.key(0), jnp.zeros(2000), sensitivity=1.0, noise_std=1.0)
    >>> 0.45 < float(half.std()) < 0.55
    True
  """
  factor = _validate.positive_float(factor, "factor")
  old = _AUDIT_SCALE[0]
  _AUDIT_SCALE[0] = factor
  try:
    yield
  finally:
    _AUDIT_SCALE[0] = old


def audit_scale() -> float:
  """The factor :func:`broken_noise_for_audit` applies now (``1.0`` outside it).

  A program that caches a compiled release across calls keys its cache on
  this value, since the factor is read when the release is traced.
  """
  return _AUDIT_SCALE[0]


compiled.add_trace_setting("dpjax.mechanisms.noise.audit_scale", audit_scale)


def _leaves(value: Any) -> tuple[list, Any]:
  leaves, treedef = jax.tree_util.tree_flatten(value)
  if not leaves:
    raise ValueError("value must hold at least one array to release.")
  for leaf in leaves:
    _validate.as_float_array(leaf, "value")
  return [jnp.asarray(x) for x in leaves], treedef


def _size(leaves: list) -> int:
  return int(sum(int(np.prod(np.shape(x))) for x in leaves))


def _is_number(x: Any) -> bool:
  return isinstance(x, (numbers.Real, np.floating, np.integer)) and not isinstance(x, bool)


def _host_scalar(x: Any) -> float | None:
  """A concrete scalar as a Python float, or None when traced."""
  if _is_number(x):
    return float(x)
  if _validate.is_concrete(x) and np.shape(x) == ():
    return float(np.asarray(jax.device_get(x)))
  return None


def add_gaussian(
    key: jax.Array,
    value: Any,
    *,
    sensitivity: jax.typing.ArrayLike,
    noise_std: jax.typing.ArrayLike,
    exact: bool = True,
    atoms: jax.Array | None = None,
) -> Any:
  """Releases ``value + N(0, noise_std^2 I)``, floating-point safe (module docstring).

  The Gaussian mechanism on ``value`` (an array or a pytree of float arrays,
  one L2 sensitivity over all its coordinates): ``sensitivity^2 / (2
  noise_std^2)``-zCDP, and every guarantee of the continuous Gaussian
  mechanism, with the whole release on a public power-of-two grid. Charge
  that rho and :func:`tv_slack` of ``value`` to the accountant where you call
  this. The std actually added is :func:`effective_std` (at most a few
  parts in 10^4 above ``noise_std`` for a gradient; more for very many
  coordinates at a tiny budget, see :func:`plan`).

  Args:
    key: a typed PRNG key (split off the transform's state key).
    value: the statistic: a float array or pytree of float arrays.
    sensitivity: its L2 sensitivity ``> 0`` under the transform's neighbouring
      relation (Python float or scalar array, possibly traced).
    noise_std: the Gaussian std ``sigma >= 0`` (possibly traced). ``0`` returns
      ``value`` unchanged (the non-private test path of the transforms).
    exact: ``False`` adds ``noise_std * jax.random.normal`` in the value's dtype:
      NOT private in floating point (a benchmark baseline only).
    atoms: pre-drawn ``(3, K)`` table draws (:func:`draw_atoms`) for the ``K``
      coordinates of ``value``, used instead of drawing from ``key``.

  Returns:
    The released pytree, same structure, shapes and dtypes as ``value``.

  Raises:
    ValueError: a concrete ``sensitivity`` ``<= 0`` or a concrete ``noise_std``
      ``< 0``, NaN or outside the sampler's range (:func:`plan`).

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax.mechanisms import noise
    >>> g = {"w": jnp.ones(3), "b": jnp.zeros(())}
    >>> out = noise.add_gaussian(jax.random.key(1), g, sensitivity=0.01, noise_std=0.5)
    >>> sorted(out), out["w"].shape
    (['b', 'w'], (3,))
  """
  leaves, treedef = _leaves(value)
  size = _size(leaves)
  sens_h, sigma_h = _host_scalar(sensitivity), _host_scalar(noise_std)
  if sens_h is not None and not (sens_h > 0 and math.isfinite(sens_h)):
    raise ValueError(f"sensitivity must be a positive finite number, got {sens_h!r}.")
  if sigma_h is not None and not (sigma_h >= 0 and math.isfinite(sigma_h)):
    raise ValueError(f"noise_std must be a finite number >= 0, got {sigma_h!r}.")
  if sigma_h == 0.0:
    return value
  if atoms is not None and exact:
    if np.shape(atoms) != (3, size):
      raise ValueError(f"atoms must have shape (3, {size}) for a value of {size} coordinates, "
                       f"got {np.shape(atoms)}.")
    bounds = np.cumsum([0] + [int(np.prod(np.shape(x))) for x in leaves])
    parts = [atoms[:, int(lo):int(hi)] for lo, hi in zip(bounds[:-1], bounds[1:])]
    keys = [None] * len(leaves)
  else:
    parts = [None] * len(leaves)
    keys = [key] if len(leaves) == 1 else list(jax.random.split(key, len(leaves)))
  scale = _AUDIT_SCALE[0]
  if not exact:
    out = [x + (jnp.asarray(noise_std, x.dtype) * scale) * jax.random.normal(k, x.shape, x.dtype)
           for k, x in zip(keys, leaves)]
    return jax.tree_util.tree_unflatten(treedef, out)
  if sens_h is not None and sigma_h is not None:
    p = plan(sigma_h * scale, sens_h, size)
    out = [_release_leaf(k, x, p.exponent, p.l1, p.l2, a) for k, x, a in zip(keys, leaves, parts)]
    return jax.tree_util.tree_unflatten(treedef, out)
  e, l1, l2, feasible = _plan_in_graph(jnp.asarray(noise_std) * scale, sensitivity, size)
  positive = jnp.asarray(noise_std) > 0
  out = []
  for k, x, a in zip(keys, leaves, parts):
    rel = _release_leaf(k, x, e, l1, l2, a)
    rel = jnp.where(feasible, rel, jnp.asarray(jnp.nan, x.dtype))
    out.append(jnp.where(positive, rel, x))
  return jax.tree_util.tree_unflatten(treedef, out)


def add_gaussian_symmetric(
    key: jax.Array,
    matrix: jax.Array,
    *,
    sensitivity: jax.typing.ArrayLike,
    noise_std: jax.typing.ArrayLike,
    exact: bool = True,
) -> jax.Array:
  """Releases a symmetric matrix: ``sym(H + E)`` with ``E`` the exact Gaussian noise of :func:`add_gaussian`.

  The Gaussian mechanism on ``vec(H)`` (``d^2`` coordinates) with Frobenius
  sensitivity ``sensitivity``, then ``(A + A^T) / 2``, post-processing that
  makes the output exactly symmetric. The diagonal noise has std ``noise_std``
  and each off-diagonal pair ``noise_std / sqrt(2)``, i.i.d. over ``i <= j``.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax.mechanisms import noise
    >>> a = noise.add_gaussian_symmetric(jax.random.key(0), jnp.eye(3), sensitivity=0.1, noise_std=1.0)
    >>> bool((a == a.T).all())
    True
  """
  a = add_gaussian(key, matrix, sensitivity=sensitivity, noise_std=noise_std, exact=exact)
  # Materialise once: inside a fusion XLA may recompute (i, j) and (j, i) differently.
  a = jax.lax.optimization_barrier(a)
  return 0.5 * (a + a.T)


def tv_slack(value: Any) -> float:
  """``K tau``: the TV slack of one release of ``value`` (``K`` its number of coordinates).

  Add it to the accountant where the noise is drawn
  (``accounting.charge(state, rho, slack=noise.tv_slack(g))``); ``0`` for an
  opt-out or noise-free release is the caller's choice.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.mechanisms import noise
    >>> noise.tv_slack(jnp.zeros((10, 10))) == 100 * noise.tv_per_coordinate()
    True
  """
  leaves, _ = jax.tree_util.tree_flatten(value)
  return _size(leaves) * tv_per_coordinate()


def effective_std(value: Any, *, sensitivity: float, noise_std: float) -> float:
  """The std of the noise :func:`add_gaussian` adds for concrete ``sensitivity``/``noise_std``.

  ``gamma s_R >= noise_std (1 + sqrt(K) gamma / sensitivity)``: the rounding
  to the grid is paid for in noise.
  """
  leaves, _ = jax.tree_util.tree_flatten(value)
  if float(noise_std) == 0.0:
    return 0.0
  return plan(float(noise_std), float(sensitivity), _size(leaves)).std


def perturbation_vector(key: jax.Array, d: int, std: float) -> np.ndarray:
  """``b ~ N(0, std^2 I_d)`` in float64, for objective perturbation (host numpy).

  The one Gaussian draw that is not a release: objective perturbation
  (Chaudhuri, Monteleoni & Sarwate 2011; Iyengar et al. 2019) adds ``<b,
  theta>`` to the objective and its proof is a change of variables that
  needs ``b`` to have a density, which a lattice cannot give. ``b`` itself is
  never released; the mechanism's output is released through
  :func:`add_gaussian` (the output perturbation), so what leaves the
  mechanism is on a public grid. Drawn in float64 (53-bit mantissa) from the
  key; :func:`broken_noise_for_audit` scales it like every release.

  Examples:
    >>> import jax
    >>> from dpjax.mechanisms import noise
    >>> noise.perturbation_vector(jax.random.key(0), 3, 1.0).dtype
    dtype('float64')
  """
  with jax.enable_x64(True):
    z = jax.random.normal(key, (int(d),), jnp.float64)
    return float(std) * _AUDIT_SCALE[0] * np.asarray(jax.device_get(z), np.float64)


def random_direction(key: jax.Array, d: int, dtype: Any = jnp.float32) -> jax.Array:
  """A uniform unit vector of ``R^d`` (a normalised ``N(0, I_d)`` draw): a random start.

  Not a release: it reads no data, so it needs no exact sampler and costs
  no budget; it is here so that every Gaussian draw of the library is in this
  module.

  Examples:
    >>> import jax
    >>> from dpjax.mechanisms import noise
    >>> round(float(jax.numpy.linalg.norm(noise.random_direction(jax.random.key(0), 5))), 5)
    1.0
  """
  g = jax.random.normal(key, (int(d),), dtype)
  return g / jnp.linalg.norm(g)

