"""Per-example convex losses with their public constants (Ganesh et al. NeurIPS 2023, Remark 5.5).

A :class:`Loss` bundles a per-example loss ``f(w, (x, y))`` (the data term of
ONE example) with the public constants the privacy proofs of
:func:`dpjax.dp_newton` and :func:`dpjax.dp_gd` need: the per-example
gradient bound ``L0`` (``grad_norm_bound``), the per-example Hessian bound
``L1`` (``curvature_norm_bound``, Frobenius norm, which bounds the operator
norm) and a public ridge ``mu`` (``regularization``). The objective is

``F(w) = (1/n) sum_i f(w, (x_i, y_i)) + (mu / 2) ||w||^2``.

Privacy does not rest on the data contract: :func:`newton_step_inputs`
clips every example's gradient to ``L0`` and Hessian to ``L1`` (through
:func:`dpjax.problem.per_example.mean_grad_and_hessian`), whatever the data. With
``n`` public, the relation is the ``neighbouring`` argument of
:func:`dpjax.dp_newton` / :func:`dpjax.dp_gd` (:mod:`dpjax.problem._neighbouring`):

* ``"zero-out"`` (the default): one row becomes the null row, which
  contributes zero gradient and zero Hessian. For every loss here the null
  row is ``x = 0``: a GLM term ``phi(<w, x>, y)`` at ``x = 0`` is a constant
  in ``w`` (gradient ``phi' x = 0``, Hessian ``phi'' x x^T = 0``, for any
  label; so is the QU surrogate, whose Hessian is ``c x x^T``). One example
  then moves the mean gradient by ``<= L0/n`` and the mean Hessian by
  ``<= L1/n`` (Frobenius). For a hand-built :class:`Loss` whose term is not
  constant at ``x = 0`` (e.g. a per-example intercept or ridge inside
  ``example_loss``), the null row is not ``x = 0``: zero-out then means
  "the row is absent but ``n`` still counts it", and ``replace-one`` is the
  relation that covers swapping in a real row.
* ``"replace-one"``: one row becomes any other. Two clipped gradients differ
  by ``<= 2 L0`` (the gradient noise doubles); two clipped Hessians are PSD
  (each example's loss is convex in ``w``: ``phi'' >= 0`` for every loss
  here, and clipping only scales), so by :mod:`dpjax.problem._neighbouring` their
  difference has operator norm ``<= L1`` and their traces differ by ``<=
  sqrt(d) L1``: Newton-add's direction sensitivity stays ``L1 / (n lam^2)``
  and the trace sensitivity ``sqrt(d) L1 / n``. A hand-built loss must be
  convex per example for this (and for the zero-out proof of ``add``).

The ridge's gradient ``mu w`` and Hessian ``mu I`` depend on no example, so they
are added after clipping, without noise, and cancel in every difference
between neighbours. The contract (``||x|| <= 1`` and the
label bounds below) only guarantees that clipping never triggers, so that the
clipped objective IS ``F`` and the fits converge to its optimum.

Constants, for ``||x|| <= 1`` and ``z = <w, x>`` (every loss here is a GLM
``f = phi(z, y)``: gradient ``phi'(z) x``, Hessian ``phi''(z) x x^T``, so
``L0 = sup |phi'|`` and ``L1 = sup phi''``):

* ``"logistic"`` (reference; ``y in {-1, +1}``): ``phi = log(1 + e^{-y z})``,
  ``|phi'| = sigma(-y z) < 1`` so ``L0 = 1``;
  ``phi'' = sigma(z) sigma(-z) <= 1/4`` so ``L1 = 1/4``. The per-example
  Hessian is the rank-one logistic SOI, so ``curvature_structure="rank_one"``
  (the paper's setting; clip allowed).
* ``"l2_logistic"``: the same data term plus a public ridge ``mu > 0``
  (strongly convex, so the optimum always exists). Same ``L0, L1``.
  Clip is refused (the paper's clip constant covers the bare rank-one SOI,
  not ``H + mu I``); add keeps the rank-one Sherman-Morrison sensitivity,
  since the ridge cancels in ``H - H'`` and only raises ``H + lam I``.
* ``"pseudo_huber"`` (robust regression, any real ``y``, parameter
  ``delta > 0``): ``phi(r) = delta^2 (sqrt(1 + (r/delta)^2) - 1)``,
  ``r = z - y``; ``phi'(r) = delta r / sqrt(delta^2 + r^2)``, so
  ``|phi'| < delta``: ``L0 = delta`` for EVERY label (no label bound);
  ``phi''(r) = (delta^2 / (delta^2 + r^2))^{3/2} <= 1`` (at ``r = 0``):
  ``L1 = 1``. Computed as ``delta r^2 / (hypot(delta, r) + delta)`` with
  exact derivatives (no cancellation at ``r = 0``, no overflow at large ``r``).
* ``"poisson"`` (log-linear counts, ``0 <= y <= label_bound = Y``, on the
  ball ``||w|| <= R = radius``): ``phi = e(z) - y z`` where ``e = exp`` for
  ``z <= R`` and, beyond, its second-order Taylor extension
  ``e^R (1 + (z - R) + (z - R)^2 / 2)`` (convex, C^2, equal to the Poisson
  loss on the ball, and it never overflows). On the ball ``|z| <= R`` so
  ``|phi'| = |e^z - y| <= max(e^R, Y)``: ``L0 = max(e^R, Y)``; everywhere
  ``phi'' = e^{min(z, R)} <= e^R``: ``L1 = e^R``. Outside the ball the
  gradient grows and clipping enforces ``L0``.

The non-logistic losses declare ``curvature_structure="general"``: Newton
must use ``modification="add"`` with the direction sensitivity
``L1 / (n lam^2)`` (:func:`newton_options`).

Non-private helpers (baselines, diagnostics; never released by a private
fit): :func:`objective` (the unclipped objective), :func:`optimum` (host
float64 Newton to the exact ``w*``, for excess-loss reporting and tests).

Examples:
  >>> import jax.numpy as jnp
  >>> from dpjax.problem import losses
  >>> loss = losses.get_loss("pseudo_huber", delta=0.5)
  >>> loss.grad_norm_bound, loss.curvature_norm_bound, loss.curvature_structure
  (0.5, 1.0, 'general')
  >>> x = jnp.array([[0.6, 0.8], [1.0, 0.0]]); y = jnp.array([3.0, -1.0])
  >>> inputs = losses.newton_step_inputs(loss, jnp.zeros(2), x, y)
  >>> inputs.grad.round(4)  # mean of phi'(r_i) x_i with |phi'| < delta = 0.5
  Array([ 0.0756, -0.1973], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.problem import glm
from dpjax.problem import per_example
from dpjax.problem._links import _extended_exp, _pseudo_huber, _softplus

__all__ = [
    "LOSSES",
    "Loss",
    "StepInputs",
    "get_loss",
    "gd_options",
    "newton_options",
    "newton_step_inputs",
    "objective",
    "optimum",
]

LOSSES = ("logistic", "l2_logistic", "pseudo_huber", "poisson")


class Loss(NamedTuple):
  """A per-example loss and its public constants (module docstring derivations)."""

  name: str  # the registry name (LOSSES), or the user's own for a hand-built Loss.
  example_loss: Callable[[jax.Array, Any], jax.Array]  # (w (d,), (x (d,), y ())) -> scalar data term of ONE example.
  grad_norm_bound: float  # L0: each example's gradient is clipped to this L2 norm.
  curvature_norm_bound: float  # L1: each example's Hessian is clipped to this Frobenius norm.
  regularization: float  # mu >= 0: public ridge (mu/2)||w||^2, added unclipped and un-noised.
  curvature_structure: str  # "rank_one" (the logistic SOI) or "general" (dp_newton's option).
  radius: float | None  # ||w|| <= radius on which L0 holds without clipping; None: everywhere.
  label_bound: float | None  # label contract: |y| <= label_bound (poisson: 0 <= y); None: none/±1.


class StepInputs(NamedTuple):
  """What one private step consumes, from :func:`newton_step_inputs`.

  ``objective`` and the clip counts are NON-PRIVATE diagnostics (no noise):
  never release them or branch on them in a private fit.
  """

  objective: jax.Array  # (), unclipped mean loss + (mu/2)||w||^2 (non-private diagnostic).
  grad: jax.Array  # (d,), mean clipped per-example gradient + mu w: the gradient to privatise.
  hessian: jax.Array | None  # (d, d), mean clipped per-example Hessian + mu I; None without Hessians.
  num_grad_clipped: jax.Array  # (), int32, examples whose gradient was scaled down (non-private).
  num_curvature_clipped: jax.Array | None  # (), int32, same for Hessians (non-private); or None.


@dataclasses.dataclass(frozen=True)
class _GLMLoss:
  """``phi(<w, x>, y)`` for one example; hashable, so jit caches by value."""

  kind: str
  delta: float = 1.0
  radius: float = 1.0

  def __call__(self, params: jax.Array, example: Any) -> jax.Array:
    x, y = example
    z = jnp.dot(x, params)
    return self.link(z, jnp.asarray(y, z.dtype))

  def link(self, z: jax.Array, y: jax.Array) -> jax.Array:
    """``phi(z, y)`` (scalar in, scalar out; JAX)."""
    if self.kind == "logistic":
      return _softplus(-y * z)
    if self.kind == "pseudo_huber":
      return _pseudo_huber(z - y, self.delta)
    return _extended_exp(z, self.radius) - y * z

  def qu_coefficient(self, z: jax.Array, y: jax.Array) -> jax.Array:
    """``c(z, y)`` of the global quadratic upper bound SOI ``c x x^T`` (logistic, pseudo-Huber)."""
    if self.kind == "logistic":
      return glm.qu_coefficient(y * z)  # tanh(m/2) / (2m), m = y z (y^2 = 1).
    return self.delta / jnp.hypot(self.delta, z - y)  # phi'(r) / r, r = z - y.


  def host(self, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(phi, dphi/dz, d2phi/dz2)`` in float64 numpy (an independent reference)."""
    with np.errstate(over="ignore"):
      if self.kind == "logistic":
        m = y * z
        return (np.logaddexp(0.0, -m), -y * 0.5 * (1.0 - np.tanh(0.5 * m)),
                0.25 / np.cosh(0.5 * m) ** 2)
      if self.kind == "pseudo_huber":
        r, dl = z - y, self.delta
        h = np.hypot(dl, r)
        return dl * r * r / (h + dl), dl * r / h, (dl / h) ** 3
      inside = z <= self.radius
      e_r = math.exp(self.radius)
      d = np.where(inside, 0.0, z - self.radius)
      e = np.where(inside, np.exp(np.minimum(z, self.radius)), e_r * (1.0 + d + 0.5 * d * d))
      e1 = np.where(inside, e, e_r * (1.0 + d))
      e2 = np.exp(np.minimum(z, self.radius))
      return e - y * z, e1 - y, e2


