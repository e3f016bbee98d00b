"""Single-pass streaming fits: DP online-to-batch and its baselines (``dpjax.fit`` with a streaming algorithm).

``dpjax.fit(data, algorithm, batch_size=b, ...)`` with ``algorithm`` in
:data:`ALGORITHMS` streams the data once, in a random (public, seeded) order,
in minibatches of ``b`` examples: step ``t`` gets fresh examples that no
earlier or later step sees (the single-pass setting of
Zhang, Tran & Cutkosky, NeurIPS 2022, arXiv:2210.06593). The
algorithms:

* ``"otb"``: :func:`dpjax.transforms.online_to_batch` around
  :func:`dpjax.online.ogd` (AdaGrad-norm step), ``k = 1``;
* ``"otb-optimistic"``: around :func:`dpjax.online.optimistic_ogd` (their Sec. 3);
* ``"otb-strongly-convex"``: around :func:`dpjax.online.strongly_convex_ogd`
  (their Sec. 4; needs ``mu``, the strong convexity of the population loss);
* ``"otb-parameter-free"``: around :func:`dpjax.online.kt_betting`, ``k = 3``
  (their parameter-free variant);
* ``"single-pass-dp-sgd"``: :func:`dpjax.transforms.single_pass_dp_sgd`, each
  example used once, so the whole pass costs ``rho`` (parallel composition);
* ``"dp-ftrl"``: :func:`dpjax.transforms.dp_ftrl`, tree noise (Kairouz et al.
  2021).

**Model and domain.** A GLM with ``loss`` ``"logistic"`` (labels in {-1, +1})
or ``"least_squares"`` (``(<w, x> - y)^2 / 2``, real labels with ``|y| <=
label_bound``), ``||x|| <= 1``, on the ball ``B(0, radius)`` (default radius
1): every play/iterate is projected onto it. The constants follow
(:func:`loss_constants`): logistic ``G = 1, H = 1/4``; least squares ``G =
radius + label_bound, H = 1``; the diameter is ``D = 2 radius``.

**Privacy.** Every noise scale comes from a clip norm that per-example
clipping enforces, whatever the data: for online-to-batch the difference
clip ``C_0 = k G + (k + 1) D H`` (derived in :func:`dpjax.transforms.
online_to_batch.difference_clip_bound`), which leaves data meeting the
contract unclipped; for the baselines the gradient clip ``C = G``. The
neighbouring relation is one example (zero-out by default; ``neighbouring=
"replace-one"`` doubles the noise, ``dpjax.problem.minibatch.NEIGHBOURING``); the
random order is public randomness, independent of the data. The budget is
``rho`` for the whole pass, charged to the accountant in the transform's
state. The choices below (radius, label bound, step sizes, ``k``) are public
constants, never read from the data.

**Reporting (not private).** ``losses[:, t]`` for ``t < T`` is the mean
loss of batch ``t`` at the parameters *before* step ``t`` (progressive
validation: the batch is unseen, so it estimates the population loss);
``losses[:, T]`` the mean loss over all the data at the output. The excess
loss is the output's mean loss over all the data, in float64, minus the
unconstrained empirical optimum (:func:`optimum_loss`): a non-private
diagnostic, like every loss here.

Examples:
  >>> import dpjax
  >>> ds = dpjax.synthetic(0, n=4096, d=5)
  >>> res = dpjax.fit(ds, "otb", epsilon=2.0, batch_size=64, repeats=2)
  >>> res.steps, res.batch_size, res.params.shape, res.losses.shape
  (64, 64, (2, 5), (2, 65))
  >>> (res.rho_spent / res.rho).round(9).tolist()
  [1.0, 1.0]
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _common
from dpjax import _validate
from dpjax import accounting as accounting_lib
from dpjax import data as data_lib
from dpjax import runner
from dpjax.problem import minibatch
from dpjax import online
from dpjax.problem import solve
from dpjax.training import result as result_lib
from dpjax.mechanisms import tree_aggregation as ta
from dpjax import transforms
from dpjax.transforms import averaging
from dpjax.transforms.online_to_batch import difference_clip_bound

__all__ = [
    "ALGORITHMS",
    "DEFAULT_LABEL_BOUND",
    "DEFAULT_RADIUS",
    "LOSSES",
    "StreamPlan",
    "check_plan",
    "baseline_learning_rate",
    "default_learning_rate",
    "loss_constants",
    "make_transform",
    "optimum_loss",
    "scan_fit",
    "stream_order",
]

ALGORITHMS = ("otb", "otb-optimistic", "otb-strongly-convex", "otb-parameter-free",
              "single-pass-dp-sgd", "dp-ftrl")
LOSSES = minibatch.GLM_LOSSES
DEFAULT_RADIUS = 1.0
DEFAULT_LABEL_BOUND = 1.0

# The weight exponent k of each conversion (k = 3 for parameter-free, as in Zhang et al. 2022).
_DEFAULT_K = {"otb": 1.0, "otb-optimistic": 1.0, "otb-strongly-convex": 1.0,
              "otb-parameter-free": 3.0}
# Output when `average` is not given: the conversion's output x_T is already
# an average; projected SGD's guarantee is for an averaged iterate.
DEFAULT_AVERAGE = {"single-pass-dp-sgd": "last-half"}

_COMMON = ("radius", "label_bound", "clip_norm", "neighbouring")
_OTB = _COMMON + ("k", "mode")
OPTIONS = {
    "otb": _OTB + ("learning_rate", "gradient_bound"),
    "otb-optimistic": _OTB,
    "otb-strongly-convex": _OTB + ("mu", "reg_weight"),
    "otb-parameter-free": _OTB + ("scale", "initial_wealth"),
    "single-pass-dp-sgd": _COMMON + ("learning_rate",),
    "dp-ftrl": _COMMON + ("learning_rate", "mode"),
}


def loss_constants(loss: str, *, radius: float = DEFAULT_RADIUS,
                   label_bound: float = DEFAULT_LABEL_BOUND) -> tuple[float, float]:
  """``(G, H)``: Lipschitz and smoothness constants of a GLM loss on ``B(0, radius)``, ``||x|| <= 1``.

  Logistic: ``|d/dm log(1 + e^{-ym})| <= 1`` and ``<= 1/4`` for the second
  derivative, so ``G = 1``, ``H = 1/4``. Least squares ``(m - y)^2 / 2``:
  ``|m - y| <= radius + label_bound``, so ``G = radius + label_bound``,
  ``H = 1``.

  Examples:
    >>> from dpjax.training import streaming
    >>> streaming.loss_constants("logistic"), streaming.loss_constants("least_squares")
    ((1.0, 0.25), (2.0, 1.0))
  """
  loss = _validate.choice(loss, "loss", LOSSES)
  radius = _validate.positive_float(radius, "radius")
  label_bound = _validate.positive_float(label_bound, "label_bound")
  return (1.0, 0.25) if loss == "logistic" else (radius + label_bound, 1.0)


def default_learning_rate(*, diameter: float, lipschitz: float, noise_std: Any, batch_size: int,
                          steps: int, d: int) -> Any:
  """``eta = D / sqrt(T (G^2 + d (s / b)^2))``: the baselines' default step.

  Projected SGD with a stochastic gradient ``g`` of ``E ||g||^2 <= G^2 + d
  (s/b)^2`` (the mean of ``b`` clipped gradients plus Gaussian noise of std
  ``s`` on their sum) and averaged iterates has excess loss ``<= D sqrt(E
  ||g||^2) / sqrt(T)`` at this step (Nemirovski et al. 2009). Every input is
  public, so the choice costs no privacy. ``noise_std`` may be traced.

  Examples:
    >>> from dpjax.training import streaming
    >>> round(streaming.default_learning_rate(diameter=2.0, lipschitz=1.0, noise_std=0.0,
    ...       batch_size=10, steps=100, d=5), 6)
    0.2
  """
  per_mean = noise_std / batch_size
  total = steps * (lipschitz**2 + d * per_mean * per_mean)
  return diameter / (math.sqrt(total) if isinstance(total, (int, float)) else jnp.sqrt(total))


def baseline_learning_rate(algorithm: str, *, d: int, batch_size: int, steps: int, rho: Any,
                           loss: str, radius: float = DEFAULT_RADIUS,
                           label_bound: float = DEFAULT_LABEL_BOUND,
                           clip_norm: float | None = None,
                           neighbouring: str = "zero-out") -> Any:
  """The public default step of a baseline: :func:`default_learning_rate` with its noise.

  Single-pass DP-SGD: ``s`` is the std of the Gaussian noise on each step's
  clipped sum (``accounting.gaussian_sigma(factor C, rho)``). DP-FTRL: ``s =
  c factor C sqrt(L)``, the std of a prefix sum's tree noise at full depth.
  ``C`` defaults to the loss's Lipschitz constant. ``rho`` may be traced.

  Examples:
    >>> from dpjax.training import streaming
    >>> lr = streaming.baseline_learning_rate("single-pass-dp-sgd", d=10, batch_size=100,
    ...                                       steps=100, rho=0.5, loss="logistic")
    >>> round(float(lr), 4)
    0.1999
  """
  algorithm = _validate.choice(algorithm, "algorithm", ("single-pass-dp-sgd", "dp-ftrl"))
  lipschitz, _ = loss_constants(loss, radius=radius, label_bound=label_bound)
  clip = lipschitz if clip_norm is None else _validate.positive_float(clip_norm, "clip_norm")
  # Each baseline's own noise, from its mechanism.
  if algorithm == "single-pass-dp-sgd":
    _, noise = transforms.single_pass_noise_scale(clip_norm=clip, rho=rho,
                                                  neighbouring=neighbouring)
  else:
    noise = ta.prefix_noise_scale(steps=steps, rho=rho,
                                  sensitivity=minibatch.sensitivity_factor(neighbouring) * clip)
  return default_learning_rate(diameter=2 * radius, lipschitz=lipschitz, noise_std=noise,
                               batch_size=batch_size, steps=steps, d=d)


def make_transform(algorithm: str, *, d: int, batch_size: int, steps: int, rho: Any, loss: str,
                   key: Any, **options: Any) -> optax.GradientTransformationExtraArgs:
  """The transform :func:`dpjax.fit` runs for a streaming ``algorithm`` (module docstring).

  ``options`` (keyword, per algorithm; ``_OPTIONS``): ``radius``,
  ``label_bound`` (least squares), ``clip_norm``, ``neighbouring``; for the
  conversions ``k`` and the tree ``mode``, and the learner's own (``otb``:
  ``learning_rate`` or ``gradient_bound``; ``otb-strongly-convex``: ``mu``
  (required), ``reg_weight``; ``otb-parameter-free``: ``scale`` (default
  ``T^k (G + c C_k sqrt(d L) / (T b))``, a public bound on ``beta_t ||u_t||``
  for typical noise), ``initial_wealth``); for the baselines
  ``learning_rate`` (default :func:`baseline_learning_rate`) and, for
  DP-FTRL, ``mode``. ``rho`` may be traced (every default is computed in
  the graph then).

  Examples:
    >>> from dpjax.training import streaming
    >>> tx = streaming.make_transform("otb", d=3, batch_size=8, steps=16, rho=1.0,
    ...                               loss="logistic", key=0)
    >>> type(tx.init(jnp.zeros(3))).__name__
    'OnlineToBatchState'
  """
  algorithm = _validate.choice(algorithm, "algorithm", ALGORITHMS)
  check_options(algorithm, options)
  options = dict(options)
  radius = _validate.positive_float(options.pop("radius", DEFAULT_RADIUS), "radius")
  label_bound = options.pop("label_bound", DEFAULT_LABEL_BOUND)
  lipschitz, smoothness = loss_constants(loss, radius=radius, label_bound=label_bound)
  neighbouring = options.pop("neighbouring", "zero-out")
  factor = minibatch.sensitivity_factor(neighbouring)
  projection = lambda w: online.project_ball(w, jnp.zeros_like(w), radius)  # noqa: E731
  common = dict(batch_size=batch_size, loss=loss, key=key, neighbouring=neighbouring)
  if algorithm in ("single-pass-dp-sgd", "dp-ftrl"):
    clip = _validate.positive_float(options.pop("clip_norm", lipschitz), "clip_norm")
    lr = options.pop("learning_rate", None)
    if lr is None:
      lr = baseline_learning_rate(algorithm, d=d, batch_size=batch_size, steps=steps, rho=rho,
                                  loss=loss, radius=radius, label_bound=label_bound,
                                  clip_norm=clip, neighbouring=neighbouring)
    if algorithm == "single-pass-dp-sgd":
      return transforms.single_pass_dp_sgd(learning_rate=lr, clip_norm=clip, rho=rho,
                                           steps=steps, projection=projection, **common)
    return transforms.dp_ftrl(learning_rate=lr, clip_norm=clip, steps=steps, rho=rho,
                              projection=projection, mode=options.pop("mode", "buffered"),
                              **common)
  k = _validate.positive_float(options.pop("k", _DEFAULT_K[algorithm]), "k")
  clip = options.pop("clip_norm", None)
  if clip is None:
    clip = difference_clip_bound(k, lipschitz, smoothness, 2 * radius)
  mode = options.pop("mode", "buffered")
  if algorithm == "otb":
    learner = online.ogd(radius=radius, **options)
  elif algorithm == "otb-optimistic":
    learner = online.optimistic_ogd(radius=radius)
  elif algorithm == "otb-strongly-convex":
    if "mu" not in options:
      raise ValueError(
          "otb-strongly-convex needs mu=<the strong convexity of the population loss> (a public "
          "constant, e.g. the smallest eigenvalue of E[x x^T] for least squares); or use 'otb'.")
    learner = online.strongly_convex_ogd(radius=radius, **options)
  else:
    if "scale" not in options:
      # The tree's prefix-sum noise over the d coordinates, from the mechanism.
      clip_value = _validate.positive_float(clip, "clip_norm")
      noise = ta.prefix_noise_scale(steps=steps, rho=rho, sensitivity=factor * clip_value, dim=d)
      options["scale"] = steps**k * (lipschitz + noise / (steps * batch_size))
    learner = online.kt_betting(radius=radius, **options)
  return transforms.online_to_batch(learner, steps=steps, rho=rho, k=k, clip_norm=clip,
                                    mode=mode, **common)


def check_options(algorithm: str, options: dict) -> None:
  """Unknown options of a streaming algorithm are a ``TypeError`` listing the accepted ones."""
  unknown = sorted(set(options) - set(OPTIONS[algorithm]))
  if unknown:
    raise TypeError(f"unknown option(s) {unknown} for algorithm {algorithm!r}; it accepts "
                    f"{list(OPTIONS[algorithm])}.")


def glm_mean_loss(params: jax.Array, batch: tuple[jax.Array, jax.Array], loss: str) -> jax.Array:
  """Mean loss of a batch ``(x, y)`` at ``params`` (stable softplus for logistic)."""
  xs, ys = batch
  m = xs @ params
  if loss == "logistic":
    return jnp.mean(jnp.logaddexp(0.0, -ys * m))
  return 0.5 * jnp.mean(jnp.square(m - ys))


def scan_fit(tx: optax.GradientTransformation, w0: jax.Array, steps: int,
             next_batch: Callable[[jax.Array], Any], *, average: str = "none",
             loss: str | None = None) -> tuple[jax.Array, jax.Array, Any, jax.Array | None]:
  """One compiled single pass over ``t = 0 .. T-1`` with ``batch = next_batch(t)``.

  The pass is :func:`dpjax.runner.scan_steps`, without a divergence guard.

  Each step applies ``tx.update(None, state, w, batch=batch)``; the output is
  the final parameters, or their tail mean for ``average`` (post-processing
  of released values, :func:`dpjax.transforms.averaging.fold_iterate`).
  ``next_batch`` may gather from a dataset or draw fresh examples. With
  ``loss``, the batch's mean loss at ``w`` before the step is recorded
  (progressive validation; not private, reporting only).

  Returns:
    ``(output, w_T, final_state, losses [T] or None)``.
  """

  def inputs(w, t):
    batch = next_batch(t)
    batch_loss = glm_mean_loss(w, batch, loss) if loss is not None else None
    return None, {"batch": batch}, batch_loss

  scanned = runner.scan_steps(tx, w0, steps, inputs, average=average)
  return scanned.output, scanned.params, scanned.state, scanned.records


def optimum_loss(x: np.ndarray, y: np.ndarray, loss: str) -> tuple[float, float]:
  """``(loss_star, ridge)``: the unconstrained empirical optimum, float64.

  Logistic: :func:`dpjax.problem.solve.optimum_loss` (Newton; ridge ``1e-9`` on
  separable data). Least squares: ``min_w ||X w - y||^2 / (2n)`` by
  ``numpy.linalg.lstsq`` (minimum-norm solution; 0 when ``d >= n`` and the
  rows are independent).
  """
  if loss == "logistic":
    return solve.optimum_loss(x, y)
  x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)
  w = np.linalg.lstsq(x64, y64, rcond=None)[0]
  return float(0.5 * np.mean(np.square(x64 @ w - y64))), 0.0


def host_losses(params: np.ndarray, x: np.ndarray, y: np.ndarray, loss: str) -> np.ndarray:
  """Mean loss of each row of ``params`` ``[r, d]`` over the data, in float64."""
  m = np.asarray(x, np.float64) @ np.asarray(params, np.float64).T  # [n, r]
  y64 = np.asarray(y, np.float64)[:, None]
  if loss == "logistic":
    return np.mean(np.logaddexp(0.0, -y64 * m), axis=0)
  return 0.5 * np.mean(np.square(m - y64), axis=0)


class StreamPlan(NamedTuple):
  """A validated streaming run (everything but the privacy level)."""

  algorithm: str
  x: np.ndarray
  y: np.ndarray
  n: int
  d: int
  steps: int
  batch_size: int
  loss: str
  repeats: int
  average: str
  options: dict
  placement: Any = None  # the caller's multi-device sharding (_common.data_placement), or None.


def check_data(data: Any, loss: str, label_bound: float) -> tuple[np.ndarray, np.ndarray]:
  """The data contract of a streaming fit: ``||x|| <= 1``; labels ``+-1`` or ``|y| <= label_bound``."""
  if loss == "logistic":
    ds = data_lib.validate_dataset(data)
    return np.asarray(jax.device_get(ds.x)), np.asarray(jax.device_get(ds.y))
  if not isinstance(data, tuple) or len(data) != 2:
    raise TypeError(f"data must be a dpjax.data.Dataset(x, y) or an (x, y) pair, got "
                    f"{type(data).__name__}.")
  x, y = data
  _validate.as_float_array(y, "y", ndim=1)
  _validate.check_finite(y, "y")
  y_host = np.asarray(jax.device_get(y))
  # The x checks (shape, finite, row norms) of the shared contract, with stand-in labels.
  ds = data_lib.validate_dataset((x, np.ones(np.shape(x)[:1], y_host.dtype)))
  if y_host.shape[0] != np.shape(ds.x)[0]:
    raise ValueError(f"x has {np.shape(ds.x)[0]} rows but y has {y_host.shape[0]} labels; pass "
                     "one label per row.")
  top = float(np.max(np.abs(y_host))) if y_host.size else 0.0
  if top > label_bound:
    raise ValueError(
        f"least-squares labels reach |y| = {top:.6g} > label_bound={label_bound:g}; pass a public "
        "label_bound >= every |y| (it sets the clip norm) or rescale y. Labels are never clipped "
        "silently.")
  return np.asarray(jax.device_get(ds.x)), y_host


def check_plan(data: Any, algorithm: str, *, batch_size: Any, steps: Any, loss: Any,
               repeats: int, average: Any, options: dict) -> StreamPlan:
  """Eager checks of a streaming fit (``dpjax.fit`` calls it before any work)."""
  algorithm = _validate.choice(algorithm, "algorithm", ALGORITHMS)
  loss = _validate.choice(loss, "loss", LOSSES)
  check_options(algorithm, options)
  if batch_size is None:
    raise ValueError(f"algorithm {algorithm!r} streams the data once in minibatches: pass "
                     "batch_size=<b> (examples per step).")
  batch_size = _validate.positive_int(batch_size, "batch_size")
  label_bound = _validate.positive_float(options.get("label_bound", DEFAULT_LABEL_BOUND),
                                         "label_bound")
  placement = _common.data_placement(data)  # the caller's sharding, kept for the run.
  x, y = check_data(_common.gather_data(data), loss, label_bound)
  n, d = x.shape
  if batch_size > n:
    raise ValueError(f"batch_size={batch_size} is larger than the n={n} examples; a single pass "
                     "needs batch_size <= n.")
  if steps is None:
    steps = n // batch_size
  steps = _validate.positive_int(steps, "steps")
  if steps * batch_size > n:
    raise ValueError(
        f"steps={steps} x batch_size={batch_size} = {steps * batch_size} examples, but a single "
        f"pass has only n={n}; pass steps <= {n // batch_size} (the default) or a smaller "
        "batch_size.")
  _common.check_host_float(x)
  if average is None:
    average = DEFAULT_AVERAGE.get(algorithm, "none")
  average = _validate.choice(average, "average", averaging.AVERAGES)
  return StreamPlan(algorithm, x, y.astype(x.dtype), n, d, steps, batch_size, loss,
                    _validate.positive_int(repeats, "repeats"), average, dict(options), placement)


def accountant_of(state: Any) -> accounting_lib.AccountantState:
  """The (only) accountant inside a transform state."""
  found = [s for s in jax.tree.leaves(state, is_leaf=lambda s: isinstance(
      s, accounting_lib.AccountantState)) if isinstance(s, accounting_lib.AccountantState)]
  if len(found) != 1:
    raise TypeError(f"expected one AccountantState in the state, found {len(found)}.")
  return found[0]


def stream_order(key: jax.Array, n: int, steps: int, batch_size: int) -> jax.Array:
  """``[steps, batch_size]`` int32 example indices of a single pass: distinct, in random order.

  A uniformly random permutation of ``0 .. n-1`` (public randomness, drawn
  from ``key`` and independent of the data), cut into ``steps`` batches;
  the last ``n - steps * batch_size`` examples of the permutation are unused.

  Examples:
    >>> import jax, numpy as np
    >>> from dpjax.training import streaming
    >>> order = streaming.stream_order(jax.random.key(0), 10, 3, 3)
    >>> order.shape, len(np.unique(np.asarray(order)))
    ((3, 3), 9)
  """
  return jax.random.permutation(key, n)[:steps * batch_size].reshape(steps, batch_size)


def execute(plan: StreamPlan, *, rho: float, epsilon: float, delta: float, accounting: str,
            seed: int | None, timing_runs: int) -> result_lib.FitResult:
  """Compiles and runs ``plan`` (all repeats in one ``jit`` of a ``vmap``): its :class:`dpjax.training.FitResult`.

  The run's key is ``dpjax._common.run_key(seed)``: fresh OS entropy for
  ``seed=None``, else every bit of the int seed (:func:`dpjax.fit`). Repeat
  ``r`` uses ``jax.random.split(key, repeats)[r]``, split into the data
  order's key (a fresh permutation of the examples; the first ``T b`` are
  used) and the transform's key.
  """
  x, y, d, b, steps = plan.x, plan.y, plan.d, plan.batch_size, plan.steps

  def one_repeat(key, x, y):
    order_key, tx_key = jax.random.split(key)
    order = stream_order(order_key, plan.n, steps, b)
    tx = make_transform(plan.algorithm, d=d, batch_size=b, steps=steps, rho=rho, loss=plan.loss,
                        key=tx_key, **plan.options)
    w0 = jnp.zeros((d,), x.dtype)
    out, w_last, state, losses = scan_fit(tx, w0, steps, lambda t: (x[order[t]], y[order[t]]),
                                          average=plan.average, loss=plan.loss)
    return out, w_last, losses, state

  keys = runner.repeat_keys(_common.run_key(seed), plan.repeats, plan.placement)
  args = (keys, *_common.place_data(x, y, plan.placement))  # sharded as the caller's x, or not.
  program = ("stream", plan.algorithm, plan.n, d, b, steps, rho, plan.loss, plan.options,
             plan.average, make_transform)
  result, seconds_compile, seconds_run = runner.run(runner.program(one_repeat), args,
                                                    timing_runs, program_key=program)
  out, w_last, losses, state = result
  loss_star, ridge = optimum_loss(x, y, plan.loss)
  both = host_losses(np.concatenate([out, w_last]), x, y, plan.loss)
  r = plan.repeats
  return result_lib.from_arrays(
      params=np.asarray(out),
      losses=np.concatenate([np.asarray(losses), both[:r, None]], axis=1),
      excess_losses=both[:r] - loss_star, final_excess_losses=both[r:] - loss_star,
      loss_star=float(loss_star), ridge=float(ridge), rho=float(rho), epsilon=float(epsilon),
      delta=float(delta), accounting=accounting, algorithm=plan.algorithm, n=int(plan.n),
      steps=plan.steps, seconds_compile=seconds_compile, seconds_run=seconds_run,
      guard_resets=np.zeros(r, np.int64),
      rho_spent=np.atleast_1d(accounting_lib.spent_rho(accountant_of(state))), opt_state=state,
      average=plan.average, gradient_evaluations=plan.steps, curvature_evaluations=0,
      options=dict(plan.options), batch_size=plan.batch_size, loss=plan.loss, seed=seed)


def check_transform(plan: StreamPlan, rho: float) -> None:
  """Builds the transform once on the host, so its own checks run before compiling."""
  make_transform(plan.algorithm, d=plan.d, batch_size=plan.batch_size, steps=plan.steps, rho=rho,
                 loss=plan.loss, key=0, **plan.options)
