"""The noise multiplier that meets an (epsilon, delta) target on the RDP accountant.

:func:`calibrate_noise_multiplier` inverts the composition of ``steps`` steps,
each made of Poisson-subsampled Gaussian mechanisms of rates ``q_i`` and
noise multipliers ``z ratio_i``: the smallest ``z`` with
``rdp_to_epsilon(steps sum_i subsampled_gaussian_rdp(q_i, z ratio_i)) <=
epsilon``, by bisection in ``log z`` (epsilon decreases in ``z``). Host side,
float64, memoised.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Sequence

import jax
import numpy as np

from dpjax import _validate
from dpjax.accounting.rdp import (
    RDP_ORDERS,
    _check_orders,
    _check_rate,
    _rdp_epsilon,
    subsampled_gaussian_rdp,
)

__all__ = ["calibrate_noise_multiplier"]


def calibrate_noise_multiplier(
    epsilon: Any,
    delta: Any,
    *,
    steps: Any,
    sampling_rates: Any,
    multiplier_ratios: Any = None,
    orders: Sequence[float] = RDP_ORDERS,
    overflow_prob: Any = 0.0,
) -> float:
  """Smallest noise multiplier ``z`` meeting ``(epsilon, delta)`` after ``steps`` steps.

  Each step composes one Poisson-subsampled Gaussian mechanism per entry of
  ``sampling_rates`` (rate ``q_i``, multiplier ``z * ratio_i``), e.g. the
  gradient and the Hessian samples of the minibatch Newton method
  (Ganesh et al. 2023, Sec. 6, Fig. 4). The RDP curve
  ``steps * sum_i subsampled_gaussian_rdp(q_i, z ratio_i)`` is converted by
  :func:`rdp_to_epsilon` with the truncation slack
  ``steps * overflow_prob``. Epsilon decreases in ``z`` (``A_alpha`` does),
  so ``z`` is found by bisection in ``log z`` on a bracket grown by doubling
  from 1: the result meets the target (``eps(z) <= epsilon``) and is tight
  (``eps(z) >= epsilon (1 - 1e-6)``), or, where ``eps(z)`` jumps over the
  target (the TV bound's drop to 0, or the overflow slack's cliff above the
  largest reachable epsilon), ``z`` is 1e-3 relative above the jump's edge,
  so that rounding in the accountant cannot land on its far side.

  Args:
    epsilon: target epsilon > 0.
    delta: target delta in (0, 1).
    steps: number of steps, an int >= 1.
    sampling_rates: a rate in (0, 1] or a non-empty sequence of them.
    multiplier_ratios: ``None`` (all 1) or one positive ratio per rate.
    orders: the Renyi orders (default :data:`RDP_ORDERS`, the accountant's).
    overflow_prob: per-step TV slack of the batch caps in [0, 1] (the sum of
      the samplers' ``overflow_prob``); ``2 steps overflow_prob < delta``.

  Returns:
    ``z`` as a Python float.

  Raises:
    TypeError, ValueError: bad inputs (named), or a target outside what
      multipliers in [0.1, 1e8] can meet.

  Examples:
    >>> from dpjax import accounting
    >>> z = accounting.calibrate_noise_multiplier(
    ...     1.0, 1e-5, steps=976, sampling_rates=1024 / 100_000)
    >>> round(z, 3)  # Google's dp-accounting RdpAccountant gives 1.527 here.
    1.52...
  """
  eps_target = _validate.positive_float(epsilon, "epsilon")
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  steps = _validate.positive_int(steps, "steps")
  if isinstance(sampling_rates, (numbers.Real, np.ndarray, jax.Array)) and np.ndim(
      sampling_rates) == 0:
    rates = [_check_rate(sampling_rates, "sampling_rates")]
  elif isinstance(sampling_rates, (list, tuple, np.ndarray)) and len(sampling_rates) > 0:
    rates = [_check_rate(r, f"sampling_rates[{i}]") for i, r in enumerate(sampling_rates)]
  else:
    raise TypeError(
        "sampling_rates must be a rate in (0, 1] or a non-empty sequence of rates, got "
        f"{sampling_rates!r}.")
  if multiplier_ratios is None:
    ratios = [1.0] * len(rates)
  else:
    if not isinstance(multiplier_ratios, (list, tuple, np.ndarray)):
      raise TypeError(
          "multiplier_ratios must be None or a sequence with one ratio per sampling rate, "
          f"got {type(multiplier_ratios).__name__}.")
    if len(multiplier_ratios) != len(rates):
      raise ValueError(
          f"multiplier_ratios must have one entry per sampling rate ({len(rates)}), got "
          f"{len(multiplier_ratios)}.")
    ratios = [_validate.positive_float(r, f"multiplier_ratios[{i}]")
              for i, r in enumerate(multiplier_ratios)]
  alphas = _check_orders(orders)
  slack_step = _validate.nonnegative_float(overflow_prob, "overflow_prob")
  if 2.0 * steps * slack_step >= delta:
    raise ValueError(
        f"steps * overflow_prob = {steps * slack_step:g} leaves nothing of delta = {delta:g} "
        "(it needs delta > 2 steps overflow_prob); raise the samplers' caps or delta.")
  return _calibrate(eps_target, delta, steps, tuple(rates), tuple(ratios),
                    tuple(float(a) for a in np.asarray(alphas).reshape(-1)), slack_step)


@functools.lru_cache(maxsize=256)
def _calibrate(eps_target: float, delta: float, steps: int, rates: tuple, ratios: tuple,
               orders: tuple, slack_step: float) -> float:
  """The bisection of :func:`calibrate_noise_multiplier` on validated inputs (memoised: a
  transform built eagerly and again under ``jit``/``vmap`` calibrates once)."""
  alphas = np.asarray(orders, np.float64)
  slack = steps * slack_step
  log_delta = math.log(delta)
  eps_target = float(eps_target)

  def eps_of(z: float) -> float:
    curve = sum(subsampled_gaussian_rdp(q, z * r, alphas) for q, r in zip(rates, ratios))
    return _rdp_epsilon(alphas, steps * curve, log_delta, slack)

  z_min, z_max = 0.1, 1e8
  lo = hi = 1.0
  if eps_of(hi) > eps_target:
    while eps_of(hi) > eps_target:
      lo, hi = hi, 2.0 * hi
      if hi > z_max:
        raise ValueError(
            f"epsilon={eps_target:g} at delta={delta:g} needs a noise multiplier above "
            f"{z_max:g} for {steps} steps; the target is too small to calibrate.")
  else:
    while eps_of(lo) <= eps_target:
      hi, lo = lo, 0.5 * lo
      if lo < z_min:
        raise ValueError(
            f"epsilon={eps_target:g} at delta={delta:g} is met even with noise multiplier "
            f"{hi:g} (below {2 * z_min:g}); such a loose target is outside the calibrated "
            "range: pass a smaller epsilon.")
  eps_hi = eps_of(hi)
  while hi / lo - 1.0 > 1e-12 and eps_hi < eps_target * (1.0 - 1e-6):
    mid = math.sqrt(lo * hi)
    eps_mid = eps_of(mid)
    if eps_mid <= eps_target:
      hi, eps_hi = mid, eps_mid
    else:
      lo = mid
  if eps_hi < eps_target * (1.0 - 1e-6):
    # Not tight: the target falls in a jump of eps(z), the TV bound's drop to
    # 0 or the cliff past which the caps' slack (1 + e^eps) T leaves no
    # feasible eps (a target above the largest reachable one), and hi sits on
    # its edge. There the run's own accountant, whose float32 slack sum rounds
    # up, read eps = inf. Step 1e-3 into the feasible side (eps only falls).
    hi *= 1.0 + 1e-3
  return hi
