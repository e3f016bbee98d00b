"""Datasets for DP logistic regression: LIBSVM loading, preprocessing, synthetic data.

Every dpjax optimizer assumes the contract of Ganesh et al. (NeurIPS 2023,
arXiv:2305.13209), Sec. 5.1:
rows ``||x_i||_2 <= 1`` and labels ``y_i in {-1, +1}``. This module produces
data that meets it and checks it:

* :func:`load_libsvm` reads svmlight/LIBSVM text (plain, gzip or bzip2) and, by
  default, scales each row into the unit ball on its own (:func:`scale_rows`), so
  adding or removing a row changes no other row; the paper's column
  standardization (that of the paper's reference code) stays available as
  ``preprocess="paper"``, which is not private (it warns), and
  :mod:`dpjax.mechanisms.standardize` is its private replacement;
* :func:`scale_rows` is that per-row map: clip each row to a public norm bound,
  prepend a constant intercept, and scale into ``||x_i|| <= 1``;
* :func:`synthetic` is the paper's generator (section 5.1, Jul-2023 code);
* :func:`clip_rows` projects rows into a ball, exactly in the array's own dtype;
* :func:`validate_dataset` is the eager check optimizers run at the privacy
  boundary.

Arrays are host (numpy) arrays; they are valid inputs to every jax function.
"""

from __future__ import annotations

import bz2
import gzip
import math
import numbers
import os
import zlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax import leaks

__all__ = [
    "Dataset",
    "PREPROCESS",
    "load_libsvm",
    "scale_rows",
    "synthetic",
    "clip_rows",
    "validate_dataset",
]

# Rounding fix: at most this many one-ulp shrinks per row (see _fit_in_ball).
_MAX_ULP_SHRINKS = 8

# load_libsvm's preprocessing options; the first is the default.
PREPROCESS = ("per-row", "paper", "none")

# The intercept's share of the unit row norm: rows are [1, z] / sqrt(2), ||z|| <= 1.
_INTERCEPT = 1.0 / math.sqrt(2.0)

PAPER_LEAK = (
    "preprocess='paper' standardizes every column with the mean and standard deviation of the "
    "private data itself, so each loaded row depends on every other row and no privacy guarantee "
    "covers a fit on it (adding one row moves all the others). Use the default "
    "preprocess='per-row', or dpjax.mechanisms.standardize.PrivateStandardizer for a private "
    "standardization charged to the budget."
)


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


def _read_text(path: os.PathLike | str) -> str:
  with open(path, "rb") as f:
    head = f.read(3)
  if head[:2] == b"\x1f\x8b":
    opener, kind = gzip.open, "gzip"
  elif head == b"BZh":
    opener, kind = bz2.open, "bzip2"
  else:
    opener, kind = open, None
  chunks: list[bytes] = []
  try:
    with opener(path, "rb") as f:
      while chunk := f.read(1 << 16):  # Small chunks: a damaged stream keeps its good prefix.
        chunks.append(chunk)
  except (EOFError, OSError, zlib.error) as err:
    if kind is None:  # Not a decompression error: an I/O error of a plain file.
      raise
    lineno = sum(c.count(b"\n") for c in chunks) + 1  # The first line not read in full.
    raise ValueError(
        f"{os.fspath(path)}, line {lineno}: the {kind} stream is corrupt or truncated "
        f"({type(err).__name__}: {err}); the file is damaged: download or copy it again."
    ) from err
  raw = b"".join(chunks)
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as err:
    raise ValueError(
        f"{os.fspath(path)} is not svmlight/LIBSVM text (not UTF-8 at byte {err.start}); "
        "pass a plain, .gz or .bz2 LIBSVM file."
    ) from err


def _line_error(path: str, lineno: int, line: str) -> ValueError:
  """Builds a precise error for a line that the fast path could not parse."""
  parts = line.split()
  where = f"{path}, line {lineno}"
  try:
    float(parts[0])
  except ValueError:
    return ValueError(
        f"{where}: cannot read the label {parts[0]!r}; each line must be "
        "'label index:value ...' with a numeric label."
    )
  for tok in parts[1:]:
    fields = tok.split(":")
    if len(fields) != 2 or fields[0] == "qid":
      return ValueError(
          f"{where}: malformed feature {tok!r}; expected 'index:value' "
          "(query ids 'qid:' and multi-label lines are not supported)."
      )
    try:
      int(fields[0])
    except ValueError:
      return ValueError(f"{where}: feature index in {tok!r} is not an integer.")
    try:
      float(fields[1])
    except ValueError:
      return ValueError(f"{where}: feature value in {tok!r} is not a number.")
  return ValueError(f"{where}: cannot parse {line.strip()!r}.")  # pragma: no cover


