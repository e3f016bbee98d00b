"""The private cubic-regularised Newton method (Algorithms 1-2) as an optax transform.

Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv 2305.13209),
Section 4, Algorithms 1 (meta) and 2 (DPSolver), Theorem 4.2. The loss is
assumed, per example and on the
ball ``W = B(center, D/2)`` of diameter ``D = 2 radius``:

* ``L0``-Lipschitz (``lipschitz``), ``L1``-smooth (``smoothness``),
* ``L2``-Lipschitz Hessian (``hessian_lipschitz``),
* ``mu``-strongly convex (``strong_convexity``), ``mu > 0``.

One outer step at ``w_t in W`` (Algorithm 1) takes the exact mean gradient
``g`` and Hessian ``H`` of the loss at ``w_t`` (data-dependent, not public)
and runs DPSolver (Algorithm 2) on the cubic upper model (Nesterov-Polyak
2006, Lemma 1)

``phi_t(w) = <g, w - w_t> + 1/2 (w - w_t)^T H (w - w_t) + (L2/6) ||w - w_t||^3``:

``theta_0 = w_t``, and for ``i = 0..N-1``

``theta_{i+1} = Proj_W(theta_i - eta_i (grad phi_t(theta_i) + N(0, sigma^2 I_d)))``,
``eta_i = 2 / (mu (i + 2))``,
``grad phi_t(theta) = g + H (theta - w_t) + (L2/2) ||theta - w_t|| (theta - w_t)``;

then ``w_{t+1} = sum_{i=1}^{N} 2i / (N (N+1)) theta_i`` (weights summing to
1; Algorithm 2 as printed sums ``i = 0..N-1``, whose weights add up to
``(N-1)/(N+1)``; dpjax uses this normalised, Lacoste-Julien, Schmidt & Bach
2012 style, average; it is kept as a running average, exactly a convex
combination, so ``w_{t+1} in W``).

Privacy (``n`` public: every mean divides by ``n``; neighbours differ in one
row, ``neighbouring`` (:mod:`dpjax.problem._neighbouring`): ``"zero-out"``, the
default, replaces it by the null row, which contributes zero gradient and
zero Hessian; ``"replace-one"`` by any other row). Only the first two terms
of ``grad phi_t`` see the data; the cubic term and ``w_t`` (a previous
output) are public. Zero-out moves ``g + H (theta - w_t)`` by ``(1/n) (grad
f_j(w_t) + hess f_j(w_t) (theta - w_t))``, of norm ``<= (L0 + L1 ||theta -
w_t||) / n <= (L0 + L1 D) / n`` since ``theta`` and ``w_t`` lie in ``W``.
Replace-one moves it by ``(1/n) ((grad f_j - grad f_j') + (hess f_j - hess
f_j') (theta - w_t))``: the gradients differ by ``<= 2 L0``, and the
Hessians, both PSD (each ``f(.; z)`` is convex) with operator norm ``<= L1``,
differ by ``<= L1`` in operator norm (``-hess f_j' <= hess f_j - hess f_j' <=
hess f_j``), so the change is ``<= (2 L0 + L1 D) / n``: not twice the
zero-out bound. So each inner step is a Gaussian mechanism with L2
sensitivity ``Delta = (L0 + L1 D) / n`` (zero-out) or ``(2 L0 + L1 D) / n``
(replace-one) (the iterates are post-processing of the previous releases,
so adaptive composition applies), which is ``Delta^2 / (2 sigma^2)``-zCDP
(Bun & Steinke 2016, Prop. 1.6), and ``N`` of them compose to ``N Delta^2 /
(2 sigma^2)`` (Lemma 2.3). Setting this to the outer step's ``rho_t`` gives
the noise variance (zero-out)

``sigma^2 = N (L0 + L1 D)^2 / (2 rho_t n^2)``

(the formula ``N (L0 + L1 D)^2 / (2 rho_t)`` of the paper's Algorithm 2 as
we read it lacks the ``n^2``; this is the form derived above), and ``sigma^2 = N (2 L0 +
L1 D)^2 / (2 rho_t n^2)`` under replace-one. The inner step count of
Algorithm 2 is, under both relations,

``N = ceil(2 rho_t (L0 + L1 D + L2 D^2)^2 n^2 / ((L0 + L1 D)^2 d))``.

With these, ``sigma^2 = (L0 + L1 D + L2 D^2)^2 / d`` up to the rounding of
``N`` (zero-out; times ``((2 L0 + L1 D) / (L0 + L1 D))^2`` under
replace-one): the total noise norm matches the paper's bound on
``||grad phi_t||`` over ``W`` (it uses ``L2 D^2``, not the tighter
``L2 D^2 / 2``). Keeping ``N`` under replace-one keeps the solver's step
schedule; any public ``N`` is private. ``T`` outer
steps compose to ``T rho_t`` (Algorithm 1); the final output and every
iterate are post-processing. All of this arithmetic is in
:func:`cubic_solver_calibration`, the noise std comes from
:func:`dpjax.accounting.gaussian_sigma`.

``max_inner_steps``: ``N`` grows like ``rho_t n^2 / d`` and can be in the
millions. Capping the solver at ``N' = min(N, max_inner_steps)`` keeps
``sigma`` (calibrated for ``N`` steps): each inner step is still a Gaussian
mechanism of cost ``rho_t / N``, and the ``N'`` steps actually run compose
to ``N' rho_t / N <= rho_t``, so the cap never weakens privacy. The
accountant is charged exactly what is spent, ``rho_t N' / N`` per outer step
(``rho_t`` when uncapped). The cap costs accuracy (the solver's error bound
scales as ``1/N'``): with ``N'`` steps one could afford the smaller
``sigma^2 = N' Delta^2 / (2 rho_t)``, but this transform keeps the paper's
calibration.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from dpjax.problem import _neighbouring
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax import _common

__all__ = [
    "CubicSolverCalibration",
    "DPCubicNewtonState",
    "LossConstants",
    "cubic_newton",
    "cubic_solver_calibration",
    "l2_logistic_constants",
    "solver_average_weights",
]

# The largest inner step count: lax.fori_loop counts in int32.
_MAX_INNER_STEPS = 2**31 - 1
# sup_z |d^3/dz^3 log(1 + e^-z)| = sup_p p (1-p) |1 - 2p| = 1 / (6 sqrt 3),
# attained at p = sigmoid(z) = (3 +- sqrt 3) / 6.
LOGISTIC_THIRD_DERIVATIVE_BOUND = 1.0 / (6.0 * math.sqrt(3.0))


class LossConstants(NamedTuple):
  """Per-example constants of a loss on a ball; ``cubic_newton(**c._asdict(), ...)``."""

  lipschitz: float  # L0: bound on every ||grad f(w; z)|| for w in W.
  smoothness: float  # L1: bound on every ||hess f(w; z)|| (operator norm) on W.
  hessian_lipschitz: float  # L2: ||hess f(w; z) - hess f(v; z)|| <= L2 ||w - v||.
  strong_convexity: float  # mu: every f(.; z) is mu-strongly convex.


class CubicSolverCalibration(NamedTuple):
  """DPSolver's privacy calibration for one outer step (Python numbers; Algorithm 2)."""

  inner_steps: int  # N = ceil(2 rho_t (L0 + L1 D + L2 D^2)^2 n^2 / ((L0 + L1 D)^2 d)).
  noise_std: float  # sigma = sqrt(N) Delta / sqrt(2 rho_t).
  sensitivity: float  # Delta = (L0 + L1 D) / n (zero-out) or (2 L0 + L1 D) / n (replace-one).
  gradient_bound: float  # L0 + L1 D + L2 D^2, the paper's bound on ||grad phi_t|| over W.
  rho_per_inner_step: float  # rho_t / N = Delta^2 / (2 sigma^2).


