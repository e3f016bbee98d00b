"""Smoke and logic tests of the frontier benchmark (``privacy_utility.py --frontier``).

One run serves the schema, report and merge tests: ``--frontier --quick --smoke``
in the default run (every family, one level, one-point grids: the fewest compiled
programs), ``--frontier --quick`` under ``pytest --full``, whose quick-size
assertions (``test_quick_outputs_and_schema``) are that tier's. The acceptance
arithmetic and the tuning rules are checked on hand-made inputs.
Within this module every fit the benchmark makes is memoised (``fit_memo``):
the merge and rematch tests re-run configurations the quick run already ran
(same data, seed and options, hence the same numbers: fits are reproducible,
``test_training.py::test_repeats_independent_and_reproducible``), so they test
the bookkeeping without compiling those programs a second time.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import pathlib
import shutil
import types

import numpy as np
import pytest

from conftest import check_smoke_needs_quick, full_run, load_benchmark

_DATASET_KEYS = {"schema", "machine", "quick", "dataset", "n", "d", "delta", "loss_star", "ridge",
                 "start_excess", "epsilons", "accounting", "init", "select_seed", "report_seed",
                 "timing", "history", "skipped", "families", "seconds_total"}
_FRESH_KEYS = {"algorithm", "steps", "options", "average", "seed", "repeats", "mean", "se",
               "excess_losses", "guard_resets", "gradient_evaluations", "curvature_evaluations",
               "timing_key", "selection_mean", "selection_se", "seconds", "seconds_executions"}


@pytest.fixture(scope="module")
def pu():
  return load_benchmark("privacy_utility")


@pytest.fixture(scope="module")
def fr():
  return load_benchmark("_frontier")


@pytest.fixture(scope="module")
def fit_memo(fr):
  """Memoises ``training.fit_levels`` and ``dpjax.fit`` for this module (restored after it).

  The key is everything a fit depends on: the function, the algorithm, the
  data's bytes and every keyword argument (seed included).
  """
  cache: dict[tuple, object] = {}

  def memo(fn):
    def wrapped(data, algorithm, **kwargs):
      x, y = (np.ascontiguousarray(a) for a in data)
      key = (fn.__name__, algorithm, x.shape, str(x.dtype),
             hashlib.sha1(x.tobytes()).hexdigest(), hashlib.sha1(y.tobytes()).hexdigest(),
             repr(sorted(kwargs.items())))
      if key not in cache:
        cache[key] = fn(data, algorithm, **kwargs)
      return cache[key]
    return wrapped

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(fr.training, "fit_levels", memo(fr.training.fit_levels))
    mp.setattr(fr.dpjax, "fit", memo(fr.dpjax.fit))
    yield cache


@pytest.fixture(scope="module")
def run_mode(fr, request) -> types.SimpleNamespace:
  """The module's run: ``--quick`` under ``pytest --full``, else ``--quick --smoke``."""
  if full_run(request):
    return types.SimpleNamespace(flags=["--quick"], grids=fr.QUICK, dataset=fr.QUICK_DATASET)
  return types.SimpleNamespace(flags=["--quick", "--smoke"], grids=fr.SMOKE,
                               dataset=fr.SMOKE_DATASET)


