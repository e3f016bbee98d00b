"""Tests for dpjax.training (dpjax.fit): the compiled private training run."""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
import pytest

import dpjax
from conftest import known_optima, shared_data_file
from dpjax import accounting, compiled, data, training as fit_lib
from dpjax.problem import solve

N, D = 400, 4

# The per-level runs of test_fit_levels_matches_fit_per_level: level i is
# fit(small, algorithm, epsilon=_LEVEL_EPS[i], accounting=_LEVEL_METHODS[i], **_LEVEL_KW).
# Tests of other properties of such a run use these settings too, so its whole-run program
# (dpjax.compiled: keyed on the algorithm, options, steps, repeats, init and budget) is
# compiled once for the file, not once per test.
_LEVEL_EPS = [0.5, 2.0, 2.0]
_LEVEL_METHODS = ["gaussian", "paper", "gaussian"]
_LEVEL_KW = dict(steps=4, repeats=3, seed=7, init="random-unit")


@pytest.fixture(scope="module")
def small():
  return data.synthetic(1, n=N, d=D)


def _loss64(w, x, y):
  a = np.asarray(y, np.float64)[:, None] * np.asarray(x, np.float64)
  return float(np.mean(np.logaddexp(0.0, -(a @ np.asarray(w, np.float64)))))


@pytest.mark.parametrize("algorithm", fit_lib.ALGORITHMS)
def test_result_fields_and_shapes(algorithm, small):
  steps, repeats = 3, 2
  compiled.clear()  # a cold compile, whatever ran before in this process
  res = fit_lib.fit(small, algorithm, epsilon=1.0, steps=steps, repeats=repeats, seed=5)
  assert isinstance(res, fit_lib.FitResult)
  assert res.params.shape == (repeats, D) and res.params.dtype == np.float32
  assert res.losses.shape == (repeats, steps + 1)
  assert res.excess_losses.shape == (repeats,) and res.excess_losses.dtype == np.float64
  assert res.guard_resets.shape == (repeats,) and res.guard_resets.tolist() == [0, 0]
  assert np.isfinite(res.losses).all() and np.isfinite(res.params).all()
  assert (res.algorithm, res.n, res.d, res.steps, res.repeats) == (algorithm, N, D, steps, repeats)
  assert res.accounting == "gaussian" and res.delta == 1.0 / N**2 and res.ridge == 0.0
  assert res.seconds_compile > 0 and res.seconds_run > 0
  # Zeros init: loss(w_0) = log 2 exactly (up to float32).
  np.testing.assert_allclose(res.losses[:, 0], math.log(2), rtol=1e-6)
  # The excess loss is the float64 loss of the returned parameters.
  _, loss_star = solve.logistic_optimum(small.x, small.y)
  assert res.loss_star == loss_star
  for r in range(repeats):
    assert res.excess_losses[r] == pytest.approx(_loss64(res.params[r], *small) - loss_star, abs=1e-12)
  # The in-graph trajectory ends at the final iterate (float32 rounding), which
  # is the output unless the algorithm averages by default (precond-gd).
  np.testing.assert_allclose(res.losses[:, -1], res.final_excess_losses + loss_star, rtol=1e-5)
  assert res.average == ("last-half" if algorithm == "precond-gd" else "none")
  if res.average == "none":
    np.testing.assert_array_equal(res.final_excess_losses, res.excess_losses)
  assert res.gradient_evaluations == steps
  assert res.curvature_evaluations == {"dp-gd": 0, "precond-gd": 1}.get(algorithm, steps)
  assert res.excess_loss_mean == pytest.approx(np.mean(res.excess_losses))
  assert res.excess_loss_se == pytest.approx(np.std(res.excess_losses, ddof=1) / math.sqrt(repeats))
  # The accountant in the final states holds the whole budget.
  np.testing.assert_allclose(res.rho_spent, res.rho, rtol=1e-9)
  np.testing.assert_allclose(optax.tree.get(res.opt_state, "rho"), res.rho, rtol=1e-6)
  assert np.asarray(res.opt_state.count).tolist() == [steps] * repeats
  assert not np.asarray(res.opt_state.budget_exhausted).any()


_EPS, _DELTA = 0.7, 1e-5
# dp-gd's budget in test_epsilon_conversion_and_accountant_total (accounting "paper"): the
# rho-given and seed tests below run at it (steps=3, repeats=2), so the four tests share one
# compiled dp-gd program.
_RHO = accounting.epsilon_to_zcdp(_EPS, _DELTA, "paper")