class DPCubicNewtonState(NamedTuple):
  """State of :func:`cubic_newton`; ``optax.tree.get(state, "rho")`` finds ``accountant.rho``."""

  count: jax.Array  # shape=(), int32: outer steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # rho-zCDP spent so far.
  inner_steps: jax.Array  # shape=(), int32: inner steps per outer step, min(N, max_inner_steps).
  noise_std: jax.Array  # shape=(), params dtype: sigma of each inner gradient (0: noise off).
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


# ----------------------------------------------------------------------------
# Constants and privacy arithmetic (pure functions).
# ----------------------------------------------------------------------------


def l2_logistic_constants(mu: float, radius: float) -> LossConstants:
  """Constants of the L2-regularised logistic loss on ``B(0, radius)``.

  ``f(w; x, y) = log(1 + exp(-y <x, w>)) + (mu/2) ||w||^2`` with
  ``||x|| <= 1``, ``y in {-1, +1}`` and ``||w|| <= R = radius`` (a ball
  centred at 0; for another centre ``c`` use ``R + ||c||`` for the norm
  bound). With ``s(z) = log(1 + e^{-z})`` and ``z = y <x, w>``:

  * gradient ``s'(z) y x + mu w``, ``|s'| <= 1``: ``L0 = 1 + mu R``;
  * Hessian ``s''(z) x x^T + mu I``, ``0 <= s'' <= 1/4``: ``L1 = 1/4 + mu``;
  * ``s'''(z) = -p (1-p) (1-2p)`` with ``p = sigmoid(z)``; maximising over
    ``p`` (``1 - 6p + 6p^2 = 0``) gives ``|s'''| <= 1 / (6 sqrt 3) ~ 0.0962``,
    so ``||hess f(w) - hess f(v)|| = |s''(z_w) - s''(z_v)| ||x||^2
    <= |s'''|_max |<x, w - v>| ||x||^2``: ``L2 = 1 / (6 sqrt 3)``
    (the regulariser's Hessian is constant);
  * strong convexity ``mu`` (from the regulariser).

  Args:
    mu: the ridge coefficient, > 0.
    radius: ``R > 0``, the radius of the domain ball around 0.

  Returns:
    :class:`LossConstants` ``(lipschitz, smoothness, hessian_lipschitz,
    strong_convexity)``.

  Examples:
    >>> from dpjax.transforms import l2_logistic_constants
    >>> c = l2_logistic_constants(0.01, 3.0)
    >>> [round(v, 6) for v in c]
    [1.03, 0.26, 0.096225, 0.01]
  """
  mu = _validate.positive_float(mu, "mu")
  radius = _validate.positive_float(radius, "radius")
  return LossConstants(
      lipschitz=1.0 + mu * radius,
      smoothness=0.25 + mu,
      hessian_lipschitz=LOGISTIC_THIRD_DERIVATIVE_BOUND,
      strong_convexity=mu,
  )


