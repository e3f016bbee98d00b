"""Tests for dpjax.accounting: accountant pytree, Gaussian budgets, conversions."""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import maybe_jit
from dpjax import accounting
from dpjax.accounting import (
    METHODS,
    AccountantState,
    charge,
    epsilon_spent,
    epsilon_to_zcdp,
    gaussian_sigma,
    gaussian_zcdp,
    init_accountant,
    spent_rho,
    zcdp_to_epsilon,
)

# Grid of the acceptance checks: eps in [1e-4, 1e3], delta in [1e-30, 0.1).
EPS_GRID = np.logspace(-4, 3, 22)
DELTA_GRID = (1e-30, 1e-20, 1e-12, 1e-8, 1e-5, 1e-3, 0.0999)


# ----------------------------------------------------------------------------
# Conversions: worked values.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, eps, expected",
    [
        ("paper", 1.0, 0.012873),
        ("bun_steinke", 1.0, 0.013215),
        ("cks", 1.0, 0.017205),
        ("gaussian", 1.0, 0.019221),
        ("paper", 0.01, 1.3564e-6),
        ("cks", 0.01, 2.5461e-6),
        ("gaussian", 0.01, 2.9405e-6),
    ],
)
def test_worked_values_at_delta_1e8(method, eps, expected):
  assert epsilon_to_zcdp(eps, 1e-8, method) == pytest.approx(expected, rel=1e-4)


# Independently computed epsilons: rho, delta, Bun-Steinke, CKS, alpha*, exact Gaussian.
_TABLE = [
    ("0.001", "1e-5", "0.2156", "0.1573", "85.1", "0.1417"),
    ("0.01", "1e-5", "0.6886", "0.5457", "29.5", "0.4970"),
    ("0.1", "1e-5", "2.2460", "1.9142", "10.6", "1.7601"),
    ("0.5", "1e-5", "5.2985", "4.7284", "5.43", "4.3772"),
    ("1", "1e-5", "7.7861", "7.0772", "4.18", "6.5730"),
    ("5", "1e-5", "20.174", "19.047", "2.46", "17.857"),
    ("0.1", "1e-6", "2.4508", "2.1419", "11.7", "1.9945"),
    ("1", "1e-9", "10.105", "9.5215", "5.36", "9.0926"),
]


def _printed_tol(text):
  """Half a unit in the last printed digit."""
  decimals = len(text.split(".")[1]) if "." in text else 0
  return 0.5 * 10.0**-decimals + 1e-12


@pytest.mark.parametrize("row", _TABLE, ids=lambda r: f"rho={r[0]},delta={r[1]}")
def test_ecosystem_table_values(row):
  rho, delta, bs, cks, alpha, gauss = row
  rho, delta = float(rho), float(delta)
  for method, text in (("bun_steinke", bs), ("cks", cks), ("gaussian", gauss)):
    got = zcdp_to_epsilon(rho, delta, method)
    assert abs(got - float(text)) <= _printed_tol(text), (method, got, text)
  alpha_star = 1.0 + math.exp(accounting._cks_log_alpha_m1(rho, math.log(delta)))
  assert abs(alpha_star - float(alpha)) <= _printed_tol(alpha)


def test_paper_closed_form_is_the_papers_formula():
  eps, delta = 0.7, 1e-7
  assert epsilon_to_zcdp(eps, delta, "paper") == pytest.approx(
      eps**2 / (4 * math.log(1 / delta) + 4 * eps), rel=1e-15
  )
  rho = 0.003
  assert zcdp_to_epsilon(rho, delta, "bun_steinke") == pytest.approx(
      rho + 2 * math.sqrt(rho * math.log(1 / delta)), rel=1e-15
  )


