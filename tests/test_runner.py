"""The one compiled runner (dpjax.runner): steps, guard, tail average, release blocks, repeats."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpjax import runner
from dpjax.transforms import averaging


def _quadratic_inputs(target):
  """inputs(w, t) of 0.5 ||w - target||^2: the gradient, no extra args, the value at w."""
  return lambda w, t: (w - target, {}, 0.5 * jnp.sum((w - target) ** 2))


def test_scan_steps_is_the_update_rule_unrolled_on_the_host():
  target = jnp.array([1.0, -2.0, 0.5])
  tx = optax.sgd(0.3)
  got = jax.jit(lambda: runner.scan_steps(tx, jnp.zeros(3), 6, _quadratic_inputs(target)))()
  w, values = np.zeros(3, np.float32), []
  for _ in range(6):
    values.append(0.5 * np.sum((w - np.asarray(target)) ** 2))
    w = w - 0.3 * (w - np.asarray(target))
  np.testing.assert_allclose(got.params, w, rtol=1e-6)
  np.testing.assert_array_equal(got.output, got.params)  # no average: w_T.
  np.testing.assert_allclose(got.records, values, rtol=1e-5)
  assert int(got.resets) == 0 and got.records.shape == (6,)


@pytest.mark.parametrize("average", ["last-half", "last-quarter"])
def test_tail_average_is_the_mean_of_the_last_iterates(average):
  steps = 11
  target = jnp.array([3.0, -1.0])
  noise = jax.random.normal(jax.random.key(0), (steps, 2))
  # A noisy step, so the iterates differ: g_t = w - target + noise_t.
  inputs = lambda w, t: (w - target + noise[t], {}, None)  # noqa: E731
  got = runner.scan_steps(optax.sgd(0.5), jnp.zeros(2), steps, inputs, average=average,
                          record=lambda value, w, state: w)
  iterates = np.asarray(got.records, np.float64)
  window = averaging.window_size(steps, average)
  assert 1 <= window < steps
  np.testing.assert_allclose(got.output, iterates[-window:].mean(axis=0), rtol=1e-6)
  np.testing.assert_array_equal(got.params, got.records[-1])
  assert not np.allclose(got.output, got.params)


def test_guard_resets_to_the_start_and_counts():
  w0 = jnp.array([0.5, 0.0])
  # sgd(-1) on g = w doubles w each step: 1, 2, 4 > 3.5 -> reset to w0, and so on.
  got = runner.scan_steps(optax.sgd(-1.0), w0, 7, lambda w, t: (w, {}, None), guard_radius=3.5,
                          record=lambda value, w, state: w[0])
  np.testing.assert_array_equal(got.records, [1.0, 2.0, 0.5, 1.0, 2.0, 0.5, 1.0])
  assert int(got.resets) == 2
  # NaN also trips the guard (`not norm <= R`).
  nan = runner.scan_steps(optax.sgd(1.0), w0, 2, lambda w, t: (w * jnp.nan, {}, None),
                          guard_radius=3.5)
  np.testing.assert_array_equal(nan.params, w0)
  assert int(nan.resets) == 2
  free = runner.scan_steps(optax.sgd(-1.0), w0, 7, lambda w, t: (w, {}, None))
  assert int(free.resets) == 0 and float(free.params[0]) == 64.0  # no guard: no reset.


@pytest.mark.parametrize("steps,every", [(8, 3), (6, 3), (5, 1), (4, 9), (7, 7)])
def test_release_blocks_use_the_release_pass_on_steps_0_r_2r(steps, every):
  def tagged(tag):
    return lambda w, t: (jnp.zeros_like(w), {}, jnp.asarray(tag))

  got = runner.scan_steps(optax.sgd(0.1), jnp.zeros(2), steps, tagged(0), release_every=every,
                          release_inputs=tagged(1), first_inputs=tagged(2))
  want = [2 if t == 0 else (1 if t % every == 0 else 0) for t in range(steps)]
  np.testing.assert_array_equal(got.records, want)
  same = runner.scan_steps(optax.sgd(0.1), jnp.zeros(2), steps, tagged(0), release_every=every,
                           release_inputs=tagged(1))
  np.testing.assert_array_equal(same.records, [1 if t % every == 0 else 0 for t in range(steps)])


def test_step_index_counts_from_zero():
  got = runner.scan_steps(optax.sgd(0.0), jnp.zeros(1), 5,
                          lambda w, t: (jnp.zeros_like(w), {}, t))
  np.testing.assert_array_equal(got.records, np.arange(5))


def test_program_vmaps_the_batched_arguments_and_computes_shared_once():
  calls = []

  def shared(x, y):
    calls.append(1)  # traced once: outside the vmap, so it runs once for all repeats.
    return jnp.sum(x) + jnp.sum(y)

  def one(key, scale, x, y, s):
    return jax.random.normal(key, ()) * scale + s

  run = runner.program(one, shared=shared, batched=2)
  keys = jax.random.split(jax.random.key(3), 4)
  scales = jnp.array([0.0, 1.0, 2.0, 0.0])
  out, seconds_compile, seconds_run = runner.run(run, (keys, scales, jnp.ones(3), jnp.ones(2)), 2)
  assert isinstance(out, np.ndarray) and out.shape == (4,)
  np.testing.assert_allclose(out[[0, 3]], 5.0)
  for i in (1, 2):
    np.testing.assert_allclose(out[i], jax.random.normal(keys[i], ()) * scales[i] + 5.0,
                               rtol=1e-6)
  assert len(calls) == 1 and seconds_compile > 0.0 and seconds_run > 0.0
  plain = runner.program(lambda key, x, y: jax.random.normal(key, x.shape) + y)
  got, _, _ = runner.run(plain, (keys, jnp.zeros(2), jnp.ones(2)), 1)
  assert got.shape == (4, 2) and not np.allclose(got[0], got[1])


def test_repeat_keys_split_the_run_key():
  key = jax.random.key(7)
  np.testing.assert_array_equal(jax.random.key_data(runner.repeat_keys(key, 3)),
                                jax.random.key_data(jax.random.split(key, 3)))


def test_a_reused_program_key_compiles_once():
  run = runner.program(lambda key, x, y: x * y + jax.random.uniform(key))
  args = (jax.random.split(jax.random.key(0), 2), jnp.ones(3), jnp.ones(3))
  _, first, _ = runner.run(run, args, 1, program_key=("test_runner", "reuse"))
  again = runner.program(lambda key, x, y: x * y + jax.random.uniform(key))
  _, second, _ = runner.run(again, args, 1, program_key=("test_runner", "reuse"))
  assert first > 0.0 and second == 0.0
