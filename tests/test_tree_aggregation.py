"""dpjax.tree_aggregation: the index sets, the noise structure and scales, modes, accounting, errors.

The statistical tests use fixed keys, so they are deterministic; their
tolerances come from the sampling error (z-scores against ``Z_MAX``), and each
has a negative control that the same check rejects.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import Z_MAX, maybe_jit, scale_z
from dpjax import accounting
from dpjax import tree_aggregation as ta

D = 16  # coordinates per draw
REPEATS = 2000


def _stream(key, mode, *, levels=7, steps=64, noise_std=1.0, leaf=None):
  """gamma_1..gamma_steps and the claimed variances, one key."""
  leaf = jnp.zeros(D) if leaf is None else leaf
  state = ta.tree_init(leaf, num_levels=levels, key=key, mode=mode)

  def body(st, _):
    g, st = ta.tree_step(st, noise_std=noise_std, mode=mode)
    return st, (g, ta.prefix_variance(st))

  return jax.lax.scan(body, state, None, length=steps)[1]


def _draws(mode, **kw):
  keys = jax.random.split(jax.random.key(20261130), REPEATS)
  gammas, var = jax.jit(jax.vmap(lambda k: _stream(k, mode, **kw)))(keys)
  return np.asarray(gammas, np.float64), np.asarray(var[0], np.float64)  # [R, T, D], [T]


def _cov_z(a, b, claimed):
  """z-score of H0: E[a b] = claimed (zero-mean a, b), rows independent, coordinates pooled."""
  prod = np.mean(a * b, axis=1)  # one statistic per repeat (the D coordinates are iid)
  return (prod.mean() - claimed) / (prod.std(ddof=1) / math.sqrt(prod.size))


def _popcount(t: int) -> int:
  return bin(t).count("1")


# ----------------------------------------------------------------------------
# The index set.
# ----------------------------------------------------------------------------


def test_prefix_nodes_match_the_bit_form():
  assert ta.prefix_nodes(7) == [4, 6, 7] and ta.prefix_nodes(8) == [8]
  assert ta.prefix_nodes(6) == [4, 6] and ta.prefix_nodes(5) == [4, 5]
  assert [i - 1 for i in ta.prefix_nodes(7)] == [3, 5, 6]  # the authors' 0-based ids
  for t in range(1, 2**11):
    bit_form = sorted((t >> h) << h for h in range(t.bit_length()) if (t >> h) & 1)
    assert ta.prefix_nodes(t) == bit_form, t
    assert len(bit_form) == _popcount(t)


def test_levels_capacity_and_rho():
  assert [ta.num_levels_for(t) for t in (1, 2, 3, 4, 7, 8, 1023, 1024)] == [1, 2, 2, 3, 3, 4, 10, 11]
  assert ta.capacity(3) == 7 and ta.capacity(30) == 2**30 - 1
  assert ta.tree_rho(2.0, 7) == pytest.approx(3 / 8) and ta.tree_rho(2.0, 8) == pytest.approx(0.5)
  for rho, levels in ((0.5, 4), (0.01, 20), (3.0, 1)):
    c = ta.noise_multiplier_for(rho, levels)
    assert ta.tree_rho(c, ta.capacity(levels)) == pytest.approx(rho, rel=1e-15)


# ----------------------------------------------------------------------------
# Exact structure: gamma_t is the sum of the node noises R_i, i in I_t.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["buffered", "regenerate"])
def test_exact_node_structure(mode):
  """With the node noises regenerated from fold_in(key, i), gamma_t == sum_{I_t} R_i."""
  key = jax.random.key(5)
  sched = lambda t: 1.0 + 0.1 * t.astype(jnp.float32)  # noqa: E731
  gammas, _ = _stream(key, mode, levels=6, steps=63, noise_std=sched)
  # R_i = sigma_i z_i, sigma_i = max(s(first), s(last)) = s(i) (increasing schedule).
  node = {i: (1.0 + 0.1 * i) * np.asarray(jax.random.normal(
      jax.random.split(jax.random.fold_in(key, i), 1)[0], (D,)), np.float64) for i in range(1, 64)}
  for t in range(1, 64):
    want = sum(node[i] for i in ta.prefix_nodes(t))
    np.testing.assert_allclose(np.asarray(gammas[t - 1], np.float64), want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------
# Noise scales (spec 4.5, tests 3, 4 and 6).
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def buffered_draws():
  return _draws("buffered")


def test_variance_is_popcount(buffered_draws):
  gammas, var = buffered_draws
  for t in range(1, 65):
    assert var[t - 1] == _popcount(t)
    z = scale_z(gammas[:, t - 1], _popcount(t))
    assert abs(z) < Z_MAX, (t, z)
  # Negative control: the claim popcount + 1 is rejected at the same tolerance.
  assert abs(scale_z(gammas[:, 6], _popcount(7) * 1.1)) > Z_MAX


def test_covariance_reuses_node_noise(buffered_draws):
  gammas, _ = buffered_draws
  g = lambda t: gammas[:, t - 1]  # noqa: E731
  assert abs(_cov_z(g(6), g(7), 2.0)) < Z_MAX  # sigma_4^2 + sigma_6^2
  assert abs(_cov_z(g(5), g(7), 1.0)) < Z_MAX  # sigma_4^2
  assert abs(_cov_z(g(7), g(8), 0.0)) < Z_MAX  # no shared node
  assert abs(_cov_z(g(12), g(15), 2.0)) < Z_MAX  # I_12 = {8, 12}, I_15 = {8, 12, 14, 15}


def test_fresh_draw_per_step_fails_the_covariance_check():
  """Right marginal variance, no reuse (pitfall P7): the covariance check rejects it."""
  keys = jax.random.split(jax.random.key(7), REPEATS)
  fresh = jax.vmap(lambda k: jnp.stack([
      math.sqrt(_popcount(t)) * jax.random.normal(jax.random.fold_in(k, t), (D,))
      for t in (6, 7)]))(keys)
  fresh = np.asarray(fresh, np.float64)
  assert abs(scale_z(fresh[:, 1], 3.0)) < Z_MAX  # the variance check alone passes it
  assert abs(_cov_z(fresh[:, 0], fresh[:, 1], 2.0)) > Z_MAX


def test_honaker_variances():
  gammas, var = _draws("honaker", steps=16)
  assert var[3] == pytest.approx(4 / 7, rel=1e-6)
  assert var[6] == pytest.approx(4 / 7 + 2 / 3 + 1, rel=1e-6)
  assert var[7] == pytest.approx(8 / 15, rel=1e-6)
  assert var[15] == pytest.approx(16 / 31, rel=1e-6)
  for t in (1, 2, 3, 4, 7, 8, 11, 16):
    assert abs(scale_z(gammas[:, t - 1], var[t - 1])) < Z_MAX, t
  assert abs(scale_z(gammas[:, 7], 1.0)) > Z_MAX  # the vanilla variance is rejected
  # Unbiased: the mean of gamma_t is zero.
  m = gammas[:, 6].mean(axis=1)
  assert abs(m.mean() / (m.std(ddof=1) / math.sqrt(m.size))) < Z_MAX


def test_honaker_with_a_schedule_uses_inverse_variance_weights():
  """sigma_node = node's right end (schedule s(t) = t): V follows the inverse-variance recursion."""
  gammas, var = _draws("honaker", steps=8, noise_std=lambda t: t.astype(jnp.float32))
  v1, v2 = 1.0, 4.0  # leaves 1 and 2
  v12 = 1 / (1 / 4.0 + 1 / (v1 + v2))  # node (0, 2], sigma = max(s(1), s(2)) = 2
  assert var[1] == pytest.approx(v12, rel=1e-6)
  v34 = 1 / (1 / 16.0 + 1 / (9.0 + 16.0))
  v14 = 1 / (1 / 16.0 + 1 / (v12 + v34))
  assert var[3] == pytest.approx(v14, rel=1e-6)
  assert abs(scale_z(gammas[:, 3], v14)) < Z_MAX