# ----------------------------------------------------------------------------
# Conversions: round trips, monotonicity, ordering.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_round_trip_grid(method):
  worst = 0.0
  for delta in DELTA_GRID:
    for eps in EPS_GRID:
      rho = epsilon_to_zcdp(eps, delta, method)
      assert rho > 0
      worst = max(worst, abs(zcdp_to_epsilon(rho, delta, method) / eps - 1))
      rho_in = 1.37 * rho  # rho -> eps -> rho on rho values in the same range.
      eps_mid = zcdp_to_epsilon(rho_in, delta, method)
      worst = max(worst, abs(epsilon_to_zcdp(eps_mid, delta, method) / rho_in - 1))
  assert worst < 1e-9


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n", [6400, 10_000, 50_000])
def test_small_epsilon_regression_no_start_point(method, n):
  # The reference code's fsolve(x0=0.001) returned rho = 1e-3 (5e-3 in the
  # Feb-2023 code) unchanged for every eps <= ~0.12 (a failed root search).
  delta = float(n) ** -2
  eps_grid = np.round(np.arange(1, 31) * 0.01, 2)
  rhos = np.array([epsilon_to_zcdp(e, delta, method) for e in eps_grid])
  assert np.all(np.diff(rhos) > 0)
  assert not np.any(np.isclose(rhos, 1e-3, rtol=1e-9, atol=0))
  assert not np.any(np.isclose(rhos, 5e-3, rtol=1e-9, atol=0))
  back = np.array([zcdp_to_epsilon(r, delta, method) for r in rhos])
  np.testing.assert_allclose(back, eps_grid, rtol=1e-9)


def test_ordering_of_methods_on_random_inputs():
  rng = np.random.default_rng(0)
  for _ in range(200):
    rho = 10.0 ** rng.uniform(-6, 3)
    delta = 10.0 ** rng.uniform(-30, -1)
    paper, bs, cks, gauss = (zcdp_to_epsilon(rho, delta, m) for m in METHODS)
    assert paper >= bs >= cks >= gauss >= 0.0, (rho, delta, paper, bs, cks, gauss)
    eps = 10.0 ** rng.uniform(-4, 3)
    r_paper, r_bs, r_cks, r_gauss = (epsilon_to_zcdp(eps, delta, m) for m in METHODS)
    assert r_paper <= r_bs <= r_cks <= r_gauss, (eps, delta)


@pytest.mark.parametrize("method", METHODS)
def test_rho_zero_gives_epsilon_zero(method):
  assert zcdp_to_epsilon(0.0, 1e-5, method) == 0.0


def test_tiny_rho_gives_zero_delta_dp_for_cks_and_gaussian():
  # CKS with rho -> 0 tends to min_alpha [log(1-1/alpha) - log(delta alpha)/(alpha-1)] < 0,
  # so a small enough budget is (0, delta)-DP; the result is clipped at 0.
  assert zcdp_to_epsilon(1e-12, 1e-3, "cks") == 0.0
  # Gaussian: delta(0) = erf(mu / (2 sqrt 2)); at or above it eps = 0, just below it eps > 0.
  rho = 1e-4
  delta0 = math.erf(math.sqrt(2 * rho) / (2 * math.sqrt(2)))
  assert zcdp_to_epsilon(rho, delta0 * (1 + 1e-9), "gaussian") == 0.0
  assert 0.0 < zcdp_to_epsilon(rho, delta0 * 0.5, "gaussian") < zcdp_to_epsilon(
      rho, delta0 * 0.5, "cks"
  )
  # Bun-Steinke and the paper's map are never 0 for rho > 0.
  assert zcdp_to_epsilon(1e-12, 1e-3, "bun_steinke") > 0


def test_accepts_numpy_and_concrete_jax_scalars():
  expected = zcdp_to_epsilon(0.1, 1e-5)
  assert zcdp_to_epsilon(np.float64(0.1), np.float64(1e-5)) == expected
  assert zcdp_to_epsilon(jnp.asarray(0.1, jnp.float32), 1e-5) == pytest.approx(
      expected, rel=1e-6
  )
  assert epsilon_to_zcdp(1, 1e-5) == epsilon_to_zcdp(1.0, 1e-5)
  assert isinstance(epsilon_to_zcdp(np.float32(1.0), 1e-5), float)


# ----------------------------------------------------------------------------
# Exact Gaussian conversion: accuracy of delta(eps) and erfcx.
# ----------------------------------------------------------------------------


