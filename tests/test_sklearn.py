"""Tests of dpjax.sklearn: the estimator DPLogisticRegression and the BudgetAccountant."""

from __future__ import annotations

import copy
import math
import os
import pathlib
import pickle
import subprocess
import sys
import threading
import warnings

import jax
import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import dpjax  # noqa: E402
from dpjax import _common  # noqa: E402
from dpjax import accounting  # noqa: E402
from dpjax import sklearn as dpsk  # noqa: E402
from dpjax.sklearn import (  # noqa: E402
    EXPECTED_FAILED_CHECKS,
    BudgetAccountant,
    BudgetExceededError,
    DPLogisticRegression,
    PrivacyLeakWarning,
)

# Every fit in this file passes classes= unless it tests the warning, so an
# unexpected PrivacyLeakWarning fails the test.
pytestmark = pytest.mark.filterwarnings("error::dpjax.PrivacyLeakWarning")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# scikit-learn's checks that DPLogisticRegression fails by design, {name: reason}:
# the estimator's own list (dpjax.sklearn.EXPECTED_FAILED_CHECKS, passed to
# parametrize_with_checks below, scikit-learn's mechanism). It is empty: every
# check passes, including the accuracy check (> 0.83 on scikit-learn's small
# datasets at the default epsilon = 1 and data_norm = 1, with the check's
# random_state = 0) and fit idempotence (an int random_state makes refits
# identical). Two checks skip themselves depending on the environment, not on
# the estimator: check_array_api_input (needs SCIPY_ARRAY_API=1) and
# check_classifier_data_not_an_array (needs pandas).
SKIPPED_CHECKS: dict[str, str] = dict(EXPECTED_FAILED_CHECKS)

N, D = 400, 3  # most tests share this shape, so their runs compile once.
AB = ("neg", "pos")
RHO_1 = accounting.epsilon_to_zcdp(1.0, 1e-6, "gaussian")  # a fit at epsilon = 1, delta = 1e-6


def _eps(rho: float) -> float:
  """The epsilon of ``rho``-zCDP at delta = 1e-6 (the accountants' conversion here)."""
  return accounting.zcdp_to_epsilon(rho, 1e-6, "gaussian")


def _blobs(seed: int, n: int = N, d: int = D, classes=AB, sep: float = 2.0):
  """Gaussian blobs: class j centred at ``sep * e_j`` (rows of norm about sep + noise)."""
  rng = np.random.default_rng(seed)
  k = len(classes)
  labels = rng.integers(0, k, size=n)
  centres = np.zeros((k, d))
  for j in range(k):
    centres[j, j % d] = sep
  x = centres[labels] + 0.5 * rng.normal(size=(n, d))
  return x, np.asarray(classes)[labels]


def _quick(**kwargs):
  """A cheap private fit (dp-gd, 4 steps) for the accounting tests."""
  return DPLogisticRegression(**{"epsilon": 1.0, "delta": 1e-6, "data_norm": 4.0,
                                 "classes": AB, "algorithm": "dp-gd", "steps": 4, **kwargs})


# --- scikit-learn's estimator checks ------------------------------------------


@parametrize_with_checks(
    [DPLogisticRegression(), DPLogisticRegression(data_norm=2.0)],
    expected_failed_checks=lambda estimator: SKIPPED_CHECKS,
)
def test_sklearn_estimator_checks(estimator, check):
  # The checks' labels vary, so they fit with classes=None, which warns.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", PrivacyLeakWarning)
    check(estimator)


# --- the API -------------------------------------------------------------------


