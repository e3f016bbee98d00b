"""Tuning-free defaults: ``algorithm="auto"`` picks everything from public quantities.

Tuning the number of steps (or any other knob) on the private data by looking
at the results of private runs is itself a privacy leak that no accountant
charges. :func:`choose` therefore picks the method and every hyperparameter
**only** from ``n``, ``d``, the budget (``epsilon``, ``delta`` or ``rho``)
and the loss constants (for the logistic loss with ``||x|| <= 1``:
per-example gradient norm ``L0 = 1`` and curvature norm ``L1 = 1/4``). It
never reads ``x`` or ``y``, so its choice costs no privacy; the constants
below were fitted once, on the shared benchmark datasets, and are fixed.

The rule (its accuracy is in ``benchmarks/results/privacy_utility_frontier.md``):

1. **precond-gd** (:func:`dpjax.transforms.dp_precond_gd`) when the released
   curvature can tell directions apart from its noise: the eigenvalue floor
   ``kappa sqrt(2d) sigma_H`` (``sigma_H = (L1/n) / sqrt(2 q rho)``, ``q =
   CURVATURE_FRAC``, ``kappa = KAPPA``) is below ``L1`` (every eigenvalue of
   the mean curvature is ``<= L1``), and ``d <= MAX_PRECOND_D`` (a ``d x d``
   release and ``eigh``). Equivalently ``d < d* = n^2 q rho / kappa^2``
   (:func:`precond_crossover_d`). Options: ``curvature_frac = 0.03``,
   ``kappa = 6`` (the transform's default is 3; with the fitted m, 6 was
   better on the shared datasets, as in the non-private tuning of kappa),
   ``learning_rate = 1``, tail average of the last half, and ``m`` from
   :func:`precond_steps`.
2. Otherwise **averaged DP-GD** (:func:`dpjax.transforms.dp_gd`, step
   ``1/L1 = 4``, last-half average) with ``T`` from :func:`dp_gd_steps`. At
   the crossover the floor equals ``L1``, the preconditioner is (about) the
   scalar ``1/L1 = 4``, and precond-gd *is* DP-GD with step 4 that wastes
   3% of the budget on an uninformative release: the two branches meet.

Both step rules grow with the signal-to-noise ratio ``s = n sqrt(rho)``, the
inverse of the gradient-noise scale ``sqrt(T) / (n sqrt(2 rho))`` per
step up to constants.

Limits: the best number of steps also depends on the data (how far the
optimum is from the start), which the rule cannot see. ``python
benchmarks/auto_fit.py`` re-scores every rule of this form on the selection
runs of the frontier benchmark and lists the cells that pull it in opposite
directions (w8a and ijcnn1 at eps = 1: same ``n sqrt(rho)``, m = 640 against
160 at kappa = 6); no rule of this form keeps every cell of the shared
datasets within 1.25x of the best tuned method, and this one is the best of
them (worst cell 1.40). ``docs/results.md`` gives the cells it misses.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from dpjax import _validate
from dpjax import accounting as accounting_lib
from dpjax import transforms

__all__ = [
    "AutoChoice",
    "CURVATURE_FRAC",
    "KAPPA",
    "MAX_PRECOND_D",
    "SUPPORTED_LOSSES",
    "choose",
    "dp_gd_steps",
    "precond_crossover_d",
    "precond_steps",
]

# loss -> (L0: per-example gradient norm bound, L1: per-example curvature
# Frobenius-norm bound), for rows with ||x|| <= 1.
_LOSS_CONSTANTS = {"logistic": (1.0, 0.25)}
SUPPORTED_LOSSES = tuple(_LOSS_CONSTANTS)

CURVATURE_FRAC = 0.03  # share of rho for the one curvature release (tuned non-privately once).
KAPPA = 6.0  # eigenvalue floor multiplier (a non-privately tuned value; see precond_steps).
MAX_PRECOND_D = 4096  # above this a d x d release and eigh are not worth their cost.

# Step rules, fitted on the shared datasets (see precond_steps / dp_gd_steps):
# steps = base * 2^k, k = round(a + b log10(n sqrt(rho)) + c log10(d)), clamped.
_PRECOND_RULE = (2.75, 0.875, -0.5)
_PRECOND_M = (10, 2560)  # the range of m the rule may return (fitted on 10..640).
_GD_RULE = (-3.25, 2.625, 0.0)
_GD_T = (12, 6400)


def _doubling_rule(n: int, d: int, rho: float, rule, base: float, lo: int, hi: int) -> int:
  """``base * 2^round(a + b log10(n sqrt(rho)) + c log10(d))``, clamped; validates n, d, rho."""
  n = _validate.positive_int(n, "n")
  d = _validate.positive_int(d, "d")
  rho = _validate.positive_float(rho, "rho")
  a, b, c = rule
  k = round(a + b * math.log10(n * math.sqrt(rho)) + c * math.log10(d))
  return int(min(max(round(base * 2.0**k), lo), hi))


class AutoChoice(NamedTuple):
  """What :func:`choose` picked, and why.

  ``dpjax.fit(data, c.algorithm, rho=c.rho, steps=c.steps, average=c.average,
  **c.options)`` runs it (``dpjax.fit(data, "auto", ...)`` does exactly that).
  """

  algorithm: str  # "precond-gd" or "dp-gd".
  steps: int  # m or T.
  average: str  # the output rule, "last-half".
  options: dict  # transform options (kappa, curvature_frac, learning_rate).
  rho: float  # the total zCDP budget the choice was made for.
  eigenvalue_floor: float  # kappa sqrt(2d) sigma_H of the precond-gd release (public).
  reason: str  # one sentence: which branch and why.


def _snr(n: int, rho: float) -> float:
  return n * math.sqrt(rho)


def precond_crossover_d(n: int, rho: float, *, kappa: float = KAPPA,
                        curvature_frac: float = CURVATURE_FRAC) -> float:
  """``d* = n^2 q rho / kappa^2``: above it the precond-gd floor exceeds ``L1``.

  The floor ``kappa sqrt(2d) sigma_H`` with ``sigma_H = (L1/n)/sqrt(2 q rho)``
  equals ``L1`` exactly at ``d = d*`` (``L1`` cancels), for any loss.

  Examples:
    >>> from dpjax.training import auto
    >>> round(auto.precond_crossover_d(30956, 0.0166))  # a1a.t at eps = 1
    13256
  """
  n = _validate.positive_int(n, "n")
  rho = _validate.positive_float(rho, "rho")
  return n**2 * curvature_frac * rho / kappa**2


def precond_steps(n: int, d: int, rho: float) -> int:
  """m of the precond-gd branch, from the public ``n``, ``d`` and ``rho``.

  ``m = 10 * 2^k``, ``k = round(2.75 + 0.875 log10(n sqrt(rho)) - 0.5
  log10(d))``, clamped to ``[10, 2560]``, for ``kappa = 6``, last-half
  averaging and 3% of ``rho`` on the release. The three constants minimise
  the worst ratio (excess loss at the rule's m over the best precond-gd
  configuration of the cell) over the 21 cells of the shared datasets
  (synthetic, a5a, a1a.t, phishing, ijcnn1, a9a, w8a at eps = 0.1, 1, 10;
  10 repeats; grid m = 10 .. 640, kappa in {1.5, 3, 6}, average none /
  last-half / last-quarter). The worst cell was w8a at eps = 1 (1.43: it
  wants m = 640, the rule gives 320); the geometric mean was 1.10. Above
  m = 640 the rule is an extrapolation.

  Examples:
    >>> from dpjax.training import auto
    >>> auto.precond_steps(30956, 124, 0.0166)  # a1a.t at eps = 1
    320
  """
  return _doubling_rule(n, d, rho, _PRECOND_RULE, 10, *_PRECOND_M)


def dp_gd_steps(n: int, d: int, rho: float) -> int:
  """T of the averaged DP-GD branch, from the public ``n``, ``d`` and ``rho``.

  ``T = round(12.5 * 2^k)``, ``k = round(-3.25 + 2.625 log10(n sqrt(rho)))``
  (so T grows about like ``(n sqrt(rho))^0.8``), clamped to ``[12, 6400]``,
  for step ``1/L1 = 4`` and last-half averaging. The constants minimise the
  worst ratio to the best tuned method (DP-GD with step 4 or 16, T = 12 ..
  3200, final or averaged, and every precond-gd configuration) over the
  cells of the shared datasets near or past the crossover (``d* < 8 d``
  at ``kappa = 6``: synthetic, a5a, phishing, a1a.t, a9a at eps = 0.1 and
  a5a at eps = 1; 10 repeats): worst 1.19, geometric mean 1.08. Where
  the branch is used (``d >= d*``) the budget is small for the dimension,
  which is the regime these cells cover.

  Examples:
    >>> from dpjax.training import auto
    >>> auto.dp_gd_steps(10000, 100, 0.000237)  # synthetic at eps = 0.1
    50
  """
  return _doubling_rule(n, d, rho, _GD_RULE, 12.5, *_GD_T)


def choose(
    *,
    n: int,
    d: int,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    accounting: str = "gaussian",
    loss: str = "logistic",
) -> AutoChoice:
  """Chooses the algorithm and all its hyperparameters from public quantities only.

  Args:
    n: number of examples (public).
    d: number of features (public).
    epsilon: target epsilon (> 0), converted to zCDP at ``delta`` with
      ``accounting``; or
    rho: the total zCDP budget (> 0). Exactly one of the two.
    delta: in (0, 1); default ``1 / n**2``.
    accounting: the conversion, one of ``dpjax.accounting.METHODS``.
    loss: the loss, one of :data:`SUPPORTED_LOSSES` (its constants ``L0``,
      ``L1`` enter the rule).

  Returns:
    An :class:`AutoChoice`.

  Raises:
    ValueError, TypeError: a bad or missing argument, or an unsupported loss.

  Examples:
    >>> from dpjax.training import auto
    >>> c = auto.choose(n=30956, d=124, epsilon=1.0)
    >>> c.algorithm, c.steps, c.average, c.options["kappa"]
    ('precond-gd', 320, 'last-half', 6.0)
  """
  if not isinstance(loss, str) or loss not in _LOSS_CONSTANTS:
    raise ValueError(
        f"auto supports loss in {SUPPORTED_LOSSES} only (its rule uses that loss's gradient "
        f"and curvature bounds), got {loss!r}; for another loss pick an algorithm and its "
        "steps yourself."
    )
  n = _validate.positive_int(n, "n")
  d = _validate.positive_int(d, "d")
  rho, _, _ = accounting_lib.resolve_budget(n, epsilon=epsilon, rho=rho, delta=delta,
                                            method=accounting)
  _, l1 = _LOSS_CONSTANTS[loss]
  # The precond-gd release's own noise (one release; its share does not depend on the steps).
  budget = transforms.precond_budget(rho, steps=1, curvature_frac=CURVATURE_FRAC)
  sigma_h = transforms.precond_noise(n=n, budget=budget, curvature_norm_bound=l1).curvature_std
  floor = transforms.eigenvalue_floor(sigma_h, d=d, kappa=KAPPA)
  d_star = precond_crossover_d(n, rho)
  if d <= MAX_PRECOND_D and floor < l1:
    m = precond_steps(n, d, rho)
    return AutoChoice(
        "precond-gd", m, "last-half",
        {"kappa": KAPPA, "curvature_frac": CURVATURE_FRAC, "learning_rate": 1.0},
        rho, floor,
        f"precond-gd: d = {d} < d* = n^2 q rho / kappa^2 = {d_star:.4g} (the curvature floor "
        f"{floor:.3g} is below L1 = {l1:g}), m = {m} steps for n sqrt(rho) = "
        f"{_snr(n, rho):.4g}.",
    )
  t = dp_gd_steps(n, d, rho)
  why = (f"d = {d} > {MAX_PRECOND_D} (a d x d release is too costly)" if d > MAX_PRECOND_D else
         f"d = {d} >= d* = {d_star:.4g} (the curvature floor {floor:.3g} is above L1 = {l1:g}: "
         "the released matrix is mostly noise)")
  return AutoChoice(
      "dp-gd", t, "last-half", {"learning_rate": 1.0 / l1}, rho, floor,
      f"averaged DP-GD: {why}; T = {t} steps for n sqrt(rho) = {_snr(n, rho):.4g}.",
  )
