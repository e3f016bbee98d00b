"""Tests of dpjax.mechanisms.noise: the exact table, the lattice sampler, the release, and the two
floating-point acceptance checks (support of a released coordinate, black-box collisions)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import scipy.stats

from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.transforms import dp_gd

S = noise.TABLE_SIGMA
M = noise._HALF_WIDTH


def _table_pmf() -> np.ndarray:
  """The sampler's exact law, rebuilt from the alias rows (weights in units of 2^-96/bucket)."""
  t = noise.table()
  rows = t.rows.astype(object)
  cap = 1 << noise.THRESHOLD_BITS
  w = [0] * len(rows)
  for i, (t0, t1, t2, al) in enumerate(rows):
    thr = (int(t0) << 64) | (int(t1) << 32) | int(t2)
    if int(al) == i:
      w[i] += cap
    else:
      w[i] += thr
      w[int(al)] += cap - thr
  return w


def test_alias_table_reproduces_its_integer_weights_exactly():
  t = noise.table()
  w = _table_pmf()
  assert w == list(t.weights)
  assert sum(w) == 1 << (noise.TABLE_BITS + noise.THRESHOLD_BITS)
  atoms = w[: 2 * M + 1]
  assert all(a > 0 for a in atoms)  # every integer in [-M, M] is possible
  assert all(a == 0 for a in w[2 * M + 1:])
  assert max(abs(a - b) for a, b in zip(atoms, atoms[::-1])) <= 1  # symmetric up to rounding


def test_table_tv_bound_against_mpmath():
  """Independent high-precision discrete Gaussian: the stored TV bound holds."""
  mpmath.mp.dps = 50
  t = noise.table()
  p = [mpmath.exp(-mpmath.mpf(c * c) / (2 * S * S)) for c in range(0, M + 60)]
  z_full = p[0] + 2 * mpmath.fsum(p[1:]) + 2 * mpmath.exp(-mpmath.mpf((M + 60) ** 2) / (2 * S * S)) * 100
  total = mpmath.mpf(2) ** (noise.TABLE_BITS + noise.THRESHOLD_BITS)
  tv = mpmath.fsum(abs(mpmath.mpf(wc) / total - p[abs(c)] / z_full)
                   for wc, c in zip(t.weights, range(-M, M + 1))) / 2
  tv += mpmath.fsum(p[M + 1:]) / z_full  # mass beyond the table (both tails, halved x 2)
  assert float(tv) <= t.tv
  assert t.tv < 1e-29


def test_lattice_level_matches_the_theta_bound():
  """L*C + F with C, F ~ N_Z(0, s^2) is N_Z(0, L^2 s^2 + s^2) times a theta factor within 2 eps.

  At s = 2, L = 2 the factor is visible (s'^2 = 0.8): the measured TV is below
  the bound used by the sampler and not far below (the bound is not vacuous).
  """
  s, lat = 2.0, 2
  r = np.arange(-60, 61)
  pc = np.exp(-r**2 / (2 * s * s)); pc /= pc.sum()
  conv = np.zeros(lat * 120 + 121 + 1)
  for c, wc in zip(r, pc):
    conv[lat * (c + 60): lat * (c + 60) + 121] += wc * pc
  support = np.arange(len(conv)) - (lat * 60 + 60)
  target = np.exp(-support**2 / (2 * (lat * lat * s * s + s * s)))
  target /= target.sum()
  tv = 0.5 * np.abs(conv - target).sum()
  s_prime_sq = s * s / (lat * lat + 1)
  eps = math.exp(-2 * math.pi**2 * s_prime_sq) / (1 - math.exp(-6 * math.pi**2 * s_prime_sq))
  bound = 2 * eps / (1 - 2 * eps)
  assert tv <= bound
  assert tv >= 0.05 * bound


