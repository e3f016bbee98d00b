"""Refits the constants of ``algorithm="auto"`` from the frontier results, and shows its limits.

``dpjax.training.auto`` picks precond-gd's m (or averaged DP-GD's T past the
crossover) from the public ``n``, ``d`` and ``rho`` only, by a doubling rule
``m = 10 * 2^round(a + b log10(n sqrt(rho)) + c log10(d))`` at fixed
``kappa``, learning rate and output rule. This script re-derives those
constants from the selection runs that ``privacy_utility.py --frontier``
already recorded (seed set A: every precond-gd configuration of the grid and
every dp-gd T, per dataset and eps), so the fit is reproducible from the
committed results without a sweep of its own:

* For every rule in a grid (``kappa`` and learning rate of the frontier's
  precond-gd grid, last-half output, ``a``, ``b``, ``c`` over
  :data:`A_GRID` x :data:`B_GRID` x :data:`C_GRID`; past the crossover ``d >=
  d*(kappa)`` the cell uses averaged DP-GD at ``dpjax.training.auto.dp_gd_steps``),
  each cell's score is the selection mean of the configuration the rule picks
  divided by the cell's best tuned fresh mean (the acceptance denominator of
  the frontier report). A rule whose pick is not in the recorded grid is
  skipped.
* It reports the best rules by worst cell (then geometric mean), the current
  rule's scores, how many rules of the grid meet a worst cell of ``<=
  --target`` (1.25) and, per cell, the range of m (at the current kappa,
  learning rate and output) within ``--target`` of the best: the admissible m.
  Two cells with (almost) the same ``n sqrt(rho)`` and ``d`` ordering but
  disjoint admissible ranges in the wrong order cannot both be met by any rule
  of this form; the report lists such pairs.

Scores use selection means (10 repeats) over fresh denominators (20 other
repeats): a screen, not the acceptance measurement, which is the ``auto`` row
of the frontier run itself.

Usage::

  python benchmarks/auto_fit.py [--frontier benchmarks/results/privacy_utility_frontier.json]
      [--target 1.25] [--out-dir benchmarks/results]

Outputs ``auto_fit.json`` and ``auto_fit.md`` in the out dir. It runs no
optimizer (seconds).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import pathlib
import sys
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402  pylint: disable=g-import-not-at-top

from dpjax.training import auto  # noqa: E402  pylint: disable=g-import-not-at-top

STEM = "auto_fit"
A_GRID = tuple(np.round(np.arange(-4.0, 8.0 + 1e-9, 0.25), 4))
B_GRID = tuple(np.round(np.arange(0.0, 2.0 + 1e-9, 0.125), 4))
C_GRID = tuple(np.round(np.arange(-1.5, 1.5 + 1e-9, 0.25), 4))
AVERAGE = "last-half"
TOP = 10


def cells_from(frontier: dict[str, Any]) -> list[dict[str, Any]]:
  """Per (dataset, eps): the recorded selection means the rules are scored on."""
  best = {(r["dataset"], r["epsilon"]): r["best_tuned_mean"]
          for r in frontier["acceptance"]["rows"] if "best_tuned_mean" in r}
  cells = []
  for p in frontier["datasets"]:
    fams = p["families"]
    if "precond-gd" not in fams or "dp-gd+avg" not in fams:
      continue
    for eps in p["epsilons"]:
      lv = format(float(eps), "g")
      if (p["dataset"], eps) not in best:
        continue
      precond = {}
      for c in fams["precond-gd"]["candidates"]:
        if lv in c["results"]:
          o = c["options"]
          precond[(float(o["kappa"]), float(o.get("learning_rate", 1.0)), c["average"],
                   int(c["steps"]))] = c["results"][lv]["mean"]
      gd = {int(c["steps"]): c["results"][lv]["mean"]
            for c in fams["dp-gd+avg"]["candidates"] if lv in c["results"]
            and float(c["options"].get("learning_rate", 4.0)) == 4.0}
      rho = fams.get("auto", {}).get("choice", {}).get(lv, {}).get("rho")
      if rho is None:
        from dpjax import accounting  # pylint: disable=g-import-not-at-top
        rho = accounting.resolve_budget(p["n"], epsilon=eps, delta=p["delta"],
                                        method=p["accounting"])[0]
      cells.append({"dataset": p["dataset"], "epsilon": eps, "n": p["n"], "d": p["d"],
                    "rho": float(rho), "best": best[(p["dataset"], eps)],
                    "precond": precond, "gd": gd})
  return cells


def rule_steps(cell: dict, a: float, b: float, c: float) -> int:
  """m = 10 * 2^round(a + b log10(n sqrt(rho)) + c log10(d)), unclamped."""
  k = round(a + b * math.log10(cell["n"] * math.sqrt(cell["rho"])) + c * math.log10(cell["d"]))
  return int(10 * 2**k)


def score(cells: Sequence[dict], kappa: float, lr: float, a: float, b: float,
          c: float) -> list[float] | None:
  """Per cell: selection mean of the rule's pick / best tuned fresh mean; None if off-grid."""
  out = []
  for cell in cells:
    d_star = auto.precond_crossover_d(cell["n"], cell["rho"], kappa=kappa)
    if cell["d"] < d_star and cell["d"] <= auto.MAX_PRECOND_D:
      v = cell["precond"].get((kappa, lr, AVERAGE, rule_steps(cell, a, b, c)))
    else:
      v = cell["gd"].get(auto.dp_gd_steps(cell["n"], cell["d"], cell["rho"]))
    if v is None:
      return None
    out.append(v / cell["best"])
  return out


