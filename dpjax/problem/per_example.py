"""Generic per-example gradients and Hessians, chunked, with optional clipping.

The GLM path (:mod:`dpjax.problem.glm`) uses the closed form ``c(z) x x^T``; this
module serves any twice-differentiable per-example loss, as needed for the
general convex losses of Ganesh et al. (NeurIPS 2023, arXiv:2305.13209),
Remark 5.5: each
example's gradient is clipped to L2 norm ``<= grad_norm_bound`` and each
example's Hessian to norm ``<= curvature_norm_bound`` (scaling by
``min(1, bound / norm)``). With n public, replacing one example by the null
example (zero-out, :mod:`dpjax.problem._neighbouring`) then moves the mean gradient
by at most ``grad_norm_bound / n`` in L2 and the mean Hessian by at most
``curvature_norm_bound / n`` in the chosen norm (Frobenius, or spectral with
``curvature_norm="spectral"``); replacing it by any other example moves the
gradient by at most twice that, and a PSD Hessian by at most ``sqrt(2)``
times that in Frobenius norm (once in spectral norm).

Per-example quantities come from ``vmap`` of ``jax.value_and_grad`` and
``jax.hessian`` over chunks of ``chunk_size`` examples inside ``lax.scan``,
so peak memory is ``O(chunk_size * d^2 + d^2)`` (plus one padded copy of the
batch), never ``O(n * d^2)``.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from dpjax import _validate

__all__ = [
    "CURVATURE_NORMS",
    "PerExampleResult",
    "clip_by_norm",
    "mean_grad_and_hessian",
]

CURVATURE_NORMS = ("frobenius", "spectral")


class PerExampleResult(NamedTuple):
  """Means of (clipped) per-example quantities over the n examples.

  ``num_grad_clipped`` and ``num_curvature_clipped`` are NON-PRIVATE
  diagnostics: they depend on every example and carry no noise. Do not
  release or branch on them in a private algorithm.
  """

  loss: jax.Array  # (), mean per-example loss (never clipped).
  grad: jax.Array  # (d,), mean of the clipped per-example gradients.
  hessian: jax.Array | None  # (d, d) mean clipped Hessian, exactly symmetric; None if not computed.
  grad_norm_bound: jax.Array  # (), L2 bound enforced per example; inf when not clipped.
  curvature_norm_bound: jax.Array  # (), Hessian norm bound enforced; inf when not clipped.
  num_grad_clipped: jax.Array  # (), int32, examples whose gradient was scaled down.
  num_curvature_clipped: jax.Array | None  # (), int32, same for Hessians; None if not computed.


def _symmetric_norm(h: jax.Array, norm: str) -> jax.Array:
  if norm == "frobenius":
    return jnp.sqrt(jnp.sum(jnp.square(h)))
  # Spectral norm of a symmetric matrix: the largest |eigenvalue|.
  return jnp.max(jnp.abs(jnp.linalg.eigvalsh(h)))


def _clip(v: jax.Array, norm: jax.Array, bound: float | None):
  """Scales ``v`` by min(1, bound / norm); returns (clipped, was_clipped)."""
  if bound is None:
    return v, jnp.zeros((), bool)
  over = norm > bound
  scale = jnp.where(over, bound / jnp.where(over, norm, 1), 1).astype(v.dtype)
  return v * scale, over


def clip_by_norm(
    v: jax.Array, bound: float, norm: str = "frobenius"
) -> tuple[jax.Array, jax.Array]:
  """Scales one example's vector or symmetric matrix to norm ``<= bound``.

  ``v * min(1, bound / ||v||)``: the L2 norm for a vector, the Frobenius
  (default) or spectral norm for a square matrix (the spectral norm is
  ``max |eigenvalue|`` of the symmetrised matrix ``(v + v^T) / 2``, which is
  what is clipped in that case). Rounding can leave the norm a few ulp above
  ``bound``. Works under ``jit`` and ``vmap`` (``bound`` and ``norm`` static).

  Args:
    v: a (d,) vector or a (d, d) matrix.
    bound: the norm bound, > 0.
    norm: ``"frobenius"`` or ``"spectral"`` (vectors always use L2).

  Returns:
    ``(clipped, was_clipped)`` where ``was_clipped`` is a bool scalar.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import per_example
    >>> per_example.clip_by_norm(jnp.array([3.0, 4.0]), 1.0)
    (Array([0.6, 0.8], dtype=float32), Array(True, dtype=bool))
  """
  bound = _validate.positive_float(bound, "bound")
  _validate.choice(norm, "norm", CURVATURE_NORMS)
  _validate.as_float_array(v, "v")
  if v.ndim == 1:
    return _clip(v, jnp.sqrt(jnp.sum(jnp.square(v))), bound)
  if v.ndim != 2 or v.shape[0] != v.shape[1]:
    raise ValueError(f"v must be a vector or a square matrix, got shape {v.shape}.")
  if norm == "spectral":
    v = 0.5 * (v + v.T)
  return _clip(v, _symmetric_norm(v, norm), bound)


def _check_batch(batch: Any) -> int:
  leaves = jax.tree.leaves(batch)
  if not leaves:
    raise ValueError("batch has no arrays; pass a pytree of arrays with leading axis n.")
  sizes = set()
  for leaf in leaves:
    shape = jnp.shape(leaf)
    if len(shape) == 0:
      raise ValueError(
          "every array in batch needs a leading example axis; got a scalar. "
          "Give it shape (n, ...)."
      )
    sizes.add(shape[0])
  if len(sizes) != 1:
    raise ValueError(
        f"all arrays in batch must have the same leading size n, got {sorted(sizes)}."
    )
  n = sizes.pop()
  if n < 1:
    raise ValueError("batch is empty (n = 0); pass at least one example.")
  return n


def mean_grad_and_hessian(
    loss_fn: Callable[[jax.Array, Any], jax.Array],
    params: jax.Array,
    batch: Any,
    *,
    chunk_size: int = 1024,
    grad_norm_bound: float | None = None,
    curvature_norm_bound: float | None = None,
    curvature_norm: str = "frobenius",
    compute_hessian: bool = True,
) -> PerExampleResult:
  """Mean loss, (clipped) gradient and (clipped) Hessian of a per-example loss.

  ``loss_fn(params, example)`` returns the scalar loss of ONE example, where
  ``example`` is ``batch`` with the leading axis (n) indexed away. The means
  divide by the public constant n (the neighbouring relations of
  :mod:`dpjax.problem._neighbouring` keep n fixed). Examples are processed ``chunk_size`` at a time in a
  ``lax.scan``; when ``chunk_size`` does not divide n the last chunk is padded
  with copies of the last example and masked out, so results do not depend on
  ``chunk_size`` beyond float rounding.

  Args:
    loss_fn: per-example loss ``(params, example) -> scalar``.
    params: parameters, shape (d,), floating.
    batch: pytree of arrays, each with leading axis n.
    chunk_size: examples per chunk (>= 1); memory is O(chunk_size * d^2).
    grad_norm_bound: if given (> 0), each per-example gradient is scaled to L2
      norm ``<= grad_norm_bound``.
    curvature_norm_bound: if given (> 0), each per-example Hessian is scaled
      to norm ``<= curvature_norm_bound``.
    curvature_norm: ``"frobenius"`` (default) or ``"spectral"`` (max
      ``|eigenvalue|``; costs one ``eigvalsh`` per example).
    compute_hessian: set False to skip Hessians (then ``hessian`` and
      ``num_curvature_clipped`` are None).

  Returns:
    A :class:`PerExampleResult`; its bound fields are ``inf`` where nothing
    was clipped, and its clip counts are non-private diagnostics.

  Raises:
    TypeError, ValueError: on a non-callable ``loss_fn``, non-1-D or non-float
      ``params``, a batch without a common leading axis, a ``loss_fn`` that
      does not return a float scalar, ``chunk_size < 1``, a bound <= 0, an
      unknown ``curvature_norm``, or a curvature bound with
      ``compute_hessian=False``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import per_example
    >>> def sq(w, ex):
    ...   return 0.5 * (ex["x"] @ w - ex["y"]) ** 2
    >>> batch = {"x": jnp.array([[1., 0.], [0., 2.]]), "y": jnp.array([1., 0.])}
    >>> res = per_example.mean_grad_and_hessian(sq, jnp.zeros(2), batch,
    ...                                         curvature_norm_bound=1.0)
    >>> res.hessian  # mean of diag(1, 0) and diag(0, 4) clipped to diag(0, 1).
    Array([[0.5, 0. ],
           [0. , 0.5]], dtype=float32)
    >>> int(res.num_curvature_clipped)
    1
  """
  if not callable(loss_fn):
    raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}.")
  _validate.as_float_array(params, "params", ndim=1)
  n = _check_batch(batch)
  chunk_size = _validate.positive_int(chunk_size, "chunk_size")
  if grad_norm_bound is not None:
    grad_norm_bound = _validate.positive_float(grad_norm_bound, "grad_norm_bound")
  if curvature_norm_bound is not None:
    curvature_norm_bound = _validate.positive_float(curvature_norm_bound, "curvature_norm_bound")
  _validate.choice(curvature_norm, "curvature_norm", CURVATURE_NORMS)
  if not isinstance(compute_hessian, bool):
    raise TypeError(f"compute_hessian must be a bool, got {type(compute_hessian).__name__}.")
  if curvature_norm_bound is not None and not compute_hessian:
    raise ValueError(
        "curvature_norm_bound was given but compute_hessian=False; drop the bound or "
        "set compute_hessian=True."
    )
  example = jax.tree.map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a)[1:], jnp.result_type(a)),
                         batch)
  out = jax.eval_shape(loss_fn, jax.ShapeDtypeStruct(jnp.shape(params), params.dtype), example)
  if not (hasattr(out, "shape") and out.shape == () and jnp.issubdtype(out.dtype, jnp.floating)):
    raise TypeError(
        "loss_fn(params, example) must return a float scalar for ONE example; got "
        f"{out}. Write it for a single example: dpjax vmaps it over the batch."
    )
  return _mean_grad_and_hessian(
      params, batch, loss_fn=loss_fn, n=n, chunk=min(chunk_size, n),
      grad_norm_bound=grad_norm_bound, curvature_norm_bound=curvature_norm_bound,
      curvature_norm=curvature_norm, compute_hessian=compute_hessian)


@functools.partial(
    jax.jit,
    static_argnames=("loss_fn", "n", "chunk", "grad_norm_bound", "curvature_norm_bound",
                     "curvature_norm", "compute_hessian"))
def _mean_grad_and_hessian(params, batch, *, loss_fn, n, chunk, grad_norm_bound,
                           curvature_norm_bound, curvature_norm, compute_hessian):
  num_chunks = math.ceil(n / chunk)
  pad = num_chunks * chunk - n

  def to_chunks(a):
    if pad:  # Pad with copies of the last example so loss_fn sees valid input.
      a = jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)], axis=0)
    return a.reshape((num_chunks, chunk) + a.shape[1:])

  chunks = jax.tree.map(to_chunks, batch)
  valid = (jnp.arange(num_chunks * chunk) < n).reshape(num_chunks, chunk)

  def one(ex):
    loss, g = jax.value_and_grad(loss_fn)(params, ex)
    g, g_over = _clip(g, jnp.sqrt(jnp.sum(jnp.square(g))), grad_norm_bound)
    if not compute_hessian:
      return loss, g, g_over
    h = jax.hessian(loss_fn)(params, ex)
    if curvature_norm == "spectral":
      h = 0.5 * (h + h.T)
    if curvature_norm_bound is not None:
      h, h_over = _clip(h, _symmetric_norm(h, curvature_norm), curvature_norm_bound)
    else:
      h_over = jnp.zeros((), bool)
    return loss, g, g_over, h, h_over

  def chunk_sums(ex, mask):
    outs = jax.vmap(one)(ex)

    def masked_sum(v):
      m = mask.reshape(mask.shape + (1,) * (v.ndim - 1))
      if v.dtype == bool:
        return jnp.sum(m & v, dtype=jnp.int32)
      return jnp.sum(jnp.where(m, v, jnp.zeros((), v.dtype)), axis=0)

    return tuple(masked_sum(v) for v in outs)

  def body(carry, inp):
    return jax.tree.map(jnp.add, carry, chunk_sums(*inp)), None

  first = (jax.tree.map(lambda a: a[0], chunks), valid[0])
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(chunk_sums, *first))
  sums, _ = lax.scan(body, zeros, (chunks, valid))

  dtype = sums[1].dtype
  inv_n = jnp.asarray(1.0 / n, dtype)
  inf = jnp.asarray(jnp.inf, dtype)
  g_bound = inf if grad_norm_bound is None else jnp.asarray(grad_norm_bound, dtype)
  h_bound = inf if curvature_norm_bound is None else jnp.asarray(curvature_norm_bound, dtype)
  hessian = num_h = None
  if compute_hessian:
    h = sums[3]
    hessian = (h + h.T) * (0.5 * inv_n)  # fl(a + b) == fl(b + a): exactly symmetric.
    num_h = sums[4]
  return PerExampleResult(
      loss=sums[0] * inv_n.astype(sums[0].dtype), grad=sums[1] * inv_n, hessian=hessian,
      grad_norm_bound=g_bound, curvature_norm_bound=h_bound,
      num_grad_clipped=sums[2], num_curvature_clipped=num_h)
