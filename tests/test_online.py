"""dpjax.online: projection, regret bounds of each learner, the strongly convex rate, errors."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import maybe_jit
from dpjax import online

D_DIM = 5


def _play(tx, losses, w0, *, jit, betas=None, extra=None):
  """Runs a learner on loss vectors ``losses`` [T, d]; returns the plays [T, d]."""
  state = tx.init(w0)
  upd = maybe_jit(lambda u, s, w, b: tx.update(u, s, w, beta=b, **(extra or {})), jit)
  w, plays = w0, []
  for t, u in enumerate(losses):
    plays.append(np.asarray(w, np.float64))
    b = 1.0 if betas is None else float(betas[t])
    step, state = upd(u, state, w, b)
    w = optax.apply_updates(w, step)
  return np.stack(plays)


def _regret(plays, vectors, radius, center=0.0):
  """Regret of the plays against the best fixed point of the ball for linear losses."""
  total = vectors.sum(axis=0)
  best = center - radius * total / np.linalg.norm(total)
  return float(np.sum(vectors * plays) - np.sum(vectors * best))


def _walk(seed, steps, drift=1.0, noise=1.0):
  rng = np.random.default_rng(seed)
  return drift * np.ones((steps, D_DIM)) / math.sqrt(D_DIM) + noise * rng.normal(
      size=(steps, D_DIM))


def test_project_ball():
  c = jnp.array([1.0, 0.0])
  inside = jnp.array([1.5, 0.5])
  np.testing.assert_array_equal(np.asarray(online.project_ball(inside, c, 1.0)),
                                np.asarray(inside))
  out = online.project_ball(jnp.array([4.0, 4.0]), c, 2.0)
  assert float(jnp.linalg.norm(out - c)) == pytest.approx(2.0, rel=1e-6)
  np.testing.assert_allclose(np.asarray(out - c) / 2.0, np.array([3.0, 4.0]) / 5.0, rtol=1e-6)
  tree = {"a": jnp.array([3.0]), "b": jnp.array([4.0])}
  p = online.project_ball(tree, {"a": jnp.zeros(1), "b": jnp.zeros(1)}, 1.0)
  assert float(p["a"][0]) == pytest.approx(0.6) and float(p["b"][0]) == pytest.approx(0.8)


@pytest.mark.parametrize("jit", [False, True])
def test_ogd_adaptive_regret_bound(jit):
  radius, steps = 1.5, 400
  for seed, weighted in ((0, False), (1, True)):
    u = _walk(seed, steps)
    betas = np.arange(1, steps + 1, dtype=np.float64) if weighted else np.ones(steps)
    plays = _play(online.ogd(radius=radius), jnp.asarray(u, jnp.float32), jnp.zeros(D_DIM),
                  jit=jit, betas=betas)
    assert np.all(np.linalg.norm(plays, axis=1) <= radius * (1 + 1e-5))
    v = betas[:, None] * u
    bound = math.sqrt(2) * 2 * radius * math.sqrt(np.sum(v**2))
    reg = _regret(plays, v, radius)
    assert reg <= bound, (seed, reg, bound)
    # Learning happens: far below the worst case 2 R sum ||v_t||.
    assert reg < 0.2 * 2 * radius * np.sum(np.linalg.norm(v, axis=1))


@pytest.mark.parametrize("jit", [False, True])
def test_ogd_fixed_scale_and_constant_step(jit):
  radius, steps = 1.0, 400
  u = _walk(2, steps)
  g = float(np.max(np.linalg.norm(u, axis=1)))
  plays = _play(online.ogd(radius=radius, gradient_bound=g), jnp.asarray(u, jnp.float32),
                jnp.zeros(D_DIM), jit=jit)
  assert _regret(plays, u, radius) <= 1.5 * 2 * radius * g * math.sqrt(steps)
  plays = _play(online.ogd(radius=radius, learning_rate=0.1),
                jnp.asarray(np.ones((3, D_DIM)), jnp.float32), jnp.zeros(D_DIM), jit=jit)
  np.testing.assert_allclose(plays[1], -0.1 * np.ones(D_DIM), rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_optimistic_regret_tracks_the_hint_error(jit):
  radius, steps = 1.0, 400
  rng = np.random.default_rng(3)
  # A slowly varying sequence: consecutive losses are close, so the hint is good.
  angle = np.linspace(0.0, 1.0, steps)[:, None]
  base = np.concatenate([np.cos(angle), np.sin(angle), np.zeros((steps, D_DIM - 2))], axis=1)
  u = base + 0.01 * rng.normal(size=(steps, D_DIM))
  plays_o = _play(online.optimistic_ogd(radius=radius), jnp.asarray(u, jnp.float32),
                  jnp.zeros(D_DIM), jit=jit)
  plays_g = _play(online.ogd(radius=radius), jnp.asarray(u, jnp.float32), jnp.zeros(D_DIM),
                  jit=jit)
  hint_err = np.sum((u - np.concatenate([np.zeros((1, D_DIM)), u[:-1]])) ** 2)
  reg_o, reg_g = _regret(plays_o, u, radius), _regret(plays_g, u, radius)
  assert reg_o <= 5 * 2 * radius * math.sqrt(hint_err), (reg_o, hint_err)
  assert reg_o < 0.5 * reg_g
  assert np.all(np.linalg.norm(plays_o, axis=1) <= radius * (1 + 1e-5))
  # On an adversarial (i.i.d.) sequence it keeps the worst-case sqrt(T) order.
  u = _walk(4, steps, drift=0.3)
  plays = _play(online.optimistic_ogd(radius=radius), jnp.asarray(u, jnp.float32),
                jnp.zeros(D_DIM), jit=jit)
  hint_err = np.sum((u - np.concatenate([np.zeros((1, D_DIM)), u[:-1]])) ** 2)
  assert _regret(plays, u, radius) <= 5 * 2 * radius * math.sqrt(hint_err)


def test_strongly_convex_rate_in_anytime_online_to_batch():
  """Non-private anytime OTB with the regularized learner on mu/2 ||x - x*||^2: about 1/T."""
  mu, radius = 1.0, 2.0
  x_star = jnp.asarray(np.random.default_rng(5).normal(size=D_DIM) / 3, jnp.float32)
  tx = online.strongly_convex_ogd(mu=mu, radius=radius)

  def run(steps):
    w = jnp.zeros(D_DIM)
    state = tx.init(w)
    x, beta_sum = jnp.zeros(D_DIM), 0.0
    upd = jax.jit(lambda u, s, w, x: tx.update(u, s, w, x=x, beta=1.0))
    for _ in range(steps):
      beta_sum += 1.0
      x = x + (w - x) / beta_sum  # x_t: the beta-weighted mean of w_1..w_t
      g = mu * (x - x_star)  # the gradient at x_t
      step, state = upd(g, state, w, x)
      w = optax.apply_updates(w, step)
    return float(0.5 * mu * jnp.sum((x - x_star) ** 2))

  sub = [run(t) for t in (100, 1000)]
  assert sub[1] < sub[0] / 5  # the rate is about 1/T (a factor 10 here); 1/sqrt(T) gives ~3
  assert sub[1] < 1e-3


@pytest.mark.parametrize("jit", [False, True])
def test_kt_betting_regret_and_constraint(jit):
  radius, steps, scale = 1.0, 400, 4.0
  for seed in (0, 1):
    u = _walk(seed, steps, drift=1.0, noise=1.0)
    plays = _play(online.kt_betting(radius=radius, scale=scale), jnp.asarray(u, jnp.float32),
                  jnp.zeros(D_DIM), jit=jit)
    assert np.all(np.linalg.norm(plays, axis=1) <= radius * (1 + 1e-5))
    coins = u / scale
    coins *= np.minimum(1.0, 1.0 / np.linalg.norm(coins, axis=1))[:, None]
    total = coins.sum(axis=0)
    best = -radius * total / np.linalg.norm(total)
    reg = float(np.sum(coins * plays) - np.sum(coins * best))
    r = np.linalg.norm(best)
    bound = 2 * (1.0 + r * math.sqrt(steps * math.log(1 + 24 * steps**2 * r**2)))
    assert reg <= bound, (seed, reg, bound)
    assert reg < 0.25 * 2 * radius * np.sum(np.linalg.norm(coins, axis=1))


def test_kt_betting_goes_to_the_far_side_fast():
  tx = online.kt_betting(radius=1.0, scale=1.0)
  w = jnp.zeros(2)
  state = tx.init(w)
  for _ in range(30):
    step, state = tx.update(jnp.array([1.0, 0.0]), state, w)
    w = optax.apply_updates(w, step)
  assert float(w[0]) == pytest.approx(-1.0, abs=1e-6) and float(state.wealth) > 1.0


def test_center_defaults_to_the_initial_params():
  w0 = jnp.array([5.0, 0.0])
  tx = online.ogd(radius=1.0)
  st = tx.init(w0)
  step, st = tx.update(jnp.array([-100.0, 0.0]), st, w0)
  assert float(optax.apply_updates(w0, step)[0]) == pytest.approx(6.0)


@pytest.mark.parametrize("factory, kwargs, match", [
    (online.ogd, {"radius": 0.0}, "radius"),
    (online.ogd, {"radius": 1.0, "learning_rate": 0.1, "gradient_bound": 1.0}, "at most one"),
    (online.ogd, {"radius": 1.0, "learning_rate": -1.0}, "learning_rate"),
    (online.optimistic_ogd, {"radius": -1.0}, "radius"),
    (online.strongly_convex_ogd, {"mu": 0.0, "radius": 1.0}, "mu"),
    (online.kt_betting, {"radius": 1.0, "scale": 0.0}, "scale"),
    (online.kt_betting, {"radius": 1.0, "scale": 1.0, "initial_wealth": 0.0}, "initial_wealth"),
])
def test_bad_construction(factory, kwargs, match):
  with pytest.raises((ValueError, TypeError), match=match):
    factory(**kwargs)


def test_bad_update():
  tx = online.ogd(radius=1.0)
  st = tx.init(jnp.zeros(2))
  with pytest.raises(ValueError, match="params"):
    tx.update(jnp.ones(2), st)
  with pytest.raises(ValueError, match="beta"):
    tx.update(jnp.ones(2), st, jnp.zeros(2), beta=0.0)
  with pytest.raises(TypeError, match="OGDState"):
    tx.update(jnp.ones(2), online.optimistic_ogd(radius=1.0).init(jnp.zeros(2)), jnp.zeros(2))
  sc = online.strongly_convex_ogd(mu=1.0, radius=1.0)
  with pytest.raises(ValueError, match="x="):
    sc.update(jnp.ones(2), sc.init(jnp.zeros(2)), jnp.zeros(2))
  with pytest.raises(ValueError, match="center"):
    online.ogd(radius=1.0, center=jnp.zeros(3)).init(jnp.zeros(2))
