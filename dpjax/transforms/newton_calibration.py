"""The privacy arithmetic of the double-noise Newton method, as pure functions.

Ganesh, Haghifam, Steinke & Thakurta (NeurIPS 2023, arXiv:2305.13209),
Algorithm 3: the per-step budget split between the gradient, the trace and
the direction (:func:`newton_budget`), the direction's sensitivity after the
eigenvalue modification (:func:`direction_sensitivity`), the trace's
(:func:`trace_sensitivity`) and the adaptive private minimum eigenvalue
(:func:`adaptive_min_eigenvalue`). The transforms
(:func:`dpjax.transforms.dp_newton`,
:func:`dpjax.transforms.dp_newton_minibatch`) take their noise scales from
here; the stds come from :func:`dpjax.accounting.gaussian_sigma`.

The minibatch variant (Sec. 6, Fig. 4 of the same paper) has its lambda
(:func:`minibatch_min_eigenvalue`) and its two subsampled Gaussians'
multipliers (:func:`minibatch_noise_multipliers`, on the RDP accountant)
here too.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import sampling
from dpjax.problem import _neighbouring
from dpjax.problem import per_example
from dpjax.problem import spectral

__all__ = [
    "CURVATURE_STRUCTURES",
    "NewtonBudget",
    "adaptive_min_eigenvalue",
    "direction_sensitivity",
    "minibatch_min_eigenvalue",
    "minibatch_noise_multipliers",
    "newton_budget",
    "trace_sensitivity",
]

# The two kinds of per-example SOI the privacy argument covers (module docstring).
CURVATURE_STRUCTURES = ("rank_one", "general")

# The adaptive floor is FLOOR_FACTOR * L1 / n (= 1/n for logistic regression,
# the value of the authors' Jul-2023 reference code); any factor > 1 keeps clip valid.
# The minibatch clip floor is FLOOR_FACTOR * L1 / B_H (= 1/B_H for L1 = 1/4, the same code's).
_FLOOR_FACTOR = 4.0


class NewtonBudget(NamedTuple):
  """Per-step zCDP budget split of Algorithm 3 (Python floats, or arrays for an array budget)."""

  rho_grad: float  # the gradient query.
  rho_trace: float  # the trace query (0 for a fixed lambda).
  rho_direction: float  # the noisy direction.


def newton_budget(
    rho_per_step: float | jax.Array, *, grad_frac: float, trace_frac: float, adaptive: bool
) -> NewtonBudget:
  """Splits one step's budget between gradient, trace and direction.

  Adaptive (the split of the authors' reference code): ``rho_grad = gamma rho_t``,
  ``rho_trace = tau (1 - gamma) rho_t``, ``rho_direction = (1 - tau)(1 - gamma) rho_t``.
  Fixed lambda (Algorithm 3, direction fraction ``theta = 1 - gamma``):
  ``rho_trace = 0``, ``rho_direction = (1 - gamma) rho_t``. The last part is
  formed as a difference, so the parts add up to ``rho_per_step`` to rounding.

  Args:
    rho_per_step: the step's budget ``rho_t > 0``.
    grad_frac: ``gamma`` in (0, 1).
    trace_frac: ``tau`` in (0, 1) (ignored unless ``adaptive``).
    adaptive: whether lambda is chosen privately from the trace.

  Returns:
    :class:`NewtonBudget` of Python floats (of arrays for an array ``rho_per_step``).

  Examples:
    >>> from dpjax.transforms import newton_budget
    >>> b = newton_budget(0.0143935 / 5, grad_frac=0.7, trace_frac=0.1, adaptive=True)
    >>> [f"{r:.5g}" for r in b]
    ['0.0020151', '8.6361e-05', '0.00077725']
  """
  rho_t = _common.budget_value(rho_per_step, "rho_per_step")
  gamma = _validate.float_in_open_interval(grad_frac, "grad_frac", 0.0, 1.0)
  tau = _validate.float_in_open_interval(trace_frac, "trace_frac", 0.0, 1.0)
  adaptive = _common.check_flag(adaptive, "adaptive")
  rho_grad = gamma * rho_t
  rho_curv = rho_t - rho_grad
  rho_trace = tau * rho_curv if adaptive else 0.0
  return NewtonBudget(rho_grad, rho_trace, rho_curv - rho_trace)


def _is_python_number(v: Any) -> bool:
  return not isinstance(v, jax.Array) and np.ndim(v) == 0


def direction_sensitivity(
    lam: jax.typing.ArrayLike,
    *,
    n: int,
    curvature_norm_bound: float = 0.25,
    modification: str,
    curvature_structure: str = "rank_one",
    neighbouring: str = "zero-out",
) -> Any:
  """Sensitivity of ``Psi_lam(H)^{-1} g~`` per unit ``||g~||`` (Algorithm 3; Remark 5.5).

  With ``L = curvature_norm_bound / n`` (the operator-norm sensitivity of the
  mean SOI under zero-out):

  * rank_one (each example's SOI is ``c x x^T``, the logistic case):
    add: ``L / (lam (lam + L))`` (Sherman-Morrison); clip:
    ``L / (lam (lam - L))`` (the paper's constant; needs ``lam > L``).
    For ``L1 = 1/4`` this is ``1 / (4 n lam^2 +- lam)``.
  * general (any PSD per-example Hessian of norm ``<= L1``, Remark 5.5): add:
    ``L / lam^2 = L1 / (n lam^2)``, from
    ``A^{-1} - B^{-1} = A^{-1} (B - A) B^{-1}`` with ``A, B >= lam I``.
    Clip is refused: no proof is written down for a general ``H_i``.

  ``neighbouring="replace-one"`` (module docstring): add keeps the same
  value (the two zero-out changes are PSD of norm ``<= s``, so their
  difference has norm ``<= s``); clip doubles it (triangle inequality through
  the dataset with the null row in the replaced place).

  Args:
    lam: the minimum eigenvalue; a Python number, or an array (may be traced,
      e.g. the adaptive lambda; then no value check is possible).
    n: number of examples.
    curvature_norm_bound: L1, the bound on each example's SOI operator norm.
    modification: ``"clip"`` or ``"add"``.
    curvature_structure: ``"rank_one"`` (default) or ``"general"``.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"``.

  Returns:
    A Python float for a Python ``lam``, else an array.

  Raises:
    ValueError: a concrete ``lam <= 0``, ``lam <= L`` for clip, or clip with
      ``curvature_structure="general"``.

  Examples:
    >>> from dpjax.transforms import direction_sensitivity
    >>> lam = 1.08763e-2  # adaptive lambda at n = 1e4, rho = 0.0143935, T = 5, tr(H) = 0.2.
    >>> s = direction_sensitivity(lam, n=10_000, modification="clip")
    >>> round(s, 6), round(1 / (4 * 10_000 * lam**2 - lam), 6)
    (0.211825, 0.211825)
    >>> s = direction_sensitivity(0.01, n=1000, curvature_norm_bound=1.0,
    ...                           modification="add", curvature_structure="general")
    >>> round(s, 12)  # L1 / (n lam^2) = 1 / (1000 * 1e-4)
    10.0
    >>> [direction_sensitivity(0.01, n=1000, modification=m, neighbouring="replace-one")
    ...  / direction_sensitivity(0.01, n=1000, modification=m) for m in ("add", "clip")]
    [1.0, 2.0]
  """
  n = _validate.positive_int(n, "n")
  bound = _validate.positive_float(curvature_norm_bound, "curvature_norm_bound")
  _validate.choice(modification, "modification", spectral.MODES)
  _check_structure(curvature_structure, modification)
  replace_one = _neighbouring.check(neighbouring) == "replace-one"
  # add: the same under both relations; clip: x 2 for replace-one (docstring).
  factor = 2.0 if replace_one and modification == "clip" else 1.0
  lip = bound / n
  if _validate.is_concrete(lam):
    lam_host = np.asarray(jax.device_get(lam), np.float64)
    if not np.all(np.isfinite(lam_host)) or np.any(lam_host <= 0):
      raise ValueError(f"lam must be finite and > 0, got {lam!r}.")
    if modification == "clip" and np.any(lam_host <= lip):
      raise ValueError(
          f"lam must be > curvature_norm_bound / n = {lip:.6g} for modification='clip' "
          f"(the clip sensitivity (L1/n) / (lam (lam - L1/n)) needs it), got {lam!r}."
      )
  if _is_python_number(lam):
    lam = float(lam)
  if curvature_structure == "general":
    return lip / (lam * lam)
  shifted = lam + lip if modification == "add" else lam - lip
  return factor * lip / (lam * shifted)


def trace_sensitivity(
    *,
    n: int,
    d: int,
    curvature_norm_bound: float = 0.25,
    curvature_structure: str = "rank_one",
    curvature_norm: str = "frobenius",
    neighbouring: str = "zero-out",
) -> float:
  """L1 sensitivity of ``tr(H)``, the adaptive lambda's trace query (Sec. 5.2; Remark 5.5).

  Zero-out moves the mean SOI by ``H_i / n``, so the trace moves by
  ``tr(H_i) / n``, with ``tr(H_i)`` in ``[0, B]``:

  * rank_one: ``H_i = c x x^T`` is PSD of rank one, ``tr(H_i) = ||H_i||_op
    <= L1``: ``B = L1``, sensitivity ``L1 / n``;
  * general, Frobenius clipping: ``0 <= tr(H_i) = <H_i, I>_F <= sqrt(d)
    ||H_i||_F <= sqrt(d) L1`` (PSD; Cauchy-Schwarz): ``sqrt(d) L1 / n``;
  * general, spectral clipping: ``0 <= tr(H_i) <= d ||H_i||_op``: ``d L1 / n``.

  Replace-one moves it by ``|tr(H_i) - tr(H_i')| / n``, the difference of two
  numbers in ``[0, B]``: at most ``B / n``, the same value. The trace does
  not double (the per-example terms are PSD, so their traces never change
  sign).

  Args:
    n: number of examples.
    d: dimension.
    curvature_norm_bound: L1.
    curvature_structure: ``"rank_one"`` or ``"general"``.
    curvature_norm: the norm the per-example Hessians were clipped in
      (``"frobenius"`` or ``"spectral"``; only read for ``"general"``).
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"``: validated;
      the value is the same (see above).

  Returns:
    The sensitivity, a Python float.

  Examples:
    >>> from dpjax.transforms.dp_newton import trace_sensitivity
    >>> trace_sensitivity(n=100, d=9, curvature_norm_bound=1.0, curvature_structure="general")
    0.03
  """
  n = _validate.positive_int(n, "n")
  d = _validate.positive_int(d, "d")
  bound = _validate.positive_float(curvature_norm_bound, "curvature_norm_bound")
  _validate.choice(curvature_structure, "curvature_structure", CURVATURE_STRUCTURES)
  _validate.choice(curvature_norm, "curvature_norm", per_example.CURVATURE_NORMS)
  _neighbouring.check(neighbouring)  # Traces in [0, B]: no factor (docstring).
  if curvature_structure == "rank_one":
    factor = 1.0
  elif curvature_norm == "frobenius":
    factor = math.sqrt(d)
  else:
    factor = float(d)
  return factor * bound / n


def _check_structure(curvature_structure: Any, modification: str) -> str:
  _validate.choice(curvature_structure, "curvature_structure", CURVATURE_STRUCTURES)
  if curvature_structure == "general" and modification == "clip":
    raise ValueError(
        "modification='clip' is not available with curvature_structure='general': clip stays "
        "logistic-only (rank-one SOI) until a proof is written down for a general per-example "
        "Hessian. Pass modification='add' (sensitivity L1 / (n lam^2))."
    )
  return curvature_structure


def adaptive_min_eigenvalue(
    noisy_trace: jax.typing.ArrayLike,
    *,
    n: int,
    rho_direction: float,
    trace_coeff: float,
    floor: float,
) -> Any:
  """The private adaptive minimum eigenvalue (Ganesh et al. 2023, Sec. 5.2).

  ``lam = max((c max(0, tr~) / (n^2 rho_direction))^(1/3), floor)``: the
  paper's minimiser ``lam ~ (tr(H) / (n^2 rho_direction))^(1/3)`` (Sec. 5.2)
  evaluated on the privately released trace ``tr~``, which is post-processing:
  it reads no data, so it is the same under both neighbouring relations (the
  floor ``4 L1 / n`` is public, and it keeps ``lam > L1 / n`` for clip).

  Args:
    noisy_trace: the noisy trace ``tr(H) + N(0, sigma_tr^2)``; number or
      array (may be traced).
    n: number of examples.
    rho_direction: the direction budget of this step, > 0.
    trace_coeff: ``c > 0``.
    floor: the smallest lambda returned, > 0 (``4 L1 / n`` in :func:`dpjax.transforms.dp_newton`).

  Returns:
    lambda: a Python float for a Python ``noisy_trace``, else an array.

  Examples:
    >>> from dpjax.transforms import adaptive_min_eigenvalue
    >>> lam = adaptive_min_eigenvalue(
    ...     0.2, n=10_000, rho_direction=7.7725e-4, trace_coeff=0.5, floor=1e-4)
    >>> round(lam, 7)
    0.0108763
  """
  n = _validate.positive_int(n, "n")
  rho_direction = _common.budget_value(rho_direction, "rho_direction")
  trace_coeff = _validate.positive_float(trace_coeff, "trace_coeff")
  floor = _validate.positive_float(floor, "floor")
  scale = trace_coeff / (float(n) * float(n) * rho_direction)
  if _is_python_number(noisy_trace) and _is_python_number(rho_direction):
    _validate.check_finite(noisy_trace, "noisy_trace")
    t = float(noisy_trace)
    return max((scale * max(0.0, t)) ** (1.0 / 3.0), floor)
  t = jnp.asarray(noisy_trace)
  return jnp.maximum(jnp.cbrt(scale * jnp.maximum(t, 0)), jnp.asarray(floor, t.dtype))


# ----------------------------------------------------------------------------
# The minibatch variant (Ganesh et al. 2023, Sec. 6): lambda and multipliers.
# ----------------------------------------------------------------------------


def minibatch_min_eigenvalue(
    min_eigenvalue: float,
    *,
    curvature_batch_size: int,
    curvature_norm_bound: float = 0.25,
    modification: str,
) -> float:
  """The lambda the minibatch method uses (as in the reference code).

  add: ``lam`` itself. clip: ``lam_c = max(lam, 4 L1 / B_H)``, the reference
  code's floor (``1 / B_H`` for ``L1 = 1/4``); the paper's clip sensitivity
  ``(L1/B_H) / (lam (lam - L1/B_H))`` needs ``lam > L1 / B_H``, and the floor
  keeps it at most ``1 / (3 lam_c)``.

  Args:
    min_eigenvalue: the requested ``lam > 0``.
    curvature_batch_size: expected curvature sample size ``B_H >= 1``.
    curvature_norm_bound: L1, the bound on each example's SOI operator norm.
    modification: ``"clip"`` or ``"add"``.

  Returns:
    The lambda used, a Python float.

  Examples:
    >>> from dpjax.transforms import minibatch_min_eigenvalue
    >>> minibatch_min_eigenvalue(1e-3, curvature_batch_size=100, modification="clip")
    0.01
    >>> minibatch_min_eigenvalue(1e-3, curvature_batch_size=100, modification="add")
    0.001
  """
  lam = _validate.positive_float(min_eigenvalue, "min_eigenvalue")
  b_h = _validate.positive_int(curvature_batch_size, "curvature_batch_size")
  bound = _validate.positive_float(curvature_norm_bound, "curvature_norm_bound")
  _validate.choice(modification, "modification", spectral.MODES)
  if modification == "clip":
    return max(lam, _FLOOR_FACTOR * bound / b_h)
  return lam


def _check_budget_args(noise_multiplier_grad, noise_multiplier_hess, epsilon, delta, steps):
  """The budget form :func:`dpjax.transforms.dp_newton_minibatch` got: True for multipliers."""
  by_noise = noise_multiplier_grad is not None or noise_multiplier_hess is not None
  by_eps = epsilon is not None or delta is not None
  if by_noise and by_eps:
    raise ValueError(
        "pass exactly one budget form: noise_multiplier_grad= and noise_multiplier_hess= "
        "(optionally with steps=), or epsilon=, delta= and steps= (the multipliers are then "
        "calibrated); got both."
    )
  if not by_noise and not by_eps:
    raise ValueError(
        "no privacy budget given: pass epsilon=, delta= and steps= (the noise multipliers are "
        "calibrated to them), or noise_multiplier_grad= and noise_multiplier_hess=."
    )
  if by_noise and (noise_multiplier_grad is None or noise_multiplier_hess is None):
    raise ValueError(
        "pass both noise_multiplier_grad= and noise_multiplier_hess= (the gradient and the "
        "direction are two subsampled Gaussian mechanisms), or epsilon=, delta=, steps=."
    )
  if by_eps and (epsilon is None or delta is None or steps is None):
    raise ValueError(
        "epsilon= needs delta= and steps= too (the multipliers are calibrated so that "
        f"steps steps spend epsilon at delta); got epsilon={epsilon!r}, delta={delta!r}, "
        f"steps={steps!r}."
    )
  return by_noise


def _calibrate(epsilon, delta, steps, q_g, q_h, truncation_step, noise_ratio_hess):
  """``(z_g, z_H)`` spending ``epsilon`` at ``delta`` after ``steps`` steps.

  The privacy argument is :mod:`dpjax.transforms.dp_newton_minibatch`'s docstring.
  """
  epsilon = _validate.positive_float(epsilon, "epsilon")
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  ratio = _validate.positive_float(noise_ratio_hess, "noise_ratio_hess")
  slack = (1.0 + math.exp(min(epsilon, 700.0))) * steps * truncation_step
  delta_rdp = delta - slack
  if not delta_rdp > 0.5 * delta:
    raise ValueError(
        f"the sampling caps' overflow slack (1 + e^epsilon) * steps * (p_g + p_H) = {slack:.3g} "
        f"uses more than half of delta={delta:g}; pass a smaller overflow_prob or larger "
        "grad_cap / curvature_cap."
    )
  z_g = float(accounting.calibrate_noise_multiplier(
      epsilon, delta_rdp, steps=steps, sampling_rates=(q_g, q_h), multiplier_ratios=(1.0, ratio),
  ))
  return z_g, ratio * z_g


def _overflow_target(overflow_prob, epsilon, delta, steps):
  """The default caps' overflow target with an (epsilon, delta) budget.

  At most ``overflow_prob`` and at most ``1e-3 delta / (2 (1 + e^epsilon) steps)``,
  so that the truncation slack takes at most 0.1% of delta (it matters at a
  large epsilon: ``e^10 = 2.2e4``). Explicit caps are used as given.
  """
  overflow_prob = _validate.float_in_open_interval(overflow_prob, "overflow_prob", 0.0, 1.0)
  epsilon = _validate.positive_float(epsilon, "epsilon")
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  share = 1e-3 * delta / (2.0 * (1.0 + math.exp(min(epsilon, 700.0))) * steps)
  return min(overflow_prob, share)


def _samplers(n, b_g, b_h, grad_cap, curvature_cap, overflow_prob):
  """The two Poisson samplers (validated caps)."""
  overflow_prob = _validate.float_in_open_interval(overflow_prob, "overflow_prob", 0.0, 1.0)
  caps = []
  for name, cap in (("grad_cap", grad_cap), ("curvature_cap", curvature_cap)):
    caps.append(None if cap is None else _validate.positive_int(cap, name))
  sampler_g = sampling.poisson_sampler(n, batch_size=b_g, cap=caps[0], overflow_prob=overflow_prob)
  sampler_h = sampling.poisson_sampler(n, batch_size=b_h, cap=caps[1], overflow_prob=overflow_prob)
  return sampler_g, sampler_h


def _check_sizes(n, batch_size, curvature_batch_size):
  n = _validate.positive_int(n, "n")
  b_g = _validate.positive_int(batch_size, "batch_size")
  b_h = _validate.positive_int(curvature_batch_size, "curvature_batch_size")
  for name, b in (("batch_size", b_g), ("curvature_batch_size", b_h)):
    if b > n:
      raise ValueError(
          f"{name}={b} exceeds n={n}: it is the expected Poisson sample size q n with a "
          f"sampling rate q <= 1; pass {name} <= {n}."
      )
  return n, b_g, b_h


def minibatch_noise_multipliers(
    *,
    n: int,
    batch_size: int,
    curvature_batch_size: int,
    epsilon: float,
    delta: float,
    steps: int,
    noise_ratio_hess: float = 1.0,
    grad_cap: int | None = None,
    curvature_cap: int | None = None,
    overflow_prob: float = 1e-15,
) -> tuple[float, float]:
  """The multipliers ``(z_g, z_H)`` that :func:`dpjax.transforms.dp_newton_minibatch` calibrates.

  ``z_g = z``, ``z_H = noise_ratio_hess * z`` with the smallest ``z`` such
  that ``steps`` steps, each a Poisson-subsampled Gaussian at rate
  ``B_g / n`` (multiplier ``z_g``) and one at rate ``B_H / n`` (``z_H``),
  are ``(epsilon, delta - (1 + e^epsilon) steps (p_g + p_H))``-DP by the RDP
  accountant, ``p`` being the samplers' overflow probabilities
  (:func:`dpjax.accounting.calibrate_noise_multiplier`). The transform runs
  this same code; it is public so that a caller can read the multipliers.

  Examples:
    >>> from dpjax.transforms import minibatch_noise_multipliers
    >>> z_g, z_h = minibatch_noise_multipliers(n=10_000, batch_size=1000,
    ...     curvature_batch_size=1000, epsilon=1.0, delta=1e-8, steps=10)
    >>> z_g == z_h, 1 < z_g < 10
    (True, True)
  """
  n, b_g, b_h = _check_sizes(n, batch_size, curvature_batch_size)
  steps = _validate.positive_int(steps, "steps")
  overflow_prob = _overflow_target(overflow_prob, epsilon, delta, steps)
  sampler_g, sampler_h = _samplers(n, b_g, b_h, grad_cap, curvature_cap, overflow_prob)
  truncation_step = float(sampler_g.overflow_prob) + float(sampler_h.overflow_prob)
  return _calibrate(epsilon, delta, steps, float(sampler_g.sampling_rate),
                    float(sampler_h.sampling_rate), truncation_step, noise_ratio_hess)