def test_erfcx_matches_scipy():
  special = pytest.importorskip("scipy.special")
  zs = np.concatenate([np.linspace(0.0, 12.0, 1201), np.logspace(1, 8, 50)])
  ours = np.array([accounting._erfcx(float(z)) for z in zs])
  np.testing.assert_allclose(ours, special.erfcx(zs), rtol=4e-15)


def test_gaussian_delta_matches_scipy_in_moderate_range():
  stats = pytest.importorskip("scipy.stats")
  for eps, mu in [(0.5, 0.3), (1.0, 1.0), (2.0, 0.8), (0.05, 2.0), (3.0, 4.0), (0.01, 0.01)]:
    ref = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
    assert math.exp(accounting._gaussian_log_delta(eps, mu)) == pytest.approx(ref, rel=1e-9)


def test_gaussian_delta_accurate_in_the_tails():
  mpmath = pytest.importorskip("mpmath")
  mpmath.mp.dps = 50

  def log_delta(eps, mu):
    eps, mu = mpmath.mpf(eps), mpmath.mpf(mu)
    val = mpmath.ncdf(-eps / mu + mu / 2) - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)
    return float(mpmath.log(val))

  # Points solved for delta in {1e-30, 1e-12} at eps from 1e-4 (tiny mu: the
  # erfcx difference cancels) to 1e3 (e^eps overflows a naive formula).
  for delta in (1e-30, 1e-12):
    for eps in (1e-4, 1e-2, 1.0, 30.0, 1e3):
      mu = math.sqrt(2 * epsilon_to_zcdp(eps, delta, "gaussian"))
      ref = log_delta(eps, mu)
      assert ref == pytest.approx(math.log(delta), abs=1e-9)
      assert accounting._gaussian_log_delta(eps, mu) == pytest.approx(ref, abs=1e-13)


# ----------------------------------------------------------------------------
# Cross-checks with dp_accounting.
# ----------------------------------------------------------------------------

_CROSS = [(1e-3, 1e-5), (0.01, 1e-5), (0.1, 1e-6), (1.0, 1e-9), (5.0, 1e-5), (0.02, 1e-10)]


@pytest.mark.parametrize("rho, delta", _CROSS)
def test_gaussian_matches_dp_accounting_analytic_gaussian(rho, delta):
  dp_accounting = pytest.importorskip("dp_accounting")
  # tol is brentq's absolute xtol on eps; 1e-15 makes it far below 1e-6 relative.
  theirs = dp_accounting.get_epsilon_gaussian(1.0 / math.sqrt(2 * rho), delta, tol=1e-15)
  assert zcdp_to_epsilon(rho, delta, "gaussian") == pytest.approx(theirs, rel=1e-6)


def test_dp_accounting_compute_epsilon_is_the_cks_formula():
  pytest.importorskip("dp_accounting")
  from dp_accounting.rdp import rdp_privacy_accountant

  for rho, delta, alpha in [(0.1, 1e-6, 3.0), (1e-3, 1e-5, 50.0), (2.0, 1e-9, 1.7)]:
    theirs, _ = rdp_privacy_accountant.compute_epsilon([alpha], [rho * alpha], delta)
    formula = rho * alpha + math.log1p(-1 / alpha) - (math.log(delta) + math.log(alpha)) / (
        alpha - 1
    )
    ours = accounting._cks_eps_at(math.log(alpha - 1), rho, math.log(delta))
    assert theirs == pytest.approx(formula, rel=1e-12)
    assert ours == pytest.approx(formula, rel=1e-12)


@pytest.mark.parametrize("rho, delta", _CROSS)
def test_cks_matches_dp_accounting_rdp_on_a_fine_grid(rho, delta):
  dp_accounting = pytest.importorskip("dp_accounting")
  from dp_accounting.rdp import rdp_privacy_accountant

  # Locate their optimal order on a dense log grid, then refine around it
  # (independently of our own minimiser).
  coarse = 1.0 + np.logspace(-1.9, 4, 3000)
  _, best = rdp_privacy_accountant.compute_epsilon(coarse, rho * coarse, delta)
  fine = best * (1.0 + np.linspace(-0.01, 0.01, 4001))
  fine = fine[fine > 1.011]
  acc = dp_accounting.rdp.RdpAccountant(orders=list(fine))
  # Compose the budget as several zCDP events: zCDP composition is additive.
  parts = rho * np.array([0.5, 0.25, 0.125, 0.125])
  for part in parts:
    acc.compose(dp_accounting.ZCDpEvent(float(part)))
  state = init_accountant()
  for part in parts:
    state = charge(state, float(part))
  ours = epsilon_spent(state, delta, "cks")
  assert ours == pytest.approx(acc.get_epsilon(delta), rel=1e-6)


