"""``dpjax.compiled``: one compiled program per static configuration, never a stale one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dpjax
from dpjax import compiled
from dpjax.mechanisms import noise


@pytest.fixture(scope="module")
def ds():
  return dpjax.synthetic(0, n=300, d=4)


@pytest.fixture(autouse=True)
def _cold():
  compiled.clear()
  yield
  compiled.clear()


@pytest.mark.parametrize("algorithm, kw", [
    ("dp-gd", dict(steps=4)),
    ("precond-gd", dict(steps=4)),
    ("dp-sgd", dict(steps=4, batch_size=30)),
    ("otb", dict(steps=4, batch_size=20)),
])
def test_same_configuration_compiles_once_and_gives_the_same_output(ds, algorithm, kw):
  first = dpjax.fit(ds, algorithm, epsilon=1.0, seed=3, **kw)
  again = dpjax.fit(ds, algorithm, epsilon=1.0, seed=3, **kw)
  other_seed = dpjax.fit(ds, algorithm, epsilon=1.0, seed=4, **kw)
  assert first.seconds_compile > 0.0
  assert again.seconds_compile == 0.0 and other_seed.seconds_compile == 0.0
  np.testing.assert_array_equal(first.params, again.params)
  np.testing.assert_array_equal(first.losses, again.losses)
  assert not np.array_equal(first.params, other_seed.params)
  kept = compiled.size()
  # Anything the program closes over is in the key: a new budget compiles a new program,
  # whose noise is calibrated to it.
  stronger = dpjax.fit(ds, algorithm, epsilon=4.0, seed=3, **kw)
  assert stronger.seconds_compile > 0.0 and compiled.size() > kept
  assert not np.array_equal(first.params, stronger.params)


def test_shapes_and_dtypes_are_part_of_the_key(ds):
  first = dpjax.fit(ds, "dp-gd", epsilon=1.0, steps=3, seed=0)
  more_rows = dpjax.synthetic(1, n=301, d=4)
  assert dpjax.fit(more_rows, "dp-gd", epsilon=1.0, steps=3, seed=0).seconds_compile > 0.0
  two = dpjax.fit(ds, "dp-gd", epsilon=1.0, steps=3, seed=0, repeats=2)
  assert two.seconds_compile > 0.0 and first.seconds_compile > 0.0


def test_the_audit_noise_injection_never_reuses_a_correct_program(ds):
  """A program traced under ``broken_noise_for_audit`` is keyed apart, both ways."""
  correct = dpjax.fit(ds, "dp-gd", epsilon=1.0, steps=3, seed=0)
  with noise.broken_noise_for_audit(0.5):
    broken = dpjax.fit(ds, "dp-gd", epsilon=1.0, steps=3, seed=0)
  after = dpjax.fit(ds, "dp-gd", epsilon=1.0, steps=3, seed=0)
  assert broken.seconds_compile > 0.0 and after.seconds_compile == 0.0
  # Half the noise: the first update differs from the correct run's, and the run after
  # the block is the correct one again.
  assert not np.array_equal(correct.params, broken.params)
  np.testing.assert_array_equal(correct.params, after.params)


def test_keys_freeze_values_by_type_and_refuse_what_cannot_be_hashed():
  assert compiled.freeze(1) != compiled.freeze(1.0)
  assert compiled.freeze({"b": 1, "a": (2.0, None)}) == compiled.freeze({"a": (2.0, None), "b": 1})
  assert compiled.freeze(np.float32(0.5)) != compiled.freeze(np.float64(0.5))
  small = np.arange(4.0)
  assert compiled.freeze(small) == compiled.freeze(small.copy())
  assert compiled.freeze(small) != compiled.freeze(small + 1)
  with pytest.raises(compiled.Unhashable):
    compiled.freeze({"a": [_NoHash()]})
  with pytest.raises(compiled.Unhashable):
    compiled.freeze(np.zeros(1 << 14))  # 128 KiB: too large to key by value

  def traced(a):
    with pytest.raises(compiled.Unhashable):
      compiled.freeze(a)
    return a

  jax.jit(traced)(jnp.ones(2))


class _NoHash:
  __hash__ = None


def test_an_unhashable_description_compiles_afresh_and_the_cache_is_bounded(monkeypatch):
  run = jax.jit(lambda a: a + 1.0)
  arg = (jnp.ones(3),)
  _, first, _ = compiled.compile_and_time(run, arg, 1, key=("plus", _NoHash()))
  _, second, _ = compiled.compile_and_time(run, arg, 1, key=("plus", _NoHash()))
  assert compiled.size() == 0 and first > 0.0 and second > 0.0
  monkeypatch.setattr(compiled, "MAX_PROGRAMS", 3)
  for i in range(5):
    compiled.compile_and_time(run, arg, 1, key=("plus", i))
  assert compiled.size() == 3
  _, again, _ = compiled.compile_and_time(run, arg, 1, key=("plus", 4))
  _, evicted, _ = compiled.compile_and_time(run, arg, 1, key=("plus", 0))
  assert again == 0.0 and evicted > 0.0
