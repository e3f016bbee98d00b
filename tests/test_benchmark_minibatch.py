"""Tests of ``benchmarks/minibatch.py``: its ``--quick`` run, the exit on missing data, and its
traced-hyper-parameter steps against the transforms they stand in for."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_benchmark
from dpjax import data
from dpjax.mechanisms import sampling
from dpjax.transforms.dp_newton import direction_sensitivity
from dpjax.transforms.dp_newton_minibatch import dp_newton_minibatch, minibatch_min_eigenvalue
from dpjax.transforms.dp_sgd import dp_sgd


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory):
  out = tmp_path_factory.mktemp("minibatch")
  status = load_benchmark("minibatch").main(["--quick", "--out-dir", str(out)])
  return status, out


def test_quick_run_writes_consistent_results(quick_run):
  status, out = quick_run
  assert status == 0
  payload = json.loads((out / "minibatch.json").read_text())
  assert (out / "minibatch.md").read_text().startswith("# Minibatch double-noise Newton")
  assert (out / "minibatch.png").stat().st_size > 0
  assert payload["quick"] and "non-private" in payload["tuning"]
  (setting,) = payload["settings"]
  assert setting["excess_loss_at_zero"] > 0
  for cell in setting["cells"]:
    for name, method in cell["methods"].items():
      best = method["best"]
      values = [v["excess_loss_mean"] for r in method["runs"] for v in r["values"]]
      assert best["excess_loss_mean"] == min(values)
      assert all(math.isfinite(v) for v in values)
      for run in method["runs"]:
        # Equal epsilon: every run spends its target (the accountant, not a formula).
        assert abs(run["epsilon_spent"] / cell["epsilon"] - 1) < 2e-3, (name, run)
        per_step = 2 * run["batch_size"] if name == "newton" else run["batch_size"]
        assert run["passes"] == pytest.approx(run["steps"] * per_step / setting["n"])
        assert run["passes"] <= 1.05 * cell["passes"]
        if name == "newton":  # Hess-clip: the lambda used is never below its floor 1/B_H.
          assert run["clip_floor"] == pytest.approx(1 / run["batch_size"])
          assert all(v["lambda"] >= run["clip_floor"] for v in run["values"])
    # Both methods improve on w = 0 even in the smoke run.
    assert cell["methods"]["newton"]["best"]["excess_loss_mean"] < setting["excess_loss_at_zero"]
    assert cell["methods"]["dp-sgd"]["best"]["excess_loss_mean"] < setting["excess_loss_at_zero"]


def test_missing_data_exits_with_status_2(tmp_path):
  status = load_benchmark("minibatch").main(
      ["--datasets", "a1a.t", "--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "o")])
  assert status == 2


@pytest.mark.parametrize("modification,lam", [("clip", 0.002), ("clip", 0.05), ("add", 0.01)])
def test_newton_step_matches_the_transform(modification, lam):
  """The benchmark's traced-lambda step is exactly ``dp_newton_minibatch``'s update."""
  mb = load_benchmark("minibatch")
  n, d, b, z_g, z_h = 300, 6, 30, 1.3, 0.9
  x, y = (jnp.asarray(a) for a in data.synthetic(0, n=n, d=d))
  key = jax.random.key(3)
  tx = dp_newton_minibatch(n=n, batch_size=b, curvature_batch_size=b, min_eigenvalue=lam,
                           noise_multiplier_grad=z_g, noise_multiplier_hess=z_h, key=key,
                           modification=modification, overflow_prob=mb.OVERFLOW_PROB)
  sampler = sampling.poisson_sampler(n, batch_size=b, overflow_prob=mb.OVERFLOW_PROB)
  lam_c = minibatch_min_eigenvalue(lam, curvature_batch_size=b, modification=modification)
  sens = direction_sensitivity(lam_c, n=b, modification=modification)
  w, state = jnp.zeros(d), tx.init(jnp.zeros(d))
  w2, key2 = jnp.zeros(d), key
  for _ in range(3):
    u, state = tx.update(None, state, w, data=(x, y))
    w = w + u
    w2, key2 = mb.newton_step(w2, key2, jnp.float32(lam_c), jnp.float32(z_g / b),
                              jnp.float32(sens), jnp.float32(z_h), x, y, sampler=sampler,
                              modification=modification)
  np.testing.assert_allclose(w2, w, rtol=1e-6, atol=1e-6)
  assert float(jnp.abs(w).max()) > 0.1


def test_sgd_step_matches_the_transform():
  """The benchmark's traced-learning-rate step is exactly ``dp_sgd``'s update."""
  mb = load_benchmark("minibatch")
  n, d, b, z, lr = 300, 6, 40, 1.7, 8.0
  x, y = (jnp.asarray(a) for a in data.synthetic(0, n=n, d=d))
  key = jax.random.key(3)
  tx = dp_sgd(n=n, batch_size=b, noise_multiplier=z, clip_norm=1.0, learning_rate=lr,
              loss="logistic", key=key, overflow_prob=mb.OVERFLOW_PROB)
  sampler = sampling.poisson_sampler(n, batch_size=b, overflow_prob=mb.OVERFLOW_PROB)
  w, state = jnp.zeros(d), tx.init(jnp.zeros(d))
  w2, key2 = jnp.zeros(d), key
  for _ in range(5):
    u, state = tx.update(None, state, w, data=(x, y))
    w = w + u
    w2, key2 = mb.sgd_step(w2, key2, jnp.float32(lr), jnp.float32(z), x, y, sampler=sampler)
  np.testing.assert_allclose(w2, w, rtol=1e-6, atol=1e-6)
  assert float(jnp.abs(w).max()) > 0.1