@pytest.mark.parametrize("row", _TABLE, ids=lambda r: f"rho={r[0]},delta={r[1]}")
def test_cks_never_worse_than_dp_accounting_default_grid(row):
  dp_accounting = pytest.importorskip("dp_accounting")
  rho, delta = float(row[0]), float(row[1])
  acc = dp_accounting.rdp.RdpAccountant()
  acc.compose(dp_accounting.ZCDpEvent(rho))
  assert zcdp_to_epsilon(rho, delta, "cks") <= acc.get_epsilon(delta) + 1e-12


@pytest.mark.parametrize("sigma, steps", [(5.0, 10), (2.0, 4), (20.0, 100)])
def test_gaussian_below_pld_composition(sigma, steps):
  dp_accounting = pytest.importorskip("dp_accounting")
  delta = 1e-6
  acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  acc.compose(dp_accounting.GaussianDpEvent(sigma), steps)
  eps_pld = acc.get_epsilon(delta)
  state = init_accountant()
  for _ in range(steps):
    state = charge(state, gaussian_zcdp(1.0, sigma))
  ours = epsilon_spent(state, delta, "gaussian")
  # PLD discretisation is pessimistic; with a 1e-4 grid it is also close.
  assert eps_pld >= ours - 1e-9
  assert eps_pld <= ours + 1e-3


# ----------------------------------------------------------------------------
# Conversions: bad input.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.0, -1.0])
def test_epsilon_must_be_positive(eps):
  with pytest.raises(ValueError, match=r"epsilon must be > 0"):
    epsilon_to_zcdp(eps, 1e-5)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nonfinite_inputs_rejected(bad):
  with pytest.raises(ValueError, match=r"epsilon must be finite"):
    epsilon_to_zcdp(bad, 1e-5)
  with pytest.raises(ValueError, match=r"rho must be finite"):
    zcdp_to_epsilon(bad, 1e-5)
  with pytest.raises(ValueError, match=r"delta must be finite"):
    zcdp_to_epsilon(0.1, bad)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 1.5])
def test_delta_must_be_in_open_unit_interval(delta):
  with pytest.raises(ValueError, match=r"delta must be in the open interval \(0, 1\)"):
    zcdp_to_epsilon(0.1, delta)
  with pytest.raises(ValueError, match=r"delta must be in the open interval \(0, 1\)"):
    epsilon_to_zcdp(1.0, delta)


def test_negative_rho_rejected():
  with pytest.raises(ValueError, match=r"rho must be >= 0"):
    zcdp_to_epsilon(-1e-3, 1e-5)


def test_unknown_method_rejected():
  with pytest.raises(ValueError, match=r"method must be one of \('paper'"):
    zcdp_to_epsilon(0.1, 1e-5, method="rdp")
  with pytest.raises(ValueError, match=r"method must be one of"):
    epsilon_to_zcdp(1.0, 1e-5, method="CKS")
  with pytest.raises(TypeError, match=r"method must be one of"):
    epsilon_to_zcdp(1.0, 1e-5, method=None)


def test_wrong_types_rejected():
  with pytest.raises(TypeError, match=r"epsilon must be a real number"):
    epsilon_to_zcdp("1.0", 1e-5)
  with pytest.raises(TypeError, match=r"rho must be a real number"):
    zcdp_to_epsilon(True, 1e-5)
  with pytest.raises(TypeError, match=r"rho must be a scalar"):
    zcdp_to_epsilon(np.array([0.1, 0.2]), 1e-5)


