"""Full-batch DP-GD as an optax transform (the baseline of Ganesh et al. NeurIPS 2023, Sec. 6).

Update (with ``eta = 1/L1 = 4`` for the logistic loss, as in the paper's experiments):

``w_{t+1} = w_t - eta (grad l(w_t) + N(0, s^2 I_d))``,
``s = (L0 / n) / sqrt(2 rho_t)``.

Sensitivity argument: ``n`` is public (every average divides by the same
``n``) and neighbouring datasets differ in one row (``neighbouring``,
:mod:`dpjax.problem._neighbouring`): ``"zero-out"`` (the default) replaces it by the
null row, whose gradient is 0; ``"replace-one"`` by any other row. Each
per-example gradient has norm ``<= L0`` (``grad_norm_bound``; ``L0 = 1`` for
the logistic loss with ``||x|| <= 1``), so the mean gradient moves by
``||g_i|| / n <= L0 / n`` under zero-out and by ``||g_i - g_i'|| / n <= 2 L0 /
n`` under replace-one (two gradients can point in opposite directions). With
that sensitivity ``Delta``, ``s = Delta / sqrt(2 rho_t)`` and adding
``N(0, s^2 I)`` is ``rho_t``-zCDP (Bun & Steinke 2016, Prop. 1.6). The
learning rate is public post-processing, so the iterate noise has std
``eta s``. T steps compose to ``T rho_t`` (Lemma 2.3).

This module also holds the small helpers (budget arguments, PRNG keys, the
step-budget gate) that :mod:`dpjax.transforms.dp_newton` reuses.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax.problem import _neighbouring
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax import _common

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


def dp_gd(
    *,
    n: int,
    rho: float | jax.Array | None = None,
    steps: int | None = None,
    rho_per_step: float | jax.Array | None = None,
    learning_rate: float = 4.0,
    grad_norm_bound: float = 1.0,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Full-batch DP gradient descent (Ganesh et al. 2023, Sec. 6 baseline).

  ``update(g, state)`` takes the MEAN gradient ``g`` over the ``n`` examples and
  returns ``-learning_rate * (g + N(0, s^2 I))`` with
  ``s = accounting.gaussian_sigma(f * grad_norm_bound / n, rho_per_step)``
  ``= (f L0 / n) / sqrt(2 rho_t)``, charging ``rho_t`` to the accountant in
  the state. Sensitivity (module docstring): ``n`` public, every per-example
  gradient of norm ``<= grad_norm_bound`` (1 for logistic loss with
  ``||x|| <= 1``), so the mean gradient moves by at most ``f L0 / n`` with
  ``f = 1`` for ``neighbouring="zero-out"`` (one row replaced by the null
  row) and ``f = 2`` for ``"replace-one"`` (by any row). The noise is drawn
  from a key split off the state key, fresh at every step.

  Budget: exactly one of ``rho`` (total) with ``steps`` (``rho / steps`` per
  step), or ``rho_per_step`` (optionally with ``steps``). With ``steps`` the
  transform refuses step ``steps + 1``: eagerly it raises ``ValueError``;
  under ``jit``/``vmap``/``scan`` it returns zeros, charges nothing and sets
  ``state.budget_exhausted``.

  The budget is normally a Python number: it is validated eagerly, the noise
  is calibrated on the host in float64 and the accountant is charged the exact
  amount. It may also be a scalar float jax array, possibly traced, so that
  one compiled program serves many privacy levels (build the transform inside
  a ``jax.vmap`` over ``rho``); then ``s`` is computed in the graph and the
  charge is the array's value, both in its dtype (float32 rounds the charge
  by at most 2^-24 relative). The ``key`` may be traced too (a ``vmap`` over
  keys). Do not lift these arguments into ``optax.inject_hyperparams``.

  Args:
    n: number of examples (public).
    rho: total zCDP budget over ``steps`` steps.
    steps: number of steps T.
    rho_per_step: zCDP budget of one step (instead of ``rho``).
    learning_rate: step size eta > 0; default 4 = 1/L1 for logistic loss.
    grad_norm_bound: L0, the bound on each example's gradient norm.
    key: int seed or typed PRNG key (``jax.random.key``); required.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"`` (noise x 2);
      see :mod:`dpjax.problem._neighbouring`.
    disable_noise_for_testing: if True, adds no noise and the output is NOT
      private (the accountant is still charged). For tests only.
    unsafe_float_noise: if True, draws the noise as ``jax.random.normal`` in
      floating point instead of :mod:`dpjax.mechanisms.noise`'s exact sampler: NOT
      private (Mironov 2012); for measuring what exactness costs. Issues
      :class:`dpjax.PrivacyLeakWarning`.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose state is a
    :class:`DPGDState`.

  Raises:
    ValueError, TypeError: bad budget, ``n``, ``learning_rate``, bound,
      ``neighbouring``, key or flag (eagerly, at construction).

  Examples:
    >>> import jax, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.problem import glm
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
  rho_step, steps = _common.per_step_budget(rho, steps, rho_per_step)
  learning_rate = _validate.positive_float(learning_rate, "learning_rate")
  grad_norm_bound = _validate.positive_float(grad_norm_bound, "grad_norm_bound")
  factor = _neighbouring.vector_factor(neighbouring)  # 1 zero-out, 2 replace-one.
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  exact = _common.exact_noise(unsafe_float_noise, "dp_gd")

  # The one place where the DP-GD noise scale is derived: sensitivity f L0 / n.
  sensitivity = factor * grad_norm_bound / n
  sigma = accounting.gaussian_sigma(sensitivity, rho_step)
  used_sigma = 0.0 if no_noise else sigma

  def init_fn(params: jax.Array) -> DPGDState:
    params = _common.check_params(params)
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
    g = _common.check_vector(updates, "updates")
    ok = _common.gate(state.count, steps, "dp_gd")
    new_key, noise_key = jax.random.split(state.key)
    noisy = noise.add_gaussian(noise_key, g, sensitivity=sensitivity, noise_std=used_sigma,
                               exact=exact)
    out = jnp.where(ok, -learning_rate * noisy, jnp.zeros_like(g))
    charged = accounting.charge(state.accountant, rho_step,  # Where the noise is drawn.
                                slack=noise.tv_slack(g) if exact and not no_noise else 0.0)
    new_state = DPGDState(
        **_common.gated(ok, state, charged),
        key=new_key,
        noise_std=state.noise_std,
    )
    return out, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