@pytest.mark.parametrize(
    "method,algorithm",
    list(zip(accounting.METHODS, ("dp-gd", "hess-clip", "qu-add", "hess-add"))),
)
def test_epsilon_conversion_and_accountant_total(method, algorithm, small):
  eps, delta = _EPS, _DELTA
  res = fit_lib.fit(small, algorithm, epsilon=eps, delta=delta, steps=3, repeats=2,
                    accounting=method)
  rho = accounting.epsilon_to_zcdp(eps, delta, method)
  assert (res.rho, res.epsilon, res.delta, res.accounting) == (rho, eps, delta, method)
  np.testing.assert_allclose(res.rho_spent, rho, rtol=1e-9)
  assert accounting.zcdp_to_epsilon(float(res.rho_spent[0]), delta, method) == pytest.approx(eps, rel=1e-8)


@pytest.mark.parametrize("method", accounting.METHODS)
def test_rho_given_reports_epsilon(method, small):
  res = fit_lib.fit(small, "dp-gd", rho=_RHO, steps=3, repeats=2, accounting=method)
  assert res.rho == _RHO
  assert res.epsilon == accounting.zcdp_to_epsilon(_RHO, 1.0 / N**2, method)
  np.testing.assert_allclose(res.rho_spent, _RHO, rtol=1e-9)


def test_repeats_independent_and_reproducible(small):
  kw = dict(_LEVEL_KW, epsilon=_LEVEL_EPS[0])  # one program for the three calls
  del kw["seed"]
  a = fit_lib.fit(small, "hess-clip", seed=7, **kw)
  b = fit_lib.fit(small, "hess-clip", seed=7, **kw)
  c = fit_lib.fit(small, "hess-clip", seed=8, **kw)
  np.testing.assert_array_equal(a.params, b.params)
  np.testing.assert_array_equal(a.losses, b.losses)
  assert not np.allclose(a.params, c.params)
  # Different repeats get different init points and noise.
  assert len({tuple(p) for p in a.params}) == 3
  assert len(set(a.losses[:, 0].tolist())) == 3


# ----------------------------------------------------------------------------
# Seeds: fresh OS entropy by default; an explicit seed reproduces and is recorded.

_SEED_KW = dict(rho=_RHO, steps=3, repeats=2)  # dp-gd on `small`: the program of the tests above


def test_default_seed_is_fresh_and_not_recorded(small):
  a = fit_lib.fit(small, "dp-gd", **_SEED_KW)
  b = fit_lib.fit(small, "dp-gd", **_SEED_KW)
  assert a.seed is None and b.seed is None
  assert not np.array_equal(a.params, b.params)  # two default calls: two different releases
  old_default = fit_lib.fit(small, "dp-gd", seed=0, **_SEED_KW)
  assert not np.array_equal(a.params, old_default.params)


def test_explicit_seed_reproduces_bit_for_bit_and_is_recorded(small):
  seed = 2**63 + 12345  # above 2**32: every bit of it must count
  a = fit_lib.fit(small, "dp-gd", seed=seed, **_SEED_KW)
  b = fit_lib.fit(small, "dp-gd", seed=np.uint64(seed), **_SEED_KW)
  assert a.seed == b.seed == seed and type(b.seed) is int
  np.testing.assert_array_equal(a.params, b.params)
  np.testing.assert_array_equal(a.losses, b.losses)
  # jax.random.key(seed) alone keeps the low 32 bits: those two seeds would collide.
  low = fit_lib.fit(small, "dp-gd", seed=seed % 2**32, **_SEED_KW)
  assert not np.allclose(a.params, low.params)
  assert fit_lib.fit(small, "dp-gd", seed=2**64 - 1, **_SEED_KW).seed == 2**64 - 1


def test_seed_below_2_32_keeps_the_jax_random_key(small):
  # Results made before seeds were widened reproduce: seed s < 2**32 is jax.random.key(s).
  res = fit_lib.fit(small, "dp-gd", seed=7, **_SEED_KW)
  one = fit_lib.repeat_fn("dp-gd", dict(n=N, steps=_SEED_KW["steps"]), d=D)
  run = jax.jit(jax.vmap(lambda k, x, y: one(k, res.rho, x, y)[0], in_axes=(0, None, None)))
  old = run(jax.random.split(jax.random.key(7), 2), small.x, small.y)
  np.testing.assert_allclose(res.params, old, rtol=1e-6, atol=1e-7)


