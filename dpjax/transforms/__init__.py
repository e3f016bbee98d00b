"""Differentially private optimizers as optax transforms.

* :func:`dp_gd`: full-batch DP gradient descent (``spec-newton.md`` 2.1);
* :func:`dp_newton`: the double-noise Newton method, Algorithm 3 of Ganesh et
  al. (NeurIPS 2023), with a fixed or an adaptive private minimum eigenvalue
  (``spec-newton.md`` 4.2, 4.3); its privacy arithmetic lives in the pure
  functions :func:`newton_budget`, :func:`direction_sensitivity` and
  :func:`adaptive_min_eigenvalue`.
"""

from dpjax.transforms.dp_gd import DPGDState, dp_gd
from dpjax.transforms.dp_newton import (
    DPNewtonState,
    NewtonBudget,
    adaptive_min_eigenvalue,
    direction_sensitivity,
    dp_newton,
    newton_budget,
)

__all__ = [
    "DPGDState",
    "DPNewtonState",
    "NewtonBudget",
    "adaptive_min_eigenvalue",
    "direction_sensitivity",
    "dp_gd",
    "dp_newton",
    "newton_budget",
]
