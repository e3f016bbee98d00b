"""dpjax.mechanisms.tree_aggregation: index sets, node releases, noise scales, modes, accounting, errors.

The statistical tests use fixed keys, so they are deterministic; their
tolerances come from the sampling error (z-scores against ``Z_MAX``), and each
has a negative control that the same check rejects.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dpjax
from conftest import Z_MAX, maybe_jit, scale_z
from dpjax import accounting
from dpjax.mechanisms import noise
from dpjax.mechanisms import tree_aggregation as ta
from dpjax.transforms import tree_prefix_sum

D = 16  # coordinates per draw
REPEATS = 2000


def _stream(key, mode, *, levels=7, steps=64, sensitivity=1.0, c=1.0, leaf=None, inputs=None,
            exact=True):
  """ghat_1..ghat_steps (zero inputs by default: the noise alone) and the claimed variances."""
  leaf = jnp.zeros(D) if leaf is None else leaf
  state = ta.tree_init(leaf, num_levels=levels, key=key, mode=mode)
  if inputs is None:
    inputs = jnp.zeros((steps, *leaf.shape), leaf.dtype)

  def body(st, delta):
    g, st = ta.tree_step(st, delta, sensitivity=sensitivity, noise_multiplier=c, mode=mode,
                         exact=exact)
    return st, (g, ta.prefix_variance(st))

  return jax.lax.scan(body, state, inputs)[1]


def _draws(mode, **kw):
  keys = jax.random.split(jax.random.key(20261130), REPEATS)
  ghats, var = jax.jit(jax.vmap(lambda k: _stream(k, mode, **kw)))(keys)
  return np.asarray(ghats, np.float64), np.asarray(var[0], np.float64)  # [R, T, D], [T]


def _cov_z(a, b, claimed):
  """z-score of H0: E[a b] = claimed (zero-mean a, b), rows independent, coordinates pooled."""
  prod = np.mean(a * b, axis=1)  # one statistic per repeat (the D coordinates are iid)
  return (prod.mean() - claimed) / (prod.std(ddof=1) / math.sqrt(prod.size))


def _popcount(t: int) -> int:
  return bin(t).count("1")


def _ctz(t: int) -> int:
  return (t & -t).bit_length() - 1


def _steps(state, inputs, mode, jit=True, **kw):
  """Runs the tree eagerly step by step; returns the outputs and the states after each step."""
  step = maybe_jit(lambda s, d: ta.tree_step(s, d, mode=mode, **kw), jit)
  outs, states = [], []
  for delta in inputs:
    g, state = step(state, delta)
    outs.append(g)
    states.append(state)
  return outs, states


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
# Node releases: the exact sums, the releases through dpjax.mechanisms.noise, post-processing.
# ----------------------------------------------------------------------------


def test_exact_node_sums_follow_the_binary_mechanism():
  """Level h* = ctz(t) holds S_t = delta_{t-2^h*+1} + ... + delta_t (integers: exact in float32)."""
  inputs = [jnp.full(3, float(t)) for t in range(1, 32)]
  st = ta.tree_init(jnp.zeros(3), num_levels=5, key=0)
  _, states = _steps(st, inputs, "buffered", sensitivity=1.0, noise_multiplier=1.0)
  for t, s in enumerate(states, start=1):
    h = _ctz(t)
    want = sum(range(t - 2**h + 1, t + 1))
    np.testing.assert_array_equal(np.asarray(s.exact[h]), np.full(3, float(want)))
    for lev in range(5):  # every node of I_t is in the state, exact and released
      if (t >> lev) & 1:
        end = (t >> lev) << lev
        assert float(s.exact[lev][0]) == sum(range(end - 2**lev + 1, end + 1))
  # Negative control: the released values are not the exact sums.
  assert not np.array_equal(np.asarray(states[-1].released), np.asarray(states[-1].exact))


@pytest.mark.parametrize("jit", [False, True])
def test_each_node_is_released_through_the_noise_module(jit):
  """N_i == noise.add_gaussian(fold_in(key, i), S_i, sensitivity=D_i, noise_std=c D_i), bitwise."""
  key = jax.random.key(5)
  sched = lambda t: 1.0 + 0.1 * t.astype(jnp.float32)  # noqa: E731  (increasing: D_i = s(i))
  rng = np.random.default_rng(0)
  # 15 steps (every node of a 4-level tree) under jit; eagerly, each step dispatches op by
  # op: 7 steps (every level up to 3, and nodes that are released while others are held).
  inputs = [jnp.asarray(rng.normal(size=D), jnp.float32) for _ in range(15 if jit else 7)]
  st = ta.tree_init(jnp.zeros(D), num_levels=4, key=key)
  _, states = _steps(st, inputs, "buffered", jit=jit, sensitivity=sched, noise_multiplier=2.0)
  # Eagerly both plan on the host, under jit both in the graph.
  release = maybe_jit(
      lambda k, v, dd: noise.add_gaussian(k, v, sensitivity=dd, noise_std=2.0 * dd), jit)
  for t, s in enumerate(states, start=1):
    h = _ctz(t)
    d_i = jnp.float32(1.0) + jnp.float32(0.1) * jnp.float32(t)
    want = release(jax.random.fold_in(key, t), s.exact[h], d_i)
    np.testing.assert_array_equal(np.asarray(s.released[h]), np.asarray(want))
    assert float(s.variance[h]) == pytest.approx(float((2.0 * d_i) ** 2), rel=1e-6)


@pytest.mark.parametrize("mode", ta.MODES)
def test_prefix_sum_is_the_float_sum_of_the_released_nodes(mode):
  """ghat_t == sum over I_t of the stored released values, most significant first, bitwise."""
  rng = np.random.default_rng(1)
  inputs = [jnp.asarray(rng.normal(size=5), jnp.float32) for _ in range(31)]
  st = ta.tree_init(jnp.zeros(5), num_levels=5, key=3, mode=mode)
  outs, states = _steps(st, inputs, mode, sensitivity=1.0, noise_multiplier=0.7)
  for t, (g, s) in enumerate(zip(outs, states), start=1):
    want = jnp.zeros(5)
    for h in reversed(range(5)):
      if (t >> h) & 1:
        want = want + s.released[h]
    np.testing.assert_array_equal(np.asarray(g), np.asarray(want))


@pytest.mark.parametrize("mode", ta.MODES)
def test_inputs_enter_only_through_the_released_nodes(mode):
  """Two streams whose node sums round to the same grid points give bitwise the same outputs.

  The grid is ``2^e`` of ``noise.plan``; perturbing every leaf by 1/100 of it
  moves no node sum (<= 32 leaves) across a rounding boundary of the zero
  stream's nodes, so every release coincides, and so do the outputs. A
  perturbation of two grid steps per leaf changes them (the control).
  """
  gamma = 2.0 ** noise.plan(1.0, 1.0, D).exponent
  levels, steps = 6, 63
  key = jax.random.key(4)
  run = jax.jit(lambda x: _stream(key, mode, levels=levels, steps=steps, inputs=x)[0])
  zero = jnp.zeros((steps, D))
  base = np.asarray(run(zero))
  tiny = np.asarray(run(zero + jnp.float32(0.01 * gamma)))
  np.testing.assert_array_equal(tiny, base)
  moved = np.asarray(run(zero + jnp.float32(2.0 * gamma)))
  assert not np.array_equal(moved, base)


@pytest.mark.parametrize("mode", ta.MODES)
def test_outputs_are_a_function_of_the_releases_alone(mode, monkeypatch):
  """With the release replaced by one that ignores the value, any two streams give the same output.

  If an exact sum reached the output other than through ``noise.add_gaussian``
  (the unsafe ``exact + noise`` pattern), the two streams would differ.
  """
  seen = []

  def fake_release(key, value, *, sensitivity, noise_std, exact=True):
    seen.append((sensitivity, noise_std, exact))
    return jax.tree.map(lambda v: noise_std * jax.random.normal(key, v.shape, v.dtype), value)

  monkeypatch.setattr(noise, "add_gaussian", fake_release)
  rng = np.random.default_rng(6)
  a, b = (jnp.asarray(rng.normal(size=(15, 4)) * scale, jnp.float32) for scale in (1.0, 1e3))
  run = lambda x: _stream(jax.random.key(8), mode, levels=4, steps=15, leaf=jnp.zeros(4),  # noqa: E731
                          inputs=x, sensitivity=0.5, c=3.0)[0]
  np.testing.assert_array_equal(np.asarray(run(a)), np.asarray(run(b)))
  assert seen and all(s == 0.5 and sd == pytest.approx(1.5) and e for s, sd, e in seen)


# ----------------------------------------------------------------------------
# Noise scales.
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def buffered_draws():
  return _draws("buffered")


def test_variance_is_popcount(buffered_draws):
  """Zero inputs: ghat_t is the noise, variance c^2 popcount(t) (c = 1)."""
  ghats, var = buffered_draws
  for t in range(1, 65):
    assert var[t - 1] == _popcount(t)
    z = scale_z(ghats[:, t - 1], _popcount(t))
    assert abs(z) < Z_MAX, (t, z)
  # Negative control: the claim 1.1 popcount is rejected at the same tolerance.
  assert abs(scale_z(ghats[:, 6], _popcount(7) * 1.1)) > Z_MAX


def test_covariance_reuses_node_noise(buffered_draws):
  ghats, _ = buffered_draws
  g = lambda t: ghats[:, t - 1]  # noqa: E731
  assert abs(_cov_z(g(6), g(7), 2.0)) < Z_MAX  # sigma_4^2 + sigma_6^2
  assert abs(_cov_z(g(5), g(7), 1.0)) < Z_MAX  # sigma_4^2
  assert abs(_cov_z(g(7), g(8), 0.0)) < Z_MAX  # no shared node
  assert abs(_cov_z(g(12), g(15), 2.0)) < Z_MAX  # I_12 = {8, 12}, I_15 = {8, 12, 14, 15}


def test_fresh_draw_per_step_fails_the_covariance_check():
  """Right marginal variance, no reuse: the covariance check rejects it."""
  keys = jax.random.split(jax.random.key(7), REPEATS)
  fresh = jax.vmap(lambda k: jnp.stack([
      math.sqrt(_popcount(t)) * jax.random.normal(jax.random.fold_in(k, t), (D,))
      for t in (6, 7)]))(keys)
  fresh = np.asarray(fresh, np.float64)
  assert abs(scale_z(fresh[:, 1], 3.0)) < Z_MAX  # the variance check alone passes it
  assert abs(_cov_z(fresh[:, 0], fresh[:, 1], 2.0)) > Z_MAX


def test_honaker_variances():
  ghats, var = _draws("honaker", steps=16)
  assert var[3] == pytest.approx(4 / 7, rel=1e-6)
  assert var[6] == pytest.approx(4 / 7 + 2 / 3 + 1, rel=1e-6)
  assert var[7] == pytest.approx(8 / 15, rel=1e-6)
  assert var[15] == pytest.approx(16 / 31, rel=1e-6)
  for t in (1, 2, 3, 4, 7, 8, 11, 16):
    assert abs(scale_z(ghats[:, t - 1], var[t - 1])) < Z_MAX, t
  assert abs(scale_z(ghats[:, 7], 1.0)) > Z_MAX  # the vanilla variance is rejected
  # Unbiased: the mean of the noise is zero.
  m = ghats[:, 6].mean(axis=1)
  assert abs(m.mean() / (m.std(ddof=1) / math.sqrt(m.size))) < Z_MAX


def test_honaker_with_a_schedule_uses_inverse_variance_weights():
  """sigma_node = node's right end (schedule s(t) = t): V follows the inverse-variance recursion."""
  ghats, var = _draws("honaker", steps=8, sensitivity=lambda t: t.astype(jnp.float32))
  v1, v2 = 1.0, 4.0  # leaves 1 and 2
  v12 = 1 / (1 / 4.0 + 1 / (v1 + v2))  # node (0, 2], sigma = max(s(1), s(2)) = 2
  assert var[1] == pytest.approx(v12, rel=1e-6)
  v34 = 1 / (1 / 16.0 + 1 / (9.0 + 16.0))
  v14 = 1 / (1 / 16.0 + 1 / (v12 + v34))
  assert var[3] == pytest.approx(v14, rel=1e-6)
  assert abs(scale_z(ghats[:, 3], v14)) < Z_MAX


