"""DP online-to-batch (Zhang, Tran & Cutkosky 2022, "Differentially private online-to-batch for smooth losses", NeurIPS).

Any online learner on a bounded domain becomes a private stochastic optimizer.
Step ``t`` (1-based, one fresh batch ``z_t`` per step, single pass):

1. the learner plays ``w_t``; the averaged iterate is ``x_t = x_{t-1} +
   (beta_t / beta_{1:t}) (w_t - x_{t-1})``, the ``beta``-weighted mean of
   ``w_1..w_t``, with ``beta_t = t^k`` and ``beta_0 = 0``;
2. each example's difference vector ``v_t(z) = beta_t grad l(x_t, z) -
   beta_{t-1} grad l(x_{t-1}, z)`` is computed on the **same** example at both
   points and clipped to ``C_0 t^(k-1)`` (clipping the difference, not each
   gradient); their sum is ``delta_t``;
3. the binary tree (:mod:`dpjax.mechanisms.tree_aggregation`) releases its nodes through
   the floating-point-safe Gaussian mechanism (:mod:`dpjax.mechanisms.noise`) and returns
   ``ghat_t``, the sum of the released nodes covering ``1..t``: a private
   estimate of ``g_t = delta_1 + ... + delta_t`` (which is never formed, let
   alone released);
4. the learner sees only ``ghat_t``, as the linear loss ``beta_t <u_t, w>``
   with ``u_t = ghat_t / (beta_t b)`` (``b`` the public batch size), and
   plays ``w_{t+1}``;
5. the training parameters become ``x_t`` (the output is the last ``x_T``,
   not ``w_T``).

Numerics. The differences are clipped in normalized form: ``s_t = sum_z
clip(grad l(x_t, z) - a_t grad l(x_{t-1}, z))`` with ``a_t = beta_{t-1} /
beta_t = ((t-1)/t)^k`` and the clip bound ``C_0 t^(k-1) / beta_t = C_0 / t``,
so no ``t^k``-sized differences cancel in float32; the tree's input is
``delta_t = beta_t s_t`` (``beta_t`` is a float: ``t^k`` overflows int32). At
``t = 1``, ``a_1 = 0`` and the gradient at ``x_0`` is masked out (never
multiplied by ``0^0 = 1``).

Privacy. The privacy unit is one position of the stream
(``dpjax.problem.minibatch.NEIGHBOURING``): with ``neighbouring="zero-out"`` (the
default; dp-accounting's REPLACE_SPECIAL) one example is replaced by a null
one, with ``"replace-one"`` by any other, doubling the sensitivity. The
example enters one step's ``delta_s`` only (single pass), by at most the clip
bound ``Delta_s = C_0 s^(k-1)`` (twice that for replace-one) in L2, whatever
the iterates (they are post-processing of earlier releases: adaptive
composition). The tree charges ``depth / (2 c^2)`` zCDP for its node
releases, ``c`` the node noise multiplier, plus the TV slack of each release
(:func:`dpjax.mechanisms.noise.tv_slack`); ``ghat_t``, the learner, ``x_t`` and the
output are post-processing of released values. The accountant in the state
is charged as the tree opens levels (at ``t = 1, 2, 4, ...``). Each node is
released with the largest sensitivity in it, so any ``k`` (or a given
monotone ``sensitivity`` schedule) is private; the default clip ``C_0 = k G +
(k + 1) D H`` leaves examples untouched for a ``G``-Lipschitz, ``H``-smooth
loss on a domain of diameter ``D``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax.problem import minibatch
from dpjax.mechanisms import noise
from dpjax import online
from dpjax.mechanisms import tree_aggregation as ta

__all__ = ["OnlineToBatchState", "difference_clip_bound", "online_to_batch"]


class OnlineToBatchState(NamedTuple):
  """State of :func:`online_to_batch`. ``optax.tree.get(state, "rho")`` reads the accountant."""

  count: jax.Array  # shape=(), int32: steps taken, t.
  beta_sum: jax.Array  # shape=(): beta_{1:t} (float: t^k overflows int32).
  average: Any  # x_t, like the params: the training parameters.
  play: Any  # w_{t+1}, like the params: the learner's next play.
  learner: Any  # the learner's state.
  tree: ta.TreeState  # the tree's exact node sums and released nodes.
  accountant: accounting.AccountantState  # rho-zCDP and TV slack charged by the tree.


def difference_clip_bound(k: float, lipschitz: float, smoothness: float, diameter: float) -> float:
  """``C_k = k G + (k + 1) D H``: ``||v_t(z)|| <= C_k t^(k-1)`` for ``k >= 1`` (Zhang, Tran & Cutkosky 2022).

  Examples:
    >>> from dpjax.transforms.online_to_batch import difference_clip_bound
    >>> difference_clip_bound(1.0, 1.0, 0.25, 2.0)  # logistic, ||x|| <= 1, a ball of radius 1
    2.0
  """
  k = _validate.positive_float(k, "k")
  if k < 1:
    raise ValueError(f"k={k:g}: the bound C_k holds for k >= 1 only; pass clip_norm.")
  return (k * _validate.positive_float(lipschitz, "lipschitz")
          + (k + 1) * _validate.positive_float(smoothness, "smoothness")
          * _validate.positive_float(diameter, "diameter"))


def online_to_batch(
    learner: optax.GradientTransformation,
    *,
    batch_size: int,
    steps: int | None = None,
    num_levels: int | None = None,
    rho: float | jax.Array | None = None,
    noise_multiplier: float | jax.Array | None = None,
    k: float = 1.0,
    clip_norm: float | None = None,
    sensitivity: Callable[[jax.Array], jax.Array] | None = None,
    loss: str | None = None,
    loss_fn: Callable[[Any, Any], jax.Array] | None = None,
    projection: Callable[[Any], Any] | None = None,
    key: int | jax.Array,
    mode: str = "buffered",
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """The DP online-to-batch conversion around ``learner`` (module docstring).

  ``update(None, state, params, *, batch)`` runs step ``t = state.count + 1``
  on ``batch`` (``b = batch_size`` fresh examples, each used once) and
  returns ``x_t - params``, so that the params become ``x_t``. ``batch`` is
  ``(x [b, d], y [b])`` with ``loss`` (a fused GLM path: two margins per
  example, never a ``[b, d]`` gradient tensor), or any pytree with a leading
  batch axis with ``loss_fn(params, example)`` (``vmap`` of ``grad``).

  A :mod:`dpjax.online` learner (which projects onto its ball) gets
  ``update(u_t, learner_state, w_t, beta=beta_t, x=x_t)``; any other optax
  transform gets ``update(u_t, learner_state, w_t)`` and its play is mapped
  through ``projection``, which it then requires.

  Args:
    learner: the online learner, an optax transform.
    batch_size: ``b``, the public number of examples per step (> 0).
    steps: the horizon ``T``; or ``num_levels`` (capacity ``2^L - 1``).
    rho: zCDP budget of a full tree; or ``noise_multiplier`` ``c``.
    k: the weight exponent, ``beta_t = t^k``.
    clip_norm: ``C_0``: each example's ``v_t(z)`` is clipped to ``C_0
      t^(k-1)`` (use :func:`difference_clip_bound` for a loss with known bounds).
    sensitivity: instead of ``C_0``, an explicit per-step schedule ``t ->
      Delta_t`` (int32 array in, array out), monotone in ``t``: the clip
      bound and the node noise follow it. Needed for ``k < 1``.
    loss: ``"logistic"`` or ``"least_squares"`` (fused GLM path); or
    loss_fn: a per-example loss ``f(params, example) -> scalar``.
    projection: for a learner without its own projection, the map onto the
      domain applied to its plays.
    key: int seed or typed PRNG key (the tree's).
    mode: the tree mode, one of ``dpjax.mechanisms.tree_aggregation.MODES``.
    neighbouring: ``"zero-out"`` or ``"replace-one"`` (node noise x 2); see
      ``dpjax.problem.minibatch.NEIGHBOURING``.
    disable_noise_for_testing: no noise (NOT private); still charged (no TV slack).
    unsafe_float_noise: releases the tree's nodes with float noise
      (``jax.random.normal``) instead of :mod:`dpjax.mechanisms.noise`'s exact sampler:
      NOT private in floating point (Mironov 2012); for benchmarks only.
      Issues :class:`dpjax.PrivacyLeakWarning`.

  Raises:
    ValueError, TypeError: eagerly, for bad arguments (see the messages).
  """
  if not isinstance(learner, optax.GradientTransformation):
    raise TypeError(f"learner must be an optax GradientTransformation, got "
                    f"{type(learner).__name__}.")
  extra_args = online.is_projected(learner)
  if not extra_args and projection is None:
    raise ValueError(
        "learner has no projection of its own: pass projection= (e.g. lambda w: "
        "dpjax.online.project_ball(w, center, radius)) or use a dpjax.online learner; the "
        "conversion's guarantees need the plays in a bounded domain.")
  projection = minibatch.check_projection(projection)
  batch_size = _validate.positive_int(batch_size, "batch_size")
  levels, c = ta.calibrate(num_levels=num_levels, steps=steps, rho=rho,
                           noise_multiplier=noise_multiplier)
  k = _validate.nonnegative_float(k, "k")
  if sensitivity is None:
    if k < 1:
      raise ValueError(
          f"k={k:g} < 1: the per-step sensitivity C_0 t^(k-1) then decreases and the "
          "smoothness bound behind it does not hold; pass sensitivity= (an explicit schedule "
          "t -> Delta_t) or use k >= 1.")
    if clip_norm is None:
      raise ValueError("pass clip_norm= (C_0; see online_to_batch.difference_clip_bound) or sensitivity=.")
    clip_norm = _validate.positive_float(clip_norm, "clip_norm")
    sensitivity = lambda t: clip_norm * jnp.power(t.astype(float), k - 1.0)  # noqa: E731
    constant = clip_norm if k == 1 else None  # C_0 t^0: planned on the host.
  elif clip_norm is not None:
    raise ValueError("pass clip_norm or sensitivity, not both.")
  else:
    sensitivity = ta.check_schedule(sensitivity, levels, "sensitivity")
    constant = None
  loss, loss_fn = minibatch.check_loss(loss, loss_fn)
  mode = ta.check_mode(mode)
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  exact = _common.exact_noise(unsafe_float_noise, "online_to_batch")
  rho_level = 1.0 / (2.0 * c * c)
  used_c = 0.0 if no_noise else c
  factor = minibatch.sensitivity_factor(neighbouring)
  # The sensitivity of delta_t: the clip bound, x 2 for replace-one.
  if constant is not None:
    leaf_sensitivity = factor * constant
  else:
    leaf_sensitivity = lambda t: factor * jnp.asarray(sensitivity(t))  # noqa: E731

  def init_fn(params):
    return OnlineToBatchState(
        count=jnp.zeros((), jnp.int32),
        beta_sum=jnp.zeros((), _common.float_dtype(params)),
        average=params, play=params,
        learner=learner.init(params),
        tree=ta.tree_init(params, num_levels=levels, key=key, mode=mode),
        accountant=accounting.init_accountant())

  def update_fn(updates, state, params=None, *, batch=None, **extra):
    del updates, extra
    if not isinstance(state, OnlineToBatchState):
      raise TypeError(f"state must be an OnlineToBatchState from init(), got "
                      f"{type(state).__name__}.")
    minibatch.check_batch(batch, glm=loss is not None, batch_size=batch_size,
                          name="online_to_batch")
    t = state.count + 1
    dtype = state.beta_sum.dtype
    tf = t.astype(dtype)
    first = t == 1
    beta = jnp.power(tf, k)
    a_t = jnp.where(first, 0.0, jnp.exp(k * jnp.log1p(-1.0 / tf)))  # ((t-1)/t)^k, 0 at t = 1
    beta_sum = state.beta_sum + beta
    w_t = state.play
    x_prev = state.average
    x_t = jax.tree.map(lambda xp, w: xp + (beta / beta_sum).astype(w.dtype) * (w - xp), x_prev, w_t)
    bound = jnp.asarray(sensitivity(t), dtype) / beta  # the clip bound, normalized: C_0 / t.
    s = minibatch.clipped_sum(x_t, batch, bound=bound, loss=loss, loss_fn=loss_fn,
                              prev_params=x_prev, a=a_t)  # a_1 = 0 masks the gradient at x_0.
    delta = jax.tree.map(lambda v: beta.astype(v.dtype) * v, s)  # per example <= Delta_t
    ghat, tree = ta.tree_step(state.tree, delta, sensitivity=leaf_sensitivity,
                              noise_multiplier=used_c, mode=mode, exact=exact)
    released = jax.tree.map(lambda g: g / (beta.astype(g.dtype) * batch_size),
                            ghat)  # u_t = ghat_t / (beta_t b): post-processing
    if extra_args:
      step, learner_state = learner.update(released, state.learner, w_t, beta=beta, x=x_t)
    else:
      step, learner_state = learner.update(released, state.learner, w_t)
    play = optax.apply_updates(w_t, step)
    if projection is not None:
      play = projection(play)
    node_slack = noise.tv_slack(x_t) if exact and not no_noise else 0.0  # one node's K tau
    accountant = ta.charge_levels(state.accountant, state.tree.step, tree.step, rho_level,
                                  node_slack=node_slack, mode=mode)
    out = jax.tree.map(lambda new, old: new - old, x_t, state.average if params is None else params)
    return out, OnlineToBatchState(
        count=t.astype(jnp.int32), beta_sum=beta_sum, average=x_t, play=play,
        learner=learner_state, tree=tree, accountant=accountant)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)

