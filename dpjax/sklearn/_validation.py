"""Shared checks of the estimator: input validation across scikit-learn versions, the key.

``_validate_data`` (scikit-learn's ``validate_data``, or the estimator method
before 1.6), the checks of ``random_state`` and of real numbers, and the fit's
PRNG key from ``random_state``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

try:  # scikit-learn >= 1.6
  from sklearn.utils.validation import validate_data as _sk_validate_data
except ImportError:  # pragma: no cover - scikit-learn 1.5
  _sk_validate_data = None

import jax

from dpjax import _common


def _validate_data(estimator: Any, *args: Any, **kwargs: Any) -> Any:
  if _sk_validate_data is not None:
    return _sk_validate_data(estimator, *args, **kwargs)
  return estimator._validate_data(*args, **kwargs)  # pragma: no cover - scikit-learn 1.5


def _check_random_state(random_state: Any) -> None:
  """Type and range of ``random_state`` (None, an int seed, a numpy RandomState)."""
  if random_state is None or isinstance(random_state, np.random.RandomState):
    return
  if isinstance(random_state, (bool, np.bool_)) or not isinstance(
      random_state, (numbers.Integral, np.integer)):
    raise TypeError(
        f"random_state must be None (a fresh key from OS entropy, the private default), an int "
        f"in [0, 2**{_common.SEED_BITS}) or a numpy.random.RandomState, got "
        f"{type(random_state).__name__}.")
  _common.check_seed(random_state, "random_state")


def _key_from(random_state: Any) -> jax.Array:
  """The fit's PRNG key: fresh OS entropy for None, the seed's full-width key otherwise."""
  _check_random_state(random_state)
  if random_state is None:
    return _common.fresh_key()
  if isinstance(random_state, np.random.RandomState):
    words = random_state.randint(0, 2**32, size=_common.SEED_BITS // 32, dtype=np.uint64)
    seed = 0
    for word in words.tolist():
      seed = (seed << 32) | int(word)
    return _common.key_from_seed(seed)
  return _common.key_from_seed(int(random_state))


def _is_real(v: Any) -> bool:
  return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