# dp-gd fit_levels on `small`: one program (the levels' budgets are traced), shared by the
# tests below.
_FIT_LEVELS_KW = dict(epsilons=[1.0, 1.0, 4.0], steps=2, repeats=2)


def test_fit_levels_seeds(small):
  kw = _FIT_LEVELS_KW
  a = fit_lib.fit_levels(small, "dp-gd", **kw)
  b = fit_lib.fit_levels(small, "dp-gd", **kw)
  assert [r.seed for r in a] == [None] * 3
  assert not np.array_equal(a[2].params, b[2].params)
  # Fresh keys: each level its own noise, even at the same budget (shared noise could be
  # subtracted between levels).
  assert not np.allclose(a[0].params, a[1].params)
  c = fit_lib.fit_levels(small, "dp-gd", seed=2**40 + 3, **kw)
  d = fit_lib.fit_levels(small, "dp-gd", seed=2**40 + 3, **kw)
  assert [r.seed for r in c] == [2**40 + 3] * 3
  np.testing.assert_array_equal(c[2].params, d[2].params)
  np.testing.assert_array_equal(c[0].params, c[1].params)  # a seed: common random numbers
  e = fit_lib.fit_levels(small, "dp-gd", seed=3, **kw)  # the same low 32 bits
  assert not np.allclose(c[2].params, e[2].params)


def test_guard_fires_and_resets_to_zeros(small):
  # A tiny public radius: every update leaves the ball, so w_t = w_0 = 0 throughout.
  res = fit_lib.fit(small, "dp-gd", rho=0.1, steps=4, repeats=2, guard_radius=1e-6)
  assert res.guard_resets.tolist() == [4, 4]
  np.testing.assert_array_equal(res.params, 0.0)
  np.testing.assert_allclose(res.losses, math.log(2), rtol=1e-6)


def test_guard_resets_to_random_unit_start(small):
  # With a tiny budget the DP-GD noise (std ~14 per coordinate) throws every
  # iterate out of the radius-1.5 ball, so every step restarts from w_0.
  res = fit_lib.fit(small, "dp-gd", rho=1e-6, steps=4, repeats=2, init="random-unit", guard_radius=1.5)
  assert res.guard_resets.tolist() == [4, 4]
  np.testing.assert_allclose(np.linalg.norm(res.params, axis=1), 1.0, rtol=1e-6)
  np.testing.assert_array_equal(res.losses, np.repeat(res.losses[:, :1], 5, axis=1))
  assert res.losses[0, 0] != res.losses[1, 0]


def test_guard_default_never_fires_and_loss_decreases(small):
  # Level 1 of test_fit_levels_matches_fit_per_level[hess-clip] (the same program).
  res = fit_lib.fit(small, "hess-clip", epsilon=_LEVEL_EPS[1], accounting=_LEVEL_METHODS[1],
                    **_LEVEL_KW)
  assert res.guard_resets.tolist() == [0, 0, 0]
  assert (res.losses[:, -1] < res.losses[:, 0]).all()


def test_no_noise_newton_reaches_optimum():
  ds = data.synthetic(0)
  # Its float64 optimum from conftest.KNOWN_OPTIMA (the solver is tested in test_solve.py).
  with known_optima(), pytest.warns(dpjax.PrivacyLeakWarning,
                                    match="disable_noise_for_testing=True"):
    res = fit_lib.fit(ds, "hess-clip", rho=1e3, steps=8, disable_noise_for_testing=True)
  assert res.private is False  # no noise: not a private release
  # Float64 rounding: each mean loss over n = 10,000 rows is off by ~1e-15 (-1.7e-15 was
  # seen), so the excess of a near-exact optimum may dip that far below 0; 1e-12 covers it.
  assert -1e-12 <= res.excess_losses[0] < 1e-8


def test_separable_data_uses_ridge():
  x = np.array([[0.5, 0.1], [-0.5, 0.2], [0.4, -0.3], [-0.6, 0.0]], np.float32)
  y = np.array([1.0, -1.0, 1.0, -1.0], np.float32)
  res = fit_lib.fit((x, y), "dp-gd", rho=1.0, steps=2)
  assert res.ridge == fit_lib.SEPARABLE_RIDGE
  assert res.loss_star == solve.logistic_optimum(x, y, ridge=fit_lib.SEPARABLE_RIDGE).loss


def test_accepts_jax_arrays_and_tuples(small):
  # The settings of test_result_fields_and_shapes[qu-clip]: its program (XLA's disk cache).
  kw = dict(epsilon=1.0, steps=3, repeats=2, seed=5)
  a = fit_lib.fit(small, "qu-clip", **kw)
  b = fit_lib.fit((jax.numpy.asarray(small.x), jax.numpy.asarray(small.y)), "qu-clip", **kw)
  np.testing.assert_array_equal(a.params, b.params)


