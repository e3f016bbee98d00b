"""Audits of the tree-aggregation prefix sums, Poisson DP-SGD and online-to-batch, with twins."""

from __future__ import annotations

import pytest

from dpjax.audit import mechanisms


@pytest.mark.parametrize("name", ["tree-prefix-sums", "tree-prefix-sums-all-steps",
                                  "online-to-batch", "dp-sgd-poisson"])
def test_correct_run_under_the_claim_and_twins_flagged(name):
  num_samples = mechanisms.TEST_SAMPLES.get(name, mechanisms.TEST_SAMPLES_DEFAULT)
  ok, *twins = mechanisms.audit(name, num_samples=num_samples, seed=0)
  assert [t.twin for t in twins] == list(mechanisms.CONTROLS[name])
  assert ok.consistent, ok
  if name == "tree-prefix-sums":
    # The nodes statistic is the likelihood-ratio test of the correct tree: a tight audit.
    assert ok.lower_bound.epsilon > 0.55 * ok.claimed_epsilon, ok
  for bad in twins:
    assert bad.claimed_epsilon == ok.claimed_epsilon
    assert bad.lower_bound.epsilon > 1.15 * bad.claimed_epsilon, bad
