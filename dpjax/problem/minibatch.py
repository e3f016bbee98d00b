"""Per-example clipped sums over a minibatch: the privatized input of the streaming methods.

One step of DP online-to-batch, DP-FTRL or single-pass DP-SGD needs

``sum_{z in batch} clip(grad l(x, z) - a grad l(x', z), bound)``

(``a = 0``: plain per-example clipped gradients; ``a > 0``: the gradient
differences of online-to-batch, on the **same** example at both points, as
in Zhang, Tran & Cutkosky (NeurIPS 2022, arXiv:2210.06593), Algorithm 1; a
cached gradient of the previous example would break the telescoping sum and
put that example into two releases). Clipping scales an example's vector
by ``min(1, bound / ||v||)``, so zeroing out one example moves the sum by at
most ``bound`` in L2, and replacing it by at most ``2 bound``
(:data:`NEIGHBOURING`): the sensitivity the caller's noise is calibrated to.
Nothing is released here; the callers add the noise.

Two paths:

* :func:`clipped_sum` with ``loss=`` ``"logistic"`` or ``"least_squares"``
  and ``batch = (x [b, d], y [b])``: the fused GLM path. ``grad l(w; x, y) =
  c(<w, x>, y) x``, so the difference is ``e(z) x`` with a scalar ``e``, its
  norm ``|e| ||x||``, and the sum one ``e @ x``: one pass for both margins
  (``x @ [w, w']``), never a ``[b, d]`` gradient tensor.
* ``loss_fn=f(params, example)``: any differentiable per-example loss, any
  params pytree, ``vmap`` of ``grad`` (``[b, *params]`` per point).

Examples:
  >>> import jax.numpy as jnp
  >>> from dpjax.problem import minibatch
  >>> x = jnp.array([[1.0, 0.0], [0.0, 1.0]]); y = jnp.array([1.0, -1.0])
  >>> minibatch.clipped_sum(jnp.zeros(2), (x, y), bound=0.1, loss="logistic").tolist()
  [-0.10000000149011612, 0.10000000149011612]
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

__all__ = ["GLM_LOSSES", "NEIGHBOURING", "batch_size_of", "check_batch", "check_loss",
           "check_projection", "clipped_sum", "sensitivity_factor"]

GLM_LOSSES = ("logistic", "least_squares")

# The neighbouring relations of the streaming methods. The data is a fixed
# sequence cut into batches of the public size b, so adding or removing an
# example would shift every later batch; the privacy unit is one position:
# "zero-out" replaces one example by a null example that contributes nothing
# (dp-accounting's REPLACE_SPECIAL), so a clipped sum moves by at most the clip
# norm C; "replace-one" swaps it for any other example, so the sum moves by at
# most 2C.
NEIGHBOURING = ("zero-out", "replace-one")


def sensitivity_factor(neighbouring: str) -> float:
  """1 for ``"zero-out"``, 2 for ``"replace-one"``: the L2 sensitivity of a clipped sum over C.

  Examples:
    >>> from dpjax.problem import minibatch
    >>> minibatch.sensitivity_factor("zero-out"), minibatch.sensitivity_factor("replace-one")
    (1.0, 2.0)
  """
  return 1.0 if _validate.choice(neighbouring, "neighbouring", NEIGHBOURING) == "zero-out" else 2.0


def _glm_coefficient(loss: str) -> Callable[[jax.Array, jax.Array], jax.Array]:
  """``c(margin, y)`` with ``grad l(w; x, y) = c(<w, x>, y) x``."""
  if loss == "logistic":
    return lambda m, y: -y * jax.nn.sigmoid(-y * m)  # d/dm log(1 + exp(-y m))
  return lambda m, y: m - y  # least squares: (m - y)^2 / 2


def check_loss(loss: str | None, loss_fn: Any) -> tuple[str | None, Any]:
  """Exactly one of ``loss`` (a GLM name) or ``loss_fn`` (a callable); validated."""
  if (loss is None) == (loss_fn is None):
    raise ValueError(f"pass exactly one of loss (one of {GLM_LOSSES}) or loss_fn.")
  if loss is not None:
    return _validate.choice(loss, "loss", GLM_LOSSES), None
  if not callable(loss_fn):
    raise TypeError("loss_fn must be a callable f(params, example) -> scalar.")
  return None, loss_fn


def batch_size_of(batch: Any, glm: bool) -> int:
  """The number of examples in ``batch`` (``(x, y)`` for the GLM path)."""
  if glm:
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
      raise ValueError("with loss=..., batch must be (x [b, d], y [b]).")
    return int(jnp.shape(batch[0])[0])
  return int(jnp.shape(jax.tree.leaves(batch)[0])[0])


def check_projection(projection: Any) -> Any:
  """``None`` or a callable params -> params."""
  if projection is not None and not callable(projection):
    raise TypeError("projection must be a callable params -> params.")
  return projection


def check_batch(batch: Any, *, glm: bool, batch_size: int, name: str) -> None:
  """A step's batch is given, shaped for its path, and holds the public ``batch_size``."""
  if batch is None:
    raise ValueError(f"{name}.update needs batch= (this step's fresh examples).")
  b = batch_size_of(batch, glm)
  if b != batch_size:
    raise ValueError(f"batch has {b} examples, but {name} was built for batch_size={batch_size} "
                     "(the public b its sums are divided by).")


