"""Error-free float arithmetic for the accountant's triple-word totals (in-graph).

The accountant (:mod:`dpjax.accounting.accountant`) keeps each running total
as three words ``w0 + w1 + w2`` of its dtype, each word below the ulp of the
one before, so that a charge is added with rounding only at the third word:

* :func:`_two_sum`: TwoSum, ``s + e == a + b`` exactly with ``s = fl(a + b)``;
* :func:`_add3`: the triple-word sum ``a + b``, renormalised;
* :func:`_split3`, :func:`_split_words`: a charge wider than the accountant
  (a float64 host value, say) as three words of its dtype, exactly;
* :func:`_round_up_words`: a slack as one word, rounded towards +inf.

All of them are ``jit``/``vmap``/``lax.scan`` safe; :func:`_split_words` and
:func:`_round_up_words` also take host (numpy) values.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _split3(x: Any, dtype: Any) -> tuple[Any, Any, Any]:
  """Splits a float array into three ``dtype`` words with ``w0 + w1 + w2 == x``.

  Exact when ``x`` is at most 3x wider than ``dtype`` (float64 into float32:
  24 + 24 + 24 >= 53 bits) and nothing underflows; each remainder is exact in
  the wide dtype (Sterbenz).
  """
  w0 = x.astype(dtype)
  r = x - w0.astype(x.dtype)
  w1 = r.astype(dtype)
  w2 = (r - w1.astype(x.dtype)).astype(dtype)
  return w0, w1, w2


def _split_words(x: Any, dtype: np.dtype) -> tuple[Any, Any, Any]:
  """Splits a checked charge exactly into three words of ``dtype``.

  A numpy (float64) value or a jax array wider than ``dtype`` is split exactly;
  a same-width jax array (e.g. a traced value) has zero lower words.
  """
  if isinstance(x, jax.Array):
    if np.dtype(x.dtype).itemsize > dtype.itemsize:
      return _split3(x, dtype)
    hi = x.astype(dtype)
    zero = jnp.zeros_like(hi)
    return hi, zero, zero
  w0, w1, w2 = _split3(x, dtype)
  return jnp.asarray(w0), jnp.asarray(w1), jnp.asarray(w2)


def _two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Knuth's branch-free TwoSum: ``s + e == a + b`` exactly, ``s = fl(a + b)``.

  ``s`` and ``s - a`` go through ``optimization_barrier`` so that no compiler
  rewrite such as ``(a + b) - a -> b`` can cancel the error term: with XLA's
  fast-math reassociation enabled, the unguarded version loses all
  compensation (1e-4 drift over 1e4 float32 charges); the guarded one stays exact.
  """
  s = jax.lax.optimization_barrier(a + b)
  b_virtual = jax.lax.optimization_barrier(s - a)
  a_virtual = s - b_virtual
  return s, (a - a_virtual) + (b - b_virtual)


def _add3(a: tuple[Any, Any, Any], b: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
  """Triple-word sum ``a + b`` (elementwise), renormalised; rounding only at word 3."""
  s0, e0 = _two_sum(a[0], b[0])
  s1, e1 = _two_sum(a[1], b[1])
  s1, e2 = _two_sum(s1, e0)
  s2 = (a[2] + b[2]) + (e1 + e2)  # the only rounded sum: third-word level.
  # Renormalise (error-free) so that each word is below the ulp of the previous.
  t1, t2 = _two_sum(s1, s2)
  r0, x = _two_sum(s0, t1)
  r1, r2 = _two_sum(x, t2)
  return r0, r1, r2


def _round_up_words(x: Any, dtype: np.dtype) -> Any:
  """``x`` as ``dtype``, rounded towards +inf (a slack must never be understated)."""
  if isinstance(x, jax.Array):
    w = x.astype(dtype)
    if np.dtype(x.dtype).itemsize > dtype.itemsize:
      w = jnp.where(w.astype(x.dtype) < x, jnp.nextafter(w, jnp.asarray(jnp.inf, dtype)), w)
    return w
  w = np.asarray(x, np.float64).astype(dtype)
  w = np.where(w.astype(np.float64) < x, np.nextafter(w, np.asarray(np.inf, dtype)), w)
  return jnp.asarray(w.astype(dtype))
