"""A whole private training run, compiled: ``dpjax.fit`` (module ``dpjax.training``).

``fit(data, algorithm, ...)`` runs DP-GD, curvature-preconditioned DP-GD
(:func:`dpjax.transforms.dp_precond_gd`), one of the four double-noise Newton
variants (Ganesh et al. NeurIPS 2023, arXiv:2305.13209, Algorithm 3 and
Sec. 5.2),
or ``"auto"`` (:mod:`dpjax.auto`: the method and its settings chosen from
public quantities only) on a logistic-regression dataset, ``repeats`` times with independent noise,
and reports the excess loss against the exact non-private optimum
(:func:`dpjax.problem.solve.logistic_optimum`, section 5.4).

The run is one ``jax.jit`` of a ``jax.vmap`` over repeats of a ``lax.scan``
over the steps: no Python loop per step, one compilation per call. Each step
makes one fused pass over the data at ``w_t``
(:func:`dpjax.problem.glm.logistic_grad_and_curvature` for Newton,
:func:`dpjax.problem.glm.logistic_loss_and_grad` for DP-GD), whose loss gives the
(non-private, reporting-only) trajectory for free, then the transform's
update, ``optax.apply_updates`` and the public divergence guard.
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _common
from dpjax.problem import _neighbouring
from dpjax import _validate
from dpjax import accounting as accounting_lib
from dpjax import auto as auto_lib
from dpjax.mechanisms import budget as budget_lib
from dpjax import compiled
from dpjax import data as data_lib
from dpjax import drivers
from dpjax.problem import glm
from dpjax import leaks
from dpjax.mechanisms import noise
from dpjax.problem import solve
from dpjax.problem.solve import SEPARABLE_RIDGE, optimum_loss
from dpjax.mechanisms import standardize as standardize_lib
from dpjax import streaming
from dpjax import transforms
from dpjax.transforms import averaging

__all__ = [
    "ALGORITHMS",
    "AUTO",
    "AVERAGES",
    "INITS",
    "DEFAULT_GUARD_RADIUS",
    "SEPARABLE_RIDGE",
    "STREAMING_ALGORITHMS",
    "DRIVER_ALGORITHMS",
    "FitResult",
    "fit",
    "fit_levels",
    "fit_step",
    "make_transform",
    "optimum_loss",
]

ALGORITHMS = ("dp-gd", "precond-gd", "hess-clip", "hess-add", "qu-clip", "qu-add")
# `algorithm=AUTO` lets dpjax.auto.choose pick one of ALGORITHMS and all its
# hyperparameters from public quantities (n, d, the budget).
AUTO = "auto"
# Single-pass streaming algorithms (dpjax.streaming): DP online-to-batch and
# its baselines, in minibatches of `batch_size`.
STREAMING_ALGORITHMS = streaming.ALGORITHMS
# Poisson-minibatch methods, private cubic Newton and the paper's baselines
# (dpjax.drivers); DP-GD and Newton-add also take a non-logistic loss there.
DRIVER_ALGORITHMS = drivers.ALGORITHMS
INITS = ("zeros", "random-unit")
AVERAGES = averaging.AVERAGES

# The output of each algorithm when `average` is not given: precond-gd returns
# the mean of the last half of its iterates (the best output in our tuning,
# benchmarks/results/privacy_utility_frontier.md), the paper's algorithms their final iterate.
_DEFAULT_AVERAGE = {"precond-gd": "last-half"}

# Public divergence bound on ||w_t||: a constant, never derived from w* or the
# data. See `fit` for why 1e4 never fires on a sane run.
DEFAULT_GUARD_RADIUS = 1e4


# Arguments that `fit` sets itself; they cannot be passed as algorithm options.
_RESERVED = ("n", "rho", "steps", "rho_per_step", "key", "curvature", "modification", "d")

# algorithm -> (factory name, fixed keyword arguments, curvature or None).
# precond-gd evaluates its curvature (the Hessian at the current iterate; at
# w = 0 it is X^T X / (4n)) only on its release steps.
_ALGORITHM_SPECS = {
    "dp-gd": ("dp_gd", {}, None),
    "precond-gd": ("dp_precond_gd", {}, "hessian"),
    "hess-clip": ("dp_newton", {"curvature": "hessian", "modification": "clip"}, "hessian"),
    "hess-add": ("dp_newton", {"curvature": "hessian", "modification": "add"}, "hessian"),
    "qu-clip": ("dp_newton", {"curvature": "qu", "modification": "clip"}, "qu"),
    "qu-add": ("dp_newton", {"curvature": "qu", "modification": "add"}, "qu"),
}


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
      (``dpjax.auto.AutoChoice.reason``), else ``""``.
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

  For a streaming algorithm (``STREAMING_ALGORITHMS``, :mod:`dpjax.streaming`)
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


def _check_seed(seed: Any) -> int | None:
  """``None`` (fresh OS entropy) or an explicit seed, an int in ``[0, 2**64)``."""
  return None if seed is None else _common.check_seed(seed, "seed")


def _check_options(algorithm: str, factory: Callable, options: dict) -> None:
  reserved = sorted(set(options) & set(_RESERVED))
  if reserved:
    raise TypeError(
        f"fit sets {reserved} itself (from the data, the budget, seed and algorithm "
        f"{algorithm!r}); remove them from the algorithm options."
    )
  accepted = [
      p.name for p in inspect.signature(factory).parameters.values()
      if p.kind == inspect.Parameter.KEYWORD_ONLY and p.name not in _RESERVED
  ]
  unknown = sorted(set(options) - set(accepted))
  if unknown:
    raise TypeError(
        f"unknown option(s) {unknown} for algorithm {algorithm!r}; it accepts {accepted}."
    )


def fit(
    data: Any,
    algorithm: str,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    steps: int | None = None,
    repeats: int = 1,
    seed: int | None = None,
    accounting: str = "gaussian",
    init: str = "zeros",
    guard_radius: float = DEFAULT_GUARD_RADIUS,
    timing_runs: int = 1,
    average: str | None = None,
    batch_size: int | None = None,
    loss: str = "logistic",
    curvature_batch_size: int | None = None,
    loss_options: dict | None = None,
    epsilon_budget: float | None = None,
    neighbouring: str = "zero-out",
    standardize: standardize_lib.PrivateStandardizer | None = None,
    **algorithm_options: Any,
) -> FitResult:
  """Runs a private algorithm ``repeats`` times in one compiled call.

  Algorithms (``ALGORITHMS``): ``"dp-gd"`` is
  :func:`dpjax.transforms.dp_gd`; ``"precond-gd"`` is
  :func:`dpjax.transforms.dp_precond_gd`, whose curvature (the Hessian at the
  current iterate, ``X^T X / (4n)`` at ``w = 0``) is computed only on its
  release steps (step 0, and every ``refresh_every`` steps if given);
  ``"hess-clip"``, ``"hess-add"``, ``"qu-clip"`` and ``"qu-add"`` are
  :func:`dpjax.transforms.dp_newton` with ``curvature`` ``"hessian"``/``"qu"``
  and ``modification`` ``"clip"``/``"add"`` (Algorithm 3 and Sec. 5.2;
  adaptive private lambda by default). Each transform gets ``n``, the total
  ``rho`` and ``steps``; ``algorithm_options`` are forwarded to it (e.g.
  ``learning_rate`` for DP-GD; ``kappa``, ``curvature_frac``,
  ``refresh_every`` for precond-gd; ``min_eigenvalue``, ``grad_frac``,
  ``trace_frac``, ``trace_coeff`` for Newton).

  ``algorithm="auto"`` (``AUTO``) calls :func:`dpjax.auto.choose` with ``n``,
  ``d`` and the budget only (never the data values, so the choice costs no
  privacy) and runs what it picks; it takes no ``steps``, ``average`` or
  options. The result's ``algorithm``, ``steps``, ``average`` and
  ``options`` say what ran, ``auto_reason`` why.

  **Streaming.** ``STREAMING_ALGORITHMS`` (``"otb"``, ``"otb-optimistic"``,
  ``"otb-strongly-convex"``, ``"otb-parameter-free"``,
  ``"single-pass-dp-sgd"``, ``"dp-ftrl"``) make a single pass over the data
  in a seeded random order, ``batch_size`` fresh examples per step, on the
  ball ``B(0, radius)``, for ``loss="logistic"`` or ``"least_squares"``; see
  :mod:`dpjax.streaming` for their options, privacy and reporting.

  **Minibatch, cubic Newton, general losses, baselines** (:mod:`dpjax.drivers`):
  ``"dp-sgd"`` and ``"newton-minibatch"`` sample a Poisson minibatch of
  expected size ``batch_size`` (and, for Newton, an independent curvature
  sample of expected size ``curvature_batch_size``) and are calibrated to
  ``epsilon`` with the RDP accountant; ``"cubic-newton"`` (options ``mu``,
  ``radius``, ``max_inner_steps``) minimises the L2-regularised logistic
  loss on a ball; ``"aop"``, ``"damped-newton"`` (not private),
  ``"damped-newton-private"`` and ``"dp-gd-oracle"`` (not private) are the
  paper's baselines (:mod:`dpjax.baselines`). ``"dp-gd"``, ``"hess-add"`` and
  ``"qu-add"`` also fit any loss of :data:`dpjax.problem.losses.LOSSES`
  (``loss="pseudo_huber"``, ``loss_options={"delta": 1.0}``, ...) through
  per-example clipping.

  **Output.** ``average`` (one of ``AVERAGES``) picks what a run returns:
  ``"none"``, the final iterate ``w_T``; ``"last-half"`` / ``"last-quarter"``,
  the mean of the last ``ceil(T/2)`` / ``ceil(T/4)`` iterates (after the
  guard). Averaging is post-processing of released iterates: it costs no
  privacy. Default (``None``): ``"last-half"`` for precond-gd, ``"none"``
  otherwise. The final iterate's excess loss is reported either way.

  **Privacy budget.** Exactly one of ``epsilon`` and ``rho``. ``delta``
  defaults to ``n**-2`` (as in Ganesh et al. 2023, Sec. 6). ``epsilon`` is converted to zCDP with
  ``accounting.epsilon_to_zcdp(epsilon, delta, accounting)``; with ``rho``
  given, the reported epsilon is ``zcdp_to_epsilon(rho, delta, accounting)``.
  The default ``"gaussian"`` conversion is exact here, not just a bound: every
  mechanism in DP-GD and in the double-noise Newton method (gradient noise,
  trace noise, direction noise) is a Gaussian mechanism whose noise scale is
  fixed by public quantities (n, the bounds, the budget split) and by outputs
  already released (the noisy gradient norm, the noisy trace). Each step is
  then a ``mu_i``-GDP mechanism given the past, with ``mu_i^2 = 2 rho_i``, and
  the adaptive composition of such mechanisms is exactly mu-GDP with
  ``mu^2 = sum_i mu_i^2 = 2 rho`` (Dong, Roth & Su 2019, Cor. 2.5; a
  Gaussian mechanism is rho-zCDP iff it is sqrt(2 rho)-GDP). The (epsilon,
  delta) curve of mu-GDP is exact (Balle & Wang 2018), so it is the tightest
  valid conversion. The other methods (``"cks"``, ...) are valid for any
  zCDP mechanism and give a smaller rho for the same epsilon.

  **Neighbouring relation.** ``n`` is public (every mean divides by it) and
  neighbours differ in one row: ``neighbouring="zero-out"`` (the default)
  replaces it by the null row (``x = 0``: zero gradient, zero curvature),
  ``"replace-one"`` by any other row. Each transform calibrates its noise to
  the relation (:mod:`dpjax.problem._neighbouring`; e.g. the gradient noise doubles,
  the curvature matrix's grows by ``sqrt(2)``, the trace's does not change);
  the result's ``neighbouring`` records it. The streaming methods take both;
  the Poisson methods only zero-out (see :class:`FitResult`).

  **Budget enforcement** (:mod:`dpjax.mechanisms.budget`). A plan whose epsilon at
  ``delta`` (``epsilon``, or ``rho`` converted) exceeds ``epsilon_budget``
  raises :class:`dpjax.mechanisms.budget.BudgetExceededError` (a ``ValueError``) before
  anything compiles. After the run, a step that a transform refused inside
  the compiled program (its ``budget_exhausted`` or tree ``overflow`` flag)
  raises it too, and so does any repeat whose accountant reports more than
  ``epsilon`` (or the cap): a cut-short or overspent run never returns.

  **Randomness and seeds.** The guarantee holds only if nobody can
  regenerate the noise. With ``seed=None`` (the default) the run's key is
  drawn from the operating system's entropy source (``secrets``) and fills
  every word of the PRNG key; nothing about it is recorded
  (``FitResult.seed`` is ``None``), so two default calls on the same data
  give different releases. An explicit ``seed``, an int in ``[0, 2**64)``,
  reproduces the run bit for bit (same platform and JAX version) and is
  recorded in ``FitResult.seed``; but a seed that anyone else knows (in a
  script, a log, the result itself) voids the guarantee: with it the noise
  can be regenerated and subtracted from the release. Pass one for tests,
  debugging and benchmarks, never for a release. Every bit of the seed is
  used (``jax.random.key`` alone keeps only the low 32 bits of an int); for
  seeds below ``2**32`` the key equals ``jax.random.key(seed)``, so results
  made with such seeds before reproduce.

  **Private standardization** (:mod:`dpjax.mechanisms.standardize`). With
  ``standardize=PrivateStandardizer(bounds=..., budget_share=s)`` the data is
  raw features (e.g. ``load_libsvm(path, preprocess="none")``; the row-norm
  contract is then checked after the standardization). The total budget
  (``epsilon`` or ``rho`` at ``delta``) is resolved first; ``s * rho`` releases
  the DP column means and standard deviations (public ``bounds``, values
  clipped to them), each row is standardized with them and scaled into the
  unit ball on its own, and the algorithm runs on those rows with the
  remaining ``(1 - s) * rho``. Released once per call, shared by all
  repeats. The result's ``rho``, ``epsilon`` and ``rho_spent`` are the
  pipeline's totals and ``standardization`` holds the release. Only the
  zCDP-accounted full-batch ``ALGORITHMS`` and ``"auto"`` take it.

  **Run.** Per-repeat keys are ``jax.random.split(key, repeats)`` of the
  run's key; each is split into an init key and the transform's key, so
  repeats are independent. ``init="zeros"`` starts at 0; ``"random-unit"``
  at a uniformly random unit vector per repeat (public randomness, as the
  reference code).

  **Testing without noise.** The algorithm option
  ``disable_noise_for_testing=True`` (accepted by the transforms that have
  it) draws no noise at all: the release is the non-private algorithm. The
  result then says ``private=False`` and :class:`dpjax.PrivacyLeakWarning`
  is issued.

  **Divergence guard.** After each update, if ``||w_{t+1}|| > guard_radius``
  or ``w_{t+1}`` is not finite, the iterate is reset to ``w_0`` (the transform
  state, its accountant included, carries on). It reads only the released
  iterate and a public constant, so it is post-processing and costs no
  privacy. Unlike the reference code's ``100 ||w*|| + 100 ||w0|| + 100``, the
  bound never depends on ``w*`` or on the data. The default 1e4 is > 10x the
  largest ``||w*||`` of the paper's datasets (about 800, w8a) yet, because
  ``||x_i|| <= 1``, every margin and so every loss stays below ``1e4 + log 2``:
  losses and iterates are always finite (the reference overflowed on w8a at
  eps=10, T=5). It fires only on a diverging run.

  **Reporting.** ``losses`` (at ``w_0..w_T``) and the excess losses are not
  private; they are for evaluation only. The optimum comes from
  :func:`optimum_loss` (float64 Newton, ridge 1e-9 on separable data, cached
  per dataset). ``seconds_compile`` is lowering + compilation of the jitted
  run (``0.0`` when an earlier call with the same configuration and data
  shapes compiled it: each static configuration compiles once per process,
  :mod:`dpjax.compiled`); ``seconds_run`` the compiled call until the results
  are ready (data transfer to the device excluded).

  **Sharding.** If ``x`` is a ``jax.Array`` sharded over several devices
  (e.g. ``NamedSharding(mesh, P("data", None))``, rows split along ``n``),
  the compiled run gets ``x`` with that same sharding and ``y`` with its own
  (a ``jax.Array`` on the same devices) or split like the rows of ``x``; the
  keys and the parameters are replicated. The sums over examples then run on
  the shards (partial sums and an all-reduce), and the result equals the
  unsharded run's up to float rounding. This holds for the full-batch
  algorithms (and :func:`fit_levels`), the Poisson, cubic and general-loss
  drivers and the streaming algorithms; the baselines run on one device.
  Validation, the optimum and the reporting use a host copy of the data: a
  multi-host array (not fully addressable, after
  ``jax.distributed.initialize()``) is gathered to every process first
  (``multihost_utils.process_allgather``), so each host needs room for the
  whole dataset. JAX itself refuses a row split that does not divide ``n``.

  Args:
    data: ``dpjax.data.Dataset`` or ``(x, y)``: ``x`` float32 (or float64 with
      x64 enabled) ``[n, d]`` with row norms ``<= 1``; ``y`` in {-1, +1}.
    algorithm: one of ``ALGORITHMS``, ``STREAMING_ALGORITHMS`` or ``"auto"``.
    epsilon: target epsilon (> 0), or
    rho: total zCDP budget (> 0).
    delta: in (0, 1); default ``1 / n**2``.
    steps: number of steps T (>= 1); omitted for ``"auto"``.
    repeats: independent runs (>= 1), vmapped.
    seed: ``None`` (default: a fresh key from OS entropy, the private
      choice) or an integer in ``[0, 2**64)`` for all randomness, which makes
      the run reproducible and voids the guarantee for anyone who knows it
      (see **Randomness and seeds**).
    accounting: the (epsilon, delta) <-> zCDP conversion, one of
      ``dpjax.accounting.METHODS``.
    init: ``"zeros"`` or ``"random-unit"``.
    guard_radius: public bound on ``||w_t||`` (> 0, and > 1 for
      ``"random-unit"``).
    timing_runs: how many times the compiled run executes (>= 1);
      ``seconds_run`` is the fastest. The first execution of a new program
      pays one-time costs (up to 3x the run on short Newton fits), so
      benchmarks pass 2 or more. Every execution of one call uses the same
      keys (drawn once, also for ``seed=None``), so the results do not depend
      on it.
    average: the output rule (see **Output**), or None for the default.
    batch_size: streaming algorithms only (then required): ``b``, examples
      per step; ``steps`` defaults to ``n // b`` and ``steps * b <= n``.
    loss: ``"logistic"``; streaming algorithms also ``"least_squares"``;
      ``"dp-gd"``, ``"hess-add"``, ``"qu-add"`` any of ``dpjax.problem.losses.LOSSES``.
    curvature_batch_size: ``"newton-minibatch"`` only: the expected size of
      its curvature sample (default ``batch_size``).
    loss_options: the public parameters of a non-logistic ``loss``
      (:func:`dpjax.problem.losses.get_loss`, e.g. ``{"regularization": 1e-3}``).
    epsilon_budget: an optional cap (> 0) on the run's epsilon at ``delta``;
      see **Budget enforcement**.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"``; see
      **Neighbouring relation**.
    standardize: a :class:`dpjax.mechanisms.standardize.PrivateStandardizer`, or None;
      see **Private standardization**.
    **algorithm_options: forwarded to the transform factory.

  Returns:
    A :class:`FitResult`.

  Raises:
    ValueError, TypeError: eagerly, before any compilation, for any bad
      argument (data contract, budget, unknown names, transform options such
      as a clip ``min_eigenvalue <= 1/(4n)``).
    dpjax.mechanisms.budget.BudgetExceededError: the plan exceeds ``epsilon_budget``
      (before compiling), or the run refused a step or overspent (after it).

  Examples:
    >>> import dpjax
    >>> from dpjax import accounting, data
    >>> ds = data.synthetic(0, n=1000, d=5)
    >>> res = dpjax.fit(ds, "hess-clip", epsilon=1.0, steps=4, repeats=3)
    >>> res.params.shape, res.losses.shape, res.excess_losses.shape
    ((3, 5), (3, 5), (3,))
    >>> res.delta, res.rho == accounting.epsilon_to_zcdp(1.0, 1e-6, "gaussian")
    (1e-06, True)
    >>> (res.rho_spent / res.rho).round(9).tolist(), res.guard_resets.tolist()
    ([1.0, 1.0, 1.0], [0, 0, 0])
    >>> bool(res.excess_loss_mean < res.losses[0, 0] - res.loss_star)
    True
    >>> res.seed is None  # the default: a fresh key from OS entropy, nothing recorded
    True
  """
  arguments = dict(locals())  # for standardize=: the same call on the standardized rows.
  # --- Eager validation: nothing below compiles or runs before it passes.
  algorithm = _validate.choice(algorithm, "algorithm",
                               ALGORITHMS + STREAMING_ALGORITHMS + DRIVER_ALGORITHMS + (AUTO,))
  loss = _validate.choice(loss, "loss",
                          tuple(dict.fromkeys(streaming.LOSSES + drivers.losses_lib.LOSSES)))
  seed = _check_seed(seed)
  neighbouring = _check_neighbouring(algorithm, neighbouring)
  if epsilon_budget is not None:
    _check_plan_budget(data, epsilon=epsilon, rho=rho, delta=delta, method=accounting,
                       epsilon_budget=epsilon_budget)
  if standardize is not None:  # a private standardization first, charged to the same total
    return standardize_lib.run_fit(fit, arguments, algorithms=ALGORITHMS + (AUTO,))
  result = _checked(_fit(
      data, algorithm, epsilon=epsilon, rho=rho, delta=delta, steps=steps, repeats=repeats,
      seed=seed, accounting=accounting, init=init, guard_radius=guard_radius,
      timing_runs=timing_runs, average=average, batch_size=batch_size, loss=loss,
      curvature_batch_size=curvature_batch_size, loss_options=loss_options,
      algorithm_options=algorithm_options, neighbouring=neighbouring)._replace(
          neighbouring=neighbouring), epsilon_budget)
  if _noise_disabled(algorithm_options, "fit"):
    result = result._replace(private=False)
  return result


def _noise_disabled(options: dict, what: str) -> bool:
  """Whether the run drew no noise (``disable_noise_for_testing``); if so, warns.

  Called after the run: the flag reached the transform (or baseline) factory,
  which accepts only a bool. The warning points at the caller of ``what``.
  """
  if not bool(options.get("disable_noise_for_testing", False)):
    return False
  leaks.warn(f"{what}(..., disable_noise_for_testing=True) drew no noise: its release is not "
             "differentially private (the result says private=False). Use it in tests only.",
             stacklevel=3)
  return True


def _check_neighbouring(algorithm: str, neighbouring: Any) -> str:
  """``neighbouring``, validated for ``algorithm`` (before any work)."""
  neighbouring = _neighbouring.check(neighbouring)
  if neighbouring == "replace-one" and algorithm in drivers.POISSON_ALGORITHMS:
    raise ValueError(
        f"neighbouring='replace-one' is not offered for the Poisson-subsampled {algorithm!r}: "
        "its Renyi-DP accounting is for adding or removing one example, which covers "
        "zero-out but not replace-one. Pass neighbouring='zero-out', or use a full-batch "
        f"method ({', '.join(ALGORITHMS)}) or a streaming one for replace-one.")
  return neighbouring


def _relation_options(algorithm: str, neighbouring: str, options: dict) -> dict:
  """``options`` plus the transform's ``neighbouring`` where it is not its default."""
  if neighbouring == "zero-out" or algorithm == "aop":  # AOP: calibrated for replace-one.
    return options
  return {**options, "neighbouring": neighbouring}


