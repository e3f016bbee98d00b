"""Tests for dpjax.transforms.dp_precond_gd: PDPGD (curvature-preconditioned DP-GD)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import Z_MAX, maybe_jit, scale_z
from dpjax import accounting, data
from dpjax.mechanisms import noise
from dpjax.problem import glm, solve
from dpjax.transforms.dp_precond_gd import (
    DPPrecondGDState,
    clipped_inverse,
    dp_precond_gd,
    precond_budget,
)

def _spd(evals, seed=0):
  """``Q diag(evals) Q^T`` (float64, exactly symmetric) with a random orthogonal Q."""
  d = len(evals)
  q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
  h = (q * np.asarray(evals, np.float64)) @ q.T
  return 0.5 * (h + h.T)


def _clip_inv_np(h, floor):
  """Reference (float64 numpy) ``U diag(1 / max(lambda, floor)) U^T``."""
  evals, evecs = np.linalg.eigh(np.asarray(h, np.float64))
  return (evecs / np.maximum(evals, floor)) @ evecs.T


def _floor(n, d, rho_release, kappa=3.0, bound=0.25):
  return kappa * math.sqrt(2 * d) * accounting.gaussian_sigma(bound / n, rho_release)


def _close(actual, expected, rtol=1e-4):
  expected = np.asarray(expected, np.float64)
  np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * np.abs(expected).max())


# ----------------------------------------------------------------------------
# 1. The noiseless step and the release schedule.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [True, False])
def test_noiseless_step_is_minus_eta_clipped_inverse_times_gradient(jit):
  n, rho, steps, kappa, lr = 200, 1.0, 5, 3.0, 0.7
  h = _spd([0.2, 0.08, 0.01, 0.001], seed=1)
  floor = _floor(n, 4, 0.03 * rho, kappa)
  assert 0.01 < floor < 0.08  # two eigenvalues are clipped, two are kept
  p = _clip_inv_np(h, floor)
  tx = dp_precond_gd(n=n, rho=rho, steps=steps, kappa=kappa, learning_rate=lr, key=0,
                     disable_noise_for_testing=True)
  first = maybe_jit(lambda g, s, h: tx.update(g, s, curvature_matrix=h), jit)
  plain = maybe_jit(lambda g, s: tx.update(g, s), jit)
  g1, g2 = np.array([0.3, -0.1, 0.2, 0.05]), np.array([-0.02, 0.4, 0.1, -0.3])
  out, state = first(jnp.asarray(g1, jnp.float32), tx.init(jnp.zeros(4)),
                     jnp.asarray(h, jnp.float32))
  _close(out, -lr * p @ g1)
  _close(state.preconditioner, p)
  np.testing.assert_allclose(float(state.eigenvalue_floor), floor, rtol=1e-6)
  out, state = plain(jnp.asarray(g2, jnp.float32), state)  # no release: same P
  _close(out, -lr * p @ g2)
  assert int(state.count) == 2 and int(state.releases) == 1
  assert float(state.noise_std) == 0.0 and float(state.curvature_noise_std) == 0.0


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("refresh_every", [None, 2])
def test_release_schedule_and_matrix_ignored_off_schedule(jit, refresh_every):
  """A matrix on every step (a scan's way): released only at 0 (and 2, 4 with refresh)."""
  n, rho, steps, d = 100, 2.0, 5, 3
  b = precond_budget(rho, steps=steps, refresh_every=refresh_every)
  floor = _floor(n, d, b.rho_release)
  mats = [_spd([0.15 * (t + 1), 0.02, 0.001], seed=t) for t in range(steps)]
  tx = dp_precond_gd(n=n, rho=rho, steps=steps, refresh_every=refresh_every, key=1,
                     disable_noise_for_testing=True)
  step = maybe_jit(lambda g, s, h: tx.update(g, s, curvature_matrix=h), jit)
  state = tx.init(jnp.zeros(d))
  g = np.array([0.1, -0.2, 0.3])
  for t in range(steps):
    out, state = step(jnp.asarray(g, jnp.float32), state, jnp.asarray(mats[t], jnp.float32))
    last = 0 if refresh_every is None else t - t % refresh_every
    p = _clip_inv_np(mats[last], floor)
    _close(state.preconditioner, p)
    _close(out, -p @ g)
    np.testing.assert_array_equal(state.released_curvature, np.float32(mats[last]))
    assert int(state.releases) == (1 if refresh_every is None else t // refresh_every + 1)
  assert int(state.releases) == b.releases


# ----------------------------------------------------------------------------
# 2. Accounting.
# ----------------------------------------------------------------------------


_ACC_RHO, _ACC_STEPS, _ACC_FRAC = 0.0143935, 7, 0.05
_ACCOUNTANT_TX = {}


def _accountant_tx(refresh_every, jit):
  """(tx, update with the matrix, update without) of test_accountant_charges_and_total, built
  once per (refresh_every, jit): both always_pass cases run the same compiled programs."""
  if (refresh_every, jit) not in _ACCOUNTANT_TX:
    tx = dp_precond_gd(n=1000, rho=_ACC_RHO, steps=_ACC_STEPS, curvature_frac=_ACC_FRAC,
                       refresh_every=refresh_every, key=0)
    _ACCOUNTANT_TX[refresh_every, jit] = (
        tx, maybe_jit(lambda g, s, h: tx.update(g, s, curvature_matrix=h), jit),
        maybe_jit(lambda g, s: tx.update(g, s), jit))
  return _ACCOUNTANT_TX[refresh_every, jit]


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("always_pass", [True, False])
@pytest.mark.parametrize("refresh_every", [None, 1, 3, 10])  # 10 > steps: one release, like None
def test_accountant_charges_and_total(jit, always_pass, refresh_every):
  """Each step charges rho_g, each release rho_H; the total is rho; K = ceil(m / r)."""
  rho, steps, frac, d = _ACC_RHO, _ACC_STEPS, _ACC_FRAC, 3
  k = 1 if refresh_every is None else math.ceil(steps / refresh_every)
  rho_h, rho_g = frac * rho / k, (1 - frac) * rho / steps
  tx, with_h, without = _accountant_tx(refresh_every, jit)
  h = jnp.asarray(_spd([0.2, 0.1, 0.05]), jnp.float32)
  state = tx.init(jnp.zeros(d))
  spent = 0.0
  for t in range(steps):
    release = t == 0 or (refresh_every is not None and t % refresh_every == 0)
    if always_pass or release:
      _, state = with_h(jnp.ones(d), state, h)
    else:
      _, state = without(jnp.ones(d), state)
    now = accounting.spent_rho(state.accountant)
    assert abs((now - spent) - (rho_g + (rho_h if release else 0.0))) <= 1e-12 * rho
    spent = now
  assert int(state.releases) == k and int(state.count) == steps
  assert abs(accounting.spent_rho(state.accountant) - rho) <= 1e-12 * rho
  assert abs(float(optax.tree.get(state, "rho")) - rho) <= 1e-6 * rho
  assert not bool(state.budget_exhausted) and not bool(state.curvature_missing)


def test_precond_budget_split():
  b = precond_budget(1.0, steps=10, curvature_frac=0.03, refresh_every=4)
  assert b.releases == 3
  assert b.rho_release == pytest.approx(0.01, rel=1e-15)
  assert b.rho_step == pytest.approx(0.097, rel=1e-15)
  assert precond_budget(2.0, steps=3).releases == 1
  assert precond_budget(2.0, steps=3, refresh_every=3).releases == 1
  assert precond_budget(2.0, steps=3, refresh_every=2).releases == 2
  total = b.releases * b.rho_release + 10 * b.rho_step
  assert abs(total - 1.0) <= 1e-15


@pytest.mark.parametrize("jit", [True, False])
def test_budget_exhaustion(jit):
  tx = dp_precond_gd(n=10, rho=1.0, steps=2, key=0)
  step = maybe_jit(lambda g, s, h: tx.update(g, s, curvature_matrix=h), jit)
  h = jnp.eye(2) * 0.1
  state = tx.init(jnp.zeros(2))
  for _ in range(2):
    _, state = step(jnp.ones(2), state, h)
  if not jit:
    with pytest.raises(ValueError, match="budget exhausted: dp_precond_gd was built for steps=2"):
      step(jnp.ones(2), state, h)
    return
  out, after = step(jnp.full(2, jnp.nan), state, h)
  np.testing.assert_array_equal(out, np.zeros(2))
  assert bool(after.budget_exhausted) and int(after.count) == 2 and int(after.releases) == 1
  assert accounting.spent_rho(after.accountant) == accounting.spent_rho(state.accountant)


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("refresh_every", [None, 2])
def test_release_step_without_matrix_is_refused(jit, refresh_every):
  tx = dp_precond_gd(n=10, rho=1.0, steps=4, refresh_every=refresh_every, key=0)
  with_h = maybe_jit(lambda g, s, h: tx.update(g, s, curvature_matrix=h), jit)
  without = maybe_jit(lambda g, s: tx.update(g, s), jit)
  h = jnp.eye(2) * 0.1
  state = tx.init(jnp.zeros(2))
  if refresh_every is not None:  # refuse the refresh at step 2, not step 0
    for _ in range(2):
      _, state = with_h(jnp.ones(2), state, h)
  if not jit:
    with pytest.raises(ValueError, match="curvature release step.*curvature_matrix is None"):
      without(jnp.ones(2), state)
    return
  out, after = without(jnp.ones(2), state)
  np.testing.assert_array_equal(out, np.zeros(2))
  assert bool(after.curvature_missing) and not bool(after.budget_exhausted)
  assert int(after.count) == int(state.count) and int(after.releases) == int(state.releases)
  assert accounting.spent_rho(after.accountant) == accounting.spent_rho(state.accountant)
  out, after = with_h(jnp.ones(2), after, h)  # the same step with the matrix runs
  assert int(after.count) == int(state.count) + 1 and np.all(np.asarray(out) != 0)


# ----------------------------------------------------------------------------
# 3, 4. Noise scales.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [True, False])
def test_gradient_noise_scale(jit):
  """Zero gradient: P^{-1} out / -eta is the gradient noise, N(0, s^2 I)."""
  n, d, k, rho, steps, lr = 500, 20, 2000, 0.3, 3, 0.5
  h = jnp.asarray(_spd(np.linspace(0.02, 0.2, d), seed=2), jnp.float32)

  def draw(key):
    tx = dp_precond_gd(n=n, rho=rho, steps=steps, learning_rate=lr, key=key)
    out, state = tx.update(jnp.zeros(d), tx.init(jnp.zeros(d)), curvature_matrix=h)
    return out, state.preconditioner, state.noise_std

  keys = jax.random.split(jax.random.key(5), k)
  out, p, noise_std = maybe_jit(jax.vmap(draw), jit)(keys)
  s = (1 / n) / math.sqrt(2 * (0.97 * rho / steps))
  np.testing.assert_allclose(noise_std, s, rtol=1e-6)
  p64 = np.asarray(p, np.float64)
  noise = np.linalg.solve(p64, np.asarray(out, np.float64)[..., None])[..., 0] / -lr
  assert abs(scale_z(noise, s**2)) < Z_MAX
  assert abs(scale_z(noise, (1.1 * s) ** 2)) > Z_MAX  # a 10% wrong std is rejected
  assert abs(scale_z(noise, (s / 1.1) ** 2)) > Z_MAX
  assert np.all(np.abs(noise.mean(axis=0)) < Z_MAX * s / math.sqrt(k))
  # Isotropic: every coordinate has variance s^2 (rel. std sqrt(2/k)) and the
  # coordinates are uncorrelated (sample correlation ~ N(0, 1/k)); 5 sigma
  # over the 20 variances and 190 pairs.
  var_z = (noise.var(axis=0) / s**2 - 1) / math.sqrt(2 / k)
  assert np.all(np.abs(var_z) < 5)
  corr = np.corrcoef(noise.T)[np.triu_indices(d, 1)]
  assert np.all(np.abs(corr) < 5 / math.sqrt(k))


@pytest.mark.parametrize("jit", [True, False])
def test_curvature_noise_scale(jit):
  """released - H: std sigma_H on the diagonal, sigma_H / sqrt(2) off it, symmetric."""
  n, d, k, rho = 100, 8, 2000, 2.0
  h64 = _spd(np.linspace(0.01, 0.2, d), seed=3)
  h = jnp.asarray(h64, jnp.float32)

  def draw(key):
    tx = dp_precond_gd(n=n, rho=rho, steps=4, key=key)
    _, state = tx.update(jnp.zeros(d), tx.init(jnp.zeros(d)), curvature_matrix=h)
    return state.released_curvature, state.curvature_noise_std

  keys = jax.random.split(jax.random.key(6), k)
  rel, std = maybe_jit(jax.vmap(draw), jit)(keys)
  sigma_h = accounting.gaussian_sigma(0.25 / n, 0.03 * rho)
  np.testing.assert_allclose(std, sigma_h, rtol=1e-6)
  rel = np.asarray(rel)
  np.testing.assert_array_equal(rel, np.swapaxes(rel, 1, 2))  # exactly symmetric
  e = rel.astype(np.float64) - np.asarray(h, np.float64)
  diag = e[:, np.arange(d), np.arange(d)]
  iu = np.triu_indices(d, 1)
  off = e[:, iu[0], iu[1]]
  assert abs(scale_z(diag, sigma_h**2)) < Z_MAX
  assert abs(scale_z(diag, (1.1 * sigma_h) ** 2)) > Z_MAX
  assert abs(scale_z(diag, (sigma_h / 1.1) ** 2)) > Z_MAX
  assert abs(scale_z(off, sigma_h**2 / 2)) < Z_MAX
  assert abs(scale_z(off, sigma_h**2)) > Z_MAX  # off-diagonal std is NOT sigma_H
  assert abs(scale_z(off, (1.1 * sigma_h) ** 2 / 2)) > Z_MAX
  assert np.all(np.abs(e.mean(axis=0)) < Z_MAX * sigma_h / math.sqrt(k))
  # The d(d+1)/2 released coordinates are uncorrelated (two pairs checked).
  for a, b in [(diag[:, 0], off[:, 0]), (off[:, 0], off[:, 1])]:
    assert abs(np.corrcoef(a, b)[0, 1]) < Z_MAX / math.sqrt(k)


# ----------------------------------------------------------------------------
# 5, 6. The preconditioner: a function of the release, clipped at the floor.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [True, False])
def test_preconditioner_depends_only_on_released_values(x64, jit, monkeypatch):
  """Two true matrices far apart with the same release give the same P.

  The release is forced equal by replacing the noise module's symmetric
  release with one that returns a fixed matrix: whatever P is computed from
  must then be identical.
  """
  n, d, rho = 200, 4, 1.0
  from dpjax.mechanisms import noise
  fixed = jnp.asarray(_spd([0.2, 0.05, 0.01, -0.003], seed=9))
  seen = []

  def fake_release(key, h, **kwargs):
    seen.append(kwargs)
    return fixed.astype(h.dtype)

  monkeypatch.setattr(noise, "add_gaussian_symmetric", fake_release)

  def release(h, key):
    tx = dp_precond_gd(n=n, rho=rho, steps=2, key=key)
    _, state = tx.update(jnp.zeros(d), tx.init(jnp.zeros(d)), curvature_matrix=h)
    return state.released_curvature, state.preconditioner, state.eigenvalue_floor

  run = maybe_jit(release, jit)
  h1 = jnp.asarray(_spd([0.25, 0.1, 0.02, 0.0], seed=4))
  h2 = jnp.asarray(_spd([0.01, 0.3, 0.2, 0.1], seed=5))
  r1, p1, f1 = run(h1, jax.random.key(1))
  r2, p2, f2 = run(h2, jax.random.key(2))
  assert seen and seen[0]["sensitivity"] == pytest.approx(0.25 / n)
  assert seen[0]["noise_std"] == pytest.approx(accounting.gaussian_sigma(0.25 / n, 0.03 * rho))
  np.testing.assert_array_equal(r1, r2)
  np.testing.assert_array_equal(p1, p2)
  assert float(f1) == float(f2) == pytest.approx(_floor(n, d, 0.03 * rho), rel=1e-12)
  # P is the stored function of the stored release: clipped_inverse(H~, floor).
  for r, p, f in [(r1, p1, f1), (r2, p2, f2)]:
    np.testing.assert_allclose(clipped_inverse(r, f), p, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(p, _clip_inv_np(r, float(f)), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("kappa", [1.5, 6.0])
def test_eigen_clip_floor(jit, kappa):
  """eig(P^{-1}) = max(eig(H~), kappa sqrt(2d) sigma_H) >= the floor, for every key."""
  n, d, k, rho = 100, 6, 200, 1.0
  h = jnp.asarray(_spd([0.3, 0.1, 1e-3, 1e-4, 0.0, 0.0], seed=5), jnp.float32)

  def draw(key):
    tx = dp_precond_gd(n=n, rho=rho, steps=3, kappa=kappa, key=key)
    _, state = tx.update(jnp.zeros(d), tx.init(jnp.zeros(d)), curvature_matrix=h)
    return state.released_curvature, state.preconditioner, state.eigenvalue_floor

  rel, p, floors = maybe_jit(jax.vmap(draw), jit)(jax.random.split(jax.random.key(7), k))
  sigma_h = accounting.gaussian_sigma(0.25 / n, 0.03 * rho)
  floor = kappa * math.sqrt(2 * d) * sigma_h
  np.testing.assert_allclose(floors, floor, rtol=1e-6)
  inv_eigs = 1 / np.linalg.eigvalsh(np.asarray(p, np.float64))  # eig(P^{-1}), all > 0
  assert np.all(inv_eigs >= floor * (1 - 1e-5))
  want = np.maximum(np.linalg.eigvalsh(np.asarray(rel, np.float64)), floor)
  np.testing.assert_allclose(np.sort(inv_eigs, axis=1), want, rtol=1e-4)
  # The true spectrum has small eigenvalues: the floor binds in every draw.
  assert np.all(np.sum(np.abs(inv_eigs / floor - 1) < 1e-4, axis=1) >= 2)
  # The floor is kappa times the typical operator norm sqrt(2d) sigma_H of the noise.
  noise_norm = np.linalg.norm(np.asarray(rel, np.float64) - np.asarray(h, np.float64), ord=2,
                              axis=(1, 2))
  assert 0.7 < noise_norm.mean() / (math.sqrt(2 * d) * sigma_h) < 1.3


def test_clipped_inverse_function():
  h = _spd([2.0, 0.5, 0.01], seed=8)
  _close(clipped_inverse(jnp.asarray(h, jnp.float32), 0.1), _clip_inv_np(h, 0.1), rtol=1e-5)
  batch = jnp.stack([jnp.asarray(h, jnp.float32)] * 2)
  out = clipped_inverse(batch, jnp.array([0.1, 1.0]))
  _close(out[1], _clip_inv_np(h, 1.0), rtol=1e-5)
  with pytest.raises(ValueError, match="floor must be finite and > 0"):
    clipped_inverse(batch[0], 0.0)
  with pytest.raises(ValueError, match="matrix must be square"):
    clipped_inverse(jnp.zeros((2, 3)), 0.1)


# ----------------------------------------------------------------------------
# 7. Bad input.
# ----------------------------------------------------------------------------

_OK = dict(n=1000, rho=1.0, steps=5, key=0)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(curvature_frac=0.0), ValueError,
         r"curvature_frac must be in the open interval \(0, 1\)"),
        (dict(curvature_frac=1.0), ValueError, "curvature_frac must be in the open interval"),
        (dict(curvature_frac=-0.1), ValueError, "curvature_frac must be in the open interval"),
        (dict(curvature_frac=1.5), ValueError, "curvature_frac must be in the open interval"),
        (dict(curvature_frac="0.1"), TypeError, "curvature_frac must be a real number"),
        (dict(kappa=0.0), ValueError, "kappa must be > 0"),
        (dict(kappa=-3.0), ValueError, "kappa must be > 0"),
        (dict(steps=0), ValueError, "steps must be >= 1"),
        (dict(steps=-2), ValueError, "steps must be >= 1"),
        (dict(steps=5.0), TypeError, "steps must be an integer"),
        (dict(steps=None), ValueError, "steps is required"),
        (dict(rho=None), ValueError, "no privacy budget given"),
        (dict(rho=0.0), ValueError, "rho must be > 0"),
        (dict(rho=math.nan), ValueError, "rho must be finite"),
        (dict(rho=jnp.ones(2)), TypeError, "rho must be a number or a scalar float array"),
        (dict(rho_per_step=0.1), TypeError, "rho_per_step"),
        (dict(refresh_every=0), ValueError, "refresh_every must be >= 1"),
        (dict(refresh_every=-2), ValueError, "refresh_every must be >= 1"),
        (dict(refresh_every=2.0), TypeError, "refresh_every must be an integer"),
        (dict(n=0), ValueError, "n must be >= 1"),
        (dict(n=10.0), TypeError, "n must be an integer"),
        (dict(d=0), ValueError, "d must be >= 1"),
        (dict(learning_rate=0.0), ValueError, "learning_rate must be > 0"),
        (dict(grad_norm_bound=-1.0), ValueError, "grad_norm_bound must be > 0"),
        (dict(curvature_norm_bound=0.0), ValueError, "curvature_norm_bound must be > 0"),
        (dict(disable_noise_for_testing=1), TypeError,
         "disable_noise_for_testing must be True or False"),
        (dict(neighbouring="add/remove"), ValueError, "neighbouring must be one of"),
        (dict(neighbouring=2), TypeError, "neighbouring must be one of"),
    ],
)
def test_constructor_rejects_bad_input(kwargs, error, match):
  with pytest.raises(error, match=match):
    dp_precond_gd(**{**_OK, **kwargs})


def test_update_rejects_bad_input():
  tx = dp_precond_gd(**_OK, d=3)
  with pytest.raises(ValueError, match="params has shape \\(2,\\).*d=3"):
    tx.init(jnp.zeros(2))
  with pytest.raises(TypeError, match="init\\(params\\) needs the parameters"):
    tx.init(None)
  state = tx.init(jnp.zeros(3))
  h = jnp.eye(3) * 0.1
  with pytest.raises(ValueError, match="step 0 is a curvature release step.*curvature_matrix"):
    tx.update(jnp.zeros(3), state)
  with pytest.raises(ValueError, match=r"curvature_matrix has shape \(2, 2\)"):
    tx.update(jnp.zeros(3), state, curvature_matrix=jnp.eye(2))
  with pytest.raises(TypeError, match="curvature_matrix must have a floating dtype"):
    tx.update(jnp.zeros(3), state, curvature_matrix=jnp.eye(3, dtype=jnp.int32))
  with pytest.raises(ValueError, match="curvature_matrix contains NaN"):
    tx.update(jnp.zeros(3), state, curvature_matrix=h.at[0, 1].set(jnp.nan))
  with pytest.raises(ValueError, match="updates must have 1 dimension"):
    tx.update(jnp.zeros((3, 1)), state, curvature_matrix=h)
  with pytest.raises(ValueError, match=r"updates has shape \(2,\).*d=3"):
    tx.update(jnp.zeros(2), state, curvature_matrix=h)
  with pytest.raises(TypeError, match="state must be a DPPrecondGDState"):
    tx.update(jnp.zeros(3), (), curvature_matrix=h)


# ----------------------------------------------------------------------------
# 8. vmap over keys and over a traced rho; optax.chain.
# ----------------------------------------------------------------------------


def _two_steps(tx, h, g, w):
  state = tx.init(w)
  out1, state = tx.update(g, state, w, curvature_matrix=h)
  out2, state = tx.update(-g, state, w)
  return jnp.stack([out1, out2]), state


_H3 = jnp.asarray(_spd([0.2, 0.05, 0.01], seed=9), jnp.float32)
_G3 = jnp.array([0.3, -0.1, 0.2])
_W3 = jnp.zeros(3)


def test_vmap_over_keys_builds_one_transform_per_key():
  keys = jax.random.split(jax.random.key(9), 3)
  make = lambda key: dp_precond_gd(n=500, rho=0.5, steps=4, key=key)
  outs, states = jax.jit(jax.vmap(lambda key: _two_steps(make(key), _H3, _G3, _W3)))(keys)
  for i in range(3):
    ref, ref_state = _two_steps(make(keys[i]), _H3, _G3, _W3)
    _close(outs[i], ref, rtol=1e-5)
    _close(states.preconditioner[i], ref_state.preconditioner, rtol=1e-5)
  assert not np.allclose(outs[0], outs[1])
  b = precond_budget(0.5, steps=4)
  np.testing.assert_allclose(accounting.spent_rho(states.accountant),
                             b.rho_release + 2 * b.rho_step, rtol=1e-12)


@pytest.mark.parametrize("refresh_every", [None, 2])
def test_traced_rho_matches_python_rho(refresh_every):
  """One program for several privacy levels (transform built inside vmap over rho)."""
  rhos = [0.05, 0.5, 5.0]
  steps = 4

  def run(rho, h):
    tx = dp_precond_gd(n=300, rho=rho, steps=steps, refresh_every=refresh_every, key=3)

    def body(s, _):  # the matrix on every step, as a scan passes it
      out, s = tx.update(_G3, s, _W3, curvature_matrix=h)
      return s, out

    state, outs = jax.lax.scan(body, tx.init(_W3), None, length=steps)
    return outs, state

  # The traced-rho runs (vmapped) and the Python-rho references in one compiled program.
  (outs, states), refs = jax.jit(lambda r, h: (jax.vmap(run, in_axes=(0, None))(r, h),
                                               [run(rho, h) for rho in rhos]))(
      jnp.asarray(rhos, jnp.float32), _H3)
  for i, rho in enumerate(rhos):
    ref, ref_state = refs[i]
    _close(outs[i], ref, rtol=1e-4)
    np.testing.assert_allclose(states.noise_std[i], ref_state.noise_std, rtol=1e-6)
    np.testing.assert_allclose(states.eigenvalue_floor[i], ref_state.eigenvalue_floor, rtol=1e-6)
  np.testing.assert_allclose(accounting.spent_rho(states.accountant), rhos, rtol=1e-6)
  assert np.all(np.asarray(states.releases) == (1 if refresh_every is None else 2))


def test_chain_forwards_the_matrix_and_ignores_other_extra_args():
  tx = dp_precond_gd(n=500, rho=0.5, steps=3, key=4)
  chained = optax.chain(dp_precond_gd(n=500, rho=0.5, steps=3, key=4), optax.identity())
  plain, _ = _two_steps(tx, _H3, _G3, _W3)
  state = chained.init(_W3)
  step = jax.jit(lambda s, g: chained.update(g, s, _W3, curvature_matrix=_H3, value=1.0))
  out1, state = step(state, _G3)
  out2, state = step(state, -_G3)  # the matrix is ignored off the release step
  _close(jnp.stack([out1, out2]), plain, rtol=1e-5)
  assert isinstance(state[0], DPPrecondGDState) and int(state[0].releases) == 1


# ----------------------------------------------------------------------------
# 9. float32 and float64.
# ----------------------------------------------------------------------------


def test_float32_and_float64_agree(x64):
  h = _spd([0.3, 0.05, 0.002], seed=10)
  g = np.array([0.1, -0.2, 0.05])
  results = {}
  for dt in (jnp.float32, jnp.float64):
    tx = dp_precond_gd(n=100, rho=1.0, steps=3, key=0, disable_noise_for_testing=True)
    w = jnp.zeros(3, dt)
    outs, state = _two_steps(tx, jnp.asarray(h, dt), jnp.asarray(g, dt), w)
    assert outs.dtype == dt and state.preconditioner.dtype == dt
    assert state.released_curvature.dtype == dt and state.eigenvalue_floor.dtype == dt
    results[dt] = (np.asarray(outs), np.asarray(state.preconditioner))
  _close(results[jnp.float32][0], results[jnp.float64][0], rtol=1e-5)
  _close(results[jnp.float32][1], results[jnp.float64][1], rtol=1e-5)
  p = _clip_inv_np(h, _floor(100, 3, 0.03))
  _close(results[jnp.float64][0], np.stack([-p @ g, p @ g]), rtol=1e-10)


# ----------------------------------------------------------------------------
# 10. End to end on synthetic data.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("refresh_every", [None, 5])
def test_end_to_end_reduces_logistic_loss(refresh_every):
  n, d, rho, steps = 2000, 10, 0.5, 20
  x, y = (jnp.asarray(a) for a in data.synthetic(11, n=n, d=d))
  h0 = glm.logistic_grad_and_curvature(jnp.zeros(d), x, y, "qu").matrix
  _close(h0, (x.T @ x) / (4 * n), rtol=1e-5)  # X^T X / (4n) at w = 0

  def run(key):
    tx = dp_precond_gd(n=n, rho=rho, steps=steps, refresh_every=refresh_every, key=key)

    def body(carry, _):
      w, s = carry
      _, g, h = glm.logistic_grad_and_curvature(w, x, y, "qu")  # refresh at the iterate
      u, s = tx.update(g, s, w, curvature_matrix=h)
      return (optax.apply_updates(w, u), s), None

    w0 = jnp.zeros(d)
    (w, state), _ = jax.lax.scan(body, (w0, tx.init(w0)), None, length=steps)
    return glm.logistic_loss(w, x, y), state

  losses, states = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(12), 4))
  start = float(glm.logistic_loss(jnp.zeros(d), x, y))
  best = solve.logistic_optimum(np.asarray(x, np.float64), np.asarray(y, np.float64)).loss
  excess = np.asarray(losses, np.float64) - best
  assert np.all(excess < 0.1 * (start - best)), (excess, start - best)
  np.testing.assert_allclose(accounting.spent_rho(states.accountant), rho, rtol=1e-12)
  k = 1 if refresh_every is None else 4
  assert np.all(np.asarray(states.releases) == k) and np.all(np.asarray(states.count) == steps)


