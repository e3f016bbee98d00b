"""Minibatch double-noise Newton vs DP-SGD at equal epsilon: the analogue of the paper's Fig. 4.

Ganesh et al. (NeurIPS 2023) compare the minibatch (stochastic) variant of
their double-noise Newton method (Sec. 6, Fig. 4;
:func:`dpjax.transforms.dp_newton_minibatch`) with DP-SGD (Abadi et al. 2016;
:func:`dpjax.transforms.dp_sgd`) by the excess loss reached after a number of
passes over the data. Here, for every dataset, epsilon (``delta = n^-2``) and
pass budget P:

* minibatch Newton: expected sample sizes ``B_g = B_H = q n`` for each q of
  :data:`NEWTON_RATES`, ``T = round(P n / (B_g + B_H))`` steps (BOTH samples
  count towards the passes), Hess-clip (the paper's headline variant), a fixed
  lambda from :data:`LAMBDA_GRID` (raised to the clip floor ``1/B_H``, spec
  4.5; requested values below the floor are run once, at the floor), the
  common noise multiplier ``z_g = z_H`` calibrated to (epsilon, delta, T) by
  the RDP accountant;
* DP-SGD: expected batch ``B = q n`` for each q of :data:`SGD_RATES`,
  ``T = round(P n / B)`` steps, clip norm 1, learning rate from
  :data:`LEARNING_RATE_GRID` (the reference's 4 = 1/L1 is inside it),
  noise multiplier calibrated to (epsilon, delta, T) by the same accountant;

both from ``w_0 = 0``, each configuration with ``--seeds`` independent runs.
Every point is a separate private run of its own length, calibrated for that
length; the reported excess loss ``loss(w_T) - loss*`` (float64 on the host;
``loss*`` from :func:`dpjax.problem.solve.logistic_optimum`) is that of its final
iterate, averaged over seeds, for the configuration (sample rate and lambda,
or rate and learning rate) with the smallest mean.

Speed: the steps are the library's own, :func:`dpjax.transforms.dp_newton_minibatch_step`
and :func:`dpjax.transforms.dp_sgd_step` (the bodies of the ``update`` of
:func:`dpjax.transforms.dp_newton_minibatch` and :func:`dpjax.transforms.dp_sgd`,
which call them), run with lambda / learning rate and the noise scales as
TRACED arguments and the step count traced too (``fori_loop``). So ONE
compiled program per (dataset, method, sample rate) runs the whole lambda or
learning-rate grid, both epsilons, every pass budget and every seed (vmapped;
the samples are drawn once per seed and shared by the grid). The steps charge
nothing; the privacy spend of each run is the accountant's
(:func:`dpjax.accounting.charge_rdp` of the per-step RDP curve and
truncation slack, as the transforms charge it, then
:func:`dpjax.accounting.epsilon_spent`).

TUNING IS NOT PRIVATE: choosing the best grid point by its excess loss on the
training data uses the data outside the privacy budget, exactly as in the
paper (which tunes its hyper-parameters non-privately). Both methods get a
grid of the same kind (6 sample rates x 7 lambdas for Newton, 6 rates x 10
learning rates for DP-SGD), so the comparison is even; the JSON records every
grid point and flags a best value on a grid edge (``on_grid_edge`` for lambda
or the learning rate, ``rate_on_grid_edge`` for the sample rate, among the
rates that fit the pass budget: ``T = round(P n / per-step)``, or its floor
if rounding up overshoots P by more than :data:`MAX_PASS_OVERSHOOT`, and a
rate with floor 0 is not run for that P) and a Newton
lambda at the clip floor (``at_clip_floor``: the smallest lambda Hess-clip
allows at that B_H, so not a grid edge).

Compile time is excluded from the per-run timings: each program is compiled
ahead of time (``_harness.compile_fn``) and only the compiled runs are timed.

Usage::

  python benchmarks/minibatch.py [--datasets synthetic a1a.t] [--epsilons 1 10]
      [--passes 1 2 4] [--seeds 3] [--data-dir ../shared/data] [--out-dir DIR] [--quick]

``--quick``: synthetic data with n = 2000, d = 20, epsilon 1, passes 1 and 2,
2 seeds, small grids (a smoke run of about 10 s, two compiled programs; outputs go to
``<out-dir>/quick``). A missing data file exits with status 2 and a message
naming ``--data-dir``.

Outputs (``_harness.out_dir``): ``minibatch.json``, ``minibatch.md`` and
``minibatch.png`` (excess loss against passes, one panel per dataset and
epsilon, mean +- 1 s.e. over seeds, the excess loss of ``w = 0`` dashed).

JSON schema (besides ``schema`` from the harness)::

  machine: dict                 # _harness.machine_info(), + load_average_end
  quick: bool
  seeds: int
  grids: {newton_rates, lambdas, sgd_rates, learning_rates: [float]}
  newton_variant: str           # "hessian-clip"
  tuning: str                   # the non-private tuning statement
  seconds_total: float
  settings: list of
    dataset: str
    n, d: int
    delta: float                # n ** -2
    loss_star: float            # non-private optimum (float64 Newton)
    excess_loss_at_zero: float  # loss(0) - loss_star
    cells: list of
      epsilon: float
      passes: float             # the requested pass budget P
      methods: {"newton": M, "dp-sgd": M} with M =
        best: {excess_loss_mean, excess_loss_se, passes, steps, rate, batch_size,
               lambda | learning_rate, noise_multiplier, epsilon_spent, on_grid_edge,
               rate_on_grid_edge, at_clip_floor (newton only)}
        runs: list of {rate, batch_size, steps, passes, noise_multiplier, epsilon_spent,
                       clip_floor (newton only),
                       seconds_compile,   # of the program shared by this rate's runs
                       seconds_run,       # of the joint run of all values and epsilons
                       values: list of {lambda | learning_rate, lambda_requested (newton),
                                        excess_loss_mean, excess_loss_se,
                                        excess_losses: [float]}}
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

import jax  # noqa: E402  pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # noqa: E402  pylint: disable=g-import-not-at-top

from dpjax import accounting  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import data as data_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax.mechanisms import noise  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax.mechanisms import sampling  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax.problem import solve  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax.transforms.dp_newton import direction_sensitivity  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax.transforms.dp_newton_minibatch import (  # noqa: E402  pylint: disable=g-import-not-at-top
    dp_newton_minibatch_step, minibatch_min_eigenvalue, minibatch_noise_multipliers)
from dpjax.transforms.dp_sgd import (  # noqa: E402  pylint: disable=g-import-not-at-top
    dp_sgd_noise_multiplier, dp_sgd_step)

DEFAULT_DATASETS = ("synthetic", "a1a.t")
DEFAULT_EPSILONS = (1.0, 10.0)
DEFAULT_PASSES = (1.0, 2.0, 4.0)
DEFAULT_SEEDS = 3
# Expected sample sizes as fractions of n (Newton: each of its two samples).
# (q = 1 is not possible: the capped sampler's overflow slack is then 1.) A rate whose single
# step already exceeds the pass budget (Newton q = 0.75 at P = 1) is not run for it.
NEWTON_RATES = (0.01, 0.02, 0.05, 0.2, 0.5, 0.75)
SGD_RATES = (0.003, 0.01, 0.03, 0.1, 0.3, 0.5)
LAMBDA_GRID = (3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3)
LEARNING_RATE_GRID = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)
# T = round(P n / per-step); if that overshoots P by more than this factor, T = floor(...)
# instead (never more passes than the budget), and a rate with floor(...) = 0 is not run for P.
MAX_PASS_OVERSHOOT = 1.05
CURVATURE, MODIFICATION = "hessian", "clip"
# Per-sample overflow probability of the capped Poisson samples, for both methods:
# the truncation slack (1 + e^eps) T p must stay far below delta = n^-2 at eps = 10.
OVERFLOW_PROB = 1e-25

QUICK_SHAPE = (2000, 20)  # n, d of the --quick synthetic data.
QUICK_EPSILONS = (1.0,)
QUICK_PASSES = (1.0, 2.0)
QUICK_SEEDS = 2
QUICK_NEWTON_RATES = (0.1,)
QUICK_SGD_RATES = (0.05,)
QUICK_LAMBDA_GRID = (0.03, 0.3)
QUICK_LEARNING_RATE_GRID = (1.0, 4.0)

TUNING = ("non-private: the best grid point (sample rate and lambda for Newton, sample rate and "
          "learning rate for DP-SGD) is chosen by its mean excess loss on the training data, as in "
          "the paper; each run itself is (epsilon, n^-2)-DP")


# ----------------------------------------------------------------------------
# Running.
# ----------------------------------------------------------------------------


def _excess(w: np.ndarray, x64: np.ndarray, y64: np.ndarray, loss_star: float) -> np.ndarray:
  """Float64 excess loss of each row of ``w`` [k, d]."""
  m = (x64 @ w.T) * y64[:, None]
  return np.mean(np.logaddexp(0.0, -m), axis=0) - loss_star


def _compiled(step, n_params: int, keys, x, y, k: int):
  """AOT-compiles the vmapped run of ``step`` for ``k`` configurations; (fn, seconds).

  ``step(w, key, (x, y), *params)`` is a library step (:func:`dp_newton_minibatch_step`,
  :func:`dp_sgd_step`) returning ``(update, new_key, ...)``; ``params`` are its traced
  hyper-parameters and noise scales.
  """
  d = x.shape[1]

  def one(key, steps, x, y, *params):
    def body(_, carry):
      w, key = carry
      update, key = step(w, key, (x, y), *params)[:2]
      return w + update, key

    w, _ = jax.lax.fori_loop(0, steps, body, (jnp.zeros(d, x.dtype), key))
    return w

  fn = jax.vmap(jax.vmap(one, in_axes=(0, None, None, None) + (None,) * n_params),
                in_axes=(None, None, None, None) + (0,) * n_params)
  params = [jnp.zeros(k, x.dtype) for _ in range(n_params)]
  compiled, seconds = _harness.compile_fn(jax.jit(fn), keys, jnp.int32(1), x, y, *params)
  return compiled, seconds


def _steps(ratio: float) -> int:
  """``round(ratio)``, or ``floor(ratio)`` if rounding up overshoots by > MAX_PASS_OVERSHOOT."""
  steps = max(1, round(ratio))
  return steps if steps <= MAX_PASS_OVERSHOOT * ratio else math.floor(ratio)


def _spent(rdp_step: np.ndarray, truncation: float, steps: int, delta: float) -> float:
  """The accountant's epsilon after ``steps`` charges of ``rdp_step`` and ``truncation``.

  The transforms charge both once per step; RDP composes additively, so one
  charge of ``steps`` times each (float64 on the host) is the same total up to
  rounding (~1e-16 relative).
  """
  acc = accounting.charge_rdp(accounting.init_accountant(), np.asarray(rdp_step) * steps,
                              truncation=truncation * steps)
  return float(accounting.epsilon_spent(acc, delta))


def _run(compiled, keys, steps: int, x, y, params: list[np.ndarray]):
  t0 = time.perf_counter()
  w = jax.block_until_ready(compiled(keys, jnp.int32(steps), x, y,
                                     *[jnp.asarray(p, x.dtype) for p in params]))
  return np.asarray(w, np.float64), time.perf_counter() - t0


def run_newton(x, y, ctx: dict[str, Any], epsilons: Sequence[float], passes: Sequence[float],
               rate: float, lambdas: Sequence[float]) -> dict[tuple[float, float], dict]:
  """Every lambda, epsilon and pass budget of one Newton sample rate (ONE compiled program).

  Returns ``{(epsilon, passes): run record}``. Requested lambdas that the clip
  floor ``1/B_H`` raises to the same value are run once.
  """
  n, delta = ctx["n"], ctx["delta"]
  b = max(1, round(rate * n))
  sampler = sampling.poisson_sampler(n, batch_size=b, overflow_prob=OVERFLOW_PROB)
  floor = minibatch_min_eigenvalue(1e-300, curvature_batch_size=b, modification=MODIFICATION)
  used = {lam: minibatch_min_eigenvalue(lam, curvature_batch_size=b, modification=MODIFICATION)
          for lam in lambdas}
  distinct = sorted(set(used.values()))
  sens = [direction_sensitivity(lam, n=b, modification=MODIFICATION) for lam in distinct]
  k = len(epsilons) * len(distinct)
  step = functools.partial(dp_newton_minibatch_step, grad_sampler=sampler,
                           curvature_sampler=sampler, batch_size=b, curvature_batch_size=b,
                           curvature=CURVATURE, modification=MODIFICATION)
  compiled, t_compile = _compiled(step, 4, ctx["keys"], x, y, k)
  # Both caps' overflow and the exact sampler's TV slack (2d coordinates a step), as charged.
  truncation = min(1.0, 2 * float(sampler.overflow_prob)
                   + 2 * x.shape[1] * noise.tv_per_coordinate())
  out = {}
  for p in passes:
    steps = _steps(p * n / (2 * b))
    if steps == 0:
      continue
    zs = [minibatch_noise_multipliers(n=n, batch_size=b, curvature_batch_size=b, epsilon=eps,
                                      delta=delta, steps=steps, overflow_prob=OVERFLOW_PROB)
          for eps in epsilons]
    lam_a = np.array([lam for _ in zs for lam in distinct])
    grad_std = np.array([z_g / b for z_g, _ in zs for _ in distinct])
    dir_sens = np.array([s for _ in zs for s in sens])
    dir_mult = np.array([z_h for _, z_h in zs for _ in sens])
    w, t_run = _run(compiled, ctx["keys"], steps, x, y, [lam_a, grad_std, dir_sens, dir_mult])
    for e, (eps, (z_g, z_h)) in enumerate(zip(epsilons, zs)):
      q = float(sampler.sampling_rate)
      rdp = np.asarray(accounting.subsampled_gaussian_rdp(q, z_g)
                       + accounting.subsampled_gaussian_rdp(q, z_h), np.float64)
      values = []
      for lam in lambdas:
        i = e * len(distinct) + distinct.index(used[lam])
        rec = _value_record("lambda", used[lam], _excess(w[i], *ctx["host"]))
        rec["lambda_requested"] = float(lam)
        values.append(rec)
      out[(eps, p)] = {
          "rate": rate, "batch_size": b, "steps": steps, "passes": steps * 2 * b / n,
          "noise_multiplier": z_g, "clip_floor": floor,
          "epsilon_spent": _spent(rdp, truncation, steps, delta),
          "seconds_compile": t_compile, "seconds_run": t_run, "values": values}
  return out


def run_sgd(x, y, ctx: dict[str, Any], epsilons: Sequence[float], passes: Sequence[float],
            rate: float, learning_rates: Sequence[float]) -> dict[tuple[float, float], dict]:
  """Every learning rate, epsilon and pass budget of one DP-SGD rate (ONE compiled program)."""
  n, delta = ctx["n"], ctx["delta"]
  b = max(1, round(rate * n))
  sampler = sampling.poisson_sampler(n, batch_size=b, overflow_prob=OVERFLOW_PROB)
  k = len(epsilons) * len(learning_rates)
  step = functools.partial(dp_sgd_step, sampler=sampler)  # clip 1, logistic loss.
  compiled, t_compile = _compiled(step, 2, ctx["keys"], x, y, k)
  out = {}
  for p in passes:
    steps = _steps(p * n / b)
    if steps == 0:
      continue
    # The transform's own calibration (the same code dp_sgd(epsilon=...) runs).
    zs = [dp_sgd_noise_multiplier(epsilon=eps, delta=delta, steps=steps, sampler=sampler)
          for eps in epsilons]
    lrs = np.array([lr for _ in zs for lr in learning_rates])
    sum_std = np.array([z for z in zs for _ in learning_rates])  # z C with C = 1.
    w, t_run = _run(compiled, ctx["keys"], steps, x, y, [lrs, sum_std])
    for e, (eps, z) in enumerate(zip(epsilons, zs)):
      rdp = np.asarray(accounting.subsampled_gaussian_rdp(float(sampler.sampling_rate), z),
                       np.float64)
      out[(eps, p)] = {
          "rate": rate, "batch_size": b, "steps": steps, "passes": steps * b / n,
          "noise_multiplier": z,
          "epsilon_spent": _spent(rdp, float(sampler.overflow_prob)
                                  + x.shape[1] * noise.tv_per_coordinate(), steps, delta),
          "seconds_compile": t_compile, "seconds_run": t_run,
          "values": [_value_record("learning_rate", lr,
                                   _excess(w[e * len(learning_rates) + j], *ctx["host"]))
                     for j, lr in enumerate(learning_rates)]}
  return out


def _value_record(name: str, value: float, excess: np.ndarray) -> dict[str, Any]:
  k = excess.size
  return {name: float(value), "excess_loss_mean": float(np.mean(excess)),
          "excess_loss_se": float(np.std(excess, ddof=1) / math.sqrt(k)) if k > 1 else 0.0,
          "excess_losses": [float(v) for v in excess]}


def best_of(runs: list[dict[str, Any]], name: str, grid: Sequence[float],
            rates: Sequence[float]) -> dict[str, Any]:
  """The grid point with the smallest mean excess loss (non-private tuning).

  ``on_grid_edge``: the tuned value (lambda or learning rate) is the smallest
  or largest of its grid; for Newton a lambda raised to the clip floor
  ``1/B_H`` is NOT an edge (clip cannot go lower at that B_H) but is flagged
  ``at_clip_floor``. ``rate_on_grid_edge``: the same for the sample rate.
  """
  best, best_run = None, None
  for run in runs:
    for v in run["values"]:
      if best is None or v["excess_loss_mean"] < best["excess_loss_mean"]:
        best, best_run = v, run
  requested = best.get("lambda_requested", best[name])
  at_floor = "clip_floor" in best_run and best[name] == best_run["clip_floor"] and (
      requested < best[name])
  if "clip_floor" in best_run:  # the smallest distinct lambda this rate ran.
    low = min(v[name] for v in best_run["values"])
    edge = best[name] == max(grid) or (best[name] == low and not at_floor)
  else:
    edge = best[name] in (min(grid), max(grid))
  record = {
      "excess_loss_mean": best["excess_loss_mean"], "excess_loss_se": best["excess_loss_se"],
      "passes": best_run["passes"], "steps": best_run["steps"], "rate": best_run["rate"],
      "batch_size": best_run["batch_size"], name: best[name],
      "noise_multiplier": best_run["noise_multiplier"],
      "epsilon_spent": best_run["epsilon_spent"],
      "on_grid_edge": len(grid) > 1 and edge,
      "rate_on_grid_edge": len(rates) > 1 and best_run["rate"] in (min(rates), max(rates)),
  }
  if "clip_floor" in best_run:
    record["at_clip_floor"] = bool(at_floor)
  return record


def run_setting(name: str, ds: data_lib.Dataset, grids: dict[str, Any], epsilons, passes,
                seeds: int, bar) -> dict[str, Any]:
  """Every (epsilon, passes) cell of one dataset."""
  x64, y64 = np.asarray(ds.x, np.float64), np.asarray(ds.y, np.float64)
  n, d = x64.shape
  try:
    _, loss_star = solve.logistic_optimum(x64, y64)
  except ValueError:  # separable: the reference code's ridge (its reg = 1e-9).
    _, loss_star = solve.logistic_optimum(x64, y64, ridge=1e-9)
  ctx = {"n": n, "delta": float(n) ** -2, "host": (x64, y64, float(loss_star)),
         "keys": jax.random.split(jax.random.key(0), seeds)}
  x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
  newton, sgd = [], []
  for rate in grids["newton_rates"]:
    bar.update(f"{name} newton q={rate:g}")
    newton.append(run_newton(x, y, ctx, epsilons, passes, rate, grids["lambdas"]))
  for rate in grids["sgd_rates"]:
    bar.update(f"{name} dp-sgd q={rate:g}")
    sgd.append(run_sgd(x, y, ctx, epsilons, passes, rate, grids["learning_rates"]))
  cells = []
  for eps in epsilons:
    for p in passes:
      # Only the rates that fit the budget P (MAX_PASS_OVERSHOOT) ran for this cell.
      newton_runs = [r[(eps, p)] for r in newton if (eps, p) in r]
      sgd_runs = [r[(eps, p)] for r in sgd if (eps, p) in r]
      cells.append({
          "epsilon": eps, "passes": p,
          "methods": {
              "newton": {"best": best_of(newton_runs, "lambda", grids["lambdas"],
                                         [r["rate"] for r in newton_runs]),
                         "runs": newton_runs},
              "dp-sgd": {"best": best_of(sgd_runs, "learning_rate", grids["learning_rates"],
                                         [r["rate"] for r in sgd_runs]),
                         "runs": sgd_runs},
          }})
  return {"dataset": name, "n": n, "d": d, "delta": ctx["delta"], "loss_star": float(loss_star),
          "excess_loss_at_zero": float(_excess(np.zeros((1, d)), *ctx["host"])[0]),
          "cells": cells}


# ----------------------------------------------------------------------------
# Reporting.
# ----------------------------------------------------------------------------


def _mark(best: dict[str, Any], key: str) -> str:
  """``*``: a value on the edge of its grid; ``f``: lambda raised to the clip floor 1/B_H."""
  if key == "rate":
    return "*" if best["rate_on_grid_edge"] else ""
  return ("*" if best["on_grid_edge"] else "") + ("f" if best.get("at_clip_floor") else "")


def edges(payload: dict[str, Any]) -> list[str]:
  """One line per tuned value still on the edge of its grid (``*`` in the tables)."""
  out = []
  for s in payload["settings"]:
    for c in s["cells"]:
      for method, name in (("newton", "lambda"), ("dp-sgd", "learning_rate")):
        b = c["methods"][method]["best"]
        where = f"{s['dataset']} eps={c['epsilon']:g} P={c['passes']:g} {method}"
        if b["on_grid_edge"]:
          out.append(f"{where}: {name} = {b[name]:g}")
        if b["rate_on_grid_edge"]:
          out.append(f"{where}: sample rate q = {b['rate']:g} (B = {b['batch_size']})")
  return out


def to_markdown(payload: dict[str, Any]) -> str:
  lines = _harness.markdown_header(
      "Minibatch double-noise Newton vs DP-SGD at equal epsilon (Fig. 4 analogue)",
      payload["machine"])
  g = payload["grids"]
  lines += [
      "",
      f"Excess loss `loss(w_T) - loss*` of the final iterate, mean +- s.e. over "
      f"{payload['seeds']} seeds, delta = n^-2, from w_0 = 0. Passes = steps x expected "
      "examples per step / n (Newton draws two samples per step; both count). Newton: "
      f"{payload['newton_variant']}, B_g = B_H = q n with q in {g['newton_rates']}, lambda in "
      f"{g['lambdas']} (clip raises lambda to its floor 1/B_H; requested values below the floor "
      "are run once, at the floor), z_g = z_H calibrated. DP-SGD: B = q n with q in "
      f"{g['sgd_rates']}, clip 1, learning rate in {g['learning_rates']}. Steps T = "
      f"round(P n / examples per step), or its floor if rounding up would overshoot P by more "
      f"than {MAX_PASS_OVERSHOOT:g}x; a rate with floor 0 is not run for that P (Newton "
      "q = 0.75 at P = 1, so there q = 0.5, one step of two half samples, is the largest "
      "rate: a structural edge; the edge mark refers to the rates that ran). Both "
      "accounted with "
      "the same Poisson-subsampled Gaussian RDP accountant. One compiled program per (dataset, "
      "method, sample rate) runs every lambda or learning rate, epsilon, pass budget and seed "
      "(hyper-parameters and noise scales traced; the steps are the library's "
      "`dp_newton_minibatch_step` and `dp_sgd_step`, the bodies of the updates of "
      "`dp_newton_minibatch` and `dp_sgd`).",
      "",
      f"**Tuning is {payload['tuning']}.** `*` marks a best value on the edge of its grid "
      "(after B: the sample rate; after lambda or lr: that value); `f` marks a lambda at the "
      "clip floor 1/B_H (the smallest lambda Hess-clip allows at that B_H, so not a grid edge).",
      "",
  ]
  wins = {"newton": 0, "dp-sgd": 0}
  clear = {"newton": 0, "dp-sgd": 0}
  for s in payload["settings"]:
    lines += [f"## {s['dataset']} (n = {s['n']}, d = {s['d']}; excess loss of w = 0: "
              f"{s['excess_loss_at_zero']:.4g})", "",
              "| eps | passes | Newton excess | B_H, lambda | DP-SGD excess | B, lr | SGD / Newton |",
              "|---:|---:|---:|---|---:|---|---:|"]
    for c in s["cells"]:
      nb, sb = c["methods"]["newton"]["best"], c["methods"]["dp-sgd"]["best"]
      ratio = sb["excess_loss_mean"] / nb["excess_loss_mean"] if nb["excess_loss_mean"] > 0 else math.inf
      winner = "newton" if nb["excess_loss_mean"] < sb["excess_loss_mean"] else "dp-sgd"
      wins[winner] += 1
      gap = abs(nb["excess_loss_mean"] - sb["excess_loss_mean"])
      if gap > 2 * math.hypot(nb["excess_loss_se"], sb["excess_loss_se"]):
        clear[winner] += 1
      lines.append(
          f"| {c['epsilon']:g} | {c['passes']:g} | {nb['excess_loss_mean']:.3e} +- "
          f"{nb['excess_loss_se']:.1e} | {nb['batch_size']}{_mark(nb, 'rate')}, "
          f"{nb['lambda']:.3g}{_mark(nb, 'lambda')} | {sb['excess_loss_mean']:.3e} +- "
          f"{sb['excess_loss_se']:.1e} | {sb['batch_size']}{_mark(sb, 'rate')}, "
          f"{sb['learning_rate']:g}{_mark(sb, 'learning_rate')} | {ratio:.2f} |")
    lines.append("")
  total = sum(wins.values())
  lines += [
      "## Verdict", "",
      f"DP-SGD reaches the lower tuned excess loss in {wins['dp-sgd']} of {total} cells "
      f"({clear['dp-sgd']} by more than 2 combined s.e.), minibatch Hess-clip Newton in "
      f"{wins['newton']} ({clear['newton']} by more than 2 s.e.). A ratio below 1 means DP-SGD "
      "is better.", ""]
  left = edges(payload)
  lines += ["Values still on a grid edge" + (": none." if not left else ":"), ""]
  lines += [f"- {e}" for e in left] + ([""] if left else [])
  if left:
    lines += ["A value on an edge means that method might do better past the grid, so its "
              "number above is an upper bound on its tuned excess loss; the Newton sample rate "
              "0.5 at P = 1 is structural (one step of two half samples is the whole budget).", ""]
  eps_spent = [r["epsilon_spent"] / c["epsilon"] - 1 for s in payload["settings"]
               for c in s["cells"] for m in c["methods"].values() for r in m["runs"]]
  lines += [f"Accountant check: every run's spent epsilon is within "
            f"{max(abs(e) for e in eps_spent):.1e} (relative) of its target.",
            f"Total time {payload['seconds_total']:.0f} s (compile time excluded from the "
            "per-run timings in the JSON; a run's time covers all its configurations and "
            "epsilons)."]
  return "\n".join(lines) + "\n"


def plot(payload: dict[str, Any], path) -> None:
  """Excess loss against passes; one panel per (dataset, epsilon)."""
  panels = [(s, eps) for s in payload["settings"]
            for eps in dict.fromkeys(c["epsilon"] for c in s["cells"])]
  plt, fig, axes = _harness.panels(len(panels), width=4.6, height=3.6)
  for ax, (s, eps) in zip(axes.flat, panels):
    cells = [c for c in s["cells"] if c["epsilon"] == eps]
    for method, style in (("newton", "o-"), ("dp-sgd", "s--")):
      best = [c["methods"][method]["best"] for c in cells]
      ax.errorbar([b["passes"] for b in best], [max(b["excess_loss_mean"], 1e-12) for b in best],
                  yerr=[b["excess_loss_se"] for b in best], fmt=style, capsize=3,
                  label="minibatch Newton (Hess-clip)" if method == "newton" else "DP-SGD")
    ax.axhline(s["excess_loss_at_zero"], color="gray", ls=":", label="w = 0")
    _harness.log_log_panel(ax, f"{s['dataset']}, eps = {eps:g}", "passes over the data",
                           "excess loss (tuned, non-private)")
    ax.legend(fontsize=7)
  _harness.hide_unused(axes, len(panels))
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


# ----------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  _harness.add_common_args(parser)
  parser.add_argument("--datasets", nargs="+", choices=sorted(_harness.DATASETS), default=None,
                      help=f"datasets (default {' '.join(DEFAULT_DATASETS)}; --quick: a "
                      f"{QUICK_SHAPE[0]} x {QUICK_SHAPE[1]} synthetic set)")
  parser.add_argument("--epsilons", nargs="+", type=float, default=None,
                      help=f"epsilon values (default {DEFAULT_EPSILONS})")
  parser.add_argument("--passes", nargs="+", type=float, default=None,
                      help=f"pass budgets P (default {DEFAULT_PASSES})")
  parser.add_argument("--seeds", type=int, default=None,
                      help=f"independent runs per configuration (default {DEFAULT_SEEDS})")
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the benchmark; returns the exit status (2 for a missing data file)."""
  t_start = time.perf_counter()
  parser = build_parser()
  args = parser.parse_args(argv)
  quick = bool(args.quick)
  epsilons = tuple(args.epsilons or (QUICK_EPSILONS if quick else DEFAULT_EPSILONS))
  passes = tuple(args.passes or (QUICK_PASSES if quick else DEFAULT_PASSES))
  seeds = args.seeds or (QUICK_SEEDS if quick else DEFAULT_SEEDS)
  if seeds < 1 or min(epsilons) <= 0 or min(passes) <= 0:
    parser.error("--seeds must be >= 1 and every --epsilons / --passes value > 0.")
  grids = {
      "newton_rates": list(QUICK_NEWTON_RATES if quick else NEWTON_RATES),
      "lambdas": list(QUICK_LAMBDA_GRID if quick else LAMBDA_GRID),
      "sgd_rates": list(QUICK_SGD_RATES if quick else SGD_RATES),
      "learning_rates": list(QUICK_LEARNING_RATE_GRID if quick else LEARNING_RATE_GRID),
  }
  info = _harness.machine_info()
  loaded = {}
  if quick and args.datasets is None:
    loaded["synthetic"] = data_lib.synthetic(0, n=QUICK_SHAPE[0], d=QUICK_SHAPE[1])
  else:
    try:
      for name in args.datasets or DEFAULT_DATASETS:
        print(f"loading {name} ...", file=sys.stderr, flush=True)
        loaded[name] = _harness.load_dataset(name, args.data_dir)
    except _harness.MissingDataError as err:
      print(f"error: {err}", file=sys.stderr)
      return 2
  directory = _harness.out_dir(args)
  total = len(loaded) * (len(grids["newton_rates"]) + len(grids["sgd_rates"]))
  bar = _harness.ProgressBar(total, "minibatch")
  settings = [run_setting(name, ds, grids, epsilons, passes, seeds, bar)
              for name, ds in loaded.items()]
  bar.close()
  info["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
  payload = {
      "machine": info, "quick": quick, "seeds": seeds, "grids": grids,
      "newton_variant": f"{CURVATURE}-{MODIFICATION}", "tuning": TUNING,
      "seconds_total": time.perf_counter() - t_start, "settings": settings,
  }
  json_path, md_path = _harness.write_results(directory, "minibatch", payload,
                                              to_markdown(payload))
  png = directory / "minibatch.png"
  plot(payload, png)
  print(f"wrote {json_path}, {md_path} and {png}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