def cubic_solver_calibration(
    *,
    n: int,
    rho_per_step: float,
    d: int,
    lipschitz: float,
    smoothness: float,
    hessian_lipschitz: float,
    radius: float,
    neighbouring: str = "zero-out",
) -> CubicSolverCalibration:
  """Inner step count and noise of DPSolver (Ganesh et al. 2023, Algorithm 2, corrected).

  With ``D = 2 radius``, ``B = L0 + L1 D`` and ``A = L0 + L1 D + L2 D^2``:

  * ``Delta = B / n`` (zero-out) or ``(2 L0 + L1 D) / n`` (replace-one): the
    L2 sensitivity of ``g + H (theta - theta_0)`` (``theta, theta_0 in W``;
    module docstring);
  * ``N = ceil(2 rho_t A^2 n^2 / (B^2 d))`` (Algorithm 2, line 2; the same
    under both relations);
  * ``sigma = gaussian_sigma(Delta, rho_t / N)``, i.e.
    ``sigma^2 = N (n Delta)^2 / (2 rho_t n^2)``: ``N`` Gaussian mechanisms of
    sensitivity ``Delta`` compose to ``rho_t`` (Bun & Steinke 2016,
    Prop. 1.6, Lemma 2.3). The paper's Algorithm 2 drops the ``n^2``.

  Args:
    n: number of examples (public).
    rho_per_step: ``rho_t > 0``, the budget of one outer step.
    d: dimension.
    lipschitz: L0 > 0.
    smoothness: L1 > 0.
    hessian_lipschitz: L2 > 0.
    radius: the domain ball's radius ``D / 2 > 0``.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"``.

  Returns:
    :class:`CubicSolverCalibration` of Python numbers (float64 arithmetic).

  Examples:
    >>> from dpjax.transforms import cubic_solver_calibration
    >>> c = cubic_solver_calibration(n=10_000, rho_per_step=0.01, d=10, lipschitz=1.03,
    ...                              smoothness=0.26, hessian_lipschitz=0.0962, radius=3.0)
    >>> c.inner_steps, round(c.noise_std, 4), round(c.noise_std**2 * 10 / c.gradient_bound**2, 5)
    (1092448, 1.9142, 1.0)
    >>> r = cubic_solver_calibration(n=10_000, rho_per_step=0.01, d=10, lipschitz=1.03,
    ...                              smoothness=0.26, hessian_lipschitz=0.0962, radius=3.0,
    ...                              neighbouring="replace-one")
    >>> r.inner_steps, round(r.sensitivity * 10_000, 6)  # 2 L0 + L1 D = 2.06 + 1.56
    (1092448, 3.62)
  """
  n = _validate.positive_int(n, "n")
  rho_t = _validate.positive_float(rho_per_step, "rho_per_step")
  d = _validate.positive_int(d, "d")
  l0 = _validate.positive_float(lipschitz, "lipschitz")
  l1 = _validate.positive_float(smoothness, "smoothness")
  l2 = _validate.positive_float(hessian_lipschitz, "hessian_lipschitz")
  diameter = 2.0 * _validate.positive_float(radius, "radius")
  replace_one = _neighbouring.check(neighbouring) == "replace-one"
  b = l0 + l1 * diameter
  a = b + l2 * diameter * diameter
  steps = math.ceil(2.0 * rho_t * (a / b) ** 2 * float(n) * float(n) / d)
  steps = max(1, int(steps))
  # The one place where the DPSolver sensitivity is derived (module docstring):
  # zero-out (L0 + L1 D) / n; replace-one (2 L0 + L1 D) / n.
  sensitivity = (2.0 * l0 + l1 * diameter if replace_one else b) / n
  rho_inner = rho_t / steps
  sigma = accounting.gaussian_sigma(sensitivity, rho_inner)
  return CubicSolverCalibration(steps, sigma, sensitivity, a, rho_inner)


