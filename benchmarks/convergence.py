"""Excess loss against wall-clock time: the analogue of the paper's Fig. 1 and Fig. 3.

For every algorithm of ``_harness.ALGORITHMS`` (new algorithms are picked up
automatically; their T grid comes from ``_harness.algorithm_family``) and a
few run lengths T each, one ``dpjax.fit`` call runs ``--repeats`` independent
private runs (vmapped, one compiled program) at epsilon = 1, delta = n^-2,
``accounting="gaussian"``, ``init="random-unit"`` (the reference's start), and
records the mean excess loss ``loss(w_k) - loss_star`` at every step k.

A private run has a fixed T (the noise per step depends on T), so each
(algorithm, T) is its own curve. Every step of a run costs the same (one
``lax.scan``), so step k is drawn at ``k * seconds_run / T / repeats``: the
time of the whole vmapped run divided by the number of repeats ("per repeat,
R vmapped"; not exactly the cost of one unvmapped run). Compile time is
excluded from the time axis and reported separately.

Usage::

  python benchmarks/convergence.py [--datasets a9a covertype-synthetic] [--repeats 10]
      [--algorithms dp-gd hess-clip ...] [--steps first-order=100,400,1600]
      [--data-dir ../shared/data] [--out-dir benchmarks/results] [--quick [--smoke]]

Defaults: ``a9a`` (LIBSVM file from ``--data-dir``) and
``covertype-synthetic`` (n = 581,012, d = 54, generated), 10 repeats, T grids
:data:`STEP_GRIDS` with the per-dataset replacements of
:data:`DATASET_STEP_GRIDS`; ``--steps FAMILY=T1,T2,...`` replaces a family's
grid on every dataset. ``--quick``: ``synthetic`` (10,000 x 100) unless
``--datasets`` is given, 3 repeats, grids :data:`QUICK_STEP_GRIDS`, and
:data:`QUICK_ALGORITHMS` unless ``--algorithms`` is given; it still writes
every output. ``--quick --smoke`` (the test suite's run; one compilation per
(algorithm, T) is nearly all of its time): :data:`SMOKE_DATASET`, a
generated 1,000 x 10 set (unless ``--datasets`` is given), one repeat
(unless ``--repeats`` is given) and one T per family (:data:`SMOKE_STEP_GRIDS`),
so two compiled runs; the same outputs, with ``smoke`` set in the JSON. A
missing data file exits with status 2 and a message naming ``--data-dir``.

Outputs (in ``_harness.out_dir``): ``convergence_<dataset>.png`` per setting
(left: excess loss against time per (algorithm, T), mean and +-1 s.e. band,
final point marked; right: final excess loss against total run time, the
time/loss trade-off), ``convergence.json`` and ``convergence.md`` (through
``_harness.write_results``).

JSON schema (``convergence.json``; besides ``schema`` from the harness)::

  machine: dict                 # _harness.machine_info(), + load_average_end
  quick: bool
  smoke: bool                   # --smoke
  epsilon: float                # 1.0
  accounting: str               # "gaussian"
  init: str                     # "random-unit"
  seed: int
  time_axis: str                # how the time of step k is computed
  seconds_total: float          # whole script, data loading included
  settings: list of
    dataset: str
    n, d: int
    delta: float                # n ** -2
    rho: float                  # total zCDP rho of every run (eps -> rho, "gaussian")
    accounting: str
    repeats: int
    loss_star: float            # non-private optimum (float64 Newton)
    ridge: float                # 0, or the ridge used on separable data
    png: str                    # file name of the figure, beside the JSON
    step_grids: {family: [int]} # the T grid of each algorithm family here
    best_final_excess_loss: float | None   # min over runs of final_excess_loss_mean
    best_run: {algorithm, steps} | None
    runs: list of
      algorithm: str
      family: str               # "first-order" | "second-order" | ...
      steps: int                # T
      seconds_compile: float    # lowering + compilation (excluded from time axis)
      seconds_run: float        # the compiled run, all repeats vmapped together
      seconds_run_per_repeat: float       # seconds_run / repeats
      seconds_per_step: float   # seconds_run / T (all repeats)
      excess_loss_curve: [float]          # T + 1 values: mean over repeats at w_0..w_T
      excess_loss_se_curve: [float]       # T + 1 values: std(ddof=1) / sqrt(repeats)
      final_excess_loss_mean: float       # = excess_loss_curve[-1]
      final_excess_loss_se: float
      guard_resets_total: int   # divergence-guard resets summed over repeats
      seconds_to_target: {"2x": float | None, "1.1x": float | None}
          # per-repeat seconds until the mean curve first reaches
          # factor * best_final_excess_loss; None if never (or best <= 0)

Curve values 0..T-1 are ``FitResult.losses`` (float32 data, evaluated inside
the run) minus ``loss_star``; the last value is ``FitResult.excess_losses``
(float64 on the host), so that it equals the reported final excess loss.
Non-finite values (never expected: the divergence guard keeps losses finite)
would be written as ``null``.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import time
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

import matplotlib  # noqa: E402  pylint: disable=g-import-not-at-top

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top
from matplotlib import ticker  # noqa: E402  pylint: disable=g-import-not-at-top

import dpjax  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import compiled  # noqa: E402  pylint: disable=g-import-not-at-top

EPSILON = 1.0
ACCOUNTING = "gaussian"
INIT = "random-unit"
SEED = 0
TARGET_FACTORS = (("2x", 2.0), ("1.1x", 1.1))

DEFAULT_DATASETS = ("a9a", "covertype-synthetic")
QUICK_DATASETS = ("synthetic",)
DEFAULT_REPEATS = 10
QUICK_REPEATS = 3
# T grid per algorithm family (_harness.algorithm_family). Sized so that the
# full run stays well under 15 minutes on a 2-core CPU: estimated ~6-7 min on
# a quiet machine (compile ~2.5-4 s per (algorithm, T), 30 runs), ~13 min with
# the machine shared (load 4-6).
STEP_GRIDS = {
    "first-order": (100, 400, 1600),
    "second-order": (3, 9, 27),
}
# One compilation per (algorithm, T) dominates --quick (2-4 s each on 2 cores),
# so the quick grid has a single T for Newton, and one Newton variant stands for
# all four (the script treats an algorithm by its family only; every variant's
# fit is tested in tests/test_training.py).
QUICK_STEP_GRIDS = {
    "first-order": (20, 80),
    "second-order": (3,),
}
QUICK_ALGORITHMS = ("dp-gd", "hess-clip")
# --quick --smoke: a small generated set (name -> (n, d) of dpjax.data.synthetic(SEED, ...)), one
# repeat and one T per family: one compiled run per algorithm of QUICK_ALGORITHMS.
SMOKE_DATASET = ("synthetic-1000x10", (1_000, 10))
SMOKE_REPEATS = 1
SMOKE_STEP_GRIDS = {
    "first-order": (20,),
    "second-order": (3,),
}
# Per-dataset replacements of STEP_GRIDS entries (not used with --quick or for
# a family given with --steps). On covertype-synthetic (581,012 x 54) one step
# with 10 vmapped repeats costs ~1.8-2.5 s for Newton (ten Hessians) and
# ~75-110 ms for DP-GD on 2 cores, against ~0.2-1.8 s and ~4-10 ms on a9a; at
# this n the noise is small and both methods are close to the optimum after
# 12 Newton / 400 DP-GD steps, so the shorter grids keep the budget.
DATASET_STEP_GRIDS = {
    "covertype-synthetic": {"first-order": (50, 200, 800), "second-order": (3, 6, 12)},
}

_LINESTYLES = ("-", "--", ":", "-.")
_LOG_FLOOR = 1e-12  # excess losses <= 0 (separable data) are drawn at this floor.


# ----------------------------------------------------------------------------
# Running.
# ----------------------------------------------------------------------------


def _finite_or_none(v: float) -> float | None:
  """``float(v)``, or ``None`` when it is not finite (JSON has no inf/NaN)."""
  v = float(v)
  return v if math.isfinite(v) else None


def curves(result: Any) -> tuple[np.ndarray, np.ndarray]:
  """Mean and standard error over repeats of the excess loss at ``w_0..w_T``.

  Args:
    result: a ``dpjax.training.FitResult``.

  Returns:
    ``(mean, se)``, float64 arrays of length ``steps + 1``. The last column is
    the float64 host-evaluated ``result.excess_losses``.
  """
  excess = np.asarray(result.losses, np.float64) - result.loss_star  # [repeats, T + 1]
  excess[:, -1] = np.asarray(result.excess_losses, np.float64)
  mean = excess.mean(axis=0)
  repeats = excess.shape[0]
  if repeats > 1:
    se = excess.std(axis=0, ddof=1) / math.sqrt(repeats)
  else:
    se = np.zeros_like(mean)
  return mean, se


def run_one(ds: Any, algorithm: str, steps: int, repeats: int) -> dict[str, Any]:
  """Runs one (algorithm, T) with ``repeats`` vmapped repeats; returns its JSON record.

  Args:
    ds: a ``dpjax.data.Dataset``.
    algorithm: one of ``_harness.ALGORITHMS``.
    steps: T.
    repeats: independent runs, vmapped in one compiled call.

  Returns:
    The run record of the module docstring (without ``seconds_to_target``),
    plus private keys ``_rho``, ``_delta``, ``_loss_star`` and ``_ridge``.
  """
  n = int(ds.x.shape[0])
  result = dpjax.fit(ds, algorithm, epsilon=EPSILON, delta=1.0 / n**2, steps=steps,
                     repeats=repeats, seed=SEED, accounting=ACCOUNTING, init=INIT)
  mean, se = curves(result)
  return {
      "algorithm": algorithm,
      "family": _harness.algorithm_family(algorithm),
      "steps": steps,
      "seconds_compile": float(result.seconds_compile),
      "seconds_run": float(result.seconds_run),
      "seconds_run_per_repeat": float(result.seconds_run) / repeats,
      "seconds_per_step": float(result.seconds_run) / steps,
      "excess_loss_curve": [_finite_or_none(v) for v in mean],
      "excess_loss_se_curve": [_finite_or_none(v) for v in se],
      "final_excess_loss_mean": _finite_or_none(mean[-1]),
      "final_excess_loss_se": _finite_or_none(se[-1]),
      "guard_resets_total": int(np.sum(result.guard_resets)),
      "_rho": float(result.rho),
      "_delta": float(result.delta),
      "_loss_star": float(result.loss_star),
      "_ridge": float(result.ridge),
  }


def step_seconds(run: dict[str, Any], repeats: int) -> float:
  """Per-repeat seconds of one step: ``seconds_run / T / repeats``."""
  return run["seconds_run"] / run["steps"] / repeats


def add_targets(setting: dict[str, Any]) -> None:
  """Adds the best final loss and each run's time to reach 2x / 1.1x of it (in place)."""
  runs = setting["runs"]
  finals = [(r["final_excess_loss_mean"], r) for r in runs
            if r["final_excess_loss_mean"] is not None]
  best, best_run = min(finals, key=lambda fr: fr[0]) if finals else (None, None)
  setting["best_final_excess_loss"] = best
  setting["best_run"] = (None if best_run is None else
                         {"algorithm": best_run["algorithm"], "steps": best_run["steps"]})
  for r in runs:
    targets = {}
    for label, factor in TARGET_FACTORS:
      targets[label] = None
      if best is None or best <= 0:
        continue
      for k, v in enumerate(r["excess_loss_curve"]):
        if v is not None and v <= factor * best:
          targets[label] = k * step_seconds(r, setting["repeats"])
          break
    r["seconds_to_target"] = targets


