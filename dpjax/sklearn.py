"""A scikit-learn estimator: differentially private logistic regression.

:class:`DPLogisticRegression` wraps the full-batch private optimizers of
:func:`dpjax.fit` (by default ``algorithm="auto"``: everything chosen from
public quantities) behind the scikit-learn API (``fit``, ``predict``,
``predict_proba``, ``decision_function``, ``score``, ``get_params``,
``set_params``), so it drops into a ``Pipeline``, ``cross_val_score`` (note:
every fit spends its own budget) or ``check_estimator``.

This module needs scikit-learn (``pip install "dpjax[sklearn]"``); ``import
dpjax`` does not import it.

**Norm bound (diffprivlib's convention).** ``data_norm`` is a *public* bound on
the L2 norm of a row of ``X``. Rows with a larger norm are clipped to it
(scaled down to norm ``data_norm``) before training, which is what makes the
guarantee hold for any data. With ``data_norm=None`` the bound is computed from
the data (its largest row norm): that value depends on every row and is not
protected, so a :class:`PrivacyLeakWarning` is issued; pass ``data_norm``.

**Mapping to the privacy contract** (``README.md``, "Privacy contract": rows
with ``||z|| <= 1``, labels in {-1, +1}). Row ``x`` becomes
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
``accounting``. ``predict_proba`` normalises the K one-vs-rest sigmoids.

Examples:
  >>> import numpy as np
  >>> from dpjax.sklearn import DPLogisticRegression
  >>> rng = np.random.default_rng(0)
  >>> X = rng.normal(size=(2000, 3))
  >>> y = np.where(X[:, 0] - X[:, 1] > 0, "yes", "no")
  >>> clf = DPLogisticRegression(epsilon=1.0, data_norm=4.0, random_state=0).fit(X, y)
  >>> clf.classes_.tolist(), clf.coef_.shape, clf.intercept_.shape
  (['no', 'yes'], (1, 3), (1,))
  >>> round(clf.epsilon_, 9), clf.delta_, clf.algorithm_
  (1.0, 2.5e-07, 'precond-gd')
  >>> bool(clf.score(X, y) > 0.9), clf.predict_proba(X[:2]).sum(axis=1).round(6).tolist()
  (True, [1.0, 1.0])
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from typing import Any

import numpy as np

try:
  from sklearn.base import BaseEstimator, ClassifierMixin
  from sklearn.utils.multiclass import check_classification_targets
  from sklearn.utils.validation import check_is_fitted
except ImportError as _err:  # pragma: no cover - exercised in a subprocess by the tests.
  raise ImportError(
      "dpjax.sklearn needs scikit-learn, which is not installed; install the extra with "
      'pip install "dpjax[sklearn]" (scikit-learn>=1.5).'
  ) from _err

try:  # scikit-learn >= 1.6
  from sklearn.utils.validation import validate_data as _sk_validate_data
except ImportError:  # pragma: no cover - scikit-learn 1.5
  _sk_validate_data = None

import jax
import jax.numpy as jnp
import scipy.sparse

from dpjax import _validate
from dpjax import accounting as accounting_lib
from dpjax import leaks
from dpjax import auto as auto_lib
from dpjax import budget as budget_lib
from dpjax import data as data_lib
from dpjax import training

__all__ = ["DPLogisticRegression", "EXPECTED_FAILED_CHECKS", "PrivacyLeakWarning"]

# scikit-learn's estimator checks that DPLogisticRegression fails by design,
# {check name: reason}, for check_estimator / parametrize_with_checks'
# `expected_failed_checks` (tests/test_sklearn.py passes it). Empty: every check
# of scikit-learn 1.9 passes, with no tag relaxing one (no `poor_score`): the
# accuracy check (> 0.83 on its small datasets at the default epsilon = 1) and
# the refit checks (the checks set random_state = 0; an int seed makes refits
# identical). Two checks skip themselves when their dependency is absent
# (check_array_api_input without SCIPY_ARRAY_API=1, and the pandas input check
# without pandas).
EXPECTED_FAILED_CHECKS: dict[str, str] = {}


PrivacyLeakWarning = leaks.PrivacyLeakWarning  # the one public class, also dpjax.PrivacyLeakWarning


def _validate_data(estimator: Any, *args: Any, **kwargs: Any) -> Any:
  if _sk_validate_data is not None:
    return _sk_validate_data(estimator, *args, **kwargs)
  return estimator._validate_data(*args, **kwargs)  # pragma: no cover - scikit-learn 1.5


def _seed_from(random_state: Any) -> int:
  """A seed in [0, 2**32): fresh for None, the int itself, or drawn from a RandomState."""
  if random_state is None:
    return int(np.random.SeedSequence().generate_state(1)[0])
  if isinstance(random_state, (numbers.Integral, np.integer)) and not isinstance(
      random_state, (bool, np.bool_)):
    if not 0 <= int(random_state) < 2**32:
      raise ValueError(f"random_state must be in [0, 2**32), got {int(random_state)}.")
    return int(random_state)
  if isinstance(random_state, np.random.RandomState):
    return int(random_state.randint(0, 2**32, dtype=np.uint64))
  raise TypeError(
      "random_state must be None, an int in [0, 2**32) or a numpy.random.RandomState, got "
      f"{type(random_state).__name__}."
  )


@functools.lru_cache(maxsize=32)
def _compiled_run(algorithm: str, n: int, d: int, steps: int, average: str,
                  options: tuple, rho: float, guard_radius: float) -> Any:
  """The jitted private run ``run(key, z, y) -> (w_out, guard_resets, state)``.

  One repeat of :func:`dpjax.fit` (:func:`dpjax.training.repeat_fn`: the same
  keys, transform, divergence guard and tail average), without the float64
  non-private optimum that ``fit`` computes for reporting. Cached per (shape,
  plan, budget), so the K one-vs-rest fits and repeated fits of one shape
  compile once.
  """
  one_repeat = training.repeat_fn(algorithm, dict(n=n, steps=steps, **dict(options)), d=d,
                                  average=average, guard_radius=guard_radius)

  def run(key, x, y):
    output, _, _, resets, state = one_repeat(key, rho, x, y)
    return output, resets, state

  return jax.jit(run)


class DPLogisticRegression(ClassifierMixin, BaseEstimator):
  """Differentially private logistic regression (binary, or one-vs-rest).

  Trains with a full-batch private optimizer of dpjax (by default
  ``algorithm="auto"``, :func:`dpjax.auto.choose`: the method, its steps and
  options from ``n``, ``d`` and the budget only). The fit is
  (``epsilon``, ``delta``)-DP with respect to adding or removing one row of
  ``(X, y)`` (``n`` public), *provided* ``data_norm`` is given; see the module
  docstring for the norm bound, the mapping of rows and labels, and the
  one-vs-rest budget split (``rho / K`` per class, by zCDP composition).

  Args:
    epsilon: the privacy budget epsilon (> 0) of the whole fit.
    delta: in (0, 1); ``None`` means ``1 / n**2`` (``n`` the number of rows).
    data_norm: public bound (> 0) on the L2 norm of a row of ``X``; larger
      rows are clipped to it. ``None`` reads it from the data and issues a
      :class:`PrivacyLeakWarning`.
    fit_intercept: learn an intercept (a constant feature, see the module
      docstring).
    algorithm: ``"auto"`` or one of :data:`dpjax.training.ALGORITHMS`
      (``"dp-gd"``, ``"precond-gd"``, ``"hess-clip"``, ...), which then needs
      ``steps``.
    steps: the number of iterations T of a named algorithm (>= 1); must be
      ``None`` for ``"auto"``, which chooses it. Choosing T by looking at the
      results of private fits is tuning on private data and leaks privacy.
    accounting: the (epsilon, delta) <-> zCDP conversion, one of
      :data:`dpjax.accounting.METHODS` (``"gaussian"``, exact here).
    random_state: ``None`` (a fresh random seed each fit), an int in
      ``[0, 2**32)`` (that seed: refits are identical) or a
      ``numpy.random.RandomState`` (a seed drawn from it).

  Attributes:
    coef_: ``[1, n_features]`` (``[K, n_features]`` for K > 2 classes) in the
      original feature space.
    intercept_: ``[1]`` (``[K]``); zeros without ``fit_intercept``.
    classes_: the sorted class labels; ``classes_[1]`` is the positive class.
    n_features_in_: the number of features.
    feature_names_in_: the column names, when ``X`` has string column names.
    epsilon_: the epsilon spent, at ``delta_`` under ``accounting``, computed
      from ``rho_`` (equals ``epsilon`` up to float rounding).
    rho_: the total zCDP budget spent, read from the optimizers' accountants
      (the sum over the one-vs-rest fits).
    delta_: the delta used (``1 / n**2`` by default).
    data_norm_: the norm bound used (``data_norm``, or the data's largest row
      norm).
    algorithm_: the algorithm that ran (what ``"auto"`` chose).
    steps_: its number of steps T; ``n_iter_`` is ``[steps_] * n_fits``.
    auto_reason_: ``"auto"``'s one-line reason, else ``""``.
    guard_resets_: ``[n_fits]`` how often the public divergence guard fired.

  Examples:
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from dpjax.sklearn import DPLogisticRegression
    >>> rng = np.random.default_rng(1)
    >>> X = rng.normal(size=(3000, 2))
    >>> y = (X[:, 0] + 0.5 * X[:, 1] > 0.2).astype(int)
    >>> pipe = make_pipeline(StandardScaler(), DPLogisticRegression(
    ...     epsilon=2.0, delta=1e-6, data_norm=3.0, random_state=0)).fit(X, y)
    >>> bool(pipe.score(X, y) > 0.9), pipe[-1].n_iter_.tolist() == [pipe[-1].steps_]
    (True, True)
  """

  def __init__(
      self,
      epsilon: float = 1.0,
      delta: float | None = None,
      data_norm: float | None = None,
      fit_intercept: bool = True,
      algorithm: str = "auto",
      steps: int | None = None,
      accounting: str = "gaussian",
      random_state: int | np.random.RandomState | None = None,
  ) -> None:
    self.epsilon = epsilon
    self.delta = delta
    self.data_norm = data_norm
    self.fit_intercept = fit_intercept
    self.algorithm = algorithm
    self.steps = steps
    self.accounting = accounting
    self.random_state = random_state

  # --- scikit-learn tags -----------------------------------------------------

  def __sklearn_tags__(self):  # scikit-learn >= 1.6
    tags = super().__sklearn_tags__()
    tags.input_tags.sparse = True  # densified: the optimizers run on dense rows.
    tags.classifier_tags.multi_class = True  # one-vs-rest, budget split rho / K.
    return tags

  # --- fit -------------------------------------------------------------------

  def _check_params(self, n: int) -> tuple[float, float, float]:
    """Validates the parameters; returns ``(rho, epsilon, delta)`` of the whole fit."""
    if isinstance(self.epsilon, (bool, np.bool_)) or not isinstance(self.epsilon, numbers.Real):
      raise TypeError(f"epsilon must be a positive number, got {type(self.epsilon).__name__}.")
    if not (math.isfinite(self.epsilon) and self.epsilon > 0):
      raise ValueError(f"epsilon must be a positive finite number, got {self.epsilon!r}.")
    if self.delta is not None:
      if isinstance(self.delta, (bool, np.bool_)) or not isinstance(self.delta, numbers.Real):
        raise TypeError(f"delta must be None or a number in (0, 1), got "
                        f"{type(self.delta).__name__}.")
      if not 0.0 < self.delta < 1.0:
        raise ValueError(f"delta must be in (0, 1) (or None for 1/n**2), got {self.delta!r}.")
    if self.data_norm is not None:
      if (isinstance(self.data_norm, (bool, np.bool_))
          or not isinstance(self.data_norm, numbers.Real)):
        raise TypeError(f"data_norm must be None or a positive number, got "
                        f"{type(self.data_norm).__name__}.")
      if not (math.isfinite(self.data_norm) and self.data_norm > 0):
        raise ValueError(f"data_norm must be a positive finite number (a public bound on the "
                         f"row norms of X), got {self.data_norm!r}.")
    if not isinstance(self.fit_intercept, (bool, np.bool_)):
      raise TypeError(f"fit_intercept must be a bool, got {type(self.fit_intercept).__name__}.")
    _validate.choice(self.algorithm, "algorithm", training.ALGORITHMS + (training.AUTO,))
    if self.algorithm == training.AUTO:
      if self.steps is not None:
        raise ValueError(
            f"steps={self.steps!r} with algorithm='auto': auto chooses the steps from public "
            f"quantities; pass steps=None, or name an algorithm from {training.ALGORITHMS}.")
    elif self.steps is None:
      raise ValueError(f"algorithm={self.algorithm!r} needs steps=<T> (the number of "
                       "iterations); or use algorithm='auto'.")
    else:
      _validate.positive_int(self.steps, "steps")
    return accounting_lib.resolve_budget(n, epsilon=float(self.epsilon), delta=self.delta,
                                         method=self.accounting)

  def fit(self, X: Any, y: Any) -> "DPLogisticRegression":
    """Fits the private model; returns ``self``.

    Args:
      X: ``[n, n_features]`` array-like or scipy sparse matrix (densified),
        finite values.
      y: ``[n]`` labels, at least two classes.

    Returns:
      ``self``.

    Raises:
      ValueError, TypeError: bad parameters (``epsilon <= 0``, ``delta`` outside
        (0, 1), ``data_norm <= 0``, an unknown algorithm, ...), non-finite or
        empty input, or a single class.
    """
    X, y = _validate_data(self, X, y, accept_sparse=("csr", "csc", "coo"),
                          dtype=(np.float64, np.float32), ensure_min_samples=2)
    check_classification_targets(y)
    n, d = X.shape
    rho, _, delta = self._check_params(n)
    classes, y_index = np.unique(y, return_inverse=True)
    if len(classes) < 2:
      raise ValueError(f"DPLogisticRegression needs samples of at least 2 classes in the data, "
                       f"but the data contains only one class: {classes[0]!r}.")
    if scipy.sparse.issparse(X):
      X = X.toarray()
    x64 = np.asarray(X, np.float64)
    norms = np.linalg.norm(x64, axis=1)
    if self.data_norm is None:
      bound = float(norms.max()) if norms.max() > 0 else 1.0
      warnings.warn(
          f"data_norm was not given, so the norm bound ({bound:.6g}) was computed from the data: "
          "this leaks privacy, and the fit is not differentially private. Pass data_norm=<a "
          "public bound on the row norms of X> (rows above it are clipped).",
          PrivacyLeakWarning, stacklevel=2)
    else:
      bound = float(self.data_norm)
    u = data_lib.clip_rows(x64, bound) / bound  # ||u_i|| <= 1
    if self.fit_intercept:
      u = np.hstack([u, np.ones((n, 1))]) / math.sqrt(2.0)
    work = np.float64 if (X.dtype == np.float64 and jax.config.jax_enable_x64) else np.float32
    z = data_lib.clip_rows(u.astype(work), 1.0)  # rounding to `work` never leaves the ball.
    dz = z.shape[1]

    n_fits = 1 if len(classes) == 2 else len(classes)
    rho_each = rho / n_fits
    if self.algorithm == training.AUTO:
      choice = auto_lib.choose(n=n, d=dz, rho=rho_each, delta=delta, accounting=self.accounting)
      algorithm, steps, average = choice.algorithm, choice.steps, choice.average
      options, reason = dict(choice.options), choice.reason
    else:
      algorithm, steps, options, reason = self.algorithm, int(self.steps), {}, ""
      average = training._DEFAULT_AVERAGE.get(algorithm, "none")  # as dpjax.fit
    training.make_transform(algorithm, key=0, rho=rho_each, n=n, steps=steps,
                            **options)  # constructor checks, eagerly.
    run = _compiled_run(algorithm, n, dz, steps, average, tuple(sorted(options.items())),
                        float(rho_each), float(training.DEFAULT_GUARD_RADIUS))
    keys = jax.random.split(jax.random.key(_seed_from(self.random_state)), n_fits)
    eps_each = accounting_lib.zcdp_to_epsilon(rho_each, delta, self.accounting)
    zj = jnp.asarray(z)
    weights, resets, spent = [], [], []
    for k in range(n_fits):
      positive = 1 if n_fits == 1 else k
      yk = np.where(y_index == positive, 1.0, -1.0).astype(work)
      w, reset, state = jax.device_get(run(keys[k], zj, jnp.asarray(yk)))
      budget_lib.check_spent(state, epsilon=eps_each, delta=delta, method=self.accounting,
                             what=f"DPLogisticRegression ({algorithm!r}, fit {k})")
      weights.append(np.asarray(w, np.float64))
      resets.append(int(reset))
      spent.append(float(accounting_lib.spent_rho(state.accountant)))
    w = np.stack(weights)  # [n_fits, dz]
    if self.fit_intercept:
      self.coef_ = w[:, :d] / (math.sqrt(2.0) * bound)
      self.intercept_ = w[:, d] / math.sqrt(2.0)
    else:
      self.coef_ = w / bound
      self.intercept_ = np.zeros(n_fits)
    self.classes_ = classes
    self.rho_ = float(math.fsum(spent))
    self.delta_ = float(delta)
    self.epsilon_ = float(accounting_lib.zcdp_to_epsilon(self.rho_, self.delta_,
                                                         self.accounting))
    self.data_norm_ = bound
    self.algorithm_ = algorithm
    self.steps_ = steps
    self.n_iter_ = np.full(n_fits, steps, dtype=np.int32)
    self.auto_reason_ = reason
    self.guard_resets_ = np.asarray(resets, np.int64)
    return self

  # --- prediction (score: ClassifierMixin) --------------------------------------

  def decision_function(self, X: Any) -> np.ndarray:
    """``X @ coef_.T + intercept_``: ``[n]`` for two classes (> 0 means ``classes_[1]``),
    else ``[n, K]`` (one-vs-rest scores). Rows are not clipped."""
    check_is_fitted(self)
    X = _validate_data(self, X, accept_sparse="csr", reset=False)
    scores = X @ self.coef_.T + self.intercept_
    scores = np.asarray(scores, np.float64)
    return scores.ravel() if scores.shape[1] == 1 else scores

  def predict(self, X: Any) -> np.ndarray:
    """The predicted class of each row (``[n]``, values from ``classes_``)."""
    scores = self.decision_function(X)
    index = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
    return self.classes_[index]

  def predict_proba(self, X: Any) -> np.ndarray:
    """Class probabilities ``[n, n_classes]`` (columns in the order of ``classes_``).

    Binary: ``[1 - s, s]`` with ``s = sigmoid(decision_function(X))``. One-vs-rest:
    the K sigmoids normalised to sum to 1 (as scikit-learn's OvR).
    """
    scores = self.decision_function(X)
    if scores.ndim == 1:
      p = 0.5 * (1.0 + np.tanh(0.5 * scores))  # sigmoid, overflow-free.
      return np.column_stack([1.0 - p, p])
    p = 0.5 * (1.0 + np.tanh(0.5 * scores))
    total = p.sum(axis=1, keepdims=True)
    return np.divide(p, total, out=np.full_like(p, 1.0 / p.shape[1]), where=total > 0)

  def predict_log_proba(self, X: Any) -> np.ndarray:
    """``log(predict_proba(X))``."""
    with np.errstate(divide="ignore"):
      return np.log(self.predict_proba(X))