@pytest.mark.parametrize("classes,fit_intercept", [(("a", "b"), True), (("a", "b", "c"), False)])
def test_shapes_and_probabilities(classes, fit_intercept):
  x, y = _blobs(0, classes=classes)
  clf = DPLogisticRegression(epsilon=1.0, data_norm=4.0, fit_intercept=fit_intercept,
                             classes=classes, random_state=0).fit(x, y)
  k = 1 if len(classes) == 2 else len(classes)
  assert clf.coef_.shape == (k, D) and clf.intercept_.shape == (k,)
  assert clf.n_features_in_ == D and clf.classes_.tolist() == list(classes)
  assert clf.n_iter_.tolist() == [clf.steps_] * k and clf.steps_ >= 1
  assert clf.private_ is True
  if not fit_intercept:
    assert np.all(clf.intercept_ == 0.0)
  proba = clf.predict_proba(x[:50])
  assert proba.shape == (50, len(classes))
  np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
  assert np.all(proba >= 0)
  pred = clf.predict(x[:50])
  assert pred.shape == (50,) and set(pred) <= set(classes)
  np.testing.assert_array_equal(pred, clf.classes_[proba.argmax(axis=1)])
  scores = clf.decision_function(x[:50])
  assert scores.shape == ((50,) if k == 1 else (50, k))
  np.testing.assert_allclose(scores, x[:50] @ clf.coef_.T.squeeze() + clf.intercept_.squeeze()
                             if k == 1 else x[:50] @ clf.coef_.T + clf.intercept_)
  assert clf.score(x, y) > 0.9  # well-separated blobs, n = 400 at epsilon = 1.


@pytest.mark.parametrize("names", [("cat", "dog"), ("dog", "cat")])
def test_string_labels_map_classes_1_to_plus_one(names):
  # names[0] is centred on feature 0 and names[1] on feature 1; classes_ is
  # sorted (whatever the order of classes=), and a positive decision function
  # must mean classes_[1].
  x, y = _blobs(1, classes=names, sep=3.0)
  clf = DPLogisticRegression(epsilon=1.0, data_norm=5.0, classes=names, random_state=0).fit(x, y)
  assert clf.classes_.tolist() == ["cat", "dog"]
  sign = 1.0 if names[1] == clf.classes_[1] else -1.0
  assert sign * clf.coef_[0, 1] > 0 and sign * clf.coef_[0, 0] < 0
  assert clf.score(x, y) > 0.95


@pytest.mark.parametrize("method,n_classes,delta,fit_intercept", [
    ("gaussian", 3, None, False),  # the one-vs-rest sum; shares its run with a shapes case.
    ("cks", 2, 1e-6, True),
])
def test_spent_budget_equals_requested(method, n_classes, delta, fit_intercept):
  labels = tuple("abc"[:n_classes])
  x, y = _blobs(2, classes=labels)
  clf = DPLogisticRegression(epsilon=1.0, delta=delta, data_norm=4.0, accounting=method,
                             fit_intercept=fit_intercept, classes=labels,
                             random_state=0).fit(x, y)
  want_delta = 1.0 / N**2 if delta is None else delta
  rho, _, _ = accounting.resolve_budget(N, epsilon=1.0, delta=want_delta, method=method)
  assert clf.delta_ == want_delta
  assert clf.rho_ == pytest.approx(rho, rel=1e-12)  # summed over the one-vs-rest fits.
  assert clf.epsilon_ == pytest.approx(1.0, rel=1e-9)


# --- public label set -------------------------------------------------------------


def test_classes_fix_the_shape_whatever_labels_occur():
  # The shape of coef_ comes from classes= only: the same for y with all three
  # labels, with two of them, and after adding one row with the third label.
  labels = ("a", "b", "c")
  x, y = _blobs(13, classes=labels)
  two = np.where(y == "c", "b", y)  # no "c" left
  assert set(two) == {"a", "b"}
  kw = dict(epsilon=1.0, data_norm=4.0, classes=labels, random_state=3)
  full = DPLogisticRegression(**kw).fit(x, y)
  missing = DPLogisticRegression(**kw).fit(x, two)
  assert full.coef_.shape == missing.coef_.shape == (3, D)
  assert full.intercept_.shape == missing.intercept_.shape == (3,)
  assert missing.classes_.tolist() == list(labels) and missing.rho_ == full.rho_
  assert missing.predict_proba(x[:5]).shape == (5, 3)
  # "c" never occurs: its one-vs-rest model was fitted on all-negative labels.
  assert np.all(missing.decision_function(x)[:, 2] < 0)
  # Binary: a listed class absent from y is fine too (its fit sees only -1).
  only_a = DPLogisticRegression(epsilon=1.0, data_norm=4.0, classes=("a", "b"),
                                random_state=3).fit(x, np.full(N, "a"))
  assert only_a.coef_.shape == (1, D) and set(only_a.predict(x)) == {"a"}


