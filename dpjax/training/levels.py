""":func:`fit_levels`: :func:`dpjax.fit` at several privacy levels in one compiled program."""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Sequence

import jax
import numpy as np

from dpjax import _common
from dpjax import accounting as accounting_lib
from dpjax import _validate
from dpjax.training import api
from dpjax.training import loop
from dpjax.training import registry
from dpjax.training.registry import ALGORITHMS, AUTO, DEFAULT_GUARD_RADIUS
from dpjax.training.result import FitResult

__all__ = ["fit_levels"]


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
  seed = registry.check_seed(seed)
  neighbouring = registry.check_neighbouring(algorithm, neighbouring)
  if algorithm == AUTO:
    n, d = api.auto_shape(data, steps, average, algorithm_options)
    least_slack = registry.least_slack(1, d, algorithm_options)
  else:
    plan = loop.plan(data, algorithm, steps=steps, repeats=repeats, seed=seed, init=init,
                     guard_radius=guard_radius, timing_runs=timing_runs, average=average,
                     options=registry.relation_options(algorithm, neighbouring,
                                                       algorithm_options))
    n = plan.n
    least_slack = registry.least_slack(plan.steps, plan.d, algorithm_options)
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
      c = api.auto_choice(n, d, level[:3], level[3])
      key = (c.algorithm, c.steps, c.average, tuple(sorted(c.options.items())), c.reason)
      by_choice.setdefault(key, (c, []))[1].append(i)
    groups = [
        (loop.plan(data, c.algorithm, steps=c.steps, repeats=repeats, seed=seed, init=init,
                   guard_radius=guard_radius, timing_runs=timing_runs, average=c.average,
                   options=registry.relation_options(c.algorithm, neighbouring, c.options),
                   reason=c.reason), idx)
        for c, idx in by_choice.values()
    ]
  for group_plan, idx in groups:
    for i in idx:  # constructor checks, eagerly.
      registry.make_transform(group_plan.algorithm, key=0, rho=levels[i][0],
                              **group_plan.kwargs)
  key = _common.run_key(seed)
  # A seed: one key for every level and program (common random numbers). None: independent
  # keys per level, since levels that share their noise z can be subtracted: two releases
  # g + s1 z and g + s2 z give z, hence g, exactly.
  level_keys = None if seed is not None else list(jax.random.split(key, len(levels)))
  results: list = [None] * len(levels)
  for group_plan, idx in groups:
    for i, res in zip(idx, loop.execute(
        group_plan, [levels[i] for i in idx], batched=True, key=key,
        level_keys=None if level_keys is None else [level_keys[i] for i in idx])):
      results[i] = res._replace(neighbouring=neighbouring)
  if api.noise_disabled(algorithm_options, "fit_levels"):
    results = [r._replace(private=False) for r in results]
  return results