@pytest.mark.parametrize("mode", ["buffered", "regenerate"])
def test_schedule_variance(mode):
  """sigma_i = i: Var(gamma_7) = 4^2 + 6^2 + 7^2 (the node std is its largest leaf's)."""
  gammas, var = _draws(mode, steps=8, noise_std=lambda t: t.astype(jnp.float32))
  assert var[6] == 16 + 36 + 49
  assert abs(scale_z(gammas[:, 6], 101.0)) < Z_MAX
  assert abs(scale_z(gammas[:, 6], 3 * 49.0)) > Z_MAX  # right-endpoint-only would be wrong here


def test_decreasing_schedule_takes_the_node_maximum():
  """Pitfall P4: with Delta decreasing in t, node (0, 4] gets s(1), not s(4)."""
  st = ta.tree_init(jnp.zeros(2), num_levels=3, key=0)
  sched = lambda t: 8.0 / t.astype(jnp.float32)  # noqa: E731
  for _ in range(4):
    _, st = ta.tree_step(st, noise_std=sched)
  assert float(ta.prefix_variance(st)) == pytest.approx(64.0)


# ----------------------------------------------------------------------------
# Modes, jit, vmap, memory.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_buffered_equals_regenerate_bitwise(jit):
  leaf = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(2)}
  # Every step up to the capacity 2^L - 1. Eagerly, each regenerate step
  # compiles its level loop anew (~1 s), so the eager run fills a 3-level tree
  # (all 7 steps) and the jitted run a 4-level one (all 15 steps).
  levels = 4 if jit else 3

  def run(mode):
    st = ta.tree_init(leaf, num_levels=levels, key=11, mode=mode)
    out = []
    step = maybe_jit(lambda s: ta.tree_step(s, noise_std=0.5, mode=mode), jit)
    for _ in range(ta.capacity(levels)):
      g, st = step(st)
      out.append(g)
    return out

  for gb, gr in zip(run("buffered"), run("regenerate")):
    for a, b in zip(jax.tree.leaves(gb), jax.tree.leaves(gr)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("mode", ta.MODES)
def test_jit_equals_eager_and_vmap_equals_loop(mode):
  eager = [_stream(jax.random.key(k), mode, levels=4, steps=15)[0] for k in range(3)]
  batched = jax.jit(jax.vmap(lambda k: _stream(k, mode, levels=4, steps=15)[0]))(
      jax.random.split(jax.random.key(0), 3))
  one = jax.jit(lambda k: _stream(k, mode, levels=4, steps=15)[0])  # compiled once, called 6x
  looped = [one(k) for k in jax.random.split(jax.random.key(0), 3)]
  for b, l in zip(batched, looped):
    np.testing.assert_allclose(np.asarray(b), np.asarray(l), rtol=1e-6, atol=1e-6)
  jitted = [one(jax.random.key(k)) for k in range(3)]
  for e, j in zip(eager, jitted):
    np.testing.assert_allclose(np.asarray(e), np.asarray(j), rtol=1e-6, atol=1e-6)


def test_state_memory():
  st = ta.tree_init(jnp.zeros(100), num_levels=10, key=0)
  assert st.noise.shape == (10, 100) and st.variance.shape == (10,)
  reg = ta.tree_init(jnp.zeros(100), num_levels=10, key=0, mode="regenerate")
  assert reg.noise.shape == (0, 100) and reg.noise.size == 0


# ----------------------------------------------------------------------------
# Capacity.
# ----------------------------------------------------------------------------


def test_overflow_eager_raises_and_traced_signals():
  st = ta.tree_init(jnp.zeros(2), num_levels=2, key=0)
  for _ in range(3):
    _, st = ta.tree_step(st, noise_std=1.0)
  with pytest.raises(ValueError, match="capacity"):
    ta.tree_step(st, noise_std=1.0)
  step = jax.jit(lambda s: ta.tree_step(s, noise_std=1.0))
  st = ta.tree_init(jnp.zeros(2), num_levels=2, key=0)
  outs = []
  for _ in range(4):
    g, st = step(st)
    outs.append(g)
  assert all(np.all(np.isfinite(np.asarray(g))) for g in outs[:3])
  assert np.all(np.isnan(np.asarray(outs[3]))) and bool(st.overflow) and int(st.step) == 3


# ----------------------------------------------------------------------------
# The optax transform: prefix sums, accounting.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_transform_prefix_sum_and_charges(jit):
  tx = ta.tree_prefix_sum(steps=20, rho=0.5, key=3)
  st = tx.init(jnp.zeros(3))
  upd = maybe_jit(tx.update, jit)
  c = ta.noise_multiplier_for(0.5, 5)
  total = np.zeros(3)
  for t in range(1, 21):
    delta = jnp.full(3, float(t))
    ghat, st = upd(delta, st)
    total += t
    np.testing.assert_allclose(np.asarray(st.total), total, rtol=1e-6)
    assert accounting.spent_rho(st.accountant) == pytest.approx(ta.tree_rho(c, t), rel=1e-9)
  assert float(optax.tree.get(st, "rho")) == pytest.approx(ta.tree_rho(c, 20), rel=1e-6)
  assert int(st.tree.step) == 20


def test_transform_output_is_unbiased_with_the_tree_variance():
  tx_fn = lambda k: ta.tree_prefix_sum(num_levels=4, noise_multiplier=2.0, sensitivity=0.5,  # noqa: E731
                                       key=k)
  deltas = jnp.arange(1.0, 9.0)[:, None] * jnp.ones((1, D))

  def run(k):
    tx = tx_fn(k)
    st = tx.init(jnp.zeros(D))

    def body(s, d):
      g, s = tx.update(d, s)
      return s, g

    return jax.lax.scan(body, st, deltas)[1]

  out = np.asarray(jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(9), REPEATS)))
  prefix = np.cumsum(np.arange(1.0, 9.0))
  noise = out - prefix[None, :, None]
  for t in (1, 3, 7, 8):
    assert abs(scale_z(noise[:, t - 1], _popcount(t) * 1.0)) < Z_MAX  # (c * Delta)^2 = 1
    m = noise[:, t - 1].mean(axis=1)
    assert abs(m.mean() / (m.std(ddof=1) / math.sqrt(m.size))) < Z_MAX