def test_classes_may_differ_in_type_from_equal_labels():
  # 0/1 ints as classes, float labels in y: equal values are the same label.
  x, y = _blobs(14)
  y01 = (y == "pos").astype(np.float64)
  clf = DPLogisticRegression(epsilon=1.0, data_norm=4.0, classes=[1, 0], random_state=0)
  clf.fit(x, y01)
  assert clf.classes_.tolist() == [0, 1] and clf.score(x, y01) > 0.9


def test_inferred_classes_warn_and_say_not_private():
  assert issubclass(PrivacyLeakWarning, RuntimeWarning)
  assert PrivacyLeakWarning is dpjax.PrivacyLeakWarning is dpjax.leaks.PrivacyLeakWarning
  x, y = _blobs(3)
  with pytest.warns(PrivacyLeakWarning, match=r"classes=None: the label set \['neg', 'pos'\]"):
    clf = DPLogisticRegression(data_norm=4.0, random_state=0).fit(x, y)
  assert clf.private_ is False and clf.classes_.tolist() == list(AB)
  with warnings.catch_warnings():
    warnings.simplefilter("error", PrivacyLeakWarning)
    public = DPLogisticRegression(data_norm=4.0, classes=AB, random_state=0).fit(x, y)
  assert public.private_ is True
  np.testing.assert_array_equal(public.coef_, clf.coef_)  # the same fit otherwise.


@pytest.mark.parametrize("classes,shown", [
    (AB, "'odd'"),  # one row with a label not in the set
    (("neg", "POS"), "'odd', 'pos'"),  # case matters
])
def test_labels_outside_classes_raise_before_any_charge(classes, shown):
  x, y = _blobs(15)
  y = y.astype(object)
  y[0] = "odd"
  acc = BudgetAccountant()
  clf = DPLogisticRegression(data_norm=4.0, classes=classes, accountant=acc)
  with pytest.raises(ValueError, match=r"y has labels outside classes=.*: " + shown):
    clf.fit(x, y)
  assert acc.spent_budget == [] and not hasattr(clf, "coef_")


@pytest.mark.parametrize("classes,error,match", [
    ("ab", TypeError, "1-d list"),
    (3, TypeError, "1-d list"),
    ([["a", "b"]], TypeError, "1-d list"),
    (["a"], ValueError, "at least 2 labels"),
    (["a", "b", "a"], ValueError, "each label once"),
    ([0.0, float("nan")], ValueError, "NaN"),
    ([0, "a"], ValueError, "outside classes"),  # numpy reads them as strings '0', 'a'.
])
def test_bad_classes_raise(classes, error, match):
  x, _ = _blobs(16, n=20)
  y = np.arange(20) % 2
  with pytest.raises(error, match=match):
    DPLogisticRegression(data_norm=4.0, classes=classes).fit(x, y)


# --- public norm bound -------------------------------------------------------------