@dataclasses.dataclass(frozen=True)
class _QUSurrogate:
  """Same value and gradient as ``base`` at ``w``, Hessian ``c x x^T`` (the QU SOI).

  ``s(w) = f(w0) + phi'(z0) (z - z0) + c(z0) (z - z0)^2 / 2`` with
  ``w0 = stop_gradient(w)``, ``z = <w, x>``: at ``w = w0`` the value is
  ``f(w)``, the gradient ``phi'(z) x`` and the Hessian ``c(z) x x^T``.
  """

  base: _GLMLoss

  def __call__(self, params: jax.Array, example: Any) -> jax.Array:
    x, y = example
    z = jnp.dot(x, params)
    z0 = jax.lax.stop_gradient(z)
    y = jnp.asarray(y, z.dtype)
    f0, slope = jax.value_and_grad(self.base.link)(z0, y)
    c = self.base.qu_coefficient(z0, y)
    dz = z - z0
    return f0 + slope * dz + 0.5 * c * dz * dz


# ----------------------------------------------------------------------------
# Registry.
# ----------------------------------------------------------------------------

_PARAMS = {
    "logistic": (),
    "l2_logistic": ("regularization",),
    "pseudo_huber": ("delta", "regularization"),
    "poisson": ("radius", "label_bound", "regularization"),
}


