"""Whole private training runs, compiled: :func:`dpjax.fit` and :func:`fit_levels`.

``fit(data, algorithm, ...)`` runs DP-GD, curvature-preconditioned DP-GD
(:func:`dpjax.transforms.dp_precond_gd`), one of the four double-noise Newton
variants (Ganesh et al. NeurIPS 2023, arXiv:2305.13209, Algorithm 3 and
Sec. 5.2), the Poisson-minibatch methods, private cubic Newton, the paper's
baselines, DP online-to-batch (Zhang, Tran & Cutkosky, NeurIPS 2022) and its
single-pass baselines, or ``"auto"`` (:mod:`dpjax.training.auto`: the method
and its settings chosen from public quantities only), ``repeats`` times with
independent noise, and reports the excess loss against the exact non-private
optimum (:func:`dpjax.problem.solve.optimum_loss`).

The package, by module:

* :mod:`dpjax.training.registry`: every algorithm name, its factory, its
  options and defaults, and the checks made before any work;
* :mod:`dpjax.training.api`: :func:`fit`, which resolves the budget once and
  dispatches to the algorithm's data pass;
* :mod:`dpjax.training.levels`: :func:`fit_levels`, several privacy levels
  in one compiled program;
* :mod:`dpjax.training.loop`: the compiled full-batch run (``jit`` of a
  ``vmap`` over repeats of a ``lax.scan`` over steps);
* :mod:`dpjax.training.drivers`: the compiled runs of the Poisson-minibatch
  methods, cubic Newton, the general losses and the baselines;
* :mod:`dpjax.training.streaming`: the single-pass streaming runs;
* :mod:`dpjax.training.auto`: the public-quantity chooser behind ``"auto"``;
* :mod:`dpjax.training.result`: :class:`FitResult`, the one result type.
"""

from dpjax.training import registry
from dpjax.training import result
from dpjax.training import loop
from dpjax.training import api
from dpjax.training import levels
from dpjax.training import auto
from dpjax.training import drivers
from dpjax.training import streaming
from dpjax.problem.solve import SEPARABLE_RIDGE, optimum_loss
from dpjax.training.api import fit
from dpjax.training.levels import fit_levels
from dpjax.training.loop import fit_step, repeat_fn
from dpjax.training.registry import (ALGORITHMS, AUTO, AVERAGES, DEFAULT_GUARD_RADIUS,
                                     DRIVER_ALGORITHMS, INITS, STREAMING_ALGORITHMS,
                                     make_transform)
from dpjax.training.result import FitResult

__all__ = [
    "ALGORITHMS",
    "AUTO",
    "AVERAGES",
    "INITS",
    "DEFAULT_GUARD_RADIUS",
    "SEPARABLE_RIDGE",
    "STREAMING_ALGORITHMS",
    "DRIVER_ALGORITHMS",
    "FitResult",
    "fit",
    "fit_levels",
    "fit_step",
    "make_transform",
    "optimum_loss",
    "repeat_fn",
]
