"""The synthetic logistic-regression data of Ganesh et al. (NeurIPS 2023, arXiv:2305.13209), Sec. 5.1."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from dpjax import _validate
from dpjax.data.contract import Dataset, _check_dtype, _fit_in_ball

__all__ = ["synthetic"]


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