def get_loss(name: str, **params: Any) -> Loss:
  """Builds a registered loss with its public constants (module docstring).

  Parameters (all public, data-independent):

  * ``"logistic"``: none (``L0 = 1``, ``L1 = 1/4``, rank-one SOI);
  * ``"l2_logistic"``: ``regularization = mu > 0`` (required);
  * ``"pseudo_huber"``: ``delta > 0`` (default 1; ``L0 = delta``, ``L1 = 1``),
    ``regularization >= 0`` (default 0);
  * ``"poisson"``: ``radius = R > 0`` (default 1), ``label_bound = Y > 0``
    (required; labels in ``[0, Y]``), ``regularization >= 0`` (default 0);
    ``L0 = max(e^R, Y)``, ``L1 = e^R``.

  Args:
    name: one of :data:`LOSSES`.
    **params: the loss's parameters above.

  Returns:
    A :class:`Loss`.

  Raises:
    ValueError, TypeError: an unknown name or parameter, a missing required
      parameter, or a bad value.

  Examples:
    >>> from dpjax.problem import losses
    >>> loss = losses.get_loss("poisson", radius=1.0, label_bound=5.0)
    >>> loss.grad_norm_bound, round(loss.curvature_norm_bound, 6)
    (5.0, 2.718282)
  """
  _validate.choice(name, "name", LOSSES)
  unknown = sorted(set(params) - set(_PARAMS[name]))
  if unknown:
    raise TypeError(
        f"get_loss({name!r}) got unknown parameter(s) {unknown}; it accepts "
        f"{list(_PARAMS[name]) or 'none'}."
    )
  mu = _validate.nonnegative_float(params.get("regularization", 0.0), "regularization")
  if name == "logistic":
    return Loss(name, _GLMLoss("logistic"), 1.0, 0.25, 0.0, "rank_one", None, 1.0)
  if name == "l2_logistic":
    if "regularization" not in params or mu <= 0:
      raise ValueError(
          "get_loss('l2_logistic') needs regularization=mu > 0 (the public ridge "
          "(mu/2)||w||^2), e.g. regularization=1e-3; for no ridge use 'logistic'."
      )
    return Loss(name, _GLMLoss("logistic"), 1.0, 0.25, mu, "rank_one", None, 1.0)
  if name == "pseudo_huber":
    delta = _validate.positive_float(params.get("delta", 1.0), "delta")
    return Loss(name, _GLMLoss("pseudo_huber", delta=delta), delta, 1.0, mu, "general",
                None, None)
  radius = _validate.positive_float(params.get("radius", 1.0), "radius")
  if "label_bound" not in params:
    raise ValueError(
        "get_loss('poisson') needs label_bound=Y > 0, a public bound on the counts "
        "(labels in [0, Y]); it sets L0 = max(e^radius, Y)."
    )
  label_bound = _validate.positive_float(params["label_bound"], "label_bound")
  if radius > 20:
    raise ValueError(
        f"radius={radius!r} gives L1 = e^radius > 4.8e8; pass radius <= 20 (rescale the "
        "features instead)."
    )
  e_r = math.exp(radius)
  return Loss(name, _GLMLoss("poisson", radius=radius), max(e_r, label_bound), e_r, mu,
              "general", radius, label_bound)


