"""The estimator :class:`DPLogisticRegression` (binary, or one-vs-rest) and its compiled run.

See :mod:`dpjax.sklearn` for the public inputs, the mapping of rows and
labels to dpjax's privacy contract, the one-vs-rest budget split and the
composition of repeated fits.
"""

from __future__ import annotations

import functools
import math
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

import jax
import jax.numpy as jnp
import scipy.sparse

from dpjax.problem import _neighbouring
from dpjax import _validate
from dpjax import accounting as accounting_lib
from dpjax.training import auto as auto_lib
from dpjax.mechanisms import budget as budget_lib
from dpjax import data as data_lib
from dpjax import leaks
from dpjax import training
from dpjax.sklearn._validation import _check_random_state, _is_real, _key_from, _validate_data
from dpjax.sklearn.accountant import BudgetAccountant

__all__ = ["DEFAULT_DATA_NORM", "DPLogisticRegression", "EXPECTED_FAILED_CHECKS",
           "PrivacyLeakWarning"]


# scikit-learn's estimator checks that DPLogisticRegression fails by design,
# {check name: reason}, for check_estimator / parametrize_with_checks'
# `expected_failed_checks` (tests/test_sklearn.py passes it). Empty: every check
# of scikit-learn 1.9 passes, with no tag relaxing one (no `poor_score`): the
# accuracy check (> 0.83 on its small datasets at the default epsilon = 1 and
# data_norm = 1) and the refit checks (the checks set random_state = 0; an int
# seed makes refits identical). The checks fit with classes=None (their labels
# vary), which warns PrivacyLeakWarning; their fits are charged to the default
# accountant, whose budget is unlimited. Two checks skip themselves when their
# dependency is absent (check_array_api_input without SCIPY_ARRAY_API=1, and
# the pandas input check without pandas).
EXPECTED_FAILED_CHECKS: dict[str, str] = {}


PrivacyLeakWarning = leaks.PrivacyLeakWarning  # the one public class, also dpjax.PrivacyLeakWarning


DEFAULT_DATA_NORM = 1.0  # public: the bound of dpjax's privacy contract (||x|| <= 1).


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


@functools.partial(jax.jit, static_argnums=1)
def _split_keys(key: jax.Array, num: int) -> tuple[jax.Array, ...]:
  """``tuple(jax.random.split(key, num))`` in one dispatch (no eager indexing of a key array)."""
  return tuple(jax.random.split(key, num))