def admissible(cell: dict, kappa: float, lr: float, target: float) -> list[int]:
  """The m of the grid whose selection mean is within ``target`` of the cell's best."""
  return sorted(m for (k, l, avg, m), v in cell["precond"].items()
                if (k, l, avg) == (kappa, lr, AVERAGE) and v <= target * cell["best"])


def conflicts(cells: Sequence[dict], kappa: float, lr: float, target: float) -> list[dict]:
  """Pairs no rule m(n sqrt(rho), d), monotone in n sqrt(rho), can serve.

  Both cells in the precond branch, with ``n sqrt(rho)`` within a factor 1.1,
  and disjoint admissible m ranges: one rule must give both cells m from
  their ranges, yet their ``n sqrt(rho)`` agree, so only ``d`` can separate
  them, and the list shows in which direction ``c`` must go for each pair.
  """
  pre = [c for c in cells
         if c["d"] < auto.precond_crossover_d(c["n"], c["rho"], kappa=kappa)]
  out = []
  for p, q in itertools.combinations(pre, 2):
    sp, sq = (c["n"] * math.sqrt(c["rho"]) for c in (p, q))
    if max(sp, sq) / min(sp, sq) > 1.1:
      continue
    mp, mq = admissible(p, kappa, lr, target), admissible(q, kappa, lr, target)
    if not mp or not mq or (max(mp) >= min(mq) and max(mq) >= min(mp)):
      continue
    more = p if min(mp) > max(mq) else q  # the cell that needs more steps.
    fewer = q if more is p else p
    out.append({"cells": [f"{p['dataset']} eps={p['epsilon']:g}",
                          f"{q['dataset']} eps={q['epsilon']:g}"],
                "snr": [sp, sq], "d": [p["d"], q["d"]], "admissible_m": [mp, mq],
                "needs_more_steps": f"{more['dataset']} eps={more['epsilon']:g}",
                "c_sign_needed": "+" if more["d"] > fewer["d"] else "-"})
  return out


def fit(cells: Sequence[dict], target: float) -> dict[str, Any]:
  kappas = sorted({k for c in cells for (k, _, _, _) in c["precond"]})
  lrs = sorted({l for c in cells for (_, l, _, _) in c["precond"]})
  rules = []
  for kappa, lr, a, b, c in itertools.product(kappas, lrs, A_GRID, B_GRID, C_GRID):
    s = score(cells, kappa, lr, a, b, c)
    if s is not None:
      rules.append({"kappa": kappa, "learning_rate": lr, "a": float(a), "b": float(b),
                    "c": float(c), "worst": max(s),
                    "geomean": float(np.exp(np.mean(np.log(s)))), "scores": s})
  rules.sort(key=lambda r: (round(r["worst"], 6), r["geomean"]))
  a, b, c = auto._PRECOND_RULE  # pylint: disable=protected-access
  current = score(cells, auto.KAPPA, 1.0, a, b, c)
  labels = [f"{c['dataset']} eps={c['epsilon']:g}" for c in cells]
  pairs = {}
  for kappa, lr in itertools.product(kappas, lrs):
    pairs[f"kappa={kappa:g}, eta={lr:g}"] = conflicts(cells, kappa, lr, target)
  return {
      "target": target, "cells": labels, "rules_scored": len(rules),
      "rules_meeting_target": sum(r["worst"] <= target for r in rules),
      "best": rules[:TOP],
      "current": {"kappa": auto.KAPPA, "learning_rate": 1.0, "a": a, "b": b, "c": c,
                  "scores": current,
                  "worst": None if current is None else max(current)},
      "admissible": {lab: admissible(cell, auto.KAPPA, 1.0, target)
                     for lab, cell in zip(labels, cells)},
      "conflicts": pairs,
  }