def test_accounting_matches_dp_accounting():
  dp_accounting = pytest.importorskip("dp_accounting")
  rdp = dp_accounting.rdp.RdpAccountant
  rel = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
  for c, steps in ((1.3, 1), (1.3, 7), (0.8, 8), (2.5, 1000), (5.0, 2**20 - 1)):
    ours = ta.tree_rho(c, steps)
    tree = rdp(neighboring_relation=rel).compose(
        dp_accounting.SingleEpochTreeAggregationDpEvent(c, steps))
    # A Gaussian with sigma = 1 / sqrt(2 rho) has the RDP curve alpha * rho.
    gauss = rdp(neighboring_relation=rel).compose(
        dp_accounting.GaussianDpEvent(1.0 / math.sqrt(2.0 * ours)))
    for delta in (1e-5, 1e-9):
      assert tree.get_epsilon(delta) == pytest.approx(gauss.get_epsilon(delta), rel=1e-6)
    # And the transform's accountant holds the same total after `steps` leaves.
    if steps <= 1000:
      tx = ta.tree_prefix_sum(num_levels=ta.num_levels_for(steps), noise_multiplier=c, key=0)
      st = tx.init(jnp.zeros(1))
      step = jax.jit(tx.update)
      for _ in range(steps):
        _, st = step(jnp.zeros(1), st)
      assert accounting.spent_rho(st.accountant) == pytest.approx(ours, rel=1e-6)


