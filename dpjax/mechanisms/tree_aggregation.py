"""Binary-tree aggregation for private prefix sums, with floating-point-safe node releases.

A stream of per-step inputs ``delta_1, delta_2, ...`` (each the clipped,
summed contribution of one step's examples) is released as noisy prefix sums
``ghat_t`` of ``g_t = delta_1 + ... + delta_t`` by the binary mechanism (Dwork,
Naor, Pitassi & Rothblum 2010, "Differential privacy under continual
observation", STOC; Chan, Shi & Song 2011, "Private and continual release of
statistics", ACM TISSEC). Node ``i`` is the dyadic interval ``(i - 2^h, i]``
of leaves, ``h = ctz(i)`` its height, and ``S_i`` the exact sum of its leaves'
inputs. When the node completes, at ``t = i``, it is **released** once through
the floating-point-safe Gaussian mechanism of :mod:`dpjax.mechanisms.noise`:

``N_i = noise.add_gaussian(key_i, S_i, sensitivity=D_i, noise_std=c D_i)``,

and every later ``t`` with ``i in I_t`` reuses that released value (fresh
noise per step would not be private at this scale). The released prefix sum
is the float sum of released values only, most significant node first:

``ghat_t = sum_{i in I_t} N_i``,

``I_t`` being the nonzero prefix sums of ``t``'s binary expansion (``I_7 =
{4, 6, 7}``), one node per set bit: ``I_t = {(t >> h) << h : bit h of t is
1}`` (:func:`prefix_nodes`). ``ghat_t`` is post-processing of the ``N_i``; the
exact sums ``S_i`` are kept in the state to form the next node sums (the
binary mechanism's partial sums ``alpha_h``: the node of height ``h* =
ctz(t)`` completing at ``t`` has ``S = delta_t + S_{t-1} + S_{t-2} + S_{t-4}
+ ...``, the sums of the ``h*`` lower nodes it merges) and are never released.
Computing ``g_t + noise`` outside the noise module would not be
floating-point safe (Mironov 2012, "On significance of the least significant
bits for differential privacy", CCS); releasing every node through it is.

Privacy. One example enters one step's input ``delta_s`` only, and changing
it (by the caller's neighbouring relation, e.g.
``dpjax.problem.minibatch.NEIGHBOURING``) moves ``delta_s`` by at most ``Delta_s`` in
L2, the sensitivity the caller passes (its clip bound, or twice it for
replace-one neighbours). Leaf ``s`` lies in at most one node per level. The
node's sensitivity is ``D_i = max(Delta_a, Delta_b)`` over its first and last
leaf ``a, b`` (the largest sensitivity inside it for any monotone schedule,
:func:`check_schedule`), so the release of ``S_i`` is the Gaussian mechanism
with sensitivity ``D_i >= Delta_s`` and std ``c D_i``: ``1 / (2 c^2)`` zCDP
(Bun & Steinke 2016), with every guarantee of the continuous Gaussian
mechanism carried over by :func:`dpjax.mechanisms.noise.add_gaussian`. A node that does
not contain ``s`` has the same exact sum on both neighbours given the earlier
releases (its inputs may depend on them: adaptive composition). So the
released sequence, and everything computed from it, is ``depth / (2
c^2)``-zCDP with ``depth = floor(log2 T) + 1`` the levels in use after ``T``
steps. That is dp-accounting's ``SingleEpochTreeAggregationDpEvent(c, T)``
and jax_privacy's "largest column norm" of the tree strategy.
:func:`tree_prefix_sum` charges ``1 / (2 c^2)`` at ``t = 1, 2, 4, 8, ...``,
when a new level opens, so its accountant always holds the cost of what it
released. Each node release is within total variation
:func:`dpjax.mechanisms.noise.tv_slack` (``K tau`` for ``K`` coordinates) of the exact
Gaussian mechanism; the slack of every node released in a step is charged
with it (:func:`charge_levels`).

Modes (:data:`MODES`):

* ``"buffered"``: the state keeps, per level, the exact sum and the released
  value of the last completed node of that height, ``2 x [L, *leaf_shape]``
  per leaf, ``O(d L)`` memory; one node release (one noise draw) per step.
* ``"honaker"``: every dyadic interval (all ``2T - 1`` nodes of the full
  tree) is released, ``h* + 1`` node releases at step ``t`` (amortized 2),
  and each level keeps the minimum-variance unbiased estimate of its node
  from its own subtree's released measurements (Honaker 2015, "Efficient use
  of differentially private binary trees", TPDP), built online with
  inverse-variance weights (public: from the nominal stds), valid for any
  per-node ``sigma``. With constant ``sigma`` the variance at height ``h`` is
  ``sigma^2 2^h / (2^{h+1} - 1)``: ``1, 2/3, 4/7, 8/15, ...``. Same privacy
  (each leaf is in ``L`` released nodes; the estimate is post-processing of
  released values), lower variance on high nodes.

There is no ``"regenerate"`` mode: it recomputed node noise from
``fold_in(key, i)`` to keep ``O(d)`` memory, which needs only the noise; a
floating-point-safe release needs the node's exact sum ``S_i``, which would
have to be stored anyway, so that mode cannot be made safe
(:func:`check_mode` says so).

Everything has fixed shapes and runs under ``jit``, ``vmap`` and
``lax.scan``; a fixed key gives bitwise the same releases. Steps past the
capacity are refused: eagerly with ``ValueError``, under tracing with a NaN
output and ``state.overflow`` set.

Examples:
  >>> import jax.numpy as jnp
  >>> from dpjax.mechanisms import tree_aggregation as ta
  >>> ta.prefix_nodes(7), ta.prefix_nodes(8)
  ([4, 6, 7], [8])
  >>> state = ta.tree_init(jnp.zeros(3), num_levels=4, key=0)
  >>> for _ in range(3):
  ...   ghat, state = ta.tree_step(state, jnp.ones(3), sensitivity=1.0, noise_multiplier=1.0)
  >>> int(state.step), float(ta.prefix_variance(state))  # ghat_3 = N_2 + N_3
  (3, 2.0)
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _deprecations
from dpjax import _validate
from dpjax import accounting
from dpjax import _common
from dpjax.mechanisms import noise

__all__ = [
    "MODES",
    "MAX_LEVELS",
    "TreeState",
    "calibrate",
    "capacity",
    "charge_levels",
    "check_mode",
    "check_schedule",
    "noise_multiplier_for",
    "nodes_released",
    "num_levels_for",
    "prefix_nodes",
    "prefix_noise_scale",
    "prefix_variance",
    "tree_init",
    "tree_rho",
    "tree_step",
]

MODES = ("buffered", "honaker")
MAX_LEVELS = 30  # leaf indices are int32: capacity 2^30 - 1 steps.

# A per-leaf sensitivity: a number, or a function of the 1-based leaf index
# (int32 array) returning Delta_t (an array of the same shape).
Sensitivity = Union[float, Callable[[jax.Array], jax.Array]]


class TreeState(NamedTuple):
  """State of the tree: fixed shapes, ``O(d L)`` memory.

  Level ``h`` describes the last completed node of height ``h``; for every set
  bit ``h`` of ``step`` that node is the one of ``I_step`` at level ``h``.
  ``exact`` and ``released`` are pytrees shaped like the leaves with a
  leading axis of ``num_levels``.
  """

  step: jax.Array  # shape=(), int32: leaves absorbed; the next step is t = step + 1.
  exact: Any  # [L, *leaf]: level h, the node's exact input sum S_i (never released).
  released: Any  # [L, *leaf]: level h, its released value N_i (honaker: its estimate).
  variance: jax.Array  # shape=(L,): nominal per-coordinate variance of released - exact.
  key: jax.Array  # shape=(), typed PRNG key: node i is released with fold_in(key, i).
  overflow: jax.Array  # shape=(), bool: a step past capacity 2^L - 1 was refused.


def num_levels_for(steps: int) -> int:
  """``floor(log2 steps) + 1``: the levels a tree of ``steps`` leaves uses (``steps >= 1``).

  Examples:
    >>> from dpjax.mechanisms import tree_aggregation as ta
    >>> ta.num_levels_for(1), ta.num_levels_for(7), ta.num_levels_for(8)
    (1, 3, 4)
  """
  steps = _validate.positive_int(steps, "steps")
  return int(steps).bit_length()


def capacity(num_levels: int) -> int:
  """``2^L - 1``: the most leaves a tree of ``L`` levels holds."""
  return 2 ** _check_levels(num_levels) - 1


def prefix_nodes(t: int) -> list[int]:
  """``I_t``: the nonzero prefix sums of ``t``'s binary expansion, MSB first.

  The reference definition, used by the tests; the traced code uses the bit
  form ``{(t >> h) << h : bit h of t is 1}``.

  Examples:
    >>> from dpjax.mechanisms import tree_aggregation as ta
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
    >>> from dpjax.mechanisms import tree_aggregation as ta
    >>> ta.tree_rho(2.0, 7), ta.tree_rho(2.0, 8)
    (0.375, 0.5)
  """
  c = _validate.positive_float(noise_multiplier, "noise_multiplier")
  return num_levels_for(steps) / (2.0 * c * c)


def noise_multiplier_for(rho: float, num_levels: int) -> float:
  """``c = sqrt(L / (2 rho))``: a full tree of ``L`` levels then costs exactly ``rho``.

  Examples:
    >>> from dpjax.mechanisms import tree_aggregation as ta
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


