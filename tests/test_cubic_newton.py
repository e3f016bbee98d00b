"""Tests of the private cubic-regularised Newton method (Ganesh et al. NeurIPS 2023, Algorithms 1-2)."""

from __future__ import annotations

import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import maybe_jit
from dpjax import accounting, data
from dpjax.mechanisms import noise
from dpjax.problem import glm
from dpjax.transforms import (
    DPCubicNewtonState,
    cubic_newton,
    cubic_solver_calibration,
    l2_logistic_constants,
    solver_average_weights,
)

MU, RADIUS = 0.05, 2.0
CONSTS = l2_logistic_constants(MU, RADIUS)._asdict()


def _formula(n, rho_t, d, l0, l1, l2, radius):
  """Algorithm 2 (with the n^2 restored): N and sigma^2, written out independently of the module."""
  dd = 2 * radius
  b, a = l0 + l1 * dd, l0 + l1 * dd + l2 * dd**2
  big_n = math.ceil(2 * rho_t * a**2 * n**2 / (b**2 * d))
  return big_n, big_n * b**2 / (2 * rho_t * n**2)


def _problem(n, d, seed=1):
  x, y = data.synthetic(seed, n=n, d=d, dtype=np.float64)
  x, y = jnp.asarray(x), jnp.asarray(y)

  def lgh(w):
    loss, g, h = glm.logistic_grad_and_curvature(w, x, y)
    return loss + 0.5 * MU * w @ w, g + MU * w, h + MU * jnp.eye(d)

  return lgh


# ----------------------------------------------------------------------------
# Calibration.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("n,rho_t,d,radius", [
    (10_000, 0.0064, 10, 3.0), (200, 0.05, 3, 2.0), (1_000, 1e-4, 50, 0.5), (7, 2.0, 1, 10.0)])
def test_calibration_follows_corrected_formulas(n, rho_t, d, radius):
  consts = l2_logistic_constants(0.01, radius)
  cal = cubic_solver_calibration(n=n, rho_per_step=rho_t, d=d, radius=radius,
                                 lipschitz=consts.lipschitz, smoothness=consts.smoothness,
                                 hessian_lipschitz=consts.hessian_lipschitz)
  big_n, var = _formula(n, rho_t, d, consts.lipschitz, consts.smoothness,
                        consts.hessian_lipschitz, radius)
  assert cal.inner_steps == big_n
  assert cal.noise_std**2 == pytest.approx(var, rel=1e-12)
  b = consts.lipschitz + 2 * radius * consts.smoothness
  assert cal.sensitivity == pytest.approx(b / n, rel=1e-14)
  # N Gaussian mechanisms of sensitivity (L0 + L1 D)/n compose to exactly rho_t.
  assert big_n * accounting.gaussian_zcdp(cal.sensitivity, cal.noise_std) == pytest.approx(
      rho_t, rel=1e-12)
  assert cal.rho_per_inner_step * big_n == pytest.approx(rho_t, rel=1e-14)
  # The paper's design: sigma^2 d = (L0 + L1 D + L2 D^2)^2, up to the ceiling of N.
  # N = ceil(N_exact) < N_exact + 1, so the ratio is in [1, N / (N - 1)).
  ratio = var * d / cal.gradient_bound**2
  assert 1 - 1e-12 <= ratio < big_n / (big_n - 1)


def test_state_fields_follow_the_formulas():
  n, rho, t, d = 300, 0.6, 3, 4
  tx = cubic_newton(n=n, rho=rho, steps=t, radius=RADIUS, key=0, **CONSTS)
  state = tx.init(jnp.zeros(d))
  big_n, var = _formula(n, rho / t, d, CONSTS["lipschitz"], CONSTS["smoothness"],
                        CONSTS["hessian_lipschitz"], RADIUS)
  assert isinstance(state, DPCubicNewtonState)
  assert int(state.inner_steps) == big_n
  assert float(state.noise_std) == pytest.approx(math.sqrt(var), rel=1e-6)  # float32 state.
  assert state.noise_std.dtype == jnp.float32 and state.inner_steps.dtype == jnp.int32
  quiet = cubic_newton(n=n, rho=rho, steps=t, radius=RADIUS, key=0,
                       disable_noise_for_testing=True, **CONSTS).init(jnp.zeros(d))
  assert float(quiet.noise_std) == 0.0 and int(quiet.inner_steps) == big_n
  capped = cubic_newton(n=n, rho=rho, steps=t, radius=RADIUS, key=0, max_inner_steps=100,
                        **CONSTS).init(jnp.zeros(d))
  assert int(capped.inner_steps) == 100 and float(capped.noise_std) == float(state.noise_std)


