"""A scikit-learn estimator: differentially private logistic regression.

:class:`DPLogisticRegression` wraps the full-batch private optimizers of
:func:`dpjax.fit` (by default ``algorithm="auto"``: everything chosen from
public quantities) behind the scikit-learn API (``fit``, ``predict``,
``predict_proba``, ``decision_function``, ``score``, ``get_params``,
``set_params``), so it drops into a ``Pipeline``, ``cross_val_score``,
``GridSearchCV`` or ``check_estimator``. Every fit is charged to a
:class:`BudgetAccountant` (diffprivlib's design, Holohan et al. 2019,
arXiv 1907.02444), so such a search is charged fit by fit, or refused.

This module needs scikit-learn (``pip install "dpjax[sklearn]"``); ``import
dpjax`` does not import it.

**Public inputs.** The guarantee covers the rows and labels of ``(X, y)``.
Everything else that shapes the output must be public, so nothing is read
off the data by default:

* the label set, ``classes=`` (it fixes the shape of ``coef_``; one row with a
  new label would otherwise change that shape, an epsilon = infinity event).
  ``classes=None`` reads it from ``y`` (``np.unique(y)``, as scikit-learn
  does) and issues a :class:`PrivacyLeakWarning`; the fit then reports
  ``private_ = False``;
* the row norm bound, ``data_norm`` (default 1.0, the bound ``||x|| <= 1`` of
  dpjax's privacy contract, so rows scaled to the unit ball fit as they are;
  diffprivlib warns and reads it off the data instead). Rows with a larger
  norm are clipped to it (scaled down to norm ``data_norm``), diffprivlib's
  convention, which is what makes the guarantee hold for any data. There is
  no option to read the bound from the data;
* the randomness: ``random_state=None`` (the default) draws a fresh key from
  the operating system's entropy (``secrets``) that fills the whole PRNG key.
  An int seed reproduces a fit bit for bit; anyone who knows it can replay
  the noise and subtract it, which voids the guarantee.

A ``StandardScaler`` (or any transformer) fitted on the private rows is not
covered: its means and scales are read from the data. Scale with public
constants (``FunctionTransformer``), or rely on the clipping.

**Norm bound and mapping to the privacy contract** (``docs/privacy.md``,
"Privacy contract": rows with ``||z|| <= 1``, labels in {-1, +1}). Row ``x`` becomes
``u = clip(x, data_norm) / data_norm`` (``||u|| <= 1``); with
``fit_intercept=True`` the constant 1 is appended and the row is scaled by
``1/sqrt(2)``: ``z = [u, 1] / sqrt(2)``. Labels: ``classes_[1]`` is +1 and
``classes_[0]`` is -1. The learned ``w`` is mapped back to the original
features: ``coef_ = w[:d] / (sqrt(2) data_norm)`` and ``intercept_ = w[d] /
sqrt(2)`` (without the intercept ``coef_ = w / data_norm``), so
``decision_function(X) = X @ coef_.T + intercept_`` equals ``z . w`` for every
row within the bound. Prediction does not clip (as diffprivlib); it is
post-processing either way.

**Multiclass: one-vs-rest.** With K > 2 classes, K binary fits ("class k
against the rest") run on the same rows. One example takes part in all K fits,
so by zCDP composition the fits share the budget: each gets ``rho / K`` and the
whole fit is ``rho``-zCDP, i.e. (``epsilon``, ``delta``)-DP under
``accounting``. ``predict_proba`` normalises the K one-vs-rest sigmoids. A
class listed in ``classes`` but absent from ``y`` is fitted too (all its
labels are -1), so the shape of ``coef_`` never depends on the data.

**Composition across fits.** Repeated fits on the same data compose: every
fit is one more release about the same rows. Each fit of
:class:`DPLogisticRegression` is an adaptive composition of Gaussian
mechanisms with total ``rho_`` (zCDP, Bun & Steinke 2016, arXiv 1605.02065),
so a :class:`BudgetAccountant` adds the ``rho_`` of its fits (zCDP composes
additively, Bun & Steinke 2016, Lemma 2.3; Gaussian mechanisms compose
exactly as one Gaussian mechanism, Dong, Roth & Su 2019, Cor. 3.3) and
converts the sum once, at the accountant's ``delta``. This is tighter than
diffprivlib's sum of per-fit (epsilon, delta): 8 fits at epsilon = 1 and
delta = 1e-6 cost epsilon = 3.11 at the same delta, not 8. Cross-validation
folds overlap, so no parallel composition is used: every fit is charged in
full.

Examples:
  >>> import numpy as np
  >>> from dpjax.sklearn import DPLogisticRegression
  >>> rng = np.random.default_rng(0)
  >>> X = rng.uniform(-1.0, 1.0, size=(2000, 3))  # each feature in [-1, 1] by design
  >>> y = np.where(X[:, 0] - X[:, 1] > 0, "yes", "no")
  >>> clf = DPLogisticRegression(epsilon=1.0, data_norm=np.sqrt(3.0),  # public bound
  ...                            classes=["no", "yes"]).fit(X, y)
  >>> clf.classes_.tolist(), clf.coef_.shape, clf.intercept_.shape
  (['no', 'yes'], (1, 3), (1,))
  >>> round(clf.epsilon_, 9), clf.delta_, clf.algorithm_, clf.private_
  (1.0, 2.5e-07, 'precond-gd', True)
  >>> bool(clf.score(X, y) > 0.9), clf.predict_proba(X[:2]).sum(axis=1).round(6).tolist()
  (True, [1.0, 1.0])
"""

from __future__ import annotations

# The modules below are attributes of dpjax.sklearn as before the split (tests patch
# dpjax.sklearn._common.fresh_key, .data_lib.clip_rows, .training.make_transform: the
# modules' own attributes, so the estimator sees the patch).
from dpjax import _common  # noqa: F401  pylint: disable=unused-import
from dpjax import data as data_lib  # noqa: F401  pylint: disable=unused-import
from dpjax import training  # noqa: F401  pylint: disable=unused-import
from dpjax.sklearn import accountant
from dpjax.sklearn import logistic
from dpjax.sklearn.accountant import Budget, BudgetAccountant, BudgetExceededError, Charge
from dpjax.sklearn.logistic import (DEFAULT_DATA_NORM, EXPECTED_FAILED_CHECKS,
                                    DPLogisticRegression, PrivacyLeakWarning)
# Reachable here as before; fit looks it up in dpjax.sklearn.logistic (patch it there).
from dpjax.sklearn.logistic import _compiled_run  # noqa: F401  pylint: disable=unused-import

__all__ = [
    "Budget",
    "BudgetAccountant",
    "BudgetExceededError",
    "Charge",
    "DEFAULT_DATA_NORM",
    "DPLogisticRegression",
    "EXPECTED_FAILED_CHECKS",
    "PrivacyLeakWarning",
]