def prefix_noise_scale(*, steps: int, rho: Any, sensitivity: float, dim: int = 1) -> Any:
  """``c Delta sqrt(dim L)``: the noise scale of a prefix sum at the tree's full depth.

  A prefix sum of a tree of ``L = num_levels_for(steps)`` levels adds up at
  most ``L`` released nodes, each with Gaussian noise of std ``c Delta`` per
  coordinate (``c`` from :func:`calibrate` with the full tree's ``rho``), so
  its noise has std at most ``c Delta sqrt(L)`` per coordinate and an
  expected squared norm of at most ``(c Delta)^2 dim L`` over ``dim``
  coordinates. Defaults that need the noise of a tree release (a step size,
  a betting scale) ask for it here instead of deriving it again. ``rho`` may
  be traced.

  Examples:
    >>> from dpjax.mechanisms import tree_aggregation as ta
    >>> round(ta.prefix_noise_scale(steps=7, rho=1.5, sensitivity=2.0), 6)  # c = 1, L = 3
    3.464102
  """
  levels, c = calibrate(num_levels=None, steps=steps, rho=rho, noise_multiplier=None)
  return c * sensitivity * math.sqrt(dim * levels)


SCHEDULE_CHECK_STEPS = 1 << 16  # steps a schedule is checked on at construction.