def _check_loss(loss: Any) -> Loss:
  if not isinstance(loss, Loss):
    raise TypeError(
        f"loss must be a dpjax.problem.losses.Loss, got {type(loss).__name__}; build one with "
        "dpjax.problem.losses.get_loss(name, ...)."
    )
  if not callable(loss.example_loss):
    raise TypeError("loss.example_loss must be callable (params, (x, y)) -> scalar.")
  _validate.positive_float(loss.grad_norm_bound, "loss.grad_norm_bound")
  _validate.positive_float(loss.curvature_norm_bound, "loss.curvature_norm_bound")
  _validate.nonnegative_float(loss.regularization, "loss.regularization")
  _validate.choice(loss.curvature_structure, "loss.curvature_structure", ("rank_one", "general"))
  return loss


def _check_data(loss: Loss, params: Any, x: Any, y: Any) -> None:
  _validate.as_float_array(params, "params", ndim=1)
  _validate.as_float_array(x, "x", ndim=2)
  _validate.as_float_array(y, "y", ndim=1)
  if np.shape(x)[0] != np.shape(y)[0]:
    raise ValueError(f"x has {np.shape(x)[0]} rows but y has {np.shape(y)[0]} labels.")
  if np.shape(x)[1] != np.shape(params)[0]:
    raise ValueError(
        f"x has {np.shape(x)[1]} columns but params has shape {np.shape(params)}; they must match."
    )
  kind = getattr(loss.example_loss, "kind", None)
  if kind == "logistic":
    _validate.check_labels(y, "y")
  elif kind == "poisson" and _validate.is_concrete(y):
    if np.any(np.asarray(jax.device_get(y)) < 0):
      raise ValueError("y must be >= 0 for the poisson loss (counts); found a negative label.")


