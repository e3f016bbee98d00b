"""Numerical robustness of ``dpjax.fit``: extreme budgets, degenerate data, float32 vs float64.

Every run must return finite parameters, losses, excess losses and
accountant values (no NaN or inf anywhere in the result or the final
transform states). The data are tiny (n <= 300, d <= 6, and n = 20, d = 50 for
d > n) and runs are short: every test is dominated by compilation, so the full-batch
epsilon sweep shares one compile per algorithm (``fit_levels``), and each
degenerate dataset runs the algorithms whose numerics it stresses (a singular
curvature: eigh clip, Cholesky add, the precond-gd floor; zero per-example
gradients under clipping; a zero gradient and curvature; no optimum).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import dpjax
from dpjax import accounting, data, training
from dpjax.training import streaming
from dpjax.mechanisms import sampling
from dpjax.problem import solve

# Up to 30: above ~45 (here) no finite sampler's guarantee can be certified (the
# floating-point-safe noise's TV slack is paid (1 + e^eps) times out of delta),
# and epsilon = 1e3 is refused before any work (test below).
EPSILONS = [1e-3, 1e-1, 10.0, 30.0]


def _accountant_epsilon(res) -> np.ndarray:
  """``[repeats]`` epsilon spent at ``res.delta`` according to the final accountants."""
  acc = streaming.accountant_of(res.opt_state)
  method = "cks" if res.accounting == "rdp" else res.accounting
  return np.atleast_1d(accounting.epsilon_spent(acc, res.delta, method))


def _assert_finite(res, label: str = "", *, spends_all: bool = True) -> None:
  """No NaN / inf in what a fit reports, nor in its final transform states.

  The accountants must report at most the target epsilon, and exactly it for
  a zCDP run that ``spends_all`` (not a capped cubic-Newton solver).
  """
  for field in ("params", "losses", "excess_losses", "final_excess_losses", "rho_spent"):
    value = np.asarray(getattr(res, field), np.float64)
    assert np.all(np.isfinite(value)), (label, field, value)
  for field in ("excess_loss_mean", "excess_loss_se", "loss_star", "epsilon", "delta"):
    assert np.isfinite(getattr(res, field)), (label, field, getattr(res, field))
  if res.rho is not None:
    assert np.isfinite(res.rho) and res.rho > 0, (label, res.rho)
  for leaf in jax.tree.leaves(res.opt_state):
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      continue
    leaf = np.asarray(leaf)
    if np.issubdtype(leaf.dtype, np.floating):
      assert np.all(np.isfinite(leaf)), (label, "opt_state", leaf)
  spent = _accountant_epsilon(res)
  assert np.all(np.isfinite(spent)), (label, "accountant epsilon", spent)
  if res.accounting == "rdp":
    # Calibrated to meet the target, not always to hit it: at epsilon = 1e-3
    # the order grid's CKS bound cannot reach it and the TV bound certifies
    # 0; at 1e3 the cap's slack leaves at most ~22 reachable.
    assert np.all(spent <= res.epsilon * (1 + 1e-6)), (label, spent, res.epsilon)
  elif spends_all:
    # The zCDP accountants say the run spent its budget, and no more.
    np.testing.assert_allclose(spent, res.epsilon, rtol=1e-4, err_msg=label)
  else:
    assert np.all(spent <= res.epsilon * (1 + 1e-6)), (label, spent, res.epsilon)


# The sweep's shape. The degenerate full-batch datasets below have it too (but d > n) and
# run the same fit_levels call (budgets, steps, repeats): a fit_levels program is keyed on
# the algorithm, shapes and settings, never on the data values or the budgets (traced), so
# each algorithm compiles once for the whole file.
SWEEP_N, SWEEP_D = 200, 5
SWEEP_KW = dict(steps=4, repeats=2)


@pytest.fixture(scope="module")
def sweep_data():
  return data.synthetic(0, n=SWEEP_N, d=SWEEP_D)


# ----------------------------------------------------------------------------
# 1. epsilon from 1e-3 to 1e3.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["dp-gd", "hess-clip", "hess-add", "qu-clip", "precond-gd"])
def test_full_batch_epsilon_sweep_is_finite(algorithm, sweep_data):
  # One compiled program for the four levels (the budget is traced).
  results = training.fit_levels(sweep_data, algorithm, epsilons=EPSILONS, **SWEEP_KW)
  for eps, res in zip(EPSILONS, results):
    _assert_finite(res, f"{algorithm} eps={eps}")
    assert res.epsilon == pytest.approx(eps, rel=1e-9)
    np.testing.assert_allclose(res.rho_spent, res.rho, rtol=1e-5)
  with pytest.raises(ValueError, match="cannot be certified"):
    training.fit_levels(sweep_data, algorithm, epsilons=[1.0, 1e3], **SWEEP_KW)


# The minibatch, cubic and streaming paths compile once per budget (their
# noise calibration or inner step count is a host constant), so they run at
# the two ends of the range, where the numerics are stretched: huge noise and
# guard resets at 1e-3, a tiny noise scale (and for cubic Newton a huge
# inner step count, capped) at 1e3.
_OTHER = {
    "dp-sgd": dict(steps=3, batch_size=40),
    "newton-minibatch": dict(steps=3, batch_size=40, min_eigenvalue=0.1),
    "otb": dict(batch_size=40),
    "cubic-newton": dict(steps=2, mu=0.01, max_inner_steps=100),
}


@pytest.mark.parametrize("epsilon", [1e-3, 1e3])
@pytest.mark.parametrize("algorithm", sorted(_OTHER))
def test_minibatch_cubic_and_streaming_extreme_epsilons(algorithm, epsilon, sweep_data):
  kwargs = _OTHER[algorithm]
  if algorithm in ("cubic-newton", "otb") and epsilon == 1e3:
    # Refused eagerly: the floating-point-safe noise's TV slack, paid (1 + e^eps)
    # times out of delta, caps the certifiable epsilon near 45 here; 30 is run.
    with pytest.raises(ValueError, match="cannot be certified"):
      dpjax.fit(sweep_data, algorithm, epsilon=epsilon, repeats=2, **kwargs)
    epsilon = 30.0
  if algorithm == "newton-minibatch" and epsilon == 1e3:
    # It refuses epsilon = 1e3 eagerly, before anything compiles, with an
    # explained ValueError (its caps' overflow slack (1 + e^eps) T must stay
    # below delta / 2), never a NaN; epsilon = 10 is the high end it runs.
    with pytest.raises(ValueError, match="epsilon"):
      dpjax.fit(sweep_data, algorithm, epsilon=epsilon, repeats=2, **kwargs)
    epsilon = 10.0
  res = dpjax.fit(sweep_data, algorithm, epsilon=epsilon, repeats=2, **kwargs)
  # The capped cubic solver charges N' / N of each step's budget.
  _assert_finite(res, f"{algorithm} eps={epsilon}", spends_all=algorithm != "cubic-newton")
  if algorithm == "cubic-newton":
    # N = ceil(2 rho_t (A/B)^2 n^2 / d) inner steps: 1 at 1e-3, ~1e9 (capped) at 1e3.
    assert int(np.asarray(res.opt_state.inner_steps)[0]) == (1 if epsilon < 1 else 100)  # capped
    assert np.all(np.linalg.norm(res.params, axis=1) <= 10.0 * (1 + 1e-5))  # the ball.


def test_calibration_above_the_reachable_epsilon_stays_off_the_cliff():
  # With a sampling cap the slack (1 + e^eps) T must stay below delta, so no
  # epsilon above ~22.5 is reachable here and eps(z) jumps to inf below some
  # z. The calibration used to return that edge to 1e-12, where the run's
  # accountant (slack summed in float32, rounded up by 4e-8) read eps = inf.
  n, steps = 200, 3
  delta = 1.0 / n**2
  sampler = sampling.poisson_sampler(n, batch_size=40)
  q = sampler.sampling_rate
  z = accounting.calibrate_noise_multiplier(1e3, delta, steps=steps, sampling_rates=q,
                                            overflow_prob=sampler.overflow_prob)
  curve = steps * accounting.subsampled_gaussian_rdp(q, z)
  slack = steps * sampler.overflow_prob
  for t in (slack, float(np.float32(slack)) * (1 + 1e-6)):  # a float32 sum's rounding.
    eps = accounting.rdp_to_epsilon(curve, delta, truncation=t)
    assert 20.0 < eps < 1e3, (t, eps)


# ----------------------------------------------------------------------------
# 2. Degenerate data.
# ----------------------------------------------------------------------------

# The full-batch algorithms run the sweep's budgets and settings (fit_levels: with the
# sweep's shape, the sweep's compiled program); the minibatch and streaming ones run at
# epsilon = 1.


def _run(ds, algorithm) -> list:
  if algorithm in training.ALGORITHMS:
    return training.fit_levels(ds, algorithm, epsilons=EPSILONS, **SWEEP_KW)
  b = max(1, len(ds[1]) // 4)
  kwargs = {"otb": dict(batch_size=b), "dp-sgd": dict(steps=3, batch_size=b),
            "newton-minibatch": dict(steps=3, batch_size=b, min_eigenvalue=0.1)}[algorithm]
  return [dpjax.fit(ds, algorithm, epsilon=1.0, repeats=2, **kwargs)]


def _check_no_minimiser(res) -> None:
  """Separable data: optimum_loss falls back to the tiny ridge, so excess losses
  may dip below 0, by at most loss_star (the loss is >= 0), never to -inf."""
  assert res.ridge == training.SEPARABLE_RIDGE
  # No rounding tolerance needed: the float64 mean of logaddexp(0, .) >= 0 is >= 0, and
  # rounding is monotone, so fl(loss - loss_star) >= fl(0 - loss_star) = -loss_star exactly.
  assert np.all(res.excess_losses >= -res.loss_star)


def test_more_features_than_examples():
  ds = data.synthetic(1, n=20, d=50)  # rank-20 curvature in d = 50; separable labels.
  for res in _run(ds, "hess-clip"):
    _assert_finite(res, "d > n")
    _check_no_minimiser(res)


def _identical_rows():
  x, y = data.synthetic(2, n=1, d=SWEEP_D)
  return np.repeat(np.asarray(x), SWEEP_N, axis=0), np.repeat(np.asarray(y), SWEEP_N)


def _every_row_twice():
  x, y = (np.asarray(a) for a in data.synthetic(3, n=30, d=6))
  return np.concatenate([x, x]), np.concatenate([y, y])


@pytest.mark.parametrize("case, algorithm", [("identical", "hess-add"), ("twice", "otb")])
def test_duplicate_rows(case, algorithm):
  ds = _identical_rows() if case == "identical" else _every_row_twice()
  for res in _run(ds, algorithm):
    _assert_finite(res, f"{case} {algorithm}")
    if case == "identical":  # a rank-1 curvature; one row, one label: separable.
      _check_no_minimiser(res)
    else:  # the mean loss, hence its optimum, is that of one copy.
      x, y = ds
      assert res.loss_star == pytest.approx(training.optimum_loss(x[:30], y[:30])[0], rel=1e-9)


def test_single_class():
  x, _ = data.synthetic(4, n=SWEEP_N, d=SWEEP_D)
  for res in _run((np.asarray(x), np.ones(SWEEP_N, np.float32)), "dp-gd"):
    _assert_finite(res, "single class")
    assert res.ridge == 0.0  # rows on the sphere: not separable from one side.


@pytest.mark.parametrize("case, algorithm", [("some", "dp-sgd"), ("all", "precond-gd")])
def test_zero_rows(case, algorithm):
  x, y = (np.array(a) for a in data.synthetic(5, n=SWEEP_N, d=SWEEP_D))
  if case == "some":
    x[::3] = 0.0  # zero per-example gradients: clipping divides by their norm.
  else:
    x[:] = 0.0  # zero gradient and curvature: only noise is released, floored.
  for res in _run((x, y), algorithm):
    _assert_finite(res, f"{case} {algorithm}")
    if case == "all":  # every margin is 0: the loss is log 2 at any w.
      assert res.loss_star == pytest.approx(np.log(2.0), abs=1e-12)
      # atol 1e-12: log 2 minus log 2, both float64 means over 200 rows (~1e-16 rounding).
      np.testing.assert_allclose(res.excess_losses, 0.0, atol=1e-12)


def _separable():
  """Labels ``sign(<x, u>)`` with margin >= 0.05: no minimiser, ``||w*||`` unbounded."""
  x, _ = (np.asarray(a) for a in data.synthetic(7, n=300, d=SWEEP_D))  # 281 rows kept
  margin = x @ (np.ones(SWEEP_D) / np.sqrt(SWEEP_D))
  keep = np.abs(margin) > 0.05
  return x[keep][:SWEEP_N], np.sign(margin[keep][:SWEEP_N]).astype(np.float32)


def test_separable_data_with_a_large_optimum():
  for res in _run(_separable(), "hess-clip"):
    _assert_finite(res, "separable")
    _check_no_minimiser(res)


def test_separable_optimum_has_a_large_norm_and_a_finite_loss():
  x, y = _separable()
  loss_star, ridge = training.optimum_loss(x, y)
  # 0 <= loss_star is exact: a float64 mean of logaddexp(0, .) >= 0 values, no rounding slack.
  assert ridge == training.SEPARABLE_RIDGE and 0.0 <= loss_star < 1e-3
  opt = solve.logistic_optimum(np.asarray(x, np.float64), np.asarray(y, np.float64), ridge=ridge)
  assert np.linalg.norm(opt.w) > 50.0  # about 140 at ridge 1e-9; unbounded as the ridge -> 0.
  assert np.isfinite(opt.loss) and opt.loss == pytest.approx(loss_star, abs=1e-12)


# ----------------------------------------------------------------------------
# 3. float32 against float64.
# ----------------------------------------------------------------------------


def test_float32_and_float64_fits_agree():
  """float32 and float64 runs of the same noiseless hess-clip fit agree to 1e-5 relative.

  Tolerance: ``||w32 - w64|| <= 1e-5 ||w64||`` for the parameters (measured
  <= 4e-7 elementwise, over precond-gd, DP-GD and the four Newton variants:
  float32's unit roundoff 6e-8, amplified by the curvature solve over T = 4
  steps), ``1e-6`` absolute for the float64 excess losses, ``1e-5`` for the
  float32 trajectory losses, and ``1e-6`` relative for the charged budget. The noise is
  switched off (``disable_noise_for_testing``) to isolate the optimizer's own
  rounding (noisy runs agree too: ``tests/test_noise.py``). float64 runs under
  ``jax.enable_x64(True)``, as in the rest of the suite.
  """
  x, y = (np.asarray(a) for a in data.synthetic(8, n=300, d=6))
  # Two budgets in one program each (the budget sets the adaptive lambda).
  kwargs = dict(epsilons=[0.5, 50.0], steps=4, repeats=1, disable_noise_for_testing=True)
  with pytest.warns(dpjax.PrivacyLeakWarning, match="fit_levels"):
    res32 = training.fit_levels((x, y), "hess-clip", **kwargs)
  with jax.enable_x64(True), pytest.warns(dpjax.PrivacyLeakWarning, match="fit_levels"):
    res64 = training.fit_levels((x.astype(np.float64), y.astype(np.float64)), "hess-clip",
                                **kwargs)
  assert not any(r.private for r in res32 + res64)  # no noise: no private release
  for r32, r64 in zip(res32, res64):
    assert r32.params.dtype == np.float32 and r64.params.dtype == np.float64
    _assert_finite(r32, "float32")
    _assert_finite(r64, "float64")
    rel = np.linalg.norm(r32.params - r64.params) / np.linalg.norm(r64.params)
    assert rel <= 1e-5, rel
    np.testing.assert_allclose(r32.excess_losses, r64.excess_losses, rtol=0, atol=1e-6)
    np.testing.assert_allclose(r32.losses, r64.losses, rtol=0, atol=1e-5)
    np.testing.assert_allclose(r32.rho_spent, r64.rho_spent, rtol=1e-6)
  # The two budgets are different runs (the test is not comparing constants).
  assert not np.allclose(res64[0].params, res64[1].params, rtol=1e-3)