def check_schedule(schedule: Callable[[jax.Array], jax.Array], num_levels: int,
                   name: str) -> Callable[[jax.Array], jax.Array]:
  """A per-step sensitivity schedule must be monotone in ``t`` (and > 0).

  Node noise uses the schedule's larger value at the node's first and last
  leaf, which is the largest inside the node only for a monotone schedule
  (module docstring). Checked eagerly on ``t = 1 ..
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


def check_mode(mode: Any) -> str:
  """``mode`` if it is one of :data:`MODES`; a ``ValueError`` naming the fix otherwise.

  ``"regenerate"`` (the former ``O(d)``-memory mode) is refused with the reason:
  it regenerated node noise from the key, but a floating-point-safe node
  release needs the node's exact input sum, which must be stored (module
  docstring); ``"buffered"`` is the replacement.
  """
  if mode == "regenerate":
    raise ValueError(
        "mode='regenerate' was removed: it regenerated node noise from fold_in(key, node) to "
        "keep O(d) memory, but a floating-point-safe release (dpjax.mechanisms.noise) rounds the node's "
        "exact sum to a grid and needs that sum, which must then be stored; use "
        "mode='buffered' (O(d L) memory, the same privacy and variance).")
  return _validate.choice(mode, "mode", MODES)


def tree_init(leaf_like: Any, *, num_levels: int, key: int | jax.Array,
              mode: str = "buffered") -> TreeState:
  """A fresh tree for inputs shaped like ``leaf_like`` (an array or a pytree of arrays).

  Args:
    leaf_like: the shape and dtype of one step's input (values unused).
    num_levels: ``L``; the capacity is ``2^L - 1`` steps and the full-tree
      cost ``L / (2 c^2)`` (use :func:`num_levels_for` of the horizon).
    key: int seed or typed PRNG key; a restart needs a new key.
    mode: one of :data:`MODES` (both build the same state; pass the same mode
      to :func:`tree_step`).

  Raises:
    ValueError, TypeError: bad ``num_levels``, ``key``, ``mode`` or leaves.
  """
  num_levels = _check_levels(num_levels)
  check_mode(mode)
  key = _common.canonical_key(key)
  leaves = _check_leaves(leaf_like)
  buffer = lambda: jax.tree.map(  # noqa: E731
      lambda a: jnp.zeros((num_levels, *jnp.shape(a)), jnp.asarray(a).dtype), leaf_like)
  dtype = jnp.result_type(*[leaf.dtype for leaf in leaves])
  return TreeState(step=jnp.zeros((), jnp.int32), exact=buffer(), released=buffer(),
                   variance=jnp.zeros((num_levels,), dtype), key=key,
                   overflow=jnp.zeros((), bool))


def _num_levels(state: TreeState) -> int:
  return int(state.variance.shape[-1])


def _check_sensitivity(sensitivity: Any) -> Sensitivity:
  if callable(sensitivity):
    return sensitivity
  return _validate.positive_float(sensitivity, "sensitivity")


def _check_multiplier(noise_multiplier: Any) -> Any:
  if _validate.is_concrete(noise_multiplier):
    return _validate.nonnegative_float(noise_multiplier, "noise_multiplier")
  return noise_multiplier  # a traced scalar (vmap over privacy levels).


def _leaf_sensitivity(sensitivity: Sensitivity, idx: jax.Array, dtype: Any) -> jax.Array:
  """``Delta`` at the 1-based leaf indices ``idx`` (int32 array) of a schedule."""
  out = jnp.asarray(sensitivity(idx), dtype)
  if out.shape != idx.shape:
    raise ValueError(f"sensitivity(t) must return an array shaped like t {idx.shape}, got "
                     f"{out.shape}.")
  return out


def _node_sensitivity(sensitivity: Sensitivity, end: jax.Array, height: Any, dtype: Any) -> Any:
  """``D_i = max(Delta(a), Delta(b))``: the node's first leaf ``a = end - 2^h + 1`` and last ``b = end``.

  A constant sensitivity stays a Python float, so that the release is planned
  on the host (:func:`dpjax.mechanisms.noise.plan`).
  """
  if not callable(sensitivity):
    return sensitivity
  first = end - jnp.left_shift(jnp.int32(1), height) + 1
  return jnp.maximum(_leaf_sensitivity(sensitivity, jnp.maximum(first, 1), dtype),
                     _leaf_sensitivity(sensitivity, jnp.maximum(end, 1), dtype))


def _ctz(t: jax.Array) -> jax.Array:
  """Trailing zero bits of ``t >= 1`` (int32): ``popcount((t & -t) - 1)``."""
  return jax.lax.population_count(jnp.bitwise_and(t, -t) - 1)


def _row(buf: Any, h: Any) -> Any:
  return jax.tree.map(lambda b: b[h], buf)


def _add(a: Any, b: Any) -> Any:
  return jax.tree.map(jnp.add, a, b)


def _check_input(delta: Any, state: TreeState) -> Any:
  """``delta`` shaped like the state's leaves (same structure and shapes), in their dtypes."""
  like = jax.tree.map(lambda b: jax.ShapeDtypeStruct(np.shape(b)[1:], b.dtype), state.exact)
  if jax.tree.structure(delta) != jax.tree.structure(like):
    raise ValueError(
        f"delta must have the structure of the tree's leaves {jax.tree.structure(like)}, got "
        f"{jax.tree.structure(delta)}; pass one step's input shaped like tree_init's leaf_like.")
  out = []
  for d, l in zip(jax.tree.leaves(delta), jax.tree.leaves(like)):
    if np.shape(d) != l.shape:
      raise ValueError(f"delta has a leaf of shape {np.shape(d)} where the tree holds {l.shape}; "
                       "pass one step's input shaped like tree_init's leaf_like.")
    if not jnp.issubdtype(jnp.result_type(d), jnp.floating):
      raise TypeError(f"delta must be floating, got dtype {jnp.result_type(d)}; cast it with "
                      ".astype(jnp.float32).")
    out.append(jnp.asarray(d, l.dtype))
  return jax.tree.unflatten(jax.tree.structure(like), out)