def test_traced_inputs_rejected_with_hint():
  with pytest.raises(TypeError, match=r"rho must be a concrete number.*outside jit"):
    jax.jit(lambda r: zcdp_to_epsilon(r, 1e-5))(0.1)
  with pytest.raises(TypeError, match=r"delta must be a concrete number.*outside jit"):
    jax.jit(lambda d: epsilon_to_zcdp(1.0, d))(1e-5)


# ----------------------------------------------------------------------------
# Gaussian mechanism budget <-> noise scale.
# ----------------------------------------------------------------------------


def test_gaussian_zcdp_and_sigma_python_floats():
  assert gaussian_zcdp(1.0, 5.0) == 0.02
  assert gaussian_zcdp(0.5, 2.0) == 0.5 * 0.25 / 4.0
  assert gaussian_sigma(1.0, 0.02) == 5.0
  assert isinstance(gaussian_zcdp(1, 2), float)
  rng = np.random.default_rng(1)
  for _ in range(50):
    sens, sigma = 10.0 ** rng.uniform(-4, 1), 10.0 ** rng.uniform(-2, 3)
    assert gaussian_sigma(sens, gaussian_zcdp(sens, sigma)) == pytest.approx(sigma, rel=1e-15)


@pytest.mark.parametrize("jit", [True, False])
def test_gaussian_zcdp_and_sigma_arrays(jit):
  sens = jnp.array([1.0, 0.25, 2.0], jnp.float32)
  sigma = jnp.array([5.0, 0.1, 30.0], jnp.float32)
  rho = maybe_jit(gaussian_zcdp, jit)(sens, sigma)
  assert rho.dtype == jnp.float32
  expected = np.float64(sens) ** 2 / (2 * np.float64(sigma) ** 2)
  np.testing.assert_allclose(np.asarray(rho), expected, rtol=1e-6)
  back = maybe_jit(gaussian_sigma, jit)(sens, rho)
  np.testing.assert_allclose(np.asarray(back), np.asarray(sigma), rtol=1e-6)
  per = jax.vmap(gaussian_sigma, in_axes=(None, 0))(1.0, jnp.array([0.02, 0.5]))
  np.testing.assert_allclose(np.asarray(per), [5.0, 1.0], rtol=1e-6)
  np.testing.assert_allclose(gaussian_sigma(np.array([1.0, 2.0]), 0.5), [1.0, 2.0], rtol=1e-15)


def test_gaussian_float32_matches_float64(x64):
  sens = np.array([1.0, 0.3, 1e-3])
  sigma = np.array([5.0, 0.7, 1e2])
  r32 = gaussian_zcdp(jnp.asarray(sens, jnp.float32), jnp.asarray(sigma, jnp.float32))
  r64 = gaussian_zcdp(jnp.asarray(sens), jnp.asarray(sigma))
  assert r64.dtype == jnp.float64
  np.testing.assert_allclose(np.asarray(r32), np.asarray(r64), rtol=1e-6)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_gaussian_bad_values(bad):
  match = r"must be > 0" if bad <= 0 else r"must be finite"
  with pytest.raises(ValueError, match=r"sensitivity " + match):
    gaussian_zcdp(bad, 1.0)
  with pytest.raises(ValueError, match=r"sigma " + match):
    gaussian_zcdp(1.0, bad)
  with pytest.raises(ValueError, match=r"sensitivity " + match):
    gaussian_sigma(bad, 1.0)
  with pytest.raises(ValueError, match=r"rho " + match):
    gaussian_sigma(1.0, bad)


def test_gaussian_bad_arrays_and_types():
  with pytest.raises(ValueError, match=r"sigma must be > 0"):
    gaussian_zcdp(1.0, jnp.array([1.0, 0.0]))
  with pytest.raises(ValueError, match=r"rho contains NaN or inf"):
    gaussian_sigma(1.0, np.array([0.1, np.nan]))
  with pytest.raises(TypeError, match=r"sigma must be a positive number"):
    gaussian_zcdp(1.0, "5")
  with pytest.raises(TypeError, match=r"sensitivity must be a positive number"):
    gaussian_zcdp(True, 1.0)
  with pytest.raises(TypeError, match=r"rho must be a real array"):
    gaussian_sigma(1.0, jnp.array([1 + 1j]))