@pytest.mark.parametrize("sc", [5.0, 30.0])
def test_discrete_gaussian_is_close_to_the_rounded_gaussian(sc):
  """max |log(p_round / p_discrete)| <= t^4 / (1000 s^4) over |r| <= t s (the sampler's bound)."""
  mpmath.mp.dps = 40
  s = mpmath.mpf(sc)
  b = 1 / (2 * s * s)
  m2 = (mpmath.quad(lambda u: u * u * mpmath.exp(-b * u * u), [-0.5, 0.5])
        / mpmath.quad(lambda u: mpmath.exp(-b * u * u), [-0.5, 0.5]))
  s_r2 = 1 / (1 / s**2 - m2 / s**4)
  big = int(noise.TAIL * sc)
  pr = [mpmath.ncdf((k + 0.5) / s) - mpmath.ncdf((k - 0.5) / s) for k in range(-big, big + 1)]
  pd = [mpmath.exp(-k * k / (2 * s_r2)) for k in range(-big, big + 1)]
  z = mpmath.fsum(pd)
  worst = max(abs(mpmath.log(a / (q / z))) for a, q in zip(pr, pd))
  assert float(worst) <= noise.TAIL**4 / (1000 * sc**4)


def test_tv_per_coordinate_is_tiny_and_charged_by_size():
  tau = noise.tv_per_coordinate()
  assert 0 < tau < 2e-28
  assert noise.tv_slack({"a": jnp.zeros((3, 4)), "b": jnp.zeros(5)}) == pytest.approx(17 * tau)


def test_integer_noise_variance_and_range():
  l1, l2 = 300, 200
  r = np.asarray(noise.integer_noise(jax.random.key(0), (400_000,), l1, l2), np.float64)
  s_r = S * math.sqrt(l2 * l2 * (l1 * l1 + 1) + 1)
  se = math.sqrt(2 / r.size)
  assert abs(r.std() / s_r - 1) < 5 * se
  assert abs(r.mean()) < 5 * s_r / math.sqrt(r.size)
  assert np.abs(r).max() < 2**31


def test_plan_meets_the_privacy_inequality():
  """gamma s >= sigma (1 + sqrt(k) gamma / D): the rounding is paid for in noise."""
  for sigma, sens, k in [(0.02, 1e-3, 3), (5.0, 1.0, 10_000), (1e-6, 1e-7, 1), (3e3, 2.0, 250_000)]:
    p = noise.plan(sigma, sens, k)
    gamma = 2.0**p.exponent
    s_r = p.std / gamma
    s_c = math.sqrt(s_r * s_r - 1 / 12 - 1e-6)  # the matched continuous std (1/12 >= m_2)
    assert s_c >= sigma / gamma + math.sqrt(k) * sigma / sens
    assert s_c >= noise.S_MIN
    assert 1 <= p.l1 <= noise.MAX_MULTIPLIER and 1 <= p.l2 <= noise.MAX_MULTIPLIER
    assert sigma <= p.std <= sigma * (1 + 4 * math.sqrt(k) * sigma / sens / noise.S_MAX + 1e-3)


def test_plan_refuses_what_the_sampler_cannot_do():
  with pytest.raises(ValueError, match="more integer resolution"):
    noise.plan(1.0, 1e-6, 10**6)
  with pytest.raises(ValueError, match="noise_std must be in"):
    noise.plan(1e-30, 1.0, 1)


def test_in_graph_plan_is_at_least_as_noisy_and_private():
  """A traced budget (vmap over privacy levels) plans in float32 with a margin."""
  for sigma, sens, k in [(0.02, 1e-3, 3), (5.0, 1.0, 1000), (1e-6, 1e-7, 1)]:
    e, l1, l2, ok = jax.jit(lambda s: noise._plan_in_graph(s, sens, k))(jnp.float32(sigma))
    assert bool(ok)
    gamma = 2.0 ** int(e)
    s_r = S * math.sqrt(int(l2) ** 2 * (int(l1) ** 2 + 1) + 1)
    s_c = math.sqrt(s_r * s_r - 1 / 12 - 1e-6)
    sigma32 = float(np.float32(sigma))
    assert s_c >= sigma32 / gamma + math.sqrt(k) * sigma32 / sens
    assert gamma * s_r <= noise.plan(sigma, sens, k).std * 1.01


