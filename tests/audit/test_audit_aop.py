"""Audit of AOP (host float64, one eager call per run), 3,000 runs a side (benchmark: 20,000)."""

from __future__ import annotations

from dpjax.audit import mechanisms


def test_aop_audit_and_negative_control():
  assert mechanisms.CONTROLS["aop"] == ("noise/10",)
  ok, bad = mechanisms.audit("aop", num_samples=mechanisms.TEST_SAMPLES["aop"], seed=0)
  assert ok.claimed_epsilon == 2.0 and ok.delta == 1e-5 and ok.consistent, ok
  assert bad.twin == "noise/10" and not bad.consistent, bad
  assert bad.lower_bound.epsilon > ok.lower_bound.epsilon