def test_average_weights_sum_to_one():
  for big_n in (1, 2, 7, 1000, 123_457):
    w = solver_average_weights(big_n)
    assert w.shape == (big_n,) and np.all(w > 0) and np.all(np.diff(w) > 0)
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
  np.testing.assert_allclose(solver_average_weights(4), [0.1, 0.2, 0.3, 0.4], rtol=1e-15)


def test_l2_logistic_constants_hold():
  # sup_z |d^3/dz^3 log(1 + e^-z)| = 1 / (6 sqrt 3), checked on a fine grid.
  z = np.linspace(-10, 10, 200_001)
  p = 1 / (1 + np.exp(-z))
  third = p * (1 - p) * (1 - 2 * p)
  assert np.max(np.abs(third)) == pytest.approx(1 / (6 * math.sqrt(3)), rel=1e-8)
  mu, radius = 0.03, 1.5
  c = l2_logistic_constants(mu, radius)
  assert c == (1 + mu * radius, 0.25 + mu, 1 / (6 * math.sqrt(3)), mu)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(400, 5))
  x /= np.maximum(1, np.linalg.norm(x, axis=1))[:, None]
  y = np.where(rng.random(400) < 0.5, -1.0, 1.0)

  def ball(k):
    v = rng.normal(size=(k, 5))
    return v / np.linalg.norm(v, axis=1)[:, None] * radius * rng.random((k, 1)) ** 0.2

  for w, v in zip(ball(50), ball(50)):
    m = y * (x @ w)
    grads = -(y / (1 + np.exp(m)))[:, None] * x + mu * w
    assert np.linalg.norm(grads, axis=1).max() <= c.lipschitz
    cw = 1 / (4 * np.cosh((x @ w) / 2) ** 2)
    cv = 1 / (4 * np.cosh((x @ v) / 2) ** 2)
    sq = np.sum(x * x, axis=1)
    assert (cw * sq + mu).max() <= c.smoothness  # ||c x x^T + mu I|| = c ||x||^2 + mu.
    assert np.max(np.abs(cw - cv) * sq) <= c.hessian_lipschitz * np.linalg.norm(w - v)


# ----------------------------------------------------------------------------
# The solver against a direct transcription of Algorithm 2.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_matches_algorithm_2_with_explicit_weights(jit, x64):
  del x64
  n, d, steps_run = 200, 3, 60
  lgh = _problem(n, d)
  center = np.array([0.2, -0.1, 0.0])
  w0 = jnp.asarray(center + np.array([0.5, 0.3, -0.4]))
  tx = cubic_newton(n=n, rho_per_step=0.5, radius=RADIUS, center=center, key=3,
                    max_inner_steps=steps_run, **CONSTS)
  state = tx.init(w0)
  _, g, h = lgh(w0)
  update = maybe_jit(lambda s, w, g, h: tx.update(g, s, w, curvature_matrix=h), jit)
  out, new_state = update(state, w0, g, h)
  # Reference: the noise stream documented in cubic_newton's docstring, float64 numpy.
  _, solver_key = jax.random.split(state.key)
  sigma, l2 = float(state.noise_std), CONSTS["hessian_lipschitz"]
  g, h, theta0 = np.asarray(g), np.asarray(h), np.asarray(w0)
  sens = cubic_solver_calibration(n=n, rho_per_step=0.5, d=d, radius=RADIUS,
                                  lipschitz=CONSTS["lipschitz"], smoothness=CONSTS["smoothness"],
                                  hessian_lipschitz=CONSTS["hessian_lipschitz"]).sensitivity
  theta, thetas = theta0.copy(), []
  for i in range(steps_run):
    delta = theta - theta0
    grad = g + h @ delta + 0.5 * l2 * np.linalg.norm(delta) * delta
    noisy = np.asarray(noise.add_gaussian(jax.random.fold_in(solver_key, i), jnp.asarray(grad),
                                          sensitivity=sens, noise_std=sigma))
    theta = theta - 2 / (MU * (i + 2)) * noisy
    off = theta - center
    theta = center + off * min(1.0, RADIUS / np.linalg.norm(off))
    thetas.append(theta)
  expected = solver_average_weights(steps_run) @ np.stack(thetas)
  np.testing.assert_allclose(np.asarray(w0 + out), expected, rtol=0, atol=1e-11)
  assert np.linalg.norm(expected - center) <= RADIUS * (1 + 1e-12)
  big_n = cubic_solver_calibration(n=n, rho_per_step=0.5, d=d, radius=RADIUS,
                                   lipschitz=CONSTS["lipschitz"], smoothness=CONSTS["smoothness"],
                                   hessian_lipschitz=CONSTS["hessian_lipschitz"]).inner_steps
  assert big_n > steps_run
  # A capped solver charges exactly the steps it ran: steps_run * rho_t / N.
  assert accounting.spent_rho(new_state.accountant) == pytest.approx(
      0.5 * steps_run / big_n, rel=1e-12)


