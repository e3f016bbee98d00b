"""Differentially private optimizers as optax transforms.

* :func:`dp_gd`: full-batch DP gradient descent (the baseline of Ganesh et al. 2023, Sec. 6);
* :func:`dp_precond_gd`: DP-GD preconditioned by a privately released
  curvature matrix, eigen-clipped at a noise-aware floor
  (a dpjax method); its budget split is
  :func:`precond_budget` and its preconditioner :func:`clipped_inverse`;
* :func:`dp_newton`: the double-noise Newton method, Algorithm 3 of Ganesh et
  al. (NeurIPS 2023), with a fixed or an adaptive private minimum eigenvalue
  (Sec. 5.1-5.2); its privacy arithmetic lives in the pure
  functions :func:`newton_budget`, :func:`direction_sensitivity` and
  :func:`adaptive_min_eigenvalue`;
* :func:`dp_newton_minibatch`: its minibatch variant (Sec. 6, Fig. 4 of the
  same paper): independent Poisson samples for the gradient and the curvature, two
  subsampled Gaussian mechanisms per step on the RDP accountant
  (:func:`minibatch_noise_multipliers` calibrates them; :func:`dp_newton_minibatch_step`
  is one step, with traceable lambda and noise scales, charging nothing);
* :func:`online_to_batch`: the DP online-to-batch conversion of Zhang, Tran
  and Cutkosky (NeurIPS 2022) around any online learner, with tree noise
  (their Algorithm 1);
* :func:`dp_ftrl` and :func:`single_pass_dp_sgd`: the single-pass baselines
  the conversion is compared with (tree-noised FTRL; DP-SGD with each example
  used once);
* :func:`cubic_newton`: the private cubic-regularised Newton method,
  Algorithms 1-2 of Ganesh et al. (NeurIPS 2023), for strongly convex losses
  on a ball (Sec. 4 there); its calibration is
  :func:`cubic_solver_calibration` and :func:`l2_logistic_constants` gives
  the constants of the L2-regularised logistic loss;
* :func:`dp_sgd`: DP-SGD with Poisson subsampling, per-example clipping and
  an RDP accountant (Abadi et al. CCS 2016; Mironov 2017); :func:`dp_sgd_step` is one
  step, with traceable learning rate and noise std, charging nothing, and
  :func:`dp_sgd_noise_multiplier` the multiplier it calibrates from ``epsilon``;
* :func:`tail_average`: averages the last iterates of any of them (free
  post-processing); read the result with :func:`averaged_params`.
"""

from dpjax.transforms.averaging import (
    AVERAGES,
    TailAverageState,
    averaged_params,
    tail_average,
)
from dpjax.transforms.cubic_newton import (
    CubicSolverCalibration,
    DPCubicNewtonState,
    LossConstants,
    cubic_newton,
    cubic_solver_calibration,
    l2_logistic_constants,
    solver_average_weights,
)
from dpjax.transforms.dp_ftrl import DPFTRLState, dp_ftrl
from dpjax.transforms.dp_gd import DPGDState, dp_gd
from dpjax.transforms.dp_sgd import DPSGDState, dp_sgd, dp_sgd_noise_multiplier, dp_sgd_step
from dpjax.transforms.dp_newton import (
    CURVATURE_STRUCTURES,
    DPNewtonState,
    NewtonBudget,
    adaptive_min_eigenvalue,
    direction_sensitivity,
    dp_newton,
    newton_budget,
    trace_sensitivity,
)
from dpjax.transforms.dp_newton_minibatch import (
    DPNewtonMinibatchState,
    dp_newton_minibatch,
    dp_newton_minibatch_step,
    sampled_grad_and_curvature,
)
from dpjax.transforms.newton_calibration import (
    minibatch_min_eigenvalue,
    minibatch_noise_multipliers,
)
from dpjax.transforms.online_to_batch import (
    OnlineToBatchState,
    difference_clip_bound,
    online_to_batch,
)
from dpjax.transforms.single_pass_dp_sgd import (
    SinglePassDPSGDState,
    single_pass_dp_sgd,
    single_pass_noise_scale,
)
from dpjax.transforms.tree_prefix_sum import TreeAggregationState, tree_prefix_sum
from dpjax.transforms.dp_precond_gd import (
    DPPrecondGDState,
    PrecondBudget,
    PrecondNoise,
    clipped_inverse,
    dp_precond_gd,
    eigenvalue_floor,
    precond_budget,
    precond_noise,
)

__all__ = [
    "TreeAggregationState",
    "tree_prefix_sum",
    "CURVATURE_STRUCTURES",
    "AVERAGES",
    "CubicSolverCalibration",
    "DPCubicNewtonState",
    "LossConstants",
    "cubic_newton",
    "cubic_solver_calibration",
    "l2_logistic_constants",
    "minibatch_min_eigenvalue",
    "minibatch_noise_multipliers",
    "solver_average_weights",
    "DPFTRLState",
    "DPGDState",
    "DPNewtonMinibatchState",
    "DPNewtonState",
    "DPPrecondGDState",
    "DPSGDState",
    "NewtonBudget",
    "OnlineToBatchState",
    "PrecondBudget",
    "PrecondNoise",
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
    "dp_newton_minibatch",
    "dp_newton_minibatch_step",
    "dp_precond_gd",
    "eigenvalue_floor",
    "precond_noise",
    "dp_sgd",
    "dp_sgd_noise_multiplier",
    "dp_sgd_step",
    "newton_budget",
    "online_to_batch",
    "precond_budget",
    "sampled_grad_and_curvature",
    "single_pass_dp_sgd",
    "single_pass_noise_scale",
    "tail_average",
    "trace_sensitivity",
]