def run_setting(name: str, ds: Any, grid: Sequence[tuple[str, int]], repeats: int,
                bar: Any) -> dict[str, Any]:
  """Runs every (algorithm, T) of ``grid`` on one dataset; returns its setting record.

  Args:
    name: dataset name.
    ds: the dataset.
    grid: (algorithm, T) pairs.
    repeats: repeats per run.
    bar: an iterator over the global progress grid, advanced once per run.

  Returns:
    The setting record of the module docstring (``png`` included).
  """
  n, d = (int(s) for s in ds.x.shape)
  runs = []
  for algorithm, steps in grid:
    next(bar)
    runs.append(run_one(ds, algorithm, steps, repeats))
  first = runs[0]
  setting = {
      "dataset": name,
      "n": n,
      "d": d,
      "delta": first["_delta"],
      "rho": first["_rho"],
      "accounting": ACCOUNTING,
      "repeats": repeats,
      "loss_star": first["_loss_star"],
      "ridge": first["_ridge"],
      "png": f"convergence_{name}.png",
      "runs": [{k: v for k, v in r.items() if not k.startswith("_")} for r in runs],
  }
  add_targets(setting)
  return setting


# ----------------------------------------------------------------------------
# Plot and markdown.
# ----------------------------------------------------------------------------


def _floor(values: np.ndarray) -> np.ndarray:
  """Clips values for a log axis: NaN and values <= 0 go to ``_LOG_FLOOR``."""
  return np.maximum(np.nan_to_num(values, nan=_LOG_FLOOR, posinf=1e6), _LOG_FLOOR)


