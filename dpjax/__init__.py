"""dpjax: JAX-accelerated differentially private convex optimizers.

Modules (imports only point down):

* :mod:`dpjax.accounting`: the accountant pytree (zCDP total, RDP curve of the
  Poisson-subsampled Gaussian, truncation slack) and (eps, delta) conversions;
* :mod:`dpjax.sampling`: fixed-shape Poisson minibatch sampling;
* :mod:`dpjax.spectral`: the eigenvalue modification Psi_lambda (clip / add);
* :mod:`dpjax.glm`, :mod:`dpjax.per_example`: fused GLM curvature; generic
  per-example gradients and Hessians with clipping;
* :mod:`dpjax.data`, :mod:`dpjax.solve`: datasets and the privacy contract
  (per-row preprocessing by default); the exact non-private optimum and
  excess loss;
* :mod:`dpjax.standardize`: private standardization (DP column means and
  standard deviations with public bounds), charged in ``fit``'s total;
* :mod:`dpjax.losses`: per-example convex losses with their public constants
  (L2-regularised logistic, pseudo-Huber, Poisson regression) for the
  general-loss DP-GD and Newton;
* :mod:`dpjax.transforms`: the private optimizers as optax transforms
  (:func:`dp_gd`, :func:`dp_sgd`, :func:`dp_precond_gd`, :func:`dp_newton`,
  its minibatch variant, :func:`cubic_newton`, and :func:`tail_average` for
  any of them);
* :mod:`dpjax.baselines`: the paper's baselines (AOP, damped Newton,
  DP-GD-Oracle), each stating whether it is private;
* :mod:`dpjax.training`: :func:`fit`, a whole private run compiled into one
  ``lax.scan``, vmapped over repeats;
* :mod:`dpjax.minibatch`: per-example clipped sums (and gradient differences)
  over a minibatch, fused for GLMs;
* :mod:`dpjax.online`: online learners on a ball (OGD, optimistic OGD, the
  strongly convex learner, KT coin betting) as optax transforms;
* :mod:`dpjax.tree_aggregation`: the binary mechanism for private prefix
  sums, each tree node released through :mod:`dpjax.noise` (buffered and
  Honaker modes), and the :func:`tree_prefix_sum` transform;
* :mod:`dpjax.streaming`: single-pass streaming fits (DP online-to-batch and
  its baselines) behind :func:`fit`;
* :mod:`dpjax.drivers`: the compiled runs behind :func:`fit` for the
  Poisson-minibatch methods, cubic Newton, the general losses and the
  baselines;
* :mod:`dpjax.checkpoint`: any optimizer state or params pytree saved to one
  ``.npz`` and restored bitwise (keys and accountant included), for resuming;
* :mod:`dpjax.budget`: budget enforcement for whole runs (plans over a cap,
  in-graph refusals and overspending become errors);
* :mod:`dpjax.audit`: empirical privacy audits of the mechanisms, with
  broken negative controls (needs the ``audit`` extra, scipy).
"""

from dpjax import accounting
from dpjax import baselines
from dpjax import budget
from dpjax import checkpoint
from dpjax import data
from dpjax import drivers
from dpjax import glm
from dpjax import leaks
from dpjax import losses
from dpjax import minibatch
from dpjax import online
from dpjax import per_example
from dpjax import sampling
from dpjax import solve
from dpjax import spectral
from dpjax import standardize
from dpjax import streaming
from dpjax import training
from dpjax import transforms
from dpjax import tree_aggregation
from dpjax import audit  # noqa: E402  (last: its mechanisms use the modules above)
from dpjax.accounting import AccountantState, epsilon_to_zcdp, zcdp_to_epsilon
from dpjax.data import Dataset, load_libsvm, synthetic
from dpjax.leaks import PrivacyLeakWarning
from dpjax.training import FitResult, fit
from dpjax.tree_aggregation import TreeAggregationState, tree_prefix_sum
from dpjax.transforms import (
    DPGDState,
    DPNewtonState,
    DPPrecondGDState,
    DPSGDState,
    OnlineToBatchState,
    averaged_params,
    cubic_newton,
    dp_gd,
    dp_newton,
    dp_newton_minibatch,
    dp_precond_gd,
    dp_sgd,
    online_to_batch,
    tail_average,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "AccountantState",
    "DPGDState",
    "DPNewtonState",
    "DPPrecondGDState",
    "DPSGDState",
    "Dataset",
    "FitResult",
    "OnlineToBatchState",
    "PrivacyLeakWarning",
    "TreeAggregationState",
    "accounting",
    "audit",
    "averaged_params",
    "baselines",
    "budget",
    "checkpoint",
    "cubic_newton",
    "data",
    "drivers",
    "dp_gd",
    "dp_newton",
    "dp_newton_minibatch",
    "dp_precond_gd",
    "dp_sgd",
    "epsilon_to_zcdp",
    "fit",
    "glm",
    "leaks",
    "load_libsvm",
    "losses",
    "minibatch",
    "online",
    "online_to_batch",
    "per_example",
    "sampling",
    "solve",
    "spectral",
    "standardize",
    "streaming",
    "synthetic",
    "tail_average",
    "training",
    "transforms",
    "tree_aggregation",
    "tree_prefix_sum",
    "zcdp_to_epsilon",
]
