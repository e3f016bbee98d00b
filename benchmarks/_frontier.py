"""The privacy-utility frontier: precond-gd against tuned first-order baselines, honestly.

Run it as ``python benchmarks/privacy_utility.py --frontier [flags]``; its
results are in ``benchmarks/results/privacy_utility_frontier.md``. Every family of
methods is tuned on one seed set and reported on fresh repeats of another, so
that a family's edge is not selection noise, and the first-order baselines get
the same free improvements (tail averaging, a tuned step) as the new method.

Protocol:

* Datasets (``--data-dir``, the paper preprocessing of ``_harness``), in this
  order: synthetic (10,000 x 100), a5a, a1a.t, phishing, ijcnn1, a9a, w8a.
* Privacy: eps in {0.1, 1, 10}, delta = n^-2, the exact ``"gaussian"``
  accounting of :func:`dpjax.fit`, ``init="zeros"``. The levels of one
  configuration run as one compiled program (:func:`dpjax.training.fit_levels`).
* Selection: every configuration of a family's grid runs ``--repeats`` (10)
  times with ``seed = SELECT_SEED = 0`` (seed set A); per (dataset, eps) the
  family's configuration with the smallest mean excess loss is selected.
* Report: each family's selected configuration is **re-run on
  ``--report-repeats`` (20) fresh repeats with ``seed = REPORT_SEED = 1``**
  (seed set B). The tables report the fresh mean +- s.e. and, beside it, the
  selection mean (with 10 repeats, selection bias moved some means by 5-10%).
* Families (the rows), tuned non-privately over their grids:

  1. ``dp-gd``: learning rate 4, final iterate, T in 25, 50, ..., 3200, doubled
     up to 6400 for the levels whose best T is the largest run ("(edge)" when
     the best is still the largest).
  2. ``dp-gd+avg``: the same runs, output = mean of the last half of the
     iterates. The grid runs once with ``average="last-half"``:
     ``excess_losses`` is this family, ``final_excess_losses`` family 1.
  3. ``dp-gd-step``: learning rate eta in {4, 16, 64} with eta T <= 12,800 (the
     T grid above, capped; no doubling), final iterate; and
  4. ``dp-gd-step+avg``: the same runs averaged, the strongest first-order
     baseline.
  5. ``precond-gd``: m (steps) in {5, 10, 20, ..., 640}, kappa in {1.5, 3, 6},
     learning rate eta in {1, 2, 4}, output in {none, last-half, last-quarter}
     (none is the final iterate of the last-half runs; last-quarter runs at
     eta = 1 only), curvature_frac 0.03.
  6. ``auto``: no tuning; ``dpjax.training.auto.choose(n, d, epsilon, delta)`` per eps,
     run with ``dpjax.fit`` on the fresh repeats only. Skipped, with a note,
     while ``dpjax.training.auto`` does not import.
  7. ``hess-clip``, ``hess-add``, ``qu-clip``, ``qu-add``: the paper's Newton
     variants, defaults, final iterate, T in 2, 4, ..., 64; a level leaves the
     grid once its mean has risen past its best, unless that best is still above
     the excess loss at w_0 (the rule of ``privacy_utility.tune``).

  Every grid is also halved downwards (to 1 at the least) for the levels whose
  best is its smallest value (flag "(low edge)" if it still is), as in
  ``privacy_utility.py``: at small eps the best run barely moves.
* Cost: for every reported configuration, its gradient evaluations, curvature
  (d x d matrix + eigh) evaluations, and the wall-clock seconds of **one** run
  (``dpjax.fit``, repeats=1, compile excluded, the faster of 2 executions; once
  a run of an algorithm took 1 s or more, its longer runs execute once),
  measured after tuning. A run's time depends on the program (algorithm, steps,
  output rule), not on eps, the learning rate or kappa; programs are timed once.
  The plot's curves are timed the same way (each grid T or m once).

Outputs: per-dataset frontier table (families x eps: fresh mean +- s.e. and
selection mean, ratio to ``dp-gd``, the acceptance baseline, ratio to
``dp-gd-step+avg``, the strongest first-order baseline, configuration,
gradient / curvature evaluations, seconds); the acceptance summary (per
(dataset, eps): precond-gd / dp-gd ratio; "no worse within 1 s.e.", i.e.
mean_p <= mean_g + sqrt(se_p^2 + se_g^2); ratio <= 0.9 (needed in at least half
the cells); gradient evaluations precond-gd needs to reach dp-gd's loss
against dp-gd's T*, and their factor (needed >= 5): the *match* is the
smallest m among all of precond-gd's configurations (any kappa, eta, output)
whose selection mean is <= dp-gd's selection mean, and it is **confirmed** only
if its re-run on the fresh repeats is no worse than dp-gd's fresh mean within
1 s.e. (the minimum over many configurations on seed set A is biased low; the
fresh run removes that bias); auto against the best tuned family of the cell
(needed <= 1.25x)). These are measurements: the tables show the numbers
and count the cells that meet each criterion; nothing is asserted.
The plot: excess loss against one-run seconds at eps = 1 (log-log), one panel
per dataset: curves over the grids of dp-gd, dp-gd+avg (selection means) and
precond-gd (its selected kappa and output rule, over m), points for every
family's selected configuration (fresh means).

Usage::

  python benchmarks/privacy_utility.py --frontier [--datasets synthetic a5a ...]
      [--families dp-gd precond-gd auto ...] [--repeats 10] [--report-repeats 20]
      [--data-dir ../shared/data] [--out-dir benchmarks/results] [--quick [--smoke]]
      [--report-only]

Each dataset's results are written as soon as it finishes
(``privacy_utility_frontier_<dataset>.json``). With ``--families`` only those
families run, and their records replace the same families in the existing
per-dataset file (the others are kept): ``--families auto`` redoes the auto row
after the rule changes. The combined ``privacy_utility_frontier.json``, ``.md``
and ``.png`` are rebuilt from all per-dataset files in the out dir;
``--report-only`` rebuilds them without running anything; ``--rematch`` redoes
only precond-gd's gradient-evaluation match (its fresh confirmation runs) in
the existing files and rebuilds them. ``--quick``: a
generated ``synthetic-2000x20`` dataset (n = 2,000, d = 20), 3 repeats, eps in
{1, 10}, tiny grids, the Newton variants cut to qu-clip, about a minute;
outputs go to ``results/quick``. ``--quick --smoke`` (the test suite's default
run; ``--quick`` alone is its ``--full`` tier): the same families, code and
outputs on a generated ``synthetic-300x4`` (n = 300, d = 4), one level (eps = 1)
and the one-point grids of :data:`SMOKE` (dp-gd T = 25 at eta = 4, which the
tuned-step families share; precond-gd m = 10 at one kappa and eta; qu-clip
T = 2): eight compiled programs (three batched selection programs, which the
fresh repeats and the match reuse; auto's run; four one-run timings), a few
seconds of compilation each, about half the ``--quick`` run's fifteen. At this
shape auto picks dp-gd (T = 25, last-half) at eps = 1, whose timing is then
dp-gd+avg's; another choice costs one more timing program.

JSON schema (``privacy_utility_frontier_<dataset>.json``)::

  schema: int; machine: dict (_harness.machine_info() of the latest run); quick: bool
  dataset: str; n, d: int; delta: float; loss_star: float; ridge: float
  start_excess: float                  # excess loss at w_0 = 0
  epsilons: [float]; accounting: "gaussian"; init: "zeros"
  select_seed: int; report_seed: int   # seed sets A and B
  timing: {key: {algorithm, steps, average, options, seconds_run, seconds_compile,
                 executions}}          # one run, repeats=1; key = timing_key(...)
  history: [{families: [str], command, commit, dirty, date, seconds}]  # every run merged in
  skipped: {family: reason}
  families: {family id: {
      label: str; algorithm: str; repeats: int; report_repeats: int
      run: {command, commit, date}     # the invocation that produced this record
      curves: [{algorithm, options, run_average, metric, steps_run: {eps: [int]},
                stopped_after: {eps: int}}]  # tuned families only
      candidates: [{steps, options, average, run_average,
                    results: {eps: {mean, se, excess_losses, guard_resets,
                                    program_seconds}}}]  # seed set A
      selected: {eps: {steps, options, average, run_average, mean, se,
                       edge: "high" | "low" | null}}
      match: {eps: {target, target_steps, steps, options, average, run_average,
                    selection_mean, fresh: {mean, se, excess_losses, ...}}}
                                       # precond-gd only: the smallest-m config
                                       # reaching dp-gd's selection mean, re-run fresh
      choice: {eps: {algorithm, steps, average, options, reason, ...}}  # auto only:
                                       # every field of the AutoChoice
      fresh: {eps: {algorithm, steps, options, average, seed, repeats, mean, se,
                    excess_losses, guard_resets, gradient_evaluations,
                    curvature_evaluations, seconds, timing_key,
                    selection_mean, selection_se}}}}

``eps`` keys are ``format(eps, "g")``. ``privacy_utility_frontier.json``:
``{schema, machine, quick, datasets: [per-dataset payloads], frontier: [rows of
frontier_rows()], acceptance: {rows: [acceptance_rows()], summary:
acceptance_summary()}}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import shlex
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

import dpjax  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import compiled  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import data as data_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from dpjax import training  # noqa: E402  pylint: disable=g-import-not-at-top

STEM = "privacy_utility_frontier"
SELECT_SEED = 0  # seed set A: the grids.
REPORT_SEED = 1  # seed set B: the fresh repeats of each selected configuration.
ACCOUNTING = "gaussian"
INIT = "zeros"
DEFAULT_DATASETS = ("synthetic", "a5a", "a1a.t", "phishing", "ijcnn1", "a9a", "w8a")
EPSILONS = (0.1, 1.0, 10.0)
PLOT_EPSILON = 1.0
QUICK_DATASET = "synthetic-2000x20"
QUICK_SHAPE = (2_000, 20)
# --quick --smoke: compile time grows with d (the second-order programs' d x d algebra), so
# the smoke data is tiny. At this shape and eps = 1, auto picks dp-gd (eta = 4, T = 25,
# last-half): the smoke's own dp-gd+avg program, so auto's one-run timing is shared with it.
SMOKE_DATASET = "synthetic-300x4"
SMOKE_SHAPE = (300, 4)
GENERATED = {QUICK_DATASET: QUICK_SHAPE, SMOKE_DATASET: SMOKE_SHAPE}  # no file under --data-dir
MATCH_TRIES = 3  # fresh confirmations tried for the gradient-evaluation match (match_runs).
EARLY_STOP_RISES = 1  # as privacy_utility.py: grid points past its best after which a level stops.
TIMING_RUNS = 2  # executions of each short one-run program; the fastest is kept.
LONG_RUN_SECONDS = 1.0  # from a run this long on, the algorithm's longer runs execute once.
# Options that change no array shape and no operation count, hence not the time of a run.
COST_FREE_OPTIONS = ("learning_rate", "kappa", "curvature_frac")

NEWTON = ("hess-clip", "hess-add", "qu-clip", "qu-add")
FAMILY_IDS = ("dp-gd", "dp-gd+avg", "dp-gd-step", "dp-gd-step+avg", "precond-gd", "auto", *NEWTON)
TUNED = tuple(f for f in FAMILY_IDS if f != "auto")
LABELS = {
    "dp-gd": "dp-gd (η=4, final iterate)",
    "dp-gd+avg": "dp-gd + avg",
    "dp-gd-step": "dp-gd tuned step",
    "dp-gd-step+avg": "dp-gd tuned step + avg",
    "precond-gd": "precond-gd",
    "auto": "auto",
    **{a: f"{a} (paper Newton)" for a in NEWTON},
}
BASELINE = "dp-gd"  # the acceptance baseline: tuned T, step 4, final iterate.
STRONGEST_FIRST_ORDER = "dp-gd-step+avg"
# Acceptance thresholds (reported against, never asserted).
WIN_RATIO = 0.9
SPEEDUP = 5.0
AUTO_RATIO = 1.25
QUICK_SKIPS = ("hess-clip", "hess-add", "qu-add")  # --quick: one Newton variant stands for all.


@dataclasses.dataclass(frozen=True)
class Grids:
  """The tuning grids of one run (full or ``--quick``)."""

  epsilons: tuple[float, ...]
  gd_steps: tuple[int, ...]
  gd_max_steps: int  # dp-gd (eta = 4): doubled up to this for top-edge levels.
  step_learning_rates: tuple[float, ...]
  max_eta_steps: float  # the tuned-step families keep eta * T <= this.
  precond_steps: tuple[int, ...]
  kappas: tuple[float, ...]
  precond_learning_rates: tuple[float, ...]  # the first also runs every output program.
  precond_averages: tuple[str, ...]  # programs run; "none" is read from the first.
  curvature_frac: float
  newton_steps: tuple[int, ...]
  extend_down: bool


FULL = Grids(
    epsilons=EPSILONS,
    gd_steps=(25, 50, 100, 200, 400, 800, 1600, 3200),
    gd_max_steps=6_400,
    step_learning_rates=(4.0, 16.0, 64.0),
    max_eta_steps=12_800,
    precond_steps=(5, 10, 20, 40, 80, 160, 320, 640),
    kappas=(1.5, 3.0, 6.0),
    precond_learning_rates=(1.0, 2.0, 4.0),
    precond_averages=("last-half", "last-quarter"),
    curvature_frac=0.03,
    newton_steps=(2, 4, 8, 16, 32, 64),
    extend_down=True,
)
QUICK = Grids(
    epsilons=(1.0, 10.0),
    gd_steps=(25, 100),
    gd_max_steps=100,
    step_learning_rates=(4.0, 16.0),
    max_eta_steps=400,
    # One m: 160 is what auto picks for the quick data at eps = 1, so that
    # precond-gd's timed program is also auto's (one compilation fewer).
    precond_steps=(160,),
    kappas=(3.0,),
    precond_learning_rates=(1.0, 2.0),
    precond_averages=("last-half",),
    curvature_frac=0.03,
    newton_steps=(2,),
    extend_down=False,
)
# --quick --smoke: one level and one point per grid. The tuned-step families' one eta is
# dp-gd's, so they share its runs; precond-gd's one program gives two candidates (its final
# iterate and its last-half average); every run (selection, fresh, match) has one level and
# the same repeats, so each configuration is one compiled program.
SMOKE = Grids(
    epsilons=(1.0,),
    gd_steps=(25,),
    gd_max_steps=25,
    step_learning_rates=(4.0,),
    max_eta_steps=100,
    precond_steps=(10,),
    kappas=(3.0,),
    precond_learning_rates=(1.0,),
    precond_averages=("last-half",),
    curvature_frac=0.03,
    newton_steps=(2,),
    extend_down=False,
)


def eps_key(epsilon: float) -> str:
  """The JSON key of a privacy level."""
  return format(float(epsilon), "g")


def _stats(values: Any) -> dict[str, Any]:
  v = np.asarray(values, np.float64)
  se = float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
  return {"mean": float(np.mean(v)), "se": se, "excess_losses": [float(x) for x in v]}


def _options_key(options: dict[str, Any]) -> tuple:
  return tuple(sorted(options.items()))


def timing_key(algorithm: str, steps: int, average: str, options: dict[str, Any]) -> str:
  """The key of a one-run time: the program, not the cost-free options."""
  extra = "".join(f"|{k}={v}" for k, v in sorted(options.items()) if k not in COST_FREE_OPTIONS)
  return f"{algorithm}|T={steps}|avg={average}{extra}"


# ----------------------------------------------------------------------------
# Tuning.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Curve:
  """A 1-D grid over the number of steps at fixed options and program.

  ``metrics`` are the outputs read from each run (``"final"``: the final
  iterate; ``"output"``: the program's averaged output) and drive the
  extension rules; ``max_steps`` enables doubling at the top edge.
  """

  algorithm: str
  options: tuple  # sorted (name, value) pairs.
  run_average: str
  grid: tuple[int, ...]
  metrics: tuple[str, ...]
  max_steps: int | None = None
  early_stop: bool = False


def family_curves(family: str, grids: Grids) -> list[tuple[Curve, str]]:
  """(curve, metric) pairs whose candidates make up a tuned family."""
  gd = Curve("dp-gd", (("learning_rate", 4.0),), "last-half", grids.gd_steps, ("final", "output"),
             max_steps=grids.gd_max_steps)
  if family in ("dp-gd", "dp-gd+avg"):
    return [(gd, "final" if family == "dp-gd" else "output")]
  if family in ("dp-gd-step", "dp-gd-step+avg"):
    metric = "final" if family == "dp-gd-step" else "output"
    out = []
    for lr in grids.step_learning_rates:
      grid = tuple(t for t in grids.gd_steps if lr * t <= grids.max_eta_steps)
      out.append((Curve("dp-gd", (("learning_rate", float(lr)),), "last-half", grid,
                        ("final", "output")), metric))
    return out
  if family == "precond-gd":
    out = []
    for i, lr in enumerate(grids.precond_learning_rates):
      for kappa in grids.kappas:
        options = _options_key({"kappa": float(kappa), "curvature_frac": grids.curvature_frac,
                                "learning_rate": float(lr)})
        programs = grids.precond_averages if i == 0 else grids.precond_averages[:1]
        for j, avg in enumerate(programs):
          metrics = ("final", "output") if j == 0 else ("output",)
          curve = Curve("precond-gd", options, avg, grids.precond_steps, metrics)
          out += [(curve, m) for m in metrics]
    return out
  if family in NEWTON:
    return [(Curve(family, (), "none", grids.newton_steps, ("final",), early_stop=True), "final")]
  raise ValueError(f"family {family!r} has no grid")


def tune_steps(
    run: Callable[[int, list[str]], dict[str, dict[str, float]]],
    levels: Sequence[str],
    grid: Sequence[int],
    *,
    metrics: Sequence[str],
    early_stop: bool = False,
    max_steps: int | None = None,
    extend_down: bool = False,
) -> tuple[dict[str, dict[str, dict[int, float]]], dict[str, int]]:
  """Runs a steps grid at all levels with ``privacy_utility.tune``'s rules.

  ``run(steps, levels)`` runs one configuration and returns ``{level:
  {metric: mean, "start": excess loss at w_0}}``.

  1. The grid, upwards. With ``early_stop`` a level leaves once, for every
     metric, its mean has risen at ``EARLY_STOP_RISES`` grid points after its
     best and that best is below the start (a run still worse than ``w_0`` is
     diverging at small T, and longer runs can recover).
  2. ``max_steps``: while a level's best T (by any metric) is the largest it
     ran and it did not stop early, run it at twice that T, up to ``max_steps``.
  3. ``extend_down``: while a level's best T (by any metric) is the smallest it
     ran, run it at half that T (integer, down to 1).

  Returns:
    ``(history, stopped)``: ``history[level][metric][steps]`` = mean, and
    ``stopped[level]`` = the T after which an early-stopped level left.
  """
  history = {lv: {m: {} for m in metrics} for lv in levels}
  start: dict[str, float] = {}

  def do(steps: int, which: list[str]) -> None:
    out = run(steps, which)
    for lv in which:
      for m in metrics:
        history[lv][m][steps] = out[lv][m]
      start.setdefault(lv, out[lv]["start"])

  def best(lv: str, m: str) -> int:
    return min(history[lv][m], key=history[lv][m].get)

  active, stopped = list(levels), {}
  for steps in grid:
    if not active:
      break
    do(steps, list(active))
    if early_stop:
      for lv in list(active):
        done = all(
            sum(1 for t in history[lv][m] if t > best(lv, m)) >= EARLY_STOP_RISES
            and history[lv][m][best(lv, m)] < start[lv] for m in metrics)
        if done:
          stopped[lv] = steps
          active.remove(lv)
  top = max(grid)
  while max_steps and top * 2 <= max_steps:
    edge = [lv for lv in levels if lv not in stopped
            and any(best(lv, m) == max(history[lv][m]) == top for m in metrics)]
    if not edge:
      break
    top *= 2
    do(top, edge)
  while extend_down:
    low = [lv for lv in levels
           if any(best(lv, m) == min(history[lv][m]) > 1 for m in metrics)]
    if not low:
      break
    groups: dict[int, list[str]] = {}
    for lv in low:
      groups.setdefault(max(1, min(history[lv][metrics[0]]) // 2), []).append(lv)
    for steps, which in sorted(groups.items(), reverse=True):
      do(steps, which)
  return history, stopped


class Runner:
  """Runs configurations on one dataset, each (program, level) once per seed set.

  The selection runs (seed set A) and the fresh runs (seed set B) are cached
  separately by ``(algorithm, options, run_average, steps, seed)`` and level,
  so families that share a program (dp-gd and dp-gd+avg; the eta = 4 runs of
  the tuned-step families) share its runs.
  """

  def __init__(self, ds: data_lib.Dataset, epsilons: Sequence[float], loss_star: float,
               bar: Callable[[str], None]):
    self.ds, self.loss_star, self.bar = ds, loss_star, bar
    self.eps = {eps_key(e): float(e) for e in epsilons}
    self.cache: dict[tuple, dict[str, Any]] = {}

  def run(self, algorithm: str, options: dict[str, Any], run_average: str, steps: int,
          levels: Sequence[str], *, seed: int, repeats: int) -> dict[str, dict[str, Any]]:
    """``{level: {output, final (stats), start, guard_resets, program_seconds, result}}``."""
    key = (algorithm, _options_key(options), run_average, int(steps), seed, repeats)
    missing = [lv for lv in levels if (key, lv) not in self.cache]
    if missing:
      opts = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                       for k, v in sorted(options.items()) if k != "curvature_frac")
      self.bar(f"{'fresh ' if seed != SELECT_SEED else ''}{algorithm} T={steps} {opts} "
               f"{run_average} ({len(missing)} eps)")
      results = training.fit_levels(
          self.ds, algorithm, epsilons=[self.eps[lv] for lv in missing], steps=int(steps),
          repeats=repeats, seed=seed, init=INIT, accounting=ACCOUNTING, average=run_average,
          **options)
      for lv, res in zip(missing, results):
        self.cache[(key, lv)] = {
            "output": _stats(res.excess_losses), "final": _stats(res.final_excess_losses),
            "start": float(np.mean(np.asarray(res.losses)[:, 0], dtype=np.float64) - res.loss_star),
            "guard_resets": int(np.sum(res.guard_resets)), "program_seconds": res.seconds_run,
            "gradient_evaluations": int(res.gradient_evaluations),
            "curvature_evaluations": int(res.curvature_evaluations)}
    return {lv: self.cache[(key, lv)] for lv in levels}


def _output_average(metric: str, run_average: str) -> str:
  return "none" if metric == "final" else run_average


def tune_family(runner: Runner, family: str, grids: Grids, repeats: int) -> dict[str, Any]:
  """Tunes one family on seed set A; returns its record without ``fresh``."""
  levels = list(runner.eps)
  candidates: dict[tuple, dict[str, Any]] = {}
  curves = []
  done_curves: dict[Curve, tuple] = {}
  for curve, metric in family_curves(family, grids):
    options = dict(curve.options)
    if curve not in done_curves:
      def point(steps: int, which: list[str], curve=curve, options=options):
        out = runner.run(curve.algorithm, options, curve.run_average, steps, which,
                         seed=SELECT_SEED, repeats=repeats)
        return {lv: {"final": r["final"]["mean"], "output": r["output"]["mean"],
                     "start": r["start"]} for lv, r in out.items()}
      done_curves[curve] = tune_steps(
          point, levels, curve.grid, metrics=curve.metrics, early_stop=curve.early_stop,
          max_steps=curve.max_steps, extend_down=grids.extend_down)
    history, stopped = done_curves[curve]
    average = _output_average(metric, curve.run_average)
    steps_run = {lv: sorted(history[lv][metric]) for lv in levels}
    curves.append({"algorithm": curve.algorithm, "options": options,
                   "run_average": curve.run_average, "metric": metric, "steps_run": steps_run,
                   "stopped_after": dict(stopped)})
    for lv in levels:
      for steps in steps_run[lv]:
        r = runner.run(curve.algorithm, options, curve.run_average, steps, [lv],
                       seed=SELECT_SEED, repeats=repeats)[lv]
        ckey = (steps, curve.options, average)
        cand = candidates.setdefault(ckey, {"steps": steps, "options": options,
                                            "average": average,
                                            "run_average": curve.run_average, "results": {}})
        cand["results"][lv] = {**r[metric], "guard_resets": r["guard_resets"],
                               "program_seconds": r["program_seconds"]}
  cand_list = sorted(candidates.values(), key=lambda c: (
      c["average"], sorted(c["options"].items()), c["steps"]))
  return {"label": LABELS[family], "algorithm": curves[0]["algorithm"], "curves": curves,
          "candidates": cand_list, "selected": select(cand_list, curves, levels)}


def _curve_of(curves: list[dict], cand: dict) -> dict:
  return next(c for c in curves if c["options"] == cand["options"]
              and _output_average(c["metric"], c["run_average"]) == cand["average"]
              and c["run_average"] == cand["run_average"])


def select(candidates: list[dict], curves: list[dict], levels: Sequence[str]) -> dict[str, dict]:
  """Per level, the candidate with the smallest selection mean, and its grid-edge flag."""
  out = {}
  for lv in levels:
    here = [c for c in candidates if lv in c["results"]]
    if not here:
      continue
    best = min(here, key=lambda c: c["results"][lv]["mean"])
    curve = _curve_of(curves, best)
    ran = curve["steps_run"][lv]
    edge = None
    if best["steps"] == max(ran) and lv not in curve["stopped_after"]:
      edge = "high"
    elif best["steps"] == min(ran) and best["steps"] > 1:
      edge = "low"
    out[lv] = {"steps": best["steps"], "options": best["options"], "average": best["average"],
               "run_average": best["run_average"], "mean": best["results"][lv]["mean"],
               "se": best["results"][lv]["se"], "edge": edge}
  return out


def fresh_runs(runner: Runner, records: dict[str, dict], repeats: int) -> None:
  """Re-runs every family's selected configurations on seed set B (in place).

  Configurations that share a program (algorithm, steps, options, program
  output rule) run once, all their levels in one compiled program.
  """
  groups: dict[tuple, list[str]] = {}
  for rec in records.values():
    for lv, sel in rec["selected"].items():
      key = (rec["algorithm"], _options_key(sel["options"]), sel["run_average"], sel["steps"])
      groups.setdefault(key, [])
      if lv not in groups[key]:
        groups[key].append(lv)
  for (alg, options, run_average, steps), lvs in groups.items():
    runner.run(alg, dict(options), run_average, steps, lvs, seed=REPORT_SEED, repeats=repeats)
  for rec in records.values():
    rec["fresh"] = {}
    for lv, sel in rec["selected"].items():
      r = runner.run(rec["algorithm"], sel["options"], sel["run_average"], sel["steps"], [lv],
                     seed=REPORT_SEED, repeats=repeats)[lv]
      metric = "final" if sel["average"] == "none" else "output"
      rec["fresh"][lv] = {
          "algorithm": rec["algorithm"], "steps": sel["steps"], "options": sel["options"],
          "average": sel["average"], "seed": REPORT_SEED, "repeats": repeats, **r[metric],
          "guard_resets": r["guard_resets"], "gradient_evaluations": r["gradient_evaluations"],
          "curvature_evaluations": r["curvature_evaluations"],
          "timing_key": timing_key(rec["algorithm"], sel["steps"], sel["average"], sel["options"]),
          "selection_mean": sel["mean"], "selection_se": sel["se"]}


def auto_module() -> tuple[Any, str | None]:
  """``(dpjax.training.auto, None)``, or ``(None, why)`` while it does not import."""
  try:
    from dpjax.training import auto  # pylint: disable=g-import-not-at-top
  except ImportError as err:
    return None, f"dpjax.training.auto does not import ({err}); the auto family is skipped."
  return auto, None


def run_auto(ds: data_lib.Dataset, auto: Any, epsilons: Sequence[float], delta: float,
             repeats: int, bar: Callable[[str], None]) -> dict[str, Any]:
  """The auto row: ``auto.choose`` per eps, run once on the fresh repeats (no tuning)."""
  n, d = (int(v) for v in np.shape(ds.x))
  rec = {"label": LABELS["auto"], "algorithm": None, "choice": {}, "fresh": {}}
  for eps in epsilons:
    lv = eps_key(eps)
    choice = auto.choose(n=n, d=d, epsilon=float(eps), delta=delta)
    options = dict(choice.options)
    fields = choice._asdict() if hasattr(choice, "_asdict") else {}
    rec["choice"][lv] = {**{k: v for k, v in fields.items() if isinstance(v, (int, float, str))},
                         "algorithm": choice.algorithm, "steps": int(choice.steps),
                         "average": choice.average, "options": options, "reason": choice.reason}
    bar(f"auto eps={lv}: {choice.algorithm} T={choice.steps}")
    res = dpjax.fit(ds, choice.algorithm, epsilon=float(eps), delta=delta, steps=int(choice.steps),
                    repeats=repeats, seed=REPORT_SEED, init=INIT, accounting=ACCOUNTING,
                    average=choice.average, **options)
    rec["fresh"][lv] = {
        "algorithm": choice.algorithm, "steps": int(choice.steps), "options": options,
        "average": res.average, "seed": REPORT_SEED, "repeats": repeats,
        **_stats(res.excess_losses), "guard_resets": int(np.sum(res.guard_resets)),
        "gradient_evaluations": int(res.gradient_evaluations),
        "curvature_evaluations": int(res.curvature_evaluations),
        "timing_key": timing_key(choice.algorithm, int(choice.steps), res.average, options),
        "selection_mean": None, "selection_se": None}
  algs = {c["algorithm"] for c in rec["choice"].values()}
  rec["algorithm"] = algs.pop() if len(algs) == 1 else "mixed"
  return rec


# ----------------------------------------------------------------------------
# Timing.
# ----------------------------------------------------------------------------


def curve_points(payload: dict, family: str, level: str) -> list[dict]:
  """The plot's curve of a family at one level: ``[{steps, mean, se, timing_key}]``.

  dp-gd / dp-gd+avg: every T of the eta = 4 grid; precond-gd: every m at the
  level's selected kappa and output rule. Selection (seed set A) means.
  """
  rec = payload["families"].get(family)
  if rec is None or level not in rec.get("selected", {}):
    return []
  sel = rec["selected"][level]
  out = []
  for c in rec["candidates"]:
    if (c["options"] != sel["options"] or c["average"] != sel["average"]
        or level not in c["results"]):
      continue
    r = c["results"][level]
    out.append({"steps": c["steps"], "mean": r["mean"], "se": r["se"],
                "timing_key": timing_key(rec["algorithm"], c["steps"], c["average"],
                                         c["options"])})
  return sorted(out, key=lambda p: p["steps"])


def plot_level(epsilons: Sequence[float]) -> str:
  eps = [float(e) for e in epsilons]
  return eps_key(PLOT_EPSILON if PLOT_EPSILON in eps else eps[len(eps) // 2])


def measure_times(ds: data_lib.Dataset, requests: dict[str, tuple], epsilon: float,
                  bar: Callable[[str], None]) -> dict[str, dict]:
  """One-run seconds (``dpjax.fit``, repeats=1, compile excluded) per program.

  ``requests``: ``{timing_key: (algorithm, steps, average, options)}``. Each
  runs ``TIMING_RUNS`` times and the fastest is kept (the first execution of a
  fresh program pays one-time costs); walking each algorithm's T upwards, once
  a run took ``LONG_RUN_SECONDS`` the longer ones execute once.
  """
  out = {}
  long_run: set[str] = set()
  for key, (alg, steps, average, options) in sorted(
      requests.items(), key=lambda kv: (kv[1][0], kv[1][1], kv[1][2])):
    runs = 1 if alg in long_run else TIMING_RUNS
    bar(f"time {key}")
    res = dpjax.fit(ds, alg, epsilon=epsilon, steps=int(steps), repeats=1, seed=REPORT_SEED,
                    init=INIT, accounting=ACCOUNTING, timing_runs=runs, average=average,
                    **options)
    out[key] = {"algorithm": alg, "steps": int(steps), "average": average, "options": options,
                "seconds_run": res.seconds_run, "seconds_compile": res.seconds_compile,
                "executions": runs}
    if res.seconds_run >= LONG_RUN_SECONDS:
      long_run.add(alg)
  return out


def timing_requests(payload: dict, families: Sequence[str]) -> dict[str, tuple]:
  """The programs to time: each family's fresh configurations and the plot's curves."""
  req = {}
  level = plot_level(payload["epsilons"])
  for fam in families:
    rec = payload["families"].get(fam)
    if rec is None:
      continue
    for f in rec["fresh"].values():
      req[f["timing_key"]] = (f["algorithm"], f["steps"], f["average"], f["options"])
    if fam in ("dp-gd", "dp-gd+avg", "precond-gd"):
      sel = rec["selected"].get(level)
      for p in curve_points(payload, fam, level):
        req.setdefault(p["timing_key"], (rec["algorithm"], p["steps"], sel["average"],
                                         sel["options"]))
  return req


# ----------------------------------------------------------------------------
# One dataset.
# ----------------------------------------------------------------------------


def load(name: str, data_dir: pathlib.Path) -> data_lib.Dataset:
  """A dataset of ``_harness.DATASETS``, or a generated one of :data:`GENERATED` (``--quick``)."""
  if name in GENERATED:
    n, d = GENERATED[name]
    return data_lib.synthetic(0, n=n, d=d)
  return _harness.load_dataset(name, data_dir)


def _estimate_ticks(families: Sequence[str], grids: Grids) -> int:
  """About how many programs a dataset runs (the progress bar may overrun it)."""
  down = 3 if grids.extend_down else 0
  n = 0
  if any(f.startswith("dp-gd") for f in families):  # the eta = 4 grid, shared.
    n += len(grids.gd_steps) + (1 if grids.gd_max_steps > max(grids.gd_steps) else 0) + down
    n += 2 * len(grids.gd_steps)  # timing of the plot's curves.
  if any(f.startswith("dp-gd-step") for f in families):
    n += sum(1 for lr in grids.step_learning_rates[1:] for t in grids.gd_steps
             if lr * t <= grids.max_eta_steps) + down
  if "precond-gd" in families:
    programs = len(grids.precond_averages) + len(grids.precond_learning_rates) - 1
    n += (len(grids.precond_steps) + down) * len(grids.kappas) * programs + len(grids.epsilons)
    n += len(grids.precond_steps)  # timing of the plot's curve.
  n += sum(len(grids.newton_steps) + 1 for f in families if f in NEWTON)
  n += 2 * len(families) * len(grids.epsilons) // 2  # fresh runs and their timing, shared.
  return n


def run_dataset(name: str, args: argparse.Namespace, grids: Grids, families: Sequence[str],
                desc: str, old: dict[str, Any] | None = None) -> dict[str, Any]:
  """Tunes, re-runs and times ``families`` on one dataset; returns its payload.

  ``old``: the existing per-dataset payload that this run will be merged into
  (its dp-gd record is the target of precond-gd's match when dp-gd is not rerun).
  """
  t0 = time.perf_counter()
  ds = load(name, args.data_dir)
  n, d = (int(v) for v in np.shape(ds.x))
  delta = 1.0 / n**2
  loss_star, ridge = training.optimum_loss(ds.x, ds.y)
  progress = _harness.ProgressBar(_estimate_ticks(families, grids), f"{desc} {name}")
  runner = Runner(ds, grids.epsilons, loss_star, progress.update)
  machine = _harness.machine_info()
  compiled.clear()  # the compile times below are cold compiles, not earlier calls' programs
  provenance = {k: machine.get(k) for k in ("command", "commit", "dirty", "date")}
  payload: dict[str, Any] = {
      "machine": machine, "quick": bool(args.quick), "dataset": name, "n": n, "d": d,
      "delta": delta, "loss_star": loss_star, "ridge": ridge,
      "start_excess": float(np.log(2.0) - loss_star) if INIT == "zeros" else None,
      "epsilons": [float(e) for e in grids.epsilons], "accounting": ACCOUNTING, "init": INIT,
      "select_seed": SELECT_SEED, "report_seed": REPORT_SEED, "timing": {}, "history": [],
      "skipped": {}, "families": {},
  }
  tuned = {}
  for fam in families:
    if fam == "auto":
      continue
    rec = tune_family(runner, fam, grids, args.repeats)
    rec.update(repeats=args.repeats, report_repeats=args.report_repeats, run=provenance)
    tuned[fam] = rec
  fresh_runs(runner, tuned, args.report_repeats)
  if "precond-gd" in tuned:
    baseline = tuned.get(BASELINE) or (old or {}).get("families", {}).get(BASELINE)
    match_runs(runner, tuned["precond-gd"], baseline, args.report_repeats)
  payload["families"].update(tuned)
  if "auto" in families:
    auto, why = auto_module()
    if auto is None:
      print(f"note: {why}", file=sys.stderr, flush=True)
      payload["skipped"]["auto"] = why
    else:
      rec = run_auto(ds, auto, grids.epsilons, delta, args.report_repeats, progress.update)
      rec.update(repeats=0, report_repeats=args.report_repeats, run=provenance)
      payload["families"]["auto"] = rec
  order = {f: k for k, f in enumerate(FAMILY_IDS)}
  payload["families"] = dict(sorted(payload["families"].items(), key=lambda kv: order[kv[0]]))
  timing_eps = float(plot_level(grids.epsilons))
  payload["timing"] = measure_times(ds, timing_requests(payload, families), timing_eps,
                                    progress.update)
  for rec in payload["families"].values():
    for f in rec["fresh"].values():
      t = payload["timing"][f["timing_key"]]
      f["seconds"], f["seconds_executions"] = t["seconds_run"], t["executions"]
  progress.close()
  seconds = time.perf_counter() - t0
  payload["history"].append({"families": list(families), **provenance, "seconds": seconds})
  payload["seconds_total"] = seconds
  payload["machine"]["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
  return payload


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
  """``new``'s families replace the same families of ``old``; the others are kept.

  Raises:
    ValueError: the two describe different data or privacy levels.
  """
  for k in ("dataset", "n", "d", "epsilons", "accounting", "init", "select_seed", "report_seed"):
    if old.get(k) != new.get(k):
      raise ValueError(
          f"cannot merge into the existing {old.get('dataset')} results: {k} is {old.get(k)!r} "
          f"there and {new.get(k)!r} now; rerun all families (omit --families) or use another "
          "--out-dir.")
  if not math.isclose(old["loss_star"], new["loss_star"], rel_tol=1e-9, abs_tol=1e-12):
    raise ValueError(f"loss_star differs from the existing {old['dataset']} results.")
  merged = dict(old)
  merged["families"] = {**old["families"], **new["families"]}
  merged["timing"] = {**old.get("timing", {}), **new["timing"]}
  merged["skipped"] = {k: v for k, v in {**old.get("skipped", {}), **new["skipped"]}.items()
                       if k not in new["families"] and k not in merged["families"]}
  merged["history"] = old.get("history", []) + new["history"]
  merged["machine"] = new["machine"]
  merged["quick"] = bool(old.get("quick")) or bool(new.get("quick"))
  merged["seconds_total"] = sum(h["seconds"] for h in merged["history"])
  order = {f: k for k, f in enumerate(FAMILY_IDS)}
  merged["families"] = dict(sorted(merged["families"].items(), key=lambda kv: order[kv[0]]))
  return merged


# ----------------------------------------------------------------------------
# Report.
# ----------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
  if a is None or b is None or not b > 0:
    return None
  return a / b


def frontier_rows(payload: dict) -> list[dict]:
  """One row per (family, eps): fresh result, ratios, configuration, cost."""
  fams = payload["families"]
  rows = []
  for fam in FAMILY_IDS:
    rec = fams.get(fam)
    if rec is None:
      continue
    for eps in payload["epsilons"]:
      lv = eps_key(eps)
      f = rec["fresh"].get(lv)
      if f is None:
        continue
      base = fams.get(BASELINE, {}).get("fresh", {}).get(lv)
      strong = fams.get(STRONGEST_FIRST_ORDER, {}).get("fresh", {}).get(lv)
      sel = rec.get("selected", {}).get(lv, {})
      rows.append({
          "dataset": payload["dataset"], "epsilon": eps, "family": fam, "label": rec["label"],
          "algorithm": f["algorithm"], "steps": f["steps"], "options": f["options"],
          "average": f["average"], "edge": sel.get("edge"), "mean": f["mean"], "se": f["se"],
          "repeats": f["repeats"], "seed": f["seed"],
          "selection_mean": f["selection_mean"], "selection_se": f["selection_se"],
          "ratio_dp_gd": _ratio(f["mean"], base and base["mean"]),
          "ratio_strongest_first_order": _ratio(f["mean"], strong and strong["mean"]),
          "gradient_evaluations": f["gradient_evaluations"],
          "curvature_evaluations": f["curvature_evaluations"], "seconds": f.get("seconds")})
  return rows


def match_candidates(rec: dict, level: str, target: float) -> list[dict]:
  """The candidates (any options and output) whose selection mean is <= target, by (m, mean)."""
  hits = [c for c in rec["candidates"]
          if level in c["results"] and c["results"][level]["mean"] <= target]
  return sorted(hits, key=lambda c: (c["steps"], c["results"][level]["mean"]))


def match_candidate(rec: dict, level: str, target: float) -> dict | None:
  """The candidate of the smallest m whose selection mean is <= target (ties: smaller mean)."""
  hits = match_candidates(rec, level, target)
  return hits[0] if hits else None


def _no_worse(fresh: dict, base: dict) -> bool:
  """``mean_p <= mean_g + sqrt(se_p^2 + se_g^2)``: no worse within 1 s.e."""
  return bool(fresh["mean"] <= base["mean"] + math.hypot(fresh["se"], base["se"]))


def match_runs(runner: Any, rec: dict, baseline: dict | None, repeats: int) -> None:
  """Adds ``rec["match"]``: per level, precond-gd's smallest-m match of ``baseline``, re-run fresh.

  The target is the baseline's (dp-gd's) selection mean. The candidates that
  reach it on seed set A (:func:`match_candidates`, smallest m first) are
  re-run on seed set B one by one until one is no worse than the baseline's
  fresh mean within 1 s.e., at most ``MATCH_TRIES`` of them (the minimum over
  many configurations on seed set A is biased low, so the first may not hold).
  The record keeps the first confirmed candidate, else the last one tried, and
  the number of tries.
  """
  rec["match"] = {}
  if baseline is None:
    return
  for lv, gsel in baseline["selected"].items():
    base_fresh = baseline.get("fresh", {}).get(lv)
    for tries, cand in enumerate(match_candidates(rec, lv, gsel["mean"])[:MATCH_TRIES], 1):
      r = runner.run(rec["algorithm"], cand["options"], cand["run_average"], cand["steps"], [lv],
                     seed=REPORT_SEED, repeats=repeats)[lv]
      metric = "final" if cand["average"] == "none" else "output"
      fresh = {**r[metric], "seed": REPORT_SEED, "repeats": repeats,
               "gradient_evaluations": r["gradient_evaluations"]}
      rec["match"][lv] = {
          "target": gsel["mean"], "target_steps": gsel["steps"], "steps": cand["steps"],
          "options": cand["options"], "average": cand["average"],
          "run_average": cand["run_average"], "selection_mean": cand["results"][lv]["mean"],
          "tries": tries, "fresh": fresh}
      if base_fresh is None or _no_worse(fresh, base_fresh):
        break


def acceptance_rows(payloads: list[dict]) -> list[dict]:
  """Per (dataset, eps): precond-gd against dp-gd, and auto against the best tuned family."""
  rows = []
  for p in payloads:
    fams = p["families"]
    for eps in p["epsilons"]:
      lv = eps_key(eps)
      row: dict[str, Any] = {"dataset": p["dataset"], "epsilon": eps}
      g = fams.get(BASELINE, {}).get("fresh", {}).get(lv)
      pr = fams.get("precond-gd", {}).get("fresh", {}).get(lv)
      if g is not None and pr is not None:
        band = math.hypot(pr["se"], g["se"])
        ratio = _ratio(pr["mean"], g["mean"])
        gsel = fams[BASELINE]["selected"][lv]
        match = fams["precond-gd"].get("match", {}).get(lv)
        if match is not None and (match["target"] != gsel["mean"]
                                  or match["target_steps"] != gsel["steps"]):
          match = None  # made against an older dp-gd record: rerun precond-gd.
        m = match and match["steps"]
        confirmed = None
        if match is not None:
          confirmed = _no_worse(match["fresh"], g)
        row.update({
            "precond_mean": pr["mean"], "precond_se": pr["se"], "dp_gd_mean": g["mean"],
            "dp_gd_se": g["se"], "ratio": ratio,
            "no_worse_1se": bool(pr["mean"] <= g["mean"] + band),
            "ratio_le_0_9": bool(ratio is not None and ratio <= WIN_RATIO),
            "dp_gd_steps": gsel["steps"], "dp_gd_selection_mean": gsel["mean"],
            "precond_steps_to_match": m, "match": match, "match_confirmed": confirmed,
            "speedup": None if m is None else gsel["steps"] / m,
            "speedup_ge_5": bool(m is not None and confirmed and gsel["steps"] / m >= SPEEDUP)})
      a = fams.get("auto", {}).get("fresh", {}).get(lv)
      tuned = [(fam, fams[fam]["fresh"][lv]["mean"]) for fam in TUNED
               if fam in fams and lv in fams[fam]["fresh"]]
      if a is not None and tuned:
        best_fam, best = min(tuned, key=lambda t: t[1])
        ratio = _ratio(a["mean"], best)
        row.update({"auto_algorithm": a["algorithm"], "auto_mean": a["mean"],
                    "auto_se": a["se"], "best_tuned": best_fam, "best_tuned_mean": best,
                    "auto_ratio": ratio,
                    "auto_le_1_25": bool(ratio is not None and ratio <= AUTO_RATIO)})
      rows.append(row)
  return rows


def acceptance_summary(rows: list[dict]) -> dict[str, Any]:
  """Counts of the cells that meet each criterion (measured, not asserted)."""
  cells = [r for r in rows if "ratio" in r]
  auto = [r for r in rows if "auto_ratio" in r]
  wins = sum(r["ratio_le_0_9"] for r in cells)
  return {
      "cells": len(cells),
      "no_worse_1se": sum(r["no_worse_1se"] for r in cells),
      "no_worse_1se_all": bool(cells) and all(r["no_worse_1se"] for r in cells),
      "ratio_le_0_9": wins,
      "ratio_le_0_9_at_least_half": bool(cells) and 2 * wins >= len(cells),
      "speedup_ge_5": sum(r["speedup_ge_5"] for r in cells),
      "speedup_never": sum(r["precond_steps_to_match"] is None for r in cells),
      "match_unconfirmed": sum(r["match_confirmed"] is False for r in cells),
      # "wherever it reaches it": cells where precond-gd never matches are counted apart.
      "speedup_ge_5_all": bool(cells) and all(
          r["speedup_ge_5"] for r in cells if r["precond_steps_to_match"] is not None),
      "auto_cells": len(auto),
      "auto_le_1_25": sum(r["auto_le_1_25"] for r in auto),
      "auto_le_1_25_all": bool(auto) and all(r["auto_le_1_25"] for r in auto),
  }


def _short_command(command: str) -> str:
  """``privacy_utility.py --frontier ...``: the command without the interpreter's path."""
  try:
    parts = shlex.split(command)
  except ValueError:
    return command
  if len(parts) > 1 and "python" in os.path.basename(parts[0]):
    parts = parts[1:]
  if parts:
    parts[0] = os.path.basename(parts[0])
  return " ".join(shlex.quote(a) for a in parts)


def _fmt(v: float | None) -> str:
  if v is None:
    return "n/a"
  return f"{v:.3g}" if abs(v) >= 1e-3 else f"{v:.2e}"


def _fmt_loss(mean: float, se: float | None = None) -> str:
  return _fmt(mean) if se is None else f"{_fmt(mean)} ± {_fmt(se)}"


def _fmt_ratio(r: float | None) -> str:
  return "n/a" if r is None else f"{r:.2f}"


def config_text(algorithm: str, steps: int, options: dict, average: str, edge: str | None,
                with_algorithm: bool = False) -> str:
  """``T=800``, ``η=16, T=400, last-half``, ``m=160, κ=3, last-half (edge)``, ..."""
  parts = [algorithm] if with_algorithm else []
  if algorithm == "precond-gd":
    parts.append(f"m={steps}")
    if "kappa" in options:
      parts.append(f"κ={options['kappa']:g}")
    if options.get("learning_rate", 1.0) != 1.0:
      parts.append(f"η={options['learning_rate']:g}")
    if options.get("curvature_frac", 0.03) != 0.03:
      parts.append(f"q={options['curvature_frac']:g}")
    for k, v in sorted(options.items()):
      if k not in ("kappa", "curvature_frac", "learning_rate") and v is not None:
        parts.append(f"{k}={v}")
  else:
    if algorithm == "dp-gd":
      parts.append(f"η={options.get('learning_rate', 4.0):g}")
    parts.append(f"T={steps}")
    for k, v in sorted(options.items()):
      if k != "learning_rate" and v is not None:
        parts.append(f"{k}={v}")
  if average != "none":
    parts.append(average)
  text = ", ".join(parts)
  if edge == "high":
    text += " (edge)"
  elif edge == "low":
    text += " (low edge)"
  return text


def _protocol_lines(payloads: list[dict], quick: bool) -> list[str]:
  first = payloads[0] if payloads else {}
  fam = next((r for p in payloads for r in p["families"].values() if r.get("repeats")), {})
  return [
      "- protocol: every family tuned non-privately on seed set A (seed "
      f"{first.get('select_seed')}, {fam.get('repeats')} repeats); each family's best "
      "configuration per (dataset, eps) re-run on "
      f"{fam.get('report_repeats')} fresh repeats with seed set B "
      f"(seed {first.get('report_seed')}); "
      "tables show the fresh mean ± s.e. and the selection mean (sel.). eps in "
      f"{first.get('epsilons')}, delta = n^-2, exact gaussian accounting, init zeros; excess loss "
      "= loss of the output minus the exact optimum (float64)."
      + (" **Quick smoke run: tiny grids, not results.**" if quick else ""),
      "- grids: dp-gd η=4, T = 25 ... 3200 doubled to 6400 at the top edge; dp-gd+avg = the "
      "same runs, mean of the last half of the iterates; tuned step η ∈ {4, 16, 64} with "
      "ηT ≤ 12,800 (η = 4 stops at T = 3200); precond-gd m ∈ {5, 10, ..., 640}, κ ∈ {1.5, 3, 6}, "
      "η ∈ {1, 2, 4}, output ∈ {none, last-half, last-quarter (η = 1 only)}, curvature_frac 0.03; Newton variants "
      "T = 2 ... 64 (paper defaults, early stop past the best); every grid halved down to T = 1 "
      "while the best is its "
      "smallest value. auto: `dpjax.training.auto.choose` per eps, no tuning, fresh repeats only. "
      "(--quick uses the smaller grids of `_frontier.QUICK`, --quick --smoke the one-point "
      "grids of `_frontier.SMOKE`.)",
      "- \"(edge)\": the best T is the largest run; \"(low edge)\": the smallest. ×dp-gd: ratio to "
      "the acceptance baseline (dp-gd η=4, final iterate, tuned T); ×FO*: ratio to the strongest "
      "first-order baseline (dp-gd tuned step + avg). #grad/#curv: gradient / curvature (d×d + "
      "eigh) evaluations of one run; s: seconds of one run (repeats=1, compile excluded).",
  ]


def markdown(payloads: list[dict], info: dict, quick: bool) -> str:
  """The combined report: acceptance summary, then one frontier table per dataset."""
  lines = _harness.markdown_header(
      "Privacy–utility frontier: precond-gd against tuned first-order baselines (fresh repeats)",
      info)
  lines.append("- runs behind these tables (per-dataset JSON): " + "; ".join(
      f"{p['dataset']}: " + ", ".join(
          f"`{_short_command(h['command'])}` at {(h.get('commit') or '?')[:10]} "
          f"({h['seconds']:.0f} s)" for h in p.get("history", []))
      for p in payloads)
      + f"; total {sum(p.get('seconds_total', 0.0) for p in payloads) / 60:.1f} min.")
  lines += _protocol_lines(payloads, quick)
  skipped = {(p["dataset"], f): why for p in payloads for f, why in p.get("skipped", {}).items()}
  for (ds, f), why in skipped.items():
    lines.append(f"- {ds}: family `{f}` skipped: {why}")
  lines += [f"- ![frontier]({STEM}.png)", "", "## Acceptance summary (precond-gd vs dp-gd; auto vs "
            "the best tuned family)", ""]
  rows = acceptance_rows(payloads)
  summ = acceptance_summary(rows)
  lines += [
      f"- precond-gd no worse than dp-gd within 1 s.e. (mean_p ≤ mean_g + √(se_p² + se_g²)): "
      f"**{summ['no_worse_1se']} of {summ['cells']}** cells.",
      f"- precond-gd / dp-gd ≤ {WIN_RATIO}: **{summ['ratio_le_0_9']} of {summ['cells']}** cells "
      f"(criterion: at least half).",
      f"- gradient evaluations: dp-gd's T* / the smallest m at which some precond-gd "
      f"configuration's selection mean reaches dp-gd's selection mean ≥ {SPEEDUP:g}, with that "
      f"configuration no worse than dp-gd within 1 s.e. on the fresh repeats (the matching "
      f"configurations are tried smallest m first, at most {MATCH_TRIES}): "
      f"**{summ['speedup_ge_5']} of {summ['cells']}** cells ({summ['speedup_never']} never "
      f"reach it; {summ['match_unconfirmed']} matches not confirmed on the fresh repeats).",
      f"- auto / best tuned family ≤ {AUTO_RATIO}: **{summ['auto_le_1_25']} of "
      f"{summ['auto_cells']}** cells with an auto result.",
      "",
      "| dataset | eps | precond-gd | dp-gd | ratio | no worse (1 s.e.) | ≤ 0.9 | dp-gd T* "
      "| precond-gd m to match (config; fresh) | factor | auto | best tuned | auto / best |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  yes = {True: "yes", False: "**no**"}
  for r in rows:
    if "ratio" in r:
      m = r["precond_steps_to_match"]
      factor = "n/a" if m is None else f"{r['speedup']:.2g}×"
      if m is not None:
        mt = r["match"]
        o = mt["options"]
        tries = mt.get("tries", 1)
        m = (f"{m} (κ={o.get('kappa', 0):g}, η={o.get('learning_rate', 1.0):g}, {mt['average']}; "
             f"fresh {_fmt_loss(mt['fresh']['mean'], mt['fresh']['se'])}"
             f"{f', try {tries}' if tries > 1 else ''}"
             f"{'' if r['match_confirmed'] else ', **not confirmed**'})")
      p_cells = (f"{_fmt_loss(r['precond_mean'], r['precond_se'])} | "
                 f"{_fmt_loss(r['dp_gd_mean'], r['dp_gd_se'])} | {_fmt_ratio(r['ratio'])} | "
                 f"{yes[r['no_worse_1se']]} | {yes[r['ratio_le_0_9']]} | {r['dp_gd_steps']} | "
                 f"{'never' if m is None else m} | {factor}"
                 f"{'' if r['speedup_ge_5'] else ' (< 5)'}")
    else:
      p_cells = " | ".join(["n/a"] * 8)
    if "auto_ratio" in r:
      a_cells = (f"{_fmt_loss(r['auto_mean'], r['auto_se'])} ({r['auto_algorithm']}) | "
                 f"{r['best_tuned']} {_fmt(r['best_tuned_mean'])} | {_fmt_ratio(r['auto_ratio'])}"
                 f"{'' if r['auto_le_1_25'] else ' (> 1.25)'}")
    else:
      a_cells = "n/a | n/a | n/a"
    lines.append(f"| {r['dataset']} | {r['epsilon']:g} | {p_cells} | {a_cells} |")
  for p in payloads:
    lines += _dataset_section(p)
  return "\n".join(lines) + "\n"


def _dataset_section(p: dict) -> list[str]:
  eps = [eps_key(e) for e in p["epsilons"]]
  lines = [
      "",
      f"## {p['dataset']} (n = {p['n']:,}, d = {p['d']}, delta = {p['delta']:.3g}, "
      f"loss* = {p['loss_star']:.6f}{', ridge 1e-9' if p.get('ridge') else ''}; "
      f"{p.get('seconds_total', 0.0):.0f} s)",
      "",
      "| family | " + " | ".join(
          f"eps={e}: loss (sel.) | ×dp-gd | ×FO* | config | #grad/#curv | s" for e in eps) + " |",
      "|---|" + "---|---|---|---|---|---|" * len(eps),
  ]
  by = {(r["family"], eps_key(r["epsilon"])): r for r in frontier_rows(p)}
  for fam in FAMILY_IDS:
    if fam not in p["families"]:
      continue
    cells = []
    for e in eps:
      r = by.get((fam, e))
      if r is None:
        cells.append(" | ".join(["n/a"] * 6))
        continue
      sel = "no tuning" if r["selection_mean"] is None else f"sel. {_fmt(r['selection_mean'])}"
      cfg = config_text(r["algorithm"], r["steps"], r["options"], r["average"], r["edge"],
                        with_algorithm=(fam == "auto"))
      secs = "n/a" if r["seconds"] is None else f"{r['seconds']:.3g}"
      cells.append(f"{_fmt_loss(r['mean'], r['se'])} ({sel}) | {_fmt_ratio(r['ratio_dp_gd'])} | "
                   f"{_fmt_ratio(r['ratio_strongest_first_order'])} | {cfg} | "
                   f"{r['gradient_evaluations']}/{r['curvature_evaluations']} | {secs}")
    lines.append(f"| {p['families'][fam]['label']} | " + " | ".join(cells) + " |")
  choices = p["families"].get("auto", {}).get("choice", {})
  if choices:
    lines.append("")
    lines += [f"- auto at eps={e}: {c['reason']}" for e, c in choices.items()]
  return lines


def plot(payloads: list[dict], path: pathlib.Path) -> None:
  """Excess loss against one-run seconds at eps = 1, one panel per dataset (log-log)."""
  k = len(payloads)
  plt, fig, axes = _harness.panels(k, width=5.4, height=4.1, min_width=11.0, extra_height=1.4)
  colors = {f: f"C{j}" for j, f in enumerate(FAMILY_IDS)}
  markers = {"auto": "*", "dp-gd-step": "s", "dp-gd-step+avg": "D"}
  for ax, p in zip(axes.flat, payloads):
    lv = plot_level(p["epsilons"])
    timing = p.get("timing", {})
    for fam in ("dp-gd", "dp-gd+avg", "precond-gd"):
      pts = [q for q in curve_points(p, fam, lv) if q["timing_key"] in timing]
      if pts:
        label = f"{fam} grid (sel.)"
        if fam == "precond-gd":
          s = p["families"][fam]["selected"][lv]
          label = f"precond-gd grid, κ={s['options'].get('kappa', 0):g}, {s['average']} (sel.)"
        ax.plot([timing[q["timing_key"]]["seconds_run"] for q in pts],
                [max(q["mean"], 1e-7) for q in pts], "-", marker=".", ms=4,
                color=colors[fam], alpha=0.7, label=label)
    for fam in FAMILY_IDS:
      f = p["families"].get(fam, {}).get("fresh", {}).get(lv)
      if f is None or f.get("seconds") is None:
        continue
      ax.errorbar([f["seconds"]], [max(f["mean"], 1e-7)], yerr=[f["se"]], fmt=markers.get(fam, "o"),
                  ms=8 if fam == "auto" else 5, color=colors[fam], capsize=2,
                  label=f"{fam} selected (fresh)")
    _harness.log_log_panel(ax, f"{p['dataset']} (n={p['n']:,}, d={p['d']}), eps={lv}",
                           "seconds of one run (compile excluded)", "excess loss")
  _harness.hide_unused(axes, k)
  seen: dict[str, Any] = {}
  for ax in axes.flat[:k]:
    for h, lab in zip(*ax.get_legend_handles_labels()):
      key = lab.split(",")[0] if lab.startswith("precond-gd grid") else lab
      seen.setdefault(key, (h, "precond-gd grid (selected κ, output)" if key != lab else lab))
  fig.legend([h for h, _ in seen.values()], [lab for _, lab in seen.values()],
             loc="lower center", ncol=3, fontsize=8)
  fig.suptitle("Privacy–utility frontier at eps = 1: excess loss against one-run time\n"
               "(lines: selection grids, seed set A; markers: selected configurations, fresh "
               "repeats, seed set B)", fontsize=10)
  fig.tight_layout(rect=(0, 1.3 / (4.1 * axes.shape[0] + 1.4), 1, 0.94))
  fig.savefig(path, dpi=110)
  plt.close(fig)


def report(directory: pathlib.Path, info: dict, quick: bool,
           names: Sequence[str] | None = None) -> pathlib.Path:
  """Rebuilds the combined JSON, markdown and PNG from the per-dataset files."""
  order = {n: k for k, n in enumerate((*DEFAULT_DATASETS, *GENERATED, *_harness.DATASETS))}
  payloads = []
  for f in directory.glob(f"{STEM}_*.json"):
    p = json.loads(f.read_text())
    if names is None or p["dataset"] in names:
      payloads.append(p)
  payloads.sort(key=lambda p: order.get(p["dataset"], 99))
  if not payloads:
    raise FileNotFoundError(f"no {STEM}_<dataset>.json in {directory}; run the benchmark first.")
  rows = acceptance_rows(payloads)
  combined = {"machine": info, "quick": quick or any(p.get("quick") for p in payloads),
              "datasets": payloads, "frontier": [r for p in payloads for r in frontier_rows(p)],
              "acceptance": {"rows": rows, "summary": acceptance_summary(rows)}}
  md = markdown(payloads, info, combined["quick"])
  _, md_path = _harness.write_results(directory, STEM, combined, md)
  plot(payloads, directory / f"{STEM}.png")
  return md_path


def rematch(directory: pathlib.Path, args: argparse.Namespace, info: dict) -> int:
  """``--rematch``: recomputes ``precond-gd``'s match in every per-dataset file (no retuning)."""
  paths = sorted(directory.glob(f"{STEM}_*.json"))
  payloads = [(path, json.loads(path.read_text())) for path in paths]
  payloads = [(path, p) for path, p in payloads
              if args.datasets is None or p["dataset"] in args.datasets]
  if not payloads:
    print(f"error: no {STEM}_<dataset>.json in {directory}; run the benchmark first.",
          file=sys.stderr)
    return 2
  names = [p["dataset"] for _, p in payloads if p["dataset"] not in GENERATED]
  if not _harness.data_files_present(names, args.data_dir):
    return 2
  provenance = {k: info.get(k) for k in ("command", "commit", "dirty", "date")}
  for path, p in payloads:
    fams = p["families"]
    if "precond-gd" not in fams or BASELINE not in fams:
      print(f"{p['dataset']}: no precond-gd and {BASELINE} records; skipped.", file=sys.stderr)
      continue
    t0 = time.perf_counter()
    ds = load(p["dataset"], args.data_dir)
    bar = _harness.ProgressBar(len(p["epsilons"]) * MATCH_TRIES, f"rematch {p['dataset']}")
    runner = Runner(ds, p["epsilons"], p["loss_star"], bar.update)
    rec = fams["precond-gd"]
    match_runs(runner, rec, fams[BASELINE], rec["report_repeats"])
    bar.close()
    seconds = time.perf_counter() - t0
    p["history"].append({"families": ["precond-gd (match only)"], **provenance,
                         "seconds": seconds})
    p["seconds_total"] = sum(h["seconds"] for h in p["history"])
    _harness.write_results(directory, path.stem, p, "")
    (directory / f"{path.stem}.md").unlink()
    print(f"{p['dataset']}: {seconds:.0f} s", file=sys.stderr, flush=True)
  md_path = report(directory, info, args.quick)
  print(md_path.read_text())
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  """The ``--frontier`` command line (``privacy_utility.py --frontier`` delegates here)."""
  parser = argparse.ArgumentParser(
      prog="privacy_utility.py --frontier", description=__doc__.splitlines()[0])
  _harness.add_common_args(parser)
  parser.add_argument("--datasets", nargs="+", default=None,
                      choices=sorted([*_harness.DATASETS, *GENERATED]))
  parser.add_argument("--families", nargs="+", default=None, choices=FAMILY_IDS,
                      help="run only these families and merge them into the existing "
                           "per-dataset results (default: all)")
  parser.add_argument("--repeats", type=int, default=None,
                      help="selection repeats on seed set A (default 10; --quick 3)")
  parser.add_argument("--report-repeats", type=int, default=None,
                      help="fresh repeats on seed set B (default 20; --quick 3)")
  parser.add_argument("--rematch", action="store_true",
                      help="redo only precond-gd's gradient-evaluation match (match_runs: fresh "
                           "confirmation runs) in the existing per-dataset results, then rebuild "
                           "the report")
  parser.add_argument("--report-only", action="store_true",
                      help="rebuild the combined outputs from the per-dataset JSON files")
  parser.add_argument("--smoke", action="store_true",
                      help=f"with --quick: the same families, code and outputs on {SMOKE_DATASET} "
                           "at eps = 1 with one-point grids (_frontier.SMOKE: dp-gd T = 25, "
                           "precond-gd m = 10, qu-clip T = 2): the fewest compiled programs (the "
                           "test suite's default run)")
  args = _harness.parse_args(parser, argv)
  directory = _harness.out_dir(args)
  info = _harness.machine_info()
  if args.report_only:
    return _harness.print_report(report, directory, info, args.quick)
  if args.rematch:
    return rematch(directory, args, info)
  grids = SMOKE if args.smoke else QUICK if args.quick else FULL
  default_names = [SMOKE_DATASET] if args.smoke else [QUICK_DATASET] if args.quick else list(
      DEFAULT_DATASETS)
  names = args.datasets or default_names
  default_families = [f for f in FAMILY_IDS if not (args.quick and f in QUICK_SKIPS)]
  families = [f for f in FAMILY_IDS if f in (args.families or default_families)]
  if args.repeats is None:
    args.repeats = 3 if args.quick else 10
  if args.report_repeats is None:
    args.report_repeats = 3 if args.quick else 20
  if args.repeats < 2 or args.report_repeats < 2:
    parser.error("--repeats and --report-repeats must be >= 2 (a standard error needs two)")
  if not _harness.data_files_present([n for n in names if n not in GENERATED], args.data_dir):
    return 2
  t0 = time.perf_counter()
  for k, name in enumerate(names):
    path = directory / f"{STEM}_{name}.json"
    old = json.loads(path.read_text()) if args.families is not None and path.exists() else None
    payload = run_dataset(name, args, grids, families, f"[{k + 1}/{len(names)}]", old)
    if old is not None:
      try:
        payload = merge(old, payload)
      except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    _harness.write_results(directory, f"{STEM}_{name}", payload, "")
    (directory / f"{STEM}_{name}.md").unlink()
    print(f"{name}: {payload['history'][-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
  md_path = report(directory, info, args.quick)
  print(md_path.read_text())
  print(f"total {time.perf_counter() - t0:.0f} s; wrote {directory}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
