"""The baselines of the second-order paper's Fig. 2 and Fig. 3, for logistic regression.

Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv:2305.13209), Sec. 6,
as implemented in the authors' public reference code (tensorflow/privacy,
``research/dp_newton``). Data: ``x [n, d]`` with every row norm ``<= L``
(``row_norm_bound``, 1 under the dpjax contract; pass ``sqrt(2)`` for rows
that got an intercept after unit normalisation), labels ``y`` in {-1, +1}.
With ``||x_i|| <= L`` each example's logistic loss is ``L``-Lipschitz and
``L^2/4``-smooth, and its Hessian ``c(z) x x^T`` is rank 1, PSD, with Frobenius
(= operator) norm ``<= L^2/4``.

Neighbouring relations (``neighbouring=`` of the iterative baselines;
:mod:`dpjax.problem._neighbouring`), ``n`` public: ``"zero-out"`` (the default) replaces
one row by the null row (zero gradient and Hessian), ``"replace-one"`` by any
row, which doubles the gradient's sensitivity (``2L/n``) and multiplies the
Hessian's Frobenius sensitivity by ``sqrt(2)`` (``sqrt(2) L^2/(4n)``: two PSD
terms have ``<A, A'>_F >= 0``). AOP is calibrated for replace-one (its
objective perturbation budgets ``2L/n``), which covers zero-out too.

=========================  ========  ==========================================
baseline                   private?  why
=========================  ========  ==========================================
``"aop"``                  yes       (eps, delta)-DP (not zCDP): approximate
                                     minima perturbation, :func:`aop`.
``"damped-newton"``        **no**    the step size of Avella-Medina et al. 2021
                                     reads the noise-free Newton step
                                     (:func:`damped_newton`).
``"damped-newton-private"`` yes      rho-zCDP: same noises, step size from the
                                     released noisy quantities or a public
                                     constant (:func:`damped_newton_private`).
``"dp-gd-oracle"``         **no**    the step size is a line search on the true
                                     loss (:func:`dp_gd_oracle`).
=========================  ========  ==========================================

The iterative baselines are optax transforms (state with an ``accountant``,
``update(g, state, params, *, curvature_matrix=H)`` or ``(..., x=x, y=y)``);
a whole run of any baseline is ``dpjax.fit((x, y), name, ...)`` (one
``jax.jit`` of a ``jax.vmap`` over repeats of a ``lax.scan`` over steps; AOP
runs on the host in float64), which returns the one result type,
:class:`dpjax.FitResult`. Non-private baselines still draw, and charge to their
accountant, the noise of the nominal budget, so their noise matches the private
methods at the same budget; their results carry ``private=False``.

One algorithm a module, each stating in its docstring whether it is private:
:mod:`dpjax.baselines.aop`, :mod:`dpjax.baselines.damped_newton`,
:mod:`dpjax.baselines.damped_newton_private` and
:mod:`dpjax.baselines.dp_gd_oracle`; the two damped-Newton baselines share
their noise, state and transform (``_damped_newton_core``), and the whole
run behind ``dpjax.fit`` lives in ``_run``. The reference-code bugs that AOP does
not reproduce are listed in :mod:`dpjax.baselines.aop`. Each module has the
name of its function, which this package exports in its place
(``baselines.aop`` is the function); reach a module itself with
``importlib.import_module("dpjax.baselines.aop")``.

Deprecated (for one release): ``run_baseline`` and ``BaselineResult``, the
former whole-run entry point and its result; reading either warns
(:class:`DeprecationWarning`) and points at ``dpjax.fit``.
"""

from dpjax import _deprecations
from dpjax.baselines._damped_newton_core import DampedNewtonState, damped_newton_noise
from dpjax.baselines._run import AOP_OPTIONS, BASELINES, GUARD_RADIUS, PRIVATE, accepted_options
from dpjax.baselines.aop import (
    AOPCalibration,
    _accelerated_backstop,
    _minimize_perturbed,
    aop,
    aop_calibration,
)
from dpjax.baselines.damped_newton import damped_newton
from dpjax.baselines.damped_newton_private import damped_newton_private
from dpjax.baselines.dp_gd_oracle import DPGDOracleState, dp_gd_oracle

__all__ = [
    "AOP_OPTIONS",
    "BASELINES",
    "GUARD_RADIUS",
    "AOPCalibration",
    "DampedNewtonState",
    "DPGDOracleState",
    "accepted_options",
    "aop",
    "aop_calibration",
    "damped_newton",
    "damped_newton_noise",
    "damped_newton_private",
    "dp_gd_oracle",
]

# Deprecated names -> (the module that defines them, what to use instead).
_INSTEAD = ("use dpjax.fit((x, y), name, ...), which runs every baseline and returns "
            "dpjax.FitResult")
__getattr__ = _deprecations.deprecated_attributes(__name__, {
    "run_baseline": ("dpjax.baselines._run", _INSTEAD),
    "BaselineResult": ("dpjax.baselines._run", _INSTEAD),
})