# ----------------------------------------------------------------------------
# Convergence, accounting, domain.
# ----------------------------------------------------------------------------


def test_no_noise_limit_converges_fast(x64):
  """With the noise off and N from the formula (rho_t = 0.05: N = 3716), the excess
  loss falls below 1e-8 within 10 outer steps (quadratic convergence of cubic Newton)."""
  del x64
  n, d = 200, 3
  lgh = _problem(n, d)
  w = jnp.zeros(d)
  for _ in range(30):
    _, g, h = lgh(w)
    w = w - jnp.linalg.solve(h, g)
  assert float(jnp.linalg.norm(w)) < RADIUS  # w* is inside W: the constrained optimum.
  loss_star = float(lgh(w)[0])
  tx = cubic_newton(n=n, rho=0.5, steps=10, radius=RADIUS, key=0,
                    disable_noise_for_testing=True, **CONSTS)
  w = jnp.zeros(d)
  state = tx.init(w)
  assert int(state.inner_steps) == 3716

  @jax.jit
  def step(w, state):
    _, g, h = lgh(w)
    u, state = tx.update(g, state, w, curvature_matrix=h)
    return w + u, state

  excess = []
  for _ in range(10):
    w, state = step(w, state)
    excess.append(float(lgh(w)[0]) - loss_star)
  assert excess[0] > 1e-4  # It starts far away ...
  assert max(excess[3:]) < 1e-8, excess  # ... and is below 1e-8 from the 4th step on.
  # -1e-12: float64 means over 200 rows; their worst-case rounding, 200 * 2^-53 * F ~ 1e-14,
  # can put a converged iterate that far below loss_star (computed the same way).
  assert min(excess) >= -1e-12
  assert accounting.spent_rho(state.accountant) == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize("jit", [False, True])
def test_spends_exactly_rho_and_stays_in_domain(jit):
  n, d, rho, t = 150, 4, 0.3, 3
  x, y = data.synthetic(0, n=n, d=d)
  x, y = jnp.asarray(x), jnp.asarray(y)
  radius = 0.5
  consts = l2_logistic_constants(MU, radius)._asdict()
  tx = cubic_newton(n=n, rho=rho, steps=t, radius=radius, key=7, **consts)

  @jax.jit
  def grad_and_hessian(w):
    _, g, h = glm.logistic_grad_and_curvature(w, x, y)
    return g + MU * w, h + MU * jnp.eye(d)

  def step(w, state):
    g, h = grad_and_hessian(w)
    u, state = tx.update(g, state, w, curvature_matrix=h)
    return optax.apply_updates(w, u), state

  step = maybe_jit(step, jit)  # jit or not, the update itself runs traced or eagerly.
  w = jnp.full((d,), 0.2)
  state = tx.init(w)
  moved = []
  for _ in range(t):
    w_new, state = step(w, state)
    assert float(jnp.linalg.norm(w_new)) <= radius * (1 + 1e-6)
    moved.append(float(jnp.linalg.norm(w_new - w)))
    w = w_new
  assert min(moved) > 0
  assert accounting.spent_rho(state.accountant) == pytest.approx(rho, abs=1e-15)
  assert int(state.count) == t and not bool(state.budget_exhausted)
  assert optax.tree.get(state, "rho") == state.accountant.rho
  if jit:  # A traced step past the budget is refused: zeros, no charge, flagged.
    w_after, refused = step(w, state)
    np.testing.assert_array_equal(np.asarray(w_after), np.asarray(w))
    assert bool(refused.budget_exhausted) and int(refused.count) == t
    assert accounting.spent_rho(refused.accountant) == accounting.spent_rho(state.accountant)
  else:
    with pytest.raises(ValueError, match="privacy budget exhausted"):
      step(w, state)


