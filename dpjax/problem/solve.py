"""The exact non-private optimum of logistic regression, and the excess loss.

Benchmarks report ``ell(w_T) - ell(w*)`` (as Ganesh et al. NeurIPS 2023, Sec. 6), so
``w*`` must be exact: :func:`logistic_optimum` runs a float64 Newton method on
the host until the gradient of the mean logistic loss is below ``tol``, and
refuses (with an explanation) when no minimiser exists. :func:`excess_loss` is
the jax-side metric.
"""

from __future__ import annotations

import collections
import hashlib
import math
from typing import Any, NamedTuple

import jax
import numpy as np

from dpjax import _validate
from dpjax.problem.glm import logistic_loss

__all__ = ["LogisticOptimum", "SEPARABLE_RIDGE", "logistic_optimum", "optimum_loss", "excess_loss"]

# Existence certificate threshold for nu * L (see _certified_minimiser).
_CERTIFICATE = 0.5
# Newton steps with ||grad|| <= tol but no existence certificate after which
# the data is declared separable. Nearly separable data (a1a.t) needs ~11.
_SEPARABLE_PATIENCE = 30
_MAX_HALVINGS = 60


class LogisticOptimum(NamedTuple):
  """Result of :func:`logistic_optimum`; unpacks as ``w_star, loss_star``.

  Attributes:
    w: the minimiser, float64 numpy array ``[d]``.
    loss: the mean logistic loss at ``w`` (without any ridge term), a float.
  """

  w: np.ndarray  # [d] float64
  loss: float


def _softplus(t: np.ndarray) -> np.ndarray:
  """log(1 + exp(t)), stable for any t."""
  return np.logaddexp(0.0, t)


