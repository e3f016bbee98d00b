"""Scalar link functions with exact, cancellation-free derivatives, for :mod:`dpjax.problem.losses`.

The sigmoid's derivative as ``sigma(t) sigma(-t)`` (no ``1 - sigma(t)``
cancellation at large ``t``), the softplus through ``logaddexp``, the
pseudo-Huber loss written so that ``r^2`` never overflows, and the
exponential's second-order Taylor extension beyond a public radius (convex and
twice differentiable, so the Poisson loss keeps bounded curvature on a ball).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

__all__: list[str] = []  # private to dpjax.problem.losses


@jax.custom_jvp
def _sigmoid(t):
  return jax.nn.sigmoid(t)


@_sigmoid.defjvp
def _sigmoid_jvp(primals, tangents):
  (t,), (dt,) = primals, tangents
  # sigma' = sigma(t) sigma(-t): no 1 - sigma(t) cancellation at large t.
  return _sigmoid(t), _sigmoid(t) * _sigmoid(-t) * dt


@jax.custom_jvp
def _softplus(t):
  return jnp.logaddexp(t, jnp.zeros_like(t))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
  (t,), (dt,) = primals, tangents
  return _softplus(t), _sigmoid(t) * dt


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _pseudo_huber(r, delta):
  # delta^2 (sqrt(1 + (r/delta)^2) - 1) = delta r^2 / (hypot(delta, r) + delta),
  # written as delta r * (r / (h + delta)) so r^2 never overflows.
  return delta * r * (r / (jnp.hypot(delta, r) + delta))


@_pseudo_huber.defjvp
def _pseudo_huber_jvp(delta, primals, tangents):
  (r,), (dr,) = primals, tangents
  return _pseudo_huber(r, delta), _pseudo_huber_slope(r, delta) * dr


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _pseudo_huber_slope(r, delta):
  return delta * (r / jnp.hypot(delta, r))


@_pseudo_huber_slope.defjvp
def _pseudo_huber_slope_jvp(delta, primals, tangents):
  (r,), (dr,) = primals, tangents
  return _pseudo_huber_slope(r, delta), (delta / jnp.hypot(delta, r)) ** 3 * dr


def _extended_exp(z, radius):
  """``exp(z)`` for ``z <= radius``, its 2nd-order Taylor extension beyond (C^2, convex)."""
  inside = z <= radius
  e_r = math.exp(radius)
  u = jnp.where(inside, z, radius)
  d = jnp.where(inside, 0.0, z - radius)
  return jnp.where(inside, jnp.exp(u), e_r * (1.0 + d + 0.5 * d * d))
