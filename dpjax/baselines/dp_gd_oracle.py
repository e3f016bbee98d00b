"""DP-GD-Oracle: noisy gradient descent with a line search on the true loss. NOT private.

**Private: no.** Each step's gradient release is a Gaussian mechanism,
calibrated for ``rho/T``-zCDP (``n`` public, ``neighbouring="zero-out"`` or
``"replace-one"``, :mod:`dpjax.problem._neighbouring`) and charged to the accountant,
but the step size is an Armijo backtracking line search on the NOISE-FREE
loss: a data-dependent choice paid for by no noise, so the iterates are not
differentially private at any budget. It is a diagnostic: how far a perfect
step size would take noisy gradient descent.

Paper: Ganesh, Haghifam, Steinke, Thakurta, "Faster Differentially Private
Convex Optimization via Second-Order Methods" (NeurIPS 2023,
arXiv:2305.13209), Sec. 6, Fig. 3 ("DP-GD-Oracle").
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from dpjax import _common
from dpjax.problem import _neighbouring
from dpjax import _validate
from dpjax import accounting
from dpjax.problem import glm
from dpjax.mechanisms import noise

__all__ = ["DPGDOracleState", "dp_gd_oracle"]


class DPGDOracleState(NamedTuple):
  """State of :func:`dp_gd_oracle`."""

  count: jax.Array  # shape=(), int32: steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # rho-zCDP of the gradient noise drawn so far.
  noise_std: jax.Array  # shape=(), params dtype: std of the gradient noise.
  step_size: jax.Array  # shape=(), params dtype: eta of the last step (0: no descent found).
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


def dp_gd_oracle(
    *,
    n: int,
    rho: float | jax.Array | None = None,
    steps: int | None = None,
    rho_per_step: float | jax.Array | None = None,
    row_norm_bound: float = 1.0,
    initial_step: float = 100.0,
    shrink: float = 0.95,
    armijo: float = 0.4,
    min_step: float = 1e-6,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """DP-GD-Oracle: noisy gradient, step size by a line search on the TRUE loss. NOT PRIVATE.

  **Private: no** (the paper's Fig. 3 diagnostic). The gradient
  release ``g~ = g + N(0, sigma^2 I)``, ``sigma = (f L/n) / sqrt(2 rho_t)``
  (``f = 1`` for ``neighbouring="zero-out"``, 2 for ``"replace-one"``), is
  a Gaussian mechanism (charged), but the step size is chosen by Armijo
  backtracking on the noise-free loss, a data-dependent choice paid for by no
  noise. ``update(g, state, params, *, x, y)``: starting at ``eta =
  initial_step``, multiply by ``shrink`` while
  ``l(w - eta g~) >= l(w) - armijo * eta * <g~, g>`` and ``eta >= min_step``
  (the reference's constants 100, 0.95, 0.4, 1e-6). If no ``eta >= min_step``
  passes, or ``<g~, g> <= 0`` (``-g~`` is not a descent direction), ``eta = 0``: the paper's
  ``argmin_{eta >= 0} l(w - eta g~)`` is then ``0`` (the reference kept the last
  trial step). Returns ``-eta g~``.

  Args:
    n: number of examples.
    rho, steps, rho_per_step: the nominal budget (see ``dpjax.transforms.dp_gd``).
    row_norm_bound: ``L``.
    initial_step, shrink, armijo, min_step: the line search.
    key: int seed or typed PRNG key.
    neighbouring: the relation the gradient noise is calibrated for (as
      :func:`dpjax.transforms.dp_gd`).
    disable_noise_for_testing: no gradient noise. For tests only.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` with a :class:`DPGDOracleState`.

  Examples:
    >>> import jax
    >>> from dpjax import baselines, data
    >>> from dpjax.problem import glm
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> tx = baselines.dp_gd_oracle(n=1000, rho=1.0, steps=3, key=0)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> u, state = tx.update(glm.logistic_loss_and_grad(w, x, y)[1], state, w, x=x, y=y)
    >>> bool(glm.logistic_loss(w + u, x, y) < glm.logistic_loss(w, x, y))
    True
  """
  n = _validate.positive_int(n, "n")
  rho_step, steps = _common.per_step_budget(rho, steps, rho_per_step)
  lip = _validate.positive_float(row_norm_bound, "row_norm_bound")
  eta0 = _validate.positive_float(initial_step, "initial_step")
  shrink = _validate.float_in_open_interval(shrink, "shrink", 0.0, 1.0)
  armijo = _validate.float_in_open_interval(armijo, "armijo", 0.0, 1.0)
  min_step = _validate.positive_float(min_step, "min_step")
  if min_step > eta0:
    raise ValueError(f"min_step={min_step!r} must be <= initial_step={eta0!r}.")
  sens = _neighbouring.vector_factor(neighbouring) * lip / n
  sigma = accounting.gaussian_sigma(sens, rho_step)
  key = _common.canonical_key(key)
  on = 0.0 if _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing") else 1.0

  def init_fn(params):
    params = _common.check_params(params)
    dt = params.dtype
    return DPGDOracleState(
        count=jnp.zeros((), jnp.int32), key=key, accountant=accounting.init_accountant(),
        noise_std=jnp.asarray(on * sigma, dt), step_size=jnp.zeros((), dt),
        budget_exhausted=jnp.zeros((), bool))

  def update_fn(updates, state, params=None, *, x=None, y=None, **extra_args):
    del extra_args
    if not isinstance(state, DPGDOracleState):
      raise TypeError(f"state must be a DPGDOracleState from init(), got {type(state).__name__}.")
    g = _common.check_vector(updates, "updates")
    if params is None or x is None or y is None:
      raise TypeError("dp_gd_oracle's update needs params and the data for its line search: "
                      "tx.update(grad, state, params, x=x, y=y).")
    w = _common.check_vector(params, "params", g.shape[0])
    dt = g.dtype
    ok = _common.gate(state.count, steps, "dp_gd_oracle")
    new_key, k_g = jax.random.split(state.key)
    g_noisy = noise.add_gaussian(k_g, g, sensitivity=sens, noise_std=on * sigma)
    acc = accounting.charge(state.accountant, rho_step, slack=on * noise.tv_slack(g))
    loss0 = glm.logistic_loss(w, x, y)
    slope = armijo * jnp.vdot(g_noisy, g)

    def rejected(eta):  # NOT private: the true loss at a trial point.
      return glm.logistic_loss(w - eta * g_noisy, x, y) >= loss0 - eta * slope

    eta = lax.while_loop(lambda e: jnp.logical_and(e >= min_step, rejected(e)),
                         lambda e: e * shrink, jnp.asarray(eta0, dt))
    # No step when -g~ is not a descent direction (mathematically no eta > 0 passes
    # then; in float rounding a tiny one might).
    eta = jnp.where(jnp.logical_and(eta >= min_step, slope > 0), eta, jnp.zeros((), dt))
    out = jnp.where(ok, -eta * g_noisy, jnp.zeros_like(g))
    new_state = DPGDOracleState(
        **_common.gated(ok, state, acc),
        key=new_key,
        noise_std=state.noise_std,
        step_size=jnp.where(ok, eta, state.step_size))
    return out, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
