"""The Gaussian mechanism's zCDP budget: the one place where noise scales are derived.

Adding ``N(0, sigma^2 I)`` to a query of L2 sensitivity ``Delta`` is
``rho``-zCDP with ``rho = Delta^2 / (2 sigma^2)`` (Bun & Steinke 2016, arXiv
1605.02065, Prop. 1.6): :func:`gaussian_zcdp` is that map and
:func:`gaussian_sigma` its inverse ``sigma = Delta / sqrt(2 rho)``. Both are
``jit``/``vmap`` safe and check concrete inputs eagerly.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

__all__ = ["gaussian_zcdp", "gaussian_sigma"]


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
