"""Argument checks shared by the baselines and their runner (:mod:`dpjax.baselines`).

Not an algorithm: validation only, no randomness and no privacy cost.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpjax import _validate
from dpjax import data as data_lib

__all__ = ["check_data", "check_delta"]


def check_data(x: Any, y: Any, row_norm_bound: float) -> tuple[int, int]:
  """``(n, d)`` of a dataset that meets the contract (row norms, labels in {-1, +1})."""
  ds = data_lib.validate_dataset((x, y), row_norm_bound=row_norm_bound)
  return int(np.shape(ds.x)[0]), int(np.shape(ds.x)[1])


def check_delta(delta: Any, n: int) -> float:
  """``delta`` in (0, 1), or the default ``n**-2`` when it is None."""
  if delta is None:
    return 1.0 / float(n) ** 2
  return _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
