"""dpjax: JAX-accelerated differentially private convex optimizers.

Modules, by layer (imports only point down):

* :mod:`dpjax.data`: datasets and the privacy contract (per-row
  preprocessing by default);
* :mod:`dpjax.problem`, the data-independent problem:

  * :mod:`dpjax.problem.glm`, :mod:`dpjax.problem.per_example`: fused GLM
    curvature; generic per-example gradients and Hessians with clipping;
  * :mod:`dpjax.problem.losses`: per-example convex losses with their public
    constants (L2-regularised logistic, pseudo-Huber, Poisson regression)
    for the general-loss DP-GD and Newton;
  * :mod:`dpjax.problem.minibatch`: per-example clipped sums (and gradient
    differences) over a minibatch, fused for GLMs;
  * :mod:`dpjax.problem.spectral`: the eigenvalue modification Psi_lambda
    (clip / add);
  * :mod:`dpjax.problem.solve`: the exact non-private optimum and excess
    loss;

* :mod:`dpjax.accounting`: the accountant pytree (zCDP total, RDP curve of the
  Poisson-subsampled Gaussian, truncation slack) and (eps, delta) conversions;
* :mod:`dpjax.mechanisms`, the privacy mechanisms:

  * :mod:`dpjax.mechanisms.noise`: the floating-point-safe Gaussian
    mechanism every draw goes through;
  * :mod:`dpjax.mechanisms.sampling`: fixed-shape Poisson minibatch sampling;
  * :mod:`dpjax.mechanisms.tree_aggregation`: the binary mechanism for
    private prefix sums, each tree node released through
    :mod:`dpjax.mechanisms.noise` (buffered and Honaker modes);
  * :mod:`dpjax.mechanisms.budget`: budget enforcement for whole runs (plans
    over a cap, in-graph refusals and overspending become errors);
  * :mod:`dpjax.mechanisms.standardize`: private standardization (DP column
    means and standard deviations with public bounds), charged in ``fit``'s
    total;

* :mod:`dpjax.transforms`: the private optimizers as optax transforms
  (:func:`dp_gd`, :func:`dp_sgd`, :func:`dp_precond_gd`, :func:`dp_newton`,
  its minibatch variant, :func:`cubic_newton`, the binary mechanism's
  :func:`tree_prefix_sum`, and :func:`tail_average` for any of them);
* :mod:`dpjax.online`: online learners on a ball (OGD, optimistic OGD, the
  strongly convex learner, KT coin betting) as optax transforms;
* :mod:`dpjax.baselines`: the paper's baselines (AOP, damped Newton,
  DP-GD-Oracle), each stating whether it is private;
* :mod:`dpjax.runner`: the one compiled runner of every whole run (a
  ``lax.scan`` of a transform's updates with the public divergence guard, the
  tail average and the curvature-release blocks, vmapped over repeats);
* :mod:`dpjax.training`: :func:`fit`, a whole private run compiled into one
  ``lax.scan``, vmapped over repeats: the registry of algorithms, the
  full-batch loop, the Poisson-minibatch, cubic-Newton, general-loss and
  baseline drivers, the single-pass streaming runs (DP online-to-batch and
  its baselines), the public-quantity chooser ``"auto"`` and the one result
  type;
* :mod:`dpjax.checkpoint`: any optimizer state or params pytree saved to one
  ``.npz`` and restored bitwise (keys and accountant included), for resuming;
* :mod:`dpjax.audit`: empirical privacy audits of the mechanisms, with
  broken negative controls (needs the ``audit`` extra, scipy).

Deprecated module paths: the old flat paths ``dpjax.glm``, ``dpjax.losses``,
``dpjax.per_example``, ``dpjax.spectral``, ``dpjax.solve``,
``dpjax.minibatch`` (now under :mod:`dpjax.problem`) and ``dpjax.noise``,
``dpjax.sampling``, ``dpjax.tree_aggregation``, ``dpjax.budget``,
``dpjax.standardize`` (now under :mod:`dpjax.mechanisms`) and ``dpjax.drivers``,
``dpjax.streaming``, ``dpjax.auto`` (now under :mod:`dpjax.training`) still import, as the
same module objects, with a :class:`DeprecationWarning`
(:mod:`dpjax._deprecations`).
"""

from dpjax import _deprecations

_deprecations.install()  # before anything can ask for an old path

from dpjax import accounting  # noqa: E402
from dpjax import baselines  # noqa: E402
from dpjax import checkpoint  # noqa: E402
from dpjax import data  # noqa: E402
from dpjax import leaks  # noqa: E402
from dpjax import mechanisms  # noqa: E402
from dpjax import online  # noqa: E402
from dpjax import problem  # noqa: E402
from dpjax import training  # noqa: E402
from dpjax import transforms  # noqa: E402
from dpjax import audit  # noqa: E402  (last: its mechanisms use the modules above)
from dpjax.accounting import AccountantState, epsilon_to_zcdp, zcdp_to_epsilon
from dpjax.data import Dataset, load_libsvm, synthetic
from dpjax.leaks import PrivacyLeakWarning
from dpjax.training import FitResult, fit
from dpjax.transforms import (
    TreeAggregationState,
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
    tree_prefix_sum,
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
    "checkpoint",
    "cubic_newton",
    "data",
    "dp_gd",
    "dp_newton",
    "dp_newton_minibatch",
    "dp_precond_gd",
    "dp_sgd",
    "epsilon_to_zcdp",
    "fit",
    "leaks",
    "load_libsvm",
    "mechanisms",
    "online",
    "online_to_batch",
    "problem",
    "synthetic",
    "tail_average",
    "training",
    "transforms",
    "tree_prefix_sum",
    "zcdp_to_epsilon",
]

# The old flat module paths (dpjax.noise, ...): the same module objects as the
# new ones, with a DeprecationWarning (dpjax._deprecations).
__getattr__ = _deprecations.package_getattr
