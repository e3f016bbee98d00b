"""The audit harness itself: setups, bug injection and its check, argument validation."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dpjax.mechanisms import noise
from dpjax.audit import mechanisms


def test_every_entry_names_its_twins_and_describes_its_test():
  assert set(mechanisms.CONTROLS) == set(mechanisms.MECHANISMS)
  for name, twins in mechanisms.CONTROLS.items():
    assert twins and set(twins) <= set(mechanisms.BROKEN), name
    if name not in ("aop", "tree-prefix-sums-all-steps"):
      assert set(mechanisms.TWINS) <= set(twins), name
  newton = [k for k in mechanisms.MECHANISMS if k.startswith("newton-")]
  assert len(newton) == 20  # {hess, qu} x {clip, add} x {fixed: 2, adaptive: 3 channels}
  setup = mechanisms.make_setup("newton-qu-clip-fixed-direction")
  assert setup.channel == "direction" and "margin 0" in setup.canary
  assert "40 public rows" in setup.canary  # clip: public curvature up to lambda on e_1


def test_noise_twin_halves_the_released_noise_and_is_undone():
  key = jax.random.key(0)
  release = lambda: noise.add_gaussian(key, jax.numpy.zeros(4000), sensitivity=1.0,
                                       noise_std=1.0)
  f = jax.jit(release)
  before = float(f().std())
  with mechanisms.injected_noise(0.5):
    assert float(f().std()) == pytest.approx(before / 2, rel=1e-3)  # the cached program is redone
  assert float(f().std()) == before
  b = noise.perturbation_vector(key, 5, 1.0)
  with mechanisms.injected_noise(1 / 3):  # the one draw that is not a release, too
    np.testing.assert_allclose(noise.perturbation_vector(key, 5, 1.0), b / 3, rtol=1e-12)
  np.testing.assert_array_equal(noise.perturbation_vector(key, 5, 1.0), b)
  with mechanisms.injected_noise(None):
    assert float(f().std()) == before


def test_a_noise_twin_that_misses_the_noise_is_refused():
  """A twin whose injection never reaches the noise releases the correct runs: refused."""
  correct = mechanisms.run_audit(mechanisms.make_setup("dp-gd-1-step"), num_samples=8, seed=0)
  wrong = mechanisms.make_setup("dp-gd-1-step", twin="noise/2")._replace(noise_factor=None)
  missed = mechanisms.run_audit(wrong, num_samples=8, seed=0)
  with pytest.raises(RuntimeError, match="never reached"):
    mechanisms.check_injection(correct, missed)
  right = mechanisms.run_audit(mechanisms.make_setup("dp-gd-1-step", twin="noise/2"),
                               num_samples=8, seed=0)
  mechanisms.check_injection(correct, right)
  assert right.fingerprint != correct.fingerprint


def test_default_seed_is_fresh_and_recorded():
  setup = mechanisms.make_setup("dp-gd-1-step")
  a, b = (mechanisms.run_audit(setup, num_samples=8) for _ in range(2))
  assert a.seed != b.seed and a.fingerprint != b.fingerprint
  again = mechanisms.run_audit(setup, num_samples=8, seed=a.seed)
  assert again.fingerprint == a.fingerprint and again.seed == a.seed


@pytest.mark.parametrize("call, match", [
    (lambda: mechanisms.make_setup("dp-magic"), "unknown mechanism"),
    (lambda: mechanisms.make_setup("dp-gd-1-step", twin="noise/3"), "twin must be"),
    (lambda: mechanisms.make_setup("dp-gd-1-step", twin="fresh-tree-noise"), "not a control"),
    (lambda: mechanisms.make_setup("tree-prefix-sums", twin="noise/10"), "not a control"),
    (lambda: mechanisms.run_audit(mechanisms.make_setup("dp-gd-1-step"), num_samples=3, seed=0),
     "num_samples must be >= 4"),
    (lambda: mechanisms.run_audit(mechanisms.make_setup("dp-gd-1-step"), num_samples=8,
                                  seed=-1), "seed must be in"),
    (lambda: mechanisms.make_setup("newton-hess-clip-fixed-gradient", channel="trace"),
     "adaptive"),
])
def test_bad_arguments_are_refused(call, match):
  with pytest.raises(ValueError, match=match):
    call()


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_samples=8.0), "num_samples must be an integer"),
    (dict(num_samples=8, seed=True), "seed must be None"),
])
def test_bad_argument_types_are_refused(kwargs, match):
  with pytest.raises(TypeError, match=match):
    mechanisms.run_audit(mechanisms.make_setup("dp-gd-1-step"), **kwargs)