def test_transform_under_vmap_over_rho():
  def run(rho):
    tx = ta.tree_prefix_sum(steps=7, rho=rho, key=0)
    st = tx.init(jnp.zeros(2))
    for _ in range(7):
      _, st = tx.update(jnp.ones(2), st)
    return st.accountant.rho

  rhos = jnp.array([0.1, 1.0, 2.0])
  np.testing.assert_allclose(np.asarray(jax.vmap(run)(rhos)), np.asarray(rhos), rtol=1e-6)


def test_no_noise_flag_returns_the_exact_prefix():
  tx = ta.tree_prefix_sum(steps=4, rho=1.0, key=0, disable_noise_for_testing=True)
  st = tx.init(jnp.zeros(2))
  for t in range(1, 5):
    g, st = tx.update(jnp.ones(2), st)
    np.testing.assert_array_equal(np.asarray(g), np.full(2, float(t)))


# ----------------------------------------------------------------------------
# Bad input.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    ({"num_levels": 0}, "num_levels"),
    ({"num_levels": 31}, "restart"),
    ({"num_levels": 3, "mode": "fresh"}, "mode"),
    ({"num_levels": 3, "key": None}, "key"),
])
def test_init_bad_input(kwargs, match):
  kwargs = {"key": 0, **kwargs}
  with pytest.raises((ValueError, TypeError), match=match):
    ta.tree_init(jnp.zeros(2), **kwargs)


