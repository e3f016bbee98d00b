"""Binary-tree aggregation noise for private prefix sums (``spec-online-to-batch.md`` sections 1.3, 4).

A stream of per-step inputs ``delta_1, delta_2, ...`` (each the clipped, summed
contribution of one step's examples) is released as its noisy prefix sums
``ghat_t = g_t + gamma_t`` with ``g_t = delta_1 + ... + delta_t``. The noise
``gamma_t = sum_{i in I_t} R_i`` is a sum of **node** noises: node ``i`` is the
dyadic interval ``(i - 2^ctz(i), i]`` of leaves, ``R_i`` is drawn once, when
the node completes at ``t = i``, and is reused by every later ``t`` with ``i in
I_t`` (spec 1.3; pitfall P7: fresh noise per step would not be private at this
scale). ``I_t`` is the set of nonzero prefix sums of ``t``'s binary expansion,
most significant bit first (``I_7 = {4, 6, 7}``); in bit form ``I_t = {(t >>
h) << h : bit h of t is 1}``, one node per level ``h`` (:func:`prefix_nodes`).

Privacy (spec 1.5, [derived]). One example enters one step's input
``delta_s`` only, and changing it (by the caller's neighbouring relation, e.g.
``dpjax.minibatch.NEIGHBOURING``) moves ``delta_s`` by at most ``Delta_s`` in
L2, the sensitivity the caller passes (its clip bound, or twice it for
replace-one neighbours). Leaf ``s`` lies in at most one node per level, ``L =
num_levels`` nodes of a tree with capacity ``2^L - 1`` leaves. Node noise is
``N(0, sigma_node^2 I)`` with ``sigma_node = c * max(Delta_a, Delta_b)`` over
the node's first and last leaf ``a, b`` (the largest sensitivity inside it for
any monotone schedule; pitfall P4). Each node costs a leaf in it ``Delta_s^2 /
(2 sigma_node^2) <= 1 / (2 c^2)`` zCDP (Gaussian mechanism), so the released
sequence, and everything computed from it, is ``depth / (2 c^2)``-zCDP with
``depth = floor(log2 T) + 1`` the levels in use after ``T`` steps (adaptive
composition: a later input may depend on earlier releases). That is
dp-accounting's ``SingleEpochTreeAggregationDpEvent(c, T)`` and jax_privacy's
"largest column norm" of the tree strategy. :func:`tree_prefix_sum` charges
``1 / (2 c^2)`` at ``t = 1, 2, 4, 8, ...``, when a new level opens, so its
accountant always holds the cost of what it released.

Modes (:data:`MODES`):

* ``"buffered"``: the state keeps the open node's noise per level, ``[L,
  *leaf_shape]`` per leaf, ``O(d L)`` memory; one fresh draw per step.
* ``"regenerate"``: no buffer; ``R_i`` is recomputed from ``fold_in(key, i)``
  when needed (``<= L`` draws per step, ``O(d)`` memory). Same key, same
  output as buffered, bit for bit.
* ``"honaker"``: every dyadic interval (all ``2T - 1`` nodes of the full tree)
  is measured, and each level keeps the minimum-variance unbiased estimate of
  its node from its own subtree (Honaker 2015; spec 4.3), built online with
  inverse-variance weights, valid for any per-node ``sigma`` (pitfall P13).
  With constant ``sigma`` the variance at height ``h`` is ``sigma^2 2^h /
  (2^{h+1} - 1)``: ``1, 2/3, 4/7, 8/15, ...``. Same privacy (each leaf is in
  ``L`` measured nodes; the estimate is post-processing), lower variance on
  high nodes.

Everything has fixed shapes and runs under ``jit``, ``vmap`` and ``lax.scan``.
Steps past the capacity are refused: eagerly with ``ValueError``, under
tracing with a NaN output and ``state.overflow`` set.

Examples:
  >>> import jax.numpy as jnp
  >>> from dpjax import tree_aggregation as ta
  >>> ta.prefix_nodes(7), ta.prefix_nodes(8)
  ([4, 6, 7], [8])
  >>> state = ta.tree_init(jnp.zeros(3), num_levels=4, key=0)
  >>> for _ in range(3):
  ...   gamma, state = ta.tree_step(state, noise_std=1.0)
  >>> int(state.step), float(ta.prefix_variance(state))  # gamma_3 = R_2 + R_3
  (3, 2.0)
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate
from dpjax import accounting
from dpjax import _common

__all__ = [
    "MODES",
    "MAX_LEVELS",
    "TreeAggregationState",
    "TreeState",
    "calibrate",
    "capacity",
    "charge_levels",
    "check_schedule",
    "noise_multiplier_for",
    "num_levels_for",
    "prefix_nodes",
    "prefix_variance",
    "tree_init",
    "tree_prefix_sum",
    "tree_rho",
    "tree_step",
]

MODES = ("buffered", "regenerate", "honaker")
MAX_LEVELS = 30  # leaf indices are int32: capacity 2^30 - 1 steps.

# A per-leaf noise std: a number, or a function of the 1-based leaf index
# (int32 array) returning c * Delta_t (array of the same shape).
NoiseStd = Union[float, Callable[[jax.Array], jax.Array]]


class TreeState(NamedTuple):
  """State of the tree noise (spec 4.1): fixed shapes, ``O(d L)`` memory (``O(d)`` regenerate).

  ``noise`` is a pytree shaped like the leaves with a leading axis of
  ``num_levels`` (buffered, honaker: level ``h`` holds the noise, or the
  Honaker estimate's noise, of the last completed node of height ``h``) or of
  size 0 (regenerate: nothing stored, the leaf shapes only).
  """

  step: jax.Array  # shape=(), int32: leaves absorbed; the next step is t = step + 1.
  noise: Any  # pytree of [num_levels or 0, *leaf_shape].
  variance: jax.Array  # shape=(num_levels,): per-coordinate variance of each level's noise.
  key: jax.Array  # shape=(), typed PRNG key: node i's noise uses fold_in(key, i).
  overflow: jax.Array  # shape=(), bool: a step past capacity 2^L - 1 was refused.


def num_levels_for(steps: int) -> int:
  """``floor(log2 steps) + 1``: the levels a tree of ``steps`` leaves uses (``steps >= 1``).

  Examples:
    >>> from dpjax import tree_aggregation as ta
    >>> ta.num_levels_for(1), ta.num_levels_for(7), ta.num_levels_for(8)
    (1, 3, 4)
  """
  steps = _validate.positive_int(steps, "steps")
  return int(steps).bit_length()


def capacity(num_levels: int) -> int:
  """``2^L - 1``: the most leaves a tree of ``L`` levels holds."""
  return 2 ** _check_levels(num_levels) - 1


def prefix_nodes(t: int) -> list[int]:
  """``I_t`` (spec 1.3): the nonzero prefix sums of ``t``'s binary expansion, MSB first.

  The reference definition, used by the tests; the traced code uses the bit
  form ``{(t >> h) << h : bit h of t is 1}``.

  Examples:
    >>> from dpjax import tree_aggregation as ta
    >>> ta.prefix_nodes(5), ta.prefix_nodes(6), ta.prefix_nodes(7)
    ([4, 5], [4, 6], [4, 6, 7])
  """
  t = _validate.positive_int(t, "t")
  out, acc = [], 0
  for h in reversed(range(t.bit_length())):
    if (t >> h) & 1:
      acc += 1 << h
      out.append(acc)
  return out


def tree_rho(noise_multiplier: float, steps: int) -> float:
  """zCDP of a tree after ``steps`` leaves with noise ``c * Delta``: ``depth / (2 c^2)``.

  ``depth = floor(log2 steps) + 1`` (= dp-accounting's ``ceil(log2(steps + 1))``).

  Examples:
    >>> from dpjax import tree_aggregation as ta
    >>> ta.tree_rho(2.0, 7), ta.tree_rho(2.0, 8)
    (0.375, 0.5)
  """
  c = _validate.positive_float(noise_multiplier, "noise_multiplier")
  return num_levels_for(steps) / (2.0 * c * c)


def noise_multiplier_for(rho: float, num_levels: int) -> float:
  """``c = sqrt(L / (2 rho))``: a full tree of ``L`` levels then costs exactly ``rho``.

  Examples:
    >>> from dpjax import tree_aggregation as ta
    >>> ta.noise_multiplier_for(0.5, 4)
    2.0
  """
  rho = _validate.positive_float(rho, "rho")
  return math.sqrt(_check_levels(num_levels) / (2.0 * rho))


def calibrate(*, num_levels: int | None, steps: int | None, rho: Any,
              noise_multiplier: Any) -> tuple[int, Any]:
  """``(L, c)`` of a tree from exactly one of ``num_levels``/``steps`` and one of ``rho``/``c``.

  With ``rho`` (the budget of a full tree), ``c = sqrt(L / (2 rho))``
  (:func:`noise_multiplier_for`; in the graph for a traced ``rho``). Either
  budget may be traced; concrete values are validated eagerly.
  """
  if (num_levels is None) == (steps is None):
    raise ValueError("pass exactly one of num_levels (capacity 2^L - 1) or steps (the horizon T).")
  levels = _check_levels(num_levels if steps is None else num_levels_for(steps))
  if (rho is None) == (noise_multiplier is None):
    raise ValueError("pass exactly one of rho (the budget of a full tree) or noise_multiplier.")
  if rho is not None:
    rho = _common.budget_value(rho, "rho")
    c = (noise_multiplier_for(rho, levels) if _validate.is_concrete(rho)
         else jnp.sqrt(levels / (2.0 * rho)))
  else:
    c = (_validate.positive_float(noise_multiplier, "noise_multiplier")
         if _validate.is_concrete(noise_multiplier) else noise_multiplier)
  return levels, c


SCHEDULE_CHECK_STEPS = 1 << 16  # steps a schedule is checked on at construction.


def check_schedule(schedule: Callable[[jax.Array], jax.Array], num_levels: int,
                   name: str) -> Callable[[jax.Array], jax.Array]:
  """A per-step sensitivity schedule must be monotone in ``t`` (and > 0).

  Node noise uses the schedule's larger value at the node's first and last
  leaf, which is the largest inside the node only for a monotone schedule
  (module docstring; pitfall P4). Checked eagerly on ``t = 1 ..
  min(capacity, SCHEDULE_CHECK_STEPS)``; a schedule that turns beyond that is
  the caller's error.
  """
  if not callable(schedule):
    raise TypeError(f"{name} must be a number or a callable t -> Delta_t.")
  t = jnp.arange(1, min(2**num_levels - 1, SCHEDULE_CHECK_STEPS) + 1, dtype=jnp.int32)
  v = np.asarray(jax.device_get(schedule(t)), np.float64)
  if v.shape != t.shape or not np.all(np.isfinite(v)) or not np.all(v > 0):
    raise ValueError(f"{name}(t) must return a finite value > 0 for every step t, shaped like t.")
  dv = np.diff(v)
  if not (np.all(dv >= 0) or np.all(dv <= 0)):
    raise ValueError(
        f"{name}(t) must be monotone in t (nondecreasing or nonincreasing): the node noise "
        "takes its value at the node's two ends, which bounds the node only then.")
  return schedule


def _check_levels(num_levels: Any) -> int:
  num_levels = _validate.positive_int(num_levels, "num_levels")
  if num_levels > MAX_LEVELS:
    raise ValueError(
        f"num_levels={num_levels} exceeds {MAX_LEVELS} (leaf indices are int32, capacity "
        f"2^{MAX_LEVELS} - 1 steps); restart the tree (a new tree with a new key) instead."
    )
  return num_levels


def _check_leaves(leaf_like: Any) -> list[jax.Array]:
  leaves = jax.tree.leaves(leaf_like)
  if not leaves:
    raise ValueError("leaf_like must be an array or a pytree with at least one array leaf.")
  out = []
  for leaf in leaves:
    leaf = jnp.asarray(leaf)
    if not jnp.issubdtype(leaf.dtype, jnp.floating):
      raise TypeError(
          f"tree aggregation needs floating leaves, got dtype {leaf.dtype}; cast the inputs "
          "with .astype(jnp.float32).")
    out.append(leaf)
  return out


def tree_init(leaf_like: Any, *, num_levels: int, key: int | jax.Array,
              mode: str = "buffered") -> TreeState:
  """A fresh tree for inputs shaped like ``leaf_like`` (an array or a pytree of arrays).

  Args:
    leaf_like: the shape and dtype of one step's input (values unused).
    num_levels: ``L``; the capacity is ``2^L - 1`` steps and the full-tree
      cost ``L / (2 c^2)`` (use :func:`num_levels_for` of the horizon).
    key: int seed or typed PRNG key; a restart needs a new key.
    mode: one of :data:`MODES`.

  Raises:
    ValueError, TypeError: bad ``num_levels``, ``key``, ``mode`` or leaves.
  """
  num_levels = _check_levels(num_levels)
  mode = _validate.choice(mode, "mode", MODES)
  key = _common.canonical_key(key)
  leaves = _check_leaves(leaf_like)
  rows = 0 if mode == "regenerate" else num_levels
  noise = jax.tree.map(lambda a: jnp.zeros((rows, *jnp.shape(a)), jnp.asarray(a).dtype),
                       leaf_like)
  dtype = jnp.result_type(*[leaf.dtype for leaf in leaves])
  return TreeState(step=jnp.zeros((), jnp.int32), noise=noise,
                   variance=jnp.zeros((num_levels,), dtype), key=key,
                   overflow=jnp.zeros((), bool))


def _num_levels(state: TreeState) -> int:
  return int(state.variance.shape[-1])


def _mode_of(state: TreeState, mode: str | None) -> str:
  rows = {np.shape(a)[0] for a in jax.tree.leaves(state.noise)}
  stored = "regenerate" if rows == {0} else "buffered"
  if mode is None:
    return stored
  mode = _validate.choice(mode, "mode", MODES)
  if (mode == "regenerate") != (stored == "regenerate"):
    raise ValueError(f"mode={mode!r} does not match a state built with mode "
                     f"{'regenerate' if stored == 'regenerate' else 'buffered/honaker'}; "
                     "pass the mode the state was built with.")
  return mode


def _leaf_std(noise_std: NoiseStd, idx: jax.Array, dtype: Any) -> jax.Array:
  """The per-leaf std ``c * Delta`` at 1-based leaf indices ``idx`` (int32 array)."""
  if callable(noise_std):
    out = jnp.asarray(noise_std(idx), dtype)
    if out.shape != idx.shape:
      raise ValueError(f"noise_std(t) must return an array shaped like t {idx.shape}, got "
                       f"{out.shape}.")
    return out
  return jnp.full(idx.shape, noise_std, dtype)


def _check_noise_std(noise_std: Any) -> NoiseStd:
  if callable(noise_std):
    return noise_std
  if _validate.is_concrete(noise_std):
    return _validate.nonnegative_float(noise_std, "noise_std")
  return noise_std  # a traced scalar (vmap over privacy levels).


def _node_std(noise_std: NoiseStd, end: jax.Array, height: jax.Array, dtype: Any) -> jax.Array:
  """``max(s(a), s(b))`` over the node's first leaf ``a = end - 2^h + 1`` and last ``b = end``."""
  first = end - jnp.left_shift(jnp.int32(1), height) + 1
  return jnp.maximum(_leaf_std(noise_std, jnp.maximum(first, 1), dtype),
                     _leaf_std(noise_std, jnp.maximum(end, 1), dtype))


def _draw(key: jax.Array, template: Any) -> Any:
  """Standard normals shaped like ``template``'s leaves (minus the level axis), one key per leaf."""
  leaves, treedef = jax.tree.flatten(template)
  keys = jax.random.split(key, len(leaves))
  out = [jax.random.normal(k, np.shape(a)[1:], a.dtype) for k, a in zip(keys, leaves)]
  return jax.tree.unflatten(treedef, out)


def _sum_levels(bits: jax.Array, level_noise: Callable[[jax.Array], Any], template: Any,
                upper: jax.Array | int | None = None) -> Any:
  """``sum_{h: bit h} level_noise(h)``, added in the order h = 0, 1, ... (bitwise reproducible).

  Buffered and regenerate both sum through here, so that they agree bit for
  bit. ``upper``: levels from it on are known to be 0 (a dynamic trip count,
  so that regenerate draws only up to ``t``'s top bit).
  """
  def one(h, acc):
    z = level_noise(h)
    return jax.tree.map(lambda a, b: a + jnp.where(bits[h], b, jnp.zeros_like(b)), acc, z)

  zero = jax.tree.map(lambda a: jnp.zeros(np.shape(a)[1:], a.dtype), template)
  return jax.lax.fori_loop(0, bits.shape[0] if upper is None else upper, one, zero)


def _ctz(t: jax.Array) -> jax.Array:
  """Trailing zero bits of ``t >= 1`` (int32): ``popcount((t & -t) - 1)``."""
  return jax.lax.population_count(jnp.bitwise_and(t, -t) - 1)


def tree_step(state: TreeState, *, noise_std: NoiseStd,
              mode: str | None = None) -> tuple[Any, TreeState]:
  """Noise ``gamma_t`` of the prefix sum of leaves ``1..t``, ``t = state.step + 1``.

  Args:
    state: from :func:`tree_init` (or a previous step).
    noise_std: per-leaf std ``c * Delta_t``: a number ``>= 0``, a scalar array
      (possibly traced), or a function of the 1-based leaf index (int32 array,
      traced) returning an array of its shape, monotone in ``t``. Node noise
      uses the larger value at the node's first and last leaf, which bounds
      the node only for a monotone schedule (:func:`check_schedule`).
    mode: ``"honaker"`` for a state built with it (buffered and honaker states
      look alike); ``None`` reads buffered / regenerate from the state.

  Returns:
    ``(gamma_t, new_state)``; ``gamma_t`` is shaped like the leaves. Past the
    capacity (traced) it is NaN and ``new_state.overflow`` is set; the step
    count stays.

  Raises:
    ValueError: eagerly, a step past the capacity ``2^L - 1``.
  """
  if not isinstance(state, TreeState):
    raise TypeError(f"state must be a TreeState from tree_init(), got {type(state).__name__}.")
  mode = _mode_of(state, mode)
  noise_std = _check_noise_std(noise_std)
  num_levels = _num_levels(state)
  cap = 2**num_levels - 1
  if _validate.is_concrete(state.step) and int(state.step) >= cap:
    raise ValueError(
        f"tree capacity exceeded: num_levels={num_levels} holds {cap} steps and all are used; "
        "build the tree with more levels (num_levels_for(horizon)) or restart it with a new key."
    )
  ok = state.step < cap
  t = jnp.where(ok, state.step + 1, cap).astype(jnp.int32)
  levels = jnp.arange(num_levels, dtype=jnp.int32)
  bits = jnp.bitwise_and(jnp.right_shift(t, levels), 1).astype(bool)
  dtype = state.variance.dtype
  h_star = _ctz(t)

  if mode == "buffered":
    sigma = _node_std(noise_std, t, h_star, dtype)
    fresh = _draw(jax.random.fold_in(state.key, t), state.noise)
    noise = jax.tree.map(lambda buf, z: buf.at[h_star].set(sigma.astype(z.dtype) * z),
                         state.noise, fresh)
    variance = state.variance.at[h_star].set(sigma * sigma)
    gamma = _sum_levels(bits, lambda h: jax.tree.map(lambda buf: buf[h], noise), noise)
  elif mode == "regenerate":
    ends = jnp.left_shift(jnp.right_shift(t, levels), levels)  # e_h; node e_h has height h if bit h.
    sigmas = jnp.where(bits, _node_std(noise_std, ends, levels, dtype), 0)

    def regenerated(h):  # R_{e_h}, drawn exactly as the buffered mode drew it at step e_h.
      z = _draw(jax.random.fold_in(state.key, ends[h]), state.noise)
      return jax.tree.map(lambda b: sigmas[h].astype(b.dtype) * b, z)

    top = 32 - jax.lax.clz(t)  # floor(log2 t) + 1: the levels above are 0 bits.
    gamma = _sum_levels(bits, regenerated, state.noise, top)
    noise = state.noise
    variance = jnp.where(bits, sigmas * sigmas, state.variance)
  else:  # honaker: build the nodes of heights 0..h* that end at t, bottom-up.
    node_key = jax.random.fold_in(state.key, t)

    def build(h, carry):
      eta, var = carry  # the chain's estimate noise / variance (the node of height h-1 ending at t).
      sigma = _node_std(noise_std, t, h, dtype)
      z = _draw(jax.random.fold_in(node_key, h), state.noise)
      meas = jax.tree.map(lambda b: sigma.astype(b.dtype) * b, z)
      left_eta = jax.tree.map(lambda buf: buf[jnp.maximum(h - 1, 0)], state.noise)
      left_var = state.variance[jnp.maximum(h - 1, 0)]
      kids_var = left_var + var
      # V = (sigma^-2 + (V_l + V_r)^-1)^-1 and w = V / sigma^2, written without
      # dividing by a zero sigma (noise_std = 0 gives an exact zero estimate).
      denom = sigma * sigma + kids_var
      safe = jnp.where(denom > 0, denom, 1)
      w = jnp.where(denom > 0, kids_var / safe, 1)
      v_combined = jnp.where(denom > 0, sigma * sigma * kids_var / safe, 0)
      combined = jax.tree.map(
          lambda m, le, e: w.astype(m.dtype) * m + (1 - w).astype(m.dtype) * (le + e),
          meas, left_eta, eta)
      leaf = h == 0
      new_eta = jax.tree.map(lambda m, c: jnp.where(leaf, m, c), meas, combined)
      return new_eta, jnp.where(leaf, sigma * sigma, v_combined)

    zero = jax.tree.map(lambda a: jnp.zeros(np.shape(a)[1:], a.dtype), state.noise)
    # h* + 1 draws (amortized 2 per step), a dynamic trip count.
    eta, var = jax.lax.fori_loop(0, h_star + 1, build, (zero, jnp.zeros((), dtype)))
    noise = jax.tree.map(lambda buf, e: buf.at[h_star].set(e), state.noise, eta)
    variance = state.variance.at[h_star].set(var)
    gamma = _sum_levels(bits, lambda h: jax.tree.map(lambda buf: buf[h], noise), noise)

  gamma = jax.tree.map(lambda g: jnp.where(ok, g, jnp.nan), gamma)
  new_state = TreeState(
      step=jnp.where(ok, t, state.step).astype(jnp.int32),
      noise=_common.select(ok, noise, state.noise),
      variance=jnp.where(ok, variance, state.variance),
      key=state.key,
      overflow=jnp.logical_or(state.overflow, jnp.logical_not(ok)),
  )
  return gamma, new_state


def prefix_variance(state: TreeState) -> jax.Array:
  """Per-coordinate variance of the last ``gamma_t`` (``t = state.step``): ``sum_{h: bit h} V_h``."""
  levels = jnp.arange(_num_levels(state), dtype=jnp.int32)
  bits = jnp.bitwise_and(jnp.right_shift(state.step, levels), 1).astype(state.variance.dtype)
  return jnp.sum(bits * state.variance)


def charge_levels(accountant: accounting.AccountantState, step_before: jax.Array,
                  step_after: jax.Array, rho_level: Any) -> accounting.AccountantState:
  """Charges ``rho_level = 1 / (2 c^2)`` when a step opened a new level (``t = 1, 2, 4, ...``).

  After ``T`` steps the total is ``(floor(log2 T) + 1) rho_level``, the cost of
  the released prefix sums (module docstring). A refused step (``step_after ==
  step_before``) charges nothing.
  """
  t = step_after
  opens = jnp.logical_and(t != step_before, jnp.bitwise_and(t, t - 1) == 0)
  return _common.select(opens, accounting.charge(accountant, rho_level), accountant)


class TreeAggregationState(NamedTuple):
  """State of :func:`tree_prefix_sum`.

  ``optax.tree.get(state, "rho")`` returns the accountant's ``rho``.
  """

  total: Any  # pytree like the inputs: the exact running sum g_t (never released).
  tree: TreeState  # the node noise.
  accountant: accounting.AccountantState  # rho-zCDP charged for the nodes released so far.
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
) -> optax.GradientTransformationExtraArgs:
  """Maps each step's clipped, summed input ``delta_t`` to its noisy prefix sum ``g_t + gamma_t``.

  ``update(delta_t, state)`` returns ``ghat_t = delta_1 + ... + delta_t +
  gamma_t`` (the analogue of TF Privacy's ``TreeCumulativeSumQuery``; spec
  4.4). The caller bounds each step's input: ``sensitivity`` is the L2 norm
  bound ``Delta_t`` of what one example can change in ``delta_t`` (e.g. the
  per-example clip norm ``C_0 t^(k-1)``, divided by the batch size when the
  input is a mean), a number or a function of the 1-based step (int32 array
  in, array out). Node noise is ``c * max Delta`` over the node's leaves.

  Budget: ``noise_multiplier = c`` directly, or ``rho`` for the whole
  capacity (``c = sqrt(L / (2 rho))``, so a full tree costs ``rho``). The
  accountant is charged ``1 / (2 c^2)`` at steps 1, 2, 4, 8, ...: after ``T``
  steps it holds ``(floor(log2 T) + 1) / (2 c^2)``, what the released prefix
  sums cost (module docstring; = dp-accounting's single-epoch tree event).

  Args:
    num_levels: ``L``, capacity ``2^L - 1`` steps; or
    steps: the horizon ``T`` (``L = num_levels_for(T)``). Exactly one.
    rho: total zCDP budget of a full tree; or
    noise_multiplier: ``c`` (> 0). Exactly one. Either may be a traced scalar.
    sensitivity: ``Delta_t``, > 0 (a number, or a function of the step that
      is monotone in ``t``: :func:`check_schedule`).
    key: int seed or typed PRNG key.
    mode: one of :data:`MODES`.
    disable_noise_for_testing: no noise (NOT private); the accountant is still
      charged. For tests only.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` with a :class:`TreeAggregationState`.
    Past the capacity it raises eagerly (``ValueError``); under ``jit`` the
    output is NaN, nothing is charged and ``state.tree.overflow`` is set.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax import accounting, tree_aggregation as ta
    >>> tx = ta.tree_prefix_sum(steps=8, rho=0.5, key=0)
    >>> state = tx.init(jnp.zeros(2))
    >>> for _ in range(5):
    ...   ghat, state = tx.update(jnp.ones(2), state)
    >>> int(state.tree.step), round(accounting.spent_rho(state.accountant), 12)  # 3 of 4 levels
    (5, 0.375)
  """
  levels, c = calibrate(num_levels=num_levels, steps=steps, rho=rho,
                        noise_multiplier=noise_multiplier)
  if callable(sensitivity):
    sensitivity = check_schedule(sensitivity, levels, "sensitivity")
  else:
    sensitivity = _validate.positive_float(sensitivity, "sensitivity")
  mode = _validate.choice(mode, "mode", MODES)
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  rho_level = 1.0 / (2.0 * c * c)  # one level of nodes: each costs a leaf in it <= 1 / (2 c^2).

  def leaf_std(t):
    delta = sensitivity(t) if callable(sensitivity) else jnp.full(t.shape, sensitivity)
    return (0.0 if no_noise else c) * jnp.asarray(delta)

  def init_fn(params):
    tree = tree_init(params, num_levels=levels, key=key, mode=mode)
    return TreeAggregationState(
        total=jax.tree.map(jnp.zeros_like, params), tree=tree,
        accountant=accounting.init_accountant(),
        noise_multiplier=jnp.asarray(c, tree.variance.dtype))

  def update_fn(updates, state, params=None, **extra):
    del params, extra  # extra arguments (e.g. from optax.chain) are accepted and ignored.
    if not isinstance(state, TreeAggregationState):
      raise TypeError(
          f"state must be a TreeAggregationState from init(), got {type(state).__name__}.")
    gamma, tree = tree_step(state.tree, noise_std=leaf_std, mode=mode)
    ok = jnp.logical_not(tree.overflow)
    total = jax.tree.map(lambda g, d: g + d, state.total, updates)
    total = _common.select(ok, total, state.total)
    out = jax.tree.map(lambda g, z: g + z, total, gamma)
    return out, TreeAggregationState(
        total=total, tree=tree,
        accountant=charge_levels(state.accountant, state.tree.step, tree.step, rho_level),
        noise_multiplier=state.noise_multiplier)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
