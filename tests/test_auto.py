"""Tests for dpjax.training.auto and ``dpjax.fit(..., "auto")``: tuning-free defaults."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from dpjax import accounting, data, training as fit_lib
from dpjax.training import auto


@pytest.mark.parametrize("loss", ["hinge", "squared", "Logistic", None, 3])
def test_unsupported_loss_is_refused(loss):
  with pytest.raises(ValueError, match=r"auto supports loss in \('logistic',\) only"):
    auto.choose(n=1000, d=10, epsilon=1.0, loss=loss)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(), ValueError, "exactly one privacy budget.*neither"),
        (dict(epsilon=1.0, rho=0.1), ValueError, "exactly one privacy budget.*both"),
        (dict(epsilon=0.0), ValueError, "epsilon must be > 0"),
        (dict(rho=-1.0), ValueError, "rho must be > 0"),
        (dict(epsilon=1.0, delta=1.0), ValueError, "delta must be in the open interval"),
        (dict(epsilon=1.0, accounting="rdp"), ValueError, "accounting must be one"),
        (dict(epsilon=1.0, n=0), ValueError, "n must be >= 1"),
        (dict(epsilon=1.0, d=2.5), TypeError, "d must be an integer"),
    ],
)
def test_bad_input(kwargs, error, match):
  kwargs = dict(dict(n=1000, d=10), **kwargs)
  with pytest.raises(error, match=match):
    auto.choose(**kwargs)


def test_branches_meet_at_the_crossover():
  n, rho = 10_000, 0.02
  d_star = auto.precond_crossover_d(n, rho)
  assert d_star == pytest.approx(n**2 * auto.CURVATURE_FRAC * rho / auto.KAPPA**2)
  d_below, d_above = math.floor(d_star * 0.99), math.ceil(d_star * 1.01)
  below = auto.choose(n=n, d=d_below, rho=rho)
  above = auto.choose(n=n, d=d_above, rho=rho)
  assert below.algorithm == "precond-gd" and above.algorithm == "dp-gd"
  # The floor kappa sqrt(2d) sigma_H (public) passes L1 = 1/4 at d*.
  sigma_h = accounting.gaussian_sigma(0.25 / n, auto.CURVATURE_FRAC * rho)
  assert below.eigenvalue_floor == pytest.approx(auto.KAPPA * math.sqrt(2 * d_below) * sigma_h)
  assert below.eigenvalue_floor < 0.25 <= above.eigenvalue_floor
  assert above.options == {"learning_rate": 4.0} and above.average == "last-half"
  assert below.options == {"kappa": auto.KAPPA, "curvature_frac": 0.03, "learning_rate": 1.0}
  assert "d* =" in below.reason and "d* =" in above.reason


def test_large_d_falls_back_to_averaged_dp_gd():
  c = auto.choose(n=10**7, d=auto.MAX_PRECOND_D + 1, epsilon=10.0)
  assert auto.precond_crossover_d(10**7, c.rho) > auto.MAX_PRECOND_D + 1
  assert c.algorithm == "dp-gd" and "too costly" in c.reason


def test_steps_grow_with_the_budget_and_stay_in_range():
  for d in (20, 124):
    ms = [auto.choose(n=30_000, d=d, rho=r).steps for r in np.geomspace(1e-3, 3.0, 12)]
    assert ms == sorted(ms)
  for n, d, eps in [(100, 5, 0.01), (10**7, 50, 100.0), (5000, 300, 0.1)]:
    c = auto.choose(n=n, d=d, epsilon=eps)
    lo, hi = auto._PRECOND_M if c.algorithm == "precond-gd" else auto._GD_T
    assert lo <= c.steps <= hi


_AUTO_DS = dict(seed=1, n=600, d=5)
_AUTO_EPS = [0.05, 8.0]


def test_choose_reads_no_data_values():
  # Two datasets of the same shape (different values and labels) get the same
  # choice: the rule sees n, d and the budget only. (The shape, budget and repeats of
  # auto_choices_and_manual_fits' second fit: the same compiled program.)
  n, d = _AUTO_DS["n"], _AUTO_DS["d"]
  a = data.synthetic(0, n=n, d=d)
  b = data.synthetic(5, n=n, d=d)
  ra = fit_lib.fit(a, "auto", epsilon=_AUTO_EPS[1], repeats=3)
  rb = fit_lib.fit(b, "auto", epsilon=_AUTO_EPS[1], repeats=3)
  assert (ra.algorithm, ra.steps, ra.average, ra.options, ra.auto_reason) == (
      rb.algorithm, rb.steps, rb.average, rb.options, rb.auto_reason)
  assert not np.allclose(ra.params, rb.params)


@pytest.fixture(scope="module")
def auto_choices_and_manual_fits():
  """Per eps: auto's choice and the fit of that choice named by hand (run once, shared)."""
  ds = data.synthetic(_AUTO_DS["seed"], n=_AUTO_DS["n"], d=_AUTO_DS["d"])
  choices = [auto.choose(n=_AUTO_DS["n"], d=_AUTO_DS["d"], epsilon=e) for e in _AUTO_EPS]
  manual = [fit_lib.fit(ds, c.algorithm, epsilon=e, steps=c.steps, average=c.average,
                        repeats=3, seed=2, **c.options) for c, e in zip(choices, _AUTO_EPS)]
  return ds, choices, manual