def _parse_libsvm(path: str, text: str):
  """Returns (labels, rows, cols (1-based), values, line numbers) as numpy arrays."""
  labels: list[float] = []
  linenos: list[int] = []
  counts: list[int] = []
  idx: list[int] = []
  vals: list[float] = []
  for lineno, line in enumerate(text.splitlines(), start=1):
    if "#" in line:
      line = line.split("#", 1)[0]
    parts = line.split()
    if not parts:
      continue
    try:
      label = float(parts[0])
      pairs = [tok.split(":") for tok in parts[1:]]
      if any(len(p) != 2 for p in pairs):
        raise ValueError
      idx.extend([int(p[0]) for p in pairs])
      vals.extend([float(p[1]) for p in pairs])
    except ValueError:
      raise _line_error(path, lineno, line) from None
    labels.append(label)
    linenos.append(lineno)
    counts.append(len(pairs))
  if not labels:
    raise ValueError(f"{path} contains no examples (only blank or comment lines).")
  y = np.asarray(labels, dtype=np.float64)
  lines = np.asarray(linenos, dtype=np.int64)
  rows = np.repeat(np.arange(len(labels), dtype=np.int64), counts)
  cols = np.asarray(idx, dtype=np.int64)
  values = np.asarray(vals, dtype=np.float64)

  bad = ~np.isfinite(y)
  if bad.any():
    raise ValueError(f"{path}, line {lines[np.argmax(bad)]}: the label is not finite.")
  bad = ~np.isfinite(values)
  if bad.any():
    raise ValueError(
        f"{path}, line {lines[rows[np.argmax(bad)]]}: feature value is NaN or inf; "
        "clean the file first."
    )
  bad = cols < 1
  if bad.any():
    k = np.argmax(bad)
    raise ValueError(
        f"{path}, line {lines[rows[k]]}: feature index {cols[k]} < 1; LIBSVM indices "
        "are 1-based (zero-based files are not supported)."
    )
  if cols.size:
    order = np.lexsort((cols, rows))
    dup = (np.diff(rows[order]) == 0) & (np.diff(cols[order]) == 0)
    if dup.any():
      k = order[np.argmax(dup)]
      raise ValueError(
          f"{path}, line {lines[rows[k]]}: feature index {cols[k]} appears twice; "
          "each index may occur at most once per line."
      )
  return y, rows, cols, values


def _paper_preprocess(x: np.ndarray) -> np.ndarray:
  """The reference code's preprocessing (Feb-2023 loader + its loss's projection), in float64. NOT PRIVATE.

  StandardScaler (population std; a constant column becomes 0) -> each non-zero
  row scaled to unit norm -> prepend a column of ones -> divide each row by
  ``max(1, ||row||)``. Rows are ``[1, u_i] / sqrt(2)`` with ``||u_i|| = 1``, or
  ``[1, 0, ..., 0]`` when the standardized row is zero.
  """
  mean = x.mean(axis=0)
  std = x.std(axis=0)
  # A column is constant iff max == min; testing std == 0 instead would turn a
  # constant column whose mean rounds (e.g. all 0.1) into +-1 noise.
  constant = x.max(axis=0) == x.min(axis=0)
  scale = np.where(constant, 1.0, std)
  z = (x - mean) / scale
  z[:, constant] = 0.0
  norms = np.sqrt(np.einsum("ij,ij->i", z, z))
  nonzero = norms > 0
  z[nonzero] /= norms[nonzero, None]
  out = np.empty((z.shape[0], z.shape[1] + 1), dtype=np.float64)
  out[:, 0] = 1.0
  out[:, 1:] = z
  full = np.sqrt(np.einsum("ij,ij->i", out, out))
  out /= np.maximum(1.0, full)[:, None]
  return out


