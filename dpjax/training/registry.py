"""The registry of :func:`dpjax.fit`'s algorithms: names, factories, options and defaults.

Each full-batch name (:data:`ALGORITHMS`) maps to its transform factory, the
fixed arguments that select the variant (the double-noise Newton method of
Ganesh et al., NeurIPS 2023, arXiv:2305.13209, with Hessian or quadratic-upper-
bound curvature and eigenvalue clip or add) and the curvature its step must
compute. The streaming and driver algorithms are listed by their own modules
(:mod:`dpjax.training.streaming`, :mod:`dpjax.training.drivers`). The checks
here (options a factory accepts, the neighbouring relation, the least noise
slack) run before any work.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple

from dpjax import _common
from dpjax import baselines
from dpjax import transforms
from dpjax.mechanisms import noise
from dpjax.problem import _neighbouring
from dpjax.training import drivers
from dpjax.training import streaming
from dpjax import _validate
from dpjax.transforms import averaging

__all__ = ["ALGORITHMS", "AUTO", "AVERAGES", "DEFAULT_AVERAGE", "DEFAULT_GUARD_RADIUS",
           "DRIVER_ALGORITHMS", "INITS", "NAMES", "REGISTRY", "STREAMING_ALGORITHMS", "Entry",
           "check_neighbouring", "check_options", "check_seed", "entry", "least_slack",
           "make_transform", "relation_options"]

ALGORITHMS = ("dp-gd", "precond-gd", "hess-clip", "hess-add", "qu-clip", "qu-add")
# `algorithm=AUTO` lets dpjax.training.auto.choose pick one of ALGORITHMS and all its
# hyperparameters from public quantities (n, d, the budget).
AUTO = "auto"
# Single-pass streaming algorithms (dpjax.training.streaming): DP online-to-batch and
# its baselines, in minibatches of `batch_size`.
STREAMING_ALGORITHMS = streaming.ALGORITHMS
# Poisson-minibatch methods, private cubic Newton and the paper's baselines
# (dpjax.training.drivers); DP-GD and Newton-add also take a non-logistic loss there.
DRIVER_ALGORITHMS = drivers.ALGORITHMS
INITS = ("zeros", "random-unit")
AVERAGES = averaging.AVERAGES

# The output of each algorithm when `average` is not given: precond-gd returns
# the mean of the last half of its iterates (the best output in our tuning,
# benchmarks/results/privacy_utility_frontier.md), the paper's algorithms their final iterate.
DEFAULT_AVERAGE = {"precond-gd": "last-half"}

# Public divergence bound on ||w_t||: a constant, never derived from w* or the
# data. See `fit` for why 1e4 never fires on a sane run.
DEFAULT_GUARD_RADIUS = 1e4


# Arguments that `fit` sets itself; they cannot be passed as algorithm options.
_RESERVED = ("n", "rho", "steps", "rho_per_step", "key", "curvature", "modification", "d")

# algorithm -> (factory name, fixed keyword arguments, curvature or None).
# precond-gd evaluates its curvature (the Hessian at the current iterate; at
# w = 0 it is X^T X / (4n)) only on its release steps.
SPECS = {
    "dp-gd": ("dp_gd", {}, None),
    "precond-gd": ("dp_precond_gd", {}, "hessian"),
    "hess-clip": ("dp_newton", {"curvature": "hessian", "modification": "clip"}, "hessian"),
    "hess-add": ("dp_newton", {"curvature": "hessian", "modification": "add"}, "hessian"),
    "qu-clip": ("dp_newton", {"curvature": "qu", "modification": "clip"}, "qu"),
    "qu-add": ("dp_newton", {"curvature": "qu", "modification": "add"}, "qu"),
}


def check_seed(seed: Any) -> int | None:
  """``None`` (fresh OS entropy) or an explicit seed, an int in ``[0, 2**64)``."""
  return None if seed is None else _common.check_seed(seed, "seed")


def check_options(algorithm: str, factory: Callable, options: dict) -> None:
  reserved = sorted(set(options) & set(_RESERVED))
  if reserved:
    raise TypeError(
        f"fit sets {reserved} itself (from the data, the budget, seed and algorithm "
        f"{algorithm!r}); remove them from the algorithm options."
    )
  accepted = list(_keyword_options(factory))
  unknown = sorted(set(options) - set(accepted))
  if unknown:
    raise TypeError(
        f"unknown option(s) {unknown} for algorithm {algorithm!r}; it accepts {accepted}."
    )


def check_neighbouring(algorithm: str, neighbouring: Any) -> str:
  """``neighbouring``, validated for ``algorithm`` (before any work)."""
  neighbouring = _neighbouring.check(neighbouring)
  if neighbouring == "replace-one" and algorithm in drivers.POISSON_ALGORITHMS:
    raise ValueError(
        f"neighbouring='replace-one' is not offered for the Poisson-subsampled {algorithm!r}: "
        "its Renyi-DP accounting is for adding or removing one example, which covers "
        "zero-out but not replace-one. Pass neighbouring='zero-out', or use a full-batch "
        f"method ({', '.join(ALGORITHMS)}) or a streaming one for replace-one.")
  return neighbouring


def relation_options(algorithm: str, neighbouring: str, options: dict) -> dict:
  """``options`` plus the transform's ``neighbouring`` where it is not its default."""
  if neighbouring == "zero-out" or algorithm == "aop":  # AOP: calibrated for replace-one.
    return options
  return {**options, "neighbouring": neighbouring}


