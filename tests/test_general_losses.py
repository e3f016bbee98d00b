"""dp_newton (curvature_structure="general", add) and dp_gd on general convex losses.

The general losses of Ganesh et al. (NeurIPS 2023), Remark 5.5. Checked: the
no-noise limits converge to the exact optimum of each shipped non-logistic
loss; clip is refused for general losses; the noise
stds follow from the stated sensitivities L0/n, sqrt(d) L1/n (trace) and
L1/(n lam^2) (direction).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import Z_MAX, maybe_jit, scale_z
from dpjax import accounting
from dpjax.problem import losses
from dpjax.transforms import direction_sensitivity, dp_gd, dp_newton, newton_budget
from dpjax.transforms.dp_newton import trace_sensitivity

N, D = 600, 4


@functools.lru_cache(maxsize=None)
def _problem(name):
  """(loss, x, y, w*, F*) in float64: a well-posed instance of each non-logistic loss."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((N, D))
  x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
  w_true = rng.standard_normal(D)
  if name == "l2_logistic":
    w_true *= 3 / np.linalg.norm(w_true)
    y = np.where(rng.random(N) < 1 / (1 + np.exp(-x @ w_true)), 1.0, -1.0)
    loss = losses.get_loss(name, regularization=1e-2)
  elif name == "pseudo_huber":  # 5% gross outliers in the labels
    y = x @ w_true + 0.3 * rng.standard_normal(N)
    y[: N // 20] += 10.0
    loss = losses.get_loss(name, delta=1.0)
  else:
    w_true *= 0.5 / np.linalg.norm(w_true)
    y = np.minimum(rng.poisson(np.exp(x @ w_true)), 10).astype(np.float64)
    loss = losses.get_loss(name, radius=1.0, label_bound=10.0)
  w_star, f_star = losses.optimum(loss, x, y)
  return loss, x, y, w_star, f_star


def _newton_losses(name, curvature, w0s, steps=10):
  loss, x, y, _, _ = _problem(name)
  x, y = jnp.asarray(x), jnp.asarray(y)
  tx = dp_newton(n=N, rho_per_step=1.0, min_eigenvalue=1e-6, key=0,
                 disable_noise_for_testing=True, **losses.newton_options(loss, curvature=curvature))

  def body(carry, _):
    w, state = carry
    s = losses.newton_step_inputs(loss, w, x, y, chunk_size=N, curvature=curvature)
    u, state = tx.update(s.grad, state, w, curvature_matrix=s.hessian)
    return (optax.apply_updates(w, u), state), None

  def run(w0):
    (w, _), _ = jax.lax.scan(body, (w0, tx.init(w0)), None, length=steps)
    return losses.objective(loss, w, x, y)

  return np.asarray(jax.jit(jax.vmap(run))(jnp.asarray(w0s)))


@pytest.mark.parametrize("name", ["l2_logistic", "pseudo_huber", "poisson"])
def test_no_noise_newton_general_add_converges(name, x64):
  """dp_newton(add, general), no noise, 10 steps: relative excess < 1e-9.

  Hessian SOI from w = 0 (l2_logistic, poisson). Pseudo-Huber with outliers:
  the Hessian variant converges from near w* but not from 0 (local convergence
  only; asserted, so a change of behaviour is noticed), the QU SOI
  (IRLS majoriser) converges from 0.
  """
  _, _, _, w_star, f_star = _problem(name)
  near = w_star + 0.3
  if name == "pseudo_huber":
    qu = _newton_losses(name, "qu", np.stack([np.zeros(D), near]))
    hess = _newton_losses(name, "hessian", np.stack([np.zeros(D), near]))
    assert np.all((qu - f_star) / f_star < 1e-9)
    assert (hess[1] - f_star) / f_star < 1e-9
    assert (hess[0] - f_star) / f_star > 1.0  # diverges from 0
  else:
    final = _newton_losses(name, "hessian", np.stack([np.zeros(D), near]))
    assert np.all((final - f_star) / f_star < 1e-9)


@pytest.mark.parametrize("name", ["l2_logistic", "pseudo_huber", "poisson"])
def test_no_noise_gd_converges(name, x64):
  """dp_gd with gd_options (step 1/(L1 + mu)), no noise, 300 steps: rel. excess < 1e-9."""
  loss, x, y, _, f_star = _problem(name)
  x, y = jnp.asarray(x), jnp.asarray(y)
  tx = dp_gd(n=N, rho_per_step=1.0, key=0, disable_noise_for_testing=True,
             **losses.gd_options(loss))

  def body(carry, _):
    w, state = carry
    s = losses.newton_step_inputs(loss, w, x, y, chunk_size=N, compute_hessian=False)
    u, state = tx.update(s.grad, state)
    return (optax.apply_updates(w, u), state), None

  @jax.jit
  def run(w0):
    (w, _), _ = jax.lax.scan(body, (w0, tx.init(w0)), None, length=300)
    return losses.objective(loss, w, x, y)

  assert (float(run(jnp.zeros(D))) - f_star) / f_star < 1e-9


def test_clip_is_refused_for_general():
  with pytest.raises(ValueError, match="clip stays logistic-only"):
    dp_newton(n=100, rho=1.0, steps=2, key=0, curvature_structure="general")  # default clip
  with pytest.raises(ValueError, match="clip stays logistic-only"):
    dp_newton(n=100, rho=1.0, steps=2, key=0, curvature_structure="general",
              modification="clip", min_eigenvalue=0.1)
  with pytest.raises(ValueError, match="clip stays logistic-only"):
    direction_sensitivity(0.1, n=100, modification="clip", curvature_structure="general")
  with pytest.raises(ValueError, match="curvature_structure must be one of"):
    dp_newton(n=100, rho=1.0, steps=2, key=0, curvature_structure="dense", modification="add")
  with pytest.raises(ValueError, match="curvature_norm must be one of"):
    dp_newton(n=100, rho=1.0, steps=2, key=0, modification="add", curvature_norm="nuclear")
  tx = dp_newton(n=100, rho=1.0, steps=2, key=0, curvature_structure="general",
                 modification="add")
  w = jnp.zeros(3)
  with pytest.raises(ValueError, match="no x=..., y=... path"):
    tx.update(w, tx.init(w), w, x=jnp.zeros((100, 3)), y=jnp.ones(100))


def test_sensitivities():
  """General add: L1/(n lam^2), above the rank-one Sherman-Morrison value;
  trace: L1/n (rank one), sqrt(d) L1/n (Frobenius), d L1/n (spectral)."""
  for lam, n, l1 in [(0.01, 1000, 1.0), (0.3, 7, 2.5), (1e-4, 10**6, 0.25)]:
    general = direction_sensitivity(lam, n=n, curvature_norm_bound=l1, modification="add",
                                    curvature_structure="general")
    assert general == pytest.approx(l1 / (n * lam**2), rel=1e-15)
    rank_one = direction_sensitivity(lam, n=n, curvature_norm_bound=l1, modification="add")
    assert rank_one == pytest.approx((l1 / n) / (lam * (lam + l1 / n)), rel=1e-15)
    assert rank_one < general
  kw = dict(n=50, d=16, curvature_norm_bound=2.0)
  assert trace_sensitivity(**kw) == 2.0 / 50
  assert trace_sensitivity(**kw, curvature_structure="general") == 4 * 2.0 / 50
  assert trace_sensitivity(**kw, curvature_structure="general",
                           curvature_norm="spectral") == 16 * 2.0 / 50
  # The Cauchy-Schwarz bound is attained: H_i = (L1/sqrt(d)) I has ||H_i||_F = L1.
  assert math.isclose(np.trace(2.0 / 4 * np.eye(16)), 50 * trace_sensitivity(
      **kw, curvature_structure="general"))


@pytest.mark.parametrize("jit", [True, False])
def test_noise_stds_follow_the_sensitivities(jit):
  """State stds vs the formulas (fixed lambda, Frobenius and spectral adaptive).

  Tiny gradient noise (n = 1e6, rho_t = 100) makes ||g~|| = ||g|| to 1e-6, so
  the recorded direction std must be ||g|| L1 / (n lam^2) / sqrt(2 rho_dir).
  """
  n, rho_t, l0, l1, lam = 10**6, 100.0, 2.0, 3.0, 1e-4
  g = jnp.array([0.6, 0.0, -0.8, 0.0])
  h = jnp.diag(jnp.array([0.5, 0.1, 0.0, 0.2]))
  b = newton_budget(rho_t, grad_frac=0.7, trace_frac=0.1, adaptive=False)
  tx = dp_newton(n=n, rho_per_step=rho_t, modification="add", min_eigenvalue=lam, key=3,
                 grad_norm_bound=l0, curvature_norm_bound=l1, curvature_structure="general")
  state = tx.init(jnp.zeros(4))
  _, state = maybe_jit(lambda s: tx.update(g, s, curvature_matrix=h), jit)(state)
  assert float(state.grad_noise_std) == pytest.approx((l0 / n) / math.sqrt(2 * b.rho_grad),
                                                      rel=1e-6)
  want = 1.0 * (l1 / (n * lam**2)) / math.sqrt(2 * b.rho_direction)
  assert float(state.direction_noise_std) == pytest.approx(want, rel=1e-5)
  assert accounting.spent_rho(state.accountant) == pytest.approx(rho_t, rel=1e-12)
  ba = newton_budget(rho_t, grad_frac=0.7, trace_frac=0.1, adaptive=True)
  for norm, factor in (("frobenius", 2.0), ("spectral", 4.0)):  # sqrt(d), d for d = 4
    tx = dp_newton(n=n, rho_per_step=rho_t, modification="add", key=3, grad_norm_bound=l0,
                   curvature_norm_bound=l1, curvature_structure="general", curvature_norm=norm)
    state = tx.init(jnp.zeros(4))
    want_tr = factor * l1 / n / math.sqrt(2 * ba.rho_trace)
    assert float(state.trace_noise_std) == pytest.approx(want_tr, rel=1e-6)
    _, state = maybe_jit(lambda s: tx.update(g, s, curvature_matrix=h), jit)(state)
    lam_t = float(state.min_eigenvalue)
    want = (l1 / (n * lam_t**2)) / math.sqrt(2 * ba.rho_direction)
    assert float(state.direction_noise_std) == pytest.approx(want, rel=1e-5)
    assert accounting.spent_rho(state.accountant) == pytest.approx(rho_t, rel=1e-12)


def test_direction_noise_is_drawn_at_the_recorded_scale(x64):
  """Over 4000 keys: out + (H + lam I)^{-1} g is N(0, std^2 I) with the
  general-add std (the gradient noise is negligible here); 1.1x is rejected."""
  n, rho_t, lam, d = 10**6, 100.0, 1e-3, 4
  g = jnp.array([0.6, 0.0, -0.8, 0.0])
  h = jnp.diag(jnp.array([0.5, 0.1, 0.0, 0.2]))

  def one(key):
    tx = dp_newton(n=n, rho_per_step=rho_t, modification="add", min_eigenvalue=lam, key=key,
                   curvature_structure="general", curvature_norm_bound=1.0)
    return tx.update(g, tx.init(jnp.zeros(d)), curvature_matrix=h)[0]

  out = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(5), 4000))
  resid = np.asarray(out) + np.asarray(jnp.linalg.solve(h + lam * jnp.eye(d), g))
  b = newton_budget(rho_t, grad_frac=0.7, trace_frac=0.1, adaptive=False)
  std = (1.0 / (n * lam**2)) / math.sqrt(2 * b.rho_direction)
  assert abs(scale_z(resid, std**2)) < Z_MAX
  assert abs(scale_z(resid, 1.1**2 * std**2)) > Z_MAX


