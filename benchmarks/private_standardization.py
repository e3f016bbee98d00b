"""What private standardization buys: per-row scaling vs DP standardization vs the paper's.

On a1a.t (n = 30,956) and a9a (n = 32,561), both LIBSVM sets of UCI Adult with
123 binary features, each split once at random with a fixed public seed (0)
into 80% train and 20% test, three preprocessings of the raw features:

* **per-row** (the private default of ``dpjax.data.load_libsvm``):
  ``dpjax.data.scale_rows``, ``[1, x_i / max(1, ||x_i||)] / sqrt(2)``; costs no
  privacy.
* **private standardization**: ``dpjax.fit(..., standardize=
  PrivateStandardizer(bounds=(0, 1), budget_share=0.1))``: a DP mean and
  standard deviation per column (public bounds: the features are binary by
  the data set's documented format), 10% of the run's rho, then the same
  per-row map; the optimizer gets the other 90%. The test rows are
  transformed with the released statistics (post-processing).
* **paper standardization (NOT PRIVATE)**: the paper's pipeline with the
  training split's own column means and standard deviations (constant
  columns to 0), unit rows, ``[1, u] / sqrt(2)``; the test rows use the
  training statistics. It reads the private data without noise, so no
  guarantee covers it: a reference, not an option.

Each is fitted with ``dpjax.fit`` at eps in {0.1, 1, 10}, delta = 1/n^2 (n
of the training split), exact Gaussian accounting: DP-GD with T = 100 and its
default step 4 (= 1/L1), and precond-gd with m = 40 and its default
last-half average (the step counts of the ``dpjax demo``, fixed in advance:
nothing is tuned on any result). Per-row and paper: one call with
``repeats`` vmapped repeats. Private standardization: ``draws`` calls of one
repeat each, so each run has its own release and the spread includes the
standardization's noise. Reported: test accuracy and test logistic loss
(float64, mean +- standard error over runs), the training loss of the
output, and the compiled run's seconds (``FitResult.seconds_run``: compile
time excluded; run as a script, a persistent XLA cache in a temporary folder
makes the repeated compilations cheap, which changes no result; called
in-process, as the tests do, it leaves JAX's cache alone, since JAX keeps
its cache folder for the life of the process). The excess loss over
each pipeline's own optimum is not comparable across pipelines (different
features) and is not computed: ``dpjax.problem.solve.optimum_loss`` is replaced by
a stub returning 0 for this script only, so ``excess_losses`` are the
training losses.

  python benchmarks/private_standardization.py [--data-dir ../shared/data] [--quick [--smoke]]

Writes ``benchmarks/results/private_standardization.{json,md}`` (``--quick``:
a1a.t, eps = 1, DP-GD, 2 runs each, into ``results/quick/``). ``--quick
--smoke`` (the test suite's run; compilation is most of its time, and the
LIBSVM parse the rest): :func:`smoke_dataset` in place of a1a.t, binary
features generated from a public seed (no file needed), and one run per
cell; the same three preprocessings, fits and outputs, with ``smoke`` in
the JSON.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top  (puts the repository on sys.path)

import jax  # noqa: E402

import dpjax  # noqa: E402
from dpjax import data as data_lib  # noqa: E402
from dpjax.mechanisms import standardize  # noqa: E402
from dpjax.problem import solve  # noqa: E402

STEM = "private_standardization"
DATASETS = ("a1a.t", "a9a")
EPSILONS = (0.1, 1.0, 10.0)
ALGORITHMS = {"dp-gd": {"steps": 100}, "precond-gd": {"steps": 40}}
BOUNDS = (0.0, 1.0)  # binary features: public, from the format of the data set
BUDGET_SHARE = 0.1
SPLIT_SEED = 0
VARIANTS = ("per-row", "private-standardization", "paper")
LABELS = {
    "per-row": "per-row scaling (private default)",
    "private-standardization": f"private standardization (share {BUDGET_SHARE:g}, bounds [0, 1])",
    "paper": "paper standardization (NOT PRIVATE)",
}
PRIVATE = {"per-row": True, "private-standardization": True, "paper": False}
QUICK = {"datasets": ("a1a.t",), "epsilons": (1.0,), "algorithms": ("dp-gd",), "runs": 2}
# --quick --smoke: QUICK's cells, one run each, on smoke_dataset() (name, n, d).
SMOKE_DATASET = ("synthetic-binary", 2_000, 20)
SMOKE_RUNS = 1


def smoke_dataset(n: int = SMOKE_DATASET[1], d: int = SMOKE_DATASET[2]) -> data_lib.Dataset:
  """Generated data in the benchmark's format: binary features (so the public bounds [0, 1]
  hold by construction), labels from a logistic model of them.

  The signs of :func:`dpjax.data.synthetic`'s rows (seed 0), ``x_ij = 1[z_ij > 0]``, with its
  labels (drawn from ``sigmoid(<z_i, 1>)``, which the binary features predict, weakly).
  """
  ds = data_lib.synthetic(0, n=n, d=d)
  return data_lib.Dataset((np.asarray(ds.x) > 0).astype(np.float32), np.asarray(ds.y))


def split(n: int, seed: int = SPLIT_SEED, test_fraction: float = 0.2):
  """``(train_idx, test_idx)``: a public random 80/20 split."""
  perm = np.random.default_rng(seed).permutation(n)
  n_test = int(round(test_fraction * n))
  return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def paper_transform(x_train: np.ndarray, x: np.ndarray) -> np.ndarray:
  """The paper's pipeline with ``x_train``'s column statistics applied to ``x`` (NOT PRIVATE)."""
  x_train = np.asarray(x_train, np.float64)
  mean, std = x_train.mean(axis=0), x_train.std(axis=0)
  constant = x_train.max(axis=0) == x_train.min(axis=0)
  z = (np.asarray(x, np.float64) - mean) / np.where(constant, 1.0, std)
  z[:, constant] = 0.0
  norms = np.linalg.norm(z, axis=1)
  z[norms > 0] /= norms[norms > 0, None]
  return data_lib.scale_rows(z, dtype=np.float32)  # [1, u] / sqrt(2), ||u|| <= 1


def metrics(params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Per run: (mean logistic loss, accuracy) of ``params [runs, d]`` on ``(x, y)``, float64."""
  margins = np.asarray(x, np.float64) @ np.asarray(params, np.float64).T * np.asarray(
      y, np.float64)[:, None]
  return np.logaddexp(0.0, -margins).mean(axis=0), (margins > 0).mean(axis=0)


