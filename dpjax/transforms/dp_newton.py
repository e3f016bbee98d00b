"""The double-noise Newton method (Algorithm 3) as an optax transform.

Ganesh, Haghifam, Steinke, Thakurta (NeurIPS 2023, arXiv 2305.13209),
Algorithm 3, Definition 5.4 and Sec. 5.2. One step at ``w_t``, with
the mean gradient ``g`` and the mean second-order information (SOI) matrix
``H`` (the Hessian or the quadratic upper bound "QU"):

1. ``g~ = g + N(0, sigma_g^2 I)``, ``sigma_g = (f_g L0/n) / sqrt(2 rho_grad)``;
2. adaptive lambda only (Sec. 5.2): ``tr~ = tr(H) + N(0, sigma_tr^2)``,
   ``sigma_tr = (L1/n) / sqrt(2 rho_trace)``, and
   ``lam = max((c max(0, tr~) / (n^2 rho_direction))^(1/3), 4 L1/n)``;
3. ``w_{t+1} = w_t - Psi_lam(H)^{-1} g~ + N(0, (||g~|| s(lam))^2 / (2 rho_direction) I)``.

Neighbouring relation (``neighbouring``, :mod:`dpjax.problem._neighbouring`): ``n``
is public and neighbours differ in one row: ``"zero-out"`` (the default)
replaces it by the null row, which contributes zero gradient and zero
curvature; ``"replace-one"`` replaces it by any other row.

Sensitivity argument for the logistic SOI (``curvature_structure="rank_one"``,
the default): with ``||x_i|| <= 1`` every per-example gradient has norm
``<= L0 = 1`` and every per-example SOI term ``A_i = c(z) x x^T``
(``0 <= c <= 1/4``) is PSD with operator norm and trace ``c ||x||^2`` in
``[0, L1]``, ``L1 = 1/4``. So:

* gradient: zero-out moves the mean by ``||g_i|| / n <= L0/n``, replace-one by
  ``||g_i - g_i'|| / n <= 2 L0/n``: ``f_g = 1`` or 2;
* trace: zero-out moves it by ``tr(A_i) / n <= L1/n``, replace-one by
  ``|tr(A_i) - tr(A_i')| / n <= L1/n``, the difference of two numbers in
  ``[0, L1]``: the same ``L1/n`` under both relations (it does not double);
* direction: given the public ``g~`` (and the public lambda), the direction
  ``Psi_lam(H)^{-1} g~`` moves by at most ``||g~|| s(lam)``. Zero-out moves
  ``H`` by a rank-1 PSD term of norm ``<= L = L1/n``, and

  * add: ``s = L / (lam (lam + L))`` by Sherman-Morrison (derived here,
    and equal to the paper's constant);
  * clip: ``s = L / (lam (lam - L))``, the paper's claim (Algorithm 3; its
    proof is in the paper's appendix); it needs ``lam > L``.

  Replace-one: let ``M = H0 + lam I`` with ``H0`` the mean SOI with the null
  row in the replaced place (PSD, so ``M >= lam I``), and ``H = H0 + A/n``,
  ``H' = H0 + A'/n``. For add, ``P = M^{-1} - (M + A/n)^{-1}`` and ``P' =
  M^{-1} - (M + A'/n)^{-1}`` are PSD (matrix inversion is operator monotone
  decreasing) with ``||P||, ||P'|| <= s`` (the zero-out bound), and
  ``(H + lam I)^{-1} - (H' + lam I)^{-1} = P' - P`` lies between ``-P`` and
  ``P'`` in the PSD order, so its operator norm is ``<= s``: add's
  sensitivity is the same ``s`` under both relations. Eigenvalue clipping is
  not operator monotone, so for clip the only bound is the triangle
  inequality through ``H0``: ``2 s``.

For ``L1 = 1/4`` the zero-out factors are ``1 / (4 n lam^2 +- lam)``. The three Gaussian
mechanisms are ``rho_grad``-, ``rho_trace``- and ``rho_direction``-zCDP and
compose to ``rho_step`` per step (Bun & Steinke 2016, Prop. 1.6 and Lemma 2.3);
with a fixed lambda there is no trace query and ``rho_trace = 0``.

General convex losses (``curvature_structure="general"``, Ganesh et al.
2023, Remark 5.5). The caller clips every example's gradient to L2 norm ``<= L0`` and
every example's Hessian ``H_i`` (PSD, each example's loss being convex in
``w``; clipping scales it, so it stays PSD) to Frobenius norm ``<= L1``
(``curvature_norm="frobenius"``) or operator norm ``<= L1``
(``"spectral"``), e.g. with :func:`dpjax.problem.losses.newton_step_inputs`. Then,
with ``n`` public:

* the mean gradient has L2 sensitivity ``L0/n`` (zero-out) or ``2 L0/n``
  (replace-one), as above;
* zero-out: ``||H - H'||_op = ||H_i||_op / n <= L1/n`` (the Frobenius norm
  bounds the operator norm), and both ``H, H'`` are PSD, so
  ``(H + lam I)^{-1} - (H' + lam I)^{-1} = (H + lam I)^{-1} (H' - H) (H' + lam I)^{-1}``
  has operator norm ``<= L1 / (n lam^2)``: add's direction sensitivity is
  ``s = L1 / (n lam^2)``. Replace-one: the operator-monotone
  argument above (``P, P'`` PSD of norm ``<= s``) keeps ``s``; so does
  ``||H_i - H_i'||_op <= L1`` (lemma 3 of :mod:`dpjax.problem._neighbouring`) in the
  identity. Clip has no proof for a general ``H_i`` and is refused;
* ``0 <= tr(H_i) = <H_i, I>_F <= sqrt(d) ||H_i||_F <= sqrt(d) L1``
  (PSD; Cauchy-Schwarz) for Frobenius clipping, and
  ``0 <= tr(H_i) <= d ||H_i||_op <= d L1`` for spectral clipping; so the trace
  query of the adaptive lambda has sensitivity ``sqrt(d) L1/n`` or
  ``d L1/n`` (:func:`trace_sensitivity`), under both relations (two numbers
  in ``[0, sqrt(d) L1]`` or ``[0, d L1]``).

A public, data-independent ridge ``mu`` added as ``mu w`` to the gradient and
``mu I`` to ``H`` (unclipped, un-noised) leaves every sensitivity above
unchanged, under both relations: it cancels in ``H - H'`` (and in ``g_i -
g_i'``) and only raises the eigenvalues of ``H + lam I`` (``(H + (mu + lam)
I)^{-1}`` is bounded by ``1/lam`` still).

All privacy arithmetic is in the pure functions :func:`newton_budget`,
:func:`direction_sensitivity`, :func:`trace_sensitivity` and
:func:`adaptive_min_eigenvalue` (:mod:`dpjax.transforms.newton_calibration`,
re-exported here), and the stds come from
:func:`dpjax.accounting.gaussian_sigma`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax.problem import _neighbouring
from dpjax import _validate
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.problem import glm
from dpjax.problem import per_example
from dpjax.problem import spectral
from dpjax import _common
from dpjax.transforms.newton_calibration import (  # noqa: F401  (re-exported)
    CURVATURE_STRUCTURES,
    NewtonBudget,
    _FLOOR_FACTOR,
    _check_structure,
    adaptive_min_eigenvalue,
    direction_sensitivity,
    newton_budget,
    trace_sensitivity,
)

__all__ = [
    "DPNewtonState",
    "NewtonBudget",
    "adaptive_min_eigenvalue",
    "direction_sensitivity",
    "dp_newton",
    "newton_budget",
    "trace_sensitivity",
]


class DPNewtonState(NamedTuple):
  """State of :func:`dp_newton`; ``optax.tree.get(state, "rho")`` finds ``accountant.rho``."""

  count: jax.Array  # shape=(), int32: private steps taken (refused steps excluded).
  key: jax.Array  # shape=(), typed PRNG key, split on every update.
  accountant: accounting.AccountantState  # rho-zCDP spent so far.
  min_eigenvalue: jax.Array  # shape=(), params dtype: lambda of the last step (0 before an adaptive first step).
  grad_noise_std: jax.Array  # shape=(), params dtype: std sigma_g of the gradient noise.
  trace_noise_std: jax.Array  # shape=(), params dtype: std sigma_tr of the trace noise (0 for fixed lambda).
  direction_noise_std: jax.Array  # shape=(), params dtype: ||g~|| s(lam) / sqrt(2 rho_direction) at the last step.
  budget_exhausted: jax.Array  # shape=(), bool: a step past `steps` was refused.


# ----------------------------------------------------------------------------
# Privacy arithmetic (pure functions).
# ----------------------------------------------------------------------------


def dp_newton(
    *,
    n: int,
    rho: float | jax.Array | None = None,
    steps: int | None = None,
    rho_per_step: float | jax.Array | None = None,
    curvature: str = "hessian",
    modification: str = "clip",
    min_eigenvalue: float | str = "adaptive",
    grad_frac: float = 0.7,
    trace_frac: float = 0.1,
    trace_coeff: float = 0.5,
    grad_norm_bound: float = 1.0,
    curvature_norm_bound: float = 0.25,
    curvature_structure: str = "rank_one",
    curvature_norm: str = "frobenius",
    key: int | jax.Array,
    neighbouring: str = "zero-out",
    disable_noise_for_testing: bool = False,
    unsafe_float_noise: bool = False,
) -> optax.GradientTransformationExtraArgs:
  """Double-noise Newton (Algorithm 3; Sec. 5.2 adaptive lambda; Remark 5.5 general losses).

  ``update(g, state, params, *, curvature_matrix=H)`` (or ``x=..., y=...``
  instead of ``H``) takes the MEAN gradient ``g`` and returns
  ``-Psi_lam(H)^{-1} g~ + N(0, (||g~|| s(lam))^2 / (2 rho_direction) I)``,
  with ``g~ = g + N(0, sigma_g^2 I)``; add it to ``params``. The module
  docstring gives the sensitivity argument; the noise scales are:

  * ``sigma_g = gaussian_sigma(f_g grad_norm_bound / n, rho_grad)``, ``f_g = 1``
    for ``neighbouring="zero-out"``, 2 for ``"replace-one"``;
  * ``sigma_tr = gaussian_sigma(trace_sensitivity(...), rho_trace)`` (adaptive;
    ``L1 / n`` for rank_one, ``sqrt(d) L1 / n`` or ``d L1 / n`` for general;
    the same under both relations);
  * ``lam = adaptive_min_eigenvalue(tr(H) + N(0, sigma_tr^2), ..., floor=4 L1/n)``
    or the fixed ``min_eigenvalue``;
  * direction std ``= gaussian_sigma(||g~|| * direction_sensitivity(lam), rho_direction)``
    (``L1 / (n lam^2)`` per unit ``||g~||`` for general add; add the same
    under both relations, clip x 2 under replace-one);

  with the budget split of :func:`newton_budget`. Each part is charged to the
  accountant where its noise is drawn (keys split off the state key, fresh
  at every step). Everything runs in-graph (``jit``, ``vmap``, ``lax.scan``).

  Budget: exactly one of ``rho`` (total) with ``steps``, or ``rho_per_step``
  (optionally with ``steps``). Past ``steps`` an eager call raises
  ``ValueError``; a traced one returns zeros, charges nothing and sets
  ``state.budget_exhausted``. The budget is a Python number (exact host-side
  calibration and charges) or a scalar float jax array, possibly traced, to
  compile one program for many privacy levels (see :func:`dpjax.dp_gd`); the
  ``key`` may be traced (build one transform per key inside ``vmap``).

  Args:
    n: number of examples (public).
    rho: total zCDP budget over ``steps`` steps.
    steps: number of steps T.
    rho_per_step: zCDP budget of one step (instead of ``rho``).
    curvature: ``"hessian"`` or ``"qu"``: the kind of SOI (used for the
      ``x, y`` path; a passed ``curvature_matrix`` must be of this kind; for
      general, any PSD per-example SOI clipped to ``L1`` is covered).
    modification: ``"clip"`` or ``"add"`` (:mod:`dpjax.problem.spectral`).
    min_eigenvalue: ``"adaptive"`` (Sec. 5.2) or a fixed lambda > 0; for clip
      a fixed lambda must exceed ``curvature_norm_bound / n``.
    grad_frac: share ``gamma`` of each step's budget for the gradient.
    trace_frac: share ``tau`` of the rest for the trace (adaptive only).
    trace_coeff: ``c`` in the adaptive lambda.
    grad_norm_bound: L0, bound on each example's gradient norm (1 for logistic
      loss with ``||x|| <= 1``).
    curvature_norm_bound: L1, bound on each example's SOI operator norm (1/4).
      For ``"general"``, the bound each example's Hessian was clipped to in
      ``curvature_norm``.
    curvature_structure: ``"rank_one"`` (default): each example's SOI is
      ``c(z) x x^T`` with ``0 <= c``, ``||.|| <= L1`` (the logistic SOI of
      :mod:`dpjax.problem.glm`); or ``"general"``: any convex loss whose per-example
      Hessians (PSD) were clipped to norm ``<= L1`` in ``curvature_norm``
      (:func:`dpjax.problem.losses.newton_step_inputs`). General needs
      ``modification="add"``, takes ``curvature_matrix`` (no ``x, y`` path)
      and uses the sensitivities of the module docstring.
    curvature_norm: ``"frobenius"`` (default) or ``"spectral"``: the norm of
      the general per-example clipping (sets the trace sensitivity
      ``sqrt(d) L1 / n`` or ``d L1 / n``); ignored for rank_one, whose
      per-example terms have equal operator norm, Frobenius norm and trace.
    key: int seed or typed PRNG key (``jax.random.key``); required.
    neighbouring: ``"zero-out"`` (default) or ``"replace-one"``: gradient
      noise x 2, trace noise unchanged, direction noise unchanged for add and
      x 2 for clip (module docstring).
    disable_noise_for_testing: if True, no noise at all (the adaptive lambda
      then uses the exact trace); the output is NOT private. For tests only.
    unsafe_float_noise: if True, draws the noise as ``jax.random.normal`` in
      floating point instead of :mod:`dpjax.mechanisms.noise`'s exact sampler: NOT
      private (Mironov 2012); for measuring what exactness costs. Issues
      :class:`dpjax.PrivacyLeakWarning`.

  Returns:
    An ``optax.GradientTransformationExtraArgs`` whose state is a
    :class:`DPNewtonState`.

  Raises:
    ValueError, TypeError: eagerly, at construction, for a bad budget, ``n``,
      fraction, coefficient, bound, curvature, modification, min_eigenvalue
      (including ``lam <= L1/n`` for clip), ``neighbouring``, key or flag; for clip with
      ``curvature_structure="general"``.

  Examples:
    >>> import jax, optax
    >>> from dpjax import accounting, data
    >>> from dpjax.problem import glm
    >>> from dpjax.transforms import dp_newton
    >>> x, y = data.synthetic(0, n=2000, d=5)
    >>> tx = dp_newton(n=2000, rho=1.0, steps=3, key=0)
    >>> w = jax.numpy.zeros(5)
    >>> state = tx.init(w)
    >>> @jax.jit
    ... def step(w, state):
    ...   _, g, h = glm.logistic_grad_and_curvature(w, x, y, "hessian")
    ...   u, state = tx.update(g, state, w, curvature_matrix=h)
    ...   return optax.apply_updates(w, u), state
    >>> for _ in range(3):
    ...   w, state = step(w, state)
    >>> round(accounting.spent_rho(state.accountant), 12), int(state.count)
    (1.0, 3)
    >>> bool(state.min_eigenvalue >= 1 / 2000)  # the adaptive floor 4 L1 / n
    True
    >>> bool(glm.logistic_loss(w, x, y) < glm.logistic_loss(0 * w, x, y))
    True
  """
  n = _validate.positive_int(n, "n")
  rho_step, steps = _common.per_step_budget(rho, steps, rho_per_step)
  curvature = _validate.choice(curvature, "curvature", glm.CURVATURES)
  modification = _validate.choice(modification, "modification", spectral.MODES)
  grad_frac = _validate.float_in_open_interval(grad_frac, "grad_frac", 0.0, 1.0)
  trace_frac = _validate.float_in_open_interval(trace_frac, "trace_frac", 0.0, 1.0)
  trace_coeff = _validate.positive_float(trace_coeff, "trace_coeff")
  grad_norm_bound = _validate.positive_float(grad_norm_bound, "grad_norm_bound")
  curvature_norm_bound = _validate.positive_float(curvature_norm_bound, "curvature_norm_bound")
  general = _check_structure(curvature_structure, modification) == "general"
  _validate.choice(curvature_norm, "curvature_norm", per_example.CURVATURE_NORMS)
  grad_factor = _neighbouring.vector_factor(neighbouring)  # f_g: 1 or 2.
  lip = curvature_norm_bound / n  # Operator-norm sensitivity of the mean SOI (zero-out).
  adaptive = isinstance(min_eigenvalue, str)
  if adaptive:
    if min_eigenvalue != "adaptive":
      raise ValueError(
          f"min_eigenvalue must be 'adaptive' or a number > 0, got {min_eigenvalue!r}."
      )
    fixed_lam = None
  else:
    fixed_lam = _validate.positive_float(min_eigenvalue, "min_eigenvalue")
    if modification == "clip" and fixed_lam <= lip:
      raise ValueError(
          f"min_eigenvalue={fixed_lam!r} is too small for modification='clip': the "
          f"paper's clip sensitivity (L1/n) / (lam (lam - L1/n)) needs lam > L1/n = "
          f"curvature_norm_bound / n = {lip:.6g}. Pass min_eigenvalue > {lip:.6g} "
          f"(e.g. {_FLOOR_FACTOR * lip:.6g} = 4 L1/n), min_eigenvalue='adaptive', or "
          "modification='add'."
      )
  key = _common.canonical_key(key)
  no_noise = _common.check_flag(disable_noise_for_testing, "disable_noise_for_testing")
  exact = _common.exact_noise(unsafe_float_noise, "dp_newton")
  slack = noise.tv_per_coordinate() if exact and not no_noise else 0.0  # TV per coordinate

  # The one place where the Newton noise scales are derived (Algorithm 3, Sec. 5.2;
  # module docstring): gradient f_g L0 / n, trace and direction from the two functions.
  budget = newton_budget(rho_step, grad_frac=grad_frac, trace_frac=trace_frac, adaptive=adaptive)
  sens_grad = grad_factor * grad_norm_bound / n
  sigma_grad = accounting.gaussian_sigma(sens_grad, budget.rho_grad)

  def sens_trace(d: int) -> float:
    return trace_sensitivity(n=n, d=d, curvature_norm_bound=curvature_norm_bound,
                             curvature_structure=curvature_structure,
                             curvature_norm=curvature_norm, neighbouring=neighbouring)

  def sigma_trace(d: int) -> float:  # The trace query's std (Sec. 5.2).
    if not adaptive:
      return 0.0
    return accounting.gaussian_sigma(sens_trace(d), budget.rho_trace)

  floor = _FLOOR_FACTOR * lip
  noise_on = 0.0 if no_noise else 1.0
  # The direction's std per unit of its sensitivity: 1 / sqrt(2 rho_direction).
  unit_direction_std = accounting.gaussian_sigma(1.0, budget.rho_direction)
  if not adaptive:
    fixed_sens = direction_sensitivity(
        fixed_lam, n=n, curvature_norm_bound=curvature_norm_bound, modification=modification,
        curvature_structure=curvature_structure, neighbouring=neighbouring,
    )
    fixed_unit_std = accounting.gaussian_sigma(fixed_sens, budget.rho_direction)

  def init_fn(params: jax.Array) -> DPNewtonState:
    params = _common.check_params(params)
    dt = params.dtype
    return DPNewtonState(
        count=jnp.zeros((), jnp.int32),
        key=key,
        accountant=accounting.init_accountant(),
        min_eigenvalue=jnp.asarray(0.0 if adaptive else fixed_lam, dt),
        grad_noise_std=jnp.asarray(noise_on * sigma_grad, dt),
        trace_noise_std=jnp.asarray(noise_on * sigma_trace(params.shape[0]), dt),
        direction_noise_std=jnp.zeros((), dt),
        budget_exhausted=jnp.zeros((), bool),
    )

  def update_fn(updates, state, params=None, *, curvature_matrix=None, x=None, y=None,
                **extra_args):
    del extra_args
    if not isinstance(state, DPNewtonState):
      raise TypeError(f"state must be a DPNewtonState from init(), got {type(state).__name__}.")
    g = _common.check_vector(updates, "updates")
    d = g.shape[0]
    h = _curvature(g, params, curvature_matrix, x, y)
    ok = _common.gate(state.count, steps, "dp_newton")
    dt = g.dtype
    new_key, k_grad, k_trace, k_dir = jax.random.split(state.key, 4)
    acc = state.accountant
    # The exact noise of the step's three releases (gradient, trace, direction),
    # drawn at once: one sampler in the program.
    atoms = noise.draw_atoms(k_grad, 2 * d + 1) if exact else None
    pick = (lambda lo, hi: None) if atoms is None else (lambda lo, hi: atoms[:, lo:hi])

    # 1. Noisy gradient: sensitivity f_g L0/n, budget rho_grad.
    g_noisy = noise.add_gaussian(k_grad, g, sensitivity=sens_grad,
                                 noise_std=noise_on * sigma_grad, exact=exact, atoms=pick(0, d))
    acc = accounting.charge(acc, budget.rho_grad, slack=slack * d)

    # 2. Minimum eigenvalue: fixed, or from the noisy trace (sensitivity L1/n;
    #    sqrt(d) L1/n or d L1/n for general, trace_sensitivity).
    if adaptive:
      trace = noise.add_gaussian(k_trace, jnp.trace(h), sensitivity=sens_trace(d),
                                 noise_std=noise_on * sigma_trace(d), exact=exact,
                                 atoms=pick(d, d + 1))
      acc = accounting.charge(acc, budget.rho_trace, slack=slack)
      lam = adaptive_min_eigenvalue(
          trace, n=n, rho_direction=budget.rho_direction, trace_coeff=trace_coeff, floor=floor
      )
      sens = direction_sensitivity(
          lam, n=n, curvature_norm_bound=curvature_norm_bound, modification=modification,
          curvature_structure=curvature_structure, neighbouring=neighbouring,
      )
      unit_std = accounting.gaussian_sigma(sens, budget.rho_direction)
    else:
      lam = jnp.asarray(fixed_lam, dt)
      sens, unit_std = fixed_sens, fixed_unit_std  # public host floats: a host-planned release

    # 3. Noisy direction: sensitivity ||g~|| s(lam), budget rho_direction
    #    (s = L1 / (n lam^2) for general add; clip x 2 for replace-one).
    direction = spectral.modified_solve(h, g_noisy, lam, modification)
    # Released in units of ||g~|| s(lam) (both public: g~ and lam were released):
    # direction / (||g~|| s(lam)) has sensitivity 1 and std 1 / sqrt(2 rho_direction),
    # a plan fixed on the host even when lam is traced; scaling back is post-processing.
    g_norm = jnp.linalg.norm(g_noisy)
    scale = g_norm * jnp.asarray(sens, dt)
    safe = jnp.where(scale > 0, scale, 1.0)
    noisy_direction = scale * noise.add_gaussian(
        k_dir, direction / safe, sensitivity=1.0, noise_std=noise_on * unit_direction_std,
        exact=exact, atoms=pick(d + 1, 2 * d + 1))
    acc = accounting.charge(acc, budget.rho_direction, slack=slack * d)

    out = jnp.where(ok, -noisy_direction, jnp.zeros_like(g))
    new_state = DPNewtonState(
        **_common.gated(ok, state, acc),
        key=new_key,
        min_eigenvalue=jnp.where(ok, lam.astype(dt), state.min_eigenvalue),
        grad_noise_std=state.grad_noise_std,
        trace_noise_std=state.trace_noise_std,
        direction_noise_std=jnp.where(ok, (noise_on * g_norm * jnp.asarray(unit_std, dt)).astype(dt),
                                      state.direction_noise_std),
    )
    return out, new_state

  def _curvature(g, params, curvature_matrix, x, y):
    d = g.shape[0]
    if curvature_matrix is not None:
      if x is not None or y is not None:
        raise ValueError(
            "pass either curvature_matrix=H or the data x=..., y=..., not both."
        )
      _validate.as_float_array(curvature_matrix, "curvature_matrix", ndim=2)
      if np.shape(curvature_matrix) != (d, d):
        raise ValueError(
            f"curvature_matrix has shape {np.shape(curvature_matrix)} but must be ({d}, {d}) "
            "to match the gradient."
        )
      return jnp.asarray(curvature_matrix, g.dtype)
    if general:
      raise ValueError(
          "dp_newton with curvature_structure='general' has no x=..., y=... path (that path is "
          "the logistic SOI): pass curvature_matrix=H, the clipped mean Hessian of your loss, "
          "e.g. from dpjax.problem.losses.newton_step_inputs."
      )
    if x is None or y is None:
      raise TypeError(
          "dp_newton's update needs the curvature: pass curvature_matrix=H (the mean "
          f"{curvature!r} SOI matrix, shape ({d}, {d})) or the data x=..., y=... together "
          "with params, e.g. tx.update(grad, state, params, curvature_matrix=H)."
      )
    if params is None:
      raise TypeError(
          "dp_newton's update with x, y needs params (the point w_t where the curvature "
          "is evaluated): call tx.update(grad, state, params, x=x, y=y)."
      )
    params = _common.check_vector(params, "params", d)
    matrix = glm.logistic_grad_and_curvature(params, x, y, curvature).matrix
    return matrix.astype(g.dtype)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