# ----------------------------------------------------------------------------
# Step inputs, options, objective, optimum.
# ----------------------------------------------------------------------------


def newton_step_inputs(
    loss: Loss,
    params: jax.Array,
    x: jax.Array,
    y: jax.Array,
    *,
    chunk_size: int = 1024,
    compute_hessian: bool = True,
    curvature: str = "hessian",
) -> StepInputs:
  """Clipped mean gradient (and Hessian) plus the public ridge: one step's input.

  Each example's gradient is clipped to ``loss.grad_norm_bound`` (L2) and
  its Hessian to ``loss.curvature_norm_bound`` (Frobenius) by
  :func:`dpjax.problem.per_example.mean_grad_and_hessian` (chunks of ``chunk_size``,
  never ``n x d x d``); the means divide by the public ``n = len(y)``. Then
  ``mu w`` and ``mu I`` are added (public, unclipped). Feed ``grad`` and
  ``hessian`` to ``dp_newton(..., **newton_options(loss))`` as
  ``tx.update(grad, state, params, curvature_matrix=hessian)``, or ``grad``
  to ``dp_gd(..., **gd_options(loss))``. Works under ``jit``.

  Args:
    loss: a :class:`Loss`.
    params: ``w``, shape (d,).
    x: features (n, d); the contract is ``||x_i|| <= 1`` (outliers are clipped).
    y: labels (n,) (logistic: -1/+1; poisson: >= 0).
    chunk_size: examples per vmapped chunk.
    compute_hessian: False for first-order methods (``hessian`` is None).
    curvature: ``"hessian"`` (default) or ``"qu"``: the global quadratic
      upper bound SOI ``c x x^T`` (logistic ``tanh(m/2)/(2m)``, Ganesh et al. Lemma 5.1;
      pseudo-Huber ``phi'(r)/r = delta / hypot(delta, r) <= 1``, the IRLS
      majoriser), with which Newton converges globally (their Sec. 5.3) where the
      Hessian variant can diverge from far away (it does for pseudo-Huber
      with outliers). Same ``L1``: the QU coefficient is ``<= L1`` too.
      Not available for ``"poisson"`` or a hand-built loss.

  Returns:
    :class:`StepInputs` (``objective`` and clip counts are non-private).

  Raises:
    TypeError, ValueError: a bad loss, shapes, dtypes, non-finite values,
      labels, or chunk size.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import losses
    >>> loss = losses.get_loss("l2_logistic", regularization=0.5)
    >>> x = jnp.array([[1.0, 0.0]]); y = jnp.array([1.0])
    >>> s = losses.newton_step_inputs(loss, jnp.array([0.0, 2.0]), x, y)
    >>> s.grad, s.hessian  # (-sigma(0), 0) + 0.5 w; diag(1/4, 0) + 0.5 I
    (Array([-0.5,  1. ], dtype=float32), Array([[0.75, 0.  ],
           [0.  , 0.5 ]], dtype=float32))
  """
  loss = _check_loss(loss)
  _check_data(loss, params, x, y)
  if not isinstance(compute_hessian, bool):
    raise TypeError(f"compute_hessian must be a bool, got {type(compute_hessian).__name__}.")
  _validate.choice(curvature, "curvature", glm.CURVATURES)
  fn = loss.example_loss
  if curvature == "qu" and compute_hessian:
    if getattr(fn, "kind", None) not in ("logistic", "pseudo_huber"):
      raise ValueError(
          f"curvature='qu' has a quadratic upper bound only for the logistic and pseudo_huber "
          f"losses, not {loss.name!r}; use curvature='hessian'."
      )
    fn = _QUSurrogate(fn)
  res = per_example.mean_grad_and_hessian(
      fn, params, (x, y), chunk_size=chunk_size,
      grad_norm_bound=loss.grad_norm_bound,
      curvature_norm_bound=loss.curvature_norm_bound if compute_hessian else None,
      curvature_norm="frobenius", compute_hessian=compute_hessian)
  mu = loss.regularization
  w = jnp.asarray(params, res.grad.dtype)
  grad, hessian, obj = res.grad, res.hessian, res.loss
  if mu:  # Public, data-independent: no clipping, no noise (module docstring).
    grad = grad + mu * w
    obj = obj + (0.5 * mu) * jnp.sum(jnp.square(w)).astype(obj.dtype)
    if hessian is not None:
      hessian = hessian + mu * jnp.eye(w.shape[0], dtype=hessian.dtype)
  return StepInputs(obj, grad, hessian, res.num_grad_clipped, res.num_curvature_clipped)


