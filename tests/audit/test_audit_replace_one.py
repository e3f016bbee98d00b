"""Replace-one pairs: the zero-out calibration on them is the "2x sensitivity" bug, and is flagged."""

from __future__ import annotations

import pytest

from dpjax.audit import mechanisms


@pytest.mark.parametrize("name", ["dp-gd-replace-one", "precond-gd-replace-one-end-to-end",
                                  "precond-gd-replace-one-curvature"])
def test_zero_out_noise_on_a_replace_one_pair_is_flagged(name):
  """The default (zero-out) noise on a replace-one pair: gradient sums move by 2 L0 / n, the
  curvature by sqrt(2) L1 / n, against the zero-out noise (the issue's dp-gd finding)."""
  r = mechanisms.run_audit(mechanisms.make_setup(name, twin="zero-out-noise"), num_samples=4000)
  assert r.lower_bound.num_samples == (2000, 2000)
  assert r.lower_bound.epsilon > 1.2 * r.claimed_epsilon, r