def test_private_fit_pseudo_huber():
  """A noisy float32 fit (rho = 5 over 5 QU-Newton steps, fixed lambda 0.1) spends
  exactly rho and halves the excess loss of w = 0 (fixed key: deterministic)."""
  loss, x, y, _, f_star = _problem("pseudo_huber")
  x, y = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
  tx = dp_newton(n=N, rho=5.0, steps=5, key=7, min_eigenvalue=0.1,
                 **losses.newton_options(loss, curvature="qu"))

  @jax.jit
  def run(w0):
    def body(carry, _):
      w, state = carry
      s = losses.newton_step_inputs(loss, w, x, y, chunk_size=256, curvature="qu")
      u, state = tx.update(s.grad, state, w, curvature_matrix=s.hessian)
      return (optax.apply_updates(w, u), state), None
    (w, state), _ = jax.lax.scan(body, (w0, tx.init(w0)), None, length=5)
    return losses.objective(loss, w, x, y), state

  final, state = run(jnp.zeros(D, jnp.float32))
  assert accounting.spent_rho(state.accountant) == pytest.approx(5.0, rel=1e-12)
  start = float(losses.objective(loss, jnp.zeros(D, jnp.float32), x, y))
  # (1 - 1e-6) f_star: the float32 objective over 600 rows rounds at ~1e-7 relative.
  assert f_star * (1 - 1e-6) < float(final) < start - 0.5 * (start - f_star)