def test_optimum_loss_is_cached(small, monkeypatch):
  first = fit_lib.optimum_loss(small.x, small.y)

  def fail(*args, **kwargs):
    raise AssertionError("logistic_optimum called again")

  monkeypatch.setattr(solve, "logistic_optimum", fail)
  assert fit_lib.optimum_loss(small.x.copy(), small.y.copy()) == first


def test_w8a_hess_clip_eps10_stays_finite(monkeypatch):
  # The reference code's loss (log1p(exp(-margin))) overflowed to inf here (T = 5).
  with pytest.warns(dpjax.PrivacyLeakWarning):  # the paper's (non-private) preprocessing
    ds = data.load_libsvm(shared_data_file("w8a.bz2"), preprocess="paper")
  # Skip the 8 s float64 optimum (w8a is separable: ridge 1e-9 gives this loss);
  # it is reporting only and plays no part in the run under test.
  monkeypatch.setattr(solve, "optimum_loss", lambda x, y: (0.0415643607, 1e-9))
  res = fit_lib.fit(ds, "hess-clip", epsilon=10.0, steps=5, repeats=2, init="random-unit")
  assert np.isfinite(res.losses).all() and np.isfinite(res.params).all()
  assert np.isfinite(res.excess_losses).all()
  assert (np.linalg.norm(res.params, axis=1) <= fit_lib.DEFAULT_GUARD_RADIUS).all()


# ----------------------------------------------------------------------------
# Bad input: each raises eagerly, before the optimum or any compilation.


def _bad_labels():
  x, y = data.synthetic(0, n=10, d=3)
  return x, (y + 1) / 2


def _big_rows():
  x, y = data.synthetic(0, n=10, d=3)
  return 2 * x, y


_GOOD = dict(algorithm="hess-clip", epsilon=1.0, steps=2)


@pytest.mark.parametrize(
    "override,dataset,error,match",
    [
        (dict(epsilon=0.0), None, ValueError, "epsilon must be > 0"),
        (dict(epsilon=-1.0), None, ValueError, "epsilon must be > 0"),
        (dict(epsilon=None, rho=0.0), None, ValueError, "rho must be > 0"),
        (dict(epsilon=None, rho=-2.0), None, ValueError, "rho must be > 0"),
        (dict(epsilon=None), None, ValueError, "exactly one privacy budget.*neither"),
        (dict(rho=0.1), None, ValueError, "exactly one privacy budget.*both"),
        (dict(delta=0.0), None, ValueError, r"delta must be in the open interval \(0, 1\)"),
        (dict(delta=1.0), None, ValueError, r"delta must be in the open interval \(0, 1\)"),
        (dict(delta=-0.1), None, ValueError, r"delta must be in the open interval \(0, 1\)"),
        (dict(steps=0), None, ValueError, "steps must be >= 1"),
        (dict(steps=2.0), None, TypeError, "steps must be an integer"),
        (dict(repeats=0), None, ValueError, "repeats must be >= 1"),
        (dict(algorithm="newton"), None, ValueError, "algorithm must be one of .*'dp-gd'"),
        (dict(accounting="rdp"), None, ValueError, "accounting must be one of"),
        (dict(init="ones"), None, ValueError, "init must be one of"),
        (dict(guard_radius=0.0), None, ValueError, "guard_radius must be > 0"),
        (dict(init="random-unit", guard_radius=1.0), None, ValueError, r"exceed \|\|w0\|\| = 1"),
        (dict(seed=-1), None, ValueError, r"seed must be in \[0, 2\*\*64\)"),
        (dict(seed=2**64), None, ValueError, r"seed must be in \[0, 2\*\*64\), got 18446744073709551616"),
        (dict(seed=1.5), None, TypeError, "seed must be None .* or an integer"),
        (dict(seed=True), None, TypeError, "seed must be None .* got bool"),
        (dict(seed=np.float64(3)), None, TypeError, "seed must be None .* got float64"),
        (dict(seed="3"), None, TypeError, "seed must be None .* got str"),
        (dict(min_eigenvalue=1 / (4 * 50)), None, ValueError, "needs lam > L1/n"),
        (dict(min_eigenvalue=0.5 / (4 * 50)), None, ValueError, "Pass min_eigenvalue >"),
        (dict(grad_frac=1.0), None, ValueError, "grad_frac must be in the open interval"),
        (dict(algorithm="dp-gd", grad_frac=0.5), None, TypeError, "unknown option.*grad_frac"),
        (dict(key=3), None, TypeError, r"fit sets \['key'\] itself"),
        (dict(modification="add"), None, TypeError, "fit sets.*modification"),
        (dict(average="mean"), None, ValueError, "average must be one of"),
        (dict(algorithm="precond-gd", curvature_frac=0.0), None, ValueError,
         r"curvature_frac must be in the open interval \(0, 1\)"),
        (dict(algorithm="precond-gd", curvature_frac=1.0), None, ValueError,
         r"curvature_frac must be in the open interval \(0, 1\)"),
        (dict(algorithm="precond-gd", kappa=0.0), None, ValueError, "kappa must be > 0"),
        (dict(algorithm="precond-gd", kappa=-3.0), None, ValueError, "kappa must be > 0"),
        (dict(algorithm="precond-gd", steps=0), None, ValueError, "steps must be >= 1"),
        (dict(algorithm="precond-gd", refresh_every=0), None, ValueError,
         "refresh_every must be >= 1"),
        (dict(algorithm="precond-gd", d=3), None, TypeError, r"fit sets \['d'\] itself"),
        ({}, "labels", ValueError, r"labels -1 and \+1"),
        ({}, "rows", ValueError, "has L2 norm .* > 1"),
        ({}, "list", TypeError, "data must be a dpjax.data.Dataset"),
    ],
)
def test_bad_input_raises_eagerly(override, dataset, error, match, monkeypatch):
  def no_work(*args, **kwargs):
    raise AssertionError("work started before validation finished")

  monkeypatch.setattr(solve, "optimum_loss", no_work)
  monkeypatch.setattr(jax, "jit", no_work)
  ds = {
      None: data.synthetic(0, n=50, d=3),
      "labels": _bad_labels(),
      "rows": _big_rows(),
      "list": [[1.0]],
  }[dataset]
  kwargs = dict(_GOOD, **override)
  with pytest.raises(error, match=match):
    fit_lib.fit(ds, kwargs.pop("algorithm"), **kwargs)


