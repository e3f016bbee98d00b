"""The data-independent problem: losses, fused GLM curvature, per-example gradients, spectral modification, the non-private optimum.

Layer 2 of dpjax (with :mod:`dpjax.data`): nothing here touches privacy
budgets or noise; the mechanisms (:mod:`dpjax.mechanisms`) and the
optimizers build on it.

* :mod:`dpjax.problem.glm`: the logistic loss and its gradient with the
  Hessian or quadratic-upper-bound curvature in one fused pass;
* :mod:`dpjax.problem.losses`: per-example convex losses with their public
  constants for the general-loss DP-GD and Newton;
* :mod:`dpjax.problem.per_example`: generic per-example gradients and
  Hessians with norm clipping;
* :mod:`dpjax.problem.minibatch`: per-example clipped sums (and gradient
  differences) over a minibatch, fused for GLMs;
* :mod:`dpjax.problem.spectral`: the eigenvalue modification Psi_lambda
  (clip / add);
* :mod:`dpjax.problem.solve`: the exact non-private optimum and the excess
  loss (for evaluation only);
* :mod:`dpjax.problem._neighbouring`: the neighbouring relations and their
  sensitivities.
"""

from dpjax.problem import glm
from dpjax.problem import per_example
from dpjax.problem import losses
from dpjax.problem import minibatch
from dpjax.problem import _neighbouring
from dpjax.problem import solve
from dpjax.problem import spectral

__all__ = ["glm", "losses", "minibatch", "per_example", "solve", "spectral"]