@pytest.mark.parametrize("jit", [False, True])
def test_noise_scale_ks_and_variance(jit):
  sigma, sens, n = 0.37, 0.01, 1 << 16
  f = lambda k: noise.add_gaussian(k, jnp.zeros(n), sensitivity=sens, noise_std=sigma)
  z = np.asarray((jax.jit(f) if jit else f)(jax.random.key(4)), np.float64)
  eff = noise.effective_std(jnp.zeros(n), sensitivity=sens, noise_std=sigma)
  assert sigma <= eff <= sigma * 1.001
  assert scipy.stats.kstest(z / eff, "norm").pvalue > 1e-3
  assert abs(z.var() / eff**2 - 1) < 5 * math.sqrt(2 / n)
  assert scipy.stats.kstest(z / (1.1 * eff), "norm").pvalue < 1e-6  # the test can fail


def test_traced_noise_std_matches_scale():
  sigma = 2.5
  f = jax.jit(lambda k, s: noise.add_gaussian(k, jnp.zeros(1 << 15), sensitivity=0.1, noise_std=s))
  z = np.asarray(f(jax.random.key(1), jnp.float32(sigma)), np.float64)
  assert abs(z.std() / sigma - 1) < 5 * math.sqrt(1 / (1 << 15))
  zero = f(jax.random.key(1), jnp.float32(0.0))
  assert not np.any(np.asarray(zero))  # noise_std = 0 returns the value


def _reference_release(key, v, p):
  """numpy int64 reference of the release: exact m = round(v / gamma) + R."""
  gamma = 2.0**p.exponent
  r = np.asarray(noise.integer_noise(key, v.shape, p.l1, p.l2), np.int64)
  clamp = noise._CLAMP64 if v.dtype == jnp.float64 else noise._CLAMP
  a = np.round(np.clip(np.asarray(v, np.float64) / gamma, -clamp, clamp)).astype(np.int64)
  return (a + r).astype(np.float64) * gamma


def test_float32_release_is_the_exact_integer_sum_converted():
  rng = np.random.default_rng(0)
  v = np.concatenate([rng.normal(size=2000) * 10, rng.normal(size=500) * 1e-9, [0.0, -0.0],
                      rng.normal(size=500) * 1e6]).astype(np.float32)
  v = jnp.asarray(v)
  for sigma in [1e-3, 0.5, 40.0]:
    p = noise.plan(sigma, 1e-3, v.size)
    key = jax.random.key(7)
    out = np.asarray(noise.add_gaussian(key, v, sensitivity=1e-3, noise_std=sigma), np.float64)
    ref = _reference_release(key, v, p)
    np.testing.assert_allclose(out, ref, rtol=2.0**-22, atol=0)


def test_float64_release_is_exact():
  with jax.enable_x64(True):
    v = jnp.asarray(np.random.default_rng(1).normal(size=1000))
    key = jax.random.key(3)
    p = noise.plan(0.01, 1e-4, v.size)
    out = np.asarray(noise.add_gaussian(key, v, sensitivity=1e-4, noise_std=0.01))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, _reference_release(key, v, p), rtol=2.0**-52, atol=0)


def test_outputs_lie_on_the_public_grid():
  p = noise.plan(0.02, 1e-3, 5)
  out = np.asarray(noise.add_gaussian(jax.random.key(2), jnp.full(5, 0.123), sensitivity=1e-3,
                                      noise_std=0.02), np.float64)
  m = out / 2.0**p.exponent
  assert np.array_equal(m, np.round(m))


def test_pytree_dtypes_determinism_and_vmap():
  tree = {"w": jnp.ones((2, 3)), "b": jnp.zeros(())}
  out = noise.add_gaussian(jax.random.key(5), tree, sensitivity=0.1, noise_std=1.0)
  assert out["w"].shape == (2, 3) and out["b"].shape == ()
  again = noise.add_gaussian(jax.random.key(5), tree, sensitivity=0.1, noise_std=1.0)
  assert np.array_equal(out["w"], again["w"])
  keys = jax.random.split(jax.random.key(0), 4)
  batched = jax.vmap(lambda k: noise.add_gaussian(k, jnp.zeros(3), sensitivity=0.1,
                                                  noise_std=1.0))(keys)
  single = noise.add_gaussian(keys[2], jnp.zeros(3), sensitivity=0.1, noise_std=1.0)
  assert np.array_equal(batched[2], single)