def test_gaussian_traced_values_are_not_checked():
  # Under jit only shapes/dtypes are known; validation happens at the boundary.
  out = jax.jit(gaussian_sigma)(1.0, jnp.float32(-1.0))
  assert np.isnan(np.asarray(out))


# ----------------------------------------------------------------------------
# Accountant state.
# ----------------------------------------------------------------------------


def test_init_accountant_default_dtype():
  state = init_accountant()
  assert isinstance(state, AccountantState)
  assert all(w.dtype == jnp.float32 for w in state)
  assert all(getattr(state, f).shape == () for f in ("rho", "rho_lo", "rho_lo2", "truncation"))
  assert all(getattr(state, f).shape == (len(accounting.RDP_ORDERS),)
             for f in ("rdp", "rdp_lo", "rdp_lo2"))
  assert spent_rho(state) == 0.0


def test_init_accountant_x64(x64):
  assert init_accountant().rho.dtype == jnp.float64
  assert init_accountant(jnp.float32).rho.dtype == jnp.float32


def test_init_accountant_bad_dtype():
  with pytest.raises(ValueError, match=r"dtype float64 needs 64-bit JAX"):
    init_accountant(jnp.float64)
  with pytest.raises(ValueError, match=r"dtype must be float32 or float64, got int32"):
    init_accountant(jnp.int32)
  with pytest.raises(ValueError, match=r"dtype must be float32 or float64, got float16"):
    init_accountant(jnp.float16)
  with pytest.raises(TypeError, match=r"dtype must be a numpy/jax float dtype"):
    init_accountant("not-a-dtype")


@pytest.mark.parametrize("jit", [True, False])
def test_charge_adds(jit):
  state = init_accountant()
  for amount in (0.1, 0.2, 0.3):
    # The host-side amount is closed over, so charge sees the float64 value.
    state = maybe_jit(lambda s, a=amount: charge(s, a), jit)(state)
  assert spent_rho(state) == pytest.approx(0.6, rel=1e-15)
  assert float(state.rho) == pytest.approx(0.6, rel=1e-7)  # the leading word alone


def test_charge_as_jit_argument_is_float32():
  # A Python float passed *as a jit argument* is already a float32 tracer when
  # charge sees it: its low part is 0 and the float32 value is what is summed.
  state = jax.jit(charge)(init_accountant(), 0.1)
  assert spent_rho(state) == float(np.float32(0.1))


def _scan_charges(amount, steps, jit):
  def run(state):
    def body(s, _):
      return charge(s, amount), None

    return jax.lax.scan(body, state, None, length=steps)[0]

  return maybe_jit(run, jit)(init_accountant())


@pytest.mark.parametrize("jit", [True, False])
def test_scan_of_1e4_charges_stays_exact_in_float32(jit):
  amount, steps = 1e-5 / 3, 10_000
  exact = math.fsum([amount] * steps)
  state = _scan_charges(amount, steps, jit)
  assert state.rho.dtype == jnp.float32
  assert abs(spent_rho(state) / exact - 1) < 1e-12
  # The check has teeth: a plain float32 running sum is off by ~1e-7.
  naive = jax.lax.scan(lambda s, _: (s + jnp.float32(amount), None), jnp.float32(0), None,
                       length=steps)[0]
  assert abs(float(naive) / exact - 1) > 1e-8


def test_scan_of_1e5_mixed_charges_exact():
  # Different magnitudes and amounts each step, under jit: the compensation
  # must survive XLA's simplifier (optimization_barrier).
  rng = np.random.default_rng(2)
  amounts = [float(a) for a in 10.0 ** rng.uniform(-9, -1, 8)]

  @jax.jit
  def run(state):
    def body(s, _):
      for a in amounts:
        s = charge(s, a)
      return s, None

    return jax.lax.scan(body, state, None, length=12_500)[0]

  exact = math.fsum(amounts * 12_500)
  assert abs(spent_rho(run(init_accountant())) / exact - 1) < 1e-14