def test_schedule_variance():
  """sigma_i = i: Var(ghat_7 - g_7) = 4^2 + 6^2 + 7^2 (the node std is its largest leaf's)."""
  ghats, var = _draws("buffered", steps=8, sensitivity=lambda t: t.astype(jnp.float32))
  assert var[6] == 16 + 36 + 49
  assert abs(scale_z(ghats[:, 6], 101.0)) < Z_MAX
  assert abs(scale_z(ghats[:, 6], 3 * 49.0)) > Z_MAX  # right-endpoint-only would be wrong here


def test_decreasing_schedule_takes_the_node_maximum():
  """With Delta decreasing in t, node (0, 4] gets s(1), not s(4)."""
  st = ta.tree_init(jnp.zeros(2), num_levels=3, key=0)
  sched = lambda t: 8.0 / t.astype(jnp.float32)  # noqa: E731
  for _ in range(4):
    _, st = ta.tree_step(st, jnp.zeros(2), sensitivity=sched, noise_multiplier=1.0)
  assert float(ta.prefix_variance(st)) == pytest.approx(64.0)


def test_float_noise_opt_out_has_the_same_scale(buffered_draws):
  """exact=False (unsafe_float_noise): float noise, same variance; not grid-valued."""
  ghats, var = _draws("buffered", steps=8, exact=False)
  for t in (1, 3, 7, 8):
    assert abs(scale_z(ghats[:, t - 1], var[t - 1])) < Z_MAX
  gamma = 2.0 ** noise.plan(1.0, 1.0, D).exponent
  exact_ghats, _ = buffered_draws  # the same keys and tree, exact noise (its first step: N_1)
  assert np.all(np.mod(exact_ghats[:, 0] / gamma, 1.0) == 0)  # N_1 is gamma times an integer
  assert not np.all(np.mod(ghats[:, 0] / gamma, 1.0) == 0)


