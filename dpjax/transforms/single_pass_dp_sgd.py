"""Single-pass DP-SGD: each example is used once, so the whole run costs one step's rho.

The DP-SGD baseline (Abadi et al. 2016) of a single-pass comparison with DP
online-to-batch (Zhang, Tran & Cutkosky, NeurIPS 2022), without
amplification by sampling: step ``t`` takes a fresh batch of ``b`` examples
(disjoint batches, single pass), clips each example's gradient to ``C`` and
adds Gaussian noise ``N(0, s^2 I)`` to the sum,

``theta_{t+1} = Pi(theta_t - eta (sum_z clip(grad l(theta_t, z), C) + N(0, s^2 I)) / b)``,
``s = C / sqrt(2 rho)`` (``2C / sqrt(2 rho)`` for replace-one neighbours).

Privacy: zeroing out one example (``dpjax.problem.minibatch.NEIGHBOURING``) changes
only the step whose batch holds it, by at most ``C`` in L2 (``2C`` when it is
replaced: ``s`` doubles), and that step is ``rho``-zCDP (Gaussian mechanism); every other step sees the example only through earlier released
iterates (post-processing; parallel composition over disjoint batches with
adaptivity). So the run is ``rho``-zCDP **whatever its length**, as long as
no example is used twice: the accountant is charged ``rho`` once, at the first
step. A multi-epoch run needs a new transform (and a new charge) per epoch.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.problem import minibatch

__all__ = ["SinglePassDPSGDState", "single_pass_dp_sgd"]


class SinglePassDPSGDState(NamedTuple):
  """State of :func:`single_pass_dp_sgd`."""

  count: jax.Array  # shape=(), int32: steps taken.
  key: jax.Array  # shape=(), typed PRNG key, split on every step.
  accountant: accounting.AccountantState  # rho, charged at the first step.
  noise_std: jax.Array  # shape=(): s, the std of the noise on each step's clipped sum.
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


def single_pass_noise_scale(*, clip_norm: float, rho: Any, neighbouring: str = "zero-out") -> tuple[float, Any]:
  """``(sensitivity, s)`` of :func:`single_pass_dp_sgd`'s release of each step's clipped sum.

  The one place its noise scale is derived: the sum of per-example gradients
  clipped to ``C`` has L2 sensitivity ``C`` under zero-out (``2 C`` under
  replace-one), and ``s = accounting.gaussian_sigma(sensitivity, rho)``; each
  example is in one step's batch only, so every step gets the whole ``rho``.
  ``rho`` may be traced.

  Examples:
    >>> from dpjax.transforms import single_pass_noise_scale
    >>> single_pass_noise_scale(clip_norm=1.0, rho=0.5)
    (1.0, 1.0)
  """
  sensitivity = minibatch.sensitivity_factor(neighbouring) * clip_norm
  return sensitivity, accounting.gaussian_sigma(sensitivity, rho)


def single_pass_dp_sgd(
    *,
    learning_rate: float | jax.Array,
    batch_size: int,
    clip_norm: float,
    rho: float | jax.Array,
    steps: int | None = None,
    loss: str | None = None,
    loss_fn: Callable[[Any, Any], jax.Array] | None = None,
    projection: Callable[[Any], Any] | None = None,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Single-pass DP-SGD: ``update(None, state, params, *, batch)`` returns ``theta_{t+1} - params``.

  Args:
    learning_rate: ``eta`` (> 0; a scalar array may be traced), in units of the mean
      gradient.
    batch_size: ``b`` (> 0), the public batch size.
    clip_norm: ``C`` (> 0), the per-example gradient clip norm.
    rho: the zCDP budget of the whole single pass (charged once).
    steps: optional horizon; a step past it is refused (eagerly ``ValueError``,
      traced: zero update and ``budget_exhausted``).
    loss / loss_fn: the GLM path (``batch = (x, y)``) or a per-example loss.
    projection: optional map onto a domain, applied to every iterate.
    key: int seed or typed PRNG key.
    neighbouring: ``"zero-out"`` or ``"replace-one"`` (noise x 2).
    disable_noise_for_testing: no noise (NOT private).
    unsafe_float_noise: if True, draws the noise as ``jax.random.normal`` in
      floating point instead of :mod:`dpjax.mechanisms.noise`'s exact sampler: NOT
      private (Mironov 2012); for measuring what exactness costs. Issues
      :class:`dpjax.PrivacyLeakWarning`.

  Examples:
    >>> import jax.numpy as jnp, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.transforms import single_pass_dp_sgd
    >>> x, y = data.synthetic(0, n=640, d=5)
    >>> tx = single_pass_dp_sgd(learning_rate=0.5, batch_size=64, clip_norm=1.0, rho=0.5,
    ...                         loss="logistic", key=0)
    >>> w = jnp.zeros(5); state = tx.init(w)
    >>> for t in range(10):
    ...   u, state = tx.update(None, state, w, batch=(x[64 * t:64 * (t + 1)], y[64 * t:64 * (t + 1)]))
    ...   w = optax.apply_updates(w, u)
    >>> round(accounting.spent_rho(state.accountant), 12)  # one pass: rho, not 10 rho
    0.5
  """
  learning_rate = _common.positive_scalar(learning_rate, "learning_rate")
  batch_size = _validate.positive_int(batch_size, "batch_size")
  clip_norm = _validate.positive_float(clip_norm, "clip_norm")
  rho = _common.budget_value(rho, "rho")
  if steps is not None:
    steps = _validate.positive_int(steps, "steps")
  loss, loss_fn = minibatch.check_loss(loss, loss_fn)
  projection = minibatch.check_projection(projection)
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  sensitivity, sigma = single_pass_noise_scale(clip_norm=clip_norm, rho=rho, neighbouring=neighbouring)
  used_sigma = 0.0 if no_noise else sigma
  exact = _common.exact_noise(unsafe_float_noise, "single_pass_dp_sgd")
  slack = 1.0 if exact and not no_noise else 0.0

  def init_fn(params):
    return SinglePassDPSGDState(
        count=jnp.zeros((), jnp.int32), key=key, accountant=accounting.init_accountant(),
        noise_std=jnp.asarray(used_sigma, _common.float_dtype(params)),
        budget_exhausted=jnp.zeros((), bool))

  def update_fn(updates, state, params=None, *, batch=None, **extra):
    del updates, extra
    if not isinstance(state, SinglePassDPSGDState):
      raise TypeError(f"state must be a SinglePassDPSGDState from init(), got "
                      f"{type(state).__name__}.")
    if params is None:
      raise ValueError("single_pass_dp_sgd.update needs params (theta_t).")
    minibatch.check_batch(batch, glm=loss is not None, batch_size=batch_size,
                          name="single_pass_dp_sgd")
    ok = _common.gate(state.count, steps, "single_pass_dp_sgd")
    new_key, noise_key = jax.random.split(state.key)
    s = minibatch.clipped_sum(params, batch, bound=clip_norm, loss=loss, loss_fn=loss_fn)
    noisy = noise.add_gaussian(noise_key, s, sensitivity=sensitivity, noise_std=used_sigma,
                               exact=exact)
    new = jax.tree.map(lambda p, g: p - (learning_rate / batch_size) * g, params, noisy)
    if projection is not None:
      new = projection(new)
    step = jax.tree.map(lambda n, p: jnp.where(ok, n - p, jnp.zeros_like(p)), new, params)
    first = jnp.logical_and(ok, state.count == 0)  # one charge: every example is used once.
    acc = _common.select(first, accounting.charge(state.accountant, rho), state.accountant)
    # The exact sampler's TV slack is per release: every step's.
    acc = _common.select(ok, accounting.charge(acc, 0.0, slack=slack * noise.tv_slack(s)), acc)
    return step, SinglePassDPSGDState(
        count=jnp.where(ok, optax.safe_increment(state.count), state.count), key=new_key,
        accountant=acc,
        noise_std=state.noise_std,
        budget_exhausted=jnp.logical_or(state.budget_exhausted, jnp.logical_not(ok)))

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