def test_default_norm_bound_is_public_and_clips():
  # The default bound is the constant 1.0, never the data's largest row norm:
  # making one row 1000 times longer changes nothing (it is clipped to norm 1
  # in both cases), while a bound read from the data would shrink every row.
  assert DPLogisticRegression().data_norm == dpsk.DEFAULT_DATA_NORM == 1.0
  x, y = _blobs(4)
  assert np.linalg.norm(x[0]) > 1.0
  longer = x.copy()
  longer[0] *= 1000.0
  a = DPLogisticRegression(classes=AB, random_state=5).fit(x, y)
  b = DPLogisticRegression(classes=AB, random_state=5).fit(longer, y)
  assert a.data_norm_ == b.data_norm_ == 1.0
  np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=1e-5, atol=1e-7)
  assert a.score(x, y) > 0.85  # clipping to norm 1 keeps the directions.
  with pytest.raises(ValueError, match="data_norm=None: the row norm bound is never read"):
    DPLogisticRegression(data_norm=None, classes=AB).fit(x, y)


def test_rows_above_data_norm_are_clipped():
  x, y = _blobs(4)
  x[0] = [1e6, -2e6, 3e5]  # huge row: the fit must see it at norm data_norm.
  bound = 2.0
  clipped = x.copy()
  clipped[0] *= bound / np.linalg.norm(x[0])
  a = DPLogisticRegression(epsilon=1.0, data_norm=bound, classes=AB, random_state=5).fit(x, y)
  b = DPLogisticRegression(epsilon=1.0, data_norm=bound, classes=AB,
                           random_state=5).fit(clipped, y)
  np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-6)
  np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=1e-6, atol=1e-7)
  assert np.all(np.isfinite(a.coef_)) and a.guard_resets_.tolist() == [0]


# --- randomness -------------------------------------------------------------------


def test_random_state_reproducible_and_seeds_differ():
  x, y = _blobs(5)
  fit = lambda rs: DPLogisticRegression(data_norm=4.0, classes=AB, random_state=rs).fit(x, y).coef_
  np.testing.assert_array_equal(fit(7), fit(7))
  assert not np.array_equal(fit(7), fit(8))
  # 64-bit seeds are not cut to 32 bits.
  np.testing.assert_array_equal(fit(2**40 + 7), fit(2**40 + 7))
  assert not np.array_equal(fit(2**40 + 7), fit(7))
  np.testing.assert_array_equal(fit(np.random.RandomState(3)), fit(np.random.RandomState(3)))
  assert not np.array_equal(fit(np.random.RandomState(3)), fit(np.random.RandomState(4)))
  assert not np.array_equal(fit(None), fit(None))  # a fresh key each time.


def test_random_state_none_draws_a_full_width_fresh_key(monkeypatch):
  # None goes through _common.fresh_key (every word of the key from OS
  # entropy): replacing it by a known key reproduces that key's fit.
  x, y = _blobs(5)
  calls = []

  def known_key():
    calls.append(1)
    return _common.key_from_seed(2**63 + 12345)

  monkeypatch.setattr(dpsk._common, "fresh_key", known_key)
  a = DPLogisticRegression(data_norm=4.0, classes=AB).fit(x, y)
  b = DPLogisticRegression(data_norm=4.0, classes=AB, random_state=2**63 + 12345).fit(x, y)
  assert calls == [1]
  np.testing.assert_array_equal(a.coef_, b.coef_)


