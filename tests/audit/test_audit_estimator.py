"""Audit of the scikit-learn estimator's coefficients (one fit per run on the host)."""

from __future__ import annotations

import warnings

import pytest

from dpjax.audit import mechanisms

pytest.importorskip("sklearn")


def test_estimator_audit_and_twins():
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the audited fits are private: nothing may warn.
    ok, *twins = mechanisms.audit("estimator", num_samples=mechanisms.TEST_SAMPLES["estimator"], seed=0)
  assert ok.consistent, ok
  assert ok.claimed_epsilon == pytest.approx(1.1603338527916167, rel=1e-6)
  assert [t.twin for t in twins] == ["noise/2", "2x-sensitivity"]
  for bad in twins:
    assert bad.lower_bound.epsilon > 1.3 * bad.claimed_epsilon, bad