def test_bad_arguments():
  with pytest.raises(ValueError, match="sensitivity must be a positive"):
    noise.add_gaussian(jax.random.key(0), jnp.zeros(2), sensitivity=0.0, noise_std=1.0)
  with pytest.raises(ValueError, match="noise_std must be a finite number"):
    noise.add_gaussian(jax.random.key(0), jnp.zeros(2), sensitivity=1.0, noise_std=-1.0)
  with pytest.raises(ValueError, match="at least one array"):
    noise.add_gaussian(jax.random.key(0), {}, sensitivity=1.0, noise_std=1.0)


def test_symmetric_release_statistics():
  d, sigma, k = 6, 2.0, 600
  e = jax.vmap(lambda kk: noise.add_gaussian_symmetric(kk, jnp.zeros((d, d)), sensitivity=1.0,
                                                       noise_std=sigma))(
      jax.random.split(jax.random.key(11), k))
  e = np.asarray(e, np.float64)
  assert np.array_equal(e, np.swapaxes(e, 1, 2))
  iu = np.triu_indices(d, 1)
  diag, off = np.diagonal(e, axis1=1, axis2=2), e[:, iu[0], iu[1]]
  z_max = 5.0
  assert abs((diag.var() / sigma**2 - 1) / math.sqrt(2 / diag.size)) < z_max
  assert abs((off.var() / (sigma**2 / 2) - 1) / math.sqrt(2 / off.size)) < z_max
  assert abs((off.var() / sigma**2 - 1) / math.sqrt(2 / off.size)) > z_max  # the test can fail
  flat = np.concatenate([diag, off], axis=1)
  corr = np.corrcoef(flat.T) - np.eye(flat.shape[1])
  assert np.max(np.abs(corr)) < 5 / math.sqrt(k)


def test_broken_twin_hook_scales_the_noise_only_inside():
  with noise.broken_noise_for_audit(0.5):
    half = noise.add_gaussian(jax.random.key(0), jnp.zeros(4000), sensitivity=1.0, noise_std=1.0)
  full = noise.add_gaussian(jax.random.key(0), jnp.zeros(4000), sensitivity=1.0, noise_std=1.0)
  assert 0.45 < float(half.std()) < 0.55 and 0.95 < float(full.std()) < 1.05


def test_charge_with_slack_reaches_epsilon():
  st = accounting.charge(accounting.init_accountant(), 0.1, slack=1e-3)
  assert accounting.spent_truncation(st) >= 1e-3
  eps = accounting.epsilon_spent(st, 1e-2, "gaussian")
  # delta_gauss(eps) + (1 + e^eps) 1e-3 <= 1e-2, and eps is the smallest such.
  assert eps > accounting.zcdp_to_epsilon(0.1, 1e-2, "gaussian")
  assert eps == pytest.approx(accounting.zcdp_to_epsilon(0.1, 1e-2 - (1 + math.exp(eps)) * 1e-3,
                                                         "gaussian"), rel=1e-7)


# ----------------------------------------------------------------------------
# Acceptance: one released DP-GD coordinate, n = 1000, rho_t = 1e-3, a canary whose
# mean gradient is 0 on D and -1/n on D'.
# ----------------------------------------------------------------------------

N_CANARY, RHO_T = 1000, 1e-3


def _canary_release(keys, g, **kwargs):
  tx = dp_gd(n=N_CANARY, rho_per_step=RHO_T, key=0, **kwargs)

  def one(k):
    st = tx.init(jnp.zeros(1))._replace(key=k)
    return tx.update(jnp.asarray([g], jnp.float32), st)[0][0]

  return np.asarray(jax.jit(jax.vmap(one))(keys))