def _least_slack(steps: int, d: int, options: dict | None = None) -> float:
  """The floating-point noise slack of at least ``steps`` releases of ``d`` coordinates.

  Every iterative method releases at least ``d`` noise coordinates per step
  (:mod:`dpjax.mechanisms.noise`): the least slack a run pays, reserved out of delta when
  the budget is resolved (a no-op at any ordinary epsilon) and used to refuse
  an epsilon no finite sampler can certify before any work. None for a run
  that draws no exact noise (the non-private test and benchmark switches).
  """
  options = options or {}
  if options.get("disable_noise_for_testing") or options.get("unsafe_float_noise"):
    return 0.0
  return int(steps) * int(d) * noise.tv_per_coordinate()


def _check_plan_budget(data, *, epsilon, rho, delta, method, epsilon_budget) -> None:
  """``fit``'s plan check: the run's epsilon at its delta against ``epsilon_budget``."""
  n = int(np.shape(data[0])[0]) if isinstance(data, tuple) and np.ndim(data[0]) == 2 else None
  if n is None or n < 1:
    n = data_lib.validate_dataset(data).n  # raises the data contract's error
  _, planned, delta = accounting_lib.resolve_budget(n, epsilon=epsilon, rho=rho, delta=delta,
                                                    method=method)
  budget_lib.check_plan(planned, epsilon_budget, delta=delta)