@pytest.mark.parametrize("algorithm,steps", [("precond-gd", 6)])
def test_matches_dpjax_fit(algorithm, steps):
  # The estimator runs one repeat of dpjax.fit without its non-private float64
  # optimum: the same keys, transform, guard and average give the same weights.
  # precond-gd (auto's usual choice) exercises both code paths of the run: the
  # release step with curvature and the scan without it. (dp-gd and the Newton
  # variants pass too; left out to keep this file's compile time down.)
  x, y = _blobs(6)
  bound = float(np.linalg.norm(x, axis=1).max()) * 1.01  # no row is clipped.
  clf = DPLogisticRegression(epsilon=2.0, data_norm=bound, algorithm=algorithm, steps=steps,
                             classes=AB, random_state=11).fit(x, y)
  z = np.hstack([x / bound, np.ones((N, 1))]) / math.sqrt(2.0)
  z = dpjax.data.clip_rows(z.astype(np.float32))
  labels = np.where(y == clf.classes_[1], 1.0, -1.0).astype(np.float32)
  res = dpjax.fit((z, labels), algorithm, epsilon=2.0, steps=steps, seed=11)
  assert res.algorithm == clf.algorithm_ and res.steps == clf.steps_
  w = res.params[0].astype(np.float64)
  np.testing.assert_allclose(clf.coef_[0], w[:D] / (math.sqrt(2.0) * bound), rtol=2e-5,
                             atol=1e-6)
  np.testing.assert_allclose(clf.intercept_[0], w[D] / math.sqrt(2.0), rtol=2e-5, atol=1e-6)
  assert clf.rho_ == pytest.approx(float(res.rho_spent[0]), rel=1e-12)


def test_float64_and_float32_agree_without_noise():
  # The exact noise depends on the key and the public plan, not the dtype, so
  # the two dtypes give the same model up to rounding.
  x, y = _blobs(8)
  kwargs = dict(epsilon=10.0, data_norm=4.0, algorithm="dp-gd", steps=20, classes=AB,
                random_state=0)
  c32 = DPLogisticRegression(**kwargs).fit(x.astype(np.float32), y).coef_
  with jax.enable_x64(True):
    c64 = DPLogisticRegression(**kwargs).fit(x.astype(np.float64), y).coef_
  np.testing.assert_allclose(c64, c32, rtol=1e-3)
  assert np.linalg.norm(c64) > 0.1  # it moved from 0.


def test_pipeline_with_public_scaling():
  # Badly scaled features, rescaled with public constants (a scaler fitted on
  # the rows would read them); the fit then sees rows of norm about 2.
  x, y = _blobs(9)
  pipe = make_pipeline(FunctionTransformer(lambda v: (v - 50.0) / 100.0),
                       DPLogisticRegression(data_norm=4.0, classes=AB, random_state=0))
  pipe.fit(x * 100.0 + 50.0, y)
  assert pipe.score(x * 100.0 + 50.0, y) > 0.9
  assert pipe[-1].epsilon_ == pytest.approx(1.0, rel=1e-9)


# --- the budget accountant ----------------------------------------------------------


def test_every_fit_is_charged_and_composes_in_zcdp():
  x, y = _blobs(17)
  acc = BudgetAccountant(epsilon=10.0, delta=1e-6)
  fits = [_quick(accountant=acc, random_state=s).fit(x, y) for s in range(3)]
  three = _quick(accountant=acc, classes=("neg", "pos", "zzz"), random_state=0).fit(x, y)
  assert [c.rho for c in acc.spent_budget] == [f.rho_ for f in fits + [three]]
  assert all("DPLogisticRegression.fit" in c.what for c in acc.spent_budget)
  assert three.rho_ == pytest.approx(RHO_1, rel=1e-6)  # K = 3 fits share one epsilon.
  total = math.fsum(f.rho_ for f in fits + [three])
  assert acc.spent_rho == total and acc.spent.rho == total and acc.spent.delta == 1e-6
  # zCDP composition: the epsilon of the summed rho at the accountant's delta,
  # well below the basic composition 4 * epsilon = 4.
  assert acc.spent.epsilon == pytest.approx(_eps(total), rel=1e-12)
  assert acc.spent.epsilon == pytest.approx(2.1229, abs=1e-3)
  left = acc.remaining()
  assert left.rho == pytest.approx(acc.rho - total, rel=1e-12)
  assert left.epsilon == pytest.approx(_eps(acc.rho - total))
  assert acc.remaining(4).rho == pytest.approx(left.rho / 4, rel=1e-12)
  assert acc.total(delta=1e-3).epsilon < acc.spent.epsilon