def tree_step(state: TreeState, delta: Any, *, sensitivity: Sensitivity,
              noise_multiplier: Any, mode: str = "buffered",
              exact: bool = True) -> tuple[Any, TreeState]:
  """Absorbs leaf ``t = state.step + 1``, releases the node(s) ending at ``t``, returns ``ghat_t``.

  The node of height ``h* = ctz(t)`` ending at ``t`` (buffered; honaker: every
  node of height ``0..h*`` ending at ``t``) gets its exact sum from ``delta``
  and the exact sums of the lower nodes it merges, and is released through
  :func:`dpjax.mechanisms.noise.add_gaussian` with sensitivity ``D_i`` (the larger
  ``sensitivity`` at its first and last leaf) and std ``noise_multiplier *
  D_i``, key ``fold_in(state.key, t)``. The output is the float sum of the
  released values of ``I_t``, most significant first: post-processing.

  Args:
    state: from :func:`tree_init` (or a previous step).
    delta: leaf ``t``'s input: a pytree shaped like ``tree_init``'s ``leaf_like``.
    sensitivity: ``Delta_t > 0``, the L2 bound on what one example changes in
      ``delta_t``: a number, or a function of the 1-based leaf index (int32
      array, traced) returning an array of its shape, monotone in ``t``
      (:func:`check_schedule`; the callers check it once at construction).
    noise_multiplier: ``c >= 0`` (a number or a possibly traced scalar); ``0``
      releases the exact sums (NOT private; for tests).
    mode: the mode the state was built with (:data:`MODES`; the two states look
      alike, so a mismatch cannot be detected).
    exact: ``False`` releases with float noise (``dpjax.mechanisms.noise``'s opt-out):
      NOT private in floating point, for measuring what exactness costs.

  Returns:
    ``(ghat_t, new_state)``; ``ghat_t`` is shaped like the leaves. Past the
    capacity (traced) it is NaN, ``new_state.overflow`` is set and nothing
    else changes.

  Raises:
    ValueError, TypeError: eagerly, a step past the capacity ``2^L - 1``, a
      ``delta`` unlike the leaves, a bad ``sensitivity``, ``noise_multiplier`` or
      ``mode``.
  """
  if not isinstance(state, TreeState):
    raise TypeError(f"state must be a TreeState from tree_init(), got {type(state).__name__}.")
  mode = check_mode(mode)
  sensitivity = _check_sensitivity(sensitivity)
  c = _check_multiplier(noise_multiplier)
  exact = _common.check_flag(exact, "exact")
  delta = _check_input(delta, state)
  num_levels = _num_levels(state)
  cap = 2**num_levels - 1
  if _validate.is_concrete(state.step) and int(state.step) >= cap:
    raise ValueError(
        f"tree capacity exceeded: num_levels={num_levels} holds {cap} steps and all are used; "
        "build the tree with more levels (num_levels_for(horizon)) or restart it with a new key."
    )
  ok = state.step < cap
  t = jnp.where(ok, state.step + 1, cap).astype(jnp.int32)
  dtype = state.variance.dtype
  h_star = _ctz(t)
  node_key = jax.random.fold_in(state.key, t)

  def release(key, value, height):
    sens = _node_sensitivity(sensitivity, t, height, dtype)
    std = 0.0 if (isinstance(c, float) and c == 0.0) else c * sens
    out = noise.add_gaussian(key, value, sensitivity=sens, noise_std=std, exact=exact)
    return out, jnp.square(jnp.asarray(std, dtype))

  if mode == "buffered":
    # S = (((delta + S_{t-1}) + S_{t-2}) + S_{t-4}) + ...: the h* lower nodes (a dynamic trip count).
    node_sum = jax.lax.fori_loop(0, h_star, lambda h, acc: _add(acc, _row(state.exact, h)), delta)
    value, var = release(node_key, node_sum, h_star)
  else:  # honaker: release the nodes of heights 0..h* that end at t, bottom-up.

    def build(h, carry):
      s_prev, est_prev, v_prev = carry  # the node of height h-1 ending at t: exact sum, estimate.
      left = jnp.maximum(h - 1, 0)  # its left sibling is the last completed node of height h-1.
      leaf = h == 0
      s = jax.tree.map(lambda d, sp, el: jnp.where(leaf, d, sp + el),
                       delta, s_prev, _row(state.exact, left))
      meas, sigma2 = release(jax.random.fold_in(node_key, h), s, h)
      kids_var = state.variance[left] + v_prev
      # V = (sigma^-2 + (V_l + V_r)^-1)^-1 and w = V / sigma^2, written without
      # dividing by a zero sigma (noise_multiplier = 0 gives the exact sum).
      denom = sigma2 + kids_var
      safe = jnp.where(denom > 0, denom, 1)
      w = jnp.where(denom > 0, kids_var / safe, 1)
      v_combined = jnp.where(denom > 0, sigma2 * kids_var / safe, 0)
      combined = jax.tree.map(
          lambda m, el, er: w.astype(m.dtype) * m + (1 - w).astype(m.dtype) * (el + er),
          meas, _row(state.released, left), est_prev)
      est = jax.tree.map(lambda m, cb: jnp.where(leaf, m, cb), meas, combined)
      return s, est, jnp.where(leaf, sigma2, v_combined)

    zero = jax.tree.map(jnp.zeros_like, delta)
    # h* + 1 releases (amortized 2 per step), a dynamic trip count.
    node_sum, value, var = jax.lax.fori_loop(0, h_star + 1, build,
                                             (zero, zero, jnp.zeros((), dtype)))

  exact_buf = jax.tree.map(lambda b, s: b.at[h_star].set(s), state.exact, node_sum)
  released = jax.tree.map(lambda b, v: b.at[h_star].set(v), state.released, value)
  variance = state.variance.at[h_star].set(var.astype(dtype))
  bits = jnp.bitwise_and(jnp.right_shift(t, jnp.arange(num_levels, dtype=jnp.int32)), 1) == 1

  def add_level(i, acc):  # MSB first: h = L-1, ..., 0; unset bits add an exact zero.
    h = num_levels - 1 - i
    return jax.tree.map(lambda a, b: a + jnp.where(bits[h], b[h], jnp.zeros_like(b[h])),
                        acc, released)

  ghat = jax.lax.fori_loop(0, num_levels, add_level, jax.tree.map(jnp.zeros_like, delta))
  ghat = jax.tree.map(lambda g: jnp.where(ok, g, jnp.nan), ghat)
  new_state = TreeState(
      step=jnp.where(ok, t, state.step).astype(jnp.int32),
      exact=_common.select(ok, exact_buf, state.exact),
      released=_common.select(ok, released, state.released),
      variance=jnp.where(ok, variance, state.variance),
      key=state.key,
      overflow=jnp.logical_or(state.overflow, jnp.logical_not(ok)),
  )
  return ghat, new_state