def _checked(result: FitResult, epsilon_budget: float | None) -> FitResult:
  """``fit``'s run check: no refused step, no repeat over its budget (:mod:`dpjax.mechanisms.budget`)."""
  budget_lib.check_spent(result.opt_state, epsilon=result.epsilon, delta=result.delta,
                         method=result.accounting, epsilon_budget=epsilon_budget,
                         what=f"fit({result.algorithm!r})")
  return result


def _fit(data, algorithm, *, epsilon, rho, delta, steps, repeats, seed, accounting, init,
         guard_radius, timing_runs, average, batch_size, loss, curvature_batch_size,
         loss_options, algorithm_options, neighbouring="zero-out") -> FitResult:
  """``fit`` after its name checks: dispatches to the driver, streaming or scan path."""
  if algorithm != AUTO:  # auto: added to the options it chooses.
    algorithm_options = _relation_options(algorithm, neighbouring, algorithm_options)
  if algorithm in DRIVER_ALGORITHMS or (
      algorithm in drivers.GENERAL_LOSS_ALGORITHMS and loss in drivers.losses_lib.LOSSES
      and loss != "logistic"):
    return _fit_driver(data, algorithm, epsilon=epsilon, rho=rho, delta=delta, steps=steps,
                       repeats=repeats, seed=seed, accounting=accounting, init=init,
                       guard_radius=guard_radius, timing_runs=timing_runs, average=average,
                       batch_size=batch_size, curvature_batch_size=curvature_batch_size,
                       loss=loss, loss_options=loss_options, options=algorithm_options)
  if curvature_batch_size is not None or loss_options is not None:
    raise TypeError("curvature_batch_size applies to 'newton-minibatch' and loss_options to a "
                    "non-logistic loss with dp-gd / hess-add / qu-add; remove them.")
  if algorithm in STREAMING_ALGORITHMS:
    return _fit_stream(data, algorithm, epsilon=epsilon, rho=rho, delta=delta, steps=steps,
                       repeats=repeats, seed=seed, accounting=accounting, init=init,
                       guard_radius=guard_radius, timing_runs=timing_runs, average=average,
                       batch_size=batch_size, loss=loss, options=algorithm_options)
  if batch_size is not None:
    raise TypeError(f"batch_size applies to the streaming algorithms {STREAMING_ALGORITHMS} "
                    f"only; {algorithm!r} uses all n examples every step. Remove batch_size.")
  if loss != "logistic":
    raise ValueError(f"loss={loss!r}: the full-batch algorithm {algorithm!r} fits logistic "
                     f"regression; least squares runs with {STREAMING_ALGORITHMS}, and "
                     f"{drivers.GENERAL_LOSS_ALGORITHMS} take a loss of dpjax.problem.losses.LOSSES "
                     f"{drivers.losses_lib.LOSSES}.")
  if algorithm == AUTO:
    n, d = _auto_shape(data, steps, average, algorithm_options)
    level = accounting_lib.resolve_budget(n, epsilon=epsilon, rho=rho, delta=delta,
                                          method=accounting,
                                          slack=_least_slack(1, d, algorithm_options))
    choice = _auto_choice(n, d, level, accounting)
    plan = _plan(data, choice.algorithm, steps=choice.steps, repeats=repeats, seed=seed,
                 init=init, guard_radius=guard_radius, timing_runs=timing_runs,
                 average=choice.average,
                 options=_relation_options(choice.algorithm, neighbouring, choice.options),
                 reason=choice.reason)
  else:
    plan = _plan(data, algorithm, steps=steps, repeats=repeats, seed=seed, init=init,
                 guard_radius=guard_radius, timing_runs=timing_runs, average=average,
                 options=algorithm_options)
    level = accounting_lib.resolve_budget(plan.n, epsilon=epsilon, rho=rho, delta=delta,
                                           method=accounting,
                                           slack=_least_slack(plan.steps, plan.d, plan.options))
  rho, epsilon, delta = level
  make_transform(plan.algorithm, key=0, rho=rho, **plan.kwargs)  # constructor checks, eagerly.
  return _execute(plan, [(rho, epsilon, delta, accounting)], batched=False,
                  key=_common.run_key(plan.seed))[0]