def _scales(norms: jax.Array, bound: jax.Array) -> jax.Array:
  return jnp.minimum(1.0, bound / jnp.where(norms > 0, norms, 1.0))


def _check_mask(mask: Any, b: int) -> jax.Array:
  """A ``[b]`` bool mask from a bool or 0/1 number array (static checks; values when concrete)."""
  if not isinstance(mask, (jax.Array, np.ndarray)):
    raise TypeError(f"mask must be a bool or 0/1 array of shape ({b},) (numpy or jax), got "
                    f"{type(mask).__name__}.")
  shape = tuple(jnp.shape(mask))
  if shape != (b,):
    raise ValueError(f"mask has shape {shape} but the batch has {b} examples; pass one entry "
                     "per example (True/1: included, False/0: contributes nothing).")
  mask = jnp.asarray(mask)
  if mask.dtype == jnp.bool_:
    return mask
  if not (jnp.issubdtype(mask.dtype, jnp.integer) or jnp.issubdtype(mask.dtype, jnp.floating)):
    raise TypeError(f"mask must be bool or a 0/1 number array, got dtype {mask.dtype}.")
  if _validate.is_concrete(mask):
    values = jax.device_get(mask)
    if not ((values == 0) | (values == 1)).all():
      raise ValueError("mask must hold only 0/1 (or True/False): it selects examples and does not "
                       "weight them (a weight > 1 would break the clip-norm sensitivity).")
  return mask != 0


def clipped_sum(params: Any, batch: Any, *, bound: Any, loss: str | None = None,
                loss_fn: Callable[[Any, Any], jax.Array] | None = None,
                prev_params: Any = None, a: Any = 0.0, mask: Any = None) -> Any:
  """``sum_z mask_z clip(grad l(params, z) - a grad l(prev_params, z), bound)``.

  Args:
    params: the point ``x`` (a vector for the GLM path).
    batch: ``(x, y)`` (GLM path) or a pytree with a leading batch axis.
    bound: the clip norm (> 0; may be traced).
    loss: ``"logistic"`` or ``"least_squares"``; or
    loss_fn: a per-example loss ``f(params, example) -> scalar``.
    prev_params: the second point ``x'`` (default: none; then only the
      gradient at ``params``, and ``a`` is unused).
    a: the weight of the second gradient (a scalar, may be traced). Where it
      is exactly 0 the gradient at ``x'`` is masked out (``where``), so a NaN
      there cannot leak into the sum (``0 * NaN`` is NaN).
    mask: optional ``[b]`` bool (or 0/1) array; may be traced. An example
      whose entry is False/0 contributes exactly 0 (selected out with
      ``where``, so even a NaN or inf in its row cannot leak), e.g. the padded
      slots of a capped Poisson sample (:func:`dpjax.mechanisms.sampling.sample`).
      Default: every example is included.

  Returns:
    The clipped sum, shaped like ``params``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import minibatch
    >>> x = jnp.array([[1.0, 0.0], [0.0, 1.0]]); y = jnp.array([1.0, -1.0])
    >>> mask = jnp.array([True, False])
    >>> minibatch.clipped_sum(jnp.zeros(2), (x, y), bound=0.1, loss="logistic", mask=mask).tolist()
    [-0.10000000149011612, 0.0]
  """
  loss, loss_fn = check_loss(loss, loss_fn)
  a = jnp.asarray(a)
  keep = None
  if mask is not None:
    keep = _check_mask(mask, batch_size_of(batch, loss is not None))
  if loss is not None:
    xs, ys = batch
    if keep is not None:  # masked rows become zeros: exactly nothing flows from them.
      xs = jnp.where(keep[:, None], xs, jnp.zeros((), xs.dtype))
    coef = _glm_coefficient(loss)
    if prev_params is None:
      e = coef(xs @ params, ys)
    else:
      m = xs @ jnp.stack([params, prev_params], axis=1)  # one pass: both margins.
      e = coef(m[:, 0], ys) - jnp.where(a == 0, 0.0, a * coef(m[:, 1], ys))
    s = _scales(jnp.abs(e) * jnp.linalg.norm(xs, axis=1), bound)
    w = e * s
    if keep is not None:
      w = jnp.where(keep, w, jnp.zeros((), w.dtype))
    return w @ xs
  grad = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0))
  v = grad(params, batch)
  if prev_params is not None:
    g_prev = grad(prev_params, batch)
    v = jax.tree.map(lambda g, p: g - jnp.where(a == 0, 0.0, a * p), v, g_prev)
  if keep is not None:
    v = jax.tree.map(
        lambda leaf: jnp.where(keep.reshape((-1,) + (1,) * (leaf.ndim - 1)), leaf,
                               jnp.zeros((), leaf.dtype)), v)
  norms = jnp.sqrt(sum(jnp.sum(jnp.square(leaf.reshape(leaf.shape[0], -1)), axis=1)
                       for leaf in jax.tree.leaves(v)))
  s = _scales(norms, bound)
  return jax.tree.map(lambda leaf: jnp.tensordot(s.astype(leaf.dtype), leaf, axes=1), v)
