"""AOP: approximate minima perturbation for logistic regression, (epsilon, delta)-DP.

**Private: yes, (epsilon, delta)-differentially private** under replace-one
neighbours (one row replaced by any other row meeting the contract), hence
also under zero-out, with ``n`` public. It is an (epsilon, delta) mechanism,
not a zCDP one: it is not accounted in rho and charges no accountant.

Paper: Iyengar, Near, Song, Thakkar, Thakurta, Wang, "Towards Practical
Differentially Private Convex Optimization", IEEE S&P 2019 (Algorithm 1,
approximate minima perturbation); run as a baseline in Ganesh, Haghifam,
Steinke, Thakurta (NeurIPS 2023, arXiv:2305.13209), Sec. 6.

:func:`aop_calibration` computes the budget split, the regulariser and both
noise scales from public quantities; :func:`aop` draws the objective noise,
finds a certified approximate minimiser on the host in float64 and releases
it with output noise. Data: ``x [n, d]`` with every row norm ``<= L``
(``row_norm_bound``), labels ``y`` in {-1, +1}; each example's logistic loss
is then ``L``-Lipschitz and ``L^2/4``-smooth with a rank-1 Hessian.

Bugs of the authors' public reference code that are NOT reproduced: its
``L = 1`` for rows of norm ``sqrt(2)`` and smoothness 1 instead of ``L^2/4``
(here both come from ``row_norm_bound``), its ``theta = 0`` output for eps
>~ 10.1 (here the budget split is moved back inside the analysed region, see
:func:`aop_calibration`), its data-dependent retries with a larger gradient
tolerance (here ``gamma`` is public and fixed, and a backstop with a
guaranteed step count certifies the minimiser; see :func:`aop` for the
data-independent failure mode), and its global numpy reseeding with 8 bits of
entropy (here a JAX key).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import numpy as np

from dpjax import _common
from dpjax import _validate
from dpjax.mechanisms import noise
from dpjax.baselines import _checks

__all__ = ["AOPCalibration", "aop", "aop_calibration"]

# The Jacobian share eps_obj - eps_p of AOP must stay below 1 (see `aop`); when
# the requested split would reach it, it is set to this value.
_AOP_JACOBIAN_CAP = 0.999
# AOP's rank parameter r for a GLM (Iyengar et al. 2019: twice the Hessian rank).
_AOP_RANK = 2


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
  delta = _checks.check_delta(delta, n)
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


# One dispatch instead of an eager chain per call; the two keys come back as a tuple, so
# unpacking them costs no eager indexing of a key array.
_split_two = jax.jit(lambda key: tuple(jax.random.split(key)))


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
     the objective-perturbation proof needs: :func:`dpjax.mechanisms.noise.perturbation_vector`);
  2. find ``theta`` with ``||grad F(theta)|| <= gamma`` for ``F(theta) = (1/n)
     sum_i log(1 + exp(-y_i <x_i, theta>)) + (Lambda / (2n)) ||theta||^2 + <b,
     theta>``, deterministically in float64: Newton's method from 0 (at most
     ``max_iter`` steps), then, if needed, an accelerated-gradient backstop
     whose step count guarantees the bound in exact arithmetic
     (:func:`_minimize_perturbed`); a point counts as certified when its
     float64 gradient norm is ``<= gamma / 2``;
  3. release ``theta + u`` if ``theta`` is certified, else ``u`` alone, with
     ``u ~ N(0, sigma_out^2 I)`` added by the floating-point-safe
     :func:`dpjax.mechanisms.noise.add_gaussian` (sensitivity ``2 n gamma / Lambda``).

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
  n, d = _checks.check_data(x, y, row_norm_bound)
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
    # Host float64 arguments go to the compiled call as they are (no eager conversion each).
    released = np.asarray(jax.device_get(_aop_output(
        key_out, np.asarray(theta if certified else np.zeros(d), np.float64),
        np.float64(2.0 * n * cal.gamma / cal.big_lambda), np.float64(cal.sigma_out),
        audit_scale=noise.audit_scale())), np.float64)
  info = {**cal._asdict(), "max_iter": max_iter, "private": True}
  return released, info