def plot_setting(setting: dict[str, Any], algorithms: Sequence[str], epsilon: float,
                 path: pathlib.Path) -> None:
  """Draws the two-panel convergence figure of one setting to ``path`` (PNG).

  Args:
    setting: a setting record (with targets).
    algorithms: the algorithm order (fixes the colours).
    epsilon: the privacy budget, for the title.
    path: output file.
  """
  repeats = setting["repeats"]
  colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(algorithms)}
  fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 5.6), gridspec_kw={"width_ratios": [3, 2]})

  start = [r["excess_loss_curve"][0] for r in setting["runs"]
           if r["excess_loss_curve"][0] is not None]
  if start:
    ax.axhline(float(np.mean(start)), color="0.6", ls=":", lw=1,
               label="$w_0$ (t = 0), mean")
  by_algorithm: dict[str, list[dict[str, Any]]] = {}
  for r in setting["runs"]:
    by_algorithm.setdefault(r["algorithm"], []).append(r)
  for algorithm, runs in by_algorithm.items():
    color = colors.get(algorithm, "k")
    for i, r in enumerate(sorted(runs, key=lambda r: r["steps"])):
      dt = step_seconds(r, repeats)
      t = dt * np.arange(1, r["steps"] + 1)
      mean = np.array([np.nan if v is None else v for v in r["excess_loss_curve"]])[1:]
      se = np.array([np.nan if v is None else v for v in r["excess_loss_se_curve"]])[1:]
      ls = _LINESTYLES[i % len(_LINESTYLES)]
      ax.plot(t, _floor(mean), color=color, ls=ls, lw=1.4,
              label=f"{algorithm} T={r['steps']}")
      ax.fill_between(t, _floor(mean - se), _floor(mean + se), color=color, alpha=0.12, lw=0)
      ax.plot(t[-1:], _floor(mean[-1:]), marker="o", ms=6, color=color, mec="k", mew=0.8)
    finals = sorted(runs, key=lambda r: r["steps"])
    x = [r["seconds_run_per_repeat"] for r in finals]
    y = _floor(np.array([np.nan if r["final_excess_loss_mean"] is None
                         else r["final_excess_loss_mean"] for r in finals]))
    yerr = np.array([r["final_excess_loss_se"] or 0.0 for r in finals])
    ax2.errorbar(x, y, yerr=np.minimum(yerr, y - _LOG_FLOOR), color=color, marker="o",
                 ms=6, mec="k", mew=0.8, lw=1, capsize=2, label=algorithm)
    for xi, yi, r in zip(x, y, finals):
      ax2.annotate(f"T={r['steps']}", (xi, yi), textcoords="offset points", xytext=(4, 4),
                   fontsize=7, color=color)

  ax2.margins(x=0.12, y=0.08)  # room for the T labels.
  best = setting.get("best_final_excess_loss")
  for a in (ax, ax2):
    a.set_xscale("log")
    a.set_yscale("log")
    lo, hi = a.get_xlim()
    a.xaxis.set_minor_locator(ticker.LogLocator(subs=(2.0, 5.0)))
    if hi / lo < 300:  # under ~2.5 decades: label 2x and 5x ticks too.
      a.xaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
      a.tick_params(axis="x", which="minor", labelsize=7)
    else:
      a.xaxis.set_minor_formatter(ticker.NullFormatter())
    a.grid(True, which="both", alpha=0.25)
    if best is not None and best > 0:
      a.axhline(2 * best, color="0.3", ls="--", lw=0.7,
                label="2× best final" if a is ax else None)
  ax.set_xlabel(f"wall-clock seconds (per repeat, {repeats} vmapped; compile time excluded)")
  ax.set_ylabel("excess loss  $\\ell(w_k) - \\ell^*$  (mean over repeats, ±1 s.e.)")
  ax.set_title("excess loss vs time; step k at k·seconds_run/(T·repeats); ● = final $w_T$",
               fontsize=9)
  ax.legend(fontsize=7, ncol=2, loc="best")
  ax2.set_xlabel(f"total run seconds (per repeat, {repeats} vmapped; compile excluded)")
  ax2.set_ylabel("final excess loss (mean ± s.e.)")
  ax2.set_title("time / loss trade-off, one marker per (algorithm, T); dashed = 2× best",
                fontsize=9)
  ax2.legend(fontsize=7, loc="best")
  fig.suptitle(
      f"{setting['dataset']} (n={setting['n']:,}, d={setting['d']}): ε={epsilon:g}, "
      f"δ=n⁻²={setting['delta']:.3g}, ρ={setting['rho']:.4g} ({setting['accounting']}), "
      f"init {INIT}, {repeats} repeats")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _fmt(v: float | None, spec: str = ".4g") -> str:
  """Formats ``v`` with ``spec``; ``None`` as an em dash."""
  return "—" if v is None else format(v, spec)


