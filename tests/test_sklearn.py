"""Tests of dpjax.sklearn.DPLogisticRegression (the scikit-learn estimator)."""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
import warnings

import jax
import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import dpjax  # noqa: E402
from dpjax import accounting  # noqa: E402
from dpjax.sklearn import (  # noqa: E402
    EXPECTED_FAILED_CHECKS,
    DPLogisticRegression,
    PrivacyLeakWarning,
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# scikit-learn's checks that DPLogisticRegression fails by design, {name: reason}:
# the estimator's own list (dpjax.sklearn.EXPECTED_FAILED_CHECKS, passed to
# parametrize_with_checks below, scikit-learn's mechanism). It is empty: every
# check passes, including the accuracy check (> 0.83 on scikit-learn's small
# datasets at the default epsilon = 1, with the check's random_state = 0) and
# fit idempotence (an int random_state makes refits identical). Two checks
# skip themselves depending on the environment, not on the estimator:
# check_array_api_input (needs SCIPY_ARRAY_API=1) and
# check_classifier_data_not_an_array (needs pandas).
SKIPPED_CHECKS: dict[str, str] = dict(EXPECTED_FAILED_CHECKS)

N, D = 400, 3  # most tests share this shape, so their runs compile once.


def _blobs(seed: int, n: int = N, d: int = D, classes=("neg", "pos"), sep: float = 2.0):
  """Gaussian blobs: class j centred at ``sep * e_j`` (rows of norm about sep + noise)."""
  rng = np.random.default_rng(seed)
  k = len(classes)
  labels = rng.integers(0, k, size=n)
  centres = np.zeros((k, d))
  for j in range(k):
    centres[j, j % d] = sep
  x = centres[labels] + 0.5 * rng.normal(size=(n, d))
  return x, np.asarray(classes)[labels]


# --- scikit-learn's estimator checks ------------------------------------------


@pytest.mark.filterwarnings("ignore::dpjax.sklearn.PrivacyLeakWarning")
@parametrize_with_checks(
    [DPLogisticRegression(), DPLogisticRegression(data_norm=2.0)],
    expected_failed_checks=lambda estimator: SKIPPED_CHECKS,
)
def test_sklearn_estimator_checks(estimator, check):
  check(estimator)


# --- the API -------------------------------------------------------------------


@pytest.mark.parametrize("classes,fit_intercept", [(("a", "b"), True), (("a", "b", "c"), False)])
def test_shapes_and_probabilities(classes, fit_intercept):
  x, y = _blobs(0, classes=classes)
  clf = DPLogisticRegression(epsilon=1.0, data_norm=4.0, fit_intercept=fit_intercept,
                             random_state=0).fit(x, y)
  k = 1 if len(classes) == 2 else len(classes)
  assert clf.coef_.shape == (k, D) and clf.intercept_.shape == (k,)
  assert clf.n_features_in_ == D and clf.classes_.tolist() == list(classes)
  assert clf.n_iter_.tolist() == [clf.steps_] * k and clf.steps_ >= 1
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
  # sorted, and a positive decision function must mean classes_[1].
  x, y = _blobs(1, classes=names, sep=3.0)
  clf = DPLogisticRegression(epsilon=1.0, data_norm=5.0, random_state=0).fit(x, y)
  assert clf.classes_.tolist() == ["cat", "dog"]
  sign = 1.0 if names[1] == clf.classes_[1] else -1.0
  assert sign * clf.coef_[0, 1] > 0 and sign * clf.coef_[0, 0] < 0
  assert clf.score(x, y) > 0.95


@pytest.mark.parametrize("method,n_classes,delta,fit_intercept", [
    ("gaussian", 3, None, False),  # the one-vs-rest sum; shares its run with a shapes case.
    ("cks", 2, 1e-6, True),
])
def test_spent_budget_equals_requested(method, n_classes, delta, fit_intercept):
  x, y = _blobs(2, classes=tuple("abc"[:n_classes]))
  clf = DPLogisticRegression(epsilon=1.0, delta=delta, data_norm=4.0, accounting=method,
                             fit_intercept=fit_intercept, random_state=0).fit(x, y)
  want_delta = 1.0 / N**2 if delta is None else delta
  rho, _, _ = accounting.resolve_budget(N, epsilon=1.0, delta=want_delta, method=method)
  assert clf.delta_ == want_delta
  assert clf.rho_ == pytest.approx(rho, rel=1e-12)  # summed over the one-vs-rest fits.
  assert clf.epsilon_ == pytest.approx(1.0, rel=1e-9)


def test_privacy_leak_warning_only_without_data_norm():
  assert issubclass(PrivacyLeakWarning, RuntimeWarning)
  x, y = _blobs(3)
  with pytest.warns(PrivacyLeakWarning, match="data_norm"):
    clf = DPLogisticRegression(random_state=0).fit(x, y)
  assert clf.data_norm_ == pytest.approx(np.linalg.norm(x, axis=1).max())
  with warnings.catch_warnings():
    warnings.simplefilter("error", PrivacyLeakWarning)
    DPLogisticRegression(data_norm=4.0, random_state=0).fit(x, y)


def test_rows_above_data_norm_are_clipped():
  x, y = _blobs(4)
  x[0] = [1e6, -2e6, 3e5]  # huge row: the fit must see it at norm data_norm.
  bound = 2.0
  clipped = x.copy()
  clipped[0] *= bound / np.linalg.norm(x[0])
  a = DPLogisticRegression(epsilon=1.0, data_norm=bound, random_state=5).fit(x, y)
  b = DPLogisticRegression(epsilon=1.0, data_norm=bound, random_state=5).fit(clipped, y)
  np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-6)
  np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=1e-6, atol=1e-7)
  assert np.all(np.isfinite(a.coef_)) and a.guard_resets_.tolist() == [0]


