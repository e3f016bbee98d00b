"""Differentially private optimizers as optax transforms.

* :func:`dp_gd`: full-batch DP gradient descent (``spec-newton.md`` 2.1);
* :func:`dp_precond_gd`: DP-GD preconditioned by a privately released
  curvature matrix, eigen-clipped at a noise-aware floor
  (``research-preconditioning.md`` section 6); its budget split is
  :func:`precond_budget` and its preconditioner :func:`clipped_inverse`;
* :func:`dp_newton`: the double-noise Newton method, Algorithm 3 of Ganesh et
  al. (NeurIPS 2023), with a fixed or an adaptive private minimum eigenvalue
  (``spec-newton.md`` 4.2, 4.3); its privacy arithmetic lives in the pure
  functions :func:`newton_budget`, :func:`direction_sensitivity` and
  :func:`adaptive_min_eigenvalue`;
* :func:`tail_average`: averages the last iterates of any of them (free
  post-processing); read the result with :func:`averaged_params`.
"""

from dpjax.transforms.averaging import (
    AVERAGES,
    TailAverageState,
    averaged_params,
    tail_average,
)
from dpjax.transforms.dp_gd import DPGDState, dp_gd
from dpjax.transforms.dp_newton import (
    DPNewtonState,
    NewtonBudget,
    adaptive_min_eigenvalue,
    direction_sensitivity,
    dp_newton,
    newton_budget,
)
from dpjax.transforms.dp_precond_gd import (
    DPPrecondGDState,
    PrecondBudget,
    clipped_inverse,
    dp_precond_gd,
    precond_budget,
)

__all__ = [
    "AVERAGES",
    "DPGDState",
    "DPNewtonState",
    "DPPrecondGDState",
    "NewtonBudget",
    "PrecondBudget",
    "TailAverageState",
    "adaptive_min_eigenvalue",
    "averaged_params",
    "clipped_inverse",
    "direction_sensitivity",
    "dp_gd",
    "dp_newton",
    "dp_precond_gd",
    "newton_budget",
    "precond_budget",
    "tail_average",
]
