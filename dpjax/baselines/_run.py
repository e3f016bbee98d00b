"""The whole run of one baseline: :func:`run`, which :func:`dpjax.fit` calls.

Not a baseline of its own: it runs one of ``BASELINES`` and reports whether
that baseline's output is private (``PRIVATE``: ``"aop"`` (epsilon, delta)-DP,
``"damped-newton-private"`` rho-zCDP, ``"damped-newton"`` and
``"dp-gd-oracle"`` NOT private) and why (each baseline's module says so in
full). The iterative baselines run by the library's runner
(:mod:`dpjax.runner`) as one ``jax.jit`` of a ``jax.vmap`` over keys of a
``lax.scan`` over steps, compiled once per configuration; AOP runs on the
host in float64. The divergence guard is public post-processing of the
iterates and costs no privacy.

:func:`run` returns plain values; users run a baseline with
``dpjax.fit((x, y), name, ...)``, whose :class:`dpjax.FitResult` is the one
result type. :func:`run_baseline` and :class:`BaselineResult` are the
deprecated former public entry point and its result, kept for one release
(``dpjax.baselines.run_baseline`` warns).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax import runner
from dpjax.problem import glm
from dpjax.baselines import _checks
from dpjax.baselines.aop import aop, aop_calibration
from dpjax.baselines.damped_newton import damped_newton
from dpjax.baselines.damped_newton_private import damped_newton_private
from dpjax.baselines.dp_gd_oracle import dp_gd_oracle

__all__ = ["AOP_OPTIONS", "BASELINES", "GUARD_RADIUS", "PRIVATE", "accepted_options", "run"]

BASELINES = ("aop", "damped-newton", "damped-newton-private", "dp-gd-oracle")
# The options AOP takes (its calibration's splits and the minimiser's iterations).
AOP_OPTIONS = ("eps_frac", "eps_out_frac", "gamma", "max_iter")
PRIVATE = {"aop": True, "damped-newton": False, "damped-newton-private": True,
           "dp-gd-oracle": False}

# Public divergence bound on ||w_t|| (the value of dpjax.training.DEFAULT_GUARD_RADIUS):
# an iterate beyond it (or not finite) is reset to w_0. Post-processing of the
# released iterate, no privacy cost.
GUARD_RADIUS = 1e4


_WHY = {
    "aop": "(epsilon, delta)-DP: approximate minima perturbation (Iyengar et al. 2019) with "
           "the true row-norm bound L and smoothness L^2/4; not zCDP-accounted.",
    "damped-newton": "NOT private: the step size min(1, log(1+beta)/beta) reads the noise-free "
                     "Newton step (Avella-Medina et al. 2021, p. 22, as run in the paper).",
    "damped-newton-private": "rho-zCDP: noisy gradient and symmetrised noisy Hessian (Gaussian "
                             "mechanisms); the step size is post-processing or public.",
    "dp-gd-oracle": "NOT private: the step size is a line search on the true loss.",
}
_FACTORIES = {"damped-newton": damped_newton, "damped-newton-private": damped_newton_private,
              "dp-gd-oracle": dp_gd_oracle}


# The factory arguments run sets itself (from the data, the budget and the key).
_SET_HERE = ("n", "rho", "steps", "rho_per_step", "key", "row_norm_bound")


def accepted_options(name: str) -> tuple[str, ...]:
  """The ``options`` :func:`run` (and ``dpjax.fit``) takes for baseline ``name``.

  AOP: :data:`AOP_OPTIONS`; an iterative baseline: its factory's keyword
  arguments, less those :func:`run` sets itself.

  Examples:
    >>> from dpjax import baselines
    >>> baselines.accepted_options("dp-gd-oracle")[:3]
    ('initial_step', 'shrink', 'armijo')
  """
  if name == "aop":
    return AOP_OPTIONS
  return tuple(p.name for p in inspect.signature(_FACTORIES[name]).parameters.values()
               if p.kind == inspect.Parameter.KEYWORD_ONLY and p.name not in _SET_HERE)


def _keys(key: Any) -> tuple[jax.Array, bool]:
  """A typed key array ``[R]`` and whether the caller passed a batch."""
  if isinstance(key, (jax.Array, np.ndarray)) and np.ndim(key) == 1:
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
      raise TypeError("a batch of keys must be typed PRNG keys, e.g. "
                      "jax.random.split(jax.random.key(0), repeats).")
    if key.shape[0] < 1:
      raise ValueError("the batch of keys is empty; pass at least one key.")
    return key, True
  return _common.canonical_key(key)[None], False


@functools.lru_cache(maxsize=32)
def _compiled_run(name: str, kwargs: tuple, steps: int, guard_radius: float):
  """``jit(vmap(one_run))`` over keys for one configuration (cached: repeated calls,
  e.g. over seeds or in a benchmark, compile once per data shape)."""
  factory = _FACTORIES[name]
  kwargs = dict(kwargs)
  newton = name != "dp-gd-oracle"

  def one_run(k, x, y):
    tx = factory(key=k, **kwargs)
    w0 = jnp.zeros((x.shape[1],), x.dtype)

    def inputs(w, t):
      del t
      if newton:
        loss, g, h = glm.logistic_grad_and_curvature(w, x, y, "hessian")
        return g, {"curvature_matrix": h}, loss
      loss, g = glm.logistic_loss_and_grad(w, x, y)
      return g, {"x": x, "y": y}, loss

    scanned = runner.scan_steps(tx, w0, steps, inputs, guard_radius=guard_radius,
                                record=lambda loss, w, state: (loss, state.step_size))
    losses, etas = scanned.records
    w = scanned.params
    losses = jnp.concatenate([losses, glm.logistic_loss(w, x, y)[None]])
    return w, losses, scanned.resets, etas, scanned.state.accountant

  return runner.program(one_run)


def run(
    name: str,
    x: Any,
    y: Any,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    steps: int | None = None,
    key: int | jax.Array,
    accounting_method: str = "gaussian",
    row_norm_bound: float = 1.0,
    guard_radius: float = GUARD_RADIUS,
    **options: Any,
) -> tuple[np.ndarray, np.ndarray | None, bool, float, float, float | None, dict]:
  """Runs one baseline of Fig. 2 / Fig. 3 on ``(x, y)``: the whole run behind ``dpjax.fit``.

  ``name`` is one of ``BASELINES``; see the table of :mod:`dpjax.baselines`
  for which are private and why. Exactly one of ``epsilon`` and ``rho``;
  ``delta`` defaults to ``n**-2``. The iterative baselines convert with
  ``accounting.resolve_budget(n, ..., method=accounting_method)`` and split
  ``rho`` evenly over ``steps``; AOP takes ``epsilon`` (a given ``rho`` is
  converted to the epsilon of ``zcdp_to_epsilon(rho, delta, accounting_method)``,
  the reference runner's comparison convention) and no ``steps``.

  The iterative runs start at ``w_0 = 0`` and are one ``jax.jit`` of a
  ``jax.vmap`` over the keys of a ``lax.scan`` over the steps: each step makes
  one fused pass over the data (:mod:`dpjax.problem.glm`), the transform's update and
  the public divergence guard (reset to ``w_0`` when ``||w|| > guard_radius``
  or not finite; post-processing). ``key`` is an int seed, a typed key, or a
  1-D batch of typed keys (results then have a leading repeat axis).

  Args:
    name: one of ``BASELINES``.
    x: float array ``[n, d]``, row norms ``<= row_norm_bound`` (validated).
    y: float array ``[n]``, labels in {-1, +1} (validated).
    epsilon: target epsilon, or
    rho: total zCDP budget.
    delta: in (0, 1); default ``n**-2``.
    steps: number of steps (iterative baselines only).
    key: int seed, typed PRNG key, or a 1-D array of typed keys.
    accounting_method: the (epsilon, delta) <-> zCDP conversion
      (``dpjax.accounting.METHODS``; "gaussian" is exact for these Gaussian
      mechanisms, see :func:`dpjax.fit`).
    row_norm_bound: ``L``: the public row-norm bound every calibration uses.
    guard_radius: the public divergence bound (> 0).
    **options: forwarded to :func:`aop` or to the transform factory (e.g.
      ``grad_frac``, ``min_eigenvalue``, ``step_size``, ``eps_frac``).

  Returns:
    The tuple ``(params, losses, private, epsilon, delta, rho, info)`` of host
    values; with a batch of keys every array gains a leading ``[repeats]`` axis.

    * ``params``: ``[d]`` the output (AOP: ``theta + noise``; else the final
      iterate ``w_T``).
    * ``losses``: ``[steps + 1]`` mean loss at ``w_0 .. w_T`` (reporting
      only, not private), or ``None`` for AOP (not iterative).
    * ``private``: whether the output is differentially private at
      ``(epsilon, delta)`` (and ``rho`` when given). When False,
      ``epsilon``, ``delta`` and ``rho`` only describe the noise that was
      added.
    * ``epsilon``, ``delta``: the (nominal, when not private) (epsilon, delta).
    * ``rho``: the zCDP budget of the noise (iterative baselines); ``None``
      for AOP, which is (epsilon, delta)-DP and not zCDP-accounted.
    * ``info``: details: ``name``, ``why`` (the privacy statement),
      ``steps``, ``rho_spent`` (read from the accountant), ``guard_resets``,
      ``step_sizes`` ([steps] eta per step), ``accounting_method`` and
      ``options`` for the iterative ones; the calibration and ``max_iter``
      for AOP (public values only: nothing about how its minimiser
      converged).

  Raises:
    ValueError, TypeError: eagerly, before any work: unknown name, bad data,
      budget, steps or options.

  Examples:
    >>> from dpjax import data
    >>> from dpjax.baselines import _run
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> params, losses, private, _, _, rho, _ = _run.run("damped-newton-private", x, y,
    ...                                                  epsilon=1.0, steps=5, key=0)
    >>> params.shape, losses.shape, private, rho is not None
    ((5,), (6,), True, True)
    >>> _run.run("damped-newton", x, y, epsilon=1.0, steps=5, key=0)[2]
    False
  """
  name = _validate.choice(name, "name", BASELINES)
  row_norm_bound = _validate.positive_float(row_norm_bound, "row_norm_bound")
  n, d = _checks.check_data(x, y, row_norm_bound)
  method = _validate.choice(accounting_method, "accounting_method", accounting.METHODS)
  keys, batched = _keys(key)

  if name == "aop":
    if steps is not None:
      raise TypeError("aop is not iterative: remove steps.")
    _, epsilon, delta = accounting.resolve_budget(n, epsilon=epsilon, rho=rho, delta=delta,
                                                  method=method, target="epsilon")
    allowed = set(accepted_options("aop"))
    unknown = sorted(set(options) - allowed)
    if unknown:
      raise TypeError(f"unknown option(s) {unknown} for 'aop'; it takes {sorted(allowed)}.")
    aop_calibration(n, epsilon, delta, row_norm_bound=row_norm_bound,
                    **{k: v for k, v in options.items() if k != "max_iter"})  # eager checks
    outs, infos = [], []
    for k in keys:
      theta, info = aop(x, y, epsilon=epsilon, delta=delta, key=k,
                        row_norm_bound=row_norm_bound, **options)
      outs.append(theta)
      infos.append(info)
    info = {"name": name, "why": _WHY[name], **infos[0]}  # public: the same for every key
    params = np.stack(outs) if batched else outs[0]
    return params, None, True, float(epsilon), float(delta), None, info

  if steps is None:
    raise ValueError(f"{name!r} is iterative: pass steps=<T>.")
  steps = _validate.positive_int(steps, "steps")
  guard_radius = _validate.positive_float(guard_radius, "guard_radius")
  _common.check_host_float(np.asarray(jax.device_get(x)), "x")  # never rounded silently
  rho, epsilon, delta = accounting.resolve_budget(n, epsilon=epsilon, rho=rho, delta=delta,
                                                  method=method)
  factory = _FACTORIES[name]
  for reserved in _SET_HERE:
    if reserved in options:
      raise TypeError(f"{reserved} is set from the data, the budget and the key; remove it "
                      "from the options.")
  unknown = sorted(set(options) - set(accepted_options(name)))
  if unknown:
    raise TypeError(f"unknown option(s) {unknown} for {name!r}; it takes "
                    f"{list(accepted_options(name))}.")
  kwargs = dict(n=n, rho=rho, steps=steps, row_norm_bound=row_norm_bound, **options)
  factory(key=0, **kwargs)  # constructor checks, eagerly.
  x_dev, y_dev = jnp.asarray(x), jnp.asarray(y)
  try:
    run = _compiled_run(name, tuple(sorted(kwargs.items())), steps, guard_radius)
  except TypeError:  # an unhashable option value: build without the cache.
    run = _compiled_run.__wrapped__(name, tuple(sorted(kwargs.items())), steps, guard_radius)
  w, losses, resets, etas, acc = jax.device_get(run(keys, x_dev, y_dev))
  spent = np.asarray(accounting.spent_rho(acc), np.float64)
  sl = slice(None) if batched else 0
  info = {"name": name, "why": _WHY[name], "steps": steps, "rho_spent": spent[sl],
          "guard_resets": np.asarray(resets)[sl], "step_sizes": np.asarray(etas)[sl],
          "accounting_method": method, "options": dict(options)}
  return (np.asarray(w)[sl], np.asarray(losses)[sl], PRIVATE[name], float(epsilon),
          float(delta), float(rho), info)


class BaselineResult(NamedTuple):
  """Deprecated: the result of :func:`run_baseline`; ``dpjax.fit`` returns :class:`dpjax.FitResult`.

  Attributes:
    params, losses, private, epsilon, delta, rho, info: the values of
      :func:`run`, in its order (see its Returns).
  """

  params: np.ndarray
  losses: np.ndarray | None
  private: bool
  epsilon: float
  delta: float
  rho: float | None
  info: dict


def run_baseline(name: str, x: Any, y: Any, **kwargs: Any) -> BaselineResult:
  """Deprecated: use ``dpjax.fit((x, y), name, ...)``, which returns :class:`dpjax.FitResult`.

  :func:`run` with the same arguments (its signature), its values as a
  :class:`BaselineResult`, as before the deprecation. Reading
  ``dpjax.baselines.run_baseline`` warns (:class:`DeprecationWarning`). With
  :func:`dpjax.fit`, ``accounting`` replaces ``accounting_method``, an int
  ``seed`` and ``repeats`` replace ``key``, ``row_norm_bound`` is one of the
  options, and ``params`` always have a leading ``[repeats]`` axis.

  Args:
    name: one of ``BASELINES``.
    x: float array ``[n, d]``.
    y: float array ``[n]``, labels in {-1, +1}.
    **kwargs: the keyword arguments of :func:`run` (``key`` required).

  Returns:
    A :class:`BaselineResult`.
  """
  return BaselineResult(*run(name, x, y, **kwargs))


# The signature it had before the deprecation: run's, with its own result.
run_baseline.__signature__ = inspect.signature(run).replace(return_annotation="BaselineResult")