def _sigmoid(t: np.ndarray) -> np.ndarray:
  """1 / (1 + exp(-t)), stable for any t."""
  e = np.exp(-np.abs(t))
  return np.where(t >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _range_bases(a: np.ndarray, data_eps: float) -> list[np.ndarray]:
  """Orthonormal bases ``[d, r]`` of the (numerical) row space of ``a``.

  The loss depends on ``w`` only through ``a @ w``, so Newton runs in such a
  basis: the reduced Hessian is non-singular with zero or duplicate columns or
  ``d > n``, and the objective is unchanged. The first basis drops singular
  values below ``data_eps * ||a||_F``, the size of the rounding error of the
  stored data (a bound on ``||a_stored - a_exact||_2``): e.g. one-hot groups
  that are exactly collinear become, in float32, directions of singular value
  ~1e-7 in which the "optimum" would fit rounding noise with ``||w|| ~ 1e7``.
  The second (only if larger) uses numpy's ``matrix_rank`` threshold; it is
  used only if the first leaves a gradient above ``tol``.
  """
  m, d = a.shape
  r_in = np.linalg.qr(a, mode="r") if m > d else a  # same singular values/vectors
  _, s, vt = np.linalg.svd(r_in, full_matrices=False)
  if s.size == 0 or s[0] == 0.0:
    return [np.zeros((d, 0))]
  numerical = s[0] * max(m, d) * np.finfo(np.float64).eps
  data = max(numerical, data_eps * float(np.linalg.norm(a)))
  ranks = sorted({int(np.sum(s > data)), int(np.sum(s > numerical))})
  return [vt[:k].T for k in ranks]


def _certified_minimiser(chol: np.ndarray, z: np.ndarray, g: np.ndarray) -> bool:
  """True if a minimiser provably exists near the current point.

  With ``psi(m) = log(1 + e^-m)``, ``|psi'''| <= psi''``, so along a direction
  ``v`` scaled to change no margin by more than 1 the curvature obeys
  ``phi''(t) >= exp(-|t|) phi''(0)``. Integrating twice,
  ``phi(T) - phi(0) >= -T nu sqrt(v'Hv) + v'Hv (T - 1 + exp(-T))``, and
  ``v'Hv >= 1 / L^2``, where ``nu^2 = g'H^-1 g`` (Newton decrement) and
  ``L^2 = max_i z_i'H^-1 z_i``. So if ``nu * L < 1`` every such ray rises
  above the current loss within a bounded margin distance T, and a convex
  function larger on the boundary of a compact set than at an interior point
  has a minimiser inside it. We require ``nu * L <= 0.5`` (T ~ 2).
  On separable data ``nu * L`` stays of order one or more (Newton keeps moving
  margins by ~1 per step), so this cannot fire there.
  """
  c_inv = np.linalg.inv(chol)  # H^-1 = c_inv.T @ c_inv
  nu = float(np.linalg.norm(c_inv @ g))
  zc = z @ c_inv.T
  lev = float(np.max(np.einsum("ij,ij->i", zc, zc)))
  return nu * math.sqrt(lev) <= _CERTIFICATE


def logistic_optimum(
    x: Any,
    y: Any,
    *,
    tol: float = 1e-9,
    max_iter: int = 200,
    ridge: float = 0.0,
) -> LogisticOptimum:
  """Exact minimiser of the mean logistic loss by a float64 Newton method.

  Minimises ``ell(w) = (1/n) sum_i log(1 + exp(-y_i <x_i, w>)) + (ridge/2)||w||^2``
  (the objective of ``dpjax.problem.glm.logistic_loss``, the one Ganesh et al. 2023
  measure in Sec. 6) on the host, in float64, with a stable softplus.

  * Singular Hessians (zero or duplicate columns, ``d > n``): each Newton step
    is solved in an orthonormal basis of the row space of ``x``. The loss
    depends on ``w`` only through ``x @ w``, so the objective is unchanged and
    the minimiser of least norm is returned. Directions in which ``x``'s
    singular values are below the rounding error of its own dtype
    (``eps(x.dtype) * ||x||_F``) are left out first, so a float32 ``x`` does not
    get a ``w`` that fits float32 rounding noise; they are added back only if
    the gradient on the data as given is still above ``tol``.
  * Step length: the largest of ``1, 1/2, 1/4, ...`` at which the directional
    derivative is still ``<= 0`` (exact even when loss differences fall below
    float64 rounding).
  * Stopping: the float64 gradient norm, on the data values as given, is
    ``<= tol``, and (for ``ridge == 0``) a minimiser provably exists: with
    Newton decrement ``nu`` and ``L^2 = max_i x_i'H^-1 x_i``, ``nu * L <= 1/2``
    implies, because ``|psi'''| <= psi''`` for ``psi(m) = log(1 + e^-m)``, that
    the loss rises in every direction within a bounded distance.
  * (Quasi-)separable data (some ``v != 0`` with ``y_i <x_i, v> >= 0`` for all
    i; e.g. ``d > n``, a constant label with an intercept, or w8a after the
    paper preprocessing) has no minimiser: the gradient still decays, but the
    certificate never holds, as every Newton step keeps moving margins by ~1
    while ``||w||`` grows. After 30 such steps past ``||grad|| <= tol`` this
    raises ``ValueError``; pass ``ridge > 0`` (the reference used 1e-9).

  Args:
    x: float array ``[n, d]``.
    y: float array ``[n]`` of labels in {-1, +1}.
    tol: required bound on the 2-norm of the gradient.
    max_iter: maximum number of Newton iterations.
    ridge: explicit ridge coefficient; default 0, the plain mean loss. With
      ``ridge > 0`` a minimiser always exists; ``w`` then minimises the ridge
      objective and ``tol`` bounds *its* gradient, while the reported ``loss``
      is the mean logistic loss *without* the ridge term (the reference
      code's ``loss_wor``). ``excess_loss`` can then be slightly negative, by
      at most ``ridge/2 ||w||^2``.

  Returns:
    ``LogisticOptimum(w, loss)``: ``w`` float64 ``[d]`` and ``loss`` a float.

  Raises:
    ValueError: invalid inputs; separable data (no minimiser); no convergence
      within ``max_iter``.

  Examples:
    >>> import numpy as np
    >>> from dpjax.problem import solve
    >>> x = np.array([[1., 1.], [1., -1.], [1., 0.5], [1., -0.5]])
    >>> y = np.array([1., 1., -1., 1.])
    >>> w_star, loss_star = solve.logistic_optimum(x, y)
    >>> round(loss_star, 6)
    0.491425
    >>> solve.logistic_optimum(x, np.ones(4))
    Traceback (most recent call last):
    ...
    ValueError: the logistic loss has no minimiser on this data: it is (quasi-)separable...
  """
  _validate.as_float_array(x, "x", ndim=2)
  _validate.as_float_array(y, "y", ndim=1)
  if np.shape(x)[0] != np.shape(y)[0]:
    raise ValueError(
        f"x has {np.shape(x)[0]} rows but y has {np.shape(y)[0]} labels; pass one label per row."
    )
  if not _validate.is_concrete(x) or not _validate.is_concrete(y):
    raise TypeError("logistic_optimum runs on the host; call it outside jit/vmap.")
  _validate.check_labels(y, "y")
  tol = _validate.positive_float(tol, "tol")
  max_iter = _validate.positive_int(max_iter, "max_iter")
  ridge = _validate.nonnegative_float(ridge, "ridge")

  data_eps = float(np.finfo(np.dtype(x.dtype)).eps)
  x64 = np.asarray(jax.device_get(x), dtype=np.float64)
  y64 = np.asarray(jax.device_get(y), dtype=np.float64)
  n, d = x64.shape
  a = y64[:, None] * x64  # exact; the loss is mean softplus(-a @ w)
  del x64

  def full_grad_norm(w: np.ndarray) -> float:
    return float(np.linalg.norm(-(a.T @ _sigmoid(-(a @ w))) / n + ridge * w))

  def result(w: np.ndarray) -> LogisticOptimum:
    return LogisticOptimum(w, float(np.mean(_softplus(-(a @ w)))))

  w = np.zeros(d)
  it = 0
  below_tol = 0
  bases = _range_bases(a, data_eps)
  for phase, basis in enumerate(bases):
    last_phase = phase == len(bases) - 1
    r = basis.shape[1]
    if r == 0:  # x == 0: the loss is log(2) everywhere; w = 0 has least norm.
      return result(w)
    z = a @ basis  # [n, r]
    u = basis.T @ w
    while it < max_iter:
      it += 1
      margins = z @ u
      s = _sigmoid(-margins)
      g = -(z.T @ s) / n + ridge * u  # gradient within the subspace
      zw = z * np.sqrt(s * (1.0 - s) / n)[:, None]
      hess = zw.T @ zw  # exactly symmetric (BLAS syrk)
      hess[np.diag_indices(r)] += ridge
      try:
        chol = np.linalg.cholesky(hess)
        step = -np.linalg.solve(chol.T, np.linalg.solve(chol, g))
      except np.linalg.LinAlgError:  # numerically singular: floor the spectrum
        chol = None
        lam, v = np.linalg.eigh(hess)
        floor = max(lam[-1], np.finfo(np.float64).tiny) * r * np.finfo(np.float64).eps
        step = -(v @ ((v.T @ g) / np.maximum(lam, floor)))
      if float(np.linalg.norm(g)) <= tol:
        exists = ridge > 0 or phase > 0 or (
            chol is not None and _certified_minimiser(chol, z, g))
        if exists:
          w = basis @ u
          if full_grad_norm(w) <= tol:
            return result(w)
          if not last_phase:
            break  # add back the directions left out (see _range_bases)
        else:
          below_tol += 1
          if below_tol >= _SEPARABLE_PATIENCE:
            raise _separable_error(below_tol, basis @ u)
      # Line search on phi'(t) = grad(u + t step) . step (increasing in t).
      dz = z @ step
      t = 1.0
      for _ in range(_MAX_HALVINGS):
        dphi = -float(_sigmoid(-(margins + t * dz)) @ dz) / n + ridge * float((u + t * step) @ step)
        if dphi <= 0.0:
          break
        t *= 0.5
      else:
        if below_tol:  # stuck at the rounding floor without a minimiser in sight
          raise _separable_error(below_tol, basis @ u)
        raise ValueError(
            f"logistic_optimum: the Newton line search failed after {it} steps with "
            f"||grad|| = {float(np.linalg.norm(g)):.3g}; tol={tol:g} is probably below "
            "the float64 rounding floor for this data. Increase tol."
        )
      u = u + t * step
    w = basis @ u
    if it >= max_iter:
      break
  if below_tol:
    raise _separable_error(below_tol, w)
  raise ValueError(
      f"logistic_optimum did not converge in max_iter={max_iter} Newton steps "
      f"(||grad|| = {full_grad_norm(w):.3g}, tol = {tol:g}, ||w|| = {np.linalg.norm(w):.3g}). "
      "Increase max_iter, or tol if ||grad|| is near float64 rounding; if ||w|| is "
      "large the data may be nearly separable: pass ridge > 0."
  )


def _separable_error(steps: int, w: np.ndarray) -> ValueError:
  return ValueError(
      "the logistic loss has no minimiser on this data: it is (quasi-)separable, i.e. some "
      "direction v has y_i <x_i, v> >= 0 for every example, so the loss keeps decreasing as "
      f"||w|| grows (||grad|| <= tol for {steps} Newton steps without w settling; "
      f"||w|| = {np.linalg.norm(w):.3g}). Pass ridge > 0 (the reference code used "
      "ridge=1e-9) to solve a regularised problem, or remove the separating features."
  )


def excess_loss(w: jax.Array, x: jax.Array, y: jax.Array, loss_star: Any) -> jax.Array:
  """``logistic_loss(w, x, y) - loss_star``, the benchmark metric (the excess loss).

  A pure jnp function: works under ``jit`` and ``vmap`` (e.g. over a batch of
  ``w``). Only static shape checks run here; validate the data once with
  ``dpjax.data.validate_dataset``. In float32 the loss itself carries a
  rounding error of a few 1e-8 (relative), so values of that size, including
  tiny negative ones, are rounding; use float64 for smaller gaps.

  Args:
    w: parameters ``[d]``.
    x: features ``[n, d]``.
    y: labels ``[n]`` in {-1, +1}.
    loss_star: ``loss`` returned by :func:`logistic_optimum` for ``(x, y)``.

  Returns:
    The scalar excess loss, in the dtype of the loss.

  Examples:
    >>> import numpy as np
    >>> from dpjax.problem import solve
    >>> x = np.array([[1., 1.], [1., -1.], [1., 0.5]])
    >>> y = np.array([1., 1., -1.])
    >>> w_star, loss_star = solve.logistic_optimum(x, y)
    >>> round(float(solve.excess_loss(np.zeros(2, np.float32), x.astype(np.float32),
    ...                               y.astype(np.float32), loss_star)), 5)
    0.09776
  """
  if np.ndim(w) != 1:
    raise ValueError(f"w must have 1 dimension, got shape {np.shape(w)}; vmap over extra axes.")
  if np.ndim(x) != 2 or np.ndim(y) != 1:
    raise ValueError(f"x must be [n, d] and y [n], got shapes {np.shape(x)} and {np.shape(y)}.")
  if np.shape(x)[1] != np.shape(w)[0] or np.shape(x)[0] != np.shape(y)[0]:
    raise ValueError(
        f"shapes do not match: w {np.shape(w)}, x {np.shape(x)}, y {np.shape(y)}; "
        "need w [d], x [n, d], y [n]."
    )
  if np.ndim(loss_star) != 0:
    raise ValueError(f"loss_star must be a scalar, got shape {np.shape(loss_star)}.")
  return logistic_loss(w, x, y) - loss_star


# The ridge of the reference code's w* (its `reg`), used only when the data is
# (quasi-)separable and the plain mean loss has no minimiser (e.g. w8a).
SEPARABLE_RIDGE = 1e-9

_OPTIMUM_CACHE: collections.OrderedDict = collections.OrderedDict()
_OPTIMUM_CACHE_SIZE = 8


def _digest(a: np.ndarray) -> str:
  a = np.ascontiguousarray(a)
  h = hashlib.blake2b(digest_size=16)
  h.update(f"{a.dtype.str}{a.shape}".encode())
  h.update(a.data)
  return h.hexdigest()


def optimum_loss(x: Any, y: Any) -> tuple[float, float]:
  """``(loss_star, ridge)``: the non-private optimum that :func:`dpjax.fit` reports excess losses against.

  Calls :func:`logistic_optimum` (float64 Newton). If the data is
  (quasi-)separable the plain mean loss has no minimiser, and that raises
  ``ValueError``; then the optimum of the ridge objective with
  ``ridge = SEPARABLE_RIDGE`` (1e-9, the reference code's ``reg`` for w*)
  is used instead, and its loss *without* the ridge term is returned. Results
  are cached per dataset (by content hash) within the process.

  Args:
    x: float array ``[n, d]`` (concrete).
    y: labels ``[n]`` in {-1, +1}.

  Returns:
    ``(loss_star, ridge)`` as Python floats.

  Examples:
    >>> from dpjax import data
    >>> from dpjax.problem import solve
    >>> x, y = data.synthetic(0, n=200, d=3)
    >>> loss_star, ridge = solve.optimum_loss(x, y)
    >>> round(loss_star, 6), ridge
    (0.622482, 0.0)
  """
  x = np.asarray(jax.device_get(x))
  y = np.asarray(jax.device_get(y))
  key = (_digest(x), _digest(y))
  if key in _OPTIMUM_CACHE:
    _OPTIMUM_CACHE.move_to_end(key)
    return _OPTIMUM_CACHE[key]
  try:
    value = (logistic_optimum(x, y).loss, 0.0)
  except ValueError as err:
    if "no minimiser" not in str(err):
      raise
    value = (logistic_optimum(x, y, ridge=SEPARABLE_RIDGE).loss, SEPARABLE_RIDGE)
  _OPTIMUM_CACHE[key] = value
  while len(_OPTIMUM_CACHE) > _OPTIMUM_CACHE_SIZE:
    _OPTIMUM_CACHE.popitem(last=False)
  return value