def prefix_variance(state: TreeState) -> jax.Array:
  """Per-coordinate variance of ``ghat_t - g_t`` for ``t = state.step``: ``sum_{h: bit h} V_h``.

  ``V_h`` is the nominal variance of level ``h``'s released value (``(c
  D_i)^2``; honaker: its estimate's). The std actually added by each release
  is :func:`dpjax.mechanisms.noise.effective_std`, at most a hair larger (the rounding
  to the grid is paid for in noise: ``sigma (1 + sqrt(K) 2^e / D_i)`` for ``K``
  coordinates on the grid ``2^e``, parts in 10^6 to 10^4 for a gradient).
  """
  levels = jnp.arange(_num_levels(state), dtype=jnp.int32)
  bits = jnp.bitwise_and(jnp.right_shift(state.step, levels), 1).astype(state.variance.dtype)
  return jnp.sum(bits * state.variance)


def nodes_released(step_before: jax.Array, step_after: jax.Array, *,
                   mode: str = "buffered") -> jax.Array:
  """The number of node releases a step made: 1 (buffered) or ``ctz(t) + 1`` (honaker); 0 if refused.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.mechanisms import tree_aggregation as ta
    >>> int(ta.nodes_released(jnp.int32(7), jnp.int32(8), mode="honaker"))  # heights 0..3 end at 8
    4
  """
  mode = check_mode(mode)
  step_before = jnp.asarray(step_before, jnp.int32)
  t = jnp.asarray(step_after, jnp.int32)
  stepped = t != step_before
  count = jnp.ones((), jnp.int32) if mode == "buffered" else _ctz(jnp.maximum(t, 1)) + 1
  return jnp.where(stepped, count, 0)


