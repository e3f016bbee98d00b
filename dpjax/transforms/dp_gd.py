"""Full-batch DP-GD as an optax transform (``spec-newton.md`` section 2.1).

Update (spec 2.1, with ``eta = 1/L1 = 4`` for the logistic loss):

``w_{t+1} = w_t - eta (grad l(w_t) + N(0, s^2 I_d))``,
``s = (L0 / n) / sqrt(2 rho_t)``.

Sensitivity argument: neighbouring datasets differ by adding or removing one
example and ``n`` is public (every average divides by the same ``n``). Each
per-example gradient has norm ``<= L0`` (``grad_norm_bound``; ``L0 = 1`` for
the logistic loss with ``||x|| <= 1``), so the mean gradient has L2
sensitivity ``L0 / n`` and adding ``N(0, s^2 I)`` is ``rho_t``-zCDP (Bun &
Steinke 2016, Prop. 1.6). The learning rate is public post-processing, so the
iterate noise has std ``eta s``. T steps compose to ``T rho_t`` (Lemma 2.3).

This module also holds the small helpers (budget arguments, PRNG keys, the
step-budget gate) that :mod:`dpjax.transforms.dp_newton` reuses.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate
from dpjax import accounting

__all__ = ["DPGDState", "dp_gd"]


class DPGDState(NamedTuple):
  """State of :func:`dp_gd`.

  ``optax.tree.get(state, "rho")`` returns ``accountant.rho`` (the leading
  float word of the running total); :func:`dpjax.accounting.spent_rho` reads
  the exact total.
  """

  count: jax.Array  # shape=(), int32: private steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # rho-zCDP spent so far.
  noise_std: jax.Array  # shape=(), params dtype: std s of the noise added to the mean gradient.
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


# ----------------------------------------------------------------------------
# Helpers shared with dp_newton.
# ----------------------------------------------------------------------------


def _per_step_budget(rho: Any, steps: Any, rho_per_step: Any) -> tuple[float, int | None]:
  """Resolves the two budget forms to ``(rho_per_step, steps or None)``.

  (a) ``rho=<total>, steps=<T>`` gives ``rho / T`` per step, at most T steps;
  (b) ``rho_per_step=<r>``, optionally with ``steps=T`` to enforce a limit.
  """
  if rho is not None and rho_per_step is not None:
    raise ValueError(
        "pass exactly one budget: either rho=<total> with steps=<T>, or "
        "rho_per_step=<r> (optionally with steps); got both rho and rho_per_step."
    )
  if rho is None and rho_per_step is None:
    raise ValueError(
        "no privacy budget given: pass rho=<total> with steps=<T>, or "
        "rho_per_step=<r> (optionally with steps)."
    )
  steps = None if steps is None else _validate.positive_int(steps, "steps")
  if rho is not None:
    rho = _validate.positive_float(rho, "rho")
    if steps is None:
      raise ValueError(
          "rho is a total budget and needs steps=<T> to split it (rho / T per step); "
          "pass steps, or pass rho_per_step instead."
      )
    return rho / steps, steps
  return _validate.positive_float(rho_per_step, "rho_per_step"), steps


def _canonical_key(key: Any) -> jax.Array:
  """An int seed or a typed key (possibly traced) -> a scalar typed key."""
  if key is None or isinstance(key, (bool, np.bool_)):
    raise TypeError(
        f"key must be an int seed or a typed PRNG key from jax.random.key(...), got {key!r}."
    )
  if isinstance(key, (numbers.Integral, np.integer)):
    return jax.random.key(int(key))
  if isinstance(key, (jax.Array, np.ndarray)):
    dtype = key.dtype
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
      if key.shape != ():
        raise ValueError(
            f"key must be a single typed PRNG key (shape ()), got shape {key.shape}; "
            "to build one transform per key, construct it inside jax.vmap."
        )
      return key
    if jnp.issubdtype(dtype, jnp.integer) and np.shape(key) == ():
      return jax.random.key(key)
    raise TypeError(
        f"key must be an int seed or a typed PRNG key from jax.random.key(...), got an "
        f"array of dtype {dtype} and shape {np.shape(key)}; wrap a legacy uint32 key "
        "with jax.random.wrap_key_data(key)."
    )
  raise TypeError(
      "key must be an int seed or a typed PRNG key from jax.random.key(...), got "
      f"{type(key).__name__}."
  )


def _check_flag(value: Any, name: str) -> bool:
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{name} must be True or False, got {type(value).__name__}.")
  return bool(value)


def _check_vector(v: Any, name: str, d: int | None = None) -> jax.Array:
  """Static checks of a (d,) float array (value checks only when concrete)."""
  _validate.as_float_array(v, name, ndim=1)
  if d is not None and np.shape(v)[0] != d:
    raise ValueError(f"{name} has shape {np.shape(v)} but must have shape ({d},).")
  return jnp.asarray(v)


def _check_params(params: Any) -> jax.Array:
  if params is None:
    raise TypeError("init(params) needs the parameters: a 1-D float array of shape (d,).")
  return _check_vector(params, "params")


def _gate(count: jax.Array, steps: int | None, name: str) -> jax.Array:
  """True when this step may run. Raises eagerly past the budget.

  A concrete ``count >= steps`` raises ``ValueError``; a traced one yields a
  traced bool that the caller uses to zero the update and skip the charge.
  """
  if steps is None:
    return jnp.asarray(True)
  if _validate.is_concrete(count) and int(count) >= steps:
    raise ValueError(
        f"privacy budget exhausted: {name} was built for steps={steps} and has already "
        f"taken {int(count)} steps; build a new transform with a fresh budget to go on."
    )
  return count < steps


def _select(ok: jax.Array, new: Any, old: Any) -> Any:
  """``new`` where ``ok`` else ``old``, leaf by leaf (exact: a select, no arithmetic)."""
  return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)


# ----------------------------------------------------------------------------
# DP-GD.
# ----------------------------------------------------------------------------


def dp_gd(
    *,
    n: int,
    rho: float | None = None,
    steps: int | None = None,
    rho_per_step: float | None = None,
    learning_rate: float = 4.0,
    grad_norm_bound: float = 1.0,
    key: int | jax.Array,
    disable_noise_for_testing: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Full-batch DP gradient descent (``spec-newton.md`` section 2.1).

  ``update(g, state)`` takes the MEAN gradient ``g`` over the ``n`` examples and
  returns ``-learning_rate * (g + N(0, s^2 I))`` with
  ``s = accounting.gaussian_sigma(grad_norm_bound / n, rho_per_step)``
  ``= (L0 / n) / sqrt(2 rho_t)``, charging ``rho_t`` to the accountant in the
  state. Sensitivity: add/remove one example with ``n`` public and every
  per-example gradient of norm ``<= grad_norm_bound`` (1 for logistic loss
  with ``||x|| <= 1``), so the mean gradient moves by at most
  ``grad_norm_bound / n``. The noise is drawn from a key split off the state
  key, fresh at every step.

  Budget: exactly one of ``rho`` (total) with ``steps`` (``rho / steps`` per
  step), or ``rho_per_step`` (optionally with ``steps``). With ``steps`` the
  transform refuses step ``steps + 1``: eagerly it raises ``ValueError``;
  under ``jit``/``vmap``/``scan`` it returns zeros, charges nothing and sets
  ``state.budget_exhausted``.

  The privacy parameters must be Python numbers (they are validated eagerly and
  calibrate the noise on the host); the ``key`` may be traced, so the
  transform can be built inside a ``vmap`` over keys. Do not lift these
  arguments into ``optax.inject_hyperparams``.

  Args:
    n: number of examples (public).
    rho: total zCDP budget over ``steps`` steps.
    steps: number of steps T.
    rho_per_step: zCDP budget of one step (instead of ``rho``).
    learning_rate: step size eta > 0; default 4 = 1/L1 for logistic loss.
    grad_norm_bound: L0, the bound on each example's gradient norm.
    key: int seed or typed PRNG key (``jax.random.key``); required.
    disable_noise_for_testing: if True, adds no noise and the output is NOT
      private (the accountant is still charged). For tests only.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose state is a
    :class:`DPGDState`.

  Raises:
    ValueError, TypeError: bad budget, ``n``, ``learning_rate``, bound, key
      or flag (eagerly, at construction).

  Examples:
    >>> import jax, optax
    >>> from dpjax import accounting, data, glm
    >>> from dpjax.transforms import dp_gd
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> tx = dp_gd(n=1000, rho=0.5, steps=20, key=0)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> step = jax.jit(lambda w, s: tx.update(glm.logistic_loss_and_grad(w, x, y)[1], s))
    >>> for _ in range(20):
    ...   u, state = step(w, state)
    ...   w = optax.apply_updates(w, u)
    >>> round(accounting.spent_rho(state.accountant), 12), int(state.count)
    (0.5, 20)
    >>> bool(glm.logistic_loss(w, x, y) < glm.logistic_loss(0 * w, x, y))
    True
  """
  n = _validate.positive_int(n, "n")
  rho_step, steps = _per_step_budget(rho, steps, rho_per_step)
  learning_rate = _validate.positive_float(learning_rate, "learning_rate")
  grad_norm_bound = _validate.positive_float(grad_norm_bound, "grad_norm_bound")
  key = _canonical_key(key)
  no_noise = _check_flag(disable_noise_for_testing, "disable_noise_for_testing")

  # The one place where the DP-GD noise scale is derived (spec 2.1).
  sigma = accounting.gaussian_sigma(grad_norm_bound / n, rho_step)
  used_sigma = 0.0 if no_noise else sigma

  def init_fn(params: jax.Array) -> DPGDState:
    params = _check_params(params)
    return DPGDState(
        count=jnp.zeros((), jnp.int32),
        key=key,
        accountant=accounting.init_accountant(),
        noise_std=jnp.asarray(used_sigma, params.dtype),
        budget_exhausted=jnp.zeros((), bool),
    )

  def update_fn(updates, state, params=None, **extra_args):
    del params, extra_args  # The full-batch gradient is all DP-GD needs.
    if not isinstance(state, DPGDState):
      raise TypeError(f"state must be a DPGDState from init(), got {type(state).__name__}.")
    g = _check_vector(updates, "updates")
    ok = _gate(state.count, steps, "dp_gd")
    new_key, noise_key = jax.random.split(state.key)
    noise = jax.random.normal(noise_key, g.shape, g.dtype)
    noisy = g + jnp.asarray(used_sigma, g.dtype) * noise
    out = jnp.where(ok, -learning_rate * noisy, jnp.zeros_like(g))
    charged = accounting.charge(state.accountant, rho_step)  # Where the noise is drawn.
    new_state = DPGDState(
        count=jnp.where(ok, optax.safe_increment(state.count), state.count),
        key=new_key,
        accountant=_select(ok, charged, state.accountant),
        noise_std=state.noise_std,
        budget_exhausted=jnp.logical_or(state.budget_exhausted, jnp.logical_not(ok)),
    )
    return out, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
