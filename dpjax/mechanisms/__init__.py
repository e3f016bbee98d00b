"""The privacy mechanisms: floating-point-safe Gaussian noise, Poisson sampling, tree aggregation, budgets, private standardization.

Layer 3 of dpjax (with :mod:`dpjax.accounting`): every private release goes
through these, and each charges the accountant; the optimizers
(:mod:`dpjax.transforms`) build on them.

* :mod:`dpjax.mechanisms.noise`: the one place every Gaussian draw goes
  through (power-of-two grid, exact integer noise, total-variation slack);
* :mod:`dpjax.mechanisms.sampling`: fixed-shape Poisson minibatch sampling;
* :mod:`dpjax.mechanisms.tree_aggregation`: the binary mechanism for private
  prefix sums (its transform is :func:`dpjax.transforms.tree_prefix_sum`);
* :mod:`dpjax.mechanisms.budget`: budget enforcement for whole runs;
* :mod:`dpjax.mechanisms.standardize`: private standardization (DP column
  means and standard deviations with public bounds).
"""

from dpjax.mechanisms import noise
from dpjax.mechanisms import sampling
from dpjax.mechanisms import budget
from dpjax.mechanisms import tree_aggregation
from dpjax.mechanisms import standardize

__all__ = ["budget", "noise", "sampling", "standardize", "tree_aggregation"]