def mean_se(values) -> tuple[float, float]:
  v = np.asarray(values, np.float64)
  return float(v.mean()), (float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0)


def _cell(variant: str, runs: list[dict], extra: dict) -> dict[str, Any]:
  out = {"variant": variant, "label": LABELS[variant], "private": PRIVATE[variant], **extra}
  for key in ("test_accuracy", "test_loss", "train_loss"):
    values = [r[key] for r in runs]
    out[key] = values
    out[f"{key}_mean"], out[f"{key}_se"] = mean_se(values)
  out["seconds_run"] = float(np.median([r["seconds_run"] for r in runs]))
  return out


def run_dataset(name: str, args: argparse.Namespace, epsilons, algorithms, runs: int,
                bar, raw: data_lib.Dataset | None = None) -> dict[str, Any]:
  """Every cell of one data set: ``raw`` (features unscaled), or dataset ``name``'s raw file."""
  if raw is None:
    raw = _harness.load_dataset(name, args.data_dir, preprocess="none")
  train, test = split(raw.n)
  x_tr, y_tr = np.asarray(raw.x)[train], np.asarray(raw.y)[train]
  x_te, y_te = np.asarray(raw.x)[test], np.asarray(raw.y)[test]
  inputs = {
      "per-row": (data_lib.Dataset(data_lib.scale_rows(x_tr), y_tr), data_lib.scale_rows(x_te)),
      "paper": (data_lib.Dataset(paper_transform(x_tr, x_tr), y_tr), paper_transform(x_tr, x_te)),
  }
  std = standardize.PrivateStandardizer(bounds=BOUNDS, budget_share=BUDGET_SHARE)
  t0 = time.perf_counter()
  std.release(0, x_tr, rho=1.0)
  release_seconds = time.perf_counter() - t0
  cells = []
  for algorithm in algorithms:
    steps = ALGORITHMS[algorithm]["steps"]
    for eps in epsilons:
      for variant in VARIANTS:
        bar.update(f"{name} {algorithm} eps={eps:g} {variant}")
        if variant == "private-standardization":
          results = [dpjax.fit((x_tr, y_tr), algorithm, epsilon=eps, steps=steps, repeats=1,
                               seed=1000 + k, standardize=std, timing_runs=2)
                     for k in range(runs)]
          rows = []
          for res in results:
            x_test = res.standardization.transform(x_te)
            (loss,), (acc,) = metrics(res.params, x_test, y_te)
            rows.append({"test_loss": loss, "test_accuracy": acc,
                         "train_loss": float(res.excess_losses[0]),
                         "seconds_run": res.seconds_run})
          extra = {"rho_total": results[0].rho, "rho_standardization": results[0].standardization.rho,
                   "rho_spent": float(results[0].rho_spent[0])}
        else:
          ds, x_test = inputs[variant]
          res = dpjax.fit(ds, algorithm, epsilon=eps, steps=steps, repeats=runs, seed=0,
                          timing_runs=2)
          loss, acc = metrics(res.params, x_test, y_te)
          rows = [{"test_loss": float(loss[r]), "test_accuracy": float(acc[r]),
                   "train_loss": float(res.excess_losses[r]), "seconds_run": res.seconds_run}
                  for r in range(runs)]
          extra = {"rho_total": res.rho, "rho_standardization": 0.0,
                   "rho_spent": float(res.rho_spent[0])}
          results = [res]
        cells.append(_cell(variant, rows, {"algorithm": algorithm, "steps": steps,
                                           "epsilon": eps, "delta": results[0].delta, **extra}))
  majority = float(max(np.mean(y_te > 0), np.mean(y_te < 0)))
  return {"dataset": name, "n": int(raw.n), "n_train": int(train.size), "n_test": int(test.size),
          "features": int(raw.d), "majority_test_accuracy": majority,
          "release_seconds": release_seconds, "cells": cells}


