"""The eigenvalue modification Psi_lambda of the double-noise Newton method.

Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv:2305.13209),
Definition 5.4. For a symmetric PSD matrix
``A = sum_i lambda_i u_i u_i^T``:

* ``Psi_lam(A, "clip") = sum_i max(lam, lambda_i) u_i u_i^T`` (one ``eigh``);
* ``Psi_lam(A, "add")  = A + lam I`` (one Cholesky factorisation).

Both functions accept batched matrices ``[..., d, d]`` with batched
``lam`` (any shape that broadcasts against the batch shape) and work under
``jit`` and ``vmap``. Curvature matrices that are PSD in exact arithmetic can
have eigenvalues slightly below zero after round-off; ``clip`` is unaffected
(everything below ``lam > 0`` is lifted to ``lam``), and ``add`` falls back to an
eigendecomposition with the negative round-off eigenvalues clamped at zero
whenever the Cholesky factorisation breaks down.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import linalg as jsl

from dpjax import _validate

__all__ = ["MODES", "modify_eigenvalues", "modified_solve"]

MODES = ("clip", "add")


def _check(h: Any, lam: Any, mode: str, g: Any = None) -> None:
  _validate.choice(mode, "mode", MODES)
  _validate.as_float_array(h, "h")
  shape = np.shape(h)
  if len(shape) < 2 or shape[-1] != shape[-2]:
    raise ValueError(
        f"h must be a square matrix or a batch of them with shape [..., d, d], got {shape}."
    )
  batch = shape[:-2]
  if g is not None:
    _validate.as_float_array(g, "g")
    gshape = np.shape(g)
    if len(gshape) < 1 or gshape[-1] != shape[-1]:
      raise ValueError(
          f"g must have shape [..., {shape[-1]}] to match h of shape {shape}, got {gshape}."
      )
    try:
      batch = np.broadcast_shapes(batch, gshape[:-1])
    except ValueError as err:
      raise ValueError(
          f"the batch shapes of h {shape[:-2]} and g {gshape[:-1]} do not broadcast."
      ) from err
  lam_shape = np.shape(lam)
  try:
    np.broadcast_shapes(batch, lam_shape)
  except ValueError as err:
    raise ValueError(
        f"lam must be a scalar or broadcast against the batch shape {batch}, got shape {lam_shape}."
    ) from err
  if _validate.is_concrete(lam):
    lam_host = np.asarray(jax.device_get(lam), dtype=np.float64)
    if not np.all(np.isfinite(lam_host)) or np.any(lam_host <= 0):
      raise ValueError(
          "lam must be finite and > 0 (Psi_lam needs a positive minimum eigenvalue), "
          f"got {lam_host.ravel()[:4].tolist()}."
      )


def _expand(lam: jax.Array, ndim: int) -> jax.Array:
  """Appends ``ndim`` trailing unit axes to ``lam``."""
  return jnp.reshape(lam, jnp.shape(lam) + (1,) * ndim)


def _clipped_spectrum(h: jax.Array, lam: jax.Array) -> tuple[jax.Array, jax.Array]:
  evals, evecs = jnp.linalg.eigh(h)
  return jnp.maximum(evals, _expand(lam, 1)), evecs


def _add_spectrum(h: jax.Array, lam: jax.Array) -> tuple[jax.Array, jax.Array]:
  evals, evecs = jnp.linalg.eigh(h)
  return jnp.maximum(evals, 0.0) + _expand(lam, 1), evecs


def _eigen_solve(evals: jax.Array, evecs: jax.Array, g: jax.Array) -> jax.Array:
  # V diag(1/e) V^T g, written as contractions over the last axis of V^T.
  coeff = jnp.einsum("...ji,...j->...i", evecs, g) / evals
  return jnp.einsum("...ij,...j->...i", evecs, coeff)


def modify_eigenvalues(h: jax.Array, lam: jax.typing.ArrayLike, mode: str = "clip") -> jax.Array:
  """Returns the modified curvature matrix ``Psi_lam(h, mode)`` (Def. 5.4).

  Args:
    h: symmetric PSD matrix ``[d, d]`` or batch ``[..., d, d]``.
    lam: minimum eigenvalue, > 0; a scalar or an array broadcasting against the
      batch shape of ``h``.
    mode: ``"clip"`` lifts every eigenvalue below ``lam`` to ``lam``;
      ``"add"`` adds ``lam`` to every eigenvalue.

  Returns:
    The symmetric positive-definite matrix ``Psi_lam(h)``, same shape as ``h``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import spectral
    >>> h = jnp.diag(jnp.array([2.0, 0.01]))
    >>> spectral.modify_eigenvalues(h, 0.1, "clip").diagonal()
    Array([2. , 0.1], dtype=float32)
    >>> spectral.modify_eigenvalues(h, 0.1, "add").diagonal()
    Array([2.1 , 0.11], dtype=float32)
  """
  _check(h, lam, mode)
  h = jnp.asarray(h)
  lam = jnp.asarray(lam, dtype=h.dtype)
  if mode == "add":
    eye = jnp.eye(h.shape[-1], dtype=h.dtype)
    return h + _expand(lam, 2) * eye
  evals, evecs = _clipped_spectrum(h, lam)
  out = jnp.einsum("...ik,...k,...jk->...ij", evecs, evals, evecs)
  return 0.5 * (out + jnp.swapaxes(out, -1, -2))


def modified_solve(
    h: jax.Array, g: jax.Array, lam: jax.typing.ArrayLike, mode: str = "clip"
) -> jax.Array:
  """Returns the Newton direction ``Psi_lam(h)^{-1} g`` (Algorithm 3, line 5).

  ``clip`` uses one symmetric eigendecomposition; the inverse is
  ``sum_i u_i u_i^T / max(lam, lambda_i)``. ``add`` uses one Cholesky
  factorisation of ``h + lam I``; if it breaks down (possible only when
  round-off made ``h`` indefinite by more than ``lam``), the solve falls back to
  an eigendecomposition with the eigenvalues clamped at zero before ``lam`` is
  added.

  Args:
    h: symmetric PSD matrix ``[d, d]`` or batch ``[..., d, d]``.
    g: right-hand side ``[d]`` or ``[..., d]`` (broadcast against ``h``).
    lam: minimum eigenvalue, > 0; scalar or broadcasting against the batch shape.
    mode: ``"clip"`` or ``"add"``.

  Returns:
    The solution, shape ``[..., d]``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.problem import spectral
    >>> h = jnp.diag(jnp.array([2.0, 0.0]))
    >>> spectral.modified_solve(h, jnp.array([2.0, 1.0]), 0.5, "clip")
    Array([1., 2.], dtype=float32)
    >>> spectral.modified_solve(h, jnp.array([2.5, 1.0]), 0.5, "add").round(5)
    Array([1., 2.], dtype=float32)
  """
  _check(h, lam, mode, g)
  h = jnp.asarray(h)
  g = jnp.asarray(g, dtype=h.dtype)
  lam = jnp.asarray(lam, dtype=h.dtype)
  batch = jnp.broadcast_shapes(h.shape[:-2], g.shape[:-1], lam.shape)
  d = h.shape[-1]
  h = jnp.broadcast_to(h, batch + (d, d))
  g = jnp.broadcast_to(g, batch + (d,))
  lam = jnp.broadcast_to(lam, batch)
  if mode == "clip":
    return _eigen_solve(*_clipped_spectrum(h, lam), g)

  if batch:
    return _add_solve_batched(h, g, lam)
  return _add_solve(h, g, lam)


def _cholesky_add_solve(h, g, lam):
  """``(x, ok)``: the Cholesky solve of ``(h + lam I) x = g`` and where it worked."""
  d = h.shape[-1]
  eye = jnp.eye(d, dtype=h.dtype)
  a = 0.5 * (h + jnp.swapaxes(h, -1, -2)) + _expand(lam, 2) * eye
  chol = jnp.linalg.cholesky(a)
  ok = jnp.all(jnp.isfinite(chol), axis=(-2, -1))
  safe_chol = jnp.where(ok[..., None, None], chol, eye)
  x_chol = jsl.cho_solve((safe_chol, True), g[..., None])[..., 0]
  # A breakdown can also show as a non-finite solve; the fallback covers both.
  ok = jnp.logical_and(ok, jnp.all(jnp.isfinite(x_chol), axis=-1))
  return x_chol, ok


def _eigen_add_fallback(h, g, lam, ok):
  """The eigendecomposition solve, fed ``h`` only where ``ok`` is False.

  The matrix depends on the Cholesky factor and the triangular solves (via
  ``ok``), which orders the LAPACK calls: run side by side, XLA:CPU's batched
  kernels (potrf or trsm next to syevd) were seen to deadlock waiting for each
  other on the 2-thread pool.
  """
  eye = jnp.eye(h.shape[-1], dtype=h.dtype)
  h_fallback = jnp.where(ok[..., None, None], eye, h)
  return _eigen_solve(*_add_spectrum(h_fallback, lam), g)


def _add_solve_batched(h, g, lam):
  """``add`` over explicit leading batch dims: the eigh runs only if a Cholesky failed.

  The breakdown test is reduced over the whole batch, so the ``cond`` stays a
  real branch: the usual all-positive-definite batch pays one Cholesky per
  member and no eigendecomposition (an ``eigh`` costs about as much as
  forming the Hessian at d = 300).
  """
  x_chol, ok = _cholesky_add_solve(h, g, lam)
  return jax.lax.cond(
      jnp.all(ok), lambda: x_chol,
      lambda: jnp.where(ok[..., None], x_chol, _eigen_add_fallback(h, g, lam, ok)))


@jax.custom_batching.custom_vmap
def _add_solve(h, g, lam):
  """``add`` for one matrix; under ``vmap`` its rule batches explicitly (see above)."""
  x_chol, ok = _cholesky_add_solve(h, g, lam)
  return jax.lax.cond(ok, lambda: x_chol, lambda: _eigen_add_fallback(h, g, lam, ok))


@_add_solve.def_vmap
def _add_solve_vmap(axis_size, in_batched, h, g, lam):
  h, g, lam = (a if b else jnp.broadcast_to(a, (axis_size,) + a.shape)
               for a, b in zip((h, g, lam), in_batched))
  return _add_solve_batched(h, g, lam), True
