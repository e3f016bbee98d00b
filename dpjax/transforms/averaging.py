"""Tail averaging of the iterates of any dpjax transform (free post-processing).

``tail_average(inner, steps=T, average="last-half")`` wraps a transform and
keeps, in its state, the mean of the last ``k`` iterates ``w_{T-k+1}, ...,
w_T`` of a ``T``-step run, where ``w_t = params + updates`` after the t-th
update. The inner transform's updates pass through unchanged: the
optimisation goes on from the raw iterate and the average is only read at
the end (:func:`averaged_params`).

Privacy: averaging costs nothing. Each iterate ``w_t`` is already released
by a DP mechanism (the inner transform's noisy update applied to the
previous release), and any function of released values is post-processing
(Bun & Steinke 2016, Lemma 1.8 for zCDP), so the average is as private as
the sequence ``w_1..w_T``. The wrapper charges nothing and leaves the inner
accountant untouched. It only must not see the private data, which it does
not: it reads ``params`` and the (already private) ``updates``.

Averaging the tail of noisy gradient descent cancels part of the noise
around the optimum while discarding the early, biased iterates
(in our runs the mean of the last half of the iterates did best, and the
last quarter was within noise of it; see
``benchmarks/results/privacy_utility_frontier.md``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate
from dpjax import accounting

__all__ = [
    "AVERAGES",
    "TailAverageState",
    "averaged_params",
    "fold_iterate",
    "tail_average",
    "window_size",
]

# The averaging windows: the last ceil(T/2), ceil(T/4) or 1 of T iterates.
AVERAGES = ("none", "last-half", "last-quarter")


class TailAverageState(NamedTuple):
  """State of :func:`tail_average`.

  ``optax.tree.get(state, "average")`` returns ``average`` and
  ``optax.tree.get(state, "rho")`` still finds the inner accountant (the
  wrapper adds no ``rho`` or ``count`` field). The field names are searched
  inside ``average`` too, so a params dict with a key ``"rho"`` or
  ``"average"`` makes those lookups ambiguous (``KeyError``).
  """

  inner_state: Any  # the wrapped transform's state, unchanged.
  num_iterates: jax.Array  # shape=(), int32: updates seen (saturates at the int32 maximum).
  average: Any  # params pytree: the tail mean so far, or the latest iterate before the window.
  average_lo: Any  # params pytree: compensation term, the exact mean is average + average_lo.

  @property
  def accountant(self) -> accounting.AccountantState:
    """The inner transform's accountant (found by name, also inside an ``optax.chain``).

    So code that reads ``state.accountant`` of a dpjax state (e.g.
    ``accounting.spent_rho(state.accountant)``) works on the wrapped state.
    Not a pytree field: flattening and ``optax.tree.get`` are unaffected.
    """
    found = optax.tree.get(self.inner_state, "accountant")
    if found is None:
      raise AttributeError(
          "the wrapped transform has no accountant (it is not a dpjax transform); read "
          "its state from state.inner_state."
      )
    return found


def window_size(steps: int, average: str) -> int:
  """k: how many of the last of ``steps`` iterates ``average`` averages.

  ``ceil(T/2)`` for ``"last-half"``, ``ceil(T/4)`` for ``"last-quarter"`` and
  1 (the final iterate) for ``"none"``.

  Examples:
    >>> from dpjax.transforms.averaging import window_size
    >>> window_size(10, "last-half"), window_size(10, "last-quarter"), window_size(10, "none")
    (5, 3, 1)
  """
  steps = _validate.positive_int(steps, "steps")
  average = _validate.choice(average, "average", AVERAGES)
  divisor = {"none": None, "last-half": 2, "last-quarter": 4}[average]
  return 1 if divisor is None else -(-steps // divisor)


def fold_iterate(average: Any, average_lo: Any, iterate: Any, t: jax.Array, *, steps: int,
                 window: int) -> tuple[Any, Any]:
  """Folds iterate ``w_t`` (``t = 1..T``) into the compensated tail mean.

  The pure step of :func:`tail_average`, for loops that form their iterates
  themselves (``dpjax.fit`` applies its divergence guard first). Before the
  window (the last ``window`` of ``steps`` iterates) the pair holds the
  latest iterate; inside it, the incremental mean ``avg += (w_t - avg) / j``
  with the rounding of each addition kept in ``average_lo`` (TwoSum); after
  ``t = steps`` it is frozen. Start from ``(w_0, zeros_like(w_0))``.

  Args:
    average, average_lo: the running pair (params pytrees).
    iterate: ``w_t``, same structure.
    t: int32 scalar, the 1-based index of ``iterate`` (may be traced).
    steps: T, the run length.
    window: k = :func:`window_size` ``(T, average)``.

  Returns:
    The new ``(average, average_lo)``.
  """
  j = t - (steps - window)  # position in the window; <= 1 before and at its start.
  restart = j <= 1  # before the window: track the latest iterate; at j = 1 start the mean.
  accumulate = jnp.logical_and(j > 1, t <= steps)

  def fold(w, hi, lo):
    inc = ((w - hi) - lo) / jnp.maximum(j, 1).astype(w.dtype)
    new_hi, new_lo = accounting._two_sum(hi, lo + inc)  # pylint: disable=protected-access
    hi_out = jnp.where(restart, w, jnp.where(accumulate, new_hi, hi))
    lo_out = jnp.where(restart, jnp.zeros_like(lo), jnp.where(accumulate, new_lo, lo))
    return hi_out.astype(hi.dtype), lo_out.astype(lo.dtype)

  folded = jax.tree.map(fold, iterate, average, average_lo)
  treedef = jax.tree.structure(average)
  pairs = treedef.flatten_up_to(folded)
  return (treedef.unflatten([p[0] for p in pairs]), treedef.unflatten([p[1] for p in pairs]))


def _check_float_leaves(params: Any) -> None:
  leaves = jax.tree.leaves(params)
  if not leaves:
    raise ValueError("init(params) got an empty pytree; pass the parameters to average.")
  for leaf in leaves:
    dtype = jnp.result_type(leaf)
    if not jnp.issubdtype(dtype, jnp.floating):
      raise TypeError(
          f"tail_average averages float parameters, got a leaf of dtype {dtype}; cast the "
          "params to a float dtype first, e.g. params.astype(numpy.float32)."
      )


def tail_average(
    inner: optax.GradientTransformation,
    *,
    steps: int,
    average: str = "last-half",
) -> optax.GradientTransformationExtraArgs:
  """Wraps ``inner`` to keep the mean of its last iterates (no privacy cost).

  ``update(updates, state, params, **extra_args)`` calls
  ``inner.update(updates, inner_state, params, **extra_args)`` (extra
  arguments such as ``curvature_matrix=`` are forwarded unchanged; a plain
  ``GradientTransformation`` ignores them), returns its updates unchanged,
  and folds the iterate ``w_t = optax.apply_updates(params, updates)`` into
  the running mean. ``params`` is required. Call it exactly as without the
  wrapper and apply the updates as usual; at the end read
  :func:`averaged_params`. Averaging is post-processing of the released
  iterates, so it spends no privacy budget (module docstring).

  Window, for ``T = steps``: ``"last-half"`` averages the last
  ``k = ceil(T/2)`` iterates ``w_{T-k+1..T}``, ``"last-quarter"``
  ``k = ceil(T/4)``, and ``"none"`` ``k = 1`` (the final iterate ``w_T``).
  Before the window, ``average`` holds the latest iterate (the ``init``
  params before any update); inside it, the mean of the iterates of the
  window seen so far; after update T it is frozen. Pass the same ``steps``
  as the inner transform's budget. Updates past ``steps`` follow the inner
  transform (a dpjax transform refuses them: eagerly it raises, traced it
  returns zeros) and are never averaged.

  The mean is exact to about one rounding in the params dtype, even over
  very long windows: it is an incremental mean
  ``avg += (w_j - avg) / j`` carried as a compensated pair
  ``average + average_lo`` (TwoSum), so the float32 rounding of each
  addition is kept rather than lost (an uncompensated running mean, or a
  running sum, drifts by tens of ulps over 10^4 float32 steps).

  Everything runs in-graph: ``jit``, ``vmap`` (e.g. over the inner
  transform's key) and ``lax.scan``. Params may be any pytree of float
  arrays.

  Args:
    inner: the transform to wrap, e.g. :func:`dpjax.transforms.dp_gd` or any
      ``optax.GradientTransformation``.
    steps: the number of updates T of the run (>= 1).
    average: ``"last-half"`` (default), ``"last-quarter"`` or ``"none"``.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose state is a
    :class:`TailAverageState`.

  Raises:
    ValueError, TypeError: eagerly, for a bad ``inner``, ``steps`` or
      ``average``; at ``init`` for non-float params; at ``update`` when
      ``params`` is missing or the state is not a :class:`TailAverageState`.

  Examples:
    >>> import jax, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.problem import glm
    >>> from dpjax.transforms import dp_gd
    >>> from dpjax.transforms.averaging import averaged_params, tail_average
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> tx = tail_average(dp_gd(n=1000, rho=0.5, steps=20, key=0), steps=20)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> @jax.jit
    ... def step(w, state):
    ...   g = glm.logistic_loss_and_grad(w, x, y)[1]
    ...   u, state = tx.update(g, state, w)
    ...   return optax.apply_updates(w, u), state
    >>> for _ in range(20):
    ...   w, state = step(w, state)
    >>> w_bar = averaged_params(state)  # the mean of w_11, ..., w_20
    >>> int(state.num_iterates), round(float(optax.tree.get(state, "rho")), 6)
    (20, 0.5)
    >>> round(accounting.spent_rho(state.inner_state.accountant), 12)  # nothing more spent
    0.5
    >>> bool(glm.logistic_loss(w_bar, x, y) < glm.logistic_loss(0 * w, x, y))
    True
  """
  if not isinstance(inner, optax.GradientTransformation):
    raise TypeError(
        "inner must be an optax.GradientTransformation, e.g. "
        f"dpjax.transforms.dp_gd(...) or optax.sgd(...), got {type(inner).__name__}."
    )
  steps = _validate.positive_int(steps, "steps")
  average = _validate.choice(average, "average", AVERAGES)
  inner = optax.with_extra_args_support(inner)
  window = window_size(steps, average)

  def init_fn(params: Any) -> TailAverageState:
    if params is None:
      raise TypeError("init(params) needs the parameters: a float array or a pytree of them.")
    _check_float_leaves(params)
    return TailAverageState(
        inner_state=inner.init(params),
        num_iterates=jnp.zeros((), jnp.int32),
        average=jax.tree.map(jnp.asarray, params),
        average_lo=jax.tree.map(jnp.zeros_like, params),
    )

  def update_fn(updates, state, params=None, **extra_args):
    if not isinstance(state, TailAverageState):
      raise TypeError(
          f"state must be a TailAverageState from init(), got {type(state).__name__}."
      )
    if params is None:
      raise TypeError(
          "tail_average's update needs params (the current iterate w_{t-1}) to form the "
          "new iterate w_t = params + updates: call tx.update(grads, state, params)."
      )
    out, inner_state = inner.update(updates, state.inner_state, params, **extra_args)
    iterate = optax.apply_updates(params, out)
    t = optax.safe_increment(state.num_iterates)
    average, average_lo = fold_iterate(
        state.average, state.average_lo, iterate, t, steps=steps, window=window
    )
    return out, TailAverageState(inner_state, t, average, average_lo)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def averaged_params(state: Any) -> Any:
  """The tail average kept by :func:`tail_average` (a params pytree).

  After all ``steps`` updates: the mean of the window's iterates. Before the
  window starts it is the latest iterate (the ``init`` params before any
  update); inside the window, the mean of the window's iterates seen so far.
  It is post-processing of released iterates: no privacy cost.

  Args:
    state: a :class:`TailAverageState`, or a state that contains exactly one
      (e.g. that of an ``optax.chain``). Batched states (``vmap``) give
      batched averages.

  Returns:
    The averaged params, same structure and dtypes as the params.

  Raises:
    TypeError: ``state`` holds no :class:`TailAverageState`.
  """
  if not isinstance(state, TailAverageState):
    found = optax.tree.get(state, "TailAverageState")
    if not isinstance(found, TailAverageState):
      raise TypeError(
          "averaged_params needs the state of a tail_average(...) transform (a "
          f"TailAverageState), got {type(state).__name__}; wrap the optimizer with "
          "dpjax.transforms.averaging.tail_average."
      )
    state = found
  return state.average