def test_clip_floor_just_above_bound_is_accepted(small):
  lam = 1.01 / (4 * N)
  res = fit_lib.fit(small, "hess-clip", rho=1.0, steps=2, min_eigenvalue=lam)
  assert np.asarray(res.opt_state.min_eigenvalue) == pytest.approx(lam, rel=1e-6)


def test_float64_data_without_x64_is_rejected():
  x, y = data.synthetic(0, n=20, d=3, dtype=np.float64)
  with pytest.raises(TypeError, match="64-bit mode is off"):
    fit_lib.fit((x, y), "dp-gd", rho=1.0, steps=1)


def test_float64_matches_float32(x64):
  # Noise off: the float32 and float64 draws differ, the arithmetic must not.
  kw = dict(rho=2.0, steps=3, seed=1, disable_noise_for_testing=True)
  with pytest.warns(dpjax.PrivacyLeakWarning):
    r64 = fit_lib.fit(data.synthetic(2, n=300, d=3, dtype=np.float64), "hess-add", **kw)
  with pytest.warns(dpjax.PrivacyLeakWarning):
    r32 = fit_lib.fit(data.synthetic(2, n=300, d=3, dtype=np.float32), "hess-add", **kw)
  assert r64.params.dtype == np.float64 and r32.params.dtype == np.float32
  np.testing.assert_allclose(r32.params, r64.params, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(r32.excess_losses, r64.excess_losses, rtol=1e-4, atol=1e-9)
  np.testing.assert_allclose(r32.losses, r64.losses, rtol=1e-6)


# Each per-level `fit` is one more compilation (the file's cost): every level is
# re-run alone for dp-gd; for precond-gd and hess-clip the first two (two eps, two
# accountings), the third (eps of the second, the first's accounting) is checked
# for its budget only.
@pytest.mark.parametrize("algorithm,rerun", [("dp-gd", (0, 1, 2)), ("precond-gd", (0, 1)),
                                             ("hess-clip", (0, 1))],
                         ids=["dp-gd", "precond-gd", "hess-clip"])
def test_fit_levels_matches_fit_per_level(algorithm, rerun, small):
  eps, methods = _LEVEL_EPS, _LEVEL_METHODS
  many = fit_lib.fit_levels(small, algorithm, epsilons=eps, accounting=methods, **_LEVEL_KW)
  assert len(many) == 3
  for i, (res, e, m) in enumerate(zip(many, eps, methods)):
    if i not in rerun:
      rho = accounting.epsilon_to_zcdp(e, 1.0 / N**2, m)
      assert (res.epsilon, res.accounting, res.rho) == (e, m, rho)
      np.testing.assert_allclose(res.rho_spent, rho, rtol=1e-6)
      assert res.seconds_run == many[0].seconds_run
      continue
    one = fit_lib.fit(small, algorithm, epsilon=e, accounting=m, **_LEVEL_KW)
    assert (res.epsilon, res.accounting, res.rho) == (one.epsilon, one.accounting, one.rho)
    np.testing.assert_allclose(res.params, one.params, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res.excess_losses, one.excess_losses, rtol=1e-3, atol=1e-7)
    # Charged in float32 under vmap: within float32 rounding of each step's charge.
    np.testing.assert_allclose(res.rho_spent, one.rho, rtol=1e-6)
    assert res.seconds_run == many[0].seconds_run
  # More budget, less noise: the eps=2 gaussian level beats the eps=0.5 one.
  assert many[2].excess_loss_mean < many[0].excess_loss_mean


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({}, ValueError, "exactly one of epsilons"),
        ({"epsilons": [1.0], "rhos": [0.1]}, ValueError, "exactly one of epsilons"),
        ({"epsilons": []}, ValueError, "epsilons is empty"),
        ({"epsilons": 1.0}, TypeError, "sequence"),
        ({"epsilons": [1.0, -1.0]}, ValueError, "privacy level 1: epsilon"),
        ({"rhos": [0.1, "a"]}, TypeError, r"rhos\[1\] must be a number"),
        ({"epsilons": [1.0, 2.0], "accounting": ["paper"]}, ValueError, "accounting has 1"),
        ({"epsilons": [1.0], "accounting": ["nope"]}, ValueError, "accounting"),
        ({"epsilons": [1.0], "timing_runs": 0}, ValueError, "timing_runs"),
        ({"epsilons": [1.0], "seed": -1}, ValueError, r"seed must be in \[0, 2\*\*64\)"),
        ({"epsilons": [1.0], "seed": 2**64}, ValueError, r"seed must be in \[0, 2\*\*64\)"),
        ({"epsilons": [1.0], "seed": 2.0}, TypeError, "seed must be None .* got float"),
        ({"epsilons": [1.0], "seed": False}, TypeError, "seed must be None .* got bool"),
    ],
)
def test_fit_levels_bad_input(kwargs, error, match, small):
  with pytest.raises(error, match=match):
    fit_lib.fit_levels(small, "dp-gd", steps=2, **kwargs)