class DPLogisticRegression(ClassifierMixin, BaseEstimator):
  """Differentially private logistic regression (binary, or one-vs-rest).

  Trains with a full-batch private optimizer of dpjax (by default
  ``algorithm="auto"``, :func:`dpjax.training.auto.choose`: the method, its steps and
  options from ``n``, ``d`` and the budget only). The fit is
  (``epsilon``, ``delta``)-DP with respect to replacing one row of ``(X, y)``
  by a null row (``neighbouring="zero-out"``, the default: ``n`` is public) or
  by any other row (``"replace-one"``: the noise is calibrated for the larger
  change, see :mod:`dpjax.transforms`), given the public
  inputs ``classes``, ``data_norm`` and a secret ``random_state``; see the
  module docstring for the mapping of rows and labels and the one-vs-rest
  budget split (``rho / K`` per class, by zCDP composition).

  **Repeated fits compose.** Each fit is a new release about the same rows,
  so it is charged to ``accountant`` (``None``: the default
  :class:`BudgetAccountant`, unlimited unless one was set with
  :meth:`BudgetAccountant.set_default` or ``with accountant:``), by zCDP
  composition: the accountant adds the fits' ``rho_``. A fit that would pass
  the accountant's total raises :class:`BudgetExceededError` after the
  parameters and data are checked on the host and before anything is
  traced, compiled or run. A fit is charged from the moment its noisy run
  starts, even if it then fails.
  ``GridSearchCV(DPLogisticRegression(...), grid, cv=c)`` therefore charges
  ``len(grid) * c`` fits (plus one for ``refit=True``) or is refused. The
  charge covers the fitted models only: the validation scores such a search
  computes on held-out private rows, and the ``best_params_`` chosen from
  them, read those rows without noise and are not covered (a private
  selection needs a private score, e.g. Liu & Talwar 2019, arXiv 1811.07971;
  or tune on public data).

  Args:
    epsilon: the privacy budget epsilon (> 0) of the whole fit.
    delta: in (0, 1); ``None`` means ``1 / n**2`` (``n`` the number of rows).
    data_norm: public bound (> 0) on the L2 norm of a row of ``X``; larger
      rows are clipped to it (default 1.0, dpjax's row contract). Never read
      from the data.
    classes: the public label set (at least 2 distinct labels), sorted into
      ``classes_``; the shape of ``coef_`` depends only on it. Labels of ``y``
      outside it raise ``ValueError``; a listed class absent from ``y`` is
      fine. ``None`` reads the set from ``y`` with a
      :class:`PrivacyLeakWarning` (``private_ = False``).
    fit_intercept: learn an intercept (a constant feature, see the module
      docstring).
    algorithm: ``"auto"`` or one of :data:`dpjax.training.ALGORITHMS`
      (``"dp-gd"``, ``"precond-gd"``, ``"hess-clip"``, ...), which then needs
      ``steps``.
    steps: the number of iterations T of a named algorithm (>= 1); must be
      ``None`` for ``"auto"``, which chooses it. Choosing T by looking at the
      results of private fits is tuning on private data and leaks privacy
      (the accountant charges the fits, not such a selection).
    accounting: the (epsilon, delta) <-> zCDP conversion of this fit, one of
      :data:`dpjax.accounting.METHODS` (``"gaussian"``, exact here).
    accountant: the :class:`BudgetAccountant` charged with every fit
      (``None``: the default accountant at fit time).
    random_state: ``None`` (the default: a fresh key from the operating
      system's entropy, filling the whole PRNG key, for every fit), an int in
      ``[0, 2**64)`` (that seed: refits are identical; anyone who knows it can
      replay the noise, which voids the guarantee) or a
      ``numpy.random.RandomState`` (a 64-bit seed drawn from it).
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"``, the
      neighbouring relation the fit is private for.

  Attributes:
    coef_: ``[1, n_features]`` (``[K, n_features]`` for K > 2 classes) in the
      original feature space.
    intercept_: ``[1]`` (``[K]``); zeros without ``fit_intercept``.
    classes_: the sorted class labels; ``classes_[1]`` is the positive class.
    n_features_in_: the number of features.
    feature_names_in_: the column names, when ``X`` has string column names.
    epsilon_: the epsilon spent by this fit, at ``delta_`` under
      ``accounting``, computed from ``rho_`` (equals ``epsilon`` up to float
      rounding). It covers the weights given the label set; with
      ``classes=None`` the label set itself is not protected.
    rho_: the total zCDP budget spent, read from the optimizers' accountants
      (the sum over the one-vs-rest fits); this is what the accountant was
      charged.
    delta_: the delta used (``1 / n**2`` by default).
    private_: ``False`` when something was read from the data without
      protection (``classes=None``), else ``True``.
    data_norm_: the norm bound used (``data_norm``).
    algorithm_: the algorithm that ran (what ``"auto"`` chose).
    steps_: its number of steps T; ``n_iter_`` is ``[steps_] * n_fits``.
    auto_reason_: ``"auto"``'s one-line reason, else ``""``.
    guard_resets_: ``[n_fits]`` how often the public divergence guard fired.

  Examples:
    A search charged fit by fit: 2 candidates x 2 folds + the refit = 5 fits
    at epsilon = 1, delta = 1e-6 each, composed in zCDP (the models; the
    search's validation scores are not covered, see above).

    >>> import numpy as np
    >>> from sklearn.model_selection import GridSearchCV
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import FunctionTransformer
    >>> from dpjax.sklearn import BudgetAccountant, DPLogisticRegression
    >>> rng = np.random.default_rng(1)
    >>> X = rng.uniform(0.0, 200.0, size=(3000, 2))  # two readings in [0, 200] by design
    >>> y = (X[:, 0] + 0.5 * X[:, 1] > 150.0).astype(int)
    >>> acc = BudgetAccountant(epsilon=4.0, delta=1e-6)
    >>> pipe = make_pipeline(
    ...     FunctionTransformer(lambda x: x / 100.0 - 1.0),  # public constants: [-1, 1]
    ...     DPLogisticRegression(epsilon=1.0, delta=1e-6, data_norm=np.sqrt(2.0),
    ...                          classes=[0, 1], accountant=acc))
    >>> search = GridSearchCV(pipe, {"dplogisticregression__fit_intercept": [True, False]},
    ...                       cv=2).fit(X, y)
    >>> len(acc.spent_budget), round(acc.spent.epsilon, 3), bool(search.score(X, y) > 0.9)
    (5, 2.4, True)
  """

  def __init__(
      self,
      *,
      epsilon: float = 1.0,
      delta: float | None = None,
      data_norm: float = DEFAULT_DATA_NORM,
      classes: Any = None,
      fit_intercept: bool = True,
      algorithm: str = "auto",
      steps: int | None = None,
      accounting: str = "gaussian",
      accountant: BudgetAccountant | None = None,
      random_state: int | np.random.RandomState | None = None,
      neighbouring: str = "zero-out",
  ) -> None:
    self.epsilon = epsilon
    self.delta = delta
    self.data_norm = data_norm
    self.classes = classes
    self.fit_intercept = fit_intercept
    self.algorithm = algorithm
    self.steps = steps
    self.accounting = accounting
    self.accountant = accountant
    self.random_state = random_state
    self.neighbouring = neighbouring

  # --- scikit-learn tags -----------------------------------------------------

  def __sklearn_tags__(self):  # scikit-learn >= 1.6
    tags = super().__sklearn_tags__()
    tags.input_tags.sparse = True  # densified: the optimizers run on dense rows.
    tags.classifier_tags.multi_class = True  # one-vs-rest, budget split rho / K.
    return tags

  # --- fit -------------------------------------------------------------------

  def _check_params(self, n: int) -> tuple[float, float, float]:
    """Validates the parameters; returns ``(rho, epsilon, delta)`` of the whole fit."""
    if not _is_real(self.epsilon):
      raise TypeError(f"epsilon must be a positive number, got {type(self.epsilon).__name__}.")
    if not (math.isfinite(self.epsilon) and self.epsilon > 0):
      raise ValueError(f"epsilon must be a positive finite number, got {self.epsilon!r}.")
    if self.delta is not None:
      if not _is_real(self.delta):
        raise TypeError(f"delta must be None or a number in (0, 1), got "
                        f"{type(self.delta).__name__}.")
      if not 0.0 < self.delta < 1.0:
        raise ValueError(f"delta must be in (0, 1) (or None for 1/n**2), got {self.delta!r}.")
    if self.data_norm is None:
      raise ValueError(
          "data_norm=None: the row norm bound is never read from the data (that value depends "
          "on every row and is not protected). Pass a public bound on the L2 norm of the rows "
          f"of X, data_norm=<bound> (default {DEFAULT_DATA_NORM}); rows above it are clipped.")
    if not _is_real(self.data_norm):
      raise TypeError(f"data_norm must be a positive number (a public bound on the row norms of "
                      f"X), got {type(self.data_norm).__name__}.")
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
    BudgetAccountant.load_default(self.accountant)  # its type
    _check_random_state(self.random_state)
    _neighbouring.check(self.neighbouring)
    return accounting_lib.resolve_budget(n, epsilon=float(self.epsilon), delta=self.delta,
                                         method=self.accounting)

  def _public_classes(self) -> np.ndarray:
    """``classes`` checked and sorted: a 1-d array of at least 2 distinct labels."""
    if isinstance(self.classes, (str, bytes)) or np.ndim(self.classes) != 1:
      raise TypeError(
          f"classes must be None or a 1-d list of the public labels (e.g. classes=[0, 1]), "
          f"got {self.classes!r}.")
    classes = np.asarray(self.classes)
    if classes.dtype.kind in "fc" and not np.all(np.isfinite(classes)):
      raise ValueError(f"classes must not contain NaN or inf, got {self.classes!r}.")
    try:
      ordered = np.unique(classes)
    except TypeError as err:
      raise TypeError(f"classes must be sortable labels of one kind (all numbers or all "
                      f"strings), got {self.classes!r}.") from err
    if len(ordered) != len(classes):
      raise ValueError(f"classes must list each label once, got {self.classes!r}.")
    if len(ordered) < 2:
      raise ValueError(f"classes must list at least 2 labels (the public label set), got "
                       f"{self.classes!r}.")
    return ordered

  def _labels(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(classes_, index of each label in classes_)``; warns when the set comes from ``y``."""
    if self.classes is None:
      classes, y_index = np.unique(y, return_inverse=True)
      if len(classes) < 2:
        raise ValueError(f"DPLogisticRegression needs samples of at least 2 classes in the "
                         f"data, but the data contains only one class: {classes[0]!r}; pass "
                         "the public label set as classes=[...].")
      leaks.warn(
          f"classes=None: the label set {classes.tolist()!r} was read from y, which is not "
          "differentially private (one row with a new label changes the shape of coef_); the "
          "fit reports private_=False. Pass the public label set, classes=[...].",
          stacklevel=3)
      return classes, y_index
    classes = self._public_classes()
    position = {label: i for i, label in enumerate(classes.tolist())}
    seen, inverse = np.unique(y, return_inverse=True)
    index, outside = [], []
    for label in seen.tolist():
      i = position.get(label)
      (outside.append(label) if i is None else index.append(i))
    if outside:
      shown = ", ".join(repr(v) for v in outside[:5]) + (", ..." if len(outside) > 5 else "")
      raise ValueError(f"y has labels outside classes={classes.tolist()!r}: {shown}. Add them to "
                       "classes (the public label set), or drop those rows.")
    return classes, np.asarray(index, np.int64)[inverse.ravel()]

  def fit(self, X: Any, y: Any) -> DPLogisticRegression:
    """Fits the private model and charges it to the accountant; returns ``self``.

    Args:
      X: ``[n, n_features]`` array-like or scipy sparse matrix (densified),
        finite values.
      y: ``[n]`` labels, from ``classes`` when it is given.

    Returns:
      ``self``.

    Raises:
      ValueError, TypeError: bad parameters (``epsilon <= 0``, ``delta`` outside
        (0, 1), ``data_norm <= 0`` or ``None``, bad ``classes``, an unknown
        algorithm, ...), non-finite or empty input, labels outside
        ``classes``, or a single class with ``classes=None``; all before
        any work.
      BudgetExceededError: the accountant's total would be passed (a
        ``ValueError``, raised before anything is traced, compiled or run).
    """
    X, y = _validate_data(self, X, y, accept_sparse=("csr", "csc", "coo"),
                          dtype=(np.float64, np.float32), ensure_min_samples=2)
    check_classification_targets(y)
    n, d = X.shape
    rho, _, delta = self._check_params(n)
    accountant = BudgetAccountant.load_default(self.accountant)
    classes, y_index = self._labels(y)
    private = self.classes is not None
    bound = float(self.data_norm)

    dz = d + 1 if self.fit_intercept else d
    n_fits = 1 if len(classes) == 2 else len(classes)
    rho_each = rho / n_fits
    if self.algorithm == training.AUTO:
      choice = auto_lib.choose(n=n, d=dz, rho=rho_each, delta=delta, accounting=self.accounting)
      algorithm, steps, average = choice.algorithm, choice.steps, choice.average
      options, reason = dict(choice.options), choice.reason
    else:
      algorithm, steps, options, reason = self.algorithm, int(self.steps), {}, ""
      average = training.registry.DEFAULT_AVERAGE.get(algorithm, "none")  # as dpjax.fit
    options = training.registry.relation_options(algorithm, self.neighbouring, options)

    # Everything is checked on the host: charge the accountant (or refuse)
    # before anything is traced, compiled or run.
    what = (f"DPLogisticRegression.fit (epsilon={float(self.epsilon):g}, "
            f"delta={delta:.3g}, {n_fits} fit(s))")
    ticket = accountant._charge(rho, what)
    try:
      training.make_transform(algorithm, key=0, rho=rho_each, n=n, steps=steps,
                              **options)  # the constructor's checks, eagerly (traces).
      key = _key_from(self.random_state)
    except BaseException:
      accountant._refund(ticket)  # no noise was drawn: nothing to charge.
      raise

    if scipy.sparse.issparse(X):
      X = X.toarray()
    x64 = np.asarray(X, np.float64)
    u = data_lib.clip_rows(x64, bound) / bound  # ||u_i|| <= 1
    if self.fit_intercept:
      u = np.hstack([u, np.ones((n, 1))]) / math.sqrt(2.0)
    work = np.float64 if (X.dtype == np.float64 and jax.config.jax_enable_x64) else np.float32
    z = data_lib.clip_rows(u.astype(work), 1.0)  # rounding to `work` never leaves the ball.
    run = _compiled_run(algorithm, n, dz, steps, average, tuple(sorted(options.items())),
                        float(rho_each), float(training.DEFAULT_GUARD_RADIUS))
    keys = _split_keys(key, n_fits)
    eps_each = accounting_lib.zcdp_to_epsilon(rho_each, delta, self.accounting)
    zj = jnp.asarray(z)
    weights, resets, spent = [], [], []
    for k in range(n_fits):
      positive = 1 if n_fits == 1 else k
      yk = np.where(y_index == positive, 1.0, -1.0).astype(work)
      w, reset, state = jax.device_get(run(keys[k], zj, yk))
      budget_lib.check_spent(state, epsilon=eps_each, delta=delta, method=self.accounting,
                             what=f"DPLogisticRegression ({algorithm!r}, fit {k})")
      weights.append(np.asarray(w, np.float64))
      resets.append(int(reset))
      spent.append(float(accounting_lib.spent_rho(state.accountant)))
    rho_spent = float(math.fsum(spent))
    accountant._settle(ticket, rho_spent)  # the optimizers' own reading (== rho up to rounding).
    w = np.stack(weights)  # [n_fits, dz]
    if self.fit_intercept:
      self.coef_ = w[:, :d] / (math.sqrt(2.0) * bound)
      self.intercept_ = w[:, d] / math.sqrt(2.0)
    else:
      self.coef_ = w / bound
      self.intercept_ = np.zeros(n_fits)
    self.classes_ = classes
    self.rho_ = rho_spent
    self.delta_ = float(delta)
    self.epsilon_ = float(accounting_lib.zcdp_to_epsilon(self.rho_, self.delta_,
                                                         self.accounting))
    self.private_ = private
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