def _fit_stream(data, algorithm, *, epsilon, rho, delta, steps, repeats, seed, accounting, init,
                guard_radius, timing_runs, average, batch_size, loss, options) -> FitResult:
  """``fit`` for a streaming algorithm (:mod:`dpjax.streaming`)."""
  if init != "zeros":
    raise ValueError(f"init={init!r}: the streaming algorithms start at w = 0, the centre of "
                     "their ball domain; remove init.")
  if guard_radius != DEFAULT_GUARD_RADIUS:
    raise ValueError("guard_radius does not apply to the streaming algorithms: every iterate "
                     "is projected onto the ball of radius `radius`; remove guard_radius.")
  plan = streaming.check_plan(data, algorithm, batch_size=batch_size, steps=steps, loss=loss,
                              repeats=repeats, average=average, options=options)
  seed = _check_seed(seed)
  timing_runs = _validate.positive_int(timing_runs, "timing_runs")
  rho, epsilon, delta = accounting_lib.resolve_budget(plan.n, epsilon=epsilon, rho=rho,
                                                      delta=delta, method=accounting,
                                                      slack=_least_slack(plan.steps, plan.d,
                                                                         plan.options))
  streaming.check_transform(plan, rho)
  out = streaming.execute(plan, rho=rho, seed=seed, timing_runs=timing_runs)
  excess = out["excess_losses"]
  se = float(np.std(excess, ddof=1) / math.sqrt(plan.repeats)) if plan.repeats > 1 else 0.0
  return FitResult(
      params=out["params"], losses=out["losses"], excess_losses=excess,
      excess_loss_mean=float(np.mean(excess)), excess_loss_se=se,
      loss_star=float(out["loss_star"]), ridge=float(out["ridge"]), rho=float(rho),
      epsilon=float(epsilon), delta=float(delta), accounting=accounting, algorithm=algorithm,
      n=int(plan.n), d=int(plan.d), steps=plan.steps, repeats=plan.repeats,
      seconds_compile=out["seconds_compile"], seconds_run=out["seconds_run"],
      guard_resets=np.zeros(plan.repeats, np.int64), rho_spent=out["rho_spent"],
      opt_state=out["state"], average=plan.average,
      final_excess_losses=out["final_excess_losses"], gradient_evaluations=plan.steps,
      curvature_evaluations=0, options=dict(plan.options), auto_reason="",
      batch_size=plan.batch_size, loss=plan.loss, seed=seed)