# ----------------------------------------------------------------------------
# Reproducibility, jit, vmap, memory.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ta.MODES)
def test_fixed_key_is_bitwise_reproducible(mode):
  leaf = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(2)}
  rng = np.random.default_rng(2)
  inputs = [jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape), jnp.float32), leaf)
            for _ in range(3)]
  step = lambda s, d: ta.tree_step(s, d, sensitivity=0.5, noise_multiplier=1.5, mode=mode)  # noqa: E731

  def run(key, fn):
    st, outs = ta.tree_init(leaf, num_levels=2, key=key, mode=mode), []
    for delta in inputs:
      g, st = fn(st, delta)
      outs.append(g)
    return outs

  compiled = jax.jit(step)
  eager, jitted, again = run(11, step), run(11, compiled), run(11, jax.jit(step))  # a new trace
  for a, b, c in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), jax.tree.leaves(again)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(b), np.asarray(c))
  other = run(12, compiled)
  assert not np.array_equal(np.asarray(other[-1]["w"]), np.asarray(jitted[-1]["w"]))


@pytest.mark.parametrize("mode", ta.MODES)
def test_vmap_equals_loop(mode):
  keys = jax.random.split(jax.random.key(0), 3)
  one = jax.jit(lambda k: _stream(k, mode, levels=4, steps=15)[0])
  batched = jax.jit(jax.vmap(lambda k: _stream(k, mode, levels=4, steps=15)[0]))(keys)
  for b, k in zip(batched, keys):
    np.testing.assert_allclose(np.asarray(b), np.asarray(one(k)), rtol=1e-6, atol=1e-6)