@pytest.fixture(scope="module")
def quick_run(pu, fr, fit_memo, run_mode, tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp("frontier")
  assert pu.main(["--frontier", *run_mode.flags, "--out-dir", str(out)]) == 0
  return out


def _per_dataset(fr, directory: pathlib.Path, dataset: str | None = None) -> dict:
  name = fr.QUICK_DATASET if dataset is None else dataset
  return json.loads((directory / f"{fr.STEM}_{name}.json").read_text())


def test_outputs_and_schema(fr, run_mode, quick_run):
  """The schema, selection, fresh runs, match, tables and report of this tier's run.

  Everything but the quick run's sizes, which ``test_quick_outputs_and_schema`` pins.
  """
  grids, name = run_mode.grids, run_mode.dataset
  for fname in ("privacy_utility_frontier.json", "privacy_utility_frontier.md",
                "privacy_utility_frontier.png", f"privacy_utility_frontier_{name}.json"):
    assert (quick_run / fname).stat().st_size > 0, fname
  per = _per_dataset(fr, quick_run, name)
  assert set(per) == _DATASET_KEYS
  assert per["quick"] is True and per["dataset"] == name
  assert (per["n"], per["d"]) == fr.GENERATED[name]
  assert per["delta"] == pytest.approx(per["n"] ** -2)
  assert per["epsilons"] == list(grids.epsilons) and per["accounting"] == "gaussian"
  assert per["init"] == "zeros"
  assert {"cpu", "cores", "jax", "commit", "command", "devices"} <= set(per["machine"])
  assert per["history"][0]["command"] == per["machine"]["command"]
  expected = {f for f in fr.FAMILY_IDS if f not in fr.QUICK_SKIPS}
  if fr.auto_module()[0] is None:
    expected.discard("auto")
    assert "auto" in per["skipped"]
  assert set(per["families"]) == expected
  levels = [fr.eps_key(e) for e in per["epsilons"]]
  for fam, rec in per["families"].items():
    assert set(rec["fresh"]) == set(levels), fam
    assert rec["report_repeats"] == 3 and rec["repeats"] == (0 if fam == "auto" else 3), fam
    for lv in levels:
      f = rec["fresh"][lv]
      assert set(f) == _FRESH_KEYS, fam
      # Fresh repeats: seed set B, never the selection's seed set A.
      assert f["seed"] == per["report_seed"] == fr.REPORT_SEED != per["select_seed"]
      assert f["repeats"] == 3 and len(f["excess_losses"]) == 3
      assert f["mean"] == pytest.approx(np.mean(f["excess_losses"]), rel=1e-12)
      assert f["seconds"] == per["timing"][f["timing_key"]]["seconds_run"] > 0
      assert f["seconds_executions"] == per["timing"][f["timing_key"]]["executions"]
      assert f["gradient_evaluations"] == f["steps"]
      if fam == "auto":
        continue
      sel = rec["selected"][lv]
      assert (f["steps"], f["options"], f["average"]) == (sel["steps"], sel["options"],
                                                          sel["average"])
      here = [c for c in rec["candidates"] if lv in c["results"]]
      assert sel["mean"] == min(c["results"][lv]["mean"] for c in here) == f["selection_mean"]
      chosen = next(c for c in here if (c["steps"], c["options"], c["average"]) == (
          sel["steps"], sel["options"], sel["average"]))
      # The fresh losses are other draws than the selection's (first 3 repeats of seed A).
      assert not np.allclose(chosen["results"][lv]["excess_losses"], f["excess_losses"])
      assert len(chosen["results"][lv]["excess_losses"]) == 3
  fams = per["families"]
  assert all(c["average"] == "none" for c in fams["dp-gd"]["candidates"])
  assert all(c["average"] == "last-half" for c in fams["dp-gd+avg"]["candidates"])
  # dp-gd and dp-gd+avg are the same runs read two ways.
  assert ([c["steps"] for c in fams["dp-gd"]["candidates"]]
          == [c["steps"] for c in fams["dp-gd+avg"]["candidates"]])
  assert {c["steps"] for c in fams["dp-gd"]["candidates"]} <= set(grids.gd_steps)
  assert {c["options"]["learning_rate"] for c in fams["dp-gd-step"]["candidates"]} == set(
      grids.step_learning_rates)
  assert all(c["options"]["learning_rate"] * c["steps"] <= grids.max_eta_steps
             for c in fams["dp-gd-step"]["candidates"])
  assert {c["average"] for c in fams["precond-gd"]["candidates"]} == {"none",
                                                                      *grids.precond_averages}
  assert {c["options"]["learning_rate"] for c in fams["precond-gd"]["candidates"]} == set(
      grids.precond_learning_rates)
  assert {c["options"]["kappa"] for c in fams["precond-gd"]["candidates"]} == set(grids.kappas)
  assert {c["steps"] for c in fams["precond-gd"]["candidates"]} == set(grids.precond_steps)
  # The match of dp-gd's selection: the smallest-m candidate reaching it, re-run fresh.
  for lv, mt in fams["precond-gd"]["match"].items():
    assert mt["target"] == fams["dp-gd"]["selected"][lv]["mean"]
    cand = fr.match_candidate(fams["precond-gd"], lv, mt["target"])
    assert (cand["steps"], cand["options"], cand["average"]) == (mt["steps"], mt["options"],
                                                                 mt["average"])
    assert mt["fresh"]["seed"] == fr.REPORT_SEED and len(mt["fresh"]["excess_losses"]) == 3
  assert all(f["curvature_evaluations"] == 1 for f in fams["precond-gd"]["fresh"].values())
  assert all(f["curvature_evaluations"] == f["steps"] for f in fams["qu-clip"]["fresh"].values())
  assert {c["steps"] for c in fams["qu-clip"]["candidates"]} <= set(grids.newton_steps)
  combined = json.loads((quick_run / "privacy_utility_frontier.json").read_text())
  assert {"schema", "machine", "quick", "datasets", "frontier", "acceptance"} <= set(combined)
  assert combined["quick"] is True and [p["dataset"] for p in combined["datasets"]] == [name]
  assert len(combined["frontier"]) == len(fams) * len(levels)
  for r in combined["frontier"]:
    base = fams["dp-gd"]["fresh"][fr.eps_key(r["epsilon"])]["mean"]
    strong = fams["dp-gd-step+avg"]["fresh"][fr.eps_key(r["epsilon"])]["mean"]
    assert r["ratio_dp_gd"] == pytest.approx(r["mean"] / base)
    assert r["ratio_strongest_first_order"] == pytest.approx(r["mean"] / strong)
  assert len(combined["acceptance"]["rows"]) == len(grids.epsilons)
  assert combined["acceptance"]["summary"]["cells"] == len(grids.epsilons)
  assert combined["acceptance"]["summary"] == fr.acceptance_summary(
      combined["acceptance"]["rows"])
  md = (quick_run / "privacy_utility_frontier.md").read_text()
  assert "Acceptance summary" in md and "Quick smoke run" in md
  assert f"## {name}" in md and "seed set B" in md
  for fam in fams:  # one frontier-table row per family
    assert sum(line.startswith(f"| {fams[fam]['label']} |") for line in md.splitlines()) == 1


@pytest.mark.full
def test_quick_outputs_and_schema(fr, quick_run):
  """The quick run's own sizes. Under ``--full`` the module's run is the quick run, so
  ``test_outputs_and_schema`` checks everything else of it (schema, selection, fresh
  runs, match, tables and report) against ``fr.QUICK``."""
  per = _per_dataset(fr, quick_run)
  assert per["quick"] is True and (per["n"], per["d"]) == fr.QUICK_SHAPE
  assert per["epsilons"] == [1.0, 10.0]
  fams = per["families"]
  assert {c["options"]["learning_rate"] for c in fams["dp-gd-step"]["candidates"]} == {4.0, 16.0}
  assert all(c["options"]["learning_rate"] * c["steps"] <= fr.QUICK.max_eta_steps
             for c in fams["dp-gd-step"]["candidates"])
  assert {c["average"] for c in fams["precond-gd"]["candidates"]} == {"none", "last-half"}
  assert {c["options"]["learning_rate"] for c in fams["precond-gd"]["candidates"]} == {1.0, 2.0}
  combined = json.loads((quick_run / "privacy_utility_frontier.json").read_text())
  assert len(combined["acceptance"]["rows"]) == 2
  assert combined["acceptance"]["summary"]["cells"] == 2
  assert f"## {fr.QUICK_DATASET}" in (quick_run / "privacy_utility_frontier.md").read_text()


def test_auto_row(fr, run_mode, quick_run):
  auto, why = fr.auto_module()
  if auto is None:
    pytest.skip(why)
  rec = _per_dataset(fr, quick_run, run_mode.dataset)["families"]["auto"]
  for lv, c in rec["choice"].items():
    assert {"algorithm", "steps", "average", "options", "reason"} <= set(c)
    f = rec["fresh"][lv]
    assert (f["algorithm"], f["steps"], f["average"]) == (c["algorithm"], c["steps"],
                                                          c["average"])
    assert f["selection_mean"] is None and f["seed"] == fr.REPORT_SEED


def test_report_only_rebuilds(fr, quick_run):
  (quick_run / "privacy_utility_frontier.md").unlink()
  assert fr.main(["--quick", "--out-dir", str(quick_run), "--report-only"]) == 0
  assert "Acceptance summary" in (quick_run / "privacy_utility_frontier.md").read_text()


def test_report_only_without_results_exits_2(fr, tmp_path, capsys):
  assert fr.main(["--out-dir", str(tmp_path), "--report-only"]) == 2
  assert "run the benchmark first" in capsys.readouterr().err


def test_privacy_utility_report_ignores_frontier_files(pu, quick_run, capsys):
  # Only frontier files are there: the Table 1 report finds nothing of its own.
  assert pu.main(["--out-dir", str(quick_run), "--report-only"]) == 2
  assert "run the benchmark first" in capsys.readouterr().err


def test_families_merge_keeps_the_others(fr, run_mode, quick_run, tmp_path):
  out = tmp_path / "merge"
  shutil.copytree(quick_run, out)
  before = _per_dataset(fr, out, run_mode.dataset)
  assert fr.main([*run_mode.flags, "--out-dir", str(out), "--families", "qu-clip"]) == 0
  after = _per_dataset(fr, out, run_mode.dataset)
  assert list(after["families"]) == list(before["families"])
  for fam in before["families"]:
    if fam != "qu-clip":
      assert after["families"][fam] == before["families"][fam], fam
  assert [h["families"] for h in after["history"]] == [
      before["history"][0]["families"], ["qu-clip"]]
  assert set(before["timing"]) <= set(after["timing"])
  qu = after["families"]["qu-clip"]
  assert all(qu["fresh"][lv]["timing_key"] in after["timing"] for lv in qu["fresh"])


def test_smoke_needs_quick(fr, tmp_path, capsys):
  check_smoke_needs_quick(fr.main, tmp_path, capsys)


def test_merge_refuses_other_levels(fr):
  old = {"dataset": "x", "n": 10, "d": 2, "epsilons": [1.0], "accounting": "gaussian",
         "init": "zeros", "select_seed": 0, "report_seed": 1, "loss_star": 0.5, "families": {}}
  new = dict(old, epsilons=[1.0, 10.0])
  with pytest.raises(ValueError, match="epsilons"):
    fr.merge(old, new)


def test_missing_data_file_names_the_flag(pu, tmp_path, capsys):
  code = pu.main(["--frontier", "--datasets", "a5a", "--data-dir", str(tmp_path / "none"),
                  "--out-dir", str(tmp_path)])
  assert code == 2
  err = capsys.readouterr().err
  assert "--data-dir" in err and "a5a.bz2" in err


# ----------------------------------------------------------------------------
# The acceptance arithmetic on a hand-made payload.
# ----------------------------------------------------------------------------


def _fresh(mean: float, se: float, algorithm: str = "x") -> dict:
  return {"mean": mean, "se": se, "algorithm": algorithm}


def _cand(steps: int, kappa: float, average: str, means: dict[str, float]) -> dict:
  return {"steps": steps, "options": {"kappa": kappa, "curvature_frac": 0.03},
          "average": average, "run_average": "last-half",
          "results": {lv: {"mean": m, "se": 0.0} for lv, m in means.items()}}


def _match(target_steps: int, steps: int, mean: float, se: float = 0.01) -> dict:
  return {"target": 1.0, "target_steps": target_steps, "steps": steps,
          "options": {"kappa": 3.0, "learning_rate": 1.0}, "average": "last-half",
          "run_average": "last-half", "selection_mean": 0.95,
          "fresh": {"mean": mean, "se": se, "seed": 1, "repeats": 20}}


def _payload() -> dict:
  """Three cells: eps=1 meets every criterion; eps=10 fails each; eps=0.1 never matches."""
  sel_p = {"options": {"kappa": 3.0, "curvature_frac": 0.03}, "average": "last-half"}
  return {
      "dataset": "toy", "epsilons": [0.1, 1.0, 10.0],
      "families": {
          "dp-gd": {
              "selected": {"0.1": {"steps": 200, "mean": 1.0}, "1": {"steps": 800, "mean": 1.0},
                           "10": {"steps": 100, "mean": 1.0}},
              "fresh": {"0.1": _fresh(1.0, 0.05), "1": _fresh(1.0, 0.01),
                        "10": _fresh(1.0, 0.01)}},
          "precond-gd": {
              "selected": {lv: dict(sel_p) for lv in ("0.1", "1", "10")},
              "candidates": [
                  _cand(10, 3.0, "last-half", {"0.1": 1.3, "1": 1.5, "10": 1.2}),
                  _cand(40, 3.0, "last-half", {"0.1": 1.2, "1": 0.95, "10": 0.99}),
                  _cand(160, 3.0, "last-half", {"0.1": 1.1, "1": 0.8}),
              ],
              "match": {"1": _match(800, 40, 0.97), "10": _match(100, 40, 0.99)},
              "fresh": {"0.1": _fresh(1.01, 0.05), "1": _fresh(0.8, 0.01),
                        "10": _fresh(1.02, 0.01)}},
          "dp-gd-step+avg": {"fresh": {"1": _fresh(0.9, 0.01), "10": _fresh(1.1, 0.01)}},
          "auto": {"fresh": {"1": _fresh(0.85, 0.01, "precond-gd"),
                             "10": _fresh(1.5, 0.01, "precond-gd")}},
      },
  }


def test_acceptance_arithmetic(fr):
  rows = {r["epsilon"]: r for r in fr.acceptance_rows([_payload()])}
  good, bad, never = rows[1.0], rows[10.0], rows[0.1]
  assert good["ratio"] == pytest.approx(0.8)
  assert good["no_worse_1se"] and good["ratio_le_0_9"]
  assert (good["dp_gd_steps"], good["precond_steps_to_match"]) == (800, 40)
  assert good["speedup"] == pytest.approx(20.0) and good["speedup_ge_5"]
  assert good["best_tuned"] == "precond-gd" and good["auto_ratio"] == pytest.approx(0.85 / 0.8)
  assert good["auto_le_1_25"]
  # 1.02 > 1.0 + sqrt(0.01^2 + 0.01^2): worse beyond 1 s.e.; m = 40 vs T* = 100 is 2.5x.
  assert bad["ratio"] == pytest.approx(1.02)
  assert not bad["no_worse_1se"] and not bad["ratio_le_0_9"]
  assert bad["precond_steps_to_match"] == 40 and bad["speedup"] == pytest.approx(2.5)
  assert not bad["speedup_ge_5"]
  assert bad["best_tuned"] == "dp-gd" and bad["auto_ratio"] == pytest.approx(1.5)
  assert not bad["auto_le_1_25"]
  # 1.01 <= 1.0 + sqrt(2) 0.05: no worse within 1 s.e.; no grid m reaches 1.0.
  assert never["no_worse_1se"] and not never["ratio_le_0_9"]
  assert never["precond_steps_to_match"] is None and never["speedup"] is None
  assert not never["speedup_ge_5"] and "auto_ratio" not in never
  s = fr.acceptance_summary(list(rows.values()))
  assert s == {"cells": 3, "no_worse_1se": 2, "no_worse_1se_all": False, "ratio_le_0_9": 1,
               "ratio_le_0_9_at_least_half": False, "speedup_ge_5": 1, "speedup_never": 1,
               "match_unconfirmed": 0,
               "speedup_ge_5_all": False, "auto_cells": 2, "auto_le_1_25": 1,
               "auto_le_1_25_all": False}
  # Two wins of three cells meet "at least half".
  p = _payload()
  p["families"]["precond-gd"]["fresh"]["10"] = _fresh(0.85, 0.01)
  s = fr.acceptance_summary(fr.acceptance_rows([p]))
  assert s["ratio_le_0_9"] == 2 and s["ratio_le_0_9_at_least_half"]
  assert s["no_worse_1se"] == 3 and s["no_worse_1se_all"]
  # "Wherever it reaches it": the cell that never reaches dp-gd's loss does not
  # count against the speed-up once every cell that does reach it is >= 5x.
  assert not s["speedup_ge_5_all"]
  p["families"]["dp-gd"]["selected"]["10"]["steps"] = 400  # 400 / 40 = 10x
  p["families"]["precond-gd"]["match"]["10"]["target_steps"] = 400
  s = fr.acceptance_summary(fr.acceptance_rows([p]))
  assert s["speedup_never"] == 1 and s["speedup_ge_5"] == 2 and s["speedup_ge_5_all"]
  assert s["match_unconfirmed"] == 0
  # A match that does not hold on the fresh repeats (1.05 > 1.0 + sqrt(2) 0.01) fails.
  p["families"]["precond-gd"]["match"]["10"]["fresh"]["mean"] = 1.05
  rows10 = {r["epsilon"]: r for r in fr.acceptance_rows([p])}[10.0]
  assert rows10["match_confirmed"] is False and not rows10["speedup_ge_5"]
  s = fr.acceptance_summary(fr.acceptance_rows([p]))
  assert s["match_unconfirmed"] == 1 and not s["speedup_ge_5_all"]
  # A match made against another dp-gd selection is stale: as if never run.
  p["families"]["dp-gd"]["selected"]["10"]["steps"] = 800
  rows10 = {r["epsilon"]: r for r in fr.acceptance_rows([p])}[10.0]
  assert rows10["precond_steps_to_match"] is None and rows10["match_confirmed"] is None


def test_match_candidate_any_configuration(fr):
  """The smallest m over every kappa / eta / output whose selection mean reaches the target."""
  rec = {"candidates": [
      _cand(40, 3.0, "last-half", {"1": 0.9}),
      _cand(20, 6.0, "none", {"1": 0.99}),
      _cand(20, 1.5, "last-half", {"1": 0.97}),
      _cand(10, 1.5, "last-half", {"1": 1.01}),
      _cand(5, 1.5, "last-half", {"0.1": 0.5}),
  ]}
  c = fr.match_candidate(rec, "1", 1.0)
  assert (c["steps"], c["options"]["kappa"], c["average"]) == (20, 1.5, "last-half")
  assert fr.match_candidate(rec, "1", 0.5) is None
  assert fr.match_candidate(rec, "10", 1.0) is None


class _FakeRunner:
  """Returns canned fresh means per steps; records the calls."""

  def __init__(self, means):
    self.means, self.calls = means, []

  def run(self, algorithm, options, run_average, steps, levels, *, seed, repeats):
    self.calls.append(steps)
    stats = {"mean": self.means[steps], "se": 0.01, "excess_losses": [self.means[steps]] * 2}
    return {lv: {"output": stats, "final": stats, "gradient_evaluations": steps}
            for lv in levels}


def test_match_runs_tries_until_confirmed(fr):
  rec = {"algorithm": "precond-gd", "candidates": [
      _cand(5, 1.5, "last-half", {"1": 0.9}), _cand(10, 3.0, "last-half", {"1": 0.95}),
      _cand(20, 6.0, "last-half", {"1": 0.97}), _cand(40, 6.0, "last-half", {"1": 0.98}),
      _cand(80, 6.0, "last-half", {"1": 1.5})]}
  base = {"selected": {"1": {"steps": 800, "mean": 1.0}},
          "fresh": {"1": {"mean": 1.0, "se": 0.01}}}
  runner = _FakeRunner({5: 1.2, 10: 1.1, 20: 1.0, 40: 1.0})
  fr.match_runs(runner, rec, base, 20)
  assert runner.calls == [5, 10, 20]  # the first two fail on the fresh repeats
  m = rec["match"]["1"]
  assert (m["steps"], m["tries"], m["fresh"]["mean"]) == (20, 3, 1.0)
  # None confirmed within MATCH_TRIES: the last tried is kept, and the row says so.
  runner = _FakeRunner({5: 1.2, 10: 1.1, 20: 1.3, 40: 1.0})
  fr.match_runs(runner, rec, base, 20)
  assert runner.calls == [5, 10, 20] and rec["match"]["1"]["tries"] == fr.MATCH_TRIES
  assert not fr._no_worse(rec["match"]["1"]["fresh"], base["fresh"]["1"])


def test_rematch_rewrites_the_match(fr, run_mode, quick_run, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  out = tmp_path / "rematch"
  shutil.copytree(quick_run, out)
  path = out / f"{fr.STEM}_{run_mode.dataset}.json"
  before = json.loads(path.read_text())
  assert fr.main(["--quick", "--rematch", "--out-dir", str(out)]) == 0
  after = json.loads(path.read_text())
  assert after["history"][-1]["families"] == ["precond-gd (match only)"]
  assert len(after["history"]) == len(before["history"]) + 1
  for lv, m in after["families"]["precond-gd"]["match"].items():
    assert 1 <= m["tries"] <= fr.MATCH_TRIES and m["fresh"]["seed"] == fr.REPORT_SEED
  assert (out / "privacy_utility_frontier.md").exists()


def test_acceptance_without_precond_or_auto(fr):
  p = copy.deepcopy(_payload())
  del p["families"]["precond-gd"], p["families"]["auto"]
  rows = fr.acceptance_rows([p])
  assert all("ratio" not in r and "auto_ratio" not in r for r in rows)
  assert fr.acceptance_summary(rows)["cells"] == 0


# ----------------------------------------------------------------------------
# The tuning rules on fake curves.
# ----------------------------------------------------------------------------


def _fake(curves: dict[str, dict], calls: list):
  def run(steps, which):
    calls.append((steps, list(which)))
    return {lv: {m: f(steps) for m, f in curves[lv].items()} | {"start": 2.0} for lv in which}
  return run


def test_tune_steps_early_stop_and_extensions(fr):
  calls = []
  curves = {"u": {"final": lambda t: (t - 8) ** 2 + 1.0},  # best at 8
            "down": {"final": lambda t: 1.0 / t}}          # best always at the top
  history, stopped = fr.tune_steps(_fake(curves, calls), ["u", "down"], (2, 4, 8, 16, 32),
                                   metrics=("final",), early_stop=True)
  assert stopped == {"u": 16} and "down" not in stopped
  assert [t for t, which in calls if "u" in which] == [2, 4, 8, 16]
  assert min(history["down"]["final"], key=history["down"]["final"].get) == 32
  # Up: doubled while the best (by any metric) is the top, to max_steps; down:
  # halved while the best is the bottom.
  calls.clear()
  curves = {"top": {"final": lambda t: 5.0 + 1.0 / t, "output": lambda t: 1.0 / t},
            "bottom": {"final": lambda t: float(t), "output": lambda t: float(t)}}
  history, _ = fr.tune_steps(_fake(curves, calls), ["top", "bottom"], (25, 50), metrics=(
      "final", "output"), max_steps=200, extend_down=True)
  assert calls[2:] == [(100, ["top"]), (200, ["top"]), (12, ["bottom"]), (6, ["bottom"]),
                       (3, ["bottom"]), (1, ["bottom"])]
  assert sorted(history["bottom"]["output"]) == [1, 3, 6, 12, 25, 50]
  # A level whose best is still above the start (diverging) does not stop.
  calls.clear()
  curves = {"div": {"final": {2: 3.0, 4: 4.0, 8: 1.0, 16: 0.5}.get}}
  _, stopped = fr.tune_steps(_fake(curves, calls), ["div"], (2, 4, 8, 16), metrics=("final",),
                             early_stop=True)
  assert stopped == {} and [t for t, _ in calls] == [2, 4, 8, 16]


def test_family_grids(fr):
  full = fr.FULL
  gd = fr.family_curves("dp-gd", full)
  assert len(gd) == 1 and gd[0][0].max_steps == 6400 and gd[0][1] == "final"
  assert fr.family_curves("dp-gd+avg", full)[0][0] == gd[0][0]
  step = fr.family_curves("dp-gd-step+avg", full)
  assert {dict(c.options)["learning_rate"]: max(c.grid) for c, _ in step} == {
      4.0: 3200, 16.0: 800, 64.0: 200}
  pre = fr.family_curves("precond-gd", full)
  outputs = {(dict(c.options)["kappa"], dict(c.options)["learning_rate"],
              c.run_average if m == "output" else "none") for c, m in pre}
  # eta = 1: 3 kappa x {none, last-half, last-quarter}; eta = 2, 4: 3 kappa x {none, last-half}.
  assert len(pre) == 21 and len(outputs) == 21
  assert {lr for _, lr, avg in outputs if avg == "last-quarter"} == {1.0}
  assert all(c.grid == (5, 10, 20, 40, 80, 160, 320, 640) for c, _ in pre)
  newton = fr.family_curves("hess-clip", full)[0][0]
  assert newton.early_stop and newton.grid == (2, 4, 8, 16, 32, 64)
  assert fr.timing_key("precond-gd", 10, "none", {"kappa": 3.0}) == fr.timing_key(
      "precond-gd", 10, "none", {"kappa": 6.0})
  assert math.isclose(fr.FULL.curvature_frac, 0.03)