def _fit_driver(data, algorithm, *, epsilon, rho, delta, steps, repeats, seed, accounting, init,
                guard_radius, timing_runs, average, batch_size, curvature_batch_size, loss,
                loss_options, options) -> FitResult:
  """``fit`` for :data:`DRIVER_ALGORITHMS` and the general losses (:mod:`dpjax.drivers`)."""
  if init != "zeros":
    raise ValueError(f"init={init!r}: {algorithm!r} starts at w = 0; remove init.")
  seed = _check_seed(seed)
  out = drivers.run(data, algorithm, epsilon=epsilon, rho=rho, delta=delta, steps=steps,
                    repeats=repeats, seed=seed, accounting=accounting, timing_runs=timing_runs,
                    average=average, batch_size=batch_size,
                    curvature_batch_size=curvature_batch_size, loss=loss,
                    loss_options=loss_options, guard_radius=guard_radius, options=options,
                    optimum=optimum_loss)
  excess = out.excess_losses
  r = int(excess.shape[0])
  se = float(np.std(excess, ddof=1) / math.sqrt(r)) if r > 1 else 0.0
  return FitResult(
      params=out.params, losses=out.losses, excess_losses=excess,
      excess_loss_mean=float(np.mean(excess)), excess_loss_se=se, loss_star=out.loss_star,
      ridge=out.ridge, rho=out.rho, epsilon=out.epsilon, delta=out.delta,
      accounting=out.accounting, algorithm=algorithm, n=out.n, d=int(out.params.shape[1]),
      steps=out.steps, repeats=r, seconds_compile=out.seconds_compile,
      seconds_run=out.seconds_run, guard_resets=out.guard_resets, rho_spent=out.rho_spent,
      opt_state=out.state, average=out.average, final_excess_losses=out.final_excess_losses,
      gradient_evaluations=out.gradient_evaluations,
      curvature_evaluations=out.curvature_evaluations, options=out.options, auto_reason="",
      batch_size=int(batch_size or 0), loss=out.loss, private=out.private,
      curvature_batch_size=int(curvature_batch_size or batch_size or 0)
      if algorithm == "newton-minibatch" else 0, seed=seed)


def _auto_shape(data, steps, average, options) -> tuple[int, int]:
  """``(n, d)`` for ``algorithm="auto"``, which must get no tuning arguments."""
  given = sorted(options) + [k for k, v in (("steps", steps), ("average", average))
                             if v is not None]
  if given:
    raise TypeError(
        f"algorithm='auto' chooses the steps, the output average and every option itself, "
        f"from public quantities only; remove {given}, or name an algorithm from "
        f"{ALGORITHMS} to set them."
    )
  # Only the shape is needed here; `_plan` then validates the data once, before
  # any work (the rule is arithmetic on n and d).
  if (isinstance(data, tuple) and len(data) == 2 and np.ndim(data[0]) == 2 and len(data[0])
      and np.shape(data[0])[1]):
    n, d = np.shape(data[0])
    return int(n), int(d)
  ds = data_lib.validate_dataset(data)  # raises the data contract's error
  return int(ds.n), int(ds.d)


def _auto_choice(n: int, d: int, level: tuple, method: str) -> auto_lib.AutoChoice:
  rho, _, delta = level
  return auto_lib.choose(n=n, d=d, rho=rho, delta=delta, accounting=method)


