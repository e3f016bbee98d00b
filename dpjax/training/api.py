"""``dpjax.fit``: a whole private training run, compiled.

``fit(data, algorithm, ...)`` resolves the budget once, checks every argument
before any work, and runs the algorithm through its data pass: the full-batch
scan (:mod:`dpjax.training.loop`), the Poisson-minibatch, cubic-Newton,
general-loss and baseline drivers (:mod:`dpjax.training.drivers`) or the
single-pass streaming runs (:mod:`dpjax.training.streaming`), and returns one
:class:`dpjax.training.FitResult`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpjax import _common
from dpjax import _validate
from dpjax import accounting as accounting_lib
from dpjax import data as data_lib
from dpjax import leaks
from dpjax.mechanisms import budget as budget_lib
from dpjax.mechanisms import standardize as standardize_lib
from dpjax.problem import solve
from dpjax.training import auto as auto_lib
from dpjax.training import drivers
from dpjax.training import loop
from dpjax.training import registry
from dpjax.training import streaming
from dpjax.training.registry import (ALGORITHMS, AUTO, DEFAULT_GUARD_RADIUS,
                                     STREAMING_ALGORITHMS)
from dpjax.training.result import FitResult

__all__ = ["fit"]


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

  ``algorithm="auto"`` (``AUTO``) calls :func:`dpjax.training.auto.choose` with ``n``,
  ``d`` and the budget only (never the data values, so the choice costs no
  privacy) and runs what it picks; it takes no ``steps``, ``average`` or
  options. The result's ``algorithm``, ``steps``, ``average`` and
  ``options`` say what ran, ``auto_reason`` why.

  **Streaming.** ``STREAMING_ALGORITHMS`` (``"otb"``, ``"otb-optimistic"``,
  ``"otb-strongly-convex"``, ``"otb-parameter-free"``,
  ``"single-pass-dp-sgd"``, ``"dp-ftrl"``) make a single pass over the data
  in a seeded random order, ``batch_size`` fresh examples per step, on the
  ball ``B(0, radius)``, for ``loss="logistic"`` or ``"least_squares"``; see
  :mod:`dpjax.training.streaming` for their options, privacy and reporting.

  **Minibatch, cubic Newton, general losses, baselines** (:mod:`dpjax.training.drivers`):
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
  algorithm = registry.entry(algorithm).name
  loss = _validate.choice(loss, "loss",
                          tuple(dict.fromkeys(streaming.LOSSES + drivers.losses_lib.LOSSES)))
  seed = registry.check_seed(seed)
  neighbouring = registry.check_neighbouring(algorithm, neighbouring)
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
  if noise_disabled(algorithm_options, "fit"):
    result = result._replace(private=False)
  return result


def noise_disabled(options: dict, what: str) -> bool:
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
    algorithm_options = registry.relation_options(algorithm, neighbouring, algorithm_options)
  runner = registry.REGISTRY[algorithm].runner
  if runner == "drivers" or (
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
  if runner == "streaming":
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
    n, d = auto_shape(data, steps, average, algorithm_options)
    level = accounting_lib.resolve_budget(
        n, epsilon=epsilon, rho=rho, delta=delta, method=accounting,
        slack=registry.least_slack(1, d, algorithm_options))
    choice = auto_choice(n, d, level, accounting)
    plan = loop.plan(
        data, choice.algorithm, steps=choice.steps, repeats=repeats, seed=seed, init=init,
        guard_radius=guard_radius, timing_runs=timing_runs, average=choice.average,
        options=registry.relation_options(choice.algorithm, neighbouring, choice.options),
        reason=choice.reason)
  else:
    plan = loop.plan(data, algorithm, steps=steps, repeats=repeats, seed=seed, init=init,
                     guard_radius=guard_radius, timing_runs=timing_runs, average=average,
                     options=algorithm_options)
    level = accounting_lib.resolve_budget(
        plan.n, epsilon=epsilon, rho=rho, delta=delta, method=accounting,
        slack=registry.least_slack(plan.steps, plan.d, plan.options))
  rho, epsilon, delta = level
  # Constructor checks, eagerly.
  registry.make_transform(plan.algorithm, key=0, rho=rho, **plan.kwargs)
  return loop.execute(plan, [(rho, epsilon, delta, accounting)], batched=False,
                      key=_common.run_key(plan.seed))[0]


def _fit_stream(data, algorithm, *, epsilon, rho, delta, steps, repeats, seed, accounting, init,
                guard_radius, timing_runs, average, batch_size, loss, options) -> FitResult:
  """``fit`` for a streaming algorithm (:mod:`dpjax.training.streaming`)."""
  if init != "zeros":
    raise ValueError(f"init={init!r}: the streaming algorithms start at w = 0, the centre of "
                     "their ball domain; remove init.")
  if guard_radius != DEFAULT_GUARD_RADIUS:
    raise ValueError("guard_radius does not apply to the streaming algorithms: every iterate "
                     "is projected onto the ball of radius `radius`; remove guard_radius.")
  plan = streaming.check_plan(data, algorithm, batch_size=batch_size, steps=steps, loss=loss,
                              repeats=repeats, average=average, options=options)
  seed = registry.check_seed(seed)
  timing_runs = _validate.positive_int(timing_runs, "timing_runs")
  rho, epsilon, delta = accounting_lib.resolve_budget(
      plan.n, epsilon=epsilon, rho=rho, delta=delta, method=accounting,
      slack=registry.least_slack(plan.steps, plan.d, plan.options))
  streaming.check_transform(plan, rho)
  return streaming.execute(plan, rho=rho, epsilon=epsilon, delta=delta, accounting=accounting,
                           seed=seed, timing_runs=timing_runs)


def _fit_driver(data, algorithm, *, epsilon, rho, delta, steps, repeats, seed, accounting, init,
                guard_radius, timing_runs, average, batch_size, curvature_batch_size, loss,
                loss_options, options) -> FitResult:
  """``fit`` for :data:`DRIVER_ALGORITHMS` and the general losses (:mod:`dpjax.training.drivers`)."""
  if init != "zeros":
    raise ValueError(f"init={init!r}: {algorithm!r} starts at w = 0; remove init.")
  seed = registry.check_seed(seed)
  out = drivers.run(data, algorithm, epsilon=epsilon, rho=rho, delta=delta, steps=steps,
                    repeats=repeats, seed=seed, accounting=accounting, timing_runs=timing_runs,
                    average=average, batch_size=batch_size,
                    curvature_batch_size=curvature_batch_size, loss=loss,
                    loss_options=loss_options, guard_radius=guard_radius, options=options,
                    optimum=solve.optimum_loss)
  return out._replace(
      batch_size=int(batch_size or 0), seed=seed,
      curvature_batch_size=int(curvature_batch_size or batch_size or 0)
      if algorithm == "newton-minibatch" else 0)


def auto_shape(data, steps, average, options) -> tuple[int, int]:
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


def auto_choice(n: int, d: int, level: tuple, method: str) -> auto_lib.AutoChoice:
  rho, _, delta = level
  return auto_lib.choose(n=n, d=d, rho=rho, delta=delta, accounting=method)
