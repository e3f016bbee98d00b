"""The neighbouring relations of the full-batch methods and the lemmas behind their sensitivities.

Every full-batch method of dpjax (DP-GD, preconditioned DP-GD, the
double-noise Newton method, cubic Newton, the private damped Newton baseline)
treats ``n`` as public: every mean divides by the same ``n``. Two datasets of
``n`` rows are neighbours under

* ``"zero-out"`` (the default; dp-accounting's REPLACE_SPECIAL): one row is
  replaced by the null row, which contributes zero gradient and zero
  curvature. For a GLM loss ``phi(<w, x>, y)`` the null row is ``x = 0``
  (gradient ``phi' x = 0``, curvature ``phi'' x x^T = 0``, any label);
* ``"replace-one"``: one row is replaced by any other row of the domain
  (``||x|| <= 1``, a valid label). This includes the null row, so a
  replace-one guarantee implies the zero-out one.

(Adding or removing a row changes ``n``, which every mean divides by; neither
relation is add/remove.)

One row's term enters each released statistic once, divided by ``n``. With
``t_i`` the term of the replaced row and ``t_i'`` that of its replacement
(``t = 0`` for the null row), the statistic moves by ``(t_i - t_i') / n``:

1. **Vectors of norm <= B** (per-example gradients, ``B = L0``):
   zero-out ``||t_i|| <= B``; replace-one
   ``||t_i - t_i'|| <= ||t_i|| + ||t_i'|| <= 2 B`` (tight: opposite
   vectors). Factor 2 (:func:`vector_factor`).
2. **PSD matrices of Frobenius norm <= B** (per-example curvature ``c x x^T``,
   ``c >= 0``, or any clipped PSD Hessian): zero-out ``||A||_F <= B``;
   replace-one ``||A - A'||_F^2 = ||A||_F^2 + ||A'||_F^2 - 2 <A, A'>_F
   <= 2 B^2`` because ``<A, A'>_F = tr(A A') >= 0`` for PSD ``A, A'``
   (tight: rank-one terms on orthogonal rows). Factor ``sqrt(2)``
   (:func:`psd_frobenius_factor`).
3. **PSD matrices of operator norm <= B**: ``-A' <= A - A' <= A`` in the
   PSD order, so every eigenvalue of ``A - A'`` lies in ``[-B, B]``:
   ``||A - A'||_op <= B``. Factor 1.
4. **Scalars in [0, B]** (the trace ``c ||x||^2`` of a PSD rank-one term, or
   ``tr(H_i) <= sqrt(d) ||H_i||_F`` of a PSD Hessian): the difference of two
   numbers in ``[0, B]`` is at most ``B``. Factor 1.
5. **Differences of operator-monotone images** (the Newton direction with
   ``add``): if ``P = F(M) - F(M + A)`` and ``P' = F(M) - F(M + A')`` are both
   PSD with operator norm ``<= s`` (``F(M) = (M + lam I)^{-1}`` is operator
   monotone decreasing and ``A, A'`` are PSD), then ``||P' - P||_op <= s`` by
   3. Factor 1.
6. **Anything else**: a replace-one pair is two zero-out steps through the
   dataset with the null row in that place, so the triangle inequality gives
   at most twice the zero-out sensitivity (the Newton direction with ``clip``,
   whose eigenvalue clipping is not operator monotone). Factor 2.

Each mechanism derives its noise std from one of these at the one line where
the std is computed; its docstring states which.
"""

from __future__ import annotations

import math
from typing import Any

from dpjax import _validate
from dpjax.problem.minibatch import NEIGHBOURING

__all__ = ["NEIGHBOURING", "check", "psd_frobenius_factor", "vector_factor"]


def check(neighbouring: Any) -> str:
  """Returns ``neighbouring``; raises unless it is ``"zero-out"`` or ``"replace-one"``.

  Raises:
    TypeError: not a string.
    ValueError: another string; the message lists :data:`NEIGHBOURING`.

  Examples:
    >>> from dpjax.problem import _neighbouring
    >>> _neighbouring.check("replace-one")
    'replace-one'
  """
  return _validate.choice(neighbouring, "neighbouring", NEIGHBOURING)


def vector_factor(neighbouring: Any) -> float:
  """1 (zero-out) or 2 (replace-one): the sensitivity of a mean of vectors of norm ``<= B``, over
  ``B / n`` (module docstring, lemma 1).

  Examples:
    >>> from dpjax.problem import _neighbouring
    >>> _neighbouring.vector_factor("zero-out"), _neighbouring.vector_factor("replace-one")
    (1.0, 2.0)
  """
  return 1.0 if check(neighbouring) == "zero-out" else 2.0


def psd_frobenius_factor(neighbouring: Any) -> float:
  """1 (zero-out) or ``sqrt(2)`` (replace-one): the Frobenius sensitivity of a mean of PSD
  matrices of Frobenius norm ``<= B``, over ``B / n`` (module docstring, lemma 2).

  Examples:
    >>> from dpjax.problem import _neighbouring
    >>> round(_neighbouring.psd_frobenius_factor("replace-one") ** 2, 12)
    2.0
  """
  return 1.0 if check(neighbouring) == "zero-out" else math.sqrt(2.0)