def test_state_memory_and_the_removed_regenerate_mode():
  st = ta.tree_init(jnp.zeros(100), num_levels=10, key=0)
  assert st.exact.shape == (10, 100) and st.released.shape == (10, 100)
  assert st.variance.shape == (10,)
  for build in (lambda: ta.tree_init(jnp.zeros(2), num_levels=3, key=0, mode="regenerate"),
                lambda: tree_prefix_sum(steps=8, rho=1.0, key=0, mode="regenerate"),
                lambda: ta.tree_step(st, jnp.zeros(100), sensitivity=1.0, noise_multiplier=1.0,
                                     mode="regenerate")):
    with pytest.raises(ValueError, match="mode='buffered'"):
      build()


# ----------------------------------------------------------------------------
# Capacity.
# ----------------------------------------------------------------------------


def test_overflow_eager_raises_and_traced_signals():
  kw = dict(sensitivity=1.0, noise_multiplier=1.0)
  st = ta.tree_init(jnp.zeros(2), num_levels=2, key=0)
  for _ in range(3):
    _, st = ta.tree_step(st, jnp.ones(2), **kw)
  with pytest.raises(ValueError, match="capacity"):
    ta.tree_step(st, jnp.ones(2), **kw)
  step = jax.jit(lambda s: ta.tree_step(s, jnp.ones(2), **kw))
  st = ta.tree_init(jnp.zeros(2), num_levels=2, key=0)
  outs = []
  for _ in range(4):
    prev = st
    g, st = step(st)
    outs.append(g)
  assert all(np.all(np.isfinite(np.asarray(g))) for g in outs[:3])
  assert np.all(np.isnan(np.asarray(outs[3]))) and bool(st.overflow) and int(st.step) == 3
  for a, b in zip(jax.tree.leaves((st.exact, st.released, st.variance)),
                  jax.tree.leaves((prev.exact, prev.released, prev.variance))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------
# The optax transform: prefix sums, accounting.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("jit", [False, True])
def test_transform_charges_rho_per_level_and_the_slack_of_every_node(jit):
  tx = tree_prefix_sum(steps=20, rho=0.5, key=3)
  st = tx.init(jnp.zeros(3))
  upd = maybe_jit(tx.update, jit)
  c = ta.noise_multiplier_for(0.5, 5)
  tau = noise.tv_per_coordinate()
  steps = 20 if jit else 5  # each eager step dispatches op by op
  for t in range(1, steps + 1):
    _, st = upd(jnp.full(3, float(t)), st)
    assert accounting.spent_rho(st.accountant) == pytest.approx(ta.tree_rho(c, t), rel=1e-9)
    # One node of 3 coordinates released per step.
    assert accounting.spent_truncation(st.accountant) == pytest.approx(3 * t * tau, rel=1e-6)
  assert float(optax.tree.get(st, "rho")) == pytest.approx(ta.tree_rho(c, steps), rel=1e-6)
  assert int(st.tree.step) == steps


def test_honaker_charges_every_measured_node():
  """Honaker releases the h* + 1 nodes ending at t: 2T - popcount(T) nodes after T steps."""
  tx = tree_prefix_sum(steps=16, rho=0.5, key=3, mode="honaker")
  leaf = {"a": jnp.zeros(2), "b": jnp.zeros((2, 2))}  # K = 6 coordinates per node
  st = tx.init(leaf)
  upd = jax.jit(tx.update)
  tau = noise.tv_per_coordinate()
  for t in range(1, 17):
    _, st = upd(jax.tree.map(jnp.ones_like, leaf), st)
    assert accounting.spent_truncation(st.accountant) == pytest.approx(
        6 * (2 * t - _popcount(t)) * tau, rel=1e-6), t
    # Negative control: one node per step would be the buffered count.
    if t > 1:
      assert accounting.spent_truncation(st.accountant) > 6 * t * tau * (1 + 1e-3)
  assert [int(ta.nodes_released(jnp.int32(t - 1), jnp.int32(t), mode="honaker"))
          for t in (1, 2, 3, 4, 8)] == [1, 2, 1, 3, 4]
  assert int(ta.nodes_released(jnp.int32(3), jnp.int32(3), mode="honaker")) == 0  # refused


def test_no_slack_without_exact_noise():
  for kw in ({"disable_noise_for_testing": True}, {"unsafe_float_noise": True}):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", dpjax.PrivacyLeakWarning)
      tx = tree_prefix_sum(steps=4, rho=1.0, key=0, **kw)
    st = tx.init(jnp.zeros(2))
    for _ in range(4):
      _, st = tx.update(jnp.ones(2), st)
    assert accounting.spent_truncation(st.accountant) == 0.0
    assert accounting.spent_rho(st.accountant) == pytest.approx(1.0, rel=1e-9)


def test_unsafe_float_noise_warns():
  with pytest.warns(dpjax.PrivacyLeakWarning, match="unsafe_float_noise"):
    tree_prefix_sum(steps=4, rho=1.0, key=0, unsafe_float_noise=True)
  with pytest.raises(TypeError, match="unsafe_float_noise"):
    tree_prefix_sum(steps=4, rho=1.0, key=0, unsafe_float_noise=1)


def test_transform_output_is_unbiased_with_the_tree_variance():
  tx_fn = lambda k: tree_prefix_sum(num_levels=4, noise_multiplier=2.0, sensitivity=0.5,  # noqa: E731
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
  err = out - prefix[None, :, None]
  for t in (1, 3, 7, 8):
    assert abs(scale_z(err[:, t - 1], _popcount(t) * 1.0)) < Z_MAX  # (c * Delta)^2 = 1
    m = err[:, t - 1].mean(axis=1)
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
      tx = tree_prefix_sum(num_levels=ta.num_levels_for(steps), noise_multiplier=c, key=0)
      st = tx.init(jnp.zeros(1))
      # `steps` updates in one jitted scan (not one dispatch per step).
      st = jax.jit(lambda s: jax.lax.scan(lambda s, _: (tx.update(jnp.zeros(1), s)[1], None),
                                          s, None, length=steps)[0])(st)
      assert accounting.spent_rho(st.accountant) == pytest.approx(ours, rel=1e-6)


def test_transform_under_vmap_over_rho():
  def run(rho):
    tx = tree_prefix_sum(steps=7, rho=rho, key=0)
    st = tx.init(jnp.zeros(2))
    for _ in range(7):
      _, st = tx.update(jnp.ones(2), st)
    return st.accountant.rho

  rhos = jnp.array([0.1, 1.0, 2.0])
  np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(run))(rhos)), np.asarray(rhos),
                             rtol=1e-6)