def test_vmap_over_keys_and_chain():
  n, d = 100, 2
  h = jnp.diag(jnp.array([0.2, 0.1]))
  g = jnp.array([0.3, -0.2])
  w = jnp.zeros(d)

  def run(key):
    tx = optax.chain(cubic_newton(n=n, rho=0.2, steps=1, radius=RADIUS, key=key, **CONSTS),
                     optax.identity())
    out, state = tx.update(g, tx.init(w), w, curvature_matrix=h, unused=None)
    return out, state[0].accountant

  outs, acc = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), 3))
  assert outs.shape == (3, d) and not np.allclose(outs[0], outs[1])
  assert np.all(np.linalg.norm(np.asarray(outs), axis=1) <= RADIUS * (1 + 1e-6))
  np.testing.assert_allclose(accounting.spent_rho(acc), 0.2, rtol=1e-12)


# ----------------------------------------------------------------------------
# Bad input.
# ----------------------------------------------------------------------------


def _build(**kw):
  args = dict(n=100, rho=1.0, steps=2, radius=RADIUS, key=0, **CONSTS)
  args.update(kw)
  return cubic_newton(**args)


@pytest.mark.parametrize("kw,err,match", [
    ({"strong_convexity": 0.0}, ValueError, "strong_convexity must be > 0"),
    ({"strong_convexity": -0.1}, ValueError, "strong_convexity must be > 0"),
    ({"strong_convexity": 0.5}, ValueError, "exceeds smoothness"),
    ({"lipschitz": -1.0}, ValueError, "lipschitz must be > 0"),
    ({"smoothness": -0.25}, ValueError, "smoothness must be > 0"),
    ({"hessian_lipschitz": 0.0}, ValueError, "hessian_lipschitz must be > 0"),
    ({"hessian_lipschitz": -0.1}, ValueError, "hessian_lipschitz must be > 0"),
    ({"radius": 0.0}, ValueError, "radius must be > 0"),
    ({"radius": -1.0}, ValueError, "radius must be > 0"),
    ({"n": 0}, ValueError, "n must be >= 1"),
    ({"rho": -1.0}, ValueError, "rho must be > 0"),
    ({"steps": None}, ValueError, "needs steps"),
    ({"rho_per_step": 0.1}, ValueError, "exactly one budget"),
    ({"max_inner_steps": 0}, ValueError, "max_inner_steps must be >= 1"),
    ({"center": np.array([[0.0]])}, ValueError, "center must have 1 dimension"),
    ({"disable_noise_for_testing": 1}, TypeError, "disable_noise_for_testing"),
    ({"key": None}, TypeError, "key must be"),
    ({"neighbouring": "add-remove"}, ValueError, "neighbouring must be one of"),
    ({"neighbouring": 1}, TypeError, "neighbouring must be one of"),
])
def test_bad_construction(kw, err, match):
  with pytest.raises(err, match=match):
    _build(**kw)


def test_traced_budget_is_refused():
  with pytest.raises(TypeError, match="concrete budget"):
    jax.jit(lambda r: _build(rho=None, steps=None, rho_per_step=r).init(jnp.zeros(2)))(0.1)


def test_bad_init_and_update():
  tx = _build()
  with pytest.raises(ValueError, match="outside the domain"):
    tx.init(jnp.array([RADIUS, 0.1]))
  with pytest.raises(ValueError, match="outside the domain"):
    _build(center=np.array([3.0, 0.0])).init(jnp.zeros(2))
  assert int(_build(center=np.array([3.0, 0.0])).init(jnp.array([1.5, 0.5])).count) == 0
  with pytest.raises(ValueError, match="center has shape"):
    _build(center=np.zeros(3)).init(jnp.zeros(2))
  with pytest.raises(ValueError, match="int32 loop counter"):
    _build(n=10**7, rho=100.0).init(jnp.zeros(2))
  assert int(_build(n=10**7, rho=100.0, max_inner_steps=10).init(jnp.zeros(2)).inner_steps) == 10
  w = jnp.zeros(2)
  state = tx.init(w)
  g, h = jnp.ones(2), jnp.eye(2)
  with pytest.raises(TypeError, match="needs params"):
    tx.update(g, state, curvature_matrix=h)
  with pytest.raises(TypeError, match="curvature_matrix=H"):
    tx.update(g, state, w)
  with pytest.raises(ValueError, match="must be \\(2, 2\\)"):
    tx.update(g, state, w, curvature_matrix=jnp.eye(3))
  with pytest.raises(ValueError, match="outside the domain"):
    tx.update(g, state, jnp.array([3.0, 0.0]), curvature_matrix=h)
  with pytest.raises(TypeError, match="DPCubicNewtonState"):
    tx.update(g, (), w, curvature_matrix=h)
  module = importlib.import_module("dpjax.transforms.cubic_newton")
  assert module.LOGISTIC_THIRD_DERIVATIVE_BOUND == pytest.approx(0.0962250448649)