# ----------------------------------------------------------------------------
# 8. Neighbouring relations: zero-out (default) and replace-one.
# ----------------------------------------------------------------------------


def test_replace_one_scales_gradient_noise_by_2_and_curvature_noise_by_sqrt2(x64):
  n, d, rho = 100, 4, 2.0
  h = jnp.asarray(_spd(np.linspace(0.01, 0.2, d), seed=1))
  out = {}
  for rel in ("zero-out", "replace-one"):
    tx = dp_precond_gd(n=n, rho=rho, steps=4, key=3, neighbouring=rel)
    w = jnp.zeros(d)
    _, state = tx.update(jnp.zeros(d), tx.init(w), curvature_matrix=h)
    out[rel] = state
  z, r = out["zero-out"], out["replace-one"]
  b = precond_budget(rho, steps=4)
  assert float(z.noise_std) == accounting.gaussian_sigma(1 / n, b.rho_step)
  assert float(z.curvature_noise_std) == accounting.gaussian_sigma(0.25 / n, b.rho_release)
  assert float(r.noise_std) == 2 * float(z.noise_std)
  assert float(r.curvature_noise_std) == pytest.approx(
      math.sqrt(2) * float(z.curvature_noise_std), rel=1e-15)
  # The floor kappa sqrt(2 d) sigma_H follows sigma_H.
  assert float(r.eigenvalue_floor) == pytest.approx(math.sqrt(2) * float(z.eigenvalue_floor),
                                                    rel=1e-15)
  # The exact sampler adds noise of std sqrt(2) sigma_H (to its rounding margin).
  eff = [noise.effective_std(h, sensitivity=f * 0.25 / n, noise_std=f * float(z.curvature_noise_std))
         for f in (1.0, math.sqrt(2))]
  assert eff[1] / eff[0] == pytest.approx(math.sqrt(2), rel=1e-3)
  assert float(z.curvature_noise_std) <= eff[0] <= 1.001 * float(z.curvature_noise_std)