def test_no_noise_flag_returns_the_exact_prefix():
  for mode in ta.MODES:
    tx = tree_prefix_sum(steps=4, rho=1.0, key=0, mode=mode, disable_noise_for_testing=True)
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


@pytest.mark.parametrize("delta, kwargs, match", [
    (jnp.zeros(2), {"sensitivity": -1.0}, "sensitivity"),
    (jnp.zeros(2), {"sensitivity": lambda t: jnp.ones(3)}, "shaped like t"),
    (jnp.zeros(2), {"noise_multiplier": -1.0}, "noise_multiplier"),
    (jnp.zeros(3), {}, "delta has a leaf of shape"),
    ({"a": jnp.zeros(2)}, {}, "delta must have the structure"),
    (jnp.zeros(2, jnp.int32), {}, "delta must be floating"),
    (jnp.zeros(2), {"mode": "fresh"}, "mode"),
])
def test_step_bad_input(delta, kwargs, match):
  st = ta.tree_init(jnp.zeros(2), num_levels=3, key=0)
  kwargs = {"sensitivity": 1.0, "noise_multiplier": 1.0, **kwargs}
  with pytest.raises((ValueError, TypeError), match=match):
    ta.tree_step(st, delta, **kwargs)


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
    tree_prefix_sum(key=0, **kwargs)


def test_transform_refuses_past_capacity():
  tx = tree_prefix_sum(num_levels=1, rho=1.0, key=0)
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
  assert accounting.spent_truncation(st2.accountant) == accounting.spent_truncation(st.accountant)
  np.testing.assert_array_equal(np.asarray(st2.tree.released), np.asarray(st.tree.released))


def test_transform_chains_with_extra_args():
  tx = optax.chain(tree_prefix_sum(steps=4, rho=1.0, key=0), optax.scale(-0.5))
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
    tree_prefix_sum(steps=8, rho=1.0, sensitivity=schedule, key=0)
  # Monotone schedules, either way, are accepted.
  tree_prefix_sum(steps=8, rho=1.0, sensitivity=lambda t: 1.0 / t.astype(jnp.float32), key=0)
  tree_prefix_sum(steps=8, rho=1.0, sensitivity=lambda t: t.astype(jnp.float32), key=0)
