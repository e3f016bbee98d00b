"""dpjax.fit for the Poisson-minibatch, cubic-Newton, general-loss and baseline algorithms."""

from __future__ import annotations

import numpy as np
import pytest

import dpjax
from dpjax import accounting, data
from dpjax.training import drivers, streaming
from dpjax.problem import glm, losses

N, D = 600, 3


@pytest.fixture(scope="module")
def ds():
  return data.synthetic(0, n=N, d=D)


@pytest.mark.parametrize("algorithm,kw", [
    ("dp-sgd", dict(batch_size=100)),
    ("newton-minibatch", dict(batch_size=100, curvature_batch_size=150, min_eigenvalue=0.2)),
])
def test_poisson_fit_spends_its_target_epsilon_and_learns(ds, algorithm, kw):
  res = dpjax.fit(ds, algorithm, epsilon=4.0, steps=12, repeats=2, seed=3, **kw)
  assert res.rho is None and res.accounting == "rdp" and res.private
  assert res.losses.shape == (2, 13) and res.params.shape == (2, D)
  assert res.batch_size == 100
  assert res.curvature_batch_size == (150 if algorithm == "newton-minibatch" else 0)
  # The accountant in the state: the RDP curve, no zCDP part; epsilon at delta = the target.
  acc = streaming.accountant_of(res.opt_state)
  for r in range(2):
    one = type(acc)(*[np.asarray(f)[r] for f in acc])
    spent = accounting.epsilon_spent(one, res.delta)
    assert spent <= 4.0 * (1 + 1e-9) and spent >= 4.0 * (1 - 2e-3)
  assert np.all(res.rho_spent == 0.0)
  assert np.all(res.excess_losses < res.losses[:, 0] - res.loss_star)
  again = dpjax.fit(ds, algorithm, epsilon=4.0, steps=12, repeats=2, seed=3, **kw)
  np.testing.assert_array_equal(again.params, res.params)
  assert not np.array_equal(res.params[0], res.params[1])


def test_poisson_rho_budget_is_its_epsilon_at_delta(ds):
  res = dpjax.fit(ds, "dp-sgd", rho=0.5, steps=5, batch_size=60, accounting="cks")
  assert res.epsilon == pytest.approx(accounting.zcdp_to_epsilon(0.5, N**-2.0, "cks"))


def test_general_loss_fit_spends_rho_and_approaches_the_optimum(ds):
  x, y = ds
  y_real = np.asarray(y) * 0.5 + 0.1 * np.asarray(x)[:, 0]
  res = dpjax.fit((x, y_real), "qu-add", rho=10.0, steps=6, repeats=2, seed=0,
                  loss="pseudo_huber", loss_options={"delta": 1.0}, min_eigenvalue=0.05)
  spec = losses.get_loss("pseudo_huber", delta=1.0)
  _, f_star = losses.optimum(spec, np.asarray(x, np.float64), y_real)
  assert res.loss == "pseudo_huber" and res.loss_star == pytest.approx(f_star)
  np.testing.assert_allclose(res.rho_spent, 10.0, rtol=1e-9)
  assert np.all(res.excess_losses < 1e-2 * (res.losses[:, 0] - res.loss_star))
  # 1e-12: the float64 losses over 600 rows round at ~1e-16, and losses.optimum stops at a
  # Newton decrement <= 1e-13 and then takes one more full Newton step.
  assert np.all(res.excess_losses > -1e-12)


def test_general_loss_refusals(ds):
  x, y = ds
  with pytest.raises(ValueError, match="fixed min_eigenvalue"):
    dpjax.fit(ds, "hess-add", epsilon=1.0, steps=2, loss="pseudo_huber")
  with pytest.raises(ValueError, match="logistic regression"):
    dpjax.fit(ds, "hess-clip", epsilon=1.0, steps=2, loss="pseudo_huber")
  with pytest.raises(ValueError, match="clip"):
    drivers.losses_lib.newton_options(losses.get_loss("pseudo_huber"), "clip")
  with pytest.raises(TypeError, match="loss_options"):
    dpjax.fit(ds, "dp-gd", epsilon=1.0, steps=2, loss_options={"delta": 1.0})
  with pytest.raises(ValueError, match="label_bound"):
    dpjax.fit((x, 9.0 * np.asarray(y)), "dp-gd", epsilon=1.0, steps=2, loss="poisson",
              loss_options={"label_bound": 2.0})


def test_cubic_newton_fit(ds):
  res = dpjax.fit(ds, "cubic-newton", rho=0.1, steps=2, repeats=2, mu=0.05, radius=2.0, seed=0)
  assert res.loss == "l2_logistic" and res.private and res.rho is not None
  assert np.all(np.linalg.norm(res.params, axis=1) <= 2.0 * (1 + 1e-6))
  # 1e-12: float64 losses over 600 rows round at ~1e-16; the ball optimum is a feasible point
  # found by losses.optimum (decrement <= 1e-13, then a full Newton step) and bisection.
  assert np.all(res.excess_losses > -1e-12)
  assert np.all(res.excess_losses < res.losses[:, 0] - res.loss_star)
  np.testing.assert_allclose(res.rho_spent, res.rho, rtol=1e-9)
  with pytest.raises(ValueError, match="mu"):
    dpjax.fit(ds, "cubic-newton", epsilon=1.0, steps=2)
  with pytest.raises(TypeError, match="batch_size"):
    dpjax.fit(ds, "cubic-newton", epsilon=1.0, steps=2, mu=0.1, batch_size=10)


