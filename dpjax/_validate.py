"""Eager input validation shared by every public dpjax function.

Every check runs on the host, before any work starts, and raises a
``TypeError`` (wrong kind of object) or ``ValueError`` (right kind, bad value)
whose message names the argument and says how to fix it.

Checks on *values* (finiteness, label set, row norms) need concrete arrays.
When a function is called under ``jit``/``vmap`` its arguments are tracers;
then only the static checks (dtype kind, rank, shape) run and the value checks
are skipped, so validate at the boundary, outside the compiled region.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

import jax
import numpy as np

__all__ = [
    "is_concrete",
    "as_float_array",
    "check_finite",
    "check_labels",
    "check_row_norms",
    "positive_float",
    "nonnegative_float",
    "float_in_open_interval",
    "probability",
    "positive_int",
    "choice",
]


def is_concrete(x: Any) -> bool:
  """True if ``x`` holds concrete values (not a jax tracer)."""
  return not isinstance(x, jax.core.Tracer)


def _to_host(x: Any) -> np.ndarray:
  return np.asarray(jax.device_get(x))


def as_float_array(
    x: Any,
    name: str,
    *,
    ndim: int | None = None,
    allow_empty: bool = False,
) -> Any:
  """Checks that ``x`` is a real floating array of rank ``ndim``, non-empty and finite.

  Returns ``x`` unchanged (numpy, jax or tracer): nothing is converted silently.
  """
  if isinstance(x, (str, bytes)) or x is None:
    raise TypeError(f"{name} must be a float array, got {type(x).__name__}.")
  dtype = getattr(x, "dtype", None)
  if dtype is None:
    try:
      dtype = np.asarray(x).dtype
    except Exception as err:  # pragma: no cover - exotic inputs
      raise TypeError(f"{name} must be a float array, got {type(x).__name__}.") from err
  if not np.issubdtype(np.dtype(dtype), np.floating):
    raise TypeError(
        f"{name} must have a floating dtype, got {np.dtype(dtype)}; "
        f"convert it first, e.g. {name}.astype(numpy.float32)."
    )
  shape = np.shape(x)
  if ndim is not None and len(shape) != ndim:
    raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(shape)}.")
  if not allow_empty and math.prod(shape) == 0:
    if len(shape) >= 2 and shape[0] > 0:
      raise ValueError(
          f"{name} has no columns (shape {tuple(shape)}); pass at least one feature (d >= 1)."
      )
    raise ValueError(f"{name} is empty (shape {tuple(shape)}); pass at least one example.")
  check_finite(x, name)
  return x


def check_finite(x: Any, name: str) -> None:
  """Raises ``ValueError`` if a concrete ``x`` contains NaN or inf."""
  if not is_concrete(x):
    return
  arr = _to_host(x)
  if arr.ndim == 0 and not np.isfinite(arr):
    raise ValueError(f"{name} must be finite, got {arr.item()}.")
  if not np.all(np.isfinite(arr)):
    bad = np.argwhere(~np.isfinite(arr))[0]
    raise ValueError(
        f"{name} contains NaN or inf (first at index {tuple(int(i) for i in bad)}); "
        "remove or impute those entries before calling dpjax."
    )


def check_labels(y: Any, name: str = "y", *, hint: str = "") -> None:
  """Raises ``ValueError`` unless every concrete label is exactly -1 or +1."""
  if not is_concrete(y):
    return
  arr = _to_host(y)
  ok = (arr == 1) | (arr == -1)
  if not np.all(ok):
    found = np.unique(arr[~ok])[:5]
    raise ValueError(
        f"{name} must contain only the labels -1 and +1; found {found.tolist()}. "
        + (hint or "Map your labels to {-1, +1} first.")
    )


def check_row_norms(x: Any, name: str = "x", *, bound: float = 1.0) -> None:
  """Raises ``ValueError`` if a concrete row of ``x`` has L2 norm above ``bound``.

  The norm is computed in float64 from the stored values, so the check is exact
  up to ~1e-16; no tolerance is granted. ``dpjax.data.clip_rows`` makes any
  matrix satisfy the contract in its own dtype.
  """
  if not is_concrete(x):
    return
  arr = _to_host(x).astype(np.float64)
  norms = np.sqrt(np.einsum("ij,ij->i", arr, arr))
  worst = int(np.argmax(norms)) if norms.size else 0
  if norms.size and norms[worst] > bound:
    raise ValueError(
        f"{name} row {worst} has L2 norm {norms[worst]:.9g} > {bound:g}; the privacy "
        f"analysis assumes every row has norm <= {bound:g}. Scale each row on its own with "
        "dpjax.data.clip_rows(x) or dpjax.data.scale_rows(x) (load_libsvm's default)."
    )


def _real_scalar(v: Any, name: str) -> float:
  if isinstance(v, bool) or not isinstance(v, (numbers.Real, np.ndarray, jax.Array)):
    raise TypeError(f"{name} must be a real number, got {type(v).__name__}.")
  if np.ndim(v) != 0:
    raise TypeError(f"{name} must be a scalar, got shape {np.shape(v)}.")
  if not is_concrete(v):
    raise TypeError(
        f"{name} must be a concrete number, not a traced value; pass it from outside jit."
    )
  f = float(v)
  if not math.isfinite(f):
    raise ValueError(f"{name} must be finite, got {f}.")
  return f


def positive_float(v: Any, name: str) -> float:
  """Returns ``float(v)``; raises unless it is a finite number > 0."""
  f = _real_scalar(v, name)
  if f <= 0:
    raise ValueError(f"{name} must be > 0, got {f!r}.")
  return f


def nonnegative_float(v: Any, name: str) -> float:
  """Returns ``float(v)``; raises unless it is a finite number >= 0."""
  f = _real_scalar(v, name)
  if f < 0:
    raise ValueError(f"{name} must be >= 0, got {f!r}.")
  return f


def float_in_open_interval(v: Any, name: str, lo: float, hi: float) -> float:
  """Returns ``float(v)``; raises unless ``lo < v < hi``."""
  f = _real_scalar(v, name)
  if not lo < f < hi:
    raise ValueError(f"{name} must be in the open interval ({lo:g}, {hi:g}), got {f!r}.")
  return f


def probability(v: Any, name: str) -> float:
  """Returns ``float(v)``; raises unless ``0 < v <= 1`` (a sampling rate)."""
  f = _real_scalar(v, name)
  if not 0.0 < f <= 1.0:
    raise ValueError(f"{name} must be in (0, 1] (a probability), got {f!r}.")
  return f


def positive_int(v: Any, name: str) -> int:
  """Returns ``int(v)``; raises unless it is an integer >= 1."""
  if isinstance(v, bool) or not isinstance(v, (numbers.Integral, np.integer)):
    raise TypeError(f"{name} must be an integer, got {type(v).__name__}.")
  if int(v) < 1:
    raise ValueError(f"{name} must be >= 1, got {int(v)}.")
  return int(v)


def choice(v: Any, name: str, choices: Iterable[str]) -> str:
  """Returns ``v``; raises unless it is one of the strings in ``choices``."""
  options = tuple(choices)
  if not isinstance(v, str):
    raise TypeError(f"{name} must be one of {options}, got {type(v).__name__}.")
  if v not in options:
    raise ValueError(f"{name} must be one of {options}, got {v!r}.")
  return v
