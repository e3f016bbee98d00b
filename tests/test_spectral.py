"""Tests for dpjax.problem.spectral: the eigenvalue modification Psi_lambda."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.problem import spectral


def _random_psd(rng, d, rank=None, batch=()):
  rank = d if rank is None else rank
  a = rng.normal(size=batch + (d, rank))
  return a @ np.swapaxes(a, -1, -2) / rank


def _psi_ref(h, lam, mode):
  """float64 numpy reference of Def. 5.4."""
  h = np.asarray(h, np.float64)
  evals, evecs = np.linalg.eigh(h)
  if mode == "clip":
    evals = np.maximum(evals, lam)
  else:
    evals = evals + lam
  return (evecs * evals) @ evecs.T


def _maybe_jit(fn, jit):
  return jax.jit(fn, static_argnames=("mode",)) if jit else fn


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("mode", ["clip", "add"])
def test_matches_float64_reference(jit, mode, x64):
  rng = np.random.default_rng(0)
  h = _random_psd(rng, 7, rank=3)
  g = rng.normal(size=7)
  lam = 0.05
  psi = _psi_ref(h, lam, mode)
  m = _maybe_jit(spectral.modify_eigenvalues, jit)(h, lam, mode=mode)
  x = _maybe_jit(spectral.modified_solve, jit)(h, g, lam, mode=mode)
  np.testing.assert_allclose(m, psi, rtol=1e-12, atol=1e-13)
  np.testing.assert_allclose(x, np.linalg.solve(psi, g), rtol=1e-10)
  assert np.array_equal(np.asarray(m), np.asarray(m).T)


@pytest.mark.parametrize("mode", ["clip", "add"])
def test_float32_agrees_with_float64(mode):
  rng = np.random.default_rng(1)
  h = _random_psd(rng, 20, rank=5)
  g = rng.normal(size=20)
  lam = 0.1
  x32 = spectral.modified_solve(h.astype(np.float32), g.astype(np.float32), lam, mode)
  assert x32.dtype == jnp.float32
  ref = np.linalg.solve(_psi_ref(h, lam, mode), g)
  np.testing.assert_allclose(x32, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("mode", ["clip", "add"])
def test_batched_matrices_and_lambdas(jit, mode):
  rng = np.random.default_rng(2)
  h = _random_psd(rng, 6, rank=2, batch=(3, 4)).astype(np.float32)
  g = rng.normal(size=(3, 4, 6)).astype(np.float32)
  lam = np.linspace(0.01, 0.5, 12).reshape(3, 4).astype(np.float32)
  solve = _maybe_jit(spectral.modified_solve, jit)
  x = solve(h, g, lam, mode=mode)
  m = _maybe_jit(spectral.modify_eigenvalues, jit)(h, lam, mode=mode)
  assert x.shape == (3, 4, 6) and m.shape == (3, 4, 6, 6)
  for i in range(3):
    for j in range(4):
      psi = _psi_ref(h[i, j], lam[i, j], mode)
      np.testing.assert_allclose(m[i, j], psi, rtol=1e-4, atol=1e-5)
      np.testing.assert_allclose(x[i, j], np.linalg.solve(psi, g[i, j]), rtol=1e-3, atol=1e-3)
  # vmap over the leading axis gives the same answer as native batching.
  xv = jax.vmap(lambda hh, gg, ll: spectral.modified_solve(hh, gg, ll, mode))(h, g, lam)
  np.testing.assert_allclose(xv, x, rtol=1e-5, atol=1e-6)
  # A scalar lam and a single g broadcast against a batch of matrices.
  xs = solve(h, g[0, 0], 0.2, mode=mode)
  assert xs.shape == (3, 4, 6)
  np.testing.assert_allclose(
      xs[2, 1], np.linalg.solve(_psi_ref(h[2, 1], 0.2, mode), g[0, 0]), rtol=1e-3, atol=1e-4
  )


def test_vmap_over_lambda_only():
  rng = np.random.default_rng(3)
  h = _random_psd(rng, 5, rank=2).astype(np.float32)
  g = rng.normal(size=5).astype(np.float32)
  lams = jnp.array([0.01, 0.1, 1.0])
  out = jax.vmap(lambda l: spectral.modified_solve(h, g, l, "clip"))(lams)
  for k, lam in enumerate(np.asarray(lams)):
    np.testing.assert_allclose(
        out[k], np.linalg.solve(_psi_ref(h, lam, "clip"), g), rtol=1e-3, atol=1e-4
    )


@pytest.mark.parametrize("mode", ["clip", "add"])
def test_degenerate_spectra(mode, x64):
  d = 6
  lam = 0.3
  g = np.arange(1.0, d + 1)
  # Zero matrix: Psi is lam * I in both modes.
  np.testing.assert_allclose(spectral.modified_solve(np.zeros((d, d)), g, lam, mode), g / lam)
  # Rank one (a single example's curvature) and repeated eigenvalues.
  u = np.ones(d) / np.sqrt(d)
  for h in (0.25 * np.outer(u, u), 2.0 * np.eye(d), np.diag([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])):
    np.testing.assert_allclose(
        spectral.modified_solve(h, g, lam, mode),
        np.linalg.solve(_psi_ref(h, lam, mode), g),
        rtol=1e-10,
    )


@pytest.mark.parametrize("jit", [True, False])
def test_round_off_negative_eigenvalues(jit, x64):
  rng = np.random.default_rng(4)
  q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
  evals = np.array([1.0, 0.5, 0.0, -1e-9, -1e-6])  # round-off below zero
  h = (q * evals) @ q.T
  g = rng.normal(size=5)
  solve = _maybe_jit(spectral.modified_solve, jit)
  # clip: lifted to lam.
  clip = solve(h, g, 1e-3, mode="clip")
  np.testing.assert_allclose(clip, (q / np.maximum(evals, 1e-3)) @ (q.T @ g), rtol=1e-8)
  # add with lam smaller than the negative round-off: Cholesky breaks down and the
  # solve falls back to clamping the spurious negative eigenvalues at zero.
  add = solve(h, g, 1e-7, mode="add")
  assert np.all(np.isfinite(add))
  np.testing.assert_allclose(add, (q / (np.maximum(evals, 0.0) + 1e-7)) @ (q.T @ g), rtol=1e-6)
  # Same inside a batch (per-element select instead of cond).
  batch = solve(np.stack([h, np.eye(5)]), g, 1e-7, mode="add")
  np.testing.assert_allclose(batch[0], add, rtol=1e-6)
  np.testing.assert_allclose(batch[1], g / (1 + 1e-7), rtol=1e-12)


@pytest.mark.parametrize("mode,bound", [
    ("add", lambda n, lam: 1.0 / (4 * n * lam**2 + lam)),
    ("clip", lambda n, lam: 1.0 / (4 * n * lam**2 - lam)),
])
def test_inverse_sensitivity_bound(mode, bound, x64):
  """||Psi(H)^-1 - Psi(H')^-1||_op <= Algorithm 3's constants for a rank-1 neighbour."""
  rng = np.random.default_rng(5)
  n, d, trials = 50, 4, 400
  hs, h2s, lams = [], [], []
  for _ in range(trials):
    h = _random_psd(rng, d, rank=rng.integers(1, d + 1)) * rng.uniform(0, 0.3)
    x = rng.normal(size=d)
    x /= np.linalg.norm(x)
    hs.append(h)
    h2s.append(h + rng.uniform(0, 0.25) * np.outer(x, x) / n)
    lams.append(rng.uniform(1.0 / (4 * n) * 1.01, 0.2))
  lams = np.array(lams)
  eye = np.broadcast_to(np.eye(d), (trials, d, d))
  # Columns of the inverse: solve against each basis vector, batched over trials.
  inv = lambda hh: np.asarray(spectral.modified_solve(hh[:, None], eye, lams[:, None], mode))
  diff = inv(np.array(hs)) - inv(np.array(h2s))
  ratios = np.linalg.norm(diff, 2, axis=(1, 2)) / bound(n, lams)
  worst = ratios.max()
  assert 0.2 < worst <= 1.0 + 1e-9, worst  # the bound is attained up to a constant


def test_bad_inputs():
  h = np.eye(3, dtype=np.float32)
  g = np.ones(3, np.float32)
  with pytest.raises(ValueError, match="mode must be one of"):
    spectral.modified_solve(h, g, 0.1, "cap")
  with pytest.raises(ValueError, match="lam must be finite and > 0"):
    spectral.modified_solve(h, g, 0.0)
  with pytest.raises(ValueError, match="lam must be finite and > 0"):
    spectral.modify_eigenvalues(h, np.array([0.1, -0.1, 0.1]), "clip")
  with pytest.raises(ValueError, match="h must be a square matrix"):
    spectral.modified_solve(np.ones((3, 2), np.float32), g, 0.1)
  with pytest.raises(ValueError, match="g must have shape"):
    spectral.modified_solve(h, np.ones(4, np.float32), 0.1)
  with pytest.raises(ValueError, match="h contains NaN or inf"):
    spectral.modified_solve(h * np.nan, g, 0.1)
  with pytest.raises(ValueError, match="g contains NaN or inf"):
    spectral.modified_solve(h, g * np.inf, 0.1)
  with pytest.raises(TypeError, match="h must have a floating dtype"):
    spectral.modified_solve(np.eye(3, dtype=np.int32), g, 0.1)
  with pytest.raises(ValueError, match="lam must be a scalar or broadcast"):
    spectral.modified_solve(np.stack([h, h]), g, np.ones(3, np.float32))


_DEADLOCK_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np, optax
jax.config.update("jax_enable_x64", True)
from dpjax import data, dp_newton
from dpjax.problem import glm
ds = data.synthetic(0, dtype=np.float64)
x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
n, d = x.shape
tx = dp_newton(n=n, rho_per_step=1.0, modification="add", min_eigenvalue=1e-6, key=0,
               disable_noise_for_testing=True)

def run(w0):
  def body(carry, _):
    w, state = carry
    _, g, h = glm.logistic_grad_and_curvature(w, x, y, "hessian")
    u, state = tx.update(g, state, w, curvature_matrix=h)
    return (optax.apply_updates(w, u), state), None
  return jax.lax.scan(body, (w0, tx.init(w0)), None, length=10)[0][0]

out = jax.jit(jax.vmap(run))(jnp.stack([jnp.zeros(d), 5 * jnp.ones(d) / d**0.5]))
print("OK", bool(jnp.all(jnp.isfinite(out))))
"""


def test_vmapped_add_solve_in_scan_does_not_deadlock():
  """Regression: under vmap the add solve's Cholesky and eigh fallback both run.

  Unordered, XLA:CPU's batched potrf and syevd kernels deadlocked on a
  2-thread pool (seen in about half of the runs of this scenario). Run in a
  subprocess so that a hang fails the test instead of stalling the suite.
  """
  proc = subprocess.run([sys.executable, "-c", _DEADLOCK_SCRIPT], capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "OK True" in proc.stdout


@pytest.mark.parametrize("jit", [True, False])
def test_vmapped_add_uses_fallback_only_where_cholesky_fails(jit):
  good = jnp.diag(jnp.array([2.0, 1.0, 0.5]))
  bad = jnp.diag(jnp.array([2.0, -1.0, 0.5]))  # indefinite by more than lam: Cholesky fails.
  g = jnp.array([1.0, 2.0, 3.0])
  lam = 0.25
  fn = jax.vmap(lambda h: spectral.modified_solve(h, g, lam, "add"))
  fn = jax.jit(fn) if jit else fn
  for batch in ([good, good], [good, bad], [bad, good]):
    out = fn(jnp.stack(batch))
    for k, h in enumerate(batch):
      single = spectral.modified_solve(h, g, lam, "add")
      np.testing.assert_allclose(out[k], single, rtol=1e-6)
  # The fallback clamps the negative eigenvalue at 0 before adding lam.
  np.testing.assert_allclose(fn(jnp.stack([bad, good]))[0], g / jnp.array([2.25, 0.25, 0.75]),
                             rtol=1e-6)