def test_support_of_one_released_coordinate_is_characterized():
  """Exact support of the released update under D and D' (proof plus exhaustive checks).

  The update is ``-4 gamma f(m)`` with ``m = a + R``, ``f`` a deterministic map:
  under D ``a = 0``, under D' ``a' = round(-(1/n)/gamma)``. ``R = L2 (L1 C + F1)
  + F2`` takes every integer of ``[-R_max, R_max]``: each table atom in
  ``[-7843, 7843]`` has positive weight (checked exhaustively), and consecutive
  values of ``L1 C`` are ``L1 <= 341`` apart while ``F1`` spans 15687
  integers, so ``L1 C + F1`` covers an interval; likewise the outer level. So
  the supports are the intervals ``[a -+ R_max]`` and differ only in the
  ``|a'|`` extreme integers at each end, whose probability is bounded by the
  extreme table atoms (the truncation charged to delta by ``tau``).
  """
  sens = 1.0 / N_CANARY
  sigma = accounting.gaussian_sigma(sens, RHO_T)
  p = noise.plan(sigma, sens, 1)
  gamma = 2.0**p.exponent
  a_prime = int(np.round(-sens / gamma))
  assert a_prime != 0
  r_max = p.l2 * (p.l1 * M + M) + M
  assert abs(a_prime) < r_max
  # Exhaustive on a reduced grid: with small multipliers the convolution's support is an interval.
  for lat in (2, p.l1, p.l2, noise.MAX_MULTIPLIER):
    reach = np.zeros(lat * 2 * M + 2 * M + 1, bool)
    for c in range(2 * M + 1):
      reach[lat * c: lat * c + 2 * M + 1] = True
    assert reach.all()
  # Mass of the D' outputs impossible under D: R <= -R_max + |a'| - 1, which forces C
  # to the table's last few atoms.
  w = np.asarray([float(x) for x in noise.table().weights[: 2 * M + 1]]) / 2.0**110
  k_atoms = abs(a_prime) // (p.l1 * p.l2) + 2
  mass = w[:k_atoms].sum()
  assert mass < 1e-30
  assert mass <= noise.tv_per_coordinate()
  # The released values sit on the grid 4 gamma Z under both, as promised.
  keys = jax.random.split(jax.random.key(0), 2048)
  for g in (0.0, -sens):
    m = _canary_release(keys, g).astype(np.float64) / (-4 * gamma)
    assert np.array_equal(m, np.round(m))


def _collision_shares(release, num=1 << 21):
  k_d, k_fresh, k_alt = (jax.random.split(jax.random.key(s), num) for s in (11, 12, 13))
  d = release(k_d, 0.0)
  fresh = release(k_fresh, 0.0)
  alt = release(k_alt, -1.0 / N_CANARY)
  d_set = np.unique(d)
  return np.isin(alt, d_set).mean(), np.isin(fresh, d_set).mean()


def test_black_box_collisions_do_not_separate_neighbours():
  """Among 2^21 draws per side, D' values occur among D's as often as fresh D values do.

  The share for D' is at least e^(-eps_step) times the share for fresh D draws
  (eps_step of one rho_t = 1e-3 release at delta = 1e-6). The float opt-out
  (jax.random.normal) fails the same check, as the attack predicts.
  """
  eps_step = accounting.zcdp_to_epsilon(RHO_T, 1e-6, "gaussian")
  share_alt, share_fresh = _collision_shares(_canary_release)
  assert share_fresh > 0.01  # enough collisions to measure
  assert share_alt >= math.exp(-eps_step) * share_fresh
  with pytest.warns(Warning, match="NOT private"):
    leaky = lambda keys, g: _canary_release(keys, g, unsafe_float_noise=True)
    share_alt_f, share_fresh_f = _collision_shares(leaky)
  assert share_alt_f < 0.5 * share_fresh_f