def test_fit_past_the_total_is_refused_before_any_work(monkeypatch):
  x, y = _blobs(18)
  acc = BudgetAccountant(epsilon=1.0, delta=1e-6)  # exactly one fit at epsilon = 1, delta = 1e-6
  first = _quick(accountant=acc, random_state=0).fit(x, y)
  assert acc.spent_rho == first.rho_ == pytest.approx(acc.rho, rel=1e-6)
  assert acc.remaining().epsilon == pytest.approx(0.0, abs=1e-4)

  def no_work(*args, **kwargs):
    raise AssertionError("the refused fit compiled or ran")

  monkeypatch.setattr(dpsk.logistic, "_compiled_run", no_work)  # where fit looks it up
  monkeypatch.setattr(dpsk.data_lib, "clip_rows", no_work)
  monkeypatch.setattr(dpsk.training, "make_transform", no_work)  # its checks trace
  second = _quick(accountant=acc, epsilon=0.1)
  with pytest.raises(BudgetExceededError, match=r"DPLogisticRegression.fit .*past this "
                     r"BudgetAccountant's rho=.*Nothing was charged"):
    second.fit(x, y)
  assert isinstance(BudgetExceededError("x"), ValueError)
  assert len(acc.spent_budget) == 1 and not hasattr(second, "coef_")


def test_a_fit_failing_its_last_checks_is_refunded(monkeypatch):
  # The transform constructor's checks run after the charge (they trace, and
  # the refusal must come first); a fit they stop drew no noise: no charge.
  x, y = _blobs(18)
  acc = BudgetAccountant(epsilon=5.0, delta=1e-6)
  _quick(accountant=acc, random_state=0).fit(x, y)

  def bad_transform(*args, **kwargs):
    raise ValueError("a constructor check failed")

  monkeypatch.setattr(dpsk.training, "make_transform", bad_transform)
  with pytest.raises(ValueError, match="a constructor check failed"):
    _quick(accountant=acc, random_state=1).fit(x, y)
  assert len(acc.spent_budget) == 1 and acc.spent_rho == pytest.approx(RHO_1, rel=1e-6)


def test_default_accountant_context_manager_and_set_default():
  x, y = _blobs(19)
  before = BudgetAccountant.load_default()
  assert before.epsilon == math.inf  # the default has no limit: check_estimator's fits pass.
  with BudgetAccountant(epsilon=5.0, delta=1e-6) as acc:
    assert BudgetAccountant.load_default() is acc
    clf = _quick(random_state=0).fit(x, y)  # accountant=None: the default at fit time.
  assert BudgetAccountant.load_default() is before
  assert [c.rho for c in acc.spent_budget] == [clf.rho_]
  mine = BudgetAccountant(epsilon=5.0, delta=1e-6)
  try:
    assert mine.set_default() is mine and BudgetAccountant.load_default() is mine
    _quick(random_state=1).fit(x, y)
    assert len(mine.spent_budget) == 1
  finally:
    assert BudgetAccountant.pop_default() is mine
  fresh = BudgetAccountant.load_default()
  assert fresh is not mine and fresh.epsilon == math.inf and fresh.spent_budget == []
  before.set_default()


def test_grid_search_is_charged_fit_by_fit():
  # 2 candidates x 2 folds + refit = 5 fits, each charged to the one ledger
  # that clone() shares between the search's copies of the estimator.
  x, y = _blobs(20)
  acc = BudgetAccountant(epsilon=10.0, delta=1e-6)
  est = _quick(accountant=acc, random_state=0)
  assert clone(est).accountant is acc and copy.deepcopy(acc) is acc
  search = GridSearchCV(est, {"data_norm": [2.0, 4.0]}, cv=2, error_score="raise").fit(x, y)
  assert len(acc.spent_budget) == 5
  assert acc.spent_rho == pytest.approx(5 * RHO_1, rel=1e-6)
  assert acc.spent.epsilon == pytest.approx(_eps(5 * RHO_1), rel=1e-6)
  assert search.best_estimator_.rho_ == acc.spent_budget[-1].rho