# ----------------------------------------------------------------------------
# Neighbouring relations: zero-out (default) and replace-one.
# ----------------------------------------------------------------------------


def test_replace_one_calibration():
  """Replace-one: Delta = (2 L0 + L1 D) / n (not 2 (L0 + L1 D) / n), the same N, sigma scaled
  by exactly (2 L0 + L1 D) / (L0 + L1 D)."""
  n, rho_t, d = 300, 0.2, 4
  kw = dict(n=n, rho_per_step=rho_t, d=d, radius=RADIUS, **{
      k: CONSTS[k] for k in ("lipschitz", "smoothness", "hessian_lipschitz")})
  z = cubic_solver_calibration(**kw)
  assert cubic_solver_calibration(**kw, neighbouring="zero-out") == z
  r = cubic_solver_calibration(**kw, neighbouring="replace-one")
  l0, l1, dd = CONSTS["lipschitz"], CONSTS["smoothness"], 2 * RADIUS
  assert r.inner_steps == z.inner_steps and r.gradient_bound == z.gradient_bound
  assert r.sensitivity == pytest.approx((2 * l0 + l1 * dd) / n, rel=1e-15)
  assert r.noise_std == pytest.approx(z.noise_std * (2 * l0 + l1 * dd) / (l0 + l1 * dd),
                                      rel=1e-14)
  assert r.rho_per_inner_step == z.rho_per_inner_step
  states = {rel: cubic_newton(n=n, rho_per_step=rho_t, radius=RADIUS, key=0, neighbouring=rel,
                              **CONSTS).init(jnp.zeros(d)) for rel in ("zero-out", "replace-one")}
  assert float(states["replace-one"].noise_std) == np.float32(r.noise_std)
  assert float(states["zero-out"].noise_std) == np.float32(z.noise_std)
  assert int(states["replace-one"].inner_steps) == z.inner_steps


def test_replace_one_inner_gradient_change_is_within_the_sensitivity():
  """Swapping one row moves g + H (theta - w_t) (the data part of each inner gradient) by at
  most (2 L0 + L1 D) / n for theta, w_t in the ball: searched over adversarial swaps. The
  constants are the logistic data term's (L0 = 1, L1 = 1/4; the ridge is public), on a ball
  large enough for margins where two rows' gradients nearly oppose."""
  n, d, radius = 20, 3, 60.0
  stated = cubic_solver_calibration(
      n=n, rho_per_step=0.1, d=d, radius=radius, neighbouring="replace-one", lipschitz=1.0,
      smoothness=0.25, hessian_lipschitz=CONSTS["hessian_lipschitz"]).sensitivity
  assert stated == pytest.approx((2 + 0.25 * 2 * radius) / n, rel=1e-15)
  rng = np.random.default_rng(0)

  def per_example(w, theta, x, y):  # grad f + hess f (theta - w) of one logistic row.
    m = x @ w
    p = 0.5 * (1 - np.tanh(0.5 * y * m))  # sigma(-y m)
    c = p * (1 - p)
    return -y * p * x + c * (x @ (theta - w)) * x

  worst = grad_swap = 0.0
  for _ in range(4000):
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    w = radius * u  # on the sphere; theta anywhere in the ball
    theta = radius * rng.random() ** (1 / d) * rng.normal(size=d)
    theta *= min(1.0, radius / np.linalg.norm(theta))
    # Rows x, x' nearly perpendicular to w, on opposite sides, with opposite labels: margins
    # -+ radius sin(a), so both gradients have norm ~1 and point nearly opposite ways.
    v = rng.normal(size=d)
    v -= (v @ u) * u
    v /= np.linalg.norm(v)
    a = rng.uniform(0.0, 0.3)
    x, xp = np.cos(a) * v - np.sin(a) * u, np.cos(a) * v + np.sin(a) * u
    y, yp = (1.0, -1.0) if rng.random() < 0.8 else tuple(rng.choice([-1.0, 1.0], size=2))
    change = np.linalg.norm(per_example(w, theta, x, y) - per_example(w, theta, xp, yp)) / n
    worst = max(worst, change)
    grad_swap = max(grad_swap, np.linalg.norm(per_example(w, w, x, y) - per_example(w, w, xp, yp))
                    / n)
  assert worst <= stated
  assert grad_swap > 1.9 / n  # the gradients alone differ by nearly 2 L0: the first term.