def fit_levels(
    data: Any,
    algorithm: str,
    *,
    epsilons: Sequence[float] | None = None,
    rhos: Sequence[float] | None = None,
    delta: float | None = None,
    steps: int | None = None,
    repeats: int = 1,
    seed: int | None = None,
    accounting: str | Sequence[str] = "gaussian",
    init: str = "zeros",
    guard_radius: float = DEFAULT_GUARD_RADIUS,
    timing_runs: int = 1,
    average: str | None = None,
    neighbouring: str = "zero-out",
    **algorithm_options: Any,
) -> list[FitResult]:
  """:func:`fit` at several privacy levels in one compiled program.

  The run is ``jit(vmap over (level, repeat) pairs (scan over steps))``: one
  compilation serves every level, which is what a privacy-utility sweep
  needs (compiling :func:`fit` once per level costs more than the runs for
  short Newton fits). The budget reaches the transform as a traced scalar, so
  each level's noise scales are computed in the graph from its own ``rho``
  and charged to its own accountant in the data's dtype (see
  :func:`dpjax.transforms.dp_gd`); ``rho_spent`` reports what was charged.

  With a ``seed``, every level uses the same per-repeat keys and starting
  points as :func:`fit` with that seed: level ``i`` reproduces
  ``fit(..., rho=rhos[i], seed=seed)`` up to float rounding of the noise
  scales, and the levels share their random numbers (common random numbers:
  differences between levels are not blurred by independent noise draws).
  That is for comparisons, not for release: levels that share their noise
  ``z`` can be subtracted (``g + s1 z`` and ``g + s2 z`` give ``z``, hence the
  un-noised ``g``), so releasing two of them is not private at any budget.
  With ``seed=None`` (the default) every level draws its own keys from one
  fresh key from OS entropy: independent noise, so releasing several levels
  composes (their ``rho`` add up). Seeds are as in :func:`fit`: a given seed
  reproduces the sweep bit for bit and is recorded in every result's
  ``seed``, and a seed anyone else knows voids the guarantee (the noise can
  be regenerated and subtracted).
  ``disable_noise_for_testing=True`` gives ``private=False`` in every result
  and emits :class:`dpjax.PrivacyLeakWarning`, as in :func:`fit`.

  With ``algorithm="auto"`` each level gets its own choice; levels with the
  same choice share one program, so ``seconds_*`` are per program.

  Args:
    data, algorithm, steps, repeats, seed, init, guard_radius, timing_runs,
      neighbouring, **algorithm_options: as in :func:`fit`.
    epsilons: target epsilons (each > 0), or
    rhos: total zCDP budgets (each > 0); exactly one of the two, non-empty.
    delta: in (0, 1); default ``1 / n**2``, shared by all levels.
    accounting: one conversion method for all levels, or one per level (e.g.
      the same epsilon under ``"paper"`` and ``"gaussian"``).

  Returns:
    One :class:`FitResult` per level, in order. ``seconds_compile`` and
    ``seconds_run`` are those of the whole program (all levels and repeats)
    and are the same in every result.

  Raises:
    ValueError, TypeError: eagerly, as :func:`fit`, for any bad level too.

  Examples:
    >>> import dpjax
    >>> from dpjax import data, training
    >>> ds = data.synthetic(0, n=1000, d=5)
    >>> res = training.fit_levels(ds, "dp-gd", epsilons=[0.5, 0.5, 5.0], steps=20,
    ...                           repeats=4, accounting=["paper", "gaussian", "gaussian"])
    >>> [r.accounting for r in res], [round(r.epsilon, 6) for r in res]
    (['paper', 'gaussian', 'gaussian'], [0.5, 0.5, 5.0])
    >>> bool(res[0].rho < res[1].rho), res[2].excess_losses.shape
    (True, (4,))
    >>> bool(res[2].excess_loss_mean < res[1].excess_loss_mean)
    True
  """
  algorithm = _validate.choice(algorithm, "algorithm", ALGORITHMS + (AUTO,))
  seed = _check_seed(seed)
  neighbouring = _check_neighbouring(algorithm, neighbouring)
  if algorithm == AUTO:
    n, d = _auto_shape(data, steps, average, algorithm_options)
    least_slack = _least_slack(1, d, algorithm_options)
  else:
    plan = _plan(data, algorithm, steps=steps, repeats=repeats, seed=seed, init=init,
                 guard_radius=guard_radius, timing_runs=timing_runs, average=average,
                 options=_relation_options(algorithm, neighbouring, algorithm_options))
    n = plan.n
    least_slack = _least_slack(plan.steps, plan.d, algorithm_options)
  if (epsilons is None) == (rhos is None):
    raise ValueError(
        "pass exactly one of epsilons=[...] and rhos=[...]; got "
        + ("neither." if epsilons is None else "both.")
    )
  values = epsilons if rhos is None else rhos
  values_name = "epsilons" if rhos is None else "rhos"
  if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
    raise TypeError(f"{values_name} must be a sequence of numbers, got {type(values).__name__}.")
  values = list(values)
  if not values:
    raise ValueError(f"{values_name} is empty; pass at least one privacy level.")
  if isinstance(accounting, str):
    methods = [accounting] * len(values)
  else:
    methods = list(accounting)
    if len(methods) != len(values):
      raise ValueError(
          f"accounting has {len(methods)} entries but {values_name} has {len(values)}; pass "
          "one method for all levels or one per level."
      )
  levels = []
  for i, (value, method) in enumerate(zip(values, methods)):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
      raise TypeError(f"{values_name}[{i}] must be a number, got {type(value).__name__}.")
    eps, rho = (value, None) if rhos is None else (None, value)
    try:
      levels.append((*accounting_lib.resolve_budget(n, epsilon=eps, rho=rho, delta=delta,
                                                   method=method, slack=least_slack), method))
    except ValueError as err:
      raise ValueError(f"privacy level {i}: {err}") from None
  if algorithm != AUTO:
    groups = [(plan, list(range(len(levels))))]
  else:
    # One program per distinct choice; levels that share a choice share it.
    by_choice: dict = {}
    for i, level in enumerate(levels):
      c = _auto_choice(n, d, level[:3], level[3])
      key = (c.algorithm, c.steps, c.average, tuple(sorted(c.options.items())), c.reason)
      by_choice.setdefault(key, (c, []))[1].append(i)
    groups = [
        (_plan(data, c.algorithm, steps=c.steps, repeats=repeats, seed=seed, init=init,
               guard_radius=guard_radius, timing_runs=timing_runs, average=c.average,
               options=_relation_options(c.algorithm, neighbouring, c.options),
               reason=c.reason), idx)
        for c, idx in by_choice.values()
    ]
  for group_plan, idx in groups:
    for i in idx:  # constructor checks, eagerly.
      make_transform(group_plan.algorithm, key=0, rho=levels[i][0], **group_plan.kwargs)
  key = _common.run_key(seed)
  # A seed: one key for every level and program (common random numbers). None: independent
  # keys per level, since levels that share their noise z can be subtracted: two releases
  # g + s1 z and g + s2 z give z, hence g, exactly.
  level_keys = None if seed is not None else list(jax.random.split(key, len(levels)))
  results: list = [None] * len(levels)
  for group_plan, idx in groups:
    for i, res in zip(idx, _execute(
        group_plan, [levels[i] for i in idx], batched=True, key=key,
        level_keys=None if level_keys is None else [level_keys[i] for i in idx])):
      results[i] = res._replace(neighbouring=neighbouring)
  if _noise_disabled(algorithm_options, "fit_levels"):
    results = [r._replace(private=False) for r in results]
  return results


def make_transform(algorithm: str, **kwargs: Any) -> tuple[Any, str | None]:
  """``(transform, curvature)`` that :func:`fit` builds for ``algorithm``.

  ``kwargs`` go to the factory (``n``, the budget, ``steps``, ``key`` and the
  algorithm's options); ``curvature`` is ``None`` for first-order methods,
  else the SOI kind (``"hessian"`` or ``"qu"``) the step must compute.

  Examples:
    >>> from dpjax import training
    >>> tx, curvature = training.make_transform("qu-add", n=100, rho=1.0, steps=2, key=0)
    >>> curvature
    'qu'
  """
  algorithm = _validate.choice(algorithm, "algorithm", ALGORITHMS)
  factory_name, fixed, curvature = _ALGORITHM_SPECS[algorithm]
  return getattr(transforms, factory_name)(**fixed, **kwargs), curvature