def test_random_state_reproducible_and_seeds_differ():
  x, y = _blobs(5)
  fit = lambda rs: DPLogisticRegression(data_norm=4.0, random_state=rs).fit(x, y).coef_
  np.testing.assert_array_equal(fit(7), fit(7))
  assert not np.array_equal(fit(7), fit(8))
  np.testing.assert_array_equal(fit(np.random.RandomState(3)), fit(np.random.RandomState(3)))
  assert not np.array_equal(fit(None), fit(None))  # a fresh seed each time.


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
                             random_state=11).fit(x, y)
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
  # epsilon = 1e6: the noise is negligible, so the two dtypes must give the same
  # model up to rounding (with noise they draw different samples).
  x, y = _blobs(8)
  kwargs = dict(epsilon=1e6, data_norm=4.0, algorithm="dp-gd", steps=20, random_state=0)
  c32 = DPLogisticRegression(**kwargs).fit(x.astype(np.float32), y).coef_
  with jax.enable_x64(True):
    c64 = DPLogisticRegression(**kwargs).fit(x.astype(np.float64), y).coef_
  np.testing.assert_allclose(c64, c32, rtol=1e-3)
  assert np.linalg.norm(c64) > 0.1  # it moved from 0.


def test_pipeline_with_standard_scaler():
  x, y = _blobs(9)
  pipe = make_pipeline(StandardScaler(), DPLogisticRegression(data_norm=4.0, random_state=0))
  pipe.fit(x * 100.0 + 50.0, y)  # badly scaled: the scaler fixes it.
  assert pipe.score(x * 100.0 + 50.0, y) > 0.9
  assert pipe[-1].epsilon_ == pytest.approx(1.0, rel=1e-9)


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
    (dict(algorithm="newton"), ValueError, "algorithm"),
    (dict(steps=10), ValueError, "auto"),
    (dict(algorithm="dp-gd"), ValueError, "steps"),
    (dict(algorithm="dp-gd", steps=0), ValueError, "steps"),
    (dict(accounting="exact"), ValueError, "accounting"),
    (dict(random_state="seed"), TypeError, "random_state"),
    (dict(random_state=-1), ValueError, "random_state"),
    (dict(fit_intercept="yes"), TypeError, "fit_intercept"),
])
def test_bad_parameters_raise_in_fit(params, error, match):
  x, y = _blobs(10, n=20)
  clf = DPLogisticRegression(**{"data_norm": 4.0, **params})  # __init__ never validates.
  with pytest.raises(error, match=match):
    clf.fit(x, y)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises(bad):
  x, y = _blobs(11, n=20)
  x[3, 1] = bad
  with pytest.raises(ValueError, match="NaN|infinity"):
    DPLogisticRegression(data_norm=4.0).fit(x, y)


def test_single_class_raises():
  x, _ = _blobs(12, n=20)
  with pytest.raises(ValueError, match="one class"):
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