def markdown(result: dict[str, Any], info: dict[str, Any], source: str) -> str:
  t = result["target"]
  lines = _harness.markdown_header("Fit of the auto rule from the frontier selection runs", info)
  lines += [
      f"- source: `{source}` (seed set A selection means; denominators: the best tuned family's "
      "fresh mean per cell)",
      f"- rule: m = 10·2^round(a + b·log10(n√ρ) + c·log10 d), output {AVERAGE}; past d* averaged "
      "DP-GD at `auto.dp_gd_steps`; grid a ∈ [-4, 8] step 0.25, b ∈ [0, 2] step 0.125, "
      "c ∈ [-1.5, 1.5] step 0.25, κ and η from the frontier grid.",
      f"- rules scored: {result['rules_scored']}; with worst cell ≤ {t:g}: "
      f"**{result['rules_meeting_target']}**.",
      "",
      "| rank | κ | η | a | b | c | worst cell | geometric mean | cells > target |",
      "|---|---|---|---|---|---|---|---|---|",
  ]
  for i, r in enumerate(result["best"], 1):
    over = sum(s > t for s in r["scores"])
    lines.append(f"| {i} | {r['kappa']:g} | {r['learning_rate']:g} | {r['a']:g} | {r['b']:g} | "
                 f"{r['c']:g} | {r['worst']:.3f} | {r['geomean']:.3f} | {over} |")
  cur = result["current"]
  lines += ["", f"## Per cell: the current rule (κ = {cur['kappa']:g}, a = {cur['a']:g}, "
            f"b = {cur['b']:g}, c = {cur['c']:g}) and the best rule above", "",
            f"| cell | current | best rule | admissible m (κ = {cur['kappa']:g}, η = 1, within "
            f"{t:g}×) |", "|---|---|---|---|"]
  best = result["best"][0]["scores"] if result["best"] else None
  for k, lab in enumerate(result["cells"]):
    c = "n/a" if cur["scores"] is None else f"{cur['scores'][k]:.2f}"
    b = "n/a" if best is None else f"{best[k]:.2f}"
    adm = result["admissible"][lab]
    lines.append(f"| {lab} | {c} | {b} | {', '.join(map(str, adm)) or 'none'} |")
  lines += ["", "## Conflicting pairs (same n√ρ within 10%, disjoint admissible m)", ""]
  any_pair = False
  for key, pairs in result["conflicts"].items():
    for p in pairs:
      any_pair = True
      lines.append(f"- {key}: {p['cells'][0]} (n√ρ = {p['snr'][0]:.0f}, d = {p['d'][0]}, m ∈ "
                   f"{p['admissible_m'][0]}) vs {p['cells'][1]} (n√ρ = {p['snr'][1]:.0f}, d = "
                   f"{p['d'][1]}, m ∈ {p['admissible_m'][1]}): {p['needs_more_steps']} needs "
                   f"more steps, so c must be {p['c_sign_needed']}.")
  if not any_pair:
    lines.append("- none")
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--frontier", type=pathlib.Path,
                      default=_harness.RESULTS_DIR / "privacy_utility_frontier.json")
  parser.add_argument("--target", type=float, default=1.25)
  parser.add_argument("--out-dir", type=pathlib.Path, default=_harness.RESULTS_DIR)
  args = parser.parse_args(argv)
  if not args.frontier.exists():
    print(f"error: {args.frontier} not found; run `python benchmarks/privacy_utility.py "
          "--frontier` first or pass --frontier PATH.", file=sys.stderr)
    return 2
  if not args.target > 1.0:
    parser.error("--target must be > 1")
  frontier = json.loads(args.frontier.read_text())
  cells = cells_from(frontier)
  if not cells:
    print(f"error: {args.frontier} has no cell with precond-gd, dp-gd+avg and a best tuned "
          "family.", file=sys.stderr)
    return 2
  result = fit(cells, args.target)
  info = _harness.machine_info()
  args.out_dir.mkdir(parents=True, exist_ok=True)
  _, md = _harness.write_results(args.out_dir, STEM, {"machine": info, **result},
                                 markdown(result, info, str(args.frontier)))
  print(md.read_text())
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