# ----------------------------------------------------------------------------
# Neighbouring relations: what each loss's per-example terms must satisfy.
# ----------------------------------------------------------------------------

_LOSSES = [("logistic", {}, "hessian"), ("logistic", {}, "qu"),
           ("l2_logistic", {"regularization": 0.3}, "hessian"),
           ("pseudo_huber", {"delta": 0.5, "regularization": 0.1}, "hessian"),
           ("pseudo_huber", {"delta": 0.5}, "qu"),
           ("poisson", {"radius": 1.0, "label_bound": 4.0}, "hessian")]


def _labels(name, rng, k):
  if name in ("logistic", "l2_logistic"):
    return rng.choice([-1.0, 1.0], size=k)
  if name == "poisson":
    return rng.uniform(0.0, 4.0, size=k)
  return rng.normal(size=k) * 50.0  # pseudo-Huber: any real label, outliers included


@pytest.mark.parametrize("name, params, curvature", _LOSSES)
def test_null_row_is_x_zero_and_per_example_hessians_are_psd(name, params, curvature, x64):
  """Zero-out's null row: x = 0 contributes exactly zero (clipped) gradient and Hessian, for any
  label and w (the public ridge aside). Replace-one's factors need PSD per-example Hessians."""
  loss = losses.get_loss(name, **params)
  mu = loss.regularization
  rng = np.random.default_rng(5)
  step = jax.jit(lambda w, x, y: losses.newton_step_inputs(loss, w, x, y, curvature=curvature))
  for _ in range(20):
    w = rng.normal(size=D) * rng.choice([0.1, 1.0, 10.0])
    y = _labels(name, rng, 1)
    s = step(jnp.asarray(w), jnp.zeros((1, D)), jnp.asarray(y))
    np.testing.assert_array_equal(np.asarray(s.grad), mu * w)
    np.testing.assert_array_equal(np.asarray(s.hessian), mu * np.eye(D))
    x = rng.normal(size=(1, D))
    x /= np.linalg.norm(x) / rng.uniform(0.2, 1.0)
    s = step(jnp.asarray(w), jnp.asarray(x), jnp.asarray(y))
    h = np.asarray(s.hessian) - mu * np.eye(D)
    assert np.linalg.eigvalsh(h).min() >= -1e-12 * max(1.0, np.abs(h).max())
    assert np.trace(h) <= math.sqrt(D) * loss.curvature_norm_bound * (1 + 1e-12)
    assert np.linalg.norm(np.asarray(s.grad) - mu * w) <= loss.grad_norm_bound * (1 + 1e-12)


