"""Curvature-preconditioned DP-GD ("PDPGD") as an optax transform.

A dpjax method, not taken from a paper (its measured accuracy against tuned
DP-GD is in ``benchmarks/results/privacy_utility_frontier.md``). Release a noisy mean
curvature matrix ``H`` (e.g. ``H(0) = X^T X / (4n)`` for the logistic loss)
with a small share of the budget, eigen-clip it from below at a noise-aware
floor, and run noisy gradient descent preconditioned by its inverse:

1. release (step 0, and every ``refresh_every`` steps if asked):
   ``H~ = (H + H^T) / 2 + sigma_H (Z + Z^T) / 2``, ``Z_ij ~ N(0, 1)`` iid,
   ``sigma_H = (f_H L1 / n) / sqrt(2 rho_H)``;
2. ``P = U diag(1 / max(lambda_i, kappa sqrt(2 d) sigma_H)) U^T`` from
   ``H~ = U diag(lambda) U^T`` (:func:`clipped_inverse`);
3. every step: ``w_{t+1} = w_t - eta P (g_t + N(0, s^2 I_d))``,
   ``s = (f_g L0 / n) / sqrt(2 rho_g)``.

Privacy argument (``n`` public, so every mean divides by the same ``n``;
neighbours differ in one row, :mod:`dpjax.problem._neighbouring`: ``"zero-out"``,
the default, replaces it by the null row, which contributes zero gradient and
zero curvature; ``"replace-one"`` by any other row):

* Curvature. The mean curvature is ``H = (1/n) sum_i c_i x_i x_i^T`` with
  ``0 <= c_i <= 1/4`` (Hessian or quadratic upper bound of the logistic loss,
  at any fixed point ``w``) and ``||x_i|| <= 1``, so each term ``A_i = c_i
  x_i x_i^T`` is PSD with Frobenius norm ``c_i ||x_i||^2 <= L1``
  (``curvature_norm_bound``, 1/4). Zero-out changes ``H`` by ``A_i / n``, of
  Frobenius norm ``<= L1 / n``: ``f_H = 1``. Replace-one changes it by
  ``(A_i - A_i') / n`` with ``||A_i - A_i'||_F^2 = ||A_i||_F^2 +
  ||A_i'||_F^2 - 2 <A_i, A_i'>_F <= 2 L1^2``, because ``<A, B>_F = tr(A B)
  >= 0`` for PSD ``A, B``: ``f_H = sqrt(2)`` (not 2; attained by two rows at
  margin 0 on orthogonal directions). The map ``vec(A) = (A_ii, sqrt(2) A_ij
  for i < j)`` is a linear isometry from symmetric matrices with the
  Frobenius norm onto ``R^{d(d+1)/2}``, so ``vec(H)`` has L2 sensitivity
  ``f_H L1 / n``. The symmetric noise ``sigma_H (Z + Z^T) / 2`` has std
  ``sigma_H`` on the diagonal and ``sigma_H / sqrt(2)`` off it, i.e. ``vec``
  of it is ``N(0, sigma_H^2 I)``: releasing ``H~`` is the Gaussian mechanism
  on ``vec(H)`` and is ``rho_H``-zCDP with ``sigma_H = gaussian_sigma(f_H L1
  / n, rho_H)`` (Bun & Steinke 2016, Prop. 1.6). The floor (``kappa sqrt(2 d)
  sigma_H``, so it scales with ``f_H`` too), the eigendecomposition and ``P``
  use only ``H~`` and public constants: post-processing.
* Gradient. Each per-example gradient has norm ``<= L0``
  (``grad_norm_bound``), so the mean gradient moves by ``<= L0 / n`` under
  zero-out and by ``||g_i - g_i'|| / n <= 2 L0 / n`` under replace-one
  (``f_g = 1`` or 2), and ``g + N(0, s^2 I)`` with ``s = gaussian_sigma(f_g
  L0 / n, rho_g)`` is ``rho_g``-zCDP. Multiplying by the (already released)
  ``P`` and ``eta`` is post-processing.
* Composition. A refresh evaluates the curvature at the current iterate,
  a function of earlier releases (post-processing), so every mechanism is a
  Gaussian with a sensitivity fixed in advance, chosen adaptively from
  earlier releases;
  zCDP composes additively (Bun & Steinke 2016, Lemma 2.3) and
  ``K rho_H + m rho_g = curvature_frac rho + (1 - curvature_frac) rho = rho``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax.problem import _neighbouring
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax import _common

__all__ = [
    "DPPrecondGDState",
    "PrecondBudget",
    "clipped_inverse",
    "dp_precond_gd",
    "precond_budget",
]

_NAME = "dp_precond_gd"


class PrecondBudget(NamedTuple):
  """The budget split of :func:`dp_precond_gd` (floats, or arrays for an array ``rho``)."""

  releases: int  # K: number of curvature releases.
  rho_release: float  # rho_H: budget of one curvature release.
  rho_step: float  # rho_g: budget of one gradient step.


class DPPrecondGDState(NamedTuple):
  """State of :func:`dp_precond_gd`.

  ``optax.tree.get(state, "rho")`` returns ``accountant.rho`` (the leading
  float word); :func:`dpjax.accounting.spent_rho` reads the exact total.
  ``preconditioner`` is a function of ``released_curvature`` and
  ``eigenvalue_floor`` only: ``clipped_inverse(released_curvature,
  eigenvalue_floor)``.
  """

  count: jax.Array  # shape=(), int32: gradient steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # rho-zCDP spent so far.
  releases: jax.Array  # shape=(), int32: curvature releases made so far.
  released_curvature: jax.Array  # shape=(d, d), params dtype: the last noisy matrix H~ (zeros before).
  eigenvalue_floor: jax.Array  # shape=(), params dtype: kappa sqrt(2 d) sigma_H (0 before a release).
  preconditioner: jax.Array  # shape=(d, d), params dtype: P = clipped_inverse(H~, floor) (zeros before).
  noise_std: jax.Array  # shape=(), params dtype: std s of the gradient noise (0 without noise).
  curvature_noise_std: jax.Array  # shape=(), params dtype: std sigma_H of the diagonal noise (0 without noise).
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.
  curvature_missing: jax.Array  # shape=(), bool: a release step without curvature_matrix was refused.


# ----------------------------------------------------------------------------
# Pure functions: the budget split and the preconditioner.
# ----------------------------------------------------------------------------


def precond_budget(
    rho: float | jax.Array,
    *,
    steps: int,
    curvature_frac: float = 0.03,
    refresh_every: int | None = None,
) -> PrecondBudget:
  """Splits the total budget between curvature releases and gradient steps.

  ``K = 1`` without refresh, else ``ceil(steps / refresh_every)`` (releases
  at steps ``0, r, 2r, ... < steps``); ``rho_H = curvature_frac rho / K`` per
  release and ``rho_g = (1 - curvature_frac) rho / steps`` per step, so
  ``K rho_H + steps rho_g = rho`` (to rounding).

  Args:
    rho: total zCDP budget, > 0: a Python number, or a scalar float jax
      array (possibly traced).
    steps: number of gradient steps m >= 1.
    curvature_frac: share of ``rho`` for the curvature releases, in (0, 1).
    refresh_every: release again every this many steps (>= 1), or None.

  Returns:
    :class:`PrecondBudget` (Python floats for a Python ``rho``).

  Raises:
    ValueError, TypeError: a bad argument (named in the message).

  Examples:
    >>> from dpjax.transforms.dp_precond_gd import precond_budget
    >>> b = precond_budget(1.0, steps=10, curvature_frac=0.03, refresh_every=4)
    >>> b.releases, round(b.rho_release, 12), round(b.rho_step, 12)
    (3, 0.01, 0.097)
  """
  if rho is None:
    raise ValueError(
        "no privacy budget given: pass rho=<total zCDP budget> together with steps=<m>."
    )
  rho = _common.budget_value(rho, "rho")
  if steps is None:
    raise ValueError(
        "steps is required: rho is the total budget of steps=<m> gradient steps "
        "(plus the curvature releases); pass steps=<m>."
    )
  steps = _validate.positive_int(steps, "steps")
  q = _validate.float_in_open_interval(curvature_frac, "curvature_frac", 0.0, 1.0)
  if refresh_every is None:
    releases = 1
  else:
    refresh_every = _validate.positive_int(refresh_every, "refresh_every")
    releases = -(-steps // refresh_every)
  rho_curvature = q * rho
  return PrecondBudget(releases, rho_curvature / releases, (rho - rho_curvature) / steps)


class PrecondNoise(NamedTuple):
  """The noise scales of :func:`dp_precond_gd` (floats, or arrays for an array ``rho``)."""

  grad_sensitivity: Any  # f_g L0 / n: L2 sensitivity of the mean gradient.
  curvature_sensitivity: Any  # f_H L1 / n: Frobenius sensitivity of the curvature matrix.
  grad_std: Any  # s = gaussian_sigma(f_g L0 / n, rho_g): the gradient noise of one step.
  curvature_std: Any  # sigma_H = gaussian_sigma(f_H L1 / n, rho_H): one release's noise.


def precond_noise(*, n: int, budget: PrecondBudget, grad_norm_bound: float = 1.0,
                  curvature_norm_bound: float = 0.25,
                  neighbouring: str = "zero-out") -> PrecondNoise:
  """The one place where :func:`dp_precond_gd`'s noise scales are derived (module docstring).

  Sensitivities ``f_g L0 / n`` (the mean gradient, L2) and ``f_H L1 / n``
  (the curvature matrix, Frobenius), with ``f_g = 1, f_H = 1`` under zero-out
  and ``f_g = 2, f_H = sqrt(2)`` under replace-one; each Gaussian std is
  ``accounting.gaussian_sigma(sensitivity, rho)`` at the budget of one step or
  one release (:func:`precond_budget`). Defaults that need the release's
  noise (the eigenvalue floor of :mod:`dpjax.training.auto`) ask here.

  Examples:
    >>> from dpjax.transforms import precond_budget, precond_noise
    >>> s = precond_noise(n=1000, budget=precond_budget(1.0, steps=10, curvature_frac=0.5))
    >>> round(float(s.curvature_std), 6), round(float(s.grad_std), 6)
    (0.00025, 0.003162)
  """
  grad_factor = _neighbouring.vector_factor(neighbouring)  # f_g: 1 or 2.
  curv_factor = _neighbouring.psd_frobenius_factor(neighbouring)  # f_H: 1 or sqrt(2).
  sens_grad = grad_factor * grad_norm_bound / n
  sens_curv = curv_factor * curvature_norm_bound / n
  return PrecondNoise(sens_grad, sens_curv, accounting.gaussian_sigma(sens_grad, budget.rho_step),
                      accounting.gaussian_sigma(sens_curv, budget.rho_release))


def eigenvalue_floor(curvature_std: Any, *, d: int, kappa: float) -> Any:
  """``kappa sqrt(2 d) sigma_H``: the floor below which a released eigenvalue is mostly noise.

  The released matrix's noise is ``sigma_H`` per diagonal entry and
  ``sigma_H / sqrt(2)`` off it, whose spectral norm is about ``sqrt(2 d)
  sigma_H`` (a Wigner matrix); :func:`dp_precond_gd` lifts every eigenvalue
  to ``kappa`` times that.

  Examples:
    >>> from dpjax.transforms import eigenvalue_floor
    >>> eigenvalue_floor(0.5, d=8, kappa=3.0)
    6.0
  """
  return kappa * math.sqrt(2.0 * d) * curvature_std


def clipped_inverse(matrix: jax.Array, floor: jax.typing.ArrayLike) -> jax.Array:
  """``U diag(1 / max(lambda_i, floor)) U^T`` for symmetric ``matrix = U diag(lambda) U^T``.

  The inverse of the matrix with every eigenvalue below ``floor`` lifted to
  ``floor`` (``spectral.modify_eigenvalues(matrix, floor, "clip")``), formed
  from one ``eigh`` without a second inversion. Its eigenvalues lie in
  ``(0, 1 / floor]``.

  Args:
    matrix: symmetric ``[d, d]`` (or ``[..., d, d]``) float matrix.
    floor: the eigenvalue floor, > 0; a scalar or an array broadcasting
      against the batch shape (may be traced; then not value-checked).

  Returns:
    The symmetric positive-definite ``[..., d, d]`` preconditioner.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.transforms.dp_precond_gd import clipped_inverse
    >>> clipped_inverse(jnp.diag(jnp.array([2.0, 0.01])), 0.5).diagonal()
    Array([0.5, 2. ], dtype=float32)
  """
  _validate.as_float_array(matrix, "matrix")
  shape = np.shape(matrix)
  if len(shape) < 2 or shape[-1] != shape[-2]:
    raise ValueError(f"matrix must be square with shape [..., d, d], got {shape}.")
  if _validate.is_concrete(floor):
    f = np.asarray(jax.device_get(floor), np.float64)
    if not np.all(np.isfinite(f)) or np.any(f <= 0):
      raise ValueError(f"floor must be finite and > 0, got {floor!r}.")
  matrix = jnp.asarray(matrix)
  floor = jnp.asarray(floor, matrix.dtype)
  evals, evecs = jnp.linalg.eigh(matrix)
  inv = 1 / jnp.maximum(evals, floor[..., None])
  p = jnp.einsum("...ik,...k,...jk->...ij", evecs, inv, evecs)
  return 0.5 * (p + jnp.swapaxes(p, -1, -2))


# ----------------------------------------------------------------------------
# The transform.
# ----------------------------------------------------------------------------


def dp_precond_gd(
    *,
    n: int,
    rho: float | jax.Array | None = None,
    steps: int | None = None,
    d: int | None = None,
    curvature_frac: float = 0.03,
    kappa: float = 3.0,
    learning_rate: float = 1.0,
    grad_norm_bound: float = 1.0,
    curvature_norm_bound: float = 0.25,
    refresh_every: int | None = None,
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Noisy-curvature-preconditioned DP-GD: one noisy curvature release, then preconditioned DP-GD.

  ``update(g, state, params=None, *, curvature_matrix=None)`` takes the MEAN
  gradient ``g`` over the ``n`` examples and returns
  ``-learning_rate * P (g + N(0, s^2 I))`` with
  ``s = accounting.gaussian_sigma(f_g grad_norm_bound / n, rho_g)``, charging
  ``rho_g``. ``P = clipped_inverse(H~, kappa sqrt(2 d) sigma_H)`` comes from the
  last curvature release ``H~ = sym(H) + sigma_H (Z + Z^T) / 2`` with
  ``sigma_H = accounting.gaussian_sigma(f_H curvature_norm_bound / n, rho_H)``,
  charged ``rho_H`` when drawn. ``f_g = f_H = 1`` for
  ``neighbouring="zero-out"``; ``f_g = 2``, ``f_H = sqrt(2)`` for
  ``"replace-one"`` (module docstring). The floor is about ``kappa`` times the
  operator norm ``sqrt(2 d) sigma_H`` of the noise. The module docstring
  gives the privacy argument; the split is :func:`precond_budget`:
  ``K = 1`` (or ``ceil(steps / refresh_every)``) releases of
  ``rho_H = curvature_frac rho / K`` and ``steps`` gradient steps of
  ``rho_g = (1 - curvature_frac) rho / steps``; the total is ``rho``.

  Release steps are ``count == 0`` and, with ``refresh_every = r``, every
  ``count % r == 0``. On a release step the release comes first and the
  step already uses the new ``P``. ``curvature_matrix`` is the non-private
  mean curvature at the current (public) iterate, ``(d, d)``: ``X^T X / (4n)``
  (= ``glm.logistic_grad_and_curvature(0, x, y, "qu").matrix``) at ``w = 0``,
  or the QU/Hessian matrix at ``w_t`` for a refresh. It is symmetrised as
  ``(H + H^T) / 2`` (a Frobenius contraction, so the sensitivity bound
  stands). The caller must make each example's contribution PSD with
  Frobenius norm ``<= curvature_norm_bound / n`` (``||x_i|| <= 1`` and a
  coefficient in ``[0, 1/4]``); replace-one's ``sqrt(2)`` needs the PSD part.

  * Whether a release code path exists is decided at trace time: with
    ``curvature_matrix=None`` none is traced (the cheap hot loop). A release
    step without a matrix is refused: eagerly ``ValueError``; under
    ``jit``/``vmap``/``scan`` the update is zeros, nothing is charged, the
    count does not move and ``state.curvature_missing`` is set.
  * With a matrix, the release runs under ``lax.cond`` on the count, so a
    matrix passed on a non-release step is ignored (no charge, ``P``
    unchanged): a ``scan`` may pass it on every step. The ``eigh`` then runs
    only on release steps, but computing the matrix is the caller's cost, and
    under ``vmap`` with a batched count both branches run; so pass it only
    on release steps where possible.
  * Step ``steps + 1`` is refused like :func:`dpjax.transforms.dp_gd`:
    eagerly ``ValueError``; traced: zeros, no charge (no release either),
    ``state.budget_exhausted`` set.

  The budget is a total (the curvature share is a share of the whole run), so
  there is no ``rho_per_step`` form. ``rho`` is a Python number (validated
  eagerly, noise scales and charges computed exactly on the host) or a scalar
  float jax array, possibly traced, to compile one program for many privacy
  levels (build the transform inside ``jax.vmap`` over ``rho``); ``key`` may
  be traced too. Noise keys are split off the state key at every update
  (three ways, whether or not a release happens).

  Args:
    n: number of examples (public).
    rho: total zCDP budget of the run (releases and steps).
    steps: number of gradient steps m >= 1.
    d: optional dimension; if given, ``params`` and the gradient must have
      shape ``(d,)`` (otherwise ``d`` is read from them).
    curvature_frac: share of ``rho`` spent on curvature releases, in (0, 1);
      0.03 is the default of :mod:`dpjax.training.auto`.
    kappa: eigen-clip floor multiplier, > 0 (3; 6 at large epsilon).
    learning_rate: step size eta > 0 (1: a Newton-like step on ``P``).
    grad_norm_bound: L0, the bound on each example's gradient norm (1).
    curvature_norm_bound: L1, the bound on the Frobenius norm of each
      example's curvature term (1/4 for logistic loss with ``||x|| <= 1``).
    refresh_every: re-release the curvature every this many steps (>= 1), or
      None for one release at step 0.
    key: int seed or typed PRNG key (``jax.random.key``); required.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"`` (gradient
      noise x 2, curvature noise and floor x sqrt(2)).
    disable_noise_for_testing: if True, adds no noise (gradient or
      curvature) and the output is NOT private; the accountant is still
      charged and the floor keeps its nominal value
      ``kappa sqrt(2 d) sigma_H``, so the noiseless run clips exactly like
      the private one. For tests only.
    unsafe_float_noise: if True, draws the noise as ``jax.random.normal`` in
      floating point instead of :mod:`dpjax.mechanisms.noise`'s exact sampler: NOT
      private (Mironov 2012); for measuring what exactness costs. Issues
      :class:`dpjax.PrivacyLeakWarning`.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose state is a
    :class:`DPPrecondGDState`.

  Raises:
    ValueError, TypeError: eagerly, at construction, for a bad budget, ``n``,
      ``d``, fraction, ``kappa``, step size, bound, ``refresh_every``,
      ``neighbouring``, key or flag; in ``update``, for a bad gradient or matrix, a release step
      without ``curvature_matrix`` or a step past ``steps`` (eager calls).

  Examples:
    >>> import jax, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.problem import glm
    >>> from dpjax.transforms.dp_precond_gd import dp_precond_gd
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> w = jax.numpy.zeros(5)
    >>> h0 = glm.logistic_grad_and_curvature(w, x, y, "qu").matrix  # X^T X / (4n)
    >>> tx = dp_precond_gd(n=1000, rho=0.5, steps=10, key=0)
    >>> state = tx.init(w)
    >>> grad = lambda w: glm.logistic_loss_and_grad(w, x, y)[1]
    >>> first = jax.jit(lambda w, s, h: tx.update(grad(w), s, w, curvature_matrix=h))
    >>> step = jax.jit(lambda w, s: tx.update(grad(w), s, w))
    >>> u, state = first(w, state, h0)  # step 0: release H~, then a step
    >>> w = optax.apply_updates(w, u)
    >>> for _ in range(9):
    ...   u, state = step(w, state)
    ...   w = optax.apply_updates(w, u)
    >>> round(accounting.spent_rho(state.accountant), 12), int(state.count), int(state.releases)
    (0.5, 10, 1)
    >>> bool(glm.logistic_loss(w, x, y) < glm.logistic_loss(0 * w, x, y))
    True
  """
  n = _validate.positive_int(n, "n")
  budget = precond_budget(
      rho, steps=steps, curvature_frac=curvature_frac, refresh_every=refresh_every
  )
  steps = _validate.positive_int(steps, "steps")
  if refresh_every is not None:
    refresh_every = _validate.positive_int(refresh_every, "refresh_every")
  d = None if d is None else _validate.positive_int(d, "d")
  kappa = _validate.positive_float(kappa, "kappa")
  learning_rate = _validate.positive_float(learning_rate, "learning_rate")
  grad_norm_bound = _validate.positive_float(grad_norm_bound, "grad_norm_bound")
  curvature_norm_bound = _validate.positive_float(curvature_norm_bound, "curvature_norm_bound")
  _neighbouring.vector_factor(neighbouring)  # the relation's check, before any other work
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  exact = _common.exact_noise(unsafe_float_noise, _NAME)

  scales = precond_noise(n=n, budget=budget, grad_norm_bound=grad_norm_bound,
                         curvature_norm_bound=curvature_norm_bound, neighbouring=neighbouring)
  sens_grad, sens_curv = scales.grad_sensitivity, scales.curvature_sensitivity
  sigma_grad, sigma_curv = scales.grad_std, scales.curvature_std
  noise_on = 0.0 if no_noise else 1.0

  def check_dim(v: jax.Array, name: str) -> None:
    if d is not None and v.shape[0] != d:
      raise ValueError(
          f"{name} has shape {v.shape} but the transform was built with d={d}; "
          f"pass d={v.shape[0]} or a ({d},) array."
      )

  def init_fn(params: jax.Array) -> DPPrecondGDState:
    params = _common.check_params(params)
    check_dim(params, "params")
    dt = params.dtype
    dim = params.shape[0]
    return DPPrecondGDState(
        count=jnp.zeros((), jnp.int32),
        key=key,
        accountant=accounting.init_accountant(),
        releases=jnp.zeros((), jnp.int32),
        released_curvature=jnp.zeros((dim, dim), dt),
        eigenvalue_floor=jnp.zeros((), dt),
        preconditioner=jnp.zeros((dim, dim), dt),
        noise_std=jnp.asarray(noise_on * sigma_grad, dt),
        curvature_noise_std=jnp.asarray(noise_on * sigma_curv, dt),
        budget_exhausted=jnp.zeros((), bool),
        curvature_missing=jnp.zeros((), bool),
    )

  def is_release_step(count: jax.Array) -> jax.Array:
    if refresh_every is None:
      return count == 0
    return count % refresh_every == 0

  def update_fn(updates, state, params=None, *, curvature_matrix=None, **extra_args):
    del params, extra_args  # The curvature is evaluated by the caller.
    if not isinstance(state, DPPrecondGDState):
      raise TypeError(
          f"state must be a DPPrecondGDState from init(), got {type(state).__name__}."
      )
    g = _common.check_vector(updates, "updates")
    check_dim(g, "updates")
    dim, dt = g.shape[0], g.dtype
    if state.preconditioner.shape != (dim, dim):
      raise ValueError(
          f"updates has shape {g.shape} but the state was built for "
          f"d={state.preconditioner.shape[0]}."
      )
    ok = _common.gate(state.count, steps, _NAME)
    release_now = is_release_step(state.count)
    new_key, k_grad, k_curv = jax.random.split(state.key, 3)
    floor = eigenvalue_floor(sigma_curv, d=dim, kappa=kappa)  # public: n, d, rho_H, kappa, L1.
    acc = state.accountant
    released, precond = state.released_curvature.astype(dt), state.preconditioner.astype(dt)
    releases, last_floor = state.releases, state.eigenvalue_floor.astype(dt)

    if curvature_matrix is None:
      # No release path is traced; a release step cannot run.
      if _validate.is_concrete(state.count) and bool(ok) and bool(release_now):
        raise ValueError(
            f"{_NAME}: step {int(state.count)} is a curvature release step ("
            + ("step 0" if refresh_every is None
               else f"a multiple of refresh_every={refresh_every}")
            + ") but curvature_matrix is None; pass the mean curvature at the current "
            "iterate: tx.update(grad, state, params, curvature_matrix=H) with H of shape "
            f"({dim}, {dim}) (X^T X / (4n) at w = 0 for the logistic loss)."
        )
      missing = jnp.logical_and(ok, release_now)
      step_ok = jnp.logical_and(ok, jnp.logical_not(release_now))
    else:
      _validate.as_float_array(curvature_matrix, "curvature_matrix", ndim=2)
      if np.shape(curvature_matrix) != (dim, dim):
        raise ValueError(
            f"curvature_matrix has shape {np.shape(curvature_matrix)} but must be "
            f"({dim}, {dim}) to match the gradient."
        )
      h = jnp.asarray(curvature_matrix, dt)
      do_release = jnp.logical_and(ok, release_now)

      def release(_):
        # Gaussian mechanism on vec(sym(H)): sensitivity f_H L1/n, budget rho_H.
        # sym(H + sigma_H Z) = sym(H) + sigma_H (Z + Z^T) / 2. The barrier
        # materialises H + sigma_H Z once: inside a fusion XLA may recompute an
        # element for (i, j) and (j, i) with different roundings (FMA or not),
        # which left the release a few ulp off symmetric.
        noisy = noise.add_gaussian_symmetric(  # exactly symmetric.
            k_curv, h, sensitivity=sens_curv, noise_std=noise_on * sigma_curv, exact=exact)
        f = jnp.asarray(floor, dt)
        # Post-processing: P from the released matrix and public constants only.
        return noisy, clipped_inverse(noisy, f), f

      def keep(_):
        return released, precond, last_floor

      released, precond, last_floor = jax.lax.cond(do_release, release, keep, None)
      charged = accounting.charge(acc, budget.rho_release,  # Where H~ is drawn.
                                  slack=noise_on * noise.tv_slack(h) if exact else 0.0)
      acc = _common.select(do_release, charged, acc)
      releases = jnp.where(do_release, optax.safe_increment(releases), releases)
      missing = jnp.zeros((), bool)
      step_ok = ok

    # Noisy gradient: sensitivity f_g L0/n, budget rho_g; P and eta are post-processing.
    noisy_g = noise.add_gaussian(k_grad, g, sensitivity=sens_grad,
                                 noise_std=noise_on * sigma_grad, exact=exact)
    out = -learning_rate * (precond @ noisy_g)
    out = jnp.where(step_ok, out, jnp.zeros_like(g))
    charged = accounting.charge(acc, budget.rho_step,  # Where the gradient noise is drawn.
                                slack=noise_on * noise.tv_slack(g) if exact else 0.0)
    acc = _common.select(step_ok, charged, acc)
    new_state = DPPrecondGDState(
        count=jnp.where(step_ok, optax.safe_increment(state.count), state.count),
        key=new_key,
        accountant=acc,
        releases=releases,
        released_curvature=released.astype(state.released_curvature.dtype),
        eigenvalue_floor=last_floor.astype(state.eigenvalue_floor.dtype),
        preconditioner=precond.astype(state.preconditioner.dtype),
        noise_std=state.noise_std,
        curvature_noise_std=state.curvature_noise_std,
        budget_exhausted=jnp.logical_or(state.budget_exhausted, jnp.logical_not(ok)),
        curvature_missing=jnp.logical_or(state.curvature_missing, missing),
    )
    return out, new_state

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
