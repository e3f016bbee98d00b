"""Logistic-regression (GLM) losses and fused per-example curvature.

Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv:2305.13209),
Sec. 5.1: the loss, its per-example gradient and curvature, and the
quadratic upper bound of Lemma 5.1; per step, one d x d second-order
information (SOI) matrix ``X^T diag(c) X / n`` plus one O(nd) gradient.

For a row ``x_i``, label ``y_i`` in {-1, +1} and margin ``z_i = <x_i, w>``:

* loss      ``f_i = softplus(-y_i z_i) = log(1 + exp(-y_i z_i))``;
* gradient  ``r_i x_i`` with ``r_i = -y_i sigmoid(-y_i z_i)``;
* curvature ``c(z_i) x_i x_i^T`` with ``c = sigmoid(z) sigmoid(-z)`` (the
  Hessian) or ``c = tanh(z/2) / (2z)`` (the quadratic upper bound, "QU").

Both coefficients are even in ``z``, so the label sign does not enter them.

Performance (measured, see ``benchmarks/curvature.py``): on XLA:CPU an
elementwise scaling is never fused into a matmul, so the textbook
``(x * c[:, None]).T @ x`` writes a scaled copy of the whole design matrix and
costs about 3x a plain Gram ``x.T @ x``. The fused path here instead walks
over row blocks of ``x`` that fit in the L2 cache; each block is read from
memory once and gives the margins, the loss, and one matmul
``x_b^T [c_b * x_b | r_b]`` holding both the Gram block and the gradient block.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dpjax import _validate

__all__ = [
    "CURVATURES",
    "LossGradCurvature",
    "logistic_loss",
    "logistic_loss_and_grad",
    "logistic_grad_and_curvature",
    "hessian_coefficient",
    "qu_coefficient",
]

CURVATURES = ("hessian", "qu")

# Rows per block are chosen so that one block holds about this many elements
# (1 MiB in float32, half the 2 MiB per-core L2 of the benchmark machine).
_BLOCK_ELEMENTS = 2**18
_MIN_BLOCK_ROWS = 256
_STREAMS = 2  # Independent blocks per loop iteration (see _fused).

# |u| = |z|/2 below which qu_coefficient uses its Taylor series. The first
# omitted term is (1382/155925) u^10 <= 6e-18 relative, below float64 epsilon.
_QU_SERIES_CUTOFF = 0.03


class LossGradCurvature(NamedTuple):
  """Mean loss, gradient and curvature of the logistic loss over n examples."""

  loss: jax.Array  # (), the mean logistic loss.
  grad: jax.Array  # (d,), the mean gradient.
  matrix: jax.Array  # (d, d), exactly symmetric mean SOI X^T diag(c) X / n.


def logistic_loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
  """Mean logistic loss ``(1/n) sum_i log(1 + exp(-y_i <x_i, w>))``.

  Uses the stable softplus ``logaddexp(0, -y z)``, finite for any margin.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import glm
    >>> float(glm.logistic_loss(jnp.zeros(2), jnp.eye(2), jnp.array([1., -1.])))
    0.693147...
  """
  margins = y * (x @ w)
  return jnp.mean(jnp.logaddexp(0.0, -margins))


def hessian_coefficient(z: jax.Array) -> jax.Array:
  """Hessian coefficient ``sigmoid(z) sigmoid(-z) = 1 / (4 cosh^2(z/2))``.

  The per-example Hessian is ``c(z) x x^T`` with this ``c``.
  Computed as ``e / (1 + e)^2`` with ``e = exp(-|z|)``, which is accurate to a
  few ulp relative for every ``z`` and underflows gracefully to 0 (never
  overflows) for huge ``|z|``. The maximum is ``1/4`` at ``z = 0``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import glm
    >>> glm.hessian_coefficient(jnp.array([0.0, 1e4]))
    Array([0.25, 0.  ], dtype=float32)
  """
  e = jnp.exp(-jnp.abs(z))
  return e / jnp.square(1 + e)


def qu_coefficient(z: jax.Array) -> jax.Array:
  """Quadratic-upper-bound coefficient ``tanh(z/2) / (2z)``, with limit 1/4 at 0.

  Ganesh et al. 2023, Lemma 5.1: ``H_qu(v) = c_qu(<x, v>) x x^T`` gives the global
  bound ``f(v + D) <= f(v) + <grad f(v), D> + D^T H_qu(v) D / 2``. The
  function is even and decreasing in ``|z|``. With ``u = |z|/2`` it equals
  ``tanh(u) / (4u)``; for ``u < 0.03`` the Taylor series
  ``(1 - u^2/3 + 2u^4/15 - 17u^6/315 + 62u^8/2835) / 4`` is used instead,
  which removes the 0/0 at ``z = 0`` and is exact to float64 rounding.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import glm
    >>> c = glm.qu_coefficient(jnp.array([0.0, 2.0, -2.0, 1e4]))
    >>> [round(float(v), 6) for v in c]
    [0.25, 0.190399, 0.190399, 5e-05]
  """
  u = 0.5 * jnp.abs(z)
  small = u < _QU_SERIES_CUTOFF
  u2 = jnp.square(u)
  series = 1 + u2 * (-1 / 3 + u2 * (2 / 15 + u2 * (-17 / 315 + u2 * (62 / 2835))))
  u_safe = jnp.where(small, 1, u)  # Keeps the unused branch (and its grad) finite.
  return 0.25 * jnp.where(small, series, jnp.tanh(u_safe) / u_safe)


_COEFFICIENTS = {"hessian": hessian_coefficient, "qu": qu_coefficient}


def _validate_wxy(w, x, y) -> tuple[int, int]:
  """Eager checks shared by the public functions; returns (n, d)."""
  _validate.as_float_array(w, "w", ndim=1)
  _validate.as_float_array(x, "x", ndim=2)
  _validate.as_float_array(y, "y", ndim=1)
  n, d = x.shape
  if w.shape[0] != d:
    raise ValueError(
        f"w has {w.shape[0]} entries but x has {d} columns; w must have shape (d,) = ({d},)."
    )
  if y.shape[0] != n:
    raise ValueError(
        f"y has {y.shape[0]} entries but x has {n} rows; pass one label per row of x."
    )
  _validate.check_labels(y, "y")
  return n, d


def _is_multi_device(x) -> bool:
  sharding = getattr(x, "sharding", None)  # None for numpy arrays and tracers.
  return sharding is not None and len(sharding.device_set) > 1


def _block_rows(n: int, d: int, chunk_size: int | None, x=None) -> int:
  """Rows per block: cache-sized on one CPU device, else a single block.

  Cache blocking is an XLA:CPU optimisation. On accelerators one large matmul
  is faster, and for inputs sharded over several devices a single block keeps
  the contraction over the sharded row axis (partial sums + all-reduce)
  instead of slicing, which would gather x onto every device.
  """
  if chunk_size is None:
    if jax.default_backend() != "cpu" or _is_multi_device(x):
      return n
    rows = max(_MIN_BLOCK_ROWS, _BLOCK_ELEMENTS // max(d, 1))
  else:
    rows = _validate.positive_int(chunk_size, "chunk_size")
  return min(rows, n)


def _softplus_and_residual(m, y):
  """Per-example loss ``softplus(-m)`` and gradient weight ``-y sigmoid(-m)``.

  Both share ``e = exp(-|m|)``: ``softplus(-m) = max(-m, 0) + log1p(e)`` and
  ``sigmoid(-m) = e / (1 + e)`` for ``m >= 0``, ``1 / (1 + e)`` otherwise;
  stable for any margin, one exponential per example instead of two.
  """
  e = jnp.exp(-jnp.abs(m))
  loss = jnp.maximum(-m, 0.0) + jnp.log1p(e)
  inv = 1.0 / (1.0 + e)
  sig_neg = jnp.where(m >= 0, e * inv, inv)
  return loss, -y * sig_neg


def _triangle_cuts(d: int) -> tuple[int, ...]:
  """Column cuts of the block upper triangle of the curvature matrix.

  With ``k`` column blocks only the ``k (k + 1) / 2`` blocks on or above the
  diagonal are multiplied: ``(k + 1) / (2k)`` of the flops of the full Gram.
  Measured per fused pass (AMD EPYC, 2 cores, float32): w8a (d = 301)
  53 -> 41 ms with k = 4, a1a.t (d = 124) 7.6 -> 6.4 ms with k = 3; at
  d <= 100 the smaller products cost what the halved flops save, so k = 1.
  """
  k = 1 if d < 112 else (3 if d < 256 else 4)
  return tuple(int(c) for c in np.linspace(0, d, k + 1).round())


def _block_sums(w, xb, yb, coefficient):
  """Sums over one row block: ``(loss, r @ X_b)``, or with a curvature
  ``(loss, blocks)`` where ``blocks[a] = X_b[:, a-th cut]^T [c*X_b[:, cut_a:] | r]``
  is row block ``a`` of the upper block triangle of ``X_b^T [c*X_b | r]``
  (see :func:`_triangle_cuts` and :func:`_assemble`)."""
  z = xb @ w
  per_example, r = _softplus_and_residual(yb * z, yb)
  loss = jnp.sum(per_example)
  if coefficient is None:
    return loss, r @ xb  # `c @ x` form: no transpose of x is materialised.
  xc = xb * coefficient(z)[:, None]
  cuts = _triangle_cuts(xb.shape[1])
  contract = (((0,), (0,)), ((), ()))
  blocks = tuple(
      lax.dot_general(xb[:, lo:hi], jnp.concatenate([xc[:, lo:], r[:, None]], axis=1), contract)
      for lo, hi in zip(cuts[:-1], cuts[1:]))
  return loss, blocks


def _assemble(blocks, d: int, scale):
  """Gradient and exactly symmetric matrix from the summed triangle blocks."""
  cuts = _triangle_cuts(d)
  grad = jnp.concatenate([b[:, -1] for b in blocks])
  upper = jnp.concatenate(
      [jnp.pad(b[:, :-1], ((0, 0), (lo, 0))) for b, lo in zip(blocks, cuts[:-1])], axis=0)
  block_of = np.searchsorted(np.asarray(cuts[1:]), np.arange(d), side="right")
  off_diagonal = jnp.asarray(block_of[:, None] < block_of[None, :])  # static mask
  full = upper + jnp.where(off_diagonal, upper, 0).T
  # fl(a + b) == fl(b + a), so this is exactly symmetric; off the diagonal
  # blocks it is (u + u) / 2 == u.
  return grad * scale, (full + full.T) * (0.5 * scale)


@functools.partial(jax.jit, static_argnames=("curvature", "rows"))
def _fused(w, x, y, *, curvature, rows):
  """One blocked pass over x; each block of ``rows`` rows is read once.

  Each loop iteration handles ``_STREAMS`` independent blocks with separate
  accumulators, which XLA:CPU may run concurrently (measured ~10% faster on 2
  cores than one block per iteration). The ragged tail is one static block.
  """
  n = x.shape[0]
  dtype = jnp.result_type(w, x, y)
  w, x, y = (a.astype(dtype) for a in (w, x, y))
  coefficient = None if curvature is None else _COEFFICIENTS[curvature]
  block = functools.partial(_block_sums, coefficient=coefficient)
  add = functools.partial(jax.tree.map, jnp.add)
  step = rows * _STREAMS
  num_iter = n // step

  if num_iter == 0:
    loss, acc = block(w, x, y)
  else:
    def body(i, carry):
      out = []
      for s, acc_s in enumerate(carry):
        start = i * step + s * rows
        xb = lax.dynamic_slice_in_dim(x, start, rows)
        yb = lax.dynamic_slice_in_dim(y, start, rows)
        out.append(add(acc_s, block(w, xb, yb)))
      return tuple(out)

    shapes = jax.eval_shape(block, w, x[:rows], y[:rows])
    zeros = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
    carry = lax.fori_loop(0, num_iter, body, (zeros,) * _STREAMS)
    loss, acc = functools.reduce(add, carry)
    if n > num_iter * step:  # Static tail (< 2 blocks), no padding needed.
      loss, acc = add((loss, acc), block(w, x[num_iter * step:], y[num_iter * step:]))

  inv_n = jnp.asarray(1.0 / n, dtype)
  if coefficient is None:
    return loss * inv_n, acc * inv_n
  grad, matrix = _assemble(acc, x.shape[1], inv_n)
  return LossGradCurvature(loss * inv_n, grad, matrix)


def logistic_loss_and_grad(
    w: jax.Array,
    x: jax.Array,
    y: jax.Array,
    *,
    chunk_size: int | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Mean logistic loss and its gradient, without the curvature.

  The per-example gradient is ``-y_i sigmoid(-y_i z_i) x_i``
  (norm <= ``||x_i||``). The gradient is formed as ``r @ x`` (never
  ``x.T @ r``, which materialises a transpose on XLA:CPU and measured about 2-3x
  slower at n = 1e5, d = 101). This is the cheap path for DP-GD. By default it makes two
  matrix-vector passes (``x @ w`` then ``r @ x``), which XLA:CPU streams at
  memory speed: about 2x faster than the blocked single pass at
  n = 30,956. On one CPU device, once x outgrows the cache (more than 2^23
  elements), the two passes walk row blocks instead (w8a: 6.8 -> 4.7 ms).

  Args:
    w: parameters, shape (d,).
    x: design matrix, shape (n, d), floating.
    y: labels in {-1, +1}, shape (n,), floating.
    chunk_size: if given, walk over blocks of this many rows (one read of
      each block); default: no blocking.

  Returns:
    ``(loss, grad)``: scalar mean loss and the (d,) mean gradient, in the
    promoted dtype of the inputs.

  Raises:
    TypeError, ValueError: on non-float inputs, wrong ranks, mismatched
      shapes, non-finite values or labels outside {-1, +1} (value checks only
      on concrete arrays, i.e. outside ``jit``).

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import glm
    >>> loss, grad = glm.logistic_loss_and_grad(
    ...     jnp.zeros(2), jnp.eye(2), jnp.array([1., -1.]))
    >>> grad
    Array([-0.25,  0.25], dtype=float32)
  """
  n, d = _validate_wxy(w, x, y)
  if chunk_size is None:
    return _loss_and_grad_two_pass(w, x, y)
  return _fused(w, x, y, curvature=None, rows=_block_rows(n, d, chunk_size))


