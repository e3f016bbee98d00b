"""Builders of the audits that run eagerly on the host, one call per run.

The scikit-learn estimator (one fit per run) and AOP (one float64
minimisation and release per run); their claims are stated by the run
itself, not read from an accountant.
"""

from __future__ import annotations

from dpjax import accounting
from dpjax import baselines
from dpjax.audit.core import AUDIT_DELTA, CONTRACT_DELTA, RHO, _Spec
from dpjax.audit.datasets import _label_flip_pair


# ----------------------------------------------------------------------------
# Builders: the scikit-learn estimator (host).
# ----------------------------------------------------------------------------

_ESTIMATOR_N = 50


def _estimator(*, doubled: bool = False) -> _Spec:
  """``dpjax.sklearn.DPLogisticRegression`` (``algorithm="auto"``), one fit per run, host.

  ``n = 50``, two features: public rows along ``e_2`` with balanced labels,
  and the canary row ``x = e_1`` with label ``-1`` on ``D`` and ``+1`` on
  ``D'`` (two such rows for the 2x twin). The public inputs are given:
  ``classes=[-1, 1]``, ``data_norm=1`` (rows as given),
  ``fit_intercept=False`` (with an intercept no row of ``X`` is the null
  row), the default ``neighbouring="zero-out"``; ``epsilon`` = the Gaussian epsilon of
  ``rho = 0.5`` at ``delta = 1e-5``. The label flip moves the mean gradient
  by exactly ``e_1 / n`` at every iterate and the curvature not at all (module
  docstring), so each step of the fit sees the full gradient sensitivity.
  Statistic: ``coef_[0, 0]``. Claim: the fit's ``rho_`` at the audit delta.
  """
  from dpjax import sklearn as dp_sklearn  # pylint: disable=import-outside-toplevel
  n = _ESTIMATOR_N
  x, y, y_prime = _label_flip_pair(n, 2 if doubled else 1)
  epsilon = accounting.zcdp_to_epsilon(RHO, CONTRACT_DELTA, "gaussian")
  # The audit's fits compose (each is one more release of the same rows): charge them to
  # an accountant of their own, without a limit, rather than to the process default.
  accountant = dp_sklearn.BudgetAccountant()

  def run(seed, data):
    features, labels = data
    clf = dp_sklearn.DPLogisticRegression(epsilon=epsilon, delta=CONTRACT_DELTA, data_norm=1.0,
                                          classes=[-1.0, 1.0], fit_intercept=False,
                                          accountant=accountant, random_state=int(seed))
    clf.fit(features, labels)
    claim = accounting.zcdp_to_epsilon(clf.rho_, AUDIT_DELTA, "gaussian")
    return float(clf.coef_[0, 0]), claim

  return _Spec(run, ((x, y), (x, y_prime)), None, None, AUDIT_DELTA, True,
               f"DPLogisticRegression(epsilon={epsilon:.4g}, delta=1e-5, data_norm=1, "
               "classes=[-1, 1], fit_intercept=False)", "end-to-end", "zero-out (label flip)",
               "x = e_1 with y = -1 (D) or +1 (D'); 48 public rows along e_2", "coef_[0, 0]")


def _aop(*, epsilon: float, gamma: float, doubled: bool = False) -> _Spec:
  """AOP (``baselines.aop``, host float64): replace-one neighbours, the last row's label flipped.

  The last row is ``(e_1, -1)`` on ``D`` and ``(e_1, +1)`` on ``D'``: the
  mean gradient moves by ``1/n`` at every point, half the ``2 L / n`` that
  AOP's analysis budgets. A small public ``gamma`` (the minimiser's gradient
  tolerance) shrinks the output noise, so the statistic sees the objective
  perturbation. AOP is tested at its own delta (1e-5): its claim is that
  (epsilon, delta) pair.

  Its only noise twin is ``"noise/10"``: AOP's calibration budgets twice the
  gradient change that any logistic pair at its operating point makes, uses
  the classical ``(1 + sqrt(2 ln(1/delta))) / epsilon`` Gaussian bound
  (about 2.5 times the exact noise at epsilon = 1.8), and spends part of
  epsilon on the Jacobian and output terms; with half or a third of the noise
  it is still (epsilon, 1e-5)-DP here, so no audit could flag those twins.
  """
  n = 10
  x, y, y_prime = _label_flip_pair(n, 2 if doubled else 1)

  def run(seed, data):
    features, labels = data
    theta, _ = baselines.aop(features, labels, epsilon=epsilon, delta=CONTRACT_DELTA,
                             key=int(seed), gamma=gamma)
    return float(theta[0]), float(epsilon)

  # b is drawn by noise.perturbation_vector (jax.random.normal: not a release), the
  # output perturbation is released through noise.add_gaussian: the twin scales both.
  return _Spec(run, ((x, y), (x, y_prime)), None, epsilon, CONTRACT_DELTA, True,
               f"baselines.aop(epsilon={epsilon}, delta=1e-5, gamma={gamma})", "end-to-end",
               "replace-one (label flip)", "x = e_1 with y = -1 (D) or +1 (D')", "theta[0]")