# The reference is called 400 times: jitted (one program per shape), not dispatched op by op.
_hessian_matrix = jax.jit(lambda w, x, y: glm.logistic_grad_and_curvature(w, x, y,
                                                                          "hessian").matrix)


def _mean_curvature(w, x, y):
  return np.asarray(_hessian_matrix(jnp.asarray(w), jnp.asarray(x), jnp.asarray(y)))


def test_replace_one_curvature_sensitivity_is_sqrt2_not_2(x64):
  """Replace-one pairs move the mean curvature by at most sqrt(2) L1 / n in Frobenius norm
  (two PSD terms: <A, A'> >= 0), attained by rows on orthogonal directions at margin 0;
  the released std is calibrated to exactly that."""
  n, d, rho = 12, 3, 1.0
  x, y = data.synthetic(2, n=n, d=d)
  x, y = np.array(x, np.float64), np.array(y, np.float64)
  b = precond_budget(rho, steps=2)
  stated = {rel: float(dp_precond_gd(n=n, rho=rho, steps=2, key=0, neighbouring=rel)
                       .init(jnp.zeros(d)).curvature_noise_std) * math.sqrt(2 * b.rho_release)
            for rel in ("zero-out", "replace-one")}
  w = np.zeros(d)
  # Adversarial pair: e_1 and e_2 at margin 0, each with curvature (1/4) e e^T.
  xa, xb = x.copy(), x.copy()
  xa[0], xb[0] = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0)
  change = np.linalg.norm(_mean_curvature(w, xa, y) - _mean_curvature(w, xb, y))
  assert change == pytest.approx(math.sqrt(2) * 0.25 / n, rel=1e-12)
  assert change <= stated["replace-one"] * (1 + 1e-12)
  assert change > 1.4 * stated["zero-out"]  # zero-out's noise would be too small here.
  # Random replace-one pairs at random points never exceed it.
  rng = np.random.default_rng(0)
  worst = 0.0
  for _ in range(200):
    w = rng.normal(size=d) * rng.choice([0.1, 1.0, 10.0])
    xa[0], xb[0] = (v / max(1.0, np.linalg.norm(v)) for v in rng.normal(size=(2, d)))
    worst = max(worst, np.linalg.norm(_mean_curvature(w, xa, y) - _mean_curvature(w, xb, y)))
  assert worst <= stated["replace-one"] * (1 + 1e-12)
