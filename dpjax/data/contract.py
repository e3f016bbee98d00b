"""The data contract: rows in the unit ball, labels in {-1, +1}, checked and made true per row.

The contract of Ganesh et al. (NeurIPS 2023, arXiv:2305.13209), Sec. 5.1:
:func:`validate_dataset` is the eager check the optimizers run at the privacy
boundary; :func:`clip_rows` projects rows into a ball exactly in the array's
own dtype; :func:`scale_rows` is the per-row map (clip to a public norm bound,
prepend a constant intercept, scale into ``||x_i|| <= 1``) that changes no
other row when a row is added or removed.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

__all__ = ["Dataset", "clip_rows", "scale_rows", "validate_dataset"]

# Rounding fix: at most this many one-ulp shrinks per row (see _fit_in_ball).
_MAX_ULP_SHRINKS = 8

# The intercept's share of the unit row norm: rows are [1, z] / sqrt(2), ||z|| <= 1.
_INTERCEPT = 1.0 / math.sqrt(2.0)


class Dataset(NamedTuple):
  """A binary-classification dataset.

  Attributes:
    x: features, float array of shape ``[n, d]``.
    y: labels, float array of shape ``[n]`` with values in ``{-1, +1}``.
  """

  x: Any  # [n, d] floating
  y: Any  # [n] floating, values in {-1, +1}

  @property
  def n(self) -> int:
    """Number of examples."""
    return int(np.shape(self.x)[0])

  @property
  def d(self) -> int:
    """Number of features (including an intercept column, if any)."""
    return int(np.shape(self.x)[1])


# ----------------------------------------------------------------------------
# Row-norm helpers.


def _row_norms64(x: np.ndarray) -> np.ndarray:
  x64 = np.asarray(x, dtype=np.float64)
  return np.sqrt(np.einsum("ij,ij->i", x64, x64))


def _fit_in_ball(x: np.ndarray, bound: float, first: int = 0) -> np.ndarray:
  """Shrinks rows whose float64 norm exceeds ``bound`` by one ulp at a time.

  ``x`` already has rows of norm ``bound`` up to the rounding of its dtype
  (relative error ~ eps). Each pass replaces every entry (from column
  ``first`` on, so that a constant intercept in column 0 stays constant) of an
  offending row by the next representable value towards zero
  (``numpy.nextafter``), which lowers the norm by a relative ~eps/2 or more,
  so one or two passes suffice; at most ``_MAX_ULP_SHRINKS`` are allowed. Rows
  within the bound are never touched.
  """
  x = np.array(x, copy=True)
  zero = x.dtype.type(0)
  for _ in range(_MAX_ULP_SHRINKS):
    over = _row_norms64(x) > bound
    if not over.any():
      return x
    x[over, first:] = np.nextafter(x[over, first:], zero)
  if (_row_norms64(x) > bound).any():  # pragma: no cover - impossible for float16+
    raise AssertionError("row-norm rounding fix did not converge; please report this.")
  return x


def _check_dtype(dtype: Any) -> np.dtype:
  try:
    dt = np.dtype(dtype)
  except TypeError as err:
    raise TypeError(f"dtype must be a numpy floating dtype such as numpy.float32, got {dtype!r}.") from err
  if dt not in (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)):
    raise TypeError(
        f"dtype must be numpy.float16, numpy.float32 or numpy.float64, got {dt}."
    )
  return dt


def clip_rows(x: Any, bound: float = 1.0) -> Any:
  """Scales each row of ``x`` by ``min(1, bound / ||x_i||_2)``.

  Afterwards every row norm, computed in float64 from the values stored in
  ``x``'s own dtype, is ``<= bound``; this is exactly what
  ``dpjax._validate.check_row_norms`` (and so every optimizer) checks. Rows
  already within the bound are returned bit-for-bit unchanged. A clipped row is
  computed in float64, rounded to ``x.dtype``, and, if rounding pushed it a hair
  over the bound, moved towards zero by one ulp per entry (at most a few times).

  This is the per-example projection of the reference code's logistic loss
  (``data_i / max(1, ||data_i||)``), applied once as preprocessing.

  Args:
    x: float array ``[n, d]`` (numpy, or a concrete jax array). Runs on the
      host, so call it outside ``jit``.
    bound: positive row-norm bound.

  Returns:
    An array of the same type (numpy or jax), shape and dtype as ``x``.

  Examples:
    >>> import numpy as np
    >>> from dpjax import data
    >>> x = np.array([[3., 4.], [0.3, 0.4]], dtype=np.float32)
    >>> data.clip_rows(x)  # float32(0.6)**2 + float32(0.8)**2 > 1: one ulp less
    array([[0.59999996, 0.79999995],
           [0.3       , 0.4       ]], dtype=float32)
  """
  if not _validate.is_concrete(x):
    raise TypeError("clip_rows runs on the host; call it on concrete arrays outside jit/vmap.")
  _validate.as_float_array(x, "x", ndim=2)
  bound = _validate.positive_float(bound, "bound")
  is_jax = isinstance(x, jax.Array)
  arr = np.asarray(jax.device_get(x)) if is_jax else np.asarray(x)
  norms = _row_norms64(arr)
  over = norms > bound
  out = np.array(arr, copy=True)
  if over.any():
    scaled = arr[over].astype(np.float64) * (bound / norms[over])[:, None]
    out[over] = scaled.astype(arr.dtype)
    out = _fit_in_ball(out, bound)
  return jnp.asarray(out) if is_jax else out


def scale_rows(
    x: Any,
    *,
    row_bound: float = 1.0,
    intercept: bool = True,
    dtype: Any = None,
) -> np.ndarray:
  """The private default preprocessing: each row mapped into the unit ball on its own.

  With a public row bound ``B`` (never read from the data)::

      z_i = x_i / max(B, ||x_i||_2)            so ||z_i|| <= 1,
      out_i = [1, z_i] / sqrt(2)               (intercept=True; ||out_i||^2 = (1 + ||z_i||^2) / 2 <= 1)
      out_i = z_i                              (intercept=False)

  ``out_i`` depends on ``x_i`` and public constants only, so under any
  neighbouring relation (adding, removing, zeroing or replacing one row) every
  other output row is unchanged: the map is per-example preprocessing, and a
  DP fit on ``out`` is DP with respect to ``x`` with the same guarantee.
  Compare the paper's column standardization (``load_libsvm(...,
  preprocess="paper")``), whose every row depends on the whole column.

  Why clipping and not unit normalization: ``x / max(B, ||x||)`` is the
  Euclidean projection onto the ball of radius ``B`` (rescaled by ``1/B``), the
  per-example map of the paper's reference code and of DP-SGD's clipping
  (Abadi et al. 2016). It is 1-Lipschitz, leaves rows inside the ball
  untouched and keeps their relative lengths, whereas ``x / ||x||`` blows a
  near-zero row up to unit length and is undefined at 0. On one-hot data such
  as the LIBSVM adult sets (14 ones per row, ``||x|| = sqrt(14)``) every
  non-zero row has norm ``>= 1``, so with ``B = 1`` both maps agree. ``B``
  larger than 1 (say the typical norm of a row, known from the schema) keeps
  short rows short.

  Why ``[1, z] / sqrt(2)``: the intercept must be inside the contract
  ``||x_i|| <= 1`` too. A constant intercept coordinate ``1/sqrt(2)`` (the
  same for every row, so it is a true intercept) leaves the features half of
  the squared norm; it is the paper's geometry (its rows are ``[1, u_i] /
  sqrt(2)`` with ``||u_i|| = 1``), so the paper's step sizes and constants
  keep their meaning, and ``d`` grows by one exactly as with the paper's
  pipeline.

  After the cast to ``dtype`` a row that rounding pushed above norm 1 has its
  feature entries moved towards zero by one ulp (at most a few times; also
  per row; the intercept entry is never moved, so it is the same in every
  row), so every row meets :func:`validate_dataset`'s float64 check exactly.

  Args:
    x: finite float array ``[n, d]`` (numpy, or a concrete jax array).
    row_bound: the public bound ``B > 0``.
    intercept: prepend the constant intercept column (``d + 1`` columns).
    dtype: float16/float32/float64 of the result; default ``x``'s dtype.

  Returns:
    numpy array ``[n, d + intercept]`` of ``dtype`` with every row norm ``<= 1``.

  Raises:
    TypeError: ``x`` is not a float array (or is traced), ``intercept`` not a
      bool, or ``dtype`` not a float dtype.
    ValueError: ``x`` not 2-d, empty or not finite; ``row_bound`` not > 0.

  Examples:
    >>> import numpy as np
    >>> from dpjax import data
    >>> x = np.array([[3., 4.], [0.3, 0.4], [0., 0.]])
    >>> data.scale_rows(x)  # [1, x_i / max(1, ||x_i||)] / sqrt(2)
    array([[0.70710678, 0.42426407, 0.56568542],
           [0.70710678, 0.21213203, 0.28284271],
           [0.70710678, 0.        , 0.        ]])
    >>> data.scale_rows(x, row_bound=5.0, intercept=False)
    array([[0.6 , 0.8 ],
           [0.06, 0.08],
           [0.  , 0.  ]])
  """
  if not _validate.is_concrete(x):
    raise TypeError("scale_rows runs on the host; call it on concrete arrays outside jit/vmap.")
  _validate.as_float_array(x, "x", ndim=2)
  bound = _validate.positive_float(row_bound, "row_bound")
  if not isinstance(intercept, (bool, np.bool_)):
    raise TypeError(f"intercept must be True or False, got {type(intercept).__name__}.")
  arr = np.asarray(jax.device_get(x))
  dt = _check_dtype(arr.dtype if dtype is None else dtype)
  return _scale_rows64(arr.astype(np.float64), bound, bool(intercept), dt)


def _scale_rows64(x: np.ndarray, bound: float, intercept: bool, dt: np.dtype) -> np.ndarray:
  """:func:`scale_rows` on a float64 array, after its checks."""
  z = x / np.maximum(bound, _row_norms64(x))[:, None]
  if intercept:
    out = np.empty((z.shape[0], z.shape[1] + 1), dtype=np.float64)
    out[:, 0] = 1.0
    out[:, 1:] = z
    out *= _INTERCEPT
  else:
    out = z
  # The intercept (1/sqrt(2) rounded: its square is <= 1/2 + ulp) is never shrunk.
  return _fit_in_ball(out.astype(dt), 1.0, first=int(intercept))


# ----------------------------------------------------------------------------
# LIBSVM reader.


def validate_dataset(data: Any, *, row_norm_bound: float = 1.0) -> Dataset:
  """Checks the data contract (``||x_i|| <= 1``, ``y_i in {-1, +1}``), eagerly.

  Optimizers call this on the host before any work: ``data`` must be a
  :class:`Dataset` (or an ``(x, y)`` pair) with ``x`` a finite, non-empty float
  array ``[n, d]``, ``y`` a float array ``[n]`` of labels in {-1, +1}, and
  every row norm (float64, from the stored values) ``<= row_norm_bound``. The
  value checks need concrete arrays; under ``jit`` only shapes and dtypes are
  checked, so validate outside the compiled function.

  Args:
    data: ``Dataset(x, y)`` or a 2-tuple ``(x, y)`` of numpy/jax arrays.
    row_norm_bound: the row-norm bound the privacy analysis assumes.

  Returns:
    ``Dataset(x, y)`` holding the same array objects (nothing is converted).

  Raises:
    TypeError: wrong container or non-float arrays.
    ValueError: bad shapes, empty data, NaN/inf, bad labels or row norms;
      each message says how to fix the input.

  Examples:
    >>> import numpy as np
    >>> from dpjax import data
    >>> ds = data.validate_dataset((np.eye(2, dtype=np.float32), np.array([1., -1.], np.float32)))
    >>> ds.n, ds.d
    (2, 2)
  """
  if not isinstance(data, tuple) or len(data) != 2:
    raise TypeError(
        f"data must be a dpjax.data.Dataset(x, y) or an (x, y) pair, got {type(data).__name__}."
    )
  x, y = data
  bound = _validate.positive_float(row_norm_bound, "row_norm_bound")
  _validate.as_float_array(x, "x", ndim=2)
  _validate.as_float_array(y, "y", ndim=1)
  if np.shape(x)[0] != np.shape(y)[0]:
    raise ValueError(
        f"x has {np.shape(x)[0]} rows but y has {np.shape(y)[0]} labels; pass one label per row."
    )
  _validate.check_labels(y, "y")
  _validate.check_row_norms(x, "x", bound=bound)
  return Dataset(x, y)