def test_compensation_survives_xla_fast_math():
  # Fast-math lets XLA reassociate (a + b) - a into b, which would erase the
  # TwoSum error terms; the optimization barriers must keep the sum exact.
  script = textwrap.dedent("""
      import math, jax
      from dpjax import accounting as A
      amount, steps = 1e-5 / 3, 10_000
      body = lambda s, _: (A.charge(s, amount), None)
      run = jax.jit(lambda s: jax.lax.scan(body, s, None, length=steps)[0])
      print(abs(A.spent_rho(run(A.init_accountant())) / math.fsum([amount] * steps) - 1))
  """)
  env = dict(os.environ, XLA_FLAGS="--xla_cpu_enable_fast_math=true", JAX_PLATFORMS="cpu")
  root = pathlib.Path(__file__).resolve().parents[1]
  out = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, capture_output=True,
                       text=True, timeout=300, check=True)
  assert float(out.stdout.strip().splitlines()[-1]) < 1e-14


@pytest.mark.parametrize("jit", [True, False])
def test_traced_float64_charges_split_in_graph(x64, jit):
  # A float64 charge traced into a float32 accountant is split exactly in-graph.
  rng = np.random.default_rng(3)
  xs = jnp.asarray(10.0 ** rng.uniform(-8, 0, 2000), jnp.float64)

  def run(state, xs):
    return jax.lax.scan(lambda s, x: (charge(s, x), None), state, xs)[0]

  state = maybe_jit(run, jit)(init_accountant(jnp.float32), xs)
  assert state.rho.dtype == jnp.float32
  assert abs(spent_rho(state) / math.fsum(np.asarray(xs)) - 1) < 1e-14


def test_traced_same_width_charges(x64):
  del x64
  vals = np.full(1000, np.float32(0.1), np.float32)
  xs = jnp.asarray(vals)
  state = jax.jit(lambda s, xs: jax.lax.scan(lambda s, x: (charge(s, x), None), s, xs)[0])(
      init_accountant(jnp.float32), xs
  )
  # The float32 charges themselves are summed exactly.
  assert spent_rho(state) == math.fsum(vals.astype(np.float64))


def test_float64_accountant(x64):
  del x64
  amount = 1e-5 / 3
  state = _scan_charges(amount, 10_000, jit=True)
  assert state.rho.dtype == jnp.float64
  assert spent_rho(state) == math.fsum([amount] * 10_000)


def test_vmap_batched_states():
  amounts = jnp.array([0.1, 0.2, 0.3], jnp.float32)
  states = jax.vmap(lambda _: init_accountant())(amounts)
  assert states.rho.shape == (3,)

  @jax.jit
  def step(states, amounts):
    return jax.vmap(charge)(states, amounts)

  for _ in range(4):
    states = step(states, amounts)
  np.testing.assert_allclose(spent_rho(states), 4 * np.asarray(amounts, np.float64), rtol=1e-15)
  eps = epsilon_spent(states, 1e-5, "bun_steinke")
  assert eps.shape == (3,)
  np.testing.assert_allclose(
      eps, [zcdp_to_epsilon(float(r), 1e-5, "bun_steinke") for r in spent_rho(states)]
  )
  # A host-side charge broadcasts over a batched state, or matches its shape.
  states = charge(states, 0.5)
  states = charge(states, np.array([0.0, 1.0, 2.0]))
  np.testing.assert_allclose(
      spent_rho(states), 4 * np.asarray(amounts, np.float64) + [0.5, 1.5, 2.5], rtol=1e-15
  )
  with pytest.raises(ValueError, match=r"rho must be a scalar or have the accountant's shape"):
    charge(states, np.array([0.1, 0.2]))


def test_epsilon_spent_matches_conversion():
  state = charge(charge(init_accountant(), 0.05), 0.05)
  for method in METHODS:
    assert epsilon_spent(state, 1e-6, method) == zcdp_to_epsilon(spent_rho(state), 1e-6, method)
  with pytest.raises(ValueError, match=r"delta must be in the open interval"):
    epsilon_spent(state, 2.0)
  with pytest.raises(ValueError, match=r"method must be one of"):
    epsilon_spent(state, 1e-6, "exact")