def test_float32_and_float64_runs_share_their_noise():
  """The integer noise depends on the key and the public plan only: noisy DP-GD runs agree across dtypes."""
  from dpjax import data
  from dpjax.problem import glm
  x, y = data.synthetic(0, n=1000, d=5)

  def run(dt):
    with jax.enable_x64(dt == jnp.float64):
      xx, yy = jnp.asarray(x, dt), jnp.asarray(y, dt)
      tx = dp_gd(n=1000, rho=0.5, steps=5, key=3)
      w = jnp.zeros(5, dt)
      st = tx.init(w)
      for _ in range(5):
        u, st = tx.update(glm.logistic_loss_and_grad(w, xx, yy)[1], st)
        w = w + u
      return np.asarray(w, np.float64)

  a, b = run(jnp.float32), run(jnp.float64)
  assert np.abs(a - b).max() <= 1e-6 * np.abs(b).max()


def test_host_and_graph_plans_agree():
  """A release does not depend on whether its budget was traced (eager, jit, host all plan alike)."""
  rng = np.random.default_rng(3)
  graph = jax.jit(lambda s, d, k=1: noise._plan_in_graph(s, d, k), static_argnums=2)
  for _ in range(300):
    sigma = float(np.exp(rng.uniform(-12, 6)))
    sens = float(sigma * np.exp(rng.uniform(-8, 3)))
    k = int(rng.choice([1, 7, 100, 10_000]))
    try:
      p = noise.plan(sigma, sens, k)
    except ValueError:
      continue
    e, l1, l2, ok = graph(jnp.float32(sigma), jnp.float32(sens), k)
    assert bool(ok) and (int(e), int(l1), int(l2)) == (p.exponent, p.l1, p.l2), (sigma, sens, k)


def test_float32_output_is_a_function_of_the_exact_sum_only():
  """Pairs (a, r) with the same a + r give the same float32 output, across the 2^31 splits."""
  rng = np.random.default_rng(9)
  r_max = noise.MAX_MULTIPLIER * (noise.MAX_MULTIPLIER + 1) * M + M
  assert r_max < 2**30
  base = np.concatenate([rng.integers(-2**52, 2**52, 2000), rng.integers(-2**33, 2**33, 2000),
                         np.array([0, 2**31, -2**31, 2**30, -2**30, 3 * 2**31 - 1])])
  a = np.asarray(base, np.float32).astype(np.int64)  # representable float32 integers
  r1 = rng.integers(-r_max, r_max, a.size)
  shift = rng.integers(-r_max, r_max, a.size)
  a2 = np.asarray(a + shift, np.float32).astype(np.int64)  # another a ...
  r2 = a + r1 - a2  # ... with the same sum
  ok = np.abs(r2) < r_max
  f = jax.jit(noise._exact_sum_f32)
  out1 = np.asarray(f(jnp.asarray(a, jnp.float32), jnp.asarray(r1, jnp.int32)))
  out2 = np.asarray(f(jnp.asarray(a2[ok], jnp.float32), jnp.asarray(r2[ok], jnp.int32)))
  np.testing.assert_array_equal(out1[ok], out2)
  m = (a + r1).astype(np.float64)
  np.testing.assert_allclose(out1, m, rtol=2.0**-23, atol=0)


def test_ceil_log2_from_the_bits_matches_frexp():
  """The plan's exponent: ``ceil(log2 x)`` from the float32 bits, host and graph, equals frexp's (after the clip)."""
  rng = np.random.default_rng(0)
  powers = (2.0 ** np.arange(-126, 127)).astype(np.float32)
  x = np.concatenate([
      rng.uniform(0, 1, 20_000).astype(np.float32) * powers[rng.integers(0, len(powers), 20_000)],
      powers, np.nextafter(powers, np.float32(np.inf)), np.nextafter(powers, np.float32(0)),
      np.asarray([np.finfo(np.float32).smallest_subnormal], np.float32)]).astype(np.float32)
  x = x[(x > 0) & np.isfinite(x)]
  mant, ex = np.frexp(x)
  want = np.clip(np.where(mant > 0.5, ex, ex - 1), -117, 117)
  assert np.array_equal(np.clip(noise._ceil_log2_xp(np, x), -117, 117), want)
  got = jax.jit(lambda v: noise._ceil_log2_xp(jnp, v))(jnp.asarray(x))
  assert np.array_equal(np.clip(np.asarray(got), -117, 117), want)
