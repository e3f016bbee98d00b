"""Replace-one pairs: dp-gd and precond-gd under neighbouring="replace-one" stay under their claim,
and their zero-out calibration on the same pairs (the "2x sensitivity" bug) is flagged."""

from __future__ import annotations

import pytest

from dpjax.audit import mechanisms

NUM_SAMPLES = mechanisms.TEST_SAMPLES_DEFAULT


@pytest.mark.parametrize("name", ["dp-gd-replace-one", "precond-gd-replace-one-end-to-end",
                                  "precond-gd-replace-one-curvature"])
def test_replace_one_audit_under_the_claim_and_twins_flagged(name):
  ok, *twins = mechanisms.audit(name, num_samples=NUM_SAMPLES, seed=0)
  assert mechanisms.make_setup(name).relation == "replace-one"
  assert [t.twin for t in twins] == ["noise/2", "2x-sensitivity", "zero-out-noise"]
  assert ok.consistent, ok
  assert ok.lower_bound.epsilon > 0.35 * ok.claimed_epsilon, ok  # the pair reaches its bound
  noise_half, doubled, zero_out = twins
  for bad in (noise_half, doubled):
    assert bad.lower_bound.epsilon > 1.3 * bad.claimed_epsilon, bad
  # The default (zero-out) noise on the replace-one pair: the gradient sums move by
  # 2 L0 / n against noise for L0 / n (a mislabelled relation), the curvature by
  # sqrt(2) L1 / n against noise for L1 / n.
  assert zero_out.lower_bound.epsilon > 1.2 * zero_out.claimed_epsilon, zero_out