def fit_step(tx: Any, curvature: str | None, w0: jax.Array,
             guard_radius: float = DEFAULT_GUARD_RADIUS,
             matrix: jax.Array | None = None) -> Callable:
  """One iteration of a :func:`fit` run: ``step(w, state, x, y)``.

  The fused data pass at ``w`` (:func:`dpjax.problem.glm.logistic_loss_and_grad`, or
  :func:`dpjax.problem.glm.logistic_grad_and_curvature` with ``curvature``), the
  transform's update, ``optax.apply_updates`` and the public divergence
  guard (reset to ``w0`` when ``||w|| > guard_radius`` or not finite).
  ``matrix``: the curvature at ``w``, computed by the caller (e.g. once for
  all repeats at a shared start); then only the loss and gradient are
  computed here.

  Returns:
    ``step(w, state, x, y) -> (w_next, state, loss_at_w, diverged)``.
  """

  def step(w, state, x, y):
    if matrix is not None:
      loss, grad = glm.logistic_loss_and_grad(w, x, y)
      updates, state = tx.update(grad, state, w, curvature_matrix=matrix)
    elif curvature is None:
      loss, grad = glm.logistic_loss_and_grad(w, x, y)
      updates, state = tx.update(grad, state, w)
    else:
      loss, grad, here = glm.logistic_grad_and_curvature(w, x, y, curvature)
      updates, state = tx.update(grad, state, w, curvature_matrix=here)
    w = optax.apply_updates(w, updates)
    # Public guard: `not (norm <= R)` is also True for NaN.
    diverged = jnp.logical_not(jnp.linalg.norm(w) <= guard_radius)
    return jnp.where(diverged, w0, w), state, loss, diverged

  return step


class _Plan(NamedTuple):
  """A validated run, everything but the privacy level."""

  algorithm: str
  x: np.ndarray
  y: np.ndarray
  n: int
  d: int
  steps: int
  repeats: int
  seed: int | None  # the explicit seed, or None: a fresh key from OS entropy.
  init: str
  guard_radius: float
  timing_runs: int
  average: str
  release_every: int | None  # precond-gd: steps between curvature releases; else None.
  kwargs: dict  # n, steps and the algorithm's options (make_transform adds the rest).
  options: dict  # the algorithm's options alone.
  reason: str  # auto's reason, or "".
  placement: Any = None  # the caller's multi-device sharding (_common.data_placement), or None.


def _plan(data, algorithm, *, steps, repeats, seed, init, guard_radius, timing_runs,
          average, options, reason="") -> _Plan:
  """The eager checks shared by :func:`fit` and :func:`fit_levels`."""
  algorithm = _validate.choice(algorithm, "algorithm", ALGORITHMS)
  if steps is None:
    raise ValueError(
        f"steps is required for algorithm {algorithm!r}: pass steps=<T> (the number of "
        "iterations), or algorithm='auto' to have it chosen from public quantities."
    )
  placement = _common.data_placement(data)  # the caller's sharding, kept for the run.
  ds = data_lib.validate_dataset(_common.gather_data(data))
  if not (_validate.is_concrete(ds.x) and _validate.is_concrete(ds.y)):
    raise TypeError("fit runs on the host; pass concrete data, not values traced under jit.")
  x = np.asarray(jax.device_get(ds.x))
  y = np.asarray(jax.device_get(ds.y))
  _common.check_host_float(x)
  y = y.astype(x.dtype)  # labels are exactly +-1 in any float dtype.
  n, d = x.shape
  steps = _validate.positive_int(steps, "steps")
  repeats = _validate.positive_int(repeats, "repeats")
  seed = _check_seed(seed)
  timing_runs = _validate.positive_int(timing_runs, "timing_runs")
  init = _validate.choice(init, "init", INITS)
  guard_radius = _validate.positive_float(guard_radius, "guard_radius")
  if init == "random-unit" and guard_radius <= 1.0:
    raise ValueError(
        f"guard_radius={guard_radius:g} must exceed ||w0|| = 1 for init='random-unit', "
        "or every step would reset; pass a larger guard_radius."
    )
  if average is None:
    average = _DEFAULT_AVERAGE.get(algorithm, "none")
  average = _validate.choice(average, "average", AVERAGES)
  _check_options(algorithm, getattr(transforms, _ALGORITHM_SPECS[algorithm][0]), options)
  release_every = _release_every(algorithm, steps, options)
  return _Plan(algorithm, x, y, n, d, steps, repeats, seed, init, guard_radius, timing_runs,
               average, release_every, dict(n=n, steps=steps, **options), dict(options),
               reason, placement)


def _release_every(algorithm: str, steps: int, options: dict) -> int | None:
  """precond-gd: the steps between its curvature releases (``refresh_every``; one release by
  default); None for the other algorithms."""
  if algorithm != "precond-gd":
    return None
  refresh = options.get("refresh_every")
  return steps if refresh is None else _validate.positive_int(refresh, "refresh_every")


def repeat_fn(algorithm: str, kwargs: dict, *, d: int, init: str = "zeros",
              average: str = "none", guard_radius: float = DEFAULT_GUARD_RADIUS) -> Callable:
  """One repeat of a :func:`fit` run, as a pure function to ``jit``/``vmap``.

  Args:
    algorithm: one of :data:`ALGORITHMS`.
    kwargs: ``n``, ``steps`` and the algorithm's options (what
      :func:`make_transform` gets besides the key and the budget).
    d: the number of features.
    init: one of :data:`INITS`.
    average: one of :data:`AVERAGES`.
    guard_radius: the public divergence guard of :func:`fit_step`.

  Returns:
    ``one_repeat(key, rho, x, y, h0=None) -> (output, w_T, losses, resets,
    state)``: the output (``w_T`` or the tail average), the final iterate, the
    ``[steps + 1]`` mean losses at ``w_0 .. w_T`` (reporting only), the number
    of guard resets and the final transform state. ``key`` gives the start
    (``init="random-unit"``) and the transform's key, as in :func:`fit`;
    ``h0`` is precond-gd's first curvature matrix when the caller computed it
    once for many repeats from the shared start 0.
  """
  steps = kwargs["steps"]
  averaged = average != "none"
  window = averaging.window_size(steps, average)
  release_every = _release_every(algorithm, steps, kwargs)

  def one_repeat(key, rho, x, y, h0=None):
    init_key, tx_key = jax.random.split(key)
    if init == "zeros":
      w0 = jnp.zeros((d,), x.dtype)
    else:
      w0 = noise.random_direction(init_key, d, x.dtype)
    tx, curvature = make_transform(algorithm, key=tx_key, rho=rho, **kwargs)
    state = tx.init(w0)

    def advance(one_step):
      # One iteration plus the bookkeeping: guard resets and the tail mean of
      # the (guarded) iterates, which is post-processing of released values.
      def body(carry, _):
        w, state, resets, t, avg, avg_lo = carry
        w, state, loss, diverged = one_step(w, state, x, y)
        t = t + 1
        if averaged:
          avg, avg_lo = averaging.fold_iterate(avg, avg_lo, w, t, steps=steps, window=window)
        return (w, state, resets + diverged.astype(jnp.int32), t, avg, avg_lo), loss

      return body

    zero = jnp.zeros((), jnp.int32)
    carry = (w0, state, zero, zero, w0, jnp.zeros_like(w0))
    if release_every is None:
      carry, losses = jax.lax.scan(
          advance(fit_step(tx, curvature, w0, guard_radius)), carry, None, length=steps)
    else:
      # precond-gd: the curvature pass runs only on the release steps 0, r, 2r, ...
      # The first one is at w_0; from the shared start 0 its matrix h0 was
      # computed once for all repeats (outside the vmap).
      release = advance(fit_step(tx, curvature, w0, guard_radius))
      first_release = release if h0 is None else advance(
          fit_step(tx, curvature, w0, guard_radius, matrix=h0))
      plain = advance(fit_step(tx, None, w0, guard_radius))

      def block(carry, length, release_step):
        carry, first = release_step(carry, None)
        if length == 1:
          return carry, first[None]
        carry, rest = jax.lax.scan(plain, carry, None, length=length - 1)
        return carry, jnp.concatenate([first[None], rest])

      first_len = min(release_every, steps)
      carry, losses = block(carry, first_len, first_release)
      full, rest = divmod(steps - first_len, release_every)
      if full:
        carry, more = jax.lax.scan(lambda c, _: block(c, release_every, release), carry, None,
                                   length=full)
        losses = jnp.concatenate([losses, more.reshape(-1)])
      if rest:
        carry, tail = block(carry, rest, release)
        losses = jnp.concatenate([losses, tail])
    w, state, resets, _, avg, _ = carry
    losses = jnp.concatenate([losses, glm.logistic_loss(w, x, y)[None]])
    return (avg if averaged else w), w, losses, resets, state

  return one_repeat


