"""DP-FTRL with tree aggregation (Kairouz et al. 2021), a single-pass baseline for online-to-batch.

Follow-the-regularized-leader on the private prefix sums of clipped
gradients (Kairouz, McMahan, Song, Thakkar, Thakurta & Xu, "Practical and
private (deep) learning without sampling or shuffling", ICML 2021, Algorithm
1 without momentum):

``theta_{t+1} = Pi(theta_0 - eta ghat_t / b)``, ``ghat_t`` the binary
mechanism's release of ``sum_{s<=t} sum_{z in batch_s} clip(grad l(theta_s, z), C)``

(:func:`dpjax.transforms.tree_prefix_sum`: each tree node is released
through the floating-point-safe Gaussian mechanism of :mod:`dpjax.mechanisms.noise` with
std ``c C``, ``2 c C`` for replace-one neighbours, and ``ghat_t`` is the sum of
released nodes). Privacy: each example is used once (one step's batch, single
pass) and moves that step's clipped sum by at most ``C`` when zeroed out
(``2C`` when replaced; ``dpjax.problem.minibatch.NEIGHBOURING``), so the releases cost
the tree's ``depth / (2 c^2)`` zCDP (plus their TV slack) and every
``theta`` is post-processing; the accountant in the state is the tree's.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, NamedTuple

import jax
import optax

from dpjax import _common
from dpjax import _validate
from dpjax import leaks
from dpjax.problem import minibatch
from dpjax.transforms.tree_prefix_sum import TreeAggregationState, tree_prefix_sum

__all__ = ["DPFTRLState", "dp_ftrl"]


class DPFTRLState(NamedTuple):
  """State of :func:`dp_ftrl`; ``optax.tree.get(state, "rho")`` reads the tree's accountant."""

  origin: Any  # theta_0, like the params: the regularizer's centre.
  prefix: TreeAggregationState  # the tree's node sums and releases (and accountant).


def dp_ftrl(
    *,
    learning_rate: float | jax.Array,
    batch_size: int,
    clip_norm: float,
    steps: int | None = None,
    num_levels: int | None = None,
    rho: float | jax.Array | None = None,
    noise_multiplier: float | jax.Array | None = None,
    loss: str | None = None,
    loss_fn: Callable[[Any, Any], jax.Array] | None = None,
    projection: Callable[[Any], Any] | None = None,
    key: int | jax.Array,
    mode: str = "buffered",
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """DP-FTRL: ``update(None, state, params, *, batch)`` returns ``theta_{t+1} - params``.

  Args:
    learning_rate: ``eta`` (> 0; a scalar array may be traced), in units of the mean
      gradient.
    batch_size: ``b`` (> 0), the public batch size of every step.
    clip_norm: ``C`` (> 0), the per-example gradient clip norm.
    steps / num_levels: the tree's horizon or levels (exactly one).
    rho / noise_multiplier: the budget of a full tree, or ``c`` (exactly one).
    loss: ``"logistic"`` or ``"least_squares"`` with ``batch = (x, y)``; or
    loss_fn: a per-example loss ``f(params, example)``.
    projection: optional map onto a domain, applied to every iterate.
    key: int seed or typed PRNG key (the tree's).
    mode: the tree mode (``dpjax.mechanisms.tree_aggregation.MODES``).
    neighbouring: ``"zero-out"`` or ``"replace-one"`` (noise x 2).
    disable_noise_for_testing: no noise (NOT private).
    unsafe_float_noise: the tree releases its nodes with float noise
      (``jax.random.normal``): NOT private in floating point (Mironov 2012);
      for benchmarks only. Issues :class:`dpjax.PrivacyLeakWarning`.

  Examples:
    >>> import jax.numpy as jnp, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.transforms import dp_ftrl
    >>> x, y = data.synthetic(0, n=640, d=5)
    >>> tx = dp_ftrl(learning_rate=0.5, batch_size=64, clip_norm=1.0, steps=10, rho=1.0,
    ...              loss="logistic", key=0)
    >>> w = jnp.zeros(5); state = tx.init(w)
    >>> for t in range(10):
    ...   u, state = tx.update(None, state, w, batch=(x[64 * t:64 * (t + 1)], y[64 * t:64 * (t + 1)]))
    ...   w = optax.apply_updates(w, u)
    >>> round(accounting.spent_rho(state.prefix.accountant), 12)
    1.0
  """
  learning_rate = _common.positive_scalar(learning_rate, "learning_rate")
  batch_size = _validate.positive_int(batch_size, "batch_size")
  clip_norm = _validate.positive_float(clip_norm, "clip_norm")
  loss, loss_fn = minibatch.check_loss(loss, loss_fn)
  projection = minibatch.check_projection(projection)
  with warnings.catch_warnings():  # the opt-out's warning is dp_ftrl's own, issued below.
    warnings.simplefilter("ignore", leaks.PrivacyLeakWarning)
    prefix = tree_prefix_sum(num_levels=num_levels, steps=steps, rho=rho,
                                noise_multiplier=noise_multiplier,
                                sensitivity=minibatch.sensitivity_factor(neighbouring) * clip_norm,
                                key=key,
                                mode=mode, disable_noise_for_testing=disable_noise_for_testing,
                                unsafe_float_noise=unsafe_float_noise)
  _common.exact_noise(unsafe_float_noise, "dp_ftrl")

  def init_fn(params):
    return DPFTRLState(origin=params, prefix=prefix.init(params))

  def update_fn(updates, state, params=None, *, batch=None, **extra):
    del updates, extra
    if not isinstance(state, DPFTRLState):
      raise TypeError(f"state must be a DPFTRLState from init(), got {type(state).__name__}.")
    if params is None:
      raise ValueError("dp_ftrl.update needs params (theta_t).")
    minibatch.check_batch(batch, glm=loss is not None, batch_size=batch_size, name="dp_ftrl")
    s = minibatch.clipped_sum(params, batch, bound=clip_norm, loss=loss, loss_fn=loss_fn)
    noisy, prefix_state = prefix.update(s, state.prefix)
    new = jax.tree.map(lambda o, g: o - (learning_rate / batch_size) * g, state.origin, noisy)
    if projection is not None:
      new = projection(new)
    return (jax.tree.map(lambda n, p: n - p, new, params),
            DPFTRLState(origin=state.origin, prefix=prefix_state))

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
