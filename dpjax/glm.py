"""Logistic-regression (GLM) losses and fused per-example curvature.

Spec: ``spec-newton.md`` section 1 (loss, per-example gradient and curvature).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def logistic_loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
  """Mean logistic loss ``(1/n) sum_i log(1 + exp(-y_i <x_i, w>))``.

  Uses the stable softplus ``logaddexp(0, -y z)``, finite for any margin.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax import glm
    >>> float(glm.logistic_loss(jnp.zeros(2), jnp.eye(2), jnp.array([1., -1.])))
    0.693147...
  """
  margins = y * (x @ w)
  return jnp.mean(jnp.logaddexp(0.0, -margins))
