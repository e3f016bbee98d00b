"""Minibatch double-noise Newton (the stochastic Algorithm 3) as an optax transform.

Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv 2305.13209), the
minibatch variant of Algorithm 3 compared with DP-SGD in their Fig. 4
(Definition 5.4 and Sec. 5.1 for the SOI modification and the sensitivity;
the authors' reference code ``update_rule_stochastic`` for the sampling).
Logistic regression on ``x [n, d]`` with ``||x_i|| <= 1`` and ``y_i`` in {-1, +1}. One step at ``w_t``:

1. Two INDEPENDENT Poisson samples (:mod:`dpjax.mechanisms.sampling`): ``S_g`` with rate
   ``q_g = B_g / n`` and ``S_H`` with rate ``q_H = B_H / n``.
2. Noisy gradient, normalised by the expected size ``B_g`` (public):
   ``g~ = (1/B_g) [sum_{i in S_g} clip(grad f_i, C) + N(0, z_g^2 C^2 I)]``.
3. Curvature ``H_S = (1/B_H) sum_{i in S_H} c(<x_i, w_t>) x_i x_i^T``
   (``c`` the Hessian or the quadratic-upper-bound coefficient, ``<= 1/4``).
4. ``w_{t+1} = w_t - Psi_lam(H_S)^{-1} g~ + N(0, (||g~|| s z_H)^2 I)``, with
   ``Psi_lam`` the SOI modification (Definition 5.4) and the sensitivity factor
   ``s = direction_sensitivity(lam, n=B_H)`` (the reference code's):

   * add: ``s = 1 / (4 B_H lam^2 + lam)``;
   * clip: ``lam_c = max(lam, 4 L1 / B_H)`` (``= 1/B_H`` for ``L1 = 1/4``) is
     used both in ``Psi`` and in ``s = 1 / (4 B_H lam_c^2 - lam_c)``.

Privacy argument (add/remove neighbours; ``n``, ``B_g``, ``B_H``, ``lam`` and
the multipliers are public):

* Every sampled row is first scaled to norm ``<= 1`` (a no-op under the data
  contract, so that the bounds below hold for any input, also under ``jit``
  where the data cannot be checked) and masked slots of the capped sample are
  zeroed, so they contribute exactly nothing.
* Gradient. Each clipped per-example gradient has norm ``<= C``
  (``grad_norm_bound``), so ``sum_{S_g} clip(grad f_i, C)`` changes by at most
  ``C`` when one example is added to or removed from the sample. Adding
  ``N(0, z_g^2 C^2 I)`` is the Poisson-subsampled Gaussian mechanism with rate
  ``q_g`` and noise multiplier ``z_g``; dividing by ``B_g`` is post-processing.
* Direction. Given the released ``g~`` (and ``w_t``), the query
  ``S_H -> Psi_lam(H_S)^{-1} g~`` changes, when one example joins or leaves
  ``S_H``, by ``||g~|| s`` at most: ``H_S`` moves by a rank-1 PSD term
  ``c x x^T / B_H`` of operator norm ``<= L1 / B_H`` (``L1 = 1/4``), and
  Algorithm 3's bound on ``||Psi_lam(A)^{-1} - Psi_lam(A')^{-1}||_op`` (Sherman-
  Morrison for add, the paper's constant for clip) with ``n`` replaced by
  ``B_H`` gives ``s``. The noise std is ``z_H`` times this sensitivity, so it
  is again a Poisson-subsampled Gaussian mechanism with rate ``q_H`` and
  multiplier ``z_H``: the sampled Gaussian analysis (Mironov, Talwar, Zhang
  2019) holds for any query of the sample with bounded L2 sensitivity, and
  the sensitivity bound here holds for every sample ``S_H`` and every ``g~``.
* Each step is therefore two subsampled Gaussian mechanisms, chosen
  adaptively on the previous outputs; RDP composes additively under adaptive
  composition. Each step charges
  ``subsampled_gaussian_rdp(q_g, z_g) + subsampled_gaussian_rdp(q_H, z_H)`` to
  the accountant's RDP curve (:func:`dpjax.accounting.charge_rdp`).
* The samples are capped (static shapes): :func:`dpjax.mechanisms.sampling.sample` keeps
  the first ``cap`` included examples. The capped and the uncapped samplers
  differ in total variation by at most ``P(Binomial(n+1, q) > cap)`` per
  sample, which is charged as the accountant's ``truncation`` slack (both
  samples, every step) and enters the final ``delta``.

With ``epsilon, delta, steps`` a common multiplier ``z_g = z_H = z`` (or
``z_H = noise_ratio_hess * z_g``) is calibrated by
:func:`dpjax.accounting.calibrate_noise_multiplier` to spend ``epsilon`` at
``delta`` minus the truncation slack's share, so the accountant reports at
most ``epsilon`` after ``steps`` steps.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _common
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.problem import glm
from dpjax.problem import minibatch
from dpjax.mechanisms import sampling
from dpjax.problem import spectral
from dpjax.transforms.newton_calibration import (  # noqa: F401  (minibatch_*: re-exported)
    _calibrate,
    _check_budget_args,
    _check_sizes,
    _overflow_target,
    _samplers,
    direction_sensitivity,
    minibatch_min_eigenvalue,
    minibatch_noise_multipliers,
)

__all__ = [
    "DPNewtonMinibatchState",
    "dp_newton_minibatch",
    "dp_newton_minibatch_step",
    "minibatch_min_eigenvalue",
    "minibatch_noise_multipliers",
    "sampled_grad_and_curvature",
]

# The largest value the logistic SOI coefficient takes (Hessian and QU, at margin 0).
_LOGISTIC_L1 = 0.25


class DPNewtonMinibatchState(NamedTuple):
  """State of :func:`dp_newton_minibatch`; ``optax.tree.get(state, "rho")`` finds ``accountant.rho``."""

  count: jax.Array  # shape=(), int32: private steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # RDP curve and truncation slack spent so far.
  min_eigenvalue: jax.Array  # shape=(), params dtype: the lambda used (lam_c for clip).
  grad_noise_std: jax.Array  # shape=(), params dtype: per-coordinate std z_g C / B_g of g~'s noise.
  direction_noise_std: jax.Array  # shape=(), params dtype: ||g~|| s z_H at the last step.
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


# ----------------------------------------------------------------------------
# Pure functions.
# ----------------------------------------------------------------------------


def _clip_rows(xs: jax.Array) -> jax.Array:
  """Scales each row to norm <= 1 (exactly a no-op on rows of norm <= 1)."""
  norms = jnp.linalg.norm(xs, axis=1)
  scale = jnp.where(norms > 1, 1 / jnp.where(norms > 1, norms, 1), 1)
  return xs * scale[:, None]


def _gather(x: jax.Array, y: jax.Array, indices: jax.Array, mask: jax.Array):
  """The sampled rows, masked rows set to exactly 0, every row of norm <= 1."""
  m = jnp.asarray(mask).astype(bool)
  xs = jnp.where(m[:, None], jnp.take(x, indices, axis=0), 0)
  ys = jnp.where(m, jnp.take(y, indices, axis=0), 1)
  return _clip_rows(xs), ys


def sampled_grad_and_curvature(
    params: jax.Array,
    x: jax.Array,
    y: jax.Array,
    grad_sample: tuple[jax.Array, jax.Array],
    curvature_sample: tuple[jax.Array, jax.Array],
    *,
    batch_size: float,
    curvature_batch_size: float,
    grad_norm_bound: float = 1.0,
    curvature: str = "hessian",
) -> tuple[jax.Array, jax.Array]:
  """The noiseless minibatch gradient and SOI of one step.

  ``g = (1/B_g) sum_{S_g} clip(grad f_i, C)`` and
  ``H_S = (1/B_H) sum_{S_H} c(<x_i, w>) x_i x_i^T``, each normalised by the
  public expected size, never by the realised count. A sample is
  ``(indices [cap], mask [cap])`` as :func:`dpjax.mechanisms.sampling.sample` returns it;
  masked slots are zeroed before any arithmetic, so they contribute exactly
  nothing whatever row their index points at. Rows are scaled to norm
  ``<= 1`` (a no-op under the data contract). Cost ``O(cap d^2)``; nothing
  ``[n, d, d]`` or ``[cap, d, d]`` is formed.

  Args:
    params: ``w``, shape (d,).
    x: features ``[n, d]``.
    y: labels ``[n]`` in {-1, +1}.
    grad_sample: ``(indices, mask)`` of the gradient sample.
    curvature_sample: ``(indices, mask)`` of the curvature sample.
    batch_size: ``B_g``, the expected gradient sample size.
    curvature_batch_size: ``B_H``, the expected curvature sample size.
    grad_norm_bound: the per-example gradient clip norm ``C``.
    curvature: ``"hessian"`` or ``"qu"``.

  Returns:
    ``(g [d], H_S [d, d])`` in the dtype of ``x`` and ``params``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from dpjax.transforms import sampled_grad_and_curvature
    >>> x = jnp.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]); y = jnp.array([1.0, -1.0, 1.0])
    >>> sample = (jnp.array([0, 1, 0]), jnp.array([True, True, False]))
    >>> g, h = sampled_grad_and_curvature(jnp.zeros(2), x, y, sample, sample,
    ...                                   batch_size=2, curvature_batch_size=2)
    >>> g.tolist(), h.tolist()
    ([-0.25, 0.25], [[0.125, 0.0], [0.0, 0.125]])
  """
  coefficient = {"hessian": glm.hessian_coefficient, "qu": glm.qu_coefficient}[
      _validate.choice(curvature, "curvature", glm.CURVATURES)
  ]
  xg, yg = _gather(x, y, *grad_sample)
  g_sum = minibatch.clipped_sum(params, (xg, yg), bound=grad_norm_bound, loss="logistic")
  xh, _ = _gather(x, y, *curvature_sample)
  c = coefficient(xh @ params)
  h = (xh * c[:, None]).T @ xh
  h = 0.5 * (h + h.T)
  return g_sum / batch_size, h / curvature_batch_size


def dp_newton_minibatch_step(
    params: jax.Array,
    key: jax.Array,
    data: tuple[jax.typing.ArrayLike, jax.typing.ArrayLike],
    min_eigenvalue: jax.typing.ArrayLike,
    grad_noise_std: jax.typing.ArrayLike,
    sensitivity_factor: jax.typing.ArrayLike,
    noise_multiplier_hess: jax.typing.ArrayLike,
    *,
    grad_sampler: sampling.PoissonSampler,
    curvature_sampler: sampling.PoissonSampler,
    batch_size: float,
    curvature_batch_size: float,
    grad_norm_bound: float = 1.0,
    curvature: str = "hessian",
    modification: str = "clip",
    exact: bool = True,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """One minibatch double-noise Newton step, with traceable lambda and noise scales.

  The body of :func:`dp_newton_minibatch`'s ``update`` (which calls it, so the
  two are the same computation bit for bit), steps 1-4 of the module
  docstring (Ganesh et al., NeurIPS 2023, Sec. 6): split
  ``new_key, k_sg, k_sh, k_ng, k_nd = jax.random.split(key, 5)``,
  draw ``S_g`` and ``S_H`` from the two samplers (``k_sg``, ``k_sh``), form ``g`` and ``H_S``
  (:func:`sampled_grad_and_curvature`), release
  ``g~ = g + N(0, grad_noise_std^2 I)`` (sensitivity ``C / B_g``), solve
  ``Psi_lam(H_S)^{-1} g~`` (:func:`dpjax.problem.spectral.modified_solve`) and
  release it per unit ``||g~||`` with sensitivity ``s = sensitivity_factor``
  and std ``s z_H``, both through :func:`dpjax.mechanisms.noise.add_gaussian`.
  Returns the update ``-(Psi_lam(H_S)^{-1} g~ + N(0, (||g~|| s z_H)^2 I))``.

  ``min_eigenvalue``, ``grad_noise_std``, ``sensitivity_factor`` and
  ``noise_multiplier_hess`` may be Python numbers or scalar arrays, traced
  ones included, so that one compiled program can run a grid of lambdas and
  budgets (``jax.vmap``) or a traced number of steps
  (``jax.lax.fori_loop``); the options after ``*`` are static. Concrete noise
  scales are planned on the host, traced ones in the graph
  (:func:`dpjax.mechanisms.noise.add_gaussian`).

  Privacy (add/remove neighbours, module docstring): with
  ``grad_noise_std = z_g C / B_g`` the gradient is the Poisson-subsampled
  Gaussian mechanism of rate ``q_g`` and multiplier ``z_g``; given ``g~``,
  the direction changes by at most ``||g~|| s`` when one example joins or
  leaves ``S_H``, for ``s = direction_sensitivity(lam, n=B_H, ...)``
  (:func:`dpjax.transforms.direction_sensitivity`) at the lambda used
  (``lam_c`` for clip, :func:`minibatch_min_eigenvalue`), so it is the
  subsampled Gaussian of rate ``q_H`` and multiplier ``z_H``. The guarantee
  holds only for those values: the function cannot check traced ones.
  THIS FUNCTION CHARGES NOTHING: the caller must account every step
  (``subsampled_gaussian_rdp(q_g, z_g) + subsampled_gaussian_rdp(q_H, z_H)``,
  both samplers' ``overflow_prob`` and the exact sampler's TV slack of
  ``2 d`` coordinates), as :func:`dp_newton_minibatch` does with
  :func:`dpjax.accounting.charge_rdp` (or charge ``T`` steps at once, RDP
  composing additively).

  Args:
    params: ``w_t``, shape (d,).
    key: a typed PRNG key, used once (pass on the returned one).
    data: ``(x [n, d], y [n])``, all ``n`` examples (rows of norm ``<= 1``,
      labels in {-1, +1}; rows are scaled into the ball in any case).
    min_eigenvalue: the lambda used in ``Psi_lam`` (``lam_c`` for clip).
    grad_noise_std: ``z_g C / B_g``, the per-coordinate std of ``g~``'s noise.
    sensitivity_factor: ``s``, the direction's sensitivity per unit ``||g~||``.
    noise_multiplier_hess: ``z_H``; the direction's std per unit ``||g~||``
      is ``s z_H``.
    grad_sampler: the Poisson sampler of ``S_g``
      (:func:`dpjax.mechanisms.sampling.poisson_sampler`).
    curvature_sampler: the Poisson sampler of ``S_H`` (over the same ``n``).
    batch_size: ``B_g``, the public normaliser: ``grad_sampler``'s expected size.
    curvature_batch_size: ``B_H``: ``curvature_sampler``'s expected size.
    grad_norm_bound: ``C > 0``, the per-example gradient clip norm.
    curvature: ``"hessian"`` or ``"qu"``.
    modification: ``"clip"`` or ``"add"`` (:mod:`dpjax.problem.spectral`).
    exact: ``False`` draws floating-point normals: NOT private (Mironov 2012).

  Returns:
    ``(updates, new_key, direction_noise_std)``: the update (add it to
    ``params``), the key for the next step, and ``||g~|| s z_H``, the std of
    this step's direction noise.

  Raises:
    TypeError, ValueError: a bad sampler, batch size (not its sampler's
      expected size), ``grad_norm_bound``, ``curvature``, ``modification`` or
      ``exact``, or ``params``/``data`` of the wrong shape; a concrete noise
      scale that :func:`dpjax.mechanisms.noise.add_gaussian` rejects.

  Examples:
    >>> import jax, jax.numpy as jnp
    >>> from dpjax import data
    >>> from dpjax.mechanisms import sampling
    >>> from dpjax.transforms import dp_newton_minibatch_step
    >>> x, y = data.synthetic(0, n=1000, d=5)
    >>> s = sampling.poisson_sampler(1000, batch_size=100)
    >>> step = lambda lam: dp_newton_minibatch_step(
    ...     jnp.zeros(5), jax.random.key(0), (x, y), lam, 0.02, 1 / (400 * lam**2 - lam), 1.5,
    ...     grad_sampler=s, curvature_sampler=s, batch_size=100, curvature_batch_size=100)[0]
    >>> jax.jit(jax.vmap(step))(jnp.array([0.02, 0.1])).shape
    (2, 5)
  """
  _check_step(params, data, grad_sampler, curvature_sampler, batch_size, curvature_batch_size)
  _validate.positive_float(grad_norm_bound, "grad_norm_bound")
  _validate.choice(modification, "modification", spectral.MODES)
  _common.check_flag(exact, "exact")
  w = params
  dt = w.dtype
  x, y = (jnp.asarray(a) for a in data)
  new_key, k_sg, k_sh, k_ng, k_nd = jax.random.split(key, 5)
  grad_sample = sampling.sample(grad_sampler, k_sg)
  curv_sample = sampling.sample(curvature_sampler, k_sh)
  g, h = sampled_grad_and_curvature(
      w, x.astype(dt), y.astype(dt), grad_sample, curv_sample, batch_size=batch_size,
      curvature_batch_size=curvature_batch_size, grad_norm_bound=grad_norm_bound,
      curvature=curvature,
  )
  # 1. Noisy gradient: the clipped sum (sensitivity C) + N(0, z_g^2 C^2), over B_g.
  g_noisy = noise.add_gaussian(k_ng, g, sensitivity=grad_norm_bound / batch_size,
                               noise_std=grad_noise_std, exact=exact)
  # 2. Noisy direction: sensitivity ||g~|| s given g~, std z_H times it.
  unit_dir_std = sensitivity_factor * noise_multiplier_hess  # per unit ||g~||.
  direction = spectral.modified_solve(h, g_noisy, jnp.asarray(min_eigenvalue, dt), modification)
  g_norm = jnp.linalg.norm(g_noisy)
  dir_std = g_norm * jnp.asarray(unit_dir_std, dt)
  unit = jnp.where(g_norm > 0, g_norm, 1.0)  # released per unit ||g~||: post-processing back
  noisy_direction = g_norm * noise.add_gaussian(k_nd, direction / unit,
                                                sensitivity=sensitivity_factor,
                                                noise_std=unit_dir_std, exact=exact)
  return -noisy_direction, new_key, dir_std


def _check_step(params, data, grad_sampler, curvature_sampler, batch_size, curvature_batch_size):
  """The static checks of :func:`dp_newton_minibatch_step` (shapes and samplers only)."""
  for name, sampler, size_name, b in (
      ("grad_sampler", grad_sampler, "batch_size", batch_size),
      ("curvature_sampler", curvature_sampler, "curvature_batch_size", curvature_batch_size)):
    if not isinstance(sampler, sampling.PoissonSampler):
      raise TypeError(f"{name} must be a PoissonSampler from dpjax.mechanisms.sampling."
                      f"poisson_sampler, got {type(sampler).__name__}.")
    b = _validate.positive_float(b, size_name)
    if not math.isclose(b, sampler.expected_size, rel_tol=1e-12):
      raise ValueError(f"{size_name}={b!r} is not the expected size {sampler.expected_size!r} "
                       f"of {name}: the sensitivity and the normaliser use that public size.")
  if grad_sampler.n != curvature_sampler.n:
    raise ValueError(f"grad_sampler has n={grad_sampler.n} but curvature_sampler "
                     f"n={curvature_sampler.n}: both sample the same n examples.")
  if np.ndim(params) != 1:
    raise ValueError(f"params must be a vector (d,), got shape {np.shape(params)}.")
  if not (isinstance(data, (tuple, list)) and len(data) == 2):
    raise TypeError(f"data must be a pair (x [n, d], y [n]), got {type(data).__name__}.")
  n, d = grad_sampler.n, np.shape(params)[0]
  if np.shape(data[0]) != (n, d) or np.shape(data[1]) != (n,):
    raise ValueError(f"data has x of shape {np.shape(data[0])} and y of shape "
                     f"{np.shape(data[1])}; they must be ({n}, {d}) and ({n},) for the "
                     f"samplers' n={n} and params of d={d}.")


# ----------------------------------------------------------------------------
# The transform.
# ----------------------------------------------------------------------------


def dp_newton_minibatch(
    *,
    n: int,
    batch_size: int,
    curvature_batch_size: int,
    min_eigenvalue: float,
    key: int | jax.Array,
    noise_multiplier_grad: float | None = None,
    noise_multiplier_hess: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    steps: int | None = None,
    noise_ratio_hess: float = 1.0,
    curvature: str = "hessian",
    modification: str = "clip",
    grad_norm_bound: float = 1.0,
    curvature_norm_bound: float = 0.25,
    grad_cap: int | None = None,
    curvature_cap: int | None = None,
    overflow_prob: float = 1e-15,
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Minibatch double-noise Newton for logistic regression (Ganesh et al. 2023, Sec. 6, Fig. 4).

  ``update(None, state, params, *, data=(x, y))`` draws the two Poisson
  samples from ``state.key``, and returns
  ``-(Psi_lam(H_S)^{-1} g~ + N(0, (||g~|| s z_H)^2 I))``; add it to
  ``params``. The module docstring states the algorithm and its privacy
  argument. Noise scales: ``g~`` gets per-coordinate std ``z_g C / B_g``
  (``state.grad_noise_std``), the direction ``||g~|| s z_H``
  (``state.direction_noise_std``), with
  ``s = direction_sensitivity(lam, n=B_H, ...)`` and ``lam`` from
  :func:`minibatch_min_eigenvalue`. Every step charges both subsampled
  Gaussian mechanisms and both truncation slacks to ``state.accountant``;
  read the spend with ``accounting.epsilon_spent(state.accountant, delta)``.
  The step itself is :func:`dp_newton_minibatch_step`, which a caller that
  accounts for itself can run with traced lambda and noise scales.

  Budget: exactly one of

  * ``noise_multiplier_grad``, ``noise_multiplier_hess`` (``z_g``, ``z_H``),
    optionally with ``steps`` to enforce a step limit; or
  * ``epsilon``, ``delta``, ``steps``: ``(z_g, z_H)`` from
    :func:`minibatch_noise_multipliers` (a common ``z``, or
    ``z_H = noise_ratio_hess * z_g``), so that the accountant reports
    ``epsilon`` at ``delta`` after ``steps`` steps.

  Past ``steps`` an eager call raises ``ValueError``; a traced one returns
  zeros, charges nothing and sets ``state.budget_exhausted``. Runs in-graph
  (``jit``, ``vmap`` over a traced ``key``, ``lax.scan``).

  Args:
    n: number of examples (public); ``data`` must have ``n`` rows.
    batch_size: ``B_g``, expected gradient sample size, ``1 <= B_g <= n``
      (sampling rate ``q_g = B_g / n``).
    curvature_batch_size: ``B_H``, expected curvature sample size,
      ``1 <= B_H <= n``.
    min_eigenvalue: the fixed ``lam > 0`` of ``Psi_lam`` (required; a public
      hyper-parameter). For clip it is raised to ``4 L1 / B_H`` if smaller
      (the reference code's floor); ``state.min_eigenvalue`` holds the value used.
    key: int seed or typed PRNG key; required.
    noise_multiplier_grad: ``z_g > 0``.
    noise_multiplier_hess: ``z_H > 0``.
    epsilon: target epsilon (> 0), with ``delta`` and ``steps``.
    delta: target delta in (0, 1).
    steps: number of steps T.
    noise_ratio_hess: ``z_H / z_g`` when calibrating from ``epsilon`` (> 0).
    curvature: ``"hessian"`` or ``"qu"``.
    modification: ``"clip"`` or ``"add"`` (:mod:`dpjax.problem.spectral`).
    grad_norm_bound: ``C``, the per-example gradient clip norm (> 0; 1 makes
      clipping a no-op under the data contract).
    curvature_norm_bound: L1, at least 1/4 (the logistic SOI coefficient
      reaches 1/4 at margin 0, so a smaller bound would not hold).
    grad_cap: static size of the gradient sample (default: the sampler's,
      overflow probability ``<= overflow_prob``).
    curvature_cap: the same for the curvature sample.
    overflow_prob: target per-sample overflow probability for default caps;
      with ``epsilon`` it is lowered to ``1e-3 delta / (2 (1 + e^epsilon) steps)``
      if larger, so the truncation slack takes at most 0.1% of ``delta``.
    disable_noise_for_testing: if True, no noise is added (the samples are
      still drawn and the accountant still charged); the output is NOT
      private. For tests only.
    unsafe_float_noise: if True, draws the noise as ``jax.random.normal`` in
      floating point instead of :mod:`dpjax.mechanisms.noise`'s exact sampler: NOT
      private (Mironov 2012); for measuring what exactness costs. Issues
      :class:`dpjax.PrivacyLeakWarning`.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose state is a
    :class:`DPNewtonMinibatchState`.

  Raises:
    ValueError, TypeError: eagerly, at construction, for a bad size, cap,
      budget, lambda, bound, curvature, modification, key or flag; in
      ``update`` for missing or mis-shaped data (and, for concrete data,
      labels outside {-1, +1} or rows of norm > 1).

  Examples:
    >>> import jax, jax.numpy as jnp, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.problem import glm
    >>> from dpjax.transforms import dp_newton_minibatch
    >>> x, y = data.synthetic(0, n=2000, d=5)
    >>> tx = dp_newton_minibatch(n=2000, batch_size=200, curvature_batch_size=200,
    ...                          epsilon=2.0, delta=2000**-2, steps=20,
    ...                          min_eigenvalue=0.02, key=0)
    >>> w = jnp.zeros(5)
    >>> state = tx.init(w)
    >>> @jax.jit
    ... def step(w, state):
    ...   u, state = tx.update(None, state, w, data=(x, y))
    ...   return optax.apply_updates(w, u), state
    >>> for _ in range(20):
    ...   w, state = step(w, state)
    >>> round(accounting.epsilon_spent(state.accountant, 2000**-2), 2), int(state.count)
    (2.0, 20)
    >>> bool(glm.logistic_loss(w, x, y) < glm.logistic_loss(0 * w, x, y))
    True
  """
  n, b_g, b_h = _check_sizes(n, batch_size, curvature_batch_size)
  by_noise = _check_budget_args(
      noise_multiplier_grad, noise_multiplier_hess, epsilon, delta, steps
  )
  steps = None if steps is None else _validate.positive_int(steps, "steps")
  curvature = _validate.choice(curvature, "curvature", glm.CURVATURES)
  modification = _validate.choice(modification, "modification", spectral.MODES)
  grad_norm_bound = _validate.positive_float(grad_norm_bound, "grad_norm_bound")
  curvature_norm_bound = _validate.positive_float(curvature_norm_bound, "curvature_norm_bound")
  if curvature_norm_bound < _LOGISTIC_L1:
    raise ValueError(
        f"curvature_norm_bound={curvature_norm_bound!r} is below 1/4: the logistic SOI "
        "coefficient reaches 1/4 at margin 0, so with rows of norm <= 1 each example's SOI "
        "term has operator norm up to 1/4. Pass curvature_norm_bound >= 0.25 (default 0.25)."
    )
  lam = minibatch_min_eigenvalue(
      min_eigenvalue, curvature_batch_size=b_h, curvature_norm_bound=curvature_norm_bound,
      modification=modification,
  )
  sens = direction_sensitivity(
      lam, n=b_h, curvature_norm_bound=curvature_norm_bound, modification=modification
  )
  if not by_noise:
    overflow_prob = _overflow_target(overflow_prob, epsilon, delta, steps)
  sampler_g, sampler_h = _samplers(n, b_g, b_h, grad_cap, curvature_cap, overflow_prob)
  q_g, q_h = float(sampler_g.sampling_rate), float(sampler_h.sampling_rate)
  # A TV distance is at most 1, so the step's slack is capped there.
  truncation_step = min(1.0, float(sampler_g.overflow_prob) + float(sampler_h.overflow_prob))

  if by_noise:
    z_g = _validate.positive_float(noise_multiplier_grad, "noise_multiplier_grad")
    z_h = _validate.positive_float(noise_multiplier_hess, "noise_multiplier_hess")
  else:
    z_g, z_h = _calibrate(epsilon, delta, steps, q_g, q_h, truncation_step, noise_ratio_hess)
  rdp_step = np.asarray(
      accounting.subsampled_gaussian_rdp(q_g, z_g) + accounting.subsampled_gaussian_rdp(q_h, z_h),
      np.float64,
  )
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  exact = _common.exact_noise(unsafe_float_noise, "dp_newton_minibatch")
  slack = noise.tv_per_coordinate() if exact and not no_noise else 0.0
  noise_on = 0.0 if no_noise else 1.0
  grad_std = noise_on * z_g * grad_norm_bound / b_g  # std of g~'s noise, per coordinate.

  def init_fn(params: jax.Array) -> DPNewtonMinibatchState:
    params = _common.check_params(params)
    dt = params.dtype
    return DPNewtonMinibatchState(
        count=jnp.zeros((), jnp.int32),
        key=key,
        accountant=accounting.init_accountant(),
        min_eigenvalue=jnp.asarray(lam, dt),
        grad_noise_std=jnp.asarray(grad_std, dt),
        direction_noise_std=jnp.zeros((), dt),
        budget_exhausted=jnp.zeros((), bool),
    )

  def update_fn(updates, state, params=None, *, data=None, **extra_args):
    del extra_args
    if not isinstance(state, DPNewtonMinibatchState):
      raise TypeError(
          f"state must be a DPNewtonMinibatchState from init(), got {type(state).__name__}."
      )
    if updates is not None:
      raise TypeError(
          "dp_newton_minibatch computes its gradient from its own private sample: pass "
          "updates=None, e.g. tx.update(None, state, params, data=(x, y))."
      )
    if params is None:
      raise TypeError(
          "dp_newton_minibatch needs params (the point w_t): "
          "tx.update(None, state, params, data=(x, y))."
      )
    w = _common.check_vector(params, "params")
    x, y = _check_data(data, w.shape[0])
    ok = _common.gate(state.count, steps, "dp_newton_minibatch")
    dt = w.dtype
    d = w.shape[0]
    step, new_key, dir_std = dp_newton_minibatch_step(  # Draws the noise: charged below.
        w, state.key, (x, y), lam, grad_std, sens, noise_on * z_h, grad_sampler=sampler_g,
        curvature_sampler=sampler_h, batch_size=b_g, curvature_batch_size=b_h,
        grad_norm_bound=grad_norm_bound, curvature=curvature, modification=modification,
        exact=exact,
    )
    # Both subsampled Gaussians, both samples' truncation slack and the exact
    # sampler's TV slack (2d coordinates), this step.
    acc = accounting.charge_rdp(state.accountant, rdp_step,
                                truncation=truncation_step + 2 * d * slack)

    out = jnp.where(ok, step, jnp.zeros_like(w))
    new_state = DPNewtonMinibatchState(
        **_common.gated(ok, state, acc),
        key=new_key,
        min_eigenvalue=state.min_eigenvalue,
        grad_noise_std=state.grad_noise_std,
        direction_noise_std=jnp.where(ok, dir_std.astype(dt), state.direction_noise_std),
    )
    return out, new_state

  def _check_data(data: Any, d: int) -> tuple[jax.Array, jax.Array]:
    if data is None:
      raise TypeError(
          "dp_newton_minibatch's update needs the full data set to sample from: "
          "tx.update(None, state, params, data=(x, y)) with x [n, d], y [n]."
      )
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
      raise TypeError(f"data must be a pair (x [n, d], y [n]), got {type(data).__name__}.")
    x, y = data
    _validate.as_float_array(x, "x", ndim=2)
    _validate.as_float_array(y, "y", ndim=1)
    if np.shape(x) != (n, d):
      raise ValueError(
          f"x has shape {np.shape(x)} but must be ({n}, {d}): n={n} rows (the public n the "
          f"transform was built for) and d={d} columns (the params)."
      )
    if np.shape(y) != (n,):
      raise ValueError(f"y has shape {np.shape(y)} but must be ({n},).")
    _validate.check_labels(y, "y")
    _validate.check_row_norms(x, "x")
    return jnp.asarray(x), jnp.asarray(y)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