def _execute(plan: _Plan, levels: list, *, batched: bool, key: jax.Array,
             level_keys: list | None = None) -> list[FitResult]:
  """Compiles and runs ``plan`` at ``levels`` = [(rho, epsilon, delta, method)].

  ``batched=False`` (one level) closes over the Python ``rho``: exact host
  calibration and charges. ``batched=True`` vmaps over a traced ``rho``.
  ``key`` is the run's key (``_common.run_key(plan.seed)``), split over the
  repeats and shared by every level (common random numbers); or, with
  ``level_keys`` (one key per level), level ``i``'s repeats split
  ``level_keys[i]`` instead: independent noise in every level.
  """
  d, init, release_every = plan.d, plan.init, plan.release_every
  x, y = plan.x, plan.y
  loss_star, ridge = optimum_loss(x, y)
  one_repeat = repeat_fn(plan.algorithm, plan.kwargs, d=d, init=init, average=plan.average,
                         guard_radius=plan.guard_radius)

  def shared_h0(x, y):
    # precond-gd from the shared start 0: the first release's matrix is the
    # same for every repeat and level (X^T X / (4n)); compute it once.
    if release_every is None or init != "zeros":
      return None
    curvature = _ALGORITHM_SPECS[plan.algorithm][2]
    return glm.logistic_grad_and_curvature(jnp.zeros((d,), x.dtype), x, y, curvature)[2]

  keys = _common.place_replicated(jax.random.split(key, plan.repeats), plan.placement)
  xj, yj = _common.place_data(x, y, plan.placement)  # sharded as the caller's x, or one device.
  if batched:
    # One flat vmap over (level, repeat) pairs, not nested vmaps: the batching
    # rules of the fused data pass and of the Newton solve then see the whole
    # batch (nested, the inner rule's work is re-batched by the outer vmap,
    # measured ~3x slower for Newton at 11 levels x 10 repeats).
    num_levels = len(levels)
    if level_keys is None:
      flat_keys = jnp.tile(keys, num_levels)
    else:
      flat_keys = _common.place_replicated(
          jnp.concatenate([jax.random.split(k, plan.repeats) for k in level_keys]),
          plan.placement)
    flat_rhos = jnp.repeat(jnp.asarray([lv[0] for lv in levels], x.dtype), plan.repeats)
    flat = jax.vmap(one_repeat, in_axes=(0, 0, None, None, None))

    def run_fn(flat_keys, flat_rhos, x, y):
      out = flat(flat_keys, flat_rhos, x, y, shared_h0(x, y))
      return jax.tree.map(lambda a: a.reshape((num_levels, plan.repeats) + a.shape[1:]), out)

    run = jax.jit(run_fn)
    args = (flat_keys, flat_rhos, xj, yj)
  else:
    rho = levels[0][0]
    per_key = jax.vmap(lambda key, x, y, h0: one_repeat(key, rho, x, y, h0),
                       in_axes=(0, None, None, None))
    run = jax.jit(lambda keys, x, y: per_key(keys, x, y, shared_h0(x, y)))
    args = (keys, xj, yj)
  jax.block_until_ready(args)

  # Everything run_fn closes over, as Python values: an identical configuration
  # reuses the program compiled by an earlier call (dpjax.compiled).
  program = ("fit", plan.algorithm, plan.kwargs, d, init, plan.average, plan.guard_radius,
             release_every, plan.repeats, batched, len(levels) if batched else levels[0][0],
             make_transform, repeat_fn)
  out, seconds_compile, seconds_run = compiled.compile_and_time(run, args, plan.timing_runs,
                                                                key=program)
  out = jax.device_get(out)
  if not batched:
    out = jax.tree.map(lambda a: a[None], out)
  # Every level's output and final-iterate losses in one float64 pass (one
  # conversion of x).
  points = np.stack([np.asarray(out[0]), np.asarray(out[1])])  # [2, levels, repeats, d]
  all_losses = streaming.host_losses(points.reshape(-1, d), x, y, "logistic")
  all_losses = all_losses.reshape(points.shape[:3]) - loss_star
  results = []
  for i, (rho, epsilon, delta, method) in enumerate(levels):
    params, _, losses, resets, state = jax.tree.map(lambda a: a[i], out)
    results.append(_result(plan, params, losses, resets, state, all_losses[0, i],
                           all_losses[1, i], rho=rho, epsilon=epsilon,
                           delta=delta, method=method, loss_star=loss_star, ridge=ridge,
                           seconds_compile=seconds_compile, seconds_run=seconds_run))
  return results


def _result(plan, params, losses, resets, state, excess, final_excess, *, rho, epsilon, delta,
            method, loss_star, ridge, seconds_compile, seconds_run) -> FitResult:
  repeats = plan.repeats
  params = np.asarray(params)
  se = float(np.std(excess, ddof=1) / math.sqrt(repeats)) if repeats > 1 else 0.0
  return FitResult(
      params=params,
      losses=np.asarray(losses),
      excess_losses=excess,
      excess_loss_mean=float(np.mean(excess)),
      excess_loss_se=se,
      loss_star=float(loss_star),
      ridge=float(ridge),
      rho=float(rho),
      epsilon=float(epsilon),
      delta=float(delta),
      accounting=method,
      algorithm=plan.algorithm,
      n=int(plan.n),
      d=int(plan.d),
      steps=plan.steps,
      repeats=repeats,
      seconds_compile=seconds_compile,
      seconds_run=seconds_run,
      guard_resets=np.asarray(resets, np.int64),
      rho_spent=np.atleast_1d(accounting_lib.spent_rho(state.accountant)),
      opt_state=state,
      average=plan.average,
      final_excess_losses=final_excess,
      gradient_evaluations=plan.steps,
      curvature_evaluations=_curvature_evaluations(plan),
      options=dict(plan.options),
      auto_reason=plan.reason,
      seed=plan.seed,
  )


def _curvature_evaluations(plan: _Plan) -> int:
  if plan.release_every is not None:
    return -(-plan.steps // plan.release_every)
  return plan.steps if _ALGORITHM_SPECS[plan.algorithm][2] is not None else 0
