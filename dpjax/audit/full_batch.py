"""Builders of the full-batch audits: DP-GD, the double-noise Newton method, precond-gd.

The Newton method (Ganesh et al. 2023, NeurIPS, Algorithm 3) is audited
channel by channel (gradient, direction, trace); see
:mod:`dpjax.audit.mechanisms` for the canaries and statistics.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import optax

from dpjax.problem import glm
from dpjax import transforms
from dpjax.audit.core import AUDIT_DELTA, RHO, _Spec
from dpjax.audit.datasets import (_MARGIN, _balanced, _gd_public, _opposite_gradient_rows,
                                  _relation_options, _replace_one_pair, _unit_difference,
                                  _zero_out_pair)
from dpjax.transforms.dp_newton import direction_sensitivity, newton_budget


# ----------------------------------------------------------------------------
# Builders: DP-GD.
# ----------------------------------------------------------------------------


_GD_N = 10


def _dp_gd(*, steps: int, relation: str = "zero-out", doubled: bool = False,
           calibration: str | None = None) -> _Spec:
  """``dp_gd`` (``learning_rate=1``) from a public start, ``n = 10``, ``d = 2``.

  Zero-out: public rows along ``e_2`` (margin 0), the canary ``e_1`` at
  margin -20 vs the null row. Every step's mean gradient along ``e_1`` is
  the canary's ``-1/n`` (to 2e-9) or 0, so ``w_T[0] - w_0[0]`` (the sum of
  the released shifts) is the likelihood-ratio test of the ``T``-fold
  composition. Replace-one: the rows of :func:`_opposite_gradient_rows`
  (mean gradients ``2/n`` apart) and the statistic ``(w_T - w_0) . u``, ``u``
  the unit difference of the two mean gradients at ``w_0``.
  ``calibration`` (default: ``relation``) is the ``neighbouring=`` the
  transform is built with; ``"zero-out"`` on the replace-one pair is the
  ``"zero-out-noise"`` twin.
  """
  n, d = _GD_N, 2
  calibration = relation if calibration is None else calibration
  if relation == "zero-out":
    w0 = jnp.asarray([-_MARGIN, 0.0], jnp.float32)
    datasets = _zero_out_pair(n, _gd_public(n - 2), ((1.0, 0.0), 1.0), doubled=doubled, d=d)
    u = jnp.asarray([1.0, 0.0], jnp.float32)
    canary = "x = e_1, y = +1 at margin -20 (gradient -e_1) vs the null row"
    statistic = "w_T[0] - w_0[0]"
  elif relation == "replace-one":
    w, row, other = _opposite_gradient_rows()
    w0 = jnp.asarray(w, jnp.float32)
    datasets = _replace_one_pair(n, _gd_public(n), row, other, doubled=doubled)
    u = _unit_difference(w0, _replace_one_pair(n, _gd_public(n), row, other, doubled=False))
    canary = ("(cos a, -sin a), y = +1 replaced by (cos a, sin a), y = -1 at w_0 = R e_2, "
              "margins -100 (mean gradients 2 cos a / n apart)")
    statistic = "(w_T - w_0) . u, u the unit mean-gradient difference"
  else:
    raise ValueError(f"relation must be 'zero-out' or 'replace-one', got {relation!r}.")
  options = _relation_options(transforms.dp_gd, calibration)

  def run(key, data):
    x, y = data
    tx = transforms.dp_gd(n=n, rho=RHO, steps=steps, learning_rate=1.0, key=key, **options)
    w, state = w0, tx.init(w0)
    for _ in range(steps):
      upd, state = tx.update(glm.logistic_loss_and_grad(w, x, y)[1], state, w)
      w = optax.apply_updates(w, upd)
    return (w - w0) @ u, state.accountant

  label = "" if calibration == "zero-out" else f", neighbouring={calibration!r}"
  return _Spec(run, datasets, "gaussian", None, AUDIT_DELTA, False,
               f"dp_gd(steps={steps}{label})", "gradient", relation, canary, statistic)


# ----------------------------------------------------------------------------
# Builders: the double-noise Newton method.
# ----------------------------------------------------------------------------

_NEWTON_N = 100
_NEWTON_LAMBDA = 0.1  # the fixed lambda: 40 L1/n at n = 100.
# (grad_frac, trace_frac) per audited channel: most of the budget on that channel.
_NEWTON_SPLIT = {"gradient": (0.9, 0.1), "direction": (0.05, 0.05), "trace": (0.05, 0.95)}
_NEWTON_SPLIT_CLIP_ADAPTIVE_DIRECTION = (0.05, 0.15)  # a steadier lambda for clip (below).
# c for clip's adaptive direction audit: lambda's fixed point sqrt(c / (n^2 rho_direction))
# is then ~20 L1/n, where clip's constant (L1/n) / (lam (lam - L1/n)) is within 10% of the
# largest shift a rank-one canary makes, (L1/n) / (lam (lam + L1/n)). Near the default c's
# lambda (~5 L1/n) that ratio is 0.67, and clip's bound is loose there.
_CLIP_ADAPTIVE_TRACE_COEFF = 8.0


def _newton_llr(u, state, *, n: int, rho_direction: float, modification: str, model):
  """Log-likelihood ratio ``D'`` vs ``D`` of one released Newton step in ``d = 1``.

  Released: the update ``u = -(P g~ + sigma_d z)`` with ``P = 1 / Psi_lam(H)``,
  and in the state lambda, the gradient noise std ``sigma_g`` and the
  direction noise std ``sigma_d = |g~| s(lam) / sqrt(2 rho_direction)``, which
  gives ``r = |g~|`` exactly (post-processing of the released ``g~``). With
  ``g~ = +-r`` the release has likelihood
  ``sum_(+-) phi((+-r - g_X) / sigma_g) phi((u +- P_X r) / sigma_d)`` under
  side ``X`` (mean gradient ``g_X``, curvature ``H_X``: the two candidate
  datasets' values, known to the auditor). The nominal stds are used (a
  broken twin's state reports the same ones). The trace's own likelihood is
  left out: the statistic is still a function of the release.
  """
  lam = state.min_eigenvalue
  unit = direction_sensitivity(lam, n=n, modification=modification) / math.sqrt(
      2.0 * rho_direction)
  sd = state.direction_noise_std
  r = sd / unit
  sg = state.grad_noise_std

  def loglik(g, h):
    psi = h + lam if modification == "add" else jnp.maximum(h, lam)
    p = 1.0 / psi
    return jnp.logaddexp(-0.5 * ((r - g) / sg) ** 2 - 0.5 * ((u + p * r) / sd) ** 2,
                         -0.5 * ((-r - g) / sg) ** 2 - 0.5 * ((u - p * r) / sd) ** 2)

  (g0, h0), (g1, h1) = model
  return loglik(g1, h1) - loglik(g0, h0)


def _newton(*, curvature: str, modification: str, lam: Any, channel: str,
            doubled: bool = False) -> _Spec:
  """One step of ``dp_newton`` in ``d = 1`` (``n = 100``), audited on one channel.

  * ``"gradient"``: the canary at margin -20 (``w_0 = -20``), null public
    rows; budget split ``grad_frac = 0.9``; statistic :func:`_newton_llr`.
  * ``"direction"``: the canary at margin 0 (``w_0 = 0``): it moves the
    curvature by ``L1 / n`` and the direction by its sensitivity; budget
    ``grad_frac = 0.05`` (``trace_frac = 0.05``; for clip with the adaptive
    lambda, which must land near the public curvature, ``trace_frac = 0.15``
    and ``trace_coeff = 8``, see ``_CLIP_ADAPTIVE_TRACE_COEFF``); statistic
    :func:`_newton_llr`. For clip, public rows along ``e_1`` (balanced
    labels, margin 0, zero net gradient) bring the curvature to lambda (the
    fixed one, or the adaptive lambda's fixed point ``sqrt(c / (n^2
    rho_direction))``), so the canary is not clipped away.
  * ``"trace"`` (adaptive only): the canary at margin 0 and 10 public rows
    along ``e_1`` (so the noisy trace stays positive and lambda above its
    floor: lambda is then strictly increasing in the released trace);
    budget ``trace_frac = 0.95``; statistic the released lambda
    (``state.min_eigenvalue``).
  """
  n = _NEWTON_N
  adaptive = isinstance(lam, str)
  if channel not in _NEWTON_SPLIT:
    raise ValueError(f"channel must be one of {sorted(_NEWTON_SPLIT)}, got {channel!r}.")
  if channel == "trace" and not adaptive:
    raise ValueError("the trace channel exists only with min_eigenvalue='adaptive'.")
  grad_frac, trace_frac = _NEWTON_SPLIT[channel]
  trace_coeff = 0.5  # the default c.
  if channel == "direction" and adaptive and modification == "clip":
    grad_frac, trace_frac = _NEWTON_SPLIT_CLIP_ADAPTIVE_DIRECTION
    trace_coeff = _CLIP_ADAPTIVE_TRACE_COEFF
  budget = newton_budget(RHO, grad_frac=grad_frac, trace_frac=trace_frac,
                                    adaptive=adaptive)
  public: list = []
  if channel == "gradient":
    w0 = -_MARGIN
  else:
    w0 = 0.0
    if channel == "trace":
      public = _balanced(10, (1.0,))
    elif modification == "clip":
      h = (float(lam) if not adaptive
           else math.sqrt(trace_coeff / (n * n * budget.rho_direction)))
      public = _balanced(max(1, round(4 * n * h)), (1.0,))
  canary_row = ((1.0,), 1.0)
  datasets = _zero_out_pair(n, public, canary_row, doubled=doubled, d=1)
  w0 = jnp.full((1,), w0, jnp.float32)
  model = []
  for x, y in _zero_out_pair(n, public, canary_row, doubled=False, d=1):
    c = glm.logistic_grad_and_curvature(w0, x, y, curvature)
    model.append((float(c.grad[0]), float(c.matrix[0, 0])))
  options = dict(curvature=curvature, modification=modification, min_eigenvalue=lam,
                 grad_frac=grad_frac, trace_frac=trace_frac, trace_coeff=trace_coeff)
  coeff_text = "" if trace_coeff == 0.5 else f", trace_coeff={trace_coeff:g}"

  def run(key, data):
    x, y = data
    tx = transforms.dp_newton(n=n, rho=RHO, steps=1, key=key, **options)
    state = tx.init(w0)
    g = glm.logistic_loss_and_grad(w0, x, y)[1]
    upd, state = tx.update(g, state, w0, x=x, y=y)
    if channel == "trace":
      stat = state.min_eigenvalue
    else:
      stat = _newton_llr(upd[0], state, n=n, rho_direction=budget.rho_direction,
                         modification=modification, model=model)
    return stat, state.accountant

  lam_text = "adaptive lambda" if adaptive else f"lambda = {float(lam):g}"
  margin = "-20" if channel == "gradient" else "0"
  canary = f"x = 1, y = +1 at margin {margin} vs the null row (d = 1, n = {n})"
  if public:
    canary += f"; {len(public)} public rows x = 1 (balanced labels)"
  statistic = ("released lambda (increasing in the noisy trace)" if channel == "trace"
               else "log-likelihood ratio of the update and the norm of g~ (from the released "
               "direction std)")
  return _Spec(run, datasets, "gaussian", None, AUDIT_DELTA, False,
               f"dp_newton(curvature={curvature!r}, modification={modification!r}, {lam_text}, "
               f"grad_frac={grad_frac}, trace_frac={trace_frac}{coeff_text})", channel, "zero-out",
               canary, statistic)


# ----------------------------------------------------------------------------
# Builders: precond-gd.
# ----------------------------------------------------------------------------

_PRECOND_N = 100
_PRECOND_STEPS = 3
_PRECOND_MARGIN = 50.0


def _precond(*, channel: str, relation: str = "zero-out", doubled: bool = False,
             calibration: str | None = None) -> _Spec:
  """``dp_precond_gd`` with the QU curvature ``X^T X / (4n)`` released at the public start.

  * ``"curvature"``: ``d = 2``, ``n = 100``, 20 public rows along ``e_2``;
    ``curvature_frac = 0.9``, one step. Zero-out: the canary ``e_1`` (QU
    weight 1/4: the matrix moves by ``e_1 e_1^T / (4n)``, Frobenius norm
    ``L1 / n``, all on the (1, 1) entry, whose noise std is ``sigma_H``);
    statistic the released ``H~_11``. Replace-one: ``e_1`` replaced by
    ``e_2`` (Frobenius change ``sqrt(2) L1 / n``, the replace-one worst
    case); statistic ``H~_11 - H~_22``.
  * ``"end-to-end"``: the shipped defaults (``curvature_frac = 0.03``,
    ``kappa = 3``, ``learning_rate = 1``), ``T = 3`` steps. Zero-out: ``d =
    1``, the canary at margin -50 (gradient ``-1/n`` at every step, QU
    curvature ``L1 / n``); replace-one: ``d = 2`` and the rows of
    :func:`_opposite_gradient_rows`. Statistic: the log-likelihood ratio of
    the whole release, ``sum_t g~_t . (g_D' - g_D) / sigma_g^2 + <H~, H_D' -
    H_D>_F / sigma_H^2`` (diagonal entries; ``g~_t = -P^{-1} u_t``, ``P`` the
    released preconditioner), which is the Neyman-Pearson test of the
    composition of the ``T + 1`` Gaussian mechanisms.
  ``calibration`` as in :func:`_dp_gd`.
  """
  n = _PRECOND_N
  calibration = relation if calibration is None else calibration
  options = _relation_options(transforms.dp_precond_gd, calibration)
  if channel == "curvature":
    d, steps, frac = 2, 1, 0.9
    public = _balanced(20, (0.0, 1.0))
    w0 = jnp.zeros((d,), jnp.float32)
    if relation == "zero-out":
      datasets = _zero_out_pair(n, public, ((1.0, 0.0), 1.0), doubled=doubled, d=d)
      canary = "x = e_1 (QU weight 1/4) vs the null row; 20 public rows x = e_2"
      weights = jnp.asarray([1.0, 0.0], jnp.float32)
    elif relation == "replace-one":
      public = public + [((0.0, 0.0), 1.0)] * (n - len(public))
      datasets = _replace_one_pair(n, public, ((1.0, 0.0), 1.0), ((0.0, 1.0), 1.0),
                                   doubled=doubled)
      canary = "x = e_1 replaced by x = e_2 (QU weights 1/4); 20 public rows x = e_2"
      weights = jnp.asarray([1.0, -1.0], jnp.float32)
    else:
      raise ValueError(f"relation must be 'zero-out' or 'replace-one', got {relation!r}.")
    statistic = "released H~_11" if relation == "zero-out" else "released H~_11 - H~_22"

    def run(key, data):
      x, y = data
      tx = transforms.dp_precond_gd(n=n, rho=RHO, steps=steps, curvature_frac=frac, key=key,
                                    **options)
      state = tx.init(w0)
      c = glm.logistic_grad_and_curvature(w0, x, y, "qu")
      _, state = tx.update(c.grad, state, w0, curvature_matrix=c.matrix)
      return jnp.diagonal(state.released_curvature) @ weights, state.accountant

    mech = f"dp_precond_gd(steps=1, curvature_frac={frac}"
  elif channel == "end-to-end":
    steps = _PRECOND_STEPS
    if relation == "zero-out":
      w0 = jnp.full((1,), -_PRECOND_MARGIN, jnp.float32)
      pair = lambda doubled: _zero_out_pair(n, [], ((1.0,), 1.0), doubled=doubled, d=1)
      canary = "x = 1, y = +1 at margin -50 (gradient -1/n, QU curvature 1/(4n)) vs the null row"
    elif relation == "replace-one":
      w, row, other = _opposite_gradient_rows()
      w0 = jnp.asarray(w, jnp.float32)
      pair = lambda doubled: _replace_one_pair(n, _gd_public(n), row, other, doubled=doubled)
      canary = ("(cos a, -sin a), y = +1 replaced by (cos a, sin a), y = -1 at w_0 = R e_2 "
                "(opposite gradients)")
    else:
      raise ValueError(f"relation must be 'zero-out' or 'replace-one', got {relation!r}.")
    datasets = pair(doubled)
    model = [glm.logistic_grad_and_curvature(w0, x, y, "qu") for x, y in pair(False)]
    dg = model[1].grad - model[0].grad
    dh = jnp.diagonal(model[1].matrix - model[0].matrix)
    statistic = "log-likelihood ratio of the gradient releases and the curvature release"

    def run(key, data):
      x, y = data
      tx = transforms.dp_precond_gd(n=n, rho=RHO, steps=steps, key=key, **options)
      w, state = w0, tx.init(w0)
      llr = 0.0
      for t in range(steps):
        c = glm.logistic_grad_and_curvature(w, x, y, "qu")
        upd, state = tx.update(c.grad, state, w, curvature_matrix=c.matrix if t == 0 else None)
        g_noisy = -jnp.linalg.solve(state.preconditioner, upd)  # learning_rate = 1.
        llr = llr + g_noisy @ dg / state.noise_std**2
        w = optax.apply_updates(w, upd)
      llr = llr + jnp.diagonal(state.released_curvature) @ dh / state.curvature_noise_std**2
      return llr, state.accountant

    mech = f"dp_precond_gd(steps={steps}, defaults"
  else:
    raise ValueError(f"channel must be 'curvature' or 'end-to-end', got {channel!r}.")
  label = "" if calibration == "zero-out" else f", neighbouring={calibration!r}"
  return _Spec(run, datasets, "gaussian", None, AUDIT_DELTA, False,
               mech + label + ")", channel, relation, canary, statistic)