def test_ball_optimum_satisfies_kkt(ds):
  x, y = (np.asarray(a, np.float64) for a in ds)
  mu, radius = 1e-3, 0.3
  w, f = drivers.ball_optimum(x, y, mu=mu, radius=radius)
  assert np.linalg.norm(w) == pytest.approx(radius, rel=1e-9)
  g = np.mean((-y / (1 + np.exp(y * (x @ w))))[:, None] * x, axis=0) + mu * w
  nu = -g @ w / radius**2  # grad F(w*) = -nu w* with nu >= 0 on the boundary.
  assert nu > 0
  np.testing.assert_allclose(g, -nu * w, atol=1e-9)
  assert f == pytest.approx(float(glm.logistic_loss(w, x, y)) + 0.5 * mu * w @ w, rel=1e-6)


@pytest.mark.parametrize("algorithm,private", [
    ("aop", True), ("damped-newton", False), ("damped-newton-private", True),
    ("dp-gd-oracle", False)])
def test_baselines_through_fit(ds, algorithm, private):
  steps = None if algorithm == "aop" else 4
  res = dpjax.fit(ds, algorithm, epsilon=2.0, steps=steps, repeats=2)
  assert res.private is private
  assert res.losses.shape == ((2, 1) if algorithm == "aop" else (2, 5))
  assert (res.rho is None) == (algorithm == "aop")
  assert np.all(np.isfinite(res.excess_losses))


@pytest.mark.parametrize("algorithm,kw", [
    ("dp-sgd", dict(steps=2, batch_size=100)),  # the compiled drivers (_run_compiled)
    ("damped-newton-private", dict(steps=2)),  # the baselines (keys split on the host)
])
def test_driver_seeds_fresh_by_default_explicit_ones_reproduce(ds, algorithm, kw):
  a, b = (dpjax.fit(ds, algorithm, epsilon=1.0, **kw) for _ in range(2))
  assert a.seed is None and not np.array_equal(a.params, b.params)
  seed = 2**33 + 5
  c, again = (dpjax.fit(ds, algorithm, epsilon=1.0, seed=seed, **kw) for _ in range(2))
  assert c.seed == seed and again.seed == seed
  np.testing.assert_array_equal(c.params, again.params)
  low = dpjax.fit(ds, algorithm, epsilon=1.0, seed=5, **kw)  # the same low 32 bits
  assert not np.allclose(c.params, low.params)


@pytest.mark.parametrize("algorithm,scale,kw", [
    ("damped-newton-private", 1.0, dict(steps=2)),  # a private baseline, noise switched off
    ("dp-gd", 0.5, dict(steps=2, loss="pseudo_huber", loss_options={"delta": 1.0})),
])
def test_driver_without_noise_is_not_private(ds, algorithm, scale, kw):
  x, y = ds
  with pytest.warns(dpjax.PrivacyLeakWarning, match="disable_noise_for_testing"):
    res = dpjax.fit((x, scale * np.asarray(y)), algorithm, epsilon=1.0, seed=0,
                    disable_noise_for_testing=True, **kw)
  assert res.private is False


def test_bad_driver_arguments(ds):
  with pytest.raises(ValueError, match="batch_size"):
    dpjax.fit(ds, "dp-sgd", epsilon=1.0, steps=2)
  with pytest.raises(ValueError, match="batch"):
    dpjax.fit(ds, "dp-sgd", epsilon=1.0, steps=2, batch_size=N + 1)
  with pytest.raises(TypeError, match="curvature_batch_size"):
    dpjax.fit(ds, "dp-sgd", epsilon=1.0, steps=2, batch_size=10, curvature_batch_size=10)
  with pytest.raises(TypeError, match="unknown option"):
    dpjax.fit(ds, "dp-sgd", epsilon=1.0, steps=2, batch_size=10, kappa=3.0)
  with pytest.raises(TypeError, match="steps"):
    dpjax.fit(ds, "aop", epsilon=1.0, steps=3)
  with pytest.raises(ValueError, match="remove average"):
    dpjax.fit(ds, "damped-newton", epsilon=1.0, steps=3, average="last-half")
  with pytest.raises(ValueError, match="init"):
    dpjax.fit(ds, "dp-sgd", epsilon=1.0, steps=2, batch_size=10, init="random-unit")
  with pytest.raises(ValueError, match="exactly one"):
    dpjax.fit(ds, "dp-sgd", steps=2, batch_size=10)
  with pytest.raises(ValueError, match="min_eigenvalue"):
    dpjax.fit(ds, "newton-minibatch", epsilon=1.0, steps=2, batch_size=10)