@pytest.mark.parametrize("jit_levels", [False, True])
def test_fit_auto_runs_the_choice(jit_levels, auto_choices_and_manual_fits):
  ds, choices, manual_fits = auto_choices_and_manual_fits
  eps = _AUTO_EPS
  if jit_levels:  # fit_levels: one program per distinct choice, results in level order
    results = fit_lib.fit_levels(ds, "auto", epsilons=eps, repeats=3, seed=2)
  else:
    results = [fit_lib.fit(ds, "auto", epsilon=e, repeats=3, seed=2) for e in eps]
  assert len({c.algorithm for c in choices}) == 2  # both branches in one sweep
  for res, c, e, manual in zip(results, choices, eps, manual_fits):
    assert (res.algorithm, res.steps, res.average, res.options) == (
        c.algorithm, c.steps, c.average, c.options)
    assert res.auto_reason == c.reason and res.epsilon == e
    np.testing.assert_allclose(res.excess_losses, manual.excess_losses, rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(res.rho_spent, c.rho, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(steps=10), r"chooses the steps.*\['steps'\]"),
        (dict(average="none"), r"\['average'\]"),
        (dict(kappa=3.0), r"\['kappa'\]"),
    ],
)
def test_fit_auto_takes_no_tuning_arguments(kwargs, match, monkeypatch):
  def no_work(*args, **kw):
    raise AssertionError("work started before validation finished")

  monkeypatch.setattr(jax, "jit", no_work)
  with pytest.raises(TypeError, match=match):
    fit_lib.fit(data.synthetic(0, n=50, d=3), "auto", epsilon=1.0, **kwargs)


@pytest.mark.parametrize("n, d, rho", [(10_000, 5, 0.5), (2_000, 40, 0.05)])
def test_the_floor_is_the_one_precond_gd_releases_with(n, d, rho):
  """auto asks precond-gd's mechanism for the floor: the same number the transform uses."""
  from dpjax import transforms  # pylint: disable=g-import-not-at-top
  choice = auto.choose(n=n, d=d, rho=rho)
  tx = transforms.dp_precond_gd(n=n, rho=rho, steps=8, curvature_frac=auto.CURVATURE_FRAC,
                                kappa=auto.KAPPA, key=0)
  w = jax.numpy.zeros(d)
  # One compiled update (op by op, each of its ops would compile on its own).
  update = jax.jit(lambda g, state, w, h: tx.update(g, state, w, curvature_matrix=h))
  _, state = update(jax.numpy.zeros(d), tx.init(w), w, jax.numpy.eye(d) / 4)
  np.testing.assert_allclose(float(state.eigenvalue_floor), choice.eigenvalue_floor, rtol=1e-6)