def load_libsvm(
    path: os.PathLike | str,
    *,
    n_features: int | None = None,
    preprocess: str = "per-row",
    row_bound: float = 1.0,
    positive_label: float | None = None,
    dtype: Any = np.float32,
) -> Dataset:
  """Reads a LIBSVM/svmlight file into a dense :class:`Dataset`.

  The file is ``label index:value ...`` per line with 1-based, unique indices;
  ``#`` starts a comment and blank lines are skipped. Plain, gzip and bzip2
  files are accepted (detected from their first bytes, not their name). Only
  numpy and the standard library are used.

  Preprocessing (``preprocess``, one of :data:`PREPROCESS`):

  * ``"per-row"`` (default, private): :func:`scale_rows` with the public
    ``row_bound`` ``B``: each row becomes ``[1, x_i / max(B, ||x_i||)] /
    sqrt(2)``, computed in float64, so ``x`` has ``n_features + 1`` columns and
    every row norm is ``<= 1``. Each output row depends on its own input row
    only: adding a line to the file changes no other loaded row, so a DP fit
    on the result is DP for the file's rows. For a standardization with a
    privacy guarantee load with ``"none"`` and use
    :class:`dpjax.mechanisms.standardize.PrivateStandardizer` (e.g. through
    ``dpjax.fit(..., standardize=...)``).
  * ``"paper"`` (**not private**; issues :class:`dpjax.PrivacyLeakWarning`):
    the pipeline of the paper's reference code, computed
    in float64. Standardize each column with the data's own mean and
    population std (as ``sklearn.preprocessing.StandardScaler``; a constant
    column, ``max == min``, becomes 0); scale each non-zero row to unit L2
    norm; prepend an intercept column of ones; divide each row by ``max(1,
    ||row||)``. Rows are therefore ``[1, u_i] / sqrt(2)`` with ``||u_i|| =
    1``, and ``[1, 0, ..., 0]`` for rows that are zero after standardization.
    ``x`` has ``n_features + 1`` columns. The column statistics are read
    from the private data without noise: one added row moves every other
    row, and a fit's sensitivities no longer hold (the gradient sum can move
    by more than its bound of 1). Use it only to reproduce the paper.
  * ``"none"``: the features as read (dense, ``n_features`` columns), e.g.
    the input of a private standardization.

  After the cast to ``dtype``, a row whose float64 norm rounding pushed above
  1 is moved towards zero one ulp per entry (at most a few ulps in all), so
  every row satisfies ``||x_i|| <= 1`` exactly as :func:`validate_dataset`
  checks it.

  Args:
    path: file path.
    n_features: number of features ``d``; defaults to the largest index
      present. Pass it explicitly when train/test splits must agree (the
      LIBSVM a1a test split has index 123, the training split only 119).
    preprocess: ``"per-row"`` (default), ``"paper"`` (not private) or ``"none"``.
    row_bound: ``"per-row"`` only: the public row-norm bound ``B > 0``
      (default 1, the projection of the paper's reference code).
    positive_label: if given, this label becomes +1 and every other label -1
      (e.g. ``positive_label=1`` for phishing's 0/1 labels). If ``None``, the
      labels must already be -1/+1.
    dtype: numpy floating dtype of the returned arrays.

  Returns:
    ``Dataset(x, y)`` of numpy arrays of ``dtype``.

  Raises:
    ValueError: malformed lines (with the line number), a corrupt or truncated
      gzip/bzip2 stream (with the first line it lost), ``n_features`` below
      the largest index, labels not in {-1, +1} without ``positive_label``, or
      ``positive_label`` absent from the file.

  Examples:
    >>> import pathlib, tempfile
    >>> from dpjax import data
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "toy.svm"
    >>> _ = path.write_text("+1 1:2 3:1\\n-1 2:1  # a comment\\n")
    >>> ds = data.load_libsvm(path, preprocess="none")
    >>> ds.x
    array([[2., 0., 1.],
           [0., 1., 0.]], dtype=float32)
    >>> ds.y
    array([ 1., -1.], dtype=float32)
    >>> data.load_libsvm(path).x  # per-row: [1, x_i / max(1, ||x_i||)] / sqrt(2)
    array([[0.70710677, 0.6324555 , 0.        , 0.31622776],
           [0.70710677, 0.        , 0.70710677, 0.        ]], dtype=float32)
  """
  if not isinstance(path, (str, os.PathLike)):
    raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}.")
  if n_features is not None:
    n_features = _validate.positive_int(n_features, "n_features")
  preprocess = _validate.choice(preprocess, "preprocess", PREPROCESS)
  row_bound = _validate.positive_float(row_bound, "row_bound")
  if row_bound != 1.0 and preprocess != "per-row":
    raise ValueError(
        f"row_bound={row_bound!r} applies to preprocess='per-row' only, not to "
        f"preprocess={preprocess!r}; remove row_bound."
    )
  if positive_label is not None:
    if isinstance(positive_label, bool) or not isinstance(positive_label, numbers.Real):
      raise TypeError(
          f"positive_label must be a number (a label in the file), got {type(positive_label).__name__}."
      )
    if not math.isfinite(float(positive_label)):
      raise ValueError(f"positive_label must be finite, got {positive_label!r}.")
  dt = _check_dtype(dtype)
  name = os.fspath(path)

  labels, rows, cols, values = _parse_libsvm(name, _read_text(path))
  max_index = int(cols.max()) if cols.size else 0
  if n_features is None:
    if max_index == 0:
      raise ValueError(f"{name} has no features; pass n_features to set the dimension.")
    n_features = max_index
  elif n_features < max_index:
    raise ValueError(
        f"n_features={n_features} is smaller than the largest feature index {max_index} "
        f"in {name}; pass n_features >= {max_index} (or None to infer it)."
    )

  if positive_label is None:
    _validate.check_labels(
        labels,
        f"the labels of {name}",
        hint=(
            "Pass positive_label=<label> to map that label to +1 and all others to -1 "
            "(e.g. positive_label=1 for 0/1 labels)."
        ),
    )
    y = labels
  else:
    target = float(positive_label)
    hit = labels == target
    if not hit.any():
      found = np.unique(labels)[:10].tolist()
      raise ValueError(
          f"positive_label={positive_label!r} does not occur in {name}; its labels are "
          f"{found}. Pass one of them."
      )
    y = np.where(hit, 1.0, -1.0)

  x = np.zeros((labels.shape[0], n_features), dtype=np.float64)
  x[rows, cols - 1] = values
  if preprocess == "per-row":
    x = _scale_rows64(x, row_bound, True, dt)
  elif preprocess == "paper":
    leaks.warn(PAPER_LEAK)
    x = _fit_in_ball(_paper_preprocess(x).astype(dt), 1.0)
  else:
    x = x.astype(dt)
  return Dataset(x, y.astype(dt))


