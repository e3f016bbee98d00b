"""The compiled run behind :func:`dpjax.fit` for the full-batch algorithms.

The library's one runner (:mod:`dpjax.runner`): one ``jax.jit`` of a
``jax.vmap`` over repeats (and, for :func:`dpjax.training.fit_levels`, privacy
levels) of a ``lax.scan`` over the steps: no Python loop per step, one
compilation per static configuration (:mod:`dpjax.compiled`). Each step makes
one fused pass over the data at
``w_t`` (:func:`dpjax.problem.glm.logistic_grad_and_curvature` for Newton,
:func:`dpjax.problem.glm.logistic_loss_and_grad` for DP-GD), whose loss gives
the (non-private, reporting-only) trajectory for free, then the transform's
update, ``optax.apply_updates`` and the public divergence guard.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _common
from dpjax import accounting as accounting_lib
from dpjax import _validate
from dpjax import data as data_lib
from dpjax import runner
from dpjax import transforms
from dpjax.mechanisms import noise
from dpjax.problem import glm
from dpjax.problem import solve
from dpjax.training import registry
from dpjax.training import result as result_lib
from dpjax.training import streaming
from dpjax.training.registry import ALGORITHMS, AVERAGES, DEFAULT_GUARD_RADIUS, INITS

__all__ = ["Plan", "execute", "fit_program", "fit_step", "plan", "release_interval", "repeat_fn"]


def _fused_inputs(curvature: str | None, x: jax.Array, y: jax.Array,
                  matrix: jax.Array | None = None) -> Callable:
  """``inputs(w, t)`` of :func:`dpjax.runner.scan_steps`: the fused data pass at ``w``.

  :func:`dpjax.problem.glm.logistic_loss_and_grad`, or with ``curvature``
  :func:`dpjax.problem.glm.logistic_grad_and_curvature`; with ``matrix`` (the
  curvature at ``w``, computed by the caller) only the loss and gradient. The
  loss at ``w`` is the recorded value (reporting only).
  """

  def inputs(w, t):
    del t
    if matrix is not None:
      loss, grad = glm.logistic_loss_and_grad(w, x, y)
      return grad, {"curvature_matrix": matrix}, loss
    if curvature is None:
      loss, grad = glm.logistic_loss_and_grad(w, x, y)
      return grad, {}, loss
    loss, grad, here = glm.logistic_grad_and_curvature(w, x, y, curvature)
    return grad, {"curvature_matrix": here}, loss

  return inputs


def fit_step(tx: Any, curvature: str | None, w0: jax.Array,
             guard_radius: float = DEFAULT_GUARD_RADIUS,
             matrix: jax.Array | None = None) -> Callable:
  """One iteration of a :func:`fit` run: ``step(w, state, x, y)``.

  The fused data pass at ``w`` (:func:`dpjax.problem.glm.logistic_loss_and_grad`, or
  :func:`dpjax.problem.glm.logistic_grad_and_curvature` with ``curvature``), the
  transform's update, ``optax.apply_updates`` and the public divergence
  guard (reset to ``w0`` when ``||w|| > guard_radius`` or not finite): the
  step of :func:`dpjax.runner.scan_steps`. ``matrix``: the curvature at ``w``,
  computed by the caller (e.g. once for all repeats at a shared start); then
  only the loss and gradient are computed here.

  Returns:
    ``step(w, state, x, y) -> (w_next, state, loss_at_w, diverged)``.
  """

  def step(w, state, x, y):
    one = runner.step_fn(tx, w0, _fused_inputs(curvature, x, y, matrix), guard_radius)
    return one(w, state, None)

  return step


class Plan(NamedTuple):
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


def plan(data, algorithm, *, steps, repeats, seed, init, guard_radius, timing_runs,
          average, options, reason="") -> Plan:
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
  seed = registry.check_seed(seed)
  timing_runs = _validate.positive_int(timing_runs, "timing_runs")
  init = _validate.choice(init, "init", INITS)
  guard_radius = _validate.positive_float(guard_radius, "guard_radius")
  if init == "random-unit" and guard_radius <= 1.0:
    raise ValueError(
        f"guard_radius={guard_radius:g} must exceed ||w0|| = 1 for init='random-unit', "
        "or every step would reset; pass a larger guard_radius."
    )
  if average is None:
    average = registry.DEFAULT_AVERAGE.get(algorithm, "none")
  average = _validate.choice(average, "average", AVERAGES)
  registry.check_options(algorithm, getattr(transforms, registry.SPECS[algorithm][0]), options)
  release_every = release_interval(algorithm, steps, options)
  return Plan(algorithm, x, y, n, d, steps, repeats, seed, init, guard_radius, timing_runs,
               average, release_every, dict(n=n, steps=steps, **options), dict(options),
               reason, placement)


def release_interval(algorithm: str, steps: int, options: dict) -> int | None:
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
  release_every = release_interval(algorithm, steps, kwargs)

  def one_repeat(key, rho, x, y, h0=None):
    init_key, tx_key = jax.random.split(key)
    if init == "zeros":
      w0 = jnp.zeros((d,), x.dtype)
    else:
      w0 = noise.random_direction(init_key, d, x.dtype)
    tx, curvature = registry.make_transform(algorithm, key=tx_key, rho=rho, **kwargs)
    if release_every is None:
      scanned = runner.scan_steps(tx, w0, steps, _fused_inputs(curvature, x, y),
                                  guard_radius=guard_radius, average=average)
    else:
      # precond-gd: the curvature pass runs only on the release steps 0, r, 2r, ...
      # The first one is at w_0; from the shared start 0 its matrix h0 was
      # computed once for all repeats (outside the vmap).
      scanned = runner.scan_steps(
          tx, w0, steps, _fused_inputs(None, x, y), guard_radius=guard_radius,
          average=average, release_every=release_every,
          release_inputs=_fused_inputs(curvature, x, y),
          first_inputs=None if h0 is None else _fused_inputs(curvature, x, y, h0))
    # The loss at w_T by the same fused pass as the in-scan losses at w_0 .. w_{T-1}, so
    # equal iterates report equal losses (glm.logistic_loss can differ in the last bit).
    w = scanned.params
    losses = jnp.concatenate([scanned.records, glm.logistic_loss_and_grad(w, x, y)[0][None]])
    return scanned.output, w, losses, scanned.resets, scanned.state

  return one_repeat


def _shared_h0(algorithm: str, d: int, init: str, release_every: int | None) -> Callable:
  """``h0(x, y)``: precond-gd's first curvature matrix from the shared start 0, else None.

  From ``w_0 = 0`` the first release's matrix is the same for every repeat and
  level (``X^T X / (4n)``), so the run computes it once, outside the vmap.
  """

  def shared_h0(x, y):
    if release_every is None or init != "zeros":
      return None
    curvature = registry.SPECS[algorithm][2]
    return glm.logistic_grad_and_curvature(jnp.zeros((d,), x.dtype), x, y, curvature)[2]

  return shared_h0


def _one_level_program(one_repeat: Callable, shared_h0: Callable, rho: float) -> Callable:
  """``jit(run(keys, x, y))``: the repeats of one privacy level, ``rho`` a Python float."""
  return runner.program(lambda key, x, y, h0: one_repeat(key, rho, x, y, h0), shared=shared_h0)


def fit_program(algorithm: str, kwargs: dict, *, d: int, rho: float, init: str = "zeros",
                average: str = "none",
                guard_radius: float = DEFAULT_GUARD_RADIUS) -> Callable:
  """The jitted program :func:`dpjax.fit` compiles for one privacy level: ``run(keys, x, y)``.

  ``keys`` ``[repeats]`` typed keys (one per repeat), ``x`` ``[n, d]``, ``y``
  ``[n]``; returns, each with a leading ``repeats`` axis, ``(output, w_T,
  losses, resets, state)`` as :func:`repeat_fn`. For benchmarks that time or
  measure the very program a fit runs.

  Examples:
    >>> import jax
    >>> from dpjax import data
    >>> from dpjax.training import loop
    >>> ds = data.synthetic(0, n=100, d=3)
    >>> run = loop.fit_program("dp-gd", dict(n=100, steps=2), d=3, rho=1.0)
    >>> out, w, losses, resets, state = run(jax.random.split(jax.random.key(0), 4), ds.x, ds.y)
    >>> out.shape, losses.shape, resets.tolist()
    ((4, 3), (4, 3), [0, 0, 0, 0])
  """
  one_repeat = repeat_fn(algorithm, kwargs, d=d, init=init, average=average,
                         guard_radius=guard_radius)
  return _one_level_program(
      one_repeat, _shared_h0(algorithm, d, init, release_interval(algorithm, kwargs["steps"],
                                                                  kwargs)), rho)


def execute(plan: Plan, levels: list, *, batched: bool, key: jax.Array,
             level_keys: list | None = None) -> list[result_lib.FitResult]:
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
  loss_star, ridge = solve.optimum_loss(x, y)
  one_repeat = repeat_fn(plan.algorithm, plan.kwargs, d=d, init=init, average=plan.average,
                         guard_radius=plan.guard_radius)
  shared_h0 = _shared_h0(plan.algorithm, d, init, release_every)

  keys = runner.repeat_keys(key, plan.repeats, plan.placement)
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
    run = runner.program(one_repeat, shared=shared_h0, batched=2)
    args = (flat_keys, flat_rhos, xj, yj)
  else:
    run = _one_level_program(one_repeat, shared_h0, levels[0][0])
    args = (keys, xj, yj)

  # Everything run closes over, as Python values: an identical configuration
  # reuses the program compiled by an earlier call (dpjax.compiled).
  program = ("fit", plan.algorithm, plan.kwargs, d, init, plan.average, plan.guard_radius,
             release_every, plan.repeats, batched, len(levels) if batched else levels[0][0],
             registry.make_transform, repeat_fn)
  out, seconds_compile, seconds_run = runner.run(run, args, plan.timing_runs,
                                                 program_key=program)
  if batched:
    out = jax.tree.map(lambda a: a.reshape((num_levels, plan.repeats) + a.shape[1:]), out)
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
            method, loss_star, ridge, seconds_compile, seconds_run) -> result_lib.FitResult:
  repeats = plan.repeats
  params = np.asarray(params)
  se = result_lib.standard_error(excess)
  return result_lib.FitResult(
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


def _curvature_evaluations(plan: Any) -> int:
  if plan.release_every is not None:
    return -(-plan.steps // plan.release_every)
  return plan.steps if registry.SPECS[plan.algorithm][2] is not None else 0