def solver_average_weights(num_steps: int) -> np.ndarray:
  """The weights ``2i / (N (N+1))``, ``i = 1..N``, of DPSolver's output average.

  They sum to 1 (``sum_i i = N (N+1) / 2``). :func:`cubic_newton` forms the
  average as the running mean ``a_k = a_{k-1} + 2/(k+1) (theta_k - a_{k-1})``
  (``a_1 = theta_1``), which equals ``sum_i w_i theta_i`` exactly in real
  arithmetic and is a convex combination at every step.

  Args:
    num_steps: ``N >= 1``.

  Returns:
    float64 array of shape ``(N,)``.

  Examples:
    >>> from dpjax.transforms import solver_average_weights
    >>> solver_average_weights(3).tolist(), float(solver_average_weights(1000).sum())
    ([0.16666666666666666, 0.3333333333333333, 0.5], 1.0)
  """
  num_steps = _validate.positive_int(num_steps, "num_steps")
  i = np.arange(1, num_steps + 1, dtype=np.float64)
  return 2.0 * i / (num_steps * (num_steps + 1.0))


def _host_budget(rho_step: Any) -> float:
  """The per-step budget as a Python float: DPSolver's N must be static."""
  if isinstance(rho_step, jax.Array):
    if not _validate.is_concrete(rho_step):
      raise TypeError(
          "cubic_newton needs a concrete budget (a Python number): its inner step count N "
          "depends on rho and must be known when the loop is compiled; build one transform "
          "per privacy level instead of vmapping over rho."
      )
    return float(jax.device_get(rho_step))
  return float(rho_step)


def _project(v: jax.Array, center: jax.Array, radius: float) -> jax.Array:
  """Euclidean projection onto ``B(center, radius)``."""
  offset = v - center
  norm = jnp.linalg.norm(offset)
  scale = jnp.minimum(1.0, radius / jnp.maximum(norm, jnp.finfo(v.dtype).tiny))
  return center + scale.astype(v.dtype) * offset


# ----------------------------------------------------------------------------
# The transform.
# ----------------------------------------------------------------------------