def newton_options(loss: Loss, modification: str = "add", curvature: str = "hessian"
                   ) -> dict[str, Any]:
  """The keyword arguments of :func:`dpjax.dp_newton` that ``loss`` fixes.

  ``grad_norm_bound``, ``curvature_norm_bound``, ``curvature_structure``,
  ``curvature_norm="frobenius"`` (what :func:`newton_step_inputs` clips in)
  ``modification`` and ``curvature`` (the SOI kind passed to
  :func:`newton_step_inputs`; a label for dp_newton). Clip is allowed only for the bare logistic SOI
  (``curvature_structure="rank_one"`` and no ridge): the paper's clip
  constant is proved for nothing else here.

  Args:
    loss: a :class:`Loss`.
    modification: ``"add"`` (default) or ``"clip"``.
    curvature: ``"hessian"`` (default) or ``"qu"``.

  Returns:
    A dict to splat into ``dp_newton(n=..., rho=..., steps=..., key=..., **opts)``.

  Raises:
    ValueError: clip with a non-logistic loss or a ridge.

  Examples:
    >>> from dpjax.problem import losses
    >>> losses.newton_options(losses.get_loss("pseudo_huber"))["curvature_structure"]
    'general'
  """
  loss = _check_loss(loss)
  _validate.choice(modification, "modification", ("clip", "add"))
  _validate.choice(curvature, "curvature", glm.CURVATURES)
  if modification == "clip" and (loss.curvature_structure != "rank_one" or loss.regularization):
    raise ValueError(
        f"modification='clip' is not available for the {loss.name!r} loss: clip stays "
        "logistic-only (the bare rank-one logistic SOI, no ridge) until a proof is written "
        "down. Use modification='add'."
    )
  return dict(grad_norm_bound=loss.grad_norm_bound,
              curvature_norm_bound=loss.curvature_norm_bound,
              curvature_structure=loss.curvature_structure, curvature_norm="frobenius",
              modification=modification, curvature=curvature)


def gd_options(loss: Loss) -> dict[str, Any]:
  """The keyword arguments of :func:`dpjax.dp_gd` that ``loss`` fixes.

  ``grad_norm_bound = L0`` and ``learning_rate = 1 / (L1 + mu)``: under the
  data contract every example's Hessian has operator norm ``<= L1``, so
  ``F`` is ``(L1 + mu)``-smooth and ``1/beta`` is the classical step.

  Examples:
    >>> from dpjax.problem import losses
    >>> losses.gd_options(losses.get_loss("logistic"))
    {'grad_norm_bound': 1.0, 'learning_rate': 4.0}
  """
  loss = _check_loss(loss)
  return dict(grad_norm_bound=loss.grad_norm_bound,
              learning_rate=1.0 / (loss.curvature_norm_bound + loss.regularization))


