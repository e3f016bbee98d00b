"""The baselines of the second-order paper's Fig. 2 and Fig. 3, for logistic regression.

Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv:2305.13209), Sec. 6,
as implemented in the authors' public reference code (tensorflow/privacy,
``research/dp_newton``). Data: ``x [n, d]`` with every row norm ``<= L``
(``row_norm_bound``, 1 under the dpjax contract; pass ``sqrt(2)`` for rows
that got an intercept after unit normalisation), labels ``y`` in {-1, +1}.
With ``||x_i|| <= L`` each example's logistic loss is ``L``-Lipschitz and
``L^2/4``-smooth, and its Hessian ``c(z) x x^T`` is rank 1, PSD, with Frobenius
(= operator) norm ``<= L^2/4``.

Neighbouring relations (``neighbouring=`` of the iterative baselines;
:mod:`dpjax._neighbouring`), ``n`` public: ``"zero-out"`` (the default) replaces
one row by the null row (zero gradient and Hessian), ``"replace-one"`` by any
row, which doubles the gradient's sensitivity (``2L/n``) and multiplies the
Hessian's Frobenius sensitivity by ``sqrt(2)`` (``sqrt(2) L^2/(4n)``: two PSD
terms have ``<A, A'>_F >= 0``). AOP is calibrated for replace-one (its
objective perturbation budgets ``2L/n``), which covers zero-out too.

=========================  ========  ==========================================
baseline                   private?  why
=========================  ========  ==========================================
``"aop"``                  yes       (eps, delta)-DP (not zCDP): approximate
                                     minima perturbation, :func:`aop`.
``"damped-newton"``        **no**    the step size of Avella-Medina et al. 2021
                                     reads the noise-free Newton step
                                     (:func:`damped_newton`).
``"damped-newton-private"`` yes      rho-zCDP: same noises, step size from the
                                     released noisy quantities or a public
                                     constant (:func:`damped_newton_private`).
``"dp-gd-oracle"``         **no**    the step size is a line search on the true
                                     loss (:func:`dp_gd_oracle`).
=========================  ========  ==========================================

The iterative baselines are optax transforms (state with an ``accountant``,
``update(g, state, params, *, curvature_matrix=H)`` or ``(..., x=x, y=y)``);
:func:`run_baseline` is the uniform whole-run entry point (one ``jax.jit`` of a
``jax.vmap`` over keys of a ``lax.scan`` over steps; AOP runs on the host in
float64). Non-private baselines still draw, and charge to their accountant, the
noise of the nominal budget, so their noise matches the private methods at the
same budget; their results carry ``private=False``.

Reference-code bugs that are NOT reproduced: AOP's ``L = 1``
for rows of norm ``sqrt(2)`` and smoothness 1 instead of ``L^2/4`` (here both
come from ``row_norm_bound``), its ``theta = 0`` output for eps >~ 10.1 (here
the budget split is moved back inside the analysed region, see :func:`aop`),
its data-dependent retries with a larger gradient tolerance (here ``gamma`` is
public and fixed, and a backstop with a guaranteed step count certifies the
minimiser; see :func:`aop` for the data-independent failure mode), and its
global numpy reseeding with 8 bits of entropy (here a JAX key).
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

from dpjax import _common
from dpjax import _neighbouring
from dpjax import _validate
from dpjax import accounting
from dpjax import noise
from dpjax import data as data_lib
from dpjax import glm
from dpjax import spectral

__all__ = [
    "BASELINES",
    "GUARD_RADIUS",
    "AOPCalibration",
    "BaselineResult",
    "DampedNewtonState",
    "DPGDOracleState",
    "aop",
    "aop_calibration",
    "damped_newton",
    "damped_newton_noise",
    "damped_newton_private",
    "dp_gd_oracle",
    "run_baseline",
]

BASELINES = ("aop", "damped-newton", "damped-newton-private", "dp-gd-oracle")
PRIVATE = {"aop": True, "damped-newton": False, "damped-newton-private": True,
           "dp-gd-oracle": False}

# Public divergence bound on ||w_t|| (the value of dpjax.training.DEFAULT_GUARD_RADIUS):
# an iterate beyond it (or not finite) is reset to w_0. Post-processing of the
# released iterate, no privacy cost.
GUARD_RADIUS = 1e4

# The Jacobian share eps_obj - eps_p of AOP must stay below 1 (see `aop`); when
# the requested split would reach it, it is set to this value.
_AOP_JACOBIAN_CAP = 0.999
# AOP's rank parameter r for a GLM (Iyengar et al. 2019: twice the Hessian rank).
_AOP_RANK = 2


# ----------------------------------------------------------------------------
# Shared validation.
# ----------------------------------------------------------------------------


def _check_data(x: Any, y: Any, row_norm_bound: float) -> tuple[int, int]:
  ds = data_lib.validate_dataset((x, y), row_norm_bound=row_norm_bound)
  return int(np.shape(ds.x)[0]), int(np.shape(ds.x)[1])


def _check_delta(delta: Any, n: int) -> float:
  if delta is None:
    return 1.0 / float(n) ** 2
  return _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)


# ----------------------------------------------------------------------------
# AOP: approximate minima perturbation (Iyengar et al. 2019), (eps, delta)-DP.
# ----------------------------------------------------------------------------


class AOPCalibration(NamedTuple):
  """Every constant of one AOP run (host floats), from public quantities only."""

  lipschitz: float  # L = row_norm_bound: per-example gradient norm bound.
  smoothness: float  # beta = L^2 / 4: per-example Hessian norm bound.
  rank: int  # r = 2 (GLM: twice the rank of the per-example Hessian).
  epsilon: float  # the total epsilon.
  delta: float  # the total delta.
  eps_out: float  # eps_out_frac * epsilon: output perturbation.
  eps_obj: float  # epsilon - eps_out: objective perturbation.
  eps_p: float  # eps_frac_used * eps_obj: the linear noise b.
  eps_jacobian: float  # eps_obj - eps_p < 1: the Jacobian (regulariser) part.
  eps_frac_used: float  # the share of eps_obj given to b (>= the requested eps_frac).
  reallocated: bool  # True when eps_frac was raised to keep eps_jacobian < 1.
  delta_out: float  # eps_out_frac * delta.
  delta_obj: float  # (delta - delta_out) * exp(-eps_out).
  big_lambda: float  # Lambda = r beta / eps_jacobian; the objective has Lambda/(2n) ||theta||^2.
  gamma: float  # gradient-norm bound the minimiser must reach (public; default 1/n^2).
  sigma_obj: float  # std of b: (2L/n)(1 + sqrt(2 ln(1/delta_obj))) / eps_p.
  sigma_out: float  # std of the output noise: (2 n gamma / Lambda)(1 + sqrt(2 ln(1/delta_out))) / eps_out.


def _classical_gaussian_std(sensitivity: float, eps: float, delta: float, name: str) -> float:
  """``Delta (1 + sqrt(2 ln(1/delta))) / eps``, with its range of validity checked.

  With ``a = Delta / sigma = eps / (1 + s)``, ``s = sqrt(2 ln(1/delta))``, the
  Gaussian privacy loss ``a Z + a^2/2`` exceeds ``eps`` only if
  ``Z > (1 + s) - eps / (2 (1 + s)) >= s``, which has probability ``<= delta``
  as long as ``eps <= 2 (1 + s)``. Beyond that the formula is not a proof.
  """
  s = math.sqrt(2.0 * math.log(1.0 / delta))
  if eps > 2.0 * (1.0 + s):
    raise ValueError(
        f"epsilon is too large for AOP's Gaussian calibration: its {name} share is {eps:.4g} > "
        f"2 (1 + sqrt(2 ln(1/delta))) = {2 * (1 + s):.4g}, where the bound "
        "Delta (1 + sqrt(2 ln(1/delta))) / eps stops being a valid (eps, delta) guarantee. "
        "Pass a smaller epsilon or a smaller delta."
    )
  return sensitivity * (1.0 + s) / eps


def aop_calibration(
    n: int,
    epsilon: float,
    delta: float | None = None,
    *,
    row_norm_bound: float = 1.0,
    eps_frac: float = 0.9,
    eps_out_frac: float = 0.01,
    gamma: float | None = None,
) -> AOPCalibration:
  """AOP's budget split, regulariser and noise scales (the reference code's, corrected).

  Steps (Iyengar et al. 2019, Algorithm 1 "approximate minima perturbation",
  with the reference's split defaults ``eps_frac = 0.9``, ``eps_out_frac = 0.01``):

  1. ``eps_out = eps_out_frac eps``, ``eps_obj = eps - eps_out``,
     ``eps_p = eps_frac eps_obj``, Jacobian share ``eps_J = eps_obj - eps_p``;
     ``delta_out = eps_out_frac delta``, ``delta_obj = (delta - delta_out) e^{-eps_out}``.
  2. ``Lambda = r beta / eps_J`` with ``r = 2`` and ``beta = L^2 / 4`` the true
     smoothness of the logistic loss for rows of norm ``<= L`` (the reference
     used ``beta = 1`` and ``L = 1`` on rows of norm ``sqrt(2)``).
  3. ``sigma_obj = (2L/n)(1 + sqrt(2 ln(1/delta_obj))) / eps_p``: ``b`` has
     sensitivity ``2L/n`` (one example's gradient ``/ n`` changes by at most
     ``2L/n`` under replacement, ``L/n`` under zero-out with ``n`` public).
  4. ``sigma_out = (2 n gamma / Lambda)(1 + sqrt(2 ln(1/delta_out))) / eps_out``.

  **Large epsilon.** The reference code (and the public benchmark it was taken
  from) requires ``eps_J < 1`` and returns ``theta = 0`` otherwise (eps >~
  10.1 with the defaults). Here the split is instead moved back into that
  region: ``eps_frac`` is raised to ``1 - 0.999 / eps_obj`` so that
  ``eps_J = 0.999``, which only depends on the public epsilon (the public
  benchmark's own adaptive rule, ``max(eps_frac, 1 - 1/eps + 0.001)``, does
  the same). ``reallocated`` records it.

  **Output noise (conservative).** ``theta_approx`` is within
  ``n gamma / Lambda`` of the exact perturbed minimiser ``theta*`` (the
  perturbed objective is ``Lambda/n``-strongly convex and
  ``||grad|| <= gamma``). Coupling the noises ``b`` of neighbours so that their
  ``theta*`` coincide (the objective-perturbation bijection, ``(eps_obj,
  delta_obj)``), the two ``theta_approx`` are within ``2 n gamma / Lambda``;
  the Gaussian output mechanism with that sensitivity is ``(eps_out,
  delta_out)``, and composing gives ``(eps, e^{eps_out} delta_obj + delta_out)
  = (eps, delta)``. The reference uses ``n gamma / Lambda`` and
  ``delta_obj = delta - delta_out``; both changes only add noise.

  Every ``Delta (1 + sqrt(2 ln(1/delta))) / eps`` is checked to be in its
  range of validity (``eps <= 2 (1 + sqrt(2 ln(1/delta)))``; about 15 at
  ``delta = 1e-9``).

  Args:
    n: number of examples (public).
    epsilon: total epsilon > 0.
    delta: total delta in (0, 1); default ``n**-2``.
    row_norm_bound: ``L``, the enforced bound on every row norm.
    eps_frac: requested share of ``eps_obj`` for the noise ``b``, in (0, 1).
    eps_out_frac: share of ``epsilon`` (and of ``delta``) for the output noise, in (0, 1).
    gamma: gradient-norm bound of the minimiser, > 0; default ``1/n^2``.

  Returns:
    :class:`AOPCalibration`.

  Raises:
    ValueError, TypeError: bad arguments, or an epsilon share outside the
      calibration's validity range.

  Examples:
    >>> from dpjax import baselines
    >>> c = baselines.aop_calibration(10_000, 1.0, 1e-8)
    >>> c.smoothness, c.rank, round(c.eps_jacobian, 4), round(c.big_lambda, 4)
    (0.25, 2, 0.099, 5.0505)
    >>> c = baselines.aop_calibration(10_000, 12.0, 1e-8)
    >>> c.reallocated, round(c.eps_jacobian, 3)
    (True, 0.999)
  """
  n = _validate.positive_int(n, "n")
  epsilon = _validate.positive_float(epsilon, "epsilon")
  delta = _check_delta(delta, n)
  lip = _validate.positive_float(row_norm_bound, "row_norm_bound")
  eps_frac = _validate.float_in_open_interval(eps_frac, "eps_frac", 0.0, 1.0)
  eps_out_frac = _validate.float_in_open_interval(eps_out_frac, "eps_out_frac", 0.0, 1.0)
  gamma = 1.0 / float(n) ** 2 if gamma is None else _validate.positive_float(gamma, "gamma")

  beta = lip * lip / 4.0
  eps_out = eps_out_frac * epsilon
  eps_obj = epsilon - eps_out
  eps_jacobian = (1.0 - eps_frac) * eps_obj
  reallocated = eps_jacobian >= 1.0
  if reallocated:
    eps_jacobian = _AOP_JACOBIAN_CAP
  eps_p = eps_obj - eps_jacobian
  delta_out = eps_out_frac * delta
  delta_obj = (delta - delta_out) * math.exp(-eps_out)
  big_lambda = _AOP_RANK * beta / eps_jacobian
  sigma_obj = _classical_gaussian_std(2.0 * lip / n, eps_p, delta_obj, "objective-noise")
  sigma_out = _classical_gaussian_std(2.0 * n * gamma / big_lambda, eps_out, delta_out,
                                      "output-noise")
  return AOPCalibration(
      lipschitz=lip, smoothness=beta, rank=_AOP_RANK, epsilon=epsilon, delta=delta,
      eps_out=eps_out, eps_obj=eps_obj, eps_p=eps_p, eps_jacobian=eps_jacobian,
      eps_frac_used=eps_p / eps_obj, reallocated=bool(reallocated), delta_out=delta_out,
      delta_obj=delta_obj, big_lambda=big_lambda, gamma=gamma, sigma_obj=sigma_obj,
      sigma_out=sigma_out)


def _sigmoid(t: np.ndarray) -> np.ndarray:
  e = np.exp(-np.abs(t))
  return np.where(t >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _minimize_perturbed(a: np.ndarray, ridge: float, b: np.ndarray, gamma: float,
                        max_iter: int, smoothness: float) -> tuple[np.ndarray, bool]:
  """A certified approximate minimiser of ``F(t) = mean softplus(-a t) + ridge/2 ||t||^2 + <b, t>``.

  Float64 throughout; returns ``(theta, certified)``, ``certified`` meaning
  that the float64 gradient norm at ``theta`` is ``<= gamma / 2`` (the factor
  2 absorbs the gradient's own rounding, ~1e-16 relative).

  1. Newton's method from 0, at most ``max_iter`` steps. ``F`` is
     ``ridge``-strongly convex, so the Hessian is positive definite and the
     Newton step is a descent direction; the step length is the largest of
     ``1, 1/2, ...`` with a non-positive directional derivative (exact even
     when loss differences are below rounding).
  2. If that is not certified: Nesterov's accelerated gradient method for a
     ``mu = ridge``-strongly convex, ``L = smoothness + ridge``-smooth
     function (Bubeck 2015, "Convex Optimization: Algorithms and Complexity",
     Foundations and Trends in ML, Thm. 3.18), started at Newton's last point
     ``t_s``, for ``K = 1 + ceil(sqrt(k) ln(64 k (k + 1) g_s^2 / gamma^2))``
     steps, ``k = L / mu``, ``g_s = ||grad F(t_s)||`` (as computed). The
     theorem gives ``F(y_K) - F* <= (mu + L)/2 ||t_s - t*||^2 e^{-(K-1)/sqrt(k)}``;
     with ``||t_s - t*|| <= ||grad F(t_s)|| / mu`` (strong convexity; the
     computed ``g_s`` is taken to be within a factor 2 of the true one) and
     ``||grad F||^2 <= 2 L (F - F*)``, the true gradient norm at ``y_K`` is
     ``<= gamma / 4`` in exact arithmetic, for every dataset meeting the
     contract and every ``b``. The check can then fail only through rounding.

  Stops as soon as a point is certified.
  """
  n, d = a.shape
  target = 0.5 * gamma

  def grad_at(t):
    return -(a.T @ _sigmoid(-(a @ t))) / n + ridge * t + b

  t = np.zeros(d)
  g = grad_at(t)
  for _ in range(max_iter):
    if float(np.linalg.norm(g)) <= target:
      return t, True
    m = a @ t
    s = _sigmoid(-m)
    aw = a * np.sqrt(s * (1.0 - s) / n)[:, None]
    hess = aw.T @ aw
    hess[np.diag_indices(d)] += ridge
    chol = np.linalg.cholesky(hess)
    step = -np.linalg.solve(chol.T, np.linalg.solve(chol, g))
    dm = a @ step
    eta = 1.0
    for _ in range(60):
      dphi = -float(_sigmoid(-(m + eta * dm)) @ dm) / n + float((ridge * (t + eta * step) + b) @ step)
      if dphi <= 0.0:
        break
      eta *= 0.5
    t = t + eta * step
    g = grad_at(t)
  if float(np.linalg.norm(g)) <= target:
    return t, True
  return _accelerated_backstop(grad_at, t, gamma, strong_convexity=ridge,
                               smoothness=smoothness + ridge)


def _accelerated_backstop(grad_at: Any, start: np.ndarray, gamma: float, *,
                          strong_convexity: float, smoothness: float) -> tuple[np.ndarray, bool]:
  """Step 2 of :func:`_minimize_perturbed`: ``(point, certified)`` from any ``start``.

  Nesterov's accelerated gradient method for a ``mu``-strongly convex,
  ``L``-smooth function with gradient ``grad_at`` (Bubeck 2015, Thm. 3.18:
  ``y_{s+1} = x_s - grad(x_s) / L``, ``x_{s+1} = (1 + m) y_{s+1} - m y_s``,
  ``m = (sqrt(k) - 1)/(sqrt(k) + 1)``, ``k = L / mu``), for the step count
  that brings the true gradient norm to ``<= gamma / 4`` in exact arithmetic
  (see :func:`_minimize_perturbed`); stops at the first point whose float64
  gradient norm is ``<= gamma / 2``.
  """
  target = 0.5 * gamma
  g_norm = float(np.linalg.norm(grad_at(start)))
  if g_norm <= target:
    return start, True
  if not math.isfinite(g_norm):
    return start, False
  kappa = smoothness / strong_convexity
  root = math.sqrt(kappa)
  budget = 1 + math.ceil(root * max(
      0.0, math.log(64.0 * kappa * (kappa + 1.0)) + 2.0 * math.log(g_norm / gamma)))
  momentum = (root - 1.0) / (root + 1.0)
  x_s, y_prev = start, start  # Bubeck's x_1 = y_1.
  for _ in range(budget):
    y = x_s - grad_at(x_s) / smoothness
    if float(np.linalg.norm(grad_at(y))) <= target:
      return y, True
    x_s = (1.0 + momentum) * y - momentum * y_prev
    y_prev = y
  return y_prev, False


def _host_key(key: Any) -> jax.Array:
  key = _common.canonical_key(key)
  if not _validate.is_concrete(key):
    raise TypeError("aop runs on the host; pass a concrete key, not a traced one.")
  return key


_split_two = jax.jit(jax.random.split)  # one dispatch instead of an eager chain per call


@functools.partial(jax.jit, static_argnames=("audit_scale",))
def _aop_output(key: jax.Array, theta: jax.Array, sensitivity: jax.Array, noise_std: jax.Array, *,
                audit_scale: float) -> jax.Array:
  """AOP's output perturbation, compiled once for every calibration (the exact sampler, run
  eagerly, is most of an AOP call; its plan is the same traced or not). ``audit_scale`` only
  keys the cache: the release reads the audit factor when it is traced."""
  del audit_scale
  return noise.add_gaussian(key, theta, sensitivity=sensitivity, noise_std=noise_std)


def aop(
    x: Any,
    y: Any,
    *,
    epsilon: float,
    delta: float | None = None,
    key: int | jax.Array,
    row_norm_bound: float = 1.0,
    eps_frac: float = 0.9,
    eps_out_frac: float = 0.01,
    gamma: float | None = None,
    max_iter: int = 100,
) -> tuple[np.ndarray, dict[str, Any]]:
  """Approximate minima perturbation (AOP/AMP; Iyengar et al. IEEE S&P 2019).

  **Private: yes, (epsilon, delta)-DP** (replace-one neighbours, hence also
  zero-out, with ``n`` public); it is not a zCDP mechanism and charges no
  accountant. With the constants of :func:`aop_calibration`:

  1. draw ``b ~ N(0, sigma_obj^2 I)`` from ``key`` (float64, with a density, as
     the objective-perturbation proof needs: :func:`dpjax.noise.perturbation_vector`);
  2. find ``theta`` with ``||grad F(theta)|| <= gamma`` for ``F(theta) = (1/n)
     sum_i log(1 + exp(-y_i <x_i, theta>)) + (Lambda / (2n)) ||theta||^2 + <b,
     theta>``, deterministically in float64: Newton's method from 0 (at most
     ``max_iter`` steps), then, if needed, an accelerated-gradient backstop
     whose step count guarantees the bound in exact arithmetic
     (:func:`_minimize_perturbed`); a point counts as certified when its
     float64 gradient norm is ``<= gamma / 2``;
  3. release ``theta + u`` if ``theta`` is certified, else ``u`` alone, with
     ``u ~ N(0, sigma_out^2 I)`` added by the floating-point-safe
     :func:`dpjax.noise.add_gaussian` (sensitivity ``2 n gamma / Lambda``).

  The privacy argument needs ``||x_i|| <= L = row_norm_bound`` (validated,
  with no tolerance) and the logistic loss's true constants: ``L``-Lipschitz,
  ``L^2/4``-smooth, rank-1 Hessians.

  **Failure mode (data-independent).** The proof (Iyengar, Near, Song,
  Thakkar, Thakurta, Wang 2019, "Towards Practical Differentially Private
  Convex Optimization", IEEE S&P) holds for any released point whose
  gradient norm is ``<= gamma``, however it was found; an uncertified point
  is not covered, and neither is an error raised only on some datasets,
  which would itself reveal the data. Here no data-dependent event is
  visible: the call always returns ``[d]`` values, and ``info`` holds only
  public values (the calibration, no gradient norm, no iteration count).
  The backstop makes the uncertified branch empty in exact arithmetic for
  every dataset that meets the contract and every ``b``, so it can be taken
  only when float64 rounding of the gradient exceeds ``gamma / 4`` (a
  ``gamma`` near float64 resolution). That branch releases ``0 + u``: the
  starting point plus the same output noise, independent of the data. If
  ``eta = sup_D P_b(uncertified | D)``, the mechanism coincides outside that
  event with AMP run on a certified point (the exact minimiser, say), which
  is (epsilon, delta)-DP, so it is (epsilon, delta + (1 + e^epsilon) eta)-DP;
  ``eta = 0`` in exact arithmetic. (The running time still depends on the
  data, as for every method here; timing is outside the model.)

  Args:
    x: float array ``[n, d]``, rows of norm ``<= row_norm_bound``.
    y: float array ``[n]`` of labels in {-1, +1}.
    epsilon: total epsilon > 0.
    delta: total delta in (0, 1); default ``n**-2``.
    key: int seed or typed JAX PRNG key (concrete).
    row_norm_bound: ``L``, the public bound on row norms.
    eps_frac, eps_out_frac, gamma: see :func:`aop_calibration`.
    max_iter: Newton steps before the accelerated-gradient backstop (>= 1);
      affects the running time only, never privacy or the bound reached.

  Returns:
    ``(theta_private [d] float64, info)``; ``info`` holds public values only:
    the calibration (``AOPCalibration._asdict()``), ``max_iter`` and
    ``private=True``.

  Raises:
    ValueError, TypeError: bad data (row norms, labels), budget or options,
      before any work. Never after the noise is drawn.

  Examples:
    >>> from dpjax import baselines, data
    >>> x, y = data.synthetic(0, n=500, d=4)
    >>> theta, info = baselines.aop(x, y, epsilon=1.0, key=0)
    >>> theta.shape, info["private"], "grad_norm" in info
    ((4,), True, False)
  """
  n, d = _check_data(x, y, row_norm_bound)
  cal = aop_calibration(n, epsilon, delta, row_norm_bound=row_norm_bound, eps_frac=eps_frac,
                        eps_out_frac=eps_out_frac, gamma=gamma)
  max_iter = _validate.positive_int(max_iter, "max_iter")
  key = _host_key(key)
  key_obj, key_out = _split_two(key)
  b = noise.perturbation_vector(key_obj, d, cal.sigma_obj)
  x64 = np.asarray(jax.device_get(x), np.float64)
  y64 = np.asarray(jax.device_get(y), np.float64)
  a = y64[:, None] * x64
  theta, certified = _minimize_perturbed(a, cal.big_lambda / n, b, cal.gamma, max_iter,
                                         cal.smoothness)
  # Uncertified (float64 rounding only, see above): the data-independent fallback 0 + u.
  # The output perturbation is the release: through the exact sampler, sensitivity
  # 2 n gamma / Lambda (the approximate minimisers' distance bound) at std sigma_out.
  with jax.enable_x64(True):
    released = np.asarray(jax.device_get(_aop_output(
        key_out, jnp.asarray(theta if certified else np.zeros(d), jnp.float64),
        jnp.float64(2.0 * n * cal.gamma / cal.big_lambda), jnp.float64(cal.sigma_out),
        audit_scale=noise.audit_scale())), np.float64)
  info = {**cal._asdict(), "max_iter": max_iter, "private": True}
  return released, info


# ----------------------------------------------------------------------------
# Damped Newton of Avella-Medina et al. 2021 (Ganesh et al. 2023, Sec. 6, Baseline 3).
# ----------------------------------------------------------------------------


def damped_newton_noise(
    n: int,
    rho_per_step: float | jax.Array,
    *,
    grad_frac: float = 0.7,
    row_norm_bound: float = 1.0,
    neighbouring: str = "zero-out",
) -> tuple[Any, Any]:
  """``(sigma_g, sigma_H)``: the damped-Newton noise stds of one step.

  ``rho_g = grad_frac rho_t``, ``rho_H = (1 - grad_frac) rho_t``;
  ``sigma_g = (f_g L/n) / sqrt(2 rho_g)`` and ``sigma_H = (f_H L^2/(4n)) /
  sqrt(2 rho_H)``. Zero-out (``f_g = f_H = 1``): one example moves the mean
  gradient by ``<= L/n`` and the mean Hessian by ``c(z) x x^T / n``, of
  Frobenius norm ``<= L^2/(4n)``. Replace-one: the gradients of two rows differ
  by ``<= 2L`` (``f_g = 2``), and two PSD terms ``A, A'`` of Frobenius norm
  ``<= L^2/4`` differ by ``||A - A'||_F = sqrt(||A||_F^2 + ||A'||_F^2 - 2 <A,
  A'>_F) <= sqrt(2) L^2/4`` since ``<A, A'>_F = tr(A A') >= 0`` (``f_H =
  sqrt(2)``). The symmetrised noise of :func:`dpjax.noise.add_gaussian_symmetric`
  is exactly ``||D||_F^2 / (2 sigma_H^2)``-zCDP for a change ``D``.

  Examples:
    >>> from dpjax import baselines
    >>> sg, sh = baselines.damped_newton_noise(1000, 0.01)
    >>> round(sg, 8), round(sh, 8)
    (0.00845154, 0.00322749)
    >>> sg2, sh2 = baselines.damped_newton_noise(1000, 0.01, neighbouring="replace-one")
    >>> sg2 / sg, round(sh2 / sh, 12)
    (2.0, 1.414213562373)
  """
  n = _validate.positive_int(n, "n")
  rho_t = _common.budget_value(rho_per_step, "rho_per_step")
  gamma = _validate.float_in_open_interval(grad_frac, "grad_frac", 0.0, 1.0)
  lip = _validate.positive_float(row_norm_bound, "row_norm_bound")
  f_g = _neighbouring.vector_factor(neighbouring)
  f_h = _neighbouring.psd_frobenius_factor(neighbouring)
  rho_g = gamma * rho_t
  rho_h = rho_t - rho_g
  # The one place where the damped-Newton noise scales are derived (docstring).
  return (accounting.gaussian_sigma(f_g * lip / n, rho_g),
          accounting.gaussian_sigma(f_h * lip * lip / (4.0 * n), rho_h))


class DampedNewtonState(NamedTuple):
  """State of :func:`damped_newton` / :func:`damped_newton_private`."""

  count: jax.Array  # shape=(), int32: steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # rho-zCDP of the noise drawn so far.
  grad_noise_std: jax.Array  # shape=(), params dtype: sigma_g.
  hessian_noise_std: jax.Array  # shape=(), params dtype: sigma_H (diagonal entries).
  step_size: jax.Array  # shape=(), params dtype: eta of the last step.
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


def _damped_step_size(beta: jax.Array) -> jax.Array:
  """``min(1, log(1 + beta) / beta)`` (1 at beta = 0)."""
  safe = jnp.where(beta > 0, beta, 1.0)
  return jnp.where(beta > 0, jnp.minimum(1.0, jnp.log1p(safe) / safe), 1.0)


def _damped_newton(*, n, rho, steps, rho_per_step, grad_frac, min_eigenvalue, step_size,
                   row_norm_bound, key, neighbouring, disable_noise_for_testing, name):
  n = _validate.positive_int(n, "n")
  rho_step, steps = _common.per_step_budget(rho, steps, rho_per_step)
  lam = _validate.positive_float(min_eigenvalue, "min_eigenvalue")
  sigma_g, sigma_h = damped_newton_noise(n, rho_step, grad_frac=grad_frac,
                                         row_norm_bound=row_norm_bound,
                                         neighbouring=neighbouring)
  lip = float(row_norm_bound)
  sens_g = _neighbouring.vector_factor(neighbouring) * lip / n
  sens_h = _neighbouring.psd_frobenius_factor(neighbouring) * lip * lip / (4.0 * n)
  key = _common.canonical_key(key)
  on = 0.0 if _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing") else 1.0

  def init_fn(params):
    params = _common.check_params(params)
    dt = params.dtype
    return DampedNewtonState(
        count=jnp.zeros((), jnp.int32), key=key, accountant=accounting.init_accountant(),
        grad_noise_std=jnp.asarray(on * sigma_g, dt),
        hessian_noise_std=jnp.asarray(on * sigma_h, dt),
        step_size=jnp.zeros((), dt), budget_exhausted=jnp.zeros((), bool))

  def update_fn(updates, state, params=None, *, curvature_matrix=None, **extra_args):
    del params, extra_args
    if not isinstance(state, DampedNewtonState):
      raise TypeError(f"state must be a DampedNewtonState from init(), got "
                      f"{type(state).__name__}.")
    g = _common.check_vector(updates, "updates")
    d, dt = g.shape[0], g.dtype
    if curvature_matrix is None:
      raise TypeError(f"{name}'s update needs the mean Hessian: call "
                      "tx.update(grad, state, params, curvature_matrix=H).")
    _validate.as_float_array(curvature_matrix, "curvature_matrix", ndim=2)
    if np.shape(curvature_matrix) != (d, d):
      raise ValueError(f"curvature_matrix has shape {np.shape(curvature_matrix)} but must be "
                       f"({d}, {d}) to match the gradient.")
    h = jnp.asarray(curvature_matrix, dt)
    ok = _common.gate(state.count, steps, name)
    new_key, k_g, k_h = jax.random.split(state.key, 3)
    # Gradient: sensitivity f_g L/n, budget grad_frac * rho_t.
    g_noisy = noise.add_gaussian(k_g, g, sensitivity=sens_g, noise_std=on * sigma_g)
    # Hessian: Frobenius sensitivity f_H L^2/(4n), budget (1 - grad_frac) * rho_t.
    h_noisy = noise.add_gaussian_symmetric(k_h, h, sensitivity=sens_h, noise_std=on * sigma_h)
    acc = accounting.charge(state.accountant, rho_step,  # Where both noises are drawn.
                            slack=on * (noise.tv_slack(g) + noise.tv_slack(h)))
    direction = spectral.modified_solve(h_noisy, g_noisy, lam, "clip")
    if step_size == "oracle":  # NOT private: reads the noise-free g and H.
      beta = jnp.linalg.norm(spectral.modified_solve(h, g, lam, "clip"))
      eta = _damped_step_size(beta)
    elif step_size == "noisy-decrement":  # Post-processing of g~ and H~.
      eta = _damped_step_size(jnp.linalg.norm(direction))
    else:  # A public constant.
      eta = jnp.asarray(step_size, dt)
    eta = eta.astype(dt)
    out = jnp.where(ok, -eta * direction, jnp.zeros_like(g))
    new_state = DampedNewtonState(
        **_common.gated(ok, state, acc),
        key=new_key,
        grad_noise_std=state.grad_noise_std,
        hessian_noise_std=state.hessian_noise_std,
        step_size=jnp.where(ok, eta, state.step_size))
    return out, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def damped_newton(
    *,
    n: int,
    rho: float | jax.Array | None = None,
    steps: int | None = None,
    rho_per_step: float | jax.Array | None = None,
    grad_frac: float = 0.7,
    min_eigenvalue: float = 1e-5,
    row_norm_bound: float = 1.0,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Damped Newton of Avella-Medina et al. 2021 as run in the paper (Sec. 6). NOT PRIVATE.

  **Private: no.** ``update(g, state, params, *, curvature_matrix=H)`` takes
  the noise-free mean gradient ``g`` and Hessian ``H`` and returns
  ``-eta H~^{-1} g~`` with ``g~ = g + N(0, sigma_g^2 I)``,
  ``H~ = eigclip(H + (E + E^T)/2, min_eigenvalue)`` (:func:`damped_newton_noise`,
  :func:`dpjax.noise.add_gaussian_symmetric`) and the paper's step size
  ``eta = min(1, log(1 + beta) / beta)``, ``beta = ||H^{-1} g||`` computed from
  the NOISE-FREE ``g`` and ``H`` (``H`` eigen-clipped at the same floor, so
  singular Hessians are handled). That step size is a data-dependent choice
  paid for by no noise, so the iterates are not differentially private (the
  paper says so, following [Medina21, p. 22]). The accountant is still charged
  the budget of the noise drawn (``rho/T`` per step), so the noise matches
  :func:`damped_newton_private` at the same budget.

  Budget arguments and the step gate are those of :func:`dpjax.transforms.dp_gd`.

  Args:
    n: number of examples.
    rho, steps, rho_per_step: the nominal budget (see ``dp_gd``).
    grad_frac: ``gamma``: share of each step's budget for the gradient (0.7).
    min_eigenvalue: eigen-clip floor of ``H~`` (1e-5, the Jul-2023 reference).
    row_norm_bound: ``L``, the bound on row norms (``sigma`` scales).
    key: int seed or typed PRNG key.
    neighbouring: the relation the noise is calibrated for (as in
      :func:`damped_newton_private`, whose noise this matches).
    disable_noise_for_testing: no noise at all. For tests only.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` with a :class:`DampedNewtonState`.

  Examples:
    >>> import jax
    >>> from dpjax import baselines, data, glm
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> tx = baselines.damped_newton(n=1000, rho=1.0, steps=5, key=0)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> _, g, h = glm.logistic_grad_and_curvature(w, x, y)
    >>> u, state = tx.update(g, state, w, curvature_matrix=h)
    >>> u.shape, float(state.step_size) <= 1.0
    ((5,), True)
  """
  return _damped_newton(n=n, rho=rho, steps=steps, rho_per_step=rho_per_step,
                        grad_frac=grad_frac, min_eigenvalue=min_eigenvalue, step_size="oracle",
                        row_norm_bound=row_norm_bound, key=key, neighbouring=neighbouring,
                        disable_noise_for_testing=disable_noise_for_testing,
                        name="damped_newton")


def damped_newton_private(
    *,
    n: int,
    rho: float | jax.Array | None = None,
    steps: int | None = None,
    rho_per_step: float | jax.Array | None = None,
    grad_frac: float = 0.7,
    min_eigenvalue: float = 1e-5,
    step_size: float | str = "noisy-decrement",
    row_norm_bound: float = 1.0,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """A private damped Newton method with the noises of Avella-Medina et al. (2021).

  **Private: yes, rho-zCDP** (``n`` public; ``neighbouring="zero-out"``, the
  default, or ``"replace-one"``). Each step releases ``g~ = g + N(0, sigma_g^2
  I)`` (sensitivity ``L/n``; ``2L/n`` for replace-one; budget ``grad_frac
  rho_t``) and ``H + (E + E^T)/2`` (Frobenius sensitivity ``L^2/(4n)``;
  ``sqrt(2) L^2/(4n)`` for replace-one, two PSD rank-one terms; budget ``(1 -
  grad_frac) rho_t``), calibrated by :func:`damped_newton_noise` and charged to
  the accountant where they are drawn; everything else is post-processing of
  those releases and public constants:

  * ``H~ = eigclip(H + (E + E^T)/2, min_eigenvalue)``, direction ``p = H~^{-1} g~``;
  * ``step_size="noisy-decrement"`` (default): the paper's damping
    ``eta = min(1, log(1 + beta~) / beta~)`` with ``beta~ = ||p||`` computed
    from the released noisy quantities instead of the noise-free ones
    (compare :func:`damped_newton`);
  * ``step_size=<float in (0, 1]>``: a public constant ``eta``.

  Returns ``-eta p``. Budget arguments and gate as :func:`dpjax.transforms.dp_gd`.

  Args:
    n: number of examples.
    rho, steps, rho_per_step: the budget (see ``dp_gd``).
    grad_frac: ``gamma`` in (0, 1).
    min_eigenvalue: eigen-clip floor (1e-5).
    step_size: ``"noisy-decrement"`` or a public constant in (0, 1].
    row_norm_bound: ``L``.
    key: int seed or typed PRNG key.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"`` (gradient noise
      x 2, Hessian noise x sqrt(2)).
    disable_noise_for_testing: no noise at all (NOT private). For tests only.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` with a :class:`DampedNewtonState`.

  Examples:
    >>> import jax
    >>> from dpjax import accounting, baselines, data, glm
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> tx = baselines.damped_newton_private(n=1000, rho=1.0, steps=2, key=0)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> for _ in range(2):
    ...   _, g, h = glm.logistic_grad_and_curvature(w, x, y)
    ...   u, state = tx.update(g, state, w, curvature_matrix=h)
    ...   w = w + u
    >>> round(accounting.spent_rho(state.accountant), 12)
    1.0
  """
  if isinstance(step_size, str):
    if step_size != "noisy-decrement":
      raise ValueError(f"step_size must be 'noisy-decrement' or a number in (0, 1], got "
                       f"{step_size!r}.")
  else:
    step_size = _validate.positive_float(step_size, "step_size")
    if step_size > 1.0:
      raise ValueError(f"step_size must be in (0, 1] (a damped Newton step), got {step_size!r}.")
  return _damped_newton(n=n, rho=rho, steps=steps, rho_per_step=rho_per_step,
                        grad_frac=grad_frac, min_eigenvalue=min_eigenvalue, step_size=step_size,
                        row_norm_bound=row_norm_bound, key=key, neighbouring=neighbouring,
                        disable_noise_for_testing=disable_noise_for_testing,
                        name="damped_newton_private")


# ----------------------------------------------------------------------------
# DP-GD-Oracle (Ganesh et al. 2023, Fig. 3): noisy gradient + line search on the true loss. NOT private.
# ----------------------------------------------------------------------------


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
    >>> from dpjax import baselines, data, glm
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


# ----------------------------------------------------------------------------
# The uniform whole-run entry point.
# ----------------------------------------------------------------------------


class BaselineResult(NamedTuple):
  """Result of :func:`run_baseline`. Arrays are host numpy arrays.

  With a batch of keys every array gains a leading ``[repeats]`` axis.

  Attributes:
    params: ``[d]`` the output (AOP: ``theta + noise``; else the final iterate ``w_T``).
    losses: ``[steps + 1]`` mean loss at ``w_0 .. w_T`` (reporting only, not
      private), or ``None`` for AOP (not iterative).
    private: whether the output is differentially private at
      ``(epsilon, delta)`` (and ``rho`` when given). When False, ``epsilon``,
      ``delta`` and ``rho`` only describe the noise that was added.
    epsilon, delta: the (nominal, when not private) (epsilon, delta).
    rho: the zCDP budget of the noise (iterative baselines); ``None`` for AOP,
      which is (epsilon, delta)-DP and not zCDP-accounted.
    info: details: ``name``, ``why`` (the privacy statement), ``steps``,
      ``rho_spent`` (read from the accountant), ``guard_resets``,
      ``step_sizes`` ([steps] eta per step) for the iterative ones; the
      calibration and ``max_iter`` for AOP (public values only: nothing
      about how its minimiser converged).
  """

  params: np.ndarray
  losses: np.ndarray | None
  private: bool
  epsilon: float
  delta: float
  rho: float | None
  info: dict


_WHY = {
    "aop": "(epsilon, delta)-DP: approximate minima perturbation (Iyengar et al. 2019) with "
           "the true row-norm bound L and smoothness L^2/4; not zCDP-accounted.",
    "damped-newton": "NOT private: the step size min(1, log(1+beta)/beta) reads the noise-free "
                     "Newton step (Avella-Medina et al. 2021, p. 22, as run in the paper).",
    "damped-newton-private": "rho-zCDP: noisy gradient and symmetrised noisy Hessian (Gaussian "
                             "mechanisms); the step size is post-processing or public.",
    "dp-gd-oracle": "NOT private: the step size is a line search on the true loss.",
}
_FACTORIES = {"damped-newton": damped_newton, "damped-newton-private": damped_newton_private,
              "dp-gd-oracle": dp_gd_oracle}


def _keys(key: Any) -> tuple[jax.Array, bool]:
  """A typed key array ``[R]`` and whether the caller passed a batch."""
  if isinstance(key, (jax.Array, np.ndarray)) and np.ndim(key) == 1:
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
      raise TypeError("a batch of keys must be typed PRNG keys, e.g. "
                      "jax.random.split(jax.random.key(0), repeats).")
    if key.shape[0] < 1:
      raise ValueError("the batch of keys is empty; pass at least one key.")
    return key, True
  return _common.canonical_key(key)[None], False


@functools.lru_cache(maxsize=32)
def _compiled_run(name: str, kwargs: tuple, steps: int, guard_radius: float):
  """``jit(vmap(one_run))`` over keys for one configuration (cached: repeated calls,
  e.g. over seeds or in a benchmark, compile once per data shape)."""
  factory = _FACTORIES[name]
  kwargs = dict(kwargs)
  newton = name != "dp-gd-oracle"

  def one_run(k, x, y):
    tx = factory(key=k, **kwargs)
    w0 = jnp.zeros((x.shape[1],), x.dtype)

    def step(carry, _):
      w, state = carry
      if newton:
        loss, g, h = glm.logistic_grad_and_curvature(w, x, y, "hessian")
        u, state = tx.update(g, state, w, curvature_matrix=h)
      else:
        loss, g = glm.logistic_loss_and_grad(w, x, y)
        u, state = tx.update(g, state, w, x=x, y=y)
      w = optax.apply_updates(w, u)
      # Public guard: `not (norm <= R)` is also True for NaN.
      diverged = jnp.logical_not(jnp.linalg.norm(w) <= guard_radius)
      w = jnp.where(diverged, w0, w)
      return (w, state), (loss, diverged, state.step_size)

    (w, state), (losses, resets, etas) = lax.scan(step, (w0, tx.init(w0)), None, length=steps)
    losses = jnp.concatenate([losses, glm.logistic_loss(w, x, y)[None]])
    return w, losses, jnp.sum(resets), etas, state.accountant

  return jax.jit(jax.vmap(one_run, in_axes=(0, None, None)))


def run_baseline(
    name: str,
    x: Any,
    y: Any,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    steps: int | None = None,
    key: int | jax.Array,
    accounting_method: str = "gaussian",
    row_norm_bound: float = 1.0,
    guard_radius: float = GUARD_RADIUS,
    **options: Any,
) -> BaselineResult:
  """Runs one baseline of Fig. 2 / Fig. 3 on ``(x, y)``; the uniform entry point.

  ``name`` is one of ``BASELINES``; see the module table for which are private
  and why. Exactly one of ``epsilon`` and ``rho``; ``delta`` defaults to
  ``n**-2``. The iterative baselines convert with
  ``accounting.resolve_budget(n, ..., method=accounting_method)`` and split
  ``rho`` evenly over ``steps``; AOP takes ``epsilon`` (a given ``rho`` is
  converted to the epsilon of ``zcdp_to_epsilon(rho, delta, accounting_method)``,
  the reference runner's comparison convention) and no ``steps``.

  The iterative runs start at ``w_0 = 0`` and are one ``jax.jit`` of a
  ``jax.vmap`` over the keys of a ``lax.scan`` over the steps: each step makes
  one fused pass over the data (:mod:`dpjax.glm`), the transform's update and
  the public divergence guard (reset to ``w_0`` when ``||w|| > guard_radius``
  or not finite; post-processing). ``key`` is an int seed, a typed key, or a
  1-D batch of typed keys (results then have a leading repeat axis).

  Args:
    name: one of ``BASELINES``.
    x: float array ``[n, d]``, row norms ``<= row_norm_bound`` (validated).
    y: float array ``[n]``, labels in {-1, +1} (validated).
    epsilon: target epsilon, or
    rho: total zCDP budget.
    delta: in (0, 1); default ``n**-2``.
    steps: number of steps (iterative baselines only).
    key: int seed, typed PRNG key, or a 1-D array of typed keys.
    accounting_method: the (epsilon, delta) <-> zCDP conversion
      (``dpjax.accounting.METHODS``; "gaussian" is exact for these Gaussian
      mechanisms, see :func:`dpjax.fit`).
    row_norm_bound: ``L``: the public row-norm bound every calibration uses.
    guard_radius: the public divergence bound (> 0).
    **options: forwarded to :func:`aop` or to the transform factory (e.g.
      ``grad_frac``, ``min_eigenvalue``, ``step_size``, ``eps_frac``).

  Returns:
    A :class:`BaselineResult`.

  Raises:
    ValueError, TypeError: eagerly, before any work: unknown name, bad data,
      budget, steps or options.

  Examples:
    >>> from dpjax import baselines, data
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> r = baselines.run_baseline("damped-newton-private", x, y, epsilon=1.0, steps=5, key=0)
    >>> r.params.shape, r.losses.shape, r.private, r.rho is not None
    ((5,), (6,), True, True)
    >>> baselines.run_baseline("damped-newton", x, y, epsilon=1.0, steps=5, key=0).private
    False
  """
  name = _validate.choice(name, "name", BASELINES)
  row_norm_bound = _validate.positive_float(row_norm_bound, "row_norm_bound")
  n, d = _check_data(x, y, row_norm_bound)
  method = _validate.choice(accounting_method, "accounting_method", accounting.METHODS)
  keys, batched = _keys(key)

  if name == "aop":
    if steps is not None:
      raise TypeError("aop is not iterative: remove steps.")
    delta = _check_delta(delta, n)
    if (epsilon is None) == (rho is None):
      raise ValueError("pass exactly one privacy budget: epsilon=<eps> or rho=<zCDP rho> "
                       "(converted to epsilon at delta).")
    if epsilon is None:
      epsilon = accounting.zcdp_to_epsilon(_validate.positive_float(rho, "rho"), delta, method)
    allowed = {"eps_frac", "eps_out_frac", "gamma", "max_iter"}
    unknown = sorted(set(options) - allowed)
    if unknown:
      raise TypeError(f"unknown option(s) {unknown} for 'aop'; it takes {sorted(allowed)}.")
    aop_calibration(n, epsilon, delta, row_norm_bound=row_norm_bound,
                    **{k: v for k, v in options.items() if k != "max_iter"})  # eager checks
    outs, infos = [], []
    for k in keys:
      theta, info = aop(x, y, epsilon=epsilon, delta=delta, key=k,
                        row_norm_bound=row_norm_bound, **options)
      outs.append(theta)
      infos.append(info)
    info = {"name": name, "why": _WHY[name], **infos[0]}  # public: the same for every key
    params = np.stack(outs) if batched else outs[0]
    return BaselineResult(params, None, True, float(epsilon), float(delta), None, info)

  if steps is None:
    raise ValueError(f"{name!r} is iterative: pass steps=<T>.")
  steps = _validate.positive_int(steps, "steps")
  guard_radius = _validate.positive_float(guard_radius, "guard_radius")
  _common.check_host_float(np.asarray(jax.device_get(x)), "x")  # never rounded silently
  rho, epsilon, delta = accounting.resolve_budget(n, epsilon=epsilon, rho=rho, delta=delta,
                                                  method=method)
  factory = _FACTORIES[name]
  for reserved in ("n", "rho", "steps", "rho_per_step", "key", "row_norm_bound"):
    if reserved in options:
      raise TypeError(f"{reserved} is set by run_baseline; remove it from the options.")
  kwargs = dict(n=n, rho=rho, steps=steps, row_norm_bound=row_norm_bound, **options)
  factory(key=0, **kwargs)  # constructor checks, eagerly.
  x_dev, y_dev = jnp.asarray(x), jnp.asarray(y)
  try:
    run = _compiled_run(name, tuple(sorted(kwargs.items())), steps, guard_radius)
  except TypeError:  # an unhashable option value: build without the cache.
    run = _compiled_run.__wrapped__(name, tuple(sorted(kwargs.items())), steps, guard_radius)
  w, losses, resets, etas, acc = jax.device_get(run(keys, x_dev, y_dev))
  spent = np.asarray(accounting.spent_rho(acc), np.float64)
  sl = slice(None) if batched else 0
  info = {"name": name, "why": _WHY[name], "steps": steps, "rho_spent": spent[sl],
          "guard_resets": np.asarray(resets)[sl], "step_sizes": np.asarray(etas)[sl],
          "accounting_method": method, "options": dict(options)}
  return BaselineResult(np.asarray(w)[sl], np.asarray(losses)[sl], PRIVATE[name],
                        float(epsilon), float(delta), float(rho), info)