class _TransformState(NamedTuple):
  count: jax.Array
  accountant: AccountantState


def test_optax_tree_get_finds_rho():
  accountant = charge(init_accountant(), 0.25)
  inner = _TransformState(count=jnp.zeros([], jnp.int32), accountant=accountant)
  assert float(optax.tree.get(inner, "rho")) == 0.25
  # Nested as optax.chain does: a tuple of member states.
  chained = (optax.EmptyState(), inner, optax.scale(0.1).init(jnp.zeros(2)))
  assert float(optax.tree.get(chained, "rho")) == 0.25
  # Also after an update through jit.
  chained = jax.jit(lambda st: (st[0], st[1]._replace(accountant=charge(st[1].accountant, 0.5)),
                                st[2]))(chained)
  assert float(optax.tree.get(chained, "rho")) == 0.75


def test_charge_bad_input():
  state = init_accountant()
  with pytest.raises(ValueError, match=r"rho must be >= 0"):
    charge(state, -1e-3)
  with pytest.raises(ValueError, match=r"rho must be finite, got nan"):
    charge(state, math.nan)
  with pytest.raises(ValueError, match=r"rho must be finite, got inf"):
    charge(state, math.inf)
  with pytest.raises(ValueError, match=r"rho contains NaN or inf"):
    charge(jax.vmap(lambda _: state)(jnp.arange(2)), np.array([0.1, np.nan]))
  with pytest.raises(ValueError, match=r"rho must be >= 0"):
    charge(state, jnp.float32(-0.5))
  with pytest.raises(ValueError, match=r"rho must be finite"):
    charge(state, jnp.float32(jnp.nan))
  with pytest.raises(TypeError, match=r"rho must be a floating array, got dtype int32"):
    charge(state, jnp.int32(1))
  with pytest.raises(TypeError, match=r"rho must be a real number or float array"):
    charge(state, "0.1")
  with pytest.raises(TypeError, match=r"rho must be a real number or float array"):
    charge(state, True)
  with pytest.raises(ValueError, match=r"rho must be a scalar or have the accountant's shape"):
    charge(state, jnp.zeros(3))
  with pytest.raises(TypeError, match=r"state must be an AccountantState"):
    charge((jnp.float32(0), jnp.float32(0), jnp.float32(0)), 0.1)


def test_spent_rho_bad_input():
  with pytest.raises(TypeError, match=r"state must be an AccountantState"):
    spent_rho(0.5)
  with pytest.raises(TypeError, match=r"spent_rho needs a concrete state.*outside jit"):
    jax.jit(spent_rho)(init_accountant())


def test_resolve_budget_for_an_epsilon_target():
  """target="epsilon": the (epsilon, delta) of a run calibrated to an epsilon target, rho None."""
  n = 1000
  assert accounting.resolve_budget(n, epsilon=2.0, target="epsilon") == (None, 2.0, 1.0 / n**2)
  for method in accounting.METHODS:
    rho_, eps, delta = accounting.resolve_budget(n, rho=0.3, delta=1e-5, method=method,
                                                 target="epsilon")
    assert rho_ is None and delta == 1e-5
    assert eps == accounting.zcdp_to_epsilon(0.3, 1e-5, method)
  # The zCDP target of the same rho reports the same epsilon.
  assert accounting.resolve_budget(n, rho=0.3, delta=1e-5)[1] == accounting.resolve_budget(
      n, rho=0.3, delta=1e-5, target="epsilon")[1]
  with pytest.raises(ValueError, match="exactly one privacy budget.*neither"):
    accounting.resolve_budget(n, target="epsilon")
  with pytest.raises(ValueError, match="exactly one privacy budget.*both"):
    accounting.resolve_budget(n, epsilon=1.0, rho=0.1, target="epsilon")
  with pytest.raises(ValueError, match="target must be one of"):
    accounting.resolve_budget(n, epsilon=1.0, target="zcdp")
  with pytest.raises(ValueError, match="cannot be certified"):
    accounting.resolve_budget(n, epsilon=60.0, delta=1e-6, slack=1e-20, target="epsilon")