def _loss_and_grad_dense(w, x, y):
  dtype = jnp.result_type(w, x, y)
  w, x, y = (a.astype(dtype) for a in (w, x, y))
  loss, grad = _block_sums(w, x, y, None)
  inv_n = jnp.asarray(1.0 / x.shape[0], dtype)
  return loss * inv_n, grad * inv_n


@jax.custom_batching.custom_vmap
def _loss_and_grad_two_pass(w, x, y):
  """Two matrix-vector passes: ``z = x @ w``, then ``grad = r @ x``.

  When x outgrows the cache (:func:`_blocks_pay`) the two passes walk row
  blocks instead, so each block is read from memory once: measured 6.8 ->
  4.7 ms per call on w8a (49,749 x 301).
  """
  if _blocks_pay(x.shape[0], 1, x.shape[1]):
    loss, grad = _many_w_two_pass(w[None], x, y)
    return loss[0], grad[0]
  return _loss_and_grad_dense(w, x, y)


# Under vmap, rows per block of the batched DP-GD pass hold about this many
# margins plus features, ``rows * (B + d)`` (2 MiB in float32).
_BATCHED_BLOCK_ELEMENTS = 2**19
# Below both sizes (elements of the (n, B) margins and of x) one pass over
# all rows measured as fast or faster than blocks.
_BATCHED_MARGINS_IN_CACHE = 2**21
_BATCHED_X_IN_CACHE = 2**23