def _round_up(x: float, dtype: Any) -> np.ndarray:
  w = np.asarray(x, np.float64).astype(dtype)
  return np.nextafter(w, np.asarray(np.inf, dtype)) if float(w) < x else w


def charge_levels(accountant: accounting.AccountantState, step_before: jax.Array,
                  step_after: jax.Array, rho_level: Any, *, node_slack: float = 0.0,
                  mode: str = "buffered") -> accounting.AccountantState:
  """Charges ``rho_level = 1 / (2 c^2)`` when a step opened a level, and the TV slack of its releases.

  After ``T`` steps the zCDP total is ``(floor(log2 T) + 1) rho_level``, the
  cost of the released prefix sums (module docstring). ``node_slack`` is
  :func:`dpjax.mechanisms.noise.tv_slack` of one node (``K tau`` for ``K`` coordinates;
  0 for an opt-out or noise-free tree); the step's slack is that times
  :func:`nodes_released`, rounded up. A refused step (``step_after ==
  step_before``) charges nothing.
  """
  t = step_after
  opens = jnp.logical_and(t != step_before, jnp.bitwise_and(t, t - 1) == 0)
  accountant = _common.select(opens, accounting.charge(accountant, rho_level), accountant)
  node_slack = _validate.nonnegative_float(node_slack, "node_slack")
  if node_slack == 0.0:
    return accountant
  dtype = np.dtype(accountant.truncation.dtype)
  count = nodes_released(step_before, step_after, mode=mode)
  slack = count.astype(dtype) * jnp.asarray(_round_up(node_slack, dtype))
  # count * slack is exact for count <= 1; above, one rounding: round it up.
  slack = jnp.where(count > 1, jnp.nextafter(slack, jnp.asarray(jnp.inf, dtype)), slack)
  return accounting.charge(accountant, 0.0, slack=slack)


# The transform built on this mechanism moved to the transforms layer.
__getattr__ = _deprecations.moved_attributes(__name__, {
    "TreeAggregationState": "dpjax.transforms",
    "tree_prefix_sum": "dpjax.transforms",
})
