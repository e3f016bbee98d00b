"""The neighbouring datasets of the audits and the rows they are built from.

Zero-out pairs (public rows and null rows; the canary, or two for the
``"2x-sensitivity"`` twin), replace-one pairs, the label-flip pair of the
host audits, and the ``neighbouring=`` option a builder passes on.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.problem import glm


# ----------------------------------------------------------------------------
# Datasets.
# ----------------------------------------------------------------------------


def _stack(rows: list[tuple[tuple[float, ...], float]], dtype=jnp.float32):
  x = jnp.asarray(np.asarray([r[0] for r in rows], np.float64), dtype)
  y = jnp.asarray(np.asarray([r[1] for r in rows], np.float64), dtype)
  return x, y


def _zero_out_pair(n: int, public: list, canary: tuple, *, doubled: bool, d: int):
  """``D``: the public rows, then null rows; ``D'``: one canary (two if ``doubled``) last."""
  k = 2 if doubled else 1
  if len(public) + k > n:
    raise ValueError(f"{len(public)} public rows and {k} canaries do not fit in n={n}.")
  null = ((0.0,) * d, 1.0)
  fill = [null] * (n - len(public) - k)
  return (_stack(public + fill + [null] * k), _stack(public + fill + [canary] * k))


def _balanced(count: int, x: tuple[float, ...]) -> list:
  """``count`` public rows ``x`` with labels alternating +1, -1."""
  return [(x, 1.0 if i % 2 == 0 else -1.0) for i in range(count)]


_MARGIN = 20.0  # the gradient canary's |margin|: sigma(-20) = 2e-9.


def _gd_public(count: int) -> list:
  """Public rows along ``e_2`` (margin 0 at any ``w`` with ``w_2 = 0``), balanced labels."""
  return [((0.0, 0.5 + 0.2 * (i % 3)), 1.0 if i % 2 == 0 else -1.0) for i in range(count)]


def _label_flip_pair(n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(x, y, y')``: ``n - k`` public rows and ``k`` canaries ``e_1`` whose label flips ``-1 -> +1``."""
  public = _gd_public(n - k)
  x = np.asarray([r[0] for r in public] + [(1.0, 0.0)] * k, np.float64)
  y = np.asarray([r[1] for r in public] + [-1.0] * k, np.float64)
  y_prime = y.copy()
  y_prime[n - k:] = 1.0
  return x, y, y_prime


def _opposite_gradient_rows():
  """A replace-one pair of rows with nearly opposite gradients at ``w = R e_2``.

  Row ``(cos a, -sin a)`` with ``y = +1`` has margin ``-R sin a = -100`` and
  gradient ``~ -x``; its replacement ``(cos a, sin a)`` with ``y = -1`` has
  margin ``-100`` too and gradient ``~ +x'``. The gradients differ by
  ``2 cos a ~ 2``: twice the zero-out sensitivity ``L0``, the replace-one
  worst case for a sum of gradients.
  """
  a = 0.01
  radius = 100.0 / math.sin(a)
  return (np.asarray([0.0, radius]), ((math.cos(a), -math.sin(a)), 1.0),
          ((math.cos(a), math.sin(a)), -1.0))


def _replace_one_pair(n: int, public: list, row: tuple, other: tuple, *, doubled: bool):
  """``D`` holds ``row`` (twice if ``doubled``), ``D'`` holds ``other`` in its place."""
  k = 2 if doubled else 1
  base = public[: n - k]
  if len(base) + k != n:
    raise ValueError(f"{len(public)} public rows do not fill n={n} with {k} swapped rows.")
  return _stack(base + [row] * k), _stack(base + [other] * k)


def _unit_difference(w0: jax.Array, datasets) -> jax.Array:
  g0, g1 = (np.asarray(glm.logistic_loss_and_grad(w0, *ds)[1], np.float64) for ds in datasets)
  return jnp.asarray((g1 - g0) / np.linalg.norm(g1 - g0), jnp.float32)


def _relation_options(transform: Callable, relation: str) -> dict:
  """The ``neighbouring=`` option of ``transform`` for ``relation`` (zero-out: every default)."""
  if relation == "zero-out":
    return {}
  import inspect  # pylint: disable=import-outside-toplevel
  if "neighbouring" not in inspect.signature(transform).parameters:
    raise ValueError(
        f"{transform.__name__} takes no neighbouring= option in this version, so "
        f"relation={relation!r} cannot be audited with its own calibration (only its "
        "'zero-out-noise' twin runs).")
  return {"neighbouring": relation}