def cubic_newton(
    *,
    n: int,
    rho: float | None = None,
    steps: int | None = None,
    rho_per_step: float | None = None,
    lipschitz: float,
    smoothness: float,
    hessian_lipschitz: float,
    strong_convexity: float,
    radius: float,
    center: Any = None,
    max_inner_steps: int | None = None,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Private cubic-regularised Newton (Ganesh et al. NeurIPS 2023, Sec. 4, Algorithms 1-2).

  ``update(g, state, params, *, curvature_matrix=H)`` takes the exact mean
  gradient ``g`` and mean Hessian ``H`` of the loss at ``params = w_t`` (a
  point of ``W``, normally the previous iterate), runs DPSolver on the cubic
  model ``phi_t`` (``N`` noisy projected gradient steps with
  ``eta_i = 2 / (mu (i+2))``, from ``theta_0 = w_t``), and returns
  ``w_{t+1} - w_t`` with ``w_{t+1} = sum_{i=1}^{N} 2i/(N(N+1)) theta_i``
  (:func:`solver_average_weights`); add it to ``params``. The module
  docstring gives the sensitivity argument; the noise and ``N`` come from
  :func:`cubic_solver_calibration`:
  ``sigma^2 = N (L0 + L1 D)^2 / (2 rho_t n^2)`` (``neighbouring="zero-out"``;
  ``(2 L0 + L1 D)^2`` for ``"replace-one"``),
  ``N = ceil(2 rho_t (L0 + L1 D + L2 D^2)^2 n^2 / ((L0 + L1 D)^2 d))``.
  Each outer step charges ``rho_t`` (``rho_t N'/N`` with a cap, see below)
  where the noise is drawn.

  The solver is one ``lax.fori_loop`` of static length (``N`` depends only on
  the public constants and on ``d = params.shape[0]``, known at trace time),
  so it compiles once whatever ``N``. Inner step ``i`` (from 0) draws its
  noise as ``normal(fold_in(k, i), (d,))`` with ``k`` the second half of
  ``jax.random.split(state.key)`` (the first half is the next state key).

  Contract: the per-example bounds ``L0, L1, L2, mu`` hold on ``W`` and
  ``g, H`` are evaluated at ``params in W`` (checked eagerly; under ``jit``
  the caller must pass the previous iterate, and ``theta_0`` is the
  projection of ``params`` onto ``W``, which only removes rounding drift).

  Budget: exactly one of ``rho`` (total) with ``steps`` (``rho / steps`` per
  outer step), or ``rho_per_step`` (optionally with ``steps``); Python
  numbers (or concrete scalar arrays): ``N`` depends on the budget, so it
  cannot be traced. Past ``steps`` an eager call raises ``ValueError``; a
  traced one returns zeros, charges nothing and sets
  ``state.budget_exhausted``. The ``key`` may be traced (one transform per
  key inside ``vmap``).

  Args:
    n: number of examples (public).
    rho: total zCDP budget over ``steps`` outer steps.
    steps: number of outer steps T (Theorem 4.2 takes
      ``T = Theta(sqrt(L2) / mu^(3/4) (l(w_0) - l*)^(1/4) + log log(...))``).
    rho_per_step: zCDP budget of one outer step (instead of ``rho``).
    lipschitz: L0 > 0, per-example gradient-norm bound on ``W``.
    smoothness: L1 > 0, per-example Hessian operator-norm bound on ``W``.
    hessian_lipschitz: L2 > 0, per-example Hessian Lipschitz constant.
    strong_convexity: mu > 0, with ``mu <= L1`` (mu = 0 is refused: the step
      sizes ``2 / (mu (i+2))`` and Theorem 4.2 need strong convexity).
    radius: ``D / 2 > 0``, the radius of the domain ball ``W``.
    center: the ball's centre, a float vector of shape ``(d,)``; default 0.
    max_inner_steps: optional cap ``N' = min(N, max_inner_steps)`` on the
      solver's steps. No privacy cost: ``sigma`` stays calibrated for ``N``
      steps, each costs ``rho_t / N``, and the accountant is charged exactly
      ``rho_t N' / N <= rho_t`` per outer step. It costs accuracy. Needed
      when ``N > 2^31 - 1`` (int32 loop counter).
    key: int seed or typed PRNG key (``jax.random.key``); required.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"`` (noise x
      ``(2 L0 + L1 D) / (L0 + L1 D)``, same ``N``; module docstring).
    disable_noise_for_testing: if True, the solver adds no noise (same ``N``,
      same charges); the output is NOT private. For tests only.
    unsafe_float_noise: if True, draws the noise as ``jax.random.normal`` in
      floating point instead of :mod:`dpjax.mechanisms.noise`'s exact sampler: NOT
      private (Mironov 2012); for measuring what exactness costs. Issues
      :class:`dpjax.PrivacyLeakWarning`.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose state is a
    :class:`DPCubicNewtonState`.

  Raises:
    ValueError, TypeError: eagerly, at construction, for a bad budget, ``n``,
      constant (``mu <= 0``, ``mu > L1``, any constant ``<= 0``), radius,
      centre, cap, ``neighbouring``, key or flag; at ``init``, for params outside the ball,
      a centre of the wrong shape or ``N' > 2^31 - 1``; at ``update``, for a
      missing ``params`` or ``curvature_matrix``.

  Examples:
    >>> import jax, jax.numpy as jnp, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.problem import glm
    >>> from dpjax.transforms import cubic_newton, l2_logistic_constants
    >>> x, y = data.synthetic(0, n=500, d=3)
    >>> mu, radius = 0.05, 2.0
    >>> tx = cubic_newton(n=500, rho=0.1, steps=2, radius=radius, key=0,
    ...                   **l2_logistic_constants(mu, radius)._asdict())
    >>> w = jnp.zeros(3)
    >>> state = tx.init(w)
    >>> @jax.jit
    ... def step(w, state):
    ...   _, g, h = glm.logistic_grad_and_curvature(w, x, y, "hessian")
    ...   u, state = tx.update(g + mu * w, state, w, curvature_matrix=h + mu * jnp.eye(3))
    ...   return optax.apply_updates(w, u), state
    >>> for _ in range(2):
    ...   w, state = step(w, state)
    >>> round(accounting.spent_rho(state.accountant), 12), int(state.count), int(state.inner_steps)
    (0.1, 2, 23224)
    >>> bool(jnp.linalg.norm(w) <= radius * (1 + 1e-6))
    True
  """
  n = _validate.positive_int(n, "n")
  rho_step, steps = _common.per_step_budget(rho, steps, rho_per_step)
  rho_step = _host_budget(rho_step)
  l0 = _validate.positive_float(lipschitz, "lipschitz")
  l1 = _validate.positive_float(smoothness, "smoothness")
  l2 = _validate.positive_float(hessian_lipschitz, "hessian_lipschitz")
  mu = _validate.positive_float(strong_convexity, "strong_convexity")
  if mu > l1:
    raise ValueError(
        f"strong_convexity={mu!r} exceeds smoothness={l1!r}: no function is mu-strongly convex "
        "and L1-smooth with mu > L1; check the constants (see l2_logistic_constants)."
    )
  radius = _validate.positive_float(radius, "radius")
  if center is not None:
    _validate.as_float_array(center, "center", ndim=1)
    center_host = np.asarray(jax.device_get(center), np.float64)
  else:
    center_host = None
  if max_inner_steps is not None:
    max_inner_steps = _validate.positive_int(max_inner_steps, "max_inner_steps")
  neighbouring = _neighbouring.check(neighbouring)
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  exact = _common.exact_noise(unsafe_float_noise, "cubic_newton")
  slack = exact and not no_noise
  noise_on = 0.0 if no_noise else 1.0

  @functools.lru_cache(maxsize=None)
  def plan(d: int) -> tuple[CubicSolverCalibration, int, float]:
    """(calibration, steps run N', charge per outer step) for dimension d."""
    cal = cubic_solver_calibration(
        n=n, rho_per_step=rho_step, d=d, lipschitz=l0, smoothness=l1,
        hessian_lipschitz=l2, radius=radius, neighbouring=neighbouring)
    run = cal.inner_steps if max_inner_steps is None else min(cal.inner_steps, max_inner_steps)
    if run > _MAX_INNER_STEPS:
      raise ValueError(
          f"DPSolver needs N = {cal.inner_steps} inner steps (d = {d}), more than the int32 "
          f"loop counter allows ({_MAX_INNER_STEPS}); pass max_inner_steps <= {_MAX_INNER_STEPS} "
          "(privacy is unaffected, see the docstring) or a smaller budget per step."
      )
    # The N' steps run cost N' * rho_t / N (each is rho_t / N-zCDP); exactly rho_t uncapped.
    spent = rho_step if run == cal.inner_steps else rho_step * run / cal.inner_steps
    return cal, run, spent

  def center_for(d: int) -> np.ndarray:
    if center_host is None:
      return np.zeros(d)
    if center_host.shape != (d,):
      raise ValueError(
          f"center has shape {center_host.shape} but params have shape ({d},); pass a centre "
          "of the same shape as the parameters."
      )
    return center_host

  def check_inside(params: jax.Array, c: np.ndarray, where: str) -> None:
    if not _validate.is_concrete(params):
      return
    w = np.asarray(jax.device_get(params), np.float64)
    dist = float(np.linalg.norm(w - c))
    slack = 16.0 * float(jnp.finfo(params.dtype).eps)  # Rounding of a projected iterate.
    if dist > radius * (1.0 + slack):
      raise ValueError(
          f"{where} lie outside the domain W = B(center, radius={radius!r}): "
          f"||params - center|| = {dist:.9g}. Start inside the ball (e.g. at the centre), or "
          "pass a larger radius (the constants L0, L1 must hold on the whole ball)."
      )

  @functools.partial(jax.jit, static_argnums=5)
  def _solve(g, h, w, c, solver_key, run):
    """DPSolver (Algorithm 2) from theta_0 = Proj_W(w): returns the weighted average.

    Jitted once per transform (cached on shapes, dtypes and ``run``), so eager
    updates do not retrace the loop; inside an outer ``jit`` it is inlined.
    """
    dt, d = g.dtype, g.shape[0]
    cal = plan(d)[0]
    sigma, sens = noise_on * cal.noise_std, cal.sensitivity  # public, host floats
    half_l2 = jnp.asarray(0.5 * l2, dt)
    theta0 = _project(w, c, radius)

    def body(i, carry):
      theta, avg = carry
      delta = theta - theta0
      grad = g + h @ delta + half_l2 * jnp.linalg.norm(delta) * delta
      # The Gaussian mechanism on g + H (theta - theta_0) (sensitivity Delta);
      # the cubic term depends on theta only.
      noisy = noise.add_gaussian(jax.random.fold_in(solver_key, i), grad, sensitivity=sens,
                                 noise_std=sigma, exact=exact)
      eta = 2.0 / (mu * (i + 2).astype(dt))
      theta = _project(theta - eta * noisy, c, radius)
      # Running mean, weights k = i + 1: a_k = a_{k-1} + 2/(k+1) (theta_k - a_{k-1}).
      avg = avg + (2.0 / (i + 2).astype(dt)) * (theta - avg)
      return theta, avg

    return lax.fori_loop(0, run, body, (theta0, theta0))[1]

  def init_fn(params: jax.Array) -> DPCubicNewtonState:
    params = _common.check_params(params)
    d = params.shape[0]
    c = center_for(d)
    check_inside(params, c, "params")
    cal, run, _ = plan(d)
    return DPCubicNewtonState(
        count=jnp.zeros((), jnp.int32),
        key=key,
        accountant=accounting.init_accountant(),
        inner_steps=jnp.asarray(run, jnp.int32),
        noise_std=jnp.asarray(noise_on * cal.noise_std, params.dtype),
        budget_exhausted=jnp.zeros((), bool),
    )

  def update_fn(updates, state, params=None, *, curvature_matrix=None, **extra_args):
    del extra_args  # optax.chain forwards every extra argument to every member.
    if not isinstance(state, DPCubicNewtonState):
      raise TypeError(
          f"state must be a DPCubicNewtonState from init(), got {type(state).__name__}.")
    g = _common.check_vector(updates, "updates")
    d = g.shape[0]
    if params is None:
      raise TypeError(
          "cubic_newton's update needs params (the point w_t where g and H were evaluated, "
          "the centre of the cubic model): call tx.update(grad, state, params, "
          "curvature_matrix=H).")
    params = _common.check_vector(params, "params", d)
    if curvature_matrix is None:
      raise TypeError(
          f"cubic_newton's update needs the mean Hessian at params: pass curvature_matrix=H "
          f"(shape ({d}, {d})), e.g. tx.update(grad, state, params, curvature_matrix=H).")
    _validate.as_float_array(curvature_matrix, "curvature_matrix", ndim=2)
    if np.shape(curvature_matrix) != (d, d):
      raise ValueError(
          f"curvature_matrix has shape {np.shape(curvature_matrix)} but must be ({d}, {d}) "
          "to match the gradient.")
    c_host = center_for(d)
    check_inside(params, c_host, "params")
    cal, run, spent = plan(d)
    ok = _common.gate(state.count, steps, "cubic_newton")
    dt = g.dtype
    h = jnp.asarray(curvature_matrix, dt)
    c = jnp.asarray(c_host, dt)
    w = params.astype(dt)
    new_key, solver_key = jax.random.split(state.key)
    w_next = _solve(g, h, w, c, solver_key, run)
    out = jnp.where(ok, w_next - w, jnp.zeros_like(g))
    charged = accounting.charge(state.accountant, spent,  # Where the noise is drawn.
                                slack=run * noise.tv_slack(g) if slack else 0.0)
    new_state = DPCubicNewtonState(
        **_common.gated(ok, state, charged),
        key=new_key,
        inner_steps=state.inner_steps,
        noise_std=state.noise_std,
    )
    return out, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
