"""Tests of ``benchmarks/minibatch.py``: its ``--quick`` run, the exit on missing data, and its
compiled grid programs (the library steps with traced hyper-parameters) against the transforms."""

from __future__ import annotations

import functools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_benchmark
from dpjax import data
from dpjax.mechanisms import sampling
from dpjax.transforms import direction_sensitivity
from dpjax.transforms import (
    dp_newton_minibatch,
    dp_newton_minibatch_step,
    dp_sgd,
    dp_sgd_step,
    minibatch_min_eigenvalue,
)


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


def _transform_runs(make, keys, x, y, steps):
  """``steps`` updates of ``make(key)`` from 0, vmapped over ``keys``: ``[len(keys), d]``.

  Run as the benchmark runs its steps, in a jitted ``fori_loop`` with a traced trip count
  (XLA fuses ``w + update`` into the loop body; a separately compiled update, or a constant
  trip count, may round the last bit differently).
  """
  def run(key, steps):
    tx = make(key)

    def body(_, carry):
      w, state = carry
      u, state = tx.update(None, state, w, data=(x, y))
      return w + u, state

    w0 = jnp.zeros(x.shape[1], x.dtype)
    return jax.lax.fori_loop(0, steps, body, (w0, tx.init(w0)))[0]

  return np.asarray(jax.jit(jax.vmap(run, in_axes=(0, None)))(keys, jnp.int32(steps)))


def _check_grid(mb, step, n_params, keys, x, y, steps, params, refs):
  """The benchmark's program on a one-point grid is ``refs[0]`` bit for bit; on the whole grid
  every point is its reference up to the summation order of the vmapped products."""
  one, _ = mb._compiled(step, n_params, keys, x, y, 1)
  w_one, _ = mb._run(one, keys, steps, x, y, [p[:1] for p in params])
  np.testing.assert_array_equal(w_one[0], refs[0])
  grid, _ = mb._compiled(step, n_params, keys, x, y, len(refs))
  w, _ = mb._run(grid, keys, steps, x, y, params)
  for i, ref in enumerate(refs):
    np.testing.assert_allclose(w[i], ref, rtol=1e-5, atol=1e-6)
  assert float(np.abs(w).max()) > 0.1


def test_compiled_newton_grid_is_the_transform():
  """The benchmark's Newton program (the library step, traced lambda and noise scales, vmapped
  grid, traced step count) against ``dp_newton_minibatch`` for every grid point and seed."""
  mb = load_benchmark("minibatch")
  n, d, b, steps = 300, 6, 30, 3
  x, y = (jnp.asarray(a) for a in data.synthetic(0, n=n, d=d))
  keys = jax.random.split(jax.random.key(3), 2)
  sampler = sampling.poisson_sampler(n, batch_size=b, overflow_prob=mb.OVERFLOW_PROB)
  grid = [(0.002, 1.3, 0.9), (0.05, 0.7, 1.1)]  # (lambda requested, z_g, z_H); 0.002 < 1/B_H.
  lams = [minibatch_min_eigenvalue(lam, curvature_batch_size=b, modification="clip")
          for lam, _, _ in grid]
  params = [np.array(lams), np.array([z_g / b for _, z_g, _ in grid]),
            np.array([direction_sensitivity(lam, n=b, modification="clip") for lam in lams]),
            np.array([z_h for _, _, z_h in grid])]
  step = functools.partial(dp_newton_minibatch_step, grad_sampler=sampler,
                           curvature_sampler=sampler, batch_size=b, curvature_batch_size=b)
  refs = [_transform_runs(lambda key, lam=lam, z_g=z_g, z_h=z_h: dp_newton_minibatch(
      n=n, batch_size=b, curvature_batch_size=b, min_eigenvalue=lam, noise_multiplier_grad=z_g,
      noise_multiplier_hess=z_h, key=key, overflow_prob=mb.OVERFLOW_PROB), keys, x, y, steps)
      for lam, z_g, z_h in grid]
  _check_grid(mb, step, 4, keys, x, y, steps, params, refs)


def test_compiled_sgd_grid_is_the_transform():
  """The same for DP-SGD: a learning-rate / noise grid in one program against ``dp_sgd``."""
  mb = load_benchmark("minibatch")
  n, d, b, steps = 300, 6, 40, 5
  x, y = (jnp.asarray(a) for a in data.synthetic(0, n=n, d=d))
  keys = jax.random.split(jax.random.key(3), 2)
  sampler = sampling.poisson_sampler(n, batch_size=b, overflow_prob=mb.OVERFLOW_PROB)
  grid = [(8.0, 1.7), (2.0, 0.6)]  # (learning rate, z); C = 1.
  step = functools.partial(dp_sgd_step, sampler=sampler)
  refs = [_transform_runs(lambda key, lr=lr, z=z: dp_sgd(
      n=n, batch_size=b, noise_multiplier=z, clip_norm=1.0, learning_rate=lr, loss="logistic",
      key=key, overflow_prob=mb.OVERFLOW_PROB), keys, x, y, steps) for lr, z in grid]
  _check_grid(mb, step, 2, keys, x, y, steps, [np.array(v) for v in zip(*grid)], refs)
