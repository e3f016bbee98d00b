"""Private standardization: a DP mean and variance per column, with public bounds.

The paper standardizes every column with the mean and standard deviation of
the private data (``load_libsvm(..., preprocess="paper")``): each row then
depends on every other row, and no guarantee covers the fit. This module
releases those statistics with differential privacy instead, as diffprivlib's
``StandardScaler`` does (Holohan et al. 2019, "Diffprivlib: The IBM
Differential Privacy Library"): the user gives public per-column bounds, the
values are clipped to them, and noise calibrated to the clipped range is added
to the column statistics. Three things differ from diffprivlib:

* the budget is zCDP (the library's unit, :mod:`dpjax.accounting`) and the d
  columns are released together by one Gaussian mechanism on the vector of
  column sums, whose L2 sensitivity grows as ``sqrt(d)``, instead of d scalar
  Laplace mechanisms with ``epsilon / d`` each (diffprivlib's
  ``tools.utils._wrap_axis``), whose noise grows as ``d``;
* the noise is drawn by the library's floating-point-safe Gaussian mechanism,
  :func:`dpjax.mechanisms.noise.add_gaussian`, whose total-variation slack
  (:func:`dpjax.mechanisms.noise.tv_slack`) is charged with the rho;
* inside :func:`dpjax.fit` the standardization takes a stated share of the
  run's total budget, and the result's total includes it.

**Mechanism.** Column ``j`` has public bounds ``l_j < h_j``, width ``w_j = h_j
- l_j`` and centre ``c_j = (l_j + h_j) / 2``. Each value is clipped and
centred on the public scale::

    u_ij = (clip(x_ij, l_j, h_j) - c_j) / w_j  in [-1/2, 1/2]
    S1 = sum_i u_i,   S2 = sum_i u_i * u_i          (vectors in R^d)

and ``S1 + N(0, s1^2 I)``, ``S2 + N(0, s2^2 I)`` are released with
``s_k = Delta_k / sqrt(2 rho_k)``, ``rho_1 = mean_share * rho``, ``rho_2 = rho -
rho_1``. Each is ``rho_k``-zCDP (Bun & Steinke 2016, Prop. 1.6) and together
they are ``rho``-zCDP (Lemma 2.3). Dividing by ``w_j`` makes the noise of
column ``j`` proportional to its width, so every column gets the same relative
accuracy.

**Sensitivities.** ``n`` is fixed and public under both relations (the
column means divide by it).

* ``"zero-out"`` (the library's default relation): one row is replaced by the
  null row, which contributes nothing to any sum (and nothing to the
  optimizer's sums later). ``S1`` changes by ``u_k``, ``||u_k||_2 <= sqrt(d) /
  2``; ``S2`` by ``u_k * u_k`` in ``[0, 1/4]^d``, ``||.||_2 <= sqrt(d) / 4``.
* ``"replace-one"``: row ``k`` becomes any other row. ``S1`` changes by
  ``u_k - u'_k`` in ``[-1, 1]^d``: ``sqrt(d)``, twice the zero-out value;
  ``S2`` by ``u_k * u_k - u'_k * u'_k`` in ``[-1/4, 1/4]^d``: ``sqrt(d) / 4``,
  the same as zero-out, because squares are never negative.

All four bounds are attained (``u_k = (1/2, ..., 1/2)`` against the null row
or against ``-u_k``). Each ``u_ij`` is computed from its own row, so the other
rows' terms are bit for bit the same in ``D`` and ``D'``, and each column sum
is correctly rounded (``math.fsum``): ``|fl(S) - S| <= ulp(n / 2) / 2`` since
``|S1| <= n / 2`` (``0 <= S2 <= n / 4``). The sensitivity stated to the
mechanism, and charged, therefore adds ``sqrt(d) ulp(n / 2)`` to ``Delta_1``
and ``sqrt(d) ulp(n / 4)`` to ``Delta_2`` (a relative ``~1e-11`` at ``n =
10^5``).

**Post-processing** (free: it reads only the release and public values). With
the release ``T1, T2``: ``m = clip(T1 / n, -1/2, 1/2)``, ``q = clip(T2 / n, 0,
1/4)`` and ``v = q - m^2``, then ``v`` is clipped to ``[v_min, 1/4 - m^2]``
(Bhatia & Davis 2000, "A better bound on the variance": a variable in an
interval of width 1 with mean ``m`` has variance at most ``(1/2 - m)(1/2 +
m)``), except that the floor ``v_min``
wins. The floor is public: ``(min_std_j / w_j)^2`` for a given ``min_std``,
else ``s2 / n``, one noise standard deviation of the released second moment
(below it the variance estimate is noise). The released statistics are
``mean_j = c_j + w_j m_j`` and ``std_j = w_j sqrt(v_j)``.

**The transform** (:meth:`Standardization.transform`) is per row and reads only
the release and public constants: ``z_i = (clip(x_i, l, h) - mean) / std``,
then :func:`dpjax.data.scale_rows` (``[1, z_i / max(B, ||z_i||)] / sqrt(2)``),
so the rows meet the contract ``||x_i|| <= 1`` after standardization and a
neighbouring pair of inputs stays a neighbouring pair: a replaced row maps to
a replaced row, and the null row stays null (it is a marker, not the raw
vector 0: it adds nothing to ``S1`` and ``S2`` here and becomes the
optimizer's null row, the zero vector, intercept included, whose gradient and
curvature are 0). A fit on the transformed rows is therefore an adaptive
composition (Bun & Steinke 2016, Lemma 2.3): the standardization's ``rho``
plus the fit's, under the same relation.

Examples:
  >>> import numpy as np
  >>> from dpjax.mechanisms import standardize
  >>> rng = np.random.default_rng(0)
  >>> x = rng.uniform(0.0, 10.0, size=(50_000, 3)) * [1.0, 0.1, 1.0]
  >>> std = standardize.PrivateStandardizer(bounds=(0.0, 10.0), budget_share=0.1)
  >>> rel = std.release(0, x, rho=1.0)
  >>> rel.rho, rel.neighbouring, rel.mean.round(1).tolist(), rel.std.round(1).tolist()
  (1.0, 'zero-out', [5.0, 0.5, 5.0], [2.9, 0.3, 2.9])
  >>> z = rel.transform(x)  # [1, z_i / max(1, ||z_i||)] / sqrt(2), rows of norm <= 1
  >>> z.shape, bool((np.linalg.norm(z.astype(np.float64), axis=1) <= 1).all())
  ((50000, 4), True)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import budget as budget_lib
from dpjax import data as data_lib
from dpjax.mechanisms import noise

__all__ = [
    "NEIGHBOURING",
    "PrivateStandardizer",
    "Standardization",
    "column_sums",
    "sensitivities",
]

NEIGHBOURING = ("zero-out", "replace-one")

# fold_in tag of the standardization's key inside dpjax.fit: a stream apart from
# the optimizer's keys (jax.random.split of the same root key).
_KEY_TAG = 0x5354_4453  # "STDS"


def sensitivities(d: int, neighbouring: str = "zero-out") -> tuple[float, float]:
  """L2 sensitivities ``(Delta_1, Delta_2)`` of the centred column sums ``S1``, ``S2``.

  For ``u_i in [-1/2, 1/2]^d`` (see the module docstring): zero-out gives
  ``(sqrt(d) / 2, sqrt(d) / 4)``, replace-one ``(sqrt(d), sqrt(d) / 4)``.

  Examples:
    >>> from dpjax.mechanisms import standardize
    >>> standardize.sensitivities(4), standardize.sensitivities(4, "replace-one")
    ((1.0, 0.5), (2.0, 0.5))
  """
  d = _validate.positive_int(d, "d")
  neighbouring = _validate.choice(neighbouring, "neighbouring", NEIGHBOURING)
  root = math.sqrt(d)
  return (root if neighbouring == "replace-one" else root / 2), root / 4


def _centred(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
  """``u = (clip(x, l, h) - c) / w``, float64, clipped once more to [-1/2, 1/2] against rounding."""
  width = upper - lower
  centre = lower + width / 2
  u = (np.clip(np.asarray(x, np.float64), lower, upper) - centre) / width
  return np.clip(u, -0.5, 0.5)


def column_sums(x: Any, *, lower: Any, upper: Any) -> tuple[np.ndarray, np.ndarray]:
  """The centred column sums ``(S1, S2)`` of ``x``, correctly rounded to float64 (``math.fsum``).

  ``S1 = sum_i u_i`` and ``S2 = sum_i u_i * u_i`` with ``u_ij = (clip(x_ij, l_j,
  h_j) - c_j) / w_j in [-1/2, 1/2]``: the statistics that
  :meth:`PrivateStandardizer.release` perturbs (its sensitivities cover the
  rounding of these sums; module docstring). Host side.

  Examples:
    >>> import numpy as np
    >>> from dpjax.mechanisms import standardize
    >>> s1, s2 = standardize.column_sums(np.array([[0.0, 5.0], [10.0, 20.0]]), lower=0.0, upper=10.0)
    >>> s1.tolist(), s2.tolist()
    ([0.0, 0.5], [0.5, 0.25])
  """
  x = _host_matrix(x)
  lo, hi = _check_bounds((lower, upper), x.shape[1])
  u = _centred(x, lo, hi)
  s1 = np.array([math.fsum(col) for col in u.T.tolist()])
  s2 = np.array([math.fsum(col) for col in (u * u).T.tolist()])
  return s1, s2


def _rounding_margin(n: int, d: int) -> tuple[float, float]:
  """The L2 norm over ``d`` columns of the rounding of ``fl(S) - fl(S')`` (two half-ulps each)."""
  return (math.sqrt(d) * float(np.spacing(np.float64(n / 2))),
          math.sqrt(d) * float(np.spacing(np.float64(n / 4))))


def _sigma(sensitivity: float, rho: float) -> float:
  """``accounting.gaussian_sigma``, raised by ulps until its charge is ``<= rho`` in float64."""
  sigma = float(accounting.gaussian_sigma(sensitivity, rho))
  while accounting.gaussian_zcdp(sensitivity, sigma) > rho:
    sigma = float(np.nextafter(sigma, math.inf))
  return sigma


def _host_matrix(x: Any) -> np.ndarray:
  if not _validate.is_concrete(x):
    raise TypeError("private standardization runs on the host; call it outside jit/vmap.")
  _validate.as_float_array(x, "x", ndim=2)
  return np.asarray(jax.device_get(x))


def _bound_arrays(bounds: Any) -> tuple[np.ndarray, np.ndarray]:
  """``bounds = (lower, upper)``: two float64 arrays of rank 0 or 1, finite, ``lower < upper``."""
  if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
    raise TypeError(
        "bounds must be a pair (lower, upper) of public per-column bounds, each a number or an "
        f"array of one value per column, e.g. bounds=(0.0, 1.0); got {type(bounds).__name__}."
    )
  lower, upper = (_number_or_array(b, f"bounds {name}")
                  for name, b in zip(("lower", "upper"), bounds))
  for name, arr in (("lower", lower), ("upper", upper)):
    if arr.ndim > 1:
      raise ValueError(f"bounds {name} must be a number or a 1-d array (one value per column), "
                       f"got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
      raise ValueError(f"bounds {name} must be finite, got {arr.tolist()!r}.")
  if lower.ndim == upper.ndim == 1 and lower.shape != upper.shape:
    raise ValueError(f"bounds lower has {lower.size} values but upper has {upper.size}; give one "
                     "per column (or a number) for each.")
  bad = ~(lower < upper)
  if bad.any():
    j = int(np.argmax(np.atleast_1d(bad)))
    lo, hi = np.broadcast_arrays(np.atleast_1d(lower), np.atleast_1d(upper))
    raise ValueError(
        f"bounds need lower < upper in every column; column {j} has lower={float(lo[j])!r}, "
        f"upper={float(hi[j])!r}. Widen the interval, or drop a column whose public range is a "
        "single value (it carries no information)."
    )
  return lower, upper


def _check_bounds(bounds: Any, d: int) -> tuple[np.ndarray, np.ndarray]:
  """:func:`_bound_arrays` broadcast to ``d`` columns (float64 ``[d]`` each)."""
  out = []
  for name, arr in zip(("lower", "upper"), _bound_arrays(bounds)):
    if arr.ndim == 1 and arr.shape != (d,):
      raise ValueError(
          f"bounds {name} has {arr.size} values, but the data has {d} columns; pass a number "
          f"or an array of {d} values (one per column, public: never computed from the data)."
      )
    out.append(np.broadcast_to(arr, (d,)).copy())
  return out[0], out[1]


class Standardization(NamedTuple):
  """A released private standardization: every field is public (the release and its settings).

  Apply it to any rows (training or test) with :meth:`transform`.
  """

  mean: np.ndarray  # [d] float64: the DP column means, inside [lower, upper].
  std: np.ndarray  # [d] float64: the DP column standard deviations, >= the public floor.
  lower: np.ndarray  # [d] float64: the public lower bounds the columns are clipped to.
  upper: np.ndarray  # [d] float64: the public upper bounds.
  rho: float  # zCDP charged in all: the configured rho (>= rho_mean + rho_var, as run).
  rho_mean: float  # zCDP of the column-sum release (mean_share * rho).
  rho_var: float  # zCDP of the sum-of-squares release (the rest).
  slack: float  # total-variation slack of the two releases (dpjax.mechanisms.noise.tv_slack), added to delta.
  sensitivities: tuple  # (Delta_1, Delta_2) as stated to the mechanism (with the rounding margin).
  noise_stds: tuple  # (s1, s2): noise std of the released sums S1, S2 (units of the widths).
  n: int  # rows (public).
  neighbouring: str  # "zero-out" or "replace-one": the relation the sensitivities hold for.
  row_bound: float  # public B of the per-row map after standardization.
  intercept: bool  # whether transform prepends the constant intercept.

  def transform(self, x: Any, *, dtype: Any = None) -> np.ndarray:
    """Standardizes rows with the release, then scales each into the unit ball.

    ``z_i = (clip(x_i, lower, upper) - mean) / std``, then
    :func:`dpjax.data.scale_rows` with ``row_bound`` and ``intercept``. Row
    ``i`` of the output depends only on row ``i`` of ``x`` and the release:
    post-processing, free of privacy cost, for training and test rows alike.

    Args:
      x: float array ``[m, d]`` (numpy or concrete jax), the raw features.
      dtype: float dtype of the result; default ``x``'s.

    Returns:
      numpy ``[m, d + intercept]`` with every row norm ``<= 1``.
    """
    x = _host_matrix(x)
    d = self.mean.shape[0]
    if x.shape[1] != d:
      raise ValueError(f"x has {x.shape[1]} columns but the standardization was released for {d}; "
                       "pass rows with the same columns.")
    z = (np.clip(x.astype(np.float64), self.lower, self.upper) - self.mean) / self.std
    return data_lib.scale_rows(z, row_bound=self.row_bound, intercept=self.intercept,
                               dtype=x.dtype if dtype is None else dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivateStandardizer:
  """Settings of a private standardization; all public. Pass it to ``dpjax.fit(..., standardize=)``.

  Attributes:
    bounds: ``(lower, upper)``, each a number or an array with one value per
      column: public bounds, never computed from the data (diffprivlib's
      ``bounds``). Values outside are clipped to them. Loose bounds cost
      accuracy (the noise scales with the width), tight ones bias the clipped
      columns.
    budget_share: in ``(0, 1)``: the share of ``dpjax.fit``'s total ``rho``
      spent here; the optimizer gets the rest. Not used by :meth:`release`,
      which spends the ``rho`` it is given.
    mean_share: in ``(0, 1)``: the share of the standardization's ``rho`` for
      the column sums (the means); the rest goes to the sums of squares.
      ``0.5`` splits evenly, as diffprivlib does.
    min_std: the public floor of the released standard deviations, in data
      units (a number or one per column, ``0 < min_std <= width / 2``), or
      ``None`` for the noise-level floor ``w_j sqrt(s2 / n)`` (module
      docstring).
    neighbouring: ``"zero-out"`` (the default relation of the library) or
      ``"replace-one"``: the relation the sensitivities are derived for. It
      must be the relation of the fit that uses the data.
    row_bound: public ``B > 0`` of the per-row map after standardization.
    intercept: prepend the constant intercept column after standardization.

  Examples:
    >>> from dpjax.mechanisms import standardize
    >>> standardize.PrivateStandardizer(bounds=(0.0, 1.0), budget_share=0.2).budget_share
    0.2
  """

  bounds: Any
  budget_share: float = 0.1
  mean_share: float = 0.5
  min_std: Any = None
  neighbouring: str = "zero-out"
  row_bound: float = 1.0
  intercept: bool = True

  def __post_init__(self):
    _bound_arrays(self.bounds)
    _validate.float_in_open_interval(self.budget_share, "budget_share", 0.0, 1.0)
    _validate.float_in_open_interval(self.mean_share, "mean_share", 0.0, 1.0)
    if self.min_std is not None:
      arr = _number_or_array(self.min_std, "min_std")
      if arr.ndim > 1:
        raise ValueError(f"min_std must be a number or a 1-d array (one value per column), got "
                         f"shape {arr.shape}.")
      if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f"min_std must be finite and > 0 (or None for the noise-level floor), "
                         f"got {self.min_std!r}.")
    _validate.choice(self.neighbouring, "neighbouring", NEIGHBOURING)
    _validate.positive_float(self.row_bound, "row_bound")
    if not isinstance(self.intercept, (bool, np.bool_)):
      raise TypeError(f"intercept must be True or False, got {type(self.intercept).__name__}.")

  def release(self, key: Any, x: Any, *, rho: float) -> Standardization:
    """Releases the DP column means and standard deviations of ``x``, spending ``rho``.

    Args:
      key: a typed PRNG key or an int seed (a seed others know voids the
        guarantee: draw it from the OS, e.g. ``secrets.randbits(63)``).
      x: raw features, float ``[n, d]`` (numpy or concrete jax; no intercept).
      rho: the zCDP budget of this release (> 0).

    Returns:
      The :class:`Standardization` (charge, noise scales and statistics).

    Raises:
      TypeError, ValueError: bad ``x``, ``key`` or ``rho``, or bounds that do
        not match the columns; raised before anything is computed.
    """
    x = _host_matrix(x)
    n, d = x.shape
    rho = _validate.positive_float(rho, "rho")
    key = _common.canonical_key(key)
    lower, upper = _check_bounds(self.bounds, d)
    width = upper - lower
    floor = None
    if self.min_std is not None:
      min_std = _number_or_array(self.min_std, "min_std")
      if min_std.ndim == 1 and min_std.shape != (d,):
        raise ValueError(f"min_std has {min_std.size} values, but the data has {d} columns; pass "
                         f"a number or {d} values.")
      min_std = np.broadcast_to(min_std, (d,))
      if np.any(min_std > width / 2):
        j = int(np.argmax(min_std > width / 2))
        raise ValueError(f"min_std={float(min_std[j])!r} in column {j} exceeds half its bounds' "
                         f"width ({float(width[j]) / 2!r}), the largest possible std; lower it.")
      floor = (min_std / width) ** 2

    s1, s2 = column_sums(x, lower=lower, upper=upper)
    delta1, delta2 = sensitivities(d, self.neighbouring)
    margin1, margin2 = _rounding_margin(n, d)  # the float64 rounding of S and S'
    delta1, delta2 = delta1 + margin1, delta2 + margin2
    rho_mean = self.mean_share * rho
    rho_var = rho - rho_mean
    if rho_mean + rho_var > rho:
      rho_var = float(np.nextafter(rho_var, 0.0))
    sigma1 = _sigma(delta1, rho_mean)
    sigma2 = _sigma(delta2, rho_var)
    k1, k2 = jax.random.split(key)
    with jax.enable_x64(True):  # the sums stay float64 (their rounding margin is float64's)
      t1 = np.asarray(noise.add_gaussian(k1, jnp.asarray(s1, jnp.float64), sensitivity=delta1,
                                         noise_std=sigma1), np.float64)
      t2 = np.asarray(noise.add_gaussian(k2, jnp.asarray(s2, jnp.float64), sensitivity=delta2,
                                         noise_std=sigma2), np.float64)
    slack = float(noise.tv_slack(s1)) + float(noise.tv_slack(s2))

    m = np.clip(t1 / n, -0.5, 0.5)
    q = np.clip(t2 / n, 0.0, 0.25)
    if floor is None:
      floor = np.full(d, min(sigma2 / n, 0.25))
    v = np.maximum(floor, np.minimum(q - m * m, 0.25 - m * m))
    return Standardization(
        mean=lower + width / 2 + width * m, std=width * np.sqrt(v), lower=lower, upper=upper,
        rho=rho, rho_mean=float(rho_mean), rho_var=float(rho_var),
        slack=slack, sensitivities=(delta1, delta2), noise_stds=(float(sigma1), float(sigma2)),
        n=int(n), neighbouring=self.neighbouring, row_bound=float(self.row_bound),
        intercept=bool(self.intercept))

  def fit_transform(self, key: Any, data: Any, *, rho: float
                    ) -> tuple[data_lib.Dataset, Standardization]:
    """:meth:`release` on ``data.x``, then ``Dataset(transform(x), y)``: ready for any dpjax fit.

    ``data`` is a :class:`dpjax.data.Dataset` or ``(x, y)`` of raw features
    (e.g. ``load_libsvm(path, preprocess="none")``) and labels in {-1, +1}.
    Spend the rest of the budget on the fit: the two compose to ``rho`` plus
    the fit's ``rho``.

    Examples:
      >>> import numpy as np
      >>> from dpjax.mechanisms import standardize
      >>> rng = np.random.default_rng(1)
      >>> x = rng.uniform(-3.0, 3.0, size=(1000, 2)).astype(np.float32)
      >>> y = np.where(x[:, 0] > 0, 1.0, -1.0).astype(np.float32)
      >>> ds, rel = standardize.PrivateStandardizer(bounds=(-3.0, 3.0)).fit_transform(7, (x, y), rho=0.5)
      >>> ds.x.shape, ds.x.dtype, rel.rho
      ((1000, 3), dtype('float32'), 0.5)
    """
    x, y = _check_pair(data)
    rel = self.release(key, x, rho=rho)
    return data_lib.Dataset(rel.transform(x), y), rel


def _number_or_array(v: Any, name: str) -> np.ndarray:
  if isinstance(v, (bool, np.bool_, str, bytes)) or v is None:
    raise TypeError(f"{name} must be a number or an array of numbers, got {v!r}.")
  try:
    return np.asarray(jax.device_get(v), dtype=np.float64)
  except (TypeError, ValueError) as err:
    raise TypeError(f"{name} must be a number or an array of numbers, got {v!r}.") from err


def _check_pair(data: Any) -> tuple[Any, Any]:
  if not isinstance(data, tuple) or len(data) != 2:
    raise TypeError(
        f"data must be a dpjax.data.Dataset(x, y) or an (x, y) pair, got {type(data).__name__}.")
  x, y = data
  _host_matrix(x)
  _validate.as_float_array(y, "y", ndim=1)
  if np.shape(x)[0] != np.shape(y)[0]:
    raise ValueError(
        f"x has {np.shape(x)[0]} rows but y has {np.shape(y)[0]} labels; pass one label per row.")
  _validate.check_labels(y, "y")
  return x, y


# ----------------------------------------------------------------------------
# dpjax.fit(..., standardize=PrivateStandardizer(...)).


class _Plan(NamedTuple):
  standardizer: PrivateStandardizer
  rho_total: float  # the fit's total zCDP budget.
  epsilon_total: float  # its epsilon at delta.
  delta: float
  rho_standardize: float  # budget_share * rho_total.
  rho_fit: float  # the rest, for the optimizer.


def run_fit(fit: Callable[..., Any], arguments: dict, *, algorithms: tuple) -> Any:
  """``dpjax.fit`` with ``standardize=``: release, transform, fit the rest, report the total.

  ``arguments`` are ``fit``'s own (its ``locals()`` on entry). The total budget
  (``epsilon`` or ``rho`` at ``delta``) is resolved as ``fit`` would; the
  standardization spends ``budget_share`` of its ``rho`` with a key folded
  from ``seed``'s (``seed=None``: fresh OS entropy), and ``fit`` runs on the
  transformed rows with ``rho`` = the rest. The result reports the total:
  ``rho`` and ``epsilon`` of the whole pipeline, ``rho_spent`` the optimizer's
  charge plus the standardization's, and ``standardization`` the release.
  Only the zCDP-accounted full-batch ``algorithms`` are accepted.
  """
  args = dict(arguments)
  options = args.pop("algorithm_options")
  std = args.pop("standardize")
  data, algorithm = args.pop("data"), args.pop("algorithm")
  plan = _plan(std, data, algorithm, args, algorithms)
  x, y = data
  key = jax.random.fold_in(_common.key_for(args["seed"]), _KEY_TAG)
  ds, rel = std.fit_transform(key, (x, y), rho=plan.rho_standardize)
  epsilon_budget = args["epsilon_budget"]
  args.update(epsilon=None, rho=plan.rho_fit, delta=plan.delta, epsilon_budget=None)
  result = fit(ds, algorithm, **args, **options)
  return _include(result, rel, plan, epsilon_budget)


def _plan(std: Any, data: Any, algorithm: str, args: dict, algorithms: tuple) -> _Plan:
  if not isinstance(std, PrivateStandardizer):
    raise TypeError(
        "standardize must be a dpjax.mechanisms.standardize.PrivateStandardizer(bounds=(lower, upper), "
        f"budget_share=...) (public bounds and a share of the budget), got {type(std).__name__}.")
  if algorithm not in algorithms:
    raise ValueError(
        f"standardize= works with the zCDP-accounted full-batch algorithms {algorithms}, not "
        f"{algorithm!r}; standardize first with PrivateStandardizer.fit_transform(key, data, "
        "rho=...) and give the fit the rest of the budget.")
  relation = args.get("neighbouring", "zero-out")
  if relation != std.neighbouring:
    raise ValueError(
        f"the standardizer's neighbouring={std.neighbouring!r} differs from the fit's "
        f"neighbouring={relation!r}; build the PrivateStandardizer with neighbouring={relation!r}.")
  x, _ = _check_pair(data)
  _check_bounds(std.bounds, int(np.shape(x)[1]))
  n = int(np.shape(x)[0])
  rho_total, epsilon_total, delta = accounting.resolve_budget(
      n, epsilon=args["epsilon"], rho=args["rho"], delta=args["delta"], method=args["accounting"])
  rho_standardize = std.budget_share * rho_total
  return _Plan(std, rho_total, epsilon_total, delta, rho_standardize, rho_total - rho_standardize)


def _include(result: Any, rel: Standardization, plan: _Plan, epsilon_budget: Any) -> Any:
  """The fit's result with the standardization in its totals, checked against them."""
  (acc,) = [leaf for leaf in jax.tree_util.tree_leaves(
      result.opt_state, is_leaf=lambda v: isinstance(v, accounting.AccountantState))
             if isinstance(leaf, accounting.AccountantState)]
  total = accounting.charge(acc, rel.rho, slack=rel.slack)
  budget_lib.check_spent(total, epsilon=plan.epsilon_total, delta=plan.delta,
                         method=result.accounting, epsilon_budget=epsilon_budget,
                         what=f"fit({result.algorithm!r}, standardize=...)")
  return result._replace(
      rho=plan.rho_total, epsilon=plan.epsilon_total, delta=plan.delta,
      rho_spent=np.asarray(result.rho_spent, np.float64) + rel.rho, standardization=rel)
