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
* :func:`online_to_batch`: the DP online-to-batch conversion of Zhang, Tran
  and Cutkosky (NeurIPS 2022) around any online learner, with tree noise
  (``spec-online-to-batch.md`` section 1);
* :func:`dp_ftrl` and :func:`single_pass_dp_sgd`: the single-pass baselines
  the conversion is compared with (tree-noised FTRL; DP-SGD with each example
  used once);
* :func:`tail_average`: averages the last iterates of any of them (free
  post-processing); read the result with :func:`averaged_params`.
"""

from dpjax.transforms.averaging import (
    AVERAGES,
    TailAverageState,
    averaged_params,
    tail_average,
)
from dpjax.transforms.dp_ftrl import DPFTRLState, dp_ftrl
from dpjax.transforms.dp_gd import DPGDState, dp_gd
from dpjax.transforms.dp_newton import (
    DPNewtonState,
    NewtonBudget,
    adaptive_min_eigenvalue,
    direction_sensitivity,
    dp_newton,
    newton_budget,
)
from dpjax.transforms.online_to_batch import (
    OnlineToBatchState,
    difference_clip_bound,
    online_to_batch,
)
from dpjax.transforms.single_pass_dp_sgd import SinglePassDPSGDState, single_pass_dp_sgd
from dpjax.transforms.dp_precond_gd import (
    DPPrecondGDState,
    PrecondBudget,
    clipped_inverse,
    dp_precond_gd,
    precond_budget,
)

__all__ = [
    "AVERAGES",
    "DPFTRLState",
    "DPGDState",
    "DPNewtonState",
    "DPPrecondGDState",
    "NewtonBudget",
    "OnlineToBatchState",
    "PrecondBudget",
    "SinglePassDPSGDState",
    "TailAverageState",
    "adaptive_min_eigenvalue",
    "averaged_params",
    "clipped_inverse",
    "difference_clip_bound",
    "direction_sensitivity",
    "dp_ftrl",
    "dp_gd",
    "dp_newton",
    "dp_precond_gd",
    "newton_budget",
    "online_to_batch",
    "precond_budget",
    "single_pass_dp_sgd",
    "tail_average",
]
