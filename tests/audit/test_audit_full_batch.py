"""Audits of DP-GD, the double-noise Newton method (channel by channel) and precond-gd.

Each test runs the correct mechanism and its two broken twins (noise/2 and
2x sensitivity) at 4,000 runs a side (``benchmarks/audit.py`` runs every
entry at 100,000); the claim is the accountant's epsilon at delta = 0.1.
The default run audits one entry per module and channel (5 entries; the cost
is the compilation of the audited programs, not the runs); ``--full`` adds a
second Newton direction entry (qu curvature, add, fixed lambda).
"""

from __future__ import annotations

import contextlib
import types

import jax
import pytest

from dpjax import compiled
from dpjax.mechanisms import noise
from dpjax.audit import mechanisms

NUM_SAMPLES = mechanisms.TEST_SAMPLES_DEFAULT  # 4000
CLAIM = 1.1603338527916167  # rho = 0.5 as (epsilon, 0.1)-DP, exact Gaussian conversion.

# One entry per module and channel in the default run, a second Newton direction entry in
# the full tier; benchmarks/audit.py runs all of them. (The default run also audits the
# hessian/add/fixed direction and gradient channels and the qu/clip/adaptive trace below.)
NAMES = ["dp-gd-4-steps", "newton-hess-clip-adaptive-direction",
         pytest.param("newton-qu-add-fixed-direction", marks=pytest.mark.full),
         "newton-hess-add-adaptive-trace", "precond-gd-curvature", "precond-gd-end-to-end"]


@pytest.mark.parametrize("name", NAMES)
def test_correct_run_under_the_claim_and_both_twins_flagged(name):
  ok, *twins = mechanisms.audit(name, num_samples=NUM_SAMPLES, seed=0)
  assert [t.twin for t in twins] == ["noise/2", "2x-sensitivity"]
  for r in (ok, *twins):
    assert r.claimed_epsilon == pytest.approx(CLAIM, rel=1e-6)  # the bug is invisible to it
    assert r.lower_bound.num_samples == (NUM_SAMPLES // 2, NUM_SAMPLES // 2)  # held out
  assert ok.consistent, ok
  # Tight enough to matter: the correct run reaches a good part of its claim ...
  assert ok.lower_bound.epsilon > 0.35 * CLAIM, ok
  for bad in twins:  # ... and each twin is flagged with margin.
    assert bad.lower_bound.epsilon > 1.3 * CLAIM, bad
  assert twins[1].compile_seconds == 0.0  # the 2x twin reuses the correct program


def _newton_module():
  import importlib  # pylint: disable=import-outside-toplevel
  return importlib.import_module("dpjax.transforms.dp_newton")


@contextlib.contextmanager
def _one_newton_release_scaled(which: str, factor: float, *, adaptive: bool):
  """A Newton step whose ``which`` release alone ("direction" or "trace") adds ``factor`` x noise.

  ``dp_newton.update`` releases, in this order, the gradient, the trace (adaptive lambda
  only) and the direction; the shim counts the releases as the update is traced and
  scales the one asked for. The accountant still charges the full budget.
  """
  module = _newton_module()
  order = ("gradient", "trace", "direction") if adaptive else ("gradient", "direction")
  calls = [0]

  def add_gaussian(key, value, *, sensitivity, noise_std, exact=True, atoms=None):
    hit = order[calls[0] % len(order)] == which
    calls[0] += 1
    return noise.add_gaussian(key, value, sensitivity=sensitivity,
                              noise_std=noise_std * factor if hit else noise_std, exact=exact,
                              atoms=atoms)

  shim = types.SimpleNamespace(add_gaussian=add_gaussian, tv_per_coordinate=noise.tv_per_coordinate,
                               tv_slack=noise.tv_slack, draw_atoms=noise.draw_atoms)
  original = module.noise
  jax.clear_caches()
  compiled.clear()
  module.noise = shim
  try:
    yield
  finally:
    module.noise = original
    jax.clear_caches()
    compiled.clear()
  assert calls[0] > 0 and calls[0] % len(order) == 0, calls  # whole updates were traced


def test_margin_zero_canary_sees_the_direction_noise_alone():
  """Halving the direction noise only is flagged by the direction audit (margin-0 canary).

  The gradient channel's margin -20 canary (Hessian weight 2e-9: the curvature, hence the
  direction, is the same on both sides) cannot see that bug, which is why the direction
  channel has its own canary.
  """
  with _one_newton_release_scaled("direction", 0.5, adaptive=False):
    direction = mechanisms.run_audit(mechanisms.make_setup("newton-hess-add-fixed-direction"),
                                     num_samples=NUM_SAMPLES, seed=0)
    gradient = mechanisms.run_audit(mechanisms.make_setup("newton-hess-add-fixed-gradient"),
                                    num_samples=NUM_SAMPLES, seed=0)
  assert direction.lower_bound.epsilon > 1.3 * direction.claimed_epsilon, direction
  assert gradient.consistent, gradient


def test_trace_audit_sees_the_trace_noise_alone():
  with _one_newton_release_scaled("trace", 0.5, adaptive=True):
    r = mechanisms.run_audit(mechanisms.make_setup("newton-qu-clip-adaptive-trace"),
                             num_samples=NUM_SAMPLES, seed=0)
  assert r.lower_bound.epsilon > 1.3 * r.claimed_epsilon, r
