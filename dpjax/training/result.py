"""The one result type of :func:`dpjax.fit` and :func:`dpjax.training.fit_levels`."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np


__all__ = ["FitResult", "from_arrays", "standard_error"]


class FitResult(NamedTuple):
  """Result of :func:`fit`. Arrays are host numpy arrays.

  Attributes:
    params: ``[repeats, d]`` the output of each repeat: the final iterate
      ``w_T`` for ``average="none"``, else the mean of the last iterates
      (:func:`dpjax.transforms.averaging.window_size`).
    losses: ``[repeats, steps + 1]`` mean loss at the iterates ``w_0 .. w_T``
      in the data's dtype (reporting only: never fed back into the run, not
      private).
    excess_losses: ``[repeats]`` float64 ``loss(params) - loss_star``, the loss
      evaluated on the host in float64 (so values below float32 rounding,
      ~1e-8, are meaningful).
    excess_loss_mean: mean of ``excess_losses``.
    excess_loss_se: ``std(ddof=1) / sqrt(repeats)`` (0 for one repeat).
    loss_star: the optimum mean loss (without ridge).
    ridge: ridge used to find ``loss_star``: 0, or ``SEPARABLE_RIDGE`` when the
      data is (quasi-)separable (then ``loss_star`` is the loss of the ridge
      minimiser, as in the reference code, and excess losses can be slightly
      negative).
    rho: total zCDP budget of the run.
    epsilon, delta: the (epsilon, delta)-DP guarantee under ``accounting``.
    accounting: the conversion method (one of ``accounting.METHODS``).
    algorithm: one of ``ALGORITHMS``.
    n, d, steps, repeats: problem size and run length.
    seconds_compile: lowering + compilation of the whole run; ``0.0`` when
      the program compiled by an earlier call with the same configuration
      and data shapes was reused (:mod:`dpjax.compiled`).
    seconds_run: the compiled run (all repeats), until the results are ready
      (the fastest of ``timing_runs`` executions).
    guard_resets: ``[repeats]`` int, how often the divergence guard fired.
    rho_spent: ``[repeats]`` float64 total charged to each repeat's
      accountant (read from the final transform states; equals ``rho``).
    opt_state: the final transform states, each leaf with a leading
      ``repeats`` axis (``optax.tree.get(opt_state, "rho")`` works).
    average: the output rule, one of ``AVERAGES``.
    final_excess_losses: ``[repeats]`` float64 excess loss of the final
      iterate ``w_T`` (equal to ``excess_losses`` for ``average="none"``), so
      one run reports both the averaged and the final-iterate output.
    gradient_evaluations: full-data gradients of one repeat (``steps``).
    curvature_evaluations: ``d x d`` curvature matrices (and ``eigh``) of one
      repeat: ``steps`` for the Newton variants, the number of releases for
      precond-gd, 0 for DP-GD.
    options: the transform options the run used (those passed, or those
      ``"auto"`` chose; defaults not listed).
    auto_reason: for ``algorithm="auto"`` the chooser's one-line reason
      (``dpjax.training.auto.AutoChoice.reason``), else ``""``.
    batch_size: examples per step of a streaming algorithm (``b``), or the
      expected Poisson batch size of ``"dp-sgd"`` / ``"newton-minibatch"``
      (their gradient sample); 0 for the full-batch algorithms.
    loss: ``"logistic"``; ``"least_squares"`` for a streaming algorithm; a
      :data:`dpjax.problem.losses.LOSSES` name for a general-loss fit;
      ``"l2_logistic"`` for ``"cubic-newton"``.
    private: False for the non-private baselines ``"damped-newton"`` and
      ``"dp-gd-oracle"`` (:mod:`dpjax.baselines`), whose step sizes read the
      data without noise, and for any run with
      ``disable_noise_for_testing=True`` (no noise at all; it also emits
      :class:`dpjax.PrivacyLeakWarning`); ``epsilon`` then only describes the
      budget the noise would have had.
    curvature_batch_size: the expected curvature sample of
      ``"newton-minibatch"``; 0 otherwise.
    seed: the explicit ``seed`` the run was given (it reproduces the run bit
      for bit, and anyone who knows it can regenerate the noise), or ``None``:
      the key came from fresh OS entropy and nothing about it was recorded.
    neighbouring: the neighbouring relation the guarantee holds for, with
      ``n`` public: ``"zero-out"`` (the default; one row replaced by the null
      row, which contributes nothing) or ``"replace-one"`` (by any row). The
      Poisson methods (``"dp-sgd"``, ``"newton-minibatch"``) are accounted
      for adding or removing one example, which covers zero-out (a null row
      adds nothing to any sampled sum) but not replace-one; AOP is calibrated
      for replace-one, which covers both.
    standardization: with ``fit(..., standardize=...)``, the released
      :class:`dpjax.mechanisms.standardize.Standardization` (its ``rho`` is included in
      ``rho``, ``epsilon`` and ``rho_spent``; apply it to test rows with its
      ``transform``); else ``None``.

  ``rho`` is ``None`` for the runs not calibrated in zCDP: the RDP-accounted
  Poisson methods (``accounting == "rdp"``, ``epsilon`` is the calibration
  target; their accountants hold the RDP curve, ``rho_spent`` is 0) and AOP
  (an (epsilon, delta) mechanism; ``steps`` 0, ``losses`` ``[repeats, 1]``).

  For a streaming algorithm (``STREAMING_ALGORITHMS``, :mod:`dpjax.training.streaming`)
  ``losses[:, t]`` (``t < T``) is the mean loss of batch ``t`` before step
  ``t`` (progressive validation) and ``losses[:, T]`` the full-data loss at
  the output; ``gradient_evaluations`` counts minibatch steps; the divergence
  guard is not used (every iterate is projected onto the ball), so
  ``guard_resets`` is 0.
  """

  params: np.ndarray
  losses: np.ndarray
  excess_losses: np.ndarray
  excess_loss_mean: float
  excess_loss_se: float
  loss_star: float
  ridge: float
  rho: float | None
  epsilon: float
  delta: float
  accounting: str
  algorithm: str
  n: int
  d: int
  steps: int
  repeats: int
  seconds_compile: float
  seconds_run: float
  guard_resets: np.ndarray
  rho_spent: np.ndarray
  opt_state: Any
  average: str
  final_excess_losses: np.ndarray
  gradient_evaluations: int
  curvature_evaluations: int
  options: dict
  auto_reason: str
  batch_size: int = 0
  loss: str = "logistic"
  private: bool = True
  curvature_batch_size: int = 0
  seed: int | None = None
  neighbouring: str = "zero-out"
  standardization: Any = None


def standard_error(excess: np.ndarray) -> float:
  """``std(ddof=1) / sqrt(repeats)`` of the excess losses; 0 for one repeat."""
  r = int(np.shape(excess)[0])
  return float(np.std(excess, ddof=1) / math.sqrt(r)) if r > 1 else 0.0


def from_arrays(*, params: np.ndarray, excess_losses: np.ndarray, auto_reason: str = "",
                **fields: Any) -> FitResult:
  """A :class:`FitResult` whose mean, standard error, ``repeats`` and ``d`` follow from the arrays.

  ``params`` ``[repeats, d]``, ``excess_losses`` ``[repeats]``; ``fields``
  are the remaining :class:`FitResult` fields (``opt_state`` for the states).
  """
  params = np.asarray(params)
  excess = np.asarray(excess_losses)
  return FitResult(params=params, excess_losses=excess, excess_loss_mean=float(np.mean(excess)),
                   excess_loss_se=standard_error(excess), repeats=int(excess.shape[0]),
                   d=int(params.shape[1]), auto_reason=auto_reason, **fields)