def test_replace_one_pair_for_pseudo_huber(x64):
  """Swapping a row for its label's mirror image moves the clipped mean gradient by ~2 L0 / n
  (the replace-one sensitivity; twice zero-out's), while the Newton-add direction moves by
  at most ||g|| L1 / (n lam^2), the same bound as under zero-out."""
  loss = losses.get_loss("pseudo_huber", delta=0.5)
  n, lam = 8, 0.05
  rng = np.random.default_rng(6)
  x = rng.normal(size=(n, D))
  x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
  y = rng.normal(size=n)
  xa, ya, xb, yb = x.copy(), y.copy(), x.copy(), y.copy()
  xa[0], ya[0] = np.eye(D)[0], 100.0  # residual -100: phi' ~ -delta
  xb[0], yb[0] = np.eye(D)[0], -100.0  # residual +100: phi' ~ +delta
  w = jnp.zeros(D)
  a, b = (losses.newton_step_inputs(loss, w, jnp.asarray(u), jnp.asarray(v)) for u, v in
          ((xa, ya), (xb, yb)))
  opts = dict(losses.newton_options(loss), n=n, rho_per_step=0.1, min_eigenvalue=lam, key=0)
  stated = {rel: float(dp_newton(**opts, neighbouring=rel).init(w).grad_noise_std)
            * math.sqrt(2 * 0.7 * 0.1) for rel in ("zero-out", "replace-one")}
  change = float(jnp.linalg.norm(a.grad - b.grad))
  assert 1.99 * loss.grad_norm_bound / n < change <= stated["replace-one"] * (1 + 1e-9)
  assert change > 1.9 * stated["zero-out"]
  # The direction, for a public g~, against adversarial Hessian swaps (a row at residual 0,
  # curvature e1 e1^T clipped to L1 = 1, for rows at large residuals, curvature ~0).
  xb[0], yb[0] = np.eye(D)[0], 0.0
  xc, yc = xb.copy(), yb.copy()
  xc[0], yc[0] = np.eye(D)[1], 100.0
  bound = direction_sensitivity(lam, n=n, curvature_norm_bound=1.0, modification="add",
                                curvature_structure="general", neighbouring="replace-one")
  assert bound == 1.0 / (n * lam**2)
  g = jnp.asarray(rng.normal(size=D))
  hb, hc = (losses.newton_step_inputs(loss, w, jnp.asarray(u), jnp.asarray(v)).hessian
            for u, v in ((xb, yb), (xc, yc)))
  eye = jnp.eye(D)
  move = jnp.linalg.norm(jnp.linalg.solve(hb + lam * eye, g) - jnp.linalg.solve(hc + lam * eye, g))
  assert float(move) <= float(jnp.linalg.norm(g)) * bound