# ----------------------------------------------------------------------------
# Synthetic data.


def synthetic(seed: int, n: int = 10_000, d: int = 100, *, dtype: Any = np.float32) -> Dataset:
  """The paper's synthetic logistic-regression data (Ganesh et al. 2023, Sec. 6).

  Jul-2023 reference generator: rows uniform on the unit sphere (normalised
  standard Gaussians), ``w_true`` = all ones (so ``||w_true|| = sqrt(d)``), and
  ``y_i = +1`` with probability ``sigmoid(<x_i, w_true>)``, else ``-1``. No
  intercept column. Unlike the reference (unseeded), the draw is deterministic
  in ``seed`` (``numpy.random.default_rng(seed)``: features first, then one
  uniform per label). Rows are cast to ``dtype`` and, if rounding put a norm
  above 1, shrunk by a few ulps so that ``||x_i|| <= 1`` holds exactly.

  Args:
    seed: non-negative integer seed.
    n: number of examples.
    d: dimension.
    dtype: numpy floating dtype of the returned arrays.

  Returns:
    ``Dataset(x [n, d], y [n])`` of numpy arrays.

  Examples:
    >>> from dpjax import data
    >>> ds = data.synthetic(0, n=5, d=3)
    >>> ds.x.shape, ds.y.shape, ds.x.dtype
    ((5, 3), (5,), dtype('float32'))
    >>> bool((abs(ds.y) == 1).all())
    True
  """
  if isinstance(seed, bool) or not isinstance(seed, (numbers.Integral, np.integer)):
    raise TypeError(f"seed must be an integer, got {type(seed).__name__}.")
  if int(seed) < 0:
    raise ValueError(f"seed must be >= 0, got {int(seed)}.")
  n = _validate.positive_int(n, "n")
  d = _validate.positive_int(d, "d")
  dt = _check_dtype(dtype)
  rng = np.random.default_rng(int(seed))
  g = rng.standard_normal((n, d))
  norms = np.sqrt(np.einsum("ij,ij->i", g, g))
  while (norms == 0).any():  # pragma: no cover - probability zero
    zero = norms == 0
    g[zero] = rng.standard_normal((int(zero.sum()), d))
    norms = np.sqrt(np.einsum("ij,ij->i", g, g))
  x = g / norms[:, None]
  z = x.sum(axis=1)  # <x_i, w_true> with w_true = ones(d)
  # Stable sigmoid: exp of a non-positive number only.
  e = np.exp(-np.abs(z))
  p = np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
  y = np.where(rng.random(n) < p, 1.0, -1.0)
  return Dataset(_fit_in_ball(x.astype(dt), 1.0), y.astype(dt))


# ----------------------------------------------------------------------------
# Validation at the privacy boundary.


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
