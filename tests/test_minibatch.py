"""dpjax.problem.minibatch.clipped_sum: fused GLM path == generic path, the clip bound, P2 masking."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import maybe_jit, unit_ball_batch
from dpjax.problem import minibatch

B, DIM = 32, 5


def _data(seed=0, scale=1.0):
  return unit_ball_batch(seed, B, DIM, scale=scale)


def _logistic(w, example):
  x, y = example
  return jnp.logaddexp(0.0, -y * jnp.dot(w, x))


def _squares(w, example):
  x, y = example
  return 0.5 * (jnp.dot(w, x) - y) ** 2


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("loss, fn", [("logistic", _logistic), ("least_squares", _squares)])
def test_fused_equals_generic(jit, loss, fn):
  x, y = _data(1, scale=2.0)
  w, w_prev = jnp.linspace(-1, 1, DIM), jnp.linspace(0.5, -0.5, DIM)
  for bound, a, prev in ((0.3, 0.7, w_prev), (100.0, 0.7, w_prev), (0.3, 0.0, None)):
    fused = maybe_jit(lambda w, p: minibatch.clipped_sum(w, (x, y), bound=bound, loss=loss,
                                                         prev_params=p, a=a), jit)(w, prev)
    generic = minibatch.clipped_sum(w, (x, y), bound=bound, loss_fn=fn, prev_params=prev, a=a)
    np.testing.assert_allclose(np.asarray(fused), np.asarray(generic), rtol=2e-5, atol=2e-6)


def test_each_example_is_clipped_and_the_sum_has_sensitivity_bound():
  x, y = _data(2, scale=3.0)
  w = jnp.ones(DIM)
  bound = 0.2
  full = minibatch.clipped_sum(w, (x, y), bound=bound, loss="least_squares")
  for i in range(B):
    keep = np.arange(B) != i
    without = minibatch.clipped_sum(w, (x[keep], y[keep]), bound=bound, loss="least_squares")
    assert float(jnp.linalg.norm(full - without)) <= bound * (1 + 1e-5)
  # Unclipped, the same removal can move the sum far more (the clip is active here).
  raw = jax.vmap(jax.grad(_squares), (None, 0))(w, (x, y))
  assert float(jnp.max(jnp.linalg.norm(raw, axis=1))) > 10 * bound


def test_zero_weight_masks_a_nan_gradient():
  x, y = _data(3)
  w = jnp.zeros(DIM)
  bad = jnp.full(DIM, jnp.nan)
  for kw in ({"loss": "logistic"}, {"loss_fn": _logistic}):
    out = minibatch.clipped_sum(w, (x, y), bound=1.0, prev_params=bad, a=0.0, **kw)
    ref = minibatch.clipped_sum(w, (x, y), bound=1.0, **kw)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))


def test_pytree_params_generic_path():
  x, y = _data(4)
  params = {"w": jnp.ones(DIM) * 0.1, "b": jnp.array(0.2)}

  def loss_fn(p, example):
    xi, yi = example
    return jnp.logaddexp(0.0, -yi * (jnp.dot(p["w"], xi) + p["b"]))

  out = minibatch.clipped_sum(params, (x, y), bound=0.05, loss_fn=loss_fn)
  assert set(out) == {"w", "b"} and out["w"].shape == (DIM,) and out["b"].shape == ()
  per = jax.vmap(jax.grad(loss_fn), (None, 0))(params, (x, y))
  norms = np.sqrt(np.sum(np.asarray(per["w"]) ** 2, 1) + np.asarray(per["b"]) ** 2)
  scale = np.minimum(1.0, 0.05 / norms)
  np.testing.assert_allclose(np.asarray(out["b"]), np.sum(scale * np.asarray(per["b"])),
                             rtol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    ({}, "exactly one"),
    ({"loss": "logistic", "loss_fn": _logistic}, "exactly one"),
    ({"loss": "hinge"}, "loss"),
    ({"loss_fn": 3}, "loss_fn"),
])
def test_bad_loss(kwargs, match):
  with pytest.raises((ValueError, TypeError), match=match):
    minibatch.clipped_sum(jnp.zeros(DIM), _data(), bound=1.0, **kwargs)


def test_batch_size_of():
  x, y = _data()
  assert minibatch.batch_size_of((x, y), True) == B
  assert minibatch.batch_size_of({"a": x}, False) == B
  with pytest.raises(ValueError, match="batch must be"):
    minibatch.batch_size_of(x, True)
