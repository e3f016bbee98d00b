"""LIBSVM / svmlight text (plain, gzip or bzip2) loaded into the data contract.

By default each row is scaled into the unit ball on its own
(:func:`dpjax.data.scale_rows`), so adding or removing a row changes no other
row; the column standardization of the reference code of Ganesh et al.
(NeurIPS 2023, arXiv:2305.13209) stays available as ``preprocess="paper"``,
which is not private (it warns), and :mod:`dpjax.mechanisms.standardize` is
its private replacement.
"""

from __future__ import annotations

import bz2
import gzip
import math
import numbers
import os
import zlib
from typing import Any

import numpy as np

from dpjax import _validate
from dpjax import leaks
from dpjax.data.contract import Dataset, _check_dtype, _fit_in_ball, _scale_rows64

__all__ = ["PAPER_LEAK", "PREPROCESS", "load_libsvm"]

# load_libsvm's preprocessing options; the first is the default.
PREPROCESS = ("per-row", "paper", "none")

PAPER_LEAK = (
    "preprocess='paper' standardizes every column with the mean and standard deviation of the "
    "private data itself, so each loaded row depends on every other row and no privacy guarantee "
    "covers a fit on it (adding one row moves all the others). Use the default "
    "preprocess='per-row', or dpjax.mechanisms.standardize.PrivateStandardizer for a private "
    "standardization charged to the budget."
)


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