def test_grid_search_past_the_total_is_refused():
  # Room for 3 fits of the 5 the search needs: the fourth is refused.
  x, y = _blobs(20)
  acc = BudgetAccountant(epsilon=_eps(3 * RHO_1), delta=1e-6)
  search = GridSearchCV(_quick(accountant=acc, random_state=0), {"data_norm": [2.0, 4.0]}, cv=2,
                        error_score="raise")
  with pytest.raises(BudgetExceededError, match="past this BudgetAccountant"):
    search.fit(x, y)
  assert len(acc.spent_budget) == 3
  assert acc.spent_rho == pytest.approx(3 * RHO_1, rel=1e-6)


def test_a_pickled_accountant_is_read_only():
  x, y = _blobs(21)
  acc = BudgetAccountant(epsilon=5.0, delta=1e-6)
  _quick(accountant=acc, random_state=0).fit(x, y)
  restored = pickle.loads(pickle.dumps(acc))
  assert restored is not acc and restored.spent_budget == acc.spent_budget
  assert restored.spent == acc.spent and restored.remaining() == acc.remaining()
  with pytest.raises(ValueError, match="restored from a pickle"):
    _quick(accountant=restored, random_state=0).fit(x, y)
  with pytest.raises(ValueError, match="restored from a pickle"):
    restored.spend(0.0)
  assert len(restored.spent_budget) == len(acc.spent_budget) == 1
  # A fitted estimator still pickles (its accountant as a read-only copy).
  clf = pickle.loads(pickle.dumps(_quick(accountant=acc, random_state=0).fit(x, y)))
  assert clf.accountant.spent_rho == acc.spent_rho


def test_charges_are_atomic_across_threads():
  acc = BudgetAccountant(epsilon=_eps(10 * 0.01), delta=1e-6)
  outcomes = []

  def one():
    try:
      acc.spend(0.01, what="thread")
      outcomes.append(True)
    except BudgetExceededError:
      outcomes.append(False)

  threads = [threading.Thread(target=one) for _ in range(40)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert outcomes.count(True) == 10 and len(acc.spent_budget) == 10
  assert acc.spent_rho == pytest.approx(0.1, rel=1e-12)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(epsilon=0.0, delta=1e-6), ValueError, "epsilon must be > 0"),
    (dict(epsilon=float("nan"), delta=1e-6), ValueError, "epsilon must be > 0"),
    (dict(epsilon="1", delta=1e-6), TypeError, "epsilon must be a positive number"),
    (dict(epsilon=1.0), ValueError, "needs delta="),
    (dict(epsilon=1.0, delta=1.0), ValueError, "delta must be in the open interval"),
    (dict(delta="x"), TypeError, "delta must be None or a number"),
    (dict(epsilon=1.0, delta=1e-6, accounting="rdp"), ValueError, "accounting must be one of"),
])
def test_bad_accountant_parameters_raise(kwargs, error, match):
  with pytest.raises(error, match=match):
    BudgetAccountant(**kwargs)


def test_bad_charges_raise():
  acc = BudgetAccountant()
  with pytest.raises(ValueError, match="rho must be >= 0"):
    acc.spend(-1.0)
  with pytest.raises(ValueError, match="rho must be finite"):
    acc.check(math.inf)
  with pytest.raises(ValueError, match="k must be >= 1"):
    acc.remaining(0)
  assert acc.spent_budget == [] and acc.spent == (0.0, None, None)
  assert acc.remaining() == (math.inf, None, None)


# --- validation ----------------------------------------------------------------