def to_markdown(payload: dict[str, Any]) -> str:
  """The markdown report: header, notes, one table and figure per setting."""
  info = payload["machine"]
  lines = _harness.markdown_header(
      "Convergence: excess loss against wall-clock time"
      + ((" (quick, smoke)" if payload.get("smoke") else " (quick)") if payload["quick"] else ""),
      info) + [
          f"- load average at end: {info.get('load_average_end')}; "
          f"whole script {payload['seconds_total']:.1f} s",
          f"- ε = {payload['epsilon']:g}, δ = n⁻², accounting `{payload['accounting']}`, "
          f"init `{payload['init']}`, seed {payload['seed']}",
          f"- time axis: {payload['time_axis']}",
          "- final excess loss: mean ± s.e. over repeats at w_T (float64 host evaluation); "
          "time to 2× / 1.1×: per-repeat seconds until the mean curve first reaches 2× / 1.1× "
          "the best final excess loss among all runs of the setting (— = never).",
          "",
      ]
  for s in payload["settings"]:
    best = s["best_final_excess_loss"]
    best_txt = ("—" if best is None else
                f"{best:.4g} ({s['best_run']['algorithm']}, T={s['best_run']['steps']})")
    lines += [
        f"## {s['dataset']} (n = {s['n']:,}, d = {s['d']})",
        "",
        f"- δ = {s['delta']:.3g}, ρ = {s['rho']:.5g}, {s['repeats']} repeats, "
        f"loss* = {s['loss_star']:.6f}" + (f" (ridge {s['ridge']:g})" if s["ridge"] else ""),
        "- T grids: " + "; ".join(f"{fam} {{{', '.join(map(str, ts))}}}"
                                  for fam, ts in s["step_grids"].items()),
        f"- best final excess loss: {best_txt}",
        "",
        f"| algorithm | family | T | final excess loss ± s.e. | run s ({s['repeats']} vmapped) "
        "| run s per repeat | compile s | resets | time to 2× best (s/repeat) "
        "| time to 1.1× best (s/repeat) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["runs"]:
      lines.append(
          f"| {r['algorithm']} | {r['family']} | {r['steps']} | "
          f"{_fmt(r['final_excess_loss_mean'])} ± {_fmt(r['final_excess_loss_se'], '.2g')} | "
          f"{r['seconds_run']:.3f} | {r['seconds_run_per_repeat']:.4f} | "
          f"{r['seconds_compile']:.2f} | {r['guard_resets_total']} | "
          f"{_fmt(r['seconds_to_target']['2x'], '.4f')} | "
          f"{_fmt(r['seconds_to_target']['1.1x'], '.4f')} |")
    lines += ["", f"![convergence on {s['dataset']}]({s['png']})", ""]
  return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------


def _parse_steps(specs: Sequence[str] | None,
                 parser: argparse.ArgumentParser) -> dict[str, tuple[int, ...]]:
  """Parses the ``--steps FAMILY=T1,T2,...`` overrides."""
  grids = {}
  for spec in specs or ():
    family, _, values = spec.partition("=")
    try:
      steps = tuple(sorted({int(v) for v in values.split(",") if v.strip()}))
    except ValueError:
      steps = ()
    if not family or not steps or min(steps) < 1:
      parser.error(f"--steps {spec!r}: expected FAMILY=T1,T2,... with positive integers "
                   "(e.g. first-order=100,400).")
    grids[family] = steps
  return grids


def step_grids(dataset: str, quick: bool,
               overrides: dict[str, tuple[int, ...]],
               smoke: bool = False) -> dict[str, tuple[int, ...]]:
  """The T grid of each algorithm family on ``dataset``.

  Args:
    dataset: dataset name.
    quick: use :data:`QUICK_STEP_GRIDS` instead of :data:`STEP_GRIDS` with the
      :data:`DATASET_STEP_GRIDS` replacements.
    overrides: ``--steps`` grids, which replace the family's grid everywhere.
    smoke: use :data:`SMOKE_STEP_GRIDS` (with ``quick``).

  Returns:
    family -> sorted tuple of T.
  """
  if smoke:
    grids = dict(SMOKE_STEP_GRIDS)
  elif quick:
    grids = dict(QUICK_STEP_GRIDS)
  else:
    grids = {**STEP_GRIDS, **DATASET_STEP_GRIDS.get(dataset, {})}
  grids.update(overrides)
  return grids


def build_parser() -> argparse.ArgumentParser:
  """The command line: the harness's common flags plus this script's."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  _harness.add_common_args(parser)
  parser.add_argument(
      "--datasets", nargs="+", choices=sorted(_harness.DATASETS), default=None,
      help=f"settings to run (default {' '.join(DEFAULT_DATASETS)}; with --quick, "
      f"{' '.join(QUICK_DATASETS)})")
  parser.add_argument(
      "--repeats", type=int, default=None,
      help=f"independent repeats per run, vmapped (default {DEFAULT_REPEATS}; "
      f"with --quick, {QUICK_REPEATS})")
  parser.add_argument(
      "--algorithms", nargs="+", choices=list(_harness.ALGORITHMS), default=None,
      help="subset of the algorithms (default: all of _harness.ALGORITHMS; with --quick, "
      "QUICK_ALGORITHMS)")
  parser.add_argument(
      "--steps", action="append", metavar="FAMILY=T1,T2,...",
      help="replace the T grid of an algorithm family on every dataset (repeatable); "
      "defaults " + "; ".join(f"{f}={','.join(map(str, t))}" for f, t in STEP_GRIDS.items())
      + "; per-dataset replacements " + "; ".join(
          f"{name}: " + ", ".join(f"{f}={','.join(map(str, t))}" for f, t in g.items())
          for name, g in DATASET_STEP_GRIDS.items()))
  parser.add_argument(
      "--smoke", action="store_true",
      help=f"with --quick (the test suite's run): a generated {SMOKE_DATASET[1][0]:,} x "
      f"{SMOKE_DATASET[1][1]} set unless --datasets is given, {SMOKE_REPEATS} repeat unless "
      "--repeats is given, one T per family ("
      + "; ".join(f"{f}={','.join(map(str, t))}" for f, t in SMOKE_STEP_GRIDS.items())
      + "): one compiled run per algorithm; every output is still written")
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the benchmark; returns the exit status (2 for a missing data file)."""
  t_start = time.perf_counter()
  parser = build_parser()
  args = _harness.parse_args(parser, argv)
  smoke_set = args.smoke and args.datasets is None
  datasets = list(args.datasets or ([SMOKE_DATASET[0]] if smoke_set else
                                    QUICK_DATASETS if args.quick else DEFAULT_DATASETS))
  repeats = args.repeats or (SMOKE_REPEATS if args.smoke else
                             QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
  if repeats < 1:
    parser.error("--repeats must be >= 1.")
  algorithms = list(args.algorithms or (QUICK_ALGORITHMS if args.quick else _harness.ALGORITHMS))
  overrides = _parse_steps(args.steps, parser)
  families = list(dict.fromkeys(_harness.algorithm_family(a) for a in algorithms))
  grids = {name: step_grids(name, args.quick, overrides, args.smoke) for name in datasets}
  missing = sorted({f for g in grids.values() for f in families if f not in g})
  if missing:
    parser.error(f"no T grid for algorithm family {missing}; add it to STEP_GRIDS / "
                 "QUICK_STEP_GRIDS in benchmarks/convergence.py or pass --steps FAMILY=T1,T2,...")
  runs = {name: [(a, t) for a in algorithms for t in grids[name][_harness.algorithm_family(a)]]
          for name in datasets}

  info = _harness.machine_info()
  compiled.clear()  # the compile times below are cold compiles, not earlier calls' programs
  loaded = {}
  try:
    for name in datasets:
      print(f"loading {name} ...", file=sys.stderr, flush=True)
      if smoke_set:
        n, d = SMOKE_DATASET[1]
        loaded[name] = dpjax.data.synthetic(SEED, n=n, d=d)
      else:
        loaded[name] = _harness.load_dataset(name, args.data_dir)
  except _harness.MissingDataError as err:
    print(f"error: {err}", file=sys.stderr)
    return 2
  directory = _harness.out_dir(args)

  items = [(name, a, t) for name in datasets for a, t in runs[name]]
  bar = iter(_harness.progress(items, desc="convergence"))
  settings = []
  for name in datasets:
    settings.append(run_setting(name, loaded[name], runs[name], repeats, bar))
    settings[-1]["step_grids"] = {f: list(grids[name][f]) for f in families}
    plot_setting(settings[-1], algorithms, EPSILON, directory / settings[-1]["png"])
  for _ in bar:  # finishes the progress bar.
    pass

  info["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
  payload = {
      "machine": info,
      "quick": bool(args.quick),
      "smoke": bool(args.smoke),
      "epsilon": EPSILON,
      "accounting": ACCOUNTING,
      "init": INIT,
      "seed": SEED,
      "time_axis": (f"step k of a run of T steps at k * seconds_run / T / repeats: per repeat, "
                    f"{repeats} repeats vmapped in one compiled run; compile time excluded"),
      "seconds_total": time.perf_counter() - t_start,
      "settings": settings,
  }
  json_path, md_path = _harness.write_results(directory, "convergence", payload,
                                              to_markdown(payload))
  print(f"wrote {json_path}, {md_path} and "
        + ", ".join(str(directory / s["png"]) for s in settings), file=sys.stderr)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
