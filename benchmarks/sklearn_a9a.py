"""DPLogisticRegression (dpjax.sklearn) against scikit-learn's LogisticRegression on a9a.

a9a (LIBSVM; UCI Adult, n = 32,561, 123 binary features) is split once, at
random with a fixed public seed (0), into 80% train and 20% test. On the train
part:

* ``DPLogisticRegression(epsilon=eps, data_norm=sqrt(14), classes=[-1, 1],
  random_state=s)`` with its defaults (``algorithm="auto"``, delta = 1/n^2,
  exact Gaussian accounting, intercept) at eps in {0.1, 1, 10} and seeds
  0..4. Nothing is tuned: no algorithm, step count or option is chosen by
  looking at any result, and the test split is only scored. The seeds are
  fixed so that the table reproduces; a private release would leave
  ``random_state=None`` (fresh OS entropy).
* Non-private ``sklearn.linear_model.LogisticRegression`` (lbfgs) with
  ``C=1e4`` (almost unregularised: the objective DP fits) and the default
  ``C=1.0``, for reference.

``data_norm = sqrt(14)`` is public: a9a's documented format encodes each of the
14 attributes of Adult (6 continuous ones quantised into bins, 8 categorical)
one-hot, so a row has at most 14 ones and norm at most sqrt(14) (the rows have
11 to 14 ones: missing values leave a group empty). No row is clipped, and the
bound is not read from the data. ``classes = [-1, 1]`` is public too: a9a is a
binary LIBSVM file with labels -1 and +1.

Reports test accuracy (mean +- standard error over seeds), the gap to the
non-private C=1e4 model in percentage points, and fit times (the first fit at
each eps includes the XLA compilation; later fits reuse it).

  python benchmarks/sklearn_a9a.py [--data-dir ../shared/data] [--seeds 5] [--quick]

Writes ``benchmarks/results/sklearn_a9a.{json,md}`` (``--quick``: 2 seeds at
eps = 1 only, into ``results/quick/``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top  (puts the repository on sys.path)

from sklearn import __version__ as sklearn_version  # noqa: E402
from sklearn.datasets import load_svmlight_file  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from dpjax.sklearn import DPLogisticRegression  # noqa: E402

STEM = "sklearn_a9a"
DATA_NORM = math.sqrt(14.0)  # 14 one-hot attribute groups (see the module docstring).
CLASSES = (-1.0, 1.0)  # the labels of the binary LIBSVM format, public.
EPSILONS = (0.1, 1.0, 10.0)
NONPRIVATE_C = (1e4, 1.0)
SPLIT_SEED = 0


def split(n: int, seed: int = SPLIT_SEED, test_fraction: float = 0.2):
  """``(train_idx, test_idx)``: a public random 80/20 split."""
  perm = np.random.default_rng(seed).permutation(n)
  n_test = int(round(test_fraction * n))
  return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def mean_se(values) -> tuple[float, float]:
  v = np.asarray(values, np.float64)
  return float(v.mean()), (float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0)


def run(args: argparse.Namespace) -> dict[str, Any]:
  path = args.data_dir / "a9a.bz2"
  if not path.exists():
    raise _harness.MissingDataError(
        f"a9a.bz2 is not in {args.data_dir}; pass --data-dir DIR with the LIBSVM files.")
  x_sparse, y = load_svmlight_file(str(path), n_features=123)
  x = x_sparse.toarray()
  ones = x.sum(axis=1)
  train, test = split(len(y))
  x_tr, y_tr, x_te, y_te = x[train], y[train], x[test], y[test]
  epsilons = (1.0,) if args.quick else EPSILONS
  seeds = list(range(2 if args.quick else args.seeds))

  nonprivate = []
  for c in NONPRIVATE_C:
    t0 = time.perf_counter()
    ref = LogisticRegression(C=c, max_iter=10_000).fit(x_tr, y_tr)
    nonprivate.append({"C": c, "test_accuracy": float(ref.score(x_te, y_te)),
                       "train_accuracy": float(ref.score(x_tr, y_tr)),
                       "fit_seconds": time.perf_counter() - t0, "n_iter": int(ref.n_iter_[0])})
  baseline = nonprivate[0]["test_accuracy"]

  rows = []
  bar = _harness.ProgressBar(len(epsilons) * len(seeds), "sklearn a9a")
  for eps in epsilons:
    accs, times, fitted = [], [], None
    for s in seeds:
      bar.update(f"eps={eps:g} seed={s}")
      t0 = time.perf_counter()
      fitted = DPLogisticRegression(epsilon=eps, data_norm=DATA_NORM, classes=CLASSES,
                                    random_state=s).fit(x_tr, y_tr)
      times.append(time.perf_counter() - t0)
      accs.append(float(fitted.score(x_te, y_te)))
    acc, se = mean_se(accs)
    rows.append({
        "epsilon": eps, "delta": fitted.delta_, "epsilon_spent": fitted.epsilon_,
        "rho_spent": fitted.rho_, "algorithm": fitted.algorithm_, "steps": fitted.steps_,
        "auto_reason": fitted.auto_reason_, "seeds": seeds, "test_accuracy": accs,
        "test_accuracy_mean": acc, "test_accuracy_se": se,
        "gap_points": 100.0 * (baseline - acc), "fit_seconds": times,
        "fit_seconds_first": times[0],
        "fit_seconds_median_later": float(np.median(times[1:])) if len(times) > 1 else None,
    })
  bar.close()
  info = _harness.machine_info()
  info["sklearn"] = sklearn_version
  return {
      "info": info,
      "dataset": {"name": "a9a", "file": str(path), "n": int(len(y)), "d": int(x.shape[1]),
                  "n_train": int(len(train)), "n_test": int(len(test)),
                  "split_seed": SPLIT_SEED, "ones_per_row_min": int(ones.min()),
                  "ones_per_row_max": int(ones.max())},
      "data_norm": DATA_NORM,
      "nonprivate": nonprivate,
      "private": rows,
      "quick": bool(args.quick),
  }


def markdown(payload: dict[str, Any]) -> str:
  info, ds = payload["info"], payload["dataset"]
  lines = _harness.markdown_header("DPLogisticRegression on a9a (dpjax.sklearn)", info)
  lines[4:4] = [f"- scikit-learn {info['sklearn']}"]
  lines += [
      "",
      f"a9a: n = {ds['n']}, d = {ds['d']}; public random split (seed {ds['split_seed']}): "
      f"{ds['n_train']} train / {ds['n_test']} test. `data_norm = sqrt(14)` (public: 14 "
      f"one-hot attribute groups; rows have {ds['ones_per_row_min']}-{ds['ones_per_row_max']} "
      "ones, so nothing is clipped). DP: `DPLogisticRegression(epsilon, data_norm, "
      "classes=[-1, 1], random_state=seed)` with every other parameter at its default (`algorithm='auto'`, "
      "delta = 1/n_train^2, Gaussian accounting, intercept); nothing tuned. Gap: non-private "
      "C=1e4 test accuracy minus DP test accuracy, in points.",
      "",
      "| model | epsilon | algorithm (steps) | test accuracy | gap (points) | fit time |",
      "|---|---|---|---|---|---|",
  ]
  for ref in payload["nonprivate"]:
    lines.append(f"| LogisticRegression(C={ref['C']:g}), non-private | - | lbfgs "
                 f"({ref['n_iter']} iterations) | {100 * ref['test_accuracy']:.2f}% | "
                 f"{100 * (payload['nonprivate'][0]['test_accuracy'] - ref['test_accuracy']):+.2f}"
                 f" | {ref['fit_seconds']:.2f} s |")
  for r in payload["private"]:
    later = r["fit_seconds_median_later"]
    timing = (f"{r['fit_seconds_first']:.1f} s first (compiles), {later:.1f} s median after"
              if later is not None else f"{r['fit_seconds_first']:.1f} s (compiles)")
    lines.append(
        f"| DPLogisticRegression, {len(r['seeds'])} seeds | {r['epsilon']:g} | "
        f"{r['algorithm']} ({r['steps']}) | {100 * r['test_accuracy_mean']:.2f}% ± "
        f"{100 * r['test_accuracy_se']:.2f} | {r['gap_points']:+.2f} | {timing} |")
  lines += ["", "± is the standard error over seeds (the DP noise; the split is fixed)."]
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  _harness.add_common_args(parser)
  parser.add_argument("--seeds", type=int, default=5, help="DP seeds per epsilon (default 5)")
  args = parser.parse_args(argv)
  try:
    payload = run(args)
  except _harness.MissingDataError as err:
    print(f"error: {err}", file=sys.stderr)
    return 2
  md = markdown(payload)
  json_path, md_path = _harness.write_results(_harness.out_dir(args), STEM, payload, md)
  print(md)
  print(f"wrote {json_path} and {md_path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