@_loss_and_grad_two_pass.def_vmap
def _loss_and_grad_two_pass_vmap(axis_size, in_batched, w, x, y):
  """Batching rule: many ``w`` against one dataset (repeats, seeds, privacy levels).

  The default rule puts the batch axis first, ``(B, n)``, and XLA:CPU then
  contracts ``(B, n) @ (n, d)`` at about half the speed of the same product
  with the batch axis last. Keeping the margins as ``(n, B)`` avoids that and
  every transpose. On one CPU device, once the ``(n, B)`` margins or ``x``
  outgrow the cache, the rows are also walked in blocks of about
  ``_BATCHED_BLOCK_ELEMENTS / (B + d)`` rows, so that the ``(rows, B)``
  margins, losses and residuals stay in cache between the two products:
  measured with B = 80 (AMD EPYC, 2 cores) 29 -> 8 ms per step on ijcnn1
  (d = 23), 20 -> 12 ms on a1a.t, 55 -> 37 ms on w8a and 346 -> 244 ms at
  the covertype size, against the same products over all n rows at once.
  """
  w_batched, x_batched, y_batched = in_batched
  if x_batched or y_batched:
    axes = tuple(0 if b else None for b in in_batched)
    out = jax.vmap(_loss_and_grad_dense, in_axes=axes, axis_size=axis_size)(w, x, y)
    return out, (True, True)
  if axis_size == 1 and not _blocks_pay(x.shape[0], 1, x.shape[1]):
    # Matrix-vector products are faster than an (n, 1) contraction.
    loss, grad = _loss_and_grad_dense(w[0], x, y)
    return (loss[None], grad[None]), (True, True)
  return _many_w_two_pass(w, x, y), (True, True)