def markdown(payload: dict[str, Any]) -> str:
  lines = _harness.markdown_header(
      "Private standardization vs per-row scaling vs the paper's standardization",
      payload["machine"])
  lines += [
      "",
      f"Public 80/20 split (seed {SPLIT_SEED}); delta = 1/n_train^2, Gaussian accounting; "
      f"{payload['runs']} runs per cell (per-row and paper: vmapped repeats of one fit; private "
      "standardization: separate fits, each with its own release). Test accuracy and test "
      "logistic loss, mean ± s.e. Step counts fixed in advance (DP-GD T = 100, precond-gd m = 40 "
      "with the last half averaged), nothing tuned. Private standardization: bounds [0, 1] "
      f"(binary features), budget share {BUDGET_SHARE:g} of the total rho (mean and variance "
      "halves), the optimizer gets the rest; its rows are then scaled like per-row. "
      "**The paper standardization is NOT private** (it standardizes with the training data's "
      "own column statistics): it is shown as the reference the paper used.",
      "",
  ]
  for ds in payload["datasets"]:
    lines += [f"## {ds['dataset']} (n = {ds['n']}: {ds['n_train']} train, {ds['n_test']} test; "
              f"{ds['features']} features + intercept; majority-class test accuracy "
              f"{ds['majority_test_accuracy']:.4f}; one release on the training split "
              f"{ds['release_seconds']:.2f} s)", "",
              "| algorithm | eps | preprocessing | private | test accuracy | test loss | "
              "train loss | rho total (standardization) | run s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in ds["cells"]:
      lines.append(
          f"| {c['algorithm']} | {c['epsilon']:g} | {c['label']} | "
          f"{'yes' if c['private'] else '**no**'} | "
          f"{c['test_accuracy_mean']:.4f} ± {c['test_accuracy_se']:.4f} | "
          f"{c['test_loss_mean']:.4f} ± {c['test_loss_se']:.4f} | "
          f"{c['train_loss_mean']:.4f} ± {c['train_loss_se']:.4f} | "
          f"{c['rho_total']:.4g} ({c['rho_standardization']:.3g}) | {c['seconds_run']:.3f} |")
    lines.append("")
  lines.append(f"Total wall time {payload['seconds_total']:.0f} s.")
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  _harness.add_common_args(parser)
  parser.add_argument("--runs", type=int, default=5, help="runs per cell (default 5)")
  parser.add_argument("--smoke", action="store_true",
                      help=f"with --quick (the test suite's run): generated binary data "
                      f"({SMOKE_DATASET[1]:,} x {SMOKE_DATASET[2]}, no file needed) in place of "
                      f"a1a.t and {SMOKE_RUNS} run per cell; every output is still written")
  args = _harness.parse_args(parser, argv)
  datasets = ((SMOKE_DATASET[0],) if args.smoke else QUICK["datasets"]) if args.quick else DATASETS
  epsilons = QUICK["epsilons"] if args.quick else EPSILONS
  algorithms = QUICK["algorithms"] if args.quick else tuple(ALGORITHMS)
  runs = (SMOKE_RUNS if args.smoke else QUICK["runs"]) if args.quick else args.runs
  generated = {SMOKE_DATASET[0]: smoke_dataset()} if args.smoke else {}
  if not _harness.data_files_present([d for d in datasets if d not in generated], args.data_dir):
    return 2
  info = _harness.machine_info()
  t_start = time.perf_counter()
  real_optimum = solve.optimum_loss
  solve.optimum_loss = lambda x, y: (0.0, 0.0)  # see the module docstring
  bar = _harness.ProgressBar(len(datasets) * len(epsilons) * len(algorithms) * len(VARIANTS),
                             "private standardization")
  try:
    results = [run_dataset(name, args, epsilons, algorithms, runs, bar, generated.get(name))
               for name in datasets]
  finally:
    bar.close()
    solve.optimum_loss = real_optimum
  payload = {"machine": info, "quick": bool(args.quick), "smoke": bool(args.smoke), "runs": runs,
             "bounds": list(BOUNDS),
             "budget_share": BUDGET_SHARE, "split_seed": SPLIT_SEED,
             "algorithms": {a: ALGORITHMS[a] for a in algorithms}, "epsilons": list(epsilons),
             "datasets": results, "seconds_total": time.perf_counter() - t_start}
  json_path, md_path = _harness.write_results(_harness.out_dir(args), STEM, payload,
                                              markdown(payload))
  print(md_path.read_text())
  print(f"wrote {json_path} and {md_path}")
  return 0


def _with_persistent_cache() -> int:
  """Runs ``main`` with a persistent XLA cache in a temporary folder (script use only).

  JAX fixes its persistent cache folder the first time it compiles with one
  and keeps writing there for the rest of the process, so the folder must
  outlive every later compilation: that holds for a script, whose process
  ends after ``main``, and not for an in-process call.
  """
  with tempfile.TemporaryDirectory(prefix="dpjax-xla-cache-") as cache:
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return main()


if __name__ == "__main__":
  sys.exit(_with_persistent_cache())
