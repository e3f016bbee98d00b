"""A run's privacy budget: ``(rho, epsilon, delta)`` from one of epsilon and rho.

:func:`resolve_budget` is where a budget given as ``epsilon`` at ``delta``
(``n^-2`` by default) becomes the zCDP ``rho`` that the run's mechanisms
spend (:func:`dpjax.accounting.epsilon_to_zcdp`), and where a given ``rho``
is reported as an epsilon. For the floating-point-safe noise's
total-variation slack ``T`` it reserves ``2 (1 + e^eps) T`` of delta, and
:func:`check_certifiable` refuses an epsilon above
:func:`certifiable_epsilon`, ``ln(delta / (2 T) - 1)``, past which the slack's
payment ``(1 + e^eps) T`` would exceed ``delta / 2``.
"""

from __future__ import annotations

import math

from dpjax import _validate
from dpjax.accounting.conversions import METHODS, _zcdp_epsilon_with_slack, epsilon_to_zcdp

__all__ = ["resolve_budget", "certifiable_epsilon", "check_certifiable"]


def certifiable_epsilon(delta: float, slack: float) -> float:
  """The largest epsilon whose TV payment ``(1 + e^eps) slack`` stays within ``delta / 2``.

  The floating-point-safe noise (:mod:`dpjax.mechanisms.noise`) is within total variation
  ``slack`` of the exact Gaussian mechanism, paid ``(1 + e^eps)`` times out of
  delta (:func:`epsilon_spent`). Past this epsilon no finite sampler's
  guarantee is worth stating: it is ``ln(delta / (2 slack) - 1)``, about 40 for
  ``delta = 1e-6`` and a million noise coordinates.

  Examples:
    >>> from dpjax import accounting
    >>> round(accounting.certifiable_epsilon(1e-6, 1e-22), 2)
    36.15
  """
  if slack <= 0.0:
    return math.inf
  ratio = delta / (2.0 * slack) - 1.0
  return math.log(ratio) if ratio > 1.0 else 0.0


def resolve_budget(
    n: int,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    method: str = "gaussian",
    slack: float = 0.0,
    target: str = "rho",
) -> tuple[float | None, float, float]:
  """The ``(rho, epsilon, delta)`` of a run given exactly one of ``epsilon`` and ``rho``.

  ``delta`` defaults to ``n**-2``. ``epsilon`` is converted to zCDP with
  :func:`epsilon_to_zcdp` (``method``); a given ``rho`` is reported as the
  epsilon of :func:`zcdp_to_epsilon`. Every argument is checked first, with
  a message that names it (``method`` as ``accounting``, the name the
  callers use).

  ``target="epsilon"`` is for a run calibrated to an ``(epsilon, delta)``
  target instead of a zCDP budget (the Renyi-DP-accounted Poisson methods,
  AOP): a given ``rho`` is converted to its epsilon at ``delta`` with
  :func:`zcdp_to_epsilon`, and the returned ``rho`` is None.

  ``slack`` is an estimate of the run's floating-point noise slack
  (:func:`dpjax.mechanisms.noise.tv_slack` of what it will release). The conversion then
  reserves ``2 (1 + e^eps) slack`` of delta for it (nothing at all, in float64,
  at any ordinary epsilon), and an epsilon that cannot be certified
  (:func:`certifiable_epsilon`) is refused.

  Examples:
    >>> from dpjax import accounting
    >>> rho, eps, delta = accounting.resolve_budget(10_000, epsilon=1.0)
    >>> round(rho, 6), eps, delta
    (0.019221, 1.0, 1e-08)
    >>> rho, eps, delta = accounting.resolve_budget(10_000, rho=0.019221, target="epsilon")
    >>> rho, round(eps, 3)
    (None, 1.0)
  """
  method = _validate.choice(method, "accounting", METHODS)
  target = _validate.choice(target, "target", ("rho", "epsilon"))
  if delta is None:
    delta = 1.0 / _validate.positive_int(n, "n") ** 2
  delta = _validate.float_in_open_interval(delta, "delta", 0.0, 1.0)
  if (epsilon is None) == (rho is None):
    raise ValueError(
        "pass exactly one privacy budget: epsilon=<eps> (converted to zCDP with "
        f"accounting={method!r} at delta) or rho=<total zCDP rho>; got "
        + ("neither." if epsilon is None else "both.")
    )
  slack = _validate.nonnegative_float(slack, "slack")
  if target == "epsilon":
    if epsilon is None:
      epsilon = _zcdp_epsilon_with_slack(_validate.positive_float(rho, "rho"), delta, method,
                                         slack)
    epsilon = _validate.positive_float(epsilon, "epsilon")
    check_certifiable(epsilon, delta, slack)
    return None, epsilon, delta
  if epsilon is not None:
    epsilon = _validate.positive_float(epsilon, "epsilon")
    check_certifiable(epsilon, delta, slack)
    reserve = 2.0 * slack * (1.0 + math.exp(epsilon)) if slack > 0 else 0.0
    rho = epsilon_to_zcdp(epsilon, delta - reserve, method)
  else:
    rho = _validate.positive_float(rho, "rho")
    epsilon = _zcdp_epsilon_with_slack(rho, delta, method, slack)
    check_certifiable(epsilon, delta, slack)
  return rho, epsilon, delta


def check_certifiable(epsilon: float, delta: float, slack: float) -> None:
  """Raises ``ValueError`` when ``epsilon`` exceeds :func:`certifiable_epsilon` (before any work)."""
  cap = certifiable_epsilon(delta, slack)
  if not epsilon <= cap:
    raise ValueError(
        f"epsilon={epsilon:.6g} cannot be certified at delta={delta:.3g} with floating-point-"
        f"safe noise: the sampler is within total variation {slack:.3g} of the exact Gaussian "
        f"mechanism over this run, paid (1 + e^eps) times out of delta, which caps epsilon at "
        f"{cap:.4g}. Ask for epsilon <= {cap:.4g} (the noise is already negligible there) or a "
        "larger delta.")
