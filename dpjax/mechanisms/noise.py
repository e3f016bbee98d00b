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
import math
import numbers
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import compiled
# The sampler's construction, planning and integer noise (dpjax.mechanisms.lattice).
from dpjax.mechanisms.lattice import (  # noqa: F401  pylint: disable=unused-import
    TABLE_SIGMA,
    TABLE_BITS,
    THRESHOLD_BITS,
    TAIL,
    MAX_MULTIPLIER,
    _HALF_WIDTH,
    S_MAX,
    S_MIN,
    Table,
    table,
    tv_per_coordinate,
    Plan,
    plan,
    _plan_in_graph,
    _ceil_log2_xp,
    integer_noise,
    draw_atoms,
    _release_leaf,
    _exact_sum_f32,
    _CLAMP,
    _CLAMP64,
)

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