def test_timing_runs_keeps_results(small):
  # The settings of test_result_fields_and_shapes[hess-clip]: its program (XLA's disk cache).
  a = fit_lib.fit(small, "hess-clip", epsilon=1.0, steps=3, repeats=2, timing_runs=3, seed=5)
  b = fit_lib.fit(small, "hess-clip", epsilon=1.0, steps=3, repeats=2, seed=5)
  np.testing.assert_array_equal(a.params, b.params)


# ----------------------------------------------------------------------------
# precond-gd and averaging inside fit.
# ----------------------------------------------------------------------------


def _noiseless_precond_iterates(x, y, *, rho, steps, kappa=3.0, refresh_every=None):
  """Reference float64 loop of noiseless precond-gd: releases at 0, r, 2r, ..."""
  n, d = x.shape
  r = steps if refresh_every is None else refresh_every
  releases = -(-steps // r)
  sigma_h = accounting.gaussian_sigma(0.25 / n, 0.03 * rho / releases)
  floor = kappa * math.sqrt(2 * d) * sigma_h
  a = np.asarray(y, np.float64)[:, None] * np.asarray(x, np.float64)
  w = np.zeros(d)
  iterates = [w]
  for t in range(steps):
    s = 1 / (1 + np.exp(a @ w))  # sigma(-margin)
    grad = -(a * s[:, None]).mean(0)
    if t % r == 0:
      h = (a.T * (s * (1 - s))) @ a / n  # Hessian at the current iterate
      evals, evecs = np.linalg.eigh(h)
      p = (evecs / np.maximum(evals, floor)) @ evecs.T
    w = w - p @ grad
    iterates.append(w)
  return np.array(iterates)


@pytest.mark.parametrize("refresh_every", [None, 2, 3])
def test_precond_gd_fit_matches_reference_loop(refresh_every, x64):
  # 10 steps: refresh 2 divides them (5 blocks), 3 leaves a 1-step tail (releases at 0, 3, 6, 9);
  # with refresh_every=None the run is test_average_is_the_mean_of_the_last_iterates[
  # precond-gd-none]'s (one program for both).
  ds = data.synthetic(3, n=300, d=4, dtype=np.float64)
  steps, rho = 10, 50.0
  with pytest.warns(dpjax.PrivacyLeakWarning):
    res = fit_lib.fit(ds, "precond-gd", rho=rho, steps=steps, average="none",
                      refresh_every=refresh_every, disable_noise_for_testing=True)
  ref = _noiseless_precond_iterates(ds.x, ds.y, rho=rho, steps=steps,
                                    refresh_every=refresh_every)
  np.testing.assert_allclose(res.params[0], ref[-1], rtol=1e-9, atol=1e-12)
  releases = 1 if refresh_every is None else -(-steps // refresh_every)
  assert res.curvature_evaluations == releases
  assert int(res.opt_state.releases[0]) == releases
  np.testing.assert_allclose(res.rho_spent, rho, rtol=1e-12)
  assert res.losses.shape == (1, steps + 1)


@pytest.mark.parametrize("average", ["last-half", "last-quarter", "none"])
@pytest.mark.parametrize("algorithm", ["precond-gd", "dp-gd"])
def test_average_is_the_mean_of_the_last_iterates(algorithm, average, x64):
  ds = data.synthetic(3, n=300, d=4, dtype=np.float64)
  steps = 10
  kw = dict(rho=50.0, steps=steps, disable_noise_for_testing=True)
  with pytest.warns(dpjax.PrivacyLeakWarning):
    res = fit_lib.fit(ds, algorithm, average=average, **kw)
  if algorithm == "precond-gd":
    iterates = _noiseless_precond_iterates(ds.x, ds.y, rho=50.0, steps=steps)
  else:  # noiseless DP-GD with step 4
    a = np.asarray(ds.y, np.float64)[:, None] * np.asarray(ds.x, np.float64)
    iterates = [np.zeros(4)]
    for _ in range(steps):
      w = iterates[-1]
      iterates.append(w + 4.0 * (a / (1 + np.exp(a @ w))[:, None]).mean(0))
    iterates = np.array(iterates)
  k = {"last-half": 5, "last-quarter": 3, "none": 1}[average]
  np.testing.assert_allclose(res.params[0], iterates[-k:].mean(0), rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(res.final_excess_losses + res.loss_star,
                             _loss64(iterates[-1], *ds), rtol=1e-12)


def test_average_with_noise_reuses_the_same_run(small):
  # Averaging is post-processing: the same seed gives the same iterates, so
  # the final iterate of an averaged run is the output of the plain run.
  # `avg` (precond-gd's default last-half) is level 0 of test_fit_levels_matches_fit_per_level.
  kw = dict(_LEVEL_KW, epsilon=_LEVEL_EPS[0])
  plain = fit_lib.fit(small, "precond-gd", average="none", **kw)
  avg = fit_lib.fit(small, "precond-gd", average="last-half", **kw)
  np.testing.assert_array_equal(avg.final_excess_losses, plain.excess_losses)
  assert not np.allclose(avg.excess_losses, plain.excess_losses)
  np.testing.assert_allclose(avg.rho_spent, plain.rho_spent, rtol=0)


def test_average_sees_the_guarded_iterates(small):
  # Every update leaves the tiny ball and is reset to w_0 = 0 before it is
  # averaged, so the average is exactly 0 (not the mean of diverged points).
  res = fit_lib.fit(small, "precond-gd", rho=0.1, steps=6, repeats=2, guard_radius=1e-6)
  assert res.guard_resets.tolist() == [6, 6]
  np.testing.assert_array_equal(res.params, 0.0)


def test_precond_gd_beats_dp_gd_at_the_same_budget():
  # The preconditioner inverts the strong intercept direction that caps the
  # DP-GD step: with 40 steps precond-gd is far ahead of DP-GD's 40 steps.
  x, y = data.synthetic(0, n=4000, d=8)
  x = np.concatenate([np.full((4000, 1), 0.7, np.float32), 0.7 * x], axis=1)
  kw = dict(epsilon=2.0, steps=40, repeats=4, seed=2)
  pre = fit_lib.fit((x, y), "precond-gd", **kw)
  gd = fit_lib.fit((x, y), "dp-gd", average="last-half", **kw)
  assert pre.excess_loss_mean < 0.5 * gd.excess_loss_mean


# ----------------------------------------------------------------------------
# Neighbouring relations: zero-out (default) and replace-one.
# ----------------------------------------------------------------------------


def _std(state, name):
  return float(np.ravel(optax.tree.get(state, name))[0])


@pytest.mark.parametrize("algorithm, factors", [
    ("dp-gd", {"noise_std": 2.0}),
    ("precond-gd", {"noise_std": 2.0, "curvature_noise_std": math.sqrt(2)}),
    ("hess-clip", {"grad_noise_std": 2.0, "trace_noise_std": 1.0}),
])
def test_fit_records_the_relation_and_calibrates_to_it(algorithm, factors, small):
  # `default` is level 0 of test_fit_levels_matches_fit_per_level (the same program).
  kw = dict(_LEVEL_KW, epsilon=_LEVEL_EPS[0])
  default = fit_lib.fit(small, algorithm, **kw)
  replace = fit_lib.fit(small, algorithm, neighbouring="replace-one", **kw)
  assert default.neighbouring == "zero-out" and "neighbouring" not in default.options
  assert replace.neighbouring == "replace-one"
  assert replace.options == {"neighbouring": "replace-one"}
  for name, factor in factors.items():
    assert _std(replace.opt_state, name) == pytest.approx(
        factor * _std(default.opt_state, name), rel=1e-6)
  assert replace.rho == default.rho and replace.epsilon == default.epsilon


def test_fit_levels_and_auto_pass_the_relation(small):
  levels = fit_lib.fit_levels(small, "dp-gd", neighbouring="replace-one", **_FIT_LEVELS_KW)
  plain = fit_lib.fit_levels(small, "dp-gd", **_FIT_LEVELS_KW)  # test_fit_levels_seeds' program
  assert [r.neighbouring for r in levels] == ["replace-one"] * 3
  assert [r.neighbouring for r in plain] == ["zero-out"] * 3
  for r, p in zip(levels, plain):
    assert _std(r.opt_state, "noise_std") == pytest.approx(2 * _std(p.opt_state, "noise_std"),
                                                           rel=1e-6)
  auto = fit_lib.fit(small, "auto", epsilon=1.0, neighbouring="replace-one")
  assert auto.neighbouring == "replace-one" and auto.options["neighbouring"] == "replace-one"


@pytest.mark.parametrize("algorithm, kw", [
    ("otb", dict(batch_size=40)),
    ("cubic-newton", dict(steps=1, mu=0.1, radius=2.0, max_inner_steps=5)),
    ("damped-newton-private", dict(steps=1)),
    ("hess-add", dict(steps=1, loss="pseudo_huber", min_eigenvalue=0.1)),
])
def test_other_paths_take_the_relation(algorithm, kw, small):
  res = fit_lib.fit(small, algorithm, epsilon=1.0, neighbouring="replace-one", **kw)
  assert res.neighbouring == "replace-one" and res.options["neighbouring"] == "replace-one"


def test_aop_and_poisson_relations(small):
  # AOP is calibrated for replace-one, which covers zero-out: both are accepted, same noise.
  res = fit_lib.fit(small, "aop", epsilon=1.0, neighbouring="replace-one", seed=2)
  assert res.neighbouring == "replace-one" and "neighbouring" not in res.options
  np.testing.assert_array_equal(res.params, fit_lib.fit(small, "aop", epsilon=1.0, seed=2).params)
  # The Poisson methods are accounted for add/remove: zero-out only.
  assert fit_lib.fit(small, "dp-sgd", epsilon=1.0, steps=1, batch_size=40).neighbouring == \
      "zero-out"
  for algorithm, extra in (("dp-sgd", {}), ("newton-minibatch", {"min_eigenvalue": 0.1})):
    with pytest.raises(ValueError, match="neighbouring='replace-one' is not offered for the "
                                         "Poisson-subsampled"):
      fit_lib.fit(small, algorithm, epsilon=1.0, steps=1, batch_size=40,
                  neighbouring="replace-one", **extra)


@pytest.mark.parametrize("bad, error", [("add-remove", ValueError), ("Replace-One", ValueError),
                                        (None, TypeError), (2, TypeError)])
def test_bad_neighbouring_raises_eagerly(bad, error, small):
  with pytest.raises(error, match="neighbouring must be one of"):
    fit_lib.fit(small, "dp-gd", epsilon=1.0, steps=1, neighbouring=bad)
  with pytest.raises(error, match="neighbouring must be one of"):
    fit_lib.fit_levels(small, "dp-gd", epsilons=[1.0], steps=1, neighbouring=bad)
