"""Whole-run drivers behind :func:`dpjax.fit` for the rest of the second-order paper.

:func:`dpjax.fit` runs the full-batch logistic algorithms itself
(:mod:`dpjax.training`) and the single-pass ones through
:mod:`dpjax.training.streaming`; this module runs the others, each as one ``jax.jit``
of a ``jax.vmap`` over repeats of a ``lax.scan`` over the steps:

* :data:`POISSON_ALGORITHMS`: ``"dp-sgd"`` (:func:`dpjax.transforms.dp_sgd`,
  Abadi et al. 2016) and ``"newton-minibatch"``
  (:func:`dpjax.transforms.dp_newton_minibatch`, Ganesh et al. 2023, Fig. 4): Poisson
  subsampling (``batch_size`` is the EXPECTED batch size ``q n``), accounted
  by the Renyi-DP curve in the accountant and calibrated to the target
  ``epsilon`` at ``delta`` (:func:`dpjax.accounting.calibrate_noise_multiplier`).
  They are not zCDP-calibrated: the result's ``rho`` is ``None`` and its
  ``accounting`` is ``"rdp"``; a ``rho`` passed to ``fit`` is first turned
  into its ``epsilon`` at ``delta`` with the chosen conversion.
* ``"cubic-newton"`` (:func:`dpjax.transforms.cubic_newton`, Ganesh et al. 2023, Sec. 4): the
  L2-regularised logistic loss ``F(w) = mean log(1 + e^{-y <x, w>}) + (mu/2)
  ||w||^2`` on the ball ``B(0, radius)``, with the constants of
  :func:`dpjax.transforms.l2_logistic_constants`; ``mu`` and
  ``radius`` are public options. Its excess loss is measured on ``F`` against
  the constrained optimum (:func:`ball_optimum`).
* :data:`BASELINE_ALGORITHMS` (:mod:`dpjax.baselines`): ``"aop"``,
  ``"damped-newton"`` (NOT private), ``"damped-newton-private"`` and
  ``"dp-gd-oracle"`` (NOT private). The result's ``private`` field says which.
* :data:`GENERAL_LOSS_ALGORITHMS` with a ``loss`` other than ``"logistic"``
  (:mod:`dpjax.problem.losses`): DP-GD and the double-noise Newton method with
  ``add`` on any registered loss, through the clipped per-example path
  (:func:`dpjax.problem.losses.newton_step_inputs`).

Reporting is not private, and stays out of the timed run: the compiled run
returns the iterates ``w_0 .. w_T``; their objective values (``losses``) are
computed afterwards by a separate compiled pass, and the excess losses of the
output and of the final iterate on the host in float64.

Examples:
  >>> import dpjax
  >>> ds = dpjax.synthetic(0, n=2000, d=5)
  >>> res = dpjax.fit(ds, "dp-sgd", epsilon=2.0, steps=20, batch_size=200, repeats=2)
  >>> res.rho is None, res.accounting, res.losses.shape, res.private
  (True, 'rdp', (2, 21), True)
  >>> bool(res.excess_loss_mean < res.losses[0, 0] - res.loss_star)
  True
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _common
from dpjax import _validate
from dpjax import compiled
from dpjax import runner
from dpjax import accounting as accounting_lib
from dpjax.mechanisms import noise
from dpjax import baselines
from dpjax.baselines import _run as baseline_run
from dpjax import data as data_lib
from dpjax.problem import glm
from dpjax.problem import losses as losses_lib
from dpjax.training import result as result_lib
from dpjax.training import streaming
from dpjax import transforms
from dpjax.transforms import averaging

__all__ = [
    "ALGORITHMS",
    "BASELINE_ALGORITHMS",
    "CUBIC_ALGORITHMS",
    "GENERAL_LOSS_ALGORITHMS",
    "NON_PRIVATE",
    "POISSON_ALGORITHMS",
    "ball_optimum",
    "run",
]

POISSON_ALGORITHMS = ("dp-sgd", "newton-minibatch")
CUBIC_ALGORITHMS = ("cubic-newton",)
BASELINE_ALGORITHMS = baselines.BASELINES
ALGORITHMS = POISSON_ALGORITHMS + CUBIC_ALGORITHMS + BASELINE_ALGORITHMS
# Full-batch algorithms of dpjax.fit that also take a non-logistic loss.
GENERAL_LOSS_ALGORITHMS = ("dp-gd", "hess-add", "qu-add")
# Baselines whose step size reads the data without noise (diagnostics only).
NON_PRIVATE = ("damped-newton", "dp-gd-oracle")

POISSON_OPTIONS = {
    "dp-sgd": ("clip_norm", "learning_rate", "overflow_prob"),
    "newton-minibatch": ("min_eigenvalue", "modification", "curvature", "noise_ratio_hess",
                         "overflow_prob"),
}
CUBIC_OPTIONS = ("mu", "radius", "max_inner_steps", "neighbouring")
DEFAULT_CUBIC_RADIUS = 10.0


# ----------------------------------------------------------------------------
# Shared pieces.
# ----------------------------------------------------------------------------


def _check_options(algorithm: str, options: dict, allowed: tuple) -> None:
  unknown = sorted(set(options) - set(allowed))
  if unknown:
    raise TypeError(f"unknown option(s) {unknown} for algorithm {algorithm!r}; it accepts "
                    f"{list(allowed) or 'none'}.")


def _host_data(data: Any) -> tuple[np.ndarray, np.ndarray]:
  ds = data_lib.validate_dataset(data)
  if not (_validate.is_concrete(ds.x) and _validate.is_concrete(ds.y)):
    raise TypeError("fit runs on the host; pass concrete data, not values traced under jit.")
  x = np.asarray(jax.device_get(ds.x))
  _common.check_host_float(x)
  return x, np.asarray(jax.device_get(ds.y)).astype(x.dtype)


def _scan_iterates(tx: Any, w0: jax.Array, steps: int, step_inputs: Callable,
                   guard_radius: float, average: str) -> tuple[jax.Array, jax.Array, Any, Any]:
  """One repeat by :func:`dpjax.runner.scan_steps`: ``(output, iterates [T + 1], state, resets)``.

  ``step_inputs(w) -> (updates_in, extra_args)`` feeds ``tx.update``; the
  runner applies the public divergence guard and the tail ``average``, and
  records every iterate (for the objective values, computed after the run).
  """
  scanned = runner.scan_steps(tx, w0, steps, lambda w, t: (*step_inputs(w), None),
                              guard_radius=guard_radius, average=average,
                              record=lambda value, w, state: w)
  return (scanned.output, jnp.concatenate([w0[None], scanned.records]), scanned.state,
          scanned.resets)


def _run_compiled(one_repeat: Callable, x: np.ndarray, y: np.ndarray, repeats: int,
                  seed: int | None, timing_runs: int, placement: Any = None, *,
                  program: Any = None) -> tuple[Any, float, float]:
  """The repeats of ``one_repeat(key, x, y)`` by the runner (:func:`dpjax.runner.program`);
  ``x``, ``y`` sharded as ``placement`` (:func:`dpjax._common.data_placement`: the caller's
  multi-device sharding) or on one device.

  The keys split ``dpjax._common.run_key(seed)``: fresh OS entropy for ``None``.
  ``program`` describes everything ``one_repeat`` closes over (Python values):
  a later call with the same description and argument shapes reuses the
  compiled program (:mod:`dpjax.compiled`).
  """
  keys = runner.repeat_keys(_common.run_key(seed), repeats, placement)
  args = (keys, *_common.place_data(x, y, placement))
  return runner.run(runner.program(one_repeat), args, timing_runs, program_key=program)


def _trajectory_objective(objective: Callable, trajectory: np.ndarray, x: np.ndarray,
                          y: np.ndarray, program: Any = None) -> np.ndarray:
  """``[R, T + 1]`` objective at every iterate: one compiled pass per repeat (reporting only).

  ``program`` describes what ``objective`` closes over; calls with the same
  description share the compiled pass (:func:`dpjax.compiled.jitted`).
  """
  def build():
    return lambda ws, x, y: jax.lax.map(lambda w: objective(w, x, y), ws)

  per_repeat = (compiled.jitted(("objective", program), build) if program is not None
                else jax.jit(build()))
  xs, ys = jax.device_put(x), jax.device_put(y)
  return np.stack([np.asarray(per_repeat(jnp.asarray(ws), xs, ys)) for ws in trajectory])


def _logistic_host(params: np.ndarray, x: np.ndarray, y: np.ndarray, mu: float = 0.0
                   ) -> np.ndarray:
  """float64 ``mean log(1 + e^{-y <x, w>}) + (mu/2)||w||^2`` for each row of ``params``."""
  p = np.asarray(params, np.float64)
  m = np.asarray(x, np.float64) @ p.T
  out = np.mean(np.logaddexp(0.0, -np.asarray(y, np.float64)[:, None] * m), axis=0)
  return out + 0.5 * mu * np.sum(p * p, axis=1)


def ball_optimum(x: Any, y: Any, *, mu: float, radius: float) -> tuple[np.ndarray, float]:
  """``(w*, F(w*))``: the minimiser of the L2-regularised logistic loss on ``B(0, radius)``.

  NON-PRIVATE (excess-loss reporting). ``F`` is ``mu``-strongly convex, so
  the constrained minimiser is unique: the unconstrained one when it lies in
  the ball, else (KKT) the minimiser of ``F + (nu/2)||w||^2`` with the
  multiplier ``nu > 0`` at which its norm equals ``radius`` (the norm
  decreases in ``nu``; found by bisection in log space), all in float64
  (:func:`dpjax.problem.losses.optimum`).

  Examples:
    >>> import numpy as np
    >>> from dpjax import data
    >>> from dpjax.training import drivers
    >>> x, y = data.synthetic(0, n=500, d=3)
    >>> w, f = drivers.ball_optimum(x, y, mu=1e-3, radius=0.5)
    >>> round(float(np.linalg.norm(w)), 9)
    0.5
  """
  mu = _validate.positive_float(mu, "mu")
  radius = _validate.positive_float(radius, "radius")
  x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)

  def solve(ridge: float) -> np.ndarray:
    return losses_lib.optimum(losses_lib.get_loss("l2_logistic", regularization=ridge), x64,
                              y64)[0]

  w = solve(mu)
  if np.linalg.norm(w) > radius:
    lo, hi = math.log(mu), math.log(mu) + 1.0
    while np.linalg.norm(solve(math.exp(hi))) > radius:
      lo, hi = hi, hi + 2.0
    for _ in range(60):
      mid = 0.5 * (lo + hi)
      if np.linalg.norm(solve(math.exp(mid))) > radius:
        lo = mid
      else:
        hi = mid
    w = solve(math.exp(hi))
    w = w * min(1.0, radius / np.linalg.norm(w))
  return w, float(_logistic_host(w[None], x64, y64, mu)[0])


# ----------------------------------------------------------------------------
# The drivers.
# ----------------------------------------------------------------------------


def _poisson(x, y, algorithm, *, epsilon, rho, delta, steps, repeats, seed, accounting,
             timing_runs, average, batch_size, curvature_batch_size, guard_radius, options,
             optimum, placement=None) -> result_lib.FitResult:
  _check_options(algorithm, options, POISSON_OPTIONS[algorithm])
  n, d = x.shape
  if batch_size is None:
    raise ValueError(f"algorithm {algorithm!r} samples a Poisson minibatch each step: pass "
                     "batch_size=<B> (the expected batch size q n).")
  batch_size = _validate.positive_int(batch_size, "batch_size")
  if algorithm == "dp-sgd":
    if curvature_batch_size is not None:
      raise TypeError("curvature_batch_size applies to newton-minibatch only; remove it.")
  else:
    curvature_batch_size = _validate.positive_int(
        batch_size if curvature_batch_size is None else curvature_batch_size,
        "curvature_batch_size")
  # Calibrated to the (epsilon, delta) target: a given rho is first converted to its epsilon.
  _, epsilon, delta = accounting_lib.resolve_budget(n, epsilon=epsilon, rho=rho, delta=delta,
                                                    method=accounting, target="epsilon")
  options = dict(options)
  if algorithm == "newton-minibatch" and "min_eigenvalue" not in options:
    raise ValueError(
        "newton-minibatch needs min_eigenvalue=<a fixed lambda > 0>, a public choice (there is "
        "no adaptive rule for the minibatch method): its direction noise grows like "
        "1/(4 B_H lambda^2), so small curvature batches need a larger lambda (e.g. 0.1 for "
        "B_H ~ 100, 0.01-0.03 for B_H ~ 1000).")

  def make(key):
    common = dict(n=n, batch_size=batch_size, epsilon=epsilon, delta=delta, steps=steps, key=key)
    if algorithm == "dp-sgd":
      return transforms.dp_sgd(loss="logistic", **common, **options)
    kw = dict(options)
    return transforms.dp_newton_minibatch(curvature_batch_size=curvature_batch_size, **common,
                                          **kw)

  make(0)  # The constructor's eager checks (and the calibration), before compiling.

  def one_repeat(key, x, y):
    tx = make(key)
    w0 = jnp.zeros((d,), x.dtype)
    return _scan_iterates(tx, w0, steps, lambda w: (None, {"data": (x, y)}), guard_radius,
                          average)

  program = ("poisson", algorithm, n, d, batch_size, curvature_batch_size, epsilon, delta, steps,
             options, guard_radius, average, transforms.dp_sgd, transforms.dp_newton_minibatch)
  out, t_compile, t_run = _run_compiled(one_repeat, x, y, repeats, seed, timing_runs, placement,
                                        program=program)
  params, trajectory, state, resets = out
  objective = lambda w, x, y: glm.logistic_loss(w, x, y)  # noqa: E731
  return _finish(params, trajectory, state, resets, x, y, algorithm=algorithm,
                 objective=objective,
                 host=lambda p: _logistic_host(p, x, y), optimum=optimum, rho=None,
                 epsilon=epsilon, delta=delta, accounting="rdp", private=True, steps=steps,
                 seconds=(t_compile, t_run), average=average,
                 gradient_evaluations=steps,
                 curvature_evaluations=steps if algorithm == "newton-minibatch" else 0,
                 loss="logistic", options=options, objective_program=("logistic",))


def _finish(params, trajectory, state, resets, x, y, *, algorithm, objective, host, optimum, rho,
            epsilon, delta,
            accounting, private, steps, seconds, average, gradient_evaluations,
            curvature_evaluations, loss, options, objective_program=None) -> result_lib.FitResult:
  trajectory = np.asarray(trajectory)
  params = np.asarray(params)
  loss_star, ridge = optimum()
  both = host(np.concatenate([params, trajectory[:, -1]]))
  r = params.shape[0]
  rho_spent = (np.atleast_1d(accounting_lib.spent_rho(streaming.accountant_of(state)))
               if state is not None else np.zeros(r))
  return result_lib.from_arrays(
      algorithm=algorithm, n=int(x.shape[0]), params=params,
      losses=_trajectory_objective(objective, trajectory, x, y, objective_program),
      excess_losses=both[:r] - loss_star, final_excess_losses=both[r:] - loss_star,
      loss_star=float(loss_star), ridge=float(ridge), rho=rho, epsilon=float(epsilon),
      delta=float(delta), accounting=accounting, private=private, steps=steps,
      opt_state=state, rho_spent=rho_spent, seconds_compile=seconds[0],
      seconds_run=seconds[1], guard_resets=np.asarray(resets, np.int64).reshape(r),
      gradient_evaluations=gradient_evaluations,
      curvature_evaluations=curvature_evaluations, average=average, loss=loss,
      options=dict(options))


def _cubic(x, y, *, rho, epsilon, delta, steps, repeats, seed, accounting, timing_runs, average,
           guard_radius, options, placement=None) -> result_lib.FitResult:
  _check_options("cubic-newton", options, CUBIC_OPTIONS)
  if "mu" not in options:
    raise ValueError("cubic-newton needs mu=<the public ridge mu > 0>: it minimises the "
                     "mu-strongly convex F(w) = logistic loss + (mu/2)||w||^2.")
  mu = _validate.positive_float(options["mu"], "mu")
  radius = _validate.positive_float(options.get("radius", DEFAULT_CUBIC_RADIUS), "radius")
  n, d = x.shape
  rho, epsilon, delta = accounting_lib.resolve_budget(
      n, epsilon=epsilon, rho=rho, delta=delta, method=accounting,
      slack=int(steps or 1) * d * noise.tv_per_coordinate())  # the least a run releases
  consts = transforms.l2_logistic_constants(mu, radius)
  kwargs = dict(n=n, rho=rho, steps=steps, lipschitz=consts.lipschitz,
                smoothness=consts.smoothness, hessian_lipschitz=consts.hessian_lipschitz,
                strong_convexity=consts.strong_convexity, radius=radius)
  if options.get("max_inner_steps") is not None:
    kwargs["max_inner_steps"] = options["max_inner_steps"]
  if "neighbouring" in options:
    kwargs["neighbouring"] = options["neighbouring"]
  transforms.cubic_newton(key=0, **kwargs)  # eager checks.

  def one_repeat(key, x, y):
    tx = transforms.cubic_newton(key=key, **kwargs)
    w0 = jnp.zeros((d,), x.dtype)

    def inputs(w):
      _, g, h = glm.logistic_grad_and_curvature(w, x, y, "hessian")
      return g + mu * w, {"curvature_matrix": h + mu * jnp.eye(d, dtype=h.dtype)}

    return _scan_iterates(tx, w0, steps, inputs, guard_radius, average)

  program = ("cubic", kwargs, mu, d, steps, guard_radius, average, transforms.cubic_newton)
  out, t_compile, t_run = _run_compiled(one_repeat, x, y, repeats, seed, timing_runs, placement,
                                        program=program)
  params, trajectory, state, resets = out
  objective = lambda w, x, y: glm.logistic_loss(w, x, y) + 0.5 * mu * jnp.sum(w * w)  # noqa: E731
  return _finish(params, trajectory, state, resets, x, y, algorithm="cubic-newton",
                 objective=objective,
                 host=lambda p: _logistic_host(p, x, y, mu),
                 optimum=lambda: (ball_optimum(x, y, mu=mu, radius=radius)[1], mu), rho=rho,
                 epsilon=epsilon, delta=delta, accounting=accounting, private=True, steps=steps,
                 seconds=(t_compile, t_run), average=average, gradient_evaluations=steps,
                 curvature_evaluations=steps, loss="l2_logistic",
                 options=dict(options, mu=mu, radius=radius),
                 objective_program=("l2_logistic", mu))


def _general(x, y, algorithm, *, loss, loss_options, rho, epsilon, delta, steps, repeats, seed,
             accounting, timing_runs, average, guard_radius, options, placement=None) -> result_lib.FitResult:
  spec = losses_lib.get_loss(loss, **loss_options)
  n, d = x.shape
  rho, epsilon, delta = accounting_lib.resolve_budget(
      n, epsilon=epsilon, rho=rho, delta=delta, method=accounting,
      slack=int(steps or 1) * d * noise.tv_per_coordinate())  # the least a run releases
  newton = algorithm != "dp-gd"
  curvature = "qu" if algorithm == "qu-add" else "hessian"
  if newton:
    fixed = losses_lib.newton_options(spec, "add", curvature)
    factory = transforms.dp_newton
  else:
    fixed = losses_lib.gd_options(spec)
    factory = transforms.dp_gd
  clash = sorted(set(options) & (set(fixed) - {"learning_rate"}))
  if clash:
    raise TypeError(f"option(s) {clash} are fixed by the {loss!r} loss's public constants "
                    "(dpjax.problem.losses); remove them.")
  kwargs = dict(fixed, n=n, rho=rho, steps=steps)
  kwargs.update(options)
  if newton and spec.curvature_structure == "general" and not isinstance(
      kwargs.get("min_eigenvalue", "adaptive"), numbers.Real):
    raise ValueError(
        f"the {loss!r} loss needs a fixed min_eigenvalue=<lambda > 0> for {algorithm!r} (e.g. "
        f"0.1): the adaptive rule (Ganesh et al. 2023, Sec. 5.2) is derived for the logistic "
        f"loss, and its direction sensitivity here is L1/(n lambda^2).")
  factory(key=0, **kwargs)  # eager checks.

  def one_repeat(key, x, y):
    tx = factory(key=key, **kwargs)
    w0 = jnp.zeros((d,), x.dtype)

    def inputs(w):
      s = losses_lib.newton_step_inputs(spec, w, x, y, compute_hessian=newton,
                                        curvature=curvature)
      return s.grad, ({"curvature_matrix": s.hessian} if newton else {})

    return _scan_iterates(tx, w0, steps, inputs, guard_radius, average)

  program = ("general", algorithm, loss, loss_options, kwargs, d, steps, curvature, guard_radius,
             average, factory)
  out, t_compile, t_run = _run_compiled(one_repeat, x, y, repeats, seed, timing_runs, placement,
                                        program=program)
  params, trajectory, state, resets = out

  def host(p):
    z = np.asarray(x, np.float64) @ np.asarray(p, np.float64).T
    value = spec.example_loss.host(z, np.asarray(y, np.float64)[:, None])[0]
    p64 = np.asarray(p, np.float64)
    return np.mean(value, axis=0) + 0.5 * spec.regularization * np.sum(p64 * p64, axis=1)

  def optimum():
    return losses_lib.optimum(spec, x, y)[1], spec.regularization

  return _finish(params, trajectory, state, resets, x, y, algorithm=algorithm,
                 objective=lambda w, x, y: losses_lib.objective(spec, w, x, y), host=host,
                 optimum=optimum, rho=rho, epsilon=epsilon, delta=delta, accounting=accounting,
                 private=True, steps=steps, seconds=(t_compile, t_run), average=average,
                 gradient_evaluations=steps, curvature_evaluations=steps if newton else 0,
                 loss=loss, options=dict(options, **loss_options),
                 objective_program=("general", loss, loss_options))


def _baseline(x, y, algorithm, *, rho, epsilon, delta, steps, repeats, seed, accounting,
              timing_runs, average, guard_radius, options, optimum) -> result_lib.FitResult:
  n, d = x.shape
  keys = jax.random.split(_common.run_key(seed), repeats)
  kw = dict(epsilon=epsilon, rho=rho, delta=delta, accounting_method=accounting, **options)
  if algorithm != "aop":
    kw.update(steps=steps, guard_radius=guard_radius)
  elif steps is not None:
    raise TypeError("aop is not iterative: remove steps.")
  if average != "none":
    raise ValueError(f"{algorithm!r} returns its final iterate (AOP: its one output), as in "
                     "the paper; remove average.")
  start = time.perf_counter()
  out = baseline_run.run(algorithm, x, y, key=keys, **kw)
  first = time.perf_counter() - start
  seconds_run = first
  for _ in range(timing_runs if algorithm != "aop" else 0):
    start = time.perf_counter()
    out = baseline_run.run(algorithm, x, y, key=keys, **kw)
    seconds_run = min(seconds_run, time.perf_counter() - start)
  seconds_compile = max(first - seconds_run, 0.0)
  out_params, out_losses, private, epsilon, delta, rho, info = out
  params = np.asarray(out_params).reshape(repeats, d)  # the final iterate (or AOP's output).
  loss_star, ridge = optimum()
  excess = _logistic_host(params, x, y) - loss_star
  iterative = algorithm != "aop"
  losses = (np.asarray(out_losses).reshape(repeats, -1) if iterative
            else (excess + loss_star)[:, None])
  steps_done = steps if iterative else 0
  per_repeat = lambda v, dt: np.broadcast_to(np.asarray(v, dt).reshape(-1), (repeats,)).copy()  # noqa: E731
  rho_spent = per_repeat(info.get("rho_spent", 0.0), np.float64)
  resets = per_repeat(info.get("guard_resets", 0), np.int64)
  return result_lib.from_arrays(
      algorithm=algorithm, n=n, params=params, losses=losses, excess_losses=excess,
      final_excess_losses=excess.copy(), loss_star=float(loss_star), ridge=float(ridge),
      rho=None if rho is None else float(rho), epsilon=float(epsilon),
      delta=float(delta), accounting=accounting, private=bool(private),
      steps=steps_done, opt_state=None, rho_spent=rho_spent, seconds_compile=seconds_compile,
      seconds_run=seconds_run, guard_resets=resets, gradient_evaluations=steps_done,
      curvature_evaluations=0 if algorithm in ("aop", "dp-gd-oracle") else steps_done,
      average="none", loss="logistic", options=dict(options))


def run(data: Any, algorithm: str, *, epsilon: float | None, rho: float | None,
        delta: float | None, steps: int | None, repeats: int, seed: int | None, accounting: str,
        timing_runs: int, average: str | None, batch_size: int | None,
        curvature_batch_size: int | None, loss: str, loss_options: dict | None,
        guard_radius: float, options: dict, optimum: Callable) -> result_lib.FitResult:
  """Validates and runs one of :data:`ALGORITHMS` (or a general-loss fit); see :func:`dpjax.fit`.

  ``optimum(x, y) -> (loss_star, ridge)`` is the logistic optimum that
  :func:`dpjax.fit` caches. ``seed``: ``None`` (fresh OS entropy) or an int in
  ``[0, 2**64)``, as in :func:`dpjax.fit`. Every check runs before any
  compilation.
  """
  general = loss != "logistic"
  if general:
    if algorithm not in GENERAL_LOSS_ALGORITHMS:
      raise ValueError(
          f"loss={loss!r} runs with {GENERAL_LOSS_ALGORITHMS} (DP-GD and the double-noise "
          f"Newton method with 'add'); {algorithm!r} fits logistic regression only.")
    _validate.choice(loss, "loss", losses_lib.LOSSES)
  elif loss_options:
    raise TypeError("loss_options apply to a non-logistic loss only; remove them.")
  elif algorithm not in ALGORITHMS:
    raise ValueError(f"algorithm {algorithm!r} is not run by dpjax.training.drivers.")
  if (batch_size is not None or curvature_batch_size is not None) and \
      algorithm not in POISSON_ALGORITHMS:
    raise TypeError(f"batch_size / curvature_batch_size apply to {POISSON_ALGORITHMS} only; "
                    f"{algorithm!r} uses all n examples every step.")
  # A multi-device x keeps its sharding in the compiled run (the baselines run on one device).
  placement = _common.data_placement(data)
  data = _common.gather_data(data)
  if general:
    loss_options = dict(loss_options or {})
    x, y = _general_data(data, loss, loss_options)
  else:
    x, y = _host_data(data)
  if algorithm != "aop":
    if steps is None:
      raise ValueError(f"steps is required for algorithm {algorithm!r}: pass steps=<T>.")
    steps = _validate.positive_int(steps, "steps")
  repeats = _validate.positive_int(repeats, "repeats")
  seed = None if seed is None else _common.check_seed(seed, "seed")
  timing_runs = _validate.positive_int(timing_runs, "timing_runs")
  guard_radius = _validate.positive_float(guard_radius, "guard_radius")
  average = _validate.choice("none" if average is None else average, "average",
                             averaging.AVERAGES)
  common = dict(epsilon=epsilon, rho=rho, delta=delta, steps=steps, repeats=repeats, seed=seed,
                accounting=accounting, timing_runs=timing_runs, average=average,
                guard_radius=guard_radius, options=dict(options))
  if general:
    return _general(x, y, algorithm, loss=loss, loss_options=loss_options, placement=placement,
                    **common)
  logistic_optimum = lambda: optimum(x, y)  # noqa: E731
  if algorithm in POISSON_ALGORITHMS:
    return _poisson(x, y, algorithm, batch_size=batch_size,
                    curvature_batch_size=curvature_batch_size, optimum=logistic_optimum,
                    placement=placement, **common)
  if algorithm in CUBIC_ALGORITHMS:
    return _cubic(x, y, placement=placement, **common)
  return _baseline(x, y, algorithm, optimum=logistic_optimum, **common)


def _general_data(data: Any, loss: str, loss_options: dict) -> tuple[np.ndarray, np.ndarray]:
  """The data of a general-loss fit: ``||x|| <= 1`` (the contract); labels by the loss."""
  if isinstance(data, data_lib.Dataset):
    x, y = data.x, data.y
  elif isinstance(data, tuple) and len(data) == 2:
    x, y = data
  else:
    raise TypeError(f"data must be a dpjax.data.Dataset(x, y) or an (x, y) pair, got "
                    f"{type(data).__name__}.")
  _validate.as_float_array(y, "y", ndim=1)
  _validate.check_finite(y, "y")
  y_host = np.asarray(jax.device_get(y))
  ds = data_lib.validate_dataset((x, np.ones(np.shape(x)[:1], y_host.dtype)))
  xh = np.asarray(jax.device_get(ds.x))
  if y_host.shape[0] != xh.shape[0]:
    raise ValueError(f"x has {xh.shape[0]} rows but y has {y_host.shape[0]} labels; pass one "
                     "label per row.")
  spec = losses_lib.get_loss(loss, **loss_options)
  if loss == "l2_logistic":
    _validate.check_labels(y_host, "y")
  elif spec.label_bound is not None and y_host.size:
    top = float(np.max(np.abs(y_host)))
    if top > spec.label_bound:
      raise ValueError(f"labels reach |y| = {top:.6g} > label_bound={spec.label_bound:g} of the "
                       f"{loss!r} loss; pass a larger public label_bound in loss_options.")
  if loss == "poisson" and np.any(y_host < 0):
    raise ValueError("y must be >= 0 for the poisson loss (counts); found a negative label.")
  _common.check_host_float(xh)
  return xh, y_host.astype(xh.dtype)
