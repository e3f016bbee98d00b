"""Audits of DP-GD and the double-noise Newton method, with their broken controls (20,000 runs a side)."""

from __future__ import annotations

import pytest

from dpjax.audit import mechanisms

NAMES = ["dp-gd-1-step", "dp-gd-4-steps", "newton-clip-fixed", "newton-add-fixed",
         "newton-clip-adaptive", "newton-add-adaptive"]


@pytest.mark.parametrize("name", NAMES)
def test_audit_and_negative_control(name):
  ok = mechanisms.run_audit(mechanisms.make_setup(name))
  assert ok.num_samples >= 20_000
  assert ok.claimed_epsilon == pytest.approx(2.0, rel=1e-9)  # what the accountant reports
  assert ok.consistent, ok
  bad = mechanisms.run_audit(mechanisms.make_setup(name, broken="noise/3"))
  assert bad.claimed_epsilon == pytest.approx(2.0, rel=1e-9)  # the bug is invisible to it
  assert not bad.consistent, bad
  assert bad.lower_bound.epsilon > ok.lower_bound.epsilon