def test_init_rejects_integer_leaves():
  with pytest.raises(TypeError, match="floating"):
    ta.tree_init(jnp.zeros(2, jnp.int32), num_levels=3, key=0)


def test_step_bad_noise_std():
  st = ta.tree_init(jnp.zeros(2), num_levels=3, key=0)
  with pytest.raises(ValueError, match="noise_std"):
    ta.tree_step(st, noise_std=-1.0)
  with pytest.raises(ValueError, match="noise_std"):
    ta.tree_step(st, noise_std=lambda t: jnp.ones(3))
  with pytest.raises(ValueError, match="mode"):
    ta.tree_step(st, noise_std=1.0, mode="regenerate")


@pytest.mark.parametrize("kwargs, match", [
    ({"rho": 1.0}, "num_levels"),
    ({"steps": 8, "num_levels": 4, "rho": 1.0}, "num_levels"),
    ({"steps": 8}, "rho"),
    ({"steps": 8, "rho": 1.0, "noise_multiplier": 1.0}, "rho"),
    ({"steps": 8, "rho": -1.0}, "rho"),
    ({"steps": 8, "noise_multiplier": 0.0}, "noise_multiplier"),
    ({"steps": 8, "rho": 1.0, "sensitivity": 0.0}, "sensitivity"),
    ({"steps": 0, "rho": 1.0}, "steps"),
    ({"steps": 2**31, "rho": 1.0}, "restart"),
])
def test_transform_bad_input(kwargs, match):
  with pytest.raises((ValueError, TypeError), match=match):
    ta.tree_prefix_sum(key=0, **kwargs)


def test_transform_refuses_past_capacity():
  tx = ta.tree_prefix_sum(num_levels=1, rho=1.0, key=0)
  st = tx.init(jnp.zeros(1))
  _, st = tx.update(jnp.ones(1), st)
  with pytest.raises(ValueError, match="capacity"):
    tx.update(jnp.ones(1), st)
  step = jax.jit(tx.update)
  st = tx.init(jnp.zeros(1))
  _, st = step(jnp.ones(1), st)
  g, st2 = step(jnp.ones(1), st)
  assert np.isnan(np.asarray(g)).all() and bool(st2.tree.overflow)
  assert accounting.spent_rho(st2.accountant) == accounting.spent_rho(st.accountant)
  np.testing.assert_array_equal(np.asarray(st2.total), np.asarray(st.total))


def test_transform_chains_with_extra_args():
  tx = optax.chain(ta.tree_prefix_sum(steps=4, rho=1.0, key=0), optax.scale(-0.5))
  st = tx.init(jnp.zeros(2))
  step = jax.jit(lambda s: tx.update(jnp.ones(2), s, jnp.zeros(2), value=1.0, unused=None))
  for _ in range(4):
    out, st = step(st)
  assert np.all(np.isfinite(np.asarray(out)))
  assert float(optax.tree.get(st, "rho")) == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("schedule, match", [
    (lambda t: 1.0 + jnp.sin(t.astype(jnp.float32)) ** 2, "monotone"),  # node ends miss the max
    (lambda t: t.astype(jnp.float32) - 3.0, "> 0"),
    (lambda t: jnp.ones(3), "shaped like t"),
])
def test_transform_refuses_a_schedule_the_node_rule_cannot_bound(schedule, match):
  with pytest.raises(ValueError, match=match):
    ta.tree_prefix_sum(steps=8, rho=1.0, sensitivity=schedule, key=0)
  # Monotone schedules, either way, are accepted.
  ta.tree_prefix_sum(steps=8, rho=1.0, sensitivity=lambda t: 1.0 / t.astype(jnp.float32), key=0)
  ta.tree_prefix_sum(steps=8, rho=1.0, sensitivity=lambda t: t.astype(jnp.float32), key=0)
