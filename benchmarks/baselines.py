"""The paper's Fig. 2 / Fig. 3 baselines on a1a.t: excess loss at eps in {0.1, 1, 10}.

Runs every baseline of :mod:`dpjax.baselines` (``aop``, ``damped-newton``,
``damped-newton-private``, ``dp-gd-oracle``) and, for reference, DP-GD
(``dpjax.fit(data, "dp-gd", ...)``) on LIBSVM a1a.t (n = 30,956, d = 124 with
the paper preprocessing of ``dpjax.data.load_libsvm``: standardise, unit rows,
intercept, rows of norm <= 1) at each epsilon of ``--epsilons``, delta = n^-2,
with ``--seeds`` independent seeds, and reports the median excess loss
``loss(w) - loss_star`` and its interquartile range (``loss_star``: the exact
float64 optimum, :func:`dpjax.training.optimum_loss`). Excess losses are
evaluated on the host in float64.

Run lengths follow the authors' reference script (``run_privacy_utility``): damped Newton
T = 15, DP-GD T = 100; DP-GD-Oracle T = 50 (each of its steps runs a line
search of up to ~360 loss evaluations). AOP is not iterative. The iterative
methods use ``accounting="gaussian"`` (exact for these Gaussian mechanisms);
AOP is (epsilon, delta)-DP directly. ``damped-newton`` and ``dp-gd-oracle``
are NOT private (their step sizes read the true loss / noise-free Newton
step); the tables say so.

Usage::

  python benchmarks/baselines.py [--seeds 5] [--epsilons 0.1 1 10]
      [--data-dir ../shared/data] [--out-dir benchmarks/results] [--quick [--smoke]]

``--quick``: generated data (2,000 x 10), epsilon 1 only, 2 seeds, short
runs; a smoke test of the whole pipeline (CI). ``--quick --smoke`` (the test
suite's run; each method's compilation is nearly all of its time): the same,
for :data:`SMOKE_METHODS` only (AOP, the non-private damped Newton and DP-GD:
one method of each kind the script runs, a non-iterative baseline, an
iterative baseline and a method of the paper; the other two baselines are of
the second kind); ``smoke`` in the JSON says so. Every method runs through
:func:`dpjax.fit` with ``seed=0``. A missing data file exits with status 2 and
a message naming ``--data-dir``.

Outputs (``_harness.out_dir``): ``baselines.json`` and ``baselines.md``.

JSON schema (besides ``schema`` from the harness)::

  machine: dict                 # _harness.machine_info()
  quick: bool
  smoke: bool                   # --smoke: SMOKE_METHODS only
  dataset: str; n, d: int; delta: float; loss_star: float; ridge: float
  seeds: int
  epsilons: [float]
  aop_decreasing: bool | None   # AOP's median excess loss decreases with epsilon
                                # (None with a single epsilon)
  seconds_total: float
  rows: list of
    method: str                 # a dpjax.baselines name, or "dp-gd"
    private: bool
    epsilon: float
    rho: float | None           # zCDP budget (None for AOP)
    steps: int | None
    excess_losses: [float]      # one per seed
    median, q25, q75: float     # over seeds
    guard_resets: int           # divergence-guard resets summed over seeds
    seconds: float              # wall time of the call (compile included)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

import dpjax  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import baselines, data, training  # noqa: E402  pylint: disable=g-import-not-at-top

DATASET = "a1a.t"
EPSILONS = (0.1, 1.0, 10.0)
SEEDS = 5
STEPS = {"damped-newton": 15, "damped-newton-private": 15, "dp-gd-oracle": 50, "dp-gd": 100}
QUICK_EPSILONS = (1.0,)
QUICK_SEEDS = 2
QUICK_STEPS = {"damped-newton": 3, "damped-newton-private": 3, "dp-gd-oracle": 5, "dp-gd": 10}
QUICK_SHAPE = (2000, 10)
METHODS = baselines.BASELINES + ("dp-gd",)
# --quick --smoke: one method of each kind (AOP; an iterative baseline, here the non-private
# one; DP-GD).
SMOKE_METHODS = ("aop", "damped-newton", "dp-gd")


def excess_losses(params: np.ndarray, x: Any, y: Any, loss_star: float) -> np.ndarray:
  """Float64 ``mean softplus(-y x w) - loss_star`` for each row of ``params`` [R, d]."""
  a = np.asarray(y, np.float64)[:, None] * np.asarray(x, np.float64)
  margins = a @ np.asarray(params, np.float64).T  # [n, R]
  return np.mean(np.logaddexp(0.0, -margins), axis=0) - loss_star


def run_method(method: str, ds: Any, epsilon: float, delta: float, seeds: int,
               steps: dict, loss_star: float) -> dict[str, Any]:
  """One (method, epsilon) cell over ``seeds`` seeds; returns its JSON row."""
  t0 = time.perf_counter()
  t = None if method == "aop" else steps[method]
  res = dpjax.fit(ds, method, epsilon=epsilon, delta=delta, steps=t, repeats=seeds, seed=0,
                  accounting="gaussian")
  excess = excess_losses(res.params, ds.x, ds.y, loss_star)
  resets = int(np.sum(res.guard_resets))
  q25, med, q75 = (float(v) for v in np.percentile(excess, [25, 50, 75]))
  return {"method": method, "private": bool(res.private), "epsilon": float(epsilon),
          "rho": None if res.rho is None else float(res.rho), "steps": t,
          "excess_losses": [float(v) for v in excess], "median": med, "q25": q25, "q75": q75,
          "guard_resets": resets, "seconds": time.perf_counter() - t0}


def to_markdown(payload: dict[str, Any]) -> str:
  lines = _harness.markdown_header(
      "Fig. 2 / Fig. 3 baselines: excess loss" + (" (quick)" if payload["quick"] else ""),
      payload["machine"]) + [
          f"- data: {payload['dataset']} (n = {payload['n']:,}, d = {payload['d']}), "
          f"δ = n⁻² = {payload['delta']:.3g}, loss* = {payload['loss_star']:.6f}, "
          f"{payload['seeds']} seeds; whole script {payload['seconds_total']:.1f} s",
          "- cell: median excess loss [25th, 75th percentile] over seeds (float64 host "
          "evaluation); T = run length",
          "- **NOT private**: `damped-newton` (step size from the noise-free Newton step) and "
          "`dp-gd-oracle` (line search on the true loss); they add the noise of the nominal "
          "budget. AOP is (ε, δ)-DP; the others ρ-zCDP converted exactly (`gaussian`).",
          f"- AOP's median excess loss decreases with ε: **{payload['aop_decreasing']}**",
          "",
          "| method | private | T | " + " | ".join(f"ε = {e:g}" for e in payload["epsilons"])
          + " |",
          "|---|---|---|" + "---|" * len(payload["epsilons"]),
      ]
  for method in METHODS:
    rows = {r["epsilon"]: r for r in payload["rows"] if r["method"] == method}
    if not rows:
      continue
    any_row = next(iter(rows.values()))
    cells = []
    for e in payload["epsilons"]:
      r = rows.get(float(e))
      cells.append("—" if r is None else
                   f"{r['median']:.3g} [{r['q25']:.3g}, {r['q75']:.3g}]"
                   + (f" ({r['guard_resets']} resets)" if r["guard_resets"] else ""))
    lines.append(f"| {method} | {'yes' if any_row['private'] else '**no**'} | "
                 f"{any_row['steps'] or '—'} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  _harness.add_common_args(parser)
  parser.add_argument("--seeds", type=int, default=None, help=f"seeds per cell (default {SEEDS})")
  parser.add_argument("--epsilons", type=float, nargs="+", default=None,
                      help=f"epsilons (default {' '.join(map(str, EPSILONS))})")
  parser.add_argument("--smoke", action="store_true",
                      help="with --quick (the test suite's run): only "
                      f"{', '.join(SMOKE_METHODS)} (one method of each kind); every output is "
                      "still written")
  args = _harness.parse_args(parser, argv)
  methods = SMOKE_METHODS if args.smoke else METHODS
  t0 = time.perf_counter()
  if args.quick:
    ds = data.synthetic(0, n=QUICK_SHAPE[0], d=QUICK_SHAPE[1])
    name, steps = "synthetic", QUICK_STEPS
    epsilons, seeds = args.epsilons or QUICK_EPSILONS, args.seeds or QUICK_SEEDS
  else:
    if not _harness.data_files_present([DATASET], args.data_dir):
      return 2
    ds = _harness.load_dataset(DATASET, args.data_dir)
    name, steps = DATASET, STEPS
    epsilons, seeds = args.epsilons or EPSILONS, args.seeds or SEEDS
  info = _harness.machine_info()
  n, d = (int(s) for s in ds.x.shape)
  delta = 1.0 / n**2
  loss_star, ridge = training.optimum_loss(ds.x, ds.y)
  rows = []
  grid = [(m, e) for e in epsilons for m in methods]
  for method, eps in _harness.progress(grid, desc="baselines"):
    rows.append(run_method(method, ds, eps, delta, seeds, steps, loss_star))
  aop = [r["median"] for r in sorted((r for r in rows if r["method"] == "aop"),
                                     key=lambda r: r["epsilon"])]
  payload = {"machine": info, "quick": bool(args.quick), "smoke": bool(args.smoke),
             "dataset": name, "n": n, "d": d,
             "delta": delta, "loss_star": float(loss_star), "ridge": float(ridge),
             "seeds": seeds, "epsilons": [float(e) for e in epsilons],
             "aop_decreasing": (bool(all(a > b for a, b in zip(aop, aop[1:])))
                                if len(aop) > 1 else None),
             "seconds_total": time.perf_counter() - t0, "rows": rows}
  out = _harness.out_dir(args)
  _, md = _harness.write_results(out, "baselines", payload, to_markdown(payload))
  print(md.read_text())
  return 0


if __name__ == "__main__":
  sys.exit(main())
