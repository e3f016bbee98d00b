"""The damped Newton method of Avella-Medina et al. (2021): noise, state and transform.

Shared by the two damped-Newton baselines, which differ only in the step
size: :func:`damped_newton` (NOT private, the step size reads the noise-free
Newton step) and :func:`damped_newton_private` (rho-zCDP). Not a baseline of
its own.

Privacy of the parts here: each step releases the mean gradient and the mean
Hessian through two Gaussian mechanisms (:func:`damped_newton_noise`
calibrates them, ``n`` public, ``neighbouring="zero-out"`` or
``"replace-one"``, :mod:`dpjax.problem._neighbouring`), which together are
``rho_t``-zCDP and are charged to the accountant where they are drawn. Whether
the iterates are private depends on the step size alone (see
:func:`damped_newton_transform`).

Paper: Avella-Medina, Bradshaw, Loh, "Differentially private inference via
noisy optimization" (2021, arXiv:2103.11003), the damped Newton step of p. 22,
as run in Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023,
arXiv:2305.13209), Sec. 6.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _common
from dpjax.problem import _neighbouring
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.problem import spectral

__all__ = ["DampedNewtonState", "damped_newton_noise", "damped_newton_transform"]


def damped_newton_noise(
    n: int,
    rho_per_step: float | jax.Array,
    *,
    grad_frac: float = 0.7,
    row_norm_bound: float = 1.0,
    neighbouring: str = "zero-out",
) -> tuple[Any, Any]:
  """``(sigma_g, sigma_H)``: the damped-Newton noise stds of one step.

  ``rho_g = grad_frac rho_t``, ``rho_H = (1 - grad_frac) rho_t``;
  ``sigma_g = (f_g L/n) / sqrt(2 rho_g)`` and ``sigma_H = (f_H L^2/(4n)) /
  sqrt(2 rho_H)``. Zero-out (``f_g = f_H = 1``): one example moves the mean
  gradient by ``<= L/n`` and the mean Hessian by ``c(z) x x^T / n``, of
  Frobenius norm ``<= L^2/(4n)``. Replace-one: the gradients of two rows differ
  by ``<= 2L`` (``f_g = 2``), and two PSD terms ``A, A'`` of Frobenius norm
  ``<= L^2/4`` differ by ``||A - A'||_F = sqrt(||A||_F^2 + ||A'||_F^2 - 2 <A,
  A'>_F) <= sqrt(2) L^2/4`` since ``<A, A'>_F = tr(A A') >= 0`` (``f_H =
  sqrt(2)``). The symmetrised noise of :func:`dpjax.mechanisms.noise.add_gaussian_symmetric`
  is exactly ``||D||_F^2 / (2 sigma_H^2)``-zCDP for a change ``D``.

  Examples:
    >>> from dpjax import baselines
    >>> sg, sh = baselines.damped_newton_noise(1000, 0.01)
    >>> round(sg, 8), round(sh, 8)
    (0.00845154, 0.00322749)
    >>> sg2, sh2 = baselines.damped_newton_noise(1000, 0.01, neighbouring="replace-one")
    >>> sg2 / sg, round(sh2 / sh, 12)
    (2.0, 1.414213562373)
  """
  n = _validate.positive_int(n, "n")
  rho_t = _common.budget_value(rho_per_step, "rho_per_step")
  gamma = _validate.float_in_open_interval(grad_frac, "grad_frac", 0.0, 1.0)
  lip = _validate.positive_float(row_norm_bound, "row_norm_bound")
  f_g = _neighbouring.vector_factor(neighbouring)
  f_h = _neighbouring.psd_frobenius_factor(neighbouring)
  rho_g = gamma * rho_t
  rho_h = rho_t - rho_g
  # The one place where the damped-Newton noise scales are derived (docstring).
  return (accounting.gaussian_sigma(f_g * lip / n, rho_g),
          accounting.gaussian_sigma(f_h * lip * lip / (4.0 * n), rho_h))


class DampedNewtonState(NamedTuple):
  """State of :func:`damped_newton` / :func:`damped_newton_private`."""

  count: jax.Array  # shape=(), int32: steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # rho-zCDP of the noise drawn so far.
  grad_noise_std: jax.Array  # shape=(), params dtype: sigma_g.
  hessian_noise_std: jax.Array  # shape=(), params dtype: sigma_H (diagonal entries).
  step_size: jax.Array  # shape=(), params dtype: eta of the last step.
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


def _damped_step_size(beta: jax.Array) -> jax.Array:
  """``min(1, log(1 + beta) / beta)`` (1 at beta = 0)."""
  safe = jnp.where(beta > 0, beta, 1.0)
  return jnp.where(beta > 0, jnp.minimum(1.0, jnp.log1p(safe) / safe), 1.0)


def damped_newton_transform(
    *,
    n: int,
    rho: float | jax.Array | None,
    steps: int | None,
    rho_per_step: float | jax.Array | None,
    grad_frac: float,
    min_eigenvalue: float,
    step_size: float | str,
    row_norm_bound: float,
    key: int | jax.Array,
    neighbouring: str,
    disable_noise_for_testing: bool,
    name: str,
) -> optax.GradientTransformationExtraArgs:
  """The damped-Newton transform behind :func:`damped_newton` and :func:`damped_newton_private`.

  Draws and charges both noises of :func:`damped_newton_noise` every step and
  returns ``-eta H~^{-1} g~``. ``step_size`` selects ``eta``: ``"oracle"``
  reads the noise-free ``g`` and ``H`` (NOT private), ``"noisy-decrement"``
  is post-processing of ``g~`` and ``H~``, a float is a public constant. The
  callers check ``step_size``; ``name`` labels the error messages.
  """
  n = _validate.positive_int(n, "n")
  rho_step, steps = _common.per_step_budget(rho, steps, rho_per_step)
  lam = _validate.positive_float(min_eigenvalue, "min_eigenvalue")
  sigma_g, sigma_h = damped_newton_noise(n, rho_step, grad_frac=grad_frac,
                                         row_norm_bound=row_norm_bound,
                                         neighbouring=neighbouring)
  lip = float(row_norm_bound)
  sens_g = _neighbouring.vector_factor(neighbouring) * lip / n
  sens_h = _neighbouring.psd_frobenius_factor(neighbouring) * lip * lip / (4.0 * n)
  key = _common.canonical_key(key)
  on = 0.0 if _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing") else 1.0

  def init_fn(params):
    params = _common.check_params(params)
    dt = params.dtype
    return DampedNewtonState(
        count=jnp.zeros((), jnp.int32), key=key, accountant=accounting.init_accountant(),
        grad_noise_std=jnp.asarray(on * sigma_g, dt),
        hessian_noise_std=jnp.asarray(on * sigma_h, dt),
        step_size=jnp.zeros((), dt), budget_exhausted=jnp.zeros((), bool))

  def update_fn(updates, state, params=None, *, curvature_matrix=None, **extra_args):
    del params, extra_args
    if not isinstance(state, DampedNewtonState):
      raise TypeError(f"state must be a DampedNewtonState from init(), got "
                      f"{type(state).__name__}.")
    g = _common.check_vector(updates, "updates")
    d, dt = g.shape[0], g.dtype
    if curvature_matrix is None:
      raise TypeError(f"{name}'s update needs the mean Hessian: call "
                      "tx.update(grad, state, params, curvature_matrix=H).")
    _validate.as_float_array(curvature_matrix, "curvature_matrix", ndim=2)
    if np.shape(curvature_matrix) != (d, d):
      raise ValueError(f"curvature_matrix has shape {np.shape(curvature_matrix)} but must be "
                       f"({d}, {d}) to match the gradient.")
    h = jnp.asarray(curvature_matrix, dt)
    ok = _common.gate(state.count, steps, name)
    new_key, k_g, k_h = jax.random.split(state.key, 3)
    # Gradient: sensitivity f_g L/n, budget grad_frac * rho_t.
    g_noisy = noise.add_gaussian(k_g, g, sensitivity=sens_g, noise_std=on * sigma_g)
    # Hessian: Frobenius sensitivity f_H L^2/(4n), budget (1 - grad_frac) * rho_t.
    h_noisy = noise.add_gaussian_symmetric(k_h, h, sensitivity=sens_h, noise_std=on * sigma_h)
    acc = accounting.charge(state.accountant, rho_step,  # Where both noises are drawn.
                            slack=on * (noise.tv_slack(g) + noise.tv_slack(h)))
    direction = spectral.modified_solve(h_noisy, g_noisy, lam, "clip")
    if step_size == "oracle":  # NOT private: reads the noise-free g and H.
      beta = jnp.linalg.norm(spectral.modified_solve(h, g, lam, "clip"))
      eta = _damped_step_size(beta)
    elif step_size == "noisy-decrement":  # Post-processing of g~ and H~.
      eta = _damped_step_size(jnp.linalg.norm(direction))
    else:  # A public constant.
      eta = jnp.asarray(step_size, dt)
    eta = eta.astype(dt)
    out = jnp.where(ok, -eta * direction, jnp.zeros_like(g))
    new_state = DampedNewtonState(
        **_common.gated(ok, state, acc),
        key=new_key,
        grad_noise_std=state.grad_noise_std,
        hessian_noise_std=state.hessian_noise_std,
        step_size=jnp.where(ok, eta, state.step_size))
    return out, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
