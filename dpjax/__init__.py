"""dpjax: JAX-accelerated differentially private convex optimizers.

Modules (imports only point down):

* :mod:`dpjax.accounting`: the zCDP accountant pytree and (eps, delta) conversions;
* :mod:`dpjax.spectral`: the eigenvalue modification Psi_lambda (clip / add);
* :mod:`dpjax.glm`, :mod:`dpjax.per_example`: fused GLM curvature; generic
  per-example gradients and Hessians with clipping;
* :mod:`dpjax.data`, :mod:`dpjax.solve`: datasets and the privacy contract;
  the exact non-private optimum and excess loss;
* :mod:`dpjax.transforms`: the private optimizers as optax transforms
  (:func:`dp_gd`, :func:`dp_precond_gd`, :func:`dp_newton`, and
  :func:`tail_average` for any of them);
* :mod:`dpjax.training`: :func:`fit`, a whole private run compiled into one
  ``lax.scan``, vmapped over repeats;
* :mod:`dpjax.minibatch`: per-example clipped sums (and gradient differences)
  over a minibatch, fused for GLMs;
* :mod:`dpjax.online`: online learners on a ball (OGD, optimistic OGD, the
  strongly convex learner, KT coin betting) as optax transforms;
* :mod:`dpjax.tree_aggregation`: binary-tree noise for private prefix sums
  (buffered, regenerate and Honaker modes) and the :func:`tree_prefix_sum`
  transform;
* :mod:`dpjax.streaming`: single-pass streaming fits (DP online-to-batch and
  its baselines) behind :func:`fit`.
"""

from dpjax import accounting
from dpjax import data
from dpjax import glm
from dpjax import minibatch
from dpjax import online
from dpjax import per_example
from dpjax import solve
from dpjax import spectral
from dpjax import streaming
from dpjax import training
from dpjax import transforms
from dpjax import tree_aggregation
from dpjax.accounting import AccountantState, epsilon_to_zcdp, zcdp_to_epsilon
from dpjax.data import Dataset, load_libsvm, synthetic
from dpjax.training import FitResult, fit
from dpjax.tree_aggregation import TreeAggregationState, tree_prefix_sum
from dpjax.transforms import (
    DPGDState,
    DPNewtonState,
    DPPrecondGDState,
    OnlineToBatchState,
    averaged_params,
    dp_gd,
    dp_newton,
    dp_precond_gd,
    online_to_batch,
    tail_average,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "AccountantState",
    "DPGDState",
    "DPNewtonState",
    "DPPrecondGDState",
    "Dataset",
    "FitResult",
    "OnlineToBatchState",
    "TreeAggregationState",
    "accounting",
    "averaged_params",
    "data",
    "dp_gd",
    "dp_newton",
    "dp_precond_gd",
    "epsilon_to_zcdp",
    "fit",
    "glm",
    "load_libsvm",
    "minibatch",
    "online",
    "online_to_batch",
    "per_example",
    "solve",
    "spectral",
    "streaming",
    "synthetic",
    "tail_average",
    "training",
    "transforms",
    "tree_aggregation",
    "tree_prefix_sum",
    "zcdp_to_epsilon",
]