def least_slack(steps: int, d: int, options: dict | None = None) -> float:
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
  factory_name, fixed, curvature = SPECS[algorithm]
  return getattr(transforms, factory_name)(**fixed, **kwargs), curvature


class Entry(NamedTuple):
  """One name :func:`dpjax.fit` accepts, as the registry describes it."""

  name: str  # the fit name, e.g. "hess-clip".
  data_pass: str  # "full" (all n rows every step), "poisson" (Poisson minibatches),
  #                 "stream" (one pass, b fresh rows a step) or "host" (AOP: one solve).
  runner: str  # the module that runs it: "loop", "drivers" or "streaming" (dpjax.training).
  accounting: str  # "zcdp", "rdp" (subsampled Gaussian) or "approx-dp" (AOP's (eps, delta)).
  private: bool  # False for the baselines whose step sizes read the data without noise.
  options: tuple  # the algorithm options it accepts (beyond the budget, steps and data).
  default_average: str  # its output when `average` is not given.


def _keyword_options(factory: Callable) -> tuple:
  return tuple(p.name for p in inspect.signature(factory).parameters.values()
               if p.kind == inspect.Parameter.KEYWORD_ONLY and p.name not in _RESERVED)


def _entries() -> dict:
  out = {}
  for name in ALGORITHMS:
    out[name] = Entry(name, "full", "loop", "zcdp", True,
                      _keyword_options(getattr(transforms, SPECS[name][0])),
                      DEFAULT_AVERAGE.get(name, "none"))
  for name in STREAMING_ALGORITHMS:
    out[name] = Entry(name, "stream", "streaming", "zcdp", True, streaming.OPTIONS[name],
                      streaming.DEFAULT_AVERAGE.get(name, "none"))
  for name in drivers.POISSON_ALGORITHMS:
    out[name] = Entry(name, "poisson", "drivers", "rdp", True, drivers.POISSON_OPTIONS[name],
                      "none")
  for name in drivers.CUBIC_ALGORITHMS:
    out[name] = Entry(name, "full", "drivers", "zcdp", True, drivers.CUBIC_OPTIONS, "none")
  for name in drivers.BASELINE_ALGORITHMS:
    # fit forwards every option to the baseline's run, whose own row_norm_bound is one of them.
    options = baselines.accepted_options(name) + ("row_norm_bound",)
    out[name] = Entry(name, "host" if name == "aop" else "full", "drivers",
                      "approx-dp" if name == "aop" else "zcdp", baselines.PRIVATE[name], options,
                      "none")
  out[AUTO] = Entry(AUTO, "full", "loop", "zcdp", True, (), "none")
  return out


# Every name fit accepts -> its Entry: the one table the front ends read.
REGISTRY: dict[str, Entry] = _entries()
NAMES = tuple(REGISTRY)


def entry(algorithm: Any) -> Entry:
  """The :class:`Entry` of ``algorithm`` (a ``ValueError`` naming the choices otherwise).

  Examples:
    >>> from dpjax.training import registry
    >>> e = registry.entry("dp-sgd")
    >>> e.data_pass, e.accounting, e.private, e.options
    ('poisson', 'rdp', True, ('clip_norm', 'learning_rate', 'overflow_prob'))
    >>> [n for n, e in registry.REGISTRY.items() if not e.private]
    ['damped-newton', 'dp-gd-oracle']
  """
  return REGISTRY[_validate.choice(algorithm, "algorithm", NAMES)]