def objective(loss: Loss, params: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
  """``F(w)``: the unclipped mean loss plus ``(mu/2)||w||^2``. NON-PRIVATE (a diagnostic).

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import losses
    >>> loss = losses.get_loss("logistic")
    >>> losses.objective(loss, jnp.zeros(2), jnp.ones((3, 2)) / 2, jnp.ones(3)).round(6)
    Array(0.693147, dtype=float32)
  """
  loss = _check_loss(loss)
  _check_data(loss, params, x, y)
  per = jax.vmap(loss.example_loss, in_axes=(None, 0))(params, (x, y))
  w = jnp.asarray(params)
  return jnp.mean(per) + (0.5 * loss.regularization) * jnp.sum(jnp.square(w)).astype(per.dtype)


def optimum(
    loss: Loss,
    x: Any,
    y: Any,
    *,
    tol: float = 1e-13,
    max_steps: int = 200,
) -> tuple[np.ndarray, float]:
  """``(w*, F(w*))`` in float64 on the host: damped Newton on the full objective.

  NON-PRIVATE (a baseline for excess-loss reporting and tests). Newton steps
  ``H^{-1} grad`` (least squares when ``H`` is singular) with Armijo
  backtracking, until the Newton decrement ``grad^T H^{-1} grad / 2`` is
  ``<= tol * max(1, |F|)``, then one full Newton step. Uses the losses' own float64 numpy formulas,
  independent of the JAX code. Registered losses only. Where ``F`` has no
  minimiser (separable logistic data without a ridge) the iterates run off
  to infinity and the stop is reached once ``F`` is within ``tol`` of its
  infimum: check the data, or use a ridge.

  Args:
    loss: a :class:`Loss` from :func:`get_loss`.
    x: features (n, d).
    y: labels (n,).
    tol: relative stopping tolerance on the Newton decrement.
    max_steps: Newton step limit.

  Returns:
    ``(w_star (d,) float64, loss_star float)``.

  Raises:
    TypeError: a hand-built loss (no host formulas).
    RuntimeError: no convergence within ``max_steps``.

  Examples:
    >>> import numpy as np
    >>> from dpjax.problem import losses
    >>> x = np.array([[1.0], [0.5]]); y = np.array([1.0, -1.0])
    >>> w, f = losses.optimum(losses.get_loss("logistic"), x, y)
    >>> bool(abs(np.mean(-y * x[:, 0] / (1 + np.exp(y * x[:, 0] * w[0])))) < 1e-12)
    True
  """
  loss = _check_loss(loss)
  if not isinstance(loss.example_loss, _GLMLoss):
    raise TypeError(
        "optimum needs a registered loss (dpjax.problem.losses.get_loss); a hand-built Loss has no "
        "host float64 formulas."
    )
  tol = _validate.positive_float(tol, "tol")
  max_steps = _validate.positive_int(max_steps, "max_steps")
  x = np.asarray(jax.device_get(x), np.float64)
  y = np.asarray(jax.device_get(y), np.float64)
  _check_data(loss, np.zeros(x.shape[1] if x.ndim == 2 else 1), x, y)
  n, d = x.shape
  mu = loss.regularization
  link = loss.example_loss.host

  def value(w):
    return float(np.mean(link(x @ w, y)[0]) + 0.5 * mu * (w @ w))

  w = np.zeros(d)
  f = value(w)
  for _ in range(max_steps):
    _, d1, d2 = link(x @ w, y)
    g = x.T @ d1 / n + mu * w
    h = (x.T * d2) @ x / n + mu * np.eye(d)
    try:
      step = np.linalg.solve(h, g)
    except np.linalg.LinAlgError:
      step = np.linalg.lstsq(h, g, rcond=None)[0]
    decrement = float(g @ step)
    if not math.isfinite(decrement):
      break
    if decrement <= 2 * tol * max(1.0, abs(f)):
      # One last full step: Newton is quadratic here, so the gradient drops to rounding.
      w_new = w - step
      f_new = value(w_new)
      return (w_new, f_new) if f_new <= f + 1e-15 * max(1.0, abs(f)) else (w, f)
    t = 1.0
    while True:
      w_new = w - t * step
      f_new = value(w_new)
      if f_new <= f - 0.25 * t * decrement or t < 1e-12:
        break
      t *= 0.5
    if f_new > f:  # No decrease even at a tiny step: converged to rounding.
      return w, f
    w, f = w_new, f_new
  raise RuntimeError(
      f"optimum did not converge in {max_steps} Newton steps for the {loss.name!r} loss; "
      "the objective may have no minimiser (e.g. separable data without a ridge)."
  )
