"""Audits of the tree-aggregation prefix sums, Poisson DP-SGD and the online-to-batch conversion."""

from __future__ import annotations

import jax
import pytest

from dpjax.audit import mechanisms


@pytest.mark.parametrize("name, broken", [
    ("tree-prefix-sums", "noise/3"),
    ("tree-prefix-sums-all-steps", "fresh-tree-noise"),
    ("dp-sgd-poisson", "noise/3"),
    ("online-to-batch", "noise/3"),
])
def test_audit_and_negative_control(name, broken):
  ok = mechanisms.run_audit(mechanisms.make_setup(name))
  assert ok.num_samples >= 20_000
  assert ok.claimed_epsilon == pytest.approx(2.0, rel=1e-5)
  assert ok.claimed_epsilon <= 2.0 * (1 + 1e-9)
  assert ok.consistent, ok
  if name == "tree-prefix-sums":
    # The nodes statistic is the likelihood-ratio test of the correct tree: a tight audit.
    assert ok.lower_bound.epsilon > 0.6 * ok.claimed_epsilon
  bad = mechanisms.run_audit(mechanisms.make_setup(name, broken=broken))
  assert not bad.consistent, bad


def test_scaled_noise_is_undone_and_validated():
  key = jax.random.key(0)
  before = float(jax.random.normal(key, ()))
  with mechanisms.scaled_noise(1 / 3):
    assert float(jax.random.normal(key, ())) == pytest.approx(before / 3, rel=1e-6)
  assert float(jax.random.normal(key, ())) == before
  with pytest.raises(ValueError, match="fresh-tree-noise"):
    mechanisms.make_setup("dp-gd-1-step", broken="fresh-tree-noise")
  with pytest.raises(ValueError, match="unknown mechanism"):
    mechanisms.make_setup("dp-magic")
  with pytest.raises(ValueError, match="broken must be"):
    mechanisms.make_setup("dp-gd-1-step", broken="noise/2")
