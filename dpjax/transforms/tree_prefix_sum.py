"""The binary mechanism as an optax transform: private prefix sums of a stream of inputs.

Each step's input is a clipped sum; the transform returns the sum of the
released tree nodes that cover steps ``1..t`` (Dwork, Naor, Pitassi &
Rothblum 2010; Chan, Shi & Song 2011), each node released once through
:mod:`dpjax.mechanisms.noise`, and charges the accountant in its state for
the levels released so far (:mod:`dpjax.mechanisms.tree_aggregation`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.mechanisms import tree_aggregation as ta

__all__ = ["TreeAggregationState", "tree_prefix_sum"]


class TreeAggregationState(NamedTuple):
  """State of :func:`tree_prefix_sum`.

  ``optax.tree.get(state, "rho")`` returns the accountant's ``rho``.
  """

  tree: ta.TreeState  # the node sums and their releases.
  accountant: accounting.AccountantState  # rho-zCDP and TV slack charged for the releases so far.
  noise_multiplier: jax.Array  # shape=(): c, node std / node sensitivity.


def tree_prefix_sum(
    *,
    num_levels: int | None = None,
    steps: int | None = None,
    rho: float | jax.Array | None = None,
    noise_multiplier: float | jax.Array | None = None,
    sensitivity: float | Callable[[jax.Array], jax.Array] = 1.0,
    key: int | jax.Array,
    mode: str = "buffered",
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Maps each step's clipped, summed input ``delta_t`` to its private prefix sum ``ghat_t``.

  ``update(delta_t, state)`` returns ``ghat_t``, the float sum of the released
  nodes of ``I_t`` (the binary mechanism of Dwork, Naor, Pitassi & Rothblum
  2010 and Chan, Shi & Song 2011; the analogue of TF Privacy's
  ``TreeCumulativeSumQuery``), an estimate of ``delta_1 + ... + delta_t``
  with noise variance :func:`dpjax.mechanisms.tree_aggregation.prefix_variance`. The caller bounds each step's
  input: ``sensitivity`` is the L2 norm bound ``Delta_t`` of what one example
  can change in ``delta_t`` (e.g. the per-example clip norm ``C_0 t^(k-1)``,
  divided by the batch size when the input is a mean), a number or a
  function of the 1-based step (int32 array in, array out). A node is
  released with sensitivity ``max Delta`` over its leaves and std ``c``
  times that.

  Budget: ``noise_multiplier = c`` directly, or ``rho`` for the whole
  capacity (``c = sqrt(L / (2 rho))``, so a full tree costs ``rho``). The
  accountant is charged ``1 / (2 c^2)`` at steps 1, 2, 4, 8, ...: after ``T``
  steps it holds ``(floor(log2 T) + 1) / (2 c^2)``, what the released prefix
  sums cost (module docstring; = dp-accounting's single-epoch tree event),
  and, at every step, the TV slack of the nodes it released.

  Args:
    num_levels: ``L``, capacity ``2^L - 1`` steps; or
    steps: the horizon ``T`` (``L = num_levels_for(T)``). Exactly one.
    rho: total zCDP budget of a full tree; or
    noise_multiplier: ``c`` (> 0). Exactly one. Either may be a traced scalar.
    sensitivity: ``Delta_t``, > 0 (a number, or a function of the step that
      is monotone in ``t``: :func:`dpjax.mechanisms.tree_aggregation.check_schedule`).
    key: int seed or typed PRNG key.
    mode: one of :data:`dpjax.mechanisms.tree_aggregation.MODES`.
    disable_noise_for_testing: no noise (NOT private); the accountant is still
      charged (no TV slack). For tests only.
    unsafe_float_noise: releases the nodes with float noise
      (``jax.random.normal``) instead of :mod:`dpjax.mechanisms.noise`'s exact sampler:
      NOT private in floating point (Mironov 2012); for benchmarks only.
      Issues :class:`dpjax.PrivacyLeakWarning`.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` with a :class:`TreeAggregationState`.
    Past the capacity it raises eagerly (``ValueError``); under ``jit`` the
    output is NaN, nothing is charged and ``state.tree.overflow`` is set.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax import accounting
    >>> from dpjax.transforms import tree_prefix_sum
    >>> tx = tree_prefix_sum(steps=8, rho=0.5, key=0)
    >>> state = tx.init(jnp.zeros(2))
    >>> for _ in range(5):
    ...   ghat, state = tx.update(jnp.ones(2), state)
    >>> int(state.tree.step), round(accounting.spent_rho(state.accountant), 12)  # 3 of 4 levels
    (5, 0.375)
  """
  levels, c = ta.calibrate(num_levels=num_levels, steps=steps, rho=rho,
                        noise_multiplier=noise_multiplier)
  if callable(sensitivity):
    sensitivity = ta.check_schedule(sensitivity, levels, "sensitivity")
  else:
    sensitivity = _validate.positive_float(sensitivity, "sensitivity")
  mode = ta.check_mode(mode)
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  exact = _common.exact_noise(unsafe_float_noise, "tree_prefix_sum")
  rho_level = 1.0 / (2.0 * c * c)  # one level of nodes: each costs a leaf in it <= 1 / (2 c^2).
  used_c = 0.0 if no_noise else c

  def init_fn(params):
    tree = ta.tree_init(params, num_levels=levels, key=key, mode=mode)
    return TreeAggregationState(tree=tree, accountant=accounting.init_accountant(),
                                noise_multiplier=jnp.asarray(c, tree.variance.dtype))

  def update_fn(updates, state, params=None, **extra):
    del params, extra  # extra arguments (e.g. from optax.chain) are accepted and ignored.
    if not isinstance(state, TreeAggregationState):
      raise TypeError(
          f"state must be a TreeAggregationState from init(), got {type(state).__name__}.")
    ghat, tree = ta.tree_step(state.tree, updates, sensitivity=sensitivity,
                           noise_multiplier=used_c, mode=mode, exact=exact)
    node_slack = noise.tv_slack(updates) if exact and not no_noise else 0.0
    accountant = ta.charge_levels(state.accountant, state.tree.step, tree.step, rho_level,
                               node_slack=node_slack, mode=mode)
    return ghat, TreeAggregationState(tree=tree, accountant=accountant,
                                      noise_multiplier=state.noise_multiplier)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