@pytest.mark.parametrize("params,error,match", [
    (dict(epsilon=0.0), ValueError, "epsilon"),
    (dict(epsilon=-1.0), ValueError, "epsilon"),
    (dict(epsilon=float("nan")), ValueError, "epsilon"),
    (dict(epsilon="1"), TypeError, "epsilon"),
    (dict(delta=0.0), ValueError, "delta"),
    (dict(delta=1.0), ValueError, "delta"),
    (dict(data_norm=0.0), ValueError, "data_norm"),
    (dict(data_norm=-2.0), ValueError, "data_norm"),
    (dict(data_norm="4"), TypeError, "data_norm"),
    (dict(algorithm="newton"), ValueError, "algorithm"),
    (dict(steps=10), ValueError, "auto"),
    (dict(algorithm="dp-gd"), ValueError, "steps"),
    (dict(algorithm="dp-gd", steps=0), ValueError, "steps"),
    (dict(accounting="exact"), ValueError, "accounting"),
    (dict(accountant="default"), TypeError, "accountant must be None"),
    (dict(random_state="seed"), TypeError, "random_state must be None"),
    (dict(random_state=1.5), TypeError, "random_state must be None"),
    (dict(random_state=-1), ValueError, r"random_state must be in \[0, 2\*\*64\)"),
    (dict(random_state=2**64), ValueError, r"random_state must be in \[0, 2\*\*64\)"),
    (dict(fit_intercept="yes"), TypeError, "fit_intercept"),
])
def test_bad_parameters_raise_in_fit(params, error, match):
  x, y = _blobs(10, n=20)
  acc = BudgetAccountant()
  clf = DPLogisticRegression(**{"data_norm": 4.0, "classes": AB, "accountant": acc,
                                **params})  # __init__ never validates.
  with pytest.raises(error, match=match):
    clf.fit(x, y)
  assert acc.spent_budget == []  # nothing charged for a refused call.


def test_options_are_keyword_only():
  with pytest.raises(TypeError):
    DPLogisticRegression(1.0)  # pylint: disable=too-many-function-args
  with pytest.raises(TypeError):
    BudgetAccountant(1.0, 1e-6)  # pylint: disable=too-many-function-args


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises(bad):
  x, y = _blobs(11, n=20)
  x[3, 1] = bad
  with pytest.raises(ValueError, match="NaN|infinity"):
    DPLogisticRegression(data_norm=4.0, classes=AB).fit(x, y)


def test_single_class_raises_without_classes():
  x, _ = _blobs(12, n=20)
  with pytest.raises(ValueError, match="one class.*classes="):
    DPLogisticRegression(data_norm=4.0).fit(x, np.ones(20))


def test_import_dpjax_without_sklearn():
  code = (
      "import sys\n"
      "sys.modules['sklearn'] = None\n"
      "import dpjax\n"
      "assert 'dpjax.sklearn' not in sys.modules\n"
      "try:\n"
      "  import dpjax.sklearn\n"
      "except ImportError as err:\n"
      "  assert 'pip install \"dpjax[sklearn]\"' in str(err), str(err)\n"
      "  print('ok')\n"
      "else:\n"
      "  raise SystemExit('dpjax.sklearn imported without scikit-learn')\n"
  )
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=REPO_ROOT, timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_neighbouring_replace_one_doubles_the_gradient_noise():
  """neighbouring="replace-one" reaches the transform: DP-GD's noise std doubles."""
  x, y = dpjax.synthetic(0, n=300, d=4)
  x, y = np.asarray(x), np.asarray(y)
  stds = []
  for rel in ("zero-out", "replace-one"):
    clf = DPLogisticRegression(epsilon=1.0, classes=[-1, 1], algorithm="dp-gd", steps=5,
                               random_state=0, neighbouring=rel).fit(x, y)
    stds.append(clf)
  w0, w1 = stds[0].coef_, stds[1].coef_
  assert not np.array_equal(w0, w1)
  with pytest.raises(ValueError, match="neighbouring"):
    DPLogisticRegression(classes=[-1, 1], neighbouring="add-remove").fit(x, y)