def _blocks_pay(n: int, b: int, d: int) -> bool:
  """Whether ``b`` members against an ``(n, d)`` x are walked in row blocks.

  Only on one CPU device (several may hold a sharded x, which slicing would
  gather), and once the ``(n, b)`` margins or x outgrow the cache.
  """
  return (jax.default_backend() == "cpu" and jax.local_device_count() == 1
          and (n * b > _BATCHED_MARGINS_IN_CACHE or n * d > _BATCHED_X_IN_CACHE))


def _many_w_two_pass(w, x, y):
  """Mean losses [B] and gradients [B, d] of ``w`` [B, d], margins kept (rows, B)."""
  dtype = jnp.result_type(w, x, y)
  w, x, y = (a.astype(dtype) for a in (w, x, y))
  n, d = x.shape
  b = w.shape[0]
  inv_n = jnp.asarray(1.0 / n, dtype)

  def block(xb, yb):
    margins = yb[:, None] * lax.dot_general(xb, w, (((1,), (1,)), ((), ())))  # (rows, B)
    per_example, r = _softplus_and_residual(margins, yb[:, None])
    return jnp.sum(per_example, axis=0), lax.dot_general(r, xb, (((0,), (0,)), ((), ())))

  if not _blocks_pay(n, b, d):
    loss, grad = block(x, y)
  else:
    rows = min(n, max(_MIN_BLOCK_ROWS, _BATCHED_BLOCK_ELEMENTS // (b + d)))
    zeros = (jnp.zeros((b,), dtype), jnp.zeros((b, d), dtype))
    loss, grad = _sum_row_blocks(block, x, y, rows, zeros)
  return loss * inv_n, grad * inv_n


def _sum_row_blocks(block, x, y, rows: int, zeros):
  """``sum_k block(x_k, y_k)`` over blocks of ``rows`` rows, plus a static ragged tail."""
  add = functools.partial(jax.tree.map, jnp.add)
  n = x.shape[0]
  num_iter = n // rows

  def body(i, acc):
    xb = lax.dynamic_slice_in_dim(x, i * rows, rows)
    yb = lax.dynamic_slice_in_dim(y, i * rows, rows)
    return add(acc, block(xb, yb))

  acc = lax.fori_loop(0, num_iter, body, zeros)
  if n > num_iter * rows:
    acc = add(acc, block(x[num_iter * rows:], y[num_iter * rows:]))
  return acc


def logistic_grad_and_curvature(
    w: jax.Array,
    x: jax.Array,
    y: jax.Array,
    curvature: str = "hessian",
    *,
    chunk_size: int | None = None,
) -> LossGradCurvature:
  """Mean loss, gradient and SOI matrix ``X^T diag(c(Xw)) X / n``, fused.

  Ganesh et al. 2023, Sec. 5.1. ``curvature="hessian"`` uses
  :func:`hessian_coefficient` (the exact Hessian of the mean loss);
  ``curvature="qu"`` uses :func:`qu_coefficient` (the quadratic upper bound
  ``H_qu``). Every row block of ``x`` is read once and contributes to the
  margins, the loss, the gradient and the matrix; see the module docstring
  and ``benchmarks/curvature.py`` for the measured cost (about a plain Gram
  ``x.T @ x``). Works under ``jit`` (``curvature`` and ``chunk_size`` static)
  and ``vmap``, for float32 and float64, and for ``d > n``.

  Args:
    w: parameters, shape (d,).
    x: design matrix, shape (n, d), floating.
    y: labels in {-1, +1}, shape (n,), floating.
    curvature: ``"hessian"`` or ``"qu"``.
    chunk_size: rows per block; default chooses ~2^18 elements per block on
      a single CPU device and one block (all n rows) on accelerators or for
      concrete inputs sharded over several devices. Inside an outer ``jit``
      the sharding of a traced ``x`` is not visible, so on a multi-device CPU
      mesh pass ``chunk_size=n`` to keep the contraction local to each shard
      (blocks would be gathered). The result does not depend on it beyond
      float rounding.

  Returns:
    A :class:`LossGradCurvature` ``(loss, grad, matrix)`` in the promoted
    dtype of the inputs; ``matrix`` is exactly symmetric.

  Raises:
    TypeError, ValueError: on an unknown ``curvature``, non-float inputs,
      wrong ranks, mismatched shapes, non-finite values or labels outside
      {-1, +1} (value checks only on concrete arrays).

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import glm
    >>> x = jnp.array([[0.6, 0.8], [1.0, 0.0]])
    >>> loss, grad, hess = glm.logistic_grad_and_curvature(
    ...     jnp.zeros(2), x, jnp.array([1., -1.]))
    >>> hess.round(6)  # 0.25 * mean_i x_i x_i^T at w = 0.
    Array([[0.17, 0.06],
           [0.06, 0.08]], dtype=float32)
  """
  _validate.choice(curvature, "curvature", CURVATURES)
  n, d = _validate_wxy(w, x, y)
  rows = _block_rows(n, d, chunk_size, x)
  if chunk_size is None and jax.default_backend() == "cpu" and not _is_multi_device(x):
    return LossGradCurvature(*_batchable_fused(curvature, rows)(w, x, y))
  return _fused(w, x, y, curvature=curvature, rows=rows)


# Rows per block of the packed batched rule hold about this many products
# x_ij x_ik (8 MiB in float32).
_PACKED_BLOCK_ELEMENTS = 2**21
# The packed rule needs this many members (forming the packed triangle is
# shared by all of them) and at most this many features (past it, writing
# the n x d^2/2 triangle costs more than the halved flops save).
_PACKED_MIN_BATCH = 40
_PACKED_MAX_D = 256


@functools.lru_cache(maxsize=None)
def _batchable_fused(curvature: str, rows: int):
  """``_fused`` with a batching rule for many ``w`` against one dataset.

  Under ``vmap`` over ``w`` only (repeats, seeds, privacy levels) the default
  rule batches every block's products, whose ``B x rows x d`` temporaries
  overflow the cache: measured 1.3-3x slower per member than one unbatched
  pass. The rule instead picks, for ``B`` members and ``d`` features:

  * ``B < _PACKED_MIN_BATCH`` or ``d > _PACKED_MAX_D``: ``lax.map`` over the
    members, each one cache-blocked pass (the unbatched cost per member);
  * otherwise: per row block, the packed upper triangle
    ``K[i, (j, k)] = x_ij x_ik`` (``j <= k``, ``P = d (d + 1) / 2`` columns)
    is formed once for the whole batch and contracted with the ``[rows, B]``
    curvature coefficients in one large product: half the flops of the full
    Gram (symmetry) in a matmul shape that runs near peak. The matrix is
    gathered from the packed triangle, so it is exactly symmetric.

  Measured per member, map against packed (AMD EPYC, 2 cores, float32):
  a1a.t (d = 124) 6.8 vs 6.6 ms at B = 32 and 6.6 vs 4.1 ms at B = 80;
  synthetic (d = 100) 1.7 vs 1.8 at B = 32, 1.7 vs 1.4 at B = 48; phishing
  (d = 69) 0.93 vs 1.08 at B = 32, 0.92 vs 0.83 at B = 48; w8a (d = 301)
  43 vs 56 ms at B = 80; covertype size (d = 54) 46 vs 60 ms at B = 16.
  Hence the thresholds.
  """
  coefficient = _COEFFICIENTS[curvature]

  @jax.custom_batching.custom_vmap
  def fn(w, x, y):
    return tuple(_fused(w, x, y, curvature=curvature, rows=rows))

  @fn.def_vmap
  def rule(axis_size, in_batched, w, x, y):
    single = lambda w, x, y: tuple(_fused(w, x, y, curvature=curvature, rows=rows))  # noqa: E731
    if in_batched[1] or in_batched[2]:
      axes = tuple(0 if b else None for b in in_batched)
      return jax.vmap(single, in_axes=axes, axis_size=axis_size)(w, x, y), (True, True, True)
    if axis_size < _PACKED_MIN_BATCH or x.shape[1] > _PACKED_MAX_D:
      # One cache-blocked pass per member, in sequence (the default rule's
      # batched blocks overflow the cache).
      return lax.map(lambda wi: single(wi, x, y), w), (True, True, True)
    return _packed_batched(w, x, y, coefficient), (True, True, True)

  return fn


def _packed_batched(w, x, y, coefficient):
  """Loss [B], gradient [B, d] and SOI [B, d, d] for a batch ``w`` [B, d] (see above)."""
  dtype = jnp.result_type(w, x, y)
  w, x, y = (a.astype(dtype) for a in (w, x, y))
  n, d = x.shape
  b = w.shape[0]
  iu, ju = _triu(d)  # static numpy indices
  p = iu.shape[0]
  rows = int(min(n, max(8, _PACKED_BLOCK_ELEMENTS // p)))

  def block(xb, yb):
    z = lax.dot_general(xb, w, (((1,), (1,)), ((), ())))  # (rows, B)
    per_example, r = _softplus_and_residual(yb[:, None] * z, yb[:, None])
    c = coefficient(z)
    packed = xb[:, iu] * xb[:, ju]  # (rows, P)
    contract = (((0,), (0,)), ((), ()))
    return (jnp.sum(per_example, axis=0), lax.dot_general(r, xb, contract),
            lax.dot_general(c, packed, contract))

  zeros = (jnp.zeros((b,), dtype), jnp.zeros((b, d), dtype), jnp.zeros((b, p), dtype))
  loss, grad, packed_matrix = _sum_row_blocks(block, x, y, rows, zeros)
  inv_n = jnp.asarray(1.0 / n, dtype)
  matrix = packed_matrix[:, _triu_index(d)]  # (B, d, d), exactly symmetric.
  return loss * inv_n, grad * inv_n, matrix * inv_n


@functools.lru_cache(maxsize=16)
def _triu(d: int):
  return np.triu_indices(d)


@functools.lru_cache(maxsize=16)
def _triu_index(d: int):
  """``[d, d]`` int array: the packed position of entry (j, k) (and of (k, j))."""
  index = np.zeros((d, d), np.int32)
  iu, ju = _triu(d)
  index[iu, ju] = np.arange(iu.size)
  index[ju, iu] = np.arange(iu.size)
  return index
